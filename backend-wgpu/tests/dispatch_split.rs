//! Programs whose blocks wait on their own program's signals, in a plan
//! without a cycle, run one dispatch per block in linear block order
//! (`Dispatch::repeat`), verified, without co-residency.

mod common;

use common::*;
use mpmd_core::backend::{Backend, RunError};
use mpmd_core::host::HostTensor;
use mpmd_core::plan::UnitId;
use mpmd_wgpu::{emit_module, EmitError, EmitOptions, WgpuOptions};
use mpmd_wgpu::{Dispatch, MAX_SPLIT_DISPATCHES};

fn chained_scan() -> mpmd_core::ir::Module {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/chained_scan.mpmd");
    module(&std::fs::read_to_string(path).unwrap())
}

#[test]
fn chained_scan_runs_verified_with_the_interpreters_results() {
    let mut wgpu = backend(WgpuOptions::default());
    let m = chained_scan();
    let p = plan(&m, "chained_scan");
    assert!(p.needs_co_residency() && !p.graph.has_cycle);
    let x = HostTensor::from_i32(vec![128], &(0..128).collect::<Vec<i32>>());
    let out = assert_same(&mut wgpu, &m, "chained_scan", &args(vec![("x", x)], vec![]));
    assert_eq!(out.outputs["prefix"].to_i32(), vec![496, 2016, 4560, 8128]);
    assert!(!wgpu.unverified(&p));
    // Declared co-resident, the same plan is one fused polling dispatch:
    // unverified unless the backend established its 4 workgroups too.
    let co = backend(WgpuOptions {
        co_resident: true,
        ..Default::default()
    });
    assert_eq!(co.unverified(&p), co.resident_workgroups() < 4);
}

#[test]
fn the_schedule_states_one_dispatch_per_block() {
    let p = plan(&chained_scan(), "chained_scan");
    let emitted = emit_module(&p, &EmitOptions::default()).unwrap();
    assert_eq!(
        emitted.schedule,
        vec![Dispatch {
            entry_point: "unit0_scan".into(),
            workgroups: [1, 1, 1],
            unit: Some(UnitId::new(0)),
            repeat: 4,
        }]
    );
    // The schedule comment, and the entry point that takes its block from the ticket.
    insta::assert_snapshot!("chained_scan_schedule", header(&emitted.wgsl));
    insta::assert_snapshot!(
        "chained_scan_split_entry",
        functions(&emitted.wgsl, &["unit0_scan"])
    );
    // The protocol, anywhere in the module (helpers included): no polling
    // wait, every wait looks once. A check of its own, because a snapshot
    // of the entry does not show the helpers.
    assert!(!emitted.wgsl.contains("fn mpmd_wait_"), "{}", emitted.wgsl);
    // Declared co-resident: one dispatch of 4 workgroups.
    let co = emit_module(
        &p,
        &EmitOptions {
            co_resident: true,
            ..EmitOptions::default()
        },
    )
    .unwrap();
    assert_eq!(co.schedule[0].workgroups, [4, 1, 1]);
    assert_eq!(co.schedule[0].repeat, 1);
}

/// Two programs, each passing a token through its blocks in order: every
/// block appends its id to the program's log and hands the token on. The
/// second program's blocks take tickets after the first program's.
const TOKENS: &str = "
mesh ring {
  grid [b = 6];
  threads t = 32;
}
mesh ring2 {
  grid [c = 3];
  threads u = 16;
}
kernel pass(log: gmem<u32[6]>, pos: gmem<u32[1]>, log2: gmem<u32[3]>, pos2: gmem<u32[1]>, tok: sem<[1]> @ ring, tok2: sem<[1]> @ ring2) {
  let b: u32 = axis_index(b);
  if b > 0u {
    wait(tok[0u], 1);
  }
  if axis_index(t) == 0u {
    let p: u32 = pos[0u];
    log[p] = b * 10u + p;
    pos[0u] = p + 1u;
  }
  if b < 5u {
    signal(tok@[b + 1u][0u], 1);
  }
}
kernel pass2(log: gmem<u32[6]>, pos: gmem<u32[1]>, log2: gmem<u32[3]>, pos2: gmem<u32[1]>, tok: sem<[1]> @ ring, tok2: sem<[1]> @ ring2) {
  let c: u32 = axis_index(c);
  if c > 0u {
    wait(tok2[0u], 1);
  }
  if axis_index(u) == 0u {
    let p: u32 = pos2[0u];
    log2[p] = c * 100u + p;
    pos2[0u] = p + 1u;
  }
  if c < 2u {
    signal(tok2@[c + 1u][0u], 1);
  }
}
map tokens {
  programs [ring: pass, ring2: pass2];
  outputs [log: gmem<u32[6]> zeroed, pos: gmem<u32[1]> zeroed, log2: gmem<u32[3]> zeroed, pos2: gmem<u32[1]> zeroed];
  scratch [tok: sem<[1]> @ ring, tok2: sem<[1]> @ ring2];
}
";

