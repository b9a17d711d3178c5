//! HTML pages of oracle runs, in two layers: [`view`] (the host's `oracle_host::view`) loads plain
//! view structs from a home directory, and [`page`] renders them as complete HTML
//! documents with pure functions. `oracle report RUN --html FILE` writes [`page::report_page`];
//! a server mounts the other pages, giving them its URL prefix ([`page::Links`]) and, for the
//! inbox, where its forms post and a CSRF token ([`page::Forms`]). [`form`] decodes what the
//! forms submit.
//!
//! No script, no framework, no request to anywhere: every page carries its style sheet, the
//! step graph is inline SVG, and reading works without JavaScript. Everything shown from a log
//! is escaped ([`escape`]): a plan's author chooses step names, values and questions.
//!
//! # Element ids
//!
//! Stable, for links and browser tests. `{run}`, `{step}`, `{handle}` are the run id, step
//! name and adjudication handle with every character outside `A-Z a-z 0-9 - _` replaced by `_`
//! ([`escape::id_part`]).
//!
//! | page | id | what |
//! |---|---|---|
//! | all | `main` | the content (target of the skip link) |
//! | runs | `runs` | the table of runs |
//! | runs | `run-{run}` | one run's row |
//! | run, report | `run-{run}` | the article holding the whole run |
//! | run, report | `summary`, `dag`, `state`, `beliefs`, `timeline`, `divergence` | its sections |
//! | run, report | `dag-step-{step}` | a step's box in the SVG graph (class `node STATUS`) |
//! | run, report | `dag-steps`, `step-{step}` | the steps table, a step's row |
//! | run, report | `state-entries`, `requests`, `request-{handle}` | state and adjudication tables |
//! | run, report | `events`, `event-{seq}` | the timeline table, an event's row |
//! | run | `at-form`, `at` | the GET form choosing the event the run is shown after |
//! | run | `fork`, `fork-form` | the fork section and its form (POST to `Forms::fork`; signed in only) |
//! | run | `fork-step`, `fork-at`, `fork-value`, `fork-plan`, `fork-submit` | its fields and button |
//! | inbox | `inbox`, `questions`, `adjudications`, `proposals`, `problems` | the inbox and its sections |
//! | inbox | `ask-{run}-{step}` | a suspended step |
//! | inbox | `answer-{run}-{step}` | its answer form (POST to `Forms::answer`) |
//! | inbox | `answer-{run}-{step}-value` | the answer control (`-value-true`/`-value-false` for yes/no radios) |
//! | inbox | `answer-{run}-{step}-submit` | its submit button |
//! | inbox | `adj-{run}-{handle}` | a pending adjudication |
//! | inbox | `verdict-{run}-{handle}` | its verdict form (POST to `Forms::verdict`) |
//! | inbox | `verdict-{run}-{handle}-evidence`, `-note`, `-resume` | evidence select, note, resume checkbox |
//! | inbox | `verdict-{run}-{handle}-affirm`, `-deny`, `-unknown` | the verdict buttons (`name="verdict" value="affirm"` ...) |
//! | inbox | `proposal-{id}` | an undecided proposal; `-reason`, `-diff` (a `pre`), `-report`, `-approve` (the commands) |
//! | inbox | `proposal-{id}-reject`, `-reason-field`, `-reject-button` | its reject form (POST to `Forms::reject`) |
//!
//! # What the forms post
//!
//! Answer form: `csrf`, `step`, `value`, `value_type` (`string`, `integer`, `boolean` or
//! `json`; [`form::answer_value`] turns `value` into JSON). Verdict form: `csrf`, `handle`,
//! `verdict` (the button pressed: `affirm`, `deny`, `unknown`), `evidence` (required; only
//! what a verdict accepts is offered), `note`, `resume` (`1` when ticked); [`form::verdict`]
//! checks them. Fork form: `csrf`, `step` or `at` (one of them), `value` (JSON, optional),
//! `plan` (a plan's text, optional); [`form::fork_request`] reads them.
//! checks them. Reject form: `csrf`, `reason` (required).

// View errors carry the runtime's store and session errors whole (seq, offset, both hashes),
// as oracle_runtime and oracle_cli do: returned once per page, so their size costs nothing.
#![allow(clippy::result_large_err)]

pub mod escape;
pub mod form;
pub mod page;
// The views are loaded by the host (the one door to a run's files); the pages render them, and
// `oracle_html::view::RunView` keeps naming what a page takes.
pub use oracle_host::view;

pub use page::{Forms, Links, inbox_page, report_page, run_page, runs_page};
pub use view::{Inbox, Page, RunRow, RunView, ViewError};
