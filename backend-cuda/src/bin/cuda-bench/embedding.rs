//! Runs on caller-owned device memory (`CudaBackend::prepare` + `enqueue`):
//! the call overhead of a prepared tiny map against a raw launch of the
//! same CUBIN on the same stream (each waited for, and back to back), and
//! the bare backend's time per call over 256 MiB, which
//! `python/benches/jax_bench.py` compares JAX under `jit` with.

use std::time::Instant;

use cudarc::driver::{DevicePtr, LaunchConfig, PushKernelArg};
use mpmd_core::ir::{Literal, ScalarType};
use mpmd_core::plan::lower;
use mpmd_core::Mode;
use mpmd_cuda::KernelParam;
use mpmd_cuda::{CudaBackend, CudaBuffer, DeviceArgs, CONTROL_WORDS};

use crate::benchmarks::{plans, tiny};
use crate::goals::Goals;
use crate::timing::{raw_kernel, timing_event};

/// The map the JAX benchmark runs too.
const AXPB: &str = include_str!("../../../../python/benches/axpb.mpmd");

pub fn embedding_figures(backend: &mut CudaBackend, goals: &mut Goals) -> Result<(), String> {
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    let run = |e: mpmd_core::RunError| e.to_string();
    // SAFETY: the benchmark issues everything on the backend's one stream.
    let stream = unsafe { backend.stream() }.clone();

    // The tiny map (y[t] = t over 32 threads) on a caller buffer, and the
    // same CUBIN launched by hand on the same stream.
    let plan = &plans(&tiny())[0];
    let prepared = backend.prepare(plan, Mode::Fast).map_err(run)?;
    let y = stream.alloc_zeros::<u32>(32).map_err(err)?;
    let y_address = y.device_ptr(&stream).0;
    let args = DeviceArgs::default().buffer("y", CudaBuffer::new(y_address, ScalarType::U32, 32));
    let (emitted, function, _module) = raw_kernel(backend, plan)?;
    let ctl = stream.alloc_zeros::<u32>(CONTROL_WORDS).map_err(err)?;
    let timeout: u64 = 10_000_000_000;
    let config = LaunchConfig {
        grid_dim: (emitted.total_blocks as u32, 1, 1),
        block_dim: (emitted.block_dim, 1, 1),
        shared_mem_bytes: emitted.dynamic_smem_bytes,
    };
    let raw_launch = || -> Result<(), String> {
        let mut launch = stream.launch_builder(&function);
        for param in &emitted.params {
            match param {
                KernelParam::Buffer(_) => launch.arg(&y),
                KernelParam::Control => launch.arg(&ctl),
                KernelParam::WaitTimeoutNs => launch.arg(&timeout),
                KernelParam::Scalar(_) => return Err("the tiny kernel takes no scalars".into()),
            };
        }
        // SAFETY: the arguments follow the kernel's parameter list.
        unsafe { launch.launch(config) }.map_err(err)?;
        Ok(())
    };
    let (rounds, calls) = (5, 400);
    // Best microseconds per call: [prepared, raw] x [each waited for, back to back].
    let mut best_us = [[f64::INFINITY; 2]; 2];
    for round in 0..=rounds {
        for (waited, row) in best_us.iter_mut().enumerate() {
            let waited = waited == 0;
            for (slot, best) in row.iter_mut().enumerate() {
                let start = Instant::now();
                for _ in 0..calls {
                    if slot == 0 {
                        // SAFETY: `y` holds 32 u32 and outlives the runs.
                        unsafe { backend.enqueue(&prepared, &args) }.map_err(run)?;
                        if waited {
                            backend.synchronize().map_err(run)?;
                        }
                    } else {
                        raw_launch()?;
                        if waited {
                            stream.synchronize().map_err(err)?;
                        }
                    }
                }
                if slot == 0 {
                    backend.synchronize().map_err(run)?;
                } else {
                    stream.synchronize().map_err(err)?;
                }
                // Round 0 warms up.
                if round > 0 {
                    *best = best.min(start.elapsed().as_secs_f64() * 1e6 / calls as f64);
                }
            }
        }
    }
    let [[prepared_us, raw_us], [prepared_pipelined_us, raw_pipelined_us]] = best_us;
    let ratio = prepared_us / raw_us;
    println!(
        "bench.embedding.call_overhead prepared_us={prepared_us:.2} raw_launch_us={raw_us:.2} ratio={ratio:.3} \
         pipelined_prepared_us={prepared_pipelined_us:.2} pipelined_raw_us={raw_pipelined_us:.2} pipelined_ratio={:.3}",
        prepared_pipelined_us / raw_pipelined_us
    );
    goals.at_most(
        "embedding_call_ratio",
        ratio,
        "embedding.call_overhead, prepared enqueue + synchronize / raw launch + sync".into(),
    );

    // 256 MiB on caller memory: back to back between two events, per call.
    let (module, _) = mpmd_core::text::parse(AXPB).map_err(|e| format!("{e:?}"))?;
    let module = mpmd_core::validate::validate(&module, &Default::default())
        .map_err(|d| format!("{d:?}"))?;
    let plan = lower(&module, "axpb_256mib").map_err(|e| e.to_string())?;
    let prepared = backend.prepare(&plan, Mode::Fast).map_err(run)?;
    let len = 64usize << 20;
    let x = stream.alloc_zeros::<f32>(len).map_err(err)?;
    let y = stream.alloc_zeros::<f32>(len).map_err(err)?;
    let args = DeviceArgs::default()
        .buffer(
            "x",
            CudaBuffer::new(x.device_ptr(&stream).0, ScalarType::F32, len as u64),
        )
        .buffer(
            "y",
            CudaBuffer::new(y.device_ptr(&stream).0, ScalarType::F32, len as u64),
        )
        .scalar("alpha", Literal::f32(2.0));
    let reps = 20;
    let mut best_ms = f64::INFINITY;
    for round in 0..=5 {
        let (start, end) = (timing_event(backend)?, timing_event(backend)?);
        start.record(&stream).map_err(err)?;
        for _ in 0..reps {
            // SAFETY: x and y hold 64 Mi f32 each and outlive the runs.
            unsafe { backend.enqueue(&prepared, &args) }.map_err(run)?;
        }
        end.record(&stream).map_err(err)?;
        backend.synchronize().map_err(run)?;
        let ms = mpmd_cuda::event_elapsed_ms(&start, &end).ok_or("no event time")?;
        if round > 0 {
            best_ms = best_ms.min(ms as f64 / reps as f64);
        }
    }
    let gbps = 2.0 * (len * 4) as f64 / (best_ms * 1e-3) / 1e9;
    println!("bench.embedding.bare_256mib ms={best_ms:.4} gbps={gbps:.1}");
    Ok(())
}
