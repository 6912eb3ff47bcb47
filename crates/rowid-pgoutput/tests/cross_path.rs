//! Cross-path proof: identities derived from pgoutput (WAL) equal, byte for byte, the ones
//! `pgtrickle.encode_row_id_v2` computes in SQL for the same rows.
//!
//! Needs a server with `wal_level = logical` and the extension installed: `cargo xtask test`
//! starts one and runs this with `--ignored` and `ROWID_ORACLE_PSQL_ARGS`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;

use bytes::Bytes;
use rowid_codec::structure::Shape;
use rowid_codec::{Domain, TypeTag};
use rowid_pgoutput::{
    Column, Decoder, FlagBits, IdentityColumn, Message, Options, RelationCache, RelationIdentity,
    complete,
};
use rowid_testkit::hex::from_hex;
use rowid_testkit::psql::run as sql;

/// (table, key type, registry tag, [k1, k2, k3, new value for k2])
#[rustfmt::skip]
const KEYS: &[(&str, &str, TypeTag, [&str; 4])] = &[
    ("x_int2", "int2", TypeTag::Int2, ["1", "-2", "300", "7"]),
    ("x_int4", "int4", TypeTag::Int4, ["1", "-2000000", "42", "8"]),
    ("x_int8", "int8", TypeTag::Int8, ["1", "-9000000000", "42", "8"]),
    ("x_oid", "oid", TypeTag::Oid, ["1", "4000000000", "42", "8"]),
    ("x_float4", "float4", TypeTag::Float4, ["1.5", "'-Infinity'", "'NaN'", "0"]),
    ("x_float8", "float8", TypeTag::Float8, ["1.5", "'-Infinity'", "'NaN'", "-0.25"]),
    ("x_numeric", "numeric", TypeTag::Numeric, ["1.50", "-0.001", "12345678901234567890.5", "2.00"]),
    ("x_text", "text", TypeTag::Text, ["'a'", "'éé'", "'zz'", "'b'"]),
    ("x_varchar", "varchar(20)", TypeTag::Varchar, ["'a'", "'bb'", "'c'", "'d'"]),
    ("x_bpchar", "char(5)", TypeTag::Bpchar, ["'ab'", "'c'", "'d'", "'e'"]),
    ("x_bytea", "bytea", TypeTag::Bytea, ["'\\x00'", "'\\xff00'", "'\\x'", "'\\x01'"]),
    ("x_uuid", "uuid", TypeTag::Uuid, ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'", "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12'"]),
    ("x_date", "date", TypeTag::Date, ["'2020-01-01'", "'1999-12-31'", "'infinity'", "'2000-01-01'"]),
    ("x_time", "time", TypeTag::Time, ["'00:00'", "'12:34:56.789'", "'24:00'", "'01:00'"]),
    ("x_timestamptz", "timestamptz", TypeTag::Timestamptz, ["'2020-01-01 00:00+00'", "'1999-12-31 23:59:59.999999+05'", "'-infinity'", "'2000-01-01 00:00+00'"]),
    ("x_timetz", "timetz", TypeTag::Timetz, ["'00:00+01'", "'01:00+00'", "'23:59-05'", "'12:00+02'"]),
    ("x_interval", "interval", TypeTag::Interval, ["'1 mon'", "'1 day'", "'-1 s'", "'2 days'"]),
    ("x_inet", "inet", TypeTag::Inet, ["'10.0.0.1'", "'::1'", "'192.168.1.5/24'", "'10.0.0.2'"]),
    ("x_cidr", "cidr", TypeTag::Cidr, ["'10.0.0.0/8'", "'::/0'", "'192.168.1.0/24'", "'10.1.0.0/16'"]),
    ("x_macaddr", "macaddr", TypeTag::Macaddr, ["'08:00:2b:01:02:03'", "'00:00:00:00:00:00'", "'ff:ff:ff:ff:ff:ff'", "'08:00:2b:01:02:04'"]),
    ("x_varbit", "varbit", TypeTag::Varbit, ["B'1'", "B'10'", "B''", "B'0001'"]),
    ("x_timestamp", "timestamp", TypeTag::Timestamp, ["'2020-01-01 00:00'", "'-infinity'", "'1999-12-31 23:59:59.5'", "'2000-01-01'"]),
    ("x_macaddr8", "macaddr8", TypeTag::Macaddr8, ["'08:00:2b:01:02:03:04:05'", "'00:00:00:00:00:00:00:00'", "'ff:ff:ff:ff:ff:ff:ff:ff'", "'08:00:2b:01:02:03:04:06'"]),
    ("x_bit", "bit(4)", TypeTag::Bit, ["B'1010'", "B'0000'", "B'1111'", "B'0001'"]),
    ("x_enum", "xp_mood", TypeTag::Enum, ["'sad'", "'ok'", "'happy'", "'meh'"]),
    ("x_domain", "xp_posint", TypeTag::Int4, ["1", "2", "3", "4"]),
];

/// Keys of the structural families (spec/wire-format.md §6): (table, key type, [k1, k2, k3,
/// new value for k2]); their shapes come from [`structural_shape`].
#[rustfmt::skip]
const STRUCTURAL_KEYS: &[(&str, &str, [&str; 4])] = &[
    ("x_int4arr", "int4[]", ["'{1,2}'", "'{}'", "'[0:1]={1,NULL}'", "'{{1,2},{3,4}}'"]),
    ("x_textarr", "text[]", ["'{a,b}'", "'{é}'", "'{\"\"}'", "'{z,NULL}'"]),
    ("x_int4range", "int4range", ["'[1,3]'", "'empty'", "'(,5]'", "'[2,)'"]),
    ("x_numrange", "numrange", ["'[1,2.0]'", "'(1.5,)'", "'empty'", "'[-1,1)'"]),
    ("x_int4mr", "int4multirange", ["'{[1,3),[5,7)}'", "'{}'", "'{(,0]}'", "'{[10,20]}'"]),
    ("x_jsonb", "jsonb", ["'{\"b\": [true, null], \"a\": 1.0}'", "'1'", "'[1, \"x\"]'", "'{\"k\": {\"n\": 2.50}}'"]),
    ("x_pair", "xp_pair", ["ROW(1,'a')", "ROW(2,NULL)", "ROW(NULL,'c')", "ROW(3,'d')"]),
    ("x_nest", "xp_nest", ["ROW('{1,NULL}'::int4[], int4range(1,5), '{\"a\": [1]}'::jsonb)", "ROW(NULL, 'empty'::int4range, 'null'::jsonb)", "ROW('{}'::int4[], NULL, '[]'::jsonb)", "ROW('{7}'::int4[], '(,)'::int4range, '\"s\"'::jsonb)"]),
];

/// The registry's shape of each structural key type.
fn structural_shape(ty: &str) -> Shape {
    let scalar = |t| Box::new(Shape::Scalar(t));
    match ty {
        "int4[]" => Shape::Array(scalar(TypeTag::Int4)),
        "text[]" => Shape::Array(scalar(TypeTag::Text)),
        "int4range" => Shape::Range(scalar(TypeTag::Int4)),
        "numrange" => Shape::Range(scalar(TypeTag::Numeric)),
        "int4multirange" => Shape::Multirange(scalar(TypeTag::Int4)),
        "jsonb" => Shape::Jsonb,
        "xp_pair" => Shape::Record(vec![
            Shape::Scalar(TypeTag::Int4),
            Shape::Scalar(TypeTag::Text),
        ]),
        "xp_nest" => Shape::Record(vec![
            Shape::Array(scalar(TypeTag::Int4)),
            Shape::Range(scalar(TypeTag::Int4)),
            Shape::Jsonb,
        ]),
        other => panic!("no shape for {other}"),
    }
}

/// Every keyed table: scalar and structural, with the key's shape.
fn all_keys() -> Vec<(&'static str, &'static str, Shape, [&'static str; 4])> {
    KEYS.iter()
        .map(|(t, ty, tag, v)| (*t, *ty, Shape::Scalar(*tag), *v))
        .chain(
            STRUCTURAL_KEYS
                .iter()
                .map(|(t, ty, v)| (*t, *ty, structural_shape(ty), *v)),
        )
        .collect()
}

fn enc_sql(domain: &str, row: &str) -> String {
    format!("SELECT encode(pgtrickle.encode_row_id_v2('{domain}', ROW({row})), 'hex');")
}

/// What the WAL said about one table, in order: (kind, new identity, old identity, whether
/// the new tuple carried an unchanged-TOAST 'u' column).
type Changes = Vec<(char, Option<String>, Option<String>, bool)>;

struct Wal {
    by_table: HashMap<String, Changes>,
    stream_starts: usize,
    refusals: Vec<String>,
}

/// Decodes every message of a slot and derives identities with `schemas`.
fn read_slot(
    slot: &str,
    options: &[&str],
    proto: u32,
    schemas: &HashMap<String, RelationIdentity>,
) -> Wal {
    let opts: Vec<String> = options.iter().map(|o| format!("'{o}'")).collect();
    let out = sql(&format!(
        "SELECT encode(data, 'hex') FROM pg_logical_slot_get_binary_changes('{slot}', NULL, NULL, {});",
        opts.join(", ")
    ));
    let mut decoder = Decoder::new(Options {
        proto_version: proto,
        parallel_streaming: false,
    });
    let mut relations = RelationCache::default();
    let mut bound = HashMap::new();
    let flags = FlagBits::default();
    let mut wal = Wal {
        by_table: HashMap::new(),
        stream_starts: 0,
        refusals: Vec::new(),
    };
    for line in out.lines().filter(|l| !l.is_empty()) {
        let msg = decoder
            .decode(Bytes::from(from_hex(line).unwrap()))
            .unwrap();
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        match msg {
            Message::StreamStart { .. } => wal.stream_starts += 1,
            Message::Relation { relation, .. } => {
                if let Some(schema) = schemas.get(&relation.name) {
                    // A refused binding is recorded; the table's changes are still followed
                    // (after-image completion does not depend on the binding), without
                    // identities.
                    let b = match schema.bind(&relation, &flags) {
                        Ok(b) => Some(b),
                        Err(e) => {
                            wal.refusals.push(format!("{}: {e}", relation.name));
                            None
                        }
                    };
                    bound.insert(relation.relid, (relation.name.clone(), b));
                }
                relations.apply(relation);
            }
            Message::Insert { relid, new, .. } => {
                if let Some((name, b)) = bound.get(&relid) {
                    let new_hex = b.as_ref().map(|b| {
                        let mut id = Vec::new();
                        b.encode(&new, &mut id).unwrap();
                        hex(&id)
                    });
                    wal.by_table
                        .entry(name.clone())
                        .or_default()
                        .push(('I', new_hex, None, false));
                }
            }
            Message::Update {
                relid, old, new, ..
            } => {
                if let Some((name, b)) = bound.get(&relid) {
                    let relation = relations.get(relid).unwrap();
                    let had_u = new.contains(&Column::UnchangedToast);
                    let image = complete(relation, &flags, old.as_ref(), &new);
                    let mut new_id = Vec::new();
                    let needed: Vec<usize> = (0..relation.columns.len()).collect();
                    let new_hex = match image.require(relation, &needed) {
                        Ok(row) => b.as_ref().map(|b| {
                            b.encode(row, &mut new_id).unwrap();
                            hex(&new_id)
                        }),
                        Err(e) => {
                            wal.refusals.push(e.to_string());
                            None
                        }
                    };
                    let old_hex = old.zip(b.as_ref()).map(|(o, b)| {
                        let mut id = Vec::new();
                        b.encode_old(&o, &mut id).unwrap();
                        hex(&id)
                    });
                    wal.by_table
                        .entry(name.clone())
                        .or_default()
                        .push(('U', new_hex, old_hex, had_u));
                }
            }
            Message::Delete { relid, old, .. } => {
                if let Some((name, b)) = bound.get(&relid) {
                    let old_hex = b.as_ref().map(|b| {
                        let mut id = Vec::new();
                        b.encode_old(&old, &mut id).unwrap();
                        hex(&id)
                    });
                    wal.by_table
                        .entry(name.clone())
                        .or_default()
                        .push(('D', None, old_hex, false));
                }
            }
            _ => {}
        }
    }
    wal
}

fn type_oid(table: &str, column: &str) -> u32 {
    sql(&format!(
        "SELECT atttypid::int8 FROM pg_attribute WHERE attrelid = '{table}'::regclass AND attname = '{column}';"
    ))
    .trim()
    .parse()
    .unwrap()
}

fn key_schema(table: &str, shape: Shape) -> RelationIdentity {
    RelationIdentity {
        domain: Domain::ScanKey,
        columns: vec![IdentityColumn {
            name: "k".into(),
            type_oid: type_oid(table, "k"),
            shape,
        }],
        key_is_primary: true,
    }
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn wal_identities_equal_sql_identities() {
    let mut setup = String::from(
        "CREATE EXTENSION IF NOT EXISTS pg_trickle_ext;
         CREATE TYPE xp_mood AS ENUM ('sad', 'ok', 'happy', 'meh');
         CREATE DOMAIN xp_posint AS int4 CHECK (VALUE > 0);
         CREATE TYPE xp_pair AS (n int4, s text);
         CREATE TYPE xp_nest AS (a int4[], r int4range, j jsonb);\n",
    );
    let keys = all_keys();
    for (table, ty, _, _) in &keys {
        setup.push_str(&format!(
            "CREATE TABLE {table} (k {ty} PRIMARY KEY, v text);\n"
        ));
    }
    setup.push_str(
        "CREATE TABLE x_toastkey (k text PRIMARY KEY, v int);
         ALTER TABLE x_toastkey ALTER COLUMN k SET STORAGE EXTERNAL;
         CREATE TABLE x_full (id int, big text, v int);
         ALTER TABLE x_full ALTER COLUMN big SET STORAGE EXTERNAL;
         ALTER TABLE x_full REPLICA IDENTITY FULL;
         CREATE TABLE x_default (id int PRIMARY KEY, big text, v int);
         ALTER TABLE x_default ALTER COLUMN big SET STORAGE EXTERNAL;
         CREATE TABLE x_stream (id int8 PRIMARY KEY, pad text);
         CREATE TABLE x_bool (k bool PRIMARY KEY, v text);
         CREATE TABLE x_composite (region text, id int4, v text, PRIMARY KEY (region, id));
         CREATE PUBLICATION xp FOR ALL TABLES;\n",
    );
    sql(&setup);
    sql("SELECT pg_create_logical_replication_slot('xs1', 'pgoutput');");
    sql("SELECT pg_create_logical_replication_slot('xs2', 'pgoutput');");

    // Workload: every statement is its own committed transaction.
    let mut work = String::new();
    for (table, ty, _, [a, b, c, b2]) in &keys {
        work.push_str(&format!(
            "INSERT INTO {table} VALUES (({a})::{ty}, 'v1'), (({b})::{ty}, 'v2'), (({c})::{ty}, 'v3');
             UPDATE {table} SET v = 'v1x' WHERE k = ({a})::{ty};
             UPDATE {table} SET k = ({b2})::{ty} WHERE k = ({b})::{ty};
             DELETE FROM {table} WHERE k = ({c})::{ty};\n"
        ));
    }
    // 2400 bytes: above the ~2 kB TOAST threshold, below the 2704-byte B-tree tuple limit.
    let long_key = "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 75) g)";
    let big = "(SELECT string_agg(md5(g::text || 'b'), '') FROM generate_series(1, 100) g)";
    work.push_str(&format!(
        "INSERT INTO x_toastkey VALUES ({long_key}, 0);
         UPDATE x_toastkey SET v = 1;
         INSERT INTO x_full VALUES (1, {big}, 0);
         UPDATE x_full SET v = 1;
         INSERT INTO x_default VALUES (1, {big}, 0);
         UPDATE x_default SET v = 1;
         INSERT INTO x_bool VALUES (false, 'a');
         UPDATE x_bool SET v = 'b';
         UPDATE x_bool SET k = true;
         DELETE FROM x_bool;
         INSERT INTO x_composite VALUES ('eu', 1, 'a'), ('us', 2, 'b');
         UPDATE x_composite SET v = 'c' WHERE region = 'eu';
         UPDATE x_composite SET id = 3 WHERE region = 'us';
         DELETE FROM x_composite WHERE region = 'eu';
         BEGIN; INSERT INTO x_stream SELECT g, repeat('x', 200) FROM generate_series(1, 3000) g; COMMIT;\n"
    ));
    sql(&work);

    let mut schemas: HashMap<String, RelationIdentity> = keys
        .iter()
        .map(|(table, _, shape, _)| (table.to_string(), key_schema(table, shape.clone())))
        .collect();
    schemas.insert(
        "x_toastkey".into(),
        key_schema("x_toastkey", Shape::Scalar(TypeTag::Text)),
    );
    schemas.insert(
        "x_bool".into(),
        key_schema("x_bool", Shape::Scalar(TypeTag::Bool)),
    );
    schemas.insert(
        "x_composite".into(),
        RelationIdentity {
            domain: Domain::ScanKey,
            columns: vec![
                IdentityColumn {
                    name: "region".into(),
                    type_oid: 25,
                    shape: Shape::Scalar(TypeTag::Text),
                },
                IdentityColumn {
                    name: "id".into(),
                    type_oid: 23,
                    shape: Shape::Scalar(TypeTag::Int4),
                },
            ],
            key_is_primary: true,
        },
    );
    schemas.insert(
        "x_stream".into(),
        RelationIdentity {
            domain: Domain::ScanKey,
            columns: vec![IdentityColumn {
                name: "id".into(),
                type_oid: 20,
                shape: Shape::Scalar(TypeTag::Int8),
            }],
            key_is_primary: true,
        },
    );
    let keyless = |t: &str| RelationIdentity {
        domain: Domain::KeylessRow,
        columns: vec![
            IdentityColumn {
                name: "id".into(),
                type_oid: 23,
                shape: Shape::Scalar(TypeTag::Int4),
            },
            IdentityColumn {
                name: "big".into(),
                type_oid: type_oid(t, "big"),
                shape: Shape::Scalar(TypeTag::Text),
            },
            IdentityColumn {
                name: "v".into(),
                type_oid: 23,
                shape: Shape::Scalar(TypeTag::Int4),
            },
        ],
        key_is_primary: false,
    };
    schemas.insert("x_full".into(), keyless("x_full"));
    schemas.insert("x_default".into(), keyless("x_default"));

    let base = [
        "proto_version",
        "1",
        "publication_names",
        "xp",
        "binary",
        "true",
    ];
    let wal = read_slot("xs1", &base, 1, &schemas);
    let (mut compared, mut mismatches) = (0usize, Vec::new());
    let mut check = |what: String, got: &Option<String>, sql_expr: String| {
        compared += 1;
        let want = sql(&sql_expr).trim().to_string();
        if got.as_deref() != Some(want.as_str()) {
            mismatches.push(format!("{what}: WAL {got:?}, SQL {want}"));
        }
    };
    for (table, ty, _, [a, b, c, b2]) in &keys {
        let changes = &wal.by_table[*table];
        assert_eq!(
            changes.iter().map(|c| c.0).collect::<String>(),
            "IIIUUD",
            "{table}: change kinds"
        );
        let e = |lit: &str| enc_sql("SCAN_KEY", &format!("({lit})::{ty}"));
        check(format!("{table} insert a"), &changes[0].1, e(a));
        check(format!("{table} insert b"), &changes[1].1, e(b));
        check(format!("{table} insert c"), &changes[2].1, e(c));
        check(format!("{table} sibling update"), &changes[3].1, e(a));
        check(format!("{table} key update new"), &changes[4].1, e(b2));
        check(format!("{table} key update old"), &changes[4].2, e(b));
        check(format!("{table} delete old"), &changes[5].2, e(c));
    }
    let b = &wal.by_table["x_bool"];
    assert_eq!(b.iter().map(|c| c.0).collect::<String>(), "IUUD");
    check("bool insert".into(), &b[0].1, enc_sql("SCAN_KEY", "false"));
    check(
        "bool sibling update".into(),
        &b[1].1,
        enc_sql("SCAN_KEY", "false"),
    );
    check(
        "bool key update new".into(),
        &b[2].1,
        enc_sql("SCAN_KEY", "true"),
    );
    check(
        "bool key update old".into(),
        &b[2].2,
        enc_sql("SCAN_KEY", "false"),
    );
    check("bool delete".into(), &b[3].2, enc_sql("SCAN_KEY", "true"));
    let c = &wal.by_table["x_composite"];
    assert_eq!(c.iter().map(|c| c.0).collect::<String>(), "IIUUD");
    let k = |r: &str, i: i32| enc_sql("SCAN_KEY", &format!("'{r}'::text, {i}::int4"));
    check("composite insert 1".into(), &c[0].1, k("eu", 1));
    check("composite insert 2".into(), &c[1].1, k("us", 2));
    check("composite sibling update".into(), &c[2].1, k("eu", 1));
    check("composite key update new".into(), &c[3].1, k("us", 3));
    check("composite key update old".into(), &c[3].2, k("us", 2));
    check("composite delete".into(), &c[4].2, k("eu", 1));
    // TOASTed key: the sibling update's new tuple has 'u' for k; 'K' carries it.
    let t = &wal.by_table["x_toastkey"];
    assert!(
        t[1].3,
        "the sibling update must send the TOASTed key as 'u' (backfilled from 'K')"
    );
    check(
        "toasted key insert".into(),
        &t[0].1,
        enc_sql("SCAN_KEY", "(SELECT k FROM x_toastkey)"),
    );
    check(
        "toasted key sibling update".into(),
        &t[1].1,
        enc_sql("SCAN_KEY", "(SELECT k FROM x_toastkey)"),
    );
    // FULL: 'O' completes the after-image, so the keyless identity of the new row exists.
    let f = &wal.by_table["x_full"];
    assert!(
        f[1].3,
        "FULL still sends the unchanged TOASTed column as 'u' (backfilled from 'O')"
    );
    check(
        "full sibling update".into(),
        &f[1].1,
        "SELECT encode(pgtrickle.encode_row_id_v2('KEYLESS_ROW', x), 'hex') FROM x_full x;".into(),
    );
    // DEFAULT: a keyless identity is refused at binding (a 'K' old tuple would read the
    // other columns as NULL), and nothing carries the TOASTed column either: refused by
    // name, never guessed.
    assert!(
        wal.refusals
            .iter()
            .any(|r| r.starts_with("x_default:") && r.contains("REPLICA IDENTITY FULL")),
        "{:?}",
        wal.refusals
    );
    let d = &wal.by_table["x_default"];
    assert!(d[1].3, "DEFAULT sends the unchanged TOASTed column as 'u'");
    assert_eq!(
        d[1].1, None,
        "an incomplete after-image must not produce an identity"
    );
    assert!(
        wal.refusals
            .iter()
            .any(|r| r.contains("x_default") && r.contains("big")),
        "{:?}",
        wal.refusals
    );
    // The large transaction, as one ordinary transaction on protocol 1.
    let s = &wal.by_table["x_stream"];
    let want: Vec<String> = sql("SELECT encode(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(id)), 'hex') FROM x_stream ORDER BY id;")
        .lines().map(str::to_string).collect();
    let got: Vec<String> = s.iter().filter_map(|c| c.1.clone()).collect();
    assert_eq!(got, want, "x_stream on protocol 1");

    // Protocol 2 with streaming: the same transaction arrives in stream segments.
    let streamed = read_slot(
        "xs2",
        &[
            "proto_version",
            "2",
            "publication_names",
            "xp",
            "binary",
            "true",
            "streaming",
            "on",
        ],
        2,
        &schemas,
    );
    assert!(
        streamed.stream_starts > 0,
        "logical_decoding_work_mem should force streaming"
    );
    let got: Vec<String> = streamed.by_table["x_stream"]
        .iter()
        .filter_map(|c| c.1.clone())
        .collect();
    assert_eq!(got, want, "x_stream streamed on protocol 2");
    // The slots would hold every later test's WAL on this cluster (gigabytes by the end of
    // the run): drop them once read.
    sql("SELECT pg_drop_replication_slot('xs1'); SELECT pg_drop_replication_slot('xs2');");

    println!(
        "cross-path: {compared} WAL identities compared with SQL (+{} streamed, +{} protocol-1 rows of the large transaction), {} mismatches; {} refusals: {:?}",
        got.len(),
        want.len(),
        mismatches.len(),
        wal.refusals.len(),
        wal.refusals
    );
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
