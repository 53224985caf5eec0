//! Host-side data: what users pass in and get back from a call.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::backend::RunError;
use crate::ir::{
    Literal, MemorySpace, Mesh, Name, Operand, OperandKind, RefType, Resident, ScalarType,
};

/// A host array: elements of their own size (4 bytes; 2 for `f16` and
/// `bf16`), kept as the raw bits every backend uploads and compares (`bool`
/// is a word holding 0 or 1). The storage is little-endian 32-bit words:
/// one element a word, or two 16-bit elements a word (element `2k` in the
/// low half), so [`HostTensor::bytes`] is exactly what a device buffer holds.
/// The shape always holds exactly [`HostTensor::len`] elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostTensor {
    elem: ScalarType,
    shape: Vec<u32>,
    len: usize,
    /// Packed elements; the unused half of a last 16-bit word is zero.
    words: Words,
}

/// Packed words held outside a [`HostTensor`] and lent to it
/// ([`HostTensor::from_shared_words`]): a caller's array read where it lies
/// instead of copied. The words must not change while a tensor holds them.
pub trait SharedWords: Send + Sync + std::fmt::Debug {
    fn words(&self) -> &[u32];
}

/// A tensor's words: its own, or lent.
#[derive(Clone, Debug)]
enum Words {
    Owned(Vec<u32>),
    Shared(Arc<dyn SharedWords>),
}

impl Words {
    fn as_slice(&self) -> &[u32] {
        match self {
            Words::Owned(w) => w,
            Words::Shared(w) => w.words(),
        }
    }
}

impl From<Vec<u32>> for Words {
    fn from(words: Vec<u32>) -> Self {
        Words::Owned(words)
    }
}

impl PartialEq for Words {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Words {}

/// A shape and a number of elements that do not agree.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("a host tensor of shape {shape:?} holds {expected} elements, but {got} were given")]
    Mismatch {
        shape: Vec<u32>,
        expected: u64,
        got: usize,
    },
    #[error("a host tensor of shape {shape:?} has more elements than this machine can address")]
    TooLarge { shape: Vec<u32> },
    #[error("{got} bytes do not hold whole `{elem}` elements ({size} bytes each)")]
    PartialElement {
        elem: ScalarType,
        size: u32,
        got: usize,
    },
}

/// Elements of `shape`, checked, and addressable on this machine.
fn addressable_count(shape: &[u32]) -> Result<usize, ShapeError> {
    element_count(shape)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| ShapeError::TooLarge {
            shape: shape.to_vec(),
        })
}

fn check_count(shape: &[u32], got: usize) -> Result<(), ShapeError> {
    let expected = addressable_count(shape)?;
    if expected != got {
        return Err(ShapeError::Mismatch {
            shape: shape.to_vec(),
            expected: expected as u64,
            got,
        });
    }
    Ok(())
}

/// The 32-bit words that hold `elements` elements of `elem` packed: 16-bit
/// floats two a word (element `2k` in the low half), every other type one a
/// word. The one rule for the size of a buffer in words: host tensors, the
/// interpreter, both backends, input generation, the CLI and the Python
/// package call it. It cannot overflow (the result is at most `elements`);
/// a caller that needs bytes or a `usize` converts with checked arithmetic
/// ([`word_bytes`], `usize::try_from`).
pub fn words_for(elem: ScalarType, elements: u64) -> u64 {
    if elem.is_16bit() {
        elements.div_ceil(2)
    } else {
        elements
    }
}

/// The bytes of the words that hold `elements` elements of `elem`
/// (`4 * words_for`), or `None` past a `u64`.
pub fn word_bytes(elem: ScalarType, elements: u64) -> Option<u64> {
    words_for(elem, elements).checked_mul(4)
}

/// [`words_for`] of an in-memory count (never more than `len`, so the
/// conversions are exact).
fn words_of_len(elem: ScalarType, len: usize) -> usize {
    words_for(elem, len as u64) as usize
}

impl HostTensor {
    /// A tensor of `shape` holding one element per entry of `bits` (a 16-bit
    /// float's bits in the low half; the high half is ignored): an error
    /// unless the shape holds exactly that many elements.
    pub fn new(elem: ScalarType, shape: Vec<u32>, bits: Vec<u32>) -> Result<Self, ShapeError> {
        check_count(&shape, bits.len())?;
        Ok(Self::from_bits_unchecked(elem, shape, bits))
    }

    fn from_bits_unchecked(elem: ScalarType, shape: Vec<u32>, bits: Vec<u32>) -> Self {
        let len = bits.len();
        let words = if elem.is_16bit() {
            bits.chunks(2)
                .map(|pair| (pair[0] & 0xffff) | (pair.get(1).map_or(0, |h| h & 0xffff) << 16))
                .collect()
        } else {
            bits
        };
        HostTensor {
            elem,
            shape,
            len,
            words: words.into(),
        }
    }

