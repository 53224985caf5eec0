//! Host-side data: what users pass in and get back from a call.

use std::collections::BTreeMap;

use crate::backend::RunError;
use crate::ir::{
    Literal, MemorySpace, Mesh, Name, Operand, OperandKind, RefType, Resident, ScalarType,
};

/// A host array of 32-bit elements, stored as raw words so that every backend
/// uploads and compares the same bits (`bool` is 0 or 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostTensor {
    pub elem: ScalarType,
    pub shape: Vec<u32>,
    pub words: Vec<u32>,
}

/// A shape and a number of words that do not agree.
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
}

/// Elements of `shape`, checked, and addressable on this machine.
fn addressable_count(shape: &[u32]) -> Result<u64, ShapeError> {
    element_count(shape)
        .filter(|&n| usize::try_from(n).is_ok())
        .ok_or_else(|| ShapeError::TooLarge {
            shape: shape.to_vec(),
        })
}

impl HostTensor {
    /// A tensor of `shape` holding `words`: an error unless the shape holds
    /// exactly that many elements.
    pub fn new(elem: ScalarType, shape: Vec<u32>, words: Vec<u32>) -> Result<Self, ShapeError> {
        let expected = addressable_count(&shape)?;
        if expected != words.len() as u64 {
            return Err(ShapeError::Mismatch {
                shape,
                expected,
                got: words.len(),
            });
        }
        Ok(HostTensor { elem, shape, words })
    }

    /// Whether the shape and the words agree (the fields are public, so a
    /// tensor built field by field is checked where it is used:
    /// [`CallArgs::input`] refuses one that does not).
    pub fn check(&self) -> Result<(), ShapeError> {
        let expected = addressable_count(&self.shape)?;
        if expected != self.words.len() as u64 {
            return Err(ShapeError::Mismatch {
                shape: self.shape.clone(),
                expected,
                got: self.words.len(),
            });
        }
        Ok(())
    }

    pub fn zeros(elem: ScalarType, shape: Vec<u32>) -> Self {
        let len = shape.iter().map(|&d| d as usize).product();
        HostTensor {
            elem,
            shape,
            words: vec![0; len],
        }
    }

    /// `values` in `shape`, which must hold `values.len()` elements (checked
    /// where the tensor is used, by [`CallArgs::input`]; [`HostTensor::new`]
    /// checks at once).
    pub fn from_f32(shape: Vec<u32>, values: &[f32]) -> Self {
        HostTensor {
            elem: ScalarType::F32,
            shape,
            words: values.iter().map(|v| v.to_bits()).collect(),
        }
    }

    pub fn from_i32(shape: Vec<u32>, values: &[i32]) -> Self {
        HostTensor {
            elem: ScalarType::I32,
            shape,
            words: values.iter().map(|&v| v as u32).collect(),
        }
    }

    pub fn from_u32(shape: Vec<u32>, values: &[u32]) -> Self {
        HostTensor {
            elem: ScalarType::U32,
            shape,
            words: values.to_vec(),
        }
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    pub fn to_f32(&self) -> Vec<f32> {
        self.words.iter().map(|&w| f32::from_bits(w)).collect()
    }

    pub fn to_i32(&self) -> Vec<i32> {
        self.words.iter().map(|&w| w as i32).collect()
    }

    /// Element `i` (row-major) as a typed value; `None` past the end.
    pub fn get(&self, i: usize) -> Option<Literal> {
        self.words.get(i).map(|&w| Literal::from_bits(self.elem, w))
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
        if tensor.words.len() as u64 != len {
            return Err(RunError::BadArguments(format!(
                "input `{name}` has {} elements; the map declares {len}",
                tensor.words.len()
            )));
        }
        Ok(tensor)
    }
}

/// What one call returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallOutputs {
    /// Every output of the map (resident ones included, read back after the call).
    pub outputs: BTreeMap<Name, HostTensor>,
}

/// How an operand's device buffer starts a call. This is the one rule
/// (DESIGN.md, "Semantics"): the lowering ([`crate::plan::BufferInit`]), the
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
    shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(u64::from(d)))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Built field by field: 4 words in a [3] shape.
        args.inputs.insert(
            "x".into(),
            HostTensor {
                elem: ScalarType::U32,
                shape: vec![3],
                words: vec![0; 4],
            },
        );
        assert_eq!(
            args.input("x", ScalarType::U32, 4).unwrap_err().to_string(),
            RunError::BadArguments(
                "input `x`: a host tensor of shape [3] holds 3 elements, but 4 were given".into()
            )
            .to_string()
        );
    }
}
