//! Snapshots of every SQL shape the registry produces (tests/snapshots/).

use insta::assert_snapshot;
use rowid_registry::IndexClass::{DirectNonUnique, DirectUnique, ProbeExpression};
use rowid_registry::sql::{
    QualifiedName, delete, index_ddl, match_predicate, merge, quote_ident, update, upsert,
};

fn table() -> QualifiedName {
    QualifiedName::new("public", "Order \"Items\"")
}

#[test]
fn identifiers_are_quoted() {
    assert_eq!(quote_ident("simple"), "\"simple\"");
    assert_eq!(quote_ident("Mixed Case"), "\"Mixed Case\"");
    assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
}

#[test]
fn index_ddl_per_class() {
    let t = table();
    assert_snapshot!("ddl_direct_unique", index_ddl(DirectUnique, "st_rowid", &t));
    assert_snapshot!(
        "ddl_direct_non_unique",
        index_ddl(DirectNonUnique, "st_rowid", &t)
    );
    assert_snapshot!(
        "ddl_probe_expression",
        index_ddl(ProbeExpression, "st_rowid", &t)
    );
}

#[test]
fn match_predicates() {
    assert_snapshot!(
        "predicate_direct",
        match_predicate(DirectUnique, "st", "delta")
    );
    assert_snapshot!(
        "predicate_probe",
        match_predicate(ProbeExpression, "st", "delta")
    );
}

#[test]
fn dml_shapes() {
    let t = table();
    let cols = ["qty", "Price"];
    assert_snapshot!(
        "upsert_direct_unique",
        upsert(DirectUnique, &t, "delta", &cols).unwrap()
    );
    assert_snapshot!(
        "upsert_no_columns",
        upsert(DirectUnique, &t, "delta", &[]).unwrap()
    );
    assert!(
        upsert(ProbeExpression, &t, "delta", &cols).is_none(),
        "no ON CONFLICT without a unique index"
    );
    assert!(upsert(DirectNonUnique, &t, "delta", &cols).is_none());
    assert_snapshot!("merge_probe", merge(ProbeExpression, &t, "delta", &cols));
    assert_snapshot!("merge_direct", merge(DirectNonUnique, &t, "delta", &cols));
    assert_snapshot!("update_probe", update(ProbeExpression, &t, "delta", &cols));
    assert_snapshot!("delete_probe", delete(ProbeExpression, &t, "delta"));
    assert_snapshot!("delete_direct", delete(DirectUnique, &t, "delta"));
}
