//! Named belief stores shared by runs (`oracle memory --memory NAME`, `adjudicate --memory`,
//! the API's store inbox): the host's calls over `oracle_runtime::shared`, one error taxonomy.

use oracle_memory::adjudicate::{Effects, Reinstatement};
use oracle_memory::shared::{self as pure, Store};
use oracle_memory::{Claim, Provenance, Verdict};
use oracle_runtime::shared as files;
use serde_json::{Value, json};

use crate::{Home, HostError};

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
        Ok(files::list(self.dir())?)
    }

    /// Store `name` as it stands, every record checked (`oracle verify --memory`).
    pub fn store(&self, name: &str) -> Result<Store, HostError> {
        Ok(files::load(self.dir(), name)?)
    }

    /// A verdict on one of the store's requests: one `adjudicated` record under the store's
    /// lock; a second verdict on the handle is refused as already resolved.
    pub fn store_adjudicate(
        &self,
        name: &str,
        v: &StoreVerdict,
    ) -> Result<(Store, Effects), HostError> {
        Ok(files::adjudicate(
            self.dir(),
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
        Ok(files::claim(self.dir(), name, claim, note)?)
    }

    /// Expired requests of the store become contested; how many.
    pub fn store_sweep(&self, name: &str) -> Result<(Store, u64), HostError> {
        Ok(files::sweep(self.dir(), name)?)
    }

    /// Makes a superseded or contested claim of the store live again.
    pub fn store_reinstate(
        &self,
        name: &str,
        claim: &str,
        evidence: Provenance,
        note: &str,
    ) -> Result<(Store, Reinstatement), HostError> {
        Ok(files::reinstate(self.dir(), name, claim, evidence, note)?)
    }

    /// The bytes of the store's log, checked.
    pub fn store_export(&self, name: &str) -> Result<Vec<u8>, HostError> {
        Ok(files::export(self.dir(), name)?.1)
    }

    /// Deletes store `name` whole, recorded first in the home's ledger (`oracle memory
    /// forget`); runs that read it keep their recorded copies.
    pub fn store_forget(
        &self,
        name: &str,
        note: &str,
    ) -> Result<oracle_memory::shared::LedgerRecord, HostError> {
        Ok(files::forget(self.dir(), name, note)?)
    }

    /// The home's store ledger, every record checked.
    pub fn store_ledger(&self) -> Result<oracle_memory::shared::Ledger, HostError> {
        Ok(files::ledger(self.dir())?)
    }

    /// A new store from an exported log, checked whole first.
    pub fn store_import(&self, name: &str, text: &str) -> Result<Store, HostError> {
        Ok(files::import(self.dir(), name, text)?)
    }
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
/// requests: what `oracle memory --memory NAME --json` prints.
pub fn store_json(name: &str, store: &Store, as_of: Option<u64>) -> Value {
    let mut lines: Vec<Value> = Vec::new();
    for (s, p) in store.memory.lines() {
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
        "requests": requests_json(store),
    })
}
