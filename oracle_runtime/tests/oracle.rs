//! The oracle port: pending adjudication requests are delivered once, failed deliveries are
//! recorded and retried a bounded number of times, and the pending request is never lost.

use std::fs;

use oracle_runtime::adjudication;
use oracle_runtime::oracle::{
    NOTIFY_ATTEMPTS_MAX, NotifyError, OUTBOX_FILE, OraclePort, notify_pending,
};
use oracle_runtime::session::{self, StartOptions};
use oracle_runtime::{Durability, tools};
use serde_json::Value;

const PLAN: &str = r#"plan conflict version 1
a = memory.assert { subject: "door", predicate: "state", value: "open", provenance: "external_first_hand" }
b = memory.assert { subject: "door", predicate: "state", value: "shut", provenance: "user_asserted", criticality: "high" }
  after a
"#;

/// A port that fails its first `failures` deliveries and keeps what it was sent.
struct Flaky {
    failures: u64,
    sent: Vec<Value>,
}

impl OraclePort for Flaky {
    fn notify(&mut self, request: &Value) -> Result<Option<Value>, NotifyError> {
        self.sent.push(request.clone());
        if self.failures > 0 {
            self.failures -= 1;
            return Err(NotifyError::Port("oracle unreachable".into()));
        }
        Ok(None)
    }
}

fn conflicted_run() -> (tempfile::TempDir, session::Session) {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("conflict.plan");
    fs::write(&plan, PLAN).unwrap();
    let opts = StartOptions {
        durability: Durability::None,
        ..StartOptions::new(&dir.path().join("home"), &plan)
    };
    let s = session::start(&opts, &tools::builtin()).unwrap();
    (dir, s)
}

fn outbox(s: &session::Session) -> Vec<Value> {
    fs::read_to_string(s.dir.join(OUTBOX_FILE))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_failed_delivery_is_recorded_retried_and_then_delivered_once() {
    let (dir, s) = conflicted_run();
    let home = dir.path().join("home");
    let rm = adjudication::load(&home, &s.id).unwrap();
    let mut port = Flaky {
        failures: 1,
        sent: vec![],
    };
    let first = notify_pending(&s.dir, &s.id, &rm.memory, &mut port).unwrap();
    assert_eq!(first.failed.len(), 1, "{first:?}");
    assert!(first.delivered.is_empty());
    let handle = first.failed[0].0.clone();
    assert!(handle.starts_with("adj-"), "{handle}");
    // The request names the line, both claims and why.
    let req = &port.sent[0];
    assert_eq!(req["handle"], handle.as_str());
    assert_eq!(req["subject"], "door");
    assert_eq!(req["incumbent"]["value"], "open");
    assert_eq!(req["challenger"]["value"], "shut");
    assert_eq!(req["criticality"], "high");
    assert_eq!(outbox(&s)[0]["delivered"], false);
    assert_eq!(outbox(&s)[0]["error"], "oracle unreachable");

    // Still pending in the log, so a later round delivers it, and only once.
    let second = notify_pending(&s.dir, &s.id, &rm.memory, &mut port).unwrap();
    assert_eq!(second.delivered, vec![handle.clone()]);
    let third = notify_pending(&s.dir, &s.id, &rm.memory, &mut port).unwrap();
    assert_eq!(third, Default::default(), "nothing left to send");
    assert_eq!(port.sent.len(), 2);
    let lines = outbox(&s);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["attempt"], 2);
    assert_eq!(lines[1]["delivered"], true);
    // Delivery is not part of the run: the log is as the run left it.
    let after = adjudication::load(&home, &s.id).unwrap();
    assert_eq!(after.events, rm.events);
    assert_eq!(after.memory.requests().count(), 1);
}

#[test]
fn deliveries_stop_after_the_attempt_limit_and_the_request_stays_pending() {
    let (dir, s) = conflicted_run();
    let rm = adjudication::load(&dir.path().join("home"), &s.id).unwrap();
    let mut port = Flaky {
        failures: u64::MAX,
        sent: vec![],
    };
    for _ in 0..NOTIFY_ATTEMPTS_MAX {
        let n = notify_pending(&s.dir, &s.id, &rm.memory, &mut port).unwrap();
        assert_eq!(n.failed.len(), 1);
    }
    let n = notify_pending(&s.dir, &s.id, &rm.memory, &mut port).unwrap();
    assert!(n.failed.is_empty() && n.delivered.is_empty());
    assert_eq!(n.exhausted.len(), 1);
    assert_eq!(port.sent.len() as u64, NOTIFY_ATTEMPTS_MAX);
    // Pending in what the run's files hold now, read again after the deliveries (the memory
    // loaded before them could not show a request the deliveries dropped or resolved): the
    // log is unchanged, and the exhausted request is pending in it.
    let home = dir.path().join("home");
    let after = adjudication::load(&home, &s.id).unwrap();
    assert_eq!(after.events, rm.events, "deliveries never write the log");
    let pending: Vec<String> = after
        .memory
        .requests()
        .filter(|r| r.status == oracle_memory::RequestStatus::Pending)
        .map(|r| r.request.handle.clone())
        .collect();
    assert_eq!(pending, [n.exhausted[0].clone()]);
}

#[test]
fn a_torn_outbox_line_from_a_crash_is_skipped() {
    let (dir, s) = conflicted_run();
    let rm = adjudication::load(&dir.path().join("home"), &s.id).unwrap();
    fs::write(s.dir.join(OUTBOX_FILE), "{\"handle\": \"adj-").unwrap();
    let mut port = Flaky {
        failures: 0,
        sent: vec![],
    };
    let n = notify_pending(&s.dir, &s.id, &rm.memory, &mut port).unwrap();
    assert_eq!(n.delivered.len(), 1);
    // The delivery was recorded on a line of its own: it is not sent again.
    let again = notify_pending(&s.dir, &s.id, &rm.memory, &mut port).unwrap();
    assert_eq!(again, Default::default());
    assert_eq!(port.sent.len(), 1);
}
