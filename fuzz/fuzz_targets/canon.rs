//! libFuzzer entry point of the `canon` target; the body and its properties are in src/canon.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracle_fuzz::canon::check(data));
