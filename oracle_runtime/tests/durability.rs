//! Durability by effect: where the default mode syncs. A chain of pure steps syncs once, when
//! the run ends; a chain of impure steps syncs before each step's effect; an outside answer is
//! synced before the run goes on. (That nothing acknowledged is lost at a power cut is
//! `power_loss.rs`; this pins the commit points themselves.)

use std::path::Path;

use oracle_runtime::Durability;
use oracle_runtime::session::{self, StartOptions};
use oracle_runtime::tools;

fn chain(impure: bool, n: u64) -> String {
    let mut s = String::from("plan chain version 1\ngrant fs:read:data.txt\n\n");
    for i in 1..=n {
        if impure {
            s.push_str(&format!("s{i} = fs.read {{ path: \"data.txt\" }}\n"));
        } else {
            s.push_str(&format!("s{i} = text.count {{ text: \"step {i}\" }}\n"));
        }
        if i > 1 {
            s.push_str(&format!("  after s{}\n", i - 1));
        }
    }
    s
}

fn syncs(dir: &Path, text: &str, durability: Durability) -> u64 {
    let home = tempfile::tempdir_in(dir).unwrap();
    let plan = home.path().join("p.plan");
    std::fs::write(&plan, text).unwrap();
    let opts = StartOptions {
        root: dir.to_path_buf(),
        durability,
        ..StartOptions::new(home.path(), &plan)
    };
    session::start(&opts, &tools::builtin())
        .unwrap()
        .report
        .syncs
}

#[test]
fn effect_syncs_once_for_pure_work_and_before_every_effect() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("data.txt"), "x").unwrap();
    assert_eq!(Durability::DEFAULT, Durability::Effect);
    // 50 pure steps, 4 events each: one sync, at the end.
    assert_eq!(syncs(&root, &chain(false, 50), Durability::Effect), 1);
    // `group` syncs at the same points; 201 events stay under its 1000-event bound.
    assert_eq!(syncs(&root, &chain(false, 50), Durability::GROUP), 1);
    // 2000 pure steps: `group` also syncs every 1000 events, `effect` still once.
    assert_eq!(syncs(&root, &chain(false, 2000), Durability::Effect), 1);
    assert!(syncs(&root, &chain(false, 2000), Durability::GROUP) >= 8);
    // 20 impure steps: one sync before each (the write-ahead of its effect), one at the end.
    assert_eq!(syncs(&root, &chain(true, 20), Durability::Effect), 21);
    // `event` makes every step durable before the next: one sync per pure step (its four
    // records together) and two per impure one (its intent before the effect, its outcome
    // after), besides the run's first event and its end; `none` never syncs.
    assert_eq!(syncs(&root, &chain(false, 50), Durability::Event), 50 + 2);
    assert_eq!(
        syncs(&root, &chain(true, 20), Durability::Event),
        2 * 20 + 2
    );
    assert_eq!(syncs(&root, &chain(true, 20), Durability::None), 0);
}

#[test]
fn an_outside_answer_is_synced_before_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let home = root.join("home");
    let plan = root.join("ask.plan");
    std::fs::write(
        &plan,
        "plan ask version 1\nq = human.ask { question: \"go?\" }\nn = text.count { text: \"after\" }\n  after q\n",
    )
    .unwrap();
    // Resume continues in the directory the run started in: the working directory here.
    let s = session::start(&StartOptions::new(&home, &plan), &tools::builtin()).unwrap();
    assert_eq!(s.report.syncs, 1, "the suspension");
    let r = session::resume(
        &home,
        &s.id,
        Some(("q".to_owned(), serde_json::json!("yes"))),
        1,
        Durability::Effect,
        &tools::builtin(),
    )
    .unwrap();
    // The answer, then the end of the run.
    assert_eq!(r.report.syncs, 2, "{:?}", r.report.ending);
}

