//! The config file end to end (docs/CONFIG.md): `oracle.toml` in the working directory and the
//! user's `$XDG_CONFIG_HOME/oracle/config.toml`, with precedence flags > environment > the
//! user's file > the working directory's file, read by the real binary. Every command here runs
//! with its own `XDG_CONFIG_HOME` and without `ORACLE_HOME`, `ORACLE_STORE` or
//! `ORACLE_CONFIG_DIR`, so the machine's own settings never leak in. (Trusting a project's file:
//! tests/config_trust.rs.)

use crate::common;

use std::fs;
use std::process::Command;

use common::Sandbox;
use oracle_llm_stub::Stub;
use serde_json::Value;

/// The triage fixture's script: three bad replies from `fast`, a good one from `strong`.
fn triage_script() -> Vec<Value> {
    let text = fs::read_to_string(common::root().join("fixtures/llm/triage.jsonl")).unwrap();
    oracle_llm_stub::parse_script(&text).unwrap()
}

/// `oracle ARGS` in the sandbox with `vars` set, the user's config under `<sandbox>/xdg`.
fn command(sb: &Sandbox, vars: &[(&str, &str)], args: &[&str]) -> Command {
    let mut c = sb.command(args);
    c.env_remove("ORACLE_HOME")
        .env_remove("ORACLE_STORE")
        .env_remove("ORACLE_CONFIG_DIR")
        .env("XDG_CONFIG_HOME", sb.path().join("xdg"));
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

fn oracle(sb: &Sandbox, vars: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    common::outcome(command(sb, vars, args).output().unwrap())
}

fn json(sb: &Sandbox, vars: &[(&str, &str)], args: &[&str]) -> (i32, Value) {
    let (code, out, err) = oracle(sb, vars, args);
    (code, common::last_json(args, &out, &err))
}

/// The settings `config show --json` reports.
fn show(sb: &Sandbox, vars: &[(&str, &str)], args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["config", "show", "--json"]);
    let (code, v) = json(sb, vars, &all);
    assert_eq!(code, 0, "{v}");
    v["settings"].clone()
}

/// A URL nothing listens on: a call there fails at once.
const DEAD: &str = "http://127.0.0.1:9/v1";

