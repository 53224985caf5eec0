//! bf16 GEMM (`examples/stream_k_gemm.mpmd`) against cuBLAS on the same
//! device buffers: cuBLAS `cublasGemmEx` (bf16 A and B, f32 C,
//! `CUBLAS_COMPUTE_32F`), and the example's `stream_k` and `data_parallel`
//! maps at each configuration of `gemm_config.rs`, prepared once on the
//! caller's memory (`CudaBackend::prepare` + `enqueue`) with WAVE = the
//! device's SM count, one plan for every shape.
//!
//! Inputs are multiples of 1/4 in [-2, 2]: every product is a multiple of
//! 1/16 of magnitude at most 4, so every partial sum of any order is a
//! multiple of 1/16 below 4 * 16384 = 2^16, which f32 holds exactly (2^20
//! sixteenths < 2^24). Any summation order (cuBLAS's, a stream-K fix-up's,
//! the tensor cores') gives the same exact result, so an mpmd result must
//! equal cuBLAS's bit for bit: the bound on max |diff| / (k max|a| max|b|)
//! is 0, and anything else is a wrong result, not rounding. cuBLAS's
//! result is itself checked against an exact host sum at sampled entries.

use std::ffi::c_void;
use std::path::Path;

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use mpmd_core::inputs::Rng;
use mpmd_core::ir::ScalarType;
use mpmd_core::plan::lower;
use mpmd_core::Mode;
use mpmd_cuda::{CudaBackend, CudaBuffer, CudaPrepared, DeviceArgs};

use crate::gemm_config::*;
use crate::goals::Goals;
use crate::timing::timing_event;

/// Calls before timing, and calls timed (between one pair of events).
const WARM_UP: usize = 2;
const TIMED: usize = 5;

/// The entries of cuBLAS's result checked against an exact host sum.
const SAMPLES: usize = 256;

/// What c holds before each verified run: a NaN no GEMM writes, so an
/// element left unwritten (or written past m * n) shows.
const SENTINEL: u32 = 0x7fc0_dead;

/// The shape of each goal.
const VS_CUBLAS_SHAPE: GemmShape = GEMM_SHAPES[0];
const STREAM_K_SHAPE: GemmShape = GEMM_SHAPES[1];

/// The library names cudarc tries for cuBLAS, for the message when none loads.
fn cublas_candidates() -> Vec<String> {
    cudarc::get_lib_name_candidates("cublas")
}

/// Host inputs: the values (for the exact reference) and their bf16 bits.
struct Operand {
    values: Vec<f32>,
    bits: Vec<u16>,
}

fn operand(len: usize, seed: u64) -> Operand {
    let values = quarters(len, seed);
    let bits = bf16_bits(&values);
    Operand { values, bits }
}

/// TFLOP/s of one GEMM of `shape` in `ms` (2 flops a multiply-add).
fn tflops(shape: GemmShape, ms: f64) -> f64 {
    2.0 * shape.macs() / (ms * 1e-3) / 1e12
}

/// Mean ms per call of `TIMED` calls of `call` after `WARM_UP` ones; the
/// backend's synchronisation reports an error any kernel recorded.
fn time_calls(
    backend: &mut CudaBackend,
    stream: &CudaStream,
    mut call: impl FnMut(&mut CudaBackend) -> Result<(), String>,
) -> Result<f64, String> {
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    for _ in 0..WARM_UP {
        call(backend)?;
    }
    backend.synchronize().map_err(|e| e.to_string())?;
    let (start, end) = (timing_event(backend)?, timing_event(backend)?);
    start.record(stream).map_err(err)?;
    for _ in 0..TIMED {
        call(backend)?;
    }
    end.record(stream).map_err(err)?;
    backend.synchronize().map_err(|e| e.to_string())?;
    let ms = mpmd_cuda::event_elapsed_ms(&start, &end).ok_or("no event time")?;
    Ok(ms as f64 / TIMED as f64)
}

