//! Declared WebAssembly tools: a module run by the `wasmi` interpreter with no imports at all
//! (no clock, randomness, files or network), a fuel limit and a memory limit, through a small
//! ABI: JSON bytes in, JSON bytes out (docs/TOOLS.md, "The wasm ABI").
//!
//! A call gets a fresh instance, so nothing carries over from one call to the next: the output
//! is a function of the module's bytes and the input, which is why replay runs it again and
//! compares.

use serde_json::Value;
use wasmi::{Config, Engine, Linker, Module, Store, StoreLimits, StoreLimitsBuilder, TrapCode};

use super::manifest::Wasm;
use crate::tool::{Tool, ToolContext, ToolDecl, ToolError, ToolOutput};

/// A compiled module and its limits.
pub struct WasmTool {
    pub decl: ToolDecl,
    engine: Engine,
    module: Module,
    limits: Wasm,
}

/// What one execution used, for `oracle tools call` and the benchmarks (never recorded: fuel
/// counts depend on the interpreter's version).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub fuel: u64,
}

/// Why a module is refused ([`compile`]); a declared tool's problem quotes it. `reason` is the
/// compiler's own text.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    #[error("the .wat text does not compile: {reason}")]
    Wat { reason: String },
    #[error("not a valid WebAssembly module: {reason}")]
    Invalid { reason: String },
    /// `imports`: `module.name`, comma-separated.
    #[error(
        "the module imports {imports}: a wasm tool gets no imports (no clock, randomness, files or network)"
    )]
    Imports { imports: String },
    #[error("the module does not export `{name}` ({what}): see docs/TOOLS.md, \"The wasm ABI\"")]
    Export {
        name: &'static str,
        what: &'static str,
    },
}

/// Compiles `bytes` (`.wasm` binary, or `.wat` text when `text`), refusing any import.
pub fn compile(bytes: &[u8], text: bool) -> Result<(Engine, Module), WasmError> {
    let binary;
    let bytes = if text {
        binary = wat::parse_bytes(bytes).map_err(|e| WasmError::Wat {
            reason: e.to_string(),
        })?;
        &binary[..]
    } else {
        bytes
    };
    let mut config = Config::default();
    config.consume_fuel(true);
    let engine = Engine::new(&config);
    let module = Module::new(&engine, bytes).map_err(|e| WasmError::Invalid {
        reason: e.to_string(),
    })?;
    let imports: Vec<String> = module
        .imports()
        .map(|i| format!("{}.{}", i.module(), i.name()))
        .collect();
    if !imports.is_empty() {
        return Err(WasmError::Imports {
            imports: imports.join(", "),
        });
    }
    for (name, what) in [
        ("memory", "a memory"),
        ("alloc", "a function (i32) -> i32"),
        ("run", "a function (i32, i32) -> i64"),
    ] {
        if module.get_export(name).is_none() {
            return Err(WasmError::Export { name, what });
        }
    }
    Ok((engine, module))
}

impl WasmTool {
    pub fn new(
        decl: ToolDecl,
        bytes: &[u8],
        text: bool,
        limits: Wasm,
    ) -> Result<WasmTool, WasmError> {
        let (engine, module) = compile(bytes, text)?;
        Ok(WasmTool {
            decl,
            engine,
            module,
            limits,
        })
    }

