//! The `mma` compare mode against a software model of a tensor core.
//!
//! Real tensor cores add the 17 terms of each element (C and the 16 exact
//! products) in an order and with an alignment of their own; the model
//! does what docs/numerics.md allows them ("Matrix multiply-accumulate"):
//! one term at a time or in a tree, in random orders, each sum truncated to
//! f32 instead of rounded, or every term aligned to the largest and
//! truncated to 23 to 25 bits below it, summed exactly and truncated. The
//! oracle (the interpreter, with its mma probes, through conformance's
//! runner) gives the reference and the bounds. On random and adversarial
//! fragments (cancellation, mixed magnitudes, absorption into a large
//! accumulator; f16 and bf16), single mmas, chains of four and a
//! stream-K-like sum of two partial chains, and an output converted to the
//! 16-bit type, every model stays within the bound; a result with one
//! product dropped, or with B's rows in the wrong layout, does not.

use mpmd_conformance::case::CaseFile;
use mpmd_conformance::compare::{compare_mma, MmaProbes};
use mpmd_conformance::run::{run_interp, Observed, PreparedCall};
use mpmd_core::inputs::Rng;
use mpmd_core::ir::ScalarType;
use mpmd_core::numerics;
use mpmd_core::{CallArgs, HostTensor, Mode};

const WARPS: usize = 4;
const K_TILES: usize = 4;
const K: usize = 16 * K_TILES;

/// Four warps, each with its own A (16 x 64), B (64 x 8) and C (16 x 8):
/// `one` is a single mma of k-tile 0 onto C; `out` chains the four k-tiles
/// from C in place; `split` adds two partial chains from zero (k-tiles 0-1
/// and 2-3) with one f32 addition, as a stream-K fix-up does; `narrow` is
/// `out` converted to the input type.
fn module_text(ty: &str) -> String {
    format!(
        "
mesh m {{
  grid [b = 2];
  threads t = 64;
}}

kernel k(x: gmem<{ty}[4, 16, 64]>, y: gmem<{ty}[4, 64, 8]>, z: gmem<f32[4, 16, 8]>,
         one: gmem<f32[4, 16, 8]>, out: gmem<f32[4, 16, 8]>, split: gmem<f32[4, 16, 8]>,
         narrow: gmem<{ty}[4, 16, 8]>) {{
  let w: u32 = axis_index(b) * 2u + axis_index(t) / 32u;
  let lane: u32 = axis_index(t) % 32u;
  let g: u32 = lane >> 2u;
  let q: u32 = lane % 4u;
  local fa: {ty}[8];
  local fb: {ty}[4];
  local acc: f32[4];
  local lo: f32[4];
  local hi: f32[4];
  local d: f32[4];
  for i: u32 in 0u..4u {{
    acc[i] = z[w, g + 8u * (i / 2u), 2u * q + i % 2u];
    lo[i] = 0.0;
    hi[i] = 0.0;
  }}
  for kt: u32 in 0u..4u {{
    for i: u32 in 0u..8u {{
      fa[i] = x[w, g + 8u * (i / 2u % 2u), 16u * kt + 2u * q + i % 2u + 8u * (i / 4u)];
    }}
    for i: u32 in 0u..4u {{
      fb[i] = y[w, 16u * kt + 2u * q + i % 2u + 8u * (i / 2u), g];
    }}
    if kt == 0u {{
      mma_m16n8k16(d, fa, fb, acc);
      for i: u32 in 0u..4u {{
        one[w, g + 8u * (i / 2u), 2u * q + i % 2u] = d[i];
      }}
    }}
    mma_m16n8k16(acc, fa, fb, acc);
    if kt < 2u {{
      mma_m16n8k16(lo, fa, fb, lo);
    }} else {{
      mma_m16n8k16(hi, fa, fb, hi);
    }}
  }}
  for i: u32 in 0u..4u {{
    let row: u32 = g + 8u * (i / 2u);
    let col: u32 = 2u * q + i % 2u;
    out[w, row, col] = acc[i];
    split[w, row, col] = lo[i] + hi[i];
    narrow[w, row, col] = {ty}(acc[i]);
  }}
}}

map tiles {{
  programs [m: k];
  inputs [x: gmem<{ty}[4, 16, 64]>, y: gmem<{ty}[4, 64, 8]>, z: gmem<f32[4, 16, 8]>];
  outputs [one: gmem<f32[4, 16, 8]>, out: gmem<f32[4, 16, 8]>, split: gmem<f32[4, 16, 8]>,
           narrow: gmem<{ty}[4, 16, 8]>];
}}

case {{
  compare one = mma;
  compare out = mma;
  compare split = mma;
  compare narrow = mma;
  expect ok;
}}
"
    )
}

