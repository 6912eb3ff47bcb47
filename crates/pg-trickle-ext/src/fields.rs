//! What every entry point shares: one field's dispatch, resolved once per call site from
//! its type (through the registry, with its named rejections), and the loop that encodes a
//! row's values through it into a `bytea`. The record form ([`crate::call_site`]), the
//! argument form ([`crate::args`]) and the capture trigger ([`crate::capture`]) differ only in
//! where the values come from.

use pgrx::pg_sys;
use rowid_codec::structure::Shape;
use rowid_codec::{Domain, IdentityEncoder, TypeTag};
use rowid_registry::{FieldSpec, OpClass, resolve_field};

use crate::catalog::{encoder_collation, server_context, type_ref};
use crate::datum;
use crate::errors;
use crate::reader::{FieldError, Reader};

/// One field's dispatch.
pub struct Field {
    /// How its values are read.
    pub reader: Reader,
    /// Its name or position, for messages.
    pub name: String,
}

/// What is known of a field's type where it is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldType {
    /// Type OID.
    pub typid: pg_sys::Oid,
    /// Type modifier (-1: none).
    pub typmod: i32,
    /// Collation OID (`InvalidOid`: none).
    pub collation: pg_sys::Oid,
}

/// Resolves a field of type `ty` called `name` (`expr` says where it is, for rejections):
/// the `pgtrickle.row_id` domain is a child identity; anything else goes through the
/// registry, whose rejection is raised by `function` naming the field, type and property.
///
/// # Safety
/// Must run inside a backend; `mcxt` must outlive the returned reader.
pub unsafe fn resolve(
    function: &str,
    expr: String,
    name: String,
    ty: FieldType,
    row_id: pg_sys::Oid,
    mcxt: pg_sys::MemoryContext,
) -> Field {
    if row_id != pg_sys::InvalidOid && ty.typid == row_id {
        return Field {
            reader: Reader::Child,
            name,
        };
    }
    let spec = FieldSpec {
        expr,
        ty: type_ref(ty.typid, &encoder_collation),
        typmod: ty.typmod,
        collation: encoder_collation(ty.collation),
        opclass: OpClass::Default,
    };
    match resolve_field(&spec, &server_context()) {
        Ok(r) => Field {
            // SAFETY: the registry accepted this type with this shape; guaranteed by caller.
            reader: unsafe { Reader::build(ty.typid, &r.shape, mcxt) },
            name,
        },
        Err(rejection) => errors::rejected(function, &rejection),
    }
}

/// A field whose shape was resolved before (an identity schema's), built without asking the
/// registry again.
///
/// # Safety
/// Must run inside a backend; `shape` must be the registry's shape for `typid`, and `mcxt`
/// must outlive the returned reader.
pub unsafe fn from_shape(
    name: String,
    typid: pg_sys::Oid,
    shape: &Shape,
    row_id: pg_sys::Oid,
    mcxt: pg_sys::MemoryContext,
) -> Field {
    let reader = if row_id != pg_sys::InvalidOid && typid == row_id {
        Reader::Child
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { Reader::build(typid, shape, mcxt) }
    };
    Field { reader, name }
}

/// Fields being resolved for a cache: released when dropped before the cache takes them
/// ([`Resolving::finish`]), so an error unwinding through a rebuild leaves no reader memory
/// behind.
pub struct Resolving(Vec<Field>);

impl Resolving {
    /// No fields yet, room for `n`.
    pub fn with_capacity(n: usize) -> Resolving {
        Resolving(Vec::with_capacity(n))
    }

    /// Adds a resolved field.
    pub fn push(&mut self, field: Field) {
        self.0.push(field);
    }

    /// The fields, now the caller's to release.
    pub fn finish(mut self) -> Vec<Field> {
        std::mem::take(&mut self.0)
    }
}

impl Drop for Resolving {
    fn drop(&mut self) {
        release(&mut self.0);
    }
}

/// Releases what the fields' readers hold (before they are dropped or rebuilt).
pub fn release(fields: &mut [Field]) {
    for f in fields {
        f.reader.release();
    }
}

/// Encodes one row into `scratch`: `value(i)` is field `i`'s datum and whether it is NULL.
/// A malformed datum or a codec error is raised by `function`, naming the field.
///
/// # Safety
/// Every non-NULL datum `value` returns must be of the type its field's reader was built for.
pub unsafe fn encode_into(
    function: &str,
    scratch: &mut Vec<u8>,
    domain: Domain,
    fields: &[Field],
    mut value: impl FnMut(usize) -> (pg_sys::Datum, bool),
) {
    scratch.clear();
    let mut current = None;
    let result = (|| {
        let mut enc = IdentityEncoder::begin(scratch, domain, fields.len() as u32)?;
        for (i, f) in fields.iter().enumerate() {
            current = Some(i);
            let (datum, null) = value(i);
            if null {
                enc.null(f.reader.tag())?;
            } else {
                // SAFETY: guaranteed by the caller.
                unsafe { f.reader.write(&mut enc, datum)? };
            }
        }
        current = None;
        enc.finish().map_err(FieldError::Codec)
    })();
    match result {
        Ok(_) => {}
        Err(FieldError::Malformed) => match current.and_then(|i| fields.get(i)) {
            Some(f) => errors::malformed(function, &f.name, f.reader.tag()),
            None => errors::malformed(function, "?", TypeTag::Record),
        },
        Err(FieldError::Codec(e)) => errors::codec_error(function, &e, current, |i| {
            fields.get(i).map(|f| f.name.as_str())
        }),
    }
}

/// [`encode_into`], then a new `bytea` of the identity.
///
/// # Safety
/// As [`encode_into`].
pub unsafe fn encode(
    function: &str,
    scratch: &mut Vec<u8>,
    domain: Domain,
    fields: &[Field],
    value: impl FnMut(usize) -> (pg_sys::Datum, bool),
) -> *mut pg_sys::bytea {
    // SAFETY: guaranteed by the caller.
    unsafe { encode_into(function, scratch, domain, fields, value) };
    datum::to_bytea(scratch)
}
