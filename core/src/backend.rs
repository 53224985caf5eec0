//! The interface every backend implements, and the errors a run can end with.

use thiserror::Error;

use crate::host::{CallArgs, CallOutputs, HostTensor};
use crate::ir::{IrPath, Name};
use crate::plan::LaunchPlan;

/// Fast mode: out-of-bounds is undefined. Checked mode: every access is checked
/// and reported with program, block, thread, ref and index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    #[default]
    Fast,
    Checked,
}

/// Options common to every backend's `run`.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub mode: Mode,
    /// Seed for schedules (interpreter) and anything else randomised.
    pub seed: u64,
}

/// Where in a run something happened.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Site {
    /// The program (its index in the map) and its kernel name.
    pub program: crate::plan::ProgramId,
    pub kernel: Name,
    /// Linear block id within the program.
    pub block: u64,
    /// Thread id within the block (`None` for block-collective operations).
    pub thread: Option<u32>,
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "program {} ({}), block {}",
            self.program, self.kernel, self.block
        )?;
        if let Some(t) = self.thread {
            write!(f, ", thread {t}")?;
        }
        Ok(())
    }
}

/// What an access in a race report did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessKind {
    Read,
    Write,
    /// Any atomic operation (they never race with each other, only with
    /// plain accesses).
    Atomic,
}

impl AccessKind {
    /// The kind of an access that reads and/or writes, atomically or not.
    pub fn of(write: bool, atomic: bool) -> Self {
        match (atomic, write) {
            (true, _) => AccessKind::Atomic,
            (false, true) => AccessKind::Write,
            (false, false) => AccessKind::Read,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
            AccessKind::Atomic => "atomic",
        }
    }
}

impl std::fmt::Display for AccessKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How every backend's reports name one element of a ref: the text
/// format's own spelling, `name[i, j]`, or `name@[c0, c1][i, j]` for an
/// instance of a ref owned by a mesh (its block coordinates first).
pub fn element_text(
    name: &str,
    coords: &[impl std::fmt::Display],
    index: &[impl std::fmt::Display],
) -> String {
    fn join(values: &[impl std::fmt::Display]) -> String {
        values
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
    if coords.is_empty() {
        format!("{name}[{}]", join(index))
    } else {
        format!("{name}@[{}][{}]", join(coords), join(index))
    }
}

/// What a run was doing when its time limit passed ([`RunError::TimeLimit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Activity {
    /// Running this block (printed `at program P (KERNEL), block B`).
    Running(Site),
    /// Work outside any block, such as `filling the call's buffers` or
    /// `compiling the WGSL pipelines` (printed after `while`).
    Other(String),
}

impl std::fmt::Display for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Activity::Running(site) => write!(f, "at {site}"),
            Activity::Other(doing) => write!(f, "while {doing}"),
        }
    }
}

/// Why a run did not produce outputs.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RunError {
    #[error("deadlock: every live block waits\n{wait_for_graph}")]
    Deadlock { wait_for_graph: String },
    #[error("out-of-bounds access at {site}: `{reference}` index {index} (shape {shape})")]
    OutOfBounds {
        site: Site,
        reference: Name,
        index: String,
        shape: String,
    },
    #[error("read of memory that was never written at {site}: `{reference}` element {element}")]
    UninitializedRead {
        site: Site,
        reference: Name,
        element: u64,
    },
    #[error("data race on `{index}`: {} by {first} and {} by {second}", kinds[0], kinds[1])]
    DataRace {
        reference: Name,
        /// The element's index in the buffer (instances of an owned ref
        /// included), one count per element whatever its size.
        element: u64,
        /// The element as reports write it ([`element_text`]): `tile[0, 1]`,
        /// `x@[1][3]`.
        index: String,
        /// The earlier access (recorded) and the one that raced with it.
        first: Site,
        second: Site,
        /// What each access did, `first`'s then `second`'s.
        kinds: [AccessKind; 2],
        /// The statement of each access, in the kernel as the program runs
        /// it (validation's expansion, which inlines helpers):
        /// [`crate::validate::source_path`] turns one into the statement as
        /// written, whose span a `text::SourceMap` has. `None` where the
        /// interpreter kept no path (more than 65,535 accesses in a kernel).
        paths: [Option<IrPath>; 2],
    },
    /// A semaphore operation's amount, computed at run time, is below 1
    /// (docs/design.md: `n >= 1`; literal amounts are a validation error, E0055).
    #[error("semaphore amount {amount} on `{semaphore}` at {site}: a signal or wait amount must be at least 1")]
    BadSemaphoreAmount {
        site: Site,
        semaphore: String,
        /// As the program computed it (a u32 amount of 2^31 or more does not
        /// fit the i32 counters and is refused too).
        amount: i64,
    },
    /// A `while` whose condition still held after its maximum trip count
    /// (checked mode; in fast mode the loop is left).
    #[error("loop limit at {site}: `while {condition}` (loop {ordinal} of the kernel, counting `while`s in source order) still holds after its maximum of {max} iterations")]
    LoopLimit {
        site: Site,
        /// Index of the loop among the kernel's `while`s, outer before inner,
        /// in source order ([`crate::ir::visit::while_loops`]).
        ordinal: u32,
        /// The loop's condition as the text format writes it.
        condition: String,
        max: u32,
    },
    #[error("wait on `{semaphore}` timed out at {site}")]
    WaitTimeout { site: Site, semaphore: String },
    #[error("time limit of {limit_ms} ms reached {at}; raise it with {option}")]
    TimeLimit {
        /// What the run was doing when the limit passed: running a block,
        /// or something outside any block (filling buffers, compiling).
        at: Activity,
        limit_ms: u64,
        /// How the caller raises the limit (`--timeout SECONDS` in the CLI,
        /// `InterpOptions::time_limit` in Rust).
        option: String,
    },
    /// The caller asked the run to stop (Ctrl-C in Python: an
    /// [`crate::interp::Interrupt`] raised while the call ran).
    #[error("interrupted {at}")]
    Interrupted { at: Activity },
    #[error("the interpreter needs {needed} bytes for {what}, more than its memory limit of {limit} bytes; raise it with {option}")]
    MemoryLimit {
        what: String,
        needed: u64,
        limit: u64,
        /// How the caller raises the limit (`--memory-limit` in the CLI,
        /// `InterpOptions::memory_limit` in Rust).
        option: String,
    },
    #[error("results differ between schedules: {detail}")]
    Nondeterministic { detail: String },
    #[error("not supported on this adapter: {reason}")]
    Unsupported { reason: String },
    #[error("refused before launch: {reason}")]
    Refused { reason: String },
    #[error("bad call arguments: {0}")]
    BadArguments(String),
    #[error("backend error: {0}")]
    Backend(String),
}

