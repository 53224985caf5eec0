//! Bottom-up typing of expressions. Every binding in the IR carries its type,
//! so an expression's type follows from its leaves; validation, the
//! interpreter and both backends share this one definition.

use std::collections::BTreeMap;

use thiserror::Error;

use super::{BinaryOp, Expr, Name, RefAccess, RefType, ScalarType, Type, UnaryOp};

/// What names mean at a point of a kernel body.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scope {
    scalars: BTreeMap<Name, ScalarType>,
    refs: BTreeMap<Name, RefType>,
}

impl Scope {
    pub fn new() -> Self {
        Self::default()
    }

    /// A scope holding the kernel's parameters.
    pub fn from_params<'a>(params: impl IntoIterator<Item = &'a super::Param>) -> Self {
        let mut scope = Scope::new();
        for p in params {
            match &p.ty {
                Type::Scalar(t) => scope.bind_scalar(&p.name, *t),
                Type::Ref(r) => scope.bind_ref(&p.name, r.clone()),
            }
        }
        scope
    }

    pub fn bind_scalar(&mut self, name: &str, ty: ScalarType) {
        self.refs.remove(name);
        self.scalars.insert(name.to_string(), ty);
    }

    pub fn bind_ref(&mut self, name: &str, ty: RefType) {
        self.scalars.remove(name);
        self.refs.insert(name.to_string(), ty);
    }

    pub fn scalar(&self, name: &str) -> Option<ScalarType> {
        self.scalars.get(name).copied()
    }

    pub fn ref_type(&self, name: &str) -> Option<&RefType> {
        self.refs.get(name)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TypeError {
    #[error("unknown name `{0}`")]
    UnknownName(Name),
    #[error("`{0}` is a ref, not a scalar value; index it to load an element")]
    RefAsValue(Name),
    #[error("`{0}` is not a ref and cannot be indexed")]
    NotARef(Name),
    #[error("operator `{op}` needs {expected} operands, found `{found}`")]
    BadOperand {
        op: &'static str,
        expected: &'static str,
        found: ScalarType,
    },
    #[error("operands of `{op}` have different types: `{lhs}` and `{rhs}`")]
    Mismatch {
        op: &'static str,
        lhs: ScalarType,
        rhs: ScalarType,
    },
    #[error("`bitcast<{to}>` of a `{from}`: {}", bitcast_rule(*from, *to))]
    BadBitcast { from: ScalarType, to: ScalarType },
    #[error("`{func}` takes {expected} arguments, found {found}")]
    Arity {
        func: &'static str,
        expected: usize,
        found: usize,
    },
}

/// Whether `bitcast<to>(x)` with `x: from` reinterprets bits: between the
/// 32-bit types `f32`, `i32`, `u32`; between the 16-bit floats; and between
/// a 16-bit float and `i32`/`u32`, where the 16 bits are the word's low half
/// (to 16 bits the high half is dropped; from 16 bits it is zero).
pub fn bitcast_allowed(from: ScalarType, to: ScalarType) -> bool {
    use ScalarType::*;
    let word = |t: ScalarType| matches!(t, F32 | I32 | U32);
    let integer = |t: ScalarType| matches!(t, I32 | U32);
    (word(from) && word(to))
        || (from.is_16bit() && to.is_16bit())
        || (from.is_16bit() && integer(to))
        || (integer(from) && to.is_16bit())
}

fn bitcast_rule(from: ScalarType, to: ScalarType) -> &'static str {
    if from == ScalarType::Bool || to == ScalarType::Bool {
        "`bool` has no bit pattern to reinterpret"
    } else {
        "an `f32` and a 16-bit float differ in size; bitcast between `f32`, `i32` and `u32`, between `f16` and `bf16`, or between a 16-bit float and the low half of an `i32` or `u32`"
    }
}

/// Text of a binary operator: the one table of operator spellings, which
/// the printer, messages and the emitters (C and WGSL spell them alike) use.
pub fn binary_symbol(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        BinaryOp::Rem => "%",
        BinaryOp::BitAnd => "&",
        BinaryOp::BitOr => "|",
        BinaryOp::BitXor => "^",
        BinaryOp::Shl => "<<",
        BinaryOp::Shr => ">>",
        BinaryOp::LogicAnd => "&&",
        BinaryOp::LogicOr => "||",
        BinaryOp::Eq => "==",
        BinaryOp::Ne => "!=",
        BinaryOp::Lt => "<",
        BinaryOp::Le => "<=",
        BinaryOp::Gt => ">",
        BinaryOp::Ge => ">=",
    }
}

/// Text of a unary operator (the one table, as [`binary_symbol`]).
pub fn unary_symbol(op: UnaryOp) -> &'static str {
    match op {
        UnaryOp::Neg => "-",
        UnaryOp::Not => "!",
        UnaryOp::BitNot => "~",
    }
}

