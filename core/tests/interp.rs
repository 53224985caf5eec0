//! The reference interpreter: exact results, numerics, synchronisation and
//! every detection it reports.

#![allow(clippy::result_large_err)]

use mpmd_core::interp::{InterpOptions, Interpreter, ScheduleTolerance};
use mpmd_core::ir::ScalarType::*;
use mpmd_core::ir::*;
use mpmd_core::{CallArgs, CallOutputs, ErrorClass, HostTensor, RunError};

fn u(v: u32) -> Expr {
    Expr::from(v)
}

fn i(v: i32) -> Expr {
    Expr::from(v)
}

fn module(meshes: Vec<Mesh>, kernels: Vec<Kernel>, maps: Vec<MpmdMap>) -> Module {
    Module {
        meshes,
        kernels,
        maps,
        ..Default::default()
    }
}

fn args(inputs: &[(&str, HostTensor)], scalars: &[(&str, Literal)]) -> CallArgs {
    CallArgs {
        inputs: inputs
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect(),
        scalars: scalars.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
    }
}

fn opts(detect: bool, extra_schedules: u32) -> InterpOptions {
    InterpOptions {
        detect,
        extra_schedules,
        ..Default::default()
    }
}

fn run(m: &Module, map: &str, a: &CallArgs, o: &InterpOptions) -> Result<CallOutputs, RunError> {
    Interpreter::new().call(&validated(m), map, a, o)
}

/// Global thread id on a one-dimensional grid `b` with thread axis `t`.
fn gid() -> Expr {
    axis_index("b") * axis_size("t") + axis_index("t")
}

fn elementwise(n: u32, threads: u32) -> Module {
    let mesh = MeshBuilder::new("m")
        .grid("b", n / threads)
        .threads("t", threads)
        .build();
    let map = MapBuilder::new("axpb")
        .program("m", "axpb")
        .input("x", gmem(F32, [n]))
        .output("y", gmem(F32, [n]))
        .scalar("alpha", F32)
        .build();
    let kernel = KernelBuilder::new("axpb", map.params()).body(|b| {
        let idx = b.let_("i", U32, gid());
        b.store(
            at("y", [idx.clone()]),
            load("x", [idx]) * var("alpha") + 1.0f32,
        );
    });
    module(vec![mesh], vec![kernel], vec![map])
}

#[test]
fn elementwise_with_scalar_is_exact_in_every_mode() {
    let n = 1024;
    let m = elementwise(n, 128);
    let xs: Vec<f32> = (0..n).map(|k| k as f32 * 0.37 - 100.0).collect();
    let alpha = 1.7f32;
    let a = args(
        &[("x", HostTensor::from_f32(vec![n], &xs))],
        &[("alpha", Literal::f32(alpha))],
    );
    let expected: Vec<f32> = xs.iter().map(|x| x * alpha + 1.0).collect();
    for o in [opts(false, 0), opts(true, 0), opts(true, 2)] {
        let out = run(&m, "axpb", &a, &o).unwrap();
        let y = &out.outputs["y"];
        assert_eq!(y.shape(), vec![n]);
        assert_eq!(y.to_f32(), expected, "options {o:?}");
    }
}

#[test]
fn bad_arguments_are_errors() {
    let m = elementwise(256, 128);
    let short = args(
        &[("x", HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]))],
        &[("alpha", Literal::f32(1.0))],
    );
    let e = run(&m, "axpb", &short, &opts(false, 0)).unwrap_err();
    assert_eq!(
        e,
        RunError::BadArguments("input `x` has 3 elements; the map declares 256".into())
    );
    // The right number of words but the wrong element type: taking the bits
    // of 256 integers as floats is never what the caller meant.
    let ints = args(
        &[("x", HostTensor::from_i32(vec![256], &[1; 256]))],
        &[("alpha", Literal::f32(1.0))],
    );
    let e = run(&m, "axpb", &ints, &opts(false, 0)).unwrap_err();
    assert_eq!(
        e,
        RunError::BadArguments("input `x` holds `i32` elements; the map declares `f32`".into())
    );
    let wrong_type = args(
        &[(
            "x",
            HostTensor::zeros(F32, vec![256]).expect("small tensor"),
        )],
        &[("alpha", Literal::I32(1))],
    );
    let e = run(&m, "axpb", &wrong_type, &opts(false, 0)).unwrap_err();
    assert_eq!(
        e,
        RunError::BadArguments("scalar `alpha` is `f32`, the call passes a `i32`".into())
    );
    let e = run(&m, "nope", &short, &opts(false, 0)).unwrap_err();
    assert_eq!(
        e,
        RunError::BadArguments("no map named `nope` in the module".into())
    );
}

fn tree_reduction(blocks: u32, threads: u32) -> Module {
    let n = blocks * threads;
    let mesh = MeshBuilder::new("m")
        .grid("b", blocks)
        .threads("t", threads)
        .build();
    let map = MapBuilder::new("sum")
        .program("m", "sum")
        .input("x", gmem(F32, [n]))
        .output("y", gmem(F32, [blocks]))
        .scratch("buf", smem(F32, [threads]).owned_by("m"))
        .build();
    let steps = threads.trailing_zeros();
    let kernel = KernelBuilder::new("sum", map.params()).body(|b| {
        let t = b.let_("tid", U32, axis_index("t"));
        b.store(at("buf", [t.clone()]), load("x", [gid()]));
        b.barrier();
        b.for_("k", U32, 0u32, steps, |b, k| {
            let half = b.let_("half", U32, u(threads / 2) >> k);
            b.if_(t.clone().lt(half.clone()), |b| {
                let sum = load("buf", [t.clone()]) + load("buf", [t.clone() + half.clone()]);
                b.store(at("buf", [t.clone()]), sum);
            });
            b.barrier();
        });
        b.if_(t.clone().eq(0u32), |b| {
            b.store(at("y", [axis_index("b")]), load("buf", [u(0)]))
        });
    });
    module(vec![mesh], vec![kernel], vec![map])
}

