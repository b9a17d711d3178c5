//! Properties of the engine over random plans: the log does not depend on `--jobs`, a replay
//! reproduces every run, and a run cut short after any event and resumed ends byte-identical
//! to one that was never interrupted.

use std::fs;
use std::path::{Path, PathBuf};

use oracle_runtime::answer::AnswerError;
use oracle_runtime::session::{self, StartOptions};
use oracle_runtime::tools;
use oracle_runtime::{Durability, index};
use proptest::prelude::*;

/// One random step: which earlier steps it reads, and which clauses it has.
#[derive(Clone, Debug)]
struct StepGen {
    reads: Vec<usize>,
    kind: u8,
    when: bool,
    expect: bool,
    policy: u8,
}

fn step_gen() -> impl Strategy<Value = StepGen> {
    (
        proptest::collection::vec(any::<usize>(), 0..3),
        0u8..10,
        any::<bool>(),
        any::<bool>(),
        0u8..2,
    )
        .prop_map(|(reads, kind, when, expect, policy)| StepGen {
            reads,
            kind,
            when,
            expect,
            policy,
        })
}

/// A plan of pure steps (and kv writes), belief-memory asserts and queries that conflict,
/// auction bids and clock advances (scored by the rubric), and impure file reads, whose data
/// flow is a random DAG. Every step `s<i>` outputs
/// `{value: {n: ...}}` so any step can read any earlier one.
fn plan_text(steps: &[StepGen]) -> String {
    let mut s = String::from(
        "plan random version 1\ngrant kv:set:*\ngrant fs:read:Cargo.toml\n\n\
         market = auction.open { accounts: { a: 100, b: 100 }, period: 2, bidding_window: 1, first_auction_tick: 0, tie_break: \"seeded\" }\n\
         work = auction.submit { agent: \"a\", artifact: \"w\", content: \"fn main() {}\" }\n  after market\n",
    );
    for (i, g) in steps.iter().enumerate() {
        let reads: Vec<usize> = if i == 0 {
            vec![]
        } else {
            let mut r: Vec<usize> = g.reads.iter().map(|x| x % i).collect();
            r.sort();
            r.dedup();
            r
        };
        let mut text = format!("\"s{i}\"");
        for r in &reads {
            text.push_str(&format!(" + \" \" + s{r}.value.n"));
        }
        let call = match g.kind {
            0 | 1 => format!("json.get {{ value: {{ n: {text} }}, path: \"n\" }}"),
            2 => "random.int { min: 0, max: 9 }".to_owned(),
            3 => "clock.now {}".to_owned(),
            4 => format!("kv.set {{ key: \"k{i}\", value: {text} }}"),
            // Two lines, two values: asserts conflict, so requests are queued.
            5 => format!(
                "memory.assert {{ subject: \"x\", predicate: \"p{}\", value: \"v{}\", provenance: \"external_first_hand\" }}",
                i % 2,
                reads.len() % 2
            ),
            6 => format!(
                "memory.query {{ subject: \"x\", predicate: \"p{}\" }}",
                i % 2
            ),
            // Bids and advances in DAG order: some are refused (outside the bidding phase, time
            // going backwards), which the step absorbs.
            8 => format!(
                "auction.bid {{ agent: \"a\", artifact: \"w\", amount: {} }}\n  after work\n  on failure continue",
                reads.len() + 1
            ),
            9 => format!("auction.advance {{ to: {i} }}\n  after work\n  on failure continue"),
            _ => "fs.read { path: \"Cargo.toml\" }".to_owned(),
        };
        s.push_str(&format!("t{i} = {call}\n"));
        let n_expr = match g.kind {
            0..=2 => format!("t{i}.value"),
            3 => format!("t{i}.tick"),
            5 => format!("t{i}.disposition"),
            6 => format!("t{i}.status"),
            7 => format!("t{i}.bytes"),
            8 => format!("t{i}.escrow"),
            9 => format!("t{i}.auction"),
            _ => i.to_string(),
        };
        s.push_str(&format!(
            "s{i} = json.get {{ value: {{ n: {n_expr} }}, path: \"\" }}\n"
        ));
        if g.when && !reads.is_empty() {
            s.push_str(&format!("  when s{}.value.n != 3\n", reads[0]));
        }
        if g.expect {
            s.push_str(&format!("  expect s{i}.value.n != 5\n  retry 2\n"));
        }
        if g.policy == 1 {
            s.push_str("  on failure continue\n");
        }
    }
    s
}

