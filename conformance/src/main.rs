//! `mpmd-conformance` (run it as `cargo xtask conformance`): runs the corpus
//! on the selected backends and reports case × backend results.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use mpmd_conformance::analysis::BackendId;
use mpmd_conformance::backends::probe;
use mpmd_conformance::case::{default_corpus_dir, load_dir, matches_filter, Case};
use mpmd_conformance::report::{header, render_json, render_text, Summary};
use mpmd_conformance::run::RunConfig;
use mpmd_conformance::runner::{run_all, Limit};

#[derive(Parser)]
#[command(
    name = "cargo xtask conformance",
    about = "Run the mpmd conformance corpus on every backend"
)]
struct Args {
    /// Backends to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "interp,wgpu,cuda,cuda-host"
    )]
    backends: Vec<String>,
    /// Only cases whose name contains PATTERN (or matches it, with `*`);
    /// given several times, cases that match any of them.
    #[arg(long, value_name = "PATTERN")]
    filter: Vec<String>,
    /// Seed for inputs and schedules.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the report as JSON to PATH.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Cases run at the same time (default: available cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Seconds of machine time before a case counts as hung and fails:
    /// wall time scaled by the share of the CPUs this run used or left
    /// idle, so time other programs take is not counted and a busy machine
    /// is not failed (a hang still is: spinning, it is this run's CPU time;
    /// blocked, idle time). A case also fails after 10 times this in wall
    /// time. The largest case, the stream-K GEMM example, took 33 s on the
    /// four backends (optimised build, 2 cores, warm compile caches) and
    /// 595 s in wall time beside 8 busy processes, which is no hang.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    timeout: u64,
    /// Directory of `.mpmd` cases (default: `$MPMD_CORPUS_DIR`, else
    /// `conformance/cases` in the working directory or a folder above it).
    #[arg(long, value_name = "DIR")]
    cases: Option<PathBuf>,
    /// Seeded interpreter schedules beyond the lockstep one.
    #[arg(long, default_value_t = 2)]
    extra_schedules: u32,
    /// Declare the WebGPU adapter co-resident: plans with a cycle (or a wait
    /// on a higher block) that the backend cannot establish for the adapter
    /// run as one fused dispatch, and their results are `unverified`.
    #[arg(long)]
    wgpu_co_resident: bool,
}

fn main() -> ExitCode {
    // SAFETY: first thing in `main`, before any thread starts.
    #[cfg(feature = "wgpu")]
    let _runtime_dir = unsafe { mpmd_wgpu::quiet_display_lookup() };
    let args = Args::parse();
    let mut backends = Vec::new();
    for name in &args.backends {
        match BackendId::parse(name.trim()) {
            Some(b) if !backends.contains(&b) => backends.push(b),
            Some(_) => {}
            None => {
                eprintln!(
                    "error: unknown backend `{name}` (expected interp, wgpu, cuda or cuda-host)"
                );
                return ExitCode::from(2);
            }
        }
    }
    backends.sort();
    let dir = match args.cases.clone().map_or_else(default_corpus_dir, Ok) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let cases = match load_dir(&dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot read the corpus at {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    };
    let cases: Vec<Case> = cases
        .into_iter()
        .filter(|c| {
            args.filter.is_empty() || args.filter.iter().any(|p| matches_filter(&c.name, p))
        })
        .collect();
    if cases.is_empty() {
        eprintln!("error: no case matches the filter");
        return ExitCode::from(2);
    }
    mpmd_conformance::backends::declare_wgpu_co_resident(args.wgpu_co_resident);
    let env = Arc::new(probe(&backends));
    print!("{}", header(&env, args.seed, &backends, cases.len()));
    let config = Arc::new(RunConfig {
        backends: backends.clone(),
        seed: args.seed,
        extra_schedules: args.extra_schedules,
    });
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let results = run_all(
        cases,
        config,
        env.clone(),
        jobs,
        Limit::of_seconds(args.timeout),
    );
    println!();
    print!("{}", render_text(&results, &backends, args.seed));
    if let Some(path) = &args.json {
        let json = render_json(&results, &env, args.seed);
        let text = serde_json::to_string_pretty(&json).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if Summary::of(&results).failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
