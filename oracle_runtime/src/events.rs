//! Outside events sent to a run (`wait.event`): kept beside the run's log until the run
//! consumes them, then recorded as the waiting step's answer (a `resumed` event whose `by` is
//! `event NAME #N`). Only the log proves anything: an event is part of the record once it is
//! consumed, so a replay never reads this directory, and which kept events were consumed is
//! read from the log (never from a file that could disagree with it).
//!
//! Each kept event is one file, `inbox/NNNNNNNNNNNNNNNNNNNN.json` (its number, zero-padded so
//! names sort in the order the events were sent), written atomically under the run's writer
//! lock and sealed with the home's key ([`crate::seal`]): a file the key did not seal (edited,
//! or copied from another run or home) is never delivered.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use oracle_core::Hash;
use oracle_core::payload::Payload;
use oracle_plan::compile::{CompiledPlan, CompiledStep};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::recorded::Recorded;
use crate::seal::SealKey;
use crate::tools::event::WAIT_EVENT_TOOL;

/// The directory of a run's kept events, beside its log.
pub const EVENTS_DIR: &str = "inbox";
/// What a kept event's MAC is for (so a MAC of another kind of file never verifies as one).
const SEAL_PURPOSE: &str = "oracle pending event v1";
/// The longest event name, in bytes.
pub const EVENT_NAME_BYTES_MAX: usize = 64;
/// What a consumed event's `resumed.by` starts with: `event NAME #N`.
const BY_PREFIX: &str = "event ";
/// Kept events a run may hold at once (unconsumed or not): a bound on what a sender can make
/// a run's directory hold.
pub const KEPT_EVENTS_MAX: usize = 1_000;

/// An event name that is not one: names are path segments and log text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("event name `{0}`: 1 to {EVENT_NAME_BYTES_MAX} of a-z, 0-9, `_`, `-`, `.`")]
pub struct BadName(pub String);

/// Whether `name` can name an event.
pub fn check_name(name: &str) -> Result<(), BadName> {
    let ok = !name.is_empty()
        && name.len() <= EVENT_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(BadName(name.to_owned()))
    }
}

/// A `wait.event` step of a plan: its name, and the literal `schema` it gives, if any.
#[derive(Clone, Debug, PartialEq)]
pub struct EventWait {
    pub step: String,
    pub schema: Option<Value>,
}

/// The steps of `plan` that wait on event `name` (a literal `name` argument; a computed one
/// is never matched, so no event can be sent to it).
pub fn waits_on(plan: &CompiledPlan, name: &str) -> Vec<EventWait> {
    let literal = |step: &CompiledStep, arg: &str| {
        let expr = step.call.args.get(arg)?;
        oracle_plan::eval::is_constant(expr)
            .then(|| oracle_plan::eval::eval(expr, &Map::new()).ok())
            .flatten()
    };
    plan.steps
        .iter()
        .filter(|s| s.call.tool == WAIT_EVENT_TOOL)
        .filter(|s| literal(s, "name").as_ref().and_then(Value::as_str) == Some(name))
        .map(|s| EventWait {
            step: s.name.clone(),
            schema: literal(s, "schema"),
        })
        .collect()
}

/// Why an event sent to a run is refused before it is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No `wait.event` step of the run's plan waits on the name.
    Unknown,
    /// The name or the value is not one the run could take (`reason` says why).
    Bad(String),
}

/// Checks event `name` with `value` against the run's plan: some `wait.event` step must wait
/// on the name, and the value must meet every such step's `schema` and the limits of any value
/// given from outside.
pub fn check(plan: &CompiledPlan, name: &str, value: &Value) -> Result<(), Refusal> {
    check_name(name).map_err(|e| Refusal::Bad(e.to_string()))?;
    let waits = waits_on(plan, name);
    if waits.is_empty() {
        return Err(Refusal::Unknown);
    }
    for w in &waits {
        if let Some(schema) = &w.schema {
            let compiled = crate::schema::Schema::compile(schema)
                .map_err(|e| Refusal::Bad(format!("step `{}`'s schema: {e}", w.step)))?;
            compiled.check(value).map_err(|reason| {
                Refusal::Bad(format!(
                    "it does not match step `{}`'s schema: {reason}",
                    w.step
                ))
            })?;
        }
    }
    oracle_core::canon::check(value).map_err(|e| Refusal::Bad(e.to_string()))?;
    crate::session::check_outside_value(value, "the event's value")
        .map_err(|e| Refusal::Bad(e.to_string()))?;
    Ok(())
}

/// A kept event as its file holds it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Kept {
    n: u64,
    name: String,
    value: Value,
    mac: Hash,
}

/// The bytes a kept event's MAC covers.
fn sealed_bytes(n: u64, name: &str, value: &Value) -> Option<Vec<u8>> {
    let v = serde_json::json!({"n": n, "name": name, "value": value});
    oracle_core::canon::encode(&v).ok()
}

