//! `cargo xtask`: project automation (tests, conformance) and set-up of the
//! tools those need (a Vulkan adapter, NVRTC and ptxas).

mod bench;
mod python;
mod tools;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "mpmd project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Set up the tools, then run every test of the workspace
    /// (`cargo nextest run` when installed, else `cargo test`), then the
    /// Python package's tests (`cargo xtask pytest`).
    Test {
        /// Extra arguments passed to the test runner (`-p NAME` narrows the
        /// run to those crates).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up the tools, then build the harness with optimisations and run
    /// the conformance corpus on every backend (arguments go to the
    /// harness; try `cargo xtask conformance --help`).
    Conformance {
        /// Build the harness with optimisations: the default, accepted so
        /// that scripts which pass it keep working.
        #[arg(long, conflicts_with = "debug")]
        release: bool,
        /// Build the harness without optimisations for the workspace's own
        /// crates (the build `cargo xtask test` shares; the interpreter then
        /// runs the corpus about 6 times slower).
        #[arg(long)]
        debug: bool,
        /// Arguments for the harness: --backends, --filter, --seed, --json, --jobs, ...
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up the tools, then fuzz: random valid programs on every backend,
    /// judged against the interpreter (arguments go to the fuzzer: --seed,
    /// --iterations, --time, --backends, --checked; try `cargo xtask fuzz --help`).
    Fuzz {
        /// Build the fuzzer with optimisations.
        #[arg(long)]
        release: bool,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up the tools, then run the benchmarks: the interpreter's, WGSL
    /// against hand-written WGSL, and CUDA (ptxas and compile figures
    /// everywhere, the GPU benchmarks where there is a GPU); `report`:
    /// the performance report (Pallas against mpmd and the other figures,
    /// docs/bench.md) into target/bench/report.md and stdout.
    Bench {
        /// Which: interp, wgpu, cuda, report (default: the first three, in
        /// that order).
        #[arg(value_delimiter = ',')]
        which: Vec<BenchTarget>,
        /// `report`: rounds of the Pallas/mpmd table.
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// `report`: programs of each fuzzer run.
        #[arg(long, default_value_t = 30)]
        fuzz_programs: u64,
    },
    /// Build the release binaries `scripts/gpu-check.sh` runs on a machine
    /// with an NVIDIA GPU but no Rust toolchain, into DIR (stripped).
    GpuBundle {
        /// Folder to fill (created if missing).
        dir: PathBuf,
    },
    /// Set up a Python environment under target/mpmd-tools/pyenv, build the
    /// `mpmd` package into it and run pytest over python/tests (arguments
    /// go to pytest).
    Pytest {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Only set up (or check) the tools and print what was found.
    Setup,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum BenchTarget {
    Interp,
    Wgpu,
    Cuda,
    /// The performance report (`bench.rs`).
    Report,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = workspace_root();
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let setup = tools::set_up(&root, ci);
    for line in &setup.notes {
        eprintln!("xtask: {line}");
    }
    for line in &setup.missing {
        eprintln!("xtask: warning: {line}");
    }
    if ci && !setup.missing.is_empty() {
        eprintln!(
            "xtask: error: CI=true and {} tool(s) are missing (see the warnings above)",
            setup.missing.len()
        );
        return ExitCode::FAILURE;
    }
    if !setup.missing.is_empty() {
        eprintln!("xtask: warning: continuing without them; tests that need them will fail");
    }
    match cli.task {
        Task::Setup => {
            if setup.missing.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Task::Test { args } => {
            let cargo_tests = run_tests(&root, &setup, &args);
            // A run narrowed to some crates (`-p NAME`) is not the whole suite.
            if !package_args(&args).is_empty() {
                return cargo_tests;
            }
            let pytest = python::run_pytest(&root, &setup, &[]);
            if cargo_tests == ExitCode::SUCCESS {
                pytest
            } else {
                cargo_tests
            }
        }
        Task::Pytest { args } => python::run_pytest(&root, &setup, &args),
        Task::Conformance {
            release: _,
            debug,
            args,
        } => run_conformance_binary(&root, &setup, "mpmd-conformance", !debug, &args),
        Task::Fuzz { release, args } => {
            run_conformance_binary(&root, &setup, "mpmd-fuzz", release, &args)
        }
        Task::Bench {
            which,
            rounds,
            fuzz_programs,
        } => {
            let options = bench::ReportOptions {
                rounds: rounds.max(1),
                fuzz_programs: fuzz_programs.max(1),
            };
            run_benches(&root, &setup, &which, &options)
        }
        Task::GpuBundle { dir } => gpu_bundle(&root, &setup, &dir),
    }
}

fn run_benches(
    root: &Path,
    setup: &tools::Setup,
    which: &[BenchTarget],
    report: &bench::ReportOptions,
) -> ExitCode {
    let all = [BenchTarget::Interp, BenchTarget::Wgpu, BenchTarget::Cuda];
    let which = if which.is_empty() { &all[..] } else { which };
    let mut failed = Vec::new();
    for target in which {
        let mut cmd = cargo(root, setup);
        match target {
            // Throughput over 2^20 elements, and the GEMM example at small shapes.
            BenchTarget::Interp => cmd.args([
                "bench",
                "-p",
                "mpmd-core",
                "--bench",
                "interp",
                "--bench",
                "gemm_interp",
            ]),
            BenchTarget::Wgpu => {
                cmd.args(["bench", "-p", "mpmd-wgpu", "--bench", "wgsl_vs_handwritten"])
            }
            BenchTarget::Cuda => cmd
                .args([
                    "run",
                    "--release",
                    "-p",
                    "mpmd-cuda",
                    "--bin",
                    "cuda-bench",
                    "--",
                ])
                .arg("--examples")
                .arg(root.join("examples")),
            BenchTarget::Report => {
                if bench::report(root, setup, report) != ExitCode::SUCCESS {
                    failed.push("report".into());
                }
                continue;
            }
        };
        if run_announced(&mut cmd) != ExitCode::SUCCESS {
            failed.push(format!("{target:?}").to_lowercase());
        }
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("xtask: benchmarks failed: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}

/// The binaries `scripts/gpu-check.sh` looks for.
const BUNDLE_BINARIES: [&str; 4] = ["mpmd", "mpmd-conformance", "mpmd-fuzz", "cuda-bench"];

/// Every file [`gpu_bundle`] writes (besides `vulkan/*.deb`), in order:
/// `scripts/gpu-check.sh`'s `BUNDLE_FILES`, which its dry run checks a
/// bundle for (a test keeps the two lists equal).
const BUNDLE_FILES: [&str; 8] = [
    "mpmd",
    "mpmd-conformance",
    "mpmd-fuzz",
    "cuda-bench",
    "gpu_run",
    "gpu_embedding",
    "_mpmd.abi3.so",
    "wgsl_bench",
];

/// Debian packages that let WGSL run on the GPU machine's own Vulkan driver
/// when that machine has no Vulkan loader: the loader, and the GLVND
/// libraries NVIDIA's Vulkan driver library links against.
const BUNDLE_VULKAN_PACKAGES: [&str; 7] = [
    "libvulkan1",
    "libglvnd0",
    "libgl1",
    "libglx0",
    "libegl1",
    "libgles2",
    "libopengl0",
];

/// Downloads [`BUNDLE_VULKAN_PACKAGES`] into `dir` (`apt-get download`,
/// after one `apt-get update` when the package lists lack them). Optional:
/// without them the GPU check skips WGSL and says why.
fn download_vulkan_packages(dir: &Path) -> Result<usize, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let download = || {
        Command::new("apt-get")
            .arg("download")
            .args(BUNDLE_VULKAN_PACKAGES)
            .current_dir(dir)
            .output()
    };
    let mut output = download().map_err(|e| format!("cannot run apt-get: {e}"))?;
    if !output.status.success() {
        let _ = Command::new("apt-get").args(["update", "-qq"]).status();
        output = download().map_err(|e| format!("cannot run apt-get: {e}"))?;
    }
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).trim().to_string());
    }
    let debs = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "deb"))
        })
        .count();
    Ok(debs)
}

