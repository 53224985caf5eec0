//! Validation: every rule with a stable error code (see docs/errors.md).
//!
//! [`validate`] reports every broken rule it finds, not only the first. To
//! avoid cascades, a kernel body is checked against a program's context (its
//! mesh, the map's operands) only when that context is sound: the mesh and
//! kernel exist, the map's operands are well formed and the kernel's
//! parameters match them. Context-free body checks (types, names, ranks) run
//! once per kernel regardless.
//!
//! A file's case section is checked against the module separately
//! ([`validate_case`]): it is test data, not part of the module.

mod body;
mod case;
mod facts;
mod items;
mod names;
mod nesting;
mod render;
mod uniformity;

use std::collections::HashSet;

use crate::case::CaseSpec;
use crate::ir::limits::{with_nesting_stack, INLINE_NESTING};
use crate::ir::{IrPath, Module, RefType, Type};
use crate::text::body_nesting;

/// A statement of the kernel a program runs (validation's expansion of it)
/// as written: what a race report's paths need to show source lines.
pub use crate::expand::source_path;
pub use facts::{OperandAccess, ProgramFacts, ValidMap, ValidModule, ValidProgram};
pub use render::{render, Renderer};
pub use uniformity::{Level, Uniformity};

/// Limits validation enforces.
#[derive(Clone, Debug)]
pub struct ValidateOptions {
    /// Largest `smem` per block of one program, in bytes (default 48 KiB).
    pub smem_limit_bytes: u32,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        ValidateOptions {
            smem_limit_bytes: 48 * 1024,
        }
    }
}

/// One rejected rule: a stable code, the place, what is wrong and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// `E0001`, ...; listed in docs/errors.md.
    pub code: &'static str,
    pub path: IrPath,
    /// What is wrong, naming the offending items.
    pub message: String,
    /// The rule that was broken.
    pub rule: String,
    /// How to fix it.
    pub help: String,
}

