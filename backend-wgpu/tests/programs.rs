//! Programs run on the adapter (lavapipe here) and compared with the
//! reference interpreter.

mod common;

use common::*;
use mpmd_core::backend::{Backend, RunError};
use mpmd_core::host::{CallOutputs, HostTensor};
use mpmd_core::interp::Interpreter;
use mpmd_core::ir::Literal;
use mpmd_core::ErrorClass;
use mpmd_core::Mode;
use mpmd_wgpu::{emit_module, EmitOptions, WgpuOptions};

/// Equal words, except that NaN payloads and the sign of zero are ignored
/// (docs/design.md, "Conformance").
fn assert_equivalent(got: &CallOutputs, expected: &CallOutputs) {
    assert_eq!(
        got.outputs.keys().collect::<Vec<_>>(),
        expected.outputs.keys().collect::<Vec<_>>()
    );
    for (name, e) in &expected.outputs {
        let g = &got.outputs[name];
        assert_eq!(g.shape(), e.shape(), "shape of `{name}`");
        assert_eq!(g.elem(), e.elem(), "element type of `{name}`");
        let (gf, ef) = (g.to_f32(), e.to_f32());
        for (i, (gw, ew)) in g.to_bits().into_iter().zip(e.to_bits()).enumerate() {
            let (gv, ev) = (gf[i], ef[i]);
            let same = gw == ew
                || (g.elem().is_float()
                    && ((gv.is_nan() && ev.is_nan()) || (gv == 0.0 && ev == 0.0)));
            assert!(
                same,
                "`{name}` element {i}: wgpu 0x{gw:08x}, interpreter 0x{ew:08x}"
            );
        }
    }
}

fn run_and_compare(src: &str, map: &str, a: &mpmd_core::host::CallArgs) -> CallOutputs {
    let mut wgpu = backend(WgpuOptions::default());
    let m = module(src);
    let (expected, got) = run_both(&mut wgpu, &m, map, a, &fast());
    let expected = expected.unwrap_or_else(|e| panic!("interpreter failed: {e}"));
    let got = got.unwrap_or_else(|e| panic!("wgpu failed: {e}"));
    assert_equivalent(&got, &expected);
    // Checked mode must give the same result when nothing is out of bounds.
    let p = plan(&m, map);
    let checked_out = wgpu
        .run(&p, a, &checked())
        .unwrap_or_else(|e| panic!("wgpu (checked) failed: {e}"));
    assert_equivalent(&checked_out, &expected);
    got
}

const ELEMENTWISE: &str = "
mesh m {
  grid [b = 5];
  threads t = 96;
}
kernel saxpy(x: gmem<f32[480]>, z: gmem<f32[480]>, y: gmem<f32[480]>, alpha: f32, n: u32) {
  let i: u32 = axis_index(b) * axis_size(t) + axis_index(t);
  if i < n {
    y[i] = alpha * x[i] + z[i] - sqrt(abs(x[i])) / 3.0;
  }
}
map saxpy {
  programs [m: saxpy];
  inputs [x: gmem<f32[480]>, z: gmem<f32[480]>];
  outputs [y: gmem<f32[480]> zeroed];
  scalars [alpha: f32, n: u32];
}
";

#[test]
fn elementwise_matches_interpreter() {
    let x: Vec<f32> = (0..480).map(|i| (i as f32 - 240.0) * 0.37).collect();
    let z: Vec<f32> = (0..480).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let a = args(
        vec![
            ("x", HostTensor::from_f32(vec![480], &x)),
            ("z", HostTensor::from_f32(vec![480], &z)),
        ],
        vec![("alpha", Literal::f32(1.5)), ("n", Literal::U32(470))],
    );
    let out = run_and_compare(ELEMENTWISE, "saxpy", &a);
    let y = out.outputs["y"].to_f32();
    assert_eq!(y[475], 0.0, "beyond n the zeroed output stays zero");
    let expect = 1.5 * x[7] + z[7] - x[7].abs().sqrt() / 3.0;
    assert_eq!(y[7], expect);
}

const REDUCTION: &str = "
mesh m {
  grid [b = 3];
  threads t = 128;
}
kernel block_sum(x: gmem<u32[384]>, y: gmem<u32[3]>, acc: smem<u32[128]>) {
  let t: u32 = axis_index(t);
  acc[t] = x[axis_index(b) * 128u + t];
  barrier;
  for level: u32 in 0u..7u {
    let half: u32 = 64u >> level;
    if t < half {
      acc[t] = acc[t] + acc[t + half];
    }
    barrier;
  }
  if t == 0u {
    y[axis_index(b)] = acc[0];
  }
}
map block_sum {
  programs [m: block_sum];
  inputs [x: gmem<u32[384]>];
  outputs [y: gmem<u32[3]>];
  scratch [acc: smem<u32[128]>];
}
";

#[test]
fn smem_reduction_matches_interpreter() {
    let x: Vec<u32> = (0..384).map(|i| i * 7 + 1).collect();
    let a = args(vec![("x", HostTensor::from_u32(vec![384], &x))], vec![]);
    let out = run_and_compare(REDUCTION, "block_sum", &a);
    let sums: Vec<u32> = (0..3)
        .map(|b| x[b * 128..(b + 1) * 128].iter().sum())
        .collect();
    assert_eq!(out.outputs["y"].words(), sums);
}

const ATOMICS: &str = "
mesh m {
  grid [b = 4];
  threads t = 64;
}
kernel hist(x: gmem<u32[256]>, counts: gmem<u32[8]>, extremes: gmem<i32[2]>, flags: gmem<u32[1]>) {
  let i: u32 = axis_index(b) * 64u + axis_index(t);
  let v: u32 = x[i];
  atomic_add(counts[v % 8u], 1u);
  let s: i32 = i32(v) - 100;
  atomic_min(extremes[0], s);
  atomic_max(extremes[1], s);
  atomic_or(flags[0], 1u << (v % 32u));
  if i == 5u {
    let old: u32 = atomic_compare_exchange(counts[7], 0u, 0u);
  }
}
map hist {
  programs [m: hist];
  inputs [x: gmem<u32[256]>];
  outputs [counts: gmem<u32[8]> zeroed, extremes: gmem<i32[2]>, flags: gmem<u32[1]> zeroed];
}
";

