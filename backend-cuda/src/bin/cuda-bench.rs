//! `cuda-bench`: benchmarks of the CUDA backend.
//!
//! Always prints ptxas registers and spills (sm_90) of every benchmark
//! kernel, and the cold-compile and cache-hit times of every example
//! (`--examples DIR`, default the repository's `examples/`). With a GPU
//! (and unless `--compile-only`), also runs:
//! - copy and elementwise over 256 MiB, against cuMemcpyDtoD bandwidth;
//! - a block reduction;
//! - a two-program map, fused, against its slower program alone;
//! - a three-stage semaphore pipeline, against three separate launches;
//! - the call overhead of a tiny kernel, against a raw launch of the same CUBIN.
//!
//! - hand-written CUDA C copies and reductions (`reference_kernels.cu`), to
//!   show what the device reaches with 4- and 16-byte accesses and shuffles.
//!
//! Output: one `key value` line per figure, for scripts/gpu-check.sh.
//! `--source NAME` prints the generated CUDA C of one benchmark.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cudarc::driver::{LaunchConfig, PushKernelArg};
use mpmd_core::host::{CallArgs, HostTensor};
use mpmd_core::ir::ScalarType::*;
use mpmd_core::ir::*;
use mpmd_core::plan::{lower, LaunchPlan};
use mpmd_core::{Backend, Mode, RunOptions};
use mpmd_cuda::cache::ModuleCache;
use mpmd_cuda::control;
use mpmd_cuda::emit::{emit_module_with, BlockSchedule, KernelParam};
use mpmd_cuda::nvrtc::{compile_with_cache, CompileOptions, Output};
use mpmd_cuda::{check_plan, emit_module, CudaBackend, CudaOptions};

/// 256 MiB of f32.
const BIG: u32 = 64 * 1024 * 1024;

fn module(
    meshes: Vec<Mesh>,
    kernels: Vec<Kernel>,
    maps: Vec<MpmdMap>,
    residents: Vec<Resident>,
) -> Module {
    Module {
        meshes,
        kernels,
        maps,
        residents,
        ..Default::default()
    }
}

/// Work split of a bandwidth-bound program: each thread handles `per_thread`
/// elements, `threads` apart, so every step of the loop is coalesced.
#[derive(Clone, Copy)]
struct Split {
    per_thread: u32,
    threads: u32,
}

impl Split {
    const fn new(per_thread: u32, threads: u32) -> Self {
        Split {
            per_thread,
            threads,
        }
    }

    fn per_block(self) -> u32 {
        self.per_thread * self.threads
    }

    fn blocks(self, len: u32) -> u32 {
        len / self.per_block()
    }

    fn label(self) -> String {
        format!("e{}t{}", self.per_thread, self.threads)
    }

    /// A one-axis mesh covering `len` elements.
    fn mesh(self, name: &str, block_axis: &str, thread_axis: &str, len: u32) -> Mesh {
        MeshBuilder::new(name)
            .grid(block_axis, self.blocks(len))
            .threads(thread_axis, self.threads)
            .build()
    }

    /// `body(b, i)` for each element `i` of this thread.
    fn each(
        self,
        b: &mut BodyBuilder,
        block_axis: &str,
        thread_axis: &str,
        mut body: impl FnMut(&mut BodyBuilder, Expr),
    ) {
        let base = b.let_(
            "base",
            U32,
            axis_index(block_axis) * Expr::from(self.per_block()) + axis_index(thread_axis),
        );
        let threads = self.threads;
        b.for_("k", U32, 0u32, self.per_thread, |b, k| {
            let i = b.let_("i", U32, base.clone() + k * Expr::from(threads));
            body(b, i);
        });
    }
}

/// The one-element-per-thread form (1024 threads) and the coarsened form a
/// bandwidth-bound kernel is usually written in.
const SPLITS: [Split; 5] = [
    Split::new(1, 1024),
    Split::new(8, 256),
    Split::new(16, 256),
    Split::new(8, 512),
    Split::new(4, 1024),
];

