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

/// Compares a result with the reference `expected` by `mode`
/// ([`compare_probed`] with the reference's probes, `bounds` times the
/// bound: 1 against the oracle, 2 between two backends).
fn compare_observed(
    mode: &CompareMode,
    expected: &Observed,
    probes: Option<&MmaProbes>,
    actual: &HostTensor,
    tolerance: Tolerance,
    bounds: f64,
) -> Result<(), Mismatch> {
    let tolerances = [Tolerance::EXACT, tolerance];
    compare_probed(mode, &expected.tensor, probes, actual, tolerances, bounds)
}

/// Records the outputs of call `call`.
fn observe_outputs(call: usize, outputs: CallOutputs, observed: &mut Vec<Observed>) {
    observed.extend(outputs.outputs.into_iter().map(|(name, tensor)| Observed {
        call: Some(call),
        name,
        tensor,
        mma: None,
    }));
}

fn lower_all(module: &ValidModule, calls: &[PreparedCall]) -> Result<Vec<LaunchPlan>, String> {
    calls
        .iter()
        .map(|c| {
            mpmd_core::plan::lower(module, &c.map)
                .map_err(|e| format!("lowering `{}` failed: {e}", c.map))
        })
        .collect()
}

/// Runs the calls on a fresh value of a GPU backend.
fn run_backend(
    id: BackendId,
    module: &Module,
    calls: &[PreparedCall],
    plans: &[LaunchPlan],
    mode: Mode,
    seed: u64,
) -> Result<Vec<Observed>, SequenceError> {
    let mut backend = new_backend(id).map_err(SequenceError::Setup)?;
    let options = RunOptions { mode, seed };
    let mut observed = Vec::new();
    for (i, (call, plan)) in calls.iter().zip(plans).enumerate() {
        give_residents(backend.as_mut(), call)?;
        let out = backend
            .run(plan, &call.args, &options)
            .map_err(|e| SequenceError::Run(Box::new(e)))?;
        observe_outputs(i, out, &mut observed);
    }
    collect_residents(module, backend.as_ref(), &mut observed);
    Ok(observed)
}

/// Whether a backend's error class satisfies an expected class: a GPU
/// reports a deadlock as a wait that timed out.
fn class_matches(expected: ErrorClass, got: Option<ErrorClass>) -> bool {
    match (expected, got) {
        (ErrorClass::Deadlock, Some(ErrorClass::WaitTimeout)) => true,
        (e, Some(g)) => e == g,
        (_, None) => false,
    }
}

/// Classes only the interpreter can detect.
fn interpreter_only(class: ErrorClass) -> bool {
    matches!(
        class,
        ErrorClass::DataRace | ErrorClass::UninitializedRead | ErrorClass::Nondeterministic
    )
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Fast => "fast",
        Mode::Checked => "checked",
    }
}

/// Judges a run against the case's expectation (and the oracle's outputs).
fn judge(
    spec: &CaseSpec,
    backend: BackendId,
    mode: Mode,
    outcome: Result<Vec<Observed>, SequenceError>,
    oracle: Option<&Result<Vec<Observed>, SequenceError>>,
    tolerance: Tolerance,
) -> Status {
    let m = mode_name(mode);
    match &spec.expect {
        Expectation::Reject(_) => Status::Fail("a reject case reached a run".into()),
        // Fast mode leaves a `while` at its maximum (docs/design.md): the run
        // must succeed there; only checked mode reports the limit.
        Expectation::Fails(ErrorClass::LoopLimit) if mode == Mode::Fast => match outcome {
            Ok(_) => Status::Pass,
            Err(e) => Status::Fail(format!(
                "{m} mode leaves a loop at its maximum, but the run failed: {e}"
            )),
        },
        Expectation::Fails(class) => match outcome {
            Err(SequenceError::Run(e)) if class_matches(*class, e.class()) => Status::Pass,
            // A GPU that cannot run the program at all (not supported, or refused
            // before launch, e.g. waits that need co-residency) has no verdict.
            Err(SequenceError::Run(e))
                if backend != BackendId::Interp
                    && matches!(*e, RunError::Unsupported { .. } | RunError::Refused { .. }) =>
            {
                Status::Skip(e.to_string())
            }
            Err(e) => Status::Fail(format!(
                "{m} mode: expected {} but got: {e}",
                class.keyword()
            )),
            Ok(_) => Status::Fail(format!(
                "{m} mode: expected {} but the run succeeded",
                class.keyword()
            )),
        },
        Expectation::Ok => {
            let observed = match outcome {
                Ok(o) => o,
                Err(SequenceError::Run(e))
                    if backend != BackendId::Interp
                        && matches!(
                            *e,
                            RunError::Unsupported { .. } | RunError::Refused { .. }
                        ) =>
                {
                    return Status::Skip(e.to_string())
                }
                Err(e) => return Status::Fail(format!("{m} mode: {e}")),
            };
            let Some(oracle) = oracle else {
                return Status::Pass;
            };
            let expected = match oracle {
                Ok(o) => o,
                Err(e) => {
                    return Status::Skip(format!(
                        "no reference result ({m} mode): the interpreter failed: {e}"
                    ))
                }
            };
            let mut problems = Vec::new();
            for exp in expected {
                let Some(act) = observed
                    .iter()
                    .find(|o| o.call == exp.call && o.name == exp.name)
                else {
                    problems.push(format!(
                        "{}: missing from the backend's results",
                        exp.label()
                    ));
                    continue;
                };
                let mode = mode_for(&spec.compares, &exp.name, exp.tensor.elem());
                let probes = exp.mma.as_ref();
                if let Err(mismatch) =
                    compare_observed(&mode, exp, probes, &act.tensor, tolerance, 1.0)
                {
                    problems.push(format!(
                        "{} ({}): {mismatch}",
                        exp.label(),
                        describe_mode(&mode, tolerance)
                    ));
                }
            }
            if problems.is_empty() {
                Status::Pass
            } else {
                Status::Fail(format!("{m} mode: {}", problems.join("\n    ")))
            }
        }
    }
}

