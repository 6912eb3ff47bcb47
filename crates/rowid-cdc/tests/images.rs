//! Row images against the server (spec/row-images.md). Every image in the JSON lines is read
//! back into SQL by the spec's rules, written out here from the spec's table (the column
//! types from the catalog), not from the code under test, and the server judges each column:
//! the value `IS NOT DISTINCT FROM` the row's, and its text output is the same too (which
//! equality alone would forgive: a numeric's scale, `-0`, an interval's months against days,
//! jsonb's written numbers).
//!
//! - A table with a column of every type the mapping covers (and two it does not), rows of
//!   ordinary and edge values, an UPDATE and a DELETE under REPLICA IDENTITY FULL.
//! - Every value the codec's server oracle generates (120 per scalar type, intervals in
//!   their three spellings), the vectors' single-field values, and the limits of every field
//!   (every combination of the interval fields' limits; calendar, number and jsonb edges;
//!   jsonb `null` against SQL NULL in arrays and composites), a table per column type,
//!   through the snapshot's copy and the stream.
//! - The TOAST matrix: REPLICA IDENTITY FULL, DEFAULT and USING INDEX, a TOASTed key and a
//!   TOASTed non-key column, each changed or left alone, against the spec's `backfilled` and
//!   `unchanged_toast` outcomes.
//!
//! Needs a server with `wal_level = logical` and the extension: run through `cargo xtask test`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use common::{Cdc, Dir, DropSlot, database, one, wait_active};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use rowid_testkit::model::{input, scalar_tags};
use rowid_testkit::psql::Psql;
use rowid_testkit::sql::{enum_type_ddl, literal, representable};
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

/// The server's major version: the read-back of an interval depends on it (PostgreSQL 17's
/// infinities).
static MAJOR: OnceLock<u32> = OnceLock::new();

/// A column's type as the catalog describes it: what the read-back rules of
/// spec/row-images.md §4 depend on (a shape) and the name to cast to.
#[derive(Clone, Debug)]
enum Ty {
    /// A base type or an enum: `rule` is its `typname` (`"enum"` for an enum), `send` its
    /// send function (for a type outside the mapping).
    Scalar {
        rule: String,
        name: String,
        send: String,
    },
    Array {
        name: String,
        elem: Box<Ty>,
    },
    Range {
        name: String,
        sub: Box<Ty>,
    },
    Multirange {
        name: String,
        range: Box<Ty>,
    },
    Composite {
        name: String,
        attrs: Vec<Ty>,
    },
    Domain {
        name: String,
        base: Box<Ty>,
    },
}

/// The type `oid` with modifier `typmod` (the name carries it), from the catalog.
fn describe(db: &Psql, oid: &str, typmod: &str) -> Ty {
    let row = one(
        db,
        &format!(
            "SELECT t.typtype, t.typcategory, t.typname, pg_catalog.format_type(t.oid, {typmod}), \
                    t.typelem, t.typbasetype, t.typtypmod, t.typrelid, \
                    coalesce(r.rngsubtype, 0), coalesce(m.rngtypid, 0), t.typsend::text \
             FROM pg_catalog.pg_type t \
             LEFT JOIN pg_catalog.pg_range r ON r.rngtypid = t.oid \
             LEFT JOIN pg_catalog.pg_range m ON m.rngmultitypid = t.oid \
             WHERE t.oid = {oid};"
        ),
    );
    let f: Vec<&str> = row.split('|').collect();
    assert_eq!(f.len(), 11, "type {oid}: {row}");
    let name = f[3].to_string();
    match (f[0], f[1]) {
        ("d", _) => Ty::Domain {
            name,
            base: Box::new(describe(db, f[5], f[6])),
        },
        ("c", _) => {
            let attrs = db
                .run(&format!(
                    "SELECT atttypid, atttypmod FROM pg_catalog.pg_attribute \
                     WHERE attrelid = {} AND attnum > 0 AND NOT attisdropped ORDER BY attnum;",
                    f[7]
                ))
                .unwrap();
            let attrs = attrs
                .lines()
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let (oid, typmod) = l.split_once('|').unwrap();
                    describe(db, oid, typmod)
                })
                .collect();
            Ty::Composite { name, attrs }
        }
        ("r", _) => Ty::Range {
            name,
            sub: Box::new(describe(db, f[8], "-1")),
        },
        ("m", _) => Ty::Multirange {
            name,
            range: Box::new(describe(db, f[9], "-1")),
        },
        ("b", "A") if f[4] != "0" => Ty::Array {
            name,
            elem: Box::new(describe(db, f[4], "-1")),
        },
        ("e", _) => Ty::Scalar {
            rule: "enum".into(),
            name,
            send: f[10].into(),
        },
        _ => Ty::Scalar {
            rule: f[2].into(),
            name,
            send: f[10].into(),
        },
    }
}

