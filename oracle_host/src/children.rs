//! Child runs (`spawn` steps, docs/PLAN.md "Child runs"): the host, not the engine, starts a
//! run's child, drives it, and records its outcome as the answer of the step that spawned it.
//!
//! A parent's `spawn` call suspends it like a `wait.event`. After every drive through this home
//! ([`Home::settle`]) a run suspended on a `spawn` step gets its child: started with an
//! idempotency key derived from the parent, the step and the attempt (or the step's own `key`),
//! so a second look (a resume after a crash between the spawn and the child's start, a replay)
//! finds the same child instead of starting another. The child's first event names its parent
//! (`run_started.parent`). When the child ends (now, or later when someone resumes it), its
//! outcome is recorded in the parent as the step's answer, by `child <id>`: `completed` with
//! the child's step outputs, or the child's failure, which fails the step. A detached child is
//! answered at once with its id. Cancelling a run cancels its live children, recursively
//! ([`Home::cancel_children`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oracle_core::payload::{ParentRun, Payload};
use oracle_runtime::engine::Ending;
use oracle_runtime::index::IndexedLog;
use oracle_runtime::paths::LogPaths;
use oracle_runtime::recorded::Recorded;
use oracle_runtime::session::{self, Session, SessionError, StartOptions};
use oracle_runtime::tools::spawn::{COMPLETED, DETACHED, SPAWN_TOOL};
use serde_json::{Map, Value, json};

use oracle_runtime::session::Prepared;

use crate::bind::Given;
use crate::error::HostError;
use crate::home::{Home, Resume, Start};
use crate::limits::{CHILD_DEPTH_MAX, CHILDREN_PER_RUN_MAX, HOME_RUNS_SCANNED_MAX};
use crate::signal::{ChildEnded, Signal};

/// Who a child's outcome is recorded by in its parent's `resumed` event.
pub const CHILD_BY_PREFIX: &str = "child ";

/// Where the children of a run go when the home driving it does not start them itself: a
/// store's worker submits each as a run of the store (any worker may drive it) and sends each
/// child's outcome to its parent as a signal ([`Signal::Child`]).
pub trait ChildStore: Send + Sync {
    /// Submits the child prepared in `prepared` under its key, or finds the run that key
    /// started: the child's id, and the answer for its parent's step when it has ended.
    fn submit(&self, prepared: &Prepared) -> Result<(String, Option<Value>), HostError>;
    /// Queues `signal` for its run.
    fn send(&self, signal: &Signal) -> Result<(), HostError>;
    /// The runs `run` spawned, with their states (`completed`, `suspended`, ...), by id.
    fn children(&self, run: &str) -> Result<Vec<(String, String)>, HostError>;
}

/// A `spawn` step a run waits on, as its log records the call.
#[derive(Clone, Debug)]
pub struct SpawnWait {
    pub step: String,
    pub attempt: u64,
    pub plan: String,
    pub inputs: Map<String, Value>,
    pub key: String,
    pub detach: bool,
}

/// The `spawn` step the run in `dir` waits on now, if it waits on one.
pub fn spawn_wait(id: &str, dir: &Path) -> Result<Option<SpawnWait>, HostError> {
    let events = Recorded::read(&LogPaths::of_run(dir).log)?;
    let Some(Ok(Payload::Suspended(s))) = session::last_program_event(&events).map(|e| e.typed())
    else {
        return Ok(None);
    };
    let Some((tool, input)) = session::latest_call_of(&events, &s.step) else {
        return Ok(None);
    };
    if tool != SPAWN_TOOL {
        return Ok(None);
    }
    let text = |k: &str| input.get(k).and_then(Value::as_str).map(str::to_owned);
    Ok(Some(SpawnWait {
        key: text("key").unwrap_or_else(|| format!("spawn {id} {} {}", s.step, s.attempts)),
        plan: text("plan").unwrap_or_default(),
        inputs: input
            .get("inputs")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        detach: input
            .get("detach")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        step: s.step,
        attempt: s.attempts,
    }))
}

/// The run and step that spawned the run in `dir`, from its first event.
pub fn parent_of(dir: &Path) -> Option<ParentRun> {
    let first = IndexedLog::open(&LogPaths::of_run(dir).log)
        .and_then(|mut l| l.read(0))
        .ok()?;
    match first.typed() {
        Ok(Payload::RunStarted(s)) => s.parent,
        _ => None,
    }
}