#[test]
fn atomics_match_interpreter() {
    let mut wgpu = backend(WgpuOptions::default());
    let x: Vec<u32> = (0..256u32).map(|i| (i * 37 + 11) % 251).collect();
    let m = module(ATOMICS);
    let p = plan(&m, "hist");
    let a = args(vec![("x", HostTensor::from_u32(vec![256], &x))], vec![]);
    // extremes is uninitialised: start both backends from the same words by aliasing nothing;
    // compare only counts and flags, and check extremes against the host.
    let got = wgpu.run(&p, &a, &fast()).unwrap();
    let expected = Interpreter::new().run(&p, &a, &fast()).unwrap();
    assert_eq!(got.outputs["counts"], expected.outputs["counts"]);
    assert_eq!(got.outputs["flags"], expected.outputs["flags"]);
    let mut counts = [0u32; 8];
    for v in &x {
        counts[(v % 8) as usize] += 1;
    }
    assert_eq!(got.outputs["counts"].words(), counts.to_vec());
    let ext = got.outputs["extremes"].to_i32();
    let min = x.iter().map(|&v| v as i32 - 100).min().unwrap();
    let max = x.iter().map(|&v| v as i32 - 100).max().unwrap();
    // Fresh wgpu buffers are zero: min(0, ...) and max(0, ...).
    assert_eq!(ext, vec![min.min(0), max.max(0)]);
}

const INTEGER_EDGES: &str = "
mesh m {
  grid [b = 2];
  threads t = 64;
}
kernel edges(a: gmem<i32[128]>, c: gmem<i32[128]>, f: gmem<f32[128]>, o: gmem<i32[128, 14]>, u: gmem<u32[128, 9]>, g: gmem<f32[128, 6]>) {
  let i: u32 = axis_index(b) * 64u + axis_index(t);
  let x: i32 = a[i];
  let y: i32 = c[i];
  let z: f32 = f[i];
  o[i, 0] = x / y;
  o[i, 1] = x % y;
  o[i, 2] = x << y;
  o[i, 3] = x >> y;
  o[i, 4] = x + y;
  o[i, 5] = x - y;
  o[i, 6] = x * y;
  o[i, 7] = -x;
  o[i, 8] = abs(x);
  o[i, 9] = min(x, y);
  o[i, 10] = max(x, y);
  o[i, 11] = i32(z);
  o[i, 12] = ~x ^ (x & y | y);
  o[i, 13] = i32(bool(x)) + i32(z > 0.5);
  let ux: u32 = u32(x);
  let uy: u32 = u32(y);
  u[i, 0] = ux / uy;
  u[i, 1] = ux % uy;
  u[i, 2] = ux << uy;
  u[i, 3] = ux >> uy;
  u[i, 4] = u32(z);
  u[i, 5] = ux * uy - ux;
  u[i, 6] = bitcast<u32>(z);
  u[i, 7] = u32(x < y) + u32(bool(z));
  u[i, 8] = u32(select(x > y, ux, uy));
  g[i, 0] = f32(x);
  g[i, 1] = f32(ux);
  g[i, 2] = min(z, f32(y));
  g[i, 3] = max(z, f32(y));
  g[i, 4] = z % f32(y);
  g[i, 5] = bitcast<f32>(x);
}
map edges {
  programs [m: edges];
  inputs [a: gmem<i32[128]>, c: gmem<i32[128]>, f: gmem<f32[128]>];
  outputs [o: gmem<i32[128, 14]>, u: gmem<u32[128, 9]>, g: gmem<f32[128, 6]>];
}
";

#[test]
fn integer_edge_numerics_match_interpreter() {
    let specials_i = [
        i32::MIN,
        i32::MAX,
        -1,
        0,
        1,
        2,
        31,
        32,
        33,
        -33,
        -32,
        100,
        -7,
        7,
        i32::MIN + 1,
        65536,
    ];
    let specials_f = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        0.5,
        -0.5,
        0.75,
        2.5,
        -2.5,
        1e10,
        -1e10,
        2147483520.0,
        2147483648.0,
        -2147483648.0,
        -2147483904.0,
        4294967040.0,
        4294967296.0,
        3e9,
        -1.0,
        7.25,
        -7.25,
        123456.79,
        1e-3,
    ];
    let mut a = Vec::new();
    let mut c = Vec::new();
    let mut f = Vec::new();
    for k in 0..128usize {
        a.push(specials_i[k % specials_i.len()]);
        c.push(specials_i[(k / specials_i.len() + k * 3) % specials_i.len()]);
        f.push(specials_f[k % specials_f.len()]);
    }
    let a = args(
        vec![
            ("a", HostTensor::from_i32(vec![128], &a)),
            ("c", HostTensor::from_i32(vec![128], &c)),
            ("f", HostTensor::from_f32(vec![128], &f)),
        ],
        vec![],
    );
    let out = run_and_compare(INTEGER_EDGES, "edges", &a);
    // Spot checks against docs/design.md's rules, independent of the interpreter.
    let o = out.outputs["o"].to_i32();
    let row = |k: usize| &o[k * 14..(k + 1) * 14];
    // k = 0: x = i32::MIN, y = i32::MIN.
    assert_eq!(row(0)[0], 1);
    // k = 2: x = -1; find a row with y = 0 and one with x = MIN, y = -1.
    for k in 0..128 {
        let x = specials_i[k % 16];
        let y = specials_i[(k / 16 + k * 3) % 16];
        let r = row(k);
        if y == 0 {
            assert_eq!(r[0], x, "x / 0 is x");
            assert_eq!(r[1], 0, "x % 0 is 0");
        }
        if x == i32::MIN && y == -1 {
            assert_eq!(r[0], i32::MIN);
            assert_eq!(r[1], 0);
        }
        assert_eq!(r[2], x.wrapping_shl(y as u32), "shift amounts mod 32");
        assert_eq!(r[8], x.wrapping_abs());
    }
}

