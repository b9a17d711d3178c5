//! Named queues over a PostgreSQL store: the same [`Queue`] and the same ordering rule
//! ([`super::order::pick`]) as a file home, decided in a worker's claim transaction under the
//! queue row's lock (`oracle_pg::Store::claim_queued`), with the database's clock for the
//! rate. Only the place the queue's state is kept differs.

use std::collections::BTreeMap;

use oracle_pg::{PgError, QueueAsk, QueueSnapshot, Store};
use serde::{Deserialize, Serialize};

use super::{Ask, Place, Queue, QueueView, bad, order};
use crate::{Database, HostError};

/// A queue's changing part, as the store keeps it (`queues.state`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Kept {
    #[serde(default)]
    round: u64,
    #[serde(default)]
    served: BTreeMap<String, u64>,
    #[serde(default)]
    starts_ms: Vec<u64>,
}

fn waiting(snap: &QueueSnapshot) -> Vec<order::Waiting> {
    snap.waiting
        .iter()
        .map(|(_, number, priority, partition)| order::Waiting {
            ticket: u64::try_from(*number).unwrap_or(0),
            priority: u8::try_from(*priority).unwrap_or(0),
            partition: partition.clone(),
        })
        .collect()
}

fn load(snap: &QueueSnapshot, kept: &Kept) -> order::Load {
    let mut running = BTreeMap::new();
    for p in &snap.running {
        *running.entry(p.clone()).or_insert(0) += 1;
    }
    order::Load {
        running,
        starts_ms: kept.starts_ms.clone(),
        served: kept.served.clone(),
        round: kept.round,
    }
}

/// The run of `snap` whose turn it is now, if any, and the queue's state after it starts: what
/// a worker's claim transaction writes.
pub fn decide(snap: &QueueSnapshot) -> oracle_pg::Pick {
    let queue: Queue = serde_json::from_str(&snap.spec).ok()?;
    let kept: Kept = serde_json::from_str(&snap.state).unwrap_or_default();
    let now = u64::try_from(snap.now_ms).unwrap_or(0);
    let limits = queue.limits();
    let mut load = load(snap, &kept);
    let pick = order::pick(&limits, &waiting(snap), &load, now);
    let ticket = *pick.start.first()?;
    let (run, _, _, partition) = snap
        .waiting
        .iter()
        .find(|w| u64::try_from(w.1).ok() == Some(ticket))?;
    load.started(partition, now, limits.rate);
    let after = Kept {
        round: load.round,
        served: load.served,
        starts_ms: load.starts_ms,
    };
    Some((run.clone(), serde_json::to_string(&after).ok()?))
}

/// Every run waiting in a queue of `store`, with its place.
pub fn places(store: &Store) -> Result<BTreeMap<String, Place>, PgError> {
    let mut out = BTreeMap::new();
    for snap in store.queue_snapshots()? {
        let kept: Kept = serde_json::from_str(&snap.state).unwrap_or_default();
        let order = order::order(&waiting(&snap), &load(&snap, &kept));
        for (position, ticket) in (1..).zip(order) {
            let Some((run, _, priority, partition)) = snap
                .waiting
                .iter()
                .find(|w| u64::try_from(w.1).ok() == Some(ticket))
            else {
                continue;
            };
            out.insert(
                run.clone(),
                Place {
                    queue: snap.name.clone(),
                    position,
                    priority: u8::try_from(*priority).unwrap_or(0),
                    partition: (!partition.is_empty()).then(|| partition.clone()),
                },
            );
        }
    }
    Ok(out)
}

impl Database {
    /// `oracle queue set --store`: makes the queue or changes its limits.
    pub fn queue_set(&self, q: Queue) -> Result<Queue, HostError> {
        q.check()?;
        let spec = serde_json::to_string(&q).map_err(|e| bad("queue_invalid", e.to_string()))?;
        self.store().queue_put(&q.name, &spec)?;
        Ok(q)
    }

    /// `oracle queue list --store`: every queue with its runs driven and waiting.
    pub fn queues(&self) -> Result<Vec<QueueView>, HostError> {
        let mut out = Vec::new();
        for (name, spec, running, waiting) in self.store().queue_rows()? {
            let queue: Queue = serde_json::from_str(&spec)
                .map_err(|e| bad("queue_invalid", format!("queue {name}: {e}")))?;
            out.push(QueueView {
                queue,
                running: u64::try_from(running).unwrap_or(0),
                waiting: u64::try_from(waiting).unwrap_or(0),
            });
        }
        Ok(out)
    }

    /// Checks that `ask`'s queue exists in the store (`queue_unknown` if not).
    pub fn queue_check(&self, ask: &Ask) -> Result<(), HostError> {
        match self.store().queue_spec(&ask.queue)? {
            Some(_) => Ok(()),
            None => Err(super::unknown(&ask.queue)),
        }
    }

    /// Every run waiting in a queue of the store, with its place (`oracle runs --store`).
    pub fn queued(&self) -> Result<BTreeMap<String, Place>, HostError> {
        Ok(places(self.store())?)
    }
}

/// `ask` as the store's submission takes it.
pub fn as_store(ask: &Ask) -> QueueAsk<'_> {
    QueueAsk {
        queue: &ask.queue,
        priority: i16::from(ask.priority),
        partition: ask.partition.as_deref().unwrap_or(""),
    }
}
