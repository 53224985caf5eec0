//! Hostile and unusual input to the text front end (issue 14, the rows of
//! ../shared/defects/README.md): nesting of every shape, CR line ends, a
//! byte-order mark, bytes that are not UTF-8, float literals out of range.
//! The reproducer files are inlined so that the tests stand alone.

use std::time::{Duration, Instant};

use mpmd_core::inputs::{call_args, Generation};
use mpmd_core::interp::Interpreter;
use mpmd_core::ir::limits::MAX_NESTING;
use mpmd_core::ir::{Literal, Stmt};
use mpmd_core::plan::lower;
use mpmd_core::text::{decode, parse, parse_bytes, print};
use mpmd_core::validate::{validate, ValidateOptions};

const TOO_DEEP: &str = "blocks and expressions nest deeper than 256 levels here; bind inner parts of the expression to `let`s, or move inner blocks out (docs/text-format.md, \"Nesting\")";

// ---- nesting: the shapes of ../shared/defects/gen_deep.py ---------------------

/// gen_deep.py's module around a kernel body.
fn wrap(body: &str) -> String {
    format!(
        "mesh m {{\n  grid [b = 1];\n  threads t = 32;\n}}\n\nkernel k(y: gmem<i32[32]>, n: i32) {{\n{body}\n}}\n\nmap k {{\n  programs [m: k];\n  outputs [y: gmem<i32[32]>];\n  scalars [n: i32];\n}}\n\ncall k(n = 1);\n"
    )
}

fn let_v(value: String) -> String {
    wrap(&format!("  let v: i32 = {value};\n  y[axis_index(t)] = v;"))
}

/// The module gen_deep.py writes for `kind` and `d`.
fn deep(kind: &str, d: usize) -> String {
    let r = |s: &str, n: usize| s.repeat(n);
    match kind {
        "paren" => let_v(format!("{}1{}", r("(", d), r(")", d))),
        "neg" => let_v(format!("{}1{}", r("-(", d), r(")", d))),
        "notn" => let_v(format!("{}1", r("~", d))),
        "binchain" => let_v(format!("1{}", r(" + 1", d))),
        "rbin" => let_v(format!("{}1{}", r("1 + (", d), r(")", d))),
        "ifs" => wrap(&format!(
            "  {}y[axis_index(t)] = 1;{}",
            r("if n > 0 { ", d),
            r(" }", d)
        )),
        "fors" => wrap(&format!(
            "  {}y[axis_index(t)] = 1;{}",
            (0..d)
                .map(|j| format!("for v{j}: i32 in 0..1 {{ "))
                .collect::<String>(),
            r(" }", d)
        )),
        "elseif" => wrap(&format!(
            "  if n == 0 {{ y[axis_index(t)] = 0; }}{}",
            (0..d)
                .map(|j| format!(
                    " else if n == {} {{ y[axis_index(t)] = {}; }}",
                    j + 1,
                    j + 1
                ))
                .collect::<String>()
        )),
        "idx" => wrap(&format!("  y[{}0{}] = 1;", r("y[", d), r("]", d))),
        "casts" => let_v(format!("{}1{}", r("i32(", d), r(")", d))),
        "sel" => let_v(format!("{}1{}", r("select(true, 1, ", d), r(")", d))),
        "mathmax" => wrap(&format!(
            "  let v: f32 = {}1.0{};\n  y[axis_index(t)] = i32(v);",
            r("max(1.0, ", d),
            r(")", d)
        )),
        _ => unreachable!("unknown shape {kind}"),
    }
}

/// Every shape with the largest `d` that nests exactly [`MAX_NESTING`]
/// levels: the kernel body is level 1 and the statement's own levels follow.
const SHAPES: &[(&str, usize)] = &[
    // `let v = (((1)))`: 1 + d parentheses + the literal.
    ("paren", MAX_NESTING - 2),
    // `-(` is a negation and a pair of parentheses.
    ("neg", (MAX_NESTING - 2) / 2),
    ("notn", MAX_NESTING - 2),
    // d additions of d + 1 terms: 1 + d + 1.
    ("binchain", MAX_NESTING - 2),
    // `1 + (` is an addition and a pair of parentheses.
    ("rbin", (MAX_NESTING - 2) / 2),
    // d `if`s: the store is at level d + 1, its index `axis_index(t)` one more.
    ("ifs", MAX_NESTING - 2),
    ("fors", MAX_NESTING - 2),
    // Each `else if` is one block level deeper; the first `if` is at level 1.
    ("elseif", MAX_NESTING - 3),
    // d + 1 indices in a store: levels 1 + d (loads) + 1 (the literal).
    ("idx", MAX_NESTING - 2),
    ("casts", MAX_NESTING - 2),
    ("sel", MAX_NESTING - 2),
    ("mathmax", MAX_NESTING - 2),
];

