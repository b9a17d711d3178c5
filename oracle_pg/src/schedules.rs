//! The store's schedules (schema version 7): one row per schedule, its definition as the host
//! writes it (`spec`, JSON: the host owns its meaning) beside where firing got to (`tick_ms`,
//! `last_run`), which only firers write, so a pause never races a firer's update. Exactly once
//! per tick is not this table's doing: each tick's run is submitted under the tick's
//! idempotency key ([`Store::submit_keyed`]); the cursor only saves work.

use crate::{Result, Store, db};

/// A schedule's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleRow {
    pub name: String,
    pub spec: String,
    pub tick_ms: Option<i64>,
    pub last_run: Option<String>,
}

impl Store {
    /// Adds a schedule: `false` (nothing written) when the name is taken.
    pub fn schedule_insert(&self, name: &str, spec: &str) -> Result<bool> {
        let n = self
            .client()
            .execute(
                "INSERT INTO schedules (name, spec) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                &[&name, &spec],
            )
            .map_err(db("adding a schedule"))?;
        Ok(n == 1)
    }

    /// Replaces a schedule's definition (pause, resume): `false` when there is none.
    pub fn schedule_update(&self, name: &str, spec: &str) -> Result<bool> {
        let n = self
            .client()
            .execute(
                "UPDATE schedules SET spec = $2 WHERE name = $1",
                &[&name, &spec],
            )
            .map_err(db("changing a schedule"))?;
        Ok(n == 1)
    }

    /// Removes a schedule: `false` when there is none. Its runs stay.
    pub fn schedule_delete(&self, name: &str) -> Result<bool> {
        let n = self
            .client()
            .execute("DELETE FROM schedules WHERE name = $1", &[&name])
            .map_err(db("removing a schedule"))?;
        Ok(n == 1)
    }

    /// Every schedule, by name.
    pub fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        let rows = self
            .client()
            .query(
                "SELECT name, spec, tick_ms, last_run FROM schedules ORDER BY name",
                &[],
            )
            .map_err(db("reading schedules"))?;
        Ok(rows
            .iter()
            .map(|r| ScheduleRow {
                name: r.get(0),
                spec: r.get(1),
                tick_ms: r.get(2),
                last_run: r.get(3),
            })
            .collect())
    }

    /// Records that firing of `name` got to `tick_ms` (never moving it back: two firers may
    /// finish out of order), with the run the tick started, if any.
    pub fn schedule_advance(&self, name: &str, tick_ms: i64, run: Option<&str>) -> Result<()> {
        self.client()
            .execute(
                "UPDATE schedules SET tick_ms = $2, last_run = COALESCE($3, last_run)
                 WHERE name = $1 AND (tick_ms IS NULL OR tick_ms < $2)",
                &[&name, &tick_ms, &run],
            )
            .map_err(db("advancing a schedule"))?;
        Ok(())
    }
}

impl Store {
    /// Suspended runs whose timer is due at `now_ms` and that have no signal pending, at most
    /// `limit`, earliest first: what a worker's timer wheel wakes.
    pub fn due_timers(&self, now_ms: i64, limit: i64) -> Result<Vec<String>> {
        let rows = self
            .client()
            .query(
                "SELECT id FROM runs
                 WHERE wake_at_ms IS NOT NULL AND wake_at_ms <= $1 AND state = 'suspended'
                   AND NOT EXISTS (SELECT 1 FROM signals s WHERE s.run = runs.id AND s.outcome IS NULL)
                 ORDER BY wake_at_ms LIMIT $2",
                &[&now_ms, &limit],
            )
            .map_err(db("listing due timers"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Runs at rest (suspended or finished) whose earliest real-time adjudication expiry is
    /// due at `now_ms` and that have no signal pending, at most `limit`, earliest first: what
    /// a worker's expiry wheel sends a sweep.
    pub fn due_expiries(&self, now_ms: i64, limit: i64) -> Result<Vec<String>> {
        let rows = self
            .client()
            .query(
                "SELECT id FROM runs
                 WHERE expire_at_ms IS NOT NULL AND expire_at_ms <= $1
                   AND state IN ('suspended', 'completed', 'failed', 'cancelled')
                   AND NOT EXISTS (SELECT 1 FROM signals s WHERE s.run = runs.id AND s.outcome IS NULL)
                 ORDER BY expire_at_ms LIMIT $2",
                &[&now_ms, &limit],
            )
            .map_err(db("listing due expiries"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Queues `body` (a wake) for `run` unless a signal is pending for it already, under an
    /// advisory lock on the run, so workers racing on one due timer queue one wake. Returns
    /// whether it queued.
    pub fn send_once(&self, run: &str, kind: &str, body: &serde_json::Value) -> Result<bool> {
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("queueing a wake"))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('wake:' || $1, 0))",
            &[&run],
        )
        .map_err(db("locking a run's wake"))?;
        let n = tx
            .execute(
                "INSERT INTO signals (run, kind, body)
                 SELECT $1, $2, $3 WHERE NOT EXISTS
                   (SELECT 1 FROM signals s WHERE s.run = $1 AND s.outcome IS NULL)",
                &[&run, &kind, &body.to_string()],
            )
            .map_err(db("queueing a wake"))?;
        if n == 1 {
            tx.execute(&format!("NOTIFY {}", crate::CHANNEL), &[])
                .map_err(db("waking workers"))?;
        }
        tx.commit().map_err(db("queueing a wake"))?;
        Ok(n == 1)
    }
}
