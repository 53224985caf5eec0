//! Launch plan → WGSL.
//!
//! One WGSL module holds every launch unit of a plan as its own entry point
//! (`unit<k>_<kernel>`), each with its own `@workgroup_size`. The host runs
//! them as separate dispatches in plan order, which is WGSL's only
//! cross-workgroup ordering (docs/design.md, "Backends"). A plan that needs
//! co-residency, where the adapter runs all of its workgroups at once, is
//! instead one fused entry point (`mpmd_fused`) calling one function per
//! unit ([`fuses_programs`]); a block-split unit runs one dispatch per block
//! ([`splits_blocks`]).
//!
//! Names from the program are kept, with a prefix per kind so that no input
//! name can collide with a WGSL keyword or a generated name: `v_` for scalars
//! and locals, `g<buffer>_` for device buffers, `s<unit>_` for a unit's
//! `smem`, `ax_` for axis indices, `unit<unit>_` for entry points. Everything
//! generated starts with `mpmd_` or `rt_`. ARCHITECTURE.md ("WGSL names")
//! has the argument why no two can meet; "WGSL nesting" how expressions and
//! statements stay within what naga and tint read.
//!
//! Where WGSL differs from docs/design.md's numerics the generated code says so
//! explicitly (integer division, shifts, float→int, min/max with NaN, float
//! `%`, contraction), and no operation is ever applied to literals alone:
//! WGSL evaluates such expressions at shader creation and makes overflow,
//! division by zero, NaN and infinity errors there. Those literals are read
//! from the `mpmd_params` buffer instead (`rt_<k>` lets).
//!
//! The generator by job: `generate` assembles the module and the call's
//! schedule, `dispatch` the fused, block-split and semaphore dispatches,
//! `bindings` where buffers live and the globals, `unit` one unit's entry
//! point, `stmt`, `expr` and `memory` its statements, expressions and
//! accesses, `sync` semaphores and barriers, `numerics` docs/design.md's numerics
//! where WGSL differs, `helpers` the WGSL helper functions and `syntax` how
//! types and literals are spelled.

mod bindings;
mod block;
mod dispatch;
mod expr;
mod generate;
mod helpers;
mod memory;
mod numerics;
mod pairing;
mod stmt;
mod sync;
mod syntax;
mod unit;
mod warp;

pub use bindings::{BindingLayout, StorageBinding, WordType};

use mpmd_core::ir::{Name, ScalarType};
use mpmd_core::plan::{LaunchPlan, ProgramId, UnitId};
use mpmd_core::Mode;
use thiserror::Error;

use generate::generate;

/// Binding of the read-only parameter buffer (scalars, then runtime literals).
pub const PARAMS_BINDING: u32 = 0;
/// Binding of the status buffer (error records).
pub const STATUS_BINDING: u32 = 1;
/// Words in the status buffer: error count, kind, unit, block, thread,
/// site, value count, then up to [`MAX_RECORDED_VALUES`] values, then the
/// ticket counter of block-split dispatches ([`TICKET_WORD`]).
pub const STATUS_WORDS: usize = 8 + MAX_RECORDED_VALUES;
/// The status word that block-split dispatches count in: each takes the next
/// ticket, so dispatch `k` of the call's split dispatches runs ticket `k`.
pub const TICKET_WORD: usize = 7 + MAX_RECORDED_VALUES;
/// Dispatches one call may spend on block-split units (one per block; see
/// [`Dispatch::repeat`]); a plan that needs more is refused.
pub const MAX_SPLIT_DISPATCHES: u64 = 65_536;
/// Looks at the semaphore per poll of a polling wait under a loop cap (one
/// loop visit); without a cap a poll is one look, so that a wait that never
/// ends gives up as soon as before (4,194,304 polls on a GPU).
pub const POLL_LOOKS: u32 = 32;
/// Index values an error record keeps.
pub const MAX_RECORDED_VALUES: usize = 8;

