//! Row images against the server (spec/row-images.md): a table with a column of every type
//! the mapping covers (and two it does not), rows of ordinary and edge values, an UPDATE and
//! a DELETE under REPLICA IDENTITY FULL. Every image in the JSON lines is read back into SQL
//! by the spec's rules, written out here from the spec's table, not from the code under
//! test, and the server judges each column: the value `IS NOT DISTINCT FROM` the row's, and
//! its text output is the same too (which equality alone would forgive: a numeric's scale,
//! `-0`, an interval's months against days, jsonb's written numbers). Then the TOAST matrix:
//! REPLICA IDENTITY FULL, DEFAULT and USING INDEX, a TOASTed key and a TOASTed non-key
//! column, each changed or left alone, against the spec's `backfilled` and
//! `unchanged_toast` outcomes.
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::sync::Mutex;

use common::{Cdc, Dir, DropSlot, database, one, wait_active};
use rowid_testkit::psql::Psql;
use serde_json::Value;
use serde_json::value::RawValue;

/// The tests share the server's WAL: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The columns of `every` and their SQL types (the read-back rules depend on the type).
const COLUMNS: &[(&str, &str)] = &[
    ("id", "int4"),
    ("c_bool", "bool"),
    ("c_int2", "int2"),
    ("c_int4", "int4"),
    ("c_int8", "int8"),
    ("c_oid", "oid"),
    ("c_float4", "float4"),
    ("c_float8", "float8"),
    ("c_numeric", "numeric"),
    ("c_text", "text"),
    ("c_varchar", "varchar(10)"),
    ("c_bpchar", "char(5)"),
    ("c_bytea", "bytea"),
    ("c_uuid", "uuid"),
    ("c_date", "date"),
    ("c_time", "time"),
    ("c_timetz", "timetz"),
    ("c_timestamp", "timestamp"),
    ("c_timestamptz", "timestamptz"),
    ("c_interval", "interval"),
    ("c_inet", "inet"),
    ("c_cidr", "cidr"),
    ("c_macaddr", "macaddr"),
    ("c_macaddr8", "macaddr8"),
    ("c_bit", "bit(3)"),
    ("c_varbit", "varbit"),
    ("c_enum", "mood"),
    ("c_jsonb", "jsonb"),
    ("c_int4s", "int4[]"),
    ("c_texts", "text[]"),
    ("c_float8s", "float8[]"),
    ("c_int4range", "int4range"),
    ("c_tstzrange", "tstzrange"),
    ("c_numrange", "numrange"),
    ("c_int4multirange", "int4multirange"),
    ("c_pair", "pair"),
    ("c_pairs", "pair[]"),
    ("c_positive", "positive"),
    ("c_money", "money"),
    ("c_point", "point"),
];

/// Three rows: ordinary values, edge values, NULLs.
const ROWS: &str = r#"
INSERT INTO every VALUES (1, true, -32768, 2147483647, 9223372036854775807, 4000000000,
  1.1, 0.1, 1.50, 'plain "text" with \ and é', 'short', 'ab', '\x00ff10',
  '00010203-0405-0607-0809-0a0b0c0d0e0f', '2026-12-01', '13:14:15.161718',
  '12:00:00+01', '2026-12-01 09:30:00.123456', '2026-12-01 09:30:00.123456+00',
  '1 mon 2 days 00:00:00.000003', '10.0.0.1', '2001:db8::/32', '08:00:2b:01:02:03',
  '08:00:2b:01:02:03:04:05', B'101', B'1101001', 'happy', '{"a": 1.50, "b": [true, null, "x\ny"]}',
  '{1,2,3}', '{"a","b c","d\"e",NULL}', '{1.5,-0,NaN}', '[1,5)', '[2026-01-01 00:00+00,2026-02-01 00:00+00)',
  '(0.5,1.25]', '{[1,3),[5,7)}', ROW(7, 'x'), ARRAY[ROW(1, 'a')::pair, NULL], 5, '12.34', '(1,2)');
