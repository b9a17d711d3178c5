//! Governed evolution (docs/EVOLUTION.md): the proposals runs recorded (`patch_proposed`), a
//! check of one against a corpus of recorded runs (each re-derived under the proposed plan,
//! nothing called, nothing written to the runs), signed approvals and rejections in the home's
//! ledger ([`crate::ledger`]), the lineage of approved plan versions, and the policy that
//! refuses to run a proposed plan nobody approved.

use std::path::{Path, PathBuf};

use oracle_core::Hash;
use oracle_core::payload::{PatchProposed, Payload};
use oracle_plan::CompiledPlan;
use oracle_runtime::checkpoint::{PublicKey, SecretKey, Signature};
use oracle_runtime::declared::McpMode;
use oracle_runtime::recorded::Recorded;
use oracle_runtime::session::{self, SessionError};
use serde_json::{Value, json};

use crate::bind::{Given, ToolChange};
use crate::error::HostError;
use crate::home::Home;
use crate::ledger::{self, Decision, Draft, Entry, LedgerError};

/// The program hash of a proposed plan's text, compiled as a proposal is (against the
/// built-in tools; `oracle evolve ... --plan FILE`), or why it does not compile.
pub fn plan_hash(text: &str) -> Result<Hash, oracle_runtime::tools::evolve::ProposalError> {
    oracle_runtime::tools::evolve::compile(text).map(|c| c.hash)
}

/// Hex characters of a proposal's hash that name it (`oracle evolve show 3f2a9c01d4e5`): 48
/// bits, so two proposals of one home share an id only by a one-in-2^48 chance; a shorter
/// prefix is accepted when it names one proposal.
pub const ID_HEX_LEN: usize = 12;

/// The shortest prefix accepted as a proposal's id: fewer would name many by accident.
pub const ID_HEX_MIN: usize = 4;

/// The BLAKE3 `derive_key` context of a proposal's hash (its own kind of object).
const PROPOSAL_CONTEXT: &str = "oracle v1 evolution proposal";

/// A report file larger than this is not read: a report holds a few lines per run, and the
/// runs a check takes are bounded by the home.
pub const REPORT_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// The report's layout version (`format`).
pub const REPORT_FORMAT: u64 = 1;

/// Where reports and approved plan versions are kept under `<home>/evolution`.
pub const REPORTS_DIR: &str = "reports";
pub const PLANS_DIR: &str = "plans";

/// Why an evolution command did not do what was asked. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum EvolveError {
    #[error("no proposal `{id}` in this home (`oracle evolve list` shows them)")]
    Unknown { id: String },
    #[error("`{id}` names {count} proposals: give more of its id")]
    Ambiguous { id: String, count: u64 },
    #[error("proposal {id} was {decision} already (ledger entry {entry}); nothing was written")]
    Decided {
        id: String,
        decision: &'static str,
        entry: u64,
    },
    #[error("{}: {why}; nothing was written", path.display())]
    BadReport { path: PathBuf, why: String },
    #[error(
        "plan {plan} is the plan of proposal {id}, which no named approver approved, and this home requires approval (`oracle evolve check {id}`, then `oracle evolve approve {id}` with an approver's key); nothing was run"
    )]
    NotApproved { id: String, plan: String },
    /// An approval signed by a key the policy does not name (`named`: how many it names).
    #[error("{}; nothing was written", not_an_approver(key, *named))]
    NotAnApprover { key: String, named: u64 },
    /// A report no check of this home recorded in the ledger: an edited copy, or a report
    /// from elsewhere.
    #[error(
        "no check of proposal {id} in this home wrote a report with hash {hash} (the ledger records every report `oracle evolve check` writes): an edited or foreign report is never signed; check it here (`oracle evolve check {id}`) and sign that report; nothing was written"
    )]
    ReportNotRecorded { id: String, hash: String },
    #[error("the approval is not one this home can take: {why}; nothing was written")]
    BadApproval { why: String },
    #[error("{why}")]
    Usage { why: String },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Why key `key` may not approve, given how many approvers the policy names.
fn not_an_approver(key: &str, named: u64) -> String {
    // `get`: a key given by a caller may not be hex, and a slice must not split a character.
    let short = key.get(..ID_HEX_LEN).unwrap_or(key);
    match named {
        0 => format!(
            "this home requires approval and names no approvers, so no approval counts (key {short} was given): name them with `oracle evolve policy --require-approval on --approver KEY.pub`"
        ),
        n => format!(
            "key {short} is not one of the {n} approvers this home's policy names (`oracle evolve policy` lists them)"
        ),
    }
}

