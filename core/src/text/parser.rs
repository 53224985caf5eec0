//! The recursive-descent parser (docs/text-format.md).

use super::lexer::{is_keyword, tokenize, IntToken, Token, TokenKind};
use super::printer::binary_level;
use super::{excerpt, position_of, ParseError, SourceFile, SourceMap, Span};
use crate::backend::ErrorClass;
use crate::case::{CaseSpec, CompareMode, Expectation, Generator};
use crate::ir::limits::{with_nesting_stack, INLINE_NESTING, MAX_NESTING};
use crate::ir::*;
use std::collections::HashMap;

type PResult<T> = Result<T, ParseError>;

pub(crate) fn parse_file(src: &str) -> PResult<SourceFile> {
    parse_file_overriding(src, &HashMap::new())
}

/// [`parse_file`] with the values of the named constants replaced (see
/// `text::parse_file_with`, which checks the names and types): an override
/// whose type differs from the constant's declared type is not applied.
pub(crate) fn parse_file_overriding(
    src: &str,
    overrides: &HashMap<String, Literal>,
) -> PResult<SourceFile> {
    with_enough_stack(src, overrides, |parser| {
        let (module, case) = parser.file()?;
        Ok(SourceFile {
            module,
            case,
            source_map: std::mem::take(&mut parser.spans),
        })
    })
}

/// Parses one expression that makes up the whole of `src`.
pub(crate) fn parse_expr_only(src: &str) -> PResult<Expr> {
    with_enough_stack(src, &HashMap::new(), |parser| {
        let expr = parser.expr()?;
        if !parser.at_eof() {
            return Err(parser.expected("end of expression"));
        }
        Ok(expr)
    })
}

/// Runs `parse` on the caller's stack while the input nests at most
/// [`INLINE_NESTING`] levels, and again from the start on a thread with
/// stack for [`MAX_NESTING`] levels when it nests deeper.
fn with_enough_stack<T: Send>(
    src: &str,
    overrides: &HashMap<String, Literal>,
    parse: impl Fn(&mut Parser) -> PResult<T> + Sync,
) -> PResult<T> {
    let tokens = tokenize(src);
    let mut inline = Parser::new(src, &tokens, INLINE_NESTING, overrides);
    let result = parse(&mut inline);
    if !inline.needs_stack {
        return result;
    }
    with_nesting_stack(|| parse(&mut Parser::new(src, &tokens, MAX_NESTING, overrides)))
}

/// An expression and its depth in nesting levels.
type Sub = (Expr, usize);

/// The expressions of a list and the depth of the deepest (0 for none).
fn unzip_depths(subs: Vec<Sub>) -> (Vec<Expr>, usize) {
    let depth = subs.iter().map(|(_, d)| *d).max().unwrap_or(0);
    (subs.into_iter().map(|(e, _)| e).collect(), depth)
}

struct Parser<'s> {
    src: &'s str,
    tokens: &'s [Token],
    pos: usize,
    spans: SourceMap,
    /// The level the parser is at: blocks, expressions and parentheses
    /// entered and not yet left (see [`MAX_NESTING`]).
    depth: usize,
    /// Nesting beyond this is refused: [`MAX_NESTING`].
    limit: usize,
    /// Recursion beyond this stops the parse, which then runs again on a
    /// thread with enough stack (see [`with_enough_stack`]).
    stack_limit: usize,
    /// Whether the parse stopped at `stack_limit`.
    needs_stack: bool,
    /// The module's `const` values, found before the items are parsed so
    /// that an extent or axis size may name a constant declared later.
    consts: HashMap<String, Literal>,
    /// Values that replace those of the constants of these names.
    overrides: &'s HashMap<String, Literal>,
    /// The types of the names of the kernel or helper being parsed
    /// (parameters and bindings so far; names are unique in a kernel), for
    /// hints only: a warp collective written inside an expression is told
    /// to bind its result with the value's own type.
    names: Scope,
}

impl<'s> Parser<'s> {
    fn new(
        src: &'s str,
        tokens: &'s [Token],
        stack_limit: usize,
        overrides: &'s HashMap<String, Literal>,
    ) -> Self {
        Parser {
            src,
            tokens,
            pos: 0,
            spans: SourceMap::default(),
            depth: 0,
            limit: MAX_NESTING,
            stack_limit,
            needs_stack: false,
            consts: Default::default(),
            overrides,
            names: Scope::new(),
        }
    }
}

fn scalar_type(word: &str) -> Option<ScalarType> {
    ScalarType::ALL.into_iter().find(|t| t.keyword() == word)
}

fn binary_op(punct: &str) -> Option<BinaryOp> {
    use BinaryOp::*;
    Some(match punct {
        "||" => LogicOr,
        "&&" => LogicAnd,
        "==" => Eq,
        "!=" => Ne,
        "<" => Lt,
        "<=" => Le,
        ">" => Gt,
        ">=" => Ge,
        "|" => BitOr,
        "^" => BitXor,
        "&" => BitAnd,
        "<<" => Shl,
        ">>" => Shr,
        "+" => Add,
        "-" => Sub,
        "*" => Mul,
        "/" => Div,
        "%" => Rem,
        _ => return None,
    })
}

/// The operator of a compound assignment token (`+=` is `Add`).
fn compound_op(punct: &str) -> Option<BinaryOp> {
    let op = binary_op(punct.strip_suffix('=')?)?;
    BinaryOp::COMPOUND.contains(&op).then_some(op)
}

