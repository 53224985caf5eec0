//! The reference interpreter: the oracle every backend is judged against.
//!
//! Design (see also ARCHITECTURE.md):
//! - each call compiles every program's kernel once (`compile.rs`) to a flat,
//!   register-based bytecode; a register holds one 32-bit word per thread of a
//!   block and every instruction runs over all lanes in a tight loop under the
//!   block's active mask (lockstep; `if`/`else` and per-lane loop bounds are
//!   masks, block-uniform control flow makes this a valid execution);
//! - a block is a cooperative task with its own registers, program counter and
//!   mask stack, so it can suspend at a semaphore wait (or, in alternative
//!   schedules, be preempted after a `gmem` access or a semaphore operation)
//!   and resume later;
//! - the scheduler runs tasks of all programs; when every live block waits it
//!   returns [`RunError::Deadlock`] with the wait-for graph;
//! - maps without atomics or semaphores have no cross-block order to respect,
//!   so with detection off their blocks run on all host cores; so do, in a
//!   map that synchronises, the blocks of its leading programs that never
//!   wait (the lockstep schedule runs each of them to completion in turn
//!   before any block could wait), then the rest, in lockstep order or, when
//!   they only take from semaphore counts and every wait is met at once,
//!   on all host cores too (`blocks::run_lockstep`);
//! - `f16` and `bf16` live in memory packed, 2 bytes an element, in every
//!   buffer (a store replaces its half of the word atomically, so neighbours
//!   never lose a write) and in registers as the low half of a word; their
//!   operations follow `crate::numerics`;
//! - detection (`detect.rs`) checks out-of-bounds accesses (always), reads of
//!   unwritten memory and data races (vector clocks per block and epoch), all
//!   per element;
//! - the first schedule is deterministic: blocks start in program order, then
//!   linear block order, each running until it finishes or waits (woken
//!   waiters run first); `RunOptions::seed` drives the extra schedules;
//! - outputs of refs owned by a mesh `M` have the host shape `M`'s block axes
//!   followed by the ref's shape (instances in linear block order);
//! - extra schedules rerun the call with random block order and preemption,
//!   warp-sized thread groups run one after another between barriers, and
//!   random lane order inside stores and atomics; any difference in outputs is
//!   [`RunError::Nondeterministic`].

mod blocks;
mod buffers;
mod code;
mod compile;
mod detect;
mod exec;
mod limits;
mod sums;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicU32;

use blocks::*;
use buffers::*;
use code::written_buffers;
use compile::{checked_len, words_of, ArrayInfo, ParamBinding, ProgramCode, MAX_WORDS};
use exec::{AltSchedule, BlockState, Env, GlobalBuf, Status};
use limits::Limits;
pub use limits::{Charge, Interrupt, MemoryBudget, OverBudget};
pub use sums::{f32_atomic_add_terms, summation_order_ulps};

use crate::backend::{Backend, Mode, RunError, RunOptions, Site};
use crate::host::{
    check_resident, host_shape, resident_starts_zeroed, BufferStart, CallArgs, CallOutputs,
    HostTensor,
};
use crate::inputs::Rng;
use crate::ir::{
    Kernel, Literal, MemorySpace, Mesh, MpmdMap, Name, OperandKind, RefType, Resident, ScalarType,
    Type,
};
use crate::plan::{LaunchPlan, ProgramId};
use crate::validate::ValidModule;

