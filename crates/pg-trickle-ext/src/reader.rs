//! The Datum reader: how to read a value of one field's type, for every family. Scalars are
//! read in place ([`crate::datum`]); enum labels come from the ENUMOID syscache; child
//! identities are validated; the structural families (spec/wire-format.md §6.3–§6.7:
//! arrays, ranges, multiranges, jsonb and composites) are read from PostgreSQL's own
//! representations into the codec's owned trees.
//!
//! A [`Reader`] is built once per call site from the type's catalog entry and the registry's
//! resolved [`Shape`]; per row it only walks the value (no catalog access except the ENUMOID
//! syscache for enum labels).

use pgrx::pg_sys;
use rowid_codec::structure::{ArrayDim, Shape};
use rowid_codec::value::{
    ArrayValue, JsonbValue, MultirangeValue, RangeBound, RangeBounds, RangeValue, RecordValue,
};
use rowid_codec::{
    ChildIdentity, IdentityEncoder, OwnedChildIdentity, OwnedField, OwnedNumeric, OwnedValue,
    TypeTag, Value,
};

use crate::catalog::{
    self, ArrayElement, array_element, attribute, base_type, multirange_range_cache, range_cache,
    row_descriptor,
};
use crate::datum::{self, Malformed};

/// Why a field's value could not be written.
#[derive(Debug)]
pub enum FieldError {
    /// The datum is not a valid value of its type (corrupted or foreign).
    Malformed,
    /// The codec refused the value (a limit, an invalid child identity, ...).
    Codec(rowid_codec::Error),
}

impl From<Malformed> for FieldError {
    fn from(_: Malformed) -> Self {
        FieldError::Malformed
    }
}

impl From<rowid_codec::Error> for FieldError {
    fn from(e: rowid_codec::Error) -> Self {
        FieldError::Codec(e)
    }
}

/// `MultirangeType` (multirangetypes.h), which pgrx does not bind; only passed by pointer.
#[repr(C)]
pub struct MultirangeType {
    _opaque: [u8; 0],
}

unsafe extern "C-unwind" {
    /// multirangetypes.c (PostgreSQL 14+): the ranges of a multirange, each palloc'd.
    #[link_name = "multirange_deserialize"]
    fn multirange_deserialize_raw(
        rangetyp: *mut pg_sys::TypeCacheEntry,
        multirange: *const MultirangeType,
        range_count: *mut i32,
        ranges: *mut *mut *mut pg_sys::RangeType,
    );
}

/// `multirange_deserialize`, guarded so that a PostgreSQL error (out of memory) unwinds
/// through Rust frames safely, as pgrx guards its own bindings.
///
/// # Safety
/// `rangetyp` is the cache entry of the multirange's range type and `multirange` a detoasted
/// multirange of that type.
unsafe fn multirange_deserialize(
    rangetyp: *mut pg_sys::TypeCacheEntry,
    multirange: *const MultirangeType,
    range_count: &mut i32,
    ranges: &mut *mut *mut pg_sys::RangeType,
) {
    // SAFETY: guaranteed by the caller; pg_guard_ffi_boundary converts a longjmp into a Rust
    // panic that pgrx turns back into the PostgreSQL error.
    unsafe {
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            multirange_deserialize_raw(rangetyp, multirange, range_count, ranges)
        })
    }
}

/// How to read a value of one type, resolved once per call site.
pub enum Reader {
    /// A scalar family read in place (`datum::read`).
    Scalar(TypeTag),
    /// An enum: the current label from the ENUMOID syscache.
    Enum,
    /// A `pgtrickle.row_id`: a complete child identity, validated before it is written.
    Child,
    /// An array: its element's storage facts, and the element's reader.
    Array {
        storage: ArrayElement,
        element: Box<Reader>,
    },
    /// A range over `subtype`.
    Range {
        /// The range type's type-cache entry (entries live as long as the backend).
        typcache: *mut pg_sys::TypeCacheEntry,
        subtype: Box<Reader>,
    },
    /// A multirange whose ranges are of the range type cached in `range_typcache`.
    Multirange {
        range_typcache: *mut pg_sys::TypeCacheEntry,
        subtype: Box<Reader>,
    },
    /// `jsonb`.
    Jsonb,
    /// A named composite type: its descriptor (copied into the call site's memory context)
    /// and a reader per non-dropped attribute.
    Record {
        tupdesc: pg_sys::TupleDesc,
        fields: Vec<(usize, Reader)>,
    },
}

