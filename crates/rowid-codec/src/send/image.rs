//! Row images: a column's send format written as the lossless JSON of spec/row-images.md.
//!
//! An identity needs only what equality sees, so the encoder's inputs are canonical: a
//! numeric's display scale, an interval's split into months, days and microseconds and a
//! jsonb number's written scale do not reach it. A row image must give the value back
//! exactly, so this module reads the send format for itself where the encoder's inputs would
//! lose something (numeric, interval, jsonb) and reuses the scalar parsers everywhere else.
//! Structural values are walked with the same header checks and the same nesting and element
//! limits as [`super::owned_from_send`]. On any error nothing is appended: the caller carries
//! the value as its send form instead (spec/row-images.md §3).

use alloc::string::String;
use core::fmt::Write as _;

use super::scalar::bad;
use super::{
    JSONB_SEND_VERSION, Reader, array_header, bits_from_send, bool_from_send, date_from_send,
    float4_from_send, float8_from_send, inet_from_send, int2_from_send, int4_from_send,
    int8_from_send, jsonb_from_text, macaddr_from_send, macaddr8_from_send, oid_from_send,
    range_flags, range_flags_of, text_from_send, time_from_send, timestamp_from_send,
    timetz_from_send, uuid_from_send,
};
use crate::error::{Error, Result};
use crate::limits::MAX_FIELDS;
use crate::scalar::IpFamily;
use crate::structure::{Shape, check_count, check_depth};
use crate::tag::TypeTag;

