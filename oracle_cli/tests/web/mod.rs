//! Helpers of the tests that drive `oracle serve` from outside (`browser.rs`, `serve_store.rs`):
//! child processes killed with the test, the server's `listening` line, and Chromium over
//! WebDriver (fantoccini and the distribution's `chromedriver`), on 127.0.0.1 only.
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
