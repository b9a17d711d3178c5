//! A project's config file is not trusted by default (docs/CONFIG.md, "Trusting a project's
//! file"; issue 53, item 2): an `oracle.toml` in the working directory (a cloned repository)
//! may choose a secret, an endpoint or a program only once the user ran `oracle config trust`
//! on its exact bytes. Each attack is driven through the real binary, with the user's config
//! directory, `XDG_CONFIG_HOME` and `HOME` all inside the sandbox, so nothing of the machine's
//! own settings (or trust list) leaks in or is written.

use crate::common;

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Sandbox;
use oracle_llm_stub::Stub;
use serde_json::Value;

/// A secret the project's file names but has no business with.
const SECRET_VAR: &str = "UNRELATED_SECRET";
const SECRET: &str = "sk-unrelated-0123456789";
/// A URL nothing listens on.
const DEAD: &str = "http://127.0.0.1:9/v1";
/// Longest wait for a server to refuse, or for its beacon to run.
const SERVE_WAIT_MS: u64 = 20_000;

/// `oracle ARGS` in the sandbox, every config location inside it, the secret set.
fn command(sb: &Sandbox, args: &[&str]) -> Command {
    let mut c = sb.command(args);
    c.env_remove("ORACLE_HOME")
        .env_remove("ORACLE_STORE")
        .env("ORACLE_CONFIG_DIR", sb.path().join("cfg"))
        .env("XDG_CONFIG_HOME", sb.path().join("xdg"))
        .env("HOME", sb.path().join("home"))
        .env(SECRET_VAR, SECRET);
    c
}

fn oracle(sb: &Sandbox, args: &[&str]) -> (i32, String, String) {
    common::outcome(command(sb, args).output().unwrap())
}

fn json(sb: &Sandbox, args: &[&str]) -> (i32, Value) {
    let (code, out, err) = oracle(sb, args);
    (code, common::last_json(args, &out, &err))
}

fn triage_script() -> Vec<Value> {
    let text = fs::read_to_string(common::root().join("fixtures/llm/triage.jsonl")).unwrap();
    oracle_llm_stub::parse_script(&text).unwrap()
}

