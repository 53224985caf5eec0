//! The reducer: shrinks a module while the same disagreement persists (same
//! backend, same [`Signature`]), keeping every candidate valid and race-free
//! per the interpreter ([`check_module`]).
//!
//! Candidates, most aggressive first: drop a program, drop a call (and its
//! map), drop a statement, replace an `if`/`for` by its body, replace a warp
//! collective by a `let` of its own value or of zero (its result stays
//! defined where later statements use it), replace an `mma_m16n8k16` by
//! stores of its `c` (or zeros) into its `d` and a fragment load by the
//! element loads it means, simplify an expression (a
//! subtree becomes one of its children or a literal), shrink a mesh axis
//! (also to whole warps), shrink a ref's shape. After each change, kernels, operands,
//! residents, meshes and case entries that nothing uses any more are removed.
//! The search is greedy: the first candidate that keeps the disagreement
//! becomes the new module, until a full round finds none or time runs out.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use mpmd_core::case::{CompareMode, Generator};
use mpmd_core::ir::visit;
use mpmd_core::ir::*;

use super::{check_module, judge_backend, BackendFactory, Finding, FuzzConfig, Signature, Verdict};
use crate::case::CaseFile;

/// A reduced case and the disagreement it still shows.
#[derive(Clone, Debug)]
pub struct Reduced {
    pub file: CaseFile,
    pub detail: String,
    /// Candidates tried and accepted.
    pub tried: usize,
    pub accepted: usize,
}

/// Whether `file` still shows `target` on `factory`; the detail if so.
pub fn reproduces(
    file: &CaseFile,
    seed: u64,
    factory: &BackendFactory,
    target: &Signature,
    config: &FuzzConfig,
) -> Option<String> {
    let oracle = check_module(file, seed).ok()?;
    match judge_backend(
        file,
        &oracle,
        factory,
        config.mode,
        seed,
        config.per_program_timeout,
    ) {
        Verdict::Disagrees(sig, detail) if sig == *target => Some(detail),
        _ => None,
    }
}

/// Shrinks `file` while it reproduces `target`.
pub fn reduce(
    file: &CaseFile,
    seed: u64,
    factory: &BackendFactory,
    target: &Signature,
    config: &FuzzConfig,
) -> Reduced {
    let deadline = Instant::now() + config.reduce_time_limit;
    let mut best = file.clone();
    let mut detail = reproduces(&best, seed, factory, target, config).unwrap_or_default();
    let (mut tried, mut accepted) = (0, 0);
    'rounds: loop {
        let mut improved = false;
        let mut index = 0;
        let mut list = edits(&best.module);
        while let Some(edit) = list.get(index) {
            if Instant::now() >= deadline {
                break 'rounds;
            }
            tried += 1;
            let candidate = apply(&best, edit);
            if candidate != best {
                if let Some(d) = reproduces(&candidate, seed, factory, target, config) {
                    best = candidate;
                    list = edits(&best.module);
                    detail = d;
                    accepted += 1;
                    improved = true;
                    // The list changed; the same index now names the next idea.
                    continue;
                }
            }
            index += 1;
        }
        if !improved {
            break;
        }
    }
    Reduced {
        file: best,
        detail,
        tried,
        accepted,
    }
}

/// Writes the reduced case as `<dir>/fuzz_<seed>_<backend>.mpmd` with a leading
/// comment that says who disagrees and how.
pub fn write_found(reduced: &Reduced, finding: &Finding, dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let name = format!("fuzz_{}_{}.mpmd", finding.seed, finding.backend);
    let path = dir.join(&name);
    let mut f = std::fs::File::create(&path)?;
    writeln!(
        f,
        "// Found by `cargo xtask fuzz` (generator seed {}), reduced in {} steps.",
        finding.seed, reduced.accepted
    )?;
    writeln!(
        f,
        "// Backend `{}` disagrees with the interpreter: {}.",
        finding.backend, finding.signature
    )?;
    for line in reduced.detail.lines() {
        writeln!(f, "// {line}")?;
    }
    let input_seed = super::input_seed(finding.seed);
    writeln!(
        f,
        "// Its inputs are the fuzzer's, from input seed {input_seed} (tag `{}{input_seed}`):",
        super::FUZZ_INPUTS_TAG
    )?;
    writeln!(
        f,
        "// cargo xtask conformance --filter found/{} reruns it with them.",
        name.trim_end_matches(".mpmd")
    )?;
    if let Signature::WrongValue { output } = &finding.signature {
        let mma = reduced
            .file
            .spec
            .compares
            .iter()
            .any(|(n, m)| n == output && *m == CompareMode::Mma);
        if mma {
            // The fuzzer holds the CPU backends' mma to the bits; the
            // runner holds every backend to the tensor-core bound only.
            writeln!(
                f,
                "// `{output}` compares as `mma`: the runner judges it by the tensor-core bound, \
                 `cargo test -p mpmd-conformance --test mma_exact` by the oracle's bits on \
                 cuda-host and WGSL, as the fuzzer does."
            )?;
        }
    }
    f.write_all(
        with_input_seed(&reduced.file, input_seed)
            .print()
            .as_bytes(),
    )?;
    Ok(path)
}

