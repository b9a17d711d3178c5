//! The auction tools as the runtime calls them: JSON in, JSON out, against an economy.
//!
//! `auction.open`, `auction.submit`, `auction.bid` and `auction.advance` change the economy;
//! `auction.status` and `auction.check` read it. A call is applied to a copy and kept only when
//! it succeeds. The output of `auction.advance` records every scorer answer it used, so a
//! recorded call can be applied again without the scorer ([`apply_recorded`]): that is how
//! replay and `oracle auction` rebuild the economy from a log.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Answer, AuctionError, Config, Economy, ScoreRequest, Scoring};

pub const OPEN: &str = "auction.open";
pub const SUBMIT: &str = "auction.submit";
pub const BID: &str = "auction.bid";
pub const ADVANCE: &str = "auction.advance";
pub const STATUS: &str = "auction.status";
pub const CHECK: &str = "auction.check";

/// Whether a name is one of the auction tools.
pub fn is_auction_tool(name: &str) -> bool {
    matches!(name, OPEN | SUBMIT | BID | ADVANCE | STATUS | CHECK)
}

fn input<T: for<'de> Deserialize<'de>>(v: &Value) -> Result<T, AuctionError> {
    T::deserialize(v).map_err(|e| AuctionError::Input(e.to_string()))
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    // Invariant: every output type is plain data with string keys and integer numbers.
    serde_json::to_value(v).expect("auction outputs always convert to JSON")
}

