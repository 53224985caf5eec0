//! Facts read off a case's program: derived tags and the float operations
//! whose accuracy bounds make up a backend's profile tolerance.

use std::collections::BTreeSet;

use mpmd_core::case::{Expectation, Generator};
use mpmd_core::interp::{self, summation_order_ulps};
use mpmd_core::ir::{BinaryOp, Expr, Kernel, Literal, MathFn, MemorySpace, ScalarType, Type};

use mpmd_core::ir::visit::for_each_expr;
use mpmd_core::validate::ValidModule;

use crate::case::CaseFile;
use crate::compare::Tolerance;

/// Tags derived from the program: `multi-program`, `semaphore`,
/// `external-mesh`, `scratch`, `reject`, `subnormal` (an f32 input generated
/// with `special`, or a subnormal f32 constant or literal), then the case's
/// own tags.
pub fn tags(file: &CaseFile) -> Vec<String> {
    let CaseFile { module, spec } = file;
    let mut tags = Vec::new();
    let mut add = |t: &str, cond: bool| {
        if cond {
            tags.push(t.to_string());
        }
    };
    add(
        "multi-program",
        module.maps.iter().any(|m| m.programs.len() > 1),
    );
    let has_sem = module
        .residents
        .iter()
        .any(|r| r.ty.space == MemorySpace::Sem)
        || module.maps.iter().any(|m| {
            m.operands()
                .any(|(_, o)| matches!(&o.ty, Type::Ref(r) if r.space == MemorySpace::Sem))
        });
    add("semaphore", has_sem);
    let external = module.maps.iter().any(|m| {
        m.operands().any(|(_, o)| match &o.ty {
            Type::Ref(r) => r
                .owner
                .as_ref()
                .is_some_and(|owner| !m.programs.iter().any(|p| &p.mesh == owner)),
            Type::Scalar(_) => false,
        })
    });
    add("external-mesh", external);
    add("scratch", module.maps.iter().any(|m| !m.scratch.is_empty()));
    add("reject", matches!(spec.expect, Expectation::Reject(_)));
    add(SUBNORMAL_TAG, uses_subnormals(file));
    for t in &spec.tags {
        if !tags.contains(t) {
            tags.push(t.clone());
        }
    }
    tags
}

/// The tag adapters that flush subnormals name in their deviations
/// (`mpmd_wgpu::SUBNORMAL_TAG`, spelled here too so that builds without
/// wgpu derive it; a test keeps the two equal).
pub const SUBNORMAL_TAG: &str = "subnormal";

/// A literal whose value is an f32 subnormal (bf16 subnormals are f32's;
/// f16 subnormals are normal f32 values, which no adapter flushes).
fn is_subnormal(literal: &Literal) -> bool {
    match literal {
        Literal::F32(bits) => bits.0 & 0x7f80_0000 == 0 && bits.0 & 0x007f_ffff != 0,
        Literal::BF16(bits) => bits & 0x7f80 == 0 && bits & 0x007f != 0,
        _ => false,
    }
}

/// Whether the case feeds subnormal f32 values (or bf16 ones) to the program.
fn uses_subnormals(CaseFile { module, spec }: &CaseFile) -> bool {
    let f32_inputs: BTreeSet<&str> = module
        .maps
        .iter()
        .flat_map(|m| m.inputs.iter())
        .filter(|o| matches!(&o.ty, Type::Ref(r) if matches!(r.elem, ScalarType::F32 | ScalarType::BF16)))
        .map(|o| o.name.as_str())
        .collect();
    let generated = spec
        .generators
        .iter()
        .any(|(name, generator)| match generator {
            Generator::Special => f32_inputs.contains(name.as_str()),
            Generator::Constant(value) => is_subnormal(value),
            _ => false,
        });
    let mut literal = false;
    for kernel in &module.kernels {
        for_each_expr(&kernel.body, &mut |e| {
            if let Expr::Lit(l) = e {
                literal |= is_subnormal(l);
            }
        });
    }
    generated || literal
}

