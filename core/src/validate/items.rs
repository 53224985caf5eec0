//! Module-level checks: items, meshes, residents, maps and calls.

use std::collections::{HashMap, HashSet};

use super::body::{check_kernel, ProgramCtx};
use super::{ref_text, type_text, Sink, ValidateOptions};
use crate::ir::limits::{wide_product, MAX_BLOCKS, MAX_BUFFER_BYTES};
use crate::ir::{
    IrPath, MemorySpace, Mesh, Module, MpmdMap, OperandKind, PathStep, RefType, ScalarType, Stmt,
    Type, LINEAR_THREADS,
};

/// `too_deep`: kernels whose bodies are not walked (E0057).
pub(super) fn check_module(
    module: &Module,
    options: &ValidateOptions,
    too_deep: &HashSet<&str>,
    sink: &mut Sink,
) {
    check_duplicate_items(module, sink);
    check_tables(module, sink);
    check_functions(module, sink);
    for mesh in &module.meshes {
        check_mesh(mesh, sink);
    }
    for resident in &module.residents {
        let path = IrPath::root().child(PathStep::Resident(resident.name.clone()));
        let what = format!("resident `{}`", resident.name);
        if check_ref_type(module, &resident.ty, &path, &what, sink)
            && resident.ty.space == MemorySpace::Smem
        {
            sink.report(
                "E0025",
                path,
                format!(
                    "resident `{}` has type `{}`; smem lives only while a program runs",
                    resident.name,
                    ref_text(&resident.ty)
                ),
                "declare the resident in gmem or sem, or make it an smem scratch operand of a map",
            );
        }
    }
    let mut used_kernels = HashSet::new();
    for map in &module.maps {
        check_map(module, options, map, too_deep, &mut used_kernels, sink);
    }
    for kernel in &module.kernels {
        if !used_kernels.contains(kernel.name.as_str()) {
            // Parameters of kernels that a map runs are checked as the map's operands.
            for param in &kernel.params {
                if let Type::Ref(r) = &param.ty {
                    let path = IrPath::root()
                        .child(PathStep::Kernel(kernel.name.clone()))
                        .child(PathStep::Param(param.name.clone()));
                    let what = format!("parameter `{}` of kernel `{}`", param.name, kernel.name);
                    check_ref_type(module, r, &path, &what, sink);
                }
            }
        }
        if !too_deep.contains(kernel.name.as_str()) {
            // Kernels name the operands they use, so duplicate parameters
            // are the kernel's own error whether or not a map runs it.
            check_kernel(module, kernel, None, true, sink);
        }
    }
    check_calls(module, sink);
}

fn check_duplicate_items(module: &Module, sink: &mut Sink) {
    fn dups<'a>(
        kind: &str,
        names: impl Iterator<Item = &'a str>,
        step: fn(String) -> PathStep,
        sink: &mut Sink,
    ) {
        let mut seen = HashSet::new();
        let mut reported = HashSet::new();
        for name in names {
            if !seen.insert(name) && reported.insert(name) {
                sink.report(
                    "E0001",
                    IrPath::root().child(step(name.to_string())),
                    format!("the {kind} name `{name}` is declared more than once"),
                    format!("rename one of the items named `{name}`"),
                );
            }
        }
    }
    dups(
        "constant",
        module
            .consts
            .iter()
            .map(|c| c.name.as_str())
            .chain(module.tables.iter().map(|t| t.name.as_str())),
        PathStep::Const,
        sink,
    );
    dups(
        "helper function",
        module.functions.iter().map(|f| f.name.as_str()),
        PathStep::Function,
        sink,
    );
    dups(
        "mesh",
        module.meshes.iter().map(|m| m.name.as_str()),
        PathStep::Mesh,
        sink,
    );
    dups(
        "kernel",
        module.kernels.iter().map(|k| k.name.as_str()),
        PathStep::Kernel,
        sink,
    );
    dups(
        "map",
        module.maps.iter().map(|m| m.name.as_str()),
        PathStep::Map,
        sink,
    );
    dups(
        "resident",
        module.residents.iter().map(|r| r.name.as_str()),
        PathStep::Resident,
        sink,
    );
}

