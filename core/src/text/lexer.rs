//! Tokens of the `.mpmd` text format.
//!
//! Lexing never fails outright: a malformed token becomes a
//! [`TokenKind::Error`] that the parser reports when (and only when) it
//! reaches it, so that errors come out in source order.

/// Words that can never be names.
pub(crate) const KEYWORDS: &[&str] = &[
    "mesh",
    "grid",
    "cluster",
    "threads",
    "kernel",
    "map",
    "programs",
    "inputs",
    "outputs",
    "scalars",
    "scratch",
    "aliases",
    "fast_math",
    "debug",
    "resident",
    "zeroed",
    "call",
    "case",
    "generate",
    "compare",
    "expect",
    "let",
    "var",
    "local",
    "for",
    "while",
    "break",
    "continue",
    "const",
    "fn",
    "return",
    "in",
    "if",
    "else",
    "barrier",
    "true",
    "false",
    "inf",
    "nan",
    "f32",
    "i32",
    "u32",
    "bool",
    "f16",
    "bf16",
    "gmem",
    "smem",
    "sem",
];

pub(crate) fn is_keyword(word: &str) -> bool {
    KEYWORDS.contains(&word)
}

use crate::ir::ScalarType;

/// Bits of the canonical quiet NaN, printed as `nan`.
pub(crate) const CANONICAL_NAN: u32 = 0x7fc0_0000;

