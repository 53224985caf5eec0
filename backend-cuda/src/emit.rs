//! Launch plan → CUDA C: one kernel per call.
//!
//! Logical blocks are numbered in the plan's unit order (topological), so a
//! block only ever waits on lower-numbered blocks. How physical blocks become
//! logical ones is the kernel's [`BlockSchedule`]:
//! - no program waits: `blockIdx.x` is the logical block;
//! - waits, and every program has the block's thread count or a multiple of
//!   the warp size: a grid of resident blocks (cooperative launch) walks the
//!   logical blocks in increasing order (`blockIdx.x`, `+ gridDim.x`, ...),
//!   which needs no counter and cannot deadlock (the lowest unfinished
//!   logical block only waits on finished ones). A program with fewer
//!   threads than the block runs on its first threads, which synchronise at
//!   named barrier 1 (`bar.sync 1, n`); the others go on to the end of the
//!   logical block, where all threads meet before the next one;
//! - otherwise each block takes a ticket from a per-call counter, so every
//!   block a wait depends on took an earlier ticket and is already running
//!   or finished.
//!
//! The block size is the largest thread count of any program; outside the
//! walk, threads beyond their own program's count exit at entry (barriers on
//! sm_70+ wait for non-exited threads only).

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use mpmd_core::ir::visit::{for_each_expr, for_each_stmt};
use mpmd_core::ir::{
    AtomicOp, BinaryOp, Expr, Literal, MathFn, MemorySpace, RefAccess, RefType, ScalarType, SemOp,
    Stmt, Type, UnaryOp,
};
use mpmd_core::plan::{IdSource, LaunchPlan, LaunchUnit};
use mpmd_core::Mode;
use thiserror::Error;

/// The helpers every generated module starts with.
pub const PRELUDE: &str = include_str!("prelude.cu");

/// Most iterations of a loop whose loads are issued before its stores
/// (each store keeps a pointer and a value per iteration in registers).
pub const BATCH_MAX_TRIPS: u32 = 16;

/// Largest total block count of one call (CUDA's grid x limit).
pub const MAX_BLOCKS: u64 = (1 << 31) - 1;

/// Why a plan could not be turned into CUDA C.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum EmitError {
    #[error("the plan has no launch units")]
    NoUnits,
    #[error("the call needs {blocks} blocks in all; CUDA launches at most {MAX_BLOCKS}")]
    TooManyBlocks { blocks: u64 },
    #[error("program {program} (`{kernel}`): {detail}")]
    Unsupported {
        program: usize,
        kernel: String,
        detail: String,
    },
}

/// What the host needs to know about one ref named in an error record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefInfo {
    /// The name as the kernel wrote it.
    pub name: String,
    pub shape: Vec<u32>,
    /// Block-axis sizes of the owner mesh (empty for unowned refs and locals).
    pub owner_block_shape: Vec<u32>,
}

/// One kernel parameter, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelParam {
    /// A device buffer: index into `LaunchPlan::buffers`.
    Buffer(usize),
    /// A scalar operand: index into `LaunchPlan::operands`.
    Scalar(usize),
    /// The per-call control block (`u32[CONTROL_WORDS]`).
    Control,
    /// The wait time limit in nanoseconds (`u64`).
    WaitTimeoutNs,
}

/// The tickets of one program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketRange {
    /// Index into `MpmdMap::programs`.
    pub program: usize,
    pub kernel: String,
    pub first: u64,
    pub count: u64,
}

/// Generated CUDA C and what the host needs to launch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmittedModule {
    pub source: String,
    pub kernel_name: String,
    pub schedule: BlockSchedule,
    /// Threads per block: the largest thread count of any program.
    pub block_dim: u32,
    /// Blocks (tickets) of all programs together.
    pub total_blocks: u64,
    /// Bytes of dynamic shared memory per block (the largest program arena).
    pub dynamic_smem_bytes: u32,
    pub params: Vec<KernelParam>,
    /// Refs that an error record can name, by id.
    pub refs: Vec<RefInfo>,
    pub tickets: Vec<TicketRange>,
}

/// Readable CUDA C for the plan (`mpmd lower --target cuda`).
pub fn emit(plan: &LaunchPlan, mode: Mode) -> Result<String, EmitError> {
    Ok(emit_module(plan, mode)?.source)
}

/// The C name of a user name of kind `kind` (one lowercase letter, see
/// [`names`]): `{kind}_{name}`. Names of a valid module are identifiers
/// (`[A-Za-z_][A-Za-z0-9_]*`, E0056) and are kept as they are; any other
/// string becomes `{kind}0_` and the hex of its bytes, so the map stays
/// injective even for plans built without validation.
pub fn user_name(kind: char, name: &str) -> String {
    debug_assert!(names::USER_KINDS.contains(kind));
    if is_c_identifier(name) {
        format!("{kind}_{name}")
    } else {
        format!("{kind}0_{}", hex(name))
    }
}

fn hex(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

fn is_c_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// How every identifier of a generated module is formed; ARCHITECTURE.md
/// ("CUDA backend", names) has the argument why no two can be equal.
///
/// - **User names** are `<kind>_<name>` ([`user_name`]): `v` scalars of a
///   body (`let`, `var`, `for`, atomic and `read` results), `p` scalar
///   operands, `s` smem, `l` local arrays, `a` axis indices, `m` the
///   kernel (from the map name). Buffers are `b<index>_<first operand>`,
///   told apart by the index. The name is never extended by a suffix.
/// - **Generated names** start with `mpmd_` or `MPMD_` (the prelude, the
///   kernel's skeleton); per-site temporaries are exactly
///   `mpmd_<letter><digits>`, a form no prelude or skeleton name has.
pub mod names {
    /// The kind letters of user names ([`super::user_name`]).
    pub const USER_KINDS: &str = "vpslam";

    /// The kernel's name for map `map`.
    pub fn kernel(map: &str) -> String {
        super::user_name('m', map)
    }
}

fn c_type(t: ScalarType) -> &'static str {
    match t {
        ScalarType::F32 => "float",
        ScalarType::I32 => "int",
        ScalarType::U32 => "u32",
        ScalarType::Bool => "bool",
        ScalarType::F16 => "mpmd_half",
        ScalarType::BF16 => "mpmd_bfloat16",
    }
}

/// The prelude's name suffix of a 16-bit float type (`mpmd_round_f16`, ...).
fn sixteen_bit_suffix(t: ScalarType) -> Option<&'static str> {
    match t {
        ScalarType::F16 => Some("f16"),
        ScalarType::BF16 => Some("bf16"),
        _ => None,
    }
}

/// A 16-bit value's text widened to its exact `f32` (other types unchanged).
fn widen(t: ScalarType, v: &str) -> String {
    match sixteen_bit_suffix(t) {
        Some(s) => format!("mpmd_widen_{s}({v})"),
        None => v.to_string(),
    }
}

/// An `f32` text rounded once to the 16-bit type `t` (other types unchanged).
fn round_to(t: ScalarType, v: &str) -> String {
    match sixteen_bit_suffix(t) {
        Some(s) => format!("mpmd_round_{s}({v})"),
        None => v.to_string(),
    }
}

/// Levels of parentheses a widening or a rounding adds to C text (see
/// [`MAX_EXPR_DEPTH`]).
fn widening_depth(t: ScalarType) -> u32 {
    u32::from(t.is_16bit())
}

/// The prelude's constructor of a 16-bit value from the low half of a `u32`.
fn from_low_half(t: ScalarType, v: &str) -> String {
    match t {
        ScalarType::BF16 => format!("mpmd_bfloat16_bits({v})"),
        _ => format!("mpmd_half_bits({v})"),
    }
}

/// Element type of a buffer in memory (`bool` is stored as a `u32`).
fn memory_type(t: ScalarType) -> &'static str {
    match t {
        ScalarType::Bool => "u32",
        other => c_type(other),
    }
}

/// An `f32` literal, bit-exact.
fn f32_literal(bits: u32) -> String {
    let v = f32::from_bits(bits);
    if v.is_finite() {
        let text = format!("{v:?}");
        // Exact in binary64 as well, so no double rounding can change it
        // however the compiler parses it.
        if text.parse::<f64>().ok() == Some(v as f64) {
            return if v.is_sign_negative() {
                format!("(-{}f)", &text[1..])
            } else {
                format!("{text}f")
            };
        }
    }
    format!("__uint_as_float(0x{bits:08x}u)")
}

fn literal(l: Literal) -> String {
    match l {
        Literal::F32(b) => f32_literal(b.0),
        Literal::I32(i32::MIN) => "(-2147483647 - 1)".to_string(),
        Literal::I32(v) if v < 0 => format!("({v})"),
        Literal::I32(v) => v.to_string(),
        Literal::U32(v) => format!("{v}u"),
        Literal::Bool(b) => b.to_string(),
        Literal::F16(bits) => from_low_half(ScalarType::F16, &format!("0x{bits:04x}u")),
        Literal::BF16(bits) => from_low_half(ScalarType::BF16, &format!("0x{bits:04x}u")),
    }
}

/// What a name in a kernel body refers to.
#[derive(Clone, Debug)]
enum Symbol {
    /// A scalar value (local, loop variable, scalar parameter) and its C name.
    Scalar { c_name: String, ty: ScalarType },
    /// A gmem or sem operand bound to a buffer.
    Buffer {
        c_name: String,
        ty: RefType,
        owner_block_shape: Vec<u32>,
    },
    /// An smem operand in the block's arena.
    Smem { c_name: String, ty: RefType },
    /// A per-thread array.
    Local {
        c_name: String,
        elem: ScalarType,
        shape: Vec<u32>,
    },
}

struct Emitter<'a> {
    plan: &'a LaunchPlan,
    mode: Mode,
    out: String,
    refs: Vec<RefInfo>,
    ref_ids: HashMap<(usize, String), u32>,
    /// Counter of the generated temporaries (`mpmd_<letter><n>`).
    next_temp: u32,
    /// Indentation depth of the statement being emitted, where the
    /// temporaries of its expressions go.
    depth: usize,
    /// Buffers of semaphores some program reads.
    read_semaphores: BTreeSet<usize>,
    /// How the unit being emitted synchronises its block and stops.
    unit_sync: UnitSync,
}

