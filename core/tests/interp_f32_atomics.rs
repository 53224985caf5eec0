//! f32 atomics in the interpreter (docs/numerics.md, "f32 atomics"): exact
//! values under contention, the NaN rule of min and max, bits kept by load,
//! store and exchange, flushing, and how schedules that sum in different
//! orders are compared.

#![allow(clippy::result_large_err)]

use mpmd_core::interp::{InterpOptions, Interpreter, ScheduleTolerance};
use mpmd_core::ir::ScalarType::*;
use mpmd_core::ir::*;
use mpmd_core::{CallArgs, CallOutputs, HostTensor, RunError};

fn gid() -> Expr {
    axis_index("b") * axis_size("t") + axis_index("t")
}

fn opts(detect: bool, extra_schedules: u32) -> InterpOptions {
    InterpOptions {
        detect,
        extra_schedules,
        ..Default::default()
    }
}

fn run(m: &Module, a: &CallArgs, o: &InterpOptions) -> Result<CallOutputs, RunError> {
    let map = m.maps[0].name.clone();
    Interpreter::new().call(&validated(m), &map, a, o)
}

fn inputs(list: &[(&str, HostTensor)]) -> CallArgs {
    CallArgs {
        inputs: list
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect(),
        scalars: Default::default(),
    }
}

fn module(mesh: Mesh, map: MpmdMap, body: impl FnOnce(&mut BodyBuilder)) -> Module {
    let kernel = KernelBuilder::new(&map.programs[0].kernel, map.params()).body(body);
    Module {
        meshes: vec![mesh],
        kernels: vec![kernel],
        maps: vec![map],
        ..Default::default()
    }
}

/// 4 blocks x 64 threads on `acc` (starting as NaN): add of g / 2, min and
/// max of (g - 100) / 4, add of 1.0 with the old values kept; smem adds per
/// block.
fn contention() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 4).threads("t", 64).build();
    let map = MapBuilder::new("f32_atomics")
        .program("m", "k")
        .input("init", gmem(F32, [4]))
        .output("acc", gmem(F32, [4]))
        .output("olds", gmem(F32, [256]))
        .output("block_sums", gmem(F32, [4]))
        .scratch("tile", smem(F32, [1]))
        .alias("init", "acc")
        .build();
    module(mesh, map, |b| {
        let g = b.let_("g", U32, gid());
        let gf = b.let_("gf", F32, g.clone().cast(F32));
        b.atomic(
            AtomicOp::Add,
            at("acc", [0u32.into()]),
            [gf.clone() * 0.5f32],
        );
        let quarter = b.let_("quarter", F32, (gf.clone() - 100.0f32) * 0.25f32);
        b.atomic(AtomicOp::Min, at("acc", [1u32.into()]), [quarter.clone()]);
        b.atomic(AtomicOp::Max, at("acc", [2u32.into()]), [quarter]);
        let old = b.atomic_let(
            "old",
            F32,
            AtomicOp::Add,
            at("acc", [3u32.into()]),
            [1.0f32.into()],
        );
        b.store(at("olds", [g]), old);
        b.if_(axis_index("t").eq(0u32), |b| {
            b.atomic(AtomicOp::Store, at("tile", [0u32.into()]), [0.0f32.into()]);
        });
        b.barrier();
        b.atomic(AtomicOp::Add, at("tile", [0u32.into()]), [gf * 0.125f32]);
        b.barrier();
        b.if_(axis_index("t").eq(0u32), |b| {
            let sum = b.atomic_let("sum", F32, AtomicOp::Load, at("tile", [0u32.into()]), []);
            b.store(at("block_sums", [axis_index("b")]), sum);
        });
    })
}