/// An integer literal as written; its type and range are checked by the
/// parser, which knows what is expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IntToken {
    /// `None` when the digits do not fit in a `u64`.
    pub magnitude: Option<u64>,
    pub negative: bool,
    /// Written with a `u` suffix.
    pub unsigned: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TokenKind {
    /// A name or a keyword (the parser tells them apart by position).
    Word(String),
    Int(IntToken),
    /// An `f32` literal, as bits.
    Float(u32),
    /// An `f16` or `bf16` literal (a number with an `f16` / `bf16` suffix), as bits.
    Float16(ScalarType, u16),
    Punct(&'static str),
    Eof,
    /// A malformed token, with the message to report.
    Error(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: TokenKind,
    /// Byte offsets into the source.
    pub start: usize,
    pub end: usize,
    /// 1-based; columns count characters.
    pub line: u32,
    pub column: u32,
}

/// Longest first, so that `<=` wins over `<`.
const PUNCTUATION: &[&str] = &[
    "<<=", ">>=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "..", "->", "==", "!=", "<=",
    ">=", "&&", "||", "<<", ">>", "{", "}", "(", ")", "[", "]", "<", ">", ",", ";", ":", "=", "!",
    "~", "+", "-", "*", "/", "%", "&", "|", "^", "@", ".",
];

fn is_word_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

struct Lexer<'s> {
    src: &'s str,
    pos: usize,
    line: u32,
    column: u32,
    tokens: Vec<Token>,
}

/// Splits `src` into tokens, ending with [`TokenKind::Eof`]. Lexing stops
/// at the first malformed token. A byte-order mark at the start is skipped;
/// offsets stay those of `src`.
pub(crate) fn tokenize(src: &str) -> Vec<Token> {
    let mut lexer = Lexer {
        src,
        pos: bom_len(src),
        line: 1,
        column: 1,
        tokens: Vec::new(),
    };
    lexer.run();
    lexer.tokens
}

impl Lexer<'_> {
    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }

    fn peek_char(&self, skip: usize) -> Option<char> {
        self.rest().chars().nth(skip)
    }

    /// Moves past `bytes` bytes, keeping line and column up to date.
    fn advance(&mut self, bytes: usize) {
        let end = self.pos + bytes;
        for (i, c) in self.src[self.pos..end].char_indices() {
            if ends_line(self.src, self.pos + i, c) {
                self.line += 1;
                self.column = 1;
            } else if !is_line_break(c) {
                self.column += 1;
            }
        }
        self.pos = end;
    }

    fn push(&mut self, kind: TokenKind, len: usize) {
        let (start, line, column) = (self.pos, self.line, self.column);
        self.advance(len);
        self.tokens.push(Token {
            kind,
            start,
            end: self.pos,
            line,
            column,
        });
    }

    /// Whether the last token ends an operand, in which case a following `-`
    /// is the binary operator (`n-1`) rather than the sign of a literal.
    fn after_operand(&self) -> bool {
        match self.tokens.last().map(|t| &t.kind) {
            Some(TokenKind::Word(w)) => !is_keyword(w) || w == "true" || w == "false",
            Some(TokenKind::Int(_) | TokenKind::Float(_) | TokenKind::Float16(..)) => true,
            Some(TokenKind::Punct(p)) => *p == ")" || *p == "]",
            _ => false,
        }
    }

    fn run(&mut self) {
        loop {
            self.skip_trivia();
            let Some(c) = self.peek_char(0) else {
                self.push(TokenKind::Eof, 0);
                return;
            };
            if c.is_ascii_digit() {
                self.number(0);
            } else if is_word_start(c) {
                self.word();
            } else if c == '-' && !self.after_operand() && self.signed_literal_follows() {
                self.number(1);
            } else if let Some(p) = PUNCTUATION.iter().find(|p| self.rest().starts_with(**p)) {
                self.push(TokenKind::Punct(p), p.len());
            } else {
                let shown = if c.is_ascii_graphic() {
                    format!("`{c}`")
                } else {
                    format!("{c:?} (U+{:04X})", c as u32)
                };
                self.push(
                    TokenKind::Error(format!("unexpected character {shown}")),
                    c.len_utf8(),
                );
            }
            if matches!(
                self.tokens.last().map(|t| &t.kind),
                Some(TokenKind::Error(_))
            ) {
                return;
            }
        }
    }

    fn skip_trivia(&mut self) {
        loop {
            let rest = self.rest();
            let ws = rest.len() - rest.trim_start().len();
            if ws > 0 {
                self.advance(ws);
            } else if self.rest().starts_with("//") {
                let len = self.rest().find(is_line_break).unwrap_or(self.rest().len());
                self.advance(len);
            } else {
                return;
            }
        }
    }

    /// After a `-`: a digit, or `inf` / `nan` as a whole word.
    fn signed_literal_follows(&self) -> bool {
        let after = &self.rest()[1..];
        if after.starts_with(|c: char| c.is_ascii_digit()) {
            return true;
        }
        ["inf", "nan"]
            .iter()
            .any(|w| after.starts_with(w) && !after[w.len()..].starts_with(is_word_char))
    }

    fn word(&mut self) {
        let len = self
            .rest()
            .find(|c: char| !is_word_char(c))
            .unwrap_or(self.rest().len());
        let word = &self.rest()[..len];
        let kind = match word {
            "inf" => TokenKind::Float(f32::INFINITY.to_bits()),
            "nan" => TokenKind::Float(CANONICAL_NAN),
            _ => TokenKind::Word(word.to_string()),
        };
        self.push(kind, len);
    }

    /// A number (or a signed `inf` / `nan`) starting `sign_len` bytes in.
    fn number(&mut self, sign_len: usize) {
        let negative = sign_len > 0;
        let body = &self.rest()[sign_len..];
        for (word, bits) in [("inf", f32::INFINITY.to_bits()), ("nan", CANONICAL_NAN)] {
            if body.starts_with(word) {
                let bits = if negative { bits | 0x8000_0000 } else { bits };
                self.push(TokenKind::Float(bits), sign_len + word.len());
                return;
            }
        }
        let bytes = body.as_bytes();
        let digits_end = |from: usize, hex: bool| {
            let mut i = from;
            while i < bytes.len()
                && (bytes[i].is_ascii_digit() || (hex && bytes[i].is_ascii_hexdigit()))
            {
                i += 1;
            }
            i
        };
        let mut end;
        let mut is_float = false;
        let mut radix = 10;
        let digits_start;
        if body.starts_with("0x") || body.starts_with("0X") {
            radix = 16;
            digits_start = 2;
            end = digits_end(2, true);
            if end == 2 {
                let len = sign_len + 2;
                let text = &self.rest()[..len];
                self.push(
                    TokenKind::Error(format!("hexadecimal literal `{text}` has no digits")),
                    len,
                );
                return;
            }
        } else {
            digits_start = 0;
            end = digits_end(0, false);
            if bytes.get(end) == Some(&b'.') && bytes.get(end + 1).is_some_and(u8::is_ascii_digit) {
                is_float = true;
                end = digits_end(end + 1, false);
            }
            if matches!(bytes.get(end), Some(b'e' | b'E')) {
                let mut exp = end + 1;
                if matches!(bytes.get(exp), Some(b'+' | b'-')) {
                    exp += 1;
                }
                if bytes.get(exp).is_some_and(u8::is_ascii_digit) {
                    is_float = true;
                    end = digits_end(exp, false);
                }
            }
        }
        let digits = &body[digits_start..end];
        let numeric_text = &self.rest()[..sign_len + end];
        let unsigned = !is_float && bytes.get(end) == Some(&b'u');
        let len = end + usize::from(unsigned);
        if radix == 10 && !unsigned {
            for ty in [ScalarType::F16, ScalarType::BF16] {
                let suffix = ty.keyword();
                let after = len + suffix.len();
                if body[len..].starts_with(suffix) && !body[after..].starts_with(is_word_char) {
                    let kind = float16_literal(numeric_text, ty);
                    self.push(kind, sign_len + after);
                    return;
                }
            }
        }
        if body[len..].starts_with(is_word_char) {
            let suffix_len = body[len..]
                .find(|c: char| !is_word_char(c))
                .unwrap_or(body.len() - len);
            let suffix = &body[len..len + suffix_len];
            let text = &self.rest()[..sign_len + len + suffix_len];
            self.push(
                TokenKind::Error(format!("invalid suffix `{suffix}` on number `{text}`")),
                sign_len + len + suffix_len,
            );
            return;
        }
        let kind = if is_float {
            float_literal(numeric_text)
        } else {
            TokenKind::Int(IntToken {
                magnitude: u64::from_str_radix(digits, radix).ok(),
                negative,
                unsigned,
            })
        };
        self.push(kind, sign_len + len);
    }
}

