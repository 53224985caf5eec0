//! The `mpmd` command line: `check`, `lower` and `run` on text-format files.
//!
//! The binary is a thin wrapper around [`main_with_args`], so that tests and
//! other tools can run the same code.

pub mod compare;
pub mod describe;
pub mod files;
pub mod npy;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use mpmd_core::case::CaseSpec;
use mpmd_core::host::host_shape;
use mpmd_core::inputs::{self, Generation};
use mpmd_core::interp::{
    Charge, InterpOptions, Interpreter, MemoryBudget, MmaProbe, OverBudget,
    DEFAULT_EXTRA_SCHEDULES, DEFAULT_MEMORY_LIMIT, DEFAULT_TIME_LIMIT,
};
use mpmd_core::ir::{Call, Literal, Module, MpmdMap, Operand, ScalarType, Type};
use mpmd_core::plan::{lower, LaunchPlan, LowerError};
use mpmd_core::text;
use mpmd_core::validate::{self, ValidModule, ValidateOptions};
use mpmd_core::{Backend, CallArgs, HostTensor, Mode, RunError, RunOptions};
use thiserror::Error;

use crate::compare::Tolerance;

#[derive(Debug, Parser)]
#[command(
    name = "mpmd",
    version,
    about = "Check, lower and run MPMD GPU kernels written in the .mpmd text format"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse and validate each file; print diagnostics for those that are wrong.
    Check {
        /// The .mpmd files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Lower a map and print the result for a target.
    Lower {
        #[arg(long, value_enum, default_value_t = Target::Plan)]
        target: Target,
        /// The .mpmd file to lower.
        file: PathBuf,
        /// The map to lower (default: every map of the file, in order; CUDA
        /// and WGSL of several maps need --map or --out-dir).
        #[arg(long)]
        map: Option<String>,
        /// Write one file per map into this folder, named after the map
        /// (`NAME.cu`, `NAME.wgsl`, `NAME.plan.txt`), instead of printing.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Run the file's calls in order on one backend and summarise the outputs.
    Run(RunFlags),
}

/// The flags of `mpmd run`.
#[derive(clap::Args, Debug)]
pub struct RunFlags {
    /// The .mpmd file whose calls to run.
    pub file: PathBuf,
    #[arg(long, value_enum, default_value_t = BackendKind::Interp)]
    pub backend: BackendKind,
    /// Seed for generated inputs and for the backend's schedules.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `NAME=PATH.npy`: data for an input, or for a device-resident ref
    /// before the first call, instead of generating it.
    #[arg(long = "input", value_name = "NAME=PATH")]
    pub inputs: Vec<String>,
    /// `NAME=VALUE`: a scalar parameter (overrides the call's value).
    #[arg(long = "scalar", value_name = "NAME=VALUE")]
    pub scalars: Vec<String>,
    /// Write every output, and every device-resident ref after the last
    /// call, as .npy into this folder (the summary names each file).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Check every access: out-of-bounds accesses are errors; the
    /// interpreter also reports data races, reads of unwritten memory
    /// and results that differ between schedules (see --schedules).
    #[arg(long)]
    pub checked: bool,
    /// Interpreter: seeded schedules to run beyond the lockstep one
    /// [default: 2 with --checked, as conformance runs, else 0].
    #[arg(long, value_name = "N")]
    pub schedules: Option<u32>,
    /// Wall-clock bound on one call, in seconds (0: no bound): on the
    /// interpreter all schedules together, buffers filled included; on
    /// wgpu compiling the pipelines, the dispatches and reading back (a
    /// compile or dispatch past it goes on in the background until the
    /// process exits).
    #[arg(long, value_name = "SECONDS", default_value_t = Seconds(Some(DEFAULT_TIME_LIMIT)))]
    pub timeout: Seconds,
    /// Bound on the host memory the run holds at once: generated and
    /// read inputs and residents together, and on the interpreter
    /// everything it allocates beside them (buffers, block states,
    /// detection state). BYTES, or with a binary suffix: 512M, 4G.
    #[arg(long, value_name = "BYTES", default_value_t = ByteSize(DEFAULT_MEMORY_LIMIT))]
    pub memory_limit: ByteSize,
    /// wgpu: declare that every workgroup of a dispatch runs at once on
    /// this adapter, so that cycles and waits within one program may run.
    /// Such results are reported as unverified.
    #[arg(long)]
    pub co_resident: bool,
    /// Run only call K of the file (0-based, in the order of its `call`
    /// lines, as the summary numbers them). Earlier calls do not run, so
    /// residents start as before the first call: from --input, else the
    /// case's `generate` line, else as declared (semaphores and `zeroed`
    /// at zero, the rest uninitialised).
    #[arg(long, value_name = "K")]
    pub call: Option<usize>,
    /// Print each call's wall time (the whole `run` of the backend:
    /// compiling a plan it has not seen, uploads, launch, read-back) and,
    /// on CUDA, the kernel's time between two events around the launch.
    #[arg(long)]
    pub time: bool,
    /// `NAME=PATH.npy`: compare output NAME with a reference array of its
    /// dtype and shape; any mismatch exits 1 with a report. NAME is an
    /// output of the calls that run, or, where several calls have one of
    /// that name, the file stem --out writes (`INDEX_MAP_OUTPUT`).
    /// Floats are compared exactly unless --ulp or --rtol/--atol say
    /// otherwise; integers and bools always exactly; NaN matches NaN.
    #[arg(long = "compare", value_name = "NAME=PATH")]
    pub compares: Vec<String>,
    /// With --compare: float outputs may differ from the reference by N
    /// units in the last place of their own type (f32, f16 or bf16).
    #[arg(long, value_name = "N", requires = "compares", conflicts_with_all = ["rtol", "atol"])]
    pub ulp: Option<u32>,
    /// With --compare: relative tolerance of numpy's allclose,
    /// |got - expected| <= atol + rtol * |expected| [default: 0].
    #[arg(long, value_name = "R", requires = "compares", value_parser = parse_tolerance)]
    pub rtol: Option<f64>,
    /// With --compare: absolute tolerance of numpy's allclose (see
    /// --rtol) [default: 0].
    #[arg(long, value_name = "A", requires = "compares", value_parser = parse_tolerance)]
    pub atol: Option<f64>,
}

/// `--rtol` and `--atol`: a finite number at least 0.
fn parse_tolerance(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| {
            format!("`{text}` is not a tolerance (a finite number at least 0, such as 1e-5)")
        })
}

/// `--timeout`: seconds as a decimal number; 0 is no bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seconds(pub Option<Duration>);

impl FromStr for Seconds {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let seconds: f64 = text
            .parse()
            .ok()
            .filter(|s: &f64| s.is_finite() && *s >= 0.0 && *s <= 1e12)
            .ok_or_else(|| {
                format!("`{text}` is not a number of seconds (such as 60, 0.5, or 0 for no bound)")
            })?;
        Ok(Seconds(
            (seconds > 0.0).then(|| Duration::from_secs_f64(seconds)),
        ))
    }
}

