//! Property tests for bad input (issue 14): `validate` and `lower` on
//! arbitrary modules, valid or not, and the parser on arbitrary bytes and on
//! corpus files with random edits. None may panic, overflow its stack or
//! hang; what validates prints and reads back, and lowers.

use std::path::Path;

use mpmd_core::ir::*;
use mpmd_core::plan::lower;
use mpmd_core::text::{parse, parse_bytes, print};
use mpmd_core::validate::{validate, ValidateOptions};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

/// Few names, so that references often resolve (and sometimes clash).
const NAMES: &[&str] = &["m", "k", "x", "y", "s", "i", "t", "b", "v", "if"];

fn name() -> impl Strategy<Value = Name> {
    select(NAMES).prop_map(str::to_string)
}

fn scalar_type() -> impl Strategy<Value = ScalarType> {
    select(ScalarType::ALL.to_vec())
}

/// Extents from tiny to ones whose products wrap a `u64`.
fn extent() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..70, 1 => select(vec![65535u32, 65536, 384773, u32::MAX])]
}

fn ref_type() -> impl Strategy<Value = RefType> {
    (
        select(MemorySpace::ALL.to_vec()),
        scalar_type(),
        vec(extent(), 0..6),
        proptest::option::of(name()),
    )
        .prop_map(|(space, elem, shape, owner)| RefType {
            space,
            elem,
            shape,
            owner,
        })
}

fn ty() -> impl Strategy<Value = Type> {
    prop_oneof![
        scalar_type().prop_map(Type::Scalar),
        ref_type().prop_map(Type::Ref)
    ]
}

fn literal() -> impl Strategy<Value = Literal> {
    prop_oneof![
        any::<i32>().prop_map(Literal::I32),
        (0u32..80).prop_map(Literal::U32),
        any::<u32>().prop_map(Literal::U32),
        any::<bool>().prop_map(Literal::Bool),
        any::<u32>().prop_map(|b| Literal::F32(F32Bits(b))),
    ]
}

fn leaf() -> impl Strategy<Value = Expr> {
    prop_oneof![
        literal().prop_map(Expr::Lit),
        name().prop_map(Expr::Var),
        name().prop_map(Expr::AxisIndex),
        name().prop_map(Expr::AxisSize),
    ]
}

fn unary_op() -> impl Strategy<Value = UnaryOp> {
    select(UnaryOp::ALL.to_vec())
}

fn binary_op() -> impl Strategy<Value = BinaryOp> {
    select(BinaryOp::ALL.to_vec())
}

fn access(inner: BoxedStrategy<Expr>) -> impl Strategy<Value = RefAccess> {
    (
        name(),
        proptest::option::of(vec(inner.clone(), 0..3)),
        vec(inner, 0..4),
    )
        .prop_map(|(base, block, index)| RefAccess { base, block, index })
}

/// Bushy expressions of every kind...
fn bushy() -> BoxedStrategy<Expr> {
    leaf()
        .prop_recursive(5, 48, 4, |inner| {
            prop_oneof![
                (unary_op(), inner.clone()).prop_map(|(op, e)| Expr::Unary(op, Box::new(e))),
                (binary_op(), inner.clone(), inner.clone()).prop_map(|(op, a, b)| Expr::Binary(
                    op,
                    Box::new(a),
                    Box::new(b)
                )),
                (inner.clone(), inner.clone(), inner.clone())
                    .prop_map(|(c, t, f)| { Expr::Select(Box::new(c), Box::new(t), Box::new(f)) }),
                (scalar_type(), inner.clone()).prop_map(|(t, e)| Expr::Cast(t, Box::new(e))),
                (scalar_type(), inner.clone()).prop_map(|(t, e)| Expr::Bitcast(t, Box::new(e))),
                (select(MathFn::ALL.to_vec()), vec(inner.clone(), 0..4))
                    .prop_map(|(f, args)| Expr::Math(f, args)),
                access(inner).prop_map(|a| Expr::Load(Box::new(a))),
            ]
        })
        .boxed()
}

/// ...some wrapped in a chain of up to 400 layers, past the nesting limit.
fn expr() -> BoxedStrategy<Expr> {
    prop_oneof![
        4 => bushy(),
        1 => (bushy(), vec((0u8..4, binary_op(), leaf()), 0..400)).prop_map(|(e, layers)| {
            layers.into_iter().fold(e, |e, (kind, op, other)| match kind {
                0 => Expr::Binary(op, Box::new(e), Box::new(other)),
                1 => Expr::Binary(op, Box::new(other), Box::new(e)),
                2 => Expr::Unary(UnaryOp::Neg, Box::new(e)),
                _ => Expr::Cast(ScalarType::U32, Box::new(e)),
            })
        }),
    ]
    .boxed()
}

