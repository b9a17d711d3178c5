//! Governed evolution over HTTP (docs/API.md, "Proposals"; docs/EVOLUTION.md): the proposals
//! of the home's runs, a check against recorded runs, a rejection by the token's name, and the
//! upload of an approval signed away from the server, so no secret key is ever sent here.
//! Everything is `oracle_host::Home`'s work, as `oracle evolve` does it.

use oracle_host::evolve::{Corpus, SignedApproval, Status};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::state::AppState;

/// A check's corpus: a list of run ids, or `"all"` (every run started under the base plan).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(untagged)]
pub enum CorpusBody {
    Runs(Vec<String>),
    All(String),
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckBody {
    pub corpus: CorpusBody,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RejectBody {
    pub reason: String,
}

/// The host's handle on this server's home; evolution writes need a file home (a store has no
/// ledger yet).
fn host(state: &AppState, writes: bool) -> Result<oracle_host::Home, ApiError> {
    if writes {
        state
            .backend
            .file_home_only(oracle_host::backend::FileHomeOnly::Evolve)?;
    }
    Ok(oracle_host::Home::open(&state.home)?)
}

/// `GET /api/v1/proposals`: as `oracle evolve list --json`.
pub fn list(state: &AppState) -> Result<Value, ApiError> {
    Ok(json!({"ok": true, "proposals": host(state, false)?.proposals_json()?}))
}

/// `GET /api/v1/proposals/{id}`: the proposal, its plan, diff, decision, lineage and reports.
pub fn show(state: &AppState, id: &str) -> Result<Value, ApiError> {
    Ok(json!({"ok": true, "proposal": host(state, false)?.proposal_detail(id)?}))
}

/// `POST /api/v1/proposals/{id}/check`: the report (kept in the home) and its BLAKE3 hash.
pub fn check(state: &AppState, id: &str, body: CheckBody) -> Result<Value, ApiError> {
    let corpus = match body.corpus {
        CorpusBody::Runs(runs) => {
            for r in &runs {
                state.run(r)?;
            }
            Corpus::Runs(runs)
        }
        CorpusBody::All(all) if all == "all" => Corpus::All,
        CorpusBody::All(other) => {
            return Err(ApiError::BadRequest(format!(
                "`corpus` is a list of run ids or \"all\", not {other:?}"
            )));
        }
    };
    let c = host(state, true)?.evolve_check(id, &corpus, None)?;
    Ok(json!({
        "ok": true,
        "report": c.report,
        "hash": c.hash,
        "file": c.path.file_name().map(|n| n.to_string_lossy().into_owned()),
    }))
}

/// `POST /api/v1/proposals/{id}/reject`: a ledger entry whose `by` is the token's name.
pub fn reject(state: &AppState, id: &str, by: &str, body: RejectBody) -> Result<Value, ApiError> {
    let e = host(state, true)?.evolve_reject(id, body.reason, Some(by.to_owned()))?;
    Ok(json!({"ok": true, "entry": oracle_host::evolve::entry_json(&e)}))
}

/// `POST /api/v1/proposals/{id}/approval`: appends an approval signed with `oracle evolve
/// approve --out` once its hashes name this proposal and a report kept here, and its
/// signature verifies. The approval's own `by` is kept; the uploading token is `uploaded_by`
/// in the answer only (the signed bytes cannot change).
pub fn approve(
    state: &AppState,
    id: &str,
    by: &str,
    body: SignedApproval,
) -> Result<Value, ApiError> {
    let e = host(state, true)?.evolve_approve_signed(id, body)?;
    Ok(json!({"ok": true, "entry": oracle_host::evolve::entry_json(&e), "uploaded_by": by}))
}

/// The undecided proposals as the inbox page shows them, each with its diff and its last
/// check (by report file name). A home whose ledger cannot be read shows none (the API and
/// `oracle evolve verify` say why).
pub fn pending_views(state: &AppState) -> Vec<oracle_html::view::ProposalView> {
    let Ok(h) = host(state, false) else {
        return Vec::new();
    };
    let Ok(all) = h.proposals() else {
        return Vec::new();
    };
    all.iter()
        .filter(|p| matches!(h.proposal_status(p), Ok(Status::Pending)))
        .map(|p| oracle_html::view::ProposalView {
            id: p.id.clone(),
            program: p.event.program.clone(),
            reason: p.event.reason.clone(),
            recorded: p
                .seen
                .iter()
                .map(|s| format!("{}@{}", s.run, s.seq))
                .collect(),
            diff: h.proposal_diff(p),
            report: h
                .proposal_reports(p)
                .pop()
                .map(|r| oracle_html::view::ReportView {
                    file: r
                        .path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    hash: r.hash.to_hex(),
                    unchanged: r.unchanged,
                    diverges: r.diverges,
                    cannot_check: r.cannot_check,
                }),
        })
        .collect()
}
