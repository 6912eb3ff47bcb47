//! Row image shapes: how a column's binary send form is read for a row image
//! (spec/row-images.md). Unlike an identity field's resolution ([`crate::resolve_field`]),
//! nothing here is about equality: a column whose type the codec can read is imaged whatever
//! its collation or operator class, and a type it cannot read (`money`, `xml`, an extension's
//! base type) has no shape and travels as its send form with its type name.

use rowid_codec::TypeTag;
use rowid_codec::limits::MAX_FIELDS;
use rowid_codec::structure::Shape;

use crate::catalog::TypeRef;
use crate::entry;

/// The shape the codec's send-format parsers read a value of `ty` with, or `None` when the
/// codec has no parser for it (somewhere in the type's tree).
pub fn image_shape(ty: &TypeRef) -> Option<Shape> {
    match ty {
        TypeRef::Builtin { oid, .. } => entry::builtin(*oid).map(|e| {
            if e.tag == TypeTag::Jsonb {
                Shape::Jsonb
            } else {
                Shape::Scalar(e.tag)
            }
        }),
        TypeRef::Enum { .. } => Some(Shape::Scalar(TypeTag::Enum)),
        TypeRef::Domain { base, .. } => image_shape(base),
        TypeRef::Array { element, .. } => Some(Shape::Array(Box::new(image_shape(element)?))),
        TypeRef::Range { subtype, .. } => Some(Shape::Range(Box::new(image_shape(subtype)?))),
        TypeRef::Multirange { range, .. } => match image_shape(range)? {
            Shape::Range(subtype) => Some(Shape::Multirange(subtype)),
            _ => None,
        },
        TypeRef::Composite { fields, .. } => {
            if fields.len() > MAX_FIELDS as usize {
                return None;
            }
            fields
                .iter()
                .map(|f| image_shape(&f.ty))
                .collect::<Option<Vec<_>>>()
                .map(Shape::Record)
        }
        TypeRef::AnonymousRecord | TypeRef::Other { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CompositeField, oid};

    fn b(o: u32, name: &str) -> TypeRef {
        TypeRef::builtin(o, name)
    }

    #[test]
    fn readable_types_have_shapes_whatever_their_collation() {
        assert_eq!(
            image_shape(&b(oid::TEXT, "text")),
            Some(Shape::Scalar(TypeTag::Text))
        );
        assert_eq!(
            image_shape(&b(oid::FLOAT8, "double precision")),
            Some(Shape::Scalar(TypeTag::Float8))
        );
        assert_eq!(image_shape(&b(3802, "jsonb")), Some(Shape::Jsonb));
        let domain = TypeRef::Domain {
            oid: 90_001,
            name: "public.positive".into(),
            base: Box::new(b(oid::INT4, "integer")),
        };
        assert_eq!(image_shape(&domain), Some(Shape::Scalar(TypeTag::Int4)));
        let array = TypeRef::Array {
            oid: 90_002,
            name: "public.positive[]".into(),
            element: Box::new(domain),
        };
        assert_eq!(
            image_shape(&array),
            Some(Shape::Array(Box::new(Shape::Scalar(TypeTag::Int4))))
        );
        let composite = TypeRef::Composite {
            oid: 90_003,
            name: "public.pair".into(),
            fields: vec![
                CompositeField {
                    name: "a".into(),
                    ty: b(oid::INT8, "bigint"),
                    typmod: -1,
                    collation: None,
                },
                CompositeField {
                    name: "b".into(),
                    ty: TypeRef::Enum {
                        oid: 90_004,
                        name: "public.mood".into(),
                    },
                    typmod: -1,
                    collation: None,
                },
            ],
        };
        assert_eq!(
            image_shape(&composite),
            Some(Shape::Record(vec![
                Shape::Scalar(TypeTag::Int8),
                Shape::Scalar(TypeTag::Enum)
            ]))
        );
    }

    #[test]
    fn unreadable_types_anywhere_in_the_tree_have_none() {
        assert_eq!(image_shape(&b(oid::MONEY, "money")), None);
        assert_eq!(image_shape(&b(oid::XML, "xml")), None);
        let array = TypeRef::Array {
            oid: 791,
            name: "money[]".into(),
            element: Box::new(b(oid::MONEY, "money")),
        };
        assert_eq!(image_shape(&array), None);
        let composite = TypeRef::Composite {
            oid: 90_005,
            name: "public.priced".into(),
            fields: vec![CompositeField {
                name: "p".into(),
                ty: b(oid::MONEY, "money"),
                typmod: -1,
                collation: None,
            }],
        };
        assert_eq!(image_shape(&composite), None);
        assert_eq!(image_shape(&TypeRef::AnonymousRecord), None);
        assert_eq!(
            image_shape(&TypeRef::Other {
                oid: 90_006,
                name: "public.hstore".into()
            }),
            None
        );
    }
}