/// `file` with case tags that state `input_seed`
/// ([`super::FUZZ_INPUTS_TAG`]), replacing any earlier such tag.
pub fn with_input_seed(file: &CaseFile, input_seed: u64) -> CaseFile {
    let mut file = file.clone();
    let tags = &mut file.spec.tags;
    tags.retain(|t| !t.starts_with(super::FUZZ_INPUTS_TAG));
    tags.push(format!("{}{input_seed}", super::FUZZ_INPUTS_TAG));
    file
}

// ---- candidates ----------------------------------------------------------

/// One simplification step, cheap to list and applied on demand.
#[derive(Clone, Debug)]
pub enum Edit {
    DropProgram {
        map: usize,
        program: usize,
    },
    DropCall(usize),
    DropStmt {
        kernel: usize,
        path: Vec<usize>,
    },
    /// Replace an `if` by its then (`branch` 0) or else (1) body, or a `for`
    /// by `let var = start;` and its body.
    Unwrap {
        kernel: usize,
        path: Vec<usize>,
        branch: usize,
    },
    /// Replace the warp collective `let d: T = op(v, ...)` by `let d: T = v;`
    /// (`u32(v)` for a ballot; `zero`: `let d: T = 0;`), so that removing it
    /// keeps `d` defined for the statements that use it.
    Unwarp {
        kernel: usize,
        path: Vec<usize>,
        zero: bool,
    },
    /// Replace `mma_m16n8k16(d, a, b, c)` by `d[i] = c[i];` for each of
    /// its elements (`zero`: `d[i] = 0.0;`), so that `d` stays written for
    /// the statements that read it.
    Unmma {
        kernel: usize,
        path: Vec<usize>,
        zero: bool,
    },
    /// Replace `mma_load_a/b(dest, src[..])` by the element loads it means
    /// ([`mma::element_loads`]): the same values, without the collective.
    Unload {
        kernel: usize,
        path: Vec<usize>,
    },
    /// Replace expression node `node` (pre-order) by replacement `choice`.
    Expr {
        kernel: usize,
        node: usize,
        choice: usize,
    },
    AxisSize {
        mesh: usize,
        axis: usize,
        size: u32,
    },
    Shape {
        operand: String,
        dim: usize,
        extent: u32,
    },
}

/// Every one-step simplification of `m`, most aggressive first.
pub fn edits(m: &Module) -> Vec<Edit> {
    let mut out = vec![];
    for (mi, map) in m.maps.iter().enumerate() {
        if map.programs.len() > 1 {
            out.extend(
                (0..map.programs.len()).map(|program| Edit::DropProgram { map: mi, program }),
            );
        }
    }
    if m.calls.len() > 1 {
        out.extend((0..m.calls.len()).map(Edit::DropCall));
    }
    for (ki, k) in m.kernels.iter().enumerate() {
        for path in stmt_paths(&k.body) {
            let branches = match stmt_at(&k.body, &path) {
                Stmt::If { .. } => 2,
                Stmt::For { .. } | Stmt::While { .. } => 1,
                _ => 0,
            };
            out.push(Edit::DropStmt {
                kernel: ki,
                path: path.clone(),
            });
            out.extend((0..branches).map(|branch| Edit::Unwrap {
                kernel: ki,
                path: path.clone(),
                branch,
            }));
            match stmt_at(&k.body, &path) {
                Stmt::Warp { .. } => out.extend([false, true].map(|zero| Edit::Unwarp {
                    kernel: ki,
                    path: path.clone(),
                    zero,
                })),
                Stmt::Mma { d, c, .. } => {
                    // Copying `c` into itself is dropping the statement.
                    let zeros: &[bool] = if d == c { &[true] } else { &[false, true] };
                    out.extend(zeros.iter().map(|&zero| Edit::Unmma {
                        kernel: ki,
                        path: path.clone(),
                        zero,
                    }));
                }
                Stmt::MmaLoad { .. } => out.push(Edit::Unload {
                    kernel: ki,
                    path: path.clone(),
                }),
                _ => {}
            }
        }
    }
    for (ki, k) in m.kernels.iter().enumerate() {
        let mut nodes = vec![];
        for_each_expr(&mut k.body.clone(), &mut |e| {
            nodes.push(replacements(e).len());
            false
        });
        for (node, n) in nodes.into_iter().enumerate() {
            out.extend((0..n).map(|choice| Edit::Expr {
                kernel: ki,
                node,
                choice,
            }));
        }
    }
    for (mi, mesh) in m.meshes.iter().enumerate() {
        for (axis, a) in mesh.axes().enumerate() {
            out.extend(smaller(a.size).into_iter().map(|size| Edit::AxisSize {
                mesh: mi,
                axis,
                size,
            }));
        }
    }
    let mut seen = vec![];
    for map in &m.maps {
        for (_, op) in map.operands() {
            let Type::Ref(r) = &op.ty else { continue };
            if seen.contains(&op.name) {
                continue;
            }
            seen.push(op.name.clone());
            for (dim, &extent) in r.shape.iter().enumerate() {
                out.extend(smaller(extent).into_iter().map(|extent| Edit::Shape {
                    operand: op.name.clone(),
                    dim,
                    extent,
                }));
            }
        }
    }
    out
}

