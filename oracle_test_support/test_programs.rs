//! The build script of `oracle_cli`, `oracle_pg` and `oracle_host` (each names it as `build`): which
//! outside programs their tests can use, decided once at build time, so a
//! test that needs one is compiled as ignored where it is missing and the test runner's summary
//! counts it as skipped (never as passed; issue 58). `ORACLE_REQUIRE_BROWSER`,
//! `ORACLE_REQUIRE_POSTGRES`, `ORACLE_REQUIRE_PYTHON` and `ORACLE_REQUIRE_NODE` (set by .ci/run)
//! turn a test on whatever is found, so a missing program is a failure there.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(oracle_browser)");
    println!("cargo::rustc-check-cfg=cfg(oracle_postgres)");
    println!("cargo::rustc-check-cfg=cfg(oracle_python)");
    println!("cargo::rustc-check-cfg=cfg(oracle_node)");
    for var in [
        "PATH",
        "ORACLE_REQUIRE_BROWSER",
        "ORACLE_REQUIRE_POSTGRES",
        "ORACLE_REQUIRE_PYTHON",
        "ORACLE_REQUIRE_NODE",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let required = |var: &str| std::env::var_os(var).is_some();
    let browser = (on_path("chromium").is_some() || on_path("chromium-browser").is_some())
        && on_path("chromedriver").is_some();
    if browser || required("ORACLE_REQUIRE_BROWSER") {
        println!("cargo::rustc-cfg=oracle_browser");
    }
    if postgres() || required("ORACLE_REQUIRE_POSTGRES") {
        println!("cargo::rustc-cfg=oracle_postgres");
    }
    // Code agents' tests run `python3` and `node` from PATH, as `oracle run agent.py` does.
    if on_path("python3").is_some() || required("ORACLE_REQUIRE_PYTHON") {
        println!("cargo::rustc-cfg=oracle_python");
    }
    if on_path("node").is_some() || required("ORACLE_REQUIRE_NODE") {
        println!("cargo::rustc-cfg=oracle_node");
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `initdb` on PATH or under /usr/lib/postgresql, where `oracle_pg::cluster::binaries` looks.
fn postgres() -> bool {
    on_path("initdb").is_some()
        || std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| Path::new(&e.path()).join("bin/initdb").is_file())
}
