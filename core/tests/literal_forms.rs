//! 16-bit special values written as casts where only a literal may stand
//! (`call` lines, constants, case lines), and shift amounts of the other
//! integer type (`i32 << u32`, `u32 >> i32`).

#![allow(clippy::result_large_err)]

mod common;
use common::module;
use mpmd_core::backend::Mode;
use mpmd_core::ir::{Expr, Literal};
use mpmd_core::text::{parse, parse_file, print};
use mpmd_core::validate::{validate, ValidateOptions};
use mpmd_core::HostTensor;

const CALLS: &str = "
const BIG: bf16 = bf16(-inf);
mesh m {
  threads t = 32;
}
kernel k(y: gmem<f32[32]>, a: f16, b: bf16) {
  y[axis_index(t)] = f32(a) + f32(b) + f32(BIG);
}
map mm {
  programs [m: k];
  outputs [y: gmem<f32[32]>];
  scalars [a: f16, b: bf16];
}
call mm(a = f16(inf), b = bf16(nan));
call mm(a = f16(-inf), b = bf16(inf));
case {
  generate y = constant(f16(nan));
}
";

#[test]
fn sixteen_bit_specials_written_as_casts_are_literals_in_calls_constants_and_cases() {
    let m = module(CALLS);
    assert_eq!(m.consts[0].value, Literal::BF16(0xff80));
    assert_eq!(
        m.calls[0].scalars,
        [
            ("a".to_string(), Literal::F16(0x7c00)),
            ("b".to_string(), Literal::BF16(0x7fc0))
        ]
    );
    assert_eq!(
        m.calls[1].scalars,
        [
            ("a".to_string(), Literal::F16(0xfc00)),
            ("b".to_string(), Literal::BF16(0x7f80))
        ]
    );
    // The printer writes them by their bits; they read back the same.
    let text = print(&m);
    assert!(
        text.contains("call mm(a = f16_bits(0x7c00), b = bf16_bits(0x7fc0));"),
        "{text}"
    );
    assert_eq!(module(&text), m);
    assert!(parse_file(CALLS).unwrap().case.is_some());
    // In an expression the form stays the cast of the f32 value.
    let kernel = "mesh m { threads t = 32; }
kernel k(y: gmem<f16[32]>) { y[axis_index(t)] = f16(inf); }";
    let (m, _) = parse(kernel).unwrap();
    let mpmd_core::ir::Stmt::Store { value, .. } = &m.kernels[0].body[0] else {
        panic!("a store");
    };
    assert!(matches!(value, Expr::Cast(..)), "{value:?}");
    // Finite values keep their suffix form.
    let e = parse(&CALLS.replace("a = f16(inf)", "a = f16(1.5)")).unwrap_err();
    assert_eq!(
        e.message,
        "`f16(...)` as a literal takes `inf`, `-inf` or `nan`; write a finite value with the suffix (`1.5f16`)"
    );
}

const SHIFTS: &str = "
mesh m {
  threads t = 32;
}
kernel k(x: gmem<i32[8]>, s: gmem<i32[8]>, a: gmem<i32[8]>, b: gmem<i32[8]>, c: gmem<u32[8]>, d: gmem<u32[8]>) {
  let i: u32 = axis_index(t);
  if i < 8u {
    let n: i32 = s[i];
    a[i] = x[i] << bitcast<u32>(n);
    b[i] = x[i] >> bitcast<u32>(n);
    c[i] = bitcast<u32>(x[i]) << n;
    var w: u32 = bitcast<u32>(x[i]);
    w >>= n;
    d[i] = w;
  }
}
map sh {
  programs [m: k];
  inputs [x: gmem<i32[8]>, s: gmem<i32[8]>];
  outputs [a: gmem<i32[8]>, b: gmem<i32[8]>, c: gmem<u32[8]>, d: gmem<u32[8]>];
}
";

#[test]
fn a_shift_amount_of_the_other_integer_type_shifts_by_its_bits_modulo_32() {
    let m = module(SHIFTS);
    validate(&m, &ValidateOptions::default()).expect("valid");
    let x = [-8i32, 1, -1, i32::MIN, 5, 3, -2, 7];
    // -1 is 31 modulo 32, 33 is 1, -32 is 0.
    let s = [1i32, 33, -1, 31, 0, -32, 2, 34];
    for mode in [Mode::Fast, Mode::Checked] {
        let out = common::run_with_schedules(
            &m,
            "sh",
            &[
                ("x", HostTensor::from_i32(vec![8], &x)),
                ("s", HostTensor::from_i32(vec![8], &s)),
            ],
            mode,
            2,
        )
        .unwrap();
        assert_eq!(
            out.outputs["a"].to_i32(),
            [-16, 2, i32::MIN, 0, 5, 3, -8, 28]
        );
        assert_eq!(out.outputs["b"].to_i32(), [-4, 0, -1, -1, 5, 3, -1, 1]);
        assert_eq!(
            out.outputs["c"].to_u32(),
            [0xffff_fff0, 2, 0x8000_0000, 0, 5, 3, 0xffff_fff8, 28]
        );
        assert_eq!(
            out.outputs["d"].to_u32(),
            [0x7fff_fffc, 0, 1, 1, 5, 3, 0x3fff_ffff, 1]
        );
    }
    // Floats are still refused as amounts, and the result is the left
    // operand's type.
    let bad = SHIFTS.replace("x[i] << bitcast<u32>(n)", "x[i] << 1.0");
    assert_eq!(common::codes(&bad), ["E0037"]);
    let wrong = SHIFTS.replace("c[i] = bitcast<u32>(x[i]) << n;", "c[i] = n << 1u;");
    assert_eq!(common::codes(&wrong), ["E0041"]);
}