impl From<LedgerError> for HostError {
    fn from(e: LedgerError) -> HostError {
        HostError::Evolve(EvolveError::Ledger(e))
    }
}

/// Where a proposal was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub run: String,
    /// Its `patch_proposed` event.
    pub seq: u64,
    pub step: String,
    /// The model reply it came from.
    pub model_call: Option<u64>,
}

/// One proposal: the same plan, base and reason recorded by any number of runs.
#[derive(Clone, Debug)]
pub struct Proposal {
    pub hash: Hash,
    pub id: String,
    pub event: PatchProposed,
    pub seen: Vec<Seen>,
}

/// What the ledger says of a proposal.
#[derive(Clone, Debug)]
pub enum Status {
    Pending,
    /// Its ledger entry (boxed: an entry is large beside `Pending`).
    Decided(Box<Entry>),
}

impl Status {
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Decided(e) => e.decision.as_str(),
        }
    }
}

/// Which runs a check re-derives.
pub enum Corpus {
    /// These runs, whatever plan they followed.
    Runs(Vec<String>),
    /// Every run of the home that started under the proposal's base plan.
    All,
}

/// The layout version of a signed approval file (`format`).
pub const APPROVAL_FORMAT: u64 = 1;

/// An approval signed away from the home (`oracle evolve approve --out FILE`), to be appended
/// by [`Home::evolve_approve_signed`]: the signature covers [`ledger::approval_message`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedApproval {
    pub format: u64,
    pub proposal: Hash,
    pub base: Hash,
    pub plan_hash: Hash,
    /// The BLAKE3 hash of the check report's file.
    pub report: Hash,
    /// Ed25519, hex.
    pub public_key: String,
    pub signature: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// A check's report, written.
pub struct Checked {
    pub report: Value,
    pub path: PathBuf,
    /// BLAKE3 of the file's bytes (`b3sum` gives the same).
    pub hash: Hash,
}

/// A proposal's hash: its base, plan text, plan hash, program and reason, canonical JSON.
pub fn proposal_hash(p: &PatchProposed) -> Hash {
    let v = json!({
        "base": p.base,
        "plan": p.plan,
        "plan_hash": p.plan_hash,
        "program": p.program,
        "reason": p.reason,
    });
    // Invariant: strings and hashes only, which always encode.
    oracle_core::canon::hash_value_in(PROPOSAL_CONTEXT, &v).unwrap_or_default()
}

/// The proposals recorded in `log`, with their seqs.
fn proposals_in(log: &Path) -> Result<Vec<(u64, PatchProposed)>, SessionError> {
    let events = Recorded::read(log)?;
    Ok((0..events.len())
        .filter(|&s| events.kind(s) == Some(oracle_core::EventKind::PatchProposed))
        .filter_map(|s| match events.event(s).map(|e| e.typed()) {
            Some(Ok(Payload::PatchProposed(p))) => Some((s, p)),
            _ => None,
        })
        .collect())
}

/// Adds one recorded proposal to `all`, merging it with an equal one seen before.
fn add(all: &mut Vec<Proposal>, run: &str, seq: u64, p: PatchProposed) {
    let hash = proposal_hash(&p);
    let seen = Seen {
        run: run.to_owned(),
        seq,
        step: p.step.clone(),
        model_call: p.model_call,
    };
    match all.iter_mut().find(|x| x.hash == hash) {
        Some(x) => x.seen.push(seen),
        None => all.push(Proposal {
            hash,
            id: hash.to_hex()[..ID_HEX_LEN].to_owned(),
            event: p,
            seen: vec![seen],
        }),
    }
}

/// The unified diff of `base` and `proposed` (three lines of context).
pub fn unified_diff(base: &str, proposed: &str, base_name: &str, proposed_name: &str) -> String {
    similar::TextDiff::from_lines(base, proposed)
        .unified_diff()
        .context_radius(3)
        .header(base_name, proposed_name)
        .to_string()
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HostError + '_ {
    move |source| {
        SessionError::Io {
            path: path.to_path_buf(),
            source,
        }
        .into()
    }
}

/// Writes `bytes` to `path` through a synced temporary file and a rename.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), HostError> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

impl Home {
    /// Every proposal recorded by the home's runs, in the order first recorded (runs by id,
    /// events by seq). A run whose log cannot be read is left out.
    pub fn proposals(&self) -> Result<Vec<Proposal>, HostError> {
        let mut all = Vec::new();
        for info in session::list(self.dir())? {
            let log = self.dir().join("runs").join(&info.id).join("events.jsonl");
            let Ok(found) = proposals_in(&log) else {
                continue;
            };
            for (seq, p) in found {
                add(&mut all, &info.id, seq, p);
            }
        }
        Ok(all)
    }

