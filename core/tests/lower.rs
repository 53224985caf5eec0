//! Lowering tests: snapshots of whole plans, and exact assertions of the
//! parts other crates rely on (unit order, cycles, buffers, smem layout).

use mpmd_core::ir::ScalarType::*;
use mpmd_core::ir::*;
use mpmd_core::plan::{
    lower, AxisFormula, BufferId, BufferInit, DependencyEdge, IdSource, LaunchPlan, LowerError,
    OperandId, SmemSlot, UnitId, UnsignaledWait,
};

/// The plan with kernel bodies emptied (they are copies of the module's
/// kernels, checked by `assert_kernels_copied`), so snapshots stay readable.
fn snapshot_view(plan: &LaunchPlan) -> LaunchPlan {
    let mut view = plan.clone();
    for unit in &mut view.units {
        unit.kernel.body.clear();
    }
    view
}

fn assert_kernels_copied(module: &Module, plan: &LaunchPlan) {
    assert_eq!(&plan.map, module.map(&plan.map.name).unwrap());
    for unit in &plan.units {
        let program = &plan.map.programs[unit.program.index()];
        assert_eq!(&unit.kernel, module.kernel(&program.kernel).unwrap());
        assert_eq!(&unit.mesh, module.mesh(&program.mesh).unwrap());
    }
}

fn lowered(module: &Module, map: &str) -> LaunchPlan {
    let plan = lower(&validated(module), map).expect("lowers");
    assert_kernels_copied(module, &plan);
    plan
}

fn module(meshes: Vec<Mesh>, kernels: Vec<Kernel>, maps: Vec<MpmdMap>) -> Module {
    Module {
        meshes,
        kernels,
        maps,
        ..Default::default()
    }
}

fn unit_programs(plan: &LaunchPlan) -> Vec<usize> {
    plan.units.iter().map(|u| u.program.index()).collect()
}

fn edge(from: usize, to: usize, semaphore: &str) -> DependencyEdge {
    DependencyEdge {
        from: UnitId::new(from),
        to: UnitId::new(to),
        semaphore: semaphore.to_string(),
    }
}

// ---- elementwise --------------------------------------------------------

fn elementwise() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 4).threads("t", 128).build();
    let map = MapBuilder::new("scale")
        .program("m", "scale")
        .input("x", gmem(F32, [512]))
        .output("y", gmem(F32, [512]))
        .scalar("alpha", F32)
        .build();
    let kernel = KernelBuilder::new("scale", map.params()).body(|b| {
        let i = b.let_("i", U32, axis_index("b") * axis_size("t") + axis_index("t"));
        b.store(at("y", [i.clone()]), load("x", [i]) * var("alpha"));
    });
    module(vec![mesh], vec![kernel], vec![map])
}

#[test]
fn elementwise_plan() {
    let m = elementwise();
    let plan = lowered(&m, "scale");
    insta::assert_debug_snapshot!(snapshot_view(&plan));
}

#[test]
fn elementwise_bindings_and_buffers() {
    let plan = lowered(&elementwise(), "scale");
    let buffers: Vec<Option<usize>> = plan
        .operands
        .iter()
        .map(|o| o.buffer.map(BufferId::index))
        .collect();
    assert_eq!(buffers, vec![Some(0), Some(1), None]);
    assert_eq!(plan.buffers[0].init, BufferInit::Input("x".into()));
    assert_eq!(plan.buffers[0].output, None);
    assert_eq!(plan.buffers[1].init, BufferInit::Uninitialized);
    assert_eq!(plan.buffers[1].output, Some("y".into()));
    assert_eq!(plan.buffers[1].len, 512);
    assert!(!plan.buffers[1].atomic);
    assert_eq!(plan.units[0].block_count, 4);
    assert_eq!(plan.units[0].threads_per_block, 128);
    assert!(!plan.needs_co_residency());
    // Kernel parameters reach their buffers by position.
    let unit = &plan.units[0];
    assert_eq!(plan.param_buffer(unit, "x"), Some(BufferId::new(0)));
    assert_eq!(plan.param_buffer(unit, "y"), Some(BufferId::new(1)));
    assert_eq!(plan.param_buffer(unit, "alpha"), None);
    assert_eq!(plan.param_buffer(unit, "i"), None);
}

