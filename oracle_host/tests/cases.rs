//! Host cases (docs/TESTING.md, "Host cases"): each directory of `tests/cases/` holds a plan,
//! its inputs and a script of host calls (`case.json`), and the golden transcript of what each
//! call saw (`expected.txt`, refreshed with `UPDATE_EXPECT=1`). Every case runs on a file home
//! through [`Home`], and (where PostgreSQL is installed) on a throwaway store through the
//! store's front, [`Database`] and an in-process worker; both must write the same log bytes.

// Host errors carry the runtime's session errors whole, large on purpose (oracle_host/src/lib.rs).
#![allow(clippy::result_large_err)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use oracle_host::store_front::StoreFront;
use oracle_host::{Cancel, Database, Home, HostError, LOG_FILE, Resume, Start, StartOptions};
use oracle_host::{Durability, Submitted, worker};
use serde_json::Value;

/// Who cancels, and why, in every case's `cancel` (both are recorded, so they are fixed).
const CANCEL_BY: &str = "ops";
const CANCEL_REASON: &str = "stop";
/// How long an idle in-process worker waits for a notification before looking again: short,
/// so a drained store returns at once and the runner stays well under its 30 s budget.
const WORKER_POLL_MS: u64 = 50;

/// One case as read from its directory.
struct Case {
    name: String,
    dir: PathBuf,
    inputs: Vec<(String, String)>,
    script: Vec<String>,
}

/// One host call of a script.
enum Call {
    Start,
    Answer { step: String, value: Value },
    Cancel,
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases")
}

/// Every case, in name order.
fn cases() -> Vec<Case> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(cases_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.into_iter().map(|dir| read_case(&dir)).collect()
}

fn read_case(dir: &Path) -> Case {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let text = fs::read_to_string(dir.join("case.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let inputs = v["inputs"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let script = v["script"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: case.json has no `script` list"))
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect();
    Case {
        name,
        dir: dir.to_path_buf(),
        inputs,
        script,
    }
}

/// `start`, `answer STEP JSON`, `cancel`.
fn parse(line: &str) -> Call {
    let mut words = line.splitn(3, ' ');
    match (words.next(), words.next(), words.next()) {
        (Some("start"), None, None) => Call::Start,
        (Some("cancel"), None, None) => Call::Cancel,
        (Some("answer"), Some(step), Some(value)) => Call::Answer {
            step: step.to_owned(),
            value: serde_json::from_str(value).unwrap_or_else(|e| panic!("`{line}`: {e}")),
        },
        _ => panic!("`{line}`: expected `start`, `answer STEP JSON` or `cancel`"),
    }
}

fn cancel() -> Cancel {
    Cancel {
        by: Some(CANCEL_BY.into()),
        reason: CANCEL_REASON.into(),
    }
}

/// What a call saw: accepted, or refused with the host's code (nothing recorded then).
fn outcome<T>(r: Result<T, HostError>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("refused {}", e.code()),
    }
}

/// The transcript line of a run after a call: its status, the step it waits on, how many
/// events it has, and its head (the last event's hash).
fn seen(dir: &Path) -> String {
    let info = oracle_runtime::session::run_info(dir);
    let waiting = info
        .waiting
        .map(|(step, _)| format!(" on {step}"))
        .unwrap_or_default();
    let bytes = fs::read(dir.join(LOG_FILE)).unwrap_or_default();
    let head = bytes
        .split(|b| *b == b'\n')
        .rfind(|l| !l.is_empty())
        .and_then(|l| serde_json::from_slice::<Value>(l).ok())
        .and_then(|v| v["hash"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "none".into());
    format!(
        "{}{waiting}; {} events; head {head}",
        info.status, info.events
    )
}

/// A case run on one backend: the transcript and the run's log.
struct Ran {
    transcript: String,
    log: Vec<u8>,
}

fn options(case: &Case, home: &Path) -> StartOptions {
    let mut opts = StartOptions::new(home, &case.dir.join("plan.plan"));
    opts.inputs = case.inputs.clone();
    opts
}

/// The case on a fresh file home, through [`Home`]'s calls.
fn on_file_home(case: &Case) -> Ran {
    let tmp = tempfile::tempdir().unwrap();
    let home = Home::open(&tmp.path().join("home")).unwrap();
    let mut run: Option<String> = None;
    let mut transcript = String::new();
    for line in &case.script {
        let did = match parse(line) {
            Call::Start => {
                match home.start(options(case, home.dir()), &Default::default(), vec![], None) {
                    Ok(Start::New(s)) => {
                        run = Some(s.id);
                        "ok".into()
                    }
                    other => outcome(other.map(|_| ())),
                }
            }
            Call::Answer { step, value } => outcome(home.resume(
                run.as_deref().unwrap(),
                Resume {
                    answer: Some((step, value)),
                    ..Resume::default()
                },
            )),
            Call::Cancel => {
                outcome(home.cancel(run.as_deref().unwrap(), cancel(), Durability::DEFAULT))
            }
        };
        let dir = home
            .dir()
            .join("runs")
            .join(run.as_deref().unwrap_or("none"));
        transcript.push_str(&format!("{line} -> {did}; {}\n", seen(&dir)));
    }
    let dir = home.dir().join("runs").join(run.unwrap_or_default());
    Ran {
        transcript,
        log: fs::read(dir.join(LOG_FILE)).unwrap_or_default(),
    }
}

/// The golden transcript of `case`: checked, or written with `UPDATE_EXPECT=1`.
fn check_golden(case: &Case, transcript: &str) {
    let path = case.dir.join("expected.txt");
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        fs::write(&path, transcript).unwrap();
        return;
    }
    let expected = fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        transcript, expected,
        "case {}: the transcript changed (UPDATE_EXPECT=1 to accept)",
        case.name
    );
}

