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

impl Gen {
    fn new(seed: u64) -> Self {
        Gen {
            rng: Rng::new(seed),
            programs: vec![],
            edges: vec![],
            inputs: vec![],
            scalars: vec![],
            sn_value: 0,
            has_tick: false,
            vals: vec![],
            vars: vec![],
            next_name: 0,
            cur: 0,
            loop_depth: 0,
            nest: 0,
            ieee: true,
            resident_input: false,
            helpers: false,
            module_warps: false,
            module_warp_branches: false,
            warp_rng: Rng::for_stream(seed, &["warps"]),
            warp_ctl: true,
            warp_vals: vec![],
            module_mma: false,
            mma_rng: Rng::for_stream(seed, &["mma"]),
            module_provable: false,
            provable_rng: Rng::for_stream(seed, &["provable operands"]),
        }
    }

    fn fresh(&mut self, prefix: &str) -> String {
        loop {
            self.next_name += 1;
            let name = format!("{prefix}{}", self.next_name);
            // `i` then 32 would be the keyword `i32`.
            if mpmd_core::text::is_valid_name(&name) {
                return name;
            }
        }
    }

    // ---- the module ------------------------------------------------------

    fn file(mut self) -> CaseFile {
        let program_count = *self.rng.pick(&[1u32, 1, 2, 2, 3, 4]) as usize;
        for i in 0..program_count {
            let plan = self.program_plan(i);
            self.programs.push(plan);
        }
        for k in 0..self.rng.range(1, 3) {
            let ty = *self.rng.pick(&[F32, F32, I32, U32, F16, BF16]);
            let len = *self.rng.pick(&INPUT_LENGTHS);
            self.inputs.push(Input {
                name: format!("x{k}"),
                ty,
                len,
                resident: k == 0 && self.resident_input,
            });
        }
        for (name, ty) in [("sf", F32), ("si", I32), ("sn", U32)] {
            if self.rng.chance(60) {
                self.scalars.push((name.to_string(), ty));
            }
        }
        self.sn_value = self.rng.range(0, 5);
        self.plan_edges();
        self.has_tick = self.rng.chance(30);
        self.helpers = self.rng.chance(40);
        if self.module_mma {
            self.plan_mma();
        }

        let map = self.main_map();
        let params = map.params();
        let mut kernels = vec![];
        for i in 0..self.programs.len() {
            kernels.push(self.kernel(i, &params));
        }
        if self.rng.chance(50) {
            name_only_used_operands(&mut kernels);
        }
        let mut module = Module {
            meshes: self.programs.iter().map(|p| p.mesh.clone()).collect(),
            kernels,
            maps: vec![map],
            ..Default::default()
        };
        if self.helpers {
            module.consts.push(Const {
                name: "TRIPS".into(),
                value: Literal::U32(TRIPS),
            });
            module.functions.push(mix_function());
        }
        for x in self.inputs.iter().filter(|x| x.resident) {
            module.residents.push(Resident {
                name: x.name.clone(),
                ty: gmem(x.ty, [x.len]),
                zeroed: false,
            });
        }
        module.calls.push(self.main_call());
        if self.rng.chance(20) {
            self.add_handoff(&mut module);
        }
        let spec = self.case(&module);
        CaseFile { module, spec }
    }

    fn program_plan(&mut self, i: usize) -> ProgramPlan {
        let warps = self.module_warps && (i == 0 || self.warp_rng.chance(50));
        let warp_branches = warps && i == 0 && self.module_warp_branches;
        let threads = if warps {
            *self.rng.pick(&WARP_THREAD_COUNTS)
        } else {
            *self.rng.pick(&THREAD_COUNTS)
        };
        let max_blocks = if threads >= 128 { 4 } else { 8 };
        let mut b = MeshBuilder::new(&format!("m{i}"));
        let mut blocks = 1u32;
        for a in 0..self.rng.range(1, 3) {
            let size = self.rng.range(1, (max_blocks / blocks).clamp(1, 3));
            blocks *= size;
            b = b.grid(&format!("m{i}_g{a}"), size);
        }
        if blocks * 2 <= max_blocks && self.rng.chance(15) {
            blocks *= 2;
            b = b.cluster(&format!("m{i}_c0"), 2);
        }
        let mesh = b.threads(&format!("m{i}_t"), threads).build();
        let out_ty = *self.rng.pick(&[F32, F32, I32, U32, F16, BF16]);
        let out_layout = *self
            .rng
            .pick(&[OutLayout::Flat, OutLayout::Owned, OutLayout::TwoD]);
        ProgramPlan {
            mesh,
            blocks,
            threads,
            out_ty,
            out_layout,
            out_inexact: self.rng.chance(50),
            warps,
            warp_branches,
            mma: vec![],
            smem: self
                .rng
                .chance(40)
                .then(|| *self.rng.pick(&[F32, I32, U32, F16, BF16])),
            gscratch: self
                .rng
                .chance(25)
                .then(|| *self.rng.pick(&[F32, I32, U32, F16, BF16])),
            owned_atomics: self.rng.chance(30),
            uses_counters: self.rng.chance(40),
        }
    }

    fn plan_edges(&mut self) {
        let n = self.programs.len();
        for from in 0..n {
            for to in from + 1..n {
                if self.edges.len() < 3 && self.rng.chance(45) {
                    self.push_edge(from, to, false);
                }
            }
        }
        let forward: Vec<(usize, usize)> = self.edges.iter().map(|e| (e.from, e.to)).collect();
        if !forward.is_empty() && self.rng.chance(25) {
            let (a, b) = *self.rng.pick(&forward);
            self.push_edge(b, a, true);
        }
    }

    fn push_edge(&mut self, from: usize, to: usize, back: bool) {
        let edge = Edge {
            from,
            to,
            buf_ty: *self.rng.pick(&[F32, I32, U32]),
            nodec: self.rng.chance(30),
            exact: self.rng.chance(60),
            back,
        };
        self.edges.push(edge);
    }

    fn out_name(i: usize) -> String {
        format!("o{i}")
    }

    fn out_type(p: &ProgramPlan) -> RefType {
        match p.out_layout {
            OutLayout::Flat => gmem(p.out_ty, [p.blocks * p.threads]),
            OutLayout::Owned => gmem(p.out_ty, [p.threads]).owned_by(&p.mesh.name),
            OutLayout::TwoD => gmem(p.out_ty, [p.blocks, p.threads]),
        }
    }

    fn main_map(&mut self) -> MpmdMap {
        let mut b = MapBuilder::new(MAIN_MAP);
        for (i, p) in self.programs.iter().enumerate() {
            b = b.program(&p.mesh.name, &format!("k{i}"));
        }
        for x in &self.inputs {
            b = b.input(&x.name, gmem(x.ty, [x.len]));
            if x.resident {
                b = b.resident();
            }
        }
        if self.programs.iter().any(|p| p.warps) {
            b = b.input(WARP_SPECIALS, gmem(F32, [WARP_SPECIALS_LEN]));
        }
        if self.module_provable {
            b = b.input(PROVABLE_SPECIALS, gmem(F32, [PROVABLE_SPECIALS_LEN]));
        }
        for (i, p) in self.programs.iter().enumerate() {
            for (g, group) in p.mma.iter().enumerate() {
                if group.source_needed(MmaSource::Gmem) {
                    b = b.input(&mma_input(i, g), gmem(group.ty, MMA_TILE));
                }
            }
        }
        for (i, p) in self.programs.iter().enumerate() {
            b = b.output_zeroed(&Self::out_name(i), Self::out_type(p));
            if p.owned_atomics {
                b = b.output_zeroed(&format!("a{i}"), gmem(U32, [p.blocks * p.threads]));
            }
            if p.warps {
                let n = p.blocks * p.threads;
                b = b.output_zeroed(&format!("wo{i}"), gmem(U32, [n]));
                b = b.output_zeroed(&format!("ws{i}"), gmem(F32, [WARP_SPECIAL_SLOTS, n]));
            }
            if !p.mma.is_empty() {
                let slots = MMA_ROWS_MAX * p.mma.len() as u32;
                let shape = [slots, p.blocks * p.threads, mma::C_LEN];
                b = b.output_zeroed(&format!("{MMA_OUTPUT_PREFIX}{i}"), gmem(F32, shape));
            }
        }
        if self.module_provable {
            let n = self.programs[0].blocks * self.programs[0].threads;
            b = b.output_zeroed(PROVABLE_OUTPUT, gmem(F32, [PROVABLE_SLOTS, n]));
        }
        if self.programs.iter().any(|p| p.uses_counters) {
            b = b.output_zeroed("cnt", gmem(U32, [COUNTER_OPS.len() as u32]));
            b = b.output_zeroed("icnt", gmem(I32, [SIGNED_COUNTER_OPS.len() as u32]));
            b = b.output_zeroed("fcnt", gmem(F32, [F32_COUNTER_OPS.len() as u32]));
        }
        if self.has_tick {
            let p = &self.programs[0];
            b = b.output_zeroed("tick", gmem(U32, [1]));
            b = b.output_zeroed("obs", gmem(U32, [p.blocks * p.threads]));
        }
        for (name, ty) in &self.scalars {
            b = b.scalar(name, *ty);
        }
        let multi = self.programs.len() > 1;
        for (i, p) in self.programs.iter().enumerate() {
            if let Some(ty) = p.smem {
                let t = smem(ty, [p.threads]);
                // Single-program maps may leave smem unowned; use both forms.
                let t = if multi || i % 2 == 0 {
                    t.owned_by(&p.mesh.name)
                } else {
                    t
                };
                b = b.scratch(&format!("sm{i}"), t);
            }
            if let Some(ty) = p.gscratch {
                b = b.scratch(&format!("g{i}"), gmem(ty, [p.blocks * p.threads]));
            }
            for (g, group) in p.mma.iter().enumerate() {
                if group.source_needed(MmaSource::Smem) {
                    let tile = smem(group.ty, MMA_TILE).owned_by(&p.mesh.name);
                    b = b.scratch(&mma_tile(i, g), tile);
                }
            }
        }
        for e in &self.edges {
            let from = &self.programs[e.from];
            b = b.scratch(&e.buf(), gmem(e.buf_ty, [from.blocks * from.threads]));
            b = b.scratch(&e.sem(), sem([1]).owned_by(&self.programs[e.to].mesh.name));
        }
        b.build()
    }

    fn main_call(&mut self) -> Call {
        let scalars = self
            .scalars
            .clone()
            .into_iter()
            .map(|(name, ty)| {
                let v = match ty {
                    F32 => Literal::f32((self.rng.below(33) as f32 - 16.0) / 4.0),
                    I32 => Literal::I32(self.int_literal(I32)),
                    _ => Literal::U32(self.sn_value),
                };
                (name, v)
            })
            .collect();
        Call {
            map: MAIN_MAP.into(),
            scalars,
        }
    }

    /// Two calls hand data and semaphore credits over through residents owned
    /// by an external mesh `hx`: `send` writes `hand@[b]` and signals
    /// `credit@[b]`; `recv` waits for the credit and reads the data.
    fn add_handoff(&mut self, module: &mut Module) {
        let blocks = self.rng.range(1, 3);
        let threads = *self.rng.pick(&[1u32, 17, 32, 48]);
        let hand = gmem(F32, [threads]).owned_by("hx");
        let credit = sem([1]).owned_by("hx");
        module.meshes.push(
            MeshBuilder::new("hs")
                .grid("hs_b", blocks)
                .threads("hs_t", threads)
                .build(),
        );
        module.meshes.push(
            MeshBuilder::new("hr")
                .grid("hr_b", blocks)
                .threads("hr_t", threads)
                .build(),
        );
        module.meshes.push(
            MeshBuilder::new("hx")
                .grid("hx_b", blocks)
                .threads("hx_t", 1)
                .build(),
        );
        module.residents.push(Resident {
            name: "hand".into(),
            ty: hand.clone(),
            zeroed: false,
        });
        module.residents.push(Resident {
            name: "credit".into(),
            ty: credit.clone(),
            zeroed: true,
        });
        let send = MapBuilder::new("send")
            .program("hs", "send_k")
            .input("hin", gmem(F32, [blocks * threads]))
            .output_zeroed("hecho", gmem(F32, [blocks * threads]))
            .scratch("hand", hand.clone())
            .resident()
            .scratch("credit", credit.clone())
            .resident()
            .build();
        let recv = MapBuilder::new("recv")
            .program("hr", "recv_k")
            .output_zeroed("hout", gmem(F32, [blocks * threads]))
            .scratch("hand", hand)
            .resident()
            .scratch("credit", credit)
            .resident()
            .build();
        let scale = (self.rng.below(9) as f32 - 4.0) / 2.0;
        let exact_fn = *self
            .rng
            .pick(&[MathFn::Floor, MathFn::Ceil, MathFn::Abs, MathFn::Sqrt]);
        let send_k = KernelBuilder::new("send_k", send.params()).body(|b| {
            let blk = b.let_("b", U32, axis_index("hs_b"));
            let t = b.let_("t", U32, axis_index("hs_t"));
            let gid = b.let_("gid", U32, blk.clone() * axis_size("hs_t") + t.clone());
            let x = b.let_("x", F32, load("hin", [gid.clone()]));
            let arg = if exact_fn == MathFn::Sqrt {
                math(MathFn::Abs, [x.clone()])
            } else {
                x.clone()
            };
            b.store(
                at_block("hand", [blk.clone()], [t]),
                math(exact_fn, [arg]) * scale,
            );
            b.store(at("hecho", [gid]), x);
            b.signal(at_block("credit", [blk], [lit_u32(0)]), 1i32);
        });
        let recv_k = KernelBuilder::new("recv_k", recv.params()).body(|b| {
            let blk = b.let_("b", U32, axis_index("hr_b"));
            let t = b.let_("t", U32, axis_index("hr_t"));
            b.wait(at_block("credit", [blk.clone()], [lit_u32(0)]), 1i32);
            let v = b.let_(
                "v",
                F32,
                at_block("hand", [blk.clone()], [t.clone()]).load(),
            );
            b.store(at("hout", [blk * axis_size("hr_t") + t]), v.clone() + v);
        });
        module.kernels.push(send_k);
        module.kernels.push(recv_k);
        module.maps.push(send);
        module.maps.push(recv);
        module.calls.push(Call {
            map: "send".into(),
            scalars: vec![],
        });
        module.calls.push(Call {
            map: "recv".into(),
            scalars: vec![],
        });
    }

