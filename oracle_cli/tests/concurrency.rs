//! Several `oracle` processes at once on one run, with the real binary: verdicts on the same
//! handles (`adjudicate`), `resume`, `sweep`, and readers (`verify`, `log --json`, `memory
//! --json`, `adjudications --json`), all spawned together, round after round on fresh runs
//! (more rounds with `ORACLE_CONCURRENCY_ROUNDS`); readers running beside a long run that
//! appends; and readers of a record half written by a live writer (the state a reader can catch
//! mid-append, made on purpose: the lock held, half a record in the file).
//!
//! Timing decides only which process wins. Whatever it decides: the single-writer lock holds
//! (a writer that loses gets a documented exit code and a message naming the cause); each
//! handle is resolved exactly once (one `adjudicated` event, or one expiry); no event is lost or
//! duplicated (the final log verifies with contiguous seqs, and every head a process reported is
//! in it); and every reader exits 0 having read a prefix of the final log, never a half-written
//! record.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{Sandbox, SplitMix64, parse_events};
use oracle_core::{Event, EventKind, Payload};
use serde_json::Value;

const EFH: &str = "external_first_hand";
/// Rounds of the racing test (each on a fresh run); more with `ORACLE_CONCURRENCY_ROUNDS`.
const ROUNDS_ENV: &str = "ORACLE_CONCURRENCY_ROUNDS";
const ROUNDS_DEFAULT: u64 = 6;

/// Three patients, each with a recorded allergy contradicted by a referral: three handles
/// pending at once, and three steps waiting on them.
const THREE_CONFLICTS: &str = r#"plan conflicts version 1

grant kv:set:done

a1 = memory.assert { subject: "p1", predicate: "allergy", value: "penicillin", provenance: "external_first_hand", criticality: "critical" }
a2 = memory.assert { subject: "p2", predicate: "allergy", value: "latex", provenance: "external_first_hand", criticality: "critical" }
a3 = memory.assert { subject: "p3", predicate: "allergy", value: "nuts", provenance: "external_first_hand", criticality: "critical" }
b1 = memory.assert { subject: "p1", predicate: "allergy", value: "none", provenance: "external_first_hand", criticality: "critical" }
  after a1
b2 = memory.assert { subject: "p2", predicate: "allergy", value: "none", provenance: "external_first_hand", criticality: "critical" }
  after a2
b3 = memory.assert { subject: "p3", predicate: "allergy", value: "none", provenance: "external_first_hand", criticality: "critical" }
  after a3
q1 = memory.query { subject: "p1", predicate: "allergy", require: "resolved" }
  after b1
q2 = memory.query { subject: "p2", predicate: "allergy", require: "resolved" }
  after b2
q3 = memory.query { subject: "p3", predicate: "allergy", require: "resolved" }
  after b3
done = kv.set { key: "done", value: [q1.value, q2.value, q3.value] }
"#;

/// What one process was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Role {
    Adjudicate { handle: String, verdict: String },
    Resume,
    Sweep,
    Verify,
    Log,
    Memory,
    Adjudications,
}

/// A finished process: its role, exit code, stdout and stderr.
#[derive(Debug)]
struct Done {
    role: Role,
    code: i32,
    out: String,
    err: String,
}

impl Done {
    /// The last stdout line as JSON (every command here runs with `--json`).
    fn json(&self) -> Value {
        let line = self
            .out
            .lines()
            .last()
            .unwrap_or_else(|| panic!("{self:?}"));
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }
}

