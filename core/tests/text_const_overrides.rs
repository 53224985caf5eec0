//! `text::parse_file_with`: module constants replaced before they are
//! resolved into extents, axis sizes and expressions, and the refusals of
//! overrides that name no constant, have another type or come twice.

use mpmd_core::ir::*;
use mpmd_core::text::{parse_file, parse_file_with, print, ConstOverrideError};

const TILED: &str = r#"
const THREADS: u32 = 64;
const LEN: u32 = 256;
const SCALE: f32 = 2.0;

mesh m {
  grid [b = 4];
  threads t = THREADS;
}

kernel scale(x: gmem<f32[LEN]>, y: gmem<f32[LEN]>) {
  for k: u32 in 0u..LEN / THREADS {
    let i: u32 = k * THREADS + axis_index(t);
    y[i] = x[i] * SCALE;
  }
}

map scale {
  programs [m: scale];
  inputs [x: gmem<f32[LEN]>];
  outputs [y: gmem<f32[LEN]>];
}
"#;

fn const_value(module: &Module, name: &str) -> Literal {
    module.consts.iter().find(|c| c.name == name).unwrap().value
}

#[test]
fn overrides_reach_extents_axis_sizes_and_expressions() {
    let file = parse_file_with(
        TILED,
        &[
            ("LEN", Literal::U32(1024)),
            ("THREADS", Literal::U32(128)),
            ("SCALE", Literal::f32(0.5)),
        ],
    )
    .unwrap();
    let module = &file.module;
    assert_eq!(const_value(module, "LEN"), Literal::U32(1024));
    assert_eq!(const_value(module, "THREADS"), Literal::U32(128));
    assert_eq!(const_value(module, "SCALE"), Literal::f32(0.5));
    assert_eq!(module.meshes[0].threads.size, 128);
    assert_eq!(
        module.kernels[0].params[0].ty,
        Type::Ref(gmem(ScalarType::F32, [1024]))
    );
    assert_eq!(
        module.maps[0].inputs[0].ty,
        Type::Ref(gmem(ScalarType::F32, [1024]))
    );
    // The printed module is the one written with the new values.
    let rewritten = TILED
        .replace("THREADS: u32 = 64", "THREADS: u32 = 128")
        .replace("LEN: u32 = 256", "LEN: u32 = 1024")
        .replace("SCALE: f32 = 2.0", "SCALE: f32 = 0.5");
    assert_eq!(
        print(module),
        print(&parse_file(&rewritten).unwrap().module)
    );
}

#[test]
fn no_override_is_the_plain_parse() {
    let plain = parse_file(TILED).unwrap();
    let with_none = parse_file_with(TILED, &[]).unwrap();
    assert_eq!(plain.module, with_none.module);
}

#[test]
fn an_override_naming_no_constant_is_refused_with_the_constants_declared() {
    let e = parse_file_with(TILED, &[("LENGTH", Literal::U32(8))]).unwrap_err();
    assert_eq!(
        e,
        ConstOverrideError::NoSuchConstant {
            name: "LENGTH".into(),
            declared: "THREADS, LEN, SCALE".into(),
        }
    );
    assert_eq!(
        e.to_string(),
        "the override `LENGTH` matches no constant of the module (its constants: THREADS, LEN, SCALE)"
    );
    let e = parse_file_with("mesh m { threads t = 1; }", &[("N", Literal::U32(8))]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the override `N` matches no constant of the module (its constants: none)"
    );
}

#[test]
fn an_override_of_another_type_is_refused_with_the_declaration_line() {
    let e = parse_file_with(TILED, &[("LEN", Literal::I32(1024))]).unwrap_err();
    assert_eq!(
        e,
        ConstOverrideError::TypeMismatch {
            name: "LEN".into(),
            declared: ScalarType::U32,
            given: ScalarType::I32,
            line: 3,
        }
    );
    assert_eq!(
        e.to_string(),
        "the override `LEN` is a `i32` but the constant is declared `u32` (line 3)"
    );
    let e = parse_file_with(TILED, &[("SCALE", Literal::U32(2))]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the override `SCALE` is a `u32` but the constant is declared `f32` (line 4)"
    );
}

#[test]
fn an_override_given_twice_is_refused() {
    let e = parse_file_with(
        TILED,
        &[("LEN", Literal::U32(8)), ("LEN", Literal::U32(16))],
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "the constant `LEN` is overridden twice");
}

#[test]
fn a_syntax_error_comes_before_the_overrides_are_judged() {
    let broken = TILED.replace("grid [b = 4];", "grid [b = 4]");
    let e = parse_file_with(&broken, &[("NOPE", Literal::U32(1))]).unwrap_err();
    let ConstOverrideError::Parse(parse_error) = &e else {
        panic!("expected a parse error, got {e:?}");
    };
    assert_eq!(parse_error.line, 7, "{parse_error}");
    assert_eq!(e.to_string(), parse_error.to_string());
}
