//! Running one case on the selected backends and judging each result.

use std::collections::BTreeMap;

use mpmd_core::inputs::{call_args, Fallback, Generation};
use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::ir::{CompareMode, ErrorClass, Expectation, Literal, Module};
use mpmd_core::plan::LaunchPlan;
use mpmd_core::validate::{validate, ValidateOptions};
use mpmd_core::{Backend, CallArgs, CallOutputs, HostTensor, Mode, RunError, RunOptions};

use crate::analysis::{bounded_ops, profile_tolerance, tags, BackendId};
use crate::backends::{cuda_check_plan, new_backend, Availability, Environment};
use crate::case::{Case, CaseKind};
use crate::compare::{compare, default_mode, Tolerance};

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
}

/// Generates every call's arguments for `seed`. An input's stream depends
/// only on the seed, the case and its name, so an input name gets the same
/// data in every call (where its type and shape are the same).
pub fn prepare_calls(
    case_name: &str,
    module: &Module,
    seed: u64,
) -> Result<Vec<PreparedCall>, String> {
    let calls = module.effective_calls();
    if calls.is_empty() {
        return Err("no calls: the module has several maps and no `call` lines".into());
    }
    let generation = Generation {
        seed,
        stream: &[case_name],
        fallback: Fallback::Required,
    };
    let args = call_args(module, &generation).map_err(|e| e.to_string())?;
    let prepared = calls
        .into_iter()
        .zip(args)
        .map(|(call, args)| PreparedCall {
            map: call.map,
            args,
        })
        .collect();
    Ok(prepared)
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
            });
        }
    }
}

/// The oracle: the interpreter with detection on and extra schedules, which
/// compares the schedules' outputs per the case's compare modes.
pub fn run_interp(
    module: &Module,
    calls: &[PreparedCall],
    mode: Mode,
    seed: u64,
    extra_schedules: u32,
) -> Result<Vec<Observed>, SequenceError> {
    run_interp_once(module, calls, mode, seed, extra_schedules)
}

fn run_interp_once(
    module: &Module,
    calls: &[PreparedCall],
    mode: Mode,
    seed: u64,
    extra_schedules: u32,
) -> Result<Vec<Observed>, SequenceError> {
    let mut interp = Interpreter::new();
    let options = InterpOptions {
        run: RunOptions { mode, seed },
        detect: true,
        extra_schedules,
        output_compare: module
            .case
            .as_ref()
            .map(|c| c.compares.clone())
            .unwrap_or_default(),
    };
    let mut observed = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let out = interp
            .call(module, &call.map, &call.args, &options)
            .map_err(|e| SequenceError::Run(Box::new(e)))?;
        observe_outputs(i, out, &mut observed);
    }
    collect_residents(module, &interp, &mut observed);
    Ok(observed)
}

/// Records the outputs of call `call`.
fn observe_outputs(call: usize, outputs: CallOutputs, observed: &mut Vec<Observed>) {
    observed.extend(outputs.outputs.into_iter().map(|(name, tensor)| Observed {
        call: Some(call),
        name,
        tensor,
    }));
}

