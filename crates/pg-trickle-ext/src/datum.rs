//! Datum helpers: PostgreSQL's in-memory representations of the scalar families to codec
//! values without copies, enum labels from the syscache, and the one copy out (`to_bytea`).
//!
//! A plain variable-width value (uncompressed, inline) is read in place without calling into
//! PostgreSQL; anything else is detoasted with `pg_detoast_datum_packed`.

use pgrx::pg_sys;
use pgrx::varlena::{varatt_is_1b, varatt_is_1b_e, varatt_is_4b_u, vardata_any, varsize_any_exhdr};
use rowid_codec::{
    BitString, Digits, Inet, Interval, IpFamily, Numeric, NumericSign, Timetz, TypeTag, Value,
};

/// True when a varlena can be read in place: a plain 4-byte header or a short 1-byte header,
/// neither compressed nor stored out of line (`!VARATT_IS_EXTENDED`, for packed reads).
///
/// # Safety
/// `v` must point at a varlena header.
unsafe fn is_plain(v: *const pg_sys::varlena) -> bool {
    // SAFETY: the header byte(s) are readable; these helpers only inspect them.
    unsafe { varatt_is_4b_u(v) || (varatt_is_1b(v) && !varatt_is_1b_e(v)) }
}

/// A varlena's payload, in place when it is plain (no FFI call on the hot path), else
/// detoasted.
///
/// # Safety
/// `datum` must be a non-NULL datum of a varlena type; the returned slice lives as long as
/// the current memory context (the detoasted copy, if any, is palloc'd there).
pub unsafe fn varlena_bytes<'a>(datum: pg_sys::Datum) -> &'a [u8] {
    // SAFETY: the caller guarantees a varlena datum; a plain one is its own payload, and
    // pg_detoast_datum_packed returns a valid, possibly short-header varlena otherwise;
    // vardata_any/varsize_any_exhdr describe either.
    unsafe {
        let mut v = datum.cast_mut_ptr::<pg_sys::varlena>();
        if !is_plain(v) {
            v = pg_sys::pg_detoast_datum_packed(v);
        }
        std::slice::from_raw_parts(vardata_any(v).cast::<u8>(), varsize_any_exhdr(v))
    }
}

/// A composite datum as a tuple header, detoasted only when it is not plain.
///
/// # Safety
/// `datum` must be a non-NULL composite datum.
pub unsafe fn tuple_header(datum: pg_sys::Datum) -> pg_sys::HeapTupleHeader {
    // SAFETY: a composite datum is a varlena whose plain form is a HeapTupleHeaderData;
    // anything else is detoasted (and flattened) by pg_detoast_datum.
    unsafe {
        let v = datum.cast_mut_ptr::<pg_sys::varlena>();
        if varatt_is_4b_u(v) {
            v.cast()
        } else {
            pg_sys::pg_detoast_datum(v).cast()
        }
    }
}

/// `len` bytes at a pass-by-reference datum.
///
/// # Safety
/// `datum` must point at a fixed-length value of at least `len` bytes.
unsafe fn fixed_bytes<'a>(datum: pg_sys::Datum, len: usize) -> &'a [u8] {
    // SAFETY: guaranteed by the caller (fixed-length by-reference types: uuid, macaddr, ...).
    unsafe { std::slice::from_raw_parts(datum.cast_mut_ptr::<u8>(), len) }
}

/// A `uuid` datum's 16 bytes.
///
/// # Safety
/// `datum` must be a non-NULL `uuid` (a pointer to `pg_uuid_t`).
#[inline]
pub unsafe fn uuid(datum: pg_sys::Datum) -> [u8; 16] {
    // SAFETY: guaranteed by the caller; pg_uuid_t is 16 bytes, read unaligned.
    unsafe { datum.cast_mut_ptr::<[u8; 16]>().read_unaligned() }
}

fn array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[..N]);
    out
}

fn ne_i32(b: &[u8]) -> i32 {
    i32::from_ne_bytes(array(b))
}

fn ne_i64(b: &[u8]) -> i64 {
    i64::from_ne_bytes(array(b))
}

/// Reads `numeric` (numeric.c: `NumericShort` / `NumericLong` headers).
fn numeric(body: &[u8]) -> Option<Numeric<'_>> {
    const SIGN_MASK: u16 = 0xC000;
    const SHORT: u16 = 0x8000;
    const SPECIAL: u16 = 0xC000;
    let header = u16::from_ne_bytes(array(body.get(..2)?));
    let flags = header & SIGN_MASK;
    if flags == SPECIAL {
        let sign = match header & 0xF000 {
            0xC000 => NumericSign::NaN,
            0xD000 => NumericSign::PositiveInfinity,
            0xF000 => NumericSign::NegativeInfinity,
            _ => return None,
        };
        return Some(Numeric::special(sign));
    }
    let (negative, weight, digits) = if flags == SHORT {
        // Short form: sign bit 0x2000, 7-bit two's-complement weight in the low bits.
        let weight = if header & 0x0040 != 0 {
            (header & 0x003F) as i16 - 64
        } else {
            (header & 0x003F) as i16
        };
        (header & 0x2000 != 0, weight, body.get(2..)?)
    } else {
        let weight = i16::from_ne_bytes(array(body.get(2..4)?));
        (flags == 0x4000, weight, body.get(4..)?)
    };
    Some(Numeric::finite(
        negative,
        weight,
        Digits::native_bytes(digits)?,
    ))
}

