//! mpmd's generated WGSL against hand-written WGSL through plain wgpu, on
//! the same adapter. Each figure is the median of several calls, each call
//! end to end: upload inputs, dispatch, read the output back (both sides).
//! The two sides' calls alternate, so that a change in the machine's load
//! reaches both alike.
//!
//! Run: `cargo bench -p mpmd-wgpu --bench wgsl_vs_handwritten`.

use std::time::{Duration, Instant};

use mpmd_core::backend::{Backend, RunOptions};
use mpmd_core::host::{CallArgs, HostTensor};
use mpmd_core::ir::Literal;
use mpmd_wgpu::{WgpuBackend, WgpuOptions};

const ELEMENTS: u32 = 4 * 1024 * 1024;
const REDUCE_ELEMENTS: u32 = 1024 * 1024;
const ITERATIONS: usize = 9;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Medians of `mpmd` and `hand` over alternating calls.
fn time(mut mpmd: impl FnMut(), mut hand: impl FnMut()) -> (Duration, Duration) {
    // Warm-up: compiles and caches.
    mpmd();
    hand();
    let clock = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        f();
        start.elapsed()
    };
    let (mut m, mut h) = (Vec::new(), Vec::new());
    for _ in 0..ITERATIONS {
        m.push(clock(&mut mpmd));
        h.push(clock(&mut hand));
    }
    (median(m), median(h))
}

fn plan(src: &str, map: &str) -> mpmd_core::plan::LaunchPlan {
    let (module, _) = mpmd_core::text::parse(src).expect("parse");
    let module = mpmd_core::validate::validate(&module, &Default::default()).expect("valid");
    mpmd_core::plan::lower(&module, map).expect("lower")
}

/// A plain wgpu path: one device, pipelines built once, buffers reused.
struct Plain {
    device: wgpu::Device,
    queue: wgpu::Queue,
}

struct PlainKernel {
    pipelines: Vec<(wgpu::ComputePipeline, [u32; 3])>,
    bind_group: wgpu::BindGroup,
    inputs: Vec<wgpu::Buffer>,
    output: wgpu::Buffer,
    staging: wgpu::Buffer,
}

impl Plain {
    fn new() -> Plain {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter =
            pollster::block_on(instance.request_adapter(&Default::default())).expect("adapter");
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            required_limits: limits,
            ..Default::default()
        }))
        .expect("device");
        Plain { device, queue }
    }

    /// `wgsl` binds inputs at 0.., the output after them, then `extra` scratch buffers.
    fn kernel(
        &self,
        wgsl: &str,
        entries: &[(&str, [u32; 3])],
        inputs: &[u64],
        output: u64,
        extra: &[u64],
    ) -> PlainKernel {
        let d = &self.device;
        let module = d.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(wgsl.into()),
        });
        let usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC;
        let buffer = |bytes: u64| {
            d.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        let inputs: Vec<wgpu::Buffer> = inputs.iter().map(|&b| buffer(b)).collect();
        let output_buffer = buffer(output);
        let extra: Vec<wgpu::Buffer> = extra.iter().map(|&b| buffer(b)).collect();
        let all: Vec<&wgpu::Buffer> = inputs
            .iter()
            .chain([&output_buffer])
            .chain(extra.iter())
            .collect();
        let layout_entries: Vec<wgpu::BindGroupLayoutEntry> = (0..all.len() as u32)
            .map(|binding| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: false },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let layout = d.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &layout_entries,
        });
        let pipeline_layout = d.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipelines = entries
            .iter()
            .map(|(entry, dims)| {
                let p = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: None,
                    layout: Some(&pipeline_layout),
                    module: &module,
                    entry_point: Some(entry),
                    compilation_options: Default::default(),
                    cache: None,
                });
                (p, *dims)
            })
            .collect();
        let bind_entries: Vec<wgpu::BindGroupEntry> = all
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        let bind_group = d.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &bind_entries,
        });
        let staging = d.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: output,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        PlainKernel {
            pipelines,
            bind_group,
            inputs,
            output: output_buffer,
            staging,
        }
    }

    fn call(&self, k: &PlainKernel, inputs: &[&[u32]]) -> Vec<u32> {
        for (buffer, data) in k.inputs.iter().zip(inputs) {
            self.queue
                .write_buffer(buffer, 0, bytemuck::cast_slice(data));
        }
        let mut encoder = self.device.create_command_encoder(&Default::default());
        for (pipeline, dims) in &k.pipelines {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &k.bind_group, &[]);
            pass.dispatch_workgroups(dims[0], dims[1], dims[2]);
        }
        encoder.copy_buffer_to_buffer(&k.output, 0, &k.staging, 0, k.output.size());
        self.queue.submit([encoder.finish()]);
        k.staging
            .slice(..)
            .map_async(wgpu::MapMode::Read, |r| r.expect("map"));
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("poll");
        let words =
            bytemuck::cast_slice::<u8, u32>(&k.staging.get_mapped_range(..).expect("mapped"))
                .to_vec();
        k.staging.unmap();
        words
    }
}

