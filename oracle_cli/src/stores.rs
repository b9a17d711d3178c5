//! `oracle memory --memory NAME | list | export | import | seal`, `oracle adjudications --memory`,
//! `oracle adjudicate --memory`, `oracle verify --memory`: named belief stores shared by runs.

use std::io::Read;
use std::path::Path;

use oracle_host::shared::{StoreVerdict, requests_json, store_json};
use oracle_host::{OutsideClaim, Reinstate, Submission};
use oracle_memory::shared::Store;
use serde_json::{Value, json};

use crate::exit::{self, CliError};
use crate::memory::MemoryArgs;

/// A home's shared stores, or the database's (`--store URL`) when it is given: the store
/// commands below keep one signature whichever backend they reach.
fn host(
    home: &Path,
    database: Option<&oracle_host::Database>,
    json: bool,
) -> Result<oracle_host::Home, CliError> {
    Ok(crate::run::host(home, json)?.with_database(database))
}

/// Whether `command` is about named stores rather than a run (`--memory NAME`, or `oracle
/// memory list|export|import|forget|ledger|compact`): over `--store URL` it reaches the database's stores.
pub fn about_stores(command: &crate::Command) -> bool {
    use crate::Command as C;
    match command {
        C::Memory(a) => {
            a.memory.is_some()
                || matches!(
                    a.run.as_deref(),
                    Some("list" | "export" | "import" | "forget" | "ledger" | "compact" | "seal")
                )
        }
        C::Adjudications(a) => a.memory.is_some(),
        C::Adjudicate(a) => a.memory.is_some(),
        C::Claim(a) => a.memory.is_some(),
        C::Sweep(a) => a.memory.is_some(),
        C::Reinstate(a) => a.memory.is_some(),
        C::Verify(a) => a.memory.is_some(),
        _ => false,
    }
}

fn err(json: bool) -> impl Fn(oracle_host::HostError) -> CliError {
    move |e| crate::run::host_error(e, json)
}

/// `oracle memory` when it is about stores: `list`, `export NAME`, `import NAME`, or
/// `--memory NAME`. `None`: it is about a run.
pub fn memory(
    home: &Path,
    database: Option<&oracle_host::Database>,
    a: &MemoryArgs,
) -> Result<Option<u8>, CliError> {
    let h = host(home, database, a.json)?;
    if let Some(name) = &a.memory {
        // One line named: only its part of the store is read.
        let store = match (&a.subject, &a.predicate) {
            (Some(s), Some(p)) => h.store_line(name, s, p),
            _ => h.store(name),
        };
        let store = store.map_err(err(a.json))?;
        let v = store_json(
            name,
            &store,
            a.as_of,
            a.subject.as_deref(),
            a.predicate.as_deref(),
        );
        show(name, &store, &v, a.json)?;
        return Ok(Some(exit::OK));
    }
    let name = || {
        a.name.clone().ok_or_else(|| {
            CliError::input("give the store's name: oracle memory export|import NAME")
        })
    };
    match a.run.as_deref() {
        Some("list") if a.name.is_none() => {
            let names = h.stores().map_err(err(a.json))?;
            if a.json {
                crate::out::json(&json!({"stores": names}))?;
            } else if names.is_empty() {
                outln!("no stores in this home (oracle run --memory NAME makes one)")?;
            }
            for n in names.iter().filter(|_| !a.json) {
                outln!("{n}")?;
            }
            Ok(Some(exit::OK))
        }
        Some("forget") => {
            let name = name()?;
            let rec = h.store_forget(&name, &a.note).map_err(err(a.json))?;
            if a.json {
                crate::out::json(&json!({"ok": true, "forgotten": rec}))?;
            } else {
                outln!(
                    "forgot store {name} ({} records, head {}): ledger record {}",
                    rec.records,
                    rec.head,
                    rec.seq
                )?;
                outln!("note     runs that read it keep their recorded copies of what they read")?;
            }
            Ok(Some(exit::OK))
        }
        Some("ledger") if a.name.is_none() => {
            let ledger = h.store_ledger().map_err(err(a.json))?;
            if a.json {
                crate::out::json(&ledger.to_value())?;
            }
            for r in ledger.records.iter().filter(|_| !a.json) {
                outln!(
                    "{} {} {} ({} records, head {}) {}",
                    r.seq,
                    r.kind,
                    r.store,
                    r.records,
                    r.head,
                    r.note
                )?;
            }
            Ok(Some(exit::OK))
        }
        Some("compact") => compact(&h, &name()?, a.keep, a.json).map(Some),
        Some("seal") => {
            let name = name()?;
            let (head, adopted) = h.store_adopt(&name).map_err(err(a.json))?;
            if a.json {
                let v = json!({"ok": true, "store": head.to_value(&name), "sealed": adopted});
                crate::out::json(&v)?;
            } else if adopted {
                outln!(
                    "sealed store {name}: {} records checked, head {}",
                    head.records,
                    head.hash.to_hex()
                )?;
            } else {
                outln!("store {name} is sealed already: checked, nothing written")?;
            }
            Ok(Some(exit::OK))
        }
        Some("export") => {
            let bytes = h.store_export(&name()?).map_err(err(a.json))?;
            crate::out::write_bytes(&bytes)?;
            Ok(Some(exit::OK))
        }
        Some("import") => {
            let text = match &a.file {
                Some(p) => std::fs::read_to_string(p)
                    .map_err(|e| CliError::input(format!("{}: {e}", p.display())))?,
                None => {
                    let mut s = String::new();
                    std::io::stdin()
                        .read_to_string(&mut s)
                        .map_err(|e| CliError::input(format!("stdin: {e}")))?;
                    s
                }
            };
            let name = name()?;
            let store = h.store_import(&name, &text).map_err(err(a.json))?;
            outln!(
                "imported store {name}: {} records, head {}",
                store.head.records,
                store.head.hash.to_hex()
            )?;
            Ok(Some(exit::OK))
        }
        _ => Ok(None),
    }
}

