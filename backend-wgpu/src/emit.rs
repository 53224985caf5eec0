//! Launch plan → WGSL.
//!
//! One WGSL module holds every launch unit of a plan as its own entry point
//! (`unit<k>_<kernel>`), each with its own `@workgroup_size`. The host runs
//! them as separate dispatches in plan order, which is WGSL's only
//! cross-workgroup ordering (DESIGN.md, "Backends"). A plan that needs
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
//! Where WGSL differs from DESIGN.md's numerics the generated code says so
//! explicitly (integer division, shifts, float→int, min/max with NaN, float
//! `%`, contraction), and no operation is ever applied to literals alone:
//! WGSL evaluates such expressions at shader creation and makes overflow,
//! division by zero, NaN and infinity errors there. Those literals are read
//! from the `mpmd_params` buffer instead (`rt_<k>` lets).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use mpmd_core::ir::visit::for_each_stmt;
use mpmd_core::ir::{
    AtomicOp, BinaryOp, Expr, Literal, MathFn, MemorySpace, Name, RefAccess, RefType, ScalarType,
    SemOp, Stmt, Type, UnaryOp,
};
use mpmd_core::plan::{IdSource, LaunchPlan, LaunchUnit};
use mpmd_core::Mode;
use thiserror::Error;

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
        program: usize,
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
    /// naga rejected the generated WGSL (a bug in this backend).
    #[error("generated WGSL failed naga validation:\n{message}")]
    Naga { message: String, wgsl: String },
}

/// The WGSL type of one element of a storage binding or shared array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WordType {
    F32,
    I32,
    U32,
    AtomicI32,
    AtomicU32,
}

impl WordType {
    pub fn wgsl(self) -> &'static str {
        match self {
            WordType::F32 => "f32",
            WordType::I32 => "i32",
            WordType::U32 => "u32",
            WordType::AtomicI32 => "atomic<i32>",
            WordType::AtomicU32 => "atomic<u32>",
        }
    }

    pub fn is_atomic(self) -> bool {
        matches!(self, WordType::AtomicI32 | WordType::AtomicU32)
    }

    fn for_elem(elem: ScalarType, atomic: bool) -> WordType {
        match (elem, atomic) {
            (ScalarType::F32, false) => WordType::F32,
            // f32 atomics are compare-exchange loops (and loads, stores,
            // exchanges) on the bits.
            (ScalarType::F32, true) => WordType::AtomicU32,
            (ScalarType::I32, false) => WordType::I32,
            (ScalarType::I32, true) => WordType::AtomicI32,
            (ScalarType::U32 | ScalarType::Bool, false) => WordType::U32,
            (ScalarType::U32 | ScalarType::Bool, true) => WordType::AtomicU32,
            // Two 16-bit elements a word; a stored buffer updates its halves atomically.
            (ScalarType::F16 | ScalarType::BF16, false) => WordType::U32,
            (ScalarType::F16 | ScalarType::BF16, true) => WordType::AtomicU32,
        }
    }
}

/// One storage binding of user data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageBinding {
    pub binding: u32,
    /// WGSL global name.
    pub global: String,
    pub word: WordType,
    /// Plan buffers stored in it, with their word offsets.
    pub members: Vec<(usize, u64)>,
    /// Total words.
    pub words: u64,
}

/// Where each plan buffer lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingLayout {
    pub bindings: Vec<StorageBinding>,
    /// Per plan buffer: index into `bindings` and word offset.
    pub places: Vec<(usize, u64)>,
    /// Whether buffers were packed into shared arenas.
    pub packed: bool,
}

/// What an error record's `site` word refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessSite {
    pub unit: usize,
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
    pub unit: Option<usize>,
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
pub fn is_split_unit(plan: &LaunchPlan, options: &EmitOptions, unit: usize) -> bool {
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
    pub sites: Vec<AccessSite>,
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
    validate_wgsl(&module.wgsl).map_err(|message| EmitError::Naga {
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
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    let mut validator = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::default(),
    );
    validator
        .validate(&module)
        .map_err(|e| e.emit_to_string(source))?;
    Ok(module)
}

// ---- layout ---------------------------------------------------------------

fn sanitize(name: &str) -> String {
    // IR names are already `[A-Za-z_][A-Za-z0-9_]*`; keep anything else out anyway.
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// 32-bit words that hold `elements` elements of `elem`: 16-bit floats are
/// packed two a word (element `i` in word `i / 2`, the low half for even `i`).
pub fn words_for(elem: ScalarType, elements: u64) -> u64 {
    if elem.is_16bit() {
        elements.div_ceil(2)
    } else {
        elements
    }
}

/// Which plan buffers are accessed atomically: the plan's flag, plus the
/// atomics and semaphore operations found in the kernels (belt and braces:
/// a plain/atomic mismatch would make invalid WGSL).
fn atomic_buffers(plan: &LaunchPlan) -> Vec<bool> {
    let mut atomic: Vec<bool> = plan
        .buffers
        .iter()
        .map(|b| b.atomic || b.ty.space == MemorySpace::Sem)
        .collect();
    for unit in &plan.units {
        let mut names = HashSet::new();
        collect_atomic_targets(&unit.kernel.body, &mut names);
        for name in &names {
            if let Some(buffer) = plan.param_buffer(unit, name) {
                atomic[buffer] = true;
            }
        }
        // A 16-bit store updates one half of a word that another thread may
        // be updating the other half of: such buffers are atomic words.
        let mut stored = HashSet::new();
        collect_store_targets(&unit.kernel.body, &mut stored);
        for name in &stored {
            if let Some(buffer) = plan.param_buffer(unit, name) {
                if plan.buffers[buffer].ty.elem.is_16bit() {
                    atomic[buffer] = true;
                }
            }
        }
    }
    atomic
}

fn collect_store_targets(body: &[Stmt], out: &mut HashSet<Name>) {
    for_each_stmt(body, &mut |stmt| {
        if let Stmt::Store { target, .. } = stmt {
            out.insert(target.base.clone());
        }
    });
}

fn collect_atomic_targets(body: &[Stmt], out: &mut HashSet<Name>) {
    for_each_stmt(body, &mut |stmt| match stmt {
        Stmt::Atomic { target, .. } => {
            out.insert(target.base.clone());
        }
        Stmt::Sem { sem, .. } | Stmt::SemRead { sem, .. } => {
            out.insert(sem.base.clone());
        }
        _ => {}
    });
}

/// Assigns bindings: one per buffer, or shared arenas by word type when
/// there are more buffers than the adapter's storage-buffer limit allows
/// (two bindings are taken by the parameter and status buffers).
pub fn binding_layout(
    plan: &LaunchPlan,
    max_storage_buffers: u32,
) -> Result<BindingLayout, EmitError> {
    let atomic = atomic_buffers(plan);
    let words: Vec<WordType> = plan
        .buffers
        .iter()
        .zip(&atomic)
        .map(|(b, &a)| WordType::for_elem(b.ty.elem, a))
        .collect();
    let available = max_storage_buffers.saturating_sub(2);
    if plan.buffers.len() as u64 <= available as u64 {
        let bindings = plan
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| StorageBinding {
                binding: 2 + i as u32,
                global: buffer_global(i, &b.operands),
                word: words[i],
                members: vec![(i, 0)],
                words: words_for(b.ty.elem, b.len),
            })
            .collect::<Vec<_>>();
        let places = (0..plan.buffers.len()).map(|i| (i, 0)).collect();
        return Ok(BindingLayout {
            bindings,
            places,
            packed: false,
        });
    }
    // Packed: plain words share one u32 arena, atomics one arena per type.
    let mut arenas: BTreeMap<u8, StorageBinding> = BTreeMap::new();
    let mut places = vec![(0usize, 0u64); plan.buffers.len()];
    for (i, b) in plan.buffers.iter().enumerate() {
        let (key, word, global) = match words[i] {
            WordType::AtomicI32 => (1u8, WordType::AtomicI32, "g_arena_atomic_i32"),
            WordType::AtomicU32 => (2u8, WordType::AtomicU32, "g_arena_atomic_u32"),
            _ => (0u8, WordType::U32, "g_arena"),
        };
        let arena = arenas.entry(key).or_insert_with(|| StorageBinding {
            binding: 0,
            global: global.to_string(),
            word,
            members: vec![],
            words: 0,
        });
        arena.members.push((i, arena.words));
        places[i] = (key as usize, arena.words);
        arena.words += words_for(b.ty.elem, b.len);
    }
    let needed = 2 + arenas.len() as u32;
    if needed > max_storage_buffers {
        return Err(EmitError::TooManyBindings {
            needed,
            allowed: max_storage_buffers,
        });
    }
    let mut bindings = Vec::new();
    let mut index_of_key = HashMap::new();
    for (key, mut arena) in arenas {
        arena.binding = 2 + bindings.len() as u32;
        index_of_key.insert(key as usize, bindings.len());
        bindings.push(arena);
    }
    for place in &mut places {
        place.0 = index_of_key[&place.0];
    }
    Ok(BindingLayout {
        bindings,
        places,
        packed: true,
    })
}

/// The WGSL global of plan buffer `index` in the unpacked layout:
/// `g<index>_<first operand>`. The buffer index alone makes it unique (the
/// operand name is a hint for readers; aliases are listed in a comment), so
/// operands `x_y` and an alias `x -> y` cannot meet (see ARCHITECTURE.md,
/// "WGSL names").
fn buffer_global(index: usize, operands: &[Name]) -> String {
    let hint = operands.first().map(|n| sanitize(n)).unwrap_or_default();
    format!("g{index}_{hint}")
}

// ---- module state -----------------------------------------------------------

/// Helper functions emitted once per module when used.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Helper {
    IsNan,
    DivI32,
    DivU32,
    RemI32,
    RemU32,
    AbsI32,
    MinF32,
    MaxF32,
    F32ToI32,
    F32ToU32,
    Fmod,
    Check(usize),
    SemWait(String),
    SemTake(String),
    SemAmount,
    LoopLimit,
    Saturating,
    /// 16-bit bits to their exact f32 (`mpmd_f16_to_f32`, `mpmd_bf16_to_f32`).
    Widen(ScalarType),
    /// f32 to the nearest 16-bit float (`mpmd_f32_to_f16`, `mpmd_f32_to_bf16`).
    Narrow(ScalarType),
    /// `fma` rounded once (`mpmd_fma_f16`, `mpmd_fma_bf16`).
    Fma16(ScalarType),
    /// The f32 sum of two floats rounded to odd (for `Fma16`).
    SumToOdd,
    Min16(ScalarType),
    Max16(ScalarType),
    /// i32/u32 rounded to odd into 24 bits, as an f32 (for int → 16-bit).
    IntToF32Odd,
}

/// The name of a 16-bit float type in helper names (`f16`, `bf16`).
fn half_name(t: ScalarType) -> &'static str {
    if t == ScalarType::BF16 {
        "bf16"
    } else {
        "f16"
    }
}

/// The bits of 1.0 in a 16-bit float type.
fn half_one(t: ScalarType) -> u32 {
    mpmd_core::numerics::from_f32(t, 1.0).map_or(0, u32::from)
}

/// The NaN test on a 16-bit float's bits: exponent all ones, mantissa not zero.
fn half_is_nan(t: ScalarType, v: &str) -> String {
    let inf = if t == ScalarType::BF16 {
        "0x7f80u"
    } else {
        "0x7c00u"
    };
    format!("(({v} & 0x7fffu) > {inf})")
}

struct ModuleState<'p> {
    plan: &'p LaunchPlan,
    options: &'p EmitOptions,
    layout: BindingLayout,
    scalar_slots: Vec<(Name, ScalarType)>,
    literals: Vec<Literal>,
    literal_slot: HashMap<Literal, usize>,
    helpers: BTreeSet<Helper>,
    sites: Vec<AccessSite>,
    smem_atomic: BTreeSet<(usize, Name)>,
}

impl ModuleState<'_> {
    /// The `rt_<k>` slot of a literal read at run time.
    fn runtime_literal(&mut self, lit: Literal) -> usize {
        if let Some(&k) = self.literal_slot.get(&lit) {
            return k;
        }
        let k = self.literals.len();
        self.literals.push(lit);
        self.literal_slot.insert(lit, k);
        k
    }
}

fn wgsl_scalar(t: ScalarType) -> &'static str {
    match t {
        ScalarType::F32 => "f32",
        ScalarType::I32 => "i32",
        ScalarType::U32 => "u32",
        ScalarType::Bool => "bool",
        // A 16-bit float is its bits in the low half of a u32 (the high half zero).
        ScalarType::F16 | ScalarType::BF16 => "u32",
    }
}

/// A literal WGSL can spell directly, or `None` (NaN, infinities).
fn literal_text(lit: Literal) -> Option<String> {
    Some(match lit {
        Literal::F32(bits) => {
            let v = bits.to_f32();
            if !v.is_finite() {
                return None;
            }
            // The exact value of the f32, in the shortest decimal that reads back
            // as that value in f64: a compiler that reads the literal into f32
            // directly and one that reads it through f64 (tint, which also rejects
            // a decimal above f32::MAX, such as f32::MAX's own shortest form
            // `3.4028235e38`) both get this f32.
            let text = format!("{:?}", v as f64);
            if v.is_sign_negative() {
                format!("({text}f)")
            } else {
                format!("{text}f")
            }
        }
        Literal::I32(i32::MIN) => "bitcast<i32>(2147483648u)".to_string(),
        Literal::I32(v) if v < 0 => format!("({v}i)"),
        Literal::I32(v) => format!("{v}i"),
        Literal::U32(v) => format!("{v}u"),
        Literal::Bool(v) => v.to_string(),
        Literal::F16(bits) | Literal::BF16(bits) => format!("{bits}u"),
    })
}

fn describe_literal(lit: Literal) -> String {
    match lit {
        Literal::F32(bits) => {
            let v = bits.to_f32();
            if v.is_nan() {
                format!("NaN (0x{:08x})", bits.0)
            } else {
                format!("{v:?}")
            }
        }
        Literal::I32(v) => v.to_string(),
        Literal::U32(v) => format!("{v}u"),
        Literal::Bool(v) => v.to_string(),
        Literal::F16(_) | Literal::BF16(_) => mpmd_core::text::print_literal(lit),
    }
}

// ---- generation -------------------------------------------------------------

fn generate(plan: &LaunchPlan, options: &EmitOptions) -> Result<EmittedModule, EmitError> {
    let layout = binding_layout(plan, options.max_storage_buffers)?;
    let scalar_slots = plan
        .operands
        .iter()
        .filter_map(|o| match &o.ty {
            Type::Scalar(t) => Some((o.name.clone(), *t)),
            Type::Ref(_) => None,
        })
        .collect();
    let mut state = ModuleState {
        plan,
        options,
        layout,
        scalar_slots,
        literals: vec![],
        literal_slot: HashMap::new(),
        helpers: BTreeSet::new(),
        sites: vec![],
        smem_atomic: BTreeSet::new(),
    };

    let per_dim = options.max_workgroups_per_dimension.max(1);
    let hoistings: Vec<Hoisting> = plan
        .units
        .iter()
        .map(|unit| hoisting(plan, unit, options))
        .collect();
    // Block-split units: one dispatch per block, counted against one limit;
    // each takes its block from the call's ticket counter, less the tickets
    // of the split units before it.
    let split: Vec<bool> = (0..plan.units.len())
        .map(|u| is_split_unit(plan, options, u))
        .collect();
    // A split unit's first wave: its leading blocks that wait on nothing run
    // together in one dispatch (when there are at least two of them).
    let waves: Vec<u64> = plan
        .units
        .iter()
        .zip(&split)
        .map(|(u, &s)| if s { first_wave(u, per_dim) } else { 0 })
        .collect();
    let split_dispatches: u64 = plan
        .units
        .iter()
        .zip(&split)
        .zip(&waves)
        .filter(|((_, &s), _)| s)
        .map(|((u, _), &wave)| split_dispatch_count(u.block_count, wave))
        .sum();
    if split_dispatches > MAX_SPLIT_DISPATCHES {
        let units: Vec<String> = plan
            .units
            .iter()
            .zip(&split)
            .filter(|(_, &s)| s)
            .map(|(u, _)| {
                format!(
                    "program {} (`{}`, {} blocks)",
                    u.program, u.kernel.name, u.block_count
                )
            })
            .collect();
        return Err(EmitError::TooManyDispatches {
            units: units.join(", "),
            dispatches: split_dispatches,
            max: MAX_SPLIT_DISPATCHES,
        });
    }
    if fuses_programs(plan, options) {
        return generate_fused(state, &hoistings);
    }
    let mut ticket_base = 0u64;
    let mut entries = Vec::new();
    let mut entry_points = Vec::new();
    let mut dispatch = Vec::new();
    for (index, unit) in plan.units.iter().enumerate() {
        let name = format!("unit{index}_{}", sanitize(&unit.kernel.name));
        if split[index] {
            dispatch.push([1, 1, 1]);
            let text = UnitEmitter::new(&mut state, index, unit, name.clone(), &hoistings[index])?
                .emit_split_entry(ticket_base)?;
            ticket_base += unit.block_count;
            entries.push(text);
            entry_points.push(name);
            continue;
        }
        let max_blocks = per_dim as u64 * per_dim as u64;
        if unit.block_count > max_blocks || unit.block_count > u32::MAX as u64 {
            return Err(EmitError::TooManyBlocks {
                program: unit.program,
                kernel: unit.kernel.name.clone(),
                blocks: unit.block_count,
                max: max_blocks.min(u32::MAX as u64),
                per_dim,
            });
        }
        let (x, y) = workgroup_grid(unit.block_count, per_dim);
        dispatch.push([x, y, 1]);
        let text = UnitEmitter::new(&mut state, index, unit, name.clone(), &hoistings[index])?
            .emit_entry(y > 1)?;
        entries.push(text);
        entry_points.push(name);
    }

    // Semaphore dispatches: before each unit the waits moved out of it,
    // after it the signals; a unit's signals and the next unit's waits share
    // one dispatch unless they touch the same semaphore (one dispatch does
    // not order its invocations).
    let mut schedule = Vec::new();
    let mut moved_fns = Vec::new();
    let mut sem_entries = Vec::new();
    for gap in 0..=plan.units.len() {
        let signals = match gap.checked_sub(1) {
            Some(before) => moved_ops(&mut state, &hoistings, before, true, &mut moved_fns)?,
            None => None,
        };
        let waits = match gap < plan.units.len() {
            true => moved_ops(&mut state, &hoistings, gap, false, &mut moved_fns)?,
            false => None,
        };
        let groups = match (signals, waits) {
            (Some(s), Some(w))
                if s.buffers.is_disjoint(&w.buffers)
                    && s.blocks + w.blocks <= u32::MAX as u64 - SEMAPHORE_WORKGROUP_SIZE as u64
                    && (s.blocks + w.blocks).div_ceil(SEMAPHORE_WORKGROUP_SIZE as u64)
                        <= per_dim as u64 * per_dim as u64 =>
            {
                vec![vec![s, w]]
            }
            (s, w) => [s, w].into_iter().flatten().map(|m| vec![m]).collect(),
        };
        for group in groups {
            let name = format!("mpmd_sems{}", sem_entries.len());
            let total: u64 = group.iter().map(|m| m.blocks).sum();
            let (x, y) = workgroup_grid(total.div_ceil(SEMAPHORE_WORKGROUP_SIZE as u64), per_dim);
            sem_entries.push(semaphore_entry(plan, &name, &group, y > 1, per_dim));
            schedule.push(Dispatch {
                entry_point: name,
                workgroups: [x, y, 1],
                unit: None,
                repeat: 1,
            });
        }
        if gap < plan.units.len() {
            let blocks = plan.units[gap].block_count;
            if split[gap] && waves[gap] >= 2 {
                // The first wave in one dispatch, then the rest one block each.
                schedule.push(Dispatch {
                    entry_point: entry_points[gap].clone(),
                    workgroups: [waves[gap] as u32, 1, 1],
                    unit: Some(gap),
                    repeat: 1,
                });
                if blocks > waves[gap] {
                    schedule.push(Dispatch {
                        entry_point: entry_points[gap].clone(),
                        workgroups: dispatch[gap],
                        unit: Some(gap),
                        repeat: (blocks - waves[gap]) as u32,
                    });
                }
            } else {
                schedule.push(Dispatch {
                    entry_point: entry_points[gap].clone(),
                    workgroups: dispatch[gap],
                    unit: Some(gap),
                    repeat: if split[gap] { blocks as u32 } else { 1 },
                });
            }
        }
    }

    let mut out = String::new();
    writeln!(
        out,
        "// mpmd: map `{}` lowered to WGSL ({} mode{}).",
        plan.map.name,
        match options.mode {
            Mode::Fast => "fast",
            Mode::Checked => "checked",
        },
        if plan.map.fast_math {
            ", fast math"
        } else {
            ""
        }
    )
    .unwrap();
    out.push_str(
        "// One entry point per launch unit, and semaphore dispatches (`mpmd_sems<k>`) that\n",
    );
    out.push_str(
        "// run the units' block-level semaphore operations next to them. Dispatch order:\n",
    );
    let order: Vec<String> = schedule
        .iter()
        .map(|d| match d.repeat {
            1 => d.entry_point.clone(),
            n => format!("{} x {n}", d.entry_point),
        })
        .collect();
    writeln!(out, "// {}.", order.join(", ")).unwrap();
    for ((unit, _), &wave) in plan
        .units
        .iter()
        .zip(&split)
        .zip(&waves)
        .filter(|((_, &s), _)| s)
    {
        if wave >= 2 {
            writeln!(
                out,
                "// Program {} (`{}`) waits on its own signals and the plan has no cycle: its {} block(s) \
                 run in {} dispatches: blocks 0 to {}, which wait on nothing, together in the first, then \
                 the others one per dispatch, in linear block order, so every block it may wait on ran \
                 in an earlier dispatch.",
                unit.program,
                unit.kernel.name,
                unit.block_count,
                split_dispatch_count(unit.block_count, wave),
                wave - 1
            )
            .unwrap();
        } else {
            writeln!(
                out,
                "// Program {} (`{}`) waits on its own signals and the plan has no cycle: its {} block(s) \
                 run one per dispatch, in linear block order ({} dispatches), so every block it may wait \
                 on ran in an earlier dispatch.",
                unit.program, unit.kernel.name, unit.block_count, unit.block_count
            )
            .unwrap();
        }
    }
    out.push('\n');
    state.write_globals(&mut out);
    state.write_helpers(&mut out);
    for entry in entries.into_iter().chain(moved_fns).chain(sem_entries) {
        out.push_str(&entry);
        out.push('\n');
    }
    Ok(EmittedModule {
        wgsl: out,
        entry_points,
        dispatch,
        schedule,
        layout: state.layout,
        scalar_slots: state.scalar_slots,
        literal_words: state.literals.iter().map(|l| l.to_bits()).collect(),
        sites: state.sites,
    })
}