    /// A tensor of `shape` from the bytes a device buffer holds
    /// (little-endian, [`ScalarType::byte_size`] bytes an element).
    pub fn from_bytes(elem: ScalarType, shape: Vec<u32>, bytes: &[u8]) -> Result<Self, ShapeError> {
        let size = elem.byte_size() as usize;
        if !bytes.len().is_multiple_of(size) {
            return Err(ShapeError::PartialElement {
                elem,
                size: elem.byte_size(),
                got: bytes.len(),
            });
        }
        let len = bytes.len() / size;
        check_count(&shape, len)?;
        let words = bytes
            .chunks(4)
            .map(|c| {
                let mut word = [0u8; 4];
                word[..c.len()].copy_from_slice(c);
                u32::from_le_bytes(word)
            })
            .collect();
        Ok(HostTensor {
            elem,
            shape,
            len,
            words: Words::Owned(words),
        })
    }

    /// A tensor of `shape` from packed words as [`HostTensor::words`] gives
    /// them (what a device buffer of `len` elements holds, read as words).
    pub fn from_words(
        elem: ScalarType,
        shape: Vec<u32>,
        mut words: Vec<u32>,
    ) -> Result<Self, ShapeError> {
        let len = addressable_count(&shape)?;
        let needed = words_of_len(elem, len);
        if words.len() != needed {
            let got = if elem.is_16bit() {
                words.len() * 2
            } else {
                words.len()
            };
            return Err(ShapeError::Mismatch {
                shape,
                expected: len as u64,
                got,
            });
        }
        if elem.is_16bit() && len % 2 == 1 {
            if let Some(last) = words.last_mut() {
                *last &= 0xffff;
            }
        }
        Ok(HostTensor {
            elem,
            shape,
            len,
            words: words.into(),
        })
    }

    /// A tensor of `shape` over words held elsewhere, read where they lie
    /// (a caller's array): exactly the words [`HostTensor::words`] would
    /// hold, the unused half of a last 16-bit word zero, or `None` (the
    /// caller copies instead, [`HostTensor::from_bytes`]).
    pub fn from_shared_words(
        elem: ScalarType,
        shape: Vec<u32>,
        shared: Arc<dyn SharedWords>,
    ) -> Option<Self> {
        let len = addressable_count(&shape).ok()?;
        let words = shared.words();
        let odd_half = elem.is_16bit() && len % 2 == 1;
        if words.len() != words_of_len(elem, len)
            || (odd_half && words.last().is_some_and(|w| w >> 16 != 0))
        {
            return None;
        }
        Some(HostTensor {
            elem,
            shape,
            len,
            words: Words::Shared(shared),
        })
    }

    /// The packed words, the tensor's own allocation where it has one (no
    /// copy), else a copy of the words it was lent.
    pub fn into_words(self) -> Vec<u32> {
        match self.words {
            Words::Owned(words) => words,
            Words::Shared(shared) => shared.words().to_vec(),
        }
    }

    /// From packed words the crate produced itself for `shape` (a buffer of
    /// exactly [`words_for`] words, so its element count is addressable);
    /// the length comes from the shape.
    pub(crate) fn from_packed(elem: ScalarType, shape: Vec<u32>, words: Vec<u32>) -> Self {
        let len = addressable_count(&shape).unwrap_or(usize::MAX);
        debug_assert_eq!(words.len(), words_of_len(elem, len));
        HostTensor {
            elem,
            shape,
            len,
            words: words.into(),
        }
    }

    /// A tensor of zeros; `TooLarge` when the shape's element count does not
    /// fit this machine's addresses.
    pub fn zeros(elem: ScalarType, shape: Vec<u32>) -> Result<Self, ShapeError> {
        let len = addressable_count(&shape)?;
        Ok(HostTensor {
            elem,
            shape,
            len,
            words: vec![0; words_of_len(elem, len)].into(),
        })
    }

    /// `values` in `shape`, which must hold `values.len()` elements (checked
    /// where the tensor is used, by [`CallArgs::input`]; [`HostTensor::new`]
    /// checks at once).
    pub fn from_f32(shape: Vec<u32>, values: &[f32]) -> Self {
        Self::from_bits_unchecked(
            ScalarType::F32,
            shape,
            values.iter().map(|v| v.to_bits()).collect(),
        )
    }

    pub fn from_i32(shape: Vec<u32>, values: &[i32]) -> Self {
        Self::from_bits_unchecked(
            ScalarType::I32,
            shape,
            values.iter().map(|&v| v as u32).collect(),
        )
    }

    pub fn from_u32(shape: Vec<u32>, values: &[u32]) -> Self {
        Self::from_bits_unchecked(ScalarType::U32, shape, values.to_vec())
    }