/// A float operation with a backend-specific accuracy bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BoundedOp {
    Div,
    Rem,
    Math(MathFnKey),
    /// f32 `atomic_add`s whose order is the schedule's: results of two
    /// orders are this many ulps apart at most, for terms of one sign
    /// (`mpmd_core::interp::summation_order_ulps`). The interpreter's own
    /// schedules differ as much, so every backend, the oracle included, has
    /// this bound.
    F32AtomicSum(u64),
}

/// `MathFn` with an order, for sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MathFnKey(pub usize);

impl MathFnKey {
    pub fn of(f: MathFn) -> Self {
        MathFnKey(MathFn::ALL.iter().position(|&g| g == f).unwrap_or(0))
    }
    pub fn get(self) -> MathFn {
        MathFn::ALL[self.0]
    }
}

/// Every division, remainder and math function the module's kernels use,
/// and the reordering of its f32 atomic adds.
pub fn bounded_ops(module: &ValidModule) -> BTreeSet<BoundedOp> {
    let mut ops = BTreeSet::new();
    if let Some(terms) = f32_atomic_add_terms(module) {
        if terms > 0 {
            ops.insert(BoundedOp::F32AtomicSum(summation_order_ulps(terms)));
        }
    }
    for k in &module.kernels {
        for_each_expr(&k.body, &mut |e| match e {
            Expr::Binary(BinaryOp::Div, ..) => {
                ops.insert(BoundedOp::Div);
            }
            Expr::Binary(BinaryOp::Rem, ..) => {
                ops.insert(BoundedOp::Rem);
            }
            Expr::Math(f, _) => {
                ops.insert(BoundedOp::Math(MathFnKey::of(*f)));
            }
            _ => {}
        });
    }
    ops
}

/// The most f32 atomic adds into one element over the module's calls (their
/// sum: a resident carries its sums from call to call); `None` when a loop
/// around one has a bound known only at run time.
fn f32_atomic_add_terms(module: &ValidModule) -> Option<u64> {
    let mut total = 0u64;
    for call in module.effective_calls() {
        let (Some(map), Some(programs)) = (module.map(&call.map), module.valid_map(&call.map))
        else {
            continue;
        };
        // As the programs run them: helper calls inlined, constants in place.
        let kernels: Vec<&Kernel> = programs.programs().iter().map(|p| p.kernel()).collect();
        let scalar = |name: &str| {
            call.scalars
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, value)| *value)
        };
        let terms = interp::f32_atomic_add_terms(map, &module.meshes, &kernels, &scalar)?;
        total = total.saturating_add(terms);
    }
    Some(total)
}

/// The backends a result can come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendId {
    Interp,
    Wgpu,
    Cuda,
    /// The CUDA backend's generated code run on CPU threads
    /// (`mpmd_cuda::HostCudaBackend`): what the CUDA text computes, without a GPU.
    CudaHost,
}

impl BackendId {
    pub const ALL: [BackendId; 4] = [
        BackendId::Interp,
        BackendId::Wgpu,
        BackendId::Cuda,
        BackendId::CudaHost,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BackendId::Interp => "interp",
            BackendId::Wgpu => "wgpu",
            BackendId::Cuda => "cuda",
            BackendId::CudaHost => "cuda-host",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == s)
    }
}

