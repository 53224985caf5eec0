//! Shadow memory: the access histories of a buffer's words, kept in chunks
//! of [`CHUNK`] words that share one list while runs of consecutive lanes
//! reach them whole ([`Shadow`]); [`super::record`] is the rule every form
//! applies.

use super::*;

/// Words per chunk of a [`Shadow`]: a row of a 16 x 16 tile, a sixteenth
/// of a block's run of 256 consecutive words.
pub(super) const CHUNK: usize = 16;

/// The histories of one chunk of a [`Shadow`]'s words (36 bytes).
#[derive(Clone, Copy, Debug)]
pub(super) enum Chunk {
    /// Word `j` of the chunk holds the accesses of this list (oldest first,
    /// `None`s last), each as [`Rec::at`] `j` gives it: what runs of
    /// consecutive lanes over the whole chunk leave (lane `l + j` accessing
    /// word `j`), so that one update serves all its words.
    Uniform([Option<Rec>; 2]),
    /// Word `j` holds `first.at(j)` and then, where bit `j` of
    /// `read.mask` is set, `read` as it is: what single words of a chunk one
    /// run wrote leave when the same two threads read each (a broadcast:
    /// a tile's row read a column an instruction, `tile[ty, k]`).
    Broadcast { first: Rec, read: BroadcastRead },
    /// Word `j`'s history is `detail[slot * CHUNK + j]`.
    Detailed(u32),
}

/// The plain read of a [`Chunk::Broadcast`], the same at each word it
/// reached (`mask`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct BroadcastRead {
    pub(super) task: u32,
    pub(super) epoch: u32,
    pub(super) thread: u16,
    pub(super) other: u16,
    pub(super) site: u16,
    pub(super) mask: u16,
}

impl BroadcastRead {
    pub(super) fn rec(&self) -> Rec {
        Rec {
            task: self.task,
            epoch: self.epoch,
            thread: self.thread,
            other: self.other,
            write: false,
            atomic: false,
            site: self.site,
        }
    }

    pub(super) fn reaches(&self, j: usize) -> bool {
        (self.mask >> j) & 1 == 1
    }
}

/// The accesses of a [`Chunk::Uniform`], oldest first, `None`s last.
pub(super) type UniformList = [Option<Rec>; 2];

/// A chunk no access has reached.
pub(super) const UNTOUCHED: Chunk = Chunk::Uniform([None, None]);

/// Bytes a word's history takes, charged up front for every word of a
/// detecting call's buffers and of a block's smem (with its written flag:
/// `DETECTION_BYTES_PER_ELEMENT`).
pub(super) const HISTORY_BYTES: u64 = std::mem::size_of::<History>() as u64;

/// Why [`Shadow::record_run`] stopped.
pub(crate) enum RunStop {
    /// The access of the run's word `offset` races with `first`.
    Race { offset: usize, first: Rec },
    /// The histories it needed passed the memory budget.
    Limit(RunError),
}

/// The access histories of one buffer's words (a call's device buffer, or
/// a block's smem), [`CHUNK`] words at a time: a chunk that runs of
/// consecutive lanes access whole ([`Shadow::record_run`]: a block's
/// elementwise accesses, a tile's rows) keeps one list for all its words,
/// 2.25 bytes a word, and pages no one touches are never faulted in; so
/// does one whose words the same two threads then read one at a time
/// ([`Shadow::record_reads`], [`Chunk::Broadcast`]); any other access gives
/// the chunk a [`History`] per word. The histories are those [`record`]
/// keeps word by word, whichever form holds them.
#[derive(Debug, Default)]
pub(crate) struct Shadow {
    /// Words covered; chunks exist once [`Shadow::ensure`] made them.
    pub(super) len: usize,
    pub(super) chunks: Vec<Chunk>,
    /// The per-word histories of detailed chunks, `CHUNK` a slot.
    pub(super) detail: Vec<History>,
    /// Slots of `detail` that no chunk holds.
    pub(super) free: Vec<u32>,
    /// The two-access lists of `detail`.
    pub(super) pairs: Pairs,
    /// Bytes of the memory budget that pay for this shadow: `HISTORY_BYTES`
    /// a word, charged with the buffer, and what more its chunks and
    /// details took (charged when they grew past that).
    pub(super) paid: u64,
}

