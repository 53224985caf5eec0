//! f16 and bf16 on the WGSL backend (issue 12): every operation and cast on
//! special values, packed stores under contention (gmem across workgroups,
//! smem, odd lengths, owned instances that start mid-word), local arrays,
//! residents, mixed precision and a 16-bit smem transpose, run on the
//! adapter and compared bit for bit with `mpmd_core::numerics` (the rules
//! the interpreter implements). The generated modules also pass the `naga`
//! and `tint` command lines where they are installed.
//!
//! lavapipe flushes f32 subnormals: bf16 subnormals (which are f32
//! subnormals) may flush to a signed zero, judged against the same rules
//! with `flush_subnormals` applied to the f32 intermediates; f16 subnormals
//! are f32 normals and must be exact.

mod common;

use common::*;
use mpmd_core::backend::Backend;
use mpmd_core::host::{CallOutputs, HostTensor};
use mpmd_core::ir::{Literal, ScalarType};
use mpmd_core::numerics as num;
use mpmd_core::Mode;
use mpmd_wgpu::{F16Conversions, WgpuOptions};

const F16: ScalarType = ScalarType::F16;
const BF16: ScalarType = ScalarType::BF16;

fn other(t: ScalarType) -> ScalarType {
    if t == F16 {
        BF16
    } else {
        F16
    }
}

fn widen(t: ScalarType, b: u16) -> f32 {
    num::to_f32(t, b).unwrap()
}

fn round(t: ScalarType, v: f32) -> u16 {
    num::from_f32(t, v).unwrap()
}

fn is_nan(t: ScalarType, b: u16) -> bool {
    widen(t, b).is_nan()
}

/// The f32 an adapter that flushes subnormals computes with.
fn flushed(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else {
        v
    }
}

/// Special values of `t`: ±0, the smallest and largest subnormal, the
/// smallest normal, 1 and its neighbours, the largest finite, ±inf, NaN.
fn specials(t: ScalarType) -> Vec<u16> {
    let mut v: Vec<u16> = if t == F16 {
        vec![
            0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0xbc00, 0x3e00, 0x4200, 0x7bff,
            0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x3555, 0xc900, 0x1400,
        ]
    } else {
        vec![
            0x0000, 0x8000, 0x0001, 0x007f, 0x0080, 0x3f80, 0x3f81, 0xbf80, 0x3fc0, 0x4040, 0x7f7f,
            0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x3eab, 0xc120, 0x4b80,
        ]
    };
    v.dedup();
    v
}

/// A small deterministic generator (no dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
}

/// Operand triples: every pair of specials (with a third special), the
/// fma cases of `numerics::tests::fma_rounds_once`, then random bits.
fn operands(t: ScalarType, n: usize) -> (Vec<u16>, Vec<u16>, Vec<u16>) {
    let s = specials(t);
    let (mut a, mut b, mut c) = (vec![], vec![], vec![]);
    for (k, &x) in s.iter().enumerate() {
        for (j, &y) in s.iter().enumerate() {
            a.push(x);
            b.push(y);
            c.push(s[(k + 2 * j) % s.len()]);
        }
    }
    let r = |v: f32| round(t, v);
    let fma_cases: Vec<(u16, u16, u16)> = if t == F16 {
        let a1 = r(1.0 + f32::powi(2.0, -10));
        let x = r(1.0 + f32::powi(2.0, -6));
        let y = r(1.0 + f32::powi(2.0, -5));
        vec![
            (a1, a1, r(-f32::powi(2.0, -9))),
            (x, y, 0x0001),
            (x, y, 0x8001),
            (x, y, 0x0000),
        ]
    } else {
        let x = r(1.0 + f32::powi(2.0, -4));
        let tiny = r(f32::powi(2.0, -60));
        vec![(x, x, tiny), (x, x, 0), (x, x, tiny | 0x8000)]
    };
    for (x, y, z) in fma_cases {
        a.push(x);
        b.push(y);
        c.push(z);
    }
    // Arithmetic ties: 1 + 2^-11 (f16) or 1 + 2^-8 (bf16) from 1 + half an ulp.
    let half_ulp = if t == F16 { 0x1000 } else { 0x3b80 };
    a.push(r(1.0));
    b.push(half_ulp);
    c.push(0);
    let mut rng = Lcg(t as u64 + 7);
    while a.len() < n {
        a.push(rng.next() as u16);
        b.push(rng.next() as u16);
        c.push(rng.next() as u16);
    }
    (a, b, c)
}

fn tensor(t: ScalarType, bits: &[u16]) -> HostTensor {
    HostTensor::new(
        t,
        vec![bits.len() as u32],
        bits.iter().map(|&b| u32::from(b)).collect(),
    )
    .unwrap()
}

fn bits16(out: &CallOutputs, name: &str) -> Vec<u16> {
    out.outputs[name]
        .to_bits()
        .into_iter()
        .map(|b| b as u16)
        .collect()
}

/// Whether `got` is `want`, counting every NaN as the same (payloads are unspecified).
fn same(t: ScalarType, got: u16, want: u16) -> bool {
    got == want || (is_nan(t, got) && is_nan(t, want))
}

const THREADS: u32 = 64;

/// The interpreter's outputs for the same call, compared bit for bit with
/// `got` (every NaN counting as the same, payloads being unspecified). The
/// interpreter learns 16-bit floats in a parallel branch: until then it
/// cannot run these programs (it panics or errors), and this says so
/// instead of comparing; the checks against `mpmd_core::numerics` stand.
fn assert_matches_interpreter(
    p: &mpmd_core::plan::LaunchPlan,
    call: &mpmd_core::host::CallArgs,
    got: &CallOutputs,
) {
    let expected = mpmd_core::interp::Interpreter::new()
        .run(p, call, &fast())
        .unwrap_or_else(|e| panic!("the interpreter refuses the program: {e}"));
    for (name, e) in &expected.outputs {
        let g = &got.outputs[name];
        assert_eq!((g.elem(), g.shape()), (e.elem(), e.shape()), "`{name}`");
        let (gf, ef) = (g.to_f32(), e.to_f32());
        for (k, (gb, eb)) in g.to_bits().into_iter().zip(e.to_bits()).enumerate() {
            // NaN payloads and the sign of zero are unspecified.
            let both_nan = g.elem().is_float() && gf[k].is_nan() && ef[k].is_nan();
            let zeros = g.elem().is_float() && gf[k] == 0.0 && ef[k] == 0.0;
            assert!(
                gb == eb || both_nan || zeros,
                "`{name}`[{k}]: wgpu 0x{gb:x}, interpreter 0x{eb:x}"
            );
        }
    }
}