    fn case(&mut self, module: &Module) -> CaseSpec {
        let mut case = CaseSpec::default();
        for map in &module.maps {
            for x in &map.inputs {
                let Type::Ref(r) = &x.ty else { continue };
                let mma_special = self.mma_input_is_special(&x.name);
                let g = match r.elem {
                    _ if x.name == WARP_SPECIALS || x.name == PROVABLE_SPECIALS => {
                        Generator::Special
                    }
                    // Fragment sources: NaN payloads never reach a bitcast.
                    _ if mma_special == Some(true) => Generator::Special,
                    _ if mma_special == Some(false) => Generator::Uniform {
                        lo: Literal::f32(-4.0),
                        hi: Literal::f32(4.0),
                    },
                    F32 => Generator::Uniform {
                        lo: Literal::f32(-4.0),
                        hi: Literal::f32(4.0),
                    },
                    // Not `special`: NaN payloads are unspecified, and a
                    // bitcast would expose them (the corpus covers specials).
                    F16 | BF16 => Generator::Uniform {
                        lo: Literal::f32(-4.0),
                        hi: Literal::f32(4.0),
                    },
                    I32 if self.rng.chance(50) => Generator::Special,
                    I32 => Generator::Uniform {
                        lo: Literal::I32(-1000),
                        hi: Literal::I32(1000),
                    },
                    _ if self.rng.chance(50) => Generator::Special,
                    _ => Generator::Uniform {
                        lo: Literal::U32(0),
                        hi: Literal::U32(u32::MAX),
                    },
                };
                case.generators.push((x.name.clone(), g));
            }
            for o in &map.outputs {
                let Type::Ref(r) = &o.ty else { continue };
                let mode = match o.name.as_str() {
                    "obs" => CompareMode::Multiset,
                    // Order-independent by construction (`F32_COUNTER_OPS`).
                    "fcnt" => CompareMode::Exact,
                    _ if !r.elem.is_float() => CompareMode::Exact,
                    "hout" | "hecho" => CompareMode::Exact,
                    // Edge values moved and reduced exactly (NaN payloads
                    // and the sign of zero are not compared).
                    name if name.starts_with("ws") => CompareMode::Exact,
                    // Edge values through operations on provable operands:
                    // every result is exact (zeros, infinities, NaN, or
                    // correctly rounded sums of multiples of an input).
                    PROVABLE_OUTPUT => CompareMode::Exact,
                    // Sums of mma results: the tensor-core bound on a GPU
                    // (the fuzzer holds the CPU backends to the bits).
                    name if name.starts_with(MMA_OUTPUT_PREFIX) => CompareMode::Mma,
                    name => {
                        let i: usize = name[1..].parse().unwrap_or(0);
                        if self.programs.get(i).is_some_and(|p| p.out_inexact) {
                            CompareMode::Profile
                        } else {
                            CompareMode::Exact
                        }
                    }
                };
                case.compares.push((o.name.clone(), mode));
            }
        }
        case.tags.push("fuzz".into());
        case
    }

    // ---- kernels ---------------------------------------------------------

    fn kernel(&mut self, i: usize, params: &[Param]) -> Kernel {
        self.cur = i;
        self.vals.clear();
        self.vars.clear();
        self.next_name = 0;
        self.loop_depth = 0;
        self.warp_ctl = true;
        self.warp_vals.clear();
        let p = self.programs[i].clone();
        let mut body = vec![];
        let tn = p.mesh.threads.name.clone();
        let block_axes: Vec<Axis> = p.mesh.block_axes().cloned().collect();

        body.push(Stmt::Let {
            var: Binding {
                name: "t".into(),
                ty: U32,
            },
            value: axis_index(&tn),
        });
        let mut lin: Option<Expr> = None;
        for a in &block_axes {
            lin = Some(match lin {
                None => axis_index(&a.name),
                Some(l) => l * axis_size(&a.name) + axis_index(&a.name),
            });
        }
        body.push(Stmt::Let {
            var: Binding {
                name: "lin".into(),
                ty: U32,
            },
            value: lin.unwrap_or(lit_u32(0)),
        });
        body.push(Stmt::Let {
            var: Binding {
                name: "gid".into(),
                ty: U32,
            },
            value: var("lin") * axis_size(&tn) + var("t"),
        });
        self.vals.push(Val::new(var("t"), U32, false, true, 0.0));
        self.vals.push(Val::new(var("lin"), U32, true, true, 0.0));
        self.vals.push(Val::new(var("gid"), U32, false, true, 0.0));
        for (name, ty) in self.scalars.clone() {
            self.vals.push(Val::new(var(&name), ty, true, true, 4.0));
        }

        if i == 0 && self.has_tick {
            body.push(Stmt::Atomic {
                dest: Some(Binding {
                    name: "tk".into(),
                    ty: U32,
                }),
                op: AtomicOp::Add,
                target: at("tick", [lit_u32(0)]),
                args: vec![lit_u32(1)],
            });
            // The ticket itself depends on the schedule; that it is below
            // the number of tickets does not.
            let total = p.blocks * p.threads;
            body.push(Stmt::Store {
                target: at("obs", [var("gid")]),
                value: var("tk").lt(lit_u32(total)).cast(U32) + var("tk") / lit_u32(total),
            });
        }

        // Incoming forward edges: wait for every producer block, then read.
        for e in self.edges.clone().iter().filter(|e| e.to == i && !e.back) {
            self.consume_edge(e, &mut body);
        }

        if p.warps {
            // Every warp program reads the edge values, makes a collective in
            // block-uniform control and, where it may, one in a warp branch.
            body.push(Stmt::Var {
                var: Binding {
                    name: WARP_DIGEST.into(),
                    ty: U32,
                },
                init: lit_u32(0),
            });
            self.warp_specials(&mut body);
            self.warp_collective(&mut body);
            if p.warp_branches {
                self.warp_branch(&mut body, 0);
            }
        }
        for (g, group) in p.mma.iter().enumerate() {
            self.with_mma_stream(|gen| gen.mma_group(&mut body, g, group));
        }

        let budget = self.rng.range(2, 7);
        self.stmts(&mut body, budget, 0, true);

        // Outgoing edges: write the hand-off buffer at gid, then signal every
        // block of the consumer.
        for e in self.edges.clone().iter().filter(|e| e.from == i) {
            let v = self.value(e.buf_ty, 3, !e.exact, false);
            body.push(Stmt::Store {
                target: at(&e.buf(), [var("gid")]),
                value: v.e,
            });
            let consumer = self.programs[e.to].mesh.clone();
            body.push(signal_all(&consumer, &e.sem()));
        }
        for e in self.edges.clone().iter().filter(|e| e.to == i && e.back) {
            self.consume_edge(e, &mut body);
        }

        if p.warps {
            body.push(Stmt::Store {
                target: at(&format!("wo{i}"), [var("gid")]),
                value: var(WARP_DIGEST),
            });
        }

        if i == 0 && self.module_provable {
            self.provable_operands(&mut body);
        }

        // The final store: every element of the output written once.
        let v = self.value(p.out_ty, 4, p.out_inexact, false);
        let index = match p.out_layout {
            OutLayout::Flat => vec![var("gid")],
            OutLayout::Owned => vec![var("t")],
            OutLayout::TwoD => vec![var("lin"), var("t")],
        };
        let target = at(&Self::out_name(i), index);
        if self.rng.chance(30) {
            // The same element written on every iteration of a short literal
            // loop, the last value kept: the CUDA backend emits such loops
            // loads-first, and the stores must keep their order.
            let trips = self.rng.range(2, 5);
            let k = self.fresh("k");
            let zero = zero_of(p.out_ty);
            body.push(Stmt::For {
                var: Binding {
                    name: k.clone(),
                    ty: U32,
                },
                start: lit_u32(0),
                end: lit_u32(trips),
                body: vec![Stmt::Store {
                    target,
                    value: select(var(&k).eq(lit_u32(trips - 1)), v.e, zero),
                }],
            });
        } else {
            body.push(Stmt::Store { target, value: v.e });
        }
        Kernel {
            name: format!("k{i}"),
            params: params.to_vec(),
            body,
        }
    }

    fn consume_edge(&mut self, e: &Edge, body: &mut Vec<Stmt>) {
        let producer_blocks = self.programs[e.from].blocks as i32;
        let producer_len = self.programs[e.from].blocks * self.programs[e.from].threads;
        body.push(Stmt::Sem {
            op: if e.nodec {
                SemOp::WaitNodec
            } else {
                SemOp::Wait
            },
            sem: at(&e.sem(), [lit_u32(0)]),
            amount: Expr::from(producer_blocks),
        });
        if self.rng.chance(40) {
            // Deterministic: every credit has arrived; `wait` took them all.
            let name = self.fresh("sv");
            body.push(Stmt::SemRead {
                dest: name.clone(),
                sem: at(&e.sem(), [lit_u32(0)]),
            });
            self.vals.push(Val::new(var(&name), I32, false, true, 0.0));
        }
        let index = self.index(producer_len);
        let name = self.fresh("w");
        body.push(Stmt::Let {
            var: Binding {
                name: name.clone(),
                ty: e.buf_ty,
            },
            value: load(&e.buf(), [index]),
        });
        self.vals
            .push(Val::new(var(&name), e.buf_ty, false, e.exact, FLOAT_CLAMP));
    }

    /// Appends up to `budget` random statements. `uniform`: control flow here
    /// is block-uniform (barriers and block-collective phases allowed).
    fn stmts(&mut self, body: &mut Vec<Stmt>, budget: u32, depth: u32, uniform: bool) {
        for _ in 0..budget {
            self.stmt(body, depth, uniform);
        }
    }

    fn scoped(&mut self, f: impl FnOnce(&mut Self, &mut Vec<Stmt>)) -> Vec<Stmt> {
        let (nv, nr, nw) = (self.vals.len(), self.vars.len(), self.warp_vals.len());
        let mut body = vec![];
        f(self, &mut body);
        self.vals.truncate(nv);
        self.vars.truncate(nr);
        self.warp_vals.truncate(nw);
        body
    }

    /// Whether a warp collective may stand here: a warp program in
    /// warp-uniform control.
    fn warp_here(&self) -> bool {
        self.programs[self.cur].warps && self.warp_ctl
    }

    fn stmt(&mut self, body: &mut Vec<Stmt>, depth: u32, uniform: bool) {
        let p = self.programs[self.cur].clone();
        let nested_ok = depth < 2;
        if self.warp_here() && self.rng.chance(WARP_STMT_PERCENT) {
            return self.warp_stmt(body, depth);
        }
        match self.rng.below(16) {
            0..=2 => {
                let ty = *self.rng.pick(&[F32, F32, I32, U32, Bool, F16, BF16]);
                let uni = self.rng.chance(20);
                let inexact = self.rng.chance(50);
                let v = self.value(ty, 3, inexact, uni);
                let name = self.fresh("v");
                body.push(Stmt::Let {
                    var: Binding {
                        name: name.clone(),
                        ty,
                    },
                    value: v.e,
                });
                self.vals
                    .push(Val::new(var(&name), ty, v.uniform, v.exact, v.bound));
            }
            3 => {
                let ty = *self.rng.pick(&[F32, I32, U32]);
                let exact = self.rng.chance(50);
                let v = self.value(ty, 2, !exact, false);
                let name = self.fresh("acc");
                body.push(Stmt::Var {
                    var: Binding {
                        name: name.clone(),
                        ty,
                    },
                    init: v.e,
                });
                self.vars.push((name.clone(), ty, exact));
                self.vals
                    .push(Val::new(var(&name), ty, false, exact, FLOAT_CLAMP));
            }
            4 | 5 if self.helpers && self.rng.chance(50) => {
                let uni = self.rng.chance(20);
                let args = vec![
                    self.value(U32, 2, false, uni),
                    self.value(U32, 2, false, uni),
                ];
                let uniform = args.iter().all(|a| a.uniform);
                let name = self.fresh("m");
                body.push(Stmt::Call {
                    dest: Some(Binding {
                        name: name.clone(),
                        ty: U32,
                    }),
                    function: MIX.into(),
                    args: args.into_iter().map(|a| a.e).collect(),
                });
                self.vals
                    .push(Val::new(var(&name), U32, uniform, true, 0.0));
            }
            4 | 5 => self.assign(body),
            6 if nested_ok => {
                let cond = self.boolean(2, false);
                // Warp collectives only where the condition is block-uniform.
                let warp_ctl = self.warp_ctl;
                self.warp_ctl &= cond.uniform;
                let then_body = self.scoped(|g, b| g.stmts(b, 2, depth + 1, false));
                let else_body = if self.rng.chance(50) {
                    self.scoped(|g, b| g.stmts(b, 2, depth + 1, false))
                } else {
                    vec![]
                };
                self.warp_ctl = warp_ctl;
                body.push(Stmt::If {
                    cond: cond.e,
                    then_body,
                    else_body,
                });
            }
            7 | 8 if nested_ok && self.loop_depth < 2 => {
                // Named by depth: sibling loops reuse the name.
                let name = format!("li{}", self.loop_depth);
                let (ty, start, end) =
                    if self.scalars.iter().any(|(n, _)| n == "sn") && self.rng.chance(40) {
                        (U32, lit_u32(0), var("sn"))
                    } else if self.rng.chance(50) {
                        (
                            I32,
                            Expr::from(-1i32),
                            Expr::from(self.rng.range(0, 3) as i32),
                        )
                    } else if self.helpers && self.rng.chance(50) {
                        (U32, lit_u32(0), var("TRIPS"))
                    } else {
                        (U32, lit_u32(0), lit_u32(self.rng.range(1, 4)))
                    };
                if self.rng.chance(30) {
                    return self.while_loop(body, depth, uniform);
                }
                self.loop_depth += 1;
                let loop_body = self.scoped(|g, b| {
                    g.vals.push(Val::new(var(&name), ty, true, true, 4.0));
                    g.stmts(b, 2, depth + 1, uniform);
                    if g.rng.chance(30) {
                        g.loop_exit(b, uniform, true);
                    }
                    if g.rng.chance(60) {
                        g.assign(b);
                    }
                });
                self.loop_depth -= 1;
                body.push(Stmt::For {
                    var: Binding { name, ty },
                    start,
                    end,
                    body: loop_body,
                });
            }
            9 if nested_ok && uniform => {
                let cond = self.boolean(2, true);
                let then_body = self.scoped(|g, b| g.stmts(b, 2, depth + 1, true));
                body.push(Stmt::If {
                    cond: cond.e,
                    then_body,
                    else_body: vec![],
                });
            }
            // Modules without warp collectives only: theirs keep their random
            // stream (the warp coverage is measured on fixed seeds).
            10 if uniform && !self.module_warps && self.rng.chance(40) => {
                self.block_collective(body, p.threads)
            }
            10 if uniform => body.push(Stmt::Barrier),
            10 if self.rng.chance(30) => self.deep_chain(body),
            11 => self.local_array(body, uniform),
            12 if p.uses_counters => self.counter_atomic(body),
            13 if p.owned_atomics => self.owned_atomics(body),
            14 if uniform && p.smem.is_some() => self.smem_phase(body, &p),
            15 if uniform && p.gscratch.is_some() => self.gscratch_phase(body, &p),
            _ => {
                let ty = *self.rng.pick(&[F32, I32, U32]);
                let v = self.value(ty, 3, true, false);
                let name = self.fresh("v");
                body.push(Stmt::Let {
                    var: Binding {
                        name: name.clone(),
                        ty,
                    },
                    value: v.e,
                });
                self.vals
                    .push(Val::new(var(&name), ty, v.uniform, v.exact, v.bound));
            }
        }
    }

