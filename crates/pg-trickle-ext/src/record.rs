//! `encode_row_id_v2`: the record argument deformed against a per-call-site cache.
//!
//! The cache lives in `fn_extra` (allocated in `fn_mcxt`) and holds the record's tuple
//! descriptor, each field's resolved type tag, deform arrays and the scratch buffer. It is
//! rebuilt when the record's type OID or typmod changes; nothing per row looks at catalogs
//! except the ENUMOID syscache for enum labels.

use pgrx::pg_sys;
use pgrx::prelude::*;
use rowid_codec::{Domain, IdentityEncoder, TypeTag};
use rowid_registry::{FieldSpec, resolve_field};

use crate::catalog::{
    attribute, attribute_name, encoder_collation, row_id_domain, server_context, type_ref,
};
use crate::datum;
use crate::errors::{codec_error, malformed};
use crate::nested::Reader;

/// One field's dispatch, resolved once per call site.
struct Field {
    /// Zero-based attribute number in the record (dropped attributes are skipped).
    attno: usize,
    reader: Reader,
    name: String,
}

/// The per-call-site cache.
pub struct CallSite {
    typid: pg_sys::Oid,
    typmod: i32,
    tupdesc: pg_sys::TupleDesc,
    fields: Vec<Field>,
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
    scratch: Vec<u8>,
    /// The last domain argument's bytes and what they name (the argument is a constant at
    /// nearly every call site, so it is parsed once).
    domain: Option<(Vec<u8>, Domain)>,
    /// Every field is a scalar read in place (no enum label, no structure) and there are at
    /// most [`SMALL_KEY`]: such rows are encoded through `encode_identity`, whose fixed-width
    /// fast path skips the per-field encoder bookkeeping.
    small_scalar_key: bool,
}

/// Most fields of a row taken by the small-key path.
const SMALL_KEY: usize = 4;

impl Default for CallSite {
    fn default() -> Self {
        CallSite {
            typid: pg_sys::InvalidOid,
            typmod: -1,
            tupdesc: std::ptr::null_mut(),
            fields: Vec::new(),
            values: Vec::new(),
            nulls: Vec::new(),
            scratch: Vec::new(),
            domain: None,
            small_scalar_key: false,
        }
    }
}

/// Resolves one record attribute to its tag, raising the registry's rejection as an error
/// that names the field position, name, type and property.
///
/// # Safety
/// Must run inside a backend; `mcxt` must outlive the returned reader.
unsafe fn resolve_attribute(
    index: usize,
    att: &pg_sys::FormData_pg_attribute,
    row_id: pg_sys::Oid,
    mcxt: pg_sys::MemoryContext,
) -> Field {
    let name = attribute_name(att);
    if row_id != pg_sys::InvalidOid && att.atttypid == row_id {
        return Field {
            attno: index,
            reader: Reader::Scalar(TypeTag::ChildIdentity),
            name,
        };
    }
    let spec = FieldSpec {
        expr: format!("field {} ({name})", index + 1),
        ty: type_ref(att.atttypid, &encoder_collation),
        typmod: att.atttypmod,
        collation: encoder_collation(att.attcollation),
        opclass: rowid_registry::OpClass::Default,
    };
    match resolve_field(&spec, &server_context()) {
        Ok(r) => Field {
            attno: index,
            // SAFETY: the registry accepted this type with this shape; guaranteed by caller.
            reader: unsafe { Reader::build(att.atttypid, &r.shape, mcxt) },
            name,
        },
        Err(rejection) => {
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("pgtrickle.encode_row_id_v2: {rejection}")
            );
        }
    }
}

impl CallSite {
    /// The domain named by `name`, parsed by `parse` only when it differs from the last call's.
    pub fn domain(&mut self, name: &[u8], parse: impl FnOnce(&[u8]) -> Domain) -> Domain {
        match &self.domain {
            Some((bytes, d)) if bytes.as_slice() == name => *d,
            _ => {
                let d = parse(name);
                self.domain = Some((name.to_vec(), d));
                d
            }
        }
    }

    /// Rebuilds the cache for a record type.
    ///
    /// # Safety
    /// Must run inside a backend with `mcxt` the FmgrInfo's memory context.
    unsafe fn rebuild(&mut self, typid: pg_sys::Oid, typmod: i32, mcxt: pg_sys::MemoryContext) {
        // SAFETY: the copy is made in fn_mcxt so it lives as long as this cache; the old copy
        // (if any) is freed.
        unsafe {
            if !self.tupdesc.is_null() {
                pg_sys::FreeTupleDesc(self.tupdesc);
            }
            let old = pg_sys::MemoryContextSwitchTo(mcxt);
            self.tupdesc = pg_sys::lookup_rowtype_tupdesc_copy(typid, typmod);
            pg_sys::MemoryContextSwitchTo(old);
        }
        // SAFETY: a valid tuple descriptor with natts attributes.
        let natts = unsafe { (*self.tupdesc).natts } as usize;
        let row_id = row_id_domain();
        for f in &mut self.fields {
            f.reader.release();
        }
        self.fields.clear();
        for i in 0..natts {
            // SAFETY: i < natts.
            let att = unsafe { attribute(self.tupdesc, i) };
            if att.attisdropped {
                continue;
            }
            // SAFETY: mcxt is the FmgrInfo's context, which outlives this cache.
            let f = unsafe { resolve_attribute(i, att, row_id, mcxt) };
            self.fields.push(f);
        }
        self.small_scalar_key = self.fields.len() <= SMALL_KEY
            && self
                .fields
                .iter()
                .all(|f| matches!(f.reader, Reader::Scalar(_)));
        self.values = vec![pg_sys::Datum::from(0); natts];
        self.nulls = vec![true; natts];
        self.typid = typid;
        self.typmod = typmod;
    }