/// Every code validation can report: `(code, title, rule)`. docs/errors.md
/// has a section per code with a bad and a fixed example.
pub const CODES: &[(&str, &str, &str)] = &[
    ("E0001", "duplicate item name", "constants, meshes, helper functions, kernels, maps and residents each have unique names"),
    ("E0002", "unknown mesh", "a program, operand owner or resident owner names a mesh declared in the module"),
    ("E0003", "unknown kernel", "a program names a kernel declared in the module"),
    ("E0004", "unknown map", "a call names a map declared in the module"),
    ("E0005", "missing scalar value in a call", "a call gives a value for every scalar operand of its map"),
    ("E0006", "unknown scalar value in a call", "a call gives values only for scalar operands of its map, each once"),
    ("E0007", "scalar value of the wrong type", "a call's scalar value has the type of the scalar operand"),
    ("E0008", "case names an unknown operand", "`generate` names an input that takes host data (not `zeroed`, not a semaphore) or a device-resident ref, `compare` an output (`compare NAME = mma` a float output), `index_into` a ref operand or resident (with an existing dimension)"),
    ("E0009", "too many axes", "a mesh has at most 3 grid axes and at most 3 cluster axes"),
    ("E0010", "thread axis size out of range", "a mesh's thread axis has 1 to 1024 threads"),
    ("E0011", "axis of size zero", "grid and cluster axes have size at least 1"),
    ("E0012", "duplicate axis name in a mesh", "axis names are unique within a mesh"),
    ("E0013", "axis name with two sizes", "two meshes of one call (program meshes and external meshes) share an axis name only with the same size"),
    ("E0014", "map without programs", "a map has at least one (mesh, kernel) program"),
    ("E0015", "duplicate operand name", "operand names are unique within a map"),
    ("E0016", "kernel parameter that is not a map operand", "a kernel's parameters are operands of each map that runs it, matched by name (in any order, any subset), each with the operand's type"),
    ("E0017", "alias names an unknown operand", "an alias names operands of its map"),
    ("E0018", "alias is not input -> output", "an alias goes from an input to an output"),
    ("E0019", "aliased operands of different types", "an input and the output it aliases have the same type"),
    ("E0020", "operand aliased twice", "an operand takes part in at most one alias"),
    ("E0021", "resident operand without a module resident", "a `resident` operand is bound to a module-level resident of the same name"),
    ("E0022", "resident operand of a different type", "a `resident` operand has exactly the type of the module resident of that name"),
    ("E0023", "operand of the wrong kind", "scalars are f32, i32, u32, f16 or bf16; inputs, outputs and scratch are refs; inputs and outputs live in gmem or sem; only gmem and sem operands can be resident"),
    ("E0024", "`local` memory out of place", "`local` arrays are declared inside kernel bodies only, never as operands, parameters or residents"),
    ("E0025", "resident in a non-device space", "module residents live in device memory: gmem or sem"),
    ("E0026", "bad ref shape", "a ref has at least one dimension, every extent at least 1, and sem elements are i32"),
    ("E0027", "smem of an external mesh", "smem must be owned by a mesh that runs a program of the map"),
    ("E0028", "unowned smem in a multi-program map", "in a map with more than one program, every smem scratch names its owner mesh"),
    ("E0029", "smem touched by a program that does not own it", "only the program running on an smem ref's owner mesh may touch it"),
    ("E0030", "too much smem", "a program's smem per block is at most the limit"),
    ("E0031", "owned ref used without block coordinates", "a program not running on a ref's owner mesh reaches it only through `@[coords]`"),
    ("E0032", "block coordinates on a ref that cannot take them", "`@[coords]` applies to gmem and sem refs that have an owner mesh"),
    ("E0033", "wrong number of block coordinates", "`@[coords]` has one coordinate per grid and cluster axis of the owner mesh"),
    ("E0034", "axis_index of an axis outside the program's mesh", "`axis_index` names an axis of the mesh the program runs on"),
    ("E0035", "axis_size of an axis not in scope", "`axis_size` names an axis of a program mesh or an owner mesh of the call"),
    ("E0036", "unknown name", "every name used in a kernel body is a parameter or a binding in scope"),
    ("E0037", "type error in an expression", "operators and functions get operands of the types they accept"),
    ("E0038", "value of a different type than declared", "the value given to a `let`, `var`, assignment or atomic result has the declared type"),
    ("E0039", "condition is not bool", "`if` and `select` conditions are bool"),
    ("E0040", "index is not an integer", "indices and block coordinates are i32 or u32"),
    ("E0041", "stored value of the wrong type", "stored values and atomic operands have the ref's element type; semaphore amounts are i32"),
    ("E0042", "assignment to something that is not a `var`", "only `var` locals can be assigned"),
    ("E0043", "name declared twice", "a name is declared once in a scope and the scopes around it (parameters and constants included): there is no shadowing, but sibling blocks may reuse a name"),
    ("E0044", "bad for-loop variable", "a loop variable is i32 or u32 and both bounds have its type"),
    ("E0045", "loop bound is not block-uniform", "`for` bounds and `while` maximums are built from literals, constants, scalar parameters, axis sizes, grid/cluster axis indices and `let`s of block-uniform values, with no loads"),
    ("E0046", "wrong number of indices", "an access has one index per dimension of the ref"),
    ("E0047", "constant index out of bounds", "an index or block coordinate that is a compile-time constant (literals, axis_size, constant lets and operators over them) is in 0..extent"),
    ("E0048", "memory access to a semaphore", "sem refs are used only through signal, wait, wait_nodec and read"),
    ("E0049", "semaphore operation on a ref that is not a semaphore", "signal, wait, wait_nodec and read apply to sem refs only"),
    ("E0050", "atomic on an unsupported ref", "atomics apply to i32 or u32 elements of gmem or smem, and to f32 ones for load, store, add, min, max and exchange (not f16, bf16 or bool)"),
    ("E0051", "malformed atomic", "each atomic has its number of operands; atomic_store has no result"),
    ("E0052", "write to an input", "inputs are read-only unless `resident`"),
    ("E0053", "block-collective operation in non-uniform control flow", "barrier, signal, wait, wait_nodec, read and the block collectives `block_broadcast`, `block_any`, `block_all` and `block_count` are reached in block-uniform control flow"),
    ("E0054", "non-uniform semaphore index, coordinate or amount", "a semaphore operation's index, block coordinates and amount are block-uniform"),
    ("E0055", "semaphore amount below 1", "a semaphore amount n is at least 1"),
    ("E0056", "invalid name", "names are identifiers that are not keywords"),
    ("E0057", "nested too deeply", "blocks and expressions together nest at most 256 levels (MAX_NESTING)"),
    ("E0058", "mesh with too many blocks", "a mesh's grid and cluster axes multiply to at most 4294967295 blocks (MAX_BLOCKS)"),
    ("E0059", "ref too large", "a gmem or sem ref, all instances together, is at most 2^40 bytes (MAX_BUFFER_BYTES); a local array at most 512 KiB per thread (MAX_LOCAL_BYTES)"),
    ("E0060", "operand no kernel names", "every operand of a map is a parameter of at least one of its programs' kernels"),
    ("E0061", "`break` or `continue` outside a loop", "`break` and `continue` appear only inside the body of a `for` or `while`"),
    ("E0062", "`while` maximum is not u32", "a `while` has a `u32` maximum trip count"),
    ("E0063", "bad compound assignment", "`x op= v` applies an arithmetic or bitwise operator to a `var` or a memory element and a value of the same type, as `x = x op v` would"),
    ("E0064", "bad helper call", "a call names a helper function of the module, gives one argument per parameter (the name of a ref of exactly the parameter's type for a ref parameter; an `smem` parameter without an owner also takes an owned `smem` ref of its element type and shape) and binds a result only when the helper has one"),
    ("E0065", "recursive helper", "helper functions do not call themselves, directly or through other helpers"),
    ("E0066", "`return` out of place", "a helper with a result type ends with `return value;`, one without may end with `return;`, and no other statement is a `return`"),
    ("E0067", "malformed warp collective", "a warp collective has its number of arguments (a value, and for shuffles a `u32` lane, delta or mask)"),
    ("E0068", "warp collective in non-warp-uniform control flow", "shuffles, votes, warp reductions, `mma_m16n8k16` and the fragment loads `mma_load_a` and `mma_load_b` are reached in warp-uniform control flow: every lane of a warp takes the same branches and loop trips"),
    ("E0069", "warp collective in a program of partial warps", "a program that uses warp collectives runs a multiple of 32 threads per block"),
    ("E0070", "mma operand that is not a local array", "the four operands of `mma_m16n8k16(d, a, b, c)` and the destination of `mma_load_a` and `mma_load_b` name `local` arrays of the thread, or rows of them (`fa[i]`): its fragments"),
    ("E0071", "mma fragment of the wrong type or shape", "`a` is `local f16[8]` or `local bf16[8]`, `b` is `local` of `a`'s type `[4]`, `c` and `d` are `local f32[4]`; a row `fa[i]` is of a 2-D `local` array of that type whose last extent is the fragment's length, and its index `i` is `u32`"),
    ("E0072", "fragment load from the wrong source", "`mma_load_a`, `mma_load_b` and `mma_load_b_kmajor` load from a gmem or smem ref of the fragment's element type with at least two dimensions, whose last two extents hold the block (16 x 16 for A, 16 x 8 for B, 8 x 16 for K-major B)"),
    ("E0073", "fragment load origin that is not warp-uniform", "the indices (and block coordinates) of the source of `mma_load_a` and `mma_load_b` are warp-uniform: every lane names the same block"),
    ("E0074", "bad case line", "a case section has at most one `generate` line for each operand and one `compare` line for each output, each generator can make values of its operand's type (integer bounds for integer operands), and `expect reject(CODE)` names a code of this list"),
    ("E0075", "malformed block collective", "a block collective has its arguments: `block_any`, `block_all` and `block_count` one `bool`; `block_broadcast` an `i32`, `u32`, `f32` or `bool` value and a block-uniform `u32` source thread"),
    ("E0076", "warp position on differently named thread axes", "a kernel that uses `lane_id()`, `warp_id()` or a thread axis runs only on meshes whose thread axes are alike (one name, or the same axes of a block of several)"),
    ("E0077", "malformed or written constant table", "a constant table lists 1 to 1024 literals of its element type and is only read"),
    ("E0078", "malformed thread axes", "a block of several thread axes has 1 to 3 of them, each of at least 1 thread, and its linear thread axis is their product"),
];

