//! Catalog facts for the registry: a type OID to the registry's `TypeRef`, the server's
//! context, and the `pgtrickle.row_id` domain. Used when a call site's cache is built and by
//! the validation functions; never per row.

use pgrx::pg_sys;
use rowid_registry::{ServerContext, TypeRef};

pub fn server_context() -> ServerContext {
    ServerContext {
        pg_major: pg_sys::PG_VERSION_NUM / 10_000,
        // SAFETY: reads the database encoding, always valid inside a backend.
        max_char_bytes: unsafe { pg_sys::pg_database_encoding_max_length() } as u32,
        block_size: pg_sys::BLCKSZ,
    }
}

/// `format_type_be` as a Rust string.
pub fn type_name(oid: pg_sys::Oid) -> String {
    // SAFETY: format_type_be returns a palloc'd C string for any OID.
    unsafe { std::ffi::CStr::from_ptr(pg_sys::format_type_be(oid)) }
        .to_string_lossy()
        .into_owned()
}

/// The OID of `pgtrickle.row_id`, the domain that marks child identities.
pub fn row_id_domain() -> pg_sys::Oid {
    // SAFETY: catalog lookups by name; both return InvalidOid when missing (missing_ok).
    unsafe {
        let ns = pg_sys::get_namespace_oid(c"pgtrickle".as_ptr(), true);
        if ns == pg_sys::InvalidOid {
            return pg_sys::InvalidOid;
        }
        pg_sys::GetSysCacheOid(
            pg_sys::SysCacheIdentifier::TYPENAMENSP as _,
            pg_sys::Anum_pg_type_oid as _,
            pg_sys::Datum::from(c"row_id".as_ptr()),
            pg_sys::Datum::from(ns),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        )
    }
}

/// The registry's view of a type: domains and nesting resolved from the catalogs.
pub fn type_ref(oid: pg_sys::Oid) -> TypeRef {
    let name = type_name(oid);
    // SAFETY: lsyscache lookups on a valid type OID.
    unsafe {
        let mut typmod = -1;
        let base = pg_sys::getBaseTypeAndTypmod(oid, &mut typmod);
        if base != oid {
            return TypeRef::Domain {
                name,
                base: Box::new(type_ref(base)),
            };
        }
        // Anonymous records (ROW(...) inside ROW(...)) are the pseudo-type `record`: a
        // composite whose fields are only known per value.
        if oid == pg_sys::RECORDOID {
            return TypeRef::Composite {
                name,
                fields: Vec::new(),
            };
        }
        if pg_sys::type_is_enum(oid) {
            return TypeRef::Enum { name };
        }
        let element = pg_sys::get_element_type(oid);
        if element != pg_sys::InvalidOid {
            return TypeRef::Array {
                name,
                element: Box::new(type_ref(element)),
            };
        }
        match pg_sys::get_typtype(oid) as u8 {
            b'c' => TypeRef::Composite {
                name,
                fields: Vec::new(),
            },
            b'r' => TypeRef::Range {
                name,
                subtype: Box::new(TypeRef::Other {
                    oid: 0,
                    name: String::new(),
                }),
            },
            b'm' => TypeRef::Multirange {
                name: name.clone(),
                range: Box::new(TypeRef::Other { oid: 0, name }),
            },
            _ if u32::from(oid) < pg_sys::FirstNormalObjectId => TypeRef::Builtin {
                oid: u32::from(oid),
                name,
            },
            _ => TypeRef::Other {
                oid: u32::from(oid),
                name,
            },
        }
    }
}

/// Attribute `i` (zero-based) of a tuple descriptor. PostgreSQL 18 stores an array of
/// `CompactAttribute` first and the `FormData_pg_attribute` array after it.
///
/// # Safety
/// `tupdesc` must be a valid tuple descriptor and `i < natts`.
pub unsafe fn attribute<'a>(
    tupdesc: pg_sys::TupleDesc,
    i: usize,
) -> &'a pg_sys::FormData_pg_attribute {
    // SAFETY: guaranteed by the caller; the layouts are those of the PostgreSQL headers the
    // crate is built against.
    unsafe {
        #[cfg(not(feature = "pg18"))]
        {
            &*(*tupdesc).attrs.as_ptr().add(i)
        }
        #[cfg(feature = "pg18")]
        {
            let natts = (*tupdesc).natts as usize;
            let full = (*tupdesc)
                .compact_attrs
                .as_ptr()
                .add(natts)
                .cast::<pg_sys::FormData_pg_attribute>();
            &*full.add(i)
        }
    }
}
