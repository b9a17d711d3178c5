//! Schedules: a plan started on a cron pattern, in a time zone, by whatever drives runs
//! (`oracle serve` on a file home). Each schedule is `<home>/schedules/<name>.json` (what it
//! is, written by `oracle schedule add|pause|resume`) beside `<name>.cursor` (the last tick
//! fired and its run, written by the firers), so a firer never overwrites a pause.
//!
//! Exactly once per tick: the run a tick starts carries the idempotency key
//! `schedule:<name>:<tick as RFC 3339>`, claimed atomically in the home (`oracle_runtime::keys`),
//! so two servers, or one restarted mid-tick, find the tick's run instead of starting a second.
//! The cursor is a hint that saves work; the key decides. Wall time reaches the run only
//! through the key in its submission, never its log: a plan that needs the time asks
//! `clock.wall`, which records the answer.
//!
//! Cron patterns are croner's (5 fields, or 6 with seconds first); time zones are jiff's,
//! with the tz database bundled so every machine agrees on the next fire time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use jiff::tz::TimeZone;
use oracle_runtime::session::{self, StartOptions};
use serde::{Deserialize, Serialize};

use crate::bind::Given;
use crate::error::HostError;
use crate::home::{Home, Start};

/// The schedules' directory in a home.
pub const SCHEDULES_DIR: &str = "schedules";

/// The wall-clock time now, in milliseconds since the Unix epoch: when a schedule is added,
/// paused or due. Never recorded in a log.
pub fn now_ms() -> u64 {
    oracle_runtime::wall::now_ms()
}

/// The longest schedule name: it is a file name and part of every run key it makes.
pub const NAME_BYTES_MAX: usize = 64;

/// A tick found this long after its instant was missed (the firer was down, or a queued tick
/// waited on an earlier run): `--catch-up` decides whether it still fires. Longer than a
/// firer's poll (200 ms) with room for a loaded machine, shorter than the tick of any
/// schedule that runs once a minute or less often.
pub const LATE_AFTER_MS: u64 = 5_000;

/// The most ticks one sweep fires for one schedule (`--catch-up all` after a long downtime of
/// a schedule firing every second): the rest fire in the next sweeps, oldest first.
pub const TICKS_PER_SWEEP_MAX: usize = 64;

/// The most schedules a home keeps: a sweep reads every one.
pub const SCHEDULES_MAX: usize = 10_000;

/// What a tick does while the schedule's previous run has not finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// The tick is dropped.
    Skip,
    /// The tick waits until the previous run ends (then it is late: `--catch-up` applies).
    Queue,
    /// The tick starts its run anyway.
    Allow,
}

/// Which missed ticks fire after downtime (ticks found later than [`LATE_AFTER_MS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// None: missed ticks are dropped.
    None,
    /// The latest missed tick fires, once.
    Last,
    /// Every missed tick fires, oldest first.
    All,
}

/// A schedule as kept in `<home>/schedules/<name>.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    pub name: String,
    /// The plan file (absolute).
    pub plan: PathBuf,
    pub cron: String,
    /// An IANA time zone name (`Europe/Berlin`) or `UTC`.
    pub timezone: String,
    /// Inputs as `oracle run --input NAME=VALUE` takes them.
    pub inputs: BTreeMap<String, String>,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    pub paused: bool,
    /// Ticks at or before this instant never fire (when it was added or last resumed).
    pub since_ms: u64,
    /// The working directory its runs start in (absolute).
    pub root: PathBuf,
    /// The plan's text, for a schedule kept in a store (whose firers run on other machines
    /// and read no plan file); `None` in a file home, whose firers read `plan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_text: Option<String>,
    /// The queue its runs wait in (`--queue`; else the plan's `queue` line), their priority
    /// and partition (docs/PLAN.md, "Queues").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
}

/// Where firing got to, kept in `<home>/schedules/<name>.cursor`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The last tick dealt with (fired or dropped).
    pub tick_ms: Option<u64>,
    /// The run the last fired tick started.
    pub run: Option<String>,
}