/// Error kinds written to the status buffer.
pub const ERROR_OUT_OF_BOUNDS: u32 = 1;
pub const ERROR_WAIT_TIMEOUT: u32 = 2;
pub const ERROR_LOOP_CAP: u32 = 3;
pub const ERROR_SEM_AMOUNT: u32 = 4;
/// A `while` reached its maximum (checked mode); values: the loop's
/// ordinal (`ir::visit::while_loops`) and the maximum.
pub const ERROR_LOOP_LIMIT: u32 = 5;
/// Native warp collectives found that the invocation's subgroup is not its
/// logical warp; values: the subgroup's size, the invocation's id in it,
/// and whether the subgroup holds exactly the 32 invocations of the warp.
pub const ERROR_SUBGROUP_NOT_WARP: u32 = 6;

/// How warp collectives (shuffles, votes, ballots, reductions,
/// `mma_m16n8k16`) move words between the lanes of a logical warp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WarpPath {
    /// Through workgroup memory (`mpmd_warp_words`) between workgroup
    /// barriers: right on every adapter, but a collective must stand under
    /// block-uniform control ([`EmitError::WarpOutsideBlockUniformControl`]).
    #[default]
    Emulated,
    /// WGSL `subgroup*` builtins, no barriers: only for an adapter whose
    /// subgroups are the logical warps (`crate::WarpChoice::for_adapter`
    /// decides); each entry point that uses them checks that at run time
    /// and records [`ERROR_SUBGROUP_NOT_WARP`] where it does not hold.
    Native,
}

/// How f16 values are converted to and from f32 (every f16 operation
/// computes on the exact f32 values and rounds once, docs/numerics.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum F16Conversions {
    /// Written out on the bits (`mpmd_f16_to_f32`, `mpmd_f32_to_f16`):
    /// exact on every adapter, since WGSL pins down neither the rounding
    /// of its conversions (or of an f32 addition) nor what they do with
    /// subnormals.
    #[default]
    Emulated,
    /// WGSL's `unpack2x16float` to widen; to narrow, a rounding without
    /// branches whose subnormal case is the adapter's f32 addition (WGSL
    /// lets it round either way): only for an adapter where a probe
    /// dispatch found both exact (`crate::F16Choice`); several times
    /// cheaper on lavapipe, where every branch of the conversions on the
    /// bits runs for every SIMD vector.
    Native,
}

/// Options of the code generator.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EmitOptions {
    pub mode: Mode,
    /// When set, every loop the backend emits counts toward one
    /// per-invocation counter and stops (reporting an error) past this many
    /// iterations. Needed on llvmpipe, which silently ends loops after 65,535.
    pub loop_cap: Option<u32>,
    /// Polls a semaphore wait makes before it gives up and reports.
    pub wait_poll_budget: u32,
    /// Storage buffers one entry point may bind; more device buffers than
    /// fit are packed into shared arenas.
    pub max_storage_buffers: u32,
    /// Largest workgroup count of one dispatch dimension; larger units use a
    /// 2-D dispatch and linearise the block id.
    pub max_workgroups_per_dimension: u32,
    /// Every workgroup of the call's dispatch runs at once on this adapter
    /// (the user declared it, or the runtime established it for this plan):
    /// a plan that needs co-residency (a cycle, or a program that waits on
    /// its own signals) runs as one *fused* dispatch of every program
    /// ([`fuses_programs`]) with polling waits, instead of being refused or
    /// split one dispatch per block.
    pub co_resident: bool,
    /// How warp collectives exchange words. The runtime picks
    /// [`WarpPath::Native`] only on an adapter that qualifies; tests may
    /// force either.
    pub warps: WarpPath,
    /// The device has subgroup operations (`wgpu::Features::SUBGROUP`; any
    /// subgroup size). A 16-bit gmem or smem store that is the only write
    /// of its array in the kernel lets two neighbouring invocations that
    /// store the two halves of one word write it whole, one atomic store
    /// each, instead of two atomics each (`emit/pairing.rs`). With a
    /// [`loop_cap`](Self::loop_cap), a loop that holds a `while` (or is
    /// one) is charged as it runs instead of up front at the `while`'s
    /// `max`: llvmpipe counts header visits per SIMD vector, which is its
    /// subgroup, so each counted loop's entry and exit take the subgroup's
    /// largest count (`subgroupMax`); `for` nests (charged their trip
    /// counts) and a branch that threads may take differently still pay
    /// their loops up front.
    pub subgroups: bool,
    /// How f16 values convert to and from f32. The runtime picks
    /// [`F16Conversions::Native`] only where its probe passed; tests may
    /// force either.
    pub f16_conversions: F16Conversions,
}