fn start(plan: &Path, home: &Path, jobs: u32) -> session::Session {
    let opts = StartOptions {
        seed: 7,
        jobs,
        durability: Durability::None,
        ..StartOptions::new(home, plan)
    };
    session::start(&opts, &tools::builtin()).unwrap()
}

fn log_of(s: &session::Session) -> PathBuf {
    s.dir.join("events.jsonl")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn jobs_replay_and_resume_after_any_cut(
        steps in proptest::collection::vec(step_gen(), 1..14),
        cut in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let plan = dir.path().join("random.plan");
        fs::write(&plan, plan_text(&steps)).unwrap();
        let registry = tools::builtin();

        let one = start(&plan, &dir.path().join("one"), 1);
        let four = start(&plan, &dir.path().join("four"), 4);
        let bytes = fs::read(log_of(&one)).unwrap();
        prop_assert_eq!(&bytes, &fs::read(log_of(&four)).unwrap(), "--jobs 1 and 4 differ");

        let replayed = session::replay(&dir.path().join("one"), &one.id, None, 2, &registry).unwrap();
        prop_assert_eq!(replayed.report.matched, one.report.events);
        prop_assert_eq!(replayed.report.state.hash(), one.report.state.hash());

        // Cut the log after event k (as a crash between two writes would) and resume.
        let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
        let k = 1 + cut.index(lines.len());
        let cut_home = dir.path().join("cut");
        let cut_run = start(&plan, &cut_home, 1);
        let cut_log = log_of(&cut_run);
        fs::write(&cut_log, lines[..k].concat()).unwrap();
        let _ = fs::remove_file(index::index_path(&cut_log));
        if k < lines.len() {
            let resumed = session::resume(&cut_home, &cut_run.id, None, 2, Durability::None, &registry);
            let resumed = resumed.unwrap();
            prop_assert_eq!(resumed.report.matched, k as u64);
        }
        prop_assert_eq!(fs::read(&cut_log).unwrap(), bytes, "resumed after {} events", k);
    }
}

#[test]
fn a_wide_plan_runs_in_bounded_rounds_and_is_the_same_for_any_jobs() {
    // More independent steps than one decision starts, so several rounds are needed.
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("wide.plan");
    let mut text = String::from("plan wide version 1\n");
    for i in 0..150 {
        text.push_str(&format!("s{i} = text.count {{ text: \"a b {i}\" }}\n"));
    }
    fs::write(&plan, text).unwrap();
    let one = start(&plan, &dir.path().join("one"), 1);
    let many = start(&plan, &dir.path().join("many"), 8);
    assert_eq!(
        fs::read(log_of(&one)).unwrap(),
        fs::read(log_of(&many)).unwrap()
    );
    // 150 steps at most 64 per decision: three rounds of calls, then the finish.
    let events = oracle_runtime::reader::read_all(&log_of(&one)).unwrap();
    let last_time = events.last().unwrap().time;
    assert_eq!(last_time, 4, "three rounds of calls and one to finish");
}