/// What a sweep did with one tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fired {
    /// A run was started for it (or found: another firer started it first).
    Started { run: String, existing: bool },
    /// Dropped: the previous run had not finished (`--overlap skip`), or it was missed
    /// (`--catch-up`).
    Dropped { why: &'static str },
}

/// One tick a sweep dealt with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tick {
    pub schedule: String,
    pub tick_ms: u64,
    pub fired: Fired,
}

fn bad(what: impl Into<String>) -> HostError {
    HostError::Schedule {
        code: "schedule_invalid",
        why: what.into(),
    }
}

/// A schedule name: letters, digits, `-` and `_`, at most [`NAME_BYTES_MAX`] bytes.
pub fn check_name(name: &str) -> Result<(), HostError> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(bad(format!(
            "schedule name `{name}`: use 1 to {NAME_BYTES_MAX} letters, digits, `-` or `_`"
        )))
    }
}

/// The parsed cron pattern (5 fields, or 6 with seconds first).
pub fn parse_cron(pattern: &str) -> Result<croner::Cron, HostError> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .build()
        .parse(pattern)
        .map_err(|e| bad(format!("--cron `{pattern}`: {e}")))
}

/// The time zone named `name` (from jiff's bundled tz database).
pub fn parse_zone(name: &str) -> Result<TimeZone, HostError> {
    TimeZone::get(name).map_err(|e| bad(format!("--timezone `{name}`: {e}")))
}

fn timestamp(ms: u64) -> Timestamp {
    let ms = i64::try_from(ms.min(oracle_runtime::wall::INSTANT_MS_MAX)).unwrap_or(0);
    Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH)
}

impl Schedule {
    /// The first tick strictly after `after_ms` (unix ms), if the pattern has one.
    pub fn next_after(&self, after_ms: u64) -> Result<Option<u64>, HostError> {
        let cron = parse_cron(&self.cron)?;
        let zone = parse_zone(&self.timezone)?;
        let from = timestamp(after_ms).to_zoned(zone);
        Ok(cron
            .find_next_occurrence(&from, false)
            .ok()
            .and_then(|z| u64::try_from(z.timestamp().as_millisecond()).ok())
            .filter(|&t| t > after_ms))
    }

    /// The ticks after `after_ms` up to `now_ms`, oldest first, at most `max`, and whether
    /// more came after them.
    pub(crate) fn ticks_between(
        &self,
        after_ms: u64,
        now_ms: u64,
        max: usize,
    ) -> Result<(Vec<u64>, bool), HostError> {
        let mut ticks = Vec::new();
        let mut at = after_ms;
        while let Some(t) = self.next_after(at)? {
            if t > now_ms {
                return Ok((ticks, false));
            }
            if ticks.len() == max {
                return Ok((ticks, true));
            }
            ticks.push(t);
            at = t;
        }
        Ok((ticks, false))
    }

    /// The last tick at or before `at_ms`, if the pattern has one.
    fn previous_at(&self, at_ms: u64) -> Result<Option<u64>, HostError> {
        let cron = parse_cron(&self.cron)?;
        let zone = parse_zone(&self.timezone)?;
        let from = timestamp(at_ms).to_zoned(zone);
        Ok(cron
            .find_previous_occurrence(&from, true)
            .ok()
            .and_then(|z| u64::try_from(z.timestamp().as_millisecond()).ok())
            .filter(|&t| t <= at_ms))
    }

    /// Where a sweep at `now_ms` starts listing ticks after `after_ms`: missed ticks that
    /// the catch-up policy drops anyway are not listed one by one (an hour's downtime of a
    /// schedule firing every second is 3,600 of them): `none` starts at the first tick still
    /// on time, `last` just before the latest late one, `all` at the cursor.
    pub(crate) fn window_start(&self, after_ms: u64, now_ms: u64) -> Result<u64, HostError> {
        let on_time = now_ms.saturating_sub(LATE_AFTER_MS);
        Ok(match self.catch_up {
            CatchUp::All => after_ms,
            CatchUp::None => after_ms.max(on_time),
            CatchUp::Last => match self.previous_at(on_time.saturating_sub(1))? {
                Some(t) if t > after_ms => t - 1,
                _ => after_ms.max(on_time),
            },
        })
    }

