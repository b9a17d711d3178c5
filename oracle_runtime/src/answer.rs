//! Why an answer given to a waiting run is refused before anything is recorded: one type for
//! the session, which checks an answer against the record before it starts the engine, and the
//! engine, which checks it again where the run waits (against what the step could have
//! produced). Both report the same failure the same way, with one stable code each (mapped in
//! `oracle_host::error`).

use crate::domain::WaitWords;

/// An answer refused: nothing was recorded, and the run still waits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The answer names another step than the one the run waits on (`wrong_step`).
    #[error("the run waits on step `{waiting}`, not `{given}`")]
    WrongStep { given: String, waiting: String },
    /// A value the step could not have produced: its answer schema, its `expect`, its tools'
    /// output schemas, a float, or past the limits (`bad_answer`).
    #[error("the answer for step `{step}` is refused (nothing was recorded): {reason}")]
    Refused { step: String, reason: String },
    /// The step waits on a domain (a belief waits on a verdict): only the domain resolves it.
    /// `words` names the wait and carries its stable code (`belief_wait`).
    #[error(
        "step `{step}` waits on a {}{}, not on an answer: {}, then resume without a value",
        .words.noun,
        .reason.as_ref().map_or(String::new(), |r| format!(" ({r})")),
        .words.resolve
    )]
    DomainWait {
        step: String,
        /// Why it waits, as its `suspended` event says, when the record was read.
        reason: Option<String>,
        words: WaitWords,
    },
}