#[test]
fn reaching_the_calls_bound_is_recorded_and_fails_the_run() {
    use oracle_core::Payload;
    use oracle_core::payload::RunStatus;
    use oracle_plan::agent::PlanAgent;
    use oracle_runtime::engine::{Ending, Engine, RunConfig};
    use oracle_runtime::{LogPaths, LogWriter};

    let dir = tempfile::tempdir().unwrap();
    let registry = tools::builtin();
    let mut text = String::from("plan chain version 1\ns0 = text.count { text: \"a\" }\n");
    for i in 1..5 {
        text.push_str(&format!(
            "s{i} = text.count {{ text: \"a\" }}\n  after s{}\n",
            i - 1
        ));
    }
    let plan = session::compile(Path::new("chain.plan"), &text, &registry).unwrap();
    let config = RunConfig {
        store: vec![],
        seed: 0,
        grants: vec![],
        inputs: Default::default(),
        root: dir.path().canonicalize().unwrap(),
        jobs: 1,
        calls_max: 3,
        domains: Default::default(),
        budget: None,
        scorer: None,
        resume_points: Default::default(),
        key: None,
        parent: None,
        shared: None,
        live: None,
    };
    let paths = LogPaths::of_file(&dir.path().join("bound.jsonl"));
    let writer = LogWriter::create(&paths, Durability::None).unwrap();
    let agent = PlanAgent::new(plan, Default::default());
    let mut engine = Engine::new(agent, &registry, config, Vec::new(), Some(writer));
    let report = engine.drive().unwrap();
    let reason = "bound reached: calls_max = 3 tool calls per run".to_owned();
    assert_eq!(
        report.ending,
        Ending::Finished {
            status: RunStatus::Failed,
            reason: reason.clone()
        }
    );
    drop(engine);
    let events = oracle_runtime::reader::read_all(&paths.log).unwrap();
    let calls = events
        .iter()
        .filter(|e| matches!(e.typed().unwrap(), Payload::ToolCalled(_)))
        .count();
    assert_eq!(calls, 3, "the fourth call is never made");
    match events.last().unwrap().typed().unwrap() {
        Payload::RunFinished(f) => assert_eq!(f.reason, reason),
        other => panic!("{other:?}"),
    }
}

