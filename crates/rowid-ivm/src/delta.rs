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
//! - **linear** (`Project` and `Filter` over one `Scan`, or over an inner join of scans):
//!   the level's query run over the window's row images (new images weigh +1, old images
//!   -1; a join by inclusion and exclusion over its inputs, [`delta_statement`]), the weights
//!   summed per identity and representation, then as many stored copies deleted or
//!   inserted;
//! - **additive aggregate** (`GROUP BY`, or none, without `HAVING`, of `count`, integer and
//!   `numeric` `sum` and `avg`, `min`, `max`, `bool_and`, `bool_or`): the change's counts and
//!   sums added to the stored groups and their hidden columns (`aggregate`);
//! - **aggregate** (any other, over a filtered scan or join): the groups the
//!   window's images touch are recomputed from the sources under the statement's snapshot
//!   and replace their stored rows (an emptied group's row is deleted);
//! - **subqueries and CTEs** in `FROM` (`subquery`): read like a scan, their images their
//!   own change (linear), or their rows now less their rows before the change (aggregating
//!   or deduplicating; the level reading one is then applied by identity).
//!
//! - **windows** (`window`): the partitions the change touches recomputed, their stored rows
//!   read by identity range, both applied as signed rows;
//! - **outer joins** (`outer`): the rows whose sides the change touches recomputed, their
//!   stored rows read by identity (range), both applied as signed rows;
//! - **semi-joins** (`semi`, a `WHERE` with subqueries): linear while the tables the
//!   subqueries read are unchanged, else the level's rows now and its stored rows applied as
//!   signed rows.
//!
//! Anything else is [`NotDifferential`], by operator name.

mod aggregate;
mod outer;
mod ranges;
mod semi;
mod subquery;
mod window;

pub use aggregate::{COUNT_COLUMN, is_additive, storage_plan};
use subquery::{add_subqueries, reads_differenced, scan_before};

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

/// The statement's first `WITH` part: the newest transaction its snapshot knows (64 bits).
const NOW: &str = "__pgt_now AS (SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())\
    ::pg_catalog.text::pg_catalog.int8 AS next)";

/// The 64-bit transaction id of a buffer row `b`'s 32-bit `xid`: the epoch of the newest
/// transaction the statement's snapshot knows ([`NOW`]), one less when that would put it in
/// the future (a visible row's transaction is never more than 2^31 transactions old: it would
/// have been frozen, and the window of a frontier that old is refused, §5.2).
fn xid8(b: &str) -> String {
    let next = "(SELECT __pgt_n.next FROM __pgt_now AS __pgt_n)";
    let full = format!("(({next} >> 32) << 32 | {b}.xid)");
    format!(
        "(CASE WHEN {full} > {next} THEN {full} - 4294967296 ELSE {full} END)::pg_catalog.text::pg_catalog.xid8"
    )
}

/// Buffer row `b` is in the window past the frontier `$1`, `$2`, `$3`: written by the
/// transaction of the previous refresh after it (a transaction's own xid is never visible in
/// its own snapshot, so its rows are told apart by `seq`), or by a transaction that
/// snapshot did not see.
///
/// A cheap test comes first: a row in the window was written by a transaction no older than
/// the frontier snapshot's `xmin` (an older one had ended: its rows were visible in that
/// snapshot, or were never committed), and, the frontier being less than 2^30 transactions
/// old (else the window is [`blocked`] and nothing is read from it), its 32-bit `xid` is less
/// than 2^31 past that `xmin`'s low 32 bits, modulo 2^32. Most rows consumed before fail it
/// without the 64-bit widening and the snapshot lookup.
fn in_window(b: &str) -> String {
    format!(
        "((({b}.xid - {FRONTIER_XMIN32}) & 4294967295) < 2147483648 \
         AND CASE WHEN {b}.xid = $2 THEN {b}.seq > $3 \
         ELSE NOT pg_catalog.pg_visible_in_snapshot({}, $1::pg_catalog.pg_snapshot) END)",
        xid8(b)
    )
}

/// The low 32 bits of the frontier snapshot's `xmin`, computed once per statement.
const FRONTIER_XMIN32: &str = "(SELECT pg_catalog.pg_snapshot_xmin($1::pg_catalog.pg_snapshot)\
    ::pg_catalog.text::pg_catalog.int8 & 4294967295)";

/// This transaction's 32-bit xid: a scalar subquery, computed once per statement (an
/// `InitPlan`), not once per buffer row it is compared with (10^4 rows of a window: 5 ms).
const OWN_XID: &str =
    "(SELECT pg_catalog.pg_current_xact_id()::pg_catalog.text::pg_catalog.int8 & 4294967295)";

/// The name of the `WITH` part holding the window's rows of the `k`-th buffer a statement
/// reads ([`window`]).
fn window_name(k: usize) -> String {
    format!("__pgt_win{k}")
}