impl Shadow {
    /// Words the chunks this shadow holds could cover (kept for reuse).
    pub fn capacity(&self) -> usize {
        self.chunks.capacity().saturating_mul(CHUNK)
    }

    /// Bytes this shadow's allocations take.
    pub fn bytes(&self) -> u64 {
        (self.chunks.capacity() as u64)
            .saturating_mul(std::mem::size_of::<Chunk>() as u64)
            .saturating_add((self.detail.capacity() as u64).saturating_mul(HISTORY_BYTES))
    }

    /// Makes the chunks of a `len`-word buffer, no access recorded, unless
    /// it has them (what its words' histories cost up front is paid; more is
    /// charged). Looks at the clock while it fills them.
    pub fn ensure(&mut self, len: usize, limits: &Limits) -> Result<(), RunError> {
        let chunks = len.div_ceil(CHUNK);
        if self.len == len && self.chunks.len() == chunks {
            return Ok(());
        }
        self.forget_all();
        self.len = len;
        self.paid = (len as u64).saturating_mul(HISTORY_BYTES);
        // Charged as allocated: capacities, exactly `chunks` for a new one.
        self.pay(
            self.chunks.capacity().max(chunks),
            self.detail.capacity(),
            limits,
        )?;
        self.chunks.clear();
        self.chunks.reserve_exact(chunks);
        let list = &mut self.chunks;
        limits.fill_in_chunks(chunks, "allocating race-detection state", |r| {
            list.resize(r.end, UNTOUCHED)
        })
    }

    /// Charges what `chunks` chunks and `details` word histories take
    /// beyond what is paid.
    fn pay(&mut self, chunks: usize, details: usize, limits: &Limits) -> Result<(), RunError> {
        let bytes = (chunks as u64)
            .saturating_mul(std::mem::size_of::<Chunk>() as u64)
            .saturating_add((details as u64).saturating_mul(HISTORY_BYTES));
        if bytes > self.paid {
            limits.charge(bytes - self.paid, || {
                "the race-detection histories of a buffer".to_string()
            })?;
            self.paid = bytes;
        }
        Ok(())
    }

    /// Forgets every access, keeping the allocations: smem words are
    /// forgotten at every block's start.
    pub fn forget_all(&mut self) {
        self.chunks.fill(UNTOUCHED);
        self.detail.clear();
        self.free.clear();
        self.pairs.slots.clear();
        self.pairs.free.clear();
    }

    /// Words of chunk `k` (the last one may be short).
    fn words_of(&self, k: usize) -> usize {
        self.len.saturating_sub(k * CHUNK).min(CHUNK)
    }

    /// The slot of chunk `k`'s per-word histories, made from its uniform
    /// list if it had none.
    fn materialize(&mut self, k: usize, limits: &Limits) -> Result<usize, RunError> {
        let chunk = self.chunks[k];
        if let Chunk::Detailed(slot) = chunk {
            return Ok(slot as usize);
        }
        let slot = match self.free.pop() {
            Some(slot) => slot as usize,
            None => {
                let used = self.detail.len();
                if used + CHUNK > self.detail.capacity() {
                    // Never more slots than chunks.
                    let grown = (self.detail.capacity() * 2)
                        .max(used + 4 * CHUNK)
                        .min(self.chunks.len() * CHUNK)
                        .max(used + CHUNK);
                    self.pay(self.chunks.capacity(), grown, limits)?;
                    self.detail.reserve_exact(grown - used);
                }
                self.detail.resize_with(used + CHUNK, History::default);
                used / CHUNK
            }
        };
        let Ok(tag) = u32::try_from(slot) else {
            return Err(RunError::Backend(
                "race detection: more detailed chunks than it can number".into(),
            ));
        };
        let words = self.words_of(k);
        let histories = &mut self.detail[slot * CHUNK..slot * CHUNK + words];
        match chunk {
            Chunk::Uniform([None, _]) => histories.fill(History::Empty),
            Chunk::Uniform([Some(a), None]) => {
                for (j, h) in histories.iter_mut().enumerate() {
                    *h = History::One(a.at(j));
                }
            }
            Chunk::Uniform([Some(a), Some(b)]) => {
                for (j, h) in histories.iter_mut().enumerate() {
                    *h = self.pairs.hold([a.at(j), b.at(j)]);
                }
            }
            Chunk::Broadcast { first, read } => {
                for (j, h) in histories.iter_mut().enumerate() {
                    *h = match read.reaches(j) {
                        true => self.pairs.hold([first.at(j), read.rec()]),
                        false => History::One(first.at(j)),
                    };
                }
            }
            Chunk::Detailed(_) => {}
        }
        self.chunks[k] = Chunk::Detailed(tag);
        Ok(slot)
    }

