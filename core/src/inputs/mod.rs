//! Input generation from a case's generators, deterministic for a seed: the
//! one implementation behind `mpmd run`, the conformance runner, the fuzzer
//! and the backends' tests.
//!
//! Every operand gets its own stream ([`Rng::for_stream`]) keyed by the seed,
//! optional leading names (the conformance runner uses the case name) and the
//! operand's name, so adding an input never changes the data of the others.

mod rng;

pub use rng::Rng;

use thiserror::Error;

use crate::host::{CallArgs, HostTensor};
use crate::ir::{Generator, Literal, Module, MpmdMap, Operand, ScalarType, Type};

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum GenerateError {
    #[error("call of unknown map `{0}`")]
    UnknownMap(String),
    #[error("input `{0}` is not a gmem ref")]
    NotARef(String),
    #[error("input `{0}` has no `generate` line")]
    NoGenerator(String),
    #[error("scalar `{0}` has no value in the call and no `generate` line")]
    NoScalarValue(String),
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
    #[error("generator for `{name}`: range [{lo}, {hi}] is not finite")]
    NotFinite {
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

/// What an operand without a `generate` line gets.
#[derive(Clone, Debug, PartialEq)]
pub enum Fallback {
    /// Nothing: an error (the conformance corpus states every generator).
    Required,
    /// By type: `f32` uniform in `[-1, 1)`, integers uniform in `[0, 100]`,
    /// bools 0 or 1 ([`default_generator`]; `mpmd run`).
    ByType,
    /// This generator, whatever the type (the fuzzer: uniform in `[-4, 4)`).
    Same(Generator),
}

/// Where generated data comes from: the seed, the stream names and what
/// operands without a generator get.
#[derive(Clone, Debug)]
pub struct Generation<'a> {
    pub seed: u64,
    /// Names that key every stream before the operand's name.
    pub stream: &'a [&'a str],
    pub fallback: Fallback,
}

impl Generation<'_> {
    /// `mpmd run`: streams keyed by the operand name alone, defaults by type.
    pub fn with_defaults(seed: u64) -> Generation<'static> {
        Generation {
            seed,
            stream: &[],
            fallback: Fallback::ByType,
        }
    }

    /// The stream of operand `name`.
    pub fn rng(&self, name: &str) -> Rng {
        let mut names = self.stream.to_vec();
        names.push(name);
        Rng::for_stream(self.seed, &names)
    }

    /// The case's generator for operand `name`, or the fallback's.
    pub fn generator(&self, module: &Module, name: &str, elem: ScalarType) -> Option<Generator> {
        let stated = module
            .case
            .as_ref()
            .and_then(|c| c.generators.iter().find(|(n, _)| n == name))
            .map(|(_, g)| g.clone());
        stated.or_else(|| match &self.fallback {
            Fallback::Required => None,
            Fallback::ByType => Some(default_generator(elem)),
            Fallback::Same(g) => Some(g.clone()),
        })
    }
}

/// The arguments of every call of `module` ([`Module::effective_calls`]), in
/// order: every non-resident input generated, every scalar from the call or
/// else generated.
pub fn call_args(module: &Module, generation: &Generation) -> Result<Vec<CallArgs>, GenerateError> {
    let mut all = Vec::new();
    for call in module.effective_calls() {
        let map = module
            .map(&call.map)
            .ok_or_else(|| GenerateError::UnknownMap(call.map.clone()))?;
        let mut args = CallArgs::default();
        for input in map.inputs.iter().filter(|x| !x.resident) {
            let tensor = generate_input(module, map, input, generation)?;
            args.inputs.insert(input.name.clone(), tensor);
        }
        for scalar in &map.scalars {
            let Type::Scalar(ty) = scalar.ty else {
                continue;
            };
            let value = match call.scalars.iter().find(|(n, _)| n == &scalar.name) {
                Some((_, v)) => *v,
                None => {
                    let gen = generation
                        .generator(module, &scalar.name, ty)
                        .ok_or_else(|| GenerateError::NoScalarValue(scalar.name.clone()))?;
                    let mut rng = generation.rng(&scalar.name);
                    generate_scalar(&gen, &scalar.name, ty, map, &mut rng)?
                }
            };
            args.scalars.insert(scalar.name.clone(), value);
        }
        all.push(args);
    }
    Ok(all)
}

/// Generates the data of `input` (a ref) of `map`, with its host shape.
pub fn generate_input(
    module: &Module,
    map: &MpmdMap,
    input: &Operand,
    generation: &Generation,
) -> Result<HostTensor, GenerateError> {
    let not_a_ref = || GenerateError::NotARef(input.name.clone());
    let elem = input.ty.as_ref_type().ok_or_else(not_a_ref)?.elem;
    let shape = host_shape(module, input).ok_or_else(not_a_ref)?;
    let gen = generation
        .generator(module, &input.name, elem)
        .ok_or_else(|| GenerateError::NoGenerator(input.name.clone()))?;
    let mut rng = generation.rng(&input.name);
    generate_tensor(&gen, &input.name, elem, &shape, map, &mut rng)
}

