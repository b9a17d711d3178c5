//! The store's rate windows (issue 56): one row per rate-limited model or tool (`key`, as the
//! host names it: `model fast`), holding its window as the host writes it (`body`, JSON: the
//! host owns its meaning, `oracle_host::rate::Window`). Every worker of the store shares it: a
//! change reads the row under `FOR UPDATE`, takes the time from the database's clock after the
//! lock is held, and writes the row back, in one transaction, so workers on machines whose
//! clocks differ still count one window.

use crate::{Result, Store, db};

/// What a change makes of a window's text at the database's time (ms): the text to keep, and
/// what to return beside it.
pub type WindowChange<'a> = dyn FnMut(&str, u64) -> (String, Option<u64>) + 'a;

impl Store {
    /// Runs `change` on `key`'s window (`""` for a new row) at the database's time now in
    /// milliseconds, and keeps the text it returns, all in one transaction; returns what
    /// `change` returned beside it.
    pub fn change_rate_window(
        &self,
        key: &str,
        change: &mut WindowChange<'_>,
    ) -> Result<Option<u64>> {
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("changing a rate window"))?;
        tx.execute(
            "INSERT INTO rate_windows (key, body) VALUES ($1, '') ON CONFLICT (key) DO NOTHING",
            &[&key],
        )
        .map_err(db("changing a rate window"))?;
        let body: String = tx
            .query_one(
                "SELECT body FROM rate_windows WHERE key = $1 FOR UPDATE",
                &[&key],
            )
            .map_err(db("changing a rate window"))?
            .get(0);
        // The clock read once the row is ours: `now()` would be the transaction's start,
        // before a wait for the lock.
        let now: i64 = tx
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                &[],
            )
            .map_err(db("reading the database's clock"))?
            .get(0);
        let (body, out) = change(&body, u64::try_from(now).unwrap_or(0));
        tx.execute(
            "UPDATE rate_windows SET body = $2 WHERE key = $1",
            &[&key, &body],
        )
        .map_err(db("changing a rate window"))?;
        tx.commit().map_err(db("changing a rate window"))?;
        Ok(out)
    }
}