impl std::fmt::Display for Seconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => f.write_str("0"),
            Some(d) => write!(f, "{}", d.as_secs_f64()),
        }
    }
}

/// `--memory-limit`: a byte count, optionally with a binary suffix
/// (`K`, `M`, `G`, `T`: powers of 1024; `4G`, `512MiB`, `1024`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

const BYTE_SUFFIXES: [(char, u32); 4] = [('K', 10), ('M', 20), ('G', 30), ('T', 40)];

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("`{text}` is not a byte count (such as 1048576, 512M or 4G)");
        let upper = text.trim().to_ascii_uppercase();
        let trimmed = upper
            .strip_suffix("IB")
            .or_else(|| upper.strip_suffix('B'))
            .unwrap_or(&upper);
        let (digits, shift) = match trimmed.chars().last() {
            Some(c) if c.is_ascii_alphabetic() => {
                let shift = BYTE_SUFFIXES
                    .iter()
                    .find(|(s, _)| *s == c)
                    .map(|(_, shift)| *shift)
                    .ok_or_else(bad)?;
                (&trimmed[..trimmed.len() - 1], shift)
            }
            _ => (trimmed, 0),
        };
        let value: u64 = digits.parse().map_err(|_| bad())?;
        value
            .checked_mul(1 << shift)
            .map(ByteSize)
            .ok_or_else(|| format!("`{text}` is more bytes than fit in 64 bits"))
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let exact = BYTE_SUFFIXES
            .iter()
            .rev()
            .find(|(_, shift)| self.0 != 0 && self.0.is_multiple_of(1 << shift));
        match exact {
            Some((suffix, shift)) => write!(f, "{}{suffix}", self.0 >> shift),
            None => write!(f, "{}", self.0),
        }
    }
}

/// What `mpmd lower` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// The launch plan, readably.
    Plan,
    /// CUDA C (from `mpmd-cuda`).
    Cuda,
    /// WGSL (from `mpmd-wgpu`).
    Wgsl,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// The reference interpreter.
    Interp,
    /// WebGPU through wgpu (any adapter).
    Wgpu,
    /// CUDA through NVRTC (NVIDIA GPUs); each semaphore wait gives up after
    /// $MPMD_CUDA_WAIT_TIMEOUT_MS milliseconds (default 10000).
    Cuda,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Interp => "interp",
            Self::Wgpu => "wgpu",
            Self::Cuda => "cuda",
        }
    }
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Cuda => "cuda",
            Self::Wgsl => "wgsl",
        }
    }
}

#[derive(Debug, Error)]
pub enum CliError {
    #[error("cannot read `{path}`: {source}")]
    ReadFile {
        path: String,
        source: std::io::Error,
    },
    /// Already rendered diagnostics (parse or validation errors).
    #[error("{0}")]
    Rejected(String),
    #[error("backend `{name}` is not available: {reason}")]
    BackendUnavailable { name: &'static str, reason: String },
    #[error("cannot emit {target}: {reason}")]
    Emit {
        target: &'static str,
        reason: String,
    },
    #[error("cannot lower: {0}")]
    Lower(#[from] LowerError),
    #[error("{0}")]
    Usage(String),
    #[error("call {index} (map `{map}`) failed: {error}")]
    Run {
        index: usize,
        map: String,
        error: Box<RunError>,
    },
    #[error(transparent)]
    Npy(#[from] npy::NpyError),
    #[error("{error}{}", limit_hint(error))]
    Generate { error: inputs::GenerateError },
    /// Inputs (generated or read) would pass `--memory-limit` beside what
    /// the run already holds.
    #[error("{0}; raise it with --memory-limit BYTES")]
    MemoryLimit(OverBudget),
    #[error("cannot give resident `{name}` its data: {error}")]
    Resident { name: String, error: Box<RunError> },
    #[error("cannot create `{path}`: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write `{path}`: {source}")]
    WriteFile {
        path: String,
        source: std::io::Error,
    },
    /// `--compare` found outputs that differ from their reference: the
    /// run's summary (stdout, as for a run that matches) and one report per
    /// such output (stderr).
    #[error("{report}")]
    Mismatch { summary: String, report: String },
}

impl From<inputs::GenerateError> for CliError {
    fn from(error: inputs::GenerateError) -> Self {
        CliError::Generate { error }
    }
}

/// How the CLI user raises the limit a generation error names.
fn limit_hint(error: &inputs::GenerateError) -> &'static str {
    match error {
        inputs::GenerateError::TooLarge { .. } | inputs::GenerateError::OverBudget { .. } => {
            "; raise it with --memory-limit BYTES"
        }
        _ => "",
    }
}

/// The Rust options that messages of the library name, and the flag that
/// sets each in the CLI: the one table that turns one into the other.
pub const OPTION_FLAGS: &[(&str, &str)] = &[
    ("InterpOptions::time_limit", "--timeout SECONDS"),
    ("WgpuOptions::time_limit", "--timeout SECONDS"),
    ("InterpOptions::memory_limit", "--memory-limit BYTES"),
    ("InterpOptions::extra_schedules", "--schedules N"),
    ("WgpuOptions::co_resident", "--co-resident"),
];

/// `text` with every Rust option of [`OPTION_FLAGS`] replaced by its flag.
pub fn name_flags(text: &str) -> String {
    name_options(text, OPTION_FLAGS)
}

/// `text` with every Rust option of `table` replaced by its name there.
pub fn name_options(text: &str, table: &[(&str, &str)]) -> String {
    table.iter().fold(text.to_string(), |t, (option, name)| {
        t.replace(option, name)
    })
}

/// A run error as the CLI reports it: options named by their flags.
pub fn for_cli(error: RunError) -> RunError {
    with_option_names(error, OPTION_FLAGS)
}

/// A run error whose messages name options as `table` says (the CLI's
/// flags, the Python package's parameters).
pub fn with_option_names(error: RunError, table: &[(&str, &str)]) -> RunError {
    let rename = |text: &str| name_options(text, table);
    match error {
        RunError::TimeLimit {
            at,
            limit_ms,
            option,
        } => RunError::TimeLimit {
            at,
            limit_ms,
            option: rename(&option),
        },
        RunError::MemoryLimit {
            what,
            needed,
            limit,
            option,
        } => RunError::MemoryLimit {
            what,
            needed,
            limit,
            option: rename(&option),
        },
        RunError::Deadlock { wait_for_graph } => RunError::Deadlock {
            wait_for_graph: rename(&wait_for_graph),
        },
        RunError::Nondeterministic { detail } => RunError::Nondeterministic {
            detail: rename(&detail),
        },
        RunError::Unsupported { reason } => RunError::Unsupported {
            reason: rename(&reason),
        },
        RunError::Refused { reason } => RunError::Refused {
            reason: rename(&reason),
        },
        RunError::BadArguments(text) => RunError::BadArguments(rename(&text)),
        RunError::Backend(text) => RunError::Backend(rename(&text)),
        other => other,
    }
}

/// Parses `args` (the program name first) and runs the command: output on
/// stdout, errors on stderr.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match run_command(cli.command) {
        Ok(stdout) => {
            print!("{stdout}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            match &e {
                CliError::Rejected(rendered) => eprint!("{rendered}"),
                CliError::Mismatch { summary, report } => {
                    print!("{summary}");
                    eprint!("{report}");
                }
                other => eprintln!("error: {other}"),
            }
            ExitCode::from(1)
        }
    }
}