/// The module's first line: the map, the mode and fast math.
fn module_header(plan: &LaunchPlan, options: &EmitOptions) -> String {
    format!(
        "// mpmd: map `{}` lowered to WGSL ({} mode{}).\n",
        plan.map.name,
        match options.mode {
            Mode::Fast => "fast",
            Mode::Checked => "checked",
        },
        if plan.map.fast_math {
            ", fast math"
        } else {
            ""
        }
    )
}

/// A plan that needs co-residency, on an adapter that runs all of its
/// workgroups at once: one dispatch runs every program. Each program is a
/// function of the thread id; the entry point's workgroup takes the call's
/// next ticket and runs the program and block it names, programs in the
/// plan's topological order, so a workgroup that started has every lower
/// ticket started before it (waits on earlier programs and lower blocks
/// need no more than that; cycles need all of them resident).
fn generate_fused(
    mut state: ModuleState<'_>,
    hoistings: &[Hoisting],
) -> Result<EmittedModule, EmitError> {
    let plan = state.plan;
    let options = state.options;
    let per_dim = options.max_workgroups_per_dimension.max(1);
    let total = fused_workgroups(plan);
    let max_blocks = (per_dim as u64 * per_dim as u64).min(u32::MAX as u64);
    if total > max_blocks {
        let units: Vec<String> = plan
            .units
            .iter()
            .map(|u| format!("`{}` {}", u.kernel.name, u.block_count))
            .collect();
        return Err(EmitError::TooManyBlocks {
            program: plan.units.first().map_or(0, |u| u.program),
            kernel: format!("all programs together ({})", units.join(", ")),
            blocks: total,
            max: max_blocks,
            per_dim,
        });
    }
    let size = fused_workgroup_size(plan);
    let mut functions = Vec::new();
    let mut entry_points = Vec::new();
    let mut dispatch_lines = Vec::new();
    let mut base = 0u64;
    for (index, unit) in plan.units.iter().enumerate() {
        let name = format!("unit{index}_{}", sanitize(&unit.kernel.name));
        let mut emitter =
            UnitEmitter::new(&mut state, index, unit, name.clone(), &hoistings[index])?;
        emitter.idle_guard = unit.threads_per_block < size;
        functions.push(emitter.emit_entry_with(BlockSource::Fused(base))?);
        let end = base + unit.block_count;
        dispatch_lines.push(format!(
            "  if (ticket < {end}u) {{ {name}(mpmd_lid.x); return; }}"
        ));
        entry_points.push(name);
        base = end;
    }
    let (x, y) = workgroup_grid(total, per_dim);
    let mut out = module_header(plan, options);
    let order: Vec<String> = plan
        .units
        .iter()
        .map(|u| {
            format!(
                "program {} `{}` ({} block(s))",
                u.program, u.kernel.name, u.block_count
            )
        })
        .collect();
    writeln!(
        out,
        "// One fused dispatch ({FUSED_ENTRY_POINT}, {total} workgroup(s) of {size} invocation(s)) runs every \
         program: the plan needs co-residency ({}), and this adapter runs all of its workgroups at once \
         (declared or established). Tickets in program order: {}.",
        if plan.graph.has_cycle {
            "its programs wait on each other in a cycle"
        } else {
            "a program waits on its own signals"
        },
        order.join(", ")
    )
    .unwrap();
    out.push('\n');
    state.write_globals(&mut out);
    state.write_helpers(&mut out);
    for f in functions {
        out.push_str(&f);
        out.push('\n');
    }
    writeln!(
        out,
        "// ---- the fused dispatch: a workgroup's ticket names its program and block.\n\
         @compute @workgroup_size({size})\n\
         fn {FUSED_ENTRY_POINT}(@builtin(local_invocation_id) mpmd_lid: vec3<u32>) {{\n  \
         if (mpmd_lid.x == 0u) {{ mpmd_ticket = atomicAdd(&mpmd_status[{TICKET_WORD}], 1u); }}\n  \
         let ticket: u32 = workgroupUniformLoad(&mpmd_ticket);\n{}\n}}",
        dispatch_lines.join("\n")
    )
    .unwrap();
    Ok(EmittedModule {
        wgsl: out,
        entry_points,
        dispatch: vec![[x, y, 1]; plan.units.len()],
        schedule: vec![Dispatch {
            entry_point: FUSED_ENTRY_POINT.to_string(),
            workgroups: [x, y, 1],
            unit: None,
            repeat: 1,
        }],
        layout: state.layout,
        scalar_slots: state.scalar_slots,
        literal_words: state.literals.iter().map(|l| l.to_bits()).collect(),
        sites: state.sites,
    })
}

/// Dispatches a block-split unit of `blocks` blocks takes with a first wave
/// of `wave` blocks (a wave of fewer than two is no wave).
fn split_dispatch_count(blocks: u64, wave: u64) -> u64 {
    if wave >= 2 {
        1 + (blocks - wave)
    } else {
        blocks
    }
}

/// The leading blocks of a block-split unit that reach no wait (at most
/// `per_dim`, one dispatch dimension): they wait on nothing, so they can run
/// together in the unit's first dispatch. A block counts only where the
/// conditions over its waits are decided by its block coordinates and
/// constants (`block_reaches_wait`); anything else may wait.
fn first_wave(unit: &LaunchUnit, per_dim: u32) -> u64 {
    let limit = unit.block_count.min(per_dim as u64);
    let mut wave = 0;
    while wave < limit && !block_reaches_wait(unit, wave) {
        wave += 1;
    }
    wave
}

/// Whether block `block` of `unit` may reach a `wait` or `wait_nodec`:
/// conservative (true) wherever a condition is not decided by the block's
/// coordinates, constants and `let`s of those, and for any wait in a loop.
fn block_reaches_wait(unit: &LaunchUnit, block: u64) -> bool {
    /// `e` folded with the block's coordinates and the `let`s known so far.
    fn eval(
        unit: &LaunchUnit,
        block: u64,
        lets: &HashMap<Name, Literal>,
        e: &Expr,
    ) -> Option<Literal> {
        let axis_index = |axis: &str| {
            let a = unit
                .axes
                .iter()
                .find(|a| a.axis == axis && a.source == IdSource::Block)?;
            Some(((block / a.stride.max(1)) % a.size.max(1) as u64) as u32)
        };
        let axis_size = |axis: &str| unit.axes.iter().find(|a| a.axis == axis).map(|a| a.size);
        let name = |n: &str| lets.get(n).copied();
        mpmd_core::ir::fold::const_value(
            e,
            &mpmd_core::ir::fold::Leaves {
                name: &name,
                axis_size: &axis_size,
                axis_index: &axis_index,
            },
        )
    }
    fn reaches(
        unit: &LaunchUnit,
        block: u64,
        lets: &mut HashMap<Name, Literal>,
        body: &[Stmt],
    ) -> bool {
        for stmt in body {
            match stmt {
                Stmt::Let { var, value } => {
                    if let Some(v) = eval(unit, block, lets, value) {
                        lets.insert(var.name.clone(), v);
                    }
                }
                Stmt::Sem {
                    op: SemOp::Wait | SemOp::WaitNodec,
                    ..
                } => return true,
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    let taken = match eval(unit, block, lets, cond) {
                        Some(Literal::Bool(true)) => reaches(unit, block, lets, then_body),
                        Some(Literal::Bool(false)) => reaches(unit, block, lets, else_body),
                        _ => {
                            reaches(unit, block, lets, then_body)
                                || reaches(unit, block, lets, else_body)
                        }
                    };
                    if taken {
                        return true;
                    }
                }
                Stmt::For { body, .. } | Stmt::While { body, .. } => {
                    let mut waits = false;
                    for_each_stmt(body, &mut |s| {
                        waits |= matches!(
                            s,
                            Stmt::Sem {
                                op: SemOp::Wait | SemOp::WaitNodec,
                                ..
                            }
                        );
                    });
                    if waits {
                        return true;
                    }
                }
                _ => {}
            }
        }
        false
    }
    reaches(unit, block, &mut HashMap::new(), &unit.kernel.body)
}

/// The moved signals (or waits) of unit `index`, emitted as a function into
/// `functions`; `None` when it has none.
fn moved_ops(
    state: &mut ModuleState<'_>,
    hoistings: &[Hoisting],
    index: usize,
    signals: bool,
    functions: &mut Vec<String>,
) -> Result<Option<MovedOps>, EmitError> {
    let plan = state.plan;
    let h = &hoistings[index];
    let unit = &plan.units[index];
    let any = unit.kernel.body.iter().zip(&h.moved).any(|(stmt, &m)| {
        m && matches!(stmt, Stmt::Sem { op, .. } if (*op == SemOp::Signal) == signals)
    });
    if !any {
        return Ok(None);
    }
    let name = moved_function(index, signals);
    let text = UnitEmitter::new(state, index, unit, name.clone(), h)?.emit_moved(signals)?;
    functions.push(text);
    Ok(Some(MovedOps {
        function: name,
        unit: index,
        blocks: unit.block_count,
        buffers: h.buffers(plan, unit, signals),
        signals,
    }))
}

/// The function that runs unit `index`'s moved signals (or waits) for one block.
fn moved_function(index: usize, signals: bool) -> String {
    format!(
        "mpmd_unit{index}_{}",
        if signals { "signals" } else { "waits" }
    )
}

/// Workgroups `(x, y)` for `count` workgroups: 1-D up to the per-dimension
/// limit, then 2-D (the entry point linearises and skips the extra ones).
fn workgroup_grid(count: u64, per_dim: u32) -> (u32, u32) {
    if count <= per_dim as u64 {
        (count.max(1) as u32, 1)
    } else {
        (per_dim, count.div_ceil(per_dim as u64) as u32)
    }
}

/// Where an entry point's workgroup finds its block.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BlockSource {
    /// `workgroup_id.x`.
    OneD,
    /// `workgroup_id.x + workgroup_id.y * per_dim`, extra workgroups return.
    TwoD,
    /// The call's ticket counter less this base (one block per dispatch).
    Ticket(u64),
    /// A program's function in a fused dispatch: the workgroup's ticket
    /// (already taken) less the blocks of the programs before it.
    Fused(u64),
}

/// The semaphore operations of one unit run in a semaphore dispatch.
struct MovedOps {
    /// `fn <function>(block_id: u32)` runs them for one block.
    function: String,
    unit: usize,
    blocks: u64,
    /// The plan buffers they touch.
    buffers: BTreeSet<usize>,
    signals: bool,
}

/// A semaphore dispatch: one invocation per block of each unit in `group`.
fn semaphore_entry(
    plan: &LaunchPlan,
    name: &str,
    group: &[MovedOps],
    two_d: bool,
    per_dim: u32,
) -> String {
    let mut out = String::new();
    let what: Vec<String> = group
        .iter()
        .map(|m| {
            let unit = &plan.units[m.unit];
            format!(
                "the {} of unit {} (program {} `{}`)",
                if m.signals { "signals" } else { "waits" },
                m.unit,
                unit.program,
                unit.kernel.name
            )
        })
        .collect();
    writeln!(
        out,
        "// ---- semaphore dispatch: {}; one invocation per block.",
        what.join(", then ")
    )
    .unwrap();
    writeln!(out, "@compute @workgroup_size({SEMAPHORE_WORKGROUP_SIZE})").unwrap();
    writeln!(
        out,
        "fn {name}(@builtin(workgroup_id) mpmd_wid: vec3<u32>, @builtin(local_invocation_id) mpmd_lid: vec3<u32>) {{"
    )
    .unwrap();
    let workgroup = if two_d {
        format!("(mpmd_wid.x + mpmd_wid.y * {per_dim}u)")
    } else {
        "mpmd_wid.x".to_string()
    };
    writeln!(
        out,
        "  let slot: u32 = {workgroup} * {SEMAPHORE_WORKGROUP_SIZE}u + mpmd_lid.x;"
    )
    .unwrap();
    let mut start = 0u64;
    for m in group {
        let end = start + m.blocks;
        let block = if start == 0 {
            "slot".to_string()
        } else {
            format!("slot - {start}u")
        };
        writeln!(
            out,
            "  if (slot < {end}u) {{\n    {}({block});\n    return;\n  }}",
            m.function
        )
        .unwrap();
        start = end;
    }
    out.push_str("}\n");
    out
}