/// `oracle memory compact NAME --keep N`.
fn compact(
    h: &oracle_host::Home,
    name: &str,
    keep: Option<u64>,
    json: bool,
) -> Result<u8, CliError> {
    let keep = keep.ok_or_else(|| {
        CliError::input("give how many records to keep: oracle memory compact NAME --keep N")
    })?;
    let c = h.store_compact(name, keep).map_err(err(json))?;
    let segment = c.segment.as_ref().map(|s| s.to_value());
    if json {
        let v = json!({"ok": true, "store": c.head.to_value(name), "kept": c.kept, "compacted": segment});
        crate::out::json(&v)?;
        return Ok(exit::OK);
    }
    match &c.segment {
        Some(s) => outln!(
            "compacted store {name}: records {}..{} folded into its base (head {}, digest {}); {} kept",
            s.from,
            s.to,
            s.head,
            s.digest,
            c.kept
        )?,
        None => outln!(
            "store {name}: {} records in its log, none to compact",
            c.kept
        )?,
    }
    Ok(exit::OK)
}

fn show(name: &str, store: &Store, v: &Value, json: bool) -> Result<(), CliError> {
    if json {
        crate::out::json(v)?;
        return Ok(());
    }
    outln!(
        "store {name}: {} records, head {}",
        store.head.records,
        store.head.hash.short()
    )?;
    for line in v["lines"].as_array().into_iter().flatten() {
        let b = &line["belief"];
        let value = match b.get("value") {
            Some(v) => v.to_string(),
            None => String::new(),
        };
        outln!(
            "{} / {}: {} {value}",
            line["subject"].as_str().unwrap_or(""),
            line["predicate"].as_str().unwrap_or(""),
            b["status"].as_str().unwrap_or("")
        )?;
    }
    for r in v["requests"].as_array().into_iter().flatten() {
        print_request(r)?;
    }
    Ok(())
}

fn print_request(r: &Value) -> Result<(), CliError> {
    outln!(
        "{} {} {} / {}: challenger {} (run {}) against {} (run {})",
        r["handle"].as_str().unwrap_or(""),
        r["status"].as_str().unwrap_or(""),
        r["subject"].as_str().unwrap_or(""),
        r["predicate"].as_str().unwrap_or(""),
        &r["challenger"]["claim"].as_str().unwrap_or("")[..12],
        r["challenger"]["run"].as_str().unwrap_or(""),
        &r["incumbent"]["claim"].as_str().unwrap_or("")[..12],
        r["incumbent"]["run"].as_str().unwrap_or(""),
    )?;
    Ok(())
}

/// `oracle adjudications --memory NAME`.
pub fn requests(
    home: &Path,
    database: Option<&oracle_host::Database>,
    name: &str,
    json: bool,
) -> Result<u8, CliError> {
    let store = host(home, database, json)?.store(name).map_err(err(json))?;
    let all = requests_json(&store);
    if !json && all.is_empty() {
        outln!("no adjudications in store {name}")?;
    }
    for r in &all {
        match json {
            true => crate::out::json(r)?,
            false => print_request(r)?,
        }
    }
    Ok(exit::OK)
}

/// `oracle adjudicate --memory NAME HANDLE`: one verdict under the store's lock; a verdict
/// given twice (two adjudicators at once) applies once, the other exits 6. Then every run
/// waiting on a line of the store is woken: resumed here in a file home, sent a resume signal
/// over `--store URL` (its worker resumes it).
pub fn adjudicate(
    home: &Path,
    database: Option<&oracle_host::Database>,
    name: &str,
    sub: Submission,
    json: bool,
) -> Result<u8, CliError> {
    let v = StoreVerdict {
        handle: sub.handle,
        verdict: sub.verdict,
        evidence: sub.evidence,
        note: sub.note,
        by: sub.by,
    };
    let h = host(home, database, json)?;
    let (store, effects) = h.store_adjudicate(name, &v).map_err(err(json))?;
    let woken = wake(&h, database, home, name).map_err(err(json))?;
    if json {
        crate::out::json(&json!({
            "ok": true, "outcome": "applied", "store": store.head.to_value(name),
            "handle": v.handle, "verdict": v.verdict, "effects": effects.to_value(),
            "woken": woken,
        }))?;
        return Ok(exit::OK);
    }
    outln!(
        "verdict  {} on {} recorded in store {name} as record {}",
        v.verdict,
        v.handle,
        store.head.records - 1
    )?;
    for w in &woken {
        outln!(
            "woke     {} (waited on {}/{}): {}",
            w["run"].as_str().unwrap_or(""),
            w["subject"].as_str().unwrap_or(""),
            w["predicate"].as_str().unwrap_or(""),
            w["outcome"].as_str().unwrap_or("")
        )?;
    }
    Ok(exit::OK)
}