fn args_of(role: &Role, home: &str, run: &str, sweep_now: Option<&str>) -> Vec<String> {
    let mut a: Vec<String> = vec!["--home".into(), home.into()];
    let rest: Vec<&str> = match role {
        Role::Adjudicate { handle, verdict } => vec![
            "adjudicate",
            run,
            handle,
            "--verdict",
            verdict,
            "--evidence",
            EFH,
        ],
        Role::Resume => vec!["resume", run],
        Role::Sweep => match sweep_now {
            Some(now) => vec!["sweep", run, "--now", now],
            None => vec!["sweep", run],
        },
        Role::Verify => vec!["verify", run],
        Role::Log => vec!["log", run],
        Role::Memory => vec!["memory", run],
        Role::Adjudications => vec!["adjudications", run],
    };
    a.extend(rest.into_iter().map(str::to_owned));
    a.push("--json".into());
    a
}

/// Spawns every role at once (in the given order), then waits for all of them.
fn race(sb: &Sandbox, roles: &[Role], home: &str, run: &str, sweep_now: Option<&str>) -> Vec<Done> {
    let children: Vec<(Role, Child)> = roles
        .iter()
        .map(|role| {
            let args = args_of(role, home, run, sweep_now);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let child = sb
                .command(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (role.clone(), child)
        })
        .collect();
    children
        .into_iter()
        .map(|(role, child)| {
            let o = child.wait_with_output().unwrap();
            Done {
                role,
                code: o.status.code().unwrap_or(-1),
                out: String::from_utf8_lossy(&o.stdout).into_owned(),
                err: String::from_utf8_lossy(&o.stderr).into_owned(),
            }
        })
        .collect()
}

/// The complete records of a log file, each with its bytes (without the newline).
fn records(path: &Path) -> Vec<(Vec<u8>, Event)> {
    let bytes = std::fs::read(path).unwrap();
    let events = parse_events(&bytes);
    bytes
        .split(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .zip(events)
        .collect()
}

/// What `memory --json` and `adjudications --json` print for each prefix of a final log,
/// computed on demand by running them on a copy of the prefix (in a directory of the run's
/// name, so nothing else differs).
struct Prefixes {
    dir: tempfile::TempDir,
    run: String,
    cache: BTreeMap<(String, usize), String>,
}

impl Prefixes {
    fn new(run: &str) -> Prefixes {
        Prefixes {
            dir: tempfile::tempdir().unwrap(),
            run: run.to_owned(),
            cache: BTreeMap::new(),
        }
    }

    /// The output of `oracle CMD <prefix of k records> --json`.
    fn output(&mut self, sb: &Sandbox, finals: &[(Vec<u8>, Event)], cmd: &str, k: usize) -> &str {
        let key = (cmd.to_owned(), k);
        if !self.cache.contains_key(&key) {
            let run_dir = self.dir.path().join(k.to_string()).join(&self.run);
            std::fs::create_dir_all(&run_dir).unwrap();
            let mut bytes = Vec::new();
            for (record, _) in &finals[..k] {
                bytes.extend_from_slice(record);
                bytes.push(b'\n');
            }
            std::fs::write(run_dir.join("events.jsonl"), bytes).unwrap();
            let (code, out, err) = sb.oracle(&[cmd, run_dir.to_str().unwrap(), "--json"]);
            assert_eq!(code, 0, "{cmd} on a prefix of {k} records: {err}");
            self.cache.insert(key.clone(), out);
        }
        &self.cache[&key]
    }
}

/// How many records of the final log a reader's output shows: `Some(k)` for a prefix of `k`
/// records (the first `k` that prints the same, for `memory` and `adjudications`), `None` when
/// it matches no prefix.
fn prefix_seen(
    d: &Done,
    finals: &[(Vec<u8>, Event)],
    sb: &Sandbox,
    prefixes: &mut Prefixes,
) -> Option<usize> {
    let cmd = match d.role {
        Role::Memory => "memory",
        Role::Adjudications => "adjudications",
        Role::Verify => {
            let v: Value = serde_json::from_str(d.out.lines().next()?).ok()?;
            if is_no_events(d) {
                return Some(0);
            }
            return v["events"].as_u64().map(|n| n as usize);
        }
        Role::Log => return Some(d.out.lines().count()),
        _ => return None,
    };
    (1..=finals.len()).find(|&k| prefixes.output(sb, finals, cmd, k) == d.out)
}

/// Asserts what a reader printed is a prefix of the final log (never a half-written record):
/// `memory` and `adjudications` print exactly what they print for some prefix of it. Returns
/// whether the reader saw less than the final log (it read while a writer was still to append).
fn assert_reader_saw_a_prefix(
    d: &Done,
    finals: &[(Vec<u8>, Event)],
    what: &str,
    sb: &Sandbox,
    prefixes: &mut Prefixes,
) -> bool {
    check_reader_output(d, finals, what);
    let seen = prefix_seen(d, finals, sb, prefixes);
    let Some(k) = seen else {
        panic!("{what}: the output is that of no prefix of the final log: {d:?}");
    };
    k < finals.len()
}

/// Whether `d` is `verify` refusing a log with no events yet (exit 2, `no_events`): what a
/// reader sees of a run before its first commit, the empty prefix.
fn is_no_events(d: &Done) -> bool {
    d.role == Role::Verify
        && d.code == 2
        && d.out.lines().next().is_some_and(|l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| v["error"]["code"] == "no_events")
        })
}