#[test]
fn smem_tree_reduction_with_barriers() {
    let (blocks, threads) = (3, 128);
    let m = tree_reduction(blocks, threads);
    let xs: Vec<f32> = (0..blocks * threads).map(|k| (k % 17) as f32).collect();
    let expected: Vec<f32> = xs
        .chunks(threads as usize)
        .map(|c| c.iter().sum())
        .collect();
    let a = args(
        &[("x", HostTensor::from_f32(vec![blocks * threads], &xs))],
        &[],
    );
    for o in [opts(false, 0), opts(true, 0), opts(true, 4)] {
        let out = run(&m, "sum", &a, &o).unwrap();
        assert_eq!(out.outputs["y"].to_f32(), expected, "options {o:?}");
    }
}

#[test]
fn loops_with_per_lane_bounds_run_under_masks() {
    let mesh = MeshBuilder::new("m").grid("b", 1).threads("t", 40).build();
    let map = MapBuilder::new("tri")
        .program("m", "tri")
        .output("y", gmem(U32, [40]))
        .build();
    let kernel = KernelBuilder::new("tri", map.params()).body(|b| {
        let t = b.let_("tid", U32, axis_index("t"));
        let acc = b.var("acc", U32, 0u32);
        // A per-lane bound is a `while` condition (a `for` bound is block-uniform: E0045).
        let k = b.var("k", U32, 0u32);
        b.while_(k.clone().lt(t.clone()), 40u32, |b| {
            b.if_else(
                (k.clone() % 2u32).eq(0u32),
                |b| b.assign("acc", acc.clone() + k.clone()),
                |b| b.assign("acc", acc.clone() + 100u32),
            );
            b.assign("k", k.clone() + 1u32);
        });
        b.store(at("y", [t]), acc);
    });
    let m = module(vec![mesh], vec![kernel], vec![map]);
    let expected: Vec<u32> = (0..40u32)
        .map(|t| (0..t).map(|k| if k % 2 == 0 { k } else { 100 }).sum())
        .collect();
    for o in [opts(false, 0), opts(true, 2)] {
        let out = run(&m, "tri", &args(&[], &[]), &o).unwrap();
        assert_eq!(out.outputs["y"].words(), expected);
    }
}

/// Every atomic on one block-shared counter array, with contention from 256 threads.
fn atomics_module() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 4).threads("t", 64).build();
    let map = MapBuilder::new("atomics")
        .program("m", "atomics")
        .input("c_in", gmem(I32, [10]))
        .output("c", gmem(I32, [10]))
        .output("olds", gmem(I32, [256]))
        .output("xolds", gmem(I32, [256]))
        .output("loaded", gmem(I32, [1]))
        .alias("c_in", "c")
        .build();
    let kernel = KernelBuilder::new("atomics", map.params()).body(|b| {
        let g = b.let_("g", U32, gid());
        let gi = b.let_("gi", I32, g.clone().cast(I32));
        let c = |k: u32| at("c", [u(k)]);
        let old = b.atomic_let("old", I32, AtomicOp::Add, c(0), [i(1)]);
        b.store(at("olds", [g.clone()]), old);
        b.atomic(AtomicOp::Min, c(1), [gi.clone() - 100i32]);
        b.atomic(AtomicOp::Max, c(2), [gi.clone() - 100i32]);
        b.atomic(
            AtomicOp::And,
            c(3),
            [Expr::Unary(
                UnaryOp::BitNot,
                Box::new(i(1) << (gi.clone() % 32i32)),
            )],
        );
        b.atomic(AtomicOp::Or, c(4), [i(1) << (gi.clone() % 32i32)]);
        b.if_(g.clone().lt(5u32), |b| {
            b.atomic(AtomicOp::Xor, c(5), [i(1) << gi.clone()])
        });
        let x = b.atomic_let("x", I32, AtomicOp::Exchange, c(6), [gi.clone() + 1i32]);
        b.store(at("xolds", [g.clone()]), x);
        // A compare-exchange increment loop: every thread retries until it wins.
        let won = b.var("won", Bool, false);
        b.for_("attempt", U32, 0u32, 256u32, |b, _| {
            b.if_(!won.clone(), |b| {
                let seen = b.atomic_let("seen", I32, AtomicOp::Load, c(7), []);
                let prev = b.atomic_let(
                    "prev",
                    I32,
                    AtomicOp::CompareExchange,
                    c(7),
                    [seen.clone(), seen.clone() + 1i32],
                );
                b.if_(prev.eq(seen), |b| {
                    b.assign("won", true);
                    b.atomic(AtomicOp::Add, c(8), [i(1)]);
                });
            });
        });
        b.if_(g.clone().eq(0u32), |b| {
            b.atomic(AtomicOp::Store, c(9), [i(42)]);
            let v = b.atomic_let("v", I32, AtomicOp::Load, c(9), []);
            b.store(at("loaded", [u(0)]), v);
        });
    });
    module(vec![mesh], vec![kernel], vec![map])
}

#[test]
fn every_atomic_gives_exact_counts_under_contention() {
    let m = atomics_module();
    let init = HostTensor::from_i32(vec![10], &[0, 0, 0, -1, 0, 0, 0, 0, 0, 0]);
    let a = args(&[("c_in", init)], &[]);
    for o in [opts(false, 0), opts(true, 0)] {
        let out = run(&m, "atomics", &a, &o).unwrap();
        let c = out.outputs["c"].to_i32();
        assert_eq!(c[0], 256, "add");
        assert_eq!(c[1], -100, "min");
        assert_eq!(c[2], 155, "max");
        assert_eq!(c[3], 0, "and");
        assert_eq!(c[4], -1, "or");
        assert_eq!(c[5], 0b11111, "xor");
        assert_eq!(c[7], 256, "compare_exchange increments");
        assert_eq!(c[8], 256, "compare_exchange winners");
        assert_eq!(c[9], 42, "store");
        assert_eq!(out.outputs["loaded"].to_i32(), vec![42], "load");
        let mut olds = out.outputs["olds"].to_i32();
        olds.sort();
        assert_eq!(
            olds,
            (0..256).collect::<Vec<_>>(),
            "add returns every old value once"
        );
        let mut chain = out.outputs["xolds"].to_i32();
        chain.push(c[6]);
        chain.sort();
        assert_eq!(
            chain,
            (0..=256).collect::<Vec<_>>(),
            "exchange hands every value on once"
        );
    }
}

