//! SCAN_KEY eligibility: which index of a source relation may serve as its row identity
//! (spec/registry.md §6).

use rowid_codec::Domain;

use crate::catalog::{FieldSpec, ServerContext};
use crate::error::{Property, Rejection};
use crate::resolve::{IdentitySchema, resolve_field};

/// One key column of an index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyColumn {
    /// Column name (also the identity expression).
    pub name: String,
    /// `pg_attribute.attnotnull`.
    pub not_null: bool,
    /// Type, typmod, collation and operator class of the key column in this index.
    pub field: FieldSpec,
}

/// An index or unique constraint of the source relation, as catalog data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexCandidate {
    /// Index name.
    pub name: String,
    /// `indisprimary`.
    pub primary: bool,
    /// `indisunique`.
    pub unique: bool,
    /// `indisvalid AND indisready` (false while CREATE INDEX CONCURRENTLY is unfinished).
    pub valid: bool,
    /// Has a predicate (`indpred`).
    pub partial: bool,
    /// Has expression columns (`indexprs`).
    pub expressions: bool,
    /// `NOT indimmediate` (a DEFERRABLE constraint).
    pub deferrable: bool,
    /// `indnullsnotdistinct` (PostgreSQL 15+).
    pub nulls_not_distinct: bool,
    /// Key columns in index order.
    pub columns: Vec<KeyColumn>,
}

/// A candidate that was not chosen, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ineligible {
    /// Index name.
    pub index: String,
    /// Why it cannot be a SCAN_KEY.
    pub reason: String,
}

/// The chosen SCAN_KEY.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanKey {
    /// The index it comes from.
    pub index: String,
    /// The index is the primary key (what the WAL path checks against primary-key bits).
    pub primary: bool,
    /// Key columns in index key order.
    pub columns: Vec<String>,
    /// The resolved identity schema (domain SCAN_KEY).
    pub schema: IdentitySchema,
    /// Every candidate passed over, with its reason.
    pub passed_over: Vec<Ineligible>,
}

/// Why an index is not eligible, structurally (before looking at column types).
fn structural_reason(c: &IndexCandidate) -> Option<String> {
    if !c.primary && !c.unique {
        return Some("not a unique index".into());
    }
    if !c.valid {
        return Some(
            "index is not valid or not ready (unfinished CREATE INDEX CONCURRENTLY?)".into(),
        );
    }
    if c.partial {
        return Some("partial index: its predicate leaves rows without a key".into());
    }
    if c.expressions {
        return Some("expression index: identities are built from columns".into());
    }
    if c.deferrable {
        return Some(
            "deferrable constraint: duplicates are legal until commit, which IMMEDIATE \
             maintenance can observe"
                .into(),
        );
    }
    if !c.primary && !c.nulls_not_distinct {
        let nullable: Vec<&str> = c
            .columns
            .iter()
            .filter(|k| !k.not_null)
            .map(|k| k.name.as_str())
            .collect();
        if !nullable.is_empty() {
            return Some(format!(
                "NULLS DISTINCT unique index with nullable key column(s) {}: several rows may \
                 share one encoded key",
                nullable.join(", ")
            ));
        }
    }
    None
}

/// No candidate is eligible: the rejection (every candidate's reason in its detail) and the
/// candidates with their reasons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoEligibleKey {
    /// `NoEligibleSourceKey` rejection listing every reason.
    pub rejection: Rejection,
    /// Each candidate and why it was passed over.
    pub candidates: Vec<Ineligible>,
}

/// Chooses the SCAN_KEY among `candidates`: the primary key when eligible; otherwise the
/// eligible unique index with a bounded identity first, then the smallest worst-case
/// identity, then the fewest columns, then the name. Fails with every candidate's reason.
pub fn choose_scan_key(
    candidates: &[IndexCandidate],
    ctx: &ServerContext,
) -> Result<ScanKey, Box<NoEligibleKey>> {
    let mut eligible: Vec<(&IndexCandidate, IdentitySchema)> = Vec::new();
    let mut passed_over = Vec::new();
    for c in candidates {
        if let Some(reason) = structural_reason(c) {
            passed_over.push(Ineligible {
                index: c.name.clone(),
                reason,
            });
            continue;
        }
        let resolved: Result<Vec<_>, Rejection> = c
            .columns
            .iter()
            .map(|k| resolve_field(&k.field, ctx))
            .collect();
        match resolved {
            Ok(fields) => eligible.push((
                c,
                IdentitySchema {
                    domain: Domain::ScanKey,
                    fields,
                },
            )),
            Err(r) => passed_over.push(Ineligible {
                index: c.name.clone(),
                reason: r.to_string(),
            }),
        }
    }
    eligible.sort_by(|(a, sa), (b, sb)| {
        let key = |c: &IndexCandidate, s: &IdentitySchema| {
            (
                !c.primary,
                s.max_encoded_len().is_none(),
                s.max_encoded_len().unwrap_or(usize::MAX),
                c.columns.len(),
                c.name.clone(),
            )
        };
        key(a, sa).cmp(&key(b, sb))
    });
    let mut rest = eligible.into_iter();
    let Some((chosen, schema)) = rest.next() else {
        let detail = if passed_over.is_empty() {
            "the relation has no primary key or unique index".to_string()
        } else {
            passed_over
                .iter()
                .map(|i| format!("{}: {}", i.index, i.reason))
                .collect::<Vec<_>>()
                .join("; ")
        };
        return Err(Box::new(NoEligibleKey {
            rejection: Rejection::general(Property::NoEligibleSourceKey, detail),
            candidates: passed_over,
        }));
    };
    passed_over.extend(rest.map(|(c, _)| Ineligible {
        index: c.name.clone(),
        reason: format!("eligible, but {} is preferred", chosen.name),
    }));
    Ok(ScanKey {
        index: chosen.name.clone(),
        primary: chosen.primary,
        columns: chosen.columns.iter().map(|k| k.name.clone()).collect(),
        schema,
        passed_over,
    })
}