fn describe_mode(mode: &CompareMode, tolerance: Tolerance) -> String {
    match mode {
        CompareMode::Exact => "exact".into(),
        CompareMode::Ulp(n) => format!("ulp({n})"),
        CompareMode::Profile => format!(
            "profile: {} ulp or {} absolute",
            tolerance.ulp, tolerance.abs
        ),
        CompareMode::Multiset => "multiset".into(),
        CompareMode::Ignore => "ignore".into(),
        CompareMode::Mma => "mma: within the bound of its probes".into(),
    }
}

fn all(config: &RunConfig, status: Status) -> BTreeMap<BackendId, Status> {
    config
        .backends
        .iter()
        .map(|&b| (b, status.clone()))
        .collect()
}

/// Runs one case on every selected backend, in fast and in checked mode.
pub fn run_case(case: &Case, config: &RunConfig, env: &Environment) -> CaseResult {
    run_case_reporting(case, config, env, &|_| {})
}

/// [`run_case`], telling `stage` what it starts (`the interpreter`, then
/// each backend's name), so that a watchdog can say where a case hung.
pub fn run_case_reporting(
    case: &Case,
    config: &RunConfig,
    env: &Environment,
    stage: &dyn Fn(&str),
) -> CaseResult {
    let mut result = CaseResult {
        name: case.name.clone(),
        kind: case.kind(),
        tags: vec![],
        results: BTreeMap::new(),
        triage: None,
        elapsed: BTreeMap::new(),
    };
    let not_compared = |why: &str| {
        triage_selected(&config.backends).then(|| Status::Skip(format!("not run: {why}")))
    };
    let file = match &case.parsed {
        Ok(file) => file,
        Err(e) => {
            result.results = all(config, Status::Fail(format!("does not parse: {e}")));
            result.triage = not_compared("the case does not parse");
            return result;
        }
    };
    result.tags = tags(file);
    let CaseFile { spec, .. } = file;

    // Validation is shared by every backend: each only ever receives validated modules.
    let validation = file.validate();
    if let Expectation::Reject(code) = &spec.expect {
        let status = match validation {
            Err(diags) if diags.iter().any(|d| d.code == code.as_str()) => Status::Pass,
            Err(diags) => Status::Fail(format!(
                "expected rejection with {code}, got {}",
                diags
                    .iter()
                    .map(|d| format!("{}: {}", d.code, d.message))
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
            Ok(_) => Status::Fail(format!(
                "expected rejection with {code}, but validation accepted the module"
            )),
        };
        // A backend that is not usable here cannot be said to reject anything.
        result.results = config
            .backends
            .iter()
            .map(|&b| match env.availability(b) {
                Availability::Unavailable(reason) => (b, Status::Skip(reason)),
                _ => (b, status.clone()),
            })
            .collect();
        return result;
    }
    let valid = match validation {
        Ok(valid) => valid,
        Err(diags) => {
            let list = diags
                .iter()
                .map(|d| format!("{}: {}", d.code, d.message))
                .collect::<Vec<_>>()
                .join("; ");
            result.results = all(
                config,
                Status::Fail(format!("rejected by validation: {list}")),
            );
            result.triage = not_compared("rejected by validation");
            return result;
        }
    };
    let calls = match prepare_calls(&case.name, file, config.seed) {
        Ok(c) => c,
        Err(e) => {
            result.results = all(config, Status::Fail(format!("case set-up: {e}")));
            result.triage = not_compared("case set-up failed");
            return result;
        }
    };

    let modes = [Mode::Fast, Mode::Checked];
    let expected_class = match &spec.expect {
        Expectation::Fails(c) => Some(*c),
        _ => None,
    };
    stage("the interpreter (the oracle)");
    let oracle_start = std::time::Instant::now();
    let oracle: Vec<Result<Vec<Observed>, SequenceError>> = modes
        .iter()
        .map(|&mode| {
            run_interp(
                &valid,
                spec,
                &calls,
                mode,
                config.seed,
                config.extra_schedules,
            )
        })
        .collect();
    result
        .elapsed
        .insert(BackendId::Interp, oracle_start.elapsed());
    let ops = bounded_ops(&valid);
    let mut executions: BTreeMap<BackendId, Vec<Execution>> = BTreeMap::new();

    for &backend in &config.backends {
        stage(backend.name());
        let backend_start = std::time::Instant::now();
        let status = match backend {
            BackendId::Interp => modes
                .iter()
                .zip(&oracle)
                .map(|(&mode, outcome)| {
                    judge(spec, backend, mode, outcome.clone(), None, Tolerance::EXACT)
                })
                .reduce(Status::combine)
                .unwrap_or(Status::Pass),
            _ => {
                let mut ran = Vec::new();
                let status = run_on_gpu(
                    backend,
                    file,
                    &valid,
                    &calls,
                    env,
                    &modes,
                    &oracle,
                    expected_class,
                    config.seed,
                    config.extra_schedules,
                    &ops,
                    &mut ran,
                );
                if ran.is_empty() {
                    // It stopped before running in any mode: the status says why.
                    ran = vec![Execution::NotRun(not_run_reason(backend, &status)); modes.len()];
                }
                executions.insert(backend, ran);
                status
            }
        };
        result.results.insert(backend, status);
        if backend != BackendId::Interp {
            result.elapsed.insert(backend, backend_start.elapsed());
        }
    }
    if let (Some(cuda), Some(wgpu)) = (
        executions.get(&BackendId::Cuda),
        executions.get(&BackendId::Wgpu),
    ) {
        let tolerance = looser(
            profile_tolerance(BackendId::Cuda, &ops, &[]),
            profile_tolerance(BackendId::Wgpu, &ops, &env.wgpu_measured_ulp),
        );
        result.triage = if subnormals_flushed(env, file) {
            // CUDA keeps subnormals (--ftz=false); this WGSL adapter flushes them.
            Some(Status::Skip(
                "wgpu flushes subnormals on this adapter and cuda keeps them (adapter deviation `subnormal`)".into(),
            ))
        } else {
            Some(triage(
                &spec.compares,
                &modes,
                cuda,
                wgpu,
                &oracle,
                tolerance,
            ))
        };
    }
    result
}

/// The triage skip reason of a GPU backend that stopped before running.
fn not_run_reason(backend: BackendId, status: &Status) -> String {
    let b = backend.name();
    match status {
        Status::Compiled => format!("{b} compiled only (no GPU)"),
        Status::Skip(why) | Status::Fail(why) | Status::Unverified(why) => {
            format!("{b} not run: {why}")
        }
        Status::Pass => format!("{b} not run"),
    }
}

/// The looser of two tolerances, bound by bound.
pub fn looser(a: Tolerance, b: Tolerance) -> Tolerance {
    Tolerance {
        ulp: a.ulp.max(b.ulp),
        abs: a.abs.max(b.abs),
        narrow_ulp: a.narrow_ulp.max(b.narrow_ulp),
    }
}

/// Triage: CUDA's runs against WGSL's, mode by mode (`modes[i]` gave
/// `cuda[i]` and `wgpu[i]`, and `oracle[i]` the interpreter's run whose mma
/// probes bound `mma` outputs), each output by the case's compare mode with
/// `tolerance` for `profile` and twice the bound for `mma` (each backend is
/// within one of the oracle). Pass when they agree, fail with the first
/// differences when they do not, skip when either did not run; the modes
/// combine like a backend's.
pub fn triage(
    compares: &[(String, CompareMode)],
    modes: &[Mode],
    cuda: &[Execution],
    wgpu: &[Execution],
    oracle: &[Result<Vec<Observed>, SequenceError>],
    tolerance: Tolerance,
) -> Status {
    modes
        .iter()
        .enumerate()
        .zip(cuda.iter().zip(wgpu))
        .map(|((i, &mode), (c, w))| {
            let reference = oracle.get(i).and_then(|o| o.as_ref().ok());
            triage_mode(compares, mode, c, w, reference, tolerance)
        })
        .reduce(Status::combine)
        .unwrap_or_else(|| Status::Skip("no mode ran".into()))
}

fn triage_mode(
    compares: &[(String, CompareMode)],
    mode: Mode,
    cuda: &Execution,
    wgpu: &Execution,
    oracle: Option<&Vec<Observed>>,
    tolerance: Tolerance,
) -> Status {
    let m = mode_name(mode);
    let (cuda, wgpu) = match (cuda, wgpu) {
        (Execution::NotRun(why), _) | (_, Execution::NotRun(why)) => {
            return Status::Skip(why.clone())
        }
        (Execution::Ran(c), Execution::Ran(w)) => (c, w),
    };
    let (cuda, wgpu) = match (cuda, wgpu) {
        (Ok(c), Ok(w)) => (c, w),
        (Err(c), Err(w)) => {
            // Equal classes agree; a deadlock and a wait timeout are the same finding.
            let agree = match (c.class(), w.class()) {
                (Some(a), Some(b)) => class_matches(a, Some(b)) || class_matches(b, Some(a)),
                _ => false,
            };
            return if agree {
                Status::Pass
            } else {
                Status::Fail(format!(
                    "{m} mode: cuda stopped with: {c}; wgpu stopped with: {w}"
                ))
            };
        }
        (Err(c), Ok(_)) => {
            return Status::Fail(format!(
                "{m} mode: cuda stopped with: {c}; wgpu ran to completion"
            ))
        }
        (Ok(_), Err(w)) => {
            return Status::Fail(format!(
                "{m} mode: cuda ran to completion; wgpu stopped with: {w}"
            ))
        }
    };
    let mut problems = Vec::new();
    for c in cuda {
        let Some(w) = wgpu.iter().find(|w| w.call == c.call && w.name == c.name) else {
            problems.push(format!("{}: missing from wgpu's results", c.label()));
            continue;
        };
        let compare_mode = mode_for(compares, &c.name, c.tensor.elem());
        let probes = oracle
            .and_then(|o| o.iter().find(|r| r.call == c.call && r.name == c.name))
            .and_then(|r| r.mma.as_ref());
        if let Err(mismatch) = compare_observed(&compare_mode, c, probes, &w.tensor, tolerance, 2.0)
        {
            problems.push(format!(
                "{} ({}): {}",
                c.label(),
                describe_mode(&compare_mode, tolerance),
                describe_disagreement(&mismatch, &c.tensor, &w.tensor)
            ));
        }
    }
    for w in wgpu {
        if !cuda.iter().any(|c| c.call == w.call && c.name == w.name) {
            problems.push(format!("{}: missing from cuda's results", w.label()));
        }
    }
    if problems.is_empty() {
        Status::Pass
    } else {
        Status::Fail(format!("{m} mode: {}", problems.join("\n    ")))
    }
}

/// A mismatch where CUDA's tensor was the expected side, in CUDA/WGSL terms.
fn describe_disagreement(
    mismatch: &crate::compare::Mismatch,
    cuda: &HostTensor,
    wgpu: &HostTensor,
) -> String {
    use crate::compare::show;
    if mismatch.detail.is_some() {
        return format!(
            "shapes differ: cuda {:?} wgpu {:?}",
            cuda.shape(),
            wgpu.shape()
        );
    }
    let mut text = format!("{} of {} elements differ", mismatch.count, mismatch.total);
    for d in &mismatch.first {
        text += &format!(
            "\n      [{}] cuda {} wgpu {}",
            d.index,
            show(d.elem, d.expected),
            show(d.elem, d.actual)
        );
        if let Some(u) = d.ulp {
            text += &format!(" ({u} ulp)");
        }
        if let Some(m) = &d.mma {
            text += &format!(" {m}");
        }
    }
    text
}

#[allow(clippy::too_many_arguments)]
fn run_on_gpu(
    backend: BackendId,
    file: &CaseFile,
    valid: &ValidModule,
    calls: &[PreparedCall],
    env: &Environment,
    modes: &[Mode],
    oracle: &[Result<Vec<Observed>, SequenceError>],
    expected_class: Option<ErrorClass>,
    seed: u64,
    extra_schedules: u32,
    ops: &std::collections::BTreeSet<crate::analysis::BoundedOp>,
    executions: &mut Vec<Execution>,
) -> Status {
    let availability = env.availability(backend);
    if let Availability::Unavailable(reason) = &availability {
        return Status::Skip(reason.clone());
    }
    let module = &file.module;
    let plans = match lower_all(valid, calls) {
        Ok(p) => p,
        Err(e) => return Status::Fail(e),
    };
    if let Availability::CompileOnly(_) = availability {
        for plan in &plans {
            if let Err(e) = cuda_check_plan(plan) {
                return Status::Fail(format!("compile check of `{}` failed: {e}", plan.map.name));
            }
        }
        return Status::Compiled;
    }
    // An adapter that flushes subnormals is judged against an oracle that
    // flushes them too (docs/design.md allows flushing): a case that feeds it
    // subnormals passes when its results are those of either oracle. Other
    // deviations skip the cases they concern.
    let flushing_oracle = backend == BackendId::Wgpu && subnormals_flushed(env, file);
    if backend == BackendId::Wgpu {
        let tags = tags(file);
        if let Some((tag, behaviour)) = env
            .wgpu_deviations
            .iter()
            .find(|(tag, _)| *tag != SUBNORMAL_TAG && tags.iter().any(|t| t == tag))
        {
            return Status::Skip(format!(
                "adapter deviation `{tag}` (backend-wgpu/ACCURACY.md): {behaviour}"
            ));
        }
    }
    if let Some(class) = expected_class {
        if interpreter_only(class) {
            return Status::Skip(format!(
                "{} is detected by the interpreter only",
                class.keyword()
            ));
        }
    }
    let measured: &[(&str, f64)] = match backend {
        BackendId::Wgpu => &env.wgpu_measured_ulp,
        _ => &[],
    };
    let tolerance = profile_tolerance(backend, ops, measured);
    let mut status: Option<Status> = None;
    for (&mode, oracle) in modes.iter().zip(oracle) {
        let s = if expected_class == Some(ErrorClass::OutOfBounds) && mode == Mode::Fast {
            let why = "out-of-bounds accesses are undefined in fast mode";
            executions.push(Execution::NotRun(why.into()));
            Status::Skip(why.into())
        } else {
            let outcome = run_backend(backend, module, calls, &plans, mode, seed);
            executions.push(Execution::of(backend, &outcome));
            // Kept only where a second oracle may judge it.
            let kept = flushing_oracle.then(|| outcome.clone());
            let ieee = judge(&file.spec, backend, mode, outcome, Some(oracle), tolerance);
            match kept {
                Some(outcome) if ieee != Status::Pass => {
                    let flushed = run_interp_with(
                        valid,
                        &file.spec,
                        calls,
                        mode,
                        seed,
                        extra_schedules,
                        true,
                    );
                    match judge(
                        &file.spec,
                        backend,
                        mode,
                        outcome,
                        Some(&flushed),
                        tolerance,
                    ) {
                        Status::Pass => Status::Pass,
                        _ => ieee,
                    }
                }
                _ => ieee,
            }
        };
        status = Some(match status {
            None => s,
            Some(prev) => prev.combine(s),
        });
    }
    let status = status.unwrap_or(Status::Pass);
    // WebGPU promises no forward progress between workgroups of one dispatch:
    // a plan that ran fused on the declaration alone (`--wgpu-co-resident`) is
    // unverified; fused where the backend established co-residency, or split
    // one dispatch per block, it is verified.
    if backend == BackendId::Wgpu && status == Status::Pass {
        if let Some(why) = plans
            .iter()
            .filter(|p| p.needs_co_residency())
            .find_map(crate::backends::wgpu_unverified)
        {
            return Status::Unverified(why);
        }
    }
    status
}

/// Whether the case feeds subnormals to a WGSL adapter that flushes them
/// (its `subnormal` deviation, measured when conformance opened it).
fn subnormals_flushed(env: &Environment, file: &CaseFile) -> bool {
    env.wgpu_deviations.iter().any(|(t, _)| *t == SUBNORMAL_TAG)
        && tags(file).iter().any(|t| t == SUBNORMAL_TAG)
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
mod tests {
    use super::*;

    /// What happens on an adapter that flushes subnormals (NVIDIA's Vulkan
    /// driver): its results, here the flushing interpreter's, fail against
    /// the IEEE oracle (as the case did on the H200 before the probe) and
    /// pass against the flushing one, which `run_on_gpu` then consults.
    #[test]
    fn a_flushing_adapter_fails_the_ieee_oracle_and_passes_the_flushing_one() {
        let case =
            crate::case::load_dir(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases"))
                .unwrap()
                .into_iter()
                .find(|c| c.name == "f32_arith_special")
                .unwrap();
        let file = case.parsed.as_ref().unwrap();
        let calls = prepare_calls(&case.name, file, 1).unwrap();
        let valid = file.validate().expect("valid");
        let tolerance = profile_tolerance(BackendId::Wgpu, &bounded_ops(&valid), &[]);
        for mode in [Mode::Fast, Mode::Checked] {
            let ieee = run_interp(&valid, &file.spec, &calls, mode, 1, 0);
            let flushed = run_interp_with(&valid, &file.spec, &calls, mode, 1, 0, true);
            let against = |oracle| {
                judge(
                    &file.spec,
                    BackendId::Wgpu,
                    mode,
                    flushed.clone(),
                    Some(oracle),
                    tolerance,
                )
            };
            assert!(matches!(against(&ieee), Status::Fail(_)), "{mode:?}");
            assert_eq!(against(&flushed), Status::Pass, "{mode:?}");
        }
    }

    /// An `mma` output judged through the runner: the oracle carries its
    /// probes, a backend's result a few ulps off passes where `exact` would
    /// not, and one far off fails with its distance and bound; triage holds
    /// two backends to twice the bound.
    #[test]
    fn mma_outputs_are_judged_by_the_oracles_probes() {
        let case =
            crate::case::load_dir(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases"))
                .unwrap()
                .into_iter()
                .find(|c| c.name == "mma_k_tiles_accumulate_in_place")
                .unwrap();
        let file = case.parsed.as_ref().unwrap();
        let calls = prepare_calls(&case.name, file, 1).unwrap();
        let valid = file.validate().expect("valid");
        let oracle = run_interp(&valid, &file.spec, &calls, Mode::Fast, 1, 0);
        let reference = oracle.as_ref().unwrap();
        let out = &reference[0];
        assert_eq!(out.name, "out");
        let probes = out.mma.as_ref().expect("an mma output carries probes");
        // Four k-tiles from zero: four steps everywhere, nothing to start from.
        assert!(probes.counted.to_f32().iter().all(|&t| t == 4.0));
        assert!(probes.start.to_f32().iter().all(|&p| p == 0.0));
        let moved = |ulps: u32| {
            let mut values = out.tensor.to_f32();
            values[5] = f32::from_bits(values[5].to_bits() + ulps);
            vec![Observed {
                tensor: HostTensor::from_f32(out.tensor.shape().to_vec(), &values),
                mma: None,
                ..out.clone()
            }]
        };
        let judged = |observed: Vec<Observed>| {
            judge(
                &file.spec,
                BackendId::Cuda,
                Mode::Fast,
                Ok(observed),
                Some(&oracle),
                Tolerance::EXACT,
            )
        };
        assert_eq!(judged(moved(2)), Status::Pass);
        let Status::Fail(why) = judged(moved(1 << 16)) else {
            panic!("a result far off passed");
        };
        assert!(
            why.starts_with("fast mode: call 0: output `out` (mma: within the bound of its probes): 1 of 512 elements differ\n      [5] expected "),
            "{why}"
        );
        assert!(
            why.contains("> bound ") && why.contains("(4.000 mma steps of magnitude "),
            "{why}"
        );
        // Triage: twice the bound between two backends.
        let magnitude = f64::from(probes.magnitude.to_f32()[5]);
        let bound = crate::compare::mma_bound(4.0, magnitude as f32).unwrap();
        let ulp = f64::from(out.tensor.to_f32()[5].abs().next_up() - out.tensor.to_f32()[5].abs());
        let within_two = ((1.5 * bound / ulp) as u32).max(1);
        let cuda = ran(reference.clone());
        let mma = [("out".to_string(), CompareMode::Mma)];
        let triaged = |wgpu: Vec<Observed>| {
            triage(
                &mma,
                &[Mode::Fast],
                std::slice::from_ref(&cuda),
                &[ran(wgpu)],
                std::slice::from_ref(&oracle),
                Tolerance::EXACT,
            )
        };
        assert!(matches!(judged(moved(within_two)), Status::Fail(_)));
        assert_eq!(triaged(moved(within_two)), Status::Pass);
        assert!(matches!(triaged(moved(1 << 16)), Status::Fail(_)));
    }

    #[test]
    fn combine_takes_the_worse_result_and_skip_only_when_both_skip() {
        let skip = Status::Skip("x".into());
        assert_eq!(skip.clone().combine(Status::Pass), Status::Pass);
        assert_eq!(Status::Pass.combine(skip.clone()), Status::Pass);
        assert_eq!(
            Status::Pass.combine(Status::Fail("f".into())),
            Status::Fail("f".into())
        );
        assert_eq!(skip.clone().combine(skip.clone()), skip);
        assert_eq!(
            Status::Pass.combine(Status::Unverified("u".into())),
            Status::Unverified("u".into())
        );
    }

    #[test]
    fn deadlock_matches_a_wait_timeout() {
        assert!(class_matches(
            ErrorClass::Deadlock,
            Some(ErrorClass::WaitTimeout)
        ));
        assert!(class_matches(
            ErrorClass::OutOfBounds,
            Some(ErrorClass::OutOfBounds)
        ));
        assert!(!class_matches(
            ErrorClass::OutOfBounds,
            Some(ErrorClass::Deadlock)
        ));
        assert!(!class_matches(ErrorClass::DataRace, None));
    }

    fn output(call: usize, name: &str, tensor: HostTensor) -> Observed {
        Observed {
            call: Some(call),
            name: name.into(),
            tensor,
            mma: None,
        }
    }

    fn ran(observed: Vec<Observed>) -> Execution {
        Execution::Ran(Ok(observed))
    }

    fn stopped(e: RunError) -> Execution {
        Execution::Ran(Err(Box::new(e)))
    }

    fn f32s(values: &[f32]) -> HostTensor {
        HostTensor::from_f32(vec![values.len() as u32], values)
    }

    /// `ulps` units in the last place above 1.0.
    fn above_one(ulps: u32) -> f32 {
        f32::from_bits(1.0f32.to_bits() + ulps)
    }

    fn one_mode(cuda: Execution, wgpu: Execution, tolerance: Tolerance) -> Status {
        triage(&[], &[Mode::Fast], &[cuda], &[wgpu], &[], tolerance)
    }

    const TWO_ULP: Tolerance = Tolerance::bounded(2, 0.0);

    #[test]
    fn triage_passes_when_the_outputs_agree() {
        let outputs = vec![
            output(0, "y", f32s(&[1.0, -0.0, f32::NAN])),
            output(0, "n", HostTensor::from_i32(vec![2], &[-7, 9])),
        ];
        // The sign of zero and NaN payloads are ignored, as against the oracle.
        let mut wgpu = outputs.clone();
        wgpu[0].tensor = f32s(&[1.0, 0.0, f32::from_bits(0x7fc0_0001)]);
        let status = one_mode(ran(outputs), ran(wgpu), Tolerance::EXACT);
        assert_eq!(status, Status::Pass);
    }

    #[test]
    fn triage_passes_within_the_tolerance() {
        let cuda = ran(vec![output(0, "y", f32s(&[1.0, 2.0]))]);
        let wgpu = ran(vec![output(0, "y", f32s(&[above_one(2), 2.0]))]);
        assert_eq!(one_mode(cuda, wgpu, TWO_ULP), Status::Pass);
    }

    #[test]
    fn triage_fails_beyond_the_tolerance_with_the_first_differences() {
        let cuda = ran(vec![output(1, "y", f32s(&[1.0, 2.0, 1.0]))]);
        let wgpu = ran(vec![output(1, "y", f32s(&[above_one(3), 2.0, 1.0]))]);
        assert_eq!(
            one_mode(cuda, wgpu, TWO_ULP),
            Status::Fail(
                "fast mode: call 1: output `y` (profile: 2 ulp or 0 absolute): 1 of 3 elements differ\n      [0] cuda 1.0 (0x3f800000) wgpu 1.0000004 (0x3f800003) (3 ulp)"
                    .into()
            )
        );
    }

    #[test]
    fn triage_compares_integers_exactly_and_follows_the_case_compare_modes() {
        let cuda = ran(vec![output(0, "n", HostTensor::from_u32(vec![2], &[1, 2]))]);
        let wgpu = ran(vec![output(0, "n", HostTensor::from_u32(vec![2], &[1, 3]))]);
        let loose = Tolerance::bounded(1000, 1000.0);
        assert_eq!(
            one_mode(cuda.clone(), wgpu.clone(), loose),
            Status::Fail(
                "fast mode: call 0: output `n` (exact): 1 of 2 elements differ\n      [1] cuda 2u wgpu 3u"
                    .into()
            )
        );
        let ignored = [("n".to_string(), CompareMode::Ignore)];
        assert_eq!(
            triage(&ignored, &[Mode::Fast], &[cuda], &[wgpu], &[], loose),
            Status::Pass
        );
        let counts = |w: &[i32]| ran(vec![output(0, "c", HostTensor::from_i32(vec![3], w))]);
        let multiset = [("c".to_string(), CompareMode::Multiset)];
        assert_eq!(
            triage(
                &multiset,
                &[Mode::Fast],
                &[counts(&[3, 1, 2])],
                &[counts(&[1, 2, 3])],
                &[],
                Tolerance::EXACT
            ),
            Status::Pass
        );
    }

    #[test]
    fn triage_reports_an_output_missing_on_either_side() {
        let y = output(0, "y", f32s(&[1.0]));
        let resident = Observed {
            call: None,
            name: "acc".into(),
            tensor: f32s(&[2.0]),
            mma: None,
        };
        let status = one_mode(
            ran(vec![y.clone(), resident]),
            ran(vec![y, output(1, "z", f32s(&[0.0]))]),
            Tolerance::EXACT,
        );
        assert_eq!(
            status,
            Status::Fail(
                "fast mode: after the last call: resident `acc`: missing from wgpu's results\n    call 1: output `z`: missing from cuda's results"
                    .into()
            )
        );
        let shapes = one_mode(
            ran(vec![output(0, "y", f32s(&[1.0]))]),
            ran(vec![output(0, "y", f32s(&[1.0, 1.0]))]),
            Tolerance::EXACT,
        );
        assert_eq!(
            shapes,
            Status::Fail(
                "fast mode: call 0: output `y` (profile: 0 ulp or 0 absolute): shapes differ: cuda [1] wgpu [2]"
                    .into()
            )
        );
    }

    #[test]
    fn triage_skips_when_either_side_did_not_run() {
        let y = ran(vec![output(0, "y", f32s(&[1.0]))]);
        let no_gpu = Execution::NotRun("cuda compiled only (no GPU)".into());
        assert_eq!(
            one_mode(no_gpu.clone(), y.clone(), Tolerance::EXACT),
            Status::Skip("cuda compiled only (no GPU)".into())
        );
        let refused = Execution::NotRun("wgpu refused: needs co-residency".into());
        assert_eq!(
            one_mode(y.clone(), refused.clone(), Tolerance::EXACT),
            Status::Skip("wgpu refused: needs co-residency".into())
        );
        // Both missing: CUDA's reason.
        assert_eq!(
            one_mode(no_gpu.clone(), refused, Tolerance::EXACT),
            Status::Skip("cuda compiled only (no GPU)".into())
        );
        // A mode that ran on both decides over one that did not.
        let modes = [Mode::Fast, Mode::Checked];
        assert_eq!(
            triage(
                &[],
                &modes,
                &[no_gpu, y.clone()],
                &[y.clone(), y],
                &[],
                TWO_ULP
            ),
            Status::Pass
        );
    }

    #[test]
    fn triage_compares_error_classes_when_a_run_stops() {
        let timeout = || {
            stopped(RunError::WaitTimeout {
                site: mpmd_core::backend::Site {
                    program: mpmd_core::plan::ProgramId::new(0),
                    kernel: "k".into(),
                    block: 3,
                    thread: None,
                },
                semaphore: "s".into(),
            })
        };
        let deadlock = stopped(RunError::Deadlock {
            wait_for_graph: "b0 -> b1 -> b0".into(),
        });
        assert_eq!(
            one_mode(deadlock, timeout(), Tolerance::EXACT),
            Status::Pass
        );
        let broken = stopped(RunError::Backend("lost the device".into()));
        assert_eq!(
            one_mode(broken.clone(), broken, Tolerance::EXACT),
            Status::Fail(
                "fast mode: cuda stopped with: backend error: lost the device; wgpu stopped with: backend error: lost the device"
                    .into()
            )
        );
        assert_eq!(
            one_mode(timeout(), ran(vec![]), Tolerance::EXACT),
            Status::Fail(
                "fast mode: cuda stopped with: wait on `s` timed out at program 0 (k), block 3; wgpu ran to completion"
                    .into()
            )
        );
    }

    #[test]
    fn refusals_and_failed_set_ups_are_not_executions() {
        let refused = Err(SequenceError::Run(Box::new(RunError::Refused {
            reason: "waits need co-resident workgroups".into(),
        })));
        let Execution::NotRun(why) = Execution::of(BackendId::Wgpu, &refused) else {
            panic!("a refusal counted as an execution");
        };
        assert_eq!(why, "wgpu refused: waits need co-resident workgroups");
        let setup = Err(SequenceError::Setup("no context".into()));
        let Execution::NotRun(why) = Execution::of(BackendId::Cuda, &setup) else {
            panic!("a failed set-up counted as an execution");
        };
        assert_eq!(why, "cuda did not start: no context");
        assert!(matches!(
            Execution::of(BackendId::Cuda, &Ok(vec![])),
            Execution::Ran(Ok(v)) if v.is_empty()
        ));
        assert_eq!(
            not_run_reason(BackendId::Cuda, &Status::Compiled),
            "cuda compiled only (no GPU)"
        );
    }

    #[test]
    fn the_looser_tolerance_takes_each_bound_at_its_largest() {
        let cuda = Tolerance::bounded(4, 0.0);
        let wgpu = Tolerance::bounded(3, 1e-6);
        assert_eq!(looser(cuda, wgpu), Tolerance::bounded(4, 1e-6));
    }
}
