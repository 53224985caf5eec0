//! One launch: the host-copy path (`Backend::run`), the launch itself, the
//! addresses and scalars it takes, and the read-back.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use mpmd_core::host::{CallArgs, CallOutputs, HostTensor};
use mpmd_core::ir::{Literal, MemorySpace, ScalarType, Type};
use mpmd_core::plan::{BufferId, BufferInit, LaunchPlan, OperandId};
use mpmd_core::{RunError, RunOptions};

use super::device::event_elapsed_ms;
use super::errors::run_err;
use super::{CallMemory, CudaBackend, DeviceResident, PreparedPlan};
use crate::arena::{packed_words, BufferPlacement};
use crate::emit::KernelParam;

impl CudaBackend {
    pub(super) fn run_inner(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        let scalars = scalar_args(plan, &args.scalars)?;
        let inputs = input_words(plan, args)?;
        if !self.pending.is_empty() {
            self.synchronize()?;
        }
        self.prepared(plan, options.mode)?;
        self.bind_residents(plan, &[])?;
        self.settle()?;
        let stream = self.stream.clone();
        let time_kernels = self.options.time_kernels;
        let timeout_ns = self.timeout_ns();
        let host_mapping = self.host_mapping;
        let prepared = &mut self.prepared[0];
        if prepared.memory.is_none() {
            prepared.memory = Some(CallMemory::new(&stream, &prepared.layout, host_mapping)?);
        }
        let layout = &prepared.layout;
        let memory = prepared.memory.as_mut().expect("allocated above");

        // Inputs uploaded, zeroed buffers cleared; everything else keeps
        // whatever it holds.
        for (index, buffer) in plan.enumerate_buffers() {
            match (layout.place(index), &buffer.init) {
                (Some(BufferPlacement::Device(range)), BufferInit::Input(_)) => stream
                    .memcpy_htod(
                        inputs[&index].as_slice(),
                        &mut memory.arena.slice_mut(range.clone()),
                    )
                    .map_err(run_err("upload"))?,
                (Some(BufferPlacement::Device(range)), BufferInit::Zeroed) => stream
                    .memset_zeros(&mut memory.arena.slice_mut(range.clone()))
                    .map_err(run_err("memset"))?,
                (Some(BufferPlacement::Mapped(range)), BufferInit::Zeroed) => {
                    let mapped = memory.mapped.as_mut().ok_or_else(|| unplaced(index))?;
                    // SAFETY: no kernel is in flight (settled above).
                    unsafe { mapped.words_mut(range.clone()) }.fill(0)
                }
                _ => {}
            }
        }
        prepared.scalars = scalars;
        let prepared = &self.prepared[0];
        let memory = prepared.memory.as_ref().expect("allocated above");
        // The launch must see the host's writes to the mapped block.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        memory.clear_ticket(&stream, prepared)?;
        let addresses = buffer_addresses(prepared, memory, &self.residents, &[])?;
        self.in_flight = true;
        let events = launch(
            &stream,
            prepared,
            &addresses,
            memory.control_address(&prepared.layout),
            &prepared.scalars,
            timeout_ns,
            time_kernels,
        )?;

        // One copy brings back the arena's outputs (none when all are mapped).
        let what = "kernel execution or read-back";
        {
            let prepared = &mut self.prepared[0];
            let layout = &prepared.layout;
            let memory = prepared.memory.as_mut().expect("allocated above");
            if let Some(staging) = memory.staging.as_mut() {
                // SAFETY: the staging block holds `readback` words and is only
                // read after the synchronisation below.
                unsafe {
                    let (source, _) = memory.arena.slice(0..layout.readback).device_ptr(&stream);
                    cudarc::driver::result::memcpy_dtoh_async(
                        staging.words_mut(0..layout.readback),
                        source,
                        stream.cu_stream(),
                    )
                }
                .map_err(run_err(what))?;
            }
        }
        let prepared = &self.prepared[0];
        let layout = &prepared.layout;
        let memory = prepared.memory.as_ref().expect("allocated above");
        let pageable;
        let arena_outputs: &[u32] = match &memory.staging {
            Some(staging) => {
                stream.synchronize().map_err(run_err(what))?;
                // SAFETY: synchronised; each output is copied out of it below.
                unsafe { staging.words(0..layout.readback) }
            }
            None if layout.readback > 0 => {
                pageable = download(&stream, &memory.arena.slice(0..layout.readback), what)?;
                &pageable
            }
            None => {
                stream.synchronize().map_err(run_err(what))?;
                &[]
            }
        };
        stream.context().check_err().map_err(run_err(what))?;
        self.in_flight = false;
        self.last_kernel_ms = events.and_then(|(start, end)| event_elapsed_ms(&start, &end));
        if let Some(error) = prepared.take_recorded_error(&stream)? {
            return Err(error);
        }
        let mut outputs = BTreeMap::new();
        for (index, buffer) in plan.enumerate_buffers() {
            let Some(name) = &buffer.output else { continue };
            // The packed words of the elements (none for an empty buffer).
            let len = packed_words(buffer.ty.elem, buffer.len);
            let words = match (&buffer.init, layout.place(index)) {
                (BufferInit::Resident(resident), _) => {
                    let mut words = download(&stream, &self.residents[resident].words, "download")?;
                    words.truncate(len);
                    words
                }
                (_, Some(BufferPlacement::Device(range))) => {
                    arena_outputs[range.start..range.start + len].to_vec()
                }
                (_, Some(BufferPlacement::Mapped(range))) => {
                    let mapped = memory.mapped.as_ref().ok_or_else(|| unplaced(index))?;
                    // SAFETY: synchronised above.
                    unsafe { mapped.words(range.start..range.start + len) }.to_vec()
                }
                (_, None) => return Err(unplaced(index)),
            };
            let tensor = HostTensor::from_words(buffer.ty.elem, plan.host_shape(buffer), words)
                .map_err(|e| RunError::Backend(format!("output `{name}`: {e}")))?;
            outputs.insert(name.clone(), tensor);
        }
        Ok(CallOutputs { outputs })
    }
}

