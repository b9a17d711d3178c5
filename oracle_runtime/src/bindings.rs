//! A run's bindings (`run.json`): where its models are, which environment variables hold its
//! secrets, where its declared tools and its working directory are. Given when the run starts,
//! kept beside the log so a resume can bind the same things again, and sealed with the home's
//! key (`crate::seal`), because the log does not hash them and each one directs an effect: a
//! model's URL and key variable decide where a secret is sent, the root decides where a write
//! lands.
//!
//! Each binding carries its own MAC (over the run's id, the binding's name and its value), so a
//! change is named: "binding `model fast` changed". What is absent: no binding whose MAC fails
//! (or that has none) is returned by [`Stored::sealed`]; callers get the value only through
//! [`Stored::unchecked`], whose name says what it is, for showing a run, never for acting.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::seal::SealKey;
use crate::tools::llm::ModelBinding;

/// The file in a run directory.
pub const META_FILE: &str = "run.json";

/// Layout of `run.json`: 1 had no seal; 2 seals each binding.
pub const BINDINGS_FORMAT: u64 = 2;

/// Most bytes of `run.json` read (it holds a few paths and the model bindings).
pub const META_BYTES_MAX: u64 = 64 << 10;

/// The MAC purpose of a binding (`SealKey::mac`).
const PURPOSE: &str = "oracle v1 run binding";

/// What a run was bound to when it started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bindings {
    /// The working directory (absolute, canonical).
    pub root: Option<PathBuf>,
    pub models: BTreeMap<String, ModelBinding>,
    /// Secret name to the environment variable holding its value (never the value).
    pub secrets: BTreeMap<String, String>,
    /// Declared tool directories (absolute).
    pub tools: Vec<PathBuf>,
}

/// One binding's name, as messages and the seal name it: `root`, `model NAME`, `secret NAME`,
/// `tools`.
pub type BindingName = String;

impl Bindings {
    /// Every binding as (name, value), in name order.
    fn entries(&self) -> BTreeMap<BindingName, Value> {
        let mut out = BTreeMap::new();
        if let Some(root) = &self.root {
            out.insert("root".to_owned(), json!(root.to_string_lossy()));
        }
        for (name, b) in &self.models {
            out.insert(
                format!("model {name}"),
                serde_json::to_value(b).unwrap_or(Value::Null),
            );
        }
        for (name, var) in &self.secrets {
            out.insert(format!("secret {name}"), json!(var));
        }
        if !self.tools.is_empty() {
            let dirs: Vec<_> = self.tools.iter().map(|d| d.to_string_lossy()).collect();
            out.insert("tools".to_owned(), json!(dirs));
        }
        out
    }

    /// `run.json` for run `run`, every binding sealed with `key`.
    pub fn to_json(&self, run: &str, key: &SealKey) -> Value {
        let mut meta = json!({"format": BINDINGS_FORMAT});
        if let Some(root) = &self.root {
            meta["root"] = json!(root.to_string_lossy());
        }
        if !self.models.is_empty() {
            meta["models"] = serde_json::to_value(&self.models).unwrap_or_default();
        }
        if !self.secrets.is_empty() {
            meta["secrets"] = serde_json::to_value(&self.secrets).unwrap_or_default();
        }
        if !self.tools.is_empty() {
            meta["tools"] = serde_json::to_value(&self.tools).unwrap_or_default();
        }
        let seal: Map<String, Value> = self
            .entries()
            .iter()
            .map(|(name, value)| (name.clone(), json!(mac(key, run, name, value))))
            .collect();
        meta["seal"] = Value::Object(seal);
        meta
    }

    /// Reads `dir`'s `run.json` (none, or one that does not parse: no bindings).
    pub fn read(dir: &Path) -> Stored {
        let meta = read_meta(dir).unwrap_or(Value::Null);
        let field = |k: &str| meta.get(k).cloned().unwrap_or(Value::Null);
        let bindings = Bindings {
            root: meta.get("root").and_then(Value::as_str).map(PathBuf::from),
            models: serde_json::from_value(field("models")).unwrap_or_default(),
            secrets: serde_json::from_value(field("secrets")).unwrap_or_default(),
            tools: serde_json::from_value(field("tools")).unwrap_or_default(),
        };
        let seal = meta
            .get("seal")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.parse().ok()?)))
                    .collect()
            })
            .unwrap_or_default();
        let run = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Stored {
            run,
            bindings,
            seal,
        }
    }
}

