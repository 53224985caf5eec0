//! Race and uninitialised-read detection.
//!
//! Scheme (sound for the happens-before of DESIGN.md, "Semantics"):
//! - every block is a *task* with an epoch counter that advances at each
//!   barrier (semaphore operations include one);
//! - each task carries a sparse vector clock: for other tasks, the last epoch
//!   whose accesses are ordered before the task's current point. A signal
//!   of `n` releases `n` units carrying the signaller's clock (its own entry =
//!   the epoch before the signal's barrier) into the semaphore element's
//!   queue of credits ([`SemCredits`]); a completed wait takes its `n` units
//!   from the front of the queue and joins exactly their clocks (a
//!   `wait_nodec` joins the first `n` units' clocks and leaves them). So a
//!   wait is ordered after the signals it consumed and no others: a wait for
//!   3 of 4 signals never looks ordered after the 4th, in any schedule.
//!   Units counted before the call started carry no clock (call order
//!   already orders them);
//! - every memory word keeps the accesses since its last ordered plain write
//!   (task, epoch, thread, write?, atomic?). Two accesses conflict when one
//!   writes and not both are atomic; they are ordered when they come from the
//!   same task and either an epoch boundary separates them or the same thread
//!   made both, or, across tasks, when the later task's clock covers the
//!   earlier epoch. Each call starts with empty shadows (call order).

use std::collections::{HashMap, VecDeque};

/// One recorded access to a memory word.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rec {
    pub task: u32,
    pub epoch: u32,
    /// The first thread that made this access (threads per block are at most
    /// 1,024, so 16 bits hold one and keep a history at 16 bytes).
    pub thread: u16,
    /// 0, or 1 + another thread of the task that made this access in this
    /// epoch: a race report then names a thread other than the one racing.
    pub other: u16,
    pub write: bool,
    pub atomic: bool,
}

impl Rec {
    fn add_thread(&mut self, thread: u32) {
        if self.other == 0 && u32::from(self.thread) != thread {
            self.other = thread as u16 + 1;
        }
    }

    /// A thread that made this access and is not `thread` (when one is
    /// known): the one to name beside `thread` in a race report.
    pub fn thread_other_than(&self, thread: u32) -> u32 {
        match self.other {
            o if o != 0 && u32::from(self.thread) == thread => u32::from(o - 1),
            _ => u32::from(self.thread),
        }
    }
}

/// A sparse vector clock: task -> last epoch ordered before the holder.
#[derive(Clone, Debug, Default)]
pub(crate) struct Clock {
    entries: HashMap<u32, u32>,
}

impl Clock {
    pub fn covers(&self, task: u32, epoch: u32) -> bool {
        self.entries.get(&task).is_some_and(|&e| e >= epoch)
    }

    pub fn join(&mut self, other: &Clock) {
        for (&t, &e) in &other.entries {
            self.raise(t, e);
        }
    }

    pub fn raise(&mut self, task: u32, epoch: u32) {
        let slot = self.entries.entry(task).or_insert(epoch);
        *slot = (*slot).max(epoch);
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

/// Where the current access comes from.
pub(crate) struct Accessor<'a> {
    pub task: u32,
    pub epoch: u32,
    pub thread: u32,
    pub clock: &'a Clock,
}

impl Accessor<'_> {
    fn ordered_after(&self, r: &Rec) -> bool {
        if r.task == self.task {
            r.epoch < self.epoch || (r.other == 0 && u32::from(r.thread) == self.thread)
        } else {
            self.clock.covers(r.task, r.epoch)
        }
    }
}

/// The accesses of one word that still matter; most words have one.
/// 16 bytes (the list is boxed, and the enum's tag hides in a `bool` of
/// `Rec`): every word of every buffer a detecting call touches has one.
#[derive(Clone, Debug, Default)]
pub(crate) enum History {
    #[default]
    Empty,
    One(Rec),
    // Boxed on purpose: a bare Vec would make every history 24 bytes.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<Rec>>),
}

impl History {
    /// Forgets every access, but a list keeps its allocation: smem words are
    /// forgotten at every block's start, and a barrier-heavy block would
    /// otherwise allocate and free their lists again each time.
    pub fn forget(&mut self) {
        match self {
            History::Many(list) => list.clear(),
            other => *other = History::Empty,
        }
    }
}

fn conflicts(r: &Rec, who: &Accessor, write: bool, atomic: bool) -> bool {
    (r.write || write) && !(r.atomic && atomic) && !who.ordered_after(r)
}

/// An earlier access that is ordered before this one and no stronger can be
/// forgotten: any later access racing with it races with this one too.
fn subsumed(r: &Rec, who: &Accessor, write: bool, atomic: bool) -> bool {
    who.ordered_after(r) && (!r.write || write) && (!atomic || r.atomic)
}

