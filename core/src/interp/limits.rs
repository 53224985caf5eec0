//! The interpreter's time bound and memory budget (`InterpOptions::time_limit`,
//! `InterpOptions::memory_limit`): a run that would pass either stops with an
//! error naming the block or the size, never hangs or aborts on allocation.
//!
//! Memory is one account per run, [`MemoryBudget`]: whoever allocates
//! something sized by the program (input generation, the interpreter's
//! buffers, block states, detection state, residents, pooled buffers)
//! charges it first and holds the [`Charge`] as long as the memory lives, so
//! the limit bounds the sum of what the run holds at once, not each part
//! alone.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::backend::{RunError, Site};

/// How often (in loop back-edges) a block looks at the clock: often enough to
/// stop within milliseconds, rarely enough to cost nothing measurable.
const TICKS_PER_CLOCK_CHECK: u32 = 1024;

/// Elements filled between two looks at the clock when buffers and block
/// state are filled: a few milliseconds in a debug build.
pub(crate) const FILL_CHUNK: usize = 1 << 20;

/// The host memory one run may hold at once, shared by everything that
/// allocates for it. Clones are the same account.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    inner: Arc<BudgetInner>,
}

#[derive(Debug)]
struct BudgetInner {
    limit: AtomicU64,
    used: AtomicU64,
}

/// A charge refused: `bytes` for `what`, with `in_use` bytes already held,
/// would pass `limit`.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{what}: {bytes} bytes{}, more than the memory limit of {limit} bytes", beside(*in_use))]
pub struct OverBudget {
    pub what: String,
    pub bytes: u64,
    pub in_use: u64,
    pub limit: u64,
}

fn beside(in_use: u64) -> String {
    match in_use {
        0 => String::new(),
        n => format!(" beside the {n} bytes the run already holds"),
    }
}

impl OverBudget {
    /// The interpreter's error for this refusal.
    pub(crate) fn into_run_error(self) -> RunError {
        let what = if self.in_use == 0 {
            self.what
        } else {
            // `needed` is the sum: name both parts, so that the figure
            // after "needs" is not read as this part's alone.
            format!(
                "{} ({} bytes) and the {} bytes the run already holds",
                self.what, self.bytes, self.in_use
            )
        };
        RunError::MemoryLimit {
            what,
            needed: self.in_use.saturating_add(self.bytes),
            limit: self.limit,
            option: "InterpOptions::memory_limit".into(),
        }
    }
}

/// Bytes held on a [`MemoryBudget`], given back when dropped.
#[derive(Debug)]
#[must_use = "a charge is given back when dropped"]
pub struct Charge {
    budget: MemoryBudget,
    bytes: u64,
}

impl Charge {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.inner.used.fetch_sub(self.bytes, Relaxed);
    }
}

impl MemoryBudget {
    pub fn new(limit: u64) -> Self {
        MemoryBudget {
            inner: Arc::new(BudgetInner {
                limit: AtomicU64::new(limit),
                used: AtomicU64::new(0),
            }),
        }
    }

    pub fn limit(&self) -> u64 {
        self.inner.limit.load(Relaxed)
    }

    /// Bytes charged and not given back.
    pub fn in_use(&self) -> u64 {
        self.inner.used.load(Relaxed)
    }

    /// An interpreter's own budget takes each call's limit.
    pub(crate) fn set_limit(&self, limit: u64) {
        self.inner.limit.store(limit, Relaxed);
    }

    /// Takes `bytes` for `what`, or refuses with the numbers when the
    /// bytes already held and these would pass the limit.
    pub fn charge(&self, bytes: u64, what: impl FnOnce() -> String) -> Result<Charge, OverBudget> {
        let limit = self.limit();
        let before = self.inner.used.fetch_add(bytes, Relaxed);
        match before.checked_add(bytes) {
            Some(total) if total <= limit => Ok(Charge {
                budget: self.clone(),
                bytes,
            }),
            _ => {
                self.inner.used.fetch_sub(bytes, Relaxed);
                Err(OverBudget {
                    what: what(),
                    bytes,
                    in_use: before,
                    limit,
                })
            }
        }
    }

    /// Records `bytes` that already exist (data a caller handed over):
    /// never refused; a later charge sees them.
    pub fn record(&self, bytes: u64) -> Charge {
        self.inner.used.fetch_add(bytes, Relaxed);
        Charge {
            budget: self.clone(),
            bytes,
        }
    }
}

