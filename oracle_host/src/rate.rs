//! Rate limits on model bindings and declared tools (issue 56): the value (`10/s`, `60/m`,
//! `100000/m`), the one function every door admits one through ([`admit`]: `--model-rate`,
//! `--model-tokens`, `--tool-rate`, the config file, `oracle serve`, `oracle worker`), and the
//! sliding window a rate keeps ([`Window`]), shared by a home's files and a store's rows
//! (`crate::pace`).
//!
//! A rate `N/P` means: at most N calls (or N tokens) in any window of length P. The window is
//! a log of what went, not a bucket (a bucket of N lets 2N - 1 through in one window): a call
//! may go while fewer than N of its window's entries are younger than P. A call's entry is its
//! turn's time while it runs and the time it ended once it has, so the provider, which counts
//! a request when it arrives, never sees more than N in a window whatever the network delays.
//! Token rates are charged after the call, with what its reply reported: the next call waits
//! until the window's tokens are below N again (the debt of a large reply).
//!
//! Deliberately absent: floats (integer milliseconds throughout) and anything recorded: a
//! rate, a turn or a wait never reaches an event, so a run records the same bytes with a limit
//! as without.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::HostError;

/// Most calls one rate may allow per period: a window keeps one entry per call, read and
/// written whole at each turn.
pub const CALLS_MAX: u64 = 10_000;
/// Most tokens one rate may allow per period.
pub const TOKENS_MAX: u64 = 1_000_000_000;
/// Most entries a window keeps: beyond it the two oldest merge (the later time, both counts),
/// which only ever makes the next call wait longer.
pub const ENTRIES_MAX: usize = 10_000;
/// Longest one sleep of a call waiting for its turn before it looks again (a turn may free
/// early: another process's call ended, or its rate is another).
pub const SLEEP_MS_MAX: u64 = 1_000;
/// The longest period: `N/h`.
pub const PERIOD_MS_MAX: u64 = 3_600_000;

/// What a rate counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counts {
    Calls,
    Tokens,
}

/// `N/P`: at most `count` in any window of `period_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    pub count: u64,
    pub period_ms: u64,
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = match self.period_ms {
            1_000 => "s",
            60_000 => "m",
            _ => "h",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// Why a rate's text is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    #[error("expected N/s, N/m or N/h (a whole number of calls per second, minute or hour)")]
    Shape,
    #[error("the period must be s, m or h")]
    Period,
    #[error("the count must be at least 1")]
    Zero,
    #[error("at most {max} per period")]
    TooMany { max: u64 },
}

impl Rate {
    /// `N/s`, `N/m` or `N/h`, `N` from 1 to the most `counts` allows.
    pub fn parse(text: &str, counts: Counts) -> Result<Rate, RateError> {
        let (n, unit) = text.trim().split_once('/').ok_or(RateError::Shape)?;
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return Err(RateError::Shape);
        }
        let period_ms = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => PERIOD_MS_MAX,
            _ => return Err(RateError::Period),
        };
        let max = match counts {
            Counts::Calls => CALLS_MAX,
            Counts::Tokens => TOKENS_MAX,
        };
        // Digits past u64 are too many, not malformed.
        let count = n.parse::<u64>().unwrap_or(u64::MAX);
        if count == 0 {
            return Err(RateError::Zero);
        }
        if count > max {
            return Err(RateError::TooMany { max });
        }
        Ok(Rate { count, period_ms })
    }
}

/// Admits one `NAME=N/P` of `flag` (`--model-rate`, `--model-tokens`, `--tool-rate`, or the
/// config file's setting named so): the one function every door parses a rate through, so each
/// refuses the same text with the same code (`rate_invalid`).
pub fn admit(flag: &str, text: &str) -> Result<(String, Rate), HostError> {
    let refuse = |why: String| HostError::Rate {
        flag: flag.to_owned(),
        given: text.chars().take(200).collect(),
        why,
    };
    let (name, rate) = text
        .split_once('=')
        .ok_or_else(|| refuse("expected NAME=N/s, NAME=N/m or NAME=N/h".into()))?;
    if !is_name(name) {
        return Err(refuse(format!(
            "`{name}` is not a name (letters, digits, `_`, `-` and `.`, not starting with `.`)"
        )));
    }
    let counts = match flag.ends_with("tokens") {
        true => Counts::Tokens,
        false => Counts::Calls,
    };
    let rate = Rate::parse(rate, counts).map_err(|e| refuse(e.to_string()))?;
    Ok((name.to_owned(), rate))
}

/// A model's or tool's name as a rate names it (and as its state file is named).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The limits on one model or tool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub calls: Option<Rate>,
    pub tokens: Option<Rate>,
}

/// The rates of a drive, by what they limit: `model NAME` or `tool NAME`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    pub limits: BTreeMap<String, Limits>,
}

