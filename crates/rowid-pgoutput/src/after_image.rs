//! Complete after-images: an UPDATE's new tuple omits unchanged
//! out-of-line TOASTed values (`'u'`) under every replica identity setting. `'u'` is sent only
//! for unchanged values, so the old value is the new value wherever the old tuple has it:
//! every column of an `'O'` tuple, the replica identity columns of a `'K'` tuple. Anything
//! else stays missing and is reported by name; it is never turned into NULL or dropped.

use std::fmt;

use crate::message::{Column, OldTuple, Relation, Tuple};
use crate::relation::FlagBits;

/// An UPDATE's new row after backfilling, with the columns that are still unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfterImage {
    /// The new row; a missing column is still `Column::UnchangedToast`.
    pub columns: Tuple,
    /// Positions of the columns that could not be backfilled.
    pub missing: Vec<usize>,
}

/// A caller needed columns that the after-image does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncompleteAfterImage {
    /// `schema.table`.
    pub relation: String,
    /// The needed columns that are missing, by name.
    pub columns: Vec<String>,
}

impl fmt::Display for IncompleteAfterImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "incomplete after-image of {}: unchanged TOASTed column(s) {} were not sent and the \
             old tuple does not carry them; set REPLICA IDENTITY FULL or take them from a snapshot",
            self.relation,
            self.columns.join(", ")
        )
    }
}

impl std::error::Error for IncompleteAfterImage {}

/// Backfills an UPDATE's `'u'` columns from its old tuple where that is exact.
pub fn complete(
    relation: &Relation,
    flags: &FlagBits,
    old: Option<&OldTuple>,
    new: &Tuple,
) -> AfterImage {
    let mut columns = new.clone();
    let mut missing = Vec::new();
    for (i, column) in columns.iter_mut().enumerate() {
        if *column != Column::UnchangedToast {
            continue;
        }
        let source = match old {
            Some(OldTuple::Full(t)) => t.get(i),
            Some(OldTuple::Key(t)) => relation
                .columns
                .get(i)
                .filter(|c| flags.in_replica_identity(c))
                .and_then(|_| t.get(i)),
            None => None,
        };
        match source {
            Some(value @ (Column::Text(_) | Column::Binary(_) | Column::Null)) => {
                // A key slot of 'K' holds a value; 'n' there means "not in the key", which
                // the membership test above already excluded. NULL in 'O' is a real NULL.
                *column = value.clone();
            }
            _ => missing.push(i),
        }
    }
    AfterImage { columns, missing }
}

impl AfterImage {
    /// Succeeds only if none of `needed` (column positions) is missing.
    pub fn require(
        &self,
        relation: &Relation,
        needed: &[usize],
    ) -> Result<&Tuple, IncompleteAfterImage> {
        let gaps: Vec<String> = needed
            .iter()
            .filter(|i| self.missing.contains(i))
            .map(|&i| {
                relation
                    .columns
                    .get(i)
                    .map_or_else(|| format!("#{i}"), |c| c.name.clone())
            })
            .collect();
        if gaps.is_empty() {
            Ok(&self.columns)
        } else {
            Err(IncompleteAfterImage {
                relation: format!("{}.{}", relation.namespace, relation.name),
                columns: gaps,
            })
        }
    }
}
