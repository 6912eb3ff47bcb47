//! The physical index plan of an identity schema (spec/registry.md §3.3).

use rowid_codec::probe::max_probe_len;

use crate::error::{Property, Rejection};
use crate::resolve::IdentitySchema;
use crate::size::{bt_max_item_size, max_indexable_datum, valid_block_size};

/// Whether the identity semantics are unique (one row per identity) or a multiset (keyless
/// rows, where identical rows share an identity).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uniqueness {
    /// One row per identity.
    Unique,
    /// Identical rows share one identity.
    Multiset,
}

/// How the stream table is maintained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaintenanceMode {
    /// Scheduled or manual refresh (serialised by the refresh lock).
    Refresh,
    /// IMMEDIATE mode: maintained inside the writing transactions, concurrently.
    Immediate,
}

/// The index that serves exact matching on `__pgt_row_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexClass {
    /// `CREATE UNIQUE INDEX ... (__pgt_row_id)`: bounded, unique identities.
    DirectUnique,
    /// `CREATE INDEX ... (__pgt_row_id)`: bounded multiset identities.
    DirectNonUnique,
    /// `CREATE INDEX ... (pgtrickle.row_probe_v1(__pgt_row_id))`: unbounded identities;
    /// never unique; every match rechecks the complete identity.
    ProbeExpression,
}

/// The plan with the arithmetic that justifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexPlan {
    /// The chosen index.
    pub class: IndexClass,
    /// Cluster block size used.
    pub block_size: u32,
    /// `BTMaxItemSize` at that block size.
    pub bt_max_item_size: usize,
    /// Largest `bytea` datum an index tuple holds at that block size.
    pub max_indexable_datum: usize,
    /// Worst-case identity length, `None` when unbounded.
    pub max_identity_len: Option<usize>,
    /// Worst-case datum the chosen index stores (identity bound, or probe bound `P + 16`).
    pub max_index_datum: usize,
    /// Probe prefix length P when the plan uses the probe.
    pub probe_prefix_len: Option<usize>,
}

/// Chooses the index for `schema` on a cluster with `block_size`, probe prefix `probe_p`.
///
/// A schema whose worst-case identity fits `max_indexable_datum` is indexed directly (unique
/// only for unique semantics). Anything else (unbounded, or bounded but too wide) uses the
/// non-unique probe expression index, which is refused for unique identities in IMMEDIATE
/// mode and when even the probe cannot fit.
pub fn plan_index(
    schema: &IdentitySchema,
    uniqueness: Uniqueness,
    mode: MaintenanceMode,
    block_size: u32,
    probe_p: usize,
) -> Result<IndexPlan, Rejection> {
    plan_for_bound(
        schema.max_encoded_len(),
        uniqueness,
        mode,
        block_size,
        probe_p,
    )
}

/// [`plan_index`] for an identity whose worst-case length is `bound` (`None`: unbounded or
/// unknown), as an identity schema message carries it (`identity.max_len`).
pub fn plan_for_bound(
    bound: Option<usize>,
    uniqueness: Uniqueness,
    mode: MaintenanceMode,
    block_size: u32,
    probe_p: usize,
) -> Result<IndexPlan, Rejection> {
    if !valid_block_size(block_size) {
        return Err(Rejection::general(
            Property::InvalidBlockSize,
            format!("block_size {block_size} is not a power of two between 1024 and 32768"),
        ));
    }
    let limit = max_indexable_datum(block_size);
    let mut plan = IndexPlan {
        class: IndexClass::ProbeExpression,
        block_size,
        bt_max_item_size: bt_max_item_size(block_size),
        max_indexable_datum: limit,
        max_identity_len: bound,
        max_index_datum: 0,
        probe_prefix_len: None,
    };
    if let Some(b) = bound.filter(|&b| b <= limit) {
        plan.class = match uniqueness {
            Uniqueness::Unique => IndexClass::DirectUnique,
            Uniqueness::Multiset => IndexClass::DirectNonUnique,
        };
        plan.max_index_datum = b;
        return Ok(plan);
    }
    let probe = max_probe_len(probe_p);
    if probe > limit {
        return Err(Rejection::general(
            Property::ProbeDoesNotFit,
            format!(
                "probe V1 with P = {probe_p} needs up to {probe} bytes, but block_size \
                 {block_size} allows index datums of at most {limit} bytes"
            ),
        ));
    }
    if uniqueness == Uniqueness::Unique && mode == MaintenanceMode::Immediate {
        let why = match bound {
            None => "the identity has no static size bound".to_string(),
            Some(b) => format!(
                "the identity can reach {b} bytes, more than the {limit} a B-tree datum may hold"
            ),
        };
        return Err(Rejection::general(
            Property::UniqueUnboundedImmediate,
            format!(
                "{why}, so no UNIQUE index can enforce it; IMMEDIATE mode needs one. Use a \
                 scheduled or manual refresh, or a bounded key (for example varchar(n))"
            ),
        ));
    }
    plan.max_index_datum = probe;
    plan.probe_prefix_len = Some(probe_p);
    Ok(plan)
}
