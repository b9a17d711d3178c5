//! The auction oracle: scored artifact auctions with escrow, minting and basic income, as a
//! pure reducer over logical ticks (docs/AUCTION.md).
//!
//! An [`Economy`] holds credit balances, bids in escrow, submitted artifacts, the content hashes
//! already scored, and the history of resolved auctions. It changes only through operations
//! (`open`, `submit`, `bid`, `advance`), each applied to a copy and kept only when it succeeds,
//! so a refused operation changes nothing. Time moves only by `advance`; an auction whose
//! bidding window closes on the way is resolved there, and the winners' scores are asked of a
//! scorer passed in by the caller (the runtime records each answer, and replay passes the
//! recorded ones back). Nothing here reads a clock or draws an unseeded random number: the
//! seeded tie-break hashes the run's seed.
//!
//! Invariant, checked by [`Economy::check_conservation`] and property-tested: the sum of all
//! balances and all escrow equals the initial supply plus everything minted.

mod economy;
pub mod rubric;
pub mod tools;

use serde::{Deserialize, Serialize};

pub use economy::{
    Answer, Artifact, AuctionResult, BidRecord, Economy, Phase, ScoreRequest, Scoring, Status,
    WinnerRecord, content_hash,
};

/// Most accounts one economy holds.
pub const ACCOUNTS_MAX: u64 = 1_000;
/// Most artifacts one economy holds.
pub const ARTIFACTS_MAX: u64 = 10_000;
/// Largest artifact (bytes of text). Kept well under a tool input's limit.
pub const ARTIFACT_BYTES_MAX: u64 = 1 << 20;
/// Most open bids in one auction.
pub const BIDS_PER_AUCTION_MAX: u64 = 10_000;
/// Most winners per auction.
pub const SLOTS_MAX: u64 = 100;
/// Most auctions one `advance` may resolve (each is recorded in its output).
pub const AUCTIONS_PER_ADVANCE_MAX: u64 = 1_000;
/// Longest name of an account or artifact (bytes).
pub const NAME_BYTES_MAX: u64 = 128;
/// Highest score a scorer may give.
pub const SCORE_MAX: u64 = 100;

/// What a winner pays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pricing {
    /// The highest losing bid, or the minimum bid when nobody lost.
    #[default]
    SecondPrice,
    /// The winner's own bid.
    FirstPrice,
}

/// How bids of equal amount are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TieBreak {
    /// The bid that reached its amount first wins (a raise or a lower counts as a new bid).
    #[default]
    FirstBid,
    /// A permutation drawn from the run's seed: BLAKE3 of seed ‖ auction ‖ agent ‖ artifact.
    Seeded,
}

/// An economy's rules, fixed when it opens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Ticks from one auction's opening to the next's.
    pub period: u64,
    /// Ticks an auction accepts bids, from its opening; at most `period`.
    pub bidding_window: u64,
    /// When the first auction opens.
    pub first_auction_tick: u64,
    /// Winners per auction.
    pub slots_per_auction: u64,
    /// Lowest accepted bid.
    pub minimum_bid: u64,
    /// A winner is minted `score / mint_ratio` credits.
    pub mint_ratio: u64,
    /// When scoring fails, the winner pays nothing (its whole escrow comes back).
    pub refund_on_scoring_failure: bool,
    pub pricing: Pricing,
    pub tie_break: TieBreak,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            period: 10,
            bidding_window: 5,
            first_auction_tick: 5,
            slots_per_auction: 1,
            minimum_bid: 1,
            mint_ratio: 10,
            refund_on_scoring_failure: true,
            pricing: Pricing::SecondPrice,
            tie_break: TieBreak::FirstBid,
        }
    }
}

impl Config {
    /// Refuses rules that cannot run: an empty window or period, a window longer than its
    /// period, no slots, a zero mint ratio or minimum bid.
    pub fn check(&self) -> Result<(), AuctionError> {
        let bad = |field: &'static str, reason: String| Err(AuctionError::Config { field, reason });
        if self.period == 0 {
            return bad("period", "must be at least 1".into());
        }
        if self.bidding_window == 0 || self.bidding_window > self.period {
            return bad(
                "bidding_window",
                format!("must be from 1 to the period ({})", self.period),
            );
        }
        if self.slots_per_auction == 0 || self.slots_per_auction > SLOTS_MAX {
            return bad(
                "slots_per_auction",
                format!("must be from 1 to slots_max = {SLOTS_MAX}"),
            );
        }
        if self.minimum_bid == 0 {
            return bad("minimum_bid", "must be at least 1".into());
        }
        if self.mint_ratio == 0 {
            return bad("mint_ratio", "must be at least 1".into());
        }
        Ok(())
    }
}

/// Why an operation was refused. Nothing is changed by a refused operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuctionError {
    #[error("bad input: {0}")]
    Input(String),
    #[error("the economy is not open yet: call `auction.open` first")]
    NotOpen,
    #[error("the economy is already open (at tick {tick})")]
    AlreadyOpen { tick: u64 },
    #[error("configuration: `{field}` {reason}")]
    Config { field: &'static str, reason: String },
    #[error("unknown agent `{0}`")]
    UnknownAgent(String),
    #[error("unknown artifact `{0}`")]
    UnknownArtifact(String),
    #[error("artifact `{0}` was already submitted")]
    ArtifactExists(String),
    #[error("artifact `{artifact}` belongs to `{owner}`, not `{agent}`")]
    NotOwner {
        agent: String,
        artifact: String,
        owner: String,
    },
    #[error("no auction takes bids at tick {tick} ({phase}; next auction opens at tick {opens})")]
    NotBidding {
        tick: u64,
        phase: &'static str,
        opens: u64,
    },
    #[error("a bid of {amount} is below the minimum bid of {minimum}")]
    BelowMinimum { amount: u64, minimum: u64 },
    #[error(
        "`{agent}` cannot afford this bid: it needs {needed} more in escrow, its balance is {balance}"
    )]
    CannotAfford {
        agent: String,
        needed: u64,
        balance: u64,
    },
    #[error("time does not go backwards: the economy is at tick {now}, asked to go to {to}")]
    TimeBackwards { now: u64, to: u64 },
    #[error("bound reached: {what} = {max}")]
    Limit { what: &'static str, max: u64 },
    #[error("amounts overflow a 64-bit count of credits")]
    Overflow,
}
