//! 16-bit storage (two elements a word) and the 16-bit conversions.

#![allow(clippy::needless_range_loop)]

use super::*;

/// Element `i` of packed 16-bit storage (docs/design.md: 2 bytes an element,
/// little-endian): the word `i / 2` and the shift of its half (low for even `i`).
#[inline(always)]
pub(super) fn half_of(i: usize) -> (usize, u32) {
    (i >> 1, ((i & 1) as u32) << 4)
}

#[inline(always)]
pub(super) fn load_packed(words: &[AtomicU32], i: usize) -> u32 {
    let (w, shift) = half_of(i);
    (words[w].load(Relaxed) >> shift) & 0xffff
}

/// Replaces element `i`'s half with an atomic read-modify-write, so that a
/// neighbouring element written at the same time from another host core
/// (the parallel runner) keeps its write.
#[inline(always)]
pub(super) fn store_packed(words: &[AtomicU32], i: usize, v: u32) {
    let (w, shift) = half_of(i);
    let keep = !(0xffff << shift);
    let half = (v & 0xffff) << shift;
    // The closure always gives a value: the update cannot fail.
    let _ = words[w].fetch_update(Relaxed, Relaxed, |old| Some((old & keep) | half));
}

/// Consecutive elements from `start` into `d`: one word load for two lanes.
#[inline(always)]
pub(super) fn load_run_packed(words: &[AtomicU32], start: usize, d: &mut [u32]) {
    let (head, d) = d.split_at_mut((start % 2).min(d.len()));
    if let Some(first) = head.first_mut() {
        *first = load_packed(words, start);
    }
    let start = start + head.len();
    for (pair, w) in d.chunks_mut(2).zip(&words[start / 2..]) {
        let v = w.load(Relaxed);
        pair[0] = v & 0xffff;
        if let Some(high) = pair.get_mut(1) {
            *high = v >> 16;
        }
    }
}

/// Consecutive elements from `start`: words the run covers whole are plain
/// stores (any other writer of them would race with this one); a half word
/// at either end is a read-modify-write.
#[inline(always)]
pub(super) fn store_run_packed(words: &[AtomicU32], start: usize, mut values: &[u32]) {
    let mut start = start;
    if start % 2 == 1 {
        if let Some((&first, rest)) = values.split_first() {
            store_packed(words, start, first);
            values = rest;
            start += 1;
        }
    }
    let pairs = values.chunks_exact(2);
    if let [last] = pairs.remainder() {
        store_packed(words, start + values.len() - 1, *last);
    }
    for (w, pair) in words[start / 2..].iter().zip(pairs) {
        w.store((pair[0] & 0xffff) | (pair[1] << 16), Relaxed);
    }
}

/// Like [`load_packed`], for memory of one block (smem, locals).
#[inline(always)]
pub(super) fn get_packed(words: &[u32], i: usize) -> u32 {
    let (w, shift) = half_of(i);
    (words[w] >> shift) & 0xffff
}

#[inline(always)]
pub(super) fn set_packed(words: &mut [u32], i: usize, v: u32) {
    let (w, shift) = half_of(i);
    words[w] = (words[w] & !(0xffff << shift)) | ((v & 0xffff) << shift);
}

/// Like [`load_run_packed`], for memory of one block (smem, locals).
#[inline(always)]
pub(super) fn get_run_packed(words: &[u32], start: usize, d: &mut [u32]) {
    let (head, d) = d.split_at_mut((start % 2).min(d.len()));
    if let Some(first) = head.first_mut() {
        *first = get_packed(words, start);
    }
    let start = start + head.len();
    let whole = 2 * (d.len() / 2);
    let mut pairs = d.chunks_exact_mut(2);
    let words = &words[start / 2..];
    for (pair, &w) in (&mut pairs).zip(words) {
        pair[0] = w & 0xffff;
        pair[1] = w >> 16;
    }
    if let [last] = pairs.into_remainder() {
        *last = get_packed(words, whole);
    }
}

/// Like [`store_run_packed`], for memory of one block (smem, locals).
#[inline(always)]
pub(super) fn set_run_packed(words: &mut [u32], start: usize, mut values: &[u32]) {
    let mut start = start;
    if start % 2 == 1 {
        if let Some((&first, rest)) = values.split_first() {
            set_packed(words, start, first);
            values = rest;
            start += 1;
        }
    }
    let pairs = values.chunks_exact(2);
    if let [last] = pairs.remainder() {
        set_packed(words, start + values.len() - 1, *last);
    }
    for (w, pair) in words[start / 2..].iter_mut().zip(pairs) {
        *w = (pair[0] & 0xffff) | (pair[1] << 16);
    }
}

