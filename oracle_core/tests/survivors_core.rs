//! More tests written for mutants of canon, hash and capability that
//! cargo-mutants found surviving oracle_core's own suite (docs/TESTING.md, "Mutation score").
//! Each pins a byte layout, a message or a boundary the rest of the suite reached only through
//! other crates, or not at all.

use oracle_core::canon::{self, CanonError, DEPTH_MAX, tag};
use oracle_core::capability::{Capability, CapabilityError};
use oracle_core::hash::{self, Hash, HashParseError, domain};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// canon

/// The layout itself, byte by byte, so the writers and `encode` cannot drift together.
#[test]
fn the_encoding_is_the_documented_bytes() {
    let bytes = canon::encode(&json!({"k": [true, "é", -1]})).unwrap();
    let mut expected = vec![tag::MAP];
    expected.extend_from_slice(&1u64.to_be_bytes());
    expected.extend_from_slice(&1u64.to_be_bytes());
    expected.push(b'k');
    expected.push(tag::LIST);
    expected.extend_from_slice(&3u64.to_be_bytes());
    expected.push(tag::TRUE);
    expected.push(tag::STRING);
    expected.extend_from_slice(&2u64.to_be_bytes());
    expected.extend_from_slice("é".as_bytes());
    expected.push(tag::INT_NEGATIVE);
    expected.extend_from_slice(&0u64.to_be_bytes());
    assert_eq!(bytes, expected);

    let mut out = vec![9];
    canon::put_u64(&mut out, 0x0102_0304_0506_0708);
    assert_eq!(out, [9, 1, 2, 3, 4, 5, 6, 7, 8]);
    let mut out = Vec::new();
    canon::put_bytes(&mut out, b"ab");
    assert_eq!(out, [0, 0, 0, 0, 0, 0, 0, 2, b'a', b'b']);
}

#[test]
fn payload_hashes_hash_the_canonical_bytes_in_their_domain() {
    let v = json!({"b": 1, "a": [null, "x"]});
    let bytes = canon::encode(&v).unwrap();
    let (h, len) = canon::payload_hash_and_len(&v).unwrap();
    assert_eq!(len, bytes.len() as u64);
    assert_eq!(h, hash::hash_in(domain::PAYLOAD, &bytes));
    assert_eq!(canon::payload_hash(&v).unwrap(), h);
    assert_eq!(
        canon::hash_value_in(domain::VALUE, &v).unwrap(),
        hash::hash_in(domain::VALUE, &bytes)
    );
    assert_ne!(canon::hash_value_in(domain::VALUE, &v).unwrap(), h);
    assert!(canon::check(&v).is_ok());
    assert!(matches!(
        canon::check(&json!([1.5])),
        Err(CanonError::Float { .. })
    ));
}

/// Paths name each step: a plain key as `.key`, any other key (empty, spaced, dotted) quoted
/// in brackets, a list index in brackets. `TooDeep` carries its path like `Float` does.
#[test]
fn error_paths_quote_every_key_that_is_not_plain() {
    let path = |v: Value| canon::encode(&v).unwrap_err().path().to_owned();
    assert_eq!(path(json!({"a_b-9": 0.5})), "$.a_b-9");
    assert_eq!(path(json!({"": 0.5})), "$[\"\"]");
    assert_eq!(path(json!({"a b": 0.5})), "$[\"a b\"]");
    assert_eq!(path(json!({"a.b": 0.5})), "$[\"a.b\"]");
    assert_eq!(path(json!({"é": 0.5})), "$[\"é\"]");
    assert_eq!(path(json!([0, [1, 2.5]])), "$[1][1]");

    let mut deep = json!(0);
    for _ in 0..=DEPTH_MAX {
        deep = json!({ "x": deep });
    }
    let err = canon::encode(&json!({ "top": [deep] })).unwrap_err();
    assert!(matches!(err, CanonError::TooDeep { .. }), "{err:?}");
    assert!(err.path().starts_with("$.top[0].x.x"), "{}", err.path());
    assert!(
        err.to_string()
            .contains(&format!("deeper than {DEPTH_MAX}"))
    );
    let float = canon::encode(&json!({"f": 0.25})).unwrap_err();
    assert_eq!(
        float.to_string(),
        "float 0.25 at $.f: hashed data has no floats (use an integer, a scaled integer or a string)"
    );
}

// ---------------------------------------------------------------------------------------------
// hash

fn counting() -> Hash {
    let mut b = [0u8; 32];
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(37).wrapping_add(0x0f);
    }
    Hash(b)
}

#[test]
fn hex_is_lowercase_and_exact() {
    let h = counting();
    let hex = h.to_hex();
    assert_eq!(&hex[..8], "0f34597e");
    assert_eq!(hex.len(), 64);
    assert_eq!(h.short(), &hex[..12]);
    assert_eq!(h.to_string(), hex);
    assert_eq!(format!("{h:?}"), format!("Hash({})", &hex[..12]));
    assert_eq!(Hash::from_hex(&hex), Ok(h));
    assert_eq!(hex.parse::<Hash>(), Ok(h));
    assert_eq!(
        Hash::from_hex_bytes(hex.as_bytes().try_into().unwrap()),
        Some(h)
    );
    let all: String = "0123456789abcdef".repeat(4);
    let parsed = Hash::from_hex(&all).unwrap();
    assert_eq!(parsed.to_hex(), all);
    assert_eq!(parsed.0[0], 0x01);
    assert_eq!(parsed.0[7], 0xef);
}