impl ModuleState<'_> {
    fn write_globals(&self, out: &mut String) {
        out.push_str(
            "// Scalar parameters, then literals that WGSL must not fold at shader creation.\n",
        );
        writeln!(
            out,
            "@group(0) @binding({PARAMS_BINDING}) var<storage, read> mpmd_params: array<u32>;"
        )
        .unwrap();
        out.push_str(
            "// Error record: count, kind, unit, block, thread, site, value count, values.\n",
        );
        writeln!(
            out,
            "@group(0) @binding({STATUS_BINDING}) var<storage, read_write> mpmd_status: array<atomic<u32>, {STATUS_WORDS}>;"
        )
        .unwrap();
        for b in &self.layout.bindings {
            let names: Vec<String> = b
                .members
                .iter()
                .map(|&(i, off)| {
                    let buf = &self.plan.buffers[i];
                    let owner = buf
                        .ty
                        .owner
                        .as_ref()
                        .map(|m| format!(" @ {m}"))
                        .unwrap_or_default();
                    let at = if self.layout.packed {
                        format!(" at word {off}")
                    } else {
                        String::new()
                    };
                    format!(
                        "{} ({}<{}{:?}>{owner}, {} instance(s)){at}",
                        buf.operands.join(" = "),
                        buf.ty.space.keyword(),
                        buf.ty.elem,
                        buf.ty.shape,
                        buf.instances
                    )
                })
                .collect();
            writeln!(out, "// {}", names.join("; ")).unwrap();
            writeln!(
                out,
                "@group(0) @binding({}) var<storage, read_write> {}: array<{}>;",
                b.binding,
                b.global,
                b.word.wgsl()
            )
            .unwrap();
        }
        out.push('\n');
        out.push_str("// Where the current invocation is, for error records.\n");
        out.push_str("var<private> mpmd_unit: u32;\nvar<private> mpmd_block_id: u32;\nvar<private> mpmd_thread_id: u32;\n");
        if self.options.loop_cap.is_some() {
            out.push_str("// Iterations of every loop this invocation ran (see mpmd_loop_tick).\n");
            out.push_str("var<private> mpmd_loop_count: u32;\n");
            out.push_str("// Set when some invocation of the block passed the loop cap.\n");
            out.push_str("var<workgroup> mpmd_block_stop: u32;\n");
            out.push_str(
                "// Thread 0's loop count after a semaphore wait, shared with the block.\n",
            );
            out.push_str("var<workgroup> mpmd_shared_count: u32;\n");
        }
        out.push_str("// Block-collective broadcast of semaphore reads.\n");
        out.push_str("var<workgroup> mpmd_sem_value: i32;\n");
        if splits_blocks(self.plan, self.options) || fuses_programs(self.plan, self.options) {
            out.push_str(
                "// The workgroup's ticket (its block, or in a fused dispatch its program and block).\n",
            );
            out.push_str("var<workgroup> mpmd_ticket: u32;\n");
        }
        if fuses_programs(self.plan, self.options) {
            out.push_str("// An invocation beyond its program's threads in a fused workgroup.\n");
            out.push_str("var<private> mpmd_idle: bool;\n");
        }
        for (idx, unit) in self.plan.units.iter().enumerate() {
            for slot in &unit.smem {
                let op = &self.plan.operands[slot.operand];
                if let Type::Ref(r) = &op.ty {
                    let atomic = self.smem_atomic.contains(&(idx, op.name.clone()));
                    let word = WordType::for_elem(r.elem, atomic);
                    writeln!(
                        out,
                        "// smem {} of program {} ({}<{}{:?}>)",
                        op.name,
                        unit.program,
                        r.space.keyword(),
                        r.elem,
                        r.shape
                    )
                    .unwrap();
                    writeln!(
                        out,
                        "var<workgroup> {}: array<{}, {}>;",
                        smem_global(idx, &op.name),
                        word.wgsl(),
                        words_for(r.elem, r.len()).max(1)
                    )
                    .unwrap();
                }
            }
        }
        out.push('\n');
    }

    fn write_helpers(&self, out: &mut String) {
        if fuses_programs(self.plan, self.options) {
            // An idle invocation computes what its thread computes, so it would
            // report that thread's out-of-bounds accesses and loop limits
            // under its own id.
            out.push_str(&REPORT_HELPER.replace(
                "{\n  if (atomicAdd",
                &format!(
                    "{{\n  if (mpmd_idle && (kind == {ERROR_OUT_OF_BOUNDS}u || kind == {ERROR_LOOP_LIMIT}u)) {{ return; }}\n  if (atomicAdd"
                ),
            ));
        } else {
            out.push_str(REPORT_HELPER);
        }
        if let Some(cap) = self.options.loop_cap {
            let cap = cap.min(u32::MAX - 2);
            write!(
                out,
                "// The adapter silently ends all loops of an invocation after about 65,535 loop
// header visits in total, which would give wrong answers; every loop the backend
// emits counts here (entry and iterations) and stops first, reporting the error.
fn mpmd_loop_pay(visits: u32) -> bool {{
  if (mpmd_loop_count > {cap}u) {{
    return true;
  }}
  if (visits > {cap}u - mpmd_loop_count) {{
    // The record says what was used and what the next loop needed.
    mpmd_report({ERROR_LOOP_CAP}u, 0u, 2u, array<u32, {MAX_RECORDED_VALUES}>(mpmd_loop_count, visits, 0u, 0u, 0u, 0u, 0u, 0u));
    mpmd_loop_count = {over}u;
    return true;
  }}
  mpmd_loop_count = mpmd_loop_count + visits;
  return false;
}}

fn mpmd_loop_tick() -> bool {{
  return mpmd_loop_pay(1u);
}}

",
                over = cap as u64 + 1
            )
            .unwrap();
        }
        let (enter, tick) = if self.options.loop_cap.is_some() {
            (
                "  _ = mpmd_loop_tick();\n",
                "    if (mpmd_loop_tick()) { break; }\n",
            )
        } else {
            ("", "")
        };
        for helper in &self.helpers {
            match helper {
                Helper::Saturating => out.push_str(
                    "// Saturating u32 arithmetic for loop costs.
fn mpmd_sat_add(a: u32, b: u32) -> u32 {
  if (a > 4294967295u - b) { return 4294967295u; }
  return a + b;
}

fn mpmd_sat_mul(a: u32, b: u32) -> u32 {
  if (a != 0u && b > 4294967295u / a) { return 4294967295u; }
  return a * b;
}

",
                ),
                Helper::LoopLimit => write!(
                    out,
                    "// Checked mode: a `while` whose condition still holds after its maximum.
fn mpmd_loop_limit(ordinal: u32, max: u32) {{
  mpmd_report({ERROR_LOOP_LIMIT}u, 0u, 2u, array<u32, {MAX_RECORDED_VALUES}>(ordinal, max, 0u, 0u, 0u, 0u, 0u, 0u));
}}

"
                )
                .unwrap(),
                Helper::SemAmount => write!(
                    out,
                    "// A semaphore amount below 1 is an error (DESIGN.md): report it (semaphore
// element, amount, whether it is a u32) and skip the operation.
fn mpmd_sem_amount_ok(amount: i32, index: u32, site: u32, unsigned: bool) -> bool {{
  if (amount >= 1i) {{ return true; }}
  mpmd_report({ERROR_SEM_AMOUNT}u, site, 3u, array<u32, {MAX_RECORDED_VALUES}>(index, bitcast<u32>(amount), u32(unsigned), 0u, 0u, 0u, 0u, 0u));
  return false;
}}

"
                )
                .unwrap(),
                Helper::IsNan => out.push_str(
                    "// NaN test on the bits: float comparisons may be optimised as if NaN never occurs.
fn mpmd_is_nan(x: f32) -> bool {
  return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

",
                ),
                Helper::DivI32 => out.push_str(
                    "// Division by zero returns the dividend; i32::MIN / -1 wraps to i32::MIN.
fn mpmd_div_i32(a: i32, b: i32) -> i32 {
  if (b == 0i) { return a; }
  if (bitcast<u32>(b) == 0xffffffffu) { return 0i - a; }
  return a / b;
}

",
                ),
                Helper::DivU32 => out.push_str(
                    "// Division by zero returns the dividend.
fn mpmd_div_u32(a: u32, b: u32) -> u32 {
  if (b == 0u) { return a; }
  return a / b;
}

",
                ),
                Helper::RemI32 => out.push_str(
                    "// Remainder by zero is 0; x % -1 is 0 (also for i32::MIN).
fn mpmd_rem_i32(a: i32, b: i32) -> i32 {
  if (b == 0i || bitcast<u32>(b) == 0xffffffffu) { return 0i; }
  return a % b;
}

",
                ),
                Helper::RemU32 => out.push_str(
                    "// Remainder by zero is 0.
fn mpmd_rem_u32(a: u32, b: u32) -> u32 {
  if (b == 0u) { return 0u; }
  return a % b;
}

",
                ),
                Helper::AbsI32 => out.push_str(
                    "// abs(i32::MIN) wraps to i32::MIN.
fn mpmd_abs_i32(a: i32) -> i32 {
  if (a < 0i) { return 0i - a; }
  return a;
}

",
                ),
                Helper::MinF32 => out.push_str(
                    "// With one NaN operand, min returns the other operand.
fn mpmd_min_f32(a: f32, b: f32) -> f32 {
  if (mpmd_is_nan(a)) { return b; }
  if (mpmd_is_nan(b)) { return a; }
  return select(b, a, a < b);
}

",
                ),
                Helper::MaxF32 => out.push_str(
                    "// With one NaN operand, max returns the other operand.
fn mpmd_max_f32(a: f32, b: f32) -> f32 {
  if (mpmd_is_nan(a)) { return b; }
  if (mpmd_is_nan(b)) { return a; }
  return select(b, a, a > b);
}

",
                ),
                Helper::F32ToI32 => out.push_str(
                    "// Rust `as`: truncate toward zero, saturate, NaN to 0.
fn mpmd_f32_to_i32(x: f32) -> i32 {
  if (mpmd_is_nan(x)) { return 0i; }
  if (x >= 2147483648.0f) { return 2147483647i; }
  if (x < -2147483648.0f) { return bitcast<i32>(2147483648u); }
  return i32(x);
}

",
                ),
                Helper::F32ToU32 => out.push_str(
                    "// Rust `as`: truncate toward zero, saturate, NaN to 0.
fn mpmd_f32_to_u32(x: f32) -> u32 {
  if (mpmd_is_nan(x) || x <= 0.0f) { return 0u; }
  if (x >= 4294967296.0f) { return 4294967295u; }
  return u32(x);
}

",
                ),
                Helper::Fmod => write!(
                    out,
                    "// C fmodf (Rust's `%` on f32), exact, on the bits: WGSL's float `%` is
// x - y * trunc(x / y), which rounds.
fn mpmd_fmod(x: f32, y: f32) -> f32 {{
  let ux = bitcast<u32>(x);
  let uy = bitcast<u32>(y);
  let sign = ux & 0x80000000u;
  let ax = ux & 0x7fffffffu;
  let ay = uy & 0x7fffffffu;
  if (ay == 0u || ax >= 0x7f800000u || ay > 0x7f800000u) {{
    return bitcast<f32>(ux | 0x7fc00000u);
  }}
  if (ax < ay) {{ return x; }}
  if (ax == ay) {{ return bitcast<f32>(sign); }}
  var ex = i32(ax >> 23u);
  var mx = ax;
  if (ex == 0i) {{
    let shift = countLeadingZeros(ax) - 8u;
    mx = ax << shift;
    ex = 1i - i32(shift);
  }} else {{
    mx = (ax & 0x007fffffu) | 0x00800000u;
  }}
  var ey = i32(ay >> 23u);
  var my = ay;
  if (ey == 0i) {{
    let shift = countLeadingZeros(ay) - 8u;
    my = ay << shift;
    ey = 1i - i32(shift);
  }} else {{
    my = (ay & 0x007fffffu) | 0x00800000u;
  }}
{enter}  loop {{
    if (ex <= ey) {{ break; }}
{tick}    if (mx >= my) {{
      mx = mx - my;
      if (mx == 0u) {{ return bitcast<f32>(sign); }}
    }}
    mx = mx << 1u;
    ex = ex - 1i;
  }}
  if (mx >= my) {{
    mx = mx - my;
    if (mx == 0u) {{ return bitcast<f32>(sign); }}
  }}
  let shift = countLeadingZeros(mx) - 8u;
  mx = mx << shift;
  ex = ex - i32(shift);
  if (ex > 0i) {{
    mx = (mx - 0x00800000u) | (u32(ex) << 23u);
  }} else {{
    mx = mx >> u32(1i - ex);
  }}
  return bitcast<f32>(mx | sign);
}}

"
                )
                .unwrap(),
                Helper::Widen(ScalarType::BF16) => out.push_str(
                    "// bf16 bits to f32 (exact: the bits are the f32's high half).
fn mpmd_bf16_to_f32(h: u32) -> f32 {
  return bitcast<f32>(h << 16u);
}

",
                ),
                Helper::Widen(_) => out.push_str(
                    "// f16 bits to f32, exact, on the bits (f16 subnormals are f32 normals).
fn mpmd_f16_to_f32(h: u32) -> f32 {
  let sign = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0x1fu) { return bitcast<f32>(sign | 0x7f800000u | (m << 13u)); }
  if (e != 0u) { return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u)); }
  if (m == 0u) { return bitcast<f32>(sign); }
  // Subnormal m * 2^-24: move the leading 1 to bit 10.
  let shift = countLeadingZeros(m) - 21u;
  return bitcast<f32>(sign | ((113u - shift) << 23u) | (((m << shift) & 0x3ffu) << 13u));
}

",
                ),
                Helper::Narrow(ScalarType::BF16) => out.push_str(
                    "// f32 to the nearest bf16 (ties to even, overflow to infinity, NaN stays NaN),
// on the bits: WGSL does not pin down the rounding of its own conversions.
fn mpmd_f32_to_bf16(x: f32) -> u32 {
  let u = bitcast<u32>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; }
  let up = ((u >> 15u) & 1u) == 1u && ((u & 0x7fffu) != 0u || ((u >> 16u) & 1u) == 1u);
  return (u >> 16u) + u32(up);
}

",
                ),
                Helper::Narrow(_) => out.push_str(
                    "// f32 to the nearest f16 (ties to even, overflow to infinity, NaN stays NaN,
// subnormals kept), on the bits: WGSL does not pin down the rounding of f16().
fn mpmd_f32_to_f16(x: f32) -> u32 {
  let u = bitcast<u32>(x);
  let sign = (u >> 16u) & 0x8000u;
  let a = u & 0x7fffffffu;
  if (a > 0x7f800000u) { return sign | 0x7e00u; }
  // 65520 (the largest f16 plus half an ulp) and above round to infinity.
  if (a >= 0x477ff000u) { return sign | 0x7c00u; }
  if (a >= 0x38800000u) {
    // Normal: rebias the exponent, keep 10 mantissa bits, round the 13 dropped.
    let h = (a - 0x38000000u) >> 13u;
    let rest = a & 0x1fffu;
    let up = rest > 0x1000u || (rest == 0x1000u && (h & 1u) == 1u);
    return sign | (h + u32(up));
  }
  // Below 2^-25 (half the smallest subnormal; 2^-25 itself ties to even 0).
  if (a < 0x33000000u) { return sign; }
  // Subnormal: the value in units of 2^-24, rounded (a carry gives the smallest normal).
  let m = (a & 0x7fffffu) | 0x800000u;
  let shift = 126u - (a >> 23u);
  let q = m >> shift;
  let rest = m & ((1u << shift) - 1u);
  let half = 1u << (shift - 1u);
  let up = rest > half || (rest == half && (q & 1u) == 1u);
  return sign | (q + u32(up));
}

",
                ),
                Helper::SumToOdd => out.push_str(
                    "// p + z rounded to odd: the nearest f32, stepped one ulp toward the exact sum
// when inexact and even, so that rounding it to 16 bits later rounds p + z once.
// TwoSum gives the exact error; every step goes through `one` (1.0 read at run
// time), so a compiler that reassociates floats cannot fold the error to zero.
fn mpmd_sum_to_odd(p: f32, z: f32, one: f32) -> f32 {
  let s = p + z;
  let bits = bitcast<u32>(s);
  if ((bits & 0x7f800000u) == 0x7f800000u || (bits & 1u) == 1u) { return s; }
  let s1 = s * one;
  let bv = s1 - p;
  let av = s1 - bv * one;
  let err = (p - av) + (z - bv);
  if (err == 0.0f) { return s; }
  if ((err > 0.0f) == (s > 0.0f)) { return bitcast<f32>(bits + 1u); }
  return bitcast<f32>(bits - 1u);
}

",
                ),
                Helper::Fma16(ScalarType::BF16) => out.push_str(
                    "// fma on bf16, rounded once: the product of two bf16 is exact in f32 unless it
// leaves f32's range, the sum is rounded to odd (24 bits, 16 more than bf16 has),
// then to bf16. A product past f32's largest (a and b finite) is computed 2^64
// smaller and scaled back; a c below 2^-40 then only decides a tie of the product
// (it is far below the product's ulp), so it becomes +-2^-40, which scales
// without underflow.
fn mpmd_fma_bf16(a: u32, b: u32, c: u32, one: f32) -> u32 {
  let wa = mpmd_bf16_to_f32(a);
  let wb = mpmd_bf16_to_f32(b);
  let wc = mpmd_bf16_to_f32(c);
  let p = wa * wb;
  let finite = (a & 0x7f80u) != 0x7f80u && (b & 0x7f80u) != 0x7f80u;
  if (finite && (bitcast<u32>(p) & 0x7fffffffu) == 0x7f800000u) {
    let down = bitcast<f32>(0x1f800000u);
    let tiny = (c & 0x7fffu) != 0u && (c & 0x7fffu) < 0x2b80u;
    let z = select(wc, bitcast<f32>(((c & 0x8000u) << 16u) | 0x2b800000u), tiny);
    let r = mpmd_sum_to_odd((wa * down) * wb, z * down, one);
    return mpmd_f32_to_bf16(r * bitcast<f32>(0x5f800000u));
  }
  return mpmd_f32_to_bf16(mpmd_sum_to_odd(p, wc, one));
}

",
                ),
                Helper::Fma16(_) => out.push_str(
                    "// fma on f16, rounded once: the product of two f16 is exact in f32 (22 bits,
// 2^-48 to 2^32), the sum is rounded to odd (24 bits, 13 more than f16 has),
// then to f16.
fn mpmd_fma_f16(a: u32, b: u32, c: u32, one: f32) -> u32 {
  let p = mpmd_f16_to_f32(a) * mpmd_f16_to_f32(b);
  return mpmd_f32_to_f16(mpmd_sum_to_odd(p, mpmd_f16_to_f32(c), one));
}

",
                ),
                Helper::Min16(t) | Helper::Max16(t) => {
                    let n = half_name(*t);
                    let (what, cmp) = if matches!(helper, Helper::Min16(_)) {
                        ("min", "<")
                    } else {
                        ("max", ">")
                    };
                    write!(
                        out,
                        "// {what} on {n} bits: with one NaN operand, the other operand.
fn mpmd_{what}_{n}(a: u32, b: u32) -> u32 {{
  if {nan_a} {{ return b; }}
  if {nan_b} {{ return a; }}
  return select(b, a, mpmd_{n}_to_f32(a) {cmp} mpmd_{n}_to_f32(b));
}}

",
                        nan_a = half_is_nan(*t, "a"),
                        nan_b = half_is_nan(*t, "b"),
                    )
                    .unwrap();
                }
                Helper::IntToF32Odd => out.push_str(
                    "// An integer rounded to odd into 24 bits, as an f32 (exact): rounding that to
// 16 bits rounds the integer once (a nearest f32 would round twice above 2^24).
fn mpmd_u32_to_f32_odd(v: u32) -> f32 {
  if (v < 0x1000000u) { return f32(v); }
  let shift = 8u - countLeadingZeros(v);
  let kept = (v >> shift) | u32((v & ((1u << shift) - 1u)) != 0u);
  return f32(kept) * bitcast<f32>((127u + shift) << 23u);
}

fn mpmd_i32_to_f32_odd(v: i32) -> f32 {
  let magnitude = mpmd_u32_to_f32_odd(select(bitcast<u32>(v), 0u - bitcast<u32>(v), v < 0i));
  return select(magnitude, -magnitude, v < 0i);
}

",
                ),
                Helper::Check(n) => {
                    let n = *n;
                    let params: Vec<String> = (0..n).map(|k| format!("i{k}: u32, n{k}: u32")).collect();
                    let oob: Vec<String> = (0..n).map(|k| format!("i{k} >= n{k}")).collect();
                    let mut values: Vec<String> =
                        (0..n.min(MAX_RECORDED_VALUES)).map(|k| format!("i{k}")).collect();
                    values.resize(MAX_RECORDED_VALUES, "0u".to_string());
                    let mut offset = "i0".to_string();
                    for k in 1..n {
                        offset = format!("({offset}) * n{k} + i{k}");
                    }
                    write!(
                        out,
                        "// Checked mode: row-major offset of ({n} coordinates), or 0 after reporting.
fn mpmd_check{n}(site: u32, {params}) -> u32 {{
  if ({oob}) {{
    mpmd_report({ERROR_OUT_OF_BOUNDS}u, site, {n}u, array<u32, {MAX_RECORDED_VALUES}>({values}));
    return 0u;
  }}
  return {offset};
}}

",
                        params = params.join(", "),
                        oob = oob.join(" || "),
                        values = values.join(", "),
                    )
                    .unwrap();
                }
                Helper::SemWait(global) => {
                    let budget = self.options.wait_poll_budget.max(1);
                    // Only a loop cap limits the polls; without one, a poll is one look.
                    let per_poll = if self.options.loop_cap.is_some() {
                        POLL_LOOKS
                    } else {
                        1
                    };
                    let looks = format!(
                        "    if (seen < amount) {{ seen = atomicAdd(&{global}[index], 0i); }}\n"
                    )
                    .repeat(per_poll as usize - 1);
                    write!(
                        out,
                        "// Semaphore wait on {global}, run by thread 0 of the block: poll until the count
// reaches `amount` (then take it, unless `take` is false). Bounded: after {budget}
// polls, or once another error is recorded, it reports and gives up: never a hang.
// A poll looks {per_poll} time(s), unrolled: under a loop cap, where each poll is one loop
// visit, a longer poll outlasts a loaded machine's scheduling delays. It looks
// with `atomicAdd(.., 0)`, a read-modify-write no compiler hoists out of the loop: on
// lavapipe (Mesa 22.3) a spin of `atomicLoad`s never saw another workgroup's write
// (backend-wgpu/src/residency.rs).
fn mpmd_wait_{global}(index: u32, amount: i32, take: bool, site: u32) {{
  var polls: u32 = 0u;
{enter}  loop {{
{tick}    var seen: i32 = atomicAdd(&{global}[index], 0i);
{looks}    if (seen >= amount) {{
      if (!take) {{ return; }}
      let swap = atomicCompareExchangeWeak(&{global}[index], seen, seen - amount);
      if (swap.exchanged) {{ return; }}
    }} else {{
      polls = polls + 1u;
      if (polls >= {budget}u) {{
        mpmd_report({ERROR_WAIT_TIMEOUT}u, site, 1u, array<u32, {MAX_RECORDED_VALUES}>(index, 0u, 0u, 0u, 0u, 0u, 0u, 0u));
        return;
      }}
      if (atomicAdd(&mpmd_status[0], 0u) != 0u) {{ return; }}
    }}
  }}
}}

"
                    )
                    .unwrap();
                }
                Helper::SemTake(global) => {
                    write!(
                        out,
                        "// Semaphore wait on {global}, run once per block (by thread 0, or by the block's
// invocation of a semaphore dispatch), when every program that signals it ran in
// an earlier dispatch: the count can no longer grow, so one
// look decides. Short: nothing is taken and the deadlock is reported. A take that
// fails gives its amount back; only a take that found the count already short can
// fail, so the first failure is always a real one.
// Kept small: llvmpipe runs a branch's atomics for every SIMD vector of the block,
// lanes masked off or not, so each atomic here costs every block. The report relies
// on the status buffer being zero at the start of the call (thread 0, other values)
// and the host takes the unit from the site.
fn mpmd_take_{global}(index: u32, amount: i32, take: bool, site: u32) {{
  if (take) {{
    let before = atomicSub(&{global}[index], amount);
    if (before >= amount) {{ return; }}
    atomicAdd(&{global}[index], amount);
  }} else if (atomicLoad(&{global}[index]) >= amount) {{
    return;
  }}
  if (atomicAdd(&mpmd_status[0], 1u) != 0u) {{ return; }}
  atomicStore(&mpmd_status[1], {ERROR_WAIT_TIMEOUT}u);
  atomicStore(&mpmd_status[3], mpmd_block_id);
  atomicStore(&mpmd_status[5], site);
  atomicStore(&mpmd_status[7], index);
}}

"
                    )
                    .unwrap();
                }
            }
        }
    }
}

