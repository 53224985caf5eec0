//! The interpreter on `f16` and `bf16`: every operation and cast against
//! `mpmd_core::numerics` on special values, packed memory (2 bytes an
//! element) without lost writes on every schedule, and detection per element.

#![allow(clippy::result_large_err)]

use mpmd_core::interp::{InterpOptions, Interpreter, ScheduleTolerance};
use mpmd_core::ir::{Literal, Module, ScalarType};
use mpmd_core::numerics;
use mpmd_core::validate::{validate, ValidateOptions};
use mpmd_core::{CallArgs, CallOutputs, HostTensor, RunError};

use ScalarType::{Bool, BF16, F16, F32, I32, U32};

const THREADS: usize = 256;

fn parse(src: &str) -> Module {
    let module = mpmd_core::text::parse(src)
        .unwrap_or_else(|e| panic!("{e:?}\n{src}"))
        .0;
    if let Err(diags) = validate(&module, &ValidateOptions::default()) {
        panic!("{diags:?}\n{src}");
    }
    module
}

fn opts(detect: bool, extra_schedules: u32) -> InterpOptions {
    InterpOptions {
        detect,
        extra_schedules,
        ..Default::default()
    }
}

fn flushing() -> InterpOptions {
    InterpOptions {
        flush_subnormals: true,
        ..opts(true, 0)
    }
}

fn call(
    m: &Module,
    inputs: Vec<(&str, HostTensor)>,
    scalars: &[(&str, Literal)],
    o: &InterpOptions,
) -> Result<CallOutputs, RunError> {
    let args = CallArgs {
        inputs: inputs
            .into_iter()
            .map(|(n, t)| (n.to_string(), t))
            .collect(),
        scalars: scalars.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
    };
    Interpreter::new().call(&validated(m), &m.maps[0].name, &args, o)
}

/// Special values of a 16-bit type, as bits: ±0, the smallest and largest
/// subnormals, the smallest normal, ±1 and their neighbours, the largest
/// finite, ±inf, NaN, and a few ordinary values.
fn specials(ty: ScalarType) -> Vec<u32> {
    let v: &[u16] = match ty {
        F16 => &[
            0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x3c01, 0x3bff, 0x3e00,
            0x4000, 0x3555, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x4248, 0xc500, 0x4100, 0xc100,
        ],
        _ => &[
            0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80, 0xbf80, 0x3f81, 0x3f7f, 0x3fc0,
            0x4000, 0x3eab, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x4049, 0xc0a0, 0x4020, 0xc020,
        ],
    };
    v.iter().map(|&b| u32::from(b)).collect()
}

fn wide(ty: ScalarType, bits: u32) -> f32 {
    numerics::to_f32(ty, bits as u16).expect("a 16-bit type")
}

fn round(ty: ScalarType, v: f32) -> u32 {
    u32::from(numerics::from_f32(ty, v).expect("a 16-bit type"))
}

/// What an adapter that flushes f32 subnormals sees (`flush_subnormals`).
fn flush(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else {
        v
    }
}

/// Equal bits, or both NaN of `ty` (NaN payloads are unspecified).
fn same(ty: ScalarType, got: u32, want: u32) -> bool {
    let nan = |b: u32| Literal::from_bits(ty, b).as_f32().is_some_and(f32::is_nan);
    got == want || (ty.is_float() && nan(got) && nan(want))
}

fn text(ty: ScalarType) -> String {
    ty.to_string()
}

/// Runs `y[i] = expr` over one element per thread, the inputs given as one
/// value per element (bits; 16-bit values in the low half). Returns `y`'s
/// elements as bits.
fn elementwise(
    inputs: &[(&str, ScalarType, &[u32])],
    out: ScalarType,
    expr: &str,
    o: &InterpOptions,
) -> Vec<u32> {
    let len = inputs[0].2.len();
    let n = len.div_ceil(THREADS) * THREADS;
    let decl = |name: &str, ty: ScalarType| format!("{name}: gmem<{}[{n}]>", text(ty));
    let params: Vec<String> = inputs.iter().map(|(name, ty, _)| decl(name, *ty)).collect();
    let params = params.join(", ");
    let src = format!(
        "mesh m {{ grid [b = {blocks}]; threads t = {THREADS}; }}
kernel k({params}, {y}) {{
  let i: u32 = axis_index(b) * axis_size(t) + axis_index(t);
  y[i] = {expr};
}}
map m {{ programs [m: k]; inputs [{params}]; outputs [{y}]; }}
",
        blocks = n / THREADS,
        y = decl("y", out),
    );
    let m = parse(&src);
    let tensors = inputs
        .iter()
        .map(|(name, ty, values)| {
            let mut bits = values.to_vec();
            bits.resize(n, values[0]);
            (*name, HostTensor::new(*ty, vec![n as u32], bits).unwrap())
        })
        .collect();
    let out = call(&m, tensors, &[], o).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let mut y = out.outputs["y"].to_bits();
    y.truncate(len);
    y
}

/// Every pair of specials, as two columns.
fn pairs(ty: ScalarType) -> (Vec<u32>, Vec<u32>) {
    let s = specials(ty);
    s.iter()
        .flat_map(|&a| s.iter().map(move |&b| (a, b)))
        .unzip()
}

fn check_all(what: &str, ty: ScalarType, got: &[u32], want: &[u32], operands: &[&[u32]]) {
    for (k, (&g, &w)) in got.iter().zip(want).enumerate() {
        let args: Vec<String> = operands.iter().map(|o| format!("{:#06x}", o[k])).collect();
        assert!(
            same(ty, g, w),
            "{what} on {ty} {args:?}: got {g:#06x}, want {w:#06x}"
        );
    }
}

type Binary = fn(f32, f32) -> f32;