fn case_file(ty: &str) -> CaseFile {
    let source = mpmd_core::text::parse_file(&module_text(ty))
        .unwrap_or_else(|e| panic!("{}", e.render("model")));
    let file = CaseFile {
        module: source.module,
        spec: source.case.expect("a case section"),
    };
    file.validate().expect("valid");
    file
}

/// What each warp's fragments look like.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Flavour {
    /// A and B uniform in (-4, 4), C in (-100, 100).
    Random,
    /// Products in pairs that nearly cancel (A[r][2j] = A[r][2j + 1], B's
    /// two rows opposite up to a small part), C zero: a result far below
    /// the magnitude.
    Cancellation,
    /// A, B and C with exponents spread over the type's range.
    MixedMagnitudes,
    /// C near ±2^24 and products near 1: each addition rounds.
    Absorption,
}

const FLAVOURS: [Flavour; WARPS] = [
    Flavour::Random,
    Flavour::Cancellation,
    Flavour::MixedMagnitudes,
    Flavour::Absorption,
];

fn signed(rng: &mut Rng, v: f32) -> f32 {
    if rng.below(2) == 0 {
        v
    } else {
        -v
    }
}

fn uniform(rng: &mut Rng, lo: f32, hi: f32) -> f32 {
    lo + (hi - lo) * rng.unit_f32()
}

/// `2^e` times a random significand in [1, 2), random sign.
fn spread(rng: &mut Rng, lo: i32, hi: i32) -> f32 {
    let e = lo + rng.below((hi - lo + 1) as u64) as i32;
    let magnitude = uniform(rng, 1.0, 2.0) * 2f32.powi(e);
    signed(rng, magnitude)
}

