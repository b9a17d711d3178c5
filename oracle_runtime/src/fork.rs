//! Forks and plan versions: a new run that shares a prefix of another's log byte for byte
//! (`oracle fork`), and a plan changed under a run in flight after it re-derives the run's
//! record (`oracle resume --plan`). docs/FORMAT.md, "Forks and plan versions".
//!
//! A fork copies bytes and never runs its prefix again: its first drive re-derives the engine's
//! state from the copied record exactly as a resume does (pure tools re-run, impure outcomes
//! and answers read back), or from a resume point of the parent's that the prefix holds.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use oracle_core::payload::{self, Payload};
use oracle_core::{EventKind, Hash};
use oracle_plan::CompiledPlan;
use oracle_plan::agent::PlanAgent;
use serde_json::Value;

use crate::engine::{Engine, EngineError};
use crate::paths::LogPaths;
use crate::recorded::Recorded;
use crate::session::{self, PLAN_FILE, Result, RunDir, SessionError, USES_DIR, compile, read_text};
use crate::tool::Registry;
use crate::writer::{Durability, LogWriter};

/// Where a run keeps every plan version it followed, as `<program hash>.plan`.
pub const PLANS_DIR: &str = "plans";

/// Where a fork starts: after the parent's events `0..seq`, or just before a step's first call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForkAt {
    Seq(u64),
    Step(String),
    /// The last decision boundary of the log's valid prefix (`oracle recover`).
    LastValid,
}

/// What a fork records in its `forked` event beyond where it starts.
#[derive(Clone, Debug, Default)]
pub struct ForkGiven {
    /// Who forked it.
    pub by: Option<String>,
    /// A step's output given from outside instead of running it again.
    pub value: Option<(String, Value)>,
    /// The idempotency key it was asked with.
    pub key: Option<String>,
    /// Why it was made, when not by a person's choice of point: `recovered` (`oracle recover`).
    pub reason: Option<String>,
    /// The BLAKE3 hash of the damaged parent log a recovery started from.
    pub damaged: Option<oracle_core::Hash>,
}

fn refused(run: &str, why: String) -> SessionError {
    SessionError::ForkPoint {
        run: run.to_owned(),
        why,
    }
}

/// Whether the engine can take an outside event after the parent's events `0..seq`: at a
/// decision boundary (the next event starts a later round), right after a `suspended` (where a
/// run waits), or after an outside event or the run's last decision.
pub fn at_boundary(events: &Recorded, seq: u64) -> bool {
    let Some(before) = seq.checked_sub(1).and_then(|s| events.link(s)) else {
        return false;
    };
    if matches!(before.kind, EventKind::Suspended | EventKind::Resumed) || before.kind.is_external()
    {
        return true;
    }
    match events.link(seq) {
        Some(next) => next.time > before.time,
        None => matches!(before.kind, EventKind::RunFinished),
    }
}

/// The number of the parent's events a fork at `at` shares.
pub fn fork_point(run: &str, events: &Recorded, at: &ForkAt) -> Result<u64> {
    let len = events.len();
    let seq = match at {
        ForkAt::Seq(seq) if *seq == 0 || *seq > len => {
            return Err(refused(
                run,
                format!("--at {seq}: a fork keeps events 0..SEQ, so SEQ is 1 to {len}"),
            ));
        }
        ForkAt::Seq(seq) => *seq,
        ForkAt::LastValid => match (1..=len).rev().find(|&s| at_boundary(events, s)) {
            Some(seq) => seq,
            None => {
                return Err(refused(
                    run,
                    "no decision boundary before the damage: nothing to recover from".into(),
                ));
            }
        },
        ForkAt::Step(step) => {
            let first = (0..len).find(|&s| {
                events.kind(s) == Some(EventKind::StepScheduled)
                    && matches!(events.event(s).map(|e| e.typed()),
                        Some(Ok(Payload::StepScheduled(p))) if p.step == *step)
            });
            let Some(first) = first else {
                return Err(refused(
                    run,
                    format!("--step {step}: the run never called step `{step}`"),
                ));
            };
            // The round's first event: its decision's state changes, or the call itself.
            let time = events.link(first).map_or(0, |l| l.time);
            (1..=first)
                .find(|&s| events.link(s).is_some_and(|l| l.time == time))
                .unwrap_or(first)
        }
    };
    if !at_boundary(events, seq) {
        let next = (seq..=len).find(|&s| at_boundary(events, s));
        let prev = (1..seq).rev().find(|&s| at_boundary(events, s));
        return Err(refused(
            run,
            format!(
                "--at {seq}: not a decision boundary (a fork starts between rounds); the nearest are {} and {}",
                prev.map_or("none".into(), |s| s.to_string()),
                next.map_or("none".into(), |s| s.to_string())
            ),
        ));
    }
    Ok(seq)
}

