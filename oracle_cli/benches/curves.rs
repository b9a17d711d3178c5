//! Curves (issue 22, item 4): throughput and peak memory of `oracle` commands from 1k to 10M
//! events, each command the real release binary as a child process (BENCHMARKS.md).
//!
//! For each size N in 1k, 10k, 100k, 1M, 10M (up to `CURVES_MAX`, default 10M):
//!
//! - append: `oracle synth --events N --run a` (the five-events-a-step shape, default
//!   durability `effect`: for synth, one sync when the log is closed);
//! - verify: `oracle verify` of that run;
//! - log: `oracle log` of it (the table, every event), stdout to /dev/null;
//! - replay: `oracle inspect --no-snapshots --json` of a log of the same size in which every
//!   event writes one of 1000 keys (`synth --shape writes --keys 1000`, as in BENCHMARKS.md);
//! - diff: `oracle diff` of the run and a copy of it, each with one more event (`oracle claim`,
//!   a different value in each), so they differ at the last event; `diff` verifies both first;
//! - run: `oracle run` of a plan of (N - 2) / 4 independent `text.contains` steps (4 events a
//!   step, plus the first and last), default durability, up to `CURVES_RUN_MAX` (default 1M).
//!
//! Wall time around the child (`Instant`), its peak resident set from `wait4`'s `ru_maxrss`;
//! throughput is events / seconds. Every size's logs are written to a temporary directory
//! (`CURVES_DIR`, default the system's) and deleted before the next size. Prints two markdown
//! tables and writes `docs/images/curves-throughput.svg` and `docs/images/curves-memory.svg`
//! (or into `CURVES_SVG_DIR`).
//!
//! `cargo bench -p oracle_cli --bench curves`; `ORACLE_BIN` names another `oracle` binary.
//! Asserts exit codes only, never a time.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const SIZES: [u64; 5] = [1_000, 10_000, 100_000, 1_000_000, 10_000_000];
/// Commands in table and legend order.
const COMMANDS: [&str; 6] = ["append", "verify", "replay", "diff", "log", "run"];
/// The most steps a plan may declare (`oracle plan check`: E0216).
const STEPS_MAX: u64 = 200_000;
/// About how many bytes a size needs on disk at once: the run and its copy for `diff` (568 bytes
/// an event each, plus indexes), with a margin.
const DISK_BYTES_PER_EVENT: u64 = 1_400;

/// One measured child.
#[derive(Clone, Copy)]
struct Sample {
    /// The size it was measured at (its table row).
    size: u64,
    events: u64,
    secs: f64,
    rss_kib: i64,
}

impl Sample {
    fn rate(&self) -> f64 {
        self.events as f64 / self.secs
    }
    fn mib(&self) -> f64 {
        self.rss_kib as f64 / 1024.0
    }
}

fn oracle_bin() -> PathBuf {
    std::env::var_os("ORACLE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_oracle")))
}

/// `10M`, `100k` or a plain number.
fn parse_size(s: &str) -> u64 {
    let s = s.trim();
    let (digits, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1_000),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1_000_000),
        _ => (s, 1),
    };
    digits
        .replace('_', "")
        .parse::<u64>()
        .unwrap_or_else(|_| panic!("not a size: {s}"))
        * mult
}

fn env_size(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| parse_size(&v))
}

/// Runs `oracle ARGS`, stdout to `stdout` (or /dev/null), and measures it. Panics unless it
/// exits with `expect`.
fn measure(args: &[&str], stdout: Option<&Path>, expect: i32) -> (f64, i64) {
    let out = match stdout {
        Some(p) => File::create(p).unwrap(),
        None => File::create("/dev/null").unwrap(),
    };
    let err = tempfile::tempfile().unwrap();
    let start = Instant::now();
    let child = Command::new(oracle_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err.try_clone().unwrap())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter for wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 reaps our own child; `status` and `usage` are valid out-pointers.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    // The child is reaped; `child` must not be waited on again.
    drop(child);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    if code != Some(expect) {
        let mut err = err;
        let mut text = String::new();
        use std::io::{Read, Seek};
        err.rewind().unwrap();
        err.read_to_string(&mut text).unwrap();
        panic!("oracle {args:?}: exit {code:?} (status {status}), expected {expect}\n{text}");
    }
    (secs, usage.ru_maxrss)
}

