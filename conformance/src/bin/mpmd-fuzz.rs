//! `cargo xtask fuzz`: random valid programs on every backend available here,
//! judged against the interpreter, with disagreements reduced to small cases.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use mpmd_conformance::analysis::BackendId;
use mpmd_conformance::backends::fuzz_factory;
use mpmd_conformance::case::{default_corpus_dir, FOUND_SUBDIR};
use mpmd_conformance::fuzz::{run_fuzz, FuzzConfig, GenOptions};
use mpmd_core::Mode;

#[derive(Parser)]
#[command(
    name = "mpmd-fuzz",
    about = "Differential fuzzing of the mpmd backends"
)]
struct Args {
    /// Module i of the run is generated from seed + i.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Number of programs (default 100 when --time is not given either).
    #[arg(long)]
    iterations: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    time: Option<u64>,
    /// Backends to judge against the interpreter (interp alone checks the
    /// generator: validity, round trip, race freedom, determinism). Default:
    /// interp,wgpu,cuda, and cuda-host where a host C++ compiler is.
    #[arg(long, value_delimiter = ',')]
    backends: Option<Vec<String>>,
    /// Run the backends in checked mode.
    #[arg(long)]
    checked: bool,
    /// Where reduced disagreements are written (default: `found/` in the
    /// corpus folder, found as `cargo xtask conformance` finds it:
    /// `$MPMD_CORPUS_DIR`, else `conformance/cases` in the working directory
    /// or a folder above it).
    #[arg(long, value_name = "DIR")]
    found_dir: Option<PathBuf>,
    /// Seconds one backend may take on one program before it counts as hung.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Report disagreements without shrinking them.
    #[arg(long)]
    no_reduce: bool,
    /// Percent of the modules that use warp collectives (default: the
    /// generator's, `GenOptions::warps`).
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(0..=100))]
    warps: Option<u32>,
    /// Percent of the warp modules that also use `mma_m16n8k16` and the
    /// fragment loads (default: the generator's, `GenOptions::mma`).
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(0..=100))]
    mma: Option<u32>,
    /// Percent of the modules whose first program computes on edge values
    /// with operands a compiler can prove zero or equal (default: the
    /// generator's, `GenOptions::provable_operands`).
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(0..=100))]
    provable_operands: Option<u32>,
    /// Modules examined at once, each on a worker thread (default: the
    /// available cores). Results are counted in seed order: the same seed
    /// gives the same programs and verdicts for any number of jobs.
    #[arg(long)]
    jobs: Option<usize>,
}

fn main() -> ExitCode {
    // SAFETY: first thing in `main`, before any thread starts.
    #[cfg(feature = "wgpu")]
    let _runtime_dir = unsafe { mpmd_wgpu::quiet_display_lookup() };
    let args = Args::parse();
    let mut factories = vec![];
    let backends = args.backends.clone().unwrap_or_else(|| {
        let mut names: Vec<String> = ["interp", "wgpu", "cuda"].map(String::from).to_vec();
        match mpmd_conformance::backends::new_backend(BackendId::CudaHost) {
            Ok(_) => names.push("cuda-host".into()),
            Err(reason) => eprintln!("note: cuda-host not run: {reason}"),
        }
        names
    });
    for name in &backends {
        match fuzz_factory(name) {
            Ok(Some(f)) => factories.push(f),
            Ok(None) => {}
            Err(reason) => {
                eprintln!("error: backend `{name}`: {reason}");
                return ExitCode::FAILURE;
            }
        }
    }
    let found_dir = match args
        .found_dir
        .clone()
        .map_or_else(|| default_corpus_dir().map(|d| d.join(FOUND_SUBDIR)), Ok)
    {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("error: where to write reduced cases: {e} (or pass --found-dir DIR)");
            return ExitCode::FAILURE;
        }
    };
    let with_wgsl = factories.iter().any(|f| f.name == "wgpu");
    let config = FuzzConfig {
        seed: args.seed,
        iterations: args.iterations,
        time_limit: args.time.map(Duration::from_secs),
        found_dir,
        per_program_timeout: Duration::from_secs(args.timeout),
        mode: if args.checked {
            Mode::Checked
        } else {
            Mode::Fast
        },
        reduce: !args.no_reduce,
        // WGSL bounds `/`, `%`, sqrt and fma loosely, so they cannot feed
        // bit-exact comparisons when it is under test.
        generator: GenOptions {
            ieee: !with_wgsl,
            warps: args.warps.unwrap_or(GenOptions::default().warps),
            mma: args.mma.unwrap_or(GenOptions::default().mma),
            provable_operands: args
                .provable_operands
                .unwrap_or(GenOptions::default().provable_operands),
            ..Default::default()
        },
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1),
        ..FuzzConfig::default()
    };
    let summary = run_fuzz(&config, &factories, &mut |line| eprintln!("{line}"));
    print!("{summary}");
    if summary.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
