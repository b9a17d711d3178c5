//! The store's named queues (schema version 11): one row per queue, its definition (`spec`)
//! and changing part (`state`) as JSON the host writes and owns; a run's queue, priority and
//! partition in its row. What may start is not decided here: [`Store::claim_queued`] locks a
//! queue's row (`FOR UPDATE`), shows the host what waits and runs, and claims the run the
//! host's ordering rule picks, in one transaction, so the limits hold across every worker.
//! Wall time is the database's clock (`clock_timestamp()`), and never reaches an event.

use crate::{Claim, Programs, Result, Store, db};

/// A queue's row with its runs now: what the host's ordering rule decides from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSnapshot {
    pub name: String,
    pub spec: String,
    pub state: String,
    /// The database's clock, in milliseconds since the Unix epoch.
    pub now_ms: i64,
    /// Runs of the queue being driven: their partitions.
    pub running: Vec<String>,
    /// Runs of the queue not started, oldest first: id, number, priority, partition.
    pub waiting: Vec<(String, i64, i16, String)>,
}

/// The host's decision for one queue: the run to claim and the queue's new `state`.
pub type Pick = Option<(String, String)>;

/// A run's place in a queue as its submission asks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueAsk<'a> {
    pub queue: &'a str,
    pub priority: i16,
    pub partition: &'a str,
}

/// The most waiting runs of one queue a claim reads: the ordering rule sees the oldest this
/// many of each queue (a queue holding more is served oldest first beyond them).
pub const WAITING_READ_MAX: i64 = 100_000;

impl Store {
    /// Makes queue `name` with `spec`, or replaces its spec (its state and runs stay).
    pub fn queue_put(&self, name: &str, spec: &str) -> Result<()> {
        self.client()
            .execute(
                "INSERT INTO queues (name, spec) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET spec = excluded.spec",
                &[&name, &spec],
            )
            .map_err(db("setting a queue"))?;
        Ok(())
    }

    /// Every queue, by name: its spec, runs driven and runs waiting.
    pub fn queue_rows(&self) -> Result<Vec<(String, String, i64, i64)>> {
        let rows = self
            .client()
            .query(
                "SELECT q.name, q.spec,
                   (SELECT count(*) FROM runs r WHERE r.queue = q.name AND r.state = 'running'),
                   (SELECT count(*) FROM runs r WHERE r.queue = q.name AND r.state = 'submitted')
                 FROM queues q ORDER BY q.name",
                &[],
            )
            .map_err(db("reading queues"))?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect())
    }

    /// The spec of queue `name`, if there is one.
    pub fn queue_spec(&self, name: &str) -> Result<Option<String>> {
        let row = self
            .client()
            .query_opt("SELECT spec FROM queues WHERE name = $1", &[&name])
            .map_err(db("reading a queue"))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Every queue's snapshot as a claim would see it, without locking (the run lists'
    /// positions).
    pub fn queue_snapshots(&self) -> Result<Vec<QueueSnapshot>> {
        let mut c = self.client();
        let mut tx = c.transaction().map_err(db("reading queues"))?;
        let names: Vec<String> = tx
            .query("SELECT name FROM queues ORDER BY name", &[])
            .map_err(db("reading queues"))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut out = Vec::new();
        for name in names {
            if let Some(s) = snapshot(&mut tx, &name, false, &[])? {
                out.push(s);
            }
        }
        tx.commit().map_err(db("reading queues"))?;
        Ok(out)
    }

    /// Claims the next run of a queue whose turn it is, for `worker` with a lease of
    /// `lease_ms`: for each queue with a run waiting (not one of `skip`), its row locked,
    /// `decide` is shown the queue and names the run to start (and the queue's new state) or
    /// none. One transaction per queue: a run is claimed and its queue's state written
    /// together, or neither.
    pub fn claim_queued(
        &self,
        worker: &str,
        lease_ms: i64,
        skip: &[String],
        decide: &mut dyn FnMut(&QueueSnapshot) -> Pick,
    ) -> Result<Option<Claim>> {
        let mut c = self.client();
        let names: Vec<String> = c
            .query(
                "SELECT DISTINCT queue FROM runs WHERE queue IS NOT NULL AND state = 'submitted'
                   AND NOT (id = ANY($1)) ORDER BY queue",
                &[&skip],
            )
            .map_err(db("finding queued runs"))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        for name in names {
            let mut tx = c.transaction().map_err(db("claiming a queued run"))?;
            let Some(snap) = snapshot(&mut tx, &name, true, skip)? else {
                continue;
            };
            let Some((run, state)) = decide(&snap) else {
                continue;
            };
            tx.execute(
                "UPDATE queues SET state = $2 WHERE name = $1",
                &[&name, &state],
            )
            .map_err(db("claiming a queued run"))?;
            let row = tx
                .query_opt(
                    "UPDATE runs r SET state = 'running', worker = $2, fence = r.fence + 1,
                       lease_until = now() + $3 * interval '1 millisecond', claims = r.claims + 1,
                       updated_at = now()
                     WHERE r.id = $1 AND r.state = 'submitted'
                     RETURNING r.id, r.fence, r.events, r.oracle_cmd, r.scorer_cmd",
                    &[&run, &worker, &(lease_ms as f64)],
                )
                .map_err(db("claiming a queued run"))?;
            let Some(r) = row else { continue };
            tx.commit().map_err(db("claiming a queued run"))?;
            return Ok(Some(Claim {
                id: r.get(0),
                fence: r.get(1),
                events: r.get(2),
                from: "submitted".into(),
                programs: Programs {
                    oracle_cmd: r.get(3),
                    scorer_cmd: r.get(4),
                },
            }));
        }
        Ok(None)
    }

    /// How many submitted runs wait in a queue (not one of `skip`).
    pub fn queued_waiting(&self, skip: &[String]) -> Result<i64> {
        let row = self
            .client()
            .query_one(
                "SELECT count(*) FROM runs WHERE queue IS NOT NULL AND state = 'submitted'
                   AND NOT (id = ANY($1))",
                &[&skip],
            )
            .map_err(db("counting queued runs"))?;
        Ok(row.get(0))
    }
}

/// Queue `name` with its runs, its row locked when `lock`; `None` when there is no such queue.
fn snapshot(
    tx: &mut postgres::Transaction<'_>,
    name: &str,
    lock: bool,
    skip: &[String],
) -> Result<Option<QueueSnapshot>> {
    let sql = if lock {
        "SELECT spec, state, (extract(epoch FROM clock_timestamp()) * 1000)::bigint
         FROM queues WHERE name = $1 FOR UPDATE"
    } else {
        "SELECT spec, state, (extract(epoch FROM clock_timestamp()) * 1000)::bigint
         FROM queues WHERE name = $1"
    };
    let Some(row) = tx.query_opt(sql, &[&name]).map_err(db("reading a queue"))? else {
        return Ok(None);
    };
    let running = tx
        .query(
            "SELECT partition_key FROM runs WHERE queue = $1 AND state = 'running'",
            &[&name],
        )
        .map_err(db("reading a queue's runs"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let waiting = tx
        .query(
            "SELECT id, number, priority, partition_key FROM runs
             WHERE queue = $1 AND state = 'submitted' AND NOT (id = ANY($2))
             ORDER BY number LIMIT $3",
            &[&name, &skip, &WAITING_READ_MAX],
        )
        .map_err(db("reading a queue's runs"))?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    Ok(Some(QueueSnapshot {
        name: name.to_owned(),
        spec: row.get(0),
        state: row.get(1),
        now_ms: row.get(2),
        running,
        waiting,
    }))
}
