//! The f16 and bf16 checks of the CUDA backend, shared by the cuda-host
//! tests (tests/sixteen_bit.rs) and the GPU tests (tests/gpu_run.rs): each
//! runs a program on a backend and compares every result bit for bit with
//! `mpmd_core::numerics`, the rule the interpreter implements (NaN payloads
//! and the sign of a zero `min`/`max` aside).
#![allow(dead_code)]

use mpmd_core::inputs::Rng;
use mpmd_core::ir::{Literal, ScalarType};
use mpmd_core::numerics;
use mpmd_core::plan::{lower, LaunchPlan};
use mpmd_core::{Backend, CallArgs, CallOutputs, HostTensor, Mode, RunError, RunOptions};

use ScalarType::{BF16, F16};

/// How results of the math functions (`exp log rsqrt sin cos tanh pow`)
/// are judged: cuda-host calls the host's libm, as the expected values do;
/// CUDA's own functions are within their f32 bounds, so after rounding to
/// 16 bits within one unit in the last place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MathFunctions {
    Exact,
    WithinOneUlp,
}

pub const SIXTEEN: [ScalarType; 2] = [F16, BF16];

pub fn plan_of_text(source: &str) -> LaunchPlan {
    let (module, _) = mpmd_core::text::parse(source).unwrap_or_else(|e| panic!("{e:?}\n{source}"));
    if let Err(diagnostics) = mpmd_core::validate::validate(&module, &Default::default()) {
        panic!("{diagnostics:?}\n{source}");
    }
    lower(&validated(&module), &module.maps[0].name).expect("lowers")
}

#[allow(clippy::result_large_err)] // `RunError` is what `Backend::run` returns
fn run(
    backend: &mut dyn Backend,
    plan: &LaunchPlan,
    inputs: Vec<(&str, HostTensor)>,
    scalars: Vec<(&str, Literal)>,
    mode: Mode,
) -> Result<CallOutputs, RunError> {
    let mut args = CallArgs::default();
    for (name, tensor) in inputs {
        args.inputs.insert(name.into(), tensor);
    }
    for (name, value) in scalars {
        args.scalars.insert(name.into(), value);
    }
    backend.run(plan, &args, &RunOptions { mode, seed: 0 })
}

pub fn tensor16(ty: ScalarType, shape: Vec<u32>, bits: &[u16]) -> HostTensor {
    HostTensor::new(ty, shape, bits.iter().map(|&b| u32::from(b)).collect()).unwrap()
}

fn f32_of(ty: ScalarType, bits: u16) -> f32 {
    numerics::to_f32(ty, bits).unwrap()
}

fn round(ty: ScalarType, v: f32) -> u16 {
    numerics::from_f32(ty, v).unwrap()
}

/// The other 16-bit type.
fn other(ty: ScalarType) -> ScalarType {
    if ty == F16 {
        BF16
    } else {
        F16
    }
}

/// Exact bits, except that any NaN matches any NaN (payloads are unspecified).
fn same16(ty: ScalarType, got: u32, want: u16) -> bool {
    got == u32::from(want) || (f32_of(ty, got as u16).is_nan() && f32_of(ty, want).is_nan())
}

/// ±0, the smallest and largest subnormals, the smallest normal, 1 and its
/// neighbours, the largest finite, ±inf, NaN and ordinary values.
fn specials(ty: ScalarType) -> Vec<u16> {
    match ty {
        F16 => vec![
            0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0200, 0x0400, 0x3c00, 0x3c01, 0x3bff, 0xbe00,
            0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x3555, 0x4248, 0xc900, 0x5640, 0x3800, 0x4000,
            0x1400, 0xe400,
        ],
        _ => vec![
            0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0040, 0x0080, 0x3f80, 0x3f81, 0x3f7f, 0xbfc0,
            0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x3eab, 0x4049, 0xc120, 0x42c8, 0x3f00, 0x4000,
            0x1400, 0xe400,
        ],
    }
}

/// A value near 1 (exponent within 2 binades), so sums and products round.
fn near_one(ty: ScalarType, rng: &mut Rng) -> u16 {
    let sign = (rng.next_u32() & 1) as u16;
    let r = rng.next_u32();
    match ty {
        F16 => (sign << 15) | ((13 + (r % 5) as u16) << 10) | ((r >> 8) as u16 & 0x3ff),
        _ => (sign << 15) | ((125 + (r % 5) as u16) << 7) | ((r >> 8) as u16 & 0x7f),
    }
}

/// 16-bit values: the specials, then random values near 1 and random bits.
fn values16(ty: ScalarType, len: usize, seed: u64) -> Vec<u16> {
    let mut rng = Rng::new(seed);
    let mut out = specials(ty);
    while out.len() < len {
        let v = if out.len().is_multiple_of(2) {
            near_one(ty, &mut rng)
        } else {
            rng.next_u32() as u16
        };
        out.push(v);
    }
    out.truncate(len);
    out
}

