//! `cuda-bench`: benchmarks of the CUDA backend.
//!
//! Always prints ptxas registers and spills (sm_90) of every benchmark
//! kernel, those (sm_80 and sm_90) of both maps of the GEMM example
//! (`DIR/stream_k_gemm.mpmd`, read at run time) at 64x64 and 128x128 tiles
//! (`ptxas.gemm.*`), and the cold-compile and cache-hit times of every
//! example (`--examples DIR`, default the repository's `examples/`). With a
//! GPU (and unless `--compile-only`), also runs, each beside its baseline:
//! - `cuMemcpyDtoD` of 256 MiB (the baseline), also right after an upload;
//! - hand-written CUDA C copies and reductions (`reference_kernels.cu`), to
//!   show what the device reaches with 4- and 16-byte accesses and shuffles;
//! - copy and elementwise over 256 MiB, and a block reduction; the same in
//!   f16 and bf16 (256 MiB of them, the reduction bf16 → f32), each also as a
//!   share of the f32 figure;
//! - a two-program map, fused, against its slower program alone;
//! - three-stage semaphore pipelines, against three separate launches and
//!   against the same fused kernel with per-block tickets;
//! - the call overhead of a tiny kernel, against a raw launch of the same CUBIN;
//! - runs on caller-owned device memory (`embedding.rs`): a prepared tiny map
//!   against a raw launch of the same CUBIN on the same stream, and the bare
//!   backend over 256 MiB (what JAX under `jit` is compared with);
//! - the bf16 GEMM example (`gemm.rs`): its `stream_k` and `data_parallel`
//!   maps at both tile configurations, prepared on the same device buffers
//!   as cuBLAS `cublasGemmEx` (bf16 in, f32 out), at 4096^3 and
//!   1536x1536x16384, in TFLOP/s, each result checked against cuBLAS's
//!   (exact by construction); cuBLAS is loaded at run time, and without it
//!   a `gemm.cublas missing: ...` line leaves the GEMM goals unmeasured;
//!
//! and ends with the speed goals (`goal.*` lines, `goals.rs`).
//!
//! Output: one `key value` line per figure, for scripts/gpu-check.sh.
//! `--source NAME` prints the generated CUDA C of one benchmark.
//!
//! `benchmarks.rs` builds the maps, `timing.rs` times kernels,
//! `reference.rs` the hand-written kernels, `compile_figures.rs` the figures
//! that need no GPU, `gemm.rs` the GEMM against cuBLAS, whose
//! configurations (`test-support/gemm_config.rs`) `tests/gemm.rs` and the
//! interpreter's `core/benches/gemm_interp.rs` share.

mod benchmarks;
mod compile_figures;
mod embedding;
mod gemm;
#[path = "../../../../test-support/gemm_config.rs"]
mod gemm_config;
mod goals;
mod reference;
mod timing;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use cudarc::driver::{LaunchConfig, PushKernelArg};
use mpmd_core::host::CallArgs;
use mpmd_core::ir::ScalarType::{BF16, F16};
use mpmd_core::ir::{Literal, Module};
use mpmd_core::plan::LaunchPlan;
use mpmd_core::{Backend, Mode, RunOptions};
use mpmd_cuda::{
    emit_module, emit_module_with, BlockSchedule, CudaBackend, CudaOptions, KernelParam,
    CONTROL_WORDS,
};

use benchmarks::*;
use compile_figures::{compile_cache_figures, compile_figures, gemm_compile_figures};
use goals::Goals;
use reference::reference_figures;
use timing::*;

