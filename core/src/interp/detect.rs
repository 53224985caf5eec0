//! Race and uninitialised-read detection.
//!
//! Scheme (sound for the happens-before of docs/design.md, "Semantics"):
//! - every block is a *task* with an epoch counter that advances at each
//!   barrier (semaphore operations include one);
//! - each task carries a sparse vector clock: for other tasks, the last epoch
//!   whose accesses are ordered before the task's current point. A signal
//!   of `n` releases `n` units carrying the signaller's clock (its own entry =
//!   the epoch before the signal's barrier) into the semaphore element's
//!   queue of credits ([`SemCredits`]); a completed wait takes its `n` units
//!   from the front of the queue and joins their clocks (a `wait_nodec`
//!   joins the first `n` units' clocks and leaves them). A wait is ordered
//!   after a signal only when every schedule has it consume that signal:
//!   when another signal on the element, unordered with one the wait took
//!   and not ordered after the wait, could have taken its place
//!   ([`Detector::find_contests`]), the schedule runs again with the wait
//!   joining, instead of the contested clocks, only what every candidate
//!   signal is ordered after (their meet, [`Contest`]). So a wait for 3 of
//!   4 signals, or for 1 of 2 blocks' signals, is ordered after none of the
//!   contested signals, in every schedule and on every seed.
//!   Units counted before the call started carry no clock (call order
//!   already orders them);
//! - every memory word keeps the accesses since its last ordered plain write
//!   (task, epoch, thread, write?, atomic?). Two accesses conflict when one
//!   writes and not both are atomic; they are ordered when they come from the
//!   same task and either an epoch boundary separates them or the same thread
//!   made both, or, across tasks, when the later task's clock covers the
//!   earlier epoch. Each call starts with empty shadows (call order).

use std::collections::{HashMap, HashSet, VecDeque};

use super::limits::Limits;
use crate::backend::RunError;

mod shadow;

pub(crate) use shadow::*;

/// One recorded access to a memory word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// Which access of its program's code made it (`CompiledAccess::site`),
    /// for the statement a race report shows.
    pub site: u16,
}

impl Rec {
    /// The record an access of `who` starts.
    fn new(who: &Accessor, write: bool, atomic: bool) -> Rec {
        Rec {
            task: who.task,
            epoch: who.epoch,
            thread: who.thread as u16,
            other: 0,
            write,
            atomic,
            site: who.site,
        }
    }

    /// This record of a [`Chunk::Uniform`] as word `j` of the chunk holds
    /// it: made by the thread `j` places after, and naming the other thread
    /// `j` places after (when it names one).
    fn at(self, j: usize) -> Rec {
        let j = j as u16;
        Rec {
            thread: self.thread.wrapping_add(j),
            other: match self.other {
                0 => 0,
                o => o.wrapping_add(j),
            },
            ..self
        }
    }

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

/// Hashes a task id with one multiplication (Fx's): a clock is looked up
/// on every checked access of memory another block touched, and SipHash,
/// the default, cost more than the rest of the check. Task ids are the
/// interpreter's own, so no input can aim collisions at it; nothing
/// depends on a clock's iteration order (joins take maxima, meets minima).
#[derive(Clone, Copy, Default)]
pub(crate) struct TaskHasher(u64);

impl std::hash::Hasher for TaskHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

/// A sparse vector clock: task -> last epoch ordered before the holder.
#[derive(Clone, Debug, Default)]
pub(crate) struct Clock {
    entries: HashMap<u32, u32, std::hash::BuildHasherDefault<TaskHasher>>,
}

impl Clock {
    pub fn covers(&self, task: u32, epoch: u32) -> bool {
        // Most blocks' clocks are empty (no semaphore reached them): skip
        // the lookup.
        !self.entries.is_empty() && self.entries.get(&task).is_some_and(|&e| e >= epoch)
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

    /// What both clocks cover: each task's smaller epoch, for tasks in both.
    pub fn meet(&self, other: &Clock) -> Clock {
        Clock {
            entries: self
                .entries
                .iter()
                .filter_map(|(&t, &e)| other.entries.get(&t).map(|&o| (t, e.min(o))))
                .collect(),
        }
    }
}

/// Where the current access comes from.
#[derive(Clone, Copy)]
pub(crate) struct Accessor<'a> {
    pub task: u32,
    pub epoch: u32,
    pub thread: u32,
    pub clock: &'a Clock,
    /// The access's `CompiledAccess::site`.
    pub site: u16,
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
/// 16 bytes (a list of two lives in [`Pairs`], a longer one is boxed, and
/// the enum's tag hides in a `bool` of `Rec`): every word of every buffer a
/// detecting call touches has one.
#[derive(Clone, Debug, Default)]
pub(crate) enum History {
    #[default]
    Empty,
    One(Rec),
    /// Two accesses, in the [`Pairs`] slot of this index: the common case
    /// of a word written and then read by another thread or block, which
    /// would otherwise allocate a list per word.
    Two(u32),
    // Boxed on purpose: a bare Vec would make every history 24 bytes.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<Rec>>),
}

/// The two-access lists of a set of histories (a call's device buffers, or
/// a block's smem), one slot each, reused through a free list: a history
/// that leaves [`History::Two`] gives its slot back.
#[derive(Debug, Default)]
pub(crate) struct Pairs {
    slots: Vec<[Rec; 2]>,
    free: Vec<u32>,
}

impl Pairs {
    /// A history of these two accesses: a slot of its own, or a boxed list
    /// when slot indices would not fit in 32 bits.
    fn hold(&mut self, pair: [Rec; 2]) -> History {
        if let Some(i) = self.free.pop() {
            self.slots[i as usize] = pair;
            return History::Two(i);
        }
        match u32::try_from(self.slots.len()) {
            Ok(i) => {
                self.slots.push(pair);
                History::Two(i)
            }
            Err(_) => History::Many(Box::new(pair.to_vec())),
        }
    }