fn ops_program(t: ScalarType, n: usize) -> String {
    let blocks = (n as u32).div_ceil(THREADS);
    let o = other(t);
    let outs16 = [
        "add", "sub", "mul", "div", "rem", "sq", "fm", "mn", "mx", "ab", "ng", "fl", "ce", "sl",
    ];
    let mut params = vec![
        format!("a: gmem<{t}[{n}]>"),
        format!("b: gmem<{t}[{n}]>"),
        format!("c: gmem<{t}[{n}]>"),
    ];
    let mut outputs = vec![];
    for name in outs16 {
        outputs.push(format!("{name}: gmem<{t}[{n}]>"));
    }
    for (name, ty) in [
        ("cmp", "u32"),
        ("wide", "f32"),
        ("toi", "i32"),
        ("tou", "u32"),
        ("tobool", "u32"),
        ("bits", "u32"),
        ("ibits", "i32"),
    ] {
        outputs.push(format!("{name}: gmem<{ty}[{n}]>"));
    }
    outputs.push(format!("oth: gmem<{o}[{n}]>"));
    outputs.push(format!("obits: gmem<{o}[{n}]>"));
    params.extend(outputs.iter().cloned());
    format!(
        "
mesh m {{
  grid [g = {blocks}];
  threads t = {THREADS};
}}
kernel ops({params}) {{
  let i: u32 = axis_index(g) * {THREADS}u + axis_index(t);
  if i < {n}u {{
    let x: {t} = a[i];
    let y: {t} = b[i];
    let z: {t} = c[i];
    add[i] = x + y;
    sub[i] = x - y;
    mul[i] = x * y;
    div[i] = x / y;
    rem[i] = x % y;
    sq[i] = sqrt(x);
    fm[i] = fma(x, y, z);
    mn[i] = min(x, y);
    mx[i] = max(x, y);
    ab[i] = abs(x);
    ng[i] = -x;
    fl[i] = floor(x);
    ce[i] = ceil(x);
    sl[i] = select(x < y, z, x);
    cmp[i] = select(x == y, 1u, 0u) | select(x != y, 2u, 0u) | select(x < y, 4u, 0u) | select(x <= y, 8u, 0u) | select(x > y, 16u, 0u) | select(x >= y, 32u, 0u);
    wide[i] = f32(x);
    toi[i] = i32(x);
    tou[i] = u32(x);
    tobool[i] = select(bool(x), 1u, 0u);
    bits[i] = bitcast<u32>(x);
    ibits[i] = bitcast<i32>(x);
    oth[i] = {o}(x);
    obits[i] = bitcast<{o}>(x);
  }}
}}
map ops {{
  programs [m: ops];
  inputs [a: gmem<{t}[{n}]>, b: gmem<{t}[{n}]>, c: gmem<{t}[{n}]>];
  outputs [{outputs}];
}}
",
        params = params.join(", "),
        outputs = outputs.join(", "),
    )
}

/// The 16-bit results of `ops` for one operand triple, by the rules
/// (`flush`: as an adapter that flushes f32 subnormals computes them).
fn expected16(t: ScalarType, name: &str, x: u16, y: u16, z: u16, flush: bool) -> u16 {
    let f = |v: f32| if flush { flushed(v) } else { v };
    let (wx, wy) = (f(widen(t, x)), f(widen(t, y)));
    let r = |v: f32| round(t, f(v));
    let select_bits = |a: u16, b: u16, wa: f32, wb: f32, less: bool| {
        // One NaN operand: the other; otherwise the smaller (larger) one, b on ties.
        let a_wins = (less && wa < wb) || (!less && wa > wb);
        if is_nan(t, a) || (!is_nan(t, b) && !a_wins) {
            b
        } else {
            a
        }
    };
    let to_bits = |v: f32| round(t, v);
    match name {
        "add" => r(wx + wy),
        "sub" => r(wx - wy),
        "mul" => r(wx * wy),
        "div" => r(wx / wy),
        "rem" => r(wx % wy),
        "sq" => r(wx.sqrt()),
        "fm" => {
            let g = |b: u16| if flush { to_bits(f(widen(t, b))) } else { b };
            num::fma16(t, g(x), g(y), g(z)).unwrap()
        }
        "mn" if flush => r(widen(
            t,
            select_bits(to_bits(wx), to_bits(wy), wx, wy, true),
        )),
        "mx" if flush => r(widen(
            t,
            select_bits(to_bits(wx), to_bits(wy), wx, wy, false),
        )),
        "mn" => select_bits(x, y, wx, wy, true),
        "mx" => select_bits(x, y, wx, wy, false),
        "ab" => x & 0x7fff,
        "ng" => x ^ 0x8000,
        "fl" => r(wx.floor()),
        "ce" => r(wx.ceil()),
        "sl" => {
            if wx < wy {
                z
            } else {
                x
            }
        }
        _ => unreachable!("{name}"),
    }
}

fn subnormal(t: ScalarType, b: u16) -> bool {
    widen(t, b).is_subnormal()
}