/// The MAC of binding `name` = `value` of run `run`.
fn mac(key: &SealKey, run: &str, name: &str, value: &Value) -> oracle_core::Hash {
    key.mac(PURPOSE, &mac_bytes(run, name, value))
}

/// `run.json` as read, not yet trusted.
#[derive(Clone, Debug)]
pub struct Stored {
    run: String,
    bindings: Bindings,
    seal: BTreeMap<BindingName, oracle_core::Hash>,
}

/// A binding `run.json` holds that its seal does not vouch for, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsealed {
    pub binding: BindingName,
    pub why: UnsealedWhy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnsealedWhy {
    /// Its value is not the one sealed.
    Changed,
    /// The seal has no entry for it (added since, or a run.json of format 1).
    NotSealed,
    /// The seal names it but run.json no longer holds it.
    Removed,
    /// The home has no key, or it could not be read.
    NoKey,
}

impl std::fmt::Display for Unsealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.why {
            UnsealedWhy::Changed => "changed since the run started",
            UnsealedWhy::NotSealed => {
                "is not sealed by this home (added since the run started, or written before bindings were sealed)"
            }
            UnsealedWhy::Removed => "was removed since the run started",
            UnsealedWhy::NoKey => "cannot be checked: the home has no sealing key",
        };
        write!(f, "binding `{}` in run.json {why}", self.binding)
    }
}

impl Stored {
    /// The bindings whose seal holds under `key`, and those it does not vouch for. A binding
    /// that is not vouched for is left out of the returned bindings.
    pub fn sealed(&self, key: Option<&SealKey>) -> (Bindings, Vec<Unsealed>) {
        let entries = self.bindings.entries();
        let mut problems = Vec::new();
        let mut good = |name: &str| -> bool {
            let value = &entries[name];
            let why = match (key, self.seal.get(name)) {
                (None, _) => UnsealedWhy::NoKey,
                (Some(_), None) => UnsealedWhy::NotSealed,
                (Some(k), Some(m)) if k.verify(PURPOSE, &mac_bytes(&self.run, name, value), m) => {
                    return true;
                }
                (Some(_), Some(_)) => UnsealedWhy::Changed,
            };
            problems.push(Unsealed {
                binding: name.to_owned(),
                why,
            });
            false
        };
        let b = &self.bindings;
        let out = Bindings {
            root: b.root.clone().filter(|_| good("root")),
            models: b
                .models
                .iter()
                .filter(|(n, _)| good(&format!("model {n}")))
                .map(|(n, m)| (n.clone(), m.clone()))
                .collect(),
            secrets: b
                .secrets
                .iter()
                .filter(|(n, _)| good(&format!("secret {n}")))
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect(),
            tools: if b.tools.is_empty() || good("tools") {
                b.tools.clone()
            } else {
                Vec::new()
            },
        };
        if key.is_some() {
            for name in self.seal.keys().filter(|n| !entries.contains_key(*n)) {
                problems.push(Unsealed {
                    binding: name.clone(),
                    why: UnsealedWhy::Removed,
                });
            }
        }
        (out, problems)
    }

    /// The bindings as the file says, checked by nothing: for showing a run (its plan's step
    /// graph, its working directory), never for binding a drive.
    pub fn unchecked(&self) -> &Bindings {
        &self.bindings
    }
}

/// What a binding's MAC covers: canonical bytes, so the same value gives the same MAC whatever
/// the key order on disk.
fn mac_bytes(run: &str, name: &str, value: &Value) -> Vec<u8> {
    oracle_core::canon::encode(&json!([run, name, value])).unwrap_or_default()
}

