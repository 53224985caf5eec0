//! Input generation per the case's generators, deterministic for a seed.

use mpmd_core::ir::{Generator, Literal, MpmdMap, ScalarType, Type};
use mpmd_core::HostTensor;
use thiserror::Error;

use crate::rng::SplitMix64;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum GenError {
    #[error("generator for `{name}`: `index_into({operand}, {dim})`: {reason}")]
    BadIndexInto {
        name: String,
        operand: String,
        dim: u32,
        reason: String,
    },
    #[error("generator for `{name}`: empty range [{lo}, {hi}]")]
    EmptyRange {
        name: String,
        lo: String,
        hi: String,
    },
    #[error("generator for `{name}`: `nonzero` range [{lo}, {hi}] holds only zero")]
    OnlyZero {
        name: String,
        lo: String,
        hi: String,
    },
}

/// Edge values of `f32`: zeros, infinities, NaN, subnormals, extremes, ±1.
pub const F32_SPECIALS: [f32; 16] = [
    0.0,
    -0.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    1e-45, // smallest subnormal
    -1e-45,
    1.175_493_5e-38, // largest subnormal
    f32::MIN_POSITIVE,
    f32::MAX,
    f32::MIN,
    1.0,
    -1.0,
    0.5,
    2_147_483_648.0,  // 2^31: just out of i32 range
    -2_147_483_904.0, // below i32::MIN
];

pub const I32_SPECIALS: [i32; 12] = [
    0,
    1,
    -1,
    i32::MIN,
    i32::MAX,
    i32::MIN + 1,
    i32::MAX - 1,
    31,
    32,
    33,
    64,
    -32,
];

pub const U32_SPECIALS: [u32; 10] = [
    0,
    1,
    u32::MAX,
    u32::MAX - 1,
    0x8000_0000,
    0x7fff_ffff,
    31,
    32,
    33,
    64,
];

fn lit_f64(l: Literal) -> f64 {
    match l {
        Literal::F32(b) => f64::from(b.to_f32()),
        Literal::I32(v) => f64::from(v),
        Literal::U32(v) => f64::from(v),
        Literal::Bool(v) => f64::from(u8::from(v)),
    }
}

fn lit_i64(l: Literal) -> i64 {
    match l {
        Literal::F32(b) => b.to_f32() as i64,
        Literal::I32(v) => i64::from(v),
        Literal::U32(v) => i64::from(v),
        Literal::Bool(v) => i64::from(v),
    }
}

fn word_of_i64(elem: ScalarType, v: i64) -> u32 {
    match elem {
        ScalarType::F32 => (v as f32).to_bits(),
        ScalarType::I32 => v as i32 as u32,
        ScalarType::U32 => v as u32,
        ScalarType::Bool => u32::from(v != 0),
    }
}

fn type_bounds(elem: ScalarType) -> (i64, i64) {
    match elem {
        ScalarType::I32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        ScalarType::U32 => (0, i64::from(u32::MAX)),
        ScalarType::Bool => (0, 1),
        ScalarType::F32 => (i64::MIN, i64::MAX),
    }
}

/// The state one generator needs to produce consecutive elements.
struct ElementSource<'a> {
    name: &'a str,
    gen: &'a Generator,
    elem: ScalarType,
    /// For `index_into`: the exclusive bound.
    index_bound: Option<u32>,
}

