//! Warp collectives and `mma_m16n8k16`.

#![allow(clippy::needless_range_loop)]

use super::*;

/// How a warp reduction combines values.
#[derive(Clone, Copy)]
pub(super) struct WarpValue {
    pub(super) ty: ScalarType,
    pub(super) ftz: bool,
}

impl WarpValue {
    fn combine(self, op: WarpOp, a: u32, b: u32) -> u32 {
        use ScalarType::*;
        match (op, self.ty) {
            (WarpOp::ReduceAdd, F32) => f32_rmw(a, b, self.ftz, |x, y| x + y),
            (WarpOp::ReduceMin, F32) => f32_rmw(a, b, self.ftz, f32::min),
            (WarpOp::ReduceMax, F32) => f32_rmw(a, b, self.ftz, f32::max),
            (WarpOp::ReduceAdd, _) => a.wrapping_add(b),
            (WarpOp::ReduceMin, I32) => (a as i32).min(b as i32) as u32,
            (WarpOp::ReduceMax, I32) => (a as i32).max(b as i32) as u32,
            (WarpOp::ReduceMin, _) => a.min(b),
            (WarpOp::ReduceMax, _) => a.max(b),
            _ => a,
        }
    }
}

/// One warp collective over every warp with active lanes (docs/text-format.md
/// defines each op; reductions combine in the butterfly order of
/// docs/numerics.md: halves 16 apart, then 8, 4, 2, 1). Fails with the warp's
/// index when only some of its lanes are active.
pub(super) fn warp_collective(
    op: WarpOp,
    shape: WarpValue,
    dst: &mut [u32],
    value: &[u32],
    lane: Option<&[u32]>,
    lanes: Lanes,
) -> Result<(), usize> {
    let warp = WARP_SIZE as usize;
    let mut active = vec![0usize; value.len().div_ceil(warp)];
    each(lanes, |l| active[l / warp] += 1);
    for (w, &count) in active.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let base = w * warp;
        if count != warp || base + warp > value.len() {
            return Err(w);
        }
        let v = &value[base..base + warp];
        let out = &mut dst[base..base + warp];
        let arg = |i: usize| lane.map_or(0, |l| l[base + i] % WARP_SIZE) as usize;
        match op {
            WarpOp::ShuffleIdx => (0..warp).for_each(|i| out[i] = v[arg(i)]),
            WarpOp::ShuffleUp => (0..warp).for_each(|i| {
                out[i] = i.checked_sub(arg(i)).map_or(v[i], |src| v[src]);
            }),
            WarpOp::ShuffleDown => (0..warp).for_each(|i| {
                let src = i + arg(i);
                out[i] = if src < warp { v[src] } else { v[i] };
            }),
            WarpOp::ShuffleXor => (0..warp).for_each(|i| out[i] = v[i ^ arg(i)]),
            WarpOp::VoteAny => out.fill(u32::from(v.iter().any(|&p| p != 0))),
            WarpOp::VoteAll => out.fill(u32::from(v.iter().all(|&p| p != 0))),
            WarpOp::Ballot => {
                let bits = (0..warp).fold(0u32, |acc, i| acc | (u32::from(v[i] != 0) << i));
                out.fill(bits);
            }
            WarpOp::ReduceAdd | WarpOp::ReduceMin | WarpOp::ReduceMax => {
                let mut t = [0u32; WARP_SIZE as usize];
                t.copy_from_slice(v);
                let mut half = warp / 2;
                while half > 0 {
                    for j in 0..half {
                        t[j] = shape.combine(op, t[j], t[j + half]);
                    }
                    half /= 2;
                }
                out.fill(t[0]);
            }
        }
    }
    Ok(())
}

