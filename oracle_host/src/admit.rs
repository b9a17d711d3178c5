//! Admission: the one rule that decides whether a plan from outside may run, for whom, with
//! which grants, and where. Every door that takes a plan calls [`admit`]: `POST /api/v1/runs`,
//! a fork or an upgrade that brings a plan (the API, the run page's form), a schedule added
//! over the API, a store's submission through the server. A new door calls it too, and the door
//! test (`oracle_cli/tests/doors.rs`) walks every route that takes a plan and checks it refuses
//! what `POST /runs` refuses, with the same code.
//!
//! The rules, numbered as docs/SECURITY.md ("Admission") numbers them:
//! 1. A plan from the network runs only on a server that starts runs (`oracle serve --root
//!    DIR`): without a root, `starts_off`, whatever else the request asks.
//! 2. It never holds a program-running grant (`proc:…`, `*`), whether its own text names it or
//!    the run it joins holds it already (a fork's parent's recorded grants): programs are not
//!    confined by grants (docs/SECURITY.md), so a token would be a shell.
//! 3. Its `fs` grants, its own and inherited, are relative scopes without `..`: it reaches
//!    files under the root only.
//! 4. Its `tools` lines name directories under the root only.
//! 5. A run it joins (a fork) works in the server's root: a plan given over the network never
//!    works in a directory a person at the terminal chose for another run.
//!
//! What is absent, by design: no second copy of these rules in a front end (the server parses
//! and calls this); no exception by route; a person at the home's terminal ([`Door::Terminal`])
//! is not a network caller and is governed by their own grants and the home's evolution policy.

use std::path::{Component, Path, PathBuf};

use crate::error::HostError;

/// Who hands the plan in, and what their door allows.
#[derive(Clone, Copy, Debug)]
pub enum Door<'a> {
    /// A person at the home's terminal (`oracle run`, `oracle fork --plan`, `oracle resume
    /// --plan`): the plan and its grants are theirs.
    Terminal,
    /// A token holder of `oracle serve` (the API, the web forms): `root` is the server's
    /// `--root`, `None` when it starts no runs.
    Network { root: Option<&'a Path> },
}

/// A plan handed in at a door.
#[derive(Clone, Copy, Debug)]
pub struct Plan<'a> {
    /// The plan's text.
    pub text: &'a str,
    /// Grants the run holds beyond those the text names: a fork's parent's recorded grants
    /// (a forked run keeps them, whatever the new plan says).
    pub inherited: &'a [String],
    /// Where the run would work when it is not a new one (a fork works where its parent did).
    pub works_in: Option<&'a Path>,
}

/// What admission decided for a plan it let in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admitted {
    /// The directory the run works in (the server's root over the network; `None` at the
    /// terminal, where the caller says).
    pub root: Option<PathBuf>,
    /// The directories its `tools` lines name, under the root.
    pub tool_dirs: Vec<PathBuf>,
}

/// Checks a value given from outside any run (`oracle claim --value`): within the limits of a
/// recorded value, as a run's own outside answers are.
pub fn check_outside_value(
    value: &serde_json::Value,
    what: &str,
) -> Result<(), oracle_runtime::session::OutsideValue> {
    oracle_runtime::session::check_outside_value(value, what)
}

/// Decides whether `plan` may run for whoever stands at `door` (module docs, rules 1 to 5).
/// Nothing is created either way.
pub fn admit(door: Door<'_>, plan: Plan<'_>) -> Result<Admitted, HostError> {
    let Door::Network { root } = door else {
        return Ok(Admitted::default());
    };
    let root = root.ok_or(HostError::StartsOff)?;
    // A plan that does not parse is left to the compiler, which names every error; its
    // inherited grants are still checked.
    let parsed = oracle_plan::parse(plan.text).0;
    let own = parsed
        .as_ref()
        .map(|p| p.grants.iter().map(|g| g.node.clone()).collect::<Vec<_>>())
        .unwrap_or_default();
    for g in &own {
        check_grant(g, "grant")?;
    }
    for g in plan.inherited {
        check_grant(g, "the run's recorded grant")?;
    }
    if let Some(dir) = plan.works_in
        && !same_dir(dir, root)
    {
        return Err(refused(format!(
            "the run works in {}, not under the server's --root {}: a plan given through the API works under the root only",
            dir.display(),
            root.display()
        )));
    }
    let mut tool_dirs = Vec::new();
    for t in parsed.iter().flat_map(|p| &p.tools) {
        if !inside(&t.node) {
            return Err(refused(format!(
                "tools \"{}\": a plan given through the API loads tools from under the server's --root only (a relative path without `..`)",
                t.node
            )));
        }
        tool_dirs.push(root.join(&t.node));
    }
    Ok(Admitted {
        root: Some(root.to_path_buf()),
        tool_dirs,
    })
}