    /// The proposal `id` names (a prefix of its hash, at least [`ID_HEX_MIN`] characters).
    pub fn proposal(&self, id: &str) -> Result<Proposal, HostError> {
        let id = id.to_ascii_lowercase();
        if id.len() < ID_HEX_MIN || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(EvolveError::Usage {
                why: format!(
                    "`{id}` is not a proposal id: {ID_HEX_MIN} to 64 hex characters (`oracle evolve list`)"
                ),
            }
            .into());
        }
        let mut found: Vec<Proposal> = self
            .proposals()?
            .into_iter()
            .filter(|p| p.hash.to_hex().starts_with(&id))
            .collect();
        match found.len() {
            0 => Err(EvolveError::Unknown { id }.into()),
            1 => Ok(found.remove(0)),
            n => Err(EvolveError::Ambiguous {
                id,
                count: n as u64,
            }
            .into()),
        }
    }

    /// What the ledger says of `p`: its approval or rejection, if any.
    pub fn proposal_status(&self, p: &Proposal) -> Result<Status, HostError> {
        Ok(
            decision_of(&ledger::read(self.dir())?, &p.hash, self.require_approval)
                .map_or(Status::Pending, |e| Status::Decided(Box::new(e))),
        )
    }

    /// The text of `p`'s base plan, where a run that proposed it keeps it (its plan versions
    /// under `plans/`, or its plan file while it still follows the base); else an approved
    /// version of the home.
    pub fn base_text(&self, p: &Proposal) -> Option<String> {
        let name = format!("{}.plan", p.event.base.to_hex());
        let mut places = vec![self.dir().join(ledger::DIR).join(PLANS_DIR).join(&name)];
        for s in &p.seen {
            let dir = self.dir().join("runs").join(&s.run);
            places.push(dir.join(oracle_runtime::fork::PLANS_DIR).join(&name));
            places.push(dir.join(session::PLAN_FILE));
        }
        places
            .into_iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .find(|text| {
                oracle_runtime::tools::evolve::compile(text).is_ok_and(|c| c.hash == p.event.base)
            })
    }

    /// The unified diff of `p`'s base plan and its proposed plan, or `None` when no copy of
    /// the base plan is kept.
    pub fn proposal_diff(&self, p: &Proposal) -> Option<String> {
        let base = self.base_text(p)?;
        Some(unified_diff(
            &base,
            &p.event.plan,
            &format!("base {}", p.event.base.short()),
            &format!("proposed {}", p.event.plan_hash.short()),
        ))
    }
}

/// The approval or rejection of proposal `hash` in `entries`, if any.
fn decision_of(entries: &[Entry], hash: &Hash, home_requires: bool) -> Option<Entry> {
    let (requires, approvers) = policy_of(entries);
    let open = approvers.is_empty() && !(requires || home_requires);
    // An approval by a key the policy does not name (made before approvers were named, or
    // by one removed since) decides nothing: a named approver may still decide.
    let counts = |e: &Entry| match e.decision {
        Decision::Rejected => true,
        Decision::Approved => {
            open || e
                .public_key
                .as_deref()
                .and_then(key_hex)
                .is_some_and(|k| approvers.contains(&k))
        }
        Decision::Policy | Decision::Checked => false,
    };
    entries
        .iter()
        .find(|e| e.proposal.as_ref() == Some(hash) && counts(e))
        .cloned()
}