#[test]
fn a_model_bound_only_in_oracle_toml_is_used_by_run() {
    let sb = Sandbox::new();
    let stub = Stub::start(triage_script()).unwrap();
    let url = stub.url();
    sb.write(
        "oracle.toml",
        &format!("[models.fast]\nurl = \"{url}\"\n\n[models.strong]\nurl = \"{url}\"\n"),
    );
    // A project's file chooses endpoints only once trusted (tests/config_trust.rs).
    let (code, _, err) = oracle(&sb, &[], &["config", "trust"]);
    assert_eq!(code, 0, "{err}");
    let (code, v) = json(&sb, &[], &["run", "fixtures/plans/triage.plan", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(stub.requests().len(), 4);
    assert_eq!(stub.requests()[3].body["model"], "strong");
}

#[test]
fn a_flag_overrides_the_file_and_the_users_file_overrides_the_working_directorys() {
    let sb = Sandbox::new();
    let stub = Stub::start(triage_script()).unwrap();
    let url = stub.url();
    // The file points both models at nothing; the flags point them at the stub.
    sb.write(
        "oracle.toml",
        &format!("[models.fast]\nurl = \"{DEAD}\"\n\n[models.strong]\nurl = \"{DEAD}\"\n"),
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
    let (code, v) = json(&sb, &[], &args);
    assert_eq!(code, 0, "{v}");
    assert_eq!(stub.requests().len(), 4);

    // The working directory's file points them at nothing (trusted, so that is not why it
    // loses); the user's file at the stub, and the user's file wins.
    let stub = Stub::start(triage_script()).unwrap();
    let url = stub.url();
    sb.write(
        "xdg/oracle/config.toml",
        &format!("[models.fast]\nurl = \"{url}\"\n\n[models.strong]\nurl = \"{url}\"\n"),
    );
    let (code, _, err) = oracle(&sb, &[], &["config", "trust"]);
    assert_eq!(code, 0, "{err}");
    let (code, v) = json(&sb, &[], &["run", "fixtures/plans/triage.plan", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(stub.requests().len(), 4);
    let s = show(&sb, &[], &[]);
    let user = sb.path().join("xdg/oracle/config.toml");
    assert_eq!(s["models.fast.url"]["value"], url.as_str(), "{s}");
    assert_eq!(
        s["models.fast.url"]["source"]["path"],
        user.to_str().unwrap(),
        "{s}"
    );
}

#[test]
fn an_env_var_overrides_the_file_and_a_flag_the_env_var() {
    let sb = Sandbox::new();
    sb.write("oracle.toml", "home = \"from-file\"\n");
    let plan = "fixtures/plans/quickstart.plan";
    let (code, _, err) = oracle(&sb, &[], &["run", plan]);
    assert_eq!(code, 0, "{err}");
    assert!(sb.path().join("from-file/runs/quickstart-1").is_dir());

    let env = [("ORACLE_HOME", "from-env")];
    let (code, _, err) = oracle(&sb, &env, &["run", plan]);
    assert_eq!(code, 0, "{err}");
    assert!(sb.path().join("from-env/runs/quickstart-1").is_dir());
    assert_eq!(show(&sb, &env, &[])["home"]["source"]["var"], "ORACLE_HOME");

    let (code, _, err) = oracle(&sb, &env, &["--home", "from-flag", "run", plan]);
    assert_eq!(code, 0, "{err}");
    assert!(sb.path().join("from-flag/runs/quickstart-1").is_dir());
    // The file's home is where `runs` looks without the variable.
    let (code, out, _) = oracle(&sb, &[], &["runs"]);
    assert_eq!(code, 0);
    assert_eq!(out.matches("quickstart-1").count(), 1, "{out}");
}

#[test]
fn config_show_names_the_source_of_every_setting() {
    let sb = Sandbox::new();
    sb.write(
        "oracle.toml",
        "# models for this project\n[models.fast]\nurl = \"http://127.0.0.1:8080/v1\"\nkey_env = \"FAST_KEY\"\n\n[secrets]\nTOKEN = { env = \"API_TOKEN\" }\n",
    );
    sb.write(
        "xdg/oracle/config.toml",
        "tools = [\"my-tools\"]\n\n[serve]\nstreams_max = 8\n",
    );
    let env = [("ORACLE_STORE", "postgres://me:pw@db.example/oracle")];
    let s = show(&sb, &env, &["--home", "h"]);
    let user = sb.path().join("xdg/oracle/config.toml");
    let user = user.to_str().unwrap();
    let kind = |k: &str| s[k]["source"]["kind"].as_str().unwrap().to_owned();
    assert_eq!(s["home"]["value"], "h");
    assert_eq!(s["home"]["source"]["flag"], "--home");
    assert_eq!(kind("store"), "env");
    // A password is never shown.
    assert_eq!(s["store"]["value"], "postgres://me:***@db.example/oracle");
    assert_eq!(s["models.fast.url"]["source"]["path"], "oracle.toml");
    assert_eq!(s["models.fast.url"]["source"]["line"], 3);
    assert_eq!(s["models.fast.key_env"]["value"], "FAST_KEY");
    assert_eq!(s["models.fast.key_env"]["source"]["line"], 4);
    assert_eq!(
        (kind("models.fast.id"), &s["models.fast.id"]["value"]),
        ("default".into(), &Value::from("fast"))
    );
    assert_eq!(s["secrets.TOKEN.env"]["value"], "API_TOKEN");
    assert_eq!(s["secrets.TOKEN.env"]["source"]["line"], 7);
    // Relative paths in a file are its directory's.
    let tools = format!("{}/my-tools", user.trim_end_matches("/config.toml"));
    assert_eq!(s["tools"]["value"][0], tools.as_str(), "{s}");
    assert_eq!(s["tools"]["source"]["path"], user);
    assert_eq!(s["serve.streams_max"]["value"], 8);
    assert_eq!(s["serve.streams_max"]["source"]["line"], 4);
    assert_eq!(kind("serve.listen"), "default");
    assert_eq!(s["serve.listen"]["value"], "127.0.0.1:7420");

    // The same as a table: each line names its source.
    let (code, out, err) = oracle(&sb, &[], &["config", "show"]);
    assert_eq!(code, 0, "{err}");
    let line = |k: &str| {
        out.lines()
            .find(|l| l.starts_with(k))
            .unwrap_or_else(|| panic!("{k}: {out}"))
            .to_owned()
    };
    assert!(line("home").ends_with("default"), "{out}");
    // The project's file is not trusted here: its endpoint is shown, marked refused.
    assert!(
        line("models.fast.url").ends_with("oracle.toml:3 (untrusted: refused)"),
        "{out}"
    );
    assert!(
        line("serve.streams_max").ends_with(&format!("{user}:4")),
        "{out}"
    );
    let (code, out, _) = oracle(&sb, &[], &["config", "path"]);
    assert_eq!(code, 0);
    // In precedence order: the user's file, then the working directory's.
    assert_eq!(out, format!("{user}  found\noracle.toml  found\n"), "{out}");
}

#[test]
fn a_secret_value_in_the_file_is_refused_without_showing_it() {
    let sb = Sandbox::new();
    sb.write("oracle.toml", "[secrets]\nTOKEN = \"sk-live-0123456789\"\n");
    for args in [
        &["config", "show"][..],
        &["run", "fixtures/plans/quickstart.plan"],
    ] {
        let (code, out, err) = oracle(&sb, &[], args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("oracle.toml:2:9: `secrets.TOKEN`"), "{err}");
        assert!(err.contains("{ env = \"VAR\" }"), "{err}");
        assert!(!format!("{out}{err}").contains("sk-live"), "{err}");
    }
    assert!(!sb.path().join(".oracle/runs").exists());
    let (code, v) = json(&sb, &[], &["config", "show", "--json"]);
    assert_eq!(code, 2);
    assert_eq!(v["error"]["code"], "config", "{v}");
    assert_eq!(
        (&v["error"]["line"], &v["error"]["col"]),
        (&Value::from(2), &Value::from(9))
    );
    assert!(!v.to_string().contains("sk-live"), "{v}");

    // Nor a key's value where its variable's name goes, nor a string where a number goes.
    sb.write(
        "oracle.toml",
        "[models.fast]\nurl = \"http://127.0.0.1:8080/v1\"\nkey_env = \"sk-live-0123456789\"\n",
    );
    let (code, _, err) = oracle(&sb, &[], &["config", "show"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("oracle.toml:3:11: `models.fast.key_env` is not a variable's name"),
        "{err}"
    );
    assert!(!err.contains("sk-live"), "{err}");
    sb.write(
        "oracle.toml",
        "[serve]\nstreams_max = \"sk-live-0123456789\"\n",
    );
    let (code, _, err) = oracle(&sb, &[], &["config", "show"]);
    assert_eq!(code, 2);
    assert!(!err.contains("sk-live"), "{err}");

    // A store URL with a password likewise; the message says what to do instead.
    sb.write(
        "oracle.toml",
        "store = \"postgres://me:hunter2@db/oracle\"\n",
    );
    let (code, _, err) = oracle(&sb, &[], &["runs"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("oracle.toml:1:9: `store`: a password"),
        "{err}"
    );
    assert!(err.contains("ORACLE_STORE"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn an_unknown_key_is_refused_with_the_closest_known_one() {
    let sb = Sandbox::new();
    sb.write("oracle.toml", "hoem = \".oracle\"\n");
    let (code, _, err) = oracle(&sb, &[], &["runs"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("oracle.toml:1:1: unknown key `hoem`: did you mean `home`?"),
        "{err}"
    );

    sb.write(
        "oracle.toml",
        "[models.fast]\nurl = \"http://127.0.0.1:8080/v1\"\nkey_evn = \"FAST_KEY\"\n",
    );
    let (code, _, err) = oracle(&sb, &[], &["run", "fixtures/plans/quickstart.plan"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("oracle.toml:3:1: unknown key `key_evn`: did you mean `key_env`?"),
        "{err}"
    );

    sb.write(
        "oracle.toml",
        "[secrets]\nTOKEN = { evn = \"API_TOKEN\" }\n",
    );
    let (code, _, err) = oracle(&sb, &[], &["config", "show"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("unknown key `evn`: did you mean `env`?"),
        "{err}"
    );
}

#[test]
fn a_malformed_file_is_reported_at_its_line_and_column() {
    let sb = Sandbox::new();
    sb.write(
        "oracle.toml",
        "home = \".oracle\"\n[models.fast\nurl = \"x\"\n",
    );
    let (code, _, err) = oracle(&sb, &[], &["runs"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.starts_with("error: oracle.toml:2:"), "{err}");
    let (code, v) = json(&sb, &[], &["runs", "--json"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["error"]["code"], "config", "{v}");
    assert_eq!(v["error"]["path"], "oracle.toml", "{v}");
    assert_eq!(v["error"]["line"], 2, "{v}");
    assert!(v["error"]["col"].is_u64(), "{v}");
    // Commands that read no setting are not stopped by it.
    let (code, _, err) = oracle(
        &sb,
        &[],
        &["plan", "check", "fixtures/plans/quickstart.plan"],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = oracle(&sb, &[], &["config", "path"]);
    assert_eq!(code, 0);
    assert!(out.contains("oracle.toml  found"), "{out}");
}

#[test]
fn a_config_file_over_its_limit_is_refused_by_name() {
    let sb = Sandbox::new();
    let mut text = String::from("home = \".oracle\"\n");
    text.push_str(&"# padding\n".repeat((1 << 20) / 10 + 1));
    sb.write("oracle.toml", &text);
    let (code, _, err) = oracle(&sb, &[], &["runs"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("config_file_bytes_max"), "{err}");
    // At the limit it is read.
    text.truncate(1 << 20);
    sb.write("oracle.toml", &text);
    let (code, _, err) = oracle(&sb, &[], &["runs"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn serve_and_tools_take_their_settings_from_the_file() {
    let sb = Sandbox::new();
    fs::create_dir_all(sb.path().join("wasm-tools")).unwrap();
    for f in ["adler32.toml", "adler32.wat"] {
        fs::copy(
            common::root().join("fixtures/tools").join(f),
            sb.path().join("wasm-tools").join(f),
        )
        .unwrap();
    }
    sb.write(
        "oracle.toml",
        "tools = [\"wasm-tools\"]\n\n[serve]\ntoken_file = \"my-tokens\"\n",
    );
    // Tool directories and the token file are taken from a trusted file only.
    let (code, _, err) = oracle(&sb, &[], &["config", "trust"]);
    assert_eq!(code, 0, "{err}");
    let (code, v) = json(&sb, &[], &["tools", "list", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert!(v.to_string().contains("data.adler32"), "{v}");
    let (code, out, err) = oracle(&sb, &[], &["serve", "token", "add", "alice"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.trim().is_empty());
    let tokens = fs::read_to_string(sb.path().join("my-tokens")).unwrap();
    assert!(tokens.starts_with("alice:"), "{tokens}");
}
