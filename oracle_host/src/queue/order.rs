//! The queue's one ordering rule, pure (no files, no clock: `now_ms` is given): which waiting
//! runs may start now and where each waits. Higher priority first; within a priority, the
//! partition served least recently first (round robin); within a partition, first come first
//! served; never past the queue's concurrency, a partition's concurrency or the queue's rate.

use std::collections::BTreeMap;

/// The highest priority (`--priority 0-9`; 0 is the default and the lowest).
pub const PRIORITY_MAX: u8 = 9;

/// A queue's limits as [`pick`] applies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Runs started through the queue and not ended, at most.
    pub concurrency: u32,
    /// Of those, at most this many of one partition; `None`: no partition limit.
    pub partition_concurrency: Option<u32>,
    /// At most `count` starts in any window of `per_ms`; `None`: no rate limit.
    pub rate: Option<Rate>,
}

/// `count` starts per `per_ms` milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub per_ms: u64,
}

/// A waiting run: its ticket (the order it arrived in), its priority and its partition (`""`
/// for none, itself a partition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub ticket: u64,
    pub priority: u8,
    pub partition: String,
}

/// What the queue holds besides its waiting runs: runs started and not ended by partition,
/// recent starts, and when each partition was last served.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Load {
    pub running: BTreeMap<String, u32>,
    /// Wall times of the most recent starts, oldest first (at most the rate's `count` kept).
    pub starts_ms: Vec<u64>,
    /// The start number (`round`) at which each partition was last served.
    pub served: BTreeMap<String, u64>,
    /// Starts so far: the next start is number `round + 1`.
    pub round: u64,
}

/// What [`pick`] decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pick {
    /// The tickets that may start now, in the order they are chosen.
    pub start: Vec<u64>,
    /// When the rate allows the next start, if it is what stops the next waiting run.
    pub retry_at_ms: Option<u64>,
}

impl Load {
    fn total(&self) -> u64 {
        self.running.values().map(|n| u64::from(*n)).sum()
    }

    /// Takes a start of `partition` at `now_ms` into account.
    pub fn started(&mut self, partition: &str, now_ms: u64, rate: Option<Rate>) {
        *self.running.entry(partition.to_owned()).or_insert(0) += 1;
        self.round += 1;
        self.served.insert(partition.to_owned(), self.round);
        self.starts_ms.push(now_ms);
        let keep = rate.map_or(0, |r| r.count as usize);
        let extra = self.starts_ms.len().saturating_sub(keep);
        self.starts_ms.drain(..extra);
    }

    /// When the rate lets the next run start: `None` now.
    fn rate_wait(&self, rate: Option<Rate>, now_ms: u64) -> Option<u64> {
        let rate = rate?;
        let recent: Vec<u64> = self
            .starts_ms
            .iter()
            .copied()
            .filter(|t| t.saturating_add(rate.per_ms) > now_ms)
            .collect();
        if recent.len() < rate.count as usize {
            return None;
        }
        // The start that leaves the window first makes room.
        let k = recent.len() - rate.count as usize;
        Some(recent[k].saturating_add(rate.per_ms))
    }
}

/// The waiting run chosen next among `waiting` (not in `taken`), given `load`, skipping
/// partitions at `partition_cap`.
fn next<'a>(
    waiting: &'a [Waiting],
    taken: &[u64],
    load: &Load,
    partition_cap: Option<u32>,
) -> Option<&'a Waiting> {
    waiting
        .iter()
        .filter(|w| !taken.contains(&w.ticket))
        .filter(|w| {
            partition_cap
                .is_none_or(|cap| load.running.get(&w.partition).copied().unwrap_or(0) < cap)
        })
        .min_by_key(|w| {
            (
                std::cmp::Reverse(w.priority),
                load.served.get(&w.partition).copied().unwrap_or(0),
                w.ticket,
            )
        })
}

/// The waiting runs that may start now, best first, within `limits` given `load`.
pub fn pick(limits: &Limits, waiting: &[Waiting], load: &Load, now_ms: u64) -> Pick {
    let mut load = load.clone();
    let mut out = Pick::default();
    while load.total() < u64::from(limits.concurrency) {
        let Some(w) = next(waiting, &out.start, &load, limits.partition_concurrency) else {
            break;
        };
        if let Some(at) = load.rate_wait(limits.rate, now_ms) {
            out.retry_at_ms = Some(at);
            break;
        }
        load.started(&w.partition, now_ms, limits.rate);
        out.start.push(w.ticket);
    }
    out
}

