//! The benchmark maps, built in code: copy, elementwise, block reduction
//! (f32, and f16 / bf16 in as many bytes), two programs fused, three-stage
//! pipelines, a tiny kernel.

use mpmd_core::host::HostTensor;
use mpmd_core::ir::ScalarType::*;
use mpmd_core::ir::*;
use mpmd_core::plan::{lower, LaunchPlan};

/// 256 MiB of f32.
pub const BIG: u32 = 64 * 1024 * 1024;

/// 256 MiB of a 16-bit float (as many bytes as `BIG` f32s).
pub const BIG16: u32 = 2 * BIG;

pub fn module(
    meshes: Vec<Mesh>,
    kernels: Vec<Kernel>,
    maps: Vec<MpmdMap>,
    residents: Vec<Resident>,
) -> Module {
    Module {
        meshes,
        kernels,
        maps,
        residents,
        ..Default::default()
    }
}

/// Work split of a bandwidth-bound program: each thread handles `per_thread`
/// elements, `threads` apart, so every step of the loop is coalesced.
#[derive(Clone, Copy)]
pub struct Split {
    per_thread: u32,
    threads: u32,
}

impl Split {
    pub const fn new(per_thread: u32, threads: u32) -> Self {
        Split {
            per_thread,
            threads,
        }
    }

    pub fn per_block(self) -> u32 {
        self.per_thread * self.threads
    }

    pub fn blocks(self, len: u32) -> u32 {
        len / self.per_block()
    }

    pub fn label(self) -> String {
        format!("e{}t{}", self.per_thread, self.threads)
    }

    /// A one-axis mesh covering `len` elements.
    pub fn mesh(self, name: &str, block_axis: &str, thread_axis: &str, len: u32) -> Mesh {
        MeshBuilder::new(name)
            .grid(block_axis, self.blocks(len))
            .threads(thread_axis, self.threads)
            .build()
    }

    /// `body(b, i)` for each element `i` of this thread.
    pub fn each(
        self,
        b: &mut BodyBuilder,
        block_axis: &str,
        thread_axis: &str,
        mut body: impl FnMut(&mut BodyBuilder, Expr),
    ) {
        let base = b.let_(
            "base",
            U32,
            axis_index(block_axis) * Expr::from(self.per_block()) + axis_index(thread_axis),
        );
        let threads = self.threads;
        b.for_("k", U32, 0u32, self.per_thread, |b, k| {
            let i = b.let_("i", U32, base.clone() + k * Expr::from(threads));
            body(b, i);
        });
    }
}

/// The one-element-per-thread form (1024 threads) and the coarsened form a
/// bandwidth-bound kernel is usually written in.
pub const SPLITS: [Split; 5] = [
    Split::new(1, 1024),
    Split::new(8, 256),
    Split::new(16, 256),
    Split::new(8, 512),
    Split::new(4, 1024),
];

pub fn copy(split: Split) -> Module {
    let mesh = split.mesh("m", "b", "t", BIG);
    let map = MapBuilder::new("copy")
        .program("m", "copy")
        .input("x", gmem(F32, [BIG]))
        .output("y", gmem(F32, [BIG]))
        .build();
    let k = KernelBuilder::new("copy", map.params()).body(|b| {
        split.each(b, "b", "t", |b, i| {
            b.store(at("y", [i.clone()]), load("x", [i]))
        });
    });
    module(vec![mesh], vec![k], vec![map], vec![])
}

pub fn elementwise(split: Split) -> Module {
    let mesh = split.mesh("m", "b", "t", BIG);
    let map = MapBuilder::new("axpb")
        .program("m", "axpb")
        .input("x", gmem(F32, [BIG]))
        .output("y", gmem(F32, [BIG]))
        .scalar("a", F32)
        .scalar("c", F32)
        .build();
    let k = KernelBuilder::new("axpb", map.params()).body(|b| {
        split.each(b, "b", "t", |b, i| {
            b.store(at("y", [i.clone()]), load("x", [i]) * var("a") + var("c"))
        });
    });
    module(vec![mesh], vec![k], vec![map], vec![])
}