#[test]
fn atomic_results_differ_between_schedules_and_that_is_reported() {
    let m = atomics_module();
    let a = args(
        &[(
            "c_in",
            HostTensor::zeros(I32, vec![10]).expect("small tensor"),
        )],
        &[],
    );
    let e = run(&m, "atomics", &a, &opts(false, 3)).unwrap_err();
    let RunError::Nondeterministic { detail } = &e else {
        panic!("expected nondeterminism, got {e}")
    };
    assert!(
        detail.starts_with("output `c` element 6 is ")
            || detail.starts_with("output `olds` element "),
        "{detail}"
    );
}

/// The same program is deterministic once its order-dependent outputs are
/// compared with their tolerances: old values as multisets, the exchange
/// chain's end (`c`, whose element 6 depends on the order) not at all.
#[test]
fn schedules_are_compared_with_the_output_tolerances() {
    let m = atomics_module();
    let a = args(
        &[(
            "c_in",
            HostTensor::zeros(I32, vec![10]).expect("small tensor"),
        )],
        &[],
    );
    let mut o = opts(false, 3);
    o.schedule_tolerances = vec![
        ("olds".into(), ScheduleTolerance::Multiset),
        ("xolds".into(), ScheduleTolerance::Any),
        ("c".into(), ScheduleTolerance::Any),
    ];
    let out = run(&m, "atomics", &a, &o).unwrap();
    assert_eq!(out.outputs["c"].to_i32()[0], 256);
    // A multiset that really differs is still reported.
    o.schedule_tolerances = vec![
        ("olds".into(), ScheduleTolerance::Multiset),
        ("xolds".into(), ScheduleTolerance::Multiset),
        ("c".into(), ScheduleTolerance::Any),
    ];
    let e = run(&m, "atomics", &a, &o).unwrap_err();
    assert!(
        e.to_string()
            .contains("output `xolds` differs as a multiset"),
        "{e}"
    );
}

#[test]
fn integer_and_float_edge_numerics() {
    let mesh = MeshBuilder::new("m").grid("b", 1).threads("t", 1).build();
    let map = MapBuilder::new("edges")
        .program("m", "edges")
        .output("y", gmem(U32, [32]))
        .scalar("min", I32)
        .scalar("m1", I32)
        .scalar("zero", I32)
        .scalar("seven", I32)
        .scalar("useven", U32)
        .scalar("uzero", U32)
        .scalar("nan_value", F32)
        .build();
    let results: Vec<Expr> = vec![
        (var("seven") / var("zero")).bitcast(U32),
        (var("seven") % var("zero")).bitcast(U32),
        (var("min") / var("m1")).bitcast(U32),
        (var("min") % var("m1")).bitcast(U32),
        var("useven") / var("uzero"),
        var("useven") % var("uzero"),
        (i(1) << i(33)).bitcast(U32),
        (i(-8) >> i(33)).bitcast(U32),
        u(0x8000_0000) >> u(35),
        Expr::from(3e9f32).cast(I32).bitcast(U32),
        Expr::from(-3e9f32).cast(I32).bitcast(U32),
        var("nan_value").cast(I32).bitcast(U32),
        Expr::from(-1.5f32).cast(U32),
        Expr::from(1e10f32).cast(U32),
        Expr::from(-3.7f32).cast(I32).bitcast(U32),
        math(MathFn::Min, [var("nan_value"), Expr::from(2.0f32)]).bitcast(U32),
        math(MathFn::Max, [Expr::from(3.0f32), var("nan_value")]).bitcast(U32),
        math(MathFn::Abs, [var("min")]).bitcast(U32),
        (-var("min")).bitcast(U32),
        (var("min") - 1i32).bitcast(U32),
        (var("min") * var("m1")).bitcast(U32),
        Expr::from(true).cast(I32).bitcast(U32),
        Expr::from(true).cast(F32).bitcast(U32),
        Expr::from(-0.0f32).cast(Bool).cast(U32),
        var("seven").cast(Bool).cast(U32),
        (Expr::from(-5.5f32) % 2.0f32).bitcast(U32),
        u(7).cast(F32).bitcast(U32),
        i(-7).cast(U32),
        math(MathFn::Min, [var("m1"), i(3)]).bitcast(U32),
        math(MathFn::Min, [u(0xFFFF_FFFF), u(3)]),
        math(
            MathFn::Fma,
            [Expr::from(0.1f32), Expr::from(10.0f32), Expr::from(-1.0f32)],
        )
        .bitcast(U32),
        (Expr::from(0.1f32) * 10.0f32 - 1.0f32).bitcast(U32),
    ];
    let kernel = KernelBuilder::new("edges", map.params()).body(|b| {
        for (k, e) in results.iter().enumerate() {
            b.store(at("y", [u(k as u32)]), e.clone());
        }
    });
    let m = module(vec![mesh], vec![kernel], vec![map]);
    let a = args(
        &[],
        &[
            ("min", Literal::I32(i32::MIN)),
            ("m1", Literal::I32(-1)),
            ("zero", Literal::I32(0)),
            ("seven", Literal::I32(7)),
            ("useven", Literal::U32(7)),
            ("uzero", Literal::U32(0)),
            ("nan_value", Literal::f32(f32::NAN)),
        ],
    );
    let y = run(&m, "edges", &a, &opts(true, 0)).unwrap().outputs["y"].to_bits();
    let min = i32::MIN as u32;
    let expected: Vec<u32> = vec![
        7,
        0,
        min,
        0,
        7,
        0,
        2,
        (-4i32) as u32,
        0x1000_0000,
        i32::MAX as u32,
        min,
        0,
        0,
        u32::MAX,
        (-3i32) as u32,
        2.0f32.to_bits(),
        3.0f32.to_bits(),
        min,
        min,
        i32::MAX as u32,
        min,
        1,
        1.0f32.to_bits(),
        0,
        1,
        (-1.5f32).to_bits(),
        7.0f32.to_bits(),
        (-7i32) as u32,
        (-1i32) as u32,
        3,
        0.1f32.mul_add(10.0, -1.0).to_bits(),
        (0.1f32 * 10.0 - 1.0).to_bits(),
    ];
    assert_eq!(y.len(), expected.len());
    for (k, (got, want)) in y.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "result {k}: {:?}", results[k]);
    }
    // fma rounds once, a*b+c twice: the interpreter must not contract.
    assert_ne!(expected[30], expected[31]);
}

