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
    // `event` syncs every event; `none` never.
    assert!(syncs(&root, &chain(true, 20), Durability::Event) >= 80);
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
