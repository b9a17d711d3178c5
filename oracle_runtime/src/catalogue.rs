//! The built-in tool catalogue as the plan compiler sees it: names, arguments and the capability
//! each call needs, read from the registered tools themselves so the two cannot drift apart.

use oracle_plan::catalogue::Catalogue;

/// Every built-in tool.
pub fn builtin() -> Catalogue {
    crate::tools::builtin().catalogue()
}

#[cfg(test)]
mod tests {
    use super::*;
    use oracle_plan::catalogue::{ArgSpec, ArgType, CapabilityRule, ScopeFrom, ToolSpec};

    #[test]
    fn matches_the_hand_written_catalogue() {
        // Names, versions, descriptions, arguments (names, types, required-ness and order) and
        // capabilities: existing plans and `oracle plan tools` depend on every one of them.
        let expected = hand_written();
        let actual = builtin();
        // `spawn` is compared on its own (`spawn_matches_its_hand_written_spec`).
        let names: Vec<&str> = actual.names().filter(|n| *n != "spawn").collect();
        assert_eq!(names, expected.names().collect::<Vec<_>>());
        for (a, e) in actual
            .tools()
            .filter(|t| t.name != "spawn")
            .zip(expected.tools())
        {
            assert_eq!(a, e, "tool `{}`", e.name);
        }
    }

    #[test]
    fn spawn_matches_its_hand_written_spec() {
        use ArgType::*;
        let expected = tool(
            "spawn",
            "Start a child run of another plan and wait for its outcome: {run, status, outputs}.",
            vec![
                arg("plan", String, true),
                arg("detach", Bool, false),
                arg("inputs", Map, false),
                arg("key", String, false),
            ],
            None,
        );
        let actual = builtin();
        assert_eq!(actual.tools().find(|t| t.name == "spawn"), Some(&expected));
    }

    fn arg(name: &str, ty: ArgType, required: bool) -> ArgSpec {
        ArgSpec {
            name: name.to_owned(),
            ty,
            required,
        }
    }

    fn cap(domain: &str, action: &str, scope: ScopeFrom) -> Option<CapabilityRule> {
        Some(CapabilityRule {
            domain: domain.to_owned(),
            action: action.to_owned(),
            scope,
        })
    }