/// `file` with `edit` applied to its module (and what it left unused removed,
/// case entries included).
pub fn apply(file: &CaseFile, edit: &Edit) -> CaseFile {
    let m = &file.module;
    let mut c = m.clone();
    match edit {
        Edit::DropProgram { map, program } => {
            c.maps[*map].programs.remove(*program);
        }
        Edit::DropCall(ci) => {
            let call = c.calls.remove(*ci);
            if !c.calls.iter().any(|k| k.map == call.map) {
                c.maps.retain(|x| x.name != call.map);
            }
        }
        Edit::DropStmt { kernel, path } => {
            edit_stmt(&mut c.kernels[*kernel].body, path, &mut |_| vec![])
        }
        Edit::Unwrap {
            kernel,
            path,
            branch,
        } => edit_stmt(&mut c.kernels[*kernel].body, path, &mut |s| match s {
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                if *branch == 0 {
                    then_body
                } else {
                    else_body
                }
            }
            Stmt::For {
                var, start, body, ..
            } => {
                let mut b = vec![Stmt::Let { var, value: start }];
                b.extend(body);
                b
            }
            // Its body once (a `break` left in it makes the candidate invalid,
            // and the reducer drops it).
            Stmt::While { body, .. } => body,
            other => vec![other],
        }),
        Edit::Unwarp { kernel, path, zero } => {
            edit_stmt(&mut c.kernels[*kernel].body, path, &mut |s| match s {
                Stmt::Warp { dest, op, args } => {
                    let value = match (zero, args.into_iter().next()) {
                        (false, Some(v)) if op == WarpOp::Ballot => v.cast(ScalarType::U32),
                        (false, Some(v)) => v,
                        _ => Expr::Lit(Literal::from_bits(dest.ty, 0)),
                    };
                    vec![Stmt::Let { var: dest, value }]
                }
                other => vec![other],
            })
        }
        Edit::Unmma { kernel, path, zero } => {
            edit_stmt(&mut c.kernels[*kernel].body, path, &mut |s| match s {
                Stmt::Mma { d, c, .. } => (0..mma::C_LEN)
                    .map(|i| Stmt::Store {
                        target: d.element(i),
                        value: if *zero {
                            Expr::Lit(Literal::f32(0.0))
                        } else {
                            Expr::Load(Box::new(c.element(i)))
                        },
                    })
                    .collect(),
                other => vec![other],
            })
        }
        Edit::Unload { kernel, path } => {
            if let Some(axis) = thread_axis(m, &m.kernels[*kernel].name) {
                edit_stmt(&mut c.kernels[*kernel].body, path, &mut |s| match s {
                    Stmt::MmaLoad {
                        operand,
                        dest,
                        source,
                    } => mma::element_loads(operand, &dest, &source, &axis),
                    other => vec![other],
                })
            }
        }
        Edit::Expr {
            kernel,
            node,
            choice,
        } => {
            let mut seen = 0;
            for_each_expr(&mut c.kernels[*kernel].body, &mut |e| {
                if seen == *node {
                    if let Some(r) = replacements(e).into_iter().nth(*choice) {
                        *e = r;
                    }
                    return true;
                }
                seen += 1;
                false
            });
        }
        Edit::AxisSize { mesh, axis, size } => {
            let mesh = &mut c.meshes[*mesh];
            let (g, cl) = (mesh.grid.len(), mesh.cluster.len());
            let a = if *axis < g {
                &mut mesh.grid[*axis]
            } else if *axis < g + cl {
                &mut mesh.cluster[*axis - g]
            } else {
                &mut mesh.threads
            };
            a.size = *size;
        }
        Edit::Shape {
            operand,
            dim,
            extent,
        } => {
            let ty = m
                .maps
                .iter()
                .find_map(|x| x.operand(operand))
                .and_then(|(_, o)| o.ty.as_ref_type().cloned());
            if let Some(mut ty) = ty {
                ty.shape[*dim] = *extent;
                c = retype(m, operand, &ty);
            }
        }
    }
    cleanup(CaseFile {
        module: c,
        spec: file.spec.clone(),
    })
}

