//! The recursive-descent parser (docs/text-format.md).

use super::lexer::{is_keyword, tokenize, IntToken, Token, TokenKind};
use super::{excerpt, position_of, ParseError, SourceFile, SourceMap, Span};
use crate::ir::limits::{with_nesting_stack, INLINE_NESTING, MAX_NESTING};
use crate::ir::*;
use std::collections::HashMap;

mod exprs;
mod items;
mod stmts;

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

    /// A literal where only a literal may stand (`call` lines, constants,
    /// case lines): also a 16-bit special value written as a cast,
    /// `f16(inf)`, `bf16(-inf)`, `f16(nan)` (in an expression that form is
    /// the cast itself).
    fn literal(&mut self) -> PResult<Literal> {
        if let Some(lit) = self.try_literal()? {
            return Ok(lit);
        }
        let ty = match self.word_at(0) {
            Some("f16") => ScalarType::F16,
            Some("bf16") => ScalarType::BF16,
            _ => return Err(self.expected("a literal")),
        };
        if !self.is_punct_at(1, "(") {
            return Err(self.expected("a literal"));
        }
        self.bump();
        self.bump();
        let token = self.peek().clone();
        let special = match self.try_literal()? {
            Some(Literal::F32(bits)) if !bits.to_f32().is_finite() => bits.to_f32(),
            _ => {
                return Err(self.error_at_token(
                    &token,
                    format!(
                        "`{ty}(...)` as a literal takes `inf`, `-inf` or `nan`; write a finite value with the suffix (`1.5{ty}`)"
                    ),
                ))
            }
        };
        self.expect_punct(")", &format!("after the value of `{ty}(...)`"))?;
        let bits = crate::numerics::from_f32(ty, special).unwrap_or(0);
        Ok(Literal::from_bits(ty, u32::from(bits)))
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
