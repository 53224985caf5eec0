//! `parse(print(m)) == m` for random well-formed modules, and
//! `parse_file(print_file(m, c)) == (m, c)` with a case section.

use mpmd_core::case::{CaseSpec, CompareMode, Expectation, Generator};
use mpmd_core::ir::*;
use mpmd_core::text::{parse, parse_expr, parse_file, print, print_expr, print_file};
use mpmd_core::ErrorClass;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;

/// Names, including builtin function names, which are names unless followed
/// by `(` (and `bitcast` unless followed by `<type>`).
const NAMES: &[&str] = &[
    "a",
    "b",
    "x",
    "y",
    "n",
    "acc",
    "_t0",
    "Idx9",
    "exp",
    "read",
    "select",
    "signal",
    "wait",
    "min",
    "atomic_add",
    "axis_index",
    "f32_bits",
    "bitcast",
    "uniform",
    "ok",
];

fn name() -> impl Strategy<Value = Name> {
    select(NAMES).prop_map(str::to_string)
}

fn scalar_type() -> impl Strategy<Value = ScalarType> {
    select(ScalarType::ALL.to_vec())
}

fn f32_bits() -> impl Strategy<Value = u32> {
    let edges = vec![
        0.0f32.to_bits(),
        (-0.0f32).to_bits(),
        f32::INFINITY.to_bits(),
        f32::NEG_INFINITY.to_bits(),
        0x7fc0_0000, // canonical NaN
        0x7fc0_0001,
        0xffc0_0000,
        0x7f80_0001, // signalling NaN
        1,           // smallest subnormal
        0x8000_0001,
        f32::MAX.to_bits(),
        f32::MIN.to_bits(),
        f32::MIN_POSITIVE.to_bits(),
        f32::EPSILON.to_bits(),
        1.0f32.to_bits(),
        (-1.5f32).to_bits(),
        1e10f32.to_bits(),
        1e16f32.to_bits(),
        1e-7f32.to_bits(),
    ];
    prop_oneof![
        any::<u32>(),
        (-1000i32..1000).prop_map(|v| (v as f32 / 8.0).to_bits()),
        select(edges),
    ]
}

fn literal() -> impl Strategy<Value = Literal> {
    prop_oneof![
        f32_bits().prop_map(|b| Literal::F32(F32Bits(b))),
        prop_oneof![
            any::<i32>(),
            select(vec![i32::MIN, i32::MIN + 1, i32::MAX, -1, 0, 1])
        ]
        .prop_map(Literal::I32),
        prop_oneof![any::<u32>(), select(vec![0, 1, u32::MAX])].prop_map(Literal::U32),
        any::<bool>().prop_map(Literal::Bool),
        half_bits().prop_map(Literal::F16),
        half_bits().prop_map(Literal::BF16),
    ]
}

/// Bits of a 16-bit float: any pattern, and the edges of both formats
/// (zeros, infinities, NaNs, smallest and largest subnormals, largest finite).
fn half_bits() -> impl Strategy<Value = u16> {
    let edges = vec![
        0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff,
        0x3c00, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x007f, 0x0080, 0x7f7f, 0x3f80, 0x3dcd,
    ];
    prop_oneof![any::<u16>(), select(edges)]
}

fn access(e: BoxedStrategy<Expr>) -> impl Strategy<Value = RefAccess> {
    (name(), option::of(vec(e.clone(), 0..3)), vec(e, 0..3))
        .prop_map(|(base, block, index)| RefAccess { base, block, index })
}

fn expr() -> BoxedStrategy<Expr> {
    let leaf = prop_oneof![
        3 => literal().prop_map(Expr::Lit),
        2 => name().prop_map(Expr::Var),
        1 => name().prop_map(Expr::AxisIndex),
        1 => name().prop_map(Expr::AxisSize),
        1 => select(WarpPosition::ALL.to_vec()).prop_map(Expr::WarpPosition),
    ];
    leaf.prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            1 => access(inner.clone()).prop_map(|a| Expr::Load(Box::new(a))),
            2 => (select(UnaryOp::ALL.to_vec()), inner.clone())
                .prop_map(|(op, e)| Expr::Unary(op, Box::new(e))),
            4 => (select(BinaryOp::ALL.to_vec()), inner.clone(), inner.clone())
                .prop_map(|(op, l, r)| Expr::Binary(op, Box::new(l), Box::new(r))),
            1 => (inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(c, t, f)| Expr::Select(Box::new(c), Box::new(t), Box::new(f))),
            1 => (scalar_type(), inner.clone()).prop_map(|(t, e)| Expr::Cast(t, Box::new(e))),
            1 => (scalar_type(), inner.clone()).prop_map(|(t, e)| Expr::Bitcast(t, Box::new(e))),
            1 => (select(MathFn::ALL.to_vec()), vec(inner, 3))
                .prop_map(|(f, args)| Expr::Math(f, args[..f.arity()].to_vec())),
        ]
    })
    .boxed()
}

