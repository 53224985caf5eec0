//! A hand-written file, its exact canonical print, and canonical printing of
//! literals and parenthesisation.

use mpmd_core::case::{CaseSpec, CompareMode, Expectation, Generator};
use mpmd_core::ir::*;
use mpmd_core::text::{
    parse, parse_expr, parse_file, print, print_expr, print_file, print_literal, print_stmt,
    print_type,
};
use mpmd_core::ErrorClass;

/// Written loosely: sugar (`else if`, hex, `n-1u`, redundant parentheses,
/// comments, trailing commas, lists out of order) that the printer normalises.
const HAND_WRITTEN: &str = r#"
// A producer/consumer pipeline.
mesh consumer { grid [b = 4]; threads t = 64; }
mesh producer {
  grid [bx = 4, by = 2,];
  cluster [cx = 2];
  threads t = 128;
}

kernel produce(x: gmem<f32[1024]>, y: gmem<f32[1024]>, n: u32, ready: sem<[4]> @ consumer) {
  let i: u32 = (axis_index(bx) * axis_size(t)) + axis_index(t);
  if i < n { y[i] = x[i] * 2.0; }
  else if i == 0x10u { barrier; }
  else { var acc: f32 = -0.0; acc = acc - -1.0; }
  for k: u32 in 0u..n-1u {
    let old: u32 = atomic_add(y@[0u, 1u][k], 1u);
    signal(ready@[k][0], 1);
  }
}

resident hand: gmem<f32[256]> @ ext zeroed;

map pipeline {
  outputs [y: gmem<f32[1024]> zeroed];
  programs [producer: produce];
  inputs [x: gmem<f32[1024]>];
  scalars [n: u32];
  scratch [ready: sem<[4]> @ consumer, hand: gmem<f32[256]> @ ext resident zeroed];
  debug;
}

call pipeline(n = 256u);
case {
  generate x = uniform(-1.0, 1.0);
  compare y = ulp(2);
  tags [stress];
}
"#;

const CANONICAL: &str = "\
mesh consumer {
  grid [b = 4];
  threads t = 64;
}

mesh producer {
  grid [bx = 4, by = 2];
  cluster [cx = 2];
  threads t = 128;
}

resident hand: gmem<f32[256]> @ ext zeroed;

kernel produce(x: gmem<f32[1024]>, y: gmem<f32[1024]>, n: u32, ready: sem<[4]> @ consumer) {
  let i: u32 = axis_index(bx) * axis_size(t) + axis_index(t);
  if i < n {
    y[i] = x[i] * 2.0;
  } else {
    if i == 16u {
      barrier;
    } else {
      var acc: f32 = -0.0;
      acc = acc - (-1.0);
    }
  }
  for k: u32 in 0u..n - 1u {
    let old: u32 = atomic_add(y@[0u, 1u][k], 1u);
    signal(ready@[k][0], 1);
  }
}

map pipeline {
  programs [producer: produce];
  inputs [x: gmem<f32[1024]>];
  outputs [y: gmem<f32[1024]> zeroed];
  scalars [n: u32];
  scratch [ready: sem<[4]> @ consumer, hand: gmem<f32[256]> @ ext zeroed resident];
  debug;
}

call pipeline(n = 256u);

case {
  generate x = uniform(-1.0, 1.0);
  compare y = ulp(2);
  expect ok;
  tags [stress];
}
";

#[test]
fn hand_written_file_prints_canonically_and_round_trips() {
    let file = parse_file(HAND_WRITTEN).unwrap_or_else(|e| panic!("{}", e.render("hand")));
    let (module, case) = (file.module, file.case);
    assert_eq!(print_file(&module, case.as_ref()), CANONICAL);
    let reparsed = parse_file(CANONICAL).unwrap();
    assert_eq!(
        (reparsed.module, reparsed.case),
        (module.clone(), case.clone())
    );
    assert_eq!(module.meshes[1].cluster[0].size, 2);
    assert!(module.maps[0].scratch[1].zeroed);
    assert!(module.maps[0].scratch[1].resident);
    assert_eq!(
        case,
        Some(CaseSpec {
            generators: vec![(
                "x".into(),
                Generator::Uniform {
                    lo: Literal::f32(-1.0),
                    hi: Literal::f32(1.0)
                }
            )],
            compares: vec![("y".into(), CompareMode::Ulp(2))],
            expect: Expectation::Ok,
            tags: vec!["stress".into()],
        })
    );
}

/// The case section is test data beside the module: `parse` reads it (it
/// must be well formed) and leaves it out, `print` prints the module alone.
#[test]
fn the_module_alone_leaves_the_case_section_out() {
    let (module, source_map) = parse(CANONICAL).unwrap();
    assert_eq!(module, parse_file(CANONICAL).unwrap().module);
    let case_at = CANONICAL.find("case {").unwrap();
    assert_eq!(print(&module), CANONICAL[..case_at - 1]);
    assert_eq!(print_file(&module, None), print(&module));
    // The section's span is still recorded, for diagnostics about it.
    let span = source_map.span_of(&IrPath(vec![PathStep::Case])).unwrap();
    assert_eq!(span.start, case_at);
    let broken = CANONICAL.replace("expect ok;", "expect maybe;");
    assert_eq!(
        parse(&broken).unwrap_err().message,
        "expected an expectation (`ok`, `fails(class)` or `reject(code)`), found `maybe`"
    );
}

