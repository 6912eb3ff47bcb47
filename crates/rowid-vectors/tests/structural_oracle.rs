//! The structural families against a real PostgreSQL server with the extension installed.
//!
//! For each family, generated pairs of SQL values (a third of them the same value spelt
//! differently: `1.0` / `1.00`, `[1,3]` / `[1,4)`, reordered and duplicated jsonb keys) are
//! compared by the server's default B-tree operators and encoded by
//! `pgtrickle.encode_row_id_v2`. Byte equality must agree with the server's `=` on every pair,
//! and byte order with its `<`/`>` wherever the registry claims order. Every identity the
//! server returns must also decode strictly and re-encode to itself.
//!
//! Needs a server with `pg_trickle_ext`: `cargo xtask test` runs this with `--ignored` on
//! every supported major, passing psql arguments in `ROWID_ORACLE_PSQL_ARGS`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cmp::Ordering;

use rowid_testkit::hex::from_hex;
use rowid_testkit::psql::Psql;
use rowid_testkit::rng::Rng;
use rowid_testkit::sql::quote as sql_quote;

/// Pairs per family and major.
const PAIRS: usize = 1_500;

/// A semantic value, rendered to SQL text with randomly chosen spellings, so that a value
/// and its copy render differently but must compare (and encode) equal.
#[derive(Clone, Debug)]
enum Sem {
    Null,
    /// An int4 / int8 / date offset.
    Int(i64),
    /// A numeric: index into `NUMERIC_SPELLINGS`.
    Num(usize),
    /// A text element: index into `TEXTS`.
    Text(usize),
    /// Array with (length, lower bound) per dimension and row-major elements.
    Array(Vec<(i32, i32)>, Vec<Sem>),
    /// Range: `None` empty; else lower and upper bound.
    Range(Option<(SemBound, SemBound)>),
    /// Multirange of ranges.
    Multi(Vec<Sem>),
    /// jsonb value.
    Json(Json),
    /// Composite fields.
    Row(Vec<Sem>),
}

/// A range bound: `(value, inclusive)`, `None` = infinite.
type SemBound = Option<(Box<Sem>, bool)>;

#[derive(Clone, Debug)]
enum Json {
    Null,
    Bool(bool),
    Num(usize),
    Str(usize),
    Arr(Vec<Json>),
    Obj(Vec<(usize, Json)>),
}

/// Spellings of each numeric value; every inner list is one value.
const NUMERIC_SPELLINGS: &[&[&str]] = &[
    &["0", "0.0", "-0", "0.000"],
    &["1", "1.0", "1.00", "1e0"],
    &["-1", "-1.0", "-1.000"],
    &["2", "2.0", "2.00"],
    &["1.5", "1.50", "15e-1"],
    &["10000", "1e4", "10000.0"],
    &["0.0001", "1e-4", "0.00010"],
    &[
        "-123456789012345678901234567890",
        "-123456789012345678901234567890.0",
    ],
];
/// Numerics only allowed outside jsonb.
const NUMERIC_SPECIAL: &[&str] = &["NaN", "Infinity", "-Infinity"];
const TEXTS: &[&str] = &[
    "",
    "a",
    "ab",
    "b",
    "A",
    "é",
    "a b",
    "\u{1F600}",
    "a\"b",
    "z",
];
const JSON_KEYS: &[&str] = &["a", "b", "aa", "", "ab", "é"];