const REPORT_HELPER: &str =
    "// Records the first error of the call; the host turns it into a RunError.
fn mpmd_report(kind: u32, site: u32, count: u32, values: array<u32, 8>) {
  if (atomicAdd(&mpmd_status[0], 1u) != 0u) { return; }
  atomicStore(&mpmd_status[1], kind);
  atomicStore(&mpmd_status[2], mpmd_unit);
  atomicStore(&mpmd_status[3], mpmd_block_id);
  atomicStore(&mpmd_status[4], mpmd_thread_id);
  atomicStore(&mpmd_status[5], site);
  atomicStore(&mpmd_status[6], count);
  atomicStore(&mpmd_status[7], values[0]);
  atomicStore(&mpmd_status[8], values[1]);
  atomicStore(&mpmd_status[9], values[2]);
  atomicStore(&mpmd_status[10], values[3]);
  atomicStore(&mpmd_status[11], values[4]);
  atomicStore(&mpmd_status[12], values[5]);
  atomicStore(&mpmd_status[13], values[6]);
  atomicStore(&mpmd_status[14], values[7]);
}

";

fn smem_global(unit: usize, name: &str) -> String {
    format!("s{unit}_{}", sanitize(name))
}

// ---- one unit -----------------------------------------------------------------

/// How many blocks deep a kernel body's statements may nest in WGSL. tint
/// counts two levels per `if` or `for` (the statement and its block) and
/// stops at 127; the emitter adds at most a few levels of its own (loop-cap
/// checks, short-circuit guards) below a user statement.
pub const MAX_STATEMENT_NESTING: usize = 48;

/// Else-if chains of this many arms or more are written flat
/// (`UnitEmitter::else_if_chain`); shorter ones keep WGSL's `else if`.
const FLAT_ELSE_IF: usize = 8;

/// An `if` / `else if` chain: the arms in order and the final `else` body.
struct ElseIfChain<'b> {
    arms: Vec<(&'b Expr, &'b [Stmt])>,
    last: &'b [Stmt],
}

/// Whether a semaphore amount is checked at run time (`UnitEmitter::amount_check`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AmountCheck {
    Literal,
    Signed,
    Unsigned,
}

/// How deeply one WGSL expression may nest (parentheses, calls and unary
/// operators, counted generously) before the emitter puts it in a `let`
/// temporary. tint's parser stops at 127 levels of statements and
/// expressions together and naga's at a few hundred; this leaves room for
/// the statements around the expression (`MAX_STATEMENT_NESTING`).
const MAX_EXPR_DEPTH: u32 = 24;

/// An emitted expression.
#[derive(Clone, Debug)]
struct Value {
    text: String,
    ty: ScalarType,
    /// How deeply `text` nests (see `MAX_EXPR_DEPTH`).
    depth: u32,
    /// Every leaf is a literal or an axis size (WGSL would fold it).
    constant: bool,
    /// A literal not yet written: its parent decides whether it is spelled
    /// or read at run time (`UnitEmitter::spell`); `text` is empty until then.
    leaf: Option<Literal>,
}

impl Value {
    fn leaf(lit: Literal) -> Value {
        Value {
            text: String::new(),
            ty: lit.ty(),
            depth: 0,
            constant: true,
            leaf: Some(lit),
        }
    }

    fn text(text: String, ty: ScalarType, constant: bool) -> Value {
        Value {
            text,
            ty,
            depth: 0,
            constant,
            leaf: None,
        }
    }

    /// An operation on `operands` (already spelled).
    fn op(text: String, ty: ScalarType, operands: &[&Value]) -> Value {
        Value {
            text,
            ty,
            depth: operands.iter().map(|v| v.depth).max().unwrap_or(0) + 4,
            constant: operands.iter().all(|v| v.constant),
            leaf: None,
        }
    }

    fn is_f32_leaf(&self) -> bool {
        matches!(self.leaf, Some(Literal::F32(_)))
    }
}

/// How a ref is stored.
#[derive(Clone, Debug)]
enum Storage {
    /// A plan buffer in a storage binding, at a word offset.
    Buffer {
        global: String,
        word: WordType,
        offset: u64,
    },
    /// A `var<workgroup>` array.
    Shared { global: String, word: WordType },
    /// A function-scope array (`local`).
    Local { var: String },
}

#[derive(Clone, Debug)]
struct RefInfo {
    ty: RefType,
    storage: Storage,
}

#[derive(Clone, Debug)]
enum Named {
    /// `uniform`: the same value in every thread of the block (constants,
    /// scalar parameters, block axis indices and values computed from them).
    Scalar {
        wgsl: String,
        ty: ScalarType,
        uniform: bool,
    },
    Ref(RefInfo),
}

struct UnitEmitter<'s, 'p> {
    state: &'s mut ModuleState<'p>,
    index: usize,
    unit: &'p LaunchUnit,
    entry: String,
    scopes: Vec<HashMap<Name, Named>>,
    used: HashSet<String>,
    rt_used: BTreeSet<usize>,
    body: String,
    depth: usize,
    temp: usize,
    /// Inside a region whose loop cost was paid at its entry (no ticks).
    paid: bool,
    /// Every semaphore's signallers run in earlier dispatches than its
    /// waiters (the plan needs no co-residency): a wait looks once.
    ordered_by_dispatch: bool,
    /// The statement being emitted is a top-level semaphore operation whose
    /// barrier no thread of the block can observe (see `unobservable_sem_barriers`).
    sem_barrier_unobservable: bool,
    /// The top-level semaphore operations that run in semaphore dispatches.
    hoisting: Hoisting,
    /// `while` loops emitted so far: the next one's ordinal.
    next_while: u32,
    /// A program of a fused dispatch with fewer threads than its workgroup:
    /// the extra invocations (`mpmd_idle`) skip stores and atomics.
    idle_guard: bool,
}

fn contains_collective(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Barrier | Stmt::Sem { .. } | Stmt::SemRead { .. } => true,
        Stmt::If {
            then_body,
            else_body,
            ..
        } => contains_collective(then_body) || contains_collective(else_body),
        Stmt::For { body, .. } | Stmt::While { body, .. } => contains_collective(body),
        _ => false,
    })
}

impl<'s, 'p> UnitEmitter<'s, 'p> {
    fn new(
        state: &'s mut ModuleState<'p>,
        index: usize,
        unit: &'p LaunchUnit,
        entry: String,
        hoisting: &Hoisting,
    ) -> Result<Self, EmitError> {
        let plan = state.plan;
        let mut smem_atomics = HashSet::new();
        collect_atomic_targets(&unit.kernel.body, &mut smem_atomics);
        let mut stored = HashSet::new();
        collect_store_targets(&unit.kernel.body, &mut stored);
        let mut top = HashMap::new();
        if unit.kernel.params.len() != plan.operands.len() {
            return Err(EmitError::Invalid {
                kernel: unit.kernel.name.clone(),
                message: format!(
                    "{} parameters but the map has {} operands",
                    unit.kernel.params.len(),
                    plan.operands.len()
                ),
            });
        }
        let mut scalar_index = 0usize;
        let mut used = HashSet::new();
        for (param, operand) in unit.kernel.params.iter().zip(&plan.operands) {
            match &param.ty {
                Type::Scalar(t) => {
                    let wgsl = format!("v_{}", sanitize(&param.name));
                    used.insert(wgsl.clone());
                    top.insert(
                        param.name.clone(),
                        Named::Scalar {
                            wgsl,
                            ty: *t,
                            uniform: true,
                        },
                    );
                    scalar_index += 1;
                }
                Type::Ref(r) => {
                    let storage = match (r.space, operand.buffer) {
                        (MemorySpace::Smem, _) => {
                            // 16-bit smem that is stored to: atomic words, as for gmem.
                            let atomic = smem_atomics.contains(&param.name)
                                || (r.elem.is_16bit() && stored.contains(&param.name));
                            if atomic {
                                state.smem_atomic.insert((index, operand.name.clone()));
                            }
                            Storage::Shared {
                                global: smem_global(index, &operand.name),
                                word: WordType::for_elem(r.elem, atomic),
                            }
                        }
                        (_, Some(buffer)) => {
                            let (binding, offset) = state.layout.places[buffer];
                            let b = &state.layout.bindings[binding];
                            Storage::Buffer {
                                global: b.global.clone(),
                                word: b.word,
                                offset,
                            }
                        }
                        (_, None) => {
                            return Err(EmitError::Invalid {
                                kernel: unit.kernel.name.clone(),
                                message: format!(
                                    "operand `{}` has no buffer in the plan",
                                    operand.name
                                ),
                            })
                        }
                    };
                    top.insert(
                        param.name.clone(),
                        Named::Ref(RefInfo {
                            ty: r.clone(),
                            storage,
                        }),
                    );
                }
            }
        }
        let _ = scalar_index;
        let ordered_by_dispatch = !plan.needs_co_residency() || splits_blocks(plan, state.options);
        Ok(UnitEmitter {
            state,
            index,
            unit,
            entry,
            scopes: vec![top],
            used,
            rt_used: BTreeSet::new(),
            body: String::new(),
            depth: 1,
            temp: 0,
            paid: false,
            ordered_by_dispatch,
            sem_barrier_unobservable: false,
            hoisting: hoisting.clone(),
            next_while: 0,
            idle_guard: false,
        })
    }

    fn invalid(&self, message: impl Into<String>) -> EmitError {
        EmitError::Invalid {
            kernel: self.unit.kernel.name.clone(),
            message: message.into(),
        }
    }

    fn line(&mut self, text: &str) {
        for _ in 0..self.depth {
            self.body.push_str("  ");
        }
        self.body.push_str(text);
        self.body.push('\n');
    }

    fn lookup(&self, name: &str) -> Option<&Named> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    /// A fresh WGSL name for an IR binding (IR names may be shadowed).
    fn fresh(&mut self, prefix: &str, name: &str) -> String {
        let base = format!("{prefix}{}", sanitize(name));
        let mut candidate = base.clone();
        let mut k = 1;
        while self.used.contains(&candidate) {
            k += 1;
            candidate = format!("{base}_{k}");
        }
        self.used.insert(candidate.clone());
        candidate
    }

    fn temp(&mut self, what: &str) -> String {
        self.temp += 1;
        format!("mpmd_{what}{}", self.temp)
    }

    fn bind_scalar(&mut self, name: &str, ty: ScalarType) -> String {
        self.bind_scalar_with(name, ty, false)
    }

    fn bind_scalar_with(&mut self, name: &str, ty: ScalarType, uniform: bool) -> String {
        let wgsl = self.fresh("v_", name);
        self.scopes.last_mut().unwrap().insert(
            name.to_string(),
            Named::Scalar {
                wgsl: wgsl.clone(),
                ty,
                uniform,
            },
        );
        wgsl
    }

    /// Whether `e` has one value in every thread of the block.
    fn is_uniform(&self, e: &Expr) -> bool {
        match e {
            Expr::Lit(_) | Expr::AxisSize(_) => true,
            Expr::Var(name) => {
                matches!(self.lookup(name), Some(Named::Scalar { uniform: true, .. }))
            }
            Expr::AxisIndex(axis) => self
                .unit
                .axes
                .iter()
                .any(|a| &a.axis == axis && a.source == IdSource::Block),
            Expr::Load(_) => false,
            Expr::Unary(_, a) | Expr::Cast(_, a) | Expr::Bitcast(_, a) => self.is_uniform(a),
            Expr::Binary(_, a, b) => self.is_uniform(a) && self.is_uniform(b),
            Expr::Select(c, t, f) => self.is_uniform(c) && self.is_uniform(t) && self.is_uniform(f),
            Expr::Math(_, args) => args.iter().all(|a| self.is_uniform(a)),
        }
    }

    /// The loop-header visits `body` costs at most (both branches of every
    /// `if`), as a WGSL expression evaluated before it; `None` when it has
    /// no loop, `Err` when a loop bound is not known before the region.
    fn cost(&mut self, body: &[Stmt], inner: &HashSet<Name>) -> Result<Option<String>, ()> {
        let mut terms = Vec::new();
        let mut inner = inner.clone();
        for stmt in body {
            match stmt {
                Stmt::For {
                    var,
                    start,
                    end,
                    body,
                } => {
                    let known = |e: &Expr| !mentions_any(e, &inner) && !has_load(e);
                    if !known(start) || !known(end) {
                        return Err(());
                    }
                    let (s, e) = match (self.expr(start), self.expr(end)) {
                        (Ok(s), Ok(e)) => (s, e),
                        _ => return Err(()),
                    };
                    let trip = if var.ty == ScalarType::I32 {
                        format!("select(0u, bitcast<u32>({e} - {s}), {e} > {s})")
                    } else {
                        format!("select(0u, {e} - {s}, {e} > {s})")
                    };
                    let mut nested = inner.clone();
                    nested.insert(var.name.clone());
                    self.state.helpers.insert(Helper::Saturating);
                    let visits = format!("mpmd_sat_add({trip}, 1u)");
                    terms.push(match self.cost(body, &nested)? {
                        Some(c) => format!("mpmd_sat_add({visits}, mpmd_sat_mul({trip}, {c}))"),
                        None => visits,
                    });
                    inner.insert(var.name.clone());
                }
                Stmt::While { max, body, .. } => {
                    // At most `max` iterations, and one more header visit
                    // for the exit test.
                    if mentions_any(max, &inner) || has_load(max) {
                        return Err(());
                    }
                    let Ok(trip) = self.expr(max) else {
                        return Err(());
                    };
                    self.state.helpers.insert(Helper::Saturating);
                    let visits = format!("mpmd_sat_add({trip}, 1u)");
                    terms.push(match self.cost(body, &inner)? {
                        Some(c) => format!("mpmd_sat_add({visits}, mpmd_sat_mul({trip}, {c}))"),
                        None => visits,
                    });
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    for branch in [then_body, else_body] {
                        if let Some(c) = self.cost(branch, &inner)? {
                            terms.push(c);
                        }
                    }
                }
                Stmt::Let { var, .. } | Stmt::Var { var, .. } => {
                    inner.insert(var.name.clone());
                }
                Stmt::Atomic { dest: Some(d), .. } => {
                    inner.insert(d.name.clone());
                }
                Stmt::SemRead { dest, .. } => {
                    inner.insert(dest.clone());
                }
                Stmt::LocalArray { name, .. } => {
                    inner.insert(name.clone());
                }
                _ => {}
            }
        }
        let mut it = terms.into_iter();
        let Some(first) = it.next() else {
            return Ok(None);
        };
        Ok(Some(
            it.fold(first, |acc, t| format!("mpmd_sat_add({acc}, {t})")),
        ))
    }

    /// On adapters with a loop cap, a loop (or an `if` whose threads may
    /// diverge) that holds loops pays the loop-header visits of everything
    /// inside at its entry, both branches of every `if` included: lanes of
    /// one SIMD vector that take different branches share the driver's
    /// count. Returns whether the region was emitted here.
    fn paid_region(&mut self, stmt: &Stmt) -> Result<bool, EmitError> {
        if self.state.options.loop_cap.is_none()
            || self.paid
            || !contains_loop(std::slice::from_ref(stmt))
        {
            return Ok(false);
        }
        let collective = contains_collective(std::slice::from_ref(stmt));
        if let Stmt::If { cond, .. } = stmt {
            if self.is_uniform(cond) {
                return Ok(false);
            }
        }
        let saved = (self.body.len(), self.temp, self.rt_used.clone());
        let cost = match self.cost(std::slice::from_ref(stmt), &HashSet::new()) {
            Ok(Some(c)) => c,
            _ => {
                self.body.truncate(saved.0);
                self.temp = saved.1;
                self.rt_used = saved.2;
                return Ok(false);
            }
        };
        self.state.helpers.insert(Helper::Saturating);
        self.line("// Loop-header visits of what follows, paid up front (see mpmd_loop_pay).");
        if collective {
            self.line(&format!(
                "if (mpmd_loop_pay({cost})) {{ mpmd_block_stop = 1u; }}"
            ));
            let stop = self.temp("stop");
            self.line(&format!(
                "let {stop} = workgroupUniformLoad(&mpmd_block_stop);"
            ));
            self.line(&format!("if ({stop} == 0u) {{"));
        } else {
            self.line(&format!("if (!mpmd_loop_pay({cost})) {{"));
        }
        self.depth += 1;
        self.paid = true;
        let r = self.stmt_unpaid(stmt);
        self.paid = false;
        self.depth -= 1;
        self.line("}");
        r?;
        Ok(true)
    }

    fn emit_entry(self, two_d: bool) -> Result<String, EmitError> {
        self.emit_entry_with(if two_d {
            BlockSource::TwoD
        } else {
            BlockSource::OneD
        })
    }

    /// A block-split unit's entry point: one workgroup per dispatch, whose
    /// block is the call's next ticket less `ticket_base`.
    fn emit_split_entry(self, ticket_base: u64) -> Result<String, EmitError> {
        self.emit_entry_with(BlockSource::Ticket(ticket_base))
    }

    fn emit_entry_with(mut self, source: BlockSource) -> Result<String, EmitError> {
        let unit = self.unit;
        let body = unit.kernel.body.clone();
        let quiet = if self.ordered_by_dispatch {
            unobservable_sem_barriers(&body)
        } else {
            vec![false; body.len()]
        };
        for (k, (stmt, quiet)) in body.iter().zip(quiet).enumerate() {
            if self.hoisting.moved.get(k) == Some(&true) {
                self.moved_placeholder(stmt, self.hoisting.barrier_kept[k]);
                continue;
            }
            self.sem_barrier_unobservable = quiet;
            let r = self.stmt(stmt);
            self.sem_barrier_unobservable = false;
            r?;
        }

        let mut out = String::new();
        let mesh = &unit.mesh;
        writeln!(
            out,
            "// ---- unit {}: program {} `{}` on mesh `{}`: {} block(s) of {} thread(s)",
            self.index,
            unit.program,
            unit.kernel.name,
            mesh.name,
            unit.block_count,
            unit.threads_per_block
        )
        .unwrap();
        if let BlockSource::Fused(base) = source {
            // A function of the fused dispatch: the entry point took the ticket.
            writeln!(out, "fn {}(thread_id: u32) {{", self.entry).unwrap();
            writeln!(
                out,
                "  // The workgroup's ticket less the {base} block(s) of the programs before this one."
            )
            .unwrap();
            writeln!(
                out,
                "  let block_id: u32 = workgroupUniformLoad(&mpmd_ticket) - {base}u;"
            )
            .unwrap();
            writeln!(out, "  mpmd_unit = {}u;", self.index).unwrap();
            out.push_str("  mpmd_block_id = block_id;\n  mpmd_thread_id = thread_id;\n");
            if self.idle_guard {
                writeln!(
                    out,
                    "  // The fused workgroup is wider than this program's {} thread(s): the others are idle.\n  \
                     // They run the body (WGSL barriers must be reached by every invocation) as a copy\n  \
                     // of thread `thread_id % {}` whose stores, atomics and out-of-bounds reports are skipped.",
                    unit.threads_per_block, unit.threads_per_block
                )
                .unwrap();
                writeln!(
                    out,
                    "  mpmd_idle = thread_id >= {}u;",
                    unit.threads_per_block
                )
                .unwrap();
            }
            self.prologue(&mut out, true);
            out.push_str("  // Kernel body.\n");
            out.push_str(&self.body);
            out.push_str("}\n");
            return Ok(out);
        }
        writeln!(out, "@compute @workgroup_size({})", unit.threads_per_block).unwrap();
        writeln!(
            out,
            "fn {}(@builtin(workgroup_id) mpmd_wid: vec3<u32>, @builtin(local_invocation_id) mpmd_lid: vec3<u32>) {{",
            self.entry
        )
        .unwrap();
        if let BlockSource::Ticket(base) = source {
            writeln!(
                out,
                "  // Waits on its own signals: one block per dispatch, in linear block order. Thread 0\n  \
                 // takes the call's next ticket (dispatch order), less the {base} of earlier split units."
            )
            .unwrap();
            writeln!(
                out,
                "  if (mpmd_lid.x == 0u) {{ mpmd_ticket = atomicAdd(&mpmd_status[{TICKET_WORD}], 1u) - {base}u; }}"
            )
            .unwrap();
            out.push_str("  let block_id: u32 = workgroupUniformLoad(&mpmd_ticket);\n");
            writeln!(
                out,
                "  if (block_id >= {}u) {{ return; }}",
                unit.block_count
            )
            .unwrap();
        } else if source == BlockSource::TwoD {
            let per_dim = self.state.options.max_workgroups_per_dimension;
            out.push_str(
                "  // More blocks than one dispatch dimension holds: 2-D dispatch, linearised.\n",
            );
            writeln!(
                out,
                "  let block_id: u32 = mpmd_wid.x + mpmd_wid.y * {per_dim}u;"
            )
            .unwrap();
            writeln!(
                out,
                "  if (block_id >= {}u) {{ return; }}",
                unit.block_count
            )
            .unwrap();
        } else {
            out.push_str("  let block_id: u32 = mpmd_wid.x;\n");
        }
        // Workgroups are 1-D: the x component is the thread id. (llvmpipe computes
        // `local_invocation_index` at a measurable cost: about 3% of a
        // memory-bound kernel.)
        out.push_str("  let thread_id: u32 = mpmd_lid.x;\n");
        writeln!(out, "  mpmd_unit = {}u;", self.index).unwrap();
        out.push_str("  mpmd_block_id = block_id;\n  mpmd_thread_id = thread_id;\n");
        self.prologue(&mut out, true);
        out.push_str("  // Kernel body.\n");
        out.push_str(&self.body);
        out.push_str("}\n");
        Ok(out)
    }

