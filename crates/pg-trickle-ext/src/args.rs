//! `pgtrickle.encode_row_id_v2_fields(domain text, VARIADIC "any")`: the identity of the
//! arguments themselves, each one field, with no record formed and deformed again.
//!
//! Each argument's Datum is read in place with its type, typmod and collation taken from the
//! call expression. The dispatch is resolved once per call site (`fn_extra`) and rebuilt when
//! the call expression it was built for changes (a planned expression's argument types are
//! fixed; a re-planned statement or a polymorphic function's other instantiation is another
//! expression with its own types).
//!
//! Why its own name, not an overload of `encode_row_id_v2(text, record)`: PostgreSQL cannot
//! choose between `(text, record)` and `(text, VARIADIC "any")` for an argument of a named
//! composite type (`encode_row_id_v2('KEYLESS_ROW', NEW)` in a trigger, a table's row) and
//! raises "function is not unique". An overload would break every such call of the record
//! form; a separate name breaks none. `pg_test`s prove both resolutions.
//!
//! A plain fmgr function (`PG_FUNCTION_INFO_V1` contract) under `#[pg_guard]`: no pgrx
//! argument wrapper on the per-row path; a PostgreSQL error still unwinds correctly and a
//! Rust panic becomes an SQL error, never a crash.

use crate::catalog::{row_id_domain, type_name};
use crate::domain_arg::DomainArg;
use crate::errors;
use crate::fields::{self, Field, FieldType};
use pgrx::pg_guard;
use pgrx::pg_sys;

/// The function, for messages.
pub const FUNCTION: &str = "pgtrickle.encode_row_id_v2_fields";

/// The per-call-site dispatch.
#[derive(Default)]
struct ArgsSite {
    /// The call expression the dispatch was built for.
    expr: usize,
    fields: Vec<Field>,
    scratch: Vec<u8>,
    domain: DomainArg,
}

impl Drop for ArgsSite {
    fn drop(&mut self) {
        fields::release(&mut self.fields);
    }
}

/// The type, typmod and collation of every field argument (1..nargs) of the call.
///
/// # Safety
/// `flinfo` must be the FmgrInfo of a call of this function.
unsafe fn argument_types(flinfo: *mut pg_sys::FmgrInfo, nargs: usize) -> Vec<FieldType> {
    // SAFETY: fn_expr is NULL or the call's expression node; a FuncExpr's args is a List of
    // expression nodes, one per argument.
    unsafe {
        let expr = (*flinfo).fn_expr;
        if expr.is_null() || (*expr).type_ != pg_sys::NodeTag::T_FuncExpr {
            errors::invalid_argument(
                FUNCTION,
                "the argument types are unknown (called without a call expression)".into(),
            );
        }
        if pg_sys::get_fn_expr_variadic(flinfo) {
            errors::invalid_argument(
                FUNCTION,
                "an explicit VARIADIC array is not accepted: pass each field as its own \
                 argument (an array argument is one field)"
                    .into(),
            );
        }
        let args = pgrx::PgList::<pg_sys::Node>::from_pg((*expr.cast::<pg_sys::FuncExpr>()).args);
        (1..nargs)
            .map(|i| {
                let typid = pg_sys::get_fn_expr_argtype(flinfo, i as i32);
                let node = args.get_ptr(i).unwrap_or(std::ptr::null_mut());
                if typid == pg_sys::UNKNOWNOID {
                    errors::invalid_argument(
                        FUNCTION,
                        format!(
                            "argument {i} is an untyped literal: cast it to the field's type \
                             (for example '2026-01-01'::date)"
                        ),
                    );
                }
                FieldType {
                    typid,
                    typmod: if node.is_null() {
                        -1
                    } else {
                        pg_sys::exprTypmod(node)
                    },
                    collation: if node.is_null() {
                        pg_sys::InvalidOid
                    } else {
                        pg_sys::exprCollation(node)
                    },
                }
            })
            .collect()
    }
}

/// Resolves every field argument, raising the first rejection by name.
///
/// # Safety
/// Must run inside a backend; `mcxt` is the FmgrInfo's memory context.
unsafe fn resolve_all(types: &[FieldType], mcxt: pg_sys::MemoryContext) -> Vec<Field> {
    let row_id = row_id_domain();
    types
        .iter()
        .enumerate()
        .map(|(i, ty)| {
            let name = format!("argument {} ({})", i + 1, type_name(ty.typid));
            // SAFETY: guaranteed by the caller.
            unsafe { fields::resolve(FUNCTION, name.clone(), name, *ty, row_id, mcxt) }
        })
        .collect()
}

crate::pg_function_info_v1!(pg_finfo_encode_row_id_v2_fields);

/// The fmgr entry point of `pgtrickle.encode_row_id_v2_fields`.
///
/// # Safety
/// Called by PostgreSQL's fmgr with a valid `fcinfo` for the SQL signature
/// `(text, VARIADIC "any")`.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn encode_row_id_v2_fields(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fmgr passes nargs arguments; fn_extra/fn_mcxt belong to this call site's
    // FmgrInfo, and pg_func_extra allocates the cache there (dropped with the context).
    unsafe {
        let nargs = (*fcinfo).nargs as usize;
        let flinfo = (*fcinfo).flinfo;
        let mut site = pgrx::pg_func_extra(fcinfo, ArgsSite::default);
        let expr = (*flinfo).fn_expr as usize;
        if site.expr != expr || site.fields.len() + 1 != nargs {
            let types = argument_types(flinfo, nargs);
            let mcxt = (*flinfo).fn_mcxt;
            fields::release(&mut site.fields);
            site.fields = resolve_all(&types, mcxt);
            site.expr = expr;
        }
        let domain = site.domain.get(fcinfo, FUNCTION);
        let ArgsSite {
            fields, scratch, ..
        } = &mut *site;
        let out = fields::encode(FUNCTION, scratch, domain, fields, |i| {
            (
                pgrx::pg_getarg_datum_raw(fcinfo, i + 1),
                pgrx::pg_arg_is_null(fcinfo, i + 1),
            )
        });
        pg_sys::Datum::from(out)
    }
}