fn run_gpu(examples: &std::path::Path) -> Result<(), String> {
    let mut goals = Goals::default();
    let mut backend = CudaBackend::new(CudaOptions {
        time_kernels: true,
        ..CudaOptions::default()
    })
    .map_err(|e| e.to_string())?;
    println!(
        "device name={:?} sm_{} sms={}",
        backend.device_name(),
        backend.arch(),
        backend.sm_count()
    );
    let (major, minor) = mpmd_cuda::nvrtc_version().map_err(|e| e.to_string())?;
    println!("nvrtc version={major}.{minor}");
    if let Some((a, b)) = mpmd_cuda::driver_version() {
        println!("driver cuda_version={a}.{b}");
    }
    let reps = 5;
    let big_bytes = BIG as f64 * 4.0;

    // cuMemcpyDtoD of 256 MiB: back to back (the baseline), and each right
    // after uploading its source, as a map's kernel runs inside `run` (does
    // the GPU's state after a large upload slow any kernel down?).
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    // SAFETY: the benchmark issues everything on this one stream.
    let stream = unsafe { backend.stream() }.clone();
    let mut src = stream.alloc_zeros::<u32>(BIG as usize).map_err(err)?;
    let mut dst = stream.alloc_zeros::<u32>(BIG as usize).map_err(err)?;
    let upload = f32_input(BIG).words().to_vec();
    let mut memcpy_best = [f64::INFINITY; 2];
    for after_upload in [false, true] {
        for _ in 0..reps {
            if after_upload {
                stream.memcpy_htod(&upload, &mut src).map_err(err)?;
            }
            let (start, end) = (timing_event(&backend)?, timing_event(&backend)?);
            start.record(&stream).map_err(err)?;
            stream.memcpy_dtod(&src, &mut dst).map_err(err)?;
            end.record(&stream).map_err(err)?;
            let ms = mpmd_cuda::event_elapsed_ms(&start, &end).ok_or("no event time")?;
            let best = &mut memcpy_best[after_upload as usize];
            *best = best.min(ms as f64);
        }
    }
    drop((src, dst, upload));
    let [memcpy_ms, after_upload_ms] = memcpy_best;
    println!(
        "bench.memcpy_dtod ms={memcpy_ms:.4} gbps={:.1}",
        gbps(2.0 * big_bytes, memcpy_ms)
    );
    println!(
        "bench.memcpy_dtod_after_upload ms={after_upload_ms:.4} gbps={:.1} pct_of_memcpy={:.1}",
        gbps(2.0 * big_bytes, after_upload_ms),
        100.0 * memcpy_ms / after_upload_ms
    );

    let memcpy_gbps = gbps(2.0 * big_bytes, memcpy_ms);
    reference_figures(&backend, memcpy_gbps, reps)?;

    let x = f32_input(BIG);
    let mut args = CallArgs::default();
    args.inputs.insert("x".into(), x.clone());
    let mut ew_args = args.clone();
    ew_args.scalars.insert("a".into(), Literal::f32(2.0));
    ew_args.scalars.insert("c".into(), Literal::f32(1.0));
    // Bandwidth goals are judged on the resident figure: the kernel timed
    // as the memcpy baseline is, on data already on the device. A 16-bit
    // benchmark also gives its resident bytes/s as a share of the f32 one
    // of the same shape (`f32_gbps`).
    let mut f32_gbps: HashMap<String, f64> = HashMap::new();
    let mut bandwidth =
        |name: &str, goal, module: Module, args: &CallArgs, bytes: f64, like_f32: Option<&str>| {
            let ms = kernel_ms(&mut backend, &plans(&module)[0], args, reps)?;
            let resident_gbps = gbps(bytes, ms.resident);
            let vs_f32 = match like_f32.and_then(|f32_name| f32_gbps.get(f32_name)) {
                Some(f32_figure) => {
                    format!(" resident_ratio_to_f32={:.3}", resident_gbps / f32_figure)
                }
                None => String::new(),
            };
            println!(
                "bench.{name} {}{vs_f32}",
                bandwidth_fields(bytes, ms, memcpy_gbps)
            );
            if like_f32.is_none() {
                f32_gbps.insert(name.to_string(), resident_gbps);
            }
            let resident_pct = 100.0 * resident_gbps / memcpy_gbps;
            goals.at_least(goal, resident_pct, format!("{name}, resident"));
            Ok::<(), String>(())
        };
    for split in SPLITS {
        let label = split.label();
        let copied = 2.0 * big_bytes;
        bandwidth(
            &format!("copy.{label}"),
            "copy_pct_of_memcpy",
            copy(split),
            &args,
            copied,
            None,
        )?;
        let name = format!("elementwise.{label}");
        let goal = "elementwise_pct_of_memcpy";
        bandwidth(&name, goal, elementwise(split), &ew_args, copied, None)?;
    }
    for split in REDUCE_SPLITS {
        let name = format!("reduction.{}", split.label());
        let goal = "reduction_pct_of_memcpy";
        bandwidth(&name, goal, reduction(split), &args, big_bytes, None)?;
    }
    // f16 and bf16 over the same 256 MiB (twice the elements), beside the
    // f32 figure of the same split.
    for ty in [F16, BF16] {
        let t = type_label(ty);
        let mut args16 = CallArgs::default();
        args16.inputs.insert("x".into(), input16(ty, BIG16));
        let mut ew_args16 = args16.clone();
        let value = |v: f32| {
            let bits = mpmd_core::numerics::from_f32(ty, v).unwrap_or(0);
            Literal::from_bits(ty, u32::from(bits))
        };
        ew_args16.scalars.insert("a".into(), value(2.0));
        ew_args16.scalars.insert("c".into(), value(1.0));
        let (copy_goal, ew_goal) = if ty == F16 {
            ("copy_f16_pct_of_memcpy", "elementwise_f16_pct_of_memcpy")
        } else {
            ("copy_bf16_pct_of_memcpy", "elementwise_bf16_pct_of_memcpy")
        };
        for split in SPLITS {
            let label = split.label();
            let copied = 2.0 * big_bytes;
            let f32_name = format!("copy.{label}");
            let module = copy16(ty, split);
            let name = format!("copy_{t}.{label}");
            bandwidth(&name, copy_goal, module, &args16, copied, Some(&f32_name))?;
            let f32_name = format!("elementwise.{label}");
            let module = elementwise16(ty, split);
            let name = format!("elementwise_{t}.{label}");
            bandwidth(&name, ew_goal, module, &ew_args16, copied, Some(&f32_name))?;
        }
    }
    let mut bf16_args = CallArgs::default();
    bf16_args.inputs.insert("x".into(), input16(BF16, BIG16));
    for split in REDUCE_SPLITS {
        let label = split.label();
        let f32_name = format!("reduction.{label}");
        let name = format!("reduction_bf16.{label}");
        let goal = "reduction_bf16_pct_of_memcpy";
        let module = reduction_bf16(split);
        bandwidth(&name, goal, module, &bf16_args, big_bytes, Some(&f32_name))?;
    }

    let mut two_args = CallArgs::default();
    two_args.inputs.insert("xa".into(), x);
    two_args.inputs.insert("xb".into(), f32_input(BIG / 4));
    let fused = kernel_ms(&mut backend, &plans(&two_program(true))[0], &two_args, reps)?;
    let alone = kernel_ms(
        &mut backend,
        &plans(&two_program(false))[0],
        &two_args,
        reps,
    )?;
    println!(
        "bench.two_program fused_ms={:.4} slower_alone_ms={:.4} ratio={:.3} resident_fused_ms={:.4} resident_alone_ms={:.4} resident_ratio={:.3}",
        fused.in_run,
        alone.in_run,
        fused.in_run / alone.in_run,
        fused.resident,
        alone.resident,
        fused.resident / alone.resident
    );
    goals.at_most(
        "two_program_fused_ratio",
        fused.resident / alone.resident,
        "two_program, resident".into(),
    );

    for (len, stages) in PIPELINES {
        let mut pipe_args = CallArgs::default();
        pipe_args.inputs.insert("x".into(), f32_input(len));
        let fused_plan = &plans(&pipeline_fused(len, stages))[0];
        let pipe = kernel_ms(&mut backend, fused_plan, &pipe_args, reps)?;
        // The fused result must be the three stages' result.
        let fused_y = backend
            .run(fused_plan, &pipe_args, &RunOptions::default())
            .map_err(|e| e.to_string())?
            .outputs["y"]
            .to_f32();
        let want = |i: usize| {
            let v = (i % 1000) as f32 * 0.5 * 2.0 + 1.0;
            v * v
        };
        if let Some(i) = (0..len as usize).find(|&i| fused_y[i] != want(i)) {
            return Err(format!(
                "fused pipeline: y[{i}] = {}, expected {}",
                fused_y[i],
                want(i)
            ));
        }
        let separate: Vec<(LaunchPlan, mpmd_cuda::EmittedModule)> =
            plans(&pipeline_separate(len, stages))
                .into_iter()
                .map(|plan| {
                    let module = emit_module(&plan, Mode::Fast).map_err(|e| e.to_string())?;
                    Ok((plan, module))
                })
                .collect::<Result<_, String>>()?;
        let separate_ms = raw_launches_ms(&backend, &separate, len, reps)?;
        // The same fused kernel with per-block tickets instead of the walk
        // (what GPUs without cooperative launch run).
        let tickets = emit_module_with(fused_plan, Mode::Fast, BlockSchedule::Tickets)
            .map_err(|e| e.to_string())?;
        let tickets_ms = raw_launches_ms(&backend, &[(fused_plan.clone(), tickets)], len, reps)?;
        println!(
            "bench.pipeline.{} fused_ms={:.4} three_launches_ms={separate_ms:.4} ratio={:.3} resident_fused_ms={:.4} resident_ratio={:.3} tickets_ms={tickets_ms:.4} tickets_ratio={:.3}",
            pipeline_label(len, stages),
            pipe.in_run,
            pipe.in_run / separate_ms,
            pipe.resident,
            pipe.resident / separate_ms,
            tickets_ms / separate_ms
        );
        // Judged at 64 MiB per stage (the 4 MiB one is launch-bound).
        if len == 1 << 24 {
            goals.at_most(
                "pipeline_ratio",
                pipe.resident / separate_ms,
                format!("pipeline.{}, resident", pipeline_label(len, stages)),
            );
        }
    }

    // Call overhead of a tiny kernel: the whole `run` (plan cached,
    // upload, launch, wait, read-back, error check) against raw cudarc
    // launches of the same CUBIN, with and without reading the output back.
    // The three alternate in rounds (the host's speed drifts), and each
    // keeps its best round.
    backend.set_time_kernels(false);
    let tiny_plan = &plans(&tiny())[0];
    let no_args = CallArgs::default();
    let (emitted, function, _loaded) = raw_kernel(&backend, tiny_plan)?;
    // SAFETY: the benchmark issues everything on this one stream.
    let stream = unsafe { backend.stream() }.clone();
    let y = stream
        .alloc_zeros::<u32>(32)
        .map_err(|e| format!("{e:?}"))?;
    let mut ctl = stream
        .alloc_zeros::<u32>(CONTROL_WORDS)
        .map_err(|e| format!("{e:?}"))?;
    let timeout: u64 = 10_000_000_000;
    let config = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut raw_call = |read_back: bool| -> Result<(), String> {
        stream
            .memset_zeros(&mut ctl)
            .map_err(|e| format!("{e:?}"))?;
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
        unsafe { launch.launch(config) }.map_err(|e| format!("{e:?}"))?;
        if read_back {
            stream.clone_dtoh(&y).map_err(|e| format!("{e:?}"))?;
        }
        stream.synchronize().map_err(|e| format!("{e:?}"))
    };
    let (rounds, calls) = (5, 400);
    // Best microseconds per call: `run`, raw launch, raw launch + read-back.
    let mut best_us = [f64::INFINITY; 3];
    for round in 0..=rounds {
        for (slot, best) in best_us.iter_mut().enumerate() {
            let start = Instant::now();
            for _ in 0..calls {
                match slot {
                    0 => backend
                        .run(tiny_plan, &no_args, &RunOptions::default())
                        .map(|_| ())
                        .map_err(|e| e.to_string())?,
                    _ => raw_call(slot == 2)?,
                }
            }
            // Round 0 warms up.
            if round > 0 {
                *best = best.min(start.elapsed().as_secs_f64() * 1e6 / calls as f64);
            }
        }
    }
    let [run_us, raw_us, raw_readback_us] = best_us;
    println!(
        "bench.call_overhead run_us={run_us:.2} raw_launch_us={raw_us:.2} raw_launch_readback_us={raw_readback_us:.2} ratio_vs_raw={:.3} ratio_vs_raw_readback={:.3}",
        run_us / raw_us,
        run_us / raw_readback_us
    );
    goals.at_most(
        "call_overhead_ratio",
        run_us / raw_us,
        "call_overhead, run / raw launch + sync".into(),
    );
    embedding::embedding_figures(&mut backend, &mut goals)?;
    // A wrong GEMM result fails the run after the goals are printed.
    let gemm = gemm::gemm_figures(&mut backend, examples, &mut goals);
    for line in goals.lines() {
        println!("{line}");
    }
    gemm
}