fn binding() -> impl Strategy<Value = Binding> {
    (name(), scalar_type()).prop_map(|(name, ty)| Binding { name, ty })
}

fn shape() -> impl Strategy<Value = Vec<u32>> {
    vec(prop_oneof![0u32..300, Just(u32::MAX)], 1..4)
}

fn stmt(e: BoxedStrategy<Expr>) -> BoxedStrategy<Stmt> {
    let sem_ops = SemOp::ALL.to_vec();
    let leaf = prop_oneof![
        (binding(), e.clone()).prop_map(|(var, value)| Stmt::Let { var, value }),
        (binding(), e.clone()).prop_map(|(var, init)| Stmt::Var { var, init }),
        (name(), e.clone()).prop_map(|(name, value)| Stmt::Assign { name, value }),
        (name(), scalar_type(), shape()).prop_map(|(name, elem, shape)| Stmt::LocalArray {
            name,
            elem,
            shape
        }),
        (access(e.clone()), e.clone()).prop_map(|(target, value)| Stmt::Store { target, value }),
        (
            option::of(binding()),
            select(AtomicOp::ALL.to_vec()),
            access(e.clone()),
            vec(e.clone(), 2)
        )
            .prop_map(|(dest, op, target, args)| Stmt::Atomic {
                dest: if op.returns_value() { dest } else { None },
                op,
                target,
                args: args[..op.arity()].to_vec(),
            }),
        Just(Stmt::Barrier),
        (select(sem_ops), access(e.clone()), e.clone()).prop_map(|(op, sem, amount)| Stmt::Sem {
            op,
            sem,
            amount
        }),
        (name(), access(e.clone())).prop_map(|(dest, sem)| Stmt::SemRead { dest, sem }),
        (
            binding(),
            select(BlockOp::ALL.to_vec()),
            vec(e.clone(), 0..3)
        )
            .prop_map(|(dest, op, args)| Stmt::BlockCollective { dest, op, args }),
        vec((name(), option::of(e.clone())), 4).prop_map(|f| {
            let [d, a, b, c] = [0, 1, 2, 3].map(|k| Fragment {
                array: f[k].0.clone(),
                row: f[k].1.clone(),
            });
            Stmt::Mma { d, a, b, c }
        }),
        (
            select(mma::Operand::ALL.to_vec()),
            name(),
            option::of(e.clone()),
            access(e.clone())
        )
            .prop_map(|(operand, array, row, source)| Stmt::MmaLoad {
                operand,
                dest: Fragment { array, row },
                source,
            }),
        Just(Stmt::Break),
        Just(Stmt::Continue),
        // Builtin names (`min`, `signal`, ...) cannot name a helper (E0056).
        (option::of(binding()), name(), vec(e.clone(), 0..3)).prop_map(|(dest, function, args)| {
            Stmt::Call {
                dest,
                function: format!("h{function}"),
                args,
            }
        }),
        option::of(e.clone()).prop_map(|value| Stmt::Return { value }),
        (name(), select(BinaryOp::COMPOUND.to_vec()), e.clone())
            .prop_map(|(name, op, value)| Stmt::CompoundAssign { name, op, value }),
        (
            access(e.clone()),
            select(BinaryOp::COMPOUND.to_vec()),
            e.clone()
        )
            .prop_map(|(target, op, value)| Stmt::CompoundStore { target, op, value }),
    ];
    leaf.prop_recursive(3, 12, 3, move |inner| {
        prop_oneof![
            (
                e.clone(),
                vec(inner.clone(), 0..3),
                vec(inner.clone(), 0..3)
            )
                .prop_map(|(cond, then_body, else_body)| Stmt::If {
                    cond,
                    then_body,
                    else_body,
                }),
            (binding(), e.clone(), e.clone(), vec(inner.clone(), 0..3)).prop_map(
                |(var, start, end, body)| Stmt::For {
                    var,
                    start,
                    end,
                    body,
                }
            ),
            (e.clone(), e.clone(), vec(inner, 0..3)).prop_map(|(cond, max, body)| Stmt::While {
                cond,
                max,
                body
            }),
        ]
    })
    .boxed()
}