    /// Gives detailed chunk `k`'s slot back, its histories forgotten.
    fn release(&mut self, k: usize, slot: usize) {
        for history in &mut self.detail[slot * CHUNK..(slot + 1) * CHUNK] {
            if let History::Two(i) = history {
                self.pairs.release(*i);
            }
            *history = History::Empty;
        }
        self.free.push(slot as u32);
        self.chunks[k] = UNTOUCHED;
    }

    /// Word `word`'s history, for an access checked on its own (`None`
    /// past the end).
    pub fn history_mut(
        &mut self,
        word: usize,
        limits: &Limits,
    ) -> Result<Option<(&mut History, &mut Pairs)>, RunError> {
        if word >= self.len || self.chunks.is_empty() {
            return Ok(None);
        }
        let slot = self.materialize(word / CHUNK, limits)?;
        Ok(Some((
            &mut self.detail[slot * CHUNK + word % CHUNK],
            &mut self.pairs,
        )))
    }

    /// [`History::read_settled`] of word `word`.
    #[inline]
    pub fn read_settled(&self, word: usize, task: u32, epoch: u32) -> bool {
        if word >= self.len {
            return false;
        }
        match self.chunks.get(word / CHUNK) {
            None => false,
            Some(Chunk::Uniform(recs)) => list_settled(recs.iter().flatten(), task, epoch),
            Some(Chunk::Broadcast { first, read }) => match read.reaches(word % CHUNK) {
                true => list_settled(&[*first, read.rec()], task, epoch),
                false => list_settled([first], task, epoch),
            },
            Some(&Chunk::Detailed(slot)) => self.detail[slot as usize * CHUNK + word % CHUNK]
                .read_settled(&self.pairs, task, epoch),
        }
    }

    /// Whether each of the `n` words from `word` is [`Self::read_settled`]
    /// (once for a uniform chunk's words).
    pub fn run_settled(&self, word: usize, n: usize, task: u32, epoch: u32) -> bool {
        let end = word.saturating_add(n);
        if end > self.len {
            return false;
        }
        let mut w = word;
        while w < end {
            let k = w / CHUNK;
            let upto = ((k + 1) * CHUNK).min(end);
            match self.chunks.get(k) {
                None => return false,
                Some(Chunk::Uniform(recs)) => {
                    if !list_settled(recs.iter().flatten(), task, epoch) {
                        return false;
                    }
                }
                Some(Chunk::Broadcast { .. }) => {
                    if !(w..upto).all(|x| self.read_settled(x, task, epoch)) {
                        return false;
                    }
                }
                Some(&Chunk::Detailed(slot)) => {
                    let at = slot as usize * CHUNK;
                    let start = k * CHUNK;
                    if !self.detail[at + w - start..at + upto - start]
                        .iter()
                        .all(|h| h.read_settled(&self.pairs, task, epoch))
                    {
                        return false;
                    }
                }
            }
            w = upto;
        }
        true
    }

    /// Checks and records plain reads of word `word` by `lanes` threads
    /// from `who.thread` in turn, as [`record`] would, until one leaves
    /// the word [`Self::read_settled`] (the other reads would change
    /// nothing); whether it is.
    #[inline]
    pub fn record_reads(
        &mut self,
        word: usize,
        lanes: usize,
        who: &Accessor,
        limits: &Limits,
    ) -> Result<bool, RunStop> {
        if word >= self.len {
            return Ok(false);
        }
        if lanes >= 2 {
            if let Some(done) = self.broadcast_read(word, who) {
                return done;
            }
        }
        let slot = self
            .materialize(word / CHUNK, limits)
            .map_err(RunStop::Limit)?;
        let history = &mut self.detail[slot * CHUNK + word % CHUNK];
        if lanes >= 2 && history.only_before(&self.pairs, who.task, who.epoch) {
            // The common case, in one update: the first read is the task's
            // only access in the epoch, pushed last; every other access
            // is another task's or of an earlier epoch, so that the second
            // read finds what the first found (its order does not depend
            // on the thread) and only joins the first's record; the word
            // is then settled.
            record(history, &mut self.pairs, who, false, false)
                .map_err(|first| RunStop::Race { offset: 0, first })?;
            if let Some(read) = history.last_mut(&mut self.pairs) {
                read.add_thread(who.thread + 1);
            }
            return Ok(true);
        }
        for j in 0..lanes {
            if j > 0 && history.read_settled(&self.pairs, who.task, who.epoch) {
                return Ok(true);
            }
            let at = Accessor {
                thread: who.thread + j as u32,
                ..*who
            };
            record(history, &mut self.pairs, &at, false, false)
                .map_err(|first| RunStop::Race { offset: j, first })?;
        }
        Ok(history.read_settled(&self.pairs, who.task, who.epoch))
    }

