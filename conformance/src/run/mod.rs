//! Running one case on the selected backends and judging each result.

use std::collections::BTreeMap;

use mpmd_core::case::{CaseSpec, CompareMode, Expectation};
use mpmd_core::inputs::{call_args, resident_data, Fallback, Generation, DEFAULT_GENERATED_BYTES};
use mpmd_core::interp::{InterpOptions, Interpreter, MmaProbe};
use mpmd_core::ir::{Literal, Module};
use mpmd_core::plan::LaunchPlan;
use mpmd_core::validate::ValidModule;
use mpmd_core::{
    Backend, CallArgs, CallOutputs, ErrorClass, HostTensor, Mode, RunError, RunOptions,
};

use crate::analysis::{bounded_ops, profile_tolerance, tags, BackendId, SUBNORMAL_TAG};
use crate::backends::{cuda_check_plan, new_backend, Availability, Environment};
use crate::case::{Case, CaseFile, CaseKind};
use crate::compare::{compare_probed, mode_for, Mismatch, MmaProbes, Tolerance};

mod case;
mod judge;
mod triage;

pub use case::{run_case, run_case_reporting};
use judge::*;
pub use triage::{looser, triage};

/// The result of one case on one backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Pass,
    /// What differed or went wrong.
    Fail(String),
    /// Why it did not run.
    Skip(String),
    /// Compiled (and assembled) but not run: no device.
    Compiled,
    /// Ran and matched, but under an assumption the backend cannot check.
    Unverified(String),
}

impl Status {
    pub fn keyword(&self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail(_) => "fail",
            Status::Skip(_) => "skip",
            Status::Compiled => "compiled",
            Status::Unverified(_) => "unverified",
        }
    }

    /// The reason or detail, if any.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Status::Fail(s) | Status::Skip(s) | Status::Unverified(s) => Some(s),
            Status::Pass | Status::Compiled => None,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Status::Skip(_) => 0,
            Status::Pass => 1,
            Status::Compiled => 2,
            Status::Unverified(_) => 3,
            Status::Fail(_) => 4,
        }
    }

    /// Combines the fast-mode and checked-mode results: the worse one, where
    /// a skip only wins when both are skips.
    pub fn combine(self, other: Status) -> Status {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }
}

/// Everything about one case's run.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub name: String,
    pub kind: CaseKind,
    pub tags: Vec<String>,
    pub results: BTreeMap<BackendId, Status>,
    /// CUDA compared with WGSL directly (the `cuda~wgpu` column): set for run
    /// cases when both GPU backends are selected; never changes the exit code.
    pub triage: Option<Status>,
    /// Time each backend took on the case, both modes together (the
    /// interpreter's is the oracle's, with its extra schedules).
    pub elapsed: BTreeMap<BackendId, std::time::Duration>,
}

/// The name of the triage column and JSON key.
pub const TRIAGE: &str = "cuda~wgpu";

/// Whether the selection has a triage column: both GPU backends are selected.
pub fn triage_selected(backends: &[BackendId]) -> bool {
    backends.contains(&BackendId::Wgpu) && backends.contains(&BackendId::Cuda)
}

/// What one GPU backend did with a case in one mode, kept for triage.
#[derive(Clone, Debug)]
pub enum Execution {
    /// It ran the calls: what it observed, or the error it stopped with.
    Ran(Result<Vec<Observed>, Box<RunError>>),
    /// It did not run them, and why (for the triage column's skip reason).
    NotRun(String),
}

impl Execution {
    /// Keeps a backend run's outcome for triage: refusals and failed set-ups
    /// did not execute the program.
    fn of(backend: BackendId, outcome: &Result<Vec<Observed>, SequenceError>) -> Execution {
        let b = backend.name();
        match outcome {
            Ok(observed) => Execution::Ran(Ok(observed.clone())),
            Err(SequenceError::Run(e)) => match e.as_ref() {
                RunError::Refused { reason } => Execution::NotRun(format!("{b} refused: {reason}")),
                RunError::Unsupported { reason } => {
                    Execution::NotRun(format!("{b} unsupported: {reason}"))
                }
                _ => Execution::Ran(Err(e.clone())),
            },
            Err(SequenceError::Setup(s)) => Execution::NotRun(format!("{b} did not start: {s}")),
        }
    }
}