/// Runs the `ops` program for `t`; returns the mismatches, each a line.
fn check_ops(t: ScalarType, conversions: Option<F16Conversions>) -> Vec<String> {
    let n = 1021;
    let (a, b, c) = operands(t, n);
    let mut wgpu = backend(with_conversions(conversions));
    let m = module(&ops_program(t, n));
    let p = plan(&m, "ops");
    let call = args(
        vec![
            ("a", tensor(t, &a)),
            ("b", tensor(t, &b)),
            ("c", tensor(t, &c)),
        ],
        vec![],
    );
    let out = wgpu
        .run(&p, &call, &fast())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_matches_interpreter(&p, &call, &out);
    let o = other(t);
    let mut bad = vec![];
    let mut flushed_cases = 0;
    // bf16 cases that touch subnormals may be computed with them flushed.
    let may_flush = |k: usize, exact: f32| {
        t == BF16
            && (subnormal(t, a[k])
                || subnormal(t, b[k])
                || subnormal(t, c[k])
                || exact.is_subnormal())
    };
    for name in [
        "add", "sub", "mul", "div", "rem", "sq", "fm", "mn", "mx", "ab", "ng", "fl", "ce", "sl",
    ] {
        let got = bits16(&out, name);
        for k in 0..n {
            let want = expected16(t, name, a[k], b[k], c[k], false);
            if same(t, got[k], want) {
                continue;
            }
            // The f32 result before rounding, for the flush rule.
            let (wx, wy) = (widen(t, a[k]), widen(t, b[k]));
            let exact = match name {
                "add" => wx + wy,
                "sub" => wx - wy,
                "mul" => wx * wy,
                "div" => wx / wy,
                "rem" => wx % wy,
                _ => 1.0,
            };
            if may_flush(k, exact) && same(t, got[k], expected16(t, name, a[k], b[k], c[k], true)) {
                flushed_cases += 1;
                continue;
            }
            bad.push(format!(
                "{t} {name}(0x{:04x}, 0x{:04x}, 0x{:04x}): got 0x{:04x}, want 0x{want:04x}",
                a[k], b[k], c[k], got[k]
            ));
        }
    }
    eprintln!("{t}: {flushed_cases} arithmetic results matched only the flushing rule");
    let cmp = out.outputs["cmp"].to_u32();
    let wide = out.outputs["wide"].to_f32();
    let toi = out.outputs["toi"].to_i32();
    let tou = out.outputs["tou"].to_u32();
    let tobool = out.outputs["tobool"].to_u32();
    let bits = out.outputs["bits"].to_u32();
    let ibits = out.outputs["ibits"].to_i32();
    let oth = bits16(&out, "oth");
    let obits = bits16(&out, "obits");
    for k in 0..n {
        let (x, y) = (a[k], b[k]);
        let flags = |wx: f32, wy: f32| {
            u32::from(wx == wy)
                | (u32::from(wx != wy) << 1)
                | (u32::from(wx < wy) << 2)
                | (u32::from(wx <= wy) << 3)
                | (u32::from(wx > wy) << 4)
                | (u32::from(wx >= wy) << 5)
        };
        let (wx, wy) = (widen(t, x), widen(t, y));
        let flush_ok = |ok: bool| ok && may_flush(k, 1.0);
        let mut check = |what: &str, ok: bool, flush: bool, got: String| {
            if !ok && !flush_ok(flush) {
                bad.push(format!("{t} {what}(0x{x:04x}, 0x{y:04x}): got {got}"));
            }
        };
        check(
            "cmp",
            cmp[k] == flags(wx, wy),
            cmp[k] == flags(flushed(wx), flushed(wy)),
            format!("{:#x}", cmp[k]),
        );
        check(
            "f32",
            wide[k].to_bits() == wx.to_bits() || (wide[k].is_nan() && wx.is_nan()),
            wide[k].to_bits() == flushed(wx).to_bits(),
            format!("{:#x}", wide[k].to_bits()),
        );
        check("i32", toi[k] == wx as i32, false, toi[k].to_string());
        check("u32", tou[k] == wx as u32, false, tou[k].to_string());
        check(
            "bool",
            tobool[k] == u32::from(wx != 0.0 || wx.is_nan()),
            tobool[k] == u32::from(flushed(wx) != 0.0 || wx.is_nan()),
            tobool[k].to_string(),
        );
        check(
            "bitcast<u32>",
            bits[k] == u32::from(x),
            false,
            bits[k].to_string(),
        );
        check(
            "bitcast<i32>",
            ibits[k] == i32::from(x),
            false,
            ibits[k].to_string(),
        );
        check(
            &format!("{o}()"),
            same(o, oth[k], round(o, wx)),
            same(o, oth[k], round(o, flushed(wx))),
            format!("0x{:04x}", oth[k]),
        );
        check(
            &format!("bitcast<{o}>"),
            obits[k] == x,
            false,
            format!("0x{:04x}", obits[k]),
        );
    }
    bad
}

fn assert_none(bad: Vec<String>) {
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad[..bad.len().min(60)].join("\n")
    );
}

/// The backend's options with f16 conversions as given (`None`: what the
/// adapter's probe chose, native on lavapipe: `tests/f16_conversions.rs`).
fn with_conversions(conversions: Option<F16Conversions>) -> WgpuOptions {
    WgpuOptions {
        f16_conversions: conversions,
        ..WgpuOptions::default()
    }
}

/// f16 runs both ways: the adapter's choice and the conversions on the bits.
const F16_WAYS: [Option<F16Conversions>; 2] = [None, Some(F16Conversions::Emulated)];

#[test]
fn f16_operations_match_the_rules() {
    for way in F16_WAYS {
        assert_none(check_ops(F16, way));
    }
}

#[test]
fn bf16_operations_match_the_rules() {
    assert_none(check_ops(BF16, None));
}

/// f32 inputs for conversions: ties at the rounding boundary of both types,
/// the overflow threshold, subnormal boundaries, f32 subnormals, inf, NaN.
fn f32_specials() -> Vec<f32> {
    let p = |e: i32| f32::powi(2.0, e);
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        1.0 + p(-11),
        1.0 + 3.0 * p(-11),
        1.0 + p(-8),
        1.0 + 3.0 * p(-8),
        1.0 + p(-8) + p(-20),
        65504.0,
        65519.0,
        65520.0,
        -65520.0,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        p(-24),
        p(-25),
        p(-25) * (1.0 + p(-20)),
        1.5 * p(-24),
        2.5 * p(-24),
        p(-14),
        p(-14) - p(-25),
        p(-15) * 1.5,
        f32::from_bits(1),
        f32::from_bits(0x0000_8000),
        f32::from_bits(0x0001_8000),
        f32::from_bits(0x807f_ffff),
        f32::MIN_POSITIVE,
        3.0e38,
        0.1,
        -2.75,
    ];
    let mut rng = Lcg(99);
    while v.len() < 200 {
        v.push(f32::from_bits(rng.next()));
    }
    v
}

