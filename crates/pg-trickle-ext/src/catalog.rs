//! Every catalog read of the extension: a type OID to the registry's `TypeRef`, collations,
//! a relation's index candidates and columns, the server's context, the `pgtrickle.row_id`
//! domain, the storage facts and type-cache entries the Datum readers are built from, and
//! enum labels. Used when a call site's cache is built and by the validation
//! functions; never per row. Syscache and lsyscache lookups where they suffice; fixed,
//! fully qualified queries through [`crate::spi`] (locked search path) for what spans
//! several catalogs (index keys, the database default collation).

use pgrx::pg_sys;
use rowid_registry::buffer;
use rowid_registry::sql::QualifiedName;
use rowid_registry::{
    Collation, CollationProvider, CompositeField, FieldSpec, IndexCandidate, KeyColumn, OpClass,
    ServerContext, TypeRef,
};

use crate::spi;

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

/// A collation's facts from pg_collation (the database default resolved to the database's
/// provider and locale).
pub fn collation(oid: pg_sys::Oid) -> Option<Collation> {
    if oid == pg_sys::InvalidOid {
        return None;
    }
    let query = format!(
        "SELECT c.collname::pg_catalog.text, \
                CASE WHEN c.collprovider OPERATOR(pg_catalog.=) 'd' \
                     THEN d.datlocprovider::pg_catalog.text ELSE c.collprovider::pg_catalog.text END, \
                c.collisdeterministic, \
                CASE WHEN c.collprovider OPERATOR(pg_catalog.=) 'd' THEN d.datcollate \
                     ELSE COALESCE(c.collcollate, '') END \
         FROM pg_catalog.pg_collation c, pg_catalog.pg_database d \
         WHERE c.oid OPERATOR(pg_catalog.=) {} \
           AND d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()",
        u32::from(oid)
    );
    spi::rows(&query, &[], |row| {
        let provider = match row.get::<String>(2)?.as_deref() {
            Some("c") => CollationProvider::Libc,
            Some("i") => CollationProvider::Icu,
            Some("b") => CollationProvider::Builtin,
            _ => CollationProvider::Default,
        };
        Ok(Collation {
            name: row.get::<String>(1)?.unwrap_or_default(),
            provider,
            deterministic: row.get::<bool>(3)?.unwrap_or(false),
            locale: row.get::<String>(4)?.unwrap_or_default(),
        })
    })
    .pop()
}

/// The index candidates of `rel` as catalog data.
pub fn index_candidates(rel: pg_sys::Oid) -> Vec<IndexCandidate> {
    let query = format!(
        "SELECT i.indexrelid::pg_catalog.regclass::pg_catalog.text, i.indisprimary, \
                i.indisunique, i.indisvalid AND i.indisready, i.indpred IS NOT NULL, \
                i.indexprs IS NOT NULL, NOT i.indimmediate, i.indnullsnotdistinct, \
                pg_catalog.array_agg(COALESCE(a.attname::pg_catalog.text, '') ORDER BY k.ord), \
                pg_catalog.array_agg(COALESCE(a.attnotnull, false) ORDER BY k.ord), \
                pg_catalog.array_agg(COALESCE(a.atttypid, 0) ORDER BY k.ord), \
                pg_catalog.array_agg(COALESCE(a.atttypmod, -1) ORDER BY k.ord), \
                pg_catalog.array_agg(k.coll ORDER BY k.ord), \
                pg_catalog.array_agg(COALESCE(oc.opcdefault, false) ORDER BY k.ord), \
                pg_catalog.array_agg(COALESCE(oc.opcname::pg_catalog.text, '') ORDER BY k.ord) \
         FROM pg_catalog.pg_index i \
         CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(i.indkey::pg_catalog.int2[]), \
              pg_catalog.unnest(i.indcollation::pg_catalog.oid[]), \
              pg_catalog.unnest(i.indclass::pg_catalog.oid[])) \
              WITH ORDINALITY AS k(attnum, coll, opclass, ord) \
         LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid \
              AND a.attnum OPERATOR(pg_catalog.=) k.attnum AND k.attnum OPERATOR(pg_catalog.>) 0 \
         LEFT JOIN pg_catalog.pg_opclass oc ON oc.oid OPERATOR(pg_catalog.=) k.opclass \
         WHERE i.indrelid OPERATOR(pg_catalog.=) {} \
           AND k.ord OPERATOR(pg_catalog.<=) i.indnkeyatts \
         GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1",
        u32::from(rel)
    );
    spi::rows(&query, &[], |row| {
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
                    // Expression columns (attnum 0) have no column type; such an index is
                    // ineligible before its columns are resolved.
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
        Ok(IndexCandidate {
            name: row.get::<String>(1)?.unwrap_or_default(),
            primary: row.get::<bool>(2)?.unwrap_or(false),
            unique: row.get::<bool>(3)?.unwrap_or(false),
            valid: row.get::<bool>(4)?.unwrap_or(false),
            partial: row.get::<bool>(5)?.unwrap_or(false),
            expressions: row.get::<bool>(6)?.unwrap_or(false),
            deferrable: row.get::<bool>(7)?.unwrap_or(false),
            nulls_not_distinct: row.get::<bool>(8)?.unwrap_or(false),
            columns,
        })
    })
}