fn copy(split: Split) -> Module {
    let mesh = split.mesh("m", "b", "t", BIG);
    let map = MapBuilder::new("copy")
        .program("m", "copy")
        .input("x", gmem(F32, [BIG]))
        .output("y", gmem(F32, [BIG]))
        .build();
    let k = KernelBuilder::new("copy", map.params()).body(|b| {
        split.each(b, "b", "t", |b, i| {
            b.store(at("y", [i.clone()]), load("x", [i]))
        });
    });
    module(vec![mesh], vec![k], vec![map], vec![])
}

fn elementwise(split: Split) -> Module {
    let mesh = split.mesh("m", "b", "t", BIG);
    let map = MapBuilder::new("axpb")
        .program("m", "axpb")
        .input("x", gmem(F32, [BIG]))
        .output("y", gmem(F32, [BIG]))
        .scalar("a", F32)
        .scalar("c", F32)
        .build();
    let k = KernelBuilder::new("axpb", map.params()).body(|b| {
        split.each(b, "b", "t", |b, i| {
            b.store(at("y", [i.clone()]), load("x", [i]) * var("a") + var("c"))
        });
    });
    module(vec![mesh], vec![k], vec![map], vec![])
}

/// Each thread sums its elements, then the block sums its threads through
/// an smem tree and thread 0 writes the block's sum.
fn reduce_kernel(
    name: &str,
    params: Vec<Param>,
    split: Split,
    [x, y, tile]: [&str; 3],
    [b_axis, t_axis]: [&str; 2],
) -> Kernel {
    KernelBuilder::new(name, params).body(|b| {
        let t = b.let_("t", U32, axis_index(t_axis));
        let acc = b.var("acc", F32, 0.0f32);
        split.each(b, b_axis, t_axis, |b, i| {
            b.assign("acc", acc.clone() + load(x, [i]));
        });
        b.store(at(tile, [t.clone()]), acc);
        b.barrier();
        let steps = split.threads.trailing_zeros();
        b.for_("s", U32, 1u32, steps + 1, |b, s| {
            let stride = b.let_("stride", U32, Expr::from(split.threads) >> s);
            b.if_(t.clone().lt(stride.clone()), |b| {
                b.store(
                    at(tile, [t.clone()]),
                    load(tile, [t.clone()]) + load(tile, [t.clone() + stride]),
                );
            });
            b.barrier();
        });
        b.if_(t.eq(Expr::from(0u32)), |b| {
            b.store(at(y, [axis_index(b_axis)]), load(tile, [Expr::from(0u32)]));
        });
    })
}

const REDUCE_SPLITS: [Split; 6] = [
    Split::new(4, 256),
    Split::new(16, 256),
    Split::new(32, 256),
    Split::new(64, 256),
    Split::new(16, 512),
    Split::new(32, 512),
];

fn reduction(split: Split) -> Module {
    let blocks = split.blocks(BIG);
    let mesh = split.mesh("m", "b", "t", BIG);
    let map = MapBuilder::new("reduce")
        .program("m", "reduce")
        .input("x", gmem(F32, [BIG]))
        .output("y", gmem(F32, [blocks]))
        .scratch("tile", smem(F32, [split.threads]))
        .build();
    let k = reduce_kernel(
        "reduce",
        map.params(),
        split,
        ["x", "y", "tile"],
        ["b", "t"],
    );
    module(vec![mesh], vec![k], vec![map], vec![])
}

const TWO_EW: Split = Split::new(8, 256);
const TWO_RED: Split = Split::new(16, 256);

