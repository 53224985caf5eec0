//! The backend on a device, queue and buffers the caller owns (lavapipe):
//! a prepared map run many times on the caller's buffers gives exactly what
//! the host-copy path gives, bindings that do not match the map are refused,
//! an error a run records is reported at the synchronisation, and the
//! device's pipeline cache stays at its bound.

mod common;

use common::*;
use mpmd_core::host::HostTensor;
use mpmd_core::interp::Interpreter;
use mpmd_core::ir::{Literal, ScalarType};
use mpmd_core::numerics as num;
use mpmd_core::{Backend, Mode, RunError};
use mpmd_wgpu::{
    wgpu, DeviceArgs, WgpuBackend, WgpuBuffer, WgpuOptions, WgpuPrepared, PIPELINE_CACHE_CAPACITY,
};

const AXPB: &str = include_str!("../../examples/elementwise.mpmd");
const HANDOFF: &str = include_str!("../../examples/handoff.mpmd");
const F16: &str = include_str!("../../examples/f16_elementwise.mpmd");
const OUT_OF_BOUNDS: &str = include_str!("../../conformance/cases/fail_out_of_bounds_checked.mpmd");

/// A device and queue of the caller's own, on the default adapter (lavapipe here).
fn caller_device() -> (wgpu::Device, wgpu::Queue) {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = needs::setup(
        "a WebGPU adapter (Mesa's lavapipe)",
        pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default())),
    );
    pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("the caller's device"),
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .expect("the adapter makes a device")
}

const IO: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

fn buffer(device: &wgpu::Device, bytes: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: bytes,
        usage,
        mapped_at_creation: false,
    })
}

/// A caller buffer holding `tensor`'s packed words.
fn upload(backend: &WgpuBackend, tensor: &HostTensor) -> WgpuBuffer {
    let words = tensor.words();
    let b = buffer(backend.device(), (words.len().max(1) * 4) as u64, IO);
    backend
        .queue()
        .write_buffer(&b, 0, bytemuck::cast_slice(words));
    WgpuBuffer::new(b, tensor.elem(), tensor.len() as u64)
}

/// A caller buffer for `len` elements of `elem`, contents unspecified.
fn output(backend: &WgpuBackend, elem: ScalarType, len: u64) -> WgpuBuffer {
    let bytes = (len * u64::from(elem.byte_size())).div_ceil(4).max(1) * 4;
    WgpuBuffer::new(buffer(backend.device(), bytes, IO), elem, len)
}

/// What a caller buffer holds, as a host tensor of `shape`.
fn download(backend: &WgpuBackend, given: &WgpuBuffer, shape: Vec<u32>) -> HostTensor {
    let bytes = given.buffer.size();
    let staging = buffer(
        backend.device(),
        bytes,
        wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
    );
    let mut encoder = backend
        .device()
        .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    encoder.copy_buffer_to_buffer(&given.buffer, 0, &staging, 0, bytes);
    backend.queue().submit([encoder.finish()]);
    staging
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.expect("maps"));
    backend
        .device()
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("the device finishes");
    let data = staging
        .slice(..)
        .get_mapped_range()
        .expect("mapped")
        .to_vec();
    let used = (given.len * u64::from(given.elem.byte_size())) as usize;
    HostTensor::from_bytes(given.elem, shape, &data[..used]).expect("whole elements")
}

fn backend_on_caller_device(options: WgpuOptions) -> WgpuBackend {
    let (device, queue) = caller_device();
    WgpuBackend::from_device(device, queue, options)
}

