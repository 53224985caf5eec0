//! Fragment rows (`mma_m16n8k16(acc[j], fa[i], fb[l], acc[j])`) and the
//! fragment loads `mma_load_a` / `mma_load_b`: the text format and the
//! builder, validation (E0047, E0068, E0070 to E0073) with its messages, and
//! the interpreter's loads, element by element in PTX's layout, bounds
//! checked per element.

#![allow(clippy::result_large_err)]

mod common;
use common::{found, module};
use mpmd_core::backend::Mode;
use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::ir::{mma, BodyBuilder, Expr, Fragment, Literal, RefAccess, ScalarType, Stmt};
use mpmd_core::text::{parse, print};
use mpmd_core::validate::{validate, ValidateOptions};
use mpmd_core::{CallArgs, CallOutputs, HostTensor, RunError, RunOptions};

/// A kernel of `threads` threads (one block) with the gmem tile
/// `x: f16[48, 32]`, the smem tile `s: f16[2, 32, 16]`, `decls` and `body`.
fn kernel(threads: u32, decls: &str, body: &str) -> String {
    format!(
        "
mesh m {{
  threads t = {threads};
}}

kernel k(x: gmem<f16[48, 32]>, y: gmem<f32[{threads}]>, s: smem<f16[2, 32, 16]>) {{
  let i: u32 = axis_index(t);
  let lane: u32 = i % 32u;
  let warp: u32 = i / 32u;
  {decls}
  {body}
  y[i] = 0.0;
}}

map mm {{
  programs [m: k];
  inputs [x: gmem<f16[48, 32]>];
  outputs [y: gmem<f32[{threads}]>];
  scratch [s: smem<f16[2, 32, 16]>];
}}
"
    )
}

const ROWS: &str =
    "local fa: f16[2, 8]; local fb: f16[3, 4]; local acc: f32[4, 4]; local one: f32[4];";

fn u32_lit(v: u32) -> Expr {
    Expr::Lit(Literal::U32(v))
}

#[test]
fn rows_and_loads_print_parse_and_build_alike() {
    let body = "for j: u32 in 0u..2u {
    mma_load_a(fa[j], x[16u * warp, 8u * j]);
    mma_load_b(fb[j], s[1u, 16u * j, 0u]);
    mma_load_b(one_b, x[0u, 8u]);
    mma_m16n8k16(acc[j + 2u], fa[j], fb[lane % 3u], acc[j]);
  }";
    let src = kernel(64, &format!("{ROWS} local one_b: f16[4];"), body);
    let m = module(&src);
    let text = print(&m);
    for line in [
        "mma_load_a(fa[j], x[16u * warp, 8u * j]);",
        "mma_load_b(fb[j], s[1u, 16u * j, 0u]);",
        "mma_load_b(one_b, x[0u, 8u]);",
        "mma_m16n8k16(acc[j + 2u], fa[j], fb[lane % 3u], acc[j]);",
    ] {
        assert!(text.contains(line), "{line} not in {text}");
    }
    assert_eq!(module(&text), m);
    // The builder makes the same statements.
    let var = |n: &str| Expr::Var(n.to_string());
    let mut b = BodyBuilder::new();
    b.mma_load(
        mma::Operand::B,
        "one_b",
        RefAccess {
            base: "x".into(),
            block: None,
            index: vec![u32_lit(0), u32_lit(8)],
        },
    );
    b.mma(
        Fragment::row("acc", var("j") + u32_lit(2)),
        Fragment::row("fa", var("j")),
        Fragment::row("fb", var("lane") % u32_lit(3)),
        Fragment::row("acc", var("j")),
    );
    let built = b.finish();
    let Stmt::For { body: parsed, .. } = &m.kernels[0].body[8] else {
        panic!("{:?}", m.kernels[0].body[8]);
    };
    assert_eq!(built[..], parsed[2..]);
    assert_eq!(
        validate(&m, &ValidateOptions::default()).err(),
        None,
        "{src}"
    );
}

#[test]
fn a_fragment_names_one_row() {
    let src = kernel(
        32,
        ROWS,
        "mma_m16n8k16(acc[0u, 1u], fa[0u], fb[0u], acc[0u]);",
    );
    let e = parse(&src).expect_err("two indices").render("t");
    assert!(
        e.contains("a fragment of `mma_m16n8k16` is a local array or one row of a 2-D local array: `acc` or `acc[i]`, one index"),
        "{e}"
    );
    let src = kernel(32, ROWS, "let v: f32 = mma_load_a(fa[0u], x[0u, 0u]);");
    let e = parse(&src).expect_err("a statement").render("t");
    assert!(
        e.contains("`mma_load_a` is a statement that writes a fragment to a local array: write `mma_load_a(a, src[.., row, col]);`"),
        "{e}"
    );
}

