//! The random program generator: modules that are valid, race-free and
//! deterministic BY CONSTRUCTION, and the same for a seed on every platform.
//!
//! How the construction keeps its promises:
//! - every thread writes only the output elements of its own global id (or, for
//!   outputs owned by its mesh, of its own block instance and thread id); each
//!   program has its own outputs;
//! - shared memory and gmem scratch are written at the thread's own slot and
//!   read at a neighbour's slot only between two barriers (write, barrier, read,
//!   barrier), in block-uniform control flow;
//! - semaphore edges go from a lower to a higher program index (acyclic): the
//!   producer writes its scratch buffer at its global ids, then signals every
//!   block instance of the consumer's semaphore once; each consumer block waits
//!   for as many credits as the producer has blocks. A cycle adds one edge back
//!   (bidirectional handshake); a block signals all its outgoing edges before it
//!   waits on any back edge, so the handshake cannot deadlock when co-resident;
//! - counters are updated only by atomics of one kind per element (add, and,
//!   or, xor, min, max commute), and are read back only as outputs; the old
//!   values of a shared ticket counter go to an output compared as a multiset;
//!   f32 counters take min, max, and adds of small integers (exact sums, so
//!   any order gives the same bits);
//! - atomics on an element owned by one thread (exchange, compare-exchange,
//!   load, store) have deterministic results and are used as values;
//! - floats stay in ranges where comparisons mean something: inputs in
//!   [-4, 4], results clamped to [-64, 64] with min/max, log/sqrt/rsqrt/pow
//!   guarded by `abs(x) + 1.0`, exp arguments clamped to [-4, 4], division and
//!   remainder by `abs(y) + 1.0`. Values that went through a function that is
//!   not correctly rounded (exp, log, rsqrt, sin, cos, tanh, pow) are
//!   *inexact*: they never feed a discontinuous operation (floor, ceil, `%`,
//!   float-to-int casts, bitcasts, comparisons), so integers are always exact
//!   and float outputs are compared bit-exactly unless an inexact value
//!   reaches them (then `profile`). With [`GenOptions::ieee`] off (WGSL), `/`,
//!   `%` and `sqrt` count as inexact too (`fma` rounds once everywhere). Floats are bitcast to integers
//!   only through `abs`, since the sign of zero is unspecified;
//! - loops have literal bounds up to 4 or the scalar `sn` (at most 5), nested
//!   at most twice: far below 65,535 iterations per invocation;
//! - warp collectives ([`GenOptions::warps`]) stand only in programs of whole
//!   warps and only in warp-uniform control: block-uniform control (most of
//!   them; WGSL runs those) or a branch on the warp index or on a warp-uniform
//!   result (a vote, a ballot, a reduction, `shfl_idx` of a warp-uniform
//!   lane), under which loops leave early only on block-uniform conditions.
//!   Their results are deterministic; an f32 `reduce_add` adds only exact
//!   values (the butterfly order is fixed, so the sum is too) and is as large
//!   as 32 times its operand. Integer, boolean and exact float results feed a
//!   per-thread digest stored to `wo<i>`; edge values (NaN, infinities, ±0,
//!   extremes) come only from the input `xw` (`special`) through shuffles
//!   and f32 reductions straight to `ws<i>`, never into other arithmetic;
//! - tensor cores ([`GenOptions::mma`], a stream of its own that makes every
//!   mma choice, so the rest of a module is as without them): in warp
//!   programs, one or two groups after the warp prologue, at the kernel's
//!   top level (block-uniform control; sometimes under a branch on the warp
//!   index, which WGSL declines), each of one 16-bit type: fragments declared as whole
//!   arrays or as rows of 2-D arrays, A and B filled element by element
//!   (exact values of the lane, converted inputs, generated exact values,
//!   a few edge values: NaN, infinities, subnormals, bf16 values whose
//!   products overflow f32) or with `mma_load_a/b` from an smem tile the
//!   block filled before a barrier or from a gmem input, at warp-uniform
//!   origins (literals, multiples of a row loop's variable, from the block
//!   or warp index) that keep the block inside the [`MMA_TILE`]-shaped
//!   source; C zero or per-lane values; multiplies on whole arrays (into
//!   C or a separate D, sometimes again in place) or per row (constant,
//!   loop-variable, lane- or warp-dependent rows; sometimes a k loop over
//!   every A row); D stored per thread to `mo<i>`, sometimes two rows
//!   added. Every fragment element read was written (the fills cover
//!   every row), and mma results reach nothing but `mo<i>`, compared as
//!   `mma`: nothing else depends on them, as the mode's probes need
//!   (docs/numerics.md), and every input of a fragment is exact, so the
//!   CPU backends must match the oracle's bits.
//! - provable operands ([`GenOptions::provable_operands`], a stream of its
//!   own): in the first program, at its top level, an edge value `zx` from
//!   the `special` input `xz`, an integer `zd` and zeros derived from it
//!   (`zd & 0`, `zd - zd`, `zd * 0`), then per thread a loop from 0 that
//!   accumulates `zx * f32(j)`, a self-subtraction, `fma` with a zero
//!   factor, a division by a zero, a product with a zero, and one 16-bit
//!   operation of those shapes, stored to `zs0` and compared exactly: each
//!   result is a zero, an infinity, NaN or a correctly rounded sum of
//!   multiples of `zx`, on every backend, and a compiler that folds as if
//!   no infinity or NaN existed (lavapipe did) disagrees.

