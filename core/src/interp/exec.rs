//! Executes compiled programs block by block, all lanes of a block in lockstep.

// Lane loops index several per-lane vectors at once.
#![allow(clippy::needless_range_loop)]

use std::mem::take;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use super::compile::{
    words_of, BinKind, CompiledAccess, FloatBin, FloatCmp, FloatUn, Half, Instr, MmaRegs,
    OwnInstance, ProgramCode, RegInit, Target, UnKind,
};
use super::detect::{self, Accessor, Clock, Detector, Rec, SemCredits, Shadow};
use super::limits::Limits;
use super::{LateWait, MmaProbe};
use crate::backend::{RunError, Site};
use crate::inputs::Rng;
use crate::ir::{mma, AtomicOp, BlockOp, ScalarType, SemOp, WarpOp, WARP_SIZE};
use crate::numerics;

mod arith;
mod lanes;
mod memory;
mod packed;
mod uniform;
mod warp;

use arith::*;
use lanes::*;
use packed::*;
use uniform::*;
use warp::*;

/// A device buffer of one call: words the call owns, or a caller's input
/// that no program of the call writes, read where it lies. Owned words are
/// atomics so that independent blocks can run on several host threads;
/// relaxed loads and stores cost the same as plain ones. A 16-bit element is
/// half a word (`load_packed`, `store_packed`). Everything reads it through
/// [`GlobalBuf::read`] and writes it through [`GlobalBuf::write`].
pub(crate) struct GlobalBuf<'a> {
    words: Storage<'a>,
}

enum Storage<'a> {
    Owned(Vec<AtomicU32>),
    /// Words of the caller's data; the call never writes them.
    Borrowed(&'a [u32]),
}

impl<'a> GlobalBuf<'a> {
    /// A buffer holding `words`.
    pub fn owned(words: Vec<AtomicU32>) -> Self {
        GlobalBuf {
            words: Storage::Owned(words),
        }
    }

    /// A buffer that reads `words` where they lie and refuses every write
    /// ([`GlobalBuf::write`]): for data no program of the call writes.
    pub fn read_only(words: &'a [u32]) -> Self {
        GlobalBuf {
            words: Storage::Borrowed(words),
        }
    }

    /// Words the buffer holds.
    pub fn len(&self) -> usize {
        match &self.words {
            Storage::Owned(w) => w.len(),
            Storage::Borrowed(w) => w.len(),
        }
    }

    /// The words, for loads.
    #[inline(always)]
    pub fn read(&self) -> GlobalRead<'_> {
        match &self.words {
            Storage::Owned(w) => GlobalRead::Shared(w),
            Storage::Borrowed(w) => GlobalRead::Plain(w),
        }
    }

    /// The words, for stores and atomics; an error where the call found
    /// that no program writes the buffer (a store here is a defect of that
    /// finding, reported rather than performed).
    #[inline(always)]
    pub fn write(&self) -> Result<&[AtomicU32], RunError> {
        match &self.words {
            Storage::Owned(w) => Ok(w),
            Storage::Borrowed(_) => Err(RunError::Backend(
                "a program writes a buffer that the interpreter found no program writes".into(),
            )),
        }
    }

    /// Word `i`.
    #[inline(always)]
    pub fn load(&self, i: usize) -> u32 {
        self.read().load(i)
    }

    /// A copy of the words.
    pub fn to_vec(&self) -> Vec<u32> {
        match &self.words {
            Storage::Owned(w) => w.iter().map(|w| w.load(Relaxed)).collect(),
            Storage::Borrowed(w) => w.to_vec(),
        }
    }

    /// The words, taking the buffer's allocation when it has one (a
    /// borrowed buffer's are copied).
    pub fn into_words(self) -> Vec<u32> {
        match self.words {
            // Collected in place: the allocation is reused, nothing is copied.
            Storage::Owned(w) => w.into_iter().map(AtomicU32::into_inner).collect(),
            Storage::Borrowed(w) => w.to_vec(),
        }
    }

    /// The allocation, for reuse by a later call (`None`: nothing to keep).
    pub fn into_allocation(self) -> Option<Vec<AtomicU32>> {
        match self.words {
            Storage::Owned(w) => Some(w).filter(|w| !w.is_empty()),
            Storage::Borrowed(_) => None,
        }
    }
}