#[test]
fn a_token_passes_through_every_block_in_order() {
    let mut wgpu = backend(WgpuOptions::default());
    let m = module(TOKENS);
    let out = assert_same(&mut wgpu, &m, "tokens", &args(vec![], vec![]));
    assert_eq!(out.outputs["log"].to_u32(), vec![0, 11, 22, 33, 44, 55]);
    assert_eq!(out.outputs["pos"].to_u32(), vec![6]);
    assert_eq!(out.outputs["log2"].to_u32(), vec![0, 101, 202]);
    assert_eq!(out.outputs["pos2"].to_u32(), vec![3]);
    let p = plan(&m, "tokens");
    assert!(!wgpu.unverified(&p));
    let emitted = emit_module(&p, &EmitOptions::default()).unwrap();
    let repeats: Vec<u32> = emitted.schedule.iter().map(|d| d.repeat).collect();
    assert_eq!(repeats, vec![6, 3]);
    // The second program's blocks are the tickets after the first's 6.
    insta::assert_snapshot!(
        "tokens_second_split_entry",
        functions(&emitted.wgsl, &["unit1_pass2"])
    );
    // A second call starts its tickets again.
    let again = wgpu.run(&p, &args(vec![], vec![]), &fast()).unwrap();
    assert_eq!(again, out);
}

/// Block b waits for block b + 1: no order of dispatches carries it.
const BACKWARDS: &str = "
mesh m {
  grid [b = 4];
  threads t = 32;
}
kernel back(o: gmem<u32[4]>, turn: sem<[1]> @ m) {
  let b: u32 = axis_index(b);
  if b < 3u {
    wait(turn[0u], 1);
  }
  if axis_index(t) == 0u {
    o[b] = b + 1u;
  }
  if b > 0u {
    signal(turn@[b - 1u][0u], 1);
  }
}
map backwards {
  programs [m: back];
  outputs [o: gmem<u32[4]>];
  scratch [turn: sem<[1]> @ m];
}
";

#[test]
fn a_block_that_waits_on_a_higher_block_is_unsupported() {
    let mut wgpu = backend(WgpuOptions::default());
    let m = module(BACKWARDS);
    let (expected, got) = run_both(&mut wgpu, &m, "backwards", &args(vec![], vec![]), &fast());
    assert_eq!(expected.unwrap().outputs["o"].to_u32(), vec![1, 2, 3, 4]);
    let residency = wgpu.residency();
    if residency.workgroups >= 4 {
        // Established: one fused dispatch, where waits on higher blocks are met.
        assert_eq!(got.unwrap().outputs["o"].to_u32(), vec![1, 2, 3, 4]);
        return;
    }
    let err = got.unwrap_err();
    let RunError::Unsupported { reason } = &err else {
        panic!("expected unsupported, got {err}")
    };
    assert_eq!(
        reason,
        &format!(
        "program 0 (back), block 0 waits on `turn@[0][0]`, which its own program signals, and the \
         count was short when it ran: it waits on a block that has not run before it (or on a \
         signal that never comes). Without co-residency this backend runs the program's blocks one \
         dispatch each in linear block order, so a block may only wait on blocks with a lower \
         linear id; no order of dispatches carries this wait. Otherwise the program must run as \
         one fused dispatch, which needs 4 workgroup(s) running at once; the backend established {} \
         on this adapter ({}). Set WgpuOptions::co_resident if this adapter runs them all at once \
         (the result is then unverified){}",
        residency.workgroups,
        residency.how,
        if wgpu.is_llvmpipe() {
            "; on lavapipe, LP_NUM_THREADS=4 or more (set before the process opens the adapter) \
             lets the backend establish it, and the result is verified"
        } else {
            ""
        }
        )
    );
}

fn long_chain(blocks: u64) -> String {
    format!(
        "mesh m {{\n  grid [b = {blocks}];\n  threads t = 1;\n}}\n\
         kernel k(o: gmem<u32[1]>, turn: sem<[1]> @ m) {{\n  let b: u32 = axis_index(b);\n  \
         if b > 0u {{\n    wait(turn[0u], 1);\n  }}\n  if b < {last}u {{\n    signal(turn@[b + 1u][0u], 1);\n  }}\n}}\n\
         map chain {{\n  programs [m: k];\n  outputs [o: gmem<u32[1]>];\n  scratch [turn: sem<[1]> @ m];\n}}\n",
        last = blocks - 1
    )
}