/// The rule text of `code`.
fn rule_of(code: &str) -> &'static str {
    CODES
        .iter()
        .find(|(c, _, _)| *c == code)
        .map(|(_, _, rule)| *rule)
        .unwrap_or("")
}

/// Collects diagnostics; shared by the item and body checks.
pub(crate) struct Sink {
    diags: Vec<Diagnostic>,
}

impl Sink {
    fn report(
        &mut self,
        code: &'static str,
        path: IrPath,
        message: String,
        help: impl Into<String>,
    ) {
        self.diags.push(Diagnostic {
            code,
            path,
            message,
            rule: rule_of(code).to_string(),
            help: help.into(),
        });
    }

    fn count(&self) -> usize {
        self.diags.len()
    }

    /// The diagnostics, each reported once: a kernel run by several
    /// programs is walked once per program, and its context-free findings
    /// come out identical each time.
    fn finish(self) -> Result<(), Vec<Diagnostic>> {
        let mut seen = HashSet::new();
        let diags: Vec<Diagnostic> = self
            .diags
            .into_iter()
            .filter(|d| seen.insert((d.code, d.path.clone(), d.message.clone())))
            .collect();
        if diags.is_empty() {
            Ok(())
        } else {
            Err(diags)
        }
    }
}

/// Checks every rule; returns the valid module with every program expanded
/// and its facts ([`ValidModule`]), or all diagnostics found.
pub fn validate(
    module: &Module,
    options: &ValidateOptions,
) -> Result<ValidModule, Vec<Diagnostic>> {
    // Inlined helpers nest inside their callers: any helper takes the big stack.
    let deep = !module.functions.is_empty()
        || module
            .kernels
            .iter()
            .any(|k| body_nesting(&k.body) > INLINE_NESTING);
    if deep {
        with_nesting_stack(|| validate_here(module, options))
    } else {
        validate_here(module, options)
    }
}