/// The thread axis of the mesh that kernel `kernel` runs on (the first
/// program that names it).
fn thread_axis(m: &Module, kernel: &str) -> Option<String> {
    let program = m
        .maps
        .iter()
        .flat_map(|x| &x.programs)
        .find(|p| p.kernel == kernel)?;
    let mesh = m.meshes.iter().find(|x| x.name == program.mesh)?;
    Some(mesh.threads.name.clone())
}

/// Smaller sizes to try for an axis or extent: 1, half, one less, and for a
/// multiple of 32 past one warp, one warp and one warp less (a program with
/// warp collectives keeps whole warps, E0069).
fn smaller(size: u32) -> Vec<u32> {
    let mut v = vec![];
    if size > 1 {
        v.push(1);
    }
    if size > 3 {
        v.push(size / 2);
    }
    if size > 2 {
        v.push(size - 1);
    }
    if size > WARP_SIZE && size.is_multiple_of(WARP_SIZE) {
        for whole in [WARP_SIZE, size - WARP_SIZE] {
            if !v.contains(&whole) {
                v.push(whole);
            }
        }
    }
    v
}

/// Replacements for an expression: its children, then small literals.
fn replacements(e: &Expr) -> Vec<Expr> {
    let mut r: Vec<Expr> = match e {
        Expr::Lit(_) => return vec![],
        Expr::Var(_)
        | Expr::AxisIndex(_)
        | Expr::AxisSize(_)
        | Expr::WarpPosition(_)
        | Expr::Load(_) => vec![],
        Expr::Unary(_, a) | Expr::Cast(_, a) | Expr::Bitcast(_, a) => vec![(**a).clone()],
        Expr::Binary(_, a, b) => vec![(**a).clone(), (**b).clone()],
        Expr::Select(c, a, b) => vec![(**a).clone(), (**b).clone(), (**c).clone()],
        Expr::Math(_, args) => args.clone(),
    };
    r.extend([
        Expr::Lit(Literal::U32(0)),
        Expr::Lit(Literal::I32(0)),
        Expr::Lit(Literal::f32(1.0)),
        Expr::Lit(Literal::Bool(false)),
    ]);
    r
}

/// `m` with operand `name` retyped in every map, kernel parameter and resident.
fn retype(m: &Module, name: &str, ty: &RefType) -> Module {
    let mut c = m.clone();
    for map in &mut c.maps {
        for list in [
            &mut map.inputs,
            &mut map.outputs,
            &mut map.scalars,
            &mut map.scratch,
        ] {
            for op in list.iter_mut().filter(|o| o.name == name) {
                op.ty = Type::Ref(ty.clone());
            }
        }
    }
    for k in &mut c.kernels {
        for p in k.params.iter_mut().filter(|p| p.name == name) {
            p.ty = Type::Ref(ty.clone());
        }
    }
    for r in c.residents.iter_mut().filter(|r| r.name == name) {
        r.ty = ty.clone();
    }
    c
}

/// Removes what nothing uses any more: kernels, operands (with their
/// parameters, aliases, call values and case entries), residents, meshes,
/// helper functions and constants.
pub fn cleanup(file: CaseFile) -> CaseFile {
    let CaseFile {
        module: mut m,
        mut spec,
    } = file;
    let used_kernels: Vec<String> = m
        .maps
        .iter()
        .flat_map(|x| x.programs.iter().map(|p| p.kernel.clone()))
        .collect();
    m.kernels.retain(|k| used_kernels.contains(&k.name));
    let calls = m.calls.clone();
    m.calls = calls
        .into_iter()
        .filter(|c| m.maps.iter().any(|x| x.name == c.map))
        .collect();

    for mi in 0..m.maps.len() {
        let kernel_names: Vec<String> = m.maps[mi]
            .programs
            .iter()
            .map(|p| p.kernel.clone())
            .collect();
        // Only maps whose kernels serve no other map can lose operands.
        let shared =
            m.maps.iter().enumerate().any(|(j, x)| {
                j != mi && x.programs.iter().any(|p| kernel_names.contains(&p.kernel))
            });
        if shared {
            continue;
        }
        let names: Vec<String> = m.maps[mi].operands().map(|(_, o)| o.name.clone()).collect();
        let mut used = HashSet::new();
        for k in m.kernels.iter().filter(|k| kernel_names.contains(&k.name)) {
            names_used(&k.body, &mut used);
        }
        for name in names {
            if used.contains(&name) {
                continue;
            }
            let map = &mut m.maps[mi];
            for list in [
                &mut map.inputs,
                &mut map.outputs,
                &mut map.scalars,
                &mut map.scratch,
            ] {
                list.retain(|o| o.name != name);
            }
            map.aliases.retain(|a| a.input != name && a.output != name);
            let map_name = map.name.clone();
            for k in m
                .kernels
                .iter_mut()
                .filter(|k| kernel_names.contains(&k.name))
            {
                k.params.retain(|p| p.name != name);
            }
            for c in m.calls.iter_mut().filter(|c| c.map == map_name) {
                c.scalars.retain(|(n, _)| n != &name);
            }
        }
    }
    let operand_names: Vec<String> = m
        .maps
        .iter()
        .flat_map(|x| x.operands().map(|(_, o)| o.name.clone()))
        .collect();
    spec.generators.retain(|(n, g)| {
        operand_names.contains(n)
            && match g {
                Generator::IndexInto { operand, .. } => operand_names.contains(operand),
                _ => true,
            }
    });
    spec.compares.retain(|(n, _)| operand_names.contains(n));
    let bound: Vec<String> = m
        .maps
        .iter()
        .flat_map(|x| {
            x.operands()
                .filter(|(_, o)| o.resident)
                .map(|(_, o)| o.name.clone())
        })
        .collect();
    m.residents.retain(|r| bound.contains(&r.name));
    let mut used_meshes: Vec<String> = m
        .maps
        .iter()
        .flat_map(|x| x.programs.iter().map(|p| p.mesh.clone()))
        .collect();
    for x in &m.maps {
        for (_, o) in x.operands() {
            if let Some(owner) = o.ty.as_ref_type().and_then(|r| r.owner.clone()) {
                used_meshes.push(owner);
            }
        }
    }
    used_meshes.extend(m.residents.iter().filter_map(|r| r.ty.owner.clone()));
    m.meshes.retain(|x| used_meshes.contains(&x.name));
    drop_unused_helpers(&mut m);
    CaseFile { module: m, spec }
}

