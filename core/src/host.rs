//! Host-side data: what users pass in and get back from a call.

use std::collections::BTreeMap;

use crate::backend::RunError;
use crate::ir::{Literal, Name, ScalarType};

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
