//! Differential fuzzing: random programs that are valid, race-free and
//! deterministic by construction ([`generate()`]), checked on the reference
//! interpreter and then run on every backend given; any disagreement is shrunk
//! ([`reduce`]) and written as an ordinary conformance case.
//!
//! Pipeline per module ([`run_fuzz`]): [`generate_with`] → [`check_module`]
//! (validation, `parse(print(m)) == m`, the interpreter with detection and two
//! extra schedules; any failure here is a GENERATOR bug and fails the run) →
//! every backend through [`judge_backend`] (a fresh backend per module from its
//! [`BackendFactory`], on a worker thread, abandoned after
//! `per_program_timeout` and reported as a hang) → on a disagreement
//! [`reduce::reduce`] and [`reduce::write_found`]. [`FuzzConfig::jobs`]
//! workers run that pipeline up to the reduction on modules at once; the
//! calling thread counts their results in seed order and reduces, so the
//! run's programs, verdicts and findings do not depend on the number of jobs.
//!
//! Generator coverage (see [`mod@generate`] for how each stays race-free):
//! 1 to 4 programs on meshes with 1 to 3 grid axes, sometimes a cluster axis,
//! 1 to 1024 threads (1, 17, 32, 33, 48, 64, 96, 128, 200, 256); outputs flat,
//! 2-D or owned by the program's mesh; `f32`/`i32`/`u32` inputs and scalar
//! parameters; expressions over every unary and binary operator, `select`,
//! casts, bitcasts and all 14 math functions; `let`, `var`/assignment, local
//! arrays, `if`/`else`, `for` over literals, negative `i32` ranges and a scalar
//! bound; barriers in block-uniform `if`s and loops; smem and gmem scratch
//! exchanges between barriers and thread-0 smem reductions; commuting atomics
//! (add, xor, or, max on `u32`; min, max, add on `i32`) on shared counters, a
//! ticket counter whose old values are used only through an order-independent
//! check, and all ten atomics on a thread-owned element; acyclic semaphore
//! edges (signal every block of an owned `sem @ consumer`, `wait` or
//! `wait_nodec` for one credit per producer block, then `read`), cycles (a
//! back edge: bidirectional handshake, which a backend may refuse); a
//! two-call hand-off through `gmem`/`sem` residents owned by an external
//! mesh; and, in a quarter of the modules ([`GenOptions::warps`], a stream
//! of its own, so the other modules are as before), warp collectives in
//! programs of whole warps: every shuffle on every scalar type with literal
//! (also past 31), per-lane and warp-uniform lanes, votes and ballots of
//! random and lane-pattern predicates, `reduce_add`/`min`/`max` on `i32`,
//! `u32` and `f32`, and shuffles and f32 reductions of edge values (NaN,
//! infinities, ±0, extremes) from the `special` input `xw`; mostly in
//! block-uniform control, in a quarter of those modules also under a branch
//! on the warp index or a warp-uniform result (WGSL declines those: a skip,
//! not a disagreement); results feed later expressions, conditions, indices
//! and a digest stored per thread; and, in half of the warp modules
//! ([`GenOptions::mma`], a stream of its own), `mma_m16n8k16` on f16 and
//! bf16 fragments (whole arrays and rows of 2-D arrays) filled per lane
//! (edge values among them) or by `mma_load_a/b` from smem tiles and gmem
//! inputs, chained in place, stored to an output compared as `mma`: by the
//! bits on the interpreter, cuda-host and WGSL, which compute the
//! documented order, and by the tensor-core bound of the oracle's probes on
//! a GPU ([`FloatPolicy::mma`]; [`check_module`] runs the oracle through
//! [`crate::run::run_oracle`], as the conformance runner does); and, in a
//! quarter of the modules ([`GenOptions::provable_operands`], a stream of
//! its own), operands a compiler can prove zero or equal on edge values:
//! zeros derived from integers (`d & 0`, `d - d`, `d * 0`) in products,
//! quotients and `fma`, a loop from 0 accumulating `x * f32(j)`,
//! self-subtraction, in f32 and 16-bit floats, compared exactly.
//!
//! The xtask is a thin wrapper:
//! ```no_run
//! use mpmd_conformance::fuzz::{run_fuzz, BackendFactory, FuzzConfig};
//! let config = FuzzConfig { seed: 1, iterations: Some(100), ..FuzzConfig::default() };
//! let backends = vec![BackendFactory::new("interp", || {
//!     Ok(Box::new(mpmd_core::interp::Interpreter::new()) as Box<dyn mpmd_core::backend::Backend>)
//! })];
//! let summary = run_fuzz(&config, &backends, &mut |line| eprintln!("{line}"));
//! println!("{summary}");
//! std::process::exit(if summary.ok() { 0 } else { 1 });
//! ```