impl Home {
    /// Re-derives every run of `corpus` under proposal `id`'s plan (nothing is called or
    /// written to a run: recorded answers are reused), writes the report as canonical JSON to
    /// `out` (default `<home>/evolution/reports/<id>-<hash>.json`) and returns it.
    pub fn evolve_check(
        &self,
        id: &str,
        corpus: &Corpus,
        out: Option<&Path>,
    ) -> Result<Checked, HostError> {
        let p = self.proposal(id)?;
        let plan = oracle_runtime::tools::evolve::compile(&p.event.plan)
            .map_err(|e| EvolveError::Usage { why: e.to_string() })?;
        let runs = match corpus {
            Corpus::Runs(runs) => {
                for r in runs {
                    self.find(r)?;
                }
                runs.clone()
            }
            Corpus::All => self.runs_of(&p.event.base)?,
        };
        let results: Vec<Value> = runs.iter().map(|r| self.check_one(&plan, &p, r)).collect();
        let count = |r: &str| results.iter().filter(|v| v["result"] == r).count() as u64;
        let report = json!({
            "format": REPORT_FORMAT,
            "proposal": p.hash,
            "id": p.id,
            "base": p.event.base,
            "plan_hash": p.event.plan_hash,
            "program": p.event.program,
            "runs": results,
            "unchanged": count("unchanged"),
            "diverges": count("diverges"),
            "cannot_check": count("cannot_check"),
        });
        let bytes =
            ledger::json_bytes(&report).map_err(|e| EvolveError::Usage { why: e.to_string() })?;
        let hash = Hash(*blake3::hash(&bytes).as_bytes());
        // Read first: a damaged ledger is found before a report is written that it could not
        // record.
        let known = recorded(&ledger::read(self.dir())?, &p.hash, &hash);
        let path = match out {
            Some(p) => p.to_path_buf(),
            None => self.dir().join(ledger::DIR).join(REPORTS_DIR).join(format!(
                "{}-{}.json",
                p.id,
                &hash.to_hex()[..ID_HEX_LEN]
            )),
        };
        write_file(&path, &bytes)?;
        if !known {
            self.record_report(&p, hash)?;
        }
        Ok(Checked { report, path, hash })
    }

    /// Records in the ledger that a check of `p` wrote the report whose BLAKE3 hash is `hash`:
    /// only a report recorded so is ever signed ([`Home::evolve_sign`]). Two checks writing the
    /// same report at once may both record it, which changes nothing.
    fn record_report(&self, p: &Proposal, hash: Hash) -> Result<Entry, HostError> {
        let draft = Draft {
            decision: Decision::Checked,
            proposal: Some(p.hash),
            base: Some(p.event.base),
            plan_hash: Some(p.event.plan_hash),
            report: Some(hash),
            require_approval: None,
            approvers: None,
            reason: None,
            by: None,
            key: None,
            signed: None,
        };
        ledger::append(self.dir(), draft, |_| Ok(()))
    }

    /// The runs of the home that started under plan `base`, by id.
    fn runs_of(&self, base: &Hash) -> Result<Vec<String>, HostError> {
        let mut out = Vec::new();
        for info in session::list(self.dir())? {
            let Ok(run) = self.find(&info.id) else {
                continue;
            };
            if started_under(&run).is_some_and(|h| h == *base) {
                out.push(info.id);
            }
        }
        Ok(out)
    }

    /// One run's line of a check report.
    fn check_one(&self, plan: &CompiledPlan, p: &Proposal, id: &str) -> Value {
        let cannot = |why: String| json!({"run": id, "result": "cannot_check", "why": why});
        let run = match self.find(id) {
            Ok(r) => r,
            Err(e) => return cannot(e.to_string()),
        };
        let registry = match self.registry(
            &run,
            &Given::default(),
            false,
            McpMode::Recorded(&run.dir),
            ToolChange::Refuse,
        ) {
            Ok((r, _)) => r,
            Err(e) => return cannot(e.to_string()),
        };
        let base = started_under(&run).is_some_and(|h| h == p.event.base);
        let checked =
            oracle_runtime::fork::check_upgrade(self.dir(), &run, plan.clone(), None, &registry);
        match checked {
            Ok(()) => json!({"run": run.id, "result": "unchanged", "base": base}),
            Err(SessionError::UpgradeRefused { divergence: d, .. }) => json!({
                "run": run.id,
                "result": "diverges",
                "base": base,
                "seq": d.seq,
                "kind": d.a.kind,
                "step": d.a.payload.get("step"),
                "derived_kind": d.b.kind,
                "fields": d.fields.iter().map(|f| f.path.clone()).collect::<Vec<_>>(),
                "class": d.class.name(),
            }),
            Err(e) => cannot(e.to_string()),
        }
    }
}

/// The program hash `run` started under.
fn started_under(run: &session::RunDir) -> Option<Hash> {
    let first = oracle_runtime::index::IndexedLog::open(&run.paths.log)
        .and_then(|mut l| l.read(0))
        .ok()?;
    match first.typed() {
        Ok(Payload::RunStarted(s)) => Some(s.program_hash),
        _ => None,
    }
}