#[test]
fn a_prepared_map_runs_on_caller_buffers_as_the_host_copy_path_does() {
    let mut backend = backend_on_caller_device(WgpuOptions::default());
    let m = module(AXPB);
    let p = plan(&m, "axpb");
    let x: Vec<f32> = (0..256).map(|i| i as f32 * 0.25 - 7.0).collect();
    let x = HostTensor::from_f32(vec![256], &x);
    let prepared = backend.prepare(&p, Mode::Fast).expect("prepares");
    let (xb, yb) = (upload(&backend, &x), output(&backend, ScalarType::F32, 256));
    // One preparation, several runs: the scalar changes without recompiling.
    for alpha in [2.0f32, -0.5, 3.0] {
        let run = DeviceArgs::default()
            .buffer("x", xb.clone())
            .buffer("y", yb.clone())
            .scalar("alpha", Literal::f32(alpha));
        backend.enqueue(&prepared, &run).expect("enqueues");
        backend.synchronize().expect("no recorded error");
        let host = backend
            .run(
                &p,
                &args(vec![("x", x.clone())], vec![("alpha", Literal::f32(alpha))]),
                &fast(),
            )
            .expect("the host-copy path runs");
        assert_eq!(download(&backend, &yb, vec![256]), host.outputs["y"]);
        assert_eq!(host.outputs["y"].to_f32()[8], -5.0 * alpha + 1.0);
    }
}

#[test]
fn sixteen_bit_buffers_and_residents_run_in_place() {
    let mut backend = backend_on_caller_device(WgpuOptions::default());
    let m = module(F16);
    let p = plan(&m, "axpb16");
    let x: Vec<u32> = (0..1024)
        .map(|i| u32::from(num::f16_from_f32(i as f32 / 8.0 - 60.0)))
        .collect();
    let x = HostTensor::new(ScalarType::F16, vec![1024], x).expect("1024 elements");
    let alpha = Literal::F16(num::f16_from_f32(1.5));
    let prepared = backend.prepare(&p, Mode::Checked).expect("prepares");
    let (y, y32) = (
        output(&backend, ScalarType::F16, 1024),
        output(&backend, ScalarType::F16, 1024),
    );
    let run = DeviceArgs::default()
        .buffer("x", upload(&backend, &x))
        .buffer("y", y.clone())
        .buffer("y32", y32.clone())
        .scalar("alpha", alpha);
    backend.enqueue(&prepared, &run).expect("enqueues");
    backend.synchronize().expect("no recorded error");
    let want = Interpreter::new()
        .run(&p, &args(vec![("x", x)], vec![("alpha", alpha)]), &fast())
        .expect("interpreter");
    assert_eq!(download(&backend, &y, vec![1024]), want.outputs["y"]);
    assert_eq!(download(&backend, &y32, vec![1024]), want.outputs["y32"]);

    // Residents: the backend's own when the run binds none, the caller's when it does.
    let m = module(HANDOFF);
    let (send, receive) = (plan(&m, "send"), plan(&m, "receive"));
    let (send_map, receive_map) = (
        backend.prepare(&send, Mode::Fast).expect("prepares"),
        backend.prepare(&receive, Mode::Fast).expect("prepares"),
    );
    let x = HostTensor::from_f32(vec![128], &(0..128).map(|i| i as f32).collect::<Vec<_>>());
    let (sent, yb) = (
        output(&backend, ScalarType::U32, 2),
        output(&backend, ScalarType::F32, 128),
    );
    let send_args = DeviceArgs::default()
        .buffer("x", upload(&backend, &x))
        .buffer("sent", sent.clone());
    let receive_args = DeviceArgs::default().buffer("y", yb.clone());
    backend.enqueue(&send_map, &send_args).expect("enqueues");
    backend
        .enqueue(&receive_map, &receive_args)
        .expect("enqueues");
    backend.synchronize().expect("no recorded error");
    let y = download(&backend, &yb, vec![128]).to_f32();
    assert_eq!((y[3], y[70]), (31.0, 701.0));
    assert_eq!(download(&backend, &sent, vec![2]).to_u32(), vec![1, 2]);
    let hand = output(&backend, ScalarType::F32, 128);
    let credits = output(&backend, ScalarType::I32, 2);
    backend.queue().write_buffer(&credits.buffer, 0, &[0; 8]);
    backend
        .enqueue(
            &send_map,
            &send_args
                .clone()
                .buffer("hand", hand.clone())
                .buffer("credits", credits.clone()),
        )
        .expect("enqueues");
    backend.synchronize().expect("no recorded error");
    assert_eq!(download(&backend, &hand, vec![2, 64]).to_f32()[65], 650.0);
    assert_eq!(
        download(&backend, &credits, vec![2, 1]).to_i32(),
        vec![1, 1]
    );
    // The backend's resident kept what the first `send` left.
    assert_eq!(
        backend.resident("hand").expect("exists").to_f32()[65],
        650.0
    );
}

