//! Block collectives in WGSL: votes count in an atomic workgroup variable
//! and every result reaches the workgroup through `workgroupUniformLoad`,
//! so naga's uniformity analysis accepts a barrier under a condition on one
//! (the language's promise). The two workgroup words are counted in the
//! backend's own workgroup bytes; the extra invocations of a fused
//! workgroup do not vote; a broadcast source past the block is reported in
//! checked mode as the interpreter reports it.

mod common;

use common::*;
use mpmd_core::backend::{Backend, Mode, RunError};
use mpmd_core::host::HostTensor;
use mpmd_wgpu::{emit_module, own_workgroup_bytes, validate_wgsl, EmitOptions, WgpuOptions};

fn corpus(name: &str) -> String {
    let path = format!(
        "{}/../conformance/cases/{name}.mpmd",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const CASES: [(&str, &str); 4] = [
    ("block_votes_any_all_count", "votes"),
    ("block_broadcast_every_type", "bcast"),
    ("block_persistent_work_queue", "persist"),
    ("block_persistent_queue_smem", "persist"),
];

#[test]
fn every_case_validates_in_every_mode_with_uniform_loads() {
    for (name, map) in CASES {
        let p = plan(&module(&corpus(name)), map);
        for mode in [Mode::Fast, Mode::Checked] {
            for loop_cap in [None, Some(65_000)] {
                let options = EmitOptions {
                    mode,
                    loop_cap,
                    ..EmitOptions::default()
                };
                let emitted = emit_module(&p, &options).unwrap();
                validate_wgsl(&emitted.wgsl).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(emitted
                    .wgsl
                    .contains("workgroupUniformLoad(&mpmd_block_word)"));
                assert!(emitted
                    .wgsl
                    .contains("var<workgroup> mpmd_block_votes: atomic<u32>;"));
            }
        }
    }
}

#[test]
fn the_block_collective_words_count_in_the_backends_workgroup_bytes() {
    let with = plan(&module(&corpus("block_persistent_work_queue")), "persist");
    let without = plan(
        &module(&corpus("block_persistent_work_queue").replace(
            "let tile: u32 = block_broadcast(got, 0u);",
            "let tile: u32 = 0u * got + 40u;",
        )),
        "persist",
    );
    let options = EmitOptions::default();
    let unit = Some(mpmd_core::plan::UnitId::new(0));
    assert_eq!(
        own_workgroup_bytes(&with, &options, unit),
        own_workgroup_bytes(&without, &options, unit) + 8
    );
    assert!(!emit_module(&without, &options)
        .unwrap()
        .wgsl
        .contains("mpmd_block_word"));
}

/// `ping` (64 invocations) and `pong` (32) wait on each other: one fused
/// dispatch whose `pong` workgroups have 32 idle invocations, which must not
/// vote (`block_all` would see 64 votes of 32 threads, `block_count` too).
const FUSED: &str = "
mesh ping {
  grid [pb = 1];
  threads pt = 64;
}

mesh pong {
  grid [qb = 1];
  threads qt = 32;
}

kernel ping(x: gmem<u32[64]>, y: gmem<u32[128]>, to_pong: sem<[1]>, to_ping: sem<[1]>) {
  let i: u32 = axis_index(pt);
  signal(to_pong[0u], 1);
  wait(to_ping[0u], 1);
  let n: u32 = block_count(x[i] > 0u);
  y[64u + i] = n;
}

kernel pong(x: gmem<u32[64]>, y: gmem<u32[128]>, to_pong: sem<[1]>, to_ping: sem<[1]>) {
  let i: u32 = axis_index(qt);
  wait(to_pong[0u], 1);
  let every: bool = block_all(x[i] < 1000u);
  let n: u32 = block_count(x[i] > 0u);
  let first: u32 = block_broadcast(x[i], 31u);
  y[i] = select(every, n, 7777u);
  y[32u + i] = first;
  signal(to_ping[0u], 1);
}

map fused {
  programs [ping: ping, pong: pong];
  inputs [x: gmem<u32[64]>];
  outputs [y: gmem<u32[128]>];
  scratch [to_pong: sem<[1]>, to_ping: sem<[1]>];
}
";

#[test]
fn idle_invocations_of_a_fused_workgroup_do_not_vote() {
    let mut wgpu = backend(WgpuOptions {
        co_resident: true,
        ..Default::default()
    });
    let m = module(FUSED);
    let p = plan(&m, "fused");
    assert!(p.graph.has_cycle);
    let x: Vec<u32> = (0..64).map(|i| i * 3).collect();
    let call = args(vec![("x", HostTensor::from_u32(vec![64], &x))], vec![]);
    let out = assert_same(&mut wgpu, &m, "fused", &call);
    let y = out.outputs["y"].to_u32();
    // pong: 32 threads, all below 1000, 31 of them positive; ping: 63 of 64.
    assert_eq!(&y[..32], &[31; 32]);
    assert_eq!(&y[32..64], &[93; 32]);
    assert_eq!(&y[64..], &[63; 64]);
}

#[test]
fn a_broadcast_source_past_the_block_is_reported_in_checked_mode() {
    let mut wgpu = backend(WgpuOptions::default());
    let m = module(&corpus("fail_block_broadcast_source_out_of_range"));
    let p = plan(&m, "k");
    let x: Vec<u32> = (0..64).collect();
    let call = args(
        vec![("x", HostTensor::from_u32(vec![64], &x))],
        vec![("src", mpmd_core::ir::Literal::U32(64))],
    );
    let err = wgpu.run(&p, &call, &checked()).unwrap_err();
    assert!(matches!(err, RunError::OutOfBounds { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "out-of-bounds access at program 0 (k), block 0, thread 0: `block_broadcast source thread` index [64] (shape [64])"
    );
    // In range: every thread gets thread 63's value.
    let call = args(
        vec![("x", HostTensor::from_u32(vec![64], &x))],
        vec![("src", mpmd_core::ir::Literal::U32(63))],
    );
    let out = wgpu.run(&p, &call, &checked()).unwrap();
    assert_eq!(out.outputs["y"].to_u32(), vec![63; 64]);
}
