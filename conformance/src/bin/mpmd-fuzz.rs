//! `cargo xtask fuzz`: random valid programs on every backend available here,
//! judged against the interpreter, with disagreements reduced to small cases.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use mpmd_conformance::backends::fuzz_factory;
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
    /// generator: validity, round trip, race freedom, determinism).
    #[arg(long, value_delimiter = ',', default_value = "interp,wgpu,cuda")]
    backends: Vec<String>,
    /// Run the backends in checked mode.
    #[arg(long)]
    checked: bool,
    /// Where reduced disagreements are written.
    #[arg(long, default_value = "conformance/cases/found")]
    found_dir: PathBuf,
    /// Seconds one backend may take on one program before it counts as hung.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Report disagreements without shrinking them.
    #[arg(long)]
    no_reduce: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut factories = vec![];
    for name in &args.backends {
        match fuzz_factory(name) {
            Ok(Some(f)) => factories.push(f),
            Ok(None) => {}
            Err(reason) => {
                eprintln!("error: backend `{name}`: {reason}");
                return ExitCode::FAILURE;
            }
        }
    }
    let with_wgsl = factories.iter().any(|f| f.name == "wgpu");
    let config = FuzzConfig {
        seed: args.seed,
        iterations: args.iterations,
        time_limit: args.time.map(Duration::from_secs),
        found_dir: args.found_dir,
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
            ..Default::default()
        },
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