impl Default for EmitOptions {
    fn default() -> Self {
        EmitOptions {
            mode: Mode::Fast,
            loop_cap: None,
            wait_poll_budget: 1 << 20,
            max_storage_buffers: u32::MAX,
            max_workgroups_per_dimension: 65_535,
            co_resident: false,
            warps: WarpPath::Emulated,
            subgroups: false,
            f16_conversions: F16Conversions::Emulated,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum EmitError {
    /// The plan contains something validation should have rejected.
    #[error("cannot emit WGSL for kernel `{kernel}`: {message}")]
    Invalid { kernel: Name, message: String },
    #[error("program {program} (`{kernel}`) has {blocks} blocks; one WGSL dispatch reaches at most {max} ({per_dim} x {per_dim})")]
    TooManyBlocks {
        program: ProgramId,
        kernel: Name,
        blocks: u64,
        max: u64,
        per_dim: u32,
    },
    /// Block-split units (programs that wait on their own signals) would
    /// need more dispatches than [`MAX_SPLIT_DISPATCHES`].
    #[error("{units} wait on their own signals, so their blocks run one per dispatch in linear block order (after one dispatch of the leading blocks that wait on nothing, where there are two or more): {dispatches} dispatches, more than the {max} one call may make")]
    TooManyDispatches {
        units: String,
        dispatches: u64,
        max: u64,
    },
    #[error("the map needs {needed} storage buffers even when packed; the adapter allows {allowed} per shader stage")]
    TooManyBindings { needed: u32, allowed: u32 },
    /// Statements nest deeper than WGSL compilers read, and no rewrite
    /// applies (nested `for` loops, or `if`s with other statements between
    /// them; `if`s without `else` and long else-if chains are flattened).
    #[error("kernel `{kernel}`: {what} nest more than {limit} levels deep, which WGSL compilers (tint) do not read; move the inner levels into fewer nested statements")]
    TooDeep {
        kernel: Name,
        what: String,
        limit: usize,
    },
    /// An emulated warp collective under control flow that is only
    /// warp-uniform ([`WarpPath::Emulated`]: its barriers need the block).
    #[error("kernel `{kernel}`: `{op}` is under {what}, which is warp-uniform but not block-uniform ({reason}); WGSL emulates warp collectives with workgroup barriers, which need the whole block, where the adapter's subgroups are not the logical warps; move it out of that branch or loop")]
    WarpOutsideBlockUniformControl {
        kernel: Name,
        op: &'static str,
        what: String,
        reason: String,
    },
    /// naga rejected the generated WGSL (a bug in this backend).
    #[error("generated WGSL failed naga validation:\n{message}")]
    Naga { message: String, wgsl: String },
}

/// What an error record's `site` word refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessSite {
    pub unit: UnitId,
    /// The ref as the program names it.
    pub reference: Name,
    /// Extents of the owner's block coordinates when the access names them.
    pub block_extents: Vec<u32>,
    /// Shape of one instance.
    pub shape: Vec<u32>,
    /// Per coordinate (block coordinates, then indices): whether it is an
    /// `i32`, shown signed in messages.
    pub signed: Vec<bool>,
}

/// One compute dispatch of a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatch {
    pub entry_point: String,
    pub workgroups: [u32; 3],
    /// The launch unit it runs; `None` for a semaphore dispatch (semaphore
    /// operations moved out of the units next to it, see `Hoisting`).
    pub unit: Option<UnitId>,
    /// How many times it is dispatched in a row: 1, or the unit's block
    /// count for a block-split unit (a program that waits on its own signals
    /// in a plan without a cycle runs one workgroup per dispatch, in linear
    /// block order, so that every block it may wait on ran before it).
    pub repeat: u32,
}

/// Whether the plan's programs that wait on their own signals run one
/// dispatch per block: the plan has such a program, no cycle between
/// programs, and co-residency is not declared.
pub fn splits_blocks(plan: &LaunchPlan, options: &EmitOptions) -> bool {
    !options.co_resident && !plan.graph.has_cycle && !plan.graph.intra_program.is_empty()
}

/// Whether unit `unit` runs one dispatch per block (see [`splits_blocks`]).
pub fn is_split_unit(plan: &LaunchPlan, options: &EmitOptions, unit: UnitId) -> bool {
    splits_blocks(plan, options) && plan.graph.intra_program.iter().any(|e| e.to == unit)
}

/// Whether the plan runs as one fused dispatch: it needs co-residency (a
/// cycle, or a program that waits on its own signals) and the options say
/// the adapter runs all of its workgroups at once. Every program of the
/// call is then one entry point, `FUSED_ENTRY_POINT`; a workgroup takes a
/// ticket and derives (program, block) from it, programs in the plan's
/// topological order (as the CUDA backend does).
pub fn fuses_programs(plan: &LaunchPlan, options: &EmitOptions) -> bool {
    options.co_resident && plan.needs_co_residency()
}

/// The entry point of a fused dispatch.
pub const FUSED_ENTRY_POINT: &str = "mpmd_fused";

/// Bytes of workgroup memory the backend's own variables take besides the
/// programs' smem, in the entry point of `unit` (`None`: the fused one):
/// 16 (the semaphore broadcast, the ticket, the loop cap's two words),
/// where it uses emulated warp collectives the exchange array, and where
/// some unit uses block collectives their two words (declared per module).
pub fn own_workgroup_bytes(plan: &LaunchPlan, options: &EmitOptions, unit: Option<UnitId>) -> u64 {
    let exchanges = match unit {
        None => true,
        Some(unit) => plan.units.get(unit.index()).is_some_and(warp::uses_warps),
    };
    let exchange_words = match exchanges {
        true => warp::warp_exchange_words(plan, options).unwrap_or(0),
        false => 0,
    };
    let block_collectives = match block::uses_block_collectives(plan) {
        true => block::BLOCK_COLLECTIVE_BYTES,
        false => 0,
    };
    16 + 4 * exchange_words as u64 + block_collectives
}

/// Workgroups a fused dispatch of `plan` runs: one per block of every program.
pub fn fused_workgroups(plan: &LaunchPlan) -> u64 {
    plan.units.iter().map(|u| u.block_count).sum()
}

/// Invocations per workgroup of a fused dispatch: the most any program has
/// (a program with fewer leaves the rest idle; they still reach its barriers).
pub fn fused_workgroup_size(plan: &LaunchPlan) -> u32 {
    plan.units
        .iter()
        .map(|u| u.threads_per_block)
        .max()
        .unwrap_or(1)
        .max(1)
}

/// Invocations per workgroup of a semaphore dispatch (one per block).
pub const SEMAPHORE_WORKGROUP_SIZE: u32 = 256;

/// The generated module and everything the host needs to run it.
#[derive(Clone, Debug, PartialEq)]
pub struct EmittedModule {
    pub wgsl: String,
    /// Entry point name per launch unit (same order as `plan.units`); in a
    /// fused module ([`fuses_programs`]) the unit's function, which the one
    /// entry point [`FUSED_ENTRY_POINT`] calls.
    pub entry_points: Vec<String>,
    /// Workgroup counts per unit (in a fused module, the fused dispatch's).
    pub dispatch: Vec<[u32; 3]>,
    /// Every dispatch of a call, in order: the units in plan order, with the
    /// semaphore dispatches between them.
    pub schedule: Vec<Dispatch>,
    pub layout: BindingLayout,
    /// Scalar operand names in `mpmd_params` word order.
    pub scalar_slots: Vec<(Name, ScalarType)>,
    /// Words after the scalars: the runtime literals.
    pub literal_words: Vec<u32>,
    pub(crate) sites: Vec<AccessSite>,
}

impl EmittedModule {
    /// The parameter buffer's words for given scalar values (in slot order).
    pub fn params_words(&self, scalars: &[u32]) -> Vec<u32> {
        let mut words = scalars.to_vec();
        words.extend_from_slice(&self.literal_words);
        if words.is_empty() {
            words.push(0);
        }
        words
    }
}

/// All units' WGSL for `mpmd lower --target wgsl`, validated by naga.
pub fn emit(plan: &LaunchPlan, mode: Mode) -> Result<String, EmitError> {
    let options = EmitOptions {
        mode,
        ..EmitOptions::default()
    };
    Ok(emit_module(plan, &options)?.wgsl)
}

/// Generates the module for `plan` and validates it with naga.
pub fn emit_module(plan: &LaunchPlan, options: &EmitOptions) -> Result<EmittedModule, EmitError> {
    let module = on_deep_stack(|| generate(plan, options))?;
    validate_wgsl_capabilities(&module.wgsl, options).map_err(|message| EmitError::Naga {
        message,
        wgsl: module.wgsl.clone(),
    })?;
    Ok(module)
}

/// Stack for code generation, which recurses over the IR: about 5 KiB per
/// level of expression in a debug build, so the IR's deepest programs (and
/// flat chains of thousands of terms, which are that deep) need more than a
/// default 2 MiB thread has. Only the pages used are committed.
const GENERATION_STACK_BYTES: usize = 512 << 20;

/// Runs `f` with `GENERATION_STACK_BYTES` of stack.
fn on_deep_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    mpmd_core::ir::limits::on_large_stack(GENERATION_STACK_BYTES, f)
}