    pub fn from_f16(shape: Vec<u32>, values: &[half::f16]) -> Self {
        Self::from_bits_unchecked(
            ScalarType::F16,
            shape,
            values.iter().map(|v| u32::from(v.to_bits())).collect(),
        )
    }

    pub fn from_bf16(shape: Vec<u32>, values: &[half::bf16]) -> Self {
        Self::from_bits_unchecked(
            ScalarType::BF16,
            shape,
            values.iter().map(|v| u32::from(v.to_bits())).collect(),
        )
    }

    /// Whether the shape holds exactly [`HostTensor::len`] elements (the typed
    /// constructors defer this check to [`CallArgs::input`]).
    pub fn check(&self) -> Result<(), ShapeError> {
        check_count(&self.shape, self.len)
    }

    pub fn elem(&self) -> ScalarType {
        self.elem
    }

    pub fn shape(&self) -> &[u32] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The packed storage: for 32-bit types, element `i` is word `i`; for
    /// 16-bit types, word `k` holds elements `2k` (low half) and `2k + 1`.
    pub fn words(&self) -> &[u32] {
        self.words.as_slice()
    }

    /// The elements as a device buffer holds them (little-endian,
    /// [`ScalarType::byte_size`] bytes an element, no padding).
    pub fn bytes(&self) -> Vec<u8> {
        let mut bytes: Vec<u8> = self.words().iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes.truncate(self.len * self.elem.byte_size() as usize);
        bytes
    }

    /// The bits of element `i` (a 16-bit float in the low half); `None` past the end.
    pub fn bits(&self, i: usize) -> Option<u32> {
        if i >= self.len {
            return None;
        }
        Some(if self.elem.is_16bit() {
            (self.words()[i / 2] >> (16 * (i % 2))) & 0xffff
        } else {
            self.words()[i]
        })
    }

    /// The bits of every element, one `u32` each (16-bit floats in the low half).
    pub fn to_bits(&self) -> Vec<u32> {
        (0..self.len).filter_map(|i| self.bits(i)).collect()
    }

    /// The values of a float tensor as `f32` (exact for `f16` and `bf16`);
    /// other types' bits are read as `f32` bits.
    pub fn to_f32(&self) -> Vec<f32> {
        (0..self.len)
            .filter_map(|i| self.bits(i))
            .map(|b| {
                Literal::from_bits(self.elem, b)
                    .as_f32()
                    .unwrap_or(f32::from_bits(b))
            })
            .collect()
    }

    pub fn to_i32(&self) -> Vec<i32> {
        self.to_bits().into_iter().map(|w| w as i32).collect()
    }

    pub fn to_u32(&self) -> Vec<u32> {
        self.to_bits()
    }

    /// The elements' low 16 bits as `f16` values.
    pub fn to_f16(&self) -> Vec<half::f16> {
        self.to_bits()
            .into_iter()
            .map(|b| half::f16::from_bits(b as u16))
            .collect()
    }

    /// The elements' low 16 bits as `bf16` values.
    pub fn to_bf16(&self) -> Vec<half::bf16> {
        self.to_bits()
            .into_iter()
            .map(|b| half::bf16::from_bits(b as u16))
            .collect()
    }

    /// Element `i` (row-major) as a typed value; `None` past the end.
    pub fn get(&self, i: usize) -> Option<Literal> {
        self.bits(i).map(|b| Literal::from_bits(self.elem, b))
    }

    /// The same elements under another shape with as many elements.
    pub fn reshaped(mut self, shape: Vec<u32>) -> Result<Self, ShapeError> {
        check_count(&shape, self.len)?;
        self.shape = shape;
        Ok(self)
    }
}

/// Everything one call needs from the host.
#[derive(Clone, Debug, Default)]
pub struct CallArgs {
    /// Data for each input that is not bound to a device-resident ref.
    pub inputs: BTreeMap<Name, HostTensor>,
    /// A value for each scalar parameter.
    pub scalars: BTreeMap<Name, Literal>,
}

impl CallArgs {
    /// The tensor of input `name`, which fills a buffer of `len` elements of
    /// type `elem`: every backend's check that the call gives it, with that
    /// many elements of that type (a tensor of another type would have its
    /// bits reinterpreted, which is never what the caller meant).
    pub fn input(&self, name: &str, elem: ScalarType, len: u64) -> Result<&HostTensor, RunError> {
        let tensor = self
            .inputs
            .get(name)
            .ok_or_else(|| RunError::BadArguments(format!("missing input `{name}`")))?;
        if tensor.elem != elem {
            return Err(RunError::BadArguments(format!(
                "input `{name}` holds `{}` elements; the map declares `{elem}`",
                tensor.elem
            )));
        }
        tensor
            .check()
            .map_err(|e| RunError::BadArguments(format!("input `{name}`: {e}")))?;
        if tensor.len() as u64 != len {
            return Err(RunError::BadArguments(format!(
                "input `{name}` has {} elements; the map declares {len}",
                tensor.len()
            )));
        }
        Ok(tensor)
    }

