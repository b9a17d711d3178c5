//! Benchmarks of declared tools (issue 19, docs/TOOLS.md): the cost of one call of a trivial
//! wasm tool (its execution is a handful of instructions, so the time is oracle's overhead:
//! a fresh store and instance, `alloc`, copying the input in and the output out, parsing it;
//! target at most 20 µs), of the shipped `data.adler32` module, and of the shipped exec tool
//! (`text.fingerprint`: a shell script running `cksum`, so mostly process creation).
//!
//! Before the groups run, the fuel one `data.adler32` call uses is printed (BENCHMARKS.md).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use criterion::{Criterion, criterion_group};
use oracle_core::State;
use oracle_runtime::declared::{self, McpMode};
use oracle_runtime::tool::{Registry, ToolContext};
use serde_json::{Value, json};

const TRIVIAL_WAT: &str = r#"(module
  (memory (export "memory") 1)
  (data (i32.const 0) "{}")
  (func (export "alloc") (param i32) (result i32) i32.const 1024)
  (func (export "run") (param i32 i32) (result i64) i64.const 2))"#;

const TRIVIAL_TOML: &str = r#"name = "bench.trivial"
version = "1.0.0"
description = "returns {}"
input_schema = { type = "object" }
output_schema = {}

[wasm]
module = "trivial.wat"
"#;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tools")
}

/// The registry with the shipped exec and wasm tools and the trivial module.
fn registry(dir: &Path) -> (Registry, Arc<declared::wasm::WasmTool>) {
    for f in [
        "adler32.toml",
        "adler32.wat",
        "fingerprint.toml",
        "fingerprint.sh",
    ] {
        std::fs::copy(fixtures().join(f), dir.join(f)).unwrap();
    }
    std::fs::write(dir.join("trivial.wat"), TRIVIAL_WAT).unwrap();
    std::fs::write(dir.join("trivial.toml"), TRIVIAL_TOML).unwrap();
    let loaded = declared::load(&[dir.to_path_buf()], &Arc::default(), McpMode::Start).unwrap();
    let adler = loaded
        .tools
        .iter()
        .find_map(|e| e.wasm.clone().filter(|w| w.decl.name == "data.adler32"))
        .unwrap();
    let mut registry = oracle_runtime::tools::builtin();
    declared::declare(&mut registry, loaded).unwrap();
    (registry, adler)
}

fn call(registry: &Registry, name: &str, input: &Value, root: &Path, state: &State) -> Value {
    let t = registry.get(name).unwrap();
    let cx = ToolContext {
        run: None,
        step: "s",
        attempt: 1,
        tick: 1,
        seed: 0,
        state,
        root,
        resolved: None,
        timeout_ms: t.decl.timeout_ms,
        output_bytes_max: t.decl.output_bytes_max,
        access: None,
        earlier_failures: &[],
    };
    t.tool.call(input, &cx).unwrap().output
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let (registry, adler) = registry(dir.path());
    let root = dir.path().canonicalize().unwrap();
    let state = State::new();
    let input = json!({"text": "the quick brown fox jumps over the lazy dog"});
    let bytes = declared::input_json(&input).unwrap();
    let (_, usage) = adler.execute(&bytes, 4096).unwrap();
    println!(
        "data.adler32 on a {}-byte input: {} units of fuel per call",
        bytes.len(),
        usage.fuel
    );
    let mut g = c.benchmark_group("declared");
    g.bench_function("wasm_trivial_call", |b| {
        b.iter(|| call(&registry, "bench.trivial", &json!({}), &root, &state))
    });
    g.bench_function("wasm_adler32_call", |b| {
        b.iter(|| call(&registry, "data.adler32", &input, &root, &state))
    });
    g.sample_size(20);
    g.bench_function("exec_fingerprint_call", |b| {
        b.iter(|| call(&registry, "text.fingerprint", &input, &root, &state))
    });
    g.finish();
}

criterion_group!(declared_benches, benches);
oracle_runtime::bench_main!(declared_benches);
