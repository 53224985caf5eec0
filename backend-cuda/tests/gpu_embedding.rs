//! The backend on a context, stream and device memory the caller owns. Every
//! test needs a CUDA GPU, so each is `#[ignore]`d (shown as ignored, never as
//! passed, without one); `scripts/gpu-check.sh` runs them with
//! `--include-ignored`.

mod common;

use std::sync::Arc;

use common::*;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use mpmd_core::host::HostTensor;
use mpmd_core::interp::Interpreter;
use mpmd_core::ir::{Literal, ScalarType};
use mpmd_core::plan::{lower, LaunchPlan};
use mpmd_core::validate::ValidModule;
use mpmd_core::{Backend, CallArgs, Mode, RunError, RunOptions};
use mpmd_cuda::{CudaBackend, CudaBuffer, CudaOptions, DeviceArgs};

const AXPB: &str = include_str!("../../examples/elementwise.mpmd");
const HANDOFF: &str = include_str!("../../examples/handoff.mpmd");
const F16: &str = include_str!("../../examples/f16_elementwise.mpmd");
const OUT_OF_BOUNDS: &str = include_str!("../../conformance/cases/fail_out_of_bounds_checked.mpmd");

fn parsed(src: &str) -> ValidModule {
    let (module, _) = mpmd_core::text::parse(src).expect("parses");
    mpmd_core::validate::validate(&module, &Default::default()).expect("valid")
}

fn plan(src: &str, map: &str) -> LaunchPlan {
    lower(&parsed(src), map).expect("lowers")
}

/// The caller's own context and stream (a stream of its own, not the default).
fn caller_stream() -> Arc<CudaStream> {
    require_tools();
    let context = needs::gpu(CudaContext::new(0));
    context.new_stream().expect("a stream")
}

fn upload(stream: &Arc<CudaStream>, tensor: &HostTensor) -> (CudaSlice<u32>, CudaBuffer) {
    let mut words = tensor.words().to_vec();
    words.push(0); // never empty
    let slice = stream.clone_htod(&words).expect("upload");
    let buffer = CudaBuffer::new(address(stream, &slice), tensor.elem(), tensor.len() as u64);
    (slice, buffer)
}

fn output(stream: &Arc<CudaStream>, elem: ScalarType, len: u64) -> (CudaSlice<u32>, CudaBuffer) {
    let words = (len * u64::from(elem.byte_size())).div_ceil(4).max(1) as usize;
    let slice = stream.alloc_zeros::<u32>(words).expect("allocation");
    let buffer = CudaBuffer::new(address(stream, &slice), elem, len);
    (slice, buffer)
}

fn address(stream: &Arc<CudaStream>, slice: &CudaSlice<u32>) -> u64 {
    slice.device_ptr(stream).0
}

fn download(
    stream: &Arc<CudaStream>,
    slice: &CudaSlice<u32>,
    elem: ScalarType,
    shape: Vec<u32>,
) -> HostTensor {
    let mut words = stream.clone_dtoh(slice).expect("download");
    let len: u64 = shape.iter().map(|&d| u64::from(d)).product();
    words.truncate((len * u64::from(elem.byte_size())).div_ceil(4) as usize);
    HostTensor::from_words(elem, shape, words).expect("whole elements")
}

#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn a_prepared_map_runs_on_caller_memory_as_the_host_copy_path_does() {
    let stream = caller_stream();
    let mut backend = needs::gpu(CudaBackend::on_stream(
        stream.clone(),
        CudaOptions::default(),
    ));
    let p = plan(AXPB, "axpb");
    let x = HostTensor::from_f32(
        vec![256],
        &(0..256).map(|i| i as f32 * 0.25 - 7.0).collect::<Vec<_>>(),
    );
    let prepared = backend.prepare(&p, Mode::Fast).expect("prepares");
    let (_x, xb) = upload(&stream, &x);
    let (y, yb) = output(&stream, ScalarType::F32, 256);
    for alpha in [2.0f32, -0.5, 3.0] {
        let args = DeviceArgs::default()
            .buffer("x", xb)
            .buffer("y", yb)
            .scalar("alpha", Literal::f32(alpha));
        // SAFETY: the buffers are this context's, hold 256 f32 each, and
        // live until the synchronisation.
        unsafe { backend.enqueue(&prepared, &args) }.expect("enqueues");
        backend.synchronize().expect("no recorded error");
        let host = backend
            .run(
                &p,
                &CallArgs {
                    inputs: [("x".to_string(), x.clone())].into(),
                    scalars: [("alpha".to_string(), Literal::f32(alpha))].into(),
                },
                &RunOptions::default(),
            )
            .expect("the host-copy path runs");
        assert_eq!(
            download(&stream, &y, ScalarType::F32, vec![256]),
            host.outputs["y"]
        );
        assert_eq!(host.outputs["y"].to_f32()[8], -5.0 * alpha + 1.0);
    }
}