#[test]
fn unknown_map_is_an_error() {
    assert_eq!(
        lower(&validated(&elementwise()), "nope"),
        Err(LowerError::UnknownMap("nope".into()))
    );
}

// ---- axis formulas and smem ----------------------------------------------

#[test]
fn axis_formulas_are_row_major_last_block_axis_fastest() {
    let mesh = MeshBuilder::new("m")
        .grid("bx", 3)
        .grid("by", 5)
        .cluster("cx", 2)
        .threads("t", 64)
        .build();
    let map = MapBuilder::new("f")
        .program("m", "k")
        .output("y", gmem(U32, [1]))
        .build();
    let kernel = KernelBuilder::new("k", map.params()).body(|_| {});
    let plan = lowered(&module(vec![mesh], vec![kernel], vec![map]), "f");
    let formula = |axis: &str, source, stride, size| AxisFormula {
        axis: axis.into(),
        source,
        stride,
        size,
    };
    assert_eq!(
        plan.units[0].axes,
        vec![
            formula("bx", IdSource::Block, 10, 3),
            formula("by", IdSource::Block, 2, 5),
            formula("cx", IdSource::Block, 1, 2),
            formula("t", IdSource::Thread, 1, 64),
        ]
    );
    assert_eq!(plan.units[0].block_count, 30);
}

#[test]
fn smem_slots_are_16_byte_aligned_per_owner() {
    let a = MeshBuilder::new("a").grid("b", 2).threads("t", 32).build();
    let c = MeshBuilder::new("c").grid("g", 1).threads("u", 8).build();
    let map = MapBuilder::new("f")
        .program("a", "ka")
        .program("c", "kc")
        .output("y", gmem(F32, [4]))
        .scratch("s1", smem(F32, [3]).owned_by("a"))
        .scratch("s2", smem(U32, [5]).owned_by("c"))
        .scratch("s3", smem(I32, [2]).owned_by("a"))
        .build();
    let ka = KernelBuilder::new("ka", map.params()).body(|_| {});
    let kc = KernelBuilder::new("kc", map.params()).body(|_| {});
    let plan = lowered(&module(vec![a, c], vec![ka, kc], vec![map]), "f");
    let slot = |operand, offset_bytes, size_bytes| SmemSlot {
        operand: OperandId::new(operand),
        offset_bytes,
        size_bytes,
    };
    assert_eq!(plan.units[0].smem, vec![slot(1, 0, 12), slot(3, 16, 8)]);
    assert_eq!(plan.units[0].smem_bytes, 24);
    assert_eq!(plan.units[1].smem, vec![slot(2, 0, 20)]);
    assert_eq!(plan.units[1].smem_bytes, 20);
    assert_eq!(plan.operand("s1").unwrap().buffer, None);
    assert_eq!(plan.buffers.len(), 1);
}

#[test]
fn unowned_smem_belongs_to_the_only_program() {
    let mesh = MeshBuilder::new("m").grid("b", 2).threads("t", 4).build();
    let map = MapBuilder::new("f")
        .program("m", "k")
        .output("y", gmem(F32, [8]))
        .scratch("tile", smem(F32, [4]))
        .build();
    let kernel = KernelBuilder::new("k", map.params()).body(|_| {});
    let plan = lowered(&module(vec![mesh], vec![kernel], vec![map]), "f");
    assert_eq!(
        plan.units[0].smem,
        vec![SmemSlot {
            operand: OperandId::new(1),
            offset_bytes: 0,
            size_bytes: 16
        }]
    );
}

#[test]
fn smem_on_an_external_mesh_is_an_error() {
    let a = MeshBuilder::new("a").grid("b", 2).threads("t", 4).build();
    let ext = MeshBuilder::new("ext").grid("e", 2).threads("t", 4).build();
    let map = MapBuilder::new("f")
        .program("a", "k")
        .output("y", gmem(F32, [8]))
        .scratch("tile", smem(F32, [4]).owned_by("ext"))
        .build();
    let kernel = KernelBuilder::new("k", map.params()).body(|_| {});
    // Validation refuses it (E0027), so the lowering never meets it.
    assert_eq!(
        codes(&module(vec![a, ext], vec![kernel], vec![map])),
        ["E0027"]
    );
}

// ---- three-program pipeline ------------------------------------------------

