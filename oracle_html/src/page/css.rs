//! The style sheet every page carries inline, so a page (and the report above all) needs no
//! other file and makes no request.
//!
//! Plain CSS, no framework: readable on a narrow screen (tables scroll inside their own box,
//! forms stack), a visible focus ring on every control, and step colours that are never the
//! only signal (each node and row also says its status in words).

/// The status colours of the step graph: (status class, fill, stroke). Also used for the
/// SVG's own attributes, so the drawing keeps its colours outside the page.
pub const STATUS_COLOURS: [(&str, &str, &str); 6] = [
    ("done", "#dff3e4", "#1e6b34"),
    ("failed", "#fbe2e0", "#a1251b"),
    ("running", "#fff3c4", "#7a5c00"),
    ("suspended", "#e9e1ff", "#4f35a8"),
    ("skipped", "#eef2f6", "#52606d"),
    ("not-started", "#ffffff", "#6b7280"),
];

pub const CSS: &str = r#"
:root { --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --bg: #ffffff; --soft: #f6f8fa;
  --link: #0a58ca; --focus: #b35900; }
* { box-sizing: border-box; }
.lat { display: block; min-width: 8rem; height: .8rem; background: var(--soft);
  border: 1px solid var(--line); }
.lat-bar { display: block; height: 100%; background: #4f35a8; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; color: var(--fg); background: var(--bg);
  font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
a { color: var(--link); }
a:focus-visible, button:focus-visible, input:focus-visible, select:focus-visible,
textarea:focus-visible, summary:focus-visible, [tabindex]:focus-visible {
  outline: 3px solid var(--focus); outline-offset: 2px; }
.skip { position: absolute; left: -10000px; top: 0; background: var(--bg); padding: .5rem 1rem; }
.skip:focus { left: .5rem; top: .5rem; z-index: 10; }
header.site { border-bottom: 1px solid var(--line); padding: .5rem 1rem; background: var(--soft); }
header.site nav ul { list-style: none; margin: 0; padding: 0; display: flex; flex-wrap: wrap; gap: 1rem; }
main { padding: 1rem; max-width: 80rem; margin: 0 auto; min-width: 0; }
article, section { max-width: 100%; min-width: 0; }
h1 { font-size: 1.6rem; margin: .5rem 0 1rem; overflow-wrap: anywhere; }
h2 { font-size: 1.3rem; margin: 2rem 0 .75rem; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.1rem; margin: 1.25rem 0 .5rem; overflow-wrap: anywhere; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .9em; }
pre { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; max-width: 100%; overflow-x: auto; }
/* Hashes, JSON and long names break anywhere rather than widen a table or the page past the
   window (a 64-character hash is wider than a phone, and than a table column at 1280 px). */
code, td, th, dd, p, li { overflow-wrap: anywhere; }
td pre { min-width: 12ch; }
#runs th[scope=row] { white-space: nowrap; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: .35rem .5rem; border-bottom: 1px solid var(--line); }
th { background: var(--soft); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; color: var(--muted); padding: .25rem 0; caption-side: top; }
dl.summary { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; margin: 0; }
dl.summary dt { font-weight: 600; }
dl.summary dd { margin: 0; overflow-wrap: anywhere; }
.muted { color: var(--muted); }
.badge { display: inline-block; padding: 0 .5rem; border: 1px solid; border-radius: 1rem; font-size: .85em;
  white-space: nowrap; }
.status-done, .status-completed, .status-resolved { background: #dff3e4; border-color: #1e6b34; }
.status-failed, .status-damaged, .status-contested { background: #fbe2e0; border-color: #a1251b; }
.status-running, .status-pending, .status-timing_uncertain { background: #fff3c4; border-color: #7a5c00; }
.status-suspended { background: #e9e1ff; border-color: #4f35a8; }
.status-skipped, .status-not-started, .status-no_belief, .status-expired, .status-expired_not_swept {
  background: #eef2f6; border-color: #52606d; }
.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: .5rem 1rem; }
.legend .swatch { display: inline-block; width: 1rem; height: 1rem; border: 2px solid; vertical-align: middle; margin-right: .25rem; }
figure.dag { margin: 0; }
figure.dag svg { max-width: none; height: auto; }
.item { border: 1px solid var(--line); border-radius: .5rem; padding: .75rem 1rem; margin: 1rem 0; }
.question { font-size: 1.1rem; font-weight: 600; overflow-wrap: anywhere; }
form .row { margin: .75rem 0; }
label, legend { font-weight: 600; display: block; margin-bottom: .25rem; }
fieldset { border: 1px solid var(--line); border-radius: .25rem; margin: .75rem 0; }
fieldset label { display: inline; font-weight: normal; margin-right: 1rem; }
input[type=text], input[type=number], select, textarea { font: inherit; width: 100%; max-width: 40rem;
  padding: .4rem; border: 1px solid #8c959f; border-radius: .25rem; }
input[type=number] { max-width: 14rem; }
textarea { min-height: 6rem; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
button { font: inherit; padding: .45rem .9rem; margin: .25rem .5rem .25rem 0; border: 1px solid #57606a;
  border-radius: .25rem; background: var(--soft); cursor: pointer; }
.verdicts button[value=affirm] { border-color: #1e6b34; }
.verdicts button[value=deny] { border-color: #a1251b; }
.help { color: var(--muted); font-size: .9rem; margin: .25rem 0; }
nav.pager ul { list-style: none; padding: 0; display: flex; gap: 1rem; flex-wrap: wrap; }
footer { color: var(--muted); border-top: 1px solid var(--line); margin-top: 2rem; padding: 1rem; font-size: .9rem; }
@media (max-width: 40rem) {
  main { padding: .5rem; }
  dl.summary { grid-template-columns: 1fr; }
  dl.summary dd { margin-bottom: .5rem; }
  th, td { padding: .3rem; }
}
"#;
