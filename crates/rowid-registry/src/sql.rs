//! SQL shapes for storage indexes and exact matching (spec/registry.md §5). Pure string
//! builders: identifiers are always quoted.

use crate::plan::IndexClass;

/// The row identity column.
pub const ROW_ID: &str = "__pgt_row_id";
/// The probe function, schema-qualified.
pub const PROBE_FN: &str = "pgtrickle.row_probe_v1";

/// Quotes an identifier: wrapped in double quotes, inner quotes doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A possibly schema-qualified relation name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QualifiedName {
    /// Schema, if qualified.
    pub schema: Option<String>,
    /// Relation name.
    pub name: String,
}

impl QualifiedName {
    /// `schema.name`.
    pub fn new(schema: &str, name: &str) -> QualifiedName {
        QualifiedName {
            schema: Some(schema.to_string()),
            name: name.to_string(),
        }
    }

    /// Quoted form.
    pub fn quoted(&self) -> String {
        match &self.schema {
            Some(s) => format!("{}.{}", quote_ident(s), quote_ident(&self.name)),
            None => quote_ident(&self.name),
        }
    }
}

/// `CREATE [UNIQUE] INDEX` for the plan's class.
pub fn index_ddl(class: IndexClass, index: &str, table: &QualifiedName) -> String {
    let (unique, key) = match class {
        IndexClass::DirectUnique => ("UNIQUE ", quote_ident(ROW_ID)),
        IndexClass::DirectNonUnique => ("", quote_ident(ROW_ID)),
        IndexClass::ProbeExpression => ("", format!("{PROBE_FN}({})", quote_ident(ROW_ID))),
    };
    format!(
        "CREATE {unique}INDEX {} ON {} USING btree ({key})",
        quote_ident(index),
        table.quoted()
    )
}

/// The replica identity of a storage with an index of `class` named `index` (design proposal
/// §11): a bounded unique identity's direct unique index on the `NOT NULL` row ID; every
/// other storage (the probe expression cannot be a replica identity; keyless rows repeat)
/// the whole row.
pub fn replica_identity_ddl(class: IndexClass, index: &str, table: &QualifiedName) -> String {
    match class {
        IndexClass::DirectUnique => format!(
            "ALTER TABLE {} REPLICA IDENTITY USING INDEX {}",
            table.quoted(),
            quote_ident(index)
        ),
        IndexClass::DirectNonUnique | IndexClass::ProbeExpression => {
            format!("ALTER TABLE {} REPLICA IDENTITY FULL", table.quoted())
        }
    }
}

/// The predicate matching target rows `t` to source rows `s`: full identity equality, plus
/// probe equality first when the index is the probe expression (the probe only finds
/// candidates; the full identity decides).
pub fn match_predicate(class: IndexClass, t: &str, s: &str) -> String {
    let (t, s, id) = (quote_ident(t), quote_ident(s), quote_ident(ROW_ID));
    let full = format!("{t}.{id} = {s}.{id}");
    match class {
        IndexClass::DirectUnique | IndexClass::DirectNonUnique => full,
        IndexClass::ProbeExpression => {
            format!("{PROBE_FN}({t}.{id}) = {PROBE_FN}({s}.{id}) AND {full}")
        }
    }
}

fn column_list(columns: &[&str]) -> String {
    std::iter::once(ROW_ID)
        .chain(columns.iter().copied())
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(", ")
}

fn set_list(columns: &[&str], from: &str) -> String {
    columns
        .iter()
        .map(|c| format!("{} = {from}.{}", quote_ident(c), quote_ident(c)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Upsert for bounded unique identities: `ON CONFLICT (__pgt_row_id)`, which the direct
/// UNIQUE index makes authoritative. `None` for any other class.
pub fn upsert(
    class: IndexClass,
    table: &QualifiedName,
    source: &str,
    columns: &[&str],
) -> Option<String> {
    if class != IndexClass::DirectUnique {
        return None;
    }
    let cols = column_list(columns);
    let mut sql = format!(
        "INSERT INTO {} ({cols}) SELECT {cols} FROM {} ON CONFLICT ({})",
        table.quoted(),
        quote_ident(source),
        quote_ident(ROW_ID)
    );
    if columns.is_empty() {
        sql.push_str(" DO NOTHING");
    } else {
        sql.push_str(" DO UPDATE SET ");
        sql.push_str(&set_list(columns, "EXCLUDED"));
    }
    Some(sql)
}

/// MERGE of a delta `source` into `table` through the exact-match predicate.
pub fn merge(class: IndexClass, table: &QualifiedName, source: &str, columns: &[&str]) -> String {
    let cols = column_list(columns);
    let values = std::iter::once(ROW_ID)
        .chain(columns.iter().copied())
        .map(|c| format!("\"d\".{}", quote_ident(c)))
        .collect::<Vec<_>>()
        .join(", ");
    let mut sql = format!(
        "MERGE INTO {} AS \"t\" USING {} AS \"d\" ON {}",
        table.quoted(),
        quote_ident(source),
        match_predicate(class, "t", "d")
    );
    if !columns.is_empty() {
        sql.push_str(&format!(
            " WHEN MATCHED THEN UPDATE SET {}",
            set_list(columns, "\"d\"")
        ));
    }
    sql.push_str(&format!(
        " WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({values})"
    ));
    sql
}

/// UPDATE of matched rows from `source`.
pub fn update(class: IndexClass, table: &QualifiedName, source: &str, columns: &[&str]) -> String {
    format!(
        "UPDATE {} AS \"t\" SET {} FROM {} AS \"d\" WHERE {}",
        table.quoted(),
        set_list(columns, "\"d\""),
        quote_ident(source),
        match_predicate(class, "t", "d")
    )
}

/// DELETE of rows matched by `source`.
pub fn delete(class: IndexClass, table: &QualifiedName, source: &str) -> String {
    format!(
        "DELETE FROM {} AS \"t\" USING {} AS \"d\" WHERE {}",
        table.quoted(),
        quote_ident(source),
        match_predicate(class, "t", "d")
    )
}