impl CudaBackend {
    /// For benchmarks: launches the latest call's kernel `reps` more times,
    /// back to back on the memory as that call left it (no uploads, no
    /// read-back; the ticket counter and the zeroed atomic buffers, which
    /// hold semaphores and counters, are cleared before each launch), and
    /// returns the best kernel time in ms. This is the kernel's speed when
    /// its data is already on the device, measured the way a raw launch or
    /// `cuMemcpyDtoD` is. The outputs are not read; an error a launch
    /// records (a timed-out wait) is returned.
    pub fn time_relaunch(&mut self, reps: usize) -> Result<f64, RunError> {
        self.settle()?;
        let timeout_ns = self.timeout_ns();
        let stream = self.stream.clone();
        let Some(prepared) = self.prepared.first_mut().filter(|p| p.memory.is_some()) else {
            return Err(RunError::Backend(
                "time_relaunch: no call to launch again".into(),
            ));
        };
        let cleared: Vec<std::ops::Range<usize>> = prepared
            .plan
            .enumerate_buffers()
            .filter(|(_, buffer)| buffer.atomic && buffer.init == BufferInit::Zeroed)
            .filter_map(|(index, _)| prepared.layout.device_range(index))
            .collect();
        let prepared = &*prepared;
        let memory = prepared.memory.as_ref().expect("checked above");
        let addresses = buffer_addresses(prepared, memory, &self.residents, &[])?;
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            for range in &cleared {
                // SAFETY: the range lies inside the arena.
                unsafe {
                    cudarc::driver::sys::cuMemsetD32Async(
                        memory.arena_base + range.start as u64 * 4,
                        0,
                        range.len(),
                        stream.cu_stream(),
                    )
                }
                .result()
                .map_err(run_err("memset"))?;
            }
            memory.clear_ticket(&stream, prepared)?;
            self.in_flight = true;
            let events = launch(
                &stream,
                prepared,
                &addresses,
                memory.control_address(&prepared.layout),
                &prepared.scalars,
                timeout_ns,
                true,
            )?;
            stream.synchronize().map_err(run_err("kernel execution"))?;
            self.in_flight = false;
            if let Some(error) = prepared.take_recorded_error(&stream)? {
                return Err(error);
            }
            let ms = events
                .and_then(|(start, end)| event_elapsed_ms(&start, &end))
                .ok_or_else(|| RunError::Backend("time_relaunch: no kernel time".into()))?;
            best = best.min(ms as f64);
        }
        Ok(best)
    }
}
/// The device address of `slice`'s first element.
pub(super) fn device_address(stream: &Arc<CudaStream>, slice: &CudaSlice<u32>) -> u64 {
    let (address, _record) = slice.device_ptr(stream);
    address
}