/// The words of a [`GlobalBuf`] for loads: single words, 16-bit halves and
/// consecutive runs of either.
#[derive(Clone, Copy)]
pub(crate) enum GlobalRead<'a> {
    Shared(&'a [AtomicU32]),
    Plain(&'a [u32]),
}

impl<'a> GlobalRead<'a> {
    /// Words `range` of these.
    #[inline(always)]
    pub fn slice(&self, range: std::ops::Range<usize>) -> GlobalRead<'a> {
        match self {
            GlobalRead::Shared(w) => GlobalRead::Shared(&w[range]),
            GlobalRead::Plain(w) => GlobalRead::Plain(&w[range]),
        }
    }

    /// Word `i`.
    #[inline(always)]
    pub fn load(&self, i: usize) -> u32 {
        match self {
            GlobalRead::Shared(w) => w[i].load(Relaxed),
            GlobalRead::Plain(w) => w[i],
        }
    }

    /// Words `start..start + d.len()` into `d`.
    #[inline(always)]
    pub fn load_run(&self, start: usize, d: &mut [u32]) {
        let end = start + d.len();
        match self {
            GlobalRead::Shared(w) => d
                .iter_mut()
                .zip(&w[start..end])
                .for_each(|(d, w)| *d = w.load(Relaxed)),
            GlobalRead::Plain(w) => d.copy_from_slice(&w[start..end]),
        }
    }

    /// 16-bit element `i`, in the low half.
    #[inline(always)]
    pub fn load_packed(&self, i: usize) -> u32 {
        match self {
            GlobalRead::Shared(w) => load_packed(w, i),
            GlobalRead::Plain(w) => get_packed(w, i),
        }
    }

    /// 16-bit elements `start..start + d.len()` into `d`.
    #[inline(always)]
    pub fn load_run_packed(&self, start: usize, d: &mut [u32]) {
        match self {
            GlobalRead::Shared(w) => load_run_packed(w, start, d),
            GlobalRead::Plain(w) => d
                .iter_mut()
                .enumerate()
                .for_each(|(k, d)| *d = get_packed(w, start + k)),
        }
    }
}

/// How an alternative schedule perturbs execution.
pub(crate) struct AltSchedule {
    pub rng: Rng,
    pub preempt: bool,
    pub warps: bool,
    pub shuffle_lanes: bool,
    perm: Vec<usize>,
}

impl AltSchedule {
    pub fn new(rng: Rng, preempt: bool, warps: bool, shuffle_lanes: bool) -> Self {
        AltSchedule {
            rng,
            preempt,
            warps,
            shuffle_lanes,
            perm: vec![],
        }
    }
}

/// What a block run slice needs from the scheduler.
pub(crate) struct Env<'a> {
    pub bufs: &'a [GlobalBuf<'a>],
    pub detect: Option<&'a mut Detector>,
    pub alt: Option<&'a mut AltSchedule>,
    /// Set when a semaphore was signalled (the scheduler wakes waiters).
    pub signalled: bool,
    pub late_waits: Option<&'a mut Vec<LateWait>>,
    /// All programs of the call and the first task id of each (for race reports).
    pub codes: &'a [ProgramCode],
    pub task_offsets: &'a [u64],
    pub limits: &'a Limits,
    /// Loop back-edges taken, for the time bound's clock checks.
    pub ticks: u32,
}

/// Why a block stopped running.
#[derive(Debug)]
pub(crate) enum Status {
    Done,
    /// Waiting on semaphore element `addr` of buffer `buf` for `amount`;
    /// `name` is the element as reports write it (`ready@[1][0]`).
    Blocked {
        buf: usize,
        addr: u64,
        amount: i32,
        name: String,
    },
    Yielded,
}

/// `Some((lo, hi))` when exactly the lanes `lo..hi` are active.
type Span = Option<(usize, usize)>;

/// Warp-group execution of one segment between block-collective operations.
struct WarpSegment {
    start_pc: usize,
    mask: Vec<bool>,
    stack: Vec<Vec<bool>>,
    order: Vec<usize>,
    next: usize,
    /// Union of the masks the warps arrived with (set by the first arrival;
    /// the depth may differ from the segment start's, e.g. after a loop exit).
    merged: Option<(Vec<bool>, Vec<Vec<bool>>)>,
    /// Where the first warp arrived; the others must arrive at the same operation.
    arrival_pc: usize,
    /// The lanes of the warp running now (`None` before the first).
    current: Option<std::ops::Range<usize>>,
}

/// Detection state local to a block.
#[derive(Default)]
struct BlockDetect {
    smem_init: Vec<Vec<bool>>,
    smem_shadow: Vec<Shadow>,
    local_init: Vec<Vec<bool>>,
}

/// The state of one block: registers, program counter, masks, smem, locals.
pub(crate) struct BlockState {
    pub task: u32,
    pub block: u64,
    regs: Vec<Vec<u32>>,
    pc: usize,
    mask: Vec<bool>,
    full: bool,
    /// When the active lanes are exactly `lo..hi`: loops then run over a
    /// plain range (vectorised) instead of testing every lane's bit.
    span: Option<(usize, usize)>,
    /// Saved masks with their spans.
    stack: Vec<(Vec<bool>, Span)>,
    spare_masks: Vec<Vec<bool>>,
    smem: Vec<Vec<u32>>,
    locals: Vec<Vec<u32>>,
    det: BlockDetect,
    epoch: u32,
    clock: Clock,
    warp: Option<WarpSegment>,
    /// The wait this block yielded on, if any (for the co-residency report).
    blocked: bool,
    /// The semaphore element of that wait as reports write it.
    wait_label: Option<String>,
    /// One folded element index per lane of the access being run
    /// (`memory::fold_indices`).
    flat: Vec<u32>,
}

