//! A throwaway PostgreSQL cluster for tests and benchmarks: `initdb` and `pg_ctl` on a
//! temporary directory, listening on a Unix socket in that directory only (no TCP port, so
//! nothing leaves the machine and nothing collides with another cluster), removed afterwards.
//!
//! The directory is removed when the [`Cluster`] drops, and also by a small watchdog process
//! started with it, which stops the server once the process that started it is gone: a test
//! binary's statics are never dropped, and a killed test must not leave a server behind.
//!
//! As root (CI), the server runs as the `postgres` user the distribution's package creates,
//! because PostgreSQL refuses to run as root.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why no cluster could be started.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under /usr/lib/postgresql/*/bin: install the distribution's `postgresql` package"
    )]
    NoBinaries,
    #[error("{what}: {detail}")]
    Failed { what: String, detail: String },
}

/// A running throwaway cluster.
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    port: u16,
}

/// Where `initdb` and `pg_ctl` are: on PATH, else the newest under /usr/lib/postgresql.
pub fn binaries() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                return Some(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b)
}

fn failed(what: &str, detail: impl ToString) -> ClusterError {
    ClusterError::Failed {
        what: what.to_owned(),
        detail: detail.to_string(),
    }
}

impl Cluster {
    /// Starts a new cluster in a fresh temporary directory.
    pub fn start() -> Result<Cluster, ClusterError> {
        let bin = binaries().ok_or(ClusterError::NoBinaries)?;
        let as_postgres = rustix::process::geteuid().is_root();
        let base = std::env::temp_dir().join(format!(
            "oracle-pg-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).map_err(|e| failed("creating the cluster directory", e))?;
        if as_postgres {
            let status = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&base)
                .status()
                .map_err(|e| failed("chown", e))?;
            if !status.success() {
                return Err(failed(
                    "chown of the cluster directory to the postgres user",
                    status,
                ));
            }
        }
        // A port number only names the socket file (`.s.PGSQL.<port>`); no TCP is opened.
        let port = 5432;
        let cluster = Cluster {
            dir: base,
            bin,
            as_postgres,
            port,
        };
        let data = cluster.dir.join("data");
        cluster.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "--auth=trust".as_ref(),
                "--no-sync".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--locale=C".as_ref(),
            ],
        )?;
        let opts = format!(
            "-c listen_addresses='' -k {} -p {} -c fsync=on -c max_connections=200 -c shared_buffers=64MB",
            cluster.dir.display(),
            port
        );
        let log = cluster.dir.join("server.log");
        cluster.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-o".as_ref(),
                opts.as_ref(),
                "-w".as_ref(),
                "start".as_ref(),
            ],
        )?;
        cluster.watchdog();
        Ok(cluster)
    }

    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    fn run(&self, tool: &str, args: &[&std::ffi::OsStr]) -> Result<(), ClusterError> {
        let out = self
            .command(tool)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| failed(tool, e))?;
        if !out.status.success() {
            return Err(failed(
                tool,
                format!(
                    "{}: {}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            ));
        }
        Ok(())
    }

    /// Stops the server and removes the directory once this process is gone, however it ends.
    fn watchdog(&self) {
        let pg_ctl = self.bin.join("pg_ctl");
        let data = self.dir.join("data");
        let stop = if self.as_postgres {
            format!(
                "runuser -u postgres -- {} -D {} -m immediate stop",
                pg_ctl.display(),
                data.display()
            )
        } else {
            format!(
                "{} -D {} -m immediate stop",
                pg_ctl.display(),
                data.display()
            )
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf {dir}",
            pid = std::process::id(),
            dir = self.dir.display()
        );
        let _ = Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }

    /// The URL of database `db` in this cluster (over its socket).
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgresql://postgres@localhost:{}/{}?host={}",
            self.port,
            db,
            self.dir.display()
        )
    }

    /// A new, empty database in this cluster; returns its URL.
    pub fn database(&self, name: &str) -> Result<String, ClusterError> {
        let mut c = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
            .map_err(|e| failed("connecting to the throwaway cluster", crate::detail(&e)))?;
        // Two statements: `CREATE DATABASE` cannot run in the implicit transaction of a batch.
        c.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\""))
            .map_err(|e| failed("dropping a database", crate::detail(&e)))?;
        c.batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .map_err(|e| failed("creating a database", crate::detail(&e)))?;
        Ok(self.url(name))
    }

    /// The cluster's directory (socket, data, server log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = self
            .command("pg_ctl")
            .args(["-D".as_ref(), data.as_os_str()])
            .args(["-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The shared cluster of a test binary, started on first use; `None` (with the reason printed
/// loudly) where PostgreSQL is not installed, unless `ORACLE_REQUIRE_POSTGRES` is set (CI),
/// where that is a failure.
pub fn shared() -> Option<&'static Cluster> {
    static SHARED: std::sync::OnceLock<Option<Cluster>> = std::sync::OnceLock::new();
    SHARED
        .get_or_init(|| match Cluster::start() {
            Ok(c) => Some(c),
            Err(e) => {
                if std::env::var_os("ORACLE_REQUIRE_POSTGRES").is_some() {
                    panic!("ORACLE_REQUIRE_POSTGRES is set but no cluster could start: {e}");
                }
                eprintln!(
                    "\n*** SKIPPING PostgreSQL tests: {e}\n*** (CI sets ORACLE_REQUIRE_POSTGRES and installs PostgreSQL)\n"
                );
                None
            }
        })
        .as_ref()
}
