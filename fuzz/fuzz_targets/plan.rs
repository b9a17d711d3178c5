//! libFuzzer entry point of the `plan` target; the body and its properties are in src/plan.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracle_fuzz::plan::check(data));
