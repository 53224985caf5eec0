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
    type_of, AtomicOp, BinaryOp, Expr, Literal, MathFn, MemorySpace, RefAccess, RefType,
    ScalarType, Scope, SemOp, Stmt, Type, UnaryOp,
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

/// A C identifier for a user name (`[A-Za-z_][A-Za-z0-9_]*`), with a prefix
/// so that it never collides with CUDA or prelude names.
pub fn sanitize(prefix: &str, name: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + name.len());
    out.push_str(prefix);
    for c in name.chars() {
        out.push(if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        });
    }
    out
}

fn c_type(t: ScalarType) -> &'static str {
    match t {
        ScalarType::F32 => "float",
        ScalarType::I32 => "int",
        ScalarType::U32 => "u32",
        ScalarType::Bool => "bool",
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
    /// Counter for the names of checked-offset temporaries.
    next_offset: u32,
    /// Counter for the names of batched loops' temporaries.
    next_batch: u32,
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

/// Generates the module with the given block schedule.
pub fn emit_module_with(
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
    let kernel_name = sanitize("mpmd_", &plan.map.name);
    let written = written_buffers(plan);

    let mut e = Emitter {
        plan,
        mode,
        out: String::new(),
        refs: Vec::new(),
        ref_ids: HashMap::new(),
        next_offset: 0,
        next_batch: 0,
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
            let ty = if t == ScalarType::Bool {
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
    sanitize(&format!("mpmd_b{index}_"), first)
}

fn scalar_c_name(operand: &str) -> String {
    sanitize("p_", operand)
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
        Stmt::For { body, .. } => has_wait(body),
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

    /// The type of `e`, by the IR's one typing rule over the names in scope.
    fn scalar_type(&self, e: &Expr) -> Result<ScalarType, EmitError> {
        let mut scope = Scope::new();
        for (name, symbol) in &self.symbols {
            match symbol {
                Symbol::Scalar { ty, .. } => scope.bind_scalar(name, *ty),
                Symbol::Buffer { ty, .. } | Symbol::Smem { ty, .. } => {
                    scope.bind_ref(name, ty.clone())
                }
                Symbol::Local { elem, shape, .. } => scope.bind_ref(
                    name,
                    RefType {
                        space: MemorySpace::Local,
                        elem: *elem,
                        shape: shape.clone(),
                        owner: None,
                    },
                ),
            }
        }
        type_of(e, &scope).map_err(|err| self.unsupported(err.to_string()))
    }
}

/// A resolved memory access.
struct Place {
    /// C pointer expression of the element (`&p[o]`) or the offset variable
    /// name in checked mode.
    pointer: String,
    /// `p[o]` in fast mode.
    element: String,
    /// Checked mode: the statement that computes `offset_var`, and its name.
    checked: Option<(String, String)>,
    base: String,
    elem: ScalarType,
    is_bool_in_memory: bool,
}

impl Emitter<'_> {
    fn emit_unit(&mut self, unit: &LaunchUnit) -> Result<(), EmitError> {
        let mut cx = UnitContext {
            unit,
            symbols: HashMap::new(),
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
                            let c_name = sanitize("s_", &param.name);
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
                sanitize("a_", &axis.axis),
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
        match stmt {
            Stmt::Let { var, value } => {
                let v = self.expr(cx, value)?;
                let c_name = sanitize("v_", &var.name);
                self.line(depth, &format!("const {} {c_name} = {v};", c_type(var.ty)));
                cx.symbols
                    .insert(var.name.clone(), Symbol::Scalar { c_name, ty: var.ty });
            }
            Stmt::Var { var, init } => {
                let v = self.expr(cx, init)?;
                let c_name = sanitize("v_", &var.name);
                self.line(depth, &format!("{} {c_name} = {v};", c_type(var.ty)));
                cx.symbols
                    .insert(var.name.clone(), Symbol::Scalar { c_name, ty: var.ty });
            }
            Stmt::Assign { name, value } => {
                let v = self.expr(cx, value)?;
                let c_name = match cx.symbol(name)? {
                    Symbol::Scalar { c_name, .. } => c_name.clone(),
                    _ => return Err(cx.unsupported(format!("cannot assign to ref `{name}`"))),
                };
                self.line(depth, &format!("{c_name} = {v};"));
            }
            Stmt::LocalArray { name, elem, shape } => {
                let c_name = sanitize("l_", name);
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
                let place = self.place(cx, target)?;
                let v = self.stored_value(cx, &place, value)?;
                match &place.checked {
                    None => self.line(depth, &format!("{} = {v};", place.element)),
                    Some((compute, offset)) => {
                        self.line(depth, "{");
                        self.line(depth + 1, compute);
                        self.line(
                            depth + 1,
                            &format!(
                                "if ({offset} != MPMD_BAD_OFFSET) {}[{offset}] = {v};",
                                place.base
                            ),
                        );
                        self.line(depth, "}");
                    }
                }
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
                self.line(depth, &format!("if ({c}) {{"));
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
            Stmt::Barrier => self.line(depth, &self.unit_sync.barrier()),
            Stmt::Sem { op, sem, amount } => self.emit_sem(cx, *op, sem, amount, depth)?,
            Stmt::SemRead { dest, sem } => {
                let place = self.place(cx, sem)?;
                let c_name = sanitize("v_", dest);
                // Thread 0 reads and shares the value, so that it is
                // block-uniform. The first barrier keeps the slot from being
                // overwritten before every thread has read an earlier value.
                self.line(depth, &self.unit_sync.barrier());
                self.line(depth, "if (threadIdx.x == 0u) {");
                match &place.checked {
                    None => self.line(
                        depth + 1,
                        &format!("mpmd_value = mpmd_sem_read({});", place.pointer),
                    ),
                    Some((compute, offset)) => {
                        self.line(depth + 1, compute);
                        self.line(
                            depth + 1,
                            &format!(
                                "mpmd_value = {offset} == MPMD_BAD_OFFSET ? 0 : mpmd_sem_read(&{}[{offset}]);",
                                place.base
                            ),
                        );
                    }
                }
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
        let place = self.place(cx, target)?;
        if !place.elem.is_integer() {
            return Err(cx.unsupported(format!(
                "{} on `{}` of type {}: atomics need i32 or u32",
                op.name(),
                target.base,
                place.elem
            )));
        }
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
            .map(|a| self.expr(cx, a))
            .collect::<Result<Vec<_>, _>>()?;
        let ty = c_type(place.elem);
        let (pointer, prefix) = match &place.checked {
            None => (place.pointer.clone(), None),
            Some((compute, offset)) => (
                format!("&{}[{offset}]", place.base),
                Some((compute.clone(), offset.clone())),
            ),
        };
        let call = match op {
            AtomicOp::Load => format!("mpmd_atomic_load({pointer})"),
            AtomicOp::Store => format!("mpmd_atomic_store({pointer}, ({ty})({}))", values[0]),
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
        let dest_name = dest.map(|d| (sanitize("v_", &d.name), d));
        match (prefix, &dest_name) {
            (None, Some((c_name, d))) if op.returns_value() => {
                self.line(depth, &format!("const {} {c_name} = {call};", c_type(d.ty)));
            }
            (None, _) => self.line(depth, &format!("{call};")),
            (Some((compute, offset)), dest_name) => {
                if let Some((c_name, d)) = dest_name {
                    self.line(depth, &format!("{} {c_name} = 0;", c_type(d.ty)));
                }
                self.line(depth, "{");
                self.line(depth + 1, &compute);
                match dest_name {
                    Some((c_name, _)) if op.returns_value() => self.line(
                        depth + 1,
                        &format!("if ({offset} != MPMD_BAD_OFFSET) {c_name} = {call};"),
                    ),
                    _ => self.line(
                        depth + 1,
                        &format!("if ({offset} != MPMD_BAD_OFFSET) {call};"),
                    ),
                }
                self.line(depth, "}");
            }
        }
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
        let place = self.place(cx, sem)?;
        let n = self.expr(cx, amount)?;
        let (compute, pointer, guard) = match &place.checked {
            None => (None, place.pointer.clone(), String::new()),
            Some((compute, offset)) => (
                Some(compute.clone()),
                format!("&{}[{offset}]", place.base),
                format!("{offset} != MPMD_BAD_OFFSET && "),
            ),
        };
        match op {
            SemOp::Signal => {
                self.line(depth, &format!("// signal({}, ...)", sem.base));
                self.line(depth, &self.unit_sync.barrier());
                self.line(depth, "if (threadIdx.x == 0u) {");
                if let Some(c) = &compute {
                    self.line(depth + 1, c);
                }
                let call = format!("mpmd_sem_signal({pointer}, {n});");
                if guard.is_empty() {
                    self.line(depth + 1, &call);
                } else {
                    let condition = guard.trim_end_matches(" && ");
                    self.line(depth + 1, &format!("if ({condition}) {call}"));
                }
                self.line(depth, "}");
            }
            SemOp::Wait | SemOp::WaitNodec => {
                let how = match op {
                    SemOp::WaitNodec => "MPMD_WAIT_NODEC",
                    _ if self.is_read_semaphore(cx, &sem.base) => "MPMD_WAIT_EXACT",
                    _ => "MPMD_WAIT_OPTIMISTIC",
                };
                let (ref_id, coords, index) = self.site_values(cx, sem)?;
                self.line(depth, &format!("// {}({}, ...)", op.name(), sem.base));
                self.line(depth, "if (threadIdx.x == 0u) {");
                if let Some(c) = &compute {
                    self.line(depth + 1, c);
                }
                let failed = if guard.is_empty() {
                    String::new()
                } else {
                    format!(
                        "{} == MPMD_BAD_OFFSET || ",
                        guard.trim_end_matches(" != MPMD_BAD_OFFSET && ")
                    )
                };
                self.line(
                    depth + 1,
                    &format!(
                        "if ({failed}!mpmd_sem_wait({pointer}, {n}, {how}, mpmd_ctl, mpmd_wait_timeout_ns, {}u, mpmd_block, {ref_id}u, {coords}, {index})) mpmd_stop = 1u;",
                        cx.unit.program
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
                .map(|e| self.index_expr(cx, e))
                .collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let index = access
            .index
            .iter()
            .map(|e| self.index_expr(cx, e))
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
    fn index_expr(&mut self, cx: &UnitContext, e: &Expr) -> Result<String, EmitError> {
        let v = self.expr(cx, e)?;
        Ok(match cx.scalar_type(e)? {
            ScalarType::U32 => v,
            _ => format!("(u32)({v})"),
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
        let s = self.expr(cx, start)?;
        let e = self.expr(cx, end)?;
        let c_name = sanitize("v_", &var.name);
        let ty = c_type(var.ty);
        self.line(depth, "{");
        self.line(depth + 1, &format!("const {ty} {c_name}_end = {e};"));
        self.line(
            depth + 1,
            &format!("for ({ty} {c_name} = {s}; {c_name} < {c_name}_end; {c_name}++) {{"),
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
        self.next_batch += 1;
        let id = self.next_batch;
        let s = self.expr(cx, start)?;
        let c_name = sanitize("v_", &var.name);
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
        let mut declared = Vec::new();
        for (j, (target, _)) in stores.iter().enumerate() {
            let elem = match cx.symbol(&target.base)? {
                Symbol::Buffer { ty, .. } | Symbol::Smem { ty, .. } => memory_type(ty.elem),
                Symbol::Local { elem, .. } => c_type(*elem),
                Symbol::Scalar { .. } => {
                    return Err(cx.unsupported(format!("`{}` is not a ref", target.base)))
                }
            };
            self.line(
                depth + 1,
                &format!("{elem}* mpmd_p{id}_{j}[{trips}]; {elem} mpmd_x{id}_{j}[{trips}];"),
            );
            declared.push(elem);
        }
        self.line(depth + 1, "#pragma unroll");
        self.line(
            depth + 1,
            &format!("for (u32 mpmd_k{id} = 0u; mpmd_k{id} < {trips}u; mpmd_k{id}++) {{"),
        );
        self.line(
            depth + 2,
            &format!("const {ty} {c_name} = ({ty})({s} + ({ty})mpmd_k{id});"),
        );
        cx.symbols
            .insert(var.name.clone(), Symbol::Scalar { c_name, ty: var.ty });
        let mut j = 0;
        for stmt in body {
            match stmt {
                Stmt::Store { target, value } => {
                    let place = self.place(cx, target)?;
                    let v = self.stored_value(cx, &place, value)?;
                    let (elem, pointer) = (declared[j], place.pointer);
                    self.line(
                        depth + 2,
                        &format!("mpmd_p{id}_{j}[mpmd_k{id}] = ({elem}*){pointer};"),
                    );
                    self.line(depth + 2, &format!("mpmd_x{id}_{j}[mpmd_k{id}] = {v};"));
                    j += 1;
                }
                other => self.emit_stmt(cx, other, depth + 2)?,
            }
        }
        self.line(depth + 1, "}");
        self.line(depth + 1, "#pragma unroll");
        self.line(
            depth + 1,
            &format!("for (u32 mpmd_k{id} = 0u; mpmd_k{id} < {trips}u; mpmd_k{id}++) {{"),
        );
        for j in 0..stores.len() {
            self.line(
                depth + 2,
                &format!("*mpmd_p{id}_{j}[mpmd_k{id}] = mpmd_x{id}_{j}[mpmd_k{id}];"),
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
        let v = self.expr(cx, value)?;
        Ok(if place.is_bool_in_memory {
            format!("(u32)({v})")
        } else {
            v
        })
    }

    fn place(&mut self, cx: &UnitContext, access: &RefAccess) -> Result<Place, EmitError> {
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
                Some(
                    c.iter()
                        .map(|e| self.index_expr(cx, e))
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
            None => None,
        };
        let index = access
            .index
            .iter()
            .map(|e| self.index_expr(cx, e))
            .collect::<Result<Vec<_>, _>>()?;
        // Own instance of an owned buffer: this block's (the program runs on
        // the owner mesh; validation guarantees it).
        let own_instance = if owned { "(u64)mpmd_block" } else { "0ull" };
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
                let offset = match (&coords, owned) {
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
                Ok(Place {
                    pointer: format!("&{base}[{offset}]"),
                    element: format!("{base}[{offset}]"),
                    checked: None,
                    base,
                    elem,
                    is_bool_in_memory: in_memory_bool,
                })
            }
            Mode::Checked => {
                let ref_id = self.ref_id(cx, &access.base)?;
                self.next_offset += 1;
                let offset_var = format!("mpmd_o{}", self.next_offset);
                let coord_values = coords.clone().unwrap_or_default();
                let coord_sizes: Vec<String> = if coords.is_some() {
                    owner_block_shape.iter().map(|d| format!("{d}u")).collect()
                } else {
                    Vec::new()
                };
                let dims: Vec<String> = shape.iter().map(|d| format!("{d}u")).collect();
                let compute = format!(
                    "const u64 {offset_var} = mpmd_checked_offset(mpmd_ctl, {}u, mpmd_block, {ref_id}u, {}, {}, {}, {}, {own_instance}, {instance_len}ull);",
                    cx.unit.program,
                    idx_init(&coord_values),
                    idx_init(&coord_sizes),
                    idx_init(&index),
                    idx_init(&dims),
                );
                Ok(Place {
                    pointer: format!("&{base}[{offset_var}]"),
                    element: format!("{base}[{offset_var}]"),
                    checked: Some((compute, offset_var)),
                    base,
                    elem,
                    is_bool_in_memory: in_memory_bool,
                })
            }
        }
    }

    fn expr(&mut self, cx: &UnitContext, e: &Expr) -> Result<String, EmitError> {
        Ok(match e {
            Expr::Lit(l) => literal(*l),
            Expr::Var(name) => match cx.symbol(name)? {
                Symbol::Scalar { c_name, .. } => c_name.clone(),
                _ => return Err(cx.unsupported(format!("`{name}` is a ref, not a value"))),
            },
            Expr::AxisIndex(axis) => {
                if !cx.unit.axes.iter().any(|a| &a.axis == axis) {
                    return Err(cx.unsupported(format!(
                        "axis_index({axis}): `{axis}` is not an axis of mesh `{}`",
                        cx.unit.mesh.name
                    )));
                }
                sanitize("a_", axis)
            }
            Expr::AxisSize(axis) => {
                let size = std::iter::once(&cx.unit.mesh)
                    .chain(self.plan.meshes.iter())
                    .find_map(|m| m.axis(axis))
                    .map(|a| a.size)
                    .ok_or_else(|| {
                        cx.unsupported(format!("axis_size({axis}): no mesh has axis `{axis}`"))
                    })?;
                format!("{size}u")
            }
            Expr::Load(access) => self.load(cx, access)?,
            Expr::Unary(op, a) => {
                let t = cx.scalar_type(a)?;
                let v = self.expr(cx, a)?;
                match (op, t) {
                    (UnaryOp::Neg, ScalarType::I32) => format!("mpmd_neg_i32({v})"),
                    (UnaryOp::Neg, ScalarType::U32) => format!("(0u - {v})"),
                    (UnaryOp::Neg, _) => format!("(-{v})"),
                    (UnaryOp::Not, _) => format!("(!{v})"),
                    (UnaryOp::BitNot, _) => format!("(~{v})"),
                }
            }
            Expr::Binary(op, a, b) => {
                let t = cx.scalar_type(a)?;
                let x = self.expr(cx, a)?;
                let y = self.expr(cx, b)?;
                match (op, self.mode) {
                    (BinaryOp::LogicAnd, Mode::Checked) => format!("mpmd_and({x}, {y})"),
                    (BinaryOp::LogicOr, Mode::Checked) => format!("mpmd_or({x}, {y})"),
                    _ => binary(*op, t, &x, &y),
                }
            }
            Expr::Select(c, a, b) => {
                let c = self.expr(cx, c)?;
                let a = self.expr(cx, a)?;
                let b = self.expr(cx, b)?;
                match self.mode {
                    Mode::Fast => format!("({c} ? {a} : {b})"),
                    Mode::Checked => format!("mpmd_select({c}, {a}, {b})"),
                }
            }
            Expr::Cast(to, a) => {
                let from = cx.scalar_type(a)?;
                let v = self.expr(cx, a)?;
                cast(from, *to, &v)
            }
            Expr::Bitcast(to, a) => {
                let from = cx.scalar_type(a)?;
                let v = self.expr(cx, a)?;
                match (from, to) {
                    (f, t) if f == *t => v,
                    (ScalarType::F32, ScalarType::I32) => format!("__float_as_int({v})"),
                    (ScalarType::F32, ScalarType::U32) => format!("__float_as_uint({v})"),
                    (ScalarType::I32, ScalarType::F32) => format!("__int_as_float({v})"),
                    (ScalarType::U32, ScalarType::F32) => format!("__uint_as_float({v})"),
                    (ScalarType::I32, ScalarType::U32) => format!("((u32)({v}))"),
                    (ScalarType::U32, ScalarType::I32) => format!("((int)({v}))"),
                    (f, t) => return Err(cx.unsupported(format!("bitcast from {f} to {t}"))),
                }
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
                let t = cx.scalar_type(&args[0])?;
                let values = args
                    .iter()
                    .map(|a| self.expr(cx, a))
                    .collect::<Result<Vec<_>, _>>()?;
                math(*f, t, &values).ok_or_else(|| {
                    cx.unsupported(format!("`{}` is not defined for {t}", f.name()))
                })?
            }
        })
    }

    fn load(&mut self, cx: &UnitContext, access: &RefAccess) -> Result<String, EmitError> {
        let place = self.place(cx, access)?;
        let raw = match &place.checked {
            None => place.element.clone(),
            Some((compute, _)) => {
                // Checked: the offset comes from an inline call so that the
                // check stays lazy inside `&&`, `||` and `select`.
                let call = compute
                    .split_once(" = ")
                    .map(|(_, rhs)| rhs.trim_end_matches(';').to_string())
                    .unwrap_or_default();
                format!("mpmd_load({}, {call})", place.base)
            }
        };
        Ok(if place.is_bool_in_memory {
            format!("({raw} != 0u)")
        } else {
            raw
        })
    }
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
        // fminf/fmaxf return the other operand when one is NaN.
        (MathFn::Min, F32) => call("fminf"),
        (MathFn::Max, F32) => call("fmaxf"),
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
        assert_eq!(sanitize("v_", "int"), "v_int");
        assert_eq!(sanitize("mpmd_", "my map"), "mpmd_my_map");
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