    /// `let b: ty = block_op(...);` in block-uniform control: a broadcast of
    /// a per-thread value from a thread of the block, or a vote on a
    /// per-thread condition. The result is block-uniform, so later
    /// conditions on it may hold barriers.
    fn block_collective(&mut self, body: &mut Vec<Stmt>, threads: u32) {
        let name = self.fresh("bc");
        let op = *self.rng.pick(&BlockOp::ALL);
        let (ty, args, val) = match op {
            BlockOp::Broadcast => {
                let ty = *self.rng.pick(&[F32, I32, U32, Bool]);
                let v = self.value(ty, 2, true, false);
                let source = lit_u32(self.rng.range(0, threads.saturating_sub(1)));
                let val = Val::new(var(&name), ty, true, v.exact, v.bound);
                (ty, vec![v.e, source], val)
            }
            _ => {
                let p = self.boolean(2, false);
                let ty = if op == BlockOp::Count { U32 } else { Bool };
                (ty, vec![p.e], Val::new(var(&name), ty, true, true, 0.0))
            }
        };
        body.push(Stmt::BlockCollective {
            dest: Binding {
                name: name.clone(),
                ty,
            },
            op,
            args,
        });
        self.vals.push(val);
    }

    /// `var w = 0u; while w < trips max limit { w += 1u; ... }` with a
    /// maximum that is never reached (reaching it is an error in checked
    /// mode), sometimes leaving early through `break`.
    fn while_loop(&mut self, body: &mut Vec<Stmt>, depth: u32, uniform: bool) {
        let counter = self.fresh("w");
        let trips = self.rng.range(0, 4);
        let max = trips + self.rng.range(0, 3);
        body.push(Stmt::Var {
            var: Binding {
                name: counter.clone(),
                ty: U32,
            },
            init: lit_u32(0),
        });
        self.loop_depth += 1;
        let loop_body = self.scoped(|g, b| {
            // First, so that a `continue` further down cannot skip it.
            b.push(Stmt::CompoundAssign {
                name: counter.clone(),
                op: BinaryOp::Add,
                value: lit_u32(1),
            });
            g.stmts(b, 2, depth + 1, uniform);
            if g.rng.chance(40) {
                g.loop_exit(b, uniform, false);
            }
            if g.rng.chance(60) {
                g.assign(b);
            }
        });
        self.loop_depth -= 1;
        body.push(Stmt::While {
            cond: var(&counter).lt(lit_u32(trips)),
            max: lit_u32(max),
            body: loop_body,
        });
    }

    /// `if c { break; }` (or `continue;` where `continue_ok`): under a
    /// thread-dependent condition only where the loop has no block-collective
    /// operation (`uniform` is false), since such a loop is non-uniform.
    fn loop_exit(&mut self, body: &mut Vec<Stmt>, uniform: bool, continue_ok: bool) {
        // Where warp collectives may stand (a warp branch), a loop stays
        // warp-uniform: it is left on block-uniform conditions only.
        let cond = self.boolean(2, uniform || self.warp_here());
        let exit = if continue_ok && self.rng.chance(50) {
            Stmt::Continue
        } else {
            Stmt::Break
        };
        body.push(Stmt::If {
            cond: cond.e,
            then_body: vec![exit],
            else_body: vec![],
        });
    }

    /// A long but legal flat operator chain (`((t + 3u) ^ 5u) * 7u ...`, a
    /// tree as deep as it is long): every stage that walks expressions and
    /// the emitted code's compilers must take it.
    fn deep_chain(&mut self, body: &mut Vec<Stmt>) {
        // A term nests up to two levels in the text format (`(a + 3u ^ 5u) * 7u`
        // prints parentheses), and the blocks around the statement nest a few.
        let most = (mpmd_core::text::MAX_NESTING as u32 / 2).saturating_sub(8);
        let terms = (*self.rng.pick(&[40u32, 80, 120, 199])).min(most);
        let mut e = var("t");
        for _ in 0..terms {
            let c = lit_u32(self.rng.range(1, 1000));
            e = match self.rng.below(3) {
                0 => e + c,
                1 => e ^ c,
                _ => e * c,
            };
        }
        let name = self.fresh("deep");
        body.push(Stmt::Let {
            var: Binding {
                name: name.clone(),
                ty: U32,
            },
            value: e,
        });
        self.vals.push(Val::new(var(&name), U32, false, true, 0.0));
    }

    fn assign(&mut self, body: &mut Vec<Stmt>) {
        if self.vars.is_empty() {
            return;
        }
        let (name, ty, exact) = self.rng.pick(&self.vars).clone();
        let other = self.value(ty, 2, !exact, false);
        let cur = var(&name);
        if ty != F32 && self.rng.chance(50) {
            let op = *self
                .rng
                .pick(&[BinaryOp::Add, BinaryOp::BitXor, BinaryOp::Mul]);
            body.push(Stmt::CompoundAssign {
                name,
                op,
                value: other.e,
            });
            return;
        }
        let value = match ty {
            F32 => clamp(cur + other.e, FLOAT_CLAMP),
            _ => match self.rng.below(3) {
                0 => cur + other.e,
                1 => cur ^ other.e,
                _ => cur * other.e,
            },
        };
        body.push(Stmt::Assign { name, value });
    }

    /// A `local` array filled in a loop and read back; in block-uniform
    /// control flow sometimes across a barrier (register tiling keeps
    /// accumulators live across the barriers around its smem tiles).
    fn local_array(&mut self, body: &mut Vec<Stmt>, uniform: bool) {
        let ty = *self.rng.pick(&[F32, I32, U32, F16, BF16]);
        let len = self.rng.range(1, 4);
        let name = self.fresh("la");
        let k = self.fresh("k");
        body.push(Stmt::LocalArray {
            name: name.clone(),
            elem: ty,
            shape: vec![len],
        });
        let exact = self.rng.chance(50);
        let fill = self.scoped(|g, b| {
            g.vals.push(Val::new(var(&k), U32, true, true, 4.0));
            let v = g.value(ty, 2, !exact, false);
            b.push(Stmt::Store {
                target: at(&name, [var(&k)]),
                value: v.e,
            });
        });
        body.push(Stmt::For {
            var: Binding { name: k, ty: U32 },
            start: lit_u32(0),
            end: lit_u32(len),
            body: fill,
        });
        if uniform && self.rng.chance(40) {
            body.push(Stmt::Barrier);
        }
        let index = self.index(len);
        let v = self.fresh("v");
        body.push(Stmt::Let {
            var: Binding {
                name: v.clone(),
                ty,
            },
            value: load(&name, [index]),
        });
        self.vals
            .push(Val::new(var(&v), ty, false, exact, FLOAT_CLAMP));
    }

    fn counter_atomic(&mut self, body: &mut Vec<Stmt>) {
        if self.rng.chance(25) {
            return self.f32_counter_atomic(body);
        }
        let signed = self.rng.chance(35);
        let (target, op, ty) = if signed {
            let c = self.rng.below(SIGNED_COUNTER_OPS.len() as u64) as u32;
            (
                at("icnt", [lit_u32(c)]),
                SIGNED_COUNTER_OPS[c as usize],
                I32,
            )
        } else {
            let c = self.rng.below(COUNTER_OPS.len() as u64) as u32;
            (at("cnt", [lit_u32(c)]), COUNTER_OPS[c as usize], U32)
        };
        let v = self.value(ty, 2, false, false);
        // The old value depends on the schedule: bound but never used.
        let dest = self.rng.chance(30).then(|| Binding {
            name: self.fresh("old"),
            ty,
        });
        body.push(Stmt::Atomic {
            dest,
            op,
            target,
            args: vec![v.e],
        });
    }

    /// An f32 counter update (`F32_COUNTER_OPS`): min or max of an exact
    /// value, or an add of an exact value clamped and floored to a small
    /// integer, so the final value is the same in every order, as the
    /// integer counters' are.
    fn f32_counter_atomic(&mut self, body: &mut Vec<Stmt>) {
        let c = self.rng.below(F32_COUNTER_OPS.len() as u64) as u32;
        let op = F32_COUNTER_OPS[c as usize];
        let v = self.value(F32, 2, false, false);
        let operand = match op {
            AtomicOp::Add => math(MathFn::Floor, [clamp(v.e, F32_COUNTER_ADD_CLAMP)]),
            _ => v.e,
        };
        // The old value depends on the schedule: bound but never used.
        let dest = self.rng.chance(30).then(|| Binding {
            name: self.fresh("old"),
            ty: F32,
        });
        body.push(Stmt::Atomic {
            dest,
            op,
            target: at("fcnt", [lit_u32(c)]),
            args: vec![operand],
        });
    }

    /// Atomics on the element this thread owns: results are deterministic.
    fn owned_atomics(&mut self, body: &mut Vec<Stmt>) {
        let name = format!("a{}", self.cur);
        let target = at(&name, [var("gid")]);
        let op = *self.rng.pick(&AtomicOp::ALL);
        let args: Vec<Expr> = (0..op.arity())
            .map(|_| self.value(U32, 2, false, false).e)
            .collect();
        let dest = (op.returns_value()).then(|| Binding {
            name: self.fresh("at"),
            ty: U32,
        });
        if let Some(d) = &dest {
            self.vals
                .push(Val::new(var(&d.name), U32, false, true, 0.0));
        }
        body.push(Stmt::Atomic {
            dest,
            op,
            target,
            args,
        });
    }

    /// `sm[t] = v; barrier; read a neighbour (or thread 0 sums all); barrier`.
    fn smem_phase(&mut self, body: &mut Vec<Stmt>, p: &ProgramPlan) {
        let ty = p.smem.expect("smem phase needs smem");
        let sm = format!("sm{}", self.cur);
        let exact = self.rng.chance(50);
        let v = self.value(ty, 3, !exact, false);
        body.push(Stmt::Store {
            target: at(&sm, [var("t")]),
            value: v.e,
        });
        body.push(Stmt::Barrier);
        if self.rng.chance(50) {
            let off = self.rng.range(0, p.threads);
            let name = self.fresh("n");
            body.push(Stmt::Let {
                var: Binding {
                    name: name.clone(),
                    ty,
                },
                value: load(&sm, [(var("t") + lit_u32(off)) % lit_u32(p.threads)]),
            });
            self.vals
                .push(Val::new(var(&name), ty, false, exact, v.bound));
        } else {
            // Thread 0 reduces the block's values in a fixed order.
            let acc = self.fresh("red");
            let j = self.fresh("j");
            let zero = zero_of(ty);
            body.push(Stmt::Var {
                var: Binding {
                    name: acc.clone(),
                    ty,
                },
                init: zero,
            });
            body.push(Stmt::If {
                cond: var("t").eq(lit_u32(0)),
                then_body: vec![Stmt::For {
                    var: Binding {
                        name: j.clone(),
                        ty: U32,
                    },
                    start: lit_u32(0),
                    end: axis_size(&p.mesh.threads.name),
                    body: vec![Stmt::Assign {
                        name: acc.clone(),
                        value: var(&acc) + load(&sm, [var(&j)]),
                    }],
                }],
                else_body: vec![],
            });
            self.vals.push(Val::new(
                var(&acc),
                ty,
                false,
                exact,
                v.bound.max(1.0) * p.threads as f32,
            ));
        }
        body.push(Stmt::Barrier);
    }

    /// The same pattern on the program's gmem scratch, within the block.
    fn gscratch_phase(&mut self, body: &mut Vec<Stmt>, p: &ProgramPlan) {
        let ty = p.gscratch.expect("gscratch phase needs gmem scratch");
        let g = format!("g{}", self.cur);
        let exact = self.rng.chance(50);
        let v = self.value(ty, 3, !exact, false);
        body.push(Stmt::Store {
            target: at(&g, [var("gid")]),
            value: v.e,
        });
        body.push(Stmt::Barrier);
        let off = self.rng.range(1, p.threads.max(2));
        let name = self.fresh("n");
        let neighbour = var("lin") * axis_size(&p.mesh.threads.name)
            + (var("t") + lit_u32(off)) % lit_u32(p.threads);
        body.push(Stmt::Let {
            var: Binding {
                name: name.clone(),
                ty,
            },
            value: load(&g, [neighbour]),
        });
        self.vals
            .push(Val::new(var(&name), ty, false, exact, v.bound));
        body.push(Stmt::Barrier);
    }

    // ---- warp collectives -------------------------------------------------

    /// A warp statement in warp-uniform control: mostly a collective,
    /// sometimes a branch on a warp-uniform condition or a collective over
    /// the edge values.
    fn warp_stmt(&mut self, body: &mut Vec<Stmt>, depth: u32) {
        let p = &self.programs[self.cur];
        match self.rng.below(10) {
            0 | 1 if p.warp_branches && depth < 2 => self.warp_branch(body, depth),
            2 => self.warp_specials(body),
            _ => self.warp_collective(body),
        }
    }

    /// `if <warp-uniform condition> { collective; ... } else { ... }`:
    /// warp-uniform control that is not block-uniform (no barrier inside).
    fn warp_branch(&mut self, body: &mut Vec<Stmt>, depth: u32) {
        let cond = self.warp_cond(body);
        let then_body = self.scoped(|g, b| {
            g.warp_collective(b);
            g.stmts(b, 2, depth + 1, false);
        });
        let else_body = if self.rng.chance(40) {
            self.scoped(|g, b| g.stmts(b, 2, depth + 1, false))
        } else {
            vec![]
        };
        body.push(Stmt::If {
            cond,
            then_body,
            else_body,
        });
    }

