//! The bit operations `popcount`, `clz`, `ffs` and `brev` (docs/text-format.md,
//! "Bit operations"): exact values on the interpreter for the edge words,
//! their types, constant folding, and the text form.

#![allow(clippy::result_large_err)]

mod common;
use common::{module, one};
use mpmd_core::backend::Mode;
use mpmd_core::text::print;
use mpmd_core::validate::{validate, ValidateOptions};
use mpmd_core::HostTensor;

const BITS: &str = "
mesh m {
  threads t = 32;
}

kernel k(x: gmem<u32[8]>, y: gmem<i32[8]>, pu: gmem<u32[8]>, cu: gmem<u32[8]>, fu: gmem<u32[8]>, ru: gmem<u32[8]>, pi: gmem<i32[8]>, ci: gmem<i32[8]>, fi: gmem<i32[8]>, ri: gmem<i32[8]>) {
  let i: u32 = axis_index(t);
  if i < 8u {
    pu[i] = popcount(x[i]);
    cu[i] = clz(x[i]);
    fu[i] = ffs(x[i]);
    ru[i] = brev(x[i]);
    pi[i] = popcount(y[i]);
    ci[i] = clz(y[i]);
    fi[i] = ffs(y[i]);
    ri[i] = brev(y[i]);
  }
}

map bits {
  programs [m: k];
  inputs [x: gmem<u32[8]>, y: gmem<i32[8]>];
  outputs [pu: gmem<u32[8]>, cu: gmem<u32[8]>, fu: gmem<u32[8]>, ru: gmem<u32[8]>, pi: gmem<i32[8]>, ci: gmem<i32[8]>, fi: gmem<i32[8]>, ri: gmem<i32[8]>];
}
";

#[test]
fn bit_operations_compute_cuda_semantics_on_u32_and_i32() {
    let m = module(BITS);
    validate(&m, &ValidateOptions::default()).expect("valid");
    let words: [u32; 8] = [
        0,
        1,
        0xF0,
        0x8000_0000,
        0xFFFF_FFFF,
        12,
        0x0001_0000,
        0x1234_5678,
    ];
    let signed: Vec<i32> = words.iter().map(|&w| w as i32).collect();
    for mode in [Mode::Fast, Mode::Checked] {
        let out = common::run_with_schedules(
            &m,
            "bits",
            &[
                ("x", HostTensor::from_u32(vec![8], &words)),
                ("y", HostTensor::from_i32(vec![8], &signed)),
            ],
            mode,
            2,
        )
        .unwrap();
        let popcount = [0, 1, 4, 1, 32, 2, 1, 13];
        let clz = [32, 31, 24, 0, 0, 28, 15, 3];
        // 1-based, 0 for 0 (CUDA's __ffs).
        let ffs = [0, 1, 5, 32, 1, 3, 17, 4];
        let brev = [
            0,
            0x8000_0000,
            0x0F00_0000,
            1,
            0xFFFF_FFFF,
            0x3000_0000,
            0x0000_8000,
            0x1E6A_2C48,
        ];
        let signed_of = |v: &[u32]| v.iter().map(|&w| w as i32).collect::<Vec<i32>>();
        assert_eq!(out.outputs["pu"].to_u32(), popcount);
        assert_eq!(out.outputs["cu"].to_u32(), clz);
        assert_eq!(out.outputs["fu"].to_u32(), ffs);
        assert_eq!(out.outputs["ru"].to_u32(), brev);
        assert_eq!(out.outputs["pi"].to_i32(), signed_of(&popcount));
        assert_eq!(out.outputs["ci"].to_i32(), signed_of(&clz));
        assert_eq!(out.outputs["fi"].to_i32(), signed_of(&ffs));
        assert_eq!(out.outputs["ri"].to_i32(), signed_of(&brev));
    }
}

#[test]
fn bit_operations_print_as_written() {
    let m = module(BITS);
    let text = print(&m);
    for line in ["popcount(x[i])", "clz(y[i])", "ffs(x[i])", "brev(y[i])"] {
        assert!(text.contains(line), "{line} missing from {text}");
    }
    assert_eq!(module(&text), m);
}

const ONE_LINE: &str = "
mesh m {
  threads t = 32;
}
kernel k(y: gmem<u32[32]>) {
  LINE
}
map m1 {
  programs [m: k];
  outputs [y: gmem<u32[32]>];
}
";

#[test]
fn bit_operations_take_integers_only() {
    let d = one(&ONE_LINE.replace("LINE", "y[axis_index(t)] = u32(popcount(1.5));"));
    assert_eq!(d.code, "E0037");
    assert_eq!(
        d.message,
        "operator `popcount` needs integer (i32 or u32) operands, found `f32`, \
         in `u32(popcount(1.5))` in kernel `k`"
    );
    let d = one(&ONE_LINE.replace("LINE", "y[axis_index(t)] = brev(true);"));
    assert_eq!(d.code, "E0037");
}

#[test]
fn constant_bit_operations_fold_into_checked_indices() {
    // clz(0u) is 32: one past the end of y.
    let d = one(&ONE_LINE.replace("LINE", "y[clz(0u)] = 1u;"));
    assert_eq!(d.code, "E0047");
    // ffs(0u) is 0 and clz(1u) - 31u is 0: in bounds.
    let m = module(&ONE_LINE.replace("LINE", "y[ffs(0u) + clz(1u) - 31u] = 1u;"));
    validate(&m, &ValidateOptions::default()).expect("valid");
}