/// The `WITH` part holding the window's rows of `source`, the `k`-th buffer the statement
/// reads: each buffer is scanned once, whatever the number of terms that read its images.
fn window(source: &SourceBuffer, k: usize) -> String {
    format!(
        "{} AS MATERIALIZED (SELECT b.* FROM {} AS b WHERE {})",
        window_name(k),
        source.buffer,
        in_window("b")
    )
}

/// The window's row images of `source` (the `k`-th buffer, [`window`]) under the scan's name
/// `alias`: each row's new image weighs +1, its old image -1, in column `__pgt_w`.
fn images(source: &SourceBuffer, k: usize, alias: &str) -> String {
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
    format!(
        "(SELECT {new}, 1 AS \"__pgt_w\" FROM {win} AS b WHERE b.op IN ('I', 'U') \
         UNION ALL \
         SELECT {old}, -1 FROM {win} AS b WHERE b.op IN ('U', 'D')) AS {alias}",
        new = side("new_"),
        old = side("old_"),
        win = window_name(k),
        alias = quote_ident(alias),
    )
}

/// True when the window needs a full recomputation: a buffer row in it that the delta rules
/// cannot apply, or a frontier so old (2^30 transactions) that a 32-bit `xid` no longer
/// names one transaction for certain. `sources` are the buffers in [`window`] order.
fn blocked(sources: &[SourceBuffer]) -> String {
    let stale = "((SELECT __pgt_n.next FROM __pgt_now AS __pgt_n) \
         - pg_catalog.pg_snapshot_xmin($1::pg_catalog.pg_snapshot)::pg_catalog.text::pg_catalog.int8) \
         > 1073741824";
    let any: Vec<String> = std::iter::once(stale.to_string())
        .chain((0..sources.len()).map(|k| {
            format!(
                "EXISTS (SELECT FROM {} AS b WHERE b.op NOT IN ('I', 'U', 'D') \
                 OR (b.op IN ('U', 'D') AND b.old_image IS DISTINCT FROM 'F'))",
                window_name(k)
            )
        }))
        .collect();
    any.join(" OR ")
}

/// Whether the window of a DIFFERENTIAL statement is [`blocked`], read from its `WITH` part.
const BLOCKED: &str = "(SELECT __pgt_b.blocked FROM __pgt_blocked AS __pgt_b)";

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

/// [`own_seq`] of a DIFFERENTIAL statement, read from its windows (`buffers` in [`window`]
/// order) instead of scanning every buffer again: every row this transaction wrote is in the
/// window (its xid is not visible in the frontier snapshot, which another transaction took
/// or this one took before writing them, and no older than that snapshot's `xmin`) except,
/// when the frontier is this transaction's own (`$2`), the rows up to `$3` an earlier
/// refresh in it consumed.
fn own_seq_in_windows(buffers: &[SourceBuffer]) -> String {
    let each: Vec<String> = (0..buffers.len())
        .map(|k| {
            format!(
                "(SELECT max(b.seq) FROM {} AS b WHERE b.xid = {OWN_XID})",
                window_name(k)
            )
        })
        .collect();
    format!(
        "COALESCE(GREATEST({}, CASE WHEN {OWN_XID} = $2 THEN $3 END), 0)",
        each.join(", ")
    )
}

