//! Replica storage (spec/replica.md): the SQL of every statement (snapshots: a change to one
//! is a reviewed diff), the segment rule, the storage's column comments and shape check, and
//! how a source's DDL becomes ALTER statements. The statements' behaviour against a server
//! and a model is `rowid-cdc`'s `tests/replica_apply.rs`.

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use insta::assert_snapshot;
use rowid_registry::buffer::ImageColumn;
use rowid_registry::replica::{
    Apply, Expect, SEGMENT_CHANGES, SegmentChange, Segmenter, Storage, alter_statements,
    applied_position, check_shape, check_source_columns, check_versions, class_from_name,
    class_name, column_comment, create_statements, fill_added_column, metadata_statements,
    parse_column_comment, rebuild_statements, record_position, record_storage,
};
use rowid_registry::schema_message::StoredIdentity;
use rowid_registry::sql::QualifiedName;
use rowid_registry::{IndexClass, Uniqueness};

fn col(attnum: i16, name: &str, sql_type: &str) -> ImageColumn {
    ImageColumn {
        attnum,
        name: name.into(),
        sql_type: sql_type.into(),
    }
}

fn storage(class: IndexClass, uniqueness: Uniqueness) -> Storage {
    Storage {
        table: QualifiedName::new("public", "orders"),
        source_relid: 16385,
        class,
        uniqueness,
        columns: vec![col(1, "id", "bigint"), col(3, "note", "text")],
    }
}

#[test]
fn storage_ddl_per_index_class() {
    for (name, class, uniqueness) in [
        (
            "create_direct_unique",
            IndexClass::DirectUnique,
            Uniqueness::Unique,
        ),
        (
            "create_direct_multiset",
            IndexClass::DirectNonUnique,
            Uniqueness::Multiset,
        ),
        (
            "create_probe",
            IndexClass::ProbeExpression,
            Uniqueness::Unique,
        ),
    ] {
        assert_snapshot!(
            name,
            create_statements(&storage(class, uniqueness)).join(";\n")
        );
    }
}

#[test]
fn apply_statements_per_index_class() {
    for (name, class, uniqueness) in [
        (
            "apply_direct_unique",
            IndexClass::DirectUnique,
            Uniqueness::Unique,
        ),
        (
            "apply_probe_unique",
            IndexClass::ProbeExpression,
            Uniqueness::Unique,
        ),
        (
            "apply_direct_multiset",
            IndexClass::DirectNonUnique,
            Uniqueness::Multiset,
        ),
        (
            "apply_probe_multiset",
            IndexClass::ProbeExpression,
            Uniqueness::Multiset,
        ),
    ] {
        let s = storage(class, uniqueness);
        let apply = Apply::new(&s);
        let mut text = vec![apply.delta_table(), apply.copy_in()];
        text.extend(
            apply
                .steps(None)
                .into_iter()
                .map(|step| format!("-- {} ({:?})\n{}", step.what, step.expect, step.sql)),
        );
        text.push(format!("-- at fault\n{}", apply.first_unapplicable()));
        text.push(apply.truncate());
        assert_snapshot!(name, text.join(";\n"));
    }
}

#[test]
fn an_update_leaving_columns_alone_sets_only_the_others() {
    let s = storage(IndexClass::DirectUnique, Uniqueness::Unique);
    let steps = Apply::new(&s).steps(Some(&["id"]));
    let update = &steps[1].sql;
    assert!(update.contains("\"id\" = d.\"__pgt_new_1\""), "{update}");
    assert!(!update.contains("\"note\" ="), "{update}");
    // The identity always moves with the row.
    assert!(
        update.contains("\"__pgt_row_id\" = d.\"__pgt_row_id\""),
        "{update}"
    );
    assert_eq!(
        steps.iter().map(|s| s.expect).collect::<Vec<_>>(),
        [
            Expect::Changes(&['D']),
            Expect::Changes(&['U']),
            Expect::Changes(&['I', 'S'])
        ]
    );
}