/// How a unit's code synchronises its threads and leaves when the call aborts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UnitSync {
    /// All of the block's threads run the unit: `__syncthreads()`, and `return`.
    WholeBlock,
    /// Inside a resident walk, a unit with fewer threads than the block: its
    /// first `threads` threads meet at named barrier 1 (`mpmd_bar_sync`), the
    /// others skip it; a stop jumps to the end of the logical block, where
    /// all threads meet and leave together.
    Partial { threads: u32 },
}

impl UnitSync {
    fn barrier(self) -> String {
        match self {
            UnitSync::WholeBlock => "__syncthreads();".into(),
            UnitSync::Partial { threads } => format!("mpmd_bar_sync({threads}u);"),
        }
    }

    fn stop(self) -> &'static str {
        match self {
            UnitSync::WholeBlock => "if (mpmd_stop != 0u) return;",
            UnitSync::Partial { .. } => "if (mpmd_stop != 0u) goto mpmd_next_logical_block;",
        }
    }
}

/// How the kernel's physical blocks become the plan's logical blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockSchedule {
    /// `blockIdx.x` is the logical block (no program waits).
    BlockIndex,
    /// Resident blocks walk the logical blocks in increasing order; launched
    /// cooperatively with at most as many blocks as fit on the device.
    ResidentWalk,
    /// Each block takes the next ticket from the control block's counter.
    Tickets,
}

impl BlockSchedule {
    /// The schedule `plan` gets when the device can launch cooperatively
    /// (`resident_walk`).
    pub fn for_plan(plan: &LaunchPlan, resident_walk: bool) -> Self {
        let block_dim = plan.units.iter().map(|u| u.threads_per_block).max();
        if !plan.units.iter().any(|u| has_wait(&u.kernel.body)) {
            BlockSchedule::BlockIndex
        } else if resident_walk
            // Plans that need every block resident at once keep one block per
            // logical block. A program with fewer threads than the block
            // synchronises through a named barrier, whose thread count must
            // be a multiple of the warp size.
            && !plan.needs_co_residency()
            && plan
                .units
                .iter()
                .all(|u| Some(u.threads_per_block) == block_dim || u.threads_per_block % 32 == 0)
        {
            BlockSchedule::ResidentWalk
        } else {
            BlockSchedule::Tickets
        }
    }
}

/// Generates the module, with the resident walk where the plan allows it
/// (what GPUs with cooperative launch run).
pub fn emit_module(plan: &LaunchPlan, mode: Mode) -> Result<EmittedModule, EmitError> {
    emit_module_with(plan, mode, BlockSchedule::for_plan(plan, true))
}

/// Stack of the thread the emitter runs on: statements and expressions
/// other than operator chains (walked in a loop) recurse once per nesting
/// level, which the IR bounds; this keeps any allowed depth off the
/// caller's stack (2 MiB on test threads). Reserved, not committed.
const EMIT_STACK_BYTES: usize = 256 << 20;

/// Generates the module with the given block schedule.
pub fn emit_module_with(
    plan: &LaunchPlan,
    mode: Mode,
    schedule: BlockSchedule,
) -> Result<EmittedModule, EmitError> {
    mpmd_core::ir::limits::on_large_stack(EMIT_STACK_BYTES, || {
        emit_on_this_thread(plan, mode, schedule)
    })
}

fn emit_on_this_thread(
    plan: &LaunchPlan,
    mode: Mode,
    schedule: BlockSchedule,
) -> Result<EmittedModule, EmitError> {
    if plan.units.is_empty() {
        return Err(EmitError::NoUnits);
    }
    let total_blocks: u64 = plan.units.iter().map(|u| u.block_count).sum();
    if total_blocks > MAX_BLOCKS {
        return Err(EmitError::TooManyBlocks {
            blocks: total_blocks,
        });
    }
    let block_dim = plan
        .units
        .iter()
        .map(|u| u.threads_per_block)
        .max()
        .unwrap_or(1);
    let dynamic_smem_bytes = plan.units.iter().map(|u| u.smem_bytes).max().unwrap_or(0);
    let kernel_name = names::kernel(&plan.map.name);
    let written = written_buffers(plan);

    let mut e = Emitter {
        plan,
        mode,
        out: String::new(),
        refs: Vec::new(),
        ref_ids: HashMap::new(),
        next_temp: 0,
        depth: 2,
        read_semaphores: read_semaphores(plan),
        unit_sync: UnitSync::WholeBlock,
    };
    let _ = writeln!(
        e.out,
        "// Generated by mpmd-cuda from map `{}` ({} mode): {} program(s), {} block(s), {} thread(s) per block.",
        plan.map.name,
        match mode {
            Mode::Fast => "fast",
            Mode::Checked => "checked",
        },
        plan.units.len(),
        total_blocks,
        block_dim
    );
    e.out.push_str(PRELUDE);
    e.out.push('\n');

    // Parameters: buffers, scalars, control block, wait limit.
    let mut params = Vec::new();
    let mut param_decls = Vec::new();
    for (index, buffer) in plan.buffers.iter().enumerate() {
        let elem = if buffer.ty.space == MemorySpace::Sem {
            "int"
        } else {
            memory_type(buffer.ty.elem)
        };
        let name = buffer_c_name(plan, index);
        // Buffers no program writes are read-only for the whole call, so they
        // may go through the non-coherent read-only cache. Written buffers stay
        // plain pointers: `__restrict__` would tell the compiler that no call
        // it cannot see through (a barrier, a semaphore wait) changes them, so
        // a load after a wait could be moved before it.
        let decl = if written.contains(&index) {
            format!("{elem}* {name}")
        } else {
            format!("const {elem}* __restrict__ {name}")
        };
        param_decls.push(decl);
        params.push(KernelParam::Buffer(index));
    }
    for (index, operand) in plan.operands.iter().enumerate() {
        if let Type::Scalar(t) = operand.ty {
            // bools and 16-bit floats travel as a 32-bit word (a 16-bit
            // float's bits in the low half).
            let ty = if t == ScalarType::Bool || t.is_16bit() {
                "u32"
            } else {
                c_type(t)
            };
            param_decls.push(format!("const {ty} {}", scalar_c_name(&operand.name)));
            params.push(KernelParam::Scalar(index));
        }
    }
    param_decls.push("u32* mpmd_ctl".to_string());
    params.push(KernelParam::Control);
    param_decls.push("const u64 mpmd_wait_timeout_ns".to_string());
    params.push(KernelParam::WaitTimeoutNs);

    let _ = writeln!(
        e.out,
        "extern \"C\" __global__ void __launch_bounds__({block_dim}) {kernel_name}(\n    {}) {{",
        param_decls.join(",\n    ")
    );
    e.out.push_str(
        "  extern __shared__ __align__(16) unsigned char mpmd_smem[];\n\
         \x20 __shared__ u32 mpmd_ticket;\n\
         \x20 __shared__ u32 mpmd_stop;\n\
         \x20 __shared__ int mpmd_value;\n",
    );
    match schedule {
        BlockSchedule::Tickets => e.out.push_str(
            "  // A ticket, not blockIdx, picks the (program, block): tickets are taken in\n\
             \x20 // start order, so every block a wait depends on is already running.\n\
             \x20 if (threadIdx.x == 0u) {\n\
             \x20   mpmd_ticket = atomicAdd(&mpmd_ctl[MPMD_CTL_TICKET], 1u);\n\
             \x20   mpmd_stop = *(volatile u32*)&mpmd_ctl[MPMD_CTL_ABORT];\n\
             \x20 }\n\
             \x20 __syncthreads();\n\
             \x20 if (mpmd_stop != 0u) return;\n\
             \x20 const u32 mpmd_ticket_id = mpmd_ticket;\n",
        ),
        BlockSchedule::ResidentWalk => {
            let _ = write!(
                e.out,
                "  // Every block is resident (cooperative launch) and walks the logical blocks\n\
                 \x20 // in increasing order; a wait only depends on lower ones, so the walk cannot\n\
                 \x20 // deadlock and needs no ticket counter.\n\
                 \x20 if (threadIdx.x == 0u) mpmd_stop = 0u;\n\
                 \x20 for (u32 mpmd_ticket_id = blockIdx.x; mpmd_ticket_id < {total_blocks}u; mpmd_ticket_id += gridDim.x) {{\n"
            );
        }
        BlockSchedule::BlockIndex => e.out.push_str(
            "  // No program waits, so blocks may run in any order: blockIdx is the ticket.\n\
             \x20 const u32 mpmd_ticket_id = blockIdx.x;\n",
        ),
    }

    let mut tickets = Vec::new();
    let mut first = 0u64;
    let unit_source_start = e.out.len();
    for (unit_index, unit) in plan.units.iter().enumerate() {
        let keyword = if unit_index == 0 { "if" } else { "} else if" };
        let _ = writeln!(
            e.out,
            "  {keyword} (mpmd_ticket_id < {}u) {{\n    // program {} `{}` on mesh `{}`: {} block(s) x {} thread(s)\n    const u32 mpmd_block = mpmd_ticket_id - {}u;",
            first + unit.block_count,
            unit.program,
            unit.kernel.name,
            unit.mesh.name,
            unit.block_count,
            unit.threads_per_block,
            first,
        );
        if unit.threads_per_block == block_dim {
            e.unit_sync = UnitSync::WholeBlock;
            e.emit_unit(unit)?;
        } else if schedule == BlockSchedule::ResidentWalk {
            // The block's other threads go on to the next logical block.
            e.unit_sync = UnitSync::Partial {
                threads: unit.threads_per_block,
            };
            let _ = writeln!(
                e.out,
                "    if (threadIdx.x < {}u) {{",
                unit.threads_per_block
            );
            let body_start = e.out.len();
            e.emit_unit(unit)?;
            indent_from(&mut e.out, body_start);
            e.out.push_str("    }\n");
        } else {
            e.unit_sync = UnitSync::WholeBlock;
            let _ = writeln!(
                e.out,
                "    if (threadIdx.x >= {}u) return;",
                unit.threads_per_block
            );
            e.emit_unit(unit)?;
        }
        tickets.push(TicketRange {
            program: unit.program,
            kernel: unit.kernel.name.clone(),
            first,
            count: unit.block_count,
        });
        first += unit.block_count;
    }
    e.out.push_str("  }\n");
    if schedule == BlockSchedule::ResidentWalk {
        // The units, one level deeper inside the walk.
        indent_from(&mut e.out, unit_source_start);
        if plan.units.iter().any(|u| u.threads_per_block < block_dim) {
            // Named barrier 1 may be reused only once every thread is done
            // with this logical block; a stop in a partial unit lands here.
            e.out.push_str(
                "  mpmd_next_logical_block:\n\
                 \x20   // Threads left out of a smaller program wait here for the others.\n\
                 \x20   __syncthreads();\n\
                 \x20   if (mpmd_stop != 0u) return;\n",
            );
        } else if plan.units.iter().any(|u| u.smem_bytes > 0) {
            // Without smem nothing carries over: barriers pair up in order
            // (every thread runs the same barriers per logical block), and the
            // shared words are guarded by the barriers around their uses.
            e.out.push_str(
                "    // The next logical block reuses shared memory: finish this one together.\n\
                 \x20   __syncthreads();\n",
            );
        }
        e.out.push_str("  }\n");
    }
    e.out.push_str("}\n");

    Ok(EmittedModule {
        source: e.out,
        kernel_name,
        schedule,
        block_dim,
        total_blocks,
        dynamic_smem_bytes,
        params,
        refs: e.refs,
        tickets,
    })
}