/// The OID of index `name` (as [`index_candidates`] names it) among `rel`'s indexes.
pub fn index_oid(rel: pg_sys::Oid, name: &str) -> Option<pg_sys::Oid> {
    spi::one::<pg_sys::Oid>(
        &format!(
            "SELECT i.indexrelid FROM pg_catalog.pg_index i \
             WHERE i.indrelid OPERATOR(pg_catalog.=) {} \
               AND i.indexrelid::pg_catalog.regclass::pg_catalog.text OPERATOR(pg_catalog.=) $1",
            u32::from(rel)
        ),
        &[name.into()],
    )
}

/// Every user column of `rel` that a row image carries (not dropped, not generated: the
/// columns pgoutput publishes), for the keyless rule.
pub fn all_columns(rel: pg_sys::Oid) -> Vec<FieldSpec> {
    let query = format!(
        "SELECT attname::pg_catalog.text, atttypid, atttypmod, attcollation \
         FROM pg_catalog.pg_attribute \
         WHERE attrelid OPERATOR(pg_catalog.=) {} AND attnum OPERATOR(pg_catalog.>) 0 \
           AND NOT attisdropped AND attgenerated OPERATOR(pg_catalog.=) '' \
         ORDER BY attnum",
        u32::from(rel)
    );
    spi::rows(&query, &[], |row| {
        let name = row.get::<String>(1)?.unwrap_or_default();
        let ty = row.get::<pg_sys::Oid>(2)?.unwrap_or(pg_sys::InvalidOid);
        Ok(FieldSpec {
            expr: name,
            ty: type_ref(ty, &collation),
            typmod: row.get::<i32>(3)?.unwrap_or(-1),
            collation: collation(row.get::<pg_sys::Oid>(4)?.unwrap_or(pg_sys::InvalidOid)),
            opclass: OpClass::Default,
        })
    })
}

/// What the identity schema says of a table: namespace, name, `relreplident`, `relkind`.
pub struct RelationFacts {
    /// Schema name.
    pub namespace: String,
    /// Relation name.
    pub relname: String,
    /// `relreplident`.
    pub replica_identity: u8,
    /// `relkind`.
    pub kind: u8,
}

/// A table's facts, through SPI (so, inside a transaction that imported a snapshot, as of
/// that snapshot); `None` when no table (plain or partitioned) has that OID.
pub fn relation_facts(rel: pg_sys::Oid) -> Option<RelationFacts> {
    let query = format!(
        "SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text, \
                c.relreplident::pg_catalog.text, c.relkind::pg_catalog.text \
         FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE c.oid OPERATOR(pg_catalog.=) {} AND c.relkind IN ('r', 'p')",
        u32::from(rel)
    );
    let byte = |s: Option<String>, default| s.and_then(|s| s.bytes().next()).unwrap_or(default);
    spi::rows(&query, &[], |row| {
        Ok(RelationFacts {
            namespace: row.get::<String>(1)?.unwrap_or_default(),
            relname: row.get::<String>(2)?.unwrap_or_default(),
            replica_identity: byte(row.get::<String>(3)?, b'd'),
            kind: byte(row.get::<String>(4)?, b'r'),
        })
    })
    .pop()
}

