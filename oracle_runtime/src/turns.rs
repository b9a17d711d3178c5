//! Keeps an agent's process and the engine on one CPU while they take turns over the pipe.
//!
//! The protocol is strictly turn-based: while the agent decides the engine waits on its stdout,
//! and while the engine records the agent waits on its stdin. On a virtual machine, a reader
//! asleep on another CPU is woken by an interrupt to a halted virtual CPU, which costs as much
//! as the decision itself: a 10,000-step Python agent took 1.3 s unpinned and 0.55 s with both
//! on one CPU (AMD EPYC, 2 vCPU; BENCHMARKS.md "Code agents over the protocol"). So, for the
//! length of each exchange, the engine's thread is held on the CPU it runs on and the agent's
//! process is moved there; between exchanges the engine's thread gets its own mask back, so
//! the tool calls it executes (threads, processes) run wherever the scheduler puts them.
//!
//! This changes when things run, never what is recorded. Every call is best effort: where the
//! system refuses (a container's CPU set, another operating system) the turns simply go on
//! unpinned.

/// Where the agent was last moved, and the engine thread's own mask while an exchange holds it.
#[derive(Debug, Default)]
pub struct Turns {
    /// The agent's process id (0: unknown, nothing is moved).
    agent: u32,
    /// The CPU the agent was last moved to.
    cpu: Option<usize>,
    /// The engine thread's mask before the exchange began, to give back at its end.
    #[cfg(target_os = "linux")]
    own: Option<rustix::thread::CpuSet>,
}

impl Turns {
    /// Turns with the agent whose process id is `agent`.
    pub fn new(agent: u32) -> Turns {
        Turns {
            agent,
            ..Turns::default()
        }
    }

    /// Holds the engine's thread on its CPU and moves the agent there, for one exchange.
    #[cfg(target_os = "linux")]
    pub fn begin(&mut self) {
        use rustix::thread::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
        let Ok(own) = sched_getaffinity(None) else {
            return;
        };
        let cpu = sched_getcpu();
        if cpu >= CpuSet::MAX_CPU || !own.is_set(cpu) {
            return;
        }
        let mut one = CpuSet::new();
        one.set(cpu);
        if self.cpu != Some(cpu) {
            let pid = i32::try_from(self.agent)
                .ok()
                .and_then(rustix::process::Pid::from_raw);
            let Some(pid) = pid else {
                return;
            };
            if sched_setaffinity(Some(pid), &one).is_err() {
                return;
            }
            self.cpu = Some(cpu);
        }
        if sched_setaffinity(None, &one).is_ok() {
            self.own = Some(own);
        }
    }

    /// Gives the engine's thread its own mask back.
    #[cfg(target_os = "linux")]
    pub fn end(&mut self) {
        if let Some(own) = self.own.take() {
            // Best effort, as in `begin`: a refusal leaves the thread on one CPU, slower at
            // parallel tool calls but correct.
            let _ = rustix::thread::sched_setaffinity(None, &own);
        }
    }

    /// Elsewhere the turns go on unpinned.
    #[cfg(not(target_os = "linux"))]
    pub fn begin(&mut self) {}

    /// Elsewhere the turns go on unpinned.
    #[cfg(not(target_os = "linux"))]
    pub fn end(&mut self) {}
}

impl Drop for Turns {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::Turns;
    use rustix::process::Pid;
    use rustix::thread::{CpuSet, sched_getaffinity};

    fn count(set: &CpuSet) -> usize {
        (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).count()
    }

    #[test]
    fn an_exchange_holds_both_on_one_cpu_and_gives_the_engine_its_mask_back() {
        let own = sched_getaffinity(None).expect("this thread's mask");
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep runs");
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("a pid")).expect("not 0");
        let mut turns = Turns::new(child.id());
        turns.begin();
        let during = sched_getaffinity(None).expect("this thread's mask");
        let agent = sched_getaffinity(Some(pid)).expect("the child's mask");
        turns.end();
        let after = sched_getaffinity(None).expect("this thread's mask");
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(count(&during), 1, "the engine is held on one CPU");
        assert!(during == agent, "the agent is moved to the engine's CPU");
        assert!(after == own, "the engine's mask is given back");
    }

    #[test]
    fn turns_with_an_unknown_process_move_nothing_and_hold_nothing() {
        let own = sched_getaffinity(None).expect("this thread's mask");
        let mut turns = Turns::new(0);
        turns.begin();
        let during = sched_getaffinity(None).expect("this thread's mask");
        turns.end();
        assert!(during == own);
    }
}