/// The columns of table `table` and their types, in order.
fn columns_of(db: &Psql, table: &str) -> Vec<(String, Ty)> {
    let rows = db
        .run(&format!(
            "SELECT attname, atttypid, atttypmod FROM pg_catalog.pg_attribute \
             WHERE attrelid = {}::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum;",
            quote(table)
        ))
        .unwrap();
    rows.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f[0].to_string(), describe(db, f[1], f[2]))
        })
        .collect()
}

/// Whether the mapping covers a type: the shapes of spec/row-images.md §4 (else the value is
/// its send form, §3).
fn mapped(ty: &Ty) -> bool {
    match ty {
        Ty::Scalar { rule, .. } => matches!(
            rule.as_str(),
            "bool"
                | "int2"
                | "int4"
                | "oid"
                | "int8"
                | "float4"
                | "float8"
                | "numeric"
                | "text"
                | "varchar"
                | "bpchar"
                | "enum"
                | "bytea"
                | "row_id"
                | "uuid"
                | "date"
                | "time"
                | "timetz"
                | "timestamp"
                | "timestamptz"
                | "interval"
                | "inet"
                | "cidr"
                | "macaddr"
                | "macaddr8"
                | "bit"
                | "varbit"
                | "jsonb"
        ),
        Ty::Array { elem, .. } => mapped(elem),
        Ty::Range { sub, .. } => mapped(sub),
        Ty::Multirange { range, .. } => mapped(range),
        Ty::Composite { attrs, .. } => attrs.iter().all(mapped),
        Ty::Domain { base, .. } => mapped(base),
    }
}

/// The spec's read-back of the image JSON `raw` of a value of type `ty`, as a SQL expression
/// (spec/row-images.md §4). Leaves are read from their own text (a float's digits as
/// written).
fn read_back(raw: &str, ty: &Ty) -> String {
    let v: Value = serde_json::from_str(raw).unwrap();
    let name = match ty {
        Ty::Scalar { name, .. }
        | Ty::Array { name, .. }
        | Ty::Range { name, .. }
        | Ty::Multirange { name, .. }
        | Ty::Composite { name, .. }
        | Ty::Domain { name, .. } => name,
    };
    if v.is_null() {
        return format!("NULL::{name}");
    }
    match ty {
        Ty::Scalar { rule, .. } => scalar(raw, &v, rule, name),
        Ty::Array { elem, .. } => array(raw, elem, name),
        Ty::Range { sub, .. } => range(raw, sub, name),
        Ty::Multirange { range: r, .. } => {
            let ranges: Vec<Box<RawValue>> = serde_json::from_str(raw).unwrap();
            let ranges: Vec<String> = ranges
                .iter()
                .map(|x| range(x.get(), r_sub(r), r_name(r)))
                .collect();
            format!("{name}({})", ranges.join(", "))
        }
        Ty::Composite { attrs, .. } => {
            let values: Vec<Box<RawValue>> = serde_json::from_str(raw).unwrap();
            assert_eq!(values.len(), attrs.len(), "{name}: {raw}");
            let values: Vec<String> = values
                .iter()
                .zip(attrs)
                .map(|(x, t)| read_back(x.get(), t))
                .collect();
            format!("ROW({})::{name}", values.join(", "))
        }
        // A domain has its base type's shape.
        Ty::Domain { base, .. } => format!("({})::{name}", read_back(raw, base)),
    }
}

fn r_sub(range: &Ty) -> &Ty {
    match range {
        Ty::Range { sub, .. } => sub,
        other => panic!("not a range: {other:?}"),
    }
}

