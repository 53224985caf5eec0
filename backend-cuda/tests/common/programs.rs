//! Programs the CUDA tests compile: together they use every statement,
//! expression, atomic, semaphore operation and math function of the IR.
//! Built with mpmd-core alone, so the crate's unit tests include this file
//! too (src/tests).
#![allow(dead_code)]

use mpmd_core::ir::ScalarType::*;
use mpmd_core::ir::*;
use mpmd_core::plan::{lower, LaunchPlan};

pub fn module(meshes: Vec<Mesh>, kernels: Vec<Kernel>, map: MpmdMap) -> Module {
    Module {
        meshes,
        kernels,
        maps: vec![map],
        ..Default::default()
    }
}

pub fn plan_of(m: &Module) -> LaunchPlan {
    lower(&validated(m), &m.maps[0].name).expect("lowers")
}

/// `y[i] = x[i] * alpha` over 4 x 128 threads, guarded by `n`.
pub fn scale() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 4).threads("t", 128).build();
    let map = MapBuilder::new("scale")
        .program("m", "scale")
        .input("x", gmem(F32, [512]))
        .output("y", gmem(F32, [512]))
        .scalar("alpha", F32)
        .scalar("n", U32)
        .build();
    let kernel = KernelBuilder::new("scale", map.params()).body(|b| {
        let i = b.let_("i", U32, axis_index("b") * axis_size("t") + axis_index("t"));
        b.if_(i.clone().lt(var("n")), |b| {
            b.store(at("y", [i.clone()]), load("x", [i]) * var("alpha"));
        });
    });
    module(vec![mesh], vec![kernel], map)
}

/// Every unary and binary operator, cast, bitcast, select, math function,
/// literal kind, `var`/assign, `for` and local arrays.
pub fn all_expressions() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 2).threads("t", 64).build();
    let map = MapBuilder::new("exprs")
        .program("m", "exprs")
        .input("xf", gmem(F32, [128]))
        .input("xi", gmem(I32, [128]))
        .input("xu", gmem(U32, [128]))
        .input("xb", gmem(Bool, [128]))
        .output("yf", gmem(F32, [128]))
        .output("yi", gmem(I32, [128]))
        .output("yu", gmem(U32, [128]))
        .output("yb", gmem(Bool, [128]))
        .scalar("k", I32)
        .scalar("s", F32)
        .build();
    let kernel = KernelBuilder::new("exprs", map.params()).body(|b| {
        let i = b.let_("i", U32, axis_index("b") * axis_size("t") + axis_index("t"));
        let f = b.let_("f", F32, load("xf", [i.clone()]));
        let n = b.let_("n", I32, load("xi", [i.clone()]));
        let u = b.let_("u", U32, load("xu", [i.clone()]));
        let c = b.let_("c", Bool, load("xb", [i.clone()]));
        // f32 arithmetic and every math function.
        let mut fe = f.clone() + var("s");
        fe = fe - f.clone() * Expr::from(2.5f32);
        fe = fe / (f.clone() + Expr::from(1.0f32));
        fe = fe % Expr::from(0.1f32);
        fe = -fe;
        for mf in MathFn::ALL.into_iter().filter(|f| f.accepts_floats()) {
            let args: Vec<Expr> = (0..mf.arity()).map(|_| f.clone()).collect();
            fe = fe + math(mf, args);
        }
        fe = fe
            + Expr::from(f32::INFINITY)
            + Expr::from(f32::NEG_INFINITY)
            + Expr::from(f32::NAN)
            + Expr::from(-0.0f32)
            + Expr::from(1e-45f32);
        fe = fe + n.clone().cast(F32) + u.clone().cast(F32) + c.clone().cast(F32);
        fe = fe + u.clone().bitcast(F32) + n.clone().bitcast(F32);
        let acc = b.var("acc", F32, fe);
        // Integer arithmetic on i32 and u32, every operator.
        let int_ops = |x: Expr, y: Expr| {
            let mut e = x.clone() + y.clone();
            e = e - x.clone() * y.clone();
            e = e / y.clone() + x.clone() % y.clone();
            e = (e & y.clone()) | (x.clone() ^ y.clone());
            e = (e << y.clone()) >> x.clone();
            e = -e;
            e = Expr::Unary(UnaryOp::BitNot, Box::new(e));
            e = e
                + math(MathFn::Abs, [x.clone()])
                + math(MathFn::Min, [x.clone(), y.clone()])
                + math(MathFn::Max, [x.clone(), y]);
            for bits in MathFn::ALL.into_iter().filter(|f| f.is_bit_operation()) {
                e = e + math(bits, [x.clone()]);
            }
            e
        };
        let ni = b.var(
            "ni",
            I32,
            int_ops(n.clone(), var("k")) + Expr::from(i32::MIN) + Expr::from(-7),
        );
        let nu = b.var(
            "nu",
            U32,
            int_ops(u.clone(), Expr::from(3u32)) + Expr::from(u32::MAX),
        );
        b.assign(
            "ni",
            ni.clone()
                + f.clone().cast(I32)
                + u.clone().cast(I32)
                + c.clone().cast(I32)
                + f.clone().bitcast(I32)
                + u.clone().bitcast(I32),
        );
        b.assign(
            "nu",
            nu.clone()
                + f.clone().cast(U32)
                + n.clone().cast(U32)
                + c.clone().cast(U32)
                + f.clone().bitcast(U32)
                + n.clone().bitcast(U32),
        );
        // Comparisons and logic.
        let cmp = f
            .clone()
            .lt(var("s"))
            .and(n.clone().ge(var("k")))
            .or(u.clone().le(Expr::from(5u32)).and(!c.clone()))
            .or(f
                .clone()
                .gt(Expr::from(0.0f32))
                .and(n.clone().ne(Expr::from(0))))
            .or(c.clone().eq(Expr::from(true)))
            .or(f.clone().cast(Bool))
            .or(n.clone().cast(Bool))
            .or(u.clone().cast(Bool));
        let flag = b.let_("flag", Bool, cmp);
        // Local arrays, loops with constant and scalar bounds.
        b.local_array("tmp", F32, [4, 2]);
        b.for_("r", U32, 0u32, 4u32, |b, r| {
            b.for_("q", U32, 0u32, 2u32, |b, q| {
                b.store(
                    at("tmp", [r.clone(), q.clone()]),
                    acc.clone() * r.clone().cast(F32) + q.cast(F32),
                );
            });
        });
        b.for_("j", I32, 0, var("k"), |b, j| {
            b.assign(
                "acc",
                acc.clone() + load("tmp", [j.cast(U32) % Expr::from(4u32), Expr::from(1u32)]),
            );
        });
        b.store(
            at("yf", [i.clone()]),
            select(flag.clone(), acc.clone(), f.clone()),
        );
        b.store(at("yi", [i.clone()]), select(flag.clone(), ni, n));
        b.store(at("yu", [i.clone()]), nu);
        b.store(at("yb", [i]), !flag);
    });
    module(vec![mesh], vec![kernel], map)
}