/// Runs one command; returns what it prints on success.
pub fn run_command(command: Command) -> Result<String, CliError> {
    match command {
        Command::Check { files } => check(&files),
        Command::Lower {
            target,
            file,
            map,
            out_dir,
        } => lower_command(target, &file, map.as_deref(), out_dir.as_deref()),
        Command::Run(flags) => run(&RunRequest::from(flags)),
    }
}

/// The largest `.mpmd` file read (a bound, so that a device or a huge file
/// given by mistake is refused instead of filling memory).
pub const MAX_SOURCE_BYTES: u64 = 64 << 20;

/// The file's text; bytes that are not UTF-8 are a rendered error at their
/// line and column.
fn read_source(path: &Path) -> Result<String, CliError> {
    let bytes =
        files::read_regular(path, MAX_SOURCE_BYTES).map_err(|source| CliError::ReadFile {
            path: path.display().to_string(),
            source,
        })?;
    match text::decode(&bytes) {
        Ok(text) => Ok(text.to_string()),
        Err(e) => Err(CliError::Rejected(e.render(&path.display().to_string()))),
    }
}

/// A file that passed validation: its module, with every program as
/// validation expanded it, and its case section.
#[derive(Clone, Debug)]
pub struct ValidFile {
    pub module: ValidModule,
    /// The `case { ... }` section, if the file has one.
    pub case: Option<CaseSpec>,
}

/// Parses and validates a file, its case section too; errors come back
/// rendered.
pub fn load_file(path: &Path) -> Result<ValidFile, CliError> {
    let source = read_source(path)?;
    load_source(&source, &path.display().to_string())
}

/// The module of a file, as [`load_file`] checks it (a case section is
/// checked, then left out).
pub fn load_module(path: &Path) -> Result<ValidModule, CliError> {
    load_file(path).map(|file| file.module)
}

/// Parses and validates `source`, named `file` in diagnostics: the module,
/// then its case section against it. Errors come back rendered as `mpmd
/// check` prints them (the Python package's `Module.from_text` too).
pub fn load_source(source: &str, file: &str) -> Result<ValidFile, CliError> {
    let parsed = text::parse_file(source).map_err(|e| {
        let mut rendered = e.render(file);
        if !rendered.ends_with('\n') {
            rendered.push('\n');
        }
        CliError::Rejected(rendered)
    })?;
    let validated = validate::validate(&parsed.module, &ValidateOptions::default());
    let mut diagnostics = validated.as_ref().err().cloned().unwrap_or_default();
    if let Some(case) = &parsed.case {
        if let Err(found) = validate::validate_case(&parsed.module, case) {
            diagnostics.extend(found);
        }
    }
    if let (Ok(module), true) = (validated, diagnostics.is_empty()) {
        return Ok(ValidFile {
            module,
            case: parsed.case,
        });
    }
    let renderer = validate::Renderer::new(file, Some((source, &parsed.source_map)));
    let mut rendered: String = diagnostics
        .iter()
        .map(|d| renderer.render(d))
        .collect::<Vec<_>>()
        .join("\n");
    if !rendered.ends_with('\n') {
        rendered.push('\n');
    }
    let _ = writeln!(
        rendered,
        "error: `{file}` has {} error(s)",
        diagnostics.len()
    );
    Err(CliError::Rejected(rendered))
}

fn check(files: &[PathBuf]) -> Result<String, CliError> {
    let mut stdout = String::new();
    let mut rejected = String::new();
    let mut failures = 0;
    for file in files {
        match load_file(file) {
            Ok(_) => {
                let _ = writeln!(stdout, "{}: ok", file.display());
            }
            Err(CliError::Rejected(rendered)) => {
                failures += 1;
                rejected.push_str(&rendered);
            }
            Err(other) => {
                failures += 1;
                let _ = writeln!(rejected, "error: {other}");
            }
        }
    }
    if failures == 0 {
        return Ok(stdout);
    }
    print!("{stdout}");
    let _ = writeln!(
        rejected,
        "error: {failures} of {} file(s) rejected",
        files.len()
    );
    Err(CliError::Rejected(rejected))
}

/// The text `mpmd lower` prints for one lowered map. Each target is one arm.
pub fn emit(target: Target, plan: &LaunchPlan) -> Result<String, CliError> {
    match target {
        Target::Plan => Ok(describe::describe(plan)),
        Target::Cuda => mpmd_cuda::emit(plan, Mode::Fast).map_err(|e| CliError::Emit {
            target: target.name(),
            reason: e.to_string(),
        }),
        Target::Wgsl => mpmd_wgpu::emit(plan, Mode::Fast).map_err(|e| CliError::Emit {
            target: target.name(),
            reason: e.to_string(),
        }),
    }
}

impl Target {
    /// The file name ending of `lower --out-dir`.
    fn extension(self) -> &'static str {
        match self {
            Self::Plan => "plan.txt",
            Self::Cuda => "cu",
            Self::Wgsl => "wgsl",
        }
    }
}

fn lower_command(
    target: Target,
    file: &Path,
    map: Option<&str>,
    out_dir: Option<&Path>,
) -> Result<String, CliError> {
    let module = load_module(file)?;
    let maps: Vec<&str> = match map {
        Some(name) => vec![name],
        None => module.maps.iter().map(|m| m.name.as_str()).collect(),
    };
    if maps.is_empty() {
        return Err(CliError::Usage(format!(
            "`{}` declares no map",
            file.display()
        )));
    }
    // Each CUDA or WGSL text is a whole translation unit (prelude included):
    // two in one stream do not compile, so several maps go to several files.
    if maps.len() > 1 && target != Target::Plan && out_dir.is_none() {
        return Err(CliError::Usage(format!(
            "`{}` has {} maps ({}), and the {} of each is a file of its own: \
             pass --map NAME to print one map's source, or --out-dir DIR to write one file per map",
            file.display(),
            maps.len(),
            maps.iter()
                .map(|m| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(", "),
            target.language()
        )));
    }
    let mut texts = Vec::new();
    for name in &maps {
        texts.push(emit(target, &lower(&module, name)?)?);
    }
    let Some(dir) = out_dir else {
        return Ok(texts.join("\n"));
    };
    create_dir(dir)?;
    let mut written = String::new();
    for (name, text) in maps.iter().zip(texts) {
        let path = dir.join(file_name(name, target.extension()));
        files::write_replacing(&path, text.as_bytes()).map_err(|source| CliError::WriteFile {
            path: path.display().to_string(),
            source,
        })?;
        let _ = writeln!(written, "map `{name}` -> {}", path.display());
    }
    Ok(written)
}

impl Target {
    fn language(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Cuda => "CUDA C",
            Self::Wgsl => "WGSL",
        }
    }
}