const TWO_GRIDS: &str = "
mesh wide {
  grid [w = 3];
  threads t = 96;
}
mesh narrow {
  grid [n = 5];
  threads s = 48;
}
kernel fill_wide(y: gmem<u32[288]>, z: gmem<u32[240]>, k: u32) {
  let i: u32 = axis_index(w) * axis_size(t) + axis_index(t);
  y[i] = i * k + axis_index(w);
}
kernel fill_narrow(y: gmem<u32[288]>, z: gmem<u32[240]>, k: u32) {
  let i: u32 = axis_index(n) * axis_size(s) + axis_index(s);
  z[i] = i + k * axis_index(n) + axis_size(w);
}
map two {
  programs [wide: fill_wide, narrow: fill_narrow];
  outputs [y: gmem<u32[288]>, z: gmem<u32[240]>];
  scalars [k: u32];
}
";

#[test]
fn two_programs_with_different_grids() {
    let a = args(vec![], vec![("k", Literal::U32(3))]);
    let out = run_and_compare(TWO_GRIDS, "two", &a);
    let y = &out.outputs["y"].words();
    let z = &out.outputs["z"].words();
    assert_eq!(y[100], 100 * 3 + 1);
    assert_eq!(z[100], 100 + 3 * 2 + 3);
}

const PIPELINE: &str = "
mesh producer {
  grid [pb = 4];
  threads t = 64;
}
mesh consumer {
  grid [cb = 4];
  threads t = 64;
}
kernel produce(x: gmem<f32[256]>, y: gmem<f32[256]>, buf: gmem<f32[256]>, ready: sem<[4]>) {
  let i: u32 = axis_index(pb) * 64u + axis_index(t);
  buf[i] = x[i] * 2.0;
  signal(ready[axis_index(pb)], 1);
}
kernel consume(x: gmem<f32[256]>, y: gmem<f32[256]>, buf: gmem<f32[256]>, ready: sem<[4]>) {
  wait(ready[axis_index(cb)], 1);
  let i: u32 = axis_index(cb) * 64u + axis_index(t);
  y[i] = buf[i] + 1.0;
}
map pipeline {
  programs [consumer: consume, producer: produce];
  inputs [x: gmem<f32[256]>];
  outputs [y: gmem<f32[256]>];
  scratch [buf: gmem<f32[256]>, ready: sem<[4]>];
}
";

#[test]
fn producer_consumer_via_semaphore() {
    let x: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let a = args(vec![("x", HostTensor::from_f32(vec![256], &x))], vec![]);
    let out = run_and_compare(PIPELINE, "pipeline", &a);
    let y = out.outputs["y"].to_f32();
    assert_eq!(y[200], 401.0);
    // Calling twice works: non-resident semaphores start at zero every call.
    let mut wgpu = backend(WgpuOptions::default());
    let p = plan(&module(PIPELINE), "pipeline");
    assert!(!wgpu.unverified(&p));
    for _ in 0..2 {
        assert_eq!(
            wgpu.run(&p, &a, &fast()).unwrap().outputs["y"].to_f32()[200],
            401.0
        );
    }
}

const HANDOFF: &str = "
mesh sender {
  grid [s = 2];
  threads t = 32;
}
mesh ext {
  grid [e = 2];
  threads t = 32;
}
resident hand: gmem<f32[32]> @ ext;
resident credits: sem<[1]> @ ext;
kernel send(x: gmem<f32[64]>, hand: gmem<f32[32]> @ ext, credits: sem<[1]> @ ext) {
  let b: u32 = axis_index(s);
  hand@[b][axis_index(t)] = x[b * 32u + axis_index(t)] + 10.0;
  signal(credits@[b][0], 1);
}
kernel receive(y: gmem<f32[64]>, hand: gmem<f32[32]> @ ext, credits: sem<[1]> @ ext) {
  wait(credits[0], 1);
  y[axis_index(e) * 32u + axis_index(t)] = hand[axis_index(t)] * 2.0;
}
map send {
  programs [sender: send];
  inputs [x: gmem<f32[64]>];
  scratch [hand: gmem<f32[32]> @ ext resident, credits: sem<[1]> @ ext resident];
}
map receive {
  programs [ext: receive];
  outputs [y: gmem<f32[64]>];
  scratch [hand: gmem<f32[32]> @ ext resident, credits: sem<[1]> @ ext resident];
}
call send();
call receive();
";

#[test]
fn external_mesh_handoff_with_residents() {
    let mut wgpu = backend(WgpuOptions::default());
    let m = module(HANDOFF);
    let send = plan(&m, "send");
    let receive = plan(&m, "receive");
    assert_eq!(send.external_meshes, vec!["ext".to_string()]);
    let x: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let a = args(vec![("x", HostTensor::from_f32(vec![64], &x))], vec![]);
    let none = args(vec![], vec![]);
    let mut interp = Interpreter::new();
    interp.run(&send, &a, &fast()).unwrap();
    wgpu.run(&send, &a, &fast()).unwrap();
    assert_eq!(wgpu.resident("credits").unwrap().words(), vec![1, 1]);
    assert_eq!(wgpu.resident("hand"), interp.resident("hand"));
    let expected = interp.run(&receive, &none, &fast()).unwrap();
    let got = wgpu.run(&receive, &none, &fast()).unwrap();
    assert_eq!(got, expected);
    assert_eq!(got.outputs["y"].to_f32()[40], (40.0 + 10.0) * 2.0);
    // The credits were consumed; a second receive has nothing to take and,
    // with nobody left to signal, can never proceed.
    assert_eq!(wgpu.resident("credits").unwrap().words(), vec![0, 0]);
    let err = wgpu.run(&receive, &none, &fast()).unwrap_err();
    assert_eq!(err.class(), Some(ErrorClass::Deadlock), "{err}");
    assert_eq!(
        interp.run(&receive, &none, &fast()).unwrap_err().class(),
        Some(ErrorClass::Deadlock)
    );
}

const CYCLE: &str = "
mesh a {
  grid [x = 2];
  threads t = 32;
}
mesh b {
  grid [y = 2];
  threads t = 32;
}
kernel ping(o: gmem<u32[2]>, s1: sem<[1]>, s2: sem<[1]>) {
  signal(s1[0], 1);
  wait(s2[0], 1);
}
kernel pong(o: gmem<u32[2]>, s1: sem<[1]>, s2: sem<[1]>) {
  wait(s1[0], 1);
  signal(s2[0], 1);
}
map cycle {
  programs [a: ping, b: pong];
  outputs [o: gmem<u32[2]> zeroed];
  scratch [s1: sem<[1]>, s2: sem<[1]>];
}
";