/// Every atomic op on i32 and u32 gmem, and on smem; with and without results.
pub fn atomics() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 3).threads("t", 96).build();
    let map = MapBuilder::new("atomics")
        .program("m", "atomics")
        .output_zeroed("ci", gmem(I32, [16]))
        .output_zeroed("cu", gmem(U32, [16]))
        .output("old", gmem(U32, [288]))
        .scratch("tile", smem(U32, [16]))
        .build();
    let kernel = KernelBuilder::new("atomics", map.params()).body(|b| {
        let t = b.let_("t", U32, axis_index("t"));
        let g = b.let_("g", U32, axis_index("b") * axis_size("t") + t.clone());
        b.if_(t.clone().lt(Expr::from(16u32)), |b| {
            b.atomic(AtomicOp::Store, at("tile", [t.clone()]), [Expr::from(0u32)]);
        });
        b.barrier();
        let mut sum: Expr = Expr::from(0u32);
        for (k, op) in AtomicOp::ALL.into_iter().enumerate() {
            let slot = Expr::from(k as u32);
            let args: Vec<Expr> = match op.arity() {
                0 => vec![],
                1 => vec![t.clone()],
                _ => vec![Expr::from(0u32), t.clone()],
            };
            if op.returns_value() {
                let name = format!("ou{k}");
                sum = sum + b.atomic_let(&name, U32, op, at("cu", [slot.clone()]), args.clone());
                let iargs: Vec<Expr> = args.iter().map(|a| a.clone().cast(I32)).collect();
                let v = b.atomic_let(&format!("oi{k}"), I32, op, at("ci", [slot.clone()]), iargs);
                sum = sum + v.cast(U32);
                let s = b.atomic_let(&format!("os{k}"), U32, op, at("tile", [slot]), args);
                sum = sum + s;
            } else {
                b.atomic(op, at("cu", [slot.clone()]), args.clone());
                let iargs: Vec<Expr> = args.iter().map(|a| a.clone().cast(I32)).collect();
                b.atomic(op, at("ci", [slot.clone()]), iargs);
                b.atomic(op, at("tile", [slot]), args);
            }
        }
        b.store(at("old", [g]), sum);
    });
    module(vec![mesh], vec![kernel], map)
}