impl Reader {
    /// Builds the reader for type `oid`, whose registry shape is `shape` (resolution has
    /// already accepted the type). `mcxt` holds the copied composite descriptors.
    ///
    /// # Safety
    /// Must run inside a backend; `mcxt` must outlive the reader.
    pub unsafe fn build(oid: pg_sys::Oid, shape: &Shape, mcxt: pg_sys::MemoryContext) -> Reader {
        let oid = base_type(oid);
        match shape {
            Shape::Scalar(TypeTag::Enum) => Reader::Enum,
            Shape::Scalar(tag) => Reader::Scalar(*tag),
            Shape::Jsonb => Reader::Jsonb,
            Shape::Array(element) => {
                let storage = array_element(oid);
                Reader::Array {
                    storage,
                    // SAFETY: as above, for the element type.
                    element: Box::new(unsafe { Reader::build(storage.oid, element, mcxt) }),
                }
            }
            Shape::Range(subtype) => {
                let (typcache, sub) = range_cache(oid);
                Reader::Range {
                    typcache,
                    // SAFETY: as above, for the subtype.
                    subtype: Box::new(unsafe { Reader::build(sub, subtype, mcxt) }),
                }
            }
            Shape::Multirange(subtype) => {
                let (range_typcache, sub) = multirange_range_cache(oid);
                Reader::Multirange {
                    range_typcache,
                    // SAFETY: as above, for the subtype.
                    subtype: Box::new(unsafe { Reader::build(sub, subtype, mcxt) }),
                }
            }
            Shape::Record(shapes) => {
                // SAFETY: the copy is made in mcxt so it lives as long as the reader.
                let tupdesc = unsafe { row_descriptor(oid, -1, mcxt) };
                // SAFETY: a valid descriptor.
                let natts = unsafe { (*tupdesc).natts } as usize;
                let mut fields = Vec::with_capacity(shapes.len());
                let mut shape_of = shapes.iter();
                let mut live = 0;
                for i in 0..natts {
                    // SAFETY: i < natts.
                    let att = unsafe { attribute(tupdesc, i) };
                    if att.attisdropped {
                        continue;
                    }
                    live += 1;
                    if let Some(s) = shape_of.next() {
                        // SAFETY: as above.
                        fields.push((i, unsafe { Reader::build(att.atttypid, s, mcxt) }));
                    }
                }
                let reader = Reader::Record { tupdesc, fields };
                if live != shapes.len() {
                    // Never read a composite with a shape of another number of attributes (an
                    // attribute past the shape would be left out of the identity): the type
                    // changed between the shape's catalog read and this one.
                    let mut reader = reader;
                    reader.release();
                    catalog::changed_meanwhile(oid, live, shapes.len());
                }
                reader
            }
        }
    }

    /// The tag values of this reader are written with.
    pub fn tag(&self) -> TypeTag {
        match self {
            Reader::Scalar(t) => *t,
            Reader::Enum => TypeTag::Enum,
            Reader::Child => TypeTag::ChildIdentity,
            Reader::Array { .. } => TypeTag::Array,
            Reader::Range { .. } => TypeTag::Range,
            Reader::Multirange { .. } => TypeTag::Multirange,
            Reader::Jsonb => TypeTag::Jsonb,
            Reader::Record { .. } => TypeTag::Record,
        }
    }

    /// Frees the composite descriptors this reader copied (before a cache rebuild).
    pub fn release(&mut self) {
        match self {
            Reader::Array { element: r, .. }
            | Reader::Range { subtype: r, .. }
            | Reader::Multirange { subtype: r, .. } => r.release(),
            Reader::Record { tupdesc, fields } => {
                for (_, f) in fields.iter_mut() {
                    f.release();
                }
                if !tupdesc.is_null() {
                    // SAFETY: the copy made in `build`, referenced only here.
                    unsafe { pg_sys::FreeTupleDesc(*tupdesc) };
                    *tupdesc = std::ptr::null_mut();
                }
            }
            Reader::Scalar(_) | Reader::Enum | Reader::Child | Reader::Jsonb => {}
        }
    }