fn create_dir(dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir).map_err(|source| CliError::CreateDir {
        path: dir.display().to_string(),
        source,
    })
}

/// File names longer than this many bytes are shortened (file systems
/// refuse names over 255 bytes).
const MAX_FILE_STEM: usize = 200;

/// `STEM.EXTENSION`, where a stem over `MAX_FILE_STEM` bytes becomes its
/// first 100 characters, `-` and 16 hex digits of a 64-bit FNV-1a hash of the
/// whole stem. Names in the text format never contain `-`, so a shortened
/// name never equals an unshortened one; the summary prints each name.
pub fn file_name(stem: &str, extension: &str) -> String {
    if stem.len() <= MAX_FILE_STEM {
        return format!("{stem}.{extension}");
    }
    let hash = stem.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let prefix: String = stem.chars().take(100).collect();
    format!("{prefix}-{hash:016x}.{extension}")
}

/// The backend `mpmd run --backend` names. Each backend is one arm.
pub fn resolve_backend(
    kind: BackendKind,
    co_resident: bool,
) -> Result<Box<dyn Backend + Send>, CliError> {
    resolve_backend_within(kind, co_resident, None)
}

/// [`resolve_backend`] whose runs are bounded by `time_limit` where the
/// backend can bound them (`--timeout`: wgpu's compile, dispatches and
/// read-back; the interpreter takes its limit from its options).
pub fn resolve_backend_within(
    kind: BackendKind,
    co_resident: bool,
    time_limit: Option<Duration>,
) -> Result<Box<dyn Backend + Send>, CliError> {
    let unavailable = |reason: String| CliError::BackendUnavailable {
        name: kind.name(),
        reason,
    };
    match kind {
        BackendKind::Interp => Ok(Box::new(Interpreter::new())),
        BackendKind::Cuda => Ok(Box::new(cuda_backend(false)?)),
        BackendKind::Wgpu => {
            let options = mpmd_wgpu::WgpuOptions {
                co_resident,
                time_limit,
                ..Default::default()
            };
            let backend =
                mpmd_wgpu::WgpuBackend::new(options).map_err(|e| unavailable(e.to_string()))?;
            Ok(Box::new(backend))
        }
    }
}

/// The environment variable that sets the CUDA backend's limit on one
/// semaphore wait (`CudaOptions::wait_timeout`), in whole milliseconds.
pub const CUDA_WAIT_TIMEOUT_VAR: &str = "MPMD_CUDA_WAIT_TIMEOUT_MS";

/// The CUDA backend; `time_kernels` times each launch with a pair of
/// events (`CudaBackend::last_kernel_ms`). The wait limit comes from
/// [`CUDA_WAIT_TIMEOUT_VAR`] when it holds a whole number of milliseconds
/// (anything else leaves the library's default of 10 s).
fn cuda_backend(time_kernels: bool) -> Result<mpmd_cuda::CudaBackend, CliError> {
    let defaults = mpmd_cuda::CudaOptions::default();
    let wait_timeout = std::env::var(CUDA_WAIT_TIMEOUT_VAR)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(defaults.wait_timeout, Duration::from_millis);
    let options = mpmd_cuda::CudaOptions {
        time_kernels,
        wait_timeout,
        ..defaults
    };
    mpmd_cuda::CudaBackend::new(options).map_err(|e| CliError::BackendUnavailable {
        name: BackendKind::Cuda.name(),
        reason: e.to_string(),
    })
}

/// Everything `mpmd run` needs.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub file: PathBuf,
    pub backend: BackendKind,
    pub seed: u64,
    /// `NAME=PATH` strings.
    pub inputs: Vec<String>,
    /// `NAME=VALUE` strings.
    pub scalars: Vec<String>,
    pub out: Option<PathBuf>,
    pub mode: Mode,
    /// See `--schedules` (`None`: the default for the mode).
    pub schedules: Option<u32>,
    /// See `--timeout` (`None`: no bound).
    pub time_limit: Option<Duration>,
    /// See `--memory-limit`, in bytes.
    pub memory_limit: u64,
    /// See `--co-resident`.
    pub co_resident: bool,
    /// See `--call` (`None`: every call, in order).
    pub call: Option<usize>,
    /// See `--time`.
    pub time: bool,
    /// `NAME=PATH` strings of `--compare`.
    pub compares: Vec<String>,
    /// How `--compare` judges float outputs (`--ulp`, `--rtol`, `--atol`).
    pub tolerance: Tolerance,
}

impl From<RunFlags> for RunRequest {
    fn from(flags: RunFlags) -> Self {
        RunRequest {
            file: flags.file,
            backend: flags.backend,
            seed: flags.seed,
            inputs: flags.inputs,
            scalars: flags.scalars,
            out: flags.out,
            mode: if flags.checked {
                Mode::Checked
            } else {
                Mode::Fast
            },
            schedules: flags.schedules,
            time_limit: flags.timeout.0,
            memory_limit: flags.memory_limit.0,
            co_resident: flags.co_resident,
            call: flags.call,
            time: flags.time,
            compares: flags.compares,
            // clap refuses --ulp beside --rtol or --atol.
            tolerance: match (flags.ulp, flags.rtol, flags.atol) {
                (Some(n), _, _) => Tolerance::Ulp(n),
                (None, None, None) => Tolerance::Exact,
                (None, rtol, atol) => Tolerance::Close {
                    rtol: rtol.unwrap_or(0.0),
                    atol: atol.unwrap_or(0.0),
                },
            },
        }
    }
}

fn split_assignment<'a>(flag: &str, text: &'a str) -> Result<(&'a str, &'a str), CliError> {
    text.split_once('=')
        .filter(|(name, value)| !name.is_empty() && !value.is_empty())
        .ok_or_else(|| CliError::Usage(format!("--{flag} `{text}` is not NAME=VALUE")))
}

/// The `NAME=VALUE` assignments of a repeated flag, by name; a name given
/// twice is an error (which one was meant is not for the CLI to guess).
fn assignments<'a>(
    flag: &str,
    texts: &'a [String],
) -> Result<BTreeMap<&'a str, &'a str>, CliError> {
    let mut by_name = BTreeMap::new();
    for text in texts {
        let (name, value) = split_assignment(flag, text)?;
        if let Some(first) = by_name.insert(name, value) {
            return Err(CliError::Usage(format!(
                "--{flag} `{name}` is given twice (`{name}={first}` and `{name}={value}`): give it once"
            )));
        }
    }
    Ok(by_name)
}

/// The backend of one `mpmd run`: the interpreter and CUDA are kept as
/// themselves so that the interpreter's report (schedules run) and CUDA's
/// kernel time can be shown.
enum RunBackend {
    Interp(Interpreter),
    Cuda(mpmd_cuda::CudaBackend),
    Other(Box<dyn Backend>),
}

