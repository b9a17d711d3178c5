//! Named belief stores kept in PostgreSQL (issue 40), end to end with the real binary against
//! a throwaway cluster: the allergy scenario (A asserts, B recalls and acts, C contradicts, one
//! verdict under two racing adjudicators) submitted to the store and driven by two workers
//! gives a store whose `oracle memory export` is byte for byte the one the same scenario leaves
//! in a file home; and two runs publishing conflicting claims through two workers at once never
//! both commit. Skips loudly where PostgreSQL is not installed; CI sets
//! ORACLE_REQUIRE_POSTGRES.

use crate::common;

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use common::{
    ALLERGY_ASSERT, ALLERGY_RECALL, ALLERGY_WAIT, allergy_contradiction, json_in, oracle_in,
};
use serde_json::Value;

static DB: AtomicU64 = AtomicU64::new(0);

/// A fresh database with the schema, or `None` (skip) without PostgreSQL.
fn store_url() -> Option<String> {
    let cluster = oracle_pg::cluster::shared()?;
    let n = DB.fetch_add(1, Ordering::Relaxed);
    let url = cluster
        .database(&format!("shared_{}_{n}", std::process::id()))
        .unwrap();
    let (code, out, err) = oracle_in(Path::new("."), &["store", "init", "--store", &url]);
    assert_eq!(code, 0, "{out}{err}");
    Some(url)
}

fn plans(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    let c = allergy_contradiction;
    fs::write(dir.join("a.plan"), ALLERGY_ASSERT).unwrap();
    fs::write(dir.join("b.plan"), ALLERGY_RECALL).unwrap();
    fs::write(dir.join("c.plan"), c("allergy_contradict", "none")).unwrap();
    fs::write(dir.join("x.plan"), c("pub_x", "penicillin")).unwrap();
    fs::write(dir.join("y.plan"), c("pub_y", "none")).unwrap();
    fs::write(dir.join("w.plan"), ALLERGY_WAIT).unwrap();
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let (code, out, err) = oracle_in(dir, args);
    assert_eq!(code, 0, "oracle {args:?}: {out}\n{err}");
    out
}

fn spawn(dir: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Two workers at once until neither finds anything to claim.
fn two_workers(dir: &Path, url: &str) {
    let args = [
        "worker",
        "--store",
        url,
        "--lease-ms",
        "2000",
        "--poll-ms",
        "100",
        "--until-idle",
    ];
    let workers: Vec<Child> = (0..2).map(|_| spawn(dir, &args)).collect();
    for w in workers {
        let out = w.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "worker: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The exit codes of two `args` at once, sorted.
fn racing(dir: &Path, args: &[&str]) -> Vec<i32> {
    let racers: Vec<Child> = (0..2).map(|_| spawn(dir, args)).collect();
    let mut codes: Vec<i32> = racers
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code().unwrap())
        .collect();
    codes.sort();
    codes
}

/// The output a store run recorded for its step `step`, read from its exported log.
fn store_output(dir: &Path, url: &str, run: &str, step: &str) -> Value {
    let (code, out, err) = oracle_in(dir, &["log", run, "--json", "--store", url]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["kind"] == "tool_returned" && e["payload"]["step"] == step)
        .map(|e| e["payload"]["output"].clone())
        .unwrap_or_else(|| panic!("no output for {step} in {run}: {out}"))
}

fn verdict_args<'a>(handle: &'a str, store: &'a [&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "adjudicate",
        "--memory",
        "alice",
        handle,
        "--verdict",
        "affirm",
        "--evidence",
        "external_first_hand",
        "--note",
        "allergy test negative",
    ];
    args.extend_from_slice(store);
    args
}