#[test]
fn rows_are_u32_rows_of_2d_local_arrays_of_the_fragment_length() {
    let mma = |call: &str| found(&kernel(32, ROWS, call));
    assert_eq!(
        mma("mma_m16n8k16(acc[3u], fa[1u], fb[2u], acc[lane % 4u]);"),
        []
    );
    assert_eq!(
        mma("mma_m16n8k16(acc[0u], fa[1u], fb[2u], acc[i32(lane)]);"),
        [(
            "E0071",
            "the row `i32(lane)` of the operand `c` of `mma_m16n8k16` in kernel `k` has type `i32`; a fragment's row index is `u32`".to_string()
        )]
    );
    assert_eq!(
        mma("mma_m16n8k16(one[0u], fa[1u], fb[2u], acc[0u]);"),
        [(
            "E0071",
            "the operand `d` of `mma_m16n8k16` in kernel `k` is `one[0u]`, a row of `one: local<f32[4]>`, which is not a 2-D array".to_string()
        )]
    );
    assert_eq!(
        mma("mma_m16n8k16(acc[0u], fa[2u], fb[2u], acc[0u]);"),
        [(
            "E0047",
            "row 2 of `fa` (the operand `a` of `mma_m16n8k16`) is out of bounds: `fa` has 2 rows (kernel `k`)".to_string()
        )]
    );
    assert_eq!(
        mma("mma_m16n8k16(acc[0u], fa[0u], fa[1u], acc[0u]);"),
        [(
            "E0071",
            "the operand `b` of `mma_m16n8k16` in kernel `k` is `fa[1u]`, a row of `fa: local<f16[2, 8]>`, but `b` is `local f16[4]` (the element type of `a`) (or a row of a 2-D `local` array of that type whose last extent is 4)".to_string()
        )]
    );
    assert_eq!(
        mma("mma_m16n8k16(acc[0u], x[0u], fb[0u], acc[0u]);"),
        [(
            "E0070",
            "the operand `a` of `mma_m16n8k16` in kernel `k` is `x[0u]`, of a `gmem<f16[48, 32]>`; the fragments of an mma are `local` arrays of each thread, or rows of them".to_string()
        )]
    );
}

#[test]
fn loads_read_gmem_or_smem_of_the_fragment_type_that_holds_the_block() {
    let load = |decls: &str, call: &str| found(&kernel(64, &format!("{ROWS} {decls}"), call));
    assert_eq!(load("", "mma_load_a(fa[1u], x[32u, 16u]);"), []);
    assert_eq!(load("", "mma_load_b(fb[lane % 3u], s[warp, 16u, 8u]);"), []);
    let wrong = |decls: &str, call: &str, message: &str| {
        assert_eq!(
            load(decls, call),
            [("E0072", message.to_string())],
            "{call}"
        );
    };
    wrong(
        "local big: f16[16, 16];",
        "mma_load_a(fa[0u], big[0u, 0u]);",
        "the source `big: local<f16[16, 16]>` of `mma_load_a` in kernel `k` is a `local`; fragments load from gmem or smem",
    );
    wrong(
        "local b16: bf16[8];",
        "mma_load_a(b16, x[0u, 0u]);",
        "the source `x: gmem<f16[48, 32]>` of `mma_load_a` in kernel `k` is of `f16`, not `bf16` (the fragment's type)",
    );
    wrong(
        "local b16: bf16[8];",
        "mma_load_a(b16, y[0u]);",
        "the source `y: gmem<f32[64]>` of `mma_load_a` in kernel `k` is of `f32`, not `bf16` (the fragment's type)",
    );
    // The fragment's own rules come first: `fb` rows are B fragments.
    assert_eq!(
        load("", "mma_load_a(fb[0u], x[0u, 0u]);"),
        [(
            "E0071",
            "the operand `a` of `mma_load_a` in kernel `k` is `fb[0u]`, a row of `fb: local<f16[3, 4]>`, but `a` is `local f16[8]` or `local bf16[8]` (or a row of a 2-D `local` array of that type whose last extent is 8)".to_string()
        )]
    );
    assert_eq!(
        load("", "mma_load_b(fb[0u], x[33u, 0u]);"),
        [(
            "E0047",
            "the block of `mma_load_b` at row 33 of `x` reaches row 48, out of bounds for dimension 0 (extent 48) in kernel `k`".to_string()
        )]
    );
}