/// Parses and validates WGSL with naga; the error is naga's rendered report.
pub fn validate_wgsl(source: &str) -> Result<naga::Module, String> {
    validate_wgsl_with(source, WarpPath::Emulated)
}

/// [`validate_wgsl`] for a module of the given warp path: a native one may
/// use subgroup operations in compute shaders (what a device with
/// `wgpu::Features::SUBGROUP` accepts), an emulated one may not.
pub fn validate_wgsl_with(source: &str, warps: WarpPath) -> Result<naga::Module, String> {
    let options = EmitOptions {
        warps,
        ..EmitOptions::default()
    };
    validate_wgsl_capabilities(source, &options)
}

/// [`validate_wgsl_with`] for a module emitted with `options`: subgroup
/// operations allowed also for paired 16-bit stores and loop counts
/// ([`EmitOptions::subgroups`]), and `unpack2x16float` for native f16
/// conversions (what wgpu allows on a device whose downlevel flags have
/// `SHADER_F16_IN_F32`).
fn validate_wgsl_capabilities(source: &str, options: &EmitOptions) -> Result<naga::Module, String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    let mut capabilities = naga::valid::Capabilities::default();
    if options.warps == WarpPath::Native || options.subgroups {
        capabilities |= naga::valid::Capabilities::SUBGROUP;
    }
    if options.f16_conversions == F16Conversions::Native {
        capabilities |= naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    }
    let mut validator =
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities);
    validator
        .validate(&module)
        .map_err(|e| e.emit_to_string(source))?;
    Ok(module)
}