#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn raw_handles_sixteen_bit_buffers_and_residents() {
    let stream = caller_stream();
    // SAFETY: the context and stream stay alive (held by `stream`) for the test.
    let mut backend = needs::gpu(unsafe {
        CudaBackend::from_raw(
            stream.context().cu_ctx(),
            stream.cu_stream(),
            CudaOptions::default(),
        )
    });
    let p = plan(F16, "axpb16");
    let bits: Vec<u32> = (0..1024)
        .map(|i| u32::from(mpmd_core::numerics::f16_from_f32(i as f32 / 8.0 - 60.0)))
        .collect();
    let x = HostTensor::new(ScalarType::F16, vec![1024], bits).expect("1024 elements");
    let alpha = Literal::F16(mpmd_core::numerics::f16_from_f32(1.5));
    let prepared = backend.prepare(&p, Mode::Checked).expect("prepares");
    let (_x, xb) = upload(&stream, &x);
    let (y, yb) = output(&stream, ScalarType::F16, 1024);
    let (y32, y32b) = output(&stream, ScalarType::F16, 1024);
    let args = DeviceArgs::default()
        .buffer("x", xb)
        .buffer("y", yb)
        .buffer("y32", y32b)
        .scalar("alpha", alpha);
    // SAFETY: as above.
    unsafe { backend.enqueue(&prepared, &args) }.expect("enqueues");
    backend.synchronize().expect("no recorded error");
    let want = Interpreter::new()
        .run(
            &p,
            &CallArgs {
                inputs: [("x".to_string(), x)].into(),
                scalars: [("alpha".to_string(), alpha)].into(),
            },
            &RunOptions::default(),
        )
        .expect("interpreter");
    assert_eq!(
        download(&stream, &y, ScalarType::F16, vec![1024]),
        want.outputs["y"]
    );
    assert_eq!(
        download(&stream, &y32, ScalarType::F16, vec![1024]),
        want.outputs["y32"]
    );

    // Residents: the backend's own unless the run binds the caller's.
    let (send, receive) = (plan(HANDOFF, "send"), plan(HANDOFF, "receive"));
    let send_map = backend.prepare(&send, Mode::Fast).expect("prepares");
    let receive_map = backend.prepare(&receive, Mode::Fast).expect("prepares");
    let x = HostTensor::from_f32(vec![128], &(0..128).map(|i| i as f32).collect::<Vec<_>>());
    let (_x, xb) = upload(&stream, &x);
    let (sent, sentb) = output(&stream, ScalarType::U32, 2);
    let (y, yb) = output(&stream, ScalarType::F32, 128);
    let send_args = DeviceArgs::default().buffer("x", xb).buffer("sent", sentb);
    // SAFETY: as above.
    unsafe {
        backend.enqueue(&send_map, &send_args).expect("enqueues");
        backend
            .enqueue(&receive_map, &DeviceArgs::default().buffer("y", yb))
            .expect("enqueues");
    }
    backend.synchronize().expect("no recorded error");
    let got = download(&stream, &y, ScalarType::F32, vec![128]).to_f32();
    assert_eq!((got[3], got[70]), (31.0, 701.0));
    assert_eq!(
        download(&stream, &sent, ScalarType::U32, vec![2]).to_u32(),
        vec![1, 2]
    );
    let (hand, handb) = output(&stream, ScalarType::F32, 128);
    let (credits, creditsb) = output(&stream, ScalarType::I32, 2);
    // SAFETY: as above.
    unsafe {
        backend.enqueue(
            &send_map,
            &send_args
                .clone()
                .buffer("hand", handb)
                .buffer("credits", creditsb),
        )
    }
    .expect("enqueues");
    backend.synchronize().expect("no recorded error");
    assert_eq!(
        download(&stream, &hand, ScalarType::F32, vec![2, 64]).to_f32()[65],
        650.0
    );
    assert_eq!(
        download(&stream, &credits, ScalarType::I32, vec![2, 1]).to_i32(),
        vec![1, 1]
    );
    assert_eq!(
        backend.resident("hand").expect("exists").to_f32()[65],
        650.0
    );
}