/// Settings for a whole run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub backends: Vec<BackendId>,
    pub seed: u64,
    /// Seeded schedules the interpreter runs beyond the lockstep one.
    pub extra_schedules: u32,
}

/// One output value a run observed: after call `call`, or (`call == None`)
/// a device-resident ref after the last call.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub call: Option<usize>,
    pub name: String,
    pub tensor: HostTensor,
    /// The oracle's mma probes of an output compared as `mma`; `None`
    /// elsewhere (and always for a backend's results).
    pub mma: Option<MmaProbes>,
}

impl Observed {
    fn label(&self) -> String {
        match self.call {
            Some(i) => format!("call {i}: output `{}`", self.name),
            None => format!("after the last call: resident `{}`", self.name),
        }
    }
}

/// A call with its generated arguments.
#[derive(Clone, Debug)]
pub struct PreparedCall {
    pub map: String,
    pub args: CallArgs,
    /// Device-resident refs given data before this call (the case's
    /// `generate` lines for residents, before the first call).
    pub residents: Vec<(String, HostTensor)>,
}

/// Generates every call's arguments for `seed`. An input's stream depends
/// only on the seed, the case and its name, so an input name gets the same
/// data in every call (where its type and shape are the same). A found case
/// tagged `fuzz_inputs_seed_N` gets the fuzzer's inputs from that seed.
pub fn prepare_calls(
    case_name: &str,
    file: &CaseFile,
    seed: u64,
) -> Result<Vec<PreparedCall>, String> {
    let CaseFile { module, spec } = file;
    let calls = module.effective_calls();
    if calls.is_empty() {
        return Err("no calls: the module has several maps and no `call` lines".into());
    }
    // A case the fuzzer found states the input seed it failed with: it gets
    // exactly those inputs, whatever `seed`.
    let stream = [case_name];
    let generation = match crate::fuzz::stated_input_seed(spec) {
        Some(input_seed) => crate::fuzz::fuzz_generation(input_seed),
        None => Generation {
            seed,
            stream: &stream,
            generators: &[],
            fallback: Fallback::Required,
        },
    }
    .with_generators(&spec.generators);
    let args = call_args(module, &generation).map_err(|e| e.to_string())?;
    let mut residents = Some(
        resident_data(module, &generation, DEFAULT_GENERATED_BYTES).map_err(|e| e.to_string())?,
    );
    let prepared = calls
        .into_iter()
        .zip(args)
        .map(|(call, args)| PreparedCall {
            map: call.map,
            args,
            residents: residents.take().unwrap_or_default(),
        })
        .collect();
    Ok(prepared)
}

/// Hands a call's resident data to `backend` before the call.
fn give_residents(backend: &mut dyn Backend, call: &PreparedCall) -> Result<(), SequenceError> {
    for (name, tensor) in &call.residents {
        backend
            .set_resident(name, tensor.clone())
            .map_err(|e| SequenceError::Setup(format!("resident `{name}`: {e}")))?;
    }
    Ok(())
}

/// Why a sequence of calls stopped.
#[derive(Clone, Debug)]
pub enum SequenceError {
    Run(Box<RunError>),
    /// Lowering or set-up failed: never an expected outcome.
    Setup(String),
}

impl std::fmt::Display for SequenceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SequenceError::Run(e) => write!(f, "{e}"),
            SequenceError::Setup(s) => f.write_str(s),
        }
    }
}

fn collect_residents(module: &Module, backend: &dyn Backend, observed: &mut Vec<Observed>) {
    for r in &module.residents {
        if let Some(tensor) = backend.resident(&r.name) {
            observed.push(Observed {
                call: None,
                name: r.name.clone(),
                tensor,
                mma: None,
            });
        }
    }
}

/// The oracle: the interpreter with detection on and extra schedules, which
/// compares the schedules' outputs per the case's compare modes.
pub fn run_interp(
    module: &ValidModule,
    spec: &CaseSpec,
    calls: &[PreparedCall],
    mode: Mode,
    seed: u64,
    extra_schedules: u32,
) -> Result<Vec<Observed>, SequenceError> {
    run_interp_with(module, spec, calls, mode, seed, extra_schedules, false)
}