/// The leaf partitions of partitioned table `rel` whose replica identity setting is not
/// `replica_identity`, by name. Read from `pg_inherits`: `pg_partition_tree()` locks every
/// partition, and this runs in the event triggers, at the end of any DDL.
pub fn leaves_with_other_replica_identity(rel: pg_sys::Oid, replica_identity: u8) -> Vec<String> {
    let query = format!(
        "WITH RECURSIVE tree(relid) AS ( \
           SELECT {}::pg_catalog.oid \
           UNION \
           SELECT i.inhrelid FROM tree t \
           JOIN pg_catalog.pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) t.relid) \
         SELECT c.oid::pg_catalog.regclass::pg_catalog.text FROM tree t \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.relid \
         WHERE c.relkind OPERATOR(pg_catalog.<>) 'p' \
           AND c.relreplident::pg_catalog.text OPERATOR(pg_catalog.<>) $1 ORDER BY 1",
        u32::from(rel)
    );
    let ri = char::from(replica_identity).to_string();
    spi::rows(&query, &[ri.as_str().into()], |row| {
        Ok(row.get::<String>(1)?.unwrap_or_default())
    })
}

/// A published column of a table (non-dropped, non-generated), as an identity schema
/// message lists it.
pub struct PublishedColumn {
    /// `attnum`.
    pub attnum: i16,
    /// `attname`.
    pub name: String,
    /// `atttypid`.
    pub type_oid: u32,
    /// `format_type(atttypid, atttypmod)` under the locked search path.
    pub type_name: String,
    /// `attnotnull`.
    pub not_null: bool,
    /// The type, resolved for the registry.
    pub ty: TypeRef,
    /// `array_send(attmissingval)` when `atthasmissing` and the type has a binary send form:
    /// the value rows stored before the column was added hold, as a one-element array.
    pub missing: Option<Vec<u8>>,
    /// `atthasmissing`, but the type or a type it is made of has no binary send function
    /// (`aclitem`): `array_send` would raise, so `missing` is `None`.
    pub missing_without_send_form: bool,
}

/// Whether the type of the column `a` (the enclosing query's `pg_attribute` row) or any
/// type a value of it is made of (a domain's
/// base, an array's element, a composite's attributes, a range's subtype, a multirange's
/// range) has no binary send function, so that its send form (`array_send`, `record_send`)
/// raises. A composite cannot contain itself, and the depth is bounded all the same.
const WITHOUT_SEND_FORM: &str = "\
    (WITH RECURSIVE made_of(t, depth) AS ( \
       SELECT a.atttypid, 0 \
       UNION ALL \
       SELECT part.t, m.depth OPERATOR(pg_catalog.+) 1 \
       FROM made_of m \
       JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) m.t \
       CROSS JOIN LATERAL ( \
         SELECT ty.typbasetype WHERE ty.typtype OPERATOR(pg_catalog.=) 'd' \
         UNION ALL \
         SELECT ty.typelem \
         WHERE ty.typsend OPERATOR(pg_catalog.=) 'pg_catalog.array_send'::pg_catalog.regproc \
         UNION ALL \
         SELECT att.atttypid FROM pg_catalog.pg_attribute att \
         WHERE ty.typtype OPERATOR(pg_catalog.=) 'c' \
           AND att.attrelid OPERATOR(pg_catalog.=) ty.typrelid \
           AND att.attnum OPERATOR(pg_catalog.>) 0 AND NOT att.attisdropped \
         UNION ALL \
         SELECT r.rngsubtype FROM pg_catalog.pg_range r \
         WHERE r.rngtypid OPERATOR(pg_catalog.=) ty.oid \
         UNION ALL \
         SELECT r.rngtypid FROM pg_catalog.pg_range r \
         WHERE r.rngmultitypid OPERATOR(pg_catalog.=) ty.oid \
       ) part(t) \
       WHERE m.depth OPERATOR(pg_catalog.<) 64) \
     SELECT pg_catalog.bool_or(ty.typsend::pg_catalog.oid OPERATOR(pg_catalog.=) 0) \
     FROM made_of m JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) m.t)";

