//! Hand-written CUDA C timed beside the generated kernels.

use cudarc::driver::{LaunchConfig, PushKernelArg};
use mpmd_cuda::{compile_with_cache, CompileOptions, CudaBackend, ModuleCache, NvrtcOutput};

use crate::benchmarks::{f32_input, BIG};
use crate::timing::{gbps, timing_event};

/// Hand-written kernels (`reference_kernels.cu`): what the device reaches
/// with 4-byte and 16-byte accesses and with warp shuffles, timed beside the
/// generated kernels.
pub const REFERENCE_SOURCE: &str = include_str!("reference_kernels.cu");

/// One hand-written kernel: name, threads per block, floats per thread,
/// and whether it reads and writes `BIG` floats (copy) or only reads them.
pub struct Reference {
    kernel: &'static str,
    threads: u32,
    floats_per_thread: u32,
    copies: bool,
}

pub const REFERENCES: [Reference; 7] = [
    Reference {
        kernel: "ref_copy_scalar8",
        threads: 256,
        floats_per_thread: 8,
        copies: true,
    },
    Reference {
        kernel: "ref_copy_scalar8",
        threads: 512,
        floats_per_thread: 8,
        copies: true,
    },
    Reference {
        kernel: "ref_copy_vec4x2",
        threads: 256,
        floats_per_thread: 8,
        copies: true,
    },
    Reference {
        kernel: "ref_copy_vec4x4",
        threads: 256,
        floats_per_thread: 16,
        copies: true,
    },
    Reference {
        kernel: "ref_reduce_scalar16",
        threads: 512,
        floats_per_thread: 16,
        copies: false,
    },
    Reference {
        kernel: "ref_reduce_vec4x4",
        threads: 256,
        floats_per_thread: 16,
        copies: false,
    },
    Reference {
        kernel: "ref_reduce_vec4x4",
        threads: 512,
        floats_per_thread: 16,
        copies: false,
    },
];

/// Times every [`Reference`] kernel (best of `reps`, events) and prints its
/// bandwidth as a share of `memcpy_gbps`.
pub fn reference_figures(
    backend: &CudaBackend,
    memcpy_gbps: f64,
    reps: usize,
) -> Result<(), String> {
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    let options = CompileOptions {
        arch: backend.arch(),
        ..CompileOptions::default()
    };
    let cubin = compile_with_cache(
        REFERENCE_SOURCE,
        &options,
        NvrtcOutput::Cubin,
        ModuleCache::global(),
    )
    .map_err(|e| format!("reference kernels: {e}"))?;
    // SAFETY: the benchmark uses only the backend's stream.
    let module = unsafe { backend.context() }
        .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
        .map_err(err)?;
    // SAFETY: the benchmark issues everything on this one stream.
    let stream = unsafe { backend.stream() }.clone();
    let x = stream.clone_htod(f32_input(BIG).words()).map_err(err)?;
    let y = stream.alloc_zeros::<u32>(BIG as usize).map_err(err)?;
    for reference in &REFERENCES {
        let function = module.load_function(reference.kernel).map_err(err)?;
        let per_block = reference.threads * reference.floats_per_thread;
        let config = LaunchConfig {
            grid_dim: (BIG / per_block, 1, 1),
            block_dim: (reference.threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut best = f64::INFINITY;
        for _ in 0..=reps {
            let (start, end) = (timing_event(backend)?, timing_event(backend)?);
            start.record(&stream).map_err(err)?;
            let mut launch = stream.launch_builder(&function);
            launch.arg(&x).arg(&y);
            // SAFETY: both buffers hold `BIG` floats and the grid covers
            // exactly `BIG` floats (a sum per block fits in `y` too).
            unsafe { launch.launch(config) }.map_err(err)?;
            end.record(&stream).map_err(err)?;
            let ms = mpmd_cuda::event_elapsed_ms(&start, &end).ok_or("no event time")?;
            best = best.min(ms as f64);
        }
        let factor = if reference.copies { 2.0 } else { 1.0 };
        let g = gbps(factor * BIG as f64 * 4.0, best);
        println!(
            "bench.reference.{}.t{} ms={best:.4} gbps={g:.1} pct_of_memcpy={:.1}",
            reference.kernel,
            reference.threads,
            100.0 * g / memcpy_gbps
        );
    }
    Ok(())
}