fn file_of(dir: &Path, n: u64) -> PathBuf {
    dir.join(EVENTS_DIR).join(format!("{n:020}.json"))
}

/// The numbers of the kept events' files in `dir`, ascending.
fn numbers(dir: &Path) -> std::io::Result<Vec<u64>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir.join(EVENTS_DIR)) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry?.file_name();
        if let Some(n) = name
            .to_str()
            .and_then(|s| s.strip_suffix(".json"))
            .filter(|s| s.len() == 20)
            .and_then(|s| s.parse::<u64>().ok())
        {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Keeps event `name` with `value` beside the run in `dir`, sealed with `key`: the caller
/// holds the run's writer lock and has checked the event ([`check`]). Returns its number.
pub fn keep(dir: &Path, key: &SealKey, name: &str, value: &Value) -> std::io::Result<u64> {
    let held = numbers(dir)?;
    if held.len() >= KEPT_EVENTS_MAX {
        return Err(std::io::Error::other(format!(
            "the run keeps {KEPT_EVENTS_MAX} events already"
        )));
    }
    let n = held.last().map_or(1, |n| n + 1);
    let bytes =
        sealed_bytes(n, name, value).ok_or_else(|| std::io::Error::other("not canonical"))?;
    let kept = Kept {
        n,
        name: name.to_owned(),
        value: value.clone(),
        mac: key.mac(SEAL_PURPOSE, &bytes),
    };
    let text = serde_json::to_vec(&kept).map_err(std::io::Error::other)?;
    std::fs::create_dir_all(dir.join(EVENTS_DIR))?;
    let path = file_of(dir, n);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, &text)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    let _ = std::fs::File::open(dir.join(EVENTS_DIR)).and_then(|d| d.sync_all());
    Ok(n)
}

/// The kept event `n` of `dir`, if its file is there and `key` sealed it.
fn read_kept(dir: &Path, key: &SealKey, n: u64) -> Option<Kept> {
    let text = std::fs::read(file_of(dir, n)).ok()?;
    let kept: Kept = serde_json::from_slice(&text).ok()?;
    let bytes = sealed_bytes(kept.n, &kept.name, &kept.value)?;
    (kept.n == n && key.verify(SEAL_PURPOSE, &bytes, &kept.mac)).then_some(kept)
}

