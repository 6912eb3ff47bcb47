//! `cargo xtask vectors [--check]`.

use rowid_vectors::{check_dir, vectors_dir, write_dir};

/// Regenerates `vectors/`.
pub fn write() -> Result<(), String> {
    let dir = vectors_dir();
    let changed = write_dir(&dir).map_err(|e| format!("writing {}: {e}", dir.display()))?;
    if changed.is_empty() {
        println!("vectors/: up to date");
    } else {
        println!("vectors/: rewrote {}", changed.join(", "));
        println!("Byte changes are spec changes: say why in the commit (spec/wire-format.md §0).");
    }
    Ok(())
}

/// Fails when `vectors/` differs from what the cases render.
pub fn check() -> Result<(), String> {
    let dir = vectors_dir();
    let state = check_dir(&dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    if state.is_fresh() {
        println!("vectors/: up to date");
        Ok(())
    } else {
        Err(format!(
            "vectors/ is stale (differs: {:?}; not generated: {:?}). Run `cargo xtask vectors` \
             and commit the result with the reason for the byte change.",
            state.stale, state.unexpected
        ))
    }
}
