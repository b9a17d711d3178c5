//! Fast path of record verification: one pass over the bytes of a canonical record, no JSON tree.
//!
//! [`check_line_fast`] recognises records that are *entirely* valid on their own: canonical
//! form, payload hash, payload shape for its kind, chain hash and parents. It returns `None` for
//! anything else, and the caller then runs the serde-based path in `verify`, which stays the
//! reference and produces the precise error. So this module can only make verification faster,
//! never more permissive: `tests/fast_path.rs` checks that whatever it accepts the reference
//! accepts too, with the same link, and that it accepts every record the writer produces.

use crate::canon::{DEPTH_MAX, put_u64, tag};
use crate::hash::{Hash, chain_link, domain, hasher};
use crate::payload::EventKind;
use crate::verify::Link;

/// Reusable buffers, one per worker.
#[derive(Default)]
pub struct FastScratch {
    canon: Vec<u8>,
    body: Vec<u8>,
    parents: Vec<u64>,
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn lit(&mut self, s: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + s.len())? == s {
            self.i += s.len();
            Some(())
        } else {
            None
        }
    }

    /// Canonical unsigned integer: `0` or a non-zero digit then digits, within u64.
    fn uint(&mut self) -> Option<u64> {
        let first = self.peek()?;
        if !first.is_ascii_digit() {
            return None;
        }
        self.i += 1;
        let mut n = u64::from(first - b'0');
        if first == b'0' {
            return if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                None
            } else {
                Some(0)
            };
        }
        while let Some(c) = self.peek().filter(u8::is_ascii_digit) {
            n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.i += 1;
        }
        Some(n)
    }

    /// `"` + 64 lowercase hex + `"`.
    fn hash(&mut self) -> Option<Hash> {
        let s = self.b.get(self.i..self.i + 66)?;
        if s[0] != b'"' || s[65] != b'"' {
            return None;
        }
        let h = Hash::from_hex_bytes(s[1..65].try_into().ok()?)?;
        self.i += 66;
        Some(h)
    }

    /// A JSON string in serde_json's output form, appended to `out` as canonical length + bytes.
    /// The caller has checked the whole line is UTF-8.
    fn string(&mut self, out: &mut Vec<u8>) -> Option<()> {
        self.lit(b"\"")?;
        let len_at = out.len();
        put_u64(out, 0);
        let start = out.len();
        loop {
            let run_start = self.i;
            while let Some(c) = self.peek() {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                self.i += 1;
            }
            out.extend_from_slice(&self.b[run_start..self.i]);
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    break;
                }
                b'\\' => {
                    let e = *self.b.get(self.i + 1)?;
                    self.i += 2;
                    let c = match e {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            // serde_json writes `\u00xx` (lowercase) only for the other controls.
                            let h = self.b.get(self.i..self.i + 4)?;
                            if &h[..2] != b"00" {
                                return None;
                            }
                            let v = (nibble(h[2])? << 4) | nibble(h[3])?;
                            if v >= 0x20 || matches!(v, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                                return None;
                            }
                            self.i += 4;
                            v
                        }
                        _ => return None,
                    };
                    out.push(c);
                }
                // A raw control character: serde_json never writes one.
                _ => return None,
            }
        }
        let len = (out.len() - start) as u64;
        out[len_at..start].copy_from_slice(&len.to_be_bytes());
        Some(())
    }

    /// Items separated by `,` up to `close` (the opening byte already consumed); returns how
    /// many there were.
    fn items(&mut self, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<u64> {
        let mut count = 0;
        if self.peek()? == close {
            self.i += 1;
            return Some(0);
        }
        loop {
            item(self)?;
            count += 1;
            match self.peek()? {
                b',' => self.i += 1,
                c if c == close => {
                    self.i += 1;
                    return Some(count);
                }
                _ => return None,
            }
        }
    }

    /// A JSON value in canonical form, appended to `out` in the canonical binary encoding.
    fn value(&mut self, out: &mut Vec<u8>, depth: u32) -> Option<()> {
        match self.peek()? {
            b'n' => {
                self.lit(b"null")?;
                out.push(tag::NULL);
            }
            b't' => {
                self.lit(b"true")?;
                out.push(tag::TRUE);
            }
            b'f' => {
                self.lit(b"false")?;
                out.push(tag::FALSE);
            }
            b'"' => {
                out.push(tag::STRING);
                self.string(out)?;
            }
            b'-' => {
                self.i += 1;
                // `-0` is a float to serde_json; magnitudes past 2^63 too.
                if self.peek()? == b'0' {
                    return None;
                }
                let m = self.uint()?;
                if m == 0 || m > 1 << 63 {
                    return None;
                }
                out.push(tag::INT_NEGATIVE);
                put_u64(out, m - 1);
            }
            b'0'..=b'9' => {
                let n = self.uint()?;
                out.push(tag::INT_NON_NEGATIVE);
                put_u64(out, n);
            }
            open @ (b'[' | b'{') => {
                if depth >= FAST_DEPTH_MAX {
                    return None;
                }
                self.i += 1;
                let is_map = open == b'{';
                out.push(if is_map { tag::MAP } else { tag::LIST });
                let count_at = out.len();
                put_u64(out, 0);
                let mut prev_key: Option<(usize, usize)> = None;
                let count = self.items(if is_map { b'}' } else { b']' }, |c| {
                    if is_map {
                        let key_at = out.len();
                        c.string(out)?;
                        let key = (key_at + 8, out.len());
                        // Canonical maps have strictly increasing keys (byte order).
                        if let Some((s, e)) = prev_key
                            && out[s..e] >= out[key.0..key.1]
                        {
                            return None;
                        }
                        prev_key = Some(key);
                        c.lit(b":")?;
                    }
                    c.value(out, depth + 1)
                })?;
                out[count_at..count_at + 8].copy_from_slice(&count.to_be_bytes());
            }
            _ => return None,
        }
        Some(())
    }
}