/// The published columns of `rel`, in attnum order.
pub fn published_columns(rel: pg_sys::Oid) -> Vec<PublishedColumn> {
    let query = format!(
        "SELECT attnum, attname::pg_catalog.text, atttypid, attnotnull, \
                pg_catalog.format_type(atttypid, atttypmod), \
                CASE WHEN atthasmissing AND NOT unsendable \
                     THEN pg_catalog.array_send(attmissingval) END, \
                atthasmissing AND unsendable \
         FROM pg_catalog.pg_attribute a, \
              LATERAL (SELECT CASE WHEN a.atthasmissing THEN {WITHOUT_SEND_FORM} \
                               ELSE false END) s(unsendable) \
         WHERE attrelid OPERATOR(pg_catalog.=) {} AND attnum OPERATOR(pg_catalog.>) 0 \
           AND NOT attisdropped AND attgenerated OPERATOR(pg_catalog.=) '' \
         ORDER BY attnum",
        u32::from(rel)
    );
    spi::rows(&query, &[], |row| {
        let ty = row.get::<pg_sys::Oid>(3)?.unwrap_or(pg_sys::InvalidOid);
        Ok(PublishedColumn {
            attnum: row.get::<i16>(1)?.unwrap_or(0),
            name: row.get::<String>(2)?.unwrap_or_default(),
            type_oid: u32::from(ty),
            type_name: row.get::<String>(5)?.unwrap_or_default(),
            not_null: row.get::<bool>(4)?.unwrap_or(false),
            ty: type_ref(ty, &collation),
            missing: row.get::<Vec<u8>>(6)?,
            missing_without_send_form: row.get::<bool>(7)?.unwrap_or(false),
        })
    })
}

