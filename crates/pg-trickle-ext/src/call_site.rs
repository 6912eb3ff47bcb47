//! The per-call-site cache of `encode_row_id_v2`: the record argument deformed against it.
//!
//! The cache lives in `fn_extra` (allocated in `fn_mcxt`) and holds the record's tuple
//! descriptor, each field's [`Field`] dispatch, deform arrays and the scratch buffer. It is
//! rebuilt when the record's type OID or typmod changes; nothing per row looks at catalogs
//! except the ENUMOID syscache for enum labels. Every row goes through the codec's
//! `IdentityEncoder`, which chooses its own fast path.

use pgrx::pg_guard;
use pgrx::pg_sys;
use rowid_codec::Domain;

use crate::domain_arg::DomainArg;
use crate::errors;

use crate::catalog::{attribute, attribute_name, row_descriptor, row_id_domain};
use crate::datum;
use crate::fields::{self, Field, FieldType};

/// The function whose call sites this cache serves, for messages.
const FUNCTION: &str = "pgtrickle.encode_row_id_v2";

/// The per-call-site cache.
pub struct CallSite {
    typid: pg_sys::Oid,
    typmod: i32,
    tupdesc: pg_sys::TupleDesc,
    fields: Vec<Field>,
    /// Zero-based attribute number of each field in the record (dropped attributes are
    /// skipped).
    attnos: Vec<usize>,
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
    scratch: Vec<u8>,
    domain: DomainArg,
}

impl Default for CallSite {
    fn default() -> Self {
        CallSite {
            typid: pg_sys::InvalidOid,
            typmod: -1,
            tupdesc: std::ptr::null_mut(),
            fields: Vec::new(),
            attnos: Vec::new(),
            values: Vec::new(),
            nulls: Vec::new(),
            scratch: Vec::new(),
            domain: DomainArg::default(),
        }
    }
}

impl Drop for CallSite {
    fn drop(&mut self) {
        fields::release(&mut self.fields);
    }
}

impl CallSite {
    /// Rebuilds the cache for a record type. Exception-safe: the cache is marked empty
    /// before anything is replaced and keyed to `typid`/`typmod` only once every field is
    /// resolved, so an error raised meanwhile (a field without an identity, caught by a
    /// caller that goes on) leaves a cache the next call rebuilds, never a descriptor under
    /// another type's key; readers resolved before the error are released.
    ///
    /// # Safety
    /// Must run inside a backend with `mcxt` the FmgrInfo's memory context.
    unsafe fn rebuild(&mut self, typid: pg_sys::Oid, typmod: i32, mcxt: pg_sys::MemoryContext) {
        self.typid = pg_sys::InvalidOid;
        self.typmod = -1;
        fields::release(&mut self.fields);
        self.fields.clear();
        self.attnos.clear();
        // SAFETY: the copy is made in fn_mcxt so it lives as long as this cache; the old copy
        // (if any) is freed, and the pointer cleared before anything else can fail.
        unsafe {
            if !self.tupdesc.is_null() {
                pg_sys::FreeTupleDesc(self.tupdesc);
                self.tupdesc = std::ptr::null_mut();
            }
            self.tupdesc = row_descriptor(typid, typmod, mcxt);
        }
        // SAFETY: a valid tuple descriptor with natts attributes.
        let natts = unsafe { (*self.tupdesc).natts } as usize;
        let row_id = row_id_domain();
        // Released if resolving a later field raises.
        let mut built = fields::Resolving::with_capacity(natts);
        let mut attnos = Vec::with_capacity(natts);
        for i in 0..natts {
            // SAFETY: i < natts.
            let att = unsafe { attribute(self.tupdesc, i) };
            if att.attisdropped {
                continue;
            }
            let name = attribute_name(att);
            let ty = FieldType {
                typid: att.atttypid,
                typmod: att.atttypmod,
                collation: att.attcollation,
            };
            let expr = format!("field {} ({name})", i + 1);
            // SAFETY: mcxt is the FmgrInfo's context, which outlives this cache.
            let f = unsafe { fields::resolve(FUNCTION, expr, name, ty, row_id, mcxt) };
            built.push(f);
            attnos.push(i);
        }
        self.fields = built.finish();
        self.attnos = attnos;
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
            if self.tupdesc.is_null()
                || self.typid == pg_sys::InvalidOid
                || typid != self.typid
                || typmod != self.typmod
            {
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
        let (values, nulls, attnos) = (&self.values, &self.nulls, &self.attnos);
        // SAFETY: each value is of its attribute's type, for which its reader was built.
        unsafe {
            fields::encode(FUNCTION, &mut self.scratch, domain, &self.fields, |i| {
                let a = attnos[i];
                (values[a], nulls[a])
            })
        }
    }
}

crate::pg_function_info_v1!(pg_finfo_encode_row_id_v2_wrapper);

/// The fmgr entry point of `pgtrickle.encode_row_id_v2(domain text, fields record)`: a plain
/// `#[pg_guard]` function (no pgrx argument wrapper on the per-row path; a PostgreSQL error
/// unwinds correctly and a Rust panic becomes an SQL error). The record argument is read as
/// a raw Datum and deformed against the cached tuple descriptor.
///
/// # Safety
/// Called by PostgreSQL's fmgr with a valid `fcinfo` for the SQL signature `(text, record)`.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn encode_row_id_v2_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fmgr passes two arguments; fn_extra/fn_mcxt belong to this call site's
    // FmgrInfo, and pg_func_extra allocates the cache there (dropped with the context).
    unsafe {
        if pgrx::pg_arg_is_null(fcinfo, 1) {
            errors::null_argument(
                FUNCTION,
                "fields must not be NULL (a NULL row has no identity)",
            );
        }
        let record = pgrx::pg_getarg_datum_raw(fcinfo, 1);
        let flinfo = (*fcinfo).flinfo;
        let mcxt = (*flinfo).fn_mcxt;
        let mut site = pgrx::pg_func_extra(fcinfo, CallSite::default);
        let domain = site.domain.get(fcinfo, FUNCTION);
        pg_sys::Datum::from(site.encode(domain, record, mcxt))
    }
}