fn int_specials() -> Vec<i32> {
    let mut v = vec![
        0,
        1,
        -1,
        2047,
        2049,
        -2049,
        4097,
        65504,
        65519,
        65520,
        -65536,
        (1 << 24) + 1,
        (1 << 24) + (1 << 16) + 1,
        (1 << 24) + (1 << 17),
        -((1 << 24) + (1 << 16) + 1),
        (1 << 25) + (1 << 17) + 1,
        i32::MAX,
        i32::MIN,
        i32::MIN + 1,
        0x7fff_ff80,
    ];
    let mut rng = Lcg(5);
    while v.len() < 200 {
        v.push(rng.next() as i32);
    }
    v
}

fn conversions_program(t: ScalarType, n: usize) -> String {
    let o = other(t);
    let blocks = (n as u32).div_ceil(THREADS);
    format!(
        "
mesh m {{
  grid [g = {blocks}];
  threads t = {THREADS};
}}
kernel conv(f: gmem<f32[{n}]>, ii: gmem<i32[{n}]>, uu: gmem<u32[{n}]>, ob: gmem<{o}[{n}]>, from_f: gmem<{t}[{n}]>, from_i: gmem<{t}[{n}]>, from_u: gmem<{t}[{n}]>, from_o: gmem<{t}[{n}]>, from_b: gmem<{t}[{n}]>, from_ub: gmem<{t}[{n}]>, from_ib: gmem<{t}[{n}]>, from_ob: gmem<{t}[{n}]>, scaled: gmem<{t}[{n}]>, lit: gmem<{t}[{n}]>, s: {t}) {{
  let i: u32 = axis_index(g) * {THREADS}u + axis_index(t);
  if i < {n}u {{
    let x: {t} = {t}(f[i]);
    from_f[i] = x;
    from_i[i] = {t}(ii[i]);
    from_u[i] = {t}(uu[i]);
    from_o[i] = {t}(ob[i]);
    from_b[i] = {t}(i % 2u == 1u);
    from_ub[i] = bitcast<{t}>(uu[i]);
    from_ib[i] = bitcast<{t}>(ii[i]);
    from_ob[i] = bitcast<{t}>(ob[i]);
    scaled[i] = x * s;
    lit[i] = x + 1.5{t};
  }}
}}
map conv {{
  programs [m: conv];
  inputs [f: gmem<f32[{n}]>, ii: gmem<i32[{n}]>, uu: gmem<u32[{n}]>, ob: gmem<{o}[{n}]>];
  scalars [s: {t}];
  outputs [from_f: gmem<{t}[{n}]>, from_i: gmem<{t}[{n}]>, from_u: gmem<{t}[{n}]>, from_o: gmem<{t}[{n}]>, from_b: gmem<{t}[{n}]>, from_ub: gmem<{t}[{n}]>, from_ib: gmem<{t}[{n}]>, from_ob: gmem<{t}[{n}]>, scaled: gmem<{t}[{n}]>, lit: gmem<{t}[{n}]>];
}}
"
    )
}

fn check_conversions(t: ScalarType, conversions: Option<F16Conversions>) {
    let n = 199;
    let o = other(t);
    let f: Vec<f32> = f32_specials()[..n].to_vec();
    let ii: Vec<i32> = int_specials()[..n].to_vec();
    let uu: Vec<u32> = ii
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            if k % 3 == 0 {
                v as u32
            } else {
                v.unsigned_abs()
            }
        })
        .chain([u32::MAX, 1 << 31, (1 << 31) + (1 << 23) + 1])
        .skip(3)
        .collect();
    let (mut ob, _, _) = operands(o, n);
    ob.truncate(n);
    let s: u16 = if t == F16 { 0x3e00 } else { 0x3fc0 }; // 1.5
    let mut wgpu = backend(with_conversions(conversions));
    let m = module(&conversions_program(t, n));
    let p = plan(&m, "conv");
    let call = args(
        vec![
            ("f", HostTensor::from_f32(vec![n as u32], &f)),
            ("ii", HostTensor::from_i32(vec![n as u32], &ii)),
            ("uu", HostTensor::from_u32(vec![n as u32], &uu)),
            ("ob", tensor(o, &ob)),
        ],
        vec![("s", Literal::from_bits(t, u32::from(s)))],
    );
    let out = wgpu
        .run(&p, &call, &fast())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_matches_interpreter(&p, &call, &out);
    let mut bad = vec![];
    let mut check = |what: &str, k: usize, got: u16, want: u16, flush: Option<u16>| {
        if !same(t, got, want) && !flush.is_some_and(|w| same(t, got, w)) {
            bad.push(format!(
                "{t} {what} #{k}: got 0x{got:04x}, want 0x{want:04x}"
            ));
        }
    };
    let lit = round(t, 1.5);
    let names = [
        "from_f", "from_i", "from_u", "from_o", "from_b", "from_ub", "from_ib", "from_ob",
        "scaled", "lit",
    ];
    let got: Vec<Vec<u16>> = names.iter().map(|name| bits16(&out, name)).collect();
    for k in 0..n {
        let x = round(t, f[k]);
        let wx = widen(t, x);
        // bf16 results that are subnormals may come out flushed.
        let flush_of = |v: f32| (t == BF16).then(|| round(t, flushed(v)));
        check("f32 ->", k, got[0][k], x, None);
        check(
            "i32 ->",
            k,
            got[1][k],
            num::from_integer(t, i64::from(ii[k])).unwrap(),
            None,
        );
        check(
            "u32 ->",
            k,
            got[2][k],
            num::from_integer(t, i64::from(uu[k])).unwrap(),
            None,
        );
        check(
            &format!("{o} ->"),
            k,
            got[3][k],
            round(t, widen(o, ob[k])),
            flush_of(widen(o, ob[k])),
        );
        check(
            "bool ->",
            k,
            got[4][k],
            if k % 2 == 1 { round(t, 1.0) } else { 0 },
            None,
        );
        check("bitcast u32 ->", k, got[5][k], uu[k] as u16, None);
        check("bitcast i32 ->", k, got[6][k], ii[k] as u16, None);
        check(&format!("bitcast {o} ->"), k, got[7][k], ob[k], None);
        let scaled = wx * widen(t, s);
        check(
            "* scalar",
            k,
            got[8][k],
            round(t, scaled),
            flush_of(flushed(wx) * widen(t, s)),
        );
        check(
            "+ literal",
            k,
            got[9][k],
            round(t, wx + widen(t, lit)),
            flush_of(flushed(wx) + widen(t, lit)),
        );
    }
    assert_none(bad);
}

