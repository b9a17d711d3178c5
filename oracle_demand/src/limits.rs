//! Every bound of the demand analysis stated once: the budgets a Pareto sweep grades, and what
//! a plugged policy (docs/FORMAT.md, "Pluggable policies") and an imported conversation may
//! take. The host enforces the runtime's side of each (fuel, memory, time, output) with these.

/// The budgets `oracle demand --pareto` grades, ascending: fine where a working set is small
/// (where the policies differ most), doubling after. A sweep stops at the first budget at least
/// the number of events (every larger one has only the compulsory faults).
pub const PARETO_BUDGETS: [u64; 16] = [
    1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512, 1024,
];

/// Plugged policies (`wasm:FILE`, `exec:PROGRAM`) graded in one analysis.
pub const PLUGGED_POLICIES_MAX: u64 = 8;

/// Events a plugged policy is given at once: its input and output are one JSON document each,
/// so this bounds both (an input line per event, an output list per event).
pub const PLUGGED_EVENTS_MAX: u64 = 1 << 20;

/// Bytes a plugged policy may answer with, per call.
pub const PLUGGED_OUTPUT_BYTES_MAX: u64 = 64 << 20;

/// Wall time an `exec:` policy may take per call, in milliseconds (a `wasm:` policy is bounded
/// by fuel instead, so its result never depends on the machine).
pub const PLUGGED_TIMEOUT_MS: u64 = 60_000;

/// Fuel (wasmi's units, about one per instruction) a `wasm:` policy may burn per call.
pub const PLUGGED_FUEL_MAX: u64 = 2_000_000_000;

/// Bytes of linear memory a `wasm:` policy may grow to.
pub const PLUGGED_MEMORY_BYTES_MAX: u64 = 256 << 20;

/// Bytes of JSON text per token: a token is counted as [`TOKEN_BYTES`] bytes of an event's
/// payload as compact JSON, rounded up (the usual rule of thumb for English text and JSON; a
/// fixed rule, so a count never depends on a tokenizer's version).
pub const TOKEN_BYTES: u64 = 4;

/// Messages one imported conversation may hold (`oracle import --messages`).
pub const MESSAGES_MAX: u64 = 100_000;

/// Bytes of an imported conversation's file.
pub const MESSAGES_FILE_BYTES_MAX: u64 = 64 << 20;