use mpmd_core::case::{CaseSpec, CompareMode, Generator};
use mpmd_core::ir::*;
use mpmd_core::numerics;
use ScalarType::{Bool, BF16, F16, F32, I32, U32};

use mpmd_core::inputs::Rng;

use crate::case::CaseFile;

mod expressions;
mod half;
mod module;
mod provable;
mod statements;
mod tensor_cores;
mod warp;

/// Largest magnitude a float value may reach before it is clamped.
const FLOAT_CLAMP: f32 = 64.0;
/// Thread counts, including ones that are not multiples of 32.
const THREAD_COUNTS: [u32; 10] = [1, 17, 32, 33, 48, 64, 96, 128, 200, 256];
const INPUT_LENGTHS: [u32; 5] = [16, 33, 64, 100, 256];
/// Thread counts of programs that use warp collectives: whole warps (E0069).
const WARP_THREAD_COUNTS: [u32; 5] = [32, 64, 96, 128, 256];
/// Lane, delta and mask literals of shuffles: in range, at the edges, and
/// past 31 (only the 5 low bits count).
const WARP_LANES: [u32; 13] = [0, 1, 2, 5, 15, 16, 17, 31, 32, 33, 63, 100, u32::MAX];
/// Value types a shuffle moves (every scalar type).
const SHUFFLE_TYPES: [ScalarType; 7] = [F32, F32, I32, U32, Bool, F16, BF16];
/// Value types of the warp reductions.
const REDUCE_TYPES: [ScalarType; 4] = [I32, U32, F32, F32];
/// The f32 input of edge values (`special`) that only warp collectives read.
pub const WARP_SPECIALS: &str = "xw";
const WARP_SPECIALS_LEN: u32 = 64;
/// The f32 input of edge values (`special`) that only the provable-operand
/// statements read ([`GenOptions::provable_operands`]).
pub const PROVABLE_SPECIALS: &str = "xz";
const PROVABLE_SPECIALS_LEN: u32 = 64;
/// The output of the provable-operand statements of the first program,
/// `[PROVABLE_SLOTS, threads]`, compared exactly (NaN matches NaN).
const PROVABLE_OUTPUT: &str = "zs0";
/// Slots of `zs0`: a loop from 0 unrolled, self-subtraction, fma with a
/// zero, a division by a zero, a product with a zero, a 16-bit operation.
const PROVABLE_SLOTS: u32 = 6;
/// Percent of the modules with provable-operand statements (the default of
/// [`GenOptions::provable_operands`]).
const PROVABLE_PERCENT: u32 = 25;
/// The per-thread digest of a program's warp results, stored to `wo<i>`.
const WARP_DIGEST: &str = "wd";
/// Slots of `ws<i>`: the last special `reduce_add`, `reduce_min`,
/// `reduce_max` and shuffle of each thread.
const WARP_SPECIAL_SLOTS: u32 = 4;
/// Percent of the statements in warp-uniform control of a warp program
/// that are warp statements (collectives, warp branches).
const WARP_STMT_PERCENT: u32 = 25;
/// Percent of the warp modules whose first program also has collectives in
/// warp-uniform control that is not block-uniform (WGSL declines those; the
/// other warp modules run there too).
const WARP_BRANCH_PERCENT: u32 = 25;
/// Percent of the warp modules that also multiply on tensor cores (the
/// default of [`GenOptions::mma`]).
const MMA_PERCENT: u32 = 50;
/// Most mma groups (fragments, fills, multiplies, stores) of one program.
const MMA_GROUPS_MAX: u32 = 2;
/// Most rows of a 2-D fragment array; every group has one slot of the
/// output per row.
const MMA_ROWS_MAX: u32 = 3;
/// Shape of a fragment source (an smem tile or a gmem input): two buffers of
/// 32 rows by 24 columns, room for A blocks (16x16) at row origins up to 16
/// and column origins up to 8, and B blocks (16x8) at origins up to 16.
const MMA_TILE: [u32; 3] = [2, 32, 24];
/// Prefixes of the mma operands of program `i`, group `g`: the output
/// `mo<i>` (compared as `mma`), the smem tile `mt<i>_<g>` and the gmem input
/// `mx<i>_<g>`; and of the group's locals, `mm<g>_...` (no name the rest of
/// the generator makes starts with `mm`).
pub const MMA_OUTPUT_PREFIX: &str = "mo";
const MMA_TILE_PREFIX: &str = "mt";
const MMA_INPUT_PREFIX: &str = "mx";
/// Counter elements and the (commuting) atomic each element is updated with.
const COUNTER_OPS: [AtomicOp; 4] = [AtomicOp::Add, AtomicOp::Xor, AtomicOp::Or, AtomicOp::Max];
const SIGNED_COUNTER_OPS: [AtomicOp; 3] = [AtomicOp::Min, AtomicOp::Max, AtomicOp::Add];
/// f32 counter elements and their atomics: min and max commute exactly, and
/// the adds add integers small enough that every partial sum is exact, so
/// the result does not depend on the order of the adds.
const F32_COUNTER_OPS: [AtomicOp; 3] = [AtomicOp::Add, AtomicOp::Min, AtomicOp::Max];
/// Largest magnitude of an f32 counter add: with at most 2^22 adds into
/// one element, the sums stay below 2^24, where f32 integers are exact.
const F32_COUNTER_ADD_CLAMP: f32 = 4.0;

