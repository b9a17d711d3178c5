//! Fuzz target `log`: arbitrary bytes as a log file, through the in-memory verifier
//! (`verify_bytes`), the record decoder, the byte-level fast path, and the streaming file reader
//! of `oracle_runtime` (via a temporary file).
//!
//! Properties checked, beyond "never panics":
//! - an accepted log decodes record by record, each record re-encodes to exactly its bytes, and
//!   the decoded events verify to the same head, which the log is then found to contain;
//! - a rejected log names a failure whose records before it verify on their own (integrity: the
//!   failure is at a record boundary; torn tail: exactly the bytes after the last newline);
//! - the fast path never accepts a line the serde reference rejects, and agrees on its link;
//! - the file reader (`verify_file`, `scan`) reaches exactly the verdict of `verify_bytes`;
//! - every line that parses as an event, re-sealed by the `Recorder` (the writer's path), is
//!   accepted by the fast path, and the re-sealed log verifies and replays.

use std::io::Write;

use oracle_core::fast::{FastScratch, check_line_fast};
use oracle_core::payload::Payload;
use oracle_core::record;
use oracle_core::verify::{
    Head, LogBytesError, check_line_reference, split_records, verify_bytes, verify_events,
};
use oracle_core::{Event, Link, Recorder};
use oracle_runtime::StoreError;
use oracle_runtime::reader::{self, VerifyOptions};

/// Checks every property above on one input.
pub fn check(data: &[u8]) {
    let verdict = verify_bytes(data, None);
    let events = check_verdict(data, &verdict);
    check_lines(data);
    check_file(data, &verdict, events.as_deref());
    check_resealed(data);
}

/// The verdict of `verify_bytes` is consistent with the bytes. Returns the decoded events of an
/// accepted log.
fn check_verdict(data: &[u8], verdict: &Result<Head, LogBytesError>) -> Option<Vec<Event>> {
    match verdict {
        Ok(head) => {
            let (lines, tail) = split_records(data);
            assert!(tail.is_empty(), "an accepted log has no torn tail");
            let mut scratch = Vec::new();
            let mut events = Vec::new();
            for (offset, line) in lines {
                let event = record::decode(line, &mut scratch).unwrap_or_else(|e| {
                    panic!("accepted log, but the record at byte {offset} does not decode: {e}")
                });
                let mut again = record::encode(&event);
                assert_eq!(again.pop(), Some(b'\n'));
                assert!(
                    again == line,
                    "record at byte {offset} re-encodes differently"
                );
                events.push(event);
            }
            assert_eq!(head.next_seq, events.len() as u64);
            assert_eq!(verify_events(&events), Ok(*head));
            if let (Some(first), Some(last)) = (events.first(), events.last()) {
                assert_eq!(head.hash, last.hash);
                assert_eq!(verify_bytes(data, Some(first.hash)), Ok(*head));
                assert_eq!(verify_bytes(data, Some(last.hash)), Ok(*head));
            }
            Some(events)
        }
        Err(LogBytesError::Integrity { error, offset }) => {
            let at = usize::try_from(*offset).expect("offset within the input");
            assert!(at < data.len(), "failure at byte {at} of {}", data.len());
            assert!(
                at == 0 || data[at - 1] == b'\n',
                "failure not at a record start"
            );
            let prefix = verify_bytes(&data[..at], None)
                .unwrap_or_else(|e| panic!("the records before the failure do not verify: {e}"));
            assert_eq!(prefix.next_seq, error.seq, "failure seq");
            None
        }
        Err(LogBytesError::TornTail { seq, offset, len }) => {
            let at = usize::try_from(*offset).expect("offset within the input");
            assert!(*len > 0);
            assert_eq!(
                *offset + *len,
                data.len() as u64,
                "the torn tail ends the input"
            );
            assert!(!data[at..].contains(&b'\n'), "a torn tail has no newline");
            assert!(at == 0 || data[at - 1] == b'\n');
            let prefix = verify_bytes(&data[..at], None)
                .unwrap_or_else(|e| panic!("the records before a torn tail do not verify: {e}"));
            assert_eq!(prefix.next_seq, *seq);
            None
        }
        Err(e @ LogBytesError::HeadNotFound { .. }) => {
            panic!("no head was expected, yet: {e}")
        }
    }
}