/// Removes the helper functions no kernel calls (directly or through
/// another helper) and the constants nothing names.
fn drop_unused_helpers(m: &mut Module) {
    let mut called: HashSet<String> = HashSet::new();
    let mut bodies: Vec<&[Stmt]> = m.kernels.iter().map(|k| k.body.as_slice()).collect();
    let mut names = HashSet::new();
    while let Some(body) = bodies.pop() {
        visit::for_each_stmt(body, &mut |s| {
            if let Stmt::Call { function, .. } = s {
                if called.insert(function.clone()) {
                    if let Some(f) = m.functions.iter().find(|f| &f.name == function) {
                        bodies.push(&f.body);
                    }
                }
            }
        });
        visit::for_each_expr(body, &mut |e| {
            if let Expr::Var(n) = e {
                names.insert(n.clone());
            }
        });
    }
    m.functions.retain(|f| called.contains(&f.name));
    m.consts.retain(|c| names.contains(&c.name));
}

// ---- IR walking ----------------------------------------------------------

/// Paths (indices through nested bodies; `If` else bodies after then bodies)
/// of every statement, outer statements first.
fn stmt_paths(body: &[Stmt]) -> Vec<Vec<usize>> {
    let mut out = vec![];
    for (i, s) in body.iter().enumerate() {
        out.push(vec![i]);
        for (j, inner) in nested(s).into_iter().enumerate() {
            for p in stmt_paths(inner) {
                let mut full = vec![i, j];
                full.extend(p);
                out.push(full);
            }
        }
    }
    out
}

fn nested(s: &Stmt) -> Vec<&Vec<Stmt>> {
    match s {
        Stmt::If {
            then_body,
            else_body,
            ..
        } => vec![then_body, else_body],
        Stmt::For { body, .. } | Stmt::While { body, .. } => vec![body],
        _ => vec![],
    }
}

fn nested_mut(s: &mut Stmt) -> Vec<&mut Vec<Stmt>> {
    match s {
        Stmt::If {
            then_body,
            else_body,
            ..
        } => vec![then_body, else_body],
        Stmt::For { body, .. } | Stmt::While { body, .. } => vec![body],
        _ => vec![],
    }
}

fn stmt_at<'a>(body: &'a [Stmt], path: &[usize]) -> &'a Stmt {
    let s = &body[path[0]];
    if path.len() == 1 {
        s
    } else {
        stmt_at(nested(s)[path[1]], &path[2..])
    }
}

/// Replaces the statement at `path` by what `f` returns.
fn edit_stmt(body: &mut Vec<Stmt>, path: &[usize], f: &mut dyn FnMut(Stmt) -> Vec<Stmt>) {
    if path.len() == 1 {
        let old = body.remove(path[0]);
        for (k, s) in f(old).into_iter().enumerate() {
            body.insert(path[0] + k, s);
        }
    } else {
        let mut inner = nested_mut(&mut body[path[0]]);
        edit_stmt(inner[path[1]], &path[2..], f);
    }
}

