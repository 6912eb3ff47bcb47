//! SQL text: string quoting, and literals of codec values for a server that judges the same
//! pairs the model judges. Values a server cannot hold (dates past its calendar, invalid
//! UTF-8, intervals whose months overflow) are first mapped into its domain by
//! [`representable`]; both sides then use the mapped value.

use rowid_codec::scalar::{USECS_PER_DAY, netmask_byte};
use rowid_codec::{Inet, Interval, NumericSign, OwnedNumeric, OwnedValue};

use crate::hex::to_hex;

/// A SQL string literal: `'it''s'`.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Labels of the enum type `oracle_enum` that a server-backed test creates.
pub const ENUM_LABELS: [&str; 6] = ["a", "b", "ab", "ba", "é", "a b"];

/// The `CREATE TYPE` statement of `oracle_enum`.
pub fn enum_type_ddl() -> String {
    let labels: Vec<String> = ENUM_LABELS.iter().map(|l| quote(l)).collect();
    format!(
        "DROP TYPE IF EXISTS oracle_enum; CREATE TYPE oracle_enum AS ENUM ({});",
        labels.join(", ")
    )
}

/// Microseconds in 30 days: what `interval_cmp_value` counts a month as.
const USECS_PER_MONTH: i128 = 30 * USECS_PER_DAY as i128;

/// Largest interval comparison value [`representable`] keeps: every spelling of
/// [`literal`] fits PostgreSQL's int32 months (well past int64 microseconds).
const INTERVAL_RANGE: i128 = 2_000_000_000 * USECS_PER_MONTH;

/// Maps a generated value into what PostgreSQL can represent.
pub fn representable(v: &OwnedValue) -> OwnedValue {
    const DAY_RANGE: i32 = 2_000_000; // ±5475 years
    const US_RANGE: i64 = 200_000_000_000_000_000; // ±6337 years
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned().into_bytes();
    match v.clone() {
        OwnedValue::Text(b) => OwnedValue::Text(text(&b)),
        OwnedValue::Varchar(b) => OwnedValue::Varchar(text(&b)),
        OwnedValue::Bpchar(b) => OwnedValue::Bpchar(text(&b)),
        OwnedValue::Enum(b) => {
            let i = b.iter().map(|&x| usize::from(x)).sum::<usize>() % ENUM_LABELS.len();
            OwnedValue::Enum(ENUM_LABELS[i].as_bytes().to_vec())
        }
        OwnedValue::Date(d) if d != i32::MIN && d != i32::MAX => {
            OwnedValue::Date(d.rem_euclid(2 * DAY_RANGE) - DAY_RANGE)
        }
        OwnedValue::Timestamp(t) if t != i64::MIN && t != i64::MAX => {
            OwnedValue::Timestamp(t.rem_euclid(2 * US_RANGE) - US_RANGE)
        }
        OwnedValue::Timestamptz(t) if t != i64::MIN && t != i64::MAX => {
            OwnedValue::Timestamptz(t.rem_euclid(2 * US_RANGE) - US_RANGE)
        }
        OwnedValue::Interval(i) => {
            let c = i.cmp_value();
            let c = if c.abs() <= INTERVAL_RANGE {
                c
            } else {
                c.rem_euclid(2 * INTERVAL_RANGE) - INTERVAL_RANGE
            };
            OwnedValue::Interval(Interval::from_cmp_value(c).expect("within interval range"))
        }
        other => other,
    }
}

fn float_text(x: f64, debug: String) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        }
    } else {
        debug
    }
}

