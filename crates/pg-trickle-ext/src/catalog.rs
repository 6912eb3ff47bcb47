//! Every catalog read of the extension: a type OID to the registry's `TypeRef`, collations,
//! a relation's index candidates and columns, the server's context, the `pgtrickle.row_id`
//! domain, the storage facts and type-cache entries the Datum readers are built from, and
//! enum labels. Used when a call site's cache is built and by the validation
//! functions; never per row. Syscache and lsyscache lookups where they suffice; fixed SPI
//! queries for what spans several catalogs (index keys, the database default collation).

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiResult;
use rowid_registry::{
    Collation, CollationProvider, CompositeField, FieldSpec, IndexCandidate, KeyColumn, OpClass,
    ServerContext, TypeRef,
};

use crate::errors;

/// The facts resolution and planning depend on: major, database encoding, block size.
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

/// The result of a fixed catalog query; a failure is an internal error.
fn spi<T>(r: SpiResult<T>) -> T {
    r.unwrap_or_else(|e| errors::catalog_query(&e))
}

/// A collation's facts from pg_collation (the database default resolved to the database's
/// provider and locale).
pub fn collation(oid: pg_sys::Oid) -> Option<Collation> {
    let oid = u32::from(oid);
    if oid == 0 {
        return None;
    }
    let query = format!(
        "SELECT c.collname::text, \
                CASE WHEN c.collprovider = 'd' THEN d.datlocprovider::text ELSE c.collprovider::text END, \
                c.collisdeterministic, \
                CASE WHEN c.collprovider = 'd' THEN d.datcollate ELSE coalesce(c.collcollate, '') END \
         FROM pg_collation c, pg_database d \
         WHERE c.oid = {oid} AND d.datname = current_database()"
    );
    spi(Spi::connect(|c| {
        let rows = c.select(&query, None, &[])?;
        let mut out = None;
        for row in rows {
            let provider = match row.get::<String>(2)?.as_deref() {
                Some("c") => CollationProvider::Libc,
                Some("i") => CollationProvider::Icu,
                Some("b") => CollationProvider::Builtin,
                _ => CollationProvider::Default,
            };
            out = Some(Collation {
                name: row.get::<String>(1)?.unwrap_or_default(),
                provider,
                deterministic: row.get::<bool>(3)?.unwrap_or(false),
                locale: row.get::<String>(4)?.unwrap_or_default(),
            });
        }
        Ok(out)
    }))
}

