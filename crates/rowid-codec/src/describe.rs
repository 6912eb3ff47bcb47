//! Human-readable rendering of decoded identities, for diagnostics.
//!
//! The text is for people, not a format: it shows each field's type and value (temporal
//! types in PostgreSQL's internal units, labelled), e.g.
//! `SCAN_KEY(int4 42, text "ab", int8 NULL)`; numerics read as PostgreSQL prints them
//! (`-12.3`, `NaN`). Identities contain reversible source values;
//! callers decide who may see this text.

use alloc::string::String;
use core::fmt::{self, Display, Formatter, Write};

use crate::decode::decode;
use crate::scalar::{IpFamily, NumericSign, OwnedNumeric};
use crate::value::{
    ArrayValue, DecodedIdentity, JsonbValue, OwnedField, OwnedValue, RangeBound, RangeBounds,
};

impl Display for DecodedIdentity {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.domain.name())?;
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{field}")?;
        }
        f.write_char(')')
    }
}

impl Display for OwnedField {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.tag.name())?;
        match &self.value {
            None => f.write_str("NULL"),
            Some(v) => write!(f, "{v}"),
        }
    }
}

fn text(f: &mut Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    match core::str::from_utf8(bytes) {
        Ok(s) => write!(f, "{s:?}"),
        Err(_) => hex(f, bytes),
    }
}

fn hex(f: &mut Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    f.write_str("\\x")?;
    bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
}

fn joined(f: &mut Formatter<'_>, bytes: &[u8], sep: char) -> fmt::Result {
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            f.write_char(sep)?;
        }
        write!(f, "{b:02x}")?;
    }
    Ok(())
}

impl Display for OwnedValue {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            OwnedValue::Bool(v) => write!(f, "{v}"),
            OwnedValue::Int2(v) => write!(f, "{v}"),
            OwnedValue::Int4(v) => write!(f, "{v}"),
            OwnedValue::Date(v) => write!(f, "{v} days from 2000-01-01"),
            OwnedValue::Int8(v) => write!(f, "{v}"),
            OwnedValue::Oid(v) => write!(f, "{v}"),
            OwnedValue::Float4(v) => write!(f, "{v:?}"),
            OwnedValue::Float8(v) => write!(f, "{v:?}"),
            OwnedValue::Numeric(n) => numeric(f, n),
            OwnedValue::Text(v) | OwnedValue::Varchar(v) | OwnedValue::Bpchar(v) => text(f, v),
            OwnedValue::Enum(v) => text(f, v),
            OwnedValue::Bytea(v) => hex(f, v),
            OwnedValue::Uuid(u) => {
                for (i, (a, b)) in [(0, 4), (4, 6), (6, 8), (8, 10), (10, 16)]
                    .into_iter()
                    .enumerate()
                {
                    if i > 0 {
                        f.write_char('-')?;
                    }
                    u[a..b].iter().try_for_each(|x| write!(f, "{x:02x}"))?;
                }
                Ok(())
            }
            OwnedValue::Time(v) => write!(f, "{v} us after midnight"),
            OwnedValue::Timestamp(v) => write!(f, "{v} us from 2000-01-01"),
            OwnedValue::Timestamptz(v) => write!(f, "{v} us from 2000-01-01 UTC"),
            OwnedValue::Timetz(t) => {
                write!(f, "{} us after midnight, zone {} s west", t.time, t.zone)
            }
            OwnedValue::Interval(i) => write!(f, "{} us (months as 30 days)", i.cmp_value()),
            OwnedValue::Inet(n) | OwnedValue::Cidr(n) => {
                match n.family {
                    IpFamily::V4 => {
                        let a = n.address();
                        write!(f, "{}.{}.{}.{}", a[0], a[1], a[2], a[3])?;
                    }
                    IpFamily::V6 => {
                        for (i, pair) in n.address().chunks(2).enumerate() {
                            if i > 0 {
                                f.write_char(':')?;
                            }
                            write!(f, "{:x}", u16::from_be_bytes([pair[0], pair[1]]))?;
                        }
                    }
                }
                write!(f, "/{}", n.bits)
            }
            OwnedValue::Macaddr(m) => joined(f, m, ':'),
            OwnedValue::Macaddr8(m) => joined(f, m, ':'),
            OwnedValue::Bit(b) | OwnedValue::Varbit(b) => {
                f.write_str("B'")?;
                for i in 0..b.bit_len as usize {
                    let bit = b
                        .bytes
                        .get(i / 8)
                        .is_some_and(|byte| byte & (0x80 >> (i % 8)) != 0);
                    f.write_char(if bit { '1' } else { '0' })?;
                }
                f.write_char('\'')
            }
            OwnedValue::Identity(c) => match decode(c.bytes()) {
                Ok(child) => write!(f, "{child}"),
                Err(_) => hex(f, c.bytes()),
            },
            OwnedValue::Array(a) => array(f, a),
            OwnedValue::Range(r) => {
                write!(f, "{} ", r.subtype.name())?;
                match &r.bounds {
                    None => f.write_str("empty"),
                    Some(b) => bounds(f, b),
                }
            }
            OwnedValue::Multirange(m) => {
                write!(f, "{} {{", m.subtype.name())?;
                for (i, b) in m.ranges.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    bounds(f, b)?;
                }
                f.write_char('}')
            }
            OwnedValue::Jsonb(j) => write!(f, "{j}"),
            OwnedValue::Record(r) => {
                f.write_char('(')?;
                for (i, field) in r.fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{field}")?;
                }
                f.write_char(')')
            }
        }
    }
}