/// Elementwise over 256 MiB (the slower program) and a reduction over
/// 64 MiB, fused into one map; and the elementwise program alone.
fn two_program(fused: bool) -> Module {
    let small = BIG / 4;
    let ew_mesh = TWO_EW.mesh("ew", "eb", "et", BIG);
    let red_mesh = TWO_RED.mesh("red", "rb", "rt", small);
    let mut builder = MapBuilder::new(if fused { "fused" } else { "alone" }).program("ew", "ew");
    if fused {
        builder = builder.program("red", "red");
    }
    let map = builder
        .input("xa", gmem(F32, [BIG]))
        .input("xb", gmem(F32, [small]))
        .output("ya", gmem(F32, [BIG]))
        .output("yb", gmem(F32, [TWO_RED.blocks(small)]))
        .scratch("tile", smem(F32, [TWO_RED.threads]).owned_by("red"))
        .build();
    let ew_body = |b: &mut BodyBuilder| {
        TWO_EW.each(b, "eb", "et", |b, i| {
            b.store(at("ya", [i.clone()]), load("xa", [i]) * 2.0f32 + 1.0f32)
        });
    };
    let red = reduce_kernel(
        "red",
        map.params(),
        TWO_RED,
        ["xb", "yb", "tile"],
        ["rb", "rt"],
    );
    if fused {
        let ew = KernelBuilder::new("ew", map.params()).body(ew_body);
        module(vec![ew_mesh, red_mesh], vec![ew, red], vec![map], vec![])
    } else {
        // `tile` is owned by `red`: without that program it would be smem
        // of an external mesh, so the lone map drops it.
        let mut map = map;
        map.scratch.clear();
        let ew = KernelBuilder::new("ew", map.params()).body(ew_body);
        module(vec![ew_mesh], vec![ew], vec![map], vec![])
    }
}

/// Pipeline sizes (elements per stage) and splits: 4 MiB and 64 MiB of f32,
/// one element per thread and eight.
/// The middle stage of the last one has half the threads, each handling
/// twice the elements (the same 2048 per block): programs of different
/// thread counts in one walk.
const PIPELINES: [(u32, [Split; 3]); 4] = [
    (1 << 20, [Split::new(1, 256); 3]),
    (1 << 24, [Split::new(1, 256); 3]),
    (1 << 24, [Split::new(8, 256); 3]),
    (
        1 << 24,
        [Split::new(8, 256), Split::new(16, 128), Split::new(8, 256)],
    ),
];

fn pipeline_label(len: u32, stages: [Split; 3]) -> String {
    let splits = if stages.iter().all(|s| s.label() == stages[0].label()) {
        stages[0].label()
    } else {
        stages.map(|s| s.label()).join("-")
    };
    format!("{}M.{splits}", len >> 20)
}

/// Three stages, each block of a stage handing its rows to the same block of
/// the next stage through a semaphore owned by that block.
fn pipeline_fused(len: u32, [split1, split2, split3]: [Split; 3]) -> Module {
    let meshes: Vec<Mesh> = [split1, split2, split3]
        .iter()
        .enumerate()
        .map(|(i, split)| {
            let s = i + 1;
            split.mesh(&format!("s{s}"), &format!("b{s}"), &format!("t{s}"), len)
        })
        .collect();
    let map = MapBuilder::new("pipeline")
        .program("s1", "stage1")
        .program("s2", "stage2")
        .program("s3", "stage3")
        .input("x", gmem(F32, [len]))
        .output("y", gmem(F32, [len]))
        .scratch("a", gmem(F32, [len]))
        .scratch("b", gmem(F32, [len]))
        .scratch("ready2", sem([1]).owned_by("s2"))
        .scratch("ready3", sem([1]).owned_by("s3"))
        .build();
    let p = map.params();
    let s1 = KernelBuilder::new("stage1", p.clone()).body(|b| {
        split1.each(b, "b1", "t1", |b, i| {
            b.store(at("a", [i.clone()]), load("x", [i]) * 2.0f32)
        });
        b.signal(
            at_block("ready2", [axis_index("b1")], [Expr::from(0u32)]),
            1,
        );
    });
    let s2 = KernelBuilder::new("stage2", p.clone()).body(|b| {
        b.wait(at("ready2", [Expr::from(0u32)]), 1);
        split2.each(b, "b2", "t2", |b, i| {
            b.store(at("b", [i.clone()]), load("a", [i]) + 1.0f32)
        });
        b.signal(
            at_block("ready3", [axis_index("b2")], [Expr::from(0u32)]),
            1,
        );
    });
    let s3 = KernelBuilder::new("stage3", p).body(|b| {
        b.wait(at("ready3", [Expr::from(0u32)]), 1);
        split3.each(b, "b3", "t3", |b, i| {
            let v = b.let_("v", F32, load("b", [i.clone()]));
            b.store(at("y", [i]), v.clone() * v);
        });
    });
    module(meshes, vec![s1, s2, s3], vec![map], vec![])
}