/// The scenario in the store, each run driven by two workers; returns the store's export.
fn scenario_in_store(dir: &Path, url: &str) -> Vec<u8> {
    let s = ["--store", url];
    let submit = |plan: &str, extra: &[&str]| {
        let mut args = vec!["submit", plan];
        args.extend_from_slice(extra);
        args.extend_from_slice(&s);
        ok(dir, &args).trim().to_owned()
    };
    let a = submit(
        "a.plan",
        &["--memory", "input.user", "--input", "user=alice"],
    );
    assert_eq!(a, "allergy_assert-1");
    two_workers(dir, url);
    assert_eq!(
        store_output(dir, url, &a, "said")["disposition"],
        "committed"
    );
    let b = submit("b.plan", &["--memory", "alice"]);
    two_workers(dir, url);
    let recalled = store_output(dir, url, &b, "allergy");
    assert_eq!(recalled["value"], "penicillin");
    assert_eq!(
        recalled["store"]["records"], 1,
        "the store's head at the read"
    );
    assert_eq!(
        store_output(dir, url, &b, "azithromycin"),
        Value::Object(Default::default()),
        "B acted on the recalled allergy"
    );
    let c = submit("c.plan", &["--memory", "alice"]);
    two_workers(dir, url);
    let said = store_output(dir, url, &c, "said");
    assert_eq!(said["disposition"], "queued_for_adjudication");
    let handle = said["adjudication"]["handle"].as_str().unwrap().to_owned();
    let (code, req) = json_in(
        dir,
        &[
            "adjudications",
            "--memory",
            "alice",
            "--json",
            "--store",
            url,
        ],
    );
    assert_eq!(code, 0, "{req}");
    assert_eq!(req["challenger"]["run"], c.as_str());
    assert_eq!(req["incumbent"]["run"], a.as_str());
    assert_eq!(racing(dir, &verdict_args(&handle, &s)), vec![0, 6]);
    let (code, v) = json_in(
        dir,
        &["memory", "--memory", "alice", "--json", "--store", url],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["store"]["records"], 3, "two claims and one verdict");
    assert_eq!(v["requests"][0]["status"], "resolved");
    ok(dir, &["verify", "--memory", "alice", "--store", url]);
    let (code, list, _) = oracle_in(dir, &["memory", "list", "--store", url]);
    assert_eq!((code, list.trim()), (0, "alice"));
    export(dir, &s)
}

