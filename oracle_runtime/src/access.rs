//! Capability checks at run time: lexical matching of a call's needed capability against the
//! run's grants, then, for file paths, symlink resolution, so a grant covers the file a tool
//! really touches and not only the name it was given.
//!
//! Reasons for a denial are recorded in hashed `capability_denied` events, so they name paths as
//! the call wrote them (or relative to the working directory) and never contain the absolute
//! working directory or a symlink's absolute target.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use oracle_core::capability::{Capability, PATH_DOMAINS, glob_match, normalize_path};

/// The verdict of a capability check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `grant` (as written) covers the call. For an `fs` scope, `resolved` is the absolute path
    /// with every symlink resolved: the one file tools must use.
    Allowed {
        grant: String,
        resolved: Option<PathBuf>,
    },
    Denied {
        reason: String,
    },
}

/// Why a capability is denied. The text is recorded as a `capability_denied` event's reason
/// (hashed), so each variant is worded exactly as before this type existed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// A `net` scope that names no origin.
    #[error(transparent)]
    Url(#[from] oracle_core::capability::UrlError),
    /// `escaped` is the scope as `str::escape_debug` writes it.
    #[error("`{escaped}` contains a NUL byte, which no path may hold")]
    Nul { escaped: String },
    #[error("`{scope}` climbs above the root directory")]
    ClimbsAboveRoot { scope: String },
    #[error("`{scope}` climbs out of the working directory")]
    ClimbsOut { scope: String },
    #[error("no grant covers `{needed}` (this run has no grants)")]
    NoGrants { needed: String },
    /// `granted` lists the run's grants, comma-separated.
    #[error("no grant covers `{needed}` (granted: {granted})")]
    NotGranted { needed: String, granted: String },
    #[error("`{scope}` resolves through a symlink to a path that is not UTF-8")]
    NotUtf8 { scope: String },
    #[error("`{scope}` resolves through a symlink to a place outside the working directory")]
    LinkOutside { scope: String },
    #[error("`{scope}` resolves through a symlink to `{target}`, which no grant covers")]
    LinkNotGranted { scope: String, target: String },
    /// Outside the working directory, named by an absolute path: the target is not this run's
    /// to reveal.
    #[error("`{scope}` resolves through a symlink to a place no grant covers")]
    LinkOutsideNotGranted { scope: String },
    #[error("`{scope}` goes through a symlink whose target does not exist")]
    Dangling { scope: String },
    #[error("`{scope}` cannot be resolved: permission denied")]
    PermissionDenied { scope: String },
    /// Mostly a symlink loop (ELOOP), which has no stable error kind.
    #[error(
        "`{scope}` cannot be resolved: a symlink loop or an unreadable directory is in the way"
    )]
    Unresolvable { scope: String },
}

/// The lexical part of a check (no file system): normalises the needed scope and returns the
/// first grant, in order and as written, that covers it; otherwise why none does.
///
/// For the path domains (`fs`, `proc`): `.` and `..` are resolved, and a `..` that climbs above
/// the start is refused; an absolute path inside `root` (the canonical working directory) is
/// made relative to it, and one outside stays absolute. For `fs`, only an absolute grant covers
/// a path outside (not even `**`, which is everything in the working directory). For `proc`, a
/// program given as a path that normalises to a bare name (`./sh`) stays `./sh`: a bare name is
/// looked up in `PATH`, and a grant for `sh` must not cover a file `sh` in the working
/// directory.
pub fn lexical(grants: &[Capability], needed: &Capability, root: &Path) -> Result<String, Denial> {
    let subject = subject(needed, root)?;
    grants
        .iter()
        .find(|g| covers(g, needed, &subject))
        .map(ToString::to_string)
        .ok_or_else(|| no_grant(grants, needed))
}

/// What a run's calls are checked against: its grants, its working directory, and the run store
/// (the oracle home and the run's directory), which no grant covers.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    pub grants: Vec<Capability>,
    /// Canonical working directory.
    pub root: PathBuf,
    /// Canonical directories no tool may touch, whatever the grants say.
    pub store: Vec<PathBuf>,
}

