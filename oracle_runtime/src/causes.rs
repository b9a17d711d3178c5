//! The engine's per-step bookkeeping: which earlier events later ones depend on (log format 2
//! causal links, docs/FORMAT.md "Causal links") and each step's latest call, in one table keyed
//! by step name.
//!
//! A long run has one entry per step it ever called (a million-event run: 333k steps), held for
//! the whole run and written into every resume point. It used to be four maps keyed by their own
//! copy of the step name, plus a copy of the tool's name per step: five allocations a step to
//! build on resume and to free at the end (BENCHMARKS.md, "Resume points"). One entry a step,
//! tool names interned, and a point encoding of one row a step (see [`Causes`]'s `Serialize`)
//! make restoring and dropping it several times cheaper, and the point smaller (so points can
//! be written more often under the same spacing rule: `resume_point::LOG_BYTES_PER_POINT_BYTE`). Nothing here reaches the log: the
//! links it names are, and they are the same whichever encoding a point used.

use std::collections::BTreeMap;

use oracle_core::agent::Call;
use oracle_core::limits;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use smallvec::SmallVec;

/// How an agent step's tool calls are named after it: `s@TURN.K` (`oracle_plan::agent`).
const AGENT_CALL_SEPARATOR: char = '@';
/// A resume point's `read` of a step some other step's call read.
const READ: u8 = 1;
/// A resume point's `read` of a step only its own agent loop's calls read.
const OWN_READ: u8 = 2;

/// What the engine knows of one step.
#[derive(Clone, Debug, Default)]
struct Step {
    /// The step's latest outcome event (returned, failed, denied, answered).
    last: Option<u64>,
    /// Its attempts (outcomes, and the call of a pending question) since it was last answered:
    /// a step suspends when the agent gave up on all of them, whether they failed or returned
    /// an output it rejected (`expect`). Usually one, kept inline (no allocation a step).
    attempts: SmallVec<[u64; 1]>,
    /// Whether some call of another step read or waited for it (the others end branches).
    read: bool,
    /// Whether only calls of its own agent loop read it (an agent step's tool calls,
    /// `s@TURN.K`, read the turn that asked for them): its last turn still ends a branch.
    own_read: bool,
    /// The tool of its latest call, as an index into [`Causes::tools`].
    tool: Option<u32>,
}

/// Which earlier events later ones depend on, and each step's latest call. Within a call
/// (verdict, call, outcome) the links are the same in both log formats.
#[derive(Default)]
pub(crate) struct Causes {
    /// Format 2 links; off when continuing or replaying a format 1 log.
    pub on: bool,
    steps: BTreeMap<Box<str>, Step>,
    /// The outcome events the next decision observes.
    observed: Vec<u64>,
    /// The names of the tools steps called, in first-call order (a handful per run).
    tools: Vec<Box<str>>,
    /// The input of a step's latest call, for the steps whose latest call's input is read again
    /// later (`engine::input_read_later`); the others' is `null`.
    inputs: BTreeMap<Box<str>, Value>,
    /// `null`: the input [`Causes::last_call`] gives for a call whose input is not kept.
    no_input: Value,
}

impl Causes {
    fn step(&mut self, step: &str) -> &mut Step {
        // Looked up before inserting: a step is called many times, named once.
        if !self.steps.contains_key(step) {
            self.steps.insert(step.into(), Step::default());
        }
        self.steps.get_mut(step).expect("inserted just above")
    }

    /// Notes the outcome event `seq` of a call of `step`.
    pub fn outcome(&mut self, step: &str, seq: u64) {
        let s = self.step(step);
        s.last = Some(seq);
        s.attempts.push(seq);
        self.observed.push(seq);
    }

    /// Notes the `resumed` event that answered `step`.
    pub fn answered(&mut self, step: &str, seq: u64) {
        let s = self.step(step);
        s.last = Some(seq);
        s.attempts.clear();
        self.observed.push(seq);
    }

