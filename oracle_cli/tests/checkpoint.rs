//! End-to-end tests of signed checkpoints with the real binary: `oracle keygen`, `oracle
//! checkpoint [--witness]`, and `oracle verify --pubkey [--witness]` against logs rewritten,
//! relinked, cut short, with forged signatures, other keys, malformed key files, runs that go
//! on after a checkpoint, checkpoints cut off the end of the file (found by default through
//! the witness beside the key, or a witness given), another run's checkpoints, torn checkpoint
//! files (`oracle repair`), old format-1 files and FIFOs given as key files.

use crate::common;

use common::{Sandbox, forge};

use std::fs;

use serde_json::{Value, json};

const RUN: &str = "quickstart-1";

/// A sandbox with a completed quickstart run and a key pair `k` / `k.pub`.
fn signed_run() -> Sandbox {
    let sb = Sandbox::new();
    let (code, out, err) = sb.oracle(&["run", "fixtures/plans/quickstart.plan"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = sb.oracle(&["keygen", "--out", "k"]);
    assert_eq!(code, 0, "{out}{err}");
    sb
}

/// The seq of the run's last event: what `checkpoint` signs.
fn last_seq(sb: &Sandbox) -> u64 {
    sb.events(".oracle", RUN).len() as u64 - 1
}

fn checkpoints_file(sb: &Sandbox) -> std::path::PathBuf {
    sb.path()
        .join(".oracle/runs")
        .join(RUN)
        .join("checkpoints.jsonl")
}

/// `verify RUN --pubkey KEY --json`: the exit code and the object.
fn verify_json(sb: &Sandbox, key: &str) -> (i32, Value) {
    sb.json(&["verify", RUN, "--pubkey", key, "--json"])
}

/// Where `checkpoint --key KEY` keeps the witness of `run` by default, relative to the
/// sandbox: `KEY.witnesses/<run identity>.jsonl`.
fn default_witness(sb: &Sandbox, key: &str, run: &str) -> String {
    format!(
        "{key}.witnesses/{}.jsonl",
        sb.events(".oracle", run)[0].hash.to_hex()
    )
}

#[test]
fn keygen_writes_a_private_secret_key_and_its_public_key() {
    let sb = Sandbox::new();
    let (code, v) = sb.json(&["keygen", "--out", "k", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["ok"], true);
    assert_eq!(v["secret"], "k");
    assert_eq!(v["public"], "k.pub");
    let secret = fs::read_to_string(sb.path().join("k")).unwrap();
    let public = fs::read_to_string(sb.path().join("k.pub")).unwrap();
    assert!(secret.starts_with("oracle-ed25519-secret-v1:"), "{secret}");
    assert_eq!(secret.len(), "oracle-ed25519-secret-v1:".len() + 65);
    assert_eq!(
        public,
        format!(
            "oracle-ed25519-public-v1:{}\n",
            v["public_key"].as_str().unwrap()
        )
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(sb.path().join("k"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the secret key is private");
    }

    // Two runs of keygen give two different keys.
    let (code, w) = sb.json(&["keygen", "--out", "other", "--json"]);
    assert_eq!(code, 0);
    assert_ne!(w["public_key"], v["public_key"]);
}

#[test]
fn keygen_never_overwrites_a_key() {
    let sb = Sandbox::new();
    assert_eq!(sb.oracle(&["keygen", "--out", "k"]).0, 0);
    let before = (
        fs::read(sb.path().join("k")).unwrap(),
        fs::read(sb.path().join("k.pub")).unwrap(),
    );
    let (code, _, err) = sb.oracle(&["keygen", "--out", "k"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("k: already exists"), "{err}");
    let after = (
        fs::read(sb.path().join("k")).unwrap(),
        fs::read(sb.path().join("k.pub")).unwrap(),
    );
    assert_eq!(before, after, "both files unchanged");

    // A stray public key file blocks it too, and no secret key is left behind.
    sb.write("lone.pub", "not mine\n");
    let (code, _, err) = sb.oracle(&["keygen", "--out", "lone"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("lone.pub: already exists"), "{err}");
    assert!(!sb.path().join("lone").exists());
}

#[test]
fn a_checkpoint_verifies_by_run_id_directory_and_log_file() {
    let sb = signed_run();
    let (code, c) = sb.json(&["checkpoint", RUN, "--key", "k", "--json"]);
    assert_eq!(code, 0, "{c}");
    let last = last_seq(&sb);
    assert_eq!(c["seq"], last);
    assert_eq!(c["line"], 1);
    assert_eq!(c["written"], true);
    let events = sb.events(".oracle", RUN);
    let head = events[last as usize].hash;
    let run = events[0].hash;
    assert_eq!(c["head"], head.to_hex());
    assert_eq!(c["run"], run.to_hex());
    assert_eq!(c["format"], 2);
    assert_eq!(
        c["prev"],
        oracle_core::Hash::ZERO.to_hex(),
        "the first link"
    );
    let line = fs::read_to_string(checkpoints_file(&sb)).unwrap();
    assert_eq!(
        line,
        format!(
            "{}\n",
            json!({"format": 2, "head": head.to_hex(), "prev": oracle_core::Hash::ZERO.to_hex(),
                   "public_key": c["public_key"], "run": run.to_hex(), "seq": last,
                   "signature": c["signature"]})
        ),
        "one canonical line"
    );
    assert_eq!(
        c["statement"].as_str().unwrap(),
        line.trim_end(),
        "--json prints it"
    );
    // Copied to the run's witness beside the key, by default.
    let witness = default_witness(&sb, "k", RUN);
    assert_eq!(
        c["witness"],
        json!({"file": witness, "line": 1, "written": true})
    );
    assert_eq!(fs::read_to_string(sb.path().join(&witness)).unwrap(), line);
    // In text, the identity hash is labelled as what it is, not as the run (issue 34).
    let (code, text, _) = sb.oracle(&["checkpoint", RUN, "--key", "k"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!(
            "identity  {} (event 0's chain hash)",
            run.to_hex()
        )),
        "{text}"
    );
    assert!(!text.contains("  run  "), "{text}");

    // The same log named by directory or by file is the same checkpoint file; signing the same
    // head again writes nothing (Ed25519 signatures are deterministic).
    for target in [
        ".oracle/runs/quickstart-1",
        ".oracle/runs/quickstart-1/events.jsonl",
    ] {
        let (code, again) = sb.json(&["checkpoint", target, "--key", "k", "--json"]);
        assert_eq!(code, 0, "{again}");
        assert_eq!(again["written"], false, "{target}");
        assert_eq!(again["line"], 1, "{target}");
        assert_eq!(again["signature"], c["signature"]);
    }
    assert_eq!(fs::read_to_string(checkpoints_file(&sb)).unwrap(), line);

    for target in [
        RUN,
        ".oracle/runs/quickstart-1",
        ".oracle/runs/quickstart-1/events.jsonl",
    ] {
        let (code, out, err) = sb.oracle(&["verify", target, "--pubkey", "k.pub"]);
        assert_eq!(code, 0, "{target}: {out}{err}");
        assert!(out.contains("signed   1 checkpoint(s)"), "{out}");
        assert!(out.contains(&format!("latest at seq {last}")), "{out}");
    }
    let (code, v) = verify_json(&sb, "k.pub");
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["ok"], true);
    assert_eq!(v["checkpoints"]["public_key"], c["public_key"]);
    assert_eq!(
        v["checkpoints"]["verified"],
        json!([{"line": 1, "seq": last, "head": head.to_hex(), "format": 2}])
    );
    assert_eq!(v["checkpoints"]["run"], run.to_hex());
    assert_eq!(
        v["checkpoints"]["witness"],
        json!({"file": witness, "statements": 1, "latest_seq": last})
    );
    assert_eq!(v["checkpoints"]["other_keys"], 0);
    // Without --pubkey the field is there, and null.
    let (code, v) = sb.json(&["verify", RUN, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(v["checkpoints"], Value::Null);

    // A bare log file gets `<log>.checkpoints.jsonl`.
    fs::copy(sb.log(".oracle", RUN), sb.path().join("copy.jsonl")).unwrap();
    assert_eq!(sb.oracle(&["checkpoint", "copy.jsonl", "--key", "k"]).0, 0);
    assert!(sb.path().join("copy.jsonl.checkpoints.jsonl").is_file());
    assert_eq!(
        sb.oracle(&["verify", "copy.jsonl", "--pubkey", "k.pub"]).0,
        0
    );
}

#[test]
fn a_log_rewritten_and_relinked_after_the_checkpoint_is_rejected() {
    let sb = signed_run();
    assert_eq!(sb.oracle(&["checkpoint", RUN, "--key", "k"]).0, 0);
    let log = sb.log(".oracle", RUN);
    let events = sb.events(".oracle", RUN);
    let seq = events
        .iter()
        .position(|e| e.kind == oracle_core::EventKind::ToolReturned)
        .unwrap();
    let last = events.len() - 1;
    let signed = events[last].hash;
    forge(&log, seq, |p| p["output"] = json!("forged"));

    // The chain alone cannot tell: every hash was recomputed.
    let (code, out, err) = sb.oracle(&["verify", RUN]);
    assert_eq!(code, 0, "{out}{err}");
    let found = sb.events(".oracle", RUN)[last].hash;
    assert_ne!(found, signed);

    let (code, _, err) = sb.oracle(&["verify", RUN, "--pubkey", "k.pub"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("checkpoints.jsonl: line 1"), "{err}");
    assert!(err.contains(&format!("checkpoint of seq {last}")), "{err}");
    assert!(err.contains("rewritten after the checkpoint"), "{err}");
    let (code, v) = verify_json(&sb, "k.pub");
    assert_eq!(code, 4);
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["kind"], "checkpoint_rewritten");
    assert_eq!(v["error"]["line"], 1);
    assert_eq!(v["error"]["seq"], last as u64);
    assert_eq!(v["error"]["signed"], signed.to_hex());
    assert_eq!(v["error"]["found"], found.to_hex());
}

#[test]
fn a_flipped_signature_byte_is_rejected() {
    let sb = signed_run();
    assert_eq!(sb.oracle(&["checkpoint", RUN, "--key", "k"]).0, 0);
    let path = checkpoints_file(&sb);
    let text = fs::read_to_string(&path).unwrap();
    let at = text.find(r#""signature":""#).unwrap() + r#""signature":""#.len() + 10;
    let mut bytes = text.into_bytes();
    // Flip one bit of the signature's sixth byte (its hex digit stays a lowercase digit).
    bytes[at] = match bytes[at] {
        b'0' => b'1',
        b'1' => b'0',
        c if c.is_ascii_digit() => c ^ 1,
        c => {
            if c == b'f' {
                b'e'
            } else {
                c + 1
            }
        }
    };
    fs::write(&path, bytes).unwrap();

    let (code, _, err) = sb.oracle(&["verify", RUN, "--pubkey", "k.pub"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(&format!(
            "line 1: the checkpoint of seq {} does not carry a valid signature",
            last_seq(&sb)
        )),
        "{err}"
    );
    let (code, v) = verify_json(&sb, "k.pub");
    assert_eq!(code, 4);
    assert_eq!(v["error"]["kind"], "checkpoint_signature");
    assert_eq!(v["error"]["seq"], last_seq(&sb));
}

#[test]
fn another_key_proves_nothing() {
    let sb = signed_run();
    assert_eq!(sb.oracle(&["checkpoint", RUN, "--key", "k"]).0, 0);
    assert_eq!(sb.oracle(&["keygen", "--out", "k2"]).0, 0);

    // The log is fine, but no checkpoint is by this key: a failure, not a pass.
    let (code, _, err) = sb.oracle(&["verify", RUN, "--pubkey", "k2.pub"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("no checkpoint signed by key"), "{err}");
    assert!(err.contains("(1 by other keys)"), "{err}");
    let (code, v) = verify_json(&sb, "k2.pub");
    assert_eq!(code, 4);
    assert_eq!(v["error"]["kind"], "no_checkpoint");
    assert_eq!(v["error"]["other_keys"], 1);

    // Relabelling k's checkpoint as k2's does not make it k2's: the signature fails.
    let path = checkpoints_file(&sb);
    let k = fs::read_to_string(sb.path().join("k.pub")).unwrap();
    let k2 = fs::read_to_string(sb.path().join("k2.pub")).unwrap();
    let hex = |s: &str| s.trim_end().rsplit(':').next().unwrap().to_owned();
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replace(&hex(&k), &hex(&k2))).unwrap();
    let (code, v) = verify_json(&sb, "k2.pub");
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["kind"], "checkpoint_signature");

    // And with no checkpoint file at all.
    fs::remove_file(&path).unwrap();
    let (code, v) = verify_json(&sb, "k.pub");
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["kind"], "no_checkpoint");
}

#[test]
fn a_log_cut_short_before_the_checkpoint_is_rejected() {
    let sb = signed_run();
    assert_eq!(sb.oracle(&["checkpoint", RUN, "--key", "k"]).0, 0);
    let last = last_seq(&sb);
    let log = sb.log(".oracle", RUN);
    let text = fs::read_to_string(&log).unwrap();
    let kept: String = text.split_inclusive('\n').take(12).collect();
    fs::write(&log, kept).unwrap();
    let (code, out, err) = sb.oracle(&["verify", RUN]);
    assert_eq!(
        code, 0,
        "a cut on a record boundary passes the chain check: {out}{err}"
    );

    let (code, _, err) = sb.oracle(&["verify", RUN, "--pubkey", "k.pub"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(&format!(
            "line 1: the checkpoint of seq {last} is past the end"
        )),
        "{err}"
    );
    assert!(err.contains("(12 events)"), "{err}");
    let (code, v) = verify_json(&sb, "k.pub");
    assert_eq!(code, 4);
    assert_eq!(v["error"]["kind"], "checkpoint_truncated");
    assert_eq!(v["error"]["events"], 12);
}

#[test]
fn a_malformed_checkpoint_line_is_an_integrity_failure() {
    let sb = signed_run();
    assert_eq!(sb.oracle(&["checkpoint", RUN, "--key", "k"]).0, 0);
    let path = checkpoints_file(&sb);
    let mut text = fs::read_to_string(&path).unwrap();
    text.push_str("{\"format\":1}\n");
    fs::write(&path, &text).unwrap();
    let (code, _, err) = sb.oracle(&["verify", RUN, "--pubkey", "k.pub"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("checkpoints.jsonl: line 2: not a checkpoint"),
        "{err}"
    );
    let (code, v) = verify_json(&sb, "k.pub");
    assert_eq!(code, 4);
    assert_eq!(v["error"]["kind"], "checkpoint_malformed");
    assert_eq!(v["error"]["line"], 2);

    // Nothing is appended to a damaged file.
    let (code, _, err) = sb.oracle(&["checkpoint", RUN, "--key", "k"]);
    assert_eq!(code, 4, "{err}");
    assert_eq!(fs::read_to_string(&path).unwrap(), text);
}

#[test]
fn malformed_key_files_are_input_errors_naming_the_file() {
    let sb = signed_run();
    assert_eq!(sb.oracle(&["checkpoint", RUN, "--key", "k"]).0, 0);
    let public = fs::read_to_string(sb.path().join("k.pub")).unwrap();
    let cases = [
        ("garbage.pub", "hello\n".to_owned()),
        ("upper.pub", public.to_uppercase()),
        ("short.pub", public[..public.len() - 3].to_owned() + "\n"),
        ("crlf.pub", public.trim_end().to_owned() + "\r\n"),
        ("empty.pub", String::new()),
    ];
    for (name, text) in &cases {
        sb.write(name, text);
        let (code, _, err) = sb.oracle(&["verify", RUN, "--pubkey", name]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(
            err.contains(&format!("{name}: not a valid oracle public key file")),
            "{err}"
        );
        let (code, v) = verify_json(&sb, name);
        assert_eq!(code, 2, "{name}");
        assert_eq!(v["error"]["kind"], "input");
        assert_eq!(v["error"]["path"], *name);
    }
    // A missing file, and the two halves of a pair swapped.
    let (code, _, err) = sb.oracle(&["verify", RUN, "--pubkey", "missing.pub"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing.pub"), "{err}");
    let (code, _, err) = sb.oracle(&["verify", RUN, "--pubkey", "k"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("k: not a valid oracle public key file: this is an oracle secret key file"),
        "{err}"
    );
    let (code, _, err) = sb.oracle(&["checkpoint", RUN, "--key", "k.pub"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("k.pub: not a valid oracle secret key file"),
        "{err}"
    );
    let (code, _, err) = sb.oracle(&["checkpoint", RUN, "--key", "garbage.pub"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("garbage.pub"), "{err}");
}

#[test]
fn checkpoints_survive_further_appends() {
    let sb = Sandbox::new();
    assert_eq!(sb.oracle(&["keygen", "--out", "k"]).0, 0);
    let run = "escalation-1";
    let (code, out, err) = sb.oracle(&["run", "fixtures/plans/escalation.plan"]);
    assert_eq!(code, 3, "suspended: {out}{err}");
    let (code, first) = sb.json(&["checkpoint", run, "--key", "k", "--json"]);
    assert_eq!(code, 0, "{first}");

    // Resume twice (the run asks for a total, then for approval): events are appended after
    // the checkpoint, which still holds, as does a second one at the new head.
    let (code, out, err) = sb.oracle(&[
        "resume",
        run,
        "--step",
        "total",
        "--value",
        r#"{"value":{"total":1250}}"#,
    ]);
    assert_eq!(code, 3, "{out}{err}");
    let (code, v) = sb.json(&["verify", run, "--pubkey", "k.pub", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert!(v["events"].as_u64().unwrap() > first["seq"].as_u64().unwrap() + 1);
    let (code, second) = sb.json(&["checkpoint", run, "--key", "k", "--json"]);
    assert_eq!(code, 0, "{second}");
    assert_eq!(second["line"], 2);
    let (code, out, err) = sb.oracle(&[
        "resume",
        run,
        "--step",
        "confirm",
        "--value",
        "\"approved\"",
    ]);
    assert_eq!(code, 0, "{out}{err}");

    let (code, v) = sb.json(&["verify", run, "--pubkey", "k.pub", "--json"]);
    assert_eq!(code, 0, "{v}");
    let verified = v["checkpoints"]["verified"].as_array().unwrap();
    assert_eq!(verified.len(), 2);
    assert_eq!(verified[0]["seq"], first["seq"]);
    assert_eq!(verified[1]["seq"], second["seq"]);
    // The run still replays: the checkpoint file is beside the chain, not in it.
    assert_eq!(sb.oracle(&["replay", run]).0, 0);
}

#[test]
fn the_new_commands_explain_themselves() {
    let sb = Sandbox::new();
    for (args, needles) in [
        (
            vec!["keygen", "--help"],
            vec!["--out <FILE>", "FILE.pub", "never overwritten"],
        ),
        (
            vec!["checkpoint", "--help"],
            vec![
                "--key <FILE>",
                "checkpoints.jsonl",
                "--witness <FILE>",
                "--no-witness",
                "KEY.witnesses",
            ],
        ),
        (
            vec!["verify", "--help"],
            vec![
                "--pubkey <FILE>",
                "relinked",
                "--witness <FILE>",
                "--no-witness",
                "KEY.witnesses",
            ],
        ),
    ] {
        let (code, out, _) = sb.oracle(&args);
        assert_eq!(code, 0, "{args:?}");
        for n in needles {
            assert!(out.contains(n), "{args:?} lacks {n}: {out}");
        }
    }
}

/// The escalation run, checkpointed (with a witness `w.jsonl`) while it waits for approval and
/// again once a person approved: the sandbox, the run id, and both `checkpoint --json` objects.
fn approved_with_witness() -> (Sandbox, &'static str, Value, Value) {
    let sb = Sandbox::new();
    assert_eq!(sb.oracle(&["keygen", "--out", "k"]).0, 0);
    let run = "escalation-1";
    let (code, out, err) = sb.oracle(&["run", "fixtures/plans/escalation.plan"]);
    assert_eq!(code, 3, "suspended: {out}{err}");
    let total = r#"{"value":{"total":1250}}"#;
    let (code, out, err) = sb.oracle(&["resume", run, "--step", "total", "--value", total]);
    assert_eq!(code, 3, "{out}{err}");
    let (code, first) = sb.json(&[
        "checkpoint",
        run,
        "--key",
        "k",
        "--witness",
        "w.jsonl",
        "--json",
    ]);
    assert_eq!(code, 0, "{first}");
    assert_eq!(
        first["witness"],
        json!({"file": "w.jsonl", "line": 1, "written": true})
    );
    let (code, out, err) = sb.oracle(&[
        "resume",
        run,
        "--step",
        "confirm",
        "--value",
        "\"approved\"",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, second) = sb.json(&[
        "checkpoint",
        run,
        "--key",
        "k",
        "--witness",
        "w.jsonl",
        "--json",
    ]);
    assert_eq!(code, 0, "{second}");
    assert_eq!(second["line"], 2);
    // The second link names the first.
    let first_line: oracle_runtime::checkpoint::Checkpoint =
        oracle_runtime::checkpoint::Checkpoint::parse_line(first["statement"].as_str().unwrap())
            .unwrap();
    assert_eq!(second["prev"], first_line.line_hash().to_hex());
    // The witness holds exactly the two statements, as checkpoints.jsonl does.
    let witness = fs::read_to_string(sb.path().join("w.jsonl")).unwrap();
    let file = fs::read_to_string(
        sb.path()
            .join(".oracle/runs")
            .join(run)
            .join("checkpoints.jsonl"),
    )
    .unwrap();
    assert_eq!(witness, file);
    (sb, run, first, second)
}

#[test]
fn cutting_the_newest_checkpoint_and_relinking_is_caught_by_the_witness() {
    let (sb, run, first, second) = approved_with_witness();
    let (code, v) = sb.json(&[
        "verify",
        run,
        "--pubkey",
        "k.pub",
        "--witness",
        "w.jsonl",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["checkpoints"]["witness"],
        json!({"file": "w.jsonl", "statements": 2, "latest_seq": second["seq"]})
    );
    let (code, out, _) = sb.oracle(&["verify", run, "--pubkey", "k.pub", "--witness", "w.jsonl"]);
    assert_eq!(code, 0);
    assert!(out.contains("witness  2 statement(s) hold"), "{out}");

    // The attack: delete the newest checkpoint line, then turn the approval into a rejection
    // and relink every hash after it. The remaining checkpoint (taken before the answer) holds.
    let cfile = sb
        .path()
        .join(".oracle/runs")
        .join(run)
        .join("checkpoints.jsonl");
    let text = fs::read_to_string(&cfile).unwrap();
    let kept: String = text.split_inclusive('\n').take(1).collect();
    fs::write(&cfile, kept).unwrap();
    let log = sb.log(".oracle", run);
    let events = sb.events(".oracle", run);
    let answer = events
        .iter()
        .rposition(|e| e.kind == oracle_core::EventKind::Resumed)
        .unwrap();
    assert!(answer as u64 > first["seq"].as_u64().unwrap());
    assert_eq!(events[answer].payload["value"], "approved");
    forge(&log, answer, |p| p["value"] = json!("rejected"));

    // Without a witness this cannot be told (documented in docs/SECURITY.md), which is why
    // checking without one must be asked for, and says what it gives up.
    let (code, out, err) = sb.oracle(&["verify", run, "--pubkey", "k.pub", "--no-witness"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("signed   1 checkpoint(s)"), "{out}");
    assert!(out.contains("witness  none (--no-witness)"), "{out}");
    // Not asked for: the default witness (beside the key) is looked for, and this run has none
    // there (its checkpoints went to w.jsonl).
    let (code, v) = sb.json(&["verify", run, "--pubkey", "k.pub", "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["code"], "witness_missing", "{v}");

    // With it, the checkpoint that was cut is named: the log no longer has its head.
    let seq = second["seq"].as_u64().unwrap();
    let (code, _, err) = sb.oracle(&["verify", run, "--pubkey", "k.pub", "--witness", "w.jsonl"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(&format!("w.jsonl: line 2: the checkpoint of seq {seq}")),
        "{err}"
    );
    assert!(err.contains("rewritten after the checkpoint"), "{err}");
    let (code, v) = sb.json(&[
        "verify",
        run,
        "--pubkey",
        "k.pub",
        "--witness",
        "w.jsonl",
        "--json",
    ]);
    assert_eq!(code, 4);
    assert_eq!(v["error"]["kind"], "checkpoint_rewritten");
    assert_eq!(v["error"]["path"], "w.jsonl");
    assert_eq!(v["error"]["line"], 2);
    assert_eq!(v["error"]["seq"], seq);
}

#[test]
fn cutting_the_newest_checkpoint_alone_is_caught_by_the_witness() {
    let (sb, run, _, second) = approved_with_witness();
    let cfile = sb
        .path()
        .join(".oracle/runs")
        .join(run)
        .join("checkpoints.jsonl");
    let text = fs::read_to_string(&cfile).unwrap();
    let kept: String = text.split_inclusive('\n').take(1).collect();
    fs::write(&cfile, kept).unwrap();
    assert_eq!(
        sb.oracle(&["verify", run, "--pubkey", "k.pub", "--no-witness"])
            .0,
        0
    );
    let seq = second["seq"].as_u64().unwrap();
    let (code, _, err) = sb.oracle(&["verify", run, "--pubkey", "k.pub", "--witness", "w.jsonl"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(&format!(
            "w.jsonl: line 2: the witnessed checkpoint of seq {seq}"
        )),
        "{err}"
    );
    assert!(err.contains("is not in"), "{err}");
    let (code, v) = sb.json(&[
        "verify",
        run,
        "--pubkey",
        "k.pub",
        "--witness",
        "w.jsonl",
        "--json",
    ]);
    assert_eq!(code, 4);
    assert_eq!(v["error"]["kind"], "witness_not_in_file");
    assert_eq!(v["error"]["seq"], seq);

    // A witness from another key, an empty one, and a missing one.
    assert_eq!(sb.oracle(&["keygen", "--out", "k2"]).0, 0);
    let (code, _, err) = sb.oracle(&["verify", run, "--pubkey", "k2.pub", "--witness", "w.jsonl"]);
    assert_eq!(code, 4, "{err}");
    sb.write("empty.jsonl", "");
    let (code, v) = sb.json(&[
        "verify",
        run,
        "--pubkey",
        "k.pub",
        "--witness",
        "empty.jsonl",
        "--json",
    ]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["kind"], "witness_empty");
    let (code, _, err) = sb.oracle(&[
        "verify",
        run,
        "--pubkey",
        "k.pub",
        "--witness",
        "missing.jsonl",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing.jsonl"), "{err}");
    // --witness and --no-witness need --pubkey, and exclude each other.
    let (code, _, _) = sb.oracle(&["verify", run, "--witness", "w.jsonl"]);
    assert_eq!(code, 2);
    let (code, _, _) = sb.oracle(&["verify", run, "--no-witness"]);
    assert_eq!(code, 2);
    let (code, _, _) = sb.oracle(&[
        "verify",
        run,
        "--pubkey",
        "k.pub",
        "--witness",
        "w.jsonl",
        "--no-witness",
    ]);
    assert_eq!(code, 2);
}

/// The escalation run, checkpointed with the defaults while it waits for approval and again
/// once a person approved: the sandbox, the run id, the default witness's path and both
/// `checkpoint --json` objects.
fn approved_by_default() -> (Sandbox, &'static str, String, Value, Value) {
    let sb = Sandbox::new();
    assert_eq!(sb.oracle(&["keygen", "--out", "k"]).0, 0);
    let run = "escalation-1";
    let (code, out, err) = sb.oracle(&["run", "fixtures/plans/escalation.plan"]);
    assert_eq!(code, 3, "suspended: {out}{err}");
    let total = r#"{"value":{"total":1250}}"#;
    let (code, out, err) = sb.oracle(&["resume", run, "--step", "total", "--value", total]);
    assert_eq!(code, 3, "{out}{err}");
    let (code, first) = sb.json(&["checkpoint", run, "--key", "k", "--json"]);
    assert_eq!(code, 0, "{first}");
    let approve = [
        "resume",
        run,
        "--step",
        "confirm",
        "--value",
        "\"approved\"",
    ];
    let (code, out, err) = sb.oracle(&approve);
    assert_eq!(code, 0, "{out}{err}");
    let (code, second) = sb.json(&["checkpoint", run, "--key", "k", "--json"]);
    assert_eq!(code, 0, "{second}");
    let witness = default_witness(&sb, "k", run);
    assert_eq!(second["witness"]["file"], witness.as_str());
    assert_eq!(second["witness"]["line"], 2);
    (sb, run, witness, first, second)
}

/// Red team, issue 32, item 10: cutting the newest checkpoint lines used to pass `verify
/// --pubkey` unless a witness was asked for. The witness is now the default (the run's file in
/// the key's witness directory), so the cut is found with no option given, naming the
/// checkpoint; with the log relinked after the checkpoint that remains, too.
#[test]
fn cutting_the_newest_checkpoint_fails_verify_pubkey_by_default() {
    let (sb, run, witness, _, second) = approved_by_default();
    let (code, out, err) = sb.oracle(&["verify", run, "--pubkey", "k.pub"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("signed   2 checkpoint(s)"), "{out}");
    assert!(
        out.contains(&format!(
            "witness  2 statement(s) hold, latest at seq {}",
            second["seq"]
        )),
        "{out}"
    );

    let cfile = sb
        .path()
        .join(".oracle/runs")
        .join(run)
        .join("checkpoints.jsonl");
    let whole = fs::read_to_string(&cfile).unwrap();
    let kept: String = whole.split_inclusive('\n').take(1).collect();
    fs::write(&cfile, &kept).unwrap();
    let seq = second["seq"].as_u64().unwrap();
    let (code, out, err) = sb.oracle(&["verify", run, "--pubkey", "k.pub"]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        err.contains(&format!(
            "{witness}: line 2: the witnessed checkpoint of seq {seq}"
        )),
        "{err}"
    );
    assert!(err.contains("is not in"), "{err}");
    let (code, v) = sb.json(&["verify", run, "--pubkey", "k.pub", "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["code"], "witness_not_in_file");
    assert_eq!(v["error"]["exit"], 4);
    assert_eq!(v["error"]["path"], witness.as_str());
    assert_eq!(v["error"]["seq"], seq);

    // Both lines cut, and the approval turned into a rejection with every hash after it
    // relinked: the witness names the first statement the log no longer has.
    fs::remove_file(&cfile).unwrap();
    let log = sb.log(".oracle", run);
    let events = sb.events(".oracle", run);
    let answer = events
        .iter()
        .rposition(|e| e.kind == oracle_core::EventKind::Resumed)
        .unwrap();
    forge(&log, answer, |p| p["value"] = json!("rejected"));
    // With no checkpoint file at all, that is said first (exit 4) ...
    let (code, v) = sb.json(&["verify", run, "--pubkey", "k.pub", "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["code"], "no_checkpoint");
    // ... and with the first line put back, the witness's second statement is rewritten.
    fs::write(&cfile, &kept).unwrap();
    let (code, v) = sb.json(&["verify", run, "--pubkey", "k.pub", "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["code"], "checkpoint_rewritten", "{v}");
    assert_eq!(v["error"]["path"], witness.as_str());
    assert_eq!(v["error"]["line"], 2);

    // A default witness that is missing fails as well (removing it is another way to cut).
    fs::remove_file(sb.path().join(&witness)).unwrap();
    let (code, out, err) = sb.oracle(&["verify", run, "--pubkey", "k.pub"]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(err.contains("no witness of this run by this key"), "{err}");
    assert!(err.contains("--no-witness"), "{err}");
    let (code, v) = sb.json(&["verify", run, "--pubkey", "k.pub", "--json"]);
    assert_eq!(code, 4);
    assert_eq!(v["error"]["code"], "witness_missing");
    assert_eq!(v["error"]["path"], witness.as_str());
    // Asked for, the checkpoint file alone is checked, and passes: the limit of no witness.
    let (code, out, err) = sb.oracle(&["verify", run, "--pubkey", "k.pub", "--no-witness"]);
    assert_eq!(code, 0, "{out}{err}");
    // `checkpoint --no-witness` writes no witness.
    let (code, c) = sb.json(&["checkpoint", run, "--key", "k", "--no-witness", "--json"]);
    assert_eq!(code, 0, "{c}");
    assert_eq!(c["witness"], Value::Null);
    assert!(!sb.path().join(&witness).exists());
}

#[test]
fn another_runs_checkpoint_is_refused_by_name() {
    let sb = Sandbox::new();
    assert_eq!(sb.oracle(&["keygen", "--out", "k"]).0, 0);
    for seed in ["1", "2"] {
        let (code, out, err) =
            sb.oracle(&["run", "fixtures/plans/quickstart.plan", "--seed", seed]);
        assert_eq!(code, 0, "{out}{err}");
    }
    assert_eq!(
        sb.oracle(&["checkpoint", "quickstart-1", "--key", "k"]).0,
        0
    );
    let dir = sb.path().join(".oracle/runs");
    fs::copy(
        dir.join("quickstart-1/checkpoints.jsonl"),
        dir.join("quickstart-2/checkpoints.jsonl"),
    )
    .unwrap();
    let ours = sb.events(".oracle", "quickstart-2")[0].hash;
    let theirs = sb.events(".oracle", "quickstart-1")[0].hash;
    assert_ne!(ours, theirs);
    let (code, _, err) = sb.oracle(&["verify", "quickstart-2", "--pubkey", "k.pub"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains(&format!(
            "line 1: checkpoint 1 (seq {}) was signed for run {}, this log's run is {}",
            sb.events(".oracle", "quickstart-1").len() - 1,
            theirs.short(),
            ours.short()
        )),
        "{err}"
    );
    let (code, v) = sb.json(&["verify", "quickstart-2", "--pubkey", "k.pub", "--json"]);
    assert_eq!(code, 4);
    assert_eq!(v["error"]["kind"], "checkpoint_other_run");
    assert_eq!(v["error"]["signed_run"], theirs.to_hex());
    assert_eq!(v["error"]["run"], ours.to_hex());
    // Nor will `checkpoint` extend another run's chain.
    let (code, _, err) = sb.oracle(&["checkpoint", "quickstart-2", "--key", "k"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("was signed for run"), "{err}");
}

#[test]
fn a_torn_checkpoint_file_is_mended_by_repair_and_damage_before_it_is_not() {
    let sb = signed_run();
    assert_eq!(sb.oracle(&["checkpoint", RUN, "--key", "k"]).0, 0);
    let path = checkpoints_file(&sb);
    let whole = fs::read_to_string(&path).unwrap();

    // A second line cut short (no newline), and a last line that is not a checkpoint.
    for torn in [&whole[..40], "{\"format\":2,\"head\":\"00\"}\n"] {
        let damaged = format!("{whole}{torn}");
        fs::write(&path, &damaged).unwrap();
        let (code, _, err) = sb.oracle(&["verify", RUN, "--pubkey", "k.pub"]);
        assert_eq!(code, 4, "{err}");
        assert!(err.contains("line 2: not a checkpoint"), "{err}");

        let (code, v) = sb.json(&["repair", RUN, "--json"]);
        assert_eq!(code, 0, "{v}");
        let c = &v["checkpoints"];
        assert_eq!(c["repaired"], true, "{v}");
        assert_eq!(c["lines"], 1);
        assert_eq!(c["torn_offset"], whole.len());
        assert_eq!(c["torn_bytes"], torn.len());
        let saved = c["saved_to"].as_str().unwrap();
        assert_eq!(
            fs::read_to_string(sb.path().join(saved)).unwrap(),
            torn,
            "saved aside"
        );
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            whole,
            "cut to the whole lines"
        );
        let (code, out, err) = sb.oracle(&["verify", RUN, "--pubkey", "k.pub"]);
        assert_eq!(code, 0, "{out}{err}");
    }
    // Nothing more to do the second time.
    let (code, v) = sb.json(&["repair", RUN, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(v["checkpoints"], json!({"repaired": false, "lines": 1}));

    // A damaged line before the last is never dropped: exit 4, the file as it was.
    let damaged = format!("{{\"format\":2}}\n{whole}");
    fs::write(&path, &damaged).unwrap();
    let (code, _, err) = sb.oracle(&["repair", RUN]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("checkpoints.jsonl: line 1: not a checkpoint"),
        "{err}"
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), damaged);
}

#[test]
fn an_old_format_1_checkpoint_file_still_verifies_and_is_extended() {
    use oracle_runtime::checkpoint::{Checkpoint, SecretKey};
    let sb = Sandbox::new();
    let (code, out, err) = sb.oracle(&["run", "fixtures/plans/escalation.plan"]);
    assert_eq!(code, 3, "{out}{err}");
    let run = "escalation-1";
    let key = SecretKey::from_seed(&[42; 32]);
    sb.write("old.pub", &key.public_key().to_file_text());
    sb.write("old", &key.to_file_text());
    let events = sb.events(".oracle", run);
    let last = events.len() as u64 - 1;
    let old = Checkpoint::sign_v1(&key, last, events[last as usize].hash);
    let cfile = sb
        .path()
        .join(".oracle/runs")
        .join(run)
        .join("checkpoints.jsonl");
    fs::write(&cfile, old.to_line()).unwrap();
    assert!(old.to_line().starts_with(r#"{"format":1,"#));

    // Signed by hand: no witness was written, so it is checked without one.
    let (code, v) = sb.json(&[
        "verify",
        run,
        "--pubkey",
        "old.pub",
        "--no-witness",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["checkpoints"]["verified"][0]["format"], 1);

    // A new checkpoint follows the old line (its prev is the old line's hash).
    let total = r#"{"value":{"total":1250}}"#;
    assert_eq!(
        sb.oracle(&["resume", run, "--step", "total", "--value", total])
            .0,
        3
    );
    let (code, c) = sb.json(&["checkpoint", run, "--key", "old", "--json"]);
    assert_eq!(code, 0, "{c}");
    assert_eq!(c["prev"], old.line_hash().to_hex());
    let (code, v) = sb.json(&["verify", run, "--pubkey", "old.pub", "--json"]);
    assert_eq!(code, 0, "{v}");
    let formats: Vec<&Value> = v["checkpoints"]["verified"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["format"])
        .collect();
    assert_eq!(formats, [&json!(1), &json!(2)]);

    // The old line rewritten for another seq fails its signature, as before.
    let forged = old
        .to_line()
        .replace(&format!("\"seq\":{last}"), &format!("\"seq\":{}", last - 1));
    let text = fs::read_to_string(&cfile).unwrap();
    fs::write(&cfile, text.replacen(&old.to_line(), &forged, 1)).unwrap();
    let (code, _, err) = sb.oracle(&["verify", run, "--pubkey", "old.pub"]);
    assert_eq!(code, 4, "{err}");
}

/// Runs `oracle ARGS` in the sandbox and kills it if it has not exited within a generous
/// bound, so that a command stuck on a FIFO fails the test instead of hanging it.
#[cfg(unix)]
fn oracle_or_kill(sb: &Sandbox, args: &[&str]) -> (i32, String) {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = sb
        .command(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code().unwrap_or(-1), err);
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{args:?} was still running after 30 s: it waits on the FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[cfg(unix)]
#[test]
fn a_fifo_given_as_a_key_or_witness_is_refused_not_waited_on() {
    let sb = signed_run();
    assert_eq!(sb.oracle(&["checkpoint", RUN, "--key", "k"]).0, 0);
    let status = std::process::Command::new("mkfifo")
        .arg(sb.path().join("fifo"))
        .status()
        .unwrap();
    assert!(status.success());
    let before = fs::read(checkpoints_file(&sb)).unwrap();
    for args in [
        vec!["verify", RUN, "--pubkey", "fifo"],
        vec!["checkpoint", RUN, "--key", "fifo"],
        vec!["verify", RUN, "--pubkey", "k.pub", "--witness", "fifo"],
        vec!["checkpoint", RUN, "--key", "k", "--witness", "fifo"],
    ] {
        let (code, err) = oracle_or_kill(&sb, &args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("not a regular file"), "{args:?}: {err}");
    }
    assert_eq!(fs::read(checkpoints_file(&sb)).unwrap(), before);
}
