//! Deterministic input generation for `mpmd run` (the case's generators, or
//! a default per type), from a seed. Each input gets its own stream derived
//! from the seed and its name, so adding an input never changes the others.

use mpmd_core::ir::{Generator, Literal, Module, MpmdMap, Operand, ScalarType, Type};
use mpmd_core::HostTensor;
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum GenerateError {
    #[error("input `{input}` is not a gmem ref")]
    NotARef { input: String },
    #[error("input `{input}`: {reason}")]
    Generator { input: String, reason: String },
}

/// SplitMix64: small, fast, and good enough for test inputs.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The stream for input `name` under `seed`.
    pub fn for_input(seed: u64, name: &str) -> Self {
        // FNV-1a of the name, mixed into the seed.
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        let mut rng = Rng(seed ^ hash);
        rng.next_u64();
        rng
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 24 bits of precision.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[lo, hi]` (inclusive; `lo <= hi`).
    pub fn int_in(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi - lo) as u64 + 1;
        lo + (self.next_u64() % span) as i64
    }
}

/// The host shape of an operand's tensor: the ref's shape, preceded by the
/// owner mesh's block axis sizes (grid then cluster) when the ref is owned.
pub fn host_shape(module: &Module, operand: &Operand) -> Option<Vec<u32>> {
    let ty = operand.ty.as_ref_type()?;
    let mut shape: Vec<u32> = match &ty.owner {
        Some(owner) => module.mesh(owner)?.block_axes().map(|a| a.size).collect(),
        None => vec![],
    };
    shape.extend_from_slice(&ty.shape);
    Some(shape)
}

/// Generates the data of `input` of `map` from the case's generator for it,
/// or the default (f32 uniform in `[-1, 1)`, integers in `[0, 100]`, bools 0/1).
pub fn generate(
    module: &Module,
    map: &MpmdMap,
    input: &Operand,
    seed: u64,
) -> Result<HostTensor, GenerateError> {
    let Type::Ref(ty) = &input.ty else {
        return Err(GenerateError::NotARef {
            input: input.name.clone(),
        });
    };
    let shape = host_shape(module, input).ok_or_else(|| GenerateError::NotARef {
        input: input.name.clone(),
    })?;
    let count: usize = shape.iter().map(|&d| d as usize).product();
    let generator = module
        .case
        .as_ref()
        .and_then(|c| c.generators.iter().find(|(name, _)| name == &input.name))
        .map(|(_, g)| g.clone())
        .unwrap_or_else(|| default_generator(ty.elem));
    let fail = |reason: String| GenerateError::Generator {
        input: input.name.clone(),
        reason,
    };
    let mut rng = Rng::for_input(seed, &input.name);
    let elem = ty.elem;
    let words = match &generator {
        Generator::Uniform { lo, hi } => {
            let range = Range::new(elem, *lo, *hi).map_err(fail)?;
            (0..count).map(|_| range.sample(&mut rng)).collect()
        }
        Generator::NonZero { lo, hi } => {
            let range = Range::new(elem, *lo, *hi).map_err(fail)?;
            if range.only_zero() {
                return Err(fail("nonzero range contains only zero".into()));
            }
            (0..count)
                .map(|_| loop {
                    let w = range.sample(&mut rng);
                    if !is_zero(elem, w) {
                        break w;
                    }
                })
                .collect()
        }
        Generator::Special => (0..count).map(|_| special(elem, &mut rng)).collect(),
        Generator::Constant(value) => vec![convert(elem, *value); count],
        Generator::Iota => (0..count)
            .map(|i| convert(elem, Literal::U32(i as u32)))
            .collect(),
        Generator::IndexInto { operand, dim } => {
            let extent = map
                .operand(operand)
                .and_then(|(_, o)| o.ty.as_ref_type())
                .and_then(|t| t.shape.get(*dim as usize).copied())
                .ok_or_else(|| {
                    fail(format!(
                        "index_into({operand}, {dim}) names no such dimension"
                    ))
                })?;
            if extent == 0 {
                return Err(fail(format!("dimension {dim} of `{operand}` is empty")));
            }
            (0..count)
                .map(|_| {
                    convert(
                        elem,
                        Literal::U32(rng.int_in(0, i64::from(extent) - 1) as u32),
                    )
                })
                .collect()
        }
    };
    Ok(HostTensor { elem, shape, words })
}

fn default_generator(elem: ScalarType) -> Generator {
    match elem {
        ScalarType::F32 => Generator::Uniform {
            lo: Literal::f32(-1.0),
            hi: Literal::f32(1.0),
        },
        ScalarType::Bool => Generator::Uniform {
            lo: Literal::Bool(false),
            hi: Literal::Bool(true),
        },
        ScalarType::I32 | ScalarType::U32 => Generator::Uniform {
            lo: Literal::I32(0),
            hi: Literal::I32(100),
        },
    }
}

fn as_f64(value: Literal) -> f64 {
    match value {
        Literal::F32(b) => f64::from(b.to_f32()),
        Literal::I32(v) => f64::from(v),
        Literal::U32(v) => f64::from(v),
        Literal::Bool(v) => f64::from(u8::from(v)),
    }
}

fn as_i64(value: Literal) -> i64 {
    match value {
        Literal::F32(b) => b.to_f32() as i64,
        Literal::I32(v) => i64::from(v),
        Literal::U32(v) => i64::from(v),
        Literal::Bool(v) => i64::from(v),
    }
}

/// `value` converted to `elem` (numeric conversion, as `as` does), stored as a word.
fn convert(elem: ScalarType, value: Literal) -> u32 {
    match elem {
        ScalarType::F32 => (as_f64(value) as f32).to_bits(),
        ScalarType::I32 => as_i64(value) as i32 as u32,
        ScalarType::U32 => as_i64(value) as u32,
        ScalarType::Bool => u32::from(as_f64(value) != 0.0),
    }
}

fn is_zero(elem: ScalarType, word: u32) -> bool {
    match elem {
        ScalarType::F32 => f32::from_bits(word) == 0.0,
        _ => word == 0,
    }
}

/// A sampling range: `[lo, hi)` for floats, `[lo, hi]` for integers.
enum Range {
    Float { lo: f32, hi: f32 },
    Int { elem: ScalarType, lo: i64, hi: i64 },
}

impl Range {
    fn new(elem: ScalarType, lo: Literal, hi: Literal) -> Result<Self, String> {
        if elem == ScalarType::F32 {
            let (lo, hi) = (as_f64(lo) as f32, as_f64(hi) as f32);
            if !(lo.is_finite() && hi.is_finite() && lo < hi) {
                return Err(format!(
                    "uniform({lo:?}, {hi:?}) is not a finite, non-empty range"
                ));
            }
            return Ok(Range::Float { lo, hi });
        }
        let (lo, hi) = (as_i64(lo), as_i64(hi));
        if lo > hi {
            return Err(format!("uniform({lo}, {hi}) is empty"));
        }
        Ok(Range::Int { elem, lo, hi })
    }

    fn only_zero(&self) -> bool {
        match *self {
            Range::Float { lo, hi } => lo == 0.0 && hi <= f32::MIN_POSITIVE,
            Range::Int { lo, hi, .. } => lo == 0 && hi == 0,
        }
    }

    fn sample(&self, rng: &mut Rng) -> u32 {
        match *self {
            Range::Float { lo, hi } => {
                let v = lo + (hi - lo) * rng.unit_f32();
                // Rounding can land on `hi`; the range is half-open.
                if v < hi { v } else { lo }.to_bits()
            }
            Range::Int { elem, lo, hi } => match elem {
                ScalarType::Bool => u32::from(rng.int_in(lo.clamp(0, 1), hi.clamp(0, 1)) != 0),
                // Two's complement: the low 32 bits are the i32 or u32 word.
                _ => rng.int_in(lo, hi) as u32,
            },
        }
    }
}

/// Edge values half of the time, ordinary values otherwise.
fn special(elem: ScalarType, rng: &mut Rng) -> u32 {
    let pick = |rng: &mut Rng, list: &[u32]| list[(rng.next_u64() % list.len() as u64) as usize];
    let edge = rng.next_u64().is_multiple_of(2);
    match elem {
        ScalarType::F32 => {
            if edge {
                pick(
                    rng,
                    &[
                        0.0f32.to_bits(),
                        (-0.0f32).to_bits(),
                        f32::INFINITY.to_bits(),
                        f32::NEG_INFINITY.to_bits(),
                        f32::NAN.to_bits(),
                        1,           // smallest subnormal
                        0x0040_0000, // a mid subnormal
                        f32::MIN_POSITIVE.to_bits(),
                        f32::MIN.to_bits(),
                        f32::MAX.to_bits(),
                        1.0f32.to_bits(),
                        (-1.0f32).to_bits(),
                    ],
                )
            } else {
                (rng.unit_f32() * 200.0 - 100.0).to_bits()
            }
        }
        ScalarType::I32 => {
            if edge {
                pick(
                    rng,
                    &[0, i32::MIN as u32, i32::MAX as u32, 1, (-1i32) as u32],
                )
            } else {
                rng.next_u64() as u32
            }
        }
        ScalarType::U32 => {
            if edge {
                pick(rng, &[0, u32::MAX, 1, 0x8000_0000])
            } else {
                rng.next_u64() as u32
            }
        }
        ScalarType::Bool => (rng.next_u64() & 1) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpmd_core::ir::{gmem, CaseSpec, MapBuilder, MeshBuilder};

    fn module_with(generators: Vec<(&str, Generator)>) -> (Module, MpmdMap) {
        let map = MapBuilder::new("f")
            .program("m", "k")
            .input("x", gmem(ScalarType::F32, [64]))
            .input("i", gmem(ScalarType::I32, [64]))
            .input("u", gmem(ScalarType::U32, [2]).owned_by("m"))
            .build();
        let module = Module {
            meshes: vec![MeshBuilder::new("m").grid("b", 3).threads("t", 1).build()],
            maps: vec![map.clone()],
            case: Some(CaseSpec {
                generators: generators
                    .into_iter()
                    .map(|(n, g)| (n.to_string(), g))
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        (module, map)
    }

    #[test]
    fn defaults_are_in_range_and_deterministic() {
        let (module, map) = module_with(vec![]);
        let x = generate(&module, &map, &map.inputs[0], 7).unwrap();
        assert_eq!(x, generate(&module, &map, &map.inputs[0], 7).unwrap());
        assert_ne!(x, generate(&module, &map, &map.inputs[0], 8).unwrap());
        assert!(x.to_f32().iter().all(|v| (-1.0..1.0).contains(v)));
        let i = generate(&module, &map, &map.inputs[1], 7).unwrap();
        assert!(i.to_i32().iter().all(|v| (0..=100).contains(v)));
    }

    #[test]
    fn owned_inputs_have_one_instance_per_block() {
        let (module, map) = module_with(vec![("u", Generator::Iota)]);
        let u = generate(&module, &map, &map.inputs[2], 0).unwrap();
        assert_eq!(u.shape, vec![3, 2]);
        assert_eq!(host_shape(&module, &map.inputs[0]), Some(vec![64]));
        assert_eq!(u.words, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn case_generators_are_used() {
        let (module, map) = module_with(vec![
            ("x", Generator::Constant(Literal::I32(3))),
            (
                "i",
                Generator::NonZero {
                    lo: Literal::I32(-1),
                    hi: Literal::I32(1),
                },
            ),
        ]);
        let x = generate(&module, &map, &map.inputs[0], 1).unwrap();
        assert!(x.to_f32().iter().all(|&v| v == 3.0));
        let i = generate(&module, &map, &map.inputs[1], 1).unwrap();
        assert!(i.to_i32().iter().all(|&v| v == 1 || v == -1));
    }

    #[test]
    fn index_into_stays_in_bounds() {
        let (module, map) = module_with(vec![(
            "i",
            Generator::IndexInto {
                operand: "u".into(),
                dim: 0,
            },
        )]);
        let i = generate(&module, &map, &map.inputs[1], 3).unwrap();
        assert!(i.to_i32().iter().all(|&v| v == 0 || v == 1));
        assert!(i.to_i32().contains(&1));
    }
}