#[test]
fn packed_arenas_copy_caller_buffers_in_and_out() {
    let mut backend = backend_on_caller_device(WgpuOptions {
        max_storage_buffers: Some(3),
        ..Default::default()
    });
    let m = module(OUT_OF_BOUNDS);
    let p = plan(&m, "k");
    let table = HostTensor::from_f32(vec![16], &(0..16).map(|i| i as f32).collect::<Vec<_>>());
    let idx = HostTensor::from_u32(vec![64], &(0..64).map(|i| 15 - i % 16).collect::<Vec<_>>());
    let wgsl = backend.wgsl(&p, Mode::Fast).expect("emits");
    assert!(
        wgsl.contains("var<storage, read_write> g_arena: array<u32>;"),
        "{wgsl}"
    );
    let prepared = backend.prepare(&p, Mode::Fast).expect("prepares");
    let y = output(&backend, ScalarType::F32, 64);
    let run = DeviceArgs::default()
        .buffer("table", upload(&backend, &table))
        .buffer("idx", upload(&backend, &idx))
        .buffer("y", y.clone());
    backend.enqueue(&prepared, &run).expect("enqueues");
    backend.synchronize().expect("no recorded error");
    let want = Interpreter::new()
        .run(
            &p,
            &args(vec![("table", table), ("idx", idx)], vec![]),
            &fast(),
        )
        .expect("interpreter");
    assert_eq!(download(&backend, &y, vec![64]), want.outputs["y"]);
}

fn bad_arguments(result: Result<(), RunError>) -> String {
    match result {
        Err(RunError::BadArguments(message)) => message,
        other => panic!("expected BadArguments, got {other:?}"),
    }
}

#[test]
fn buffers_that_do_not_match_the_map_are_refused() {
    let mut backend = backend_on_caller_device(WgpuOptions::default());
    let p = plan(&module(AXPB), "axpb");
    let prepared = backend.prepare(&p, Mode::Fast).expect("prepares");
    let x = output(&backend, ScalarType::F32, 256);
    let y = output(&backend, ScalarType::F32, 256);
    let alpha = Literal::f32(1.0);
    let with = |x: WgpuBuffer, y: WgpuBuffer| {
        DeviceArgs::default()
            .buffer("x", x)
            .buffer("y", y)
            .scalar("alpha", alpha)
    };
    let i32_x = WgpuBuffer::new(x.buffer.clone(), ScalarType::I32, 256);
    assert_eq!(
        bad_arguments(backend.enqueue(&prepared, &with(i32_x, y.clone()))),
        "input `x` of map `axpb` is 256 `f32` elements; the buffer given holds 256 `i32` elements"
    );
    let short_y = WgpuBuffer::new(y.buffer.clone(), ScalarType::F32, 128);
    assert_eq!(
        bad_arguments(backend.enqueue(&prepared, &with(x.clone(), short_y))),
        "output `y` of map `axpb` is 256 `f32` elements; the buffer given holds 128 `f32` elements"
    );
    // A buffer that says it holds 256 elements but has room for 128.
    let small = WgpuBuffer::new(buffer(backend.device(), 512, IO), ScalarType::F32, 256);
    assert_eq!(
        bad_arguments(backend.enqueue(&prepared, &with(x.clone(), small))),
        "`y` of map `axpb` needs a buffer of at least 1024 bytes (256 `f32` elements in 4-byte words); the buffer given has 512 bytes"
    );
    let unbindable = WgpuBuffer::new(
        buffer(backend.device(), 1024, wgpu::BufferUsages::COPY_DST),
        ScalarType::F32,
        256,
    );
    assert_eq!(
        bad_arguments(backend.enqueue(&prepared, &with(x.clone(), unbindable))),
        "`y` of map `axpb` needs a buffer with usage BufferUsages(STORAGE); the buffer given has BufferUsages(COPY_DST)"
    );
    assert_eq!(
        bad_arguments(backend.enqueue(&prepared, &DeviceArgs::default().buffer("x", x.clone()))),
        "a run of map `axpb` binds a buffer to every input and output; missing: output `y`"
    );
    assert_eq!(
        bad_arguments(backend.enqueue(
            &prepared,
            &with(x.clone(), y.clone()).scalar("alpha", Literal::I32(1))
        )),
        "scalar `alpha` is `f32`, the call passes a `i32`"
    );
    // A map prepared on another device.
    let mut other = backend_on_caller_device(WgpuOptions::default());
    let foreign: WgpuPrepared = other.prepare(&p, Mode::Fast).expect("prepares");
    assert_eq!(
        bad_arguments(backend.enqueue(&foreign, &with(x, y))),
        "map `axpb` was prepared on another device than this backend's"
    );
    // Nothing ran, so nothing is reported.
    backend.synchronize().expect("no recorded error");
}