fn gpu_bundle(root: &Path, setup: &tools::Setup, dir: &Path) -> ExitCode {
    let mut build = cargo(root, setup);
    build.args([
        "build",
        "--release",
        "-p",
        "mpmd-conformance",
        "-p",
        "mpmd-cuda",
        "-p",
        "mpmd-cli",
        "--bins",
    ]);
    if run_announced(&mut build) != ExitCode::SUCCESS {
        return ExitCode::FAILURE;
    }
    // The Python extension (abi3: any CPython 3.9 or later loads it), for
    // the package's GPU tests and the JAX benchmark; the script puts it
    // beside the checkout's python/mpmd sources.
    let mut extension = cargo(root, setup);
    extension.args(["build", "--release", "-p", "mpmd-python"]);
    let venv_python = tools::target_dir(root)
        .join("mpmd-tools")
        .join("pyenv")
        .join("bin")
        .join("python");
    if venv_python.is_file() && std::env::var_os("PYO3_PYTHON").is_none() {
        extension.env("PYO3_PYTHON", &venv_python);
    }
    if run_announced(&mut extension) != ExitCode::SUCCESS {
        return ExitCode::FAILURE;
    }
    // The GPU test binaries and the WGSL benchmark: their paths are only in
    // cargo's JSON messages.
    let Some(gpu_run) = built_executable(
        root,
        setup,
        &["test", "--release", "-p", "mpmd-cuda", "--test", "gpu_run"],
        "gpu_run",
    ) else {
        return ExitCode::FAILURE;
    };
    let Some(gpu_embedding) = built_executable(
        root,
        setup,
        &[
            "test",
            "--release",
            "-p",
            "mpmd-cuda",
            "--test",
            "gpu_embedding",
        ],
        "gpu_embedding",
    ) else {
        return ExitCode::FAILURE;
    };
    let Some(wgsl_bench) = built_executable(
        root,
        setup,
        &["bench", "-p", "mpmd-wgpu", "--bench", "wgsl_vs_handwritten"],
        "wgsl_vs_handwritten",
    ) else {
        return ExitCode::FAILURE;
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("xtask: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let release = tools::target_dir(root).join("release");
    let mut files: Vec<(PathBuf, &str)> = BUNDLE_BINARIES
        .iter()
        .map(|name| (release.join(name), *name))
        .collect();
    files.push((PathBuf::from(gpu_run), "gpu_run"));
    files.push((PathBuf::from(gpu_embedding), "gpu_embedding"));
    files.push((release.join("lib_mpmd.so"), "_mpmd.abi3.so"));
    files.push((PathBuf::from(wgsl_bench), "wgsl_bench"));
    let names: Vec<&str> = files.iter().map(|(_, name)| *name).collect();
    if names != BUNDLE_FILES {
        eprintln!("xtask: the bundle's files {names:?} are not BUNDLE_FILES {BUNDLE_FILES:?}");
        return ExitCode::FAILURE;
    }
    let mut total = 0;
    for (from, name) in files {
        let to = dir.join(name);
        if let Err(e) = std::fs::copy(&from, &to) {
            eprintln!(
                "xtask: cannot copy {} to {}: {e}",
                from.display(),
                to.display()
            );
            return ExitCode::FAILURE;
        }
        // Smaller to carry; a missing `strip` only costs size.
        let _ = Command::new("strip").arg(&to).status();
        total += std::fs::metadata(&to).map(|m| m.len()).unwrap_or(0);
    }
    match download_vulkan_packages(&dir.join("vulkan")) {
        Ok(debs) => eprintln!(
            "xtask: {} holds {debs} Vulkan loader packages (WGSL on the GPU's Vulkan driver)",
            dir.join("vulkan").display()
        ),
        Err(e) => eprintln!(
            "xtask: no Vulkan loader packages in the bundle ({e}); the GPU check will run WGSL only where the GPU machine has libvulkan.so.1"
        ),
    }
    eprintln!(
        "xtask: {} holds the GPU check's binaries ({:.1} MB); on the GPU machine, from a checkout of this commit: scripts/gpu-check.sh {} [REPORT]",
        dir.display(),
        total as f64 / 1e6,
        dir.display()
    );
    // The dry run: every file a step needs, the size sent with the
    // checkout, the library searches, pytest's collection, the limits.
    let mut dry_run = Command::new("bash");
    dry_run
        .arg(root.join("scripts").join("gpu-check.sh"))
        .arg("--dry-run")
        .arg(dir)
        .arg(dir.join("dry-run-report.txt"));
    setup.apply_env(&mut dry_run);
    if std::env::var_os("MPMD_GPU_CHECK_PYTHON").is_none() && venv_python.is_file() {
        dry_run.env("MPMD_GPU_CHECK_PYTHON", &venv_python);
    }
    run_announced(&mut dry_run)
}

/// The `"executable"` of the test target `name` in cargo's JSON messages.
/// Builds a test or bench target without running it (`cargo ARGS --no-run`)
/// and returns its executable; on failure says why and returns `None`.
fn built_executable(
    root: &Path,
    setup: &tools::Setup,
    args: &[&str],
    name: &str,
) -> Option<String> {
    let mut build = cargo(root, setup);
    build.args(args).args(["--no-run", "--message-format=json"]);
    eprintln!("xtask: running {}", describe(&build));
    let output = match build.output() {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            eprintln!("{}", String::from_utf8_lossy(&o.stderr));
            return None;
        }
        Err(e) => {
            eprintln!("xtask: cannot start {}: {e}", describe(&build));
            return None;
        }
    };
    let executable = test_executable(&String::from_utf8_lossy(&output.stdout), name);
    if executable.is_none() {
        eprintln!("xtask: cargo did not report the `{name}` executable");
    }
    executable
}

fn test_executable(messages: &str, name: &str) -> Option<String> {
    let target = format!("\"name\":\"{name}\"");
    messages
        .lines()
        .filter(|line| line.contains("\"reason\":\"compiler-artifact\"") && line.contains(&target))
        .find_map(|line| {
            let start = line.find("\"executable\":\"")? + "\"executable\":\"".len();
            let end = start + line[start..].find('"')?;
            Some(line[start..end].to_string())
        })
}

/// Runs one binary of the `mpmd-conformance` crate with the tools' environment.
fn run_conformance_binary(
    root: &Path,
    setup: &tools::Setup,
    binary: &str,
    release: bool,
    args: &[String],
) -> ExitCode {
    let cwd = std::env::current_dir().unwrap_or_else(|_| root.to_path_buf());
    eprintln!(
        "xtask: building {binary} ({}); cargo's progress follows, then the harness's on stderr",
        if release {
            "optimised: a few minutes on 2 cores the first time"
        } else {
            "workspace crates unoptimised"
        }
    );
    exit_code_of(&mut conformance_command(
        root, setup, binary, release, args, &cwd,
    ))
}

/// `cargo run` of a conformance binary in the caller's working directory
/// `cwd`, so that relative paths (--json, --cases, --found-dir) and the
/// corpus the binary finds from there mean what they say.
fn conformance_command(
    root: &Path,
    setup: &tools::Setup,
    binary: &str,
    release: bool,
    args: &[String],
    cwd: &Path,
) -> Command {
    // Not `--quiet`: cargo's `Compiling ...` lines and its progress bar are
    // the progress of the build, which takes minutes on a fresh machine.
    let mut cmd = cargo(root, setup);
    cmd.current_dir(cwd)
        .arg("run")
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .args(["--package", "mpmd-conformance"]);
    if release {
        cmd.arg("--release");
    }
    cmd.args(["--bin", binary, "--"]).args(args);
    // lavapipe runs as many workgroups at once as its thread pool has
    // threads (by default one per CPU); the corpus's cycles need up to
    // `LAVAPIPE_CONFORMANCE_THREADS` at once, which the WGSL backend then
    // establishes (and verifies) with a probe. Other drivers ignore it; a
    // value the caller set is kept.
    if std::env::var_os("LP_NUM_THREADS").is_none() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        cmd.env(
            "LP_NUM_THREADS",
            cpus.max(LAVAPIPE_CONFORMANCE_THREADS).to_string(),
        );
    }
    cmd
}