fn quote_array_text(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn num_spelling(rng: &mut Rng, i: usize) -> String {
    if i < NUMERIC_SPELLINGS.len() {
        rng.pick(NUMERIC_SPELLINGS[i]).to_string()
    } else {
        NUMERIC_SPECIAL[i - NUMERIC_SPELLINGS.len()].to_string()
    }
}

/// Numeric value for sorting range bounds (specials sort as PostgreSQL does).
fn num_value(i: usize) -> f64 {
    match i {
        0 => 0.0,
        1 => 1.0,
        2 => -1.0,
        3 => 2.0,
        4 => 1.5,
        5 => 10000.0,
        6 => 0.0001,
        7 => -1.2e29,
        8 => f64::MAX, // NaN sorts above +Infinity
        9 => f64::MAX / 2.0,
        _ => f64::MIN,
    }
}

/// Draws a semantic value.
type Generate = Box<dyn Fn(&mut Rng) -> Sem>;
/// Renders a semantic value as SQL, choosing spellings at random.
type Render = Box<dyn Fn(&mut Rng, &Sem) -> String>;

/// One family: SQL type, how to generate a semantic value, how to render it, whether the
/// registry claims order, and an optional COLLATE for the comparison.
struct Family {
    name: &'static str,
    gen_fn: Generate,
    render: Render,
    order: bool,
    collate: &'static str,
}

// ---------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------

fn gen_array(rng: &mut Rng, element: fn(&mut Rng) -> Sem) -> Sem {
    let ndims = *rng.pick(&[0usize, 1, 1, 1, 2]);
    let dims: Vec<(i32, i32)> = (0..ndims)
        .map(|_| (1 + rng.below(3) as i32, *rng.pick(&[1, 1, 0, -1, 2])))
        .collect();
    let n: i32 = dims.iter().map(|d| d.0).product();
    let n = if ndims == 0 { 0 } else { n };
    let elements = (0..n)
        .map(|_| {
            if rng.chance(15) {
                Sem::Null
            } else {
                element(rng)
            }
        })
        .collect();
    Sem::Array(dims, elements)
}

fn gen_int_small(rng: &mut Rng) -> Sem {
    Sem::Int(rng.below(5) as i64 - 2)
}

fn gen_num(rng: &mut Rng) -> Sem {
    Sem::Num(rng.below(NUMERIC_SPELLINGS.len() + NUMERIC_SPECIAL.len()))
}

fn gen_num_finite(rng: &mut Rng) -> Sem {
    Sem::Num(rng.below(NUMERIC_SPELLINGS.len()))
}

fn gen_text(rng: &mut Rng) -> Sem {
    Sem::Text(rng.below(TEXTS.len()))
}

/// A range whose finite bounds come from `bound`, ordered by `key`.
fn gen_range(rng: &mut Rng, bound: fn(&mut Rng) -> Sem, key: fn(&Sem) -> f64) -> Sem {
    if rng.chance(10) {
        return Sem::Range(None);
    }
    let mut a = bound(rng);
    let mut b = bound(rng);
    if key(&a) > key(&b) {
        std::mem::swap(&mut a, &mut b);
    }
    let lower = (!rng.chance(15)).then(|| (Box::new(a), rng.chance(50)));
    let upper = (!rng.chance(15)).then(|| (Box::new(b), rng.chance(50)));
    // Equal bounds must both be inclusive unless the range is to be empty; PostgreSQL
    // makes it empty, which is valid input.
    Sem::Range(Some((lower, upper)))
}

fn int_key(s: &Sem) -> f64 {
    match s {
        Sem::Int(v) => *v as f64,
        _ => 0.0,
    }
}

fn num_key(s: &Sem) -> f64 {
    match s {
        Sem::Num(i) => num_value(*i),
        _ => 0.0,
    }
}

fn gen_int_range(rng: &mut Rng) -> Sem {
    gen_range(rng, |r| Sem::Int(r.below(6) as i64 - 2), int_key)
}

fn gen_num_range(rng: &mut Rng) -> Sem {
    gen_range(rng, gen_num_finite, num_key)
}

fn gen_date_range(rng: &mut Rng) -> Sem {
    gen_range(rng, |r| Sem::Int(r.below(6) as i64), int_key)
}

fn gen_multi(rng: &mut Rng, range: fn(&mut Rng) -> Sem) -> Sem {
    let n = rng.below(4);
    Sem::Multi((0..n).map(|_| range(rng)).collect())
}

fn gen_json(rng: &mut Rng, depth: u32) -> Json {
    let k = if depth >= 3 {
        rng.below(4)
    } else {
        rng.below(6)
    };
    match k {
        0 => Json::Null,
        1 => Json::Bool(rng.chance(50)),
        2 => Json::Num(rng.below(NUMERIC_SPELLINGS.len())),
        3 => Json::Str(rng.below(TEXTS.len())),
        4 => Json::Arr(
            (0..rng.below(3))
                .map(|_| gen_json(rng, depth + 1))
                .collect(),
        ),
        _ => {
            // Unique keys: duplicates are added when rendering (the last one wins).
            let mut keys: Vec<usize> = (0..JSON_KEYS.len()).collect();
            let n = rng.below(4);
            let mut pairs = Vec::new();
            for _ in 0..n {
                let i = rng.below(keys.len());
                pairs.push((keys.remove(i), gen_json(rng, depth + 1)));
            }
            Json::Obj(pairs)
        }
    }
}

fn gen_rec(rng: &mut Rng) -> Sem {
    let f = |g: fn(&mut Rng) -> Sem, rng: &mut Rng| {
        if rng.chance(20) { Sem::Null } else { g(rng) }
    };
    Sem::Row(vec![
        f(gen_int_small, rng),
        f(gen_text, rng),
        f(gen_num, rng),
    ])
}

fn gen_nest(rng: &mut Rng) -> Sem {
    let a = if rng.chance(20) {
        Sem::Null
    } else {
        gen_array(rng, gen_int_small)
    };
    let r = if rng.chance(20) {
        Sem::Null
    } else {
        gen_int_range(rng)
    };
    let p = if rng.chance(20) {
        Sem::Null
    } else {
        gen_rec(rng)
    };
    Sem::Row(vec![a, r, p])
}

// ---------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------

/// Text of one array element (inside an array literal).
fn array_element_text(rng: &mut Rng, s: &Sem) -> String {
    match s {
        Sem::Null => "NULL".into(),
        Sem::Int(v) => v.to_string(),
        Sem::Num(i) => num_spelling(rng, *i),
        Sem::Text(i) => quote_array_text(TEXTS[*i]),
        other => panic!("not an array-literal element: {other:?}"),
    }
}

fn array_literal(rng: &mut Rng, s: &Sem, ty: &str) -> String {
    let Sem::Array(dims, elements) = s else {
        panic!("not an array")
    };
    if dims.is_empty() {
        return format!("'{{}}'::{ty}");
    }
    let mut bounds = String::new();
    for (len, lower) in dims {
        bounds.push_str(&format!("[{lower}:{}]", lower + len - 1));
    }
    let items: Vec<String> = elements
        .iter()
        .map(|e| array_element_text(rng, e))
        .collect();
    let body = nest_items(&items, dims);
    // Omitting the default bounds sometimes exercises both spellings of lower bound 1.
    let prefix = if dims.iter().all(|d| d.1 == 1) && rng.chance(50) {
        String::new()
    } else {
        format!("{bounds}=")
    };
    format!("{}::{ty}", sql_quote(&format!("{prefix}{body}")))
}

fn nest_items(items: &[String], dims: &[(i32, i32)]) -> String {
    if dims.len() == 1 {
        return format!("{{{}}}", items.join(","));
    }
    let inner: usize = dims[1..].iter().map(|d| d.0 as usize).product();
    let parts: Vec<String> = items
        .chunks(inner)
        .map(|c| nest_items(c, &dims[1..]))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// A range literal's text, with discrete bounds respelt (`[1,3]` as `[1,4)`).
fn range_text(
    rng: &mut Rng,
    s: &Sem,
    discrete: bool,
    scalar: fn(&mut Rng, &Sem) -> String,
) -> String {
    let Sem::Range(r) = s else {
        panic!("not a range")
    };
    let Some((lower, upper)) = r else {
        return "empty".into();
    };
    let lower_text = match lower {
        None => "(".to_string(),
        Some((v, inclusive)) => {
            let (v, inclusive) = respell(rng, v, *inclusive, discrete, true);
            format!("{}{}", if inclusive { "[" } else { "(" }, scalar(rng, &v))
        }
    };
    let upper_text = match upper {
        None => ")".to_string(),
        Some((v, inclusive)) => {
            let (v, inclusive) = respell(rng, v, *inclusive, discrete, false);
            format!("{}{}", scalar(rng, &v), if inclusive { "]" } else { ")" })
        }
    };
    format!("{lower_text},{upper_text}")
}

/// `v]` is `v+1)` for a discrete subtype. (Lower bounds are not respelt: `(1,1]` is a valid
/// empty range but `[2,1]` is an error.)
fn respell(rng: &mut Rng, v: &Sem, inclusive: bool, discrete: bool, lower: bool) -> (Sem, bool) {
    match v {
        Sem::Int(x) if discrete && !lower && inclusive && rng.chance(50) => {
            (Sem::Int(x + 1), false)
        }
        _ => (v.clone(), inclusive),
    }
}

fn int_text(_: &mut Rng, s: &Sem) -> String {
    match s {
        Sem::Int(v) => v.to_string(),
        other => panic!("{other:?}"),
    }
}

fn num_text(rng: &mut Rng, s: &Sem) -> String {
    match s {
        Sem::Num(i) => num_spelling(rng, *i),
        other => panic!("{other:?}"),
    }
}

fn date_text(_: &mut Rng, s: &Sem) -> String {
    match s {
        Sem::Int(v) => format!("2000-01-{:02}", 1 + v),
        other => panic!("{other:?}"),
    }
}

fn json_text(rng: &mut Rng, j: &Json) -> String {
    match j {
        Json::Null => "null".into(),
        Json::Bool(b) => b.to_string(),
        Json::Num(i) => num_spelling(rng, *i),
        Json::Str(i) => serde_json::to_string(TEXTS[*i]).unwrap(),
        Json::Arr(items) => {
            let parts: Vec<String> = items.iter().map(|x| json_text(rng, x)).collect();
            format!("[{}]", parts.join(", "))
        }
        Json::Obj(pairs) => {
            let mut order: Vec<usize> = (0..pairs.len()).collect();
            // Shuffle the key order.
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i + 1));
            }
            let mut parts = Vec::new();
            for i in order {
                let (k, v) = &pairs[i];
                let key = serde_json::to_string(JSON_KEYS[*k]).unwrap();
                if rng.chance(20) {
                    // A duplicate before the real pair: jsonb keeps the last.
                    parts.push(format!("{key}: \"shadowed\""));
                }
                parts.push(format!("{key}: {}", json_text(rng, v)));
            }
            format!("{{{}}}", parts.join(", "))
        }
    }
}