/// `mma_m16n8k16` over every warp with active lanes: gathers the warp's
/// fragments into A (16x16), B (16x8) and C (16x8) by the layout of
/// docs/text-format.md, computes D[r][n] = C[r][n] + sum over k of
/// A[r][k] B[k][n] in the fixed order of docs/numerics.md (start from C, add
/// the products for k = 0, 1, ..., 15, each product and each sum an f32
/// operation: products of f16 values are exact), or under a probe what
/// `arithmetic.probe` says, and scatters D to `d`.
/// Fails with the warp's index when only some of its lanes are active.
pub(super) fn mma_m16n8k16(
    regs: &MmaRegs,
    all: &[Vec<u32>],
    d: &mut [Vec<u32>; mma::C_LEN as usize],
    lanes: Lanes,
    arithmetic: MmaArithmetic,
) -> Result<(), usize> {
    let MmaArithmetic { ftz, probe } = arithmetic;
    let warp = WARP_SIZE as usize;
    let threads = d[0].len();
    let mut active = vec![0usize; threads.div_ceil(warp)];
    each(lanes, |l| active[l / warp] += 1);
    let (m, n, k) = (mma::M as usize, mma::N as usize, mma::K as usize);
    let positions = &*FRAGMENT_POSITIONS;
    for (w, &count) in active.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let base = w * warp;
        if count != warp || base + warp > threads {
            return Err(w);
        }
        let mut a = [[0f32; 16]; 16];
        let mut b = [[0f32; 8]; 16];
        let mut c = [[0f32; 8]; 16];
        // Register by register: the warp's lanes of each are one slice,
        // widened together (flushed under `ftz`) and placed by the layout.
        let lanes_of = |r: usize| &all[r][base..base + warp];
        let place = |to: &mut [f32], from: &[f32; 32], at: &[u8; 32]| {
            for (&v, &i) in from.iter().zip(at) {
                to[usize::from(i)] = v;
            }
        };
        let mut wide = [0f32; 32];
        for (&r, at) in regs.a.iter().zip(&positions.a) {
            widen_lanes(regs.bf16, ftz, lanes_of(r), &mut wide);
            place(a.as_flattened_mut(), &wide, at);
        }
        for (&r, at) in regs.b.iter().zip(&positions.b) {
            widen_lanes(regs.bf16, ftz, lanes_of(r), &mut wide);
            place(b.as_flattened_mut(), &wide, at);
        }
        for (&r, at) in regs.c.iter().zip(&positions.c) {
            for (v, &bits) in wide.iter_mut().zip(lanes_of(r)) {
                *v = f32::from_bits(if ftz { flush(bits) } else { bits });
            }
            place(c.as_flattened_mut(), &wide, at);
        }
        let mut out = [[0f32; 8]; 16];
        if probe == MmaProbe::Off {
            out = match ftz {
                false => mma_sums::<false>(&a, &b, &c),
                true => mma_sums::<true>(&a, &b, &c),
            };
        }
        for row in 0..m {
            for col in 0..n {
                out[row][col] = match probe {
                    MmaProbe::Off => continue,
                    MmaProbe::Magnitude => {
                        // Each product of two widened 16-bit values is exact in f64.
                        let products =
                            (0..k).map(|kk| (f64::from(a[row][kk]) * f64::from(b[kk][col])).abs());
                        f32_at_least(std::iter::once(f64::from(c[row][col]).abs()).chain(products))
                    }
                    MmaProbe::StepCount => f32_at_least([f64::from(c[row][col]).abs(), 1.0]),
                    MmaProbe::Start => c[row][col].abs(),
                };
            }
        }
        let out = out.as_flattened();
        for (dst, at) in d.iter_mut().zip(&positions.c) {
            for (v, &i) in dst[base..base + warp].iter_mut().zip(at) {
                *v = out[usize::from(i)].to_bits();
            }
        }
    }
    Ok(())
}

/// Where each lane's fragment elements sit, as flat indices of the
/// row-major A (16x16), B (16x8) and C (16x8): `ir::mma`'s layout
/// functions, tabulated once.
struct FragmentPositions {
    a: [[u8; 32]; mma::A_LEN as usize],
    b: [[u8; 32]; mma::B_LEN as usize],
    c: [[u8; 32]; mma::C_LEN as usize],
}

static FRAGMENT_POSITIONS: std::sync::LazyLock<FragmentPositions> =
    std::sync::LazyLock::new(|| {
        let table = |len: u32, position: fn(u32, u32) -> (u32, u32), cols: u32| {
            (0..len)
                .map(|i| {
                    let mut at = [0u8; 32];
                    for (lane, slot) in (0..).zip(&mut at) {
                        let (row, col) = position(lane, i);
                        *slot = (row * cols + col) as u8;
                    }
                    at
                })
                .collect::<Vec<_>>()
        };
        FragmentPositions {
            a: array_of(table(mma::A_LEN, mma::a_position, mma::K)),
            b: array_of(table(mma::B_LEN, mma::b_position, mma::N)),
            c: array_of(table(mma::C_LEN, mma::c_position, mma::N)),
        }
    });

