//! The adapter traps the backend works around, checked where they exist:
//! llvmpipe's silent loop limit (what `LLVMPIPE_LOOP_CAP` assumes), and
//! contraction of `a * b + c`.

mod common;
use common::*;
use mpmd_core::backend::Backend;
use mpmd_core::host::HostTensor;
use mpmd_core::ir::Literal;
use mpmd_wgpu::WgpuOptions;

const NESTED: &str = "
mesh m { threads t = 1; }
kernel count(y: gmem<u32[1]>, n: u32, one: u32) {
  var c: u32 = 0u;
  for k: u32 in 0u..n { for j: u32 in 0u..one { c = c + 1u; } }
  y[0] = c;
}
map count { programs [m: count]; outputs [y: gmem<u32[1]>]; scalars [n: u32, one: u32]; }
";

/// A backend on llvmpipe with the backend's loop cap effectively off, to see
/// the driver's own behaviour; `None` (with a message) on other adapters.
fn uncapped_llvmpipe() -> mpmd_wgpu::WgpuBackend {
    let wgpu = backend(WgpuOptions {
        loop_cap: Some(u32::MAX),
        ..Default::default()
    });
    require_llvmpipe(&wgpu, "the test states lavapipe's traps");
    wgpu
}

#[test]
fn llvmpipe_ends_loops_after_65535_header_visits() {
    let mut wgpu = uncapped_llvmpipe();
    let p = plan(&module(NESTED), "count");
    let count = |wgpu: &mut mpmd_wgpu::WgpuBackend, n: u32| {
        let a = args(
            vec![],
            vec![("n", Literal::U32(n)), ("one", Literal::U32(1))],
        );
        wgpu.run(&p, &a, &fast()).unwrap().outputs["y"].words()[0]
    };
    // Each outer iteration visits three loop headers (outer, inner, inner exit):
    // 21,845 * 3 = 65,535 visits run right, one more iteration silently does not.
    assert_eq!(count(&mut wgpu, 21_845), 21_845);
    assert_eq!(
        count(&mut wgpu, 21_846),
        21_845,
        "the driver's silent limit moved; revisit LLVMPIPE_LOOP_CAP"
    );
    // With the backend's cap (the default on llvmpipe) the same run is refused.
    let mut capped = backend(WgpuOptions::default());
    let a = args(
        vec![],
        vec![("n", Literal::U32(21_846)), ("one", Literal::U32(1))],
    );
    let err = capped.run(&p, &a, &fast()).unwrap_err();
    assert_eq!(
        err.class(),
        Some(mpmd_core::ErrorClass::Unsupported),
        "{err}"
    );
    assert_eq!(count(&mut capped, 21_000), 21_000);
}

#[test]
fn multiply_add_is_not_contracted_unless_fast_math() {
    let mut wgpu = backend(WgpuOptions::default());
    let m = module(
        "
mesh m { threads t = 1; }
kernel k(a: gmem<f32[3]>, y: gmem<f32[1]>) {
  y[0] = a[0] * a[1] + a[2];
}
map k { programs [m: k]; inputs [a: gmem<f32[3]>]; outputs [y: gmem<f32[1]>]; }
",
    );
    let p = plan(&m, "k");
    // a0 * a0 = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11; fused, the 2^-24 survives.
    let a0 = 1.0f32 + f32::powi(2.0, -12);
    let vals = [a0, a0, -(1.0 + f32::powi(2.0, -11))];
    let a = args(vec![("a", HostTensor::from_f32(vec![3], &vals))], vec![]);
    let y = wgpu.run(&p, &a, &fast()).unwrap().outputs["y"].to_f32()[0];
    assert_eq!(y, a0 * a0 + vals[2]);
    assert_ne!(y, a0.mul_add(a0, vals[2]));
}

const DIVERGENT: &str = "
mesh m { threads t = 8; }
kernel count(y: gmem<u32[8]>, n: u32) {
  var c: u32 = 0u;
  if axis_index(t) == 0u {
    for k: u32 in 0u..n { c = c + 1u; }
  } else {
    for j: u32 in 0u..n { c = c + 2u; }
  }
  y[axis_index(t)] = c;
}
map count { programs [m: count]; outputs [y: gmem<u32[8]>]; scalars [n: u32]; }
";