fn rec_text(rng: &mut Rng, s: &Sem) -> String {
    let Sem::Row(f) = s else { panic!("not a row") };
    let n = match &f[0] {
        Sem::Null => "NULL".to_string(),
        v => int_text(rng, v),
    };
    let t = match &f[1] {
        Sem::Null => "NULL".to_string(),
        Sem::Text(i) => sql_quote(TEXTS[*i]),
        other => panic!("{other:?}"),
    };
    let x = match &f[2] {
        Sem::Null => "NULL".to_string(),
        v => format!("{}::numeric", sql_quote(&num_text(rng, v))),
    };
    format!("ROW({n}, {t}, {x})::oracle_rec")
}

fn nest_text(rng: &mut Rng, s: &Sem) -> String {
    let Sem::Row(f) = s else { panic!("not a row") };
    let a = match &f[0] {
        Sem::Null => "NULL::int4[]".to_string(),
        v => array_literal(rng, v, "int4[]"),
    };
    let r = match &f[1] {
        Sem::Null => "NULL::int4range".to_string(),
        v => format!(
            "{}::int4range",
            sql_quote(&range_text(rng, v, true, int_text))
        ),
    };
    let p = match &f[2] {
        Sem::Null => "NULL::oracle_rec".to_string(),
        v => rec_text(rng, v),
    };
    format!("ROW({a}, {r}, {p})::oracle_nest")
}

