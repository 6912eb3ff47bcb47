//! The statements of a DIFFERENTIAL refresh (spec/stream-tables.md §5.2): the changes past
//! a stream table's frontier read from its sources' change buffers, and applied to its
//! storage by identity, in **one statement** (one snapshot: what the statement reads of the
//! buffers, of the sources and of the storage, and the frontier it returns, agree).
//!
//! Every statement takes the frontier as parameters and returns one row:
//!
//! - `$1` (`text`): the snapshot (`pg_snapshot`) of the previous refresh;
//! - `$2` (`bigint`), `$3` (`integer`): that refresh's own transaction (32-bit xid) and the
//!   last buffer row it wrote (`seq`): rows it wrote after the refresh are still to consume;
//! - the row: the new snapshot (`text`), this transaction's 32-bit xid (`bigint`), the last
//!   `seq` it wrote to a buffer (`integer`), whether the window held a change only a full
//!   recomputation can apply (`boolean`: a `T`, `X` or `R` row, or an update or delete
//!   without the whole old row; then nothing was applied), and how many stored rows changed
//!   (`bigint`).
//!
//! A buffer row is in the window when its writing transaction is not visible in `$1`, or
//! is `$2` and its `seq` is past `$3` (a transaction's own xid is never visible in its own
//! snapshot); the statement's own snapshot decides that it is visible now. Buffer rows are written by the source's transaction (trigger capture), so they
//! become visible at its commit, in commit order: a transaction that wrote before a refresh
//! and commits after it is in the next window, never skipped and never consumed twice.
//!
//! The operators with a delta rule today:
//!
//! - **linear** (`Project` and `Filter` over one source's `Scan`): the level's query run over
//!   the window's row images (new images weigh +1, old images -1), the weights summed per
//!   identity and representation, then as many stored copies deleted or inserted; the
//!   source is not read;
//! - **aggregate** (`GROUP BY`, or none, over a filtered scan): the groups the window's
//!   images touch are recomputed from the source under the statement's snapshot and replace
//!   their stored rows (an emptied group's row is deleted).
//!
//! Anything else is [`NotDifferential`], by operator name.

use rowid_registry::IndexClass;
use rowid_registry::sql::quote_ident;

use crate::identity::name;
use crate::plan::Plan;
use crate::sql::{ROW_ID, full_query, level_identity, level_where};

/// A source's change buffer, as a delta statement reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceBuffer {
    /// The source relation, as the plan's `Scan` names it.
    pub relation: String,
    /// The buffer, schema-qualified and quoted.
    pub buffer: String,
    /// The source's columns that have images, in `attnum` order: name and type (as
    /// `format_type` prints it, qualified).
    pub columns: Vec<(String, String)>,
}

/// A tree without a delta rule (yet): the operator, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotDifferential(pub String);

impl std::fmt::Display for NotDifferential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DIFFERENTIAL refresh of {} is not built yet", self.0)
    }
}

impl std::error::Error for NotDifferential {}

/// The 64-bit transaction id of a buffer row `b`'s 32-bit `xid`: the epoch of the newest
/// transaction the statement's snapshot knows, one less when that would put it in the
/// future (a visible row's transaction is never more than 2^31 transactions old: it would
/// have been frozen, and the window of a frontier that old is refused, §5.2).
fn xid8(b: &str) -> String {
    let next = "pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::pg_catalog.text::pg_catalog.int8";
    let full = format!("((({next}) >> 32) << 32 | {b}.xid)");
    format!(
        "(CASE WHEN {full} > ({next}) THEN {full} - 4294967296 ELSE {full} END)::pg_catalog.text::pg_catalog.xid8"
    )
}

/// Buffer row `b` is in the window past the frontier `$1`, `$2`, `$3`: written by the
/// transaction of the previous refresh after it (a transaction's own xid is never visible in
/// its own snapshot, so its rows are told apart by `seq`), or by a transaction that
/// snapshot did not see.
fn in_window(b: &str) -> String {
    format!(
        "(CASE WHEN {b}.xid = $2 THEN {b}.seq > $3 \
         ELSE NOT pg_catalog.pg_visible_in_snapshot({}, $1::pg_catalog.pg_snapshot) END)",
        xid8(b)
    )
}

/// This transaction's 32-bit xid.
const OWN_XID: &str =
    "(pg_catalog.pg_current_xact_id()::pg_catalog.text::pg_catalog.int8 & 4294967295)";