pub(super) fn unplaced(buffer: BufferId) -> RunError {
    RunError::Backend(format!("internal: plan buffer {buffer} has no memory"))
}

/// The device address each plan buffer has in a launch: the caller's
/// (`caller`, per plan buffer; empty for none), a resident's, or its place
/// in the prepared plan's arena or mapped block.
pub(super) fn buffer_addresses(
    prepared: &PreparedPlan,
    memory: &CallMemory,
    residents: &BTreeMap<String, DeviceResident>,
    caller: &[Option<u64>],
) -> Result<Vec<u64>, RunError> {
    let plan = &prepared.plan;
    plan.buffer_ids()
        .map(|index| {
            if let Some(Some(address)) = caller.get(index.index()) {
                return Ok(*address);
            }
            match (&plan.buffer(index).init, prepared.layout.place(index)) {
                (BufferInit::Resident(name), _) => residents
                    .get(name)
                    .map(|r| r.address)
                    .ok_or_else(|| unplaced(index)),
                (_, Some(BufferPlacement::Device(range))) => {
                    Ok(memory.arena_base + range.start as u64 * 4)
                }
                (_, Some(BufferPlacement::Mapped(range))) => memory
                    .mapped
                    .as_ref()
                    .map(|mapped| mapped.device_address(range.start))
                    .ok_or_else(|| unplaced(index)),
                (_, None) => Err(unplaced(index)),
            }
        })
        .collect()
}

/// Launches `prepared`'s kernel once with each plan buffer at `addresses`,
/// the control block at `control` and `scalars`; with `time_kernels`,
/// between two events.
pub(super) fn launch(
    stream: &Arc<CudaStream>,
    prepared: &PreparedPlan,
    addresses: &[u64],
    control: u64,
    scalars: &HashMap<OperandId, ScalarArg>,
    timeout_ns: u64,
    time_kernels: bool,
) -> Result<Option<(CudaEvent, CudaEvent)>, RunError> {
    let mut launch = stream.launch_builder(&prepared.function);
    for param in &prepared.module.params {
        match param {
            KernelParam::Buffer(index) => {
                launch.arg(
                    addresses
                        .get(index.index())
                        .ok_or_else(|| unplaced(*index))?,
                );
            }
            KernelParam::Scalar(index) => {
                match scalars.get(index) {
                    Some(ScalarArg::F32(v)) => launch.arg(v),
                    Some(ScalarArg::I32(v)) => launch.arg(v),
                    Some(ScalarArg::U32(v)) => launch.arg(v),
                    None => {
                        return Err(RunError::Backend(format!(
                            "internal: no value for scalar operand {index}"
                        )))
                    }
                };
            }
            KernelParam::Control => {
                launch.arg(&control);
            }
            KernelParam::WaitTimeoutNs => {
                launch.arg(&timeout_ns);
            }
        }
    }
    if time_kernels {
        launch.record_kernel_launch(CUevent_flags::CU_EVENT_DEFAULT);
    }
    let config = LaunchConfig {
        grid_dim: (prepared.grid_blocks, 1, 1),
        block_dim: (prepared.module.block_dim, 1, 1),
        shared_mem_bytes: prepared.module.dynamic_smem_bytes,
    };
    // SAFETY: the parameters match the generated kernel's signature
    // (module.params), each buffer parameter a device pointer (a 64-bit
    // value); every buffer holds the elements its ref declares (arena
    // layout, residents checked by length, caller memory by `enqueue`'s
    // contract), and the kernel writes no element outside its ref in either
    // mode (emit: checked mode reports and skips such a write, fast mode
    // skips it), so no host memory the device can address (the mapped
    // block, page-locked staging, HMM) is written behind Rust's back.
    let events = unsafe {
        if prepared.cooperative {
            launch.launch_cooperative(config)
        } else {
            launch.launch(config)
        }
    }
    .map_err(run_err("launch"))?;
    Ok(events)
}

