//! Writes every fuzz target's seed corpus (src/seeds.rs) to `fuzz/corpus/<target>/`, where
//! `cargo fuzz run <target>` reads it. Run from anywhere:
//! `cargo run --manifest-path fuzz/Cargo.toml --example seed`.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = fuzz.join("..");
    for (target, _) in oracle_fuzz::TARGETS {
        let dir = fuzz.join("corpus").join(target);
        std::fs::create_dir_all(&dir)?;
        let seeds = oracle_fuzz::seeds::seeds(&root, target)?;
        let bytes: usize = seeds.iter().map(|s| s.bytes.len()).sum();
        for seed in &seeds {
            std::fs::write(dir.join(&seed.name), &seed.bytes)?;
        }
        println!(
            "{target}: {} seeds, {bytes} bytes, in {}",
            seeds.len(),
            dir.display()
        );
    }
    Ok(())
}