/// A constant table (E0077) holds 1 to [`MAX_TABLE_LEN`] values, each of
/// its element type: every thread that reads it gets a `local` copy.
fn check_tables(module: &Module, sink: &mut Sink) {
    for table in &module.tables {
        let path = IrPath::root().child(PathStep::Const(table.name.clone()));
        let name = &table.name;
        let problem = if table.values.is_empty() || table.values.len() > MAX_TABLE_LEN {
            Some(format!(
                "has {} values; a table holds 1 to {MAX_TABLE_LEN}",
                table.values.len()
            ))
        } else {
            table
                .values
                .iter()
                .position(|v| v.ty() != table.elem)
                .map(|i| {
                    format!(
                        "is declared `{}` but its value {i} is a `{}` literal",
                        table.elem,
                        table.values[i].ty()
                    )
                })
        };
        if let Some(problem) = problem {
            sink.report(
                "E0077",
                path,
                format!("the constant table `{name}` {problem}"),
                format!(
                    "list 1 to {MAX_TABLE_LEN} literals of type `{}`",
                    table.elem
                ),
            );
        }
    }
}

/// The most values a constant table holds (each reading thread keeps a
/// `local` copy).
pub const MAX_TABLE_LEN: usize = 1024;

fn check_mesh(mesh: &Mesh, sink: &mut Sink) {
    let path = IrPath::root().child(PathStep::Mesh(mesh.name.clone()));
    for (kind, axes) in [("grid", &mesh.grid), ("cluster", &mesh.cluster)] {
        if axes.len() > 3 {
            sink.report(
                "E0009",
                path.clone(),
                format!(
                    "mesh `{}` has {} {kind} axes; at most 3 are allowed",
                    mesh.name,
                    axes.len()
                ),
                format!("merge some {kind} axes of `{}` into one", mesh.name),
            );
        }
        for axis in axes.iter() {
            if axis.size == 0 {
                sink.report(
                    "E0011",
                    path.clone(),
                    format!(
                        "{kind} axis `{}` of mesh `{}` has size 0",
                        axis.name, mesh.name
                    ),
                    "give the axis a size of at least 1",
                );
            }
        }
    }
    let threads = &mesh.threads;
    if !mesh.thread_axes.is_empty() {
        let product = mesh
            .thread_axes
            .iter()
            .try_fold(1u32, |n, a| n.checked_mul(a.size));
        let problem = if mesh.thread_axes.len() > 3 {
            Some(format!(
                "has {} thread axes; at most 3 are allowed",
                mesh.thread_axes.len()
            ))
        } else if let Some(axis) = mesh.thread_axes.iter().find(|a| a.size == 0) {
            Some(format!("has the thread axis `{}` of size 0", axis.name))
        } else if threads.name != LINEAR_THREADS || product != Some(threads.size) {
            Some(format!(
                "has the linear thread axis `{}` of {} threads, not `{LINEAR_THREADS}` of the thread axes' product",
                threads.name, threads.size
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            sink.report(
                "E0078",
                path.clone(),
                format!("mesh `{}` {problem}", mesh.name),
                "write the block as `threads [x = .., y = ..];`, 1 to 3 axes of at least 1 thread each",
            );
        }
    }
    if threads.size == 0 || threads.size > 1024 {
        sink.report(
            "E0010",
            path.clone(),
            format!(
                "thread axis `{}` of mesh `{}` has {} threads; a block has 1 to 1024",
                threads.name, mesh.name, threads.size
            ),
            "use 1 to 1024 threads per block and spread more work over grid axes",
        );
    }
    let blocks = wide_product(mesh.block_axes().map(|a| u64::from(a.size)));
    if blocks.is_none_or(|n| n > u128::from(MAX_BLOCKS)) {
        let sizes: Vec<String> = mesh.block_axes().map(|a| a.size.to_string()).collect();
        sink.report(
            "E0058",
            path.clone(),
            format!(
                "mesh `{}` has {} blocks ({}); a mesh has at most {MAX_BLOCKS}",
                mesh.name,
                count_text(blocks),
                sizes.join(" x ")
            ),
            "use fewer or smaller grid and cluster axes, and give each block more work",
        );
    }
    let mut seen = HashSet::new();
    for axis in mesh.axes() {
        if !seen.insert(axis.name.as_str()) {
            sink.report(
                "E0012",
                path.clone(),
                format!("mesh `{}` has two axes named `{}`", mesh.name, axis.name),
                "rename one of the axes",
            );
        }
    }
}

/// Checks shape, space and owner of a ref type outside kernel bodies;
/// returns whether it is sound.
/// What can be checked of a helper function without a call: its parameter
/// types, no recursion (E0065) and where it returns (E0066). Its body is
/// checked where it is called, inlined in the caller's context.
fn check_functions(module: &Module, sink: &mut Sink) {
    let recursive = crate::expand::recursive_functions(module);
    for f in &module.functions {
        let path = IrPath::root().child(PathStep::Function(f.name.clone()));
        for param in &f.params {
            if let Type::Ref(r) = &param.ty {
                let param_path = path.child(PathStep::Param(param.name.clone()));
                let what = format!("parameter `{}` of helper `{}`", param.name, f.name);
                // Helpers may take a caller's `local` array, unlike kernels.
                if r.space != MemorySpace::Local {
                    check_ref_type(module, r, &param_path, &what, sink);
                }
            }
        }
        if recursive.contains(&f.name) {
            sink.report(
                "E0065",
                path.clone(),
                format!(
                    "helper `{}` calls itself (directly or through other helpers)",
                    f.name
                ),
                "helpers are inlined where they are called: write the repetition as a loop",
            );
        }
        let last = f.body.len().checked_sub(1);
        let mut returns = Vec::new();
        crate::ir::visit::for_each_stmt(&f.body, &mut |s| {
            if let Stmt::Return { value } = s {
                returns.push(value.is_some());
            }
        });
        let ends_with_return = matches!(f.body.last(), Some(Stmt::Return { .. }));
        let at = |i: Option<usize>| match i {
            Some(i) => path.child(PathStep::Stmt(i)),
            None => path.clone(),
        };
        let misplaced = returns.len() > usize::from(ends_with_return);
        let final_value = match f.body.last() {
            Some(Stmt::Return { value }) => Some(value.is_some()),
            _ => None,
        };
        let message = if misplaced {
            Some(format!("helper `{}` has a `return` before its last statement; a helper returns only at its end", f.name))
        } else {
            match (f.result, final_value) {
                (Some(ty), None) => Some(format!(
                    "helper `{}` returns `{ty}` but does not end with `return value;`",
                    f.name
                )),
                (Some(ty), Some(false)) => Some(format!(
                    "helper `{}` returns `{ty}` but its `return` has no value",
                    f.name
                )),
                (None, Some(true)) => Some(format!(
                    "helper `{}` has no result type but returns a value",
                    f.name
                )),
                _ => None,
            }
        };
        if let Some(message) = message {
            sink.report(
                "E0066",
                at(if misplaced { None } else { last }),
                message,
                "end the helper with `return value;` when it declares `-> type`, and nowhere else",
            );
        }
    }
}

fn check_ref_type(
    module: &Module,
    r: &RefType,
    path: &IrPath,
    what: &str,
    sink: &mut Sink,
) -> bool {
    let before = sink.count();
    if r.space == MemorySpace::Local {
        sink.report(
            "E0024",
            path.clone(),
            format!("{what} has type `{}`; local arrays exist only inside a kernel body", ref_text(r)),
            "declare the array with `local name: f32[...];` in the kernel body, or use gmem or smem",
        );
    }
    if r.shape.is_empty()
        || r.shape.contains(&0)
        || (r.space == MemorySpace::Sem && r.elem != ScalarType::I32)
    {
        sink.report(
            "E0026",
            path.clone(),
            format!(
                "{what} has type `{}`{}",
                ref_text(r),
                if r.space == MemorySpace::Sem && r.elem != ScalarType::I32 {
                    format!(" with `{}` elements; semaphores count in i32", r.elem)
                } else if r.shape.is_empty() {
                    ", which has no dimensions".to_string()
                } else {
                    ", which has an extent of 0".to_string()
                }
            ),
            "give the ref at least one dimension, each of extent at least 1",
        );
    }
    if r.space.is_device_resident() {
        check_buffer_size(module, r, what, path, sink);
    }
    if let Some(owner) = &r.owner {
        if module.mesh(owner).is_none() {
            sink.report(
                "E0002",
                path.clone(),
                format!("{what} is owned by `{owner}`, which is not a mesh of the module"),
                format!("declare `mesh {owner} {{ ... }}` or name an existing mesh"),
            );
        }
    }
    sink.count() == before
}

/// Bytes of one instance of `r`, or `None` past 128 bits.
pub(super) fn instance_bytes(r: &RefType) -> Option<u128> {
    let element = u64::from(r.elem.byte_size());
    wide_product(r.shape.iter().map(|&d| u64::from(d)).chain([element]))
}

/// A count for a message; `None` is one past 128 bits.
pub(super) fn count_text(count: Option<u128>) -> String {
    match count {
        Some(n) => n.to_string(),
        None => "more than 2^128".to_string(),
    }
}

/// E0059 for a gmem or sem ref: all its instances (one per block of its
/// owner mesh) together within [`MAX_BUFFER_BYTES`].
fn check_buffer_size(module: &Module, r: &RefType, what: &str, path: &IrPath, sink: &mut Sink) {
    let owner = r.owner.as_deref().and_then(|o| module.mesh(o));
    let blocks = match owner {
        Some(mesh) => match mesh.checked_block_count() {
            Some(n) if n <= MAX_BLOCKS => n,
            // E0058 is reported on the mesh.
            _ => return,
        },
        None => 1,
    };
    let bytes = instance_bytes(r).and_then(|b| b.checked_mul(u128::from(blocks)));
    if bytes.is_some_and(|b| b <= u128::from(MAX_BUFFER_BYTES)) {
        return;
    }
    let elements = wide_product(r.shape.iter().map(|&d| u64::from(d)));
    let instances = match owner {
        Some(mesh) => format!(" per block, times {blocks} blocks of mesh `{}`", mesh.name),
        None => String::new(),
    };
    sink.report(
        "E0059",
        path.clone(),
        format!(
            "{what} has type `{}`: {} elements{instances}, {} bytes in all; a buffer holds at most {MAX_BUFFER_BYTES} bytes (1 TiB)",
            ref_text(r),
            count_text(elements),
            count_text(bytes)
        ),
        "shrink the ref, or split the data over several operands or calls",
    );
}

fn kind_name(kind: OperandKind) -> &'static str {
    match kind {
        OperandKind::Input => "input",
        OperandKind::Output => "output",
        OperandKind::Scalar => "scalar",
        OperandKind::Scratch => "scratch",
    }
}

fn check_map<'a>(
    module: &'a Module,
    options: &ValidateOptions,
    map: &'a MpmdMap,
    too_deep: &HashSet<&str>,
    used_kernels: &mut HashSet<&'a str>,
    sink: &mut Sink,
) {
    let path = IrPath::root().child(PathStep::Map(map.name.clone()));
    let before = sink.count();
    if map.programs.is_empty() {
        sink.report(
            "E0014",
            path.clone(),
            format!("map `{}` has no programs", map.name),
            "add `programs [mesh: kernel];`",
        );
    }
    let program_meshes: Vec<&str> = map.programs.iter().map(|p| p.mesh.as_str()).collect();
    let mut names = HashSet::new();
    for (kind, op) in map.operands() {
        let op_path = path.child(PathStep::Operand(op.name.clone()));
        let what = format!(
            "{} operand `{}` of map `{}`",
            kind_name(kind),
            op.name,
            map.name
        );
        if !names.insert(op.name.as_str()) {
            sink.report(
                "E0015",
                op_path.clone(),
                format!("map `{}` has two operands named `{}`", map.name, op.name),
                "rename one of them; to pass one buffer twice, alias an input to an output",
            );
        }
        match (kind, &op.ty) {
            (OperandKind::Scalar, Type::Scalar(ScalarType::Bool)) => sink.report(
                "E0023",
                op_path.clone(),
                format!("{what} has type `bool`; scalar parameters are f32, i32, u32, f16 or bf16"),
                "pass the flag as a u32 (0 or 1)",
            ),
            (OperandKind::Scalar, Type::Scalar(_)) => {}
            (OperandKind::Scalar, Type::Ref(r)) => sink.report(
                "E0023",
                op_path.clone(),
                format!("{what} has the ref type `{}`", ref_text(r)),
                "move the ref to inputs, outputs or scratch",
            ),
            (_, Type::Scalar(s)) => sink.report(
                "E0023",
                op_path.clone(),
                format!(
                    "{what} has the scalar type `{s}`; {} are refs",
                    kind.keyword()
                ),
                "move the value to `scalars`, or give it a ref type such as `gmem<u32[1]>`",
            ),
            (_, Type::Ref(r)) => {
                if check_ref_type(module, r, &op_path, &what, sink)
                    && matches!(kind, OperandKind::Input | OperandKind::Output)
                    && r.space == MemorySpace::Smem
                {
                    sink.report(
                        "E0023",
                        op_path.clone(),
                        format!(
                            "{what} has type `{}`; inputs and outputs live in gmem or sem",
                            ref_text(r)
                        ),
                        "make it a gmem operand, or an smem scratch operand filled by the kernel",
                    );
                }
            }
        }
        if op.resident {
            match &op.ty {
                Type::Ref(r) if r.space.is_device_resident() => match module.resident(&op.name) {
                    None => sink.report(
                        "E0021",
                        op_path.clone(),
                        format!("{what} is `resident`, but the module has no resident `{}`", op.name),
                        format!("declare `resident {}: {};`", op.name, ref_text(r)),
                    ),
                    Some(res) if res.ty != *r => sink.report(
                        "E0022",
                        op_path.clone(),
                        format!(
                            "{what} has type `{}`, but resident `{}` has type `{}`",
                            ref_text(r),
                            op.name,
                            ref_text(&res.ty)
                        ),
                        "give the operand exactly the resident's type",
                    ),
                    Some(_) => {}
                },
                Type::Ref(r) if r.space == MemorySpace::Local => {}
                ty => sink.report(
                    "E0023",
                    op_path.clone(),
                    format!("{what} has type `{}` and is marked `resident`; only gmem and sem refs can be", type_text(ty)),
                    "drop `resident`",
                ),
            }
        }
        if let Type::Ref(r) = &op.ty {
            if r.space == MemorySpace::Smem {
                match &r.owner {
                    Some(owner)
                        if module.mesh(owner).is_some()
                            && !program_meshes.contains(&owner.as_str()) =>
                    {
                        sink.report(
                            "E0027",
                            op_path.clone(),
                            format!(
                                "{what} is smem of mesh `{owner}`, which runs no program in map `{}`: smem of a mesh that is not running has nowhere to live",
                                map.name
                            ),
                            format!("put `{}` in gmem (device-resident), or own it by a mesh that runs a program", op.name),
                        );
                    }
                    None if map.programs.len() > 1 => sink.report(
                        "E0028",
                        op_path.clone(),
                        format!(
                            "{what} is smem without an owner, but map `{}` has {} programs",
                            map.name,
                            map.programs.len()
                        ),
                        format!(
                            "name the program mesh whose blocks hold it: `{} @ {}`",
                            ref_text(r),
                            map.programs[0].mesh
                        ),
                    ),
                    _ => {}
                }
            }
        }
    }
    check_aliases(map, &path, sink);
    let map_sound = sink.count() == before;
    let scope_meshes = check_call_meshes(module, map, &path, sink);

    // An unknown parameter is often a misspelt operand: E0060 would repeat it.
    let mut all_params_match = true;
    for (index, program) in map.programs.iter().enumerate() {
        let program_path = path.child(PathStep::Program(index));
        let mesh = module.mesh(&program.mesh);
        if mesh.is_none() {
            sink.report(
                "E0002",
                program_path.clone(),
                format!(
                    "program {index} of map `{}` runs on `{}`, which is not a mesh of the module",
                    map.name, program.mesh
                ),
                format!(
                    "declare `mesh {} {{ ... }}` or name an existing mesh",
                    program.mesh
                ),
            );
        }
        let kernel = module.kernel(&program.kernel);
        let mut params_match = false;
        match kernel {
            None => sink.report(
                "E0003",
                program_path.clone(),
                format!(
                    "program {index} of map `{}` runs `{}`, which is not a kernel of the module",
                    map.name, program.kernel
                ),
                format!(
                    "declare `kernel {}(...) {{ ... }}` or name an existing kernel",
                    program.kernel
                ),
            ),
            Some(kernel) => {
                used_kernels.insert(kernel.name.as_str());
                params_match = check_params(map, kernel, &program_path, sink);
                all_params_match &= params_match;
            }
        }
        if let Some(mesh) = mesh {
            check_smem_budget(map, index, mesh, options, &program_path, sink);
        }
        let walkable = kernel.is_some_and(|k| !too_deep.contains(k.name.as_str()));
        if let (Some(mesh), Some(kernel), true, true, true) =
            (mesh, kernel, params_match, map_sound, walkable)
        {
            let ctx = ProgramCtx {
                map,
                mesh,
                program_meshes: program_meshes.clone(),
                scope_meshes: scope_meshes.clone(),
            };
            check_kernel(module, kernel, Some(&ctx), false, sink);
        }
    }
    if all_params_match {
        check_unused_operands(module, map, &path, sink);
    }
}