/// lavapipe threads conformance asks for at least: the most workgroups a
/// corpus case with a cycle (or a wait on a higher block) runs at once.
const LAVAPIPE_CONFORMANCE_THREADS: usize = 4;

/// The workspace root, found at run time (never where xtask was built):
/// the parent of `$CARGO_MANIFEST_DIR`, which `cargo xtask` (an alias of
/// `cargo run -p xtask`) sets, else the nearest folder at or above the
/// working directory whose `Cargo.toml` declares `[workspace]`.
fn workspace_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    root_from(
        std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from),
        &cwd,
    )
}

fn root_from(manifest_dir: Option<PathBuf>, cwd: &Path) -> PathBuf {
    if let Some(dir) = manifest_dir.filter(|d| d.join("Cargo.toml").is_file()) {
        if let Some(parent) = dir.parent().filter(|p| is_workspace(p)) {
            return parent.to_path_buf();
        }
    }
    cwd.ancestors()
        .find(|d| is_workspace(d))
        .unwrap_or(cwd)
        .to_path_buf()
}

fn is_workspace(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml"))
        .is_ok_and(|t| t.lines().any(|l| l.trim() == "[workspace]"))
}

/// A `cargo` command in the workspace root with the tools' environment.
fn cargo(root: &Path, setup: &tools::Setup) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root);
    setup.apply_env(&mut cmd);
    cmd
}