const OPS_LEN: usize = 2048;

/// (name, expression of `x`, `z`, `w`) of the 16-bit results of `ops_program`.
const VALUE_OPS: [(&str, &str); 21] = [
    ("add", "x + z"),
    ("sub", "x - z"),
    ("mul", "x * z"),
    ("div", "x / z"),
    ("rem", "x % z"),
    ("min", "min(x, z)"),
    ("max", "max(x, z)"),
    ("fma", "fma(x, z, w)"),
    ("neg", "-x"),
    ("abs", "abs(x)"),
    ("floor", "floor(x)"),
    ("ceil", "ceil(x)"),
    ("sqrt", "sqrt(x)"),
    ("exp", "exp(x)"),
    ("log", "log(x)"),
    ("rsqrt", "rsqrt(x)"),
    ("sin", "sin(x)"),
    ("cos", "cos(x)"),
    ("tanh", "tanh(x)"),
    ("pow", "pow(x, z)"),
    ("select", "select(x < z, x, w)"),
];

/// The value ops that call a math function of the platform.
const MATH_FUNCTIONS: [&str; 7] = ["exp", "log", "rsqrt", "sin", "cos", "tanh", "pow"];

/// Whether two 16-bit values of one sign are at most one step apart (either
/// may be an infinity next to the largest finite).
fn within_one_ulp(ty: ScalarType, got: u16, want: u16) -> bool {
    let finite_or_inf = |b: u16| !f32_of(ty, b).is_nan();
    finite_or_inf(got)
        && finite_or_inf(want)
        && (got ^ want) & 0x8000 == 0
        && got.abs_diff(want) <= 1
}

const COMPARISONS: [(&str, &str); 6] = [
    ("eq", "=="),
    ("ne", "!="),
    ("lt", "<"),
    ("le", "<="),
    ("gt", ">"),
    ("ge", ">="),
];

/// The expected bits of value op `name` on `(a, b, c)`: numerics' rule
/// (compute on the exact f32 values, round once; fma through `fma16`).
/// The math functions are the host's f32 ones (cuda-host calls the same libm).
fn expected_op(ty: ScalarType, name: &str, [a, b, c]: [u16; 3]) -> u16 {
    let (x, z) = (f32_of(ty, a), f32_of(ty, b));
    let r = |v: f32| round(ty, v);
    match name {
        "add" => r(x + z),
        "sub" => r(x - z),
        "mul" => r(x * z),
        "div" => r(x / z),
        "rem" => r(x % z),
        "min" => r(x.min(z)),
        "max" => r(x.max(z)),
        "fma" => numerics::fma16(ty, a, b, c).unwrap(),
        "neg" => a ^ 0x8000,
        "abs" => r(x.abs()),
        "floor" => r(x.floor()),
        "ceil" => r(x.ceil()),
        "sqrt" => r(x.sqrt()),
        "exp" => r(x.exp()),
        "log" => r(x.ln()),
        "rsqrt" => r(1.0 / x.sqrt()),
        "sin" => r(x.sin()),
        "cos" => r(x.cos()),
        "tanh" => r(x.tanh()),
        "pow" => r(x.powf(z)),
        "select" => {
            if x < z {
                a
            } else {
                c
            }
        }
        _ => unreachable!("{name}"),
    }
}

fn expected_comparison(ty: ScalarType, symbol: &str, a: u16, b: u16) -> bool {
    let (x, z) = (f32_of(ty, a), f32_of(ty, b));
    match symbol {
        "==" => x == z,
        "!=" => x != z,
        "<" => x < z,
        "<=" => x <= z,
        ">" => x > z,
        _ => x >= z,
    }
}

/// Every operation of `ty` on `OPS_LEN` triples, one thread per triple.
pub fn ops_program(ty: ScalarType) -> String {
    let t = ty.keyword();
    let n = OPS_LEN;
    let mut body = String::new();
    for (k, (_, e)) in VALUE_OPS.iter().enumerate() {
        body.push_str(&format!("  y[{k}u, i] = {e};\n"));
    }
    for (k, (_, symbol)) in COMPARISONS.iter().enumerate() {
        body.push_str(&format!("  yb[{k}u, i] = x {symbol} z;\n"));
    }
    let (nv, nc) = (VALUE_OPS.len(), COMPARISONS.len());
    format!(
        "mesh m {{ grid [blk = {blocks}]; threads t = 64; }}
kernel ops(xa: gmem<{t}[{n}]>, xb: gmem<{t}[{n}]>, xc: gmem<{t}[{n}]>, y: gmem<{t}[{nv}, {n}]>, yb: gmem<bool[{nc}, {n}]>) {{
  let i: u32 = axis_index(blk) * axis_size(t) + axis_index(t);
  let x: {t} = xa[i];
  let z: {t} = xb[i];
  let w: {t} = xc[i];
{body}}}
map ops {{
  programs [m: ops];
  inputs [xa: gmem<{t}[{n}]>, xb: gmem<{t}[{n}]>, xc: gmem<{t}[{n}]>];
  outputs [y: gmem<{t}[{nv}, {n}]>, yb: gmem<bool[{nc}, {n}]>];
}}
",
        blocks = n / 64
    )
}