/// `run.json` as JSON, read no further than [`META_BYTES_MAX`]; `None` if it cannot be read.
fn read_meta(dir: &Path) -> Option<Value> {
    let mut text = String::new();
    fs::File::open(dir.join(META_FILE))
        .ok()?
        .take(META_BYTES_MAX)
        .read_to_string(&mut text)
        .ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound() -> Bindings {
        let mut b = Bindings {
            root: Some(PathBuf::from("/work/project")),
            tools: vec![PathBuf::from("/work/project/tools")],
            ..Bindings::default()
        };
        b.models.insert(
            "fast".into(),
            ModelBinding {
                url: "http://127.0.0.1:8080/v1".into(),
                model: "fast".into(),
                key_env: Some("FAST_KEY".into()),
                stream: false,
            },
        );
        b.secrets.insert("token".into(), "API_TOKEN".into());
        b
    }

    fn written(dir: &Path, meta: &Value) -> Stored {
        fs::write(dir.join(META_FILE), format!("{meta:#}\n")).unwrap();
        Bindings::read(dir)
    }

    #[test]
    fn sealed_bindings_read_back_whole() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("run-1");
        fs::create_dir(&dir).unwrap();
        let key = SealKey::from_bytes([1; 32]);
        let stored = written(&dir, &bound().to_json("run-1", &key));
        assert_eq!(stored.sealed(Some(&key)), (bound(), Vec::new()));
    }

    #[test]
    fn each_edit_of_a_binding_is_named_and_left_out() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("run-1");
        fs::create_dir(&dir).unwrap();
        let key = SealKey::from_bytes([1; 32]);
        let meta = bound().to_json("run-1", &key);
        type Edit = Box<dyn Fn(&mut Value)>;
        let edits: Vec<(&str, Edit, UnsealedWhy)> = vec![
            (
                "model fast",
                Box::new(|m| m["models"]["fast"]["url"] = json!("http://evil.example/v1")),
                UnsealedWhy::Changed,
            ),
            (
                "model fast",
                Box::new(|m| m["models"]["fast"]["key_env"] = json!("HOME_SECRET")),
                UnsealedWhy::Changed,
            ),
            (
                "secret token",
                Box::new(|m| m["secrets"]["token"] = json!("AWS_SECRET_ACCESS_KEY")),
                UnsealedWhy::Changed,
            ),
            (
                "root",
                Box::new(|m| m["root"] = json!("/home/victim")),
                UnsealedWhy::Changed,
            ),
            (
                "tools",
                Box::new(|m| m["tools"] = json!(["/tmp/evil"])),
                UnsealedWhy::Changed,
            ),
            (
                "secret extra",
                Box::new(|m| m["secrets"]["extra"] = json!("HOME")),
                UnsealedWhy::NotSealed,
            ),
            (
                "model fast",
                Box::new(|m| {
                    m["models"].as_object_mut().unwrap().remove("fast");
                }),
                UnsealedWhy::Removed,
            ),
        ];
        for (name, edit, why) in edits {
            let mut m = meta.clone();
            edit(&mut m);
            let (b, problems) = written(&dir, &m).sealed(Some(&key));
            assert_eq!(
                problems,
                vec![Unsealed {
                    binding: name.into(),
                    why
                }],
                "{name}"
            );
            assert!(
                !b.entries().contains_key(name),
                "{name}: an unsealed binding is left out"
            );
        }
    }

    /// `run.json` is read no further than `META_BYTES_MAX`: a larger one (a plan or anyone
    /// could pad it) is not parsed at all, so it names no directory.
    #[test]
    fn a_run_json_over_meta_bytes_max_is_read_no_further() {
        let dir = tempfile::tempdir().unwrap();
        let small = json!({"format": 1, "root": "/somewhere"});
        fs::write(dir.path().join(META_FILE), small.to_string()).unwrap();
        let root = |d: &Path| Bindings::read(d).unchecked().root.clone();
        assert_eq!(root(dir.path()), Some(PathBuf::from("/somewhere")));
        let pad = "x".repeat(META_BYTES_MAX as usize);
        let big = json!({"format": 1, "pad": pad, "root": "/somewhere"});
        fs::write(dir.path().join(META_FILE), big.to_string()).unwrap();
        assert_eq!(root(dir.path()), None);
    }

    #[test]
    fn another_runs_or_another_homes_seal_vouches_for_nothing() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("run-2");
        fs::create_dir(&dir).unwrap();
        let key = SealKey::from_bytes([1; 32]);
        let copied = written(&dir, &bound().to_json("run-1", &key));
        assert_eq!(copied.sealed(Some(&key)).0, Bindings::default());
        let other = written(
            &dir,
            &bound().to_json("run-2", &SealKey::from_bytes([2; 32])),
        );
        assert_eq!(other.sealed(Some(&key)).0, Bindings::default());
        assert!(
            other
                .sealed(None)
                .1
                .iter()
                .all(|u| u.why == UnsealedWhy::NoKey)
        );
    }
}
