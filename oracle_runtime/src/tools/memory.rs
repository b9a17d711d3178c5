//! The belief-memory tools' declarations: `memory.assert`, `memory.query`, `memory.history`.
//!
//! Declarations only ([`crate::tool::Registry::declare`]): the engine hands each call to the
//! run's memory projection ([`crate::domain::memory`]), whose logic lives in
//! `oracle_memory::tools`.

use oracle_memory::tools::{ASSERT, HISTORY, QUERY};
use serde_json::{Value, json};

use super::{any, decl, string, strings};
use crate::tool::ToolDecl;

/// The memory's tools.
pub fn decls() -> [ToolDecl; 3] {
    [assert_tool(), query_tool(), history_tool()]
}

fn enum_of(values: &[&str]) -> Value {
    json!({"type": "string", "enum": values})
}

fn tick() -> Value {
    json!({"type": "integer", "minimum": 0})
}

/// `memory.assert {subject, predicate, value, provenance, cardinality?, valid?, criticality?,
/// derived_from?}` → the gate's assertion: `{id, claim, disposition, reason, corroborates,
/// conflicts_with, adjudication}`.
fn assert_tool() -> ToolDecl {
    decl(
        ASSERT,
        "Record a claim in the run's belief memory; the gate decides its disposition (committed, inferred, corroborating, quarantined, contested or queued for adjudication).",
        crate::domain::memory::EFFECT,
        json!({
            "type": "object",
            "properties": {
                "subject": string(),
                "predicate": string(),
                "value": any(),
                "provenance": enum_of(&["user_asserted", "external_first_hand", "model_derived", "recall_reentry"]),
                "cardinality": enum_of(&["functional", "set_valued"]),
                "criticality": enum_of(&["low", "medium", "high", "critical"]),
                "valid": {
                    "type": "object",
                    "properties": {"start": tick(), "end": tick(), "confidence_pct": {"type": "integer", "minimum": 0, "maximum": 100}},
                    "required": ["start", "confidence_pct"],
                    "additionalProperties": false,
                },
                "derived_from": strings(),
            },
            "required": ["subject", "predicate", "value", "provenance"],
            "additionalProperties": false,
        }),
        json!({
            "type": "object",
            "required": ["id", "claim", "disposition", "reason", "corroborates", "conflicts_with", "adjudication"],
        }),
        None,
    )
}

/// `memory.query {subject, predicate, as_of?, valid_at?, require?}` → the belief:
/// `{status: resolved|contested|no_belief|timing_uncertain, ...}`. With `require: "resolved"`
/// the run suspends while the line is not resolved.
fn query_tool() -> ToolDecl {
    decl(
        QUERY,
        "Ask the belief memory what it believes about a line (as of a logical time, valid at a time); require \"resolved\" to wait until it is.",
        crate::domain::memory::EFFECT,
        json!({
            "type": "object",
            "properties": {
                "subject": string(),
                "predicate": string(),
                "as_of": tick(),
                "valid_at": tick(),
                "require": enum_of(&["resolved", "any"]),
                (super::time::DEADLINE_ARG): super::time_text(),
                (super::time::ON_TIMEOUT_ARG): any(),
            },
            "required": ["subject", "predicate"],
            "additionalProperties": false,
        }),
        json!({"type": "object", "required": ["status", "subject", "predicate"]}),
        None,
    )
}

/// `memory.history {subject, predicate?, as_of?}` → `{subject, claims, total}`: the claims in
/// retrieval order with their dispositions and where each was recorded.
fn history_tool() -> ToolDecl {
    decl(
        HISTORY,
        "List the claims about a subject (one predicate or all) with their dispositions and provenance.",
        crate::domain::memory::EFFECT,
        json!({
            "type": "object",
            "properties": {"subject": string(), "predicate": string(), "as_of": tick()},
            "required": ["subject"],
            "additionalProperties": false,
        }),
        json!({"type": "object", "required": ["subject", "claims", "total"]}),
        None,
    )
}
