//! Retry policies' waits and sagas in the plan agent: a step failing under `retry { ... }`
//! calls [`BACKOFF_TOOL`] (the runtime records its timer) before its next attempt, and a run
//! that fails runs the compensations (`undo STEP`) of the steps that completed, in reverse.

use oracle_core::agent::{Action, AgentError, Call, Outcome};
use oracle_core::payload::{RunStatus, StateChanged};
use serde_json::json;

use super::{PlanAgent, Queued, Status, change};
use crate::policy::BACKOFF_TOOL;

impl PlanAgent {
    /// Attempt `attempts` of step `idx` failed with `error` under a retry policy, with
    /// attempts left: the step waits `wait_ms` (recorded as `retrying` with it) on a backoff
    /// call, queued for this decision.
    pub(super) fn back_off(
        &mut self,
        idx: u32,
        attempts: u64,
        error: String,
        out: &mut Vec<StateChanged>,
    ) {
        let step = &self.plan.steps[idx as usize];
        let Some(policy) = &step.policy else {
            return;
        };
        let wait_ms = policy.wait_ms(attempts);
        let input = json!({"attempt": attempts, "wait_ms": wait_ms, "jitter": policy.jitter});
        out.push(change(
            &step.name,
            json!({"status": "retrying", "attempts": attempts, "error": error, "wait_ms": wait_ms}),
        ));
        let call = Call {
            step: step.name.clone(),
            tool: BACKOFF_TOOL.to_owned(),
            attempt: attempts,
            input,
            timeout_ms: None,
            reads: Vec::new(),
        };
        self.queued.push_back(Queued::from(call));
        self.status[idx as usize] = Status::Backoff { attempts };
        self.in_flight += 1;
    }

    /// What step `idx`'s backoff call came to: it waits (asked: the run suspends on its timer
    /// when nothing else runs), its timer fired (the next attempt is ready), or it failed
    /// (the step gives up with that failure).
    pub(super) fn backoff_observed(
        &mut self,
        idx: u32,
        attempts: u64,
        outcome: &Outcome,
        out: &mut Vec<StateChanged>,
    ) -> Result<(), AgentError> {
        match outcome {
            Outcome::Ask(_) => {
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            Outcome::Answered(_) | Outcome::Returned(_) => {
                self.status[idx as usize] = Status::Retrying { attempts };
                self.ready.insert(self.position[idx as usize]);
            }
            Outcome::Failed(e) => {
                self.in_flight = self.in_flight.saturating_sub(1);
                self.give_up(idx, attempts, e.clone(), out);
            }
            Outcome::Denied { capability, reason } => {
                self.in_flight = self.in_flight.saturating_sub(1);
                let e = format!("capability `{capability}` denied: {reason}");
                self.give_up(idx, attempts, e, out);
            }
        }
        Ok(())
    }

    /// The next call of the compensations while the run fails: those whose step completed,
    /// latest step first in the plan's order; the first not yet settled is started (or
    /// retried). `None`: every one has run, or one waits.
    pub(super) fn next_compensation(&mut self, out: &mut Vec<StateChanged>) -> Option<Call> {
        let mut due: Vec<(u32, u32)> = self
            .plan
            .steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let t = s.undo?;
                (self.status[t as usize] == Status::Completed)
                    .then(|| (self.position[t as usize], i as u32))
            })
            .collect();
        due.sort_unstable_by(|a, b| b.cmp(a));
        for (_, idx) in due {
            match self.status[idx as usize] {
                Status::Pending | Status::Retrying { .. } => {
                    if let Some(call) = self.start(idx, out) {
                        return Some(call);
                    }
                    // Skipped or given up at once: the next compensation, unless it waits.
                    if matches!(self.status[idx as usize], Status::Waiting { .. }) {
                        return None;
                    }
                }
                Status::Running | Status::Backoff { .. } | Status::Waiting { .. } => return None,
                Status::Completed | Status::Skipped | Status::Failed => {}
            }
        }
        None
    }

    /// What a decision with `calls` does once every observation is in.
    pub(super) fn action(&self, calls: Vec<Call>) -> Result<Action, AgentError> {
        Ok(if !calls.is_empty() {
            Action::Call(calls)
        } else if self.in_flight > 0 {
            return Err(AgentError(
                "calls are still running but no outcomes were given".into(),
            ));
        } else if let Some((step, attempts, reason)) = self.compensation_waiting() {
            Action::Suspend {
                step,
                reason,
                attempts,
            }
        } else if let Some(reason) = &self.stopping {
            Action::Finish {
                status: RunStatus::Failed,
                reason: reason.clone(),
            }
        } else if let Some((step, attempts, reason)) = self.first_waiting() {
            Action::Suspend {
                step,
                reason,
                attempts,
            }
        } else {
            Action::Finish {
                status: RunStatus::Completed,
                reason: String::new(),
            }
        })
    }

    /// While the run fails: a compensation that waits (on its backoff timer, or for a person
    /// under `on failure yield`), which the run suspends on before it ends.
    fn compensation_waiting(&self) -> Option<(String, u64, String)> {
        self.stopping.as_ref()?;
        self.waiting_among(|s| s.undo.is_some())
    }
}

/// The reason a step waiting on its backoff timer suspends with (the runtime names the timer's
/// due instant instead).
pub(super) fn backoff_reason(attempts: u64) -> String {
    format!("retry after attempt {attempts}")
}