    /// The schedule as `oracle schedule list --json` and the API show it, with its next fire
    /// time and where firing got to.
    pub fn view(&self, next: Option<u64>, cursor: &Cursor) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "plan": self.plan,
            "cron": self.cron,
            "timezone": self.timezone,
            "inputs": self.inputs,
            "overlap": self.overlap,
            "catch_up": self.catch_up,
            "paused": self.paused,
            "next": next.map(oracle_runtime::wall::rfc3339),
            "last_tick": cursor.tick_ms.map(oracle_runtime::wall::rfc3339),
            "last_run": cursor.run,
        })
    }

    /// The next tick after `now_ms` (none when paused).
    pub fn next_at(&self, now_ms: u64) -> Result<Option<u64>, HostError> {
        if self.paused {
            return Ok(None);
        }
        self.next_after(now_ms.max(self.since_ms))
    }

    /// The idempotency key of a run `trigger` starts at `now_ms`.
    pub fn trigger_key(&self, now_ms: u64) -> String {
        format!(
            "schedule:{}:trigger:{}",
            self.name,
            oracle_runtime::wall::rfc3339(now_ms)
        )
    }

    /// The idempotency key of the run tick `tick_ms` starts.
    pub fn key(&self, tick_ms: u64) -> String {
        format!(
            "schedule:{}:{}",
            self.name,
            oracle_runtime::wall::rfc3339(tick_ms)
        )
    }

    /// The options of the run keyed `key`, in home `home`.
    /// The queue its runs wait in: its `--queue`, else its plan's `queue` line (read now),
    /// with its priority and partition; `None` for none.
    pub fn ask(&self) -> Result<Option<crate::queue::Ask>, HostError> {
        let source = match &self.plan_text {
            Some(t) => t.clone(),
            None if self.queue.is_some() => String::new(),
            None => std::fs::read_to_string(&self.plan).unwrap_or_default(),
        };
        crate::queue::ask_for(
            &source,
            self.queue.as_deref(),
            self.priority.map(u64::from),
            self.partition.as_deref(),
        )
    }

    pub fn options(&self, home: &Path, key: String) -> StartOptions {
        StartOptions {
            plan_text: self.plan_text.clone(),
            inputs: self
                .inputs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            root: self.root.clone(),
            key: Some(key),
            ..StartOptions::new(home, &self.plan)
        }
    }
}

/// What `oracle schedule add` is given.
#[derive(Clone, Debug)]
pub struct NewSchedule {
    pub name: String,
    pub plan: PathBuf,
    pub cron: String,
    pub timezone: Option<String>,
    pub inputs: Vec<(String, String)>,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    pub root: PathBuf,
    /// The plan's text when it does not come from the file `plan` (a request to the API):
    /// `plan` then only names it, and the text is kept with the schedule.
    pub plan_text: Option<String>,
    /// `--queue`, `--priority`, `--partition` ([`crate::queue::ask`] checks them).
    pub queue: Option<String>,
    pub priority: Option<u64>,
    pub partition: Option<String>,
}

/// A name in use.
pub(crate) fn exists(name: &str) -> HostError {
    HostError::Schedule {
        code: "schedule_exists",
        why: format!("schedule `{name}` exists already (`oracle schedule remove` it first)"),
    }
}

/// An unknown name.
pub(crate) fn unknown(name: &str) -> HostError {
    HostError::Schedule {
        code: "not_found",
        why: format!("no schedule `{name}` (`oracle schedule list` names them)"),
    }
}

