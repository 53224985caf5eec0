//! Expressions.
//!
//! Each expression comes back with its depth in nesting levels
//! (docs/text-format.md, "Nesting"): a leaf is 1, an operator, call, cast,
//! load or pair of parentheses is one more than its deepest operand. A
//! node is refused when its deepest leaf would lie past the limit, so that
//! flat operator chains, which the parser reads in a loop, are bounded
//! like every other shape.

use super::{
    atomic_op, binary_op, math_fn, mma_load, scalar_type, unzip_depths, warp_op, PResult, Parser,
    Sub,
};
use crate::ir::*;
use crate::text::lexer::{is_keyword, Token, TokenKind};
use crate::text::printer::binary_level;
use crate::text::ParseError;

impl Parser<'_> {
    pub(super) fn expr(&mut self) -> PResult<Expr> {
        Ok(self.sub_expr()?.0)
    }

    pub(super) fn sub_expr(&mut self) -> PResult<Sub> {
        self.nested(|p| p.binary(1))
    }

    pub(super) fn too_deep(&self, token: &Token) -> ParseError {
        self.error_at_token(
            token,
            format!(
                "blocks and expressions nest deeper than {} levels here; bind inner parts of the expression to `let`s, or move inner blocks out (docs/text-format.md, \"Nesting\")",
                self.limit
            ),
        )
    }

    pub(super) fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
        if self.depth >= self.limit.min(self.stack_limit) {
            let token = self.peek().clone();
            self.needs_stack = self.depth < self.limit;
            return Err(self.too_deep(&token));
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        result
    }

    /// `expr` as a node `depth` levels deep at the current level, refused
    /// (at `token`) when its deepest leaf would lie past the limit.
    pub(super) fn node(&self, expr: Expr, depth: usize, token: &Token) -> PResult<Sub> {
        // The node itself is at the current level, its leaves `depth - 1` below.
        if self.depth + depth - 1 > self.limit {
            return Err(self.too_deep(token));
        }
        Ok((expr, depth))
    }

    pub(super) fn peek_binary_op(&self) -> Option<BinaryOp> {
        match &self.peek().kind {
            TokenKind::Punct(p) => binary_op(p),
            _ => None,
        }
    }

    /// Precedence climbing over operators of level `min` and tighter.
    pub(super) fn binary(&mut self, min: u8) -> PResult<Sub> {
        let (mut lhs, mut lhs_depth) = self.unary()?;
        let mut after_comparison = false;
        while let Some(op) = self.peek_binary_op() {
            let level = binary_level(op);
            if level < min {
                break;
            }
            let token = self.peek().clone();
            if after_comparison && op.is_comparison() {
                return Err(self.error_at_token(
                    &token,
                    "comparison operators cannot be chained; add parentheses".to_string(),
                ));
            }
            self.bump();
            let (rhs, rhs_depth) = self.binary(level + 1)?;
            after_comparison = op.is_comparison();
            let depth = 1 + lhs_depth.max(rhs_depth);
            (lhs, lhs_depth) = self.node(
                Expr::Binary(op, Box::new(lhs), Box::new(rhs)),
                depth,
                &token,
            )?;
        }
        Ok((lhs, lhs_depth))
    }

    pub(super) fn unary(&mut self) -> PResult<Sub> {
        let op = match &self.peek().kind {
            TokenKind::Punct("-") => UnaryOp::Neg,
            TokenKind::Punct("!") => UnaryOp::Not,
            TokenKind::Punct("~") => UnaryOp::BitNot,
            _ => return self.primary(),
        };
        let token = self.bump();
        let (operand, depth) = self.nested(|p| p.unary())?;
        self.node(Expr::Unary(op, Box::new(operand)), depth + 1, &token)
    }

    /// The arguments of a call and the depth of the deepest.
    pub(super) fn args(&mut self, function: &str) -> PResult<(Vec<Expr>, usize)> {
        let args = self.list("(", ")", &format!("after `{function}`"), |p| p.sub_expr())?;
        Ok(unzip_depths(args))
    }

    /// The type of the value the statement `word` (an atomic, a warp
    /// collective or `read`), written as if it were an expression (the
    /// parser is at the `(` after the word), would bind: `read` counts in `i32`; an atomic gives the
    /// element's type, a warp collective its `result_type` for its first
    /// argument. `None` when the arguments do not parse or type. The parser
    /// is left where it was.
    pub(super) fn result_type_of_statement(&mut self, word: &str) -> Option<ScalarType> {
        if word == "read" {
            return Some(ScalarType::I32);
        }
        // An error path: the copy of the spans is made once per parse.
        let saved = (self.pos, self.depth, self.needs_stack, self.spans.clone());
        let first = self
            .args(word)
            .ok()
            .and_then(|(args, _)| args.into_iter().next());
        (self.pos, self.depth, self.needs_stack, self.spans) = saved;
        let value = type_of(&first?, &self.names).ok()?;
        match (warp_op(word), BlockOp::from_name(word)) {
            (Some(op), _) => op.result_type(value),
            (_, Some(op)) => op.result_type(value),
            _ => Some(value),
        }
    }

    /// `name(arg)` where the single argument is a name (axis functions).
    pub(super) fn axis_arg(&mut self, function: &str) -> PResult<Name> {
        self.expect_punct("(", &format!("after `{function}`"))?;
        let (axis, _) = self.name("an axis name")?;
        self.expect_punct(")", "after the axis name")?;
        Ok(axis)
    }

    pub(super) fn one_arg(&mut self, function: &str) -> PResult<(Box<Expr>, usize)> {
        self.expect_punct("(", &format!("after `{function}`"))?;
        let (e, depth) = self.sub_expr()?;
        self.expect_punct(")", &format!("after the argument of `{function}`"))?;
        Ok((Box::new(e), depth))
    }

    pub(super) fn primary(&mut self) -> PResult<Sub> {
        if let Some(lit) = self.try_literal()? {
            return Ok((Expr::Lit(lit), 1));
        }
        let token = self.peek().clone();
        if self.eat_punct("(") {
            let (e, depth) = self.sub_expr()?;
            self.expect_punct(")", "to close the parenthesis")?;
            return self.node(e, depth + 1, &token);
        }
        self.named_primary()
    }

    /// Casts, function calls, loads and variables.
    #[inline(never)]
    pub(super) fn named_primary(&mut self) -> PResult<Sub> {
        let token = self.peek().clone();
        let Some(word) = self.word_at(0).map(str::to_string) else {
            return Err(self.expected("an expression"));
        };
        if let Some(ty) = scalar_type(&word) {
            self.bump();
            let (operand, depth) = self.one_arg(&word)?;
            return self.node(Expr::Cast(ty, operand), depth + 1, &token);
        }
        if is_keyword(&word) {
            return Err(self.expected("an expression"));
        }
        let is_bitcast = word == "bitcast"
            && self.is_punct_at(1, "<")
            && self.word_at(2).and_then(scalar_type).is_some()
            && self.is_punct_at(3, ">");
        if is_bitcast {
            self.bump();
            self.bump();
            let ty = self.scalar_type("")?;
            self.bump();
            let (operand, depth) = self.one_arg("bitcast")?;
            return self.node(Expr::Bitcast(ty, operand), depth + 1, &token);
        }
        if self.is_punct_at(1, "[") || self.is_punct_at(1, "@") {
            let (access, depth) = self.access()?;
            return self.node(Expr::Load(Box::new(access)), depth + 1, &token);
        }
        if !self.is_punct_at(1, "(") {
            self.bump();
            return Ok((Expr::Var(word), 1));
        }
        self.bump();
        match word.as_str() {
            "axis_index" => Ok((Expr::AxisIndex(self.axis_arg(&word)?), 1)),
            "axis_size" => Ok((Expr::AxisSize(self.axis_arg(&word)?), 1)),
            "lane_id" | "warp_id" => {
                self.expect_punct("(", &format!("after `{word}`"))?;
                self.expect_punct(")", &format!("after `{word}(`: it takes no arguments"))?;
                let position = if word == "lane_id" {
                    WarpPosition::Lane
                } else {
                    WarpPosition::Warp
                };
                Ok((Expr::WarpPosition(position), 1))
            }
            "select" => {
                self.expect_punct("(", "after `select`")?;
                let (cond, d0) = self.sub_expr()?;
                self.expect_punct(",", "after the condition of `select`")?;
                let (if_true, d1) = self.sub_expr()?;
                self.expect_punct(",", "after the second argument of `select`")?;
                let (if_false, d2) = self.sub_expr()?;
                self.expect_punct(")", "after the third argument of `select`")?;
                let select = Expr::Select(Box::new(cond), Box::new(if_true), Box::new(if_false));
                self.node(select, 1 + d0.max(d1).max(d2), &token)
            }
            _ => {
                if let Some(f) = math_fn(&word) {
                    let (args, depth) = self.args(&word)?;
                    return self.node(Expr::Math(f, args), depth + 1, &token);
                }
                let hint = if word == mma::NAME {
                    format!(
                        "`{word}` is a statement that writes its result to a local array: write `{word}(d, a, b, c);`"
                    )
                } else if let Some(operand) = mma_load(&word) {
                    format!(
                        "`{word}` is a statement that writes a fragment to a local array: write `{word}({}, src[.., row, col]);`",
                        operand.role()
                    )
                } else if atomic_op(&word).is_some()
                    || warp_op(&word).is_some()
                    || BlockOp::from_name(&word).is_some()
                    || word == "read"
                {
                    let ty = self
                        .result_type_of_statement(&word)
                        .map_or_else(|| "TYPE".to_string(), |t| t.keyword().to_string());
                    format!(
                        "`{word}` is a statement, not an expression: write `let v: {ty} = {word}(...);` before it, then use `v`"
                    )
                } else {
                    format!(
                        "`{word}` is not a builtin function; a helper function is called as a \
                         statement of its own: `let v: u32 = {word}(...);` (or `{word}(...);`), then use `v`"
                    )
                };
                Err(self.error_at_token(&token, hint))
            }
        }
    }

    /// A fragment operand `what` of `op`: a local array's name, or one row
    /// of one (`fa[i]`).
    pub(super) fn fragment(&mut self, op: &str, what: &str, form: &str) -> PResult<Fragment> {
        let (array, _) = self.name(&format!(
            "the local array `{what}` of {form} (a name, or a row: `{what}[i]`)"
        ))?;
        if !self.is_punct("[") {
            return Ok(Fragment { array, row: None });
        }
        self.bump();
        let row = self.expr()?;
        if self.is_punct(",") {
            return Err(self.error_at_token(
                &self.peek().clone(),
                format!(
                    "a fragment of `{op}` is a local array or one row of a 2-D local array: `{array}` or `{array}[i]`, one index"
                ),
            ));
        }
        self.expect_punct("]", &format!("after the row of `{array}`"))?;
        Ok(Fragment {
            array,
            row: Some(row),
        })
    }

    /// `base[i, ...]` or `base@[c, ...][i, ...]`, and the depth of its
    /// deepest index or coordinate.
    pub(super) fn access(&mut self) -> PResult<(RefAccess, usize)> {
        let (base, _) = self.name("a ref name")?;
        let mut depth = 0;
        let block = if self.eat_punct("@") {
            let (coords, d) = unzip_depths(self.list("[", "]", "after `@`", |p| p.sub_expr())?);
            depth = d;
            Some(coords)
        } else {
            None
        };
        let (index, d) =
            unzip_depths(self.list("[", "]", &format!("after `{base}`"), |p| p.sub_expr())?);
        Ok((RefAccess { base, block, index }, depth.max(d)))
    }
}
