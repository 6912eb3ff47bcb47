//! The identity each operator gives its output rows (spec/stream-tables.md §2), and the SQL
//! that derives it with `pgtrickle.encode_row_id_v2` (§3).
//!
//! One rule per operator, in [`identity`]. The rule says which values form the identity;
//! `rowid-codec` alone decides the bytes. [`identity_sql`] renders the rule as the SQL
//! expression anyone can evaluate to check a stored `__pgt_row_id`.

use rowid_codec::Domain;
use rowid_registry::sql::quote_ident;

use crate::plan::{Expr, OuterKind, Plan, SetOpKind, SourceKey, StoredIdentity};

/// The registered SYNTHETIC discriminator of an aggregate without `GROUP BY`
/// (spec/wire-format.md §3.2).
pub const SCALAR_AGGREGATE_SINGLETON: &str = "scalar_aggregate_singleton";

/// One field of an output identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// A value: an expression over the operator's input (for [`Plan::Distinct`] and
    /// [`Plan::SetOp`], an output column by name).
    Value(Expr),
    /// An input row's complete identity, as a child identity (tag `40`).
    Child(Box<Identity>),
    /// The identity of an outer join's side that a row may have no match on: the child
    /// where `present` holds, else a NULL child (`40 00`).
    NullableChild {
        /// The side's identity.
        child: Box<Identity>,
        /// Whether the side is there ([`presence`]).
        present: Expr,
    },
    /// The branch of a `UNION ALL`, from 1 (`int4`).
    Branch(u32),
    /// A registered SYNTHETIC discriminator (`text`).
    Discriminator(&'static str),
    /// An upstream stream table's stored identity: the whole identity, not a field of it. An
    /// identity holding it holds nothing else (the scan of a stream table, [`identity`]); its
    /// bytes are the stored ones, never encoded again.
    Stored(StoredIdentity),
}

/// The identity of an operator's output rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Its domain.
    pub domain: Domain,
    /// Its fields, in order.
    pub fields: Vec<Field>,
    /// No two output rows can share it (else equal rows share it: a multiset, counted).
    pub unique: bool,
}

/// The identity of `plan`'s output rows (for `UNION ALL`, of its first branch's rows; branch
/// `n`'s are [`branch_identity`]).
pub fn identity(plan: &Plan) -> Identity {
    match plan {
        Plan::Scan { key, .. } => match key {
            SourceKey::Key(fields) => values(Domain::ScanKey, fields, true),
            SourceKey::Keyless(fields) => values(Domain::KeylessRow, fields, false),
            SourceKey::Stored(stored) => Identity {
                domain: stored.domain,
                fields: vec![Field::Stored(stored.clone())],
                unique: stored.unique,
            },
        },
        // Its rows' values, as a keyless source's: equal rows of one call share it, unless
        // the ordinality numbers them.
        Plan::Function {
            columns,
            ordinality,
            ..
        } => Identity {
            domain: Domain::KeylessRow,
            fields: columns
                .iter()
                .map(|c| Field::Value(c.expr.clone()))
                .collect(),
            unique: *ordinality,
        },
        // Pass-through: the input's identity, byte for byte.
        Plan::Filter { input, .. }
        | Plan::SemiJoin { input, .. }
        | Plan::Project { input, .. }
        | Plan::Subquery { input, .. } => identity(input),
        Plan::Join { inputs, .. } => {
            let children: Vec<Identity> = inputs.iter().map(identity).collect();
            Identity {
                domain: Domain::JoinKey,
                unique: children.iter().all(|c| c.unique),
                fields: children
                    .into_iter()
                    .map(|c| Field::Child(Box::new(c)))
                    .collect(),
            }
        }
        // The side a row has no match on is a NULL child (`40 00`): never a child identity,
        // so a row flipping between matched and NULL-extended changes its identity.
        Plan::OuterJoin {
            kind, left, right, ..
        } => {
            let side = |plan: &Plan, nullable: bool| {
                let child = Box::new(identity(plan));
                if nullable {
                    Field::NullableChild {
                        child,
                        present: presence(plan),
                    }
                } else {
                    Field::Child(child)
                }
            };
            Identity {
                domain: Domain::JoinKey,
                unique: identity(left).unique && identity(right).unique,
                fields: vec![
                    side(left, kind.left_nullable()),
                    side(right, kind.right_nullable()),
                ],
            }
        }
        // The partition's values, then the input row's identity: one output row per input
        // row, and a partition's rows one range of the identity order.
        Plan::Window {
            input,
            partition_by,
            ..
        } => {
            let child = identity(input);
            let mut fields: Vec<Field> = partition_by.iter().cloned().map(Field::Value).collect();
            let unique = child.unique;
            fields.push(Field::Child(Box::new(child)));
            Identity {
                domain: Domain::WindowKey,
                fields,
                unique,
            }
        }
        Plan::Aggregate { group_by, .. } if group_by.is_empty() => Identity {
            domain: Domain::Synthetic,
            fields: vec![Field::Discriminator(SCALAR_AGGREGATE_SINGLETON)],
            unique: true,
        },
        Plan::Aggregate { group_by, .. } => values(Domain::GroupKey, group_by, true),
        Plan::Distinct { input } => by_name(Domain::GroupKey, input, true),
        // Each branch's rows carry their branch number: branch 1's here, branch n's from
        // `branch_identity`.
        Plan::UnionAll { branches } => branch_identity(branches, 1).unwrap_or(Identity {
            domain: Domain::SetKey,
            fields: vec![],
            unique: true,
        }),
        Plan::SetOp { all, branches, .. } => {
            let first = branches.first();
            match first {
                Some(first) => by_name(Domain::SetKey, first, !all),
                None => Identity {
                    domain: Domain::SetKey,
                    fields: vec![],
                    unique: !all,
                },
            }
        }
    }
}