/// The idempotency key the run in `dir` was started with.
fn key_of(dir: &Path) -> Option<String> {
    let first = IndexedLog::open(&LogPaths::of_run(dir).log)
        .and_then(|mut l| l.read(0))
        .ok()?;
    match first.typed() {
        Ok(Payload::RunStarted(s)) => s.key,
        _ => None,
    }
}

/// The answer a `spawn` step is given for the child in `dir` (id `id`) as it is now: `None`
/// while the child has not ended.
pub fn child_answer(id: &str, dir: &Path) -> Option<Value> {
    let info = session::run_info(dir);
    match info.status.as_str() {
        COMPLETED => Some(json!({"run": id, "status": COMPLETED, "outputs": outputs_of(dir)})),
        "failed" | "cancelled" => Some(json!({
            "run": id,
            "status": info.status,
            "reason": info.reason.unwrap_or_default(),
        })),
        _ => None,
    }
}

/// A completed run's top-level step outputs by step name (a step that produced none is left
/// out).
fn outputs_of(dir: &Path) -> Value {
    let rebuilt = oracle_runtime::snapshots::state_at(&LogPaths::of_run(dir), None, true);
    let mut out = Map::new();
    if let Ok(r) = rebuilt {
        for (key, packed) in r.state.iter() {
            let Some(step) = key.strip_prefix("step/") else {
                continue;
            };
            if step.contains('/') || step.contains('[') || step.contains('@') {
                continue;
            }
            if let Some(o) = packed.value().get("output") {
                out.insert(step.to_owned(), o.clone());
            }
        }
    }
    Value::Object(out)
}

/// The answer of a `spawn` step whose child could not be started: the step fails, naming why
/// in words that are the same on every machine (no path).
fn refused(plan: &str, why: &str) -> Value {
    json!({"run": "", "status": "refused", "reason": format!("the child plan `{plan}` was not started: {why}")})
}

/// How many runs up the `parent` links go from the run in `dir` (0: no parent), stopping past
/// [`CHILD_DEPTH_MAX`].
fn depth_of(home: &Home, dir: &Path) -> u32 {
    let mut depth = 0;
    let mut at = dir.to_path_buf();
    while let Some(p) = parent_of(&at) {
        depth += 1;
        if depth > CHILD_DEPTH_MAX {
            break;
        }
        at = home.dir().join("runs").join(&p.run);
    }
    depth
}

/// The `spawn` calls the run's log holds (every attempt of every step), bounded by the read.
fn spawns_made(dir: &Path) -> u64 {
    let Ok(events) = Recorded::read(&LogPaths::of_run(dir).log) else {
        return 0;
    };
    (events.base()..events.len())
        .filter(|&seq| events.kind(seq) == Some(oracle_core::EventKind::ToolCalled))
        .filter_map(|seq| events.event(seq)?.typed().ok())
        .filter(|p| matches!(p, Payload::ToolCalled(c) if c.tool == SPAWN_TOOL))
        .count() as u64
}

/// The cancel of a child whose parent `run` was cancelled, recorded in the child's log.
fn cancel_of_child(run: &str) -> oracle_runtime::engine::Cancel {
    oracle_runtime::engine::Cancel {
        by: Some(format!("parent {run}")),
        reason: format!("its parent run `{run}` was cancelled"),
    }
}

/// [`Home::cancel_children`] over a store: a cancel queued for each child that has not ended,
/// whose worker cancels it (and, so, its own children).
fn cancel_in_store(
    store: &dyn ChildStore,
    run: &str,
    durability: oracle_runtime::writer::Durability,
) -> Result<(), HostError> {
    for (child, state) in store.children(run)? {
        if matches!(state.as_str(), "completed" | "failed" | "cancelled") {
            continue;
        }
        let c = cancel_of_child(run);
        store.send(&Signal::Cancel {
            run: child,
            by: c.by,
            reason: c.reason,
            durability,
        })?;
    }
    Ok(())
}