    /// Writes a non-NULL datum as the encoder's next field. Scalars, enum labels and child
    /// identities are borrowed from the datum; structures are materialised once.
    ///
    /// # Safety
    /// `datum` must be a valid, non-NULL value of the type the reader was built for.
    pub unsafe fn write(
        &self,
        enc: &mut IdentityEncoder<'_>,
        datum: pg_sys::Datum,
    ) -> Result<(), FieldError> {
        // SAFETY (every arm): the caller guarantees the datum's type.
        unsafe {
            match self {
                // The common fixed-width families and text straight into the codec's typed
                // pushes (the family is known here, so the codec's own dispatch folds away).
                Reader::Scalar(tag) => {
                    let raw = datum.value();
                    match tag {
                        TypeTag::Int8 => enc.int8(raw as i64)?,
                        TypeTag::Int4 => enc.int4(raw as i32)?,
                        TypeTag::Int2 => enc.int2(raw as i16)?,
                        TypeTag::Date => enc.date(raw as i32)?,
                        TypeTag::Timestamp => enc.timestamp(raw as i64)?,
                        TypeTag::Timestamptz => enc.timestamptz(raw as i64)?,
                        TypeTag::Oid => enc.oid(raw as u32)?,
                        TypeTag::Bool => enc.bool(raw != 0)?,
                        TypeTag::Uuid => enc.uuid(datum::uuid(datum))?,
                        TypeTag::Text => enc.text(datum::varlena_bytes(datum))?,
                        _ => enc.value(&datum::read(*tag, datum)?)?,
                    }
                }
                Reader::Enum => {
                    catalog::with_enum_label(datum, |label| enc.value(&Value::Enum(label)))
                        .ok_or(Malformed)??
                }
                Reader::Child => {
                    let child = ChildIdentity::new(datum::varlena_bytes(datum))?;
                    enc.value(&Value::Identity(child))?
                }
                structural => enc.value(&structural.read(datum)?.as_value())?,
            }
        }
        Ok(())
    }

    /// Reads a non-NULL datum into an owned value.
    ///
    /// # Safety
    /// `datum` must be a valid, non-NULL value of the type the reader was built for.
    pub unsafe fn read(&self, datum: pg_sys::Datum) -> Result<OwnedValue, FieldError> {
        // SAFETY (every arm): the caller guarantees the datum's type; each arm reads that
        // type's documented representation through PostgreSQL's own accessors.
        unsafe {
            match self {
                Reader::Scalar(tag) => Ok(OwnedValue::from(datum::read(*tag, datum)?)),
                Reader::Enum => {
                    Ok(
                        catalog::with_enum_label(datum, |l| OwnedValue::Enum(l.to_vec()))
                            .ok_or(Malformed)?,
                    )
                }
                Reader::Child => {
                    let child = ChildIdentity::new(datum::varlena_bytes(datum))?;
                    Ok(OwnedValue::Identity(OwnedChildIdentity::from(child)))
                }
                Reader::Array { storage, element } => read_array(datum, storage, element),
                Reader::Range { typcache, subtype } => {
                    let r =
                        pg_sys::pg_detoast_datum(datum.cast_mut_ptr()).cast::<pg_sys::RangeType>();
                    Ok(OwnedValue::Range(Box::new(RangeValue {
                        subtype: subtype.tag(),
                        bounds: read_range(*typcache, r, subtype)?,
                    })))
                }
                Reader::Multirange {
                    range_typcache,
                    subtype,
                } => {
                    let m = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()).cast::<MultirangeType>();
                    let (mut count, mut ranges) = (0i32, std::ptr::null_mut());
                    multirange_deserialize(*range_typcache, m, &mut count, &mut ranges);
                    let mut out = Vec::with_capacity(count.max(0) as usize);
                    for i in 0..count.max(0) as usize {
                        match read_range(*range_typcache, *ranges.add(i), subtype)? {
                            Some(b) => out.push(b),
                            None => return Err(FieldError::Malformed),
                        }
                    }
                    Ok(OwnedValue::Multirange(MultirangeValue {
                        subtype: subtype.tag(),
                        ranges: out,
                    }))
                }
                Reader::Jsonb => Ok(OwnedValue::Jsonb(read_jsonb(datum)?)),
                Reader::Record { tupdesc, fields } => read_record(datum, *tupdesc, fields),
            }
        }
    }
}

