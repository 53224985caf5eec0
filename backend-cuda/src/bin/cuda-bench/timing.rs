//! How kernels are timed: inside `run` and launched again on device data
//! (`time_relaunch`), and raw launches of generated kernels on one stream.

use std::collections::HashMap;

use cudarc::driver::{LaunchConfig, PushKernelArg};
use mpmd_core::host::CallArgs;
use mpmd_core::plan::LaunchPlan;
use mpmd_core::{Backend, Mode, RunOptions};
use mpmd_cuda::{emit_module, BlockSchedule, CudaBackend, KernelParam, CONTROL_WORDS};

use crate::benchmarks::f32_input;

/// Best kernel times in ms of a plan, two ways: inside `run` (each call
/// uploads its inputs first), and launched again on the data the calls left
/// on the device (`time_relaunch`), the way the raw launches, the reference
/// kernels and `cuMemcpyDtoD` are timed.
#[derive(Clone, Copy)]
pub struct KernelMs {
    pub in_run: f64,
    pub resident: f64,
}

pub fn kernel_ms(
    backend: &mut CudaBackend,
    plan: &LaunchPlan,
    args: &CallArgs,
    reps: usize,
) -> Result<KernelMs, String> {
    let mut in_run = f64::INFINITY;
    for _ in 0..reps {
        backend
            .run(plan, args, &RunOptions::default())
            .map_err(|e| format!("{}: {e}", plan.map.name))?;
        let ms = backend.last_kernel_ms().ok_or("no kernel time")? as f64;
        in_run = in_run.min(ms);
    }
    let resident = backend
        .time_relaunch(reps + 5)
        .map_err(|e| format!("{} launched again: {e}", plan.map.name))?;
    Ok(KernelMs { in_run, resident })
}

/// `key=value` fields of a bandwidth figure, both ways.
pub fn bandwidth_fields(bytes: f64, ms: KernelMs, memcpy_gbps: f64) -> String {
    let (run_g, resident_g) = (gbps(bytes, ms.in_run), gbps(bytes, ms.resident));
    format!(
        "ms={:.4} gbps={run_g:.1} pct_of_memcpy={:.1} resident_ms={:.4} resident_gbps={resident_g:.1} resident_pct_of_memcpy={:.1}",
        ms.in_run,
        100.0 * run_g / memcpy_gbps,
        ms.resident,
        100.0 * resident_g / memcpy_gbps
    )
}

pub fn gbps(bytes: f64, ms: f64) -> f64 {
    bytes / (ms * 1e-3) / 1e9
}

/// The plan's kernel (fast mode, the schedule `run` would use), compiled and
/// loaded outside the backend, for raw launches; the module must outlive
/// the function's use.
pub fn raw_kernel(
    backend: &CudaBackend,
    plan: &LaunchPlan,
) -> Result<
    (
        mpmd_cuda::EmittedModule,
        cudarc::driver::CudaFunction,
        std::sync::Arc<cudarc::driver::CudaModule>,
    ),
    String,
> {
    let emitted = emit_module(plan, Mode::Fast).map_err(|e| e.to_string())?;
    let cubin = backend
        .cubin_for(&emitted, false)
        .map_err(|e| e.to_string())?;
    // SAFETY: the benchmark uses only the backend's stream.
    let loaded = unsafe { backend.context() }
        .load_module(cudarc::nvrtc::Ptx::from_binary(cubin.bytes))
        .map_err(|e| format!("{e:?}"))?;
    let function = loaded
        .load_function(&emitted.kernel_name)
        .map_err(|e| format!("{e:?}"))?;
    Ok((emitted, function, loaded))
}

/// A timing event (cudarc's default events cannot be timed).
pub fn timing_event(backend: &CudaBackend) -> Result<cudarc::driver::CudaEvent, String> {
    // SAFETY: the benchmark uses only the backend's stream.
    unsafe { backend.context() }
        .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| format!("{e:?}"))
}