/// The row every DIFFERENTIAL statement over `buffers` returns, after its data-modifying
/// parts `changed` (a sum of counts) and `blocked`.
fn result_row(buffers: &[SourceBuffer], blocked: &str, changed: &str) -> String {
    format!(
        "SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text, {OWN_XID}, {}::pg_catalog.int4, \
         {blocked}, ({changed})::pg_catalog.int8",
        own_seq_in_windows(buffers)
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
    let full = storage_query(plan).map_err(|e| NotDifferential(e.0))?;
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

/// The statement computing the rows a stream table of `plan` stores: its query's rows with
/// their identities, and the hidden columns of an additive aggregate ([`storage_plan`]).
/// The storage is created from it.
pub fn storage_query(plan: &Plan) -> Result<String, crate::sql::Unrenderable> {
    full_query(&storage_plan(plan))
}

/// The most `FROM` items a join may have in DIFFERENTIAL: its delta has one term per
/// non-empty subset of them.
pub const MAX_JOIN_INPUTS: usize = 6;

/// The DIFFERENTIAL statement of `plan` over `sources` into `storage` (identity index of
/// `class`), or the operator that has no delta rule yet.
///
/// The window's change of a level over the `FROM` items `A1 ... An` (scans; one item is the
/// single-source case) is the sum, over every non-empty subset `T` of them, of
/// `(-1)^(|T|+1)` times the level evaluated with the items of `T` replaced by their window
/// images and the others read as they are now (inclusion and exclusion: the items now are
/// the items at the frontier plus the window, and a join is linear in each input). A row of
/// a term weighs the product of its images' weights and the term's sign.
pub fn delta_statement(
    plan: &Plan,
    storage: &str,
    class: IndexClass,
    sources: &[SourceBuffer],
) -> Result<String, NotDifferential> {
    from_items(plan)?;
    // Every scan's name and buffer, subqueries included.
    let mut buffers: Vec<SourceBuffer> = Vec::new();
    let mut changeable: Vec<Changeable<'_>> = Vec::new();
    for scan in all_scans(plan) {
        let Plan::Scan {
            relation, alias, ..
        } = scan
        else {
            continue;
        };
        let (source, k) = read_buffer(sources, &mut buffers, relation)?;
        if !changeable
            .iter()
            .any(|c| c.alias == alias.as_str() && c.relation == *relation)
        {
            let images = images(source, k, alias);
            let columns: Vec<String> = source.columns.iter().map(|(c, _)| c.clone()).collect();
            changeable.push(Changeable {
                alias,
                relation: relation.clone(),
                old: scan_before(scan, &images, &columns),
                images,
            });
        }
    }
    // The buffers of the tables a `WHERE`'s subqueries read: whether they changed decides the
    // semi-join rule's case, and their rows are consumed with the others'.
    let mut reads_changed = Vec::new();
    for relation in semi::top_level(plan).map(|(_, r)| r).unwrap_or_default() {
        let (_, k) = read_buffer(sources, &mut buffers, relation)?;
        reads_changed.push(format!("EXISTS (SELECT FROM {})", window_name(k)));
    }
    let reads_changed = if reads_changed.is_empty() {
        "false".to_string()
    } else {
        format!("({})", reads_changed.join(" OR "))
    };
    let mut parts = Vec::new();
    add_subqueries(plan, &mut changeable, &mut parts)?;
    let blocked = blocked(&buffers);
    let changed = "(SELECT count(*) FROM __pgt_gone) + (SELECT count(*) FROM __pgt_new)";
    apply(
        plan,
        &Frame {
            storage,
            class,
            changeable: &changeable,
            // Whether the window is blocked, computed once (it is read twice: by the guard
            // of every change and by the result row).
            head: &format!(
                "WITH {NOW}, {}__pgt_blocked AS MATERIALIZED (SELECT ({blocked}) AS blocked), {}",
                buffers
                    .iter()
                    .enumerate()
                    .map(|(k, b)| format!("{}, ", window(b, k)))
                    .collect::<String>(),
                parts.iter().map(|p| format!("{p}, ")).collect::<String>()
            ),
            go: &format!("NOT {BLOCKED}"),
            row: &result_row(&buffers, BLOCKED, changed),
            reads_changed: &reads_changed,
        },
    )
}

/// The buffer of `relation` among `sources`, and its number among the `buffers` a statement
/// reads (added there, once, if it is not yet).
fn read_buffer<'s>(
    sources: &'s [SourceBuffer],
    buffers: &mut Vec<SourceBuffer>,
    relation: &str,
) -> Result<(&'s SourceBuffer, usize), NotDifferential> {
    let source = sources
        .iter()
        .find(|s| s.relation == relation)
        .ok_or_else(|| NotDifferential(format!("a source without a change buffer ({relation})")))?;
    let k = match buffers.iter().position(|b| b.buffer == source.buffer) {
        Some(k) => k,
        None => {
            buffers.push(source.clone());
            buffers.len() - 1
        }
    };
    Ok((source, k))
}

/// A `FROM` item whose rows changed: its name and relation, the SQL of its signed row
/// images under that name (column `__pgt_w`: +1 new, -1 old), and the SQL of its rows as
/// they were before the change, under that name (`subquery`).
struct Changeable<'a> {
    alias: &'a str,
    relation: String,
    images: String,
    old: String,
}

/// The items of `level` (a `SELECT` level) that changed, each once.
/// The relation a subquery in `FROM` is recorded under among the changed items.
const SUBQUERY: &str = "(subquery)";

/// A `FROM` item's name and relation (a subquery's: [`SUBQUERY`] and its tree, so that two
/// subqueries of one name stay apart, and a copy of a tree is the same subquery).
fn item_key(item: &Plan) -> Option<(&str, String)> {
    match item {
        Plan::Scan {
            alias, relation, ..
        } => Some((alias.as_str(), relation.clone())),
        Plan::Subquery { alias, input, .. } => {
            Some((alias.as_str(), format!("{SUBQUERY} {input:?}")))
        }
        _ => None,
    }
}