impl BlockState {
    /// Host memory one block's state takes: registers, locals and smem
    /// (packed words, and with detection a written flag per element, and
    /// for smem an access history per element).
    pub fn bytes(code: &ProgramCode, detect: bool) -> u64 {
        let t = code.threads as u64;
        let mut bytes = (code.regs.len() as u64).saturating_mul(t * 4);
        for l in &code.locals {
            let elements = l.len.saturating_mul(t);
            let flags = if detect { elements } else { 0 };
            bytes = bytes
                .saturating_add(words_of(l.elem, elements).saturating_mul(4))
                .saturating_add(flags);
        }
        for s in &code.smem {
            let detection = if detect {
                s.len.saturating_mul(super::DETECTION_BYTES_PER_ELEMENT)
            } else {
                0
            };
            bytes = bytes
                .saturating_add(words_of(s.elem, s.len).saturating_mul(4))
                .saturating_add(detection);
        }
        bytes
    }

    pub fn new(code: &ProgramCode, detect: bool) -> Self {
        let t = code.threads;
        let regs = code
            .regs
            .iter()
            .map(|init| match *init {
                RegInit::Const(v) => vec![v; t],
                RegInit::Lane => (0..t as u32).collect(),
                _ => vec![0; t],
            })
            .collect();
        let det = if detect {
            BlockDetect {
                smem_init: code
                    .smem
                    .iter()
                    .map(|s| vec![false; s.len as usize])
                    .collect(),
                // Chunks made on first use (`Shadow::ensure`).
                smem_shadow: code.smem.iter().map(|_| Shadow::default()).collect(),
                local_init: code
                    .locals
                    .iter()
                    .map(|l| vec![false; l.len as usize * t])
                    .collect(),
            }
        } else {
            BlockDetect::default()
        };
        BlockState {
            task: 0,
            block: 0,
            regs,
            pc: 0,
            mask: vec![true; t],
            full: true,
            span: Some((0, t)),
            stack: vec![],
            spare_masks: vec![],
            smem: code
                .smem
                .iter()
                .map(|s| vec![0; words_of(s.elem, s.len) as usize])
                .collect(),
            locals: code
                .locals
                .iter()
                .map(|l| vec![0; words_of(l.elem, l.len * t as u64) as usize])
                .collect(),
            det,
            epoch: 0,
            clock: Clock::default(),
            warp: None,
            blocked: false,
            wait_label: None,
            flat: vec![0; t],
        }
    }

    /// Prepares this (possibly reused) state to run block `block` as `task`.
    pub fn reset(&mut self, code: &ProgramCode, task: u32, block: u64) {
        self.task = task;
        self.block = block;
        self.pc = 0;
        self.mask.fill(true);
        self.full = true;
        self.span = Some((0, self.mask.len()));
        while let Some((m, _)) = self.stack.pop() {
            self.spare_masks.push(m);
        }
        for (r, init) in code.regs.iter().enumerate() {
            if let RegInit::BlockAxis { stride, size } = *init {
                let v = ((block / stride) % size as u64) as u32;
                self.regs[r].fill(v);
            }
        }
        for v in &mut self.det.smem_init {
            v.fill(false);
        }
        self.det.smem_shadow.iter_mut().for_each(Shadow::forget_all);
        self.epoch = 0;
        self.clock.clear();
        self.warp = None;
        self.blocked = false;
    }

    fn site(&self, code: &ProgramCode, thread: Option<u32>) -> Site {
        Site {
            program: code.program,
            kernel: code.kernel.clone(),
            block: self.block,
            thread,
        }
    }

    /// Recomputes `full` and `span` after the mask changed.
    fn refresh_mask(&mut self) {
        self.set_span(span_of(&self.mask));
    }

    fn set_span(&mut self, span: Option<(usize, usize)>) {
        self.span = span;
        self.full = span == Some((0, self.mask.len()));
    }

    fn no_lanes(&self) -> bool {
        matches!(self.span, Some((lo, hi)) if lo == hi)
    }

    fn push_mask(&mut self) {
        let mut saved = self.spare_masks.pop().unwrap_or_default();
        saved.clear();
        saved.extend_from_slice(&self.mask);
        self.stack.push((saved, self.span));
    }

    /// Starts warp-group execution of the segment at `pc`: the warps run it
    /// one after the other in a shuffled order.
    fn begin_segment(&mut self, code: &ProgramCode, rng: &mut Rng) {
        let t = self.mask.len();
        let warps = t.div_ceil(32);
        if warps <= 1 {
            return;
        }
        let mut order: Vec<usize> = (0..warps).collect();
        // Drawn even when the segment is empty: a seeded schedule's later
        // draws must not depend on which segments are empty.
        rng.shuffle(&mut order);
        if code.code.get(self.pc).is_some_and(Instr::is_boundary) {
            // Every warp would arrive at once with its part of the masks, and
            // their union is the masks as they are (e.g. a block that starts
            // with a `wait` and is retried while the semaphore is short).
            return;
        }
        let seg = WarpSegment {
            start_pc: self.pc,
            mask: self.mask.clone(),
            stack: self.stack.iter().map(|(m, _)| m.clone()).collect(),
            order,
            next: 0,
            merged: None,
            arrival_pc: 0,
            current: None,
        };
        self.warp = Some(seg);
        self.next_warp();
    }