impl Guard {
    /// [`check`], then the store rule: a call whose file (real path, every symlink resolved) or
    /// program lies inside the store is denied. Run once when the round's verdicts are recorded
    /// and again by each file tool at the moment it touches the path.
    pub fn check(&self, needed: &Capability) -> Verdict {
        // The store first, so the reason names it even where another rule would deny too.
        if let Some(real) = self.real_subject(needed)
            && self.in_store(&real)
        {
            return Verdict::Denied {
                reason: format!(
                    "`{}` is inside the run store (the oracle home), which no tool may touch whatever the grants say",
                    needed.scope
                ),
            };
        }
        check(&self.grants, needed, &self.root)
    }

    /// The file a path-scoped call would touch (every symlink resolved), or the program a
    /// `proc` call names by a path; `None` for other calls and for paths that do not resolve
    /// (which the full check denies anyway).
    fn real_subject(&self, needed: &Capability) -> Option<PathBuf> {
        let named = match needed.domain.as_str() {
            "fs" => normalize_path(&needed.scope)?,
            "proc" if needed.scope.contains('/') => normalize_path(&needed.scope)?,
            _ => return None,
        };
        real_path(&self.root.join(named)).ok()
    }

    /// Whether `real` (a canonical path) is a store directory or inside one.
    pub fn in_store(&self, real: &Path) -> bool {
        self.store.iter().any(|s| real.starts_with(s))
    }
}

/// The full check: [`lexical`], then for `fs` scopes the real path, with symlinks resolved, must
/// stay inside the working directory (unless the call named an absolute path outside it) and
/// be covered by a grant too. `proc` and other domains are checked lexically only. The store
/// rule is [`Guard::check`]'s.
pub fn check(grants: &[Capability], needed: &Capability, root: &Path) -> Verdict {
    // The working directory should be canonical already; making sure costs one system call and
    // keeps a symlinked root from looking like an escape.
    let canonical_root = fs::canonicalize(root);
    let root = canonical_root.as_deref().unwrap_or(root);
    let grant = match lexical(grants, needed, root) {
        Ok(g) => g,
        Err(reason) => {
            return Verdict::Denied {
                reason: reason.to_string(),
            };
        }
    };
    if needed.domain != "fs" {
        return Verdict::Allowed {
            grant,
            resolved: None,
        };
    }
    match resolve_fs(grants, needed, root) {
        Ok(resolved) => Verdict::Allowed {
            grant,
            resolved: Some(resolved),
        },
        Err(reason) => Verdict::Denied {
            reason: reason.to_string(),
        },
    }
}

/// The scope a grant must match: the needed scope, normalised for path domains.
fn subject(needed: &Capability, root: &Path) -> Result<String, Denial> {
    let scope = &needed.scope;
    if needed.domain == "net" {
        return Ok(oracle_core::capability::url_origin(scope)?);
    }
    if !PATH_DOMAINS.contains(&needed.domain.as_str()) {
        return Ok(scope.clone());
    }
    // No file system accepts a NUL in a name; refusing it here names the real problem instead
    // of an unresolvable path, and keeps a NUL from truncating a path anywhere further down.
    if scope.contains('\0') {
        return Err(Denial::Nul {
            escaped: scope.escape_debug().to_string(),
        });
    }
    let Some(normal) = normalize_path(scope) else {
        let scope = scope.clone();
        return Err(if scope.starts_with('/') {
            Denial::ClimbsAboveRoot { scope }
        } else {
            Denial::ClimbsOut { scope }
        });
    };
    let normal = match Path::new(&normal).strip_prefix(root) {
        // `normal` is UTF-8, so any part of it is too.
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => normal,
    };
    if needed.domain == "proc" && scope.contains('/') && !normal.contains('/') {
        return Ok(format!("./{normal}"));
    }
    Ok(normal)
}