/// Seals every kept event of `dir` with `key` as it is: for a scratch home that adopts a run's
/// files from a store, whose rows vouch for them as they vouch for its bindings.
pub fn adopt(dir: &Path, key: &SealKey) -> std::io::Result<()> {
    for n in numbers(dir)? {
        let text = std::fs::read(file_of(dir, n))?;
        let Ok(mut kept) = serde_json::from_slice::<Kept>(&text) else {
            continue;
        };
        let Some(bytes) = sealed_bytes(kept.n, &kept.name, &kept.value) else {
            continue;
        };
        kept.mac = key.mac(SEAL_PURPOSE, &bytes);
        let path = file_of(dir, n);
        let tmp = path.with_extension("json.tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec(&kept).map_err(std::io::Error::other)?,
        )?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(())
}

/// The `by` of the `resumed` event that records kept event `n` of `name`.
pub fn by_of(name: &str, n: u64) -> String {
    format!("{BY_PREFIX}{name} #{n}")
}

/// The kept event number a `resumed.by` names, if it names one.
fn number_of(by: &str) -> Option<u64> {
    by.strip_prefix(BY_PREFIX)?
        .rsplit_once(" #")?
        .1
        .parse()
        .ok()
}

/// The kept events the log of the run in `dir` records as consumed, read whole; `None` when
/// it cannot be read. Not read at all when no event is kept (`held` is empty).
fn consumed_in(dir: &Path, held: &[u64]) -> Option<BTreeSet<u64>> {
    if held.is_empty() {
        return Some(BTreeSet::new());
    }
    let log = crate::paths::LogPaths::of_run(dir).log;
    Recorded::read(&log).ok().map(|events| consumed(&events))
}

/// The kept events the log records as consumed.
pub fn consumed(events: &Recorded) -> BTreeSet<u64> {
    (events.base()..events.len())
        .filter(|&seq| events.kind(seq) == Some(oracle_core::EventKind::Resumed))
        .filter_map(|seq| match events.event(seq)?.typed() {
            Ok(Payload::Resumed(r)) => r.by.as_deref().and_then(number_of),
            _ => None,
        })
        .collect()
}

/// The kept events a drive may deliver: those sealed by the home's key that the log does not
/// record as consumed, in the order they were sent.
#[derive(Clone, Debug, Default)]
pub struct Inbox {
    pending: Vec<(u64, String, Value)>,
}

impl Inbox {
    /// The events of the run in `dir` its log does not record as consumed (the whole log is
    /// read, only when some event is kept: a drive may hold only its tail). Empty without a
    /// key, or when the log cannot be read.
    pub fn load(dir: &Path, key: Option<&SealKey>) -> Inbox {
        let held = numbers(dir).unwrap_or_default();
        let (Some(key), Some(done)) = (key, consumed_in(dir, &held)) else {
            return Inbox::default();
        };
        let pending = held
            .into_iter()
            .filter(|n| !done.contains(n))
            .filter_map(|n| read_kept(dir, key, n))
            .map(|k| (k.n, k.name, k.value))
            .collect();
        Inbox { pending }
    }

    /// Takes the oldest kept event named `name`: its `by` and its value.
    pub fn take(&mut self, name: &str) -> Option<(String, Value)> {
        let i = self.pending.iter().position(|(_, n, _)| n == name)?;
        let (n, name, value) = self.pending.remove(i);
        Some((by_of(&name, n), value))
    }
}

/// Whether the step whose latest call is `call` waits on an event the run in `dir` keeps.
pub fn kept_for(dir: &Path, call: Option<(String, Value)>) -> bool {
    waiting_name(call).is_some_and(|name| has_pending(dir, &name))
}

/// The event name the step a run suspended on waits for, when its last call is a
/// `wait.event` (from the record).
pub fn waiting_name(call: Option<(String, Value)>) -> Option<String> {
    let (tool, input) = call?;
    (tool == WAIT_EVENT_TOOL)
        .then(|| input.get("name")?.as_str().map(str::to_owned))
        .flatten()
}

/// How long a sender waits for the run's writer lock (a drive in hand) before it gives up,
/// nothing kept.
const LOCK_WAIT_MS: u64 = 10_000;
const LOCK_RETRY_MS: u64 = 50;

/// What [`send`] did: kept the event as number `n`; `waiting` when the run waits on the
/// event's name now, so a resume (given no answer) delivers it.
#[derive(Clone, Debug)]
pub struct Sent {
    pub id: String,
    pub n: u64,
    pub waiting: bool,
}

/// Checks event `name` with `value` against the plan of run `run` of `home` and, under the
/// run's writer lock (waited for a bounded time), keeps it beside the run unless the run has
/// finished. Nothing is kept when anything is refused; nothing is recorded in the log (the
/// event is, when a drive consumes it).
pub fn send(home: &Path, run: &str, name: &str, value: &Value) -> crate::session::Result<Sent> {
    use crate::session::SessionError;
    let found = crate::session::find(home, run)?;
    let refused = |r: Refusal| match r {
        Refusal::Unknown => SessionError::EventUnknown {
            run: found.id.clone(),
            name: name.to_owned(),
        },
        Refusal::Bad(reason) => SessionError::EventRefused {
            run: found.id.clone(),
            name: name.to_owned(),
            reason,
        },
    };
    if crate::code_run::is_code_run(&found.dir) {
        return Err(refused(Refusal::Unknown));
    }
    let plan = crate::session::recorded_plan(&found)?;
    check(&plan, name, value).map_err(refused)?;
    let key = SealKey::open_or_create(home)?;
    let _lock = lock_waiting(&found.paths)?;
    let events = Recorded::read(&found.paths.log)?;
    let last = crate::session::last_program_event(&events).map(|e| e.typed());
    if let Some(Ok(Payload::RunFinished(f))) = &last {
        return Err(SessionError::Finished {
            run: found.id.clone(),
            status: f.status.as_str().into(),
        });
    }
    let n = keep(&found.dir, &key, name, value).map_err(SessionError::io(&found.dir))?;
    let waiting = match &last {
        Some(Ok(Payload::Suspended(s))) => {
            waiting_name(crate::session::latest_call_of(&events, &s.step)).as_deref() == Some(name)
        }
        _ => false,
    };
    Ok(Sent {
        id: found.id,
        n,
        waiting,
    })
}

/// Whether the run in `dir` keeps an event named `name` its log does not record as consumed:
/// by file name and content only (the drive checks each one's seal before it delivers it).
pub fn has_pending(dir: &Path, name: &str) -> bool {
    let held = numbers(dir).unwrap_or_default();
    let Some(done) = consumed_in(dir, &held) else {
        return false;
    };
    held.into_iter().any(|n| {
        !done.contains(&n)
            && std::fs::read(file_of(dir, n))
                .ok()
                .and_then(|t| serde_json::from_slice::<Kept>(&t).ok())
                .is_some_and(|k| k.name == name)
    })
}

/// Takes the writer lock of `paths`, waiting up to [`LOCK_WAIT_MS`] for a drive to let go.
fn lock_waiting(paths: &crate::paths::LogPaths) -> crate::session::Result<std::fs::File> {
    let mut waited = 0;
    loop {
        match crate::writer::lock_for_maintenance(paths) {
            Ok(lock) => return Ok(lock),
            Err(crate::StoreError::Locked { .. }) if waited < LOCK_WAIT_MS => {
                std::thread::sleep(std::time::Duration::from_millis(LOCK_RETRY_MS));
                waited += LOCK_RETRY_MS;
            }
            Err(e) => return Err(e.into()),
        }
    }
}