/// Every digit group written out (leading and trailing zero groups too), so an unnormalised
/// numeric reaches the server as another spelling of its value.
fn numeric_text(n: &OwnedNumeric) -> String {
    match n.sign {
        NumericSign::NaN => return "NaN".into(),
        NumericSign::PositiveInfinity => return "Infinity".into(),
        NumericSign::NegativeInfinity => return "-Infinity".into(),
        NumericSign::Positive | NumericSign::Negative => {}
    }
    let (weight, digits) = (i32::from(n.weight), &n.digits);
    let mut int_part = String::new();
    let mut frac_part = String::new();
    let lowest = weight - digits.len() as i32 + 1;
    for exp in (lowest.min(0)..=weight.max(0)).rev() {
        let idx = weight - exp;
        let g = if (0..digits.len() as i32).contains(&idx) {
            digits[idx as usize]
        } else {
            0
        };
        let s = format!("{g:04}");
        if exp >= 0 {
            int_part.push_str(&s)
        } else {
            frac_part.push_str(&s)
        }
    }
    let sign = if n.sign == NumericSign::Negative {
        "-"
    } else {
        ""
    };
    format!("{sign}{int_part}.{frac_part}0")
}

fn time_text(us: i64) -> String {
    let (h, rest) = (us / 3_600_000_000, us % 3_600_000_000);
    let (m, rest) = (rest / 60_000_000, rest % 60_000_000);
    format!(
        "{h:02}:{m:02}:{:02}.{:06}",
        rest / 1_000_000,
        rest % 1_000_000
    )
}

fn addr_text(n: &Inet) -> String {
    let a = n.address();
    let body = if a.len() == 4 {
        format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
    } else {
        a.chunks(2)
            .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
            .collect::<Vec<_>>()
            .join(":")
    };
    format!("{body}/{}", n.bits)
}

/// Months, days and microseconds that spell comparison value `c` (`spelling` selects one of
/// three splits: months first, one month fewer and its 30 days as days, or days only when
/// they fit int32), so equal intervals can reach the server spelt differently.
pub fn interval_fields(c: i128, spelling: u8) -> (i32, i32, i64) {
    let day = i128::from(USECS_PER_DAY);
    let split = |months: i128| {
        let rest = c - months * USECS_PER_MONTH;
        let days = rest.div_euclid(day);
        let us = rest.rem_euclid(day);
        (
            i32::try_from(months).expect("months fit int32"),
            i32::try_from(days).expect("days fit int32"),
            i64::try_from(us).expect("microseconds fit int64"),
        )
    };
    let months = c.div_euclid(USECS_PER_MONTH);
    match spelling % 3 {
        0 => split(months),
        1 if months > i128::from(i32::MIN) => split(months - 1),
        2 if c.div_euclid(day).abs() < i128::from(i32::MAX) => split(0),
        _ => split(months),
    }
}