    fn release(&mut self, i: u32) {
        self.free.push(i);
    }
}

impl History {
    /// The accesses, oldest first.
    fn accesses<'a>(&'a self, pairs: &'a Pairs) -> &'a [Rec] {
        match self {
            History::Empty => &[],
            History::One(r) => std::slice::from_ref(r),
            History::Two(i) => pairs.slots.get(*i as usize).map_or(&[], |pair| pair),
            History::Many(list) => list,
        }
    }
}

impl History {
    /// Whether every access of `task` here is of an epoch before `epoch`.
    fn only_before(&self, pairs: &Pairs, task: u32, epoch: u32) -> bool {
        self.accesses(pairs)
            .iter()
            .all(|r| r.task != task || r.epoch < epoch)
    }

    /// The newest access.
    fn last_mut<'a>(&'a mut self, pairs: &'a mut Pairs) -> Option<&'a mut Rec> {
        match self {
            History::Empty => None,
            History::One(r) => Some(r),
            History::Two(i) => pairs.slots.get_mut(*i as usize).map(|pair| &mut pair[1]),
            History::Many(list) => list.last_mut(),
        }
    }

    /// Whether another plain read of this word by a thread of `task` in
    /// `epoch` would find no race and change nothing: the task's only access
    /// in the epoch is a plain read that two threads made (`other` set). Its
    /// conflicts with other tasks' accesses do not depend on the thread, the
    /// task's earlier epochs are ordered before it, and such a read neither
    /// subsumes that access (only the one thread that made it alone would)
    /// nor adds a thread to it (it names one other already); any other
    /// access of the task in the epoch could depend on the thread.
    #[inline]
    pub fn read_settled(&self, pairs: &Pairs, task: u32, epoch: u32) -> bool {
        match self {
            History::Empty => false,
            History::One(r) => list_settled([r], task, epoch),
            History::Two(i) => pairs
                .slots
                .get(*i as usize)
                .is_some_and(|pair| list_settled(pair, task, epoch)),
            History::Many(list) => list_settled(list.iter(), task, epoch),
        }
    }
}

/// [`History::read_settled`] of a list of accesses: `task`'s accesses in
/// `epoch` are all plain reads two threads made, and there is one.
#[inline]
fn list_settled<'a>(list: impl IntoIterator<Item = &'a Rec>, task: u32, epoch: u32) -> bool {
    let mut found = false;
    for r in list {
        if r.task == task && r.epoch == epoch {
            if r.write || r.atomic || r.other == 0 {
                return false;
            }
            found = true;
        }
    }
    found
}

/// Whether an earlier access races with this one; `ordered`: whether this
/// one is ordered after it (`Accessor::ordered_after`, read once per access
/// for both rules).
fn conflicts(r: &Rec, ordered: bool, write: bool, atomic: bool) -> bool {
    !ordered && (r.write || write) && !(r.atomic && atomic)
}

/// An earlier access that is ordered before this one and no stronger can be
/// forgotten: any later access racing with it races with this one too.
fn subsumed(r: &Rec, ordered: bool, write: bool, atomic: bool) -> bool {
    ordered && (!r.write || write) && (!atomic || r.atomic)
}

/// One record serves the threads of a task that make one access (same
/// statement, same kind) in one epoch; a race report names one of them and
/// that statement.
fn same_kind(r: &Rec, who: &Accessor, write: bool, atomic: bool) -> bool {
    r.task == who.task
        && r.epoch == who.epoch
        && r.write == write
        && r.atomic == atomic
        && r.site == who.site
}

/// Checks an access against the accesses of a list and drops those it
/// subsumes, in one pass that reads each access's order once (an access is
/// either unordered with this one, and may conflict, or ordered before it,
/// and may be subsumed): the first conflicting access in list order is the
/// one reported (the list is left partly compacted then: a race ends the
/// call); otherwise the subsumed accesses are dropped (keeping the others'
/// order, at the front) and the same kind's is found among the rest.
/// Returns how many stay and the same kind's index among them.
#[inline(always)]
fn update(
    list: &mut [Rec],
    who: &Accessor,
    write: bool,
    atomic: bool,
) -> Result<(usize, Option<usize>), Rec> {
    let mut kept = 0;
    let mut same = None;
    for i in 0..list.len() {
        let r = list[i];
        let ordered = who.ordered_after(&r);
        if conflicts(&r, ordered, write, atomic) {
            return Err(r);
        }
        if subsumed(&r, ordered, write, atomic) {
            continue;
        }
        if same.is_none() && same_kind(&r, who, write, atomic) {
            same = Some(kept);
        }
        list[kept] = r;
        kept += 1;
    }
    Ok((kept, same))
}

/// Checks an access against a word's history (its pair, if it has one, in
/// `pairs`) and records it; returns the conflicting earlier access if there
/// is a race.
pub(crate) fn record(
    history: &mut History,
    pairs: &mut Pairs,
    who: &Accessor,
    write: bool,
    atomic: bool,
) -> Result<(), Rec> {
    let new = Rec::new(who, write, atomic);
    match history {
        History::Empty => *history = History::One(new),
        History::One(r) => {
            let ordered = who.ordered_after(r);
            if conflicts(r, ordered, write, atomic) {
                return Err(*r);
            }
            if subsumed(r, ordered, write, atomic) {
                *r = new;
            } else if same_kind(r, who, write, atomic) {
                r.add_thread(who.thread);
            } else {
                *history = pairs.hold([*r, new]);
            }
        }
        History::Two(slot) => {
            let slot = *slot;
            debug_assert!(
                (slot as usize) < pairs.slots.len(),
                "a pair outlived its slot"
            );
            let Some(&[a, b]) = pairs.slots.get(slot as usize) else {
                // Every `Two` names a slot of its own `Pairs`.
                *history = History::One(new);
                return Ok(());
            };
            let mut list = [a, b, new];
            let (mut kept, same) = update(&mut list[..2], who, write, atomic)?;
            match same {
                Some(i) => list[i].add_thread(who.thread),
                None => {
                    list[kept] = new;
                    kept += 1;
                }
            }
            if kept == 2 {
                pairs.slots[slot as usize] = [list[0], list[1]];
            } else {
                pairs.release(slot);
                *history = if kept == 3 {
                    History::Many(Box::new(list.to_vec()))
                } else {
                    History::One(list[0])
                };
            }
        }
        History::Many(list) => {
            let (kept, same) = update(list, who, write, atomic)?;
            list.truncate(kept);
            match same {
                Some(i) => list[i].add_thread(who.thread),
                None => list.push(new),
            }
        }
    }
    Ok(())
}

/// A signal of one call: its task and the epoch it released (unique per
/// task, since every signal ends an epoch). The same in a rerun of the
/// same schedule.
pub(crate) type SignalKey = (u32, u32);

/// A wait of one call: its task and the epoch it began in.
pub(crate) type WaitKey = (u32, u32);

/// Alternatives of a contested wait whose clocks its meet takes
/// ([`Detector::find_contests`]).
const MEET_ALTERNATIVES: usize = 64;

/// A semaphore element (buffer, element).
pub(crate) type SemElement = (usize, u64);

/// How a contested wait is ordered in a rerun: it skips the clocks of the
/// signals in `skip` (those another signal could have replaced) and joins
/// `meet`, what every candidate signal is ordered after.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Contest {
    pub skip: Vec<SignalKey>,
    pub meet: Clock,
}