/// Nesting the fast path handles; deeper payloads go to the reference path, which applies the
/// real limits ([`DEPTH_MAX`] and serde_json's).
const FAST_DEPTH_MAX: u32 = if DEPTH_MAX < 64 { DEPTH_MAX } else { 64 };

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Checks one record (without its `\n`); `Some` only when it is canonical and valid on its own.
pub fn check_line_fast(line: &[u8], s: &mut FastScratch) -> Option<Link> {
    std::str::from_utf8(line).ok()?;
    let mut c = Cursor { b: line, i: 0 };
    c.lit(b"{\"seq\":")?;
    let seq = c.uint()?;
    c.lit(b",\"time\":")?;
    let time = c.uint()?;
    c.lit(b",\"kind\":\"")?;
    let name_start = c.i;
    while c.peek()? != b'"' {
        c.i += 1;
    }
    let kind: EventKind = std::str::from_utf8(&line[name_start..c.i])
        .ok()?
        .parse()
        .ok()?;
    c.lit(b"\",\"parents\":[")?;
    s.parents.clear();
    let parents = &mut s.parents;
    c.items(b']', |c| {
        let p = c.uint()?;
        // Strictly increasing and earlier than the event.
        if p >= seq || parents.last().is_some_and(|&last| last >= p) {
            return None;
        }
        parents.push(p);
        Some(())
    })?;
    c.lit(b",\"payload\":")?;
    s.canon.clear();
    c.value(&mut s.canon, 0)?;
    c.lit(b",\"payload_hash\":")?;
    let payload_hash = c.hash()?;
    c.lit(b",\"state_before\":")?;
    let state_before = c.hash()?;
    c.lit(b",\"state_after\":")?;
    let state_after = c.hash()?;
    c.lit(b",\"prev\":")?;
    let prev = c.hash()?;
    c.lit(b",\"hash\":")?;
    let hash = c.hash()?;
    c.lit(b"}")?;
    if c.i != line.len() {
        return None;
    }
    let mut h = hasher(domain::PAYLOAD);
    h.update(&s.canon);
    if Hash(*h.finalize().as_bytes()) != payload_hash {
        return None;
    }
    if !shape::fits(kind, &s.canon) {
        return None;
    }
    s.body.clear();
    put_u64(&mut s.body, seq);
    put_u64(&mut s.body, time);
    put_u64(&mut s.body, kind.as_str().len() as u64);
    s.body.extend_from_slice(kind.as_str().as_bytes());
    put_u64(&mut s.body, s.parents.len() as u64);
    for p in &s.parents {
        put_u64(&mut s.body, *p);
    }
    s.body.extend_from_slice(&payload_hash.0);
    s.body.extend_from_slice(&state_before.0);
    s.body.extend_from_slice(&state_after.0);
    let mut h = hasher(domain::EVENT_BODY);
    h.update(&s.body);
    if chain_link(&prev, &Hash(*h.finalize().as_bytes())) != hash {
        return None;
    }
    Some(Link {
        seq,
        time,
        kind,
        prev,
        hash,
        state_before,
        state_after,
    })
}

/// Payload shapes checked over the canonical binary encoding (see `payload.rs` for the types
/// these mirror; the differential tests keep the two in step).
mod shape {
    use super::*;