/// Every scan of `plan`'s tree, subqueries included.
fn all_scans(plan: &Plan) -> Vec<&Plan> {
    match plan {
        Plan::Scan { .. } => vec![plan],
        Plan::Function { .. } => vec![],
        Plan::Subquery { input, .. }
        | Plan::Project { input, .. }
        | Plan::Window { input, .. }
        | Plan::Filter { input, .. }
        | Plan::SemiJoin { input, .. }
        | Plan::Aggregate { input, .. }
        | Plan::Distinct { input } => all_scans(input),
        Plan::Join { inputs, .. } => inputs.iter().flat_map(all_scans).collect(),
        Plan::OuterJoin { left, right, .. } => {
            let mut out = all_scans(left);
            out.extend(all_scans(right));
            out
        }
        Plan::UnionAll { branches } | Plan::SetOp { branches, .. } => {
            branches.iter().flat_map(all_scans).collect()
        }
    }
}

/// A tree whose change is its rows' change, term by term: a level without aggregates or
/// `DISTINCT`, or a `UNION ALL` of such.
fn is_linear(plan: &Plan) -> bool {
    match plan {
        Plan::UnionAll { branches } => branches.iter().all(is_linear),
        Plan::Project { .. } | Plan::Filter { .. } => !is_aggregate(plan),
        _ => false,
    }
}

fn changed_in<'a, 'b>(level: &Plan, changeable: &'b [Changeable<'a>]) -> Vec<&'b Changeable<'a>> {
    let mut out: Vec<&Changeable<'_>> = Vec::new();
    for item in level_items(level).unwrap_or_default() {
        if let Some((alias, relation)) = item_key(item)
            && let Some(c) = changeable
                .iter()
                .find(|c| c.alias == alias && c.relation == relation)
            && !out.iter().any(|o| std::ptr::eq(*o, c))
        {
            out.push(c);
        }
    }
    out
}