/// A numeric as `numeric_out` prints it, without the display scale (which is not part of
/// the value): `0`, `-12.3`, `0.0001`, `NaN`, `Infinity`.
fn numeric(f: &mut Formatter<'_>, n: &OwnedNumeric) -> fmt::Result {
    match n.sign {
        NumericSign::NaN => return f.write_str("NaN"),
        NumericSign::PositiveInfinity => return f.write_str("Infinity"),
        NumericSign::NegativeInfinity => return f.write_str("-Infinity"),
        NumericSign::Positive | NumericSign::Negative => {}
    }
    // Group i has the base-10000 exponent weight - i.
    let weight = i32::from(n.weight);
    let group = |exp: i32| -> u16 {
        usize::try_from(weight - exp)
            .ok()
            .and_then(|i| n.digits.get(i).copied())
            .unwrap_or(0)
    };
    let lowest = weight - n.digits.len() as i32 + 1;
    let mut int_part = String::new();
    for exp in (0..=weight).rev() {
        let g = group(exp);
        if int_part.is_empty() {
            if g != 0 {
                write!(int_part, "{g}")?;
            }
        } else {
            write!(int_part, "{g:04}")?;
        }
    }
    let mut frac_part = String::new();
    for exp in (lowest.min(0)..0).rev() {
        write!(frac_part, "{:04}", group(exp))?;
    }
    let frac_part = frac_part.trim_end_matches('0');
    if int_part.is_empty() && frac_part.is_empty() {
        return f.write_char('0');
    }
    if n.sign == NumericSign::Negative {
        f.write_char('-')?;
    }
    f.write_str(if int_part.is_empty() { "0" } else { &int_part })?;
    if !frac_part.is_empty() {
        write!(f, ".{frac_part}")?;
    }
    Ok(())
}

fn array(f: &mut Formatter<'_>, a: &ArrayValue) -> fmt::Result {
    write!(f, "{}[", a.element.name())?;
    for (i, d) in a.dims.iter().enumerate() {
        if i > 0 {
            f.write_char(',')?;
        }
        write!(
            f,
            "{}:{}",
            d.lower,
            i64::from(d.lower) + i64::from(d.len) - 1
        )?;
    }
    f.write_str("] {")?;
    for (i, e) in a.elements.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        match e {
            None => f.write_str("NULL")?,
            Some(v) => write!(f, "{v}")?,
        }
    }
    f.write_char('}')
}

fn bounds(f: &mut Formatter<'_>, b: &RangeBounds) -> fmt::Result {
    match &b.lower {
        RangeBound::Infinite => f.write_str("(-infinity")?,
        RangeBound::Inclusive(v) => write!(f, "[{v}")?,
        RangeBound::Exclusive(v) => write!(f, "({v}")?,
    }
    f.write_str(", ")?;
    match &b.upper {
        RangeBound::Infinite => f.write_str("infinity)"),
        RangeBound::Inclusive(v) => write!(f, "{v}]"),
        RangeBound::Exclusive(v) => write!(f, "{v})"),
    }
}

impl Display for JsonbValue {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            JsonbValue::Null => f.write_str("null"),
            JsonbValue::Bool(b) => write!(f, "{b}"),
            JsonbValue::String(s) => text(f, s),
            JsonbValue::Number(n) => numeric(f, n),
            JsonbValue::Array(items) => {
                f.write_char('[')?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_char(']')
            }
            JsonbValue::Object(pairs) => {
                f.write_char('{')?;
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    text(f, k)?;
                    write!(f, ": {v}")?;
                }
                f.write_char('}')
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
    use alloc::vec;

    use crate::scalar::{NumericSign, OwnedNumeric};
    use crate::value::{JsonbValue, OwnedValue};

    fn num(sign: NumericSign, weight: i16, digits: &[u16]) -> OwnedValue {
        OwnedValue::Numeric(OwnedNumeric {
            sign,
            weight,
            digits: digits.to_vec(),
        })
    }

    /// Numerics read as `numeric_out` prints them (without the display scale), in fields
    /// and inside jsonb.
    #[test]
    fn numerics_print_as_postgresql_prints_them() {
        use NumericSign::*;
        for (value, text) in [
            (num(Positive, 0, &[1]), "1"),
            (num(Negative, 0, &[12, 3000]), "-12.3"),
            (num(Positive, -1, &[1]), "0.0001"),
            (num(Positive, -2, &[50]), "0.0000005"),
            (num(Positive, 1, &[1]), "10000"),
            (num(Positive, 1, &[1, 2345, 6780]), "12345.678"),
            (num(Positive, 0, &[]), "0"),
            (num(Negative, 3, &[0, 0]), "0"),
            (num(NaN, 0, &[]), "NaN"),
            (num(PositiveInfinity, 0, &[]), "Infinity"),
            (num(NegativeInfinity, 0, &[]), "-Infinity"),
        ] {
            assert_eq!(value.to_string(), text, "{value:?}");
        }
        let one = JsonbValue::Array(vec![JsonbValue::Number(OwnedNumeric {
            sign: NumericSign::Positive,
            weight: 0,
            digits: vec![1],
        })]);
        assert_eq!(OwnedValue::Jsonb(one).to_string(), "[1]");
    }
}