/// Copies a device buffer to the host and waits for the copy.
/// `what` names the step in the error (a kernel's fault surfaces at the
/// first copy after it).
pub(super) fn download(
    stream: &Arc<CudaStream>,
    slice: &impl DevicePtr<u32>,
    what: &str,
) -> Result<Vec<u32>, RunError> {
    let words = stream.clone_dtoh(slice).map_err(run_err(what))?;
    stream.synchronize().map_err(run_err(what))?;
    stream.context().check_err().map_err(run_err(what))?;
    Ok(words)
}

pub(super) enum ScalarArg {
    F32(f32),
    I32(i32),
    U32(u32),
}

pub(super) fn scalar_args(
    plan: &LaunchPlan,
    scalars: &BTreeMap<String, Literal>,
) -> Result<HashMap<OperandId, ScalarArg>, RunError> {
    let mut out = HashMap::new();
    for (index, operand) in plan.enumerate_operands() {
        let Type::Scalar(ty) = operand.ty else {
            continue;
        };
        let value = mpmd_core::host::scalar(scalars, &operand.name, ty)?;
        let arg = match value {
            Literal::F32(b) => ScalarArg::F32(b.to_f32()),
            Literal::I32(v) => ScalarArg::I32(v),
            Literal::U32(v) => ScalarArg::U32(v),
            Literal::Bool(v) => ScalarArg::U32(v as u32),
            // One word, the bits in the low half (the kernel takes a u32).
            Literal::F16(bits) | Literal::BF16(bits) => ScalarArg::U32(u32::from(bits)),
        };
        out.insert(index, arg);
    }
    Ok(out)
}

/// The words a call uploads for each input buffer, by plan buffer index:
/// each input checked against its type, packed (16-bit elements two to a
/// word, [`HostTensor::words`]), `bool`s in gmem as 0 or 1 (the kernel
/// compares with 0), an empty input as one word. Public for the CUDA
/// emulation tests, which must upload what the backend uploads.
pub fn input_words(
    plan: &LaunchPlan,
    args: &CallArgs,
) -> Result<HashMap<BufferId, Vec<u32>>, RunError> {
    let mut out = HashMap::new();
    for (index, buffer) in plan.enumerate_buffers() {
        let BufferInit::Input(name) = &buffer.init else {
            continue;
        };
        let tensor = args.input(name, buffer.ty.elem, buffer.len)?;
        let mut words = tensor.words().to_vec();
        if buffer.ty.space == MemorySpace::Gmem && buffer.ty.elem == ScalarType::Bool {
            // Any non-zero word is `true`; the kernel compares with 0.
            words.iter_mut().for_each(|w| *w = (*w != 0) as u32);
        }
        if words.is_empty() {
            words.push(0);
        }
        out.insert(index, words);
    }
    Ok(out)
}