/// The same three stages as three maps (three launches), handing data on
/// through device-resident refs.
fn pipeline_separate(len: u32, [split1, split2, split3]: [Split; 3]) -> Module {
    let meshes = vec![
        split1.mesh("s1", "b", "t", len),
        split2.mesh("s2", "b", "t", len),
        split3.mesh("s3", "b", "t", len),
    ];
    let resident = |name: &str| Resident {
        name: name.into(),
        ty: gmem(F32, [len]),
        zeroed: true,
    };
    let m1 = MapBuilder::new("stage1")
        .program("s1", "stage1")
        .input("x", gmem(F32, [len]))
        .scratch("a", gmem(F32, [len]))
        .resident()
        .build();
    let m2 = MapBuilder::new("stage2")
        .program("s2", "stage2")
        .scratch("a", gmem(F32, [len]))
        .resident()
        .scratch("b", gmem(F32, [len]))
        .resident()
        .build();
    let m3 = MapBuilder::new("stage3")
        .program("s3", "stage3")
        .output("y", gmem(F32, [len]))
        .scratch("b", gmem(F32, [len]))
        .resident()
        .build();
    let k1 = KernelBuilder::new("stage1", m1.params()).body(|b| {
        split1.each(b, "b", "t", |b, i| {
            b.store(at("a", [i.clone()]), load("x", [i]) * 2.0f32)
        });
    });
    let k2 = KernelBuilder::new("stage2", m2.params()).body(|b| {
        split2.each(b, "b", "t", |b, i| {
            b.store(at("b", [i.clone()]), load("a", [i]) + 1.0f32)
        });
    });
    let k3 = KernelBuilder::new("stage3", m3.params()).body(|b| {
        split3.each(b, "b", "t", |b, i| {
            let v = b.let_("v", F32, load("b", [i.clone()]));
            b.store(at("y", [i]), v.clone() * v);
        });
    });
    module(
        meshes,
        vec![k1, k2, k3],
        vec![m1, m2, m3],
        vec![resident("a"), resident("b")],
    )
}

fn tiny() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 1).threads("t", 32).build();
    let map = MapBuilder::new("tiny")
        .program("m", "tiny")
        .output("y", gmem(U32, [32]))
        .build();
    let k = KernelBuilder::new("tiny", map.params()).body(|b| {
        b.store(at("y", [axis_index("t")]), axis_index("t"));
    });
    module(vec![mesh], vec![k], vec![map], vec![])
}

fn plans(m: &Module) -> Vec<LaunchPlan> {
    m.maps
        .iter()
        .map(|map| {
            lower(m, &map.name)
                .unwrap_or_else(|e| panic!("benchmark map `{}` does not lower: {e}", map.name))
        })
        .collect()
}