#[test]
#[ignore = "needs a CUDA GPU; scripts/gpu-check.sh runs it with --include-ignored"]
fn mismatches_are_refused_and_recorded_errors_wait_for_the_synchronisation() {
    let stream = caller_stream();
    let mut backend = needs::gpu(CudaBackend::on_stream(
        stream.clone(),
        CudaOptions::default(),
    ));
    let p = plan(AXPB, "axpb");
    let prepared = backend.prepare(&p, Mode::Fast).expect("prepares");
    let (_x, xb) = output(&stream, ScalarType::F32, 256);
    let (_y, yb) = output(&stream, ScalarType::F32, 256);
    let refused = |backend: &mut CudaBackend, x: CudaBuffer, y: CudaBuffer| {
        let args = DeviceArgs::default()
            .buffer("x", x)
            .buffer("y", y)
            .scalar("alpha", Literal::f32(1.0));
        // SAFETY: a refused run enqueues nothing.
        match unsafe { backend.enqueue(&prepared, &args) } {
            Err(RunError::BadArguments(message)) => message,
            other => panic!("expected BadArguments, got {other:?}"),
        }
    };
    assert_eq!(
        refused(
            &mut backend,
            CudaBuffer::new(xb.ptr, ScalarType::I32, 256),
            yb
        ),
        "input `x` of map `axpb` is 256 `f32` elements; the buffer given holds 256 `i32` elements"
    );
    assert_eq!(
        refused(
            &mut backend,
            xb,
            CudaBuffer::new(yb.ptr, ScalarType::F32, 255)
        ),
        "output `y` of map `axpb` is 256 `f32` elements; the buffer given holds 255 `f32` elements"
    );
    assert_eq!(
        refused(
            &mut backend,
            CudaBuffer::new(xb.ptr + 2, ScalarType::F32, 256),
            yb
        ),
        format!(
            "`x` of map `axpb` needs 4-byte aligned memory; the buffer given starts at {:#x}",
            xb.ptr + 2
        )
    );

    // Checked mode: the error stays recorded until the synchronisation.
    let p = plan(OUT_OF_BOUNDS, "k");
    let prepared = backend.prepare(&p, Mode::Checked).expect("prepares");
    let table = HostTensor::from_f32(vec![16], &(0..16).map(|i| i as f32).collect::<Vec<_>>());
    let (_table, tableb) = upload(&stream, &table);
    let mut bad = vec![3u32; 64];
    bad[5] = 40;
    let (_bad, badb) = upload(&stream, &HostTensor::from_u32(vec![64], &bad));
    let (_good, goodb) = upload(&stream, &HostTensor::from_u32(vec![64], &[1; 64]));
    let (y, yb) = output(&stream, ScalarType::F32, 64);
    let args = |idx: CudaBuffer| {
        DeviceArgs::default()
            .buffer("table", tableb)
            .buffer("idx", idx)
            .buffer("y", yb)
    };
    // SAFETY: as above.
    unsafe {
        backend.enqueue(&prepared, &args(badb)).expect("enqueues");
        backend.enqueue(&prepared, &args(goodb)).expect("enqueues");
    }
    match backend.synchronize() {
        Err(RunError::OutOfBounds {
            site,
            reference,
            index,
            ..
        }) => assert_eq!(
            (site.thread, reference.as_str(), index.as_str()),
            (Some(5), "table", "[40]")
        ),
        other => panic!("expected an out-of-bounds error, got {other:?}"),
    }
    backend.synchronize().expect("reported once");
    // SAFETY: as above.
    unsafe { backend.enqueue(&prepared, &args(goodb)) }.expect("enqueues");
    stream.synchronize().expect("the stream finishes");
    backend.poll_errors().expect("no recorded error");
    backend.synchronize().expect("no recorded error");
    assert_eq!(
        download(&stream, &y, ScalarType::F32, vec![64]).to_f32(),
        vec![1.0; 64]
    );
    // poll_errors reports a finished run's error without an explicit wait.
    // SAFETY: as above.
    unsafe { backend.enqueue(&prepared, &args(badb)) }.expect("enqueues");
    stream.synchronize().expect("the stream finishes");
    assert!(matches!(
        backend.poll_errors(),
        Err(RunError::OutOfBounds { .. }) | Ok(())
    ));
    let _ = backend.synchronize();
}