impl RunBackend {
    fn get(&mut self) -> &mut dyn Backend {
        match self {
            RunBackend::Interp(interp) => interp,
            RunBackend::Cuda(cuda) => cuda,
            RunBackend::Other(backend) => backend.as_mut(),
        }
    }

    fn resident(&self, name: &str) -> Option<HostTensor> {
        match self {
            RunBackend::Interp(interp) => interp.resident(name),
            RunBackend::Cuda(cuda) => cuda.resident(name),
            RunBackend::Other(backend) => backend.resident(name),
        }
    }

    /// The `--time` line's kernel part: `kernel 0.012 ms`, or why there is
    /// none. Only CUDA measures a kernel (events around the launch); the
    /// interpreter has no kernel apart from the call, and the WGSL backend
    /// does not use timestamp queries.
    fn kernel_time(&self, backend: BackendKind) -> String {
        match self {
            RunBackend::Cuda(cuda) => match cuda.last_kernel_ms() {
                Some(ms) => format!(", kernel {ms:.3} ms"),
                None => "; kernel time: not measured on cuda (the driver gave no event time)"
                    .to_string(),
            },
            _ => format!("; kernel time: not measured on {}", backend.name()),
        }
    }
}

/// The calls `mpmd run` runs, each with its index in the file: every call,
/// or call K of `--call K`.
fn selected_calls(request: &RunRequest, calls: Vec<Call>) -> Result<Vec<(usize, Call)>, CliError> {
    let Some(k) = request.call else {
        return Ok(calls.into_iter().enumerate().collect());
    };
    let count = calls.len();
    match calls.into_iter().nth(k) {
        Some(call) => Ok(vec![(k, call)]),
        None => Err(CliError::Usage(format!(
            "--call {k}: `{}` has {count} call(s), numbered 0 to {}",
            request.file.display(),
            count - 1
        ))),
    }
}

/// An output that `--compare` judges, with its reference.
struct CompareTarget {
    /// NAME as the user wrote it.
    name: String,
    /// The call's index in the file.
    call: usize,
    output: String,
    path: PathBuf,
    reference: HostTensor,
}

/// The outputs `--compare` names among the calls that run, each with its
/// reference read and checked against the output's dtype and shape, before
/// anything runs.
fn compare_targets(
    module: &Module,
    calls: &[(usize, Call)],
    compares: &BTreeMap<&str, &str>,
) -> Result<Vec<CompareTarget>, CliError> {
    // Every output of the calls that run: (call index, map, output).
    let outputs: Vec<(usize, &MpmdMap, &Operand)> = calls
        .iter()
        .filter_map(|(index, call)| Some((*index, module.map(&call.map)?)))
        .flat_map(|(index, map)| map.outputs.iter().map(move |o| (index, map, o)))
        .collect();
    let stem = |(index, map, output): &(usize, &MpmdMap, &Operand)| {
        format!("{index}_{}_{}", map.name, output.name)
    };
    let mut targets: Vec<CompareTarget> = Vec::new();
    for (&name, &path) in compares {
        let by_name: Vec<_> = outputs.iter().filter(|(_, _, o)| o.name == name).collect();
        let found = match by_name.as_slice() {
            [one] => *one,
            [] => match outputs.iter().find(|o| stem(o) == name) {
                Some(one) => one,
                None => {
                    let known: Vec<String> = outputs
                        .iter()
                        .map(|(index, map, o)| {
                            format!("`{}` (call {index}, map `{}`)", o.name, map.name)
                        })
                        .collect();
                    return Err(CliError::Usage(format!(
                        "--compare `{name}`: the calls that run have no output of that name; their outputs: {}",
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    )));
                }
            },
            several => {
                let stems: Vec<String> = several.iter().map(|o| format!("`{}`", stem(o))).collect();
                return Err(CliError::Usage(format!(
                    "--compare `{name}`: {} calls that run have an output `{name}`: name one by its file stem ({}), or run one call with --call K",
                    several.len(),
                    stems.join(", ")
                )));
            }
        };
        let (index, map, output) = *found;
        if let Some(first) = targets
            .iter()
            .find(|t| t.call == index && t.output == output.name)
        {
            return Err(CliError::Usage(format!(
                "--compare `{}` and `{name}` name the same output (`{}` of call {index}): give it once",
                first.name, output.name
            )));
        }
        let elem = output.ty.as_ref_type().map_or(ScalarType::U32, |r| r.elem);
        let shape = inputs::host_shape(module, output).unwrap_or_default();
        let what = format!("output `{}` of map `{}`", output.name, map.name);
        let reference = read_npy_for("compare", name, &what, elem, &shape, Path::new(path))?;
        targets.push(CompareTarget {
            name: name.to_string(),
            call: index,
            output: output.name.clone(),
            path: PathBuf::from(path),
            reference,
        });
    }
    Ok(targets)
}

/// The interpreter's options for `mpmd run`: `--checked` detects and runs
/// [`DEFAULT_EXTRA_SCHEDULES`] unless `--schedules` says otherwise; the
/// limits are `--timeout` and `--memory-limit`; schedules compare outputs
/// as the file's `compare` lines say.
pub fn interp_options(request: &RunRequest, case: Option<&CaseSpec>) -> InterpOptions {
    let checked = request.mode == Mode::Checked;
    InterpOptions {
        time_limit: request.time_limit,
        interrupt: None,
        memory_limit: request.memory_limit,
        run: RunOptions {
            mode: request.mode,
            seed: request.seed,
        },
        detect: checked,
        extra_schedules: request.schedules.unwrap_or(if checked {
            DEFAULT_EXTRA_SCHEDULES
        } else {
            0
        }),
        schedule_tolerances: case.map(CaseSpec::schedule_tolerances).unwrap_or_default(),
        flush_subnormals: false,
        mma_probe: MmaProbe::Off,
    }
}