/// The index candidates of `rel` as catalog data.
pub fn index_candidates(rel: pg_sys::Oid) -> Vec<IndexCandidate> {
    let query = format!(
        "SELECT i.indexrelid::regclass::text, i.indisprimary, i.indisunique, \
                i.indisvalid AND i.indisready, i.indpred IS NOT NULL, i.indexprs IS NOT NULL, \
                NOT i.indimmediate, i.indnullsnotdistinct, \
                array_agg(coalesce(a.attname::text, '') ORDER BY k.ord), \
                array_agg(coalesce(a.attnotnull, false) ORDER BY k.ord), \
                array_agg(coalesce(a.atttypid, 0) ORDER BY k.ord), \
                array_agg(coalesce(a.atttypmod, -1) ORDER BY k.ord), \
                array_agg(k.coll ORDER BY k.ord), \
                array_agg(coalesce(oc.opcdefault, false) ORDER BY k.ord), \
                array_agg(coalesce(oc.opcname::text, '') ORDER BY k.ord) \
         FROM pg_index i \
         CROSS JOIN LATERAL unnest(i.indkey::int2[], i.indcollation::oid[], i.indclass::oid[]) \
              WITH ORDINALITY AS k(attnum, coll, opclass, ord) \
         LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum AND k.attnum > 0 \
         LEFT JOIN pg_opclass oc ON oc.oid = k.opclass \
         WHERE i.indrelid = {} AND k.ord <= i.indnkeyatts \
         GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1",
        u32::from(rel)
    );
    spi(Spi::connect(|c| {
        let mut out = Vec::new();
        for row in c.select(&query, None, &[])? {
            let names: Vec<String> = row.get(9)?.unwrap_or_default();
            let not_null: Vec<bool> = row.get(10)?.unwrap_or_default();
            let types: Vec<pg_sys::Oid> = row.get(11)?.unwrap_or_default();
            let typmods: Vec<i32> = row.get(12)?.unwrap_or_default();
            let colls: Vec<pg_sys::Oid> = row.get(13)?.unwrap_or_default();
            let defaults: Vec<bool> = row.get(14)?.unwrap_or_default();
            let opcnames: Vec<String> = row.get(15)?.unwrap_or_default();
            let columns = (0..names.len())
                .map(|k| KeyColumn {
                    name: names[k].clone(),
                    not_null: not_null[k],
                    field: FieldSpec {
                        expr: names[k].clone(),
                        // Expression columns (attnum 0) have no column type; such an
                        // index is ineligible before its columns are resolved.
                        ty: if types[k] == pg_sys::InvalidOid {
                            TypeRef::Other {
                                oid: 0,
                                name: "expression".into(),
                            }
                        } else {
                            type_ref(types[k], &collation)
                        },
                        typmod: typmods[k],
                        collation: collation(colls[k]),
                        opclass: if defaults[k] {
                            OpClass::Default
                        } else {
                            OpClass::NonDefault(opcnames[k].clone())
                        },
                    },
                })
                .collect();
            out.push(IndexCandidate {
                name: row.get::<String>(1)?.unwrap_or_default(),
                primary: row.get::<bool>(2)?.unwrap_or(false),
                unique: row.get::<bool>(3)?.unwrap_or(false),
                valid: row.get::<bool>(4)?.unwrap_or(false),
                partial: row.get::<bool>(5)?.unwrap_or(false),
                expressions: row.get::<bool>(6)?.unwrap_or(false),
                deferrable: row.get::<bool>(7)?.unwrap_or(false),
                nulls_not_distinct: row.get::<bool>(8)?.unwrap_or(false),
                columns,
            });
        }
        Ok(out)
    }))
}

/// Every user column of `rel`, for the keyless rule.
pub fn all_columns(rel: pg_sys::Oid) -> Vec<FieldSpec> {
    let query = format!(
        "SELECT attname::text, atttypid, atttypmod, attcollation FROM pg_attribute \
         WHERE attrelid = {} AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        u32::from(rel)
    );
    spi(Spi::connect(|c| {
        let mut out = Vec::new();
        for row in c.select(&query, None, &[])? {
            let name = row.get::<String>(1)?.unwrap_or_default();
            let ty = row.get::<pg_sys::Oid>(2)?.unwrap_or(pg_sys::InvalidOid);
            out.push(FieldSpec {
                expr: name,
                ty: type_ref(ty, &collation),
                typmod: row.get::<i32>(3)?.unwrap_or(-1),
                collation: collation(row.get::<pg_sys::Oid>(4)?.unwrap_or(pg_sys::InvalidOid)),
                opclass: OpClass::Default,
            });
        }
        Ok(out)
    }))
}

/// A table's namespace, name and `relreplident`, through SPI (so, inside a transaction
/// that imported a snapshot, as of that snapshot); `None` when no table (plain or
/// partitioned) has that OID.
pub fn relation_facts(rel: pg_sys::Oid) -> Option<(String, String, u8)> {
    let query = format!(
        "SELECT n.nspname::text, c.relname::text, c.relreplident::text FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.oid = {} AND c.relkind IN ('r', 'p')",
        u32::from(rel)
    );
    spi(Spi::connect(|c| {
        let mut rows = c.select(&query, Some(1), &[])?;
        let Some(row) = rows.next() else {
            return Ok(None);
        };
        let ri = row.get::<String>(3)?.unwrap_or_default();
        Ok(Some((
            row.get::<String>(1)?.unwrap_or_default(),
            row.get::<String>(2)?.unwrap_or_default(),
            ri.bytes().next().unwrap_or(b'd'),
        )))
    }))
}

