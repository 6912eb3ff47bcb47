//! The change buffer of spec/change-buffer.md: the spec's column table is the code's, and the
//! DDL states every rule of §2 and §3.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_registry::buffer::{self, COLUMNS};
use rowid_registry::sql::QualifiedName;

/// The rows of spec/change-buffer.md §1's table: (name, type, not null, default).
fn spec_columns() -> Vec<(String, String, bool, Option<String>)> {
    let spec = include_str!("../../../spec/change-buffer.md");
    let start = spec.find("| # | column |").unwrap();
    spec[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let unquote = |c: &str| c.trim_matches('`').to_string();
            let not_null = cells[4];
            let default = not_null
                .split("`DEFAULT ")
                .nth(1)
                .map(|d| d.trim_end_matches('`').to_string());
            (
                unquote(cells[2]),
                unquote(cells[3]),
                not_null.starts_with("yes"),
                default,
            )
        })
        .collect()
}

#[test]
fn the_spec_table_is_the_code() {
    let code: Vec<_> = COLUMNS
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.sql_type.to_string(),
                c.not_null,
                c.default.map(str::to_string),
            )
        })
        .collect();
    assert_eq!(spec_columns(), code);
}

#[test]
fn the_ddl_states_the_identity_and_version_rules() {
    let ddl = buffer::create_table(&QualifiedName::new("s", "b"), &[]).join("; ");
    for rule in [
        "CHECK (\"op\" IN ('I', 'U', 'D', 'T', 'X', 'R'))",
        "CHECK ((\"op\" IN ('I', 'U')) = (\"__pgt_row_id\" IS NOT NULL))",
        "CHECK ((\"op\" IN ('U', 'D')) = (\"__pgt_old_row_id\" IS NOT NULL))",
        "CHECK ((\"op\" IN ('X', 'R')) = (\"unidentified\" IS NOT NULL))",
        "CHECK (\"row_identity_version\" = 2)",
        "CHECK (\"row_probe_version\" = 1)",
        "CHECK (\"old_image\" IN ('F', 'K'))",
        "CHECK (\"old_image\" IS NULL OR \"op\" IN ('U', 'D', 'X'))",
    ] {
        assert!(ddl.contains(rule), "{rule} missing from {ddl}");
    }
    assert_eq!(
        buffer::revoke_public(&QualifiedName::new("s", "b")),
        "REVOKE ALL ON TABLE \"s\".\"b\" FROM PUBLIC"
    );
}
