//! Forking a stored run and upgrading its plan in flight: [`Home::fork`] (`oracle fork`) and
//! the check-then-record step of `oracle resume --plan` ([`Home::upgrade`]).

use std::path::PathBuf;

use oracle_core::EventKind;
use oracle_core::payload::Payload;
use oracle_runtime::answer::AnswerError;
use oracle_runtime::declared::McpMode;
use oracle_runtime::engine::Progress;
use oracle_runtime::fork::{self, ForkAt, ForkGiven};
use oracle_runtime::recorded::Recorded;
use oracle_runtime::session::{self, Drive, RunDir, Session, SessionError};
use oracle_runtime::tool::Registry;
use serde_json::Value;

use crate::admit::{self, Door};
use crate::bind::{Given, ToolChange};
use crate::error::HostError;
use crate::home::{Existing, Home, Resume, Start, Upgrade};
use oracle_runtime::keys::{self, KeyClaim, KeyGuard, Taken};

/// What a fork is asked for beyond the parent run.
pub struct Fork<'p> {
    /// Where it starts.
    pub at: ForkAt,
    /// The output of the step it starts at, given from outside instead of running it again.
    pub value: Option<Value>,
    /// A new plan for the fork to follow, checked against the shared prefix first.
    pub plan: Option<NewPlan>,
    /// Who forks it (recorded in `forked`).
    pub by: Option<String>,
    /// An idempotency key: a second fork with the same key, parent, point, value and plan finds
    /// the first instead of making another ([`Start::Existing`]); with anything else it is
    /// refused (`key_conflict`).
    pub key: Option<String>,
    /// Who asks for it: a plan given over the network is admitted like a new run
    /// ([`crate::admit`]), with the parent's recorded grants, which the fork keeps.
    pub door: Door<'p>,
    /// Bindings given again, and how the fork's first drive runs.
    pub given: Given,
    pub drive: Drive,
    pub progress: Option<&'p mut dyn FnMut(&Progress)>,
}

/// A plan a fork follows instead of its parent's.
pub enum NewPlan {
    /// A plan file (and the sub-plans it uses, beside it): `oracle fork --plan`.
    File(PathBuf),
    /// A plan's text, uploaded (`POST /api/v1/runs/ID/fork`, the run page's form): no
    /// sub-plan is read from the server's disk for it.
    Text(String),
}

/// A fork made: the new run, where it left its parent, and its first drive (`None` when it
/// waits on a question at once, with no value given).
pub struct Forked {
    pub fork: RunDir,
    pub parent: String,
    /// Events shared with the parent.
    pub shared: u64,
    pub session: Option<Session>,
    /// For a recovery (`oracle recover`): where the parent's damage starts and where its
    /// damaged log is kept.
    pub recovered: Option<Recovered>,
}

/// The `reason` a recovery's `forked` event records.
pub const RECOVERED: &str = "recovered";

/// Where the damaged logs recoveries started from are kept, under the home: a copy each, by
/// parent and hash, never deleted by oracle (the parent's own log is left as it is too).
pub const DAMAGED_DIR: &str = "damaged";

/// A recovery's facts: the damaged parent log's first bad event, its hash, and its copy.
#[derive(Clone, Debug)]
pub struct Recovered {
    pub damaged_at: u64,
    pub hash: oracle_core::Hash,
    pub kept: PathBuf,
}

/// The step a value is given for: the one forked at, or the one the run waits on right
/// before the fork point; and whether it is the answer to that wait.
fn value_step(
    run: &str,
    events: &Recorded,
    at: &ForkAt,
    shared: u64,
) -> Result<(String, bool), HostError> {
    let before = shared.checked_sub(1).and_then(|s| events.event(s));
    if let Some(Ok(Payload::Suspended(s))) = before.map(|e| e.typed()) {
        return Ok((s.step, true));
    }
    match at {
        ForkAt::Step(step) => Ok((step.clone(), false)),
        ForkAt::LastValid => Err(HostError::Session(SessionError::ForkPoint {
            run: run.to_owned(),
            why: "a recovery gives no value: fork the recovered run instead".into(),
        })),
        ForkAt::Seq(seq) => Err(HostError::Session(SessionError::ForkPoint {
            run: run.to_owned(),
            why: format!(
                "--value with --at {seq}: name the step with --step (or fork right after a `suspended`)"
            ),
        })),
    }
}