    /// Axis indices (thread axes only with `threads`), scalar parameters and
    /// the literals the body read at run time.
    fn prologue(&self, out: &mut String, threads: bool) {
        let unit = self.unit;
        out.push_str("  // Axis indices: (id / stride) % size.\n");
        for axis in &unit.axes {
            let id = match axis.source {
                IdSource::Block => "block_id",
                IdSource::Thread if threads => "thread_id",
                IdSource::Thread => continue,
            };
            let divided = if axis.stride == 1 {
                id.to_string()
            } else {
                format!("({id} / {}u)", axis.stride)
            };
            writeln!(
                out,
                "  let ax_{}: u32 = {divided} % {}u;",
                sanitize(&axis.axis),
                axis.size
            )
            .unwrap();
        }
        let mut slot = 0usize;
        for param in &unit.kernel.params {
            if let Type::Scalar(t) = &param.ty {
                if slot == 0 {
                    out.push_str("  // Scalar parameters.\n");
                }
                let word = format!("mpmd_params[{slot}]");
                writeln!(
                    out,
                    "  let v_{}: {} = {};",
                    sanitize(&param.name),
                    wgsl_scalar(*t),
                    from_word(*t, &word)
                )
                .unwrap();
                slot += 1;
            }
        }
        if !self.rt_used.is_empty() {
            out.push_str("  // Literals read at run time (operations on literals alone would be folded by WGSL).\n");
            let scalars = self.state.scalar_slots.len();
            for &k in &self.rt_used {
                let lit = self.state.literals[k];
                let word = format!("mpmd_params[{}]", scalars + k);
                writeln!(
                    out,
                    "  let rt_{k}: {} = {}; // {}",
                    wgsl_scalar(lit.ty()),
                    from_word(lit.ty(), &word),
                    describe_literal(lit)
                )
                .unwrap();
            }
        }
    }

    /// What stays in the kernel of a semaphore operation that moved to a
    /// semaphore dispatch: a note, and its barrier where the block can see it.
    fn moved_placeholder(&mut self, stmt: &Stmt, barrier: bool) {
        let Stmt::Sem { op, sem, amount } = stmt else {
            return;
        };
        let when = if *op == SemOp::Signal {
            "after"
        } else {
            "before"
        };
        self.line(&format!(
            "// {}({}, {}): in the semaphore dispatch {when} this one (`{}`).",
            op.name(),
            describe_access(sem),
            mpmd_core::text::print_expr(amount),
            moved_function(self.index, *op == SemOp::Signal)
        ));
        if barrier {
            self.line(
                "// Its barrier orders this block's accesses before it against those after it.",
            );
            self.line("storageBarrier();");
            self.line("workgroupBarrier();");
        }
    }

    /// `fn <entry>(block_id: u32)`: the moved signals (or waits) of one block,
    /// in program order, with the `let`s they use; run by one invocation of
    /// a semaphore dispatch.
    fn emit_moved(mut self, signals: bool) -> Result<String, EmitError> {
        let unit = self.unit;
        let hoisting = self.hoisting.clone();
        for (k, stmt) in unit.kernel.body.iter().enumerate() {
            match stmt {
                Stmt::Let { .. } if hoisting.pure_lets[k] => self.stmt(stmt)?,
                Stmt::Sem { op, sem, amount }
                    if hoisting.moved[k] && (*op == SemOp::Signal) == signals =>
                {
                    self.moved_sem_op(*op, sem, amount)?
                }
                _ => {}
            }
        }
        let mut out = String::new();
        writeln!(
            out,
            "// The {} of unit {} (program {} `{}`) for one block, moved out of its dispatch",
            if signals { "signals" } else { "waits" },
            self.index,
            unit.program,
            unit.kernel.name
        )
        .unwrap();
        writeln!(
            out,
            "// into the semaphore dispatch {} it, whose boundary orders counts and data.",
            if signals { "after" } else { "before" }
        )
        .unwrap();
        writeln!(out, "fn {}(block_id: u32) {{", self.entry).unwrap();
        writeln!(out, "  mpmd_unit = {}u;", self.index).unwrap();
        out.push_str("  mpmd_block_id = block_id;\n  mpmd_thread_id = 0u;\n");
        self.prologue(&mut out, false);
        out.push_str("  // The block's semaphore operations.\n");
        out.push_str(&self.body);
        out.push_str("}\n");
        Ok(out)
    }

    /// A moved semaphore operation, run once for its block.
    fn moved_sem_op(&mut self, op: SemOp, sem: &RefAccess, amount: &Expr) -> Result<(), EmitError> {
        let (n, check) = self.sem_amount(amount)?;
        let (global, mut index, site) = self.sem_place(sem)?;
        let mut n = n;
        let mut ok = String::new();
        if check != AmountCheck::Literal {
            let (idx, amt) = (self.temp("sem"), self.temp("amount"));
            self.line(&format!("let {idx}: u32 = {index};"));
            self.line(&format!("let {amt}: i32 = {n};"));
            ok = self.amount_check(check, &amt, &idx, site);
            (index, n) = (idx, amt);
        }
        self.line(&format!(
            "// {}({}, {})",
            op.name(),
            describe_access(sem),
            mpmd_core::text::print_expr(amount)
        ));
        let call = match op {
            SemOp::Signal => format!("atomicAdd(&{global}[{index}], {n});"),
            SemOp::Wait | SemOp::WaitNodec => {
                self.state.helpers.insert(Helper::SemTake(global.clone()));
                format!(
                    "mpmd_take_{global}({index}, {n}, {}, {site}u);",
                    op == SemOp::Wait
                )
            }
        };
        if ok.is_empty() {
            self.line(&call);
        } else {
            self.line(&format!("if ({ok}) {{ {call} }}"));
        }
        Ok(())
    }

    /// A semaphore amount as an i32 expression.
    /// (`Expr::Lit` amounts need no check; the flag says whether it is a u32.)
    fn sem_amount(&mut self, amount: &Expr) -> Result<(String, AmountCheck), EmitError> {
        let v = self.value(amount)?;
        let check = match (amount, v.ty) {
            (Expr::Lit(_), _) => AmountCheck::Literal,
            (_, ScalarType::U32) => AmountCheck::Unsigned,
            _ => AmountCheck::Signed,
        };
        Ok(match v.ty {
            ScalarType::I32 => (v.text, check),
            _ => (format!("bitcast<i32>({})", v.text), check),
        })
    }

    /// The run-time check that a semaphore amount is at least 1 (DESIGN.md),
    /// as a condition that reports and is false when it is not; empty for a
    /// literal amount (validation checks those, E0055). An amount that is a
    /// u32 of 2^31 or more is refused too: the counters are i32.
    fn amount_check(&mut self, check: AmountCheck, amt: &str, idx: &str, site: usize) -> String {
        if check == AmountCheck::Literal {
            return String::new();
        }
        let unsigned = check == AmountCheck::Unsigned;
        self.state.helpers.insert(Helper::SemAmount);
        format!("mpmd_sem_amount_ok({amt}, {idx}, {site}u, {unsigned})")
    }

    // ---- statements ----

    fn block(&mut self, body: &[Stmt]) -> Result<(), EmitError> {
        self.scopes.push(HashMap::new());
        self.depth += 1;
        let r = self.stmts(body);
        self.depth -= 1;
        self.scopes.pop();
        r
    }

    fn stmts(&mut self, body: &[Stmt]) -> Result<(), EmitError> {
        for stmt in body {
            self.stmt(stmt)?;
        }
        Ok(())
    }

    fn stmt(&mut self, stmt: &Stmt) -> Result<(), EmitError> {
        if self.paid_region(stmt)? {
            return Ok(());
        }
        self.stmt_unpaid(stmt)
    }