impl PartialEq for Clock {
    fn eq(&self, other: &Clock) -> bool {
        self.entries == other.entries
    }
}

/// Detection state of one call's device buffers.
#[derive(Default)]
pub(crate) struct Detector {
    /// Per buffer: which words were ever written (or initialised).
    pub init: Vec<Vec<bool>>,
    /// Per buffer: access history per word (allocated on first use).
    pub shadow: Vec<Shadow>,
    /// Per buffer: whether an access of the call may write it (a store or
    /// an atomic of any of its programs; a buffer missing here may). Every
    /// race has a write, so a buffer nothing writes needs no history: its
    /// reads are checked for initialisation only.
    pub may_write: Vec<bool>,
    /// Released units per semaphore element (buffer, element).
    pub sem_credits: HashMap<SemElement, SemCredits>,
    /// Waits an earlier run of this schedule found contested.
    pub contests: HashMap<(SemElement, WaitKey), Contest>,
}

impl Detector {
    /// The waits of this run that consumed (or, `wait_nodec`, joined) a
    /// signal another signal could have replaced in another schedule: one
    /// on the same element, unordered with it, not ordered after the wait,
    /// that the wait did not take. Such a wait is ordered after neither
    /// (only after what both are ordered after): the memory model orders a
    /// wait after the signals it consumes in every schedule.
    pub fn find_contests(&self) -> Vec<((SemElement, WaitKey), Contest)> {
        let covers = |clock: &Clock, (task, epoch): SignalKey| clock.covers(task, epoch);
        let mut found = Vec::new();
        for (&element, credits) in &self.sem_credits {
            let clocks: HashMap<SignalKey, &Clock> =
                credits.seen.iter().map(|(k, c)| (*k, c)).collect();
            let clock_of = |key: &SignalKey| clocks.get(key).copied();
            let concurrent = |a: &SignalKey, b: &SignalKey| match (clock_of(a), clock_of(b)) {
                (Some(ca), Some(cb)) => !covers(cb, *a) && !covers(ca, *b),
                _ => false,
            };
            for wait in &credits.waits {
                let (task, _) = wait.key;
                let joined: HashSet<&SignalKey> = wait.joined.iter().collect();
                // Other signals that could have taken the place of one the
                // wait took. What unordered signals are all ordered after
                // shrinks to their common past within a few of them, so
                // the scan stops once every replaceable signal the wait
                // took has an alternative and the meet has
                // `MEET_ALTERNATIVES` of them (linear in the waits).
                let mut alternatives: Vec<SignalKey> = Vec::new();
                let mut skip: Vec<SignalKey> = Vec::new();
                for (key, clock) in &credits.seen {
                    if alternatives.len() >= MEET_ALTERNATIVES && skip.len() == wait.joined.len() {
                        break;
                    }
                    if joined.contains(key) || clock.covers(task, wait.after) {
                        continue;
                    }
                    let mut replaces_one = false;
                    for j in &wait.joined {
                        if concurrent(j, key) {
                            replaces_one = true;
                            if !skip.contains(j) {
                                skip.push(*j);
                            }
                        }
                    }
                    if replaces_one && alternatives.len() < MEET_ALTERNATIVES {
                        alternatives.push(*key);
                    }
                }
                if alternatives.is_empty() {
                    continue;
                }
                let meet = skip
                    .iter()
                    .chain(&alternatives)
                    .filter_map(clock_of)
                    .fold(None, |acc: Option<Clock>, c| {
                        Some(acc.map_or_else(|| c.clone(), |m| m.meet(c)))
                    })
                    .unwrap_or_default();
                found.push(((element, wait.key), Contest { skip, meet }));
            }
        }
        found
    }