/// A flag another thread raises to stop a running call
/// ([`super::InterpOptions::interrupt`]): the call stops at its next time
/// check with [`RunError::Interrupted`]. Python raises it on Ctrl-C.
#[derive(Clone, Debug, Default)]
pub struct Interrupt(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Interrupt {
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every call holding this flag to stop.
    pub fn raise(&self) {
        self.0.store(true, Relaxed);
    }

    pub fn is_raised(&self) -> bool {
        self.0.load(Relaxed)
    }
}

/// One call's clock and its share of the memory budget: everything the call
/// charges through it is given back when the call ends (dropping it).
pub(crate) struct Limits {
    deadline: Option<(Instant, Duration)>,
    interrupt: Option<Interrupt>,
    budget: MemoryBudget,
    charged: AtomicU64,
}

impl Limits {
    pub fn new(
        time_limit: Option<Duration>,
        interrupt: Option<Interrupt>,
        budget: MemoryBudget,
    ) -> Self {
        Limits {
            deadline: time_limit.map(|l| (Instant::now() + l, l)),
            interrupt,
            budget,
            charged: AtomicU64::new(0),
        }
    }

    /// Counts one loop back-edge of a block; looks at the clock every
    /// `TICKS_PER_CLOCK_CHECK` of them.
    pub fn tick(&self, ticks: &mut u32, site: impl FnOnce() -> Site) -> Result<(), RunError> {
        *ticks = ticks.wrapping_add(1);
        if ticks.is_multiple_of(TICKS_PER_CLOCK_CHECK) {
            self.check_time(site)?;
        }
        Ok(())
    }

    pub fn check_time(&self, site: impl FnOnce() -> Site) -> Result<(), RunError> {
        self.check_time_at(|| crate::backend::Activity::Running(site()))
    }

    /// The time check outside any block: `doing` says what the call was
    /// doing (allocating and filling its buffers).
    pub fn check_time_during(&self, doing: &str) -> Result<(), RunError> {
        self.check_time_at(|| crate::backend::Activity::Other(doing.to_string()))
    }

    fn check_time_at(&self, at: impl FnOnce() -> crate::backend::Activity) -> Result<(), RunError> {
        if self.interrupt.as_ref().is_some_and(Interrupt::is_raised) {
            return Err(RunError::Interrupted { at: at() });
        }
        match self.deadline {
            Some((deadline, limit)) if Instant::now() >= deadline => Err(RunError::TimeLimit {
                at: at(),
                limit_ms: limit.as_millis().min(u64::MAX as u128) as u64,
                option: "InterpOptions::time_limit".into(),
            }),
            _ => Ok(()),
        }
    }

    /// Takes `bytes` of the budget for `what` until the call ends, or
    /// refuses with the numbers.
    pub fn charge(&self, bytes: u64, what: impl FnOnce() -> String) -> Result<(), RunError> {
        let charge = self
            .budget
            .charge(bytes, what)
            .map_err(OverBudget::into_run_error)?;
        // The call gives these bytes back as a whole when it ends.
        std::mem::forget(charge);
        self.charged.fetch_add(bytes, Relaxed);
        Ok(())
    }

    /// Moves `bytes` of what the call charged to a charge that outlives the
    /// call (a resident's new contents, a buffer kept for reuse): no new
    /// memory, so never refused.
    pub fn keep(&self, bytes: u64) -> Charge {
        let kept = bytes.min(self.charged.load(Relaxed));
        self.charged.fetch_sub(kept, Relaxed);
        // The bytes stay in `used`; the new charge gives them back.
        let extra = self.budget.record(bytes - kept);
        std::mem::forget(extra);
        Charge {
            budget: self.budget.clone(),
            bytes,
        }
    }

    /// Makes `charge` (memory kept from earlier, now reused by the call)
    /// part of what the call gives back when it ends.
    pub fn absorb(&self, charge: Charge) {
        self.charged.fetch_add(charge.bytes, Relaxed);
        // The bytes stay in `used` until the call ends.
        std::mem::forget(charge);
    }

    /// Fills `len` elements by `fill(range)` in chunks, looking at the clock
    /// between two (`doing` names the work in a time-limit report).
    pub fn fill_in_chunks(
        &self,
        len: usize,
        doing: &str,
        mut fill: impl FnMut(std::ops::Range<usize>),
    ) -> Result<(), RunError> {
        let mut start = 0;
        while start < len {
            self.check_time_during(doing)?;
            let end = len.min(start + FILL_CHUNK);
            fill(start..end);
            start = end;
        }
        Ok(())
    }
}

impl Drop for Limits {
    fn drop(&mut self) {
        self.budget
            .inner
            .used
            .fetch_sub(*self.charged.get_mut(), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::MemoryBudget;

    /// Charges add up against one limit and are given back when dropped.
    #[test]
    fn charges_add_up_and_are_given_back() {
        let budget = MemoryBudget::new(100);
        let a = budget.charge(60, || "a".into()).unwrap();
        let refused = budget.charge(50, || "b".into()).unwrap_err();
        assert_eq!(
            (refused.bytes, refused.in_use, refused.limit),
            (50, 60, 100)
        );
        assert_eq!(budget.in_use(), 60);
        drop(a);
        let b = budget.charge(50, || "b".into()).unwrap();
        assert_eq!(b.bytes(), 50);
        assert_eq!(budget.in_use(), 50);
    }
}