fn run_tests(root: &Path, setup: &tools::Setup, extra: &[String]) -> ExitCode {
    let nextest = tools::has_nextest();
    // `-p NAME` narrows the run; otherwise every crate of the workspace.
    let scope: &[&str] = if extra
        .iter()
        .any(|a| a == "-p" || a.starts_with("--package") || a.starts_with("-p"))
    {
        &[]
    } else {
        &["--workspace"]
    };
    let mut cmd = cargo(root, setup);
    if nextest {
        cmd.args(["nextest", "run", "--no-fail-fast"]);
    } else {
        eprintln!("xtask: cargo-nextest not installed; using `cargo test`");
        cmd.args(["test", "--no-fail-fast"]);
    }
    cmd.args(scope).args(extra);
    let code = run_announced(&mut cmd);
    if code != ExitCode::SUCCESS || !nextest {
        return code;
    }
    // nextest does not run doctests.
    let mut doc = cargo(root, setup);
    doc.args(["test", "--doc"])
        .args(scope)
        .args(package_args(extra));
    run_announced(&mut doc)
}

/// The `-p NAME` / `--package NAME` / `--package=NAME` arguments of `args`
/// (the doctest run takes only these of the runner's arguments).
fn package_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut iter = args.iter();
    while let Some(a) = iter.next() {
        if a == "-p" || a == "--package" {
            out.push(a.clone());
            out.extend(iter.next().cloned());
        } else if a.starts_with("--package=") || (a.starts_with("-p") && a.len() > 2) {
            out.push(a.clone());
        }
    }
    out
}

pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` with inherited stdio (so the runner's summary streams through)
/// and returns its exit code.
/// Says which command runs, then runs it ([`exit_code_of`]).
fn run_announced(cmd: &mut Command) -> ExitCode {
    eprintln!("xtask: running {}", describe(cmd));
    exit_code_of(cmd)
}

fn exit_code_of(cmd: &mut Command) -> ExitCode {
    match cmd.status() {
        Ok(status) => match status.code() {
            Some(0) => ExitCode::SUCCESS,
            Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1).max(1)),
            None => {
                eprintln!("xtask: {} was killed by a signal", describe(cmd));
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("xtask: cannot start {}: {e}", describe(cmd));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_executable_is_read_from_cargo_messages() {
        let messages = concat!(
            r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"mpmd_cuda"},"executable":null}"#,
            "\n",
            r#"{"reason":"compiler-artifact","target":{"kind":["test"],"name":"gpu_run"},"profile":{},"executable":"/r/target/release/deps/gpu_run-0123"}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
        );
        assert_eq!(
            test_executable(messages, "gpu_run").as_deref(),
            Some("/r/target/release/deps/gpu_run-0123")
        );
        assert_eq!(test_executable(messages, "compile"), None);
    }

    #[test]
    fn the_root_comes_from_the_run_time_environment() {
        let base = std::env::temp_dir().join(format!("xtask-root-{}", std::process::id()));
        let crate_dir = base.join("xtask");
        let deep = base.join("conformance").join("cases");
        std::fs::create_dir_all(&crate_dir).unwrap();
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(base.join("Cargo.toml"), "[workspace]\nmembers = []\n").unwrap();
        std::fs::write(crate_dir.join("Cargo.toml"), "[package]\n").unwrap();
        // Cargo's variable at run time wins; without it, the working directory.
        assert_eq!(root_from(Some(crate_dir.clone()), Path::new("/")), base);
        assert_eq!(root_from(None, &deep), base);
        assert_eq!(root_from(Some(PathBuf::from("/nonexistent")), &deep), base);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn conformance_binaries_run_in_the_callers_directory() {
        let setup = tools::Setup::default();
        let args = vec!["--json".to_string(), "out.json".to_string()];
        let cmd = conformance_command(
            Path::new("/repo"),
            &setup,
            "mpmd-fuzz",
            false,
            &args,
            Path::new("/home/me/work"),
        );
        assert_eq!(cmd.get_current_dir(), Some(Path::new("/home/me/work")));
        let argv: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            argv,
            [
                "run",
                "--manifest-path",
                "/repo/Cargo.toml",
                "--package",
                "mpmd-conformance",
                "--bin",
                "mpmd-fuzz",
                "--",
                "--json",
                "out.json"
            ]
        );
    }

    /// A bundle of stand-ins: every file executable (the extension too).
    fn fake_bundle(dir: &Path, files: &[&str]) {
        std::fs::create_dir_all(dir).unwrap();
        for name in files {
            let path = dir.join(name);
            std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
            let mut permissions = std::fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
            std::fs::set_permissions(&path, permissions).unwrap();
        }
    }

    /// A python that answers the dry run's questions as the GPU machine's
    /// would (the versions it has), and collects two tests.
    const FAKE_PYTHON: &str = r#"#!/bin/sh
case "$*" in
  *"import numpy, pytest"*) exit 0 ;;
  *sys.version*) echo 3.12.3 ;;
  *"import jax;"*) echo 0.11.2 ;;
  *"import torch;"*) echo 2.9.0 ;;
  *"import ml_dtypes;"*) echo 0.5.3 ;;
  *--collect-only*)
    echo "tests_gpu/test_cuda.py::test_one"
    echo "tests_gpu/test_cuda.py::test_two" ;;
  *) exit 1 ;;
esac
"#;

    fn dry_run(bundle: &Path, python: &Path) -> (Option<i32>, String) {
        let root = workspace_root();
        let output = Command::new("bash")
            .arg(root.join("scripts/gpu-check.sh"))
            .arg("--dry-run")
            .arg(bundle)
            .arg(bundle.join("report.txt"))
            .env("MPMD_GPU_CHECK_PYTHON", python)
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    }

    /// The GPU check's dry run works here, without a GPU, so the script
    /// cannot rot between the rare runs on one: a complete bundle passes
    /// (each file, the size, the limits, pytest's collection), a missing
    /// file fails naming it. The real extension and pytest's real
    /// collection are checked where a bundle is built (`cargo xtask
    /// gpu-bundle` ends with the dry run); this test's are stand-ins.
    #[test]
    fn the_gpu_check_dry_run_checks_the_bundle() {
        let base = std::env::temp_dir().join(format!("xtask-dry-run-{}", std::process::id()));
        let python = base.join("python3");
        fake_bundle(&base, &[]);
        std::fs::write(&python, FAKE_PYTHON).unwrap();
        let mut permissions = std::fs::metadata(&python).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&python, permissions).unwrap();

        let complete = base.join("complete");
        fake_bundle(&complete, &BUNDLE_FILES);
        let (code, report) = dry_run(&complete, &python);
        assert_eq!(code, Some(0), "{report}");
        for name in BUNDLE_FILES {
            assert!(
                report.contains(&format!("dry-run bundle {name} ok\n")),
                "{name}: {report}"
            );
        }
        for line in [
            "dry-run size ok: checkout ",
            "dry-run limits ok: 540 s (at most 540 s, under 10 minutes with the set-up)\n",
            "dry-run python jax 0.11.2\n",
            "dry-run python collected 2 tests in python/tests_gpu\n",
            "dry-run ok: the GPU check would start with this bundle\n",
        ] {
            assert!(report.contains(line), "{line}: {report}");
        }
        // The library searches say what they found or that they found nothing.
        assert!(report.contains("\nnvrtc "), "{report}");
        assert!(report.contains("\ncublas "), "{report}");

        let partial = base.join("partial");
        fake_bundle(&partial, &BUNDLE_FILES[..4]);
        let (code, report) = dry_run(&partial, &python);
        assert_eq!(code, Some(1), "{report}");
        assert!(
            report.contains(&format!(
                "dry-run FAILED bundle gpu_run: no executable gpu_run in {}\n",
                partial.display()
            )),
            "{report}"
        );
        assert!(!report.contains("dry-run ok"), "{report}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_gpu_check_looks_for_the_files_the_bundle_holds() {
        let script =
            std::fs::read_to_string(workspace_root().join("scripts/gpu-check.sh")).unwrap();
        let line = script
            .lines()
            .find(|l| l.starts_with("BUNDLE_FILES=("))
            .expect("gpu-check.sh lists BUNDLE_FILES");
        let listed: Vec<&str> = line["BUNDLE_FILES=(".len()..line.len() - 1]
            .split_whitespace()
            .collect();
        assert_eq!(listed, BUNDLE_FILES);
        assert_eq!(BUNDLE_FILES[..4], BUNDLE_BINARIES);
    }

    #[test]
    fn package_args_keeps_only_package_selection() {
        let args: Vec<String> = [
            "-p",
            "a",
            "--no-fail-fast",
            "--package=b",
            "-pc",
            "--package",
            "d",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            package_args(&args),
            vec!["-p", "a", "--package=b", "-pc", "--package", "d"]
        );
    }
}
