//! Statements.

use super::{
    atomic_op, compound_op, is_builtin_function, mma_load, sem_op, warp_op, PResult, Parser,
};
use crate::ir::*;
use crate::text::lexer::{is_keyword, TokenKind};

impl Parser<'_> {
    pub(super) fn block(&mut self, path: &IrPath, context: &str) -> PResult<Vec<Stmt>> {
        self.expect_punct("{", context)?;
        self.nested(|p| {
            let mut body = Vec::new();
            while !p.eat_punct("}") {
                if p.at_eof() {
                    return Err(p.expected("`}` to close the block"));
                }
                let stmt_path = path.child(PathStep::Stmt(body.len()));
                body.push(p.stmt(&stmt_path)?);
            }
            Ok(body)
        })
    }

    pub(super) fn binding(&mut self, keyword: &str) -> PResult<Binding> {
        let (name, _) = self.name(&format!("a name after `{keyword}`"))?;
        self.expect_punct(":", &format!("after the name `{name}`"))?;
        let ty = self.scalar_type("")?;
        self.names.bind_scalar(&name, ty);
        Ok(Binding { name, ty })
    }

    pub(super) fn stmt(&mut self, path: &IrPath) -> PResult<Stmt> {
        let start = self.peek().clone();
        let stmt = self.stmt_inner(path)?;
        self.record(path.clone(), &start);
        Ok(stmt)
    }

    /// Compound statements recurse into blocks; everything else is parsed
    /// in [`Self::simple_stmt`], whose large frame then stays off the
    /// recursion (deeply nested blocks would otherwise need a big stack).
    pub(super) fn stmt_inner(&mut self, path: &IrPath) -> PResult<Stmt> {
        match self.word_at(0) {
            Some("if") => self.if_stmt(path),
            Some("for") => self.for_stmt(path),
            Some("while") => self.while_stmt(path),
            _ => self.simple_stmt(),
        }
    }

    pub(super) fn while_stmt(&mut self, path: &IrPath) -> PResult<Stmt> {
        self.bump();
        let cond = self.expr()?;
        self.expect_word(
            "max",
            "after the loop condition (every `while` has a maximum trip count: `while c max 100u { ... }`)",
        )?;
        let max = self.expr()?;
        let body = self.block(&path.child(PathStep::Body), "before the loop body")?;
        Ok(Stmt::While { cond, max, body })
    }

    /// The operator of a compound assignment at token `n`, if there is one.
    pub(super) fn compound_at(&self, n: usize) -> Option<BinaryOp> {
        match &self.peek_nth(n).kind {
            TokenKind::Punct(p) => compound_op(p),
            _ => None,
        }
    }

    pub(super) fn for_stmt(&mut self, path: &IrPath) -> PResult<Stmt> {
        self.bump();
        let var = self.binding("for")?;
        self.expect_word("in", "after the loop variable's type")?;
        let start = self.expr()?;
        self.expect_punct("..", "between the loop bounds")?;
        let end = self.expr()?;
        let body = self.block(&path.child(PathStep::Body), "before the loop body")?;
        Ok(Stmt::For {
            var,
            start,
            end,
            body,
        })
    }

    #[inline(never)]
    pub(super) fn simple_stmt(&mut self) -> PResult<Stmt> {
        const END: &str = "after statement";
        let Some(word) = self.word_at(0).map(str::to_string) else {
            return Err(self.expected("a statement"));
        };
        let calls = self.is_punct_at(1, "(");
        if let Some(op) = atomic_op(&word).filter(|_| calls) {
            let stmt = self.atomic(op, None)?;
            self.expect_semicolon(END)?;
            return Ok(stmt);
        }
        if let Some(op) = sem_op(&word).filter(|_| calls) {
            self.bump();
            self.expect_punct("(", &format!("after `{word}`"))?;
            let (sem, _) = self.access()?;
            self.expect_punct(",", "after the semaphore")?;
            let amount = self.expr()?;
            self.expect_punct(")", &format!("after the amount of `{word}`"))?;
            self.expect_semicolon(END)?;
            return Ok(Stmt::Sem { op, sem, amount });
        }
        match word.as_str() {
            "let" => {
                self.bump();
                let var = self.binding("let")?;
                let type_token = self.tokens[self.pos - 1].clone();
                self.expect_punct("=", &format!("after the type of `{}`", var.name))?;
                let value_word = self.word_at(0).map(str::to_string);
                let value_calls = self.is_punct_at(1, "(");
                let value_atomic = value_word.as_deref().and_then(atomic_op);
                let value_warp = value_word.as_deref().and_then(warp_op);
                let value_block = value_word.as_deref().and_then(BlockOp::from_name);
                let stmt = match (value_atomic, value_word.as_deref()) {
                    (Some(op), _) if value_calls => self.atomic(op, Some(var))?,
                    (_, Some("read")) if value_calls => {
                        if var.ty != ScalarType::I32 {
                            return Err(self.error_at_token(
                                &type_token,
                                format!(
                                    "`read` returns `i32`, but `{}` is declared `{}`",
                                    var.name, var.ty
                                ),
                            ));
                        }
                        self.bump();
                        self.expect_punct("(", "after `read`")?;
                        let (sem, _) = self.access()?;
                        self.expect_punct(")", "after the semaphore of `read`")?;
                        Stmt::SemRead {
                            dest: var.name,
                            sem,
                        }
                    }
                    (_, Some(w)) if value_calls => match (value_warp, value_block) {
                        (_, Some(op)) => {
                            self.bump();
                            let (args, _) = self.args(w)?;
                            Stmt::BlockCollective {
                                dest: var,
                                op,
                                args,
                            }
                        }
                        (Some(op), _) => {
                            self.bump();
                            let (args, _) = self.args(w)?;
                            Stmt::Warp {
                                dest: var,
                                op,
                                args,
                            }
                        }
                        (None, None) if !is_builtin_function(w) => self.helper_call(Some(var))?,
                        (None, None) => Stmt::Let {
                            var,
                            value: self.expr()?,
                        },
                    },
                    _ => Stmt::Let {
                        var,
                        value: self.expr()?,
                    },
                };
                self.expect_semicolon(END)?;
                Ok(stmt)
            }
            "var" => {
                self.bump();
                let var = self.binding("var")?;
                self.expect_punct("=", &format!("after the type of `{}`", var.name))?;
                let init = self.expr()?;
                self.expect_semicolon(END)?;
                Ok(Stmt::Var { var, init })
            }
            "local" => {
                self.bump();
                let (name, _) = self.name("a name after `local`")?;
                self.expect_punct(":", &format!("after the name `{name}`"))?;
                let elem = self.scalar_type("as the element type")?;
                let shape = self.shape()?;
                self.expect_semicolon(END)?;
                self.names.bind_ref(
                    &name,
                    RefType {
                        space: MemorySpace::Local,
                        elem,
                        shape: shape.clone(),
                        owner: None,
                    },
                );
                Ok(Stmt::LocalArray { name, elem, shape })
            }
            "barrier" => {
                self.bump();
                self.expect_semicolon(END)?;
                Ok(Stmt::Barrier)
            }
            "return" => {
                self.bump();
                let value = if self.is_punct(";") {
                    None
                } else {
                    Some(self.expr()?)
                };
                self.expect_semicolon(END)?;
                Ok(Stmt::Return { value })
            }
            "break" | "continue" => {
                self.bump();
                self.expect_semicolon(END)?;
                Ok(if word == "break" {
                    Stmt::Break
                } else {
                    Stmt::Continue
                })
            }
            w if is_keyword(w) => Err(self.expected("a statement")),
            "read" if calls => Err(self.error_at_token(
                &self.peek().clone(),
                "`read` returns a value: write `let v: i32 = read(s[i]);`".to_string(),
            )),
            w if calls && w == mma::NAME => {
                self.bump();
                self.expect_punct("(", &format!("after `{w}`"))?;
                let mut fragments = Vec::with_capacity(4);
                for (i, what) in ["d", "a", "b", "c"].into_iter().enumerate() {
                    if i > 0 {
                        self.expect_punct(",", &format!("between the operands of `{w}`"))?;
                    }
                    fragments.push(self.fragment(w, what, &format!("`{w}(d, a, b, c)`"))?);
                }
                self.expect_punct(")", &format!("after the four operands of `{w}`"))?;
                self.expect_semicolon(END)?;
                match <[Fragment; 4]>::try_from(fragments) {
                    Ok([d, a, b, c]) => Ok(Stmt::Mma { d, a, b, c }),
                    Err(_) => Err(self.expected("four operands")),
                }
            }
            w if calls && mma_load(w).is_some() => {
                let operand = mma_load(w).unwrap_or(mma::Operand::A);
                self.bump();
                self.expect_punct("(", &format!("after `{w}`"))?;
                let role = operand.role();
                let dest = self.fragment(w, role, &format!("`{w}({role}, src[..])`"))?;
                self.expect_punct(",", &format!("after the fragment of `{w}`"))?;
                let (source, _) = self.access()?;
                self.expect_punct(")", &format!("after the source of `{w}`"))?;
                self.expect_semicolon(END)?;
                Ok(Stmt::MmaLoad {
                    operand,
                    dest,
                    source,
                })
            }
            w if calls && warp_op(w).is_some() => Err(self.error_at_token(
                &self.peek().clone(),
                format!("`{w}` returns a value: write `let v: u32 = {w}(...);`"),
            )),
            w if calls && BlockOp::from_name(w).is_some() => Err(self.error_at_token(
                &self.peek().clone(),
                format!("`{w}` returns a value: write `let v: TYPE = {w}(...);`"),
            )),
            w if calls && !is_builtin_function(w) => {
                let stmt = self.helper_call(None)?;
                self.expect_semicolon(END)?;
                Ok(stmt)
            }
            w if calls => Err(self.error_at_token(
                &self.peek().clone(),
                format!(
                    "`{w}` cannot be called as a statement; only atomics (`atomic_add`, ...) and `signal`, `wait`, `wait_nodec` can"
                ),
            )),
            _ if self.is_punct_at(1, "=") => {
                self.bump();
                self.bump();
                let value = self.expr()?;
                self.expect_semicolon(END)?;
                Ok(Stmt::Assign { name: word, value })
            }
            _ if self.compound_at(1).is_some() => {
                let op = self.compound_at(1).unwrap_or(BinaryOp::Add);
                self.bump();
                self.bump();
                let value = self.expr()?;
                self.expect_semicolon(END)?;
                Ok(Stmt::CompoundAssign {
                    name: word,
                    op,
                    value,
                })
            }
            _ if self.is_punct_at(1, "[") || self.is_punct_at(1, "@") => {
                let (target, _) = self.access()?;
                if let Some(op) = self.compound_at(0) {
                    self.bump();
                    let value = self.expr()?;
                    self.expect_semicolon(END)?;
                    return Ok(Stmt::CompoundStore { target, op, value });
                }
                self.expect_punct("=", "after the store target")?;
                let value = self.expr()?;
                self.expect_semicolon(END)?;
                Ok(Stmt::Store { target, value })
            }
            _ => {
                self.bump();
                Err(self.expected(&format!(
                    "`=`, a compound assignment (`+=`, ...), `[` or `@` after `{word}`"
                )))
            }
        }
    }

    /// `helper(args...)`, without the `;`.
    pub(super) fn helper_call(&mut self, dest: Option<Binding>) -> PResult<Stmt> {
        let (function, _) = self.name("a helper function name")?;
        let (args, _) = self.args(&function)?;
        Ok(Stmt::Call {
            dest,
            function,
            args,
        })
    }

    /// `atomic_op(target, args...)`, without the `;`.
    pub(super) fn atomic(&mut self, op: AtomicOp, dest: Option<Binding>) -> PResult<Stmt> {
        self.bump();
        let word = op.name();
        self.expect_punct("(", &format!("after `{word}`"))?;
        let (target, _) = self.access()?;
        let mut args = Vec::new();
        while self.eat_punct(",") {
            args.push(self.expr()?);
        }
        self.expect_punct(")", &format!("after the arguments of `{word}`"))?;
        Ok(Stmt::Atomic {
            dest,
            op,
            target,
            args,
        })
    }

    pub(super) fn if_stmt(&mut self, path: &IrPath) -> PResult<Stmt> {
        self.bump();
        let cond = self.expr()?;
        let then_body = self.block(&path.child(PathStep::Then), "after the condition")?;
        let mut else_body = Vec::new();
        if self.eat_word("else") {
            let else_path = path.child(PathStep::Else);
            if self.is_word("if") {
                // `else if` is sugar for an `else` block holding one `if`.
                // It is one level deeper, like the block it stands for.
                let nested_path = else_path.child(PathStep::Stmt(0));
                else_body.push(self.nested(|p| p.stmt(&nested_path))?);
            } else {
                else_body = self.block(&else_path, "or `if` after `else`")?;
            }
        }
        Ok(Stmt::If {
            cond,
            then_body,
            else_body,
        })
    }
}