#[test]
fn divergent_loops_share_the_llvmpipe_budget() {
    let mut wgpu = uncapped_llvmpipe();
    let p = plan(&module(DIVERGENT), "count");
    let n = |n: u32| args(vec![], vec![("n", Literal::U32(n))]);
    // Lanes 1..7 share a SIMD vector with lane 0: the two branches' loops
    // (40,001 visits each) add up in one count and lanes 1..7 stop early.
    let y = wgpu.run(&p, &n(40_000), &fast()).unwrap().outputs["y"]
        .words()
        .to_vec();
    assert_eq!(y[0], 40_000);
    assert_ne!(
        y[1], 80_000,
        "the driver no longer shares the loop budget between divergent lanes"
    );
    // The backend pays both branches up front: refused, not wrong.
    let mut capped = backend(WgpuOptions::default());
    let err = capped.run(&p, &n(40_000), &fast()).unwrap_err();
    assert_eq!(
        err.class(),
        Some(mpmd_core::ErrorClass::Unsupported),
        "{err}"
    );
    let y = capped.run(&p, &n(30_000), &fast()).unwrap().outputs["y"]
        .words()
        .to_vec();
    assert_eq!(y, [vec![30_000], vec![60_000; 7]].concat());
}

/// Runs `look` (a WGSL expression reading `flag[0]`) in a spin of workgroup
/// 0 of a two-workgroup dispatch; workgroup 1 sets the flag once workgroup 0
/// is spinning (it says so in `flag[2]` after its first look): whether
/// workgroup 0 saw the flag within 60,000 polls of 32 looks (as the
/// backend's polls: waking the pool's second thread can take a loaded
/// machine longer than 60,000 single looks).
fn spin_sees_other_workgroup(look: &str) -> bool {
    let looks = format!(
        "    if ({look} != 0u) {{\n      atomicStore(&flag[1], 1u);\n      return;\n    }}\n"
    )
    .repeat(32);
    let started = "    if (atomicAdd(&flag[2], 0u) != 0u) {\n      atomicStore(&flag[0], 1u);\n      return;\n    }\n"
        .repeat(32);
    let wgsl = format!(
        "@group(0) @binding(0) var<storage, read_write> flag: array<atomic<u32>, 4>;
@compute @workgroup_size(1)
fn main(@builtin(workgroup_id) wid: vec3<u32>) {{
  if (wid.x == 1u) {{
    for (var polls = 0u; polls < 60000u; polls = polls + 1u) {{
{started}    }}
    return;
  }}
  for (var polls = 0u; polls < 60000u; polls = polls + 1u) {{
{looks}    if (polls == 0u) {{ atomicStore(&flag[2], 1u); }}
  }}
}}"
    );
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    let (device, queue) = pollster::block_on(adapter.request_device(&Default::default())).unwrap();
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 16,
        usage,
        mapped_at_creation: false,
    });
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 8,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: buffer.as_entire_binding(),
        }],
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(2, 1, 1);
    }
    encoder.copy_buffer_to_buffer(&buffer, 0, &staging, 0, 8);
    queue.submit([encoder.finish()]);
    staging
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.unwrap());
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let words: Vec<u32> = bytemuck::cast_slice(&staging.get_mapped_range(..).unwrap()).to_vec();
    words[1] == 1
}

/// The backend's polling waits and its residency probe look with
/// `atomicAdd(.., 0)`: a read-modify-write, which no compiler may hoist out
/// of the spin. (With `atomicLoad` and no store in the loop, the residency
/// probe never completed on lavapipe, whatever `LP_NUM_THREADS`: 24 tries
/// of 2 to 8 workgroups; llvmpipe may compile it as a plain load, which
/// LLVM hoists out of the loop. With a store in the loop it sometimes sees
/// the write, so the trap is not pinned down by a test.)
#[test]
fn a_spin_of_atomic_add_zero_sees_another_workgroups_write() {
    let wgpu = uncapped_llvmpipe();
    // Two workgroups must run at once for the question to mean anything.
    needs::setup(
        "lavapipe running two workgroups at once (LP_NUM_THREADS of 2 or more)",
        if wgpu.resident_workgroups() >= 2 {
            Ok(())
        } else {
            Err(format!("{:?}", wgpu.residency()))
        },
    );
    for _ in 0..3 {
        assert!(spin_sees_other_workgroup("atomicAdd(&flag[0], 0u)"));
    }
}