fn arithmetic() -> [(&'static str, Binary); 8] {
    [
        ("+", |x, y| x + y),
        ("-", |x, y| x - y),
        ("*", |x, y| x * y),
        ("/", |x, y| x / y),
        ("%", |x, y| x % y),
        ("min", f32::min),
        ("max", f32::max),
        ("pow", f32::powf),
    ]
}

fn binary_expr(op: &str) -> String {
    match op {
        "min" | "max" | "pow" => format!("{op}(a[i], b[i])"),
        _ => format!("a[i] {op} b[i]"),
    }
}

/// `+ - * / % min max pow` compute in f32 on the exact widened values and
/// round once; with flushing, bf16 subnormal operands and results become
/// zeros and f16 is unaffected.
#[test]
fn arithmetic_rounds_once_from_the_widened_values() {
    for ty in [F16, BF16] {
        let (a, b) = pairs(ty);
        for (op, f) in arithmetic() {
            for o in [opts(true, 0), flushing()] {
                let ftz = |v: f32| if o.flush_subnormals { flush(v) } else { v };
                let want: Vec<u32> = a
                    .iter()
                    .zip(&b)
                    .map(|(&x, &y)| round(ty, ftz(f(ftz(wide(ty, x)), ftz(wide(ty, y))))))
                    .collect();
                let got = elementwise(&[("a", ty, &a), ("b", ty, &b)], ty, &binary_expr(op), &o);
                let what = format!("`{op}` (flush {})", o.flush_subnormals);
                check_all(&what, ty, &got, &want, &[&a, &b]);
            }
        }
    }
}

/// The rounding ties of docs/design.md: f32 1 + 2^-11 rounds to f16 1.0, 1 +
/// 3·2^-11 to 1 + 2^-10; bf16 1 + 2^-8 to 1.0. Reached through a 16-bit sum
/// whose exact value is the tie.
#[test]
fn sums_on_a_tie_round_to_even() {
    let f16 = |v: f32| u32::from(numerics::f16_from_f32(v));
    let bf16 = |v: f32| u32::from(numerics::bf16_from_f32(v));
    let p = f32::powi;
    for (ty, a, b) in [
        (F16, f16(1.0), f16(p(2.0, -11))),
        (F16, f16(1.0 + p(2.0, -10)), f16(p(2.0, -11))),
        (BF16, bf16(1.0), bf16(p(2.0, -8))),
        (BF16, bf16(1.0 + p(2.0, -7)), bf16(p(2.0, -8))),
    ] {
        let got = elementwise(
            &[("a", ty, &[a]), ("b", ty, &[b])],
            ty,
            "a[i] + b[i]",
            &opts(true, 0),
        );
        assert_eq!(got, vec![round(ty, wide(ty, a) + wide(ty, b))], "{ty}");
    }
    // The first of each pair is a tie that goes down to even, the second up.
    let got = elementwise(
        &[
            ("a", F16, &[f16(1.0), f16(1.0 + p(2.0, -10))]),
            ("b", F16, &[f16(p(2.0, -11)); 2]),
        ],
        F16,
        "a[i] + b[i]",
        &opts(false, 0),
    );
    assert_eq!(got, vec![0x3c00, 0x3c02]);
}

/// Comparisons are on the values: NaN is unordered and `-0 == 0`.
#[test]
fn comparisons_are_on_the_values() {
    type Cmp = fn(f32, f32) -> bool;
    let ops: [(&str, Cmp); 6] = [
        ("==", |x, y| x == y),
        ("!=", |x, y| x != y),
        ("<", |x, y| x < y),
        ("<=", |x, y| x <= y),
        (">", |x, y| x > y),
        (">=", |x, y| x >= y),
    ];
    for ty in [F16, BF16] {
        let (a, b) = pairs(ty);
        for (op, f) in ops {
            for o in [opts(true, 0), flushing()] {
                let ftz = |v: f32| if o.flush_subnormals { flush(v) } else { v };
                let want: Vec<u32> = a
                    .iter()
                    .zip(&b)
                    .map(|(&x, &y)| f(ftz(wide(ty, x)), ftz(wide(ty, y))) as u32)
                    .collect();
                let expr = format!("select(a[i] {op} b[i], 1u, 0u)");
                let got = elementwise(&[("a", ty, &a), ("b", ty, &b)], U32, &expr, &o);
                let what = format!("`{op}` (flush {})", o.flush_subnormals);
                check_all(&what, U32, &got, &want, &[&a, &b]);
            }
        }
    }
}

/// `select` keeps the bits of the operand it picks (NaN payloads and the
/// sign of zero included).
#[test]
fn select_keeps_the_bits() {
    for ty in [F16, BF16] {
        let (a, b) = pairs(ty);
        let c: Vec<u32> = (0..a.len() as u32).map(|k| k % 3 % 2).collect();
        let got = elementwise(
            &[("a", ty, &a), ("b", ty, &b), ("c", U32, &c)],
            ty,
            "select(c[i] == 1u, a[i], b[i])",
            &opts(true, 0),
        );
        let want: Vec<u32> = (0..a.len())
            .map(|k| if c[k] == 1 { a[k] } else { b[k] })
            .collect();
        assert_eq!(got, want, "{ty}");
    }
}

type Unary = fn(f32) -> f32;

fn unary() -> [(&'static str, Unary); 11] {
    [
        ("-", |x| -x),
        ("abs", f32::abs),
        ("floor", f32::floor),
        ("ceil", f32::ceil),
        ("sqrt", f32::sqrt),
        ("rsqrt", |x| 1.0 / x.sqrt()),
        ("exp", f32::exp),
        ("log", f32::ln),
        ("sin", f32::sin),
        ("cos", f32::cos),
        ("tanh", f32::tanh),
    ]
}

/// Unary operations and math functions: the f32 function of the widened
/// value, rounded once (exact for `- abs floor ceil`).
#[test]
fn unary_operations_and_math_functions() {
    for ty in [F16, BF16] {
        let mut a = specials(ty);
        a.extend([2.5f32, -2.5, 0.5, -0.75, 1e4, -1e-3, 100.25].map(|v| round(ty, v)));
        for (op, f) in unary() {
            for o in [opts(true, 0), flushing()] {
                let ftz = |v: f32| if o.flush_subnormals { flush(v) } else { v };
                let want: Vec<u32> = a
                    .iter()
                    .map(|&x| round(ty, ftz(f(ftz(wide(ty, x))))))
                    .collect();
                let expr = match op {
                    "-" => "-a[i]".to_string(),
                    _ => format!("{op}(a[i])"),
                };
                let got = elementwise(&[("a", ty, &a)], ty, &expr, &o);
                let what = format!("`{op}` (flush {})", o.flush_subnormals);
                check_all(&what, ty, &got, &want, &[&a]);
            }
        }
    }
}

/// `fma` rounds once (`numerics::fma16`), on specials and on the cases
/// where rounding through f32 would round twice.
#[test]
fn fma_rounds_once() {
    let p = f32::powi;
    for ty in [F16, BF16] {
        let s: Vec<u32> = specials(ty).into_iter().step_by(2).collect();
        let (mut a, mut b, mut c) = (vec![], vec![], vec![]);
        for &x in &s {
            for &y in &s {
                for &z in &s {
                    a.push(x);
                    b.push(y);
                    c.push(z);
                }
            }
        }
        let r = |v: f32| round(ty, v);
        let ties = match ty {
            F16 => [
                (r(1.0 + p(2.0, -6)), r(1.0 + p(2.0, -5)), 0x0001),
                (r(1.0 + p(2.0, -10)), r(1.0 + p(2.0, -10)), r(-p(2.0, -9))),
            ],
            _ => [
                (r(1.0 + p(2.0, -4)), r(1.0 + p(2.0, -4)), r(p(2.0, -60))),
                (r(1.0 + p(2.0, -4)), r(1.0 + p(2.0, -4)), r(-p(2.0, -60))),
            ],
        };
        for (x, y, z) in ties {
            a.push(x);
            b.push(y);
            c.push(z);
        }
        let want: Vec<u32> = (0..a.len())
            .map(|k| {
                let v = numerics::fma16(ty, a[k] as u16, b[k] as u16, c[k] as u16).unwrap();
                u32::from(v)
            })
            .collect();
        let got = elementwise(
            &[("a", ty, &a), ("b", ty, &b), ("c", ty, &c)],
            ty,
            "fma(a[i], b[i], c[i])",
            &opts(true, 0),
        );
        check_all("fma", ty, &got, &want, &[&a, &b, &c]);
        // The tie cases differ from rounding the f32 fma.
        let through_f32 = |k: usize| r(wide(ty, a[k]).mul_add(wide(ty, b[k]), wide(ty, c[k])));
        assert_ne!(got[a.len() - 2], through_f32(a.len() - 2), "{ty}");
    }
}

/// Values of every type for the casts (bits): ties of the 16-bit formats,
/// f32 values past their range, integers just above 2^24.
fn cast_sources(ty: ScalarType) -> Vec<u32> {
    let p = f32::powi;
    let big = (1i64 << 24) + (1 << 16) + 1;
    match ty {
        F32 => [
            0.0f32,
            -0.0,
            1.0 + p(2.0, -11),
            1.0 + 3.0 * p(2.0, -11),
            1.0 + p(2.0, -8),
            1.0 + 3.0 * p(2.0, -8),
            65519.0,
            65520.0,
            p(2.0, -24),
            p(2.0, -25),
            f32::from_bits(0x0001_8000),
            f32::MAX,
            -f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -2.75,
            1e-6,
        ]
        .iter()
        .map(|v| v.to_bits())
        .collect(),
        I32 => [
            0i64,
            1,
            -1,
            2049,
            -2049,
            65519,
            65520,
            big,
            -big,
            (1 << 24) + 1,
            i32::MIN as i64,
            i32::MAX as i64,
        ]
        .iter()
        .map(|&v| v as i32 as u32)
        .collect(),
        U32 => vec![
            0,
            1,
            2049,
            65520,
            big as u32,
            (1 << 24) + 1,
            1 << 31,
            u32::MAX,
        ],
        Bool => vec![0, 1],
        _ => specials(ty),
    }
}

/// The cast of `bits` of `from` to `to`, by the rules of docs/design.md.
fn cast(from: ScalarType, to: ScalarType, bits: u32) -> u32 {
    let value = Literal::from_bits(from, bits);
    if from == to {
        return bits;
    }
    if to.is_16bit() {
        let v = match value {
            Literal::I32(v) => i64::from(v),
            Literal::U32(v) => i64::from(v),
            Literal::Bool(v) => i64::from(v),
            other => return round(to, other.as_f32().unwrap()),
        };
        return u32::from(numerics::from_integer(to, v).unwrap());
    }
    let v = wide(from, bits);
    match to {
        F32 => v.to_bits(),
        I32 => v as i32 as u32,
        U32 => v as u32,
        _ => (v != 0.0) as u32,
    }
}

/// Casts among all six types touching a 16-bit one: integers round once
/// (`numerics::from_integer`), 16-bit to integers through the exact f32
/// (truncate, saturate, NaN to 0), bool as 0/1 and `x != 0`.
#[test]
fn casts_among_all_types() {
    let all = [F32, I32, U32, Bool, F16, BF16];
    for from in all {
        for to in all {
            if !from.is_16bit() && !to.is_16bit() {
                continue;
            }
            let a = cast_sources(from);
            let want: Vec<u32> = a.iter().map(|&x| cast(from, to, x)).collect();
            let got = elementwise(
                &[("a", from, &a)],
                to,
                &format!("{to}(a[i])"),
                &opts(true, 0),
            );
            check_all(&format!("cast {from} -> {to}"), to, &got, &want, &[&a]);
        }
    }
    // Through a nearest f32, 2^24 + 2^16 + 1 would round to the tie and then down.
    let big = (1u32 << 24) + (1 << 16) + 1;
    let got = elementwise(&[("a", U32, &[big])], BF16, "bf16(a[i])", &opts(false, 0));
    assert_eq!(wide(BF16, got[0]), ((1 << 24) + (1 << 17)) as f32);
}

/// With flushing, a bf16 subnormal is zero to every conversion that reads
/// its value; f16 subnormals are f32 normals and stay.
#[test]
fn flushing_zeroes_bf16_subnormals_in_conversions() {
    let sub = [0x0001u32, 0x8001, 0x007f];
    let got = elementwise(&[("a", BF16, &sub)], F32, "f32(a[i])", &flushing());
    assert_eq!(got, vec![0, 0x8000_0000, 0]);
    let got = elementwise(
        &[("a", BF16, &sub)],
        U32,
        "select(bool(a[i]), 1u, 0u)",
        &flushing(),
    );
    assert_eq!(got, vec![0, 0, 0]);
    let got = elementwise(&[("a", BF16, &sub)], F16, "f16(a[i])", &flushing());
    assert_eq!(got, vec![0, 0x8000, 0]);
    let f16_sub = [0x0001u32, 0x83ff];
    let got = elementwise(&[("a", F16, &f16_sub)], F32, "f32(a[i])", &flushing());
    let want: Vec<u32> = f16_sub.iter().map(|&b| wide(F16, b).to_bits()).collect();
    assert_eq!(got, want);
    // The bits move unchanged: a bitcast reads no value.
    let got = elementwise(&[("a", BF16, &sub)], U32, "bitcast<u32>(a[i])", &flushing());
    assert_eq!(got, sub.to_vec());
}

/// Bitcasts: to 16 bits the low half of the word is kept, from 16 bits the
/// high half is zero; f16 and bf16 share the 16 bits.
#[test]
fn bitcasts_take_the_low_half() {
    let words = [0xdead_3c00u32, 0x0000_7e01, 0xffff_8000, 0x1234_5678];
    for to in [F16, BF16] {
        let got = elementwise(
            &[("a", U32, &words)],
            to,
            &format!("bitcast<{to}>(a[i])"),
            &opts(true, 0),
        );
        let low: Vec<u32> = words.iter().map(|w| w & 0xffff).collect();
        assert_eq!(got, low, "u32 -> {to}");
        let signed: Vec<u32> = words.to_vec();
        let got = elementwise(
            &[("a", I32, &signed)],
            to,
            &format!("bitcast<{to}>(a[i])"),
            &opts(true, 0),
        );
        assert_eq!(got, low, "i32 -> {to}");
    }
    let halves = [0x3c00u32, 0x8001, 0xffff];
    let got = elementwise(
        &[("a", F16, &halves)],
        U32,
        "bitcast<u32>(a[i])",
        &opts(true, 0),
    );
    assert_eq!(got, halves.to_vec());
    let got = elementwise(
        &[("a", BF16, &halves)],
        I32,
        "bitcast<i32>(a[i])",
        &opts(true, 0),
    );
    assert_eq!(got, halves.to_vec());
    let got = elementwise(
        &[("a", F16, &halves)],
        BF16,
        "bitcast<bf16>(a[i])",
        &opts(true, 0),
    );
    assert_eq!(got, halves.to_vec());
    // A bitcast result compares by value afterwards: 0x8000 is -0 == 0.
    let got = elementwise(
        &[("a", U32, &[0x1_8000u32, 0x7e00])],
        U32,
        "select(bitcast<f16>(a[i]) == 0.0f16, 1u, 0u)",
        &opts(true, 0),
    );
    assert_eq!(got, vec![1, 0]);
}

/// Literals and 16-bit scalar parameters, including a literal given by its
/// bits and one that rounds.
#[test]
fn literals_and_scalar_parameters() {
    for ty in [F16, BF16] {
        let src = format!(
            "mesh m {{ grid [b = 1]; threads t = 4; }}
kernel k(x: gmem<{ty}[4]>, y: gmem<{ty}[4]>, alpha: {ty}) {{
  let i: u32 = axis_index(t);
  y[i] = select(i == 3u, {ty}_bits(0x7c00), x[i] * alpha + 0.1{ty});
}}
map m {{ programs [m: k]; inputs [x: gmem<{ty}[4]>]; outputs [y: gmem<{ty}[4]>]; scalars [alpha: {ty}]; }}
"
        );
        let m = parse(&src);
        let xs: Vec<u32> = [1.0f32, -2.0, 0.375, 7.0]
            .iter()
            .map(|&v| round(ty, v))
            .collect();
        let alpha = round(ty, 1.5);
        let tenth = round(ty, 0.1);
        let scalar = Literal::from_bits(ty, alpha);
        for o in [opts(false, 0), opts(true, 2)] {
            let x = HostTensor::new(ty, vec![4], xs.clone()).unwrap();
            let out = call(&m, vec![("x", x)], &[("alpha", scalar)], &o).unwrap();
            let mul = |v: u32| round(ty, wide(ty, v) * wide(ty, alpha));
            let mut want: Vec<u32> = xs
                .iter()
                .map(|&v| round(ty, wide(ty, mul(v)) + wide(ty, tenth)))
                .collect();
            want[3] = 0x7c00;
            assert_eq!(out.outputs["y"].to_bits(), want, "{ty}");
            assert_eq!(out.outputs["y"].elem(), ty);
        }
        // A scalar of another type is refused.
        let x = HostTensor::new(ty, vec![4], xs.clone()).unwrap();
        let err = call(
            &m,
            vec![("x", x)],
            &[("alpha", Literal::f32(1.5))],
            &opts(false, 0),
        )
        .unwrap_err();
        assert!(matches!(err, RunError::BadArguments(_)), "{err}");
    }
}

/// One program writing `y[index] = value` from every thread of `blocks`
/// blocks of `threads` threads (`g` the global thread id).
fn scatter(
    ty: ScalarType,
    len: u32,
    blocks: u32,
    threads: u32,
    index: &str,
    value: &str,
) -> Module {
    parse(&format!(
        "mesh m {{ grid [b = {blocks}]; threads t = {threads}; }}
kernel k(y: gmem<{ty}[{len}]>) {{
  let g: u32 = axis_index(b) * axis_size(t) + axis_index(t);
  y[{index}] = {value};
}}
map m {{ programs [m: k]; outputs [y: gmem<{ty}[{len}]>]; }}
"
    ))
}

fn every_schedule() -> Vec<InterpOptions> {
    let mut seeded = opts(true, 3);
    seeded.run.seed = 7;
    vec![
        opts(false, 0),
        opts(true, 0),
        opts(true, 2),
        seeded,
        opts(false, 2),
    ]
}

/// Neighbouring threads (of one block and of neighbouring blocks, 33 a
/// block so block boundaries fall mid-word) write neighbouring elements:
/// no write is lost and no race is reported, on every schedule and on all
/// host cores (no detection). Consecutive and scattered indices take
/// different paths.
#[test]
fn neighbouring_16bit_stores_never_lose_a_write() {
    let (blocks, threads) = (61, 33);
    let len = blocks * threads;
    for ty in [F16, BF16] {
        let value = format!("{ty}(g + 1u)");
        let reversed = format!(
            "axis_index(b) * axis_size(t) + {}u - axis_index(t)",
            threads - 1
        );
        let odd_even = format!("axis_index(b) * axis_size(t) + (axis_index(t) * 2u) % {threads}u");
        for index in ["g".to_string(), reversed.clone(), odd_even.clone()] {
            let m = scatter(ty, len, blocks, threads, &index, &value);
            for o in every_schedule() {
                let y = call(&m, vec![], &[], &o)
                    .unwrap_or_else(|e| panic!("{ty} y[{index}]: {e} ({o:?})"))
                    .outputs["y"]
                    .to_bits();
                // Element e is written by the thread whose index maps to e.
                for b in 0..blocks {
                    for t in 0..threads {
                        let e = match index.as_str() {
                            "g" => b * threads + t,
                            i if i == reversed => b * threads + threads - 1 - t,
                            _ => b * threads + (t * 2) % threads,
                        };
                        let g = b * threads + t;
                        assert_eq!(
                            y[e as usize],
                            u32::from(numerics::from_integer(ty, i64::from(g + 1)).unwrap()),
                            "{ty} y[{index}] element {e} ({o:?})"
                        );
                    }
                }
            }
        }
    }
}

/// Many blocks on all host cores writing 16-bit elements two a word, the
/// instances (here: block ranges) starting mid-word: repeated to give lost
/// writes a chance to show.
#[test]
fn parallel_blocks_keep_both_halves_of_a_word() {
    let (blocks, threads) = (4001, 3);
    let len = blocks * threads;
    let m = scatter(F16, len, blocks, threads, "g", "f16(axis_index(t) + 1u)");
    let want: Vec<u32> = (0..len)
        .map(|g| u32::from(numerics::from_integer(F16, i64::from(g % threads + 1)).unwrap()))
        .collect();
    let mut interp = Interpreter::new();
    for _ in 0..20 {
        let out = interp
            .call(&validated(&m), "m", &CallArgs::default(), &opts(false, 0))
            .unwrap();
        assert_eq!(out.outputs["y"].to_bits(), want);
    }
    assert!(
        interp.last_report().unwrap().parallel
            || std::thread::available_parallelism().map_or(1, |n| n.get()) == 1
    );
}

/// Owned 16-bit instances of odd length start mid-word (instance k at
/// element 5k): each block reads its own input instance and writes its own
/// output instance, on every schedule, with detection and on all cores.
#[test]
fn owned_16bit_instances_start_mid_word() {
    for ty in [F16, BF16] {
        let src = format!(
            "mesh w {{ grid [b = 9]; threads t = 5; }}
kernel k(x: gmem<{ty}[5]> @ w, y: gmem<{ty}[5]> @ w, z: gmem<{ty}[45]>) {{
  let v: u32 = axis_index(b) * 5u + axis_index(t);
  y[axis_index(t)] = x[axis_index(t)] * 0.5{ty};
  z[v] = {ty}(v);
}}
map m {{ programs [w: k]; inputs [x: gmem<{ty}[5]> @ w]; outputs [y: gmem<{ty}[5]> @ w, z: gmem<{ty}[45]>]; }}
"
        );
        let m = parse(&src);
        let want: Vec<u32> = (0..45).map(|v| round(ty, v as f32 * 0.5)).collect();
        let want_z: Vec<u32> = (0..45).map(|v| round(ty, v as f32)).collect();
        for o in every_schedule() {
            let x = HostTensor::new(ty, vec![9, 5], want_z.clone()).unwrap();
            let out = call(&m, vec![("x", x)], &[], &o).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(out.outputs["y"].shape(), &[9, 5]);
            assert_eq!(out.outputs["y"].to_bits(), want, "{ty} {o:?}");
            assert_eq!(out.outputs["z"].to_bits(), want_z, "{ty} {o:?}");
            // Packed: 45 elements in 23 words, the last word's high half zero.
            assert_eq!(out.outputs["y"].words().len(), 23);
            assert_eq!(out.outputs["y"].words()[22] >> 16, 0);
        }
    }
}

/// Two threads writing the same 16-bit element race; two threads writing the
/// two halves of one word do not (detection is per element).
#[test]
fn races_are_per_element() {
    for ty in [F16, BF16] {
        let same = scatter(ty, 64, 1, 64, "g / 2u", &format!("{ty}(g)"));
        let err = call(&same, vec![], &[], &opts(true, 0)).unwrap_err();
        match &err {
            RunError::DataRace {
                reference,
                element,
                first,
                second,
                ..
            } => {
                assert_eq!(reference, "y");
                assert_eq!(*element, 0);
                assert_eq!((first.thread, second.thread), (Some(0), Some(1)));
            }
            other => panic!("{ty}: {other}"),
        }
        // Different blocks, one element: a race across blocks.
        let across = scatter(ty, 64, 2, 32, "axis_index(t)", &format!("{ty}(g)"));
        let err = call(&across, vec![], &[], &opts(true, 2)).unwrap_err();
        assert!(
            matches!(err, RunError::DataRace { element: 0, .. }),
            "{err}"
        );
        // Neighbouring halves of every word, across two blocks: no race.
        let halves = scatter(
            ty,
            64,
            2,
            32,
            "axis_index(t) * 2u + axis_index(b)",
            &format!("{ty}(g)"),
        );
        let y = call(&halves, vec![], &[], &opts(true, 2)).unwrap().outputs["y"].to_bits();
        let want: Vec<u32> = (0..64u32)
            .map(|e| round(ty, ((e % 2) * 32 + e / 2) as f32))
            .collect();
        assert_eq!(y, want, "{ty}");
    }
}

/// Uninitialised reads are per element: writing one half of a word does not
/// make the other half readable. Out-of-bounds checks count elements.
#[test]
fn uninitialised_reads_and_bounds_count_elements() {
    for ty in [F16, BF16] {
        let src = format!(
            "mesh m {{ grid [b = 1]; threads t = 4; }}
kernel k(z: gmem<{ty}[4]>, n: u32, y: gmem<{ty}[8]>) {{
  let i: u32 = axis_index(t);
  y[i * 2u] = {ty}(i);
  z[i] = y[i * 2u + n];
}}
map m {{ programs [m: k]; outputs [z: gmem<{ty}[4]>]; scalars [n: u32]; scratch [y: gmem<{ty}[8]>]; }}
"
        );
        let m = parse(&src);
        // Each thread writes the low half of word i; n = 0 reads it back.
        let out = call(&m, vec![], &[("n", Literal::U32(0))], &opts(true, 2)).unwrap();
        let want: Vec<u32> = (0..4).map(|i| round(ty, i as f32)).collect();
        assert_eq!(out.outputs["z"].to_bits(), want);
        // n = 1: thread 0 reads element 1, never written, though element 0 of its word was.
        let err = call(&m, vec![], &[("n", Literal::U32(1))], &opts(true, 0)).unwrap_err();
        match &err {
            RunError::UninitializedRead {
                reference,
                element,
                site,
            } => {
                assert_eq!((reference.as_str(), *element), ("y", 1));
                assert_eq!(site.thread, Some(0));
            }
            other => panic!("{ty}: {other}"),
        }
        // Element 5 is past the end though word 2 holds a padding half.
        let oob = scatter(ty, 5, 1, 6, "g", &format!("{ty}(g)"));
        for o in [opts(false, 0), opts(true, 0)] {
            match call(&oob, vec![], &[], &o).unwrap_err() {
                RunError::OutOfBounds {
                    reference,
                    index,
                    shape,
                    site,
                } => {
                    assert_eq!(
                        (reference.as_str(), index.as_str(), shape.as_str()),
                        ("y", "[5]", "[5]")
                    );
                    assert_eq!(site.thread, Some(5));
                }
                other => panic!("{ty}: {other}"),
            }
        }
    }
}

/// A 16-bit smem tile transposed through a barrier, and a 16-bit local
/// array per thread (neighbouring threads' elements share words).
#[test]
fn smem_tile_transpose_and_local_arrays() {
    for ty in [F16, BF16] {
        let src = format!(
            "mesh m {{ grid [b = 3]; threads t = 256; }}
kernel k(x: gmem<{ty}[768]>, y: gmem<{ty}[768]>, w: gmem<{ty}[768]>, tile: smem<{ty}[16, 16]>) {{
  let r: u32 = axis_index(t) / 16u;
  let c: u32 = axis_index(t) % 16u;
  let base: u32 = axis_index(b) * 256u;
  tile[r, c] = x[base + r * 16u + c];
  barrier;
  y[base + r * 16u + c] = tile[c, r];
  local acc: {ty}[3];
  acc[0u] = tile[c, r];
  acc[1u] = -acc[0u];
  acc[2u] = acc[0u] + acc[1u] * 2.0{ty};
  w[base + axis_index(t)] = acc[2u];
}}
map m {{ programs [m: k]; inputs [x: gmem<{ty}[768]>]; outputs [y: gmem<{ty}[768]>, w: gmem<{ty}[768]>]; scratch [tile: smem<{ty}[16, 16]>]; }}
"
        );
        let m = parse(&src);
        let xs: Vec<u32> = (0..768u32)
            .map(|k| round(ty, k as f32 * 0.25 - 50.0))
            .collect();
        let transposed: Vec<u32> = (0..768usize)
            .map(|k| {
                let (b, r, c) = (k / 256, k % 256 / 16, k % 16);
                xs[b * 256 + c * 16 + r]
            })
            .collect();
        let w: Vec<u32> = transposed
            .iter()
            .map(|&v| {
                let neg = round(ty, -wide(ty, v));
                round(ty, wide(ty, v) + wide(ty, round(ty, wide(ty, neg) * 2.0)))
            })
            .collect();
        for o in every_schedule() {
            let x = HostTensor::new(ty, vec![768], xs.clone()).unwrap();
            let out = call(&m, vec![("x", x)], &[], &o).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(out.outputs["y"].to_bits(), transposed, "{ty} {o:?}");
            assert_eq!(out.outputs["w"].to_bits(), w, "{ty} {o:?}");
        }
        // Without the barrier, threads race on the tile (per element).
        let racy = parse(&src.replace("  barrier;\n", ""));
        let x = HostTensor::new(ty, vec![768], xs.clone()).unwrap();
        let err = call(&racy, vec![("x", x)], &[], &opts(true, 0)).unwrap_err();
        assert!(
            matches!(err, RunError::DataRace { ref reference, .. } if reference == "tile"),
            "{err}"
        );
    }
}

/// A local 16-bit element read before this thread wrote it is reported,
/// though the neighbouring thread wrote the other half of its word.
#[test]
fn local_16bit_elements_start_unwritten_per_thread() {
    let src = "mesh m { grid [b = 1]; threads t = 4; }
kernel k(y: gmem<f16[4]>, n: u32) {
  local v: f16[2];
  if axis_index(t) % 2u == 0u {
    v[0u] = f16(axis_index(t));
  } else {
    v[1u] = f16(axis_index(t));
  }
  y[axis_index(t)] = v[(axis_index(t) + n) % 2u];
}
map m { programs [m: k]; outputs [y: gmem<f16[4]>]; scalars [n: u32]; }
";
    let m = parse(src);
    let out = call(&m, vec![], &[("n", Literal::U32(0))], &opts(true, 2)).unwrap();
    let want: Vec<u32> = (0..4).map(|t| round(F16, t as f32)).collect();
    assert_eq!(out.outputs["y"].to_bits(), want);
    let err = call(&m, vec![], &[("n", Literal::U32(1))], &opts(true, 0)).unwrap_err();
    assert!(
        matches!(&err, RunError::UninitializedRead { reference, element: 1, site } if reference == "v" && site.thread == Some(0)),
        "{err}"
    );
}

/// bf16 loads, f32 accumulation, a bf16 and an f32 store: the row sums of
/// docs/design.md's mixed-precision pattern, exactly as f32 sums in row order.
#[test]
fn bf16_row_sum_accumulates_in_f32() {
    let (rows, cols) = (64u32, 100u32);
    let src = format!(
        "mesh m {{ grid [b = 2]; threads t = 32; }}
kernel k(x: gmem<bf16[{rows}, {cols}]>, y: gmem<bf16[{rows}]>, s: gmem<f32[{rows}]>) {{
  let r: u32 = axis_index(b) * axis_size(t) + axis_index(t);
  var acc: f32 = 0.0;
  for c: u32 in 0u..{cols}u {{
    acc = acc + f32(x[r, c]);
  }}
  y[r] = bf16(acc);
  s[r] = acc;
}}
map m {{ programs [m: k]; inputs [x: gmem<bf16[{rows}, {cols}]>]; outputs [y: gmem<bf16[{rows}]>, s: gmem<f32[{rows}]>]; }}
"
    );
    let m = parse(&src);
    let xs: Vec<u32> = (0..rows * cols)
        .map(|k| round(BF16, ((k * 37) % 1001) as f32 * 0.013 - 6.0))
        .collect();
    let sums: Vec<f32> = (0..rows as usize)
        .map(|r| {
            xs[r * cols as usize..(r + 1) * cols as usize]
                .iter()
                .fold(0.0f32, |acc, &b| acc + wide(BF16, b))
        })
        .collect();
    for o in every_schedule() {
        let x = HostTensor::new(BF16, vec![rows, cols], xs.clone()).unwrap();
        let out = call(&m, vec![("x", x)], &[], &o).unwrap();
        assert_eq!(out.outputs["s"].to_f32(), sums);
        let want: Vec<u32> = sums.iter().map(|&s| round(BF16, s)).collect();
        assert_eq!(out.outputs["y"].to_bits(), want);
    }
}

/// Resident 16-bit refs keep their packed contents and per-element written
/// flags across calls; an odd length keeps its padding half out.
#[test]
fn residents_hold_packed_16bit_data() {
    let src = "mesh m { grid [b = 1]; threads t = 3; }
resident keep: gmem<bf16[3]>;
kernel put(y: gmem<bf16[3]>, keep: gmem<bf16[3]>) {
  keep[axis_index(t)] = keep[axis_index(t)] + 1.0bf16;
  y[axis_index(t)] = keep[axis_index(t)];
}
map m { programs [m: put]; outputs [y: gmem<bf16[3]>]; scratch [keep: gmem<bf16[3]> resident]; }
";
    let m = parse(src);
    let mut interp = Interpreter::new();
    let start: Vec<u32> = [0.5f32, -1.0, 2.0]
        .iter()
        .map(|&v| round(BF16, v))
        .collect();
    interp.set_resident(
        "keep",
        HostTensor::new(BF16, vec![3], start.clone()).unwrap(),
    );
    for k in 1..=2 {
        let out = interp
            .call(&validated(&m), "m", &CallArgs::default(), &opts(true, 2))
            .unwrap();
        let want: Vec<u32> = start
            .iter()
            .map(|&v| round(BF16, wide(BF16, v) + k as f32))
            .collect();
        assert_eq!(out.outputs["y"].to_bits(), want);
        let keep = mpmd_core::Backend::resident(&interp, "keep").unwrap();
        assert_eq!(keep.to_bits(), want);
        assert_eq!(keep.words().len(), 2);
    }
    // A resident of another length is refused, naming elements.
    interp.set_resident("keep", HostTensor::new(BF16, vec![4], vec![0; 4]).unwrap());
    let err = interp
        .call(&validated(&m), "m", &CallArgs::default(), &opts(true, 0))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("resident `keep` holds 4 elements; map `m` declares 3"),
        "{err}"
    );
}

/// Schedules whose 16-bit outputs differ only in the sign of zero or a NaN
/// payload agree; a real difference is reported with the values printed as
/// 16-bit literals.
#[test]
fn nondeterminism_compares_16bit_values() {
    let module = |a: &str, b: &str| {
        parse(&format!(
            "mesh m {{ grid [b = 1]; threads t = 64; }}
kernel k(y: gmem<f16[64]>, c: gmem<u32[1]>) {{
  let k: u32 = atomic_add(c[0u], 1u);
  y[k] = select(axis_index(t) % 2u == 0u, {a}, {b});
}}
map m {{ programs [m: k]; outputs [y: gmem<f16[64]>]; scratch [c: gmem<u32[1]> zeroed]; }}
"
        ))
    };
    let o = opts(true, 3);
    call(&module("0.0f16", "-0.0f16"), vec![], &[], &o).unwrap();
    call(
        &module("f16_bits(0x7e00)", "f16_bits(0xfe01)"),
        vec![],
        &[],
        &o,
    )
    .unwrap();
    let err = call(&module("1.5f16", "-2.0f16"), vec![], &[], &o).unwrap_err();
    match &err {
        RunError::Nondeterministic { detail } => {
            assert!(
                detail.contains("1.5f16") && detail.contains("-2.0f16"),
                "{detail}"
            );
        }
        other => panic!("{other}"),
    }
    // As a multiset the outputs agree.
    let mut multiset = o.clone();
    multiset.schedule_tolerances = vec![("y".into(), ScheduleTolerance::Multiset)];
    call(&module("1.5f16", "-2.0f16"), vec![], &[], &multiset).unwrap();
}

/// The memory limit charges 2 bytes an element for 16-bit buffers (words
/// rounded up), plus the detection state per element.
#[test]
fn memory_limit_charges_two_bytes_an_element() {
    let needed = |ty: ScalarType, len: u32, detect: bool| {
        let m = scatter(ty, len, 1, 1, "g", &format!("{ty}(g)"));
        let o = InterpOptions {
            memory_limit: 1,
            ..opts(detect, 0)
        };
        match call(&m, vec![], &[], &o).unwrap_err() {
            RunError::MemoryLimit { needed, what, .. } => {
                let words = if ty.is_16bit() { len.div_ceil(2) } else { len };
                assert!(what.contains(&format!("({words} words")), "{what}");
                needed
            }
            other => panic!("{other}"),
        }
    };
    for ty in [F16, BF16] {
        assert_eq!(needed(ty, 1000, false), 2000);
        assert_eq!(needed(ty, 1001, false), 2004);
        assert_eq!(needed(ty, 1000, true), 2000 + 1000 * 17);
    }
    assert_eq!(needed(F32, 1000, false), 4000);
    // Just enough memory runs it.
    let m = scatter(F16, 1000, 1, 1, "g", "f16(g)");
    let o = InterpOptions {
        memory_limit: 2000 + 64 * 1024,
        ..opts(false, 0)
    };
    call(&m, vec![], &[], &o).unwrap();
}

/// 16-bit operations under masks that are not one range (every third lane)
/// and over ranges that do not start at lane 0 compute exactly the active
/// lanes, in blocks whose size is not a multiple of the conversion chunk.
#[test]
fn masked_and_offset_lanes_compute_their_own_values() {
    let (blocks, threads) = (3usize, 200usize);
    let n = blocks * threads;
    for ty in [F16, BF16] {
        let src = format!(
            "mesh m {{ grid [b = {blocks}]; threads t = {threads}; }}
kernel k(a: gmem<{ty}[{n}]>, b: gmem<{ty}[{n}]>, y: gmem<{ty}[{n}]>, z: gmem<f32[{n}]>, w: gmem<{ty}[{n}]>) {{
  let i: u32 = axis_index(b) * axis_size(t) + axis_index(t);
  if axis_index(t) % 3u == 1u {{
    y[i] = a[i] * b[i];
    z[i] = f32(a[i]);
  }} else {{
    y[i] = {ty}(f32(a[i]) * 3.0);
    z[i] = f32(sqrt(b[i]));
  }}
  if axis_index(t) >= 70u {{
    w[i] = a[i] + b[i];
  }} else {{
    w[i] = select(a[i] < b[i], a[i], -b[i]);
  }}
}}
map m {{ programs [m: k]; inputs [a: gmem<{ty}[{n}]>, b: gmem<{ty}[{n}]>]; outputs [y: gmem<{ty}[{n}]>, z: gmem<f32[{n}]>, w: gmem<{ty}[{n}]>]; }}
"
        );
        let m = parse(&src);
        let a: Vec<u32> = (0..n).map(|k| round(ty, k as f32 * 0.37 - 90.0)).collect();
        let b: Vec<u32> = (0..n)
            .map(|k| round(ty, (k % 17) as f32 * 1.3 + 0.1))
            .collect();
        let (x, v) = (|k: usize| wide(ty, a[k]), |k: usize| wide(ty, b[k]));
        let (mut y, mut z, mut w) = (vec![], vec![], vec![]);
        for (k, &a_bits) in a.iter().enumerate() {
            let t = k % threads;
            if t % 3 == 1 {
                y.push(round(ty, x(k) * v(k)));
                z.push(x(k).to_bits());
            } else {
                y.push(round(ty, x(k) * 3.0));
                z.push(wide(ty, round(ty, v(k).sqrt())).to_bits());
            }
            w.push(if t >= 70 {
                round(ty, x(k) + v(k))
            } else if x(k) < v(k) {
                a_bits
            } else {
                round(ty, -v(k))
            });
        }
        for o in [opts(false, 0), opts(true, 2)] {
            let inputs = vec![
                ("a", HostTensor::new(ty, vec![n as u32], a.clone()).unwrap()),
                ("b", HostTensor::new(ty, vec![n as u32], b.clone()).unwrap()),
            ];
            let out = call(&m, inputs, &[], &o).unwrap();
            assert_eq!(out.outputs["y"].to_bits(), y, "{ty} {o:?}");
            assert_eq!(out.outputs["z"].to_bits(), z, "{ty} {o:?}");
            assert_eq!(out.outputs["w"].to_bits(), w, "{ty} {o:?}");
        }
    }
}

/// With flushing, `fma` on bf16 sees subnormal operands as zeros and
/// flushes a subnormal result; f16 subnormals take part as they are.
#[test]
fn fma_flushes_bf16_subnormals() {
    let one = [0x3f80u32];
    let sub = [0x0001u32];
    // 1 * 1 + subnormal: the subnormal is a zero to a flushing adapter.
    let got = elementwise(
        &[("a", BF16, &one), ("b", BF16, &one), ("c", BF16, &sub)],
        BF16,
        "fma(a[i], b[i], c[i])",
        &flushing(),
    );
    assert_eq!(got, vec![0x3f80]);
    // subnormal * 1 + 0: a subnormal result flushes to zero.
    let got = elementwise(
        &[("a", BF16, &sub), ("b", BF16, &one), ("c", BF16, &[0])],
        BF16,
        "fma(a[i], b[i], c[i])",
        &flushing(),
    );
    assert_eq!(got, vec![0]);
    let got = elementwise(
        &[("a", BF16, &sub), ("b", BF16, &one), ("c", BF16, &[0])],
        BF16,
        "fma(a[i], b[i], c[i])",
        &opts(true, 0),
    );
    assert_eq!(
        got,
        vec![u32::from(numerics::fma16(BF16, 1, 0x3f80, 0).unwrap())]
    );
    let got = elementwise(
        &[
            ("a", F16, &[0x0001]),
            ("b", F16, &[0x3c00]),
            ("c", F16, &[0x0001]),
        ],
        F16,
        "fma(a[i], b[i], c[i])",
        &flushing(),
    );
    assert_eq!(
        got,
        vec![u32::from(numerics::fma16(F16, 1, 0x3c00, 1).unwrap())]
    );
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