/// The window's row images of `source` under the scan's name `alias`: each row's new image
/// weighs +1, its old image -1, in column `__pgt_w`.
fn images(source: &SourceBuffer, alias: &str) -> String {
    let side = |prefix: &str| -> String {
        source
            .columns
            .iter()
            .map(|(c, t)| {
                format!(
                    "CAST(b.{} AS {t}) AS {}",
                    quote_ident(&format!("{prefix}{c}")),
                    quote_ident(c)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let window = in_window("b");
    format!(
        "(SELECT {new}, 1 AS \"__pgt_w\" FROM {buf} AS b \
           WHERE b.op IN ('I', 'U') AND {window} \
         UNION ALL \
         SELECT {old}, -1 FROM {buf} AS b WHERE b.op IN ('U', 'D') AND {window}) AS {alias}",
        new = side("new_"),
        old = side("old_"),
        buf = source.buffer,
        alias = quote_ident(alias),
    )
}

/// True when the window needs a full recomputation: a buffer row in it that the delta rules
/// cannot apply, or a frontier so old (2^30 transactions) that a 32-bit `xid` no longer
/// names one transaction for certain.
fn blocked(sources: &[SourceBuffer]) -> String {
    let stale = "(pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::pg_catalog.text::pg_catalog.int8 \
         - pg_catalog.pg_snapshot_xmin($1::pg_catalog.pg_snapshot)::pg_catalog.text::pg_catalog.int8) \
         > 1073741824";
    let any: Vec<String> = std::iter::once(stale.to_string())
        .chain(sources.iter().map(|s| {
            format!(
                "EXISTS (SELECT FROM {} AS b WHERE {} AND (b.op NOT IN ('I', 'U', 'D') \
                 OR (b.op IN ('U', 'D') AND b.old_image IS DISTINCT FROM 'F')))",
                s.buffer,
                in_window("b")
            )
        }))
        .collect();
    any.join(" OR ")
}

/// The last `seq` this transaction wrote to any of the buffers (0: none).
fn own_seq(sources: &[SourceBuffer]) -> String {
    let each: Vec<String> = sources
        .iter()
        .map(|s| {
            format!(
                "(SELECT max(b.seq) FROM {} AS b WHERE b.xid = {OWN_XID})",
                s.buffer
            )
        })
        .collect();
    format!("COALESCE(GREATEST({}), 0)", each.join(", "))
}

/// The row every statement returns, after its data-modifying parts `changed` (a sum of
/// counts) and `blocked`.
fn result_row(sources: &[SourceBuffer], blocked: &str, changed: &str) -> String {
    format!(
        "SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text, {OWN_XID}, {}::pg_catalog.int4, \
         {blocked}, ({changed})::pg_catalog.int8",
        own_seq(sources)
    )
}

/// The statement that fills `storage` from scratch with `plan`'s rows and returns the new
/// frontier (the first fill, a FULL refresh, and a DIFFERENTIAL one whose window needs
/// it). `sources` are the buffers whose frontier it sets (none for a FULL stream table).
pub fn fill_statement(
    plan: &Plan,
    storage: &str,
    sources: &[SourceBuffer],
) -> Result<String, NotDifferential> {
    let full = full_query(plan).map_err(|e| NotDifferential(e.0))?;
    let own = if sources.is_empty() {
        "0".to_string()
    } else {
        own_seq(sources)
    };
    Ok(format!(
        "WITH __pgt_gone AS (DELETE FROM {storage} RETURNING 1), \
         __pgt_new AS (INSERT INTO {storage} SELECT * FROM ({full}) AS q RETURNING 1) \
         SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text, {OWN_XID}, \
         {own}::pg_catalog.int4, false, \
         ((SELECT count(*) FROM __pgt_gone) + (SELECT count(*) FROM __pgt_new))::pg_catalog.int8"
    ))
}

/// The DIFFERENTIAL statement of `plan` over `sources` into `storage` (identity index of
/// `class`), or the operator that has no delta rule yet.
pub fn delta_statement(
    plan: &Plan,
    storage: &str,
    class: IndexClass,
    sources: &[SourceBuffer],
) -> Result<String, NotDifferential> {
    let scan = single_scan(plan)?;
    let Plan::Scan {
        relation, alias, ..
    } = scan
    else {
        return Err(NotDifferential(name(scan).into()));
    };
    let source = sources
        .iter()
        .find(|s| &s.relation == relation)
        .ok_or_else(|| NotDifferential(format!("a source without a change buffer ({relation})")))?;
    let replace = |p: &Plan| match p {
        Plan::Scan { .. } => Some(images(source, alias)),
        _ => None,
    };
    let blocked = blocked(std::slice::from_ref(source));
    let go = format!("NOT ({blocked})");
    let names: Vec<String> = plan.outputs().into_iter().map(|o| o.name).collect();
    let cols: Vec<String> = names.iter().map(|n| quote_ident(n)).collect();
    let id = quote_ident(ROW_ID);
    let matches = |t: &str, s: &str| rowid_registry::sql::match_predicate(class, t, s);
    if is_aggregate(plan) {
        // The groups the window touches, by their identities, computed per image row.
        let touched = level_where(
            &strip_aggregate(plan),
            &[],
            false,
            false,
            &replace,
            &[format!(
                "{} AS {id}",
                level_identity(plan).map_err(|e| NotDifferential(e.0))?
            )],
            &[],
        )
        .map_err(|e| NotDifferential(e.0))?;
        let fresh = level_where(
            plan,
            &names,
            true,
            false,
            &|_| None,
            &[],
            &[format!(
                "{} IN (SELECT a.{id} FROM __pgt_touched AS a)",
                group_identity_per_row(plan)?
            )],
        )
        .map_err(|e| NotDifferential(e.0))?;
        let statement = format!(
            "WITH __pgt_touched AS (SELECT DISTINCT t.{id} FROM ({touched}) AS t WHERE {go}), \
             __pgt_gone AS (DELETE FROM {storage} AS s WHERE EXISTS (SELECT FROM __pgt_touched AS a \
               WHERE {m}) RETURNING 1), \
             __pgt_new AS (INSERT INTO {storage} SELECT f.* FROM ({fresh}) AS f \
               WHERE f.{id} IN (SELECT a.{id} FROM __pgt_touched AS a) RETURNING 1) \
             {row}",
            m = matches("s", "a"),
            row = result_row(
                std::slice::from_ref(source),
                &format!("({blocked})"),
                "(SELECT count(*) FROM __pgt_gone) + (SELECT count(*) FROM __pgt_new)"
            ),
        );
        return Ok(statement);
    }
    // Linear: the level over the images, weights summed per identity and representation.
    let delta = level_where(
        plan,
        &names,
        true,
        false,
        &replace,
        &[format!("{}.\"__pgt_w\" AS \"__pgt_w\"", quote_ident(alias))],
        &[],
    )
    .map_err(|e| NotDifferential(e.0))?;
    let rep = |t: &str| -> String {
        let c: Vec<String> = cols.iter().map(|c| format!("{t}.{c}")).collect();
        format!("ROW({})::pg_catalog.text", c.join(", "))
    };
    let net_cols: Vec<String> = cols.iter().map(|c| format!("n.{c}")).collect();
    let statement = format!(
        "WITH __pgt_delta AS (SELECT d.*, {drep} AS __pgt_rep FROM ({delta}) AS d WHERE {go}), \
         __pgt_net AS (SELECT DISTINCT ON (d.{id}, d.__pgt_rep) d.*, \
           sum(d.\"__pgt_w\") OVER (PARTITION BY d.{id}, d.__pgt_rep) AS __pgt_n \
           FROM __pgt_delta AS d), \
         __pgt_gone AS (DELETE FROM {storage} AS s WHERE s.ctid IN ( \
           SELECT c.ctid FROM (SELECT s2.ctid, s2.{id}, {srep} AS __pgt_rep, \
               pg_catalog.row_number() OVER (PARTITION BY s2.{id}, {srep}) AS __pgt_k \
             FROM {storage} AS s2 WHERE EXISTS (SELECT FROM __pgt_net AS n \
               WHERE n.__pgt_n < 0 AND {m2})) AS c \
           JOIN __pgt_net AS n ON n.{id} = c.{id} AND n.__pgt_rep = c.__pgt_rep \
           WHERE c.__pgt_k <= -n.__pgt_n) RETURNING 1), \
         __pgt_new AS (INSERT INTO {storage} SELECT n.{id}, {ncols} FROM __pgt_net AS n, \
           pg_catalog.generate_series(1, n.__pgt_n) WHERE n.__pgt_n > 0 RETURNING 1) \
         {row}",
        drep = rep("d"),
        srep = rep("s2"),
        ncols = net_cols.join(", "),
        m2 = matches("s2", "n"),
        row = result_row(
            std::slice::from_ref(source),
            &format!("({blocked})"),
            "(SELECT count(*) FROM __pgt_gone) + (SELECT count(*) FROM __pgt_new)"
        ),
    );
    Ok(statement)
}

/// The one `Scan` a plan with a delta rule reads, or the operator that has none.
fn single_scan(plan: &Plan) -> Result<&Plan, NotDifferential> {
    match plan {
        Plan::Scan { .. } => Ok(plan),
        Plan::Project { input, .. }
        | Plan::Filter { input, .. }
        | Plan::Aggregate { input, .. } => single_scan(input),
        other => Err(NotDifferential(format!("a {}", name(other)))),
    }
}

fn is_aggregate(plan: &Plan) -> bool {
    match plan {
        Plan::Aggregate { .. } => true,
        Plan::Filter { input, .. } => is_aggregate(input),
        _ => false,
    }
}

/// The input of the aggregate under `plan`, as a level without a select list of its own:
/// a projection of nothing over the aggregate's input.
fn strip_aggregate(plan: &Plan) -> Plan {
    match plan {
        Plan::Aggregate { input, .. } => Plan::Project {
            input: input.clone(),
            columns: vec![],
        },
        Plan::Filter { input, .. } => strip_aggregate(input),
        other => other.clone(),
    }
}

/// The group identity of each input row of the aggregate under `plan` (its group
/// expressions evaluated per row), for restricting a recomputation to touched groups.
fn group_identity_per_row(plan: &Plan) -> Result<String, NotDifferential> {
    match plan {
        Plan::Aggregate { .. } => level_identity(plan).map_err(|e| NotDifferential(e.0)),
        Plan::Filter { input, .. } => group_identity_per_row(input),
        other => Err(NotDifferential(format!("a {}", name(other)))),
    }
}
