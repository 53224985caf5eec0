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

impl HostTensor {
    pub fn zeros(elem: ScalarType, shape: Vec<u32>) -> Self {
        let len = shape.iter().map(|&d| d as usize).product();
        HostTensor {
            elem,
            shape,
            words: vec![0; len],
        }
    }

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

    /// Element `i` as a typed value.
    pub fn get(&self, i: usize) -> Literal {
        Literal::from_bits(self.elem, self.words[i])
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