INSERT INTO every VALUES (2, false, 0, -2147483648, -9223372036854775808, 0,
  '-0', '-0', '0.000', E'tab\tand\nnewline', '', 'abcde', '\x', '00000000-0000-0000-0000-000000000000',
  '0001-12-31 BC', '24:00:00', '00:00:00-15:59:59', 'infinity', '-infinity',
  '-1 mon -2 days -00:00:01.5', '::ffff:1.2.3.4', '0.0.0.0/0', '00:00:00:00:00:00',
  'ff:ff:ff:ff:ff:ff:ff:ff', B'000', B'', 'sad', '[]', '[0:1]={10,20}', '{{"a","b"},{"c","d"}}',
  '{Infinity,-Infinity,1e300}', 'empty', '(,2026-01-01 00:00+00]', '[-Infinity,NaN)', '{}',
  ROW(NULL, NULL), '{}', 1, '-0.01', '(-1.5,NaN)');
INSERT INTO every (id) VALUES (3);
UPDATE every SET c_numeric = 'NaN', c_float8 = '+Infinity', c_float4 = 'NaN', c_numrange = numrange(1, 2, '()') WHERE id = 3;
"#;

/// SQL quoting of a string literal.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The JSON of one image column, as written (numbers and jsonb untouched).
type Image = BTreeMap<String, Box<RawValue>>;

/// The spec's read-back of `v` (a value of SQL type `ty`) as a SQL expression
/// (spec/row-images.md §4).
fn read_back(raw: &str, ty: &str) -> String {
    let v: Value = serde_json::from_str(raw).unwrap();
    if v.is_null() {
        return format!("NULL::{ty}");
    }
    if let Some(elem) = ty.strip_suffix("[]") {
        return array(&v, elem, ty);
    }
    let s = v.as_str().map(str::to_string);
    let cast = |text: &str| format!("{}::{ty}", quote(text));
    match ty {
        "bool" | "int2" | "int4" | "oid" => format!("({raw})::{ty}"),
        "int8" | "numeric" | "text" | "varchar(10)" | "char(5)" | "uuid" | "time" | "timetz"
        | "inet" | "cidr" | "macaddr" | "macaddr8" | "mood" => cast(&s.unwrap()),
        // A number's own text, or the strings NaN, Infinity, -Infinity.
        "float4" | "float8" => cast(&s.unwrap_or_else(|| raw.to_string())),
        "bytea" => format!("decode({}, 'hex')", quote(&s.unwrap())),
        "bit(3)" | "varbit" => format!("B{}::{ty}", quote(&s.unwrap())),
        // jsonb exactly as written, numbers included.
        "jsonb" => cast(raw),
        "date" | "timestamp" | "timestamptz" => cast(&date_time(&s.unwrap())),
        "interval" => {
            let micros: i64 = v["microseconds"].as_str().unwrap().parse().unwrap();
            let a = micros.unsigned_abs();
            let sign = if micros < 0 { "-" } else { "" };
            cast(&format!(
                "{} mons {} days {sign}{}:{:02}:{:02}.{:06}",
                v["months"],
                v["days"],
                a / 3_600_000_000,
                a / 60_000_000 % 60,
                a / 1_000_000 % 60,
                a % 1_000_000
            ))
        }
        "int4range" | "tstzrange" | "numrange" => range(&v, ty),
        "int4multirange" => {
            let ranges: Vec<String> = v
                .as_array()
                .unwrap()
                .iter()
                .map(|r| range(r, "int4range"))
                .collect();
            format!("int4multirange({})", ranges.join(", "))
        }
        "pair" => {
            let f = v.as_array().unwrap();
            format!(
                "ROW({}, {})::pair",
                read_back(&f[0].to_string(), "int8"),
                read_back(&f[1].to_string(), "text")
            )
        }
        "positive" => format!("({})::positive", read_back(raw, "int4")),
        other => panic!("no read-back rule for {other}"),
    }
}