#[test]
fn load_origins_are_warp_uniform_and_loads_are_warp_collectives() {
    let load = |threads: u32, call: &str| found(&kernel(threads, ROWS, call));
    assert_eq!(load(64, "mma_load_a(fa[0u], x[16u * warp, 0u]);"), []);
    assert_eq!(
        load(64, "mma_load_a(fa[0u], x[i / 4u, 0u]);"),
        [(
            "E0073",
            "the index `i / 4u` of the source of `mma_load_a` in kernel `k` is not warp-uniform (`i` is not warp-uniform); every lane names the same block".to_string()
        )]
    );
    let codes = |threads: u32, body: &str| -> Vec<&'static str> {
        load(threads, body).into_iter().map(|(c, _)| c).collect()
    };
    assert_eq!(codes(48, "mma_load_b(fb[0u], x[0u, 0u]);"), ["E0069"]);
    assert_eq!(
        codes(64, "if lane < 5u { mma_load_b(fb[0u], x[0u, 0u]); }"),
        ["E0068"]
    );
    assert_eq!(
        codes(64, "if warp == 1u { mma_load_b(fb[0u], s[warp, 0u, 8u]); }"),
        Vec::<&str>::new()
    );
}

/// `x` (a 48x32 f16 tile whose element (r, c) has the bits `r * 32 + c`,
/// all finite) loaded by `call` into `fa` or `fb`, one warp; the
/// fragment's bits per lane, as `y[lane, i]`.
fn loaded(call: &str, len: u32, mode: Mode) -> Result<CallOutputs, RunError> {
    let src = format!(
        "
mesh m {{
  threads t = 32;
}}

kernel k(x: gmem<f16[48, 32]>, y: gmem<u32[32, {len}]>) {{
  local fa: f16[2, 8];
  local fb: f16[4];
  {call}
  for e: u32 in 0u..{len}u {{
    y[axis_index(t), e] = u32(f16_bits_of(F[e]));
  }}
}}

map mm {{
  programs [m: k];
  inputs [x: gmem<f16[48, 32]>];
  outputs [y: gmem<u32[32, {len}]>];
}}
"
    )
    .replace(
        "u32(f16_bits_of(F[e]))",
        if len == 8 {
            "bitcast<u32>(f32(fa[1u, e]))"
        } else {
            "bitcast<u32>(f32(fb[e]))"
        },
    );
    let m = module(&src);
    validate(&m, &ValidateOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
    let bits: Vec<u32> = (0..48 * 32).collect();
    let x = HostTensor::new(ScalarType::F16, vec![48, 32], bits).unwrap();
    let args = CallArgs {
        inputs: [("x".to_string(), x)].into_iter().collect(),
        scalars: Default::default(),
    };
    let options = InterpOptions {
        detect: mode == Mode::Checked,
        extra_schedules: 2,
        run: RunOptions { mode, seed: 3 },
        ..Default::default()
    };
    Interpreter::new().call(&validated(&m), "mm", &args, &options)
}

#[test]
fn loads_place_each_element_by_the_layout() {
    for (operand, call, (r0, c0)) in [
        (mma::Operand::A, "mma_load_a(fa[1u], x[5u, 11u]);", (5, 11)),
        (mma::Operand::B, "mma_load_b(fb, x[30u, 3u]);", (30, 3)),
    ] {
        let len = operand.fragment_len();
        for mode in [Mode::Fast, Mode::Checked] {
            let out = loaded(call, len, mode).unwrap_or_else(|e| panic!("{call}: {e}"));
            let got = out.outputs["y"].to_bits();
            for lane in 0..32u32 {
                for i in 0..len {
                    let (r, c) = operand.position(lane, i);
                    let bits = (r0 + r) * 32 + (c0 + c);
                    let want = half::f16::from_bits(bits as u16).to_f32().to_bits();
                    assert_eq!(
                        got[(lane * len + i) as usize],
                        want,
                        "{call} lane {lane} element {i}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_block_past_the_tile_is_out_of_bounds_at_its_first_element_outside() {
    // Rows 40..55 of a 48-row tile (an origin no constant folding sees):
    // lane 0's element 2 is row 48.
    let e = loaded(
        "mma_load_b(fb, x[40u + axis_index(t) / 32u, 24u]);",
        4,
        Mode::Checked,
    )
    .expect_err("out of bounds");
    match e {
        RunError::OutOfBounds {
            reference,
            index,
            shape,
            ..
        } => {
            assert_eq!(
                (reference.as_str(), index.as_str(), shape.as_str()),
                ("x", "[48, 24]", "[48, 32]")
            );
        }
        other => panic!("{other}"),
    }
}

/// A module whose kernel loads `call` with the sources `v: gmem<f16[64]>`,
/// `w: smem<f16[8, 16]>` and `odd: smem<f16[3]>` (one warp).
fn small_sources(call: &str) -> String {
    format!(
        "
mesh m {{
  threads t = 32;
}}

kernel k(v: gmem<f16[64]>, y: gmem<f32[32]>, odd: smem<f16[3]>, w: smem<f16[8, 16]>) {{
  local fa: f16[8];
  {call}
  odd[0u] = v[0u];
  y[axis_index(t)] = f32(fa[0u]);
}}

map mm {{
  programs [m: k];
  inputs [v: gmem<f16[64]>];
  outputs [y: gmem<f32[32]>];
  scratch [odd: smem<f16[3]>, w: smem<f16[8, 16]>];
}}
"
    )
}

#[test]
fn loads_need_two_dimensions_that_hold_the_block() {
    assert_eq!(
        found(&small_sources("mma_load_a(fa, v[0u]);")),
        [(
            "E0072",
            "the source `v: gmem<f16[64]>` of `mma_load_a` in kernel `k` is 1-dimensional; the block's rows are its second-to-last dimension and its columns its last".to_string()
        )]
    );
    assert_eq!(
        found(&small_sources("mma_load_a(fa, w[0u, 0u]);")),
        [(
            "E0072",
            "the source `w: smem<f16[8, 16]>` of `mma_load_a` in kernel `k` is 8 x 16 in its last two dimensions, smaller than the 16 x 16 block".to_string()
        )]
    );
}

/// `ldmatrix` needs 16-byte aligned rows: every smem slot of the arena
/// starts at a multiple of 16 bytes, whatever the slots before it hold.
#[test]
fn smem_slots_start_16_byte_aligned() {
    let m = module(&small_sources("fa[0u] = w[1u, 2u];"));
    validate(&m, &ValidateOptions::default()).unwrap_or_else(|e| panic!("{e:?}"));
    let plan = mpmd_core::plan::lower(&validated(&m), "mm").expect("lowers");
    let slots: Vec<(u32, u32)> = plan.units[0]
        .smem
        .iter()
        .map(|s| (s.offset_bytes, s.size_bytes))
        .collect();
    // 16-bit elements take 2 bytes: `odd` ends at byte 6, `w` starts at 16.
    assert_eq!(slots, [(0, 6), (16, 256)]);
}

#[test]
fn a_k_major_load_is_the_b_fragment_of_the_transposed_block() {
    // x[n0 + n, k0 + k] is B[k][n]: lane l holds B[2q + i % 2 + 8 (i / 2)][g]
    // with g = l >> 2, q = l % 4 (PTX's B layout).
    let (n0, k0) = (21u32, 9u32);
    for mode in [Mode::Fast, Mode::Checked] {
        let out = loaded("mma_load_b_kmajor(fb, x[21u, 9u]);", 4, mode).unwrap();
        let got = out.outputs["y"].to_bits();
        for lane in 0..32u32 {
            let (g, q) = (lane >> 2, lane % 4);
            for i in 0..4u32 {
                let (k, n) = (2 * q + i % 2 + 8 * (i / 2), g);
                let bits = (n0 + n) * 32 + (k0 + k);
                let want = half::f16::from_bits(bits as u16).to_f32().to_bits();
                assert_eq!(
                    got[(lane * 4 + i) as usize],
                    want,
                    "lane {lane} element {i}"
                );
            }
        }
    }
    // The block is 8 rows (n) by 16 columns (k): at column 17 of 32 it
    // reaches column 32.
    let e = loaded(
        "mma_load_b_kmajor(fb, x[0u, 16u + axis_index(t) / 32u + 1u]);",
        4,
        Mode::Checked,
    )
    .expect_err("out of bounds");
    assert!(
        matches!(&e, RunError::OutOfBounds { reference, shape, .. } if reference == "x" && shape == "[48, 32]"),
        "{e}"
    );
}

#[test]
fn a_k_major_load_needs_an_8_by_16_block() {
    let src = "
mesh m {
  threads t = 32;
}
kernel k(x: gmem<f16[16, 8]>, y: gmem<f32[32]>) {
  local fb: f16[4];
  mma_load_b_kmajor(fb, x[0u, 0u]);
  y[axis_index(t)] = f32(fb[0u]);
}
map mm {
  programs [m: k];
  inputs [x: gmem<f16[16, 8]>];
  outputs [y: gmem<f32[32]>];
}
";
    assert_eq!(
        found(src),
        [(
            "E0072",
            "the source `x: gmem<f16[16, 8]>` of `mma_load_b_kmajor` in kernel `k` is 16 x 8 in its last two dimensions, smaller than the 8 x 16 block".to_string()
        )]
    );
    let m = module(&src.replace("f16[16, 8]", "f16[8, 16]"));
    validate(&m, &ValidateOptions::default()).expect("valid");
    assert_eq!(module(&print(&m)), m);
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