fn r_name(range: &Ty) -> &str {
    match range {
        Ty::Range { name, .. } => name,
        other => panic!("not a range: {other:?}"),
    }
}

/// The scalar rules, by the type's `typname`.
fn scalar(raw: &str, v: &Value, rule: &str, name: &str) -> String {
    let s = v.as_str().map(str::to_string);
    let cast = |text: &str| format!("{}::{name}", quote(text));
    match rule {
        "bool" | "int2" | "int4" | "oid" => format!("({raw})::{name}"),
        "int8" | "numeric" | "text" | "varchar" | "bpchar" | "enum" | "uuid" | "time"
        | "timetz" | "inet" | "cidr" | "macaddr" | "macaddr8" => cast(&s.unwrap()),
        // The string's content: jsonb's own text.
        "jsonb" => cast(&s.unwrap_or_else(|| panic!("jsonb is a string: {raw}"))),
        // A number's own text, or the strings NaN, Infinity, -Infinity.
        "float4" | "float8" => cast(&s.unwrap_or_else(|| raw.to_string())),
        "bytea" => format!("decode({}, 'hex')", quote(&s.unwrap())),
        "row_id" => format!("decode({}, 'hex')::{name}", quote(&s.unwrap())),
        "bit" | "varbit" => format!("B{}::{name}", quote(&s.unwrap())),
        "date" | "timestamp" | "timestamptz" => cast(&date_time(&s.unwrap())),
        "interval" => interval(v),
        other => panic!("no read-back rule for {other} ({name}): {raw}"),
    }
}

/// `make_interval` of the months and days, the whole hours in two halves (each fits its int
/// argument), the rest as microseconds; PostgreSQL 17's two reserved triples are its
/// infinities.
fn interval(v: &Value) -> String {
    let months = v["months"].as_i64().unwrap();
    let days = v["days"].as_i64().unwrap();
    let micros: i64 = v["microseconds"].as_str().unwrap().parse().unwrap();
    let min = (i64::from(i32::MIN), i64::from(i32::MIN), i64::MIN);
    let max = (i64::from(i32::MAX), i64::from(i32::MAX), i64::MAX);
    if MAJOR.get().is_some_and(|&m| m >= 17) {
        if (months, days, micros) == min {
            return "'-infinity'::interval".into();
        }
        if (months, days, micros) == max {
            return "'infinity'::interval".into();
        }
    }
    let hours = micros / 3_600_000_000;
    let rest = micros - hours * 3_600_000_000;
    let (h1, h2) = (hours / 2, hours - hours / 2);
    format!(
        "(pg_catalog.make_interval(months => {months}, days => {days}) \
         + pg_catalog.make_interval(hours => {h1}) + pg_catalog.make_interval(hours => {h2}) \
         + {rest} * interval '1 microsecond')"
    )
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

fn range(raw: &str, sub: &Ty, name: &str) -> String {
    let v: BTreeMap<String, Box<RawValue>> = serde_json::from_str(raw).unwrap();
    if v.contains_key("empty") {
        return format!("'empty'::{name}");
    }
    let inclusive = |k: &str| v[k].get() == "true";
    format!(
        "{name}({}, {}, '{}{}')",
        read_back(v["lower"].get(), sub),
        read_back(v["upper"].get(), sub),
        if inclusive("lower_inc") { '[' } else { '(' },
        if inclusive("upper_inc") { ']' } else { ')' }
    )
}

/// An array's JSON as `ARRAY[...]`; with `lower_bounds`, that many levels are dimensions
/// and bounds other than 1 are put back through the text form.
fn array(raw: &str, elem: &Ty, name: &str) -> String {
    let members: Option<BTreeMap<String, Box<RawValue>>> = serde_json::from_str(raw).ok();
    let (lower, values): (Option<Vec<i64>>, String) = match members {
        Some(m) => (
            Some(serde_json::from_str(m["lower_bounds"].get()).unwrap()),
            m["values"].get().to_string(),
        ),
        None => (None, raw.to_string()),
    };
    let shape: Value = serde_json::from_str(&values).unwrap();
    if shape.as_array().unwrap().is_empty() {
        return format!("'{{}}'::{name}");
    }
    // Plain nesting holds no element that is a JSON array: every array level is a dimension.
    let ndims = match &lower {
        Some(l) => l.len(),
        None => {
            let mut n = 0;
            let mut at = &shape;
            while let Some(items) = at.as_array() {
                n += 1;
                at = &items[0];
            }
            n
        }
    };
    fn nest(raw: &str, elem: &Ty, levels: usize) -> String {
        if levels == 0 {
            return read_back(raw, elem);
        }
        let items: Vec<Box<RawValue>> = serde_json::from_str(raw).unwrap();
        let items: Vec<String> = items
            .iter()
            .map(|i| nest(i.get(), elem, levels - 1))
            .collect();
        format!("ARRAY[{}]", items.join(", "))
    }
    let plain = format!("{}::{name}", nest(&values, elem, ndims));
    let Some(lower) = lower.filter(|l| l.iter().any(|&b| b != 1)) else {
        return plain;
    };
    let mut lengths = Vec::new();
    let mut at = &shape;
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
        "({} || ({plain})::text)::{name}",
        quote(&format!("{prefix}="))
    )
}