/// Interpreter options beyond [`RunOptions`].
#[derive(Clone, Debug)]
pub struct InterpOptions {
    /// Wall-clock bound on one call, all schedules together; past it the call
    /// stops with [`RunError::TimeLimit`] naming the block that was running.
    /// `None`: no bound. Default [`DEFAULT_TIME_LIMIT`].
    pub time_limit: Option<std::time::Duration>,
    /// A flag another thread may raise to stop the call at its next time
    /// check ([`RunError::Interrupted`]). `None`: no such flag.
    pub interrupt: Option<Interrupt>,
    /// Bound on the host memory the interpreter holds during a call
    /// (buffers, block states with their locals and smem, detection state,
    /// residents, buffers kept for reuse), in bytes; a call that would pass
    /// it is refused before it allocates, with the size and the limit.
    /// Default [`DEFAULT_MEMORY_LIMIT`]. An interpreter that shares a run's
    /// [`MemoryBudget`] ([`Interpreter::with_budget`]) charges that budget,
    /// whose limit applies instead.
    pub memory_limit: u64,
    pub run: RunOptions,
    /// Detect data races, reads of unwritten memory and out-of-bounds accesses.
    pub detect: bool,
    /// Extra seeded schedules to run; differing results are reported as
    /// nondeterminism (0: the lockstep schedule only).
    pub extra_schedules: u32,
    /// How far each named output may differ between schedules; an output
    /// not listed must agree exactly (sign of zero and NaN payloads aside).
    /// A case's `compare` lines give these
    /// ([`crate::case::CaseSpec::schedule_tolerances`]).
    pub schedule_tolerances: Vec<(Name, ScheduleTolerance)>,
    /// Compute as an adapter that flushes subnormals does (docs/design.md allows
    /// it): every f32 operand of a float operation (arithmetic, comparison,
    /// min/max, math function, conversion to an integer or bool) and every
    /// f32 result of one becomes a zero of the same sign when it is
    /// subnormal. Moves, selects, loads, stores, bitcasts and atomics keep
    /// their bits, except f32 `atomic_add`, `atomic_min` and `atomic_max`,
    /// which flush as the plain operations do. For `f16`/`bf16` it applies to the f32 intermediates
    /// (the widened operands and the f32 result before rounding), so f16 is
    /// unaffected and bf16 subnormals become zeros. The conformance oracle
    /// for flushing adapters.
    pub flush_subnormals: bool,
    /// What `mma_m16n8k16` computes: its result ([`MmaProbe::Off`], the
    /// default) or one of the probes conformance's `mma` compare mode runs
    /// to learn each output element's bound (docs/numerics.md).
    pub mma_probe: MmaProbe,
}

/// What `mma_m16n8k16` computes for every element of D; every other
/// operation is unchanged. The probes trace, through the same moves, adds
/// and conversions that build an output from mma results, what its bound
/// needs (docs/numerics.md, "Matrix multiply-accumulate").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MmaProbe {
    /// The result, `C + sum over k of A B` in the documented order.
    #[default]
    Off,
    /// The magnitude `|C| + sum over k of |A B|`, rounded up to f32 (never
    /// below the exact value).
    Magnitude,
    /// The step count `|C| + 1`, rounded up to f32: each mma adds one to
    /// the accumulator's magnitude, so an element holds the mma steps that
    /// reach it plus what its accumulators started from (read against
    /// [`MmaProbe::Start`]).
    StepCount,
    /// `|C|`: every mma passes its accumulator's magnitude through, so an
    /// element holds what [`MmaProbe::StepCount`] counted from.
    Start,
}

/// How far an output may differ between two schedules of one call before
/// the call is [`RunError::Nondeterministic`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScheduleTolerance {
    /// Element by element, floats within this many units in the last place
    /// (0: equal; the sign of zero and NaN payloads are ignored).
    Ulps(u32),
    /// Element by element, floats as far apart as summing the call's f32
    /// atomic adds in another order can move them
    /// ([`summation_order_ulps`]).
    SummationOrder,
    /// The same values in any order (sorted, then equal).
    Multiset,
    /// Any values: not compared.
    Any,
}

/// Default [`InterpOptions::time_limit`]: far beyond any test or corpus case
/// (they take milliseconds), short enough that a runaway loop ends.
pub const DEFAULT_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Extra schedules the oracle runs by default: conformance and
/// `mpmd run --checked`.
pub const DEFAULT_EXTRA_SCHEDULES: u32 = 2;

/// Default [`InterpOptions::memory_limit`]: 4 GiB.
pub const DEFAULT_MEMORY_LIMIT: u64 = 4 << 30;

impl Default for InterpOptions {
    fn default() -> Self {
        InterpOptions {
            time_limit: Some(DEFAULT_TIME_LIMIT),
            interrupt: None,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            run: RunOptions::default(),
            detect: false,
            extra_schedules: 0,
            schedule_tolerances: Vec::new(),
            flush_subnormals: false,
            mma_probe: MmaProbe::Off,
        }
    }
}

/// A semaphore wait that could not be met when first reached and was
/// satisfied later by a block scheduled after the waiter: on a GPU this needs
/// the waiter and the signaller to be resident at the same time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LateWait {
    /// The waiting block (`thread` is `None`: waits are block-collective).
    pub site: Site,
    pub semaphore: Name,
    /// Element of the semaphore buffer (instance offset included).
    pub element: u64,
    pub amount: i32,
}