fn buffer_c_name(plan: &LaunchPlan, index: usize) -> String {
    let first = plan.buffers[index]
        .operands
        .first()
        .map(String::as_str)
        .unwrap_or("buffer");
    // The index (ended by the first `_`) tells buffers apart; the operand
    // name is only for the reader.
    if is_c_identifier(first) {
        format!("b{index}_{first}")
    } else {
        format!("b{index}_0{}", hex(first))
    }
}

fn scalar_c_name(operand: &str) -> String {
    user_name('p', operand)
}

/// Indents every non-empty line of `out` from byte `start` by two spaces.
fn indent_from(out: &mut String, start: usize) {
    let tail = out.split_off(start);
    for line in tail.lines() {
        if !line.is_empty() {
            out.push_str("  ");
        }
        out.push_str(line);
        out.push('\n');
    }
}

/// The plan buffers bound to the kernel parameters that `names_in(body)`
/// names, over every program.
fn buffers_named(
    plan: &LaunchPlan,
    names_in: impl Fn(&[Stmt]) -> BTreeSet<String>,
) -> BTreeSet<usize> {
    plan.units
        .iter()
        .flat_map(|unit| {
            names_in(&unit.kernel.body)
                .into_iter()
                .filter_map(|name| plan.param_buffer(unit, &name))
        })
        .collect()
}

/// Buffers that some program stores to, or accesses atomically.
fn written_buffers(plan: &LaunchPlan) -> BTreeSet<usize> {
    let mut written = buffers_named(plan, |body| {
        let mut names = BTreeSet::new();
        collect_written(body, &mut names);
        names
    });
    written.extend(
        plan.buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.atomic)
            .map(|(i, _)| i),
    );
    written
}

/// Buffers that some program loads from (atomics and semaphores aside).
pub fn loaded_buffers(plan: &LaunchPlan) -> BTreeSet<usize> {
    buffers_named(plan, |body| {
        let mut names = BTreeSet::new();
        for_each_expr(body, &mut |e| {
            if let Expr::Load(access) = e {
                names.insert(access.base.clone());
            }
        });
        names
    })
}

/// Buffers of the semaphores some program `read`s: their waits must not let
/// the count dip below what the semantics allow (see `MPMD_WAIT_OPTIMISTIC`).
fn read_semaphores(plan: &LaunchPlan) -> BTreeSet<usize> {
    buffers_named(plan, |body| {
        let mut names = BTreeSet::new();
        for_each_stmt(body, &mut |stmt| {
            if let Stmt::SemRead { sem, .. } = stmt {
                names.insert(sem.base.clone());
            }
        });
        names
    })
}

fn collect_written(body: &[Stmt], names: &mut BTreeSet<String>) {
    for_each_stmt(body, &mut |stmt| match stmt {
        Stmt::Store { target, .. } | Stmt::Atomic { target, .. } => {
            names.insert(target.base.clone());
        }
        Stmt::Sem { sem, .. } | Stmt::SemRead { sem, .. } => {
            names.insert(sem.base.clone());
        }
        _ => {}
    });
}

/// Whether a body waits on a semaphore (then blocks need ordered tickets).
fn has_wait(body: &[Stmt]) -> bool {
    body.iter().any(|stmt| match stmt {
        Stmt::Sem { op, .. } => matches!(op, SemOp::Wait | SemOp::WaitNodec),
        Stmt::If {
            then_body,
            else_body,
            ..
        } => has_wait(then_body) || has_wait(else_body),
        Stmt::For { body, .. } | Stmt::While { body, .. } => has_wait(body),
        _ => false,
    })
}

fn collect_axes(body: &[Stmt], axes: &mut BTreeSet<String>) {
    for_each_expr(body, &mut |e| {
        if let Expr::AxisIndex(a) = e {
            axes.insert(a.clone());
        }
    });
}

/// Per-program state while emitting its body.
struct UnitContext<'u> {
    unit: &'u LaunchUnit,
    symbols: HashMap<String, Symbol>,
    /// `while` loops emitted so far: the next one's ordinal
    /// (`ir::visit::while_loops`), which a loop-limit record names.
    next_while: u32,
}

impl UnitContext<'_> {
    fn unsupported(&self, detail: impl Into<String>) -> EmitError {
        EmitError::Unsupported {
            program: self.unit.program,
            kernel: self.unit.kernel.name.clone(),
            detail: detail.into(),
        }
    }

    fn symbol(&self, name: &str) -> Result<&Symbol, EmitError> {
        self.symbols
            .get(name)
            .ok_or_else(|| self.unsupported(format!("unknown name `{name}`")))
    }
}

/// Nesting depth of C expression text past which it is bound to a
/// temporary, so that the generated source stays shallow however deep the
/// IR expression is (C++ promises 256 nested parentheses, no more).
pub const MAX_EXPR_DEPTH: u32 = 32;

/// C expression text with its IR type and how deeply it nests.
#[derive(Clone, Debug)]
struct Code {
    text: String,
    ty: ScalarType,
    depth: u32,
}

impl Code {
    fn new(text: String, ty: ScalarType, depth: u32) -> Self {
        Code { text, ty, depth }
    }
}

/// A resolved memory access.
struct Place {
    base: String,
    /// `base[offset]` with the offset inline: what a fast-mode load reads.
    element: String,
    /// The statement binding the offset of a guarded access (every store,
    /// atomic and semaphore operation, and checked loads) to `offset`.
    compute: String,
    offset: String,
    /// True when the access may go ahead: in checked mode the offset passed
    /// its check (which reported it otherwise); in fast mode it lies inside
    /// the ref, so that no store reaches memory outside it.
    ok: String,
    /// The negation of `ok`.
    bad: String,
    /// Checked mode: the offset call alone, inline (a checked load).
    checked_call: Option<String>,
    elem: ScalarType,
    is_bool_in_memory: bool,
    depth: u32,
}