/// `auction.open`'s input: `accounts` and the rules, side by side. The rules are read from the
/// remaining fields so that `Config`'s `deny_unknown_fields` holds (serde's `flatten` would
/// silently drop a misspelt rule and keep its default).
fn open_input(v: &Value) -> Result<(BTreeMap<String, u64>, Config), AuctionError> {
    let mut fields: serde_json::Map<String, Value> = input(v)?;
    let accounts = fields
        .remove("accounts")
        .ok_or_else(|| AuctionError::Input("missing field `accounts`".into()))?;
    Ok((input(&accounts)?, input(&Value::Object(fields))?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitInput {
    agent: String,
    artifact: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BidInput {
    agent: String,
    artifact: String,
    amount: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdvanceInput {
    to: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckInput {
    artifact: String,
}

/// Runs auction tool `tool` with `input` against `economy` (`None` until `auction.open`).
/// `seed` is the run's seed (kept by `auction.open` for the seeded tie-break); `scorer` answers
/// for `auction.advance`. On error nothing changes.
pub fn call(
    economy: &mut Option<Economy>,
    tool: &str,
    input_value: &Value,
    seed: u64,
    scorer: &mut dyn FnMut(&ScoreRequest<'_>) -> Answer,
) -> Result<Value, AuctionError> {
    if tool == OPEN {
        if let Some(e) = economy {
            return Err(AuctionError::AlreadyOpen { tick: e.tick() });
        }
        let (accounts, config) = open_input(input_value)?;
        let e = Economy::open(config, &accounts, seed)?;
        let out = json!({
            "config": to_value(e.config()),
            "accounts": accounts,
            "initial_supply": e.initial_supply(),
            "tick": e.tick(),
        });
        *economy = Some(e);
        return Ok(out);
    }
    let Some(current) = economy.as_ref() else {
        return Err(AuctionError::NotOpen);
    };
    let mut next = current.clone();
    let out = match tool {
        SUBMIT => {
            let i: SubmitInput = input(input_value)?;
            let hash = next.submit(&i.agent, &i.artifact, &i.content)?;
            json!({
                "agent": i.agent,
                "artifact": i.artifact,
                "hash": hash,
                "bytes": i.content.len() as u64,
                "tick": next.tick(),
            })
        }
        BID => {
            let i: BidInput = input(input_value)?;
            let (auction, previous) = next.bid(&i.agent, &i.artifact, i.amount)?;
            json!({
                "agent": i.agent,
                "artifact": i.artifact,
                "auction": auction,
                "amount": i.amount,
                "previous": previous,
                "balance": next.balance(&i.agent).unwrap_or(0),
                "escrow": next.escrow_by_agent().get(&i.agent).copied().unwrap_or(0),
                "tick": next.tick(),
            })
        }
        ADVANCE => {
            let i: AdvanceInput = input(input_value)?;
            let from = next.tick();
            let resolved = next.advance(i.to, scorer)?;
            let (phase, auction) = next.phase_at(next.tick());
            json!({
                "from": from,
                "to": i.to,
                "phase": phase.as_str(),
                "auction": auction,
                "resolved": to_value(&resolved),
            })
        }
        STATUS => {
            input::<BTreeMap<String, Value>>(input_value).and_then(|m| {
                if m.is_empty() {
                    Ok(())
                } else {
                    Err(AuctionError::Input(
                        "auction.status takes no arguments".into(),
                    ))
                }
            })?;
            to_value(&next.status())
        }
        CHECK => {
            let i: CheckInput = input(input_value)?;
            check(&next, &i.artifact)?
        }
        other => {
            return Err(AuctionError::Input(format!(
                "`{other}` is not an auction tool"
            )));
        }
    };
    *economy = Some(next);
    Ok(out)
}

/// `auction.check`: where an artifact stands.
fn check(e: &Economy, id: &str) -> Result<Value, AuctionError> {
    let a = e
        .artifact(id)
        .ok_or_else(|| AuctionError::UnknownArtifact(id.to_owned()))?;
    let bid = e.open_bid(&a.owner, id);
    let (status, auction, score, reason) = match (&a.last, bid) {
        (_, Some(_)) => ("bid", None, None, None),
        (None, None) => ("submitted", None, None, None),
        (Some((k, s)), None) => match s {
            Scoring::Scored { score, reason } => {
                ("scored", Some(*k), Some(*score), Some(reason.clone()))
            }
            Scoring::Duplicate { score, of } => (
                "duplicate",
                Some(*k),
                Some(*score),
                Some(format!("same content as `{of}`, scored earlier")),
            ),
            Scoring::Failed { reason } => ("failed", Some(*k), None, Some(reason.clone())),
        },
    };
    Ok(json!({
        "artifact": id,
        "owner": a.owner,
        "hash": a.hash,
        "status": status,
        "bid": bid,
        "auction": auction,
        "score": score,
        "reason": reason,
    }))
}

/// The scorer answers an `auction.advance` output records, in the order they were asked.
pub fn recorded_answers(output: &Value) -> Result<Vec<Answer>, AuctionError> {
    let resolved: Vec<super::AuctionResult> = output
        .get("resolved")
        .map(input)
        .transpose()?
        .unwrap_or_default();
    Ok(resolved
        .iter()
        .flat_map(|r| r.winners.iter().filter_map(|w| w.scoring.answer()))
        .collect())
}

/// A scorer that gives back recorded answers in order. Asked more often than it has answers,
/// it answers with a failure and counts the shortfall in `missing`.
pub fn replay_scorer(
    answers: Vec<Answer>,
    missing: &mut u64,
) -> impl FnMut(&ScoreRequest<'_>) -> Answer + '_ {
    let mut it = answers.into_iter();
    move |_req| {
        it.next().unwrap_or_else(|| {
            *missing += 1;
            Answer::Failed {
                reason: "no recorded answer".to_owned(),
            }
        })
    }
}

/// Why a recorded call could not be applied again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("the recorded call is refused now: {0}")]
    Refused(AuctionError),
    #[error("the recorded output is not what the call gives")]
    Mismatch,
}

/// Applies a recorded successful call (its input and its recorded output) to `economy`,
/// taking scorer answers from the output. The output the call gives must equal the recorded
/// one, so a log whose economy was edited is caught.
pub fn apply_recorded(
    economy: &mut Option<Economy>,
    tool: &str,
    input_value: &Value,
    output: &Value,
    seed: u64,
) -> Result<(), ApplyError> {
    let answers = if tool == ADVANCE {
        recorded_answers(output).map_err(ApplyError::Refused)?
    } else {
        Vec::new()
    };
    let mut missing = 0;
    let mut next = economy.clone();
    let given = {
        let mut scorer = replay_scorer(answers, &mut missing);
        call(&mut next, tool, input_value, seed, &mut scorer).map_err(ApplyError::Refused)?
    };
    if missing > 0 || &given != output {
        return Err(ApplyError::Mismatch);
    }
    *economy = next;
    Ok(())
}

/// Why a log's economy could not be rebuilt.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProjectError {
    #[error("event {seq}: {message}")]
    Event { seq: u64, message: String },
    #[error("event {seq}: `{tool}` outcome does not follow from the economy before it: {source}")]
    Apply {
        seq: u64,
        tool: String,
        #[source]
        source: ApplyError,
    },
}

/// Rebuilds a run's economy from its events (`None` if it never opened one): every successful
/// auction call is applied again with its recorded input and scorer answers, and must give its
/// recorded output. The seed is the one `run_started` recorded.
pub fn project<'a>(
    events: impl IntoIterator<Item = &'a oracle_core::Event>,
) -> Result<Option<Economy>, ProjectError> {
    use oracle_core::Payload;
    let mut seed = 0;
    let mut economy = None;
    // Inputs of auction calls whose outcome has not been read yet, by the seq of `tool_called`.
    let mut calls: BTreeMap<u64, (String, Value)> = BTreeMap::new();
    for ev in events {
        let kind = ev.kind;
        let relevant = matches!(
            kind,
            oracle_core::EventKind::RunStarted
                | oracle_core::EventKind::ToolCalled
                | oracle_core::EventKind::ToolReturned
                | oracle_core::EventKind::ToolFailed
        );
        if !relevant {
            continue;
        }
        let payload = ev.typed().map_err(|e| ProjectError::Event {
            seq: ev.seq,
            message: e.to_string(),
        })?;
        match payload {
            Payload::RunStarted(s) => seed = s.seed,
            Payload::ToolCalled(c) if is_auction_tool(&c.tool) => {
                calls.insert(ev.seq, (c.tool, c.input));
            }
            Payload::ToolFailed(f) if is_auction_tool(&f.tool) => {
                for p in &ev.parents {
                    calls.remove(p);
                }
            }
            Payload::ToolReturned(r) if is_auction_tool(&r.tool) => {
                let call = ev.parents.iter().find_map(|p| calls.remove(p));
                let Some((tool, input)) = call else {
                    return Err(ProjectError::Event {
                        seq: ev.seq,
                        message: format!("`{}` returned without a recorded call", r.tool),
                    });
                };
                apply_recorded(&mut economy, &tool, &input, &r.output, seed).map_err(|source| {
                    ProjectError::Apply {
                        seq: ev.seq,
                        tool,
                        source,
                    }
                })?;
            }
            _ => {}
        }
    }
    Ok(economy)
}
