//! Blocks of several thread axes (`threads [tx = 32, ty = 2]`): the text
//! form, the linear order (the first axis fastest) that warps follow,
//! uniformity (a thread axis whose stride is a multiple of 32 is
//! warp-uniform, never block-uniform), the expansion and E0078.

#![allow(clippy::result_large_err)]

mod common;
use common::{codes, found, module};
use mpmd_core::backend::Mode;
use mpmd_core::ir::{Axis, BinaryOp, Expr, Literal, Stmt, LINEAR_THREADS};
use mpmd_core::text::print;
use mpmd_core::validate::{validate, ValidateOptions};

const TWO_AXES: &str = "
mesh m {
  threads [tx = 32, ty = 3];
}

kernel k(y: gmem<u32[96]>, s: gmem<u32[3]>) {
  let i: u32 = axis_index(ty) * 32u + axis_index(tx);
  y[i] = axis_index(tx) * 100u + axis_index(ty) * 10u + axis_size(ty);
  if axis_index(ty) == 1u {
    let total: u32 = reduce_add(axis_index(tx));
    if lane_id() == 0u {
      s[warp_id()] = total;
    }
  } else {
    if axis_index(tx) == 0u {
      s[axis_index(ty)] = warp_id() * 1000u;
    }
  }
}

map two {
  programs [m: k];
  outputs [y: gmem<u32[96]>, s: gmem<u32[3]>];
}
";

#[test]
fn thread_axes_are_linear_with_the_first_fastest_and_warps_follow() {
    let m = module(TWO_AXES);
    validate(&m, &ValidateOptions::default()).expect("valid");
    assert_eq!(
        m.meshes[0].threads,
        Axis {
            name: LINEAR_THREADS.into(),
            size: 96
        }
    );
    for mode in [Mode::Fast, Mode::Checked] {
        let out = common::run_with_schedules(&m, "two", &[], mode, 2).unwrap();
        let y: Vec<u32> = (0..96)
            .map(|i| (i % 32) * 100 + (i / 32) * 10 + 3)
            .collect();
        assert_eq!(out.outputs["y"].to_u32(), y);
        // Warp 1 is ty = 1: lanes 0..31 are tx = 0..31, summing to 496.
        assert_eq!(out.outputs["s"].to_u32(), [0, 496, 2000]);
    }
}

#[test]
fn thread_axes_print_as_written_and_expand_to_linear_arithmetic() {
    let m = module(TWO_AXES);
    let text = print(&m);
    assert!(text.contains("  threads [tx = 32, ty = 3];\n"), "{text}");
    assert_eq!(module(&text), m);
    let kernel = expanded(&m);
    let Stmt::Let { value, .. } = &kernel.body[0] else {
        panic!("a let");
    };
    let linear = || Box::new(Expr::AxisIndex(LINEAR_THREADS.into()));
    let lit = |v| Box::new(Expr::Lit(Literal::U32(v)));
    // ty (the last axis): linear / 32; tx (the first): linear % 32.
    assert_eq!(
        *value,
        Expr::Binary(
            BinaryOp::Add,
            Box::new(Expr::Binary(
                BinaryOp::Mul,
                Box::new(Expr::Binary(BinaryOp::Div, linear(), lit(32))),
                lit(32)
            )),
            Box::new(Expr::Binary(BinaryOp::Rem, linear(), lit(32))),
        )
    );
}

fn with_body(threads: &str, body: &str) -> String {
    format!(
        "
mesh m {{
  threads {threads};
}}
kernel k(y: gmem<u32[64]>) {{
  {body}
  y[0u] = 0u;
}}
map m1 {{
  programs [m: k];
  outputs [y: gmem<u32[64]>];
}}
"
    )
}

#[test]
fn a_thread_axis_is_warp_uniform_only_when_its_stride_is_a_multiple_of_32() {
    let collective = "if axis_index(ty) == 0u {\n    let v: u32 = reduce_add(1u);\n  }";
    assert_eq!(
        codes(&with_body("[tx = 32, ty = 2]", collective)),
        Vec::<&str>::new()
    );
    assert_eq!(
        codes(&with_body("[tx = 16, ty = 4]", collective)),
        ["E0068"]
    );
    // Never block-uniform.
    let barrier = "if axis_index(ty) == 0u {\n    barrier;\n  }";
    assert_eq!(codes(&with_body("[tx = 32, ty = 2]", barrier)), ["E0053"]);
    let bound = "for j: u32 in 0u..axis_index(ty) {\n    y[j] = j;\n  }";
    assert_eq!(codes(&with_body("[tx = 32, ty = 2]", bound)), ["E0045"]);
}

#[test]
fn thread_axes_are_checked() {
    assert_eq!(codes(&with_body("[tx = 64, ty = 32]", "")), ["E0010"]);
    assert_eq!(codes(&with_body("[tx = 32, tx = 2]", "")), ["E0012"]);
    let mut m = module(&with_body("[tx = 32, ty = 2]", ""));
    m.meshes[0].threads.size = 32;
    let diagnostics = validate(&m, &ValidateOptions::default()).unwrap_err();
    assert_eq!(
        (diagnostics[0].code, diagnostics[0].message.as_str()),
        (
            "E0078",
            "mesh `m` has the linear thread axis `threads` of 32 threads, not `threads` of the thread axes' product"
        )
    );
    assert_eq!(
        found(&with_body("[tx = 32, ty = 2, tz = 1, tw = 1]", "")),
        [(
            "E0078",
            "mesh `m` has 4 thread axes; at most 3 are allowed".to_string()
        )]
    );
}

/// The kernel the first map's first program runs, as validation expanded
/// it: what the interpreter and the backends receive.
fn expanded(m: &mpmd_core::ir::Module) -> mpmd_core::ir::Kernel {
    let valid = validate(m, &ValidateOptions::default()).expect("valid");
    valid.valid_maps()[0].programs()[0].kernel().clone()
}