#[test]
fn exact_sums_min_and_max_under_contention() {
    let m = contention();
    let nan = HostTensor::from_f32(vec![4], &[f32::NAN, f32::NAN, f32::NAN, 0.0]);
    let init = HostTensor::from_f32(vec![4], &[0.0, f32::NAN, f32::NAN, 0.0]);
    // The old values of the adds depend on the schedule, their multiset not.
    let schedules = InterpOptions {
        schedule_tolerances: vec![("olds".into(), ScheduleTolerance::Multiset)],
        ..opts(true, 3)
    };
    for o in [opts(false, 0), opts(true, 0), schedules] {
        let out = run(&m, &inputs(&[("init", init.clone())]), &o).unwrap();
        let acc = out.outputs["acc"].to_f32();
        // 0.5 * (0 + 1 + ... + 255): every partial sum is a multiple of 0.5 below 2^15.
        assert_eq!(acc[0], 16320.0, "add");
        // min and max skip the NaN the words start with.
        assert_eq!(acc[1], -25.0, "min");
        assert_eq!(acc[2], 38.75, "max");
        assert_eq!(acc[3], 256.0, "count");
        let mut olds = out.outputs["olds"].to_f32();
        olds.sort_by(f32::total_cmp);
        let expected: Vec<f32> = (0..256).map(|k| k as f32).collect();
        assert_eq!(olds, expected, "add returns every old value once");
        // Block b: 0.125 * (64b + 0 + ... + 64b + 63).
        let block_sums = out.outputs["block_sums"].to_f32();
        let expected: Vec<f32> = (0..4)
            .map(|b| (0..64).map(|t| (64 * b + t) as f32 * 0.125).sum())
            .collect();
        assert_eq!(block_sums, expected);
    }
    // NaN + x is NaN: a sum that starts as NaN stays NaN.
    let out = run(&m, &inputs(&[("init", nan)]), &opts(true, 0)).unwrap();
    assert!(out.outputs["acc"].to_f32()[0].is_nan());
}

/// One thread runs `ops` on `x[0]` in order; `olds` gets each old value.
fn sequence(ops: &[(AtomicOp, f32)], start: f32, flush: bool) -> (u32, Vec<u32>) {
    let mesh = MeshBuilder::new("m").threads("t", 1).build();
    let map = MapBuilder::new("seq")
        .program("m", "k")
        .input("init", gmem(F32, [1]))
        .output("x", gmem(F32, [1]))
        .output("olds", gmem(F32, [ops.len() as u32]))
        .alias("init", "x")
        .build();
    let ops = ops.to_vec();
    let m = module(mesh, map, |b| {
        for (k, (op, v)) in ops.iter().enumerate() {
            let operand = Expr::Lit(Literal::f32(*v));
            let target = at("x", [0u32.into()]);
            let old = match op {
                AtomicOp::Load => b.atomic_let(&format!("old{k}"), F32, *op, target, []),
                // A store returns nothing: 0 stands for its old value.
                AtomicOp::Store => {
                    b.atomic(*op, target, [operand]);
                    Expr::from(0.0f32)
                }
                _ => b.atomic_let(&format!("old{k}"), F32, *op, target, [operand]),
            };
            b.store(at("olds", [(k as u32).into()]), old);
        }
    });
    let o = InterpOptions {
        flush_subnormals: flush,
        ..opts(true, 0)
    };
    let init = HostTensor::from_f32(vec![1], &[start]);
    let out = run(&m, &inputs(&[("init", init)]), &o).unwrap();
    (out.outputs["x"].to_bits()[0], out.outputs["olds"].to_bits())
}

#[test]
fn min_and_max_keep_the_other_operand_of_a_nan() {
    use AtomicOp::{Max, Min};
    let nan = f32::NAN;
    let (last, olds) = sequence(
        &[
            (Min, 3.0),
            (Min, nan),
            (Max, nan),
            (Max, -1.0),
            (Min, f32::NEG_INFINITY),
            (Max, f32::INFINITY),
        ],
        nan,
        false,
    );
    let bits = |v: f32| v.to_bits();
    // NaN start: min gives 3; NaN operands change nothing; -inf, then +inf.
    assert_eq!(
        olds,
        vec![
            bits(nan),
            bits(3.0),
            bits(3.0),
            bits(3.0),
            bits(3.0),
            bits(f32::NEG_INFINITY)
        ]
    );
    assert_eq!(last, bits(f32::INFINITY));
    // Only NaN with NaN gives NaN.
    let (last, _) = sequence(&[(Max, nan), (Min, nan)], nan, false);
    assert!(f32::from_bits(last).is_nan());
}