/// Kernels launched back to back on one stream, the way a user launches
/// kernels by hand, timed by one pair of events around all of them (so the
/// gaps between launches count, as they do for a user). Each is a plan with
/// its generated module (block-index or ticket schedule; ticket kernels get
/// their counter cleared before each launch); buffers are shared by operand
/// name, `x` holds the pipeline input and `y` is checked at the end.
pub fn raw_launches_ms(
    backend: &CudaBackend,
    launches: &[(LaunchPlan, mpmd_cuda::EmittedModule)],
    len: u32,
    reps: usize,
) -> Result<f64, String> {
    // SAFETY: the benchmark issues everything on this one stream.
    let stream = unsafe { backend.stream() }.clone();
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    let mut buffers: HashMap<String, cudarc::driver::CudaSlice<u32>> = HashMap::new();
    let x: Vec<u32> = f32_input(len).words().to_vec();
    let mut kernels = Vec::new();
    for (plan, emitted) in launches {
        if emitted.schedule == BlockSchedule::ResidentWalk {
            return Err("raw launches take block-index or ticket kernels".into());
        }
        for buffer in &plan.buffers {
            let name = &buffer.operands[0];
            if let std::collections::hash_map::Entry::Vacant(slot) = buffers.entry(name.clone()) {
                slot.insert(if name == "x" {
                    stream.clone_htod(&x).map_err(err)?
                } else {
                    stream
                        .alloc_zeros::<u32>(mpmd_cuda::buffer_words(buffer))
                        .map_err(err)?
                });
            }
        }
        let cubin = backend
            .cubin_for(emitted, false)
            .map_err(|e| e.to_string())?;
        // SAFETY: the benchmark uses only the backend's stream.
        let loaded = unsafe { backend.context() }
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin.bytes))
            .map_err(err)?;
        let function = loaded.load_function(&emitted.kernel_name).map_err(err)?;
        let ctl = stream.alloc_zeros::<u32>(CONTROL_WORDS).map_err(err)?;
        kernels.push((plan, emitted, function, ctl, loaded));
    }
    let timeout: u64 = 10_000_000_000;
    let mut launch_all = || -> Result<(), String> {
        for (plan, emitted, function, ctl, _) in &mut kernels {
            if emitted.schedule == BlockSchedule::Tickets {
                stream.memset_zeros(ctl).map_err(err)?;
            }
            let mut launch = stream.launch_builder(function);
            for param in &emitted.params {
                match param {
                    KernelParam::Buffer(index) => {
                        launch.arg(&buffers[&plan.buffer(*index).operands[0]])
                    }
                    KernelParam::Control => launch.arg(&*ctl),
                    KernelParam::WaitTimeoutNs => launch.arg(&timeout),
                    KernelParam::Scalar(_) => return Err("the stages take no scalars".into()),
                };
            }
            let config = LaunchConfig {
                grid_dim: (emitted.total_blocks as u32, 1, 1),
                block_dim: (emitted.block_dim, 1, 1),
                shared_mem_bytes: emitted.dynamic_smem_bytes,
            };
            // SAFETY: the arguments follow the kernel's parameter list and
            // every buffer holds its plan buffer's elements.
            unsafe { launch.launch(config) }.map_err(err)?;
        }
        Ok(())
    };
    launch_all()?;
    stream.synchronize().map_err(err)?;
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let (start, end) = (timing_event(backend)?, timing_event(backend)?);
        start.record(&stream).map_err(err)?;
        launch_all()?;
        end.record(&stream).map_err(err)?;
        let ms = mpmd_cuda::event_elapsed_ms(&start, &end).ok_or("no event time")?;
        best = best.min(ms as f64);
    }
    let y = stream.clone_dtoh(&buffers["y"]).map_err(err)?;
    let x1 = f32::from_bits(x[1]);
    let want = (x1 * 2.0 + 1.0) * (x1 * 2.0 + 1.0);
    if f32::from_bits(y[1]) != want {
        return Err(format!(
            "raw launches: y[1] = {}, expected {want}",
            f32::from_bits(y[1])
        ));
    }
    Ok(best)
}