/// Wakes the runs waiting on a line of store `name`: each one's run, line and outcome (its
/// status after the resume, why it could not be resumed now, or the signal sent).
fn wake(
    h: &oracle_host::Home,
    database: Option<&oracle_host::Database>,
    home: &Path,
    name: &str,
) -> Result<Vec<Value>, oracle_host::HostError> {
    let line = |w: &oracle_host::shared::StoreWaiter, outcome: String| json!({"run": w.run, "subject": w.subject, "predicate": w.predicate, "outcome": outcome});
    if let Some(db) = database {
        let sent = db.signal_store_waiters(home, name)?;
        return Ok(sent
            .iter()
            .map(|(w, id)| line(w, format!("resume signal {id} sent")))
            .collect());
    }
    Ok(h.wake_store_waiters(name)?
        .into_iter()
        .map(|(w, r)| match r {
            Ok(status) => line(&w, status),
            Err(e) => line(&w, format!("still suspended ({}): {e}", e.code())),
        })
        .collect())
}

/// `oracle claim --memory NAME`: a claim from outside any run through the store's gate.
pub fn claim(
    home: &Path,
    database: Option<&oracle_host::Database>,
    name: &str,
    c: OutsideClaim,
    json: bool,
) -> Result<u8, CliError> {
    let (store, assertion) = host(home, database, json)?
        .store_claim(name, c.claim, &c.note)
        .map_err(err(json))?;
    if json {
        crate::out::json(&json!({
            "ok": true, "store": store.head.to_value(name), "assertion": assertion,
        }))?;
        return Ok(exit::OK);
    }
    outln!(
        "claim    recorded in store {name} as record {}: {}",
        store.head.records - 1,
        assertion["disposition"].as_str().unwrap_or("")
    )?;
    if let Some(h) = assertion["adjudication"]["handle"].as_str() {
        outln!(
            "next     oracle adjudicate --memory {name} {h} --verdict affirm|deny|unknown --evidence external_first_hand"
        )?;
    }
    Ok(exit::OK)
}

/// `oracle sweep --memory NAME`: the store's expired requests become contested.
pub fn sweep(
    home: &Path,
    database: Option<&oracle_host::Database>,
    name: &str,
    json: bool,
) -> Result<u8, CliError> {
    let (store, n) = host(home, database, json)?
        .store_sweep(name)
        .map_err(err(json))?;
    if json {
        crate::out::json(&json!({"ok": true, "store": store.head.to_value(name), "expired": n}))?;
    } else {
        outln!("sweep    {n} request(s) of store {name} expired: now contested")?;
    }
    Ok(exit::OK)
}

/// `oracle reinstate --memory NAME CLAIM`: a store's superseded claim made live again.
pub fn reinstate(
    home: &Path,
    database: Option<&oracle_host::Database>,
    name: &str,
    r: &Reinstate,
    json: bool,
) -> Result<u8, CliError> {
    let (store, done) = host(home, database, json)?
        .store_reinstate(name, &r.claim, r.evidence, &r.note)
        .map_err(err(json))?;
    if json {
        crate::out::json(&json!({
            "ok": true, "outcome": "reinstated", "store": store.head.to_value(name),
            "effects": done.to_value(),
        }))?;
    } else {
        outln!(
            "reinstated claim {} in store {name} as record {}",
            done.claim.short(),
            store.head.records - 1
        )?;
    }
    Ok(exit::OK)
}

/// `oracle verify --memory NAME`: every record of the store checked (links, hashes, and the
/// gate's decisions re-read).
pub fn verify(
    home: &Path,
    database: Option<&oracle_host::Database>,
    name: &str,
    json: bool,
) -> Result<u8, CliError> {
    let (store, segments) = host(home, database, json)?
        .store_verify(name)
        .map_err(err(json))?;
    if json {
        let compacted: Vec<Value> = segments.iter().map(|s| s.to_value()).collect();
        let v = json!({"ok": true, "store": store.head.to_value(name), "compacted": compacted});
        crate::out::json(&v)?;
        return Ok(exit::OK);
    }
    outln!(
        "ok: store {name}, {} records, head {}",
        store.head.records,
        store.head.hash.to_hex()
    )?;
    for s in &segments {
        outln!(
            "compacted records {}..{}: head {}, digest {}",
            s.from,
            s.to,
            s.head,
            s.digest
        )?;
    }
    Ok(exit::OK)
}
