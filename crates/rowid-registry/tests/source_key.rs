//! SCAN_KEY eligibility, rule by rule (spec/registry.md §6).

// Test code: a failed expectation is a panic by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rowid_registry::catalog::oid;
use rowid_registry::{
    Collation, CollationProvider, FieldSpec, IndexCandidate, KeyColumn, OpClass, Property,
    ServerContext, TypeRef, choose_scan_key,
};

const CTX: ServerContext = ServerContext::default_pg18();

fn col(name: &str, not_null: bool) -> KeyColumn {
    KeyColumn {
        name: name.into(),
        not_null,
        field: FieldSpec::new(name, TypeRef::builtin(oid::INT8, "int8"), -1),
    }
}

fn text_col(name: &str, collation: Collation) -> KeyColumn {
    KeyColumn {
        name: name.into(),
        not_null: true,
        field: FieldSpec::new(name, TypeRef::builtin(oid::TEXT, "text"), -1).collate(collation),
    }
}

fn unique(name: &str, columns: Vec<KeyColumn>) -> IndexCandidate {
    IndexCandidate {
        name: name.into(),
        primary: false,
        unique: true,
        valid: true,
        partial: false,
        expressions: false,
        deferrable: false,
        nulls_not_distinct: false,
        columns,
    }
}

fn pk(columns: Vec<KeyColumn>) -> IndexCandidate {
    IndexCandidate {
        primary: true,
        ..unique("t_pkey", columns)
    }
}

fn reason_of(candidates: &[IndexCandidate]) -> String {
    let err = choose_scan_key(candidates, &CTX).unwrap_err();
    assert_eq!(err.rejection.property, Property::NoEligibleSourceKey);
    assert_eq!(err.candidates.len(), candidates.len());
    err.rejection.to_string()
}

#[test]
fn primary_key_is_preferred() {
    let chosen = choose_scan_key(
        &[
            unique("t_a_key", vec![col("a", true)]),
            pk(vec![col("id", true), col("b", true)]),
        ],
        &CTX,
    )
    .unwrap();
    assert_eq!(chosen.index, "t_pkey");
    assert_eq!(chosen.columns, ["id", "b"], "index key order");
    assert_eq!(chosen.schema.max_encoded_len(), Some(7 + 10 + 10));
    assert!(chosen.passed_over[0].reason.contains("t_pkey is preferred"));
}

#[test]
fn eligible_unique_indexes() {
    // NOT NULL columns.
    let c = choose_scan_key(&[unique("u", vec![col("a", true)])], &CTX).unwrap();
    assert_eq!(c.index, "u");
    // NULLS NOT DISTINCT with nullable columns.
    let nnd = IndexCandidate {
        nulls_not_distinct: true,
        ..unique("nnd", vec![col("a", false)])
    };
    assert_eq!(choose_scan_key(&[nnd], &CTX).unwrap().index, "nnd");
    // Among eligible non-primary indexes: bounded first, then smaller, then fewer columns.
    let c = choose_scan_key(
        &[
            unique("by_text", vec![text_col("t", Collation::c())]),
            unique("by_pair", vec![col("a", true), col("b", true)]),
            unique("by_one", vec![col("c", true)]),
        ],
        &CTX,
    )
    .unwrap();
    assert_eq!(c.index, "by_one");
}

#[test]
fn ineligible_indexes_with_reasons() {
    let cases: Vec<(IndexCandidate, &str)> = vec![
        (
            IndexCandidate {
                unique: false,
                ..unique("plain", vec![col("a", true)])
            },
            "not a unique index",
        ),
        (
            unique("nullable", vec![col("a", true), col("b", false)]),
            "nullable key column(s) b",
        ),
        (
            IndexCandidate {
                partial: true,
                ..unique("part", vec![col("a", true)])
            },
            "partial index",
        ),
        (
            IndexCandidate {
                expressions: true,
                ..unique("expr", vec![col("a", true)])
            },
            "expression index",
        ),
        (
            IndexCandidate {
                deferrable: true,
                ..unique("defer", vec![col("a", true)])
            },
            "deferrable",
        ),
        (
            IndexCandidate {
                deferrable: true,
                ..pk(vec![col("id", true)])
            },
            "deferrable",
        ),
        (
            IndexCandidate {
                valid: false,
                ..unique("building", vec![col("a", true)])
            },
            "not valid",
        ),
        (
            unique(
                "ci",
                vec![text_col(
                    "t",
                    Collation {
                        name: "und-ci".into(),
                        provider: CollationProvider::Icu,
                        deterministic: false,
                        locale: "und-u-ks-level2".into(),
                    },
                )],
            ),
            "non-deterministic collation",
        ),
        (
            unique(
                "ops",
                vec![KeyColumn {
                    field: FieldSpec {
                        opclass: OpClass::NonDefault("text_pattern_ops".into()),
                        ..text_col("t", Collation::c()).field
                    },
                    ..text_col("t", Collation::c())
                }],
            ),
            "text_pattern_ops",
        ),
        (
            unique(
                "money",
                vec![KeyColumn {
                    name: "m".into(),
                    not_null: true,
                    field: FieldSpec::new("m", TypeRef::builtin(oid::MONEY, "money"), -1),
                }],
            ),
            "money",
        ),
    ];
    for (candidate, mention) in cases {
        let name = candidate.name.clone();
        let text = reason_of(&[candidate]);
        assert!(
            text.contains(&name) && text.contains(mention),
            "{name}: {text}"
        );
    }
    assert!(reason_of(&[]).contains("no primary key or unique index"));
}