#[test]
fn load_store_and_exchange_keep_the_bits() {
    use AtomicOp::{Exchange, Load, Store};
    let payload = f32::from_bits(0x7fc0_0001);
    let subnormal = f32::from_bits(1);
    for flush in [false, true] {
        let (last, olds) = sequence(
            &[
                (Exchange, -0.0),
                (Load, 0.0),
                (Exchange, payload),
                (Exchange, subnormal),
            ],
            subnormal,
            flush,
        );
        assert_eq!(
            olds,
            vec![1, 0x8000_0000, 0x8000_0000, 0x7fc0_0001],
            "flush {flush}"
        );
        assert_eq!(last, 1, "flush {flush}");
        // A store without a result: the bits as given.
        let (last, _) = sequence(&[(Store, payload)], 1.0, flush);
        assert_eq!(last, 0x7fc0_0001);
    }
}

#[test]
fn add_is_one_rounding_and_flushes_like_a_plain_add() {
    use AtomicOp::Add;
    // 1 + 2^-24 is a tie: it rounds to even (1.0); twice more gives 1.0 again.
    let (last, olds) = sequence(
        &[(Add, f32::EPSILON / 2.0), (Add, f32::EPSILON / 2.0)],
        1.0,
        false,
    );
    assert_eq!(olds, vec![1.0f32.to_bits(), 1.0f32.to_bits()]);
    assert_eq!(last, 1.0f32.to_bits());
    // Two subnormals: kept by IEEE, flushed to zero by a flushing adapter.
    let s = f32::from_bits(3);
    let (ieee, _) = sequence(&[(Add, s)], s, false);
    assert_eq!(ieee, 6);
    let (flushed, olds) = sequence(&[(Add, s)], s, true);
    assert_eq!(flushed, 0);
    // The old value is the stored bits, unflushed.
    assert_eq!(olds, vec![3]);
    // min and max flush their operands and result too.
    let (flushed, _) = sequence(&[(AtomicOp::Max, s)], -1.0, true);
    assert_eq!(flushed, 0);
}

/// 4 blocks x 64 threads add values that do not sum exactly into one word.
fn inexact_sum() -> (Module, CallArgs) {
    let mesh = MeshBuilder::new("m").grid("b", 4).threads("t", 64).build();
    let map = MapBuilder::new("sum")
        .program("m", "k")
        .input("x", gmem(F32, [256]))
        .output_zeroed("s", gmem(F32, [1]))
        .build();
    let m = module(mesh, map, |b| {
        b.atomic(AtomicOp::Add, at("s", [0u32.into()]), [load("x", [gid()])]);
    });
    let xs: Vec<f32> = (0..256).map(|k| 1.0 / (k as f32 + 3.0)).collect();
    (m, inputs(&[("x", HostTensor::from_f32(vec![256], &xs))]))
}

#[test]
fn reordered_sums_are_nondeterministic_when_exact_and_within_the_summation_order_bound() {
    let with = |tolerance: ScheduleTolerance| {
        let (m, a) = inexact_sum();
        let o = InterpOptions {
            schedule_tolerances: vec![("s".into(), tolerance)],
            ..opts(true, 4)
        };
        run(&m, &a, &o)
    };
    let e = with(ScheduleTolerance::Ulps(0)).unwrap_err();
    let RunError::Nondeterministic { detail } = &e else {
        panic!("expected nondeterminism, got {e}")
    };
    assert!(detail.starts_with("output `s` element 0 is "), "{detail}");
    // 256 adds into one word: 513 ulps allowed by `SummationOrder`.
    assert_eq!(mpmd_core::interp::summation_order_ulps(256), 513);
    let sum = with(ScheduleTolerance::SummationOrder).unwrap().outputs["s"].to_f32()[0];
    let exact: f64 = (0..256).map(|k| 1.0 / (k as f64 + 3.0)).sum();
    assert!((f64::from(sum) - exact).abs() < 1e-5, "{sum} vs {exact}");
    // `Ulps(n)` states its own bound; 1000 ulps is far more than 256 adds move.
    with(ScheduleTolerance::Ulps(1000)).unwrap();
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