    /// A condition that is the same in every lane of a warp but not in
    /// every thread of the block: the warp index in the forms the
    /// uniformity analysis knows, or a warp-uniform result.
    fn warp_cond(&mut self, body: &mut Vec<Stmt>) -> Expr {
        let warps = self.programs[self.cur].threads / 32;
        let k = self.rng.range(0, warps - 1);
        let t = var("t");
        let exact: Vec<Val> = self
            .warp_vals
            .iter()
            .filter(|v| v.exact && v.ty != F16 && v.ty != BF16)
            .cloned()
            .collect();
        match self.rng.below(8) {
            0 => (t / lit_u32(32)).eq(lit_u32(k)),
            1 => Expr::Binary(BinaryOp::Shr, Box::new(t), Box::new(lit_u32(5))).ne(lit_u32(k)),
            2 => (t / lit_u32(64)).eq(lit_u32(k / 2)),
            3 => ((t / lit_u32(32)) % lit_u32(2)).eq(lit_u32(k % 2)),
            4 => {
                // A `let` of the thread index plus a multiple of 32.
                let name = self.fresh("wl");
                body.push(Stmt::Let {
                    var: Binding {
                        name: name.clone(),
                        ty: U32,
                    },
                    value: var("lin") * lit_u32(32 * warps) + t,
                });
                ((var(&name) / lit_u32(32)) % lit_u32(warps)).eq(lit_u32(k))
            }
            _ if !exact.is_empty() => {
                let v = self.rng.pick(&exact).clone();
                match v.ty {
                    Bool if self.rng.chance(50) => v.e,
                    Bool => !v.e,
                    U32 => match self.rng.below(3) {
                        0 => (v.e & lit_u32(1 << self.rng.range(0, 31))).ne(lit_u32(0)),
                        1 => v.e.eq(lit_u32(0)),
                        _ => v.e.gt(lit_u32(self.int_literal(U32) as u32)),
                    },
                    I32 => {
                        if self.rng.chance(50) {
                            (v.e & Expr::from(1i32)).eq(Expr::from(0i32))
                        } else {
                            v.e.gt(Expr::from(self.int_literal(I32)))
                        }
                    }
                    _ => v.e.gt(Expr::from((self.rng.below(33) as f32 - 16.0) / 4.0)),
                }
            }
            _ => (t / lit_u32(32)).eq(lit_u32(k)),
        }
    }

    /// A lane, delta or mask: a literal (also past 31), a per-lane value, a
    /// warp-uniform result or any `u32`. Whether it is warp-uniform too.
    fn warp_lane(&mut self) -> (Expr, bool) {
        let t = var("t");
        let warp_u32: Vec<Val> = self
            .warp_vals
            .iter()
            .filter(|v| v.ty == U32)
            .cloned()
            .collect();
        match self.rng.below(10) {
            0..=3 => (lit_u32(*self.rng.pick(&WARP_LANES)), true),
            4..=6 => {
                let c = lit_u32(*self.rng.pick(&WARP_LANES));
                let e = match self.rng.below(7) {
                    0 => t,
                    1 => t + c,
                    2 => t * lit_u32(self.rng.range(2, 7)),
                    3 => lit_u32(31) - t % lit_u32(32),
                    4 => t % lit_u32(self.rng.range(2, 9)),
                    5 => t / lit_u32(self.rng.range(2, 8)),
                    _ => var("gid") ^ c,
                };
                (e, false)
            }
            7 if !warp_u32.is_empty() => (self.rng.pick(&warp_u32).e.clone(), true),
            7 | 8 => (self.int(U32, 1, true).e, true),
            _ => {
                let v = self.int(U32, 2, false);
                (v.e, v.uniform)
            }
        }
    }

    /// An exact f32 per lane with a full mantissa, either sign and
    /// magnitudes from 2^-9 to 2^5 (from the thread id): sums of these
    /// round, so the order of a warp's sum shows in its bits.
    fn lane_float(&mut self) -> Val {
        let mix = lit_u32(2 * self.rng.range(1 << 20, 1 << 30) + 1);
        let t = var("t");
        let mantissa = (var("gid") * mix) & lit_u32(0x007F_FFFF);
        let exponent = (lit_u32(118) + t.clone() % lit_u32(14)) << lit_u32(23);
        let sign = ((t / lit_u32(self.rng.range(1, 7))) & lit_u32(1)) << lit_u32(31);
        let bits = mantissa | exponent | sign;
        Val::new(bits.bitcast(F32), F32, false, true, 32.0)
    }

    /// A value of `ty` that usually differs from lane to lane.
    fn lane_value(&mut self, ty: ScalarType, inexact_ok: bool) -> Val {
        if ty == F32 && self.rng.chance(30) {
            return self.lane_float();
        }
        let v = self.value(ty, 2, inexact_ok, false);
        if !self.rng.chance(85) {
            return v;
        }
        let t = var("t");
        let small = |ty: ScalarType| (t.clone() % lit_u32(16)).cast(ty);
        let v = match ty {
            U32 => Val::new(
                v.e + var("gid") * lit_u32(2 * self.rng.range(0, 50) + 1),
                U32,
                false,
                true,
                0.0,
            ),
            I32 => Val::new(v.e ^ var("gid").cast(I32), I32, false, true, 0.0),
            Bool => {
                let k = lit_u32(self.rng.range(2, 5));
                let e = v.e.ne((t % k).eq(lit_u32(0)));
                Val::new(e, Bool, false, v.exact, 0.0)
            }
            _ => Val::new(v.e + small(ty), ty, false, v.exact, v.bound + 15.0),
        };
        if v.bound > FLOAT_CLAMP {
            let b = Expr::Lit(Literal::from_bits(
                ty,
                u32::from(numerics::from_f32(ty, FLOAT_CLAMP).unwrap_or(0)),
            ));
            let b = if ty == F32 {
                Expr::from(FLOAT_CLAMP)
            } else {
                b
            };
            Val {
                e: math(MathFn::Min, [math(MathFn::Max, [v.e, -b.clone()]), b]),
                bound: FLOAT_CLAMP,
                ..v
            }
        } else {
            v
        }
    }

    /// A predicate for a vote or ballot: any boolean (often the same in
    /// every lane), one that differs between lanes by its form or by the
    /// input data, or one that holds in all, none or some lanes of a warp
    /// depending on the warp.
    fn lane_predicate(&mut self) -> Expr {
        let t = var("t");
        match self.rng.below(20) {
            0..=2 => self.boolean(2, false).e,
            3..=5 => {
                let k = lit_u32(self.rng.range(2, 5));
                self.boolean(1, false).e.ne((t % k).eq(lit_u32(0)))
            }
            6..=8 => {
                let k = self.rng.range(1, 40);
                (t % lit_u32(k)).eq(lit_u32(self.rng.range(0, k - 1)))
            }
            9..=11 => t.lt(lit_u32(*self.rng.pick(&[0u32, 1, 16, 31, 32, 40, 64, 100]))),
            12 => Expr::from(self.rng.chance(50)),
            13..=16 if !self.inputs.is_empty() => {
                // Random data at a per-lane index.
                let x = self.rng.pick(&self.inputs).clone();
                let c = lit_u32(self.rng.range(0, x.len - 1));
                let v = load(&x.name, [(var("gid") + c) % lit_u32(x.len)]);
                let zero = zero_of(x.ty);
                if self.rng.chance(50) {
                    v.gt(zero)
                } else {
                    v.lt(zero)
                }
            }
            _ => (var("gid") & lit_u32(1 << self.rng.range(0, 8))).ne(lit_u32(0)),
        }
    }

    /// One warp collective of a random op on a random accepted type, its
    /// result in scope afterwards (warp-uniform ones for warp branches and
    /// lanes too), folded into the digest and sometimes used as an index.
    fn warp_collective(&mut self, body: &mut Vec<Stmt>) {
        let op = *self.rng.pick(&WarpOp::ALL);
        let (args, val, warp_uniform) = if op.is_shuffle() {
            let ty = *self.rng.pick(&SHUFFLE_TYPES);
            // Exact values reach the digest, so most shuffles move those.
            let inexact_ok = self.rng.chance(20);
            let v = self.lane_value(ty, inexact_ok);
            let (lane, lane_uniform) = self.warp_lane();
            let uniform = op == WarpOp::ShuffleIdx && lane_uniform;
            (vec![v.e.clone(), lane], v, uniform)
        } else if matches!(op, WarpOp::VoteAny | WarpOp::VoteAll | WarpOp::Ballot) {
            let p = self.lane_predicate();
            (
                vec![p],
                Val::new(Expr::from(false), Bool, false, true, 0.0),
                true,
            )
        } else {
            let ty = *self.rng.pick(&REDUCE_TYPES);
            // A float sum is exact only of exact values (its order is fixed).
            let inexact_ok = op != WarpOp::ReduceAdd && self.rng.chance(40);
            let v = if ty == F32 && op == WarpOp::ReduceAdd && self.rng.chance(60) {
                self.lane_float()
            } else {
                self.lane_value(ty, inexact_ok)
            };
            let bound = if op == WarpOp::ReduceAdd {
                v.bound * 32.0
            } else {
                v.bound
            };
            (vec![v.e.clone()], Val { bound, ..v }, true)
        };
        let ty = op.result_type(val.ty).expect("an accepted value type");
        let prefix = match op {
            _ if op.is_shuffle() => "sh",
            WarpOp::VoteAny | WarpOp::VoteAll => "vt",
            WarpOp::Ballot => "bl",
            _ => "rd",
        };
        let name = self.fresh(prefix);
        body.push(Stmt::Warp {
            dest: Binding {
                name: name.clone(),
                ty,
            },
            op,
            args,
        });
        let result = Val::new(var(&name), ty, false, val.exact, val.bound);
        self.vals.push(result.clone());
        if warp_uniform {
            self.warp_vals.push(result.clone());
        }
        // Into the digest: integers and booleans as they are, exact floats
        // through `abs` (the sign of zero is unspecified).
        let word = match ty {
            U32 => Some(result.e.clone()),
            I32 => Some(result.e.clone().bitcast(U32)),
            Bool => Some(result.e.clone().cast(U32)),
            F32 if result.exact => Some(math(MathFn::Abs, [result.e.clone()]).bitcast(U32)),
            F16 | BF16 if result.exact => {
                Some(math(MathFn::Abs, [result.e.clone()]).cast(F32).bitcast(U32))
            }
            _ => None,
        };
        if let Some(word) = word {
            body.push(Stmt::Assign {
                name: WARP_DIGEST.into(),
                value: (var(WARP_DIGEST) * lit_u32(33)) ^ word.clone(),
            });
            if self.rng.chance(30) && !self.inputs.is_empty() && !ty.is_float() {
                // The result as an index.
                let x = self.rng.pick(&self.inputs).clone();
                let u = self.fresh("u");
                body.push(Stmt::Let {
                    var: Binding {
                        name: u.clone(),
                        ty: x.ty,
                    },
                    value: load(&x.name, [word % lit_u32(x.len)]),
                });
                let bound = if x.ty.is_float() { 4.0 } else { 0.0 };
                self.vals.push(Val::new(var(&u), x.ty, false, true, bound));
            }
        }
    }

    /// A shuffle or f32 reduction of the edge values of `xw` (NaN,
    /// infinities, ±0, extremes, subnormals), stored straight to its slot of
    /// `ws<i>` and used for nothing else.
    fn warp_specials(&mut self, body: &mut Vec<Stmt>) {
        let slot = self.rng.below(u64::from(WARP_SPECIAL_SLOTS)) as u32;
        let op = match slot {
            0 => WarpOp::ReduceAdd,
            1 => WarpOp::ReduceMin,
            2 => WarpOp::ReduceMax,
            _ => *self.rng.pick(&[
                WarpOp::ShuffleIdx,
                WarpOp::ShuffleUp,
                WarpOp::ShuffleDown,
                WarpOp::ShuffleXor,
            ]),
        };
        let t = var("t");
        let len = WARP_SPECIALS_LEN;
        let index = match self.rng.below(4) {
            // The edge values in order (the first 16), some lanes alike.
            0 => (t * lit_u32(self.rng.range(0, 3)) + lit_u32(self.rng.range(0, 15))) % lit_u32(16),
            1 => (var("gid") + lit_u32(self.rng.range(0, len - 1))) % lit_u32(len),
            2 => lit_u32(self.rng.range(0, len - 1)),
            _ => (t ^ lit_u32(self.rng.range(0, 31))) % lit_u32(len),
        };
        let mut args = vec![load(WARP_SPECIALS, [index])];
        if op.is_shuffle() {
            args.push(self.warp_lane().0);
        }
        let name = self.fresh("sp");
        body.push(Stmt::Warp {
            dest: Binding {
                name: name.clone(),
                ty: F32,
            },
            op,
            args,
        });
        body.push(Stmt::Store {
            target: at(&format!("ws{}", self.cur), [lit_u32(slot), var("gid")]),
            value: var(&name),
        });
    }

    // ---- provable operands ------------------------------------------------