fn check_reader_output(d: &Done, finals: &[(Vec<u8>, Event)], what: &str) {
    if is_no_events(d) {
        return;
    }
    assert_eq!(d.code, 0, "{what}: a reader always answers: {d:?}");
    let rows: Vec<Value> = d
        .out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: {e}: {d:?}")))
        .collect();
    match d.role {
        Role::Verify => {
            let v = &rows[0];
            assert_eq!(v["ok"], true, "{what}: {v}");
            let n = v["events"].as_u64().unwrap() as usize;
            assert!(n <= finals.len(), "{what}: {v}");
            // (A log with no event yet is `no_events`, above.)
            if let Some(last) = n.checked_sub(1).map(|i| &finals[i].1) {
                assert_eq!(v["head"], Value::from(last.hash.to_string()), "{what}");
                assert_eq!(v["state"], Value::from(last.state_after.to_string()));
            }
        }
        Role::Log => {
            assert!(d.out.lines().count() <= finals.len(), "{what}: {d:?}");
            for (line, (record, _)) in d.out.lines().zip(finals) {
                assert_eq!(
                    line.as_bytes(),
                    &record[..],
                    "{what}: `log --json` prints the stored records exactly"
                );
            }
        }
        // Compared with the output for each prefix by `prefix_seen`.
        Role::Memory | Role::Adjudications => {}
        _ => unreachable!(),
    }
}

/// The kinds of error a writer that loses a race may report, by exit code (README's table).
fn assert_documented_refusal(d: &Done, what: &str) {
    let message = d.err.trim();
    let named = match (&d.role, d.code) {
        // The lock is held by another writer, or another resume already finished the run.
        (Role::Resume, 2) => {
            message.contains("holds the writer lock") || message.contains("has finished")
        }
        (Role::Adjudicate { .. }, 6) => message.contains("already resolved"),
        (Role::Adjudicate { .. }, 7) => message.contains("expired"),
        _ => false,
    };
    assert!(
        named,
        "{what}: exit {} must be documented and name its cause: {d:?}",
        d.code
    );
}