/// A table's columns as pgoutput publishes them (not dropped, not generated), in attnum
/// order: attnum, name, type OID, NOT NULL.
pub fn published_columns(rel: pg_sys::Oid) -> Vec<(i16, String, u32, bool)> {
    let query = format!(
        "SELECT attnum, attname::text, atttypid, attnotnull FROM pg_attribute \
         WHERE attrelid = {} AND attnum > 0 AND NOT attisdropped AND attgenerated = '' \
         ORDER BY attnum",
        u32::from(rel)
    );
    spi(Spi::connect(|c| {
        let mut out = Vec::new();
        for row in c.select(&query, None, &[])? {
            out.push((
                row.get::<i16>(1)?.unwrap_or(0),
                row.get::<String>(2)?.unwrap_or_default(),
                u32::from(row.get::<pg_sys::Oid>(3)?.unwrap_or(pg_sys::InvalidOid)),
                row.get::<bool>(4)?.unwrap_or(false),
            ));
        }
        Ok(out)
    }))
}

/// `rel`'s name as `regclass` prints it (schema-qualified when not on the search path).
pub fn relation_name(rel: pg_sys::Oid) -> String {
    spi(Spi::get_one::<String>(&format!(
        "SELECT {}::regclass::text",
        u32::from(rel)
    )))
    .unwrap_or_default()
}