fn binding() -> impl Strategy<Value = Binding> {
    (name(), scalar_type()).prop_map(|(name, ty)| Binding { name, ty })
}

fn simple_stmt() -> impl Strategy<Value = Stmt> {
    let e = expr;
    prop_oneof![
        (binding(), e()).prop_map(|(var, value)| Stmt::Let { var, value }),
        (binding(), e()).prop_map(|(var, init)| Stmt::Var { var, init }),
        (name(), e()).prop_map(|(name, value)| Stmt::Assign { name, value }),
        (name(), scalar_type(), vec(extent(), 0..6))
            .prop_map(|(name, elem, shape)| Stmt::LocalArray { name, elem, shape }),
        (access(e()), e()).prop_map(|(target, value)| Stmt::Store { target, value }),
        (
            proptest::option::of(binding()),
            select(AtomicOp::ALL.to_vec()),
            access(e()),
            vec(e(), 0..3)
        )
            .prop_map(|(dest, op, target, args)| Stmt::Atomic {
                dest,
                op,
                target,
                args
            }),
        Just(Stmt::Barrier),
        (select(SemOp::ALL.to_vec()), access(e()), e()).prop_map(|(op, sem, amount)| Stmt::Sem {
            op,
            sem,
            amount
        }),
        (name(), access(e())).prop_map(|(dest, sem)| Stmt::SemRead { dest, sem }),
        (
            select(mma::Operand::ALL.to_vec()),
            name(),
            proptest::option::of(e()),
            access(e())
        )
            .prop_map(|(operand, array, row, source)| Stmt::MmaLoad {
                operand,
                dest: Fragment { array, row },
                source,
            }),
    ]
}

/// Statements nested a few levels, some inside a tower of up to 300 `if`s
/// and `for`s (past the limit).
fn body() -> BoxedStrategy<Vec<Stmt>> {
    let nested = vec(simple_stmt(), 0..4).prop_recursive(3, 24, 4, |inner| {
        vec(
            prop_oneof![
                3 => simple_stmt(),
                1 => (expr(), inner.clone(), inner.clone()).prop_map(|(cond, then_body, else_body)| {
                    Stmt::If { cond, then_body, else_body }
                }),
                1 => (binding(), expr(), expr(), inner).prop_map(|(var, start, end, body)| {
                    Stmt::For { var, start, end, body }
                }),
            ],
            0..4,
        )
    });
    prop_oneof![
        4 => nested.clone(),
        1 => (nested, vec(any::<bool>(), 0..300)).prop_map(|(body, tower)| {
            tower.into_iter().fold(body, |body, is_if| {
                if is_if {
                    vec![Stmt::If { cond: Expr::from(true), then_body: body, else_body: vec![] }]
                } else {
                    vec![Stmt::For {
                        var: Binding { name: "i".into(), ty: ScalarType::U32 },
                        start: Expr::from(0u32),
                        end: Expr::from(2u32),
                        body,
                    }]
                }
            })
        }),
    ]
    .boxed()
}

fn operand() -> impl Strategy<Value = Operand> {
    (name(), ty(), any::<bool>(), any::<bool>()).prop_map(|(name, ty, zeroed, resident)| Operand {
        name,
        ty,
        zeroed,
        resident,
    })
}

fn mesh() -> impl Strategy<Value = Mesh> {
    let axis = || (name(), extent()).prop_map(|(name, size)| Axis { name, size });
    (name(), vec(axis(), 0..5), vec(axis(), 0..2), axis()).prop_map(
        |(name, grid, cluster, threads)| Mesh {
            name,
            grid,
            cluster,
            threads,
            thread_axes: vec![],
        },
    )
}

fn map() -> impl Strategy<Value = MpmdMap> {
    (
        name(),
        vec((name(), name()), 0..3),
        vec(vec(operand(), 0..3), 4..=4),
        vec((name(), name()), 0..2),
    )
        .prop_map(|(name, programs, mut lists, aliases)| MpmdMap {
            name,
            programs: programs
                .into_iter()
                .map(|(mesh, kernel)| Program { mesh, kernel })
                .collect(),
            scratch: lists.pop().unwrap_or_default(),
            scalars: lists.pop().unwrap_or_default(),
            outputs: lists.pop().unwrap_or_default(),
            inputs: lists.pop().unwrap_or_default(),
            aliases: aliases
                .into_iter()
                .map(|(input, output)| Alias { input, output })
                .collect(),
            fast_math: false,
            debug: false,
        })
}

