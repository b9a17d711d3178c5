//! A store's signal rows: typed and versioned, read back as written, and refused (typed, with
//! the reason, nothing carried out) when they come from another format or name another run.

use oracle_host::signal::{Answer, DriveSettings, SIGNAL_FORMAT, Signal};
use oracle_host::{Given, HostError};
use oracle_memory::{Provenance, Verdict};
use oracle_runtime::adjudication::Submission;
use oracle_runtime::writer::Durability;
use serde_json::json;

fn signals() -> Vec<Signal> {
    vec![
        Signal::Resume {
            run: "r-1".into(),
            answer: Some(Answer {
                step: "ask".into(),
                value: json!({"ok": true}),
                by: Some("alice".into()),
            }),
            given: Given {
                models: vec!["fast=http://127.0.0.1:1/v1".into()],
                ..Given::default()
            },
            drive: DriveSettings::default(),
            allow_tool_change: false,
        },
        Signal::Adjudicate {
            run: "r-1".into(),
            verdict: Submission {
                handle: "adj-3".into(),
                verdict: Verdict::Affirm,
                evidence: Provenance::ExternalFirstHand,
                note: "seen".into(),
                now: Some(9),
                by: None,
            },
            durability: Durability::Group { events_max: 10 },
            resume: true,
        },
        Signal::Resume {
            run: "r-1".into(),
            answer: Some(Answer {
                step: "ask".into(),
                value: json!("yes"),
                by: None,
            }),
            given: Given::default(),
            drive: DriveSettings::default(),
            allow_tool_change: false,
        },
        Signal::Sweep {
            run: "r-1".into(),
            now: None,
            durability: Durability::Effect,
        },
    ]
}

#[test]
fn a_row_reads_back_as_the_signal_written() {
    for s in signals() {
        let row = s.to_row();
        assert_eq!(row["format"], SIGNAL_FORMAT);
        assert_eq!(row["signal"]["kind"], s.kind());
        let back = Signal::from_row("r-1", &row).unwrap();
        assert_eq!(back.to_row(), row);
    }
}

#[test]
fn rows_of_another_format_another_run_or_shape_are_refused() {
    let row = signals()[0].to_row();
    let refused = |row: &serde_json::Value, run: &str, why: &str| match Signal::from_row(run, row) {
        Err(e @ HostError::Signal { .. }) => {
            assert_eq!(e.code(), "bad_signal");
            assert!(e.to_string().contains(why), "{e}");
        }
        other => panic!(
            "{row}: expected a refusal, got {:?}",
            other.map(|s| s.kind())
        ),
    };
    refused(&row, "r-2", "another run");
    let mut old = row.clone();
    old["format"] = json!(1);
    refused(&old, "r-1", "format 1");
    refused(&json!({"argv": ["resume", "r-1"]}), "r-1", "argument list");
    let mut extra = row.clone();
    extra["signal"]["shell"] = json!("rm -rf /");
    refused(&extra, "r-1", "not one");
    refused(&json!({"signal": row["signal"]}), "r-1", "without a format");
}

#[test]
fn an_answer_queued_before_answers_named_who_gave_them_still_reads() {
    // A row written by an oracle whose answers had no `by` (the command line's still have none).
    let row = json!({"format": SIGNAL_FORMAT, "signal": {
        "kind": "resume", "run": "r-1",
        "answer": {"step": "ask", "value": "yes"},
        "given": Given::default(), "drive": DriveSettings::default(),
        "allow_tool_change": false,
    }});
    let Signal::Resume { answer, .. } = Signal::from_row("r-1", &row).unwrap() else {
        panic!("a resume");
    };
    assert_eq!(answer.unwrap().by, None);
}
