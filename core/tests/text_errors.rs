//! Syntax errors (exact line, column, message, excerpt) and source spans.

use mpmd_core::ir::{IrPath, PathStep};
use mpmd_core::text::{parse, ParseError, Span};

fn error(src: &str) -> ParseError {
    match parse(src) {
        Ok((m, _)) => panic!("parsed without error: {m:?}"),
        Err(e) => e,
    }
}

/// (line, column, message) of the error in `src`.
fn located(src: &str) -> (u32, u32, String) {
    let e = error(src);
    (e.line, e.column, e.message)
}

#[test]
fn missing_semicolon_points_after_the_previous_token() {
    let src = "kernel k() {\n  let x: u32 = 1u\n}\n";
    let e = error(src);
    assert_eq!(
        (e.line, e.column, e.message.as_str()),
        (2, 18, "expected `;` after statement, found `}`")
    );
    assert_eq!(e.excerpt, "  let x: u32 = 1u\n                 ^");
    assert_eq!(
        e.to_string(),
        "2:18: expected `;` after statement, found `}`"
    );
    assert_eq!(
        e.render("k.mpmd"),
        "error: expected `;` after statement, found `}`\n \
         --> k.mpmd:2:18\n  \
         |\n\
         2 |   let x: u32 = 1u\n  \
         |                  ^\n"
    );
}

#[test]
fn render_widens_the_gutter_for_long_line_numbers() {
    let src = format!("{}mesh m {{ threads t = 4 }}\n", "\n".repeat(11));
    let e = error(&src);
    assert_eq!((e.line, e.column), (12, 23));
    assert_eq!(
        e.render("m.mpmd"),
        "error: expected `;` after the thread axis, found `}`\n  \
         --> m.mpmd:12:23\n   \
         |\n\
         12 | mesh m { threads t = 4 }\n   \
         |                       ^\n"
    );
}

#[test]
fn unexpected_tokens_name_what_was_expected() {
    assert_eq!(
        located("mesh m { threads t = 4; }\nfoo"),
        (
            2,
            1,
            "expected an item (`const`, `mesh`, `resident`, `fn`, `kernel`, `map`, `call` or `case`), found `foo`"
                .to_string()
        )
    );
    assert_eq!(
        located("mesh m {\n  grid [b = 4];\n}"),
        (
            3,
            1,
            "expected a `threads` line in mesh `m`, found `}`".to_string()
        )
    );
    assert_eq!(
        located("kernel k() {\n  let if: u32 = 1u;\n}"),
        (
            2,
            7,
            "expected a name after `let`, found keyword `if`".to_string()
        )
    );
    assert_eq!(
        located("kernel k(x: gmem<f32[4]) {}"),
        (1, 24, "expected `>` after the shape, found `)`".to_string())
    );
    assert_eq!(
        located("kernel k() {\n  y[0] = ;\n}"),
        (2, 10, "expected an expression, found `;`".to_string())
    );
    assert_eq!(
        located("kernel k() {"),
        (
            1,
            13,
            "expected `}` to close the block, found end of file".to_string()
        )
    );
    assert_eq!(
        located("case {\n  compare y = close;\n}"),
        (
            2,
            15,
            "expected a comparison mode (`exact`, `ulp(n)`, `profile`, `multiset`, `ignore` or `mma`), found `close`"
                .to_string()
        )
    );
}

#[test]
fn expression_errors() {
    assert_eq!(
        located("kernel k() {\n  let b: bool = a < b < c;\n}"),
        (
            2,
            23,
            "comparison operators cannot be chained; add parentheses".to_string()
        )
    );
    assert_eq!(
        located("kernel k() {\n  let b: f32 = 1.0 + expo(a);\n}"),
        (
            2,
            22,
            "`expo` is not a builtin function; a helper function is called as a statement of its own: `let v: u32 = expo(...);` (or `expo(...);`), then use `v`".to_string()
        )
    );
    assert_eq!(
        located("kernel k() {\n  let v: u32 = read(s[0]);\n}"),
        (
            2,
            10,
            "`read` returns `i32`, but `v` is declared `u32`".to_string()
        )
    );
}

#[test]
fn literal_errors() {
    assert_eq!(
        located("call m(n = 4294967296u);"),
        (
            1,
            12,
            "integer literal `4294967296u` is out of range for `u32`".to_string()
        )
    );
    assert_eq!(
        located("call m(n = 2147483648);"),
        (
            1,
            12,
            "integer literal `2147483648` is out of range for `i32`".to_string()
        )
    );
    assert_eq!(
        located("call m(n = -1u);"),
        (1, 12, "`u32` literal `-1u` cannot be negative".to_string())
    );
    assert_eq!(
        located("call m(n = 1.0f);"),
        (1, 12, "invalid suffix `f` on number `1.0f`".to_string())
    );
}

#[test]
fn malformed_tokens_are_reported_in_source_order() {
    // The bad character comes after a syntax error: the syntax error wins.
    assert_eq!(
        located("call m(n 1) $"),
        (
            1,
            10,
            "expected `=` after the scalar name `n`, found `1`".to_string()
        )
    );
    assert_eq!(
        located("kernel k() {\n  let x: u32 = 1u $ 2u;\n}"),
        (2, 19, "unexpected character `$`".to_string())
    );
}

const SPANS: &str = "\
mesh m {
  threads t = 32;
}

kernel k(x: gmem<f32[4]>, n: u32) {
  let i: u32 = axis_index(t);
  if i < n {
    x[i] = 1.0;
  } else if i == n {
    barrier;
  } else {
    for j: u32 in 0u..n {
      x[j] = 2.0;
    }
  }
}

map p {
  programs [m: k];
  inputs [x: gmem<f32[4]>];
  scalars [n: u32];
}