/// Every pair of specials (the third operand cycling through them), then
/// random triples.
fn triples(ty: ScalarType) -> Vec<[u16; 3]> {
    let s = specials(ty);
    let mut out = Vec::new();
    for (i, &a) in s.iter().enumerate() {
        for (j, &b) in s.iter().enumerate() {
            out.push([a, b, s[(i * 7 + j * 3 + 5) % s.len()]]);
        }
    }
    let (xs, zs, ws) = (
        values16(ty, OPS_LEN, 1),
        values16(ty, OPS_LEN, 2),
        values16(ty, OPS_LEN, 3),
    );
    let mut k = 0;
    while out.len() < OPS_LEN {
        out.push([xs[k], zs[k], ws[k]]);
        k += 1;
    }
    out
}

/// Every operation of both types on specials and random values, both modes.
pub fn every_operation(backend: &mut dyn Backend, math: MathFunctions) {
    for ty in SIXTEEN {
        let plan = plan_of_text(&ops_program(ty));
        let operands = triples(ty);
        let column = |k: usize| operands.iter().map(|t| t[k]).collect::<Vec<_>>();
        let n = OPS_LEN as u32;
        for mode in [Mode::Fast, Mode::Checked] {
            let inputs = vec![
                ("xa", tensor16(ty, vec![n], &column(0))),
                ("xb", tensor16(ty, vec![n], &column(1))),
                ("xc", tensor16(ty, vec![n], &column(2))),
            ];
            let out = run(backend, &plan, inputs, vec![], mode).unwrap();
            let y = out.outputs["y"].to_bits();
            let yb = out.outputs["yb"].to_bits();
            let mut wrong = Vec::new();
            for (i, &triple) in operands.iter().enumerate() {
                for (k, (name, _)) in VALUE_OPS.iter().enumerate() {
                    let (got, want) = (y[k * OPS_LEN + i], expected_op(ty, name, triple));
                    // The sign of a zero min or max is unspecified (docs/design.md).
                    let zeros = matches!(*name, "min" | "max")
                        && f32_of(ty, got as u16) == 0.0
                        && f32_of(ty, want) == 0.0;
                    let near = math == MathFunctions::WithinOneUlp
                        && MATH_FUNCTIONS.contains(name)
                        && within_one_ulp(ty, got as u16, want);
                    if !same16(ty, got, want) && !zeros && !near {
                        wrong.push(format!(
                            "{name}{triple:04x?} = {got:#06x}, want {want:#06x}"
                        ));
                    }
                }
                for (k, (name, symbol)) in COMPARISONS.iter().enumerate() {
                    let got = yb[k * OPS_LEN + i];
                    let want = expected_comparison(ty, symbol, triple[0], triple[1]);
                    if got != u32::from(want) {
                        wrong.push(format!("{name}{triple:04x?} = {got}, want {want}"));
                    }
                }
            }
            assert!(
                wrong.is_empty(),
                "{ty} {mode:?}: {} wrong, first: {:#?}",
                wrong.len(),
                &wrong[..wrong.len().min(20)]
            );
        }
    }
}