/// Whether a fork at `at` asks for more than a valid prefix of `len` events holds: a seq past
/// it, or a step (which [`fork::fork_point`] refuses only when the prefix never calls it).
fn past_prefix(at: &ForkAt, len: u64) -> bool {
    match at {
        ForkAt::Seq(seq) => *seq > len,
        ForkAt::Step(_) => true,
        ForkAt::LastValid => false,
    }
}

/// The integrity error of the damaged log at `log`, as a whole read finds it; `otherwise` when
/// the log reads whole now (changed since it was read).
fn damage_error(log: &std::path::Path, otherwise: SessionError) -> HostError {
    match Recorded::read(log) {
        Err(e) => SessionError::from(e).into(),
        Ok(_) => otherwise.into(),
    }
}

impl Home {
    /// Forks `run` (`oracle fork`, `POST /api/v1/runs/ID/fork`): a new run sharing the
    /// parent's events up to the fork point byte for byte, then `forked`, then (with a plan)
    /// `plan_upgraded`, driven on from there until it finishes or suspends. Everything that can
    /// be refused (the point, the value's form, the plan's re-derivation of the prefix) is
    /// checked before the fork is created; a value its step refuses removes the fork again.
    pub fn fork(&self, run: &str, f: Fork<'_>) -> Result<Start<Forked>, HostError> {
        let parent = self.find(run)?;
        if let Some(NewPlan::Text(text)) = &f.plan {
            self.admit_fork(&parent, text, f.door)?;
        }
        let (registry, _) = self.registry(
            &parent,
            &f.given,
            false,
            McpMode::Recorded(&parent.dir),
            ToolChange::Refuse,
        )?;
        let (events, shared, recovered) = self.fork_prefix(&parent, &f.at)?;
        let mut answer = None;
        let mut given = ForkGiven {
            by: f.by.clone(),
            value: None,
            key: f.key.clone(),
            reason: recovered.as_ref().map(|_| RECOVERED.to_owned()),
            damaged: recovered.as_ref().map(|r| r.hash),
        };
        let asked_value = f.value.clone();
        if let Some(value) = f.value {
            let (step, waits) = value_step(&parent.id, &events, &f.at, shared)?;
            let bad = |reason: String| {
                session::refused_answer(
                    &parent.id,
                    AnswerError::Refused {
                        step: step.clone(),
                        reason,
                    },
                )
            };
            oracle_core::canon::check(&value).map_err(|e| bad(e.to_string()))?;
            session::check_outside_value(&value, "the value").map_err(|e| bad(e.to_string()))?;
            // A question the fork waits on at once is answered as `resume --value` answers it.
            if waits {
                answer = Some((step, value));
            } else {
                given.value = Some((step, value));
            }
        }
        drop(events);
        let plan = match &f.plan {
            Some(given) => {
                let (plan, source) = match given {
                    NewPlan::File(path) => fork::new_plan(path, &registry)?,
                    NewPlan::Text(text) => fork::new_plan_text(text.clone(), &registry)?,
                };
                self.check_policy(&plan.hash)?;
                fork::check_upgrade(self.dir(), &parent, plan.clone(), Some(shared), &registry)?;
                Some((plan, source))
            }
            None => None,
        };
        let want = f.key.as_deref().map(|k| {
            let plan_hash = plan
                .as_ref()
                .map_or(oracle_core::Hash::ZERO, |(p, _)| p.hash);
            KeyClaim::fork(k, "", plan_hash, &parent.id, shared, asked_value.as_ref())
        });
        // The key is claimed before the fork is made: a fork that loses finds the winner's.
        let guard = match &want {
            Some(want) => match self.take_fork_key(want)? {
                Ok(guard) => Some(guard),
                Err(existing) => return Ok(Start::Existing(existing)),
            },
            None => None,
        };
        let made = fork::create(self.dir(), &parent, shared, given, &self.key()?)?;
        let gone = |e: HostError| {
            // The fork was never driven: it leaves nothing behind.
            let _ = std::fs::remove_dir_all(&made.dir);
            e
        };
        if let (Some(guard), Some(want)) = (&guard, want) {
            let claim = KeyClaim {
                run: made.id.clone(),
                ..want
            };
            guard.record(&claim).map_err(|e| gone(e.into()))?;
        }
        if let Some((plan, source)) = plan {
            let from = self.program_of(&made).map_err(gone)?;
            fork::record_upgrade(&made, from, &plan, &source, f.by.clone())
                .map_err(|e| gone(e.into()))?;
        }
        // Its log holds `forked` with the key (and the new plan): the fork is live, and
        // compared with, for every other start.
        drop(guard);
        let resumed = self.resume(
            &made.id,
            Resume {
                answer,
                given: f.given,
                drive: f.drive,
                tool_change: ToolChange::Refuse,
                progress: f.progress,
                upgrade: None,
            },
        );
        let session = match resumed {
            Ok(r) => Some(r.session),
            Err(HostError::Session(SessionError::NeedsAnswer { .. })) => None,
            Err(
                e @ HostError::Session(SessionError::Engine(
                    oracle_runtime::engine::EngineError::Answer(AnswerError::Refused { .. }),
                )),
            ) => return Err(gone(e)),
            Err(e) => return Err(e),
        };
        Ok(Start::New(Forked {
            fork: made,
            parent: parent.id,
            shared,
            session,
            recovered,
        }))
    }

