//! Validation: one test per error code (code, place and message), valid
//! programs that must pass, and rendering.

use mpmd_core::case::{CaseSpec, CompareMode, Generator};
use mpmd_core::ir::*;
use mpmd_core::text::{SourceMap, Span};
use mpmd_core::validate::{render, validate, validate_case, Diagnostic, ValidateOptions, CODES};
use ScalarType::*;

// ---- helpers -------------------------------------------------------------

fn mesh_m() -> Mesh {
    MeshBuilder::new("m").grid("b", 4).threads("t", 128).build()
}

/// `scale`: inputs [x], outputs [y], scalars [alpha], run by kernel `kern` on `m`.
fn scale_map() -> MapBuilder {
    MapBuilder::new("scale")
        .program("m", "kern")
        .input("x", gmem(F32, [512]))
        .output("y", gmem(F32, [512]))
        .scalar("alpha", F32)
}

/// One map, one program on `m`, its kernel built from the map's operands.
fn single(map: MpmdMap, body: impl FnOnce(&mut BodyBuilder)) -> Module {
    let kernel = KernelBuilder::new(&map.programs[0].kernel, map.params()).body(body);
    Module {
        meshes: vec![mesh_m()],
        kernels: vec![kernel],
        maps: vec![map],
        ..Default::default()
    }
}

fn scale(body: impl FnOnce(&mut BodyBuilder)) -> Module {
    single(scale_map().build(), body)
}

/// Two programs: `kp` on `p` (grid b=4, threads t=128) and `kq` on `q`
/// (grid c=2, threads t=128), both kernels with the map's operands.
fn pair(
    map: MapBuilder,
    kp: impl FnOnce(&mut BodyBuilder),
    kq: impl FnOnce(&mut BodyBuilder),
) -> Module {
    let map = map.program("p", "kp").program("q", "kq").build();
    Module {
        meshes: vec![
            MeshBuilder::new("p").grid("b", 4).threads("t", 128).build(),
            MeshBuilder::new("q").grid("c", 2).threads("t", 128).build(),
        ],
        kernels: vec![
            KernelBuilder::new("kp", map.params()).body(kp),
            KernelBuilder::new("kq", map.params()).body(kq),
        ],
        maps: vec![map],
        ..Default::default()
    }
}

fn diags(module: &Module) -> Vec<Diagnostic> {
    validate(module, &ValidateOptions::default()).expect_err("the module must be rejected")
}

/// The only diagnostic of `module`.
fn one(module: &Module) -> Diagnostic {
    let d = diags(module);
    assert_eq!(d.len(), 1, "expected one diagnostic, got {d:#?}");
    d.into_iter().next().unwrap()
}

fn assert_valid(module: &Module) {
    if let Err(d) = validate(module, &ValidateOptions::default()) {
        panic!("expected a valid module, got {d:#?}");
    }
}

fn path(steps: impl IntoIterator<Item = PathStep>) -> IrPath {
    IrPath(steps.into_iter().collect())
}

fn kstmt(kernel: &str, steps: impl IntoIterator<Item = PathStep>) -> IrPath {
    let mut all = vec![PathStep::Kernel(kernel.into())];
    all.extend(steps);
    IrPath(all)
}

fn map_path(map: &str) -> IrPath {
    path([PathStep::Map(map.into())])
}

fn operand_path(map: &str, operand: &str) -> IrPath {
    path([PathStep::Map(map.into()), PathStep::Operand(operand.into())])
}

fn s(i: usize) -> PathStep {
    PathStep::Stmt(i)
}

/// Asserts code and place; the message must contain every part (used where
/// the message contains a printed expression).
fn assert_loose(d: &Diagnostic, code: &str, at: IrPath, parts: &[&str]) {
    assert_eq!((d.code, &d.path), (code, &at), "{d:#?}");
    for part in parts {
        assert!(
            d.message.contains(part),
            "`{}` does not contain `{part}`",
            d.message
        );
    }
}

fn assert_exact(d: &Diagnostic, code: &str, at: IrPath, message: &str) {
    assert_eq!(
        (d.code, &d.path, d.message.as_str()),
        (code, &at, message),
        "{d:#?}"
    );
}

fn gid() -> Expr {
    axis_index("b") * axis_size("t") + axis_index("t")
}

// ---- valid programs --------------------------------------------------------

#[test]
fn elementwise_scale_is_valid() {
    assert_valid(&scale(|b| {
        let i = b.let_("i", U32, gid());
        b.store(at("y", [i.clone()]), load("x", [i]) * var("alpha"));
    }));
}

#[test]
fn producer_consumer_pipeline_is_valid() {
    let map = MapBuilder::new("pipe")
        .input("x", gmem(F32, [512]))
        .output("y", gmem(F32, [512]))
        .scalar("n", U32)
        .scratch("buf", gmem(F32, [128]).owned_by("q"))
        .scratch("ready", sem([1]).owned_by("q"))
        .scratch("tile", smem(F32, [128]).owned_by("p"));
    let module = pair(
        map,
        |b| {
            let t = b.let_("i", U32, axis_index("t"));
            b.store(at("tile", [t.clone()]), load("x", [gid()]));
            b.barrier();
            b.if_(axis_index("b").lt(2u32), |b| {
                b.store(
                    at_block("buf", [axis_index("b")], [t.clone()]),
                    load("tile", [t.clone()]),
                );
                b.signal(at_block("ready", [axis_index("b")], [0u32.into()]), 1);
            });
        },
        |b| {
            b.wait(at("ready", [0u32.into()]), 1);
            let c = b.sem_read("seen", at("ready", [0u32.into()]));
            b.if_(c.ge(0), |b| b.barrier());
            b.for_("k", U32, 0u32, var("n") + axis_size("b"), |b, k| {
                b.if_(k.eq(axis_index("c")), |b| b.barrier());
            });
            let t = axis_index("t");
            b.store(
                at("y", [axis_index("c") * 128u32 + t.clone()]),
                load("buf", [t]),
            );
        },
    );
    assert_valid(&module);
}

// ---- module items ------------------------------------------------------------

#[test]
fn e0001_duplicate_mesh_name() {
    let mut module = scale(|_| {});
    module.meshes.push(mesh_m());
    assert_exact(
        &one(&module),
        "E0001",
        path([PathStep::Mesh("m".into())]),
        "the mesh name `m` is declared more than once",
    );
}

#[test]
fn e0001_duplicate_kernel_name() {
    let mut module = scale(|_| {});
    module.kernels.push(module.kernels[0].clone());
    assert_exact(
        &one(&module),
        "E0001",
        path([PathStep::Kernel("kern".into())]),
        "the kernel name `kern` is declared more than once",
    );
}

#[test]
fn e0002_unknown_program_mesh() {
    let module = single(
        MapBuilder::new("scale").program("nowhere", "kern").build(),
        |b| {
            b.let_("i", U32, axis_index("zz"));
        },
    );
    assert_exact(
        &one(&module),
        "E0002",
        path([PathStep::Map("scale".into()), PathStep::Program(0)]),
        "program 0 of map `scale` runs on `nowhere`, which is not a mesh of the module",
    );
}

#[test]
fn e0002_unknown_owner_mesh() {
    let module = single(
        scale_map()
            .scratch("buf", gmem(F32, [4]).owned_by("ghost"))
            .build(),
        |_| {},
    );
    assert_exact(
        &one(&module),
        "E0002",
        operand_path("scale", "buf"),
        "scratch operand `buf` of map `scale` is owned by `ghost`, which is not a mesh of the module",
    );
}

#[test]
fn e0003_unknown_kernel() {
    let mut module = scale(|_| {});
    module.maps[0].programs[0].kernel = "missing".into();
    assert_exact(
        &one(&module),
        "E0003",
        path([PathStep::Map("scale".into()), PathStep::Program(0)]),
        "program 0 of map `scale` runs `missing`, which is not a kernel of the module",
    );
}

fn call(map: &str, scalars: &[(&str, Literal)]) -> Call {
    Call {
        map: map.into(),
        scalars: scalars.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
    }
}

