//! Baseline (a): the V1 row identity of pg_trickle. Each field is formatted as PostgreSQL
//! text (what `::TEXT` produces under default settings), then XXH3-64 with seed
//! `0x517cc1b727220a95` runs over `version u16 | count u64 | (len u64 | bytes)*`, where a
//! NULL field is the length `u64::MAX` and no bytes (all little-endian).

use std::fmt::Write;

use crate::workload::{Field, Workload};

/// The V1 hash seed.
pub const SEED: u64 = 0x517c_c1b7_2722_0a95;
/// The V1 framing version.
pub const VERSION: u16 = 1;

/// Scratch buffers reused across rows, as a C implementation would.
#[derive(Default)]
pub struct Scratch {
    framed: Vec<u8>,
    text: String,
}

/// The V1 identity of `w`.
pub fn hash(w: &Workload, s: &mut Scratch) -> u64 {
    s.framed.clear();
    s.framed.extend_from_slice(&VERSION.to_le_bytes());
    s.framed
        .extend_from_slice(&(w.fields.len() as u64).to_le_bytes());
    for f in &w.fields {
        s.text.clear();
        if format_text(f, &mut s.text) {
            s.framed
                .extend_from_slice(&(s.text.len() as u64).to_le_bytes());
            s.framed.extend_from_slice(s.text.as_bytes());
        } else {
            s.framed.extend_from_slice(&u64::MAX.to_le_bytes());
        }
    }
    xxhash_rust::xxh3::xxh3_64_with_seed(&s.framed, SEED)
}

/// Civil date (year, month, day) of a day count since 2000-01-01.
fn civil(days_since_2000: i64) -> (i64, u32, u32) {
    // Days since 0000-03-01, then the proleptic Gregorian era arithmetic.
    let z = days_since_2000 + 730_425;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn time_of_day(out: &mut String, micros: i64) {
    let (secs, frac) = (micros / 1_000_000, micros % 1_000_000);
    let _ = write!(
        out,
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    if frac != 0 {
        let mut f = format!("{frac:06}");
        while f.ends_with('0') {
            f.pop();
        }
        let _ = write!(out, ".{f}");
    }
}

/// Appends PostgreSQL's text output of `f` (DateStyle ISO, TimeZone UTC, IntervalStyle
/// postgres); false for NULL.
pub fn format_text(f: &Field, out: &mut String) -> bool {
    match f {
        Field::Int4(v) => {
            let _ = write!(out, "{v}");
        }
        Field::Int8(v) => {
            let _ = write!(out, "{v}");
        }
        Field::Uuid(u) => {
            for (i, b) in u.iter().enumerate() {
                if matches!(i, 4 | 6 | 8 | 10) {
                    out.push('-');
                }
                let _ = write!(out, "{b:02x}");
            }
        }
        Field::Text(s) => out.push_str(s),
        Field::Numeric { text, .. } => out.push_str(text),
        Field::Interval(months, days, micros) => {
            let (y, m) = (months / 12, months % 12);
            if y != 0 {
                let _ = write!(out, "{y} year{} ", if y == 1 { "" } else { "s" });
            }
            if m != 0 {
                let _ = write!(out, "{m} mon{} ", if m == 1 { "" } else { "s" });
            }
            if *days != 0 {
                let _ = write!(out, "{days} day{} ", if *days == 1 { "" } else { "s" });
            }
            time_of_day(out, *micros);
        }
        Field::Bool(b) => out.push(if *b { 't' } else { 'f' }),
        Field::Timestamptz(t) => {
            let (days, micros) = (t.div_euclid(86_400_000_000), t.rem_euclid(86_400_000_000));
            let (y, m, d) = civil(days);
            let _ = write!(out, "{y:04}-{m:02}-{d:02} ");
            time_of_day(out, micros);
            out.push_str("+00");
        }
        Field::Float8(x) => {
            let _ = write!(out, "{x}");
        }
        Field::Date(d) => {
            let (y, m, dd) = civil(i64::from(*d));
            let _ = write!(out, "{y:04}-{m:02}-{dd:02}");
        }
        Field::Null(_) => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: &Field) -> String {
        let mut s = String::new();
        format_text(f, &mut s);
        s
    }

    /// The texts are PostgreSQL's own output for these values (checked in psql with
    /// TimeZone UTC and the default DateStyle/IntervalStyle).
    #[test]
    fn texts_are_postgresql_output() {
        assert_eq!(text(&Field::Date(0)), "2000-01-01");
        assert_eq!(text(&Field::Date(8_766)), "2024-01-01");
        assert_eq!(text(&Field::Date(-1)), "1999-12-31");
        assert_eq!(
            text(&Field::Timestamptz(757_382_400_123_456)),
            "2024-01-01 00:00:00.123456+00"
        );
        assert_eq!(
            text(&Field::Interval(14, 3, 14_706_789_000)),
            "1 year 2 mons 3 days 04:05:06.789"
        );
        assert_eq!(
            text(&Field::Uuid([0xa0; 16])),
            "a0a0a0a0-a0a0-a0a0-a0a0-a0a0a0a0a0a0"
        );
        assert_eq!(text(&Field::Float8(3.25)), "3.25");
    }
}
