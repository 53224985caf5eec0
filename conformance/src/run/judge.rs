//! Judging one backend's run against the case's expectation and the
//! oracle's outputs.

use super::*;

/// Compares a result with the reference `expected` by `mode`
/// ([`compare_probed`] with the reference's probes, `bounds` times the
/// bound: 1 against the oracle, 2 between two backends).
pub(super) fn compare_observed(
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
pub(super) fn observe_outputs(call: usize, outputs: CallOutputs, observed: &mut Vec<Observed>) {
    observed.extend(outputs.outputs.into_iter().map(|(name, tensor)| Observed {
        call: Some(call),
        name,
        tensor,
        mma: None,
    }));
}

pub(super) fn lower_all(
    module: &ValidModule,
    calls: &[PreparedCall],
) -> Result<Vec<LaunchPlan>, String> {
    calls
        .iter()
        .map(|c| {
            mpmd_core::plan::lower(module, &c.map)
                .map_err(|e| format!("lowering `{}` failed: {e}", c.map))
        })
        .collect()
}

/// Runs the calls on a fresh value of a GPU backend.
pub(super) fn run_backend(
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
pub(super) fn class_matches(expected: ErrorClass, got: Option<ErrorClass>) -> bool {
    match (expected, got) {
        (ErrorClass::Deadlock, Some(ErrorClass::WaitTimeout)) => true,
        (e, Some(g)) => e == g,
        (_, None) => false,
    }
}

/// Classes only the interpreter can detect.
pub(super) fn interpreter_only(class: ErrorClass) -> bool {
    matches!(
        class,
        ErrorClass::DataRace | ErrorClass::UninitializedRead | ErrorClass::Nondeterministic
    )
}

pub(super) fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Fast => "fast",
        Mode::Checked => "checked",
    }
}

/// Judges a run against the case's expectation (and the oracle's outputs).
pub(super) fn judge(
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

pub(super) fn describe_mode(mode: &CompareMode, tolerance: Tolerance) -> String {
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

pub(super) fn all(config: &RunConfig, status: Status) -> BTreeMap<BackendId, Status> {
    config
        .backends
        .iter()
        .map(|&b| (b, status.clone()))
        .collect()
}