/// What the last call did, beyond its outputs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InterpReport {
    /// Schedules run: 1 (lockstep) plus the extra ones.
    pub schedules_run: u32,
    /// Blocks run to completion in the first schedule.
    pub blocks_run: u64,
    /// Whether the first schedule ran blocks on several host threads.
    pub parallel: bool,
    /// Waits of the first schedule satisfied by a block scheduled after the waiter.
    pub late_waits: Vec<LateWait>,
}

/// A device-resident ref's contents, kept across calls.
#[derive(Debug)]
struct ResidentState {
    tensor: HostTensor,
    /// Which elements were ever written (for uninitialised-read detection).
    init: Vec<bool>,
    /// The memory of both, held on the interpreter's budget.
    _charge: Charge,
}

/// Host bytes of a resident's state: its packed words and a written flag
/// per element.
fn resident_bytes(elem: ScalarType, len: u64) -> u64 {
    words_of(elem, len).saturating_mul(4).saturating_add(len)
}

/// At most the shadows of this many elements are kept for later calls (2.25
/// bytes an element where runs of lanes reached whole chunks, 18.25 at
/// most: 146 MiB), enough for repeated checked calls over a few million elements
/// without faulting their pages in each time.
const SHADOW_POOL_ELEMENTS: usize = 8 << 20;

/// Runs maps on host data; owns the device-resident refs across calls.
pub struct Interpreter {
    residents: BTreeMap<String, ResidentState>,
    last_report: Option<InterpReport>,
    /// Device buffers of earlier calls, reused by later ones, each with its
    /// charge.
    pool: Vec<(Vec<AtomicU32>, Charge)>,
    /// Emptied access histories of earlier detectors: their pages stay
    /// mapped, so a later call does not fault them in again.
    shadow_pool: Vec<(detect::Shadow, Charge)>,
    /// What [`Backend::run`] runs with beyond its [`RunOptions`].
    backend_options: InterpOptions,
    /// The account of everything the interpreter holds: residents, pooled
    /// buffers, and during a call everything the call allocates.
    budget: MemoryBudget,
    /// Whether `budget` is a caller's (its limit stays) or the
    /// interpreter's own (each call sets `InterpOptions::memory_limit`).
    shared_budget: bool,
}

impl Default for Interpreter {
    fn default() -> Self {
        // The core count, read once per process (tens of microseconds of
        // cgroup files), is read here rather than in the first call.
        host_cores();
        Interpreter {
            residents: BTreeMap::new(),
            last_report: None,
            pool: Vec::new(),
            shadow_pool: Vec::new(),
            backend_options: InterpOptions::default(),
            budget: MemoryBudget::new(DEFAULT_MEMORY_LIMIT),
            shared_budget: false,
        }
    }
}

/// Runs of one schedule at most (`Interpreter::run_detected`): each rerun
/// learns contested waits that the previous one's orderings hid.
const MAX_CONTEST_PASSES: u32 = 4;

/// An extra schedule, enough to run it again exactly.
#[derive(Clone, Copy, Debug)]
struct AltSeed {
    rng_seed: u64,
    warps: bool,
}

impl AltSeed {
    fn start(self) -> AltSchedule {
        AltSchedule::new(Rng::new(self.rng_seed), true, self.warps, true)
    }
}

/// Where a buffer's contents come from at the start of a call.
#[derive(Clone, Debug)]
enum Init {
    Input(Name),
    Zeroed,
    Uninitialized,
    Resident { name: Name, zeroed: bool },
}

#[derive(Clone, Debug)]
struct BufferSpec {
    ty: RefType,
    /// Elements (all instances); the buffer holds `words_of(ty.elem, len)` words.
    len: u64,
    /// Host shape: the owner's block axes, then the ref's shape.
    shape: Vec<u32>,
    init: Init,
    /// No program of the call writes the buffer ([`code::changed_buffers`]).
    read_only: bool,
}

impl BufferSpec {
    /// Whether the call reads the buffer straight from the caller's input
    /// instead of a copy: an input that no program writes.
    fn borrows_input(&self) -> bool {
        self.read_only && matches!(self.init, Init::Input(_))
    }
}

/// A map's operands bound for one call.
struct Layout {
    /// The map's name, for messages.
    map: Name,
    buffers: Vec<BufferSpec>,
    /// Output name and buffer, in map order.
    outputs: Vec<(Name, usize)>,
}

impl Interpreter {
    pub fn new() -> Self {
        Self::default()
    }

    /// An interpreter whose [`Backend::run`] uses `options`: each call's
    /// [`RunOptions`] replace `options.run`, and checked mode turns
    /// detection on (`mpmd run` sets the schedules and limits this way).
    pub fn with_options(options: InterpOptions) -> Self {
        Interpreter {
            backend_options: options,
            ..Self::default()
        }
    }