/// Device buffers at the example's capacities, shared by cuBLAS and mpmd.
struct Buffers {
    a: CudaSlice<u16>,
    b: CudaSlice<u16>,
    c: CudaSlice<f32>,
    reference: CudaSlice<f32>,
}

impl Buffers {
    fn address<T>(slice: &CudaSlice<T>, stream: &CudaStream) -> u64 {
        slice.device_ptr(stream).0
    }

    fn mpmd_args(
        &self,
        stream: &CudaStream,
        caps: GemmCaps,
        shape: GemmShape,
    ) -> DeviceArgs<CudaBuffer> {
        let buffer = |address, ty, len: u32| CudaBuffer::new(address, ty, u64::from(len));
        DeviceArgs::default()
            .buffer(
                "a",
                buffer(Self::address(&self.a, stream), ScalarType::BF16, caps.a),
            )
            .buffer(
                "b",
                buffer(Self::address(&self.b, stream), ScalarType::BF16, caps.b),
            )
            .buffer(
                "c",
                buffer(Self::address(&self.c, stream), ScalarType::F32, caps.c),
            )
            .scalar("m", mpmd_core::ir::Literal::U32(shape.m))
            .scalar("n", mpmd_core::ir::Literal::U32(shape.n))
            .scalar("k", mpmd_core::ir::Literal::U32(shape.k))
    }
}

/// cuBLAS on the backend's stream.
struct Cublas {
    blas: cudarc::cublas::CudaBlas,
}

impl Cublas {
    /// C = A B for row-major A (m x k), B (k x n), C (m x n): cuBLAS is
    /// column-major, where those buffers hold A^T, B^T and C^T, so it
    /// computes C^T (n x m) = B^T (n x k) A^T (k x m), no transposes.
    fn gemm(&self, buffers: &Buffers, stream: &CudaStream, shape: GemmShape) -> Result<(), String> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let dim = |v: u32| i32::try_from(v).map_err(|_| format!("{v} passes cuBLAS's int"));
        let (m, n, k) = (dim(shape.m)?, dim(shape.n)?, dim(shape.k)?);
        let a = Buffers::address(&buffers.a, stream) as *const c_void;
        let b = Buffers::address(&buffers.b, stream) as *const c_void;
        let c = Buffers::address(&buffers.reference, stream) as *mut c_void;
        // SAFETY: a, b and reference hold at least m*k, k*n and m*n
        // elements of the types named (the capacities hold every shape);
        // alpha and beta are host f32, as CUBLAS_COMPUTE_32F takes them.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.blas.handle(),
                cublasOperation_t::CUBLAS_OP_N,
                cublasOperation_t::CUBLAS_OP_N,
                n,
                m,
                k,
                (&alpha as *const f32).cast(),
                b,
                cudaDataType::CUDA_R_16BF,
                n,
                a,
                cudaDataType::CUDA_R_16BF,
                k,
                (&beta as *const f32).cast(),
                c,
                cudaDataType::CUDA_R_32F,
                n,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| format!("cublasGemmEx: {e:?}"))
    }
}

/// One timed figure: what ran, its ms and TFLOP/s.
struct Figure {
    label: String,
    ms: f64,
}

