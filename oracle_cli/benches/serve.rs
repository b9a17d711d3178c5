//! Load on `oracle serve` (issue 20), against the real binary on 127.0.0.1 (BENCHMARKS.md):
//!
//! - requests per second for the run list (`GET /api/v1/runs`) and for event paging
//!   (`GET /api/v1/runs/big/events?from=X&limit=100`, X spread over the log) on a home holding a
//!   1M-event run (`oracle synth`), with 4 client threads on keep-alive connections for 5 s each;
//! - SSE fan-out: 1,000 clients tail a small suspended run (`/events/stream`); `oracle resume`
//!   then appends its last events, and the time until every client has the `run_finished`
//!   event is measured, with the server's resident memory while the 1,000 are connected.
//!
//! `cargo bench -p oracle_cli --bench serve`. Prints its figures; asserts nothing about time.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const ORACLE: &str = env!("CARGO_BIN_EXE_oracle");
const EVENTS: u64 = 1_000_000;
const CLIENT_THREADS: u64 = 4;
const LOAD_S: u64 = 5;
const SSE_CLIENTS: usize = 1000;

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn oracle(home: &Path, args: &[&str]) {
    let st = Command::new(ORACLE)
        .arg("--home")
        .arg(home)
        .args(args)
        .current_dir(home)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.code().is_some());
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Requests per second of `path(i)` for LOAD_S seconds over CLIENT_THREADS keep-alive clients.
fn rate(base: &str, path: impl Fn(u64) -> String + Send + Sync + 'static) -> f64 {
    let path = Arc::new(path);
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(LOAD_S);
    let threads: Vec<_> = (0..CLIENT_THREADS)
        .map(|t| {
            let (base, path, done) = (base.to_owned(), path.clone(), done.clone());
            std::thread::spawn(move || {
                let agent = ureq::Agent::new_with_defaults();
                let mut i = t;
                while Instant::now() < until {
                    let mut r = agent.get(format!("{base}{}", path(i))).call().unwrap();
                    let _ = r.body_mut().read_to_vec().unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                    i += CLIENT_THREADS;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / LOAD_S as f64
}

fn main() {
    // The machine line first: BENCHMARKS.md names the CPU of every figure.
    eprintln!("{}", oracle_runtime::machine::line());
    // `cargo bench` passes `--bench`; nothing else to parse.
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap();
    let t = Instant::now();
    oracle(
        &home,
        &[
            "synth",
            "--events",
            &EVENTS.to_string(),
            "--run",
            "big",
            "--durability",
            "none",
        ],
    );
    println!(
        "synth: {EVENTS} events in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    std::fs::write(
        home.join("ask.plan"),
        "plan ask version 1\nq = human.ask { question: \"go?\" }\nn = text.count { text: \"done\" }\n  after q\n",
    )
    .unwrap();
    oracle(&home, &["run", "ask.plan"]);

    let t = Instant::now();
    let mut child = Command::new(ORACLE)
        .arg("--home")
        .arg(&home)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--read-open",
            "--streams-max",
            "2000",
        ])
        .current_dir(&home)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid = child.id();
    let _server = Killed(child);
    let base = line.trim().strip_prefix("listening ").unwrap().to_owned();
    // The first answer waits for the watcher's first look at every run.
    ureq::get(format!("{base}/api/v1/runs")).call().unwrap();
    println!(
        "server ready in {:.1} s, {} MiB resident",
        t.elapsed().as_secs_f64(),
        rss_kib(pid) / 1024
    );

    let runs = rate(&base, |_| "/api/v1/runs".to_owned());
    println!("GET /api/v1/runs: {runs:.0} requests/s ({CLIENT_THREADS} clients)");
    let pages = rate(&base, |i| {
        // Spread over the whole log, deterministically.
        let from = i.wrapping_mul(2_654_435_761) % (EVENTS - 100);
        format!("/api/v1/runs/big/events?from={from}&limit=100")
    });
    println!(
        "GET /api/v1/runs/big/events?limit=100 at spread offsets: {pages:.0} requests/s ({CLIENT_THREADS} clients), {:.0} events/s",
        pages * 100.0
    );
    println!("after paging: {} MiB resident", rss_kib(pid) / 1024);

    // SSE fan-out.
    let addr = base.strip_prefix("http://").unwrap().to_owned();
    let ready = Arc::new(Barrier::new(SSE_CLIENTS + 1));
    let clients: Vec<_> = (0..SSE_CLIENTS)
        .map(|_| {
            let (addr, ready) = (addr.clone(), ready.clone());
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    let mut s = TcpStream::connect(&addr).unwrap();
                    write!(s, "GET /api/v1/runs/ask-1/events/stream?from=5 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
                    let mut r = BufReader::new(s);
                    let mut l = String::new();
                    r.read_line(&mut l).unwrap();
                    assert!(l.contains("200"), "{l}");
                    ready.wait();
                    loop {
                        l.clear();
                        if r.read_line(&mut l).unwrap() == 0 {
                            return None;
                        }
                        if l.contains("run_finished") {
                            return Some(Instant::now());
                        }
                    }
                })
                .unwrap()
        })
        .collect();
    ready.wait();
    std::thread::sleep(Duration::from_millis(500));
    println!(
        "{SSE_CLIENTS} SSE clients connected: {} MiB resident",
        rss_kib(pid) / 1024
    );
    let start = Instant::now();
    oracle(
        &home,
        &["resume", "ask-1", "--step", "q", "--value", "\"yes\""],
    );
    let appended = start.elapsed();
    let mut last = start;
    let mut got = 0;
    for c in clients {
        if let Some(at) = c.join().unwrap() {
            got += 1;
            last = last.max(at);
        }
    }
    println!(
        "SSE fan-out: {got} of {SSE_CLIENTS} clients had the run's last event {:.0} ms after `oracle resume` started ({:.0} ms to append it)",
        (last - start).as_secs_f64() * 1000.0,
        appended.as_secs_f64() * 1000.0
    );
    let _ = std::io::stdout().flush();
}
