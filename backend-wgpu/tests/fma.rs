//! f32 `fma` on the WGSL backend is rounded once (issue 28): lavapipe's own
//! `fma` rounds the product first, 0.57 ulp off a fused result, and a chain
//! of them (a register-blocked matmul accumulating with `fma` over k = 256)
//! ended 10 to 32 ulp from the interpreter. The backend computes it on the
//! bits (`mpmd_fma_f32`); this test holds it to Rust's `f32::mul_add` (one
//! rounding) bit for bit on special values, random bit patterns, near
//! cancellation, ties and subnormal results, then runs such a chain.

mod common;

use common::*;
use mpmd_core::backend::Backend;
use mpmd_core::host::HostTensor;
use mpmd_core::interp::Interpreter;
use mpmd_wgpu::WgpuOptions;

const N: usize = 1 << 16;

const FMA: &str = "
mesh m {
  grid [b = 256];
  threads t = 256;
}
kernel k(a: gmem<f32[65536]>, b: gmem<f32[65536]>, c: gmem<f32[65536]>, y: gmem<f32[65536]>) {
  let i: u32 = axis_index(b) * 256u + axis_index(t);
  y[i] = fma(a[i], b[i], c[i]);
}
map k {
  programs [m: k];
  inputs [a: gmem<f32[65536]>, b: gmem<f32[65536]>, c: gmem<f32[65536]>];
  outputs [y: gmem<f32[65536]>];
}
";

/// xorshift64*: deterministic bits.
struct Bits(u64);

impl Bits {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }
    fn f32(&mut self) -> f32 {
        f32::from_bits(self.next())
    }
    /// A finite value of magnitude about 2^e.
    fn near(&mut self, e: i32) -> f32 {
        let m = 1.0 + (self.next() >> 9) as f32 / (1u32 << 23) as f32;
        let s = if self.next() & 1 == 0 { 1.0 } else { -1.0 };
        s * m * 2f32.powi(e)
    }
}

/// Operands: every triple of special values, then random bits, then
/// products cancelled by a nearby c, exact ties of a*b + c, tiny products
/// (subnormal results) and huge ones (overflow, and overflowed products
/// brought back by c).
fn operands() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let specials = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
        f32::MAX,
        -f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0 + f32::EPSILON,
        0.5,
        3.0,
    ];
    let (mut a, mut b, mut c) = (vec![], vec![], vec![]);
    for &x in &specials {
        for &y in &specials {
            for &z in &specials {
                a.push(x);
                b.push(y);
                c.push(z);
            }
        }
    }
    let mut r = Bits(0x9e37_79b9_7f4a_7c15);
    while a.len() < N {
        let (x, y, z) = match a.len() % 6 {
            0 => (r.f32(), r.f32(), r.f32()),
            // c cancels most of the product.
            1 => {
                let (e1, e2) = (r.next() as i32 % 20, r.next() as i32 % 20);
                let (x, y) = (r.near(e1), r.near(e2));
                let p = x * y;
                let z = f32::from_bits((-p).to_bits().wrapping_add(r.next() % 5).wrapping_sub(2));
                (x, y, z)
            }
            // Ties: products of 12-bit significands plus c half an ulp of
            // the sum away.
            2 => {
                let x = ((r.next() >> 20) | 0x800) as f32;
                let y = ((r.next() >> 20) | 0x800) as f32;
                let p = x * y;
                let ulp = 2f32.powi((p.log2().floor() as i32) - 23);
                let z = if r.next() & 1 == 0 {
                    0.5 * ulp
                } else {
                    -0.5 * ulp
                } * (1 + (r.next() % 3)) as f32;
                (x, y, z)
            }
            // Subnormal and tiny results.
            3 => {
                let e = -128 - (r.next() % 20) as i32;
                (r.near(-70), r.near(-60), r.near(e))
            }
            // Overflow, and a product past f32::MAX that c brings back.
            4 => {
                let e = 64 + (r.next() % 2) as i32;
                let (x, y) = (r.near(e), r.near(63));
                let z = if r.next() & 1 == 0 {
                    -f32::MAX * x.signum() * y.signum()
                } else {
                    r.near(127)
                };
                (x, y, z)
            }
            _ => {
                let (e1, e2, e3) = (
                    r.next() as i32 % 60,
                    r.next() as i32 % 60,
                    r.next() as i32 % 100,
                );
                (r.near(e1), r.near(e2), r.near(e3))
            }
        };
        a.push(x);
        b.push(y);
        c.push(z);
    }
    (a, b, c)
}

fn same(got: f32, want: f32) -> bool {
    // NaN payloads and the sign of zero are unspecified.
    got.is_nan() && want.is_nan() || got == want && (got != 0.0 || want == 0.0)
}

#[test]
fn fma_is_rounded_once_bit_for_bit() {
    let (a, b, c) = operands();
    let m = module(FMA);
    let p = plan(&m, "k");
    let args = args(
        vec![
            ("a", HostTensor::from_f32(vec![N as u32], &a)),
            ("b", HostTensor::from_f32(vec![N as u32], &b)),
            ("c", HostTensor::from_f32(vec![N as u32], &c)),
        ],
        vec![],
    );
    let want: Vec<f32> = (0..N).map(|i| a[i].mul_add(b[i], c[i])).collect();
    // The interpreter is the oracle: it rounds once too.
    let oracle = Interpreter::new().run(&p, &args, &fast()).unwrap().outputs["y"].to_f32();
    assert!((0..N).all(|i| same(oracle[i], want[i])));
    // Some of the operands tell one rounding from two.
    let twice = (0..N)
        .filter(|&i| !same(a[i] * b[i] + c[i], want[i]))
        .count();
    assert!(twice > 5_000, "{twice} operands where two roundings differ");
    let mut wgpu = backend(WgpuOptions::default());
    let got = wgpu.run(&p, &args, &fast()).unwrap().outputs["y"].to_f32();
    let wrong: Vec<String> = (0..N)
        .filter(|&i| !same(got[i], want[i]))
        .take(10)
        .map(|i| {
            format!(
                "fma({:e}, {:e}, {:e}) = {:e} (0x{:08x}), want {:e} (0x{:08x})",
                a[i],
                b[i],
                c[i],
                got[i],
                got[i].to_bits(),
                want[i],
                want[i].to_bits()
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