/// [`run_interp`], flushing subnormal f32 operands and results when
/// `flush_subnormals` (the oracle for an adapter that flushes them).
pub fn run_interp_with(
    module: &ValidModule,
    spec: &CaseSpec,
    calls: &[PreparedCall],
    mode: Mode,
    seed: u64,
    extra_schedules: u32,
    flush_subnormals: bool,
) -> Result<Vec<Observed>, SequenceError> {
    let options = InterpOptions {
        run: RunOptions { mode, seed },
        detect: true,
        extra_schedules,
        schedule_tolerances: spec.schedule_tolerances(),
        flush_subnormals,
        ..InterpOptions::default()
    };
    run_oracle(module, spec, calls, &options)
}

/// The oracle's run of `calls` with `options` (every call's outputs, then
/// the residents after the last call) and, for each output the case
/// compares as `mma`, its probes: the same calls run again with each
/// `MmaProbe` (docs/numerics.md). [`run_interp_with`] and the fuzzer's
/// `check_module` both judge by it.
pub fn run_oracle(
    module: &ValidModule,
    spec: &CaseSpec,
    calls: &[PreparedCall],
    options: &InterpOptions,
) -> Result<Vec<Observed>, SequenceError> {
    let mut observed = interp_sequence(module, calls, options).map_err(SequenceError::Run)?;
    let probed =
        |o: &Observed| mode_for(&spec.compares, &o.name, o.tensor.elem()) == CompareMode::Mma;
    if observed.iter().any(probed) {
        // The probes follow the reference run exactly (lockstep, no
        // detection: it found nothing above), changing only what each mma
        // computes.
        let probe = |mma_probe: MmaProbe| {
            let options = InterpOptions {
                detect: false,
                extra_schedules: 0,
                mma_probe,
                ..options.clone()
            };
            interp_sequence(module, calls, &options).map_err(|e| {
                SequenceError::Setup(format!(
                    "the mma probe {mma_probe:?} failed where the run did not: {e} (the `mma` compare mode needs control flow and indices that do not depend on mma results: docs/numerics.md)"
                ))
            })
        };
        let magnitudes = probe(MmaProbe::Magnitude)?;
        let counts = probe(MmaProbe::StepCount)?;
        let starts = probe(MmaProbe::Start)?;
        for o in observed.iter_mut().filter(|o| probed(o)) {
            let find = |list: &[Observed]| {
                list.iter()
                    .find(|p| p.call == o.call && p.name == o.name)
                    .map(|p| p.tensor.clone())
            };
            o.mma = match (find(&magnitudes), find(&counts), find(&starts)) {
                (Some(magnitude), Some(counted), Some(start)) => Some(MmaProbes {
                    magnitude,
                    counted,
                    start,
                }),
                _ => None,
            };
        }
    }
    Ok(observed)
}

/// Runs the calls in order on one interpreter with `options`: every call's
/// outputs, then the residents after the last call.
fn interp_sequence(
    module: &ValidModule,
    calls: &[PreparedCall],
    options: &InterpOptions,
) -> Result<Vec<Observed>, Box<RunError>> {
    let mut interp = Interpreter::new();
    let mut observed = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        for (name, tensor) in &call.residents {
            interp.set_resident(name, tensor.clone());
        }
        let out = interp
            .call(module, &call.map, &call.args, options)
            .map_err(Box::new)?;
        observe_outputs(i, out, &mut observed);
    }
    collect_residents(module, &interp, &mut observed);
    Ok(observed)
}

/// The scalar literal a call passes, for reports.
pub fn show_literal(l: &Literal) -> String {
    match l {
        Literal::F32(b) => format!("{:?}", b.to_f32()),
        Literal::I32(v) => v.to_string(),
        Literal::U32(v) => format!("{v}u"),
        Literal::Bool(v) => v.to_string(),
        Literal::F16(_) | Literal::BF16(_) => mpmd_core::text::print_literal(*l),
    }
}

#[cfg(test)]
mod tests;
