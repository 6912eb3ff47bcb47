//! `cargo xtask sql [--check]`: the extension's versioned install script, and the rule that a
//! schema change comes with an upgrade script.
//!
//! `crates/pg-trickle-ext/sql/pg_trickle_ext--VERSION.sql` is what `cargo pgrx schema`
//! generates for the crate's version, without pgrx's `-- file:line` location comments (they
//! move with every edit). pgrx emits its objects in a dependency order that varies between
//! runs, so the check compares the script's objects as a set; the written file keeps one order
//! pgrx produced, which is a valid install order.
//!
//! The check fails when:
//! - the current version's script is missing or differs from the generated one: regenerate it
//!   with `cargo xtask sql`, unless the version is released (it has a dated heading in
//!   CHANGELOG.md), in which case its script is frozen and the change needs a new version and
//!   an upgrade script;
//! - an older version's full script has no chain of upgrade scripts
//!   (`pg_trickle_ext--A--B.sql`) up to the current version.
//!
//! Once a second version exists, `ALTER EXTENSION pg_trickle_ext UPDATE` from each older
//! script is to be tested on a throwaway cluster (README.md, "Releasing").

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::setup;
use crate::shell::{cargo, root};

/// The extension's name (its control file).
const EXTENSION: &str = "pg_trickle_ext";

/// Marks the start of one object in pgrx's generated SQL.
const BLOCK_START: &str = "/* <begin connected objects> */";

fn crate_dir() -> PathBuf {
    root().join("crates").join("pg-trickle-ext")
}

fn sql_dir() -> PathBuf {
    crate_dir().join("sql")
}

/// The extension crate's version (its `[package] version`).
pub fn version() -> Result<String, String> {
    let manifest = std::fs::read_to_string(crate_dir().join("Cargo.toml"))
        .map_err(|e| format!("pg-trickle-ext/Cargo.toml: {e}"))?;
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .map(str::to_string)
        .ok_or_else(|| "pg-trickle-ext/Cargo.toml has no version".into())
}

/// pgrx's generated SQL for the PostgreSQL 15 build, as committed: location comments removed.
fn generated() -> Result<String, String> {
    setup::pgrx(&[])?;
    let out = root().join("target").join("pg_trickle_ext-schema.sql");
    let status = cargo()
        .current_dir(crate_dir())
        .args(["pgrx", "schema", "pg15", "-o"])
        .arg(&out)
        .status()
        .map_err(|e| format!("cargo pgrx schema: {e}"))?;
    if !status.success() {
        return Err(format!("cargo pgrx schema failed ({status})"));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(strip_locations(&text))
}

/// `text` without pgrx's `-- path/to/file.rs:LINE` comments.
pub fn strip_locations(text: &str) -> String {
    let mut out: String = text
        .lines()
        .filter(|l| !is_location(l))
        .map(|l| format!("{l}\n"))
        .collect();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn is_location(line: &str) -> bool {
    line.strip_prefix("-- ")
        .and_then(|rest| rest.rsplit_once(".rs:"))
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The script's objects (pgrx's connected-object blocks), each trimmed, as a set.
pub fn objects(script: &str) -> BTreeSet<String> {
    strip_locations(script)
        .split(BLOCK_START)
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty())
        .collect()
}

/// A version as numbers, for ordering (`"0.10.2"` after `"0.9.0"`).
fn version_key(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// Versions with a dated release heading in a Keep a Changelog file (`## [0.1.0] - 2026-12-24`).
pub fn released_versions(changelog: &str) -> Vec<String> {
    changelog
        .lines()
        .filter_map(|l| l.strip_prefix("## ["))
        .filter_map(|l| l.split_once("] - "))
        .filter(|(_, date)| date.trim().len() == 10 && date.as_bytes()[4] == b'-')
        .map(|(v, _)| v.to_string())
        .collect()
}

/// The full scripts (`ext--V.sql`) and upgrade scripts (`ext--A--B.sql`) among `files`.
fn scripts(files: &[String]) -> (Vec<String>, Vec<(String, String)>) {
    let mut full = Vec::new();
    let mut upgrades = Vec::new();
    let prefix = format!("{EXTENSION}--");
    for f in files {
        let Some(rest) = f.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".sql")) else {
            continue;
        };
        match rest.split_once("--") {
            Some((a, b)) => upgrades.push((a.to_string(), b.to_string())),
            None => full.push(rest.to_string()),
        }
    }
    (full, upgrades)
}

/// Older versions (with a full script in `files`) from which no chain of upgrade scripts
/// reaches `current`.
pub fn missing_upgrade_paths(current: &str, files: &[String]) -> Vec<String> {
    let (full, upgrades) = scripts(files);
    let reaches = |from: &str| {
        let mut seen = BTreeSet::from([from.to_string()]);
        let mut frontier = vec![from.to_string()];
        while let Some(v) = frontier.pop() {
            if v == current {
                return true;
            }
            for (a, b) in &upgrades {
                if *a == v && seen.insert(b.clone()) {
                    frontier.push(b.clone());
                }
            }
        }
        false
    };
    full.into_iter()
        .filter(|v| version_key(v) < version_key(current) && !reaches(v))
        .collect()
}

