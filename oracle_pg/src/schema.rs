//! The schema, as numbered migrations embedded in the binary and applied in order.
//!
//! `oracle store init` applies what a database lacks; every other command checks the version
//! first and refuses a database whose schema is newer than this binary knows (it would not
//! know what the newer columns mean), or one that was never initialised.
//!
//! A migration is never edited once released: a change is a new migration. The bytes of events
//! are stored as their canonical records (the same bytes as a file home's log line), so no
//! migration ever rewrites one.

/// Migrations, in order; `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: runs, their files, their events, signals.
    r#"
CREATE TABLE oracle_schema (
    version integer NOT NULL
);
INSERT INTO oracle_schema (version) VALUES (0);

-- One row per run. `events` and `head` are the log's length and last chain hash: every append
-- compares and sets them, under the run's fencing token, in the transaction that inserts the
-- events (docs/STORE.md). Time columns are the database's clock and never reach an event.
CREATE TABLE runs (
    id          text PRIMARY KEY,
    number      bigint NOT NULL UNIQUE,
    program     text NOT NULL,
    state       text NOT NULL CHECK (state IN
                  ('submitted', 'runnable', 'running', 'suspended', 'completed', 'failed', 'broken')),
    events      bigint NOT NULL DEFAULT 0,
    head        bytea,
    fence       bigint NOT NULL DEFAULT 0,
    worker      text,
    lease_until timestamptz,
    claims      bigint NOT NULL DEFAULT 0,
    detail      text,
    submitted_at timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE SEQUENCE run_numbers;
CREATE INDEX runs_claimable ON runs (number) WHERE state IN ('submitted', 'runnable', 'running');

-- The run directory's files other than its log: the plan, its sub-plans, settings, kept tool
-- files and the submission. A worker writes them into its scratch home before a drive.
CREATE TABLE run_files (
    run   text NOT NULL REFERENCES runs (id),
    path  text NOT NULL,
    bytes bytea NOT NULL,
    PRIMARY KEY (run, path)
);

-- The log: one row per event, its canonical record (a file home's line, newline included).
-- `fence` is the token of the lease it was appended under.
CREATE TABLE events (
    run    text NOT NULL REFERENCES runs (id),
    seq    bigint NOT NULL,
    hash   bytea NOT NULL,
    prev   bytea NOT NULL,
    record bytea NOT NULL,
    fence  bigint NOT NULL,
    PRIMARY KEY (run, seq)
);

-- Outside events sent to a run (answers, verdicts, claims, sweeps), appended by the worker
-- that next holds the run, in id order. `outcome` is null while pending; `seq` is the event
-- that recorded it, set in the same transaction as that event's append.
CREATE TABLE signals (
    id      bigserial PRIMARY KEY,
    run     text NOT NULL REFERENCES runs (id),
    kind    text NOT NULL,
    body    text NOT NULL,
    sent_at timestamptz NOT NULL DEFAULT now(),
    outcome text,
    seq     bigint
);
CREATE INDEX signals_pending ON signals (run, id) WHERE outcome IS NULL;
"#,
    // 2: signed checkpoints of runs' heads (`oracle checkpoint --store`), outside the chain as
    // in a file home's `checkpoints.jsonl`: one row per line, in the order they were added.
    r#"
CREATE TABLE checkpoints (
    id   bigserial PRIMARY KEY,
    run  text NOT NULL REFERENCES runs (id),
    line text NOT NULL
);
CREATE INDEX checkpoints_by_run ON checkpoints (run, id);
"#,
    // 3: a run can end `cancelled` (`oracle cancel --store`, a `cancel` signal).
    r#"
ALTER TABLE runs DROP CONSTRAINT runs_state_check;
ALTER TABLE runs ADD CONSTRAINT runs_state_check CHECK (state IN
    ('submitted', 'runnable', 'running', 'suspended', 'completed', 'failed', 'cancelled', 'broken'));
"#,
    // 4: parity with a file home. What `oracle runs` says of a run that only its log knows
    // (what a suspended run waits on, why it failed, its last logical time, its model use),
    // written by the worker each time it releases the run; the programs its drives call
    // (`submit --oracle-cmd/--scorer-cmd`: host paths, never hashed nor in the log); and its
    // resume points, so a worker that takes a run over starts from the newest one.
    r#"
ALTER TABLE runs
    ADD COLUMN waiting_step   text,
    ADD COLUMN waiting_reason text,
    ADD COLUMN attempts       bigint NOT NULL DEFAULT 0,
    ADD COLUMN reason         text,
    ADD COLUMN last_time      bigint NOT NULL DEFAULT 0,
    ADD COLUMN model_calls    bigint,
    ADD COLUMN model_tokens   bigint,
    ADD COLUMN oracle_cmd     text,
    ADD COLUMN scorer_cmd     text;

-- A run's resume points (the body of a file home's `snapshots/*.resume.json`, without its MAC
-- line, which the home's own key makes): a cache, never part of the log. `hash` is the hash
-- of the event at `seq`, the point's anchor; a point is restored only where it is still the
-- stored event's, and the runtime checks it again as it checks any resume point.
CREATE TABLE snapshots (
    run   text NOT NULL REFERENCES runs (id),
    seq   bigint NOT NULL,
    bytes bytea NOT NULL,
    hash  bytea NOT NULL,
    PRIMARY KEY (run, seq)
);
"#,
    // 5: idempotency keys (`oracle submit --key`): the run each key started, with what a second
    // submission under the key must match to be that run. Written in the submission's
    // transaction, under the key's advisory lock, so racing submissions start one run.
    r#"
CREATE TABLE run_keys (
    key    text PRIMARY KEY,
    run    text NOT NULL REFERENCES runs (id),
    plan   bytea NOT NULL,
    inputs bytea NOT NULL,
    seed   text NOT NULL
);
"#,
    // 6: announcements of servers over the store (`oracle serve --store --notify-cmd`): which
    // server delivers each (a suspension, a request, a failed run), so however many servers
    // run, each is announced once. A server holds one until `until`; delivered, it is done.
    r#"
CREATE TABLE announcements (
    id        text PRIMARY KEY,
    run       text NOT NULL REFERENCES runs (id),
    server    text NOT NULL,
    until     timestamptz NOT NULL,
    delivered boolean NOT NULL DEFAULT false
);
"#,
    // 7: schedules (`oracle schedule add --store`): each one's definition (JSON, the host's),
    // and where firing got to, written only by the firers (workers, servers over the store).
    // Each tick's run is submitted under the tick's idempotency key (`run_keys`), which is
    // what makes it start once however many firers race. And the worker timer wheel: the due
    // instant of the timer a suspended run sleeps on.
    r#"
CREATE TABLE schedules (
    name     text PRIMARY KEY,
    spec     text NOT NULL,
    tick_ms  bigint,
    last_run text
);

-- The timer a suspended run sleeps on (its `timer_set` due instant, unix ms), written by the
-- worker that releases it: workers send a due run one wake signal (oracle_host::worker).
ALTER TABLE runs ADD COLUMN wake_at_ms bigint;
CREATE INDEX runs_timers ON runs (wake_at_ms) WHERE wake_at_ms IS NOT NULL;
"#,
    // 8: named belief stores shared by runs (`memory "NAME"`), as a file home keeps them in
    // `memory/NAME/store.jsonl`: one row per store (locked `FOR UPDATE` by every writer, so two
    // publishers are ordered and the second is decided against the first's claim), and one row
    // per record, its line with the newline (the same bytes as the file's line).
    r#"
CREATE TABLE memory_stores (
    name text PRIMARY KEY
);

CREATE TABLE memory_records (
    store  text NOT NULL REFERENCES memory_stores (name),
    seq    bigint NOT NULL,
    hash   text NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (store, seq)
);
"#,
    // 9: the worker expiry wheel: the earliest real-time expiry (`--adjudication-expiry 48h`,
    // a request's `expires_ms`) among a run's pending adjudication requests, written by the
    // worker that releases it. Its own column, not `wake_at_ms`: a run at rest in any state
    // (finished ones too) can have one, and it is carried out as a sweep, not a wake.
    r#"
ALTER TABLE runs ADD COLUMN expire_at_ms bigint;
CREATE INDEX runs_expiries ON runs (expire_at_ms) WHERE expire_at_ms IS NOT NULL;
"#,
    // 10: retention and erasure of named stores. `memory_bases`: a compacted store's base
    // (`oracle memory compact NAME --keep N`), the fold of the records taken out of
    // `memory_records`, as the CBOR body a file home's `base.bin` seals, with a BLAKE3 digest
    // of it (damage is found; trust in a database is its access control, docs/MEMORY.md).
    // `memory_ledger`: the store ledger (`oracle memory forget`), one row per record, its line
    // with the newline (the bytes of a file home's `memory/ledger.jsonl`).
    r#"
CREATE TABLE memory_bases (
    store   text PRIMARY KEY REFERENCES memory_stores (name),
    records bigint NOT NULL,
    digest  text NOT NULL,
    body    bytea NOT NULL
);

CREATE TABLE memory_ledger (
    seq    bigint PRIMARY KEY,
    hash   text NOT NULL,
    record bytea NOT NULL
);
"#,
    // 11: rate limits on model bindings and declared tools (issue 56, item 2): one row per
    // rate-limited model or tool, its window as the host writes it (JSON text), changed under
    // `FOR UPDATE` with the database's clock (`Store::change_rate_window`).
    r#"
CREATE TABLE rate_windows (
    key  text PRIMARY KEY,
    body text NOT NULL
);
"#,
    // 12: named queues (issue 56, item 1). `queues`: one row per queue, its definition as the
    // host writes it (`spec`, JSON: the host owns its meaning) and its changing part (`state`:
    // recent starts, when each partition was last served), both decided by the host's one
    // ordering rule in the claim's transaction, under this row's lock (`FOR UPDATE`), so a
    // queue's limits hold across every worker. A run's `queue`, `priority` and `partition_key`
    // are set in its submission's transaction; a submitted run with a queue is claimed only
    // through its queue. Nothing of it reaches an event.
    r#"
CREATE TABLE queues (
    name  text PRIMARY KEY,
    spec  text NOT NULL,
    state text NOT NULL DEFAULT '{}'
);
ALTER TABLE runs ADD COLUMN queue text REFERENCES queues (name);
ALTER TABLE runs ADD COLUMN priority smallint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN partition_key text NOT NULL DEFAULT '';
CREATE INDEX runs_queued ON runs (queue, number) WHERE queue IS NOT NULL;
"#,
];

/// The schema version this binary writes and reads.
pub const VERSION: i32 = MIGRATIONS.len() as i32;

#[cfg(test)]
mod tests {
    /// The README's store walkthrough says which schema `oracle store init` migrates to: it
    /// must be this build's (it once said 6 after four more migrations).
    #[test]
    fn the_readme_names_the_current_schema_version() {
        let readme = include_str!("../../README.md");
        let said: Vec<i32> = readme
            .lines()
            .filter_map(|l| l.split("# schema version 0 -> ").nth(1))
            .map(|n| n.trim().parse().expect("a number"))
            .collect();
        assert_eq!(
            said,
            [super::VERSION],
            "README.md's `oracle store init` line"
        );
    }
}