    /// The provable-operand statements ([`GenOptions::provable_operands`]) of
    /// the first program, at its top level, from their own stream (nothing
    /// drawn from `rng`, no name from `fresh`, no value left in scope): an
    /// edge value `x` from `xz`, an integer `d` and a zero `z` derived from
    /// it, then one statement per slot of `zs0`, each a shape lavapipe folded
    /// as if no infinity or NaN existed.
    fn provable_operands(&mut self, body: &mut Vec<Stmt>) {
        let r = &mut self.provable_rng;
        let len = PROVABLE_SPECIALS_LEN;
        let t = var("t");
        let index = match r.below(3) {
            // The edge values in order (the first 16), some lanes alike.
            0 => (t * lit_u32(r.range(1, 3)) + lit_u32(r.range(0, 15))) % lit_u32(16),
            1 => (var("gid") + lit_u32(r.range(0, len - 1))) % lit_u32(len),
            _ => t % lit_u32(16),
        };
        let x = || var("zx");
        body.push(Stmt::Let {
            var: Binding {
                name: "zx".into(),
                ty: F32,
            },
            value: load(PROVABLE_SPECIALS, [index]),
        });
        // An integer the compiler knows nothing about, and zeros it can
        // prove from it.
        let d = match r.below(3) {
            0 => var("gid").cast(I32) - Expr::Lit(Literal::I32(r.range(0, 40) as i32)),
            1 => var("lin").cast(I32) + Expr::Lit(Literal::I32(1)),
            _ => var("t").cast(I32) * Expr::Lit(Literal::I32(-3)),
        };
        body.push(Stmt::Let {
            var: Binding {
                name: "zd".into(),
                ty: I32,
            },
            value: d,
        });
        let dv = || var("zd");
        let zero = |r: &mut Rng| match r.below(3) {
            0 => dv() & Expr::Lit(Literal::I32(0)),
            1 => dv() - dv(),
            _ => dv() * Expr::Lit(Literal::I32(0)),
        };
        let fzero = |r: &mut Rng| zero(r).cast(F32);
        let store = |slot: u32, value: Expr| Stmt::Store {
            target: at(PROVABLE_OUTPUT, [lit_u32(slot), var("gid")]),
            value,
        };
        // 0: a loop from 0, which a compiler unrolls: `x * f32(0)` first.
        let trips = r.range(2, 4);
        body.push(Stmt::Var {
            var: Binding {
                name: "zacc".into(),
                ty: F32,
            },
            init: Expr::Lit(Literal::f32(0.0)),
        });
        let term = if r.chance(50) {
            x() * var("zj").cast(F32)
        } else {
            var("zj").cast(F32) * x()
        };
        body.push(Stmt::For {
            var: Binding {
                name: "zj".into(),
                ty: U32,
            },
            start: lit_u32(0),
            end: lit_u32(trips),
            body: vec![Stmt::CompoundAssign {
                name: "zacc".into(),
                op: BinaryOp::Add,
                value: term,
            }],
        });
        body.push(store(0, var("zacc")));
        // 1: self-subtraction.
        let same = match r.below(3) {
            0 => x() - x(),
            1 => x() + (-x()),
            _ => (x() - x()) * x(),
        };
        body.push(store(1, same));
        // 2: fma with a zero factor.
        let c = Expr::Lit(Literal::f32(*r.pick(&[1.0f32, -0.5, 3.0])));
        let fma = if r.chance(50) {
            math(MathFn::Fma, [x(), fzero(r), c])
        } else {
            math(MathFn::Fma, [fzero(r), x(), c])
        };
        body.push(store(2, fma));
        // 3: a division by a zero.
        let quotient = match r.below(3) {
            0 => x() / fzero(r),
            1 => dv().cast(F32) / fzero(r),
            _ => fzero(r) / fzero(r),
        };
        body.push(store(3, quotient));
        // 4: a product with a zero, sometimes added to.
        let product = match r.below(3) {
            0 => fzero(r) * x(),
            1 => x() * fzero(r),
            _ => x() * fzero(r) + Expr::Lit(Literal::f32(1.0)),
        };
        body.push(store(4, product));
        // 5: the f32 steps of a 16-bit operation.
        let half = *r.pick(&[F16, BF16]);
        let h = |e: Expr| e.cast(half);
        let sixteen = match r.below(4) {
            0 => h(dv()) / h(zero(r)),
            1 => h(x()) - h(x()),
            2 => h(x()) * h(zero(r)),
            _ => math(MathFn::Fma, [h(x()), h(zero(r)), half_one(half)]),
        };
        body.push(store(5, sixteen.cast(F32)));
    }

    // ---- tensor cores ----------------------------------------------------

    /// Plans the mma groups of the warp programs (the first always, each
    /// other one with even odds), from the mma stream alone.
    fn plan_mma(&mut self) {
        for i in 0..self.programs.len() {
            let (warps, branches) = (self.programs[i].warps, self.programs[i].warp_branches);
            if !warps || (i > 0 && !self.mma_rng.chance(50)) {
                continue;
            }
            let r = &mut self.mma_rng;
            let count = r.range(1, MMA_GROUPS_MAX);
            let sources = [
                MmaSource::Values,
                MmaSource::Values,
                MmaSource::Smem,
                MmaSource::Gmem,
            ];
            let groups = (0..count)
                .map(|_| MmaGroup {
                    ty: *r.pick(&mma::INPUT_TYPES),
                    rows: if r.chance(50) {
                        0
                    } else {
                        r.range(2, MMA_ROWS_MAX)
                    },
                    a: *r.pick(&sources),
                    b: *r.pick(&sources),
                    special_input: r.chance(50),
                    in_branch: branches && r.chance(40),
                })
                .collect();
            self.programs[i].mma = groups;
        }
    }

    /// Whether the fragment source input `name` holds edge values; `None`
    /// when it is no fragment source.
    fn mma_input_is_special(&self, name: &str) -> Option<bool> {
        self.programs.iter().enumerate().find_map(|(i, p)| {
            p.mma.iter().enumerate().find_map(|(g, group)| {
                (group.source_needed(MmaSource::Gmem) && mma_input(i, g) == name)
                    .then_some(group.special_input)
            })
        })
    }

    /// Runs `f` with the mma stream as `rng` and restores everything the
    /// rest of the kernel would see: the mma statements leave no value in
    /// scope (their results reach only `mo<i>`, as the `mma` compare mode
    /// needs) and draw nothing from the main stream.
    fn with_mma_stream(&mut self, f: impl FnOnce(&mut Self)) {
        std::mem::swap(&mut self.rng, &mut self.mma_rng);
        let (nv, nr, nw) = (self.vals.len(), self.vars.len(), self.warp_vals.len());
        let (nest, loop_depth, warp_ctl) = (self.nest, self.loop_depth, self.warp_ctl);
        f(self);
        self.vals.truncate(nv);
        self.vars.truncate(nr);
        self.warp_vals.truncate(nw);
        (self.nest, self.loop_depth, self.warp_ctl) = (nest, loop_depth, warp_ctl);
        std::mem::swap(&mut self.rng, &mut self.mma_rng);
    }

    /// One mma group at the top of a warp program (block-uniform control):
    /// its smem tile filled before a barrier, then (sometimes under a branch
    /// on the warp index) fragments declared and filled, multiplied and
    /// stored to the group's slots of `mo<i>`.
    fn mma_group(&mut self, body: &mut Vec<Stmt>, g: usize, group: &MmaGroup) {
        let i = self.cur;
        let threads = self.programs[i].threads;
        if group.source_needed(MmaSource::Smem) {
            self.mma_fill_tile(body, g, group.ty, threads);
            body.push(Stmt::Barrier);
        }
        let name = |what: &str| format!("mm{g}_{what}");
        let (fa, fb, acc) = (name("a"), name("b"), name("c"));
        let shape = |len: u32| {
            if group.rows == 0 {
                vec![len]
            } else {
                vec![group.rows, len]
            }
        };
        let mut stmts = vec![
            Stmt::LocalArray {
                name: fa.clone(),
                elem: group.ty,
                shape: shape(mma::A_LEN),
            },
            Stmt::LocalArray {
                name: fb.clone(),
                elem: group.ty,
                shape: shape(mma::B_LEN),
            },
            Stmt::LocalArray {
                name: acc.clone(),
                elem: F32,
                shape: shape(mma::C_LEN),
            },
        ];
        self.mma_fill_fragment(&mut stmts, g, group, mma::Operand::A, &fa);
        self.mma_fill_fragment(&mut stmts, g, group, mma::Operand::B, &fb);
        self.mma_fill_accumulator(&mut stmts, g, group, &acc);
        let result = self.mma_multiply(&mut stmts, g, group, [&fa, &fb, &acc]);
        self.mma_store(&mut stmts, g, group, &result);
        if group.in_branch {
            let warps = threads / 32;
            let k = self.rng.range(0, warps - 1);
            let warp = var("t") / lit_u32(32);
            let cond = if self.rng.chance(50) {
                warp.eq(lit_u32(k))
            } else {
                (warp % lit_u32(2)).eq(lit_u32(k % 2))
            };
            body.push(Stmt::If {
                cond,
                then_body: stmts,
                else_body: vec![],
            });
        } else {
            body.extend(stmts);
        }
    }

    /// Every element of the group's smem tile written once by the block
    /// (element `x` by thread `x % threads`), from values of `x`.
    fn mma_fill_tile(&mut self, body: &mut Vec<Stmt>, g: usize, ty: ScalarType, threads: u32) {
        let [bufs, rows, cols] = MMA_TILE;
        let total = bufs * rows * cols;
        let (f, x) = (format!("mm{g}_f"), format!("mm{g}_x"));
        let value = self.mma_tile_value(ty, var(&x));
        let store = Stmt::Store {
            target: at(
                &mma_tile(self.cur, g),
                [
                    var(&x) / lit_u32(rows * cols),
                    var(&x) / lit_u32(cols) % lit_u32(rows),
                    var(&x) % lit_u32(cols),
                ],
            ),
            value,
        };
        let guarded = if total.is_multiple_of(threads) {
            store
        } else {
            Stmt::If {
                cond: var(&x).lt(lit_u32(total)),
                then_body: vec![store],
                else_body: vec![],
            }
        };
        body.push(Stmt::For {
            var: Binding {
                name: f.clone(),
                ty: U32,
            },
            start: lit_u32(0),
            end: lit_u32(total.div_ceil(threads)),
            body: vec![
                Stmt::Let {
                    var: Binding {
                        name: x.clone(),
                        ty: U32,
                    },
                    value: var("t") + lit_u32(threads) * var(&f),
                },
                guarded,
            ],
        });
    }

    /// A value of tile element `x`: exact small values or converted input
    /// data, sometimes an edge value.
    fn mma_tile_value(&mut self, ty: ScalarType, x: Expr) -> Expr {
        let base = match self.rng.below(3) {
            0 => {
                let c = lit_u32(2 * self.rng.range(1, 20) + 1);
                (((x.clone() * c) % lit_u32(23)).cast(F32) * 0.25f32 - 2.75f32).cast(ty)
            }
            1 if !self.inputs.is_empty() => {
                let input = self.rng.pick(&self.inputs).clone();
                let c = lit_u32(self.rng.range(0, input.len - 1));
                let e = load(&input.name, [(x.clone() + c) % lit_u32(input.len)]);
                cast_to(e, input.ty, ty)
            }
            _ => {
                let c = lit_u32(self.rng.range(0, 63));
                (((x.clone() ^ c) % lit_u32(9)).cast(F32) - 4.0f32).cast(ty)
            }
        };
        self.sprinkle_special(ty, x, base)
    }

    /// `base`, or in a few of the elements (`index` picks them) an edge
    /// value of `ty` in its place.
    fn sprinkle_special(&mut self, ty: ScalarType, index: Expr, base: Expr) -> Expr {
        if !self.rng.chance(40) {
            return base;
        }
        let k = self.rng.range(3, 9);
        let phase = self.rng.range(0, k - 1);
        let special = self.mma_special(ty, index.clone());
        select((index % lit_u32(k)).eq(lit_u32(phase)), special, base)
    }

    /// An edge value of the 16-bit type `ty`: the f32 edge values of `xw`
    /// converted (NaN, infinities, subnormals, extremes), a large value
    /// (in bf16, products of two overflow f32), a subnormal, an infinity
    /// or a NaN.
    fn mma_special(&mut self, ty: ScalarType, index: Expr) -> Expr {
        let half = |bits: u32| Expr::Lit(Literal::from_bits(ty, bits));
        let sign = if self.rng.chance(50) { 0x8000 } else { 0 };
        match self.rng.below(5) {
            0 | 1 => {
                let c = lit_u32(self.rng.range(0, WARP_SPECIALS_LEN - 1));
                load(WARP_SPECIALS, [(index + c) % lit_u32(WARP_SPECIALS_LEN)]).cast(ty)
            }
            2 => {
                let large = if ty == BF16 { 3.0e19f32 } else { 16384.0 };
                ((index % lit_u32(8) + lit_u32(1)).cast(F32) * large).cast(ty)
            }
            3 => {
                // The largest subnormals down to the smallest.
                let top = if ty == BF16 { 0x7f } else { 0x3ff };
                half(sign | self.rng.range(1, top))
            }
            _ => {
                let (inf, nan) = if ty == BF16 {
                    (0x7f80, 0x7fc0)
                } else {
                    (0x7c00, 0x7e00)
                };
                half(if self.rng.chance(50) { sign | inf } else { nan })
            }
        }
    }

    /// A per-lane value of A or B element `e` (of type `ty`): exact
    /// values of the lane, converted input data or a generated exact value,
    /// sometimes an edge value.
    fn mma_input_value(&mut self, ty: ScalarType, e: Expr) -> Expr {
        let t = var("t");
        let base = match self.rng.below(5) {
            0 | 1 => {
                // Multiples of 1/4 in [-2, 2]: exact in both types.
                let c1 = lit_u32(self.rng.range(1, 40));
                let c2 = lit_u32(self.rng.range(1, 16));
                (((t.clone() * c1 + e.clone() * c2) % lit_u32(17)).cast(F32) * 0.25f32 - 2.0f32)
                    .cast(ty)
            }
            2 if !self.inputs.is_empty() => {
                let input = self.rng.pick(&self.inputs).clone();
                let c = lit_u32(self.rng.range(0, input.len - 1));
                let index = (var("gid") * lit_u32(8) + e.clone() + c) % lit_u32(input.len);
                cast_to(load(&input.name, [index]), input.ty, ty)
            }
            _ => self.value(ty, 2, false, false).e,
        };
        let spread = lit_u32(self.rng.range(1, 5));
        self.sprinkle_special(ty, t + e * spread, base)
    }

    /// A per-lane value of C element `e`: exact f32 values (small ones,
    /// generated ones, full mantissas), sometimes an edge value of `xw`.
    fn mma_c_value(&mut self, e: Expr) -> Expr {
        let gid = var("gid");
        let base = match self.rng.below(3) {
            0 => {
                let c1 = lit_u32(self.rng.range(1, 40));
                let c2 = lit_u32(self.rng.range(1, 16));
                ((gid.clone() * c1 + e.clone() * c2) % lit_u32(13)).cast(F32) - 6.0f32
            }
            1 => self.value(F32, 2, false, false).e,
            _ => self.lane_float().e,
        };
        if !self.rng.chance(30) {
            return base;
        }
        let k = self.rng.range(3, 9);
        let index = gid + e * lit_u32(self.rng.range(1, 5));
        let c = lit_u32(self.rng.range(0, WARP_SPECIALS_LEN - 1));
        select(
            (index.clone() % lit_u32(k)).eq(lit_u32(0)),
            load(WARP_SPECIALS, [(index + c) % lit_u32(WARP_SPECIALS_LEN)]),
            base,
        )
    }