impl Home {
    /// Signs and records the approval of proposal `id` (`oracle evolve approve`): `key` signs
    /// the proposal's hash, its base's hash and the BLAKE3 hash of the report at `report`
    /// (which must be a check of this proposal). The approved plan is kept as
    /// `<home>/evolution/plans/<plan hash>.plan`, a plan version whose lineage the ledger holds.
    pub fn evolve_approve(
        &self,
        id: &str,
        key: SecretKey,
        report: &Path,
        by: Option<String>,
    ) -> Result<Entry, HostError> {
        let a = self.evolve_sign(id, &key, report, by)?;
        self.append_approval(&self.proposal(id)?, a)
    }

    /// Signs the approval of proposal `id` as [`Home::evolve_approve`] does, without
    /// appending it (`oracle evolve approve --out`): the signed file is uploaded to a server
    /// (`POST /api/v1/proposals/{id}/approval`), so the key never reaches it.
    pub fn evolve_sign(
        &self,
        id: &str,
        key: &SecretKey,
        report: &Path,
        by: Option<String>,
    ) -> Result<SignedApproval, HostError> {
        let p = self.proposal(id)?;
        let report = check_report(report, &p)?;
        // Checked again under the ledger's lock when the approval is appended; here so that
        // nothing is signed that would be refused.
        let entries = ledger::read(self.dir())?;
        may_approve(&entries, self.require_approval, &key.public_key().to_hex())?;
        check_recorded(&entries, &p, &report)?;
        let message = ledger::approval_message(&p.hash, &p.event.base, &report);
        Ok(SignedApproval {
            format: APPROVAL_FORMAT,
            proposal: p.hash,
            base: p.event.base,
            plan_hash: p.event.plan_hash,
            report,
            public_key: key.public_key().to_hex(),
            signature: key.sign(&message).to_hex(),
            by,
        })
    }

    /// Appends an approval signed elsewhere ([`Home::evolve_sign`]) after checking it names
    /// proposal `id` exactly (hash, base, plan) and that its signature verifies; then, under
    /// the ledger's lock, that its key is one the policy names and that its report is one a
    /// check of that proposal recorded in this home's ledger. Refused, nothing written, on any
    /// difference.
    pub fn evolve_approve_signed(
        &self,
        id: &str,
        mut a: SignedApproval,
    ) -> Result<Entry, HostError> {
        let p = self.proposal(id)?;
        let bad = |why: String| HostError::from(EvolveError::BadApproval { why });
        if a.format != APPROVAL_FORMAT {
            return Err(bad(format!(
                "format {} (this build reads {APPROVAL_FORMAT})",
                a.format
            )));
        }
        let want = [
            ("proposal", a.proposal, p.hash),
            ("base", a.base, p.event.base),
            ("plan_hash", a.plan_hash, p.event.plan_hash),
        ];
        for (field, given, have) in want {
            if given != have {
                return Err(bad(format!("its `{field}` is not proposal {}'s", p.id)));
            }
        }
        // Checked here too (the ledger checks it again): nothing is kept for a bad one.
        let key =
            PublicKey::from_hex(&a.public_key).map_err(|e| bad(format!("public_key: {e}")))?;
        let sig = Signature::from_hex(&a.signature).map_err(|e| bad(format!("signature: {e}")))?;
        key.verify(
            &ledger::approval_message(&a.proposal, &a.base, &a.report),
            &sig,
        )
        .map_err(|_| bad("the signature does not verify with its public key".into()))?;
        // One spelling of the key, the one a policy names approvers by.
        a.public_key = key.to_hex();
        self.append_approval(&p, a)
    }

    fn reports_dir(&self) -> PathBuf {
        self.dir().join(ledger::DIR).join(REPORTS_DIR)
    }

    /// Appends the signed approval `a` of `p` and keeps the approved plan as
    /// `<home>/evolution/plans/<plan hash>.plan`. Under the ledger's lock: `p` is undecided,
    /// `a`'s key is an approver the policy names, and its report a recorded check of `p`. The
    /// ledger checks the signature.
    fn append_approval(&self, p: &Proposal, a: SignedApproval) -> Result<Entry, HostError> {
        let kept = self
            .dir()
            .join(ledger::DIR)
            .join(PLANS_DIR)
            .join(format!("{}.plan", p.event.plan_hash.to_hex()));
        let draft = Draft {
            decision: Decision::Approved,
            proposal: Some(p.hash),
            base: Some(p.event.base),
            plan_hash: Some(p.event.plan_hash),
            report: Some(a.report),
            require_approval: None,
            approvers: None,
            reason: None,
            by: a.by,
            key: None,
            signed: Some((a.public_key.clone(), a.signature)),
        };
        ledger::append(self.dir(), draft, |present| {
            undecided(present, p, self.require_approval)?;
            may_approve(present, self.require_approval, &a.public_key)?;
            check_recorded(present, p, &a.report)?;
            write_file(&kept, p.event.plan.as_bytes())
        })
    }

