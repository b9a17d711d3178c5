//! Schedules kept in a PostgreSQL store (`oracle schedule ... --store`), fired by every
//! `oracle worker` and every `oracle serve --store`: each firer sweeps the `schedules` table
//! and submits each due tick's run under the tick's idempotency key (`Store::submit_keyed`,
//! one transaction under the key's advisory lock), so however many firers race, a tick starts
//! one run. The firing rule (catch-up, overlap) is the file home's (`schedule::fire_ticks`).
//!
//! A stored schedule keeps its plan's text: its firers run on other machines and read no plan
//! file (sub-plans and tools resolve against the schedule's root on the firer's machine).

use std::path::Path;

use oracle_pg::{ScheduleRow, Store, Submitted};
use oracle_runtime::session::SessionError;

use crate::bind::Given;
use crate::error::HostError;
use crate::home::{Home, Start};
use crate::schedule::{
    Cursor, NewSchedule, SCHEDULES_MAX, Schedule, Tick, exists, fire_ticks, unknown,
};

/// How often a firer sweeps the store's schedules: a tick starts its run within about this
/// long, and an idle store answers five small queries a second per firer.
pub const SWEEP_MS: u64 = 200;

fn spec_of(s: &Schedule) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn parse_row(row: &ScheduleRow) -> Result<(Schedule, Cursor), HostError> {
    let s: Schedule = serde_json::from_str(&row.spec).map_err(|e| HostError::Schedule {
        code: "schedule_invalid",
        why: format!("the store's schedule `{}`: {e}", row.name),
    })?;
    let cursor = Cursor {
        tick_ms: row.tick_ms.and_then(|t| u64::try_from(t).ok()),
        run: row.last_run.clone(),
    };
    Ok((s, cursor))
}

/// Adds a schedule to the store, with its plan's text.
pub fn add(store: &Store, new: NewSchedule, now_ms: u64) -> Result<Schedule, HostError> {
    let s = new.build(now_ms, true)?;
    if store.schedules()?.len() >= SCHEDULES_MAX {
        return Err(HostError::Schedule {
            code: "schedule_invalid",
            why: format!("a store keeps at most {SCHEDULES_MAX} schedules"),
        });
    }
    if !store.schedule_insert(&s.name, &spec_of(&s))? {
        return Err(exists(&s.name));
    }
    Ok(s)
}

/// Every schedule in the store with where its firing got to, by name.
pub fn list(store: &Store) -> Result<Vec<(Schedule, Cursor)>, HostError> {
    store.schedules()?.iter().map(parse_row).collect()
}

/// The schedule `name`.
pub fn get(store: &Store, name: &str) -> Result<Schedule, HostError> {
    crate::schedule::check_name(name)?;
    list(store)?
        .into_iter()
        .map(|(s, _)| s)
        .find(|s| s.name == name)
        .ok_or_else(|| unknown(name))
}

/// Pauses or resumes `name` (resuming fires no tick that came while it was paused).
pub fn pause(store: &Store, name: &str, paused: bool, now_ms: u64) -> Result<Schedule, HostError> {
    let mut s = get(store, name)?;
    if s.paused && !paused {
        s.since_ms = now_ms;
    }
    s.paused = paused;
    if !store.schedule_update(name, &spec_of(&s))? {
        return Err(unknown(name));
    }
    Ok(s)
}

/// Removes `name` (its runs stay).
pub fn remove(store: &Store, name: &str) -> Result<Schedule, HostError> {
    let s = get(store, name)?;
    if !store.schedule_delete(name)? {
        return Err(unknown(name));
    }
    Ok(s)
}