fn report(name: &str, mpmd: Duration, plain: Duration, bytes: u64) {
    let gbs = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e9;
    println!(
        "{name:<44} mpmd {:>9.2} ms ({:>5.2} GB/s)   hand-written {:>9.2} ms ({:>5.2} GB/s)   ratio {:.2}",
        mpmd.as_secs_f64() * 1e3,
        gbs(mpmd),
        plain.as_secs_f64() * 1e3,
        gbs(plain),
        mpmd.as_secs_f64() / plain.as_secs_f64()
    );
}

fn main() {
    let mut backend = match WgpuBackend::new(WgpuOptions::default()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("benchmark needs a WebGPU adapter: {e}");
            return;
        }
    };
    println!("adapter: {}", backend.adapter_info());
    let plain = Plain::new();
    let options = RunOptions::default();

    // ---- elementwise over 4M f32 ----
    let blocks = ELEMENTS / 256;
    let src = format!(
        "mesh m {{ grid [b = {blocks}]; threads t = 256; }}
kernel axpb(x: gmem<f32[{ELEMENTS}]>, y: gmem<f32[{ELEMENTS}]>, alpha: f32, beta: f32) {{
  let i: u32 = axis_index(b) * 256u + axis_index(t);
  y[i] = x[i] * alpha + beta;
}}
map axpb {{ programs [m: axpb]; inputs [x: gmem<f32[{ELEMENTS}]>]; outputs [y: gmem<f32[{ELEMENTS}]>]; scalars [alpha: f32, beta: f32]; }}"
    );
    let p = plan(&src, "axpb");
    let x: Vec<f32> = (0..ELEMENTS).map(|i| i as f32 * 1e-3).collect();
    let args = CallArgs {
        inputs: [("x".to_string(), HostTensor::from_f32(vec![ELEMENTS], &x))].into(),
        scalars: [
            ("alpha".to_string(), Literal::f32(2.0)),
            ("beta".to_string(), Literal::f32(1.0)),
        ]
        .into(),
    };
    let hand = "@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.x;
  y[i] = x[i] * 2.0 + 1.0;
}";
    let bytes = ELEMENTS as u64 * 4;
    let k = plain.kernel(hand, &[("main", [blocks, 1, 1])], &[bytes], bytes, &[]);
    let x_words: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
    let expected = backend.run(&p, &args, &options).unwrap().outputs["y"]
        .words()
        .to_vec();
    assert_eq!(
        plain.call(&k, &[&x_words]),
        expected,
        "hand-written and mpmd disagree"
    );
    let (mpmd, hand_time) = time(
        || {
            backend.run(&p, &args, &options).expect("run");
        },
        || {
            plain.call(&k, &[&x_words]);
        },
    );
    report("elementwise y = 2x + 1, 4M f32", mpmd, hand_time, 2 * bytes);

    // ---- elementwise over 4M f16 (emulated on u32 words, packed two a word) ----
    let src = format!(
        "mesh m {{ grid [b = {blocks}]; threads t = 256; }}
kernel axpb16(x: gmem<f16[{ELEMENTS}]>, y: gmem<f16[{ELEMENTS}]>, alpha: f16, beta: f16) {{
  let i: u32 = axis_index(b) * 256u + axis_index(t);
  y[i] = x[i] * alpha + beta;
}}
map axpb16 {{ programs [m: axpb16]; inputs [x: gmem<f16[{ELEMENTS}]>]; outputs [y: gmem<f16[{ELEMENTS}]>]; scalars [alpha: f16, beta: f16]; }}"
    );
    let p = plan(&src, "axpb16");
    // Small integers: 2x + 1 is exact in f16, so one rounding (the hand-written
    // kernel's) and two (mpmd's, one per operation) agree.
    let f16_of = mpmd_core::numerics::f16_from_f32;
    let x16: Vec<u32> = (0..ELEMENTS)
        .map(|i| u32::from(f16_of((i % 1000) as f32)))
        .collect();
    let f16_bits = |v: f32| Literal::F16(f16_of(v));
    let x16 = HostTensor::new(mpmd_core::ir::ScalarType::F16, vec![ELEMENTS], x16).expect("shape");
    let args = CallArgs {
        inputs: [("x".to_string(), x16)].into(),
        scalars: [
            ("alpha".to_string(), f16_bits(2.0)),
            ("beta".to_string(), f16_bits(1.0)),
        ]
        .into(),
    };
    // What a hand-writer without `shader-f16` writes: a word (two f16) per invocation.
    let hand = "@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let v = unpack2x16float(x[id.x]);
  y[id.x] = pack2x16float(v * 2.0 + vec2<f32>(1.0));
}";
    let bytes16 = ELEMENTS as u64 * 2;
    let k = plain.kernel(
        hand,
        &[("main", [blocks / 2, 1, 1])],
        &[bytes16],
        bytes16,
        &[],
    );
    let x_words = args.inputs["x"].words().to_vec();
    let expected = backend.run(&p, &args, &options).unwrap().outputs["y"]
        .words()
        .to_vec();
    assert_eq!(
        plain.call(&k, &[&x_words]),
        expected,
        "hand-written and mpmd disagree (f16)"
    );
    let (mpmd, hand_time) = time(
        || {
            backend.run(&p, &args, &options).expect("run");
        },
        || {
            plain.call(&k, &[&x_words]);
        },
    );
    report(
        "elementwise y = 2x + 1, 4M f16",
        mpmd,
        hand_time,
        2 * bytes16,
    );

    // ---- block reduction: 1M f32, one sum per 256-thread block ----
    let rblocks = REDUCE_ELEMENTS / 256;
    let src = format!(
        "mesh m {{ grid [b = {rblocks}]; threads t = 256; }}
kernel bsum(x: gmem<f32[{REDUCE_ELEMENTS}]>, y: gmem<f32[{rblocks}]>, acc: smem<f32[256]>) {{
  let t: u32 = axis_index(t);
  acc[t] = x[axis_index(b) * 256u + t];
  barrier;
  for level: u32 in 0u..8u {{
    let half: u32 = 128u >> level;
    if t < half {{
      acc[t] = acc[t] + acc[t + half];
    }}
    barrier;
  }}
  if t == 0u {{
    y[axis_index(b)] = acc[0];
  }}
}}
map bsum {{ programs [m: bsum]; inputs [x: gmem<f32[{REDUCE_ELEMENTS}]>]; outputs [y: gmem<f32[{rblocks}]>]; scratch [acc: smem<f32[256]>]; }}"
    );
    let p = plan(&src, "bsum");
    let x: Vec<f32> = (0..REDUCE_ELEMENTS).map(|i| (i % 97) as f32).collect();
    let args = CallArgs {
        inputs: [(
            "x".to_string(),
            HostTensor::from_f32(vec![REDUCE_ELEMENTS], &x),
        )]
        .into(),
        scalars: Default::default(),
    };
    let hand = "@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