/// Copies the first `len` bytes of `from` to `to`.
fn copy_prefix(from: &Path, to: &Path, len: u64) -> Result<()> {
    let file = fs::File::open(from).map_err(SessionError::io(from))?;
    let mut out = fs::File::create(to).map_err(SessionError::io(to))?;
    let copied = std::io::copy(&mut file.take(len), &mut out).map_err(SessionError::io(to))?;
    if copied != len {
        return Err(SessionError::Io {
            path: from.to_path_buf(),
            source: std::io::Error::other(format!("the log ended after {copied} of {len} bytes")),
        });
    }
    out.sync_all().map_err(SessionError::io(to))
}

/// Copies the directory `from` into `to`, files and subdirectories (no links followed).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    if !from.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(to).map_err(SessionError::io(to))?;
    for entry in fs::read_dir(from).map_err(SessionError::io(from))? {
        let entry = entry.map_err(SessionError::io(from))?;
        let kind = entry.file_type().map_err(SessionError::io(entry.path()))?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            fs::copy(entry.path(), &target).map_err(SessionError::io(&target))?;
        }
    }
    Ok(())
}

/// Copies the parent's resume points whose event the fork shares: each names its event by
/// offset and hash, which the copied prefix holds unchanged, so the fork's first drive can
/// start from one instead of the first event (its checks are a resume's, as for any point).
fn copy_points(parent: &LogPaths, fork: &LogPaths, shared: u64) {
    let Ok(seqs) = crate::resume_point::list(parent) else {
        return;
    };
    let (from, to) = (parent.snapshots(), fork.snapshots());
    for seq in seqs.into_iter().filter(|&s| s < shared) {
        let name = format!("{seq:020}.resume.json");
        // A point not copied only costs the fork's first drive a longer catch-up.
        if fs::create_dir_all(&to).is_ok() {
            let _ = fs::copy(from.join(&name), to.join(&name));
        }
    }
}

/// The prefix of a fork's id: the parent's program, which for a code run is `name@version`
/// (its runs are named `name-N`, as `oracle run` names them).
fn id_prefix(parent: &RunDir, program: &str) -> String {
    match program.split_once('@') {
        Some((name, _)) if crate::code_run::is_code_run(&parent.dir) => name.to_owned(),
        _ => program.to_owned(),
    }
}

/// Gives the fork `dir` (run `id`) its parent's program: a plan run's plan, or a code run's
/// command, checked under the parent's seal and sealed again for the fork's id (the MAC covers
/// the run id): an edited one is refused as a resume refuses it.
fn copy_program(parent: &RunDir, id: &str, dir: &Path, key: &crate::seal::SealKey) -> Result<()> {
    if crate::code_run::is_code_run(&parent.dir) {
        return crate::code_run::reseal(parent, id, dir, key);
    }
    fs::copy(parent.dir.join(PLAN_FILE), dir.join(PLAN_FILE))
        .map(|_| ())
        .map_err(SessionError::io(dir.join(PLAN_FILE)))
}

