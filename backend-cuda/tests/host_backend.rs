//! The `cuda-host` backend as a [`Backend`]: what a call gives it is checked
//! as every backend checks it (the one check in `mpmd_core::host`), before
//! anything is compiled or run. Needs a C++17 compiler (`c++`).

mod common;

use common::corpus_plan;
use mpmd_core::ir::Literal;
use mpmd_core::{Backend, CallArgs, HostTensor, Mode, RunError, RunOptions};
use mpmd_cuda::HostCudaBackend;

fn accumulate_args(step: Literal) -> CallArgs {
    let mut args = CallArgs::default();
    let x: Vec<i32> = (0..64).collect();
    args.inputs
        .insert("x".into(), HostTensor::from_i32(vec![64], &x));
    args.scalars.insert("step".into(), step);
    args
}

fn fast() -> RunOptions {
    RunOptions {
        mode: Mode::Fast,
        seed: 0,
    }
}

#[test]
fn a_scalar_of_another_type_is_refused_not_reinterpreted() {
    let plan = corpus_plan("resident_input_written_in_place");
    let mut backend = HostCudaBackend::new();
    // 2.0f32's bits would be step = 1073741824.
    let error = backend
        .run(&plan, &accumulate_args(Literal::f32(2.0)), &fast())
        .unwrap_err();
    assert_eq!(
        error,
        RunError::BadArguments("scalar `step` is `i32`, the call passes a `f32`".into())
    );
    let error = backend
        .run(&plan, &accumulate_args(Literal::U32(2)), &fast())
        .unwrap_err();
    assert_eq!(
        error,
        RunError::BadArguments("scalar `step` is `i32`, the call passes a `u32`".into())
    );
    // The right type runs: total = y = x * 2.
    let out = backend
        .run(&plan, &accumulate_args(Literal::I32(2)), &fast())
        .unwrap();
    assert_eq!(
        out.outputs["y"].to_i32(),
        (0..64).map(|i| 2 * i).collect::<Vec<_>>()
    );
}

#[test]
fn a_resident_of_another_length_or_type_is_refused_not_resized() {
    let plan = corpus_plan("resident_input_written_in_place");
    let mut backend = HostCudaBackend::new();
    backend
        .set_resident("total", HostTensor::from_i32(vec![3], &[7, 8, 9]))
        .unwrap();
    let error = backend
        .run(&plan, &accumulate_args(Literal::I32(1)), &fast())
        .unwrap_err();
    assert_eq!(
        error,
        RunError::BadArguments(
            "resident `total` holds 3 elements; map `accumulate` declares 64".into()
        )
    );
    // Nothing ran: the resident is as it was set.
    assert_eq!(backend.resident("total").unwrap().to_i32(), vec![7, 8, 9]);
    backend
        .set_resident("total", HostTensor::from_u32(vec![64], &[1; 64]))
        .unwrap();
    let error = backend
        .run(&plan, &accumulate_args(Literal::I32(1)), &fast())
        .unwrap_err();
    assert_eq!(
        error,
        RunError::BadArguments(
            "resident `total` holds `u32` elements; map `accumulate` declares `i32`".into()
        )
    );
    // One of the map's type and length is used as it is.
    backend
        .set_resident("total", HostTensor::from_i32(vec![64], &[100; 64]))
        .unwrap();
    let out = backend
        .run(&plan, &accumulate_args(Literal::I32(1)), &fast())
        .unwrap();
    assert_eq!(
        out.outputs["y"].to_i32(),
        (0..64).map(|i| 100 + i).collect::<Vec<_>>()
    );
}