#[test]
fn e0004_call_of_unknown_map() {
    let mut module = scale(|_| {});
    module.calls = vec![
        call("scale", &[("alpha", Literal::f32(2.0))]),
        call("other", &[]),
    ];
    assert_exact(
        &one(&module),
        "E0004",
        path([PathStep::Call(1)]),
        "call 1 names `other`, which is not a map of the module",
    );
}

#[test]
fn e0005_call_without_a_scalar() {
    let mut module = scale(|_| {});
    module.calls = vec![call("scale", &[])];
    assert_exact(
        &one(&module),
        "E0005",
        path([PathStep::Call(0)]),
        "call 0 of map `scale` gives no value for the scalar `alpha`",
    );
}

#[test]
fn e0006_call_with_unknown_or_repeated_scalar() {
    let mut module = scale(|_| {});
    module.calls = vec![call(
        "scale",
        &[
            ("alpha", Literal::f32(1.0)),
            ("beta", Literal::f32(1.0)),
            ("alpha", Literal::f32(2.0)),
        ],
    )];
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0006",
        path([PathStep::Call(0)]),
        "call 0 of map `scale` gives `beta`, which is not a scalar of the map (its scalars: alpha)",
    );
    assert_exact(
        &d[1],
        "E0006",
        path([PathStep::Call(0)]),
        "call 0 of map `scale` gives `alpha` twice",
    );
}

#[test]
fn e0007_call_scalar_of_wrong_type() {
    let mut module = scale(|_| {});
    module.calls = vec![call("scale", &[("alpha", Literal::U32(2))])];
    assert_exact(
        &one(&module),
        "E0007",
        path([PathStep::Call(0)]),
        "call 0 of map `scale` gives `alpha` a `u32` value, but the scalar has type `f32`",
    );
}

#[test]
fn e0008_case_names_unknown_operands() {
    let module = scale(|_| {});
    let case = CaseSpec {
        generators: vec![
            ("x".into(), Generator::Special),
            ("y".into(), Generator::Iota),
            ("y".into(), Generator::Iota),
            (
                "x".into(),
                Generator::IndexInto {
                    operand: "x".into(),
                    dim: 1,
                },
            ),
        ],
        compares: vec![
            ("y".into(), CompareMode::Exact),
            ("x".into(), CompareMode::Exact),
        ],
        ..Default::default()
    };
    // The case is checked against the module, apart from it.
    assert!(validate(&module, &ValidateOptions::default()).is_ok());
    // The repeated `generate y` is reported once as unknown; each name
    // given twice is E0074.
    let d = validate_case(&module, &case).unwrap_err();
    let messages: Vec<_> = d.iter().map(|d| (d.code, d.message.as_str())).collect();
    assert_eq!(
        messages,
        [
            ("E0074", "`generate y` is given twice"),
            ("E0074", "`generate x` is given twice"),
            (
                "E0008",
                "`generate y` names no input and no resident of the module"
            ),
            (
                "E0008",
                "`generate x = index_into(x, 1)`: `x` has 1 dimension(s)"
            ),
            (
                "E0008",
                "`compare x` names no output of a map in the module"
            ),
        ]
    );
    assert!(d.iter().all(|d| d.path == path([PathStep::Case])));
}

#[test]
fn e0008_mma_compares_float_outputs_only() {
    let module = single(scale_map().output("n", gmem(U32, [512])).build(), |_| {});
    let case = CaseSpec {
        compares: vec![
            ("y".into(), CompareMode::Mma),
            ("n".into(), CompareMode::Mma),
            ("n".into(), CompareMode::Exact),
        ],
        ..Default::default()
    };
    let d = validate_case(&module, &case).unwrap_err();
    let messages: Vec<_> = d.iter().map(|d| (d.code, d.message.as_str())).collect();
    assert_eq!(
        messages,
        [
            ("E0074", "`compare n` is given twice"),
            (
                "E0008",
                "`compare n = mma` names an output of type `u32`: the mma bound is for float outputs"
            )
        ]
    );
}

// ---- meshes ----------------------------------------------------------------

#[test]
fn e0009_too_many_grid_axes() {
    let mut module = scale(|_| {});
    module.meshes[0] = MeshBuilder::new("m")
        .grid("b", 4)
        .grid("g1", 1)
        .grid("g2", 1)
        .grid("g3", 1)
        .threads("t", 128)
        .build();
    assert_exact(
        &one(&module),
        "E0009",
        path([PathStep::Mesh("m".into())]),
        "mesh `m` has 4 grid axes; at most 3 are allowed",
    );
}

#[test]
fn e0009_too_many_cluster_axes() {
    let mut module = scale(|_| {});
    let mut mesh = MeshBuilder::new("m").grid("b", 4).threads("t", 128);
    for axis in ["c0", "c1", "c2", "c3"] {
        mesh = mesh.cluster(axis, 1);
    }
    module.meshes[0] = mesh.build();
    assert_exact(
        &one(&module),
        "E0009",
        path([PathStep::Mesh("m".into())]),
        "mesh `m` has 4 cluster axes; at most 3 are allowed",
    );
}

#[test]
fn e0010_thread_axis_size() {
    for size in [0, 1025] {
        let mut module = scale(|_| {});
        module.meshes[0].threads.size = size;
        assert_exact(
            &one(&module),
            "E0010",
            path([PathStep::Mesh("m".into())]),
            &format!("thread axis `t` of mesh `m` has {size} threads; a block has 1 to 1024"),
        );
    }
    let mut module = scale(|_| {});
    module.meshes[0].threads.size = 1024;
    assert_valid(&module);
}

#[test]
fn e0011_axis_of_size_zero() {
    let mut module = scale(|_| {});
    module.meshes[0].grid[0].size = 0;
    assert_exact(
        &one(&module),
        "E0011",
        path([PathStep::Mesh("m".into())]),
        "grid axis `b` of mesh `m` has size 0",
    );
}

#[test]
fn e0012_duplicate_axis_name() {
    let mut module = scale(|_| {});
    module.meshes[0] = MeshBuilder::new("m")
        .grid("b", 4)
        .cluster("b", 2)
        .threads("t", 128)
        .build();
    assert_exact(
        &one(&module),
        "E0012",
        path([PathStep::Mesh("m".into())]),
        "mesh `m` has two axes named `b`",
    );
}

#[test]
fn e0013_axis_with_two_sizes_across_program_meshes() {
    let mut module = pair(MapBuilder::new("pipe"), |_| {}, |_| {});
    module.meshes[1].threads.size = 64;
    assert_exact(
        &one(&module),
        "E0013",
        map_path("pipe"),
        "axis `t` has size 128 in mesh `p` but size 64 in mesh `q`, both in map `pipe`",
    );
}

#[test]
fn e0013_axis_with_two_sizes_in_external_mesh() {
    let mut module = scale(|_| {});
    module
        .meshes
        .push(MeshBuilder::new("ext").grid("b", 8).threads("u", 1).build());
    module.maps[0].scratch.push(Operand {
        name: "hand".into(),
        ty: gmem(F32, [4]).owned_by("ext").into(),
        zeroed: false,
        resident: false,
    });
    module.kernels[0].params = module.maps[0].params();
    assert_exact(
        &one(&module),
        "E0013",
        map_path("scale"),
        "axis `b` has size 4 in mesh `m` but size 8 in mesh `ext`, both in map `scale`",
    );
}

// ---- maps --------------------------------------------------------------------

#[test]
fn e0014_map_without_programs() {
    let mut module = scale(|_| {});
    module.maps[0].programs.clear();
    assert_exact(
        &one(&module),
        "E0014",
        map_path("scale"),
        "map `scale` has no programs",
    );
}

#[test]
fn e0015_operand_passed_twice() {
    let mut module = single(scale_map().scratch("x", gmem(F32, [512])).build(), |_| {});
    // The kernel names each operand once.
    module.kernels[0].params.truncate(3);
    assert_exact(
        &one(&module),
        "E0015",
        operand_path("scale", "x"),
        "map `scale` has two operands named `x`",
    );
}