/// `--source NAME`: the generated CUDA C of benchmark `NAME` (one of the
/// `ptxas.NAME.*` lines), for reading what is being timed.
fn print_source(name: &str) -> i32 {
    let Some((_, m)) = benchmarks().into_iter().find(|(n, _)| n == name) else {
        let names: Vec<String> = benchmarks().into_iter().map(|(n, _)| n).collect();
        eprintln!("no benchmark `{name}`; one of: {}", names.join(", "));
        return 2;
    };
    for plan in plans(&m) {
        match emit_module(&plan, Mode::Fast) {
            Ok(module) => println!("{}", module.source),
            Err(e) => {
                eprintln!("{}: {e}", plan.map.name);
                return 1;
            }
        }
    }
    0
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let compile_only = args.iter().any(|a| a == "--compile-only");
    if let Some(name) = args
        .iter()
        .position(|a| a == "--source")
        .and_then(|i| args.get(i + 1))
    {
        std::process::exit(print_source(name));
    }
    let examples = args
        .iter()
        .position(|a| a == "--examples")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        // From the working directory (a checkout's root or backend-cuda),
        // never from where the binary was built.
        .unwrap_or_else(|| {
            ["examples", "../examples"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_dir())
                .unwrap_or_else(|| PathBuf::from("examples"))
        });
    let arch = std::env::var("MPMD_BENCH_ARCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(mpmd_cuda::CHECK_ARCH);
    let compiled = compile_figures()
        & gemm_compile_figures(&examples)
        & compile_cache_figures(&examples, arch);
    let mut status = if compiled { 0 } else { 1 };
    if compile_only {
        std::process::exit(status);
    }
    if !mpmd_cuda::driver_present() {
        println!("gpu skipped: no CUDA driver (libcuda.so.1) on this machine");
        std::process::exit(status);
    }
    if let Err(e) = run_gpu(&examples) {
        println!("gpu error={}", e.replace('\n', " | "));
        status = 1;
    }
    std::process::exit(status);
}