impl NewSchedule {
    /// The schedule, checked: name, pattern, time zone, and a plan that parses. `keep_text`:
    /// the plan's text goes with it (a store's schedule).
    pub fn build(self, now_ms: u64, keep_text: bool) -> Result<Schedule, HostError> {
        check_name(&self.name)?;
        parse_cron(&self.cron)?;
        let timezone = self.timezone.unwrap_or_else(|| "UTC".to_owned());
        parse_zone(&timezone)?;
        let plan = std::path::absolute(&self.plan).map_err(io(&self.plan))?;
        let given = self.plan_text.is_some();
        let source = match self.plan_text {
            Some(text) => text,
            None => std::fs::read_to_string(&plan).map_err(io(&plan))?,
        };
        if oracle_plan::parse(&source).0.is_none() {
            return Err(bad(format!(
                "{}: the plan does not parse (`oracle plan check` names the errors)",
                plan.display()
            )));
        }
        let ask = crate::queue::ask(
            self.queue.as_deref(),
            self.priority,
            self.partition.as_deref(),
        )?;
        Ok(Schedule {
            queue: ask.as_ref().map(|a| a.queue.clone()),
            priority: ask.as_ref().map(|a| a.priority).filter(|p| *p > 0),
            partition: ask.and_then(|a| a.partition),
            name: self.name,
            plan,
            cron: self.cron,
            timezone,
            inputs: self.inputs.into_iter().collect(),
            overlap: self.overlap,
            catch_up: self.catch_up,
            paused: false,
            since_ms: now_ms,
            root: std::path::absolute(&self.root).map_err(io(&self.root))?,
            plan_text: (keep_text || given).then_some(source),
        })
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HostError + '_ {
    move |source| {
        HostError::Session(session::SessionError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// Writes `bytes` to `path` whole or not at all (a temporary file renamed over it).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), HostError> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

impl Home {
    fn schedules_dir(&self) -> PathBuf {
        self.dir().join(SCHEDULES_DIR)
    }

    fn schedule_path(&self, name: &str) -> PathBuf {
        self.schedules_dir().join(format!("{name}.json"))
    }

    fn cursor_path(&self, name: &str) -> PathBuf {
        self.schedules_dir().join(format!("{name}.cursor"))
    }

    /// Adds a schedule (`oracle schedule add`): its plan must parse, its pattern and time
    /// zone too; ticks from `now_ms` on fire. A name in use is refused.
    pub fn schedule_add(&self, new: NewSchedule, now_ms: u64) -> Result<Schedule, HostError> {
        let s = new.build(now_ms, false)?;
        if let Some(ask) = s.ask()? {
            self.queue_check(&ask)?;
        }
        let dir = self.schedules_dir();
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        if self.schedule_path(&s.name).exists() {
            return Err(exists(&s.name));
        }
        if self.schedule_names()?.len() >= SCHEDULES_MAX {
            return Err(bad(format!(
                "a home keeps at most {SCHEDULES_MAX} schedules"
            )));
        }
        self.schedule_write(&s)?;
        Ok(s)
    }

    fn schedule_write(&self, s: &Schedule) -> Result<(), HostError> {
        let text = serde_json::to_string_pretty(s).unwrap_or_default();
        write_atomic(&self.schedule_path(&s.name), format!("{text}\n").as_bytes())
    }

    fn schedule_names(&self) -> Result<Vec<String>, HostError> {
        let dir = self.schedules_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&dir)(e)),
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_str()?.strip_suffix(".json")?.to_owned();
                check_name(&n).ok().map(|_| n)
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// The schedule named `name`.
    pub fn schedule(&self, name: &str) -> Result<Schedule, HostError> {
        check_name(name)?;
        let path = self.schedule_path(name);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(unknown(name)),
            Err(e) => return Err(io(&path)(e)),
        };
        serde_json::from_str(&text).map_err(|e| bad(format!("{}: {e}", path.display())))
    }

    /// Every schedule, by name.
    pub fn schedules(&self) -> Result<Vec<Schedule>, HostError> {
        self.schedule_names()?
            .iter()
            .map(|n| self.schedule(n))
            .collect()
    }

    /// Where firing of `name` got to.
    pub fn schedule_cursor(&self, name: &str) -> Cursor {
        std::fs::read_to_string(self.cursor_path(name))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    fn cursor_write(&self, name: &str, c: &Cursor) -> Result<(), HostError> {
        let text = serde_json::to_string(c).unwrap_or_default();
        write_atomic(&self.cursor_path(name), text.as_bytes())
    }

    /// Pauses (`true`) or resumes a schedule. Resuming fires no tick that came while it was
    /// paused: ticks count from `now_ms` again.
    pub fn schedule_pause(
        &self,
        name: &str,
        paused: bool,
        now_ms: u64,
    ) -> Result<Schedule, HostError> {
        let mut s = self.schedule(name)?;
        if s.paused && !paused {
            s.since_ms = now_ms;
        }
        s.paused = paused;
        self.schedule_write(&s)?;
        Ok(s)
    }

    /// Removes a schedule (its runs stay).
    pub fn schedule_remove(&self, name: &str) -> Result<Schedule, HostError> {
        let s = self.schedule(name)?;
        let path = self.schedule_path(name);
        std::fs::remove_file(&path).map_err(io(&path))?;
        let _ = std::fs::remove_file(self.cursor_path(name));
        Ok(s)
    }

    /// Starts a run of `name` now, outside its ticks (`oracle schedule trigger`), under the
    /// key `schedule:<name>:trigger:<instant>`, and drives it as `oracle run` would.
    pub fn schedule_trigger(
        &self,
        name: &str,
        now_ms: u64,
    ) -> Result<Start<session::Session>, HostError> {
        let s = self.schedule(name)?;
        let opts = s.options(self.dir(), s.trigger_key(now_ms));
        match s.ask()? {
            Some(ask) => self.start_queued(
                opts,
                &Given::default(),
                Vec::new(),
                &ask,
                &mut |_| {},
                &mut |_| {},
            ),
            None => self.start(opts, &Given::default(), Vec::new(), None),
        }
    }
}

/// A sweep: how each due tick is started.
pub trait Launcher {
    /// Starts the run of `opts` in the background (its key claimed before this returns), or
    /// finds the run its key started; with `ask`, puts it in its queue for its turn.
    fn launch(
        &self,
        home: &Home,
        opts: StartOptions,
        ask: Option<&crate::queue::Ask>,
    ) -> Result<(String, bool), HostError>;
}

/// Launches with [`Home::launch`], outcomes dropped (the run's log has them).
pub struct Background;

impl Launcher for Background {
    fn launch(
        &self,
        home: &Home,
        opts: StartOptions,
        ask: Option<&crate::queue::Ask>,
    ) -> Result<(String, bool), HostError> {
        let started = match ask {
            Some(ask) => home.enqueue_options(opts, &Given::default(), Vec::new(), ask)?,
            None => home.launch(opts, &Given::default(), Vec::new(), |_, _| {})?,
        };
        match started {
            Start::New(p) => Ok((p.id, false)),
            Start::Existing(e) => Ok((e.id, true)),
        }
    }
}

impl Home {
    /// Starts a run of `name` now in the background (`POST /api/v1/schedules/{name}/trigger`
    /// on a file home), under its trigger key: the run's id, and whether the key had started
    /// it already.
    pub fn schedule_launch(&self, name: &str, now_ms: u64) -> Result<(String, bool), HostError> {
        let s = self.schedule(name)?;
        let ask = s.ask()?;
        Background.launch(
            self,
            s.options(self.dir(), s.trigger_key(now_ms)),
            ask.as_ref(),
        )
    }
}

/// Whether the run `id` of home `home` has ended (completed, failed, cancelled, or gone).
fn finished(home: &Home, id: &str) -> bool {
    let status = session::run_info(&home.dir().join("runs").join(id)).status;
    !matches!(status.as_str(), "running" | "suspended" | "interrupted")
}

impl Home {
    /// Fires every schedule's due ticks at `now_ms` (`oracle serve`'s schedule sweep), each
    /// once: the ticks after the cursor (and after `since_ms`) up to now, filtered by the
    /// schedule's catch-up policy, then each started unless `--overlap` holds it back. A
    /// schedule that fails (its plan gone) is left for the next sweep.
    pub fn fire_schedules(&self, now_ms: u64, launcher: &dyn Launcher) -> Vec<Tick> {
        let mut out = Vec::new();
        for s in self.schedules().unwrap_or_default() {
            if !s.paused {
                let _ = self.fire_schedule(&s, now_ms, launcher, &mut out);
            }
        }
        out
    }

    fn fire_schedule(
        &self,
        s: &Schedule,
        now_ms: u64,
        launcher: &dyn Launcher,
        out: &mut Vec<Tick>,
    ) -> Result<(), HostError> {
        let cursor = self.schedule_cursor(&s.name);
        let mut step = |tick: u64, run: Option<&str>| -> Result<(), HostError> {
            let mut c = self.schedule_cursor(&s.name);
            c.tick_ms = Some(tick);
            if let Some(r) = run {
                c.run = Some(r.to_owned());
            }
            self.cursor_write(&s.name, &c)
        };
        let finished = |run: &str| finished(self, run);
        let ask = s.ask()?;
        let mut launch =
            |opts_key: String| launcher.launch(self, s.options(self.dir(), opts_key), ask.as_ref());
        fire_ticks(s, &cursor, now_ms, &finished, &mut launch, &mut step, out)
    }
}

/// Where a sweep records each tick it dealt with: the tick, and the run it started.
pub(crate) type Step<'a> = dyn FnMut(u64, Option<&str>) -> Result<(), HostError> + 'a;

/// Deals with the due ticks of `s` at `now_ms`, from `cursor`: each kept by the catch-up
/// policy is started with `launch` (given its key) unless `--overlap` holds it back, and each
/// dealt with is passed to `step` (the tick, the run it started). The one firing rule of a
/// file home and a store.
pub(crate) fn fire_ticks(
    s: &Schedule,
    cursor: &Cursor,
    now_ms: u64,
    finished: &dyn Fn(&str) -> bool,
    launch: &mut dyn FnMut(String) -> Result<(String, bool), HostError>,
    step: &mut Step<'_>,
    out: &mut Vec<Tick>,
) -> Result<(), HostError> {
    let after = cursor.tick_ms.unwrap_or(0).max(s.since_ms);
    let from = s.window_start(after, now_ms)?;
    let (ticks, _) = s.ticks_between(from, now_ms, TICKS_PER_SWEEP_MAX)?;
    let kept = caught_up(s.catch_up, &ticks, now_ms);
    let mut last_run = cursor.run.clone();
    for &tick in &ticks {
        let fired = if !kept.contains(&tick) {
            Fired::Dropped { why: "missed" }
        } else if s.overlap != Overlap::Allow && last_run.as_deref().is_some_and(|r| !finished(r)) {
            if s.overlap == Overlap::Queue {
                break;
            }
            Fired::Dropped { why: "overlap" }
        } else {
            let (run, existing) = launch(s.key(tick))?;
            last_run = Some(run.clone());
            Fired::Started { run, existing }
        };
        let run = match &fired {
            Fired::Started { run, .. } => Some(run.as_str()),
            Fired::Dropped { .. } => None,
        };
        step(tick, run)?;
        out.push(Tick {
            schedule: s.name.clone(),
            tick_ms: tick,
            fired,
        });
    }
    Ok(())
}

/// Which of `ticks` (oldest first, found at `now_ms`) fire under `policy`: those still on
/// time always; of the late ones, none, the last, or all.
pub fn caught_up(policy: CatchUp, ticks: &[u64], now_ms: u64) -> Vec<u64> {
    let late = |t: u64| now_ms.saturating_sub(t) > LATE_AFTER_MS;
    let mut kept: Vec<u64> = ticks.iter().copied().filter(|&t| !late(t)).collect();
    let last_late = ticks.iter().copied().rfind(|&t| late(t));
    match policy {
        CatchUp::None => {}
        CatchUp::Last => kept.extend(last_late),
        CatchUp::All => kept = ticks.to_vec(),
    }
    kept.sort_unstable();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every(cron: &str, zone: &str) -> Schedule {
        Schedule {
            name: "s".into(),
            plan: PathBuf::from("/p.plan"),
            cron: cron.into(),
            timezone: zone.into(),
            inputs: BTreeMap::new(),
            overlap: Overlap::Skip,
            catch_up: CatchUp::None,
            paused: false,
            since_ms: 0,
            root: PathBuf::from("/"),
            plan_text: None,
            queue: None,
            priority: None,
            partition: None,
        }
    }

    fn ms(text: &str) -> u64 {
        oracle_runtime::wall::instant_ms(text).expect("an instant")
    }

    #[test]
    fn next_fire_times_follow_the_time_zone() {
        let s = every("0 6 * * *", "Europe/Berlin");
        // Winter: Berlin is UTC+1; summer: UTC+2.
        let next = s.next_after(ms("2026-01-10T12:00:00Z")).expect("parses");
        assert_eq!(next, Some(ms("2026-01-11T05:00:00Z")));
        let next = s.next_after(ms("2026-07-10T12:00:00Z")).expect("parses");
        assert_eq!(next, Some(ms("2026-07-11T04:00:00Z")));
        let utc = every("0 6 * * *", "UTC");
        assert_eq!(
            utc.next_after(ms("2026-01-10T12:00:00Z")).expect("parses"),
            Some(ms("2026-01-11T06:00:00Z"))
        );
    }

    #[test]
    fn seconds_ticks_and_keys() {
        let s = every("* * * * * *", "UTC");
        let start = ms("2026-01-01T00:00:00Z");
        let (ticks, more) = s.ticks_between(start, start + 3_500, 10).expect("parses");
        assert_eq!(ticks, vec![start + 1_000, start + 2_000, start + 3_000]);
        assert!(!more);
        assert_eq!(s.key(start + 1_000), "schedule:s:2026-01-01T00:00:01Z");
        let (ticks, more) = s.ticks_between(start, start + 9_000, 2).expect("parses");
        assert_eq!(ticks.len(), 2);
        assert!(more);
    }

    #[test]
    fn a_long_downtime_is_not_listed_tick_by_tick() {
        let mut s = every("* * * * * *", "UTC");
        let now = ms("2026-01-01T01:00:00Z");
        let after = ms("2026-01-01T00:00:00Z");
        s.catch_up = CatchUp::Last;
        let from = s.window_start(after, now).expect("parses");
        let (ticks, _) = s.ticks_between(from, now, 100).expect("parses");
        assert_eq!(
            caught_up(CatchUp::Last, &ticks, now)[0],
            now - LATE_AFTER_MS - 1_000
        );
        s.catch_up = CatchUp::None;
        assert_eq!(
            s.window_start(after, now).expect("parses"),
            now - LATE_AFTER_MS
        );
    }

    #[test]
    fn catch_up_policies() {
        let now = 100_000;
        let ticks = [80_000, 90_000, 99_000];
        assert_eq!(caught_up(CatchUp::None, &ticks, now), vec![99_000]);
        assert_eq!(caught_up(CatchUp::Last, &ticks, now), vec![90_000, 99_000]);
        assert_eq!(caught_up(CatchUp::All, &ticks, now), ticks.to_vec());
    }

    #[test]
    fn bad_names_patterns_and_zones_are_refused() {
        assert!(check_name("nightly-report_2").is_ok());
        assert!(check_name("../x").is_err());
        assert!(check_name("").is_err());
        assert!(parse_cron("0 6 * * *").is_ok());
        assert!(parse_cron("not cron").is_err());
        assert!(parse_zone("Europe/Berlin").is_ok());
        assert!(parse_zone("Mars/Olympus").is_err());
    }
}