/// Classes of run-time failure ([`RunError::class`]); conformance compares
/// the class, not the details, and the Python package raises one exception
/// class per class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    Deadlock,
    OutOfBounds,
    UninitializedRead,
    DataRace,
    WaitTimeout,
    /// A signal or wait amount below 1 at run time.
    BadSemaphoreAmount,
    /// A `while` reached its maximum trip count (checked mode).
    LoopLimit,
    Nondeterministic,
    Unsupported,
    Refused,
}

impl ErrorClass {
    pub fn keyword(self) -> &'static str {
        match self {
            Self::Deadlock => "deadlock",
            Self::OutOfBounds => "out_of_bounds",
            Self::UninitializedRead => "uninitialized_read",
            Self::DataRace => "data_race",
            Self::WaitTimeout => "wait_timeout",
            Self::BadSemaphoreAmount => "bad_semaphore_amount",
            Self::LoopLimit => "loop_limit",
            Self::Nondeterministic => "nondeterministic",
            Self::Unsupported => "unsupported",
            Self::Refused => "refused",
        }
    }

    pub const ALL: [ErrorClass; 10] = [
        Self::Deadlock,
        Self::OutOfBounds,
        Self::UninitializedRead,
        Self::DataRace,
        Self::WaitTimeout,
        Self::BadSemaphoreAmount,
        Self::LoopLimit,
        Self::Nondeterministic,
        Self::Unsupported,
        Self::Refused,
    ];
}

impl RunError {
    /// The statements the report points at, each with what it did there,
    /// for a renderer that has the source: a race's two accesses (`the
    /// write`, `the read`; `the first write`, `the second write` when both
    /// are of a kind). The paths are in the kernel as the program runs it
    /// (see [`RunError::DataRace`]'s `paths`).
    pub fn statements(&self) -> Vec<(String, &IrPath)> {
        let RunError::DataRace { kinds, paths, .. } = self else {
            return Vec::new();
        };
        let labels = if kinds[0] == kinds[1] {
            [
                format!("the first {}", kinds[0]),
                format!("the second {}", kinds[1]),
            ]
        } else {
            [format!("the {}", kinds[0]), format!("the {}", kinds[1])]
        };
        labels
            .into_iter()
            .zip(paths)
            .filter_map(|(label, path)| Some((label, path.as_ref()?)))
            .collect()
    }

    /// The class conformance compares; `None` for errors that are never expected.
    pub fn class(&self) -> Option<ErrorClass> {
        Some(match self {
            RunError::Deadlock { .. } => ErrorClass::Deadlock,
            RunError::OutOfBounds { .. } => ErrorClass::OutOfBounds,
            RunError::UninitializedRead { .. } => ErrorClass::UninitializedRead,
            RunError::DataRace { .. } => ErrorClass::DataRace,
            RunError::WaitTimeout { .. } => ErrorClass::WaitTimeout,
            RunError::BadSemaphoreAmount { .. } => ErrorClass::BadSemaphoreAmount,
            RunError::LoopLimit { .. } => ErrorClass::LoopLimit,
            RunError::Nondeterministic { .. } => ErrorClass::Nondeterministic,
            RunError::Unsupported { .. } => ErrorClass::Unsupported,
            RunError::Refused { .. } | RunError::MemoryLimit { .. } => ErrorClass::Refused,
            RunError::BadArguments(_)
            | RunError::Backend(_)
            | RunError::TimeLimit { .. }
            | RunError::Interrupted { .. } => return None,
        })
    }
}

/// A backend runs launch plans. It owns the device-resident refs, which live
/// as long as the backend value: that is how one call hands data and
/// semaphore credits to a later call.
pub trait Backend {
    /// Short name used in reports (`interp`, `wgpu`, `cuda`).
    fn name(&self) -> &'static str;

    /// Runs one call of the plan's map.
    fn run(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError>;

    /// Current contents of a device-resident ref, if it exists yet.
    fn resident(&self, name: &str) -> Option<HostTensor>;

    /// Gives device-resident ref `name` the contents `tensor`, before the
    /// first call that binds it or between calls (how a caller hands a
    /// resident its data: `generate` lines and `mpmd run --input`). The
    /// tensor has the resident's element type and host shape
    /// ([`crate::host::host_shape`]); a later call that binds the resident
    /// with another type or length fails with [`RunError::BadArguments`].
    /// Backends that cannot do this say so with [`RunError::Unsupported`].
    fn set_resident(&mut self, name: &str, tensor: HostTensor) -> Result<(), RunError> {
        let _ = tensor;
        Err(RunError::Unsupported {
            reason: format!(
                "backend `{}` cannot give resident `{name}` data from the host",
                self.name()
            ),
        })
    }
}