#[test]
fn metadata_and_positions() {
    let mut text = metadata_statements("pgtrickle_replica");
    text.push(record_storage("pgtrickle_replica"));
    text.push(record_position("pgtrickle_replica"));
    text.push(applied_position("pgtrickle_replica"));
    assert_snapshot!("metadata", text.join(";\n"));
    for class in [
        IndexClass::DirectUnique,
        IndexClass::DirectNonUnique,
        IndexClass::ProbeExpression,
    ] {
        assert_eq!(class_from_name(class_name(class)), Some(class));
    }
    assert_eq!(class_from_name("hash"), None);
    assert!(check_versions("public.orders", 2, 1).is_ok());
    let err = check_versions("public.orders", 1, 1)
        .unwrap_err()
        .to_string();
    assert!(err.contains("public.orders") && err.contains("V1"), "{err}");
    assert!(check_versions("public.orders", 2, 2).is_err());
}

fn change<'a>(op: char, old: Option<&'a [u8]>, new: Option<&'a [u8]>) -> SegmentChange<'a> {
    SegmentChange {
        op,
        old_id: old,
        new_id: new,
        absent: &[],
        bytes: 10,
    }
}

#[test]
fn a_unique_segment_names_each_identity_once() {
    let (a, b, c) = (&b"a"[..], &b"b"[..], &b"c"[..]);
    let mut seg = Segmenter::new(Uniqueness::Unique);
    assert!(seg.admit(&change('I', None, Some(a))));
    assert!(
        seg.admit(&change('U', Some(b), Some(b))),
        "in place: one name"
    );
    assert!(!seg.admit(&change('D', Some(a), None)), "a again");
    assert!(
        !seg.admit(&change('U', Some(c), Some(b))),
        "b again, as the new row"
    );
    assert!(
        seg.admit(&change('U', Some(c), Some(&b"d"[..]))),
        "a move to a new name"
    );
    assert_eq!(seg.len(), 3);
    seg.clear();
    assert!(
        seg.admit(&change('D', Some(a), None)),
        "an empty segment takes anything"
    );
}

#[test]
fn a_unique_segment_has_one_set_list() {
    let note = vec!["note".to_string()];
    let leaves = |id: &'static [u8]| SegmentChange {
        absent: &note,
        ..change('U', Some(id), Some(id))
    };
    let mut seg = Segmenter::new(Uniqueness::Unique);
    assert!(seg.admit(&leaves(b"a")));
    assert!(seg.admit(&leaves(b"b")));
    assert!(
        seg.admit(&change('I', None, Some(b"c"))),
        "inserts set every column"
    );
    assert!(
        !seg.admit(&change('U', Some(b"d"), Some(b"d"))),
        "another set list"
    );
    assert_eq!(seg.absent(), Some(&note[..]));
}

#[test]
fn a_multiset_segment_takes_repeats_up_to_its_size() {
    let a = &b"a"[..];
    let mut seg = Segmenter::new(Uniqueness::Multiset);
    for _ in 0..SEGMENT_CHANGES {
        assert!(seg.admit(&change('I', None, Some(a))));
    }
    assert!(!seg.admit(&change('I', None, Some(a))), "the cap");
    let mut seg = Segmenter::new(Uniqueness::Multiset);
    let huge = SegmentChange {
        bytes: usize::MAX,
        ..change('I', None, Some(a))
    };
    assert!(seg.admit(&huge), "one change alone, however large");
    assert!(!seg.admit(&change('I', None, Some(a))));
}