/// Pure work between commit points is held in the writer's buffer and handed to the OS in one
/// write at the commit, or as soon as the buffer passes `BUFFER_BYTES_MAX`; only a commit
/// syncs (under `effect` and `group`), and `none` writes at commits without syncing.
#[test]
fn pure_work_is_buffered_until_a_commit_or_the_buffer_bound() {
    use oracle_core::Payload;
    use oracle_core::payload::ToolReturned;
    use oracle_runtime::storage::sim::SimStorage;
    use oracle_runtime::writer::BUFFER_BYTES_MAX;
    use oracle_runtime::{LogPaths, LogWriter};

    let returned = |output: serde_json::Value| {
        Payload::ToolReturned(ToolReturned {
            step: "s".into(),
            tool: "t".into(),
            attempt: 1,
            output,
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let paths = LogPaths::of_run(&dir.path().join("run"));
    for durability in [Durability::Effect, Durability::GROUP, Durability::None] {
        let sim = SimStorage::new();
        let mut w = LogWriter::with_storage(&paths, &mut sim.clone(), durability).unwrap();
        w.append(0, vec![], run_started()).unwrap();
        for i in 1..=100u64 {
            w.append(i, vec![i - 1], returned(serde_json::json!(i)))
                .unwrap();
        }
        assert_eq!(
            sim.log_bytes(),
            Some(vec![]),
            "{durability:?}: nothing written yet"
        );
        w.commit().unwrap();
        let len = sim.log_bytes().unwrap().len() as u64;
        assert!(len > 0);
        let durable = if durability == Durability::None {
            0
        } else {
            len
        };
        assert_eq!(sim.log_durable(), Some(durable), "{durability:?}");
        assert_eq!(w.syncs(), u64::from(durable > 0), "{durability:?}");

        // One output larger than the buffer bound: written at once, synced only at a commit.
        w.append(101, vec![100], output_of(BUFFER_BYTES_MAX + 1))
            .unwrap();
        assert!(sim.log_bytes().unwrap().len() as u64 > len + BUFFER_BYTES_MAX as u64);
        assert_eq!(
            sim.log_durable(),
            Some(durable),
            "{durability:?}: not synced"
        );
        w.close().unwrap();
    }
}

/// `lock_held` tells a live writer from an idle log without taking the lock: no lock file is
/// "cannot tell", a lock file nobody holds is "no", a held lock is "yes", while it is held.
#[test]
fn a_held_writer_lock_is_seen_without_taking_it() {
    use oracle_runtime::writer::{lock_for_maintenance, lock_held};
    let dir = tempfile::tempdir().unwrap();
    let paths = oracle_runtime::LogPaths::of_run(&dir.path().join("run"));
    std::fs::create_dir_all(dir.path().join("run")).unwrap();
    assert_eq!(lock_held(&paths), None, "no lock file");
    let held = lock_for_maintenance(&paths).unwrap();
    assert_eq!(lock_held(&paths), Some(true));
    drop(held);
    assert_eq!(lock_held(&paths), Some(false));
    let other = oracle_runtime::LogPaths::of_run(&dir.path().join("other"));
    std::fs::create_dir_all(dir.path().join("other")).unwrap();
    let _held_elsewhere = lock_for_maintenance(&other).unwrap();
    assert_eq!(
        lock_held(&paths),
        Some(false),
        "another log's lock is not this one's"
    );
}

/// Set (to a directory) in the child process of the file-size-limit test below.
const FSIZE_CHILD_ENV: &str = "ORACLE_TEST_WRITER_FSIZE_CHILD";

fn run_started() -> oracle_core::Payload {
    oracle_test_support::run_started("p", 0, &[])
}

fn output_of(bytes: usize) -> oracle_core::Payload {
    oracle_core::Payload::ToolReturned(oracle_core::payload::ToolReturned {
        step: "s".into(),
        tool: "t".into(),
        attempt: 1,
        output: serde_json::json!("x".repeat(bytes)),
    })
}

/// The child of `a_whole_append_past_the_file_size_limit_is_refused_before_a_byte_is_written`,
/// run under `ulimit -f 16` with SIGXFSZ ignored.
#[test]
#[ignore = "run in a child process by the file-size-limit test"]
fn writer_child_under_a_file_size_limit() {
    let Some(dir) = std::env::var_os(FSIZE_CHILD_ENV) else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    let limit = rustix::process::getrlimit(rustix::process::Resource::Fsize)
        .current
        .expect("the parent set a file-size limit");
    let len = |p: &std::path::Path| std::fs::metadata(p).unwrap().len();
    // The length of an empty output's record after `run_started`, learnt on a scratch log.
    let scratch = oracle_runtime::LogPaths::of_run(&dir.join("scratch"));
    let mut w = oracle_runtime::LogWriter::create(&scratch, Durability::Effect).unwrap();
    w.append(0, vec![], run_started()).unwrap();
    w.commit().unwrap();
    let before = len(&scratch.log);
    w.append_whole(1, vec![0], output_of(0)).unwrap();
    let empty_record = len(&scratch.log) - before;
    drop(w);

    let paths = oracle_runtime::LogPaths::of_run(&dir.join("run"));
    let mut w = oracle_runtime::LogWriter::create(&paths, Durability::Effect).unwrap();
    w.append(0, vec![], run_started()).unwrap();
    w.commit().unwrap();
    // A record ending exactly at the limit is written.
    let fill = limit - len(&paths.log) - empty_record;
    w.append_whole(1, vec![0], output_of(fill as usize))
        .unwrap();
    assert_eq!(len(&paths.log), limit, "the log ends at the limit");
    // One byte more is refused before it is written.
    let before = std::fs::read(&paths.log).unwrap();
    let e = w.append_whole(2, vec![1], output_of(0)).unwrap_err();
    assert!(
        matches!(e, oracle_runtime::StoreError::FileSizeLimit { .. }),
        "{e}"
    );
    drop(w);
    assert_eq!(
        std::fs::read(&paths.log).unwrap(),
        before,
        "not a byte written"
    );
    println!("child: refused before writing");
}

/// A whole append (an outside answer, a claim) that would cross the process's file-size limit
/// is refused before any byte is written, so the log stays a log; one that ends exactly at the
/// limit is written, and without a limit any is.
#[cfg(unix)]
#[test]
fn a_whole_append_past_the_file_size_limit_is_refused_before_a_byte_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"trap '' XFSZ; ulimit -f 16 && exec "$0" "$@""#)
        .arg(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "durability::writer_child_under_a_file_size_limit",
            "--nocapture",
        ])
        .env(FSIZE_CHILD_ENV, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("child: refused before writing"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let paths = oracle_runtime::LogPaths::of_run(&dir.path().join("other"));
    let mut w = oracle_runtime::LogWriter::create(&paths, Durability::Effect).unwrap();
    w.append(0, vec![], run_started()).unwrap();
    w.append_whole(1, vec![0], output_of(64 << 10)).unwrap();
    w.close().unwrap();
    let summary = oracle_runtime::verify_file(&paths.log, Default::default()).unwrap();
    assert_eq!(summary.events, 2);
}

/// Where creating a log fails, the error names the file or directory that failed: the log when
/// it cannot be created, its directory when the new entry cannot be made durable. A log that
/// exists already is refused as such.
#[test]
fn a_failed_create_names_what_failed() {
    use oracle_runtime::storage::sim::SimStorage;
    use oracle_runtime::{LogPaths, LogWriter, StoreError};
    let dir = tempfile::tempdir().unwrap();
    let paths = LogPaths::of_run(&dir.path().join("run"));
    let path_of = |e: StoreError| match e {
        StoreError::Io { path, .. } => path,
        other => panic!("{other}"),
    };
    for (op, named) in [(0, paths.log.clone()), (1, dir.path().join("run"))] {
        let sim = SimStorage::new();
        sim.lose_power_at(op);
        let e = LogWriter::with_storage(&paths, &mut sim.clone(), Durability::Effect);
        assert_eq!(path_of(e.err().unwrap()), named, "power lost at op {op}");
    }
    let sim = SimStorage::new();
    drop(LogWriter::with_storage(&paths, &mut sim.clone(), Durability::Effect).unwrap());
    let e = LogWriter::with_storage(&paths, &mut sim.clone(), Durability::Effect);
    assert!(
        matches!(e, Err(StoreError::AlreadyExists { ref path }) if *path == paths.log),
        "{:?}",
        e.err()
    );
}

/// A whole append whose write fails is undone, or said not to be: never reported as a plain
/// failure that leaves the caller to guess whether the log changed.
#[test]
fn a_whole_append_cut_by_a_power_loss_says_it_was_not_undone() {
    use oracle_runtime::storage::sim::SimStorage;
    use oracle_runtime::{LogPaths, LogWriter, StoreError};
    let dir = tempfile::tempdir().unwrap();
    let paths = LogPaths::of_run(&dir.path().join("run"));
    let sim = SimStorage::new();
    let mut w = LogWriter::with_storage(&paths, &mut sim.clone(), Durability::Effect).unwrap();
    w.append(0, vec![], run_started()).unwrap();
    w.commit().unwrap();
    sim.lose_power_at(sim.ops());
    let e = w.append_whole(1, vec![0], output_of(10)).unwrap_err();
    assert!(matches!(e, StoreError::AppendNotUndone { .. }), "{e}");
}

/// A replica that keeps what it is given, and refuses once told to.
struct Keeper {
    records: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    refuse: bool,
}

impl oracle_runtime::replica::Replica for Keeper {
    fn commit(&mut self, records: &[u8]) -> std::io::Result<()> {
        if self.refuse {
            return Err(std::io::Error::other("lease lost"));
        }
        self.records.lock().unwrap().push(records.to_vec());
        Ok(())
    }
}

/// At each commit point the replica gets exactly the records written since the last one, once
/// the file has them (nothing when nothing is new); a refusal stops the writer, and a stopped
/// writer refuses every later append and commit.
#[test]
fn a_replica_gets_each_commits_records_and_a_refusal_stops_the_writer() {
    use oracle_runtime::{LogPaths, LogWriter, StoreError};
    let dir = tempfile::tempdir().unwrap();
    let paths = LogPaths::of_run(&dir.path().join("run"));
    let records = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keeper = std::sync::Arc::new(std::sync::Mutex::new(Keeper {
        records: records.clone(),
        refuse: false,
    }));
    let mut w = LogWriter::create(&paths, Durability::Effect)
        .unwrap()
        .with_replica(Some(keeper.clone()));
    w.append(0, vec![], run_started()).unwrap();
    w.append(1, vec![0], output_of(3)).unwrap();
    assert!(
        records.lock().unwrap().is_empty(),
        "nothing before a commit"
    );
    w.commit().unwrap();
    assert_eq!(w.syncs(), 1);
    w.commit().unwrap();
    assert_eq!(w.syncs(), 1, "nothing new: no second sync");
    w.append(2, vec![1], output_of(4)).unwrap();
    w.commit().unwrap();
    let file = std::fs::read(&paths.log).unwrap();
    assert_eq!(records.lock().unwrap().concat(), file);
    assert_eq!(
        records.lock().unwrap().len(),
        2,
        "one call per commit with records"
    );

    keeper.lock().unwrap().refuse = true;
    w.append(3, vec![2], output_of(5)).unwrap();
    let e = w.commit().unwrap_err();
    assert!(matches!(e, StoreError::Replica { .. }), "{e}");
    let e = w.append(4, vec![3], output_of(6)).unwrap_err();
    assert!(matches!(e, StoreError::Poisoned { .. }), "{e}");
    assert!(matches!(w.commit(), Err(StoreError::Poisoned { .. })));
    drop(w);
}