/// Two programs: a producer fills gmem scratch and signals, a consumer waits
/// and reads. The consumer is listed first, so its blocks wait on later ones.
fn producer_consumer(with_wait: bool, consumer_first: bool) -> Module {
    let prod = MeshBuilder::new("prod")
        .grid("b", 4)
        .threads("t", 32)
        .build();
    let cons = MeshBuilder::new("cons")
        .grid("b", 4)
        .threads("t", 32)
        .build();
    let mut mb = MapBuilder::new("pc");
    mb = if consumer_first {
        mb.program("cons", "consume").program("prod", "produce")
    } else {
        mb.program("prod", "produce").program("cons", "consume")
    };
    let map = mb
        .input("x", gmem(F32, [128]))
        .output("y", gmem(F32, [128]))
        .scratch("buf", gmem(F32, [128]))
        .scratch("ready", sem([4]))
        .build();
    let produce = KernelBuilder::new("produce", map.params()).body(|b| {
        b.store(at("buf", [gid()]), load("x", [gid()]) * 2.0f32);
        b.signal(at("ready", [axis_index("b")]), 1i32);
    });
    let consume = KernelBuilder::new("consume", map.params()).body(|b| {
        if with_wait {
            b.wait(at("ready", [axis_index("b")]), 1i32);
        }
        b.store(at("y", [gid()]), load("buf", [gid()]) + 1.0f32);
    });
    module(vec![prod, cons], vec![produce, consume], vec![map])
}

#[test]
fn producer_consumer_through_gmem_scratch_and_a_semaphore() {
    let m = producer_consumer(true, true);
    let xs: Vec<f32> = (0..128).map(|k| k as f32 * 0.5).collect();
    let a = args(&[("x", HostTensor::from_f32(vec![128], &xs))], &[]);
    let expected: Vec<f32> = xs.iter().map(|x| x * 2.0 + 1.0).collect();
    let mut interp = Interpreter::new();
    for o in [opts(false, 0), opts(true, 0), opts(true, 3)] {
        let out = interp.call(&validated(&m), "pc", &a, &o).unwrap();
        assert_eq!(out.outputs["y"].to_f32(), expected);
        let report = interp.last_report().unwrap();
        assert_eq!(report.schedules_run, 1 + o.extra_schedules);
        assert_eq!(report.blocks_run, 8);
        // Every consumer block waited on a producer block scheduled after it.
        let waiters: Vec<u64> = report.late_waits.iter().map(|w| w.site.block).collect();
        assert_eq!(waiters, vec![0, 1, 2, 3]);
        assert!(report
            .late_waits
            .iter()
            .all(|w| w.semaphore == "ready" && w.amount == 1 && w.site.program.index() == 0));
    }
    // With the producer first, no wait has to be met later.
    let m = producer_consumer(true, false);
    interp
        .call(&validated(&m), "pc", &a, &opts(true, 0))
        .unwrap();
    assert_eq!(interp.last_report().unwrap().late_waits, vec![]);
}

#[test]
fn a_missing_wait_is_a_data_race() {
    let m = producer_consumer(false, false);
    let a = args(
        &[(
            "x",
            HostTensor::zeros(F32, vec![128]).expect("small tensor"),
        )],
        &[],
    );
    let e = run(&m, "pc", &a, &opts(true, 0)).unwrap_err();
    let RunError::DataRace {
        reference,
        element,
        first,
        second,
        ..
    } = e
    else {
        panic!("expected a race, got {e}")
    };
    assert_eq!((reference.as_str(), element), ("buf", 0));
    assert_eq!(
        (
            first.program.index(),
            first.kernel.as_str(),
            first.block,
            first.thread
        ),
        (0, "produce", 0, Some(0))
    );
    assert_eq!(
        (
            second.program.index(),
            second.kernel.as_str(),
            second.block,
            second.thread
        ),
        (1, "consume", 0, Some(0))
    );
}

#[test]
fn a_read_before_the_write_is_an_uninitialized_read() {
    // Consumer first and no wait: it reads scratch that nobody wrote yet.
    let m = producer_consumer(false, true);
    let a = args(
        &[(
            "x",
            HostTensor::zeros(F32, vec![128]).expect("small tensor"),
        )],
        &[],
    );
    let e = run(&m, "pc", &a, &opts(true, 0)).unwrap_err();
    assert_eq!(
        e,
        RunError::UninitializedRead {
            site: mpmd_core::backend::Site {
                program: mpmd_core::plan::ProgramId::new(0),
                kernel: "consume".into(),
                block: 0,
                thread: Some(0)
            },
            reference: "buf".into(),
            element: 0,
        }
    );
    assert_eq!(
        e.to_string(),
        "read of memory that was never written at program 0 (consume), block 0, thread 0: `buf` element 0"
    );
}

