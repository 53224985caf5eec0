//! Lane sets (a range or a mask) and the loops over them.

#![allow(clippy::needless_range_loop)]

/// The active lanes of an operation.
#[derive(Clone, Copy)]
pub(super) enum Lanes<'a> {
    /// Exactly the lanes `lo..hi`.
    Range(usize, usize),
    /// The lanes whose bit is set.
    Mask(&'a [bool]),
}

pub(super) fn lanes_of(span: Option<(usize, usize)>, mask: &[bool]) -> Lanes<'_> {
    match span {
        Some((lo, hi)) => Lanes::Range(lo, hi),
        None => Lanes::Mask(mask),
    }
}

#[inline(always)]
pub(super) fn each(lanes: Lanes, mut f: impl FnMut(usize)) {
    match lanes {
        Lanes::Range(lo, hi) => (lo..hi).for_each(f),
        Lanes::Mask(m) => {
            for (l, &on) in m.iter().enumerate() {
                if on {
                    f(l);
                }
            }
        }
    }
}

/// Active lanes `lanes` whose indices are the consecutive, in-bounds
/// `words`: the access is one slice copy (the common `x[base + t]`).
pub(super) struct Run {
    pub(super) lanes: std::ops::Range<usize>,
    pub(super) words: std::ops::Range<usize>,
}

pub(super) fn consecutive_run(lanes: &Lanes, idx: &[u32], extent: u32) -> Option<Run> {
    let Lanes::Range(lo, hi) = *lanes else {
        return None;
    };
    let first = *idx.get(lo)?;
    if u64::from(first) + (hi - lo) as u64 > u64::from(extent) {
        return None;
    }
    // A fold with no early exit vectorises; the check costs less than the
    // per-lane bounds checks it saves.
    let stray = idx[lo..hi]
        .iter()
        .zip(first..)
        .fold(0, |acc, (&i, want)| acc | (i ^ want));
    let first = first as usize;
    (stray == 0).then_some(Run {
        lanes: lo..hi,
        words: first..first + (hi - lo),
    })
}

/// Like [`each`]; stops at the first lane for which `f` fails.
/// Runs `f(lane, index)` for each lane whose index `idx[lane]` is below
/// `extent`; stops at the first lane out of bounds and returns it.
#[inline(always)]
pub(super) fn try_each_index(
    lanes: Lanes,
    idx: &[u32],
    extent: u32,
    mut f: impl FnMut(usize, usize),
) -> Result<(), usize> {
    let mut one = |l: usize| {
        let i = idx[l];
        if i >= extent {
            return Err(l);
        }
        f(l, i as usize);
        Ok(())
    };
    match lanes {
        Lanes::Range(lo, hi) => (lo..hi).try_for_each(one),
        Lanes::Mask(m) => {
            for (l, &on) in m.iter().enumerate() {
                if on {
                    one(l)?;
                }
            }
            Ok(())
        }
    }
}

/// `d[lane] = load(idx[lane])` for each active lane whose index is below
/// `extent`; stops at the first lane out of bounds and returns it. On a
/// lane range whose indices are all in bounds (one pass that vectorises
/// finds out) it goes by groups of [`GROUP`] lanes: a group of consecutive
/// indices is one `load_run(first, group)`, a group of one index a
/// broadcast (the rows and columns of a tile, `tile[k, tx]`,
/// `tile[ty, k]`), others lane by lane.
#[inline(always)]
pub(super) fn gather(
    lanes: Lanes,
    idx: &[u32],
    extent: u32,
    d: &mut [u32],
    load: impl Fn(usize) -> u32,
    load_run: impl Fn(usize, &mut [u32]),
) -> Result<(), usize> {
    if let Lanes::Range(lo, hi) = lanes {
        if all_below(&idx[lo..hi], extent) {
            let mut groups = d[lo..hi].chunks_exact_mut(GROUP);
            let mut indices = idx[lo..hi].chunks_exact(GROUP);
            for (d, idx) in (&mut groups).zip(&mut indices) {
                let first = idx[0] as usize;
                match group_shape(idx) {
                    Group::Consecutive => load_run(first, d),
                    Group::Same => d.fill(load(first)),
                    Group::Other => {
                        for (d, &i) in d.iter_mut().zip(idx) {
                            *d = load(i as usize);
                        }
                    }
                }
            }
            for (d, &i) in groups.into_remainder().iter_mut().zip(indices.remainder()) {
                *d = load(i as usize);
            }
            return Ok(());
        }
    }
    try_each_index(lanes, idx, extent, |l, i| d[l] = load(i))
}

/// `store(idx[lane], s[lane])` for each active lane in lane order, as
/// [`gather`] reads (lanes before an out-of-bounds one have written).
#[inline(always)]
pub(super) fn scatter(
    lanes: Lanes,
    idx: &[u32],
    extent: u32,
    s: &[u32],
    mut store: impl FnMut(usize, u32),
) -> Result<(), usize> {
    if let Lanes::Range(lo, hi) = lanes {
        if all_below(&idx[lo..hi], extent) {
            for (&v, &i) in s[lo..hi].iter().zip(&idx[lo..hi]) {
                store(i as usize, v);
            }
            return Ok(());
        }
    }
    try_each_index(lanes, idx, extent, |l, i| store(i, s[l]))
}