    /// Fills every row of the A or B fragment array `array`: element by
    /// element with per-lane values, or with `mma_load_a/b` from the smem
    /// tile or the gmem input at warp-uniform origins that keep the block
    /// inside [`MMA_TILE`].
    fn mma_fill_fragment(
        &mut self,
        body: &mut Vec<Stmt>,
        g: usize,
        group: &MmaGroup,
        operand: mma::Operand,
        array: &str,
    ) {
        let (source, len, role) = match operand {
            mma::Operand::A => (group.a, mma::A_LEN, "a"),
            // The generator fills B fragments with `mma_load_b` only.
            mma::Operand::B | mma::Operand::BKMajor => (group.b, mma::B_LEN, "b"),
        };
        let row_var = format!("mm{g}_i{role}");
        let row = (group.rows > 0).then(|| var(&row_var));
        let mut fill = vec![];
        match source {
            MmaSource::Values => {
                let e = format!("mm{g}_e{role}");
                // Each row its own values.
                let element = match &row {
                    Some(r) => var(&e) + r.clone() * lit_u32(len),
                    None => var(&e),
                };
                let value = self.mma_input_value(group.ty, element);
                let mut index = row.iter().cloned().collect::<Vec<_>>();
                index.push(var(&e));
                fill.push(Stmt::For {
                    var: Binding { name: e, ty: U32 },
                    start: lit_u32(0),
                    end: lit_u32(len),
                    body: vec![Stmt::Store {
                        target: at(array, index),
                        value,
                    }],
                });
            }
            MmaSource::Smem | MmaSource::Gmem => {
                let base = if source == MmaSource::Smem {
                    mma_tile(self.cur, g)
                } else {
                    mma_input(self.cur, g)
                };
                let (block_rows, block_cols) = operand.block_shape();
                let [bufs, rows, cols] = MMA_TILE;
                let origin = [
                    self.mma_origin(bufs - 1, row.as_ref(), 1),
                    self.mma_origin(rows - block_rows, row.as_ref(), 8),
                    self.mma_origin(cols - block_cols, row.as_ref(), 4),
                ];
                let dest = match &row {
                    Some(r) => Fragment::row(array, r.clone()),
                    None => Fragment::whole(array),
                };
                fill.push(Stmt::MmaLoad {
                    operand,
                    dest,
                    source: at(&base, origin),
                });
            }
        }
        if group.rows == 0 {
            body.extend(fill);
        } else {
            body.push(Stmt::For {
                var: Binding {
                    name: row_var,
                    ty: U32,
                },
                start: lit_u32(0),
                end: lit_u32(group.rows),
                body: fill,
            });
        }
    }

    /// A warp-uniform origin index in `0..=most`: a literal (often a
    /// multiple of 8, where CUDA uses `ldmatrix`), a multiple `step` of the
    /// row loop's variable, or from the block or warp index.
    fn mma_origin(&mut self, most: u32, row: Option<&Expr>, step: u32) -> Expr {
        let eights: Vec<u32> = (0..=most).filter(|v| v % 8 == 0).collect();
        match self.rng.below(6) {
            0 => lit_u32(self.rng.range(0, most)),
            1 => lit_u32(*self.rng.pick(&eights)),
            // The loop runs at most `MMA_ROWS_MAX` rows: `step * i <= most`.
            2 if row.is_some() && step * (MMA_ROWS_MAX - 1) <= most => {
                row.cloned().unwrap_or(lit_u32(0)) * lit_u32(step)
            }
            3 => (var("lin") % lit_u32(2)) * lit_u32(most / 2),
            4 => (var("t") / lit_u32(32) % lit_u32(2)) * lit_u32(most),
            _ => lit_u32(*self.rng.pick(&eights)),
        }
    }

    /// Zero or per-lane values in every element of every accumulator row.
    fn mma_fill_accumulator(
        &mut self,
        body: &mut Vec<Stmt>,
        g: usize,
        group: &MmaGroup,
        acc: &str,
    ) {
        let e = format!("mm{g}_ec");
        let value = if self.rng.chance(30) {
            Expr::from(0.0f32)
        } else {
            self.mma_c_value(var(&e))
        };
        let row_var = format!("mm{g}_ic");
        let mut index = vec![];
        if group.rows > 0 {
            index.push(var(&row_var));
        }
        index.push(var(&e));
        let fill = Stmt::For {
            var: Binding { name: e, ty: U32 },
            start: lit_u32(0),
            end: lit_u32(mma::C_LEN),
            body: vec![Stmt::Store {
                target: at(acc, index),
                value,
            }],
        };
        body.push(if group.rows == 0 {
            fill
        } else {
            Stmt::For {
                var: Binding {
                    name: row_var,
                    ty: U32,
                },
                start: lit_u32(0),
                end: lit_u32(group.rows),
                body: vec![fill],
            }
        });
    }

    /// The multiplies: on whole arrays into the accumulator or a separate
    /// `d`, sometimes once more accumulating in place; on rows, one per
    /// accumulator row, sometimes over every A row in turn (a k loop). The
    /// fragment holding D is returned.
    fn mma_multiply(
        &mut self,
        body: &mut Vec<Stmt>,
        g: usize,
        group: &MmaGroup,
        [fa, fb, acc]: [&str; 3],
    ) -> String {
        if group.rows == 0 {
            let d = if self.rng.chance(50) {
                acc.to_string()
            } else {
                let d = format!("mm{g}_d");
                body.push(Stmt::LocalArray {
                    name: d.clone(),
                    elem: F32,
                    shape: vec![mma::C_LEN],
                });
                d
            };
            body.push(Stmt::Mma {
                d: Fragment::whole(&d),
                a: Fragment::whole(fa),
                b: Fragment::whole(fb),
                c: Fragment::whole(acc),
            });
            if self.rng.chance(40) {
                body.push(Stmt::Mma {
                    d: Fragment::whole(&d),
                    a: Fragment::whole(fa),
                    b: Fragment::whole(fb),
                    c: Fragment::whole(&d),
                });
            }
            return d;
        }
        let rows = group.rows;
        let (j, k) = (format!("mm{g}_j"), format!("mm{g}_k"));
        let chained = self.rng.chance(40);
        let acc_row = if self.rng.chance(20) {
            // Each lane its own row order: rows may differ between lanes.
            (var("t") + var(&j)) % lit_u32(rows)
        } else {
            var(&j)
        };
        let a_row = if chained {
            var(&k)
        } else {
            self.mma_row(&j, rows)
        };
        let b_row = self.mma_row(&j, rows);
        let multiply = Stmt::Mma {
            d: Fragment::row(acc, acc_row.clone()),
            a: Fragment::row(fa, a_row),
            b: Fragment::row(fb, b_row),
            c: Fragment::row(acc, acc_row),
        };
        let over = |name: &str, body: Vec<Stmt>| Stmt::For {
            var: Binding {
                name: name.to_string(),
                ty: U32,
            },
            start: lit_u32(0),
            end: lit_u32(rows),
            body,
        };
        let inner = over(&j, vec![multiply]);
        body.push(if chained {
            over(&k, vec![inner])
        } else {
            inner
        });
        acc.to_string()
    }

    /// A fragment row in a loop over `j`: `j` itself, the next row, a
    /// constant one, or one that depends on the lane or the warp.
    fn mma_row(&mut self, j: &str, rows: u32) -> Expr {
        match self.rng.below(10) {
            0..=4 => var(j),
            5 | 6 => (var(j) + lit_u32(1)) % lit_u32(rows),
            7 => lit_u32(self.rng.range(0, rows - 1)),
            8 => (var("t") + var(j)) % lit_u32(rows),
            _ => (var("t") / lit_u32(32) + var(j)) % lit_u32(rows),
        }
    }

    /// D's elements to the group's slots of `mo<i>` at the thread's global
    /// id: one slot per row, sometimes the sum of two rows (an addition of
    /// mma results, which the `mma` bound covers).
    fn mma_store(&mut self, body: &mut Vec<Stmt>, g: usize, group: &MmaGroup, d: &str) {
        let out = format!("{MMA_OUTPUT_PREFIX}{}", self.cur);
        let e = format!("mm{g}_es");
        let first_slot = MMA_ROWS_MAX * g as u32;
        let element = |row: Option<Expr>| {
            let mut index: Vec<Expr> = row.into_iter().collect();
            index.push(var(&e));
            load(d, index)
        };
        let store = |slot: Expr, value: Expr| Stmt::For {
            var: Binding {
                name: e.clone(),
                ty: U32,
            },
            start: lit_u32(0),
            end: lit_u32(mma::C_LEN),
            body: vec![Stmt::Store {
                target: at(&out, [slot, var("gid"), var(&e)]),
                value,
            }],
        };
        if group.rows == 0 {
            body.push(store(lit_u32(first_slot), element(None)));
            return;
        }
        let j = format!("mm{g}_js");
        let row = var(&j);
        let value = if self.rng.chance(25) {
            element(Some(row.clone()))
                + element(Some((row.clone() + lit_u32(1)) % lit_u32(group.rows)))
        } else {
            element(Some(row.clone()))
        };
        body.push(Stmt::For {
            var: Binding { name: j, ty: U32 },
            start: lit_u32(0),
            end: lit_u32(group.rows),
            body: vec![store(lit_u32(first_slot) + row, value)],
        });
    }

    // ---- expressions -----------------------------------------------------

    /// An in-bounds `u32` index below `len`.
    fn index(&mut self, len: u32) -> Expr {
        match self.rng.below(4) {
            0 => var("gid") % lit_u32(len),
            1 => (var("gid") + lit_u32(self.rng.range(0, 1000))) % lit_u32(len),
            2 => lit_u32(self.rng.range(0, len - 1)),
            _ => {
                let v = self.int(U32, 2, false);
                v.e % lit_u32(len)
            }
        }
    }

    fn value(&mut self, ty: ScalarType, depth: u32, inexact_ok: bool, uniform: bool) -> Val {
        match ty {
            F32 => self.float(depth, inexact_ok, uniform),
            F16 | BF16 => self.half(ty, depth, inexact_ok, uniform),
            Bool => self.boolean(depth, uniform),
            _ => self.int(ty, depth, uniform),
        }
    }

    fn scope_val(&mut self, ty: ScalarType, inexact_ok: bool, uniform: bool) -> Option<Val> {
        let found: Vec<&Val> = self
            .vals
            .iter()
            .filter(|v| v.ty == ty && (inexact_ok || v.exact) && (!uniform || v.uniform))
            .collect();
        if found.is_empty() {
            return None;
        }
        Some(found[self.rng.below(found.len() as u64) as usize].clone())
    }

    /// `j < len && x[j] > v` or `j >= len || x[j] < v` with an index that may
    /// be out of bounds: `&&` and `||` short-circuit, so the load is made only
    /// where it is in bounds (checked mode would report it otherwise).
    fn guarded_load(&mut self, depth: u32) -> Val {
        let x = self.rng.pick(&self.inputs).clone();
        // `+ t` keeps the index from folding to a constant, which validation
        // refuses out of bounds even where a guard makes the load unreachable.
        let j =
            (self.int(U32, depth, false).e + var("t")) % lit_u32(x.len.saturating_mul(2).max(1));
        let len = lit_u32(x.len);
        let v = self.value(x.ty, depth, false, false);
        let e = if self.rng.chance(50) {
            j.clone().lt(len).and(Expr::Binary(
                BinaryOp::Gt,
                Box::new(load(&x.name, [j])),
                Box::new(v.e),
            ))
        } else {
            j.clone().ge(len).or(Expr::Binary(
                BinaryOp::Lt,
                Box::new(load(&x.name, [j])),
                Box::new(v.e),
            ))
        };
        Val::new(e, Bool, false, v.exact, 0.0)
    }

    fn input_load(&mut self, ty: ScalarType) -> Option<Val> {
        let found: Vec<Input> = self.inputs.iter().filter(|x| x.ty == ty).cloned().collect();
        if found.is_empty() {
            return None;
        }
        let x = self.rng.pick(&found).clone();
        let index = self.index(x.len);
        Some(Val::new(load(&x.name, [index]), ty, false, true, 4.0))
    }

    fn float_leaf(&mut self, inexact_ok: bool, uniform: bool) -> Val {
        for _ in 0..4 {
            let got = match self.rng.below(7) {
                0 => {
                    let v = (self.rng.below(33) as f32 - 16.0) / 4.0;
                    Some(Val::new(Expr::from(v), F32, true, true, v.abs()))
                }
                1 if !uniform => self.input_load(F32),
                2 | 3 => self.scope_val(F32, inexact_ok, uniform),
                4 => {
                    let ty = *self.rng.pick(&[I32, U32]);
                    let i = self.int(ty, 1, uniform);
                    let m = if ty == I32 {
                        Expr::from(64i32)
                    } else {
                        lit_u32(64)
                    };
                    Some(Val::new((i.e % m).cast(F32), F32, i.uniform, true, 64.0))
                }
                5 => {
                    let i = self.int(U32, 1, uniform);
                    let bits = (i.e & lit_u32(0x007F_FFFF)) | lit_u32(0x3F80_0000);
                    Some(Val::new(bits.bitcast(F32), F32, i.uniform, true, 2.0))
                }
                6 => {
                    // A 16-bit value widened: exact.
                    let ty = *self.rng.pick(&[F16, BF16]);
                    let h = self.half(ty, 1, inexact_ok, uniform);
                    Some(Val::new(h.e.cast(F32), F32, h.uniform, h.exact, h.bound))
                }
                _ => None,
            };
            if let Some(v) = got {
                return v;
            }
        }
        let v = (self.rng.below(17) as f32 - 8.0) / 2.0;
        Val::new(Expr::from(v), F32, true, true, v.abs())
    }

    /// `inner` one level deeper, or a flat leaf of `ty` past [`MAX_NEST`].
    fn nested(&mut self, ty: ScalarType, inner: impl FnOnce(&mut Self) -> Val) -> Val {
        self.nest += 1;
        let v = if self.nest > MAX_NEST {
            self.flat_leaf(ty)
        } else {
            inner(self)
        };
        self.nest -= 1;
        v
    }

    fn float(&mut self, depth: u32, inexact_ok: bool, uniform: bool) -> Val {
        self.nested(F32, |g| g.float_inner(depth, inexact_ok, uniform))
    }