/// A family compared with equality and order, without a collation override.
fn ordered(
    name: &'static str,
    gen_fn: impl Fn(&mut Rng) -> Sem + 'static,
    render: impl Fn(&mut Rng, &Sem) -> String + 'static,
) -> Family {
    Family {
        name,
        gen_fn: Box::new(gen_fn),
        render: Box::new(render),
        order: true,
        collate: "",
    }
}

/// A range type whose bounds render with `scalar`; `discrete` respells `v]` as `v+1)`.
fn range_family(
    name: &'static str,
    gen_fn: fn(&mut Rng) -> Sem,
    discrete: bool,
    scalar: fn(&mut Rng, &Sem) -> String,
) -> Family {
    ordered(name, gen_fn, move |r, s| {
        format!("{}::{name}", sql_quote(&range_text(r, s, discrete, scalar)))
    })
}

/// A multirange type over ranges from `range`.
fn multirange_family(
    name: &'static str,
    range: fn(&mut Rng) -> Sem,
    discrete: bool,
    scalar: fn(&mut Rng, &Sem) -> String,
) -> Family {
    ordered(
        name,
        move |r| gen_multi(r, range),
        move |r, s| {
            let Sem::Multi(items) = s else {
                panic!("not a multirange")
            };
            let parts: Vec<String> = items
                .iter()
                .map(|x| range_text(r, x, discrete, scalar))
                .collect();
            format!(
                "{}::{name}",
                sql_quote(&format!("{{{}}}", parts.join(", ")))
            )
        },
    )
}