/// Name of the main map of every generated module.
pub const MAIN_MAP: &str = "main";

/// A value in scope, with what the generator knows about it.
#[derive(Clone, Debug)]
struct Val {
    e: Expr,
    ty: ScalarType,
    /// Depends only on literals, scalars, grid axes and other uniform values.
    uniform: bool,
    /// Computed only with correctly rounded float operations.
    exact: bool,
    /// Largest magnitude (floats only).
    bound: f32,
}

impl Val {
    fn new(e: Expr, ty: ScalarType, uniform: bool, exact: bool, bound: f32) -> Self {
        Val {
            e,
            ty,
            uniform,
            exact,
            bound,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum OutLayout {
    /// `o[gid]`, shape `[blocks * threads]`.
    Flat,
    /// `o[t]`, shape `[threads] @ mesh`.
    Owned,
    /// `o[lin, t]`, shape `[blocks, threads]`.
    TwoD,
}

#[derive(Clone, Debug)]
struct ProgramPlan {
    mesh: Mesh,
    blocks: u32,
    threads: u32,
    out_ty: ScalarType,
    out_layout: OutLayout,
    /// Whether the output may receive inexact floats.
    out_inexact: bool,
    /// Uses warp collectives (then `threads` is a multiple of 32).
    warps: bool,
    /// Also under branches on the warp index or a warp-uniform result
    /// (warp-uniform control that is not block-uniform: WGSL declines).
    warp_branches: bool,
    /// Tensor-core groups (warp programs of mma modules only; planned from
    /// the mma stream after every other choice of the plan).
    mma: Vec<MmaGroup>,
    smem: Option<ScalarType>,
    gscratch: Option<ScalarType>,
    /// A `u32` output whose element `gid` this thread also updates atomically.
    owned_atomics: bool,
    uses_counters: bool,
}

/// Where a group's A or B fragments come from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum MmaSource {
    /// Element stores of per-lane values.
    Values,
    /// `mma_load_a/b` from the program's smem tile, which the block fills
    /// before a barrier.
    Smem,
    /// `mma_load_a/b` from the group's gmem input.
    Gmem,
}

/// One tensor-core group of a program: fragments of one 16-bit type, filled,
/// multiplied (sometimes twice, accumulating in place) and stored to the
/// program's `mo<i>` at slots `MMA_ROWS_MAX * g ..`.
#[derive(Clone, Debug)]
struct MmaGroup {
    ty: ScalarType,
    /// 0: whole arrays; 2 or 3: rows of 2-D arrays.
    rows: u32,
    a: MmaSource,
    b: MmaSource,
    /// The gmem input holds edge values (`special`), else `uniform(-4, 4)`.
    special_input: bool,
    /// The multiplies stand under a branch on the warp index (warp-uniform,
    /// not block-uniform: WGSL declines); only where the program has warp
    /// branches.
    in_branch: bool,
}

impl MmaGroup {
    fn source_needed(&self, s: MmaSource) -> bool {
        self.a == s || self.b == s
    }
}

#[derive(Clone, Debug)]
struct Edge {
    from: usize,
    to: usize,
    buf_ty: ScalarType,
    /// Consumers use `wait_nodec` instead of `wait`.
    nodec: bool,
    /// The value the producer stores is exact.
    exact: bool,
    back: bool,
}

impl Edge {
    fn buf(&self) -> String {
        format!("b{}_{}", self.from, self.to)
    }
    fn sem(&self) -> String {
        format!("r{}_{}", self.from, self.to)
    }
}

#[derive(Clone, Debug)]
struct Input {
    name: String,
    ty: ScalarType,
    len: u32,
    /// Bound to a device-resident ref that its `generate` line fills
    /// before the first call.
    resident: bool,
}

/// Choices that change what the generator promises about floats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenOptions {
    /// Treat `/`, `%` and `sqrt` as correctly rounded (single rounding), as
    /// the design requires and IEEE backends (CUDA, the interpreter) do: their
    /// float results are compared bit-exactly and may feed floor, ceil, casts,
    /// bitcasts and comparisons. Off for WGSL, whose specification bounds these
    /// only loosely (2.5 ulp division; sqrt and `%` inherited from other
    /// operations): they then count as inexact. `fma` is exact either way:
    /// the WGSL backend rounds it once on the bits (docs/numerics.md).
    pub ieee: bool,
    /// Replace some generated names by adversarial ones
    /// ([`super::names::with_adversarial_names`]): keywords and builtins of
    /// the emitted languages, generated-looking and very long names.
    pub adversarial_names: bool,
    /// Percent of the modules that use warp collectives: their first
    /// program always, each other one with even odds, each such program with
    /// whole warps. Drawn from a stream of its own: a module without warps
    /// is the same for every value.
    pub warps: u32,
    /// Percent of the warp modules whose warp programs also use
    /// `mma_m16n8k16` and the fragment loads (the first always, each other
    /// one with even odds). Drawn from a stream of its own, as is everything
    /// the mma statements choose: a module without them is the same for
    /// every value.
    pub mma: u32,
    /// Percent of the modules whose first program also computes, on edge
    /// values (NaN, infinities, extremes) from the `special` input `xz`,
    /// float operations where a compiler can prove an operand zero or two
    /// operands equal: zeros derived from integers (`d & 0`, `d - d`,
    /// `d * 0`), a loop from 0 that a compiler unrolls (`acc += x * f32(j)`),
    /// self-subtraction; stored to `zs0` and compared exactly (issue 28:
    /// lavapipe folded `x * 0` to 0, `x - x` to 0). Drawn from a stream of
    /// its own: a module without them is the same for every value.
    pub provable_operands: u32,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            ieee: true,
            adversarial_names: true,
            warps: 25,
            mma: MMA_PERCENT,
            provable_operands: PROVABLE_PERCENT,
        }
    }
}