impl ElementSource<'_> {
    fn check(&self) -> Result<(), GenError> {
        if let Generator::Uniform { lo, hi } | Generator::NonZero { lo, hi } = self.gen {
            let (lo_v, hi_v) = (lit_f64(*lo), lit_f64(*hi));
            let empty = if self.elem == ScalarType::F32 {
                lo_v > hi_v
            } else {
                lit_i64(*lo).max(type_bounds(self.elem).0)
                    > lit_i64(*hi).min(type_bounds(self.elem).1)
            };
            let fmt = |l: &Literal| format!("{l:?}");
            if empty {
                return Err(GenError::EmptyRange {
                    name: self.name.into(),
                    lo: fmt(lo),
                    hi: fmt(hi),
                });
            }
            let only_zero =
                matches!(self.gen, Generator::NonZero { .. }) && lo_v == 0.0 && hi_v == 0.0;
            if only_zero {
                return Err(GenError::OnlyZero {
                    name: self.name.into(),
                    lo: fmt(lo),
                    hi: fmt(hi),
                });
            }
        }
        Ok(())
    }

    fn word(&self, i: usize, rng: &mut SplitMix64) -> u32 {
        match self.gen {
            Generator::Constant(l) => convert_literal(*l, self.elem),
            Generator::Iota => word_of_i64(self.elem, i as i64),
            Generator::IndexInto { .. } => {
                let bound = self.index_bound.unwrap_or(1).max(1);
                word_of_i64(self.elem, rng.below(u64::from(bound)) as i64)
            }
            Generator::Uniform { lo, hi } => self.uniform(*lo, *hi, rng),
            Generator::NonZero { lo, hi } => loop {
                let w = self.uniform(*lo, *hi, rng);
                let zero = match self.elem {
                    ScalarType::F32 => f32::from_bits(w) == 0.0,
                    _ => w == 0,
                };
                if !zero {
                    break w;
                }
            },
            Generator::Special => self.special(i, rng),
        }
    }

    fn uniform(&self, lo: Literal, hi: Literal, rng: &mut SplitMix64) -> u32 {
        if self.elem == ScalarType::F32 {
            let (lo, hi) = (lit_f64(lo), lit_f64(hi));
            let v = (lo + (hi - lo) * rng.next_f64()) as f32;
            // Rounding to f32 may land on `hi`; the range is half-open.
            let v = if f64::from(v) >= hi && hi > lo {
                lo as f32
            } else {
                v
            };
            v.to_bits()
        } else {
            let (tlo, thi) = type_bounds(self.elem);
            let lo = lit_i64(lo).max(tlo);
            let hi = lit_i64(hi).min(thi);
            word_of_i64(self.elem, rng.range_i64(lo, hi))
        }
    }

    /// The edge values in order, then a random mix of edge values, random
    /// bit patterns and ordinary values.
    fn special(&self, i: usize, rng: &mut SplitMix64) -> u32 {
        let specials: Vec<u32> = match self.elem {
            ScalarType::F32 => F32_SPECIALS.iter().map(|v| v.to_bits()).collect(),
            ScalarType::I32 => I32_SPECIALS.iter().map(|&v| v as u32).collect(),
            ScalarType::U32 => U32_SPECIALS.to_vec(),
            ScalarType::Bool => vec![0, 1],
        };
        if i < specials.len() {
            return specials[i];
        }
        match (self.elem, rng.below(3)) {
            (_, 0) => specials[rng.below(specials.len() as u64) as usize],
            (ScalarType::Bool, _) => rng.below(2) as u32,
            (ScalarType::F32, 1) => rng.next_u32(),
            (ScalarType::F32, _) => ((rng.next_f64() * 200.0 - 100.0) as f32).to_bits(),
            (_, 1) => rng.next_u32(),
            (_, _) => word_of_i64(self.elem, rng.range_i64(-100, 100)),
        }
    }
}

/// A literal converted to another scalar type's word (as a value, not bits).
pub fn convert_literal(l: Literal, elem: ScalarType) -> u32 {
    if l.ty() == elem {
        return l.to_bits();
    }
    match elem {
        ScalarType::F32 => (lit_f64(l) as f32).to_bits(),
        _ => word_of_i64(elem, lit_i64(l)),
    }
}

fn index_bound(name: &str, map: &MpmdMap, operand: &str, dim: u32) -> Result<u32, GenError> {
    let bad = |reason: &str| GenError::BadIndexInto {
        name: name.into(),
        operand: operand.into(),
        dim,
        reason: reason.into(),
    };
    let (_, op) = map
        .operand(operand)
        .ok_or_else(|| bad("no such operand in the map"))?;
    let Type::Ref(r) = &op.ty else {
        return Err(bad("the operand is a scalar"));
    };
    r.shape.get(dim as usize).copied().ok_or_else(|| {
        bad(&format!(
            "the operand has only {} dimension(s)",
            r.shape.len()
        ))
    })
}

/// Generates the data of input `name` (of element type `elem`, shape `shape`) of `map`.
pub fn generate_tensor(
    gen: &Generator,
    name: &str,
    elem: ScalarType,
    shape: &[u32],
    map: &MpmdMap,
    rng: &mut SplitMix64,
) -> Result<HostTensor, GenError> {
    let bound = match gen {
        Generator::IndexInto { operand, dim } => Some(index_bound(name, map, operand, *dim)?),
        _ => None,
    };
    let source = ElementSource {
        name,
        gen,
        elem,
        index_bound: bound,
    };
    source.check()?;
    let len: usize = shape.iter().map(|&d| d as usize).product();
    let words = (0..len).map(|i| source.word(i, rng)).collect();
    Ok(HostTensor {
        elem,
        shape: shape.to_vec(),
        words,
    })
}