/// The fma cases of `numerics::tests::fma_rounds_once`, where rounding the
/// f32 sum to nearest first would be wrong, and the f16 case whose exact
/// sum is just above a tie.
pub fn fma_ties(backend: &mut dyn Backend) {
    let f = |v: f32| numerics::f16_from_f32(v);
    let g = |v: f32| numerics::bf16_from_f32(v);
    let p = |e: i32| f32::powi(2.0, e);
    let cases: Vec<(ScalarType, [u16; 3])> = vec![
        (F16, [f(1.0 + p(-10)), f(1.0 + p(-10)), f(-p(-9))]),
        (F16, [f(1.0 + p(-6)), f(1.0 + p(-5)), 0x0001]),
        (F16, [f(1.0 + p(-6)), f(1.0 + p(-5)), 0x8001]),
        (F16, [f(1.0 + p(-6)), f(1.0 + p(-5)), 0x0000]),
        (BF16, [g(1.0 + p(-4)), g(1.0 + p(-4)), g(p(-60))]),
        (BF16, [g(1.0 + p(-4)), g(1.0 + p(-4)), 0]),
        (BF16, [g(1.0 + p(-4)), g(1.0 + p(-4)), g(p(-60)) | 0x8000]),
        // Products past f32's range that c brings back, and below it.
        (BF16, [g(p(64)), g(p(64)), g(-f32::MAX)]),
        (BF16, [g(p(-100)), g(p(-100)), g(p(-126))]),
        (BF16, [0x0001, 0x3f81, 0x8001]),
    ];
    for ty in SIXTEEN {
        let mine: Vec<[u16; 3]> = cases
            .iter()
            .filter(|(t, _)| *t == ty)
            .map(|(_, c)| *c)
            .collect();
        let n = mine.len() as u32;
        let t = ty.keyword();
        let plan = plan_of_text(&format!(
            "mesh m {{ threads t = {n}; }}
kernel f(a: gmem<{t}[{n}]>, b: gmem<{t}[{n}]>, c: gmem<{t}[{n}]>, y: gmem<{t}[{n}]>) {{
  let i: u32 = axis_index(t);
  y[i] = fma(a[i], b[i], c[i]);
}}
map f {{ programs [m: f]; inputs [a: gmem<{t}[{n}]>, b: gmem<{t}[{n}]>, c: gmem<{t}[{n}]>]; outputs [y: gmem<{t}[{n}]>]; }}
"
        ));
        let column = |k: usize| mine.iter().map(|c| c[k]).collect::<Vec<_>>();
        let inputs = vec![
            ("a", tensor16(ty, vec![n], &column(0))),
            ("b", tensor16(ty, vec![n], &column(1))),
            ("c", tensor16(ty, vec![n], &column(2))),
        ];
        let y = run(backend, &plan, inputs, vec![], Mode::Fast)
            .unwrap()
            .outputs["y"]
            .to_bits();
        for (i, c) in mine.iter().enumerate() {
            let want = numerics::fma16(ty, c[0], c[1], c[2]).unwrap();
            assert_eq!(y[i], u32::from(want), "{ty} fma{c:04x?}");
        }
    }
}

const CASTS_LEN: usize = 1024;

pub fn casts_program(ty: ScalarType) -> String {
    let (t, k, n) = (ty.keyword(), other(ty).keyword(), CASTS_LEN);
    format!(
        "mesh m {{ grid [blk = {blocks}]; threads t = 64; }}
kernel casts(xf: gmem<f32[{n}]>, xi: gmem<i32[{n}]>, xu: gmem<u32[{n}]>, xb: gmem<bool[{n}]>, xh: gmem<{t}[{n}]>,
             yh: gmem<{t}[6, {n}]>, yf: gmem<f32[{n}]>, yi: gmem<i32[2, {n}]>, yu: gmem<u32[2, {n}]>, yb: gmem<bool[{n}]>, yk: gmem<{k}[2, {n}]>) {{
  let i: u32 = axis_index(blk) * axis_size(t) + axis_index(t);
  let h: {t} = xh[i];
  yh[0u, i] = {t}(xf[i]);
  yh[1u, i] = {t}(xi[i]);
  yh[2u, i] = {t}(xu[i]);
  yh[3u, i] = {t}(xb[i]);
  yh[4u, i] = bitcast<{t}>(xu[i]);
  yh[5u, i] = bitcast<{t}>(xi[i]);
  yf[i] = f32(h);
  yi[0u, i] = i32(h);
  yi[1u, i] = bitcast<i32>(h);
  yu[0u, i] = u32(h);
  yu[1u, i] = bitcast<u32>(h);
  yb[i] = bool(h);
  yk[0u, i] = {k}(h);
  yk[1u, i] = bitcast<{k}>(h);
}}
map casts {{
  programs [m: casts];
  inputs [xf: gmem<f32[{n}]>, xi: gmem<i32[{n}]>, xu: gmem<u32[{n}]>, xb: gmem<bool[{n}]>, xh: gmem<{t}[{n}]>];
  outputs [yh: gmem<{t}[6, {n}]>, yf: gmem<f32[{n}]>, yi: gmem<i32[2, {n}]>, yu: gmem<u32[2, {n}]>, yb: gmem<bool[{n}]>, yk: gmem<{k}[2, {n}]>];
}}
",
        blocks = n / 64
    )
}