    /// Records the rejection of proposal `id` (`oracle evolve reject`), with why.
    pub fn evolve_reject(
        &self,
        id: &str,
        reason: String,
        by: Option<String>,
    ) -> Result<Entry, HostError> {
        let p = self.proposal(id)?;
        check_reason(&reason)?;
        let draft = Draft {
            decision: Decision::Rejected,
            proposal: Some(p.hash),
            base: Some(p.event.base),
            plan_hash: Some(p.event.plan_hash),
            report: None,
            require_approval: None,
            approvers: None,
            reason: Some(reason),
            by,
            key: None,
            signed: None,
        };
        ledger::append(self.dir(), draft, |present| {
            undecided(present, &p, self.require_approval)
        })
    }

    /// Checks the whole ledger (`oracle evolve verify`): its entries, or the first that is not
    /// what was appended.
    pub fn evolve_verify(&self) -> Result<Vec<Entry>, HostError> {
        Ok(ledger::read(self.dir())?)
    }

    /// The approvals that led to plan `plan_hash`, newest first: its approval, then its
    /// base's, and so on while the base was itself an approved proposal.
    pub fn lineage(&self, plan_hash: &Hash) -> Result<Vec<Entry>, HostError> {
        let entries = ledger::read(self.dir())?;
        let mut out: Vec<Entry> = Vec::new();
        let mut at = *plan_hash;
        // Each step moves to an older approval; more steps than entries would be a cycle.
        while out.len() < entries.len() {
            let Some(e) = entries
                .iter()
                .find(|e| e.decision == Decision::Approved && e.plan_hash == Some(at))
            else {
                break;
            };
            out.push(e.clone());
            match e.base {
                Some(b) => at = b,
                None => break,
            }
        }
        Ok(out)
    }
}

/// Whether a check of proposal `proposal` recorded report `report` in `entries`.
fn recorded(entries: &[Entry], proposal: &Hash, report: &Hash) -> bool {
    entries.iter().any(|e| {
        e.decision == Decision::Checked
            && e.proposal.as_ref() == Some(proposal)
            && e.report.as_ref() == Some(report)
    })
}

/// Refuses a report of `p` that no check recorded (an edited copy, or one from elsewhere).
fn check_recorded(entries: &[Entry], p: &Proposal, report: &Hash) -> Result<(), HostError> {
    if recorded(entries, &p.hash, report) {
        return Ok(());
    }
    Err(EvolveError::ReportNotRecorded {
        id: p.id.clone(),
        hash: report.short(),
    }
    .into())
}

/// The policy `entries` end with: whether it requires approval, and the approvers it names
/// (none without a policy entry, or in one written before approvers were named).
fn policy_of(entries: &[Entry]) -> (bool, Vec<String>) {
    match entries
        .iter()
        .rev()
        .find(|e| e.decision == Decision::Policy)
    {
        Some(e) => (
            e.require_approval.unwrap_or(false),
            e.approvers.clone().unwrap_or_default(),
        ),
        None => (false, Vec::new()),
    }
}

/// `key` (hex) in the one spelling approvers are named by, if it is a key.
fn key_hex(key: &str) -> Option<String> {
    PublicKey::from_hex(key).ok().map(|k| k.to_hex())
}

/// Refuses an approval by `key` (hex) unless the policy of `entries` names it. A home whose
/// policy names no approver takes any key's approval only while approval is not required
/// (`home_requires`: the config file requires it): such an approval is a record, and counts
/// for [`Home::check_policy`] only once its key is named.
fn may_approve(entries: &[Entry], home_requires: bool, key: &str) -> Result<(), HostError> {
    let (requires, approvers) = policy_of(entries);
    let named = approvers.len() as u64;
    let listed = key_hex(key).is_some_and(|k| approvers.contains(&k));
    if listed || (named == 0 && !(requires || home_requires)) {
        return Ok(());
    }
    Err(EvolveError::NotAnApprover {
        key: key.to_owned(),
        named,
    }
    .into())
}

/// Refuses a second decision on `p`.
fn undecided(present: &[Entry], p: &Proposal, home_requires: bool) -> Result<(), HostError> {
    match decision_of(present, &p.hash, home_requires) {
        Some(e) => Err(EvolveError::Decided {
            id: p.id.clone(),
            decision: e.decision.as_str(),
            entry: e.entry,
        }
        .into()),
        None => Ok(()),
    }
}

