//! The economy: balances, escrow, artifacts, and the reducer that opens, bids, advances time
//! and resolves auctions.

use imbl::{OrdMap, Vector};
use serde::{Deserialize, Serialize};

use super::{
    ACCOUNTS_MAX, ARTIFACT_BYTES_MAX, ARTIFACTS_MAX, AUCTIONS_PER_ADVANCE_MAX, AuctionError,
    BIDS_PER_AUCTION_MAX, Config, NAME_BYTES_MAX, Pricing, SCORE_MAX, TieBreak,
};
use oracle_core::hash::{Hash, domain, hash_in, hasher};

type Result<T> = std::result::Result<T, AuctionError>;

/// Where the economy's clock stands in the auction cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before the first auction opens.
    Waiting,
    /// An auction takes bids.
    Bidding,
    /// Between one auction's close and the next one's opening.
    Closed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Waiting => "waiting",
            Phase::Bidding => "bidding",
            Phase::Closed => "closed",
        }
    }
}

/// A submitted artifact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub owner: String,
    /// The artifact-domain BLAKE3 hash of its bytes.
    pub hash: Hash,
    pub content: String,
    pub submitted_at: u64,
    /// The auction that last scored it (or tried to), and how.
    pub last: Option<(u64, Scoring)>,
}

/// One open bid.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Bid {
    amount: u64,
    /// Placement order (a raise or a lower is a new placement): the `first_bid` tie-break.
    placed: u64,
    tick: u64,
}

/// What a scorer is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScoreRequest<'a> {
    pub auction: u64,
    pub agent: &'a str,
    pub artifact: &'a str,
    pub content: &'a str,
    pub hash: &'a Hash,
}

/// A scorer's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum Answer {
    Scored { score: u64, reason: String },
    Failed { reason: String },
}

/// How a winning artifact was scored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum Scoring {
    /// The scorer's answer.
    Scored { score: u64, reason: String },
    /// Its content equals an artifact scored earlier: score 0, the scorer is not asked.
    Duplicate { score: u64, of: String },
    /// The scorer failed (its reason is recorded).
    Failed { reason: String },
}

impl Scoring {
    pub fn score(&self) -> Option<u64> {
        match self {
            Scoring::Scored { score, .. } | Scoring::Duplicate { score, .. } => Some(*score),
            Scoring::Failed { .. } => None,
        }
    }

    /// The scorer's answer this scoring records, if the scorer was asked.
    pub fn answer(&self) -> Option<Answer> {
        match self {
            Scoring::Scored { score, reason } => Some(Answer::Scored {
                score: *score,
                reason: reason.clone(),
            }),
            Scoring::Failed { reason } => Some(Answer::Failed {
                reason: reason.clone(),
            }),
            Scoring::Duplicate { .. } => None,
        }
    }
}

/// A bid as it stood when its auction closed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BidRecord {
    pub agent: String,
    pub artifact: String,
    pub amount: u64,
    /// The tick it was placed at (its last raise or lower).
    pub tick: u64,
}

/// One winner of a resolved auction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WinnerRecord {
    pub agent: String,
    pub artifact: String,
    pub bid: u64,
    /// What the pricing rule charges.
    pub price: u64,
    /// What the winner paid in the end (0 when refunded, or when nobody could receive it).
    pub paid: u64,
    /// The part of the price given back because scoring failed.
    pub refunded: u64,
    pub scoring: Scoring,
    pub minted: u64,
    /// The paid price as basic income, by agent (ascending names; zero shares left out).
    pub basic_income: Vec<(String, u64)>,
}

/// A resolved auction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuctionResult {
    pub auction: u64,
    pub opened_at: u64,
    pub closed_at: u64,
    /// Every bid, in rank order (winners first).
    pub bids: Vec<BidRecord>,
    pub winners: Vec<WinnerRecord>,
}

/// The economy at one tick: what `auction.status` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub tick: u64,
    pub phase: Phase,
    /// The auction taking bids, or the next one to open.
    pub auction: u64,
    pub opens_at: u64,
    pub closes_at: u64,
    pub minimum_bid: u64,
    pub slots_per_auction: u64,
    pub balances: std::collections::BTreeMap<String, u64>,
    pub escrow: std::collections::BTreeMap<String, u64>,
    pub initial_supply: u64,
    pub minted: u64,
}