/// Whether `word(` is a builtin (math, cast, `select`, atomics, ...) rather
/// than a call of a helper function.
pub(crate) fn is_builtin_function(word: &str) -> bool {
    math_fn(word).is_some()
        || scalar_type(word).is_some()
        || atomic_op(word).is_some()
        || warp_op(word).is_some()
        || BlockOp::from_name(word).is_some()
        || word == mma::NAME
        || mma_load(word).is_some()
        || sem_op(word).is_some()
        || matches!(
            word,
            "select"
                | "axis_index"
                | "axis_size"
                | "lane_id"
                | "warp_id"
                | "bitcast"
                | "read"
                | "f32_bits"
                | "f16_bits"
                | "bf16_bits"
        )
}

fn math_fn(word: &str) -> Option<MathFn> {
    MathFn::ALL.into_iter().find(|f| f.name() == word)
}

fn atomic_op(word: &str) -> Option<AtomicOp> {
    AtomicOp::ALL.into_iter().find(|f| f.name() == word)
}

fn warp_op(word: &str) -> Option<WarpOp> {
    WarpOp::ALL.into_iter().find(|f| f.name() == word)
}

fn mma_load(word: &str) -> Option<mma::Operand> {
    mma::Operand::ALL
        .into_iter()
        .find(|o| o.load_name() == word)
}

fn sem_op(word: &str) -> Option<SemOp> {
    SemOp::ALL.into_iter().find(|f| f.name() == word)
}