#[test]
fn f16_conversions_scalars_and_literals_match_the_rules() {
    for way in F16_WAYS {
        check_conversions(F16, way);
    }
}

#[test]
fn bf16_conversions_scalars_and_literals_match_the_rules() {
    check_conversions(BF16, None);
}

/// The math functions computed in f32 and rounded: the adapter's f32
/// functions are not correctly rounded (ACCURACY.md), so the 16-bit result
/// may be one ulp of the 16-bit type off where the f32 value lies next to
/// a 16-bit rounding boundary; never more.
fn check_math(t: ScalarType, conversions: Option<F16Conversions>) {
    let n = 509;
    let (mut a, mut b, _) = operands(t, n);
    a.truncate(n);
    b.truncate(n);
    let blocks = (n as u32).div_ceil(THREADS);
    let fns = [
        ("ex", "exp(x)"),
        ("lg", "log(x)"),
        ("sn", "sin(x)"),
        ("cs", "cos(x)"),
        ("th", "tanh(x)"),
        ("pw", "pow(x, y)"),
        ("rs", "rsqrt(x)"),
    ];
    let outputs: Vec<String> = fns
        .iter()
        .map(|(name, _)| format!("{name}: gmem<{t}[{n}]>"))
        .collect();
    let body: Vec<String> = fns
        .iter()
        .map(|(name, e)| format!("    {name}[i] = {e};"))
        .collect();
    let src = format!(
        "
mesh m {{
  grid [g = {blocks}];
  threads t = {THREADS};
}}
kernel math(a: gmem<{t}[{n}]>, b: gmem<{t}[{n}]>, {outs}) {{
  let i: u32 = axis_index(g) * {THREADS}u + axis_index(t);
  if i < {n}u {{
    let x: {t} = a[i];
    let y: {t} = b[i];
{body}
  }}
}}
map math {{
  programs [m: math];
  inputs [a: gmem<{t}[{n}]>, b: gmem<{t}[{n}]>];
  outputs [{outs}];
}}
",
        outs = outputs.join(", "),
        body = body.join("\n"),
    );
    let mut wgpu = backend(with_conversions(conversions));
    let p = plan(&module(&src), "math");
    let call = args(vec![("a", tensor(t, &a)), ("b", tensor(t, &b))], vec![]);
    let out = wgpu
        .run(&p, &call, &fast())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut bad = vec![];
    let mut off_by_one = 0;
    for (name, _) in fns {
        let got = bits16(&out, name);
        for k in 0..n {
            let (wx, wy) = (widen(t, a[k]), widen(t, b[k]));
            let subnormal_input = t == BF16 && (wx.is_subnormal() || wy.is_subnormal());
            let exact = match name {
                "ex" => wx.exp(),
                "lg" => wx.ln(),
                "sn" => wx.sin(),
                "cs" => wx.cos(),
                "th" => wx.tanh(),
                "pw" => wx.powf(wy),
                _ => 1.0 / wx.sqrt(),
            };
            let want = round(t, exact);
            if same(t, got[k], want) {
                continue;
            }
            // One ulp of the 16-bit type (neighbouring bit patterns of one sign), finite.
            let neighbour = !is_nan(t, got[k])
                && !is_nan(t, want)
                && (got[k] & 0x8000) == (want & 0x8000)
                && (got[k] as i32 - want as i32).abs() == 1;
            if neighbour {
                off_by_one += 1;
                continue;
            }
            // The adapter's f32 functions of huge arguments (sin, cos), its
            // f32 tanh near 0 (an absolute error of 1.4e-7, ACCURACY.md) and
            // flushed bf16 subnormals are the f32 profile's business.
            let far = matches!(name, "sn" | "cs") && wx.abs() > 1.0e4;
            // WGSL's pow is exp2(y * log2(x)): its f32 domain is x > 0 (as the f32 profile's).
            let pow_outside = name == "pw" && !(wx > 0.0 && wx.is_finite() && wy.is_finite());
            if pow_outside {
                continue;
            }
            let tanh_near_zero =
                name == "th" && (widen(t, got[k]) - exact).abs() <= f32::powi(2.0, -22);
            if far || tanh_near_zero || subnormal_input || exact.is_subnormal() {
                continue;
            }
            bad.push(format!(
                "{t} {name}(0x{:04x}, 0x{:04x}): got 0x{:04x}, want 0x{want:04x}",
                a[k], b[k], got[k]
            ));
        }
    }
    eprintln!(
        "{t} math: {off_by_one} of {} results one 16-bit ulp from the f32 function rounded",
        n * fns.len()
    );
    assert_none(bad);
}

#[test]
fn f16_math_functions_are_the_f32_function_rounded() {
    for way in F16_WAYS {
        check_math(F16, way);
    }
}

#[test]
fn bf16_math_functions_are_the_f32_function_rounded() {
    check_math(BF16, None);
}

/// Runs `map` of `src` and returns its outputs; panics with the error.
fn run_map(src: &str, map: &str, call: &mpmd_core::host::CallArgs) -> CallOutputs {
    let mut wgpu = backend(WgpuOptions::default());
    let p = plan(&module(src), map);
    let out = wgpu
        .run(&p, call, &fast())
        .unwrap_or_else(|e| panic!("{map}: {e}"));
    // Checked mode computes the same element indices through its checks.
    let checked_out = wgpu
        .run(&p, call, &checked())
        .unwrap_or_else(|e| panic!("{map} (checked): {e}"));
    assert_eq!(out, checked_out, "{map}: fast and checked differ");
    assert_matches_interpreter(&p, call, &out);
    out
}

