//! SQL literals for generated values, so a PostgreSQL server can judge the same pairs the
//! model judges. Values a server cannot hold (dates past its calendar, invalid UTF-8) are
//! first mapped into its domain by [`representable`]; both sides then use the mapped value.

use super::{Input, model_mask};
use rowid_codec::NumericSign;

/// Labels of the enum type the oracle creates.
pub const ENUM_LABELS: [&str; 6] = ["a", "b", "ab", "ba", "é", "a b"];

/// Maps a generated value into what PostgreSQL can represent.
pub fn representable(v: &Input) -> Input {
    const DAY_RANGE: i32 = 2_000_000; // ±5475 years
    const US_RANGE: i64 = 200_000_000_000_000_000; // ±6337 years
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned().into_bytes();
    match v.clone() {
        Input::Text(b) => Input::Text(text(&b)),
        Input::Varchar(b) => Input::Varchar(text(&b)),
        Input::Bpchar(b) => Input::Bpchar(text(&b)),
        Input::Enum(b) => {
            let i = b.iter().map(|&x| usize::from(x)).sum::<usize>() % ENUM_LABELS.len();
            Input::Enum(ENUM_LABELS[i].as_bytes().to_vec())
        }
        Input::Date(d) if d != i32::MIN && d != i32::MAX => {
            Input::Date(d.rem_euclid(2 * DAY_RANGE) - DAY_RANGE)
        }
        Input::Timestamp(t) if t != i64::MIN && t != i64::MAX => {
            Input::Timestamp(t.rem_euclid(2 * US_RANGE) - US_RANGE)
        }
        Input::Timestamptz(t) if t != i64::MIN && t != i64::MAX => {
            Input::Timestamptz(t.rem_euclid(2 * US_RANGE) - US_RANGE)
        }
        Input::Interval(m, d, us) => Input::Interval(
            m.clamp(-2_000_000_000, 2_000_000_000),
            d.clamp(-2_000_000_000, 2_000_000_000),
            us.rem_euclid(2_000_000_000_000_000) - 1_000_000_000_000_000,
        ),
        other => other,
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
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

fn numeric_text(sign: NumericSign, weight: i16, digits: &[u16]) -> String {
    match sign {
        NumericSign::NaN => return "NaN".into(),
        NumericSign::PositiveInfinity => return "Infinity".into(),
        NumericSign::NegativeInfinity => return "-Infinity".into(),
        _ => {}
    }
    // Groups at exponents weight, weight-1, ...; lay them on a decimal grid.
    let mut int_part = String::new();
    let mut frac_part = String::new();
    let lowest = i32::from(weight) - digits.len() as i32 + 1;
    for exp in (lowest.min(0)..=i32::from(weight).max(0)).rev() {
        let idx = i32::from(weight) - exp;
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
    let sign = if sign == NumericSign::Negative {
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

fn addr_text(n: &rowid_codec::Inet) -> String {
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

/// A SQL expression of the value's type; text types carry `COLLATE "C"`.
pub fn literal(v: &Input) -> String {
    match v {
        Input::Bool(b) => b.to_string(),
        Input::Int2(x) => format!("({x})::int2"),
        Input::Int4(x) => format!("({x})::int4"),
        Input::Int8(x) => format!("({x})::int8"),
        Input::Oid(x) => format!("'{x}'::oid"),
        Input::Float4(x) => format!("'{}'::float4", float_text(f64::from(*x), format!("{x:?}"))),
        Input::Float8(x) => format!("'{}'::float8", float_text(*x, format!("{x:?}"))),
        Input::Numeric(s, w, d) => format!("'{}'::numeric", numeric_text(*s, *w, d)),
        Input::Text(b) => format!(
            "({}::text COLLATE \"C\")",
            quote(&String::from_utf8_lossy(b))
        ),
        Input::Varchar(b) => {
            format!(
                "({}::varchar COLLATE \"C\")",
                quote(&String::from_utf8_lossy(b))
            )
        }
        Input::Bpchar(b) => format!(
            "({}::bpchar COLLATE \"C\")",
            quote(&String::from_utf8_lossy(b))
        ),
        Input::Enum(b) => format!("{}::oracle_enum", quote(&String::from_utf8_lossy(b))),
        Input::Bytea(b) => format!("'\\x{}'::bytea", hex(b)),
        Input::Uuid(u) => format!("'{}'::uuid", hex(u)),
        Input::Date(d) => match *d {
            i32::MIN => "'-infinity'::date".into(),
            i32::MAX => "'infinity'::date".into(),
            d => format!("('2000-01-01'::date + ({d}))"),
        },
        Input::Time(us) => format!("'{}'::time", time_text(*us)),
        Input::Timestamp(t) | Input::Timestamptz(t) => {
            let ty = if matches!(v, Input::Timestamp(_)) {
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
        Input::Timetz(t, z) => {
            let east = -*z;
            let sign = if east < 0 { '-' } else { '+' };
            let e = east.abs();
            format!(
                "'{}{sign}{:02}:{:02}:{:02}'::timetz",
                time_text(*t),
                e / 3600,
                e / 60 % 60,
                e % 60
            )
        }
        Input::Interval(m, d, us) => {
            let sign = if *us < 0 { "-" } else { "" };
            format!(
                "('{m} mons {d} days'::interval + '{sign}{}'::interval)",
                time_text(us.abs())
            )
        }
        Input::IntervalCmp(_) | Input::Identity(_) => unreachable!("not generated for the oracle"),
        Input::Inet(n) => format!("'{}'::inet", addr_text(n)),
        Input::Cidr(n) => {
            debug_assert!(
                n.address()
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b & !model_mask(n.bits, i) == 0)
            );
            format!("'{}'::cidr", addr_text(n))
        }
        Input::Macaddr(m) => format!(
            "'{}'::macaddr",
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        ),
        Input::Macaddr8(m) => format!(
            "'{}'::macaddr8",
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        ),
        Input::Bit(len, bytes) | Input::Varbit(len, bytes) => {
            let bits: String = (0..*len as usize)
                .map(|i| {
                    if bytes[i / 8] & (0x80 >> (i % 8)) != 0 {
                        '1'
                    } else {
                        '0'
                    }
                })
                .collect();
            let ty = if matches!(v, Input::Bit(..)) {
                "bit"
            } else {
                "varbit"
            };
            // A cast to `bit` without a length means bit(1) and pads, so the empty bit
            // string is the bare literal (which has type bit and length 0).
            match (*len, ty) {
                (0, "bit") => "B''".to_string(),
                (0, _) => "B''::varbit".to_string(),
                _ => format!("B'{bits}'::{ty}({len})"),
            }
        }
    }
}