impl Rates {
    /// Admits every rate of these flags ([`admit`]); a later one for the same name wins.
    pub fn admit(
        model_rates: &[String],
        model_tokens: &[String],
        tool_rates: &[String],
    ) -> Result<Rates, HostError> {
        let mut rates = Rates::default();
        for text in model_rates {
            let (name, rate) = admit("--model-rate", text)?;
            rates.entry(format!("model {name}")).calls = Some(rate);
        }
        for text in model_tokens {
            let (name, rate) = admit("--model-tokens", text)?;
            rates.entry(format!("model {name}")).tokens = Some(rate);
        }
        for text in tool_rates {
            let (name, rate) = admit("--tool-rate", text)?;
            rates.entry(format!("tool {name}")).calls = Some(rate);
        }
        Ok(rates)
    }

    fn entry(&mut self, key: String) -> &mut Limits {
        self.limits.entry(key).or_default()
    }

    /// These rates over `lower`'s, limit by limit.
    pub fn over(&self, lower: &Rates) -> Rates {
        let mut out = lower.clone();
        for (key, l) in &self.limits {
            let e = out.entry(key.clone());
            e.calls = l.calls.or(e.calls);
            e.tokens = l.tokens.or(e.tokens);
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// What a call of `tool` with `input` is limited as: `llm.chat` by its model's rates,
    /// any other tool by its own; `None` when no rate covers it.
    pub fn for_call(&self, tool: &str, input: &Value) -> Option<(String, Limits)> {
        let key = match tool {
            "llm.chat" => format!("model {}", input.get("model")?.as_str()?),
            _ => format!("tool {tool}"),
        };
        let limits = self.limits.get(&key)?;
        Some((key, *limits))
    }
}

/// One entry of a window: when, and how much it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub at_ms: u64,
    pub count: u64,
}

/// What one model or tool has used lately, kept where every process of a home or store finds
/// it (a file, a row) and changed only under that place's lock, by these functions alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Window {
    /// One per call: its turn's time while it runs, its end's once it ended.
    pub calls: Vec<Entry>,
    /// Tokens reported, at the end of the call that used them.
    pub tokens: Vec<Entry>,
}

/// `entries` without those older than `period_ms` at `now_ms`.
fn prune(entries: &mut Vec<Entry>, period_ms: u64, now_ms: u64) {
    entries.retain(|e| e.at_ms.saturating_add(period_ms) > now_ms);
}

/// When `entries` (pruned) will hold less than `rate.count`: now if they do, else when enough
/// of the oldest have aged out of the window.
fn free_at(entries: &[Entry], rate: Rate, now_ms: u64) -> u64 {
    let mut total: u64 = entries.iter().map(|e| e.count).fold(0, u64::saturating_add);
    if total < rate.count {
        return now_ms;
    }
    let mut by_time: Vec<Entry> = entries.to_vec();
    by_time.sort_by_key(|e| e.at_ms);
    for e in by_time {
        total = total.saturating_sub(e.count);
        if total < rate.count {
            return e.at_ms.saturating_add(rate.period_ms).max(now_ms);
        }
    }
    now_ms
}

/// Merges the oldest entries while there are more than [`ENTRIES_MAX`].
fn bound(entries: &mut Vec<Entry>) {
    if entries.len() <= ENTRIES_MAX {
        return;
    }
    entries.sort_by_key(|e| e.at_ms);
    while entries.len() > ENTRIES_MAX {
        let first = entries.remove(0);
        entries[0].count = entries[0].count.saturating_add(first.count);
    }
}

impl Window {
    /// A call under `limits` asks to go at `now_ms`: `Ok(())` and the call's entry is kept, or
    /// `Err(when)` it may ask again, nothing kept.
    pub fn ask(&mut self, limits: Limits, now_ms: u64) -> Result<(), u64> {
        let period = |r: Option<Rate>| r.map_or(PERIOD_MS_MAX, |r| r.period_ms);
        prune(&mut self.calls, period(limits.calls), now_ms);
        prune(&mut self.tokens, period(limits.tokens), now_ms);
        let calls = limits
            .calls
            .map_or(now_ms, |r| free_at(&self.calls, r, now_ms));
        let tokens = limits
            .tokens
            .map_or(now_ms, |r| free_at(&self.tokens, r, now_ms));
        let at = calls.max(tokens);
        if at > now_ms {
            return Err(at);
        }
        if limits.calls.is_some() {
            self.calls.push(Entry {
                at_ms: now_ms,
                count: 1,
            });
            bound(&mut self.calls);
        }
        Ok(())
    }