impl Emitter<'_> {
    /// A fresh generated name `mpmd_<letter><n>` (see [`names`]).
    fn temp(&mut self, letter: char) -> String {
        debug_assert!(letter.is_ascii_lowercase());
        self.next_temp += 1;
        format!("mpmd_{letter}{}", self.next_temp)
    }

    fn emit_unit(&mut self, unit: &LaunchUnit) -> Result<(), EmitError> {
        let mut cx = UnitContext {
            unit,
            symbols: HashMap::new(),
            next_while: 0,
        };
        // Bind the kernel's parameters by position to the map's operands.
        for (position, param) in unit.kernel.params.iter().enumerate() {
            let operand = self.plan.operands.get(position).ok_or_else(|| {
                cx.unsupported(format!("parameter `{}` has no operand", param.name))
            })?;
            let symbol = match &param.ty {
                Type::Scalar(t) => Symbol::Scalar {
                    c_name: if *t == ScalarType::Bool {
                        format!("({} != 0u)", scalar_c_name(&operand.name))
                    } else if t.is_16bit() {
                        from_low_half(*t, &scalar_c_name(&operand.name))
                    } else {
                        scalar_c_name(&operand.name)
                    },
                    ty: *t,
                },
                Type::Ref(r) if r.space == MemorySpace::Smem => {
                    let slot = unit
                        .smem
                        .iter()
                        .find(|s| s.operand == position)
                        .map(|s| s.offset_bytes);
                    match slot {
                        Some(offset) => {
                            let c_name = user_name('s', &param.name);
                            let _ = writeln!(
                                self.out,
                                "    {}* const {c_name} = ({}*)(mpmd_smem + {offset}u);",
                                memory_type(r.elem),
                                memory_type(r.elem)
                            );
                            Symbol::Smem {
                                c_name,
                                ty: r.clone(),
                            }
                        }
                        // smem of another program: this one may not touch it.
                        None => continue,
                    }
                }
                Type::Ref(r) => {
                    let buffer = operand.buffer.ok_or_else(|| {
                        cx.unsupported(format!("operand `{}` has no buffer", operand.name))
                    })?;
                    let owner_block_shape = match &r.owner {
                        Some(owner) => self
                            .plan
                            .mesh(owner)
                            .ok_or_else(|| cx.unsupported(format!("unknown owner mesh `{owner}`")))?
                            .block_axes()
                            .map(|a| a.size)
                            .collect(),
                        None => Vec::new(),
                    };
                    Symbol::Buffer {
                        c_name: buffer_c_name(self.plan, buffer),
                        ty: r.clone(),
                        owner_block_shape,
                    }
                }
            };
            cx.symbols.insert(param.name.clone(), symbol);
        }
        // Axis indices the body uses, from the plan's formulas.
        let mut used_axes = BTreeSet::new();
        collect_axes(&unit.kernel.body, &mut used_axes);
        for axis in &unit.axes {
            if !used_axes.contains(&axis.axis) {
                continue;
            }
            let id = match axis.source {
                IdSource::Block => "mpmd_block",
                IdSource::Thread => "threadIdx.x",
            };
            let _ = writeln!(
                self.out,
                "    const u32 {} = ({id} / {}u) % {}u;",
                user_name('a', &axis.axis),
                axis.stride,
                axis.size
            );
        }
        self.emit_body(&mut cx, &unit.kernel.body, 2)
    }

    fn emit_body(
        &mut self,
        cx: &mut UnitContext,
        body: &[Stmt],
        depth: usize,
    ) -> Result<(), EmitError> {
        for stmt in body {
            self.emit_stmt(cx, stmt, depth)?;
        }
        Ok(())
    }

    fn line(&mut self, depth: usize, text: &str) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn emit_stmt(
        &mut self,
        cx: &mut UnitContext,
        stmt: &Stmt,
        depth: usize,
    ) -> Result<(), EmitError> {
        // Temporaries of this statement's expressions go just before it.
        self.depth = depth;
        match stmt {
            Stmt::Let { var, value } => {
                let v = self.expr(cx, value)?;
                let c_name = user_name('v', &var.name);
                self.line(
                    depth,
                    &format!("const {} {c_name} = {};", c_type(var.ty), v.text),
                );
                cx.symbols
                    .insert(var.name.clone(), Symbol::Scalar { c_name, ty: var.ty });
            }
            Stmt::Var { var, init } => {
                let v = self.expr(cx, init)?;
                let c_name = user_name('v', &var.name);
                self.line(depth, &format!("{} {c_name} = {};", c_type(var.ty), v.text));
                cx.symbols
                    .insert(var.name.clone(), Symbol::Scalar { c_name, ty: var.ty });
            }
            Stmt::Assign { name, value } => {
                let v = self.expr(cx, value)?;
                let c_name = match cx.symbol(name)? {
                    Symbol::Scalar { c_name, .. } => c_name.clone(),
                    _ => return Err(cx.unsupported(format!("cannot assign to ref `{name}`"))),
                };
                self.line(depth, &format!("{c_name} = {};", v.text));
            }
            Stmt::LocalArray { name, elem, shape } => {
                let c_name = user_name('l', name);
                let len: u64 = shape.iter().map(|&d| d as u64).product();
                self.line(
                    depth,
                    &format!("{} {c_name}[{}];", c_type(*elem), len.max(1)),
                );
                cx.symbols.insert(
                    name.clone(),
                    Symbol::Local {
                        c_name,
                        elem: *elem,
                        shape: shape.clone(),
                    },
                );
            }
            Stmt::Store { target, value } => {
                let place = self.place(cx, target, Access::Write)?;
                let v = self.stored_value(cx, &place, value)?;
                // The value is bound before the bounds test: computed under
                // it, long sums kept many values live across the branch and
                // made ptxas spill.
                let value_name = self.temp('v');
                let ty = if place.is_bool_in_memory {
                    "u32"
                } else {
                    c_type(place.elem)
                };
                self.line(depth, "{");
                self.line(depth + 1, &place.compute);
                self.line(depth + 1, &format!("const {ty} {value_name} = {v};"));
                self.line(
                    depth + 1,
                    &format!(
                        "if ({}) {}[{}] = {value_name};",
                        place.ok, place.base, place.offset
                    ),
                );
                self.line(depth, "}");
            }
            Stmt::Atomic {
                dest,
                op,
                target,
                args,
            } => self.emit_atomic(cx, dest.as_ref(), *op, target, args, depth)?,
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let c = self.expr(cx, cond)?;
                self.line(depth, &format!("if ({}) {{", c.text));
                self.emit_body(cx, then_body, depth + 1)?;
                if !else_body.is_empty() {
                    self.line(depth, "} else {");
                    self.emit_body(cx, else_body, depth + 1)?;
                }
                self.line(depth, "}");
            }
            Stmt::For {
                var,
                start,
                end,
                body,
            } => {
                // Checked mode keeps the loop as written: its first
                // out-of-bounds report must be the interpreter's.
                let batched = match self.mode {
                    Mode::Fast => self.batchable(cx, start, end, body),
                    Mode::Checked => None,
                };
                match batched {
                    Some(trips) => self.emit_batched_loop(cx, var, start, trips, body, depth)?,
                    None => self.emit_loop(cx, var, start, end, body, depth)?,
                }
            }
            Stmt::While { cond, max, body } => {
                let ordinal = cx.next_while;
                cx.next_while += 1;
                let max = self.expr(cx, max)?.text;
                let max_name = self.temp('n');
                let trips = self.temp('i');
                self.line(depth, "{");
                self.line(depth + 1, &format!("const u32 {max_name} = {max};"));
                self.line(depth + 1, &format!("u32 {trips} = 0u;"));
                self.line(depth + 1, "for (;;) {");
                // The condition's temporaries are computed on every trip.
                self.depth = depth + 2;
                let c = self.expr(cx, cond)?.text;
                self.line(depth + 2, &format!("if (!({c})) break;"));
                self.line(depth + 2, &format!("if ({trips} == {max_name}) {{"));
                if self.mode == Mode::Checked {
                    self.line(
                        depth + 3,
                        &format!(
                            "mpmd_loop_limit(mpmd_ctl, {}u, mpmd_block, {ordinal}u, {max_name});",
                            cx.unit.program
                        ),
                    );
                }
                self.line(depth + 3, "break;");
                self.line(depth + 2, "}");
                // Counted before the body, so that `continue` counts too.
                self.line(depth + 2, &format!("{trips}++;"));
                self.emit_body(cx, body, depth + 2)?;
                self.line(depth + 1, "}");
                self.line(depth, "}");
            }
            Stmt::Break => self.line(depth, "break;"),
            Stmt::Continue => self.line(depth, "continue;"),
            Stmt::CompoundAssign { .. }
            | Stmt::CompoundStore { .. }
            | Stmt::Call { .. }
            | Stmt::Return { .. } => {
                return Err(cx.unsupported(
                    "a compound assignment or helper call that lowering did not expand (plan::program_kernel)",
                ))
            }
            Stmt::Barrier => self.line(depth, &self.unit_sync.barrier()),
            Stmt::Sem { op, sem, amount } => self.emit_sem(cx, *op, sem, amount, depth)?,
            Stmt::SemRead { dest, sem } => {
                let place = self.place(cx, sem, Access::Write)?;
                let c_name = user_name('v', dest);
                // Thread 0 reads and shares the value, so that it is
                // block-uniform. The first barrier keeps the slot from being
                // overwritten before every thread has read an earlier value.
                self.line(depth, &self.unit_sync.barrier());
                self.line(depth, "if (threadIdx.x == 0u) {");
                self.line(depth + 1, &place.compute);
                self.line(
                    depth + 1,
                    &format!(
                        "mpmd_value = ({}) ? mpmd_sem_read(&{}[{}]) : 0;",
                        place.ok, place.base, place.offset
                    ),
                );
                self.line(depth, "}");
                self.line(depth, &self.unit_sync.barrier());
                self.line(depth, &format!("const int {c_name} = mpmd_value;"));
                cx.symbols.insert(
                    dest.clone(),
                    Symbol::Scalar {
                        c_name,
                        ty: ScalarType::I32,
                    },
                );
            }
        }
        Ok(())
    }

    fn emit_atomic(
        &mut self,
        cx: &mut UnitContext,
        dest: Option<&mpmd_core::ir::Binding>,
        op: AtomicOp,
        target: &RefAccess,
        args: &[Expr],
        depth: usize,
    ) -> Result<(), EmitError> {
        let place = self.place(cx, target, Access::Write)?;
        if !op.applies_to(place.elem) {
            return Err(cx.unsupported(format!(
                "{} on `{}` of type {}: atomics need i32 or u32 (f32: load, store, add, min, max, exchange)",
                op.name(),
                target.base,
                place.elem
            )));
        }
        let float = place.elem == ScalarType::F32;
        if args.len() != op.arity() {
            return Err(cx.unsupported(format!(
                "{} takes {} value(s), found {}",
                op.name(),
                op.arity(),
                args.len()
            )));
        }
        let values = args
            .iter()
            .map(|a| self.expr(cx, a).map(|c| c.text))
            .collect::<Result<Vec<_>, _>>()?;
        let ty = c_type(place.elem);
        let pointer = format!("&{}[{}]", place.base, place.offset);
        let call = match op {
            AtomicOp::Load => format!("mpmd_atomic_load({pointer})"),
            AtomicOp::Store => format!("mpmd_atomic_store({pointer}, ({ty})({}))", values[0]),
            // CUDA has no float atomicMin/atomicMax: a compare-exchange loop
            // on the bits with the language's min/max (prelude).
            AtomicOp::Min if float => format!("mpmd_atomic_min_f32({pointer}, {})", values[0]),
            AtomicOp::Max if float => format!("mpmd_atomic_max_f32({pointer}, {})", values[0]),
            AtomicOp::Add => format!("atomicAdd({pointer}, {})", values[0]),
            AtomicOp::Min => format!("atomicMin({pointer}, {})", values[0]),
            AtomicOp::Max => format!("atomicMax({pointer}, {})", values[0]),
            AtomicOp::And => format!("atomicAnd({pointer}, {})", values[0]),
            AtomicOp::Or => format!("atomicOr({pointer}, {})", values[0]),
            AtomicOp::Xor => format!("atomicXor({pointer}, {})", values[0]),
            AtomicOp::Exchange => format!("atomicExch({pointer}, {})", values[0]),
            AtomicOp::CompareExchange => {
                format!("atomicCAS({pointer}, {}, {})", values[0], values[1])
            }
        };
        let dest_name = dest.map(|d| (user_name('v', &d.name), d));
        if let Some((c_name, d)) = &dest_name {
            self.line(depth, &format!("{} {c_name} = 0;", c_type(d.ty)));
        }
        self.line(depth, "{");
        self.line(depth + 1, &place.compute);
        match &dest_name {
            Some((c_name, _)) if op.returns_value() => {
                self.line(depth + 1, &format!("if ({}) {c_name} = {call};", place.ok))
            }
            _ => self.line(depth + 1, &format!("if ({}) {call};", place.ok)),
        }
        self.line(depth, "}");
        if let Some((c_name, d)) = dest_name {
            cx.symbols
                .insert(d.name.clone(), Symbol::Scalar { c_name, ty: d.ty });
        }
        Ok(())
    }

    fn emit_sem(
        &mut self,
        cx: &mut UnitContext,
        op: SemOp,
        sem: &RefAccess,
        amount: &Expr,
        depth: usize,
    ) -> Result<(), EmitError> {
        let place = self.place(cx, sem, Access::Write)?;
        let n = self.expr(cx, amount)?.text;
        let (ref_id, coords, index) = self.site_values(cx, sem)?;
        let pointer = format!("&{}[{}]", place.base, place.offset);
        // What an amount below 1 reports (DESIGN.md: amounts are at least 1).
        let site = format!(
            "mpmd_ctl, {}u, mpmd_block, {ref_id}u, {coords}, {index}",
            cx.unit.program
        );
        match op {
            SemOp::Signal => {
                self.line(depth, &format!("// signal({}, ...)", sem.base));
                self.line(depth, &self.unit_sync.barrier());
                self.line(depth, "if (threadIdx.x == 0u) {");
                self.line(depth + 1, &place.compute);
                self.line(
                    depth + 1,
                    &format!("if ({}) mpmd_sem_signal({pointer}, {n}, {site});", place.ok),
                );
                self.line(depth, "}");
            }
            SemOp::Wait | SemOp::WaitNodec => {
                let how = match op {
                    SemOp::WaitNodec => "MPMD_WAIT_NODEC",
                    _ if self.is_read_semaphore(cx, &sem.base) => "MPMD_WAIT_EXACT",
                    _ => "MPMD_WAIT_OPTIMISTIC",
                };
                self.line(depth, &format!("// {}({}, ...)", op.name(), sem.base));
                self.line(depth, "if (threadIdx.x == 0u) {");
                self.line(depth + 1, &place.compute);
                self.line(
                    depth + 1,
                    &format!(
                        "if ({} || !mpmd_sem_wait({pointer}, {n}, {how}, mpmd_wait_timeout_ns, {site})) mpmd_stop = 1u;",
                        place.bad
                    ),
                );
                self.line(depth, "}");
                self.line(depth, &self.unit_sync.barrier());
                self.line(depth, self.unit_sync.stop());
            }
        }
        Ok(())
    }

    /// Whether kernel parameter `name` of this unit is a semaphore some program reads.
    fn is_read_semaphore(&self, cx: &UnitContext, name: &str) -> bool {
        self.plan
            .param_buffer(cx.unit, name)
            .is_some_and(|buffer| self.read_semaphores.contains(&buffer))
    }

    /// The ref id and the coordinate and index values of an access, as
    /// `mpmd_idx` initialisers, for error records.
    fn site_values(
        &mut self,
        cx: &UnitContext,
        access: &RefAccess,
    ) -> Result<(u32, String, String), EmitError> {
        let ref_id = self.ref_id(cx, &access.base)?;
        let coords = match &access.block {
            Some(c) => c
                .iter()
                .map(|e| self.index_expr(cx, e).map(|c| c.text))
                .collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let index = access
            .index
            .iter()
            .map(|e| self.index_expr(cx, e).map(|c| c.text))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((ref_id, idx_init(&coords), idx_init(&index)))
    }

    fn ref_id(&mut self, cx: &UnitContext, base: &str) -> Result<u32, EmitError> {
        let key = (cx.unit.program, base.to_string());
        if let Some(&id) = self.ref_ids.get(&key) {
            return Ok(id);
        }
        let info = match cx.symbol(base)? {
            Symbol::Buffer {
                ty,
                owner_block_shape,
                ..
            } => RefInfo {
                name: base.to_string(),
                shape: ty.shape.clone(),
                owner_block_shape: owner_block_shape.clone(),
            },
            Symbol::Smem { ty, .. } => RefInfo {
                name: base.to_string(),
                shape: ty.shape.clone(),
                owner_block_shape: Vec::new(),
            },
            Symbol::Local { shape, .. } => RefInfo {
                name: base.to_string(),
                shape: shape.clone(),
                owner_block_shape: Vec::new(),
            },
            Symbol::Scalar { .. } => {
                return Err(cx.unsupported(format!("`{base}` is not a ref")));
            }
        };
        let id = self.refs.len() as u32;
        self.refs.push(info);
        self.ref_ids.insert(key, id);
        Ok(id)
    }

    /// An index or coordinate as a `u32` expression (i32 indices are
    /// reinterpreted, so negative ones fail the bounds check).
    fn index_expr(&mut self, cx: &UnitContext, e: &Expr) -> Result<Code, EmitError> {
        let v = self.expr(cx, e)?;
        Ok(match v.ty {
            ScalarType::U32 => v,
            _ => Code::new(format!("(u32)({})", v.text), ScalarType::U32, v.depth + 1),
        })
    }

    /// A `for` loop as written: the bound is evaluated once, and `<` keeps
    /// the increment from overflowing.
    fn emit_loop(
        &mut self,
        cx: &mut UnitContext,
        var: &mpmd_core::ir::Binding,
        start: &Expr,
        end: &Expr,
        body: &[Stmt],
        depth: usize,
    ) -> Result<(), EmitError> {
        let s = self.expr(cx, start)?.text;
        let e = self.expr(cx, end)?.text;
        let c_name = user_name('v', &var.name);
        // A generated name: a user `let k_end` beside `for k` must not see it.
        let end_name = self.temp('n');
        let ty = c_type(var.ty);
        self.line(depth, "{");
        self.line(depth + 1, &format!("const {ty} {end_name} = {e};"));
        self.line(
            depth + 1,
            &format!("for ({ty} {c_name} = {s}; {c_name} < {end_name}; {c_name}++) {{"),
        );
        cx.symbols
            .insert(var.name.clone(), Symbol::Scalar { c_name, ty: var.ty });
        self.emit_body(cx, body, depth + 2)?;
        self.line(depth + 1, "}");
        self.line(depth, "}");
        Ok(())
    }

    /// The trip count of a loop whose loads can all be issued before its
    /// stores: literal bounds, 2 to [`BATCH_MAX_TRIPS`] iterations, a body of
    /// `let`s and stores only, and no buffer both loaded and stored in it
    /// (by C name, so aliased operands count as one). Plain `ld.global` and
    /// `st.global` are never reordered by NVVM or ptxas (PTX carries no
    /// aliasing facts), so without this a thread fetches one element per
    /// memory round trip; mpmd knows distinct plan buffers never overlap.
    fn batchable(&self, cx: &UnitContext, start: &Expr, end: &Expr, body: &[Stmt]) -> Option<u32> {
        let bound = |e: &Expr| match e {
            Expr::Lit(Literal::U32(v)) => Some(*v as i64),
            Expr::Lit(Literal::I32(v)) => Some(*v as i64),
            _ => None,
        };
        let trips = bound(end)? - bound(start)?;
        if !(2..=BATCH_MAX_TRIPS as i64).contains(&trips) {
            return None;
        }
        let c_name = |name: &str| match cx.symbols.get(name) {
            Some(Symbol::Buffer { c_name, .. })
            | Some(Symbol::Smem { c_name, .. })
            | Some(Symbol::Local { c_name, .. }) => Some(c_name.clone()),
            _ => None,
        };
        let mut stored = BTreeSet::new();
        let mut loaded = BTreeSet::new();
        let mut simple = true;
        for stmt in body {
            match stmt {
                Stmt::Let { .. } => {}
                Stmt::Store { target, .. } => {
                    stored.insert(c_name(&target.base)?);
                }
                _ => simple = false,
            }
        }
        if !simple || stored.is_empty() {
            return None;
        }
        for stmt in body {
            let mut missing = false;
            for_each_expr(std::slice::from_ref(stmt), &mut |e| {
                if let Expr::Load(access) = e {
                    match c_name(&access.base) {
                        Some(name) => {
                            loaded.insert(name);
                        }
                        None => missing = true,
                    }
                }
            });
            if missing {
                return None;
            }
        }
        loaded.is_disjoint(&stored).then_some(trips as u32)
    }

    /// A [`batchable`](Self::batchable) loop as two unrolled loops: the first
    /// runs the `let`s and evaluates every store's address and value (all
    /// loads), the second does the stores in the original order.
    fn emit_batched_loop(
        &mut self,
        cx: &mut UnitContext,
        var: &mpmd_core::ir::Binding,
        start: &Expr,
        trips: u32,
        body: &[Stmt],
        depth: usize,
    ) -> Result<(), EmitError> {
        let s = self.expr(cx, start)?.text;
        let counter = self.temp('k');
        let c_name = user_name('v', &var.name);
        let ty = c_type(var.ty);
        self.line(depth, "{");
        self.line(
            depth + 1,
            "// Every load of the loop is issued before its first store (no buffer is both",
        );
        self.line(
            depth + 1,
            "// loaded and stored here, and plan buffers never overlap).",
        );
        let stores: Vec<(&RefAccess, &Expr)> = body
            .iter()
            .filter_map(|stmt| match stmt {
                Stmt::Store { target, value } => Some((target, value)),
                _ => None,
            })
            .collect();
        // Per store: its element type, pointer array and value array.
        let mut declared = Vec::new();
        for (target, _) in &stores {
            let elem = match cx.symbol(&target.base)? {
                Symbol::Buffer { ty, .. } | Symbol::Smem { ty, .. } => memory_type(ty.elem),
                Symbol::Local { elem, .. } => c_type(*elem),
                Symbol::Scalar { .. } => {
                    return Err(cx.unsupported(format!("`{}` is not a ref", target.base)))
                }
            };
            let (pointers, values) = (self.temp('p'), self.temp('x'));
            self.line(
                depth + 1,
                &format!("{elem}* {pointers}[{trips}]; {elem} {values}[{trips}];"),
            );
            declared.push((elem, pointers, values));
        }
        self.line(depth + 1, "#pragma unroll");
        self.line(
            depth + 1,
            &format!("for (u32 {counter} = 0u; {counter} < {trips}u; {counter}++) {{"),
        );
        self.line(
            depth + 2,
            &format!("const {ty} {c_name} = ({ty})({s} + ({ty}){counter});"),
        );
        cx.symbols
            .insert(var.name.clone(), Symbol::Scalar { c_name, ty: var.ty });
        let mut j = 0;
        for stmt in body {
            match stmt {
                Stmt::Store { target, value } => {
                    self.depth = depth + 2;
                    let place = self.place(cx, target, Access::Write)?;
                    let v = self.stored_value(cx, &place, value)?;
                    let (elem, pointers, values) = &declared[j];
                    self.line(depth + 2, &place.compute);
                    // A store outside the ref gets no pointer and is skipped.
                    self.line(
                        depth + 2,
                        &format!(
                            "{pointers}[{counter}] = ({}) ? ({elem}*)&{}[{}] : ({elem}*)0;",
                            place.ok, place.base, place.offset
                        ),
                    );
                    self.line(depth + 2, &format!("{values}[{counter}] = {v};"));
                    j += 1;
                }
                other => self.emit_stmt(cx, other, depth + 2)?,
            }
        }
        self.line(depth + 1, "}");
        self.line(depth + 1, "#pragma unroll");
        self.line(
            depth + 1,
            &format!("for (u32 {counter} = 0u; {counter} < {trips}u; {counter}++) {{"),
        );
        for (_, pointers, values) in &declared {
            self.line(
                depth + 2,
                &format!(
                    "if ({pointers}[{counter}] != 0) *{pointers}[{counter}] = {values}[{counter}];"
                ),
            );
        }
        self.line(depth + 1, "}");
        self.line(depth, "}");
        Ok(())
    }

    /// `value` as it is stored at `place` (bools are u32 words in memory).
    fn stored_value(
        &mut self,
        cx: &UnitContext,
        place: &Place,
        value: &Expr,
    ) -> Result<String, EmitError> {
        let v = self.expr(cx, value)?.text;
        Ok(if place.is_bool_in_memory {
            format!("(u32)({v})")
        } else {
            v
        })
    }

    fn place(
        &mut self,
        cx: &UnitContext,
        access: &RefAccess,
        kind: Access,
    ) -> Result<Place, EmitError> {
        let symbol = cx.symbol(&access.base)?.clone();
        let (base, elem, shape, owner_block_shape, in_memory_bool) = match &symbol {
            Symbol::Buffer {
                c_name,
                ty,
                owner_block_shape,
            } => (
                c_name.clone(),
                ty.elem,
                ty.shape.clone(),
                owner_block_shape.clone(),
                ty.elem == ScalarType::Bool,
            ),
            Symbol::Smem { c_name, ty } => {
                if access.block.is_some() {
                    return Err(cx.unsupported(format!(
                        "`{}@[...]`: the smem of another block cannot be reached",
                        access.base
                    )));
                }
                (
                    c_name.clone(),
                    ty.elem,
                    ty.shape.clone(),
                    Vec::new(),
                    ty.elem == ScalarType::Bool,
                )
            }
            Symbol::Local {
                c_name,
                elem,
                shape,
            } => (c_name.clone(), *elem, shape.clone(), Vec::new(), false),
            Symbol::Scalar { .. } => {
                return Err(cx.unsupported(format!(
                    "`{}` is not a ref and cannot be indexed",
                    access.base
                )))
            }
        };
        if access.index.len() != shape.len() {
            return Err(cx.unsupported(format!(
                "`{}` has {} dimension(s) but is indexed with {}",
                access.base,
                shape.len(),
                access.index.len()
            )));
        }
        let instance_len: u64 = shape.iter().map(|&d| d as u64).product();
        let owned = matches!(&symbol, Symbol::Buffer { ty, .. } if ty.owner.is_some());
        let mut depth = 0;
        let coords: Option<Vec<String>> = match &access.block {
            Some(c) => {
                if c.len() != owner_block_shape.len() {
                    return Err(cx.unsupported(format!(
                        "`{}@[...]` names {} coordinate(s); its owner has {} block axes",
                        access.base,
                        c.len(),
                        owner_block_shape.len()
                    )));
                }
                let mut texts = Vec::new();
                for e in c {
                    let code = self.index_expr(cx, e)?;
                    depth = depth.max(code.depth);
                    texts.push(code.text);
                }
                Some(texts)
            }
            None => None,
        };
        let mut index = Vec::new();
        for e in &access.index {
            let code = self.index_expr(cx, e)?;
            depth = depth.max(code.depth);
            index.push(code.text);
        }
        // Own instance of an owned buffer: this block's (the program runs on
        // the owner mesh; validation guarantees it).
        let own_instance = if owned { "(u64)mpmd_block" } else { "0ull" };
        // Loads compute their offset inline (`element`, `checked_call`);
        // writes bind it to a temporary first.
        let offset = match kind {
            Access::Write => self.temp('o'),
            Access::Read => String::new(),
        };
        match self.mode {
            Mode::Fast => {
                let instances: u64 = if owned {
                    owner_block_shape.iter().map(|&d| d as u64).product()
                } else {
                    1
                };
                let total_len = instance_len * instances;
                // 32-bit offsets when the whole buffer fits; 64-bit otherwise.
                let wide = total_len > u32::MAX as u64;
                let flat = flatten(&index, &shape, wide);
                let flat_offset = match (&coords, owned) {
                    (Some(c), _) => {
                        let instance = flatten(c, &owner_block_shape, wide);
                        combine(&instance, instance_len, &flat, wide)
                    }
                    (None, true) => {
                        let instance = if wide {
                            "(u64)mpmd_block".to_string()
                        } else {
                            "mpmd_block".to_string()
                        };
                        combine(&instance, instance_len, &flat, wide)
                    }
                    (None, false) => flat,
                };
                let (offset_type, suffix) = if wide { ("u64", "ull") } else { ("u32", "u") };
                // Writes (`ok` guards them) never leave their ref, although
                // fast mode leaves an out-of-bounds result undefined:
                // host-mapped outputs and, with unified addressing, every
                // page-locked host buffer are in the kernel's address space.
                // Loads (`element`) read in place.
                let limit = total_len.max(1);
                Ok(Place {
                    element: format!("{base}[{flat_offset}]"),
                    compute: format!("const {offset_type} {offset} = {flat_offset};"),
                    ok: format!("{offset} < {limit}{suffix}"),
                    bad: format!("{offset} >= {limit}{suffix}"),
                    offset,
                    checked_call: None,
                    base,
                    elem,
                    is_bool_in_memory: in_memory_bool,
                    depth: depth + 3,
                })
            }
            Mode::Checked => {
                let ref_id = self.ref_id(cx, &access.base)?;
                let coord_values = coords.clone().unwrap_or_default();
                let coord_sizes: Vec<String> = if coords.is_some() {
                    owner_block_shape.iter().map(|d| format!("{d}u")).collect()
                } else {
                    Vec::new()
                };
                let dims: Vec<String> = shape.iter().map(|d| format!("{d}u")).collect();
                let call = format!(
                    "mpmd_checked_offset(mpmd_ctl, {}u, mpmd_block, {ref_id}u, {}, {}, {}, {}, {own_instance}, {instance_len}ull)",
                    cx.unit.program,
                    idx_init(&coord_values),
                    idx_init(&coord_sizes),
                    idx_init(&index),
                    idx_init(&dims),
                );
                Ok(Place {
                    element: format!("{base}[{offset}]"),
                    compute: format!("const u64 {offset} = {call};"),
                    ok: format!("{offset} != MPMD_BAD_OFFSET"),
                    bad: format!("{offset} == MPMD_BAD_OFFSET"),
                    offset,
                    checked_call: Some(call),
                    base,
                    elem,
                    is_bool_in_memory: in_memory_bool,
                    depth: depth + 5,
                })
            }
        }
    }

    /// `code`, or a temporary holding it once it nests [`MAX_EXPR_DEPTH`]
    /// deep (emitted just before the statement being written).
    fn bounded(&mut self, code: Code) -> Code {
        if code.depth < MAX_EXPR_DEPTH {
            return code;
        }
        let name = self.temp('e');
        let depth = self.depth;
        self.line(
            depth,
            &format!("const {} {name} = {};", c_type(code.ty), code.text),
        );
        Code::new(name, code.ty, 1)
    }

    fn expr(&mut self, cx: &UnitContext, e: &Expr) -> Result<Code, EmitError> {
        let code = match e {
            Expr::Lit(l) => Code::new(literal(*l), l.ty(), 1),
            Expr::Var(name) => match cx.symbol(name)? {
                Symbol::Scalar { c_name, ty } => Code::new(c_name.clone(), *ty, 1),
                _ => return Err(cx.unsupported(format!("`{name}` is a ref, not a value"))),
            },
            Expr::AxisIndex(axis) => {
                if !cx.unit.axes.iter().any(|a| &a.axis == axis) {
                    return Err(cx.unsupported(format!(
                        "axis_index({axis}): `{axis}` is not an axis of mesh `{}`",
                        cx.unit.mesh.name
                    )));
                }
                Code::new(user_name('a', axis), ScalarType::U32, 1)
            }
            Expr::AxisSize(axis) => {
                let size = std::iter::once(&cx.unit.mesh)
                    .chain(self.plan.meshes.iter())
                    .find_map(|m| m.axis(axis))
                    .map(|a| a.size)
                    .ok_or_else(|| {
                        cx.unsupported(format!("axis_size({axis}): no mesh has axis `{axis}`"))
                    })?;
                Code::new(format!("{size}u"), ScalarType::U32, 1)
            }
            Expr::Load(access) => self.load(cx, access)?,
            Expr::Unary(op, a) => {
                let v = self.expr(cx, a)?;
                let text = match (op, v.ty) {
                    (UnaryOp::Neg, ScalarType::I32) => format!("mpmd_neg_i32({})", v.text),
                    (UnaryOp::Neg, ScalarType::U32) => format!("(0u - {})", v.text),
                    // The sign bit flips (exact; NaN stays NaN).
                    (UnaryOp::Neg, t) if t.is_16bit() => {
                        format!(
                            "mpmd_neg_{}({})",
                            sixteen_bit_suffix(t).unwrap_or(""),
                            v.text
                        )
                    }
                    (UnaryOp::Neg, _) => format!("(-{})", v.text),
                    (UnaryOp::Not, _) => format!("(!{})", v.text),
                    (UnaryOp::BitNot, _) => format!("(~{})", v.text),
                };
                Code::new(text, v.ty, v.depth + 1)
            }
            Expr::Binary(..) => {
                // Operator chains nest to the left as deep as they are long
                // (`a + b + c + ...`): walk the spine with a loop, not
                // recursion, so that no chain length can exhaust the stack.
                let mut spine = Vec::new();
                let mut node = e;
                while let Expr::Binary(op, a, b) = node {
                    spine.push((*op, b.as_ref()));
                    node = a;
                }
                let mut acc = self.expr(cx, node)?;
                for (op, b) in spine.into_iter().rev() {
                    acc = self.binary_step(cx, op, acc, b)?;
                }
                return Ok(acc);
            }
            Expr::Select(c, a, b) => {
                let c = self.expr(cx, c)?;
                let a = self.expr(cx, a)?;
                let b = self.expr(cx, b)?;
                let depth = c.depth.max(a.depth).max(b.depth) + 1;
                // Both operands are evaluated (DESIGN.md): in checked mode a
                // call, so that an out-of-bounds load in either is reported.
                let text = match self.mode {
                    Mode::Fast => format!("({} ? {} : {})", c.text, a.text, b.text),
                    Mode::Checked => format!("mpmd_select({}, {}, {})", c.text, a.text, b.text),
                };
                Code::new(text, a.ty, depth)
            }
            Expr::Cast(to, a) => {
                let v = self.expr(cx, a)?;
                let extra = widening_depth(v.ty) + widening_depth(*to);
                Code::new(cast(v.ty, *to, &v.text), *to, v.depth + 2 + extra)
            }
            Expr::Bitcast(to, a) => {
                let v = self.expr(cx, a)?;
                let text = match (v.ty, to) {
                    (f, t) if f == *t => v.text.clone(),
                    (ScalarType::F32, ScalarType::I32) => format!("__float_as_int({})", v.text),
                    (ScalarType::F32, ScalarType::U32) => format!("__float_as_uint({})", v.text),
                    (ScalarType::I32, ScalarType::F32) => format!("__int_as_float({})", v.text),
                    (ScalarType::U32, ScalarType::F32) => format!("__uint_as_float({})", v.text),
                    (ScalarType::I32, ScalarType::U32) => format!("((u32)({}))", v.text),
                    (ScalarType::U32, ScalarType::I32) => format!("((int)({}))", v.text),
                    // 16 bits ↔ the low half of a word (the high half zero
                    // when widening, dropped when narrowing); f16 ↔ bf16 keep
                    // the 16 bits.
                    (f, ScalarType::U32) if f.is_16bit() => format!("((u32)({}).bits)", v.text),
                    (f, ScalarType::I32) if f.is_16bit() => {
                        format!("((int)(u32)({}).bits)", v.text)
                    }
                    (f, t) if f.is_16bit() && t.is_16bit() => {
                        from_low_half(*t, &format!("({}).bits", v.text))
                    }
                    (ScalarType::I32 | ScalarType::U32, t) if t.is_16bit() => {
                        from_low_half(*t, &format!("(u32)({})", v.text))
                    }
                    (f, t) => return Err(cx.unsupported(format!("bitcast from {f} to {t}"))),
                };
                Code::new(text, *to, v.depth + 2)
            }
            Expr::Math(f, args) => {
                if args.len() != f.arity() {
                    return Err(cx.unsupported(format!(
                        "`{}` takes {} argument(s), found {}",
                        f.name(),
                        f.arity(),
                        args.len()
                    )));
                }
                let values = args
                    .iter()
                    .map(|a| self.expr(cx, a))
                    .collect::<Result<Vec<_>, _>>()?;
                let t = values[0].ty;
                let depth =
                    values.iter().map(|v| v.depth).max().unwrap_or(0) + 1 + 2 * widening_depth(t);
                let texts: Vec<String> = values.into_iter().map(|v| v.text).collect();
                let text = math(*f, t, &texts).ok_or_else(|| {
                    cx.unsupported(format!("`{}` is not defined for {t}", f.name()))
                })?;
                Code::new(text, t, depth)
            }
        };
        Ok(self.bounded(code))
    }

    /// `x op b`. The right operand of `&&` and `||` is evaluated only when
    /// the left does not decide, as in C: when it needs statements of its
    /// own (temporaries), they run under an `if` on the left's value.
    fn binary_step(
        &mut self,
        cx: &UnitContext,
        op: BinaryOp,
        x: Code,
        b: &Expr,
    ) -> Result<Code, EmitError> {
        let lazy = matches!(op, BinaryOp::LogicAnd | BinaryOp::LogicOr);
        let mark = self.out.len();
        let y = self.expr(cx, b)?;
        let ty = if op.is_comparison() {
            ScalarType::Bool
        } else {
            x.ty
        };
        if lazy && self.out.len() > mark {
            let right_statements = self.out.split_off(mark);
            let name = self.temp('e');
            let depth = self.depth;
            self.line(depth, &format!("bool {name} = {};", x.text));
            let decided = match op {
                BinaryOp::LogicAnd => format!("if ({name}) {{"),
                _ => format!("if (!{name}) {{"),
            };
            self.line(depth, &decided);
            for line in right_statements.lines() {
                self.out.push_str("  ");
                self.out.push_str(line);
                self.out.push('\n');
            }
            self.line(depth + 1, &format!("{name} = {};", y.text));
            self.line(depth, "}");
            return Ok(Code::new(name, ScalarType::Bool, 1));
        }
        let depth = x.depth.max(y.depth) + 1 + 2 * widening_depth(x.ty);
        let code = Code::new(binary(op, x.ty, &x.text, &y.text), ty, depth);
        Ok(self.bounded(code))
    }

    fn load(&mut self, cx: &UnitContext, access: &RefAccess) -> Result<Code, EmitError> {
        let place = self.place(cx, access, Access::Read)?;
        // Checked: the offset comes from an inline call, so that the check
        // stays lazy inside `&&` and `||`.
        let raw = match &place.checked_call {
            None => place.element.clone(),
            Some(call) => format!("mpmd_load({}, {call})", place.base),
        };
        let text = if place.is_bool_in_memory {
            format!("({raw} != 0u)")
        } else {
            raw
        };
        Ok(Code::new(text, place.elem, place.depth + 1))
    }
}