/// Rules 2 and 3 for one grant, named `what` in the refusal.
fn check_grant(g: &str, what: &str) -> Result<(), HostError> {
    let mut parts = g.splitn(3, ':');
    let (domain, scope) = (parts.next().unwrap_or(""), parts.nth(1).unwrap_or(""));
    if domain == "proc" || domain == "*" {
        return Err(refused(format!(
            "{what} `{g}`: a plan given through the API cannot run programs (programs are not confined by grants; docs/SECURITY.md)"
        )));
    }
    if domain == "fs" && (scope.starts_with('/') || scope.split('/').any(|c| c == "..")) {
        return Err(refused(format!(
            "{what} `{g}`: a plan given through the API reaches files under the server's --root only (a relative scope without `..`)"
        )));
    }
    Ok(())
}

fn refused(what: String) -> HostError {
    HostError::NotAllowed { what }
}

/// A directory written in a plan: relative and never climbing out of the root.
fn inside(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The same directory, as the file system resolves both (a path that cannot be resolved is
/// compared as written).
fn same_dir(a: &Path, b: &Path) -> bool {
    let resolve = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    resolve(a) == resolve(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(lines: &str) -> String {
        format!("plan p version 1\n{lines}\ns = json.parse {{ text: \"1\" }}\n")
    }

    fn net(text: &str) -> Result<Admitted, HostError> {
        let root = Path::new("/srv/work");
        admit(
            Door::Network { root: Some(root) },
            Plan {
                text,
                inherited: &[],
                works_in: None,
            },
        )
    }

    #[test]
    fn paths_from_the_network_stay_under_the_root() {
        let root = Path::new("/srv/work");
        assert!(net(&plan("grant fs:read:data/**")).is_ok());
        assert!(net(&plan("grant fs:write:*.txt")).is_ok());
        assert!(net(&plan("grant net:http:127.0.0.1:*")).is_ok());
        assert!(net(&plan("grant fs:read:/etc/**")).is_err());
        assert!(net(&plan("grant fs:read:../x")).is_err());
        assert!(net(&plan("grant proc:exec:*")).is_err());
        assert_eq!(
            net(&plan("tools \"tools\"")).expect("allowed").tool_dirs,
            vec![root.join("tools")]
        );
        assert!(net(&plan("tools \"/opt/tools\"")).is_err());
        assert!(net(&plan("tools \"a/../../b\"")).is_err());
    }

    #[test]
    fn inherited_program_grants_and_a_missing_root_are_refused_over_the_network() {
        let text = plan("");
        let inherited = ["proc:exec:sh".to_owned()];
        let with = |door, inherited: &[String]| {
            admit(
                door,
                Plan {
                    text: &text,
                    inherited,
                    works_in: None,
                },
            )
        };
        let root = Path::new("/srv/work");
        let code = |r: Result<Admitted, HostError>| r.map(|_| ()).map_err(|e| e.code());
        assert_eq!(
            code(with(Door::Network { root: Some(root) }, &inherited)),
            Err("not_allowed")
        );
        assert_eq!(
            code(with(Door::Network { root: None }, &[])),
            Err("starts_off")
        );
        // The terminal's own grants are its own.
        assert_eq!(code(with(Door::Terminal, &inherited)), Ok(()));
    }

    #[test]
    fn a_fork_over_the_network_works_under_the_root_only() {
        let text = plan("");
        let r = admit(
            Door::Network {
                root: Some(Path::new("/srv/work")),
            },
            Plan {
                text: &text,
                inherited: &[],
                works_in: Some(Path::new("/home/alice/project")),
            },
        );
        assert_eq!(r.map(|_| ()).map_err(|e| e.code()), Err("not_allowed"));
    }
}