/// Whether a row of `plan`'s output is there rather than NULL-extended by an outer join above
/// it (spec/stream-tables.md §2), as a `boolean` expression in the scope of the `FROM` item
/// `plan` is: a scan's `ctid` is not NULL (a key column can be: a keyless row of NULLs); a
/// subquery's block has a `__pgt_row_id` (identities are never NULL); an inner join's rows
/// are there when its first input's are; an outer join's when its kept side's are (either
/// side's, for `FULL`).
pub fn presence(plan: &Plan) -> Expr {
    let sql = match plan {
        Plan::Scan { alias, .. } => format!("{}.ctid IS NOT NULL", quote_ident(alias)),
        // A function's row is there when its ordinality is; without one nothing tells a row
        // of NULLs from none, and the reader refuses a function inside an outer join.
        Plan::Function {
            ordinality,
            columns,
            ..
        } => match columns.last() {
            Some(n) if *ordinality => format!("{} IS NOT NULL", n.expr.sql),
            _ => "true".to_string(),
        },
        Plan::Subquery { alias, .. } => {
            format!("{}.\"__pgt_row_id\" IS NOT NULL", quote_ident(alias))
        }
        Plan::Filter { input, .. }
        | Plan::SemiJoin { input, .. }
        | Plan::Project { input, .. }
        | Plan::Window { input, .. } => {
            return presence(input);
        }
        Plan::Join { inputs, .. } => match inputs.first() {
            Some(first) => return presence(first),
            None => "false".to_string(),
        },
        Plan::OuterJoin {
            kind, left, right, ..
        } => match kind {
            OuterKind::Left => return presence(left),
            OuterKind::Right => return presence(right),
            OuterKind::Full => format!("({} OR {})", presence(left).sql, presence(right).sql),
        },
        // Never a FROM item of its own: inside a subquery's block.
        Plan::Aggregate { .. }
        | Plan::Distinct { .. }
        | Plan::UnionAll { .. }
        | Plan::SetOp { .. } => "true".to_string(),
    };
    Expr::new(&sql, "boolean")
}

/// The identity of the rows `UNION ALL` takes from its branch `n` (from 1).
pub fn branch_identity(branches: &[Plan], n: u32) -> Option<Identity> {
    let branch = branches.get(usize::try_from(n).ok()?.checked_sub(1)?)?;
    Some(Identity {
        domain: Domain::SetKey,
        fields: vec![Field::Branch(n), Field::Child(Box::new(identity(branch)))],
        unique: branches.iter().all(|b| identity(b).unique),
    })
}

fn values(domain: Domain, fields: &[Expr], unique: bool) -> Identity {
    Identity {
        domain,
        fields: fields.iter().cloned().map(Field::Value).collect(),
        unique,
    }
}

/// An identity of every output column of `input`, by name.
fn by_name(domain: Domain, input: &Plan, unique: bool) -> Identity {
    Identity {
        domain,
        fields: input
            .outputs()
            .into_iter()
            .map(|o| Field::Value(Expr::new(&quote_ident(&o.name), &o.expr.sql_type)))
            .collect(),
        unique,
    }
}