    /// Switches to the next warp of the segment; false when none is left.
    ///
    /// While a warp runs, its masks only narrow (branches, loop exits and
    /// pops of masks it pushed), so only its own lanes can be set: switching
    /// clears those lanes and copies the next warp's, instead of rewriting
    /// every lane of every mask.
    fn next_warp(&mut self) -> bool {
        let Some(seg) = self.warp.as_mut() else {
            return false;
        };
        let Some(&w) = seg.order.get(seg.next) else {
            return false;
        };
        seg.next += 1;
        let t = self.mask.len();
        let lanes = w * 32..(w * 32 + 32).min(t);
        // The lanes that may be set now: all of them before the first warp.
        let dirty = seg.current.replace(lanes.clone()).unwrap_or(0..t);
        while self.stack.len() > seg.stack.len() {
            if let Some((m, _)) = self.stack.pop() {
                self.spare_masks.push(m);
            }
        }
        while self.stack.len() < seg.stack.len() {
            let mut m = self.spare_masks.pop().unwrap_or_default();
            m.clear();
            m.resize(t, false);
            self.stack.push((m, None));
        }
        let masks = std::iter::once((&mut self.mask, &seg.mask))
            .chain(self.stack.iter_mut().map(|(m, _)| m).zip(&seg.stack));
        for (dst, src) in masks {
            debug_assert!(
                dst.iter()
                    .enumerate()
                    .all(|(l, &on)| !on || dirty.contains(&l)),
                "a warp's mask has a lane outside the warp set"
            );
            dst[dirty.clone()].fill(false);
            dst[lanes.clone()].copy_from_slice(&src[lanes.clone()]);
        }
        let span_in = |m: &[bool]| match span_of(&m[lanes.clone()]) {
            Some((lo, hi)) if lo < hi => Some((lanes.start + lo, lanes.start + hi)),
            other => other,
        };
        for (m, span) in &mut self.stack {
            *span = span_in(m);
        }
        self.pc = seg.start_pc;
        self.set_span(span_in(&self.mask));
        true
    }

    /// At a block-collective instruction in warp mode: folds in the warp that
    /// got here; returns true when another warp must run the segment first.
    fn warp_arrived(&mut self, code: &ProgramCode) -> Result<bool, RunError> {
        let Some(seg) = self.warp.as_mut() else {
            return Ok(false);
        };
        if seg.merged.is_some() && seg.arrival_pc != self.pc {
            return Err(RunError::Backend(format!(
                "kernel `{}`: warps of one block reached different block-collective operations",
                code.kernel
            )));
        }
        seg.arrival_pc = self.pc;
        match &mut seg.merged {
            None => {
                seg.merged = Some((
                    self.mask.clone(),
                    self.stack.iter().map(|(m, _)| m.clone()).collect(),
                ))
            }
            Some((mask, stack)) => {
                if stack.len() != self.stack.len() {
                    return Err(RunError::Backend(format!(
                        "kernel `{}`: a block-collective operation is reached in divergent control flow",
                        code.kernel
                    )));
                }
                // Only the arriving warp's lanes can be set (`next_warp`).
                let Some(lanes) = seg.current.clone() else {
                    return Err(corrupt(code));
                };
                let or_in = |d: &mut [bool], s: &[bool]| {
                    for (x, y) in d[lanes.clone()].iter_mut().zip(&s[lanes.clone()]) {
                        *x |= *y;
                    }
                };
                or_in(mask, &self.mask);
                for (d, (s, _)) in stack.iter_mut().zip(&self.stack) {
                    or_in(d, s);
                }
            }
        }
        if seg.next < seg.order.len() {
            self.next_warp();
            return Ok(true);
        }
        let Some((mask, stack)) = self.warp.take().and_then(|seg| seg.merged) else {
            return Err(corrupt(code));
        };
        self.mask = mask;
        self.refresh_mask();
        for ((m, span), merged) in self.stack.iter_mut().zip(stack) {
            *span = span_of(&merged);
            *m = merged;
        }
        Ok(false)
    }

