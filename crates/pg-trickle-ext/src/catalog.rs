//! Catalog facts for the registry: a type OID to the registry's `TypeRef`, the server's
//! context, and the `pgtrickle.row_id` domain. Used when a call site's cache is built and by
//! the validation functions; never per row.

use pgrx::pg_sys;
use rowid_registry::{Collation, CollationProvider, CompositeField, ServerContext, TypeRef};

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

/// A collation's facts for the registry, by OID (`None` for `InvalidOid`).
pub type CollationLookup<'a> = &'a dyn Fn(pg_sys::Oid) -> Option<Collation>;

/// Deepest type nesting `type_ref` follows; PostgreSQL forbids a composite type that
/// contains itself, so this only bounds pathological chains.
const MAX_TYPE_NESTING: u32 = rowid_codec::limits::MAX_DEPTH;

/// The registry's view of a type: domains and nesting resolved from the catalogs.
/// `collation` describes the collations of range subtypes and composite attributes.
pub fn type_ref(oid: pg_sys::Oid, collation: CollationLookup<'_>) -> TypeRef {
    type_ref_at(oid, collation, 0)
}

fn type_ref_at(oid: pg_sys::Oid, collation: CollationLookup<'_>, depth: u32) -> TypeRef {
    let name = type_name(oid);
    if depth > MAX_TYPE_NESTING {
        return TypeRef::Other {
            oid: u32::from(oid),
            name,
        };
    }
    let nested = |o: pg_sys::Oid| type_ref_at(o, collation, depth + 1);
    // SAFETY: lsyscache and typcache lookups on a valid type OID.
    unsafe {
        let mut typmod = -1;
        let base = pg_sys::getBaseTypeAndTypmod(oid, &mut typmod);
        if base != oid {
            return TypeRef::Domain {
                name,
                base: Box::new(nested(base)),
            };
        }
        // Anonymous records (ROW(...) inside ROW(...)) are the pseudo-type `record`: a
        // composite whose fields are only known per value.
        if oid == pg_sys::RECORDOID {
            return TypeRef::AnonymousRecord;
        }
        if pg_sys::type_is_enum(oid) {
            return TypeRef::Enum { name };
        }
        let element = pg_sys::get_element_type(oid);
        if element != pg_sys::InvalidOid {
            return TypeRef::Array {
                name,
                element: Box::new(nested(element)),
            };
        }
        match pg_sys::get_typtype(oid) as u8 {
            b'c' => TypeRef::Composite {
                name,
                fields: composite_fields(oid, collation, depth),
            },
            b'r' => TypeRef::Range {
                name,
                subtype: Box::new(nested(pg_sys::get_range_subtype(oid))),
                collation: collation(pg_sys::get_range_collation(oid)),
            },
            b'm' => TypeRef::Multirange {
                name,
                range: Box::new(nested(pg_sys::get_multirange_range(oid))),
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

/// The non-dropped attributes of composite type `oid`.
fn composite_fields(
    oid: pg_sys::Oid,
    collation: CollationLookup<'_>,
    depth: u32,
) -> Vec<CompositeField> {
    // SAFETY: lookup_rowtype_tupdesc_copy returns a palloc'd copy of the type's descriptor
    // (or raises an error); it is freed below.
    let tupdesc = unsafe { pg_sys::lookup_rowtype_tupdesc_copy(oid, -1) };
    // SAFETY: a valid descriptor.
    let natts = unsafe { (*tupdesc).natts } as usize;
    let mut fields = Vec::with_capacity(natts);
    for i in 0..natts {
        // SAFETY: i < natts.
        let att = unsafe { attribute(tupdesc, i) };
        if att.attisdropped {
            continue;
        }
        fields.push(CompositeField {
            name: attribute_name(att),
            ty: type_ref_at(att.atttypid, collation, depth + 1),
            typmod: att.atttypmod,
            collation: collation(att.attcollation),
        });
    }
    // SAFETY: the copy made above, no longer referenced.
    unsafe { pg_sys::FreeTupleDesc(tupdesc) };
    fields
}

/// An attribute's name.
pub fn attribute_name(att: &pg_sys::FormData_pg_attribute) -> String {
    // SAFETY: attname is a NUL-terminated NameData.
    unsafe { std::ffi::CStr::from_ptr(att.attname.data.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// What the encoder needs of a collation: whether it is deterministic (the registry rejects
/// non-deterministic ones). Order claims are not made on this path, so the provider and
/// locale are left unresolved; `validate_*` use the full facts from `pg_collation`.
pub fn encoder_collation(oid: pg_sys::Oid) -> Option<Collation> {
    (oid != pg_sys::InvalidOid).then(|| Collation {
        name: format!("{}", u32::from(oid)),
        provider: CollationProvider::Default,
        // SAFETY: a valid collation OID from the catalogs.
        deterministic: unsafe { pg_sys::get_collation_isdeterministic(oid) },
        locale: String::new(),
    })
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
