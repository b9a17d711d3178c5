//! Memory benchmarks (filled in below).
fn main() {}
