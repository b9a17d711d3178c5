//! A run's family: the run it was forked from and the runs forked from it, found by comparing
//! logs rather than reading them whole (the run page, `GET /api/v1/runs/ID`).
//!
//! A fork copies its parent's events byte for byte, so parent and fork share their first
//! event; only runs that share this run's first event are compared, each by the O(log n)
//! binary search over chain hashes that `oracle diff` uses. Where two such logs part, one of
//! them must hold a `forked` event naming the other: nothing but the record decides, so an
//! edited file beside a log cannot make a run look forked.

use std::path::Path;

use oracle_core::EventKind;
use oracle_core::diff::{Outcome, Reader, Side, first_divergence};
use oracle_core::payload::Payload;

use crate::index::IndexedLog;
use crate::paths::LogPaths;
use crate::session::RunDir;

/// Most other runs of a home compared when finding a run's family: each costs an index open
/// and a first-event read, so a page of a home with more runs shows what the first ones say
/// (and says so, [`Family::truncated`]) rather than taking unbounded time.
pub const FAMILY_RUNS_MAX: usize = 10_000;

/// A run's parent and forks, each with the number of events shared with this run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Family {
    pub parent: Option<(String, u64)>,
    /// Direct forks only (a fork of a fork is its own parent's), by run id.
    pub forks: Vec<(String, u64)>,
    /// Whether more than [`FAMILY_RUNS_MAX`] runs were there to compare.
    pub truncated: bool,
    /// The run and step that spawned this run (a child run), as its first event says.
    pub spawned_by: Option<oracle_core::payload::ParentRun>,
    /// The runs this run's `spawn` steps started, by id, with the step: each names this run
    /// in its first event.
    pub children: Vec<(String, String)>,
}

/// Which of two logs that share a prefix names the other as its parent, where they part.
enum Parted {
    /// The other run is a fork of this one, sharing `u64` events.
    Fork(u64),
    /// This run is a fork of the other.
    Parent(u64),
    Unrelated,
}

/// The family of `run`, a run of the home `home`. Runs that cannot be read are skipped: the
/// family is what the readable record says.
pub fn family(home: &Path, run: &RunDir) -> Family {
    let mut out = Family::default();
    let Ok(mut ours) = IndexedLog::open_with(&run.paths.log, false) else {
        return out;
    };
    let Ok(first) = ours.read(0) else {
        return out;
    };
    if let Ok(Payload::RunStarted(s)) = first.typed() {
        out.spawned_by = s.parent;
    }
    let Ok(entries) = std::fs::read_dir(home.join("runs")) else {
        return out;
    };
    let mut ids: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|id| *id != run.id)
        .collect();
    ids.sort();
    out.truncated = ids.len() > FAMILY_RUNS_MAX;
    ids.truncate(FAMILY_RUNS_MAX);
    for id in ids {
        let paths = LogPaths::of_run(&home.join("runs").join(&id));
        let Ok(mut theirs) = IndexedLog::open_with(&paths.log, false) else {
            continue;
        };
        let Ok(their_first) = theirs.read(0) else {
            continue;
        };
        if their_first.hash != first.hash {
            if let Ok(Payload::RunStarted(s)) = their_first.typed()
                && let Some(p) = s.parent.filter(|p| p.run == run.id)
            {
                out.children.push((id, p.step));
            }
            continue;
        }
        match parted(&mut ours, &mut theirs, &run.id, &id) {
            Parted::Fork(shared) => out.forks.push((id, shared)),
            Parted::Parent(shared) => out.parent = Some((id, shared)),
            Parted::Unrelated => {}
        }
    }
    out
}

/// Where `ours` (run `us`) and `theirs` (run `them`) part, and which names the other there.
fn parted(ours: &mut IndexedLog, theirs: &mut IndexedLog, us: &str, them: &str) -> Parted {
    let mut r = Reader::new(ours, theirs);
    let (at, side) = match first_divergence(&mut r) {
        Ok(Outcome::Diverged(d)) => (d.seq, None),
        // One is a prefix of the other: the longer one's next event is where they part.
        Ok(Outcome::Prefix {
            shorter, common, ..
        }) => (common, Some(shorter)),
        _ => return Parted::Unrelated,
    };
    let forked_from = |side: Side, r: &mut Reader<'_, IndexedLog, IndexedLog>| {
        r.get(side, at).ok().and_then(|e| match e.typed() {
            Ok(Payload::Forked(f)) if e.kind == EventKind::Forked => Some(f.parent),
            _ => None,
        })
    };
    if side != Some(Side::B) && forked_from(Side::B, &mut r).as_deref() == Some(us) {
        return Parted::Fork(at);
    }
    if side != Some(Side::A) && forked_from(Side::A, &mut r).as_deref() == Some(them) {
        return Parted::Parent(at);
    }
    Parted::Unrelated
}