    /// Adds `found` to the contests a rerun uses; whether anything changed
    /// (a new contested wait, or another signal to skip).
    pub fn learn(
        contests: &mut HashMap<(SemElement, WaitKey), Contest>,
        found: Vec<((SemElement, WaitKey), Contest)>,
    ) -> bool {
        let mut changed = false;
        for (key, contest) in found {
            match contests.get_mut(&key) {
                None => {
                    contests.insert(key, contest);
                    changed = true;
                }
                Some(known) => {
                    for s in contest.skip {
                        if !known.skip.contains(&s) {
                            known.skip.push(s);
                            changed = true;
                        }
                    }
                    let meet = known.meet.meet(&contest.meet);
                    if meet != known.meet {
                        known.meet = meet;
                        changed = true;
                    }
                }
            }
        }
        changed
    }
}

/// A completed wait on an element, for [`Detector::find_contests`].
#[derive(Debug)]
struct WaitRecord {
    key: WaitKey,
    /// The waiter's epoch after the wait: a signal whose clock covers it is
    /// ordered after the wait.
    after: u32,
    /// The signals whose units it took (or joined, `wait_nodec`).
    joined: Vec<SignalKey>,
}

/// The units of one semaphore element in arrival order, each signal's with
/// the clock it released.
#[derive(Debug, Default)]
pub(crate) struct SemCredits {
    /// Units counted when the call first touched the element: made by
    /// earlier calls, ordered by call order, so they carry no clock.
    before_call: u64,
    /// Units signalled in this call, oldest first: (units left, clock, signal).
    signals: VecDeque<(u64, Clock, SignalKey)>,
    /// Every signal of this call on the element, with the clock it released.
    seen: Vec<(SignalKey, Clock)>,
    /// Every completed wait on the element.
    waits: Vec<WaitRecord>,
}

impl SemCredits {
    /// The credits of an element whose counter reads `count` before this
    /// call's first operation on it.
    pub fn starting_at(count: i32) -> Self {
        SemCredits {
            before_call: count.max(0) as u64,
            ..Self::default()
        }
    }

    pub fn signal(&mut self, units: u64, clock: Clock, key: SignalKey) {
        self.seen.push((key, clock.clone()));
        self.signals.push_back((units, clock, key));
    }