/// Whether an access reads or writes (what fast mode guards).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

fn idx_init(values: &[String]) -> String {
    if values.is_empty() {
        return "mpmd_idx{0u, {}}".to_string();
    }
    let shown: Vec<&str> = values.iter().take(8).map(String::as_str).collect();
    format!("mpmd_idx{{{}u, {{{}}}}}", shown.len(), shown.join(", "))
}

/// Row-major flat index of `index` into `dims`.
fn flatten(index: &[String], dims: &[u32], wide: bool) -> String {
    let mut acc = String::new();
    for (k, i) in index.iter().enumerate() {
        let term = if wide {
            format!("(u64)({i})")
        } else {
            i.clone()
        };
        if k == 0 {
            acc = term;
        } else {
            let d = dims[k];
            let suffix = if wide { "ull" } else { "u" };
            acc = format!("({acc}) * {d}{suffix} + {term}");
        }
    }
    if acc.is_empty() {
        "0u".to_string()
    } else {
        acc
    }
}

fn combine(instance: &str, instance_len: u64, flat: &str, wide: bool) -> String {
    let suffix = if wide { "ull" } else { "u" };
    format!("({instance}) * {instance_len}{suffix} + {flat}")
}

fn binary(op: BinaryOp, t: ScalarType, x: &str, y: &str) -> String {
    use BinaryOp::*;
    use ScalarType::*;
    if t.is_16bit() {
        // On the exact f32 values; arithmetic rounds once to the type,
        // comparisons need no rounding.
        let (x, y) = (widen(t, x), widen(t, y));
        return match op {
            Rem => round_to(t, &format!("fmodf({x}, {y})")),
            Add | Sub | Mul | Div => round_to(t, &binary(op, F32, &x, &y)),
            _ => binary(op, F32, &x, &y),
        };
    }
    let infix = |sym: &str| format!("({x} {sym} {y})");
    match (op, t) {
        (Add, I32) => format!("mpmd_add_i32({x}, {y})"),
        (Sub, I32) => format!("mpmd_sub_i32({x}, {y})"),
        (Mul, I32) => format!("mpmd_mul_i32({x}, {y})"),
        (Div, I32) => format!("mpmd_div_i32({x}, {y})"),
        (Rem, I32) => format!("mpmd_rem_i32({x}, {y})"),
        (Div, U32) => format!("mpmd_div_u32({x}, {y})"),
        (Rem, U32) => format!("mpmd_rem_u32({x}, {y})"),
        (Rem, _) => format!("fmodf({x}, {y})"),
        (Shl, I32) => format!("mpmd_shl_i32({x}, {y})"),
        (Shr, I32) => format!("mpmd_shr_i32({x}, {y})"),
        (Shl, _) => format!("mpmd_shl_u32({x}, {y})"),
        (Shr, _) => format!("mpmd_shr_u32({x}, {y})"),
        (Add, _) => infix("+"),
        (Sub, _) => infix("-"),
        (Mul, _) => infix("*"),
        (Div, _) => infix("/"),
        (BitAnd, _) => infix("&"),
        (BitOr, _) => infix("|"),
        (BitXor, _) => infix("^"),
        (LogicAnd, _) => infix("&&"),
        (LogicOr, _) => infix("||"),
        (Eq, _) => infix("=="),
        (Ne, _) => infix("!="),
        (Lt, _) => infix("<"),
        (Le, _) => infix("<="),
        (Gt, _) => infix(">"),
        (Ge, _) => infix(">="),
    }
}

