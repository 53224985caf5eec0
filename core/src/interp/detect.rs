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
    /// Which access of its program's code made it (`CompiledAccess::site`),
    /// for the statement a race report shows.
    pub site: u16,
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

    /// Forgets every history of `histories` (all that hold slots here),
    /// keeping the allocations: smem words are forgotten at every block's
    /// start, and a barrier-heavy block would otherwise allocate and free
    /// their lists again each time.
    pub fn forget_all<'a>(&mut self, histories: impl IntoIterator<Item = &'a mut History>) {
        histories.into_iter().for_each(History::forget);
        self.slots.clear();
        self.free.clear();
    }
}

impl History {
    /// Forgets every access, but a list keeps its allocation. A pair's
    /// slot is not given back: [`Pairs::forget_all`] clears them all.
    fn forget(&mut self) {
        match self {
            History::Many(list) => list.clear(),
            other => *other = History::Empty,
        }
    }

    /// The accesses, oldest first.
    #[cfg(test)]
    fn accesses<'a>(&'a self, pairs: &'a Pairs) -> &'a [Rec] {
        match self {
            History::Empty => &[],
            History::One(r) => std::slice::from_ref(r),
            History::Two(i) => &pairs.slots[*i as usize],
            History::Many(list) => list,
        }
    }
}

impl History {
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
        let settled = |r: &Rec| !r.write && !r.atomic && r.other != 0;
        let mine = |r: &&Rec| r.task == task && r.epoch == epoch;
        let list_settled = |list: &[Rec]| {
            let mut found = false;
            for r in list.iter().filter(mine) {
                if !settled(r) {
                    return false;
                }
                found = true;
            }
            found
        };
        match self {
            History::Empty => false,
            History::One(r) => mine(&r) && settled(r),
            History::Two(i) => pairs
                .slots
                .get(*i as usize)
                .is_some_and(|pair| list_settled(pair)),
            History::Many(list) => list_settled(list),
        }
    }
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
    let new = Rec {
        task: who.task,
        epoch: who.epoch,
        thread: who.thread as u16,
        other: 0,
        write,
        atomic,
        site: who.site,
    };
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
    pub shadow: Vec<Vec<History>>,
    /// Per buffer: whether an access of the call may write it (a store or
    /// an atomic of any of its programs; a buffer missing here may). Every
    /// race has a write, so a buffer nothing writes needs no history: its
    /// reads are checked for initialisation only.
    pub may_write: Vec<bool>,
    /// The two-access histories of every buffer's words.
    pub pairs: Pairs,
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
    use super::{record, Accessor, Clock, History, Pairs, Rec};

    fn write_by(
        history: &mut History,
        pairs: &mut Pairs,
        task: u32,
        clock: &Clock,
    ) -> Result<(), u32> {
        let who = Accessor {
            task,
            epoch: 0,
            thread: 0,
            clock,
            site: 0,
        };
        record(history, pairs, &who, true, false).map_err(|first| first.task)
    }

    fn tasks(history: &History, pairs: &Pairs) -> Vec<u32> {
        history.accesses(pairs).iter().map(|r| r.task).collect()
    }

    /// Forgotten histories keep no access: a write that would race with
    /// them is no race, and a race with a write made after forgetting is
    /// still found. A list keeps its allocation.
    #[test]
    fn a_forgotten_history_remembers_nothing() {
        let clock = Clock::default();
        let mut pairs = Pairs::default();
        let mut histories = vec![History::default(), History::default()];
        let reader = Accessor {
            task: 1,
            epoch: 0,
            thread: 0,
            clock: &clock,
            site: 0,
        };
        for (k, history) in histories.iter_mut().enumerate() {
            record(history, &mut pairs, &reader, false, false).unwrap();
            let atomic = Accessor { task: 2, ..reader };
            record(history, &mut pairs, &atomic, false, true).unwrap();
            if k == 1 {
                let third = Accessor { task: 5, ..reader };
                record(history, &mut pairs, &third, false, false).unwrap();
            }
        }
        assert!(matches!(&histories[0], History::Two(_)));
        assert!(matches!(&histories[1], History::Many(list) if list.len() == 3));
        for history in &mut histories {
            assert_eq!(write_by(history, &mut pairs, 3, &clock), Err(1));
        }

        pairs.forget_all(&mut histories);
        assert!(matches!(&histories[0], History::Empty));
        assert!(matches!(&histories[1], History::Many(list) if list.is_empty()));
        for history in &mut histories {
            assert_eq!(write_by(history, &mut pairs, 3, &clock), Ok(()));
            assert_eq!(write_by(history, &mut pairs, 4, &clock), Err(3));
        }
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
