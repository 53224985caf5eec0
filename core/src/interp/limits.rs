//! The interpreter's time bound and memory budget (`InterpOptions::time_limit`,
//! `InterpOptions::memory_limit`): a run that would pass either stops with an
//! error naming the block or the size, never hangs or aborts on allocation.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::backend::{RunError, Site};

/// How often (in loop back-edges) a block looks at the clock: often enough to
/// stop within milliseconds, rarely enough to cost nothing measurable.
const TICKS_PER_CLOCK_CHECK: u32 = 1024;

pub(crate) struct Limits {
    deadline: Option<(Instant, Duration)>,
    memory_limit: u64,
    used: AtomicU64,
}

impl Limits {
    pub fn new(time_limit: Option<Duration>, memory_limit: u64) -> Self {
        Limits {
            deadline: time_limit.map(|l| (Instant::now() + l, l)),
            memory_limit,
            used: AtomicU64::new(0),
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
        match self.deadline {
            Some((at, limit)) if Instant::now() >= at => Err(RunError::TimeLimit {
                site: site(),
                limit_ms: limit.as_millis().min(u64::MAX as u128) as u64,
                option: "InterpOptions::time_limit".into(),
            }),
            _ => Ok(()),
        }
    }

    /// Takes `bytes` of the budget for `what`, or refuses with the numbers.
    pub fn charge(&self, bytes: u64, what: impl FnOnce() -> String) -> Result<(), RunError> {
        let before = self.used.fetch_add(bytes, Relaxed);
        match before.checked_add(bytes) {
            Some(total) if total <= self.memory_limit => Ok(()),
            _ => {
                self.used.fetch_sub(bytes, Relaxed);
                Err(RunError::MemoryLimit {
                    what: what(),
                    needed: before.saturating_add(bytes),
                    limit: self.memory_limit,
                    option: "InterpOptions::memory_limit".into(),
                })
            }
        }
    }
}