/// The GEMM figures and the two GEMM goals. A wrong mpmd result is an
/// error (after every other figure is printed) and its figure feeds no goal.
pub fn gemm_figures(
    backend: &mut CudaBackend,
    examples: &Path,
    goals: &mut Goals,
) -> Result<(), String> {
    // SAFETY: only tries to open the library (cudarc panics on a missing
    // one at first use, so this comes first).
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        println!(
            "gemm.cublas missing: none of {} loads (LD_LIBRARY_PATH, the ld.so cache; scripts/gpu-check.sh searches for libcublas.so.*); the GEMM goals are not measured",
            cublas_candidates().join(", ")
        );
        return Ok(());
    }
    let path = examples.join(GEMM_FILE);
    let source = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    // SAFETY: the benchmark issues everything on the backend's one stream.
    let stream = unsafe { backend.stream() }.clone();
    let wave = backend.sm_count();
    let caps = GemmCaps::holding(&GEMM_SHAPES)?;
    println!(
        "gemm.setup file={} wave={wave} a_cap={} b_cap={} c_cap={} warm_up={WARM_UP} timed={TIMED}",
        path.display(),
        caps.a,
        caps.b,
        caps.c
    );
    let cublas = Cublas {
        blas: cudarc::cublas::CudaBlas::new(stream.clone())
            .map_err(|e| format!("cublasCreate: {e:?}"))?,
    };
    // Every map of every configuration, prepared once for all shapes.
    let mut prepared: Vec<(GemmConfig, &str, CudaPrepared)> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for config in GEMM_CONFIGS {
        let module = config.module(&source, wave, caps)?;
        for map in GEMM_MAPS {
            let plan =
                lower(&module, map).map_err(|e| format!("{map} at {}: {e}", config.label()))?;
            match backend.prepare(&plan, Mode::Fast) {
                Ok(p) => prepared.push((config, map, p)),
                Err(e) => {
                    let message = format!(
                        "gemm.{}.{map} prepare error={}",
                        config.label(),
                        e.to_string().replace('\n', " | ")
                    );
                    println!("{message}");
                    failures.push(message);
                }
            }
        }
    }
    let mut buffers = Buffers {
        a: stream.alloc_zeros::<u16>(caps.a as usize).map_err(err)?,
        b: stream.alloc_zeros::<u16>(caps.b as usize).map_err(err)?,
        c: stream.alloc_zeros::<f32>(caps.c as usize).map_err(err)?,
        reference: stream.alloc_zeros::<f32>(caps.c as usize).map_err(err)?,
    };
    // The entries of cuBLAS's result checked against exact host sums.
    let mut rng = Rng::new(0x6e6d_6d70_6467);
    for (seed, shape) in (0u64..).step_by(2).zip(GEMM_SHAPES) {
        let label = shape.label();
        let (mn, k) = (shape.m as usize * shape.n as usize, shape.k as usize);
        let a = operand(shape.m as usize * k, seed);
        let b = operand(k * shape.n as usize, seed + 1);
        stream
            .memcpy_htod(&a.bits, &mut buffers.a.slice_mut(0..a.bits.len()))
            .map_err(err)?;
        stream
            .memcpy_htod(&b.bits, &mut buffers.b.slice_mut(0..b.bits.len()))
            .map_err(err)?;
        let scale = k as f64 * max_abs(&a.values) * max_abs(&b.values);

        // cuBLAS: time, then check its result against exact host sums.
        let cublas_ms = time_calls(backend, &stream, |_| cublas.gemm(&buffers, &stream, shape))?;
        let want = stream
            .clone_dtoh(&buffers.reference.slice(0..mn))
            .map_err(err)?;
        for _ in 0..SAMPLES {
            let (r, j) = (
                (rng.next_u64() % u64::from(shape.m)) as usize,
                (rng.next_u64() % u64::from(shape.n)) as usize,
            );
            let exact: f64 = (0..k)
                .map(|kk| {
                    f64::from(a.values[r * k + kk]) * f64::from(b.values[kk * shape.n as usize + j])
                })
                .sum();
            if f64::from(want[r * shape.n as usize + j]) != exact {
                return Err(format!(
                    "cuBLAS at {label}: C[{r}, {j}] = {}, the exact sum is {exact} (the row-major call is wrong)",
                    want[r * shape.n as usize + j]
                ));
            }
        }
        let cublas_tflops = tflops(shape, cublas_ms);
        println!("bench.gemm.cublas.{label} ms={cublas_ms:.4} tflops={cublas_tflops:.1} checked_entries={SAMPLES}");

        let mut verified: Vec<(GemmConfig, &str, Figure)> = Vec::new();
        for (config, map, prepared) in &prepared {
            let name = format!("{}.{map}.{label}", config.label());
            let args = buffers.mpmd_args(&stream, caps, shape);
            // One verified run on a sentinel-filled c, then the timed runs.
            let c_address = Buffers::address(&buffers.c, &stream);
            // SAFETY: c holds caps.c words.
            unsafe {
                cudarc::driver::sys::cuMemsetD32Async(
                    c_address,
                    SENTINEL,
                    caps.c as usize,
                    stream.cu_stream(),
                )
            }
            .result()
            .map_err(err)?;
            // SAFETY: the buffers hold the capacities the args name and
            // outlive the run, which the synchronisation below waits for.
            let run = match unsafe { backend.enqueue(prepared, &args) } {
                Ok(()) => backend.synchronize(),
                Err(e) => Err(e),
            };
            if let Err(e) = run {
                let message = format!(
                    "bench.gemm.{name} error={}",
                    e.to_string().replace('\n', " | ")
                );
                println!("{message}");
                failures.push(message);
                continue;
            }
            let got = stream.clone_dtoh(&buffers.c).map_err(err)?;
            let max_diff = got[..mn]
                .iter()
                .zip(&want)
                .map(|(g, w)| {
                    if g.is_nan() {
                        f64::INFINITY
                    } else {
                        (f64::from(*g) - f64::from(*w)).abs()
                    }
                })
                .fold(0.0f64, f64::max);
            let past_end = got[mn..].iter().filter(|v| v.to_bits() != SENTINEL).count();
            let relative = max_diff / scale;
            let ms = time_calls(backend, &stream, |backend| {
                // SAFETY: as for the verified run.
                unsafe { backend.enqueue(prepared, &args) }.map_err(|e| e.to_string())
            })?;
            let figure = tflops(shape, ms);
            let ok = relative == 0.0 && past_end == 0;
            println!(
                "bench.gemm.{name} ms={ms:.4} tflops={figure:.1} pct_of_cublas={:.1} max_abs_diff={max_diff:e} rel_diff={relative:e} rel_bound=0 written_past_mn={past_end} {}",
                100.0 * figure / cublas_tflops,
                if ok { "verified" } else { "WRONG" }
            );
            if ok {
                verified.push((
                    *config,
                    map,
                    Figure {
                        label: config.label(),
                        ms,
                    },
                ));
            } else {
                failures.push(format!("bench.gemm.{name}: result differs from cuBLAS"));
            }
        }
        let best = |wanted: &str| {
            verified
                .iter()
                .filter(|(_, map, _)| *map == wanted)
                .map(|(_, _, f)| f)
                .min_by(|x, y| x.ms.total_cmp(&y.ms))
        };
        if shape == VS_CUBLAS_SHAPE {
            if let Some(sk) = best("stream_k") {
                goals.at_least(
                    "gemm_vs_cublas",
                    tflops(shape, sk.ms) / cublas_tflops,
                    format!(
                        "stream_k {} at {label}: {:.1} TFLOP/s, cuBLAS {cublas_tflops:.1}",
                        sk.label,
                        tflops(shape, sk.ms)
                    ),
                );
            }
        }
        if shape == STREAM_K_SHAPE {
            for config in GEMM_CONFIGS {
                let ms_of = |wanted: &str| {
                    verified
                        .iter()
                        .find(|(c, map, _)| *c == config && *map == wanted)
                        .map(|(_, _, f)| f.ms)
                };
                if let (Some(sk), Some(dp)) = (ms_of("stream_k"), ms_of("data_parallel")) {
                    println!(
                        "bench.gemm.stream_k_vs_data_parallel.{}.{label} ratio={:.3}",
                        config.label(),
                        dp / sk
                    );
                }
            }
            if let (Some(sk), Some(dp)) = (best("stream_k"), best("data_parallel")) {
                goals.at_least(
                    "stream_k_vs_data_parallel",
                    dp.ms / sk.ms,
                    format!(
                        "best stream_k ({}, {:.4} ms) against best data_parallel ({}, {:.4} ms) at {label}",
                        sk.label, sk.ms, dp.label, dp.ms
                    ),
                );
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

fn max_abs(values: &[f32]) -> f64 {
    values.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())))
}
