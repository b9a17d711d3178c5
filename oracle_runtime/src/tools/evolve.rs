//! `evolve.propose {source, reason}`: a run proposes a change to its own plan. The proposal is
//! compiled here (a plan that does not compile fails the call, which is the step's recorded
//! failure); the engine then records a `patch_proposed` event after the call's outcome. It
//! changes nothing in the run: a proposal waits for `oracle evolve check` and a signed
//! approval (docs/EVOLUTION.md).

use oracle_plan::catalogue::{CapabilityRule, ScopeFrom};
use serde_json::{Value, json};

use super::{arg_str, count, decl, object, string};
use crate::tool::{Effect, Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// The tool's name: the engine records `patch_proposed` after each of its outcomes.
pub const PROPOSE: &str = "evolve.propose";

/// The capability a proposal needs: `evolve:propose:self` (a run proposes for its own plan).
pub const PROPOSE_SCOPE: &str = "self";

/// Diagnostics quoted in a refused proposal's error: enough to fix it, bounded so the recorded
/// error stays small whatever the model wrote.
const DIAGNOSTICS_QUOTED_MAX: usize = 5;

/// `evolve.propose {source, reason}` → `{plan_hash, program, version}`: `source` is the whole
/// proposed plan's text (`plan` is a reserved word of the plan language, so it cannot name the
/// argument).
pub struct Propose;

impl Tool for Propose {
    fn decl(&self) -> ToolDecl {
        decl(
            PROPOSE,
            "Propose a new version of this run's plan (the whole plan text, and why). It must compile; it is recorded for review and changes nothing now: {plan_hash, program, version}.",
            Effect::Pure,
            object(
                &[("source", string()), ("reason", string())],
                &["source", "reason"],
            ),
            object(
                &[
                    ("plan_hash", string()),
                    ("program", string()),
                    ("version", count()),
                ],
                &["plan_hash", "program", "version"],
            ),
            Some(CapabilityRule {
                domain: "evolve".to_owned(),
                action: "propose".to_owned(),
                scope: ScopeFrom::Fixed(PROPOSE_SCOPE.to_owned()),
            }),
        )
    }

    fn call(&self, input: &Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let plan = arg_str(input, "source")?;
        arg_str(input, "reason")?;
        let compiled = compile(plan).map_err(|e| ToolError::Failed(e.to_string()))?;
        Ok(ToolOutput::of(json!({
            "plan_hash": compiled.hash.to_hex(),
            "program": compiled.name,
            "version": compiled.version,
        })))
    }
}

/// Why a proposal is refused: its plan does not compile, or a returned `evolve.propose` call
/// does not carry what its `patch_proposed` event needs. Worded as before (a refused proposal's
/// call fails with this text).
#[derive(Debug, thiserror::Error)]
pub enum ProposalError {
    /// `diagnostics`: the first errors, `LINE:COL: CODE message`, joined by `; ` (or `no plan`).
    #[error("the proposed plan does not compile: {diagnostics}")]
    NotCompiling { diagnostics: String },
    #[error("{PROPOSE}: `{name}` is not a string")]
    NotText { name: &'static str },
    #[error("{PROPOSE}: plan_hash: {0}")]
    PlanHash(#[from] oracle_core::hash::HashParseError),
}

/// The proposed plan compiled against the built-in tools, or why it does not compile (its
/// first diagnostics, with line and column). A proposal names no files: `use` and `tools`
/// lines find nothing here.
pub fn compile(src: &str) -> Result<oracle_plan::CompiledPlan, ProposalError> {
    let catalogue = crate::catalogue::builtin();
    let (compiled, diags) =
        oracle_plan::compile::check_with(src, &catalogue, &oracle_plan::compile::Sources::new());
    let errors: Vec<String> = diags
        .iter()
        .filter(|d| d.severity == oracle_plan::Severity::Error)
        .take(DIAGNOSTICS_QUOTED_MAX)
        .map(|d| {
            let (line, col) = oracle_plan::diagnostic::line_col(src, d.span.start);
            format!("{line}:{col}: {} {}", d.code, d.message)
        })
        .collect();
    match compiled {
        Some(c) if errors.is_empty() => Ok(c),
        _ => Err(ProposalError::NotCompiling {
            diagnostics: if errors.is_empty() {
                "no plan".to_owned()
            } else {
                errors.join("; ")
            },
        }),
    }
}

/// The `patch_proposed` event of a call that returned `output`: the plan and reason from its
/// input, the hash and name from its output, `base` the plan the run follows.
pub fn proposed(
    call: &oracle_core::agent::Call,
    output: &Value,
    base: oracle_core::Hash,
    model_call: Option<u64>,
) -> Result<oracle_core::payload::PatchProposed, ProposalError> {
    let text = |v: &Value, name: &'static str| {
        v.get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(ProposalError::NotText { name })
    };
    let plan_hash = oracle_core::Hash::from_hex(&text(output, "plan_hash")?)?;
    Ok(oracle_core::payload::PatchProposed {
        step: call.step.clone(),
        plan: text(&call.input, "source")?,
        plan_hash,
        program: text(output, "program")?,
        base,
        reason: text(&call.input, "reason")?,
        model_call,
    })
}
