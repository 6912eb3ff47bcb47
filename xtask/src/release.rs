//! Release readiness of the library crates, without publishing: documentation builds without
//! warnings (theirs and rowid-cdc's, whose library docs hold the command's data flow and
//! invariants), and `cargo package --list` ships only sources, README and licenses.

use crate::shell::{cargo, exec};

/// The crates meant to be dependencies (published to crates.io).
pub const LIBRARIES: [&str; 3] = ["rowid-codec", "rowid-registry", "rowid-pgoutput"];

/// Whether a packaged path belongs in a published crate.
fn shippable(path: &str) -> bool {
    matches!(
        path,
        "Cargo.toml" | "Cargo.toml.orig" | "Cargo.lock" | ".cargo_vcs_info.json" | "README.md"
    ) || path.starts_with("LICENSE-")
        || (path.ends_with(".rs") && (path.starts_with("src/") || path.starts_with("examples/")))
}

/// `cargo doc --no-deps` with warnings as errors (the libraries and rowid-cdc), and a clean
/// `cargo package --list` (the libraries).
pub fn check() -> Result<(), String> {
    let mut doc = cargo();
    doc.args(["doc", "--no-deps", "--all-features"])
        .env("RUSTDOCFLAGS", "-D warnings");
    for krate in LIBRARIES.iter().chain(&["rowid-cdc"]) {
        doc.args(["-p", krate]);
    }
    exec(&mut doc)?;
    for krate in LIBRARIES {
        let out = cargo()
            .args(["package", "--list", "--allow-dirty", "-p", krate])
            .output()
            .map_err(|e| format!("cargo package --list -p {krate}: {e}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || stderr.contains("warning") {
            return Err(format!("cargo package --list -p {krate}: {stderr}"));
        }
        let listed = String::from_utf8_lossy(&out.stdout);
        let stray: Vec<&str> = listed.lines().filter(|p| !shippable(p)).collect();
        if !stray.is_empty() {
            return Err(format!("{krate} would ship {stray:?}"));
        }
        for needed in ["README.md", "LICENSE-MIT", "LICENSE-APACHE", "src/lib.rs"] {
            if !listed.lines().any(|p| p == needed) {
                return Err(format!("{krate} would not ship {needed}"));
            }
        }
        println!("{krate}: {} files, all shippable", listed.lines().count());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::shippable;

    #[test]
    fn only_sources_readme_and_licenses_ship() {
        for ok in [
            "src/lib.rs",
            "src/decode/scalar.rs",
            "examples/identities.rs",
            "README.md",
            "LICENSE-MIT",
        ] {
            assert!(shippable(ok), "{ok}");
        }
        for stray in [
            "tests/properties.rs",
            "tests/x.proptest-regressions",
            "src/notes.txt",
            ".gitignore",
        ] {
            assert!(!shippable(stray), "{stray}");
        }
    }
}