fn check_reason(reason: &str) -> Result<(), HostError> {
    if reason.trim().is_empty() || reason.len() > ledger::REASON_BYTES_MAX {
        return Err(EvolveError::Usage {
            why: format!(
                "--reason: say why, in 1 to {} bytes",
                ledger::REASON_BYTES_MAX
            ),
        }
        .into());
    }
    Ok(())
}

/// The BLAKE3 hash of the report at `path`, after checking it is a report of `p`.
fn check_report(path: &Path, p: &Proposal) -> Result<Hash, HostError> {
    let bad = |why: String| EvolveError::BadReport {
        path: path.to_path_buf(),
        why,
    };
    let len = std::fs::metadata(path).map_err(io(path))?.len();
    if len > REPORT_BYTES_MAX {
        return Err(bad(format!("larger than {REPORT_BYTES_MAX} bytes")).into());
    }
    let bytes = std::fs::read(path).map_err(io(path))?;
    let v: Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not a check report: {e}")))?;
    let want = [
        ("proposal", p.hash),
        ("base", p.event.base),
        ("plan_hash", p.event.plan_hash),
    ];
    for (field, hash) in want {
        if v.get(field).and_then(Value::as_str) != Some(hash.to_hex().as_str()) {
            return Err(bad(format!(
                "its `{field}` is not proposal {}'s (a report of another proposal?)",
                p.id
            ))
            .into());
        }
    }
    Ok(Hash(*blake3::hash(&bytes).as_bytes()))
}

impl Home {
    /// Whether the home requires approval: its setting ([`Home::with_require_approval`]) or
    /// the ledger's latest policy entry.
    pub fn requires_approval(&self) -> Result<bool, HostError> {
        if self.require_approval {
            return Ok(true);
        }
        Ok(policy_of(&ledger::read(self.dir())?).0)
    }

    /// The approvers the ledger's policy names, hex, sorted.
    pub fn approvers(&self) -> Result<Vec<String>, HostError> {
        Ok(policy_of(&ledger::read(self.dir())?).1)
    }

    /// Sets the ledger's policy (`oracle evolve policy --require-approval on|off --approver
    /// KEY.pub`): one entry holding the whole policy. What is not given is kept from the
    /// policy before it (`require`: off without one; `approvers`: the list, replaced whole
    /// when given, `Some(vec![])` naming none).
    pub fn set_policy(
        &self,
        require: Option<bool>,
        approvers: Option<Vec<PublicKey>>,
        reason: Option<String>,
        by: Option<String>,
    ) -> Result<Entry, HostError> {
        if let Some(r) = &reason {
            check_reason(r)?;
        }
        let (was_required, were) = policy_of(&ledger::read(self.dir())?);
        let mut named: Vec<String> = match approvers {
            Some(keys) => keys.iter().map(PublicKey::to_hex).collect(),
            None => were,
        };
        named.sort();
        named.dedup();
        let draft = Draft {
            decision: Decision::Policy,
            proposal: None,
            base: None,
            plan_hash: None,
            report: None,
            require_approval: Some(require.unwrap_or(was_required)),
            approvers: Some(named),
            reason,
            by,
            key: None,
            signed: None,
        };
        ledger::append(self.dir(), draft, |_| Ok(()))
    }

    /// Refuses plan `plan_hash` when the home requires approval and it is a proposal's plan
    /// that no ledger entry approves. A plan no run proposed is not affected.
    pub fn check_policy(&self, plan_hash: &Hash) -> Result<(), HostError> {
        if !self.requires_approval()? {
            return Ok(());
        }
        let entries = ledger::read(self.dir())?;
        let (_, approvers) = policy_of(&entries);
        // Only an approval by a key the policy names now counts: naming approvers after
        // approvals were made, or removing one, decides which of them still count.
        let approved = |h: &Hash| {
            entries.iter().any(|e| {
                e.decision == Decision::Approved
                    && e.plan_hash.as_ref() == Some(h)
                    && e.public_key
                        .as_deref()
                        .and_then(key_hex)
                        .is_some_and(|k| approvers.contains(&k))
            })
        };
        if approved(plan_hash) {
            return Ok(());
        }
        match self
            .proposals()?
            .into_iter()
            .find(|p| p.event.plan_hash == *plan_hash)
        {
            Some(p) => Err(EvolveError::NotApproved {
                id: p.id,
                plan: plan_hash.short(),
            }
            .into()),
            None => Ok(()),
        }
    }