/// [`Capability::covers`] for a subject that is already normalised (and, for `proc`, may carry
/// a `./` that `covers` would strip), with one more rule for files: a relative grant covers only
/// paths inside the working directory, so `fs:read:**` means everything here, not everything
/// (that is `fs:read:/**`). Programs are not confined that way: `sh` runs `/bin/sh` anyway, so
/// `proc:exec:**` covers `/usr/bin/wc`.
fn covers(grant: &Capability, needed: &Capability, subject: &str) -> bool {
    let word = |g: &str, n: &str| g == "*" || g == n;
    let outside = needed.domain == "fs" && subject.starts_with('/');
    word(&grant.domain, &needed.domain)
        && word(&grant.action, &needed.action)
        && (!outside || grant.scope.starts_with('/'))
        && glob_match(&grant.grant_pattern(), subject)
}

fn no_grant(grants: &[Capability], needed: &Capability) -> Denial {
    let needed = needed.to_string();
    if grants.is_empty() {
        return Denial::NoGrants { needed };
    }
    let list: Vec<String> = grants.iter().map(ToString::to_string).collect();
    Denial::NotGranted {
        needed,
        granted: list.join(", "),
    }
}

/// The real path of an `fs` scope that passed the lexical check, or why it may not be used.
fn resolve_fs(grants: &[Capability], needed: &Capability, root: &Path) -> Result<PathBuf, Denial> {
    let scope = &needed.scope;
    let lexical = subject(needed, root)?;
    let real = real_path(&root.join(&lexical)).map_err(|why| unresolved(scope, why))?;
    let inside = real.strip_prefix(root).ok();
    let Some(real_subject) = inside.unwrap_or(&real).to_str().map(str::to_owned) else {
        return Err(Denial::NotUtf8 {
            scope: scope.clone(),
        });
    };
    if real_subject == lexical {
        return Ok(real);
    }
    let named_inside = !Path::new(&lexical).is_absolute();
    if named_inside && inside.is_none() {
        return Err(Denial::LinkOutside {
            scope: scope.clone(),
        });
    }
    if grants.iter().any(|g| covers(g, needed, &real_subject)) {
        return Ok(real);
    }
    let scope = scope.clone();
    Err(match inside {
        Some(_) => Denial::LinkNotGranted {
            scope,
            target: real_subject,
        },
        None => Denial::LinkOutsideNotGranted { scope },
    })
}

/// `path` with every symlink of its existing part resolved, for callers that made no capability
/// check (tests, embedders); `None` if it cannot be resolved.
pub fn real_path_for_use(path: &Path) -> Option<PathBuf> {
    real_path(path).ok()
}

/// Why a path has no real path.
enum Unresolved {
    /// A symlink on the way points to nothing. Refused rather than kept as a name: whatever
    /// appears at its target later would be reached through it.
    Dangling,
    Io(io::Error),
}

/// `path` with every symlink resolved: the longest prefix that exists, canonicalised, and the
/// rest (which does not exist yet, e.g. a file about to be written) appended as written.
/// `path` has no `.` or `..` components (it is normalised), so appending is exact.
fn real_path(path: &Path) -> Result<PathBuf, Unresolved> {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        match fs::canonicalize(existing) {
            Ok(mut real) => {
                real.extend(rest.iter().rev());
                return Ok(real);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                // Missing, unless it is a symlink whose target is missing.
                if fs::symlink_metadata(existing).is_ok_and(|m| m.file_type().is_symlink()) {
                    return Err(Unresolved::Dangling);
                }
                match (existing.parent(), existing.file_name()) {
                    (Some(parent), Some(name)) => {
                        rest.push(name.to_os_string());
                        existing = parent;
                    }
                    _ => return Err(Unresolved::Io(e)),
                }
            }
            Err(e) => return Err(Unresolved::Io(e)),
        }
    }
}