/// Lanes [`gather`] looks at together.
pub(super) const GROUP: usize = 8;

enum Group {
    /// `first, first + 1, ...`
    Consecutive,
    /// One index.
    Same,
    Other,
}

/// The shape of a group of [`GROUP`] in-bounds indices (below `u32::MAX`,
/// so `first + GROUP - 1` does not wrap when they are consecutive).
#[inline(always)]
fn group_shape(idx: &[u32]) -> Group {
    let first = idx[0];
    let (mut stray, mut other) = (0, 0);
    for (k, &i) in idx.iter().enumerate() {
        stray |= i ^ first.wrapping_add(k as u32);
        other |= i ^ first;
    }
    if stray == 0 {
        Group::Consecutive
    } else if other == 0 {
        Group::Same
    } else {
        Group::Other
    }
}

/// Whether every index is below `extent` (no early exit: it vectorises).
#[inline(always)]
fn all_below(idx: &[u32], extent: u32) -> bool {
    idx.iter().fold(true, |ok, &i| ok & (i < extent))
}

/// The span of a mask: `Some((lo, hi))` when exactly the lanes `lo..hi` are
/// set. Counting vectorises; only the scan for the first set lane stops
/// early (a scan from the end made prefix masks such as `if t < half` walk
/// every unset lane byte by byte).
pub(super) fn span_of(mask: &[bool]) -> Option<(usize, usize)> {
    let ones = |lanes: &[bool]| lanes.iter().map(|&m| m as u32).sum::<u32>() as usize;
    let count = ones(mask);
    if count == 0 {
        return Some((0, 0));
    }
    let lo = mask.iter().position(|&m| m).unwrap_or(0);
    let hi = lo + count;
    (hi <= mask.len() && ones(&mask[lo..hi]) == count).then_some((lo, hi))
}

/// Updates every lane's mask bit from one register; returns whether any
/// lane is left, and the new span.
#[inline(always)]
pub(super) fn narrow(
    mask: &mut [bool],
    c: &[u32],
    f: impl Fn(bool, u32) -> bool,
) -> (bool, Option<(usize, usize)>) {
    for (m, &c) in mask.iter_mut().zip(c) {
        *m = f(*m, c);
    }
    let span = span_of(mask);
    (span != Some((0, 0)), span)
}

#[inline(always)]
pub(super) fn narrow2(
    mask: &mut [bool],
    a: &[u32],
    b: &[u32],
    f: impl Fn(bool, u32, u32) -> bool,
) -> (bool, Option<(usize, usize)>) {
    for ((m, &a), &b) in mask.iter_mut().zip(a).zip(b) {
        *m = f(*m, a, b);
    }
    let span = span_of(mask);
    (span != Some((0, 0)), span)
}

#[inline(always)]
pub(super) fn map2(d: &mut [u32], a: &[u32], b: &[u32], lanes: Lanes, f: impl Fn(u32, u32) -> u32) {
    match lanes {
        Lanes::Range(lo, hi) => {
            for ((d, &a), &b) in d[lo..hi].iter_mut().zip(&a[lo..hi]).zip(&b[lo..hi]) {
                *d = f(a, b);
            }
        }
        Lanes::Mask(m) => {
            // Pure operations cannot fail: compute every lane, keep the active ones.
            for (((d, &a), &b), &m) in d.iter_mut().zip(a).zip(b).zip(m) {
                let v = f(a, b);
                *d = if m { v } else { *d };
            }
        }
    }
}

#[inline(always)]
pub(super) fn map1(d: &mut [u32], a: &[u32], lanes: Lanes, f: impl Fn(u32) -> u32) {
    match lanes {
        Lanes::Range(lo, hi) => {
            for (d, &a) in d[lo..hi].iter_mut().zip(&a[lo..hi]) {
                *d = f(a);
            }
        }
        Lanes::Mask(m) => {
            for ((d, &a), &m) in d.iter_mut().zip(a).zip(m) {
                let v = f(a);
                *d = if m { v } else { *d };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::span_of;

    fn mask(len: usize, on: impl Fn(usize) -> bool) -> Vec<bool> {
        (0..len).map(on).collect()
    }

    #[test]
    fn span_of_is_the_one_range_of_set_lanes_or_none() {
        assert_eq!(span_of(&mask(128, |_| true)), Some((0, 128)));
        assert_eq!(span_of(&mask(128, |_| false)), Some((0, 0)));
        assert_eq!(span_of(&mask(128, |l| l < 16)), Some((0, 16)));
        assert_eq!(span_of(&mask(128, |l| l >= 100)), Some((100, 128)));
        assert_eq!(span_of(&mask(48, |l| (5..9).contains(&l))), Some((5, 9)));
        assert_eq!(span_of(&mask(64, |l| l == 63)), Some((63, 64)));
        // As many set lanes as a range would have, but with a gap.
        assert_eq!(span_of(&mask(64, |l| l < 8 || l == 9)), None);
        assert_eq!(span_of(&mask(64, |l| l % 2 == 0)), None);
        assert_eq!(span_of(&[]), Some((0, 0)));
    }
}
