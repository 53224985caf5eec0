//! The `mpmd` command line: `check`, `lower` and `run` on text-format files.
//!
//! The binary is a thin wrapper around [`main_with_args`], so that tests and
//! other tools can run the same code.

pub mod describe;
pub mod npy;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use mpmd_core::inputs::{self, Generation};
use mpmd_core::interp::Interpreter;
use mpmd_core::ir::{Literal, Module, ScalarType, Type};
use mpmd_core::plan::{lower, LaunchPlan, LowerError};
use mpmd_core::validate::{self, ValidateOptions};
use mpmd_core::{text, Backend, CallArgs, HostTensor, Mode, RunError, RunOptions};
use thiserror::Error;

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
        /// The map to lower (default: every map of the file, in order).
        #[arg(long)]
        map: Option<String>,
    },
    /// Run the file's calls in order on one backend and summarise the outputs.
    Run {
        /// The .mpmd file whose calls to run.
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = BackendKind::Interp)]
        backend: BackendKind,
        /// Seed for generated inputs and for the backend's schedules.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// `NAME=PATH.npy`: data for an input instead of generating it.
        #[arg(long = "input", value_name = "NAME=PATH")]
        inputs: Vec<String>,
        /// `NAME=VALUE`: a scalar parameter (overrides the call's value).
        #[arg(long = "scalar", value_name = "NAME=VALUE")]
        scalars: Vec<String>,
        /// Write every output as .npy into this folder.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Check every access (out-of-bounds accesses are errors).
        #[arg(long)]
        checked: bool,
        /// wgpu: declare that every workgroup of a dispatch runs at once on
        /// this adapter, so that cycles and waits within one program may run.
        /// Such results are reported as unverified.
        #[arg(long)]
        co_resident: bool,
    },
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
    /// CUDA through NVRTC (NVIDIA GPUs).
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
    #[error(transparent)]
    Generate(#[from] inputs::GenerateError),
    #[error("cannot create `{path}`: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
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
        Command::Lower { target, file, map } => lower_command(target, &file, map.as_deref()),
        Command::Run {
            file,
            backend,
            seed,
            inputs,
            scalars,
            out,
            checked,
            co_resident,
        } => run(&RunRequest {
            file,
            backend,
            seed,
            inputs,
            scalars,
            out,
            mode: if checked { Mode::Checked } else { Mode::Fast },
            co_resident,
        }),
    }
}

/// The file's text; bytes that are not UTF-8 are a rendered error at their
/// line and column.
fn read_source(path: &Path) -> Result<String, CliError> {
    let bytes = std::fs::read(path).map_err(|source| CliError::ReadFile {
        path: path.display().to_string(),
        source,
    })?;
    match text::decode(&bytes) {
        Ok(text) => Ok(text.to_string()),
        Err(e) => Err(CliError::Rejected(e.render(&path.display().to_string()))),
    }
}

/// Parses and validates a file; errors come back rendered.
pub fn load_module(path: &Path) -> Result<Module, CliError> {
    let source = read_source(path)?;
    let file = path.display().to_string();
    let (module, source_map) = text::parse(&source).map_err(|e| {
        let mut rendered = e.render(&file);
        if !rendered.ends_with('\n') {
            rendered.push('\n');
        }
        CliError::Rejected(rendered)
    })?;
    validate::validate(&module, &ValidateOptions::default()).map_err(|diagnostics| {
        let mut rendered: String = diagnostics
            .iter()
            .map(|d| validate::render(d, &file, Some((&source, &source_map))))
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
        CliError::Rejected(rendered)
    })?;
    Ok(module)
}