fn run(request: &RunRequest) -> Result<String, CliError> {
    let ValidFile { module, case } = load_file(&request.file)?;
    let calls = module.effective_calls();
    if calls.is_empty() {
        return Err(CliError::Usage(format!(
            "`{}` has {} maps and no `call`: add `call NAME();` lines",
            request.file.display(),
            module.maps.len()
        )));
    }
    if request.backend != BackendKind::Interp && request.schedules.is_some() {
        return Err(CliError::Usage(format!(
            "--schedules: only the interpreter runs extra schedules, not --backend {}",
            request.backend.name()
        )));
    }

    let calls = selected_calls(request, calls)?;

    let input_files = assignments("input", &request.inputs)?;
    let scalar_texts = assignments("scalar", &request.scalars)?;
    let called_maps: Vec<_> = calls
        .iter()
        .filter_map(|(_, c)| module.map(&c.map))
        .collect();
    for name in input_files.keys() {
        let uploaded = called_maps
            .iter()
            .any(|m| inputs::uploaded_inputs(m).any(|o| o.name == *name));
        if uploaded || module.resident(name).is_some() {
            continue;
        }
        let starts_zeroed = called_maps
            .iter()
            .find(|m| m.inputs.iter().any(|o| o.name == *name));
        return Err(CliError::Usage(match starts_zeroed {
            Some(map) => format!(
                "--input `{name}`: input `{name}` of map `{}` starts at zero in every call \
                 (a semaphore, or declared `zeroed`) and takes no data",
                map.name
            ),
            None => format!(
                "--input `{name}`: no called map has an input of that name, and the module declares no resident of that name"
            ),
        }));
    }
    for name in scalar_texts.keys() {
        if !called_maps
            .iter()
            .any(|m| m.scalars.iter().any(|o| o.name == *name))
        {
            return Err(CliError::Usage(format!(
                "--scalar `{name}`: no called map has a scalar of that name"
            )));
        }
    }
    let compare_files = assignments("compare", &request.compares)?;
    let targets = compare_targets(&module, &calls, &compare_files)?;
    if let Some(dir) = &request.out {
        create_dir(dir)?;
    }

    let generators = case.as_ref().map_or(&[][..], |c| &c.generators);
    let generation = Generation::with_defaults(request.seed).with_generators(generators);
    let checked = request.mode == Mode::Checked;
    // One account of host memory for the whole run: inputs, residents and
    // everything the interpreter allocates (`--memory-limit`).
    let budget = MemoryBudget::new(request.memory_limit);
    let mut backend = match request.backend {
        BackendKind::Interp => RunBackend::Interp(Interpreter::with_budget(
            interp_options(request, case.as_ref()),
            budget.clone(),
        )),
        BackendKind::Cuda => RunBackend::Cuda(cuda_backend(request.time)?),
        other => RunBackend::Other(resolve_backend_within(
            other,
            request.co_resident,
            request.time_limit,
        )?),
    };

    // Residents get their data before the first call: from --input, else
    // from the case's `generate` line, else they start as declared.
    // Each tensor keeps its charge until the backend holds the data.
    let mut resident_data: BTreeMap<String, (HostTensor, Charge)> = BTreeMap::new();
    for resident in &module.residents {
        if let Some(path) = input_files.get(resident.name.as_str()) {
            let shape = host_shape(&module.meshes, &resident.ty).unwrap_or_default();
            let what = format!("resident `{}`", resident.name);
            let read = read_input(
                &resident.name,
                &what,
                resident.ty.elem,
                &shape,
                Path::new(path),
                &budget,
            )?;
            resident_data.insert(resident.name.clone(), read);
        }
    }
    let generated = inputs::resident_data_charged(&module, &generation, &budget)?;
    for (name, tensor, charge) in generated {
        resident_data.entry(name).or_insert((tensor, charge));
    }
    for (name, (tensor, _charge)) in resident_data {
        backend
            .get()
            .set_resident(&name, tensor)
            .map_err(|error| CliError::Resident {
                name: name.clone(),
                error: Box::new(for_cli(error)),
            })?;
    }

    let options = RunOptions {
        mode: request.mode,
        seed: request.seed,
    };
    let mut summary = String::new();
    // Reports of the outputs --compare finds different (stderr).
    let mut mismatches = String::new();
    for (index, call) in &calls {
        let index = *index;
        let map = module
            .map(&call.map)
            .ok_or_else(|| CliError::Lower(LowerError::UnknownMap(call.map.clone())))?;
        let plan = lower(&module, &call.map)?;
        let mut args = CallArgs::default();
        // All of the call's inputs must fit before any is made.
        let input_bytes = inputs::uploaded_inputs(map)
            .filter_map(|input| {
                let elem = input.ty.as_ref_type()?.elem;
                let shape = inputs::host_shape(&module, input)?;
                Some(packed_bytes(elem, &shape))
            })
            .fold(0u64, u64::saturating_add);
        drop(
            budget
                .charge(input_bytes, || {
                    format!("the inputs of call {index} (map `{}`)", map.name)
                })
                .map_err(CliError::MemoryLimit)?,
        );
        // The inputs' memory stays charged while the call runs.
        let mut input_charges: Vec<Charge> = Vec::new();
        for input in inputs::uploaded_inputs(map) {
            let (tensor, charge) = match input_files.get(input.name.as_str()) {
                Some(path) => {
                    let ty = input.ty.as_ref_type();
                    let elem = ty.map_or(ScalarType::U32, |r| r.elem);
                    let shape = inputs::host_shape(&module, input).unwrap_or_default();
                    let what = format!("input `{}` of map `{}`", input.name, map.name);
                    read_input(&input.name, &what, elem, &shape, Path::new(path), &budget)?
                }
                None => inputs::generate_input_charged(&module, map, input, &generation, &budget)?,
            };
            args.inputs.insert(input.name.clone(), tensor);
            input_charges.push(charge);
        }
        for scalar in &map.scalars {
            let Type::Scalar(ty) = scalar.ty else {
                continue;
            };
            let value = match scalar_texts.get(scalar.name.as_str()) {
                Some(text) => mpmd_core::host::parse_scalar(ty, text).map_err(|e| {
                    CliError::Usage(format!("--scalar `{}={text}`: {e}", scalar.name))
                })?,
                None => call
                    .scalars
                    .iter()
                    .find(|(name, _)| name == &scalar.name)
                    .map(|(_, v)| *v)
                    .ok_or_else(|| {
                        CliError::Usage(format!(
                            "call {index} (map `{}`) gives scalar `{}` no value: pass --scalar {}=VALUE",
                            map.name, scalar.name, scalar.name
                        ))
                    })?,
            };
            args.scalars.insert(scalar.name.clone(), value);
        }

        let started = Instant::now();
        let outputs = backend
            .get()
            .run(&plan, &args, &options)
            .map_err(|error| CliError::Run {
                index,
                map: map.name.clone(),
                error: Box::new(for_cli(error)),
            })?;
        let wall = started.elapsed();
        // The outputs are the run's memory while they are summarised and written.
        let _outputs_charge = budget.record(
            outputs
                .outputs
                .values()
                .map(|t| packed_bytes(t.elem(), t.shape()))
                .fold(0u64, u64::saturating_add),
        );
        let _ = write!(summary, "call {index}: map `{}`", map.name);
        // The backend's own verdict: a fused dispatch is verified only where
        // it established co-residency for this plan (splits are verified).
        if request.backend == BackendKind::Wgpu
            && plan.needs_co_residency()
            && mpmd_wgpu::WgpuBackend::new(mpmd_wgpu::WgpuOptions {
                co_resident: request.co_resident,
                ..Default::default()
            })
            .map_or(true, |wgpu| wgpu.unverified(&plan))
        {
            // The adapter's co-residency is the user's word, not something checked.
            summary.push_str(" (unverified: ran on a declared co-resident adapter)");
        }
        if let RunBackend::Interp(interp) = &backend {
            let schedules = interp.last_report().map_or(1, |r| r.schedules_run);
            match (checked, schedules) {
                (true, 1) => summary.push_str(" (checked)"),
                (true, n) => {
                    let _ = write!(summary, " (checked, {n} schedules agree)");
                }
                (false, 1) => {}
                (false, n) => {
                    let _ = write!(summary, " ({n} schedules agree)");
                }
            }
        }
        summary.push('\n');
        if request.time {
            let _ = writeln!(
                summary,
                "  time: wall {:.3} ms{}",
                wall.as_secs_f64() * 1e3,
                backend.kernel_time(request.backend)
            );
        }
        for output in &map.outputs {
            let tensor = outputs
                .outputs
                .get(&output.name)
                .ok_or_else(|| CliError::Run {
                    index,
                    map: map.name.clone(),
                    error: Box::new(RunError::Backend(format!(
                        "no value returned for output `{}`",
                        output.name
                    ))),
                })?;
            let stem = if calls.len() == 1 {
                output.name.clone()
            } else {
                format!("{index}_{}_{}", map.name, output.name)
            };
            write_summary_line(&mut summary, &output.name, tensor, request, &stem)?;
            // The verdict follows its output's line (stderr when it fails).
            let target = targets
                .iter()
                .find(|t| t.call == index && t.output == output.name);
            if let Some(target) = target {
                let verdict = compare::compare(tensor, &target.reference, request.tolerance);
                let line = format!(
                    "compare {} with {}: {}\n",
                    target.name,
                    target.path.display(),
                    verdict.render()
                );
                if verdict.passed() {
                    summary.push_str("  ");
                    summary.push_str(&line);
                } else {
                    mismatches.push_str("error: ");
                    mismatches.push_str(&line);
                }
            }
        }
    }

    // Residents after the last call: outputs of the run, as the next run's
    // call would find them.
    let mut first = true;
    for resident in &module.residents {
        let Some(tensor) = backend.resident(&resident.name) else {
            continue;
        };
        if std::mem::take(&mut first) {
            summary.push_str("residents after the last call:\n");
        }
        let label = format!("resident {}", resident.name);
        let stem = format!("resident.{}", resident.name);
        write_summary_line(&mut summary, &label, &tensor, request, &stem)?;
    }
    if !mismatches.is_empty() {
        return Err(CliError::Mismatch {
            summary,
            report: mismatches,
        });
    }
    Ok(summary)
}

