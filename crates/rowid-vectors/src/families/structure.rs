//! `structure.json`: wire-format §3, §4, §6.1 (framing, domains, child identities).

use rowid_codec::{ChildIdentity, Domain, OwnedChildIdentity, OwnedValue, TypeTag};

use super::build::{encode_owned, field, null};
use crate::{Family, Field, ValidCase};

pub(super) fn structure() -> Family {
    let int4 = |v: i32| {
        field(
            TypeTag::Int4,
            OwnedValue::Int4(v),
            &v.to_string(),
            &format!("({v})::int4"),
        )
    };
    let text = |s: &str| {
        field(
            TypeTag::Text,
            OwnedValue::Text(s.as_bytes().to_vec()),
            &format!("{s:?}"),
            &format!("'{s}'::text"),
        )
    };
    let case = |domain, comment: &str, fields: Vec<Field>, flags: &[&'static str]| ValidCase {
        comment: comment.to_string(),
        domain,
        fields,
        flags: flags.to_vec(),
    };
    let child = |v: i32| {
        let bytes = encode_owned(
            Domain::ScanKey,
            &[(TypeTag::Int4, Some(OwnedValue::Int4(v)))],
        );
        Field {
            tag: TypeTag::ChildIdentity,
            value: ChildIdentity::new(&bytes)
                .ok()
                .map(|child| OwnedValue::Identity(OwnedChildIdentity::from(child))),
            display: format!("SCAN_KEY(int4 {v})"),
            sql: Some(format!(
                "pgtrickle.encode_row_id_v2('SCAN_KEY', ROW(({v})::int4))::pgtrickle.row_id"
            )),
        }
    };
    let mut valid = vec![
        case(Domain::ScanKey, "no fields", vec![], &["edge"]),
        case(
            Domain::ScanKey,
            "(1, 23)",
            vec![int4(1), int4(23)],
            &["framing"],
        ),
        case(
            Domain::ScanKey,
            "(12, 3) differs from (1, 23)",
            vec![int4(12), int4(3)],
            &["framing"],
        ),
        case(
            Domain::ScanKey,
            "('ab', 'c')",
            vec![text("ab"), text("c")],
            &["framing"],
        ),
        case(
            Domain::ScanKey,
            "('a', 'bc') differs from ('ab', 'c')",
            vec![text("a"), text("bc")],
            &["framing"],
        ),
        case(
            Domain::GroupKey,
            "NULL group key sorts first",
            vec![null(TypeTag::Text, "text"), int4(1)],
            &["null"],
        ),
        case(
            Domain::KeylessRow,
            "keyless row",
            vec![int4(1), text("x"), null(TypeTag::Int8, "int8")],
            &[],
        ),
        case(Domain::SetKey, "SET_KEY domain", vec![int4(1)], &[]),
        case(Domain::WindowKey, "WINDOW_KEY domain", vec![int4(1)], &[]),
        case(
            Domain::Synthetic,
            "scalar aggregate singleton",
            vec![text("scalar_aggregate_singleton")],
            &["synthetic"],
        ),
        case(
            Domain::Synthetic,
            "lateral inner dummy",
            vec![text("lateral_inner_dummy")],
            &["synthetic"],
        ),
    ];
    valid.push(case(
        Domain::JoinKey,
        "join of two children",
        vec![child(1), child(2)],
        &["nesting"],
    ));
    valid.push(case(
        Domain::JoinKey,
        "join with a NULL child side",
        vec![child(1), null(TypeTag::ChildIdentity, "pgtrickle.row_id")],
        &["nesting", "null"],
    ));
    valid.push(ValidCase {
        comment: "a PostgreSQL domain encodes as its base type".to_string(),
        domain: Domain::ScanKey,
        fields: vec![field(
            TypeTag::Int4,
            OwnedValue::Int4(5),
            "5",
            "(5)::rowid_vec_posint",
        )],
        flags: vec!["pg-domain"],
    });
    Family {
        file: "structure.json",
        spec: "wire-format.md §3, §4, §6",
        setup: vec!["CREATE DOMAIN rowid_vec_posint AS int4 CHECK (VALUE > 0)"],
        valid,
        ..Family::default()
    }
}