fn validate_here(
    module: &Module,
    options: &ValidateOptions,
) -> Result<ValidModule, Vec<Diagnostic>> {
    let mut sink = Sink { diags: Vec::new() };
    // Nesting first: the other checks recurse over the bodies it lets through.
    let too_deep = nesting::check_nesting(module, &mut sink);
    names::check_names(module, &too_deep, &mut sink);
    items::check_module(module, options, &too_deep, &mut sink);
    sink.finish()?;
    // The checks above refuse every module whose kernels do not expand.
    ValidModule::of(module).map_err(|e| vec![expand_diagnostic(&e)])
}

/// Checks a file's case section against its module (E0008, E0074): `generate`
/// names an input that takes host data or a resident, `index_into` a ref
/// with that dimension, `compare` an output. Callers that check a whole
/// file report these after [`validate`]'s.
pub fn validate_case(module: &Module, case: &CaseSpec) -> Result<(), Vec<Diagnostic>> {
    let mut sink = Sink { diags: Vec::new() };
    case::check_case(module, case, &mut sink);
    sink.finish()
}

/// An expansion failure the checks let through, reported under the code of
/// the rule it breaks rather than as a panic.
fn expand_diagnostic(e: &crate::expand::ExpandError) -> Diagnostic {
    use crate::expand::ExpandError;
    let (code, kernel) = match e {
        ExpandError::UnknownFunction { kernel, .. } => ("E0064", kernel),
        ExpandError::Recursive { kernel, .. } => ("E0065", kernel),
        ExpandError::StrayReturn { kernel } => ("E0066", kernel),
        ExpandError::TooDeep { kernel, .. } => ("E0057", kernel),
        ExpandError::ThreadAxes { kernel, .. } => ("E0076", kernel),
    };
    let help = match e {
        ExpandError::ThreadAxes { .. } => {
            "give the meshes' thread axes one form (`threads t = ...` or the same `threads [..]` in each)"
        }
        _ => "this is a validation gap: please report it with the module",
    };
    Diagnostic {
        code,
        path: IrPath::root().child(crate::ir::PathStep::Kernel(kernel.clone())),
        message: e.to_string(),
        rule: rule_of(code).to_string(),
        help: help.to_string(),
    }
}

/// A ref type as the text format writes it (`gmem<f32[4, 8]> @ m`,
/// `local<f32[4]>`): the printer's, so a message quotes what the parser reads.
pub(crate) fn ref_text(r: &RefType) -> String {
    crate::text::print_ref_type(r)
}

/// A type as the text format writes it ([`crate::text::print_type`]).
pub(crate) fn type_text(t: &Type) -> String {
    crate::text::print_type(t)
}