/// Each thread sums its elements in f32 (a 16-bit `x` widened exactly),
/// then the block sums its threads through an smem tree and thread 0 writes
/// the block's sum.
pub fn reduce_kernel(
    name: &str,
    params: Vec<Param>,
    split: Split,
    [x, y, tile]: [&str; 3],
    [b_axis, t_axis]: [&str; 2],
) -> Kernel {
    let sixteen_bit = params
        .iter()
        .any(|p| p.name == x && matches!(&p.ty, Type::Ref(r) if r.elem.is_16bit()));
    KernelBuilder::new(name, params).body(|b| {
        let t = b.let_("t", U32, axis_index(t_axis));
        let acc = b.var("acc", F32, 0.0f32);
        split.each(b, b_axis, t_axis, |b, i| {
            let v = if sixteen_bit {
                load(x, [i]).cast(F32)
            } else {
                load(x, [i])
            };
            b.assign("acc", acc.clone() + v);
        });
        b.store(at(tile, [t.clone()]), acc);
        b.barrier();
        let steps = split.threads.trailing_zeros();
        b.for_("s", U32, 1u32, steps + 1, |b, s| {
            let stride = b.let_("stride", U32, Expr::from(split.threads) >> s);
            b.if_(t.clone().lt(stride.clone()), |b| {
                b.store(
                    at(tile, [t.clone()]),
                    load(tile, [t.clone()]) + load(tile, [t.clone() + stride]),
                );
            });
            b.barrier();
        });
        b.if_(t.eq(Expr::from(0u32)), |b| {
            b.store(at(y, [axis_index(b_axis)]), load(tile, [Expr::from(0u32)]));
        });
    })
}

pub const REDUCE_SPLITS: [Split; 6] = [
    Split::new(4, 256),
    Split::new(16, 256),
    Split::new(32, 256),
    Split::new(64, 256),
    Split::new(16, 512),
    Split::new(32, 512),
];

pub fn reduction(split: Split) -> Module {
    let blocks = split.blocks(BIG);
    let mesh = split.mesh("m", "b", "t", BIG);
    let map = MapBuilder::new("reduce")
        .program("m", "reduce")
        .input("x", gmem(F32, [BIG]))
        .output("y", gmem(F32, [blocks]))
        .scratch("tile", smem(F32, [split.threads]))
        .build();
    let k = reduce_kernel(
        "reduce",
        map.params(),
        split,
        ["x", "y", "tile"],
        ["b", "t"],
    );
    module(vec![mesh], vec![k], vec![map], vec![])
}

/// `f16` or `bf16`, for names.
pub fn type_label(ty: ScalarType) -> &'static str {
    ty.keyword()
}

/// A copy of 256 MiB of 16-bit elements: `copy` in half the element size.
pub fn copy16(ty: ScalarType, split: Split) -> Module {
    let mesh = split.mesh("m", "b", "t", BIG16);
    let map = MapBuilder::new(&format!("copy_{}", type_label(ty)))
        .program("m", "copy")
        .input("x", gmem(ty, [BIG16]))
        .output("y", gmem(ty, [BIG16]))
        .build();
    let k = KernelBuilder::new("copy", map.params()).body(|b| {
        split.each(b, "b", "t", |b, i| {
            b.store(at("y", [i.clone()]), load("x", [i]))
        });
    });
    module(vec![mesh], vec![k], vec![map], vec![])
}

/// `y = x * a + c` in the 16-bit type (each operation rounded to it, as the
/// program says), 256 MiB in and out.
pub fn elementwise16(ty: ScalarType, split: Split) -> Module {
    let mesh = split.mesh("m", "b", "t", BIG16);
    let map = MapBuilder::new(&format!("axpb_{}", type_label(ty)))
        .program("m", "axpb")
        .input("x", gmem(ty, [BIG16]))
        .output("y", gmem(ty, [BIG16]))
        .scalar("a", ty)
        .scalar("c", ty)
        .build();
    let k = KernelBuilder::new("axpb", map.params()).body(|b| {
        split.each(b, "b", "t", |b, i| {
            b.store(at("y", [i.clone()]), load("x", [i]) * var("a") + var("c"))
        });
    });
    module(vec![mesh], vec![k], vec![map], vec![])
}

/// Block sums of 256 MiB of bf16 accumulated in f32 (the mixed-precision
/// reduction of the issue).
pub fn reduction_bf16(split: Split) -> Module {
    let blocks = split.blocks(BIG16);
    let mesh = split.mesh("m", "b", "t", BIG16);
    let map = MapBuilder::new("reduce_bf16")
        .program("m", "reduce")
        .input("x", gmem(BF16, [BIG16]))
        .output("y", gmem(F32, [blocks]))
        .scratch("tile", smem(F32, [split.threads]))
        .build();
    let k = reduce_kernel(
        "reduce",
        map.params(),
        split,
        ["x", "y", "tile"],
        ["b", "t"],
    );
    module(vec![mesh], vec![k], vec![map], vec![])
}

pub const TWO_EW: Split = Split::new(8, 256);
pub const TWO_RED: Split = Split::new(16, 256);