/// Reads `inet`/`cidr` (network.c: `inet_struct` = family, bits, address).
fn inet(body: &[u8]) -> Option<Inet> {
    let family = IpFamily::from_byte(*body.first()?)?;
    let bits = *body.get(1)?;
    let addr = body.get(2..2 + family.addr_len())?;
    let mut full = [0u8; 16];
    full[..addr.len()].copy_from_slice(addr);
    Some(Inet {
        family,
        bits,
        addr: full,
    })
}

/// Reads `bit`/`varbit` (varbit.h: int32 bit length, packed bytes).
fn bits(body: &[u8]) -> Option<BitString<'_>> {
    let len = u32::try_from(ne_i32(body.get(..4)?)).ok()?;
    Some(BitString {
        bit_len: len,
        bytes: body.get(4..)?,
    })
}

/// A datum the reader could not interpret (a corrupted or foreign value).
#[derive(Debug)]
pub struct Malformed;

/// Reads a non-NULL, non-enum datum of type `tag` as a codec value.
///
/// # Safety
/// `datum` must be a valid, non-NULL datum of the base type the registry resolved to `tag`.
pub unsafe fn read<'a>(tag: TypeTag, datum: pg_sys::Datum) -> Result<Value<'a>, Malformed> {
    let raw = datum.value();
    // SAFETY (for every arm): the caller guarantees that `datum` is of the type `tag` was
    // resolved from, so by-value types read the Datum word and by-reference types point at
    // their documented C representation.
    Ok(unsafe {
        match tag {
            TypeTag::Bool => Value::Bool(raw != 0),
            TypeTag::Int2 => Value::Int2(raw as i16),
            TypeTag::Int4 => Value::Int4(raw as i32),
            TypeTag::Date => Value::Date(raw as i32),
            TypeTag::Oid => Value::Oid(raw as u32),
            TypeTag::Int8 => Value::Int8(raw as i64),
            TypeTag::Time => Value::Time(raw as i64),
            TypeTag::Timestamp => Value::Timestamp(raw as i64),
            TypeTag::Timestamptz => Value::Timestamptz(raw as i64),
            TypeTag::Float4 => Value::Float4(f32::from_bits(raw as u32)),
            TypeTag::Float8 => Value::Float8(f64::from_bits(raw as u64)),
            TypeTag::Numeric => Value::Numeric(numeric(varlena_bytes(datum)).ok_or(Malformed)?),
            TypeTag::Text => Value::Text(varlena_bytes(datum)),
            TypeTag::Varchar => Value::Varchar(varlena_bytes(datum)),
            TypeTag::Bpchar => Value::Bpchar(varlena_bytes(datum)),
            TypeTag::Bytea => Value::Bytea(varlena_bytes(datum)),
            TypeTag::Uuid => Value::Uuid(array(fixed_bytes(datum, 16))),
            TypeTag::Macaddr => Value::Macaddr(array(fixed_bytes(datum, 6))),
            TypeTag::Macaddr8 => Value::Macaddr8(array(fixed_bytes(datum, 8))),
            TypeTag::Timetz => {
                // TimeTzADT: int64 time, int32 zone.
                let b = fixed_bytes(datum, 12);
                Value::Timetz(Timetz {
                    time: ne_i64(&b[..8]),
                    zone: ne_i32(&b[8..12]),
                })
            }
            TypeTag::Interval => {
                // Interval: int64 time, int32 day, int32 month.
                let b = fixed_bytes(datum, 16);
                Value::Interval(Interval::from_fields(
                    ne_i32(&b[12..16]),
                    ne_i32(&b[8..12]),
                    ne_i64(&b[..8]),
                ))
            }
            TypeTag::Inet => Value::Inet(inet(varlena_bytes(datum)).ok_or(Malformed)?),
            TypeTag::Cidr => Value::Cidr(inet(varlena_bytes(datum)).ok_or(Malformed)?),
            TypeTag::Bit => Value::Bit(bits(varlena_bytes(datum)).ok_or(Malformed)?),
            TypeTag::Varbit => Value::Varbit(bits(varlena_bytes(datum)).ok_or(Malformed)?),
            // Enums go through `catalog::with_enum_label`, child identities and structures through
            // `reader::Reader`.
            TypeTag::Enum
            | TypeTag::ChildIdentity
            | TypeTag::Array
            | TypeTag::Range
            | TypeTag::Multirange
            | TypeTag::Jsonb
            | TypeTag::Record => return Err(Malformed),
        }
    })
}

/// Copies finished identity bytes into a palloc'd bytea (the only copy per call).
pub fn to_bytea(bytes: &[u8]) -> *mut pg_sys::bytea {
    let len = bytes.len() + pg_sys::VARHDRSZ;
    // SAFETY: palloc returns len writable bytes in the current (result) memory context; the
    // header is set before the payload is copied into it.
    unsafe {
        let out = pg_sys::palloc(len) as *mut pg_sys::bytea;
        pgrx::set_varsize_4b(out.cast(), len as i32);
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            pgrx::vardata_4b(out.cast()).cast_mut().cast::<u8>(),
            bytes.len(),
        );
        out
    }
}