#[test]
fn more_split_dispatches_than_the_limit_are_refused() {
    assert_eq!(MAX_SPLIT_DISPATCHES, 65_536);
    let fits = plan(&module(&long_chain(65_536)), "chain");
    let emitted = emit_module(&fits, &EmitOptions::default()).unwrap();
    assert_eq!(emitted.schedule[0].repeat, 65_536);
    let p = plan(&module(&long_chain(65_537)), "chain");
    let expected = "program 0 (`k`, 65537 blocks) wait on their own signals, so their blocks run \
                    one per dispatch in linear block order (after one dispatch of the leading blocks \
                    that wait on nothing, where there are two or more): 65537 dispatches, more than \
                    the 65536 one call may make";
    let err = emit_module(&p, &EmitOptions::default()).unwrap_err();
    assert!(matches!(err, EmitError::TooManyDispatches { .. }));
    assert_eq!(err.to_string(), expected);
    let mut wgpu = backend(WgpuOptions::default());
    match wgpu.run(&p, &args(vec![], vec![]), &fast()) {
        Err(RunError::Refused { reason }) => assert_eq!(reason, expected),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Blocks 0 to 6 each sum a part and signal block 7, which waits for all
/// seven and adds the parts up: the "last block finalizes" pattern.
const FINALIZE: &str = "
mesh m {
  grid [b = 8];
  threads t = 32;
}
kernel parts(x: gmem<u32[256]>, total: gmem<u32[1]>, part: gmem<u32[8]>, done: sem<[1]> @ m) {
  let b: u32 = axis_index(b);
  if axis_index(t) == 0u {
    var s: u32 = 0u;
    for k: u32 in 0u..32u {
      s = s + x[b * 32u + k];
    }
    part[b] = s;
  }
  if b < 7u {
    signal(done@[7u][0u], 1);
  } else {
    wait(done[0u], 7);
    if axis_index(t) == 0u {
      var sum: u32 = 0u;
      for j: u32 in 0u..8u {
        sum = sum + part[j];
      }
      total[0u] = sum;
    }
  }
}
map finalize {
  programs [m: parts];
  inputs [x: gmem<u32[256]>];
  outputs [total: gmem<u32[1]>];
  scratch [part: gmem<u32[8]>, done: sem<[1]> @ m];
}
";

#[test]
fn leading_blocks_that_wait_on_nothing_share_the_first_dispatch() {
    let m = module(FINALIZE);
    let p = plan(&m, "finalize");
    let emitted = emit_module(&p, &EmitOptions::default()).unwrap();
    // Blocks 0 to 6 reach no wait: one dispatch of 7 workgroups, then block 7.
    assert_eq!(
        emitted.schedule,
        vec![
            Dispatch {
                entry_point: "unit0_parts".into(),
                workgroups: [7, 1, 1],
                unit: Some(UnitId::new(0)),
                repeat: 1,
            },
            Dispatch {
                entry_point: "unit0_parts".into(),
                workgroups: [1, 1, 1],
                unit: Some(UnitId::new(0)),
                repeat: 1,
            },
        ]
    );
    insta::assert_snapshot!("finalize_schedule", header(&emitted.wgsl));
    // A wait inside a `while` counts too: block 7 stays out of the wave.
    let in_loop = FINALIZE.replace(
        "    wait(done[0u], 7);\n",
        "    var tries: u32 = 0u;\n    while tries < 1u max 1u {\n      wait(done[0u], 7);\n      tries += 1u;\n    }\n",
    );
    assert_ne!(in_loop, FINALIZE);
    let looped = emit_module(
        &plan(&module(&in_loop), "finalize"),
        &EmitOptions::default(),
    )
    .unwrap();
    assert_eq!(looped.schedule, emitted.schedule);
    // The chained scan's block 0 alone waits on nothing: no wave.
    let chain = emit_module(
        &plan(&chained_scan(), "chained_scan"),
        &EmitOptions::default(),
    )
    .unwrap();
    assert_eq!(chain.schedule.len(), 1);
    assert_eq!(chain.schedule[0].repeat, 4);

    let mut wgpu = backend(WgpuOptions::default());
    let x: Vec<u32> = (0..256).map(|i| i * 3 + 1).collect();
    let call = args(vec![("x", HostTensor::from_u32(vec![256], &x))], vec![]);
    let out = assert_same(&mut wgpu, &m, "finalize", &call);
    assert_eq!(out.outputs["total"].to_u32(), vec![x.iter().sum::<u32>()]);
    assert!(!wgpu.unverified(&p));
}