    fn stmt_unpaid(&mut self, stmt: &Stmt) -> Result<(), EmitError> {
        match stmt {
            Stmt::Let { var, value } => {
                let v = self.expr(value)?;
                let uniform = self.is_uniform(value);
                let name = self.bind_scalar_with(&var.name, var.ty, uniform);
                self.line(&format!("let {name}: {} = {v};", wgsl_scalar(var.ty)));
            }
            Stmt::Var { var, init } => {
                let v = self.expr(init)?;
                let name = self.bind_scalar(&var.name, var.ty);
                self.line(&format!("var {name}: {} = {v};", wgsl_scalar(var.ty)));
            }
            Stmt::Assign { name, value } => {
                let v = self.expr(value)?;
                let target = match self.lookup(name) {
                    Some(Named::Scalar { wgsl, .. }) => wgsl.clone(),
                    _ => {
                        return Err(self.invalid(format!("assignment to unknown variable `{name}`")))
                    }
                };
                self.line(&format!("{target} = {v};"));
            }
            Stmt::LocalArray { name, elem, shape } => {
                let var = self.fresh("v_", name);
                let ty = RefType {
                    space: MemorySpace::Local,
                    elem: *elem,
                    shape: shape.clone(),
                    owner: None,
                };
                self.line(&format!(
                    "var {var}: array<{}, {}>;",
                    wgsl_scalar(*elem),
                    words_for(*elem, ty.len()).max(1)
                ));
                self.scopes.last_mut().unwrap().insert(
                    name.clone(),
                    Named::Ref(RefInfo {
                        ty,
                        storage: Storage::Local { var },
                    }),
                );
            }
            Stmt::Store { target, value } => {
                let v = self.expr(value)?;
                if self.ref_info(&target.base)?.ty.elem.is_16bit() {
                    self.store_half(target, &v)?;
                    return Ok(());
                }
                let (place, info) = self.place(target)?;
                let text = store_text(&info, &place, &v);
                if self.idle_guard && !matches!(info.storage, Storage::Local { .. }) {
                    self.line(&format!("if (!mpmd_idle) {{ {text} }}"));
                } else {
                    self.line(&text);
                }
            }
            Stmt::Atomic {
                dest,
                op,
                target,
                args,
            } => self.atomic(
                dest.as_ref().map(|d| (d.name.as_str(), d.ty)),
                *op,
                target,
                args,
            )?,
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                self.check_nesting("`if` statements")?;
                if let Some(chain) = self.flat_chain(stmt) {
                    return self.else_if_chain(&chain);
                }
                let (cond, then_body) = self.merged_ifs(cond, then_body, else_body);
                let c = self.expr(&cond)?;
                self.line(&format!("if ({c}) {{"));
                self.block(then_body)?;
                if else_body.is_empty() {
                    self.line("}");
                } else {
                    self.line("} else {");
                    self.block(else_body)?;
                    self.line("}");
                }
            }
            Stmt::For {
                var,
                start,
                end,
                body,
            } => {
                self.check_nesting("`for` loops")?;
                let s = self.expr(start)?;
                let e = self.expr(end)?;
                let end_name = self.temp("end");
                self.line(&format!("let {end_name}: {} = {e};", wgsl_scalar(var.ty)));
                self.scopes.push(HashMap::new());
                let uniform = self.is_uniform(start) && self.is_uniform(end);
                let v = self.bind_scalar_with(&var.name, var.ty, uniform);
                let one = if var.ty == ScalarType::I32 {
                    "1i"
                } else {
                    "1u"
                };
                if !self.paid {
                    self.loop_enter();
                }
                self.line(&format!(
                    "for (var {v}: {} = {s}; {v} < {end_name}; {v} = {v} + {one}) {{",
                    wgsl_scalar(var.ty)
                ));
                if !self.paid {
                    self.depth += 1;
                    self.loop_tick(contains_collective(body));
                    self.depth -= 1;
                }
                self.block(body)?;
                self.scopes.pop();
                self.line("}");
            }
            Stmt::While { cond, max, body } => {
                self.check_nesting("`while` loops")?;
                let ordinal = self.next_while;
                self.next_while += 1;
                let m = self.expr(max)?;
                let max_name = self.temp("max");
                let trips = self.temp("trips");
                self.line(&format!("let {max_name}: u32 = {m};"));
                self.line(&format!("var {trips}: u32 = 0u;"));
                if !self.paid {
                    self.loop_enter();
                }
                self.line("loop {");
                self.depth += 1;
                if !self.paid {
                    self.loop_tick(contains_collective(body));
                }
                self.scopes.push(HashMap::new());
                let c = self.expr(cond)?;
                self.line(&format!("if (!({c})) {{ break; }}"));
                self.line(&format!("if ({trips} == {max_name}) {{"));
                if self.state.options.mode == Mode::Checked {
                    self.state.helpers.insert(Helper::LoopLimit);
                    self.line(&format!("  mpmd_loop_limit({ordinal}u, {max_name});"));
                }
                self.line("  break;");
                self.line("}");
                // Counted before the body, so that `continue` counts too.
                self.line(&format!("{trips} = {trips} + 1u;"));
                self.scopes.pop();
                self.depth -= 1;
                self.block(body)?;
                self.line("}");
            }
            Stmt::Break => self.line("break;"),
            Stmt::Continue => self.line("continue;"),
            Stmt::CompoundAssign { .. }
            | Stmt::CompoundStore { .. }
            | Stmt::Call { .. }
            | Stmt::Return { .. } => {
                return Err(self.invalid(
                    "a compound assignment or helper call that lowering did not expand (plan::program_kernel)",
                ))
            }
            Stmt::Barrier => {
                self.line("// barrier: orders this block's smem and gmem accesses.");
                self.line("storageBarrier();");
                self.line("workgroupBarrier();");
            }
            Stmt::Sem { op, sem, amount } => self.sem_op(*op, sem, amount)?,
            Stmt::SemRead { dest, sem } => {
                let (place, _) = self.place(sem)?;
                self.line(&format!(
                    "// read({}): thread 0 reads, the block shares the value.",
                    describe_access(sem)
                ));
                self.line(&format!(
                    "if (thread_id == 0u) {{ mpmd_sem_value = atomicLoad(&{place}); }}"
                ));
                let name = self.bind_scalar_with(dest, ScalarType::I32, true);
                self.line(&format!(
                    "let {name}: i32 = workgroupUniformLoad(&mpmd_sem_value);"
                ));
                self.line("workgroupBarrier();");
            }
        }
        Ok(())
    }

    /// Refuses a statement that would open a block deeper than WGSL
    /// compilers read (`MAX_STATEMENT_NESTING`).
    fn check_nesting(&self, what: &str) -> Result<(), EmitError> {
        if self.depth < MAX_STATEMENT_NESTING {
            return Ok(());
        }
        Err(EmitError::TooDeep {
            kernel: self.unit.kernel.name.clone(),
            what: what.to_string(),
            limit: MAX_STATEMENT_NESTING,
        })
    }

    /// Whether a region may be restructured without changing what the loop
    /// cap charges: only `paid_region` charges divergent regions up front,
    /// so a region with loops keeps its shape unless its cost is paid.
    fn restructurable(&self, body: &[Stmt]) -> bool {
        self.state.options.loop_cap.is_none() || self.paid || !contains_loop(body)
    }

    /// `if a { if b { S } }` (no `else` on either) as `if (a && b) { S }`:
    /// the same meaning (`&&` evaluates `b` only when `a` holds) one level
    /// shallower, so `if`s nested past what tint reads still compile.
    fn merged_ifs<'b>(
        &self,
        cond: &Expr,
        mut then_body: &'b [Stmt],
        else_body: &[Stmt],
    ) -> (Expr, &'b [Stmt]) {
        let mut cond = cond.clone();
        if !else_body.is_empty() {
            return (cond, then_body);
        }
        while let [Stmt::If {
            cond: inner,
            then_body: inner_then,
            else_body: inner_else,
        }] = then_body
        {
            if !inner_else.is_empty() || !self.restructurable(then_body) {
                break;
            }
            cond = Expr::Binary(BinaryOp::LogicAnd, Box::new(cond), Box::new(inner.clone()));
            then_body = inner_then;
        }
        (cond, then_body)
    }

    /// An `if` / `else if` chain of at least `FLAT_ELSE_IF` arms, as
    /// (condition, body) arms and the final `else`; `None` otherwise.
    fn flat_chain<'b>(&self, stmt: &'b Stmt) -> Option<ElseIfChain<'b>> {
        let mut arms = Vec::new();
        let mut at = stmt;
        let last = loop {
            let Stmt::If {
                cond,
                then_body,
                else_body,
            } = at
            else {
                unreachable!("the chain is made of `if`s");
            };
            arms.push((cond, then_body.as_slice()));
            match else_body.as_slice() {
                [next @ Stmt::If { .. }] => at = next,
                rest => break rest,
            }
        };
        if arms.len() < FLAT_ELSE_IF || !self.restructurable(std::slice::from_ref(stmt)) {
            return None;
        }
        Some(ElseIfChain { arms, last })
    }

    /// An else-if chain written flat: each arm at the same nesting level,
    /// guarded by a flag that says whether an earlier arm ran, so that its
    /// condition is evaluated only when no earlier one held (as in the
    /// nested form) and a chain of any length nests two levels deep.
    fn else_if_chain(&mut self, chain: &ElseIfChain<'_>) -> Result<(), EmitError> {
        let taken = self.temp("taken");
        self.line(&format!(
            "// An else-if chain of {} arms, flat: `{taken}` says whether an arm ran.",
            chain.arms.len()
        ));
        self.line(&format!("var {taken}: bool = false;"));
        for (k, (cond, body)) in chain.arms.iter().enumerate() {
            if k > 0 {
                self.line(&format!("if (!{taken}) {{"));
                self.depth += 1;
            }
            let c = self.expr(cond)?;
            self.line(&format!("if ({c}) {{"));
            self.depth += 1;
            self.line(&format!("{taken} = true;"));
            self.depth -= 1;
            self.block(body)?;
            self.line("}");
            if k > 0 {
                self.depth -= 1;
                self.line("}");
            }
        }
        if !chain.last.is_empty() {
            self.line(&format!("if (!{taken}) {{"));
            self.block(chain.last)?;
            self.line("}");
        }
        Ok(())
    }

    /// The loop-cap check at the top of a loop body. In a loop that holds
    /// barriers every invocation must take the same way out, so the decision
    /// goes through a workgroup flag read uniformly.
    /// llvmpipe counts every visit of a loop header, the final exit test
    /// included: a loop costs one more than its iterations.
    fn loop_enter(&mut self) {
        if self.state.options.loop_cap.is_some() {
            self.line("_ = mpmd_loop_tick();");
        }
    }

    fn loop_tick(&mut self, collective: bool) {
        if self.state.options.loop_cap.is_none() {
            return;
        }
        if collective {
            self.line("if (mpmd_loop_tick()) { mpmd_block_stop = 1u; }");
            self.line("let mpmd_stop = workgroupUniformLoad(&mpmd_block_stop);");
            self.line("workgroupBarrier();");
            self.line("if (mpmd_stop != 0u) { break; }");
        } else {
            self.line("if (mpmd_loop_tick()) { break; }");
        }
    }

    fn atomic(
        &mut self,
        dest: Option<(&str, ScalarType)>,
        op: AtomicOp,
        target: &RefAccess,
        args: &[Expr],
    ) -> Result<(), EmitError> {
        let mut values = Vec::new();
        for a in args {
            values.push(self.expr(a)?);
        }
        let (place, info) = self.place(target)?;
        let word = match &info.storage {
            Storage::Buffer { word, .. } | Storage::Shared { word, .. } => *word,
            Storage::Local { .. } => return Err(self.invalid("atomic on a local array")),
        };
        if !word.is_atomic() {
            return Err(self.invalid(format!("`{}` is not stored as atomics", target.base)));
        }
        let elem = wgsl_scalar(info.ty.elem);
        let arg = |k: usize| values.get(k).cloned().unwrap_or_default();
        if self.idle_guard {
            // An idle invocation of a fused workgroup: no atomic; a result reads 0.
            let result = dest.map(|(name, ty)| (self.bind_scalar(name, ty), ty));
            if let Some((wgsl, ty)) = &result {
                self.line(&format!("var {wgsl}: {};", wgsl_scalar(*ty)));
            }
            self.line("if (!mpmd_idle) {");
            self.depth += 1;
            let inner = self.temp("atomic");
            let saved = self.idle_guard;
            self.idle_guard = false;
            let r = self.atomic(
                result.as_ref().map(|(_, ty)| (inner.as_str(), *ty)),
                op,
                target,
                args,
            );
            self.idle_guard = saved;
            r?;
            if let Some((wgsl, _)) = &result {
                let inner_wgsl = match self.lookup(&inner) {
                    Some(Named::Scalar { wgsl, .. }) => wgsl.clone(),
                    _ => return Err(self.invalid("lost an atomic's result")),
                };
                self.line(&format!("{wgsl} = {inner_wgsl};"));
            }
            self.depth -= 1;
            self.line("}");
            return Ok(());
        }
        if info.ty.elem == ScalarType::F32 {
            return self.f32_atomic(dest, op, &place, &arg(0));
        }
        let value = match op {
            AtomicOp::Load => format!("atomicLoad(&{place})"),
            AtomicOp::Store => {
                self.line(&format!("atomicStore(&{place}, {});", arg(0)));
                return Ok(());
            }
            AtomicOp::Add => format!("atomicAdd(&{place}, {})", arg(0)),
            AtomicOp::Min => format!("atomicMin(&{place}, {})", arg(0)),
            AtomicOp::Max => format!("atomicMax(&{place}, {})", arg(0)),
            AtomicOp::And => format!("atomicAnd(&{place}, {})", arg(0)),
            AtomicOp::Or => format!("atomicOr(&{place}, {})", arg(0)),
            AtomicOp::Xor => format!("atomicXor(&{place}, {})", arg(0)),
            AtomicOp::Exchange => format!("atomicExchange(&{place}, {})", arg(0)),
            AtomicOp::CompareExchange => {
                // Strong compare-exchange from the weak one: retry spurious failures.
                let cmp = self.temp("expected");
                let new = self.temp("desired");
                let old = self.temp("old");
                self.line(&format!("let {cmp}: {elem} = {};", arg(0)));
                self.line(&format!("let {new}: {elem} = {};", arg(1)));
                self.line(&format!("var {old}: {elem};"));
                self.loop_enter();
                self.line("loop {");
                self.depth += 1;
                self.loop_tick(false);
                self.line(&format!(
                    "let r = atomicCompareExchangeWeak(&{place}, {cmp}, {new});"
                ));
                self.line(&format!("{old} = r.old_value;"));
                self.line(&format!(
                    "if (r.exchanged || r.old_value != {cmp}) {{ break; }}"
                ));
                self.depth -= 1;
                self.line("}");
                old
            }
        };
        match dest {
            Some((name, ty)) => {
                let wgsl = self.bind_scalar(name, ty);
                self.line(&format!("let {wgsl}: {} = {value};", wgsl_scalar(ty)));
            }
            None => {
                if op != AtomicOp::CompareExchange {
                    self.line(&format!("_ = {value};"));
                }
            }
        }
        Ok(())
    }

    /// An f32 atomic on an `atomic<u32>` word (WGSL has no float atomics):
    /// load, store and exchange move the bits; add, min and max are a
    /// compare-exchange loop that retries until no other invocation changed
    /// the word in between, computing with the same operation as the plain
    /// `+` and the language's `min`/`max` helpers. The loop counts toward the
    /// loop cap like every loop the backend emits.
    fn f32_atomic(
        &mut self,
        dest: Option<(&str, ScalarType)>,
        op: AtomicOp,
        place: &str,
        operand: &str,
    ) -> Result<(), EmitError> {
        let value = match op {
            AtomicOp::Load => format!("bitcast<f32>(atomicLoad(&{place}))"),
            AtomicOp::Store => {
                self.line(&format!("atomicStore(&{place}, bitcast<u32>({operand}));"));
                return Ok(());
            }
            AtomicOp::Exchange => {
                format!("bitcast<f32>(atomicExchange(&{place}, bitcast<u32>({operand})))")
            }
            AtomicOp::Add | AtomicOp::Min | AtomicOp::Max => {
                let v = self.temp("operand");
                let old = self.temp("old");
                self.line(&format!("let {v}: f32 = {operand};"));
                let current = format!("bitcast<f32>({old})");
                let next = match op {
                    AtomicOp::Add => format!("{current} + {v}"),
                    AtomicOp::Min => self.call(Helper::MinF32, "mpmd_min_f32", &[current, v]),
                    _ => self.call(Helper::MaxF32, "mpmd_max_f32", &[current, v]),
                };
                self.line(&format!("var {old}: u32 = atomicLoad(&{place});"));
                self.loop_enter();
                self.line("loop {");
                self.depth += 1;
                self.loop_tick(false);
                self.line(&format!(
                    "let r = atomicCompareExchangeWeak(&{place}, {old}, bitcast<u32>({next}));"
                ));
                self.line("if (r.exchanged) { break; }");
                self.line(&format!("{old} = r.old_value;"));
                self.depth -= 1;
                self.line("}");
                format!("bitcast<f32>({old})")
            }
            _ => {
                return Err(self.invalid(format!("`{}` on f32 elements", op.name())));
            }
        };
        match dest {
            Some((name, ty)) => {
                let wgsl = self.bind_scalar(name, ty);
                self.line(&format!("let {wgsl}: {} = {value};", wgsl_scalar(ty)));
            }
            None if matches!(op, AtomicOp::Load | AtomicOp::Exchange) => {
                self.line(&format!("_ = {value};"));
            }
            None => {}
        }
        Ok(())
    }

    fn sem_op(&mut self, op: SemOp, sem: &RefAccess, amount: &Expr) -> Result<(), EmitError> {
        let (n, check) = self.sem_amount(amount)?;
        let (global, index, site) = self.sem_place(sem)?;
        let what = describe_access(sem);
        match op {
            SemOp::Signal => {
                if self.sem_barrier_unobservable {
                    self.line(&format!(
                        "// signal({what}, n): one add. Every waiter runs in a later dispatch, which sees all of"
                    ));
                    self.line(
                        "// this one's writes, and nothing follows in this block: no barrier to observe.",
                    );
                } else {
                    self.line(&format!(
                        "// signal({what}, n): the block's writes first, then one add."
                    ));
                    self.line("workgroupBarrier();");
                    self.line("storageBarrier();");
                }
                let idx = self.temp("sem");
                let amt = self.temp("amount");
                self.line(&format!("let {idx}: u32 = {index};"));
                self.line(&format!("let {amt}: i32 = {n};"));
                let ok = self.thread0_and(check, &amt, &idx, site);
                self.line(&format!(
                    "if ({ok}) {{ atomicAdd(&{global}[{idx}], {amt}); }}"
                ));
            }
            SemOp::Wait | SemOp::WaitNodec if self.ordered_by_dispatch => {
                let take = op == SemOp::Wait;
                self.state.helpers.insert(Helper::SemTake(global.clone()));
                self.line(&format!(
                    "// {}({what}, n): every signaller ran in an earlier dispatch; thread 0 looks once.",
                    op.name()
                ));
                let idx = self.temp("sem");
                let amt = self.temp("amount");
                self.line(&format!("let {idx}: u32 = {index};"));
                self.line(&format!("let {amt}: i32 = {n};"));
                let ok = self.thread0_and(check, &amt, &idx, site);
                self.line(&format!(
                    "if ({ok}) {{ mpmd_take_{global}({idx}, {amt}, {take}, {site}u); }}"
                ));
                if self.sem_barrier_unobservable {
                    self.line(
                        "// No memory access precedes it in this block: no barrier to observe.",
                    );
                } else {
                    self.line("workgroupBarrier();");
                    self.line("storageBarrier();");
                }
            }
            SemOp::Wait | SemOp::WaitNodec => {
                let take = op == SemOp::Wait;
                self.state.helpers.insert(Helper::SemWait(global.clone()));
                self.line(&format!(
                    "// {}({what}, n): thread 0 polls (bounded), then the block proceeds together.",
                    op.name()
                ));
                let idx = self.temp("sem");
                let amt = self.temp("amount");
                self.line(&format!("let {idx}: u32 = {index};"));
                self.line(&format!("let {amt}: i32 = {n};"));
                let ok = self.thread0_and(check, &amt, &idx, site);
                if self.state.options.loop_cap.is_some() {
                    // Thread 0's polls count for its SIMD vector: share the count.
                    self.line(&format!(
                        "if ({ok}) {{ mpmd_wait_{global}({idx}, {amt}, {take}, {site}u); }}"
                    ));
                    self.line("if (thread_id == 0u) { mpmd_shared_count = mpmd_loop_count; }");
                    self.line("storageBarrier();");
                    self.line("mpmd_loop_count = max(mpmd_loop_count, workgroupUniformLoad(&mpmd_shared_count));");
                } else {
                    self.line(&format!(
                        "if ({ok}) {{ mpmd_wait_{global}({idx}, {amt}, {take}, {site}u); }}"
                    ));
                    self.line("workgroupBarrier();");
                    self.line("storageBarrier();");
                }
            }
        }
        Ok(())
    }

    /// `thread_id == 0u`, and the amount check when the amount needs one.
    fn thread0_and(&mut self, check: AmountCheck, amt: &str, idx: &str, site: usize) -> String {
        match self.amount_check(check, amt, idx, site) {
            ok if ok.is_empty() => "thread_id == 0u".to_string(),
            ok => format!("thread_id == 0u && {ok}"),
        }
    }

    /// Global, word index and site of a semaphore element.
    fn sem_place(&mut self, sem: &RefAccess) -> Result<(String, String, usize), EmitError> {
        let info = self.ref_info(&sem.base)?;
        let global = match &info.storage {
            Storage::Buffer { global, word, .. } if word.is_atomic() => global.clone(),
            _ => return Err(self.invalid(format!("`{}` is not a semaphore buffer", sem.base))),
        };
        let (index, site, _) = self.index_of(sem, &info)?;
        Ok((global, index, site))
    }

    // ---- places ----

    fn ref_info(&self, name: &str) -> Result<RefInfo, EmitError> {
        match self.lookup(name) {
            Some(Named::Ref(info)) => Ok(info.clone()),
            Some(Named::Scalar { .. }) => Err(self.invalid(format!("`{name}` is not a ref"))),
            None => Err(self.invalid(format!("unknown ref `{name}`"))),
        }
    }

    /// `array[index]` text for an access, with the ref's info.
    fn place(&mut self, access: &RefAccess) -> Result<(String, RefInfo), EmitError> {
        let (place, info, _) = self.place_with_depth(access)?;
        Ok((place, info))
    }

    /// `place`, and how deep the index's text nests.
    fn place_with_depth(
        &mut self,
        access: &RefAccess,
    ) -> Result<(String, RefInfo, u32), EmitError> {
        let info = self.ref_info(&access.base)?;
        let (index, _, depth) = self.index_of(access, &info)?;
        let array = match &info.storage {
            Storage::Buffer { global, .. } | Storage::Shared { global, .. } => global.clone(),
            Storage::Local { var } => var.clone(),
        };
        Ok((format!("{array}[{index}]"), info, depth))
    }

    /// A 16-bit element of `access`: its array, and a `let` (emitted here)
    /// holding its element index; the element is half `index & 1` of word
    /// `index >> 1`.
    fn half_element(&mut self, access: &RefAccess) -> Result<(String, String, RefInfo), EmitError> {
        let info = self.ref_info(&access.base)?;
        let (index, _, _) = self.index_of(access, &info)?;
        let array = match &info.storage {
            Storage::Buffer { global, .. } | Storage::Shared { global, .. } => global.clone(),
            Storage::Local { var } => var.clone(),
        };
        let name = self.temp("h");
        self.line(&format!("let {name}: u32 = {index};"));
        Ok((array, name, info))
    }

    /// A 16-bit load: the element's half of its word, in the low half.
    fn load_half(&mut self, access: &RefAccess) -> Result<(String, ScalarType), EmitError> {
        let (array, i, info) = self.half_element(access)?;
        let word = match &info.storage {
            Storage::Buffer { word, .. } | Storage::Shared { word, .. } if word.is_atomic() => {
                format!("atomicLoad(&{array}[{i} >> 1u])")
            }
            _ => format!("{array}[{i} >> 1u]"),
        };
        Ok((
            format!("(({word} >> (({i} & 1u) << 4u)) & 0xffffu)"),
            info.ty.elem,
        ))
    }

    /// A 16-bit store: clears the element's half of its word and sets the
    /// new bits. In shared memory (gmem, smem) both are atomic, so a
    /// neighbour writing the other half at the same time keeps its write; a
    /// local array is private to the invocation (a plain read-modify-write).
    fn store_half(&mut self, target: &RefAccess, value: &str) -> Result<(), EmitError> {
        // The value first: it may load the element this store clears.
        let bits = self.temp("bits");
        self.line(&format!("let {bits}: u32 = {value};"));
        let value = bits;
        let (array, i, info) = self.half_element(target)?;
        let shift = self.temp("half");
        self.line(&format!("let {shift}: u32 = ({i} & 1u) << 4u;"));
        let word = format!("{array}[{i} >> 1u]");
        match &info.storage {
            Storage::Buffer { word: w, .. } | Storage::Shared { word: w, .. } => {
                if !w.is_atomic() {
                    return Err(self.invalid(format!(
                        "16-bit `{}` is stored to but not kept as atomic words",
                        target.base
                    )));
                }
                if self.idle_guard {
                    self.line("if (!mpmd_idle) {");
                    self.depth += 1;
                }
                self.line(&format!("atomicAnd(&{word}, ~(0xffffu << {shift}));"));
                self.line(&format!("atomicOr(&{word}, {value} << {shift});"));
                if self.idle_guard {
                    self.depth -= 1;
                    self.line("}");
                }
            }
            Storage::Local { .. } => self.line(&format!(
                "{word} = ({word} & ~(0xffffu << {shift})) | ({value} << {shift});"
            )),
        }
        Ok(())
    }

    /// The element index expression of an access (and its checked-mode site id).
    fn index_of(
        &mut self,
        access: &RefAccess,
        info: &RefInfo,
    ) -> Result<(String, usize, u32), EmitError> {
        let ty = &info.ty;
        if access.index.len() != ty.shape.len() {
            return Err(self.invalid(format!(
                "`{}` has {} dimension(s) but is indexed with {}",
                access.base,
                ty.shape.len(),
                access.index.len()
            )));
        }
        let plan = self.state.plan;
        let len = ty.len();
        // Coordinates and their extents, row-major: owner block coords, then indices.
        let mut coords: Vec<&Expr> = Vec::new();
        let mut extents: Vec<u32> = Vec::new();
        let mut block_extents = Vec::new();
        let mut own_instance = false;
        match (&access.block, &ty.owner) {
            (Some(block), Some(owner)) => {
                if ty.space == MemorySpace::Smem || ty.space == MemorySpace::Local {
                    return Err(self.invalid(format!(
                        "`{}@[...]`: another block's {} cannot be reached",
                        access.base,
                        ty.space.keyword()
                    )));
                }
                let mesh = plan
                    .mesh(owner)
                    .ok_or_else(|| self.invalid(format!("unknown owner mesh `{owner}`")))?;
                block_extents = mesh.block_axes().map(|a| a.size).collect();
                if block.len() != block_extents.len() {
                    return Err(self.invalid(format!(
                        "`{}@[...]` names {} block coordinate(s); mesh `{owner}` has {}",
                        access.base,
                        block.len(),
                        block_extents.len()
                    )));
                }
                coords.extend(block.iter());
                extents.extend(&block_extents);
            }
            (Some(_), None) => {
                return Err(self.invalid(format!(
                    "`{}` has no owner mesh to index with @[...]",
                    access.base
                )))
            }
            (None, Some(owner)) => {
                if matches!(ty.space, MemorySpace::Gmem | MemorySpace::Sem) {
                    if owner != &self.unit.mesh.name {
                        return Err(self.invalid(format!(
                            "`{}` belongs to mesh `{owner}`; this program runs on `{}` and must name the block with @[...]",
                            access.base, self.unit.mesh.name
                        )));
                    }
                    own_instance = true;
                }
            }
            (None, None) => {}
        }
        coords.extend(access.index.iter());
        extents.extend(&ty.shape);

        // The buffer's offset in its binding, in elements (16-bit buffers
        // start on a word: two elements a word).
        let base = match &info.storage {
            Storage::Buffer { offset, .. } if ty.elem.is_16bit() => offset.saturating_mul(2),
            Storage::Buffer { offset, .. } => *offset,
            _ => 0,
        };
        let mut dynamic_terms: Vec<String> = Vec::new();
        if own_instance {
            dynamic_terms.push(if len == 1 {
                "block_id".to_string()
            } else {
                format!("block_id * {len}u")
            });
        }
        // Every coordinate once, folded when it is known here (see `const_u32`).
        let mut known = Vec::new();
        let mut values = Vec::new();
        let mut signed = Vec::new();
        let mut depth = 0;
        for c in &coords {
            match const_u32(c, |a| self.axis_size(a).ok()) {
                Some(v) => {
                    known.push(Some(v));
                    values.push(None);
                    signed.push(matches!(c, Expr::Lit(Literal::I32(_))));
                }
                None => {
                    let v = self.value(c)?;
                    signed.push(v.ty == ScalarType::I32);
                    depth = depth.max(v.depth);
                    known.push(None);
                    values.push(Some(self.index_word(v)?));
                }
            }
        }
        // Every access gets a site (error records name it: out-of-bounds
        // accesses in checked mode, semaphore waits in both modes).
        let site = self.state.sites.len();
        self.state.sites.push(AccessSite {
            unit: self.index,
            reference: access.base.clone(),
            block_extents,
            shape: ty.shape.clone(),
            signed,
        });
        if self.state.options.mode == Mode::Checked {
            let mut args = vec![format!("{site}u")];
            for ((k, v), &n) in known.iter().zip(values).zip(&extents) {
                args.push(match (k, v) {
                    (Some(k), _) => format!("{k}u"),
                    (None, Some(v)) => v,
                    (None, None) => unreachable!("every coordinate is known or emitted"),
                });
                args.push(format!("{n}u"));
            }
            self.state.helpers.insert(Helper::Check(coords.len()));
            dynamic_terms.push(format!("mpmd_check{}({})", coords.len(), args.join(", ")));
            let mut text = dynamic_terms.join(" + ");
            if base != 0 {
                text = format!("{base}u + {text}");
            }
            return Ok((text, site, depth));
        }
        // Fast mode: row-major arithmetic, known coordinates folded here.
        let mut stride: u64 = 1;
        let mut constant: u64 = base;
        let mut terms = Vec::new();
        for ((k, v), &n) in known.iter().zip(values).zip(&extents).rev() {
            match (k, v) {
                (Some(k), _) => constant = constant.wrapping_add((*k as u64).wrapping_mul(stride)),
                (None, Some(v)) => terms.push(if stride == 1 {
                    v
                } else {
                    format!("{v} * {stride}u")
                }),
                (None, None) => unreachable!("every coordinate is known or emitted"),
            }
            stride = stride.saturating_mul(n as u64);
        }
        terms.reverse();
        dynamic_terms.extend(terms);
        if dynamic_terms.is_empty() {
            let fixed_len = match &info.storage {
                Storage::Buffer { .. } => None,
                _ => Some(len),
            };
            let c = constant.min(u32::MAX as u64);
            // A constant index past a fixed-size array is a shader-creation error;
            // read it at run time instead (out of bounds is undefined in fast mode).
            if fixed_len.is_some_and(|l| c >= l) {
                let k = self.runtime_literal(Literal::U32(c as u32));
                return Ok((k, site, 0));
            }
            return Ok((format!("{c}u"), site, 0));
        }
        let mut text = dynamic_terms.join(" + ");
        if constant != 0 {
            text = format!("{text} + {}u", constant.min(u32::MAX as u64));
        }
        Ok((text, site, depth))
    }

    /// A coordinate that is not known here, as a u32 expression (i32
    /// coordinates are reinterpreted, so negative ones are out of bounds).
    /// Its text always holds a run-time operand: a literal or axis size is
    /// known (`const_u32`), and an operation on constants alone reads its
    /// literals at run time.
    fn index_word(&mut self, v: Value) -> Result<String, EmitError> {
        Ok(match v.ty {
            ScalarType::U32 => v.text,
            ScalarType::I32 => format!("bitcast<u32>({})", v.text),
            ScalarType::Bool => format!("u32({})", v.text),
            ScalarType::F32 | ScalarType::F16 | ScalarType::BF16 => {
                return Err(self.invalid("an index must be an integer"))
            }
        })
    }

    fn runtime_literal(&mut self, lit: Literal) -> String {
        let k = self.state.runtime_literal(lit);
        self.rt_used.insert(k);
        format!("rt_{k}")
    }

    // ---- expressions ----

    /// The WGSL text of `e` (temporaries it needs are emitted before it).
    fn expr(&mut self, e: &Expr) -> Result<String, EmitError> {
        Ok(self.value(e)?.text)
    }

    /// `e` emitted, its leaves spelled.
    fn value(&mut self, e: &Expr) -> Result<Value, EmitError> {
        let v = self.node(e)?;
        Ok(self.spell(v, false))
    }

    /// A pending literal leaf written out: as WGSL text, or read from the
    /// parameter buffer when `runtime` (or when WGSL cannot spell it).
    fn spell(&mut self, mut v: Value, runtime: bool) -> Value {
        if let Some(lit) = v.leaf.take() {
            v.text = match literal_text(lit) {
                Some(text) if !runtime => text,
                _ => self.runtime_literal(lit),
            };
        }
        v
    }

    /// Emits `e` bottom-up. A literal or axis size comes back pending
    /// (`Value::leaf`): its parent decides how it is written. An operation
    /// whose operands are all constant would be evaluated by WGSL at shader
    /// creation, which makes overflow and division by zero errors there: its
    /// literal operands are read at run time instead. A result nested deeper
    /// than `MAX_EXPR_DEPTH` becomes a `let` temporary, so no WGSL
    /// expression is deeper than naga and tint read.
    fn node(&mut self, e: &Expr) -> Result<Value, EmitError> {
        let v = match e {
            Expr::Lit(l) => Value::leaf(*l),
            Expr::AxisSize(axis) => Value::leaf(Literal::U32(self.axis_size(axis)?)),
            Expr::Var(name) => match self.lookup(name) {
                Some(Named::Scalar { wgsl, ty, .. }) => Value::text(wgsl.clone(), *ty, false),
                _ => return Err(self.invalid(format!("unknown variable `{name}`"))),
            },
            Expr::AxisIndex(axis) => {
                if !self.unit.axes.iter().any(|a| &a.axis == axis) {
                    return Err(self.invalid(format!(
                        "axis_index({axis}): mesh `{}` has no axis `{axis}`",
                        self.unit.mesh.name
                    )));
                }
                Value::text(format!("ax_{}", sanitize(axis)), ScalarType::U32, false)
            }
            Expr::Load(access) if self.ref_info(&access.base)?.ty.elem.is_16bit() => {
                let (text, ty) = self.load_half(access)?;
                let mut v = Value::text(text, ty, false);
                // The shift and mask around the word (the index is a `let`).
                v.depth = 8;
                v
            }
            Expr::Load(access) => {
                let (place, info, depth) = self.place_with_depth(access)?;
                let mut v = Value::text(load_text(&info, &place), info.ty.elem, false);
                // The index, its check call and the load's own conversions.
                v.depth = depth + 8;
                v
            }
            Expr::Unary(op, a) => {
                let a = self.node(a)?;
                let constant = a.constant;
                let a = self.spell(a, constant);
                let text = match (op, a.ty) {
                    (UnaryOp::Neg, ScalarType::F32) => format!("(-{})", a.text),
                    (UnaryOp::Neg, ScalarType::F16 | ScalarType::BF16) => {
                        format!("({} ^ 0x8000u)", a.text)
                    }
                    (UnaryOp::Neg, ScalarType::I32) => format!("(0i - {})", a.text),
                    (UnaryOp::Neg, _) => format!("(0u - {})", a.text),
                    (UnaryOp::Not, _) => format!("(!{})", a.text),
                    (UnaryOp::BitNot, _) => format!("(~{})", a.text),
                };
                Value::op(text, a.ty, &[&a])
            }
            Expr::Binary(op, a, b) => self.binary(*op, a, b)?,
            Expr::Select(c, t, f) => {
                let (c, t, f) = (self.node(c)?, self.node(t)?, self.node(f)?);
                let constant = c.constant && t.constant && f.constant;
                let c = self.spell(c, constant);
                let t = self.spell(t, constant);
                let f = self.spell(f, constant);
                let text = format!("select({}, {}, {})", f.text, t.text, c.text);
                Value::op(text, t.ty, &[&c, &t, &f])
            }
            Expr::Cast(to, a) => {
                let a = self.node(a)?;
                let constant = a.constant;
                let a = self.spell(a, constant);
                let text = self.cast(a.ty, *to, a.text.clone());
                Value::op(text, *to, &[&a])
            }
            Expr::Bitcast(to, a) => {
                let a = self.node(a)?;
                let constant = a.constant;
                let a = self.spell(a, constant);
                let text = match (a.ty, *to) {
                    (from, to) if from == to => a.text.clone(),
                    // Both are bits in a u32: the same 16 bits; from 16 bits the high half is zero.
                    (from, to) if from.is_16bit() && (to.is_16bit() || to == ScalarType::U32) => {
                        a.text.clone()
                    }
                    // To 16 bits the low half is kept.
                    (ScalarType::U32, to) if to.is_16bit() => format!("({} & 0xffffu)", a.text),
                    (ScalarType::I32, to) if to.is_16bit() => {
                        format!("(bitcast<u32>({}) & 0xffffu)", a.text)
                    }
                    (_, to) => format!("bitcast<{}>({})", wgsl_scalar(to), a.text),
                };
                Value::op(text, *to, &[&a])
            }
            Expr::Math(f, args) => {
                let mut vs = Vec::new();
                for a in args {
                    vs.push(self.node(a)?);
                }
                let Some(t) = vs.first().map(|v| v.ty) else {
                    return Err(self.invalid("math function without arguments"));
                };
                let constant = vs.iter().all(|v| v.constant);
                // An f32 literal operand of fma is read at run time like those
                // of + - * / (see `binary`).
                let vs: Vec<Value> = vs
                    .into_iter()
                    .map(|v| {
                        // 16-bit literal operands too: the emulation's f32 steps
                        // must not be folded with them.
                        let float_lit = (*f == MathFn::Fma && v.is_f32_leaf())
                            || (t.is_16bit() && v.leaf.is_some());
                        self.spell(v, constant || float_lit)
                    })
                    .collect();
                let texts: Vec<String> = vs.iter().map(|v| v.text.clone()).collect();
                let text = self.math(*f, t, &texts)?;
                Value::op(text, t, &vs.iter().collect::<Vec<_>>())
            }
        };
        Ok(self.bounded(v))
    }

    /// `v`, or a `let` temporary holding it when it nests too deep.
    fn bounded(&mut self, v: Value) -> Value {
        if v.depth <= MAX_EXPR_DEPTH || v.leaf.is_some() {
            return v;
        }
        let name = self.temp("e");
        self.line(&format!("let {name}: {} = {};", wgsl_scalar(v.ty), v.text));
        Value {
            text: name,
            ty: v.ty,
            depth: 0,
            constant: v.constant,
            leaf: None,
        }
    }

    fn axis_size(&self, axis: &str) -> Result<u32, EmitError> {
        if let Some(a) = self.unit.mesh.axis(axis) {
            return Ok(a.size);
        }
        self.state
            .plan
            .meshes
            .iter()
            .find_map(|m| m.axis(axis))
            .map(|a| a.size)
            .ok_or_else(|| {
                self.invalid(format!(
                    "axis_size({axis}): no mesh in scope has axis `{axis}`"
                ))
            })
    }

    /// `a && b` and `a || b` evaluate `b` only when `a` does not decide
    /// (DESIGN.md: no load, no out-of-bounds report). WGSL's own operators
    /// short-circuit; when `b` needed temporaries (statements), they run
    /// under an `if` on `a` instead, so they too are skipped.
    fn logic(&mut self, op: BinaryOp, a: &Expr, b: &Expr) -> Result<Value, EmitError> {
        let x = self.node(a)?;
        let mark = self.body.len();
        let y = self.node(b)?;
        let constant = x.constant && y.constant;
        let x = self.spell(x, constant);
        let y = self.spell(y, constant);
        let sym = if op == BinaryOp::LogicAnd { "&&" } else { "||" };
        if self.body.len() == mark {
            return Ok(Value::op(
                format!("({} {sym} {})", x.text, y.text),
                ScalarType::Bool,
                &[&x, &y],
            ));
        }
        // `b` emitted statements: move them under `if (a)` (`if (!a)` for `||`).
        let statements = self.body.split_off(mark);
        let flag = self.temp(if op == BinaryOp::LogicAnd {
            "and"
        } else {
            "or"
        });
        self.line(&format!("var {flag}: bool = {};", x.text));
        let test = if op == BinaryOp::LogicAnd {
            flag.clone()
        } else {
            format!("!{flag}")
        };
        self.line(&format!("if ({test}) {{"));
        for line in statements.lines() {
            self.body.push_str("  ");
            self.body.push_str(line);
            self.body.push('\n');
        }
        self.depth += 1;
        self.line(&format!("{flag} = {};", y.text));
        self.depth -= 1;
        self.line("}");
        Ok(Value::text(flag, ScalarType::Bool, false))
    }

    fn binary(&mut self, op: BinaryOp, a: &Expr, b: &Expr) -> Result<Value, EmitError> {
        if matches!(op, BinaryOp::LogicAnd | BinaryOp::LogicOr) {
            return self.logic(op, a, b);
        }
        let x = self.node(a)?;
        let y = self.node(b)?;
        let t = x.ty;
        let constant = x.constant && y.constant;
        if matches!(op, BinaryOp::Shl | BinaryOp::Shr) {
            let x = self.spell(x, constant);
            // Shift amounts are taken modulo 32; WGSL wants a u32 amount.
            let (amount, y) = match (&y.leaf, b) {
                (Some(l), Expr::Lit(_)) if !constant => (format!("{}u", l.to_bits() & 31), y),
                _ => {
                    let y = self.spell(y, constant);
                    let word = if y.ty == ScalarType::U32 {
                        y.text.clone()
                    } else {
                        format!("bitcast<u32>({})", y.text)
                    };
                    (format!("({word} & 31u)"), y)
                }
            };
            let sym = if op == BinaryOp::Shl { "<<" } else { ">>" };
            return Ok(Value::op(
                format!("({} {sym} {amount})", x.text),
                t,
                &[&x, &y],
            ));
        }
        if y.ty != t {
            return Err(self.invalid(format!("`{op:?}` between {t:?} and {:?}", y.ty)));
        }
        if t.is_16bit() {
            return self.binary_half(op, x, y, constant);
        }
        let arithmetic = matches!(
            op,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem
        );
        // f32 literal operands of arithmetic are read at run time: lavapipe
        // reassociates operations on constants (`(1.0 + x) + -1.5` as
        // `x + -0.5`, one ulp off), and folds `x * 0.0` to 0.0 (wrong for inf
        // and NaN). A run-time value keeps every operation as written.
        let float_arith = t == ScalarType::F32 && arithmetic;
        let rx = constant || (float_arith && x.is_f32_leaf());
        let ry = constant || (float_arith && y.is_f32_leaf());
        let x = self.spell(x, rx);
        let y = self.spell(y, ry);
        let result = if op.is_comparison() {
            ScalarType::Bool
        } else {
            t
        };
        let (xt, yt) = (x.text.clone(), y.text.clone());
        let text = if t == ScalarType::F32 && op == BinaryOp::Ne {
            // naga emits `!=` as an ordered comparison (false for NaN); IEEE
            // and Rust say NaN != NaN.
            format!("(!({xt} == {yt}))")
        } else {
            let sym = match op {
                BinaryOp::Add => "+",
                BinaryOp::Sub => "-",
                BinaryOp::Mul => {
                    if t == ScalarType::F32 && !self.state.plan.map.fast_math {
                        // No contraction into fma: multiply the product by a 1.0 the
                        // compiler cannot see, so a following add cannot fuse with
                        // the rounding of x * y (fusing the outer multiply is exact).
                        let one = self.runtime_literal(Literal::f32(1.0));
                        return Ok(Value::op(format!("(({xt} * {yt}) * {one})"), t, &[&x, &y]));
                    }
                    "*"
                }
                BinaryOp::Div => match t {
                    ScalarType::I32 => {
                        let text = self.call(Helper::DivI32, "mpmd_div_i32", &[xt, yt]);
                        return Ok(Value::op(text, t, &[&x, &y]));
                    }
                    ScalarType::U32 => {
                        let text = self.call(Helper::DivU32, "mpmd_div_u32", &[xt, yt]);
                        return Ok(Value::op(text, t, &[&x, &y]));
                    }
                    _ => "/",
                },
                BinaryOp::Rem => {
                    let text = match t {
                        ScalarType::I32 => self.call(Helper::RemI32, "mpmd_rem_i32", &[xt, yt]),
                        ScalarType::U32 => self.call(Helper::RemU32, "mpmd_rem_u32", &[xt, yt]),
                        _ => self.call(Helper::Fmod, "mpmd_fmod", &[xt, yt]),
                    };
                    return Ok(Value::op(text, t, &[&x, &y]));
                }
                BinaryOp::BitAnd => "&",
                BinaryOp::BitOr => "|",
                BinaryOp::BitXor => "^",
                BinaryOp::Eq => "==",
                BinaryOp::Ne => "!=",
                BinaryOp::Lt => "<",
                BinaryOp::Le => "<=",
                BinaryOp::Gt => ">",
                BinaryOp::Ge => ">=",
                BinaryOp::LogicAnd | BinaryOp::LogicOr | BinaryOp::Shl | BinaryOp::Shr => {
                    unreachable!("handled above")
                }
            };
            format!("({xt} {sym} {yt})")
        };
        Ok(Value::op(text, result, &[&x, &y]))
    }

    /// A binary operation on 16-bit floats: on the exact f32 values, rounded
    /// once to the type (`+ - * / %`); comparisons on the values. Literal
    /// operands of arithmetic are read at run time, as for f32.
    fn binary_half(
        &mut self,
        op: BinaryOp,
        x: Value,
        y: Value,
        constant: bool,
    ) -> Result<Value, EmitError> {
        let t = x.ty;
        let arithmetic = matches!(
            op,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem
        );
        let rx = constant || (arithmetic && x.leaf.is_some());
        let ry = constant || (arithmetic && y.leaf.is_some());
        let x = self.spell(x, rx);
        let y = self.spell(y, ry);
        let (a, b) = (self.widen(t, &x.text), self.widen(t, &y.text));
        let (text, ty) = match op {
            BinaryOp::Add => (self.narrow(t, &format!("({a} + {b})")), t),
            BinaryOp::Sub => (self.narrow(t, &format!("({a} - {b})")), t),
            // The product of two 16-bit floats is exact in f32: no contraction can change it.
            BinaryOp::Mul => (self.narrow(t, &format!("({a} * {b})")), t),
            BinaryOp::Div => (self.narrow(t, &format!("({a} / {b})")), t),
            BinaryOp::Rem => {
                let r = self.call(Helper::Fmod, "mpmd_fmod", &[a, b]);
                (self.narrow(t, &r), t)
            }
            // naga emits `!=` as an ordered comparison; NaN != NaN.
            BinaryOp::Ne => (format!("(!({a} == {b}))"), ScalarType::Bool),
            BinaryOp::Eq => (format!("({a} == {b})"), ScalarType::Bool),
            BinaryOp::Lt => (format!("({a} < {b})"), ScalarType::Bool),
            BinaryOp::Le => (format!("({a} <= {b})"), ScalarType::Bool),
            BinaryOp::Gt => (format!("({a} > {b})"), ScalarType::Bool),
            BinaryOp::Ge => (format!("({a} >= {b})"), ScalarType::Bool),
            other => return Err(self.invalid(format!("`{other:?}` on `{t}`"))),
        };
        let mut v = Value::op(text, ty, &[&x, &y]);
        v.depth += 4;
        Ok(v)
    }

    /// The exact f32 value of 16-bit float bits `v` of type `t`.
    fn widen(&mut self, t: ScalarType, v: &str) -> String {
        self.state.helpers.insert(Helper::Widen(t));
        format!("mpmd_{}_to_f32({v})", half_name(t))
    }

    /// The f32 `v` rounded to the 16-bit float type `t`, as bits.
    fn narrow(&mut self, t: ScalarType, v: &str) -> String {
        self.state.helpers.insert(Helper::Narrow(t));
        format!("mpmd_f32_to_{}({v})", half_name(t))
    }

    fn call(&mut self, helper: Helper, name: &str, args: &[String]) -> String {
        if matches!(
            helper,
            Helper::MinF32 | Helper::MaxF32 | Helper::F32ToI32 | Helper::F32ToU32
        ) {
            self.state.helpers.insert(Helper::IsNan);
        }
        self.state.helpers.insert(helper);
        format!("{name}({})", args.join(", "))
    }

    fn cast(&mut self, from: ScalarType, to: ScalarType, v: String) -> String {
        use ScalarType::*;
        match (from, to) {
            _ if from == to => v,
            (F32, I32) => self.call(Helper::F32ToI32, "mpmd_f32_to_i32", &[v]),
            (F32, U32) => self.call(Helper::F32ToU32, "mpmd_f32_to_u32", &[v]),
            (F32, Bool) => format!("((bitcast<u32>({v}) & 0x7fffffffu) != 0u)"),
            (I32, Bool) => format!("({v} != 0i)"),
            (U32, Bool) => format!("({v} != 0u)"),
            // 16-bit floats: through the exact f32; to them, rounded once.
            (F16 | BF16, F32) => self.widen(from, &v),
            (F32, F16 | BF16) => self.narrow(to, &v),
            (F16 | BF16, F16 | BF16) => {
                let wide = self.widen(from, &v);
                self.narrow(to, &wide)
            }
            (F16 | BF16, I32) => {
                let wide = self.widen(from, &v);
                self.call(Helper::F32ToI32, "mpmd_f32_to_i32", &[wide])
            }
            (F16 | BF16, U32) => {
                let wide = self.widen(from, &v);
                self.call(Helper::F32ToU32, "mpmd_f32_to_u32", &[wide])
            }
            (F16 | BF16, Bool) => format!("(({v} & 0x7fffu) != 0u)"),
            (I32, F16 | BF16) => {
                let odd = self.call(Helper::IntToF32Odd, "mpmd_i32_to_f32_odd", &[v]);
                self.narrow(to, &odd)
            }
            (U32, F16 | BF16) => {
                let odd = self.call(Helper::IntToF32Odd, "mpmd_u32_to_f32_odd", &[v]);
                self.narrow(to, &odd)
            }
            (Bool, F16 | BF16) => format!("select(0u, {}u, {v})", half_one(to)),
            // i32 <-> u32 keep the bits; int -> f32 rounds to nearest; bool -> 0/1.
            (_, t) => format!("{}({v})", wgsl_scalar(t)),
        }
    }

    fn math(&mut self, f: MathFn, t: ScalarType, v: &[String]) -> Result<String, EmitError> {
        let arity = f.arity();
        if v.len() != arity {
            return Err(self.invalid(format!("`{}` takes {arity} argument(s)", f.name())));
        }
        let a = v[0].clone();
        if t.is_16bit() {
            return Ok(self.math_half(f, t, v));
        }
        Ok(match (f, t) {
            (MathFn::Abs, ScalarType::I32) => self.call(Helper::AbsI32, "mpmd_abs_i32", &[a]),
            (MathFn::Abs, ScalarType::U32) => a,
            (MathFn::Min, ScalarType::F32) => self.call(Helper::MinF32, "mpmd_min_f32", v),
            (MathFn::Max, ScalarType::F32) => self.call(Helper::MaxF32, "mpmd_max_f32", v),
            (MathFn::Rsqrt, _) => format!("inverseSqrt({a})"),
            _ => format!("{}({})", f.name(), v.join(", ")),
        })
    }
}

