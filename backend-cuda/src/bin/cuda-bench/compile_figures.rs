//! Figures that need no GPU: ptxas registers and spills of every benchmark
//! kernel, and NVRTC cold-compile and cache-hit times of the examples.

use std::path::{Path, PathBuf};
use std::time::Instant;

use mpmd_core::plan::{lower, LaunchPlan};
use mpmd_core::Mode;
use mpmd_cuda::{
    check_plan, compile_with_cache, emit_module, CompileOptions, ModuleCache, NvrtcOutput,
};

use crate::benchmarks::{benchmarks, plans};

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