/// Elementwise over 256 MiB (the slower program) and a reduction over
/// 64 MiB, fused into one map; and the elementwise program alone.
pub fn two_program(fused: bool) -> Module {
    let small = BIG / 4;
    let ew_mesh = TWO_EW.mesh("ew", "eb", "et", BIG);
    let red_mesh = TWO_RED.mesh("red", "rb", "rt", small);
    let mut builder = MapBuilder::new(if fused { "fused" } else { "alone" }).program("ew", "ew");
    if fused {
        builder = builder.program("red", "red");
    }
    let map = builder
        .input("xa", gmem(F32, [BIG]))
        .input("xb", gmem(F32, [small]))
        .output("ya", gmem(F32, [BIG]))
        .output("yb", gmem(F32, [TWO_RED.blocks(small)]))
        .scratch("tile", smem(F32, [TWO_RED.threads]).owned_by("red"))
        .build();
    let ew_body = |b: &mut BodyBuilder| {
        TWO_EW.each(b, "eb", "et", |b, i| {
            b.store(at("ya", [i.clone()]), load("xa", [i]) * 2.0f32 + 1.0f32)
        });
    };
    let red = reduce_kernel(
        "red",
        map.params(),
        TWO_RED,
        ["xb", "yb", "tile"],
        ["rb", "rt"],
    );
    if fused {
        let ew = KernelBuilder::new("ew", map.params()).body(ew_body);
        module(vec![ew_mesh, red_mesh], vec![ew, red], vec![map], vec![])
    } else {
        // `tile` is owned by `red`: without that program it would be smem
        // of an external mesh, so the lone map drops it.
        let mut map = map;
        map.scratch.clear();
        let ew = KernelBuilder::new("ew", map.params()).body(ew_body);
        module(vec![ew_mesh], vec![ew], vec![map], vec![])
    }
}

/// Pipeline sizes (elements per stage) and splits: 4 MiB and 64 MiB of f32,
/// one element per thread and eight.
/// The middle stage of the last one has half the threads, each handling
/// twice the elements (the same 2048 per block): programs of different
/// thread counts in one walk.
pub const PIPELINES: [(u32, [Split; 3]); 4] = [
    (1 << 20, [Split::new(1, 256); 3]),
    (1 << 24, [Split::new(1, 256); 3]),
    (1 << 24, [Split::new(8, 256); 3]),
    (
        1 << 24,
        [Split::new(8, 256), Split::new(16, 128), Split::new(8, 256)],
    ),
];

pub fn pipeline_label(len: u32, stages: [Split; 3]) -> String {
    let splits = if stages.iter().all(|s| s.label() == stages[0].label()) {
        stages[0].label()
    } else {
        stages.map(|s| s.label()).join("-")
    };
    format!("{}M.{splits}", len >> 20)
}

/// Three stages, each block of a stage handing its rows to the same block of
/// the next stage through a semaphore owned by that block.
pub fn pipeline_fused(len: u32, [split1, split2, split3]: [Split; 3]) -> Module {
    let meshes: Vec<Mesh> = [split1, split2, split3]
        .iter()
        .enumerate()
        .map(|(i, split)| {
            let s = i + 1;
            split.mesh(&format!("s{s}"), &format!("b{s}"), &format!("t{s}"), len)
        })
        .collect();
    let map = MapBuilder::new("pipeline")
        .program("s1", "stage1")
        .program("s2", "stage2")
        .program("s3", "stage3")
        .input("x", gmem(F32, [len]))
        .output("y", gmem(F32, [len]))
        .scratch("a", gmem(F32, [len]))
        .scratch("b", gmem(F32, [len]))
        .scratch("ready2", sem([1]).owned_by("s2"))
        .scratch("ready3", sem([1]).owned_by("s3"))
        .build();
    let p = map.params();
    let s1 = KernelBuilder::new("stage1", p.clone()).body(|b| {
        split1.each(b, "b1", "t1", |b, i| {
            b.store(at("a", [i.clone()]), load("x", [i]) * 2.0f32)
        });
        b.signal(
            at_block("ready2", [axis_index("b1")], [Expr::from(0u32)]),
            1,
        );
    });
    let s2 = KernelBuilder::new("stage2", p.clone()).body(|b| {
        b.wait(at("ready2", [Expr::from(0u32)]), 1);
        split2.each(b, "b2", "t2", |b, i| {
            b.store(at("b", [i.clone()]), load("a", [i]) + 1.0f32)
        });
        b.signal(
            at_block("ready3", [axis_index("b2")], [Expr::from(0u32)]),
            1,
        );
    });
    let s3 = KernelBuilder::new("stage3", p).body(|b| {
        b.wait(at("ready3", [Expr::from(0u32)]), 1);
        split3.each(b, "b3", "t3", |b, i| {
            let v = b.let_("v", F32, load("b", [i.clone()]));
            b.store(at("y", [i]), v.clone() * v);
        });
    });
    module(meshes, vec![s1, s2, s3], vec![map], vec![])
}