    /// Joins the clocks of the first `units` units into `into`; `consume`
    /// also takes them (a `wait`), otherwise they stay (`wait_nodec`).
    /// `wait` is the waiter and `after` its epoch after the wait; a
    /// `contest` found by an earlier run of this schedule replaces the
    /// contested signals' clocks by their meet.
    pub fn take(
        &mut self,
        mut units: u64,
        consume: bool,
        into: &mut Clock,
        (wait, after): (WaitKey, u32),
        contest: Option<&Contest>,
    ) {
        let old = units.min(self.before_call);
        units -= old;
        if consume {
            self.before_call -= old;
        }
        let mut used = 0;
        let mut joined = Vec::new();
        for (left, clock, key) in self.signals.iter_mut() {
            if units == 0 {
                break;
            }
            joined.push(*key);
            if !contest.is_some_and(|c| c.skip.contains(key)) {
                into.join(clock);
            }
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
        if let Some(contest) = contest {
            into.join(&contest.meet);
        }
        self.waits.push(WaitRecord {
            key: wait,
            after,
            joined,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{record, Accessor, Chunk, Clock, History, Pairs, Rec, RunStop, Shadow, CHUNK};
    use crate::backend::RunError;
    use crate::interp::limits::{Limits, MemoryBudget};

    fn tasks(history: &History, pairs: &Pairs) -> Vec<u32> {
        history.accesses(pairs).iter().map(|r| r.task).collect()
    }

    fn limits() -> Limits {
        Limits::new(None, None, MemoryBudget::new(u64::MAX))
    }

    /// The accesses of every word of a shadow, as [`record`] would keep them.
    fn words_of(shadow: &Shadow) -> Vec<Vec<Rec>> {
        (0..shadow.len)
            .map(|w| match shadow.chunks[w / CHUNK] {
                Chunk::Uniform(recs) => recs.iter().flatten().map(|r| r.at(w % CHUNK)).collect(),
                Chunk::Broadcast { first, read } => {
                    let mut list = vec![first.at(w % CHUNK)];
                    list.extend(read.reaches(w % CHUNK).then(|| read.rec()));
                    list
                }
                Chunk::Detailed(slot) => shadow.detail[slot as usize * CHUNK + w % CHUNK]
                    .accesses(&shadow.pairs)
                    .to_vec(),
            })
            .collect()
    }

    fn same(a: &[Rec], b: &[Rec]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_rec(x, y))
    }

    fn same_rec(x: &Rec, y: &Rec) -> bool {
        (
            x.task, x.epoch, x.thread, x.other, x.write, x.atomic, x.site,
        ) == (
            y.task, y.epoch, y.thread, y.other, y.write, y.atomic, y.site,
        )
    }

    /// Forgotten histories keep no access: a write that would race with
    /// them is no race, and a race with a write made after forgetting is
    /// still found, in uniform chunks and detailed ones alike.
    #[test]
    fn a_forgotten_shadow_remembers_nothing() {
        let clock = Clock::default();
        let limits = limits();
        let mut shadow = Shadow::default();
        shadow.ensure(40, &limits).unwrap();
        let reader = Accessor {
            task: 1,
            epoch: 0,
            thread: 0,
            clock: &clock,
            site: 0,
        };
        // Words 0..16: one uniform chunk; word 20 and 21 word by word (a
        // pair, then a list of three).
        shadow
            .record_run(0, 16, &reader, false, false, &limits)
            .ok()
            .unwrap();
        for (word, accessors) in [(20, 2), (21, 3)] {
            for task in 1..=accessors {
                let who = Accessor { task, ..reader };
                shadow
                    .record_run(word, 1, &who, false, task == 2, &limits)
                    .ok()
                    .unwrap();
            }
        }
        assert!(matches!(shadow.chunks[0], Chunk::Uniform([Some(_), None])));
        assert!(matches!(shadow.chunks[1], Chunk::Detailed(_)));
        for word in [0, 15, 20, 21] {
            let writer = Accessor { task: 3, ..reader };
            let err = shadow.record_run(word, 1, &writer, true, false, &limits);
            assert!(matches!(err, Err(RunStop::Race { offset: 0, first }) if first.task == 1));
        }
        shadow.forget_all();
        assert!(words_of(&shadow).iter().all(Vec::is_empty));
        for word in [0, 15, 20, 21] {
            let first = Accessor { task: 3, ..reader };
            shadow
                .record_run(word, 1, &first, true, false, &limits)
                .ok()
                .unwrap();
            let second = Accessor { task: 4, ..reader };
            let err = shadow.record_run(word, 1, &second, true, false, &limits);
            assert!(matches!(err, Err(RunStop::Race { offset: 0, first }) if first.task == 3));
        }
    }

    /// A run over whole chunks keeps one list per chunk and still reports
    /// a race on any one word inside it, the first and the last included,
    /// with the thread of that word: the word-by-word access it races with.
    #[test]
    fn a_run_reports_a_race_on_each_of_its_words() {
        let none = Clock::default();
        let limits = limits();
        let producer = Accessor {
            task: 1,
            epoch: 0,
            thread: 0,
            clock: &none,
            site: 3,
        };
        for (word, expect_thread) in [(0usize, 0u16), (1, 1), (31, 31), (32, 32), (63, 63)] {
            let mut shadow = Shadow::default();
            shadow.ensure(64, &limits).unwrap();
            shadow
                .record_run(0, 64, &producer, true, false, &limits)
                .ok()
                .unwrap();
            assert!(shadow
                .chunks
                .iter()
                .all(|c| matches!(c, Chunk::Uniform([Some(_), None]))));
            assert_eq!(shadow.detail.len(), 0);
            // Another block reads one word, unordered: a race naming the
            // thread that wrote that word.
            let reader = Accessor {
                task: 2,
                thread: 5,
                site: 4,
                ..producer
            };
            match shadow.record_run(word, 1, &reader, false, false, &limits) {
                Err(RunStop::Race { offset: 0, first }) => {
                    assert_eq!(
                        (first.task, first.thread, first.site, first.write),
                        (1, expect_thread, 3, true)
                    );
                }
                _ => panic!("no race on word {word}"),
            }
            // A run over all words races at its first word; one that starts
            // inside a chunk at the word it starts with.
            let err = shadow.record_run(0, 64, &reader, false, false, &limits);
            assert!(matches!(err, Err(RunStop::Race { offset: 0, first }) if first.thread == 0));
            let err = shadow.record_run(37, 20, &reader, false, false, &limits);
            assert!(matches!(err, Err(RunStop::Race { offset: 0, first }) if first.thread == 37));
        }
        // Ordered after the writes (the reader's clock covers them), the
        // same read is no race and leaves [write, read] in one list a chunk.
        let mut after = Clock::default();
        after.raise(1, 0);
        let mut shadow = Shadow::default();
        shadow.ensure(64, &limits).unwrap();
        shadow
            .record_run(0, 64, &producer, true, false, &limits)
            .ok()
            .unwrap();
        let reader = Accessor {
            task: 2,
            thread: 0,
            clock: &after,
            ..producer
        };
        shadow
            .record_run(0, 64, &reader, false, false, &limits)
            .ok()
            .unwrap();
        assert!(shadow
            .chunks
            .iter()
            .all(|c| matches!(c, Chunk::Uniform([Some(_), Some(_)]))));
        let words = words_of(&shadow);
        assert!(words
            .iter()
            .enumerate()
            .all(|(w, list)| list.len() == 2 && list.iter().all(|r| usize::from(r.thread) == w)));
    }

    /// A plain write ordered after every access of a detailed chunk's
    /// words gives them one list again; an unordered one does not.
    #[test]
    fn an_ordered_overwrite_makes_a_chunk_uniform_again() {
        let none = Clock::default();
        let limits = limits();
        let mut shadow = Shadow::default();
        shadow.ensure(16, &limits).unwrap();
        let who = Accessor {
            task: 1,
            epoch: 0,
            thread: 0,
            clock: &none,
            site: 0,
        };
        shadow
            .record_run(0, 16, &who, true, false, &limits)
            .ok()
            .unwrap();
        // Broadcast reads: word 3 read by threads 7 and 8.
        for thread in [7, 8] {
            let r = Accessor {
                epoch: 1,
                thread,
                ..who
            };
            shadow
                .record_run(3, 1, &r, false, false, &limits)
                .ok()
                .unwrap();
        }
        assert!(matches!(shadow.chunks[0], Chunk::Detailed(0)));
        assert!(shadow.read_settled(3, 1, 1));
        let rewrite = Accessor { epoch: 2, ..who };
        shadow
            .record_run(0, 16, &rewrite, true, false, &limits)
            .ok()
            .unwrap();
        assert!(matches!(shadow.chunks[0], Chunk::Uniform([Some(r), None]) if r.epoch == 2));
        assert_eq!(shadow.free, [0]);
        assert!(shadow.pairs.free.len() == shadow.pairs.slots.len());
    }

    /// A tile row read one column an instruction, each word by the same
    /// two threads (`tile[ty, k]`), keeps one chunk without a history per
    /// word; the read is found at each word it reached, a race with it too,
    /// and the next epoch's ordered write makes the chunk uniform again.
    #[test]
    fn broadcast_reads_keep_a_chunk_whole() {
        let none = Clock::default();
        let limits = limits();
        let mut shadow = Shadow::default();
        shadow.ensure(32, &limits).unwrap();
        let writer = Accessor {
            task: 1,
            epoch: 0,
            thread: 16,
            clock: &none,
            site: 0,
        };
        shadow
            .record_run(16, 16, &writer, true, false, &limits)
            .ok()
            .unwrap();
        let reader = Accessor {
            epoch: 1,
            thread: 32,
            site: 1,
            ..writer
        };
        for k in 0..16 {
            assert!(matches!(
                shadow.record_reads(16 + k, 16, &reader, &limits),
                Ok(true)
            ));
        }
        assert!(matches!(
            shadow.chunks[1],
            Chunk::Broadcast { read, .. } if read.mask == u16::MAX
        ));
        assert_eq!(shadow.detail.len(), 0);
        let lists = words_of(&shadow);
        for (j, list) in lists[16..].iter().enumerate() {
            let threads: Vec<_> = list.iter().map(|r| (r.thread, r.other, r.write)).collect();
            assert_eq!(threads, [(16 + j as u16, 0, true), (32, 34, false)]);
        }
        assert!(shadow.run_settled(16, 16, 1, 1));
        // Another block's unordered write of the last word races with the
        // write, the oldest access.
        let racer = Accessor {
            task: 2,
            thread: 0,
            ..writer
        };
        let err = shadow.record_run(31, 1, &racer, true, false, &limits);
        assert!(
            matches!(err, Err(RunStop::Race { offset: 0, first }) if first.write && first.thread == 31)
        );
        // The next epoch's write of the row subsumes both.
        let mut fresh = Shadow::default();
        fresh.ensure(16, &limits).unwrap();
        let row = Accessor {
            thread: 0,
            ..writer
        };
        fresh
            .record_run(0, 16, &row, true, false, &limits)
            .ok()
            .unwrap();
        let read = Accessor {
            epoch: 1,
            thread: 0,
            ..writer
        };
        assert!(matches!(
            fresh.record_reads(5, 16, &read, &limits),
            Ok(true)
        ));
        assert!(matches!(fresh.chunks[0], Chunk::Broadcast { read, .. } if read.mask == 1 << 5));
        let rewrite = Accessor { epoch: 2, ..row };
        fresh
            .record_run(0, 16, &rewrite, true, false, &limits)
            .ok()
            .unwrap();
        assert!(matches!(fresh.chunks[0], Chunk::Uniform([Some(r), None]) if r.epoch == 2));
        // Other threads' reads of another word do not join the chunk's read.
        let read = Accessor {
            epoch: 3,
            thread: 0,
            ..writer
        };
        fresh.record_reads(1, 2, &read, &limits).ok().unwrap();
        let other = Accessor { thread: 4, ..read };
        fresh.record_reads(2, 2, &other, &limits).ok().unwrap();
        assert!(matches!(fresh.chunks[0], Chunk::Detailed(_)));
    }

    /// A shadow is paid 16 bytes a word up front; the chunks and
    /// per-word histories it grows past that are charged, and refused past
    /// the budget's limit (with the numbers), never allocated unpaid.
    #[test]
    fn a_shadow_charges_what_passes_its_words_allowance() {
        let none = Clock::default();
        let who = Accessor {
            task: 1,
            epoch: 0,
            thread: 0,
            clock: &none,
            site: 0,
        };
        // 16 words: 256 bytes paid; one chunk (36) and, once a word is
        // accessed alone, 16 histories (256): 36 bytes more.
        for (limit, refused) in [(35u64, true), (36, false)] {
            let budget = MemoryBudget::new(limit);
            let limits = Limits::new(None, None, budget.clone());
            let mut shadow = Shadow::default();
            shadow.ensure(16, &limits).unwrap();
            assert_eq!(budget.in_use(), 0);
            let got = shadow.record_run(3, 1, &who, true, false, &limits);
            match got {
                Err(RunStop::Limit(RunError::MemoryLimit { needed, .. })) if refused => {
                    assert_eq!(needed, 36);
                }
                Ok(()) if !refused => assert_eq!(budget.in_use(), 36),
                _ => panic!("limit {limit}"),
            }
            assert!(shadow.bytes() <= 256 + budget.in_use());
        }
    }

    /// Runs of any start, length, thread and kind leave exactly the
    /// histories, and stop at exactly the race, that [`record`] word by
    /// word does: the uniform lists are a compression, not another rule.
    #[test]
    fn runs_record_what_words_record() {
        let limits = limits();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut clocks: Vec<Clock> = Vec::new();
        for k in 0..8 {
            let mut c = Clock::default();
            for task in 0..4 {
                if (k >> task) & 1 == 1 {
                    c.raise(task, k % 3);
                }
            }
            clocks.push(c);
        }
        let (mut races, mut broadcasts) = (0, 0);
        for _ in 0..1500 {
            let len = 1 + next(70) as usize;
            let mut shadow = Shadow::default();
            shadow.ensure(len, &limits).unwrap();
            let mut pairs = Pairs::default();
            let mut words = vec![History::Empty; len];
            for _ in 0..30 {
                // Half the runs on whole chunks from thread 0, as tiles.
                let aligned = next(2) == 0;
                let start = match aligned {
                    true => (next(len as u64) as usize) / CHUNK * CHUNK,
                    false => next(len as u64) as usize,
                };
                let n = match aligned {
                    true => CHUNK * (1 + next(3) as usize),
                    false => 1 + next(40) as usize,
                };
                let who = Accessor {
                    task: next(4) as u32,
                    epoch: next(3) as u32,
                    thread: if aligned { 0 } else { next(40) as u32 },
                    clock: &clocks[next(8) as usize],
                    site: next(2) as u16,
                };
                let (write, atomic) = (next(3) == 0, next(4) == 0);
                // A broadcast: `n` lanes read one word; otherwise a run.
                let broadcast = next(4) == 0;
                let got = match broadcast {
                    true => shadow.record_reads(start, n, &who, &limits).map(|_| ()),
                    false => shadow.record_run(start, n, &who, write, atomic, &limits),
                };
                let mut want = Ok(());
                for j in 0..n {
                    if broadcast && j > 0 && words[start].read_settled(&pairs, who.task, who.epoch)
                    {
                        break;
                    }
                    let (w, kind) = match broadcast {
                        true => (start, (false, false)),
                        false if start + j < len => (start + j, (write, atomic)),
                        false => break,
                    };
                    let at = Accessor {
                        thread: who.thread + j as u32,
                        ..who
                    };
                    if let Err(first) = record(&mut words[w], &mut pairs, &at, kind.0, kind.1) {
                        want = Err((j, first));
                        break;
                    }
                }
                match (got, want) {
                    (Ok(()), Ok(())) => {}
                    (Err(RunStop::Race { offset, first }), Err((o, f))) => {
                        assert_eq!(offset, o);
                        assert!(same_rec(&first, &f));
                        races += 1;
                        break;
                    }
                    _ => panic!("a run and its words disagree on a race"),
                }
                for (task, epoch) in [(0, 0), (1, 1), (2, 2)] {
                    let (w, n) = (next(len as u64) as usize, 1 + next(40) as usize);
                    let each =
                        (w..w + n).all(|x| x < len && words[x].read_settled(&pairs, task, epoch));
                    assert_eq!(shadow.run_settled(w, n, task, epoch), each);
                }
                broadcasts += shadow
                    .chunks
                    .iter()
                    .filter(|c| matches!(c, Chunk::Broadcast { .. }))
                    .count();
                let lists = words_of(&shadow);
                for (w, h) in words.iter().enumerate() {
                    assert!(same(&lists[w], h.accesses(&pairs)), "word {w}");
                    for (task, epoch) in [(0, 0), (1, 1), (2, 2)] {
                        assert_eq!(
                            shadow.read_settled(w, task, epoch),
                            h.read_settled(&pairs, task, epoch)
                        );
                    }
                }
            }
        }
        assert!(races > 50 && broadcasts > 50, "{races} {broadcasts}");
    }

    /// A chunk of 16 words takes 36 bytes while uniform: the shadow of a
    /// buffer accessed in runs costs 2.25 bytes a word.
    #[test]
    fn a_chunk_is_36_bytes() {
        assert_eq!(std::mem::size_of::<Chunk>(), 36);
    }

    /// A pair behaves as the list it stands for: a write then another
    /// block's read, ordered after it, keeps both in order (the write is
    /// the one a later unordered write's report names), a third access
    /// makes a list, and a pair that shrinks to one access gives its slot
    /// to the next pair.
    #[test]
    fn a_pair_keeps_its_accesses_in_order() {
        let none = Clock::default();
        let mut after_1 = Clock::default();
        after_1.raise(1, 0);
        let mut pairs = Pairs::default();
        let mut history = History::default();
        let writer = Accessor {
            task: 1,
            epoch: 0,
            thread: 7,
            clock: &none,
            site: 0,
        };
        record(&mut history, &mut pairs, &writer, true, false).unwrap();
        let reader = Accessor {
            task: 2,
            clock: &after_1,
            site: 1,
            ..writer
        };
        record(&mut history, &mut pairs, &reader, false, false).unwrap();
        assert!(matches!(history, History::Two(0)));
        assert_eq!(tasks(&history, &pairs), [1, 2]);
        // Another thread of the reader's read joins its record.
        let again = Accessor {
            thread: 9,
            ..reader
        };
        record(&mut history, &mut pairs, &again, false, false).unwrap();
        let second: Rec = history.accesses(&pairs)[1];
        assert_eq!((second.thread, second.other), (7, 10));
        assert!(history.read_settled(&pairs, 2, 0));
        assert!(!history.read_settled(&pairs, 1, 0));

        let racer = Accessor { task: 3, ..writer };
        let first = record(&mut history, &mut pairs, &racer, true, false).unwrap_err();
        assert_eq!((first.task, first.write), (1, true));

        // The reader's next epoch writes: ordered after both, it subsumes them.
        let rewrite = Accessor { epoch: 1, ..reader };
        record(&mut history, &mut pairs, &rewrite, true, false).unwrap();
        assert!(matches!(history, History::One(r) if r.task == 2 && r.epoch == 1));
        let mut other = History::default();
        record(&mut other, &mut pairs, &writer, true, false).unwrap();
        record(&mut other, &mut pairs, &reader, false, false).unwrap();
        assert!(matches!(other, History::Two(0)));
        let third = Accessor {
            task: 4,
            clock: &after_1,
            ..writer
        };
        record(&mut other, &mut pairs, &third, false, false).unwrap();
        assert_eq!(tasks(&other, &pairs), [1, 2, 4]);
    }

    /// Detection keeps one history per word touched: its size is memory
    /// per element of every buffer a checked call uses.
    #[test]
    fn a_history_is_16_bytes() {
        assert_eq!(std::mem::size_of::<History>(), 16);
    }
}