/// `first` → `second` → `third` through two semaphores, written in the map in
/// the order third, first, second so that lowering must reorder them.
fn pipeline() -> Module {
    let m1 = MeshBuilder::new("m1").grid("b", 2).threads("t", 64).build();
    // Its own thread axis name: `t` has another size in `m1` (E0013).
    let m2 = MeshBuilder::new("m2")
        .grid("b", 2)
        .threads("t2", 32)
        .build();
    let m3 = MeshBuilder::new("m3").grid("c", 1).threads("u", 16).build();
    let map = MapBuilder::new("pipe")
        .program("m3", "third")
        .program("m1", "first")
        .program("m2", "second")
        .input("x", gmem(F32, [128]))
        .output("y", gmem(F32, [128]))
        .scratch("stage", gmem(F32, [128]))
        .scratch("s12", sem([1]))
        .scratch("s23", sem([1]))
        .build();
    let params = map.params();
    let first = KernelBuilder::new("first", params.clone()).body(|b| {
        let i = b.let_("i", U32, axis_index("b") * axis_size("t") + axis_index("t"));
        b.store(at("stage", [i.clone()]), load("x", [i]));
        b.signal(at("s12", [0u32.into()]), 1);
    });
    let second = KernelBuilder::new("second", params.clone()).body(|b| {
        b.wait(at("s12", [0u32.into()]), 2);
        b.signal(at("s23", [0u32.into()]), 1);
    });
    let third = KernelBuilder::new("third", params).body(|b| {
        b.wait(at("s23", [0u32.into()]), 2);
        b.store(at("y", [axis_index("u")]), load("stage", [axis_index("u")]));
    });
    module(vec![m1, m2, m3], vec![first, second, third], vec![map])
}

#[test]
fn pipeline_plan() {
    let m = pipeline();
    insta::assert_debug_snapshot!(snapshot_view(&lowered(&m, "pipe")));
}

#[test]
fn pipeline_units_are_in_topological_order() {
    let plan = lowered(&pipeline(), "pipe");
    assert_eq!(unit_programs(&plan), vec![1, 2, 0]);
    assert_eq!(plan.graph.edges, vec![edge(0, 1, "s12"), edge(1, 2, "s23")]);
    assert!(!plan.graph.has_cycle);
    assert!(plan.graph.intra_program.is_empty());
    assert!(plan.graph.unsignaled_waits.is_empty());
    assert!(!plan.needs_co_residency());
    let mesh_names: Vec<&str> = plan.meshes.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(mesh_names, vec!["m3", "m1", "m2"]);
    let sem_buffer = plan.buffer(plan.operand("s12").unwrap().buffer.unwrap());
    assert!(sem_buffer.atomic);
    assert_eq!(sem_buffer.init, BufferInit::Zeroed);
    let stage = plan.buffer(plan.operand("stage").unwrap().buffer.unwrap());
    assert!(!stage.atomic);
    assert_eq!(stage.init, BufferInit::Uninitialized);
}

#[test]
fn unordered_programs_keep_map_order() {
    // Programs 0 and 2 are independent; 1 waits on 2.
    let m = MeshBuilder::new("m").grid("b", 1).threads("t", 1).build();
    let map = MapBuilder::new("f")
        .program("m", "free")
        .program("m", "waiter")
        .program("m", "signaller")
        .output("y", gmem(U32, [1]))
        .scratch("s", sem([1]))
        .build();
    let params = map.params();
    let free = KernelBuilder::new("free", params.clone()).body(|_| {});
    let waiter = KernelBuilder::new("waiter", params.clone()).body(|b| {
        b.wait(at("s", [0u32.into()]), 1);
    });
    let signaller = KernelBuilder::new("signaller", params).body(|b| {
        b.signal(at("s", [0u32.into()]), 1);
    });
    let plan = lowered(
        &module(vec![m], vec![free, waiter, signaller], vec![map]),
        "f",
    );
    assert_eq!(unit_programs(&plan), vec![0, 2, 1]);
    assert_eq!(plan.graph.edges, vec![edge(1, 2, "s")]);
    assert_eq!(plan.meshes.len(), 1);
}

// ---- bidirectional handshake (cycle) ----------------------------------------

