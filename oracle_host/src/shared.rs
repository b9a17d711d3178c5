//! Named belief stores shared by runs (`oracle memory --memory NAME`, `adjudicate --memory`,
//! the API's store inbox): the host's calls over `oracle_runtime::shared`, one error taxonomy.

use oracle_memory::adjudicate::{Effects, Reinstatement};
use oracle_memory::shared::{self as pure, Store};
use oracle_memory::{Claim, Provenance, Verdict};
use oracle_runtime::session;
use oracle_runtime::shared as files;
use serde_json::{Value, json};

use crate::{Home, HostError};

/// A run suspended on a line of a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreWaiter {
    pub run: String,
    pub subject: String,
    pub predicate: String,
}

/// A waiting run a verdict woke, with its status after the resume or why it could not be
/// resumed now.
pub type Woken = (StoreWaiter, Result<String, HostError>);

/// A verdict on a store's request, as submitted.
#[derive(Clone, Debug)]
pub struct StoreVerdict {
    pub handle: String,
    pub verdict: Verdict,
    pub evidence: Provenance,
    pub note: String,
    /// Who gives it (a token's name under `oracle serve`), recorded.
    pub by: Option<String>,
}

impl Home {
    /// The names of the home's stores, sorted.
    pub fn stores(&self) -> Result<Vec<String>, HostError> {
        Ok(self.shared_stores().list()?)
    }

    /// Store `name` as it stands: on a file home from its checked checkpoint and the records
    /// after it, each checked.
    pub fn store(&self, name: &str) -> Result<Store, HostError> {
        Ok(files::load(self.shared_stores().as_ref(), name)?)
    }

    /// Store `name` as it stands for one line (`oracle memory --memory NAME --subject S
    /// --predicate P`): on a file home, that line's section of its checkpoint and the records
    /// after it; what it answers about that line is what [`Host::store`]'s answers.
    pub fn store_line(
        &self,
        name: &str,
        subject: &str,
        predicate: &str,
    ) -> Result<Store, HostError> {
        Ok(self.shared_stores().load_line(name, subject, predicate)?)
    }

    /// Store `name` with every record checked from its start or compacted base, never from a
    /// checkpoint, and the segments compaction took out (`oracle verify --memory`).
    pub fn store_verify(&self, name: &str) -> Result<(Store, Vec<files::Segment>), HostError> {
        Ok(self.shared_stores().verify(name)?)
    }

    /// Seals store `name` at its head after checking every record, when it has no seal
    /// (`oracle memory seal NAME`: a store written before seals existed); a sealed store is
    /// checked and left as it is. Its head, and whether a seal was written.
    pub fn store_adopt(
        &self,
        name: &str,
    ) -> Result<(oracle_memory::shared::StoreHead, bool), HostError> {
        Ok(self.shared_stores().adopt(name)?)
    }

    /// Folds every record of store `name` but the newest `keep` into its base
    /// (`oracle memory compact NAME --keep N`).
    pub fn store_compact(&self, name: &str, keep: u64) -> Result<files::Compacted, HostError> {
        Ok(self.shared_stores().compact(name, keep)?)
    }

    /// A verdict on one of the store's requests: one `adjudicated` record under the store's
    /// lock; a second verdict on the handle is refused as already resolved.
    pub fn store_adjudicate(
        &self,
        name: &str,
        v: &StoreVerdict,
    ) -> Result<(Store, Effects), HostError> {
        Ok(files::adjudicate(
            self.shared_stores().as_ref(),
            name,
            &v.handle,
            v.verdict,
            v.evidence,
            &v.note,
            v.by.clone(),
        )?)
    }

    /// A claim from outside any run, through the store's gate.
    pub fn store_claim(
        &self,
        name: &str,
        claim: Claim,
        note: &str,
    ) -> Result<(Store, Value), HostError> {
        Ok(files::claim(
            self.shared_stores().as_ref(),
            name,
            claim,
            note,
        )?)
    }

    /// Expired requests of the store become contested; how many.
    pub fn store_sweep(&self, name: &str) -> Result<(Store, u64), HostError> {
        Ok(files::sweep(self.shared_stores().as_ref(), name)?)
    }

    /// Makes a superseded or contested claim of the store live again.
    pub fn store_reinstate(
        &self,
        name: &str,
        claim: &str,
        evidence: Provenance,
        note: &str,
    ) -> Result<(Store, Reinstatement), HostError> {
        Ok(files::reinstate(
            self.shared_stores().as_ref(),
            name,
            claim,
            evidence,
            note,
        )?)
    }

    /// The store's export, checked: its log's bytes, after a line carrying its base if it was
    /// compacted (`oracle_runtime::shared::export`).
    pub fn store_export(&self, name: &str) -> Result<Vec<u8>, HostError> {
        Ok(files::export(self.shared_stores().as_ref(), name)?.1)
    }

    /// Deletes store `name` whole, recorded first in the home's ledger (`oracle memory
    /// forget`); runs that read it keep their recorded copies.
    pub fn store_forget(
        &self,
        name: &str,
        note: &str,
    ) -> Result<oracle_memory::shared::LedgerRecord, HostError> {
        Ok(self.shared_stores().forget(name, note)?)
    }

    /// The home's store ledger, every record checked.
    pub fn store_ledger(&self) -> Result<oracle_memory::shared::Ledger, HostError> {
        Ok(self.shared_stores().ledger()?)
    }

    /// The runs of this home suspended on a line of store `name`, with that line, found from
    /// what their logs record (`oracle_runtime::session::shared_wait`), never from words.
    pub fn store_waiters(&self, name: &str) -> Result<Vec<StoreWaiter>, HostError> {
        let mut out = Vec::new();
        for info in session::list(self.dir())? {
            if info.status != "suspended" {
                continue;
            }
            let dir = self.dir().join("runs").join(&info.id);
            if let Some((subject, predicate)) = session::shared_wait(&dir, name)? {
                out.push(StoreWaiter {
                    run: info.id,
                    subject,
                    predicate,
                });
            }
        }
        Ok(out)
    }