pub mod generate;
pub mod names;
pub mod reduce;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mpmd_core::backend::{Backend, Mode, RunError, RunOptions};
use mpmd_core::case::{CaseSpec, CompareMode, Generator};
use mpmd_core::host::{CallArgs, CallOutputs, HostTensor};
use mpmd_core::inputs::{call_args, resident_data, Fallback, Generation, DEFAULT_GENERATED_BYTES};
use mpmd_core::interp::InterpOptions;
use mpmd_core::ir::{Literal, Module};
use mpmd_core::plan::{lower, LaunchPlan};

pub use generate::{generate, generate_with, GenOptions};

use crate::case::CaseFile;
use crate::compare::{compare_probed, MmaProbes, Tolerance};
use crate::run::{run_oracle, PreparedCall};

/// Makes a fresh backend (fresh device-resident state) for one module. It is
/// called on a worker thread, so the backend itself need not be `Send`.
pub type MakeBackend = Arc<dyn Fn() -> Result<Box<dyn Backend>, String> + Send + Sync>;

/// Units in the last place of the `profile` bound.
pub const PROFILE_ULP: u64 = 4;
/// Absolute slack of the `profile` bound.
pub const PROFILE_ABS: f32 = 2e-3;

/// How closely a backend's floats must match the interpreter's; outputs are
/// judged by [`crate::compare::compare_probed`], the runner's comparison (+0
/// equals -0, any NaN equals any NaN, a subnormal equals a zero; `ulp(n)`
/// allows `n` units in the last place; `multiset` compares the sorted
/// values; `ignore` compares nothing; `mma` per [`FloatPolicy::mma`]).
///
/// The generator sends a value through a function that is not correctly
/// rounded only when it is bounded by 64 in magnitude, and never through a
/// discontinuous operation afterwards; the `profile` bound for that mix is 4
/// ulp plus an absolute 2e-3 (errors of a few math functions, each within a
/// few ulp of values up to 64, added or multiplied a few times).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FloatPolicy {
    /// Slack for `exact` float outputs, whose values the generator built from
    /// operations the design calls correctly rounded (+ - * / sqrt fma, fmod,
    /// floor, ceil, min, max, abs, conversions): none for IEEE backends.
    pub exact: Tolerance,
    /// Bound for `profile` outputs (values that went through exp, log, rsqrt,
    /// sin, cos, tanh or pow, each bounded by 64 in magnitude).
    pub profile: Tolerance,
    /// How `mma` outputs (sums of `mma_m16n8k16` results of exact inputs)
    /// are judged.
    pub mma: MmaJudgement,
}

/// How a backend's `mma` outputs are judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmaJudgement {
    /// Bit for bit (`exact`, no slack): the backend computes
    /// docs/numerics.md's fixed order of the mma, as the interpreter,
    /// cuda-host and WGSL do, from the same inputs (the generator feeds
    /// fragments only exact values).
    Exact,
    /// Within the tensor-core bound of the oracle's probes
    /// ([`crate::compare::compare_mma`]): real tensor cores round their own
    /// way.
    Bound,
}

const PROFILE: Tolerance = Tolerance::bounded(PROFILE_ULP, PROFILE_ABS);

