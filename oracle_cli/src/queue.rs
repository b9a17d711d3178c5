//! `oracle queue set|list`: parse, call the host's queues (`oracle_host::queue`), print. Runs
//! join a queue with `oracle run --queue NAME` (and `--priority`, `--partition`).

use std::path::Path;

use clap::{Args, Subcommand};
use oracle_host::Home;
use oracle_host::queue::{Queue, QueueView};

use crate::exit::{self, CliError};
use crate::run::host_error;

#[derive(Args, Debug)]
pub struct QueueArgs {
    #[command(subcommand)]
    command: QueueCommand,
}

#[derive(Subcommand, Debug)]
enum QueueCommand {
    /// Make a queue, or change its limits: at most `--concurrency` of its runs at once, at most
    /// `--rate` starts, at most `--partition-concurrency` runs of one partition at once.
    Set(SetArgs),
    /// List the queues with their runs started and waiting.
    List(ListArgs),
}

#[derive(Args, Debug)]
struct SetArgs {
    /// The queue's name: letters, digits, `-` and `_`.
    name: String,
    /// Runs of the queue driven at once, at most (1 to 10,000).
    #[arg(long, value_name = "N")]
    concurrency: u32,
    /// Starts at most: `N/s`, `N/m` or `N/h` (per second, minute or hour).
    #[arg(long, value_name = "N/s|m|h")]
    rate: Option<String>,
    /// Runs of one partition (`oracle run --partition KEY`) driven at once, at most.
    #[arg(long, value_name = "N")]
    partition_concurrency: Option<u32>,
    /// Print the queue as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ListArgs {
    /// One JSON object per queue, one a line.
    #[arg(long)]
    json: bool,
}

/// Where the queues are: a file home's directory or a store's table.
enum Kept {
    Home(Home),
    Store(oracle_host::Database),
}

impl Kept {
    fn set(&self, q: Queue) -> Result<Queue, oracle_host::HostError> {
        match self {
            Kept::Home(h) => h.queue_set(q),
            Kept::Store(s) => s.queue_set(q),
        }
    }

    fn all(&self) -> Result<Vec<QueueView>, oracle_host::HostError> {
        match self {
            Kept::Home(h) => h.queues(),
            Kept::Store(s) => s.queues(),
        }
    }
}

impl QueueArgs {
    fn json(&self) -> bool {
        match &self.command {
            QueueCommand::Set(s) => s.json,
            QueueCommand::List(l) => l.json,
        }
    }
}

pub fn run(home: &Path, a: QueueArgs) -> Result<u8, CliError> {
    let host = Home::open(home).map_err(|e| host_error(e, a.json()))?;
    common(&Kept::Home(host), a)
}

/// `oracle queue ... --store URL`: the store's queues, which its workers' claims respect.
pub fn run_store(url: &str, a: QueueArgs) -> Result<u8, CliError> {
    let store = oracle_host::Database::connect(url).map_err(|e| host_error(e.into(), a.json()))?;
    common(&Kept::Store(store), a)
}

fn common(kept: &Kept, a: QueueArgs) -> Result<u8, CliError> {
    let json = a.json();
    match a.command {
        QueueCommand::Set(s) => {
            let q = kept
                .set(Queue {
                    name: s.name,
                    concurrency: s.concurrency,
                    rate: s.rate,
                    partition_concurrency: s.partition_concurrency,
                })
                .map_err(|e| host_error(e, json))?;
            if json {
                crate::out::json(&serde_json::json!({"ok": true, "queue": q}))?;
            } else {
                outln!("queue {} set: {}", q.name, limits(&q))?;
            }
        }
        QueueCommand::List(_) => {
            let all = kept.all().map_err(|e| host_error(e, json))?;
            print_list(&all, json)?;
        }
    }
    Ok(exit::OK)
}

fn limits(q: &Queue) -> String {
    let mut text = format!("concurrency {}", q.concurrency);
    if let Some(r) = &q.rate {
        text.push_str(&format!(", rate {r}"));
    }
    if let Some(p) = q.partition_concurrency {
        text.push_str(&format!(", partition concurrency {p}"));
    }
    text
}

fn print_list(all: &[QueueView], json: bool) -> Result<(), CliError> {
    if json {
        for v in all {
            crate::out::json(&serde_json::to_value(v).unwrap_or_default())?;
        }
        return Ok(());
    }
    if all.is_empty() {
        outln!("no queues (oracle queue set NAME --concurrency N makes one)")?;
        return Ok(());
    }
    for v in all {
        outln!(
            "{:<20} running {:>4}  waiting {:>6}  {}",
            v.queue.name,
            v.running,
            v.waiting,
            limits(&v.queue)
        )?;
    }
    Ok(())
}
