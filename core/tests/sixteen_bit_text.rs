//! f16 and bf16 in the text format and validation: literals, casts, bitcasts,
//! typing errors with their fixes.

use mpmd_core::ir::{Expr, Literal, ScalarType};
use mpmd_core::text::{parse, parse_expr, print_expr, print_literal};
use mpmd_core::validate::{validate, ValidateOptions};

fn lit(src: &str) -> Literal {
    match parse_expr(src).unwrap_or_else(|e| panic!("{src}: {e:?}")) {
        Expr::Lit(l) => l,
        other => panic!("{src} is not a literal: {other:?}"),
    }
}

fn lex_error(src: &str) -> String {
    parse_expr(src).unwrap_err().message
}

#[test]
fn literals_round_to_nearest_even_once_and_print_shortest() {
    assert_eq!(lit("1.5f16"), Literal::F16(0x3e00));
    assert_eq!(lit("-0.0bf16"), Literal::BF16(0x8000));
    assert_eq!(
        lit("1f16"),
        Literal::F16(0x3c00),
        "digits alone with a suffix"
    );
    assert_eq!(lit("65504f16"), Literal::F16(0x7bff));
    // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even.
    assert_eq!(lit("1.00048828125f16"), Literal::F16(0x3c00));
    assert_eq!(lit("1.00146484375f16"), Literal::F16(0x3c02));
    assert_eq!(
        lit("5.9604645e-8f16"),
        Literal::F16(0x0001),
        "smallest subnormal"
    );
    assert_eq!(lit("f16_bits(0x7c00)"), Literal::F16(0x7c00));
    assert_eq!(lit("bf16_bits(0xffc1)"), Literal::BF16(0xffc1));
    assert_eq!(lit("0.1bf16"), Literal::BF16(0x3dcd));
    for (bits, text) in [
        (Literal::F16(0x2e66), "0.1f16"),
        (Literal::F16(0x3c00), "1.0f16"),
        (Literal::F16(0x8000), "-0.0f16"),
        (Literal::F16(0x0001), "6e-8f16"),
        (Literal::F16(0x7bff), "65500.0f16"),
        (Literal::F16(0x7c00), "f16_bits(0x7c00)"),
        (Literal::F16(0xfe00), "f16_bits(0xfe00)"),
        (Literal::BF16(0x3dcd), "0.1bf16"),
        (Literal::BF16(0x7f7f), "3.39e38bf16"),
        (Literal::BF16(0x0001), "9e-41bf16"),
        (Literal::BF16(0xff80), "bf16_bits(0xff80)"),
    ] {
        assert_eq!(print_literal(bits), text);
        assert_eq!(lit(text), bits, "{text} reads back");
    }
}

#[test]
fn every_16bit_pattern_round_trips() {
    for bits in 0..=u16::MAX {
        for l in [Literal::F16(bits), Literal::BF16(bits)] {
            let text = print_literal(l);
            assert_eq!(lit(&text), l, "{text}");
        }
    }
}

#[test]
fn literal_errors_name_the_range_and_the_fix() {
    assert_eq!(
        lex_error("65520.0f16"),
        "float literal `65520.0f16` is out of range for `f16` (its largest finite value is 6.5504e4); write `f16(inf)` for infinity"
    );
    assert_eq!(
        lex_error("1e-9f16"),
        "float literal `1e-9f16` is too small for `f16`: it rounds to zero (the smallest non-zero `f16` is 5.9604645e-8); write `0.0f16` for zero"
    );
    assert_eq!(
        lex_error("f16_bits(0x10000)"),
        "the bit pattern `0x10000` of `f16_bits` does not fit in 16 bits"
    );
    assert_eq!(
        lex_error("1.0f17"),
        "invalid suffix `f17` on number `1.0f17`"
    );
}