impl FloatPolicy {
    /// The interpreter and cuda-host: CUDA C with `--prec-div=true
    /// --prec-sqrt=true --fmad=false`, the mma in the documented order.
    pub const IEEE: FloatPolicy = FloatPolicy {
        exact: Tolerance::EXACT,
        profile: PROFILE,
        mma: MmaJudgement::Exact,
    };
    /// CUDA on a GPU: IEEE, but `mma.sync` on tensor cores.
    pub const CUDA_GPU: FloatPolicy = FloatPolicy {
        mma: MmaJudgement::Bound,
        ..FloatPolicy::IEEE
    };
    /// WGSL: `/` is within 2.5 ulp, sqrt is inherited from other
    /// operations, `%` from `x - y * trunc(x / y)` (the backend computes
    /// `%` and `fma` exactly on the bits, but the specification promises
    /// neither): everything gets the profile bound, but the mma, emulated
    /// in the documented order on exact inputs, is held to the bits.
    pub const WGSL: FloatPolicy = FloatPolicy {
        exact: PROFILE,
        profile: PROFILE,
        mma: MmaJudgement::Exact,
    };
}

/// A backend under test: its report name, how to make one, and its float bounds.
#[derive(Clone)]
pub struct BackendFactory {
    pub name: String,
    pub make: MakeBackend,
    pub floats: FloatPolicy,
}

impl BackendFactory {
    pub fn new(
        name: &str,
        make: impl Fn() -> Result<Box<dyn Backend>, String> + Send + Sync + 'static,
    ) -> Self {
        BackendFactory {
            name: name.to_string(),
            make: Arc::new(make),
            floats: FloatPolicy::IEEE,
        }
    }

    pub fn with_floats(mut self, floats: FloatPolicy) -> Self {
        self.floats = floats;
        self
    }
}

/// What `cargo xtask fuzz` passes in.
#[derive(Clone, Debug)]
pub struct FuzzConfig {
    /// Module `i` of the run is `generate(seed + i)`.
    pub seed: u64,
    /// Stop after this many programs (`--iterations`).
    pub iterations: Option<u64>,
    /// Stop after this long (`--time`); with neither limit, 100 programs.
    pub time_limit: Option<Duration>,
    /// Where reduced disagreements are written (relative paths from the
    /// working directory; `mpmd-fuzz` defaults to the corpus's `found/`).
    pub found_dir: PathBuf,
    /// How long to wait for one backend on one module before reporting a hang.
    pub per_program_timeout: Duration,
    /// Mode of the backend runs.
    pub mode: Mode,
    /// Shrink disagreements and write them to `found_dir`.
    pub reduce: bool,
    /// Time budget of one reduction.
    pub reduce_time_limit: Duration,
    /// Stop after this many disagreements.
    pub max_findings: usize,
    /// Generator options; set `ieee: false` when a WGSL backend is under test.
    pub generator: GenOptions,
    /// Modules examined at once (generation, check, backends), each on a
    /// worker thread of its own; results are counted in seed order, so the
    /// run's programs and verdicts do not depend on it.
    pub jobs: usize,
}

impl Default for FuzzConfig {
    fn default() -> Self {
        FuzzConfig {
            seed: 0,
            iterations: None,
            time_limit: None,
            found_dir: PathBuf::from("conformance/cases/found"),
            per_program_timeout: Duration::from_secs(30),
            mode: Mode::Fast,
            reduce: true,
            reduce_time_limit: Duration::from_secs(120),
            max_findings: 10,
            generator: GenOptions::default(),
            jobs: 1,
        }
    }
}

/// How a backend disagrees with the interpreter; the reducer keeps this fixed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Signature {
    /// The output `output` differs beyond its compare mode.
    WrongValue { output: String },
    /// The run failed with this error class (`deadlock`, ..., or `backend` for
    /// errors without a class, `lower` when lowering refused a valid module).
    Error { class: String },
    /// No answer within the per-program timeout.
    Hang,
    /// The backend (or its factory) panicked.
    Panic,
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Signature::WrongValue { output } => write!(f, "wrong value in output `{output}`"),
            Signature::Error { class } => write!(f, "fails with error class `{class}`"),
            Signature::Hang => f.write_str("hangs (no answer within the timeout)"),
            Signature::Panic => f.write_str("panics"),
        }
    }
}