fn same_kind(r: &Rec, who: &Accessor, write: bool, atomic: bool) -> bool {
    r.task == who.task && r.epoch == who.epoch && r.write == write && r.atomic == atomic
}

/// Checks an access against a word's history and records it; returns the
/// conflicting earlier access if there is a race.
pub(crate) fn record(
    history: &mut History,
    who: &Accessor,
    write: bool,
    atomic: bool,
) -> Result<(), Rec> {
    let new = Rec {
        task: who.task,
        epoch: who.epoch,
        thread: who.thread as u16,
        other: 0,
        write,
        atomic,
    };
    match history {
        History::Empty => *history = History::One(new),
        History::One(r) => {
            if conflicts(r, who, write, atomic) {
                return Err(*r);
            }
            if subsumed(r, who, write, atomic) {
                *r = new;
            } else if same_kind(r, who, write, atomic) {
                r.add_thread(who.thread);
            } else {
                *history = History::Many(Box::new(vec![*r, new]));
            }
        }
        History::Many(list) => {
            if let Some(r) = list.iter().find(|r| conflicts(r, who, write, atomic)) {
                return Err(*r);
            }
            list.retain(|r| !subsumed(r, who, write, atomic));
            match list.iter_mut().find(|r| same_kind(r, who, write, atomic)) {
                Some(r) => r.add_thread(who.thread),
                None => list.push(new),
            }
        }
    }
    Ok(())
}

/// Detection state of one call's device buffers.
#[derive(Default)]
pub(crate) struct Detector {
    /// Per buffer: which words were ever written (or initialised).
    pub init: Vec<Vec<bool>>,
    /// Per buffer: access history per word (allocated on first use).
    pub shadow: Vec<Vec<History>>,
    /// Released units per semaphore element (buffer, element).
    pub sem_credits: HashMap<(usize, u64), SemCredits>,
}

/// The units of one semaphore element in arrival order, each signal's with
/// the clock it released.
#[derive(Debug, Default)]
pub(crate) struct SemCredits {
    /// Units counted when the call first touched the element: made by
    /// earlier calls, ordered by call order, so they carry no clock.
    before_call: u64,
    /// Units signalled in this call, oldest first: (units left, clock).
    signals: VecDeque<(u64, Clock)>,
}

impl SemCredits {
    /// The credits of an element whose counter reads `count` before this
    /// call's first operation on it.
    pub fn starting_at(count: i32) -> Self {
        SemCredits {
            before_call: count.max(0) as u64,
            signals: VecDeque::new(),
        }
    }

    pub fn signal(&mut self, units: u64, clock: Clock) {
        self.signals.push_back((units, clock));
    }

    /// Joins the clocks of the first `units` units into `into`; `consume`
    /// also takes them (a `wait`), otherwise they stay (`wait_nodec`).
    pub fn take(&mut self, mut units: u64, consume: bool, into: &mut Clock) {
        let old = units.min(self.before_call);
        units -= old;
        if consume {
            self.before_call -= old;
        }
        let mut used = 0;
        for (left, clock) in self.signals.iter_mut() {
            if units == 0 {
                break;
            }
            into.join(clock);
            let k = units.min(*left);
            units -= k;
            if consume {
                *left -= k;
                if *left == 0 {
                    used += 1;
                }
            }
        }
        self.signals.drain(..used);
    }
}

#[cfg(test)]
mod tests {
    use super::{record, Accessor, Clock, History};

    fn write_by(history: &mut History, task: u32, clock: &Clock) -> Result<(), u32> {
        let who = Accessor {
            task,
            epoch: 0,
            thread: 0,
            clock,
        };
        record(history, &who, true, false).map_err(|first| first.task)
    }

    /// A forgotten list keeps its allocation but none of its accesses: a
    /// write that would race with them is no race, and a race with a write
    /// made after forgetting is still found.
    #[test]
    fn a_forgotten_history_remembers_nothing() {
        let clock = Clock::default();
        let mut history = History::default();
        let reader = Accessor {
            task: 1,
            epoch: 0,
            thread: 0,
            clock: &clock,
        };
        record(&mut history, &reader, false, false).unwrap();
        let atomic = Accessor { task: 2, ..reader };
        record(&mut history, &atomic, false, true).unwrap();
        assert!(matches!(&history, History::Many(list) if list.len() == 2));
        assert_eq!(write_by(&mut history, 3, &clock), Err(1));

        history.forget();
        assert!(matches!(&history, History::Many(list) if list.is_empty()));
        assert_eq!(write_by(&mut history, 3, &clock), Ok(()));
        assert_eq!(write_by(&mut history, 4, &clock), Err(3));
    }

    /// Detection keeps one history per word touched: its size is memory
    /// per element of every buffer a checked call uses.
    #[test]
    fn a_history_is_16_bytes() {
        assert_eq!(std::mem::size_of::<History>(), 16);
    }
}