#[test]
fn empty_module_prints_as_nothing() {
    assert_eq!(print(&Module::default()), "");
    assert_eq!(parse("// nothing\n").unwrap().0, Module::default());
}

fn lit(l: Literal) -> String {
    print_literal(l)
}

#[test]
fn literal_edge_values() {
    assert_eq!(lit(Literal::f32(1.0)), "1.0");
    assert_eq!(lit(Literal::f32(-0.0)), "-0.0");
    assert_eq!(lit(Literal::f32(0.1)), "0.1");
    assert_eq!(lit(Literal::f32(1e-45)), "1e-45");
    assert_eq!(lit(Literal::f32(1e16)), "1e16");
    assert_eq!(lit(Literal::f32(f32::MAX)), "3.4028235e38");
    assert_eq!(lit(Literal::f32(f32::INFINITY)), "inf");
    assert_eq!(lit(Literal::f32(f32::NEG_INFINITY)), "-inf");
    assert_eq!(lit(Literal::F32(F32Bits(0x7fc0_0000))), "nan");
    assert_eq!(
        lit(Literal::F32(F32Bits(0x7fc0_0001))),
        "f32_bits(0x7fc00001)"
    );
    assert_eq!(
        lit(Literal::F32(F32Bits(0xffc0_0000))),
        "f32_bits(0xffc00000)"
    );
    assert_eq!(lit(Literal::I32(i32::MIN)), "-2147483648");
    assert_eq!(lit(Literal::U32(u32::MAX)), "4294967295u");
    assert_eq!(lit(Literal::Bool(false)), "false");

    let parsed = |s: &str| match parse_expr(s).unwrap() {
        Expr::Lit(l) => l,
        other => panic!("`{s}` parsed as {other:?}"),
    };
    assert_eq!(parsed("-0.0"), Literal::F32(F32Bits(0x8000_0000)));
    assert_eq!(parsed("1e-45"), Literal::F32(F32Bits(1)));
    assert_eq!(parsed("-nan"), Literal::F32(F32Bits(0xffc0_0000)));
    assert_eq!(parsed("-2147483648"), Literal::I32(i32::MIN));
    assert_eq!(parsed("0xFFFFFFFFu"), Literal::U32(u32::MAX));
    assert_eq!(parsed("-0x10"), Literal::I32(-16));
    assert_eq!(parsed("2.5e-3"), Literal::f32(2.5e-3));
    assert_eq!(parsed("1e10"), Literal::f32(1e10));
}

#[test]
fn parenthesisation_is_minimal_and_canonical() {
    let (a, b, c) = (var("a"), var("b"), var("c"));
    let cases: Vec<(Expr, &str)> = vec![
        (a.clone() - b.clone() - c.clone(), "a - b - c"),
        (a.clone() - (b.clone() - c.clone()), "a - (b - c)"),
        (a.clone() + b.clone() * c.clone(), "a + b * c"),
        ((a.clone() + b.clone()) * c.clone(), "(a + b) * c"),
        (a.clone() - Expr::from(-1), "a - (-1)"),
        (Expr::from(-1) - a.clone(), "-1 - a"),
        (-Expr::from(1), "-(1)"),
        (-Expr::from(-1.0f32), "-(-1.0)"),
        (-(a.clone() + b.clone()), "-(a + b)"),
        (-a.clone() * b.clone(), "-a * b"),
        (a.clone().lt(b.clone()).eq(c.clone()), "(a < b) == c"),
        (a.clone().lt(b.clone()).and(!c.clone()), "a < b && !c"),
        (a.clone().or(b.clone()).and(c.clone()), "(a || b) && c"),
        ((a.clone() | b.clone()) ^ c.clone(), "(a | b) ^ c"),
        (a.clone() | b.clone() ^ c.clone(), "a | b ^ c"),
        ((a.clone() << b.clone()) + c.clone(), "(a << b) + c"),
        (a.clone() << (b.clone() + c.clone()), "a << b + c"),
        (
            select(
                a.clone(),
                b.clone().bitcast(ScalarType::F32),
                c.clone().cast(ScalarType::I32),
            ),
            "select(a, bitcast<f32>(b), i32(c))",
        ),
        (math(MathFn::Fma, [a.clone(), b, c]), "fma(a, b, c)"),
    ];
    for (expr, text) in cases {
        assert_eq!(print_expr(&expr), text);
        assert_eq!(parse_expr(text).unwrap(), expr, "parsing `{text}`");
    }
    // Accepted sugar: `n-1` is a subtraction, not `n` followed by `-1`.
    assert_eq!(parse_expr("n-1").unwrap(), var("n") - Expr::from(1));
    assert_eq!(parse_expr("- 1").unwrap(), -Expr::from(1));
}