/// Astronomical years back to PostgreSQL's BC: year `y <= 0` is `1 - y` BC.
fn date_time(s: &str) -> String {
    if s.ends_with("infinity") {
        return s.to_string();
    }
    let (negative, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let (year, tail) = rest.split_at(rest.find('-').unwrap());
    let year: i64 = year.parse::<i64>().unwrap() * if negative { -1 } else { 1 };
    let tail = tail.replace('T', " ").replace('Z', "+00");
    if year <= 0 {
        format!("{:04}{tail} BC", 1 - year)
    } else {
        format!("{year:04}{tail}")
    }
}

fn range(v: &Value, ty: &str) -> String {
    if v.get("empty").is_some() {
        return format!("'empty'::{ty}");
    }
    let sub = match ty {
        "int4range" => "int4",
        "tstzrange" => "timestamptz",
        _ => "numeric",
    };
    let bound = |b: &Value| {
        if b.is_null() {
            format!("NULL::{sub}")
        } else {
            read_back(&b.to_string(), sub)
        }
    };
    format!(
        "{ty}({}, {}, '{}{}')",
        bound(&v["lower"]),
        bound(&v["upper"]),
        if v["lower_inc"] == true { '[' } else { '(' },
        if v["upper_inc"] == true { ']' } else { ')' }
    )
}

/// An array's JSON as `ARRAY[...]`; with `lower_bounds`, that many levels are dimensions
/// and bounds other than 1 are put back through the text form.
fn array(v: &Value, elem: &str, ty: &str) -> String {
    let (lower, values): (Option<Vec<i64>>, &Value) = match v.get("lower_bounds") {
        Some(l) => (
            Some(
                l.as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_i64().unwrap())
                    .collect(),
            ),
            &v["values"],
        ),
        None => (None, v),
    };
    if values.as_array().unwrap().is_empty() {
        return format!("'{{}}'::{ty}");
    }
    // Plain nesting holds scalars and ranges only: every array level is a dimension.
    let ndims = match &lower {
        Some(l) => l.len(),
        None => {
            let mut n = 0;
            let mut at = values;
            while let Some(items) = at.as_array() {
                n += 1;
                at = &items[0];
            }
            n
        }
    };
    fn nest(v: &Value, elem: &str, levels: usize) -> String {
        if levels == 0 {
            return read_back(&v.to_string(), elem);
        }
        let items: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|i| nest(i, elem, levels - 1))
            .collect();
        format!("ARRAY[{}]", items.join(", "))
    }
    let plain = format!("{}::{ty}", nest(values, elem, ndims));
    let Some(lower) = lower.filter(|l| l.iter().any(|&b| b != 1)) else {
        return plain;
    };
    let mut lengths = Vec::new();
    let mut at = values;
    for _ in 0..ndims {
        let items = at.as_array().unwrap();
        lengths.push(items.len() as i64);
        at = &items[0];
    }
    let prefix: String = lower
        .iter()
        .zip(&lengths)
        .map(|(l, n)| format!("[{l}:{}]", l + n - 1))
        .collect();
    format!(
        "({} || ({plain})::text)::{ty}",
        quote(&format!("{prefix}="))
    )
}