/// f32 atomics on gmem and smem (3 blocks x 96 threads): add of t / 2 into
/// `facc[0]` (6840), min and max of t - 10 (-10, 85), exchange and load,
/// per-block smem sums of 1.0 added into `facc[5]` (288), and min / max
/// with NaN operands, which keep the other operand (95, -95).
pub fn f32_atomics() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 3).threads("t", 96).build();
    let map = MapBuilder::new("f32_atomics")
        .program("m", "f32_atomics")
        .output_zeroed("facc", gmem(F32, [8]))
        .scratch("ftile", smem(F32, [1]))
        .build();
    let kernel = KernelBuilder::new("f32_atomics", map.params()).body(|b| {
        let t = b.let_("t", U32, axis_index("t"));
        let tf = b.let_("tf", F32, t.clone().cast(F32));
        let slot = |k: u32| at("facc", [Expr::from(k)]);
        b.atomic(AtomicOp::Add, slot(0), [tf.clone() * 0.5f32]);
        b.atomic(AtomicOp::Min, slot(1), [tf.clone() - 10.0f32]);
        let old = b.atomic_let(
            "old_max",
            F32,
            AtomicOp::Max,
            slot(2),
            [tf.clone() - 10.0f32],
        );
        let swapped = b.atomic_let("swapped", F32, AtomicOp::Exchange, slot(3), [old]);
        let seen = b.atomic_let("seen", F32, AtomicOp::Load, slot(4), []);
        b.atomic(AtomicOp::Store, slot(4), [seen + swapped * 0.0f32]);
        b.if_(t.clone().eq(0u32), |b| {
            b.atomic(
                AtomicOp::Store,
                at("ftile", [Expr::from(0u32)]),
                [Expr::from(0.0f32)],
            );
        });
        b.barrier();
        b.atomic(
            AtomicOp::Add,
            at("ftile", [Expr::from(0u32)]),
            [Expr::from(1.0f32)],
        );
        b.barrier();
        b.if_(t.clone().eq(0u32), |b| {
            let block = b.atomic_let(
                "block",
                F32,
                AtomicOp::Load,
                at("ftile", [Expr::from(0u32)]),
                [],
            );
            b.atomic(AtomicOp::Add, slot(5), [block]);
        });
        let nan = Expr::from(f32::NAN);
        let three = (t.clone() % 3u32).eq(0u32);
        b.atomic(
            AtomicOp::Max,
            slot(6),
            [select((t % 2u32).eq(0u32), nan.clone(), tf.clone())],
        );
        b.atomic(AtomicOp::Min, slot(7), [select(three, nan, -tf)]);
    });
    module(vec![mesh], vec![kernel], map)
}

/// A three-program pipeline with odd thread counts (48, 96, 128):
/// `produce` fills one row per block of `mid` and signals the consumer block
/// that owns it; `consume` waits on its own semaphore instance, transforms
/// through smem with barriers, and signals `finish`; `finish` uses
/// `wait_nodec` and `read`, and writes to a resident ref owned by an
/// external mesh through `@[coords]`.
/// Three programs of 48, 96 and 128 threads handing data on through
/// semaphores, owned refs, smem and device-resident refs.
pub fn pipeline() -> Module {
    pipeline_with_producer_threads(48)
}

/// [`pipeline`] with 32 producer threads: every thread count is a multiple of
/// the warp size, so the resident walk runs it (named barriers for the
/// programs smaller than the block).
pub fn pipeline_in_warps() -> Module {
    pipeline_with_producer_threads(32)
}

