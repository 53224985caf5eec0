//! Interpreter throughput in elements/s over 2^20 elements, detection off
//! and on: an elementwise kernel in f32, f16 and bf16, a barrier-heavy smem
//! tree reduction, and a row sum (one thread a row, f32 accumulation) over
//! f32 and bf16 rows. The 16-bit kernels should reach at least half the
//! f32 elements per second (issue 12).
//!
//! `cargo bench -p mpmd-core --bench interp` (`-- f16` for the 16-bit ones)

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::ir::ScalarType::*;
use mpmd_core::ir::*;
use mpmd_core::{CallArgs, HostTensor};

const N: u32 = 1 << 20;
const THREADS: u32 = 128;

fn gid() -> Expr {
    axis_index("b") * axis_size("t") + axis_index("t")
}

/// One in `ty`.
fn one(ty: ScalarType) -> Literal {
    match ty {
        F16 => Literal::F16(half::f16::ONE.to_bits()),
        BF16 => Literal::BF16(half::bf16::ONE.to_bits()),
        _ => Literal::f32(1.0),
    }
}

/// `y[i] = x[i] * alpha + 1` in `ty`, the index from `axis_index`.
fn elementwise(ty: ScalarType) -> Module {
    let mesh = MeshBuilder::new("m")
        .grid("b", N / THREADS)
        .threads("t", THREADS)
        .build();
    let map = MapBuilder::new("axpb")
        .program("m", "axpb")
        .input("x", gmem(ty, [N]))
        .output("y", gmem(ty, [N]))
        .scalar("alpha", ty)
        .build();
    let kernel = KernelBuilder::new("axpb", map.params()).body(|b| {
        let i = b.let_("i", U32, gid());
        b.store(
            at("y", [i.clone()]),
            load("x", [i]) * var("alpha") + Expr::from(one(ty)),
        );
    });
    Module {
        meshes: vec![mesh],
        kernels: vec![kernel],
        maps: vec![map],
        ..Default::default()
    }
}

/// Per block: smem tree reduction with a barrier after every step.
fn tree_reduction() -> Module {
    let blocks = N / THREADS;
    let mesh = MeshBuilder::new("m")
        .grid("b", blocks)
        .threads("t", THREADS)
        .build();
    let map = MapBuilder::new("sum")
        .program("m", "sum")
        .input("x", gmem(F32, [N]))
        .output("y", gmem(F32, [blocks]))
        .scratch("buf", smem(F32, [THREADS]).owned_by("m"))
        .build();
    let kernel = KernelBuilder::new("sum", map.params()).body(|b| {
        let t = b.let_("tid", U32, axis_index("t"));
        b.store(at("buf", [t.clone()]), load("x", [gid()]));
        b.barrier();
        b.for_("k", U32, 0u32, THREADS.trailing_zeros(), |b, k| {
            let half = b.let_("half", U32, Expr::from(THREADS / 2) >> k);
            b.if_(t.clone().lt(half.clone()), |b| {
                let sum = load("buf", [t.clone()]) + load("buf", [t.clone() + half.clone()]);
                b.store(at("buf", [t.clone()]), sum);
            });
            b.barrier();
        });
        b.if_(t.clone().eq(0u32), |b| {
            b.store(at("y", [axis_index("b")]), load("buf", [Expr::from(0u32)]))
        });
    });
    Module {
        meshes: vec![mesh],
        kernels: vec![kernel],
        maps: vec![map],
        ..Default::default()
    }
}

const ROW: u32 = 256;

/// `s[r] = sum of f32(x[r * ROW + c])` over a row, one thread a row (the
/// mixed-precision pattern for bf16: 16-bit loads, f32 accumulation).
fn row_sum(ty: ScalarType) -> Module {
    let rows = N / ROW;
    let mesh = MeshBuilder::new("m")
        .grid("b", rows / THREADS)
        .threads("t", THREADS)
        .build();
    let map = MapBuilder::new("rows")
        .program("m", "rows")
        .input("x", gmem(ty, [N]))
        .output("s", gmem(F32, [rows]))
        .build();
    let kernel = KernelBuilder::new("rows", map.params()).body(|b| {
        let r = b.let_("r", U32, gid());
        let acc = b.var("acc", F32, 0.0f32);
        b.for_("c", U32, 0u32, ROW, |b, c| {
            let x = load("x", [r.clone() * ROW + c]);
            let x = if ty == F32 { x } else { x.cast(F32) };
            b.assign("acc", acc.clone() + x);
        });
        b.store(at("s", [r]), acc);
    });
    Module {
        meshes: vec![mesh],
        kernels: vec![kernel],
        maps: vec![map],
        ..Default::default()
    }
}

/// The inputs: `x` of `ty` (values exact in every type) and `alpha`.
fn args(ty: ScalarType) -> CallArgs {
    let xs: Vec<f32> = (0..N).map(|k| (k % 64) as f32 * 0.25).collect();
    let x = match ty {
        F16 => HostTensor::from_f16(
            vec![N],
            &xs.iter()
                .map(|&v| half::f16::from_f32(v))
                .collect::<Vec<_>>(),
        ),
        BF16 => HostTensor::from_bf16(
            vec![N],
            &xs.iter()
                .map(|&v| half::bf16::from_f32(v))
                .collect::<Vec<_>>(),
        ),
        _ => HostTensor::from_f32(vec![N], &xs),
    };
    let alpha = match ty {
        F16 => Literal::F16(half::f16::from_f32(1.5).to_bits()),
        BF16 => Literal::BF16(half::bf16::from_f32(1.5).to_bits()),
        _ => Literal::f32(1.5),
    };
    let mut args = CallArgs::default();
    args.inputs.insert("x".into(), x);
    args.scalars.insert("alpha".into(), alpha);
    args
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("interp");
    group.throughput(Throughput::Elements(N as u64));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for (name, module, map, ty) in [
        ("elementwise", elementwise(F32), "axpb", F32),
        ("elementwise_f16", elementwise(F16), "axpb", F16),
        ("elementwise_bf16", elementwise(BF16), "axpb", BF16),
        ("tree_reduction", tree_reduction(), "sum", F32),
        ("row_sum", row_sum(F32), "rows", F32),
        ("row_sum_bf16", row_sum(BF16), "rows", BF16),
    ] {
        let mut args = args(ty);
        if map != "axpb" {
            args.scalars.clear();
        }
        for detect in [false, true] {
            let options = InterpOptions {
                detect,
                ..Default::default()
            };
            let mut interp = Interpreter::new();
            let label = if detect { "detect_on" } else { "detect_off" };
            group.bench_function(BenchmarkId::new(name, label), |b| {
                b.iter(|| {
                    interp
                        .call(&validated(&module), map, &args, &options)
                        .expect("benchmark kernel runs")
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