/// Neighbouring threads write neighbouring elements: blocks of 63 threads
/// (odd, so every block boundary splits a word between two workgroups),
/// an odd length, twice over (each word is written by two threads at once).
#[test]
fn packed_gmem_stores_keep_every_neighbour() {
    for t in [F16, BF16] {
        let n = 1069u32;
        let src = format!(
            "
mesh m {{
  grid [g = 17];
  threads t = 63;
}}
kernel fill(y: gmem<{t}[{n}]>, z: gmem<{t}[{n}]>) {{
  let i: u32 = axis_index(g) * 63u + axis_index(t);
  if i < {n}u {{
    y[i] = {t}(i);
    z[{n}u - 1u - i] = -{t}(i * 3u);
  }}
}}
map fill {{
  programs [m: fill];
  outputs [y: gmem<{t}[{n}]>, z: gmem<{t}[{n}]>];
}}
"
        );
        for round_no in 0..3 {
            let out = run_map(&src, "fill", &args(vec![], vec![]));
            let y = bits16(&out, "y");
            let z = bits16(&out, "z");
            assert_eq!(y.len(), n as usize);
            for i in 0..n as usize {
                let want = num::from_integer(t, i as i64).unwrap();
                assert_eq!(y[i], want, "{t} y[{i}], round {round_no}");
                // -x flips the sign bit (so -0 for i = 0).
                let want = num::from_integer(t, 3 * i as i64).unwrap() ^ 0x8000;
                assert_eq!(z[n as usize - 1 - i], want, "{t} z, round {round_no}");
            }
        }
    }
}

/// Paired stores (issue 25, `emit/pairing.rs`): on a device with subgroup
/// operations a lone 16-bit store lets neighbouring invocations that store
/// the two halves of one word write it whole. Pairs, reversed pairs, no
/// pairs (stride 2, odd offsets) and neighbours masked out by a branch (on
/// llvmpipe a masked lane still computes its index, which here is the
/// partner's: only the ballot keeps its value out) all equal the
/// interpreter; a buffer stored twice keeps the two-atomic store.
#[test]
fn paired_sixteen_bit_stores_are_exact_whoever_pairs() {
    let mut wgpu = backend(WgpuOptions::default());
    require_llvmpipe(&wgpu, "its device has subgroup operations (subgroups of 8)");
    let n = 512u32;
    let src = format!(
        "
mesh m {{
  grid [g = 2];
  threads t = 128;
}}
kernel pairs(x: gmem<f16[{n}]>, same: gmem<f16[{n}]>, reversed: gmem<f16[{n}]>, strided: gmem<f16[{n}]>,
             shifted: gmem<f16[{n}]>, masked: gmem<f16[{n}]>, twice: gmem<f16[{n}]>) {{
  let t: u32 = axis_index(t);
  let i: u32 = axis_index(g) * 128u + t;
  let v: f16 = x[i] * f16(3.0) + f16(0.5);
  same[i] = v;
  reversed[{n}u - 1u - i] = v;
  strided[2u * i] = v;
  shifted[i + 1u] = v;
  if t % 3u != 1u {{
    masked[i] = v;
  }}
  twice[i] = v;
  twice[i + 256u] = -v;
}}
map pairs {{
  programs [m: pairs];
  inputs [x: gmem<f16[{n}]>];
  outputs [same: gmem<f16[{n}]> zeroed, reversed: gmem<f16[{n}]> zeroed, strided: gmem<f16[{n}]> zeroed,
           shifted: gmem<f16[{n}]> zeroed, masked: gmem<f16[{n}]> zeroed, twice: gmem<f16[{n}]> zeroed];
}}
"
    );
    let module = module(&src);
    let p = plan(&module, "pairs");
    let wgsl = wgpu.wgsl(&p, Mode::Fast).expect("emits");
    let body = function(&wgsl, "unit0_pairs");
    assert_eq!(
        body.matches("subgroupShuffleXor(").count(),
        2 * 5,
        "the five lone stores pair, `twice` does not:\n{body}"
    );
    assert_eq!(body.matches("atomicStore(").count(), 5, "{body}");
    assert_eq!(body.matches("atomicAnd(").count(), 5 + 2, "{body}");
    let mut rng = Lcg(25);
    let x: Vec<u16> = (0..n)
        .map(|_| num::from_f32(F16, (rng.next() % 2048) as f32 / 16.0 - 64.0).unwrap())
        .collect();
    let call = args(vec![("x", tensor(F16, &x))], vec![]);
    for round_no in 0..3 {
        let out = assert_same(&mut wgpu, &module, "pairs", &call);
        // The masked-out halves keep the zero they started with.
        let masked = bits16(&out, "masked");
        for (i, &half) in masked.iter().enumerate() {
            if i % 128 % 3 == 1 {
                assert_eq!(half, 0, "masked[{i}], round {round_no}");
            }
        }
    }
}

/// A 16x16 tile transposed through 16-bit smem: every thread writes its
/// neighbour's half of a word, then reads an element another thread wrote.
#[test]
fn sixteen_bit_smem_tile_transpose() {
    for t in [F16, BF16] {
        let blocks = 3u32;
        let n = blocks * 256;
        let src = format!(
            "
mesh m {{
  grid [g = {blocks}];
  threads t = 256;
}}
kernel transpose(x: gmem<{t}[{n}]>, y: gmem<{t}[{n}]>, tile: smem<{t}[256]>) {{
  let t: u32 = axis_index(t);
  let base: u32 = axis_index(g) * 256u;
  tile[t] = x[base + t];
  barrier;
  y[base + t] = tile[(t % 16u) * 16u + t / 16u];
}}
map transpose {{
  programs [m: transpose];
  inputs [x: gmem<{t}[{n}]>];
  outputs [y: gmem<{t}[{n}]>];
  scratch [tile: smem<{t}[256]>];
}}
"
        );
        let mut rng = Lcg(3);
        let x: Vec<u16> = (0..n).map(|_| rng.next() as u16).collect();
        let out = run_map(&src, "transpose", &args(vec![("x", tensor(t, &x))], vec![]));
        let y = bits16(&out, "y");
        for b in 0..blocks as usize {
            for r in 0..16 {
                for c in 0..16 {
                    assert_eq!(
                        y[b * 256 + r * 16 + c],
                        x[b * 256 + c * 16 + r],
                        "{t} block {b} ({r}, {c})"
                    );
                }
            }
        }
    }
}