/// `producer_threads` must divide 96.
fn pipeline_with_producer_threads(producer_threads: u32) -> Module {
    let produce = MeshBuilder::new("producer")
        .grid("pb", 4)
        .threads("pt", producer_threads)
        .build();
    let consume = MeshBuilder::new("consumer")
        .grid("cb", 2)
        .cluster("cc", 2)
        .threads("ct", 96)
        .build();
    let finish = MeshBuilder::new("finisher")
        .grid("fb", 1)
        .threads("ft", 128)
        .build();
    let ext = MeshBuilder::new("ext")
        .grid("eb", 2)
        .threads("et", 32)
        .build();
    let map = MapBuilder::new("pipeline")
        .program("producer", "produce")
        .program("consumer", "consume")
        .program("finisher", "finish")
        .input("x", gmem(F32, [4, 96]))
        .output("y", gmem(F32, [96]).owned_by("consumer"))
        .output_zeroed("total", gmem(I32, [1]))
        .scalar("scale", F32)
        .scratch("mid", gmem(F32, [96]).owned_by("consumer"))
        .scratch("ready", sem([1]).owned_by("consumer"))
        .scratch("done", sem([1]))
        .scratch("tile", smem(F32, [96]).owned_by("consumer"))
        .scratch("hand", gmem(F32, [4]).owned_by("ext"))
        .resident()
        .scratch("credits", sem([2]).owned_by("ext"))
        .resident()
        .build();
    let params = map.params();
    let produce_k = KernelBuilder::new("produce", params.clone()).body(|b| {
        let pb = b.let_("pb", U32, axis_index("pb"));
        let c0 = b.let_("c0", U32, pb.clone() / Expr::from(2u32));
        let c1 = b.let_("c1", U32, pb.clone() % Expr::from(2u32));
        b.for_("k", U32, 0u32, 96 / producer_threads, |b, k| {
            let col = b.let_("col", U32, k * axis_size("pt") + axis_index("pt"));
            b.store(
                at_block("mid", [c0.clone(), c1.clone()], [col.clone()]),
                load("x", [pb.clone(), col]) * var("scale"),
            );
        });
        b.signal(at_block("ready", [c0, c1], [Expr::from(0u32)]), 1);
    });
    let consume_k = KernelBuilder::new("consume", params.clone()).body(|b| {
        let t = b.let_("t", U32, axis_index("ct"));
        b.wait(at("ready", [Expr::from(0u32)]), 1);
        b.store(at("tile", [t.clone()]), load("mid", [t.clone()]));
        b.barrier();
        let mirrored = b.let_("m", U32, Expr::from(95u32) - t.clone());
        b.store(
            at("y", [t.clone()]),
            load("tile", [mirrored]) + math(MathFn::Sqrt, [load("mid", [t.clone()])]),
        );
        b.if_(t.eq(Expr::from(0u32)), |b| {
            b.atomic(
                AtomicOp::Add,
                at("total", [Expr::from(0u32)]),
                [Expr::from(1)],
            );
        });
        b.signal(at("done", [Expr::from(0u32)]), 1);
    });
    let finish_k = KernelBuilder::new("finish", params).body(|b| {
        b.wait_nodec(at("done", [Expr::from(0u32)]), 4);
        let seen = b.sem_read("seen", at("done", [Expr::from(0u32)]));
        b.if_(axis_index("ft").lt(Expr::from(4u32)), |b| {
            b.store(
                at_block("hand", [Expr::from(1u32)], [axis_index("ft")]),
                seen.cast(F32),
            );
        });
        b.signal(
            at_block("credits", [Expr::from(1u32)], [Expr::from(0u32)]),
            1,
        );
    });
    Module {
        meshes: vec![produce, consume, finish, ext],
        kernels: vec![produce_k, consume_k, finish_k],
        maps: vec![map],
        residents: vec![
            Resident {
                name: "hand".into(),
                ty: gmem(F32, [4]).owned_by("ext"),
                zeroed: true,
            },
            Resident {
                name: "credits".into(),
                ty: sem([2]).owned_by("ext"),
                zeroed: true,
            },
        ],
        ..Default::default()
    }
}

/// Two programs that wait on each other (a cycle): needs co-residency.
pub fn cycle() -> Module {
    let a = MeshBuilder::new("a")
        .grid("ab", 2)
        .threads("at", 64)
        .build();
    let c = MeshBuilder::new("c")
        .grid("cb", 2)
        .threads("ct", 32)
        .build();
    let map = MapBuilder::new("ping")
        .program("a", "ping")
        .program("c", "pong")
        .output("y", gmem(U32, [4]))
        .scratch("to_c", sem([1]))
        .scratch("to_a", sem([1]))
        .build();
    let params = map.params();
    let ping = KernelBuilder::new("ping", params.clone()).body(|b| {
        b.signal(at("to_c", [Expr::from(0u32)]), 1);
        b.wait(at("to_a", [Expr::from(0u32)]), 1);
        b.store(at("y", [axis_index("ab")]), Expr::from(1u32));
    });
    let pong = KernelBuilder::new("pong", params).body(|b| {
        b.wait(at("to_c", [Expr::from(0u32)]), 1);
        b.signal(at("to_a", [Expr::from(0u32)]), 1);
        b.store(
            at("y", [axis_index("cb") + Expr::from(2u32)]),
            Expr::from(2u32),
        );
    });
    module(vec![a, c], vec![ping, pong], map)
}

/// Every test program.
pub fn corpus() -> Vec<(&'static str, Module)> {
    vec![
        ("scale", scale()),
        ("all_expressions", all_expressions()),
        ("atomics", atomics()),
        ("f32_atomics", f32_atomics()),
        ("pipeline", pipeline()),
        ("cycle", cycle()),
    ]
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