/// A disagreement between a backend and the interpreter.
#[derive(Clone, Debug)]
pub struct Finding {
    /// The generator seed of the module.
    pub seed: u64,
    pub backend: String,
    pub signature: Signature,
    /// First differing element or the error message.
    pub detail: String,
    /// The reduced case, when written.
    pub reduced_path: Option<PathBuf>,
    /// Statements left in the reduced module (before reduction when not reduced).
    pub statements: usize,
}

/// A module the pipeline rejected before any backend ran: a generator bug.
#[derive(Clone, Debug)]
pub struct GeneratorBug {
    pub seed: u64,
    pub stage: &'static str,
    pub message: String,
}

/// The result of a fuzzing run.
#[derive(Clone, Debug, Default)]
pub struct FuzzSummary {
    /// Modules generated and checked on the interpreter.
    pub programs: u64,
    pub elapsed: Duration,
    pub generator_bugs: Vec<GeneratorBug>,
    pub findings: Vec<Finding>,
    /// Per backend: modules that agreed with the interpreter.
    pub agreed: BTreeMap<String, u64>,
    /// Per backend and reason: modules the backend declined (unsupported, refused).
    pub skipped: BTreeMap<String, BTreeMap<String, u64>>,
    /// Wall time of each stage over the modules counted, summed over the
    /// workers: `generate`, `check` (validation, round trip, the
    /// interpreter with detection and extra schedules), then each backend
    /// (making it, compiling, running, comparing), in the order given.
    pub stage_times: Vec<(String, Duration)>,
    /// CPU time of the run: this process's threads and the children it
    /// waited for (the host compiler, ptxas, cuda-host's programs), from
    /// `/proc/self/stat`; `None` where that cannot be read (not Linux). On a
    /// machine shared with other work it says what the run costs where the
    /// wall time cannot.
    pub cpu: Option<Duration>,
}

impl FuzzSummary {
    pub fn ok(&self) -> bool {
        self.generator_bugs.is_empty() && self.findings.is_empty()
    }