/// Issue 27: a generous `max` is not charged up front. A `while ... max
/// 60000u` that runs 19 to 21 times inside a loop of 5 trips would cost
/// 300,000 visits if its maximum were paid; counted as it runs (for the
/// subgroup, `EmitOptions::subgroups`) it runs, and equals the interpreter.
const GENEROUS_MAX: &str = "
mesh m { grid [b = 2]; threads t = 64; }
kernel k(y: gmem<u32[128]>) {
  var total: u32 = 0u;
  for r: u32 in 0u..5u {
    var n: u32 = 0u;
    while n < 19u + axis_index(t) % 3u max 60000u {
      n = n + 1u;
    }
    total = total + n * (r + 1u);
  }
  y[axis_index(b) * 64u + axis_index(t)] = total;
}
map k { programs [m: k]; outputs [y: gmem<u32[128]>]; }
";

#[test]
fn a_generous_while_max_is_charged_as_it_runs() {
    let mut wgpu = backend(WgpuOptions::default());
    require_llvmpipe(&wgpu, "its loop cap is on by default");
    let m = module(GENEROUS_MAX);
    let out = assert_same(&mut wgpu, &m, "k", &args(vec![], vec![]));
    let y = out.outputs["y"].words();
    assert_eq!(y[0], 19 * 15);
    assert_eq!(y[65], 20 * 15);
}

/// Lanes of one SIMD vector share llvmpipe's loop count: lane 0 runs the
/// first loop 40,000 times while lane 1 waits, then lane 1 runs the second
/// 40,000 times: the vector visits about 80,000 headers, though no lane
/// ran more than 40,002 loop iterations. The backend counts the vector's
/// visits (the subgroup's largest count at each loop), so the run is
/// refused, never silently cut short.
const SHARED_COUNT: &str = "
mesh m { threads t = 8; }
kernel k(y: gmem<u32[8]>, n: u32) {
  var a: u32 = 0u;
  while a < select(axis_index(t) == 0u, n, 1u) max 100000u { a = a + 1u; }
  var b: u32 = 0u;
  while b < select(axis_index(t) == 1u, n, 1u) max 100000u { b = b + 1u; }
  y[axis_index(t)] = a + b;
}
map k { programs [m: k]; outputs [y: gmem<u32[8]>]; scalars [n: u32]; }
";

#[test]
fn sequential_loops_of_different_lanes_share_the_vector_count() {
    let p = plan(&module(SHARED_COUNT), "k");
    let n = |n: u32| args(vec![], vec![("n", Literal::U32(n))]);
    // The driver's own behaviour: lane 1's loop is cut short.
    let mut uncapped = uncapped_llvmpipe();
    let y = uncapped.run(&p, &n(40_000), &fast()).unwrap().outputs["y"]
        .words()
        .to_vec();
    assert_eq!(y[0], 40_001);
    assert_ne!(
        y[1], 40_001,
        "the driver no longer shares the loop count between lanes of a vector"
    );
    // The backend's count: refused, not wrong; within the cap, exact.
    let mut capped = backend(WgpuOptions::default());
    let err = capped.run(&p, &n(40_000), &fast()).unwrap_err();
    assert_eq!(
        err.class(),
        Some(mpmd_core::ErrorClass::Unsupported),
        "{err}"
    );
    let y = capped.run(&p, &n(30_000), &fast()).unwrap().outputs["y"]
        .words()
        .to_vec();
    assert_eq!(y, [vec![30_001, 30_001], vec![2; 6]].concat());
}