    /// The value of scalar parameter `name` of type `ty` ([`scalar`]).
    pub fn scalar(&self, name: &str, ty: ScalarType) -> Result<Literal, RunError> {
        scalar(&self.scalars, name, ty)
    }
}

/// The value of scalar parameter `name`, which has type `ty`, in a call's
/// `scalars`: every backend's check that the call gives it, of exactly that
/// type (a value of another type would have its bits reinterpreted).
pub fn scalar(
    scalars: &BTreeMap<Name, Literal>,
    name: &str,
    ty: ScalarType,
) -> Result<Literal, RunError> {
    let value = scalars
        .get(name)
        .ok_or_else(|| RunError::BadArguments(format!("missing scalar `{name}` ({ty})")))?;
    if value.ty() != ty {
        return Err(RunError::BadArguments(format!(
            "scalar `{name}` is `{ty}`, the call passes a `{}`",
            value.ty()
        )));
    }
    Ok(*value)
}

/// Every backend's check that the resident `name` a backend holds (`elem`
/// elements, `len` of them) fits the map `map` that binds it as `declared_elem`
/// elements, `declared_len` of them: a resident of another type would have
/// its bits reinterpreted, and one of another length would be resized or
/// written past its end.
pub fn check_resident(
    name: &str,
    map: &str,
    (elem, len): (ScalarType, u64),
    (declared_elem, declared_len): (ScalarType, u64),
) -> Result<(), RunError> {
    if elem != declared_elem {
        return Err(RunError::BadArguments(format!(
            "resident `{name}` holds `{elem}` elements; map `{map}` declares `{declared_elem}`"
        )));
    }
    if len != declared_len {
        return Err(RunError::BadArguments(format!(
            "resident `{name}` holds {len} elements; map `{map}` declares {declared_len}"
        )));
    }
    Ok(())
}

/// A number a user gives for a scalar parameter (a CLI flag's text, a
/// Python object), before it has the parameter's type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UserNumber {
    Int(i128),
    Float(f64),
    Bool(bool),
}

/// Why a user's number is not a value of a scalar type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScalarValueError {
    /// Not a value of the type at all (a float for an integer, a word).
    #[error("`{given}` is not a `{ty}` value (`{ty}` takes {})", takes(*ty))]
    NotOfType { ty: ScalarType, given: String },
    /// A number the type cannot hold: an integer outside its range, a
    /// finite float that would round to infinity.
    #[error("`{given}` is out of range for `{ty}` ({})", range_of(*ty))]
    OutOfRange { ty: ScalarType, given: String },
}

fn takes(ty: ScalarType) -> &'static str {
    match ty {
        ScalarType::Bool => "`true` or `false`",
        ScalarType::I32 | ScalarType::U32 => "an integer",
        ScalarType::F32 | ScalarType::F16 | ScalarType::BF16 => "a number, `inf` or `nan`",
    }
}

fn range_of(ty: ScalarType) -> String {
    let largest = |bits: u16| crate::numerics::to_f32(ty, bits).unwrap_or(f32::MAX);
    match ty {
        ScalarType::I32 => format!("it holds {} to {}", i32::MIN, i32::MAX),
        ScalarType::U32 => format!("it holds 0 to {}", u32::MAX),
        ScalarType::F32 => format!(
            "its largest finite value is {:e}; give `inf` for infinity",
            f32::MAX
        ),
        ScalarType::F16 => format!(
            "its largest finite value is {:e}; give `inf` for infinity",
            largest(0x7bff)
        ),
        ScalarType::BF16 => format!(
            "its largest finite value is {:e}; give `inf` for infinity",
            largest(0x7f7f)
        ),
        ScalarType::Bool => "it holds `true` and `false`".into(),
    }
}