    /// The valid prefix of `parent`'s log, the number of its events a fork at `at` shares, and
    /// for a recovery its facts ([`Home::recovery`]). A damaged log is forked from its valid
    /// prefix only: a point the prefix does not reach (a seq past it, a step it never calls) is
    /// refused with the damage itself, as `oracle verify` reports it (exit 4).
    fn fork_prefix(
        &self,
        parent: &RunDir,
        at: &ForkAt,
    ) -> Result<(Recorded, u64, Option<Recovered>), HostError> {
        let (events, damage) =
            Recorded::read_valid(&parent.paths.log).map_err(SessionError::from)?;
        let shared = match fork::fork_point(&parent.id, &events, at) {
            Err(e) if damage.is_some() && past_prefix(at, events.len()) => {
                return Err(damage_error(&parent.paths.log, e));
            }
            found => found?,
        };
        let recovered = self.recovery(parent, damage, at)?;
        Ok((events, shared, recovered))
    }

    /// Admits the plan a fork of `parent` is given at `door` ([`admit::admit`]): the fork keeps
    /// the parent's recorded grants and works where the parent did, so both are part of what is
    /// admitted.
    fn admit_fork(&self, parent: &RunDir, text: &str, door: Door<'_>) -> Result<(), HostError> {
        if let Door::Terminal = door {
            return Ok(());
        }
        let events = Recorded::read(&parent.paths.log).map_err(SessionError::from)?;
        let inherited = match events.event(0).map(|e| e.typed()) {
            Some(Ok(Payload::RunStarted(p))) => p.grants,
            _ => {
                return Err(SessionError::NoStart {
                    path: parent.paths.log.clone(),
                }
                .into());
            }
        };
        let works_in = self.workdir(parent)?;
        admit::admit(
            door,
            admit::Plan {
                text,
                inherited: &inherited,
                works_in: Some(&works_in),
            },
        )?;
        Ok(())
    }