fn ref_type() -> impl Strategy<Value = RefType> {
    (
        select(MemorySpace::ALL.to_vec()),
        scalar_type(),
        shape(),
        option::of(name()),
    )
        .prop_map(|(space, elem, shape, owner)| RefType {
            space,
            elem: if space == MemorySpace::Sem {
                ScalarType::I32
            } else {
                elem
            },
            shape,
            owner,
        })
}

fn ty() -> impl Strategy<Value = Type> {
    prop_oneof![
        scalar_type().prop_map(Type::Scalar),
        ref_type().prop_map(Type::Ref),
    ]
}

fn axis() -> impl Strategy<Value = Axis> {
    (name(), prop_oneof![1u32..1025, Just(0), Just(u32::MAX)])
        .prop_map(|(name, size)| Axis { name, size })
}

fn mesh() -> impl Strategy<Value = Mesh> {
    (
        name(),
        vec(axis(), 0..4),
        vec(axis(), 0..4),
        axis(),
        vec(axis(), 0..3),
    )
        .prop_map(|(name, grid, cluster, threads, thread_axes)| {
            // Several thread axes: the linear axis is their product (the
            // parser's, u32::MAX when it overflows).
            let threads = if thread_axes.is_empty() {
                threads
            } else {
                Axis {
                    name: LINEAR_THREADS.to_string(),
                    size: thread_axes
                        .iter()
                        .try_fold(1u32, |n, a| n.checked_mul(a.size))
                        .unwrap_or(u32::MAX),
                }
            };
            Mesh {
                name,
                grid,
                cluster,
                threads,
                thread_axes,
            }
        })
}

fn kernel() -> impl Strategy<Value = Kernel> {
    let params = vec(
        (name(), ty()).prop_map(|(name, ty)| Param { name, ty }),
        0..4,
    );
    (name(), params, vec(stmt(expr()), 0..5)).prop_map(|(name, params, body)| Kernel {
        name,
        params,
        body,
    })
}

fn operand() -> impl Strategy<Value = Operand> {
    (name(), ty(), any::<bool>(), any::<bool>()).prop_map(|(name, ty, zeroed, resident)| Operand {
        name,
        ty,
        zeroed,
        resident,
    })
}

fn map() -> impl Strategy<Value = MpmdMap> {
    let programs = vec(
        (name(), name()).prop_map(|(mesh, kernel)| Program { mesh, kernel }),
        0..4,
    );
    let aliases = vec(
        (name(), name()).prop_map(|(input, output)| Alias { input, output }),
        0..3,
    );
    (
        name(),
        programs,
        [
            vec(operand(), 0..3),
            vec(operand(), 0..3),
            vec(operand(), 0..3),
            vec(operand(), 0..3),
        ],
        aliases,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(name, programs, [inputs, outputs, scalars, scratch], aliases, fast_math, debug)| {
                MpmdMap {
                    name,
                    programs,
                    inputs,
                    outputs,
                    scalars,
                    scratch,
                    aliases,
                    fast_math,
                    debug,
                }
            },
        )
}

fn resident() -> impl Strategy<Value = Resident> {
    (name(), ref_type(), any::<bool>()).prop_map(|(name, ty, zeroed)| Resident { name, ty, zeroed })
}

fn call() -> impl Strategy<Value = Call> {
    (name(), vec((name(), literal()), 0..4)).prop_map(|(map, scalars)| Call { map, scalars })
}

fn generator() -> impl Strategy<Value = Generator> {
    prop_oneof![
        (literal(), literal()).prop_map(|(lo, hi)| Generator::Uniform { lo, hi }),
        (literal(), literal()).prop_map(|(lo, hi)| Generator::NonZero { lo, hi }),
        Just(Generator::Special),
        literal().prop_map(Generator::Constant),
        Just(Generator::Iota),
        (name(), any::<u32>()).prop_map(|(operand, dim)| Generator::IndexInto { operand, dim }),
    ]
}

fn compare_mode() -> impl Strategy<Value = CompareMode> {
    prop_oneof![
        Just(CompareMode::Exact),
        any::<u32>().prop_map(CompareMode::Ulp),
        Just(CompareMode::Profile),
        Just(CompareMode::Multiset),
        Just(CompareMode::Ignore),
        Just(CompareMode::Mma),
    ]
}

fn expectation() -> impl Strategy<Value = Expectation> {
    prop_oneof![
        Just(Expectation::Ok),
        select(ErrorClass::ALL.to_vec()).prop_map(Expectation::Fails),
        (0u32..10000).prop_map(|n| Expectation::Reject(format!("E{n:04}"))),
    ]
}

