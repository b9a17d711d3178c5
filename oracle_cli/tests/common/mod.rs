//! Helpers shared by the end-to-end tests that run the real `oracle` binary from the workspace
//! root (so fixture paths in its output are relative and stable).
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use oracle_core::Event;
use serde_json::Value;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `oracle ARGS` from the workspace root: exit code, stdout, stderr.
pub fn oracle(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oracle"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Copies a directory tree (test fixtures into a sandbox).
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A temporary directory holding a copy of the fixture plans and data, which is the working
/// directory of every command run in it (so plans' relative paths stay inside it).
pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["data", "plans", "economy", "docs"] {
            copy_dir(
                &root().join("fixtures").join(sub),
                &dir.path().join("fixtures").join(sub),
            );
        }
        Sandbox { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, text).unwrap();
        p
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_oracle"));
        c.args(args).current_dir(self.path());
        c
    }

    /// Runs `oracle ARGS` in the sandbox: exit code, stdout, stderr.
    pub fn oracle(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.command(args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs a command with `--json` output and parses its last stdout line.
    pub fn json(&self, args: &[&str]) -> (i32, Value) {
        let (code, out, err) = self.oracle(args);
        let line = out
            .lines()
            .last()
            .unwrap_or_else(|| panic!("no output; stderr: {err}"));
        let v = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
        (code, v)
    }

    pub fn log(&self, home: &str, run: &str) -> PathBuf {
        self.path()
            .join(home)
            .join("runs")
            .join(run)
            .join("events.jsonl")
    }

    pub fn events(&self, home: &str, run: &str) -> Vec<Event> {
        fs::read_to_string(self.log(home, run))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Rewrites one event's payload and recomputes every hash after it, so `verify` passes.
pub fn forge(log: &Path, seq: usize, edit: impl FnOnce(&mut Value)) {
    let text = fs::read_to_string(log).unwrap();
    let mut events: Vec<Event> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    edit(&mut events[seq].payload);
    events[seq].payload_hash = oracle_core::canon::payload_hash(&events[seq].payload).unwrap();
    oracle_core::event::relink(&mut events).unwrap();
    let mut out = Vec::new();
    for e in &events {
        out.extend(oracle_core::record::encode(e));
    }
    fs::write(log, out).unwrap();
}

/// `oracle ARGS` with `dir` as its working directory, not yet started.
pub fn command_in(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_oracle"));
    c.args(args).current_dir(dir);
    c
}

/// Runs `oracle ARGS` in `dir`: exit code, stdout, stderr.
pub fn oracle_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = command_in(dir, args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a `--json` command in `dir` and parses its last stdout line: exit code and value.
pub fn json_in(dir: &Path, args: &[&str]) -> (i32, Value) {
    let (code, out, err) = oracle_in(dir, args);
    let line = out
        .lines()
        .last()
        .unwrap_or_else(|| panic!("{args:?}: no output; stderr: {err}"));
    let v = serde_json::from_str(line).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}\n{err}"));
    (code, v)
}

/// The events of a log's complete records (a torn last line, if any, is left out).
pub fn parse_events(bytes: &[u8]) -> Vec<Event> {
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    bytes[..complete]
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// SplitMix64: a tiny seeded generator, so that tests which vary timings or orders do so the
/// same way on every run (no unseeded randomness in tests).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}