    /// [`Home::check_policy`] for the plan file at `path`, compiled against `registry`;
    /// nothing is compiled when the home does not require approval.
    pub(crate) fn check_policy_of(
        &self,
        path: &Path,
        registry: &oracle_runtime::tool::Registry,
    ) -> Result<(), HostError> {
        if !self.requires_approval()? {
            return Ok(());
        }
        let (plan, _) = oracle_runtime::fork::new_plan(path, registry)?;
        self.check_policy(&plan.hash)
    }
}

/// A check report of a proposal kept in the home, summarized.
#[derive(Clone, Debug)]
pub struct ReportSummary {
    pub path: PathBuf,
    /// BLAKE3 of the file's bytes: what an approval signs.
    pub hash: Hash,
    pub unchanged: u64,
    pub diverges: u64,
    pub cannot_check: u64,
}

impl ReportSummary {
    pub fn to_json(&self) -> Value {
        json!({
            "hash": self.hash,
            "file": self.path.file_name().map(|n| n.to_string_lossy().into_owned()),
            "unchanged": self.unchanged,
            "diverges": self.diverges,
            "cannot_check": self.cannot_check,
        })
    }
}

impl Home {
    /// The check reports of `p` kept under `<home>/evolution/reports` (those `evolve check`
    /// wrote there), by file name; a file that is not a report of `p`, or that no check
    /// recorded in the ledger (an edited one), is left out: what is listed can be signed.
    pub fn proposal_reports(&self, p: &Proposal) -> Vec<ReportSummary> {
        let Ok(dir) = std::fs::read_dir(self.reports_dir()) else {
            return Vec::new();
        };
        let Ok(entries) = ledger::read(self.dir()) else {
            return Vec::new();
        };
        let prefix = format!("{}-", p.id);
        let mut names: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| {
                f.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".json"))
            })
            .collect();
        names.sort();
        names
            .into_iter()
            .filter_map(|path| {
                let hash = check_report(&path, p)
                    .ok()
                    .filter(|h| recorded(&entries, &p.hash, h))?;
                let v: Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
                let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
                Some(ReportSummary {
                    hash,
                    unchanged: n("unchanged"),
                    diverges: n("diverges"),
                    cannot_check: n("cannot_check"),
                    path,
                })
            })
            .collect()
    }
}

/// A proposal as `oracle evolve list --json` and `GET /api/v1/proposals` give it.
pub fn proposal_json(p: &Proposal, status: &Status) -> Value {
    let recorded: Value = p
        .seen
        .iter()
        .map(|s| json!({"run": s.run, "seq": s.seq, "step": s.step, "model_call": s.model_call}))
        .collect();
    json!({
        "id": p.id,
        "proposal": p.hash,
        "program": p.event.program,
        "base": p.event.base,
        "plan_hash": p.event.plan_hash,
        "reason": p.event.reason,
        "recorded": recorded,
        "status": status.as_str(),
    })
}

/// A ledger entry as JSON (its own serde form).
pub fn entry_json(e: &Entry) -> Value {
    serde_json::to_value(e).unwrap_or(Value::Null)
}

impl Home {
    /// Every proposal with its status, as `oracle evolve list --json` prints them.
    pub fn proposals_json(&self) -> Result<Vec<Value>, HostError> {
        let entries = ledger::read(self.dir())?;
        Ok(self
            .proposals()?
            .iter()
            .map(|p| {
                let status = decision_of(&entries, &p.hash, self.require_approval)
                    .map_or(Status::Pending, |e| Status::Decided(Box::new(e)));
                proposal_json(p, &status)
            })
            .collect())
    }

    /// One proposal in full (`GET /api/v1/proposals/{id}`): as listed, plus its plan text, its
    /// diff against the base, its decision (the ledger entry), its lineage and the check
    /// reports kept in the home.
    pub fn proposal_detail(&self, id: &str) -> Result<Value, HostError> {
        let p = self.proposal(id)?;
        let status = self.proposal_status(&p)?;
        let mut v = proposal_json(&p, &status);
        v["plan"] = json!(p.event.plan);
        v["diff"] = json!(self.proposal_diff(&p));
        v["decision"] = match &status {
            Status::Pending => Value::Null,
            Status::Decided(e) => entry_json(e),
        };
        v["lineage"] = self
            .lineage(&p.event.plan_hash)?
            .iter()
            .map(entry_json)
            .collect();
        v["reports"] = self
            .proposal_reports(&p)
            .iter()
            .map(ReportSummary::to_json)
            .collect();
        Ok(v)
    }
}