    fn tool(
        name: &str,
        description: &str,
        args: Vec<ArgSpec>,
        capability: Option<CapabilityRule>,
    ) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            version: "1.0.0".to_owned(),
            description: description.to_owned(),
            args,
            capability,
        }
    }

    /// The catalogue as it was written by hand before the tools existed.
    fn hand_written() -> Catalogue {
        use ArgType::*;
        let path = || ScopeFrom::Arg("path".to_owned());
        Catalogue::new([
            tool(
                "fs.read",
                "Read a UTF-8 text file: {text, bytes}.",
                vec![arg("path", String, true)],
                cap("fs", "read", path()),
            ),
            tool(
                "fs.write",
                "Write a file atomically (temporary file, then rename): {bytes}.",
                vec![arg("path", String, true), arg("content", String, true)],
                cap("fs", "write", path()),
            ),
            tool(
                "fs.list",
                "List a directory, sorted: {entries}.",
                vec![arg("path", String, true)],
                cap("fs", "list", path()),
            ),
            tool(
                "proc.exec",
                "Run a program (argv only, no shell): {status, stdout, stderr}.",
                vec![
                    arg("program", String, true),
                    arg("args", List, false),
                    arg("env", Map, false),
                    arg("stdin", String, false),
                ],
                cap("proc", "exec", ScopeFrom::Arg("program".to_owned())),
            ),
            tool(
                "text.count",
                "Count words, lines and characters: {words, lines, chars}.",
                vec![arg("text", String, true)],
                None,
            ),
            tool(
                "text.lines",
                "Split text into lines: {lines}.",
                vec![arg("text", String, true)],
                None,
            ),
            tool(
                "text.contains",
                "Whether text contains a substring: {found}.",
                vec![arg("text", String, true), arg("pattern", String, true)],
                None,
            ),
            tool(
                "text.split",
                "Split text on a separator: {parts}.",
                vec![arg("text", String, true), arg("separator", String, true)],
                None,
            ),
            tool(
                "json.parse",
                "Parse JSON text (no floats): {value}.",
                vec![arg("text", String, true)],
                None,
            ),
            tool(
                "json.get",
                "The value at a path (`a.b[0]`) in a JSON value: {value}.",
                vec![arg("value", Any, true), arg("path", String, true)],
                None,
            ),
            tool(
                "kv.get",
                "Read a key of the run's state: {value}.",
                vec![arg("key", String, true)],
                cap("kv", "get", ScopeFrom::Arg("key".to_owned())),
            ),
            tool(
                "kv.set",
                "Write a key of the run's state.",
                vec![arg("key", String, true), arg("value", Any, true)],
                cap("kv", "set", ScopeFrom::Arg("key".to_owned())),
            ),
            tool(
                "llm.chat",
                "One chat completion from the model bound to `model` (`oracle run --model NAME=URL`). With `schema`, the reply must be JSON matching it; a reply that is not fails the attempt, and the next attempt tells the model why. Needs llm:chat:<model>. Recorded: never called again on replay or resume.",
                vec![
                    arg("model", String, true),
                    arg("messages", List, true),
                    arg("max_tokens", Int, false),
                    arg("schema", Map, false),
                    arg("seed", Int, false),
                    arg("stop", List, false),
                    arg("temperature_pct", Int, false),
                    arg("tools", List, false),
                ],
                cap("llm", "chat", ScopeFrom::Arg("model".to_owned())),
            ),
            tool(
                "agent",
                "A model that acts: each turn is an llm.chat call offered `tools`; the tool calls it asks for are checked against the grants, run and fed back, until it answers without calling (validated against `output`) or max_turns is reached. Needs llm:chat:<model>.",
                vec![
                    arg("model", String, true),
                    arg("instructions", String, true),
                    arg("task", Any, true),
                    arg("tools", List, true),
                    arg("max_turns", Int, false),
                    arg("output", Map, false),
                ],
                cap("llm", "chat", ScopeFrom::Arg("model".to_owned())),
            ),
            tool(
                "clock.now",
                "The run's logical time (never the wall clock): {tick}.",
                vec![],
                None,
            ),
            tool(
                "random.int",
                "A random integer in [min, max] from the run's recorded seed: {value}.",
                vec![arg("min", Int, true), arg("max", Int, true)],
                None,
            ),
            tool(
                "clock.wall",
                "The wall clock now, recorded once: {instant (RFC 3339, UTC), unix_ms, unix_s}.",
                vec![],
                None,
            ),
            tool(
                "sleep",
                "Suspend the run until a timer fires: {due, due_ms, fired, fired_ms}.",
                vec![arg("for", String, false), arg("until", String, false)],
                None,
            ),
            tool(
                "http.request",
                "One HTTP request: {status, headers, json} when the reply is JSON, else {status, headers, body}. Needs net:http:<scheme://host:port>; redirects are followed only where granted. Header values may be secret(\"NAME\"). Recorded: never sent again on replay or resume.",
                vec![
                    arg("method", Any, true),
                    arg("url", String, true),
                    arg("body", String, false),
                    arg("headers", Map, false),
                    arg("json", Any, false),
                ],
                cap("net", "http", ScopeFrom::Arg("url".to_owned())),
            ),
            tool(
                "evolve.propose",
                "Propose a new version of this run's plan (the whole plan text, and why). It must compile; it is recorded for review and changes nothing now: {plan_hash, program, version}.",
                vec![arg("source", String, true), arg("reason", String, true)],
                cap("evolve", "propose", ScopeFrom::Fixed("self".to_owned())),
            ),
            tool(
                "human.ask",
                "Suspend the run until a person answers: {answer}.",
                vec![
                    arg("question", String, true),
                    arg("deadline", Time, false),
                    arg("on_timeout", Any, false),
                    arg("schema", Map, false),
                ],
                None,
            ),
            tool(
                "wait.event",
                "Suspend the run until an outside event of this name is sent to it: {value}.",
                vec![
                    arg("name", String, true),
                    arg("deadline", Time, false),
                    arg("on_timeout", Any, false),
                    arg("schema", Map, false),
                ],
                None,
            ),
            tool(
                "memory.assert",
                "Record a claim in the run's belief memory; the gate decides its disposition (committed, inferred, corroborating, quarantined, contested or queued for adjudication).",
                vec![
                    arg("subject", String, true),
                    arg("predicate", String, true),
                    arg("value", Any, true),
                    arg("provenance", String, true),
                    arg("cardinality", String, false),
                    arg("criticality", String, false),
                    arg("derived_from", List, false),
                    arg("valid", Map, false),
                ],
                None,
            ),
            tool(
                "memory.query",
                "Ask the belief memory what it believes about a line (as of a logical time, valid at a time); require \"resolved\" to wait until it is.",
                vec![
                    arg("subject", String, true),
                    arg("predicate", String, true),
                    arg("as_of", Int, false),
                    arg("deadline", Time, false),
                    arg("on_timeout", Any, false),
                    arg("require", String, false),
                    arg("valid_at", Int, false),
                ],
                None,
            ),
            tool(
                "memory.history",
                "List the claims about a subject (one predicate or all) with their dispositions and provenance.",
                vec![
                    arg("subject", String, true),
                    arg("as_of", Int, false),
                    arg("predicate", String, false),
                ],
                None,
            ),
        ]
        .into_iter()
        .chain(auction_tools()))
    }

    /// The economy's tools, as written by hand beside the others.
    fn auction_tools() -> [ToolSpec; 6] {
        use ArgType::*;
        [
            tool(
                "auction.open",
                "Open the run's auction economy: accounts with their starting credits, and the auction rules (period, bidding_window, first_auction_tick, slots_per_auction, minimum_bid, mint_ratio, refund_on_scoring_failure, pricing, tie_break).",
                vec![
                    arg("accounts", Map, true),
                    arg("bidding_window", Int, false),
                    arg("first_auction_tick", Int, false),
                    arg("minimum_bid", Int, false),
                    arg("mint_ratio", Int, false),
                    arg("period", Int, false),
                    arg("pricing", String, false),
                    arg("refund_on_scoring_failure", Bool, false),
                    arg("slots_per_auction", Int, false),
                    arg("tie_break", String, false),
                ],
                None,
            ),
            tool(
                "auction.submit",
                "Submit an agent's artifact (its text) for later auctions; its BLAKE3 content hash detects duplicates.",
                vec![
                    arg("agent", String, true),
                    arg("artifact", String, true),
                    arg("content", String, true),
                ],
                None,
            ),
            tool(
                "auction.bid",
                "Bid (or raise or lower a bid) to have an agent's artifact scored in the auction taking bids now; the amount is held in escrow.",
                vec![
                    arg("agent", String, true),
                    arg("artifact", String, true),
                    arg("amount", Int, true),
                ],
                None,
            ),
            tool(
                "auction.advance",
                "Move the economy's clock to tick `to`, resolving every auction that closes on the way: winners pay, losers are refunded, winning artifacts are scored by the scorer, credits are minted and basic income paid.",
                vec![arg("to", Int, true)],
                None,
            ),
            tool(
                "auction.status",
                "The economy now: tick, phase, the auction taking bids or the next one, balances, escrow and supply.",
                vec![],
                None,
            ),
            tool(
                "auction.check",
                "Where an artifact stands: submitted, bid, scored, duplicate or failed, with its score and reason.",
                vec![arg("artifact", String, true)],
                None,
            ),
        ]
    }
}