call p(n = 4u);

case {
  expect ok;
}
";

fn path(steps: &[PathStep]) -> IrPath {
    IrPath(steps.to_vec())
}

fn line_col(span: Option<Span>) -> (u32, u32) {
    let span = span.expect("span recorded");
    (span.line, span.column)
}

#[test]
fn spans_of_items_params_operands_and_statements() {
    let (_, map) = parse(SPANS).unwrap();
    let kernel = PathStep::Kernel("k".into());
    let spans = |steps: &[PathStep]| line_col(map.spans.get(&path(steps)).copied());
    assert_eq!(spans(&[PathStep::Mesh("m".into())]), (1, 1));
    assert_eq!(spans(std::slice::from_ref(&kernel)), (5, 1));
    assert_eq!(
        spans(&[kernel.clone(), PathStep::Param("n".into())]),
        (5, 27)
    );
    assert_eq!(spans(&[kernel.clone(), PathStep::Stmt(0)]), (6, 3));
    assert_eq!(spans(&[kernel.clone(), PathStep::Stmt(1)]), (7, 3));
    assert_eq!(
        spans(&[
            kernel.clone(),
            PathStep::Stmt(1),
            PathStep::Then,
            PathStep::Stmt(0)
        ]),
        (8, 5)
    );
    // `else if` is an `else` block holding one `if`, which starts at `if`.
    let nested_if = [
        kernel.clone(),
        PathStep::Stmt(1),
        PathStep::Else,
        PathStep::Stmt(0),
    ];
    assert_eq!(spans(&nested_if), (9, 10));
    let mut loop_body = nested_if.to_vec();
    loop_body.extend([
        PathStep::Else,
        PathStep::Stmt(0),
        PathStep::Body,
        PathStep::Stmt(0),
    ]);
    assert_eq!(spans(&loop_body), (13, 7));
    let map_step = PathStep::Map("p".into());
    assert_eq!(spans(std::slice::from_ref(&map_step)), (18, 1));
    assert_eq!(spans(&[map_step.clone(), PathStep::Program(0)]), (19, 13));
    assert_eq!(
        spans(&[map_step.clone(), PathStep::Operand("n".into())]),
        (21, 12)
    );
    assert_eq!(spans(&[PathStep::Call(0)]), (24, 1));
    assert_eq!(spans(&[PathStep::Case]), (26, 1));

    // Byte offsets cover the whole statement, `;` included.
    let stmt = map.spans[&path(&[kernel.clone(), PathStep::Stmt(0)])];
    assert_eq!(&SPANS[stmt.start..stmt.end], "let i: u32 = axis_index(t);");
    let whole_if = map.spans[&path(&[kernel.clone(), PathStep::Stmt(1)])];
    assert!(SPANS[whole_if.start..whole_if.end].ends_with("    }\n  }"));

    // Paths without a span of their own fall back to the nearest ancestor.
    let deeper = path(&[kernel, PathStep::Stmt(0), PathStep::Then]);
    assert_eq!(line_col(map.span_of(&deeper)), (6, 3));
}

#[test]
fn statement_calls_that_are_not_statements() {
    assert_eq!(
        located("kernel k() {\n  read(s[0]);\n}"),
        (
            2,
            3,
            "`read` returns a value: write `let v: i32 = read(s[i]);`".to_string()
        )
    );
    assert_eq!(
        located("kernel k() {\n  exp(1.0);\n}"),
        (
            2,
            3,
            "`exp` cannot be called as a statement; only atomics (`atomic_add`, ...) and `signal`, `wait`, `wait_nodec` can"
                .to_string()
        )
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    const TOO_DEEP: &str = "blocks and expressions nest deeper than 256 levels here; bind inner parts of the expression to `let`s, or move inner blocks out (docs/text-format.md, \"Nesting\")";
    let deep = format!("call m(n = {}1{});", "(".repeat(5000), ")".repeat(5000));
    // Calls take literals only: there the parenthesis itself is the error.
    assert_eq!(located(&deep).2, "expected a literal, found `(`");
    let deep = format!(
        "kernel k() {{ let x: i32 = {}1{}; }}",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    // The kernel body and the `let` value are levels too; the error points
    // at the first token past the limit.
    assert_eq!(located(&deep), (1, 27 + 255, TOO_DEEP.to_string()));
    for (open, close) in [("-", ""), ("exp(", ")"), ("x[", "]"), ("f32(", ")")] {
        let deep = format!(
            "kernel k() {{ let x: i32 = {}1{}; }}",
            open.repeat(5000),
            close.repeat(5000)
        );
        assert_eq!(located(&deep).2, TOO_DEEP, "nesting `{open}`");
    }
    let deep = format!("kernel k() {{ {} }}", "if true { ".repeat(5000));
    assert_eq!(located(&deep).2, TOO_DEEP);
    let fine = format!(
        "kernel k() {{ {} }}",
        "for i: u32 in 0u..1u { ".repeat(40) + &"}".repeat(40)
    );
    assert!(parse(&fine).is_ok());
}

#[test]
fn damaged_files_give_errors_inside_the_source_not_panics() {
    let lines = SPANS.lines().count() as u32;
    let chars: Vec<(usize, char)> = SPANS.char_indices().collect();
    for &(i, c) in &chars {
        let prefix = &SPANS[..i];
        let without = format!("{}{}", &SPANS[..i], &SPANS[i + c.len_utf8()..]);
        for src in [prefix, without.as_str()] {
            if let Err(e) = parse(src) {
                assert!(e.line >= 1 && e.line <= lines + 1, "{e} in {src:?}");
                assert!(e.column >= 1, "{e}");
                assert!(e.excerpt.ends_with('^'), "{e}");
            }
        }
    }
}
