//! Interpreter throughput in elements/s: an elementwise kernel and a
//! barrier-heavy smem tree reduction over 2^20 f32, detection off and on.
//!
//! `cargo bench -p mpmd-core --bench interp`

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

/// `y[i] = x[i] * alpha + 1.0`, the index from `axis_index`.
fn elementwise() -> Module {
    let mesh = MeshBuilder::new("m")
        .grid("b", N / THREADS)
        .threads("t", THREADS)
        .build();
    let map = MapBuilder::new("axpb")
        .program("m", "axpb")
        .input("x", gmem(F32, [N]))
        .output("y", gmem(F32, [N]))
        .scalar("alpha", F32)
        .build();
    let kernel = KernelBuilder::new("axpb", map.params()).body(|b| {
        let i = b.let_("i", U32, gid());
        b.store(at("y", [i.clone()]), load("x", [i]) * var("alpha") + 1.0f32);
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

fn bench(c: &mut Criterion) {
    let xs: Vec<f32> = (0..N).map(|k| (k % 1000) as f32 * 0.25).collect();
    let mut args = CallArgs::default();
    args.inputs
        .insert("x".into(), HostTensor::from_f32(vec![N], &xs));
    args.scalars.insert("alpha".into(), Literal::f32(1.5));
    let mut group = c.benchmark_group("interp");
    group.throughput(Throughput::Elements(N as u64));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for (name, module, map) in [
        ("elementwise", elementwise(), "axpb"),
        ("tree_reduction", tree_reduction(), "sum"),
    ] {
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
                        .call(&module, map, &args, &options)
                        .expect("benchmark kernel runs")
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