    /// Encodes one record datum into a new bytea.
    ///
    /// # Safety
    /// `record` must be a non-NULL composite datum and `mcxt` the FmgrInfo's memory context.
    pub unsafe fn encode(
        &mut self,
        domain: Domain,
        record: pg_sys::Datum,
        mcxt: pg_sys::MemoryContext,
    ) -> *mut pg_sys::bytea {
        // SAFETY: a composite datum detoasts to a HeapTupleHeader whose datum fields name its
        // row type; heap_deform_tuple fills exactly natts values/nulls.
        unsafe {
            let header = datum::tuple_header(record);
            let typid = pgrx::heap_tuple_header_get_type_id(header);
            let typmod = pgrx::heap_tuple_header_get_typmod(header);
            if self.tupdesc.is_null() || typid != self.typid || typmod != self.typmod {
                self.rebuild(typid, typmod, mcxt);
            }
            let mut tuple = pg_sys::HeapTupleData {
                t_len: pgrx::heap_tuple_header_get_datum_length(header) as u32,
                t_self: pg_sys::ItemPointerData::default(),
                t_tableOid: pg_sys::InvalidOid,
                t_data: header,
            };
            pg_sys::heap_deform_tuple(
                &mut tuple,
                self.tupdesc,
                self.values.as_mut_ptr(),
                self.nulls.as_mut_ptr(),
            );
        }
        self.scratch.clear();
        if self.small_scalar_key {
            return self.encode_small_key(domain);
        }
        let count = self.fields.len() as u32;
        let current = std::cell::Cell::new(None);
        let result = (|| {
            let mut enc = IdentityEncoder::begin(&mut self.scratch, domain, count)?;
            for (i, f) in self.fields.iter().enumerate() {
                current.set(Some(i));
                let (datum, null) = (self.values[f.attno], self.nulls[f.attno]);
                if null {
                    enc.null(f.reader.tag())?;
                    continue;
                }
                match &f.reader {
                    Reader::Enum => {
                        // SAFETY: the registry resolved this attribute to an enum type.
                        let r = unsafe {
                            datum::with_enum_label(datum, |label| {
                                enc.value(&rowid_codec::Value::Enum(label))
                            })
                        };
                        match r {
                            Some(r) => r?,
                            None => return Ok(Err(f)),
                        }
                    }
                    // SAFETY: the datum is of the type the tag was resolved from.
                    Reader::Scalar(tag) => match unsafe { datum::read(*tag, datum) } {
                        Ok(v) => enc.value(&v)?,
                        Err(_) => return Ok(Err(f)),
                    },
                    // SAFETY: the datum is of the type the reader was built for.
                    structural => match unsafe { structural.read(datum) } {
                        Ok(v) => enc.value(&v.as_value())?,
                        Err(_) => return Ok(Err(f)),
                    },
                }
            }
            current.set(None);
            enc.finish().map(Ok)
        })();
        match result {
            Ok(Ok(_)) => {}
            Ok(Err(f)) => malformed(&f.name, f.reader.tag()),
            Err(e) => codec_error(&e, current.get(), |i| {
                self.fields.get(i).map(|f| f.name.as_str())
            }),
        }
        crate::to_bytea(&self.scratch)
    }

    /// Encodes a row of at most [`SMALL_KEY`] scalar fields (already deformed) through
    /// `encode_identity`, which takes its fixed-width fast path when every field qualifies
    /// and the general path otherwise; the bytes are the same either way.
    fn encode_small_key(&mut self, domain: Domain) -> *mut pg_sys::bytea {
        let mut fields: [(TypeTag, Option<rowid_codec::Value<'_>>); SMALL_KEY] =
            [(TypeTag::Bool, None); SMALL_KEY];
        for (slot, f) in fields.iter_mut().zip(&self.fields) {
            let Reader::Scalar(tag) = f.reader else {
                malformed(&f.name, f.reader.tag());
            };
            let value = if self.nulls[f.attno] {
                None
            } else {
                // SAFETY: the datum is of the type the tag was resolved from.
                match unsafe { datum::read(tag, self.values[f.attno]) } {
                    Ok(v) => Some(v),
                    Err(_) => malformed(&f.name, tag),
                }
            };
            *slot = (tag, value);
        }
        let n = self.fields.len();
        let mut out = std::mem::take(&mut self.scratch);
        let result = rowid_codec::encode_identity(&mut out, domain, &fields[..n]);
        if let Err(e) = result {
            codec_error(&e, None, |i| self.fields.get(i).map(|f| f.name.as_str()));
        }
        let bytea = crate::to_bytea(&out);
        self.scratch = out;
        bytea
    }
}