    /// [`Self::record_reads`] of two or more threads from `who.thread` on
    /// word `word` of a chunk one run wrote ([`Chunk::Uniform`] of one
    /// access) or a [`Chunk::Broadcast`] whose read did not reach the word,
    /// without a history per word: as in [`Self::record_reads`]' common
    /// case, the first read finds what [`record`] finds and the second
    /// joins it; the chunk then holds the read at this word too, if it is
    /// the same read (threads, site, task and epoch) as at the others.
    /// `None`: this form does not apply (nothing was changed).
    #[inline]
    fn broadcast_read(&mut self, word: usize, who: &Accessor) -> Option<Result<bool, RunStop>> {
        let (k, j) = (word / CHUNK, word % CHUNK);
        let (first, mask, known) = match self.chunks[k] {
            Chunk::Uniform([Some(first), None]) => (first, 0, None),
            Chunk::Broadcast { first, read } if !read.reaches(j) => (first, read.mask, Some(read)),
            _ => return None,
        };
        if first.task == who.task && first.epoch >= who.epoch {
            return None;
        }
        let at = first.at(j);
        let ordered = who.ordered_after(&at);
        if conflicts(&at, ordered, false, false) {
            return Some(Err(RunStop::Race {
                offset: 0,
                first: at,
            }));
        }
        if subsumed(&at, ordered, false, false) {
            return None;
        }
        let read = BroadcastRead {
            task: who.task,
            epoch: who.epoch,
            thread: who.thread as u16,
            other: who.thread as u16 + 2,
            site: who.site,
            mask: mask | 1 << j,
        };
        if known.is_some_and(|k| {
            BroadcastRead {
                mask: read.mask,
                ..k
            } != read
        }) {
            return None;
        }
        self.chunks[k] = Chunk::Broadcast { first, read };
        Some(Ok(true))
    }

