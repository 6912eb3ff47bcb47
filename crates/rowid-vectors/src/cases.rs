//! The vector cases, one function per family. Append new cases at the end of a family so
//! existing ids stay stable.

use rowid_codec::limits::MAX_FIELDS;
use rowid_codec::probe::PROBE_PREFIX_CANDIDATES;
use rowid_codec::{
    Domain, Inet, Interval, NumericSign, OwnedBits, OwnedNumeric, OwnedValue, Timetz, TypeTag,
    encode_identity,
};

use crate::{Family, Field, InvalidCase, ProbeCase, ValidCase, from_hex, parse_numeric};

/// Every family, in file-name order.
pub fn families() -> Vec<Family> {
    let mut all = vec![
        bool_family(),
        integers(),
        floats(),
        numerics(),
        character(),
        bytea_uuid(),
        datetime(),
        network(),
        bits(),
        structure(),
        crate::structural_cases::arrays(),
        crate::structural_cases::ranges(),
        crate::structural_cases::jsonb(),
        crate::structural_cases::composites(),
        invalid(),
        probes(),
    ];
    all.sort_by_key(|f| f.file);
    all
}

pub(crate) fn field(tag: TypeTag, value: OwnedValue, display: &str, sql: &str) -> Field {
    Field {
        tag,
        value: Some(value),
        display: display.to_string(),
        sql: Some(sql.to_string()),
    }
}

pub(crate) fn null(tag: TypeTag, sql_type: &str) -> Field {
    Field {
        tag,
        value: None,
        display: "NULL".to_string(),
        sql: Some(format!("NULL::{sql_type}")),
    }
}