/// Free bytes on the file system holding `dir`.
fn free_bytes(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: a zeroed statvfs is a valid out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    assert_eq!(r, 0, "statvfs: {}", std::io::Error::last_os_error());
    st.f_bavail as u64 * st.f_frsize as u64
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn record(results: &mut Vec<(&'static str, Sample)>, cmd: &'static str, s: Sample) {
    println!(
        "  {cmd:<7} {:>10} events  {:>8.3} s  {:>11.0} events/s  {:>8.1} MiB   (load {})",
        s.events,
        s.secs,
        s.rate(),
        s.mib(),
        load()
    );
    results.push((cmd, s));
}

/// The synth-based commands at one size, in `home` (deleted by the caller).
fn logs_at(n: u64, home: &Path, results: &mut Vec<(&'static str, Sample)>) {
    let h = home.to_str().unwrap();
    let ns = n.to_string();
    let a = home.join("runs/a");
    let b = home.join("runs/b");
    let w = home.join("runs/w");
    let (a_s, b_s, w_s) = (
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        w.to_str().unwrap(),
    );

    // Default durability of synth: `effect`.
    let (secs, rss) = measure(
        &["synth", "--home", h, "--events", &ns, "--run", "a"],
        None,
        0,
    );
    let sample = |secs, rss_kib| Sample {
        size: n,
        events: n,
        secs,
        rss_kib,
    };
    record(results, "append", sample(secs, rss));

    let (secs, rss) = measure(&["verify", a_s], None, 0);
    record(results, "verify", sample(secs, rss));

    let (secs, rss) = measure(&["log", a_s], None, 0);
    record(results, "log", sample(secs, rss));

    // Replay: every event writes one of 1000 keys (the worst case), rebuilt from genesis.
    let t = Instant::now();
    measure(
        &[
            "synth", "--home", h, "--events", &ns, "--shape", "writes", "--keys", "1000", "--run",
            "w",
        ],
        None,
        0,
    );
    println!(
        "  (synth --shape writes: {:.3} s, not plotted)",
        t.elapsed().as_secs_f64()
    );
    let (secs, rss) = measure(&["inspect", w_s, "--no-snapshots", "--json"], None, 0);
    record(results, "replay", sample(secs, rss));
    std::fs::remove_dir_all(&w).unwrap();

    // Two runs that differ at their last event: a copy, and one claim appended to each.
    let t = Instant::now();
    copy_dir(&a, &b);
    for (run, value) in [(a_s, "1"), (b_s, "2")] {
        measure(
            &[
                "claim",
                run,
                "--subject",
                "bench",
                "--predicate",
                "tail",
                "--value",
                value,
                "--provenance",
                "user_asserted",
            ],
            None,
            0,
        );
    }
    println!(
        "  (copy and two claims: {:.3} s, not timed)",
        t.elapsed().as_secs_f64()
    );
    let (secs, rss) = measure(&["diff", a_s, b_s], None, 1);
    record(results, "diff", sample(secs, rss));
}

/// `oracle run` of a plan of about `n` events, in `dir` (deleted by the caller).
fn run_at(n: u64, dir: &Path, results: &mut Vec<(&'static str, Sample)>) {
    // Plans are limited to 200,000 steps (`steps_max`, E0216): 800,002 events at most.
    let steps = (n.saturating_sub(2) / 4).clamp(1, STEPS_MAX);
    let mut plan = String::with_capacity(steps as usize * 56);
    plan.push_str("plan curves version 1\n\n");
    for i in 1..=steps {
        plan.push_str(&format!(
            "s{i} = text.contains {{ text: \"ab\", pattern: \"a\" }}\n"
        ));
    }
    let plan_path = dir.join("curves.plan");
    std::fs::write(&plan_path, plan).unwrap();
    let out = dir.join("run.json");
    let home = dir.join("home");
    let (secs, rss) = measure(
        &[
            "run",
            plan_path.to_str().unwrap(),
            "--home",
            home.to_str().unwrap(),
            "--json",
        ],
        Some(&out),
        0,
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(v["status"], "completed", "{v}");
    let events = v["events"].as_u64().expect("events in run --json");
    record(
        results,
        "run",
        Sample {
            size: n,
            events,
            secs,
            rss_kib: rss,
        },
    );
}

fn color(cmd: &str) -> plotters::style::RGBColor {
    use plotters::style::RGBColor;
    match cmd {
        "append" => RGBColor(214, 39, 40),
        "verify" => RGBColor(31, 119, 180),
        "replay" => RGBColor(44, 160, 44),
        "diff" => RGBColor(148, 103, 189),
        "log" => RGBColor(255, 127, 14),
        _ => RGBColor(0, 0, 0),
    }
}

/// Draws the mesh, the target line and one line per command on a chart whose x axis is events
/// (log scale); the y axis is linear or logarithmic, so the body is a macro over both types.
macro_rules! draw_chart {
    ($chart:expr, $y_desc:expr, $results:expr, $y:expr, $target:expr, $x_min:expr, $x_max:expr) => {{
        let chart = &mut $chart;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .bold_line_style(BLACK.mix(0.15))
            .light_line_style(BLACK.mix(0.04))
            .x_desc("events in the log (log scale)")
            .y_desc($y_desc)
            .x_label_formatter(&|x| {
                let x = *x;
                if x >= 1e6 {
                    format!("{}M", x / 1e6)
                } else if x >= 1e3 {
                    format!("{}k", x / 1e3)
                } else {
                    format!("{x}")
                }
            })
            .y_label_formatter(&|v| {
                if *v >= 1e6 {
                    format!("{:.1}M", v / 1e6)
                } else if *v >= 1e4 {
                    format!("{:.0}k", v / 1e3)
                } else {
                    format!("{v:.0}")
                }
            })
            .draw()?;
        if let Some((t, label)) = $target {
            let grey = BLACK.mix(0.45);
            chart
                .draw_series(LineSeries::new(
                    vec![($x_min, t), ($x_max, t)],
                    grey.stroke_width(1),
                ))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], grey));
        }
        for cmd in COMMANDS {
            let c = color(cmd);
            let points: Vec<(f64, f64)> = $results
                .iter()
                .filter(|r| r.0 == cmd)
                .map(|r| (r.1.events as f64, $y(&r.1)))
                .collect();
            if points.is_empty() {
                continue;
            }
            chart
                .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))?
                .label(cmd)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&pt| Circle::new(pt, 3, c.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()?;
    }};
}

/// One line per command of `y(sample)` against events (log scale), on a linear or a log y axis;
/// `target` draws a grey horizontal line with its label.
fn chart(
    path: &Path,
    caption: &str,
    y_desc: &str,
    results: &[(&'static str, Sample)],
    y: impl Fn(&Sample) -> f64,
    target: Option<(f64, &str)>,
    log_y: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (860, 520)).into_drawing_area();
        root.fill(&WHITE)?;
        let x_min = results.iter().map(|r| r.1.events).min().unwrap_or(1_000) as f64;
        let x_max = results.iter().map(|r| r.1.events).max().unwrap_or(1_000) as f64;
        let (x_min, x_max) = (x_min / 1.5, (x_max * 1.5).max(x_min * 10.0));
        let values = results.iter().map(|r| y(&r.1)).chain(target.map(|t| t.0));
        let y_top = values.clone().fold(0.0, f64::max);
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(84);
        if log_y {
            let y_bottom = values.fold(f64::INFINITY, f64::min).max(0.1) / 1.5;
            let mut c = builder.build_cartesian_2d(
                (x_min..x_max).log_scale(),
                (y_bottom..y_top * 1.5).log_scale(),
            )?;
            draw_chart!(c, y_desc, results, y, target, x_min, x_max);
        } else {
            let mut c =
                builder.build_cartesian_2d((x_min..x_max).log_scale(), 0.0..y_top * 1.12)?;
            draw_chart!(c, y_desc, results, y, target, x_min, x_max);
        }
        root.present()?;
    }
    std::fs::write(path, out)?;
    Ok(())
}

/// A markdown table: one row per size, one column per command.
fn table(results: &[(&'static str, Sample)], sizes: &[u64], cell: impl Fn(&Sample) -> String) {
    println!("| events | {} |", COMMANDS.join(" | "));
    println!("| ---{} |", " | ---".repeat(COMMANDS.len()));
    for &n in sizes {
        let cells: Vec<String> = COMMANDS
            .iter()
            .map(|cmd| {
                results
                    .iter()
                    .find(|r| r.0 == *cmd && r.1.size == n)
                    .map_or_else(
                        || "–".to_owned(),
                        |r| {
                            if r.1.events.abs_diff(n) < 4 {
                                cell(&r.1)
                            } else {
                                format!("{} ({} events)", cell(&r.1), group(r.1.events))
                            }
                        },
                    )
            })
            .collect();
        println!("| {} | {} |", group(n), cells.join(" | "));
    }
}

/// 1234567 as "1,234,567".
fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn main() {
    // The machine line first: BENCHMARKS.md names the CPU of every figure.
    eprintln!("{}", oracle_runtime::machine::line());
    // `cargo bench` passes `--bench`; nothing else to parse.
    let max = env_size("CURVES_MAX", 10_000_000);
    let run_max = env_size("CURVES_RUN_MAX", 1_000_000);
    let sizes: Vec<u64> = SIZES.iter().copied().filter(|&n| n <= max).collect();
    let base = std::env::var_os("CURVES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let svg_dir = std::env::var_os("CURVES_SVG_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/images"));
    let dir = tempfile::tempdir_in(&base).unwrap();
    println!(
        "oracle: {}\nscratch: {}\nsizes: {sizes:?}, run up to {run_max}\nload: {}",
        oracle_bin().display(),
        dir.path().display(),
        load()
    );
    let total = Instant::now();
    let mut results = Vec::new();
    for &n in &sizes {
        let need = n * DISK_BYTES_PER_EVENT;
        let free = free_bytes(dir.path());
        if free < need {
            println!(
                "stopping before {n} events: {} GB free, about {} GB needed",
                free / 1_000_000_000,
                need / 1_000_000_000
            );
            break;
        }
        println!("{n} events:");
        let home = dir.path().join(format!("logs-{n}"));
        logs_at(n, &home, &mut results);
        std::fs::remove_dir_all(&home).unwrap();
        if n <= run_max {
            let rd = dir.path().join(format!("run-{n}"));
            std::fs::create_dir_all(&rd).unwrap();
            run_at(n, &rd, &mut results);
            std::fs::remove_dir_all(&rd).unwrap();
        }
    }
    println!(
        "\ntotal {:.1} s, load {}\n",
        total.elapsed().as_secs_f64(),
        load()
    );
    println!("Throughput, events/s (wall time of the process):\n");
    table(&results, &sizes, |s| format!("{:.0}k", s.rate() / 1e3));
    println!("\nSeconds:\n");
    table(&results, &sizes, |s| format!("{:.3}", s.secs));
    println!("\nPeak RSS, MiB:\n");
    table(&results, &sizes, |s| format!("{:.1}", s.mib()));

    std::fs::create_dir_all(&svg_dir).unwrap();
    let tp = svg_dir.join("curves-throughput.svg");
    chart(
        &tp,
        "oracle throughput by log size (2 vCPU)",
        "events per second",
        &results,
        Sample::rate,
        None,
        false,
    )
    .unwrap();
    let mem = svg_dir.join("curves-memory.svg");
    chart(
        &mem,
        "oracle peak resident memory by log size (2 vCPU)",
        "peak RSS (MiB, log scale)",
        &results,
        Sample::mib,
        Some((100e6 / 1048576.0, "100 MB (95.4 MiB) target")),
        true,
    )
    .unwrap();
    println!("\nwrote {} and {}", tp.display(), mem.display());
}
