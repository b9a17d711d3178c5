//! Demand analysis with policies from outside: `oracle demand --policy wasm:FILE` and
//! `exec:PROGRAM`. The one place that decides what a `--policy` list names and loads the
//! plugged ones, through the runtime's sandboxes (`oracle_runtime::sandbox`: a module under
//! fuel and memory limits, a program under a time and an output limit), so a front end never
//! runs one itself. The grading is `oracle_demand`'s, the same as the built-ins'.

use std::path::Path;

use oracle_demand::plugged::CallFailed;
use oracle_demand::{Advisor, Config, DemandTrace, Dependencies, Policy, Report, limits};
use oracle_runtime::sandbox::{Limits, Sandboxed};
use serde_json::Value;

use crate::error::HostError;

/// The bounds of every call of a plugged policy (`oracle_demand::limits`).
pub const LIMITS: Limits = Limits {
    fuel_max: limits::PLUGGED_FUEL_MAX,
    memory_bytes_max: limits::PLUGGED_MEMORY_BYTES_MAX,
    timeout_ms: limits::PLUGGED_TIMEOUT_MS,
    output_bytes_max: limits::PLUGGED_OUTPUT_BYTES_MAX,
};

/// What a `--policy` list names: built-ins, and plugged policies as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Named {
    pub builtins: Vec<Policy>,
    pub plugged: Vec<String>,
}

/// Splits a `--policy` list: `recent`, `lru`, `causal`, `oracle`, `wasm:FILE`,
/// `exec:PROGRAM [ARGS]`. Anything else is refused (`usage`), as are more than
/// `PLUGGED_POLICIES_MAX` plugged ones and an empty `wasm:` or `exec:`.
pub fn name_policies(list: &[String]) -> Result<Named, HostError> {
    let mut named = Named::default();
    for item in list {
        let given = |why: String| HostError::Given {
            flag: "--policy",
            given: item.clone(),
            why,
        };
        if let Some(rest) = item
            .strip_prefix("wasm:")
            .or_else(|| item.strip_prefix("exec:"))
        {
            if rest.trim().is_empty() {
                return Err(given("names no file or program".to_owned()));
            }
            if !named.plugged.contains(item) {
                named.plugged.push(item.clone());
            }
        } else {
            let p = item.parse::<Policy>().map_err(|e| given(e.to_string()))?;
            named.builtins.push(p);
        }
    }
    let limit = limits::PLUGGED_POLICIES_MAX;
    if named.plugged.len() as u64 > limit {
        return Err(HostError::Given {
            flag: "--policy",
            given: named.plugged.join(","),
            why: format!("at most {limit} plugged policies are graded at once"),
        });
    }
    Ok(named)
}

/// A loaded plugged policy.
struct Plugged {
    name: String,
    function: Sandboxed,
}

impl Advisor for Plugged {
    fn name(&self) -> &str {
        &self.name
    }

    fn call(&mut self, input: &[u8]) -> Result<Value, CallFailed> {
        self.function
            .call(input, &LIMITS)
            .map_err(|e| CallFailed { why: e.to_string() })
    }
}

/// Loads `wasm:FILE` or `exec:PROGRAM`; a relative file or program path is taken from `cwd`.
fn load(spec: &str, cwd: &Path) -> Result<Plugged, HostError> {
    let refused = |why: String| HostError::PolicyLoad {
        policy: spec.to_owned(),
        why,
    };
    let function = if let Some(file) = spec.strip_prefix("wasm:") {
        Sandboxed::wasm(&cwd.join(file), &LIMITS).map_err(|e| refused(e.to_string()))?
    } else if let Some(command) = spec.strip_prefix("exec:") {
        Sandboxed::exec(command, cwd).map_err(|e| refused(e.to_string()))?
    } else {
        return Err(refused("not `wasm:FILE` or `exec:PROGRAM`".to_owned()));
    };
    Ok(Plugged {
        name: spec.to_owned(),
        function,
    })
}

/// Grades the built-ins of `config` and every plugged policy of `named` (loaded here, each
/// called once per budget) against the oracle: `oracle_demand::report_plugged`.
pub fn grade(
    deps: &Dependencies,
    trace: &DemandTrace,
    config: &Config,
    named: &Named,
    cwd: &Path,
) -> Result<Report, HostError> {
    let mut loaded = named
        .plugged
        .iter()
        .map(|spec| load(spec, cwd))
        .collect::<Result<Vec<Plugged>, HostError>>()?;
    let mut advisors: Vec<&mut dyn Advisor> =
        loaded.iter_mut().map(|p| p as &mut dyn Advisor).collect();
    Ok(oracle_demand::report_plugged(
        deps,
        trace,
        config,
        &mut advisors,
    )?)
}
