//! The per-call-site cache of `encode_row_id_v2`: the record argument deformed against it.
//!
//! The cache lives in `fn_extra` (allocated in `fn_mcxt`) and holds the record's tuple
//! descriptor, each field's [`Reader`], deform arrays and the scratch buffer. It is rebuilt
//! when the record's type OID or typmod changes; nothing per row looks at catalogs except the
//! ENUMOID syscache for enum labels. Every row goes through the codec's `IdentityEncoder`,
//! which chooses its own fast path.

use pgrx::pg_sys;
use rowid_codec::{Domain, IdentityEncoder};
use rowid_registry::{FieldSpec, resolve_field};

use crate::catalog::{
    attribute, attribute_name, encoder_collation, row_descriptor, row_id_domain, server_context,
    type_ref,
};
use crate::datum;
use crate::errors;
use crate::reader::{FieldError, Reader};

/// The function whose call sites this cache serves, for messages.
const FUNCTION: &str = "pgtrickle.encode_row_id_v2";

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
}

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
            reader: Reader::Child,
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
        Err(rejection) => errors::rejected(FUNCTION, &rejection),
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
            self.tupdesc = row_descriptor(typid, typmod, mcxt);
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
        let count = self.fields.len() as u32;
        let mut current = None;
        let result = (|| {
            let mut enc = IdentityEncoder::begin(&mut self.scratch, domain, count)?;
            for (i, f) in self.fields.iter().enumerate() {
                current = Some(i);
                let (datum, null) = (self.values[f.attno], self.nulls[f.attno]);
                if null {
                    enc.null(f.reader.tag())?;
                } else {
                    // SAFETY: the datum is of the type the reader was built for.
                    unsafe { f.reader.write(&mut enc, datum)? };
                }
            }
            current = None;
            enc.finish().map_err(FieldError::Codec)
        })();
        match result {
            Ok(_) => datum::to_bytea(&self.scratch),
            Err(FieldError::Malformed) => match current.and_then(|i| self.fields.get(i)) {
                Some(f) => errors::malformed(&f.name, f.reader.tag()),
                None => errors::malformed("?", rowid_codec::TypeTag::Record),
            },
            Err(FieldError::Codec(e)) => {
                errors::codec_error(&e, current, |i| self.fields.get(i).map(|f| f.name.as_str()))
            }
        }
    }
}