/// Balances, escrow, artifacts and history. Cheap to clone (persistent maps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Economy {
    config: Config,
    seed: u64,
    tick: u64,
    balances: OrdMap<String, u64>,
    initial_supply: u64,
    minted: u64,
    artifacts: OrdMap<String, Artifact>,
    /// Content hashes scored so far, with the artifact that was scored first.
    seen: OrdMap<Hash, String>,
    /// Open bids of auction `next_auction`, by (agent, artifact).
    bids: OrdMap<(String, String), Bid>,
    placements: u64,
    /// The next auction to resolve.
    next_auction: u64,
    history: Vector<AuctionResult>,
}

fn check_name(what: &'static str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() as u64 > NAME_BYTES_MAX {
        return Err(AuctionError::Input(format!(
            "{what} names are 1 to {NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// The artifact-domain hash of some content.
pub fn content_hash(content: &str) -> Hash {
    hash_in(domain::ARTIFACT, content.as_bytes())
}

/// Coins not conserved ([`Economy::check_conservation`]): what balances and escrow hold
/// against what was issued.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "balances and escrow hold {held}, but {issued} was issued (initial {initial} + minted {minted})"
)]
pub struct Unconserved {
    pub held: u128,
    pub issued: u128,
    pub initial: u64,
    pub minted: u64,
}

impl Economy {
    /// Opens an economy at tick 0 with these accounts (the initial supply) and rules.
    pub fn open(
        config: Config,
        accounts: &std::collections::BTreeMap<String, u64>,
        seed: u64,
    ) -> Result<Economy> {
        config.check()?;
        if accounts.is_empty() {
            return Err(AuctionError::Input(
                "an economy needs at least one account".into(),
            ));
        }
        if accounts.len() as u64 > ACCOUNTS_MAX {
            return Err(AuctionError::Limit {
                what: "accounts_max",
                max: ACCOUNTS_MAX,
            });
        }
        let mut supply = 0u64;
        for (name, balance) in accounts {
            check_name("account", name)?;
            supply = supply.checked_add(*balance).ok_or(AuctionError::Overflow)?;
        }
        Ok(Economy {
            config,
            seed,
            tick: 0,
            balances: accounts.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            initial_supply: supply,
            minted: 0,
            artifacts: OrdMap::new(),
            seen: OrdMap::new(),
            bids: OrdMap::new(),
            placements: 0,
            next_auction: 0,
            history: Vector::new(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn tick(&self) -> u64 {
        self.tick
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn balance(&self, agent: &str) -> Option<u64> {
        self.balances.get(agent).copied()
    }

    pub fn balances(&self) -> impl Iterator<Item = (&String, &u64)> {
        self.balances.iter()
    }

    pub fn artifact(&self, id: &str) -> Option<&Artifact> {
        self.artifacts.get(id)
    }

    /// Every artifact by id.
    pub fn artifacts(&self) -> impl Iterator<Item = (&String, &Artifact)> {
        self.artifacts.iter()
    }

    pub fn history(&self) -> impl Iterator<Item = &AuctionResult> {
        self.history.iter()
    }

    pub fn initial_supply(&self) -> u64 {
        self.initial_supply
    }

    pub fn minted(&self) -> u64 {
        self.minted
    }

    /// Credits held in escrow by open bids.
    pub fn escrow(&self) -> u64 {
        self.bids.values().map(|b| b.amount).sum()
    }

    /// Escrow per agent.
    pub fn escrow_by_agent(&self) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        for ((agent, _), bid) in &self.bids {
            *out.entry(agent.clone()).or_insert(0) += bid.amount;
        }
        out
    }

    /// The open bid of `agent` on `artifact`, if any.
    pub fn open_bid(&self, agent: &str, artifact: &str) -> Option<u64> {
        self.bids
            .get(&(agent.to_owned(), artifact.to_owned()))
            .map(|b| b.amount)
    }

    /// Balances plus escrow equal the initial supply plus everything minted.
    pub fn check_conservation(&self) -> std::result::Result<(), Unconserved> {
        let held: u128 = self.balances.values().map(|&b| u128::from(b)).sum::<u128>()
            + self
                .bids
                .values()
                .map(|b| u128::from(b.amount))
                .sum::<u128>();
        let issued = u128::from(self.initial_supply) + u128::from(self.minted);
        if held == issued {
            Ok(())
        } else {
            Err(Unconserved {
                held,
                issued,
                initial: self.initial_supply,
                minted: self.minted,
            })
        }
    }

    /// The opening and closing tick of auction `k` (`None` past the end of time).
    fn window(&self, k: u64) -> Option<(u64, u64)> {
        let open = k
            .checked_mul(self.config.period)?
            .checked_add(self.config.first_auction_tick)?;
        Some((open, open.checked_add(self.config.bidding_window)?))
    }

    /// The phase at tick `t`, with the auction taking bids (or the next to open).
    pub fn phase_at(&self, t: u64) -> (Phase, u64) {
        let c = &self.config;
        if t < c.first_auction_tick {
            return (Phase::Waiting, 0);
        }
        let off = t - c.first_auction_tick;
        let k = off / c.period;
        if off % c.period < c.bidding_window {
            (Phase::Bidding, k)
        } else {
            (Phase::Closed, k.saturating_add(1))
        }
    }

    /// What `auction.status` reports now.
    pub fn status(&self) -> Status {
        let (phase, auction) = self.phase_at(self.tick);
        let (opens_at, closes_at) = self.window(auction).unwrap_or((u64::MAX, u64::MAX));
        Status {
            tick: self.tick,
            phase,
            auction,
            opens_at,
            closes_at,
            minimum_bid: self.config.minimum_bid,
            slots_per_auction: self.config.slots_per_auction,
            balances: self.balances.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            escrow: self.escrow_by_agent(),
            initial_supply: self.initial_supply,
            minted: self.minted,
        }
    }

    /// Registers an artifact owned by `agent`.
    pub fn submit(&mut self, agent: &str, id: &str, content: &str) -> Result<Hash> {
        check_name("artifact", id)?;
        if !self.balances.contains_key(agent) {
            return Err(AuctionError::UnknownAgent(agent.to_owned()));
        }
        if self.artifacts.contains_key(id) {
            return Err(AuctionError::ArtifactExists(id.to_owned()));
        }
        if self.artifacts.len() as u64 >= ARTIFACTS_MAX {
            return Err(AuctionError::Limit {
                what: "artifacts_max",
                max: ARTIFACTS_MAX,
            });
        }
        if content.len() as u64 > ARTIFACT_BYTES_MAX {
            return Err(AuctionError::Limit {
                what: "artifact_bytes_max",
                max: ARTIFACT_BYTES_MAX,
            });
        }
        let hash = content_hash(content);
        self.artifacts.insert(
            id.to_owned(),
            Artifact {
                owner: agent.to_owned(),
                hash,
                content: content.to_owned(),
                submitted_at: self.tick,
                last: None,
            },
        );
        Ok(hash)
    }

    /// Places, raises or lowers `agent`'s bid on its artifact `artifact` to `amount`. Returns
    /// the auction and the previous amount (0 for a new bid). Escrow moves by the difference.
    pub fn bid(&mut self, agent: &str, artifact: &str, amount: u64) -> Result<(u64, u64)> {
        let (phase, auction) = self.phase_at(self.tick);
        if phase != Phase::Bidding {
            let opens = self.window(auction).map_or(u64::MAX, |w| w.0);
            return Err(AuctionError::NotBidding {
                tick: self.tick,
                phase: phase.as_str(),
                opens,
            });
        }
        let Some(balance) = self.balances.get(agent).copied() else {
            return Err(AuctionError::UnknownAgent(agent.to_owned()));
        };
        let Some(a) = self.artifacts.get(artifact) else {
            return Err(AuctionError::UnknownArtifact(artifact.to_owned()));
        };
        if a.owner != agent {
            return Err(AuctionError::NotOwner {
                agent: agent.to_owned(),
                artifact: artifact.to_owned(),
                owner: a.owner.clone(),
            });
        }
        if amount < self.config.minimum_bid {
            return Err(AuctionError::BelowMinimum {
                amount,
                minimum: self.config.minimum_bid,
            });
        }
        let key = (agent.to_owned(), artifact.to_owned());
        let previous = self.bids.get(&key).map_or(0, |b| b.amount);
        if previous == 0 && self.bids.len() as u64 >= BIDS_PER_AUCTION_MAX {
            return Err(AuctionError::Limit {
                what: "bids_per_auction_max",
                max: BIDS_PER_AUCTION_MAX,
            });
        }
        let new_balance = if amount >= previous {
            let needed = amount - previous;
            balance
                .checked_sub(needed)
                .ok_or_else(|| AuctionError::CannotAfford {
                    agent: agent.to_owned(),
                    needed,
                    balance,
                })?
        } else {
            balance
                .checked_add(previous - amount)
                .ok_or(AuctionError::Overflow)?
        };
        self.balances.insert(key.0.clone(), new_balance);
        self.placements += 1;
        self.bids.insert(
            key,
            Bid {
                amount,
                placed: self.placements,
                tick: self.tick,
            },
        );
        Ok((auction, previous))
    }

    /// Moves the clock to `to`, resolving every auction whose window closes on the way (at or
    /// before `to`), in order. `scorer` is asked for each winner whose artifact is not a
    /// duplicate, in rank order. Refused (changing nothing, asking the scorer nothing) when more
    /// than `auctions_per_advance_max` auctions would close.
    pub fn advance(
        &mut self,
        to: u64,
        scorer: &mut dyn FnMut(&ScoreRequest<'_>) -> Answer,
    ) -> Result<Vec<AuctionResult>> {
        if to < self.tick {
            return Err(AuctionError::TimeBackwards { now: self.tick, to });
        }
        let too_many = AuctionError::Limit {
            what: "auctions_per_advance_max",
            max: AUCTIONS_PER_ADVANCE_MAX,
        };
        // Closing ticks grow with the auction number: if the auction one past the bound closes
        // by `to`, too many would resolve. Checked before any scorer is asked.
        if let Some((_, close)) = self
            .next_auction
            .checked_add(AUCTIONS_PER_ADVANCE_MAX)
            .and_then(|k| self.window(k))
            && close <= to
        {
            return Err(too_many);
        }
        // Resolved on a copy, kept only when every auction resolves (an overflow changes nothing).
        let mut next = self.clone();
        let mut resolved = Vec::new();
        while let Some((open, close)) = next.window(next.next_auction) {
            if close > to {
                break;
            }
            if resolved.len() as u64 >= AUCTIONS_PER_ADVANCE_MAX {
                return Err(too_many);
            }
            let r = next.resolve(next.next_auction, open, close, scorer)?;
            next.history.push_back(r.clone());
            resolved.push(r);
            next.next_auction += 1;
        }
        next.tick = to;
        *self = next;
        Ok(resolved)
    }

    /// The rank key of a bid under the tie-break rule: higher amounts first, then the rule.
    fn tie_key(&self, auction: u64, agent: &str, artifact: &str, bid: &Bid) -> [u8; 32] {
        match self.config.tie_break {
            TieBreak::FirstBid => {
                let mut k = [0u8; 32];
                k[..8].copy_from_slice(&bid.placed.to_be_bytes());
                k
            }
            TieBreak::Seeded => {
                let mut h = hasher(domain::AUCTION_TIE);
                h.update(&self.seed.to_be_bytes());
                h.update(&auction.to_be_bytes());
                for s in [agent, artifact] {
                    h.update(&(s.len() as u64).to_be_bytes());
                    h.update(s.as_bytes());
                }
                *h.finalize().as_bytes()
            }
        }
    }

    fn credit(&mut self, agent: &str, amount: u64) -> Result<()> {
        let b = self.balances.get(agent).copied().unwrap_or(0);
        let b = b.checked_add(amount).ok_or(AuctionError::Overflow)?;
        self.balances.insert(agent.to_owned(), b);
        Ok(())
    }

    fn resolve(
        &mut self,
        auction: u64,
        opened_at: u64,
        closed_at: u64,
        scorer: &mut dyn FnMut(&ScoreRequest<'_>) -> Answer,
    ) -> Result<AuctionResult> {
        let mut ranked: Vec<((String, String), Bid)> =
            std::mem::take(&mut self.bids).into_iter().collect();
        ranked.sort_by_cached_key(|((agent, artifact), bid)| {
            (
                std::cmp::Reverse(bid.amount),
                self.tie_key(auction, agent, artifact, bid),
                agent.clone(),
                artifact.clone(),
            )
        });
        let slots = usize::try_from(self.config.slots_per_auction).unwrap_or(usize::MAX);
        let split = slots.min(ranked.len());
        let highest_losing = ranked.get(split).map(|(_, b)| b.amount);
        let bids: Vec<BidRecord> = ranked
            .iter()
            .map(|((agent, artifact), b)| BidRecord {
                agent: agent.clone(),
                artifact: artifact.clone(),
                amount: b.amount,
                tick: b.tick,
            })
            .collect();
        // Losers get their whole escrow back.
        for ((agent, _), b) in &ranked[split..] {
            self.credit(agent, b.amount)?;
        }
        let winner_names: std::collections::BTreeSet<&str> = ranked[..split]
            .iter()
            .map(|((a, _), _)| a.as_str())
            .collect();
        let recipients: Vec<String> = self
            .balances
            .keys()
            .filter(|a| !winner_names.contains(a.as_str()))
            .cloned()
            .collect();
        let mut winners = Vec::with_capacity(split);
        for ((agent, artifact), b) in ranked[..split].iter() {
            let price = match self.config.pricing {
                Pricing::FirstPrice => b.amount,
                Pricing::SecondPrice => highest_losing.unwrap_or(self.config.minimum_bid),
            }
            .min(b.amount);
            // Invariant: a bid is only accepted for an artifact that exists, and artifacts are
            // never removed; a missing one is reported instead of panicking.
            let a = self
                .artifacts
                .get(artifact)
                .cloned()
                .ok_or_else(|| AuctionError::UnknownArtifact(artifact.clone()))?;
            let scoring = match self.seen.get(&a.hash) {
                Some(of) => Scoring::Duplicate {
                    score: 0,
                    of: of.clone(),
                },
                None => {
                    let answer = scorer(&ScoreRequest {
                        auction,
                        agent,
                        artifact,
                        content: &a.content,
                        hash: &a.hash,
                    });
                    match answer {
                        Answer::Scored { score, reason } if score <= SCORE_MAX => {
                            Scoring::Scored { score, reason }
                        }
                        Answer::Scored { score, .. } => Scoring::Failed {
                            reason: format!("the scorer gave {score}, outside 0..={SCORE_MAX}"),
                        },
                        Answer::Failed { reason } => Scoring::Failed { reason },
                    }
                }
            };
            let refund =
                matches!(scoring, Scoring::Failed { .. }) && self.config.refund_on_scoring_failure;
            let paid = if refund || recipients.is_empty() {
                0
            } else {
                price
            };
            let refunded = if refund { price } else { 0 };
            // The escrow not paid goes back to the winner.
            self.credit(agent, b.amount - paid)?;
            let basic_income = self.distribute(auction, paid, &recipients)?;
            let minted = scoring.score().map_or(0, |s| s / self.config.mint_ratio);
            self.credit(agent, minted)?;
            self.minted = self
                .minted
                .checked_add(minted)
                .ok_or(AuctionError::Overflow)?;
            if let Scoring::Scored { .. } = scoring {
                self.seen.insert(a.hash, artifact.clone());
            }
            let mut updated = a;
            updated.last = Some((auction, scoring.clone()));
            self.artifacts.insert(artifact.clone(), updated);
            winners.push(WinnerRecord {
                agent: agent.clone(),
                artifact: artifact.clone(),
                bid: b.amount,
                price,
                paid,
                refunded,
                scoring,
                minted,
                basic_income,
            });
        }
        Ok(AuctionResult {
            auction,
            opened_at,
            closed_at,
            bids,
            winners,
        })
    }

    /// Pays `amount` to `recipients` (ascending names) in equal shares; the remainder of the
    /// division goes one credit each to the next recipients in a rotation that starts at
    /// `auction mod n`, so no one is favoured auction after auction.
    fn distribute(
        &mut self,
        auction: u64,
        amount: u64,
        recipients: &[String],
    ) -> Result<Vec<(String, u64)>> {
        let n = recipients.len() as u64;
        if n == 0 || amount == 0 {
            return Ok(Vec::new());
        }
        let (share, rem) = (amount / n, amount % n);
        let start = auction % n;
        let mut out = Vec::new();
        for (i, r) in recipients.iter().enumerate() {
            // Position of recipient i in the rotation that starts at `start`.
            let pos = (i as u64 + n - start) % n;
            let got = share + u64::from(pos < rem);
            if got > 0 {
                self.credit(r, got)?;
                out.push((r.clone(), got));
            }
        }
        Ok(out)
    }
}