pub(crate) fn one(comment: &str, f: Field, flags: &[&'static str]) -> ValidCase {
    ValidCase {
        comment: comment.to_string(),
        domain: Domain::ScanKey,
        fields: vec![f],
        flags: flags.to_vec(),
    }
}

pub(crate) fn bad(comment: &str, hex: &str, error: &'static str) -> InvalidCase {
    InvalidCase {
        comment: comment.to_string(),
        bytes: from_hex(hex).unwrap_or_default(),
        error,
        flags: Vec::new(),
    }
}

fn bool_family() -> Family {
    Family {
        file: "bool.json",
        spec: "wire-format.md §5.1",
        valid: vec![
            one(
                "false",
                field(TypeTag::Bool, OwnedValue::Bool(false), "false", "false"),
                &[],
            ),
            one(
                "true",
                field(TypeTag::Bool, OwnedValue::Bool(true), "true", "true"),
                &[],
            ),
            one("NULL bool", null(TypeTag::Bool, "bool"), &["null"]),
        ],
        ..Family::default()
    }
}

fn integers() -> Family {
    let mut valid = Vec::new();
    for v in [i16::MIN, -1, 0, 1, i16::MAX] {
        let s = v.to_string();
        valid.push(one(
            "int2",
            field(
                TypeTag::Int2,
                OwnedValue::Int2(v),
                &s,
                &format!("({s})::int2"),
            ),
            &[],
        ));
    }
    for v in [i32::MIN, -1, 0, 42, i32::MAX] {
        let s = v.to_string();
        valid.push(one(
            "int4",
            field(
                TypeTag::Int4,
                OwnedValue::Int4(v),
                &s,
                &format!("({s})::int4"),
            ),
            &[],
        ));
    }
    for v in [i64::MIN, -2, 0, 1, i64::MAX] {
        let s = v.to_string();
        valid.push(one(
            "int8",
            field(
                TypeTag::Int8,
                OwnedValue::Int8(v),
                &s,
                &format!("({s})::int8"),
            ),
            &[],
        ));
    }
    for v in [0u32, 1259, 0x8000_0000, u32::MAX] {
        let s = v.to_string();
        valid.push(one(
            "oid (unsigned order)",
            field(TypeTag::Oid, OwnedValue::Oid(v), &s, &format!("'{s}'::oid")),
            &[],
        ));
    }
    valid.push(one("NULL int8", null(TypeTag::Int8, "int8"), &["null"]));
    Family {
        file: "integers.json",
        spec: "wire-format.md §5.2, §5.3",
        valid,
        ..Family::default()
    }
}

fn floats() -> Family {
    let f8 = |x: f64, display: &str, sql: &str, comment: &str, flags: &[&'static str]| {
        one(
            comment,
            field(TypeTag::Float8, OwnedValue::Float8(x), display, sql),
            flags,
        )
    };
    let f4 = |x: f32, display: &str, sql: &str, comment: &str, flags: &[&'static str]| {
        one(
            comment,
            field(TypeTag::Float4, OwnedValue::Float4(x), display, sql),
            flags,
        )
    };
    let payload_nan = |comment: &str, x: f64| ValidCase {
        comment: comment.to_string(),
        domain: Domain::ScanKey,
        fields: vec![Field {
            tag: TypeTag::Float8,
            value: Some(OwnedValue::Float8(x)),
            display: format!("NaN with bits {:016X}", x.to_bits()),
            sql: None,
        }],
        flags: vec!["normalisation", "sql-unrepresentable"],
    };
    Family {
        file: "floats.json",
        spec: "wire-format.md §5.4",
        valid: vec![
            f8(
                f64::NEG_INFINITY,
                "-Infinity",
                "'-Infinity'::float8",
                "lowest",
                &["edge"],
            ),
            f8(-1.0, "-1", "'-1'::float8", "negative", &[]),
            f8(
                -0.0,
                "-0",
                "'-0'::float8",
                "-0 encodes as +0",
                &["normalisation"],
            ),
            f8(0.0, "0", "'0'::float8", "zero", &[]),
            f8(1.0, "1", "'1'::float8", "one", &[]),
            f8(
                f64::MIN_POSITIVE,
                "2.2250738585072014e-308",
                "'2.2250738585072014e-308'::float8",
                "smallest normal",
                &["edge"],
            ),
            f8(
                f64::INFINITY,
                "Infinity",
                "'Infinity'::float8",
                "highest finite class",
                &["edge"],
            ),
            f8(
                f64::NAN,
                "NaN",
                "'NaN'::float8",
                "NaN sorts after +Infinity",
                &["edge"],
            ),
            payload_nan(
                "negative NaN with a payload encodes as the canonical NaN",
                f64::from_bits(0xFFF0_0000_0000_0001),
            ),
            f4(1.5, "1.5", "'1.5'::float4", "float4", &[]),
            f4(
                -0.0,
                "-0",
                "'-0'::float4",
                "float4 -0 encodes as +0",
                &["normalisation"],
            ),
            f4(f32::NAN, "NaN", "'NaN'::float4", "float4 NaN", &["edge"]),
            f4(
                f32::NEG_INFINITY,
                "-Infinity",
                "'-Infinity'::float4",
                "float4 -Infinity",
                &["edge"],
            ),
        ],
        ..Family::default()
    }
}

fn numerics() -> Family {
    let n = |text: &str, comment: &str, flags: &[&'static str]| {
        let value = parse_numeric(text).unwrap_or(OwnedNumeric {
            sign: NumericSign::NaN,
            weight: 0,
            digits: Vec::new(),
        });
        one(
            comment,
            field(
                TypeTag::Numeric,
                OwnedValue::Numeric(value),
                text,
                &format!("'{text}'::numeric"),
            ),
            flags,
        )
    };
    Family {
        file: "numeric.json",
        spec: "wire-format.md §5.5",
        valid: vec![
            n("-Infinity", "lowest class", &["edge"]),
            n("-12345.678", "negative: body inverted", &[]),
            n("-1.5", "negative", &[]),
            n("-0.0001", "negative with negative weight", &[]),
            n("0", "zero", &[]),
            n("0.000", "zero with scale is zero", &["normalisation"]),
            n("-0.00", "negative zero is zero", &["normalisation"]),
            n(
                "0.0001",
                "leading zero group dropped, weight -1",
                &["normalisation"],
            ),
            n("1", "one", &[]),
            n("1.0", "1.0 = 1", &["normalisation"]),
            n("1.00", "1.00 = 1", &["normalisation"]),
            n("1.1", "1.1 < 1.99 (no length prefix)", &["order"]),
            n("1.99", "1.99 > 1.1", &["order"]),
            n(
                "10000",
                "weight 1, trailing zero group dropped",
                &["normalisation"],
            ),
            n("12345.678", "three groups", &[]),
            n("0.00000001", "digit group 1 after a zero group", &[]),
            n(
                "256",
                "group 256 has a zero low byte (escaped)",
                &["escape"],
            ),
            n("99999999999999999999999999999999999999", "38 nines", &[]),
            n("Infinity", "above every finite value", &["edge"]),
            n("NaN", "NaN sorts last", &["edge"]),
        ],
        ..Family::default()
    }
}

fn character() -> Family {
    let t = |tag: TypeTag, s: &str, sql: &str, comment: &str, flags: &[&'static str]| {
        let bytes = s.as_bytes().to_vec();
        let value = match tag {
            TypeTag::Text => OwnedValue::Text(bytes),
            TypeTag::Varchar => OwnedValue::Varchar(bytes),
            TypeTag::Bpchar => OwnedValue::Bpchar(bytes),
            _ => OwnedValue::Enum(bytes),
        };
        one(comment, field(tag, value, &format!("{s:?}"), sql), flags)
    };
    Family {
        file: "character.json",
        spec: "wire-format.md §5.6, §5.7, §5.18",
        setup: vec!["CREATE TYPE rowid_vec_mood AS ENUM ('sad', 'ok', 'happy')"],
        valid: vec![
            t(TypeTag::Text, "", "''::text", "empty text", &["edge"]),
            t(TypeTag::Text, "ab", "'ab'::text", "text", &[]),
            t(
                TypeTag::Text,
                "ab ",
                "'ab '::text",
                "text keeps trailing spaces",
                &[],
            ),
            t(TypeTag::Text, "é", "'é'::text", "UTF-8 bytes", &[]),
            t(
                TypeTag::Varchar,
                "abc",
                "'abc'::varchar(10)",
                "varchar",
                &[],
            ),
            t(
                TypeTag::Bpchar,
                "ab  ",
                "'ab'::char(4)",
                "bpchar pad removed",
                &["normalisation"],
            ),
            t(
                TypeTag::Bpchar,
                "ab",
                "'ab'::bpchar",
                "bpchar without pad: same bytes",
                &["normalisation"],
            ),
            t(
                TypeTag::Bpchar,
                "   ",
                "''::char(3)",
                "all-space bpchar is empty",
                &["normalisation", "edge"],
            ),
            t(
                TypeTag::Enum,
                "sad",
                "'sad'::rowid_vec_mood",
                "enum label",
                &[],
            ),
            t(
                TypeTag::Enum,
                "happy",
                "'happy'::rowid_vec_mood",
                "enum label (not ordered)",
                &[],
            ),
        ],
        ..Family::default()
    }
}

fn bytea_uuid() -> Family {
    let uuid = |hex: &str| -> [u8; 16] {
        from_hex(hex)
            .and_then(|v| v.try_into().ok())
            .unwrap_or([0; 16])
    };
    Family {
        file: "bytea-uuid-mac.json",
        spec: "wire-format.md §5.8, §5.9, §5.16",
        valid: vec![
            one(
                "empty bytea",
                field(
                    TypeTag::Bytea,
                    OwnedValue::Bytea(vec![]),
                    "\\x",
                    "'\\x'::bytea",
                ),
                &["edge"],
            ),
            one(
                "zero bytes are escaped",
                field(
                    TypeTag::Bytea,
                    OwnedValue::Bytea(vec![0, 0xFF, 0]),
                    "\\x00ff00",
                    "'\\x00ff00'::bytea",
                ),
                &["escape"],
            ),
            one(
                "single zero byte",
                field(
                    TypeTag::Bytea,
                    OwnedValue::Bytea(vec![0]),
                    "\\x00",
                    "'\\x00'::bytea",
                ),
                &["escape"],
            ),
            one(
                "uuid",
                field(
                    TypeTag::Uuid,
                    OwnedValue::Uuid(uuid("a0eebc999c0b4ef8bb6d6bb9bd380a11")),
                    "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
                    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid",
                ),
                &[],
            ),
            one(
                "nil uuid",
                field(
                    TypeTag::Uuid,
                    OwnedValue::Uuid([0; 16]),
                    "00000000-0000-0000-0000-000000000000",
                    "'00000000-0000-0000-0000-000000000000'::uuid",
                ),
                &["edge"],
            ),
            one(
                "macaddr",
                field(
                    TypeTag::Macaddr,
                    OwnedValue::Macaddr([8, 0, 0x2b, 1, 2, 3]),
                    "08:00:2b:01:02:03",
                    "'08:00:2b:01:02:03'::macaddr",
                ),
                &[],
            ),
            one(
                "macaddr8",
                field(
                    TypeTag::Macaddr8,
                    OwnedValue::Macaddr8([8, 0, 0x2b, 1, 2, 3, 4, 5]),
                    "08:00:2b:01:02:03:04:05",
                    "'08:00:2b:01:02:03:04:05'::macaddr8",
                ),
                &[],
            ),
        ],
        ..Family::default()
    }
}

fn datetime() -> Family {
    let iv = |m, d, us, display: &str, comment: &str, flags: &[&'static str]| {
        one(
            comment,
            field(
                TypeTag::Interval,
                OwnedValue::Interval(Interval::from_fields(m, d, us)),
                display,
                &format!("'{display}'::interval"),
            ),
            flags,
        )
    };
    let tz = |time, zone, display: &str, comment: &str| {
        one(
            comment,
            field(
                TypeTag::Timetz,
                OwnedValue::Timetz(Timetz { time, zone }),
                display,
                &format!("'{display}'::timetz"),
            ),
            &[],
        )
    };
    let hour = 3_600_000_000i64;
    Family {
        file: "datetime.json",
        spec: "wire-format.md §5.10–§5.14",
        valid: vec![
            one(
                "-infinity",
                field(
                    TypeTag::Date,
                    OwnedValue::Date(i32::MIN),
                    "-infinity",
                    "'-infinity'::date",
                ),
                &["edge"],
            ),
            one(
                "day before the epoch",
                field(
                    TypeTag::Date,
                    OwnedValue::Date(-1),
                    "1999-12-31",
                    "'1999-12-31'::date",
                ),
                &[],
            ),
            one(
                "epoch",
                field(
                    TypeTag::Date,
                    OwnedValue::Date(0),
                    "2000-01-01",
                    "'2000-01-01'::date",
                ),
                &[],
            ),
            one(
                "infinity",
                field(
                    TypeTag::Date,
                    OwnedValue::Date(i32::MAX),
                    "infinity",
                    "'infinity'::date",
                ),
                &["edge"],
            ),
            one(
                "midnight",
                field(
                    TypeTag::Time,
                    OwnedValue::Time(0),
                    "00:00:00",
                    "'00:00:00'::time",
                ),
                &["edge"],
            ),
            one(
                "noon",
                field(
                    TypeTag::Time,
                    OwnedValue::Time(12 * hour),
                    "12:00:00",
                    "'12:00:00'::time",
                ),
                &[],
            ),
            one(
                "24:00 is a valid time",
                field(
                    TypeTag::Time,
                    OwnedValue::Time(24 * hour),
                    "24:00:00",
                    "'24:00:00'::time",
                ),
                &["edge"],
            ),
            one(
                "timestamp",
                field(
                    TypeTag::Timestamp,
                    OwnedValue::Timestamp(1_000_000),
                    "2000-01-01 00:00:01",
                    "'2000-01-01 00:00:01'::timestamp",
                ),
                &[],
            ),
            one(
                "timestamp -infinity",
                field(
                    TypeTag::Timestamp,
                    OwnedValue::Timestamp(i64::MIN),
                    "-infinity",
                    "'-infinity'::timestamp",
                ),
                &["edge"],
            ),
            one(
                "timestamp before the epoch",
                field(
                    TypeTag::Timestamp,
                    OwnedValue::Timestamp(-86_400_000_000),
                    "1999-12-31 00:00:00",
                    "'1999-12-31 00:00:00'::timestamp",
                ),
                &[],
            ),
            one(
                "timestamptz is UTC",
                field(
                    TypeTag::Timestamptz,
                    OwnedValue::Timestamptz(1_000_000),
                    "2000-01-01 02:00:01+02",
                    "'2000-01-01 02:00:01+02'::timestamptz",
                ),
                &["setting-independence"],
            ),
            one(
                "timestamptz infinity",
                field(
                    TypeTag::Timestamptz,
                    OwnedValue::Timestamptz(i64::MAX),
                    "infinity",
                    "'infinity'::timestamptz",
                ),
                &["edge"],
            ),
            tz(0, -3600, "00:00:00+01", "zone is seconds west of UTC"),
            tz(
                hour,
                0,
                "01:00:00+00",
                "same instant as 00:00+01, different zone: not equal",
            ),
            tz(0, 0, "00:00:00+00", "UTC midnight"),
            iv(1, 0, 0, "1 mon", "one month", &[]),
            iv(0, 30, 0, "30 days", "30 days = 1 mon", &["normalisation"]),
            iv(0, 1, 0, "1 day", "one day", &[]),
            iv(
                0,
                0,
                24 * hour,
                "24 hours",
                "24 hours = 1 day",
                &["normalisation"],
            ),
            iv(
                0,
                -1,
                24 * hour - 1_000_000,
                "-1 days +23:59:59",
                "-1 day 23:59:59 = -1 s",
                &["normalisation"],
            ),
            iv(0, 0, -1_000_000, "-00:00:01", "-1 s", &["normalisation"]),
            iv(
                i32::MAX,
                i32::MAX,
                i64::MAX,
                "infinity",
                "PostgreSQL 17 +infinity: beyond 64 bits",
                &["edge", "pg17"],
            ),
            iv(
                178_956_970,
                0,
                0,
                "178956970 mons",
                "largest month count: comparison value exceeds int64",
                &["edge"],
            ),
        ],
        ..Family::default()
    }
}

fn network() -> Family {
    let inet = |n: Inet, text: &str, comment: &str| {
        one(
            comment,
            field(
                TypeTag::Inet,
                OwnedValue::Inet(n),
                text,
                &format!("'{text}'::inet"),
            ),
            &[],
        )
    };
    let cidr = |n: Inet, text: &str, comment: &str| {
        one(
            comment,
            field(
                TypeTag::Cidr,
                OwnedValue::Cidr(n),
                text,
                &format!("'{text}'::cidr"),
            ),
            &[],
        )
    };
    let mut v6 = [0u8; 16];
    v6[15] = 1;
    let mut db8 = [0u8; 16];
    db8[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    Family {
        file: "network.json",
        spec: "wire-format.md §5.15",
        valid: vec![
            inet(
                Inet::v4([192, 168, 1, 5], 24),
                "192.168.1.5/24",
                "inet keeps host bits",
            ),
            inet(
                Inet::v4([192, 168, 1, 5], 32),
                "192.168.1.5",
                "host address",
            ),
            inet(
                Inet::v4([10, 1, 0, 0], 8),
                "10.1.0.0/8",
                "short prefix sorts by network first",
            ),
            inet(Inet::v4([0, 0, 0, 0], 0), "0.0.0.0/0", "zero prefix"),
            inet(Inet::v6(v6, 128), "::1", "IPv6 sorts after IPv4"),
            cidr(Inet::v4([10, 0, 0, 0], 8), "10.0.0.0/8", "cidr"),
            cidr(
                Inet::v4([10, 0, 0, 0], 16),
                "10.0.0.0/16",
                "longer prefix, same network bits",
            ),
            cidr(Inet::v6(db8, 32), "2001:db8::/32", "cidr IPv6"),
        ],
        ..Family::default()
    }
}

fn bits() -> Family {
    let b = |varbit: bool, len: u32, bytes: &[u8], text: &str, sql: &str, comment: &str| {
        let v = OwnedBits {
            bit_len: len,
            bytes: bytes.to_vec(),
        };
        let (tag, value) = if varbit {
            (TypeTag::Varbit, OwnedValue::Varbit(v))
        } else {
            (TypeTag::Bit, OwnedValue::Bit(v))
        };
        one(comment, field(tag, value, text, sql), &[])
    };
    Family {
        file: "bits.json",
        spec: "wire-format.md §5.17",
        valid: vec![
            b(false, 3, &[0xA0], "101", "B'101'::bit(3)", "bit(3)"),
            b(true, 0, &[], "", "B''::varbit", "empty varbit"),
            b(
                true,
                1,
                &[0x80],
                "1",
                "B'1'::varbit",
                "B'1' < B'10' (same byte, shorter)",
            ),
            b(true, 2, &[0x80], "10", "B'10'::varbit", "B'10'"),
            b(
                true,
                8,
                &[0x00],
                "00000000",
                "B'00000000'::varbit",
                "zero byte escaped",
            ),
            b(
                true,
                9,
                &[0xFF, 0x80],
                "111111111",
                "B'111111111'::varbit",
                "two bytes",
            ),
        ],
        ..Family::default()
    }
}

/// Encodes an identity a case is built from. The cases are constant data, so a failure is a
/// mistake in this file and stops generation with the encoder's message.
#[allow(clippy::panic)]
fn encode_owned(domain: Domain, fields: &[(TypeTag, Option<OwnedValue>)]) -> Vec<u8> {
    let values: Vec<_> = fields
        .iter()
        .map(|(t, v)| (*t, v.as_ref().map(OwnedValue::as_value)))
        .collect();
    let mut buf = Vec::new();
    if let Err(e) = encode_identity(&mut buf, domain, &values) {
        panic!("vector case does not encode: {e}");
    }
    buf
}

fn structure() -> Family {
    let int4 = |v: i32| {
        field(
            TypeTag::Int4,
            OwnedValue::Int4(v),
            &v.to_string(),
            &format!("({v})::int4"),
        )
    };
    let text = |s: &str| {
        field(
            TypeTag::Text,
            OwnedValue::Text(s.as_bytes().to_vec()),
            &format!("{s:?}"),
            &format!("'{s}'::text"),
        )
    };
    let case = |domain, comment: &str, fields: Vec<Field>, flags: &[&'static str]| ValidCase {
        comment: comment.to_string(),
        domain,
        fields,
        flags: flags.to_vec(),
    };
    let child = |v: i32| {
        let bytes = encode_owned(
            Domain::ScanKey,
            &[(TypeTag::Int4, Some(OwnedValue::Int4(v)))],
        );
        let decoded = rowid_codec::decode(&bytes).ok();
        Field {
            tag: TypeTag::ChildIdentity,
            value: decoded.map(|identity| {
                OwnedValue::Identity(rowid_codec::ChildIdentity { bytes, identity })
            }),
            display: format!("SCAN_KEY(int4 {v})"),
            sql: Some(format!(
                "pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(({v})::int4))::pgtrickle.row_id"
            )),
        }
    };
    let mut valid = vec![
        case(Domain::ScanKey, "no fields", vec![], &["edge"]),
        case(
            Domain::ScanKey,
            "(1, 23)",
            vec![int4(1), int4(23)],
            &["framing"],
        ),
        case(
            Domain::ScanKey,
            "(12, 3) differs from (1, 23)",
            vec![int4(12), int4(3)],
            &["framing"],
        ),
        case(
            Domain::ScanKey,
            "('ab', 'c')",
            vec![text("ab"), text("c")],
            &["framing"],
        ),
        case(
            Domain::ScanKey,
            "('a', 'bc') differs from ('ab', 'c')",
            vec![text("a"), text("bc")],
            &["framing"],
        ),
        case(
            Domain::GroupKey,
            "NULL group key sorts first",
            vec![null(TypeTag::Text, "text"), int4(1)],
            &["null"],
        ),
        case(
            Domain::KeylessRow,
            "keyless row",
            vec![int4(1), text("x"), null(TypeTag::Int8, "int8")],
            &[],
        ),
        case(Domain::SetKey, "SET_KEY domain", vec![int4(1)], &[]),
        case(Domain::WindowKey, "WINDOW_KEY domain", vec![int4(1)], &[]),
        case(
            Domain::Synthetic,
            "scalar aggregate singleton",
            vec![text("scalar_aggregate_singleton")],
            &["synthetic"],
        ),
        case(
            Domain::Synthetic,
            "lateral inner dummy",
            vec![text("lateral_inner_dummy")],
            &["synthetic"],
        ),
    ];
    valid.push(case(
        Domain::JoinKey,
        "join of two children",
        vec![child(1), child(2)],
        &["nesting"],
    ));
    valid.push(case(
        Domain::JoinKey,
        "join with a NULL child side",
        vec![child(1), null(TypeTag::ChildIdentity, "pgtrickle.row_id")],
        &["nesting", "null"],
    ));
    valid.push(ValidCase {
        comment: "a PostgreSQL domain encodes as its base type".to_string(),
        domain: Domain::ScanKey,
        fields: vec![field(
            TypeTag::Int4,
            OwnedValue::Int4(5),
            "5",
            "(5)::rowid_vec_posint",
        )],
        flags: vec!["pg-domain"],
    });
    Family {
        file: "structure.json",
        spec: "wire-format.md §3, §4, §6",
        setup: vec!["CREATE DOMAIN rowid_vec_posint AS int4 CHECK (VALUE > 0)"],
        valid,
        ..Family::default()
    }
}

fn invalid() -> Family {
    let too_many = format!("0201{:08x}ff", MAX_FIELDS + 1);
    let long_label = format!("0201000000011a01{}0000ff", "61".repeat(64));
    let mut cases = vec![
        bad("empty input", "", "Truncated"),
        bad("version byte 01", "01 01 00000000 ff", "UnknownVersion"),
        bad("domain 00", "02 00 00000000 ff", "UnknownDomain"),
        bad("domain 08", "02 08 00000000 ff", "UnknownDomain"),
        bad("header truncated", "02 01 0000", "Truncated"),
        bad(
            "declares one field, holds none",
            "02 01 00000001 ff",
            "FieldCountMismatch",
        ),
        bad(
            "reserved tag 1b",
            "02 01 00000001 1b 00 ff",
            "UnknownTypeTag",
        ),
        bad(
            "reserved structural tag 46 (41-45 are assigned since the structural families)",
            "02 01 00000001 46 00 ff",
            "UnknownTypeTag",
        ),
        bad(
            "state byte 02",
            "02 01 00000001 03 02 ff",
            "InvalidNullState",
        ),
        bad("missing TUPLE_END", "02 01 00000000 00", "MissingTupleEnd"),
        bad("no TUPLE_END at all", "02 01 00000000", "Truncated"),
        bad(
            "byte after TUPLE_END",
            "02 01 00000000 ff 00",
            "TrailingBytes",
        ),
        bad(
            "int4 payload truncated",
            "02 01 00000001 03 01 8000 ff",
            "Truncated",
        ),
        bad("bool byte 02", "02 01 00000001 01 01 02 ff", "NonCanonical"),
        bad(
            "float8 -0 image",
            "02 01 00000001 07 01 7fffffffffffffff ff",
            "NonCanonical",
        ),
        bad(
            "float8 NaN with payload",
            "02 01 00000001 07 01 fff8000000000001 ff",
            "NonCanonical",
        ),
        bad(
            "float8 negative NaN image",
            "02 01 00000001 07 01 0007ffffffffffff ff",
            "NonCanonical",
        ),
        bad(
            "float4 -0 image",
            "02 01 00000001 06 01 7fffffff ff",
            "NonCanonical",
        ),
        bad(
            "numeric unknown class",
            "02 01 00000001 08 01 06 ff",
            "NonCanonical",
        ),
        bad(
            "numeric leading zero group",
            "02 01 00000001 08 01 03 8000 00ff00ff 00ff01 0000 ff",
            "NonCanonical",
        ),
        bad(
            "numeric trailing zero group",
            "02 01 00000001 08 01 03 8000 00ff01 00ff00ff 0000 ff",
            "NonCanonical",
        ),
        bad(
            "numeric group 10000",
            "02 01 00000001 08 01 03 8000 2710 0000 ff",
            "NonCanonical",
        ),
        bad(
            "numeric odd digit bytes",
            "02 01 00000001 08 01 03 8000 01 0000 ff",
            "NonCanonical",
        ),
        bad(
            "numeric positive without digits",
            "02 01 00000001 08 01 03 8000 0000 ff",
            "NonCanonical",
        ),
        bad(
            "text with escaped NUL",
            "02 01 00000001 09 01 61 00ff 0000 ff",
            "NonCanonical",
        ),
        bad(
            "bad escape 00 01",
            "02 01 00000001 09 01 61 0001 0000 ff",
            "InvalidEscape",
        ),
        bad(
            "unterminated text",
            "02 01 00000001 09 01 61 62",
            "Truncated",
        ),
        bad(
            "bpchar with trailing space",
            "02 01 00000001 0b 01 61 20 0000 ff",
            "NonCanonical",
        ),
        bad(
            "time past 24:00",
            "02 01 00000001 0f 01 000000141dd76001 ff",
            "NonCanonical",
        ),
        bad(
            "timetz zone 57600",
            "02 01 00000001 12 01 8000000000000000 8000e100 ff",
            "NonCanonical",
        ),
        bad(
            "timetz local time negative",
            "02 01 00000001 12 01 7fffffffffffffff 80000000 ff",
            "NonCanonical",
        ),
        bad(
            "interval above the largest comparison value",
            "02 01 00000001 13 01 ffffffffffffffffffffffffffffffff ff",
            "NonCanonical",
        ),
        bad(
            "inet family 04",
            "02 01 00000001 14 01 04 00000000 00 00000000 ff",
            "NonCanonical",
        ),
        bad(
            "inet prefix 33",
            "02 01 00000001 14 01 02 c0a80105 21 c0a80105 ff",
            "NonCanonical",
        ),
        bad(
            "inet network part not masked",
            "02 01 00000001 14 01 02 c0a80105 18 c0a80105 ff",
            "NonCanonical",
        ),
        bad(
            "cidr with host bits",
            "02 01 00000001 15 01 02 0a000000 08 0a000001 ff",
            "NonCanonical",
        ),
        bad(
            "bit pad bits set",
            "02 01 00000001 18 01 a1 0000 00000003 ff",
            "NonCanonical",
        ),
        bad(
            "bit byte count mismatch",
            "02 01 00000001 18 01 a0 0000 00000009 ff",
            "NonCanonical",
        ),
        bad(
            "child identity with bad version",
            "02 04 00000001 40 01 01 01 00ff00ff00ff00ff ff 0000 ff",
            "UnknownVersion",
        ),
        bad(
            "child identity with trailing byte",
            "02 04 00000001 40 01 02 01 00ff00ff00ff00ff ff 01 0000 ff",
            "TrailingBytes",
        ),
        bad(
            "child identity unterminated",
            "02 04 00000001 40 01 02 01 00ff00ff00ff00ff ff",
            "Truncated",
        ),
    ];
    cases.push(bad(
        "field count above MAX_FIELDS",
        &too_many,
        "LimitExceeded",
    ));
    cases.push(bad(
        "enum label longer than 63 bytes",
        &long_label,
        "LimitExceeded",
    ));
    cases.push(deep_nesting());
    Family {
        file: "invalid.json",
        spec: "wire-format.md §7, §8",
        invalid: cases,
        ..Family::default()
    }
}

/// 33 nested child identities: one more than `MAX_DEPTH` allows. Built by escaping by hand so
/// the encoder (which refuses it) is not involved.
fn deep_nesting() -> InvalidCase {
    let mut id = from_hex("02 01 00000000 ff").unwrap_or_default();
    for _ in 0..32 {
        let mut outer = from_hex("02 04 00000001 40 01").unwrap_or_default();
        for &b in &id {
            if b == 0 {
                outer.extend_from_slice(&[0x00, 0xFF]);
            } else {
                outer.push(b);
            }
        }
        outer.extend_from_slice(&[0x00, 0x00, 0xFF]);
        id = outer;
    }
    InvalidCase {
        comment: "nesting depth 33 exceeds MAX_DEPTH".to_string(),
        bytes: id,
        error: "LimitExceeded",
        flags: vec!["limit"],
    }
}

fn probes() -> Family {
    let text_id = |s: &[u8]| {
        encode_owned(
            Domain::ScanKey,
            &[(TypeTag::Text, Some(OwnedValue::Text(s.to_vec())))],
        )
    };
    let int_id = encode_owned(
        Domain::ScanKey,
        &[(TypeTag::Int8, Some(OwnedValue::Int8(42)))],
    );
    let mut common_a = vec![b'k'; 400];
    common_a.extend_from_slice(b"-a");
    let mut common_b = vec![b'k'; 400];
    common_b.extend_from_slice(b"-b");
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("short int8 identity: always inline", int_id),
        (
            "47-byte text identity (spec/probe.md §5)",
            text_id(b"abcdefghijklmnopqrstuvwxyz0123456789"),
        ),
        ("identity of exactly 64 bytes", text_id(&[b'q'; 55])),
        ("identity of 65 bytes", text_id(&[b'q'; 56])),
        ("long identity, common prefix, tail a", text_id(&common_a)),
        ("long identity, common prefix, tail b", text_id(&common_b)),
    ];
    let mut probes = Vec::new();
    for (comment, identity) in inputs {
        for p in PROBE_PREFIX_CANDIDATES {
            let mode = if identity.len() <= p {
                "inline"
            } else {
                "overflow"
            };
            probes.push(ProbeCase {
                comment: format!("{comment}; P = {p}"),
                identity: identity.clone(),
                prefix_len: p,
                flags: vec![mode],
            });
        }
    }
    Family {
        file: "probe.json",
        spec: "probe.md §2, §3",
        probes,
        ..Family::default()
    }
}