/// The inputs of one run: A, B (16-bit, as values the type holds) and C.
struct Fragments {
    elem: ScalarType,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl Fragments {
    fn new(elem: ScalarType, seed: u64) -> Fragments {
        let mut rng = Rng::new(seed);
        let exact = |v: f32| numerics::to_f32(elem, numerics::from_f32(elem, v).unwrap()).unwrap();
        let (mut a, mut b, mut c) = (
            vec![0f32; WARPS * 16 * K],
            vec![0f32; WARPS * K * 8],
            vec![0f32; WARPS * 128],
        );
        // Exponent ranges whose products and sums stay finite and normal.
        let wide = if elem == ScalarType::F16 { 9 } else { 40 };
        for (w, flavour) in FLAVOURS.into_iter().enumerate() {
            let a = &mut a[w * 16 * K..(w + 1) * 16 * K];
            let b = &mut b[w * K * 8..(w + 1) * K * 8];
            let c = &mut c[w * 128..(w + 1) * 128];
            match flavour {
                Flavour::Random => {
                    a.iter_mut().for_each(|v| *v = uniform(&mut rng, -4.0, 4.0));
                    b.iter_mut().for_each(|v| *v = uniform(&mut rng, -4.0, 4.0));
                    c.iter_mut()
                        .for_each(|v| *v = uniform(&mut rng, -100.0, 100.0));
                }
                Flavour::Cancellation => {
                    for r in 0..16 {
                        for j in 0..K / 2 {
                            let v = uniform(&mut rng, 1.0, 8.0);
                            a[r * K + 2 * j] = v;
                            a[r * K + 2 * j + 1] = v;
                        }
                    }
                    for j in 0..K / 2 {
                        for n in 0..8 {
                            let v = uniform(&mut rng, 1.0, 8.0);
                            b[2 * j * 8 + n] = v;
                            b[(2 * j + 1) * 8 + n] = -(v + uniform(&mut rng, 0.0, 0.1));
                        }
                    }
                }
                Flavour::MixedMagnitudes => {
                    a.iter_mut()
                        .for_each(|v| *v = spread(&mut rng, -wide, wide));
                    b.iter_mut()
                        .for_each(|v| *v = spread(&mut rng, -wide, wide));
                    c.iter_mut()
                        .for_each(|v| *v = spread(&mut rng, -wide, wide));
                }
                Flavour::Absorption => {
                    for v in a.iter_mut() {
                        let magnitude = [1.0, 0.5, 0.75, 2f32.powi(-8)][rng.below(4) as usize];
                        *v = signed(&mut rng, magnitude);
                    }
                    for v in b.iter_mut() {
                        let magnitude = [1.0, 2.0, 1.5][rng.below(3) as usize];
                        *v = signed(&mut rng, magnitude);
                    }
                    for v in c.iter_mut() {
                        let magnitude = 16_777_216.0 * (1.0 + rng.below(1024) as f32 / 1024.0);
                        *v = signed(&mut rng, magnitude);
                    }
                }
            }
            a.iter_mut()
                .chain(b.iter_mut())
                .for_each(|v| *v = exact(*v));
        }
        Fragments { elem, a, b, c }
    }

    fn tensor(&self, shape: Vec<u32>, values: &[f32]) -> HostTensor {
        let bits = values
            .iter()
            .map(|&v| u32::from(numerics::from_f32(self.elem, v).unwrap()))
            .collect();
        HostTensor::new(self.elem, shape, bits).unwrap()
    }

    fn args(&self) -> CallArgs {
        CallArgs {
            inputs: [
                ("x".to_string(), self.tensor(vec![4, 16, 64], &self.a)),
                ("y".to_string(), self.tensor(vec![4, 64, 8], &self.b)),
                (
                    "z".to_string(),
                    HostTensor::from_f32(vec![4, 16, 8], &self.c),
                ),
            ]
            .into(),
            scalars: Default::default(),
        }
    }

    /// The 16 products of k-tile `kt` for element (w, r, n), exact in f64.
    fn products(&self, w: usize, r: usize, n: usize, kt: usize) -> [f64; 16] {
        std::array::from_fn(|k| {
            let k = 16 * kt + k;
            f64::from(self.a[w * 16 * K + r * K + k]) * f64::from(self.b[w * K * 8 + k * 8 + n])
        })
    }
}

/// The f32 next to `v` toward zero: f32 truncation of an f64.
fn truncate(v: f64) -> f64 {
    let nearest = v as f32;
    let t = if f64::from(nearest).abs() > v.abs() {
        if nearest > 0.0 {
            nearest.next_down()
        } else {
            nearest.next_up()
        }
    } else {
        nearest
    };
    f64::from(t)
}

/// How the model adds the 17 terms.
#[derive(Clone, Copy, Debug)]
enum Summation {
    /// One term at a time in a random order, each sum truncated to f32.
    Sequential,
    /// Neighbours in a random order, pairwise, each sum truncated to f32.
    Tree,
    /// Every term aligned to the largest exponent and truncated to `bits`
    /// bits below its leading bit, summed exactly, the sum truncated to f32.
    Aligned { bits: i32 },
}

const SUMMATIONS: [Summation; 5] = [
    Summation::Sequential,
    Summation::Tree,
    Summation::Aligned { bits: 23 },
    Summation::Aligned { bits: 24 },
    Summation::Aligned { bits: 25 },
];

/// A wrong tensor core: what a bug would give.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Defect {
    None,
    /// The product of largest magnitude is left out.
    DropLargestProduct,
    /// B's rows k and k ^ 2 swapped (a fragment index mistake).
    SwappedRows,
}

