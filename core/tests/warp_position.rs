//! `lane_id()` and `warp_id()`: their values, their uniformity (warp_id is
//! warp-uniform, not block-uniform; lane_id is neither), their expansion
//! (`expand::program_kernel`), the text form and E0076.

#![allow(clippy::result_large_err)]

mod common;
use common::{module, one};
use mpmd_core::backend::Mode;
use mpmd_core::ir::{BinaryOp, Expr, Literal, Stmt};
use mpmd_core::text::print;
use mpmd_core::validate::{validate, ValidateOptions};

const POSITIONS: &str = "
mesh m {
  grid [b = 2];
  threads t = 96;
}

kernel k(lanes: gmem<u32[192]>, warps: gmem<u32[192]>, sums: gmem<u32[6]>) {
  let i: u32 = axis_index(b) * 96u + axis_index(t);
  lanes[i] = lane_id();
  warps[i] = warp_id();
  if warp_id() == 1u {
    let s: u32 = reduce_add(lane_id());
    if lane_id() == 0u {
      sums[axis_index(b) * 3u + warp_id()] = s;
    }
  } else {
    if lane_id() == 0u {
      sums[axis_index(b) * 3u + warp_id()] = 0u;
    }
  }
}

map positions {
  programs [m: k];
  outputs [lanes: gmem<u32[192]>, warps: gmem<u32[192]>, sums: gmem<u32[6]>];
}
";

#[test]
fn lane_and_warp_ids_are_the_linear_thread_index_mod_and_div_32() {
    let m = module(POSITIONS);
    validate(&m, &ValidateOptions::default()).expect("valid");
    for mode in [Mode::Fast, Mode::Checked] {
        let out = common::run_with_schedules(&m, "positions", &[], mode, 2).unwrap();
        let lanes: Vec<u32> = (0..192).map(|i| (i % 96) % 32).collect();
        let warps: Vec<u32> = (0..192).map(|i| (i % 96) / 32).collect();
        assert_eq!(out.outputs["lanes"].to_u32(), lanes);
        assert_eq!(out.outputs["warps"].to_u32(), warps);
        // Warp 1 of each block sums its lanes 0..31: 496.
        assert_eq!(out.outputs["sums"].to_u32(), [0, 496, 0, 0, 496, 0]);
    }
}

#[test]
fn lane_and_warp_ids_expand_to_the_thread_axis_and_print_as_written() {
    let m = module(POSITIONS);
    let text = print(&m);
    assert!(text.contains("lanes[i] = lane_id();"), "{text}");
    assert!(text.contains("if warp_id() == 1u {"), "{text}");
    assert_eq!(module(&text), m);
    let kernel = expanded(&m);
    let expansion = |op| {
        Expr::Binary(
            op,
            Box::new(Expr::AxisIndex("t".into())),
            Box::new(Expr::Lit(Literal::U32(32))),
        )
    };
    let Stmt::Store { value, .. } = &kernel.body[1] else {
        panic!("the second statement stores lanes");
    };
    assert_eq!(*value, expansion(BinaryOp::Rem));
    let Stmt::Store { value, .. } = &kernel.body[2] else {
        panic!("the third statement stores warps");
    };
    assert_eq!(*value, expansion(BinaryOp::Div));
}

const BODY: &str = "
mesh m {
  threads t = 64;
}
kernel k(y: gmem<u32[64]>) {
  BODY
}
map m1 {
  programs [m: k];
  outputs [y: gmem<u32[64]>];
}
";

#[test]
fn warp_id_is_warp_uniform_but_not_block_uniform_and_lane_id_is_neither() {
    let d = one(&BODY.replace(
        "BODY",
        "if lane_id() < 16u {\n    let s: u32 = reduce_add(1u);\n    y[lane_id()] = s;\n  }",
    ));
    assert_eq!(d.code, "E0068");
    assert!(
        d.message
            .contains("`lane_id()` differs between the lanes of a warp"),
        "{}",
        d.message
    );
    let d = one(&BODY.replace(
        "BODY",
        "if warp_id() == 0u {\n    barrier;\n  }\n  y[axis_index(t)] = 1u;",
    ));
    assert_eq!(d.code, "E0053");
    assert!(
        d.message
            .contains("`warp_id()` differs between the warps of a block"),
        "{}",
        d.message
    );
    let d = one(&BODY.replace(
        "BODY",
        "for j: u32 in 0u..warp_id() {\n    y[axis_index(t)] = j;\n  }",
    ));
    assert_eq!(d.code, "E0045");
}

#[test]
fn a_kernel_with_warp_positions_needs_one_thread_axis_name() {
    let src = "
mesh a {
  threads t = 64;
}
mesh b {
  threads u = 64;
}
kernel k(y: gmem<u32[64]>, z: gmem<u32[64]>) {
  y[lane_id()] = warp_id();
}
map m1 {
  programs [a: k, b: k];
  outputs [y: gmem<u32[64]>, z: gmem<u32[64]>];
}
";
    let d = one(src);
    assert_eq!(d.code, "E0076");
    assert_eq!(
        d.message,
        "kernel `k` uses `lane_id()`, `warp_id()` or a thread axis and runs on meshes whose thread axes differ (`t` and `u`); give them one form"
    );
    let m = module(&src.replace("threads u = 64", "threads t = 64"));
    validate(&m, &ValidateOptions::default()).expect("valid");
}

/// The kernel the first map's first program runs, as validation expanded
/// it: what the interpreter and the backends receive.
fn expanded(m: &mpmd_core::ir::Module) -> mpmd_core::ir::Kernel {
    let valid = validate(m, &ValidateOptions::default()).expect("valid");
    valid.valid_maps()[0].programs()[0].kernel().clone()
}