/// Line by line: the fast path agrees with the reference, and whatever the record decoder
/// accepts re-encodes to the same bytes.
fn check_lines(data: &[u8]) {
    let (lines, _) = split_records(data);
    let mut fast = FastScratch::default();
    let mut scratch = Vec::new();
    for (offset, line) in lines {
        let reference = check_line_reference(line, &mut scratch);
        if let Some(link) = check_line_fast(line, &mut fast) {
            match &reference {
                Ok((l, Ok(()))) => assert_eq!(*l, link, "fast path link at byte {offset}"),
                other => panic!(
                    "the fast path accepts the line at byte {offset}; the reference says {other:?}"
                ),
            }
        }
        if let Ok(event) = record::decode(line, &mut scratch) {
            let mut again = record::encode(&event);
            again.pop();
            assert!(
                again == line,
                "decoded record at byte {offset} re-encodes differently"
            );
        }
    }
}

/// The streaming file reader reaches the same verdict as `verify_bytes`.
// `scan`'s visitor returns the runtime's `StoreError`, large by that crate's choice.
#[allow(clippy::result_large_err)]
fn check_file(data: &[u8], verdict: &Result<Head, LogBytesError>, events: Option<&[Event]>) {
    let mut file = tempfile::NamedTempFile::new().expect("create a temporary log file");
    file.write_all(data).expect("write the temporary log file");
    file.flush().expect("flush the temporary log file");
    let path = file.path();
    // A pool of two threads costs more than most inputs: use it on one input in sixteen.
    let threads = if data.len() % 16 == 5 { 2 } else { 1 };
    let opts = VerifyOptions {
        threads,
        ..VerifyOptions::default()
    };
    match (reader::verify_file(path, opts), verdict) {
        (Ok(summary), Ok(head)) => {
            assert_eq!(summary.head, *head);
            assert_eq!(summary.events, head.next_seq);
            assert_eq!(summary.bytes, data.len() as u64);
        }
        (Err(StoreError::Log { error, .. }), Err(want)) => assert_eq!(&error, want),
        (got, want) => panic!("verify_file says {got:?}; verify_bytes says {want:?}"),
    }

    let mut seen = Vec::new();
    let end = reader::scan(path, true, |e| {
        seen.push(e);
        Ok(true)
    });
    match (end, verdict) {
        (Ok(end), Ok(head)) => {
            assert_eq!(end.head, *head);
            assert_eq!(end.torn_tail, None);
            assert!(!end.stopped_early);
            assert_eq!(Some(&seen[..]), events, "scan visits the decoded events");
        }
        (Ok(end), Err(LogBytesError::TornTail { seq, offset, len })) => {
            assert_eq!(end.head.next_seq, *seq);
            assert_eq!(end.torn_tail, Some((*offset, *len)));
            assert_eq!(seen.len() as u64, *seq);
        }
        (Err(StoreError::Log { error, .. }), Err(want @ LogBytesError::Integrity { .. })) => {
            assert_eq!(&error, want);
        }
        (got, want) => panic!("scan says {got:?}; verify_bytes says {want:?}"),
    }
}

/// Re-seals every line that parses as an event (new seq, hashes and states, from the recorder)
/// and checks the writer's output is accepted everywhere.
fn check_resealed(data: &[u8]) {
    let mut recorder = Recorder::new();
    let mut log = Vec::new();
    let mut events = Vec::new();
    let mut fast = FastScratch::default();
    let mut scratch = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let Ok(event) = serde_json::from_slice::<Event>(line) else {
            continue;
        };
        let Ok(payload) = Payload::decode(event.kind, &event.payload) else {
            continue;
        };
        let Ok(sealed) = recorder.record(event.time, event.parents, payload) else {
            continue;
        };
        let bytes = record::encode(&sealed);
        let line = &bytes[..bytes.len() - 1];
        let link = Link::of(&sealed);
        assert_eq!(
            check_line_fast(line, &mut fast),
            Some(link),
            "the fast path declines a record the writer produced: {}",
            String::from_utf8_lossy(line)
        );
        match check_line_reference(line, &mut scratch) {
            Ok((l, Ok(()))) => assert_eq!(l, link),
            other => panic!("the reference rejects a record the writer produced: {other:?}"),
        }
        log.extend_from_slice(&bytes);
        events.push(sealed);
    }
    if events.is_empty() {
        return;
    }
    assert_eq!(verify_bytes(&log, None), Ok(recorder.head()));
    let state = oracle_core::replay::replay(&events)
        .unwrap_or_else(|e| panic!("the writer's log does not replay: {e}"));
    assert_eq!(state.hash(), recorder.state().hash());
}