/// # Safety
/// `datum` is an array whose element type has the `storage` facts.
unsafe fn read_array(
    datum: pg_sys::Datum,
    storage: &ArrayElement,
    element: &Reader,
) -> Result<OwnedValue, FieldError> {
    // SAFETY: a detoasted (and, if expanded, flattened) ArrayType: the header is followed by
    // ndim dimension lengths and ndim lower bounds (ARR_DIMS, ARR_LBOUND);
    // deconstruct_array fills palloc'd element and null arrays of n entries.
    unsafe {
        let a = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()).cast::<pg_sys::ArrayType>();
        let ndim = usize::try_from((*a).ndim).map_err(|_| FieldError::Malformed)?;
        if ndim > rowid_codec::structure::MAX_ARRAY_DIMS {
            return Err(FieldError::Malformed);
        }
        let dims_ptr = a
            .cast::<u8>()
            .add(std::mem::size_of::<pg_sys::ArrayType>())
            .cast::<i32>();
        let dims = (0..ndim)
            .map(|i| ArrayDim {
                len: *dims_ptr.add(i),
                lower: *dims_ptr.add(ndim + i),
            })
            .collect();
        let (mut elems, mut nulls, mut n) = (std::ptr::null_mut(), std::ptr::null_mut(), 0i32);
        pg_sys::deconstruct_array(
            a,
            storage.oid,
            i32::from(storage.len),
            storage.byval,
            storage.align,
            &mut elems,
            &mut nulls,
            &mut n,
        );
        let n = usize::try_from(n).map_err(|_| FieldError::Malformed)?;
        let mut elements = Vec::with_capacity(n);
        for i in 0..n {
            elements.push(if *nulls.add(i) {
                None
            } else {
                Some(element.read(*elems.add(i))?)
            });
        }
        Ok(OwnedValue::Array(ArrayValue {
            element: element.tag(),
            dims,
            elements,
        }))
    }
}

/// The bounds of a range; `None` when empty.
///
/// # Safety
/// `r` is a detoasted range of the type cached in `typcache`.
unsafe fn read_range(
    typcache: *mut pg_sys::TypeCacheEntry,
    r: *mut pg_sys::RangeType,
    subtype: &Reader,
) -> Result<Option<RangeBounds>, FieldError> {
    let mut lower = pg_sys::RangeBound::default();
    let mut upper = pg_sys::RangeBound::default();
    let mut empty = false;
    // SAFETY: range_deserialize reads the range with its type's cache entry; bound values
    // are datums of the subtype.
    unsafe {
        pg_sys::range_deserialize(typcache, r, &mut lower, &mut upper, &mut empty);
        if empty {
            return Ok(None);
        }
        let bound = |b: &pg_sys::RangeBound| -> Result<RangeBound, FieldError> {
            if b.infinite {
                return Ok(RangeBound::Infinite);
            }
            let v = subtype.read(b.val)?;
            Ok(if b.inclusive {
                RangeBound::Inclusive(v)
            } else {
                RangeBound::Exclusive(v)
            })
        };
        Ok(Some(RangeBounds {
            lower: bound(&lower)?,
            upper: bound(&upper)?,
        }))
    }
}