fn unresolved(scope: &str, why: Unresolved) -> Denial {
    let scope = scope.to_owned();
    match why {
        Unresolved::Dangling => Denial::Dangling { scope },
        Unresolved::Io(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            Denial::PermissionDenied { scope }
        }
        Unresolved::Io(_) => Denial::Unresolvable { scope },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`super::lexical`] with its denial as the recorded text, which the cases compare.
    fn lexical(grants: &[Capability], needed: &Capability, root: &Path) -> Result<String, String> {
        super::lexical(grants, needed, root).map_err(|e| e.to_string())
    }

    /// A capability as a call builds it, field by field: a needed scope may hold `..`, which
    /// parsing (the way grants enter) refuses.
    fn cap(s: &str) -> Capability {
        let mut parts = s.splitn(3, ':');
        let mut next = || parts.next().unwrap().to_owned();
        Capability {
            domain: next(),
            action: next(),
            scope: next(),
        }
    }

    #[test]
    fn lexical_rules() {
        let root = Path::new("/work/run");
        let grants = [
            cap("fs:read:data/**"),
            cap("proc:exec:sh"),
            cap("fs:read:/etc/hosts"),
        ];
        assert_eq!(
            lexical(&grants, &cap("fs:read:data/a/../b.txt"), root),
            Ok("fs:read:data/**".to_owned())
        );
        assert_eq!(
            lexical(&grants, &cap("fs:read:/work/run/data/x"), root),
            Ok("fs:read:data/**".to_owned()),
            "absolute inside the root is made relative"
        );
        assert_eq!(
            lexical(&grants, &cap("fs:read:/etc/hosts"), root),
            Ok("fs:read:/etc/hosts".to_owned())
        );
        assert_eq!(
            lexical(&grants, &cap("fs:read:../x"), root),
            Err("`../x` climbs out of the working directory".to_owned())
        );
        assert_eq!(
            lexical(&grants, &cap("fs:read:/other/data/x"), root),
            Err(
                "no grant covers `fs:read:/other/data/x` (granted: fs:read:data/**, proc:exec:sh, fs:read:/etc/hosts)"
                    .to_owned()
            )
        );
        assert_eq!(
            lexical(&grants, &cap("proc:exec:sh"), root),
            Ok("proc:exec:sh".to_owned())
        );
        assert!(
            lexical(&grants, &cap("proc:exec:./sh"), root).is_err(),
            "a grant for the program `sh` does not cover a file `sh` in the working directory"
        );
        assert!(lexical(&[cap("proc:exec:./sh")], &cap("proc:exec:./sh"), root).is_ok());
        assert!(
            lexical(
                &[cap("proc:exec:./sh")],
                &cap("proc:exec:/work/run/sh"),
                root
            )
            .is_ok()
        );
        assert!(lexical(&[cap("kv:get:user/*")], &cap("kv:get:user/name"), root).is_ok());
        assert!(lexical(&[cap("kv:get:user/*")], &cap("kv:get:user/a/b"), root).is_err());
        assert_eq!(
            lexical(&[], &cap("kv:get:x"), root),
            Err("no grant covers `kv:get:x` (this run has no grants)".to_owned())
        );
    }

    #[test]
    fn grants_are_tried_in_order() {
        let grants = [cap("fs:read:data/*.txt"), cap("fs:*:**")];
        let root = Path::new("/r");
        assert_eq!(
            lexical(&grants, &cap("fs:read:data/a.txt"), root),
            Ok("fs:read:data/*.txt".to_owned())
        );
        assert_eq!(
            lexical(&grants, &cap("fs:read:data/sub/a.txt"), root),
            Ok("fs:*:**".to_owned())
        );
    }

    fn denied(v: Verdict) -> String {
        match v {
            Verdict::Denied { reason } => reason,
            other => panic!("allowed: {other:?}"),
        }
    }

    /// A working directory with `data/a.txt`, a store directory `home/`, and symlinks: one into
    /// the store, one out of the working directory, one dangling, one loop.
    fn sandbox() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let top = fs::canonicalize(dir.path()).unwrap();
        let root = top.join("work");
        let outside = top.join("outside");
        let store = root.join("home");
        for d in [&root.join("data"), &outside, &store] {
            fs::create_dir_all(d).unwrap();
        }
        fs::write(root.join("data/a.txt"), b"a").unwrap();
        fs::write(outside.join("secret"), b"s").unwrap();
        fs::write(store.join("events.jsonl"), b"").unwrap();
        symlink(store.join("events.jsonl"), root.join("data/log")).unwrap();
        symlink(&outside, root.join("data/out")).unwrap();
        symlink(root.join("data/a.txt"), root.join("data/alias")).unwrap();
        symlink(root.join("nothing"), root.join("data/dangling")).unwrap();
        symlink(root.join("data/loop2"), root.join("data/loop1")).unwrap();
        symlink(root.join("data/loop1"), root.join("data/loop2")).unwrap();
        (dir, root, store, outside)
    }

    /// The store rule holds whatever the grants say, for a file named directly or through a
    /// symlink, and for a program named by a path; a bare program name is looked up in `PATH`
    /// and is not a file here.
    #[test]
    fn the_store_is_out_of_reach_whatever_the_grants() {
        let (_dir, root, store, _) = sandbox();
        let guard = Guard {
            grants: vec![cap("fs:*:**"), cap("proc:exec:**")],
            root: root.clone(),
            store: vec![store.clone()],
        };
        for needed in [
            "fs:read:home/events.jsonl",
            "fs:write:home/new.txt",
            "fs:read:home",
            "fs:read:data/log",
            "proc:exec:./home/events.jsonl",
        ] {
            let reason = denied(guard.check(&cap(needed)));
            assert!(
                reason.contains("inside the run store"),
                "{needed}: {reason}"
            );
            assert!(!reason.contains(root.to_str().unwrap()), "{reason}");
        }
        assert!(guard.in_store(&store));
        assert!(guard.in_store(&store.join("x/y")));
        assert!(!guard.in_store(&root));
        assert!(!guard.in_store(&root.join("homework")));
        match guard.check(&cap("fs:read:data/a.txt")) {
            Verdict::Allowed { grant, resolved } => {
                assert_eq!(grant, "fs:*:**");
                assert_eq!(resolved, Some(root.join("data/a.txt")));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            guard.check(&cap("proc:exec:home")),
            Verdict::Allowed {
                grant: "proc:exec:**".into(),
                resolved: None
            },
            "a bare name is a program in PATH, not the directory"
        );
        let no_store = Guard {
            store: vec![],
            ..guard
        };
        assert!(matches!(
            no_store.check(&cap("fs:read:home/events.jsonl")),
            Verdict::Allowed { .. }
        ));
    }

    /// Symlinks are resolved before a file call is allowed: out of the working directory is
    /// denied without naming the target, dangling and looping links are denied, and a link to
    /// a file a grant covers is allowed, resolved to that file.
    #[test]
    fn file_calls_are_checked_on_the_real_path() {
        let (_dir, root, _, outside) = sandbox();
        let grants = [cap("fs:read:data/**")];
        let reason = denied(check(&grants, &cap("fs:read:data/out/secret"), &root));
        assert!(reason.contains("outside the working directory"), "{reason}");
        assert!(!reason.contains(outside.to_str().unwrap()), "{reason}");
        let reason = denied(check(&grants, &cap("fs:read:data/dangling"), &root));
        assert!(reason.contains("does not exist"), "{reason}");
        let reason = denied(check(&grants, &cap("fs:read:data/loop1"), &root));
        assert!(reason.contains("symlink loop"), "{reason}");
        assert_eq!(
            check(&grants, &cap("fs:read:data/alias"), &root),
            Verdict::Allowed {
                grant: "fs:read:data/**".into(),
                resolved: Some(root.join("data/a.txt"))
            }
        );
        // A file not yet written resolves to where it will be.
        assert_eq!(
            check(&grants, &cap("fs:read:data/new/b.txt"), &root),
            Verdict::Allowed {
                grant: "fs:read:data/**".into(),
                resolved: Some(root.join("data/new/b.txt"))
            }
        );
        // A link inside the working directory to a file no grant covers names where it leads.
        fs::write(root.join("private.txt"), b"p").unwrap();
        std::os::unix::fs::symlink(root.join("private.txt"), root.join("data/private")).unwrap();
        let reason = denied(check(&grants, &cap("fs:read:data/private"), &root));
        assert!(
            reason.contains("to `private.txt`, which no grant covers"),
            "{reason}"
        );
        // Named by its absolute path outside, through a symlink a grant does not cover: the
        // target is not revealed.
        std::os::unix::fs::symlink(outside.join("secret"), outside.join("link")).unwrap();
        let abs = format!("fs:read:{}", outside.join("link").display());
        let grants = [cap(&abs)];
        let reason = denied(check(&grants, &cap(&abs), &root));
        assert!(reason.contains("a place no grant covers"), "{reason}");
        // Only an absolute grant covers a path outside; `**` is everything here, not there.
        let abs = format!("fs:read:{}", outside.join("secret").display());
        assert!(matches!(
            check(&[cap("fs:read:**")], &cap(&abs), &root),
            Verdict::Denied { .. }
        ));
        assert!(matches!(
            check(&[cap("fs:read:/**")], &cap(&abs), &root),
            Verdict::Allowed { .. }
        ));
        assert_eq!(
            real_path_for_use(&root.join("data/alias")),
            Some(root.join("data/a.txt"))
        );
        assert_eq!(real_path_for_use(&root.join("data/dangling")), None);
    }

    #[test]
    fn paths_that_cannot_name_a_file_are_denied_with_the_reason() {
        let root = Path::new("/work/run");
        let grants = [cap("fs:*:**"), cap("fs:read:/**")];
        let nul = Capability {
            domain: "fs".into(),
            action: "read".into(),
            scope: "a\0b".into(),
        };
        assert_eq!(
            lexical(&grants, &nul, root),
            Err("`a\\0b` contains a NUL byte, which no path may hold".to_owned())
        );
        assert_eq!(
            lexical(&grants, &cap("fs:read:/../etc"), root),
            Err("`/../etc` climbs above the root directory".to_owned())
        );
        assert!(lexical(&grants, &cap("net:get:https://a.test"), root).is_err());
        assert_eq!(
            lexical(
                &[cap("net:get:https://a.test:443")],
                &cap("net:get:https://a.test/x"),
                root
            ),
            Ok("net:get:https://a.test:443".to_owned())
        );
    }

    /// Set (to a working directory) in the child process of the permission test below.
    const UNREADABLE_CHILD_ENV: &str = "ORACLE_TEST_ACCESS_UNREADABLE_CHILD";

    /// The check the permission test makes, as a user the directory refuses.
    fn unreadable_reason(root: &Path) -> String {
        denied(check(
            &[cap("fs:read:**")],
            &cap("fs:read:locked/x.txt"),
            root,
        ))
    }

    #[test]
    #[ignore = "run in a child process, as `nobody`, by the permission test"]
    fn unreadable_child() {
        let Some(root) = std::env::var_os(UNREADABLE_CHILD_ENV) else {
            return;
        };
        println!("child: {}", unreadable_reason(Path::new(&root)));
    }

    /// A directory the run may not search is denied as "permission denied", not as a loop.
    /// Root searches any directory, so as root (as in CI) the check runs in a child process
    /// that `setpriv` has made `nobody`.
    #[test]
    fn an_unsearchable_directory_is_denied_as_such() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir(root.join("locked")).unwrap();
        fs::write(root.join("locked/x.txt"), b"x").unwrap();
        fs::set_permissions(root.join("locked"), fs::Permissions::from_mode(0o000)).unwrap();
        let reason = if rustix::process::geteuid().is_root() {
            // The test binary may sit where `nobody` cannot reach it: run a copy.
            let exe = root.join("child");
            fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
            let out = std::process::Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&exe)
                .args(["--ignored", "--exact", "access::tests::unreadable_child"])
                .args(["--nocapture", "--test-threads=1"])
                .env(UNREADABLE_CHILD_ENV, &root)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            stdout
        } else {
            unreadable_reason(&root)
        };
        assert!(
            reason.contains("`locked/x.txt` cannot be resolved: permission denied"),
            "{reason}"
        );
        fs::set_permissions(root.join("locked"), fs::Permissions::from_mode(0o755)).unwrap();
    }
}
