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
//!
//! This file holds the entry points and the kernel's skeleton (parameters,
//! dispatch to units, binding a unit's parameters); the rest is split by job:
//! [`c`] (C types, constants, literals), [`names`] (identifiers), [`uses`]
//! (what the bodies read, write and wait on), [`sync`] (block schedules,
//! barriers, semaphores), [`stmt`] (statements and loops), [`access`]
//! (memory accesses and their bounds) and [`expr`] (expressions).

mod access;
mod block;
pub(crate) mod c;
mod expr;
mod names;
mod stmt;
mod sync;
#[cfg(test)]
mod tests;
mod uses;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use mpmd_core::ir::{MemorySpace, RefType, ScalarType, Type};
use mpmd_core::plan::{BufferId, IdSource, LaunchPlan, LaunchUnit, OperandId, ProgramId};
use mpmd_core::Mode;
use thiserror::Error;

use c::{c_type, Home};
use names::user_name;
pub use sync::BlockSchedule;
use sync::UnitSync;
pub(crate) use uses::loaded_buffers;

/// The helpers every generated module starts with (`prelude.cu`): types,
/// exact numerics, semaphores, error records.
pub const PRELUDE: &str = include_str!("../prelude.cu");

/// Largest total block count of one call (CUDA's grid x limit).
pub(crate) const MAX_BLOCKS: u64 = (1 << 31) - 1;

/// Why a plan could not be turned into CUDA C.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum EmitError {
    /// The plan has nothing to launch.
    #[error("the plan has no launch units")]
    NoUnits,
    /// The call needs more blocks than one CUDA launch has (2^31 - 1).
    #[error("the call needs {blocks} blocks in all; CUDA launches at most {MAX_BLOCKS}")]
    TooManyBlocks { blocks: u64 },
    /// A program holds something this backend cannot express (a plan that
    /// validation would refuse, or a form lowering should have expanded).
    #[error("program {program} (`{kernel}`): {detail}")]
    Unsupported {
        program: ProgramId,
        kernel: String,
        detail: String,
    },
}

/// A ref an error record can name (by id): what the host prints of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecordedRef {
    /// The name as the kernel wrote it.
    pub name: String,
    pub shape: Vec<u32>,
    /// Block-axis sizes of the owner mesh (empty for unowned refs and locals).
    pub owner_block_shape: Vec<u32>,
}

/// One kernel parameter, in order: what a launch passes in that place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelParam {
    /// A device buffer (`LaunchPlan::buffers`).
    Buffer(BufferId),
    /// A scalar operand (`LaunchPlan::operands`; `u32` bits for `bool` and
    /// the 16-bit floats).
    Scalar(OperandId),
    /// The per-call control block ([`crate::CONTROL_WORDS`] `u32`s, zeroed).
    Control,
    /// The wait time limit in nanoseconds (`u64`).
    WaitTimeoutNs,
}

/// The tickets (logical blocks) of one program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketRange {
    /// The program (`MpmdMap::programs`).
    pub program: ProgramId,
    /// The kernel the program runs.
    pub kernel: String,
    /// Its first logical block.
    pub first: u64,
    /// How many logical blocks it has.
    pub count: u64,
}

/// Generated CUDA C and what the host needs to launch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmittedModule {
    /// The whole translation unit: a header line, [`PRELUDE`], the kernel.
    pub source: String,
    /// The `extern "C"` kernel's name.
    pub kernel_name: String,
    /// How the kernel's physical blocks become logical blocks.
    pub schedule: BlockSchedule,
    /// Threads per block: the largest thread count of any program.
    pub block_dim: u32,
    /// Blocks (tickets) of all programs together.
    pub total_blocks: u64,
    /// Bytes of dynamic shared memory per block (the largest program arena).
    pub dynamic_smem_bytes: u32,
    /// The kernel's parameters, in order.
    pub params: Vec<KernelParam>,
    /// Refs that an error record can name, by id.
    pub(crate) refs: Vec<RecordedRef>,
    /// The logical blocks of each program, in plan order.
    pub tickets: Vec<TicketRange>,
}