/// f32 values to round: specials, the ties at 1, overflow and underflow
/// boundaries, every f32 on and next to the midpoints of random 16-bit
/// values, and random bits.
fn f32_inputs(ty: ScalarType) -> Vec<f32> {
    let p = |e: i32| f32::powi(2.0, e);
    let mut out = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        1.0 + p(-11),
        1.0 + 3.0 * p(-11),
        1.0 + p(-8),
        1.0 + 3.0 * p(-8),
        -(1.0 + p(-8)),
        65504.0,
        65519.0,
        65519.996,
        65520.0,
        -65520.0,
        p(-24),
        p(-25),
        p(-25) * (1.0 + p(-23)),
        3.0 * p(-25),
        p(-14) - p(-25),
        f32::MAX,
        -f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0x0000_8000),
        f32::from_bits(0x0001_8000),
        f32::from_bits(0x0000_0001),
        f32::from_bits(0x007f_ffff),
        f32::from_bits(0x7f7f_8000),
        f32::from_bits(0x7f7f_7fff),
        f32::MIN_POSITIVE,
    ];
    let mut rng = Rng::new(7 + ty as u64);
    while out.len() < CASTS_LEN {
        let h = values16(ty, 64, rng.next_u64())[24 + (rng.next_u32() % 40) as usize];
        let lo = f32_of(ty, h);
        let hi = f32_of(ty, h.wrapping_add(1));
        if lo.is_finite() && hi.is_finite() && out.len() % 4 != 3 {
            let mid = ((f64::from(lo) + f64::from(hi)) / 2.0) as f32;
            let step = (rng.next_u32() % 3) as i32 - 1;
            out.push(f32::from_bits((mid.to_bits() as i32 + step) as u32));
        } else {
            out.push(f32::from_bits(rng.next_u32()));
        }
    }
    out.truncate(CASTS_LEN);
    out
}

/// Integers to round: around the ties and overflow of f16, around 2^24 for
/// bf16 (where rounding through a nearest f32 would round twice), the
/// extremes, and random ones of every size.
fn int_inputs() -> Vec<i64> {
    let mut out: Vec<i64> = vec![
        0,
        1,
        -1,
        2047,
        2048,
        2049,
        2050,
        2051,
        -2049,
        -2051,
        255,
        256,
        257,
        259,
        65504,
        65505,
        65519,
        65520,
        65535,
        65536,
        -65520,
        1 << 24,
        (1 << 24) + 1,
        (1 << 24) + (1 << 16),
        (1 << 24) + (1 << 16) + 1,
        (1 << 24) + 3 * (1 << 16),
        (1 << 24) + 3 * (1 << 16) - 1,
        -((1 << 24) + (1 << 16) + 1),
        (1 << 25) + (1 << 17) + 1,
        i64::from(i32::MAX),
        i64::from(i32::MIN),
        i64::from(i32::MIN) + 1,
        0x7fff_ff7f,
        0x7fbf_ffff,
    ];
    let mut rng = Rng::new(99);
    while out.len() < CASTS_LEN {
        let bits = rng.next_u32() >> (rng.next_u32() % 32);
        out.push(i64::from(bits as i32));
    }
    out
}