#[test]
fn casts_and_bitcasts_print_and_parse() {
    for src in [
        "f16(x) + f16(1.0)",
        "f32(h) * 2.0",
        "bf16(i32(h))",
        "bitcast<u32>(h)",
        "bitcast<f16>(u)",
        "bitcast<bf16>(h)",
        "fma(h, h, 1.0f16)",
    ] {
        let e = parse_expr(src).unwrap();
        assert_eq!(print_expr(&e), src);
    }
}

const KERNEL: &str = "
mesh m { grid [b = 2]; threads t = 32; }
kernel k(x: gmem<f16[64]>, w: gmem<bf16[64]>, y: gmem<f32[64]>, z: gmem<bf16[64]>, s: bf16) {
  let i: u32 = axis_index(b) * 32u + axis_index(t);
  BODY
}
map k {
  programs [m: k];
  inputs [x: gmem<f16[64]>, w: gmem<bf16[64]>];
  outputs [y: gmem<f32[64]>, z: gmem<bf16[64]>];
  scalars [s: bf16];
}
";

fn check(body: &str) -> Result<(), Vec<mpmd_core::validate::Diagnostic>> {
    let src = KERNEL.replace("BODY", body);
    let (module, _) = parse(&src).unwrap_or_else(|e| panic!("{e:?}"));
    validate(&module, &ValidateOptions::default()).map(|_| ())
}

fn one_error(body: &str) -> (String, String, String) {
    let diags = check(body).expect_err("must be rejected");
    assert_eq!(diags.len(), 1, "{diags:#?}");
    let d = &diags[0];
    (d.code.to_string(), d.message.clone(), d.help.clone())
}

#[test]
fn mixed_precision_kernels_validate() {
    check(
        "let a: f32 = f32(x[i]) * f32(w[i]);
  y[i] = fma(a, 2.0, f32(s));
  z[i] = bf16(a) + s;
  let bits: u32 = bitcast<u32>(x[i]);
  z[i] = select(bits > 0u, bitcast<bf16>(x[i]), -s);",
    )
    .unwrap();
}

#[test]
fn no_implicit_widening_and_the_fix_names_the_cast() {
    let (code, message, help) = one_error("y[i] = x[i] + 1.0;");
    assert_eq!(code, "E0037");
    assert_eq!(
        message,
        "operands of `+` have different types: `f16` and `f32`, in `x[i] + 1.0` in kernel `k`"
    );
    assert_eq!(
        help,
        "there is no implicit widening: write `f32(x)` around the `f16` operand to compute in `f32`, or `f16(x)` around the other to round it to `f16`"
    );
    let (code, message, _) = one_error("z[i] = w[i] * x[i];");
    assert_eq!(code, "E0037");
    assert!(message.contains("`bf16` and `f16`"), "{message}");
}

#[test]
fn bitcast_between_sizes_is_rejected_with_the_rule() {
    let (code, message, help) = one_error("y[i] = bitcast<f32>(x[i]);");
    assert_eq!(code, "E0037");
    assert_eq!(
        message,
        "`bitcast<f32>` of a `f16`: an `f32` and a 16-bit float differ in size; bitcast between `f32`, `i32` and `u32`, between `f16` and `bf16`, or between a 16-bit float and the low half of an `i32` or `u32`, in `bitcast<f32>(x[i])` in kernel `k`"
    );
    assert_eq!(
        help,
        "convert the value with a cast such as `f32(x)` first, then bitcast"
    );
}

#[test]
fn atomics_on_16bit_refs_are_rejected() {
    let (code, message, _) = one_error("let old: bf16 = atomic_add(z[i], s);");
    assert_eq!(code, "E0050");
    assert!(message.contains("whose elements are `bf16`"), "{message}");
}

#[test]
fn sixteen_bit_types_are_scalar_types() {
    assert!(ScalarType::F16.is_16bit() && ScalarType::BF16.is_float());
    assert_eq!(ScalarType::BF16.byte_size(), 2);
    assert_eq!(ScalarType::F32.byte_size(), 4);
}