/// `rel`'s name as `regclass` prints it under the locked search path: always
/// schema-qualified (unless in `pg_catalog`), whatever the caller's path.
pub fn relation_name(rel: pg_sys::Oid) -> String {
    spi::one::<String>(
        &format!(
            "SELECT {}::pg_catalog.regclass::pg_catalog.text",
            u32::from(rel)
        ),
        &[],
    )
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

/// The relations (`typrelid`) of every composite type a value of type `oid` can contain:
/// through domains, array elements, range subtypes, multiranges and composite attributes.
/// `ALTER TYPE` on a composite sends a relcache invalidation for its relation; a cache of
/// readers built from the type's descriptor watches these.
pub fn composite_relations(oid: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    let mut out = Vec::new();
    composite_relations_into(oid, 0, &mut out);
    out
}

fn composite_relations_into(oid: pg_sys::Oid, depth: u32, out: &mut Vec<pg_sys::Oid>) {
    if depth > MAX_TYPE_NESTING || oid == pg_sys::InvalidOid {
        return;
    }
    let next =
        |o: pg_sys::Oid, out: &mut Vec<pg_sys::Oid>| composite_relations_into(o, depth + 1, out);
    // SAFETY: lsyscache lookups on type OIDs from the catalogs.
    unsafe {
        let base = pg_sys::getBaseType(oid);
        if base != oid {
            return next(base, out);
        }
        let element = pg_sys::get_element_type(oid);
        if element != pg_sys::InvalidOid {
            return next(element, out);
        }
        match pg_sys::get_typtype(oid) as u8 {
            b'c' => {
                let rel = pg_sys::get_typ_typrelid(oid);
                if rel == pg_sys::InvalidOid || out.contains(&rel) {
                    return;
                }
                out.push(rel);
                let tupdesc = row_descriptor(oid, -1, pg_sys::CurrentMemoryContext);
                for i in 0..(*tupdesc).natts as usize {
                    let att = attribute(tupdesc, i);
                    if !att.attisdropped {
                        next(att.atttypid, out);
                    }
                }
                pg_sys::FreeTupleDesc(tupdesc);
            }
            b'r' => next(pg_sys::get_range_subtype(oid), out),
            b'm' => next(pg_sys::get_multirange_range(oid), out),
            _ => {}
        }
    }
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

/// Raises `serialization_failure` (retry the statement): the composite type `oid` has
/// `live` attributes now and the shape read for it a moment before has `shaped` (an
/// `ALTER TYPE` committed in between).
pub fn changed_meanwhile(oid: pg_sys::Oid, live: usize, shaped: usize) -> ! {
    pgrx::ereport!(
        ERROR,
        pgrx::PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
        format!(
            "the composite type {} has {live} attributes, the identity shape read for it {shaped}: \
             it was altered meanwhile; run the statement again",
            u32::from(oid)
        )
    );
}

/// The owner of a relation (`InvalidOid` when there is none).
pub fn relation_owner(rel: pg_sys::Oid) -> pg_sys::Oid {
    spi::one::<pg_sys::Oid>(
        &format!(
            "SELECT relowner FROM pg_catalog.pg_class WHERE oid OPERATOR(pg_catalog.=) {}",
            u32::from(rel)
        ),
        &[],
    )
    .unwrap_or(pg_sys::InvalidOid)
}

/// The name of role `role` (its OID in brackets when it has none).
pub fn role_name(role: pg_sys::Oid) -> String {
    // SAFETY: a syscache lookup by OID; `true`: NULL instead of an error when missing.
    let name = unsafe { pg_sys::GetUserNameFromId(role, true) };
    if name.is_null() {
        return format!("role {}", u32::from(role));
    }
    // SAFETY: a palloc'd NUL-terminated name.
    unsafe { std::ffi::CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

/// The name of the buffer `oid` (in the extension's buffer schema).
pub fn buffer_name(oid: pg_sys::Oid) -> QualifiedName {
    let name = spi::one::<String>(
        &format!(
            "SELECT relname::pg_catalog.text FROM pg_catalog.pg_class \
             WHERE oid OPERATOR(pg_catalog.=) {}",
            u32::from(oid)
        ),
        &[],
    )
    .unwrap_or_default();
    QualifiedName::new(buffer::DEFAULT_SCHEMA, &name)
}

/// Runs `f` as the extension's owner (a security-restricted operation): for the extension's
/// own reads of its catalogs, whose rows each role sees only of the stream tables it may act
/// as the owner of (row-level security, spec/stream-tables.md §10.5).
pub fn as_extension<R>(f: impl FnOnce() -> R) -> R {
    crate::guard::as_owner(extension_owner(), f)
}

/// The extension's owner (who owns `pgtrickle_changes` and the extension's tables, and may
/// create tables there).
pub fn extension_owner() -> pg_sys::Oid {
    spi::one::<pg_sys::Oid>(
        "SELECT extowner FROM pg_catalog.pg_extension \
         WHERE extname OPERATOR(pg_catalog.=) 'pg_trickle_ext'",
        &[],
    )
    .unwrap_or(pg_sys::InvalidOid)
}

/// What a stream table's definition depends on in its sources, as one text: every column
/// (number, name, type, typmod, collation, `NOT NULL`, generation), every unique index (its
/// key columns); every type its sources' columns and its own columns (`storage`: the
/// query's outputs) depend on, transitively through domains, arrays, composites, ranges and
/// multiranges (proposal §6.2: "DDL invalidations are the union of all component
/// invalidations"): each one's kind, base type, typmod, collation and `NOT NULL`, a
/// composite's attributes, an enum's labels in order, a range's subtype and collation; and
/// of every user-defined function it calls (`functions`, what [`crate::binding`] recorded),
/// what it is: name, schema, arguments, result, language, body, volatility, strictness,
/// security and settings. A DDL that changes it (`ALTER TYPE ... RENAME VALUE`, `ADD
/// ATTRIBUTE`, `ALTER COLUMN ... DROP NOT NULL`, a column's collation, `CREATE OR REPLACE
/// FUNCTION`, `ALTER FUNCTION` among them) makes the next refresh rebuild the stream table
/// from its query (spec/stream-tables.md §5.4, §10.2).
pub fn source_shape(
    storage: pg_sys::Oid,
    sources: &[pg_sys::Oid],
    functions: &[pg_sys::Oid],
) -> String {
    // Kept: every refresh and every IMMEDIATE statement compares it.
    spi::rows_mut_map_kept(
        "WITH RECURSIVE ty(oid) AS ( \
           SELECT a.atttypid FROM pg_catalog.pg_attribute a \
           WHERE (a.attrelid OPERATOR(pg_catalog.=) ANY ($1) \
                  OR a.attrelid OPERATOR(pg_catalog.=) $3) \
             AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
           UNION \
           SELECT n.oid FROM ty JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) ty.oid \
           CROSS JOIN LATERAL ( \
             SELECT t.typbasetype WHERE t.typbasetype OPERATOR(pg_catalog.<>) 0 \
             UNION ALL SELECT t.typelem WHERE t.typelem OPERATOR(pg_catalog.<>) 0 \
             UNION ALL SELECT a.atttypid FROM pg_catalog.pg_attribute a \
               WHERE t.typrelid OPERATOR(pg_catalog.<>) 0 \
                 AND a.attrelid OPERATOR(pg_catalog.=) t.typrelid \
                 AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
             UNION ALL SELECT r.rngsubtype FROM pg_catalog.pg_range r \
               WHERE r.rngtypid OPERATOR(pg_catalog.=) t.oid \
             UNION ALL SELECT r.rngtypid FROM pg_catalog.pg_range r \
               WHERE r.rngmultitypid OPERATOR(pg_catalog.=) t.oid) n(oid)) \
         SELECT COALESCE(pg_catalog.string_agg(x, ';' ORDER BY x), '') FROM ( \
           SELECT pg_catalog.format('c:%s:%s:%s:%s:%s:%s:%s:%s', a.attrelid, a.attnum, \
                    a.attname, a.atttypid, a.atttypmod, a.attcollation, a.attnotnull, \
                    a.attgenerated) AS x \
           FROM pg_catalog.pg_attribute a \
           WHERE a.attrelid OPERATOR(pg_catalog.=) ANY ($1) \
             AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
           UNION ALL \
           SELECT pg_catalog.format('i:%s:%s:%s', i.indrelid, i.indexrelid, i.indkey) \
           FROM pg_catalog.pg_index i \
           WHERE i.indrelid OPERATOR(pg_catalog.=) ANY ($1) AND i.indisunique \
           UNION ALL \
           SELECT pg_catalog.format('t:%s:%s:%s:%s:%s:%s:%s', t.oid, t.typtype, t.typbasetype, \
                    t.typtypmod, t.typcollation, t.typnotnull, t.typrelid) \
           FROM pg_catalog.pg_type t WHERE t.oid OPERATOR(pg_catalog.=) ANY (SELECT oid FROM ty) \
           UNION ALL \
           SELECT pg_catalog.format('a:%s:%s:%s:%s:%s:%s', t.oid, a.attnum, a.attname, \
                    a.atttypid, a.atttypmod, a.attcollation) \
           FROM pg_catalog.pg_type t JOIN pg_catalog.pg_attribute a \
             ON a.attrelid OPERATOR(pg_catalog.=) t.typrelid \
           WHERE t.oid OPERATOR(pg_catalog.=) ANY (SELECT oid FROM ty) \
             AND t.typrelid OPERATOR(pg_catalog.<>) 0 \
             AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
           UNION ALL \
           SELECT pg_catalog.format('e:%s:%s:%s', e.enumtypid, e.enumsortorder, e.enumlabel) \
           FROM pg_catalog.pg_enum e \
           WHERE e.enumtypid OPERATOR(pg_catalog.=) ANY (SELECT oid FROM ty) \
           UNION ALL \
           SELECT pg_catalog.format('r:%s:%s:%s:%s', r.rngtypid, r.rngsubtype, r.rngcollation, \
                    r.rngsubopc) \
           FROM pg_catalog.pg_range r \
           WHERE r.rngtypid OPERATOR(pg_catalog.=) ANY (SELECT oid FROM ty) \
           UNION ALL \
           SELECT pg_catalog.format('f:%s:%s', p.oid, pg_catalog.md5(pg_catalog.concat_ws('|', \
                    p.proname, p.pronamespace, p.proargtypes, p.prorettype, p.proretset, \
                    p.prolang, p.prosrc, p.probin, p.prosqlbody, p.provolatile, \
                    p.proisstrict, p.prosecdef, p.proleakproof, p.proparallel, p.proconfig))) \
           FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) ANY ($2)) s",
        &[
            pgrx::datum::DatumWithOid::from(sources.to_vec()),
            pgrx::datum::DatumWithOid::from(functions.to_vec()),
            pgrx::datum::DatumWithOid::from(storage),
        ],
        |r| r.get::<String>(1),
    )
    .pop()
    .flatten()
    .unwrap_or_default()
}
