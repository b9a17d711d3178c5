//! The auction domain: the run's [`Economy`] and the `auction.*` tools. The economy is rebuilt
//! by running the calls again; the scorer's answers (outside the program) come from the recorded
//! outcome while there is one, so a replay never asks again.

use std::any::Any;
use std::sync::Arc;

use oracle_auction::tools::{self as auction_tools, ADVANCE};
use oracle_auction::{Economy, ScoreRequest};
use oracle_core::Payload;
use oracle_core::agent::Call;
use serde_json::Value;

use super::{Domain, DomainError, Handled, Resolved, Site, outcome};
use crate::engine::{EngineError, RunConfig};
use crate::scorer::{Rubric, Scorer};
use crate::tool::Effect;

/// The effect `auction.*` tools are registered with.
pub const EFFECT: Effect = Effect::Domain("economy");

/// The run's auction economy (`None` until `auction.open`), as far as the drive got.
pub struct EconomyDomain {
    economy: Option<Economy>,
    seed: u64,
    scorer: Arc<dyn Scorer>,
}

impl EconomyDomain {
    pub fn new(config: &RunConfig) -> EconomyDomain {
        EconomyDomain {
            economy: None,
            seed: config.seed,
            scorer: config.scorer.clone().unwrap_or_else(|| Arc::new(Rubric)),
        }
    }

    pub fn economy(&self) -> Option<&Economy> {
        self.economy.as_ref()
    }
}

impl Domain for EconomyDomain {
    fn effect(&self) -> Effect {
        EFFECT
    }

    /// The economy is the fold of its calls, not of their records.
    fn folds(&self, _: &Payload) -> bool {
        false
    }

    fn apply(&mut self, _: u64, _: u64, _: &Payload) -> Result<(), DomainError> {
        Ok(())
    }

    fn call(&mut self, call: &Call, site: Site<'_>) -> Result<Handled, EngineError> {
        let result = match site.past_record {
            false => {
                let answers = match site.recorded {
                    Some(Payload::ToolReturned(r)) if r.tool == ADVANCE && call.tool == ADVANCE => {
                        auction_tools::recorded_answers(&r.output).unwrap_or_default()
                    }
                    _ => Vec::new(),
                };
                // A shortfall makes the produced outcome differ from the record: the engine
                // reports it as a divergence at this seq.
                let mut missing = 0;
                let mut scorer = auction_tools::replay_scorer(answers, &mut missing);
                auction_tools::call(
                    &mut self.economy,
                    &call.tool,
                    &call.input,
                    self.seed,
                    &mut scorer,
                )
            }
            true => {
                // Write-ahead: an `advance` is on disk before the scorer (possibly an outside
                // program) sees anything; a replay past its record stops here.
                if call.tool == ADVANCE {
                    (site.commit)()?;
                }
                let scorer = self.scorer.clone();
                let mut ask = |r: &ScoreRequest<'_>| scorer.score(r);
                auction_tools::call(
                    &mut self.economy,
                    &call.tool,
                    &call.input,
                    self.seed,
                    &mut ask,
                )
            }
        };
        Ok(Handled::Outcome(outcome(call, result)))
    }

    /// The economy is built by its calls, which a resume point does not hold: no point is
    /// written while one is open (a resume then re-derives the run from its first event).
    fn resumable(&self) -> Result<(), DomainError> {
        match self.economy {
            None => Ok(()),
            Some(_) => Err(DomainError::EconomyOpen),
        }
    }

    fn resolve_wait(&self, _: &Value, _: u64) -> Result<Resolved, DomainError> {
        Err(DomainError::AuctionNeverWaits)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
