//! Stored rows found by identity range (spec/stream-tables.md §2): every identity whose
//! fields begin with some values and end with one child identity shares the prefix of the
//! identity of those values and a NULL child, less that child's `40 00` and `TUPLE_END`
//! (wire-format.md §3.1, §4, §6.1); no identity of other values lies between that prefix and
//! the prefix followed by `FF`, which no field tag reaches. The window rule finds a touched
//! partition's stored rows this way, the outer join rule a touched left row's.

use rowid_registry::sql::quote_ident;

use crate::sql::ROW_ID;

/// The bytes that end an identity whose last field is a NULL child: its tag (`40`), the NULL
/// state (`00`) and `TUPLE_END` (`FF`).
const NULL_CHILD_AND_END: usize = 3;

/// A `WITH` part `__pgt_tr` (`lo`, `hi`): for each row `__pgt_t` of the `WITH` part `rows`, the range
/// of the identities of `domain` whose fields are `values` (expressions over `__pgt_t`) and then one
/// child identity.
pub(super) fn ranges(rows: &str, domain: &str, values: &[String]) -> String {
    let mut fields = values.to_vec();
    fields.push("NULL::pgtrickle.row_id".to_string());
    format!(
        "__pgt_tr AS (SELECT x.lo, x.lo OPERATOR(pg_catalog.||) pg_catalog.decode('ff', 'hex') AS hi \
           FROM (SELECT pg_catalog.substr(e.b, 1, pg_catalog.length(e.b) - {NULL_CHILD_AND_END}) AS lo \
             FROM (SELECT pgtrickle.encode_row_id_v2('{domain}', ROW({})) AS b FROM {rows} AS __pgt_t) AS e) AS x), ",
        fields.join(", ")
    )
}

/// The rows of `storage` (its columns `names`) in the ranges of `__pgt_tr`, each weighing -1.
pub(super) fn stored_in_ranges(storage: &str, names: &[String]) -> String {
    let id = quote_ident(ROW_ID);
    let stored: Vec<String> = names
        .iter()
        .map(|n| format!("s.{}", quote_ident(n)))
        .collect();
    format!(
        "SELECT s.{id}, {}, -1 AS \"__pgt_w\" FROM {storage} AS s JOIN __pgt_tr AS r \
           ON s.{id} OPERATOR(pg_catalog.>=) r.lo AND s.{id} OPERATOR(pg_catalog.<) r.hi",
        stored.join(", ")
    )
}