/// An array rendered as `ARRAY[...]` of `element` renderings (NULL for NULL elements).
fn array_constructor(
    r: &mut Rng,
    s: &Sem,
    cast: &str,
    element: fn(&mut Rng, &Sem) -> String,
) -> String {
    let Sem::Array(_, items) = s else {
        panic!("not an array")
    };
    let parts: Vec<String> = items
        .iter()
        .map(|x| match x {
            Sem::Null => "NULL".to_string(),
            v => element(r, v),
        })
        .collect();
    format!("ARRAY[{}]{cast}", parts.join(", "))
}

fn jsonb_text(r: &mut Rng, s: &Sem) -> String {
    let Sem::Json(j) = s else { panic!("not jsonb") };
    format!("{}::jsonb", sql_quote(&json_text(r, j)))
}

/// A one-dimensional array of up to `max` elements from `element` (15% NULL).
fn gen_list(r: &mut Rng, max: usize, min: usize, element: fn(&mut Rng) -> Sem) -> Sem {
    let n = min + r.below(max - min + 1);
    let items = (0..n)
        .map(|_| if r.chance(15) { Sem::Null } else { element(r) })
        .collect();
    Sem::Array(vec![(n as i32, 1)], items)
}

fn families() -> Vec<Family> {
    vec![
        ordered(
            "int4[]",
            |r| gen_array(r, gen_int_small),
            |r, s| array_literal(r, s, "int4[]"),
        ),
        ordered(
            "numeric[]",
            |r| gen_array(r, gen_num),
            |r, s| array_literal(r, s, "numeric[]"),
        ),
        Family {
            collate: " COLLATE \"C\"",
            ..ordered(
                "text[] (COLLATE \"C\")",
                |r| gen_array(r, gen_text),
                |r, s| array_literal(r, s, "text[]"),
            )
        },
        range_family("int4range", gen_int_range, true, int_text),
        range_family("numrange", gen_num_range, false, num_text),
        range_family("daterange", gen_date_range, false, date_text),
        multirange_family("int4multirange", gen_int_range, true, int_text),
        multirange_family("nummultirange", gen_num_range, false, num_text),
        Family {
            order: false,
            ..ordered("jsonb", |r| Sem::Json(gen_json(r, 0)), jsonb_text)
        },
        ordered("oracle_rec (int4, text C, numeric)", gen_rec, rec_text),
        ordered(
            "oracle_nest (int4[], int4range, oracle_rec)",
            gen_nest,
            nest_text,
        ),
        ordered(
            "oracle_rec[]",
            |r| gen_list(r, 2, 0, gen_rec),
            |r, s| array_constructor(r, s, "::oracle_rec[]", rec_text),
        ),
        Family {
            order: false,
            ..ordered(
                "jsonb[]",
                |r| gen_list(r, 2, 1, |r| Sem::Json(gen_json(r, 1))),
                |r, s| array_constructor(r, s, "::jsonb[]", jsonb_text),
            )
        },
    ]
}

const SETUP: &str = "DROP TYPE IF EXISTS oracle_nest; DROP TYPE IF EXISTS oracle_rec; \
    CREATE TYPE oracle_rec AS (n int4, s text COLLATE \"C\", x numeric); \
    CREATE TYPE oracle_nest AS (a int4[], r int4range, p oracle_rec); \
    CREATE EXTENSION IF NOT EXISTS pg_trickle_ext;";