/// Every cast and bitcast to and from both types, both modes.
pub fn every_cast(backend: &mut dyn Backend) {
    for ty in SIXTEEN {
        let plan = plan_of_text(&casts_program(ty));
        let n = CASTS_LEN;
        let xf = f32_inputs(ty);
        let xi: Vec<i32> = int_inputs().into_iter().map(|v| v as i32).collect();
        // u32: the same bits, so large values (above 2^31) come too, and
        // `u32::MAX`.
        let mut xu: Vec<u32> = xi.iter().map(|&v| v as u32).collect();
        xu[1] = u32::MAX;
        xu[2] = 0x8000_0000;
        xu[3] = 0xdead_3c00;
        let xb: Vec<u32> = (0..n).map(|i| (i % 3 == 1) as u32).collect();
        let xh = values16(ty, n, 11);
        let inputs = || {
            vec![
                ("xf", HostTensor::from_f32(vec![n as u32], &xf)),
                ("xi", HostTensor::from_i32(vec![n as u32], &xi)),
                ("xu", HostTensor::from_u32(vec![n as u32], &xu)),
                (
                    "xb",
                    HostTensor::new(ScalarType::Bool, vec![n as u32], xb.clone()).unwrap(),
                ),
                ("xh", tensor16(ty, vec![n as u32], &xh)),
            ]
        };
        let k = other(ty);
        for mode in [Mode::Fast, Mode::Checked] {
            let out = run(backend, &plan, inputs(), vec![], mode).unwrap();
            let yh = out.outputs["yh"].to_bits();
            let yf = out.outputs["yf"].to_bits();
            let yi = out.outputs["yi"].to_bits();
            let yu = out.outputs["yu"].to_bits();
            let yb = out.outputs["yb"].to_bits();
            let yk = out.outputs["yk"].to_bits();
            let mut wrong = Vec::new();
            let check16 = |wrong: &mut Vec<String>, what: String, t, got, want| {
                if !same16(t, got, want) {
                    wrong.push(format!("{what} = {got:#06x}, want {want:#06x}"));
                }
            };
            for i in 0..n {
                let h = xh[i];
                let v = f32_of(ty, h);
                let at = |row: usize| row * n + i;
                check16(
                    &mut wrong,
                    format!("{ty}({:e})", xf[i]),
                    ty,
                    yh[at(0)],
                    round(ty, xf[i]),
                );
                let from_int = |v: i64| numerics::from_integer(ty, v).unwrap();
                check16(
                    &mut wrong,
                    format!("{ty}({}i32)", xi[i]),
                    ty,
                    yh[at(1)],
                    from_int(xi[i].into()),
                );
                check16(
                    &mut wrong,
                    format!("{ty}({}u32)", xu[i]),
                    ty,
                    yh[at(2)],
                    from_int(xu[i].into()),
                );
                let one = if xb[i] != 0 { 1.0 } else { 0.0 };
                check16(
                    &mut wrong,
                    format!("{ty}(bool {})", xb[i]),
                    ty,
                    yh[at(3)],
                    round(ty, one),
                );
                check16(
                    &mut wrong,
                    format!("bitcast<{ty}>({:#x}u32)", xu[i]),
                    ty,
                    yh[at(4)],
                    xu[i] as u16,
                );
                check16(
                    &mut wrong,
                    format!("bitcast<{ty}>({}i32)", xi[i]),
                    ty,
                    yh[at(5)],
                    xi[i] as u16,
                );
                check16(
                    &mut wrong,
                    format!("{k}({h:#06x})"),
                    k,
                    yk[at(0)],
                    round(k, v),
                );
                check16(
                    &mut wrong,
                    format!("bitcast<{k}>({h:#06x})"),
                    k,
                    yk[at(1)],
                    h,
                );
                let exact = [
                    ("f32", yf[i], v.to_bits(), v.is_nan()),
                    ("i32", yi[at(0)], v as i32 as u32, false),
                    ("bitcast<i32>", yi[at(1)], u32::from(h), false),
                    ("u32", yu[at(0)], v as u32, false),
                    ("bitcast<u32>", yu[at(1)], u32::from(h), false),
                    ("bool", yb[i], u32::from(v != 0.0), false),
                ];
                for (what, got, want, nan) in exact {
                    let nan_ok = nan && f32::from_bits(got).is_nan();
                    if got != want && !nan_ok {
                        wrong.push(format!("{what}({h:#06x}) = {got:#x}, want {want:#x}"));
                    }
                }
            }
            assert!(
                wrong.is_empty(),
                "{ty} {mode:?}: {} wrong, first: {:#?}",
                wrong.len(),
                &wrong[..wrong.len().min(20)]
            );
        }
    }
}

/// 31 blocks of 33 threads over 1,023 elements: block boundaries fall
/// inside words, and every word holds elements of two threads.
pub fn contention_program(ty: ScalarType) -> String {
    let t = ty.keyword();
    format!(
        "mesh m {{ grid [blk = 31]; threads t = 33; }}
kernel k(x: gmem<{t}[1023]>, y: gmem<{t}[1023]>, z: gmem<{t}[1023]>, o: gmem<{t}[3]> @ m, l: gmem<{t}[1023]>, tile: smem<{t}[33]>) {{
  let j: u32 = axis_index(t);
  let i: u32 = axis_index(blk) * 33u + j;
  tile[j] = x[i];
  barrier;
  y[i] = tile[32u - j];
  z[j * 31u + axis_index(blk)] = -x[i];
  if j < 3u {{
    o[j] = x[i];
  }}
  local a: {t}[3];
  a[0u] = x[i];
  a[1u] = -x[i];
  a[2u] = abs(x[i]);
  l[i] = a[(i % 3u)];
}}
map k {{
  programs [m: k];
  inputs [x: gmem<{t}[1023]>];
  outputs [y: gmem<{t}[1023]>, z: gmem<{t}[1023]>, o: gmem<{t}[3]> @ m, l: gmem<{t}[1023]>];
  scratch [tile: smem<{t}[33]>];
}}
"
    )
}