fn handshake() -> Module {
    let ping_mesh = MeshBuilder::new("ping")
        .grid("b", 1)
        .threads("t", 32)
        .build();
    let pong_mesh = MeshBuilder::new("pong")
        .grid("b", 1)
        .threads("t", 32)
        .build();
    let map = MapBuilder::new("handshake")
        .program("pong", "pong")
        .program("ping", "ping")
        .output("y", gmem(I32, [2]))
        .scratch("to_pong", sem([1]))
        .scratch("to_ping", sem([1]))
        .build();
    let params = map.params();
    let ping = KernelBuilder::new("ping", params.clone()).body(|b| {
        b.signal(at("to_pong", [0u32.into()]), 1);
        b.wait(at("to_ping", [0u32.into()]), 1);
        b.store(at("y", [0u32.into()]), 1);
    });
    let pong = KernelBuilder::new("pong", params).body(|b| {
        b.wait(at("to_pong", [0u32.into()]), 1);
        b.signal(at("to_ping", [0u32.into()]), 1);
        b.store(at("y", [1u32.into()]), 2);
    });
    module(vec![ping_mesh, pong_mesh], vec![ping, pong], vec![map])
}

#[test]
fn handshake_plan() {
    let m = handshake();
    insta::assert_debug_snapshot!(snapshot_view(&lowered(&m, "handshake")));
}

#[test]
fn handshake_is_a_cycle_in_map_order() {
    let plan = lowered(&handshake(), "handshake");
    assert_eq!(unit_programs(&plan), vec![0, 1]);
    assert!(plan.graph.has_cycle);
    assert!(plan.needs_co_residency());
    assert_eq!(
        plan.graph.edges,
        vec![edge(0, 1, "to_ping"), edge(1, 0, "to_pong")]
    );
}

#[test]
fn a_cycle_keeps_map_order_and_its_successors_follow() {
    // Map order: tail, b, a. a ⇄ b form a cycle; tail waits on b.
    let m = MeshBuilder::new("m").grid("g", 1).threads("t", 1).build();
    let map = MapBuilder::new("f")
        .program("m", "tail")
        .program("m", "b")
        .program("m", "a")
        .output("y", gmem(U32, [1]))
        .scratch("ab", sem([1]))
        .scratch("ba", sem([1]))
        .scratch("done", sem([1]))
        .build();
    let params = map.params();
    let s = |name: &str| at(name, [0u32.into()]);
    let tail = KernelBuilder::new("tail", params.clone()).body(|b| b.wait(s("done"), 1));
    let kb = KernelBuilder::new("b", params.clone()).body(|b| {
        b.wait(s("ab"), 1);
        b.signal(s("ba"), 1);
        b.signal(s("done"), 1);
    });
    let ka = KernelBuilder::new("a", params).body(|b| {
        b.signal(s("ab"), 1);
        b.wait(s("ba"), 1);
    });
    let plan = lowered(&module(vec![m], vec![tail, kb, ka], vec![map]), "f");
    assert_eq!(unit_programs(&plan), vec![1, 2, 0]);
    assert!(plan.graph.has_cycle);
}

// ---- intra-program wait -----------------------------------------------------

/// One program whose blocks hand off to each other: block 0 signals block
/// 1's semaphore instance, and every block waits on its own instance.
fn intra_program() -> Module {
    let mesh = MeshBuilder::new("chain")
        .grid("b", 4)
        .threads("t", 32)
        .build();
    let map = MapBuilder::new("chain")
        .program("chain", "chain")
        .output("y", gmem(U32, [4]))
        .scratch("turn", sem([1]).owned_by("chain"))
        .scratch("unfed", sem([1]))
        .build();
    let kernel = KernelBuilder::new("chain", map.params()).body(|b| {
        b.if_(axis_index("b").gt(0u32), |b| {
            b.wait(at("turn", [0u32.into()]), 1);
        });
        b.if_(axis_index("b").eq(3u32), |b| {
            b.wait_nodec(at("unfed", [0u32.into()]), 1);
        });
        b.store(at("y", [axis_index("b")]), axis_index("b"));
        b.if_(axis_index("b").lt(3u32), |b| {
            b.signal(at_block("turn", [axis_index("b") + 1u32], [0u32.into()]), 1);
        });
    });
    module(vec![mesh], vec![kernel], vec![map])
}