/// The 16-bit rules of `numerics`, on register bits (the low half).
impl Half {
    #[inline(always)]
    pub(super) fn widen(self, bits: u32) -> f32 {
        match self {
            Half::F16 => numerics::f16_to_f32(bits as u16),
            Half::BF16 => numerics::bf16_to_f32(bits as u16),
        }
    }

    #[inline(always)]
    pub(super) fn round(self, v: f32) -> u32 {
        u32::from(match self {
            Half::F16 => numerics::f16_from_f32(v),
            Half::BF16 => numerics::bf16_from_f32(v),
        })
    }

    /// Every `i32`/`u32` value is exact in an `i64`; the conversion rounds once.
    pub(super) fn round_integer(self, v: i64) -> u32 {
        numerics::from_integer(self.ty(), v).map_or(0, u32::from)
    }

    pub(super) fn fma(self, a: u32, b: u32, c: u32) -> u32 {
        numerics::fma16(self.ty(), a as u16, b as u16, c as u16).map_or(0, u32::from)
    }
}

/// A 16-bit value whose widened value is an f32 subnormal becomes a zero of
/// the same sign (only bf16 has such values).
#[inline(always)]
pub(super) fn flush16(h: Half, bits: u32) -> u32 {
    h.round(f32::from_bits(flush(h.widen(bits).to_bits())))
}

/// Lanes a 16-bit operation converts at a time (on the stack).
pub(super) const CHUNK: usize = 64;

/// Widens 16-bit register lanes to f32 (exact), flushed under `FTZ` (rule
/// 9: flushing applies to the f32 intermediates). f16 goes through
/// `numerics::f16_to_f32_slice`, several lanes at a time.
#[inline(always)]
pub(super) fn widen_chunk<const BF: bool, const FTZ: bool>(src: &[u32], dst: &mut [f32]) {
    if BF {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = numerics::bf16_to_f32(s as u16);
        }
    } else {
        let mut halves = [half::f16::ZERO; CHUNK];
        let halves = &mut halves[..src.len()];
        for (h, &s) in halves.iter_mut().zip(src) {
            *h = half::f16::from_bits(s as u16);
        }
        numerics::f16_to_f32_slice(halves, dst);
    }
    if FTZ {
        dst.iter_mut()
            .for_each(|v| *v = f32::from_bits(flush(v.to_bits())));
    }
}

/// Rounds f32 results (flushed under `FTZ`) once to the 16-bit format, into
/// register lanes (high half zero); f16 through `numerics::f16_from_f32_slice`.
#[inline(always)]
pub(super) fn round_chunk<const BF: bool, const FTZ: bool>(src: &mut [f32], dst: &mut [u32]) {
    if FTZ {
        src.iter_mut()
            .for_each(|v| *v = f32::from_bits(flush(v.to_bits())));
    }
    if BF {
        for (d, &s) in dst.iter_mut().zip(src.iter()) {
            *d = u32::from(numerics::bf16_from_f32(s));
        }
    } else {
        let mut halves = [half::f16::ZERO; CHUNK];
        let halves = &mut halves[..src.len()];
        numerics::f16_from_f32_slice(src, halves);
        for (d, h) in dst.iter_mut().zip(halves.iter()) {
            *d = u32::from(h.to_bits());
        }
    }
}