impl UnitEmitter<'_, '_> {
    /// A math function on 16-bit floats (`v` has its arity): `abs`, `min`,
    /// `max` on the values; `fma` rounded once; the others the f32 function
    /// of the exact values, rounded once.
    fn math_half(&mut self, f: MathFn, t: ScalarType, v: &[String]) -> String {
        let n = half_name(t);
        match f {
            MathFn::Abs => format!("({} & 0x7fffu)", v[0]),
            MathFn::Min | MathFn::Max => {
                self.state.helpers.insert(Helper::Widen(t));
                let (helper, what) = if f == MathFn::Min {
                    (Helper::Min16(t), "min")
                } else {
                    (Helper::Max16(t), "max")
                };
                self.call(helper, &format!("mpmd_{what}_{n}"), v)
            }
            MathFn::Fma => {
                for h in [Helper::Widen(t), Helper::Narrow(t), Helper::SumToOdd] {
                    self.state.helpers.insert(h);
                }
                let one = self.runtime_literal(Literal::f32(1.0));
                let mut args = v.to_vec();
                args.push(one);
                self.call(Helper::Fma16(t), &format!("mpmd_fma_{n}"), &args)
            }
            _ => {
                let wide: Vec<String> = v.iter().map(|a| self.widen(t, a)).collect();
                let name = if f == MathFn::Rsqrt {
                    "inverseSqrt"
                } else {
                    f.name()
                };
                self.narrow(t, &format!("{name}({})", wide.join(", ")))
            }
        }
    }
}