fn export(dir: &Path, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["memory", "export", "alice"];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(&args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The same scenario in a file home. Run ids are `<plan>-<n>` with the first free `n`, and a
/// store numbers its runs across plans: the ids the store gave are reserved first, so the
/// store's records name the same runs.
fn scenario_in_file_home(dir: &Path) -> Vec<u8> {
    for taken in [
        "allergy_recall-1",
        "allergy_contradict-1",
        "allergy_contradict-2",
    ] {
        fs::create_dir_all(dir.join(".oracle/runs").join(taken)).unwrap();
    }
    ok(
        dir,
        &[
            "run",
            "a.plan",
            "--memory",
            "input.user",
            "--input",
            "user=alice",
        ],
    );
    ok(dir, &["run", "b.plan", "--memory", "alice"]);
    let (code, v) = json_in(dir, &["run", "c.plan", "--memory", "alice", "--json"]);
    assert_eq!(code, 0, "{v}");
    let (code, req) = json_in(dir, &["adjudications", "--memory", "alice", "--json"]);
    assert_eq!(code, 0, "{req}");
    let handle = req["handle"].as_str().unwrap().to_owned();
    assert_eq!(racing(dir, &verdict_args(&handle, &[])), vec![0, 6]);
    export(dir, &[])
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn the_allergy_scenario_on_the_store_with_two_workers_gives_the_file_homes_store_bytes() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (st, fh) = (tmp.path().join("store"), tmp.path().join("file"));
    plans(&st);
    plans(&fh);
    let in_store = scenario_in_store(&st, &url);
    let in_file = scenario_in_file_home(&fh);
    assert_eq!(in_store.iter().filter(|&&b| b == b'\n').count(), 3);
    assert_eq!(
        String::from_utf8_lossy(&in_store),
        String::from_utf8_lossy(&in_file),
        "the store's bytes are the file home's"
    );
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn two_store_runs_publishing_conflicting_claims_through_two_workers_never_both_commit() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    plans(&dir);
    let s = ["--store", url.as_str()];
    let x = ok(&dir, &["submit", "x.plan", "--memory", "alice", s[0], s[1]])
        .trim()
        .to_owned();
    let y = ok(&dir, &["submit", "y.plan", "--memory", "alice", s[0], s[1]])
        .trim()
        .to_owned();
    two_workers(&dir, &url);
    let mut dispositions: Vec<String> = [&x, &y]
        .iter()
        .map(|r| {
            store_output(&dir, &url, r, "said")["disposition"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    dispositions.sort();
    assert_eq!(dispositions, ["committed", "queued_for_adjudication"]);
    let (code, v) = json_in(
        &dir,
        &["memory", "--memory", "alice", "--json", "--store", &url],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["store"]["records"], 2, "both claims kept, none lost");
    assert_eq!(v["lines"][0]["belief"]["status"], "contested");
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_verdict_over_the_store_sends_the_runs_waiting_on_its_line_a_resume_their_worker_carries_out() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    plans(&dir);
    let s = ["--store", url.as_str()];
    ok(&dir, &["submit", "x.plan", "--memory", "alice", s[0], s[1]]);
    two_workers(&dir, &url);
    ok(&dir, &["submit", "y.plan", "--memory", "alice", s[0], s[1]]);
    two_workers(&dir, &url);
    let w = ok(&dir, &["submit", "w.plan", "--memory", "alice", s[0], s[1]])
        .trim()
        .to_owned();
    two_workers(&dir, &url);
    let (_, row) = json_in(
        &dir,
        &["runs", "--status", "suspended", "--json", s[0], s[1]],
    );
    assert_eq!(row["run"], w.as_str(), "{row}");
    let mut args = verdict_args("adj-1", &s);
    args.push("--json");
    let (code, v) = json_in(&dir, &args);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["woken"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["woken"][0]["run"], w.as_str());
    assert_eq!(v["woken"][0]["predicate"], "allergy");
    two_workers(&dir, &url);
    let resumed = store_output_kind(&dir, &url, &w, "resumed");
    assert_eq!(resumed["value"]["value"], "none", "{resumed}");
    let (_, row) = json_in(&dir, &["runs", "--json", s[0], s[1]]);
    assert_eq!(row["status"], "completed", "{row}");
}

/// The payload of the first event of kind `kind` in a store run's log.
fn store_output_kind(dir: &Path, url: &str, run: &str, kind: &str) -> Value {
    let (code, out, err) = oracle_in(dir, &["log", run, "--json", "--store", url]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["kind"] == kind)
        .map(|e| e["payload"].clone())
        .unwrap_or_else(|| panic!("no {kind} in {run}: {out}"))
}

/// `n` claims from outside any run about `n` users of store `alice`, over `extra` (a store).
fn claims(dir: &Path, n: u64, extra: &[&str]) {
    for i in 0..n {
        let mut args = common::filler_claim("alice", i);
        args.extend(extra.iter().map(|a| a.to_string()));
        ok(dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    }
}

fn sql(url: &str, statement: &str) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    c.batch_execute(statement).unwrap();
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_forgotten_store_leaves_its_rows_for_a_ledger_record_and_its_readers_still_replay() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    plans(&dir);
    let s = ["--store", url.as_str()];
    ok(&dir, &["submit", "a.plan", "--memory", "alice", s[0], s[1]]);
    two_workers(&dir, &url);
    let b = ok(&dir, &["submit", "b.plan", "--memory", "alice", s[0], s[1]])
        .trim()
        .to_owned();
    two_workers(&dir, &url);
    let (_, before) = json_in(&dir, &["memory", "--memory", "alice", "--json", s[0], s[1]]);
    let forget = ["memory", "forget", "alice", "--note", "erasure request 7"];
    let (code, v) = json_in(&dir, &[&forget[..], &["--json", s[0], s[1]]].concat());
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["forgotten"]["head"], before["store"]["head"]);
    assert_eq!(v["forgotten"]["records"], 1);
    // Gone: not listed, not readable, no row left, and a second forget finds nothing.
    let (_, listed) = json_in(&dir, &["memory", "list", "--json", s[0], s[1]]);
    assert_eq!(listed["stores"], serde_json::json!([]));
    let (code, _, _) = oracle_in(&dir, &["memory", "--memory", "alice", s[0], s[1]]);
    assert_eq!(code, 5);
    let (code, _, _) = oracle_in(&dir, &[&forget[..], &s[..]].concat());
    assert_eq!(code, 5);
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let rows: i64 = c
        .query_one("SELECT count(*) FROM memory_records", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "no claim of the store stays in the database");
    // The ledger keeps the name, length and head (no claims), chained and checked.
    let (code, ledger) = json_in(&dir, &["memory", "ledger", "--json", s[0], s[1]]);
    assert_eq!(code, 0, "{ledger}");
    assert_eq!(ledger["records"][0]["kind"], "forgotten");
    assert_eq!(ledger["records"][0]["note"], "erasure request 7");
    assert_eq!(ledger["records"].as_array().unwrap().len(), 1);
    assert!(!ledger.to_string().contains("penicillin"));
    // The reader's recorded copy stays in its log.
    assert_eq!(
        store_output(&dir, &url, &b, "allergy")["value"],
        "penicillin"
    );
    ok(&dir, &["verify", &b, s[0], s[1]]);
    // A second store forgotten chains on the first; a changed ledger row is found.
    claims(&dir, 1, &s);
    ok(&dir, &[&forget[..], &s[..]].concat());
    let (_, ledger) = json_in(&dir, &["memory", "ledger", "--json", s[0], s[1]]);
    assert_eq!(ledger["records"][1]["prev"], ledger["records"][0]["hash"]);
    sql(
        &url,
        "UPDATE memory_ledger SET record = convert_to(replace(convert_from(record, 'UTF8'), \
         'request 7', 'request 8'), 'UTF8') WHERE seq = 0",
    );
    let (code, _, err) = oracle_in(&dir, &["memory", "ledger", s[0], s[1]]);
    assert_eq!(code, 4, "{err}");
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn a_compacted_store_recalls_from_its_base_verifies_exports_with_it_and_refuses_a_damaged_one() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (dir, fh) = (tmp.path().join("store"), tmp.path().join("file"));
    plans(&dir);
    plans(&fh);
    let s = ["--store", url.as_str()];
    ok(&dir, &["submit", "a.plan", "--memory", "alice", s[0], s[1]]);
    two_workers(&dir, &url);
    claims(&dir, 5, &s);
    let plain = export(&dir, &s);
    let compact = ["memory", "compact", "alice", "--keep", "2", "--json"];
    let (code, v) = json_in(&dir, &[&compact[..], &s[..]].concat());
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (v["compacted"]["from"].clone(), v["compacted"]["to"].clone()),
        (0.into(), 4.into())
    );
    let lines: Vec<&[u8]> = plain.split_inclusive(|&b| b == b'\n').collect();
    let mut h = blake3::Hasher::new_derive_key("oracle v1 store compacted segment");
    h.update(&lines[..4].concat());
    assert_eq!(v["compacted"]["digest"], h.finalize().to_hex().as_str());
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let kept: i64 = c
        .query_one("SELECT count(*) FROM memory_records", &[])
        .unwrap()
        .get(0);
    assert_eq!(kept, 2, "only the kept records stay rows");
    // A run recalls the compacted claim (record 0) from the base; the store verifies.
    let b = ok(&dir, &["submit", "b.plan", "--memory", "alice", s[0], s[1]])
        .trim()
        .to_owned();
    two_workers(&dir, &url);
    assert_eq!(
        store_output(&dir, &url, &b, "allergy")["value"],
        "penicillin"
    );
    let (code, ver) = json_in(&dir, &["verify", "--memory", "alice", "--json", s[0], s[1]]);
    assert_eq!(code, 0, "{ver}");
    assert_eq!(ver["store"]["records"], 6);
    assert_eq!(ver["compacted"][0], v["compacted"]);
    // The export carries the base on its first line, then the kept records as they are.
    let exported = export(&dir, &s);
    let text = String::from_utf8(exported.clone()).unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    assert!(first.starts_with("{\"base\":"), "{first}");
    assert_eq!(rest.as_bytes(), &lines[4..].concat()[..]);
    // It imports into another store of the database and into a file home, each verified.
    let file = tmp.path().join("alice.jsonl");
    fs::write(&file, &exported).unwrap();
    let f = file.to_str().unwrap();
    ok(&dir, &["memory", "import", "bob", "--file", f, s[0], s[1]]);
    ok(&fh, &["memory", "import", "bob", "--file", f]);
    for (d, extra) in [(&dir, &s[..]), (&fh, &[][..])] {
        let args = [&["verify", "--memory", "bob", "--json"][..], extra].concat();
        let (code, v) = json_in(d, &args);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["store"]["head"], ver["store"]["head"]);
        assert_eq!(v["compacted"], ver["compacted"]);
    }
    let (code, _, _) = oracle_in(&dir, &["memory", "import", "bob", "--file", f, s[0], s[1]]);
    assert_eq!(code, 2, "an import into an existing store is refused");
    // A damaged base row is refused, never believed (it cannot be rebuilt).
    sql(
        &url,
        "UPDATE memory_bases SET body = set_byte(body, 9, get_byte(body, 9) # 1) WHERE store = 'alice'",
    );
    let (code, _, err) = oracle_in(&dir, &["verify", "--memory", "alice", s[0], s[1]]);
    assert_eq!(code, 4, "{err}");
    let (code, _, _) = oracle_in(&dir, &["memory", "--memory", "alice", s[0], s[1]]);
    assert_eq!(code, 4);
}

#[cfg_attr(
    not(oracle_postgres),
    ignore = "needs PostgreSQL (initdb); .ci/run installs it"
)]
#[test]
fn the_same_history_compacted_on_the_store_and_in_a_file_home_exports_the_same_bytes() {
    let Some(url) = store_url() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (st, fh) = (tmp.path().join("store"), tmp.path().join("file"));
    plans(&st);
    plans(&fh);
    let s = ["--store", url.as_str()];
    for (d, extra) in [(&st, &s[..]), (&fh, &[][..])] {
        claims(d, 5, extra);
        ok(
            d,
            &[&["memory", "compact", "alice", "--keep", "2"][..], extra].concat(),
        );
        claims(d, 2, extra);
    }
    assert_eq!(
        String::from_utf8(export(&st, &s)).unwrap(),
        String::from_utf8(export(&fh, &[])).unwrap()
    );
}