/// Neighbouring elements written by neighbouring threads, by different
/// blocks, in smem, in owned instances of odd length and from local arrays.
pub fn packed_stores(backend: &mut dyn Backend) {
    for ty in SIXTEEN {
        let plan = plan_of_text(&contention_program(ty));
        // Distinct non-NaN values, so that any lost or misplaced write shows.
        let x: Vec<u16> = (0..1023u16).map(|i| 0x1000 + i).collect();
        let neg = |h: u16| h ^ 0x8000;
        for mode in [Mode::Fast, Mode::Checked] {
            for _ in 0..3 {
                let out = run(
                    backend,
                    &plan,
                    vec![("x", tensor16(ty, vec![1023], &x))],
                    vec![],
                    mode,
                )
                .unwrap();
                let y = out.outputs["y"].to_bits();
                let z = out.outputs["z"].to_bits();
                let o = &out.outputs["o"];
                let l = out.outputs["l"].to_bits();
                assert_eq!(o.shape(), &[31, 3]);
                assert_eq!(o.words().len(), 47, "93 elements packed in 47 words");
                for i in 0..1023usize {
                    let (blk, j) = (i / 33, i % 33);
                    assert_eq!(y[i], u32::from(x[blk * 33 + 32 - j]), "{ty} y[{i}] (smem)");
                    assert_eq!(
                        z[j * 31 + blk],
                        u32::from(neg(x[i])),
                        "{ty} z[{}]",
                        j * 31 + blk
                    );
                    let a = [x[i], neg(x[i]), x[i] & 0x7fff];
                    assert_eq!(l[i], u32::from(a[i % 3]), "{ty} l[{i}] (local)");
                }
                for blk in 0..31usize {
                    for j in 0..3 {
                        let got = o.bits(blk * 3 + j).unwrap();
                        assert_eq!(got, u32::from(x[blk * 33 + j]), "{ty} o@[{blk}][{j}]");
                    }
                }
            }
        }
    }
}

const ROWS: usize = 5;
const COLS: usize = 1001;

pub fn mixed_program() -> String {
    format!(
        "mesh m {{ grid [r = {ROWS}]; threads t = 32; }}
kernel rowsum(x: gmem<bf16[{ROWS}, {COLS}]>, s: gmem<f32[{ROWS}]>, sb: gmem<bf16[{ROWS}]>, y: gmem<bf16[{ROWS}, {COLS}]>, tile: smem<f32[32]>) {{
  let row: u32 = axis_index(r);
  let t: u32 = axis_index(t);
  var acc: f32 = 0.0;
  for k: u32 in 0u..32u {{
    let j: u32 = k * 32u + t;
    if j < {COLS}u {{
      let v: f32 = f32(x[row, j]);
      acc = acc + v;
      y[row, j] = bf16(v * 0.5 + 1.0);
    }}
  }}
  tile[t] = acc;
  barrier;
  if t == 0u {{
    var total: f32 = 0.0;
    for q: u32 in 0u..32u {{
      total = total + tile[q];
    }}
    s[row] = total;
    sb[row] = bf16(total);
  }}
}}
map rowsum {{
  programs [m: rowsum];
  inputs [x: gmem<bf16[{ROWS}, {COLS}]>];
  outputs [s: gmem<f32[{ROWS}]>, sb: gmem<bf16[{ROWS}]>, y: gmem<bf16[{ROWS}, {COLS}]>];
  scratch [tile: smem<f32[32]>];
}}
"
    )
}

/// bf16 loads, f32 accumulation (a row sum), bf16 stores.
pub fn mixed_precision(backend: &mut dyn Backend) {
    let plan = plan_of_text(&mixed_program());
    let mut rng = Rng::new(5);
    let x: Vec<u16> = (0..ROWS * COLS)
        .map(|_| numerics::bf16_from_f32(rng.unit_f32() * 8.0 - 4.0))
        .collect();
    for mode in [Mode::Fast, Mode::Checked] {
        let out = run(
            backend,
            &plan,
            vec![("x", tensor16(BF16, vec![ROWS as u32, COLS as u32], &x))],
            vec![],
            mode,
        )
        .unwrap();
        let s = out.outputs["s"].to_f32();
        let sb = out.outputs["sb"].to_bits();
        let y = out.outputs["y"].to_bits();
        for row in 0..ROWS {
            // The kernel's order: each thread sums its strided columns, then
            // thread 0 sums the 32 partial sums in thread order.
            let mut partial = [0.0f32; 32];
            for (t, acc) in partial.iter_mut().enumerate() {
                for k in 0..32 {
                    let j = k * 32 + t;
                    if j < COLS {
                        let v = numerics::bf16_to_f32(x[row * COLS + j]);
                        *acc += v;
                        let want = numerics::bf16_from_f32(v * 0.5 + 1.0);
                        assert_eq!(y[row * COLS + j], u32::from(want), "y[{row}, {j}]");
                    }
                }
            }
            let total = partial.iter().fold(0.0f32, |a, &p| a + p);
            assert_eq!(s[row].to_bits(), total.to_bits(), "s[{row}] ({mode:?})");
            let want = numerics::bf16_from_f32(total);
            assert_eq!(sb[row], u32::from(want), "sb[{row}] ({mode:?})");
        }
    }
}