#[test]
fn cycle_is_refused_without_co_residency() {
    let mut wgpu = backend(WgpuOptions::default());
    let p = plan(&module(CYCLE), "cycle");
    assert!(p.graph.has_cycle);
    if wgpu.co_residency_established(&p) {
        // Established for this adapter (tests/fused_dispatch.rs): it runs fused.
        wgpu.run(&p, &args(vec![], vec![]), &fast()).unwrap();
        assert!(!wgpu.unverified(&p));
        return;
    }
    let err = wgpu.run(&p, &args(vec![], vec![]), &fast()).unwrap_err();
    let RunError::Refused { reason } = &err else {
        panic!("expected a refusal, got {err}")
    };
    assert!(reason.contains("cycle"), "{reason}");
    assert!(reason.contains("co_resident"), "{reason}");
    assert!(wgpu.unverified(&p));
}

const SELF_WAIT: &str = "
mesh m {
  grid [b = 2];
  threads t = 32;
}
kernel stuck(o: gmem<u32[64]>, s: sem<[1]>) {
  signal(s[0], 1);
  wait(s[0], 100);
  o[axis_index(b) * 32u + axis_index(t)] = 1u;
}
map stuck {
  programs [m: stuck];
  outputs [o: gmem<u32[64]>];
  scratch [s: sem<[1]>];
}
";

#[test]
fn wait_timeout_is_reported_not_hung() {
    let p = plan(&module(SELF_WAIT), "stuck");
    // Without the co-residency declaration, and more workgroups than the
    // backend established: one dispatch per block, and block 0's wait finds
    // the count short (tests/dispatch_split.rs).
    let mut wgpu = backend(WgpuOptions::default());
    let err = wgpu.run(&p, &args(vec![], vec![]), &fast()).unwrap_err();
    if wgpu.co_residency_established(&p) {
        // Established: fused, and the wait gives up (the default budget).
        assert!(matches!(err, RunError::WaitTimeout { .. }), "{err}");
    } else {
        let RunError::Unsupported { reason } = &err else {
            panic!("expected unsupported, got {err}")
        };
        assert!(
        reason.starts_with(
            "program 0 (stuck), block 0 waits on `s[0]`, which its own program signals, and the count was short"
        ),
        "{reason}"
    );
    }
    // Declared co-resident: it runs, the wait gives up, and the error names it.
    let mut wgpu = backend(WgpuOptions {
        co_resident: true,
        wait_poll_budget: Some(2000),
        ..Default::default()
    });
    let err = wgpu.run(&p, &args(vec![], vec![]), &fast()).unwrap_err();
    let RunError::WaitTimeout { site, semaphore } = &err else {
        panic!("expected a timeout, got {err}")
    };
    assert_eq!(semaphore, "s[0]");
    assert_eq!(site.kernel, "stuck");
    assert_eq!(site.thread, None);
    assert!(site.block < 2);
}

const UNDERFED: &str = "
mesh producer {
  threads t = 32;
}
mesh consumer {
  threads t = 32;
}
kernel give(o: gmem<u32[32]>, s: sem<[1]>) {
  signal(s[0], 1);
}
kernel take(o: gmem<u32[32]>, s: sem<[1]>) {
  wait(s[0], 2);
  o[axis_index(t)] = 7u;
}
map underfed {
  programs [consumer: take, producer: give];
  outputs [o: gmem<u32[32]>];
  scratch [s: sem<[1]>];
}
";

#[test]
fn unmet_wait_after_all_signals_is_a_deadlock() {
    let mut wgpu = backend(WgpuOptions::default());
    let m = module(UNDERFED);
    let (expected, got) = run_both(&mut wgpu, &m, "underfed", &args(vec![], vec![]), &fast());
    assert_eq!(expected.unwrap_err().class(), Some(ErrorClass::Deadlock));
    let err = got.unwrap_err();
    let RunError::Deadlock { wait_for_graph } = &err else {
        panic!("expected a deadlock, got {err}")
    };
    assert!(
        wait_for_graph.contains("program 0 (take), block 0 waits on `s[0]`"),
        "{wait_for_graph}"
    );
}

const OOB: &str = "
mesh m {
  grid [b = 4];
  threads t = 64;
}
kernel shift(x: gmem<f32[256]>, y: gmem<f32[256]>) {
  let i: u32 = axis_index(b) * 64u + axis_index(t);
  y[i] = x[i + 1u];
}
map shift {
  programs [m: shift];
  inputs [x: gmem<f32[256]>];
  outputs [y: gmem<f32[256]>];
}
";