/// `level` evaluated with the changed items of `set` (bits over `changed`) replaced by their
/// images.
fn term(
    level: &Plan,
    changed: &[&Changeable<'_>],
    set: usize,
    names: &[String],
    with_id: bool,
    extra: &[String],
) -> Result<String, NotDifferential> {
    let replace = |p: &Plan| {
        let (alias, relation) = item_key(p)?;
        changed
            .iter()
            .enumerate()
            .find(|(i, c)| c.alias == alias && c.relation == relation && set & (1 << i) != 0)
            .map(|(_, c)| c.images.clone())
    };
    level_where(level, names, with_id, false, &replace, extra, &[])
        .map_err(|e| NotDifferential(e.0))
}

/// The identities, computed by `select` per row, of every row of every term of `level`'s
/// change (signs do not matter: an identity a term reaches is touched).
fn touched_terms(
    level: &Plan,
    changeable: &[Changeable<'_>],
    select: &str,
) -> Result<Vec<String>, NotDifferential> {
    let changed = changed_in(level, changeable);
    let id = quote_ident(ROW_ID);
    (1..(1usize << changed.len()))
        .map(|set| {
            term(
                level,
                &changed,
                set,
                &[],
                false,
                &[format!("{select} AS {id}")],
            )
        })
        .collect()
}

/// The rows of a linear `plan`'s change (a level without aggregates over scans, joins and
/// subqueries of such, or a UNION ALL of those) under the output names `names`: its
/// identity, columns and weight (`__pgt_w`), one SELECT per term, not consolidated.
fn linear_delta(
    plan: &Plan,
    names: &[String],
    changeable: &[Changeable<'_>],
) -> Result<Vec<String>, NotDifferential> {
    let cols: Vec<String> = names.iter().map(|n| quote_ident(n)).collect();
    let id = quote_ident(ROW_ID);
    let mut delta = Vec::new();
    match plan {
        Plan::UnionAll { branches } => {
            // Each branch's change, its rows' identities framed with the branch number.
            let inner_names = positional(names.len());
            let d: Vec<String> = inner_names.iter().map(|c| format!("d.{c}")).collect();
            let named = renamed(&d, &cols);
            for (n, branch) in branches.iter().enumerate() {
                let changed = changed_in(branch, changeable);
                for (set, weight) in weighted_sets(&changed) {
                    let inner = term(
                        branch,
                        &changed,
                        set,
                        &inner_names,
                        true,
                        &[format!("{weight} AS \"__pgt_w\"")],
                    )?;
                    delta.push(format!(
                        "SELECT pgtrickle.encode_row_id_v2('SET_KEY', ROW({}::pg_catalog.int4, \
                         d.{id}::pgtrickle.row_id)) AS {id}, {}, d.\"__pgt_w\" FROM ({inner}) AS d",
                        n + 1,
                        named
                    ));
                }
            }
        }
        _ => {
            let changed = changed_in(plan, changeable);
            for (set, weight) in weighted_sets(&changed) {
                delta.push(term(
                    plan,
                    &changed,
                    set,
                    names,
                    true,
                    &[format!("{weight} AS \"__pgt_w\"")],
                )?);
            }
        }
    }
    Ok(delta)
}

/// The statement of a change that reaches no stored row: it changes nothing and returns
/// `row`.
fn no_change(head: &str, row: &str) -> String {
    format!("{head}__pgt_gone AS (SELECT 1 WHERE false), __pgt_new AS (SELECT 1 WHERE false) {row}")
}

/// Every term of a change to the items `changed`: the subset as a bit set, and the weight
/// of a row of that term (the term's sign times its images' weights).
fn weighted_sets(changed: &[&Changeable<'_>]) -> Vec<(usize, String)> {
    (1..(1usize << changed.len()))
        .map(|set| {
            let sign = if set.count_ones() % 2 == 1 { "1" } else { "-1" };
            let weights: Vec<String> = changed
                .iter()
                .enumerate()
                .filter(|(i, _)| set & (1 << i) != 0)
                .map(|(_, c)| format!("{}.\"__pgt_w\"", quote_ident(c.alias)))
                .collect();
            (set, format!("{sign} * {}", weights.join(" * ")))
        })
        .collect()
}

/// `ref AS name`, ... for the columns `refs` of an inner block and their output names.
fn renamed(refs: &[String], names: &[String]) -> String {
    refs.iter()
        .zip(names)
        .map(|(c, n)| format!("{c} AS {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `c1`, `c2`, ...: the column names of an inner block.
fn positional(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("c{i}")).collect()
}

/// `encode_row_id_v2(domain, ROW(exprs))`.
fn encoded(domain: &str, exprs: &[String]) -> String {
    format!(
        "pgtrickle.encode_row_id_v2('{domain}', ROW({}))",
        exprs.join(", ")
    )
}

/// What a statement applying a change is made in: the storage and its identity index, the
/// `FROM` items that changed (with the SQL of their signed row images; the other items are
/// read as they are now), and its frame: `head` opens its `WITH` list, `go` guards every
/// change it makes, `row` is its final `SELECT` (over the counts of `__pgt_gone` and
/// `__pgt_new`).
struct Frame<'a> {
    storage: &'a str,
    class: IndexClass,
    changeable: &'a [Changeable<'a>],
    head: &'a str,
    go: &'a str,
    row: &'a str,
    /// Whether a table a `WHERE`'s subqueries read changed (a `boolean` SQL expression,
    /// `true` or `false` where that is known when the statement is made; [`semi`]).
    reads_changed: &'a str,
}

/// The statement applying the change of `plan` in `frame`.
fn apply(plan: &Plan, frame: &Frame<'_>) -> Result<String, NotDifferential> {
    let Frame {
        storage,
        class,
        changeable,
        head,
        go,
        row,
        ..
    } = *frame;
    let names: Vec<String> = plan.outputs().into_iter().map(|o| o.name).collect();
    let id = quote_ident(ROW_ID);
    let matches = |t: &str, s: &str| rowid_registry::sql::match_predicate(class, t, s);
    if let Some(statement) = aggregate::statement(plan, frame)? {
        return Ok(statement);
    }
    if let Some(statement) = window::statement(plan, frame)? {
        return Ok(statement);
    }
    if let Some(statement) = outer::statement(plan, frame)? {
        return Ok(statement);
    }
    if let Some(statement) = semi::statement(plan, frame)? {
        return Ok(statement);
    }
    let mut recomputed = recomputation(plan, &names, changeable, &|_| None)?;
    if recomputed.is_none() && reads_differenced(plan) {
        // A linear level reading a subquery that aggregates or deduplicates: the identities
        // its change touches are recomputed, as for `DISTINCT` (its rows are matched by
        // identity alone: the subquery's rows before and now may spell a value differently
        // where nothing changed).
        let unrenderable = |e: crate::sql::Unrenderable| NotDifferential(e.0);
        recomputed = Some(if matches!(plan, Plan::UnionAll { .. }) {
            // Each branch's change framed by its branch (the linear rule's rows), and the
            // union's rows now, restricted to the identities those reach.
            let touched = linear_delta(plan, &names, changeable)?
                .iter()
                .map(|t| format!("SELECT d.{id} FROM ({t}) AS d"))
                .collect();
            let fresh = crate::sql::render_with(plan, &names, &|_| None).map_err(unrenderable)?;
            (touched, fresh)
        } else {
            let per_row = level_identity(plan).map_err(unrenderable)?;
            let touched = touched_terms(plan, changeable, &per_row)?;
            let only = format!("{per_row} IN (SELECT a.{id} FROM __pgt_touched AS a)");
            let fresh = level_where(plan, &names, true, false, &|_| None, &[], &[only])
                .map_err(unrenderable)?;
            (touched, fresh)
        });
    }
    if let Some((touched, fresh)) = recomputed {
        if touched.is_empty() {
            return Ok(no_change(head, row));
        }
        return Ok(format!(
            "{head}__pgt_touched AS (SELECT DISTINCT t.{id} FROM ({}) AS t WHERE {go}), \
             __pgt_gone AS (DELETE FROM {storage} AS s WHERE EXISTS (SELECT FROM __pgt_touched AS a \
               WHERE {m}) RETURNING 1), \
             __pgt_new AS (INSERT INTO {storage} SELECT f.* FROM ({fresh}) AS f \
               WHERE f.{id} IN (SELECT a.{id} FROM __pgt_touched AS a) RETURNING 1) \
             {row}",
            touched.join(" UNION ALL "),
            m = matches("s", "a"),
        ));
    }
    // Linear operators (and joins, and UNION ALL of them): every term's rows with their
    // weights, summed per identity and representation, then as many stored copies deleted
    // or inserted.
    let delta = linear_delta(plan, &names, changeable)?;
    if delta.is_empty() {
        return Ok(no_change(head, row));
    }
    Ok(apply_signed(plan, frame, head, &delta))
}

/// The statement applying the signed rows `delta` (SELECTs of identity, the output columns
/// of `plan` and `__pgt_w`, not consolidated) to `frame`'s storage, its `WITH` list opened by
/// `head`: the weights summed per identity and representation, then as many stored copies
/// deleted or inserted (a unique identity whose representation changed: updated in place).
fn apply_signed(plan: &Plan, frame: &Frame<'_>, head: &str, delta: &[String]) -> String {
    let Frame {
        storage,
        class,
        go,
        row,
        ..
    } = *frame;
    let names: Vec<String> = plan.outputs().into_iter().map(|o| o.name).collect();
    let cols: Vec<String> = names.iter().map(|n| quote_ident(n)).collect();
    let id = quote_ident(ROW_ID);
    let matches = |t: &str, s: &str| rowid_registry::sql::match_predicate(class, t, s);
    let rep = |t: &str| -> String {
        let c: Vec<String> = cols.iter().map(|c| format!("{t}.{c}")).collect();
        format!("ROW({})::pg_catalog.text", c.join(", "))
    };
    let net_cols: Vec<String> = cols.iter().map(|c| format!("n.{c}")).collect();
    if crate::identity::identity(plan).unique {
        // One stored row per identity: after consolidation a row of the net change weighs
        // -1 (its old representation goes) or +1 (its new one comes), and the stored row is
        // found by its identity (the index) and representation. An identity whose old
        // representation goes and new one comes (a row updated in place: its key kept) is
        // one UPDATE of the stored row, not a delete and an insert. The old representation
        // rides on the new one's row as a window value: a join of the change with itself
        // would be a nested loop wherever the server under-estimates the change (a buffer
        // never analyzed), quadratic in the number of changes.
        let moved = "n.__pgt_reps = 2 AND n.__pgt_lo = -1 AND n.__pgt_hi = 1";
        let set: Vec<String> = cols.iter().map(|c| format!("{c} = p.{c}")).collect();
        return format!(
            "{head}__pgt_delta AS (SELECT d.*, {drep} AS __pgt_rep FROM ({delta}) AS d WHERE {go}), \
             __pgt_net AS (SELECT DISTINCT ON (d.{id}, d.__pgt_rep) d.*, \
               sum(d.\"__pgt_w\") OVER (PARTITION BY d.{id}, d.__pgt_rep) AS __pgt_n \
               FROM __pgt_delta AS d), \
             __pgt_side AS (SELECT n.*, pg_catalog.count(*) OVER w AS __pgt_reps, \
               pg_catalog.min(n.__pgt_n) OVER w AS __pgt_lo, \
               pg_catalog.max(n.__pgt_n) OVER w AS __pgt_hi, \
               pg_catalog.min(n.__pgt_rep) FILTER (WHERE n.__pgt_n < 0) OVER w AS __pgt_old \
               FROM __pgt_net AS n WHERE n.__pgt_n <> 0 WINDOW w AS (PARTITION BY n.{id})), \
             __pgt_moved AS (SELECT n.{id}, n.__pgt_old, {ncols} \
               FROM __pgt_side AS n WHERE {moved} AND n.__pgt_n > 0), \
             __pgt_upd AS (UPDATE {storage} AS s SET {set} FROM __pgt_moved AS p \
               WHERE {mp} AND {srep} = p.__pgt_old RETURNING 1), \
             __pgt_del AS (DELETE FROM {storage} AS s USING __pgt_side AS n \
               WHERE n.__pgt_n < 0 AND NOT ({moved}) AND {m} AND {srep} = n.__pgt_rep \
               RETURNING 1), \
             __pgt_gone AS (SELECT 1 FROM __pgt_del UNION ALL SELECT 1 FROM __pgt_upd), \
             __pgt_new AS (INSERT INTO {storage} SELECT n.{id}, {ncols} FROM __pgt_side AS n \
               WHERE n.__pgt_n > 0 AND NOT ({moved}) RETURNING 1) \
             {row}",
            drep = rep("d"),
            srep = rep("s"),
            delta = delta.join(" UNION ALL "),
            ncols = net_cols.join(", "),
            set = set.join(", "),
            m = matches("s", "n"),
            mp = matches("s", "p"),
        );
    }
    format!(
        "{head}__pgt_delta AS (SELECT d.*, {drep} AS __pgt_rep FROM ({delta}) AS d WHERE {go}), \
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
        delta = delta.join(" UNION ALL "),
        ncols = net_cols.join(", "),
        m2 = matches("s2", "n"),
    )
}

/// The operators whose rows are recomputed where a change touches them (`DISTINCT`, set
/// operations but `UNION ALL`, aggregates): the SQL of the identities each term of the change
/// touches, and the operator's rows (identity, then the columns named `names`) restricted per
/// input row to the identities of a `WITH` part `__pgt_touched`, its `FROM` items read where
/// `replace` gives their SQL (else as they are now); `None` for the other operators.
fn recomputation(
    plan: &Plan,
    names: &[String],
    changeable: &[Changeable<'_>],
    replace: &dyn Fn(&Plan) -> Option<String>,
) -> Result<Option<(Vec<String>, String)>, NotDifferential> {
    let id = quote_ident(ROW_ID);
    let cols: Vec<String> = names.iter().map(|n| quote_ident(n)).collect();
    let touched_filter =
        |per_row: &str| format!("{per_row} IN (SELECT a.{id} FROM __pgt_touched AS a)");
    Ok(match plan {
        Plan::Distinct { input } => {
            let targets: Vec<String> = input.outputs().into_iter().map(|o| o.expr.sql).collect();
            let per_row = encoded("GROUP_KEY", &targets);
            let touched = touched_terms(input, changeable, &per_row)?;
            let inner_names = positional(targets.len());
            let inner = level_where(
                input,
                &inner_names,
                false,
                true,
                replace,
                &[],
                &[touched_filter(&per_row)],
            )
            .map_err(|e| NotDifferential(e.0))?;
            let d: Vec<String> = inner_names.iter().map(|c| format!("d.{c}")).collect();
            let named = renamed(&d, &cols);
            let fresh = format!(
                "SELECT {} AS {id}, {} FROM ({inner}) AS d",
                encoded("GROUP_KEY", &d),
                named
            );
            Some((touched, fresh))
        }
        Plan::SetOp { op, all, branches } => {
            let mut touched = Vec::new();
            let mut parts = Vec::new();
            let width = names.len();
            for branch in branches {
                let targets: Vec<String> =
                    branch.outputs().into_iter().map(|o| o.expr.sql).collect();
                let per_row = encoded("SET_KEY", &targets);
                touched.extend(touched_terms(branch, changeable, &per_row)?);
                let inner = level_where(
                    branch,
                    &positional(width),
                    false,
                    false,
                    replace,
                    &[],
                    &[touched_filter(&per_row)],
                )
                .map_err(|e| NotDifferential(e.0))?;
                parts.push(format!("({inner})"));
            }
            let glue = format!(" {}{} ", op.keyword(), if *all { " ALL" } else { "" });
            let s: Vec<String> = positional(width).iter().map(|c| format!("s.{c}")).collect();
            let named = renamed(&s, &cols);
            let fresh = format!(
                "SELECT {} AS {id}, {} FROM ({}) AS s",
                encoded("SET_KEY", &s),
                named,
                parts.join(&glue)
            );
            Some((touched, fresh))
        }
        _ if is_aggregate(plan) => {
            let group = level_identity(plan).map_err(|e| NotDifferential(e.0))?;
            let touched = touched_terms(&strip_aggregate(plan), changeable, &group)?;
            let fresh = level_where(
                plan,
                names,
                true,
                false,
                replace,
                &[],
                &[touched_filter(&group_identity_per_row(plan)?)],
            )
            .map_err(|e| NotDifferential(e.0))?;
            Some((touched, fresh))
        }
        _ => None,
    })
}

/// The IMMEDIATE statement of `plan` into `storage` (identity index of `class`) for a
/// statement on the source `relation` whose transition tables are named `new_table`
/// (INSERT, UPDATE) and `old_table` (UPDATE, DELETE): the same rules as
/// [`delta_statement`], the change being the transition tables (new rows +1, old rows -1)
/// and every other item read as it is after the statement. `columns` are the relation's
/// columns by name (a subquery that aggregates or deduplicates reads the relation as it was
/// before the statement by them). Returns one row: the number of stored rows changed
/// (`bigint`).
pub fn immediate_statement(
    plan: &Plan,
    storage: &str,
    class: IndexClass,
    relation: &str,
    columns: &[String],
    new_table: Option<&str>,
    old_table: Option<&str>,
) -> Result<String, NotDifferential> {
    from_items(plan)?;
    let side = |table: Option<&str>, weight: &str| -> String {
        match table {
            Some(t) => format!(
                "SELECT t.*, {weight} AS \"__pgt_w\" FROM {} AS t",
                quote_ident(t)
            ),
            None => String::new(),
        }
    };
    let parts: Vec<String> = [side(new_table, "1"), side(old_table, "-1")]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        return Err(NotDifferential(
            "a statement without transition tables".into(),
        ));
    }
    let mut changeable: Vec<Changeable<'_>> = Vec::new();
    for scan in all_scans(plan) {
        let Plan::Scan {
            relation: r, alias, ..
        } = scan
        else {
            continue;
        };
        if r != relation
            || changeable
                .iter()
                .any(|c| c.alias == alias.as_str() && c.relation == *r)
        {
            continue;
        }
        let images = format!("({}) AS {}", parts.join(" UNION ALL "), quote_ident(alias));
        changeable.push(Changeable {
            alias,
            relation: r.clone(),
            old: scan_before(scan, &images, columns),
            images,
        });
    }
    let mut subqueries = Vec::new();
    add_subqueries(plan, &mut changeable, &mut subqueries)?;
    let reads_changed = match semi::top_level(plan) {
        Some((_, reads)) if reads.iter().any(|r| r == relation) => "true",
        _ => "false",
    };
    apply(
        plan,
        &Frame {
            storage,
            class,
            changeable: &changeable,
            head: &format!(
                "WITH {}",
                subqueries
                    .iter()
                    .map(|p| format!("{p}, "))
                    .collect::<String>()
            ),
            go: "true",
            row: "SELECT ((SELECT count(*) FROM __pgt_gone) + (SELECT count(*) FROM __pgt_new))::pg_catalog.int8",
            reads_changed,
        },
    )
}

/// The `FROM` items of the one `SELECT` level a plan with a delta rule is (at most
/// [`MAX_JOIN_INPUTS`]), or the operator that has none.
fn from_items(plan: &Plan) -> Result<Vec<&Plan>, NotDifferential> {
    // An outer join has a delta rule as a level's only FROM item, over two scans; a window at
    // the top level only.
    let outer_level = outer::applies(plan);
    let mut refused = None;
    crate::identity::walk(plan, &mut |p| {
        if refused.is_none() {
            if matches!(p, Plan::OuterJoin { .. }) && !outer_level {
                refused = Some(format!(
                    "a {} other than a level's only FROM item over two tables",
                    name(p)
                ));
            } else if matches!(p, Plan::Window { .. }) && !std::ptr::eq(p, plan) {
                refused = Some("a Window inside a subquery".to_string());
            }
        }
    });
    if let Some(refused) = refused.or_else(|| semi::refusal(plan)) {
        return Err(NotDifferential(refused));
    }
    let items = match plan {
        Plan::Distinct { input } if !is_aggregate(input) => level_items(input)?,
        Plan::SetOp { branches, .. } | Plan::UnionAll { branches } => {
            let first = branches.first().map(|b| b.outputs()).unwrap_or_default();
            let mut items = Vec::new();
            for b in branches {
                if is_aggregate(b) || !matches!(b, Plan::Project { .. } | Plan::Filter { .. }) {
                    return Err(NotDifferential(
                        "a set operation of aggregates, DISTINCT or set operations".into(),
                    ));
                }
                let types = |o: &[crate::plan::Output]| -> Vec<String> {
                    o.iter().map(|c| c.expr.sql_type.clone()).collect()
                };
                if types(&b.outputs()) != types(&first) {
                    return Err(NotDifferential(
                        "a set operation whose branches differ in column types".into(),
                    ));
                }
                let mine = level_items(b)?;
                if mine.len() > MAX_JOIN_INPUTS {
                    return Err(NotDifferential(format!(
                        "a join of {} tables (at most {MAX_JOIN_INPUTS})",
                        mine.len()
                    )));
                }
                items.extend(mine);
            }
            return Ok(items);
        }
        _ => level_items(plan)?,
    };
    if items.len() > MAX_JOIN_INPUTS {
        return Err(NotDifferential(format!(
            "a join of {} tables (at most {MAX_JOIN_INPUTS})",
            items.len()
        )));
    }
    Ok(items)
}

fn level_items(plan: &Plan) -> Result<Vec<&Plan>, NotDifferential> {
    match plan {
        // A function's rows change with the items it reads, never by themselves.
        Plan::Scan { .. } | Plan::Subquery { .. } | Plan::Function { .. } => Ok(vec![plan]),
        Plan::Join { inputs, .. } => Ok(inputs.iter().collect()),
        // Its two sides (the outer rule reads them; `from_items` refused any other shape).
        Plan::OuterJoin { left, right, .. } => Ok(vec![left, right]),
        Plan::Project { input, .. }
        | Plan::Window { input, .. }
        | Plan::Filter { input, .. }
        | Plan::SemiJoin { input, .. }
        | Plan::Aggregate { input, .. } => level_items(input),
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