/// The SQL expression that derives `identity` with `pgtrickle.encode_row_id_v2`
/// (spec/stream-tables.md §3), in a scope where its expressions are visible.
pub fn identity_sql(identity: &Identity) -> String {
    if let [Field::Stored(stored)] = identity.fields.as_slice() {
        // Passed through: the stored bytes themselves.
        return stored.column.sql.clone();
    }
    let fields: Vec<String> = identity
        .fields
        .iter()
        .map(|f| match f {
            Field::Value(e) => e.sql.clone(),
            Field::Child(c) => format!("({})::pgtrickle.row_id", identity_sql(c)),
            // The CASE cast as a whole: PostgreSQL resolves a CASE of a domain and NULL to
            // the base type, whose field is a value (`0C`), not a child.
            Field::NullableChild { child, present } => format!(
                "(CASE WHEN {} THEN {} END)::pgtrickle.row_id",
                present.sql,
                identity_sql(child)
            ),
            Field::Branch(n) => format!("{n}::pg_catalog.int4"),
            Field::Discriminator(name) => format!("'{name}'::pg_catalog.text"),
            // Never beside other fields (see `Field::Stored`); as a child, its bytes.
            Field::Stored(stored) => format!("({})::pgtrickle.row_id", stored.column.sql),
        })
        .collect();
    format!(
        "pgtrickle.encode_row_id_v2('{}', ROW({}))",
        identity.domain.name(),
        fields.join(", ")
    )
}

/// What a refresh of `plan` must keep apart: the operators, from the top, whose output is a
/// multiset (their deletes are counted, spec/stream-tables.md §4).
pub fn multiset_operators(plan: &Plan) -> Vec<&'static str> {
    let mut out = Vec::new();
    walk(plan, &mut |p| {
        if !identity(p).unique {
            out.push(name(p));
        }
    });
    out
}

/// Calls `f` on `plan` and every operator under it, parents first.
pub fn walk<'a>(plan: &'a Plan, f: &mut impl FnMut(&'a Plan)) {
    f(plan);
    match plan {
        Plan::Scan { .. } | Plan::Function { .. } => {}
        Plan::Filter { input, .. }
        | Plan::SemiJoin { input, .. }
        | Plan::Project { input, .. }
        | Plan::Window { input, .. }
        | Plan::Subquery { input, .. }
        | Plan::Aggregate { input, .. }
        | Plan::Distinct { input } => walk(input, f),
        Plan::Join { inputs, .. } => inputs.iter().for_each(|i| walk(i, f)),
        Plan::OuterJoin { left, right, .. } => {
            walk(left, f);
            walk(right, f);
        }
        Plan::UnionAll { branches } | Plan::SetOp { branches, .. } => {
            branches.iter().for_each(|b| walk(b, f));
        }
    }
}

/// The operator's name, as errors and the catalog say it.
pub fn name(plan: &Plan) -> &'static str {
    match plan {
        Plan::Scan { .. } => "Scan",
        Plan::Function { .. } => "Function",
        Plan::Subquery { .. } => "Subquery",
        Plan::Filter { .. } => "Filter",
        Plan::SemiJoin { .. } => "SemiJoin",
        Plan::Project { .. } => "Project",
        Plan::Window { .. } => "Window",
        Plan::Join { .. } => "Join",
        Plan::OuterJoin {
            kind: OuterKind::Left,
            ..
        } => "LeftJoin",
        Plan::OuterJoin {
            kind: OuterKind::Right,
            ..
        } => "RightJoin",
        Plan::OuterJoin {
            kind: OuterKind::Full,
            ..
        } => "FullJoin",
        Plan::Aggregate { .. } => "Aggregate",
        Plan::Distinct { .. } => "Distinct",
        Plan::UnionAll { .. } => "UnionAll",
        Plan::SetOp {
            op: SetOpKind::Union,
            ..
        } => "Union",
        Plan::SetOp {
            op: SetOpKind::Intersect,
            ..
        } => "Intersect",
        Plan::SetOp {
            op: SetOpKind::Except,
            ..
        } => "Except",
    }
}

/// The worst-case length of `identity`'s bytes, given the worst-case encoded length of each
/// value field (`value_len`, field overhead included, as `rowid_registry::ResolvedField`
/// gives it); `None` when a field is unbounded. A child identity is escaped (at worst every
/// byte doubled) and terminated (wire-format.md §2.1, §6.1).
pub fn max_len(identity: &Identity, value_len: &dyn Fn(&Expr) -> Option<usize>) -> Option<usize> {
    use rowid_registry::size::{FIELD_OVERHEAD, IDENTITY_OVERHEAD};
    const TERMINATOR: usize = 2;
    if let [Field::Stored(stored)] = identity.fields.as_slice() {
        return stored.max_len;
    }
    identity
        .fields
        .iter()
        .try_fold(IDENTITY_OVERHEAD, |acc, f| {
            let field = match f {
                Field::Value(e) => value_len(e)?,
                Field::Child(c) | Field::NullableChild { child: c, .. } => {
                    FIELD_OVERHEAD + max_len(c, value_len)?.checked_mul(2)? + TERMINATOR
                }
                Field::Branch(_) => FIELD_OVERHEAD + 4,
                Field::Discriminator(d) => FIELD_OVERHEAD + 2 * d.len() + TERMINATOR,
                Field::Stored(stored) => {
                    FIELD_OVERHEAD + stored.max_len?.checked_mul(2)? + TERMINATOR
                }
            };
            acc.checked_add(field)
        })
}