    /// [`Interpreter::with_options`] charging `budget`, the run's one
    /// account of host memory, instead of a budget of its own: a caller
    /// that generates or reads inputs charges the same budget, so the
    /// budget's limit bounds inputs and everything the interpreter
    /// allocates together (`mpmd run --memory-limit`).
    /// `InterpOptions::memory_limit` is then not used.
    pub fn with_budget(options: InterpOptions, budget: MemoryBudget) -> Self {
        Interpreter {
            backend_options: options,
            budget,
            shared_budget: true,
            ..Self::default()
        }
    }

    /// The budget this interpreter charges.
    pub fn memory_budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Gives device-resident ref `name` the contents `tensor` (every element
    /// counts as written), before or between calls. A call that binds the
    /// resident with another element type or length fails with
    /// [`RunError::BadArguments`]. The data is counted on the memory
    /// budget (never refused: it exists already; the next call sees it).
    pub fn set_resident(&mut self, name: &str, tensor: HostTensor) {
        let init = vec![true; tensor.len()];
        let charge = self
            .budget
            .record(resident_bytes(tensor.elem(), tensor.len() as u64));
        // The old contents go first, so they are not counted twice.
        self.residents.remove(name);
        self.residents.insert(
            name.to_string(),
            ResidentState {
                tensor,
                init,
                _charge: charge,
            },
        );
    }

    /// The report of the last successful or failed call, if any.
    pub fn last_report(&self) -> Option<&InterpReport> {
        self.last_report.as_ref()
    }

    /// Runs one call of `map` from `module`, each program's kernel as
    /// validation expanded it.
    pub fn call(
        &mut self,
        module: &ValidModule,
        map: &str,
        args: &CallArgs,
        options: &InterpOptions,
    ) -> Result<CallOutputs, RunError> {
        let (map, valid_map) = module
            .map(map)
            .zip(module.valid_map(map))
            .ok_or_else(|| RunError::BadArguments(format!("no map named `{map}` in the module")))?;
        let kernels: Vec<&Kernel> = valid_map.programs().iter().map(|p| p.kernel()).collect();
        // The compiler recurses over bodies (ir::limits::INLINE_NESTING).
        let deep = kernels
            .iter()
            .any(|k| crate::text::body_nesting(&k.body) > crate::ir::limits::INLINE_NESTING);
        let mut run = || {
            self.run_map(
                map,
                &module.meshes,
                &kernels,
                &module.residents,
                args,
                options,
            )
        };
        if deep {
            crate::ir::limits::with_nesting_stack(run)
        } else {
            run()
        }
    }

    fn run_map(
        &mut self,
        map: &MpmdMap,
        meshes: &[Mesh],
        kernels: &[&Kernel],
        residents: &[Resident],
        args: &CallArgs,
        options: &InterpOptions,
    ) -> Result<CallOutputs, RunError> {
        self.last_report = None;
        let (layout, mut codes) = prepare(map, meshes, kernels, residents, args)?;
        for code in &mut codes {
            code.flush_subnormals = options.flush_subnormals;
            code.mma_probe = options.mma_probe;
            code.loop_limit_is_error = options.run.mode == Mode::Checked;
        }
        let detect = options.detect;
        if !self.shared_budget {
            self.budget.set_limit(options.memory_limit);
        }
        let limits = Limits::new(
            options.time_limit,
            options.interrupt.clone(),
            self.budget.clone(),
        );
        let extra = options.extra_schedules > 0;
        if let Err(error) = charge_buffers(&limits, &layout, detect, extra) {
            if self.pool.is_empty() && self.shadow_pool.is_empty() {
                return Err(error);
            }
            // Buffers kept for reuse give way to what the call needs.
            self.pool.clear();
            self.shadow_pool.clear();
            charge_buffers(&limits, &layout, detect, extra)?;
        }

        let parallel = !detect
            && codes.iter().all(|c| !c.synchronises)
            && host_cores() > 1
            && codes.iter().map(|c| c.block_count).sum::<u64>() > 1;
        let mut report = InterpReport {
            schedules_run: 1,
            parallel,
            ..Default::default()
        };
        let first = if detect {
            self.run_detected(
                &layout,
                args,
                &codes,
                &limits,
                None,
                Some(&mut report.late_waits),
            )
            .map(|(bufs, detector, blocks)| (bufs, Some(detector), blocks))
        } else {
            self.run_fast(&layout, args, &codes, &limits, parallel, &mut report)
                .map(|(bufs, blocks)| (bufs, None, blocks))
        };
        let (bufs, detector, blocks) = match first {
            Ok(first) => first,
            Err(e) => {
                self.last_report = Some(report);
                return Err(e);
            }
        };
        report.blocks_run = blocks;
        let outputs = (options.extra_schedules > 0).then(|| collect_outputs(&layout, &bufs));
        // f32 atomic adds sum in the schedule's order (sums.rs): outputs
        // with the `SummationOrder` tolerance may differ by that much.
        let sum_order_ulps = sums::f32_atomic_add_terms(map, meshes, kernels, &|name| {
            args.scalars.get(name).copied()
        })
        .map_or(0, sums::summation_order_ulps);

        for k in 1..=options.extra_schedules {
            report.schedules_run += 1;
            let seed = options
                .run
                .seed
                .wrapping_add(k as u64)
                .wrapping_mul(0x2545_F491_4F6C_DD1D);
            let schedule = AltSeed {
                // The offset keeps every seed's schedules as they were.
                rng_seed: seed ^ 0x9E37_79B9_7F4A_7C15,
                warps: k % 2 == 1 || codes.iter().all(|c| c.threads <= 32),
            };
            let result = if detect {
                self.run_detected(&layout, args, &codes, &limits, Some(schedule), None)
                    .map(|(bufs, detector, _)| (bufs, Some(detector)))
            } else {
                self.make_buffers(&layout, args, false, &limits)
                    .and_then(|(bufs, _)| {
                        let mut alt = schedule.start();
                        run_sequential(&codes, &bufs, &limits, None, Some(&mut alt), None)?;
                        Ok((bufs, None))
                    })
            };
            let (alt_bufs, alt_detector) = match result {
                Ok(done) => done,
                Err(e) => {
                    self.last_report = Some(report);
                    return Err(e);
                }
            };
            let alt_outputs = collect_outputs(&layout, &alt_bufs);
            self.recycle(alt_bufs, &limits);
            self.recycle_detector(alt_detector, &limits);
            let difference = outputs.as_ref().and_then(|o| {
                first_difference(
                    o,
                    &alt_outputs,
                    &options.schedule_tolerances,
                    k,
                    options.run.seed,
                    sum_order_ulps,
                )
            });
            if let Some(detail) = difference {
                self.last_report = Some(report);
                return Err(RunError::Nondeterministic { detail });
            }
        }

        // Device-resident refs keep the first schedule's final contents.
        for (i, spec) in layout.buffers.iter().enumerate() {
            if let Init::Resident { name, .. } = &spec.init {
                let words: Vec<u32> = bufs[i].to_vec();
                let init = match &detector {
                    Some(d) => d.init[i].clone(),
                    // Without detection nothing tracks writes: count every element as written.
                    None => flags(spec.len as usize, true, &limits)?,
                };
                let tensor = HostTensor::from_packed(spec.ty.elem, spec.shape.clone(), words);
                // Charged with the call's buffers (`charge_buffers`).
                let charge = limits.keep(resident_bytes(spec.ty.elem, spec.len));
                self.residents.insert(
                    name.clone(),
                    ResidentState {
                        tensor,
                        init,
                        _charge: charge,
                    },
                );
            }
        }
        self.recycle_detector(detector, &limits);
        // Outputs take their buffers without a copy; the rest are reused.
        let mut slots: Vec<Option<GlobalBuf>> = bufs.into_iter().map(Some).collect();
        let mut outputs = BTreeMap::new();
        for (name, i) in &layout.outputs {
            let spec = &layout.buffers[*i];
            let words: Vec<u32> = match slots[*i].take() {
                Some(b) => b.into_words(),
                None => outputs
                    .get(name)
                    .map(|t: &HostTensor| t.words().to_vec())
                    .unwrap_or_default(),
            };
            outputs.insert(
                name.clone(),
                HostTensor::from_packed(spec.ty.elem, spec.shape.clone(), words),
            );
        }
        self.recycle(slots.into_iter().flatten().collect(), &limits);
        self.last_report = Some(report);
        Ok(CallOutputs { outputs })
    }

    /// The first schedule without detection: independent maps on all host
    /// cores, others in the lockstep schedule ([`run_lockstep`], again one
    /// block at a time with fresh buffers where its blocks on several cores
    /// met a wait they could not meet at once).
    fn run_fast<'c>(
        &mut self,
        layout: &Layout,
        args: &'c CallArgs,
        codes: &[ProgramCode],
        limits: &Limits,
        parallel: bool,
        report: &mut InterpReport,
    ) -> Result<(Vec<GlobalBuf<'c>>, u64), RunError> {
        let (bufs, _) = self.make_buffers(layout, args, false, limits)?;
        if parallel {
            let blocks = run_parallel(codes, &bufs, limits)?;
            return Ok((bufs, blocks));
        }
        match run_lockstep(codes, &bufs, limits, Some(&mut report.late_waits))? {
            Lockstep::Done(blocks, several) => {
                report.parallel = several;
                Ok((bufs, blocks))
            }
            Lockstep::Again => {
                self.recycle(bufs, limits);
                let (bufs, _) = self.make_buffers(layout, args, false, limits)?;
                report.late_waits.clear();
                let late_waits = Some(&mut report.late_waits);
                let blocks = run_sequential(codes, &bufs, limits, None, None, late_waits)?;
                Ok((bufs, blocks))
            }
        }
    }