/// One summary line, and with `--out` the `.npy` file (named from `stem`,
/// see [`file_name`]; `resident.` and `_` keep outputs and residents apart).
fn write_summary_line(
    summary: &mut String,
    label: &str,
    tensor: &HostTensor,
    request: &RunRequest,
    stem: &str,
) -> Result<(), CliError> {
    let _ = write!(summary, "  {}", summarize(label, tensor));
    if let Some(dir) = &request.out {
        let path = dir.join(file_name(stem, "npy"));
        npy::write(&path, tensor)?;
        let _ = write!(summary, " -> {}", path.display());
    }
    summary.push('\n');
    Ok(())
}

/// `(16, 16)`, `(256,)`, `()`: a shape as NumPy writes it.
pub fn shape_text(shape: &[u32]) -> String {
    npy::shape_text(shape)
}

/// Host bytes of a tensor of `elem` and `shape`: packed words (two 16-bit
/// elements a word), saturating.
fn packed_bytes(elem: ScalarType, shape: &[u32]) -> u64 {
    let elements = shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(u64::from(d)))
        .unwrap_or(u64::MAX);
    let words = if elem.is_16bit() {
        elements.div_ceil(2)
    } else {
        elements
    };
    words.saturating_mul(4)
}

/// Reads `--input NAME=PATH` for `what` (an input of a map, or a resident),
/// whose tensor has element type `elem` and host shape `shape`: the file's
/// shape must be exactly that, its dtype the element type's (bool takes
/// `|b1`, or 0/1 integers).
///
/// The data is charged to `budget` before it is read (its size follows
/// from the shape, which the file must match).
fn read_input(
    name: &str,
    what: &str,
    elem: ScalarType,
    shape: &[u32],
    path: &Path,
    budget: &MemoryBudget,
) -> Result<(HostTensor, Charge), CliError> {
    let charge = budget
        .charge(packed_bytes(elem, shape), || {
            format!("--input `{name}` ({what})")
        })
        .map_err(CliError::MemoryLimit)?;
    Ok((
        read_npy_for("input", name, what, elem, shape, path)?,
        charge,
    ))
}

/// Reads the `.npy` file of `--FLAG NAME=PATH` for `what`, as
/// [`read_input`] says; messages name the flag.
fn read_npy_for(
    flag: &str,
    name: &str,
    what: &str,
    elem: ScalarType,
    shape: &[u32],
    path: &Path,
) -> Result<HostTensor, CliError> {
    // The widest element a file may hold for it is 4 bytes (bool as `<u4`).
    let max_data_bytes =
        mpmd_core::host::element_count(shape).map_or(u64::MAX, |n| n.saturating_mul(4));
    let mut tensor = npy::read_at_most(path, max_data_bytes)?;
    let prefix = format!("--{flag} `{name}`: `{}`", path.display());
    let compatible = tensor.elem() == elem
        || (elem == ScalarType::Bool && matches!(tensor.elem(), ScalarType::U32 | ScalarType::I32));
    if !compatible {
        return Err(CliError::Usage(format!(
            "{prefix} holds {} data, and {what} is {}: write the array as {}",
            npy::read_descr_of(tensor.elem()),
            elem.keyword(),
            npy::read_descr_of(elem)
        )));
    }
    if tensor.shape() != shape {
        return Err(CliError::Usage(format!(
            "{prefix} has shape {}, and {what} {} shape {}: reshape the array to exactly that",
            shape_text(tensor.shape()),
            // An input needs its shape; an output (--compare) has one.
            if flag == "input" { "needs" } else { "has" },
            shape_text(shape)
        )));
    }
    if elem == ScalarType::Bool {
        if let Some((i, w)) = tensor.words().iter().enumerate().find(|(_, &w)| w > 1) {
            return Err(CliError::Usage(format!(
                "{prefix} holds {} data, and {what} is bool, but element {i} is {}, not 0 or 1",
                npy::read_descr_of(tensor.elem()),
                if tensor.elem() == ScalarType::I32 {
                    (*w as i32).to_string()
                } else {
                    w.to_string()
                }
            )));
        }
        let bits = tensor.to_bits();
        tensor = HostTensor::new(ScalarType::Bool, tensor.shape().to_vec(), bits)
            .map_err(|e| CliError::Usage(format!("{prefix}: {e}")))?;
    }
    Ok(tensor)
}