#[test]
fn local_arrays_are_per_thread_and_start_unwritten() {
    let mesh = MeshBuilder::new("m").grid("b", 1).threads("t", 4).build();
    let map = MapBuilder::new("loc")
        .program("m", "loc")
        .output("y", gmem(U32, [4]))
        .scalar("n", U32)
        .build();
    let kernel = KernelBuilder::new("loc", map.params()).body(|b| {
        let t = b.let_("tid", U32, axis_index("t"));
        b.local_array("a", U32, [4]);
        b.for_("k", U32, 0u32, var("n"), |b, k| {
            b.store(at("a", [k.clone()]), t.clone() * 10u32 + k)
        });
        b.store(at("y", [t.clone()]), load("a", [u(3)]));
    });
    let m = module(vec![mesh], vec![kernel], vec![map]);
    let out = run(
        &m,
        "loc",
        &args(&[], &[("n", Literal::U32(4))]),
        &opts(true, 0),
    )
    .unwrap();
    assert_eq!(out.outputs["y"].words(), vec![3, 13, 23, 33]);
    let e = run(
        &m,
        "loc",
        &args(&[], &[("n", Literal::U32(3))]),
        &opts(true, 0),
    )
    .unwrap_err();
    assert_eq!(e.class(), Some(ErrorClass::UninitializedRead));
    assert!(
        matches!(e, RunError::UninitializedRead { ref reference, element: 3, .. } if reference == "a"),
        "{e}"
    );
}

#[test]
fn threads_of_one_block_race_on_smem_without_a_barrier() {
    let mesh = MeshBuilder::new("m").grid("b", 1).threads("t", 8).build();
    let map = MapBuilder::new("r")
        .program("m", "r")
        .output("y", gmem(U32, [8]))
        .scratch("s", smem(U32, [8]).owned_by("m"))
        .build();
    let body = |with_barrier: bool| {
        KernelBuilder::new("r", map.params()).body(|b| {
            let t = b.let_("tid", U32, axis_index("t"));
            b.store(at("s", [t.clone()]), t.clone());
            if with_barrier {
                b.barrier();
            }
            b.store(at("y", [t.clone()]), load("s", [(t + 1u32) % 8u32]));
        })
    };
    let racy = module(vec![mesh.clone()], vec![body(false)], vec![map.clone()]);
    let e = run(&racy, "r", &args(&[], &[]), &opts(true, 0)).unwrap_err();
    let RunError::DataRace {
        reference,
        element,
        first,
        second,
        ..
    } = e
    else {
        panic!("expected a race, got {e}")
    };
    assert_eq!(
        (reference.as_str(), element, first.thread, second.thread),
        ("s", 1, Some(1), Some(0))
    );
    let fixed = module(vec![mesh], vec![body(true)], vec![map]);
    let out = run(&fixed, "r", &args(&[], &[]), &opts(true, 2)).unwrap();
    assert_eq!(out.outputs["y"].words(), vec![1, 2, 3, 4, 5, 6, 7, 0]);
}

#[test]
fn owned_semaphore_signalled_through_block_coordinates() {
    let p = MeshBuilder::new("p").grid("b", 2).threads("t", 32).build();
    let c = MeshBuilder::new("c").grid("b", 2).threads("t", 32).build();
    let map = MapBuilder::new("own")
        .program("c", "take")
        .program("p", "give")
        .input("x", gmem(F32, [64]))
        .output("y", gmem(F32, [64]))
        .scratch("data", gmem(F32, [32]).owned_by("c"))
        .scratch("ready", sem([1]).owned_by("c"))
        .build();
    // Producer block b fills consumer block (1 - b)'s instance and signals it.
    let give = KernelBuilder::new("give", map.params()).body(|b| {
        let other = b.let_("other", U32, u(1) - axis_index("b"));
        b.store(
            at_block("data", [other.clone()], [axis_index("t")]),
            load("x", [gid()]) * 3.0f32,
        );
        b.signal(at_block("ready", [other], [u(0)]), 1i32);
    });
    let take = KernelBuilder::new("take", map.params()).body(|b| {
        b.wait(at("ready", [u(0)]), 1i32);
        b.store(at("y", [gid()]), load("data", [axis_index("t")]));
    });
    let m = module(vec![p, c], vec![take, give], vec![map]);
    let xs: Vec<f32> = (0..64).map(|k| k as f32).collect();
    let a = args(&[("x", HostTensor::from_f32(vec![64], &xs))], &[]);
    let expected: Vec<f32> = (0..64).map(|k| ((k + 32) % 64) as f32 * 3.0).collect();
    for o in [opts(false, 0), opts(true, 2)] {
        assert_eq!(
            run(&m, "own", &a, &o).unwrap().outputs["y"].to_f32(),
            expected
        );
    }
}

#[test]
fn a_wait_nobody_signals_is_a_deadlock_with_the_wait_for_graph() {
    let mesh = MeshBuilder::new("m").grid("b", 2).threads("t", 4).build();
    let map = MapBuilder::new("dl")
        .program("m", "dl")
        .output("y", gmem(U32, [8]))
        .scratch("s", sem([2]))
        .build();
    let kernel = KernelBuilder::new("dl", map.params()).body(|b| {
        b.signal(at("s", [u(0)]), 1i32);
        b.wait(at("s", [u(1)]), 2i32);
        b.store(at("y", [gid()]), 1u32);
    });
    let m = module(vec![mesh], vec![kernel], vec![map]);
    for o in [opts(false, 0), opts(true, 2)] {
        let e = run(&m, "dl", &args(&[], &[]), &o).unwrap_err();
        assert_eq!(e.class(), Some(ErrorClass::Deadlock));
        let RunError::Deadlock { wait_for_graph } = e else {
            unreachable!()
        };
        assert_eq!(
            wait_for_graph,
            "wait-for graph (no live block can signal):\n  \
             program 0 (dl), block 0 waits on `s[1]` for 2 (count is 0)\n  \
             program 0 (dl), block 1 waits on `s[1]` for 2 (count is 0)"
        );
    }
}