#[test]
fn kernel_parameters_in_any_order_and_any_subset_are_valid() {
    let mut module = scale(|_| {});
    module.kernels[0].params.swap(0, 1);
    assert_valid(&module);
    // A second kernel that names only the scalar, beside the first.
    let mut two = single(scale_map().program("m", "only_alpha").build(), |_| {});
    two.kernels.push(
        KernelBuilder::new("only_alpha", vec![two.kernels[0].params[2].clone()]).body(|_| {}),
    );
    assert_valid(&two);
}

#[test]
fn e0016_kernel_parameter_of_another_type_or_name() {
    let at_program = path([PathStep::Map("scale".into()), PathStep::Program(0)]);
    let mut module = scale(|_| {});
    module.kernels[0].params[1].ty = gmem(F32, [256]).into();
    assert_exact(
        &one(&module),
        "E0016",
        at_program.clone(),
        "parameter `y` of kernel `kern` has type `gmem<f32[256]>`, but operand `y` of map `scale` has type `gmem<f32[512]>`",
    );
    let mut module = scale(|_| {});
    module.kernels[0].params[2].name = "beta".into();
    // The operand the kernel no longer names is not reported again (E0060).
    assert_exact(
        &one(&module),
        "E0016",
        at_program,
        "parameter `beta` of kernel `kern` is not an operand of map `scale` (its operands: `x`, `y`, `alpha`)",
    );
}

#[test]
fn e0060_operand_no_kernel_names() {
    let mut module = scale(|_| {});
    module.kernels[0].params.pop();
    assert_exact(
        &one(&module),
        "E0060",
        operand_path("scale", "alpha"),
        "operand `alpha` of map `scale` is named by none of its kernels (`kern`)",
    );
}

#[test]
fn e0016_skips_body_checks_of_that_program() {
    let mut module = scale(|b| {
        b.let_("i", U32, axis_index("nope"));
    });
    module.kernels[0].params[2].name = "beta".into();
    assert_eq!(
        diags(&module).iter().map(|d| d.code).collect::<Vec<_>>(),
        ["E0016"]
    );
}

#[test]
fn e0017_alias_of_unknown_operand() {
    let module = single(scale_map().alias("x", "z").build(), |_| {});
    assert_exact(
        &one(&module),
        "E0017",
        map_path("scale"),
        "alias `x -> z` of map `scale` names `z`, which is not an operand of the map",
    );
}

#[test]
fn e0018_alias_from_output_to_input() {
    let module = single(scale_map().alias("y", "x").build(), |_| {});
    assert_exact(
        &one(&module),
        "E0018",
        operand_path("scale", "y"),
        "alias `y -> x` of map `scale` goes from output `y` to input `x`; an alias goes from an input to an output",
    );
}

#[test]
fn e0019_alias_of_different_types() {
    let module = single(
        scale_map()
            .output("z", gmem(F32, [256]))
            .alias("x", "z")
            .build(),
        |_| {},
    );
    assert_exact(
        &one(&module),
        "E0019",
        operand_path("scale", "x"),
        "alias `x -> z` of map `scale` joins `x: gmem<f32[512]>` and `z: gmem<f32[256]>`, which have different types",
    );
}

#[test]
fn e0020_operand_aliased_twice() {
    let module = single(
        scale_map()
            .output("z", gmem(F32, [512]))
            .alias("x", "y")
            .alias("x", "z")
            .build(),
        |_| {},
    );
    assert_exact(
        &one(&module),
        "E0020",
        operand_path("scale", "x"),
        "`x` is aliased more than once in map `scale`",
    );
}

#[test]
fn e0021_resident_operand_without_resident() {
    let module = single(
        scale_map()
            .scratch("hand", gmem(F32, [256]))
            .resident()
            .build(),
        |_| {},
    );
    assert_exact(
        &one(&module),
        "E0021",
        operand_path("scale", "hand"),
        "scratch operand `hand` of map `scale` is `resident`, but the module has no resident `hand`",
    );
}

#[test]
fn e0022_resident_operand_of_another_type() {
    let mut module = single(
        scale_map()
            .scratch("hand", gmem(F32, [256]))
            .resident()
            .build(),
        |_| {},
    );
    module.residents.push(Resident {
        name: "hand".into(),
        ty: gmem(F32, [128]),
        zeroed: true,
    });
    assert_exact(
        &one(&module),
        "E0022",
        operand_path("scale", "hand"),
        "scratch operand `hand` of map `scale` has type `gmem<f32[256]>`, but resident `hand` has type `gmem<f32[128]>`",
    );
    module.residents[0].ty = gmem(F32, [256]);
    assert_valid(&module);
}

#[test]
fn e0023_operands_of_the_wrong_kind() {
    let module = single(
        scale_map()
            .scalar("flag", Bool)
            .input("tile", smem(F32, [4]))
            .build(),
        |_| {},
    );
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0023",
        operand_path("scale", "tile"),
        "input operand `tile` of map `scale` has type `smem<f32[4]>`; inputs and outputs live in gmem or sem",
    );
    assert_exact(
        &d[1],
        "E0023",
        operand_path("scale", "flag"),
        "scalar operand `flag` of map `scale` has type `bool`; scalar parameters are f32, i32, u32, f16 or bf16",
    );
}

fn local_ref(shape: &[u32]) -> RefType {
    RefType {
        space: MemorySpace::Local,
        elem: F32,
        shape: shape.to_vec(),
        owner: None,
    }
}

#[test]
fn e0024_local_operand() {
    let module = single(scale_map().scratch("tmp", local_ref(&[4])).build(), |_| {});
    assert_exact(
        &one(&module),
        "E0024",
        operand_path("scale", "tmp"),
        "scratch operand `tmp` of map `scale` has type `local<f32[4]>`; local arrays exist only inside a kernel body",
    );
}

#[test]
fn e0025_resident_in_smem() {
    let mut module = scale(|_| {});
    module.residents.push(Resident {
        name: "r".into(),
        ty: smem(F32, [4]),
        zeroed: false,
    });
    assert_exact(
        &one(&module),
        "E0025",
        path([PathStep::Resident("r".into())]),
        "resident `r` has type `smem<f32[4]>`; smem lives only while a program runs",
    );
}

