//! The codec against a real PostgreSQL server's operators.
//!
//! For every scalar type, generated pairs (half of them equal by construction in a different
//! representation) are sent to the server as SQL literals; the server's `=` (as `IS NOT
//! DISTINCT FROM`) and `<`/`>` must agree with equality and byte order of the codec's
//! encodings (order only where the spec claims it; text types under `COLLATE "C"`).
//!
//! Needs a server: `cargo xtask test` starts a throwaway cluster and runs this with
//! `--ignored`, passing psql connection arguments in `ROWID_ORACLE_PSQL_ARGS`.
//!
//! With `ROWID_ORACLE_EXTENSION=1` (set where the `pg_trickle_ext` extension is installed),
//! the server also encodes every value with `pgtrickle.encode_row_id_v2` and the bytes must
//! equal the codec's: the in-server encoder then inherits the equality and order proof.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cmp::Ordering;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use rowid_codec::{Domain, OwnedValue, TypeTag, encode_identity};
use rowid_testkit::hex::to_hex;
use rowid_testkit::model::{order_preserving, pair, scalar_tags};
use rowid_testkit::psql::run as psql;
use rowid_testkit::sql::{enum_type_ddl, literal, representable};

/// Pairs per type.
const PAIRS: usize = 3_000;

fn encoded(v: &OwnedValue) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_identity(&mut buf, Domain::ScanKey, &[(v.tag(), Some(v.as_value()))]).unwrap();
    buf
}

#[test]
#[ignore = "needs a PostgreSQL server: run through `cargo xtask test`"]
fn server_operators_agree_with_the_codec() {
    psql(&enum_type_ddl());
    let version = psql("SHOW server_version_num;");
    let extension = std::env::var("ROWID_ORACLE_EXTENSION").is_ok_and(|v| v == "1");
    if extension {
        psql("CREATE EXTENSION IF NOT EXISTS pg_trickle_ext;");
    }
    let in_server = |l: &str| {
        if extension {
            // The record form, then the argument form: both must be the codec's bytes.
            format!(
                ", encode(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW({l})), 'hex'), \
                 encode(pgtrickle.encode_row_id_v2_fields('SCAN_KEY', {l}), 'hex')"
            )
        } else {
            String::new()
        }
    };
    let mut runner = TestRunner::deterministic();
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for tag in scalar_tags() {
        let mut pairs = Vec::with_capacity(PAIRS);
        let mut script = String::new();
        for _ in 0..PAIRS {
            let (a, b) = pair(tag).new_tree(&mut runner).unwrap().current();
            let (a, b) = (representable(&a), representable(&b));
            // b is spelt another way where the type has several spellings (intervals).
            let (la, lb) = (literal(&a, 0), literal(&b, 1));
            script.push_str(&format!(
                "SELECT CASE WHEN {la} < {lb} THEN -1 WHEN {la} > {lb} THEN 1 ELSE 0 END, \
                 {la} IS NOT DISTINCT FROM {lb}{}{};\n",
                in_server(&la),
                in_server(&lb)
            ));
            pairs.push((a, b));
        }
        let output = psql(&script);
        let rows: Vec<&str> = output.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(rows.len(), pairs.len(), "{}: row count", tag.name());
        let (mut equal, mut disagreements, mut in_server_mismatches) = (0, 0, 0);
        for ((a, b), row) in pairs.iter().zip(rows) {
            let columns: Vec<&str> = row.split('|').collect();
            let (cmp, eq) = (columns[0], columns[1]);
            let server_eq = eq == "t";
            let server_cmp = match cmp {
                "-1" => Ordering::Less,
                "0" => Ordering::Equal,
                _ => Ordering::Greater,
            };
            let (ea, eb) = (encoded(a), encoded(b));
            let (ha, hb) = (to_hex(&ea), to_hex(&eb));
            if extension && [columns[2], columns[3], columns[4], columns[5]] != [&ha, &ha, &hb, &hb]
            {
                in_server_mismatches += 1;
                if failures.len() < 20 {
                    failures.push(format!(
                        "{}: encode_row_id_v2 or encode_row_id_v2_fields in the server differs \
                         from the codec for {} or {}",
                        tag.name(),
                        literal(a, 0),
                        literal(b, 1)
                    ));
                }
            }
            let eq_ok = server_eq == (ea == eb);
            let ord_ok = !order_preserving(tag) || server_cmp == ea.cmp(&eb);
            equal += usize::from(server_eq);
            if !(eq_ok && ord_ok) {
                disagreements += 1;
                if failures.len() < 20 {
                    failures.push(format!(
                        "{}: server says cmp {cmp} eq {eq}, codec says {:?} for {} vs {}",
                        tag.name(),
                        ea.cmp(&eb),
                        literal(a, 0),
                        literal(b, 1)
                    ));
                }
            }
        }
        let mode = if order_preserving(tag) {
            ""
        } else {
            " (equality only)"
        };
        let in_server_note = if extension {
            format!(", {in_server_mismatches} in-server encodings differ from the codec")
        } else {
            String::new()
        };
        report.push(format!(
            "{:12} {} pairs, {equal} equal, {disagreements} disagreements{mode}{in_server_note}",
            tag.name(),
            pairs.len(),
        ));
    }
    println!("server_version_num {}", version.trim());
    for line in &report {
        println!("{line}");
    }
    assert!(
        failures.is_empty(),
        "disagreements:\n{}",
        failures.join("\n")
    );
    assert_eq!(
        report.len(),
        scalar_tags().len(),
        "every scalar tag was judged"
    );
    assert_eq!(
        scalar_tags().len(),
        TypeTag::ALL.len() - 6,
        "all but the child identity and the five structural tags"
    );
}
