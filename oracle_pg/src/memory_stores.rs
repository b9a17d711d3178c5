//! Named belief stores kept in the database (schema version 8): the PostgreSQL
//! [`StoreBackend`], so a run a worker drives reads and publishes to the store every worker
//! sees, and `oracle memory|adjudications|adjudicate --memory NAME --store URL` work over it.
//!
//! A store is a row of `memory_stores` and its records rows of `memory_records`, each the
//! record's log line with its newline: the bytes of a file home's `store.jsonl`, so an export
//! is the same whichever kept it. Every write runs in one transaction that first locks the
//! store's row (`FOR UPDATE`), reads and checks every record, decides, and inserts what was
//! decided: two writers at once are ordered by the row lock, and the second decides against
//! the first's records (a conflicting claim is contested, never both committed).

use oracle_runtime::shared::{
    self as shared, Ledger, LedgerRecord, SharedError, Store, StoreBackend, StoreRecord, check_name,
};
use postgres::Transaction;

use crate::{Store as Db, detail};

fn backend(name: &str) -> impl Fn(postgres::Error) -> SharedError + '_ {
    move |e| SharedError::Backend {
        name: name.to_owned(),
        why: detail(&e),
    }
}

/// The records of store `name` as one consistent read: `None` when there is no such store.
fn records(tx: &mut Transaction<'_>, name: &str) -> shared::Result<Option<Vec<u8>>> {
    let rows = tx
        .query(
            "SELECT r.record FROM memory_stores s LEFT JOIN memory_records r ON r.store = s.name \
             WHERE s.name = $1 ORDER BY r.seq",
            &[&name],
        )
        .map_err(backend(name))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    for row in rows {
        if let Some(line) = row.get::<_, Option<Vec<u8>>>(0) {
            bytes.extend_from_slice(&line);
        }
    }
    Ok(Some(bytes))
}

fn parsed(name: &str, bytes: &[u8]) -> shared::Result<Store> {
    let text = std::str::from_utf8(bytes).map_err(|e| SharedError::Damaged {
        name: name.into(),
        why: e.to_string(),
    })?;
    shared::parse(name, text)
}

fn insert(tx: &mut Transaction<'_>, name: &str, records: &[StoreRecord]) -> shared::Result<()> {
    for r in records {
        let mut line = shared::line_of(r);
        line.push('\n');
        // Invariant: a store's seq is its record count, far below i64::MAX.
        let seq = i64::try_from(r.seq).map_err(|_| SharedError::Damaged {
            name: name.into(),
            why: format!("record seq {} does not fit the store", r.seq),
        })?;
        tx.execute(
            "INSERT INTO memory_records (store, seq, hash, record) VALUES ($1, $2, $3, $4)",
            &[&name, &seq, &r.hash, &line.as_bytes()],
        )
        .map_err(backend(name))?;
    }
    Ok(())
}

impl StoreBackend for Db {
    fn list(&self) -> shared::Result<Vec<String>> {
        let rows = self
            .client()
            .query("SELECT name FROM memory_stores", &[])
            .map_err(backend("*"))?;
        // Sorted here, by bytes: the database's collation may order punctuation otherwise.
        let mut names: Vec<String> = rows.into_iter().map(|r| r.get(0)).collect();
        names.sort();
        Ok(names)
    }

    fn bytes(&self, name: &str) -> shared::Result<Vec<u8>> {
        check_name(name).map_err(SharedError::BadName)?;
        let mut c = self.client();
        let mut tx = c.transaction().map_err(backend(name))?;
        let bytes = records(&mut tx, name)?;
        tx.commit().map_err(backend(name))?;
        bytes.ok_or_else(|| SharedError::Unknown { name: name.into() })
    }

    fn write_records(
        &self,
        name: &str,
        create: bool,
        decide: &mut dyn FnMut(&Store) -> shared::Result<Vec<StoreRecord>>,
    ) -> shared::Result<Store> {
        check_name(name).map_err(SharedError::BadName)?;
        let mut c = self.client();
        let mut tx = c.transaction().map_err(backend(name))?;
        if create {
            tx.execute(
                "INSERT INTO memory_stores (name) VALUES ($1) ON CONFLICT (name) DO NOTHING",
                &[&name],
            )
            .map_err(backend(name))?;
        }
        // The writer lock: held until this transaction ends.
        let held = tx
            .query_opt(
                "SELECT name FROM memory_stores WHERE name = $1 FOR UPDATE",
                &[&name],
            )
            .map_err(backend(name))?;
        if held.is_none() {
            return Err(SharedError::Unknown { name: name.into() });
        }
        let bytes = records(&mut tx, name)?.unwrap_or_default();
        let mut store = parsed(name, &bytes)?;
        let new = decide(&store)?;
        insert(&mut tx, name, &new)?;
        tx.commit().map_err(backend(name))?;
        shared::apply_all(name, &mut store, new)?;
        Ok(store)
    }

    fn forget(&self, _name: &str, _note: &str) -> shared::Result<LedgerRecord> {
        Err(SharedError::Unsupported(
            "`oracle memory forget` works on a file home's stores only, not yet on a database store"
                .into(),
        ))
    }

    fn ledger(&self) -> shared::Result<Ledger> {
        Err(SharedError::Unsupported(
            "the store ledger is a file home's (`<home>/memory/ledger.jsonl`); a database store has none yet"
                .into(),
        ))
    }
}