    /// Runs until the block finishes, waits on a semaphore or is preempted.
    pub fn run(&mut self, code: &ProgramCode, env: &mut Env) -> Result<Status, RunError> {
        if self.pc == 0 && self.warp.is_none() {
            if let Some(alt) = env.alt.as_deref_mut() {
                if alt.warps {
                    self.begin_segment(code, &mut alt.rng);
                }
            }
        }
        loop {
            let instr = &code.code[self.pc];
            if self.warp.is_some() && instr.is_boundary() && self.warp_arrived(code)? {
                continue;
            }
            let mut lanes = lanes_of(self.span, &self.mask);
            // A uniform result is computed on the first active lane and
            // copied to the others after the instruction.
            let broadcast = uniform_result(instr, code).and_then(|dst| {
                let first = first_lane(lanes)?;
                lanes = Lanes::Range(first, first + 1);
                Some((dst, first))
            });
            match instr {
                Instr::IfThen { cond, else_pc } if code.uniform[*cond] => {
                    self.push_mask();
                    if !self.uniform_holds(*cond) {
                        self.pc = *else_pc;
                        continue;
                    }
                }
                Instr::Else { cond, end_pc } if code.uniform[*cond] => {
                    let Some((saved, span)) = self.stack.last() else {
                        return Err(corrupt(code));
                    };
                    let span = *span;
                    self.mask.copy_from_slice(saved);
                    self.set_span(span);
                    // Lanes whose condition is false take the `else`.
                    if first_lane(lanes_of(self.span, &self.mask))
                        .is_none_or(|l| self.regs[*cond][l] != 0)
                    {
                        self.leave_all();
                        self.pc = *end_pc;
                        continue;
                    }
                }
                Instr::LoopTest {
                    var,
                    end,
                    signed,
                    exit_pc,
                } if code.uniform[*var] && code.uniform[*end] => {
                    let more = first_lane(lanes).is_some_and(|l| {
                        let (v, e) = (self.regs[*var][l], self.regs[*end][l]);
                        if *signed {
                            (v as i32) < (e as i32)
                        } else {
                            v < e
                        }
                    });
                    if !more {
                        self.leave_all();
                        self.pc = *exit_pc;
                        continue;
                    }
                }
                Instr::Load { dst, acc } if acc.uniform && env.detect.is_none() => {
                    self.load_uniform(code, env, *dst, acc)?;
                    if self.maybe_preempt(env, acc) {
                        return Ok(Status::Yielded);
                    }
                }
                Instr::Store { acc, src }
                    if acc.uniform
                        && env.detect.is_none()
                        && !env.alt.as_ref().is_some_and(|a| a.shuffle_lanes) =>
                {
                    self.store_uniform(code, env, *src, acc)?;
                    if self.maybe_preempt(env, acc) {
                        return Ok(Status::Yielded);
                    }
                }
                Instr::Bin { op, dst, a, b } => {
                    let mut d = take(&mut self.regs[*dst]);
                    let ftz = code.flush_subnormals;
                    // A literal or scalar operand (`x * alpha`): 16-bit
                    // operations widen it once, not on every lane.
                    let uniform = matches!(code.regs[*b], RegInit::Const(_));
                    let f = Flags { ftz, uniform };
                    if ftz && op.reads_f32() {
                        let (a, b) = (flushed(&self.regs[*a]), flushed(&self.regs[*b]));
                        binary(*op, &mut d, &a, &b, lanes, f);
                    } else {
                        binary(*op, &mut d, &self.regs[*a], &self.regs[*b], lanes, f);
                    }
                    if code.flush_subnormals && op.gives_f32() {
                        each(lanes, |l| d[l] = flush(d[l]));
                    }
                    self.regs[*dst] = d;
                }
                Instr::Un { op, dst, a } => {
                    let mut d = take(&mut self.regs[*dst]);
                    let ftz = code.flush_subnormals;
                    if ftz && op.reads_f32() {
                        unary(*op, &mut d, &flushed(&self.regs[*a]), lanes, ftz);
                    } else {
                        unary(*op, &mut d, &self.regs[*a], lanes, ftz);
                    }
                    if code.flush_subnormals && op.gives_f32() {
                        each(lanes, |l| d[l] = flush(d[l]));
                    }
                    self.regs[*dst] = d;
                }
                Instr::Select { dst, c, a, b } => {
                    let mut d = take(&mut self.regs[*dst]);
                    let (c, a, b) = (&self.regs[*c], &self.regs[*a], &self.regs[*b]);
                    each(lanes, |l| d[l] = if c[l] != 0 { a[l] } else { b[l] });
                    self.regs[*dst] = d;
                }
                Instr::Fma { dst, a, b, c, half } => {
                    let mut d = take(&mut self.regs[*dst]);
                    let (a, b, c) = (&self.regs[*a], &self.regs[*b], &self.regs[*c]);
                    let ftz = |bits: u32| match code.flush_subnormals {
                        true => flush(bits),
                        false => bits,
                    };
                    match half {
                        None => {
                            let f = |bits: u32| f32::from_bits(ftz(bits));
                            each(lanes, |l| {
                                d[l] = ftz(f(a[l]).mul_add(f(b[l]), f(c[l])).to_bits());
                            });
                        }
                        Some(h) => {
                            // Flushing applies to the widened operands and
                            // the widened result, as for f32's `fma`.
                            let h = *h;
                            let f = |bits: u32| match code.flush_subnormals {
                                true => flush16(h, bits),
                                false => bits,
                            };
                            each(lanes, |l| d[l] = f(h.fma(f(a[l]), f(b[l]), f(c[l]))));
                        }
                    }
                    self.regs[*dst] = d;
                }
                Instr::Mov {
                    dst,
                    src,
                    src_dies: true,
                } if self.full && broadcast.is_none() => self.regs.swap(*dst, *src),
                Instr::Mov { dst, src, .. } => {
                    let mut d = take(&mut self.regs[*dst]);
                    let s = &self.regs[*src];
                    match lanes {
                        Lanes::Range(lo, hi) => d[lo..hi].copy_from_slice(&s[lo..hi]),
                        Lanes::Mask(_) => each(lanes, |l| d[l] = s[l]),
                    }
                    self.regs[*dst] = d;
                }
                Instr::Inc { var } => {
                    let v = &mut self.regs[*var];
                    each(lanes, |l| v[l] = v[l].wrapping_add(1));
                }
                Instr::LocalDecl { id } => {
                    // Only the active lanes declare the array again: under the
                    // warp-group schedule another warp re-runs the declaration
                    // after this one has written (and will read) its own elements.
                    // Flags are element-major (element `i` of lane `l` at
                    // `i * t + l`): each element's row of lanes is cleared
                    // where the lanes are active, looking at the clock
                    // between chunks of rows (arrays may be large).
                    if let Some(init) = self.det.local_init.get_mut(*id) {
                        let t = code.threads.max(1);
                        let rows = init.len() / t;
                        let rows_per_chunk = (super::limits::FILL_CHUNK / t).max(1);
                        let block = self.block;
                        let site = || Site {
                            program: code.program,
                            kernel: code.kernel.clone(),
                            block,
                            thread: None,
                        };
                        for first in (0..rows).step_by(rows_per_chunk) {
                            env.limits.check_time(site)?;
                            let last = rows.min(first + rows_per_chunk);
                            for row in init[first * t..last * t].chunks_mut(t) {
                                match lanes {
                                    Lanes::Range(lo, hi) => row[lo..hi].fill(false),
                                    Lanes::Mask(m) => row
                                        .iter_mut()
                                        .zip(m)
                                        .filter(|(_, &on)| on)
                                        .for_each(|(w, _)| *w = false),
                                }
                            }
                        }
                    }
                }
                Instr::IfThen { cond, else_pc } => {
                    self.push_mask();
                    let (any, span) = narrow(&mut self.mask, &self.regs[*cond], |m, c| m && c != 0);
                    self.set_span(span);
                    if !any {
                        self.pc = *else_pc;
                        continue;
                    }
                }
                Instr::Else { cond, end_pc } => {
                    let Some((saved, _)) = self.stack.last() else {
                        return Err(corrupt(code));
                    };
                    self.mask.copy_from_slice(saved);
                    let (any, span) = narrow(&mut self.mask, &self.regs[*cond], |m, c| m && c == 0);
                    self.set_span(span);
                    if !any {
                        self.pc = *end_pc;
                        continue;
                    }
                }
                Instr::PushMask => self.push_mask(),
                Instr::PopMask => {
                    let Some((saved, span)) = self.stack.pop() else {
                        return Err(corrupt(code));
                    };
                    let old = std::mem::replace(&mut self.mask, saved);
                    self.spare_masks.push(old);
                    self.set_span(span);
                }
                Instr::LoopTest {
                    var,
                    end,
                    signed,
                    exit_pc,
                } => {
                    let (v, e) = (&self.regs[*var], &self.regs[*end]);
                    let (any, span) = if *signed {
                        narrow2(&mut self.mask, v, e, |m, v, e| m && (v as i32) < (e as i32))
                    } else {
                        narrow2(&mut self.mask, v, e, |m, v, e| m && v < e)
                    };
                    self.set_span(span);
                    if !any {
                        self.pc = *exit_pc;
                        continue;
                    }
                }
                Instr::WhileTest {
                    cond,
                    count,
                    max,
                    ordinal,
                    exit_pc,
                } => {
                    let (any, span) = narrow(&mut self.mask, &self.regs[*cond], |m, c| m && c != 0);
                    self.set_span(span);
                    let (count, max) = (&self.regs[*count], &self.regs[*max]);
                    let spent = (0..self.mask.len()).find(|&l| self.mask[l] && count[l] >= max[l]);
                    if let Some(lane) = spent {
                        if code.loop_limit_is_error {
                            return Err(RunError::LoopLimit {
                                site: self.site(code, Some(lane as u32)),
                                ordinal: *ordinal,
                                condition: code
                                    .while_conditions
                                    .get(*ordinal as usize)
                                    .cloned()
                                    .unwrap_or_default(),
                                max: max[lane],
                            });
                        }
                        // Fast mode: a thread at its loop's limit leaves the loop.
                        for l in 0..self.mask.len() {
                            self.mask[l] &= count[l] < max[l];
                        }
                        self.refresh_mask();
                    }
                    if !any || self.no_lanes() {
                        self.pc = *exit_pc;
                        continue;
                    }
                }
                Instr::LoopExit { levels } => {
                    let depth = self.stack.len();
                    let Some(first) = depth.checked_sub(*levels) else {
                        return Err(corrupt(code));
                    };
                    for (saved, span) in &mut self.stack[first..] {
                        for (s, m) in saved.iter_mut().zip(&self.mask) {
                            *s &= !*m;
                        }
                        *span = span_of(saved);
                    }
                    self.mask.fill(false);
                    self.refresh_mask();
                }
                Instr::Jump { pc } => {
                    env.limits.tick(&mut env.ticks, || self.site(code, None))?;
                    self.pc = *pc;
                    continue;
                }
                Instr::Load { dst, acc } => {
                    self.load(code, env, *dst, acc)?;
                    if self.maybe_preempt(env, acc) {
                        return Ok(Status::Yielded);
                    }
                }
                Instr::Store { acc, src } => {
                    self.store(code, env, *src, acc)?;
                    if self.maybe_preempt(env, acc) {
                        return Ok(Status::Yielded);
                    }
                }
                Instr::Atomic {
                    op,
                    signed,
                    acc,
                    args,
                    dst,
                } => {
                    self.atomic(code, env, *op, *signed, acc, *args, *dst)?;
                    if self.maybe_preempt(env, acc) {
                        return Ok(Status::Yielded);
                    }
                }
                // No thread is here when all left a loop through a
                // (block-uniform) `break` or `continue`: nothing to order.
                Instr::Barrier if self.no_lanes() => {
                    self.after_boundary(code, env);
                    continue;
                }
                Instr::Barrier => {
                    self.epoch += 1;
                    self.after_boundary(code, env);
                    continue;
                }
                // Like `Barrier` (the barrier it implies); no thread is here
                // when all left a loop: nothing to compute.
                Instr::BlockCollective { .. } if self.no_lanes() => {
                    self.after_boundary(code, env);
                    continue;
                }
                Instr::BlockCollective {
                    op,
                    dst,
                    value,
                    source,
                } => {
                    let active = || (0..self.mask.len()).filter(|&l| self.mask[l]);
                    let values = &self.regs[*value];
                    let result = match op {
                        BlockOp::Broadcast => {
                            let first = active().next().unwrap_or(0);
                            let from = source.map_or(0, |r| self.regs[r][first]);
                            match values.get(from as usize) {
                                Some(&v) if self.mask[from as usize] => v,
                                // Reported by thread 0, as on the GPU backends.
                                _ => {
                                    return Err(RunError::OutOfBounds {
                                        site: self.site(code, Some(0)),
                                        reference: format!("{} source thread", op.name()),
                                        index: format!("[{from}]"),
                                        shape: format!("[{}]", self.mask.len()),
                                    })
                                }
                            }
                        }
                        BlockOp::Any => u32::from(active().any(|l| values[l] != 0)),
                        BlockOp::All => u32::from(active().all(|l| values[l] != 0)),
                        BlockOp::Count => active().filter(|&l| values[l] != 0).count() as u32,
                    };
                    self.regs[*dst].fill(result);
                    self.epoch += 1;
                    self.after_boundary(code, env);
                    continue;
                }
                Instr::Sem {
                    op,
                    acc,
                    amount,
                    unsigned,
                } => {
                    let Some(lane) = self.mask.iter().position(|&m| m) else {
                        self.after_boundary(code, env);
                        continue;
                    };
                    let (buf, addr) = self.sem_address(code, acc, lane)?;
                    let bits = self.regs[*amount][lane];
                    let value = if *unsigned {
                        i64::from(bits)
                    } else {
                        i64::from(bits as i32)
                    };
                    let Some(n) = i32::try_from(value).ok().filter(|&n| n >= 1) else {
                        return Err(RunError::BadSemaphoreAmount {
                            site: self.site(code, None),
                            semaphore: self.element_label(acc, lane),
                            amount: value,
                        });
                    };
                    let word = &env.bufs[buf].write()?[addr as usize];
                    match op {
                        SemOp::Signal => {
                            self.epoch += 1;
                            if let Some(det) = env.detect.as_deref_mut() {
                                let mut released = self.clock.clone();
                                released.raise(self.task, self.epoch - 1);
                                let count = word.load(Relaxed) as i32;
                                det.sem_credits
                                    .entry((buf, addr))
                                    .or_insert_with(|| SemCredits::starting_at(count))
                                    .signal(n as u64, released, (self.task, self.epoch - 1));
                            }
                            // An atomic add: blocks that never wait signal
                            // from several host threads (`blocks::run_lockstep`).
                            word.fetch_add(n as u32, Relaxed);
                            env.signalled = true;
                        }
                        SemOp::Wait | SemOp::WaitNodec => {
                            let consume = *op == SemOp::Wait;
                            // The count is taken with a compare-exchange:
                            // blocks that only wait may run on several host
                            // threads (`blocks::run_lockstep`).
                            let value = loop {
                                let value = word.load(Relaxed) as i32;
                                if value < n {
                                    // A block retried on a short semaphore has
                                    // run nothing since its last try: the
                                    // element is the one it named then.
                                    let name = match &self.wait_label {
                                        Some(name) if self.blocked => name.clone(),
                                        _ => {
                                            let name = self.element_label(acc, lane);
                                            self.wait_label = Some(name.clone());
                                            name
                                        }
                                    };
                                    self.blocked = true;
                                    return Ok(Status::Blocked {
                                        buf,
                                        addr,
                                        amount: n,
                                        name,
                                    });
                                }
                                let taken = value.wrapping_sub(n) as u32;
                                if !consume
                                    || word
                                        .compare_exchange(value as u32, taken, Relaxed, Relaxed)
                                        .is_ok()
                                {
                                    break value;
                                }
                            };
                            if let Some(det) = env.detect.as_deref_mut() {
                                let wait = (self.task, self.epoch);
                                let contest = det.contests.get(&((buf, addr), wait));
                                det.sem_credits
                                    .entry((buf, addr))
                                    .or_insert_with(|| SemCredits::starting_at(value))
                                    .take(
                                        n as u64,
                                        consume,
                                        &mut self.clock,
                                        (wait, self.epoch + 1),
                                        contest,
                                    );
                            }
                            if std::mem::take(&mut self.blocked) {
                                if let Some(late) = env.late_waits.as_deref_mut() {
                                    late.push(LateWait {
                                        site: self.site(code, None),
                                        semaphore: acc.name.clone(),
                                        element: addr,
                                        amount: n,
                                    });
                                }
                            }
                            self.epoch += 1;
                        }
                    }
                    self.after_boundary(code, env);
                    if preempt_here(env) {
                        return Ok(Status::Yielded);
                    }
                    continue;
                }
                Instr::SemRead { dst, acc } => {
                    let lane = self.mask.iter().position(|&m| m).unwrap_or(0);
                    let (buf, addr) = self.sem_address(code, acc, lane)?;
                    let v = env.bufs[buf].load(addr as usize);
                    self.regs[*dst].fill(v);
                    self.after_boundary(code, env);
                    if preempt_here(env) {
                        return Ok(Status::Yielded);
                    }
                    continue;
                }
                Instr::Warp {
                    op,
                    ty,
                    dst,
                    value,
                    lane,
                } => {
                    let mut d = take(&mut self.regs[*dst]);
                    let lane = lane.map(|r| &self.regs[r][..]);
                    let shape = WarpValue {
                        ty: *ty,
                        ftz: code.flush_subnormals,
                    };
                    let done = warp_collective(*op, shape, &mut d, &self.regs[*value], lane, lanes);
                    self.regs[*dst] = d;
                    if let Err(warp) = done {
                        return Err(RunError::Backend(format!(
                            "kernel `{}`: only some lanes of warp {warp} reached `{}` (validation's warp-uniform rule should make this impossible)",
                            code.kernel,
                            op.name()
                        )));
                    }
                }
                Instr::Mma(regs) => {
                    let mut d: [Vec<u32>; mma::C_LEN as usize] =
                        std::array::from_fn(|i| take(&mut self.regs[regs.d[i]]));
                    let arithmetic = MmaArithmetic {
                        ftz: code.flush_subnormals,
                        probe: code.mma_probe,
                    };
                    let done = mma_m16n8k16(regs, &self.regs, &mut d, lanes, arithmetic);
                    for (r, v) in regs.d.iter().zip(d) {
                        self.regs[*r] = v;
                    }
                    if let Err(warp) = done {
                        return Err(RunError::Backend(format!(
                            "kernel `{}`: only some lanes of warp {warp} reached `{}` (validation's warp-uniform rule should make this impossible)",
                            code.kernel,
                            mma::NAME
                        )));
                    }
                }
                Instr::End => return Ok(Status::Done),
            }
            if let Some((dst, first)) = broadcast {
                let d = &mut self.regs[dst];
                let v = d[first];
                fill_lanes(d, lanes_of(self.span, &self.mask), v);
            }
            self.pc += 1;
        }
    }