    #[derive(Clone, Copy)]
    enum Field {
        Str,
        U64,
        HashHex,
        Any,
        Map,
        /// A list of strings in strictly increasing order.
        SortedStrings,
        /// `"completed"`, `"failed"` or `"cancelled"`.
        Status,
        /// An optional u64 (`Option<u64>` skipped when `None`): present means a u64.
        OptU64,
        /// An optional string (`Option<String>` skipped when `None`): present means a string.
        OptStr,
        /// An optional hash (`Option<Hash>` skipped when `None`): present means 64 hex digits.
        OptHashHex,
        /// An optional value (`Option<Value>` skipped when `None`): present means any value
        /// (`null` too, which the reference reads as absent and accepts alike).
        OptAny,
    }

    use Field::*;

    /// Fields of each kind's payload, sorted by name (the order canonical maps have).
    fn spec(kind: EventKind) -> &'static [(&'static str, Field)] {
        match kind {
            // `memory` and `domains` are not here: a run with domain settings takes the
            // reference path (one record per run). `key` is a string when present, or
            // `null`, which the reference reads as absent (the writer never writes it).
            EventKind::RunStarted => &[
                ("format", OptU64),
                ("grants", SortedStrings),
                ("inputs", Map),
                ("key", OptStr),
                ("program", Str),
                ("program_hash", HashHex),
                ("seed", U64),
            ],
            EventKind::StepScheduled => &[("attempt", U64), ("step", Str), ("tool", Str)],
            EventKind::CapabilityAllowed => &[("capability", Str), ("grant", Str), ("step", Str)],
            EventKind::CapabilityDenied => &[("capability", Str), ("reason", Str), ("step", Str)],
            EventKind::ToolCalled => &[
                ("attempt", U64),
                ("input", Any),
                ("step", Str),
                ("tool", Str),
                ("tool_version", Str),
            ],
            EventKind::ToolReturned => &[
                ("attempt", U64),
                ("output", Any),
                ("step", Str),
                ("tool", Str),
            ],
            EventKind::ToolFailed => &[
                ("attempt", U64),
                ("error", Str),
                ("step", Str),
                ("tool", Str),
            ],
            EventKind::StateChanged => &[("delete", SortedStrings), ("set", Map)],
            EventKind::Suspended => &[("attempts", U64), ("reason", Str), ("step", Str)],
            EventKind::Resumed => &[("by", OptStr), ("step", Str), ("value", Any)],
            EventKind::RunFinished => &[("by", OptStr), ("reason", Str), ("status", Status)],
            EventKind::Adjudicated => &[
                ("by", OptStr),
                ("effects", Any),
                ("evidence", Str),
                ("handle", Str),
                ("note", Str),
                ("verdict", Str),
            ],
            EventKind::AdjudicationsExpired => {
                &[("expired", Any), ("fired_ms", OptU64), ("now", U64)]
            }
            EventKind::ClaimRecorded => &[("assertion", Any), ("by", OptStr), ("note", Str)],
            EventKind::Reinstated => &[
                ("claim", Str),
                ("effects", Any),
                ("evidence", Str),
                ("note", Str),
            ],
            EventKind::Forked => &[
                ("by", OptStr),
                ("damaged", OptHashHex),
                ("head", HashHex),
                ("key", OptStr),
                ("parent", Str),
                ("reason", OptStr),
                ("seq", U64),
                ("step", OptStr),
                ("value", OptAny),
            ],
            EventKind::PlanUpgraded => &[
                ("by", OptStr),
                ("from", HashHex),
                ("program", Str),
                ("to", HashHex),
            ],
            EventKind::TimerSet => &[
                ("due", Str),
                ("due_ms", U64),
                ("set_ms", U64),
                ("step", Str),
            ],
            EventKind::TimerFired => &[
                ("due_ms", U64),
                ("fired", Str),
                ("fired_ms", U64),
                ("step", Str),
            ],
            EventKind::PatchProposed => &[
                ("base", HashHex),
                ("model_call", OptU64),
                ("plan", Str),
                ("plan_hash", HashHex),
                ("program", Str),
                ("reason", Str),
                ("step", Str),
            ],
        }
    }

    struct R<'a> {
        b: &'a [u8],
        i: usize,
    }

    impl<'a> R<'a> {
        fn byte(&mut self) -> Option<u8> {
            let v = *self.b.get(self.i)?;
            self.i += 1;
            Some(v)
        }
        fn u64(&mut self) -> Option<u64> {
            let s = self.b.get(self.i..self.i + 8)?;
            self.i += 8;
            Some(u64::from_be_bytes(s.try_into().ok()?))
        }
        fn bytes(&mut self) -> Option<&'a [u8]> {
            let n = usize::try_from(self.u64()?).ok()?;
            let s = self.b.get(self.i..self.i.checked_add(n)?)?;
            self.i += n;
            Some(s)
        }
        fn skip(&mut self) -> Option<()> {
            match self.byte()? {
                tag::NULL | tag::FALSE | tag::TRUE => {}
                tag::INT_NON_NEGATIVE | tag::INT_NEGATIVE => {
                    self.u64()?;
                }
                tag::STRING => {
                    self.bytes()?;
                }
                tag::LIST => {
                    for _ in 0..self.u64()? {
                        self.skip()?;
                    }
                }
                tag::MAP => {
                    for _ in 0..self.u64()? {
                        self.bytes()?;
                        self.skip()?;
                    }
                }
                _ => return None,
            }
            Some(())
        }
        /// The string value at the cursor.
        fn string(&mut self) -> Option<&'a [u8]> {
            (self.byte()? == tag::STRING).then_some(())?;
            self.bytes()
        }
    }

    /// Whether the canonical payload `b` has the shape of `kind`'s payload.
    pub(super) fn fits(kind: EventKind, b: &[u8]) -> bool {
        check(kind, b).is_some()
    }

    fn check(kind: EventKind, b: &[u8]) -> Option<()> {
        let mut r = R { b, i: 0 };
        (r.byte()? == tag::MAP).then_some(())?;
        let fields = spec(kind);
        let entries = r.u64()?;
        let required = fields
            .iter()
            .filter(|(_, f)| !matches!(f, OptU64 | OptStr | OptHashHex | OptAny))
            .count() as u64;
        (entries >= required && entries <= fields.len() as u64).then_some(())?;
        let mut seen = 0u64;
        // For state_changed: where `delete` and `set` start, to check they share no key.
        let mut delete_at = None;
        let mut set_at = None;
        for (name, field) in fields {
            if matches!(field, OptU64 | OptStr | OptHashHex | OptAny) {
                // Present only if the next key is this one (keys come sorted).
                let mut peek = R { b: r.b, i: r.i };
                if seen == entries || peek.bytes()? != name.as_bytes() {
                    continue;
                }
            }
            (r.bytes()? == name.as_bytes()).then_some(())?;
            seen += 1;
            let at = r.i;
            match field {
                Str => {
                    r.string()?;
                }
                U64 => {
                    (r.byte()? == tag::INT_NON_NEGATIVE).then_some(())?;
                    r.u64()?;
                }
                HashHex | OptHashHex => {
                    let s = r.string()?;
                    (s.len() == 64 && s.iter().all(|&c| nibble(c).is_some())).then_some(())?;
                }
                Any | OptAny => r.skip()?,
                Map => {
                    (r.b.get(r.i) == Some(&tag::MAP)).then_some(())?;
                    r.skip()?;
                }
                SortedStrings => {
                    (r.byte()? == tag::LIST).then_some(())?;
                    let mut prev: Option<&[u8]> = None;
                    for _ in 0..r.u64()? {
                        let s = r.string()?;
                        prev.is_none_or(|p| p < s).then_some(())?;
                        prev = Some(s);
                    }
                }
                Status => {
                    let s = r.string()?;
                    matches!(s, b"completed" | b"failed" | b"cancelled").then_some(())?;
                }
                // An optional field given as `null` reads as absent (docs/FORMAT.md, "Kinds
                // and payloads"): the reference accepts it, with the hashes of its bytes.
                OptU64 | OptStr if r.b.get(r.i) == Some(&tag::NULL) => r.i += 1,
                OptU64 => {
                    (r.byte()? == tag::INT_NON_NEGATIVE).then_some(())?;
                    r.u64()?;
                }
                OptStr => {
                    r.string()?;
                }
            }
            match *name {
                "delete" => delete_at = Some(at),
                "set" => set_at = Some(at),
                _ => {}
            }
        }
        (seen == entries && r.i == b.len()).then_some(())?;
        if let (Some(d), Some(s)) = (delete_at, set_at) {
            disjoint(b, d, s)?;
        }
        Some(())
    }

    /// `delete` (a sorted list of strings at `d`) and the keys of `set` (a map at `s`, keys
    /// sorted) share no key: a merge walk.
    fn disjoint(b: &[u8], d: usize, s: usize) -> Option<()> {
        let mut dl = R { b, i: d + 1 };
        let mut sm = R { b, i: s + 1 };
        let (mut dn, mut sn) = (dl.u64()?, sm.u64()?);
        let mut dk = if dn > 0 { Some(dl.string()?) } else { None };
        let mut sk = if sn > 0 { Some(sm.bytes()?) } else { None };
        while let (Some(a), Some(k)) = (dk, sk) {
            match a.cmp(k) {
                std::cmp::Ordering::Equal => return None,
                std::cmp::Ordering::Less => {
                    dn -= 1;
                    dk = if dn > 0 { Some(dl.string()?) } else { None };
                }
                std::cmp::Ordering::Greater => {
                    sm.skip()?;
                    sn -= 1;
                    sk = if sn > 0 { Some(sm.bytes()?) } else { None };
                }
            }
        }
        Some(())
    }
}
