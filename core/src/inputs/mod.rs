//! Input generation from a case's generators ([`crate::case::Generator`],
//! the `generate` lines of a file's case section), deterministic for a seed:
//! the one implementation behind `mpmd run`, the conformance runner, the
//! fuzzer and the backends' tests.
//!
//! Every operand gets its own stream ([`Rng::for_stream`]) keyed by the seed,
//! optional leading names (the conformance runner uses the case name) and the
//! operand's name, so adding an input never changes the data of the others.

mod rng;

pub use rng::Rng;

use thiserror::Error;

use crate::case::Generator;
use crate::host::{BufferStart, CallArgs, HostTensor};
use crate::interp::{Charge, MemoryBudget};
use crate::ir::{Literal, Module, MpmdMap, Name, Operand, OperandKind, RefType, ScalarType, Type};

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
    #[error("generator `{generator}` for `{name}`: no `{elem}` value lies in the range; write the smaller bound first")]
    EmptyRange {
        name: String,
        /// The generator as the text format writes it.
        generator: String,
        elem: ScalarType,
    },
    #[error("generator `{generator}` for `{name}`: a bound is not finite; give finite bounds")]
    NotFinite { name: String, generator: String },
    #[error("generator `{generator}` for `{name}`: every `{elem}` value in the range is zero; widen the range")]
    OnlyZero {
        name: String,
        generator: String,
        elem: ScalarType,
    },
    #[error("generator `{generator}` for `{name}`: {reason}")]
    TypeMismatch {
        name: String,
        generator: String,
        reason: String,
    },
    #[error("generated input `{name}`: {elements} elements take {bytes} bytes, more than the limit of {limit} bytes on generated data")]
    TooLarge {
        name: String,
        elements: u64,
        bytes: u64,
        limit: u64,
    },
    /// The tensor fits the limit alone, not beside what the run already
    /// holds (other inputs, residents) on the same [`MemoryBudget`].
    #[error("generated input `{name}`: {elements} elements take {bytes} bytes; with the {in_use} bytes the run already holds (other inputs and residents) that is more than the memory limit of {limit} bytes")]
    OverBudget {
        name: String,
        elements: u64,
        bytes: u64,
        in_use: u64,
        limit: u64,
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

/// Where generated data comes from: the seed, the stream names, the stated
/// generators and what operands without one get.
#[derive(Clone, Debug)]
pub struct Generation<'a> {
    pub seed: u64,
    /// Names that key every stream before the operand's name.
    pub stream: &'a [&'a str],
    /// The stated generators (a case's `generate` lines), by operand or
    /// resident name.
    pub generators: &'a [(Name, Generator)],
    pub fallback: Fallback,
}

impl<'a> Generation<'a> {
    /// `mpmd run` without stated generators: streams keyed by the operand
    /// name alone, defaults by type.
    pub fn with_defaults(seed: u64) -> Generation<'static> {
        Generation {
            seed,
            stream: &[],
            generators: &[],
            fallback: Fallback::ByType,
        }
    }

    /// This generation with `generators` stated (a case's `generate` lines).
    pub fn with_generators(self, generators: &'a [(Name, Generator)]) -> Generation<'a> {
        Generation { generators, ..self }
    }

    /// The stream of operand `name`.
    pub fn rng(&self, name: &str) -> Rng {
        let mut names = self.stream.to_vec();
        names.push(name);
        Rng::for_stream(self.seed, &names)
    }

    /// The stated generator for operand `name`, or the fallback's.
    pub fn generator(&self, name: &str, elem: ScalarType) -> Option<Generator> {
        self.stated(name).cloned().or_else(|| match &self.fallback {
            Fallback::Required => None,
            Fallback::ByType => Some(default_generator(elem)),
            Fallback::Same(g) => Some(g.clone()),
        })
    }

    /// The stated generator for `name`, if any.
    fn stated(&self, name: &str) -> Option<&'a Generator> {
        self.generators
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, g)| g)
    }
}