/// Readable CUDA C for the plan (`mpmd lower --target cuda`).
pub fn emit(plan: &LaunchPlan, mode: Mode) -> Result<String, EmitError> {
    Ok(emit_module(plan, mode)?.source)
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

/// Generates the module with the given block schedule (which must suit the
/// plan: [`BlockSchedule::for_plan`] says which do).
pub fn emit_module_with(
    plan: &LaunchPlan,
    mode: Mode,
    schedule: BlockSchedule,
) -> Result<EmittedModule, EmitError> {
    mpmd_core::ir::limits::on_large_stack(EMIT_STACK_BYTES, || {
        emit_on_this_thread(plan, mode, schedule)
    })
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

impl Symbol {
    /// The C name and element type of a ref's slots (bools are `u32` words
    /// in buffers and smem, `bool`s in local arrays); `None` for a scalar.
    fn slots(&self) -> Option<(&str, &'static str)> {
        match self {
            Symbol::Buffer { c_name, ty, .. } | Symbol::Smem { c_name, ty } => {
                Some((c_name, c_type(ty.elem, Home::Memory)))
            }
            Symbol::Local { c_name, elem, .. } => Some((c_name, c_type(*elem, Home::Value))),
            Symbol::Scalar { .. } => None,
        }
    }
}

struct Emitter<'a> {
    plan: &'a LaunchPlan,
    mode: Mode,
    out: String,
    refs: Vec<RecordedRef>,
    ref_ids: HashMap<(ProgramId, String), u32>,
    /// Counter of the generated temporaries (`mpmd_<letter><n>`).
    next_temp: u32,
    /// Indentation depth of the statement being emitted, where the
    /// temporaries of its expressions go.
    depth: usize,
    /// Buffers of semaphores some program reads.
    read_semaphores: BTreeSet<BufferId>,
    /// How the unit being emitted synchronises its block and stops.
    unit_sync: UnitSync,
    /// Every thread of the CUDA block runs the unit being emitted (none
    /// left it for a smaller program): `__syncthreads_count` and its votes
    /// count exactly the unit's threads.
    unit_fills_block: bool,
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
    let kernel_name = names::kernel_name(&plan.map.name);
    let written = uses::written_buffers(plan);

    let mut e = Emitter {
        plan,
        mode,
        out: String::new(),
        refs: Vec::new(),
        ref_ids: HashMap::new(),
        next_temp: 0,
        depth: 2,
        read_semaphores: uses::read_semaphores(plan),
        unit_sync: UnitSync::WholeBlock,
        unit_fills_block: true,
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
    for (index, buffer) in plan.enumerate_buffers() {
        let elem = c::buffer_element_type(&buffer.ty);
        let name = names::buffer_name(plan, index);
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
    for (index, operand) in plan.enumerate_operands() {
        if let Type::Scalar(t) = operand.ty {
            param_decls.push(format!(
                "const {} {}",
                c_type(t, Home::Parameter),
                names::scalar_name(&operand.name)
            ));
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
    e.out.push_str(SMEM_ARENA_DECLARATION);
    e.out.push_str(
        "  __shared__ u32 mpmd_ticket;\n\
         \x20 __shared__ u32 mpmd_stop;\n\
         \x20 __shared__ int mpmd_value;\n",
    );
    e.out.push_str(&schedule.prologue(total_blocks));

    let mut tickets = Vec::new();
    let mut first = 0u64;
    let unit_source_start = e.out.len();
    for (unit_index, unit) in plan.units.iter().enumerate() {
        let keyword = if unit_index == 0 { "if" } else { "} else if" };
        let _ = writeln!(
            e.out,
            "  {keyword} (mpmd_ticket_id < {}) {{\n    // program {} `{}` on mesh `{}`: {} block(s) x {} thread(s)\n    const u32 mpmd_block = mpmd_ticket_id - {};",
            c::unsigned(first + unit.block_count),
            unit.program,
            unit.kernel.name,
            unit.mesh.name,
            unit.block_count,
            unit.threads_per_block,
            c::unsigned(first),
        );
        e.unit_fills_block = unit.threads_per_block == block_dim;
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
                "    if (threadIdx.x < {}) {{",
                c::unsigned(unit.threads_per_block)
            );
            let body_start = e.out.len();
            e.emit_unit(unit)?;
            indent_from(&mut e.out, body_start);
            e.out.push_str("    }\n");
        } else {
            e.unit_sync = UnitSync::WholeBlock;
            let _ = writeln!(
                e.out,
                "    if (threadIdx.x >= {}) return;",
                c::unsigned(unit.threads_per_block)
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
        e.out.push_str(sync::walk_epilogue(plan, block_dim));
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

/// The line declaring the block's dynamic shared memory, which every
/// program's smem slots point into (`cuda-host` replaces it by static
/// storage).
pub(crate) const SMEM_ARENA_DECLARATION: &str =
    "  extern __shared__ __align__(16) unsigned char mpmd_smem[];\n";

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

impl Emitter<'_> {
    /// A fresh generated name `mpmd_<letter><n>` (see [`names`]).
    fn temp(&mut self, letter: char) -> String {
        debug_assert!(letter.is_ascii_lowercase());
        self.next_temp += 1;
        format!("mpmd_{letter}{}", self.next_temp)
    }

    fn line(&mut self, depth: usize, text: &str) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// One program's code: its parameters bound to the map's operands, the
    /// axis indices its body uses, then the body.
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
                    c_name: c::parameter_value(*t, &names::scalar_name(&operand.name)),
                    ty: *t,
                },
                Type::Ref(r) if r.space == MemorySpace::Smem => {
                    let slot = unit
                        .smem
                        .iter()
                        .find(|s| s.operand.index() == position)
                        .map(|s| s.offset_bytes);
                    match slot {
                        Some(offset) => {
                            let c_name = user_name('s', &param.name);
                            let elem = c_type(r.elem, Home::Memory);
                            let _ = writeln!(
                                self.out,
                                "    {elem}* const {c_name} = ({elem}*)(mpmd_smem + {});",
                                c::unsigned(offset)
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
                        c_name: names::buffer_name(self.plan, buffer),
                        ty: r.clone(),
                        owner_block_shape,
                    }
                }
            };
            cx.symbols.insert(param.name.clone(), symbol);
        }
        // Axis indices the body uses, from the plan's formulas.
        let used_axes = uses::axes(&unit.kernel.body);
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
                "    const {} {} = ({id} / {}) % {};",
                c_type(ScalarType::U32, Home::Value),
                user_name('a', &axis.axis),
                c::unsigned(axis.stride),
                c::unsigned(axis.size)
            );
        }
        self.emit_body(&mut cx, &unit.kernel.body, 2)
    }

    /// The id of ref `base` of this unit in error records ([`RecordedRef`]),
    /// given on first use.
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
            } => RecordedRef {
                name: base.to_string(),
                shape: ty.shape.clone(),
                owner_block_shape: owner_block_shape.clone(),
            },
            Symbol::Smem { ty, .. } => RecordedRef {
                name: base.to_string(),
                shape: ty.shape.clone(),
                owner_block_shape: Vec::new(),
            },
            Symbol::Local { shape, .. } => RecordedRef {
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
}