#[test]
fn every_case_on_a_file_home_sees_its_golden_transcript() {
    let all = cases();
    assert!(all.len() >= 6, "only {} cases", all.len());
    for case in &all {
        check_golden(case, &on_file_home(case).transcript);
    }
}

static DB: AtomicU64 = AtomicU64::new(0);

/// A fresh database with the schema in the binary's shared cluster, or `None` (skip, said
/// loudly by `cluster::shared`) without PostgreSQL.
fn store_url() -> Option<String> {
    let cluster = oracle_pg::cluster::shared()?;
    let n = DB.fetch_add(1, Ordering::Relaxed);
    let url = cluster
        .database(&format!("host_cases_{}_{n}", std::process::id()))
        .unwrap();
    Database::init(&url).unwrap();
    Some(url)
}

/// Drives every run of the store with work to do, in this process, until none is left.
fn drain(url: &str, scratch: &Path) {
    let settings = worker::Settings {
        url: url.to_owned(),
        name: "host-cases".into(),
        concurrency: 1,
        lease_ms: worker::LEASE_MS_DEFAULT,
        poll_ms: WORKER_POLL_MS,
        until_idle: true,
        scratch: scratch.to_path_buf(),
        tools: vec![],
        oracle_cmd: None,
        scorer_cmd: None,
        snapshot_every: None,
        metrics: None,
        agents: Default::default(),
        rates: Default::default(),
    };
    worker::run(
        settings,
        Arc::new(AtomicBool::new(false)),
        Arc::new(|_: &str| {}),
    )
    .unwrap();
}

/// The store's run written into a fresh directory under `tmp` (as `oracle export --store`
/// reads it); `None` before the run exists.
fn read_back(db: &Database, tmp: &Path, run: Option<&str>, n: usize) -> Option<PathBuf> {
    let home = tmp.join(format!("read-{n}"));
    Some(db.hydrate(run?, &home).unwrap())
}

/// Submits the case's run to the store, as `oracle submit` does: prepared in a scratch home,
/// handed to the store.
fn submit(case: &Case, db: &Database, tmp: &Path) -> Result<String, HostError> {
    let scratch = Home::open(&tmp.join("submit"))?;
    let prepared = match scratch.prepare_submission(
        options(case, scratch.dir()),
        &Default::default(),
        vec![],
    )? {
        Start::New(p) => p,
        Start::Existing(e) => panic!("a fresh scratch home found key {}", e.key),
    };
    match db.submit(&prepared, None, None, None)? {
        Submitted::New(id) => Ok(id),
        other => panic!("submitted without a key, got {other:?}"),
    }
}

/// The case on a throwaway store: submitted, answered and cancelled through the store's
/// front (each checked as a file home checks it, then queued), driven by a worker.
fn on_store(case: &Case, url: &str) -> Ran {
    let tmp = tempfile::tempdir().unwrap();
    let db = Database::connect(url).unwrap();
    let front = StoreFront::open(url, &tmp.path().join("mirror"), "host-cases").unwrap();
    let scratch = tmp.path().join("worker");
    let mut run: Option<String> = None;
    let mut transcript = String::new();
    for (n, line) in case.script.iter().enumerate() {
        let did = match parse(line) {
            Call::Start => match submit(case, &db, tmp.path()) {
                Ok(id) => {
                    run = Some(id);
                    "ok".into()
                }
                Err(e) => outcome::<()>(Err(e)),
            },
            Call::Answer { step, value } => {
                outcome(front.answer(run.as_deref().unwrap(), (step, value), None))
            }
            Call::Cancel => outcome(front.cancel(run.as_deref().unwrap(), cancel())),
        };
        drain(url, &scratch);
        let dir = read_back(&db, tmp.path(), run.as_deref(), n);
        let saw = dir.as_deref().map_or_else(|| seen(Path::new("none")), seen);
        transcript.push_str(&format!("{line} -> {did}; {saw}\n"));
    }
    let dir = read_back(&db, tmp.path(), run.as_deref(), case.script.len());
    Ran {
        transcript,
        log: dir
            .map(|d| fs::read(d.join(LOG_FILE)).unwrap())
            .unwrap_or_default(),
    }
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn every_case_on_a_store_writes_the_file_homes_log_bytes() {
    let mut differ = Vec::new();
    for case in &cases() {
        let Some(url) = store_url() else { return };
        let (home, store) = (on_file_home(case), on_store(case, &url));
        assert_eq!(
            store.transcript, home.transcript,
            "case {}: the store saw other than the file home",
            case.name
        );
        if store.log != home.log {
            differ.push(case.name.clone());
        }
        check_golden(case, &store.transcript);
    }
    assert!(
        differ.is_empty(),
        "the store's log is not the file home's, byte for byte: {differ:?}"
    );
}