/// A module that is often nearly right: its kernels take their map's
/// operands as parameters, or random ones.
fn module() -> impl Strategy<Value = Module> {
    (
        vec(mesh(), 0..3),
        vec(map(), 0..3),
        vec(
            (name(), any::<bool>(), vec((name(), ty()), 0..3), body()),
            0..3,
        ),
        vec(
            (name(), ref_type(), any::<bool>()).prop_map(|(name, ty, zeroed)| Resident {
                name,
                ty,
                zeroed,
            }),
            0..2,
        ),
    )
        .prop_map(|(meshes, maps, kernels, residents)| {
            let kernels = kernels
                .into_iter()
                .enumerate()
                .map(|(i, (name, from_map, params, body))| {
                    let params = match maps.get(i).filter(|_| from_map) {
                        Some(map) => map.params(),
                        None => params
                            .into_iter()
                            .map(|(name, ty)| Param { name, ty })
                            .collect(),
                    };
                    Kernel { name, params, body }
                })
                .collect();
            Module {
                meshes,
                kernels,
                maps,
                residents,
                ..Default::default()
            }
        })
}

/// Validates; a valid module lowers every map and round-trips.
fn exercise(module: &Module) {
    let validated = validate(module, &ValidateOptions::default());
    if let Ok(valid) = &validated {
        for map in &module.maps {
            let lowered = lower(valid, &map.name);
            // Whatever validates lowers.
            assert!(lowered.is_ok(), "{:?}", lowered.err());
        }
    }
    if validated.is_ok() {
        let text = print(module);
        let (back, _) = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(&back, module);
    }
}

/// The corpus files, the seeds of the mutations.
fn corpus() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/cases");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "mpmd"))
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// One edit of a file: delete, duplicate or overwrite a range, or insert
/// bytes that are likely to matter (brackets, operators, line ends, a BOM,
/// bytes that are not UTF-8, digits).
#[derive(Clone, Debug)]
enum Edit {
    Delete(usize, usize),
    Duplicate(usize, usize, usize),
    Insert(usize, Vec<u8>),
}

fn edit() -> impl Strategy<Value = Edit> {
    let piece = select(vec![
        b"(".to_vec(),
        b")".to_vec(),
        b"[".to_vec(),
        b"]".to_vec(),
        b"{".to_vec(),
        b"}".to_vec(),
        b" + ".to_vec(),
        b"-".to_vec(),
        b";".to_vec(),
        b",".to_vec(),
        b"\r".to_vec(),
        b"//".to_vec(),
        b"\xef\xbb\xbf".to_vec(),
        b"\xe9".to_vec(),
        b"1e39".to_vec(),
        b"1e-50".to_vec(),
        b"4294967295".to_vec(),
        b"0x".to_vec(),
        b"else if true { ".to_vec(),
        b"axis_size(t)".to_vec(),
    ]);
    prop_oneof![
        (any::<usize>(), 0usize..40).prop_map(|(at, len)| Edit::Delete(at, len)),
        (any::<usize>(), 0usize..400, 1usize..40)
            .prop_map(|(at, len, times)| Edit::Duplicate(at, len, times)),
        (any::<usize>(), vec(piece, 1..4))
            .prop_map(|(at, pieces)| Edit::Insert(at, pieces.concat())),
        (any::<usize>(), vec(any::<u8>(), 1..8)).prop_map(|(at, bytes)| Edit::Insert(at, bytes)),
    ]
}

fn apply(mut text: Vec<u8>, edit: &Edit) -> Vec<u8> {
    let at = |at: usize, text: &[u8]| at % (text.len() + 1);
    match edit {
        Edit::Delete(start, len) => {
            let start = at(*start, &text);
            let end = (start + len).min(text.len());
            text.drain(start..end);
        }
        Edit::Duplicate(start, len, times) => {
            let start = at(*start, &text);
            let end = (start + len).min(text.len());
            let slice = text[start..end].to_vec();
            for _ in 0..*times {
                text.splice(end..end, slice.iter().copied());
            }
        }
        Edit::Insert(start, bytes) => {
            let start = at(*start, &text);
            text.splice(start..start, bytes.iter().copied());
        }
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn validate_and_lower_never_panic_on_arbitrary_modules(module in module()) {
        exercise(&module);
    }

    #[test]
    fn the_parser_never_panics_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..2000)) {
        if let Ok((module, _)) = parse_bytes(&bytes) {
            exercise(&module);
        }
    }

    #[test]
    fn the_parser_never_panics_on_edited_corpus_files(
        file in any::<prop::sample::Index>(),
        edits in vec(edit(), 1..6),
    ) {
        let files = corpus();
        let original = file.get(&files).clone();
        let edited = edits.iter().fold(original, apply);
        if let Ok((module, _)) = parse_bytes(&edited) {
            exercise(&module);
        }
    }
}