    /// For a fork at [`ForkAt::LastValid`] (`oracle recover`): checks the parent is damaged
    /// (`damage`, its first bad seq and byte offset), hashes its log as it is and keeps a copy
    /// under [`DAMAGED_DIR`]. `None` for any other fork.
    fn recovery(
        &self,
        parent: &RunDir,
        damage: Option<(u64, u64)>,
        at: &ForkAt,
    ) -> Result<Option<Recovered>, HostError> {
        let ForkAt::LastValid = at else {
            return Ok(None);
        };
        let Some((damaged_at, _)) = damage else {
            return Err(SessionError::NothingToRecover {
                run: parent.id.clone(),
            }
            .into());
        };
        let io = |path: &std::path::Path| {
            let path = path.to_path_buf();
            move |source| HostError::Session(SessionError::Io { path, source })
        };
        let bytes = std::fs::read(&parent.paths.log).map_err(io(&parent.paths.log))?;
        let hash = oracle_core::Hash(*blake3::hash(&bytes).as_bytes());
        let dir = self.dir().join(DAMAGED_DIR);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        // Named absolutely: the caller reports it to someone in another directory.
        let dir = std::fs::canonicalize(&dir).map_err(io(&dir))?;
        let kept = dir.join(format!("{}-{}.jsonl", parent.id, &hash.to_hex()[..16]));
        if !kept.exists() {
            let tmp = kept.with_extension("jsonl.tmp");
            std::fs::write(&tmp, &bytes).map_err(io(&tmp))?;
            std::fs::rename(&tmp, &kept).map_err(io(&kept))?;
        }
        Ok(Some(Recovered {
            damaged_at,
            hash,
            kept,
        }))
    }

    /// Claims a fork's key: the guard that holds it, or the fork the key made already when
    /// `want` matches what it recorded; a key that named something else is refused with what
    /// differs (`key_conflict`).
    fn take_fork_key(&self, want: &KeyClaim) -> Result<Result<KeyGuard, Existing>, HostError> {
        keys::check_key(&want.key).map_err(|why| SessionError::BadKey { why })?;
        match keys::take(self.dir(), want).map_err(HostError::Session)? {
            Taken::Free(guard) => Ok(Ok(guard)),
            Taken::Used { run, differs } if differs.is_empty() => {
                let dir = self.dir().join("runs").join(&run);
                let status = session::run_info(&dir).status;
                Ok(Err(Existing {
                    id: run,
                    dir,
                    key: want.key.clone(),
                    status,
                }))
            }
            Taken::Used { run, differs } => Err(SessionError::KeyUsed {
                key: want.key.clone(),
                run,
                differs,
            }
            .into()),
        }
    }

    /// The program hash `run` follows now.
    fn program_of(&self, run: &RunDir) -> Result<oracle_core::Hash, HostError> {
        let first = oracle_runtime::index::IndexedLog::open(&run.paths.log)
            .and_then(|mut l| l.read(0))
            .map_err(SessionError::from)?;
        match first.typed() {
            Ok(Payload::RunStarted(p)) => Ok(fork::current_program(run, p.program_hash)?),
            _ => Err(SessionError::NoStart {
                path: run.paths.log.clone(),
            }
            .into()),
        }
    }

    /// Upgrades `run` to the plan `up` names (`oracle resume --plan`): the new plan must
    /// re-derive every recorded event (refused with the first that differs, exit 4, nothing
    /// written); then `plan_upgraded` is recorded and the plan version kept. A run may be
    /// upgraded where it rests between rounds: suspended, answered, or right after an outside
    /// event such as `forked`. The same plan again is no upgrade.
    pub(crate) fn upgrade(
        &self,
        run: &RunDir,
        up: &Upgrade,
        registry: &Registry,
    ) -> Result<(), HostError> {
        let (plan, source) = fork::new_plan(&up.plan, registry)?;
        self.check_policy(&plan.hash)?;
        let from = self.program_of(run)?;
        if plan.hash == from {
            return Ok(());
        }
        let events = Recorded::read(&run.paths.log).map_err(SessionError::from)?;
        if let Some(EventKind::RunFinished) = session::last_program_kind(&events) {
            return Err(SessionError::Finished {
                run: run.id.clone(),
                status: session::run_info(&run.dir).status,
            }
            .into());
        }
        if !fork::at_boundary(&events, events.len()) {
            return Err(SessionError::InsideRound {
                run: run.id.clone(),
            }
            .into());
        }
        drop(events);
        fork::check_upgrade(self.dir(), run, plan.clone(), None, registry)?;
        fork::record_upgrade(run, from, &plan, &source, up.by.clone())?;
        Ok(())
    }
}