fn benchmarks() -> Vec<(String, Module)> {
    let mut all = Vec::new();
    for split in SPLITS {
        all.push((format!("copy.{}", split.label()), copy(split)));
        all.push((format!("elementwise.{}", split.label()), elementwise(split)));
    }
    for split in REDUCE_SPLITS {
        all.push((format!("reduction.{}", split.label()), reduction(split)));
    }
    all.push(("two_program_fused".into(), two_program(true)));
    all.push(("two_program_alone".into(), two_program(false)));
    for (len, stages) in PIPELINES {
        let label = pipeline_label(len, stages);
        all.push((
            format!("pipeline_fused.{label}"),
            pipeline_fused(len, stages),
        ));
        all.push((
            format!("pipeline_separate.{label}"),
            pipeline_separate(len, stages),
        ));
    }
    all.push(("tiny".into(), tiny()));
    all
}

fn compile_figures() -> bool {
    let mut ok = true;
    for (name, m) in benchmarks() {
        for plan in plans(&m) {
            match check_plan(&plan, Mode::Fast) {
                Ok(r) => println!(
                    "ptxas.{name}.{} registers={} spill_stores={} spill_loads={} blocks={} threads={} smem={}",
                    plan.map.name, r.registers, r.spill_store_bytes, r.spill_load_bytes, r.total_blocks, r.block_dim, r.dynamic_smem_bytes
                ),
                Err(e) => {
                    ok = false;
                    println!("ptxas.{name}.{} error={}", plan.map.name, e.to_string().replace('\n', " | "));
                }
            }
        }
    }
    ok
}

/// Every map of every example, lowered: `(file stem, map name, plan)`.
fn example_plans(dir: &Path) -> Result<Vec<(String, LaunchPlan)>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "mpmd"))
        .collect();
    files.sort();
    let mut plans = Vec::new();
    for file in files {
        let stem = file
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let source =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let (module, _) = mpmd_core::text::parse(&source).map_err(|e| format!("{stem}: {e}"))?;
        for map in &module.maps {
            let plan =
                lower(&module, &map.name).map_err(|e| format!("{stem}/{}: {e}", map.name))?;
            plans.push((format!("{stem}/{}", map.name), plan));
        }
    }
    Ok(plans)
}