/// Bytes of a byte-order mark at the start of `src` (0 without one).
pub(crate) fn bom_len(src: &str) -> usize {
    if src.starts_with('\u{feff}') {
        '\u{feff}'.len_utf8()
    } else {
        0
    }
}

/// CR and LF: a line ends at LF, CR LF or a CR alone.
pub(crate) fn is_line_break(c: char) -> bool {
    c == '\n' || c == '\r'
}

/// Whether `c` at byte `at` of `src` ends a line (a CR followed by LF does
/// not: the LF does).
pub(crate) fn ends_line(src: &str, at: usize, c: char) -> bool {
    c == '\n' || (c == '\r' && !src[at + 1..].starts_with('\n'))
}

/// A decimal float literal (docs/text-format.md, "Literals"): rounded to
/// the nearest `f32`, ties to even; a value that rounds to infinity, or a
/// non-zero value that rounds to zero, is an error.
fn float_literal(text: &str) -> TokenKind {
    let Ok(v) = text.parse::<f32>() else {
        return TokenKind::Error(format!("invalid number `{text}`"));
    };
    if v.is_infinite() {
        return TokenKind::Error(format!(
            "float literal `{text}` is out of range for `f32` (its largest finite value is {:e}); write `inf` or `-inf` for infinity",
            f32::MAX
        ));
    }
    let mantissa = text.split(['e', 'E']).next().unwrap_or(text);
    if v == 0.0 && mantissa.contains(|c: char| ('1'..='9').contains(&c)) {
        return TokenKind::Error(format!(
            "float literal `{text}` is too small for `f32`: it rounds to zero (the smallest non-zero `f32` is {:e}); write `0.0` for zero",
            f32::from_bits(1)
        ));
    }
    TokenKind::Float(v.to_bits())
}

/// A decimal literal with an `f16` / `bf16` suffix: rounded once to the
/// nearest value of that type (through f64, rounded to odd: exact for every
/// decimal of up to 15 significant digits), with the same errors as `f32`'s.
fn float16_literal(text: &str, ty: ScalarType) -> TokenKind {
    let Ok(v) = text.parse::<f64>() else {
        return TokenKind::Error(format!("invalid number `{text}{ty}`"));
    };
    let bits = crate::numerics::from_f64(ty, v).unwrap_or(0);
    let value = crate::numerics::to_f32(ty, bits).unwrap_or(0.0);
    if value.is_infinite() {
        let max = crate::numerics::to_f32(
            ty,
            if ty == ScalarType::F16 {
                0x7bff
            } else {
                0x7f7f
            },
        )
        .unwrap_or(0.0);
        return TokenKind::Error(format!(
            "float literal `{text}{ty}` is out of range for `{ty}` (its largest finite value is {max:e}); write `{ty}(inf)` for infinity"
        ));
    }
    let mantissa = text.split(['e', 'E']).next().unwrap_or(text);
    if value == 0.0 && mantissa.contains(|c: char| ('1'..='9').contains(&c)) {
        let min = crate::numerics::to_f32(ty, 1).unwrap_or(0.0);
        return TokenKind::Error(format!(
            "float literal `{text}{ty}` is too small for `{ty}`: it rounds to zero (the smallest non-zero `{ty}` is {min:e}); write `0.0{ty}` for zero"
        ));
    }
    TokenKind::Float16(ty, bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<TokenKind> {
        tokenize(src).into_iter().map(|t| t.kind).collect()
    }

    fn int(magnitude: u64, negative: bool, unsigned: bool) -> TokenKind {
        TokenKind::Int(IntToken {
            magnitude: Some(magnitude),
            negative,
            unsigned,
        })
    }

    #[test]
    fn minus_after_an_operand_is_an_operator() {
        assert_eq!(
            kinds("n-1 - -1"),
            vec![
                TokenKind::Word("n".into()),
                TokenKind::Punct("-"),
                int(1, false, false),
                TokenKind::Punct("-"),
                int(1, true, false),
                TokenKind::Eof
            ]
        );
    }

    #[test]
    fn ranges_floats_and_suffixes() {
        assert_eq!(
            kinds("0u..n 1.5 1e-45, -inf 0x1Fu"),
            vec![
                int(0, false, true),
                TokenKind::Punct(".."),
                TokenKind::Word("n".into()),
                TokenKind::Float(1.5f32.to_bits()),
                TokenKind::Float(1e-45f32.to_bits()),
                TokenKind::Punct(","),
                TokenKind::Float(f32::NEG_INFINITY.to_bits()),
                int(31, false, true),
                TokenKind::Eof
            ]
        );
    }

    #[test]
    fn bad_suffix_is_an_error_token() {
        assert_eq!(
            kinds("1.0f"),
            vec![TokenKind::Error(
                "invalid suffix `f` on number `1.0f`".into()
            )]
        );
    }
}