pub fn scalars_program() -> &'static str {
    "mesh m { threads t = 63; }
kernel sc(x: gmem<f16[63]>, xb: gmem<bf16[63]>, y: gmem<f16[63]>, yb: gmem<bf16[63]>, h: f16, g: bf16) {
  let i: u32 = axis_index(t);
  y[i] = x[i] * h + h;
  yb[i] = xb[i] * g - 1.5bf16;
}
map sc {
  programs [m: sc];
  inputs [x: gmem<f16[63]>, xb: gmem<bf16[63]>];
  outputs [y: gmem<f16[63]>, yb: gmem<bf16[63]>];
  scalars [h: f16, g: bf16];
}
"
}

/// 16-bit scalar parameters (a word, bits in the low half) and literals.
pub fn scalar_parameters(backend: &mut dyn Backend) {
    let plan = plan_of_text(scalars_program());
    let x = values16(F16, 63, 21);
    let xb = values16(BF16, 63, 22);
    let h = numerics::f16_from_f32(-1.25);
    let g = 0x0003; // a bf16 subnormal
    let out = run(
        backend,
        &plan,
        vec![
            ("x", tensor16(F16, vec![63], &x)),
            ("xb", tensor16(BF16, vec![63], &xb)),
        ],
        vec![("h", Literal::F16(h)), ("g", Literal::BF16(g))],
        Mode::Fast,
    )
    .unwrap();
    let (y, yb) = (out.outputs["y"].to_bits(), out.outputs["yb"].to_bits());
    for i in 0..63 {
        let hv = f32_of(F16, h);
        let prod = f32_of(F16, round(F16, f32_of(F16, x[i]) * hv));
        assert!(same16(F16, y[i], round(F16, prod + hv)), "y[{i}]");
        let prod = f32_of(BF16, round(BF16, f32_of(BF16, xb[i]) * f32_of(BF16, g)));
        assert!(same16(BF16, yb[i], round(BF16, prod - 1.5)), "yb[{i}]");
    }
}

/// A bf16 resident of odd length, set, updated by three calls and read back.
pub fn odd_resident(backend: &mut dyn Backend) {
    let plan = plan_of_text(
        "mesh m { threads t = 7; }
resident acc: gmem<bf16[7]>;
kernel bump(y: gmem<bf16[7]>, acc: gmem<bf16[7]>) {
  let i: u32 = axis_index(t);
  acc[i] = acc[i] + 1.0bf16;
  y[i] = acc[i];
}
map bump { programs [m: bump]; outputs [y: gmem<bf16[7]>]; scratch [acc: gmem<bf16[7]> resident]; }
",
    );
    let start: Vec<u16> = (0..7)
        .map(|i| numerics::bf16_from_f32(i as f32 * 0.5))
        .collect();
    backend
        .set_resident("acc", tensor16(BF16, vec![7], &start))
        .unwrap();
    for call in 1..=3 {
        let out = backend
            .run(&plan, &CallArgs::default(), &RunOptions::default())
            .unwrap();
        let want: Vec<f32> = (0..7).map(|i| i as f32 * 0.5 + call as f32).collect();
        assert_eq!(out.outputs["y"].to_f32(), want, "call {call}");
        let resident = backend.resident("acc").unwrap();
        assert_eq!(resident.to_f32(), want, "call {call}");
        assert_eq!(resident.words().len(), 4);
    }
}

/// A checked out-of-bounds 16-bit load reports the element index.
pub fn checked_out_of_bounds(backend: &mut dyn Backend) {
    let plan = plan_of_text(
        "mesh m { threads t = 5; }
kernel k(x: gmem<f16[5]>, y: gmem<f16[5]>, n: u32) {
  let i: u32 = axis_index(t);
  y[i] = x[i + n];
}
map k { programs [m: k]; inputs [x: gmem<f16[5]>]; outputs [y: gmem<f16[5]>]; scalars [n: u32]; }
",
    );
    let x = tensor16(F16, vec![5], &[0x3c00; 5]);
    let error = run(
        backend,
        &plan,
        vec![("x", x)],
        vec![("n", Literal::U32(2))],
        Mode::Checked,
    )
    .unwrap_err();
    let RunError::OutOfBounds {
        reference,
        index,
        shape,
        ..
    } = &error
    else {
        panic!("{error}");
    };
    // Threads 3 and 4 read elements 5 and 6 (bytes 10..14, word 2 and the
    // low half of word 3): the report names the element, not a word or a byte.
    assert_eq!(
        (reference.as_str(), shape.as_str()),
        ("x", "[5]"),
        "{error}"
    );
    assert!(matches!(index.as_str(), "[5]" | "[6]"), "{error}");
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