/// The one rule that turns a user's number into a scalar of type `ty`
/// (the CLI's `--scalar`, the Python package's scalar arguments): integers
/// must be in range; floats are rounded once to the type (nearest, ties to
/// even), and a finite number that would round to infinity is out of range,
/// as the same literal in a file is; integers are taken for float types;
/// `bool` takes only a bool.
pub fn scalar_value(ty: ScalarType, value: UserNumber) -> Result<Literal, ScalarValueError> {
    let given = || match value {
        UserNumber::Int(v) => v.to_string(),
        // Debug writes `1e39`, `2.5`, `inf`: the number as a user wrote it.
        UserNumber::Float(v) => format!("{v:?}"),
        UserNumber::Bool(v) => v.to_string(),
    };
    let not_of_type = || ScalarValueError::NotOfType { ty, given: given() };
    let out_of_range = || ScalarValueError::OutOfRange { ty, given: given() };
    let float = match value {
        UserNumber::Bool(v) if ty == ScalarType::Bool => return Ok(Literal::Bool(v)),
        UserNumber::Bool(_) => return Err(not_of_type()),
        _ if ty == ScalarType::Bool => return Err(not_of_type()),
        UserNumber::Int(v) if ty == ScalarType::I32 => {
            return i32::try_from(v)
                .map(Literal::I32)
                .map_err(|_| out_of_range())
        }
        UserNumber::Int(v) if ty == ScalarType::U32 => {
            return u32::try_from(v)
                .map(Literal::U32)
                .map_err(|_| out_of_range())
        }
        UserNumber::Float(_) if !ty.is_float() => return Err(not_of_type()),
        // i128 → f64 rounds once; every i128 is far inside f64's range.
        UserNumber::Int(v) => v as f64,
        UserNumber::Float(v) => v,
    };
    let literal = rounded_float(ty, float).ok_or_else(not_of_type)?;
    if float.is_finite() && literal_is_infinite(literal) {
        return Err(out_of_range());
    }
    Ok(literal)
}

/// `v` rounded once to the float type `ty` (`None` for another type).
fn rounded_float(ty: ScalarType, v: f64) -> Option<Literal> {
    match ty {
        ScalarType::F32 => Some(Literal::f32(v as f32)),
        ScalarType::F16 | ScalarType::BF16 => {
            crate::numerics::from_f64(ty, v).map(|bits| Literal::from_bits(ty, u32::from(bits)))
        }
        _ => None,
    }
}

fn literal_is_infinite(literal: Literal) -> bool {
    match literal {
        Literal::F32(bits) => bits.to_f32().is_infinite(),
        Literal::F16(bits) | Literal::BF16(bits) => {
            crate::numerics::to_f32(literal.ty(), bits).is_some_and(f32::is_infinite)
        }
        _ => false,
    }
}

/// A scalar of type `ty` written as text (the CLI's `--scalar NAME=TEXT`):
/// `7`, `7u` (`u32`), `-1.5`, `1.5f16` (the type's own suffix), `inf`,
/// `nan`, `true` / `false` (or `1` / `0`) for `bool`; the value then follows
/// [`scalar_value`]'s rule. A decimal `f32` is rounded once, from the text.
pub fn parse_scalar(ty: ScalarType, text: &str) -> Result<Literal, ScalarValueError> {
    let not_of_type = || ScalarValueError::NotOfType {
        ty,
        given: text.to_string(),
    };
    let out_of_range = || ScalarValueError::OutOfRange {
        ty,
        given: text.to_string(),
    };
    let number = match ty {
        ScalarType::Bool => match text {
            "true" | "1" => UserNumber::Bool(true),
            "false" | "0" => UserNumber::Bool(false),
            _ => return Err(not_of_type()),
        },
        ScalarType::I32 | ScalarType::U32 => {
            let digits = match ty {
                ScalarType::U32 => text.strip_suffix('u').unwrap_or(text),
                _ => text,
            };
            match digits.parse::<i128>() {
                Ok(v) => UserNumber::Int(v),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow
                    ) =>
                {
                    return Err(out_of_range())
                }
                Err(_) => return Err(not_of_type()),
            }
        }
        ScalarType::F32 | ScalarType::F16 | ScalarType::BF16 => {
            let digits = text.strip_suffix(ty.keyword()).unwrap_or(text);
            let Ok(v) = digits.parse::<f64>() else {
                return Err(not_of_type());
            };
            let spelled_infinite = matches!(
                digits
                    .trim_start_matches(['+', '-'])
                    .to_ascii_lowercase()
                    .as_str(),
                "inf" | "infinity"
            );
            if v.is_infinite() && !spelled_infinite {
                // Past even f64's range.
                return Err(out_of_range());
            }
            if ty == ScalarType::F32 {
                // Rounded once from the decimal text, not through f64.
                let single = digits.parse::<f32>().map_err(|_| not_of_type())?;
                if single.is_infinite() && !spelled_infinite {
                    return Err(out_of_range());
                }
                return Ok(Literal::f32(single));
            }
            UserNumber::Float(v)
        }
    };
    scalar_value(ty, number).map_err(|e| match e {
        // Name the value as the user wrote it.
        ScalarValueError::NotOfType { ty, .. } => ScalarValueError::NotOfType {
            ty,
            given: text.to_string(),
        },
        ScalarValueError::OutOfRange { ty, .. } => ScalarValueError::OutOfRange {
            ty,
            given: text.to_string(),
        },
    })
}

/// What one call returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallOutputs {
    /// Every output of the map (resident ones included, read back after the call).
    pub outputs: BTreeMap<Name, HostTensor>,
}