    /// Runs one schedule with detection; when it finds waits that another
    /// schedule could satisfy with other signals ([`detect::Detector::find_contests`]),
    /// runs the same schedule again with those waits ordered after only
    /// what every candidate signal is ordered after, until no new contest
    /// shows (at most [`MAX_CONTEST_PASSES`] runs). The verdict and the
    /// buffers are the last run's.
    fn run_detected<'c>(
        &mut self,
        layout: &Layout,
        args: &'c CallArgs,
        codes: &[ProgramCode],
        limits: &Limits,
        schedule: Option<AltSeed>,
        mut late_waits: Option<&mut Vec<LateWait>>,
    ) -> Result<(Vec<GlobalBuf<'c>>, detect::Detector, u64), RunError> {
        let mut contests = HashMap::new();
        let mut pass = 1;
        loop {
            let (bufs, init) = self.make_buffers(layout, args, true, limits)?;
            let mut detector = self.detector(init, limits);
            detector.may_write = written_buffers(codes, detector.init.len());
            detector.contests = std::mem::take(&mut contests);
            if let Some(late) = late_waits.as_deref_mut() {
                late.clear();
            }
            let mut alt = schedule.map(AltSeed::start);
            let blocks = run_sequential(
                codes,
                &bufs,
                limits,
                Some(&mut detector),
                alt.as_mut(),
                late_waits.as_deref_mut(),
            )?;
            let found = detector.find_contests();
            contests = std::mem::take(&mut detector.contests);
            let learned = detect::Detector::learn(&mut contests, found);
            if !learned || pass >= MAX_CONTEST_PASSES {
                detector.contests = contests;
                return Ok((bufs, detector, blocks));
            }
            pass += 1;
            self.recycle(bufs, limits);
            self.recycle_detector(Some(detector), limits);
        }
    }

    /// Keeps a call's buffers for reuse, so that repeated calls do not pay
    /// for fresh pages; their memory stays charged (moved from the call's
    /// charge).
    /// An interpreter that shares a run's budget keeps none: what it does
    /// not need goes back to the run.
    fn recycle(&mut self, bufs: Vec<GlobalBuf>, limits: &Limits) {
        for words in bufs.into_iter().filter_map(GlobalBuf::into_allocation) {
            if !self.shared_budget && self.pool.len() < 16 {
                let charge = limits.keep((words.len() as u64).saturating_mul(4));
                self.pool.push((words, charge));
            }
        }
    }

    /// A detector for a call's buffers, with which words start initialised;
    /// its access histories come from the pool and grow on first use.
    fn detector(&mut self, init: Vec<Vec<bool>>, limits: &Limits) -> detect::Detector {
        let shadow = init
            .iter()
            .map(|words| {
                // The smallest pooled history that holds the buffer.
                let pool = &mut self.shadow_pool;
                // Its charge becomes the call's.
                pool.iter()
                    .enumerate()
                    .filter(|(_, (h, _))| h.capacity() >= words.len())
                    .min_by_key(|(_, (h, _))| h.capacity())
                    .map(|(k, _)| k)
                    .map_or_else(detect::Shadow::default, |k| {
                        let (shadow, charge) = pool.swap_remove(k);
                        limits.absorb(charge);
                        shadow
                    })
            })
            .collect();
        detect::Detector {
            shadow,
            init,
            ..Default::default()
        }
    }

    /// Keeps a finished detector's shadows, up to `SHADOW_POOL_ELEMENTS` in all,
    /// each charged what its allocations take.
    fn recycle_detector(&mut self, detector: Option<detect::Detector>, limits: &Limits) {
        let mut kept: usize = self.shadow_pool.iter().map(|(h, _)| h.capacity()).sum();
        for mut shadow in detector.into_iter().flat_map(|d| d.shadow) {
            if !self.shared_budget
                && shadow.capacity() > 0
                && kept + shadow.capacity() <= SHADOW_POOL_ELEMENTS
            {
                kept += shadow.capacity();
                shadow.forget_all();
                let bytes = shadow.bytes();
                self.shadow_pool.push((shadow, limits.keep(bytes)));
            }
        }
    }

    /// Fresh device buffers for one schedule, and which words start
    /// initialised. Allocating and filling them looks at the call's clock.
    fn make_buffers<'c>(
        &mut self,
        layout: &Layout,
        args: &'c CallArgs,
        detect: bool,
        limits: &Limits,
    ) -> Result<(Vec<GlobalBuf<'c>>, Vec<Vec<bool>>), RunError> {
        let mut bufs = Vec::with_capacity(layout.buffers.len());
        let mut inits = Vec::with_capacity(layout.buffers.len());
        for spec in &layout.buffers {
            // Detection state is per element; storage is packed words.
            let len = spec.len as usize;
            let words_len = words_of(spec.ty.elem, spec.len) as usize;
            let bits = |v: bool| {
                if detect {
                    flags(len, v, limits)
                } else {
                    Ok(vec![])
                }
            };
            let (words, init): (Vec<AtomicU32>, Vec<bool>) = match &spec.init {
                Init::Input(name) if spec.borrows_input() => {
                    let t = args.input(name, spec.ty.elem, len as u64)?;
                    let words = t.words().get(..words_len).ok_or_else(|| {
                        RunError::BadArguments(format!(
                            "input `{name}` holds fewer words than {len} elements need"
                        ))
                    })?;
                    bufs.push(GlobalBuf::read_only(words));
                    inits.push(bits(true)?);
                    continue;
                }
                Init::Input(name) => {
                    let t = args.input(name, spec.ty.elem, len as u64)?;
                    (
                        buffer(&mut self.pool, words_len, Some(t.words()), limits)?,
                        bits(true)?,
                    )
                }
                Init::Zeroed => (
                    buffer(&mut self.pool, words_len, None, limits)?,
                    bits(true)?,
                ),
                Init::Uninitialized => (
                    buffer(&mut self.pool, words_len, None, limits)?,
                    bits(false)?,
                ),
                Init::Resident { name, zeroed } => match self.residents.get(name) {
                    Some(r) => {
                        check_resident(
                            name,
                            &layout.map,
                            (r.tensor.elem(), r.tensor.len() as u64),
                            (spec.ty.elem, spec.len),
                        )?;
                        let init = if detect { r.init.clone() } else { vec![] };
                        let words =
                            buffer(&mut self.pool, words_len, Some(r.tensor.words()), limits)?;
                        (words, init)
                    }
                    None => (
                        buffer(&mut self.pool, words_len, None, limits)?,
                        bits(*zeroed)?,
                    ),
                },
            };
            bufs.push(GlobalBuf::owned(words));
            inits.push(init);
        }
        Ok((bufs, inits))
    }
}