fn check(files: &[PathBuf]) -> Result<String, CliError> {
    let mut stdout = String::new();
    let mut rejected = String::new();
    let mut failures = 0;
    for file in files {
        match load_module(file) {
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

fn lower_command(target: Target, file: &Path, map: Option<&str>) -> Result<String, CliError> {
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
    let mut out = Vec::new();
    for name in maps {
        out.push(emit(target, &lower(&module, name)?)?);
    }
    Ok(out.join("\n"))
}

/// The backend `mpmd run --backend` names. Each backend is one arm.
pub fn resolve_backend(kind: BackendKind, co_resident: bool) -> Result<Box<dyn Backend>, CliError> {
    let unavailable = |reason: String| CliError::BackendUnavailable {
        name: kind.name(),
        reason,
    };
    match kind {
        BackendKind::Interp => Ok(Box::new(Interpreter::new())),
        BackendKind::Cuda => {
            let backend = mpmd_cuda::CudaBackend::new(mpmd_cuda::CudaOptions::default())
                .map_err(|e| unavailable(e.to_string()))?;
            Ok(Box::new(backend))
        }
        BackendKind::Wgpu => {
            let options = mpmd_wgpu::WgpuOptions {
                co_resident,
                ..Default::default()
            };
            let backend =
                mpmd_wgpu::WgpuBackend::new(options).map_err(|e| unavailable(e.to_string()))?;
            Ok(Box::new(backend))
        }
    }
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
    /// See `--co-resident`.
    pub co_resident: bool,
}

fn split_assignment<'a>(flag: &str, text: &'a str) -> Result<(&'a str, &'a str), CliError> {
    text.split_once('=')
        .filter(|(name, value)| !name.is_empty() && !value.is_empty())
        .ok_or_else(|| CliError::Usage(format!("--{flag} `{text}` is not NAME=VALUE")))
}

/// Parses a scalar value of type `ty` (`7`, `7u`, `-1.5`, `inf`, `true`).
pub fn parse_scalar(ty: ScalarType, text: &str) -> Option<Literal> {
    match ty {
        ScalarType::F32 => text.parse::<f32>().ok().map(Literal::f32),
        ScalarType::I32 => text.parse::<i32>().ok().map(Literal::I32),
        ScalarType::U32 => text
            .strip_suffix('u')
            .unwrap_or(text)
            .parse::<u32>()
            .ok()
            .map(Literal::U32),
        ScalarType::Bool => match text {
            "true" | "1" => Some(Literal::Bool(true)),
            "false" | "0" => Some(Literal::Bool(false)),
            _ => None,
        },
    }
}

fn run(request: &RunRequest) -> Result<String, CliError> {
    let module = load_module(&request.file)?;
    let calls = module.effective_calls();
    if calls.is_empty() {
        return Err(CliError::Usage(format!(
            "`{}` has {} maps and no `call`: add `call NAME();` lines",
            request.file.display(),
            module.maps.len()
        )));
    }

    let mut input_files: BTreeMap<&str, &str> = BTreeMap::new();
    for text in &request.inputs {
        let (name, path) = split_assignment("input", text)?;
        input_files.insert(name, path);
    }
    let mut scalar_texts: BTreeMap<&str, &str> = BTreeMap::new();
    for text in &request.scalars {
        let (name, value) = split_assignment("scalar", text)?;
        scalar_texts.insert(name, value);
    }
    let called_maps: Vec<_> = calls.iter().filter_map(|c| module.map(&c.map)).collect();
    for name in input_files.keys() {
        let known = called_maps
            .iter()
            .any(|m| m.inputs.iter().any(|o| o.name == *name && !o.resident));
        if !known {
            return Err(CliError::Usage(format!(
                "--input `{name}`: no called map has a non-resident input of that name"
            )));
        }
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
    if let Some(dir) = &request.out {
        std::fs::create_dir_all(dir).map_err(|source| CliError::CreateDir {
            path: dir.display().to_string(),
            source,
        })?;
    }

    let mut backend = resolve_backend(request.backend, request.co_resident)?;
    let options = RunOptions {
        mode: request.mode,
        seed: request.seed,
    };
    let generation = Generation::with_defaults(request.seed);
    let mut summary = String::new();
    for (index, call) in calls.iter().enumerate() {
        let map = module
            .map(&call.map)
            .ok_or_else(|| CliError::Lower(LowerError::UnknownMap(call.map.clone())))?;
        let plan = lower(&module, &call.map)?;
        let mut args = CallArgs::default();
        for input in map.inputs.iter().filter(|o| !o.resident) {
            let tensor = match input_files.get(input.name.as_str()) {
                Some(path) => read_input(&module, input, Path::new(path))?,
                None => inputs::generate_input(&module, map, input, &generation)?,
            };
            args.inputs.insert(input.name.clone(), tensor);
        }
        for scalar in &map.scalars {
            let Type::Scalar(ty) = scalar.ty else {
                continue;
            };
            let value = match scalar_texts.get(scalar.name.as_str()) {
                Some(text) => parse_scalar(ty, text).ok_or_else(|| {
                    CliError::Usage(format!(
                        "--scalar `{}={text}`: not a {} value",
                        scalar.name,
                        ty.keyword()
                    ))
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

        let outputs = backend
            .run(&plan, &args, &options)
            .map_err(|error| CliError::Run {
                index,
                map: map.name.clone(),
                error: Box::new(error),
            })?;
        let _ = write!(summary, "call {index}: map `{}`", map.name);
        if request.backend == BackendKind::Wgpu && plan.needs_co_residency() {
            // The adapter's co-residency is the user's word, not something checked.
            summary.push_str(" (unverified: ran on a declared co-resident adapter)");
        }
        summary.push('\n');
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
            let _ = write!(summary, "  {}", summarize(&output.name, tensor));
            if let Some(dir) = &request.out {
                let file_name = if calls.len() == 1 {
                    format!("{}.npy", output.name)
                } else {
                    format!("{index}_{}_{}.npy", map.name, output.name)
                };
                let path = dir.join(file_name);
                npy::write(&path, tensor)?;
                let _ = write!(summary, " -> {}", path.display());
            }
            summary.push('\n');
        }
    }
    Ok(summary)
}

fn read_input(
    module: &Module,
    input: &mpmd_core::ir::Operand,
    path: &Path,
) -> Result<HostTensor, CliError> {
    let mut tensor = npy::read(path)?;
    let elem = input.ty.as_ref_type().map(|r| r.elem);
    let shape = inputs::host_shape(module, input).unwrap_or_default();
    let expected_len: usize = shape.iter().map(|&d| d as usize).product();
    let compatible = match (elem, tensor.elem) {
        (Some(want), got) if want == got => true,
        // Bools may come as 0/1 integers.
        (Some(ScalarType::Bool), ScalarType::U32 | ScalarType::I32) => true,
        _ => false,
    };
    if !compatible {
        return Err(CliError::Usage(format!(
            "--input `{}`: `{}` holds {} data, the input is {}",
            input.name,
            path.display(),
            npy::descr_of(tensor.elem),
            describe::type_text(&input.ty)
        )));
    }
    if tensor.words.len() != expected_len {
        return Err(CliError::Usage(format!(
            "--input `{}`: `{}` has shape {:?} ({} elements), the input needs {:?} ({expected_len})",
            input.name,
            path.display(),
            tensor.shape,
            tensor.words.len(),
            shape
        )));
    }
    if let Some(ScalarType::Bool) = elem {
        tensor
            .words
            .iter_mut()
            .for_each(|w| *w = u32::from(*w != 0));
        tensor.elem = ScalarType::Bool;
    }
    tensor.shape = shape;
    Ok(tensor)
}

/// `y: f32[4] first [1.0, 2.0, 3.0, 4.0] min 1.0 max 4.0 sum 10`
pub fn summarize(name: &str, tensor: &HostTensor) -> String {
    const SHOWN: usize = 8;
    let dims = tensor
        .shape
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let values: Vec<String> = (0..tensor.len().min(SHOWN))
        .map(|i| value_text(tensor.get(i)))
        .collect();
    let more = if tensor.len() > SHOWN { ", ..." } else { "" };
    let mut text = format!(
        "{name}: {}[{dims}] first [{}{more}]",
        tensor.elem.keyword(),
        values.join(", ")
    );
    if tensor.is_empty() {
        return text;
    }
    match tensor.elem {
        ScalarType::F32 => {
            let floats = tensor.to_f32();
            let min = floats.iter().copied().fold(f32::INFINITY, f32::min);
            let max = floats.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = floats.iter().map(|&v| f64::from(v)).sum();
            let _ = write!(text, " min {min:?} max {max:?} sum {sum:?}");
        }
        ScalarType::I32 => {
            let ints = tensor.to_i32();
            let sum: i64 = ints.iter().map(|&v| i64::from(v)).sum();
            let (min, max) = (
                ints.iter().min().unwrap_or(&0),
                ints.iter().max().unwrap_or(&0),
            );
            let _ = write!(text, " min {min} max {max} sum {sum}");
        }
        ScalarType::U32 | ScalarType::Bool => {
            let words = &tensor.words;
            let sum: u64 = words.iter().map(|&v| u64::from(v)).sum();
            let (min, max) = (
                words.iter().min().unwrap_or(&0),
                words.iter().max().unwrap_or(&0),
            );
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_parse_by_type() {
        assert_eq!(parse_scalar(ScalarType::U32, "7u"), Some(Literal::U32(7)));
        assert_eq!(parse_scalar(ScalarType::U32, "7"), Some(Literal::U32(7)));
        assert_eq!(parse_scalar(ScalarType::I32, "-3"), Some(Literal::I32(-3)));
        assert_eq!(
            parse_scalar(ScalarType::F32, "2.5"),
            Some(Literal::f32(2.5))
        );
        assert_eq!(
            parse_scalar(ScalarType::Bool, "true"),
            Some(Literal::Bool(true))
        );
        assert_eq!(parse_scalar(ScalarType::I32, "x"), None);
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