fn check_aliases(map: &MpmdMap, path: &IrPath, sink: &mut Sink) {
    let mut aliased = HashSet::new();
    for alias in &map.aliases {
        let input = map.operand(&alias.input);
        let output = map.operand(&alias.output);
        let place = format!(
            "alias `{} -> {}` of map `{}`",
            alias.input, alias.output, map.name
        );
        let mut known = true;
        for (name, found) in [(&alias.input, input), (&alias.output, output)] {
            if found.is_none() {
                known = false;
                sink.report(
                    "E0017",
                    path.clone(),
                    format!("{place} names `{name}`, which is not an operand of the map"),
                    "alias an existing input to an existing output",
                );
            }
        }
        if let (Some((in_kind, in_op)), Some((out_kind, out_op))) = (input, output) {
            let op_path = path.child(PathStep::Operand(alias.input.clone()));
            if in_kind != OperandKind::Input || out_kind != OperandKind::Output {
                known = false;
                sink.report(
                    "E0018",
                    op_path,
                    format!(
                        "{place} goes from {} `{}` to {} `{}`; an alias goes from an input to an output",
                        kind_name(in_kind),
                        alias.input,
                        kind_name(out_kind),
                        alias.output
                    ),
                    "write the alias as `input -> output`",
                );
            } else if in_op.ty != out_op.ty {
                sink.report(
                    "E0019",
                    op_path,
                    format!(
                        "{place} joins `{}: {}` and `{}: {}`, which have different types",
                        alias.input,
                        type_text(&in_op.ty),
                        alias.output,
                        type_text(&out_op.ty)
                    ),
                    "give the input and the output the same type",
                );
            }
        }
        if known {
            for name in [&alias.input, &alias.output] {
                if !aliased.insert(name.as_str()) {
                    sink.report(
                        "E0020",
                        path.child(PathStep::Operand(name.clone())),
                        format!("`{name}` is aliased more than once in map `{}`", map.name),
                        "keep one alias per operand",
                    );
                }
            }
        }
    }
}