/// How an operand's device buffer starts a call. This is the one rule
/// (docs/design.md, "Semantics"): the lowering ([`crate::plan::BufferInit`]), the
/// interpreter and input generation all take it from [`BufferStart::of`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferStart {
    /// Uploaded from the host: a gmem input that is neither `zeroed` nor
    /// `resident`. Only these inputs take data in [`CallArgs::inputs`].
    Uploaded,
    /// Zero-filled at the start of every call: every non-resident
    /// semaphore (inputs included: semaphores always start at zero) and
    /// every `zeroed` operand (a `zeroed` input takes no host data).
    Zeroed,
    /// Left as it is: other outputs and gmem scratch.
    Uninitialized,
    /// The device-resident ref of the operand's name, kept across calls;
    /// see [`resident_starts_zeroed`] for how it is first created.
    Resident,
}

impl BufferStart {
    /// The start of `operand`'s buffer; `None` for operands without a device
    /// buffer (scalars, `smem`, `local`). An output aliased to an input has
    /// no buffer of its own: it shares the input's, which starts as the
    /// input's does.
    pub fn of(kind: OperandKind, operand: &Operand) -> Option<BufferStart> {
        let ty = operand.ty.as_ref_type()?;
        if kind == OperandKind::Scalar || !matches!(ty.space, MemorySpace::Gmem | MemorySpace::Sem)
        {
            return None;
        }
        Some(if operand.resident {
            BufferStart::Resident
        } else if ty.space == MemorySpace::Sem || operand.zeroed {
            BufferStart::Zeroed
        } else if kind == OperandKind::Input {
            BufferStart::Uploaded
        } else {
            BufferStart::Uninitialized
        })
    }
}

/// Whether a device-resident ref starts at zero when a backend first creates
/// it (before any call or [`crate::Backend::set_resident`] gave it data):
/// semaphores always do, gmem when its declaration says `zeroed` (the
/// declaration decides; a binding operand's `zeroed` does not). Otherwise it
/// is uninitialised: backends may hold zeros there, the interpreter reports
/// reads of it.
pub fn resident_starts_zeroed(resident: &Resident) -> bool {
    resident.zeroed || resident.ty.space == MemorySpace::Sem
}

/// The host shape of a ref's tensor: the ref's shape, preceded by the owner
/// mesh's block axis sizes (grid then cluster) when the ref is owned by a
/// mesh (one instance per block, in linear block order). `None` when the
/// owner is not among `meshes`.
pub fn host_shape(meshes: &[Mesh], ty: &RefType) -> Option<Vec<u32>> {
    let mut shape: Vec<u32> = match &ty.owner {
        Some(owner) => meshes
            .iter()
            .find(|m| &m.name == owner)?
            .block_axes()
            .map(|a| a.size)
            .collect(),
        None => vec![],
    };
    shape.extend_from_slice(&ty.shape);
    Some(shape)
}