/// A SQL expression of the value's type; text types carry `COLLATE "C"`. `spelling` picks
/// among equivalent spellings where the type has several (intervals).
pub fn literal(v: &OwnedValue, spelling: u8) -> String {
    use OwnedValue as V;
    let text = |b: &[u8]| quote(&String::from_utf8_lossy(b));
    match v {
        V::Bool(b) => b.to_string(),
        V::Int2(x) => format!("({x})::int2"),
        V::Int4(x) => format!("({x})::int4"),
        V::Int8(x) => format!("({x})::int8"),
        V::Oid(x) => format!("'{x}'::oid"),
        V::Float4(x) => format!("'{}'::float4", float_text(f64::from(*x), format!("{x:?}"))),
        V::Float8(x) => format!("'{}'::float8", float_text(*x, format!("{x:?}"))),
        V::Numeric(n) => format!("'{}'::numeric", numeric_text(n)),
        V::Text(b) => format!("({}::text COLLATE \"C\")", text(b)),
        V::Varchar(b) => format!("({}::varchar COLLATE \"C\")", text(b)),
        V::Bpchar(b) => format!("({}::bpchar COLLATE \"C\")", text(b)),
        V::Enum(b) => format!("{}::oracle_enum", text(b)),
        V::Bytea(b) => format!("'\\x{}'::bytea", to_hex(b)),
        V::Uuid(u) => format!("'{}'::uuid", to_hex(u)),
        V::Date(d) => match *d {
            i32::MIN => "'-infinity'::date".into(),
            i32::MAX => "'infinity'::date".into(),
            d => format!("('2000-01-01'::date + ({d}))"),
        },
        V::Time(us) => format!("'{}'::time", time_text(*us)),
        V::Timestamp(t) | V::Timestamptz(t) => {
            let ty = if matches!(v, V::Timestamp(_)) {
                "timestamp"
            } else {
                "timestamptz"
            };
            match *t {
                i64::MIN => format!("'-infinity'::{ty}"),
                i64::MAX => format!("'infinity'::{ty}"),
                t => {
                    let (days, us) = (t.div_euclid(86_400_000_000), t.rem_euclid(86_400_000_000));
                    let base = if ty == "timestamp" {
                        "'2000-01-01 00:00:00'::timestamp"
                    } else {
                        "'2000-01-01 00:00:00+00'::timestamptz"
                    };
                    format!(
                        "({base} + '{days} days'::interval + '{}'::interval)",
                        time_text(us)
                    )
                }
            }
        }
        V::Timetz(t) => {
            let east = -t.zone;
            let sign = if east < 0 { '-' } else { '+' };
            let e = east.abs();
            format!(
                "'{}{sign}{:02}:{:02}:{:02}'::timetz",
                time_text(t.time),
                e / 3600,
                e / 60 % 60,
                e % 60
            )
        }
        V::Interval(i) => {
            let (m, d, us) = interval_fields(i.cmp_value(), spelling);
            format!(
                "('{m} mons {d} days'::interval + '{}'::interval)",
                time_text(us)
            )
        }
        V::Inet(n) => format!("'{}'::inet", addr_text(n)),
        V::Cidr(n) => {
            debug_assert!(
                n.address()
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b & !netmask_byte(n.bits, i) == 0)
            );
            format!("'{}'::cidr", addr_text(n))
        }
        V::Macaddr(m) => format!("'{}'::macaddr", colon_hex(m)),
        V::Macaddr8(m) => format!("'{}'::macaddr8", colon_hex(m)),
        V::Bit(b) | V::Varbit(b) => {
            let bits: String = (0..b.bit_len as usize)
                .map(|i| {
                    if b.bytes[i / 8] & (0x80 >> (i % 8)) != 0 {
                        '1'
                    } else {
                        '0'
                    }
                })
                .collect();
            let ty = if matches!(v, V::Bit(_)) {
                "bit"
            } else {
                "varbit"
            };
            // A cast to `bit` without a length means bit(1) and pads, so the empty bit
            // string is the bare literal (which has type bit and length 0).
            match (b.bit_len, ty) {
                (0, "bit") => "B''".to_string(),
                (0, _) => "B''::varbit".to_string(),
                (len, _) => format!("B'{bits}'::{ty}({len})"),
            }
        }
        V::Identity(c) => format!("'\\x{}'::bytea::pgtrickle.row_id", to_hex(c.bytes())),
        V::Array(_) | V::Range(_) | V::Multirange(_) | V::Jsonb(_) | V::Record(_) => {
            panic!("structural literals are written by the structural oracle")
        }
    }
}

fn colon_hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every spelling of an interval adds back up to its comparison value, and spellings 0
    /// and 1 differ whenever the months can be split.
    #[test]
    fn interval_spellings_add_up() {
        let day = i128::from(USECS_PER_DAY);
        for c in [
            0i128,
            1,
            -1,
            31 * day + 5,
            -45 * day,
            INTERVAL_RANGE,
            -INTERVAL_RANGE,
        ] {
            for s in 0..3 {
                let (m, d, us) = interval_fields(c, s);
                let back = i128::from(us) + (i128::from(m) * 30 + i128::from(d)) * day;
                assert_eq!(back, c, "{c} spelling {s}");
            }
            assert_ne!(interval_fields(c, 0), interval_fields(c, 1), "{c}");
        }
        assert_eq!(quote("it's"), "'it''s'");
    }
}