#[test]
fn every_shape_at_the_limit_parses_validates_prints_lowers_and_runs() {
    for &(kind, d) in SHAPES {
        let src = deep(kind, d);
        let (module, _) = parse(&src).unwrap_or_else(|e| panic!("{kind} {d}: {e}"));
        validate(&module, &ValidateOptions::default())
            .unwrap_or_else(|e| panic!("{kind} {d}: {:?}", e[0].message));
        assert_eq!(
            parse(&print(&module)).unwrap().0,
            module,
            "{kind} round trip"
        );
        lower(&validated(&module), "k").unwrap_or_else(|e| panic!("{kind} {d}: {e}"));
        let args = call_args(&module, &Generation::with_defaults(1)).unwrap();
        Interpreter::new()
            .call(&validated(&module), "k", &args[0], &Default::default())
            .unwrap_or_else(|e| panic!("{kind} {d}: {e}"));
    }
}

#[test]
fn every_shape_one_level_past_the_limit_is_refused_where_it_passes_it() {
    for &(kind, d) in SHAPES {
        // One more repetition is one or two levels more.
        let e = parse(&deep(kind, d + 1)).expect_err(kind);
        assert_eq!(e.message, TOO_DEEP, "{kind}");
    }
    // The place: the `+` that makes the chain too deep, the first token
    // past the limit elsewhere.
    let e = parse(&deep("binchain", MAX_NESTING - 1)).unwrap_err();
    let last_plus = 14 + 4 * (MAX_NESTING as u32 - 1);
    assert_eq!((e.line, e.column), (7, last_plus));
    let e = parse(&deep("paren", MAX_NESTING)).unwrap_err();
    assert_eq!((e.line, e.column), (7, 16 + MAX_NESTING as u32 - 1));
}

#[test]
fn deep_input_of_every_shape_is_refused_in_linear_time() {
    // elseif 5000 took 18 s and 4 GB; binchain 12000 overflowed the stack in
    // validation, the interpreter and lowering.
    for &(kind, _) in SHAPES {
        for d in [2_000, 8_000] {
            let src = deep(kind, d);
            let started = Instant::now();
            let e = parse(&src).expect_err(kind);
            let took = started.elapsed();
            assert_eq!(e.message, TOO_DEEP, "{kind} {d}");
            assert!(took < Duration::from_secs(5), "{kind} {d}: {took:?}");
        }
    }
}

#[test]
fn a_flat_sum_of_198_terms_stays_valid() {
    // ../shared/defects/d02_wgsl_chain_198.mpmd: the WGSL emitter splits it.
    let (module, _) = parse(&deep("binchain", 198)).unwrap();
    validate(&module, &ValidateOptions::default()).unwrap();
    lower(&validated(&module), "k").unwrap();
}

// ---- line ends, byte-order mark, UTF-8 ------------------------------------------

/// d07_cr_line_endings.mpmd: classic Mac line ends.
const CR_ONLY: &str = "// Elementwise with classic Mac (CR-only) line endings.\rmesh m {\r  grid [b = 1];\r  threads t = 4;\r}\r\rkernel k(y: gmem<f32[4]>) {\r  y[axis_index(t)] = 1.0;\r}\r\rmap k {\r  programs [m: k];\r  outputs [y: gmem<f32[4]>];\r}\r\rcall k();\r";

#[test]
fn a_cr_alone_ends_a_line_and_a_comment() {
    let (module, spans) = parse(CR_ONLY).unwrap();
    // The comment used to swallow the whole file (an empty module).
    assert_eq!(
        (module.meshes.len(), module.kernels.len(), module.maps.len()),
        (1, 1, 1)
    );
    assert_eq!(module, parse(&CR_ONLY.replace('\r', "\n")).unwrap().0);
    let kernel = spans
        .span_of(&mpmd_core::ir::IrPath(vec![
            mpmd_core::ir::PathStep::Kernel("k".into()),
        ]))
        .unwrap();
    assert_eq!((kernel.line, kernel.column), (7, 1));
    // Errors count CR lines too, and the excerpt is the one line.
    let e = parse(&CR_ONLY.replace("1.0;", "1.0")).unwrap_err();
    assert_eq!((e.line, e.column), (8, 25));
    assert_eq!(
        e.excerpt,
        format!("  y[axis_index(t)] = 1.0\n{}^", " ".repeat(24))
    );
    // CR LF is one line end, not two.
    let e = parse(&CR_ONLY.replace('\r', "\r\n").replace("1.0;", "1.0")).unwrap_err();
    assert_eq!((e.line, e.column), (8, 25));
}