/// The first output element that differs between two schedules beyond its
/// tolerance (NaN payloads and the sign of zero ignored, as in comparisons).
fn first_difference(
    a: &BTreeMap<Name, HostTensor>,
    b: &BTreeMap<Name, HostTensor>,
    tolerances: &[(Name, ScheduleTolerance)],
    schedule: u32,
    seed: u64,
    sum_order_ulps: u64,
) -> Option<String> {
    // Sign of zero and NaN payloads are unspecified: compare canonical bits
    // (every float type's NaN becomes f32's, outside the 16-bit patterns).
    let canonical = |elem: ScalarType, w: u32| -> u32 {
        match Literal::from_bits(elem, w).as_f32() {
            Some(f) if f.is_nan() => f32::NAN.to_bits(),
            // The pattern matches -0.0 too.
            Some(0.0) => 0,
            _ => w,
        }
    };
    for (name, x) in a {
        let y = b.get(name)?;
        let tolerance = tolerances
            .iter()
            .find(|(n, _)| n == name)
            .map_or(ScheduleTolerance::Ulps(0), |(_, t)| *t);
        let (mut xs, mut ys): (Vec<u32>, Vec<u32>) = (
            x.to_bits()
                .into_iter()
                .map(|w| canonical(x.elem(), w))
                .collect(),
            y.to_bits()
                .into_iter()
                .map(|w| canonical(y.elem(), w))
                .collect(),
        );
        let ulps = match tolerance {
            ScheduleTolerance::Any => continue,
            ScheduleTolerance::Multiset => {
                xs.sort_unstable();
                ys.sort_unstable();
                if xs != ys {
                    return Some(format!(
                        "output `{name}` differs as a multiset between the lockstep schedule and extra schedule {schedule} (seed {seed}){}",
                        order_dependence_hint(name, &[("ignore", "not compared")])
                    ));
                }
                continue;
            }
            ScheduleTolerance::Ulps(n) => u64::from(n),
            ScheduleTolerance::SummationOrder => sum_order_ulps,
        };
        for (i, (&u, &v)) in xs.iter().zip(&ys).enumerate() {
            if !sums::within_ulps(x.elem(), u, v, ulps) {
                // `profile` is offered where it would let this differ:
                // float outputs of a map with f32 atomic adds.
                let reordered_sums = x.elem().is_float()
                    && sum_order_ulps > 0
                    && tolerance != ScheduleTolerance::SummationOrder;
                let profile = [("profile", "f32 atomic adds summed in any order")];
                let modes = [
                    ("multiset", "the same values in any order"),
                    ("ignore", "not compared"),
                ];
                let offered: Vec<(&str, &str)> = profile
                    .iter()
                    .filter(|_| reordered_sums)
                    .chain(&modes)
                    .copied()
                    .collect();
                return Some(format!(
                    "output `{name}` element {i} is {} in the lockstep schedule and {} in extra schedule {schedule} (seed {seed}){}",
                    x.get(i).map(show).unwrap_or_default(),
                    y.get(i).map(show).unwrap_or_default(),
                    order_dependence_hint(name, &offered)
                ));
            }
        }
    }
    None
}