#[test]
fn e0026_bad_shapes() {
    let module = single(scale_map().scratch("buf", gmem(F32, [4, 0])).build(), |b| {
        b.local_array("tmp", F32, []);
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0026",
        operand_path("scale", "buf"),
        "scratch operand `buf` of map `scale` has type `gmem<f32[4, 0]>`, which has an extent of 0",
    );
    assert_exact(
        &d[1],
        "E0026",
        kstmt("kern", [s(0)]),
        "local array `tmp` in kernel `kern` has type `local<f32[]>`, which has no elements",
    );
}

// ---- ownership and smem ------------------------------------------------------

#[test]
fn e0027_smem_of_external_mesh() {
    let mut module = single(
        scale_map()
            .scratch("tile", smem(F32, [4]).owned_by("ext"))
            .build(),
        |_| {},
    );
    module.meshes.push(
        MeshBuilder::new("ext")
            .grid("e", 2)
            .threads("t", 128)
            .build(),
    );
    assert_exact(
        &one(&module),
        "E0027",
        operand_path("scale", "tile"),
        "scratch operand `tile` of map `scale` is smem of mesh `ext`, which runs no program in map `scale`: smem of a mesh that is not running has nowhere to live",
    );
}

#[test]
fn e0028_unowned_smem_with_two_programs() {
    let module = pair(
        MapBuilder::new("pipe").scratch("tile", smem(F32, [4])),
        |_| {},
        |_| {},
    );
    assert_exact(
        &one(&module),
        "E0028",
        operand_path("pipe", "tile"),
        "scratch operand `tile` of map `pipe` is smem without an owner, but map `pipe` has 2 programs",
    );
}

#[test]
fn e0029_smem_touched_by_another_program() {
    let module = pair(
        MapBuilder::new("pipe").scratch("tile", smem(F32, [4]).owned_by("q")),
        |b| b.store(at("tile", [0u32.into()]), 1.0),
        |b| b.store(at("tile", [0u32.into()]), 1.0),
    );
    assert_exact(
        &one(&module),
        "E0029",
        kstmt("kp", [s(0)]),
        "kernel `kp` runs on mesh `p` and touches `tile`, which is smem of mesh `q`",
    );
}

#[test]
fn e0030_too_much_smem() {
    let module = single(
        scale_map()
            .scratch("tile", smem(F32, [8192]))
            .scratch("more", smem(U32, [8192]))
            .build(),
        |_| {},
    );
    assert_exact(
        &one(&module),
        "E0030",
        path([PathStep::Map("scale".into()), PathStep::Program(0)]),
        "program 0 of map `scale` (kernel `kern` on mesh `m`) needs 65536 bytes of smem per block (`tile` 32768 + `more` 32768); the limit is 49152",
    );
    let roomy = ValidateOptions {
        smem_limit_bytes: 65536,
    };
    assert!(validate(&module, &roomy).is_ok());
}

#[test]
fn e0030_counts_only_the_programs_own_smem() {
    let module = pair(
        MapBuilder::new("pipe")
            .scratch("a", smem(F32, [8192]).owned_by("p"))
            .scratch("b", smem(F32, [8192]).owned_by("q")),
        |_| {},
        |_| {},
    );
    assert_valid(&module);
}

#[test]
fn e0031_owned_ref_without_coordinates() {
    let module = pair(
        MapBuilder::new("pipe").scratch("buf", gmem(F32, [4]).owned_by("q")),
        |b| b.store(at("buf", [0u32.into()]), 1.0),
        |b| b.store(at("buf", [0u32.into()]), 1.0),
    );
    assert_exact(
        &one(&module),
        "E0031",
        kstmt("kp", [s(0)]),
        "`buf` is owned by mesh `q`, but kernel `kp` runs on mesh `p` and uses `buf` without `@[...]`",
    );
}

#[test]
fn e0032_coordinates_on_unowned_ref() {
    let module = scale(|b| {
        b.let_("v", F32, at_block("x", [0u32.into()], [0u32.into()]).load());
    });
    assert_exact(
        &one(&module),
        "E0032",
        kstmt("kern", [s(0)]),
        "`x@[...]` in kernel `kern`: `x` (`gmem<f32[512]>`) has no owner mesh",
    );
}

#[test]
fn e0033_wrong_number_of_coordinates() {
    let module = pair(
        MapBuilder::new("pipe").scratch("buf", gmem(F32, [4]).owned_by("q")),
        |b| {
            b.store(
                at_block("buf", [0u32.into(), 1u32.into()], [0u32.into()]),
                1.0,
            )
        },
        |_| {},
    );
    assert_exact(
        &one(&module),
        "E0033",
        kstmt("kp", [s(0)]),
        "`buf` is owned by mesh `q`, which has 1 grid and cluster axes (c), but `buf@[...]` in kernel `kp` gives 2 coordinate(s)",
    );
}

#[test]
fn e0034_axis_index_of_another_mesh() {
    let module = pair(
        MapBuilder::new("pipe"),
        |b| {
            b.let_("i", U32, axis_index("c"));
        },
        |_| {},
    );
    assert_exact(
        &one(&module),
        "E0034",
        kstmt("kp", [s(0)]),
        "`axis_index(c)` in kernel `kp`: the program runs on mesh `p`, which has no axis `c` (its axes: b, t)",
    );
}

#[test]
fn e0035_axis_size_out_of_scope() {
    let module = scale(|b| {
        b.let_("i", U32, axis_size("zz"));
    });
    assert_exact(
        &one(&module),
        "E0035",
        kstmt("kern", [s(0)]),
        "`axis_size(zz)` in kernel `kern`: no mesh of map `scale` (m) has an axis `zz`",
    );
}

#[test]
fn e0035_axis_size_of_owner_mesh_is_in_scope() {
    let mut module = single(
        scale_map()
            .scratch("hand", gmem(F32, [4]).owned_by("ext"))
            .build(),
        |b| {
            b.let_("i", U32, axis_size("e"));
        },
    );
    module.meshes.push(
        MeshBuilder::new("ext")
            .grid("e", 2)
            .threads("t", 128)
            .build(),
    );
    assert_valid(&module);
}

// ---- names and types ----------------------------------------------------------

#[test]
fn e0036_unknown_name() {
    let module = scale(|b| {
        b.let_("a", F32, var("nope"));
        b.store(at("ghost", [0u32.into()]), 1.0);
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0036",
        kstmt("kern", [s(0)]),
        "unknown name `nope` in kernel `kern`",
    );
    assert_exact(
        &d[1],
        "E0036",
        kstmt("kern", [s(1)]),
        "unknown name `ghost` in kernel `kern`",
    );
}

#[test]
fn e0036_name_of_a_finished_block() {
    let module = scale(|b| {
        b.if_(true.into(), |b| {
            b.let_("inner", U32, 1u32);
        });
        b.let_("outer", U32, var("inner"));
    });
    assert_exact(
        &one(&module),
        "E0036",
        kstmt("kern", [s(1)]),
        "unknown name `inner` in kernel `kern`",
    );
}

#[test]
fn e0037_type_error() {
    let module = scale(|b| {
        b.let_("a", F32, load("x", [0u32.into()]) + 1u32);
    });
    assert_loose(
        &one(&module),
        "E0037",
        kstmt("kern", [s(0)]),
        &[
            "operands of `+` have different types: `f32` and `u32`, in `",
            "` in kernel `kern`",
        ],
    );
}

#[test]
fn e0038_declared_type_differs() {
    let module = scale(|b| {
        b.let_("i", U32, 1);
        b.var("acc", F32, 0.0);
        b.assign("acc", 1u32);
        b.atomic_let(
            "old",
            I32,
            AtomicOp::Add,
            at("c", [0u32.into()]),
            [1u32.into()],
        );
    });
    let mut module = module;
    module.maps[0].scratch.push(Operand {
        name: "c".into(),
        ty: gmem(U32, [1]).into(),
        zeroed: true,
        resident: false,
    });
    module.kernels[0].params = module.maps[0].params();
    let d = diags(&module);
    assert_eq!(d.len(), 3, "{d:#?}");
    assert_loose(
        &d[0],
        "E0038",
        kstmt("kern", [s(0)]),
        &["`let i` in kernel `kern` is declared `u32` but given a `i32` value: `"],
    );
    assert_loose(
        &d[1],
        "E0038",
        kstmt("kern", [s(2)]),
        &["assignment to `acc` in kernel `kern` is declared `f32` but given a `u32` value: `"],
    );
    assert_exact(
        &d[2],
        "E0038",
        kstmt("kern", [s(3)]),
        "the result `old` of `atomic_add` in kernel `kern` is declared `i32`, but `c` holds `u32`",
    );
}

#[test]
fn e0039_condition_not_bool() {
    let module = scale(|b| {
        b.if_(axis_index("t"), |_| {});
        b.let_("v", F32, select(1u32.into(), 1.0.into(), 2.0.into()));
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_loose(
        &d[0],
        "E0039",
        kstmt("kern", [s(0)]),
        &[
            "the condition `",
            "` of `if` in kernel `kern` has type `u32`, not bool",
        ],
    );
    assert_loose(
        &d[1],
        "E0039",
        kstmt("kern", [s(1)]),
        &[
            "the condition of `select` in `",
            "` has type `u32`, not bool",
        ],
    );
}

#[test]
fn e0040_index_not_integer() {
    let module = scale(|b| {
        b.let_("v", F32, load("x", [1.0.into()]));
    });
    assert_loose(
        &one(&module),
        "E0040",
        kstmt("kern", [s(0)]),
        &[
            "the index `",
            "` of `x` has type `f32`; indices are i32 or u32",
        ],
    );
}

#[test]
fn e0041_stored_value_of_wrong_type() {
    let module = scale(|b| b.store(at("y", [0u32.into()]), 1u32));
    assert_loose(
        &one(&module),
        "E0041",
        kstmt("kern", [s(0)]),
        &[
            "the stored value `",
            "` has type `u32`, but `y` holds `f32` (kernel `kern`)",
        ],
    );
}

#[test]
fn e0042_assignment_to_let() {
    let module = scale(|b| {
        b.let_("i", U32, 1u32);
        b.assign("i", 2u32);
        b.assign("alpha", 2.0);
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0042",
        kstmt("kern", [s(1)]),
        "`i` is a `let` binding in kernel `kern`, not a `var`; it cannot be assigned",
    );
    assert_exact(
        &d[1],
        "E0042",
        kstmt("kern", [s(2)]),
        "`alpha` is a scalar parameter in kernel `kern`, not a `var`; it cannot be assigned",
    );
}

#[test]
fn e0043_name_declared_twice() {
    let module = scale(|b| {
        b.let_("x", U32, 1u32);
        b.let_("k", U32, 0u32);
        b.if_else(
            true.into(),
            |b| {
                // Sibling blocks may reuse a name...
                b.let_("j", U32, 1u32);
            },
            |b| {
                b.let_("j", U32, 2u32);
                // ...but not shadow one in scope.
                b.let_("k", U32, 2u32);
            },
        );
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0043",
        kstmt("kern", [s(0)]),
        "`x` is declared twice in kernel `kern`; it is already a ref parameter in scope here",
    );
    assert_exact(
        &d[1],
        "E0043",
        kstmt("kern", [s(2), PathStep::Else, s(1)]),
        "`k` is declared twice in kernel `kern`; it is already a `let` binding in scope here",
    );
}

#[test]
fn e0044_bad_loop_variable() {
    let module = scale(|b| {
        b.for_("f", F32, 0.0, 4.0, |_, _| {});
        b.for_("k", U32, 0, 4u32, |_, _| {});
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0044",
        kstmt("kern", [s(0)]),
        "loop variable `f` in kernel `kern` has type `f32`; loops count in i32 or u32",
    );
    assert_loose(
        &d[1],
        "E0044",
        kstmt("kern", [s(1)]),
        &[
            "the start bound `",
            "` of loop `k` in kernel `kern` has type `i32`, but the loop variable is `u32`",
        ],
    );
}

#[test]
fn e0045_loop_bound_not_constant() {
    let module = scale(|b| {
        // A block-uniform `let` may bound a loop; a thread value may not.
        let n = b.let_("n", U32, 4u32);
        b.for_("k", U32, 0u32, n, |_, _| {});
        let v = b.let_("v", U32, axis_index("t"));
        b.for_("i", U32, 0u32, v, |_, _| {});
        b.for_("j", U32, axis_index("t"), axis_size("t"), |_, _| {});
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0045",
        kstmt("kern", [s(3)]),
        "the end bound `v` of loop `i` in kernel `kern` uses `v`, a `let` binding that is not block-uniform",
    );
    assert_exact(
        &d[1],
        "E0045",
        kstmt("kern", [s(4)]),
        "the start bound `axis_index(t)` of loop `j` in kernel `kern` uses `axis_index(t)`, the thread axis",
    );
}

// ---- ref accesses ----------------------------------------------------------

#[test]
fn e0046_rank_mismatch() {
    let module = scale(|b| {
        b.let_("v", F32, load("x", [0u32.into(), 0u32.into()]));
    });
    assert_exact(
        &one(&module),
        "E0046",
        kstmt("kern", [s(0)]),
        "`x` has 1 dimension(s) (`gmem<f32[512]>`) but is indexed with 2 index(es) in kernel `kern`",
    );
}

#[test]
fn e0047_constant_index_out_of_bounds() {
    let module = pair(
        MapBuilder::new("pipe").scratch("buf", gmem(F32, [4]).owned_by("q")),
        |b| {
            b.store(at_block("buf", [2u32.into()], [0u32.into()]), 1.0);
            b.store(at_block("buf", [0u32.into()], [(-1).into()]), 1.0);
        },
        |_| {},
    );
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(&d[0], "E0047", kstmt("kp", [s(0)]), "block coordinate 2 of `buf` is out of bounds for axis `c` of mesh `q` (size 2) in kernel `kp`");
    assert_exact(
        &d[1],
        "E0047",
        kstmt("kp", [s(1)]),
        "index -1 is out of bounds for dimension 0 of `buf` (extent 4) in kernel `kp`",
    );
}

fn with_sem(map: MapBuilder) -> MapBuilder {
    map.scratch("s", sem([4])).scratch("c", gmem(U32, [4]))
}

#[test]
fn e0048_memory_access_to_semaphore() {
    let module = single(with_sem(scale_map()).build(), |b| {
        b.let_("v", I32, load("s", [0u32.into()]));
        b.store(at("s", [0u32.into()]), 1);
        b.atomic(AtomicOp::Add, at("s", [0u32.into()]), [1.into()]);
    });
    let d = diags(&module);
    let found: Vec<_> = d.iter().map(|d| (d.code, d.message.as_str())).collect();
    assert_eq!(
        found,
        [
            (
                "E0048",
                "load on the semaphore `s` (`sem<[4]>`) in kernel `kern`"
            ),
            (
                "E0048",
                "store on the semaphore `s` (`sem<[4]>`) in kernel `kern`"
            ),
            (
                "E0048",
                "atomic_add on the semaphore `s` (`sem<[4]>`) in kernel `kern`"
            ),
        ]
    );
}

#[test]
fn e0049_semaphore_operation_on_data() {
    let module = single(with_sem(scale_map()).build(), |b| {
        b.signal(at("c", [0u32.into()]), 1);
        b.sem_read("v", at("y", [0u32.into()]));
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0049",
        kstmt("kern", [s(0)]),
        "`signal` on `c` in kernel `kern`, which is a `gmem<u32[4]>`, not a semaphore",
    );
    assert_exact(
        &d[1],
        "E0049",
        kstmt("kern", [s(1)]),
        "`read` on `y` in kernel `kern`, which is a `gmem<f32[512]>`, not a semaphore",
    );
}

#[test]
fn e0050_atomic_on_float_or_local() {
    let module = scale(|b| {
        b.atomic(AtomicOp::Or, at("y", [0u32.into()]), [1.0.into()]);
        b.local_array("tmp", U32, [4]);
        b.atomic(AtomicOp::Add, at("tmp", [0u32.into()]), [1u32.into()]);
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0050",
        kstmt("kern", [s(0)]),
        "`atomic_or` on `y` in kernel `kern`, whose elements are `f32`",
    );
    assert!(d[0].help.contains("u32 ref"), "{:?}", d[0].help);
    assert_exact(
        &d[1],
        "E0050",
        kstmt("kern", [s(2)]),
        "`atomic_add` on the local array `tmp` in kernel `kern`",
    );
}

#[test]
fn f32_atomics_are_valid_for_value_ops() {
    // load, store, add, min, max and exchange on f32 gmem and smem elements.
    let map = scale_map().scratch("tile", smem(F32, [128])).build();
    let module = single(map, |b| {
        let v = b.atomic_let(
            "old_add",
            F32,
            AtomicOp::Add,
            at("y", [0u32.into()]),
            [1.5.into()],
        );
        b.atomic(AtomicOp::Min, at("y", [1u32.into()]), [v]);
        b.atomic(AtomicOp::Max, at("y", [2u32.into()]), [var("alpha")]);
        b.atomic(AtomicOp::Store, at("tile", [axis_index("t")]), [0.0.into()]);
        let got = b.atomic_let("got", F32, AtomicOp::Load, at("tile", [0u32.into()]), []);
        b.atomic_let(
            "was",
            F32,
            AtomicOp::Exchange,
            at("tile", [1u32.into()]),
            [got],
        );
        b.atomic(AtomicOp::Add, at("tile", [2u32.into()]), [(-2.0).into()]);
    });
    assert_valid(&module);
}

#[test]
fn e0050_f32_bitwise_and_compare_exchange_atomics() {
    let module = scale(|b| {
        b.atomic(AtomicOp::And, at("y", [0u32.into()]), [1.0.into()]);
        b.atomic(AtomicOp::Xor, at("y", [0u32.into()]), [1.0.into()]);
        b.atomic_let(
            "old",
            F32,
            AtomicOp::CompareExchange,
            at("y", [0u32.into()]),
            [0.0.into(), 1.0.into()],
        );
    });
    let d = diags(&module);
    let got: Vec<_> = d.iter().map(|d| (d.code, d.message.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (
                "E0050",
                "`atomic_and` on `y` in kernel `kern`, whose elements are `f32`"
            ),
            (
                "E0050",
                "`atomic_xor` on `y` in kernel `kern`, whose elements are `f32`"
            ),
            (
                "E0050",
                "`atomic_compare_exchange` on `y` in kernel `kern`, whose elements are `f32`"
            ),
        ],
        "{d:#?}"
    );
}

#[test]
fn e0050_sixteen_bit_and_bool_atomics_stay_invalid() {
    for elem in [F16, BF16, Bool] {
        let map = MapBuilder::new("scale")
            .program("m", "kern")
            .output("y", gmem(elem, [512]))
            .build();
        let module = single(map, |b| {
            b.atomic_let("old", elem, AtomicOp::Load, at("y", [0u32.into()]), []);
        });
        let d = one(&module);
        assert_exact(
            &d,
            "E0050",
            kstmt("kern", [s(0)]),
            &format!("`atomic_load` on `y` in kernel `kern`, whose elements are `{elem}`"),
        );
        assert!(d.help.contains("f32"), "{elem}: {:?}", d.help);
    }
}

#[test]
fn f32_atomic_operands_and_results_have_the_element_type() {
    let module = scale(|b| {
        b.atomic(AtomicOp::Add, at("y", [0u32.into()]), [1u32.into()]);
        b.atomic_let(
            "old",
            I32,
            AtomicOp::Max,
            at("y", [0u32.into()]),
            [2.0.into()],
        );
    });
    let d = diags(&module);
    let codes: Vec<_> = d.iter().map(|d| d.code).collect();
    assert_eq!(codes, vec!["E0041", "E0038"], "{d:#?}");
    assert_exact(
        &d[1],
        "E0038",
        kstmt("kern", [s(1)]),
        "the result `old` of `atomic_max` in kernel `kern` is declared `i32`, but `y` holds `f32`",
    );
}

#[test]
fn e0051_malformed_atomics() {
    let module = single(with_sem(scale_map()).build(), |b| {
        b.atomic_let(
            "old",
            U32,
            AtomicOp::Store,
            at("c", [0u32.into()]),
            [1u32.into()],
        );
        b.atomic(
            AtomicOp::Add,
            at("c", [0u32.into()]),
            [1u32.into(), 2u32.into()],
        );
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0051",
        kstmt("kern", [s(0)]),
        "`atomic_store` returns nothing, but its result is bound to `old` (kernel `kern`)",
    );
    assert_exact(
        &d[1],
        "E0051",
        kstmt("kern", [s(1)]),
        "`atomic_add` takes 1 operand(s) after the target, found 2 (kernel `kern`)",
    );
}

#[test]
fn e0052_write_to_input() {
    let module = scale(|b| b.store(at("x", [0u32.into()]), 1.0));
    assert_exact(
        &one(&module),
        "E0052",
        kstmt("kern", [s(0)]),
        "`store` writes the input `x` in kernel `kern`",
    );
}

#[test]
fn e0052_resident_input_may_be_written() {
    let mut map = scale_map().input("hand", gmem(F32, [4])).build();
    // (`MapBuilder::resident` marks the last operand of the last non-empty
    // list among inputs, outputs and scratch, so set the flag directly.)
    map.inputs[1].resident = true;
    let mut module = single(map, |b| b.store(at("hand", [0u32.into()]), 1.0));
    module.residents.push(Resident {
        name: "hand".into(),
        ty: gmem(F32, [4]),
        zeroed: true,
    });
    assert_valid(&module);
}

// ---- uniformity -------------------------------------------------------------

#[test]
fn e0053_barrier_under_a_load() {
    let module = scale(|b| {
        let i = b.let_("i", U32, gid());
        b.if_(load("x", [i]).gt(0.0), |b| b.barrier());
    });
    assert_loose(
        &one(&module),
        "E0053",
        kstmt("kern", [s(1), PathStep::Then, s(0)]),
        &[
            "barrier in kernel `kern` is under the condition `",
            "`, which is not block-uniform (it loads from `x`)",
        ],
    );
}

#[test]
fn e0053_semaphore_ops_under_thread_dependent_control() {
    let module = single(with_sem(scale_map()).build(), |b| {
        b.var("lane", U32, 0u32);
        b.if_(axis_index("t").eq(0u32), |b| {
            b.signal(at("s", [0u32.into()]), 1);
            b.assign("lane", 1u32);
        });
        b.if_(var("lane").eq(1u32), |b| {
            b.sem_read("r", at("s", [0u32.into()]));
        });
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_loose(
        &d[0],
        "E0053",
        kstmt("kern", [s(1), PathStep::Then, s(0)]),
        &[
            "signal in kernel `kern` is under the condition `",
            "`, which is not block-uniform (`axis_index(t)` is the thread axis)",
        ],
    );
    assert_loose(
        &d[1],
        "E0053",
        kstmt("kern", [s(2), PathStep::Then, s(0)]),
        &[
            "read in kernel `kern` is under the condition `",
            "`, which is not block-uniform (`lane` is not block-uniform)",
        ],
    );
}

#[test]
fn e0053_uniform_conditions_pass() {
    let module = single(with_sem(scale_map()).build(), |b| {
        let r = b.sem_read("r", at("s", [0u32.into()]));
        b.var("round", U32, axis_index("b"));
        b.if_(r.gt(0).and(var("round").lt(axis_size("b"))), |b| {
            b.for_("k", U32, 0u32, axis_size("b"), |b, k| {
                b.if_(k.eq(axis_index("b")), |b| b.barrier());
            });
        });
    });
    assert_valid(&module);
}

#[test]
fn e0054_non_uniform_semaphore_operands() {
    let module = single(with_sem(scale_map()).build(), |b| {
        let old = b.atomic_let(
            "old",
            U32,
            AtomicOp::Add,
            at("c", [0u32.into()]),
            [1u32.into()],
        );
        b.signal(at("s", [axis_index("t") % 4u32]), 1);
        b.wait(at("s", [0u32.into()]), old.cast(I32));
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_loose(&d[0], "E0054", kstmt("kern", [s(1)]), &["the index `", "` of `signal` in kernel `kern` is not block-uniform (`axis_index(t)` is the thread axis)"]);
    assert_loose(
        &d[1],
        "E0054",
        kstmt("kern", [s(2)]),
        &[
            "the amount `",
            "` of `wait` in kernel `kern` is not block-uniform (`old` is not block-uniform)",
        ],
    );
}

#[test]
fn e0055_semaphore_amount_below_one() {
    let module = single(with_sem(scale_map()).build(), |b| {
        b.wait_nodec(at("s", [0u32.into()]), 0);
    });
    assert_exact(
        &one(&module),
        "E0055",
        kstmt("kern", [s(0)]),
        "`wait_nodec` on `s` in kernel `kern` has amount 0; amounts are at least 1",
    );
}

#[test]
fn e0056_invalid_names() {
    let mut module = scale(|b| {
        b.let_("if", U32, 1u32);
    });
    module.meshes[0].grid[0].name = "my axis".into();
    let found: Vec<_> = diags(&module)
        .into_iter()
        .filter(|d| d.code == "E0056")
        .map(|d| d.message)
        .collect();
    assert_eq!(
        found,
        [
            "axis `my axis` is not a valid name",
            "variable `if` is not a valid name"
        ]
    );
}

/// An expression `depth` levels deep: `-(-(...(1u)))` with `depth - 1` negations.
fn nested_negations(depth: usize) -> Expr {
    let mut e = Expr::from(1i32);
    for _ in 1..depth {
        e = -e;
    }
    e
}

#[test]
fn e0057_nesting_the_text_format_cannot_read() {
    // The kernel body is level 1; each negation, the parentheses of `-(1)`
    // and the literal are one level each: 253 negations make 256 levels.
    let fits = scale(|b| {
        b.let_("v", I32, nested_negations(254));
    });
    assert_valid(&fits);
    let printed = mpmd_core::text::print(&fits);
    assert_eq!(mpmd_core::text::parse(&printed).unwrap().0, fits);

    let too_deep = scale(|b| {
        b.let_("v", I32, nested_negations(255));
    });
    assert_exact(
        &one(&too_deep),
        "E0057",
        kstmt("kern", [s(0)]),
        "this statement of kernel `kern` nests 257 levels deep (blocks and expressions); at most 256 are allowed",
    );
    // ...and the parser indeed refuses what it would print.
    assert!(mpmd_core::text::parse(&mpmd_core::text::print(&too_deep)).is_err());

    // Blocks count too: the expression that fits, one `if` deeper.
    let in_block = scale(|b| {
        b.if_(Expr::from(true), |b| {
            b.let_("v", I32, nested_negations(254));
        });
    });
    assert_exact(
        &one(&in_block),
        "E0057",
        kstmt("kern", [s(0), PathStep::Then, s(0)]),
        "this statement of kernel `kern` nests 257 levels deep (blocks and expressions); at most 256 are allowed",
    );
}

// ---- reporting ----------------------------------------------------------------

#[test]
fn reports_every_error_not_only_the_first() {
    let mut module = scale(|b| {
        b.store(at("x", [0u32.into()]), 1.0);
        b.let_("v", F32, load("y", [600u32.into()]));
    });
    module.meshes[0].threads.size = 4096;
    let codes: Vec<_> = diags(&module).iter().map(|d| d.code).collect();
    assert_eq!(codes, ["E0010", "E0052", "E0047"]);
}

#[test]
fn diagnostics_carry_rule_and_help() {
    let d = one(&scale(|b| b.store(at("x", [0u32.into()]), 1.0)));
    assert_eq!(d.rule, "inputs are read-only unless `resident`");
    assert_eq!(
        d.help,
        "write an output instead (alias `x -> <output>` to update it in place), or make `x` a resident"
    );
}

#[test]
fn render_without_source_prints_the_ir_path() {
    let d = one(&scale(|b| b.store(at("x", [0u32.into()]), 1.0)));
    assert_eq!(
        render(&d, "scale.mpmd", None),
        "error[E0052]: `store` writes the input `x` in kernel `kern`\n  --> scale.mpmd (kernel kern / stmt 0)\n  = rule: inputs are read-only unless `resident`\n  = help: write an output instead (alias `x -> <output>` to update it in place), or make `x` a resident\n"
    );
}

#[test]
fn render_with_source_prints_line_column_and_caret() {
    let d = Diagnostic {
        code: "E0053",
        path: kstmt("k", [s(0), PathStep::Then, s(0)]),
        message: "barrier in kernel `k` is under the condition `x[i] > 0.0`, which is not block-uniform (it loads from `x`)".into(),
        rule: "r".into(),
        help: "h".into(),
    };
    let source = "kernel k(x: gmem<f32[4]>) {\n  if x[0] > 0.0 {\n    barrier;\n  }\n}\n";
    let mut map = SourceMap::default();
    map.spans.insert(
        kstmt("k", [s(0)]),
        Span {
            start: 30,
            end: 52,
            line: 2,
            column: 3,
        },
    );
    map.spans.insert(
        kstmt("k", [s(0), PathStep::Then, s(0)]),
        Span {
            start: 49,
            end: 57,
            line: 3,
            column: 5,
        },
    );
    assert_eq!(
        render(&d, "k.mpmd", Some((source, &map))),
        "error[E0053]: barrier in kernel `k` is under the condition `x[i] > 0.0`, which is not block-uniform (it loads from `x`)\n --> k.mpmd:3:5\n  |\n3 |     barrier;\n  |     ^^^^^^^^\n  = rule: r\n  = help: h\n"
    );
    // A path without its own span points at its nearest ancestor with one.
    let nested = Diagnostic {
        path: kstmt("k", [s(0), PathStep::Else, s(4)]),
        ..d
    };
    assert!(render(&nested, "k.mpmd", Some((source, &map)))
        .contains(" --> k.mpmd:2:3\n  |\n2 |   if x[0] > 0.0 {\n  |   ^^^^^^^^^^^^^^^\n"));
}

#[test]
fn every_code_is_documented_once() {
    let docs = include_str!("../../docs/errors.md");
    for (code, title, _) in CODES {
        let heading = format!("## {code}: {title}\n");
        assert_eq!(
            docs.matches(&heading).count(),
            1,
            "docs/errors.md lacks `{heading}`"
        );
    }
    let codes: Vec<_> = CODES.iter().map(|(c, _, _)| *c).collect();
    let expected: Vec<String> = (1..=codes.len()).map(|n| format!("E{n:04}")).collect();
    assert_eq!(codes, expected, "codes are numbered without gaps");
}

#[test]
fn a_kernel_run_by_two_programs_is_reported_once() {
    let mut module = pair(
        MapBuilder::new("pipe"),
        |b| {
            b.let_("v", U32, var("nope"));
        },
        |_| {},
    );
    module.maps[0].programs[1].kernel = "kp".into();
    module.kernels.pop();
    assert_exact(
        &one(&module),
        "E0036",
        kstmt("kp", [s(0)]),
        "unknown name `nope` in kernel `kp`",
    );
}

#[test]
fn kernels_no_map_runs_get_the_context_free_checks() {
    let mut module = scale(|_| {});
    module.kernels.push(Kernel {
        name: "spare".into(),
        params: vec![
            Param {
                name: "a".into(),
                ty: Type::Scalar(U32),
            },
            Param {
                name: "a".into(),
                ty: Type::Scalar(U32),
            },
        ],
        body: BodyBuilder::nested(|b| b.store(at("a", [0u32.into()]), 1u32)),
    });
    let d = diags(&module);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_exact(
        &d[0],
        "E0043",
        path([
            PathStep::Kernel("spare".into()),
            PathStep::Param("a".into()),
        ]),
        "`a` is declared twice in kernel `spare`; it is already a scalar parameter in scope here",
    );
    assert_exact(
        &d[1],
        "E0037",
        kstmt("spare", [s(0)]),
        "`a` is not a ref and cannot be indexed, in kernel `spare`",
    );
}

#[test]
fn two_programs_on_one_mesh_are_allowed_and_each_owns_its_smem() {
    let map = MapBuilder::new("twice")
        .program("m", "first")
        .program("m", "second")
        .output("y", gmem(U32, [512]))
        .scratch("tile", smem(U32, [8192]).owned_by("m"))
        .build();
    let body = |b: &mut BodyBuilder| {
        b.store(at("tile", [axis_index("t")]), axis_index("b"));
        b.barrier();
    };
    let module = Module {
        meshes: vec![mesh_m()],
        kernels: vec![
            KernelBuilder::new("first", map.params()).body(body),
            KernelBuilder::new("second", map.params()).body(|b| {
                b.store(at("y", [gid()]), load("tile", [0u32.into()]));
            }),
        ],
        maps: vec![map],
        ..Default::default()
    };
    assert_valid(&module);
}

// ---- limits: sizes, constant indices, nesting of builder-made modules ----------

/// The diagnostics of a parsed module, as (code, message).
fn parsed_diags(src: &str) -> Vec<(&'static str, String)> {
    let (module, _) = mpmd_core::text::parse(src).unwrap();
    match validate(&module, &ValidateOptions::default()) {
        Ok(_) => vec![],
        Err(ds) => ds.into_iter().map(|d| (d.code, d.message)).collect(),
    }
}

/// ../shared/defects/d04a..d04d: element counts that wrap a u64 to 4 or 0.
fn wrapping_ref(kernel: &str, map_extra: &str) -> String {
    format!(
        "mesh m {{\n  grid [b = 1];\n  threads t = 4;\n}}\n\n{kernel}\n\nmap k {{\n  programs [m: k];\n{map_extra}\n}}\n\ncall k();\n"
    )
}

const HUGE: &str = "20, 5581, 8681, 49477, 384773";

#[test]
fn e0059_refs_whose_sizes_wrap_a_u64_are_refused_with_their_true_size() {
    // d04a: 2^64 + 4 elements used to get a 4-word buffer.
    let d04a = wrapping_ref(
        &format!(
            "kernel k(y: gmem<u32[{HUGE}]>) {{\n  y[19u, 5580u, 8680u, 49476u, 384772u] = 7u;\n}}"
        ),
        &format!("  outputs [y: gmem<u32[{HUGE}]>];"),
    );
    assert_eq!(
        parsed_diags(&d04a),
        [("E0059", format!("output operand `y` of map `k` has type `gmem<u32[{HUGE}]>`: 18446744073709551620 elements, 73786976294838206480 bytes in all; a buffer holds at most 1099511627776 bytes (1 TiB)"))]
    );
    // d04b: 2^64 elements used to wrap to 0.
    let d04b = wrapping_ref(
        "kernel k(y: gmem<u32[65536, 65536, 65536, 65536]>) {\n  y[0u, 0u, 0u, axis_index(t)] = 7u;\n}",
        "  outputs [y: gmem<u32[65536, 65536, 65536, 65536]>];",
    );
    assert_eq!(
        parsed_diags(&d04b),
        [("E0059", "output operand `y` of map `k` has type `gmem<u32[65536, 65536, 65536, 65536]>`: 18446744073709551616 elements, 73786976294838206464 bytes in all; a buffer holds at most 1099511627776 bytes (1 TiB)".to_string())]
    );
    // d04c: smem of 2^64 + 4 elements, counted exactly by E0030.
    let d04c = wrapping_ref(
        &format!("kernel k(y: gmem<u32[4]>, tile: smem<u32[{HUGE}]>) {{\n  tile[19u, 5580u, 8680u, 49476u, 384772u - axis_index(t)] = axis_index(t);\n  barrier;\n  y[axis_index(t)] = tile[0u, 0u, 0u, 0u, axis_index(t)];\n}}"),
        &format!("  outputs [y: gmem<u32[4]>];\n  scratch [tile: smem<u32[{HUGE}]>];"),
    );
    assert_eq!(
        parsed_diags(&d04c),
        [("E0030", "program 0 of map `k` (kernel `k` on mesh `m`) needs 73786976294838206480 bytes of smem per block (`tile` 73786976294838206480); the limit is 49152".to_string())]
    );
    // d04d: a local array of 2^64 + 4 elements.
    let d04d = wrapping_ref(
        &format!("kernel k(y: gmem<u32[4]>) {{\n  local tmp: u32[{HUGE}];\n  tmp[19u, 5580u, 8680u, 49476u, 384772u] = 5u;\n  y[axis_index(t)] = tmp[0u, 0u, 0u, 0u, 3u];\n}}"),
        "  outputs [y: gmem<u32[4]>];",
    );
    assert_eq!(
        parsed_diags(&d04d),
        [("E0059", format!("local array `tmp` in kernel `k` has type `local<u32[{HUGE}]>`: 18446744073709551620 elements, 73786976294838206480 bytes per thread; a local array holds at most 524288 bytes (512 KiB)"))]
    );
}

#[test]
fn e0059_owned_refs_count_every_instance() {
    // 2^30 bytes per block times 2^11 blocks is 2^41 bytes.
    let mut module = scale(|_| {});
    module.meshes[0].grid[0].size = 2048;
    let ty = gmem(F32, [1 << 28]).owned_by("m");
    module.maps[0].outputs[0].ty = Type::Ref(ty.clone());
    module.kernels[0].params[1].ty = Type::Ref(ty);
    assert_exact(
        &one(&module),
        "E0059",
        operand_path("scale", "y"),
        "output operand `y` of map `scale` has type `gmem<f32[268435456]> @ m`: 268435456 elements per block, times 2048 blocks of mesh `m`, 2199023255552 bytes in all; a buffer holds at most 1099511627776 bytes (1 TiB)",
    );
}

#[test]
fn e0058_meshes_with_more_blocks_than_a_u32_counts() {
    let mut module = scale(|_| {});
    module.meshes[0].grid = vec![
        Axis {
            name: "a".into(),
            size: 65536,
        },
        Axis {
            name: "b".into(),
            size: 65536,
        },
    ];
    assert_exact(
        &one(&module),
        "E0058",
        path([PathStep::Mesh("m".into())]),
        "mesh `m` has 4294967296 blocks (65536 x 65536); a mesh has at most 4294967295",
    );
    module.meshes[0].grid[1].size = 65535;
    assert_valid(&module);
    // Past 2^64 the count is still exact.
    module.meshes[0].grid = ["a", "b", "c"]
        .iter()
        .map(|n| Axis {
            name: n.to_string(),
            size: u32::MAX,
        })
        .collect();
    assert!(one(&module)
        .message
        .starts_with("mesh `m` has 79228162458924105385300197375 blocks"));
}

#[test]
fn e0047_indices_that_fold_to_a_constant_out_of_bounds() {
    // ../shared/defects/d13_wgsl_const_oob.mpmd: naga refused the WGSL.
    let d13 = "mesh m {\n  grid [b = 1];\n  threads t = 64;\n}\n\nkernel k(y: gmem<f32[64]>, tile: smem<f32[64]>) {\n  tile[axis_size(t)] = 1.0;\n  barrier;\n  y[axis_index(t)] = tile[axis_index(t)];\n}\n\nmap k {\n  programs [m: k];\n  outputs [y: gmem<f32[64]>];\n  scratch [tile: smem<f32[64]>];\n}\n\ncall k();\n";
    assert_eq!(
        parsed_diags(d13),
        [("E0047", "index `axis_size(t)` (= 64) is out of bounds for dimension 0 of `tile` (extent 64) in kernel `k`".to_string())]
    );
    // Constant `let`s and operators fold; the last element is fine.
    let folded = d13.replace(
        "  tile[axis_size(t)] = 1.0;",
        "  let n: u32 = axis_size(t) / 2u;\n  tile[n * 2u - 1u] = 1.0;\n  tile[min(n + n, 100u)] = 2.0;\n  tile[u32(-1)] = 3.0;",
    );
    assert_eq!(
        parsed_diags(&folded),
        [
            ("E0047", "index `min(n + n, 100u)` (= 64) is out of bounds for dimension 0 of `tile` (extent 64) in kernel `k`".to_string()),
            ("E0047", "index `u32(-1)` (= 4294967295) is out of bounds for dimension 0 of `tile` (extent 64) in kernel `k`".to_string()),
        ]
    );
    // Values only known at run time are never constants.
    let runtime = d13.replace(
        "tile[axis_size(t)]",
        "tile[axis_index(t) + axis_size(t) - 64u]",
    );
    assert_eq!(parsed_diags(&runtime), []);
}

/// `x0 + x0 + ...` with `terms` terms, built without recursion.
fn flat_sum(terms: usize) -> Expr {
    let mut e = Expr::from(1i32);
    for _ in 1..terms {
        e = e + 1i32;
    }
    e
}

#[test]
fn e0057_modules_of_any_depth_are_measured_without_recursion() {
    // binchain 12000 overflowed the stack in validation and lowering. Deep
    // trees are leaked: dropping one recurses as deep as it is.
    let chain = scale(|b| {
        b.let_("v", I32, flat_sum(200_000));
    });
    assert_exact(
        &one(&chain),
        "E0057",
        kstmt("kern", [s(0)]),
        "this statement of kernel `kern` nests 200001 levels deep (blocks and expressions); at most 256 are allowed",
    );
    std::mem::forget(chain);
    // 100,000 nested `if`s: reported once, at the first statement past the limit.
    let mut body = vec![Stmt::Barrier];
    for _ in 0..100_000 {
        body = vec![Stmt::If {
            cond: Expr::from(true),
            then_body: body,
            else_body: vec![],
        }];
    }
    let ifs = scale(|b| {
        for stmt in std::mem::take(&mut body) {
            b.push(stmt);
        }
    });
    let mut at = vec![s(0)];
    for _ in 0..255 {
        at.extend([PathStep::Then, s(0)]);
    }
    assert_exact(
        &one(&ifs),
        "E0057",
        kstmt("kern", at),
        "this statement of kernel `kern` nests 257 levels deep (blocks and expressions); at most 256 are allowed",
    );
    std::mem::forget(ifs);
}