/// One operation's bound on one backend.
fn op_bound(backend: BackendId, op: BoundedOp) -> Tolerance {
    let ulp = |ulp| Tolerance::bounded(ulp, 0.0);
    match backend {
        // The order of the adds, not the backend, makes the sums' bound.
        BackendId::Interp => match op {
            BoundedOp::F32AtomicSum(ulps) => ulp(ulps),
            _ => Tolerance::EXACT,
        },
        // CUDA math library (Programming Guide, "Mathematical Functions",
        // single precision, without -use_fast_math). cuda-host calls the host's
        // libm (glibc: at most 1 ulp, tanhf 2), inside the same bounds.
        BackendId::Cuda | BackendId::CudaHost => match op {
            BoundedOp::Div | BoundedOp::Rem => Tolerance::EXACT,
            BoundedOp::F32AtomicSum(ulps) => ulp(ulps),
            BoundedOp::Math(f) => match f.get() {
                MathFn::Exp | MathFn::Rsqrt | MathFn::Sin | MathFn::Cos | MathFn::Tanh => ulp(2),
                MathFn::Log => ulp(1),
                MathFn::Pow => ulp(4),
                _ => Tolerance::EXACT,
            },
        },
        // WGSL specification, "Floating Point Accuracy" (f32), plus slack for
        // the functions it defines by inheritance from exp2/log2.
        BackendId::Wgpu => match op {
            BoundedOp::Div => ulp(3),
            BoundedOp::Rem => ulp(4),
            BoundedOp::F32AtomicSum(ulps) => ulp(ulps),
            BoundedOp::Math(f) => match f.get() {
                // 3 + 2 * |x| ULP; |x| <= 88.7 for a finite result.
                MathFn::Exp => ulp(181),
                MathFn::Log => Tolerance::bounded(3, 4.8e-7),
                MathFn::Sqrt => ulp(5),
                MathFn::Rsqrt => ulp(2),
                MathFn::Sin | MathFn::Cos => Tolerance::bounded(0, 4.9e-4),
                MathFn::Tanh => Tolerance::bounded(200, 1e-5),
                MathFn::Pow => ulp(1024),
                // WGSL's fma inherits from e1 * e2 + e3: two roundings are allowed.
                MathFn::Fma => ulp(1),
                _ => Tolerance::EXACT,
            },
        },
    }
}

/// The key of an operation in a backend's measured accuracy table
/// (`mpmd_wgpu::accuracy_profile`): entries start with these names.
fn measured_key(op: BoundedOp) -> Option<&'static str> {
    match op {
        BoundedOp::Div => Some("a / b"),
        BoundedOp::Rem | BoundedOp::F32AtomicSum(_) => None,
        BoundedOp::Math(f) => match f.get() {
            MathFn::Exp => Some("exp"),
            MathFn::Log => Some("log"),
            MathFn::Sqrt => Some("sqrt"),
            MathFn::Rsqrt => Some("rsqrt"),
            MathFn::Sin => Some("sin"),
            MathFn::Cos => Some("cos"),
            MathFn::Tanh => Some("tanh"),
            MathFn::Pow => Some("pow"),
            MathFn::Fma => Some("fma"),
            _ => None,
        },
    }
}

