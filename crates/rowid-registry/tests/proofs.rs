//! Traceability of the registry's claims: every entry is listed in the proof table of
//! `spec/registry.md` §2.9 with its order claim, and every test the table names exists in
//! the file it names. The registry itself carries no test names.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use rowid_codec::TypeTag;
use rowid_registry::entry::{ARRAY, BUILTINS, ENUM, JSONB, MULTIRANGE, RANGE, RECORD};
use rowid_registry::{Entry, OrderClaim, SizeRule};

/// One row of the proof table.
struct Row {
    entry: String,
    order: String,
    model: String,
    server: String,
}

fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The rows of the table under `### 2.9 Proofs`.
fn proof_table() -> Vec<Row> {
    let spec = repo_file("spec/registry.md");
    let section = spec
        .split("### 2.9 Proofs")
        .nth(1)
        .expect("spec/registry.md has §2.9 Proofs");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| entry"))
        .map(|l| {
            let cells: Vec<String> = l
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect();
            assert_eq!(cells.len(), 4, "row `{l}`");
            Row {
                entry: cells[0].clone(),
                order: cells[1].clone(),
                model: cells[2].clone(),
                server: cells[3].clone(),
            }
        })
        .collect()
}

fn order_name(claim: OrderClaim) -> &'static str {
    match claim {
        OrderClaim::Preserving => "Preserving",
        OrderClaim::OnlyUnderCCollation => "OnlyUnderCCollation",
        OrderClaim::WhenComponentsAre => "WhenComponentsAre",
        OrderClaim::NotPreserving => "NotPreserving",
    }
}

/// `path::test` names a test that exists: a `fn test(` or a `test => ` row of a macro table.
fn assert_test_exists(named: &str, entry: &str) {
    let (path, test) = named
        .split_once("::")
        .unwrap_or_else(|| panic!("{entry}: `{named}` is not path::test"));
    let source = repo_file(&format!("crates/{path}"));
    assert!(
        source.contains(&format!("fn {test}(")) || source.contains(&format!("{test} => ")),
        "{entry}: {path} has no test {test}"
    );
}

fn check(entries: &[Entry]) {
    let table = proof_table();
    for e in entries {
        let row = table
            .iter()
            .find(|r| r.entry == e.name)
            .unwrap_or_else(|| panic!("{}: not in the proof table of spec/registry.md", e.name));
        assert_eq!(row.order, order_name(e.order), "{}: order claim", e.name);
        assert_test_exists(&row.model, e.name);
        assert_test_exists(&row.server, e.name);
    }
}

/// Every scalar entry (and the enum entry) is in the table, with tests that exist; the
/// server test judges every scalar tag.
#[test]
fn named_proofs_exist() {
    let mut entries: Vec<Entry> = BUILTINS.to_vec();
    entries.push(ENUM);
    check(&entries);
    let oracle = repo_file("crates/rowid-codec/tests/server_oracle.rs");
    assert!(
        oracle.contains("for tag in scalar_tags()"),
        "the oracle covers every scalar tag"
    );
    // The scalar entries, the enum entry and the five structural families.
    assert_eq!(proof_table().len(), BUILTINS.len() + 1 + 5, "no stray rows");
}

/// The structural entries are in the table, with tests that exist; the server test covers
/// every family with a real SQL type; only jsonb makes no order claim.
#[test]
fn structural_proofs_exist() {
    let families = [ARRAY, RANGE, MULTIRANGE, RECORD, JSONB];
    check(&families);
    let oracle = repo_file("crates/rowid-vectors/tests/structural_oracle.rs");
    for (entry, sql) in [
        (ARRAY, "int4[]"),
        (RANGE, "numrange"),
        (MULTIRANGE, "nummultirange"),
        (RECORD, "oracle_rec"),
        (JSONB, "jsonb"),
    ] {
        assert!(
            oracle.contains(&format!("\"{sql}")),
            "{}: oracle lacks {sql}",
            entry.name
        );
        assert_eq!(entry.size, SizeRule::Structural);
        assert_eq!(
            entry.order == OrderClaim::WhenComponentsAre,
            entry.tag != TypeTag::Jsonb,
            "{}",
            entry.name
        );
    }
}
