//! The machine a figure was measured on, as one line (issue 42, item 5): the CPU model, the
//! SIMD features the hashing code chooses between, and the cores. Benchmarks print it first and
//! `oracle dev machine` prints it, so BENCHMARKS.md can name the CPU next to every figure
//! instead of a remembered description. Never hashed or recorded: it describes a measurement,
//! not a run.

use std::fmt::Write as _;

/// The most bytes of `/proc/cpuinfo` read: its first processor's block is well within this,
/// and a display never reads an unbounded file.
const CPUINFO_BYTES_MAX: u64 = 64 << 10;

/// The SIMD features that change which code hashes a state (the lane expansion: AVX2, or the
/// `blake3` crate's batched XOF with AVX-512 F and VL) or a record (BLAKE3's SSE4.1 path), in
/// the order printed. On aarch64, NEON.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
fn simd_features() -> Vec<&'static str> {
    let mut f = Vec::new();
    if std::arch::is_x86_feature_detected!("sse4.1") {
        f.push("sse4.1");
    }
    if std::arch::is_x86_feature_detected!("avx2") {
        f.push("avx2");
    }
    if std::arch::is_x86_feature_detected!("avx512f") {
        f.push("avx512f");
    }
    if std::arch::is_x86_feature_detected!("avx512vl") {
        f.push("avx512vl");
    }
    f
}

#[cfg(target_arch = "aarch64")]
fn simd_features() -> Vec<&'static str> {
    if std::arch::is_aarch64_feature_detected!("neon") {
        vec!["neon"]
    } else {
        Vec::new()
    }
}

#[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
fn simd_features() -> Vec<&'static str> {
    Vec::new()
}

/// The CPU's model name from `/proc/cpuinfo` (`model name` on x86, `Model`/`CPU part` elsewhere),
/// or `unknown` where there is no such file (not Linux) or no such line.
pub fn cpu_model() -> String {
    read_cpuinfo()
        .as_deref()
        .and_then(model_in)
        .unwrap_or_else(|| "unknown".to_string())
}

fn read_cpuinfo() -> Option<String> {
    use std::io::Read as _;
    let f = std::fs::File::open("/proc/cpuinfo").ok()?;
    let mut s = String::new();
    f.take(CPUINFO_BYTES_MAX).read_to_string(&mut s).ok()?;
    Some(s)
}

/// The first model line of a cpuinfo text.
fn model_in(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        let key = key.trim();
        let value = value.trim();
        let named = key == "model name" || key == "Model" || key == "cpu model";
        (named && !value.is_empty()).then(|| value.to_string())
    })
}

/// The machine line: `cpu AMD EPYC; simd sse4.1 avx2 avx512f avx512vl; cores 2; lane expansion
/// Blake3`. The lane expansion is the implementation [`oracle_core::lthash::Expander::detected`]
/// picks here, which is what the replay and state-hash figures depend on.
pub fn line() -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let simd = simd_features();
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = write!(
        s,
        "cpu {}; simd {}; cores {cores}; arch {}; lane expansion {:?}",
        cpu_model(),
        if simd.is_empty() {
            "none".to_string()
        } else {
            simd.join(" ")
        },
        std::env::consts::ARCH,
        oracle_core::lthash::Expander::detected(),
    );
    s
}

/// `criterion_main!` with the machine line printed first (on stderr, so criterion's own output
/// and its `--output-format` are untouched): what every criterion bench of the crates above
/// `oracle_runtime` uses, so each figure's CPU is in the output it came from.
#[macro_export]
macro_rules! bench_main {
    ( $( $group:path ),+ $(,)* ) => {
        fn main() {
            eprintln!("{}", $crate::machine::line());
            $( $group(); )+
            ::criterion::Criterion::default()
                .configure_from_args()
                .final_summary();
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_the_first_model_line() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(model_in(text).as_deref(), Some("AMD EPYC"));
        assert_eq!(model_in("processor : 0\n"), None);
        assert_eq!(model_in("model name :   \n"), None);
    }

    #[test]
    fn the_line_names_every_part() {
        let l = line();
        for part in [
            "cpu ",
            "; simd ",
            "; cores ",
            "; arch ",
            "; lane expansion ",
        ] {
            assert!(l.contains(part), "{l}");
        }
    }
}