    /// Notes a call whose answer is still to come (a question, a belief wait).
    /// The next decision observes it, and a suspension depends on it.
    pub fn waiting(&mut self, step: &str, called: u64) {
        self.step(step).attempts.push(called);
        self.observed.push(called);
    }

    /// Notes a call of `tool` by `step`, keeping its `input` if something reads it again.
    pub fn called(&mut self, step: &str, tool: &str, input: Option<Value>) {
        let index = match self.tools.iter().position(|t| &**t == tool) {
            Some(i) => i,
            None => {
                self.tools.push(tool.into());
                self.tools.len() - 1
            }
        };
        // At most one entry a tool name the registry holds: far below u32::MAX.
        self.step(step).tool = Some(index as u32);
        match input {
            Some(v) => {
                self.inputs.insert(step.into(), v);
            }
            None => {
                self.inputs.remove(step);
            }
        }
    }

    /// The tool of `step`'s latest call and its input (`null` unless kept).
    pub fn last_call(&self, step: &str) -> Option<(&str, &Value)> {
        let tool = self.steps.get(step)?.tool?;
        let tool = self.tools.get(tool as usize)?;
        Some((tool, self.inputs.get(step).unwrap_or(&self.no_input)))
    }

    /// `seqs` as parents: sorted, unique, at most `PARENTS_MAX` (the latest), or none in
    /// format 1.
    pub fn parents(&self, mut seqs: Vec<u64>) -> Vec<u64> {
        if !self.on {
            return Vec::new();
        }
        seqs.sort_unstable();
        seqs.dedup();
        let keep = limits::PARENTS_MAX as usize;
        if seqs.len() > keep {
            seqs.drain(..seqs.len() - keep);
        }
        seqs
    }

    /// A decision depends on what it observed: the outcomes since the last decision, or the
    /// run's start for the first.
    pub fn decision(&mut self) -> Vec<u64> {
        let mut seqs = std::mem::take(&mut self.observed);
        if seqs.is_empty() {
            seqs.push(0);
        }
        self.parents(seqs)
    }

    /// A call depends on the latest outcomes of the steps it reads and of its own earlier
    /// attempts (a retry is scheduled because of them), or on the run's start.
    pub fn scheduled(&mut self, call: &Call) -> Vec<u64> {
        let mut seqs: Vec<u64> = call
            .reads
            .iter()
            .chain(std::iter::once(&call.step))
            .filter_map(|s| self.steps.get(s.as_str()).and_then(|s| s.last))
            .collect();
        for r in &call.reads {
            let own = call
                .step
                .strip_prefix(r.as_str())
                .is_some_and(|rest| rest.starts_with(AGENT_CALL_SEPARATOR));
            let step = self.step(r);
            if own {
                step.own_read = true;
            } else {
                step.read = true;
            }
        }
        if seqs.is_empty() {
            seqs.push(0);
        }
        self.parents(seqs)
    }

    /// A suspension depends on the step's attempts the agent gave up on (or its question).
    pub fn suspended(&self, step: &str) -> Vec<u64> {
        let attempts = self.steps.get(step).map(|s| s.attempts.to_vec());
        self.parents(attempts.unwrap_or_default())
    }

    /// The run's end depends on the last event of each branch: the latest outcome of every
    /// step no call of another step read (an agent step's last turn included, which only its
    /// own tool calls read).
    pub fn finished(&self) -> Vec<u64> {
        self.ends(|s| !s.read)
    }

    /// [`Causes::finished`] as oracle gave it before an agent step's last turn was linked to
    /// the run's end (issue 53): a run that ended on an agent step recorded `run_finished`
    /// without it (with no parents, when that step was the run's only branch). Only what a
    /// record of then is compared with.
    pub fn finished_before_agent_links(&self) -> Vec<u64> {
        self.ends(|s| !s.read && !s.own_read)
    }