/// Every byte that is not a lowercase hex digit is refused, at its position, whether it is
/// the high or the low half of a byte, and whether one or both halves are bad.
#[test]
fn hex_refuses_each_bad_character_at_its_position() {
    let good = counting().to_hex();
    for at in [0usize, 1, 30, 63] {
        for bad in ['G', 'A', 'F', 'g', ' ', 'x', '/', ':', '`', 'z'] {
            let mut s = good.clone().into_bytes();
            s[at] = bad as u8;
            let s = String::from_utf8(s).unwrap();
            assert_eq!(
                Hash::from_hex(&s),
                Err(HashParseError::Char { at: at as u64 }),
                "{bad:?} at {at}"
            );
            assert_eq!(Hash::from_hex_bytes(s.as_bytes().try_into().unwrap()), None);
        }
    }
    // Both halves of one byte bad: the two marks must not cancel.
    let mut s = good.clone().into_bytes();
    s[2] = b'g';
    s[3] = b'h';
    assert_eq!(Hash::from_hex_bytes(s[..].try_into().unwrap()), None);
    let mut s = good.into_bytes();
    s[10] = b'Z';
    s[41] = b'Z';
    assert_eq!(
        Hash::from_hex(std::str::from_utf8(&s).unwrap()),
        Err(HashParseError::Char { at: 10 })
    );
    assert_eq!(Hash::from_hex(""), Err(HashParseError::Length { len: 0 }));
    assert_eq!(
        Hash::from_hex(&"0".repeat(65)),
        Err(HashParseError::Length { len: 65 })
    );
    assert_eq!(
        HashParseError::Char { at: 3 }.to_string(),
        "a hash is lowercase hex; character 3 is not"
    );
}

#[test]
fn hashes_serialise_as_their_hex_and_say_what_they_expect() {
    let h = counting();
    let text = serde_json::to_string(&h).unwrap();
    assert_eq!(text, format!("\"{}\"", h.to_hex()));
    assert_eq!(serde_json::from_str::<Hash>(&text).unwrap(), h);
    let err = serde_json::from_str::<Hash>("7").unwrap_err().to_string();
    assert!(err.contains("64 lowercase hex characters"), "{err}");
    let err = serde_json::from_str::<Hash>("\"ab\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("64 hex characters, found 2"), "{err}");
}

/// The cached hashers of the known domains give what BLAKE3's `derive_key` gives, whether the
/// context is the constant itself or an equal string built elsewhere.
#[test]
fn domain_hashers_are_blake3_derive_key() {
    let mut distinct = domain::ALL.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), domain::ALL.len(), "each context once");
    let other = ["oracle v1 something else"];
    for context in domain::ALL.into_iter().chain(other) {
        let expected = blake3::derive_key(context, b"bytes");
        assert_eq!(hash::hash_in(context, b"bytes").0, expected, "{context}");
        let copy = String::from(context);
        assert_eq!(hash::hash_in(&copy, b"bytes").0, expected, "{context}");
    }
    let prev = counting();
    let body = Hash([7; 32]);
    let mut joined = prev.0.to_vec();
    joined.extend_from_slice(&body.0);
    assert_eq!(
        hash::chain_link(&prev, &body).0,
        blake3::derive_key(domain::CHAIN, &joined)
    );
}

// ---------------------------------------------------------------------------------------------
// capability

/// Domains and actions may use lowercase letters, digits, `_`, `-` and `.`, or be `*`; nothing
/// else. A capability prints as it was written.
#[test]
fn capability_words_allow_exactly_the_documented_characters() {
    for ok in [
        "fs:read:data/**",
        "net2:http-get.v1:https://example.test:443",
        "a_b:c.d:x",
        "9:0:x",
        "*:*:*",
        "model:-:x",
    ] {
        let cap: Capability = ok.parse().unwrap_or_else(|e| panic!("{ok}: {e}"));
        assert_eq!(cap.to_string(), ok);
    }
    for (bad, part) in [
        ("Fs:read:x", "domain"),
        (":read:x", "domain"),
        ("fs*:read:x", "domain"),
        ("f s:read:x", "domain"),
        ("fs:READ:x", "action"),
        ("fs::x", "action"),
        ("fs:r/w:x", "action"),
    ] {
        match bad.parse::<Capability>() {
            Err(CapabilityError::Part { part: p, .. }) => assert_eq!(p, part, "{bad}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    for bad in ["fs:read", "fs:read:", "fs:read:a b", "fs:read:a\tb"] {
        assert!(
            matches!(bad.parse::<Capability>(), Err(CapabilityError::Shape(_))),
            "{bad}"
        );
    }
}
