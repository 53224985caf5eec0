//! Running one case: the oracle, then each GPU backend in fast and checked
//! mode.

use super::*;

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
pub(super) fn not_run_reason(backend: BackendId, status: &Status) -> String {
    let b = backend.name();
    match status {
        Status::Compiled => format!("{b} compiled only (no GPU)"),
        Status::Skip(why) | Status::Fail(why) | Status::Unverified(why) => {
            format!("{b} not run: {why}")
        }
        Status::Pass => format!("{b} not run"),
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_on_gpu(
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
pub(super) fn subnormals_flushed(env: &Environment, file: &CaseFile) -> bool {
    env.wgpu_deviations.iter().any(|(t, _)| *t == SUBNORMAL_TAG)
        && tags(file).iter().any(|t| t == SUBNORMAL_TAG)
}
