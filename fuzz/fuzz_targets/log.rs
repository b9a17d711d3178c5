//! libFuzzer entry point of the `log` target; the body and its properties are in src/log.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracle_fuzz::log::check(data));