#[test]
fn a_byte_order_mark_at_the_start_is_skipped() {
    // d08_bom.mpmd: "unexpected character" with an invisible character.
    let plain = "mesh m {\n  grid [b = 1];\n  threads t = 4;\n}\n";
    let with_bom = format!("\u{feff}{plain}");
    assert_eq!(parse(&with_bom).unwrap().0, parse(plain).unwrap().0);
    let e = parse(&with_bom.replace("4;", "4")).unwrap_err();
    assert_eq!((e.line, e.column), (3, 16));
    let e = parse("\u{feff}mesh {").unwrap_err();
    assert_eq!((e.line, e.column), (1, 6));
    assert_eq!(e.excerpt, "mesh {\n     ^");
    // Anywhere else it is a character that is named, not shown blank.
    let e = parse(&format!("{plain}\u{feff}")).unwrap_err();
    assert_eq!(e.message, "unexpected character '\\u{feff}' (U+FEFF)");
    assert_eq!((e.line, e.column), (5, 1));
}

#[test]
fn bytes_that_are_not_utf8_are_an_error_at_their_line_and_column() {
    // d09_non_utf8_comment.mpmd: `// caf\xe9 (Latin-1, not UTF-8)` on line 5.
    let mut bytes = b"mesh m {\n  grid [b = 1];\n  threads t = 4;\n}\n// caf".to_vec();
    bytes.extend_from_slice(b"\xe9 (Latin-1, not UTF-8)\n");
    let e = parse_bytes(&bytes).unwrap_err();
    assert_eq!((e.line, e.column), (5, 7));
    assert_eq!(
        e.message,
        "byte 0xE9 is not valid UTF-8; .mpmd files are UTF-8 (save the file as UTF-8)"
    );
    assert_eq!(e.excerpt, "// caf\u{fffd} (Latin-1, not UTF-8)\n      ^");
    assert_eq!(decode(&bytes).unwrap_err(), e);
    // The same after CR line ends and a BOM.
    let mut cr = b"\xef\xbb\xbfmesh m {\r}\r\xff".to_vec();
    cr.push(b'\r');
    let e = decode(&cr).unwrap_err();
    assert_eq!((e.line, e.column), (3, 1));
    assert!(parse_bytes(b"mesh m { threads t = 4; }\n").is_ok());
}

// ---- float literals ---------------------------------------------------------------

/// d11_float_literal_overflow.mpmd, one literal at a time.
fn store_literal(lit: &str) -> String {
    format!("kernel k(y: gmem<f32[2]>) {{\n  y[0] = {lit};\n}}\n")
}

fn stored(lit: &str) -> Result<u32, (u32, u32, String)> {
    match parse(&store_literal(lit)) {
        Ok((m, _)) => match &m.kernels[0].body[0] {
            Stmt::Store {
                value: mpmd_core::ir::Expr::Lit(Literal::F32(bits)),
                ..
            } => Ok(bits.0),
            other => panic!("{other:?}"),
        },
        Err(e) => Err((e.line, e.column, e.message)),
    }
}

#[test]
fn float_literals_that_round_to_infinity_or_to_zero_are_errors() {
    assert_eq!(
        stored("1e39"),
        Err((2, 10, "float literal `1e39` is out of range for `f32` (its largest finite value is 3.4028235e38); write `inf` or `-inf` for infinity".into()))
    );
    assert_eq!(
        stored("-3.5e38").unwrap_err().2,
        "float literal `-3.5e38` is out of range for `f32` (its largest finite value is 3.4028235e38); write `inf` or `-inf` for infinity"
    );
    assert_eq!(
        stored("1e-50"),
        Err((2, 10, "float literal `1e-50` is too small for `f32`: it rounds to zero (the smallest non-zero `f32` is 1e-45); write `0.0` for zero".into()))
    );
    // Still fine: the extremes, subnormals that round to a non-zero value,
    // zeros written any way, and `inf`.
    assert_eq!(stored("3.4028235e38"), Ok(f32::MAX.to_bits()));
    assert_eq!(stored("1e-45"), Ok(1));
    assert_eq!(stored("1e-40"), Ok(1e-40f32.to_bits()));
    assert_eq!(stored("-0.0e-99"), Ok(0x8000_0000));
    assert_eq!(stored("0e5"), Ok(0));
    assert_eq!(stored("-inf"), Ok(f32::NEG_INFINITY.to_bits()));
    // Every f32 the printer writes reads back.
    for bits in [1u32, 0x0080_0000, 0x7f7f_ffff, 0x3f80_0001, 0x8000_0001] {
        let module = parse(&store_literal(&format!("f32_bits({bits:#x})")))
            .unwrap()
            .0;
        let text = print(&module);
        assert_eq!(parse(&text).unwrap().0, module, "{text}");
    }
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