/// Generates a scalar parameter's value: element 0 of a one-element input.
pub fn generate_scalar(
    gen: &Generator,
    name: &str,
    ty: ScalarType,
    map: &MpmdMap,
    rng: &mut SplitMix64,
) -> Result<Literal, GenError> {
    // `special` on a scalar picks one edge value at random rather than always the first.
    let t = if matches!(gen, Generator::Special) {
        let skip = rng.below(8) as usize;
        let tensor = generate_tensor(gen, name, ty, &[skip as u32 + 1], map, rng)?;
        return Ok(tensor.get(skip));
    } else {
        generate_tensor(gen, name, ty, &[1], map, rng)?
    };
    Ok(t.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpmd_core::ir::{gmem, MapBuilder};

    fn map() -> MpmdMap {
        MapBuilder::new("m")
            .program("g", "k")
            .input("x", gmem(ScalarType::F32, [4, 6]))
            .build()
    }

    fn gen(g: Generator, elem: ScalarType, len: u32, seed: u64) -> HostTensor {
        let mut rng = SplitMix64::for_stream(seed, &["case", "x"]);
        generate_tensor(&g, "x", elem, &[len], &map(), &mut rng).unwrap()
    }

    #[test]
    fn same_seed_same_data_other_seed_other_data() {
        let g = Generator::Uniform {
            lo: Literal::f32(-1.0),
            hi: Literal::f32(1.0),
        };
        assert_eq!(
            gen(g.clone(), ScalarType::F32, 64, 3),
            gen(g.clone(), ScalarType::F32, 64, 3)
        );
        assert_ne!(
            gen(g.clone(), ScalarType::F32, 64, 3),
            gen(g, ScalarType::F32, 64, 4)
        );
    }

    #[test]
    fn uniform_integers_are_inclusive_and_in_range() {
        let t = gen(
            Generator::Uniform {
                lo: Literal::I32(0),
                hi: Literal::I32(3),
            },
            ScalarType::U32,
            400,
            1,
        );
        let mut seen = [false; 4];
        for &w in &t.words {
            assert!(w <= 3, "{w}");
            seen[w as usize] = true;
        }
        assert_eq!(seen, [true; 4]);
    }

    #[test]
    fn uniform_floats_are_half_open() {
        let t = gen(
            Generator::Uniform {
                lo: Literal::f32(2.0),
                hi: Literal::f32(3.0),
            },
            ScalarType::F32,
            500,
            9,
        );
        assert!(t.to_f32().iter().all(|v| (2.0..3.0).contains(v)));
    }

    #[test]
    fn nonzero_never_yields_zero() {
        let t = gen(
            Generator::NonZero {
                lo: Literal::I32(-1),
                hi: Literal::I32(1),
            },
            ScalarType::I32,
            300,
            5,
        );
        assert!(t.to_i32().iter().all(|&v| v == 1 || v == -1));
    }

    #[test]
    fn special_starts_with_the_edge_values() {
        let t = gen(Generator::Special, ScalarType::I32, 20, 0);
        assert_eq!(&t.to_i32()[..12], &I32_SPECIALS);
        let f = gen(Generator::Special, ScalarType::F32, 20, 0);
        assert_eq!(f.words[1], 0x8000_0000);
        assert!(f32::from_bits(f.words[4]).is_nan());
        assert_eq!(f.words[5], 1);
    }

    #[test]
    fn iota_and_constant() {
        assert_eq!(
            gen(Generator::Iota, ScalarType::U32, 4, 0).words,
            vec![0, 1, 2, 3]
        );
        assert_eq!(
            gen(Generator::Iota, ScalarType::F32, 3, 0).to_f32(),
            vec![0.0, 1.0, 2.0]
        );
        assert_eq!(
            gen(Generator::Constant(Literal::U32(7)), ScalarType::U32, 2, 0).words,
            vec![7, 7]
        );
        // An i32 literal for an f32 input converts by value.
        assert_eq!(
            gen(Generator::Constant(Literal::I32(-2)), ScalarType::F32, 1, 0).to_f32(),
            vec![-2.0]
        );
    }

    #[test]
    fn index_into_stays_below_the_dimension() {
        let g = Generator::IndexInto {
            operand: "x".into(),
            dim: 1,
        };
        let t = gen(g, ScalarType::U32, 200, 2);
        assert!(t.words.iter().all(|&w| w < 6));
        assert!(t.words.contains(&5));
        let mut rng = SplitMix64::new(0);
        let err = generate_tensor(
            &Generator::IndexInto {
                operand: "x".into(),
                dim: 2,
            },
            "i",
            ScalarType::U32,
            &[1],
            &map(),
            &mut rng,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "generator for `i`: `index_into(x, 2)`: the operand has only 2 dimension(s)"
        );
    }

    #[test]
    fn empty_ranges_are_errors() {
        let mut rng = SplitMix64::new(0);
        let err = generate_tensor(
            &Generator::Uniform {
                lo: Literal::I32(5),
                hi: Literal::I32(1),
            },
            "n",
            ScalarType::I32,
            &[1],
            &map(),
            &mut rng,
        )
        .unwrap_err();
        assert!(matches!(err, GenError::EmptyRange { .. }), "{err}");
    }
}