/// The collation of a type when none is given (`typcollation`), with its facts.
pub fn type_collation(ty: pg_sys::Oid) -> Option<Collation> {
    // SAFETY: an lsyscache lookup on a type OID.
    collation(unsafe { pg_sys::get_typcollation(ty) })
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
                oid: u32::from(oid),
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
            return TypeRef::Enum {
                oid: u32::from(oid),
                name,
            };
        }
        let element = pg_sys::get_element_type(oid);
        if element != pg_sys::InvalidOid {
            return TypeRef::Array {
                oid: u32::from(oid),
                name,
                element: Box::new(nested(element)),
            };
        }
        match pg_sys::get_typtype(oid) as u8 {
            b'c' => TypeRef::Composite {
                oid: u32::from(oid),
                name,
                fields: composite_fields(oid, collation, depth),
            },
            b'r' => TypeRef::Range {
                oid: u32::from(oid),
                name,
                subtype: Box::new(nested(pg_sys::get_range_subtype(oid))),
                collation: collation(pg_sys::get_range_collation(oid)),
            },
            b'm' => TypeRef::Multirange {
                oid: u32::from(oid),
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
    // SAFETY: a copy of the type's descriptor in the current context, freed below.
    let tupdesc = unsafe { row_descriptor(oid, -1, pg_sys::CurrentMemoryContext) };
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

/// A domain's base type (the type itself for any other type).
pub fn base_type(oid: pg_sys::Oid) -> pg_sys::Oid {
    // SAFETY: an lsyscache lookup on a type OID from the catalogs.
    unsafe { pg_sys::getBaseType(oid) }
}

/// An array type's element type and its storage facts, what `deconstruct_array` needs.
#[derive(Clone, Copy, Debug)]
pub struct ArrayElement {
    /// Element type OID.
    pub oid: pg_sys::Oid,
    /// `typlen`.
    pub len: i16,
    /// `typbyval`.
    pub byval: bool,
    /// `typalign`.
    pub align: std::ffi::c_char,
}

/// The element of array type `array` (a base type, not a domain over one).
pub fn array_element(array: pg_sys::Oid) -> ArrayElement {
    let mut e = ArrayElement {
        // SAFETY: an lsyscache lookup on an array type OID.
        oid: unsafe { pg_sys::get_element_type(array) },
        len: 0,
        byval: false,
        align: 0,
    };
    // SAFETY: fills the three storage facts of a valid type OID.
    unsafe { pg_sys::get_typlenbyvalalign(e.oid, &mut e.len, &mut e.byval, &mut e.align) };
    e
}

/// The type-cache entry of range type `range`, with its range information filled in, and its
/// subtype. Type-cache entries live as long as the backend.
pub fn range_cache(range: pg_sys::Oid) -> (*mut pg_sys::TypeCacheEntry, pg_sys::Oid) {
    // SAFETY: lookup_type_cache on a range type fills rngelemtype.
    unsafe {
        let cache = pg_sys::lookup_type_cache(range, pg_sys::TYPECACHE_RANGE_INFO as i32);
        (cache, (*(*cache).rngelemtype).type_id)
    }
}

/// The type-cache entry of the range type of multirange type `multirange` (range
/// information filled in), and the range's subtype.
pub fn multirange_range_cache(
    multirange: pg_sys::Oid,
) -> (*mut pg_sys::TypeCacheEntry, pg_sys::Oid) {
    // SAFETY: lookup_type_cache on a multirange type fills rngtype, whose own entry has its
    // range information filled.
    unsafe {
        let cache = pg_sys::lookup_type_cache(multirange, pg_sys::TYPECACHE_MULTIRANGE_INFO as i32);
        let range = (*cache).rngtype;
        (range, (*(*range).rngelemtype).type_id)
    }
}

/// A copy of row type `typid`'s tuple descriptor (`typmod` picks a blessed record type),
/// made in `mcxt` so it lives as long as that context; free it with `FreeTupleDesc`.
///
/// # Safety
/// Must run inside a backend; `mcxt` must be a valid memory context.
pub unsafe fn row_descriptor(
    typid: pg_sys::Oid,
    typmod: i32,
    mcxt: pg_sys::MemoryContext,
) -> pg_sys::TupleDesc {
    // SAFETY: guaranteed by the caller; the previous context is restored.
    unsafe {
        let old = pg_sys::MemoryContextSwitchTo(mcxt);
        let t = pg_sys::lookup_rowtype_tupdesc_copy(typid, typmod);
        pg_sys::MemoryContextSwitchTo(old);
        t
    }
}

/// Calls `f` with the current label of the enum value `datum` (its OID), read from the
/// ENUMOID syscache while the cache entry is held. Labels are never cached: PostgreSQL's
/// syscache invalidation decides what this backend sees after `ALTER TYPE ... RENAME VALUE`.
///
/// # Safety
/// `datum` must be an enum value.
pub unsafe fn with_enum_label<R>(datum: pg_sys::Datum, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    // SAFETY: SearchSysCache1 returns NULL or a valid pg_enum tuple that stays valid until
    // ReleaseSysCache; GETSTRUCT is t_data + t_hoff, and FormData_pg_enum.enumlabel is a
    // NUL-terminated NameData.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::ENUMOID as _, datum);
        if tuple.is_null() {
            return None;
        }
        let header = (*tuple).t_data;
        let form = header
            .cast::<u8>()
            .add(usize::from((*header).t_hoff))
            .cast::<pg_sys::FormData_pg_enum>();
        let label = std::ffi::CStr::from_ptr((*form).enumlabel.data.as_ptr()).to_bytes();
        let out = f(label);
        pg_sys::ReleaseSysCache(tuple);
        Some(out)
    }
}

/// An attribute's name.
pub fn attribute_name(att: &pg_sys::FormData_pg_attribute) -> String {
    // SAFETY: attname is a NUL-terminated NameData.
    unsafe { std::ffi::CStr::from_ptr(att.attname.data.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// What the encoder needs of a collation: its name (for messages) and whether it is
/// deterministic (the registry rejects non-deterministic ones), from the syscache. Order
/// claims are not made on this path, so the provider and locale are left unresolved;
/// validation uses [`collation`], which has them.
pub fn encoder_collation(oid: pg_sys::Oid) -> Option<Collation> {
    if oid == pg_sys::InvalidOid {
        return None;
    }
    // SAFETY: lsyscache lookups on a collation OID taken from the catalogs; the name is a
    // palloc'd C string (or NULL for an unknown OID).
    let (name, deterministic) = unsafe {
        let name = pg_sys::get_collation_name(oid);
        let name = if name.is_null() {
            format!("collation {}", u32::from(oid))
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        };
        (name, pg_sys::get_collation_isdeterministic(oid))
    };
    Some(Collation {
        name,
        provider: CollationProvider::Default,
        deterministic,
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