/// # Safety
/// `datum` is a composite value of the type described by `tupdesc`.
unsafe fn read_record(
    datum: pg_sys::Datum,
    tupdesc: pg_sys::TupleDesc,
    fields: &[(usize, Reader)],
) -> Result<OwnedValue, FieldError> {
    // SAFETY: a composite datum detoasts to a HeapTupleHeader of the descriptor's type;
    // heap_deform_tuple fills natts values and nulls.
    unsafe {
        let header = datum::tuple_header(datum);
        let natts = (*tupdesc).natts as usize;
        // A value with more attributes than the cached descriptor was written under a newer
        // row type: refuse it rather than silently ignore attributes (HeapTupleHeaderGetNatts).
        if usize::from((*header).t_infomask2 & pg_sys::HEAP_NATTS_MASK as u16) > natts {
            return Err(FieldError::Malformed);
        }
        let mut values = vec![pg_sys::Datum::from(0); natts];
        let mut nulls = vec![true; natts];
        let mut tuple = pg_sys::HeapTupleData {
            t_len: pgrx::heap_tuple_header_get_datum_length(header) as u32,
            t_self: pg_sys::ItemPointerData::default(),
            t_tableOid: pg_sys::InvalidOid,
            t_data: header,
        };
        pg_sys::heap_deform_tuple(&mut tuple, tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
        let mut out = Vec::with_capacity(fields.len());
        for (attno, reader) in fields {
            let value = if nulls[*attno] {
                None
            } else {
                Some(reader.read(values[*attno])?)
            };
            out.push(OwnedField {
                tag: reader.tag(),
                value,
            });
        }
        Ok(OwnedValue::Record(RecordValue { fields: out }))
    }
}

/// A container being rebuilt from the jsonb iterator's tokens.
enum Frame {
    Array {
        raw_scalar: bool,
        items: Vec<JsonbValue>,
    },
    Object {
        pairs: Vec<(Vec<u8>, JsonbValue)>,
        key: Option<Vec<u8>>,
    },
}

impl Frame {
    fn add(&mut self, v: JsonbValue) -> Result<(), Malformed> {
        match self {
            Frame::Array { items, .. } => items.push(v),
            Frame::Object { pairs, key } => pairs.push((key.take().ok_or(Malformed)?, v)),
        }
        Ok(())
    }
}

/// A jsonb scalar (`jbvNull`, `jbvString`, `jbvNumeric`, `jbvBool`).
///
/// # Safety
/// `v` was produced by `JsonbIteratorNext` for a scalar token.
unsafe fn jsonb_scalar(v: &pg_sys::JsonbValue) -> Result<JsonbValue, Malformed> {
    // SAFETY: the union member read is the one `type_` names; string bytes and the numeric
    // varlena live in the jsonb value being iterated.
    unsafe {
        Ok(match v.type_ {
            pg_sys::jbvType::jbvNull => JsonbValue::Null,
            pg_sys::jbvType::jbvBool => JsonbValue::Bool(v.val.boolean),
            pg_sys::jbvType::jbvString => {
                let s = v.val.string;
                let len = usize::try_from(s.len).map_err(|_| Malformed)?;
                JsonbValue::String(std::slice::from_raw_parts(s.val.cast::<u8>(), len).to_vec())
            }
            pg_sys::jbvType::jbvNumeric => {
                match datum::read(TypeTag::Numeric, pg_sys::Datum::from(v.val.numeric))? {
                    Value::Numeric(n) => JsonbValue::Number(OwnedNumeric::from(n)),
                    _ => return Err(Malformed),
                }
            }
            _ => return Err(Malformed),
        })
    }
}

/// Walks a jsonb value with `JsonbIteratorNext`, keys in storage order.
///
/// # Safety
/// `datum` is a jsonb value.
unsafe fn read_jsonb(datum: pg_sys::Datum) -> Result<JsonbValue, Malformed> {
    use pg_sys::JsonbIteratorToken::*;
    // SAFETY: a detoasted Jsonb; the iterator walks its root container, and each token's
    // value is valid until the next call.
    unsafe {
        let jb = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()).cast::<pg_sys::Jsonb>();
        let mut it = pg_sys::JsonbIteratorInit(&mut (*jb).root);
        let mut v = std::mem::zeroed::<pg_sys::JsonbValue>();
        let mut stack: Vec<Frame> = Vec::new();
        loop {
            let token = pg_sys::JsonbIteratorNext(&mut it, &mut v, false);
            let finished = match token {
                WJB_BEGIN_ARRAY => {
                    stack.push(Frame::Array {
                        raw_scalar: v.val.array.rawScalar,
                        items: Vec::new(),
                    });
                    None
                }
                WJB_BEGIN_OBJECT => {
                    stack.push(Frame::Object {
                        pairs: Vec::new(),
                        key: None,
                    });
                    None
                }
                WJB_KEY => {
                    match (stack.last_mut(), jsonb_scalar(&v)?) {
                        (Some(Frame::Object { key, .. }), JsonbValue::String(k)) => *key = Some(k),
                        _ => return Err(Malformed),
                    }
                    None
                }
                WJB_ELEM | WJB_VALUE => {
                    stack.last_mut().ok_or(Malformed)?.add(jsonb_scalar(&v)?)?;
                    None
                }
                WJB_END_ARRAY | WJB_END_OBJECT => match stack.pop().ok_or(Malformed)? {
                    Frame::Array {
                        raw_scalar: true,
                        mut items,
                    } if items.len() == 1 => items.pop(),
                    Frame::Array { items, .. } => Some(JsonbValue::Array(items)),
                    Frame::Object { pairs, .. } => Some(JsonbValue::Object(pairs)),
                },
                WJB_DONE => return Err(Malformed),
                _ => return Err(Malformed),
            };
            if let Some(value) = finished {
                match stack.last_mut() {
                    Some(parent) => parent.add(value)?,
                    None => return Ok(value),
                }
            }
        }
    }
}
