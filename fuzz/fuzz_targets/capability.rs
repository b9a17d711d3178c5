//! libFuzzer entry point of the `capability` target; the body and its properties are in src/capability.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| oracle_fuzz::capability::check(data));
