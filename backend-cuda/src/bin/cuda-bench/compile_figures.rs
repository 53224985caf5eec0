//! Figures that need no GPU: ptxas registers and spills of every benchmark
//! kernel and of every GEMM kernel (sm_80 and sm_90), and NVRTC cold-compile
//! and cache-hit times of the examples.

use std::path::{Path, PathBuf};
use std::time::Instant;

use mpmd_core::plan::{lower, LaunchPlan};
use mpmd_core::Mode;
use mpmd_cuda::{
    assemble, check_plan, compile_ptx, compile_with_cache, emit_module, CompileOptions,
    ModuleCache, NvrtcOutput,
};

use crate::benchmarks::{benchmarks, plans};
use crate::gemm_config::*;

/// The architectures of the GEMM figures: where `mma_m16n8k16` first
/// exists, and Hopper.
const GEMM_ARCHS: [u32; 2] = [80, 90];

/// ptxas registers and spills of each GEMM map at each configuration and
/// architecture (fast mode; WAVE = [`COMPILE_WAVE`], capacities holding the
/// benchmark's shapes), and whether the PTX has `mma.sync`: one
/// `ptxas.gemm.CONFIG.MAP sm_ARCH ...` line each.
pub fn gemm_compile_figures(examples: &Path) -> bool {
    let path = examples.join(GEMM_FILE);
    let source = match std::fs::read_to_string(&path) {
        Ok(source) => source,
        Err(e) => {
            println!("ptxas.gemm error={}: {e}", path.display());
            return false;
        }
    };
    let caps = match GemmCaps::holding(&GEMM_SHAPES) {
        Ok(caps) => caps,
        Err(e) => {
            println!("ptxas.gemm error={e}");
            return false;
        }
    };
    let mut ok = true;
    for config in GEMM_CONFIGS {
        let label = config.label();
        let module = match config.module(&source, COMPILE_WAVE, caps) {
            Ok(module) => module,
            Err(e) => {
                println!("ptxas.gemm.{label} error={}", e.replace('\n', " | "));
                ok = false;
                continue;
            }
        };
        for map in GEMM_MAPS {
            for arch in GEMM_ARCHS {
                match gemm_kernel_figure(&module, map, arch) {
                    Ok(line) => {
                        println!("ptxas.gemm.{label}.{map} sm_{arch} wave={COMPILE_WAVE} {line}")
                    }
                    Err(e) => {
                        ok = false;
                        println!(
                            "ptxas.gemm.{label}.{map} sm_{arch} error={}",
                            e.replace('\n', " | ")
                        );
                    }
                }
            }
        }
    }
    ok
}

fn gemm_kernel_figure(
    module: &mpmd_core::validate::ValidModule,
    map: &str,
    arch: u32,
) -> Result<String, String> {
    let plan = lower(module, map).map_err(|e| e.to_string())?;
    let emitted = emit_module(&plan, Mode::Fast).map_err(|e| e.to_string())?;
    let options = CompileOptions {
        arch,
        fast_math: plan.map.fast_math,
        ..CompileOptions::default()
    };
    let ptx = compile_ptx(&emitted.source, &options).map_err(|e| e.to_string())?;
    let report = assemble(&ptx, arch).map_err(|e| e.to_string())?;
    let kernel = report
        .kernel(&emitted.kernel_name)
        .ok_or_else(|| format!("ptxas reported no kernel `{}`", emitted.kernel_name))?;
    Ok(format!(
        "registers={} spill_stores={} spill_loads={} mma_sync={} blocks={} threads={} smem={}",
        kernel.registers,
        kernel.spill_store_bytes,
        kernel.spill_load_bytes,
        ptx.text.contains("mma.sync"),
        emitted.total_blocks,
        emitted.block_dim,
        emitted.dynamic_smem_bytes
    ))
}

pub fn compile_figures() -> bool {
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
pub fn example_plans(dir: &Path) -> Result<Vec<(String, LaunchPlan)>, String> {
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
        let module = mpmd_core::validate::validate(&module, &Default::default())
            .map_err(|d| format!("{stem}: {d:?}"))?;
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
pub fn compile_cache_figures(dir: &Path, arch: u32) -> bool {
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
            compile_with_cache(&module.source, &options, NvrtcOutput::Cubin, cache)
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