/// The columns of image `image` that do not read back to `table`'s row `id` (the value or
/// its text output differ), or that the image lacks.
fn mismatches(db: &Psql, image: &Image, table: &str, id: i64) -> Vec<String> {
    let mut checks = Vec::new();
    for (name, ty) in COLUMNS {
        let check = match image.get(*name) {
            None => format!("'{name} is absent'"),
            Some(raw) if matches!(*ty, "money" | "point") => {
                // Outside the mapping: the type's name and its send form.
                let v: Value = serde_json::from_str(raw.get()).unwrap();
                if v.is_null() {
                    format!("CASE WHEN b.{name} IS NULL THEN NULL ELSE '{name}' END")
                } else {
                    let send = if *ty == "money" {
                        "cash_send"
                    } else {
                        "point_send"
                    };
                    format!(
                        "CASE WHEN {} = '{ty}' AND encode({send}(b.{name}), 'hex') = {} \
                         THEN NULL ELSE '{name}' END",
                        quote(v["type"].as_str().unwrap_or("")),
                        quote(v["send"].as_str().unwrap_or(""))
                    )
                }
            }
            Some(raw) => {
                let e = read_back(raw.get(), ty);
                format!(
                    "CASE WHEN ({e}) IS NOT DISTINCT FROM b.{name} \
                       AND ({e})::text IS NOT DISTINCT FROM b.{name}::text \
                     THEN NULL ELSE '{name}: ' || coalesce(b.{name}::text, 'NULL') || ' vs ' \
                       || coalesce(({e})::text, 'NULL') END"
                )
            }
        };
        checks.push(check);
    }
    let out = one(
        db,
        &format!(
            "SELECT concat_ws(E'\\n', {}) FROM {table} b WHERE b.id = {id};",
            checks.join(", ")
        ),
    );
    out.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// One JSON line with its images as written.
struct Line {
    op: String,
    old: Option<Image>,
    old_image: Option<String>,
    new: Option<Image>,
    backfilled: Vec<String>,
    unchanged_toast: Vec<String>,
}

fn parse_line(text: &str) -> Line {
    let members: BTreeMap<String, Box<RawValue>> = serde_json::from_str(text).unwrap();
    let value = |k: &str| -> Value { serde_json::from_str(members[k].get()).unwrap() };
    let image = |k: &str| -> Option<Image> { serde_json::from_str(members[k].get()).unwrap() };
    let names = |k: &str| -> Vec<String> { serde_json::from_value(value(k)).unwrap() };
    Line {
        op: value("op").as_str().unwrap().to_string(),
        old: image("old"),
        old_image: value("old_image").as_str().map(str::to_string),
        new: image("new"),
        backfilled: names("backfilled"),
        unchanged_toast: names("unchanged_toast"),
    }
}

fn lines(cdc: &Cdc<'_>, n: usize) -> Vec<Line> {
    cdc.wait_lines(n);
    let text = std::fs::read_to_string(cdc.dir.file("changes.jsonl")).unwrap();
    text.lines().map(parse_line).collect()
}

fn id_of(image: &Image) -> i64 {
    image["id"].get().parse().unwrap()
}

#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn every_image_reads_back_to_its_row() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let db = database("rowid_cdc_images", "img");
    let columns: Vec<String> = COLUMNS
        .iter()
        .map(|(n, t)| format!("{n} {t}{}", if *n == "id" { " PRIMARY KEY" } else { "" }))
        .collect();
    db.run(&format!(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         CREATE TYPE mood AS ENUM ('sad', 'happy');
         CREATE TYPE pair AS (a int8, b text);
         CREATE DOMAIN positive AS int4 CHECK (VALUE > 0);
         CREATE TABLE every ({});
         ALTER TABLE every REPLICA IDENTITY FULL;
         CREATE PUBLICATION img FOR TABLE every;",
        columns.join(", ")
    ))
    .unwrap();
    let _drop_slot = DropSlot(&db, "img");
    let dir = Dir::new("images");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "img",
        publication: "img",
        dir: &dir,
    };
    let _running = cdc.spawn(&["--create-slot"]);
    wait_active(&db, "img");
    db.run(ROWS).unwrap();
    db.run(
        "CREATE TABLE before AS SELECT * FROM every;
         UPDATE every SET c_int4 = c_int4 - 1, c_text = 'changed' WHERE id = 1;
         DELETE FROM every WHERE id = 2;",
    )
    .unwrap();
    // Three inserts, the NULL row's update, the update of 1, the delete of 2.
    let lines = lines(&cdc, 6);
    let ops: Vec<&str> = lines.iter().map(|l| l.op.as_str()).collect();
    assert_eq!(
        ops,
        ["insert", "insert", "insert", "update", "update", "delete"]
    );
    let mut failures = Vec::new();
    let mut check = |what: String, image: &Image, table: &str| {
        for m in mismatches(&db, image, table, id_of(image)) {
            failures.push(format!("{what}: {m}"));
        }
    };
    // Rows 1 and 2 as they were inserted are in `before`; row 3 after its update in both.
    for (i, l) in lines.iter().enumerate().take(2) {
        check(
            format!("insert line {i}"),
            l.new.as_ref().unwrap(),
            "before",
        );
    }
    // Row 3 was inserted with NULLs everywhere but its id.
    let nulls = lines[2].new.as_ref().unwrap();
    assert_eq!(nulls.len(), COLUMNS.len(), "every column, NULL included");
    assert!(nulls.iter().all(|(k, v)| k == "id" || v.get() == "null"));
    check(
        "update of 3, new".into(),
        lines[3].new.as_ref().unwrap(),
        "every",
    );
    check(
        "update of 1, old".into(),
        lines[4].old.as_ref().unwrap(),
        "before",
    );
    check(
        "update of 1, new".into(),
        lines[4].new.as_ref().unwrap(),
        "every",
    );
    check(
        "delete of 2, old".into(),
        lines[5].old.as_ref().unwrap(),
        "before",
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(lines[4].old_image.as_deref(), Some("full"));
    assert!(lines[5].new.is_none());
    // No TOASTed value here: nothing backfilled, nothing unknown.
    assert!(
        lines
            .iter()
            .all(|l| l.backfilled.is_empty() && l.unchanged_toast.is_empty())
    );
}

/// What an UPDATE's line says of its images: the columns of `new`, `old_image`,
/// `backfilled`, `unchanged_toast`.
type Outcome = (String, Option<String>, Vec<String>, Vec<String>);