/// Loads and stores whose lanes take consecutive indices are copied as one
/// slice; every other pattern (shifted across the end, reversed, under a
/// partial mask, through smem) must give the same values on every path:
/// fast (no detection), detection and shuffled schedules.
#[test]
fn consecutive_and_scattered_accesses_agree_on_every_path() {
    let mesh = MeshBuilder::new("m").grid("b", 2).threads("t", 64).build();
    let map = MapBuilder::new("patterns")
        .program("m", "patterns")
        .input("x", gmem(U32, [128]))
        .output("shifted", gmem(U32, [128]))
        .output("reversed", gmem(U32, [128]))
        .output_zeroed("upper", gmem(U32, [128]))
        .output("through_smem", gmem(U32, [128]))
        .output("smem_reversed", gmem(U32, [128]))
        .scratch("buf", smem(U32, [64]).owned_by("m"))
        .scratch("buf2", smem(U32, [64]).owned_by("m"))
        .build();
    let kernel = KernelBuilder::new("patterns", map.params()).body(|b| {
        let g = b.let_("g", U32, gid());
        let t = b.let_("t", U32, axis_index("t"));
        // Consecutive except where it wraps round the end of `x`.
        b.store(
            at("shifted", [g.clone()]),
            load("x", [(g.clone() + 100u32) % 128u32]),
        );
        b.store(at("reversed", [u(127) - g.clone()]), load("x", [g.clone()]));
        b.if_(t.clone().ge(16u32), |b| {
            b.store(at("upper", [g.clone()]), load("x", [g.clone()]) + 1u32)
        });
        b.store(at("buf", [u(63) - t.clone()]), load("x", [g.clone()]));
        b.store(at("buf2", [t.clone()]), load("x", [g.clone()]));
        b.barrier();
        b.store(at("through_smem", [g.clone()]), load("buf", [t.clone()]));
        b.store(
            at("smem_reversed", [g.clone()]),
            load("buf2", [u(63) - t.clone()]),
        );
    });
    let m = module(vec![mesh], vec![kernel], vec![map]);
    let x: Vec<u32> = (0..128).map(|k| k * 7 + 3).collect();
    let a = args(&[("x", HostTensor::from_u32(vec![128], &x))], &[]);
    let g = 0..128usize;
    let shifted: Vec<u32> = g.clone().map(|k| x[(k + 100) % 128]).collect();
    let reversed: Vec<u32> = g.clone().map(|k| x[127 - k]).collect();
    let upper: Vec<u32> = g
        .clone()
        .map(|k| if k % 64 >= 16 { x[k] + 1 } else { 0 })
        .collect();
    let through_smem: Vec<u32> = g.map(|k| x[k - k % 64 + 63 - k % 64]).collect();
    for o in [opts(false, 0), opts(true, 0), opts(false, 2)] {
        let out = run(&m, "patterns", &a, &o).unwrap();
        let words = |name: &str| out.outputs[name].to_bits();
        assert_eq!(words("shifted"), shifted, "options {o:?}");
        assert_eq!(words("reversed"), reversed, "options {o:?}");
        assert_eq!(words("upper"), upper, "options {o:?}");
        assert_eq!(words("through_smem"), through_smem, "options {o:?}");
        assert_eq!(words("smem_reversed"), through_smem, "options {o:?}");
    }
}

#[test]
fn out_of_bounds_is_reported_with_its_place_in_every_mode() {
    let mesh = MeshBuilder::new("m").grid("b", 2).threads("t", 8).build();
    let map = MapBuilder::new("oob")
        .program("m", "oob")
        .input("x", gmem(F32, [2, 8]))
        .output("y", gmem(F32, [16]))
        .build();
    let kernel = KernelBuilder::new("oob", map.params()).body(|b| {
        b.store(
            at("y", [gid()]),
            load("x", [axis_index("b"), axis_index("t") + 5u32]),
        );
    });
    let m = module(vec![mesh], vec![kernel], vec![map]);
    let a = args(
        &[(
            "x",
            HostTensor::zeros(F32, vec![2, 8]).expect("small tensor"),
        )],
        &[],
    );
    for o in [opts(false, 0), opts(true, 0), opts(false, 1)] {
        let e = run(&m, "oob", &a, &o).unwrap_err();
        assert_eq!(
            e,
            RunError::OutOfBounds {
                site: mpmd_core::backend::Site {
                    program: mpmd_core::plan::ProgramId::new(0),
                    kernel: "oob".into(),
                    block: 0,
                    thread: Some(3)
                },
                reference: "x".into(),
                index: "[0, 8]".into(),
                shape: "[2, 8]".into(),
            },
            "options {o:?}"
        );
    }
}

#[test]
fn block_coordinates_out_of_bounds_are_reported() {
    let mesh = MeshBuilder::new("m").grid("b", 2).threads("t", 1).build();
    let map = MapBuilder::new("oob")
        .program("m", "oob")
        .output("y", gmem(I32, [1]).owned_by("m"))
        .build();
    let kernel = KernelBuilder::new("oob", map.params()).body(|b| {
        b.store(at_block("y", [axis_index("b") * 2u32], [u(0)]), 1i32);
    });
    let m = module(vec![mesh], vec![kernel], vec![map]);
    let e = run(&m, "oob", &args(&[], &[]), &opts(false, 0)).unwrap_err();
    assert_eq!(e.to_string(), "out-of-bounds access at program 0 (oob), block 1, thread 0: `y` index @[2][0] (shape @[2][1])");
}

/// Detection starts afresh with every call, though one interpreter reuses
/// the memory of earlier calls' access histories: block 0 writes the first
/// half in one call, block 1 in the next, which is no race.
#[test]
fn detection_forgets_the_accesses_of_earlier_calls() {
    let mesh = MeshBuilder::new("m").grid("b", 2).threads("t", 64).build();
    let map = MapBuilder::new("halves")
        .program("m", "halves")
        .output("y", gmem(U32, [128]))
        .scalar("flip", U32)
        .build();
    let kernel = KernelBuilder::new("halves", map.params()).body(|b| {
        let half = b.let_("half", U32, axis_index("b") ^ var("flip"));
        b.store(
            at("y", [half * axis_size("t") + axis_index("t")]),
            axis_index("b") + 1u32,
        );
    });
    let m = module(vec![mesh], vec![kernel], vec![map]);
    let mut interp = Interpreter::new();
    for flip in [0u32, 1, 0, 1] {
        let a = args(&[], &[("flip", Literal::U32(flip))]);
        let out = interp
            .call(&validated(&m), "halves", &a, &opts(true, 2))
            .unwrap();
        let want: Vec<u32> = (0..128u32).map(|k| ((k / 64) ^ flip) + 1).collect();
        assert_eq!(out.outputs["y"].words(), want, "flip {flip}");
    }
}