impl Home {
    /// After a drive of a run through this home: while the run waits on a `spawn` step whose
    /// child has ended (or is detached), records the child's outcome as the step's answer and
    /// drives the run on; a child not started yet is started first (and driven, and so on down).
    /// A run that ended and has a parent waiting on it gives the parent its outcome (when
    /// `up`). Returns the run's latest session.
    pub(crate) fn settle(&self, mut session: Session, up: bool) -> Result<Session, HostError> {
        loop {
            match &session.report.ending {
                Ending::Suspended { .. } => {}
                Ending::Finished { .. } => {
                    if up {
                        self.deliver_up(&session.dir)?;
                    }
                    return Ok(session);
                }
                _ => return Ok(session),
            }
            let Some(wait) = spawn_wait(&session.id, &session.dir)? else {
                return Ok(session);
            };
            let Some(answer) = self.child_for(&session, &wait)? else {
                return Ok(session);
            };
            let by = match answer.get("run").and_then(Value::as_str) {
                Some(c) if !c.is_empty() => format!("{CHILD_BY_PREFIX}{c}"),
                _ => "host".to_owned(),
            };
            session = self.deliver(&session.id, &wait.step, answer, by)?;
        }
    }

    /// Records `answer` for `step` of `run` and drives it on (without settling it).
    fn deliver(
        &self,
        run: &str,
        step: &str,
        answer: Value,
        by: String,
    ) -> Result<Session, HostError> {
        let mut r = Resume {
            answer: Some((step.to_owned(), answer)),
            ..Resume::default()
        };
        r.drive.answered_by = Some(by);
        Ok(self.drive_resume(run, r)?.session)
    }

    /// The child of the `spawn` step `wait` of `parent`: started (and driven as far as it goes
    /// now) unless its key started it already. The step's answer when the child has ended or
    /// is detached, or when it cannot be started; `None` while it runs.
    fn child_for(&self, parent: &Session, wait: &SpawnWait) -> Result<Option<Value>, HostError> {
        if depth_of(self, &parent.dir) >= CHILD_DEPTH_MAX {
            let why = format!("bound reached: child_depth_max = {CHILD_DEPTH_MAX} nested runs");
            return Ok(Some(refused(&wait.plan, &why)));
        }
        if spawns_made(&parent.dir) > CHILDREN_PER_RUN_MAX {
            let why = format!("bound reached: children_per_run_max = {CHILDREN_PER_RUN_MAX}");
            return Ok(Some(refused(&wait.plan, &why)));
        }
        let plan = parent.dir.join(session::USES_DIR).join(&wait.plan);
        let mut opts = StartOptions::new(self.dir(), &plan);
        opts.input_values = wait.inputs.clone();
        opts.key = Some(wait.key.clone());
        opts.root = self.workdir(&self.find(&parent.id)?)?;
        opts.parent = Some(ParentRun {
            run: parent.id.clone(),
            step: wait.step.clone(),
        });
        if let Ok(Some(Payload::RunStarted(s))) =
            IndexedLog::open(&LogPaths::of_run(&parent.dir).log)
                .and_then(|mut l| l.read(0))
                .map(|e| e.typed().ok())
        {
            opts.seed = s.seed;
        }
        if let Some(store) = self.child_store() {
            return self.submit_child(store, opts, wait);
        }
        if self.replicated() {
            return Ok(None); // A worker's home with nowhere to submit: the run waits.
        }
        let (id, dir) = match self.start_unsettled(opts, &Given::default(), Vec::new(), None) {
            Ok(Start::New(child)) => {
                let child = self.settle(child, false)?;
                (child.id, child.dir)
            }
            Ok(Start::Existing(e)) => (e.id, e.dir),
            Err(e) => return Ok(Some(refused(&wait.plan, e.code()))),
        };
        if wait.detach {
            return Ok(Some(json!({"run": id, "status": DETACHED})));
        }
        Ok(child_answer(&id, &dir))
    }

    /// [`Home::child_for`] over a store: the child prepared here and submitted to `store`, for
    /// any worker to drive (this home's copy is removed once submitted).
    fn submit_child(
        &self,
        store: &Arc<dyn ChildStore>,
        opts: StartOptions,
        wait: &SpawnWait,
    ) -> Result<Option<Value>, HostError> {
        let prepared = match self.prepare_submission(opts, &Given::default(), Vec::new()) {
            Ok(Start::New(p)) => p,
            Ok(Start::Existing(e)) => {
                let _ = std::fs::remove_dir_all(&e.dir);
                return Ok(Some(refused(&wait.plan, "key_used")));
            }
            Err(e) => return Ok(Some(refused(&wait.plan, e.code()))),
        };
        let submitted = store.submit(&prepared);
        let _ = std::fs::remove_dir_all(&prepared.dir);
        let (id, answer) = submitted?;
        if wait.detach {
            return Ok(Some(json!({"run": id, "status": DETACHED})));
        }
        Ok(answer)
    }