/// The same three stages as three maps (three launches), handing data on
/// through device-resident refs.
pub fn pipeline_separate(len: u32, [split1, split2, split3]: [Split; 3]) -> Module {
    let meshes = vec![
        split1.mesh("s1", "b", "t", len),
        split2.mesh("s2", "b", "t", len),
        split3.mesh("s3", "b", "t", len),
    ];
    let resident = |name: &str| Resident {
        name: name.into(),
        ty: gmem(F32, [len]),
        zeroed: true,
    };
    let m1 = MapBuilder::new("stage1")
        .program("s1", "stage1")
        .input("x", gmem(F32, [len]))
        .scratch("a", gmem(F32, [len]))
        .resident()
        .build();
    let m2 = MapBuilder::new("stage2")
        .program("s2", "stage2")
        .scratch("a", gmem(F32, [len]))
        .resident()
        .scratch("b", gmem(F32, [len]))
        .resident()
        .build();
    let m3 = MapBuilder::new("stage3")
        .program("s3", "stage3")
        .output("y", gmem(F32, [len]))
        .scratch("b", gmem(F32, [len]))
        .resident()
        .build();
    let k1 = KernelBuilder::new("stage1", m1.params()).body(|b| {
        split1.each(b, "b", "t", |b, i| {
            b.store(at("a", [i.clone()]), load("x", [i]) * 2.0f32)
        });
    });
    let k2 = KernelBuilder::new("stage2", m2.params()).body(|b| {
        split2.each(b, "b", "t", |b, i| {
            b.store(at("b", [i.clone()]), load("a", [i]) + 1.0f32)
        });
    });
    let k3 = KernelBuilder::new("stage3", m3.params()).body(|b| {
        split3.each(b, "b", "t", |b, i| {
            let v = b.let_("v", F32, load("b", [i.clone()]));
            b.store(at("y", [i]), v.clone() * v);
        });
    });
    module(
        meshes,
        vec![k1, k2, k3],
        vec![m1, m2, m3],
        vec![resident("a"), resident("b")],
    )
}

pub fn tiny() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 1).threads("t", 32).build();
    let map = MapBuilder::new("tiny")
        .program("m", "tiny")
        .output("y", gmem(U32, [32]))
        .build();
    let k = KernelBuilder::new("tiny", map.params()).body(|b| {
        b.store(at("y", [axis_index("t")]), axis_index("t"));
    });
    module(vec![mesh], vec![k], vec![map], vec![])
}

pub fn plans(m: &Module) -> Vec<LaunchPlan> {
    let valid = mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("benchmark module is not valid: {d:?}"));
    m.maps
        .iter()
        .map(|map| {
            lower(&valid, &map.name)
                .unwrap_or_else(|e| panic!("benchmark map `{}` does not lower: {e}", map.name))
        })
        .collect()
}

pub fn benchmarks() -> Vec<(String, Module)> {
    let mut all = Vec::new();
    for split in SPLITS {
        all.push((format!("copy.{}", split.label()), copy(split)));
        all.push((format!("elementwise.{}", split.label()), elementwise(split)));
    }
    for split in REDUCE_SPLITS {
        all.push((format!("reduction.{}", split.label()), reduction(split)));
    }
    for ty in [F16, BF16] {
        let t = type_label(ty);
        for split in SPLITS {
            let label = split.label();
            all.push((format!("copy_{t}.{label}"), copy16(ty, split)));
            all.push((format!("elementwise_{t}.{label}"), elementwise16(ty, split)));
        }
    }
    for split in REDUCE_SPLITS {
        all.push((
            format!("reduction_bf16.{}", split.label()),
            reduction_bf16(split),
        ));
    }
    all.push(("two_program_fused".into(), two_program(true)));
    all.push(("two_program_alone".into(), two_program(false)));
    for (len, stages) in PIPELINES {
        let label = pipeline_label(len, stages);
        all.push((
            format!("pipeline_fused.{label}"),
            pipeline_fused(len, stages),
        ));
        all.push((
            format!("pipeline_separate.{label}"),
            pipeline_separate(len, stages),
        ));
    }
    all.push(("tiny".into(), tiny()));
    all
}

pub fn f32_input(len: u32) -> HostTensor {
    HostTensor::from_f32(
        vec![len],
        &(0..len)
            .map(|i| (i % 1000) as f32 * 0.5)
            .collect::<Vec<_>>(),
    )
}

/// The values of `f32_input` (multiples of 0.5 below 500, exact in f16),
/// rounded to the 16-bit type `ty`.
pub fn input16(ty: ScalarType, len: u32) -> HostTensor {
    let bits = (0..len)
        .map(|i| {
            let v = (i % 1000) as f32 * 0.5;
            u32::from(mpmd_core::numerics::from_f32(ty, v).unwrap_or(0))
        })
        .collect();
    HostTensor::new(ty, vec![len], bits).expect("one element per index")
}