var<workgroup> acc: array<f32, 256>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
  acc[t] = x[wid.x * 256u + t];
  workgroupBarrier();
  for (var half = 128u; half > 0u; half = half >> 1u) {
    if (t < half) { acc[t] = acc[t] + acc[t + half]; }
    workgroupBarrier();
  }
  if (t == 0u) { y[wid.x] = acc[0]; }
}";
    let k = plain.kernel(
        hand,
        &[("main", [rblocks, 1, 1])],
        &[REDUCE_ELEMENTS as u64 * 4],
        rblocks as u64 * 4,
        &[],
    );
    let x_words: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
    let expected = backend.run(&p, &args, &options).unwrap().outputs["y"]
        .words()
        .to_vec();
    assert_eq!(
        plain.call(&k, &[&x_words]),
        expected,
        "hand-written and mpmd disagree"
    );
    let (mpmd, hand_time) = time(
        || {
            backend.run(&p, &args, &options).expect("run");
        },
        || {
            plain.call(&k, &[&x_words]);
        },
    );
    report(
        "block reduction, 1M f32 -> 4096 sums",
        mpmd,
        hand_time,
        REDUCE_ELEMENTS as u64 * 4,
    );

    // ---- two programs: producer/consumer through a semaphore ----
    let n = ELEMENTS / 4;
    let pblocks = n / 256;
    let src = format!(
        "mesh producer {{ grid [pb = {pblocks}]; threads t = 256; }}
mesh consumer {{ grid [cb = {pblocks}]; threads t = 256; }}
kernel produce(x: gmem<f32[{n}]>, y: gmem<f32[{n}]>, buf: gmem<f32[{n}]>, ready: sem<[{pblocks}]>) {{
  let i: u32 = axis_index(pb) * 256u + axis_index(t);
  buf[i] = x[i] * 2.0;
  signal(ready[axis_index(pb)], 1);
}}
kernel consume(x: gmem<f32[{n}]>, y: gmem<f32[{n}]>, buf: gmem<f32[{n}]>, ready: sem<[{pblocks}]>) {{
  wait(ready[axis_index(cb)], 1);
  let i: u32 = axis_index(cb) * 256u + axis_index(t);
  y[i] = buf[i] + 1.0;
}}
map pipeline {{ programs [producer: produce, consumer: consume]; inputs [x: gmem<f32[{n}]>]; outputs [y: gmem<f32[{n}]>]; scratch [buf: gmem<f32[{n}]>, ready: sem<[{pblocks}]>]; }}"
    );
    let p = plan(&src, "pipeline");
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let args = CallArgs {
        inputs: [("x".to_string(), HostTensor::from_f32(vec![n], &x))].into(),
        scalars: Default::default(),
    };
    let hand = "@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> buf: array<f32>;