/// Checks that the meshes of a call agree on shared axis names; returns them
/// (program meshes, then external meshes, each once).
fn check_call_meshes<'a>(
    module: &'a Module,
    map: &'a MpmdMap,
    path: &IrPath,
    sink: &mut Sink,
) -> Vec<&'a Mesh> {
    let mut names: Vec<&str> = map.programs.iter().map(|p| p.mesh.as_str()).collect();
    for (_, op) in map.operands() {
        if let Some(owner) = op.ty.as_ref_type().and_then(|r| r.owner.as_deref()) {
            names.push(owner);
        }
    }
    let mut meshes: Vec<&Mesh> = Vec::new();
    for name in names {
        if let Some(mesh) = module.mesh(name) {
            if !meshes.iter().any(|m| m.name == mesh.name) {
                meshes.push(mesh);
            }
        }
    }
    let mut sizes: HashMap<&str, (u32, &str)> = HashMap::new();
    let mut reported = HashSet::new();
    for mesh in &meshes {
        for axis in mesh.axes() {
            match sizes.get(axis.name.as_str()) {
                Some(&(size, first)) if size != axis.size && first != mesh.name => {
                    if reported.insert(axis.name.as_str()) {
                        sink.report(
                            "E0013",
                            path.clone(),
                            format!(
                                "axis `{}` has size {size} in mesh `{first}` but size {} in mesh `{}`, both in map `{}`",
                                axis.name, axis.size, mesh.name, map.name
                            ),
                            "rename one of the axes, or give both the same size",
                        );
                    }
                }
                Some(_) => {}
                None => {
                    sizes.insert(axis.name.as_str(), (axis.size, mesh.name.as_str()));
                }
            }
        }
    }
    meshes
}