/// Asserts `v` is the refusal: exit 2, `config_untrusted`, naming each of `keys` with its line
/// and the command that trusts the file.
fn assert_refused(code: i32, v: &Value, keys: &[(&str, u64)], changed: bool) {
    assert_eq!(code, 2, "{v}");
    let e = &v["error"];
    assert_eq!(e["code"], "config_untrusted", "{v}");
    assert_eq!(e["exit"], 2, "{v}");
    assert_eq!(e["changed"], changed, "{v}");
    for (key, line) in keys {
        let named = e["settings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["key"] == *key && s["line"] == *line);
        assert!(named, "{key} at line {line}: {v}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains(&format!("`{key}` (oracle.toml:{line})")),
            "{v}"
        );
    }
    let command = e["trust_command"].as_str().unwrap();
    assert!(command.starts_with("oracle config trust /"), "{v}");
    assert!(command.ends_with("/oracle.toml"), "{v}");
    assert!(e["message"].as_str().unwrap().contains(command), "{v}");
}

#[test]
fn an_untrusted_project_file_cannot_send_a_secret_to_its_model_url() {
    let sb = Sandbox::new();
    let stub = Stub::start(triage_script()).unwrap();
    let url = stub.url();
    sb.write(
        "oracle.toml",
        &format!(
            "[models.fast]\nurl = \"{url}\"\nkey_env = \"{SECRET_VAR}\"\n\n[models.strong]\nurl = \"{url}\"\n"
        ),
    );
    let plan = "fixtures/plans/triage.plan";
    let (code, v) = json(&sb, &["run", plan, "--json"]);
    let keys = [
        ("models.fast.url", 2),
        ("models.fast.key_env", 3),
        ("models.strong.url", 6),
    ];
    assert_refused(code, &v, &keys, false);
    assert!(stub.requests().is_empty(), "no request was sent");
    assert!(!sb.path().join(".oracle/runs").exists(), "nothing created");
    // Without --json, stderr says the same.
    let (code, _, err) = oracle(&sb, &["run", plan]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("oracle.toml is not trusted"), "{err}");
    assert!(
        err.contains("`models.fast.key_env` (oracle.toml:3)"),
        "{err}"
    );

    // Trusted, the same file is used, key and all.
    let (code, out, err) = oracle(&sb, &["config", "trust"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("models.fast.key_env"), "{out}");
    let (code, v) = json(&sb, &["run", plan, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    let requests = stub.requests();
    assert_eq!(requests.len(), 4);
    let bearer = format!("Bearer {SECRET}");
    assert_eq!(requests[0].header("authorization"), Some(bearer.as_str()));

    // Changed by a single byte, it is refused again, as changed.
    let text = fs::read_to_string(sb.path().join("oracle.toml")).unwrap();
    sb.write("oracle.toml", &format!("{text}#\n"));
    let (code, v) = json(&sb, &["run", plan, "--json"]);
    assert_refused(code, &v, &keys, true);
    assert_eq!(stub.requests().len(), 4, "no request was sent");

    // Trusted again, then untrusted: refused.
    assert_eq!(oracle(&sb, &["config", "trust"]).0, 0);
    let (code, v) = json(&sb, &["config", "untrust", "--json"]);
    assert_eq!((code, &v["was_trusted"]), (0, &Value::from(true)), "{v}");
    let (code, v) = json(&sb, &["run", plan, "--json"]);
    assert_refused(code, &v, &keys, false);
}

#[test]
fn a_model_flag_never_takes_the_project_files_key_env() {
    let sb = Sandbox::new();
    let stub = Stub::start(triage_script()).unwrap();
    let url = stub.url();
    sb.write(
        "oracle.toml",
        &format!(
            "[models.fast]\nurl = \"{DEAD}\"\nkey_env = \"{SECRET_VAR}\"\n\n[models.strong]\nurl = \"{DEAD}\"\nkey_env = \"{SECRET_VAR}\"\n"
        ),
    );
    let (fast, strong) = (format!("fast={url}"), format!("strong={url}"));
    let args = [
        "run",
        "fixtures/plans/triage.plan",
        "--model",
        &fast,
        "--model",
        &strong,
        "--json",
    ];
    // The flags name both endpoints, so nothing that needs trust is taken from the file.
    let (code, v) = json(&sb, &args);
    assert_eq!(code, 0, "{v}");
    let requests = stub.requests();
    assert_eq!(requests.len(), 4);
    for r in &requests {
        assert_eq!(r.header("authorization"), None, "{:?}", r.headers);
        assert!(!format!("{:?}", r.headers).contains(SECRET));
    }
    // Trusted, the file's key still does not go to an endpoint a flag named.
    assert_eq!(oracle(&sb, &["config", "trust"]).0, 0);
    let stub = Stub::start(triage_script()).unwrap();
    let (fast, strong) = (
        format!("fast={}", stub.url()),
        format!("strong={}", stub.url()),
    );
    let args = [
        "run",
        "fixtures/plans/triage.plan",
        "--model",
        &fast,
        "--model",
        &strong,
    ];
    let (code, _, err) = oracle(&sb, &args);
    assert_eq!(code, 0, "{err}");
    assert!(
        stub.requests()
            .iter()
            .all(|r| r.header("authorization").is_none())
    );
}

#[test]
fn the_users_file_wins_over_the_projects_field_by_field() {
    let sb = Sandbox::new();
    // Replies for any model id, so the id the project's file gives is answered too.
    let mut script = triage_script();
    for reply in &mut script {
        reply.as_object_mut().unwrap().remove("model");
    }
    let stub = Stub::start(script).unwrap();
    let url = stub.url();
    // The user's own file binds both models; the project's points them elsewhere with a key.
    sb.write(
        "cfg/config.toml",
        &format!("[models.fast]\nurl = \"{url}\"\n\n[models.strong]\nurl = \"{url}\"\n"),
    );
    sb.write(
        "oracle.toml",
        &format!("[models.fast]\nurl = \"{DEAD}\"\nkey_env = \"{SECRET_VAR}\"\nid = \"fast-1\"\n"),
    );
    let (code, v) = json(&sb, &["run", "fixtures/plans/triage.plan", "--json"]);
    assert_eq!(code, 0, "{v}");
    let requests = stub.requests();
    assert_eq!(requests.len(), 4);
    assert!(requests.iter().all(|r| r.header("authorization").is_none()));
    // A harmless field the user's file leaves unsaid still comes from the project's.
    assert_eq!(requests[0].body["model"], "fast-1");
    let (code, v) = json(&sb, &["config", "show", "--json"]);
    assert_eq!(code, 0, "{v}");
    let s = &v["settings"];
    assert_eq!(s["models.fast.url"]["value"], url.as_str(), "{s}");
    assert_eq!(s["models.fast.key_env"]["value"], Value::Null, "{s}");
    assert_eq!(
        v["files"][0]["path"],
        sb.path().join("cfg/config.toml").to_str().unwrap()
    );
}

/// `oracle serve` in the sandbox: its exit code if it stops by itself within
/// [`SERVE_WAIT_MS`] (stderr beside it), or `None` once `marker` exists (then it is killed).
fn serve_until(sb: &Sandbox, marker: &Path) -> (Option<i32>, String) {
    let mut child: Child = command(sb, &["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut status = None;
    while start.elapsed() < Duration::from_millis(SERVE_WAIT_MS) {
        if let Some(s) = child.try_wait().unwrap() {
            status = s.code();
            break;
        }
        if marker.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Stopped if still serving (a no-op once it exited), and reaped either way.
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, err)
}

#[test]
fn an_untrusted_notify_cmd_never_runs_and_the_server_refuses_to_start() {
    use std::os::unix::fs::PermissionsExt as _;
    let sb = Sandbox::new();
    // A suspended run, which a server's beacon announces as soon as it starts.
    let (code, _, err) = oracle(&sb, &["run", "fixtures/plans/escalation.plan"]);
    assert_eq!(code, 3, "{err}");
    let marker = sb.path().join("marker");
    let program = sb.write(
        "notify.sh",
        &format!("#!/bin/sh\ncat > /dev/null\ntouch '{}'\n", marker.display()),
    );
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    sb.write("oracle.toml", "[serve]\nnotify_cmd = \"./notify.sh\"\n");

    let (status, err) = serve_until(&sb, &marker);
    assert_eq!(status, Some(2), "{err}");
    assert!(err.contains("`serve.notify_cmd` (oracle.toml:2)"), "{err}");
    assert!(err.contains("oracle config trust /"), "{err}");
    assert!(!marker.exists(), "the program ran");

    // Adding a token takes nothing from the file that needs trust.
    let (code, _, err) = oracle(&sb, &["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");

    // Trusted, the server starts and its beacon runs the program.
    assert_eq!(oracle(&sb, &["config", "trust"]).0, 0);
    let (status, err) = serve_until(&sb, &marker);
    assert_eq!(status, None, "{err}");
    assert!(marker.exists(), "{err}");
}

#[test]
fn untrusted_secrets_token_file_and_store_are_refused() {
    let sb = Sandbox::new();
    // A secret binding picks which variable a plan may send anywhere it is granted.
    sb.write(
        "oracle.toml",
        &format!("[secrets]\nTOKEN = {{ env = \"{SECRET_VAR}\" }}\n"),
    );
    let (code, v) = json(&sb, &["run", "fixtures/plans/quickstart.plan", "--json"]);
    assert_refused(code, &v, &[("secrets.TOKEN.env", 2)], false);
    assert!(!v.to_string().contains(SECRET), "{v}");

    sb.write("oracle.toml", "[serve]\ntoken_file = \"shipped-tokens\"\n");
    let (code, _, err) = oracle(&sb, &["serve", "token", "add", "alice"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`serve.token_file` (oracle.toml:2)"), "{err}");
    assert!(!sb.path().join("shipped-tokens").exists());

    // A store chosen by the project's file is an endpoint: refused before any connection.
    sb.write(
        "oracle.toml",
        "store = \"postgres://oracle@127.0.0.1:9/oracle\"\n",
    );
    let (code, v) = json(&sb, &["runs", "--json"]);
    assert_refused(code, &v, &[("store", 1)], false);
}

#[test]
fn tool_directories_from_an_untrusted_file_are_refused() {
    let sb = Sandbox::new();
    fs::create_dir_all(sb.path().join("shipped-tools")).unwrap();
    for f in ["adler32.toml", "adler32.wat"] {
        fs::copy(
            common::root().join("fixtures/tools").join(f),
            sb.path().join("shipped-tools").join(f),
        )
        .unwrap();
    }
    sb.write("oracle.toml", "home = \"h\"\ntools = [\"shipped-tools\"]\n");
    let (code, v) = json(&sb, &["tools", "list", "--json"]);
    assert_refused(code, &v, &[("tools", 2)], false);
    let (code, v) = json(&sb, &["run", "fixtures/plans/quickstart.plan", "--json"]);
    assert_refused(code, &v, &[("tools", 2)], false);
    assert!(!sb.path().join("h/runs").exists());
    // A --tools flag replaces the file's list: nothing is taken from it.
    let (code, _, err) = oracle(
        &sb,
        &[
            "run",
            "fixtures/plans/quickstart.plan",
            "--tools",
            "shipped-tools",
        ],
    );
    assert_eq!(code, 0, "{err}");

    let (code, v) = json(&sb, &["config", "trust", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["settings"][0]["key"], "tools", "{v}");
    let (code, v) = json(&sb, &["tools", "list", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert!(v.to_string().contains("data.adler32"), "{v}");
}

#[test]
fn harmless_settings_need_no_trust_and_config_show_says_what_is_trusted() {
    let sb = Sandbox::new();
    sb.write(
        "oracle.toml",
        "home = \"h\"\n\n[serve]\nstreams_max = 8\n\n[evolution]\nrequire_approval = true\n\n[prices]\nfast = \"1/2\"\n",
    );
    let (code, _, err) = oracle(&sb, &["run", "fixtures/plans/quickstart.plan"]);
    assert_eq!(code, 0, "{err}");
    assert!(sb.path().join("h/runs/quickstart-1").is_dir());
    let (code, _, err) = oracle(&sb, &["runs"]);
    assert_eq!(code, 0, "{err}");

    // Add a model: `config show` shows it, marked untrusted, and says how to trust the file.
    let text = fs::read_to_string(sb.path().join("oracle.toml")).unwrap();
    sb.write(
        "oracle.toml",
        &format!("{text}\n[models.fast]\nurl = \"{DEAD}\"\n"),
    );
    let (code, v) = json(&sb, &["config", "show", "--json"]);
    assert_eq!(code, 0, "{v}");
    let url = &v["settings"]["models.fast.url"];
    assert_eq!(
        (&url["needs_trust"], &url["trusted"]),
        (&Value::from(true), &Value::from(false)),
        "{v}"
    );
    assert!(v["settings"]["home"].get("needs_trust").is_none(), "{v}");
    let project = &v["files"][1];
    assert_eq!(project["path"], "oracle.toml", "{v}");
    assert_eq!(project["trust"], "untrusted", "{v}");
    let (code, out, _) = oracle(&sb, &["config", "show"]);
    assert_eq!(code, 0);
    assert!(out.contains("oracle.toml:13 (untrusted: refused)"), "{out}");
    assert!(out.contains("oracle.toml: not trusted"), "{out}");

    assert_eq!(oracle(&sb, &["config", "trust"]).0, 0);
    let (_, v) = json(&sb, &["config", "show", "--json"]);
    assert_eq!(v["settings"]["models.fast.url"]["trusted"], true, "{v}");
    assert_eq!(v["files"][1]["trust"], "trusted", "{v}");
    // The trust list is in the user's config directory, one `HASH  PATH` line per file.
    let list = fs::read_to_string(sb.path().join("cfg/trusted-files")).unwrap();
    let canonical = sb.path().canonicalize().unwrap().join("oracle.toml");
    let hash = blake3::hash(&fs::read(sb.path().join("oracle.toml")).unwrap()).to_hex();
    assert!(
        list.contains(&format!("{hash}  {}\n", canonical.display())),
        "{list}"
    );
}