/// Creates the fork of `parent` sharing its events `0..shared`: a new run directory holding
/// those records byte for byte, the parent's plan versions and bindings (sealed again for the
/// fork's id), then one `forked` event. Returns the fork, ready to be resumed.
pub fn create(
    home: &Path,
    parent: &RunDir,
    shared: u64,
    given: ForkGiven,
    key: &crate::seal::SealKey,
) -> Result<RunDir> {
    let mut log = crate::index::IndexedLog::open(&parent.paths.log)?;
    let head = log.read(shared - 1)?;
    let end = match log.offset(shared) {
        Some(o) if shared < log.len() => o,
        _ => fs::metadata(&parent.paths.log)
            .map_err(SessionError::io(&parent.paths.log))?
            .len(),
    };
    let program = match log.read(0)?.typed() {
        Ok(Payload::RunStarted(p)) => p.program,
        _ => {
            return Err(SessionError::NoStart {
                path: parent.paths.log.clone(),
            });
        }
    };
    let (id, dir) = session::new_run_dir(home, &id_prefix(parent, &program))?;
    let made = (|| {
        let paths = LogPaths::of_run(&dir);
        copy_prefix(&parent.paths.log, &paths.log, end)?;
        copy_program(parent, &id, &dir, key)?;
        copy_tree(&parent.dir.join(USES_DIR), &dir.join(USES_DIR))?;
        copy_tree(&parent.dir.join(PLANS_DIR), &dir.join(PLANS_DIR))?;
        let (sealed, _) = crate::bindings::Bindings::read(&parent.dir).sealed(Some(key));
        let meta = sealed.to_json(&id, key);
        let path = dir.join(crate::bindings::META_FILE);
        fs::write(&path, format!("{meta:#}\n")).map_err(SessionError::io(&path))?;
        copy_points(&parent.paths, &paths, shared);
        let mut writer = LogWriter::open(&paths, Durability::DEFAULT)?;
        let (step, value) = given
            .value
            .map_or((None, None), |(s, v)| (Some(s), Some(v)));
        let forked = Payload::Forked(payload::Forked {
            parent: parent.id.clone(),
            seq: shared,
            head: head.hash,
            by: given.by,
            step,
            value,
            key: given.key,
            reason: given.reason,
            damaged: given.damaged,
        });
        writer.append(head.time, vec![], forked)?;
        writer.close()?;
        Ok(RunDir {
            id: id.clone(),
            paths,
            dir: dir.clone(),
        })
    })();
    if made.is_err() {
        // A fork that could not be made leaves nothing behind.
        let _ = fs::remove_dir_all(&dir);
    }
    made
}

/// The `forked` event of the run whose log is `log`, if it is a fork: the last one (a fork of
/// a fork shares its parent's `forked` too, inside its prefix).
pub fn forked_of(log: &Path) -> Option<(u64, payload::Forked)> {
    let mut found = None;
    let _ = crate::reader::scan(log, false, |e| {
        if e.kind == EventKind::Forked
            && let Ok(Payload::Forked(f)) = e.typed()
        {
            found = Some((e.seq, f));
        }
        Ok(true)
    });
    found
}

/// The program hash `run` follows now: the last `plan_upgraded`'s `to`, or its first event's.
/// Only a run that keeps plan versions (a `plans/` directory) is read through.
pub fn current_program(run: &RunDir, recorded: Hash) -> Result<Hash> {
    if !run.dir.join(PLANS_DIR).is_dir() {
        return Ok(recorded);
    }
    let mut current = recorded;
    crate::reader::scan(&run.paths.log, false, |e| {
        if e.kind == EventKind::PlanUpgraded
            && let Ok(Payload::PlanUpgraded(u)) = e.typed()
        {
            current = u.to;
        }
        Ok(true)
    })?;
    Ok(current)
}

/// The path of plan version `hash` in `dir`, or `plan.plan` when none is kept by hash.
pub fn version_path(dir: &Path, hash: &Hash) -> PathBuf {
    let kept = dir.join(PLANS_DIR).join(format!("{}.plan", hash.to_hex()));
    if kept.is_file() {
        kept
    } else {
        dir.join(PLAN_FILE)
    }
}

/// A new plan for `run`, compiled, with its source.
pub fn new_plan(path: &Path, registry: &Registry) -> Result<(CompiledPlan, String)> {
    let source = read_text(path)?;
    let plan = compile(path, &source, registry)?;
    Ok((plan, source))
}

/// The name a plan given as text is compiled under (in diagnostics; never a file read).
pub const GIVEN_PLAN_NAME: &str = "given.plan";

/// A new plan given as text (through the API or the web form, not a file of the server's):
/// compiled as it stands, with no sub-plan read from the server's disk, so a `use` in it is
/// refused by the compiler as a file it cannot find.
pub fn new_plan_text(source: String, registry: &Registry) -> Result<(CompiledPlan, String)> {
    let name = Path::new(GIVEN_PLAN_NAME);
    let len = source.len() as u64;
    if len > session::PLAN_BYTES_MAX {
        return Err(SessionError::TooLarge {
            path: name.to_path_buf(),
            len,
            limit: session::PLAN_BYTES_MAX,
        });
    }
    let plan = session::compile_with_uses(name, &source, registry, &oracle_plan::Sources::new())?;
    Ok((plan, source))
}

