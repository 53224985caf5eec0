//! Bottom-up typing of expressions. Every binding in the IR carries its type,
//! so an expression's type follows from its leaves; validation, the
//! interpreter and both backends share this one definition.

use std::collections::HashMap;

use thiserror::Error;

use super::{BinaryOp, Expr, Name, RefAccess, RefType, ScalarType, Type, UnaryOp};

/// What names mean at a point of a kernel body.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    scalars: HashMap<Name, ScalarType>,
    refs: HashMap<Name, RefType>,
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
    #[error("`{func}` takes {expected} arguments, found {found}")]
    Arity {
        func: &'static str,
        expected: usize,
        found: usize,
    },
}

/// Text of a binary operator, for messages and the printer.
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

/// Text of a unary operator.
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
            if lhs != rhs {
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
            if from == Bool || *to == Bool {
                return Err(TypeError::BadOperand {
                    op: "bitcast",
                    expected: "f32, i32 or u32",
                    found: if from == Bool { from } else { *to },
                });
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
            let ok = first == F32 || (f.accepts_integers() && first.is_integer());
            if !ok {
                return Err(TypeError::BadOperand {
                    op: f.name(),
                    expected: if f.accepts_integers() {
                        "numeric"
                    } else {
                        "f32"
                    },
                    found: first,
                });
            }
            first
        }
    })
}
