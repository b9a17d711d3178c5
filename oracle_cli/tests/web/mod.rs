//! Helpers of the tests that drive `oracle serve` from outside (`browser.rs`, `serve.rs`,
//! `serve_store.rs`, `observe.rs`, `evolve_api.rs`, `exactly_once.rs`): child processes killed with the test, the
//! server started and its `listening` line read, one API request with a token, and Chromium
//! over WebDriver (fantoccini and the distribution's `chromedriver`), on 127.0.0.1 only.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{ClientBuilder, Locator};
use serde_json::json;

/// Longest wait for the driver, a server or a run to get where a step needs it.
pub const WAIT_MS_MAX: u64 = 60_000;

/// A child process killed when the test ends, however it ends.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Killed {
    /// SIGTERM, then the exit status; killed (and `None`) if it does not stop within ten
    /// seconds.
    pub fn stop(&mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(status)) = self.0.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        None
    }
}

/// Waits (polling every 50 ms) until `done`, failing the test after [`WAIT_MS_MAX`].
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_millis(WAIT_MS_MAX),
            "gave up waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `command` (an `oracle serve ...` with its stdout not yet redirected) and waits for
/// its `listening http://ADDR` line: the child, killed with the test, and the base URL.
pub fn listening(mut command: Command) -> (Killed, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .to_owned();
    (Killed(child), base)
}

/// Starts `oracle serve --listen 127.0.0.1:0 ARGS` in `dir` (`program`: the binary, or a copy
/// of it) and waits for its `listening` line: the child, killed with the test, and the base URL.
pub fn serve_in(program: &Path, dir: &Path, args: &[&str]) -> (Killed, String) {
    let mut command = Command::new(program);
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .current_dir(dir);
    listening(command)
}

/// [`serve_in`] with this build's `oracle`.
pub fn serve(dir: &Path, args: &[&str]) -> (Killed, String) {
    serve_in(Path::new(env!("CARGO_BIN_EXE_oracle")), dir, args)
}

/// One API request to the server at `base` with `token`: the status and the body parsed as
/// JSON (`null` when it is not).
pub fn call(
    base: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_millis(WAIT_MS_MAX)))
        .build()
        .into();
    let b = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"))
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json");
    let sent = match body {
        Some(v) => agent.run(b.body(v.to_string().into_bytes()).unwrap()),
        None => agent.run(b.body(()).unwrap()),
    };
    let mut r = sent.unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Chromium and chromedriver, or `None` (after saying `without`, what the test does without
/// them) where they are missing; with `ORACLE_REQUIRE_BROWSER` set (CI), missing is a failure.
pub fn browser(without: &str) -> Option<(PathBuf, PathBuf)> {
    let chromium = on_path("chromium").or_else(|| on_path("chromium-browser"));
    match (chromium, on_path("chromedriver")) {
        (Some(c), Some(d)) => Some((c, d)),
        _ if std::env::var_os("ORACLE_REQUIRE_BROWSER").is_some() => {
            panic!("ORACLE_REQUIRE_BROWSER is set but chromium or chromedriver is not on PATH")
        }
        _ => {
            eprintln!(
                "\n*** {without}: `chromium` and `chromedriver` are not on PATH \
                 (apt-get install chromium chromium-driver; .ci/run installs them) ***\n"
            );
            None
        }
    }
}

/// `chromedriver` on a free loopback port, ready: the child and its WebDriver URL.
pub fn start_driver(driver: &Path) -> (Killed, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Killed(
        Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let webdriver = format!("http://127.0.0.1:{port}");
    wait_until("chromedriver", || {
        ureq::get(&format!("{webdriver}/status")).call().is_ok()
    });
    (child, webdriver)
}

/// A headless Chromium session on the driver at `webdriver`.
pub async fn chromium_session(webdriver: &str, chromium: &Path) -> fantoccini::Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,1000"],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(webdriver)
        .await
        .expect("a Chromium session")
}

/// Types `secret` into the sign-in page the browser is on and submits it; waits for the page
/// with element `lands_on` (where `next` leads).
pub async fn sign_in(c: &fantoccini::Client, secret: &str, lands_on: &str) {
    c.find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(secret)
        .await
        .unwrap();
    c.find(Locator::Id("signin-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // Submitting navigates: wait for the page it leads to.
    c.wait().for_element(Locator::Id(lands_on)).await.unwrap();
}
