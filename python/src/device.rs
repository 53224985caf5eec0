//! Runs of a map on CUDA device memory (`Cuda().call` with device arrays).

use std::collections::BTreeMap;
use std::sync::Arc;

use mpmd_core::ir::{Literal, ScalarType};
use mpmd_core::lru::Lru;
use mpmd_core::plan::LaunchPlan;
use mpmd_core::RunError as CoreRunError;
use mpmd_core::{Backend, HostTensor, Mode};
use mpmd_cuda::{CudaBackend, CudaBuffer, CudaPrepared, DeviceArgs};

use crate::*;

/// An input of a run on the device: a device array used in place, or host
/// data copied there.
pub(crate) enum DeviceInput {
    Device(dlpack::Imported),
    Host(HostTensor),
}

/// An output of a run on the device, kept there.
pub(crate) struct DeviceOutput {
    pub(crate) name: String,
    pub(crate) memory: mpmd_cuda::cudarc::driver::CudaSlice<u32>,
    pub(crate) address: u64,
    pub(crate) elem: ScalarType,
    pub(crate) shape: Vec<u32>,
}

/// Runs `plan` once on device memory: device inputs in place, host inputs
/// and every output in memory the backend allocates (a resident output is
/// a copy of the resident after the run), then waits and reports an error
/// a kernel recorded.
pub(crate) fn run_on_device(
    backend: &mut CudaBackend,
    mode: Mode,
    prepared: &mut Lru<usize, (Arc<LaunchPlan>, CudaPrepared)>,
    plan: &Arc<LaunchPlan>,
    inputs: BTreeMap<String, DeviceInput>,
    scalars: BTreeMap<String, Literal>,
) -> Result<Vec<DeviceOutput>, CoreRunError> {
    let key = Arc::as_ptr(plan) as usize;
    let cached = prepared.get(&key).is_some_and(|(_, p)| p.mode() == mode);
    if !cached {
        let fresh = backend.prepare(plan, mode)?;
        prepared.insert(key, (Arc::clone(plan), fresh));
    }
    let mut args = DeviceArgs {
        buffers: BTreeMap::new(),
        scalars,
    };
    // Host inputs and outputs live in these until the run is over.
    let mut uploads = BTreeMap::new();
    let mut imported = Vec::new();
    for (name, input) in inputs {
        let buffer = match input {
            DeviceInput::Device(array) => {
                let buffer = plan
                    .buffers
                    .iter()
                    .find(|b| b.operands.contains(&name))
                    .map(|b| CudaBuffer::new(array.address, b.ty.elem, b.len));
                imported.push(array);
                buffer
            }
            DeviceInput::Host(tensor) => {
                let mut words = tensor.words().to_vec();
                if tensor.elem() == ScalarType::Bool {
                    words.iter_mut().for_each(|w| *w = u32::from(*w != 0));
                }
                if words.is_empty() {
                    words.push(0);
                }
                let memory = backend.upload_words(&words)?;
                let buffer = CudaBuffer::new(
                    backend.address_of(&memory),
                    tensor.elem(),
                    tensor.len() as u64,
                );
                uploads.insert(name.clone(), memory);
                Some(buffer)
            }
        };
        if let Some(buffer) = buffer {
            args.buffers.insert(name, buffer);
        }
    }
    let mut outputs = Vec::new();
    // An output aliased to an input is the input's memory: a device array
    // the caller gave is written in place (Python hands that array back),
    // a host input's upload becomes the output.
    let mut aliased = Vec::new();
    for buffer in &plan.buffers {
        let Some(name) = &buffer.output else { continue };
        match &buffer.init {
            mpmd_core::plan::BufferInit::Resident(_) => continue,
            mpmd_core::plan::BufferInit::Input(input) => {
                aliased.push((name.clone(), input.clone(), buffer));
                continue;
            }
            _ => {}
        }
        let words = mpmd_core::host::words_for(buffer.ty.elem, buffer.len).max(1);
        let memory =
            backend.alloc_zeroed(usize::try_from(words).map_err(|_| CoreRunError::Refused {
                reason: format!("output `{name}` does not fit this machine's memory"),
            })?)?;
        let address = backend.address_of(&memory);
        args.buffers.insert(
            name.clone(),
            CudaBuffer::new(address, buffer.ty.elem, buffer.len),
        );
        outputs.push(DeviceOutput {
            name: name.clone(),
            memory,
            address,
            elem: buffer.ty.elem,
            shape: plan.host_shape(buffer),
        });
    }
    let (_, map) = prepared.get(&key).expect("prepared above");
    // SAFETY: every buffer is device memory of the backend's context holding
    // its operand's elements: imported arrays were checked against their
    // operand's dtype and shape, the others were allocated for it, and all
    // of them outlive the synchronisation below.
    unsafe { backend.enqueue(map, &args) }?;
    backend.synchronize()?;
    drop(imported);
    for (name, input, buffer) in aliased {
        if let Some(memory) = uploads.remove(&input) {
            outputs.push(DeviceOutput {
                name,
                address: backend.address_of(&memory),
                memory,
                elem: buffer.ty.elem,
                shape: plan.host_shape(buffer),
            });
        }
    }
    drop(uploads);
    for buffer in &plan.buffers {
        let (Some(name), mpmd_core::plan::BufferInit::Resident(resident)) =
            (&buffer.output, &buffer.init)
        else {
            continue;
        };
        let tensor = backend.resident(resident).ok_or_else(|| {
            CoreRunError::Backend(format!("resident `{resident}` could not be read"))
        })?;
        let mut words = tensor.words().to_vec();
        if words.is_empty() {
            words.push(0);
        }
        let memory = backend.upload_words(&words)?;
        outputs.push(DeviceOutput {
            name: name.clone(),
            address: backend.address_of(&memory),
            memory,
            elem: tensor.elem(),
            shape: tensor.shape().to_vec(),
        });
    }
    let order: Vec<&String> = plan.map.outputs.iter().map(|o| &o.name).collect();
    outputs.sort_by_key(|o| order.iter().position(|n| **n == o.name));
    Ok(outputs)
}
