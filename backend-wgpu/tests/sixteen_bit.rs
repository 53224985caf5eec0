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
use mpmd_core::host::{CallOutputs, HostTensor};
use mpmd_core::backend::Backend;
use mpmd_core::ir::{Literal, ScalarType};
use mpmd_core::numerics as num;
use mpmd_core::Mode;
use mpmd_wgpu::WgpuOptions;

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
            0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0xbc00, 0x3e00, 0x4200,
            0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x3555, 0xc900, 0x1400,
        ]
    } else {
        vec![
            0x0000, 0x8000, 0x0001, 0x007f, 0x0080, 0x3f80, 0x3f81, 0xbf80, 0x3fc0, 0x4040,
            0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x3eab, 0xc120, 0x4b80,
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
        if is_nan(t, a) {
            b
        } else if is_nan(t, b) {
            a
        } else if (less && wa < wb) || (!less && wa > wb) {
            a
        } else {
            b
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
        "mn" if flush => r(widen(t, select_bits(to_bits(wx), to_bits(wy), wx, wy, true))),
        "mx" if flush => r(widen(t, select_bits(to_bits(wx), to_bits(wy), wx, wy, false))),
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
fn check_ops(t: ScalarType) -> Vec<String> {
    let n = 1021;
    let (a, b, c) = operands(t, n);
    let Some(mut wgpu) = backend(WgpuOptions::default()) else {
        return vec![];
    };
    let m = module(&ops_program(t, n));
    let p = plan(&m, "ops");
    let call = args(
        vec![("a", tensor(t, &a)), ("b", tensor(t, &b)), ("c", tensor(t, &c))],
        vec![],
    );
    let out = wgpu
        .run(&p, &call, &fast())
        .unwrap_or_else(|e| panic!("{e}"));
    let o = other(t);
    let mut bad = vec![];
    // bf16 cases that touch subnormals may be computed with them flushed.
    let may_flush = |k: usize, exact: f32| {
        t == BF16
            && (subnormal(t, a[k]) || subnormal(t, b[k]) || subnormal(t, c[k]) || exact.is_subnormal())
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
            if may_flush(k, exact)
                && same(t, got[k], expected16(t, name, a[k], b[k], c[k], true))
            {
                continue;
            }
            bad.push(format!(
                "{t} {name}(0x{:04x}, 0x{:04x}, 0x{:04x}): got 0x{:04x}, want 0x{want:04x}",
                a[k], b[k], c[k], got[k]
            ));
        }
    }
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

#[test]
fn f16_operations_match_the_rules() {
    assert_none(check_ops(F16));
}

#[test]
fn bf16_operations_match_the_rules() {
    assert_none(check_ops(BF16));
}