fn cast(from: ScalarType, to: ScalarType, v: &str) -> String {
    use ScalarType::*;
    match (from, to) {
        (f, t) if f == t => v.to_string(),
        // Integers round once: to an f32 rounded to odd (exact below 2^24),
        // then to the type (numerics::from_integer).
        (I32, t) if t.is_16bit() => round_to(t, &format!("mpmd_i32_to_f32_odd({v})")),
        (U32, t) if t.is_16bit() => round_to(t, &format!("mpmd_u32_to_f32_odd({v})")),
        (Bool, t) if t.is_16bit() => {
            let one = if t == F16 { "0x3c00u" } else { "0x3f80u" };
            format!(
                "(({v}) ? {} : {})",
                from_low_half(t, one),
                from_low_half(t, "0u")
            )
        }
        (f, Bool) if f.is_16bit() => format!("({} != 0.0f)", widen(f, v)),
        // Everything else goes through the exact f32 value: f32's own rules
        // (to integers: truncate, saturate, NaN to 0), then one rounding.
        (f, t) if f.is_16bit() || t.is_16bit() => {
            let wide = widen(f, v);
            if t.is_16bit() {
                round_to(t, &wide)
            } else {
                cast(F32, t, &wide)
            }
        }
        (F32, I32) => format!("mpmd_f32_to_i32({v})"),
        (F32, U32) => format!("mpmd_f32_to_u32({v})"),
        (I32, F32) => format!("__int2float_rn({v})"),
        (U32, F32) => format!("__uint2float_rn({v})"),
        (I32, U32) => format!("((u32)({v}))"),
        (U32, I32) => format!("((int)({v}))"),
        (Bool, F32) => format!("({v} ? 1.0f : 0.0f)"),
        (Bool, I32) => format!("((int)({v}))"),
        (Bool, U32) => format!("((u32)({v}))"),
        (F32, Bool) => format!("({v} != 0.0f)"),
        (_, Bool) => format!("({v} != 0)"),
        (_, _) => v.to_string(),
    }
}