    fn float_inner(&mut self, depth: u32, inexact_ok: bool, uniform: bool) -> Val {
        if depth == 0 || self.rng.chance(25) {
            return self.float_leaf(inexact_ok, uniform);
        }
        let d = depth - 1;
        let v = match self.rng.below(22) {
            0..=2 => {
                let (a, b) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                let op = *self.rng.pick(&[BinaryOp::Add, BinaryOp::Sub]);
                combine(
                    Expr::Binary(op, Box::new(a.e.clone()), Box::new(b.e.clone())),
                    &a,
                    &b,
                    a.bound + b.bound,
                )
            }
            3 | 4 => {
                let (a, b) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                combine(a.e.clone() * b.e.clone(), &a, &b, a.bound * b.bound)
            }
            5 if inexact_ok || self.ieee => {
                let (a, b) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                let v = combine(a.e.clone() / guard(b.e.clone()), &a, &b, a.bound);
                self.rounded(v)
            }
            6 if inexact_ok || self.ieee => {
                let (a, b) = (self.float(d, false, uniform), self.float(d, false, uniform));
                let v = combine(a.e.clone() % guard(b.e.clone()), &a, &b, a.bound);
                self.rounded(v)
            }
            7 => {
                let a = self.float(d, inexact_ok, uniform);
                Val { e: -a.e, ..a }
            }
            8 => {
                let c = self.boolean(d, uniform);
                let (a, b) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                let mut v = combine(
                    select(c.e, a.e.clone(), b.e.clone()),
                    &a,
                    &b,
                    a.bound.max(b.bound),
                );
                v.uniform &= c.uniform;
                v
            }
            9 if inexact_ok => {
                let a = self.float(d, true, uniform);
                let e = math(MathFn::Exp, [clamp(a.e, 4.0)]);
                Val::new(e, F32, a.uniform, false, 55.0)
            }
            10 if inexact_ok => {
                let a = self.float(d, true, uniform);
                let b = (a.bound + 1.0).ln() + 1.0;
                Val::new(math(MathFn::Log, [guard(a.e)]), F32, a.uniform, false, b)
            }
            11 if inexact_ok || self.ieee => {
                let a = self.float(d, inexact_ok, uniform);
                let b = a.bound.sqrt() + 1.0;
                self.rounded(Val::new(
                    math(MathFn::Sqrt, [math(MathFn::Abs, [a.e])]),
                    F32,
                    a.uniform,
                    a.exact,
                    b,
                ))
            }
            12 if inexact_ok => {
                let a = self.float(d, true, uniform);
                Val::new(
                    math(MathFn::Rsqrt, [guard(a.e)]),
                    F32,
                    a.uniform,
                    false,
                    1.0,
                )
            }
            13 if inexact_ok => {
                let f = *self.rng.pick(&[MathFn::Sin, MathFn::Cos, MathFn::Tanh]);
                let a = self.float(d, true, uniform);
                Val::new(math(f, [a.e]), F32, a.uniform, false, 1.0)
            }
            14 => {
                let f = *self.rng.pick(&[MathFn::Abs, MathFn::Floor, MathFn::Ceil]);
                let exact_only = f != MathFn::Abs;
                let a = self.float(d, inexact_ok && !exact_only, uniform);
                Val::new(math(f, [a.e]), F32, a.uniform, a.exact, a.bound + 1.0)
            }
            15 | 16 => {
                let f = *self.rng.pick(&[MathFn::Min, MathFn::Max]);
                let (a, b) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                combine(
                    math(f, [a.e.clone(), b.e.clone()]),
                    &a,
                    &b,
                    a.bound.max(b.bound),
                )
            }
            // fma rounds once on every backend (the WGSL backend on the
            // bits): exact, as `+ - *` are, also where `ieee` is off.
            17 => {
                let (a, b, c) = (
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                    self.float(d, inexact_ok, uniform),
                );
                let mut v = combine(
                    math(MathFn::Fma, [a.e.clone(), b.e.clone(), c.e.clone()]),
                    &a,
                    &b,
                    a.bound * b.bound + c.bound,
                );
                v.uniform &= c.uniform;
                v.exact &= c.exact;
                v
            }
            18 if inexact_ok => {
                let (a, b) = (self.float(d, true, uniform), self.float(d, true, uniform));
                let e = math(MathFn::Pow, [guard(a.e), clamp(b.e, 2.0)]);
                let bound = (a.bound + 1.0).powi(2);
                Val::new(e, F32, a.uniform && b.uniform, false, bound)
            }
            _ => self.float_leaf(inexact_ok, uniform),
        };
        if v.bound > FLOAT_CLAMP {
            Val {
                e: clamp(v.e, FLOAT_CLAMP),
                bound: FLOAT_CLAMP,
                ..v
            }
        } else {
            v
        }
    }

    /// An `f16` or `bf16` value: the type's own arithmetic (computed in f32 and
    /// rounded once, so as exact as f32's on every backend), casts between the
    /// two types, rounded f32 values and 16-bit literals.
    fn half(&mut self, ty: ScalarType, depth: u32, inexact_ok: bool, uniform: bool) -> Val {
        self.nested(ty, |g| g.half_inner(ty, depth, inexact_ok, uniform))
    }

    fn half_literal(&mut self, ty: ScalarType) -> Val {
        let v = (self.rng.below(33) as f32 - 16.0) / 4.0;
        let bits = numerics::from_f32(ty, v).unwrap_or(0);
        Val::new(
            Expr::Lit(Literal::from_bits(ty, u32::from(bits))),
            ty,
            true,
            true,
            v.abs(),
        )
    }

    fn half_leaf(&mut self, ty: ScalarType, inexact_ok: bool, uniform: bool) -> Val {
        let other = if ty == F16 { BF16 } else { F16 };
        for _ in 0..4 {
            let got = match self.rng.below(6) {
                0 => Some(self.half_literal(ty)),
                1 if !uniform => self.input_load(ty),
                2 | 3 => self.scope_val(ty, inexact_ok, uniform),
                4 => {
                    // An f32 value rounded to the type: as exact as the f32 value.
                    let f = self.float(1, inexact_ok, uniform);
                    let bound = f.bound.min(FLOAT_CLAMP);
                    let e = clamp(f.e, FLOAT_CLAMP).cast(ty);
                    Some(Val::new(e, ty, f.uniform, f.exact, bound))
                }
                5 => {
                    let h = self.half(other, 0, inexact_ok, uniform);
                    Some(Val {
                        e: h.e.cast(ty),
                        ty,
                        ..h
                    })
                }
                _ => None,
            };
            if let Some(v) = got {
                return v;
            }
        }
        self.half_literal(ty)
    }

    fn half_inner(&mut self, ty: ScalarType, depth: u32, inexact_ok: bool, uniform: bool) -> Val {
        if depth == 0 || self.rng.chance(30) {
            return self.half_leaf(ty, inexact_ok, uniform);
        }
        let d = depth - 1;
        let two = |g: &mut Self| {
            (
                g.half(ty, d, inexact_ok, uniform),
                g.half(ty, d, inexact_ok, uniform),
            )
        };
        let both = |e: Expr, a: &Val, b: &Val, bound: f32| {
            Val::new(e, ty, a.uniform && b.uniform, a.exact && b.exact, bound)
        };
        let one = |e: Expr, a: &Val, bound: f32| Val::new(e, ty, a.uniform, a.exact, bound);
        let v = match self.rng.below(11) {
            0..=2 => {
                let (a, b) = two(self);
                let op = *self.rng.pick(&[BinaryOp::Add, BinaryOp::Sub]);
                both(
                    Expr::Binary(op, Box::new(a.e.clone()), Box::new(b.e.clone())),
                    &a,
                    &b,
                    a.bound + b.bound,
                )
            }
            3 => {
                let (a, b) = two(self);
                both(a.e.clone() * b.e.clone(), &a, &b, a.bound * b.bound)
            }
            4 if inexact_ok || self.ieee => {
                let (a, b) = two(self);
                let divisor = math(MathFn::Abs, [b.e.clone()]) + half_one(ty);
                let v = both(a.e.clone() / divisor, &a, &b, a.bound);
                self.rounded(v)
            }
            5 => {
                let f = *self.rng.pick(&[MathFn::Abs, MathFn::Floor, MathFn::Ceil]);
                let a = self.half(ty, d, inexact_ok, uniform);
                one(math(f, [a.e.clone()]), &a, a.bound + 1.0)
            }
            6 => {
                let a = self.half(ty, d, inexact_ok, uniform);
                Val { e: -a.e, ..a }
            }
            7 => {
                let f = *self.rng.pick(&[MathFn::Min, MathFn::Max]);
                let (a, b) = two(self);
                both(
                    math(f, [a.e.clone(), b.e.clone()]),
                    &a,
                    &b,
                    a.bound.max(b.bound),
                )
            }
            8 => {
                let c = self.boolean(d, uniform);
                let (a, b) = two(self);
                let mut v = both(
                    select(c.e, a.e.clone(), b.e.clone()),
                    &a,
                    &b,
                    a.bound.max(b.bound),
                );
                v.uniform &= c.uniform;
                v
            }
            9 if inexact_ok || self.ieee => {
                let (a, b) = two(self);
                let c = self.half(ty, d, inexact_ok, uniform);
                let mut v = both(
                    math(MathFn::Fma, [a.e.clone(), b.e.clone(), c.e.clone()]),
                    &a,
                    &b,
                    a.bound * b.bound + c.bound,
                );
                v.uniform &= c.uniform;
                v.exact &= c.exact;
                self.rounded(v)
            }
            10 if inexact_ok || self.ieee => {
                let a = self.half(ty, d, inexact_ok, uniform);
                let v = one(
                    math(MathFn::Sqrt, [math(MathFn::Abs, [a.e.clone()])]),
                    &a,
                    a.bound.sqrt() + 1.0,
                );
                self.rounded(v)
            }
            _ => self.half_leaf(ty, inexact_ok, uniform),
        };
        if v.bound > FLOAT_CLAMP {
            let b = Expr::Lit(Literal::from_bits(
                ty,
                u32::from(numerics::from_f32(ty, FLOAT_CLAMP).unwrap_or(0)),
            ));
            Val {
                e: math(MathFn::Min, [math(MathFn::Max, [v.e, -b.clone()]), b]),
                bound: FLOAT_CLAMP,
                ..v
            }
        } else {
            v
        }
    }

    /// The result of `/`, `%` or `sqrt`: exact only on IEEE backends.
    fn rounded(&self, v: Val) -> Val {
        Val {
            exact: v.exact && self.ieee,
            ..v
        }
    }

    /// A literal or a value in scope: no recursion.
    fn flat_leaf(&mut self, ty: ScalarType) -> Val {
        if self.rng.chance(50) {
            if let Some(v) = self.scope_val(ty, false, true) {
                return v;
            }
        }
        match ty {
            F32 => {
                let v = (self.rng.below(33) as f32 - 16.0) / 4.0;
                Val::new(Expr::from(v), F32, true, true, v.abs())
            }
            F16 | BF16 => self.half_literal(ty),
            I32 => Val::new(Expr::from(self.int_literal(I32)), I32, true, true, 0.0),
            U32 => Val::new(lit_u32(self.int_literal(U32) as u32), U32, true, true, 0.0),
            Bool => Val::new(Expr::from(self.rng.chance(50)), Bool, true, true, 0.0),
        }
    }

    fn int_literal(&mut self, ty: ScalarType) -> i32 {
        if self.rng.chance(50) {
            let edges: &[i32] = if ty == I32 {
                &[0, 1, -1, 2, 7, -7, 31, 32, 33, i32::MIN, i32::MAX, 100_000]
            } else {
                &[0, 1, 2, 7, 31, 32, 33, -1, i32::MIN, i32::MAX, 65_535]
            };
            *self.rng.pick(edges)
        } else if self.rng.chance(50) {
            self.rng.range(0, 20) as i32 - 10
        } else {
            self.rng.next_u32() as i32
        }
    }

    fn int_leaf(&mut self, ty: ScalarType, uniform: bool) -> Val {
        let p = self.programs[self.cur].clone();
        let other = if ty == I32 { U32 } else { I32 };
        for _ in 0..4 {
            let got = match self.rng.below(9) {
                0 => {
                    let v = self.int_literal(ty);
                    let e = if ty == I32 {
                        Expr::from(v)
                    } else {
                        lit_u32(v as u32)
                    };
                    Some(Val::new(e, ty, true, true, 0.0))
                }
                1 if !uniform => self.input_load(ty),
                2 | 3 => self.scope_val(ty, false, uniform),
                4 => {
                    let a = self
                        .rng
                        .pick(&p.mesh.axes().cloned().collect::<Vec<_>>())
                        .clone();
                    let is_thread = a.name == p.mesh.threads.name;
                    if uniform && is_thread {
                        None
                    } else {
                        let e = if self.rng.chance(70) {
                            axis_index(&a.name)
                        } else {
                            axis_size(&a.name)
                        };
                        let uni = !matches!(&e, Expr::AxisIndex(_)) || !is_thread;
                        Some(Val::new(cast_to(e, U32, ty), ty, uni, true, 0.0))
                    }
                }
                5 => {
                    let f = self.float(1, false, uniform);
                    Some(Val::new(f.e.cast(ty), ty, f.uniform, true, 0.0))
                }
                6 => {
                    // The sign of zero is unspecified (and `x + 0.0` is folded to
                    // `x` on lavapipe, keeping -0.0): bitcast the magnitude.
                    let f = self.float(1, false, uniform);
                    Some(Val::new(
                        math(MathFn::Abs, [f.e]).bitcast(ty),
                        ty,
                        f.uniform,
                        true,
                        0.0,
                    ))
                }
                7 => {
                    let b = self.boolean(1, uniform);
                    Some(Val::new(b.e.cast(ty), ty, b.uniform, true, 0.0))
                }
                8 => {
                    let o = self.int(other, 1, uniform);
                    let e = if self.rng.chance(50) {
                        o.e.cast(ty)
                    } else {
                        o.e.bitcast(ty)
                    };
                    Some(Val::new(e, ty, o.uniform, true, 0.0))
                }
                _ => None,
            };
            if let Some(v) = got {
                return v;
            }
        }
        let e = if ty == I32 {
            Expr::from(3i32)
        } else {
            lit_u32(3)
        };
        Val::new(e, ty, true, true, 0.0)
    }

    fn int(&mut self, ty: ScalarType, depth: u32, uniform: bool) -> Val {
        self.nested(ty, |g| g.int_inner(ty, depth, uniform))
    }

    fn int_inner(&mut self, ty: ScalarType, depth: u32, uniform: bool) -> Val {
        if depth == 0 || self.rng.chance(25) {
            return self.int_leaf(ty, uniform);
        }
        let d = depth - 1;
        match self.rng.below(8) {
            0..=3 => {
                let op = *self.rng.pick(&BinaryOp::COMPOUND);
                let (a, b) = (self.int(ty, d, uniform), self.int(ty, d, uniform));
                Val::new(
                    Expr::Binary(op, Box::new(a.e), Box::new(b.e)),
                    ty,
                    a.uniform && b.uniform,
                    true,
                    0.0,
                )
            }
            4 => {
                let op = *self.rng.pick(&[UnaryOp::Neg, UnaryOp::BitNot]);
                let a = self.int(ty, d, uniform);
                Val::new(Expr::Unary(op, Box::new(a.e)), ty, a.uniform, true, 0.0)
            }
            5 => {
                let f = *self.rng.pick(&[MathFn::Abs, MathFn::Min, MathFn::Max]);
                let args: Vec<Val> = (0..f.arity()).map(|_| self.int(ty, d, uniform)).collect();
                let uni = args.iter().all(|a| a.uniform);
                Val::new(math(f, args.into_iter().map(|a| a.e)), ty, uni, true, 0.0)
            }
            6 => {
                let c = self.boolean(d, uniform);
                let (a, b) = (self.int(ty, d, uniform), self.int(ty, d, uniform));
                let uni = c.uniform && a.uniform && b.uniform;
                Val::new(select(c.e, a.e, b.e), ty, uni, true, 0.0)
            }
            _ => self.int_leaf(ty, uniform),
        }
    }

