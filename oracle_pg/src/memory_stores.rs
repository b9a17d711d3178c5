//! Named belief stores kept in the database (schema versions 8 and 10): the PostgreSQL
//! [`StoreBackend`], so a run a worker drives reads and publishes to the store every worker
//! sees, and `oracle memory|adjudications|adjudicate --memory NAME --store URL` work over it.
//!
//! A store is a row of `memory_stores` and its records rows of `memory_records`, each the
//! record's log line with its newline: the bytes of a file home's `store.jsonl`, so an export
//! is the same whichever kept it. Every write runs in one transaction that first locks the
//! store's row (`FOR UPDATE`), reads and checks every record, decides, and inserts what was
//! decided: two writers at once are ordered by the row lock, and the second decides against
//! the first's records (a conflicting claim is contested, never both committed).
//!
//! A compacted store (`oracle memory compact --keep N`) keeps its base in `memory_bases` (the
//! body a file home's `base.bin` seals, with a digest) and only its kept records in
//! `memory_records`; reads fold from the base. `oracle memory forget` deletes a store's rows in
//! the transaction that appends its record to `memory_ledger`, the home ledger's lines.

use oracle_runtime::shared::{
    self as shared, Base, Compacted, Ledger, LedgerRecord, Segment, SharedError, Store,
    StoreBackend, StoreRecord, check_name,
};
use oracle_runtime::store_checkpoint as checkpoint;
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

fn text<'b>(name: &str, bytes: &'b [u8]) -> shared::Result<&'b str> {
    std::str::from_utf8(bytes).map_err(|e| SharedError::Damaged {
        name: name.into(),
        why: e.to_string(),
    })
}

/// Store `name`'s base, if it was compacted: refused (an integrity error) when its row does
/// not match its digest or does not decode, since the records it folds are gone.
fn base(tx: &mut Transaction<'_>, name: &str) -> shared::Result<Option<Base>> {
    let row = tx
        .query_opt(
            "SELECT body, digest FROM memory_bases WHERE store = $1",
            &[&name],
        )
        .map_err(backend(name))?;
    row.map(|r| {
        let (body, digest): (Vec<u8>, String) = (r.get(0), r.get(1));
        checkpoint::decode_base(name, &body, &digest, true)
    })
    .transpose()
}

/// Store `name`'s base and log bytes as one consistent read: `None` when there is no store.
fn snapshot(
    tx: &mut Transaction<'_>,
    name: &str,
) -> shared::Result<Option<(Option<Base>, Vec<u8>)>> {
    let Some(bytes) = records(tx, name)? else {
        return Ok(None);
    };
    Ok(Some((base(tx, name)?, bytes)))
}

/// The store a snapshot holds, every record after its base checked, and its segments.
fn folded(name: &str, base: Option<Base>, bytes: &[u8]) -> shared::Result<(Store, Vec<Segment>)> {
    let text = text(name, bytes)?;
    match base {
        Some(b) => Ok((shared::parse_over(name, b.store, text)?, b.segments)),
        None => Ok((shared::parse(name, text)?, Vec::new())),
    }
}

/// Takes store `name`'s writer lock (its row, `FOR UPDATE`, held until `tx` ends); `create`:
/// make the store first if there is none.
fn lock(tx: &mut Transaction<'_>, name: &str, create: bool) -> shared::Result<()> {
    if create {
        tx.execute(
            "INSERT INTO memory_stores (name) VALUES ($1) ON CONFLICT (name) DO NOTHING",
            &[&name],
        )
        .map_err(backend(name))?;
    }
    let held = tx
        .query_opt(
            "SELECT name FROM memory_stores WHERE name = $1 FOR UPDATE",
            &[&name],
        )
        .map_err(backend(name))?;
    match held {
        Some(_) => Ok(()),
        None => Err(SharedError::Unknown { name: name.into() }),
    }
}

/// Store `name` read in its own transaction: its base and log bytes.
fn read(db: &Db, name: &str) -> shared::Result<(Option<Base>, Vec<u8>)> {
    check_name(name).map_err(SharedError::BadName)?;
    let mut c = db.client();
    let mut tx = c.transaction().map_err(backend(name))?;
    let got = snapshot(&mut tx, name)?;
    tx.commit().map_err(backend(name))?;
    got.ok_or_else(|| SharedError::Unknown { name: name.into() })
}

/// Keeps `base` as store `name`'s base (replacing any before it).
fn put_base(tx: &mut Transaction<'_>, name: &str, base: &Base) -> shared::Result<()> {
    let state = base.store.state();
    let records = seq_of(name, state.records)?;
    let (body, digest) = checkpoint::encode_base(name, state, base.segments.clone())?;
    tx.execute(
        "INSERT INTO memory_bases (store, records, digest, body) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (store) DO UPDATE SET records = $2, digest = $3, body = $4",
        &[&name, &records, &digest, &body],
    )
    .map_err(backend(name))?;
    Ok(())
}

/// A store's record count or seq as a column value.
fn seq_of(name: &str, n: u64) -> shared::Result<i64> {
    // Invariant: a store's seq is its record count, far below i64::MAX.
    i64::try_from(n).map_err(|_| SharedError::Damaged {
        name: name.into(),
        why: format!("record seq {n} does not fit the store"),
    })
}

