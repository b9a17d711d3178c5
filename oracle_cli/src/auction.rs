//! `oracle auction`: a run's auction economy, rebuilt from its log: every auction with its
//! bids, winners, prices, scores, minted credits and basic income, then balances and supply.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use oracle_auction::tools::project;
use oracle_auction::{Economy, Pricing, Scoring, TieBreak, WinnerRecord};
use serde_json::{Value, json};

use crate::exit::{self, CliError};

#[derive(Args, Debug)]
pub struct AuctionArgs {
    /// Run id (under `<home>/runs`), run directory, or log file.
    run: PathBuf,
    /// Print the history and balances as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(home: &Path, a: AuctionArgs) -> Result<u8, CliError> {
    let paths = crate::resolve(home, &a.run)?;
    let events = oracle_host::inspect::events(&paths.log)?;
    let economy = project(&events).map_err(|e| CliError {
        code: exit::INTEGRITY,
        message: format!("{}: {e}", paths.log.display()),
        json: None,
        quiet: false,
    })?;
    let Some(economy) = economy else {
        return Err(CliError::input(format!(
            "{}: this run has no auction economy (it never called `auction.open`)",
            a.run.display()
        )));
    };
    let shown = a.run.display().to_string();
    if a.json {
        crate::out::json(&report_json(&shown, &economy))?;
    } else {
        out!("{}", report_text(&shown, &economy))?;
    }
    Ok(exit::OK)
}

fn report_json(shown: &str, e: &Economy) -> Value {
    let status = e.status();
    let artifacts: Vec<Value> = e
        .artifacts()
        .map(|(id, a)| {
            let (status, auction, score) = match &a.last {
                None => ("submitted", None, None),
                Some((k, s)) => (scoring_word(s), Some(*k), s.score()),
            };
            json!({"artifact": id, "owner": a.owner, "hash": a.hash, "status": status,
                   "auction": auction, "score": score})
        })
        .collect();
    let escrow = e.escrow();
    let held: u64 = status.balances.values().sum::<u64>() + escrow;
    json!({
        "log": shown,
        "tick": status.tick,
        "phase": status.phase,
        "config": e.config(),
        "auctions": e.history().collect::<Vec<_>>(),
        "artifacts": artifacts,
        "balances": status.balances,
        "escrow": status.escrow,
        "supply": {
            "initial": e.initial_supply(),
            "minted": e.minted(),
            "held": held,
            "conserved": e.check_conservation().is_ok(),
        },
    })
}

fn scoring_word(s: &Scoring) -> &'static str {
    match s {
        Scoring::Scored { .. } => "scored",
        Scoring::Duplicate { .. } => "duplicate",
        Scoring::Failed { .. } => "failed",
    }
}

fn winner_line(out: &mut String, w: &WinnerRecord) {
    let scoring = match &w.scoring {
        Scoring::Scored { score, reason } => format!("scored {score} ({reason})"),
        Scoring::Duplicate { of, .. } => format!("duplicate of `{of}`: score 0"),
        Scoring::Failed { reason } => format!("scoring failed ({reason})"),
    };
    let _ = write!(
        out,
        "  winner {}/{}: bid {}, price {}, paid {}",
        w.agent, w.artifact, w.bid, w.price, w.paid
    );
    if w.refunded > 0 {
        let _ = write!(out, " (refunded {})", w.refunded);
    }
    let _ = writeln!(out, "; {scoring}; minted {}", w.minted);
    if !w.basic_income.is_empty() {
        let shares: Vec<String> = w
            .basic_income
            .iter()
            .map(|(agent, n)| format!("{agent} {n}"))
            .collect();
        let _ = writeln!(out, "    basic income: {}", shares.join(", "));
    }
}

fn report_text(shown: &str, e: &Economy) -> String {
    let c = e.config();
    let s = e.status();
    let mut out = String::new();
    let phase = match s.phase {
        oracle_auction::Phase::Bidding => {
            format!(
                "auction {} takes bids until tick {}",
                s.auction, s.closes_at
            )
        }
        _ => format!("auction {} opens at tick {}", s.auction, s.opens_at),
    };
    let _ = writeln!(
        out,
        "economy of {shown}: tick {}, {} ({phase})",
        s.tick,
        s.phase.as_str()
    );
    let _ = writeln!(
        out,
        "rules: period {}, bidding window {}, first auction at tick {}, {} slot(s), minimum bid {}, mint ratio {}, {}, ties by {}, {}",
        c.period,
        c.bidding_window,
        c.first_auction_tick,
        c.slots_per_auction,
        c.minimum_bid,
        c.mint_ratio,
        match c.pricing {
            Pricing::SecondPrice => "second price",
            Pricing::FirstPrice => "first price",
        },
        match c.tie_break {
            TieBreak::FirstBid => "first bid",
            TieBreak::Seeded => "seed",
        },
        if c.refund_on_scoring_failure {
            "refund on scoring failure"
        } else {
            "no refund on scoring failure"
        },
    );
    for r in e.history() {
        let _ = write!(
            out,
            "\nauction {} (ticks {}..{})",
            r.auction, r.opened_at, r.closed_at
        );
        if r.bids.is_empty() {
            let _ = writeln!(out, ": no bids");
            continue;
        }
        let _ = writeln!(out);
        let bids: Vec<String> = r
            .bids
            .iter()
            .map(|b| format!("{}/{} {} @{}", b.agent, b.artifact, b.amount, b.tick))
            .collect();
        let _ = writeln!(out, "  bids: {}", bids.join(", "));
        for w in &r.winners {
            winner_line(&mut out, w);
        }
    }
    let _ = writeln!(out, "\n{:<16} {:>10} {:>10}", "agent", "balance", "escrow");
    for (agent, balance) in &s.balances {
        let escrow = s.escrow.get(agent).copied().unwrap_or(0);
        let _ = writeln!(out, "{agent:<16} {balance:>10} {escrow:>10}");
    }
    let held: u64 = s.balances.values().sum::<u64>() + e.escrow();
    let _ = writeln!(
        out,
        "supply: initial {} + minted {} = {}; held in balances and escrow: {held}{}",
        e.initial_supply(),
        e.minted(),
        e.initial_supply() + e.minted(),
        if e.check_conservation().is_ok() {
            " (conserved)"
        } else {
            " (NOT CONSERVED)"
        }
    );
    out
}