/// Every waiting run's ticket in the order they would start were there no limits: a run's
/// position in its queue is its place here, from 1.
pub fn order(waiting: &[Waiting], load: &Load) -> Vec<u64> {
    let mut load = Load {
        running: BTreeMap::new(),
        starts_ms: Vec::new(),
        ..load.clone()
    };
    let mut out = Vec::with_capacity(waiting.len());
    while let Some(w) = next(waiting, &out, &load, None) {
        load.started(&w.partition, 0, None);
        out.push(w.ticket);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn w(ticket: u64, priority: u8, partition: &str) -> Waiting {
        Waiting {
            ticket,
            priority,
            partition: partition.to_owned(),
        }
    }

    fn one() -> Limits {
        Limits {
            concurrency: 1,
            partition_concurrency: None,
            rate: None,
        }
    }

    /// Drains `waiting` one start at a time (each ends before the next), as a queue of
    /// concurrency 1 does.
    fn drain(limits: &Limits, mut waiting: Vec<Waiting>) -> Vec<u64> {
        let mut load = Load::default();
        let mut out = Vec::new();
        let mut now = 0;
        while !waiting.is_empty() {
            let p = pick(limits, &waiting, &load, now);
            match p.start.first() {
                Some(t) => {
                    let at = waiting.iter().position(|x| x.ticket == *t).unwrap();
                    let x = waiting.remove(at);
                    load.started(&x.partition, now, limits.rate);
                    // It ends at once.
                    *load.running.get_mut(&x.partition).unwrap() -= 1;
                    out.push(x.ticket);
                }
                None => now = p.retry_at_ms.expect("a rate wait"),
            }
        }
        out
    }

    #[test]
    fn queue_higher_priority_goes_first_then_first_come() {
        let waiting = vec![w(1, 0, ""), w(2, 5, ""), w(3, 5, ""), w(4, 9, "")];
        assert_eq!(drain(&one(), waiting.clone()), vec![4, 2, 3, 1]);
        assert_eq!(order(&waiting, &Load::default()), vec![4, 2, 3, 1]);
    }

    #[test]
    fn queue_partitions_take_turns() {
        let mut waiting: Vec<Waiting> = (1..=10).map(|t| w(t, 0, "a")).collect();
        waiting.extend((11..=20).map(|t| w(t, 0, "b")));
        let got = drain(&one(), waiting);
        let want: Vec<u64> = (1..=10).flat_map(|i| [i, i + 10]).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn queue_rate_spaces_starts() {
        let limits = Limits {
            concurrency: 10,
            partition_concurrency: None,
            rate: Some(Rate {
                count: 2,
                per_ms: 1_000,
            }),
        };
        let waiting: Vec<Waiting> = (1..=5).map(|t| w(t, 0, "")).collect();
        let p = pick(&limits, &waiting, &Load::default(), 100);
        assert_eq!(p.start, vec![1, 2]);
        assert_eq!(p.retry_at_ms, Some(1_100));
    }

    proptest! {
        /// Whatever waits and runs: no start past a cap or the rate; the first start is the
        /// best waiting run; and within a priority and a partition, first come first served.
        #[test]
        fn queue_picks_respect_every_limit_and_the_order(
            entries in proptest::collection::vec((0u8..=PRIORITY_MAX, 0u8..3), 0..30),
            running in proptest::collection::vec(0u32..3, 3),
            concurrency in 1u32..6,
            part_cap in proptest::option::of(1u32..3),
            rate in proptest::option::of((1u32..4, 1u64..2_000)),
            starts in proptest::collection::vec(0u64..3_000, 0..4),
            now in 0u64..4_000,
        ) {
            let waiting: Vec<Waiting> = entries.iter().enumerate()
                .map(|(i, (p, part))| w(i as u64 + 1, *p, &format!("p{part}")))
                .collect();
            let mut load = Load::default();
            for (i, n) in running.iter().enumerate() {
                load.running.insert(format!("p{i}"), *n);
            }
            let mut starts = starts;
            starts.sort_unstable();
            starts.retain(|t| *t <= now);
            load.starts_ms = starts;
            let limits = Limits {
                concurrency,
                partition_concurrency: part_cap,
                rate: rate.map(|(count, per_ms)| Rate { count, per_ms }),
            };
            let p = pick(&limits, &waiting, &load, now);
            let mut after = load.clone();
            for t in &p.start {
                let x = waiting.iter().find(|x| x.ticket == *t).unwrap();
                // Within its priority and partition, nothing older still waits.
                prop_assert!(!waiting.iter().any(|y| y.priority == x.priority
                    && y.partition == x.partition && y.ticket < x.ticket
                    && !p.start.contains(&y.ticket)));
                after.started(&x.partition, now, limits.rate);
            }
            let before = load.total();
            prop_assert!(after.total() <= u64::from(concurrency).max(before));
            if let Some(cap) = part_cap {
                for (part, n) in &after.running {
                    let was = load.running.get(part).copied().unwrap_or(0);
                    prop_assert!(*n <= cap.max(was));
                }
            }
            if let Some(r) = limits.rate {
                let mut all = load.starts_ms.clone();
                all.extend(std::iter::repeat_n(now, p.start.len()));
                let in_window = all.iter().filter(|t| **t + r.per_ms > now).count();
                prop_assert!(p.start.is_empty() || in_window <= r.count as usize);
            }
            // The first start is the best waiting run no cap holds back.
            if let Some(first) = p.start.first() {
                let best = next(&waiting, &[], &load, part_cap).unwrap();
                prop_assert_eq!(*first, best.ticket);
            }
            // Something waits, a place is free, the rate allows: something starts.
            let free = load.total() < u64::from(concurrency);
            let startable = next(&waiting, &[], &load, part_cap).is_some();
            if free && startable && load.rate_wait(limits.rate, now).is_none() {
                prop_assert!(!p.start.is_empty());
            }
        }
    }
}