impl Parser<'_> {
    // ---- token access -------------------------------------------------

    fn peek(&self) -> &Token {
        &self.tokens[self.pos]
    }

    fn peek_nth(&self, n: usize) -> &Token {
        &self.tokens[(self.pos + n).min(self.tokens.len() - 1)]
    }

    fn bump(&mut self) -> Token {
        let token = self.tokens[self.pos].clone();
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        token
    }

    fn at_eof(&self) -> bool {
        self.peek().kind == TokenKind::Eof
    }

    fn is_punct_at(&self, n: usize, p: &str) -> bool {
        matches!(&self.peek_nth(n).kind, TokenKind::Punct(q) if *q == p)
    }

    fn is_punct(&self, p: &str) -> bool {
        self.is_punct_at(0, p)
    }

    fn word_at(&self, n: usize) -> Option<&str> {
        match &self.peek_nth(n).kind {
            TokenKind::Word(w) => Some(w),
            _ => None,
        }
    }

    fn is_word(&self, w: &str) -> bool {
        self.word_at(0) == Some(w)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        let found = self.is_punct(p);
        if found {
            self.bump();
        }
        found
    }

    fn eat_word(&mut self, w: &str) -> bool {
        let found = self.is_word(w);
        if found {
            self.bump();
        }
        found
    }

    // ---- errors ---------------------------------------------------------

    /// An error at (line, column), unless the current token is malformed, in
    /// which case that is the real error.
    fn error_at(&self, line: u32, column: u32, message: String) -> ParseError {
        let (line, column, message) = match &self.peek().kind {
            TokenKind::Error(lex) => (self.peek().line, self.peek().column, lex.clone()),
            _ => (line, column, message),
        };
        ParseError {
            line,
            column,
            excerpt: excerpt(self.src, line, column),
            message,
        }
    }

    fn error_at_token(&self, token: &Token, message: String) -> ParseError {
        self.error_at(token.line, token.column, message)
    }

    /// How the current token is named in messages.
    fn found(&self) -> String {
        let token = self.peek();
        match &token.kind {
            TokenKind::Eof => "end of file".to_string(),
            TokenKind::Word(w) if is_keyword(w) => format!("keyword `{w}`"),
            _ => format!("`{}`", &self.src[token.start..token.end]),
        }
    }

    /// "expected {what}, found {current token}", at the current token.
    fn expected(&self, what: &str) -> ParseError {
        let token = self.peek();
        self.error_at(
            token.line,
            token.column,
            format!("expected {what}, found {}", self.found()),
        )
    }

    fn expect_punct(&mut self, p: &str, context: &str) -> PResult<Token> {
        if self.is_punct(p) {
            return Ok(self.bump());
        }
        Err(self.expected(&format!("`{p}` {context}")))
    }

    /// Like [`Self::expect_punct`] for a `;`, but a missing `;` is reported
    /// just after the previous token, where it belongs (as rustc does).
    fn expect_semicolon(&mut self, context: &str) -> PResult<()> {
        if self.eat_punct(";") {
            return Ok(());
        }
        let (line, column) = match self.pos.checked_sub(1) {
            Some(prev) => position_of(self.src, self.tokens[prev].end),
            None => (self.peek().line, self.peek().column),
        };
        Err(self.error_at(
            line,
            column,
            format!("expected `;` {context}, found {}", self.found()),
        ))
    }

    fn expect_word(&mut self, w: &str, context: &str) -> PResult<Token> {
        if self.is_word(w) {
            return Ok(self.bump());
        }
        Err(self.expected(&format!("`{w}` {context}")))
    }

    /// A name (an identifier that is not a keyword); `what` says which.
    fn name(&mut self, what: &str) -> PResult<(Name, Token)> {
        match &self.peek().kind {
            TokenKind::Word(w) if !is_keyword(w) => {
                let name = w.clone();
                Ok((name, self.bump()))
            }
            _ => Err(self.expected(what)),
        }
    }

    /// Any word, keywords included (`inf` and `nan` too, which lex as numbers).
    fn any_word(&mut self, what: &str) -> PResult<String> {
        let token = self.peek();
        let text = &self.src[token.start..token.end];
        let is_word = match &token.kind {
            TokenKind::Word(_) => true,
            TokenKind::Float(_) => text == "inf" || text == "nan",
            _ => false,
        };
        if !is_word {
            return Err(self.expected(what));
        }
        let word = text.to_string();
        self.bump();
        Ok(word)
    }

    fn span_from(&self, start: &Token) -> Span {
        let end = match self.pos.checked_sub(1) {
            Some(prev) => self.tokens[prev].end.max(start.end),
            None => start.end,
        };
        Span {
            start: start.start,
            end,
            line: start.line,
            column: start.column,
        }
    }

    fn record(&mut self, path: IrPath, start: &Token) {
        let span = self.span_from(start);
        self.spans.spans.insert(path, span);
    }

    /// `open item, item, ... close`, with an optional trailing comma.
    fn list<T>(
        &mut self,
        open: &str,
        close: &str,
        context: &str,
        mut item: impl FnMut(&mut Self) -> PResult<T>,
    ) -> PResult<Vec<T>> {
        self.expect_punct(open, context)?;
        let mut items = Vec::new();
        if self.eat_punct(close) {
            return Ok(items);
        }
        loop {
            items.push(item(self)?);
            if self.eat_punct(",") {
                if self.eat_punct(close) {
                    return Ok(items);
                }
                continue;
            }
            if self.eat_punct(close) {
                return Ok(items);
            }
            return Err(self.expected(&format!("`,` or `{close}`")));
        }
    }

    // ---- literals and numbers -----------------------------------------

    /// A non-negative count (shape extents, axis sizes, `ulp(n)`, dims).
    fn count(&mut self, what: &str) -> PResult<u32> {
        let token = self.peek().clone();
        if let TokenKind::Int(IntToken {
            magnitude,
            negative: false,
            ..
        }) = &token.kind
        {
            let text = &self.src[token.start..token.end];
            return match magnitude.and_then(|m| u32::try_from(m).ok()) {
                Some(v) => {
                    self.bump();
                    Ok(v)
                }
                None => Err(self
                    .error_at_token(&token, format!("{what} `{text}` is out of range for `u32`"))),
            };
        }
        Err(self.expected(what))
    }

    fn int_literal(&self, token: &Token, int: &IntToken) -> PResult<Literal> {
        let text = &self.src[token.start..token.end];
        let out_of_range = |ty: &str| {
            self.error_at_token(
                token,
                format!("integer literal `{text}` is out of range for `{ty}`"),
            )
        };
        if int.unsigned {
            if int.negative {
                return Err(self
                    .error_at_token(token, format!("`u32` literal `{text}` cannot be negative")));
            }
            let v = int.magnitude.and_then(|m| u32::try_from(m).ok());
            return v.map(Literal::U32).ok_or_else(|| out_of_range("u32"));
        }
        let value = int.magnitude.and_then(|m| {
            let m = i64::try_from(m).ok()?;
            i32::try_from(if int.negative { -m } else { m }).ok()
        });
        value.map(Literal::I32).ok_or_else(|| out_of_range("i32"))
    }

    /// A literal if the current token starts one: numbers, `true`, `false`,
    /// `inf`, `nan`, `f32_bits(0x...)`.
    fn try_literal(&mut self) -> PResult<Option<Literal>> {
        let token = self.peek().clone();
        let lit = match &token.kind {
            TokenKind::Int(int) => self.int_literal(&token, int)?,
            TokenKind::Float(bits) => Literal::F32(F32Bits(*bits)),
            TokenKind::Float16(ty, bits) => Literal::from_bits(*ty, u32::from(*bits)),
            TokenKind::Word(w) if w == "true" => Literal::Bool(true),
            TokenKind::Word(w) if w == "false" => Literal::Bool(false),
            TokenKind::Word(w) if w == "f32_bits" && self.is_punct_at(1, "(") => {
                self.bump();
                self.bump();
                let bits = self.count("bit pattern of `f32_bits`")?;
                self.expect_punct(")", "after the bit pattern of `f32_bits`")?;
                return Ok(Some(Literal::F32(F32Bits(bits))));
            }
            TokenKind::Word(w)
                if (w == "f16_bits" || w == "bf16_bits") && self.is_punct_at(1, "(") =>
            {
                let ty = if w == "f16_bits" {
                    ScalarType::F16
                } else {
                    ScalarType::BF16
                };
                let what = format!("16-bit pattern of `{w}`");
                self.bump();
                self.bump();
                let at = self.peek().clone();
                let bits = self.count(&what)?;
                let Ok(bits) = u16::try_from(bits) else {
                    return Err(self.error_at_token(
                        &at,
                        format!("the bit pattern `{bits:#x}` of `{w}` does not fit in 16 bits"),
                    ));
                };
                self.expect_punct(")", &format!("after the bit pattern of `{w}`"))?;
                return Ok(Some(Literal::from_bits(ty, u32::from(bits))));
            }
            _ => return Ok(None),
        };
        self.bump();
        Ok(Some(lit))
    }

    fn literal(&mut self) -> PResult<Literal> {
        match self.try_literal()? {
            Some(lit) => Ok(lit),
            None => Err(self.expected("a literal")),
        }
    }

    // ---- types ----------------------------------------------------------

    fn scalar_type(&mut self, context: &str) -> PResult<ScalarType> {
        if let Some(ty) = self.word_at(0).and_then(scalar_type) {
            self.bump();
            return Ok(ty);
        }
        Err(self.expected(&format!(
            "a scalar type (`f32`, `i32`, `u32`, `bool`, `f16`, `bf16`) {context}"
        )))
    }

    fn shape(&mut self) -> PResult<Vec<u32>> {
        self.list("[", "]", "before the shape", |p| {
            p.count_or_const("an extent")
        })
    }

    /// A count, or the name of an integer `const` holding one (resolved
    /// here: types hold numbers, so the printer writes the value).
    fn count_or_const(&mut self, what: &str) -> PResult<u32> {
        let Some(word) = self.word_at(0).map(str::to_string) else {
            return self.count(what);
        };
        let token = self.peek().clone();
        let value = match self.consts.get(&word) {
            Some(Literal::U32(v)) => Some(*v),
            Some(Literal::I32(v)) => u32::try_from(*v).ok(),
            Some(other) => {
                return Err(self.error_at_token(
                    &token,
                    format!(
                        "{what} must be an integer, but the constant `{word}` is `{}`",
                        other.ty()
                    ),
                ))
            }
            None => {
                return Err(self.error_at_token(
                    &token,
                    format!("{what} is a number or the name of a `const`; `{word}` is neither"),
                ))
            }
        };
        let Some(value) = value else {
            return Err(self.error_at_token(
                &token,
                format!("{what} must not be negative, but the constant `{word}` is"),
            ));
        };
        self.bump();
        Ok(value)
    }

    fn space(&self) -> Option<MemorySpace> {
        match self.word_at(0)? {
            "gmem" => Some(MemorySpace::Gmem),
            "smem" => Some(MemorySpace::Smem),
            "sem" => Some(MemorySpace::Sem),
            "local" => Some(MemorySpace::Local),
            _ => None,
        }
    }

    fn ref_type(&mut self, space: MemorySpace) -> PResult<RefType> {
        let keyword = self.bump();
        let keyword = &self.src[keyword.start..keyword.end];
        self.expect_punct("<", &format!("after `{keyword}`"))?;
        let elem = if space == MemorySpace::Sem && self.is_punct("[") {
            ScalarType::I32
        } else {
            self.scalar_type("as the element type")?
        };
        let shape = self.shape()?;
        self.expect_punct(">", "after the shape")?;
        let owner = if self.eat_punct("@") {
            Some(self.name("an owner mesh name after `@`")?.0)
        } else {
            None
        };
        Ok(RefType {
            space,
            elem,
            shape,
            owner,
        })
    }

    fn ty(&mut self) -> PResult<Type> {
        if let Some(space) = self.space() {
            return Ok(Type::Ref(self.ref_type(space)?));
        }
        if let Some(ty) = self.word_at(0).and_then(scalar_type) {
            self.bump();
            return Ok(Type::Scalar(ty));
        }
        Err(self.expected("a type"))
    }

    // ---- expressions ----------------------------------------------------
    //
    // Each expression comes back with its depth in nesting levels
    // (docs/text-format.md, "Nesting"): a leaf is 1, an operator, call, cast,
    // load or pair of parentheses is one more than its deepest operand. A
    // node is refused when its deepest leaf would lie past the limit, so that
    // flat operator chains, which the parser reads in a loop, are bounded
    // like every other shape.

    fn expr(&mut self) -> PResult<Expr> {
        Ok(self.sub_expr()?.0)
    }

    fn sub_expr(&mut self) -> PResult<Sub> {
        self.nested(|p| p.binary(1))
    }

    fn too_deep(&self, token: &Token) -> ParseError {
        self.error_at_token(
            token,
            format!(
                "blocks and expressions nest deeper than {} levels here; bind inner parts of the expression to `let`s, or move inner blocks out (docs/text-format.md, \"Nesting\")",
                self.limit
            ),
        )
    }

    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
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
    fn node(&self, expr: Expr, depth: usize, token: &Token) -> PResult<Sub> {
        // The node itself is at the current level, its leaves `depth - 1` below.
        if self.depth + depth - 1 > self.limit {
            return Err(self.too_deep(token));
        }
        Ok((expr, depth))
    }

    fn peek_binary_op(&self) -> Option<BinaryOp> {
        match &self.peek().kind {
            TokenKind::Punct(p) => binary_op(p),
            _ => None,
        }
    }

    /// Precedence climbing over operators of level `min` and tighter.
    fn binary(&mut self, min: u8) -> PResult<Sub> {
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

    fn unary(&mut self) -> PResult<Sub> {
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
    fn args(&mut self, function: &str) -> PResult<(Vec<Expr>, usize)> {
        let args = self.list("(", ")", &format!("after `{function}`"), |p| p.sub_expr())?;
        Ok(unzip_depths(args))
    }

    /// The type of the value the statement `word` (an atomic, a warp
    /// collective or `read`), written as if it were an expression (the
    /// parser is at the `(` after the word), would bind: `read` counts in `i32`; an atomic gives the
    /// element's type, a warp collective its `result_type` for its first
    /// argument. `None` when the arguments do not parse or type. The parser
    /// is left where it was.
    fn result_type_of_statement(&mut self, word: &str) -> Option<ScalarType> {
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
    fn axis_arg(&mut self, function: &str) -> PResult<Name> {
        self.expect_punct("(", &format!("after `{function}`"))?;
        let (axis, _) = self.name("an axis name")?;
        self.expect_punct(")", "after the axis name")?;
        Ok(axis)
    }

    fn one_arg(&mut self, function: &str) -> PResult<(Box<Expr>, usize)> {
        self.expect_punct("(", &format!("after `{function}`"))?;
        let (e, depth) = self.sub_expr()?;
        self.expect_punct(")", &format!("after the argument of `{function}`"))?;
        Ok((Box::new(e), depth))
    }

    fn primary(&mut self) -> PResult<Sub> {
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
    fn named_primary(&mut self) -> PResult<Sub> {
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
    fn fragment(&mut self, op: &str, what: &str, form: &str) -> PResult<Fragment> {
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
    fn access(&mut self) -> PResult<(RefAccess, usize)> {
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

    // ---- statements -----------------------------------------------------

    fn block(&mut self, path: &IrPath, context: &str) -> PResult<Vec<Stmt>> {
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

    fn binding(&mut self, keyword: &str) -> PResult<Binding> {
        let (name, _) = self.name(&format!("a name after `{keyword}`"))?;
        self.expect_punct(":", &format!("after the name `{name}`"))?;
        let ty = self.scalar_type("")?;
        self.names.bind_scalar(&name, ty);
        Ok(Binding { name, ty })
    }

    fn stmt(&mut self, path: &IrPath) -> PResult<Stmt> {
        let start = self.peek().clone();
        let stmt = self.stmt_inner(path)?;
        self.record(path.clone(), &start);
        Ok(stmt)
    }

    /// Compound statements recurse into blocks; everything else is parsed
    /// in [`Self::simple_stmt`], whose large frame then stays off the
    /// recursion (deeply nested blocks would otherwise need a big stack).
    fn stmt_inner(&mut self, path: &IrPath) -> PResult<Stmt> {
        match self.word_at(0) {
            Some("if") => self.if_stmt(path),
            Some("for") => self.for_stmt(path),
            Some("while") => self.while_stmt(path),
            _ => self.simple_stmt(),
        }
    }

    fn while_stmt(&mut self, path: &IrPath) -> PResult<Stmt> {
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
    fn compound_at(&self, n: usize) -> Option<BinaryOp> {
        match &self.peek_nth(n).kind {
            TokenKind::Punct(p) => compound_op(p),
            _ => None,
        }
    }

    fn for_stmt(&mut self, path: &IrPath) -> PResult<Stmt> {
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
    fn simple_stmt(&mut self) -> PResult<Stmt> {
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
    fn helper_call(&mut self, dest: Option<Binding>) -> PResult<Stmt> {
        let (function, _) = self.name("a helper function name")?;
        let (args, _) = self.args(&function)?;
        Ok(Stmt::Call {
            dest,
            function,
            args,
        })
    }

    /// `atomic_op(target, args...)`, without the `;`.
    fn atomic(&mut self, op: AtomicOp, dest: Option<Binding>) -> PResult<Stmt> {
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

    fn if_stmt(&mut self, path: &IrPath) -> PResult<Stmt> {
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

    // ---- items ----------------------------------------------------------

    /// Collects the `const` items' values before anything else is parsed,
    /// so that a type may name a constant declared further down. A
    /// malformed `const` is skipped here and reported by the main pass.
    fn prescan_consts(&mut self) {
        let mut depth = 0usize;
        for index in 0..self.tokens.len() {
            match &self.tokens[index].kind {
                TokenKind::Punct("{") => depth += 1,
                TokenKind::Punct("}") => depth = depth.saturating_sub(1),
                TokenKind::Word(word) if depth == 0 && word == "const" => {
                    let resume = self.pos;
                    self.pos = index;
                    if let Ok(c) = self.const_item() {
                        self.consts.entry(c.name).or_insert(c.value);
                    }
                    self.pos = resume;
                }
                _ => {}
            }
        }
    }

    /// `const NAME: TYPE = LITERAL;` An integer literal takes the declared
    /// integer type when it holds the value (`const N: u32 = 16;`).
    fn const_item(&mut self) -> PResult<Const> {
        self.bump();
        let (name, _) = self.name("a constant name after `const`")?;
        self.expect_punct(":", &format!("after the constant name `{name}`"))?;
        let ty = self.scalar_type("for the constant")?;
        self.expect_punct("=", &format!("after the type of `{name}`"))?;
        let token = self.peek().clone();
        let literal = self.literal()?;
        let value = match (literal, ty) {
            (lit, ty) if lit.ty() == ty => Some(lit),
            (Literal::I32(v), ScalarType::U32) => u32::try_from(v).ok().map(Literal::U32),
            (Literal::U32(v), ScalarType::I32) => i32::try_from(v).ok().map(Literal::I32),
            _ => None,
        };
        let Some(value) = value else {
            return Err(self.error_at_token(
                &token,
                format!(
                    "the constant `{name}` is declared `{ty}` but its value is a `{}` literal",
                    literal.ty()
                ),
            ));
        };
        self.expect_semicolon("after the constant")?;
        // An override of another type is left out here and reported by
        // `text::parse_file_with`.
        let value = match self.overrides.get(&name) {
            Some(given) if given.ty() == value.ty() => *given,
            _ => value,
        };
        Ok(Const { name, value })
    }

    /// The items of a file: the module, and its case section if it has one.
    fn file(&mut self) -> PResult<(Module, Option<CaseSpec>)> {
        let mut module = Module::default();
        let mut case = None;
        self.prescan_consts();
        loop {
            let start = self.peek().clone();
            match self.word_at(0) {
                None if self.at_eof() => return Ok((module, case)),
                Some("const") => {
                    let constant = self.const_item()?;
                    self.record(IrPath(vec![PathStep::Const(constant.name.clone())]), &start);
                    module.consts.push(constant);
                }
                Some("mesh") => {
                    let mesh = self.mesh()?;
                    self.record(IrPath(vec![PathStep::Mesh(mesh.name.clone())]), &start);
                    module.meshes.push(mesh);
                }
                Some("resident") => {
                    let resident = self.resident()?;
                    self.record(
                        IrPath(vec![PathStep::Resident(resident.name.clone())]),
                        &start,
                    );
                    module.residents.push(resident);
                }
                Some("fn") => {
                    let function = self.function()?;
                    self.record(
                        IrPath(vec![PathStep::Function(function.name.clone())]),
                        &start,
                    );
                    module.functions.push(function);
                }
                Some("kernel") => {
                    let kernel = self.kernel()?;
                    self.record(IrPath(vec![PathStep::Kernel(kernel.name.clone())]), &start);
                    module.kernels.push(kernel);
                }
                Some("map") => {
                    let map = self.map()?;
                    self.record(IrPath(vec![PathStep::Map(map.name.clone())]), &start);
                    module.maps.push(map);
                }
                Some("call") => {
                    let call = self.call()?;
                    self.record(IrPath(vec![PathStep::Call(module.calls.len())]), &start);
                    module.calls.push(call);
                }
                Some("case") => {
                    if case.is_some() {
                        return Err(self.error_at_token(
                            &start,
                            "a file has at most one `case` section".to_string(),
                        ));
                    }
                    case = Some(self.case()?);
                    self.record(IrPath(vec![PathStep::Case]), &start);
                }
                _ => {
                    return Err(self.expected(
                        "an item (`const`, `mesh`, `resident`, `fn`, `kernel`, `map`, `call` or `case`)",
                    ))
                }
            }
        }
    }

    fn axis(&mut self) -> PResult<Axis> {
        let (name, _) = self.name("an axis name")?;
        self.expect_punct("=", &format!("after the axis name `{name}`"))?;
        let size = self.count_or_const("an axis size")?;
        Ok(Axis { name, size })
    }

    fn mesh(&mut self) -> PResult<Mesh> {
        self.bump();
        let (name, _) = self.name("a mesh name after `mesh`")?;
        self.expect_punct("{", "after the mesh name")?;
        let (mut grid, mut cluster, mut threads) = (None, None, None);
        loop {
            let token = self.peek().clone();
            let word = self.word_at(0).map(str::to_string);
            match word.as_deref() {
                Some(w @ ("grid" | "cluster")) => {
                    self.bump();
                    let axes = self.list("[", "]", &format!("after `{w}`"), |p| p.axis())?;
                    self.expect_semicolon(&format!("after the `{w}` axes"))?;
                    let slot = if w == "grid" { &mut grid } else { &mut cluster };
                    if slot.replace(axes).is_some() {
                        return Err(self.error_at_token(
                            &token,
                            format!("duplicate `{w}` line in mesh `{name}`"),
                        ));
                    }
                }
                Some("threads") => {
                    self.bump();
                    let axis = self.axis()?;
                    self.expect_semicolon("after the thread axis")?;
                    if threads.replace(axis).is_some() {
                        return Err(self.error_at_token(
                            &token,
                            format!("duplicate `threads` line in mesh `{name}`"),
                        ));
                    }
                }
                _ if self.is_punct("}") => {
                    let Some(threads) = threads else {
                        return Err(self.expected(&format!("a `threads` line in mesh `{name}`")));
                    };
                    self.bump();
                    return Ok(Mesh {
                        name,
                        grid: grid.unwrap_or_default(),
                        cluster: cluster.unwrap_or_default(),
                        threads,
                    });
                }
                _ => return Err(self.expected("`grid`, `cluster`, `threads` or `}` in a mesh")),
            }
        }
    }

    fn resident(&mut self) -> PResult<Resident> {
        self.bump();
        let (name, _) = self.name("a name after `resident`")?;
        self.expect_punct(":", &format!("after the name `{name}`"))?;
        let Some(space) = self.space() else {
            return Err(self.expected("a ref type (`gmem`, `smem`, `sem` or `local`)"));
        };
        let ty = self.ref_type(space)?;
        let zeroed = self.eat_word("zeroed");
        self.expect_semicolon("after the resident")?;
        Ok(Resident { name, ty, zeroed })
    }

    fn params(&mut self, path: &IrPath, after: &str) -> PResult<Vec<Param>> {
        self.list("(", ")", after, |p| {
            let (param, start) = p.name("a parameter name")?;
            p.expect_punct(":", &format!("after the parameter name `{param}`"))?;
            let ty = p.ty()?;
            p.record(path.child(PathStep::Param(param.clone())), &start);
            match &ty {
                Type::Scalar(t) => p.names.bind_scalar(&param, *t),
                Type::Ref(r) => p.names.bind_ref(&param, r.clone()),
            }
            Ok(Param { name: param, ty })
        })
    }

    fn kernel(&mut self) -> PResult<Kernel> {
        self.bump();
        let (name, _) = self.name("a kernel name after `kernel`")?;
        let kernel_path = IrPath(vec![PathStep::Kernel(name.clone())]);
        self.names = Scope::new();
        let params = self.params(&kernel_path, "after the kernel name")?;
        let body = self.block(&kernel_path, "before the kernel body")?;
        Ok(Kernel { name, params, body })
    }

    /// `fn name(params) [-> type] { body }`
    fn function(&mut self) -> PResult<Function> {
        self.bump();
        let (name, _) = self.name("a function name after `fn`")?;
        let path = IrPath(vec![PathStep::Function(name.clone())]);
        self.names = Scope::new();
        let params = self.params(&path, "after the function name")?;
        let result = if self.eat_punct("->") {
            Some(self.scalar_type("as the result type")?)
        } else {
            None
        };
        let body = self.block(&path, "before the function body")?;
        Ok(Function {
            name,
            params,
            result,
            body,
        })
    }

    fn operand(&mut self, map_path: &IrPath) -> PResult<Operand> {
        let (name, start) = self.name("an operand name")?;
        self.expect_punct(":", &format!("after the operand name `{name}`"))?;
        let ty = self.ty()?;
        let mut operand = Operand {
            name,
            ty,
            zeroed: false,
            resident: false,
        };
        loop {
            if self.eat_word("zeroed") {
                operand.zeroed = true;
            } else if self.eat_word("resident") {
                operand.resident = true;
            } else {
                break;
            }
        }
        self.record(
            map_path.child(PathStep::Operand(operand.name.clone())),
            &start,
        );
        Ok(operand)
    }

    fn map(&mut self) -> PResult<MpmdMap> {
        self.bump();
        let (name, _) = self.name("a map name after `map`")?;
        let path = IrPath(vec![PathStep::Map(name.clone())]);
        self.expect_punct("{", "after the map name")?;
        let mut map = MpmdMap {
            name,
            programs: vec![],
            inputs: vec![],
            outputs: vec![],
            scalars: vec![],
            scratch: vec![],
            aliases: vec![],
            fast_math: false,
            debug: false,
        };
        let mut seen: Vec<String> = Vec::new();
        while !self.eat_punct("}") {
            let token = self.peek().clone();
            let Some(word) = self.word_at(0).map(str::to_string) else {
                return Err(self.expected("a map line (`programs`, `inputs`, ...) or `}`"));
            };
            if seen.contains(&word) {
                return Err(self.error_at_token(
                    &token,
                    format!("duplicate `{word}` line in map `{}`", map.name),
                ));
            }
            match word.as_str() {
                "programs" => {
                    self.bump();
                    let mut index = 0;
                    map.programs = self.list("[", "]", "after `programs`", |p| {
                        let (mesh, start) = p.name("a mesh name")?;
                        p.expect_punct(":", &format!("after the mesh name `{mesh}`"))?;
                        let (kernel, _) = p.name("a kernel name")?;
                        index += 1;
                        p.record(path.child(PathStep::Program(index - 1)), &start);
                        Ok(Program { mesh, kernel })
                    })?;
                }
                "inputs" | "outputs" | "scalars" | "scratch" => {
                    self.bump();
                    let list = self.list("[", "]", &format!("after `{word}`"), |p| {
                        p.operand(&path)
                    })?;
                    match word.as_str() {
                        "inputs" => map.inputs = list,
                        "outputs" => map.outputs = list,
                        "scalars" => map.scalars = list,
                        _ => map.scratch = list,
                    }
                }
                "aliases" => {
                    self.bump();
                    map.aliases = self.list("[", "]", "after `aliases`", |p| {
                        let (input, _) = p.name("an input name")?;
                        p.expect_punct("->", &format!("after the input `{input}`"))?;
                        let (output, _) = p.name("an output name")?;
                        Ok(Alias { input, output })
                    })?;
                }
                "fast_math" => {
                    self.bump();
                    map.fast_math = true;
                }
                "debug" => {
                    self.bump();
                    map.debug = true;
                }
                _ => {
                    return Err(self.expected(
                        "`programs`, `inputs`, `outputs`, `scalars`, `scratch`, `aliases`, `fast_math`, `debug` or `}` in a map",
                    ))
                }
            }
            self.expect_semicolon(&format!("after the `{word}` line"))?;
            seen.push(word);
        }
        Ok(map)
    }

    fn call(&mut self) -> PResult<Call> {
        self.bump();
        let (map, _) = self.name("a map name after `call`")?;
        let scalars = self.list("(", ")", "after the map name", |p| {
            let (name, _) = p.name("a scalar name")?;
            p.expect_punct("=", &format!("after the scalar name `{name}`"))?;
            Ok((name, p.literal()?))
        })?;
        self.expect_semicolon("after the call")?;
        Ok(Call { map, scalars })
    }

    fn generator(&mut self) -> PResult<Generator> {
        let token = self.peek().clone();
        let word = self.word_at(0).map(str::to_string);
        let range = |p: &mut Self, f: &str| -> PResult<(Literal, Literal)> {
            p.expect_punct("(", &format!("after `{f}`"))?;
            let lo = p.literal()?;
            p.expect_punct(",", "after the lower bound")?;
            let hi = p.literal()?;
            p.expect_punct(")", "after the upper bound")?;
            Ok((lo, hi))
        };
        let generator = match word.as_deref() {
            Some("uniform") => {
                self.bump();
                let (lo, hi) = range(self, "uniform")?;
                Generator::Uniform { lo, hi }
            }
            Some("nonzero") => {
                self.bump();
                let (lo, hi) = range(self, "nonzero")?;
                Generator::NonZero { lo, hi }
            }
            Some("special") => {
                self.bump();
                Generator::Special
            }
            Some("iota") => {
                self.bump();
                Generator::Iota
            }
            Some("constant") => {
                self.bump();
                self.expect_punct("(", "after `constant`")?;
                let value = self.literal()?;
                self.expect_punct(")", "after the constant")?;
                Generator::Constant(value)
            }
            Some("index_into") => {
                self.bump();
                self.expect_punct("(", "after `index_into`")?;
                let (operand, _) = self.name("an operand name")?;
                self.expect_punct(",", "after the operand name")?;
                let dim = self.count("a dimension")?;
                self.expect_punct(")", "after the dimension")?;
                Generator::IndexInto { operand, dim }
            }
            _ => {
                return Err(self.error_at_token(
                    &token,
                    format!(
                        "expected a generator (`uniform`, `nonzero`, `special`, `constant`, `iota` or `index_into`), found {}",
                        self.found()
                    ),
                ))
            }
        };
        Ok(generator)
    }

    fn compare_mode(&mut self) -> PResult<CompareMode> {
        let mode = match self.word_at(0) {
            Some("exact") => CompareMode::Exact,
            Some("profile") => CompareMode::Profile,
            Some("multiset") => CompareMode::Multiset,
            Some("ignore") => CompareMode::Ignore,
            Some("mma") => CompareMode::Mma,
            Some("ulp") => {
                self.bump();
                self.expect_punct("(", "after `ulp`")?;
                let n = self.count("a number of ULPs")?;
                self.expect_punct(")", "after the number of ULPs")?;
                return Ok(CompareMode::Ulp(n));
            }
            _ => return Err(self.expected(
                "a comparison mode (`exact`, `ulp(n)`, `profile`, `multiset`, `ignore` or `mma`)",
            )),
        };
        self.bump();
        Ok(mode)
    }

    fn expectation(&mut self) -> PResult<Expectation> {
        match self.word_at(0) {
            Some("ok") => {
                self.bump();
                Ok(Expectation::Ok)
            }
            Some("fails") => {
                self.bump();
                self.expect_punct("(", "after `fails`")?;
                let class = ErrorClass::ALL
                    .into_iter()
                    .find(|c| self.word_at(0) == Some(c.keyword()));
                let Some(class) = class else {
                    let all: Vec<String> = ErrorClass::ALL
                        .iter()
                        .map(|c| format!("`{}`", c.keyword()))
                        .collect();
                    return Err(self.expected(&format!("an error class ({})", all.join(", "))));
                };
                self.bump();
                self.expect_punct(")", "after the error class")?;
                Ok(Expectation::Fails(class))
            }
            Some("reject") => {
                self.bump();
                self.expect_punct("(", "after `reject`")?;
                let code = self.any_word("an error code (`E0001`, ...)")?;
                self.expect_punct(")", "after the error code")?;
                Ok(Expectation::Reject(code))
            }
            _ => Err(self.expected("an expectation (`ok`, `fails(class)` or `reject(code)`)")),
        }
    }

    fn case(&mut self) -> PResult<CaseSpec> {
        self.bump();
        self.expect_punct("{", "after `case`")?;
        let mut case = CaseSpec::default();
        let (mut expect_seen, mut tags_seen) = (false, false);
        while !self.eat_punct("}") {
            let token = self.peek().clone();
            let word = self.word_at(0).map(str::to_string);
            match word.as_deref() {
                Some(w @ ("generate" | "compare")) => {
                    self.bump();
                    let (name, _) = self.name(&format!("an operand name after `{w}`"))?;
                    self.expect_punct("=", &format!("after the operand name `{name}`"))?;
                    if w == "generate" {
                        let generator = self.generator()?;
                        case.generators.push((name, generator));
                    } else {
                        let mode = self.compare_mode()?;
                        case.compares.push((name, mode));
                    }
                    self.expect_semicolon(&format!("after the `{w}` line"))?;
                }
                Some(w @ ("expect" | "tags")) => {
                    let seen = if w == "expect" {
                        &mut expect_seen
                    } else {
                        &mut tags_seen
                    };
                    if std::mem::replace(seen, true) {
                        return Err(self
                            .error_at_token(&token, format!("duplicate `{w}` line in the case")));
                    }
                    self.bump();
                    if w == "expect" {
                        case.expect = self.expectation()?;
                    } else {
                        // Tags are free-form words; keywords are fine.
                        case.tags = self.list("[", "]", "after `tags`", |p| p.any_word("a tag"))?;
                    }
                    self.expect_semicolon(&format!("after the `{w}` line"))?;
                }
                _ => {
                    return Err(
                        self.expected("`generate`, `compare`, `expect`, `tags` or `}` in the case")
                    )
                }
            }
        }
        Ok(case)
    }
}

#[cfg(test)]
mod tests {
    /// A kernel on `x: gmem<f32[32]>` whose body stores `value` to `y`.
    fn hint_for(value: &str) -> String {
        let src = format!(
            "mesh m {{ grid [b = 1]; threads t = 32; }}\n\
             kernel k(x: gmem<f32[32]>, n: gmem<i32[32]>, y: gmem<f32[32]>) {{\n\
               let i: u32 = axis_index(t);\n\
               local acc: f16[4];\n\
               y[i] = {value};\n\
             }}\n"
        );
        super::super::parse(&src).unwrap_err().message
    }

    /// The hint names the type the statement's result has, not `i32`
    /// whatever the value.
    #[test]
    fn a_statement_written_as_an_expression_is_told_its_result_type() {
        let cases = [
            ("shfl_idx(x[i], 0u) + 1.0", "let v: f32 = shfl_idx(...);"),
            ("f32(reduce_add(n[i]))", "let v: i32 = reduce_add(...);"),
            ("f32(ballot(x[i] > 0.0))", "let v: u32 = ballot(...);"),
            ("f32(shfl_xor(acc[0u], 1u))", "let v: f16 = shfl_xor(...);"),
            ("atomic_add(x[i], 1.0)", "let v: f32 = atomic_add(...);"),
            ("f32(read(n[i]))", "let v: i32 = read(...);"),
            ("shfl_idx(nope, 0u)", "let v: TYPE = shfl_idx(...);"),
        ];
        for (value, hint) in cases {
            let message = hint_for(value);
            assert!(message.contains(hint), "{value}: {message}");
            assert!(message.ends_with("before it, then use `v`"), "{message}");
        }
    }
}
