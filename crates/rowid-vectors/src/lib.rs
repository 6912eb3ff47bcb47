//! Golden vectors of the Row Identity V2 wire format: this crate owns the vector cases
//! (`families`, one module per file under `vectors/`), their rendering to JSON and the
//! staleness check, and nothing else (shared test helpers are in `rowid-testkit`).
//!
//! The cases are defined here, in Rust, as typed values plus the SQL literal that produces
//! the same field inside PostgreSQL. [`render_all`] turns them into the reviewable JSON files
//! under `vectors/` (one per type family); `cargo xtask vectors` writes those files and
//! `cargo xtask vectors --check` (also run by this crate's tests) fails when they are stale.
//!
//! Generated vectors guard against regressions; the hand-derived examples of
//! `spec/wire-format.md` (tested in `rowid-codec`) are what make the spec independent.

mod families;
mod render;

use std::path::{Path, PathBuf};

pub use families::families;
pub use render::{render_all, render_family};

use rowid_codec::{Domain, OwnedValue, TypeTag};

/// One field of a valid vector.
#[derive(Clone, Debug)]
pub struct Field {
    /// The field's type tag.
    pub tag: TypeTag,
    /// Its value, `None` for NULL.
    pub value: Option<OwnedValue>,
    /// The value as a reader would write it.
    pub display: String,
    /// A SQL expression producing the same field in PostgreSQL, when one exists.
    pub sql: Option<String>,
}

/// A valid identity: its fields must encode to the rendered hex.
#[derive(Clone, Debug)]
pub struct ValidCase {
    /// What the case shows.
    pub comment: String,
    /// The identity's domain.
    pub domain: Domain,
    /// Its fields.
    pub fields: Vec<Field>,
    /// Labels such as `normalisation`, `edge`, `sql-unrepresentable`.
    pub flags: Vec<&'static str>,
}

/// Bytes a decoder must reject.
#[derive(Clone, Debug)]
pub struct InvalidCase {
    /// Why the bytes are invalid.
    pub comment: String,
    /// The bytes.
    pub bytes: Vec<u8>,
    /// The `rowid_codec::Error` variant the decoder must return.
    pub error: &'static str,
    /// Labels.
    pub flags: Vec<&'static str>,
}

/// A probe vector: the probe of `identity` for prefix length `prefix_len`.
#[derive(Clone, Debug)]
pub struct ProbeCase {
    /// What the case shows.
    pub comment: String,
    /// A complete identity.
    pub identity: Vec<u8>,
    /// The prefix length P.
    pub prefix_len: usize,
    /// Labels.
    pub flags: Vec<&'static str>,
}

/// The vectors of one type family, rendered to `vectors/<file>`.
#[derive(Clone, Debug, Default)]
pub struct Family {
    /// File name under `vectors/`.
    pub file: &'static str,
    /// The spec section the family implements.
    pub spec: &'static str,
    /// SQL to run before the `sql` expressions can be evaluated (enum and domain types).
    pub setup: Vec<&'static str>,
    /// Valid identities.
    pub valid: Vec<ValidCase>,
    /// Must-fail decoder inputs.
    pub invalid: Vec<InvalidCase>,
    /// Probe vectors.
    pub probes: Vec<ProbeCase>,
}

/// The repository's `vectors/` directory.
pub fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../vectors")
}

/// Names the `rowid_codec::Error` variant of `e` (`"NonCanonical"`, ...).
pub fn error_name(e: &rowid_codec::Error) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Outcome of comparing rendered vectors with the files on disk.
#[derive(Debug, Default)]
pub struct Staleness {
    /// Files whose content differs from what the cases render.
    pub stale: Vec<String>,
    /// Files under `vectors/` that no family renders.
    pub unexpected: Vec<String>,
}

impl Staleness {
    /// True when the files match the cases exactly.
    pub fn is_fresh(&self) -> bool {
        self.stale.is_empty() && self.unexpected.is_empty()
    }
}

/// Compares [`render_all`] with the JSON files in `dir`.
pub fn check_dir(dir: &Path) -> std::io::Result<Staleness> {
    let rendered = render_all();
    let mut out = Staleness::default();
    for (file, text) in &rendered {
        match std::fs::read_to_string(dir.join(file)) {
            Ok(on_disk) if on_disk == *text => {}
            _ => out.stale.push((*file).to_string()),
        }
    }
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".json") && !rendered.iter().any(|(f, _)| *f == name) {
            out.unexpected.push(name);
        }
    }
    Ok(out)
}

/// Writes every rendered file into `dir` and removes JSON files no family renders; returns
/// the names of the files whose content changed.
pub fn write_dir(dir: &Path) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    let before = check_dir(dir)?;
    for (file, text) in render_all() {
        std::fs::write(dir.join(file), text)?;
    }
    for name in &before.unexpected {
        std::fs::remove_file(dir.join(name))?;
    }
    Ok(before.stale.into_iter().chain(before.unexpected).collect())
}