/// The host shape of a ref operand's tensor: the ref's shape, preceded by the
/// owner mesh's block axis sizes (grid then cluster) when the ref is owned.
/// `None` for scalars and refs owned by an unknown mesh.
pub fn host_shape(module: &Module, operand: &Operand) -> Option<Vec<u32>> {
    let ty = operand.ty.as_ref_type()?;
    let mut shape: Vec<u32> = match &ty.owner {
        Some(owner) => module.mesh(owner)?.block_axes().map(|a| a.size).collect(),
        None => vec![],
    };
    shape.extend_from_slice(&ty.shape);
    Some(shape)
}

/// The generator of [`Fallback::ByType`].
pub fn default_generator(elem: ScalarType) -> Generator {
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

/// Edge values of `f32`: zeros, infinities, NaN, subnormals, extremes, ±1.
pub const F32_SPECIALS: [f32; 16] = [
    0.0,
    -0.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    1e-45, // smallest subnormal
    -1e-45,
    f32::from_bits(0x007f_ffff), // largest subnormal
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

/// The state one generator needs to produce consecutive elements.
struct ElementSource<'a> {
    name: &'a str,
    gen: &'a Generator,
    elem: ScalarType,
    /// For `index_into`: the exclusive bound.
    index_bound: Option<u32>,
}

impl ElementSource<'_> {
    fn check(&self) -> Result<(), GenerateError> {
        let (Generator::Uniform { lo, hi } | Generator::NonZero { lo, hi }) = self.gen else {
            return Ok(());
        };
        let (name, lo_text, hi_text) =
            (self.name.to_string(), format!("{lo:?}"), format!("{hi:?}"));
        let (lo_v, hi_v) = (lit_f64(*lo), lit_f64(*hi));
        if self.elem == ScalarType::F32 && !(lo_v.is_finite() && hi_v.is_finite()) {
            return Err(GenerateError::NotFinite {
                name,
                lo: lo_text,
                hi: hi_text,
            });
        }
        let empty = if self.elem == ScalarType::F32 {
            lo_v > hi_v
        } else {
            let (t_lo, t_hi) = type_bounds(self.elem);
            lit_i64(*lo).max(t_lo) > lit_i64(*hi).min(t_hi)
        };
        if empty {
            return Err(GenerateError::EmptyRange {
                name,
                lo: lo_text,
                hi: hi_text,
            });
        }
        if matches!(self.gen, Generator::NonZero { .. }) && lo_v == 0.0 && hi_v == 0.0 {
            return Err(GenerateError::OnlyZero {
                name,
                lo: lo_text,
                hi: hi_text,
            });
        }
        Ok(())
    }

    fn word(&self, i: usize, rng: &mut Rng) -> u32 {
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

    fn uniform(&self, lo: Literal, hi: Literal, rng: &mut Rng) -> u32 {
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
            let (t_lo, t_hi) = type_bounds(self.elem);
            let lo = lit_i64(lo).max(t_lo);
            let hi = lit_i64(hi).min(t_hi);
            word_of_i64(self.elem, rng.range_i64(lo, hi))
        }
    }

    /// The edge values in order, then a random mix of edge values, random
    /// bit patterns and ordinary values.
    fn special(&self, i: usize, rng: &mut Rng) -> u32 {
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
            (_, 0) => *rng.pick(&specials),
            (ScalarType::Bool, _) => rng.below(2) as u32,
            (ScalarType::F32, 1) => rng.next_u32(),
            (ScalarType::F32, _) => ((rng.next_f64() * 200.0 - 100.0) as f32).to_bits(),
            (_, 1) => rng.next_u32(),
            (_, _) => word_of_i64(self.elem, rng.range_i64(-100, 100)),
        }
    }
}

fn index_bound(name: &str, map: &MpmdMap, operand: &str, dim: u32) -> Result<u32, GenerateError> {
    let bad = |reason: &str| GenerateError::BadIndexInto {
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
    match r.shape.get(dim as usize) {
        Some(0) => Err(bad("the dimension is empty")),
        Some(&extent) => Ok(extent),
        None => Err(bad(&format!(
            "the operand has only {} dimension(s)",
            r.shape.len()
        ))),
    }
}

/// Generates the data of input `name` (of element type `elem`, shape `shape`) of `map`.
pub fn generate_tensor(
    gen: &Generator,
    name: &str,
    elem: ScalarType,
    shape: &[u32],
    map: &MpmdMap,
    rng: &mut Rng,
) -> Result<HostTensor, GenerateError> {
    let index_bound = match gen {
        Generator::IndexInto { operand, dim } => Some(index_bound(name, map, operand, *dim)?),
        _ => None,
    };
    let source = ElementSource {
        name,
        gen,
        elem,
        index_bound,
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
    rng: &mut Rng,
) -> Result<Literal, GenerateError> {
    // `special` on a scalar picks one edge value at random rather than always the first.
    if matches!(gen, Generator::Special) {
        let skip = rng.below(8) as usize;
        let tensor = generate_tensor(gen, name, ty, &[skip as u32 + 1], map, rng)?;
        // The tensor holds skip + 1 elements.
        return Ok(tensor
            .get(skip)
            .unwrap_or_else(|| Literal::from_bits(ty, 0)));
    }
    let tensor = generate_tensor(gen, name, ty, &[1], map, rng)?;
    Ok(tensor.get(0).unwrap_or_else(|| Literal::from_bits(ty, 0)))
}

#[cfg(test)]
mod tests;
