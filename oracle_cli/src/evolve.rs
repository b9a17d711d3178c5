//! `oracle evolve list | show | check | approve | reject | verify | policy | lineage`: governed
//! evolution from the command line (docs/EVOLUTION.md). The work is `oracle_host::evolve`'s;
//! this module parses and prints.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use oracle_core::Hash;
use oracle_host::evolve::{Checked, Corpus, Proposal, SignedApproval, Status};
use oracle_host::ledger::Entry;
use serde_json::{Value, json};

use crate::exit::{self, CliError};
use crate::run::{host, host_error};

#[derive(Args, Debug)]
pub struct EvolveArgs {
    #[command(subcommand)]
    command: EvolveCommand,
    /// `[evolution] require_approval` of the config file (never a flag).
    #[arg(skip)]
    pub(crate) require_approval: bool,
}

#[derive(Subcommand, Debug)]
enum EvolveCommand {
    /// List the plan changes the home's runs proposed (`patch_proposed` events): id, status
    /// (pending, approved, rejected), plan, base and where each was recorded.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Show one proposal: its reason, where it was recorded (run, event, the model reply it
    /// came from), its status and lineage, and a unified diff of its plan against the base.
    Show {
        /// The proposal's id (a prefix of its hash, as `list` prints it).
        id: String,
        /// Print only the proposed plan's text (to save it as a file).
        #[arg(long, conflicts_with = "json")]
        plan: bool,
        #[arg(long)]
        json: bool,
    },
    /// Re-derive recorded runs under the proposed plan (no model or tool is called: recorded
    /// answers are reused; nothing is written to a run) and report per run: unchanged,
    /// diverges at event S (which step, which fields), or cannot be checked (why). The report
    /// is written as canonical JSON and its BLAKE3 hash printed: `approve` signs that hash.
    Check {
        id: String,
        /// The runs to check (ids or directories).
        #[arg(long, num_args = 1.., required_unless_present = "corpus_all", conflicts_with = "corpus_all")]
        corpus: Vec<String>,
        /// Every run of the home that started under the proposal's base plan.
        #[arg(long)]
        corpus_all: bool,
        /// Where to write the report (default `<home>/evolution/reports/<id>-<hash>.json`).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Approve a proposal: sign (proposal hash, base plan hash, report hash) with an Ed25519
    /// key from `oracle keygen` and append it to the home's ledger. The approved plan is kept
    /// as `<home>/evolution/plans/<plan hash>.plan`. Exit 2 if it was decided already or the
    /// report is of another proposal.
    Approve {
        id: String,
        /// The secret key file (from `oracle keygen`).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// The report of `oracle evolve check` for this proposal.
        #[arg(long, value_name = "FILE")]
        report: PathBuf,
        /// Who approves (recorded; default: the OS user).
        #[arg(long)]
        by: Option<String>,
        /// Write the signed approval to FILE instead of appending it to this home's ledger:
        /// upload it to a server (`POST /api/v1/proposals/{id}/approval`), which verifies it
        /// and appends it, so the key never reaches the server (docs/EVOLUTION.md).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Reject a proposal, saying why (a ledger entry; no key needed: it only withholds).
    Reject {
        id: String,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Check the ledger: every entry canonical, hashed, chained to the one before, and every
    /// approval's signature. Exit 0 valid, 4 naming the first entry that is not as appended.
    Verify {
        #[arg(long)]
        json: bool,
    },
    /// Print whether the home requires approval and who may approve; with `--require-approval
    /// on|off` or `--approver`, record a policy entry in the ledger (what is not given is kept
    /// from the policy before). Then `run`, `resume --plan` and `fork --plan` of a plan a run
    /// proposed and no named approver approved are refused (exit 2), and an approval signed
    /// by a key the policy does not name is refused (exit 2, `not_an_approver`).
    Policy {
        #[arg(long, value_name = "on|off")]
        require_approval: Option<OnOff>,
        /// An approver's public key file (FILE.pub from `oracle keygen`); repeat for each. The
        /// list given replaces the policy's list whole.
        #[arg(long, value_name = "KEY.pub", conflicts_with = "clear_approvers")]
        approver: Vec<PathBuf>,
        /// Name no approvers (with approval required, then no approval counts).
        #[arg(long)]
        clear_approvers: bool,
        #[arg(long)]
        reason: Option<String>,
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// The approvals behind a plan version, newest first: for each, the parent plan, the
    /// proposal, the report and the approver's key. PLAN is a plan file or a plan hash.
    Lineage {
        plan: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum OnOff {
    On,
    Off,
}

pub fn run(home: &Path, a: EvolveArgs) -> Result<u8, CliError> {
    let json_out = matches!(
        &a.command,
        EvolveCommand::List { json: true }
            | EvolveCommand::Show { json: true, .. }
            | EvolveCommand::Check { json: true, .. }
            | EvolveCommand::Approve { json: true, .. }
            | EvolveCommand::Reject { json: true, .. }
            | EvolveCommand::Verify { json: true }
            | EvolveCommand::Policy { json: true, .. }
            | EvolveCommand::Lineage { json: true, .. }
    );
    let h = host(home, json_out)?.with_require_approval(a.require_approval);
    let fail = |e| host_error(e, json_out);
    match a.command {
        EvolveCommand::List { json } => list(&h.proposals().map_err(fail)?, &h, json),
        EvolveCommand::Show { id, plan, json } => {
            let p = h.proposal(&id).map_err(fail)?;
            if plan {
                crate::out::write_bytes(p.event.plan.as_bytes())?;
                return Ok(exit::OK);
            }
            show(&h, &p, json)
        }
        EvolveCommand::Check {
            id,
            corpus,
            corpus_all,
            out,
            json,
        } => {
            let corpus = if corpus_all {
                Corpus::All
            } else {
                Corpus::Runs(corpus)
            };
            let c = h.evolve_check(&id, &corpus, out.as_deref()).map_err(fail)?;
            print_check(&c, json)
        }
        EvolveCommand::Approve {
            id,
            key,
            report,
            by,
            out,
            json,
        } => {
            let key =
                oracle_host::keys::read_secret_key(&key).map_err(crate::checkpoint::cli_error)?;
            let by = by.or_else(os_user);
            if let Some(out) = out {
                let signed = h.evolve_sign(&id, &key, &report, by).map_err(fail)?;
                return write_signed(&signed, &out, json);
            }
            print_entry(
                &h.evolve_approve(&id, key, &report, by).map_err(fail)?,
                json,
            )
        }
        EvolveCommand::Reject {
            id,
            reason,
            by,
            json,
        } => {
            let by = by.or_else(os_user);
            print_entry(&h.evolve_reject(&id, reason, by).map_err(fail)?, json)
        }
        EvolveCommand::Verify { json } => verify(&h, json),
        EvolveCommand::Policy {
            require_approval,
            approver,
            clear_approvers,
            reason,
            by,
            json,
        } => {
            let approvers = match (clear_approvers, approver.is_empty()) {
                (true, _) => Some(Vec::new()),
                (false, true) => None,
                (false, false) => Some(read_approvers(&approver)?),
            };
            let require = require_approval.map(|v| matches!(v, OnOff::On));
            policy(
                &h,
                PolicySet {
                    require,
                    approvers,
                    reason,
                    by,
                },
                json,
            )
        }
        EvolveCommand::Lineage { plan, json } => lineage(&h, &plan, json),
    }
}

fn os_user() -> Option<String> {
    std::env::var("USER").ok().filter(|u| !u.is_empty())
}

fn status_of(h: &oracle_host::Home, p: &Proposal) -> Result<Status, CliError> {
    h.proposal_status(p).map_err(|e| host_error(e, false))
}

fn status_json(s: &Status) -> Value {
    match s {
        Status::Pending => json!({"status": "pending"}),
        Status::Decided(e) => json!({"status": e.decision.as_str(), "entry": e.entry}),
    }
}

/// Writes a signed approval (canonical JSON) for upload.
fn write_signed(a: &SignedApproval, out: &Path, json_out: bool) -> Result<u8, CliError> {
    let v = serde_json::to_value(a).unwrap_or(Value::Null);
    let mut bytes =
        oracle_host::ledger::json_bytes(&v).map_err(|e| CliError::input(e.to_string()))?;
    bytes.push(b'\n');
    std::fs::write(out, &bytes).map_err(|e| CliError::input(format!("{}: {e}", out.display())))?;
    if json_out {
        crate::out::json(&json!({"ok": true, "approval": v, "path": out}))?;
    } else {
        outln!(
            "signed approval of proposal {} by key {}",
            &a.proposal.to_hex()[..12],
            a.public_key
        )?;
        outln!(
            "written  {} (not appended: upload it to the server)",
            out.display()
        )?;
    }
    Ok(exit::OK)
}

fn list(all: &[Proposal], h: &oracle_host::Home, json_out: bool) -> Result<u8, CliError> {
    if json_out {
        let rows = h.proposals_json().map_err(|e| host_error(e, true))?;
        crate::out::json(&json!({"ok": true, "proposals": rows}))?;
        return Ok(exit::OK);
    }
    if all.is_empty() {
        outln!("no proposals")?;
        return Ok(exit::OK);
    }
    outln!(
        "{:<14} {:<9} {:<16} {:<10} {:<10} recorded",
        "id",
        "status",
        "plan",
        "base",
        "proposed"
    )?;
    for p in all {
        let at: Vec<String> = p
            .seen
            .iter()
            .map(|s| format!("{}@{}", s.run, s.seq))
            .collect();
        outln!(
            "{:<14} {:<9} {:<16} {:<10} {:<10} {}",
            p.id,
            status_of(h, p)?.as_str(),
            p.event.program,
            p.event.base.short(),
            p.event.plan_hash.short(),
            at.join(", ")
        )?;
    }
    Ok(exit::OK)
}

fn proposal_json(p: &Proposal, status: &Status) -> Value {
    oracle_host::evolve::proposal_json(p, status)
}

fn show(h: &oracle_host::Home, p: &Proposal, json_out: bool) -> Result<u8, CliError> {
    let status = status_of(h, p)?;
    let diff = h.proposal_diff(p);
    let lineage = h
        .lineage(&p.event.plan_hash)
        .map_err(|e| host_error(e, json_out))?;
    if json_out {
        let mut v = proposal_json(p, &status);
        v["status"] = status_json(&status);
        v["plan"] = json!(p.event.plan);
        v["diff"] = json!(diff);
        v["lineage"] = lineage.iter().map(entry_json).collect();
        crate::out::json(&json!({"ok": true, "proposal": v}))?;
        return Ok(exit::OK);
    }
    outln!("proposal  {} ({})", p.id, p.hash.to_hex())?;
    outln!(
        "plan      {} {}",
        p.event.program,
        p.event.plan_hash.to_hex()
    )?;
    outln!("base      {}", p.event.base.to_hex())?;
    outln!("reason    {}", p.event.reason)?;
    for s in &p.seen {
        let model = s.model_call.map_or(String::new(), |m| {
            format!(", from the model reply at event {m}")
        });
        outln!(
            "recorded  run {} event {} (step {}{model})",
            s.run,
            s.seq,
            s.step
        )?;
    }
    outln!("status    {}", status.as_str())?;
    print_lineage(&lineage)?;
    match diff {
        Some(d) => out!("\n{d}")?,
        None => outln!("\n(no copy of the base plan is kept: no diff)")?,
    }
    Ok(exit::OK)
}

fn print_check(c: &Checked, json_out: bool) -> Result<u8, CliError> {
    if json_out {
        crate::out::json(&json!({
            "ok": true,
            "report": c.report,
            "path": c.path,
            "hash": c.hash,
        }))?;
        return Ok(exit::OK);
    }
    let r = &c.report;
    outln!(
        "proposal {} against {} runs",
        r["id"].as_str().unwrap_or(""),
        r["runs"].as_array().map_or(0, Vec::len)
    )?;
    for run in r["runs"].as_array().into_iter().flatten() {
        let name = run["run"].as_str().unwrap_or("");
        match run["result"].as_str() {
            Some("unchanged") => outln!("  {name:<20} unchanged")?,
            Some("diverges") => outln!(
                "  {name:<20} diverges at event {} ({}{}) in {}",
                run["seq"],
                run["kind"].as_str().unwrap_or(""),
                run["step"]
                    .as_str()
                    .map_or(String::new(), |s| format!(", step {s}")),
                run["fields"]
                    .as_array()
                    .map(|f| f
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", "))
                    .filter(|f| !f.is_empty())
                    .unwrap_or_else(|| "kind".into())
            )?,
            _ => outln!(
                "  {name:<20} cannot be checked: {}",
                run["why"].as_str().unwrap_or("")
            )?,
        }
    }
    outln!(
        "{} unchanged, {} diverge, {} cannot be checked",
        r["unchanged"],
        r["diverges"],
        r["cannot_check"]
    )?;
    outln!("report   {}", c.path.display())?;
    outln!("blake3   {}", c.hash.to_hex())?;
    Ok(exit::OK)
}

fn entry_json(e: &Entry) -> Value {
    oracle_host::evolve::entry_json(e)
}

fn print_entry(e: &Entry, json_out: bool) -> Result<u8, CliError> {
    if json_out {
        crate::out::json(&json!({"ok": true, "entry": entry_json(e)}))?;
        return Ok(exit::OK);
    }
    outln!("ledger entry {} {}", e.entry, e.decision.as_str())?;
    if let Some(p) = e.plan_hash {
        outln!("plan     {}", p.to_hex())?;
    }
    if let Some(k) = &e.public_key {
        outln!("signed   by key {k}")?;
    }
    outln!("hash     {}", e.hash.to_hex())?;
    Ok(exit::OK)
}

fn verify(h: &oracle_host::Home, json_out: bool) -> Result<u8, CliError> {
    let entries = h.evolve_verify().map_err(|e| host_error(e, json_out))?;
    let head = entries.last().map(|e| e.hash);
    if json_out {
        crate::out::json(&json!({"ok": true, "entries": entries.len(), "head": head}))?;
    } else {
        outln!(
            "ok  ledger: {} entries, chained and signed{}",
            entries.len(),
            head.map_or(String::new(), |h| format!(", head {}", h.to_hex()))
        )?;
    }
    Ok(exit::OK)
}

/// What `oracle evolve policy` was asked to change (`None`: kept).
struct PolicySet {
    require: Option<bool>,
    approvers: Option<Vec<oracle_host::PublicKey>>,
    reason: Option<String>,
    by: Option<String>,
}

/// The public keys of `--approver` files.
fn read_approvers(files: &[PathBuf]) -> Result<Vec<oracle_host::PublicKey>, CliError> {
    files
        .iter()
        .map(|f| oracle_host::keys::read_public_key(f).map_err(crate::checkpoint::cli_error))
        .collect()
}

fn policy(h: &oracle_host::Home, set: PolicySet, json_out: bool) -> Result<u8, CliError> {
    let fail = |e| host_error(e, json_out);
    let entry = match (set.require, set.approvers) {
        (None, None) => None,
        (require, approvers) => Some(
            h.set_policy(require, approvers, set.reason, set.by.or_else(os_user))
                .map_err(fail)?,
        ),
    };
    let require = h.requires_approval().map_err(fail)?;
    let approvers = h.approvers().map_err(fail)?;
    if json_out {
        crate::out::json(&json!({
            "ok": true,
            "require_approval": require,
            "approvers": approvers,
            "entry": entry.as_ref().map(entry_json),
        }))?;
    } else {
        outln!("require_approval {}", if require { "on" } else { "off" })?;
        if approvers.is_empty() {
            outln!("approvers        none named")?;
        }
        for k in &approvers {
            outln!("approver         {k}")?;
        }
        if let Some(e) = entry {
            outln!("ledger entry {} policy", e.entry)?;
        }
    }
    Ok(exit::OK)
}

/// The plan hash `plan` names: a hash, or a plan file compiled against the built-in tools.
fn plan_hash_of(plan: &str) -> Result<Hash, CliError> {
    if let Ok(h) = Hash::from_hex(plan) {
        return Ok(h);
    }
    let text = std::fs::read_to_string(plan)
        .map_err(|e| CliError::input(format!("{plan}: not a plan hash, and not readable: {e}")))?;
    oracle_host::evolve::plan_hash(&text).map_err(|e| CliError::input(format!("{plan}: {e}")))
}

fn print_lineage(entries: &[Entry]) -> Result<(), CliError> {
    for e in entries {
        outln!(
            "lineage   {} <- {} (proposal {}, report {}, approved by key {} in ledger entry {})",
            e.plan_hash.map_or(String::new(), |h| h.short()),
            e.base.map_or(String::new(), |h| h.short()),
            e.proposal
                .map_or(String::new(), |h| h.to_hex()[..12].to_owned()),
            e.report.map_or(String::new(), |h| h.short()),
            e.public_key.as_deref().unwrap_or("?"),
            e.entry
        )?;
    }
    Ok(())
}

fn lineage(h: &oracle_host::Home, plan: &str, json_out: bool) -> Result<u8, CliError> {
    let hash = plan_hash_of(plan)?;
    let entries = h.lineage(&hash).map_err(|e| host_error(e, json_out))?;
    if json_out {
        crate::out::json(&json!({
            "ok": true,
            "plan": hash,
            "lineage": entries.iter().map(entry_json).collect::<Vec<_>>(),
        }))?;
        return Ok(exit::OK);
    }
    if entries.is_empty() {
        outln!(
            "{}: no approval in the ledger made this plan",
            hash.to_hex()
        )?;
    }
    print_lineage(&entries)?;
    Ok(exit::OK)
}