    /// The call whose turn was at `turn_ms` ended at `now_ms`, having used `tokens`.
    pub fn done(&mut self, limits: Limits, turn_ms: u64, now_ms: u64, tokens: u64) {
        if let Some(e) = self.calls.iter_mut().find(|e| e.at_ms == turn_ms) {
            e.at_ms = e.at_ms.max(now_ms);
        }
        if limits.tokens.is_some() && tokens > 0 {
            self.tokens.push(Entry {
                at_ms: now_ms,
                count: tokens,
            });
            bound(&mut self.tokens);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_PER_S: Rate = Rate {
        count: 10,
        period_ms: 1_000,
    };

    #[test]
    fn rates_parse_and_bad_ones_are_refused_with_one_code() {
        assert_eq!(Rate::parse("10/s", Counts::Calls), Ok(TEN_PER_S));
        assert_eq!(
            Rate::parse("60/m", Counts::Calls).unwrap().to_string(),
            "60/m"
        );
        assert_eq!(
            Rate::parse("100000/m", Counts::Tokens).unwrap().count,
            100_000
        );
        for bad in ["0/s", "abc", "10/y", "10", "/s", "-1/s", "1.5/s", "10001/s"] {
            let e = admit("--model-rate", &format!("fast={bad}")).unwrap_err();
            assert_eq!(e.code(), "rate_invalid", "{bad}: {e}");
        }
        assert!(admit("--model-rate", "99999999999999999999999/s").is_err());
        assert_eq!(
            admit("--model-rate", "=10/s").unwrap_err().code(),
            "rate_invalid"
        );
        assert_eq!(
            admit("--tool-rate", "../x=10/s").unwrap_err().code(),
            "rate_invalid"
        );
        assert_eq!(
            admit("--model-rate", "fast").unwrap_err().code(),
            "rate_invalid"
        );
        let (name, rate) = admit("--tool-rate", "weather.get=5/m").unwrap();
        assert_eq!((name.as_str(), rate.count), ("weather.get", 5));
    }

    #[test]
    fn a_call_waits_until_the_oldest_of_its_window_ages_out() {
        let limits = Limits {
            calls: Some(TEN_PER_S),
            tokens: None,
        };
        let mut w = Window::default();
        for _ in 0..10 {
            assert_eq!(w.ask(limits, 100), Ok(()));
        }
        assert_eq!(w.ask(limits, 100), Err(1_100));
        // A call that ended later counts from its end.
        for _ in 0..10 {
            w.done(limits, 100, 150, 0);
        }
        assert_eq!(w.ask(limits, 1_100), Err(1_150));
        assert_eq!(w.ask(limits, 1_150), Ok(()));
    }

    #[test]
    fn tokens_are_charged_after_the_call_and_the_next_waits_for_the_debt() {
        let limits = Limits {
            calls: None,
            tokens: Some(Rate {
                count: 1_000,
                period_ms: 60_000,
            }),
        };
        let mut w = Window::default();
        assert_eq!(w.ask(limits, 0), Ok(()));
        w.done(limits, 0, 10, 2_500);
        assert_eq!(w.ask(limits, 20), Err(60_010));
        assert_eq!(w.ask(limits, 60_010), Ok(()));
    }

    #[test]
    fn a_window_past_its_entries_merges_its_oldest_and_never_lets_more_through() {
        let limits = Limits {
            calls: None,
            tokens: Some(Rate {
                count: TOKENS_MAX,
                period_ms: 60_000,
            }),
        };
        let mut w = Window::default();
        let n = ENTRIES_MAX as u64 + 5;
        for t in 0..n {
            w.done(limits, t, t, 2);
        }
        assert_eq!(w.tokens.len(), ENTRIES_MAX);
        let total: u64 = w.tokens.iter().map(|e| e.count).sum();
        assert_eq!(total, 2 * n);
        // The merged entry keeps the later time: it ages out no sooner.
        assert_eq!(w.tokens[0].at_ms, 5);
    }

    proptest::proptest! {
        /// The window never lets more than N through in any window of P, against a reference
        /// that keeps every grant: random asks (some ending later), each going at its first
        /// allowed time, model-checked.
        #[test]
        fn never_more_than_n_in_any_window(
            n in 1u64..12,
            period in 1u64..2_000,
            steps in proptest::collection::vec((0u64..300, 0u64..400), 1..200),
        ) {
            let rate = Rate { count: n, period_ms: period };
            let limits = Limits { calls: Some(rate), tokens: None };
            let mut w = Window::default();
            let mut now = 0u64;
            // Reference: each call's (turn, end).
            let mut calls: Vec<(u64, u64)> = Vec::new();
            for (gap, took) in steps {
                now += gap;
                loop {
                    match w.ask(limits, now) {
                        Ok(()) => break,
                        Err(at) => {
                            proptest::prop_assert!(at > now);
                            now = at;
                        }
                    }
                }
                let end = now + took;
                calls.push((now, end));
                // Calls end in order here: a call's end is noted before the next asks.
                w.done(limits, now, end, 0);
                now = end;
            }
            // Any window [t, t + P) holds at most N turns, counting each call at its end too:
            // the next N-th call's turn is at least P after each earlier call's end.
            for (i, &(_, end)) in calls.iter().enumerate() {
                let later = calls[i + 1..].iter().filter(|&&(turn, _)| turn < end + period);
                proptest::prop_assert!(later.count() < n as usize);
            }
            for (i, &(turn, _)) in calls.iter().enumerate() {
                let within = calls[i..].iter().filter(|&&(t, _)| t < turn + period);
                proptest::prop_assert!(within.count() <= n as usize);
            }
        }
    }
}