fn lower_all(module: &Module, calls: &[PreparedCall]) -> Result<Vec<LaunchPlan>, String> {
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
    module: &Module,
    backend: BackendId,
    mode: Mode,
    outcome: Result<Vec<Observed>, SequenceError>,
    oracle: Option<&Result<Vec<Observed>, SequenceError>>,
    tolerance: Tolerance,
) -> Status {
    let spec = module.case.clone().unwrap_or_default();
    let m = mode_name(mode);
    match &spec.expect {
        Expectation::Reject(_) => Status::Fail("a reject case reached a run".into()),
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
                let mode = spec
                    .compares
                    .iter()
                    .find(|(n, _)| n == &exp.name)
                    .map(|(_, c)| c.clone())
                    .unwrap_or_else(|| default_mode(exp.tensor.elem));
                if let Err(mismatch) = compare(&mode, &exp.tensor, &act.tensor, tolerance) {
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
    let mut result = CaseResult {
        name: case.name.clone(),
        kind: case.kind(),
        tags: vec![],
        results: BTreeMap::new(),
    };
    let module = match &case.parsed {
        Ok(m) => m,
        Err(e) => {
            result.results = all(config, Status::Fail(format!("does not parse: {e}")));
            return result;
        }
    };
    result.tags = tags(module);
    let spec = module.case.clone().unwrap_or_default();

    // Validation is shared by every backend: each only ever receives validated modules.
    let validation = validate(module, &ValidateOptions::default());
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
            Ok(()) => Status::Fail(format!(
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
    if let Err(diags) = validation {
        let list = diags
            .iter()
            .map(|d| format!("{}: {}", d.code, d.message))
            .collect::<Vec<_>>()
            .join("; ");
        result.results = all(
            config,
            Status::Fail(format!("rejected by validation: {list}")),
        );
        return result;
    }
    let calls = match prepare_calls(&case.name, module, config.seed) {
        Ok(c) => c,
        Err(e) => {
            result.results = all(config, Status::Fail(format!("case set-up: {e}")));
            return result;
        }
    };

    let modes = [Mode::Fast, Mode::Checked];
    let expected_class = match &spec.expect {
        Expectation::Fails(c) => Some(*c),
        _ => None,
    };
    let oracle: Vec<Result<Vec<Observed>, SequenceError>> = modes
        .iter()
        .map(|&mode| run_interp(module, &calls, mode, config.seed, config.extra_schedules))
        .collect();
    let ops = bounded_ops(module);

    for &backend in &config.backends {
        let status = match backend {
            BackendId::Interp => modes
                .iter()
                .zip(&oracle)
                .map(|(&mode, outcome)| {
                    judge(
                        module,
                        backend,
                        mode,
                        outcome.clone(),
                        None,
                        Tolerance::EXACT,
                    )
                })
                .reduce(Status::combine)
                .unwrap_or(Status::Pass),
            _ => run_on_gpu(
                backend,
                module,
                &calls,
                env,
                &modes,
                &oracle,
                expected_class,
                config.seed,
                &ops,
            ),
        };
        result.results.insert(backend, status);
    }
    result
}

#[allow(clippy::too_many_arguments)]
fn run_on_gpu(
    backend: BackendId,
    module: &Module,
    calls: &[PreparedCall],
    env: &Environment,
    modes: &[Mode],
    oracle: &[Result<Vec<Observed>, SequenceError>],
    expected_class: Option<ErrorClass>,
    seed: u64,
    ops: &std::collections::BTreeSet<crate::analysis::BoundedOp>,
) -> Status {
    let availability = env.availability(backend);
    if let Availability::Unavailable(reason) = &availability {
        return Status::Skip(reason.clone());
    }
    let plans = match lower_all(module, calls) {
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
    if backend == BackendId::Wgpu {
        let tags = module.case.as_ref().map_or(&[][..], |c| &c.tags[..]);
        if let Some((tag, behaviour)) = env
            .wgpu_deviations
            .iter()
            .find(|(tag, _)| tags.iter().any(|t| t == tag))
        {
            return Status::Skip(format!(
                "documented adapter deviation `{tag}` (backend-wgpu/ACCURACY.md): {behaviour}"
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
            Status::Skip("out-of-bounds accesses are undefined in fast mode".into())
        } else {
            let outcome = run_backend(backend, module, calls, &plans, mode, seed);
            judge(module, backend, mode, outcome, Some(oracle), tolerance)
        };
        status = Some(match status {
            None => s,
            Some(prev) => prev.combine(s),
        });
    }
    let status = status.unwrap_or(Status::Pass);
    // WebGPU promises no forward progress between workgroups of one dispatch.
    let co_resident = plans.iter().any(|p| p.needs_co_residency());
    if backend == BackendId::Wgpu && co_resident && status == Status::Pass {
        return Status::Unverified(
            "waits within one dispatch need co-resident workgroups, which WebGPU does not promise"
                .into(),
        );
    }
    status
}

/// The scalar literal a call passes, for reports.
pub fn show_literal(l: &Literal) -> String {
    match l {
        Literal::F32(b) => format!("{:?}", b.to_f32()),
        Literal::I32(v) => v.to_string(),
        Literal::U32(v) => format!("{v}u"),
        Literal::Bool(v) => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