/// A kernel names the operands it uses, in any order, each with the map's
/// type for it (docs/design.md, "MPMD map"); it need not take them all.
fn check_params(map: &MpmdMap, kernel: &crate::ir::Kernel, path: &IrPath, sink: &mut Sink) -> bool {
    let mut ok = true;
    for param in &kernel.params {
        let message = match map.operand(&param.name) {
            None => {
                let known: Vec<String> = map.operands().map(|(_, o)| format!("`{}`", o.name)).collect();
                format!(
                    "parameter `{}` of kernel `{}` is not an operand of map `{}` (its operands: {})",
                    param.name,
                    kernel.name,
                    map.name,
                    known.join(", ")
                )
            }
            Some((_, operand)) if operand.ty != param.ty => format!(
                "parameter `{}` of kernel `{}` has type `{}`, but operand `{}` of map `{}` has type `{}`",
                param.name,
                kernel.name,
                type_text(&param.ty),
                operand.name,
                map.name,
                type_text(&operand.ty)
            ),
            Some(_) => continue,
        };
        sink.report(
            "E0016",
            path.clone(),
            message,
            format!(
                "give kernel `{}` only operands of map `{}`, each with the map's type for it",
                kernel.name, map.name
            ),
        );
        ok = false;
    }
    ok
}