/// One round: a fresh run suspended on `handles`, then every kind of process at once. Returns
/// how many readers saw less than the final log (read before a writer appended).
fn round(sb: &Sandbox, rng: &mut SplitMix64, n: u64, plan: &str, expiry: bool) -> u64 {
    let home = format!("round-{n}");
    let what = format!("round {n} ({plan}, expiry {expiry})");
    let mut start = vec!["--home", &home, "run", plan, "--json"];
    if expiry {
        start.extend(["--adjudication-expiry", "100"]);
    }
    let (code, out) = sb.json(&start);
    assert_eq!(code, 3, "{what}: the run suspends on a belief: {out}");
    let run = out["run"].as_str().unwrap().to_owned();
    let (code, pending, _) = sb.oracle(&["--home", &home, "adjudications", &run, "--json"]);
    assert_eq!(code, 0);
    let handles: Vec<String> = pending
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["handle"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(!handles.is_empty(), "{what}: {pending}");

    // Two opposite verdicts per handle, two resumes, a sweep, and two of each reader.
    let mut roles = Vec::new();
    for h in &handles {
        for verdict in ["affirm", "deny"] {
            roles.push(Role::Adjudicate {
                handle: h.clone(),
                verdict: verdict.into(),
            });
        }
    }
    for _ in 0..2 {
        roles.extend([
            Role::Resume,
            Role::Verify,
            Role::Log,
            Role::Memory,
            Role::Adjudications,
        ]);
    }
    roles.push(Role::Sweep);
    oracle_test_support::shuffle(rng, &mut roles);
    // With an expiry, the sweep is far in the future: it races the verdicts for every handle.
    let sweep_now = expiry.then_some("1000");
    let done = race(sb, &roles, &home, &run, sweep_now);

    let log = sb
        .path()
        .join(&home)
        .join("runs")
        .join(&run)
        .join("events.jsonl");
    let (code, v) = sb.json(&["--home", &home, "verify", &run, "--json"]);
    assert_eq!(code, 0, "{what}: the final log verifies: {v}");
    let finals = records(&log);
    for (i, (_, e)) in finals.iter().enumerate() {
        assert_eq!(e.seq, i as u64, "{what}: seqs are contiguous");
    }
    let mut prefixes = Prefixes::new(&run);
    let mut early_reads = 0;
    let hashes: Vec<String> = finals.iter().map(|(_, e)| e.hash.to_string()).collect();

    // Each handle resolved exactly once: one verdict event, or one expiry.
    let mut verdicts: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    let mut expired: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut sweeps = Vec::new();
    for (_, e) in &finals {
        match e.typed().unwrap() {
            Payload::Adjudicated(a) => verdicts
                .entry(a.handle)
                .or_default()
                .push((e.seq, a.verdict)),
            Payload::AdjudicationsExpired(x) => {
                sweeps.push(e.seq);
                for item in x.expired.as_array().unwrap() {
                    let h = item["handle"].as_str().unwrap().to_owned();
                    expired.entry(h).or_default().push(e.seq);
                }
            }
            _ => {}
        }
    }
    for h in &handles {
        let (v, x) = (
            verdicts.get(h).map_or(0, Vec::len),
            expired.get(h).map_or(0, Vec::len),
        );
        assert_eq!(
            v + x,
            1,
            "{what}: {h}: {v} verdict(s) and {x} expiries: {verdicts:?} {expired:?}"
        );
        if !expiry {
            assert_eq!(v, 1, "{what}: {h}");
        }
    }
    assert!(
        sweeps.len() <= 1,
        "{what}: one sweep process, at most one sweep event"
    );

    for d in &done {
        let who = format!("{what}: {:?}", d.role);
        match &d.role {
            Role::Adjudicate { handle, verdict } => {
                let j = d.json();
                match d.code {
                    0 => {
                        let applied = &verdicts[handle];
                        assert_eq!(applied[0].0, j["seq"].as_u64().unwrap(), "{who}: {j}");
                        assert_eq!(&applied[0].1, verdict, "{who}");
                    }
                    6 => {
                        // The loser is told the original verdict, which is the one recorded.
                        let applied = &verdicts[handle];
                        assert_eq!(j["outcome"], "already_resolved", "{who}: {j}");
                        assert_eq!(j["seq"].as_u64(), Some(applied[0].0), "{who}: {j}");
                        assert_eq!(j["original"]["verdict"], applied[0].1.as_str(), "{who}");
                        assert_documented_refusal(d, &who);
                    }
                    7 => {
                        assert!(expired.contains_key(handle), "{who}: {j}");
                        assert_eq!(j["outcome"], "expired", "{who}: {j}");
                        assert_documented_refusal(d, &who);
                    }
                    _ => assert_documented_refusal(d, &who),
                }
            }
            Role::Resume => match d.code {
                0 | 3 => {
                    let j = d.json();
                    let events = j["events"].as_u64().unwrap() as usize;
                    assert!(events >= 1 && events <= finals.len(), "{who}: {j}");
                    assert_eq!(j["head"], Value::from(hashes[events - 1].clone()), "{who}");
                    let status = if d.code == 0 {
                        "completed"
                    } else {
                        "suspended"
                    };
                    assert_eq!(j["status"], status, "{who}: {j}");
                }
                _ => assert_documented_refusal(d, &who),
            },
            Role::Sweep => {
                assert_eq!(d.code, 0, "{who}: {d:?}");
                let j = d.json();
                let mine: Vec<String> = j["handles"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h.as_str().unwrap().to_owned())
                    .collect();
                match j["seq"].as_u64() {
                    Some(seq) => {
                        assert_eq!(sweeps, [seq], "{who}: {j}");
                        let recorded: Vec<&String> = expired.keys().collect();
                        assert_eq!(recorded, mine.iter().collect::<Vec<_>>(), "{who}");
                    }
                    None => assert!(sweeps.is_empty() && mine.is_empty(), "{who}: {j}"),
                }
            }
            _ => {
                if assert_reader_saw_a_prefix(d, &finals, &who, sb, &mut prefixes) {
                    early_reads += 1;
                }
            }
        }
    }

    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for d in &done {
        let role = match &d.role {
            Role::Adjudicate { .. } => "adjudicate".to_owned(),
            other => format!("{other:?}").to_lowercase(),
        };
        *outcomes.entry(format!("{role}:{}", d.code)).or_default() += 1;
    }
    eprintln!("{what}: exit codes {outcomes:?}");

    // Afterwards the run goes on as usual: it completes unless a handle expired (its line is
    // then contested and the step keeps waiting), and it replays.
    let (code, out) = sb.json(&["--home", &home, "resume", &run, "--json"]);
    let finished = done.iter().any(|d| d.role == Role::Resume && d.code == 0);
    match (expired.is_empty(), finished) {
        (true, false) => assert_eq!(
            (code, &out["status"]),
            (0, &Value::from("completed")),
            "{what}: {out}"
        ),
        (true, true) => {
            assert_eq!(code, 2, "{what}: {out}");
            assert!(
                out["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("has finished")
            );
        }
        (false, _) => assert_eq!(
            (code, &out["status"]),
            (3, &Value::from("suspended")),
            "{what}: {out}"
        ),
    }
    let (code, r) = sb.json(&["--home", &home, "replay", &run, "--json"]);
    assert_eq!(code, 0, "{what}: {r}");
    assert_eq!(r["result"], "reproduced", "{what}");
    eprintln!("{what}: {early_reads} reader(s) saw the log before a writer appended");
    early_reads
}

#[test]
fn verdicts_resumes_sweeps_and_readers_at_once_resolve_each_handle_once_and_lose_nothing() {
    let sb = Sandbox::new();
    sb.write("conflicts.plan", THREE_CONFLICTS);
    let mut rng = SplitMix64::new(0xc0c0_2024);
    let plans = ["fixtures/plans/adjudication.plan", "conflicts.plan"];
    let rounds: u64 = std::env::var(ROUNDS_ENV)
        .ok()
        .map(|v| v.parse().expect("ORACLE_CONCURRENCY_ROUNDS is a number"))
        .unwrap_or(ROUNDS_DEFAULT);
    let mut early_reads = 0;
    for n in 0..rounds {
        let plan = plans[(n % 2) as usize];
        // Every other pair of rounds gives requests an expiry, and races a sweep past it with
        // the verdicts.
        let expiry = (n / 2) % 2 == 1;
        early_reads += round(&sb, &mut rng, n, plan, expiry);
    }
    // The point of racing readers with writers: some read before a writer appended. Timing
    // decides how many (measured: 7 or 8 of the 8 readers of a round); fewer than one a round
    // on average would mean the readers hardly raced at all.
    assert!(
        early_reads >= rounds,
        "only {early_reads} readers in {rounds} rounds read before a writer appended"
    );
}

/// A plan whose rounds write large records (so an append spans several pages), committed
/// often (each `proc.exec` commits first).
fn big_records_plan(steps: usize) -> String {
    let text = "word ".repeat(1500);
    let mut p = String::from("plan appending version 1\ngrant proc:exec:sh\n");
    p.push_str("start = text.count { text: \"go\" }\n");
    let mut prev = "start".to_owned();
    for i in 1..=steps {
        p.push_str(&format!(
            "x{i} = proc.exec {{ program: \"sh\", args: [\"-c\", \"echo {i}\"] }}\n  after {prev}\n"
        ));
        for k in 0..3 {
            p.push_str(&format!(
                "t{i}_{k} = text.count {{ text: \"{text}{i} {k}\" }}\n  after x{i}\n"
            ));
        }
        p.push_str(&format!(
            "g{i} = json.get {{ value: {{ n: t{i}_0.words }}, path: \"n\" }}\n"
        ));
        prev = format!("g{i}");
    }
    p
}

#[test]
fn readers_beside_a_writer_that_is_appending_see_a_prefix_and_never_a_torn_record() {
    let sb = Sandbox::new();
    sb.write("appending.plan", &big_records_plan(60));
    let mut writer = sb
        .command(&["--home", "live", "run", "appending.plan"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log = sb.path().join("live/runs/appending-1/events.jsonl");
    let run = "live/runs/appending-1";
    let mut seen = Vec::new();
    // Read for as long as the writer appends; two readers at a time.
    while writer.try_wait().unwrap().is_none() {
        if !log.is_file() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let readers: Vec<(Role, Child)> = [(Role::Verify, "verify"), (Role::Log, "log")]
            .into_iter()
            .map(|(role, cmd)| {
                let child = sb
                    .command(&[cmd, run, "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                (role, child)
            })
            .collect();
        for (role, child) in readers {
            let o = child.wait_with_output().unwrap();
            seen.push(Done {
                role,
                code: o.status.code().unwrap_or(-1),
                out: String::from_utf8_lossy(&o.stdout).into_owned(),
                err: String::from_utf8_lossy(&o.stderr).into_owned(),
            });
        }
    }
    assert!(writer.wait().unwrap().success());
    let finals = records(&log);
    assert_eq!(finals.last().unwrap().1.kind, EventKind::RunFinished);
    let mut prefixes = Prefixes::new("appending-1");
    let mut mid_run = 0;
    for (i, d) in seen.iter().enumerate() {
        let what = format!("read {i} while the run appended");
        let early = assert_reader_saw_a_prefix(d, &finals, &what, &sb, &mut prefixes);
        if early && prefix_seen(d, &finals, &sb, &mut prefixes) > Some(0) {
            mid_run += 1;
        }
    }
    eprintln!(
        "{} reads while the run appended, {mid_run} of a part of the run",
        seen.len()
    );
    // The interesting path: reads that caught the run part way (neither empty nor finished).
    // The run has 60 rounds of large records (measured: 38 reads, all part way); reading only
    // before or after it would mean the readers never overlapped the appends.
    assert!(
        mid_run >= READS_MID_RUN_MIN,
        "only {mid_run} of {} reads caught the run part way",
        seen.len()
    );
}

/// Fewest reads of `readers_beside_a_writer...` that must catch the run part way.
const READS_MID_RUN_MIN: usize = 4;

#[test]
fn a_record_half_written_by_a_live_writer_is_not_yet_there_for_readers_and_torn_once_it_died() {
    let sb = Sandbox::new();
    let plan = "fixtures/plans/adjudication.plan";
    // The same suspended run in two homes; in `next`, a verdict adds one record.
    for home in ["live", "next"] {
        let (code, out) = sb.json(&["--home", home, "run", plan, "--json"]);
        assert_eq!(code, 3, "{out}");
    }
    let (code, out) = sb.json(&[
        "--home",
        "next",
        "adjudicate",
        "adjudication-1",
        "adj-15",
        "--verdict",
        "affirm",
        "--evidence",
        EFH,
        "--json",
    ]);
    assert_eq!(code, 0, "{out}");
    let log = sb.log("live", "adjudication-1");
    let before = std::fs::read(&log).unwrap();
    let after = std::fs::read(sb.log("next", "adjudication-1")).unwrap();
    assert!(after.starts_with(&before));
    let record = &after[before.len()..];
    let finals = records(&sb.log("next", "adjudication-1"));

    // A writer is live (it holds the run's lock) and has copied the first half of its record
    // into the file: the moment a reader can catch while a verdict is being appended.
    let lock_path = log.with_file_name("events.jsonl.lock");
    let lock = std::fs::File::options()
        .write(true)
        .open(&lock_path)
        .unwrap();
    lock.lock().unwrap();
    let half = record.len() / 2;
    let mut torn = before.clone();
    torn.extend_from_slice(&record[..half]);
    std::fs::write(&log, &torn).unwrap();
    let run = "live/runs/adjudication-1";
    for (role, cmd) in [
        (Role::Verify, "verify"),
        (Role::Log, "log"),
        (Role::Memory, "memory"),
        (Role::Adjudications, "adjudications"),
    ] {
        let (code, out, err) = sb.oracle(&[cmd, run, "--json"]);
        let d = Done {
            role,
            code,
            out,
            err,
        };
        let mut prefixes = Prefixes::new("adjudication-1");
        assert!(
            assert_reader_saw_a_prefix(
                &d,
                &finals,
                "a reader during the append",
                &sb,
                &mut prefixes
            ),
            "a reader during the append sees the log without the half record: {d:?}"
        );
        if d.role == Role::Verify {
            assert_eq!(
                d.json()["events"],
                finals.len() as u64 - 1,
                "the record is not there yet"
            );
        }
    }
    let (code, r) = sb.json(&["--home", "live", "replay", "adjudication-1", "--json"]);
    assert_eq!((code, &r["result"]), (0, &Value::from("reproduced")), "{r}");
    // Another writer is refused, with the cause; nothing changes.
    let (code, _, err) = sb.oracle(&["--home", "live", "resume", "adjudication-1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("holds the writer lock"), "{err}");
    assert_eq!(std::fs::read(&log).unwrap(), torn);

    // The writer finishes the record: readers see it.
    std::fs::write(&log, &after).unwrap();
    let (code, v) = sb.json(&["verify", run, "--json"]);
    assert_eq!(
        (code, &v["events"]),
        (0, &Value::from(finals.len() as u64)),
        "{v}"
    );

    // Had it died half way instead (the lock goes with its process), the half record is a
    // torn tail: reported, and moved aside by `oracle repair`.
    std::fs::write(&log, &torn).unwrap();
    drop(lock);
    let (code, v) = sb.json(&["verify", run, "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["error"]["kind"], "torn_tail", "{v}");
    assert_eq!(v["error"]["offset"], before.len() as u64, "{v}");
    let (code, rep) = sb.json(&["repair", run, "--json"]);
    assert_eq!((code, &rep["repaired"]), (0, &Value::from(true)), "{rep}");
    let saved = std::fs::read(sb.path().join(rep["saved_to"].as_str().unwrap())).unwrap();
    assert_eq!(saved, record[..half]);
    assert_eq!(std::fs::read(&log).unwrap(), before);
}
