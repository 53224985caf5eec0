use super::case::not_run_reason;
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