/// A SQL expression that is NULL when the image `image` reads back to `table`'s row whose
/// `key` is `id` (every column's value, and its text output), else says what differs. An
/// image that lacks a column, or a row the table lacks, is a difference too.
fn check(table: &str, columns: &[(String, Ty)], key: &str, id: &str, image: &Image) -> String {
    let mut checks = Vec::new();
    for (name, ty) in columns {
        let check = match image.get(name) {
            None => format!("'{name} is absent'"),
            Some(raw) if !mapped(ty) => {
                // Outside the mapping: the type's name and its send form.
                let v: Value = serde_json::from_str(raw.get()).unwrap();
                let Ty::Scalar { send, .. } = ty else {
                    panic!("{name}: no send form for {ty:?}");
                };
                if v.is_null() {
                    format!("CASE WHEN b.{name} IS NULL THEN NULL ELSE '{name}' END")
                } else {
                    format!(
                        "CASE WHEN {} = pg_typeof(b.{name})::text \
                           AND encode({send}(b.{name}), 'hex') = {} \
                         THEN NULL ELSE '{name}: send form' END",
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
                       || coalesce(({e})::text, 'NULL') || ' from ' || {} END",
                    quote(raw.get())
                )
            }
        };
        checks.push(check);
    }
    // One line per image: a line break in a value is written as `\n`.
    format!(
        "SELECT replace(coalesce((SELECT nullif(concat_ws('; ', {}), '') FROM {table} b \
         WHERE b.{key} = {id}), CASE WHEN NOT EXISTS (SELECT FROM {table} b WHERE b.{key} = {id}) \
         THEN 'no row {id}' END), E'\\n', '\\n');",
        checks.join(", ")
    )
}

/// The differences of the images of `table` (keyed by `key`), one line each with `what`.
fn mismatches(db: &Psql, table: &str, key: &str, images: &[(String, &Image)]) -> Vec<String> {
    let columns = columns_of(db, table);
    let mut script = String::new();
    for (_, image) in images {
        script.push_str(&check(table, &columns, key, image[key].get(), image));
        script.push('\n');
    }
    let out = db
        .run(&script)
        .unwrap_or_else(|e| panic!("{table}: a read-back is not valid SQL: {e}"));
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(rows.len(), images.len(), "{table}: one row per image");
    rows.iter()
        .zip(images)
        .filter(|(r, _)| !r.is_empty())
        .map(|(r, (what, _))| format!("{table}, {what}: {r}"))
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

/// The server's major version.
fn server_major(db: &Psql) -> u32 {
    one(db, "SHOW server_version_num;").parse::<u32>().unwrap() / 10_000
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
    MAJOR.get_or_init(|| server_major(&db));
    let mut failures = Vec::new();
    // Rows 1 and 2 as they were inserted are in `before`; row 3 after its update in both.
    let inserted: Vec<(String, &Image)> = (0..2)
        .map(|i| (format!("insert line {i}"), lines[i].new.as_ref().unwrap()))
        .collect();
    failures.extend(mismatches(&db, "before", "id", &inserted));
    // Row 3 was inserted with NULLs everywhere but its id.
    let nulls = lines[2].new.as_ref().unwrap();
    assert_eq!(nulls.len(), COLUMNS.len(), "every column, NULL included");
    assert!(nulls.iter().all(|(k, v)| k == "id" || v.get() == "null"));
    let now = [
        (
            "update of 3, new".to_string(),
            lines[3].new.as_ref().unwrap(),
        ),
        (
            "update of 1, new".to_string(),
            lines[4].new.as_ref().unwrap(),
        ),
    ];
    failures.extend(mismatches(&db, "every", "id", &now));
    let old = [
        (
            "update of 1, old".to_string(),
            lines[4].old.as_ref().unwrap(),
        ),
        (
            "delete of 2, old".to_string(),
            lines[5].old.as_ref().unwrap(),
        ),
    ];
    failures.extend(mismatches(&db, "before", "id", &old));
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

/// Values per scalar type from the generator of the codec's server oracle.
const GENERATED: usize = 120;

/// SQL expressions of the values of one column type: the generated ones of every scalar type
/// (`tests/server_oracle.rs`'s generator, each interval in one of its three spellings).
fn generated_values() -> Vec<String> {
    let mut runner = TestRunner::deterministic();
    let mut values = Vec::new();
    for tag in scalar_tags() {
        for i in 0..GENERATED {
            let v = representable(&input(tag).new_tree(&mut runner).unwrap().current());
            values.push(literal(&v, (i % 3) as u8));
        }
    }
    values
}

/// The single-field vectors' SQL (`vectors/*.json`: the regression values of the codec and
/// of the vectors' server test, structural ones included) and the setup they need; those
/// flagged `pg17` only from PostgreSQL 17.
fn vector_values(major: u32) -> (Vec<String>, Vec<String>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../vectors");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let (mut setup, mut values) = (Vec::new(), Vec::new());
    for path in files {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for s in doc["setup"].as_array().unwrap() {
            let s = s.as_str().unwrap().to_string();
            if !setup.contains(&s) {
                setup.push(s);
            }
        }
        for v in doc["vectors"].as_array().unwrap() {
            let Some([field]) = v["fields"].as_array().map(Vec::as_slice) else {
                continue;
            };
            let Some(sql) = field["sql"].as_str() else {
                continue;
            };
            let newer = v["flags"].as_array().unwrap().iter().any(|f| f == "pg17");
            if !newer || major >= 17 {
                values.push(sql.to_string());
            }
        }
    }
    (setup, values)
}

/// Edge values: every field's limits where the generators do not reach them, and the values
/// a JSON form could confuse (jsonb's `null` and SQL NULL, in arrays and composites too).
fn edge_values(major: u32) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    // Every combination of the interval fields' limits and the hour boundaries (a triple
    // PostgreSQL 17 reserves is read as its infinity there).
    let months = [i32::MIN, -1, 0, 1, i32::MAX];
    let micros = [
        i64::MIN,
        i64::MIN + 1,
        -3_600_000_000,
        -1,
        0,
        1,
        3_599_999_999,
        7_200_000_000,
        i64::MAX - 1,
        i64::MAX,
    ];
    for m in months {
        for d in months {
            for us in micros {
                let sign = if us < 0 { "-" } else { "" };
                let a = us.unsigned_abs();
                v.push(format!(
                    "'{m} mons {d} days {sign}{}.{:06} seconds'::interval",
                    a / 1_000_000,
                    a % 1_000_000
                ));
            }
        }
    }
    if major >= 17 {
        v.extend([
            "'infinity'::interval".into(),
            "'-infinity'::interval".into(),
        ]);
    }
    let literals = [
        // Calendar limits.
        "'4713-01-01 BC'::date",
        "'5874897-12-31'::date",
        "'0001-12-31 BC'::date",
        "'0001-01-01'::date",
        "'infinity'::date",
        "'-infinity'::date",
        "'4713-01-01 00:00:00 BC'::timestamp",
        "'294276-12-31 23:59:59.999999'::timestamp",
        "'-infinity'::timestamp",
        "'4713-01-01 00:00:00+00 BC'::timestamptz",
        "'294276-12-31 23:59:59.999999+00'::timestamptz",
        "'infinity'::timestamptz",
        "'24:00:00'::time",
        "'23:59:59.999999'::time",
        "'24:00:00+15:59:59'::timetz",
        "'00:00:00-15:59:59'::timetz",
        "'12:34:56.789-05:30'::timetz",
        // Numbers.
        "'NaN'::numeric",
        "'Infinity'::numeric",
        "'-Infinity'::numeric",
        "'-0.000'::numeric",
        "'0.000000000000000000001'::numeric",
        "'123456789012345678901234567890.000000000000001'::numeric",
        "'-1.5e-10'::numeric",
        "'1e100'::numeric",
        "'3.4028235e38'::float4",
        "'1.4e-45'::float4",
        "'-1.1754944e-38'::float4",
        "'-0'::float4",
        "'1.7976931348623157e308'::float8",
        "'5e-324'::float8",
        "'2.2250738585072014e-308'::float8",
        "'-0'::float8",
        "'4294967295'::oid",
        // Text.
        "E'\\x01\\x1f tab\\t quote\" back\\\\ é 😀'::text",
        "''::text",
        "'ab   '::bpchar",
        "''::bpchar",
        "'\\x'::bytea",
        // jsonb: its null against SQL NULL, equal numbers of other scales, strings.
        "'null'::jsonb",
        "'\"null\"'::jsonb",
        "'1.0'::jsonb",
        "'1.00'::jsonb",
        "'-0'::jsonb",
        "'1e-7'::jsonb",
        "'\"\"'::jsonb",
        "'[null, \"null\"]'::jsonb",
        "'{\"a\": null, \"b\": \"\\u0001\\n\\\"\\\\\"}'::jsonb",
        "'[[], {}]'::jsonb",
        "'{\"a\": {\"b\": [1.10, 2e3]}}'::jsonb",
        "'\"😀\"'::jsonb",
        "'123456789012345678901234567890.5'::jsonb",
        "ARRAY['null'::jsonb, NULL]",
        "ARRAY[NULL::jsonb]",
        "'{}'::jsonb[]",
        "ARRAY[ARRAY['1'::jsonb, 'null'::jsonb], ARRAY['\"x\"'::jsonb, '{}'::jsonb]]",
        "'[0:1]={\"null\",NULL}'::jsonb[]",
        "ROW('null'::jsonb, NULL)::jpair",
        "ROW(NULL, NULL)::jpair",
        "ROW('{\"a\": null}'::jsonb, 'x')::jpair",
        "ARRAY[ROW('null'::jsonb, 'a')::jpair, NULL]",
        // Structures at their limits.
        "int4range(NULL, NULL)",
        "int8range(-9223372036854775808, 9223372036854775807)",
        "daterange('-infinity', 'infinity', '[]')",
        "tstzrange('-infinity', NULL)",
        "numrange('-Infinity', 'Infinity', '()')",
        "'{}'::int4multirange",
        "nummultirange(numrange(NULL, 1), numrange(2, NULL))",
        "'[-5:-4]={1,2}'::int4[]",
        "'[2:3][0:0]={{a},{b}}'::text[]",
        "ARRAY['[1,2)'::int4range, 'empty']",
        "ARRAY['1 mon'::interval, NULL]",
        "ARRAY[ARRAY['2026-12-05 10:00:00+00'::timestamptz], ARRAY['infinity'::timestamptz]]",
        "ARRAY['a'::oracle_enum, NULL]",
        "pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(1, 'x'::text))::pgtrickle.row_id",
    ];
    v.extend(literals.iter().map(|s| s.to_string()));
    v
}

/// Every value of the codec's server oracle, the vectors and the edges above, in a table of
/// its type (one per type), through both capture paths: the snapshot's binary COPY and the
/// stream's pgoutput. Every image reads back by the spec's rules to its row: the value and
/// its text output. 0 differences.
#[test]
#[ignore = "needs a PostgreSQL server with wal_level=logical and the extension: run through `cargo xtask test`"]
fn generated_values_read_back_exactly() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let db = database("rowid_cdc_image_values", "imgval");
    let major = server_major(&db);
    MAJOR.get_or_init(|| major);
    let (vector_setup, vectors) = vector_values(major);
    let mut setup = format!(
        "CREATE EXTENSION pg_trickle_ext;
         SELECT pgtrickle.enable_identity_messages();
         {}
         CREATE TYPE jpair AS (j jsonb, t text);\n",
        enum_type_ddl()
    );
    for s in &vector_setup {
        setup.push_str(s);
        setup.push_str(";\n");
    }
    db.run(&setup).unwrap();
    let mut values = generated_values();
    let generated = values.len();
    values.extend(vectors);
    values.extend(edge_values(major));
    // Each value's column type, as the server types it: `character` without a length would
    // be char(1), so it is `bpchar`; a `bit` column has the value's length (a bit string of
    // length 0 cannot be stored in one: it is left out, `varbit` has it).
    let mut typing = String::new();
    for v in &values {
        typing.push_str(&format!(
            "SELECT CASE WHEN pg_typeof(x) = 'bit'::regtype THEN 'bit(' || length(x::text) || ')' \
                    WHEN pg_typeof(x) = 'bpchar'::regtype THEN 'bpchar' \
                    ELSE pg_catalog.format_type(pg_typeof(x), NULL) END FROM (SELECT {v} AS x) s;\n"
        ));
    }
    let types = db.run(&typing).unwrap();
    let types: Vec<&str> = types.lines().collect();
    assert_eq!(types.len(), values.len());
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (v, ty) in values.iter().zip(&types) {
        if *ty != "bit(0)" {
            tables.entry(ty.to_string()).or_default().push(v.clone());
        }
    }
    let mut fill = String::new();
    let mut names = BTreeMap::new();
    let mut rows = 0;
    for (i, (ty, vs)) in tables.iter().enumerate() {
        let table = format!("v_{i}");
        fill.push_str(&format!(
            "CREATE TABLE {table} (n int PRIMARY KEY, v {ty});\n\
             INSERT INTO {table} VALUES (0, NULL);\n"
        ));
        for (n, v) in vs.iter().enumerate() {
            fill.push_str(&format!("INSERT INTO {table} VALUES ({}, {v});\n", n + 1));
        }
        rows += vs.len() + 1;
        names.insert(format!("public.{table}"), (table, vs.len() + 1));
    }
    fill.push_str("CREATE PUBLICATION imgval FOR ALL TABLES;");
    db.run(&fill).unwrap();
    let _drop_slot = DropSlot(&db, "imgval");
    let dir = Dir::new("image-values");
    let cdc = Cdc {
        dsn: db.dsn(),
        slot: "imgval",
        publication: "imgval",
        dir: &dir,
    };
    let mut running = cdc.spawn(&["--create-slot", "--snapshot"]);
    cdc.wait_snapshot_copied(&mut running);
    // The same values again through the stream.
    let copies: String = names
        .values()
        .map(|(t, _)| format!("INSERT INTO {t} SELECT n + 1000000, v FROM {t};\n"))
        .collect();
    db.run(&format!("BEGIN;\n{copies}COMMIT;")).unwrap();
    // The copy under the slot's snapshot, then the stream's inserts.
    let all = cdc.wait_lines(2 * rows);
    let text = std::fs::read_to_string(cdc.dir.file("changes.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), all.len());
    let mut per_table: BTreeMap<&str, Vec<(String, Image)>> = BTreeMap::new();
    for (raw, line) in lines.iter().zip(&all) {
        assert_eq!(line["image_format"], 2, "{raw}");
        let op = line["op"].as_str().unwrap();
        assert!(matches!(op, "snapshot" | "insert"), "{raw}");
        let relation = line["relation"].as_str().unwrap();
        let members: BTreeMap<String, Box<RawValue>> = serde_json::from_str(raw).unwrap();
        let image: Image = serde_json::from_str(members["new"].get()).unwrap();
        per_table
            .entry(&names[relation].0)
            .or_default()
            .push((format!("{op} line"), image));
    }
    let mut failures = Vec::new();
    let mut images = 0;
    for (table, want) in names.values() {
        let got = &per_table[table.as_str()];
        assert_eq!(
            got.len(),
            2 * want,
            "{table}: a snapshot row and an insert per row"
        );
        let refs: Vec<(String, &Image)> = got.iter().map(|(w, i)| (w.clone(), i)).collect();
        failures.extend(mismatches(&db, table, "n", &refs));
        images += got.len();
    }
    eprintln!(
        "{} values ({generated} generated) of {} column types on PostgreSQL {major}: \
         {images} images, {} differences",
        rows - names.len(),
        names.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