#[test]
fn intra_program_plan() {
    let m = intra_program();
    insta::assert_debug_snapshot!(snapshot_view(&lowered(&m, "chain")));
}

#[test]
fn intra_program_wait_is_reported() {
    let plan = lowered(&intra_program(), "chain");
    assert_eq!(plan.graph.intra_program, vec![edge(0, 0, "turn")]);
    assert!(plan.graph.edges.is_empty());
    assert!(!plan.graph.has_cycle);
    assert!(plan.needs_co_residency());
    assert_eq!(
        plan.graph.unsignaled_waits,
        vec![UnsignaledWait {
            unit: UnitId::new(0),
            semaphore: "unfed".into(),
            resident: false
        }]
    );
    let turn = plan.buffer(plan.operand("turn").unwrap().buffer.unwrap());
    assert_eq!((turn.instances, turn.len), (4, 4));
}

// ---- external-mesh hand-off ----------------------------------------------------

/// Two calls: `send` (program on `producer`) writes `hand` and signals
/// `credits`, both owned by the external mesh `ext` and device-resident;
/// `receive` runs on `ext` and waits on its own block's credits.
fn hand_off() -> Module {
    let producer = MeshBuilder::new("producer")
        .grid("p", 1)
        .threads("t", 16)
        .build();
    let ext = MeshBuilder::new("ext")
        .grid("e", 2)
        .threads("t", 16)
        .build();
    let send = MapBuilder::new("send")
        .program("producer", "send")
        .output("done", gmem(U32, [1]))
        .scratch("hand", gmem(F32, [16]).owned_by("ext"))
        .resident()
        .scratch("credits", sem([1]).owned_by("ext"))
        .resident()
        .build();
    let receive = MapBuilder::new("receive")
        .program("ext", "receive")
        .output("y", gmem(F32, [32]))
        .scratch("hand", gmem(F32, [16]).owned_by("ext"))
        .resident()
        .scratch("credits", sem([1]).owned_by("ext"))
        .resident()
        .build();
    let send_kernel = KernelBuilder::new("send", send.params()).body(|b| {
        for e in 0..2u32 {
            b.store(
                at_block("hand", [e.into()], [axis_index("t")]),
                axis_index("t").cast(F32),
            );
            b.signal(at_block("credits", [e.into()], [0u32.into()]), 1);
        }
    });
    let receive_kernel = KernelBuilder::new("receive", receive.params()).body(|b| {
        b.wait(at("credits", [0u32.into()]), 1);
        b.store(
            at("y", [axis_index("e") * 16u32 + axis_index("t")]),
            load("hand", [axis_index("t")]),
        );
    });
    Module {
        consts: vec![],
        tables: vec![],
        functions: vec![],
        meshes: vec![producer, ext],
        kernels: vec![send_kernel, receive_kernel],
        maps: vec![send, receive],
        residents: vec![
            Resident {
                name: "hand".into(),
                ty: gmem(F32, [16]).owned_by("ext"),
                zeroed: false,
            },
            Resident {
                name: "credits".into(),
                ty: sem([1]).owned_by("ext"),
                zeroed: true,
            },
        ],
        calls: vec![
            Call {
                map: "send".into(),
                scalars: vec![],
            },
            Call {
                map: "receive".into(),
                scalars: vec![],
            },
        ],
    }
}

#[test]
fn hand_off_send_plan() {
    let m = hand_off();
    insta::assert_debug_snapshot!(snapshot_view(&lowered(&m, "send")));
}

#[test]
fn hand_off_receive_plan() {
    let m = hand_off();
    insta::assert_debug_snapshot!(snapshot_view(&lowered(&m, "receive")));
}

#[test]
fn hand_off_external_mesh_and_residents() {
    let m = hand_off();
    let send = lowered(&m, "send");
    assert_eq!(send.external_meshes, vec!["ext".to_string()]);
    let mesh_names: Vec<&str> = send.meshes.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(mesh_names, vec!["producer", "ext"]);
    assert_eq!(send.residents, m.residents);
    let hand = send.buffer(send.operand("hand").unwrap().buffer.unwrap());
    assert_eq!(hand.init, BufferInit::Resident("hand".into()));
    assert_eq!((hand.instances, hand.len), (2, 32));
    assert!(!hand.atomic);
    let credits = send.buffer(send.operand("credits").unwrap().buffer.unwrap());
    assert_eq!(credits.init, BufferInit::Resident("credits".into()));
    assert!(credits.atomic);
    assert!(send.graph.unsignaled_waits.is_empty());

    let receive = lowered(&m, "receive");
    assert!(receive.external_meshes.is_empty());
    assert_eq!(
        receive.graph.unsignaled_waits,
        vec![UnsignaledWait {
            unit: UnitId::new(0),
            semaphore: "credits".into(),
            resident: true
        }]
    );
    assert!(!receive.needs_co_residency());
}