    fn ends(&self, ends_branch: impl Fn(&Step) -> bool) -> Vec<u64> {
        let ends = self
            .steps
            .values()
            .filter(|s| ends_branch(s))
            .filter_map(|s| s.last)
            .collect();
        self.parents(ends)
    }
}

/// A step as a resume point holds it: `[name, last, tool, read]` (`read` 0, 1, or 2 for a step
/// only its own agent loop's calls read, [`Step::own_read`]; a million-event
/// run's 333k steps take about 7 MB, where the four maps of format 1 took three times that and
/// several times as long to read). Its attempts are `[last]` (or none without a `last`) unless
/// the point's `attempts` list names it: a step called once and returned, the usual case, takes
/// one short row.
#[derive(Deserialize)]
struct Row(Box<str>, Option<u64>, Option<u32>, u8);

impl Step {
    /// The attempts a row without an entry in `attempts` stands for.
    fn usual_attempts(last: Option<u64>) -> SmallVec<[u64; 1]> {
        last.into_iter().collect()
    }
}

impl Serialize for Causes {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        // Tools sorted by name, so a point's bytes do not depend on where the drive started.
        let mut order: Vec<usize> = (0..self.tools.len()).collect();
        order.sort_by(|a, b| self.tools[*a].cmp(&self.tools[*b]));
        let mut renamed = vec![0u32; self.tools.len()];
        for (new, old) in order.iter().enumerate() {
            renamed[*old] = new as u32;
        }
        let tools: Vec<&str> = order.iter().map(|i| &*self.tools[*i]).collect();
        struct Rows<'a>(&'a BTreeMap<Box<str>, Step>, &'a [u32]);
        impl Serialize for Rows<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_seq(self.0.iter().map(|(name, st)| {
                    let tool = st.tool.and_then(|t| self.1.get(t as usize).copied());
                    let read = match (st.read, st.own_read) {
                        (true, _) => READ,
                        (false, true) => OWN_READ,
                        (false, false) => 0,
                    };
                    (name, st.last, tool, read)
                }))
            }
        }
        struct Unusual<'a>(&'a BTreeMap<Box<str>, Step>);
        impl Serialize for Unusual<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_seq(
                    self.0
                        .iter()
                        .filter(|(_, st)| st.attempts != Step::usual_attempts(st.last))
                        .map(|(name, st)| (name, &st.attempts[..])),
                )
            }
        }
        let mut st = s.serialize_struct("Causes", 6)?;
        st.serialize_field("on", &self.on)?;
        st.serialize_field("observed", &self.observed)?;
        st.serialize_field("tools", &tools)?;
        st.serialize_field("steps", &Rows(&self.steps, &renamed))?;
        st.serialize_field("attempts", &Unusual(&self.steps))?;
        st.serialize_field("inputs", &self.inputs)?;
        st.end()
    }
}

/// [`Causes`] as a resume point of engine format 2 holds it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Saved {
    on: bool,
    observed: Vec<u64>,
    tools: Vec<Box<str>>,
    steps: Vec<Row>,
    /// The steps whose attempts are not the usual ones ([`Row`]).
    attempts: Vec<(Box<str>, SmallVec<[u64; 1]>)>,
    inputs: BTreeMap<Box<str>, Value>,
}

/// A tool index a point names but its tool table does not hold.
#[derive(Debug, thiserror::Error)]
#[error("step `{step}` names tool {index}, which its tool table does not hold")]
pub struct NoTool {
    pub step: String,
    pub index: u32,
}