/// Generates the case of `seed` (a module and its case section) with the
/// default options.
pub fn generate(seed: u64) -> CaseFile {
    generate_with(seed, &GenOptions::default())
}

/// Generates the case of `seed`: a module and its case section.
pub fn generate_with(seed: u64, options: &GenOptions) -> CaseFile {
    let mut gen = Gen::new(seed);
    gen.ieee = options.ieee;
    // Streams of their own, so that the rest of a seed's program stays as it was.
    gen.resident_input = Rng::for_stream(seed, &["resident input"]).chance(25);
    let mut warp_rng = Rng::for_stream(seed, &["warps"]);
    gen.module_warps = warp_rng.chance(options.warps);
    gen.module_warp_branches = gen.module_warps && warp_rng.chance(WARP_BRANCH_PERCENT);
    gen.warp_rng = warp_rng;
    let mut mma_rng = Rng::for_stream(seed, &["mma"]);
    gen.module_mma = gen.module_warps && mma_rng.chance(options.mma);
    gen.mma_rng = mma_rng;
    let mut provable_rng = Rng::for_stream(seed, &["provable operands"]);
    gen.module_provable = provable_rng.chance(options.provable_operands);
    gen.provable_rng = provable_rng;
    let file = gen.file();
    if !options.adversarial_names {
        return file;
    }
    // A stream of its own: the program of a seed is the same with or without
    // renaming, and only a quarter of the programs are renamed.
    let mut rng = Rng::for_stream(seed, &["adversarial names"]);
    if !rng.chance(25) {
        return file;
    }
    // Renaming is injective onto fresh names, so it cannot fail on a valid
    // module; keep the original if it ever did (the tests of `names` fail then).
    super::names::with_adversarial_names(&file, &mut rng).unwrap_or(file)
}