    /// A child run ended ([`Signal::Child`], queued by the worker that drove it): when `run`
    /// still waits on it (on `step`, spawned with `key`), records `value` as the step's answer
    /// and drives `run` on. `None`: it did not wait on that child, and nothing was recorded.
    pub fn child_ended(&self, c: ChildEnded) -> Result<Option<Session>, HostError> {
        let found = self.find(&c.run)?;
        match spawn_wait(&found.id, &found.dir)? {
            Some(w) if w.step == c.step && w.key == c.key && !w.detach => {}
            _ => return Ok(None),
        }
        let by = format!("{CHILD_BY_PREFIX}{}", c.child);
        let session = self.deliver(&c.run, &c.step, c.value, by)?;
        Ok(Some(self.settle(session, true)?))
    }

    /// The child in `dir` has ended: when its parent still waits on it (on the step that
    /// spawned it, by the key it was started with), records its outcome there and drives the
    /// parent on, settling it in turn.
    pub(crate) fn deliver_up(&self, dir: &Path) -> Result<(), HostError> {
        let Some(parent) = parent_of(dir) else {
            return Ok(());
        };
        if let Some(store) = self.child_store() {
            return self.signal_parent(store, dir, parent);
        }
        let Ok(found) = self.find(&parent.run) else {
            return Ok(());
        };
        let Some(wait) = spawn_wait(&found.id, &found.dir)? else {
            return Ok(());
        };
        if wait.step != parent.step || wait.detach || key_of(dir).as_deref() != Some(&wait.key) {
            return Ok(());
        }
        let id = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let Some(answer) = child_answer(&id, dir) else {
            return Ok(());
        };
        let session = match self.deliver(
            &found.id,
            &wait.step,
            answer,
            format!("{CHILD_BY_PREFIX}{id}"),
        ) {
            Ok(s) => s,
            // Another drive holds the parent: it delivers when it looks again.
            Err(e) if e.code() == "locked" => return Ok(()),
            Err(e) => return Err(e),
        };
        self.settle(session, true)?;
        Ok(())
    }

    /// [`Home::deliver_up`] over a store: the child's outcome queued for its parent's worker.
    fn signal_parent(
        &self,
        store: &Arc<dyn ChildStore>,
        dir: &Path,
        parent: ParentRun,
    ) -> Result<(), HostError> {
        let id = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let (Some(value), Some(key)) = (child_answer(&id, dir), key_of(dir)) else {
            return Ok(());
        };
        store.send(&Signal::Child(ChildEnded {
            run: parent.run,
            step: parent.step,
            key,
            child: id,
            value,
        }))
    }

    /// The runs of this home whose first event names `run` as their parent, by id (at most
    /// [`HOME_RUNS_SCANNED_MAX`] runs looked at).
    pub fn children_of(&self, run: &str) -> Vec<(String, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(self.dir().join("runs")) else {
            return Vec::new();
        };
        let mut out: Vec<(String, PathBuf)> = entries
            .flatten()
            .take(HOME_RUNS_SCANNED_MAX)
            .filter_map(|e| {
                let dir = e.path();
                let p = parent_of(&dir)?;
                (p.run == run).then(|| (e.file_name().to_string_lossy().into_owned(), dir))
            })
            .collect();
        out.sort();
        out
    }

    /// Cancels the live children of `run`, and theirs, recorded in each child's log as a
    /// cancel by the parent. A child that has ended is left as it is.
    pub(crate) fn cancel_children(
        &self,
        run: &str,
        durability: oracle_runtime::writer::Durability,
        depth: u32,
    ) -> Result<(), HostError> {
        if depth > CHILD_DEPTH_MAX {
            return Ok(());
        }
        if let Some(store) = self.child_store() {
            return cancel_in_store(store.as_ref(), run, durability);
        }
        for (id, dir) in self.children_of(run) {
            if session::run_info(&dir).status == "running"
                || session::run_info(&dir).status == "suspended"
            {
                match self.cancel_one(&id, cancel_of_child(run), durability) {
                    Ok(_) => {}
                    Err(HostError::Session(SessionError::CannotCancel { .. })) => {}
                    Err(e) => return Err(e),
                }
            }
            self.cancel_children(&id, durability, depth + 1)?;
        }
        Ok(())
    }
}