@compute @workgroup_size(256)
fn produce(@builtin(global_invocation_id) id: vec3<u32>) { buf[id.x] = x[id.x] * 2.0; }
@compute @workgroup_size(256)
fn consume(@builtin(global_invocation_id) id: vec3<u32>) { y[id.x] = buf[id.x] + 1.0; }";
    let bytes = n as u64 * 4;
    let k = plain.kernel(
        hand,
        &[("produce", [pblocks, 1, 1]), ("consume", [pblocks, 1, 1])],
        &[bytes],
        bytes,
        &[bytes],
    );
    let x_words: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
    let expected = backend.run(&p, &args, &options).unwrap().outputs["y"]
        .words()
        .to_vec();
    assert_eq!(
        plain.call(&k, &[&x_words]),
        expected,
        "hand-written and mpmd disagree"
    );
    let (mpmd, hand_time) = time(
        || {
            backend.run(&p, &args, &options).expect("run");
        },
        || {
            plain.call(&k, &[&x_words]);
        },
    );
    report(
        "producer/consumer, 1M f32, 2 programs",
        mpmd,
        hand_time,
        2 * bytes,
    );

    // ---- chained scan: an inclusive scan of 1M i32 whose blocks pass a carry ----
    chained_scan(&mut backend, &plain, &options);

    // ---- per-call overhead: one block of one thread ----
    let src = "mesh m { threads t = 1; }