    pub fn programs_per_second(&self) -> f64 {
        self.programs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl std::fmt::Display for FuzzSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "fuzz: {} programs in {:.1} s ({:.1} programs/s), {} generator bugs, {} disagreements",
            self.programs,
            self.elapsed.as_secs_f64(),
            self.programs_per_second(),
            self.generator_bugs.len(),
            self.findings.len()
        )?;
        if let Some(cpu) = self.cpu {
            writeln!(
                f,
                "  CPU time {:.1} s ({:.0} ms a program; this process and the compilers and programs it ran)",
                cpu.as_secs_f64(),
                cpu.as_secs_f64() * 1000.0 / self.programs.max(1) as f64
            )?;
        }
        if !self.stage_times.is_empty() {
            let stages: Vec<String> = self
                .stage_times
                .iter()
                .map(|(stage, t)| format!("{stage} {:.1} s", t.as_secs_f64()))
                .collect();
            writeln!(f, "  time by stage: {}", stages.join(", "))?;
        }
        for (b, n) in &self.agreed {
            writeln!(f, "  {b}: {n} agreed")?;
        }
        for (b, reasons) in &self.skipped {
            for (r, n) in reasons {
                writeln!(f, "  {b}: {n} skipped: {r}")?;
            }
        }
        for g in &self.generator_bugs {
            writeln!(
                f,
                "  GENERATOR BUG seed {} at {}: {}",
                g.seed, g.stage, g.message
            )?;
        }
        for x in &self.findings {
            write!(
                f,
                "  seed {}: `{}` {}: {}",
                x.seed, x.backend, x.signature, x.detail
            )?;
            if let Some(p) = &x.reduced_path {
                write!(f, " -> {} ({} statements)", p.display(), x.statements)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// The interpreter's verdict on a module: everything a backend run needs.
#[derive(Clone, Debug)]
pub struct Oracle {
    /// Per call of `Module::effective_calls`.
    pub args: Vec<CallArgs>,
    /// Device-resident refs given data before the first call.
    pub residents: Vec<(String, HostTensor)>,
    pub plans: Vec<Result<LaunchPlan, String>>,
    pub outputs: Vec<CallOutputs>,
    /// Per call, the probes of the outputs compared as `mma`
    /// ([`crate::run::run_oracle`]).
    pub mma: Vec<BTreeMap<String, MmaProbes>>,
}

/// Seed of the inputs of a module (fixed, so that a reduction sees the same data).
pub fn input_seed(module_seed: u64) -> u64 {
    module_seed ^ 0x5EED_1A7A
}

/// The tag prefix of a found case: `fuzz_inputs_seed_N` says that its inputs
/// are the fuzzer's, from input seed `N` ([`fuzz_generation`]), so the
/// conformance runner gives the case exactly the inputs it failed with.
pub const FUZZ_INPUTS_TAG: &str = "fuzz_inputs_seed_";

/// How the fuzzer generates inputs from an input seed: streams keyed by the
/// operand name alone; an input without a `generate` line gets values in the
/// range that the generator's promises assume for floats. The one rule, used
/// by [`check_module`] and by the runner for found cases, which state their
/// `generate` lines with [`Generation::with_generators`].
pub fn fuzz_generation(input_seed: u64) -> Generation<'static> {
    Generation {
        seed: input_seed,
        stream: &[],
        generators: &[],
        fallback: Fallback::Same(Generator::Uniform {
            lo: Literal::f32(-4.0),
            hi: Literal::f32(4.0),
        }),
    }
}

/// The input seed a found case's tags state (`fuzz_inputs_seed_N`), if any.
pub fn stated_input_seed(spec: &CaseSpec) -> Option<u64> {
    spec.tags
        .iter()
        .find_map(|t| t.strip_prefix(FUZZ_INPUTS_TAG)?.parse().ok())
}

/// Checks what the generator promises: the module and its case validate,
/// round-trip through the text format, and run on the interpreter with
/// detection and extra schedules without error. `Err((stage, message))`
/// otherwise.
pub fn check_module(file: &CaseFile, seed: u64) -> Result<Oracle, (&'static str, String)> {
    let CaseFile { module, spec } = file;
    let valid = file.validate().map_err(|diags| {
        let text = diags
            .iter()
            .map(|d| format!("{}: {}", d.code, d.message))
            .collect::<Vec<_>>()
            .join("; ");
        ("validate", text)
    })?;
    match mpmd_core::text::parse_file(&file.print()) {
        Ok(parsed) if parsed.module == *module && parsed.case.as_ref() == Some(spec) => {}
        Ok(_) => return Err(("round-trip", "parse(print(m)) != m".into())),
        Err(e) => return Err(("round-trip", format!("printed module does not parse: {e}"))),
    }
    let generation = fuzz_generation(input_seed(seed)).with_generators(&spec.generators);
    let args = call_args(module, &generation).map_err(|e| ("inputs", e.to_string()))?;
    let residents = resident_data(module, &generation, DEFAULT_GENERATED_BYTES)
        .map_err(|e| ("inputs", e.to_string()))?;
    let calls = module.effective_calls();
    let prepared: Vec<PreparedCall> = calls
        .iter()
        .zip(&args)
        .enumerate()
        .map(|(i, (call, a))| PreparedCall {
            map: call.map.clone(),
            args: a.clone(),
            residents: if i == 0 { residents.clone() } else { vec![] },
        })
        .collect();
    let options = InterpOptions {
        run: RunOptions {
            mode: Mode::Checked,
            seed,
        },
        detect: true,
        extra_schedules: 2,
        schedule_tolerances: spec.schedule_tolerances(),
        // The fuzzer's inputs avoid subnormals.
        flush_subnormals: false,
        ..InterpOptions::default()
    };
    let observed = run_oracle(&valid, spec, &prepared, &options)
        .map_err(|e| ("interpreter", e.to_string()))?;
    let mut outputs = vec![CallOutputs::default(); calls.len()];
    let mut mma = vec![BTreeMap::new(); calls.len()];
    for o in observed {
        // Residents after the last call (`call` None) are not compared.
        let Some(i) = o.call else { continue };
        if let Some(probes) = o.mma {
            mma[i].insert(o.name.clone(), probes);
        }
        outputs[i].outputs.insert(o.name, o.tensor);
    }
    let plans = calls
        .iter()
        .map(|call| lower(&valid, &call.map).map_err(|e| e.to_string()))
        .collect();
    Ok(Oracle {
        args,
        residents,
        plans,
        outputs,
        mma,
    })
}

/// What one backend did with one module.
#[derive(Clone, Debug)]
pub enum Verdict {
    Agrees,
    /// Declined (unsupported on this adapter, refused before launch): a skip.
    Skipped(String),
    Disagrees(Signature, String),
}

/// Runs the case's module on a fresh backend from `factory` and judges it
/// against `oracle` with the case's compare modes.
pub fn judge_backend(
    file: &CaseFile,
    oracle: &Oracle,
    factory: &BackendFactory,
    mode: Mode,
    seed: u64,
    timeout: Duration,
) -> Verdict {
    let mut plans = vec![];
    for p in &oracle.plans {
        match p {
            Ok(p) => plans.push(p.clone()),
            Err(e) => {
                return Verdict::Disagrees(
                    Signature::Error {
                        class: "lower".into(),
                    },
                    e.clone(),
                )
            }
        }
    }
    let args = oracle.args.clone();
    let residents = oracle.residents.clone();
    let make = factory.make.clone();
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::Builder::new()
        .name(format!("fuzz-{}", factory.name))
        .spawn(move || {
            let result = (|| -> Result<Vec<CallOutputs>, Box<Result<RunError, String>>> {
                let mut backend = make().map_err(|e| Box::new(Err(e)))?;
                for (name, tensor) in residents {
                    backend
                        .set_resident(&name, tensor)
                        .map_err(|e| Box::new(Ok(e)))?;
                }
                let options = RunOptions { mode, seed };
                plans
                    .iter()
                    .zip(&args)
                    .map(|(plan, a)| backend.run(plan, a, &options).map_err(|e| Box::new(Ok(e))))
                    .collect()
            })();
            let _ = tx.send(result);
        });
    if worker.is_err() {
        return Verdict::Disagrees(
            Signature::Error {
                class: "backend".into(),
            },
            "cannot start a worker thread".into(),
        );
    }
    let result = match rx.recv_timeout(timeout) {
        Ok(r) => r,
        // The worker is left behind: a hung backend cannot be stopped from here.
        Err(mpsc::RecvTimeoutError::Timeout) => {
            return Verdict::Disagrees(Signature::Hang, format!("no answer within {timeout:?}"))
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            return Verdict::Disagrees(Signature::Panic, "the backend panicked".into())
        }
    };
    let outputs = match result.map_err(|e| *e) {
        Ok(o) => o,
        Err(Err(e)) => {
            return Verdict::Disagrees(
                Signature::Error {
                    class: "backend".into(),
                },
                format!("cannot make the backend: {e}"),
            )
        }
        Err(Ok(e @ (RunError::Unsupported { .. } | RunError::Refused { .. }))) => {
            return Verdict::Skipped(e.to_string())
        }
        Err(Ok(e)) => {
            let class = e.class().map_or("backend", |c| c.keyword()).to_string();
            return Verdict::Disagrees(Signature::Error { class }, e.to_string());
        }
    };
    let compares = &file.spec.compares;
    let floats = factory.floats;
    for ((expected, probes), got) in oracle.outputs.iter().zip(&oracle.mma).zip(&outputs) {
        for (name, want) in &expected.outputs {
            let stated = compares
                .iter()
                .find(|(n, _)| n == name)
                .map_or(CompareMode::Exact, |(_, m)| m.clone());
            let (mode, exact) = match stated {
                // The documented order, bit for bit: no slack, whatever
                // the backend's `exact` floats.
                CompareMode::Mma if floats.mma == MmaJudgement::Exact => {
                    (CompareMode::Exact, Tolerance::EXACT)
                }
                mode => (mode, floats.exact),
            };
            let Some(have) = got.outputs.get(name) else {
                return Verdict::Disagrees(
                    Signature::WrongValue {
                        output: name.clone(),
                    },
                    format!("output `{name}` missing"),
                );
            };
            let tolerances = [exact, floats.profile];
            if let Err(mismatch) =
                compare_probed(&mode, want, probes.get(name), have, tolerances, 1.0)
            {
                return Verdict::Disagrees(
                    Signature::WrongValue {
                        output: name.clone(),
                    },
                    mismatch.to_string(),
                );
            }
        }
    }
    Verdict::Agrees
}

/// What a skip is counted under: its reason's first clause, with what it
/// quotes (kernel, statement and condition text, in backticks) left out, so
/// that one reason over many modules is one line of the summary.
pub fn skip_group(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len());
    for (k, part) in reason.split('`').enumerate() {
        if k % 2 == 0 {
            out.push_str(part);
        } else {
            out.push_str("`…`");
        }
    }
    out.split(" (").next().unwrap_or_default().to_string()
}

/// Number of statements of every kernel of a module, nested ones included.
pub fn statement_count(module: &Module) -> usize {
    let mut count = 0;
    for kernel in &module.kernels {
        mpmd_core::ir::visit::for_each_stmt(&kernel.body, &mut |_| count += 1);
    }
    count
}

/// What a worker found out about one module: everything [`run_fuzz`] needs to
/// count it, report it and reduce its disagreements, in seed order.
struct Examined {
    seed: u64,
    file: CaseFile,
    /// The backends' verdicts in the order of the factories, or the stage
    /// and message of a generator bug.
    verdicts: Result<Vec<Verdict>, (&'static str, String)>,
    /// Wall time of generation, of the check on the interpreter, and of
    /// each backend (the order of [`FuzzSummary::stage_times`]).
    times: Vec<Duration>,
}

/// Generates module `seed` and runs it through the check and every backend.
fn examine(config: &FuzzConfig, backends: &[BackendFactory], seed: u64) -> Examined {
    let mut times = Vec::with_capacity(2 + backends.len());
    let clock = Instant::now();
    let file = generate_with(seed, &config.generator);
    times.push(clock.elapsed());
    let clock = Instant::now();
    let checked = check_module(&file, seed);
    times.push(clock.elapsed());
    let verdicts = checked.map(|oracle| {
        backends
            .iter()
            .map(|factory| {
                let clock = Instant::now();
                let verdict = judge_backend(
                    &file,
                    &oracle,
                    factory,
                    config.mode,
                    seed,
                    config.per_program_timeout,
                );
                times.push(clock.elapsed());
                verdict
            })
            .collect()
    });
    Examined {
        seed,
        file,
        verdicts,
        times,
    }
}

/// Generates, checks and runs programs until a limit; reduces and writes
/// every disagreement. `progress` receives one line per event worth showing.
///
/// [`FuzzConfig::jobs`] workers examine modules at once (generation, check,
/// backends); this thread takes their results in seed order, so the
/// summary, the progress lines and the reductions are those of one worker:
/// the same seed gives the same programs and verdicts whatever the number
/// of jobs. Modules a worker examined past the last one counted (after the
/// time limit or the last finding) are dropped.
pub fn run_fuzz(
    config: &FuzzConfig,
    backends: &[BackendFactory],
    progress: &mut dyn FnMut(&str),
) -> FuzzSummary {
    let start = Instant::now();
    let cpu_start = process_cpu();
    let mut summary = FuzzSummary {
        stage_times: ["generate", "check"]
            .iter()
            .map(|s| (s.to_string(), Duration::ZERO))
            .chain(backends.iter().map(|f| (f.name.clone(), Duration::ZERO)))
            .collect(),
        ..FuzzSummary::default()
    };
    let limit = match (config.iterations, config.time_limit) {
        (None, None) => Some(100),
        (n, _) => n,
    };
    let jobs = config.jobs.max(1);
    let next = std::sync::atomic::AtomicU64::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    use std::sync::atomic::Ordering::SeqCst;
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::sync_channel::<(u64, Examined)>(2 * jobs);
        for _ in 0..jobs {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || loop {
                if stop.load(SeqCst) || config.time_limit.is_some_and(|t| start.elapsed() >= t) {
                    break;
                }
                let i = next.fetch_add(1, SeqCst);
                if limit.is_some_and(|n| i >= n) {
                    break;
                }
                let examined = examine(config, backends, config.seed.wrapping_add(i));
                if tx.send((i, examined)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        // Results that arrived before the ones before them were counted.
        let mut waiting = BTreeMap::new();
        let mut counted = 0u64;
        'results: for (i, examined) in rx.iter() {
            waiting.insert(i, examined);
            while let Some(examined) = waiting.remove(&counted) {
                if summary.findings.len() >= config.max_findings {
                    break 'results;
                }
                counted += 1;
                count(config, backends, examined, &mut summary, progress);
            }
        }
        stop.store(true, SeqCst);
        summary.elapsed = start.elapsed();
        summary.cpu = cpu_start
            .zip(process_cpu())
            .map(|(before, after)| after.saturating_sub(before));
        // A worker waiting to send its next result ends now; one examining a
        // module ends when it has.
        drop(rx);
    });
    summary
}

/// This process's CPU time so far, its threads' and its waited-for
/// children's (`/proc/self/stat` counts in USER_HZ, 100 a second on Linux).
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    crate::runner::process_ticks(&stat).map(|ticks| Duration::from_millis(ticks * 10))
}

/// Counts one examined module into `summary`; reduces and writes its
/// disagreements.
fn count(
    config: &FuzzConfig,
    backends: &[BackendFactory],
    examined: Examined,
    summary: &mut FuzzSummary,
    progress: &mut dyn FnMut(&str),
) {
    let Examined {
        seed,
        file,
        verdicts,
        times,
    } = examined;
    for ((_, total), t) in summary.stage_times.iter_mut().zip(&times) {
        *total += *t;
    }
    summary.programs += 1;
    let verdicts = match verdicts {
        Ok(v) => v,
        Err((stage, message)) => {
            progress(&format!("GENERATOR BUG seed {seed} at {stage}: {message}"));
            summary.generator_bugs.push(GeneratorBug {
                seed,
                stage,
                message,
            });
            return;
        }
    };
    for (factory, verdict) in backends.iter().zip(verdicts) {
        match verdict {
            Verdict::Agrees => *summary.agreed.entry(factory.name.clone()).or_default() += 1,
            Verdict::Skipped(reason) => {
                let reason = skip_group(&reason);
                *summary
                    .skipped
                    .entry(factory.name.clone())
                    .or_default()
                    .entry(reason)
                    .or_default() += 1
            }
            Verdict::Disagrees(signature, detail) => {
                progress(&format!(
                    "seed {seed}: `{}` {signature}: {detail}",
                    factory.name
                ));
                let mut finding = Finding {
                    seed,
                    backend: factory.name.clone(),
                    signature: signature.clone(),
                    detail,
                    reduced_path: None,
                    statements: statement_count(&file.module),
                };
                if config.reduce {
                    // A hang costs a timeout per candidate: write it unreduced.
                    let reduced = if signature == Signature::Hang {
                        reduce::Reduced {
                            file: file.clone(),
                            detail: finding.detail.clone(),
                            tried: 0,
                            accepted: 0,
                        }
                    } else {
                        reduce::reduce(&file, seed, factory, &signature, config)
                    };
                    finding.statements = statement_count(&reduced.file.module);
                    finding.detail = reduced.detail.clone();
                    match reduce::write_found(&reduced, &finding, &config.found_dir) {
                        Ok(path) => {
                            progress(&format!(
                                "  reduced to {} statements: {}",
                                finding.statements,
                                path.display()
                            ));
                            finding.reduced_path = Some(path);
                        }
                        Err(e) => progress(&format!("  cannot write the reduced case: {e}")),
                    }
                }
                summary.findings.push(finding);
            }
        }
    }
}