/// For each top-level statement of a kernel body: whether it is a semaphore
/// operation whose barrier no thread of the block can observe. A barrier only
/// orders the block's own memory accesses before it against those after it,
/// so: waits with no memory access before them (only loads-free `let`, `var`
/// and assignments, and other such waits), and signals with none after them.
/// Only used when the plan orders every signal before its waits by dispatch
/// boundaries, which also order the data for waiters of other programs. A
/// signal of a semaphore the program also `read`s keeps its barrier: another
/// block of the same dispatch may look at the count.
fn unobservable_sem_barriers(body: &[Stmt]) -> Vec<bool> {
    fn reads(body: &[Stmt], out: &mut HashSet<Name>) {
        for stmt in body {
            match stmt {
                Stmt::SemRead { sem, .. } => {
                    out.insert(sem.base.clone());
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    reads(then_body, out);
                    reads(else_body, out);
                }
                Stmt::For { body, .. } | Stmt::While { body, .. } => reads(body, out),
                _ => {}
            }
        }
    }
    let mut read = HashSet::new();
    reads(body, &mut read);
    fn private(stmt: &Stmt) -> bool {
        match stmt {
            Stmt::Let { value, .. } | Stmt::Assign { value, .. } => !has_load(value),
            Stmt::Var { init, .. } => !has_load(init),
            _ => false,
        }
    }
    fn sem_without_loads(stmt: &Stmt, wanted: &[SemOp]) -> bool {
        match stmt {
            Stmt::Sem { op, sem, amount } => {
                wanted.contains(op)
                    && !has_load(amount)
                    && !sem
                        .block
                        .iter()
                        .flatten()
                        .chain(sem.index.iter())
                        .any(has_load)
            }
            _ => false,
        }
    }
    let mut quiet = vec![false; body.len()];
    for (k, stmt) in body.iter().enumerate() {
        if sem_without_loads(stmt, &[SemOp::Wait, SemOp::WaitNodec]) {
            quiet[k] = true;
        } else if !private(stmt) {
            break;
        }
    }
    for (k, stmt) in body.iter().enumerate().rev() {
        let read_here = matches!(stmt, Stmt::Sem { sem, .. } if read.contains(&sem.base));
        if sem_without_loads(stmt, &[SemOp::Signal]) && !read_here {
            quiet[k] = true;
        } else if !private(stmt) {
            break;
        }
    }
    quiet
}

/// Which top-level semaphore operations of a unit leave its dispatch.
///
/// When the plan needs no co-residency, every semaphore's signallers run in
/// earlier dispatches than its waiters, so a block's semaphore operation
/// need not run inside its own dispatch: a signal can run right after it
/// (in a semaphore dispatch with one invocation per block) and a wait right
/// before it, where the dispatch boundary orders both the count and the
/// data. The unit's own kernel then holds no atomic, which matters on
/// llvmpipe: it runs a branch's atomics for every SIMD vector of a block,
/// lanes masked off or not.
///
/// An operation moves when nothing can tell: it is at the top level of the
/// body (unconditional), its element and amount depend only on block
/// coordinates, scalar parameters, constants and `let`s of those (no thread
/// index, no load, no `var`); every operation of the program on that
/// semaphore moves (so their order within a block is kept) and the program
/// does not `read` it (a read would see a count that moved); and errors keep
/// their order: no statement before a moved wait (other moved waits aside)
/// can report an error, and no statement after a moved signal that can
/// itself report one (checked mode: its index) can either. The operation's
/// barrier stays in the kernel where the block can observe it.
#[derive(Clone, Debug, Default)]
struct Hoisting {
    /// Per top-level statement: a semaphore operation that runs in a semaphore dispatch.
    moved: Vec<bool>,
    /// Per top-level statement: a `let` the moved operations may use.
    pure_lets: Vec<bool>,
    /// Per top-level statement: a moved operation whose barrier stays in the kernel.
    barrier_kept: Vec<bool>,
}

impl Hoisting {
    /// Plan buffers of the moved signals (or waits).
    fn buffers(&self, plan: &LaunchPlan, unit: &LaunchUnit, signals: bool) -> BTreeSet<usize> {
        unit.kernel
            .body
            .iter()
            .zip(&self.moved)
            .filter_map(|(stmt, &moved)| match stmt {
                Stmt::Sem { op, sem, .. } if moved && (*op == SemOp::Signal) == signals => {
                    sem_buffer(plan, unit, &sem.base)
                }
                _ => None,
            })
            .collect()
    }
}

/// The plan buffer of semaphore parameter `name` of `unit`'s kernel.
fn sem_buffer(plan: &LaunchPlan, unit: &LaunchUnit, name: &str) -> Option<usize> {
    let param = unit.kernel.params.iter().find(|p| p.name == name)?;
    match &param.ty {
        Type::Ref(r) if r.space == MemorySpace::Sem => plan.param_buffer(unit, name),
        _ => None,
    }
}

fn hoisting(plan: &LaunchPlan, unit: &LaunchUnit, options: &EmitOptions) -> Hoisting {
    let body = &unit.kernel.body;
    let n = body.len();
    let mut h = Hoisting {
        moved: vec![false; n],
        pure_lets: vec![false; n],
        barrier_kept: vec![false; n],
    };
    if plan.needs_co_residency() {
        return h;
    }
    let block_axes: HashSet<&str> = unit
        .axes
        .iter()
        .filter(|a| a.source == IdSource::Block)
        .map(|a| a.axis.as_str())
        .collect();
    let block_level = |e: &Expr, pure: &HashSet<Name>| {
        let mut ok = true;
        mpmd_core::ir::visit::walk_expr(e, &mut |e| match e {
            Expr::Load(_) => ok = false,
            Expr::Var(name) if !pure.contains(name) => ok = false,
            Expr::AxisIndex(axis) if !block_axes.contains(axis.as_str()) => ok = false,
            _ => {}
        });
        ok
    };
    // Names bound to block-level values at each top-level statement.
    let mut pure: HashSet<Name> = unit
        .kernel
        .params
        .iter()
        .filter(|p| matches!(p.ty, Type::Scalar(_)))
        .map(|p| p.name.clone())
        .collect();
    let mut candidate = vec![None; n];
    let mut pinned: HashSet<usize> = HashSet::new();
    let mut unknown = false;
    for (k, stmt) in body.iter().enumerate() {
        match stmt {
            Stmt::Let { var, value } => {
                if block_level(value, &pure) {
                    h.pure_lets[k] = true;
                    pure.insert(var.name.clone());
                } else {
                    pure.remove(&var.name);
                }
            }
            Stmt::Var { var, .. } => {
                pure.remove(&var.name);
            }
            Stmt::Atomic { dest: Some(d), .. } => {
                pure.remove(&d.name);
            }
            Stmt::SemRead { dest, .. } => {
                pure.remove(dest);
            }
            Stmt::LocalArray { name, .. } => {
                pure.remove(name);
            }
            Stmt::Sem { sem, amount, .. } => {
                let operands_ok = sem
                    .block
                    .iter()
                    .flatten()
                    .chain(&sem.index)
                    .chain([amount])
                    .all(|e| block_level(e, &pure));
                match sem_buffer(plan, unit, &sem.base) {
                    Some(buffer) if operands_ok => candidate[k] = Some(buffer),
                    Some(buffer) => {
                        pinned.insert(buffer);
                    }
                    None => unknown = true,
                }
            }
            _ => {}
        }
        // Semaphores used below the top level, or read, stay in the kernel.
        let nested = match stmt {
            Stmt::If { .. } | Stmt::For { .. } | Stmt::While { .. } | Stmt::SemRead { .. } => {
                std::slice::from_ref(stmt)
            }
            _ => &[],
        };
        for_each_stmt(nested, &mut |s| {
            if let Stmt::Sem { sem, .. } | Stmt::SemRead { sem, .. } = s {
                match sem_buffer(plan, unit, &sem.base) {
                    Some(buffer) => {
                        pinned.insert(buffer);
                    }
                    None => unknown = true,
                }
            }
        });
    }
    if unknown {
        // Something the emitter will reject anyway: leave everything in place.
        return h;
    }
    let checked = options.mode == Mode::Checked;
    let capped = options.loop_cap.is_some();
    let f32_refs: HashSet<&str> = unit
        .kernel
        .params
        .iter()
        .filter(|p| matches!(&p.ty, Type::Ref(r) if r.elem == ScalarType::F32))
        .map(|p| p.name.as_str())
        .collect();
    let reports: Vec<bool> = body
        .iter()
        .map(|s| may_report(s, checked, capped, &f32_refs))
        .collect();
    let op_of = |k: usize| match &body[k] {
        Stmt::Sem { op, .. } => Some(*op),
        _ => None,
    };
    loop {
        for (moved, candidate) in h.moved.iter_mut().zip(&candidate) {
            *moved = candidate.is_some_and(|b| !pinned.contains(&b));
        }
        let mut changed = false;
        for k in 0..n {
            if !h.moved[k] {
                continue;
            }
            let in_order = if op_of(k) == Some(SemOp::Signal) {
                !reports[k]
                    || (k + 1..n)
                        .all(|j| !reports[j] || (h.moved[j] && op_of(j) == Some(SemOp::Signal)))
            } else {
                (0..k).all(|j| !reports[j] || (h.moved[j] && op_of(j) != Some(SemOp::Signal)))
            };
            if !in_order {
                pinned.extend(candidate[k]);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // A moved operation's barrier orders the block's accesses before it
    // against those after it: kept only where both exist.
    let touches: Vec<bool> = body
        .iter()
        .zip(&h.moved)
        .map(|(s, &moved)| !moved && touches_memory(s))
        .collect();
    for k in 0..n {
        h.barrier_kept[k] =
            h.moved[k] && touches[..k].iter().any(|&t| t) && touches[k + 1..].iter().any(|&t| t);
    }
    h
}

/// Whether running `stmt` may record an error: a wait (deadlock), in checked
/// mode any memory access (out of bounds), with a loop cap any loop of its own
/// or of the backend's (`for`, strong compare-exchange, the f32 atomic add,
/// min and max on `f32_refs`, the float `%`).
fn may_report(stmt: &Stmt, checked: bool, capped: bool, f32_refs: &HashSet<&str>) -> bool {
    let one = std::slice::from_ref(stmt);
    let mut reports = false;
    for_each_stmt(one, &mut |s| match s {
        Stmt::Sem { op, .. } if *op != SemOp::Signal || checked => reports = true,
        Stmt::Store { .. } | Stmt::Atomic { .. } | Stmt::SemRead { .. } if checked => {
            reports = true
        }
        // A `while` reports reaching its limit in checked mode.
        Stmt::While { .. } if checked || capped => reports = true,
        Stmt::For { .. }
        | Stmt::Atomic {
            op: AtomicOp::CompareExchange,
            ..
        } if capped => reports = true,
        Stmt::Atomic {
            op: AtomicOp::Add | AtomicOp::Min | AtomicOp::Max,
            target,
            ..
        } if capped && f32_refs.contains(target.base.as_str()) => reports = true,
        _ => {}
    });
    mpmd_core::ir::visit::for_each_expr(one, &mut |e| match e {
        Expr::Load(_) if checked => reports = true,
        Expr::Binary(BinaryOp::Rem, ..) if capped => reports = true,
        _ => {}
    });
    reports
}

/// Whether `stmt` accesses memory another thread of the block may see.
fn touches_memory(stmt: &Stmt) -> bool {
    let one = std::slice::from_ref(stmt);
    let mut touches = false;
    for_each_stmt(one, &mut |s| {
        if matches!(
            s,
            Stmt::Store { .. } | Stmt::Atomic { .. } | Stmt::Sem { .. } | Stmt::SemRead { .. }
        ) {
            touches = true;
        }
    });
    mpmd_core::ir::visit::for_each_expr(one, &mut |e| {
        if matches!(e, Expr::Load(_)) {
            touches = true;
        }
    });
    touches
}

fn contains_loop(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::For { .. } | Stmt::While { .. } => true,
        Stmt::If {
            then_body,
            else_body,
            ..
        } => contains_loop(then_body) || contains_loop(else_body),
        _ => false,
    })
}

/// Whether `e` names any of `names`.
fn mentions_any(e: &Expr, names: &HashSet<Name>) -> bool {
    match e {
        Expr::Var(n) => names.contains(n),
        Expr::Lit(_) | Expr::AxisIndex(_) | Expr::AxisSize(_) => false,
        Expr::Load(a) => a
            .block
            .iter()
            .flatten()
            .chain(a.index.iter())
            .any(|i| mentions_any(i, names)),
        Expr::Unary(_, a) | Expr::Cast(_, a) | Expr::Bitcast(_, a) => mentions_any(a, names),
        Expr::Binary(_, a, b) => mentions_any(a, names) || mentions_any(b, names),
        Expr::Select(c, t, f) => {
            mentions_any(c, names) || mentions_any(t, names) || mentions_any(f, names)
        }
        Expr::Math(_, args) => args.iter().any(|a| mentions_any(a, names)),
    }
}

fn has_load(e: &Expr) -> bool {
    match e {
        Expr::Load(_) => true,
        Expr::Lit(_) | Expr::Var(_) | Expr::AxisIndex(_) | Expr::AxisSize(_) => false,
        Expr::Unary(_, a) | Expr::Cast(_, a) | Expr::Bitcast(_, a) => has_load(a),
        Expr::Binary(_, a, b) => has_load(a) || has_load(b),
        Expr::Select(c, t, f) => has_load(c) || has_load(t) || has_load(f),
        Expr::Math(_, args) => args.iter().any(has_load),
    }
}

/// A coordinate known here, as the u32 `index_value` would make of it: an
/// integer or bool literal, or an axis size (`axis_size` gives it). These
/// are exactly the coordinates whose WGSL text would be a constant
/// expression (an operation on constants alone reads its literals at run
/// time), so `index_of` folds all of them and range-checks the result
/// against fixed-size arrays: no constant index reaches naga unchecked.
fn const_u32(e: &Expr, axis_size: impl Fn(&str) -> Option<u32>) -> Option<u32> {
    match e {
        Expr::Lit(Literal::U32(v)) => Some(*v),
        Expr::Lit(Literal::I32(v)) => Some(*v as u32),
        Expr::Lit(Literal::Bool(v)) => Some(*v as u32),
        Expr::AxisSize(axis) => axis_size(axis),
        _ => None,
    }
}

/// A scalar of type `t` from a raw u32 word expression.
fn from_word(t: ScalarType, word: &str) -> String {
    match t {
        ScalarType::F32 => format!("bitcast<f32>({word})"),
        ScalarType::I32 => format!("bitcast<i32>({word})"),
        ScalarType::U32 => word.to_string(),
        ScalarType::Bool => format!("({word} != 0u)"),
        // A 16-bit scalar is the low half of its word.
        ScalarType::F16 | ScalarType::BF16 => format!("({word} & 0xffffu)"),
    }
}

fn load_text(info: &RefInfo, place: &str) -> String {
    let elem = info.ty.elem;
    match &info.storage {
        Storage::Local { .. } => place.to_string(),
        Storage::Buffer { word, .. } | Storage::Shared { word, .. } => {
            let raw = if word.is_atomic() {
                format!("atomicLoad(&{place})")
            } else {
                place.to_string()
            };
            match (elem, word) {
                (ScalarType::Bool, _) => format!("({raw} != 0u)"),
                (ScalarType::F32, WordType::F32) => raw,
                (ScalarType::I32, WordType::I32 | WordType::AtomicI32) => raw,
                (ScalarType::U32, WordType::U32 | WordType::AtomicU32) => raw,
                (t, _) => format!("bitcast<{}>({raw})", wgsl_scalar(t)),
            }
        }
    }
}

fn store_text(info: &RefInfo, place: &str, value: &str) -> String {
    let elem = info.ty.elem;
    match &info.storage {
        Storage::Local { .. } => format!("{place} = {value};"),
        Storage::Buffer { word, .. } | Storage::Shared { word, .. } => {
            let word_value = match (elem, word) {
                (ScalarType::Bool, _) => format!("select(0u, 1u, {value})"),
                (ScalarType::F32, WordType::F32) => value.to_string(),
                (ScalarType::I32, WordType::I32 | WordType::AtomicI32) => value.to_string(),
                (ScalarType::U32, WordType::U32 | WordType::AtomicU32) => value.to_string(),
                (_, WordType::U32 | WordType::AtomicU32) => format!("bitcast<u32>({value})"),
                (_, WordType::I32 | WordType::AtomicI32) => format!("bitcast<i32>({value})"),
                (_, WordType::F32) => format!("bitcast<f32>({value})"),
            };
            if word.is_atomic() {
                format!("atomicStore(&{place}, {word_value});")
            } else {
                format!("{place} = {word_value};")
            }
        }
    }
}

fn describe_access(a: &RefAccess) -> String {
    let idx = |es: &[Expr]| {
        es.iter()
            .map(mpmd_core::text::print_expr)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &a.block {
        Some(b) => format!("{}@[{}][{}]", a.base, idx(b), idx(&a.index)),
        None => format!("{}[{}]", a.base, idx(&a.index)),
    }
}
