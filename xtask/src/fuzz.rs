//! `cargo xtask fuzz`: runs the fuzz targets (`decode` seeded with every vector, `pgoutput`,
//! `capture`).

use std::path::Path;

use crate::setup;
use crate::shell::{cmd, exec, root};

/// Default fuzzing time.
pub const DEFAULT_SECONDS: u32 = 300;

/// Writes each vector's bytes as a corpus file (valid, invalid and probe identities).
fn seed_corpus(dir: &Path) -> Result<usize, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut n = 0;
    for (file, text) in rowid_vectors::render_all() {
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            let hex = ["\"hex\": \"", "\"identity_hex\": \""]
                .iter()
                .find_map(|k| line.strip_prefix(k))
                .and_then(|rest| rest.split('"').next());
            if let Some(bytes) = hex.and_then(rowid_testkit::hex::from_hex) {
                let name = dir.join(format!("{}-{i}", file.trim_end_matches(".json")));
                std::fs::write(&name, bytes).map_err(|e| format!("{}: {e}", name.display()))?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Builds every fuzz target (`cargo +nightly fuzz build`, the build `cargo fuzz run` then
/// reuses). The fuzz crate is a workspace of its own, outside the workspace's clippy and
/// tests: `cargo xtask test` builds it early, so a change that breaks a target fails in the
/// first minutes rather than when the targets run near the end.
pub fn build() -> Result<(), String> {
    setup::fuzzing()?;
    let mut c = cmd("cargo");
    c.current_dir(root().join("fuzz"))
        .args(["+nightly", "fuzz", "build"]);
    exec(&mut c)
}

/// Fuzzes each target for `seconds`: the identity decoder (seeded with every vector), the
/// pgoutput decoder and the capture state machine.
pub fn run(seconds: u32) -> Result<(), String> {
    setup::fuzzing()?;
    let fuzz_dir = root().join("fuzz");
    let corpus = fuzz_dir.join("corpus").join("decode");
    let seeded = seed_corpus(&corpus)?;
    println!("corpus: {seeded} seed inputs from vectors/");
    for target in ["decode", "pgoutput", "capture"] {
        let mut c = cmd("cargo");
        c.current_dir(&fuzz_dir).args([
            "+nightly",
            "fuzz",
            "run",
            target,
            "--",
            &format!("-max_total_time={seconds}"),
            "-print_final_stats=1",
        ]);
        exec(&mut c)?;
    }
    Ok(())
}