/// Reports operands that no program's kernel names: nothing could read or
/// write them, which is almost always a misspelt parameter.
fn check_unused_operands(module: &Module, map: &MpmdMap, path: &IrPath, sink: &mut Sink) {
    let kernels: Vec<&crate::ir::Kernel> = map
        .programs
        .iter()
        .filter_map(|p| module.kernel(&p.kernel))
        .collect();
    if kernels.is_empty() || kernels.len() != map.programs.len() {
        // E0014 or E0003 is reported; the operand may belong to the missing kernel.
        return;
    }
    for (_, operand) in map.operands() {
        let named = kernels
            .iter()
            .any(|k| k.params.iter().any(|p| p.name == operand.name));
        if !named {
            sink.report(
                "E0060",
                path.child(PathStep::Operand(operand.name.clone())),
                format!(
                    "operand `{}` of map `{}` is named by none of its kernels ({})",
                    operand.name,
                    map.name,
                    kernels
                        .iter()
                        .map(|k| format!("`{}`", k.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                format!(
                    "add `{}` to the parameters of the kernel that uses it, or remove it from the map",
                    operand.name
                ),
            );
        }
    }
}

fn check_smem_budget(
    map: &MpmdMap,
    index: usize,
    mesh: &Mesh,
    options: &ValidateOptions,
    path: &IrPath,
    sink: &mut Sink,
) {
    let single = map.programs.len() == 1;
    let mut total: u128 = 0;
    let mut parts = Vec::new();
    for (_, op) in map.operands() {
        if let Some(r) = op.ty.as_ref_type() {
            let owned = match &r.owner {
                Some(owner) => *owner == mesh.name,
                None => single,
            };
            if r.space == MemorySpace::Smem && owned {
                // Shapes of any size: 128 bits, saturating, never wrap.
                let bytes = instance_bytes(r).unwrap_or(u128::MAX);
                total = total.saturating_add(bytes);
                parts.push(format!("`{}` {}", op.name, count_text(Some(bytes))));
            }
        }
    }
    if total > u128::from(options.smem_limit_bytes) {
        sink.report(
            "E0030",
            path.clone(),
            format!(
                "program {index} of map `{}` (kernel `{}` on mesh `{}`) needs {} bytes of smem per block ({}); the limit is {}",
                map.name,
                map.programs[index].kernel,
                mesh.name,
                count_text(Some(total)),
                parts.join(" + "),
                options.smem_limit_bytes
            ),
            "shrink the smem scratch, or keep part of it in gmem",
        );
    }
}

fn check_calls(module: &Module, sink: &mut Sink) {
    for (index, call) in module.calls.iter().enumerate() {
        let path = IrPath::root().child(PathStep::Call(index));
        let Some(map) = module.map(&call.map) else {
            sink.report(
                "E0004",
                path,
                format!(
                    "call {index} names `{}`, which is not a map of the module",
                    call.map
                ),
                "call an existing map",
            );
            continue;
        };
        for scalar in &map.scalars {
            if !call.scalars.iter().any(|(name, _)| *name == scalar.name) {
                sink.report(
                    "E0005",
                    path.clone(),
                    format!(
                        "call {index} of map `{}` gives no value for the scalar `{}`",
                        map.name, scalar.name
                    ),
                    format!("add `{} = <value>` to the call", scalar.name),
                );
            }
        }
        let mut given = HashSet::new();
        for (name, value) in &call.scalars {
            let Some(scalar) = map.scalars.iter().find(|s| s.name == *name) else {
                let known: Vec<&str> = map.scalars.iter().map(|s| s.name.as_str()).collect();
                sink.report(
                    "E0006",
                    path.clone(),
                    format!(
                        "call {index} of map `{}` gives `{name}`, which is not a scalar of the map (its scalars: {})",
                        map.name,
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ),
                    format!("remove `{name}` from the call"),
                );
                continue;
            };
            if !given.insert(name.as_str()) {
                sink.report(
                    "E0006",
                    path.clone(),
                    format!("call {index} of map `{}` gives `{name}` twice", map.name),
                    format!("give `{name}` once"),
                );
            }
            if scalar.ty != Type::Scalar(value.ty()) {
                sink.report(
                    "E0007",
                    path.clone(),
                    format!(
                        "call {index} of map `{}` gives `{name}` a `{}` value, but the scalar has type `{}`",
                        map.name,
                        value.ty(),
                        type_text(&scalar.ty)
                    ),
                    "write the literal with the scalar's type (`7u` for u32, `7` for i32, `7.0` for f32)",
                );
            }
        }
    }
}
