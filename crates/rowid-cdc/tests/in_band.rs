//! Identity schemas in-band, against a real server: the extension's event trigger writes each
//! DDL's identity schema into the WAL, and capture from a pgoutput slot gives every change the
//! identity of the key in force at its own position (a key changed between transactions, in
//! the middle of one, and a DDL rolled back), byte-identical to `encode_row_id_v2`.
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use rowid_cdc::capture::{Capture, Output};
use rowid_cdc::{Lsn, Op, SchemaMessage};
use rowid_pgoutput::FlagBits;
use rowid_testkit::hex::{from_hex, to_hex};
use rowid_testkit::psql::run as sql;

fn one(query: &str) -> String {
    sql(query).trim().to_string()
}

/// `encode_row_id_v2(domain, ROW(row))` in hex.
fn id(domain: &str, row: &str) -> String {
    one(&format!(
        "SELECT encode(pgtrickle.encode_row_id_v2('{domain}', ROW({row})), 'hex');"
    ))
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn changes_follow_the_key_at_their_own_position() {
    sql("CREATE EXTENSION IF NOT EXISTS pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TYPE ib_mood AS ENUM ('sad', 'happy');
         CREATE TABLE ib_t (a int4, b int4, v text, PRIMARY KEY (a));
         CREATE TABLE ib_e (m ib_mood PRIMARY KEY, v text);
         CREATE TABLE ib_k (x int8, y text);
         ALTER TABLE ib_k REPLICA IDENTITY FULL;
         CREATE PUBLICATION ibp FOR TABLE ib_t, ib_e, ib_k;
         SELECT pg_create_logical_replication_slot('ib_slot', 'pgoutput');");
    // The schemas at the slot's consistent point (no DDL ran since it was created).
    let schemas: Vec<_> = ["ib_t", "ib_e", "ib_k"]
        .iter()
        .map(|t| {
            let json = one(&format!(
                "SELECT pgtrickle.identity_schema('{t}'::regclass);"
            ));
            match SchemaMessage::parse(json.as_bytes()).unwrap() {
                SchemaMessage::Schema(s) => s,
                other => panic!("{other:?}"),
            }
        })
        .collect();

    // Every statement is its own transaction unless wrapped.
    sql("INSERT INTO ib_t VALUES (1, 10, 'a');
         UPDATE ib_t SET v = 'b' WHERE a = 1;
         ALTER TABLE ib_t DROP CONSTRAINT ib_t_pkey, ADD PRIMARY KEY (a, b);
         INSERT INTO ib_t VALUES (2, 20, 'c');
         BEGIN;
         INSERT INTO ib_t VALUES (3, 30, 'd');
         ALTER TABLE ib_t DROP CONSTRAINT ib_t_pkey, ADD PRIMARY KEY (b);
         INSERT INTO ib_t VALUES (4, 40, 'e');
         COMMIT;
         BEGIN;
         ALTER TABLE ib_t DROP CONSTRAINT ib_t_pkey, ADD PRIMARY KEY (a);
         ROLLBACK;
         UPDATE ib_t SET b = 41 WHERE a = 4;
         DELETE FROM ib_t WHERE a = 1;
         INSERT INTO ib_e VALUES ('happy', 'x');
         INSERT INTO ib_k VALUES (1, 'p');
         UPDATE ib_k SET y = 'q';
         DELETE FROM ib_k;
         TRUNCATE ib_t;");

    let rows = sql(
        "SELECT lsn::text || '|' || encode(data, 'hex') FROM pg_logical_slot_get_binary_changes(
           'ib_slot', NULL, NULL, 'proto_version', '1', 'publication_names', 'ibp',
           'binary', 'true', 'messages', 'true');",
    );
    let mut capture = Capture::new(schemas, Lsn::ZERO, FlagBits::default());
    let mut out = Vec::new();
    for line in rows.lines().filter(|l| !l.is_empty()) {
        let (lsn, hex) = line.split_once('|').unwrap();
        capture
            .apply_bytes(
                lsn.parse().unwrap(),
                Bytes::from(from_hex(hex).unwrap()),
                &mut out,
            )
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let got: Vec<(String, Op, Option<String>, Option<String>)> = out
        .iter()
        .filter_map(|o| match o {
            Output::Change(e) => Some((
                e.relation
                    .rsplit('.')
                    .next()
                    .unwrap_or_default()
                    .to_string(),
                e.op,
                e.old_id.as_deref().map(to_hex),
                e.new_id.as_deref().map(to_hex),
            )),
            _ => None,
        })
        .collect();

    let k = |row: &str| Some(id("SCAN_KEY", row));
    let kl = |row: &str| Some(id("KEYLESS_ROW", row));
    let t = |op, old, new| ("ib_t".to_string(), op, old, new);
    let want = vec![
        // key (a)
        t(Op::Insert, None, k("1::int4")),
        t(Op::Update, k("1::int4"), k("1::int4")),
        // key (a, b), from the ALTER's message on
        t(Op::Insert, None, k("2::int4, 20::int4")),
        // one transaction: (a, b), then the key moves to (b) between two inserts
        t(Op::Insert, None, k("3::int4, 30::int4")),
        t(Op::Insert, None, k("40::int4")),
        // the rolled-back ALTER left the key at (b)
        t(Op::Update, k("40::int4"), k("41::int4")),
        t(Op::Delete, k("10::int4"), None),
        ("ib_e".into(), Op::Insert, None, k("'happy'::ib_mood")),
        ("ib_k".into(), Op::Insert, None, kl("1::int8, 'p'::text")),
        (
            "ib_k".into(),
            Op::Update,
            kl("1::int8, 'p'::text"),
            kl("1::int8, 'q'::text"),
        ),
        ("ib_k".into(), Op::Delete, kl("1::int8, 'q'::text"), None),
        t(Op::Truncate, None, None),
    ];
    assert_eq!(got, want);
    let schema_commits = out
        .iter()
        .filter(
            |o| matches!(o, Output::Commit { schema_changes, .. } if !schema_changes.is_empty()),
        )
        .count();
    assert_eq!(
        schema_commits, 2,
        "two committed ALTERs, the rolled-back one wrote nothing"
    );

    sql("SELECT pg_drop_replication_slot('ib_slot');
         SELECT pgtrickle.disable_identity_messages();");
}