fn array_of<const N: usize>(rows: Vec<[u8; 32]>) -> [[u8; 32]; N] {
    let mut out = [[0u8; 32]; N];
    out.iter_mut().zip(rows).for_each(|(o, r)| *o = r);
    out
}

/// A warp's 16-bit lanes widened to f32 (exact), flushed under `ftz`.
fn widen_lanes(bf16: bool, ftz: bool, src: &[u32], dst: &mut [f32; 32]) {
    match (bf16, ftz) {
        (false, false) => widen_chunk::<false, false>(src, dst),
        (false, true) => widen_chunk::<false, true>(src, dst),
        (true, false) => widen_chunk::<true, false>(src, dst),
        (true, true) => widen_chunk::<true, true>(src, dst),
    }
}

/// D = C + A B of one warp's 16x16 A, 16x8 B and 16x8 C: each element
/// starts from C and adds the products for k = 0, 1, ..., 15, each product
/// and each sum an f32 operation (flushed when `FTZ`). The eight columns of
/// a row are independent sums, computed side by side (they vectorise).
fn mma_sums<const FTZ: bool>(
    a: &[[f32; 16]; 16],
    b: &[[f32; 8]; 16],
    c: &[[f32; 8]; 16],
) -> [[f32; 8]; 16] {
    let maybe_flush = |v: f32| {
        if FTZ {
            f32::from_bits(flush(v.to_bits()))
        } else {
            v
        }
    };
    let mut out = *c;
    // Four rows at a time: eight independent sums per column group keep
    // the adds' latency hidden.
    for (acc, a) in out.chunks_exact_mut(4).zip(a.chunks_exact(4)) {
        for (k, b) in b.iter().enumerate() {
            for (acc, a) in acc.iter_mut().zip(a) {
                let x = a[k];
                for (acc, &y) in acc.iter_mut().zip(b) {
                    let product = maybe_flush(x * y);
                    *acc = maybe_flush(*acc + product);
                }
            }
        }
    }
    out
}

/// How `mma_m16n8k16` computes: flushing subnormals or not, and its probe.
#[derive(Clone, Copy)]
pub(super) struct MmaArithmetic {
    pub(super) ftz: bool,
    pub(super) probe: MmaProbe,
}

/// An f32 no smaller than the exact sum of `terms`, at most 17
/// non-negative values each exact in f64 (NaN stays NaN, past f32's range
/// is +inf). The f64 sum is exact unless an addition rounded, which
/// TwoSum's error term shows; then it is below the exact sum by less than
/// 17 * 2^-53 relative, so raising it by 2^-46 (a rounding of 2^-53 more)
/// puts it above. Rounding up to f32 keeps it there.
pub(super) fn f32_at_least(terms: impl IntoIterator<Item = f64>) -> f32 {
    let mut sum = 0.0f64;
    let mut exact = true;
    for term in terms {
        let next = sum + term;
        let moved = next - sum;
        exact &= (sum - (next - moved)) + (term - moved) == 0.0;
        sum = next;
    }
    let bound = if exact {
        sum
    } else {
        sum * (1.0 + f64::powi(2.0, -46))
    };
    let nearest = bound as f32;
    if f64::from(nearest) < bound {
        nearest.next_up()
    } else {
        nearest
    }
}

#[cfg(test)]
mod tests {
    use super::f32_at_least;

    /// The mma probes' rounding: exact sums that are floats stay, others go
    /// up, including sums that f64 itself rounded.
    #[test]
    fn f32_at_least_never_underestimates() {
        assert_eq!(f32_at_least([3.0, 0.25, 0.0]), 3.25);
        assert_eq!(f32_at_least([]), 0.0);
        // 2^24 + 1 is between the floats 2^24 and 2^24 + 2.
        assert_eq!(f32_at_least([16_777_216.0, 1.0]), 16_777_218.0);
        // 1 + 2^-60 rounds to 1 in f64: the result must still be above 1.
        let tiny = f64::powi(2.0, -60);
        assert_eq!(f32_at_least([1.0, tiny]), 1.0f32.next_up());
        assert_eq!(
            f32_at_least([f64::from(f32::MAX), f64::from(f32::MAX)]),
            f32::INFINITY
        );
        assert!(f32_at_least([1.0, f64::NAN]).is_nan());
        assert_eq!(f32_at_least([1.0, f64::INFINITY]), f32::INFINITY);
    }
}