/// A step suspended on a belief takes a verdict, not an answer: the engine refuses an answer
/// given for it with the memory domain's words and code (`belief_wait`, which the API and
/// `--json` print), before anything is recorded. The engine names no domain: the words are
/// the domain's (`Domain::wait_words`).
#[test]
fn an_answer_to_a_step_waiting_on_a_belief_is_refused_in_the_memory_domains_words() {
    use oracle_plan::agent::PlanAgent;
    use oracle_runtime::engine::{Ending, Engine, EngineError, RunConfig};
    use oracle_runtime::{LogPaths, LogWriter};

    let dir = tempfile::tempdir().unwrap();
    let registry = tools::builtin();
    let text = fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/plans/adjudication.plan"),
    )
    .unwrap();
    let plan = session::compile(Path::new("adjudication.plan"), &text, &registry).unwrap();
    let inputs = || oracle_plan::agent::bind_inputs(&plan, &[]).unwrap();
    let config = || RunConfig {
        store: vec![],
        seed: 0,
        grants: plan.grants.clone(),
        inputs: inputs(),
        root: dir.path().canonicalize().unwrap(),
        jobs: 1,
        calls_max: 1_000,
        domains: Default::default(),
        budget: None,
        scorer: None,
        resume_points: Default::default(),
        key: None,
        parent: None,
        shared: None,
        live: None,
    };
    let paths = LogPaths::of_file(&dir.path().join("wait.jsonl"));
    let writer = LogWriter::create(&paths, Durability::None).unwrap();
    let mut engine = Engine::new(
        PlanAgent::new(plan.clone(), inputs()),
        &registry,
        config(),
        Vec::new(),
        Some(writer),
    );
    let ending = engine.drive().unwrap().ending;
    assert!(
        matches!(&ending, Ending::Suspended { step, .. } if step == "allergy"),
        "{ending:?}"
    );
    drop(engine);
    let recorded = oracle_runtime::reader::read_all(&paths.log).unwrap();
    let before = fs::read(&paths.log).unwrap();
    let mut engine = Engine::new(
        PlanAgent::new(plan.clone(), inputs()),
        &registry,
        config(),
        recorded,
        None,
    )
    .with_answer("allergy".into(), serde_json::json!("none"));
    let err = engine.drive().unwrap_err();
    assert_eq!(
        err.to_string(),
        "step `allergy` waits on a belief, not on an answer: adjudicate it (`oracle adjudicate`), then resume without a value"
    );
    match err {
        EngineError::Answer(AnswerError::DomainWait { step, words, .. }) => {
            assert_eq!((step.as_str(), words.code), ("allergy", "belief_wait"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fs::read(&paths.log).unwrap(),
        before,
        "nothing was recorded"
    );
}

#[test]
fn an_input_over_its_bound_fails_the_call_with_a_recorded_reason() {
    use oracle_core::Payload;
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("big.txt"), "x".repeat(5 << 20)).unwrap();
    let plan = dir.path().join("big.plan");
    fs::write(
        &plan,
        "plan big version 1\ngrant fs:read:big.txt\n\
         a = fs.read { path: \"big.txt\" }\n\
         b = text.contains { text: a.text + a.text, pattern: \"y\" }\n  retry 1\n",
    )
    .unwrap();
    let opts = StartOptions {
        durability: Durability::None,
        root: dir.path().to_path_buf(),
        ..StartOptions::new(&dir.path().join("home"), &plan)
    };
    let s = session::start(&opts, &tools::builtin()).unwrap();
    let events = oracle_runtime::reader::read_all(&log_of(&s)).unwrap();
    let failed = events
        .iter()
        .find_map(|e| match e.typed().unwrap() {
            Payload::ToolFailed(f) if f.step == "b" => Some(f.error),
            _ => None,
        })
        .expect("the oversized call is recorded as failed");
    assert!(failed.contains("input_bytes_max"), "{failed}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.typed().unwrap(), Payload::ToolCalled(c) if c.step == "b")),
        "the oversized input is never recorded"
    );
    assert!(matches!(
        s.report.ending,
        oracle_runtime::engine::Ending::Finished {
            status: oracle_core::payload::RunStatus::Failed,
            ..
        }
    ));
}

/// Runs `plan` once, then for every k cuts a copy of its log after k events and resumes it:
/// every resume must end byte-identical to the uninterrupted run.
fn resume_after_every_cut(name: &str, plan_text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join(format!("{name}.plan"));
    fs::write(&plan, plan_text).unwrap();
    let registry = tools::builtin();
    let whole = start(&plan, &dir.path().join("whole"), 1);
    let bytes = fs::read(log_of(&whole)).unwrap();
    let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
    for k in 1..lines.len() {
        let home = dir.path().join(format!("cut-{k}"));
        let run = start(&plan, &home, 1);
        let log = log_of(&run);
        fs::write(&log, lines[..k].concat()).unwrap();
        let _ = fs::remove_file(index::index_path(&log));
        let resumed = session::resume(&home, &run.id, None, 2, Durability::None, &registry)
            .unwrap_or_else(|e| panic!("{name}: resume after {k} events: {e}"));
        assert_eq!(resumed.report.matched, k as u64, "{name}: cut after {k}");
        assert_eq!(
            fs::read(&log).unwrap(),
            bytes,
            "{name}: resumed after {k} events"
        );
    }
}

/// Regression (issue 23): an economy call and an impure read in one round. The outcome of
/// `fs.read` was looked for at its position among the impure calls only, so a cut right after
/// the auction's outcome made resume read that outcome as the read's ("no recorded outcome").
#[test]
fn a_round_of_economy_memory_impure_and_pure_calls_resumes_after_every_cut() {
    resume_after_every_cut(
        "mixed",
        "plan mixed version 1\ngrant fs:read:Cargo.toml\ngrant kv:set:*\n\n\
         market = auction.open { accounts: { a: 100, b: 100 }, period: 2, bidding_window: 1, first_auction_tick: 0, tie_break: \"seeded\" }\n\
         file = fs.read { path: \"Cargo.toml\" }\n\
         claim = memory.assert { subject: \"x\", predicate: \"p\", value: \"v1\", provenance: \"external_first_hand\" }\n  after count\n\
         count = text.count { text: \"a b c\" }\n\
         again = fs.read { path: \"Cargo.toml\" }\n\
         work = auction.submit { agent: \"a\", artifact: \"w\", content: file.text }\n\
         bid = auction.bid { agent: \"a\", artifact: \"w\", amount: 5 }\n  after work\n\
         other = memory.assert { subject: \"x\", predicate: \"p\", value: \"v2\", provenance: \"model_derived\" }\n  after claim\n\
         note = kv.set { key: \"n\", value: count.words }\n\
         tail = fs.read { path: \"Cargo.toml\" }\n  after bid\n\
         adv = auction.advance { to: 3 }\n  after bid\n  on failure continue\n",
    );
}