#[test]
fn missing_resident_is_an_error() {
    let mut m = hand_off();
    m.residents.remove(0);
    // Both maps bind the resident.
    assert_eq!(codes(&m), ["E0021", "E0021"]);
}

// ---- aliases --------------------------------------------------------------------

fn aliases() -> Module {
    let mesh = MeshBuilder::new("m").grid("b", 2).threads("t", 8).build();
    let map = MapBuilder::new("accumulate")
        .program("m", "accumulate")
        .input("acc", gmem(F32, [16]))
        .input("delta", gmem(F32, [16]))
        .output("hist", gmem(U32, [4]))
        .output_zeroed("acc_out", gmem(F32, [16]))
        .alias("acc", "acc_out")
        .build();
    let kernel = KernelBuilder::new("accumulate", map.params()).body(|b| {
        let i = b.let_("i", U32, axis_index("b") * axis_size("t") + axis_index("t"));
        b.store(
            at("acc_out", [i.clone()]),
            load("acc_out", [i.clone()]) + load("delta", [i.clone()]),
        );
        b.atomic(AtomicOp::Add, at("hist", [i % 4u32]), [1u32.into()]);
    });
    module(vec![mesh], vec![kernel], vec![map])
}

#[test]
fn aliases_plan() {
    let m = aliases();
    insta::assert_debug_snapshot!(snapshot_view(&lowered(&m, "accumulate")));
}

#[test]
fn an_aliased_pair_is_one_buffer() {
    let plan = lowered(&aliases(), "accumulate");
    let buffers: Vec<Option<usize>> = plan
        .operands
        .iter()
        .map(|o| o.buffer.map(BufferId::index))
        .collect();
    assert_eq!(buffers, vec![Some(0), Some(1), Some(2), Some(0)]);
    assert_eq!(plan.buffers.len(), 3);
    let shared = &plan.buffers[0];
    assert_eq!(
        shared.operands,
        vec!["acc".to_string(), "acc_out".to_string()]
    );
    assert_eq!(shared.init, BufferInit::Input("acc".into()));
    assert_eq!(shared.output, Some("acc_out".into()));
    assert!(!shared.atomic);
    let hist = &plan.buffers[2];
    assert!(hist.atomic);
    assert_eq!(hist.init, BufferInit::Uninitialized);
    assert_eq!(hist.output, Some("hist".into()));
}

#[test]
fn zeroed_output_is_zeroed() {
    let mut m = aliases();
    m.maps[0].aliases.clear();
    let plan = lowered(&m, "accumulate");
    let acc_out = plan.buffer(plan.operand("acc_out").unwrap().buffer.unwrap());
    assert_eq!(acc_out.init, BufferInit::Zeroed);
    assert_eq!(plan.buffers.len(), 4);
}

#[test]
fn a_bad_alias_is_an_error() {
    let mut m = aliases();
    m.maps[0].aliases[0].output = "nope".into();
    assert_eq!(codes(&m), ["E0017"]);
}

#[test]
fn a_wait_on_a_non_semaphore_is_an_error() {
    let mut m = elementwise();
    m.kernels[0].body.push(Stmt::Sem {
        op: SemOp::Wait,
        sem: at("y", [0u32.into()]),
        amount: 1.into(),
    });
    assert_eq!(codes(&m), ["E0049"]);
}

/// `m` validated: the lowering takes valid modules only.
fn validated(m: &Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}

/// The codes validation refuses `m` with (a module the lowering never sees).
fn codes(m: &Module) -> Vec<&'static str> {
    mpmd_core::validate::validate(m, &Default::default())
        .expect_err("validation refuses it")
        .iter()
        .map(|d| d.code)
        .collect()
}