/// The TOAST matrix: for each replica identity setting, `k` (the key) and `doc` TOASTed out
/// of line, and an UPDATE that changes `n` only, `k`, or `doc`.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn unchanged_toast_is_backfilled_or_named_as_the_spec_says() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let db = database("rowid_cdc_toast", "toast");
    let mut setup = String::from(
        "CREATE EXTENSION pg_trickle_ext; SELECT pgtrickle.enable_identity_messages();",
    );
    for (table, identity) in [
        ("t_full", "FULL"),
        ("t_default", "DEFAULT"),
        ("t_index", "USING INDEX t_index_k"),
    ] {
        let key = if table == "t_index" {
            "k text NOT NULL"
        } else {
            "k text PRIMARY KEY"
        };
        setup.push_str(&format!(
            "CREATE TABLE {table} ({key}, doc text, n int);
             ALTER TABLE {table} ALTER COLUMN k SET STORAGE EXTERNAL;
             ALTER TABLE {table} ALTER COLUMN doc SET STORAGE EXTERNAL;"
        ));
        if table == "t_index" {
            setup.push_str("CREATE UNIQUE INDEX t_index_k ON t_index (k);");
        }
        setup.push_str(&format!("ALTER TABLE {table} REPLICA IDENTITY {identity};"));
    }
    setup.push_str("CREATE PUBLICATION toast FOR TABLE t_full, t_default, t_index;");
    db.run(&setup).unwrap();
    let _drop_slot = DropSlot(&db, "toast");
    let dir = Dir::new("toast");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "toast",
        publication: "toast",
        dir: &dir,
    };
    let _running = cdc.spawn(&["--create-slot"]);
    wait_active(&db, "toast");
    // 2500 bytes: out of line in the heap (past the 2 kB TOAST threshold, storage
    // EXTERNAL), still within a B-tree entry's 2704.
    let mut work = String::new();
    for table in ["t_full", "t_default", "t_index"] {
        work.push_str(&format!(
            "INSERT INTO {table} VALUES (repeat('k', 2500), repeat(md5('d'), 200), 0);
             UPDATE {table} SET n = 1;
             UPDATE {table} SET k = repeat('j', 2500);
             UPDATE {table} SET doc = repeat(md5('e'), 200);"
        ));
    }
    db.run(&work).unwrap();
    let lines = lines(&cdc, 12);
    let outcome: Vec<Outcome> = lines
        .iter()
        .filter(|l| l.op == "update")
        .map(|l| {
            let v: Vec<String> = l.new.as_ref().unwrap().keys().cloned().collect();
            (
                v.join(","),
                l.old_image.clone(),
                l.backfilled.clone(),
                l.unchanged_toast.clone(),
            )
        })
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let keyed = [
        // n only: the key is TOASTed, so PostgreSQL logs it (`K`); doc stays unknown.
        ("k,n", Some("key"), s(&["k"]), s(&["doc"])),
        // k changed: its new value is sent; doc unknown.
        ("k,n", Some("key"), s(&[]), s(&["doc"])),
        // doc changed: k is filled from the logged key.
        ("doc,k,n", Some("key"), s(&["k"]), s(&[])),
    ];
    let mut want = vec![
        // FULL: the whole old row; every omitted value is the old one.
        ("doc,k,n", Some("full"), s(&["k", "doc"]), s(&[])),
        ("doc,k,n", Some("full"), s(&["doc"]), s(&[])),
        ("doc,k,n", Some("full"), s(&["k"]), s(&[])),
    ];
    want.extend(keyed.clone());
    want.extend(keyed);
    let want: Vec<Outcome> = want
        .into_iter()
        .map(|(n, o, b, u)| (n.to_string(), o.map(str::to_string), b, u))
        .collect();
    assert_eq!(outcome, want);
    // And the filled values are the row's: the last update of each table, read back.
    for (l, table) in lines
        .iter()
        .filter(|l| l.op == "update")
        .skip(2)
        .step_by(3)
        .zip(["t_full", "t_default", "t_index"])
    {
        let new = l.new.as_ref().unwrap();
        let k: String = serde_json::from_str(new["k"].get()).unwrap();
        let doc: String = serde_json::from_str(new["doc"].get()).unwrap();
        assert_eq!(
            one(
                &db,
                &format!(
                    "SELECT k = {} AND doc = {} FROM {table};",
                    quote(&k),
                    quote(&doc)
                )
            ),
            "t",
            "{table}"
        );
    }
}