/// The number of elements of a tensor of `shape`; `None` when it does not fit in a `u64`.
pub fn element_count(shape: &[u32]) -> Option<u64> {
    crate::ir::limits::checked_product(shape.iter().map(|&d| u64::from(d)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_pack_16_bit_elements_two_a_word_and_bytes_are_checked() {
        use ScalarType::*;
        for elem in [F32, I32, U32, Bool] {
            assert_eq!(words_for(elem, 0), 0);
            assert_eq!(words_for(elem, 3), 3);
            assert_eq!(words_for(elem, u64::MAX), u64::MAX);
        }
        for elem in [F16, BF16] {
            assert_eq!(words_for(elem, 0), 0);
            assert_eq!(words_for(elem, 1), 1);
            assert_eq!(words_for(elem, 3), 2);
            assert_eq!(words_for(elem, 4), 2);
            assert_eq!(words_for(elem, u64::MAX), 1 << 63);
        }
        assert_eq!(word_bytes(F16, 3), Some(8));
        assert_eq!(word_bytes(F32, u64::MAX / 4), Some(u64::MAX / 4 * 4));
        assert_eq!(word_bytes(F32, u64::MAX / 4 + 1), None);
        assert_eq!(word_bytes(BF16, u64::MAX), None);
        // What a host tensor holds is that many words.
        let tensor = HostTensor::zeros(F16, vec![3, 5]).unwrap();
        assert_eq!(tensor.words().len() as u64, words_for(F16, 15));
        assert_eq!(tensor.bytes().len(), 30);
    }

    #[test]
    fn zeros_of_a_shape_past_the_address_space_is_an_error() {
        let huge = vec![u32::MAX, u32::MAX, u32::MAX];
        assert_eq!(
            HostTensor::zeros(ScalarType::F32, huge.clone()).unwrap_err(),
            ShapeError::TooLarge { shape: huge }
        );
        assert_eq!(
            HostTensor::zeros(ScalarType::F16, vec![3]).unwrap().len(),
            3
        );
    }

    #[test]
    fn users_numbers_out_of_range_are_errors_for_every_type() {
        use ScalarType::*;
        let refused = |ty, text| parse_scalar(ty, text).unwrap_err().to_string();
        assert_eq!(
            refused(F32, "1e39"),
            "`1e39` is out of range for `f32` (its largest finite value is 3.4028235e38; give `inf` for infinity)"
        );
        assert_eq!(
            refused(F32, "-1e400"),
            "`-1e400` is out of range for `f32` (its largest finite value is 3.4028235e38; give `inf` for infinity)"
        );
        assert_eq!(
            refused(F16, "70000"),
            "`70000` is out of range for `f16` (its largest finite value is 6.5504e4; give `inf` for infinity)"
        );
        assert_eq!(
            refused(BF16, "1e39bf16"),
            "`1e39bf16` is out of range for `bf16` (its largest finite value is 3.3895314e38; give `inf` for infinity)"
        );
        assert_eq!(
            refused(U32, "4294967296"),
            "`4294967296` is out of range for `u32` (it holds 0 to 4294967295)"
        );
        assert_eq!(
            refused(U32, "-1"),
            "`-1` is out of range for `u32` (it holds 0 to 4294967295)"
        );
        assert_eq!(
            refused(I32, "99999999999999999999999999999999999999999"),
            "`99999999999999999999999999999999999999999` is out of range for `i32` (it holds -2147483648 to 2147483647)"
        );
        assert_eq!(
            refused(I32, "1.5"),
            "`1.5` is not a `i32` value (`i32` takes an integer)"
        );
        assert_eq!(
            refused(Bool, "2"),
            "`2` is not a `bool` value (`bool` takes `true` or `false`)"
        );
        assert_eq!(
            refused(F32, "abc"),
            "`abc` is not a `f32` value (`f32` takes a number, `inf` or `nan`)"
        );
        // In range, spelled infinities and the largest finite values pass.
        assert_eq!(
            parse_scalar(F32, "3.4028235e38"),
            Ok(Literal::f32(f32::MAX))
        );
        assert_eq!(
            parse_scalar(F32, "-inf"),
            Ok(Literal::f32(f32::NEG_INFINITY))
        );
        assert_eq!(parse_scalar(F16, "65504"), Ok(Literal::F16(0x7bff)));
        assert_eq!(parse_scalar(F16, "inf"), Ok(Literal::F16(0x7c00)));
        assert_eq!(parse_scalar(F16, "0.1f16"), Ok(Literal::F16(0x2e66)));
        assert_eq!(parse_scalar(BF16, "-2.5bf16"), Ok(Literal::BF16(0xc020)));
        assert_eq!(parse_scalar(U32, "7u"), Ok(Literal::U32(7)));
        assert_eq!(parse_scalar(I32, "-3"), Ok(Literal::I32(-3)));
        assert_eq!(parse_scalar(Bool, "1"), Ok(Literal::Bool(true)));
    }

    #[test]
    fn numbers_from_python_follow_the_same_rule() {
        use ScalarType::{BF16, F16, F32, I32, U32};
        use UserNumber::{Bool, Float, Int};
        let refused = |ty, v| scalar_value(ty, v).unwrap_err().to_string();
        assert_eq!(
            refused(F32, Float(1e39)),
            "`1e39` is out of range for `f32` (its largest finite value is 3.4028235e38; give `inf` for infinity)"
        );
        assert_eq!(
            refused(F16, Int(70000)),
            "`70000` is out of range for `f16` (its largest finite value is 6.5504e4; give `inf` for infinity)"
        );
        assert_eq!(
            refused(I32, Int(1 << 31)),
            "`2147483648` is out of range for `i32` (it holds -2147483648 to 2147483647)"
        );
        assert_eq!(
            refused(U32, Float(2.5)),
            "`2.5` is not a `u32` value (`u32` takes an integer)"
        );
        assert_eq!(
            refused(F32, Bool(true)),
            "`true` is not a `f32` value (`f32` takes a number, `inf` or `nan`)"
        );
        assert_eq!(
            scalar_value(F32, Float(f64::INFINITY)),
            Ok(Literal::f32(f32::INFINITY))
        );
        assert_eq!(scalar_value(F32, Int(2)), Ok(Literal::f32(2.0)));
        assert_eq!(scalar_value(BF16, Float(1.0)), Ok(Literal::BF16(0x3f80)));
        assert_eq!(scalar_value(U32, Int(7)), Ok(Literal::U32(7)));
        assert_eq!(
            scalar_value(ScalarType::Bool, Bool(false)),
            Ok(Literal::Bool(false))
        );
        assert!(matches!(
            scalar_value(F16, Float(f64::NAN)),
            Ok(Literal::F16(bits)) if bits & 0x7c00 == 0x7c00 && bits & 0x3ff != 0
        ));
    }

    #[test]
    fn new_checks_that_shape_and_length_agree() {
        let t = HostTensor::new(ScalarType::U32, vec![2, 3], vec![7; 6]).unwrap();
        assert_eq!(t.len(), 6);
        assert_eq!(
            HostTensor::new(ScalarType::U32, vec![2, 3], vec![7; 5])
                .unwrap_err()
                .to_string(),
            "a host tensor of shape [2, 3] holds 6 elements, but 5 were given"
        );
        assert_eq!(
            HostTensor::new(ScalarType::F32, vec![u32::MAX, u32::MAX, u32::MAX], vec![]),
            Err(ShapeError::TooLarge {
                shape: vec![u32::MAX, u32::MAX, u32::MAX]
            })
        );
        // A scalar-shaped tensor holds one element.
        assert!(HostTensor::new(ScalarType::I32, vec![], vec![1]).is_ok());
    }

    #[test]
    fn get_is_none_past_the_end() {
        let t = HostTensor::from_i32(vec![2], &[-1, 5]);
        assert_eq!(t.get(1), Some(Literal::I32(5)));
        assert_eq!(t.get(2), None);
        assert_eq!(t.get(usize::MAX), None);
    }

    #[test]
    fn a_call_refuses_an_input_whose_shape_and_length_disagree() {
        let mut args = CallArgs::default();
        args.inputs
            .insert("x".into(), HostTensor::from_u32(vec![3], &[0; 4]));
        assert_eq!(
            args.input("x", ScalarType::U32, 4).unwrap_err().to_string(),
            RunError::BadArguments(
                "input `x`: a host tensor of shape [3] holds 3 elements, but 4 were given".into()
            )
            .to_string()
        );
    }

    #[test]
    fn sixteen_bit_elements_take_two_bytes() {
        let t = HostTensor::new(ScalarType::F16, vec![3], vec![0x3c00, 0xbc00, 0x0001]).unwrap();
        assert_eq!(t.bytes(), vec![0x00, 0x3c, 0x00, 0xbc, 0x01, 0x00]);
        assert_eq!(t.words(), &[0xbc00_3c00, 0x0000_0001]);
        assert_eq!(t.get(1), Some(Literal::F16(0xbc00)));
        assert_eq!(t.to_f32(), vec![1.0, -1.0, f32::powi(2.0, -24)]);
        let back = HostTensor::from_bytes(ScalarType::F16, vec![3], &t.bytes()).unwrap();
        assert_eq!(back, t);
        assert_eq!(
            HostTensor::from_bytes(ScalarType::BF16, vec![1], &[1, 2, 3]).unwrap_err(),
            ShapeError::PartialElement {
                elem: ScalarType::BF16,
                size: 2,
                got: 3
            }
        );
        let words =
            HostTensor::from_words(ScalarType::BF16, vec![3], vec![0x3f80_3f80, 0xdead_3f00])
                .unwrap();
        assert_eq!(
            words.to_bits(),
            vec![0x3f80, 0x3f80, 0x3f00],
            "padding is dropped"
        );
        assert_eq!(words.words()[1], 0x3f00);
    }

    #[derive(Debug)]
    struct Lent(Vec<u32>);

    impl SharedWords for Lent {
        fn words(&self) -> &[u32] {
            &self.0
        }
    }

    /// Lent words are read where they lie: the tensor equals one that owns
    /// the same words; lent words of another length, or a last 16-bit word
    /// whose unused half is not zero, are refused (the caller copies).
    #[test]
    fn lent_words_are_read_in_place_when_they_are_exactly_the_packed_words() {
        let lent = Arc::new(Lent(vec![1, 2, 3]));
        let t = HostTensor::from_shared_words(ScalarType::U32, vec![3], lent.clone()).unwrap();
        assert_eq!(t.words().as_ptr(), lent.0.as_ptr());
        assert_eq!(t, HostTensor::from_u32(vec![3], &[1, 2, 3]));
        assert_eq!(t.clone().into_words(), vec![1, 2, 3]);
        assert!(HostTensor::from_shared_words(ScalarType::U32, vec![2], lent).is_none());
        let half = |w: u32| Arc::new(Lent(vec![0x3c00_3c00, w]));
        let t = HostTensor::from_shared_words(ScalarType::F16, vec![3], half(0x3c00)).unwrap();
        assert_eq!(t.to_bits(), vec![0x3c00; 3]);
        assert!(HostTensor::from_shared_words(ScalarType::F16, vec![3], half(0x1_3c00)).is_none());
        let owned = HostTensor::from_u32(vec![2], &[7, 8]);
        let words_ptr = owned.words().as_ptr();
        let words = owned.into_words();
        assert_eq!(words.as_ptr(), words_ptr, "no copy");
    }
}
