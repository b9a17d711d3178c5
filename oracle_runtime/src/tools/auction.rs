//! The auction tools' declarations: `auction.open`, `auction.submit`, `auction.bid`,
//! `auction.advance`, `auction.status`, `auction.check`.
//!
//! Declarations only ([`crate::tool::Registry::declare`]): the engine hands each call to the
//! run's economy ([`crate::domain::economy`]), whose logic lives in `oracle_auction::tools`.

use oracle_auction::tools::{ADVANCE, BID, CHECK, OPEN, STATUS, SUBMIT};
use serde_json::{Value, json};

use super::{boolean, count, decl, object, string};
use crate::tool::ToolDecl;

fn positive() -> Value {
    json!({"type": "integer", "minimum": 1})
}

fn enum_of(values: &[&str]) -> Value {
    json!({"type": "string", "enum": values})
}

/// The economy's tools.
pub fn decls() -> [ToolDecl; 6] {
    [OPEN, SUBMIT, BID, ADVANCE, STATUS, CHECK].map(auction_tool)
}

/// One auction tool: its name, description, input schema and the output fields it always has.
fn auction_tool(name: &'static str) -> ToolDecl {
    let (description, input, required_out): (&str, Value, &[&str]) = match name {
        OPEN => (
            "Open the run's auction economy: accounts with their starting credits, and the auction rules (period, bidding_window, first_auction_tick, slots_per_auction, minimum_bid, mint_ratio, refund_on_scoring_failure, pricing, tie_break).",
            object(
                &[
                    (
                        "accounts",
                        json!({"type": "object", "additionalProperties": count()}),
                    ),
                    ("period", positive()),
                    ("bidding_window", positive()),
                    ("first_auction_tick", count()),
                    ("slots_per_auction", positive()),
                    ("minimum_bid", positive()),
                    ("mint_ratio", positive()),
                    ("refund_on_scoring_failure", boolean()),
                    ("pricing", enum_of(&["second_price", "first_price"])),
                    ("tie_break", enum_of(&["first_bid", "seeded"])),
                ],
                &["accounts"],
            ),
            &["config", "accounts", "initial_supply", "tick"],
        ),
        SUBMIT => (
            "Submit an agent's artifact (its text) for later auctions; its BLAKE3 content hash detects duplicates.",
            object(
                &[
                    ("agent", string()),
                    ("artifact", string()),
                    ("content", string()),
                ],
                &["agent", "artifact", "content"],
            ),
            &["agent", "artifact", "hash", "bytes", "tick"],
        ),
        BID => (
            "Bid (or raise or lower a bid) to have an agent's artifact scored in the auction taking bids now; the amount is held in escrow.",
            object(
                &[
                    ("agent", string()),
                    ("artifact", string()),
                    ("amount", count()),
                ],
                &["agent", "artifact", "amount"],
            ),
            &[
                "agent", "artifact", "auction", "amount", "previous", "balance", "escrow", "tick",
            ],
        ),
        ADVANCE => (
            "Move the economy's clock to tick `to`, resolving every auction that closes on the way: winners pay, losers are refunded, winning artifacts are scored by the scorer, credits are minted and basic income paid.",
            object(&[("to", count())], &["to"]),
            &["from", "to", "phase", "auction", "resolved"],
        ),
        STATUS => (
            "The economy now: tick, phase, the auction taking bids or the next one, balances, escrow and supply.",
            object(&[], &[]),
            &["tick", "phase", "auction", "balances", "escrow"],
        ),
        CHECK => (
            "Where an artifact stands: submitted, bid, scored, duplicate or failed, with its score and reason.",
            object(&[("artifact", string())], &["artifact"]),
            &["artifact", "owner", "status"],
        ),
        // Invariant: `decls` passes only the names matched above.
        other => unreachable!("no auction tool is named {other}"),
    };
    decl(
        name,
        description,
        crate::domain::economy::EFFECT,
        input,
        json!({"type": "object", "required": required_out}),
        None,
    )
}