fn case_spec() -> impl Strategy<Value = CaseSpec> {
    // Tags are free-form words, keywords included.
    let tags = vec(
        select(vec![
            "stress", "atomics", "map", "debug", "sem", "x1", "inf", "nan", "true",
        ])
        .prop_map(str::to_string),
        0..3,
    );
    (
        vec((name(), generator()), 0..5),
        vec((name(), compare_mode()), 0..5),
        expectation(),
        tags,
    )
        .prop_map(|(generators, compares, expect, tags)| CaseSpec {
            generators,
            compares,
            expect,
            tags,
        })
}

fn module() -> impl Strategy<Value = Module> {
    (
        vec(
            (name(), literal()).prop_map(|(name, value)| Const { name, value }),
            0..3,
        ),
        vec(mesh(), 0..3),
        vec(
            (kernel(), option::of(scalar_type())).prop_map(|(k, result)| Function {
                name: k.name,
                params: k.params,
                result,
                body: k.body,
            }),
            0..2,
        ),
        vec(kernel(), 0..3),
        vec(map(), 0..3),
        vec(resident(), 0..3),
        vec(call(), 0..3),
        vec(
            (name(), literal(), 1..4usize).prop_map(|(name, value, len)| ConstTable {
                name,
                elem: value.ty(),
                values: vec![value; len],
            }),
            0..2,
        ),
    )
        .prop_map(
            |(consts, meshes, functions, kernels, maps, residents, calls, tables)| Module {
                consts,
                tables,
                meshes,
                functions,
                kernels,
                maps,
                residents,
                calls,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn parse_of_print_is_identity(m in module(), case in option::of(case_spec())) {
        let text = print(&m);
        let (parsed, _) = match parse(&text) {
            Ok(parsed) => parsed,
            Err(e) => panic!("{}\n--- printed module ---\n{text}", e.render("printed")),
        };
        prop_assert_eq!(&parsed, &m, "printed:\n{}", text);
        prop_assert_eq!(print(&parsed), text);
        // With a case section after the module.
        let text = print_file(&m, case.as_ref());
        let parsed = match parse_file(&text) {
            Ok(parsed) => parsed,
            Err(e) => panic!("{}\n--- printed file ---\n{text}", e.render("printed")),
        };
        prop_assert_eq!((&parsed.module, &parsed.case), (&m, &case), "printed:\n{}", text);
        prop_assert_eq!(print_file(&parsed.module, parsed.case.as_ref()), text);
    }

    #[test]
    fn parse_expr_of_print_expr_is_identity(e in expr()) {
        let text = print_expr(&e);
        let parsed = parse_expr(&text).map_err(|err| TestCaseError::fail(format!("{err} in `{text}`")))?;
        prop_assert_eq!(parsed, e, "printed: {}", text);
    }
}

/// Every ref type, of every space, prints as text the parser reads back to
/// the same type: the one printer (`text::print_ref_type`) serves validation's
/// messages (`declare `resident r: ...;``) and the CLI's plan description, so
/// what they quote can be pasted into a module (`local f32[4]`, validation's
/// old form of a local ref, did not parse).
#[test]
fn printed_ref_types_parse_back_in_every_space() {
    let refs = [
        RefType {
            space: MemorySpace::Gmem,
            elem: ScalarType::BF16,
            shape: vec![4, 256],
            owner: Some("m".into()),
        },
        RefType {
            space: MemorySpace::Smem,
            elem: ScalarType::F32,
            shape: vec![2],
            owner: None,
        },
        RefType {
            space: MemorySpace::Sem,
            elem: ScalarType::I32,
            shape: vec![3],
            owner: None,
        },
        // Validation refuses a semaphore of `u32`, but its message must
        // still name the type it was given, not `sem<[3]>` (an `i32` one).
        RefType {
            space: MemorySpace::Sem,
            elem: ScalarType::U32,
            shape: vec![3],
            owner: None,
        },
        RefType {
            space: MemorySpace::Local,
            elem: ScalarType::F16,
            shape: vec![2, 8],
            owner: None,
        },
    ];
    for r in refs {
        let printed = mpmd_core::text::print_ref_type(&r);
        let source = format!("kernel k(x: {printed}) {{}}\n");
        let (module, _) = parse(&source).unwrap_or_else(|e| panic!("`{printed}`: {e:?}"));
        assert_eq!(module.kernels[0].params[0].ty, Type::Ref(r), "`{printed}`");
    }
    assert_eq!(
        mpmd_core::text::print_ref_type(&RefType {
            space: MemorySpace::Local,
            elem: ScalarType::F32,
            shape: vec![4],
            owner: None,
        }),
        "local<f32[4]>"
    );
}