/// How a file declares output `name` as depending on the schedule: a
/// `compare` line of its case section, one per mode offered (`(mode, what
/// it allows)`), which is how the CLI, the Python package (modules from
/// text) and conformance set [`InterpOptions::schedule_tolerances`].
fn order_dependence_hint(name: &str, modes: &[(&str, &str)]) -> String {
    let lines: Vec<String> = modes
        .iter()
        .map(|(mode, allows)| format!("`compare {name} = {mode};` ({allows})"))
        .collect();
    let choice = match lines.as_slice() {
        [] => return String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    };
    format!("; if `{name}` depends on the schedule by design, declare it in the file's `case {{ ... }}` section: {choice}")
}

fn show(v: Literal) -> String {
    match v {
        Literal::F32(b) => format!("{:?}", b.to_f32()),
        Literal::I32(x) => x.to_string(),
        Literal::U32(x) => x.to_string(),
        Literal::Bool(x) => x.to_string(),
        Literal::F16(_) | Literal::BF16(_) => crate::text::print_literal(v),
    }
}

/// Detection state per element of a buffer, charged up front: a written
/// flag and 16 bytes of access history (a `detect::Shadow` takes 2.25 bytes
/// an element where runs of lanes reach whole chunks, 16 more where
/// elements need a history each, and charges what passes 16 when it grows).
pub(crate) const DETECTION_BYTES_PER_ELEMENT: u64 = 1 + 16;

impl Backend for Interpreter {
    fn name(&self) -> &'static str {
        "interp"
    }

    /// Runs the plan's IR (map, meshes, the units' kernels, residents), not
    /// its derived parts, so that lowering bugs show up as disagreements.
    fn run(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        let kernels = (0..plan.map.programs.len())
            .map(|i| {
                plan.unit_of_program(ProgramId::new(i))
                    .map(|u| &u.kernel)
                    .ok_or_else(|| {
                        RunError::Backend(format!("the plan has no unit for program {i}"))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let interp = InterpOptions {
            run: options.clone(),
            detect: options.mode == Mode::Checked || self.backend_options.detect,
            ..self.backend_options.clone()
        };
        self.run_map(
            &plan.map,
            &plan.meshes,
            &kernels,
            &plan.residents,
            args,
            &interp,
        )
    }

    fn resident(&self, name: &str) -> Option<HostTensor> {
        self.residents.get(name).map(|r| r.tensor.clone())
    }

    fn set_resident(&mut self, name: &str, tensor: HostTensor) -> Result<(), RunError> {
        Interpreter::set_resident(self, name, tensor);
        Ok(())
    }
}
