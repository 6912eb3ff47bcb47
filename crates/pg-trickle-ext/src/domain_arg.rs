//! The first argument of both encoding entry points, the identity domain: parsed once per
//! call site when the call spells it as a constant (nearly always), else per call with the
//! last name cached. Also the `PG_FUNCTION_INFO_V1` record every plain fmgr function of the
//! extension declares.

use pgrx::pg_sys;
use rowid_codec::Domain;

use crate::errors;

/// Declares `pg_finfo_<name>`: the fmgr version-1 calling convention record PostgreSQL looks
/// up beside a C function's symbol (`PG_FUNCTION_INFO_V1(name)`).
#[macro_export]
macro_rules! pg_function_info_v1 {
    ($finfo:ident) => {
        /// `PG_FUNCTION_INFO_V1`: the function uses the version-1 calling convention.
        #[unsafe(no_mangle)]
        pub extern "C" fn $finfo() -> &'static pgrx::pg_sys::Pg_finfo_record {
            static V1: pgrx::pg_sys::Pg_finfo_record =
                pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    };
}

/// The domain named by `name`; raises (naming `function`) for an unknown name.
pub fn parse_domain(function: &str, name: &[u8]) -> Domain {
    std::str::from_utf8(name)
        .ok()
        .and_then(Domain::from_name)
        .unwrap_or_else(|| {
            let names: Vec<&str> = Domain::ALL.iter().map(|d| d.name()).collect();
            errors::invalid_argument(
                function,
                format!(
                    "unknown identity domain {:?}; expected one of {}",
                    String::from_utf8_lossy(name),
                    names.join(", ")
                ),
            )
        })
}

/// The domain argument of one call site.
#[derive(Default)]
pub struct DomainArg {
    /// The call expression `constant` was read from.
    expr: usize,
    /// The domain when the call spells it as a non-NULL text constant.
    constant: Option<Domain>,
    /// Otherwise the last domain argument's bytes and what they name.
    last: Option<(Vec<u8>, Domain)>,
}

impl DomainArg {
    /// The domain of this call (argument 0); raises, naming `function`, for NULL or an
    /// unknown name.
    ///
    /// # Safety
    /// `fcinfo` must be the current call's, with a text first argument.
    pub unsafe fn get(&mut self, fcinfo: pg_sys::FunctionCallInfo, function: &str) -> Domain {
        // SAFETY: guaranteed by the caller; fn_expr is NULL or the call's expression node.
        unsafe {
            let flinfo = (*fcinfo).flinfo;
            let expr = (*flinfo).fn_expr as usize;
            if self.expr != expr {
                self.constant = constant_domain(flinfo, function);
                self.expr = expr;
            }
            if let Some(d) = self.constant {
                return d;
            }
            if pgrx::pg_arg_is_null(fcinfo, 0) {
                errors::null_argument(function, "domain must not be NULL");
            }
            let name = crate::datum::varlena_bytes(pgrx::pg_getarg_datum_raw(fcinfo, 0));
            match &self.last {
                Some((bytes, d)) if bytes.as_slice() == name => *d,
                _ => {
                    let d = parse_domain(function, name);
                    self.last = Some((name.to_vec(), d));
                    d
                }
            }
        }
    }
}

/// The domain, when the call's first argument is a non-NULL text constant (`None`: read it
/// per call). An unknown name raises, naming `function`.
///
/// # Safety
/// `flinfo` must be the FmgrInfo of the current call.
unsafe fn constant_domain(flinfo: *mut pg_sys::FmgrInfo, function: &str) -> Option<Domain> {
    // SAFETY: fn_expr is NULL or the call's expression node; a FuncExpr's args are
    // expression nodes, and a text Const's value is a text datum.
    unsafe {
        let node = (*flinfo).fn_expr;
        if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_FuncExpr {
            return None;
        }
        let args = pgrx::PgList::<pg_sys::Node>::from_pg((*node.cast::<pg_sys::FuncExpr>()).args);
        let first = args.get_ptr(0)?;
        if (*first).type_ != pg_sys::NodeTag::T_Const {
            return None;
        }
        let c = first.cast::<pg_sys::Const>();
        if (*c).constisnull || (*c).consttype != pg_sys::TEXTOID {
            return None;
        }
        Some(parse_domain(
            function,
            crate::datum::varlena_bytes((*c).constvalue),
        ))
    }
}
