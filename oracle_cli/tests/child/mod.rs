//! Running the real `oracle` binary as a child and measuring it: its exit status after a
//! generous kill-after (so a regression that hangs fails instead of hanging the suite), its
//! peak resident memory (`wait4`'s `ru_maxrss`), and how many bytes it read (`/proc/<pid>/io`,
//! read while it is a zombie, before it is reaped).
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Long enough for any of these commands on a slow machine; only a hang reaches it.
pub const KILL_AFTER: Duration = Duration::from_secs(300);

/// How a child ended.
#[derive(Debug)]
pub struct Ended {
    /// The exit code, or `None` if a signal ended it (killed, aborted, out of memory).
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Peak resident set, in KiB.
    pub max_rss_kib: i64,
    /// `rchar` from `/proc/<pid>/io`: bytes the child read by any means.
    pub rchar: u64,
    /// The child was killed after [`KILL_AFTER`].
    pub killed: bool,
}

/// Kills `pid` after [`KILL_AFTER`] unless the returned flag is set first.
fn watchdog(pid: i32) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let step = Duration::from_millis(50);
        let mut waited = Duration::ZERO;
        while waited < KILL_AFTER {
            if flag.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(step);
            waited += step;
        }
        if !flag.load(Ordering::SeqCst) {
            // SAFETY: kill(2) on a pid; the child is not reaped before `done` is set.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    done
}

/// Waits for `child` (killing it after [`KILL_AFTER`]) and measures it.
pub fn wait(child: Child) -> Ended {
    let pid = child.id() as i32;
    let done = watchdog(pid);
    // Wait without reaping, so /proc/<pid>/io still describes the finished child.
    // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on our own child with a valid out-pointer.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT,
        )
    };
    assert_eq!(r, 0, "waitid: {}", std::io::Error::last_os_error());
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let rchar = io
        .lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter for wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 reaps our own child; `status` and `usage` are valid out-pointers.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let killed = !done.swap(true, Ordering::SeqCst);
    // The child is reaped here; `child` must not be waited on again.
    drop(child);
    Ended {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        max_rss_kib: usage.ru_maxrss,
        rchar,
        killed: killed && libc::WIFSIGNALED(status),
    }
}

/// Runs `cmd` with stdout and stderr to scratch files: how it ended, stdout, stderr.
pub fn run(mut cmd: Command) -> (Ended, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let ended = wait(child);
    let out = String::from_utf8_lossy(&std::fs::read(&out_path).unwrap()).into_owned();
    let err = String::from_utf8_lossy(&std::fs::read(&err_path).unwrap()).into_owned();
    (ended, out, err)
}

/// Makes a FIFO at `path` (no writer ever opens it: reading it would wait forever).
pub fn mkfifo(path: &std::path::Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo {}", path.display());
}