/// The record form's identity of `x`, then the argument form's (the two must be equal).
fn encode_sql(x: &str) -> String {
    format!(
        "encode(pgtrickle.encode_row_id_v2('SCAN_KEY', ROW({x})), 'hex'), \
         encode(pgtrickle.encode_row_id_v2_fields('SCAN_KEY', {x}), 'hex')"
    )
}

#[test]
#[ignore = "needs a PostgreSQL server with pg_trickle_ext: run through `cargo xtask test`"]
fn servers_agree_on_structural_values() {
    let psql = Psql::from_env().unwrap();
    psql.run(SETUP).unwrap();
    let version = psql.run("SHOW server_version_num;").unwrap();
    let mut rng = Rng::new(0x5EED_0F57_2C7A_1234);
    let mut report = Vec::new();
    let mut failures = Vec::new();
    let mut total = 0usize;
    for family in families() {
        let mut script = String::new();
        let mut pairs = Vec::with_capacity(PAIRS);
        for _ in 0..PAIRS {
            let a = (family.gen_fn)(&mut rng);
            let b = if rng.chance(33) {
                a.clone()
            } else {
                (family.gen_fn)(&mut rng)
            };
            let (la, lb) = ((family.render)(&mut rng, &a), (family.render)(&mut rng, &b));
            let c = family.collate;
            script.push_str(&format!(
                "SELECT CASE WHEN a{c} < b{c} THEN -1 WHEN a{c} > b{c} THEN 1 ELSE 0 END, \
                 a = b, {}, {} FROM (SELECT {la} AS a, {lb} AS b) v;\n",
                encode_sql("a"),
                encode_sql("b"),
            ));
            pairs.push((la, lb));
        }
        let out = psql
            .run(&script)
            .unwrap_or_else(|e| panic!("{}: {e}", family.name));
        let rows: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(rows.len(), pairs.len(), "{}: row count", family.name);
        let (mut equal, mut disagreements, mut order_matches) = (0, 0, 0);
        for ((la, lb), row) in pairs.iter().zip(rows) {
            let cols: Vec<&str> = row.split('|').collect();
            let server_cmp = match cols[0] {
                "-1" => Ordering::Less,
                "0" => Ordering::Equal,
                _ => Ordering::Greater,
            };
            let server_eq = cols[1] == "t";
            assert_eq!(
                (cols[2], cols[4]),
                (cols[3], cols[5]),
                "{}: encode_row_id_v2_fields differs from encode_row_id_v2 for {la} or {lb}",
                family.name
            );
            let (ea, eb) = (from_hex(cols[2]).unwrap(), from_hex(cols[4]).unwrap());
            for (id, lit) in [(&ea, la), (&eb, lb)] {
                let decoded = rowid_codec::decode(id)
                    .unwrap_or_else(|e| panic!("{}: {lit} does not decode: {e}", family.name));
                let mut again = Vec::new();
                decoded.encode(&mut again).unwrap();
                assert_eq!(&again, id, "{}: {lit} does not re-encode", family.name);
            }
            equal += usize::from(server_eq);
            let eq_ok = server_eq == (ea == eb);
            let byte_cmp = ea.cmp(&eb);
            order_matches += usize::from(byte_cmp == server_cmp);
            let ord_ok = !family.order || byte_cmp == server_cmp;
            if !(eq_ok && ord_ok) {
                disagreements += 1;
                if failures.len() < 20 {
                    failures.push(format!(
                        "{}: server cmp {:?} eq {server_eq}, bytes {byte_cmp:?} eq {} for {la} vs {lb}",
                        family.name,
                        server_cmp,
                        ea == eb
                    ));
                }
            }
        }
        total += pairs.len();
        let claim = if family.order {
            "equality and order".to_string()
        } else {
            format!(
                "equality only; byte order happened to match on {order_matches} of {}",
                pairs.len()
            )
        };
        report.push(format!(
            "{:44} {} pairs, {equal} equal, {disagreements} disagreements ({claim})",
            family.name,
            pairs.len()
        ));
    }
    println!("server_version_num {}", version.trim());
    for line in &report {
        println!("{line}");
    }
    println!("{total} pairs in total");
    assert!(
        failures.is_empty(),
        "disagreements:\n{}",
        failures.join("\n")
    );
}