/// Runs `fill(lanes, out)` over chunks of at most [`CHUNK`] lanes, `out`
/// being the destination lanes. Pure operations cannot fail: under a mask
/// every lane is computed and the active ones kept.
#[inline(always)]
pub(super) fn by_chunks(
    d: &mut [u32],
    m: Lanes,
    mut fill: impl FnMut(std::ops::Range<usize>, &mut [u32]),
) {
    match m {
        Lanes::Range(lo, hi) => {
            for start in (lo..hi).step_by(CHUNK) {
                let end = (start + CHUNK).min(hi);
                fill(start..end, &mut d[start..end]);
            }
        }
        Lanes::Mask(mask) => {
            let mut out = [0u32; CHUNK];
            for start in (0..d.len()).step_by(CHUNK) {
                let end = (start + CHUNK).min(d.len());
                fill(start..end, &mut out[..end - start]);
                for ((d, &v), &on) in d[start..end].iter_mut().zip(&out).zip(&mask[start..end]) {
                    if on {
                        *d = v;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{load_run_packed, round_chunk, store_run_packed, widen_chunk, CHUNK};
    use crate::numerics;
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

    /// The chunked 16-bit conversions are `numerics`' rules: every f16 and
    /// bf16 widens to the same f32, and f32 values around every f16 and bf16
    /// (ties, overflow, subnormals, NaN) round to the same bits.
    #[test]
    fn chunks_convert_as_numerics() {
        let all: Vec<u32> = (0..=u16::MAX).map(u32::from).collect();
        let mut wide = vec![0f32; CHUNK];
        let mut bits = vec![0u32; CHUNK];
        let same = |got: u32, want: u16, to: fn(u16) -> f32| {
            got == u32::from(want) || (to(got as u16).is_nan() && to(want).is_nan())
        };
        for chunk in all.chunks(CHUNK) {
            let n = chunk.len();
            widen_chunk::<false, false>(chunk, &mut wide[..n]);
            for (&b, w) in chunk.iter().zip(&wide) {
                let want = numerics::f16_to_f32(b as u16);
                assert!(
                    w.to_bits() == want.to_bits() || (w.is_nan() && want.is_nan()),
                    "{b:#x}"
                );
            }
            widen_chunk::<true, false>(chunk, &mut wide[..n]);
            for (&b, w) in chunk.iter().zip(&wide) {
                let want = numerics::bf16_to_f32(b as u16);
                assert!(
                    w.to_bits() == want.to_bits() || (w.is_nan() && want.is_nan()),
                    "{b:#x}"
                );
            }
        }
        let mut values: Vec<f32> = vec![f32::MAX, f32::MIN, f32::NAN, f32::INFINITY, 65520.0];
        for &b in &all {
            for v in [
                numerics::f16_to_f32(b as u16),
                numerics::bf16_to_f32(b as u16),
            ] {
                let up = f32::from_bits(v.to_bits().wrapping_add(1));
                let tie_f16 = f32::from_bits(v.to_bits().wrapping_add(1 << 12));
                let tie_bf16 = f32::from_bits(v.to_bits().wrapping_add(1 << 15));
                values.extend([v, up, tie_f16, tie_bf16, f32::from_bits(b)]);
            }
        }
        for chunk in values.chunks(CHUNK) {
            let n = chunk.len();
            wide[..n].copy_from_slice(chunk);
            round_chunk::<false, false>(&mut wide[..n], &mut bits[..n]);
            for (&v, &got) in chunk.iter().zip(&bits) {
                assert!(
                    same(got, numerics::f16_from_f32(v), numerics::f16_to_f32),
                    "f16 {v:e}"
                );
            }
            wide[..n].copy_from_slice(chunk);
            round_chunk::<true, false>(&mut wide[..n], &mut bits[..n]);
            for (&v, &got) in chunk.iter().zip(&bits) {
                assert!(
                    same(got, numerics::bf16_from_f32(v), numerics::bf16_to_f32),
                    "bf16 {v:e}"
                );
            }
        }
    }

    /// A run of 16-bit stores from any start and of any length writes
    /// exactly its elements and keeps both neighbours' halves; a run of
    /// loads reads them back.
    #[test]
    fn packed_runs_keep_their_neighbours() {
        for start in 0..5 {
            for len in 0..9 {
                let words: Vec<AtomicU32> = (0..8).map(|_| AtomicU32::new(0xffff_ffff)).collect();
                let values: Vec<u32> = (0..len as u32).map(|k| k + 1).collect();
                store_run_packed(&words, start, &values);
                let mut back = vec![0; len];
                load_run_packed(&words, start, &mut back);
                assert_eq!(back, values, "start {start} len {len}");
                for e in 0..16 {
                    let got = (words[e / 2].load(Relaxed) >> (16 * (e % 2))) & 0xffff;
                    let want = if (start..start + len).contains(&e) {
                        (e - start) as u32 + 1
                    } else {
                        0xffff
                    };
                    assert_eq!(got, want, "start {start} len {len} element {e}");
                }
            }
        }
    }
}