/// Checks that `plan` re-derives `run`'s recorded events `0..upto` (all when `None`): the run
/// is replayed under it, nothing written; the first event may differ only in its program.
/// Events after `upto` may differ (a fork's parent goes on past the fork).
pub fn check_upgrade(
    home: &Path,
    run: &RunDir,
    plan: CompiledPlan,
    upto: Option<u64>,
    registry: &Registry,
) -> Result<()> {
    let events = Recorded::read(&run.paths.log)?;
    let upto = upto.unwrap_or(events.len());
    let started = match events.event(0).map(|e| e.typed()) {
        Some(Ok(Payload::RunStarted(p))) => p,
        _ => {
            return Err(SessionError::NoStart {
                path: run.paths.log.clone(),
            });
        }
    };
    let root = std::fs::canonicalize(".").map_err(SessionError::io("."))?;
    let config = session::replay_config(&started, root, home, &run.dir)?;
    let agent = PlanAgent::new(plan, config.inputs.clone());
    let mut engine = Engine::new(agent, registry, config, events, None).allow_program_change();
    match engine.drive() {
        Ok(_) => Ok(()),
        Err(e) if e.seq().is_some_and(|s| s >= upto) => Ok(()),
        Err(EngineError::Diverged(mut d)) => {
            // The chain differs from the first event on (its program hash): not a finding.
            d.fields.retain(|f| f.path != "prev");
            Err(SessionError::UpgradeRefused {
                run: run.id.clone(),
                divergence: d,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// Records that `run` follows `plan` (source `source`) from here on: the version is kept as
/// `plans/<hash>.plan` (and the one it replaces, if not yet kept), then `plan_upgraded` is
/// appended, then `plan.plan` becomes the new source. Call only after [`check_upgrade`].
pub fn record_upgrade(
    run: &RunDir,
    from: Hash,
    plan: &CompiledPlan,
    source: &str,
    by: Option<String>,
) -> Result<()> {
    let plans = run.dir.join(PLANS_DIR);
    fs::create_dir_all(&plans).map_err(SessionError::io(&plans))?;
    let old = plans.join(format!("{}.plan", from.to_hex()));
    if !old.is_file() {
        fs::copy(run.dir.join(PLAN_FILE), &old).map_err(SessionError::io(&old))?;
    }
    let new = plans.join(format!("{}.plan", plan.hash.to_hex()));
    write_synced(&new, source.as_bytes())?;
    let mut writer = LogWriter::open(&run.paths, Durability::DEFAULT)?;
    // The time of the event before it: the rounds that follow keep their ticks.
    let time = writer.head().time;
    writer.append(
        time,
        vec![],
        Payload::PlanUpgraded(payload::PlanUpgraded {
            from,
            to: plan.hash,
            program: plan.name.clone(),
            by,
        }),
    )?;
    writer.close()?;
    write_synced(&run.dir.join(PLAN_FILE), source.as_bytes())
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::File::create(&tmp).map_err(SessionError::io(&tmp))?;
    f.write_all(bytes).map_err(SessionError::io(&tmp))?;
    f.sync_all().map_err(SessionError::io(&tmp))?;
    fs::rename(&tmp, path).map_err(SessionError::io(path))
}

/// Why a fork's prefix is not proved ([`prove_prefix`]); `oracle verify --parent` reports the
/// text (as `reason`), worded as before this type existed.
#[derive(Debug, thiserror::Error)]
pub enum PrefixError {
    #[error("not a fork: its log has no `forked` event")]
    NotAFork,
    #[error("its `forked` event is event {at}, but names a prefix of {prefix} events")]
    Misplaced { at: u64, prefix: u64 },
    #[error("{log}: {source}")]
    Read {
        log: String,
        source: crate::error::StoreError,
    },
    #[error("the fork's event {seq} does not have the head its `forked` event names")]
    ForkHead { seq: u64 },
    /// The run given is not the one the fork's `forked` event names: a sibling fork or a run
    /// of the same plan can hold the very same prefix, so equal hashes alone do not make it
    /// the parent.
    #[error("its `forked` event names run `{named}` as its parent, not `{given}`")]
    NotTheParent { named: String, given: String },
    #[error("the parent's log does not verify: {0}")]
    ParentDamaged(crate::error::StoreError),
    /// Hashes shortened as [`oracle_core::Hash::short`] writes them.
    #[error(
        "the parent's event {seq} has hash {parent}, not the fork's {fork}: the prefixes differ"
    )]
    Differ {
        seq: u64,
        parent: String,
        fork: String,
    },
}

impl PrefixError {
    /// The stable code `oracle verify --parent` reports: `not_the_parent` when the run given
    /// is another run than the one the fork names, `fork_prefix` for every other failure of
    /// the proof.
    pub fn code(&self) -> &'static str {
        match self {
            PrefixError::NotTheParent { .. } => "not_the_parent",
            _ => "fork_prefix",
        }
    }
}

/// Proves that the fork whose log is `fork_log` is a fork of the run whose log is
/// `parent_log` and shares its first events: the fork's `forked` event stands right after the
/// prefix it names, names `parent_id` as its parent (when the parent is a run, which has an
/// id; a bare log file has none), and both logs hold its `head` as the hash of the prefix's
/// last event. A chain hash commits to every event up to it, so equal hashes there are equal
/// prefixes. The parent's log is verified up to the end of the prefix (its hashes are only
/// worth comparing if they hold), as a fork reads it: damage after the prefix (the parent of an
/// `oracle recover`) does not matter, damage inside it fails the proof. The fork's log is the
/// caller's to verify. Returns the `forked` event, or why the proof fails.
pub fn prove_prefix(
    fork_log: &Path,
    parent_log: &Path,
    parent_id: Option<&str>,
) -> std::result::Result<payload::Forked, PrefixError> {
    let (at, f) = forked_of(fork_log).ok_or(PrefixError::NotAFork)?;
    if at != f.seq || f.seq == 0 {
        return Err(PrefixError::Misplaced { at, prefix: f.seq });
    }
    if let Some(given) = parent_id.filter(|&given| given != f.parent) {
        return Err(PrefixError::NotTheParent {
            named: f.parent,
            given: given.to_owned(),
        });
    }
    let hash_at = |log: &Path, seq: u64| {
        crate::index::IndexedLog::open(log)
            .and_then(|mut l| l.read(seq))
            .map(|e| e.hash)
            .map_err(|source| PrefixError::Read {
                log: log.display().to_string(),
                source,
            })
    };
    if hash_at(fork_log, f.seq - 1)? != f.head {
        return Err(PrefixError::ForkHead { seq: f.seq - 1 });
    }
    let (_, damage) = Recorded::read_valid(parent_log).map_err(PrefixError::ParentDamaged)?;
    if damage.is_some_and(|(seq, _)| seq < f.seq) {
        // Reported as `oracle verify` reports it.
        crate::reader::verify_file(parent_log, crate::VerifyOptions::default())
            .map_err(PrefixError::ParentDamaged)?;
    }
    let parent = hash_at(parent_log, f.seq - 1)?;
    if parent != f.head {
        return Err(PrefixError::Differ {
            seq: f.seq - 1,
            parent: parent.short(),
            fork: f.head.short(),
        });
    }
    Ok(f)
}

/// Where a run came from: the run it was forked from (and how many events it shares), the run
/// and step that spawned it (a child run), and the plan versions it was upgraded to, in order.
/// Read from its log (`oracle runs --tree`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lineage {
    pub parent: Option<(String, u64)>,
    pub spawned_by: Option<oracle_core::payload::ParentRun>,
    pub upgrades: Vec<Hash>,
}

/// The [`Lineage`] of the run whose log is `log` (one scan; a log that cannot be read has
/// none).
pub fn lineage(log: &Path) -> Lineage {
    let mut l = Lineage::default();
    let _ = crate::reader::scan(log, false, |e| {
        match e.kind {
            EventKind::RunStarted => {
                if let Ok(Payload::RunStarted(s)) = e.typed() {
                    l.spawned_by = s.parent;
                }
            }
            EventKind::Forked => {
                // The last one is this run's own (earlier ones are its ancestors').
                if let Ok(Payload::Forked(f)) = e.typed() {
                    l.parent = Some((f.parent, f.seq));
                }
            }
            EventKind::PlanUpgraded => {
                if let Ok(Payload::PlanUpgraded(u)) = e.typed() {
                    l.upgrades.push(u.to);
                }
            }
            _ => {}
        }
        Ok(true)
    });
    l
}