fn files_in(dir: &Path) -> Result<Vec<String>, String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    Ok(files)
}

pub fn script_path(version: &str) -> PathBuf {
    sql_dir().join(format!("{EXTENSION}--{version}.sql"))
}

/// Writes the current version's install script.
pub fn write() -> Result<(), String> {
    let version = version()?;
    let changelog = std::fs::read_to_string(root().join("CHANGELOG.md")).unwrap_or_default();
    if released_versions(&changelog).contains(&version) {
        return Err(format!(
            "{EXTENSION} {version} is released (CHANGELOG.md): its install script is frozen. \
             Bump the version in crates/pg-trickle-ext/Cargo.toml and add \
             sql/{EXTENSION}--{version}--NEW.sql"
        ));
    }
    let path = script_path(&version);
    std::fs::create_dir_all(sql_dir()).map_err(|e| format!("{}: {e}", sql_dir().display()))?;
    std::fs::write(&path, generated()?).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Fails when the committed scripts do not match the code (see the module docs).
pub fn check() -> Result<(), String> {
    let version = version()?;
    let path = script_path(&version);
    let committed = std::fs::read_to_string(&path).map_err(|_| {
        format!(
            "{} is missing: run `cargo xtask sql` and commit it",
            path.display()
        )
    })?;
    let generated = generated()?;
    if objects(&committed) != objects(&generated) {
        let changelog = std::fs::read_to_string(root().join("CHANGELOG.md")).unwrap_or_default();
        let hint = if released_versions(&changelog).contains(&version) {
            format!(
                "{version} is released (CHANGELOG.md), so its script is frozen: bump the \
                 version and add sql/{EXTENSION}--{version}--NEW.sql with the change"
            )
        } else {
            "run `cargo xtask sql` and commit the result".to_string()
        };
        let added: Vec<_> = objects(&generated)
            .difference(&objects(&committed))
            .map(|b| b.lines().take(3).collect::<Vec<_>>().join(" "))
            .collect();
        return Err(format!(
            "the extension's SQL differs from {} ({hint}); not in the committed script: {added:?}",
            path.display()
        ));
    }
    let missing = missing_upgrade_paths(&version, &files_in(&sql_dir())?);
    if !missing.is_empty() {
        return Err(format!(
            "no upgrade scripts lead from {missing:?} to {version}: add \
             sql/{EXTENSION}--OLD--NEW.sql files"
        ));
    }
    println!("{}: matches the extension's SQL", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn location_comments_are_dropped_and_order_does_not_matter() {
        let a = "/* <begin connected objects> */\n-- src/lib.rs:37\nCREATE SCHEMA s;\n\
                 /* <begin connected objects> */\n-- src/lib.rs:80\nCREATE FUNCTION s.f();\n";
        let b = "/* <begin connected objects> */\n-- src/lib.rs:90\nCREATE FUNCTION s.f();\n\
                 /* <begin connected objects> */\n-- src/lib.rs:12\nCREATE SCHEMA s;\n";
        assert_eq!(objects(a), objects(b));
        assert!(!strip_locations(a).contains("lib.rs"));
        assert!(strip_locations("-- keep: not a location\n").contains("keep"));
        let c = b.replace("s.f()", "s.g()");
        assert_ne!(objects(a), objects(&c));
    }

    #[test]
    fn released_versions_are_the_dated_headings() {
        let log =
            "# Changelog\n## [Unreleased]\n## [0.2.0] - 2027-01-15\n## [0.1.0] - 2026-12-24\n";
        assert_eq!(released_versions(log), ["0.2.0", "0.1.0"]);
        assert!(released_versions("## [0.1.0] - Unreleased\n").is_empty());
    }

    #[test]
    fn older_scripts_need_an_upgrade_chain() {
        let one = names(&["pg_trickle_ext--0.1.0.sql"]);
        assert!(missing_upgrade_paths("0.1.0", &one).is_empty());
        let two = names(&["pg_trickle_ext--0.1.0.sql", "pg_trickle_ext--0.2.0.sql"]);
        assert_eq!(missing_upgrade_paths("0.2.0", &two), ["0.1.0"]);
        let chained = names(&[
            "pg_trickle_ext--0.1.0.sql",
            "pg_trickle_ext--0.1.0--0.1.1.sql",
            "pg_trickle_ext--0.1.1--0.2.0.sql",
            "pg_trickle_ext--0.2.0.sql",
            "README.md",
        ]);
        assert!(missing_upgrade_paths("0.2.0", &chained).is_empty());
        assert!(missing_upgrade_paths("0.10.0", &names(&["pg_trickle_ext--0.9.0.sql"])).len() == 1);
    }
}