/// Visits every expression of `body` in pre-order until `f` returns true.
fn for_each_expr(body: &mut [Stmt], f: &mut dyn FnMut(&mut Expr) -> bool) -> bool {
    for s in body {
        let stop = match s {
            Stmt::Let { value, .. }
            | Stmt::Assign { value, .. }
            | Stmt::CompoundAssign { value, .. }
            | Stmt::Var { init: value, .. } => expr_walk(value, f),
            Stmt::Mma { d, a, b, c } => [d, a, b, c]
                .into_iter()
                .any(|fragment| fragment.row.as_mut().is_some_and(|r| expr_walk(r, f))),
            Stmt::MmaLoad { dest, source, .. } => {
                dest.row.as_mut().is_some_and(|r| expr_walk(r, f)) || access_walk(source, f)
            }
            Stmt::LocalArray { .. }
            | Stmt::Barrier
            | Stmt::Break
            | Stmt::Continue
            | Stmt::Return { value: None } => false,
            Stmt::Return { value: Some(value) } => expr_walk(value, f),
            Stmt::Call { args, .. }
            | Stmt::Warp { args, .. }
            | Stmt::BlockCollective { args, .. } => args.iter_mut().any(|a| expr_walk(a, f)),
            Stmt::Store { target, value } | Stmt::CompoundStore { target, value, .. } => {
                access_walk(target, f) || expr_walk(value, f)
            }
            Stmt::While { cond, max, body } => {
                expr_walk(cond, f) || expr_walk(max, f) || for_each_expr(body, f)
            }
            Stmt::Atomic { target, args, .. } => {
                access_walk(target, f) || args.iter_mut().any(|a| expr_walk(a, f))
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => expr_walk(cond, f) || for_each_expr(then_body, f) || for_each_expr(else_body, f),
            Stmt::For {
                start, end, body, ..
            } => expr_walk(start, f) || expr_walk(end, f) || for_each_expr(body, f),
            Stmt::Sem { sem, amount, .. } => access_walk(sem, f) || expr_walk(amount, f),
            Stmt::SemRead { sem, .. } => access_walk(sem, f),
        };
        if stop {
            return true;
        }
    }
    false
}

fn access_walk(a: &mut RefAccess, f: &mut dyn FnMut(&mut Expr) -> bool) -> bool {
    a.block.iter_mut().flatten().any(|e| expr_walk(e, f))
        || a.index.iter_mut().any(|e| expr_walk(e, f))
}

fn expr_walk(e: &mut Expr, f: &mut dyn FnMut(&mut Expr) -> bool) -> bool {
    if f(e) {
        return true;
    }
    match e {
        Expr::Lit(_)
        | Expr::Var(_)
        | Expr::AxisIndex(_)
        | Expr::AxisSize(_)
        | Expr::WarpPosition(_) => false,
        Expr::Load(a) => access_walk(a, f),
        Expr::Unary(_, a) | Expr::Cast(_, a) | Expr::Bitcast(_, a) => expr_walk(a, f),
        Expr::Binary(_, a, b) => expr_walk(a, f) || expr_walk(b, f),
        Expr::Select(c, a, b) => expr_walk(c, f) || expr_walk(a, f) || expr_walk(b, f),
        Expr::Math(_, args) => args.iter_mut().any(|x| expr_walk(x, f)),
    }
}

/// Adds every variable and ref name that `body` mentions to `used`.
fn names_used(body: &[Stmt], used: &mut HashSet<String>) {
    let mut body = body.to_vec();
    for_each_expr(&mut body, &mut |e| {
        match e {
            Expr::Var(n) => {
                used.insert(n.clone());
            }
            Expr::Load(a) => {
                used.insert(a.base.clone());
            }
            _ => {}
        }
        false
    });
    targets(&body, used);
}

/// Adds the refs that statements of `body` target (stores, atomics,
/// semaphores, the fragments of an mma and a fragment load's source).
fn targets(body: &[Stmt], used: &mut HashSet<String>) {
    for s in body {
        match s {
            Stmt::Store { target, .. }
            | Stmt::CompoundStore { target, .. }
            | Stmt::Atomic { target, .. } => {
                used.insert(target.base.clone());
            }
            Stmt::CompoundAssign { name, .. } => {
                used.insert(name.clone());
            }
            Stmt::Sem { sem, .. } | Stmt::SemRead { sem, .. } => {
                used.insert(sem.base.clone());
            }
            Stmt::Mma { d, a, b, c } => used.extend([d, a, b, c].map(|f| f.array.clone())),
            Stmt::MmaLoad { dest, source, .. } => {
                used.insert(dest.array.clone());
                used.insert(source.base.clone());
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                targets(then_body, used);
                targets(else_body, used);
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => targets(body, used),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statement_paths_reach_nested_bodies() {
        let body = BodyBuilder::nested(|b| {
            b.barrier();
            b.if_else(Expr::from(true), |t| t.barrier(), |e| e.barrier());
        });
        assert_eq!(
            stmt_paths(&body),
            vec![vec![0], vec![1], vec![1, 0, 0], vec![1, 1, 0]]
        );
        let mut edited = body.clone();
        edit_stmt(&mut edited, &[1, 1, 0], &mut |_| vec![]);
        assert_eq!(
            edited[1],
            Stmt::If {
                cond: Expr::from(true),
                then_body: vec![Stmt::Barrier],
                else_body: vec![]
            }
        );
    }

    /// A helper or constant goes with the last statement that used it.
    #[test]
    fn unused_helpers_and_constants_are_removed() {
        let uses = |m: &Module, what: &dyn Fn(&Stmt) -> bool| {
            let mut found = false;
            for k in &m.kernels {
                visit::for_each_stmt(&k.body, &mut |s| found |= what(s));
            }
            found
        };
        let file = (0..)
            .map(crate::fuzz::generate)
            .find(|f| uses(&f.module, &|s| matches!(s, Stmt::Call { .. })))
            .unwrap();
        let kept = cleanup(file.clone()).module;
        assert_eq!(kept.functions, file.module.functions);
        let mut empty = file;
        for k in &mut empty.module.kernels {
            k.body.clear();
        }
        let empty = cleanup(empty).module;
        assert!(empty.functions.is_empty() && empty.consts.is_empty());
    }

    /// Fragment rows and a fragment load's source and origin count as
    /// uses, and the expression walk reaches them (to simplify them).
    #[test]
    fn fragment_rows_and_load_sources_are_uses() {
        let body = BodyBuilder::nested(|b| {
            b.mma(
                Fragment::row("acc", Expr::Var("j".into())),
                "fa",
                "fb",
                Fragment::row("acc", Expr::Var("k".into())),
            );
            b.mma_load(
                mma::Operand::A,
                Fragment::row("fa2", Expr::Var("i".into())),
                RefAccess {
                    base: "tile".into(),
                    block: None,
                    index: vec![Expr::Var("r".into()), Expr::from(0u32)],
                },
            );
        });
        let mut used = HashSet::new();
        names_used(&body, &mut used);
        let mut used: Vec<_> = used.into_iter().collect();
        used.sort();
        assert_eq!(used, ["acc", "fa", "fa2", "fb", "i", "j", "k", "r", "tile"]);
        let mut vars = vec![];
        for_each_expr(&mut body.clone(), &mut |e| {
            if let Expr::Var(n) = e {
                vars.push(n.clone());
            }
            false
        });
        assert_eq!(vars, ["j", "k", "i", "r"]);
    }

    #[test]
    fn whole_warps_are_among_the_smaller_sizes() {
        assert_eq!(smaller(96), vec![1, 48, 95, 32, 64]);
        assert_eq!(smaller(64), vec![1, 32, 63]);
        assert_eq!(smaller(32), vec![1, 16, 31]);
    }

    /// Replacing a warp collective keeps its result defined: by zero, every
    /// such candidate of a generated warp module is a valid, race-free
    /// module (a literal is uniform, so conditions on the result stay
    /// warp-uniform); by its own value, the statement is a `let` of it.
    #[test]
    fn a_warp_collective_is_replaced_by_a_let_of_its_value_or_zero() {
        let options = crate::fuzz::GenOptions {
            warps: 100,
            ..Default::default()
        };
        let seed = 7;
        let file = crate::fuzz::generate_with(seed, &options);
        let unwarps: Vec<Edit> = edits(&file.module)
            .into_iter()
            .filter(|e| matches!(e, Edit::Unwarp { .. }))
            .collect();
        assert!(unwarps.len() >= 4, "{}", file.print());
        for edit in &unwarps {
            let Edit::Unwarp { kernel, path, zero } = edit else {
                unreachable!()
            };
            let Stmt::Warp { dest, op, args } = stmt_at(&file.module.kernels[*kernel].body, path)
            else {
                panic!("{edit:?} is not at a warp collective");
            };
            let candidate = apply(&file, edit);
            let Stmt::Let { var, value } = stmt_at(&candidate.module.kernels[*kernel].body, path)
            else {
                panic!("{edit:?} left no `let`");
            };
            assert_eq!(var, dest);
            let expected = match (zero, op) {
                (true, _) => Expr::Lit(Literal::from_bits(dest.ty, 0)),
                (false, WarpOp::Ballot) => args[0].clone().cast(ScalarType::U32),
                (false, _) => args[0].clone(),
            };
            assert_eq!(value, &expected);
            if *zero {
                if let Err((stage, message)) = crate::fuzz::check_module(&candidate, seed) {
                    panic!("{edit:?} at {stage}: {message}\n{}", candidate.print());
                }
            }
        }
    }

    /// An mma becomes stores of its `c` (or zeros) into its `d`, and a
    /// fragment load the element loads it means: every such candidate of a
    /// generated mma module is valid and race-free, and without a load the
    /// oracle computes exactly what it computed with it.
    #[test]
    fn mma_statements_are_replaced_by_element_stores_and_loads() {
        let options = crate::fuzz::GenOptions {
            warps: 100,
            mma: 100,
            ..Default::default()
        };
        let is_edit = |e: &Edit| matches!(e, Edit::Unmma { .. } | Edit::Unload { .. });
        let (seed, file) = (0..)
            .map(|s| (s, crate::fuzz::generate_with(s, &options)))
            .find(|(_, f)| {
                let list = edits(&f.module);
                list.iter().any(|e| matches!(e, Edit::Unload { .. }))
                    && list
                        .iter()
                        .any(|e| matches!(e, Edit::Unmma { zero: false, .. }))
            })
            .unwrap();
        let before = crate::fuzz::check_module(&file, seed).expect("the module checks");
        let mut seen = [0; 3];
        for edit in edits(&file.module).iter().filter(|e| is_edit(e)) {
            let candidate = apply(&file, edit);
            let oracle = crate::fuzz::check_module(&candidate, seed)
                .unwrap_or_else(|e| panic!("{edit:?}: {e:?}\n{}", candidate.print()));
            match edit {
                Edit::Unload { kernel, path } => {
                    let Stmt::MmaLoad {
                        operand,
                        dest,
                        source,
                    } = stmt_at(&file.module.kernels[*kernel].body, path)
                    else {
                        panic!("{edit:?} is not at a fragment load");
                    };
                    let Stmt::Store { target, value } =
                        stmt_at(&candidate.module.kernels[*kernel].body, path)
                    else {
                        panic!("{edit:?} left no store");
                    };
                    assert_eq!(target, &dest.element(0));
                    assert!(
                        matches!(value, Expr::Load(a) if a.base == source.base),
                        "{value:?}"
                    );
                    // Cleaning up may drop outputs nothing writes; the
                    // others are as they were.
                    for (name, got) in &oracle.outputs[0].outputs {
                        assert_eq!(got, &before.outputs[0].outputs[name], "{edit:?}: `{name}`");
                    }
                    let (mma_output, _) = candidate
                        .spec
                        .compares
                        .iter()
                        .find(|(_, m)| *m == CompareMode::Mma)
                        .expect("an mma output");
                    assert!(oracle.outputs[0].outputs.contains_key(mma_output));
                    seen[0] += operand.fragment_len();
                }
                Edit::Unmma { kernel, path, zero } => {
                    let Stmt::Mma { d, c, .. } = stmt_at(&file.module.kernels[*kernel].body, path)
                    else {
                        panic!("{edit:?} is not at an mma");
                    };
                    let body = &candidate.module.kernels[*kernel].body;
                    for i in 0..mma::C_LEN {
                        let mut at = path.clone();
                        *at.last_mut().unwrap() += i as usize;
                        let value = if *zero {
                            Expr::Lit(Literal::f32(0.0))
                        } else {
                            Expr::Load(Box::new(c.element(i)))
                        };
                        let store = Stmt::Store {
                            target: d.element(i),
                            value,
                        };
                        assert_eq!(stmt_at(body, &at), &store, "{edit:?}");
                    }
                    seen[1 + usize::from(*zero)] += 1;
                }
                _ => unreachable!(),
            }
        }
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }

    #[test]
    fn dropping_a_program_drops_its_kernel_mesh_and_operands() {
        let seed = (0..)
            .find(|&s| {
                let m = crate::fuzz::generate(s).module;
                m.maps.len() == 1 && m.maps[0].programs.len() == 2
            })
            .unwrap();
        let file = crate::fuzz::generate(seed);
        let CaseFile { module: c, spec } = apply(&file, &Edit::DropProgram { map: 0, program: 1 });
        assert_eq!(
            c.kernels
                .iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>(),
            ["k0"]
        );
        // m1 stays only as the owner of an operand k0 still uses (an external mesh).
        let owners: Vec<String> = c.maps[0]
            .operands()
            .filter_map(|(_, o)| o.ty.as_ref_type().and_then(|r| r.owner.clone()))
            .collect();
        for mesh in &c.meshes {
            assert!(
                mesh.name == "m0" || owners.contains(&mesh.name),
                "{}",
                mesh.name
            );
        }
        assert!(c.maps[0].operand("o1").is_none());
        assert!(c.maps[0].operand("o0").is_some());
        let params: Vec<&str> = c.kernels[0]
            .params
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        let operands: Vec<&str> = c.maps[0].operands().map(|(_, o)| o.name.as_str()).collect();
        assert_eq!(params, operands);
        assert!(spec
            .compares
            .iter()
            .all(|(n, _)| operands.contains(&n.as_str())));
    }
}