    /// Checks and records a plain or atomic access of the `n` words from
    /// `word` (past the end: none), word `word + j` by thread
    /// `who.thread + j`, as [`record`] would word by word in that order,
    /// stopping at the first race. A chunk the run covers whole is updated
    /// once while its words share one list; a plain write ordered after
    /// every access of a detailed chunk's words gives them one list again.
    pub fn record_run(
        &mut self,
        word: usize,
        n: usize,
        who: &Accessor,
        write: bool,
        atomic: bool,
        limits: &Limits,
    ) -> Result<(), RunStop> {
        if n == 1 && word < self.len {
            // One word (a broadcast read): its history.
            let slot = self
                .materialize(word / CHUNK, limits)
                .map_err(RunStop::Limit)?;
            let history = &mut self.detail[slot * CHUNK + word % CHUNK];
            return record(history, &mut self.pairs, who, write, atomic)
                .map_err(|first| RunStop::Race { offset: 0, first });
        }
        let end = word.saturating_add(n).min(self.len);
        let lane = |x: usize| Accessor {
            thread: who.thread + (x - word) as u32,
            ..*who
        };
        // The list the chunk before held and the list its update left, when
        // it was whole and uniform: a chunk holding that list `CHUNK` threads
        // on (the same accesses continued, as consecutive lanes leave them)
        // is left that list `CHUNK` threads on, without an update.
        let mut last: Option<(UniformList, UniformList)> = None;
        let shifted = |list: UniformList| list.map(|r| r.map(|r| r.at(CHUNK)));
        let mut w = word;
        while w < end {
            let k = w / CHUNK;
            let start = k * CHUNK;
            let stop = start + self.words_of(k);
            let upto = stop.min(end);
            let before = last.take();
            let at = lane(w);
            if w == start && upto == stop {
                match self.chunks[k] {
                    Chunk::Uniform([None, _]) => {
                        self.chunks[k] = Chunk::Uniform([Some(Rec::new(&at, write, atomic)), None]);
                        w = upto;
                        continue;
                    }
                    Chunk::Uniform(recs)
                        if write
                            && !atomic
                            && recs.iter().flatten().all(|r| at.ordered_after(r)) =>
                    {
                        // A plain write ordered after every access subsumes them.
                        self.chunks[k] = Chunk::Uniform([Some(Rec::new(&at, true, false)), None]);
                        w = upto;
                        continue;
                    }
                    Chunk::Uniform(recs) => {
                        let list = match before {
                            Some((was, left)) if shifted(was) == recs => Some(shifted(left)),
                            // A race or a third access: word by word below,
                            // which reports it at its word or makes the list.
                            _ => uniform_update(recs, &at, write, atomic).ok().flatten(),
                        };
                        if let Some(list) = list {
                            self.chunks[k] = Chunk::Uniform(list);
                            last = Some((recs, list));
                            w = upto;
                            continue;
                        }
                    }
                    Chunk::Broadcast { first, read } => {
                        let plain_write = write && !atomic && at.ordered_after(&first);
                        if plain_write
                            && (0..stop - start)
                                .filter(|&j| read.reaches(j))
                                .all(|j| lane(w + j).ordered_after(&read.rec()))
                        {
                            // Every word's accesses are subsumed.
                            self.chunks[k] =
                                Chunk::Uniform([Some(Rec::new(&at, true, false)), None]);
                            w = upto;
                            continue;
                        }
                    }
                    Chunk::Detailed(slot) => {
                        let slot = slot as usize;
                        if write && !atomic && self.ordered_before(slot, stop - start, &at) {
                            // Every word's accesses are subsumed.
                            self.release(k, slot);
                            self.chunks[k] =
                                Chunk::Uniform([Some(Rec::new(&at, true, false)), None]);
                            w = upto;
                            continue;
                        }
                    }
                }
            }
            let slot = self.materialize(k, limits).map_err(RunStop::Limit)?;
            for x in w..upto {
                let history = &mut self.detail[slot * CHUNK + x - start];
                record(history, &mut self.pairs, &lane(x), write, atomic).map_err(|first| {
                    RunStop::Race {
                        offset: x - word,
                        first,
                    }
                })?;
            }
            w = upto;
        }
        Ok(())
    }

    /// Whether every access of the first `words` words of detail slot
    /// `slot` is ordered before the access of word `j` by thread
    /// `who.thread + j`.
    fn ordered_before(&self, slot: usize, words: usize, who: &Accessor) -> bool {
        (0..words).all(|j| {
            let at = Accessor {
                thread: who.thread + j as u32,
                ..*who
            };
            self.detail[slot * CHUNK + j]
                .accesses(&self.pairs)
                .iter()
                .all(|r| at.ordered_after(r))
        })
    }
}

/// [`record`] on a uniform chunk's list, whose word `j` an access by thread
/// `who.thread + j` reaches: every word's list changes alike (an order
/// within one task compares threads, the same at every `j`; another
/// thread named is named `j` places after). `Ok(None)`: the lists would
/// hold three accesses; `Err`: word 0's race (every word races).
pub(super) fn uniform_update(
    recs: [Option<Rec>; 2],
    who: &Accessor,
    write: bool,
    atomic: bool,
) -> Result<Option<[Option<Rec>; 2]>, Rec> {
    let new = Rec::new(who, write, atomic);
    let mut list = [new; 3];
    let mut n = 0;
    for r in recs.into_iter().flatten() {
        list[n] = r;
        n += 1;
    }
    let (mut kept, same) = update(&mut list[..n], who, write, atomic)?;
    match same {
        Some(i) => list[i].add_thread(who.thread),
        None => {
            list[kept] = new;
            kept += 1;
        }
    }
    Ok(match kept {
        1 => Some([Some(list[0]), None]),
        2 => Some([Some(list[0]), Some(list[1])]),
        _ => None,
    })
}