struct Gen {
    rng: Rng,
    programs: Vec<ProgramPlan>,
    edges: Vec<Edge>,
    inputs: Vec<Input>,
    /// Scalars of the main map: `sf: f32`, `si: i32`, `sn: u32` (a loop bound).
    scalars: Vec<(String, ScalarType)>,
    sn_value: u32,
    has_tick: bool,
    // Per-kernel state.
    vals: Vec<Val>,
    /// Mutable locals: name, type, whether only exact values are assigned.
    vars: Vec<(String, ScalarType, bool)>,
    next_name: u32,
    cur: usize,
    loop_depth: u32,
    /// Expression nesting of the value being built; past [`MAX_NEST`] only
    /// leaves that do not recurse are made (the parser nests at most 64 deep).
    nest: u32,
    ieee: bool,
    /// Bind the first input to a device-resident ref with generated data.
    resident_input: bool,
    /// The module has the helper `mix` ([`MIX`]) and the constant `TRIPS`.
    helpers: bool,
    /// The module's programs use warp collectives, and the stream that
    /// decides which of them do.
    module_warps: bool,
    /// Its first program also has warp branches (WGSL declines the module).
    module_warp_branches: bool,
    warp_rng: Rng,
    /// Control flow here is warp-uniform (read only in warp programs).
    warp_ctl: bool,
    /// Values in scope that are warp-uniform but not block-uniform (results
    /// of votes, ballots, reductions, `shfl_idx` of a warp-uniform lane).
    warp_vals: Vec<Val>,
    /// The module's warp programs multiply on tensor cores; the stream that
    /// makes every mma choice (never `rng`, so that the rest of the module
    /// is as without them).
    module_mma: bool,
    mma_rng: Rng,
    /// The module's first program has the provable-operand statements
    /// ([`GenOptions::provable_operands`]), and the stream that makes their
    /// choices (never `rng`).
    module_provable: bool,
    provable_rng: Rng,
}

/// The helper function and constant a generated module may use: a loop
/// bound, and a statement call whose result feeds later expressions.
const TRIPS: u32 = 3;
const MIX: &str = "mix";

fn mix_function() -> Function {
    let (a, b, t) = (var("a"), var("b"), var("t"));
    Function {
        name: MIX.into(),
        params: vec![
            Param {
                name: "a".into(),
                ty: U32.into(),
            },
            Param {
                name: "b".into(),
                ty: U32.into(),
            },
        ],
        result: Some(U32),
        body: vec![
            Stmt::Let {
                var: Binding {
                    name: "t".into(),
                    ty: U32,
                },
                value: a.clone() ^ b,
            },
            Stmt::Return {
                value: Some(t * lit_u32(3) + a),
            },
        ],
    }
}

