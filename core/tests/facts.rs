//! Validation returns each program's facts with its expanded kernel
//! (`ValidModule`): operand accesses, uniformity, name types. The lowering
//! copies them into the plan (it computes none: `xtask/tests/architecture.rs`).

use mpmd_core::ir::{BinaryOp, Expr, ScalarType};
use mpmd_core::plan::{lower, OperandId};
use mpmd_core::text::parse;
use mpmd_core::validate::{validate, OperandAccess, ValidateOptions};

const SOURCE: &str = r#"
mesh m {
  grid [b = 2];
  threads t = 32;
}

kernel produce(x: gmem<f32[64]>, y: gmem<f32[64]>, hits: gmem<u32[1]>, ready: sem<[1]>, n: u32) {
  let i: u32 = axis_index(b) * 32u + axis_index(t);
  let row: u32 = axis_index(b) * n;
  var acc: f32 = x[i];
  if i < n {
    acc = acc * 2.0;
  }
  y[i] = acc;
  let old: u32 = atomic_add(hits[0], 1u);
  signal(ready[0], 1);
}

kernel consume(y: gmem<f32[64]>, ready: sem<[1]>, out: gmem<i32[1]>) {
  wait(ready[0], 2);
  let seen: i32 = read(ready[0]);
  out[0] = seen;
}

map both {
  programs [m: produce, m: consume];
  inputs [x: gmem<f32[64]>];
  outputs [y: gmem<f32[64]>, hits: gmem<u32[1]>, out: gmem<i32[1]>];
  scalars [n: u32];
  scratch [ready: sem<[1]>];
}
"#;

fn access(f: impl FnOnce(&mut OperandAccess)) -> OperandAccess {
    let mut a = OperandAccess::default();
    f(&mut a);
    a
}

#[test]
fn validation_reports_each_programs_operand_accesses_in_operand_order() {
    let (module, _) = parse(SOURCE).expect("parses");
    let info = validate(&module, &ValidateOptions::default()).expect("valid");
    let map = info.valid_map("both").expect("map facts");
    // Operands: x, y, hits, out, n, ready.
    let none = OperandAccess::default();
    let produce = map.programs()[0].facts();
    assert_eq!(
        produce.accesses,
        vec![
            access(|a| a.loaded = true),
            access(|a| a.stored = true),
            access(|a| a.atomic = true),
            none,
            none,
            access(|a| a.signalled = true),
        ]
    );
    assert_eq!(
        (produce.signals.clone(), produce.waits.clone()),
        (vec![OperandId::new(5)], vec![])
    );
    let consume = map.programs()[1].facts();
    assert_eq!(
        consume.accesses,
        vec![
            none,
            none,
            none,
            access(|a| a.stored = true),
            none,
            access(|a| {
                a.waited = true;
                a.read = true;
            }),
        ]
    );
    assert_eq!(
        (consume.signals.clone(), consume.waits.clone()),
        (vec![], vec![OperandId::new(5)])
    );
    let ready = OperandId::new(5);
    assert!(consume.access(ready).is_atomic() && consume.access(ready).writes());
    assert!(!produce.accesses[0].writes());
}

#[test]
fn uniformity_and_types_are_facts_of_the_program() {
    let (module, _) = parse(SOURCE).expect("parses");
    let info = validate(&module, &ValidateOptions::default()).expect("valid");
    let produce = info.valid_map("both").unwrap().programs()[0].facts();
    let u = &produce.uniformity;
    assert!(u.is_nonuniform_name("i"), "thread index");
    assert!(!u.is_nonuniform_name("row"), "block index times a scalar");
    assert!(u.is_nonuniform_name("acc"), "assigned under `if i < n`");
    assert!(u.is_nonuniform_name("old"), "an atomic's result");
    assert_eq!(
        u.reason(&Expr::Var("i".into())).as_deref(),
        Some("`i` is not block-uniform")
    );
    assert!(u.is_uniform(&Expr::Binary(
        BinaryOp::Add,
        Box::new(Expr::Var("row".into())),
        Box::new(Expr::Var("n".into())),
    )));
    assert_eq!(
        produce.type_of(&Expr::Var("acc".into())),
        Ok(ScalarType::F32)
    );
    assert_eq!(
        produce.type_of(&Expr::Var("old".into())),
        Ok(ScalarType::U32)
    );
    let consume = info.valid_map("both").unwrap().programs()[1].facts();
    assert_eq!(
        consume.type_of(&Expr::Var("seen".into())),
        Ok(ScalarType::I32)
    );
}

#[test]
fn the_lowering_marks_the_buffers_the_facts_access_atomically() {
    let (module, _) = parse(SOURCE).expect("parses");
    let valid = validate(&module, &ValidateOptions::default()).expect("valid");
    let plan = lower(&valid, "both").expect("lowers");
    let atomic: Vec<(String, bool)> = plan
        .buffers
        .iter()
        .map(|b| (b.operands.join("="), b.atomic))
        .collect();
    assert_eq!(
        atomic,
        vec![
            ("x".to_string(), false),
            ("y".to_string(), false),
            ("hits".to_string(), true),
            ("out".to_string(), false),
            ("ready".to_string(), true),
        ]
    );
}