kernel one(y: gmem<u32[1]>) { y[0] = 1u; }
map one { programs [m: one]; outputs [y: gmem<u32[1]>]; }";
    let p = plan(src, "one");
    let args = CallArgs::default();
    let hand = "@group(0) @binding(0) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(1)
fn main() { y[0] = 1u; }";
    let k = plain.kernel(hand, &[("main", [1, 1, 1])], &[], 4, &[]);
    let (mpmd, hand_time) = time(
        || {
            backend.run(&p, &args, &options).expect("run");
        },
        || {
            plain.call(&k, &[]);
        },
    );
    println!(
        "{:<44} mpmd {:>9.3} ms   hand-written {:>9.3} ms   overhead {:.3} ms per call",
        "per-call overhead, 1 thread",
        mpmd.as_secs_f64() * 1e3,
        hand_time.as_secs_f64() * 1e3,
        (mpmd.as_secs_f64() - hand_time.as_secs_f64()) * 1e3
    );
}

/// Elements of the chained-scan case.
const SCAN_ELEMENTS: u32 = 1024 * 1024;

/// An inclusive scan as mpmd writes it with a chain: each of `blocks`
/// blocks sums its chunk, waits for the carry of the block before it,
/// passes its own on, then scans its chunk tile by tile. mpmd runs it as one
/// fused dispatch where the adapter is established to run every block at
/// once, else one dispatch per block. Against a hand-written multi-dispatch
/// scan (local scans with tile sums, a scan of the sums, adding the
/// offsets: three dispatches, every workgroup in parallel).
fn chained_scan(backend: &mut WgpuBackend, plain: &Plain, options: &RunOptions) {
    let n = SCAN_ELEMENTS;
    let blocks = backend.resident_workgroups().clamp(2, 16);
    let tiles = n / 256 / blocks;
    let last = blocks - 1;
    // Hillis-Steele over the 256-element tile, unrolled (no loop to charge).
    let steps: String = (0..8)
        .map(|level| {
            let d = 1u32 << level;
            format!(
                "    var v{level}: i32 = tile[t];\n    if t >= {d}u {{\n      v{level} = v{level} + tile[t - {d}u];\n    }}\n    barrier;\n    tile[t] = v{level};\n    barrier;\n"
            )
        })
        .collect();
    let reduce: String = (0..8)
        .map(|level| {
            let half = 128u32 >> level;
            format!("  if t < {half}u {{\n    tile[t] = tile[t] + tile[t + {half}u];\n  }}\n  barrier;\n")
        })
        .collect();
    let src = format!(
        "mesh chain {{ grid [b = {blocks}]; threads t = 256; }}
kernel scan(x: gmem<i32[{n}]>, y: gmem<i32[{n}]>, tile: smem<i32[256]>, carry: gmem<i32[1]> @ chain, turn: sem<[1]> @ chain) {{
  let b: u32 = axis_index(b);
  let t: u32 = axis_index(t);
  var s: i32 = 0;
  for k: u32 in 0u..{tiles}u {{
    s = s + x[(b * {tiles}u + k) * 256u + t];
  }}
  tile[t] = s;
  barrier;
{reduce}  let chunk: i32 = tile[0];
  barrier;
  var base: i32 = 0;
  if b > 0u {{
    wait(turn[0u], 1);
    base = carry[0u];
  }}
  if b < {last}u {{
    if t == 0u {{
      carry@[b + 1u][0u] = base + chunk;
    }}
    signal(turn@[b + 1u][0u], 1);
  }}
  for m: u32 in 0u..{tiles}u {{
    let i: u32 = (b * {tiles}u + m) * 256u + t;
    tile[t] = x[i];
    barrier;
{steps}    y[i] = base + tile[t];
    base = base + tile[255];
    barrier;
  }}
}}
map scan {{ programs [chain: scan]; inputs [x: gmem<i32[{n}]>]; outputs [y: gmem<i32[{n}]>]; scratch [tile: smem<i32[256]>, carry: gmem<i32[1]> @ chain, turn: sem<[1]> @ chain]; }}"
    );
    let p = plan(&src, "scan");
    let x: Vec<i32> = (0..n as i32).map(|i| i % 7 - 3).collect();
    let args = CallArgs {
        inputs: [("x".to_string(), HostTensor::from_i32(vec![n], &x))].into(),
        scalars: Default::default(),
    };
    let groups = n / 256;
    let per_thread = groups / 256;
    let hand = format!(
        "@group(0) @binding(0) var<storage, read_write> x: array<i32>;
@group(0) @binding(1) var<storage, read_write> y: array<i32>;
@group(0) @binding(2) var<storage, read_write> sums: array<i32>;
var<workgroup> tile: array<i32, 256>;

fn scan_tile(t: u32) {{
  for (var d = 1u; d < 256u; d = d << 1u) {{
    var v = tile[t];
    if (t >= d) {{ v = v + tile[t - d]; }}
    workgroupBarrier();
    tile[t] = v;
    workgroupBarrier();
  }}
}}

@compute @workgroup_size(256)
fn local_scan(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
  let i = wid.x * 256u + lid.x;
  tile[lid.x] = x[i];
  workgroupBarrier();
  scan_tile(lid.x);
  y[i] = tile[lid.x];
  if (lid.x == 255u) {{ sums[wid.x] = tile[255]; }}
}}

@compute @workgroup_size(256)
fn scan_sums(@builtin(local_invocation_id) lid: vec3<u32>) {{
  var s = 0;
  for (var k = 0u; k < {per_thread}u; k = k + 1u) {{ s = s + sums[lid.x * {per_thread}u + k]; }}
  tile[lid.x] = s;
  workgroupBarrier();
  scan_tile(lid.x);
  var offset = tile[lid.x] - s;
  for (var k = 0u; k < {per_thread}u; k = k + 1u) {{
    let v = sums[lid.x * {per_thread}u + k];
    sums[lid.x * {per_thread}u + k] = offset;
    offset = offset + v;
  }}
}}

@compute @workgroup_size(256)
fn add_offsets(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
  y[wid.x * 256u + lid.x] = y[wid.x * 256u + lid.x] + sums[wid.x];
}}"
    );
    let bytes = n as u64 * 4;
    let k = plain.kernel(
        &hand,
        &[
            ("local_scan", [groups, 1, 1]),
            ("scan_sums", [1, 1, 1]),
            ("add_offsets", [groups, 1, 1]),
        ],
        &[bytes],
        bytes,
        &[groups as u64 * 4],
    );
    let x_words: Vec<u32> = x.iter().map(|v| *v as u32).collect();
    let expected = backend.run(&p, &args, options).unwrap().outputs["y"]
        .words()
        .to_vec();
    assert_eq!(
        plain.call(&k, &[&x_words]),
        expected,
        "hand-written and mpmd disagree (chained scan)"
    );
    let fused = mpmd_wgpu::fuses_programs(&p, &backend.plan_emit_options(&p, options.mode));
    let (mpmd, hand_time) = time(
        || {
            backend.run(&p, &args, options).expect("run");
        },
        || {
            plain.call(&k, &[&x_words]);
        },
    );
    let how = if fused {
        format!("{blocks} blocks, fused")
    } else {
        format!("{blocks} blocks, {blocks} dispatches")
    };
    report(
        &format!("chained scan, 1M i32 ({how})"),
        mpmd,
        hand_time,
        2 * bytes,
    );
}