/// One mma element, `c` plus `products`, as the tensor core computes it.
fn tensor_core(c: f64, products: &[f64; 16], how: Summation, rng: &mut Rng) -> f64 {
    let mut terms: Vec<f64> = std::iter::once(c).chain(products.iter().copied()).collect();
    // A random order (Fisher-Yates).
    for i in (1..terms.len()).rev() {
        terms.swap(i, rng.below(i as u64 + 1) as usize);
    }
    match how {
        Summation::Sequential => terms[1..]
            .iter()
            .fold(terms[0], |acc, &t| truncate(acc + t)),
        Summation::Tree => {
            while terms.len() > 1 {
                terms = terms
                    .chunks(2)
                    .map(|p| {
                        if p.len() == 2 {
                            truncate(p[0] + p[1])
                        } else {
                            p[0]
                        }
                    })
                    .collect();
            }
            terms[0]
        }
        Summation::Aligned { bits } => {
            let exponent = |t: f64| ((t.to_bits() >> 52) & 0x7ff) as i32 - 1023;
            let Some(top) = terms
                .iter()
                .filter(|t| **t != 0.0)
                .map(|&t| exponent(t))
                .max()
            else {
                return 0.0;
            };
            let quantum = 2f64.powi(top - bits);
            // Each aligned term is an integer below 2^(bits + 1): the sum of
            // 17 is exact in f64.
            let sum: f64 = terms.iter().map(|&t| (t / quantum).trunc()).sum();
            truncate(sum * quantum)
        }
    }
}

/// What the model gives for every output, warp by warp.
struct ModelOutputs {
    one: Vec<f32>,
    out: Vec<f32>,
    split: Vec<f32>,
    narrow: Vec<f32>,
}

fn model(f: &Fragments, how: Summation, defect: Defect, seed: u64) -> ModelOutputs {
    let mut rng = Rng::new(seed);
    let len = WARPS * 128;
    let mut m = ModelOutputs {
        one: vec![0.0; len],
        out: vec![0.0; len],
        split: vec![0.0; len],
        narrow: vec![0.0; len],
    };
    for w in 0..WARPS {
        for r in 0..16 {
            for n in 0..8 {
                let at = w * 128 + r * 8 + n;
                let mut step = |c: f64, kt: usize| {
                    let mut products = f.products(w, r, n, kt);
                    match defect {
                        Defect::None => {}
                        Defect::DropLargestProduct => {
                            let largest = (0..16)
                                .max_by(|&i, &j| products[i].abs().total_cmp(&products[j].abs()))
                                .unwrap();
                            products[largest] = 0.0;
                        }
                        Defect::SwappedRows => {
                            let b = |k: usize| f64::from(f.b[w * K * 8 + (16 * kt + k) * 8 + n]);
                            let a = |k: usize| f64::from(f.a[w * 16 * K + r * K + 16 * kt + k]);
                            products = std::array::from_fn(|k| a(k) * b(k ^ 2));
                        }
                    }
                    tensor_core(c, &products, how, &mut rng)
                };
                let c = f64::from(f.c[at]);
                m.one[at] = step(c, 0) as f32;
                let chained = (0..K_TILES).fold(c, &mut step);
                m.out[at] = chained as f32;
                let lo = (0..2).fold(0.0, &mut step) as f32;
                let hi = (2..4).fold(0.0, &mut step) as f32;
                m.split[at] = lo + hi;
                m.narrow[at] =
                    numerics::to_f32(f.elem, numerics::from_f32(f.elem, chained as f32).unwrap())
                        .unwrap();
            }
        }
    }
    m
}

/// The oracle's value and probes of `name`.
fn oracle_output<'a>(oracle: &'a [Observed], name: &str) -> (&'a HostTensor, &'a MmaProbes) {
    let o = oracle
        .iter()
        .find(|o| o.name == name && o.call == Some(0))
        .unwrap_or_else(|| panic!("no output `{name}`"));
    (&o.tensor, o.mma.as_ref().expect("mma outputs carry probes"))
}

/// Elements of warp `w` only, as a tensor of 128.
fn warp_slice(t: &HostTensor, w: usize) -> HostTensor {
    let bits = t.to_bits()[w * 128..(w + 1) * 128].to_vec();
    HostTensor::new(t.elem(), vec![128], bits).unwrap()
}