const MAX_NEST: u32 = 7;

fn clamp(e: Expr, b: f32) -> Expr {
    math(
        MathFn::Min,
        [math(MathFn::Max, [e, Expr::from(-b)]), Expr::from(b)],
    )
}

/// `abs(e) + 1.0`: a positive guard for log, rsqrt, pow and divisors.
fn guard(e: Expr) -> Expr {
    math(MathFn::Abs, [e]) + 1.0f32
}

fn lit_u32(v: u32) -> Expr {
    Expr::Lit(Literal::U32(v))
}

/// The gmem fragment source of program `i`'s mma group `g`.
fn mma_input(i: usize, g: usize) -> String {
    format!("{MMA_INPUT_PREFIX}{i}_{g}")
}

/// The smem tile of program `i`'s mma group `g`.
fn mma_tile(i: usize, g: usize) -> String {
    format!("{MMA_TILE_PREFIX}{i}_{g}")
}

/// Kernels name the operands they use (docs/design.md): each kernel keeps the
/// parameters its body mentions, and an operand no kernel mentions stays
/// with the first (every operand is named by some kernel, E0060).
fn name_only_used_operands(kernels: &mut [Kernel]) {
    let used: Vec<std::collections::HashSet<String>> = kernels
        .iter()
        .map(|k| {
            let mut names = std::collections::HashSet::new();
            mpmd_core::ir::visit::for_each_expr(&k.body, &mut |e| match e {
                Expr::Var(n) => {
                    names.insert(n.clone());
                }
                Expr::Load(a) => {
                    names.insert(a.base.clone());
                }
                _ => {}
            });
            mpmd_core::ir::visit::for_each_stmt(&k.body, &mut |s| match s {
                Stmt::Store { target, .. }
                | Stmt::CompoundStore { target, .. }
                | Stmt::Atomic { target, .. } => {
                    names.insert(target.base.clone());
                }
                Stmt::Sem { sem, .. } | Stmt::SemRead { sem, .. } => {
                    names.insert(sem.base.clone());
                }
                Stmt::MmaLoad { source, .. } => {
                    names.insert(source.base.clone());
                }
                _ => {}
            });
            names
        })
        .collect();
    for (k, kernel) in kernels.iter_mut().enumerate() {
        kernel.params.retain(|p| {
            used[k].contains(&p.name) || (k == 0 && !used.iter().any(|u| u.contains(&p.name)))
        });
    }
}

/// `0` of any scalar type, as a literal.
fn zero_of(ty: ScalarType) -> Expr {
    Expr::Lit(Literal::from_bits(ty, 0))
}

/// `1` of a 16-bit float type, as a literal.
fn half_one(ty: ScalarType) -> Expr {
    Expr::Lit(Literal::from_bits(
        ty,
        u32::from(numerics::from_f32(ty, 1.0).unwrap_or(0)),
    ))
}

/// A binary float combination: uniform and exact when both operands are.
fn combine(e: Expr, a: &Val, b: &Val, bound: f32) -> Val {
    Val::new(e, F32, a.uniform && b.uniform, a.exact && b.exact, bound)
}

fn cast_to(e: Expr, from: ScalarType, to: ScalarType) -> Expr {
    if from == to {
        e
    } else {
        e.cast(to)
    }
}

/// `for c0 in 0..axis_size(a0) { ... signal(sem@[c0, ...][0], 1); }` over every
/// block of `consumer`.
fn signal_all(consumer: &Mesh, sem_name: &str) -> Stmt {
    let axes: Vec<Axis> = consumer.block_axes().cloned().collect();
    let coords: Vec<Expr> = (0..axes.len())
        .map(|k| var(&format!("c_{sem_name}_{k}")))
        .collect();
    let mut stmt = Stmt::Sem {
        op: SemOp::Signal,
        sem: at_block(sem_name, coords, [lit_u32(0)]),
        amount: Expr::from(1i32),
    };
    for (k, a) in axes.iter().enumerate().rev() {
        stmt = Stmt::For {
            var: Binding {
                name: format!("c_{sem_name}_{k}"),
                ty: U32,
            },
            start: lit_u32(0),
            end: axis_size(&a.name),
            body: vec![stmt],
        };
    }
    stmt
}

#[cfg(test)]
mod tests;