impl TryFrom<Saved> for Causes {
    type Error = NoTool;
    fn try_from(saved: Saved) -> std::result::Result<Causes, NoTool> {
        let tools = saved.tools.len();
        // Written in name order: collecting sorted rows builds the map in one pass.
        let mut steps = Vec::with_capacity(saved.steps.len());
        for Row(name, last, tool, read) in saved.steps {
            if let Some(index) = tool.filter(|t| *t as usize >= tools) {
                return Err(NoTool {
                    step: name.into(),
                    index,
                });
            }
            let step = Step {
                last,
                attempts: Step::usual_attempts(last),
                read: read == READ,
                own_read: read == OWN_READ,
                tool,
            };
            steps.push((name, step));
        }
        let mut c = Causes {
            on: saved.on,
            steps: steps.into_iter().collect(),
            observed: saved.observed,
            tools: saved.tools,
            inputs: saved.inputs,
            no_input: Value::Null,
        };
        for (name, attempts) in saved.attempts {
            c.step(&name).attempts = attempts;
        }
        Ok(c)
    }
}

/// [`Causes`] as a resume point of engine format 1 held it, with the engine's `last_called`
/// beside it: still restored, so a run suspended before this layout resumes from its point.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SavedV1 {
    on: bool,
    last: BTreeMap<String, u64>,
    attempts: BTreeMap<String, Vec<u64>>,
    observed: Vec<u64>,
    read: std::collections::BTreeSet<String>,
}

impl Causes {
    /// The bookkeeping a format 1 point held: its causes and each step's last call.
    pub(crate) fn from_v1(old: SavedV1, calls: BTreeMap<String, (String, Value)>) -> Causes {
        let mut c = Causes {
            on: old.on,
            observed: old.observed,
            ..Causes::default()
        };
        for (step, seq) in old.last {
            c.step(&step).last = Some(seq);
        }
        for (step, seqs) in old.attempts {
            c.step(&step).attempts = seqs.into();
        }
        for step in old.read {
            c.step(&step).read = true;
        }
        for (step, (tool, input)) in calls {
            let kept = (!input.is_null()).then_some(input);
            c.called(&step, &tool, kept);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `a@1.1` is a tool call of agent step `a`'s first turn, reading `a` ([`Step::own_read`]).
    const STEPS: [&str; 4] = ["a", "b", "c", "a@1.1"];
    const TOOLS: [&str; 3] = ["json.get", "human.ask", "sleep"];

    /// Applies `(op, step, other, seq)` steps of bookkeeping, as a drive would.
    fn apply(ops: &[(u8, usize, usize, u64)]) -> Causes {
        let mut c = Causes {
            on: true,
            ..Causes::default()
        };
        for &(op, step, other, seq) in ops {
            let (step, other) = (STEPS[step], STEPS[other]);
            match op {
                0 => c.outcome(step, seq),
                1 => c.answered(step, seq),
                2 => c.waiting(step, seq),
                3 => {
                    let input = (seq % 2 == 0).then(|| serde_json::json!({"n": seq}));
                    c.called(step, TOOLS[seq as usize % 3], input);
                }
                _ => {
                    let call = Call {
                        step: step.into(),
                        tool: "json.get".into(),
                        attempt: 1,
                        input: Value::Null,
                        timeout_ms: None,
                        reads: vec![other.into()],
                    };
                    c.scheduled(&call);
                }
            }
        }
        c
    }

    /// What the engine reads of the bookkeeping, step by step.
    fn reads(c: &Causes) -> Vec<String> {
        let mut out = vec![
            format!("{:?}", c.finished()),
            format!("{:?}", c.finished_before_agent_links()),
        ];
        for s in STEPS {
            out.push(format!("{s} {:?} {:?}", c.suspended(s), c.last_call(s)));
        }
        out
    }

    proptest! {
        /// A point's rows restore exactly what the engine reads, and write the same bytes again.
        #[test]
        fn a_point_restores_what_the_engine_reads(
            ops in prop::collection::vec((0u8..5, 0usize..4, 0usize..4, 1u64..50), 0..40)
        ) {
            let c = apply(&ops);
            let text = serde_json::to_string(&c).unwrap();
            let saved: Saved = serde_json::from_str(&text).unwrap();
            let back = Causes::try_from(saved).unwrap();
            prop_assert_eq!(reads(&c), reads(&back));
            prop_assert_eq!(text, serde_json::to_string(&back).unwrap());
        }
    }
}
