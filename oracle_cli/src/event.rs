//! `oracle signal RUN NAME --value JSON`: sends an outside event to a run, for its
//! `wait.event` steps (docs/PLAN.md, "Events"). One host call, `Home::send_event` (over a
//! store, checked and queued as an `event` signal for the workers).

use std::path::Path;

use clap::Args;
use oracle_host::signal::{EventSignal, Signal};
use serde_json::{Value, json};

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct SignalArgs {
    /// Run id (under `<home>/runs`).
    run: String,
    /// The event's name: a `wait.event { name: NAME }` of the run's plan waits on it.
    name: String,
    /// The event's value, as JSON (checked against the waiting steps' `schema`).
    #[arg(long, default_value = "null")]
    value: String,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

impl SignalArgs {
    fn value(&self) -> Result<Value, CliError> {
        serde_json::from_str(&self.value)
            .map_err(|e| CliError::input(format!("--value is not JSON: {e}")))
    }

    pub(crate) fn json_flag(&self) -> bool {
        self.json
    }

    /// The store's signal for it.
    pub(crate) fn signal(&self) -> Result<Signal, CliError> {
        Ok(Signal::Event(EventSignal {
            run: self.run.clone(),
            name: self.name.clone(),
            value: self.value()?,
        }))
    }
}

/// `oracle signal`: keeps the event for the run and, when the run waits on it, resumes it.
pub(crate) fn run(home: &Path, a: SignalArgs) -> Result<u8, CliError> {
    let value = a.value()?;
    let host = crate::run::host(home, a.json)?;
    let sent = host
        .send_event(&a.run, &a.name, &value)
        .map_err(|e| crate::run::host_error(e, a.json))?;
    let status = sent
        .resumed
        .as_ref()
        .map(|s| oracle_host::ending_word(&s.report.ending));
    if a.json {
        crate::out::json(&json!({
            "ok": true, "run": sent.run, "event": a.name, "n": sent.n,
            "delivered": sent.resumed.is_some(), "status": status,
        }))?;
        return Ok(exit::OK);
    }
    outln!("run      {}", sent.run)?;
    outln!("event    {} #{} kept", a.name, sent.n)?;
    match status {
        Some(s) => outln!("status   delivered; the run is {s}")?,
        None => outln!("status   kept until the run waits on it")?,
    }
    Ok(exit::OK)
}