/// `y: f32[4] first [1.0, 2.0, 3.0, 4.0] min 1.0 max 4.0 sum 10`
pub fn summarize(name: &str, tensor: &HostTensor) -> String {
    const SHOWN: usize = 8;
    let dims = tensor
        .shape()
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let values: Vec<String> = (0..tensor.len().min(SHOWN))
        .filter_map(|i| tensor.get(i).map(value_text))
        .collect();
    let more = if tensor.len() > SHOWN { ", ..." } else { "" };
    let mut text = format!(
        "{name}: {}[{dims}] first [{}{more}]",
        tensor.elem().keyword(),
        values.join(", ")
    );
    if tensor.is_empty() {
        return text;
    }
    // Streamed from the packed words: a summary copies nothing (the
    // tensor may be most of --memory-limit).
    let elem = tensor.elem();
    let bits = tensor
        .words()
        .iter()
        .flat_map(move |&w| {
            let halves = [w & 0xffff, w >> 16];
            let whole = [w, 0];
            if elem.is_16bit() {
                halves.into_iter().take(2)
            } else {
                whole.into_iter().take(1)
            }
        })
        .take(tensor.len());
    match elem {
        ScalarType::F32 | ScalarType::F16 | ScalarType::BF16 => {
            let (mut min, mut max, mut sum) = (f32::INFINITY, f32::NEG_INFINITY, 0f64);
            for v in bits.map(|b| Literal::from_bits(elem, b).as_f32().unwrap_or(f32::NAN)) {
                min = min.min(v);
                max = max.max(v);
                sum += f64::from(v);
            }
            let _ = write!(text, " min {min:?} max {max:?} sum {sum:?}");
        }
        ScalarType::I32 => {
            let (mut min, mut max, mut sum) = (i32::MAX, i32::MIN, 0i64);
            for v in bits.map(|b| b as i32) {
                min = min.min(v);
                max = max.max(v);
                sum += i64::from(v);
            }
            let _ = write!(text, " min {min} max {max} sum {sum}");
        }
        ScalarType::U32 | ScalarType::Bool => {
            let (mut min, mut max, mut sum) = (u32::MAX, 0u32, 0u64);
            for v in bits {
                min = min.min(v);
                max = max.max(v);
                sum += u64::from(v);
            }
            let _ = write!(text, " min {min} max {max} sum {sum}");
        }
    }
    text
}

fn value_text(value: Literal) -> String {
    match value {
        Literal::F32(bits) => format!("{:?}", bits.to_f32()),
        Literal::I32(v) => v.to_string(),
        Literal::U32(v) => v.to_string(),
        Literal::Bool(v) => v.to_string(),
        Literal::F16(_) | Literal::BF16(_) => mpmd_core::text::print_literal(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_run(extra: &[&str]) -> RunRequest {
        let mut args = vec!["mpmd", "run", "f.mpmd"];
        args.extend_from_slice(extra);
        let Command::Run(flags) = Cli::try_parse_from(args).unwrap().command else {
            panic!("not a run command");
        };
        RunRequest::from(flags)
    }

    /// `--timeout`, `--memory-limit` and `--schedules` reach the
    /// interpreter's options; without them they are the library's defaults.
    #[test]
    fn run_flags_become_interpreter_options() {
        let fast = interp_options(&parse_run(&[]), None);
        let library = InterpOptions::default();
        assert_eq!(
            (
                fast.time_limit,
                fast.memory_limit,
                fast.extra_schedules,
                fast.detect
            ),
            (library.time_limit, library.memory_limit, 0, false)
        );
        let checked = interp_options(&parse_run(&["--checked"]), None);
        assert_eq!((checked.extra_schedules, checked.detect), (2, true));
        let set = interp_options(
            &parse_run(&[
                "--checked",
                "--schedules",
                "5",
                "--timeout",
                "2.5",
                "--memory-limit",
                "512M",
            ]),
            None,
        );
        assert_eq!(
            (set.extra_schedules, set.time_limit, set.memory_limit),
            (5, Some(Duration::from_millis(2500)), 512 << 20)
        );
        let unbounded = interp_options(&parse_run(&["--timeout", "0"]), None);
        assert_eq!(unbounded.time_limit, None);
    }

    #[test]
    fn byte_sizes_and_seconds_parse_and_print() {
        let bytes = |t: &str| t.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(bytes("4G"), Ok(4 << 30));
        assert_eq!(bytes("4GiB"), Ok(4 << 30));
        assert_eq!(bytes("512m"), Ok(512 << 20));
        assert_eq!(bytes("1000"), Ok(1000));
        assert_eq!(
            bytes("4X"),
            Err("`4X` is not a byte count (such as 1048576, 512M or 4G)".into())
        );
        assert_eq!(
            bytes("99999999999T"),
            Err("`99999999999T` is more bytes than fit in 64 bits".into())
        );
        assert_eq!(ByteSize(4 << 30).to_string(), "4G");
        assert_eq!(ByteSize(1000).to_string(), "1000");
        assert_eq!(
            "60".parse::<Seconds>(),
            Ok(Seconds(Some(Duration::from_secs(60))))
        );
        assert_eq!(
            "-1".parse::<Seconds>(),
            Err("`-1` is not a number of seconds (such as 60, 0.5, or 0 for no bound)".into())
        );
        assert_eq!(Seconds(Some(DEFAULT_TIME_LIMIT)).to_string(), "60");
    }

    /// Messages of the library name Rust options; the CLI names its flags.
    #[test]
    fn run_errors_name_cli_flags() {
        let site = mpmd_core::backend::Site::default();
        let error = for_cli(RunError::TimeLimit {
            at: mpmd_core::backend::Activity::Running(site),
            limit_ms: 1000,
            option: "InterpOptions::time_limit".into(),
        });
        assert_eq!(
            error.to_string(),
            "time limit of 1000 ms reached at program 0 (), block 0; raise it with --timeout SECONDS"
        );
        let error = for_cli(RunError::Refused {
            reason: "2 GiB is more than InterpOptions::memory_limit".into(),
        });
        assert_eq!(
            error.to_string(),
            "refused before launch: 2 GiB is more than --memory-limit BYTES"
        );
    }

    #[test]
    fn long_file_names_are_shortened_with_a_hash() {
        assert_eq!(file_name("y", "npy"), "y.npy");
        let long = "a".repeat(300);
        let name = file_name(&long, "npy");
        assert_eq!(name.len(), 100 + 1 + 16 + 4);
        assert!(name.starts_with(&"a".repeat(100)));
        assert_ne!(name, file_name(&"a".repeat(301), "npy"));
    }

    #[test]
    fn summaries_show_shape_values_and_statistics() {
        let t = HostTensor::from_f32(vec![2, 2], &[1.0, -2.0, 3.5, 0.5]);
        assert_eq!(
            summarize("y", &t),
            "y: f32[2, 2] first [1.0, -2.0, 3.5, 0.5] min -2.0 max 3.5 sum 3.0"
        );
        let u = HostTensor::from_u32(vec![10], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(
            summarize("h", &u),
            "h: u32[10] first [0, 1, 2, 3, 4, 5, 6, 7, ...] min 0 max 9 sum 45"
        );
    }
}