/// Odd-length smem, local arrays and owned instances of an odd length
/// (instance k starts at element 3k, mid-word for odd k).
#[test]
fn odd_lengths_local_arrays_and_owned_instances() {
    for t in [F16, BF16] {
        let src = format!(
            "
mesh m {{
  grid [g = 5];
  threads t = 7;
}}
kernel k(x: gmem<{t}[35]>, y: gmem<{t}[35]>, own: gmem<{t}[3]> @ m, s: smem<{t}[7]>) {{
  let t: u32 = axis_index(t);
  let i: u32 = axis_index(g) * 7u + t;
  local tmp: {t}[5];
  for j: u32 in 0u..5u {{
    tmp[j] = x[(i + j) % 35u];
  }}
  s[t] = tmp[4u - t % 5u];
  barrier;
  y[i] = s[6u - t];
  if t < 3u {{
    own[t] = {t}(axis_index(g) * 3u + t);
  }}
}}
map k {{
  programs [m: k];
  inputs [x: gmem<{t}[35]>];
  outputs [y: gmem<{t}[35]>, own: gmem<{t}[3]> @ m];
  scratch [s: smem<{t}[7]>];
}}
"
        );
        let mut rng = Lcg(11);
        let x: Vec<u16> = (0..35).map(|_| rng.next() as u16).collect();
        let out = run_map(&src, "k", &args(vec![("x", tensor(t, &x))], vec![]));
        let y = bits16(&out, "y");
        for g in 0..5 {
            for th in 0..7 {
                // Thread 6 - th stored tmp[4 - (6 - th) % 5] = x[(i' + that) % 35].
                let other = 6 - th;
                let i_other = g * 7 + other;
                let j = 4 - other % 5;
                assert_eq!(
                    y[g * 7 + th],
                    x[(i_other + j) % 35],
                    "{t} y[{}]",
                    g * 7 + th
                );
            }
        }
        let own = bits16(&out, "own");
        assert_eq!(own.len(), 15);
        for (k, &v) in own.iter().enumerate() {
            assert_eq!(
                v,
                num::from_integer(t, k as i64).unwrap(),
                "{t} own element {k}"
            );
        }
    }
}

/// bf16 loads, an f32 accumulator, a bf16 store: a row sum, rows of an odd
/// length, as the f32 loop in Rust computes it.
#[test]
fn bf16_row_sum_accumulates_in_f32() {
    let (rows, cols) = (96u32, 33u32);
    let n = rows * cols;
    let src = format!(
        "
mesh m {{
  grid [g = 3];
  threads t = 32;
}}
kernel rowsum(x: gmem<bf16[{n}]>, y: gmem<bf16[{rows}]>, wide: gmem<f32[{rows}]>) {{
  let r: u32 = axis_index(g) * 32u + axis_index(t);
  var acc: f32 = 0.0;
  for k: u32 in 0u..{cols}u {{
    acc = acc + f32(x[r * {cols}u + k]);
  }}
  y[r] = bf16(acc);
  wide[r] = acc;
}}
map rowsum {{
  programs [m: rowsum];
  inputs [x: gmem<bf16[{n}]>];
  outputs [y: gmem<bf16[{rows}]>, wide: gmem<f32[{rows}]>];
}}
"
    );
    let mut rng = Lcg(17);
    let x: Vec<u16> = (0..n)
        .map(|_| {
            let v = (rng.next() % 2001) as f32 / 100.0 - 10.0;
            round(BF16, v)
        })
        .collect();
    let out = run_map(&src, "rowsum", &args(vec![("x", tensor(BF16, &x))], vec![]));
    let y = bits16(&out, "y");
    let wide = out.outputs["wide"].to_f32();
    for r in 0..rows as usize {
        let mut acc = 0.0f32;
        for k in 0..cols as usize {
            acc += widen(BF16, x[r * cols as usize + k]);
        }
        assert_eq!(wide[r].to_bits(), acc.to_bits(), "row {r} accumulator");
        assert_eq!(y[r], round(BF16, acc), "row {r}");
    }
}

/// Residents of an odd element count keep their bits across calls, in the
/// unpacked layout and packed into arenas; the padding half is never seen.
#[test]
fn sixteen_bit_residents_and_packed_arenas() {
    for t in [F16, BF16] {
        let src = format!(
            "
mesh m {{
  grid [g = 1];
  threads t = 7;
}}
resident acc: gmem<{t}[7]>;
kernel bump(x: gmem<{t}[7]>, y: gmem<{t}[7]>, acc: gmem<{t}[7]>) {{
  let t: u32 = axis_index(t);
  acc[t] = acc[t] + x[t];
  y[t] = acc[t];
}}
map bump {{
  programs [m: bump];
  inputs [x: gmem<{t}[7]>];
  outputs [y: gmem<{t}[7]>];
  scratch [acc: gmem<{t}[7]> resident];
}}
"
        );
        let x: Vec<u16> = [0.5f32, -1.0, 2.0, 1.0e-3, 3.0, -0.25, 7.0]
            .iter()
            .map(|&v| round(t, v))
            .collect();
        for packed in [None, Some(4)] {
            let mut wgpu = backend(WgpuOptions {
                max_storage_buffers: packed,
                ..WgpuOptions::default()
            });
            let p = plan(&module(&src), "bump");
            // The stored 16-bit resident is atomic words: in their own arena
            // when packed.
            let layout = mpmd_wgpu::emit_module(&p, &wgpu.plan_emit_options(&p, Mode::Fast))
                .unwrap()
                .layout;
            let arena = layout
                .bindings
                .iter()
                .find(|b| b.global == "g_arena_atomic_u32");
            assert_eq!(
                arena.map(|b| b.word),
                packed.map(|_| mpmd_wgpu::WordType::AtomicU32),
                "{layout:?}"
            );
            let start: Vec<u16> = (0..7).map(|k| round(t, k as f32)).collect();
            wgpu.set_resident("acc", tensor(t, &start)).unwrap();
            let call = args(vec![("x", tensor(t, &x))], vec![]);
            let mut expect = start.clone();
            for call_no in 0..2 {
                let out = wgpu.run(&p, &call, &fast()).unwrap();
                for k in 0..7 {
                    expect[k] = round(t, widen(t, expect[k]) + widen(t, x[k]));
                }
                assert_eq!(
                    bits16(&out, "y"),
                    expect,
                    "{t} packed {packed:?} call {call_no}"
                );
            }
            let resident = wgpu.resident("acc").unwrap();
            assert_eq!(resident.len(), 7);
            assert_eq!(resident.bytes().len(), 14, "no padding half");
            assert_eq!(
                resident
                    .to_bits()
                    .iter()
                    .map(|&b| b as u16)
                    .collect::<Vec<_>>(),
                expect
            );
        }
    }
}