fn insert(tx: &mut Transaction<'_>, name: &str, records: &[StoreRecord]) -> shared::Result<()> {
    for r in records {
        let mut line = shared::line_of(r);
        line.push('\n');
        let seq = seq_of(name, r.seq)?;
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
        Ok(read(self, name)?.1)
    }

    fn load(&self, name: &str) -> shared::Result<Store> {
        let (base, bytes) = read(self, name)?;
        Ok(folded(name, base, &bytes)?.0)
    }

    fn verify(&self, name: &str) -> shared::Result<(Store, Vec<Segment>)> {
        let (base, bytes) = read(self, name)?;
        folded(name, base, &bytes)
    }

    fn snapshot(&self, name: &str) -> shared::Result<(Option<Base>, Vec<u8>)> {
        read(self, name)
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
        lock(&mut tx, name, create)?;
        let (base, bytes) = snapshot(&mut tx, name)?.unwrap_or_default();
        let (mut store, _) = folded(name, base, &bytes)?;
        let new = decide(&store)?;
        insert(&mut tx, name, &new)?;
        tx.commit().map_err(backend(name))?;
        shared::apply_all(name, &mut store, new)?;
        Ok(store)
    }

    /// Under the store's row lock: the same [`shared::cut`] as a file home's, then the new
    /// base row and the taken records' rows deleted, in one transaction.
    fn compact(&self, name: &str, keep: u64) -> shared::Result<Compacted> {
        check_name(name).map_err(SharedError::BadName)?;
        let mut c = self.client();
        let mut tx = c.transaction().map_err(backend(name))?;
        lock(&mut tx, name, false)?;
        let (base, bytes) = snapshot(&mut tx, name)?.unwrap_or_default();
        let (start, segments) =
            base.map_or_else(|| (Store::new(), Vec::new()), |b| (b.store, b.segments));
        let cut = shared::cut(name, start, segments, text(name, &bytes)?, keep)?;
        if let Some((state, segments, _)) = cut.base {
            let to = seq_of(name, state.records)?;
            let store = Store::from_state(state).map_err(|source| SharedError::Record {
                name: name.into(),
                source,
            })?;
            put_base(&mut tx, name, &Base { store, segments })?;
            tx.execute(
                "DELETE FROM memory_records WHERE store = $1 AND seq < $2",
                &[&name, &to],
            )
            .map_err(backend(name))?;
        }
        tx.commit().map_err(backend(name))?;
        Ok(cut.compacted)
    }

    fn create_with_base(&self, name: &str, base: &Base) -> shared::Result<()> {
        check_name(name).map_err(SharedError::BadName)?;
        let mut c = self.client();
        let mut tx = c.transaction().map_err(backend(name))?;
        let made = tx
            .execute(
                "INSERT INTO memory_stores (name) VALUES ($1) ON CONFLICT (name) DO NOTHING",
                &[&name],
            )
            .map_err(backend(name))?;
        if made == 0 {
            return Err(shared::taken(name));
        }
        put_base(&mut tx, name, base)?;
        tx.commit().map_err(backend(name))
    }

    /// Under the store's row lock and the ledger's table lock: the `forgotten` record is
    /// appended and the store's rows deleted in one transaction, so either both happen or
    /// neither. A damaged store can be forgotten too, as on a file home.
    fn forget(&self, name: &str, note: &str) -> shared::Result<LedgerRecord> {
        check_name(name).map_err(SharedError::BadName)?;
        let mut c = self.client();
        let mut tx = c.transaction().map_err(backend(name))?;
        lock(&mut tx, name, false)?;
        let bytes = records(&mut tx, name)?.unwrap_or_default();
        let head = match base(&mut tx, name).and_then(|b| folded(name, b, &bytes)) {
            Ok((store, _)) => store.head,
            Err(_) => shared::damaged_head(&bytes),
        };
        let ledger_name = shared::LEDGER_LOG;
        tx.batch_execute("LOCK TABLE memory_ledger IN EXCLUSIVE MODE")
            .map_err(backend(ledger_name))?;
        let rec = ledger_in(&mut tx)?
            .forgotten(name, &head, note)
            .map_err(|source| SharedError::Record {
                name: ledger_name.into(),
                source,
            })?;
        let line = shared::ledger_line(&rec)?;
        tx.execute(
            "INSERT INTO memory_ledger (seq, hash, record) VALUES ($1, $2, $3)",
            &[&seq_of(ledger_name, rec.seq)?, &rec.hash, &line.as_bytes()],
        )
        .map_err(backend(ledger_name))?;
        for table in ["memory_records", "memory_bases"] {
            tx.execute(&format!("DELETE FROM {table} WHERE store = $1"), &[&name])
                .map_err(backend(name))?;
        }
        tx.execute("DELETE FROM memory_stores WHERE name = $1", &[&name])
            .map_err(backend(name))?;
        tx.commit().map_err(backend(name))?;
        Ok(rec)
    }

    fn ledger(&self) -> shared::Result<Ledger> {
        let mut c = self.client();
        let mut tx = c.transaction().map_err(backend(shared::LEDGER_LOG))?;
        let ledger = ledger_in(&mut tx)?;
        tx.commit().map_err(backend(shared::LEDGER_LOG))?;
        Ok(ledger)
    }
}

/// The store ledger as `tx` sees it, every record checked.
fn ledger_in(tx: &mut Transaction<'_>) -> shared::Result<Ledger> {
    let name = shared::LEDGER_LOG;
    let rows = tx
        .query("SELECT record FROM memory_ledger ORDER BY seq", &[])
        .map_err(backend(name))?;
    let mut bytes = Vec::new();
    for row in rows {
        bytes.extend_from_slice(&row.get::<_, Vec<u8>>(0));
    }
    shared::parse_ledger(text(name, &bytes)?)
}