#[test]
fn storage_columns_say_which_source_column_they_hold() {
    assert_eq!(parse_column_comment(&column_comment(12)), Some(12));
    for bad in [
        "source column 0",
        "source column +3",
        "source column 03",
        "column 3",
        "",
    ] {
        assert_eq!(parse_column_comment(bad), None, "{bad:?}");
    }
    let row =
        |n: &str, t: &str, c: Option<&str>| (n.to_string(), t.to_string(), c.map(String::from));
    let rows = vec![
        row("__pgt_row_id", "bytea", None),
        row("id", "bigint", Some("source column 1")),
        row("note", "text", Some("source column 3")),
    ];
    assert_eq!(
        check_shape("public.orders", &rows).unwrap(),
        [col(1, "id", "bigint"), col(3, "note", "text")]
    );
    let no_id = vec![row("id", "bigint", Some("source column 1"))];
    assert!(
        check_shape("t", &no_id)
            .unwrap_err()
            .to_string()
            .contains("__pgt_row_id")
    );
    let uncommented = vec![row("__pgt_row_id", "bytea", None), row("x", "int", None)];
    let err = check_shape("public.t", &uncommented)
        .unwrap_err()
        .to_string();
    assert!(err.contains("public.t") && err.contains("\"x\""), "{err}");
}

#[test]
fn a_changed_identity_is_rebuilt_from_the_stored_rows() {
    let have = storage(IndexClass::DirectUnique, Uniqueness::Unique);
    // The key moved to the text column: unbounded now, so the probe index.
    let want = Storage {
        class: IndexClass::ProbeExpression,
        ..have.clone()
    };
    assert_snapshot!(
        "rebuild",
        rebuild_statements(&have, &want, rowid_codec::Domain::ScanKey, &["note"]).join(";\n")
    );
}

#[test]
fn a_source_ddl_becomes_alter_statements_by_attnum() {
    let t = QualifiedName::new("public", "orders");
    let have = vec![
        col(1, "id", "bigint"),
        col(2, "a", "text"),
        col(3, "b", "text"),
        col(4, "gone", "int"),
    ];
    // b and a swapped names, a retyped, gone dropped, added appended.
    let want = vec![
        col(1, "id", "bigint"),
        col(2, "b", "varchar(10)"),
        col(3, "a", "text"),
        col(5, "added", "date"),
    ];
    assert_snapshot!("alter", alter_statements(&t, &have, &want).join(";\n"));
    assert!(alter_statements(&t, &have, &have).is_empty());
    assert_eq!(
        fill_added_column(&t, "added \"x\""),
        "UPDATE \"public\".\"orders\" SET \"added \"\"x\"\"\" = $1"
    );
}

/// A column `__pgt_row_id` is kept as the storage's identity column only when the identity
/// schema says the source is a stream table's storage (format 8's `stored`); any other
/// source with such a column is refused by name, never turned into a storage with that column
/// twice.
#[test]
fn a_source_with_its_own_row_id_column_needs_a_stored_identity() {
    let stored = StoredIdentity {
        column: "__pgt_row_id".into(),
        domain: rowid_codec::Domain::GroupKey,
        unique: true,
        max_len: Some(40),
    };
    let plain = [col(1, "id", "bigint"), col(2, "v", "text")];
    let stream = [col(1, "__pgt_row_id", "bytea"), col(2, "v", "text")];
    assert_eq!(check_source_columns(&plain, None), Ok(()));
    assert_eq!(check_source_columns(&stream, Some(&stored)), Ok(()));
    let imitation = check_source_columns(&stream, None).unwrap_err();
    assert!(imitation.contains("__pgt_row_id"), "{imitation}");
    assert!(imitation.contains("format 8"), "{imitation}");
    let unpublished = check_source_columns(&plain, Some(&stored)).unwrap_err();
    assert!(unpublished.contains("does not publish"), "{unpublished}");
    let text = [col(1, "__pgt_row_id", "text")];
    let retyped = check_source_columns(&text, Some(&stored)).unwrap_err();
    assert!(retyped.contains("not bytea"), "{retyped}");
    let elsewhere = StoredIdentity {
        column: "rid".into(),
        ..stored.clone()
    };
    let other = check_source_columns(&stream, Some(&elsewhere)).unwrap_err();
    assert!(other.contains("\"rid\""), "{other}");
}