#[test]
fn statements_and_types_print_on_their_own() {
    let stmt = Stmt::For {
        var: Binding {
            name: "k".into(),
            ty: ScalarType::U32,
        },
        start: 0u32.into(),
        end: var("n"),
        body: vec![Stmt::Barrier],
    };
    assert_eq!(print_stmt(&stmt), "for k: u32 in 0u..n {\n  barrier;\n}");
    let ty: Type = sem([2, 3]).owned_by("m").into();
    assert_eq!(print_type(&ty), "sem<[2, 3]> @ m");
    assert_eq!(
        print_type(&gmem(ScalarType::F32, [4]).into()),
        "gmem<f32[4]>"
    );
}

/// The item examples in docs/text-format.md parse, and those without
/// comments are already in canonical form.
#[test]
fn examples_in_the_format_doc_are_canonical() {
    let doc = include_str!("../../docs/text-format.md");
    let mut checked = 0;
    for block in doc.split("```").skip(1).step_by(2) {
        let block = block.trim_start_matches('\n');
        let first_word = block.split_whitespace().next().unwrap_or("");
        if !["mesh", "resident", "kernel", "map", "call", "case"].contains(&first_word) {
            continue;
        }
        let file = parse_file(block).unwrap_or_else(|e| panic!("{}", e.render("doc")));
        if !block.contains("//") {
            assert_eq!(print_file(&file.module, file.case.as_ref()), block);
        }
        checked += 1;
    }
    assert_eq!(checked, 6);
}

#[test]
fn every_operator_function_and_case_option_round_trips() {
    let (a, b, c) = (var("a"), var("b"), var("c"));
    let mut exprs: Vec<Expr> = Vec::new();
    for op in BinaryOp::ALL {
        let inner = Expr::Binary(op, Box::new(a.clone()), Box::new(b.clone()));
        exprs.push(Expr::Binary(
            op,
            Box::new(inner.clone()),
            Box::new(c.clone()),
        ));
        exprs.push(Expr::Binary(op, Box::new(c.clone()), Box::new(inner)));
    }
    for op in UnaryOp::ALL {
        exprs.push(Expr::Unary(op, Box::new(a.clone() + b.clone())));
        exprs.push(Expr::Unary(op, Box::new(Expr::from(-1))));
    }
    for f in MathFn::ALL {
        exprs.push(math(f, vec![a.clone(); f.arity()]));
    }
    for ty in ScalarType::ALL {
        exprs.push(a.clone().cast(ty));
        exprs.push(a.clone().bitcast(ty));
    }
    let mut body: Vec<Stmt> = exprs
        .into_iter()
        .map(|value| Stmt::Let {
            var: Binding {
                name: "v".into(),
                ty: ScalarType::U32,
            },
            value,
        })
        .collect();
    for op in AtomicOp::ALL {
        body.push(Stmt::Atomic {
            dest: op.returns_value().then(|| Binding {
                name: "old".into(),
                ty: ScalarType::I32,
            }),
            op,
            target: at("c", [Expr::from(0u32)]),
            args: vec![Expr::from(1); op.arity()],
        });
    }
    for op in SemOp::ALL {
        body.push(Stmt::Sem {
            op,
            sem: at_block("s", [axis_index("b")], [Expr::from(0u32)]),
            amount: 1.into(),
        });
    }
    let generators = [
        Generator::Uniform {
            lo: Literal::f32(-1.0),
            hi: Literal::f32(1.0),
        },
        Generator::NonZero {
            lo: Literal::I32(i32::MIN),
            hi: Literal::I32(i32::MAX),
        },
        Generator::Special,
        Generator::Constant(Literal::U32(u32::MAX)),
        Generator::Iota,
        Generator::IndexInto {
            operand: "x".into(),
            dim: 1,
        },
    ];
    let compares = [
        CompareMode::Exact,
        CompareMode::Ulp(4),
        CompareMode::Profile,
        CompareMode::Multiset,
        CompareMode::Ignore,
        CompareMode::Mma,
    ];
    let mut expectations: Vec<Expectation> = ErrorClass::ALL
        .into_iter()
        .map(Expectation::Fails)
        .collect();
    expectations.extend([Expectation::Ok, Expectation::Reject("E0007".into())]);
    for expect in expectations {
        let module = Module {
            kernels: vec![Kernel {
                name: "k".into(),
                params: vec![],
                body: body.clone(),
            }],
            ..Module::default()
        };
        let case = CaseSpec {
            generators: generators
                .iter()
                .map(|g| ("x".to_string(), g.clone()))
                .collect(),
            compares: compares
                .iter()
                .map(|m| ("y".to_string(), m.clone()))
                .collect(),
            expect,
            tags: vec!["t".into()],
        };
        let text = print_file(&module, Some(&case));
        let parsed = parse_file(&text).unwrap();
        assert_eq!((parsed.module, parsed.case), (module, Some(case)), "{text}");
    }
}