/// Prepares the run of `s` keyed `key` in a scratch home under `scratch` and submits it:
/// the run's id, and whether the key had started it already.
pub fn submit(
    store: &Store,
    scratch: &Path,
    s: &Schedule,
    key: String,
) -> Result<(String, bool), HostError> {
    let dir = scratch.join(format!(
        "schedule-{}-{}",
        std::process::id(),
        oracle_runtime::wall::now_ms()
    ));
    let outcome = submit_in(store, &dir, s, key);
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn submit_in(
    store: &Store,
    dir: &Path,
    s: &Schedule,
    key: String,
) -> Result<(String, bool), HostError> {
    let home = Home::open(dir)?;
    let prepared = match home.prepare_submission(
        s.options(dir, key.clone()),
        &Given::default(),
        Vec::new(),
    )? {
        Start::New(p) => p,
        Start::Existing(e) => {
            return Err(HostError::Worker(format!(
                "internal: a scratch home found key `{}`",
                e.key
            )));
        }
    };
    let claim = {
        let sub = &prepared.submission;
        oracle_runtime::keys::KeyClaim::new(&key, "", prepared.plan.hash, &sub.inputs, sub.seed)
    };
    let programs = oracle_pg::Programs::default();
    let ask = s.ask()?;
    let queue = ask.as_ref().map(crate::queue::store::as_store);
    let submitted = store.submit_queued(
        &prepared.plan.name,
        &prepared.dir,
        &programs,
        Some(&claim),
        queue.as_ref(),
    )?;
    match submitted {
        Submitted::New(id) => Ok((id, false)),
        Submitted::Existing { run, differs, .. } if differs.is_empty() => Ok((run, true)),
        Submitted::Existing { run, differs, .. } => {
            Err(HostError::Session(SessionError::KeyUsed {
                key,
                run,
                differs,
            }))
        }
    }
}

/// Starts a run of `name` now, outside its ticks (`oracle schedule trigger --store`): queued
/// for the workers under the key `schedule:<name>:trigger:<instant>`.
pub fn trigger(
    store: &Store,
    scratch: &Path,
    name: &str,
    now_ms: u64,
) -> Result<(String, bool), HostError> {
    let s = get(store, name)?;
    submit(store, scratch, &s, s.trigger_key(now_ms))
}

/// Whether the store's run `id` has ended (or is gone).
fn finished(store: &Store, id: &str) -> bool {
    match store.run(id) {
        Ok(Some(row)) => !matches!(
            row.state.as_str(),
            "submitted" | "runnable" | "running" | "suspended"
        ),
        Ok(None) => true,
        // Unknown for now: held back, as if still running, until the store answers.
        Err(_) => false,
    }
}

/// Fires every due tick of the store's schedules at `now_ms` (one sweep of a worker or a
/// server over the store). A schedule that fails is left for the next sweep.
pub fn fire(store: &Store, scratch: &Path, now_ms: u64) -> Result<Vec<Tick>, HostError> {
    let mut out = Vec::new();
    for (s, cursor) in list(store)? {
        if s.paused {
            continue;
        }
        let finished = |run: &str| finished(store, run);
        let mut launch = |key: String| submit(store, scratch, &s, key);
        let mut step = |tick: u64, run: Option<&str>| -> Result<(), HostError> {
            let tick = i64::try_from(tick).unwrap_or(i64::MAX);
            Ok(store.schedule_advance(&s.name, tick, run)?)
        };
        let _ = fire_ticks(
            &s,
            &cursor,
            now_ms,
            &finished,
            &mut launch,
            &mut step,
            &mut out,
        );
    }
    Ok(out)
}

/// Sweeps the store's schedules every [`SWEEP_MS`] until `stopped()` (a thread of a worker or
/// of a server over the store), telling `log` of each tick; with `wake_timers` (a worker), its
/// timer wheel too ([`crate::worker::wake_due`]). A lost connection is made again at the next
/// sweep.
pub fn fire_loop(
    url: &str,
    scratch: &Path,
    wake_timers: bool,
    stopped: &dyn Fn() -> bool,
    log: &dyn Fn(&str),
) {
    let mut store: Option<Store> = None;
    while !stopped() {
        if store.is_none() {
            store = Store::connect(url).ok();
        }
        if let Some(s) = &store {
            match fire(s, scratch, oracle_runtime::wall::now_ms()) {
                Ok(ticks) => ticks.iter().for_each(|t| log(&tick_line(t))),
                Err(_) => store = None,
            }
        }
        if let (Some(s), true) = (&store, wake_timers) {
            match crate::worker::wake_due(s, oracle_runtime::wall::now_ms()) {
                Ok(runs) => runs
                    .iter()
                    .for_each(|r| log(&format!("timer   {r}: due, wake queued"))),
                Err(_) => store = None,
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(SWEEP_MS));
    }
}

/// One line of a firer's log: `schedule NAME tick INSTANT: started RUN`.
pub fn tick_line(t: &Tick) -> String {
    use crate::schedule::Fired;
    let what = match &t.fired {
        Fired::Started {
            run,
            existing: false,
        } => format!("started {run}"),
        Fired::Started {
            run,
            existing: true,
        } => format!("{run} started already"),
        Fired::Dropped { why } => format!("dropped ({why})"),
    };
    format!(
        "schedule {} tick {}: {what}",
        t.schedule,
        oracle_runtime::wall::rfc3339(t.tick_ms)
    )
}