    /// Runs the module on `input` (canonical JSON bytes), with the call's output limit.
    pub fn execute(
        &self,
        input: &[u8],
        output_bytes_max: u64,
    ) -> Result<(Value, Usage), ToolError> {
        let limits: StoreLimits = StoreLimitsBuilder::new()
            .memory_size(usize::try_from(self.limits.memory_bytes_max).unwrap_or(usize::MAX))
            .memories(1)
            .instances(1)
            .tables(4)
            .trap_on_grow_failure(true)
            .build();
        let mut store = Store::new(&self.engine, limits);
        store.limiter(|l| l);
        store
            .set_fuel(self.limits.fuel_max)
            .map_err(|e| self.failed(&e))?;
        let instance = Linker::new(&self.engine)
            .instantiate_and_start(&mut store, &self.module)
            .map_err(|e| self.failed(&e))?;
        let memory = instance
            .get_memory(&store, "memory")
            .ok_or_else(|| abi("`memory` is not a memory"))?;
        let alloc = instance
            .get_typed_func::<i32, i32>(&store, "alloc")
            .map_err(|_| abi("`alloc` is not a function (i32) -> i32"))?;
        let run = instance
            .get_typed_func::<(i32, i32), i64>(&store, "run")
            .map_err(|_| abi("`run` is not a function (i32, i32) -> i64"))?;
        let len = i32::try_from(input.len()).map_err(|_| abi("the input is over 2 GiB"))?;
        let ptr = alloc.call(&mut store, len).map_err(|e| self.failed(&e))?;
        let at = usize::try_from(ptr).map_err(|_| abi("`alloc` returned a negative address"))?;
        memory
            .write(&mut store, at, input)
            .map_err(|_| abi("`alloc` returned memory the input does not fit in"))?;
        let packed = run
            .call(&mut store, (ptr, len))
            .map_err(|e| self.failed(&e))?;
        // `run` returns the output's address in the high 32 bits and its length in the low.
        let packed = packed as u64;
        let (out_at, out_len) = ((packed >> 32) as usize, packed & 0xFFFF_FFFF);
        if out_len > output_bytes_max {
            return Err(ToolError::OutputTooLarge {
                limit: output_bytes_max,
            });
        }
        let mut out = vec![0u8; out_len as usize];
        memory
            .read(&store, out_at, &mut out)
            .map_err(|_| abi("`run` returned an output outside the module's memory"))?;
        let fuel = self
            .limits
            .fuel_max
            .saturating_sub(store.get_fuel().unwrap_or(0));
        let value = serde_json::from_slice::<Value>(&out).map_err(|e| {
            ToolError::Failed(format!(
                "the module returned {} bytes that are not JSON (line {}, column {})",
                out.len(),
                e.line(),
                e.column()
            ))
        })?;
        Ok((value, Usage { fuel }))
    }

    /// A wasmi error in words that say which limit stopped the module.
    fn failed(&self, e: &wasmi::Error) -> ToolError {
        let message = match e.as_trap_code() {
            Some(TrapCode::OutOfFuel) => format!(
                "ran out of fuel: the manifest allows {} units per call (`fuel_max`)",
                self.limits.fuel_max
            ),
            Some(TrapCode::GrowthOperationLimited) => format!(
                "tried to grow its memory past the limit of {} bytes (`memory_bytes_max`)",
                self.limits.memory_bytes_max
            ),
            Some(code) => format!("trapped: {code}"),
            None => {
                let text = e.to_string();
                if text.contains("fuel") {
                    format!(
                        "ran out of fuel: the manifest allows {} units per call (`fuel_max`)",
                        self.limits.fuel_max
                    )
                } else if text.contains("limit") || text.contains("memory") {
                    format!(
                        "needs more memory than the limit of {} bytes (`memory_bytes_max`): {text}",
                        self.limits.memory_bytes_max
                    )
                } else {
                    format!("failed: {text}")
                }
            }
        };
        ToolError::Failed(message)
    }
}

fn abi(message: &str) -> ToolError {
    ToolError::Failed(format!("breaks the wasm ABI (docs/TOOLS.md): {message}"))
}

impl Tool for WasmTool {
    fn decl(&self) -> ToolDecl {
        self.decl.clone()
    }

    fn call(&self, input: &Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let bytes = super::input_json(input)
            .map_err(|e| ToolError::Failed(format!("the input cannot be encoded: {e}")))?;
        let (value, _) = self.execute(&bytes, cx.output_bytes_max)?;
        Ok(ToolOutput::of(value))
    }
}
