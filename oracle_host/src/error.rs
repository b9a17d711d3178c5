//! One error taxonomy for every front end: each failure of a host call has one stable `code`,
//! one exit status (the command line's) and one HTTP status (the API's), decided here and
//! nowhere else, so `oracle ... --json` and `oracle serve` name a failure alike
//! (docs/API.md, "Error codes", lists them).

use oracle_memory::AdjudicateError;
use oracle_runtime::StoreError;
use oracle_runtime::answer::AnswerError;
use oracle_runtime::declared::{Problem, ToolChanged};
use oracle_runtime::engine::EngineError;
use oracle_runtime::exit;
use oracle_runtime::seal::SealError;
use oracle_runtime::session::SessionError;
use oracle_runtime::shared::SharedError;
use serde_json::{Value, json};

/// Why a host call did not do what was asked. Every variant leaves recorded data as it was.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A binding given again (a flag, a worker's setting) is malformed.
    #[error("{flag} `{given}`: {why}")]
    Given {
        flag: &'static str,
        given: String,
        why: String,
    },
    /// A rate limit that is not one (`--model-rate`, `--model-tokens`, `--tool-rate`, the config
    /// file's, a server's or worker's): `crate::rate::admit`.
    #[error("{flag} `{given}`: {why}; nothing was run")]
    Rate {
        flag: String,
        given: String,
        why: String,
    },
    /// A secret's environment variable is not set where the run is driven.
    #[error("--secret {name}={var}: environment variable {var} is not set; nothing was run")]
    SecretUnset { name: String, var: String },
    /// Declared tools that cannot be loaded.
    #[error("{}", problems_text(.0))]
    Tools(Vec<Problem>),
    /// A declared tool differs from the one the run pinned.
    #[error(
        "{0}: nothing was run; give the run's tools (--tools DIR), or pass --allow-tool-change to check the run against the changed tool"
    )]
    ToolChanged(ToolChanged),
    #[error(transparent)]
    Seal(#[from] SealError),
    /// A store's signal row this oracle cannot carry out (another format, another run).
    #[error("{why}")]
    Signal { why: String },
    /// The PostgreSQL store refused or could not be reached.
    #[error(transparent)]
    Pg(#[from] oracle_pg::PgError),
    /// A worker could not go on (a thread of it died).
    #[error("worker: {0}")]
    Worker(String),
    /// Metrics could not be encoded (`crate::metrics`): a fault of this program.
    #[error("metrics: {0}")]
    Metrics(String),
    /// The live span exporter could not start (`crate::otlp_live`): a fault of this machine.
    #[error("span export: {0}")]
    Telemetry(String),
    /// A run asked for over the network names what such a run may not (`crate::request`).
    #[error("{what}; nothing was created")]
    NotAllowed { what: String },
    /// Every place among a server's background drives is taken (`crate::background`).
    #[error("{what}: at most {limit} at once; try again later")]
    Busy { what: &'static str, limit: u64 },
    /// A thread to drive a run in the background could not be started: a fault of this
    /// machine.
    #[error("{0}")]
    Thread(String),
    /// A plan came over the network to a server started without `--root` (`crate::admit`,
    /// rule 1).
    #[error(
        "this server starts no runs: start it with --root DIR, the directory runs started through the API work in (docs/API.md, \"POST /runs\")"
    )]
    StartsOff,
    /// A code agent asked for by name that the server was not told about (`oracle serve
    /// --agent NAME=FILE`; `crate::code::Agents`).
    #[error(
        "no agent `{name}` on this server (it starts {}); the operator names agents with `oracle serve --agent NAME=FILE`; nothing was created",
        if known.is_empty() { "none".to_owned() } else { known.join(", ") }
    )]
    UnknownAgent { name: String, known: Vec<String> },
    /// A named belief store refused or could not be read (`crate::shared`).
    #[error(transparent)]
    Shared(#[from] SharedError),
    /// Governed evolution: proposals, checks, the ledger, the policy (`crate::evolve`).
    #[error(transparent)]
    Evolve(#[from] crate::evolve::EvolveError),
    /// A schedule asked for is malformed (`schedule_invalid`), named twice
    /// (`schedule_exists`) or unknown (`not_found`) (`crate::schedule`).
    #[error("{why}")]
    Schedule { code: &'static str, why: String },
    /// A queue asked for is malformed (`queue_invalid`), unknown (`queue_unknown`) or holds
    /// its most runs (`queue_full`) (`crate::queue`).
    #[error("{why}")]
    Queue { code: &'static str, why: String },
    /// A project's config file would choose a secret, an endpoint or a program and is not
    /// trusted as it is (`config_untrusted`), or the trust list cannot be used (`crate::trust`).
    #[error(transparent)]
    Trust(#[from] crate::trust::TrustError),
    /// A demand analysis refused its configuration, or a plugged policy's answer
    /// (`crate::demand`).
    #[error(transparent)]
    Demand(#[from] oracle_demand::DemandError),
    /// A plugged demand policy that cannot be loaded: a missing or invalid module, an empty
    /// command (`crate::demand`).
    #[error("--policy {policy}: {why}")]
    PolicyLoad { policy: String, why: String },
    /// A file given as a conversation is not one (`crate::transfer`, `oracle import
    /// --messages`); nothing was created.
    #[error("the conversation is refused: {0}; nothing was created")]
    Conversation(#[from] oracle_demand::conversation::ConversationError),
}

fn problems_text(problems: &[Problem]) -> String {
    let mut message = match problems.len() {
        1 => "1 problem with the declared tools:".to_owned(),
        n => format!("{n} problems with the declared tools:"),
    };
    for p in problems {
        message.push_str(&format!("\n  {p}"));
    }
    message.push_str("\nnothing was run (docs/TOOLS.md describes manifests)");
    message
}

/// How a failure is named: its stable `code`, the command line's exit status, the API's HTTP
/// status, and details beside them in the error object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Class {
    pub code: &'static str,
    pub exit: u8,
    pub http: u16,
    pub details: Value,
}

impl Class {
    fn of(code: &'static str, exit: u8, http: u16) -> Class {
        Class {
            code,
            exit,
            http,
            details: json!({}),
        }
    }

    fn with(mut self, details: Value) -> Class {
        self.details = details;
        self
    }
}

/// A store's failure: a superseded lease is `fenced`; a schema this oracle cannot use,
/// `store_schema`; anything else, `store` (the database refused or is unreachable).
fn pg_class(e: &oracle_pg::PgError) -> Class {
    use oracle_pg::PgError as P;
    match e {
        P::Fenced { run, fence } => Class::of("fenced", exit::INPUT, http::CONFLICT)
            .with(json!({"run": run, "fence": fence})),
        P::NoRun { run } => {
            Class::of("not_found", exit::INPUT, http::NOT_FOUND).with(json!({"run": run}))
        }
        P::NotInitialised | P::Newer { .. } | P::Older { .. } => {
            Class::of("store_schema", exit::INPUT, http::UNAVAILABLE)
        }
        _ => Class::of("store", exit::INPUT, http::UNAVAILABLE),
    }
}

/// HTTP statuses used (named, so the table reads as the API documents it).
mod http {
    pub const BAD_REQUEST: u16 = 400;
    pub const FORBIDDEN: u16 = 403;
    pub const NOT_FOUND: u16 = 404;
    pub const CONFLICT: u16 = 409;
    pub const UNPROCESSABLE: u16 = 422;
    pub const INTERNAL: u16 = 500;
    pub const UNAVAILABLE: u16 = 503;
}

impl HostError {
    /// This error's class.
    pub fn class(&self) -> Class {
        match self {
            HostError::Session(e) => session_class(e),
            HostError::Store(e) => store_class(e),
            HostError::Given { .. } => Class::of("usage", exit::INPUT, http::BAD_REQUEST),
            HostError::Rate { flag, given, .. } => {
                Class::of("rate_invalid", exit::INPUT, http::BAD_REQUEST)
                    .with(json!({"flag": flag, "given": given}))
            }
            HostError::SecretUnset { name, var } => {
                Class::of("secret_unset", exit::INPUT, http::UNAVAILABLE)
                    .with(json!({"secret": name, "var": var}))
            }
            HostError::Tools(problems) => Class::of("tools", exit::INPUT, http::UNAVAILABLE)
                .with(json!({"problems": problems.iter().map(problem_json).collect::<Vec<_>>()})),
            HostError::ToolChanged(c) => {
                Class::of("tool_changed", exit::INPUT, http::CONFLICT).with(json!({"tool": c.tool}))
            }
            HostError::Seal(_) => Class::of("seal_key", exit::INPUT, http::INTERNAL),
            HostError::Signal { .. } => Class::of("bad_signal", exit::INPUT, http::BAD_REQUEST),
            HostError::Pg(e) => pg_class(e),
            HostError::Worker(_) | HostError::Metrics(_) | HostError::Telemetry(_) => {
                Class::of("internal", exit::INPUT, http::INTERNAL)
            }
            HostError::NotAllowed { .. } => Class::of("not_allowed", exit::INPUT, http::FORBIDDEN),
            HostError::Busy { limit, .. } => {
                Class::of("busy", exit::INPUT, http::UNAVAILABLE).with(json!({"limit": limit}))
            }
            HostError::Thread(_) => Class::of("internal", exit::INPUT, http::INTERNAL),
            HostError::StartsOff => Class::of("starts_off", exit::INPUT, http::FORBIDDEN),
            HostError::UnknownAgent { name, known } => {
                Class::of("unknown_agent", exit::INPUT, http::NOT_FOUND)
                    .with(json!({"agent": name, "known": known}))
            }
            HostError::Shared(e) => shared_class(e),
            HostError::Evolve(e) => evolve_class(e),
            HostError::Schedule { code, .. } => {
                let status = match *code {
                    "not_found" => http::NOT_FOUND,
                    "schedule_exists" => http::CONFLICT,
                    _ => http::BAD_REQUEST,
                };
                Class::of(code, exit::INPUT, status)
            }
            HostError::Queue { code, .. } => {
                let status = match *code {
                    "queue_unknown" => http::NOT_FOUND,
                    "queue_full" => http::UNAVAILABLE,
                    _ => http::BAD_REQUEST,
                };
                Class::of(code, exit::INPUT, status)
            }
            HostError::Trust(e) => {
                let (code, details) = e.details();
                Class::of(code, exit::INPUT, http::FORBIDDEN).with(details)
            }
            HostError::Demand(e) => demand_class(e),
            HostError::PolicyLoad { policy, .. } => {
                Class::of("policy_load", exit::INPUT, http::UNPROCESSABLE)
                    .with(json!({"policy": policy}))
            }
            HostError::Conversation(e) => {
                Class::of("conversation_invalid", exit::INPUT, http::UNPROCESSABLE)
                    .with(json!({"message": e.index()}))
            }
        }
    }

    /// The stable name of this failure.
    pub fn code(&self) -> &'static str {
        self.class().code
    }

    /// The command line's exit status for it.
    pub fn exit(&self) -> u8 {
        self.class().exit
    }

    /// The API's HTTP status for it.
    pub fn http_status(&self) -> u16 {
        self.class().http
    }

    /// The one error object (`code`, `exit`, `message` and details; docs/FORMAT.md, "Errors").
    pub fn error_value(&self) -> Value {
        let class = self.class();
        let mut details = match class.details {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        details.insert("kind".into(), Value::from(class.code));
        let mut v = exit::error_json(Some(Value::Object(details)), class.exit, &self.to_string());
        // `kind` only named the code for error_json.
        if let Value::Object(m) = &mut v {
            m.remove("kind");
        }
        v
    }
}

/// A declared tool's problem as the error object lists it.
pub fn problem_json(p: &Problem) -> Value {
    json!({"path": p.path, "line": p.at.map(|a| a.0), "col": p.at.map(|a| a.1), "message": p.message})
}

/// The class of a store error.
pub fn store_class(e: &StoreError) -> Class {
    match e {
        StoreError::Locked { .. } => Class::of("locked", exit::INPUT, http::CONFLICT),
        StoreError::SeqOutOfRange { seq, events, .. } => {
            Class::of("seq_out_of_range", exit::INPUT, http::NOT_FOUND)
                .with(json!({"seq": seq, "events": events}))
        }
        StoreError::Log { error, .. } => {
            use oracle_core::verify::LogBytesError;
            let code = match error {
                LogBytesError::Integrity { .. } => "integrity",
                LogBytesError::TornTail { .. } => "torn_tail",
                LogBytesError::HeadNotFound { .. } => "head_not_found",
            };
            Class::of(code, exit::INTEGRITY, http::INTERNAL).with(json!({"seq": error.seq()}))
        }
        e if e.is_integrity() => Class::of("integrity", exit::INTEGRITY, http::INTERNAL),
        _ => Class::of("input", exit::INPUT, http::INTERNAL),
    }
}

/// The class of a refused answer.
fn answer_class(e: &AnswerError) -> Class {
    match e {
        AnswerError::Refused { step, .. } => {
            Class::of("bad_answer", exit::INPUT, http::UNPROCESSABLE).with(json!({"step": step}))
        }
        AnswerError::WrongStep { given, waiting } => {
            Class::of("wrong_step", exit::INPUT, http::CONFLICT)
                .with(json!({"step": given, "waiting": waiting}))
        }
        // The domain names the code: `belief_wait` for the memory.
        AnswerError::DomainWait { step, words, .. } => {
            Class::of(words.code, exit::INPUT, http::CONFLICT).with(json!({"step": step}))
        }
    }
}

/// The class of a session error.
pub fn session_class(e: &SessionError) -> Class {
    let conflict = |code| Class::of(code, exit::INPUT, http::CONFLICT);
    let refused = |code| Class::of(code, exit::INPUT, http::UNPROCESSABLE);
    match e {
        SessionError::Store(s) | SessionError::Engine(EngineError::Store(s)) => store_class(s),
        SessionError::NotFound { .. } => Class::of("not_found", exit::INPUT, http::NOT_FOUND),
        SessionError::Adjudicate { source, .. } => adjudicate_class(source),
        // Refused before the engine starts or where the run waits: one type, one code each.
        SessionError::Answer { source, .. } | SessionError::Engine(EngineError::Answer(source)) => {
            answer_class(source)
        }
        SessionError::AlreadyAnswered { step, by, .. } => {
            conflict("already_answered").with(json!({"step": step, "by": by}))
        }
        SessionError::Finished { status, .. } | SessionError::CannotCancel { status, .. } => {
            conflict("finished").with(json!({"status": status}))
        }
        SessionError::NeedsAnswer { step, .. } => {
            conflict("needs_answer").with(json!({"step": step}))
        }
        SessionError::NotSuspended { .. } => conflict("not_suspended"),
        SessionError::ForkPoint { .. } => refused("fork_point"),
        SessionError::NothingToRecover { .. } => conflict("nothing_to_recover"),
        SessionError::InsideRound { .. } => conflict("inside_round"),
        SessionError::UpgradeRefused { divergence, .. } => upgrade_refused_class(divergence),
        SessionError::TimerWait { step, .. }
        | SessionError::Engine(EngineError::TimerAnswered { step, .. }) => {
            conflict("timer_wait").with(json!({"step": step}))
        }
        SessionError::NoTimer { .. } => conflict("no_timer"),
        SessionError::DeadlinePassed { step, fired, .. } => {
            conflict("deadline_passed").with(json!({"step": step, "fired": fired}))
        }
        // The run still waits: the command line's exit status for a suspended run.
        SessionError::Engine(EngineError::TimerNotDue { step, due }) => {
            Class::of("timer_not_due", exit::SUSPENDED, http::CONFLICT)
                .with(json!({"step": step, "due": due}))
        }
        SessionError::Interrupted { .. } => conflict("interrupted"),
        SessionError::NothingRecorded { .. } => conflict("nothing_recorded"),
        SessionError::ClaimRefused { .. } => refused("refused"),
        SessionError::BadNote { .. } => refused("bad_note"),
        SessionError::TooEarly { .. } | SessionError::OutsideTime { .. } => refused("time"),
        // What the caller gave is refused (the command line has always named these `input`).
        SessionError::BadInputs(_)
        | SessionError::Input(_)
        | SessionError::Grant(_)
        | SessionError::UnknownGrant { .. }
        | SessionError::TooLarge { .. }
        | SessionError::NotText { .. } => refused("input"),
        SessionError::Plan {
            path,
            text,
            diagnostics,
        } => refused("plan").with(json!({
            "path": path,
            // At most DIAGNOSTICS_MAX, then one that counts the rest: a request full of
            // mistakes costs the server a bounded answer (issue 53).
            "diagnostics": oracle_plan::diagnostic::json_capped(text, diagnostics),
        })),
        SessionError::BadKey { .. } => Class::of("usage", exit::INPUT, http::BAD_REQUEST),
        SessionError::KeyUsed { key, run, differs } => {
            conflict("key_conflict").with(json!({"key": key, "run": run, "differs": differs}))
        }
        SessionError::Unbound { models, secrets } => {
            refused("unbound").with(json!({"models": models, "secrets": secrets}))
        }
        SessionError::Unsealed { unsealed, .. } => unsealed_class(&unsealed.binding),
        // A code run's command is a binding too: it chooses the program a resume starts.
        SessionError::AgentUnsealed { .. } => unsealed_class("command"),
        SessionError::WorkdirMismatch { recorded, here, .. } => {
            conflict("workdir_mismatch").with(json!({"recorded": recorded, "here": here}))
        }
        SessionError::Tools { .. } => Class::of("tools", exit::INPUT, http::UNAVAILABLE),
        SessionError::Seal(_) => Class::of("seal_key", exit::INPUT, http::INTERNAL),
        SessionError::CodeAgent(e) => Class::of(e.code(), exit::INPUT, http::BAD_REQUEST),
        e if e.is_integrity() => Class::of("integrity", exit::INTEGRITY, http::INTERNAL),
        other => agent_class(other),
    }
}

/// A store's code run a worker cannot start as submitted (docs/STORE.md, "Code agents"); any
/// other session error is classed by [`other_session_class`].
fn agent_class(e: &SessionError) -> Class {
    let conflict = |code| Class::of(code, exit::INPUT, http::CONFLICT);
    match e {
        SessionError::AgentChanged {
            agent,
            submitted,
            now,
            ..
        } => conflict("agent_changed")
            .with(json!({"agent": agent, "submitted": submitted, "now": now})),
        SessionError::AgentUnknown { agent, .. } => {
            conflict("agent_unknown").with(json!({"agent": agent}))
        }
        other => other_session_class(other),
    }
}

/// The class of a session error neither names: a refused outside event (`event_unknown`,
/// `bad_event`: nothing was kept), else `input`.
fn other_session_class(e: &SessionError) -> Class {
    let refused =
        |code, name| Class::of(code, exit::INPUT, http::UNPROCESSABLE).with(json!({"event": name}));
    match e {
        SessionError::EventUnknown { name, .. } => refused("event_unknown", name),
        SessionError::EventRefused { name, .. } => refused("bad_event", name),
        _ => Class::of("input", exit::INPUT, http::INTERNAL),
    }
}

/// A new plan that does not re-derive the recorded run: where the first event differs.
fn upgrade_refused_class(divergence: &oracle_core::diff::Divergence) -> Class {
    Class::of("upgrade_refused", exit::INTEGRITY, http::CONFLICT).with(json!({
        "seq": divergence.seq,
        "kind": divergence.a.kind,
        "step": divergence.a.payload.get("step"),
        "fields": divergence.fields.iter().map(|f| f.path.clone()).collect::<Vec<_>>(),
    }))
}

/// A binding that the home's key does not vouch for (`run.json`'s, or a code run's command).
fn unsealed_class(binding: impl serde::Serialize) -> Class {
    Class::of("binding_unsealed", exit::INPUT, http::CONFLICT).with(json!({"binding": binding}))
}

/// The class of a named store's failure.
fn shared_class(e: &SharedError) -> Class {
    match e {
        SharedError::Name(_) | SharedError::BadName(_) => {
            Class::of("store_name", exit::INPUT, http::BAD_REQUEST)
        }
        SharedError::Unknown { name } => {
            Class::of("unknown_store", exit::UNKNOWN_HANDLE, http::NOT_FOUND)
                .with(json!({"store": name}))
        }
        SharedError::Damaged { name, .. } | SharedError::Record { name, .. } => {
            Class::of("integrity", exit::INTEGRITY, http::INTERNAL).with(json!({"store": name}))
        }
        SharedError::Tampered { name, .. } => {
            Class::of("store_tampered", exit::INTEGRITY, http::INTERNAL)
                .with(json!({"store": name}))
        }
        SharedError::Unsealed { name } => {
            Class::of("store_unsealed", exit::INTEGRITY, http::INTERNAL)
                .with(json!({"store": name}))
        }
        SharedError::Locked { name } => {
            Class::of("locked", exit::INPUT, http::CONFLICT).with(json!({"store": name}))
        }
        SharedError::Memory { .. } => Class::of("refused", exit::INPUT, http::UNPROCESSABLE),
        SharedError::Adjudicate { source, .. } => adjudicate_class(source),
        SharedError::Undone { .. } => Class::of("append_undone", exit::INPUT, http::UNAVAILABLE),
        SharedError::Io { .. } => Class::of("input", exit::INPUT, http::INTERNAL),
        SharedError::Backend { name, .. } => {
            Class::of("store", exit::INPUT, http::UNAVAILABLE).with(json!({"store": name}))
        }
        SharedError::Unsupported(_) => Class::of("not_allowed", exit::INPUT, http::FORBIDDEN),
    }
}

/// The class of a demand analysis' refusal: a plugged policy's answer has its own code
/// (`policy_failed`, `policy_output`, `policy_unknown_id`, `policy_over_budget`), with the
/// policy, the budget and the event; a bad configuration is `usage`; a log the analysis cannot
/// number, `input`.
fn demand_class(e: &oracle_demand::DemandError) -> Class {
    use oracle_demand::{DemandError as D, PluggedError as P};
    match e {
        D::Plugged(p) => {
            let details = match p {
                P::Failed { policy, budget, .. } | P::Output { policy, budget, .. } => {
                    json!({"policy": policy, "budget": budget})
                }
                P::UnknownId {
                    policy,
                    budget,
                    event,
                    id,
                } => json!({"policy": policy, "budget": budget, "event": event, "id": id}),
                P::OverBudget {
                    policy,
                    budget,
                    event,
                    kept,
                } => json!({"policy": policy, "budget": budget, "event": event, "kept": kept}),
                P::TooMany { limit, .. } | P::TooManyEvents { limit, .. } => {
                    json!({"limit": limit})
                }
            };
            let status = if p.code() == "usage" {
                http::BAD_REQUEST
            } else {
                http::UNPROCESSABLE
            };
            Class::of(p.code(), exit::INPUT, status).with(details)
        }
        D::UnknownSource(_) | D::UnknownPolicy(_) | D::ZeroHorizon | D::ZeroBudget => {
            Class::of("usage", exit::INPUT, http::BAD_REQUEST)
        }
        D::SeqOutOfOrder { .. } | D::NotEarlier { .. } | D::Mismatch { .. } => {
            Class::of("input", exit::INPUT, http::UNPROCESSABLE)
        }
    }
}

/// The class of an evolution error.
fn evolve_class(e: &crate::evolve::EvolveError) -> Class {
    use crate::evolve::EvolveError as E;
    match e {
        E::Unknown { id } => Class::of("unknown_proposal", exit::INPUT, http::NOT_FOUND)
            .with(json!({"proposal": id})),
        E::Ambiguous { id, count } => Class::of("usage", exit::INPUT, http::BAD_REQUEST)
            .with(json!({"proposal": id, "matches": count})),
        E::Usage { .. } => Class::of("usage", exit::INPUT, http::BAD_REQUEST),
        E::Decided {
            id,
            decision,
            entry,
        } => Class::of("already_decided", exit::INPUT, http::CONFLICT)
            .with(json!({"proposal": id, "decision": decision, "entry": entry})),
        E::BadReport { .. } => Class::of("bad_report", exit::INPUT, http::UNPROCESSABLE),
        E::BadApproval { .. } => Class::of("bad_approval", exit::INPUT, http::UNPROCESSABLE),
        E::NotApproved { id, plan } => Class::of("not_approved", exit::INPUT, http::FORBIDDEN)
            .with(json!({"proposal": id, "plan": plan})),
        E::NotAnApprover { key, named } => {
            Class::of("not_an_approver", exit::INPUT, http::FORBIDDEN)
                .with(json!({"public_key": key, "approvers": named}))
        }
        E::ReportNotRecorded { id, hash } => {
            Class::of("report_not_recorded", exit::INPUT, http::UNPROCESSABLE)
                .with(json!({"proposal": id, "report": hash}))
        }
        E::Ledger(crate::ledger::LedgerError::Tampered { entry, .. }) => {
            Class::of("ledger_tampered", exit::INTEGRITY, http::INTERNAL)
                .with(json!({"entry": entry}))
        }
        E::Ledger(crate::ledger::LedgerError::Io { .. }) => {
            Class::of("input", exit::INPUT, http::INTERNAL)
        }
    }
}

fn adjudicate_class(e: &AdjudicateError) -> Class {
    match e {
        AdjudicateError::UnknownHandle { handle } => {
            Class::of("unknown_handle", exit::UNKNOWN_HANDLE, http::NOT_FOUND)
                .with(json!({"handle": handle}))
        }
        AdjudicateError::AlreadyResolved { handle, seq, .. } => {
            Class::of("already_resolved", exit::ALREADY_RESOLVED, http::CONFLICT)
                .with(json!({"handle": handle, "seq": seq}))
        }
        AdjudicateError::Expired {
            handle,
            expires_at,
            swept_at,
        } => Class::of("expired", exit::EXPIRED, http::CONFLICT)
            .with(json!({"handle": handle, "expires_at": expires_at, "swept_at": swept_at})),
        AdjudicateError::UnknownClaim { .. } => {
            Class::of("unknown_claim", exit::UNKNOWN_HANDLE, http::NOT_FOUND)
        }
        _ => Class::of("refused", exit::INPUT, http::UNPROCESSABLE),
    }
}