#[test]
fn residents_hand_data_and_credits_to_a_later_call() {
    let a = MeshBuilder::new("a").grid("b", 1).threads("t", 32).build();
    let bm = MeshBuilder::new("bm").grid("b", 1).threads("t", 32).build();
    let ext = MeshBuilder::new("ext")
        .grid("e", 2)
        .threads("et", 1)
        .build();
    let produce = MapBuilder::new("produce")
        .program("a", "produce")
        .input("x", gmem(F32, [32]))
        .scratch("buf", gmem(F32, [32]).owned_by("ext"))
        .resident()
        .scratch("flag", sem([1]).owned_by("ext"))
        .resident()
        .build();
    let consume = MapBuilder::new("consume")
        .program("bm", "consume")
        .output("y", gmem(F32, [32]))
        .scratch("buf", gmem(F32, [32]).owned_by("ext"))
        .resident()
        .scratch("flag", sem([1]).owned_by("ext"))
        .resident()
        .build();
    let pk = KernelBuilder::new("produce", produce.params()).body(|b| {
        b.store(
            at_block("buf", [u(1)], [axis_index("t")]),
            load("x", [axis_index("t")]) + 1.0f32,
        );
        b.signal(at_block("flag", [u(1)], [u(0)]), 1i32);
    });
    let ck = KernelBuilder::new("consume", consume.params()).body(|b| {
        b.wait(at_block("flag", [u(1)], [u(0)]), 1i32);
        b.store(
            at("y", [axis_index("t")]),
            at_block("buf", [u(1)], [axis_index("t")]).load(),
        );
    });
    let residents = vec![
        Resident {
            name: "buf".into(),
            ty: gmem(F32, [32]).owned_by("ext"),
            zeroed: false,
        },
        Resident {
            name: "flag".into(),
            ty: sem([1]).owned_by("ext"),
            zeroed: true,
        },
    ];
    let m = Module {
        meshes: vec![a, bm, ext],
        kernels: vec![pk, ck],
        maps: vec![produce, consume],
        residents,
        ..Default::default()
    };
    let xs: Vec<f32> = (0..32).map(|k| k as f32).collect();
    let mut interp = Interpreter::new();
    use mpmd_core::Backend;
    assert_eq!(interp.resident("flag"), None);
    let o = opts(true, 0);
    interp
        .call(
            &validated(&m),
            "produce",
            &args(&[("x", HostTensor::from_f32(vec![32], &xs))], &[]),
            &o,
        )
        .unwrap();
    assert_eq!(interp.resident("flag").unwrap().words(), vec![0, 1]);
    let out = interp
        .call(&validated(&m), "consume", &args(&[], &[]), &o)
        .unwrap();
    let expected: Vec<f32> = xs.iter().map(|x| x + 1.0).collect();
    assert_eq!(out.outputs["y"].to_f32(), expected);
    let flag = interp.resident("flag").unwrap();
    assert_eq!(
        (flag.shape().to_vec(), flag.to_bits()),
        (vec![2, 1], vec![0, 0])
    );
    assert_eq!(
        interp.resident("buf").unwrap().words()[32..].to_vec(),
        expected.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    // The credit was consumed: a second consume call deadlocks.
    let e = interp
        .call(&validated(&m), "consume", &args(&[], &[]), &o)
        .unwrap_err();
    assert_eq!(e.class(), Some(ErrorClass::Deadlock));
    assert!(
        e.to_string()
            .contains("waits on `flag@[1][0]` for 1 (count is 0)"),
        "{e}"
    );
}

/// The `Backend` impl runs the plan's IR (map, meshes, unit kernels), not its
/// derived parts; checked mode turns detection on.
#[test]
fn backend_run_uses_the_plans_ir_and_checked_mode_detects() {
    use mpmd_core::plan::{DependencyGraph, LaunchPlan, LaunchUnit};
    use mpmd_core::{Backend, Mode, RunOptions};
    let m = producer_consumer(false, false);
    let valid = validated(&m);
    let map = m.maps[0].clone();
    let units = map
        .programs
        .iter()
        .zip(valid.valid_maps()[0].programs())
        .enumerate()
        .map(|(k, (p, program))| {
            let mesh = m.mesh(&p.mesh).unwrap().clone();
            let kernel = program.kernel().clone();
            LaunchUnit {
                program: mpmd_core::plan::ProgramId::new(k),
                facts: program.facts().clone(),
                block_count: mesh.block_count(),
                threads_per_block: mesh.threads.size,
                mesh,
                kernel,
                smem: vec![],
                smem_bytes: 0,
                axes: vec![],
            }
        })
        .rev()
        .collect();
    let plan = LaunchPlan {
        map,
        meshes: m.meshes.clone(),
        external_meshes: vec![],
        residents: vec![],
        units,
        operands: vec![],
        buffers: vec![],
        graph: DependencyGraph::default(),
    };
    let xs: Vec<f32> = (0..128).map(|k| k as f32).collect();
    let a = args(&[("x", HostTensor::from_f32(vec![128], &xs))], &[]);
    let mut interp = Interpreter::new();
    assert_eq!(interp.name(), "interp");
    let fast = RunOptions {
        mode: Mode::Fast,
        seed: 1,
    };
    let out = interp.run(&plan, &a, &fast).unwrap();
    let expected: Vec<f32> = xs.iter().map(|x| x * 2.0 + 1.0).collect();
    assert_eq!(out.outputs["y"].to_f32(), expected);
    let checked = RunOptions {
        mode: Mode::Checked,
        seed: 1,
    };
    let e = interp.run(&plan, &a, &checked).unwrap_err();
    assert_eq!(e.class(), Some(ErrorClass::DataRace));
}

#[test]
fn wait_nodec_keeps_the_count_and_read_sees_it() {
    let p = MeshBuilder::new("p").grid("pb", 4).threads("t", 2).build();
    let c = MeshBuilder::new("c").grid("b", 2).threads("t", 2).build();
    let map = MapBuilder::new("nodec")
        .program("c", "look")
        .program("p", "post")
        .output("y", gmem(I32, [4]))
        .scratch("s", sem([1]))
        .build();
    let post = KernelBuilder::new("post", map.params()).body(|b| b.signal(at("s", [u(0)]), 1i32));
    let look = KernelBuilder::new("look", map.params()).body(|b| {
        b.wait_nodec(at("s", [u(0)]), 4i32);
        let seen = b.sem_read("seen", at("s", [u(0)]));
        b.store(at("y", [gid()]), seen);
    });
    let m = module(vec![p, c], vec![look, post], vec![map]);
    for o in [opts(false, 0), opts(true, 3)] {
        assert_eq!(
            run(&m, "nodec", &args(&[], &[]), &o).unwrap().outputs["y"].to_i32(),
            vec![4; 4]
        );
    }
}

#[test]
fn grid_and_cluster_axes_index_blocks_row_major() {
    let mesh = MeshBuilder::new("m")
        .grid("g", 3)
        .cluster("c", 2)
        .threads("t", 2)
        .build();
    let map = MapBuilder::new("ids")
        .program("m", "ids")
        .output("y", gmem(U32, [2]).owned_by("m"))
        .build();
    let kernel = KernelBuilder::new("ids", map.params()).body(|b| {
        let v = axis_index("g") * 100u32 + axis_index("c") * 10u32 + axis_index("t");
        b.store(at("y", [axis_index("t")]), v);
    });
    let m = module(vec![mesh], vec![kernel], vec![map]);
    let y = run(&m, "ids", &args(&[], &[]), &opts(true, 0))
        .unwrap()
        .outputs["y"]
        .clone();
    assert_eq!(y.shape(), vec![3, 2, 2]);
    assert_eq!(
        y.words(),
        vec![0, 1, 10, 11, 100, 101, 110, 111, 200, 201, 210, 211]
    );
}

/// `flush_subnormals` computes as a flushing adapter does: subnormal f32
/// operands and results of float operations become signed zeros, while
/// moves, stores and bitcasts keep their bits. Without it, IEEE results.
#[test]
fn flushing_subnormals_changes_exactly_the_float_operations() {
    let s = f32::from_bits(1 << 22); // 2^-127, subnormal
    let t = f32::from_bits(1 << 21); // 2^-128, another subnormal
    let mesh = MeshBuilder::new("m").grid("b", 1).threads("t", 1).build();
    let map = MapBuilder::new("ftz")
        .program("m", "ftz")
        .input("x", gmem(F32, [2]))
        .output("f", gmem(F32, [8]))
        .output("c", gmem(U32, [2]))
        .build();
    let kernel = KernelBuilder::new("ftz", map.params()).body(|b| {
        let s = b.let_("s", F32, load("x", [u(0)]));
        let t = b.let_("t", F32, load("x", [u(1)]));
        let min_normal = Expr::from(f32::MIN_POSITIVE);
        let results = [
            s.clone() + s.clone(),                   // 2^-126, or 0
            s.clone() / s.clone(),                   // 1, or NaN
            min_normal.clone() * Expr::from(0.5f32), // 2^-127, or 0
            math(MathFn::Sqrt, [s.clone()]),         // 2^-63.5, or 0
            -s.clone(),                              // -2^-127, or -0
            s.clone(),                               // a move: kept
            math(
                MathFn::Fma,
                [s.clone(), Expr::from(2.0f32.powi(126)), Expr::from(0.0f32)],
            ), // 0.5, or 0
            s.clone().bitcast(U32).bitcast(F32),     // bitcasts: kept
        ];
        for (k, value) in results.into_iter().enumerate() {
            b.store(at("f", [u(k as u32)]), value);
        }
        b.store(at("c", [u(0)]), select(s.clone().eq(t.clone()), u(1), u(0)));
        b.store(
            at("c", [u(1)]),
            select(s.lt(min_normal * Expr::from(0.25f32)), u(1), u(0)),
        );
    });
    let m = module(vec![mesh], vec![kernel], vec![map]);
    let a = args(&[("x", HostTensor::from_f32(vec![2], &[s, t]))], &[]);
    let bits = |out: &CallOutputs, name: &str| out.outputs[name].to_bits();

    let ieee = run(&m, "ftz", &a, &opts(true, 0)).unwrap();
    let flushing = InterpOptions {
        flush_subnormals: true,
        ..opts(true, 0)
    };
    let ftz = run(&m, "ftz", &a, &flushing).unwrap();

    let sqrt_s = s.sqrt().to_bits();
    assert_eq!(
        bits(&ieee, "f"),
        vec![
            f32::MIN_POSITIVE.to_bits(),
            1.0f32.to_bits(),
            s.to_bits(),
            sqrt_s,
            (-s).to_bits(),
            s.to_bits(),
            0.5f32.to_bits(),
            s.to_bits()
        ]
    );
    let f = bits(&ftz, "f");
    assert_eq!(f[0], 0);
    assert!(f32::from_bits(f[1]).is_nan(), "0 / 0");
    assert_eq!(f[2..], [0, 0, 0x8000_0000, s.to_bits(), 0, s.to_bits()]);
    // s == t: false in IEEE, true flushed (both become zero). s < 2^-126 *
    // 0.25: false either way (IEEE: 2^-127 > 2^-128; flushed: the product
    // is flushed too, and 0 < 0 is false).
    assert_eq!(bits(&ieee, "c"), vec![0, 0]);
    assert_eq!(bits(&ftz, "c"), vec![1, 0]);
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