/// The generated modules of this file pass the `naga` and `tint` command
/// lines (where installed; a note says when not), in both modes.
#[test]
fn naga_and_tint_command_lines_accept_sixteen_bit_modules() {
    let mut sources = vec![];
    for t in [F16, BF16] {
        sources.push((format!("ops-{t}"), ops_program(t, 65), "ops"));
        sources.push((format!("conv-{t}"), conversions_program(t, 65), "conv"));
    }
    for (tag, src, map) in sources {
        let p = plan(&module(&src), map);
        for mode in [Mode::Fast, Mode::Checked] {
            let wgsl = mpmd_wgpu::emit(&p, mode).unwrap_or_else(|e| panic!("{tag}: {e}"));
            for (tool, tool_args) in [
                ("naga", vec![]),
                ("tint", vec!["--format", "wgsl", "-o", "/dev/null"]),
            ] {
                let path = std::env::temp_dir().join(format!(
                    "mpmd-16bit-{tool}-{tag}-{mode:?}-{}.wgsl",
                    std::process::id()
                ));
                std::fs::write(&path, &wgsl).unwrap();
                let result = std::process::Command::new(tool)
                    .args(&tool_args)
                    .arg(&path)
                    .output();
                let _ = std::fs::remove_file(&path);
                match result {
                    Ok(out) => assert!(
                        out.status.success(),
                        "{tool} refused {tag} ({mode:?}):\n{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    ),
                    Err(_) => eprintln!(
                        "SKIPPED: the `{tool}` command line is not installed; {tag} not checked by it"
                    ),
                }
            }
        }
    }
}

/// The WGSL of 16-bit memory, without an adapter: packed words, atomic
/// words only where stored, halved smem and local arrays, conversions on
/// the bits (no `f16` type, no `pack2x16float`), no new loops.
#[test]
fn sixteen_bit_memory_in_the_generated_wgsl() {
    let src = "
mesh m {
  grid [g = 2];
  threads t = 256;
}
kernel k(x: gmem<bf16[511]>, y: gmem<f16[511]>, s: bf16, tile: smem<f16[255]>) {
  let t: u32 = axis_index(t);
  local tmp: bf16[5];
  tmp[t % 5u] = x[t] * s;
  tile[t % 255u] = f16(tmp[t % 5u]);
  barrier;
  y[t] = tile[254u - t % 255u];
}
map k {
  programs [m: k];
  inputs [x: gmem<bf16[511]>];
  outputs [y: gmem<f16[511]>];
  scratch [tile: smem<f16[255]>];
  scalars [s: bf16];
}
";
    let p = plan(&module(src), "k");
    let wgsl = mpmd_wgpu::emit(&p, Mode::Fast).unwrap();
    // A 16-bit buffer only read is plain words, a stored one atomic words;
    // 255 f16 of smem take 128 atomic words.
    insta::assert_snapshot!("sixteen_bit_declarations", declarations(&wgsl));
    // 5 bf16 locals take 3 words; a store is an atomicAnd and an atomicOr
    // on its half; the scalar is the low half of its parameter word.
    insta::assert_snapshot!("sixteen_bit_entry", functions(&wgsl, &["unit0_k"]));
    // Properties of the whole module, helpers included, which the snapshots
    // do not cover. No WGSL `f16` anywhere in the code (comments aside): not
    // the type, not `f16()`.
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for line in wgsl.lines() {
        let code = line.split("//").next().unwrap_or("");
        for (at, _) in code.match_indices("f16") {
            let before = code[..at].chars().next_back().is_some_and(ident);
            let after = code[at + 3..].chars().next().is_some_and(ident);
            assert!(before || after, "native f16 in `{line}`");
        }
    }
    assert!(
        !wgsl.contains("pack2x16float") && !wgsl.contains("enable f16"),
        "{wgsl}"
    );
    // No loops of the backend's own (each would cost loop-cap visits on llvmpipe).
    assert!(
        !wgsl.contains("loop {"),
        "no loops of the backend's own:\n{wgsl}"
    );
    // The buffer sizes are words: 511 elements in 256 words.
    let emitted = mpmd_wgpu::emit_module(&p, &Default::default()).unwrap();
    let words: Vec<u64> = emitted.layout.bindings.iter().map(|b| b.words).collect();
    assert_eq!(words, vec![256, 256]);
}

/// Checked mode reports an out-of-bounds 16-bit access by its element index
/// (not its word), as the interpreter words it.
#[test]
fn checked_mode_reports_sixteen_bit_elements() {
    let src = "
mesh m {
  grid [g = 1];
  threads t = 8;
}
kernel k(x: gmem<f16[7]>, y: gmem<f16[8]>) {
  let t: u32 = axis_index(t);
  y[t] = x[t];
}
map k {
  programs [m: k];
  inputs [x: gmem<f16[7]>];
  outputs [y: gmem<f16[8]>];
}
";
    let mut wgpu = backend(WgpuOptions::default());
    let p = plan(&module(src), "k");
    let x: Vec<u16> = (0..7).map(|k| round(F16, k as f32)).collect();
    let call = args(vec![("x", tensor(F16, &x))], vec![]);
    let err = wgpu.run(&p, &call, &checked()).unwrap_err();
    match err {
        mpmd_core::backend::RunError::OutOfBounds {
            reference,
            index,
            shape,
            site,
        } => {
            assert_eq!(
                (reference.as_str(), index.as_str(), shape.as_str()),
                ("x", "[7]", "[7]")
            );
            assert_eq!(site.thread, Some(7));
        }
        other => panic!("expected an out-of-bounds error, got {other}"),
    }
}