fn tensor_like(reference: &HostTensor, values: &[f32]) -> HostTensor {
    let bits = values
        .iter()
        .map(|&v| match reference.elem() {
            ScalarType::F32 => v.to_bits(),
            elem => u32::from(numerics::from_f32(elem, v).unwrap()),
        })
        .collect();
    HostTensor::new(reference.elem(), reference.shape().to_vec(), bits).unwrap()
}

/// How many elements of warp `w` of `name` fail the bound.
fn failing(oracle: &[Observed], name: &str, values: &[f32], w: usize) -> usize {
    let (expected, probes) = oracle_output(oracle, name);
    let actual = tensor_like(expected, values);
    let probes = MmaProbes {
        magnitude: warp_slice(&probes.magnitude, w),
        counted: warp_slice(&probes.counted, w),
        start: warp_slice(&probes.start, w),
    };
    match compare_mma(
        &warp_slice(expected, w),
        &probes,
        &warp_slice(&actual, w),
        1.0,
    ) {
        Ok(()) => 0,
        Err(m) => m.count,
    }
}

fn outputs_of(m: &ModelOutputs) -> [(&'static str, &[f32]); 4] {
    [
        ("one", &m.one),
        ("out", &m.out),
        ("split", &m.split),
        ("narrow", &m.narrow),
    ]
}

fn oracle(file: &CaseFile, f: &Fragments) -> Vec<Observed> {
    let calls = [PreparedCall {
        map: "tiles".into(),
        args: f.args(),
        residents: vec![],
    }];
    let valid = file.validate().expect("valid");
    run_interp(&valid, &file.spec, &calls, Mode::Fast, 1, 0).expect("the oracle runs")
}

#[test]
fn tensor_core_models_stay_within_the_bound() {
    for (ty, elem) in [("f16", ScalarType::F16), ("bf16", ScalarType::BF16)] {
        let file = case_file(ty);
        for seed in 0..3 {
            let f = Fragments::new(elem, seed);
            let oracle = oracle(&file, &f);
            for (i, how) in SUMMATIONS.into_iter().enumerate() {
                let m = model(&f, how, Defect::None, seed * 10 + i as u64);
                let mut differing = 0;
                for (name, values) in outputs_of(&m) {
                    let (expected, _) = oracle_output(&oracle, name);
                    differing += tensor_like(expected, values)
                        .to_bits()
                        .iter()
                        .zip(expected.to_bits())
                        .filter(|(a, e)| **a != *e)
                        .count();
                    for (w, flavour) in FLAVOURS.into_iter().enumerate() {
                        assert_eq!(
                            failing(&oracle, name, values, w),
                            0,
                            "{ty} seed {seed} {how:?} {flavour:?}: `{name}` outside the bound"
                        );
                    }
                }
                // The models differ from the fixed order: the bound is what passes them.
                assert!(
                    differing > 100,
                    "{ty} seed {seed} {how:?}: only {differing} differ"
                );
            }
        }
    }
}

/// How many of a warp's 128 elements of `name` a defect must put outside
/// the bound. Where the products matter against C, all (f32) or nearly all
/// (16-bit, whose ulp is coarse, and cancelling pairs, whose wrong
/// remainders are sometimes near the right ones); with mixed magnitudes most, and f16's
/// `narrow` overflows to infinity on both sides in most elements. Where C
/// near 2^24 absorbs products near 1 (`one`, `out`, `narrow` of
/// `Absorption`), a tensor core may itself be off by more than the
/// defect (the bound is relative to the magnitude, which C dominates), so
/// nothing is required; `split` starts from zero and shows it.
fn must_show(flavour: Flavour, name: &str) -> usize {
    match (flavour, name) {
        (Flavour::Random, "narrow") => 100,
        (Flavour::Random, _) => 128,
        // What remains of cancelling pairs is small: a few elements' wrong
        // remainders come close to the right ones.
        (Flavour::Cancellation, _) => 100,
        (Flavour::MixedMagnitudes, "narrow") => 10,
        (Flavour::MixedMagnitudes, _) => 100,
        (Flavour::Absorption, "split") => 100,
        (Flavour::Absorption, _) => 0,
    }
}

#[test]
fn a_dropped_product_or_a_wrong_layout_fails_the_bound() {
    for (ty, elem) in [("f16", ScalarType::F16), ("bf16", ScalarType::BF16)] {
        let file = case_file(ty);
        let f = Fragments::new(elem, 7);
        let oracle = oracle(&file, &f);
        for defect in [Defect::DropLargestProduct, Defect::SwappedRows] {
            for how in [Summation::Sequential, Summation::Aligned { bits: 24 }] {
                let m = model(&f, how, defect, 3);
                for (name, values) in outputs_of(&m) {
                    for (w, flavour) in FLAVOURS.into_iter().enumerate() {
                        let count = failing(&oracle, name, values, w);
                        let at_least = must_show(flavour, name);
                        assert!(
                            count >= at_least,
                            "{ty} {defect:?} {how:?} {flavour:?}: `{name}` has only {count} of 128 elements outside the bound"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_probes_count_steps_through_chains_and_partial_sums() {
    let file = case_file("bf16");
    let f = Fragments::new(ScalarType::BF16, 1);
    let oracle = oracle(&file, &f);
    for (name, steps) in [("one", 1.0), ("out", 4.0), ("split", 4.0)] {
        let (_, probes) = oracle_output(&oracle, name);
        let counted = probes.counted.to_f32();
        let start = probes.start.to_f32();
        for (at, (&t, &p)) in counted.iter().zip(&start).enumerate() {
            // `split` adds two chains of two steps from zero; the others
            // start from C, whose magnitude the start probe holds.
            let c = if name == "split" { 0.0 } else { f.c[at].abs() };
            assert_eq!(p, c, "`{name}`[{at}]");
            // The count is rounded up at each step: never below, and within
            // the slack the comparison adds (2^-20 of the count).
            let read = f64::from(t) - f64::from(p);
            assert!(
                read >= steps && read <= steps + f64::from(t) / f64::from(1u32 << 20),
                "`{name}`[{at}]: counted {t}, start {p}"
            );
            if c == 0.0 {
                assert_eq!(t, steps as f32, "`{name}`[{at}]");
            }
        }
    }
}

/// An index that depends on an mma result: the reference run stays in
/// bounds, the step-count probe (d = |c| + 1) does not, and the oracle
/// fails with the mode's precondition (docs/numerics.md).
#[test]
fn a_probe_that_fails_where_the_run_did_not_names_the_precondition() {
    let text = "
mesh m {
  grid [b = 1];
  threads t = 32;
}

kernel k(out: gmem<f32[32]>) {
  local fa: f16[8];
  local fb: f16[4];
  local acc: f32[4];
  for i: u32 in 0u..8u {
    fa[i] = f16(0.0);
  }
  for i: u32 in 0u..4u {
    fb[i] = f16(0.0);
    acc[i] = 1.0;
  }
  mma_m16n8k16(acc, fa, fb, acc);
  out[(u32(acc[0]) - 1u) * 32u + axis_index(t)] = acc[0];
}

map steered {
  programs [m: k];
  outputs [out: gmem<f32[32]>];
}

case {
  compare out = mma;
  expect ok;
}
";
    let source = mpmd_core::text::parse_file(text).unwrap_or_else(|e| panic!("{}", e.render("t")));
    let file = CaseFile {
        module: source.module,
        spec: source.case.unwrap(),
    };
    let valid = file.validate().expect("valid");
    let calls = [PreparedCall {
        map: "steered".into(),
        args: CallArgs::default(),
        residents: vec![],
    }];
    for mode in [Mode::Fast, Mode::Checked] {
        let error = run_interp(&valid, &file.spec, &calls, mode, 1, 0)
            .expect_err("the probe steps out of bounds");
        let text = error.to_string();
        assert!(
            text.starts_with("the mma probe StepCount failed where the run did not: "),
            "{text}"
        );
        assert!(
            text.ends_with(" (the `mma` compare mode needs control flow and indices that do not depend on mma results: docs/numerics.md)"),
            "{text}"
        );
    }
}