    /// Resumes every run of this home waiting on a line of store `name` (after a verdict on
    /// it): each asks the store again and goes on, or stays suspended writing nothing while its
    /// line is still unresolved. A run that cannot be resumed now keeps waiting for `oracle
    /// resume`; its error is returned beside it.
    pub fn wake_store_waiters(&self, name: &str) -> Result<Vec<Woken>, HostError> {
        let mut woken = Vec::new();
        for w in self.store_waiters(name)? {
            let r = self
                .resume(&w.run, crate::Resume::default())
                .map(|r| session::ending_word(&r.session.report.ending).to_owned());
            woken.push((w, r));
        }
        Ok(woken)
    }

    /// A new store from an exported log, checked whole first.
    pub fn store_import(&self, name: &str, text: &str) -> Result<Store, HostError> {
        Ok(files::import(self.shared_stores().as_ref(), name, text)?)
    }
}

/// Sends a resume signal to every run of the database `db` suspended on a line of store
/// `name` (after a verdict from the command line): each suspended run is written into
/// `scratch` and found as in a file home, from what its log records. The worker that next
/// holds it asks the store again. The runs and their signals' ids.
pub fn signal_store_waiters(
    db: &oracle_pg::Store,
    scratch: &std::path::Path,
    name: &str,
) -> Result<Vec<(StoreWaiter, i64)>, HostError> {
    let mut sent = Vec::new();
    for row in db.runs()?.into_iter().filter(|r| r.state == "suspended") {
        let dir = db.hydrate(&row.id, scratch)?;
        let Some((subject, predicate)) = session::shared_wait(&dir, name)? else {
            continue;
        };
        let signal = crate::signal::Signal::Resume {
            run: row.id.clone(),
            answer: None,
            given: crate::bind::Given::default(),
            drive: crate::signal::DriveSettings::default(),
            allow_tool_change: false,
        };
        let id = db.send(&row.id, signal.kind(), &signal.to_row())?;
        let waiter = StoreWaiter {
            run: row.id,
            subject,
            predicate,
        };
        sent.push((waiter, id));
    }
    Ok(sent)
}

/// One request of a store as listings and the API show it: the handle, the line, both claims
/// with the runs that published them, and where it stands.
pub fn request_json(store: &Store, r: &oracle_memory::memory::RequestState) -> Value {
    let (challenger_run, incumbent_run) = pure::runs_of(store, r);
    json!({
        "handle": r.request.handle,
        "subject": r.request.subject,
        "predicate": r.request.predicate,
        "status": r.status.name(),
        "criticality": r.request.criticality,
        "challenger": {"claim": r.request.challenger.to_hex(), "run": challenger_run},
        "incumbent": {"claim": r.incumbent().to_hex(), "run": incumbent_run},
        "reason": r.request.reason,
        "opened_at": r.origin.seq,
    })
}

/// Every request of the store in the order they were opened.
pub fn requests_json(store: &Store) -> Vec<Value> {
    let mut all: Vec<_> = store.memory.requests().collect();
    all.sort_by_key(|r| r.origin.seq);
    all.into_iter().map(|r| request_json(store, r)).collect()
}

/// Every line of the store with its belief now (or as of `as_of`), the store's head, and its
/// requests: what `oracle memory --memory NAME --json` prints. `subject`, `predicate`: only
/// the lines (and requests) of that subject and predicate, when given.
pub fn store_json(
    name: &str,
    store: &Store,
    as_of: Option<u64>,
    subject: Option<&str>,
    predicate: Option<&str>,
) -> Value {
    let wanted =
        |s: &str, p: &str| subject.is_none_or(|x| x == s) && predicate.is_none_or(|x| x == p);
    let mut lines: Vec<Value> = Vec::new();
    for (s, p) in store.memory.lines().filter(|(s, p)| wanted(s, p)) {
        let (s, p) = (s.clone(), p.clone());
        let q = oracle_memory::Query {
            subject: s.clone(),
            predicate: p.clone(),
            as_of,
            valid_at: as_of.or(Some(store.head.time())),
        };
        let b = oracle_memory::belief::query(&store.memory, &q, store.settings.confidence_min_pct);
        lines.push(json!({"subject": s, "predicate": p, "belief": b.to_value()}));
    }
    json!({
        "store": store.head.to_value(name),
        "lines": lines,
        "requests": requests_json(store)
            .into_iter()
            .filter(|r| wanted(
                r["subject"].as_str().unwrap_or(""),
                r["predicate"].as_str().unwrap_or("")
            ))
            .collect::<Vec<_>>(),
    })
}

/// The named stores of `home` (sorted), each with its log's size in bytes: what the server's
/// inbox polls for change. A home whose stores cannot be listed has none.
pub fn store_sizes(home: &std::path::Path) -> Vec<(String, u64)> {
    files::list(home)
        .unwrap_or_default()
        .into_iter()
        .map(|name| {
            let log = files::stores_dir(home).join(&name).join(files::STORE_LOG);
            let len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
            (name, len)
        })
        .collect()
}

/// The pending requests of store `name` ([`requests_json`]), each naming the store.
pub fn pending_requests(home: &std::path::Path, name: &str) -> Result<Vec<Value>, HostError> {
    let store = files::load(&files::FileStores::new(home), name)?;
    Ok(requests_json(&store)
        .into_iter()
        .filter(|r| r["status"] == "pending")
        .map(|mut r| {
            r["store"] = json!(name);
            r
        })
        .collect())
}