/// Appends the JSON of a value of `shape` given in its send format `b`. On an error `out` is
/// left as it was.
pub fn write_image_json(shape: &Shape, b: &[u8], out: &mut String) -> Result<()> {
    let start = out.len();
    let result = value(shape, b, 2, out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// A PostgreSQL timestamp (microseconds since 2000-01-01) as the image writes it:
/// `YYYY-MM-DDTHH:MM:SS.ffffff`, with `Z` appended when `utc` (a `timestamptz`); the
/// infinities as `infinity` and `-infinity`.
pub fn timestamp_text(micros: i64, utc: bool) -> String {
    let mut s = String::with_capacity(28);
    push_timestamp(&mut s, micros, utc);
    s
}

fn value(shape: &Shape, b: &[u8], level: u32, out: &mut String) -> Result<()> {
    match shape {
        Shape::Scalar(tag) => scalar(*tag, b, out),
        Shape::Array(element) => {
            check_depth(level)?;
            array(element, b, level, out)
        }
        Shape::Range(subtype) => {
            check_depth(level)?;
            let mut r = Reader::new(TypeTag::Range, b);
            range_body(subtype, &mut r, level, out)?;
            r.finish()
        }
        Shape::Multirange(subtype) => {
            check_depth(level)?;
            multirange(subtype, b, level, out)
        }
        Shape::Jsonb => {
            check_depth(level)?;
            jsonb(b, out)
        }
        Shape::Record(fields) => {
            check_depth(level)?;
            record(fields, b, level, out)
        }
    }
}

fn scalar(tag: TypeTag, b: &[u8], out: &mut String) -> Result<()> {
    match tag {
        TypeTag::Bool => out.push_str(if bool_from_send(b)? { "true" } else { "false" }),
        TypeTag::Int2 => push_display(out, int2_from_send(b)?),
        TypeTag::Int4 => push_display(out, int4_from_send(b)?),
        TypeTag::Oid => push_display(out, oid_from_send(b)?),
        TypeTag::Int8 => {
            out.push('"');
            push_display(out, int8_from_send(b)?);
            out.push('"');
        }
        TypeTag::Float4 => {
            let f = float4_from_send(b)?;
            push_float(
                out,
                f.is_nan(),
                f.is_infinite(),
                f.is_sign_negative(),
                || alloc::format!("{f:?}"),
            );
        }
        TypeTag::Float8 => {
            let f = float8_from_send(b)?;
            push_float(
                out,
                f.is_nan(),
                f.is_infinite(),
                f.is_sign_negative(),
                || alloc::format!("{f:?}"),
            );
        }
        TypeTag::Numeric => numeric(b, out)?,
        TypeTag::Text | TypeTag::Varchar | TypeTag::Bpchar | TypeTag::Enum => {
            write_json_string(out, utf8(tag, text_from_send(tag, b)?)?);
        }
        TypeTag::Bytea | TypeTag::ChildIdentity => {
            out.push('"');
            crate::hex::push(out, b);
            out.push('"');
        }
        TypeTag::Uuid => {
            let u = uuid_from_send(b)?;
            out.push('"');
            for (i, chunk) in [&u[0..4], &u[4..6], &u[6..8], &u[8..10], &u[10..16]]
                .iter()
                .enumerate()
            {
                if i > 0 {
                    out.push('-');
                }
                crate::hex::push(out, chunk);
            }
            out.push('"');
        }
        TypeTag::Date => {
            let d = date_from_send(b)?;
            out.push('"');
            match d {
                i32::MIN => out.push_str("-infinity"),
                i32::MAX => out.push_str("infinity"),
                d => push_date(out, i64::from(d)),
            }
            out.push('"');
        }
        TypeTag::Time => {
            out.push('"');
            push_time(out, time_from_send(b)?);
            out.push('"');
        }
        TypeTag::Timetz => {
            let t = timetz_from_send(b)?;
            out.push('"');
            push_time(out, t.time);
            // PostgreSQL keeps the zone in seconds west of UTC; the text is east of UTC.
            let east = -i64::from(t.zone);
            out.push(if east < 0 { '-' } else { '+' });
            let a = east.unsigned_abs();
            let _ = write!(out, "{:02}:{:02}:{:02}", a / 3600, a / 60 % 60, a % 60);
            out.push('"');
        }
        TypeTag::Timestamp | TypeTag::Timestamptz => {
            out.push('"');
            push_timestamp(out, timestamp_from_send(b)?, tag == TypeTag::Timestamptz);
            out.push('"');
        }
        TypeTag::Interval => interval(b, out)?,
        TypeTag::Inet | TypeTag::Cidr => {
            let i = inet_from_send(tag, b)?;
            out.push('"');
            match i.family {
                IpFamily::V4 => {
                    let a = &i.addr[..4];
                    let _ = write!(out, "{}.{}.{}.{}", a[0], a[1], a[2], a[3]);
                }
                IpFamily::V6 => push_ipv6(out, &i.addr),
            }
            let _ = write!(out, "/{}\"", i.bits);
        }
        TypeTag::Macaddr => push_mac(out, &macaddr_from_send(b)?),
        TypeTag::Macaddr8 => push_mac(out, &macaddr8_from_send(b)?),
        TypeTag::Bit | TypeTag::Varbit => {
            let bits = bits_from_send(tag, b)?;
            out.push('"');
            for i in 0..bits.bit_len as usize {
                let byte = bits.bytes.get(i / 8).copied().unwrap_or(0);
                out.push(if byte & (0x80 >> (i % 8)) != 0 {
                    '1'
                } else {
                    '0'
                });
            }
            out.push('"');
        }
        TypeTag::Array
        | TypeTag::Range
        | TypeTag::Multirange
        | TypeTag::Jsonb
        | TypeTag::Record => {
            return Err(bad(tag, 0, "not a scalar shape"));
        }
    }
    Ok(())
}

fn push_display(out: &mut String, v: impl core::fmt::Display) {
    let _ = write!(out, "{v}");
}

/// A float: a JSON number (the shortest text that reads back to the same bits, `-0.0` for
/// negative zero), or the strings `NaN`, `Infinity`, `-Infinity`.
fn push_float(
    out: &mut String,
    nan: bool,
    infinite: bool,
    negative: bool,
    text: impl FnOnce() -> String,
) {
    match (nan, infinite, negative) {
        (true, _, _) => out.push_str("\"NaN\""),
        (false, true, false) => out.push_str("\"Infinity\""),
        (false, true, true) => out.push_str("\"-Infinity\""),
        _ => out.push_str(&text()),
    }
}

fn utf8(tag: TypeTag, b: &[u8]) -> Result<&str> {
    core::str::from_utf8(b).map_err(|e| bad(tag, e.valid_up_to(), "not valid UTF-8"))
}

/// Appends `s` as a JSON string: `"` and `\` escaped, control characters as `\u00XX` (or
/// their short form), so the text never holds a line break.
pub fn write_json_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn push_mac(out: &mut String, b: &[u8]) {
    out.push('"');
    for (i, x) in b.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        crate::hex::push(out, core::slice::from_ref(x));
    }
    out.push('"');
}

/// RFC 5952 text: lowercase groups without leading zeros, the longest run of two or more
/// zero groups (the first of equal runs) as `::`.
fn push_ipv6(out: &mut String, addr: &[u8; 16]) {
    let groups: [u16; 8] =
        core::array::from_fn(|i| u16::from_be_bytes([addr[2 * i], addr[2 * i + 1]]));
    let (mut best, mut best_len, mut run, mut run_len) = (8, 0, 0, 0);
    for (i, &g) in groups.iter().enumerate() {
        if g == 0 {
            if run_len == 0 {
                run = i;
            }
            run_len += 1;
            if run_len > best_len {
                (best, best_len) = (run, run_len);
            }
        } else {
            run_len = 0;
        }
    }
    if best_len < 2 {
        best = 8;
    }
    let mut i = 0;
    while i < 8 {
        if i == best {
            out.push_str("::");
            i += best_len;
            continue;
        }
        if i > 0 && i != best + best_len {
            out.push(':');
        }
        let _ = write!(out, "{:x}", groups[i]);
        i += 1;
    }
}

/// Microseconds per day.
const USECS_PER_DAY: i64 = 86_400_000_000;

/// Days from 1970-01-01 to 2000-01-01.
const PG_EPOCH_DAYS: i64 = 10_957;

/// Days since 2000-01-01 as `YYYY-MM-DD`, astronomical years (year 0 is 1 BC; negative years
/// with a `-`), at least four digits.
fn push_date(out: &mut String, days: i64) {
    let (y, m, d) = civil_from_days(days + PG_EPOCH_DAYS);
    if y < 0 {
        let _ = write!(out, "-{:04}-{m:02}-{d:02}", -y);
    } else {
        let _ = write!(out, "{y:04}-{m:02}-{d:02}");
    }
}

fn push_time(out: &mut String, micros: i64) {
    let secs = micros / 1_000_000;
    let _ = write!(
        out,
        "{:02}:{:02}:{:02}.{:06}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        micros % 1_000_000
    );
}

fn push_timestamp(out: &mut String, micros: i64, utc: bool) {
    match micros {
        i64::MIN => out.push_str("-infinity"),
        i64::MAX => out.push_str("infinity"),
        t => {
            push_date(out, t.div_euclid(USECS_PER_DAY));
            out.push('T');
            push_time(out, t.rem_euclid(USECS_PER_DAY));
            if utc {
                out.push('Z');
            }
        }
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day) (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `numeric_send` as PostgreSQL's `numeric_out` prints it, with the display scale the value
/// carries (`1.50` stays `1.50`), as a JSON string; `NaN`, `Infinity`, `-Infinity`.
fn numeric(b: &[u8], out: &mut String) -> Result<()> {
    let t = TypeTag::Numeric;
    // The parser checks the header, the sign word and every group.
    let n = super::numeric_from_send(b)?;
    let dscale = i16::from_be_bytes([b[6], b[7]]);
    let dscale = usize::try_from(dscale).map_err(|_| bad(t, 6, "negative display scale"))?;
    out.push('"');
    match n.sign {
        crate::NumericSign::NaN => out.push_str("NaN"),
        crate::NumericSign::PositiveInfinity => out.push_str("Infinity"),
        crate::NumericSign::NegativeInfinity => out.push_str("-Infinity"),
        sign => {
            if sign == crate::NumericSign::Negative {
                out.push('-');
            }
            let weight = i32::from(n.weight);
            let group = |w: i32| -> u16 {
                usize::try_from(weight - w)
                    .ok()
                    .and_then(|i| n.digits.get(i))
                    .unwrap_or(0)
            };
            if weight < 0 {
                out.push('0');
            } else {
                let _ = write!(out, "{}", group(weight));
                for w in (0..weight).rev() {
                    let _ = write!(out, "{:04}", group(w));
                }
            }
            if dscale > 0 {
                out.push('.');
                let mut written = 0;
                let mut w = -1;
                while written < dscale {
                    let digits = alloc::format!("{:04}", group(w));
                    let take = (dscale - written).min(4);
                    out.push_str(&digits[..take]);
                    written += take;
                    w -= 1;
                }
            }
        }
    }
    out.push('"');
    Ok(())
}

/// `interval_send`: int64 microseconds, int32 days, int32 months, as
/// `{"months": m, "days": d, "microseconds": "us"}`.
fn interval(b: &[u8], out: &mut String) -> Result<()> {
    let t = TypeTag::Interval;
    if b.len() != 16 {
        return Err(if b.len() > 16 {
            Error::TrailingBytes { offset: 16 }
        } else {
            bad(t, b.len(), "interval is shorter than 16 bytes")
        });
    }
    let micros = i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let days = i32::from_be_bytes([b[8], b[9], b[10], b[11]]);
    let months = i32::from_be_bytes([b[12], b[13], b[14], b[15]]);
    let _ = write!(
        out,
        "{{\"months\":{months},\"days\":{days},\"microseconds\":\"{micros}\"}}"
    );
    Ok(())
}

/// `jsonb_send`: a version byte and jsonb's own text, which is JSON with numbers written as
/// jsonb stores them. Written as a JSON *string* holding that text, once it parses, is UTF-8
/// and holds no control byte (jsonb's output never does): a jsonb `null` is then the string
/// `"null"`, never the `null` of SQL NULL, also inside arrays and composites (row images
/// format 2; format 1 wrote the value itself, and the two could not be told apart).
fn jsonb(b: &[u8], out: &mut String) -> Result<()> {
    let t = TypeTag::Jsonb;
    match b.first() {
        Some(&JSONB_SEND_VERSION) => {}
        Some(_) => return Err(bad(t, 0, "unknown jsonb send version")),
        None => return Err(bad(t, 0, "empty jsonb send value")),
    }
    let text = &b[1..];
    if let Some(i) = text.iter().position(|&c| c < 0x20) {
        return Err(bad(t, 1 + i, "a control byte in jsonb text"));
    }
    let text = utf8(t, text)?;
    jsonb_from_text(text.as_bytes())?;
    write_json_string(out, text);
    Ok(())
}

/// An array: nested JSON arrays, one level per dimension, when every lower bound is 1 and
/// an element's JSON is never an array itself (scalars, jsonb strings and ranges); otherwise
/// (composite and multirange elements, other bounds) `{"lower_bounds": [...], "values":
/// nested}`, whose bounds also say how many levels are dimensions.
fn array(element: &Shape, b: &[u8], level: u32, out: &mut String) -> Result<()> {
    let mut r = Reader::new(TypeTag::Array, b);
    let (dims, _) = array_header(&mut r)?;
    let element_is_array = matches!(element, Shape::Record(_) | Shape::Multirange(_));
    let plain = dims.iter().all(|d| d.lower == 1) && !element_is_array;
    if !plain {
        out.push_str("{\"lower_bounds\":[");
        for (i, d) in dims.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_display(out, d.lower);
        }
        out.push_str("],\"values\":");
    }
    if dims.is_empty() {
        out.push_str("[]");
    } else {
        nested(element, &dims, &mut r, level, out)?;
    }
    if !plain {
        out.push('}');
    }
    r.finish()
}

/// The elements of `dims` (outermost first) from `r`, as nested JSON arrays.
fn nested(
    element: &Shape,
    dims: &[crate::structure::ArrayDim],
    r: &mut Reader<'_>,
    level: u32,
    out: &mut String,
) -> Result<()> {
    let Some((first, inner)) = dims.split_first() else {
        return match r.item(true)? {
            None => {
                out.push_str("null");
                Ok(())
            }
            Some(e) => value(element, e, level + 1, out),
        };
    };
    out.push('[');
    for i in 0..first.len {
        if i > 0 {
            out.push(',');
        }
        nested(element, inner, r, level, out)?;
    }
    out.push(']');
    Ok(())
}

/// A range from `r`: `{"empty":true}`, or its bounds with `null` for an unbounded side.
fn range_body(subtype: &Shape, r: &mut Reader<'_>, level: u32, out: &mut String) -> Result<()> {
    use range_flags::*;
    let flags = range_flags_of(r)?;
    if flags & EMPTY != 0 {
        out.push_str("{\"empty\":true}");
        return Ok(());
    }
    for (name, infinite) in [("{\"lower\":", LB_INF), (",\"upper\":", UB_INF)] {
        out.push_str(name);
        if flags & infinite != 0 {
            out.push_str("null");
        } else {
            let bytes = r.item(false)?.unwrap_or_default();
            value(subtype, bytes, level + 1, out)?;
        }
    }
    let _ = write!(
        out,
        ",\"lower_inc\":{},\"upper_inc\":{}}}",
        flags & LB_INC != 0,
        flags & UB_INC != 0
    );
    Ok(())
}

fn multirange(subtype: &Shape, b: &[u8], level: u32, out: &mut String) -> Result<()> {
    let t = TypeTag::Multirange;
    let mut r = Reader::new(t, b);
    let n = r.i32("range count is truncated")?;
    let n = usize::try_from(n).map_err(|_| bad(t, 0, "negative range count"))?;
    check_count(n)?;
    out.push('[');
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        let at = r.pos;
        let bytes = r.item(false)?.unwrap_or_default();
        if bytes.first().is_some_and(|f| f & range_flags::EMPTY != 0) {
            return Err(bad(t, at, "a multirange holds an empty range"));
        }
        let mut inner = Reader::new(t, bytes);
        range_body(subtype, &mut inner, level, out)?;
        inner.finish()?;
    }
    out.push(']');
    r.finish()
}

/// A composite: a JSON array of its attributes' values, in attribute order.
fn record(shapes: &[Shape], b: &[u8], level: u32, out: &mut String) -> Result<()> {
    let t = TypeTag::Record;
    let mut r = Reader::new(t, b);
    let n = r.i32("column count is truncated")?;
    if usize::try_from(n).ok() != Some(shapes.len()) || shapes.len() > MAX_FIELDS as usize {
        return Err(bad(t, 0, "column count differs from the composite type's"));
    }
    out.push('[');
    for (i, shape) in shapes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        r.take(4, "column type is truncated")?;
        match r.item(true)? {
            None => out.push_str("null"),
            Some(bytes) => value(shape, bytes, level + 1, out)?,
        }
    }
    out.push(']');
    r.finish()
}