/// Cold NVRTC compile to a CUBIN, then a hit in a fresh process's cache
/// (disk) and a hit in memory, for each example map.
fn compile_cache_figures(dir: &Path, arch: u32) -> bool {
    let plans = match example_plans(dir) {
        Ok(plans) => plans,
        Err(e) => {
            println!("compile.examples error={e}");
            return false;
        }
    };
    let cache_dir = std::env::temp_dir().join(format!("mpmd-bench-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache_dir);
    let options = CompileOptions {
        arch,
        ..CompileOptions::default()
    };
    let (mut cold_total, mut disk_total, mut memory_total) = (0.0, 0.0, 0.0);
    let mut ok = true;
    for (name, plan) in &plans {
        let module = match emit_module(plan, Mode::Fast) {
            Ok(module) => module,
            Err(e) => {
                println!("compile.{name} error={e}");
                ok = false;
                continue;
            }
        };
        let time = |cache: &ModuleCache| {
            let start = Instant::now();
            compile_with_cache(&module.source, &options, Output::Cubin, cache)
                .map(|_| start.elapsed().as_secs_f64() * 1e3)
        };
        let writer = ModuleCache::new(Some(cache_dir.clone()));
        let reader = ModuleCache::new(Some(cache_dir.clone()));
        match (time(&writer), time(&reader), time(&reader)) {
            (Ok(cold), Ok(disk), Ok(memory)) => {
                println!(
                    "compile.{name} sm_{arch} cold_ms={cold:.1} disk_hit_ms={disk:.3} memory_hit_ms={memory:.4}"
                );
                cold_total += cold;
                disk_total += disk;
                memory_total += memory;
            }
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                println!(
                    "compile.{name} error={}",
                    e.to_string().replace('\n', " | ")
                );
                ok = false;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&cache_dir);
    println!(
        "compile.examples maps={} cold_total_ms={cold_total:.1} disk_hit_total_ms={disk_total:.3} memory_hit_total_ms={memory_total:.4}",
        plans.len()
    );
    ok
}

fn f32_input(len: u32) -> HostTensor {
    HostTensor::from_f32(
        vec![len],
        &(0..len)
            .map(|i| (i % 1000) as f32 * 0.5)
            .collect::<Vec<_>>(),
    )
}

/// Best kernel times in ms of a plan, two ways: inside `run` (each call
/// uploads its inputs first), and launched again on the data the calls left
/// on the device (`time_relaunch`), the way the raw launches, the reference
/// kernels and `cuMemcpyDtoD` are timed.
#[derive(Clone, Copy)]
struct KernelMs {
    in_run: f64,
    resident: f64,
}

fn kernel_ms(
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
fn bandwidth_fields(bytes: f64, ms: KernelMs, memcpy_gbps: f64) -> String {
    let (run_g, resident_g) = (gbps(bytes, ms.in_run), gbps(bytes, ms.resident));
    format!(
        "ms={:.4} gbps={run_g:.1} pct_of_memcpy={:.1} resident_ms={:.4} resident_gbps={resident_g:.1} resident_pct_of_memcpy={:.1}",
        ms.in_run,
        100.0 * run_g / memcpy_gbps,
        ms.resident,
        100.0 * resident_g / memcpy_gbps
    )
}

fn gbps(bytes: f64, ms: f64) -> f64 {
    bytes / (ms * 1e-3) / 1e9
}

/// The plan's kernel (fast mode, the schedule `run` would use), compiled and
/// loaded outside the backend, for raw launches; the module must outlive
/// the function's use.
fn raw_kernel(
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
    let loaded = backend
        .context()
        .load_module(cudarc::nvrtc::Ptx::from_binary(cubin.bytes))
        .map_err(|e| format!("{e:?}"))?;
    let function = loaded
        .load_function(&emitted.kernel_name)
        .map_err(|e| format!("{e:?}"))?;
    Ok((emitted, function, loaded))
}

/// A timing event (cudarc's default events cannot be timed).
fn timing_event(backend: &CudaBackend) -> Result<cudarc::driver::CudaEvent, String> {
    backend
        .context()
        .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| format!("{e:?}"))
}

/// Kernels launched back to back on one stream, the way a user launches
/// kernels by hand, timed by one pair of events around all of them (so the
/// gaps between launches count, as they do for a user). Each is a plan with
/// its generated module (block-index or ticket schedule; ticket kernels get
/// their counter cleared before each launch); buffers are shared by operand
/// name, `x` holds the pipeline input and `y` is checked at the end.
fn raw_launches_ms(
    backend: &CudaBackend,
    launches: &[(LaunchPlan, mpmd_cuda::EmittedModule)],
    len: u32,
    reps: usize,
) -> Result<f64, String> {
    let stream = backend.stream().clone();
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    let mut buffers: HashMap<String, cudarc::driver::CudaSlice<u32>> = HashMap::new();
    let x: Vec<u32> = f32_input(len).words;
    let mut kernels = Vec::new();
    for (plan, emitted) in launches {
        if emitted.schedule == mpmd_cuda::emit::BlockSchedule::ResidentWalk {
            return Err("raw launches take block-index or ticket kernels".into());
        }
        for buffer in &plan.buffers {
            let name = &buffer.operands[0];
            if let std::collections::hash_map::Entry::Vacant(slot) = buffers.entry(name.clone()) {
                slot.insert(if name == "x" {
                    stream.clone_htod(&x).map_err(err)?
                } else {
                    stream
                        .alloc_zeros::<u32>(buffer.len.max(1) as usize)
                        .map_err(err)?
                });
            }
        }
        let cubin = backend
            .cubin_for(emitted, false)
            .map_err(|e| e.to_string())?;
        let loaded = backend
            .context()
            .load_module(cudarc::nvrtc::Ptx::from_binary(cubin.bytes))
            .map_err(err)?;
        let function = loaded.load_function(&emitted.kernel_name).map_err(err)?;
        let ctl = stream.alloc_zeros::<u32>(control::WORDS).map_err(err)?;
        kernels.push((plan, emitted, function, ctl, loaded));
    }
    let timeout: u64 = 10_000_000_000;
    let mut launch_all = || -> Result<(), String> {
        for (plan, emitted, function, ctl, _) in &mut kernels {
            if emitted.schedule == mpmd_cuda::emit::BlockSchedule::Tickets {
                stream.memset_zeros(ctl).map_err(err)?;
            }
            let mut launch = stream.launch_builder(function);
            for param in &emitted.params {
                match param {
                    KernelParam::Buffer(index) => {
                        launch.arg(&buffers[&plan.buffers[*index].operands[0]])
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
        let ms = mpmd_cuda::backend::event_elapsed_ms(&start, &end).ok_or("no event time")?;
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

/// Hand-written kernels (`reference_kernels.cu`): what the device reaches
/// with 4-byte and 16-byte accesses and with warp shuffles, timed beside the
/// generated kernels.
const REFERENCE_SOURCE: &str = include_str!("reference_kernels.cu");

/// One hand-written kernel: name, threads per block, floats per thread,
/// and whether it reads and writes `BIG` floats (copy) or only reads them.
struct Reference {
    kernel: &'static str,
    threads: u32,
    floats_per_thread: u32,
    copies: bool,
}

const REFERENCES: [Reference; 7] = [
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
fn reference_figures(backend: &CudaBackend, memcpy_gbps: f64, reps: usize) -> Result<(), String> {
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    let options = CompileOptions {
        arch: backend.arch(),
        ..CompileOptions::default()
    };
    let cubin = compile_with_cache(
        REFERENCE_SOURCE,
        &options,
        Output::Cubin,
        ModuleCache::global(),
    )
    .map_err(|e| format!("reference kernels: {e}"))?;
    let module = backend
        .context()
        .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
        .map_err(err)?;
    let stream = backend.stream().clone();
    let x = stream.clone_htod(&f32_input(BIG).words).map_err(err)?;
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
            let ms = mpmd_cuda::backend::event_elapsed_ms(&start, &end).ok_or("no event time")?;
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

/// The speed goals, each as its best benchmark figure: printed last
/// as `goal.NAME figure=... target=... met|NOT met (the benchmark)`.
#[derive(Default)]
struct Goals {
    /// (name, best figure so far, the benchmark it came from)
    rows: Vec<(&'static str, f64, String)>,
}

impl Goals {
    /// Keeps the higher figure of a goal met from above (bandwidth shares).
    fn at_least(&mut self, name: &'static str, figure: f64, from: String) {
        self.keep(name, figure, from, |new, old| new > old);
    }

    /// Keeps the lower figure of a goal met from below (time ratios).
    fn at_most(&mut self, name: &'static str, figure: f64, from: String) {
        self.keep(name, figure, from, |new, old| new < old);
    }

    fn keep(
        &mut self,
        name: &'static str,
        figure: f64,
        from: String,
        better: fn(f64, f64) -> bool,
    ) {
        match self.rows.iter_mut().find(|(n, _, _)| *n == name) {
            Some(row) if better(figure, row.1) => *row = (name, figure, from),
            Some(_) => {}
            None => self.rows.push((name, figure, from)),
        }
    }

    fn print(&self) {
        // (name, target, whether the figure must be at least the target)
        let targets: [(&str, f64, bool); 6] = [
            ("copy_pct_of_memcpy", 90.0, true),
            ("elementwise_pct_of_memcpy", 90.0, true),
            ("reduction_pct_of_memcpy", 80.0, true),
            ("two_program_fused_ratio", 1.2, false),
            ("pipeline_ratio", 1.2, false),
            ("call_overhead_ratio", 1.5, false),
        ];
        for (name, target, at_least) in targets {
            match self.rows.iter().find(|(n, _, _)| *n == name) {
                Some((_, figure, from)) => {
                    let met = if at_least {
                        *figure >= target
                    } else {
                        *figure <= target
                    };
                    println!(
                        "goal.{name} figure={figure:.3} target={target} {} ({from})",
                        if met { "met" } else { "NOT met" }
                    );
                }
                None => println!("goal.{name} not measured"),
            }
        }
    }
}

fn run_gpu() -> Result<(), String> {
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
    if let Some((a, b)) = mpmd_cuda::backend::driver_version() {
        println!("driver cuda_version={a}.{b}");
    }
    let reps = 5;
    let big_bytes = BIG as f64 * 4.0;

    // cuMemcpyDtoD of 256 MiB: back to back (the baseline), and each right
    // after uploading its source, as a map's kernel runs inside `run` (does
    // the GPU's state after a large upload slow any kernel down?).
    let err = |e: cudarc::driver::DriverError| format!("{e:?}");
    let stream = backend.stream().clone();
    let mut src = stream.alloc_zeros::<u32>(BIG as usize).map_err(err)?;
    let mut dst = stream.alloc_zeros::<u32>(BIG as usize).map_err(err)?;
    let upload = f32_input(BIG).words;
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
            let ms = mpmd_cuda::backend::event_elapsed_ms(&start, &end).ok_or("no event time")?;
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
    // as the memcpy baseline is, on data already on the device.
    let resident_pct = |bytes: f64, ms: KernelMs| 100.0 * gbps(bytes, ms.resident) / memcpy_gbps;
    for split in SPLITS {
        let ms = kernel_ms(&mut backend, &plans(&copy(split))[0], &args, reps)?;
        println!(
            "bench.copy.{} {}",
            split.label(),
            bandwidth_fields(2.0 * big_bytes, ms, memcpy_gbps)
        );
        let from = format!("copy.{}, resident", split.label());
        goals.at_least(
            "copy_pct_of_memcpy",
            resident_pct(2.0 * big_bytes, ms),
            from,
        );
        let ms = kernel_ms(&mut backend, &plans(&elementwise(split))[0], &ew_args, reps)?;
        println!(
            "bench.elementwise.{} {}",
            split.label(),
            bandwidth_fields(2.0 * big_bytes, ms, memcpy_gbps)
        );
        let from = format!("elementwise.{}, resident", split.label());
        goals.at_least(
            "elementwise_pct_of_memcpy",
            resident_pct(2.0 * big_bytes, ms),
            from,
        );
    }
    for split in REDUCE_SPLITS {
        let ms = kernel_ms(&mut backend, &plans(&reduction(split))[0], &args, reps)?;
        println!(
            "bench.reduction.{} {}",
            split.label(),
            bandwidth_fields(big_bytes, ms, memcpy_gbps)
        );
        let from = format!("reduction.{}, resident", split.label());
        goals.at_least("reduction_pct_of_memcpy", resident_pct(big_bytes, ms), from);
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
    let stream = backend.stream().clone();
    let y = stream
        .alloc_zeros::<u32>(32)
        .map_err(|e| format!("{e:?}"))?;
    let mut ctl = stream
        .alloc_zeros::<u32>(control::WORDS)
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
    goals.print();
    Ok(())
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
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples"));
    let arch = std::env::var("MPMD_BENCH_ARCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(mpmd_cuda::CHECK_ARCH);
    let compiled = compile_figures() & compile_cache_figures(&examples, arch);
    let mut status = if compiled { 0 } else { 1 };
    if compile_only {
        std::process::exit(status);
    }
    if !mpmd_cuda::backend::driver_present() {
        println!("gpu skipped: no CUDA driver (libcuda.so.1) on this machine");
        std::process::exit(status);
    }
    if let Err(e) = run_gpu() {
        println!("gpu error={}", e.replace('\n', " | "));
        status = 1;
    }
    std::process::exit(status);
}