/// The profile tolerance of a backend for a module: the bounds of the
/// operations involved, added up (errors of composed operations add). Each
/// bound is the larger of the documented one and the adapter's measured one
/// (`measured`: `(operation, ulp)` pairs, empty when unknown).
pub fn profile_tolerance(
    backend: BackendId,
    ops: &BTreeSet<BoundedOp>,
    measured: &[(&str, f64)],
) -> Tolerance {
    ops.iter().fold(Tolerance::EXACT, |acc, &op| {
        let mut b = op_bound(backend, op);
        if let Some(key) = measured_key(op) {
            // The word after the name must end there: "sin [-pi, pi]" is sin, "sinh" is not.
            for (name, ulp) in measured {
                let matches = name
                    .strip_prefix(key)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '));
                if matches {
                    b.ulp = b.ulp.max(ulp.ceil() as u64);
                }
            }
        }
        acc.plus(Tolerance::bounded(b.ulp, b.abs))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpmd_core::case::CaseSpec;
    use mpmd_core::ir::*;

    fn valid(m: &Module) -> ValidModule {
        mpmd_core::validate::validate(m, &Default::default()).expect("valid")
    }

    fn module_with(body: Vec<Stmt>, map: MpmdMap) -> Module {
        Module {
            meshes: vec![MeshBuilder::new("g").threads("t", 32).build()],
            kernels: vec![Kernel {
                name: "k".into(),
                params: vec![],
                body,
            }],
            maps: vec![map],
            ..Default::default()
        }
    }

    #[test]
    fn tags_from_program_and_case() {
        let map = MapBuilder::new("m")
            .program("a", "k")
            .program("b", "k")
            .scratch("s", sem([1]).owned_by("ext"))
            .build();
        let mut file = CaseFile {
            module: module_with(vec![], map),
            spec: CaseSpec {
                tags: vec!["pipeline".into(), "scratch".into()],
                ..Default::default()
            },
        };
        assert_eq!(
            tags(&file),
            vec![
                "multi-program",
                "semaphore",
                "external-mesh",
                "scratch",
                "pipeline"
            ]
        );
        file.spec.expect = Expectation::Reject("E0001".into());
        assert!(tags(&file).contains(&"reject".to_string()));
    }

    #[test]
    fn single_program_without_scratch_has_no_derived_tags() {
        let map = MapBuilder::new("m")
            .program("g", "k")
            .input("x", gmem(ScalarType::F32, [4]))
            .build();
        let file = CaseFile {
            module: module_with(vec![], map),
            spec: CaseSpec::default(),
        };
        assert!(tags(&file).is_empty());
    }

    #[test]
    fn reordered_f32_adds_bound_the_profile_of_every_backend() {
        let map = MapBuilder::new("m")
            .program("g", "k")
            .output("c", gmem(ScalarType::F32, [4, 32]))
            .build();
        // 4 x 8 blocks of 32 threads; `c[r, col]` pins `row` and `t`: each
        // element gets the 8 partials of its row, 17 ulps apart at most.
        let kernel = KernelBuilder::new("k", map.params()).body(|b| {
            let col = b.let_("col", ScalarType::U32, axis_index("t"));
            b.atomic(
                AtomicOp::Add,
                at("c", [axis_index("row"), col]),
                [Expr::from(1.5f32)],
            );
        });
        let mut m = Module {
            meshes: vec![MeshBuilder::new("g")
                .grid("row", 4)
                .grid("ks", 8)
                .threads("t", 32)
                .build()],
            kernels: vec![kernel],
            maps: vec![map],
            ..Default::default()
        };
        let ops = bounded_ops(&valid(&m));
        assert_eq!(ops, BTreeSet::from([BoundedOp::F32AtomicSum(17)]));
        for backend in BackendId::ALL {
            assert_eq!(profile_tolerance(backend, &ops, &[]).ulp, 17, "{backend:?}");
        }
        // An integer ref adds no bound.
        m.maps[0].outputs[0].ty = Type::Ref(gmem(ScalarType::U32, [4, 32]));
        m.kernels[0].params[0].ty = Type::Ref(gmem(ScalarType::U32, [4, 32]));
        let Stmt::Atomic { args, .. } = &mut m.kernels[0].body[1] else {
            panic!("the kernel's second statement is the atomic add");
        };
        args[0] = Expr::from(1u32);
        assert!(bounded_ops(&valid(&m)).is_empty());
    }

    #[test]
    fn profile_adds_the_bounds_of_the_functions_used() {
        let body = vec![Stmt::Let {
            var: Binding {
                name: "v".into(),
                ty: ScalarType::F32,
            },
            value: Expr::Math(
                MathFn::Exp,
                vec![Expr::Math(MathFn::Log, vec![Expr::Lit(Literal::f32(2.0))])],
            ),
        }];
        let map = MapBuilder::new("m").program("g", "k").build();
        let ops = bounded_ops(&valid(&module_with(body, map)));
        assert_eq!(ops.len(), 2);
        // exp (2 ulp) and log (1 ulp): 3 f32 ulps, and one 16-bit ulp each.
        assert_eq!(
            profile_tolerance(BackendId::Cuda, &ops, &[]),
            Tolerance {
                ulp: 3,
                abs: 0.0,
                narrow_ulp: 2
            }
        );
        assert_eq!(
            profile_tolerance(BackendId::Interp, &ops, &[]),
            Tolerance::EXACT
        );
        assert_eq!(profile_tolerance(BackendId::Wgpu, &ops, &[]).ulp, 184);
        let measured = [("exp", 80.0), ("log", 200.0), ("logistic", 9999.0)];
        // exp: max(181, 80); log: max(3, 200); "logistic" is not log.
        assert_eq!(profile_tolerance(BackendId::Wgpu, &ops, &measured).ulp, 381);
    }
}