    /// Steps past a block-collective instruction; in warp mode starts the next segment.
    fn after_boundary(&mut self, code: &ProgramCode, env: &mut Env) {
        self.pc += 1;
        if let Some(alt) = env.alt.as_deref_mut() {
            if alt.warps {
                self.begin_segment(code, &mut alt.rng);
            }
        }
    }

    fn maybe_preempt(&mut self, env: &mut Env, acc: &CompiledAccess) -> bool {
        let Some(alt) = env.alt.as_deref_mut() else {
            return false;
        };
        if alt.preempt && matches!(acc.target, Target::Global(_)) && alt.rng.below(4) == 0 {
            self.pc += 1;
            return true;
        }
        false
    }
}

fn corrupt(code: &ProgramCode) -> RunError {
    RunError::Backend(format!(
        "kernel `{}`: corrupt compiled control flow",
        code.kernel
    ))
}

trait WithThread {
    fn with_thread(self, thread: Option<u32>) -> RunError;
}

impl WithThread for Box<RunError> {
    fn with_thread(self, thread: Option<u32>) -> RunError {
        match *self {
            RunError::OutOfBounds {
                site,
                reference,
                index,
                shape,
            } => RunError::OutOfBounds {
                site: Site { thread, ..site },
                reference,
                index,
                shape,
            },
            e => e,
        }
    }
}

/// Under an extra schedule with preemption, whether the block yields at this
/// semaphore boundary (one draw in three).
fn preempt_here(env: &mut Env) -> bool {
    env.alt
        .as_deref_mut()
        .is_some_and(|a| a.preempt && a.rng.below(3) == 0)
}