    fn boolean(&mut self, depth: u32, uniform: bool) -> Val {
        self.nested(Bool, |g| g.boolean_inner(depth, uniform))
    }

    fn boolean_inner(&mut self, depth: u32, uniform: bool) -> Val {
        if depth == 0 || self.rng.chance(15) {
            if let Some(v) = self.scope_val(Bool, false, uniform) {
                return v;
            }
            if self.rng.chance(20) {
                return Val::new(Expr::from(self.rng.chance(50)), Bool, true, true, 0.0);
            }
        }
        let d = depth.saturating_sub(1);
        match self.rng.below(6) {
            0..=2 => {
                let ty = *self.rng.pick(&[F32, I32, U32, F16, BF16]);
                let (a, b) = (
                    self.value(ty, d, false, uniform),
                    self.value(ty, d, false, uniform),
                );
                let op = *self.rng.pick(&BinaryOp::COMPARISONS);
                Val::new(
                    Expr::Binary(op, Box::new(a.e), Box::new(b.e)),
                    Bool,
                    a.uniform && b.uniform,
                    true,
                    0.0,
                )
            }
            3 if depth > 0 => {
                let op = *self.rng.pick(&[BinaryOp::LogicAnd, BinaryOp::LogicOr]);
                let (a, b) = (self.boolean(d, uniform), self.boolean(d, uniform));
                Val::new(
                    Expr::Binary(op, Box::new(a.e), Box::new(b.e)),
                    Bool,
                    a.uniform && b.uniform,
                    true,
                    0.0,
                )
            }
            4 if depth > 0 => {
                let a = self.boolean(d, uniform);
                Val::new(!a.e, Bool, a.uniform, true, 0.0)
            }
            5 if !uniform && !self.inputs.is_empty() => self.guarded_load(d),
            _ => {
                let ty = *self.rng.pick(&[I32, U32]);
                let a = self.int(ty, d, uniform);
                Val::new(a.e.cast(Bool), Bool, a.uniform, true, 0.0)
            }
        }
    }
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
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_module() {
        assert_eq!(generate(42), generate(42));
        assert_ne!(generate(42), generate(43));
    }

    fn has_warps(file: &CaseFile) -> bool {
        file.module.kernels.iter().any(|k| {
            let mut found = false;
            mpmd_core::ir::visit::for_each_stmt(&k.body, &mut |s| {
                found |= matches!(s, Stmt::Warp { .. })
            });
            found
        })
    }

    /// Warp collectives come from a stream of their own: a module without
    /// them is the module the generator made before it had them (`warps: 0`
    /// draws nothing from that stream), and `warps: 100` puts them in every
    /// module, in its first program at least.
    #[test]
    fn modules_without_warps_are_unchanged_by_the_warp_option() {
        let with = |warps| GenOptions {
            warps,
            ..GenOptions::default()
        };
        let mut unchanged = 0;
        for seed in 0..60 {
            let never = generate_with(seed, &with(0));
            assert!(!has_warps(&never), "seed {seed}");
            let default = generate(seed);
            if !has_warps(&default) {
                assert_eq!(default, never, "seed {seed}");
                unchanged += 1;
            }
            let always = generate_with(seed, &with(100));
            assert!(has_warps(&always), "seed {seed}");
            assert_eq!(always, generate_with(seed, &with(100)), "seed {seed}");
        }
        assert!((30..60).contains(&unchanged), "{unchanged} of 60");
    }

    fn has_mma(file: &CaseFile) -> bool {
        file.module.kernels.iter().any(|k| {
            let mut found = false;
            mpmd_core::ir::visit::for_each_stmt(&k.body, &mut |s| {
                found |= matches!(s, Stmt::Mma { .. })
            });
            found
        })
    }

    /// `file` without what the mma groups add: their statements (`mm<g>_`
    /// names, the tile's barrier, a branch around a group) and operands;
    /// and without kernel parameters, which follow the operands the
    /// kernels name (an input only the mma statements read stays a
    /// parameter).
    fn without_mma(file: &CaseFile) -> CaseFile {
        let mut file = file.clone();
        let mma_operand = |name: &str| {
            [MMA_OUTPUT_PREFIX, MMA_TILE_PREFIX, MMA_INPUT_PREFIX]
                .iter()
                .any(|p| name.starts_with(p))
        };
        let mma_stmt = |s: &Stmt| match s {
            Stmt::Mma { .. } | Stmt::MmaLoad { .. } => true,
            Stmt::LocalArray { name, .. } => name.starts_with("mm"),
            Stmt::For { var, .. } => var.name.starts_with("mm"),
            Stmt::If { then_body, .. } => {
                matches!(then_body.first(), Some(Stmt::LocalArray { name, .. }) if name.starts_with("mm"))
            }
            _ => false,
        };
        for k in &mut file.module.kernels {
            let mut body = vec![];
            let mut after_tile = false;
            for s in k.body.drain(..) {
                let tile_fill = matches!(&s, Stmt::For { var, .. } if var.name.ends_with("_f"));
                let drop = mma_stmt(&s) || (after_tile && s == Stmt::Barrier);
                after_tile = tile_fill && mma_stmt(&s);
                if !drop {
                    body.push(s);
                }
            }
            k.body = body;
            k.params.clear();
        }
        for map in &mut file.module.maps {
            map.inputs.retain(|o| !mma_operand(&o.name));
            map.outputs.retain(|o| !mma_operand(&o.name));
            map.scratch.retain(|o| !mma_operand(&o.name));
        }
        file.spec.generators.retain(|(n, _)| !mma_operand(n));
        file.spec.compares.retain(|(n, _)| !mma_operand(n));
        file
    }

    /// The mma statements come from a stream of their own and leave nothing
    /// behind for the rest of the kernel: a module without them is the
    /// module the generator made before it had them, and a module with
    /// them is that module plus the mma groups (names as generated).
    #[test]
    fn modules_without_mma_are_unchanged_by_the_mma_option() {
        let with = |mma| GenOptions {
            warps: 100,
            mma,
            adversarial_names: false,
            ..GenOptions::default()
        };
        let mut unchanged = 0;
        for seed in 0..40 {
            let never = generate_with(seed, &with(0));
            assert!(!has_mma(&never), "seed {seed}");
            let half = generate_with(seed, &with(50));
            if !has_mma(&half) {
                assert_eq!(half, never, "seed {seed}");
                unchanged += 1;
            }
            let always = generate_with(seed, &with(100));
            assert!(has_mma(&always), "seed {seed}");
            let stripped = without_mma(&always);
            let never = without_mma(&never);
            if stripped != never {
                let (a, b) = (stripped.print(), never.print());
                let first = a.lines().zip(b.lines()).position(|(x, y)| x != y);
                panic!(
                    "seed {seed}: line {first:?}: {:?} vs {:?}",
                    first.and_then(|i| a.lines().nth(i)),
                    first.and_then(|i| b.lines().nth(i))
                );
            }
        }
        assert!((10..30).contains(&unchanged), "{unchanged} of 40");
    }

    fn printed(seed: u64) -> String {
        generate(seed).print()
    }

    /// The generator reaches what the oracle and the emitters got wrong:
    /// locals read after a barrier, short-circuit guards on loads, long
    /// chains, resident inputs with generated data, adversarial names. Each
    /// kind shows up in a fair share of 200 programs, and the oracle takes
    /// every one of those programs.
    #[test]
    fn the_generator_reaches_every_trust_pattern() {
        let modules: Vec<(u64, Module, String)> = (0..200)
            .map(|seed| (seed, generate(seed).module, printed(seed)))
            .collect();
        let count =
            |f: &dyn Fn(&Module, &str) -> bool| modules.iter().filter(|(_, m, t)| f(m, t)).count();
        let resident = count(&|m, _| {
            !m.residents.is_empty() && m.residents.iter().any(|r| !r.zeroed && r.name != "hand")
        });
        // A load right of `&&` / `||`: `... && x0[...]`.
        let load_after = |t: &str, op: &str| {
            t.split(op).skip(1).any(|rest| {
                let name_len = rest
                    .bytes()
                    .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                    .count();
                name_len > 0 && rest[name_len..].starts_with('[')
            })
        };
        let guarded = count(&|_, t| load_after(t, " && ") || load_after(t, " || "));
        let deep = count(&|_, t| t.lines().any(|l| l.len() > 400));
        let renamed = count(&|_, t| {
            [
                "threadIdx",
                "namespace",
                "workgroupBarrier",
                "k_end",
                "idx",
                "__syncthreads",
                "loop",
            ]
            .iter()
            .any(|w| t.contains(w))
        });
        let local_barrier = count(&|_, t| {
            t.split("local ").skip(1).any(|rest| {
                let next_local = rest.find("local ").unwrap_or(rest.len());
                rest[..next_local].contains("barrier;")
            })
        });
        let f16_input = count(&|_, t| t.contains("inputs [") && t.contains("gmem<f16["));
        let bf16_output = count(&|m, _| {
            m.maps.iter().any(|map| {
                map.outputs.iter().any(|o| {
                    o.ty.as_ref_type()
                        .is_some_and(|r| r.elem == ScalarType::BF16)
                })
            })
        });
        let smem16 = count(&|_, t| t.contains("smem<f16[") || t.contains("smem<bf16["));
        let arith16 =
            count(&|_, t| t.contains("f16 + ") || t.contains("bf16 * ") || t.contains("f16) - "));
        let while_loops = count(&|_, t| t.contains("while "));
        let breaks = count(&|_, t| t.contains("break;"));
        let continues = count(&|_, t| t.contains("continue;"));
        let compound =
            count(&|_, t| t.contains(" += ") || t.contains(" ^= ") || t.contains(" *= "));
        let helpers = count(&|_, t| t.contains(" = mix("));
        let constants = count(&|_, t| t.contains("0u..TRIPS"));
        let subsets = count(&|m, _| {
            m.maps[0].programs.iter().any(|p| {
                m.kernel(&p.kernel)
                    .is_some_and(|k| k.params.len() < m.maps[0].params().len())
            })
        });
        for (what, n, at_least) in [
            ("while loops", while_loops, 20),
            ("breaks", breaks, 10),
            ("continues", continues, 5),
            ("compound assignments", compound, 20),
            ("helper calls", helpers, 10),
            ("constants", constants, 10),
            ("kernels naming a subset of the operands", subsets, 20),
            ("f16 inputs", f16_input, 20),
            ("bf16 outputs", bf16_output, 20),
            ("16-bit smem", smem16, 10),
            ("16-bit arithmetic", arith16, 20),
            ("resident inputs", resident, 20),
            ("guarded loads", guarded, 20),
            ("deep chains", deep, 5),
            ("adversarial names", renamed, 10),
            ("locals across barriers", local_barrier, 10),
        ] {
            assert!(n >= at_least, "{what}: {n} of 200 programs");
        }
        for (seed, _, _) in modules
            .iter()
            .filter(|(_, m, _)| !m.residents.is_empty())
            .take(15)
        {
            crate::fuzz::check_module(&generate(*seed), *seed)
                .unwrap_or_else(|e| panic!("seed {seed}: {e:?}"));
        }
    }

    fn has_provable(file: &CaseFile) -> bool {
        file.module.maps[0]
            .outputs
            .iter()
            .any(|o| o.name == PROVABLE_OUTPUT)
    }

    /// The provable-operand statements come from a stream of their own: a
    /// module without them is the module the generator made before it had
    /// them, and `provable_operands: 100` puts them in every module.
    #[test]
    fn modules_without_provable_operands_are_unchanged_by_the_option() {
        // Names as generated, so that `zs0` is found by its name.
        let with = |provable_operands| GenOptions {
            provable_operands,
            adversarial_names: false,
            ..GenOptions::default()
        };
        let mut unchanged = 0;
        for seed in 0..60 {
            let never = generate_with(seed, &with(0));
            assert!(!has_provable(&never), "seed {seed}");
            let default = generate_with(seed, &with(PROVABLE_PERCENT));
            if !has_provable(&default) {
                assert_eq!(default, never, "seed {seed}");
                unchanged += 1;
            }
            let always = generate_with(seed, &with(100));
            assert!(has_provable(&always), "seed {seed}");
            assert_eq!(always, generate_with(seed, &with(100)), "seed {seed}");
        }
        assert!((30..60).contains(&unchanged), "{unchanged} of 60");
    }

    /// Modules with the provable-operand statements check on the oracle,
    /// and their `zs0` holds what the statements are for: NaN and
    /// infinities from edge values and zeros a compiler can prove, in every
    /// slot over the seeds; every shape of the generator appears.
    #[test]
    fn provable_operand_modules_check_and_produce_nan_and_infinities() {
        let options = GenOptions {
            provable_operands: 100,
            adversarial_names: false,
            ..GenOptions::default()
        };
        let mut specials_per_slot = [0u32; PROVABLE_SLOTS as usize];
        let mut shapes = std::collections::BTreeSet::new();
        for seed in 0..24 {
            let file = generate_with(seed, &options);
            let oracle = crate::fuzz::check_module(&file, seed)
                .unwrap_or_else(|e| panic!("seed {seed}: {e:?}"));
            let zs = oracle.outputs[0].outputs[PROVABLE_OUTPUT].to_f32();
            let n = zs.len() / PROVABLE_SLOTS as usize;
            for (slot, count) in specials_per_slot.iter_mut().enumerate() {
                *count += zs[slot * n..(slot + 1) * n]
                    .iter()
                    .filter(|v| !v.is_finite())
                    .count() as u32;
            }
            let text = mpmd_core::text::print(&file.module);
            for shape in [
                "zd & 0)", "zd - zd)", "zd * 0)", "zx - zx", "zx + -zx", "f32(zj)", "fma(", "f16(",
                "bf16(",
            ] {
                if text.contains(shape) {
                    shapes.insert(shape);
                }
            }
        }
        assert!(
            specials_per_slot.iter().all(|&c| c > 0),
            "NaN or infinities per slot: {specials_per_slot:?}"
        );
        assert_eq!(shapes.len(), 9, "{shapes:?}");
    }
}