#[test]
fn an_error_a_run_records_is_reported_by_the_next_synchronisation() {
    let mut backend = backend_on_caller_device(WgpuOptions::default());
    let p = plan(&module(OUT_OF_BOUNDS), "k");
    let prepared = backend.prepare(&p, Mode::Checked).expect("prepares");
    let table = upload(
        &backend,
        &HostTensor::from_f32(vec![16], &(0..16).map(|i| i as f32).collect::<Vec<_>>()),
    );
    let run_with = |backend: &WgpuBackend, idx: &[u32]| {
        DeviceArgs::default()
            .buffer("table", table.clone())
            .buffer("idx", upload(backend, &HostTensor::from_u32(vec![64], idx)))
            .buffer("y", output(backend, ScalarType::F32, 64))
    };
    let mut bad: Vec<u32> = vec![3; 64];
    bad[5] = 40;
    let bad_run = run_with(&backend, &bad);
    backend.enqueue(&prepared, &bad_run).expect("enqueues");
    // A second run before the synchronisation: the first error stays.
    let good_run = run_with(&backend, &[1; 64]);
    backend.enqueue(&prepared, &good_run).expect("enqueues");
    match backend.synchronize() {
        Err(RunError::OutOfBounds {
            site,
            reference,
            index,
            shape,
        }) => {
            assert_eq!(
                (
                    site.thread,
                    reference.as_str(),
                    index.as_str(),
                    shape.as_str()
                ),
                (Some(5), "table", "[40]", "[16]")
            );
        }
        other => panic!("expected an out-of-bounds error, got {other:?}"),
    }
    // Reported once; the map then runs clean.
    backend.synchronize().expect("nothing pending");
    backend.enqueue(&prepared, &good_run).expect("enqueues");
    backend.synchronize().expect("no recorded error");
    assert_eq!(
        download(&backend, &good_run.buffers["y"], vec![64]).to_f32(),
        vec![1.0; 64]
    );
}

#[test]
fn the_pipeline_cache_stays_at_its_bound() {
    let mut backend = backend_on_caller_device(WgpuOptions::default());
    let x = HostTensor::from_f32(vec![64], &[1.5; 64]);
    for k in 0..PIPELINE_CACHE_CAPACITY + 6 {
        // Distinct maps: each multiplies by its own constant.
        let src = format!(
            "mesh m {{ grid [b = 1]; threads t = 64; }}
             kernel k(x: gmem<f32[64]>, y: gmem<f32[64]>) {{
               y[axis_index(t)] = x[axis_index(t)] * {k}.0;
             }}
             map scale{k} {{ programs [m: k]; inputs [x: gmem<f32[64]>]; outputs [y: gmem<f32[64]>]; }}"
        );
        let p = plan(&module(&src), &format!("scale{k}"));
        let prepared = backend.prepare(&p, Mode::Fast).expect("prepares");
        let y = output(&backend, ScalarType::F32, 64);
        let run = DeviceArgs::default()
            .buffer("x", upload(&backend, &x))
            .buffer("y", y.clone());
        backend.enqueue(&prepared, &run).expect("enqueues");
        assert!(backend.pipeline_cache_len() <= PIPELINE_CACHE_CAPACITY);
        if k % 16 == 0 {
            backend.synchronize().expect("no recorded error");
            assert_eq!(download(&backend, &y, vec![64]).to_f32()[7], 1.5 * k as f32);
        }
    }
    backend.synchronize().expect("no recorded error");
    assert_eq!(backend.pipeline_cache_len(), PIPELINE_CACHE_CAPACITY);
}