fn element_type(access: &RefAccess, scope: &Scope) -> Result<ScalarType, TypeError> {
    match scope.ref_type(&access.base) {
        Some(r) => Ok(r.elem),
        None if scope.scalar(&access.base).is_some() => {
            Err(TypeError::NotARef(access.base.clone()))
        }
        None => Err(TypeError::UnknownName(access.base.clone())),
    }
}

/// The type of `expr` in `scope`. Checks operand types but not index types or
/// ranks (validation does those, with better places to point at).
pub fn type_of(expr: &Expr, scope: &Scope) -> Result<ScalarType, TypeError> {
    use ScalarType::*;
    Ok(match expr {
        Expr::Lit(l) => l.ty(),
        Expr::WarpPosition(_) => U32,
        Expr::Var(name) => match scope.scalar(name) {
            Some(t) => t,
            None if scope.ref_type(name).is_some() => {
                return Err(TypeError::RefAsValue(name.clone()))
            }
            None => return Err(TypeError::UnknownName(name.clone())),
        },
        Expr::AxisIndex(_) | Expr::AxisSize(_) => U32,
        Expr::Load(access) => element_type(access, scope)?,
        Expr::Unary(op, e) => {
            let t = type_of(e, scope)?;
            let ok = match op {
                UnaryOp::Neg => t.is_numeric(),
                UnaryOp::Not => t == Bool,
                UnaryOp::BitNot => t.is_integer(),
            };
            if !ok {
                return Err(TypeError::BadOperand {
                    op: unary_symbol(*op),
                    expected: match op {
                        UnaryOp::Neg => "numeric",
                        UnaryOp::Not => "bool",
                        UnaryOp::BitNot => "integer",
                    },
                    found: t,
                });
            }
            t
        }
        Expr::Binary(op, a, b) => {
            let lhs = type_of(a, scope)?;
            let rhs = type_of(b, scope)?;
            let sym = binary_symbol(*op);
            // A shift's amount may be either integer type (its bits, modulo
            // 32); the result has the left operand's type.
            let shift_amount =
                matches!(op, BinaryOp::Shl | BinaryOp::Shr) && lhs.is_integer() && rhs.is_integer();
            if lhs != rhs && !shift_amount {
                return Err(TypeError::Mismatch { op: sym, lhs, rhs });
            }
            let (ok, expected) = match op {
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => {
                    (lhs.is_numeric(), "numeric")
                }
                BinaryOp::BitAnd
                | BinaryOp::BitOr
                | BinaryOp::BitXor
                | BinaryOp::Shl
                | BinaryOp::Shr => (lhs.is_integer(), "integer"),
                BinaryOp::LogicAnd | BinaryOp::LogicOr => (lhs == Bool, "bool"),
                BinaryOp::Eq | BinaryOp::Ne => (true, "any"),
                BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
                    (lhs.is_numeric(), "numeric")
                }
            };
            if !ok {
                return Err(TypeError::BadOperand {
                    op: sym,
                    expected,
                    found: lhs,
                });
            }
            if op.is_comparison() {
                Bool
            } else {
                lhs
            }
        }
        Expr::Select(c, t, f) => {
            let ct = type_of(c, scope)?;
            if ct != Bool {
                return Err(TypeError::BadOperand {
                    op: "select",
                    expected: "a bool condition",
                    found: ct,
                });
            }
            let tt = type_of(t, scope)?;
            let ft = type_of(f, scope)?;
            if tt != ft {
                return Err(TypeError::Mismatch {
                    op: "select",
                    lhs: tt,
                    rhs: ft,
                });
            }
            tt
        }
        Expr::Cast(to, e) => {
            type_of(e, scope)?;
            *to
        }
        Expr::Bitcast(to, e) => {
            let from = type_of(e, scope)?;
            if !bitcast_allowed(from, *to) {
                return Err(TypeError::BadBitcast { from, to: *to });
            }
            *to
        }
        Expr::Math(f, args) => {
            if args.len() != f.arity() {
                return Err(TypeError::Arity {
                    func: f.name(),
                    expected: f.arity(),
                    found: args.len(),
                });
            }
            let first = type_of(&args[0], scope)?;
            for a in &args[1..] {
                let t = type_of(a, scope)?;
                if t != first {
                    return Err(TypeError::Mismatch {
                        op: f.name(),
                        lhs: first,
                        rhs: t,
                    });
                }
            }
            let ok = (f.accepts_floats() && first.is_float())
                || (f.accepts_integers() && first.is_integer());
            if !ok {
                return Err(TypeError::BadOperand {
                    op: f.name(),
                    expected: match (f.accepts_floats(), f.accepts_integers()) {
                        (true, true) => "numeric",
                        (true, false) => "float (f32, f16 or bf16)",
                        _ => "integer (i32 or u32)",
                    },
                    found: first,
                });
            }
            first
        }
    })
}