/// The arguments of every call of `module` ([`Module::effective_calls`]), in
/// order: every input the host uploads ([`BufferStart::Uploaded`]) generated,
/// every scalar from the call or else generated. Generated data is bounded by
/// [`DEFAULT_GENERATED_BYTES`] per input.
pub fn call_args(module: &Module, generation: &Generation) -> Result<Vec<CallArgs>, GenerateError> {
    let mut all = Vec::new();
    for call in module.effective_calls() {
        let map = module
            .map(&call.map)
            .ok_or_else(|| GenerateError::UnknownMap(call.map.clone()))?;
        let mut args = CallArgs::default();
        for input in uploaded_inputs(map) {
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
                        .generator(&scalar.name, ty)
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

/// The inputs of `map` whose data the host uploads for each call
/// ([`BufferStart::Uploaded`]): not resident, not `zeroed`, not semaphores.
pub fn uploaded_inputs(map: &MpmdMap) -> impl Iterator<Item = &Operand> {
    map.inputs
        .iter()
        .filter(|x| BufferStart::of(OperandKind::Input, x) == Some(BufferStart::Uploaded))
}

/// Default bound on the bytes of one generated tensor: the interpreter's
/// default memory limit, so that generation refuses what no default run
/// could hold before it allocates.
pub const DEFAULT_GENERATED_BYTES: u64 = crate::interp::DEFAULT_MEMORY_LIMIT;

/// Whether the stated generator (a case's `generate` line) can make
/// elements of type `elem` for `name`: every error [`generate_input`] would
/// report about the generator itself (not about `index_into`'s operand, or
/// sizes), and float bounds for an integer type, a slip (`uniform(0.0,
/// 1.0)` for a `u32` gives only 0 and 1) that a generator shared by every
/// type ([`Fallback::Same`], the fuzzer's) may make on purpose. Validation
/// calls it on each `generate` line (E0074), so a case is refused before it
/// runs.
pub fn check_generator(
    generator: &Generator,
    name: &str,
    elem: ScalarType,
) -> Result<(), GenerateError> {
    if let Generator::Uniform { lo, hi } | Generator::NonZero { lo, hi } = generator {
        if matches!(elem, ScalarType::I32 | ScalarType::U32)
            && (lo.ty().is_float() || hi.ty().is_float())
        {
            let form = if matches!(generator, Generator::NonZero { .. }) {
                "nonzero"
            } else {
                "uniform"
            };
            return Err(GenerateError::TypeMismatch {
                name: name.into(),
                generator: crate::text::print_generator(generator),
                reason: format!(
                    "the bounds are floats, and `{elem}` takes integers; write integer bounds such as `{form}(0, 10)`"
                ),
            });
        }
    }
    ElementSource::new(generator, name, elem, None).map(|_| ())
}

/// Generates the data of `input` (a ref) of `map`, with its host shape, at
/// most [`DEFAULT_GENERATED_BYTES`].
pub fn generate_input(
    module: &Module,
    map: &MpmdMap,
    input: &Operand,
    generation: &Generation,
) -> Result<HostTensor, GenerateError> {
    generate_input_within(module, map, input, generation, DEFAULT_GENERATED_BYTES)
}

/// [`generate_input`] with a bound of `limit_bytes` on the tensor, refused
/// with [`GenerateError::TooLarge`] before anything is allocated.
pub fn generate_input_within(
    module: &Module,
    map: &MpmdMap,
    input: &Operand,
    generation: &Generation,
    limit_bytes: u64,
) -> Result<HostTensor, GenerateError> {
    let budget = MemoryBudget::new(limit_bytes);
    generate_input_charged(module, map, input, generation, &budget).map(|(tensor, _)| tensor)
}

/// [`generate_input`] charged to `budget`, the run's account of host
/// memory: refused with [`GenerateError::TooLarge`] or
/// [`GenerateError::OverBudget`] before anything is allocated. The charge
/// lives as long as the caller keeps it (drop it with the tensor).
pub fn generate_input_charged(
    module: &Module,
    map: &MpmdMap,
    input: &Operand,
    generation: &Generation,
    budget: &MemoryBudget,
) -> Result<(HostTensor, Charge), GenerateError> {
    let not_a_ref = || GenerateError::NotARef(input.name.clone());
    let elem = input.ty.as_ref_type().ok_or_else(not_a_ref)?.elem;
    let shape = host_shape(module, input).ok_or_else(not_a_ref)?;
    let gen = generation
        .generator(&input.name, elem)
        .ok_or_else(|| GenerateError::NoGenerator(input.name.clone()))?;
    let index_bound = match &gen {
        Generator::IndexInto { operand, dim } => {
            let found = map.operand(operand).map(|(_, o)| o.ty.as_ref_type());
            Some(index_bound(&input.name, operand, *dim, found)?)
        }
        _ => None,
    };
    let mut rng = generation.rng(&input.name);
    generate_words(
        &gen,
        &input.name,
        elem,
        &shape,
        index_bound,
        budget,
        &mut rng,
    )
}

/// The data of every device-resident ref that `generation` states a
/// generator for (only a stated generator: a resident without one starts as its
/// declaration says, [`crate::host::resident_starts_zeroed`]), in module
/// order, with its host shape; each at most `limit_bytes`. Callers hand each
/// to [`crate::Backend::set_resident`] before the first call. `index_into`
/// names an operand of a map or a resident.
pub fn resident_data(
    module: &Module,
    generation: &Generation,
    limit_bytes: u64,
) -> Result<Vec<(Name, HostTensor)>, GenerateError> {
    let mut all = Vec::new();
    for resident in &module.residents {
        // Each alone within the limit.
        let budget = MemoryBudget::new(limit_bytes);
        if let Some((tensor, _)) = generate_resident(module, resident, generation, &budget)? {
            all.push((resident.name.clone(), tensor));
        }
    }
    Ok(all)
}

/// [`resident_data`] charged to `budget`, all residents together: each
/// tensor comes with its charge.
pub fn resident_data_charged(
    module: &Module,
    generation: &Generation,
    budget: &MemoryBudget,
) -> Result<Vec<(Name, HostTensor, Charge)>, GenerateError> {
    let mut all = Vec::new();
    for resident in &module.residents {
        if let Some((tensor, charge)) = generate_resident(module, resident, generation, budget)? {
            all.push((resident.name.clone(), tensor, charge));
        }
    }
    Ok(all)
}

/// The data of `resident` when `generation` states a generator for it.
fn generate_resident(
    module: &Module,
    resident: &crate::ir::Resident,
    generation: &Generation,
    budget: &MemoryBudget,
) -> Result<Option<(HostTensor, Charge)>, GenerateError> {
    let Some(gen) = generation.stated(&resident.name) else {
        return Ok(None);
    };
    let not_a_ref = || GenerateError::NotARef(resident.name.clone());
    let shape = crate::host::host_shape(&module.meshes, &resident.ty).ok_or_else(not_a_ref)?;
    let index_bound = match gen {
        Generator::IndexInto { operand, dim } => {
            // As validation looks it up: an operand of a map, else a resident.
            let found = module
                .maps
                .iter()
                .find_map(|m| m.operand(operand).map(|(_, o)| o.ty.as_ref_type()))
                .or_else(|| module.resident(operand).map(|r| Some(&r.ty)));
            Some(index_bound(&resident.name, operand, *dim, found)?)
        }
        _ => None,
    };
    let mut rng = generation.rng(&resident.name);
    generate_words(
        gen,
        &resident.name,
        resident.ty.elem,
        &shape,
        index_bound,
        budget,
        &mut rng,
    )
    .map(Some)
}

/// The host shape of a ref operand's tensor ([`crate::host::host_shape`]).
/// `None` for scalars and refs owned by an unknown mesh.
pub fn host_shape(module: &Module, operand: &Operand) -> Option<Vec<u32>> {
    crate::host::host_shape(&module.meshes, operand.ty.as_ref_type()?)
}

/// The generator of [`Fallback::ByType`].
pub fn default_generator(elem: ScalarType) -> Generator {
    match elem {
        ScalarType::F32 | ScalarType::F16 | ScalarType::BF16 => Generator::Uniform {
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

/// Edge values of `f16`, as bits: zeros, infinities, NaN, subnormals,
/// extremes, ±1, and values next to rounding boundaries.
pub const F16_SPECIALS: [u16; 18] = [
    0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, // ±0, ±inf, NaN
    0x0001, 0x8001, 0x03ff, 0x0400, // smallest and largest subnormal, smallest normal
    0x7bff, 0xfbff, // ±65504, the largest finite
    0x3c00, 0xbc00, 0x3800, // ±1, 0.5
    0x3c01, // 1 + 2^-10, the next after 1
    0x6800, 0x67ff, // 2048 (integers stop being exact past it), 2047
    0x1400, // 2^-10
];

/// Edge values of `bf16`, as bits.
pub const BF16_SPECIALS: [u16; 18] = [
    0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, // ±0, ±inf, NaN
    0x0001, 0x8001, 0x007f, 0x0080, // smallest and largest subnormal, smallest normal
    0x7f7f, 0xff7f, // the largest finite, ±3.39e38
    0x3f80, 0xbf80, 0x3f00, // ±1, 0.5
    0x3f81, // 1 + 2^-7, the next after 1
    0x4f00, 0xcf00, // ±2^31 (just out of i32 range)
    0x4380, // 256 (integers stop being exact past it)
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
        Literal::F32(_) | Literal::F16(_) | Literal::BF16(_) => {
            f64::from(l.as_f32().unwrap_or(f32::NAN))
        }
        Literal::I32(v) => f64::from(v),
        Literal::U32(v) => f64::from(v),
        Literal::Bool(v) => f64::from(u8::from(v)),
    }
}

fn lit_i64(l: Literal) -> i64 {
    match l {
        Literal::F32(_) | Literal::F16(_) | Literal::BF16(_) => l.as_f32().unwrap_or(0.0) as i64,
        Literal::I32(v) => i64::from(v),
        Literal::U32(v) => i64::from(v),
        Literal::Bool(v) => i64::from(v),
    }
}

fn word_of_i64(elem: ScalarType, v: i64) -> u32 {
    match elem {
        ScalarType::F32 => (v as f32).to_bits(),
        ScalarType::F16 | ScalarType::BF16 => {
            u32::from(crate::numerics::from_integer(elem, v).unwrap_or(0))
        }
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
        ScalarType::F32 | ScalarType::F16 | ScalarType::BF16 => (i64::MIN, i64::MAX),
    }
}

/// A literal converted to another scalar type's word (as a value, not bits).
/// Lossy (saturating, truncating); [`constant_word`] is the exact form.
pub fn convert_literal(l: Literal, elem: ScalarType) -> u32 {
    if l.ty() == elem {
        return l.to_bits();
    }
    match elem {
        ScalarType::F32 | ScalarType::F16 | ScalarType::BF16 => float_word(elem, lit_f64(l)),
        _ => word_of_i64(elem, lit_i64(l)),
    }
}

/// The word of `constant(l)` for an element of type `elem`: the literal's
/// own type, or an integer literal whose value the type holds exactly; else
/// why not (`constant(nan)` or `constant(1.0)` for an `i32`, `-1` for a
/// `u32`, `16777217` for an `f32`, `2` for a `bool`, `true` for an `i32`).
pub fn constant_word(l: Literal, elem: ScalarType) -> Result<u32, String> {
    if l.ty() == elem {
        return Ok(l.to_bits());
    }
    let value = lit_f64(l);
    let fits = match (l, elem) {
        // Only an exact integer value converts; a float or bool literal
        // given for another type is a slip, never meant.
        (Literal::Bool(_) | Literal::F32(_) | Literal::F16(_) | Literal::BF16(_), _) => false,
        (_, ScalarType::F32 | ScalarType::F16 | ScalarType::BF16) => {
            float_value(elem, float_word(elem, value)) == value
        }
        (_, _) => {
            let (lo, hi) = type_bounds(elem);
            value.is_finite() && value.fract() == 0.0 && (lo as f64..=hi as f64).contains(&value)
        }
    };
    if fits {
        Ok(match elem {
            ScalarType::F32 | ScalarType::F16 | ScalarType::BF16 => float_word(elem, value),
            _ => word_of_i64(elem, value as i64),
        })
    } else {
        Err(format!(
            "`{}` has no exact value of type `{elem}`; write one such as `{}`",
            crate::text::print_literal(l),
            crate::text::print_literal(Literal::from_bits(elem, 0)),
        ))
    }
}

/// The bits of the float type `elem` nearest `v` (rounded once).
fn float_word(elem: ScalarType, v: f64) -> u32 {
    match crate::numerics::from_f64(elem, v) {
        Some(bits) => u32::from(bits),
        None => (v as f32).to_bits(),
    }
}

/// The value of the float type `elem` stored as `bits`.
fn float_value(elem: ScalarType, bits: u32) -> f64 {
    f64::from(Literal::from_bits(elem, bits).as_f32().unwrap_or(f32::NAN))
}

/// Draws of a `nonzero` generator before it takes the range's non-zero value
/// nearest its low end: a range where zero is likely still gets random data,
/// and no range can make generation loop.
const NONZERO_DRAWS: usize = 64;

/// A checked generator: everything it needs to produce consecutive
/// elements, each in a bounded number of steps.
struct ElementSource<'a> {
    gen: &'a Generator,
    elem: ScalarType,
    /// For `index_into`: the exclusive bound.
    index_bound: Option<u32>,
    /// `constant`: the element's word.
    constant: u32,
    /// `uniform` and `nonzero` on integers and bools: the range clamped to
    /// the type, inclusive.
    int_range: (i64, i64),
    /// `nonzero`: a non-zero value of the range, taken when the draws found none.
    nonzero_fallback: u32,
}

impl<'a> ElementSource<'a> {
    /// Checks `gen` for an element of type `elem`: every error a generator
    /// can have is found here, before any element is made.
    fn new(
        gen: &'a Generator,
        name: &str,
        elem: ScalarType,
        index_bound: Option<u32>,
    ) -> Result<Self, GenerateError> {
        let mut source = ElementSource {
            gen,
            elem,
            index_bound,
            constant: 0,
            int_range: (0, 0),
            nonzero_fallback: 0,
        };
        let generator = || crate::text::print_generator(gen);
        if let Generator::Constant(l) = gen {
            source.constant =
                constant_word(*l, elem).map_err(|reason| GenerateError::TypeMismatch {
                    name: name.into(),
                    generator: generator(),
                    reason,
                })?;
        }
        let (Generator::Uniform { lo, hi } | Generator::NonZero { lo, hi }) = gen else {
            return Ok(source);
        };
        let nonzero = matches!(gen, Generator::NonZero { .. });
        if matches!(lo, Literal::Bool(_)) != matches!(hi, Literal::Bool(_))
            || (elem != ScalarType::Bool && matches!(lo, Literal::Bool(_)))
        {
            return Err(GenerateError::TypeMismatch {
                name: name.into(),
                generator: generator(),
                reason: format!("the bounds are not `{elem}` values; write `{elem}` literals"),
            });
        }
        let (lo_v, hi_v) = (lit_f64(*lo), lit_f64(*hi));
        if !(lo_v.is_finite() && hi_v.is_finite()) {
            return Err(GenerateError::NotFinite {
                name: name.into(),
                generator: generator(),
            });
        }
        let empty = || GenerateError::EmptyRange {
            name: name.into(),
            generator: generator(),
            elem,
        };
        let only_zero = || GenerateError::OnlyZero {
            name: name.into(),
            generator: generator(),
            elem,
        };
        if elem.is_float() {
            if lo_v > hi_v {
                return Err(empty());
            }
            // The range is [lo, hi) (just lo when lo == hi): its non-zero
            // values are lo itself unless it is zero, else the smallest
            // positive f32 when it lies below hi.
            if nonzero {
                // The smallest positive value of the type is bits 1 in every format.
                let smallest = float_value(elem, 1);
                source.nonzero_fallback =
                    if lo_v != 0.0 && float_value(elem, float_word(elem, lo_v)) != 0.0 {
                        float_word(elem, lo_v)
                    } else if hi_v > smallest {
                        1
                    } else {
                        return Err(only_zero());
                    };
            }
        } else {
            let (t_lo, t_hi) = type_bounds(elem);
            let (lo_i, hi_i) = (lit_i64(*lo).max(t_lo), lit_i64(*hi).min(t_hi));
            if lo_i > hi_i {
                return Err(empty());
            }
            source.int_range = (lo_i, hi_i);
            if nonzero {
                source.nonzero_fallback = match (lo_i, hi_i) {
                    (0, 0) => return Err(only_zero()),
                    (0, hi) => word_of_i64(elem, hi.min(1)),
                    (lo, _) => word_of_i64(elem, lo),
                };
            }
        }
        Ok(source)
    }

    fn word(&self, i: usize, rng: &mut Rng) -> u32 {
        match self.gen {
            Generator::Constant(_) => self.constant,
            Generator::Iota => word_of_i64(self.elem, i as i64),
            Generator::IndexInto { .. } => {
                let bound = self.index_bound.unwrap_or(1).max(1);
                word_of_i64(self.elem, rng.below(u64::from(bound)) as i64)
            }
            Generator::Uniform { lo, hi } => self.uniform(*lo, *hi, rng),
            Generator::NonZero { lo, hi } => (0..NONZERO_DRAWS)
                .map(|_| self.uniform(*lo, *hi, rng))
                .find(|&w| {
                    if self.elem.is_float() {
                        float_value(self.elem, w) != 0.0
                    } else {
                        w != 0
                    }
                })
                .unwrap_or(self.nonzero_fallback),
            Generator::Special => self.special(i, rng),
        }
    }

    fn uniform(&self, lo: Literal, hi: Literal, rng: &mut Rng) -> u32 {
        if self.elem.is_float() {
            let (lo, hi) = (lit_f64(lo), lit_f64(hi));
            let v = float_word(self.elem, lo + (hi - lo) * rng.next_f64());
            // Rounding may land on `hi`; the range is half-open.
            if float_value(self.elem, v) >= hi && hi > lo {
                float_word(self.elem, lo)
            } else {
                v
            }
        } else {
            let (lo, hi) = self.int_range;
            word_of_i64(self.elem, rng.range_i64(lo, hi))
        }
    }

    /// The edge values in order, then a random mix of edge values, random
    /// bit patterns and ordinary values.
    fn special(&self, i: usize, rng: &mut Rng) -> u32 {
        let specials: Vec<u32> = match self.elem {
            ScalarType::F32 => F32_SPECIALS.iter().map(|v| v.to_bits()).collect(),
            ScalarType::F16 => F16_SPECIALS.iter().map(|&v| u32::from(v)).collect(),
            ScalarType::BF16 => BF16_SPECIALS.iter().map(|&v| u32::from(v)).collect(),
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
            (ScalarType::F16 | ScalarType::BF16, 1) => rng.next_u32() & 0xffff,
            (elem, _) if elem.is_float() => float_word(elem, rng.next_f64() * 200.0 - 100.0),
            (_, 1) => rng.next_u32(),
            (_, _) => word_of_i64(self.elem, rng.range_i64(-100, 100)),
        }
    }
}

/// The exclusive bound of `index_into(operand, dim)` in the generator of
/// `name`; `found` is the operand's ref type (`Some(None)`: a scalar, `None`:
/// no such operand).
fn index_bound(
    name: &str,
    operand: &str,
    dim: u32,
    found: Option<Option<&RefType>>,
) -> Result<u32, GenerateError> {
    let bad = |reason: &str| GenerateError::BadIndexInto {
        name: name.into(),
        operand: operand.into(),
        dim,
        reason: reason.into(),
    };
    let r = found
        .ok_or_else(|| bad("no such operand in the map"))?
        .ok_or_else(|| bad("the operand is a scalar"))?;
    match r.shape.get(dim as usize) {
        Some(0) => Err(bad("the dimension is empty")),
        Some(&extent) => Ok(extent),
        None => Err(bad(&format!(
            "the operand has only {} dimension(s)",
            r.shape.len()
        ))),
    }
}

/// Generates the data of input `name` (of element type `elem`, shape
/// `shape`) of `map`, at most [`DEFAULT_GENERATED_BYTES`].
pub fn generate_tensor(
    gen: &Generator,
    name: &str,
    elem: ScalarType,
    shape: &[u32],
    map: &MpmdMap,
    rng: &mut Rng,
) -> Result<HostTensor, GenerateError> {
    let index_bound = match gen {
        Generator::IndexInto { operand, dim } => {
            let found = map.operand(operand).map(|(_, o)| o.ty.as_ref_type());
            Some(index_bound(name, operand, *dim, found)?)
        }
        _ => None,
    };
    let budget = MemoryBudget::new(DEFAULT_GENERATED_BYTES);
    generate_words(gen, name, elem, shape, index_bound, &budget, rng).map(|(tensor, _)| tensor)
}

/// Generates packed words (two 16-bit elements a word), charged to
/// `budget` before anything is allocated.
fn generate_words(
    gen: &Generator,
    name: &str,
    elem: ScalarType,
    shape: &[u32],
    index_bound: Option<u32>,
    budget: &MemoryBudget,
    rng: &mut Rng,
) -> Result<(HostTensor, Charge), GenerateError> {
    let source = ElementSource::new(gen, name, elem, index_bound)?;
    let limit = budget.limit();
    let elements = crate::host::element_count(shape);
    let bytes = elements.and_then(|n| crate::host::word_bytes(elem, n));
    let too_large = || GenerateError::TooLarge {
        name: name.into(),
        elements: elements.unwrap_or(u64::MAX),
        bytes: bytes.unwrap_or(u64::MAX),
        limit,
    };
    let (len, bytes) = match (elements.and_then(|n| usize::try_from(n).ok()), bytes) {
        (Some(len), Some(bytes)) if bytes <= limit => (len, bytes),
        _ => return Err(too_large()),
    };
    let charge = budget
        .charge(bytes, || format!("generated input `{name}`"))
        .map_err(|over| GenerateError::OverBudget {
            name: name.into(),
            elements: len as u64,
            bytes,
            in_use: over.in_use,
            limit,
        })?;
    let mut element = (0..len).map(|i| source.word(i, rng));
    let words: Vec<u32> = if elem.is_16bit() {
        let mut words = Vec::with_capacity(crate::host::words_for(elem, len as u64) as usize);
        while let Some(low) = element.next() {
            let high = element.next().unwrap_or(0);
            words.push((low & 0xffff) | ((high & 0xffff) << 16));
        }
        words
    } else {
        element.collect()
    };
    Ok((HostTensor::from_packed(elem, shape.to_vec(), words), charge))
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