fn math(f: MathFn, t: ScalarType, v: &[String]) -> Option<String> {
    use ScalarType::*;
    if let Some(suffix) = sixteen_bit_suffix(t) {
        let call = |name: &str| format!("mpmd_{name}_{suffix}({})", v.join(", "));
        return Some(match f {
            // Exact on the bits; fma rounds once; min and max return the
            // operand that is not NaN.
            MathFn::Abs => call("abs"),
            MathFn::Fma => call("fma"),
            MathFn::Min => call("min"),
            MathFn::Max => call("max"),
            // The f32 function of the exact values, rounded once: exact for
            // floor and ceil, correctly rounded for sqrt.
            _ => {
                let wide: Vec<String> = v.iter().map(|x| widen(t, x)).collect();
                round_to(t, &math(f, F32, &wide)?)
            }
        });
    }
    let call = |name: &str| format!("{name}({})", v.join(", "));
    Some(match (f, t) {
        (MathFn::Exp, F32) => call("expf"),
        (MathFn::Log, F32) => call("logf"),
        (MathFn::Sqrt, F32) => call("sqrtf"),
        (MathFn::Rsqrt, F32) => call("rsqrtf"),
        (MathFn::Sin, F32) => call("sinf"),
        (MathFn::Cos, F32) => call("cosf"),
        (MathFn::Tanh, F32) => call("tanhf"),
        (MathFn::Floor, F32) => call("floorf"),
        (MathFn::Ceil, F32) => call("ceilf"),
        (MathFn::Fma, F32) => call("fmaf"),
        (MathFn::Pow, F32) => call("powf"),
        (MathFn::Abs, F32) => call("fabsf"),
        (MathFn::Abs, I32) => call("mpmd_abs_i32"),
        (MathFn::Abs, U32) => v[0].clone(),
        // The other operand when one is NaN, signalling NaNs included.
        (MathFn::Min, F32) => call("mpmd_min_f32"),
        (MathFn::Max, F32) => call("mpmd_max_f32"),
        (MathFn::Min, I32) => call("mpmd_min_i32"),
        (MathFn::Max, I32) => call("mpmd_max_i32"),
        (MathFn::Min, U32) => call("mpmd_min_u32"),
        (MathFn::Max, U32) => call("mpmd_max_u32"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_literals_are_exact() {
        assert_eq!(f32_literal(1.0f32.to_bits()), "1.0f");
        assert_eq!(f32_literal((-2.5f32).to_bits()), "(-2.5f)");
        assert_eq!(f32_literal((-0.0f32).to_bits()), "(-0.0f)");
        assert_eq!(
            f32_literal(0.1f32.to_bits()),
            "__uint_as_float(0x3dcccccdu)"
        );
        assert_eq!(
            f32_literal(f32::INFINITY.to_bits()),
            "__uint_as_float(0x7f800000u)"
        );
        assert_eq!(f32_literal(0x7fc0_0001), "__uint_as_float(0x7fc00001u)");
    }

    #[test]
    fn integer_literals() {
        assert_eq!(literal(Literal::I32(i32::MIN)), "(-2147483647 - 1)");
        assert_eq!(literal(Literal::I32(-7)), "(-7)");
        assert_eq!(literal(Literal::U32(7)), "7u");
        assert_eq!(literal(Literal::Bool(true)), "true");
    }

    #[test]
    fn names_are_prefixed() {
        assert_eq!(user_name('v', "int"), "v_int");
        assert_eq!(names::kernel("idx"), "m_idx");
        // Not an identifier: hex, in a form no identifier takes.
        assert_eq!(user_name('v', "my map"), "v0_6d79206d6170");
    }

    /// Identifiers of `text` (maximal runs of `[A-Za-z0-9_]` not starting
    /// with a digit).
    fn identifiers(text: &str) -> BTreeSet<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.chars().next().is_some_and(|c| !c.is_ascii_digit()))
            .map(str::to_string)
            .collect()
    }

    /// Generated temporaries are exactly `mpmd_<letter><digits>`; nothing else the
    /// generated module declares may take that form, and every identifier
    /// the prelude declares is generated (`mpmd_`/`MPMD_`) or CUDA's.
    #[test]
    fn prelude_names_are_outside_the_temporaries_and_user_names() {
        let temporary = |name: &str| {
            let rest = name.strip_prefix("mpmd_").unwrap_or("");
            let mut chars = rest.chars();
            chars.next().is_some_and(|c| c.is_ascii_lowercase())
                && rest.len() > 1
                && chars.all(|c| c.is_ascii_digit())
        };
        let user = |name: &str| {
            let bytes = name.as_bytes();
            bytes.len() >= 2
                && ((names::USER_KINDS.contains(bytes[0] as char)
                    && matches!(bytes[1], b'_' | b'0'))
                    || (bytes[0] == b'b' && bytes[1].is_ascii_digit()))
        };
        let plan = {
            let (module, _) = mpmd_core::text::parse(
                "mesh m { grid [b = 2]; threads t = 64; }
                 kernel k(x: gmem<f32[128]>, y: gmem<f32[128]>, s: sem<[1]>) { wait(s[0], 1); y[axis_index(t)] = x[axis_index(t)]; signal(s[0], 1); }
                 map q { programs [m: k]; inputs [x: gmem<f32[128]>]; outputs [y: gmem<f32[128]>]; scratch [s: sem<[1]>]; }",
            )
            .unwrap();
            mpmd_core::plan::lower(&module, "q").unwrap()
        };
        let mut skeleton = String::new();
        for schedule in [
            BlockSchedule::Tickets,
            BlockSchedule::ResidentWalk,
            BlockSchedule::BlockIndex,
        ] {
            for mode in [Mode::Fast, Mode::Checked] {
                skeleton.push_str(&emit_module_with(&plan, mode, schedule).unwrap().source);
            }
        }
        for name in identifiers(PRELUDE).union(&identifiers(&skeleton)) {
            let generated = name.starts_with("mpmd_") || name.starts_with("MPMD_");
            if generated {
                assert!(
                    !temporary(name) || !PRELUDE.contains(name.as_str()),
                    "prelude name `{name}` has the form of a temporary"
                );
            } else if PRELUDE.contains(&format!(" {name}("))
                || PRELUDE.contains(&format!(" {name} "))
            {
                // A CUDA or C++ name the prelude uses: never a user name.
                assert!(!user(name), "`{name}` has the form of a user name");
            }
        }
    }

    #[test]
    fn flatten_row_major() {
        let idx = vec!["i".to_string(), "j".to_string()];
        assert_eq!(flatten(&idx, &[4, 256], false), "(i) * 256u + j");
        assert_eq!(
            flatten(&idx, &[4, 256], true),
            "((u64)(i)) * 256ull + (u64)(j)"
        );
    }
}