#[test]
fn checked_mode_reports_out_of_bounds() {
    let mut wgpu = backend(WgpuOptions::default());
    let m = module(OOB);
    let p = plan(&m, "shift");
    let a = args(
        vec![("x", HostTensor::from_f32(vec![256], &[1.0; 256]))],
        vec![],
    );
    let err = wgpu.run(&p, &a, &checked()).unwrap_err();
    let expected = Interpreter::new().run(&p, &a, &checked()).unwrap_err();
    assert_eq!(err, expected);
    let RunError::OutOfBounds {
        site,
        reference,
        index,
        shape,
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(
        (site.program.index(), site.block, site.thread),
        (0, 3, Some(63))
    );
    assert_eq!(
        (reference.as_str(), index.as_str(), shape.as_str()),
        ("x", "[256]", "[256]")
    );
    // Fast mode does not check (and WGSL keeps the access inside the buffer).
    assert!(wgpu.run(&p, &a, &fast()).is_ok());
}

const LONG_LOOP: &str = "
mesh m {
  threads t = 4;
}
kernel spin(y: gmem<u32[4]>, n: u32) {
  var c: u32 = 0u;
  for k: u32 in 0u..n {
    c = c + 1u;
  }
  y[axis_index(t)] = c;
}
map spin {
  programs [m: spin];
  outputs [y: gmem<u32[4]>];
  scalars [n: u32];
}
";

const LONG_UNIFORM_LOOP: &str = "
mesh m {
  threads t = 4;
}
kernel spin(y: gmem<u32[4]>, n: u32, acc: smem<u32[4]>) {
  acc[axis_index(t)] = 0u;
  for k: u32 in 0u..n {
    acc[axis_index(t)] = acc[axis_index(t)] + 1u;
    barrier;
  }
  y[axis_index(t)] = acc[axis_index(t)];
}
map spin {
  programs [m: spin];
  outputs [y: gmem<u32[4]>];
  scalars [n: u32];
  scratch [acc: smem<u32[4]>];
}
";

#[test]
fn loop_cap_is_unsupported_not_a_wrong_answer() {
    // The cap is on by default on llvmpipe; set it explicitly so that the
    // test means the same on any adapter.
    let mut wgpu = backend(WgpuOptions {
        loop_cap: Some(65_000),
        ..Default::default()
    });
    for src in [LONG_LOOP, LONG_UNIFORM_LOOP] {
        let p = plan(&module(src), "spin");
        let ok = wgpu
            .run(
                &p,
                &args(vec![], vec![("n", Literal::U32(60_000))]),
                &fast(),
            )
            .unwrap();
        assert_eq!(ok.outputs["y"].words(), vec![60_000; 4]);
        let err = wgpu
            .run(
                &p,
                &args(vec![], vec![("n", Literal::U32(100_000))]),
                &fast(),
            )
            .unwrap_err();
        let RunError::Unsupported { reason } = &err else {
            panic!("expected unsupported, got {err}")
        };
        assert!(
            reason.contains("need 100001 loop-header visits, more than the 65000"),
            "{reason}"
        );
        assert!(err.to_string().starts_with("not supported on this adapter"));
    }
    let mut default = backend(WgpuOptions::default());
    if default.is_llvmpipe() {
        let p = plan(&module(LONG_LOOP), "spin");
        let err = default
            .run(
                &p,
                &args(vec![], vec![("n", Literal::U32(70_000))]),
                &fast(),
            )
            .unwrap_err();
        assert_eq!(err.class(), Some(ErrorClass::Unsupported), "{err}");
    }
}

#[test]
fn many_blocks_use_a_two_dimensional_dispatch() {
    let src = "
mesh m {
  grid [b = 70000];
  threads t = 2;
}
kernel ids(y: gmem<u32[140000]>) {
  y[axis_index(b) * 2u + axis_index(t)] = axis_index(b);
}
map ids {
  programs [m: ids];
  outputs [y: gmem<u32[140000]> zeroed];
}
";
    let mut wgpu = backend(WgpuOptions::default());
    let p = plan(&module(src), "ids");
    // The block id linearised from a 2-D grid of workgroups (65,535 a row
    // with the default options; the adapter's own limit may differ).
    insta::assert_snapshot!(
        "two_dimensional_entry",
        functions(&mpmd_wgpu::emit(&p, Mode::Fast).unwrap(), &["unit0_ids"])
    );
    let y = wgpu
        .run(&p, &args(vec![], vec![]), &fast())
        .unwrap()
        .outputs["y"]
        .words()
        .to_vec();
    let expected: Vec<u32> = (0..140000u32).map(|k| k / 2).collect();
    assert!(
        y == expected,
        "first difference at {:?}",
        y.iter().zip(&expected).position(|(a, b)| a != b)
    );
}

#[test]
fn packed_bindings_when_the_adapter_has_few() {
    let mut wgpu = backend(WgpuOptions {
        max_storage_buffers: Some(5),
        ..Default::default()
    });
    let m = module(PIPELINE);
    let p = plan(&m, "pipeline");
    let on_adapter = emit_module(&p, &wgpu.plan_emit_options(&p, Mode::Fast)).unwrap();
    assert!(on_adapter.layout.packed);
    let five = EmitOptions {
        max_storage_buffers: 5,
        ..EmitOptions::default()
    };
    insta::assert_snapshot!(
        "packed_declarations",
        declarations(&emit_module(&p, &five).unwrap().wgsl)
    );
    let x: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let a = args(vec![("x", HostTensor::from_f32(vec![256], &x))], vec![]);
    let got = wgpu.run(&p, &a, &fast()).unwrap();
    let expected = Interpreter::new().run(&p, &a, &fast()).unwrap();
    assert_eq!(got, expected);
    // Residents are copied in and out of the arena.
    let m = module(HANDOFF);
    let (send, receive) = (plan(&m, "send"), plan(&m, "receive"));
    let x: Vec<f32> = (0..64).map(|i| i as f32).collect();
    wgpu.run(
        &send,
        &args(vec![("x", HostTensor::from_f32(vec![64], &x))], vec![]),
        &fast(),
    )
    .unwrap();
    let y = wgpu.run(&receive, &args(vec![], vec![]), &fast()).unwrap();
    assert_eq!(y.outputs["y"].to_f32()[3], 26.0);
}

#[test]
fn bad_arguments_are_errors() {
    let mut wgpu = backend(WgpuOptions::default());
    let p = plan(&module(ELEMENTWISE), "saxpy");
    let err = wgpu.run(&p, &args(vec![], vec![]), &fast()).unwrap_err();
    assert_eq!(
        err,
        RunError::BadArguments("missing scalar `alpha` (f32)".into())
    );
    let a = args(
        vec![("x", HostTensor::from_f32(vec![3], &[1.0; 3]))],
        vec![("alpha", Literal::f32(1.0)), ("n", Literal::U32(1))],
    );
    let err = wgpu.run(&p, &a, &fast()).unwrap_err();
    assert_eq!(
        err,
        RunError::BadArguments("input `x` has 3 elements; the map declares 480".into())
    );
    let ints = args(
        vec![("x", HostTensor::from_i32(vec![480], &[1; 480]))],
        vec![("alpha", Literal::f32(1.0)), ("n", Literal::U32(1))],
    );
    let err = wgpu.run(&p, &ints, &fast()).unwrap_err();
    assert_eq!(
        err,
        RunError::BadArguments("input `x` holds `i32` elements; the map declares `f32`".into())
    );
}

/// A resident of another length or element type than the map binds is
/// refused before anything runs, with the message every backend gives
/// (`mpmd_core::host::check_resident`), and is left as it was.
#[test]
fn a_resident_of_another_length_or_type_is_refused_with_the_shared_message() {
    let source = include_str!("../../conformance/cases/resident_input_written_in_place.mpmd");
    let p = plan(&module(source), "accumulate");
    let mut wgpu = backend(WgpuOptions::default());
    let call = args(
        vec![("x", HostTensor::from_i32(vec![64], &[1; 64]))],
        vec![("step", Literal::I32(1))],
    );
    wgpu.set_resident("total", HostTensor::from_i32(vec![3], &[7, 8, 9]))
        .unwrap();
    assert_eq!(
        wgpu.run(&p, &call, &fast()).unwrap_err(),
        RunError::BadArguments(
            "resident `total` holds 3 elements; map `accumulate` declares 64".into()
        )
    );
    assert_eq!(wgpu.resident("total").unwrap().to_i32(), vec![7, 8, 9]);
    wgpu.set_resident("total", HostTensor::from_u32(vec![64], &[1; 64]))
        .unwrap();
    assert_eq!(
        wgpu.run(&p, &call, &fast()).unwrap_err(),
        RunError::BadArguments(
            "resident `total` holds `u32` elements; map `accumulate` declares `i32`".into()
        )
    );
}

/// Semaphore operations between smem accesses: their barriers order the
/// block's own threads, so they stay in the kernel even where the operation
/// itself moves to a semaphore dispatch. The pipeline's tail signal and head
/// wait drop theirs.
const SEM_AS_BARRIER: &str = "
mesh producer {
  grid [pb = 4];
  threads t = 64;
}
mesh consumer {
  grid [cb = 4];
  threads t = 64;
}
kernel produce(x: gmem<f32[256]>, y: gmem<f32[256]>, z: gmem<f32[256]>, buf: gmem<f32[256]>, ready: sem<[4]>, accp: smem<f32[64]> @ producer, accc: smem<f32[64]> @ consumer) {
  let t: u32 = axis_index(t);
  let i: u32 = axis_index(pb) * 64u + t;
  accp[t] = x[i] * 2.0;
  buf[i] = x[i] * 2.0;
  signal(ready[axis_index(pb)], 1);
  z[i] = accp[63u - t];
}
kernel consume(x: gmem<f32[256]>, y: gmem<f32[256]>, z: gmem<f32[256]>, buf: gmem<f32[256]>, ready: sem<[4]>, accp: smem<f32[64]> @ producer, accc: smem<f32[64]> @ consumer) {
  let t: u32 = axis_index(t);
  let i: u32 = axis_index(cb) * 64u + t;
  accc[t] = x[i] + 0.5;
  wait(ready[axis_index(cb)], 1);
  y[i] = buf[i] + accc[63u - t];
}
map pipeline {
  programs [consumer: consume, producer: produce];
  inputs [x: gmem<f32[256]>];
  outputs [y: gmem<f32[256]>, z: gmem<f32[256]>];
  scratch [buf: gmem<f32[256]>, ready: sem<[4]>, accp: smem<f32[64]> @ producer, accc: smem<f32[64]> @ consumer];
}
";

#[test]
fn ordered_semaphores_keep_the_barriers_the_block_can_observe() {
    let m = module(SEM_AS_BARRIER);
    let p = plan(&m, "pipeline");
    let module_in = |mode| {
        let options = EmitOptions {
            mode,
            ..EmitOptions::default()
        };
        emit_module(&p, &options).unwrap()
    };
    // Unit 0 is the producer (topological order), unit 1 the consumer. The
    // semaphore operations themselves run in semaphore dispatches; each
    // kernel keeps the one barrier its block can observe, between its smem
    // accesses.
    let emitted = module_in(Mode::Fast);
    assert_eq!(
        dispatch_order(&emitted),
        ["unit0_produce", "mpmd_sems0", "mpmd_sems1", "unit1_consume"]
    );
    insta::assert_snapshot!(
        "ordered_semaphores_kernels",
        functions(
            &emitted.wgsl,
            &[
                "unit0_produce",
                "unit1_consume",
                "mpmd_unit0_signals",
                "mpmd_unit1_waits"
            ]
        )
    );
    // In checked mode the store before the wait may report out of bounds,
    // which must come first: the wait stays in the kernel, barrier included
    // (and so does the signal, before the producer's checked load).
    let checked = module_in(Mode::Checked);
    assert_eq!(dispatch_order(&checked), ["unit0_produce", "unit1_consume"]);
    insta::assert_snapshot!(
        "ordered_semaphores_checked_consumer",
        functions(&checked.wgsl, &["unit1_consume"])
    );
    // Properties of whole modules, helpers included, which snapshots of
    // their kernels would not show. The plain pipeline: a head wait and a
    // tail signal, no barrier at all.
    let plain = mpmd_wgpu::emit(&plan(&module(PIPELINE), "pipeline"), Mode::Fast).unwrap();
    assert!(!plain.contains("workgroupBarrier();"), "{plain}");
    // A plan that needs co-residency keeps the polling protocol, never a
    // one-look take.
    let cycle = mpmd_wgpu::emit(&plan(&module(CYCLE), "cycle"), Mode::Fast).unwrap();
    assert!(cycle.contains("fn mpmd_wait_"), "{cycle}");
    assert!(!cycle.contains("fn mpmd_take_"), "{cycle}");

    let x: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let a = args(vec![("x", HostTensor::from_f32(vec![256], &x))], vec![]);
    let out = run_and_compare(SEM_AS_BARRIER, "pipeline", &a);
    // Block 1, thread 5: buf = 2 * 69, acc = x[64 + 58] + 0.5.
    assert_eq!(out.outputs["y"].to_f32()[69], 138.0 + 122.5);
    // z[69] = acc[58] of producer block 1 = 2 * x[122].
    assert_eq!(out.outputs["z"].to_f32()[69], 244.0);
}

/// Three producer blocks, four consumer blocks: block 3's count stays short.
/// `ready` is owned by the consumer, so the element names block coordinates.
const SHORT: &str = "
mesh producer {
  grid [pb = 3];
  threads t = 64;
}
mesh consumer {
  grid [cb = 2, cc = 2];
  threads t = 64;
}
kernel give(y: gmem<u32[256]>, ready: sem<[2]> @ consumer) {
  signal(ready@[axis_index(pb) / 2u, axis_index(pb) % 2u][1], 1);
}
kernel take(y: gmem<u32[256]>, ready: sem<[2]> @ consumer) {
  let me: u32 = axis_index(cb) * 2u + axis_index(cc);
  wait(ready[1], 1);
  y[me * 64u + axis_index(t)] = me;
}
map short {
  programs [consumer: take, producer: give];
  outputs [y: gmem<u32[256]>];
  scratch [ready: sem<[2]> @ consumer];
}
";

#[test]
fn a_short_count_of_a_moved_wait_is_a_deadlock_naming_block_and_element() {
    let m = module(SHORT);
    let p = plan(&m, "short");
    let wgsl = mpmd_wgpu::emit(&p, Mode::Fast).unwrap();
    // The wait moves out of the kernel into a one-look take.
    insta::assert_snapshot!(
        "short_count_wait",
        functions(&wgsl, &["unit1_take", "mpmd_unit1_waits"])
    );
    let mut wgpu = backend(WgpuOptions::default());
    for options in [fast(), checked()] {
        let expected = Interpreter::new()
            .run(&p, &args(vec![], vec![]), &options)
            .unwrap_err();
        assert_eq!(expected.class(), Some(ErrorClass::Deadlock));
        assert!(
            expected.to_string().contains(
                "program 0 (take), block 3 waits on `ready@[1, 1][1]` for 1 (count is 0)"
            ),
            "{expected}"
        );
        let err = wgpu.run(&p, &args(vec![], vec![]), &options).unwrap_err();
        assert_eq!(
            err,
            RunError::Deadlock {
                wait_for_graph:
                    "program 0 (take), block 3 waits on `ready@[1, 1][1]`, whose count \
                                 is too low and can no longer grow: every program that signals it \
                                 has finished"
                        .into()
            }
        );
    }
}

/// A moved signal's element out of bounds (checked mode) is reported with
/// the program and block, like the interpreter.
const SIGNAL_OOB: &str = "
mesh producer {
  grid [pb = 4];
  threads t = 32;
}
mesh consumer {
  threads t = 32;
}
kernel give(y: gmem<u32[32]>, ready: sem<[4]>) {
  signal(ready[axis_index(pb) + 1u], 1);
}
kernel take(y: gmem<u32[32]>, ready: sem<[4]>) {
  wait(ready[1], 1);
  y[axis_index(t)] = 5u;
}
map oob {
  programs [producer: give, consumer: take];
  outputs [y: gmem<u32[32]>];
  scratch [ready: sem<[4]>];
}
";

#[test]
fn a_moved_signal_out_of_bounds_is_reported_in_checked_mode() {
    let m = module(SIGNAL_OOB);
    let p = plan(&m, "oob");
    let wgsl = mpmd_wgpu::emit(&p, Mode::Checked).unwrap();
    // The moved signal checks its element.
    insta::assert_snapshot!(
        "moved_signal_checked",
        functions(&wgsl, &["mpmd_unit0_signals"])
    );
    let mut wgpu = backend(WgpuOptions::default());
    let expected = Interpreter::new()
        .run(&p, &args(vec![], vec![]), &checked())
        .unwrap_err();
    let err = wgpu.run(&p, &args(vec![], vec![]), &checked()).unwrap_err();
    assert_eq!(err.class(), expected.class(), "{err} / {expected}");
    let RunError::OutOfBounds {
        site,
        reference,
        index,
        shape,
    } = &err
    else {
        panic!("expected out of bounds, got {err}")
    };
    assert_eq!((site.program.index(), site.block), (0, 3), "{err}");
    assert_eq!(
        (reference.as_str(), index.as_str(), shape.as_str()),
        ("ready", "[4]", "[4]")
    );
}

/// Moved and kept semaphore operations in one plan: `s1` and the resident
/// `credits` move to semaphore dispatches, `s2` (used under an `if`) stays
/// in the kernels. The first program's signals and the second's waits touch
/// different semaphores and share one dispatch.
const MIXED: &str = "
mesh a {
  grid [x = 4];
  threads t = 32;
}
mesh b {
  grid [y = 4];
  threads t = 32;
}
mesh c {
  grid [z = 4];
  threads t = 32;
}
resident credits: sem<[4]>;
kernel fill(credits: sem<[4]>) {
  signal(credits[axis_index(x)], 2);
}
kernel first(inp: gmem<u32[128]>, o: gmem<u32[128]>, q: gmem<u32[128]>, buf: gmem<u32[128]>, s1: sem<[4]>, s2: sem<[4]>, credits: sem<[4]>) {
  let i: u32 = axis_index(x) * 32u + axis_index(t);
  buf[i] = inp[i] + 1u;
  signal(s1[axis_index(x)], 1);
  if axis_index(x) < 2u {
    signal(s2[axis_index(x)], 1);
  }
}
kernel second(inp: gmem<u32[128]>, o: gmem<u32[128]>, q: gmem<u32[128]>, buf: gmem<u32[128]>, s1: sem<[4]>, s2: sem<[4]>, credits: sem<[4]>) {
  wait_nodec(credits[axis_index(y)], 1);
  o[axis_index(y) * 32u + axis_index(t)] = axis_index(y) + 100u;
}
kernel third(inp: gmem<u32[128]>, o: gmem<u32[128]>, q: gmem<u32[128]>, buf: gmem<u32[128]>, s1: sem<[4]>, s2: sem<[4]>, credits: sem<[4]>) {
  wait(s1[axis_index(z)], 1);
  wait(credits[axis_index(z)], 1);
  if axis_index(z) < 2u {
    wait(s2[axis_index(z)], 1);
  }
  let i: u32 = axis_index(z) * 32u + axis_index(t);
  q[i] = buf[i] * 3u;
}
map fill {
  programs [a: fill];
  scratch [credits: sem<[4]> resident];
}
map main {
  programs [a: first, b: second, c: third];
  inputs [inp: gmem<u32[128]>];
  outputs [o: gmem<u32[128]>, q: gmem<u32[128]>];
  scratch [buf: gmem<u32[128]>, s1: sem<[4]>, s2: sem<[4]>, credits: sem<[4]> resident];
}
";

#[test]
fn moved_and_kept_semaphore_operations_in_one_plan() {
    let m = module(MIXED);
    let fill = plan(&m, "fill");
    let main = plan(&m, "main");
    let emitted = mpmd_wgpu::emit_module(&main, &mpmd_wgpu::EmitOptions::default()).unwrap();
    let order: Vec<&str> = emitted
        .schedule
        .iter()
        .map(|d| d.entry_point.as_str())
        .collect();
    assert_eq!(
        order,
        [
            "unit0_first",
            "mpmd_sems0",
            "unit1_second",
            "mpmd_sems1",
            "unit2_third"
        ]
    );
    // `s2` stays in the kernels, `s1` and `credits` move (the waits in
    // program order); the first semaphore dispatch runs the first
    // program's signals, then the second's waits.
    insta::assert_snapshot!(
        "moved_and_kept",
        functions(
            &emitted.wgsl,
            &[
                "unit0_first",
                "unit1_second",
                "unit2_third",
                "mpmd_unit2_waits",
                "mpmd_sems0"
            ]
        )
    );

    let mut wgpu = backend(WgpuOptions::default());
    let mut interp = Interpreter::new();
    let none = args(vec![], vec![]);
    wgpu.run(&fill, &none, &fast()).unwrap();
    interp.run(&fill, &none, &fast()).unwrap();
    let inp: Vec<u32> = (0..128).collect();
    let a = args(vec![("inp", HostTensor::from_u32(vec![128], &inp))], vec![]);
    // Each call takes one credit per element; the resident keeps the count.
    for remaining in [1, 0] {
        let expected = interp.run(&main, &a, &fast()).unwrap();
        let got = wgpu.run(&main, &a, &fast()).unwrap();
        assert_eq!(got, expected);
        assert_eq!(got.outputs["q"].words()[70], 71 * 3);
        assert_eq!(got.outputs["o"].words()[70], 102);
        assert_eq!(
            wgpu.resident("credits").unwrap().words(),
            vec![remaining; 4]
        );
        assert_eq!(wgpu.resident("credits"), interp.resident("credits"));
    }
    // No credits left: the second program's `wait_nodec` can never pass.
    let err = wgpu.run(&main, &a, &fast()).unwrap_err();
    let RunError::Deadlock { wait_for_graph } = &err else {
        panic!("expected a deadlock, got {err}")
    };
    assert!(
        wait_for_graph.starts_with("program 1 (second), block "),
        "{wait_for_graph}"
    );
    assert!(
        wait_for_graph.contains("waits on `credits["),
        "{wait_for_graph}"
    );
    assert_eq!(
        interp.run(&main, &a, &fast()).unwrap_err().class(),
        Some(ErrorClass::Deadlock)
    );
}

/// Four programs of 300 blocks: `a`'s signals and `b`'s waits share one
/// semaphore dispatch (600 invocations, `b`'s blocks from slot 300 on, in
/// the middle of a workgroup).
fn shared_dispatch_source(last_signal: u32) -> String {
    let mesh = |name: &str, axis: &str| {
        format!("mesh {name} {{\n  grid [{axis} = 300];\n  threads t = 32;\n}}\n")
    };
    let params = "y: gmem<u32[9600]>, w: gmem<u32[9600]>, s0: sem<[300]>, s1: sem<[300]>";
    format!(
        "{}{}{}{}
kernel z({params}) {{
  signal(s0[min(axis_index(zb), {last_signal}u)], 1);
}}
kernel a({params}) {{
  signal(s1[axis_index(ab)], 1);
}}
kernel b({params}) {{
  wait(s0[axis_index(bb)], 1);
  y[axis_index(bb) * 32u + axis_index(t)] = axis_index(bb) + 1u;
}}
kernel c({params}) {{
  wait(s1[axis_index(cb)], 1);
  w[axis_index(cb) * 32u + axis_index(t)] = axis_index(cb) + 2u;
}}
map shared {{
  programs [mz: z, ma: a, mb: b, mc: c];
  outputs [y: gmem<u32[9600]>, w: gmem<u32[9600]>];
  scratch [s0: sem<[300]>, s1: sem<[300]>];
}}
",
        mesh("mz", "zb"),
        mesh("ma", "ab"),
        mesh("mb", "bb"),
        mesh("mc", "cb")
    )
}

#[test]
fn signals_and_waits_of_different_semaphores_share_a_dispatch() {
    let src = shared_dispatch_source(299);
    let p = plan(&module(&src), "shared");
    let emitted = mpmd_wgpu::emit_module(&p, &mpmd_wgpu::EmitOptions::default()).unwrap();
    let order: Vec<(&str, [u32; 3])> = emitted
        .schedule
        .iter()
        .map(|d| (d.entry_point.as_str(), d.workgroups))
        .collect();
    assert_eq!(
        order,
        [
            ("unit0_z", [300, 1, 1]),
            ("mpmd_sems0", [2, 1, 1]),
            ("unit1_a", [300, 1, 1]),
            ("mpmd_sems1", [3, 1, 1]),
            ("unit2_b", [300, 1, 1]),
            ("mpmd_sems2", [2, 1, 1]),
            ("unit3_c", [300, 1, 1]),
        ]
    );
    // `b`'s blocks from slot 300 on.
    insta::assert_snapshot!(
        "shared_semaphore_dispatch",
        functions(&emitted.wgsl, &["mpmd_sems1"])
    );
    let mut wgpu = backend(WgpuOptions::default());
    let out = assert_same(&mut wgpu, &module(&src), "shared", &args(vec![], vec![]));
    assert_eq!(out.outputs["y"].words()[299 * 32], 300);
    assert_eq!(out.outputs["w"].words()[299 * 32 + 5], 301);

    // Block 299 of `b` (slot 599 of the shared dispatch) finds its count short.
    let short = shared_dispatch_source(298);
    let p = plan(&module(&short), "shared");
    let err = wgpu.run(&p, &args(vec![], vec![]), &fast()).unwrap_err();
    assert_eq!(
        err,
        RunError::Deadlock {
            wait_for_graph: "program 2 (b), block 299 waits on `s0[299]`, whose count is too low \
                             and can no longer grow: every program that signals it has finished"
                .into()
        }
    );
    assert_eq!(
        Interpreter::new()
            .run(&p, &args(vec![], vec![]), &fast())
            .unwrap_err()
            .class(),
        Some(ErrorClass::Deadlock)
    );
}
