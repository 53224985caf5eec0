//! `mpmd run`: a file's calls on one backend, inputs read or generated,
//! outputs summarised, written and compared.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mpmd_core::case::CaseSpec;
use mpmd_core::host::host_shape;
use mpmd_core::inputs::{self, Generation};
use mpmd_core::interp::{
    Charge, InterpOptions, Interpreter, MemoryBudget, MmaProbe, DEFAULT_EXTRA_SCHEDULES,
};
use mpmd_core::ir::{Call, ScalarType, Type};
use mpmd_core::load::ValidFile;
use mpmd_core::plan::{lower, LowerError};
use mpmd_core::validate::Renderer;
use mpmd_core::{CallArgs, HostTensor, Mode, RunError, RunOptions};

use crate::arrays::{compare_targets, packed_bytes, read_input};
use crate::backends::RunBackend;
use crate::compare::{self, Tolerance};
use crate::output::{create_dir, write_summary_line};
use crate::{for_cli, resolve_backend_within, BackendKind, CliError, RunFlags};
use mpmd_frontend::{cuda_backend, load_file_with_text, source_notes};

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

pub(crate) fn run(request: &RunRequest) -> Result<String, CliError> {
    let (
        source,
        ValidFile {
            module,
            case,
            source_map,
        },
    ) = load_file_with_text(&request.file)?;
    let file_name = request.file.display().to_string();
    let renderer = Renderer::new(&file_name, Some((&source, &source_map)));
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
                notes: source_notes(&error, &module, &renderer),
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
                    notes: String::new(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Command};
    use clap::Parser;

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
}
