//! Executes compiled programs block by block, all lanes of a block in lockstep.

// Lane loops index several per-lane vectors at once.
#![allow(clippy::needless_range_loop)]

use std::mem::take;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use super::compile::{
    words_of, BinKind, CompiledAccess, FloatBin, FloatCmp, FloatUn, Half, Instr, MmaRegs,
    OwnInstance, ProgramCode, RegInit, Target, UnKind,
};
use super::detect::{self, Accessor, Clock, Detector, History, Rec, SemCredits};
use super::limits::Limits;
use super::{LateWait, MmaProbe};
use crate::backend::{RunError, Site};
use crate::inputs::Rng;
use crate::ir::{fold, mma, AtomicOp, BlockOp, ScalarType, SemOp, WarpOp, WARP_SIZE};
use crate::numerics;

/// A device buffer of one call. Words are atomics so that independent blocks
/// can run on several host threads; relaxed loads and stores cost the same as
/// plain ones. A 16-bit element is half a word (`load_packed`, `store_packed`).
pub(crate) struct GlobalBuf {
    pub words: Vec<AtomicU32>,
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
    pub bufs: &'a [GlobalBuf],
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
}

/// Detection state local to a block.
#[derive(Default)]
struct BlockDetect {
    smem_init: Vec<Vec<bool>>,
    smem_shadow: Vec<Vec<History>>,
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
                smem_shadow: code
                    .smem
                    .iter()
                    .map(|s| vec![History::Empty; s.len as usize])
                    .collect(),
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
        for v in &mut self.det.smem_shadow {
            v.iter_mut().for_each(History::forget);
        }
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

    fn begin_segment(&mut self, rng: &mut Rng) {
        let t = self.mask.len();
        let warps = t.div_ceil(32);
        if warps <= 1 {
            return;
        }
        let mut order: Vec<usize> = (0..warps).collect();
        rng.shuffle(&mut order);
        let seg = WarpSegment {
            start_pc: self.pc,
            mask: self.mask.clone(),
            stack: self.stack.iter().map(|(m, _)| m.clone()).collect(),
            order,
            next: 0,
            merged: None,
            arrival_pc: 0,
        };
        self.warp = Some(seg);
        self.next_warp();
    }

    /// Switches to the next warp of the segment; false when none is left.
    fn next_warp(&mut self) -> bool {
        let Some(seg) = self.warp.as_mut() else {
            return false;
        };
        let Some(&w) = seg.order.get(seg.next) else {
            return false;
        };
        seg.next += 1;
        let lanes = w * 32..(w * 32 + 32).min(self.mask.len());
        let restrict = |dst: &mut Vec<bool>, src: &[bool]| {
            for (l, (d, s)) in dst.iter_mut().zip(src).enumerate() {
                *d = *s && lanes.contains(&l);
            }
        };
        restrict(&mut self.mask, &seg.mask);
        self.stack.truncate(seg.stack.len());
        for (i, src) in seg.stack.iter().enumerate() {
            if i >= self.stack.len() {
                self.stack.push((vec![false; src.len()], None));
            }
            restrict(&mut self.stack[i].0, src);
            self.stack[i].1 = None;
        }
        self.pc = seg.start_pc;
        self.refresh_mask();
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
                for (d, s) in mask.iter_mut().zip(&self.mask) {
                    *d |= *s;
                }
                for (d, (s, _)) in stack.iter_mut().zip(&self.stack) {
                    for (x, y) in d.iter_mut().zip(s) {
                        *x |= *y;
                    }
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
                    self.begin_segment(&mut alt.rng);
                }
            }
        }
        loop {
            let instr = &code.code[self.pc];
            if self.warp.is_some() && instr.is_boundary() && self.warp_arrived(code)? {
                continue;
            }
            let lanes = lanes_of(self.span, &self.mask);
            match instr {
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
                Instr::Mov { dst, src } => {
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
                    self.after_boundary(env);
                    continue;
                }
                Instr::Barrier => {
                    self.epoch += 1;
                    self.after_boundary(env);
                    continue;
                }
                // Like `Barrier` (the barrier it implies); no thread is here
                // when all left a loop: nothing to compute.
                Instr::BlockCollective { .. } if self.no_lanes() => {
                    self.after_boundary(env);
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
                    self.after_boundary(env);
                    continue;
                }
                Instr::Sem {
                    op,
                    acc,
                    amount,
                    unsigned,
                } => {
                    let Some(lane) = self.mask.iter().position(|&m| m) else {
                        self.after_boundary(env);
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
                    let word = &env.bufs[buf].words[addr as usize];
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
                            word.store((word.load(Relaxed) as i32).wrapping_add(n) as u32, Relaxed);
                            env.signalled = true;
                        }
                        SemOp::Wait | SemOp::WaitNodec => {
                            let value = word.load(Relaxed) as i32;
                            if value < n {
                                self.blocked = true;
                                return Ok(Status::Blocked {
                                    buf,
                                    addr,
                                    amount: n,
                                    name: self.element_label(acc, lane),
                                });
                            }
                            let consume = *op == SemOp::Wait;
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
                            if consume {
                                word.store(value.wrapping_sub(n) as u32, Relaxed);
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
                    self.after_boundary(env);
                    if preempt_here(env) {
                        return Ok(Status::Yielded);
                    }
                    continue;
                }
                Instr::SemRead { dst, acc } => {
                    let lane = self.mask.iter().position(|&m| m).unwrap_or(0);
                    let (buf, addr) = self.sem_address(code, acc, lane)?;
                    let v = env.bufs[buf].words[addr as usize].load(Relaxed);
                    self.regs[*dst].fill(v);
                    self.after_boundary(env);
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
            self.pc += 1;
        }
    }

    /// Steps past a block-collective instruction; in warp mode starts the next segment.
    fn after_boundary(&mut self, env: &mut Env) {
        self.pc += 1;
        if let Some(alt) = env.alt.as_deref_mut() {
            if alt.warps {
                self.begin_segment(&mut alt.rng);
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

    fn sem_address(
        &self,
        code: &ProgramCode,
        acc: &CompiledAccess,
        lane: usize,
    ) -> Result<(usize, u64), RunError> {
        let Target::Global(buf) = acc.target else {
            return Err(RunError::Backend(format!(
                "`{}` is not a semaphore",
                acc.name
            )));
        };
        let addr = self
            .address(code, acc, lane)
            .map_err(|e| e.with_thread(None))?;
        Ok((buf, addr))
    }

    /// The semaphore element `acc` names for `lane`, as every backend's
    /// reports write it ([`crate::backend::element_text`]).
    fn element_label(&self, acc: &CompiledAccess, lane: usize) -> String {
        let value = |&(r, _, signed): &(usize, u32, bool)| -> i64 {
            let v = self.regs[r][lane];
            if signed {
                i64::from(v as i32)
            } else {
                i64::from(v)
            }
        };
        let index: Vec<i64> = acc.dims.iter().map(value).collect();
        let coords: Vec<i64> = match (&acc.coords, &acc.own) {
            (Some(cs), _) => cs.iter().map(value).collect(),
            (None, OwnInstance::Block(extents)) => {
                let mut rest = self.block;
                let mut coords = vec![0i64; extents.len()];
                for (k, &d) in extents.iter().enumerate().rev() {
                    coords[k] = (rest % u64::from(d.max(1))) as i64;
                    rest /= u64::from(d.max(1));
                }
                coords
            }
            (None, OwnInstance::Zero) => vec![],
        };
        crate::backend::element_text(&acc.name, &coords, &index)
    }

    /// Element address of `acc` for `lane`, or the out-of-bounds error.
    fn address(
        &self,
        code: &ProgramCode,
        acc: &CompiledAccess,
        lane: usize,
    ) -> Result<u64, Box<RunError>> {
        let mut flat = 0u64;
        let mut ok = true;
        for &(r, extent, _) in &acc.dims {
            let i = self.regs[r][lane];
            ok &= i < extent;
            flat = flat * extent as u64 + i as u64;
        }
        let inst = match &acc.coords {
            Some(cs) => {
                let mut inst = 0u64;
                for &(r, extent, _) in cs {
                    let c = self.regs[r][lane];
                    ok &= c < extent;
                    inst = inst * extent as u64 + c as u64;
                }
                inst
            }
            None if matches!(acc.own, OwnInstance::Block(_)) => self.block,
            None => 0,
        };
        if ok {
            return Ok(inst * acc.inst_len + flat);
        }
        Err(Box::new(self.oob(code, acc, lane)))
    }

    fn oob(&self, code: &ProgramCode, acc: &CompiledAccess, lane: usize) -> RunError {
        let show = |list: &[(usize, u32, bool)]| {
            let vals: Vec<String> = list
                .iter()
                .map(|&(r, _, signed)| {
                    let v = self.regs[r][lane];
                    if signed {
                        (v as i32).to_string()
                    } else {
                        v.to_string()
                    }
                })
                .collect();
            let ext: Vec<String> = list.iter().map(|&(_, e, _)| e.to_string()).collect();
            (
                format!("[{}]", vals.join(", ")),
                format!("[{}]", ext.join(", ")),
            )
        };
        let (mut index, mut shape) = show(&acc.dims);
        if let Some(cs) = &acc.coords {
            let (ci, cs) = show(cs);
            index = format!("@{ci}{index}");
            shape = format!("@{cs}{shape}");
        }
        RunError::OutOfBounds {
            site: self.site(code, Some(lane as u32)),
            reference: acc.name.clone(),
            index,
            shape,
        }
    }

    fn lane_order(&self, env: &mut Env, t: usize) -> Option<Vec<usize>> {
        let alt = env.alt.as_deref_mut()?;
        if !alt.shuffle_lanes {
            return None;
        }
        let mut perm = take(&mut alt.perm);
        perm.clear();
        perm.extend(0..t);
        alt.rng.shuffle(&mut perm);
        Some(perm)
    }

    fn return_order(env: &mut Env, order: Option<Vec<usize>>) {
        if let (Some(alt), Some(o)) = (env.alt.as_deref_mut(), order) {
            alt.perm = o;
        }
    }

    /// Checks and records one access when detection is on.
    #[allow(clippy::too_many_arguments)]
    fn detect_access(
        &mut self,
        code: &ProgramCode,
        env: &mut Env,
        acc: &CompiledAccess,
        addr: u64,
        lane: usize,
        read: bool,
        write: bool,
        atomic: bool,
    ) -> Result<(), RunError> {
        let Some(det) = env.detect.as_deref_mut() else {
            return Ok(());
        };
        let t = code.threads;
        let (init, history): (&mut Vec<bool>, Option<&mut History>) = match acc.target {
            Target::Global(b) => {
                let shadow = &mut det.shadow[b];
                if shadow.is_empty() {
                    // Charged with the call's buffers; filling looks at the clock.
                    let len = det.init[b].len();
                    env.limits
                        .fill_in_chunks(len, "allocating race-detection state", |r| {
                            shadow.resize_with(r.end, History::default)
                        })?;
                }
                (&mut det.init[b], shadow.get_mut(addr as usize))
            }
            Target::Smem(s) => (
                &mut self.det.smem_init[s],
                self.det.smem_shadow[s].get_mut(addr as usize),
            ),
            Target::Local(id) => (&mut self.det.local_init[id], None),
        };
        let slot = match acc.target {
            Target::Local(_) => addr as usize * t + lane,
            _ => addr as usize,
        };
        if read && !init.get(slot).copied().unwrap_or(false) {
            return Err(RunError::UninitializedRead {
                site: Site {
                    program: code.program,
                    kernel: code.kernel.clone(),
                    block: self.block,
                    thread: Some(lane as u32),
                },
                reference: acc.name.clone(),
                element: addr,
            });
        }
        if write {
            if let Some(b) = init.get_mut(slot) {
                *b = true;
            }
        }
        if let Some(history) = history {
            let who = Accessor {
                task: self.task,
                epoch: self.epoch,
                thread: lane as u32,
                clock: &self.clock,
            };
            if let Err(first) = detect::record(history, &who, write, atomic) {
                let first_site = match acc.target {
                    Target::Global(_) => env_site(env, first),
                    _ => Site {
                        program: code.program,
                        kernel: code.kernel.clone(),
                        block: self.block,
                        thread: None,
                    },
                };
                let first_site = Site {
                    thread: Some(if first.task == self.task {
                        first.thread_other_than(lane as u32)
                    } else {
                        u32::from(first.thread)
                    }),
                    ..first_site
                };
                return Err(RunError::DataRace {
                    reference: acc.name.clone(),
                    element: addr,
                    first: first_site,
                    second: self.site(code, Some(lane as u32)),
                });
            }
        }
        Ok(())
    }

    fn load(
        &mut self,
        code: &ProgramCode,
        env: &mut Env,
        dst: usize,
        acc: &CompiledAccess,
    ) -> Result<(), RunError> {
        let t = code.threads;
        let mut d = take(&mut self.regs[dst]);
        let result = if env.detect.is_none() && acc.coords.is_none() && acc.dims.len() == 1 {
            self.load_1d(code, env, acc, &mut d)
        } else {
            (|| {
                for l in 0..t {
                    if !self.mask[l] {
                        continue;
                    }
                    let addr = self.address(code, acc, l).map_err(|e| *e)?;
                    self.detect_access(code, env, acc, addr, l, true, false, false)?;
                    d[l] = self.read_elem(env, acc, addr, l, t);
                }
                Ok(())
            })()
        };
        self.regs[dst] = d;
        result
    }

    /// The buffer of a one-dimensional access of this block and the element
    /// its instance starts at (mid-word for a 16-bit instance of odd length).
    fn own_instance<'e>(
        &self,
        code: &ProgramCode,
        env: &'e Env,
        acc: &CompiledAccess,
        b: usize,
    ) -> Result<(&'e [AtomicU32], usize), RunError> {
        let base = match acc.own {
            OwnInstance::Block(_) => self.block * acc.inst_len,
            OwnInstance::Zero => 0,
        };
        let words = &env.bufs[b].words;
        if words_of(acc.elem, base + acc.inst_len) > words.len() as u64 {
            return Err(corrupt(code));
        }
        Ok((words, base as usize))
    }

    /// A one-dimensional load of the block's own instance without detection.
    fn load_1d(
        &self,
        code: &ProgramCode,
        env: &Env,
        acc: &CompiledAccess,
        d: &mut [u32],
    ) -> Result<(), RunError> {
        let t = code.threads;
        let (r, extent, _) = acc.dims[0];
        let idx = &self.regs[r];
        let lanes = lanes_of(self.span, &self.mask);
        let run = consecutive_run(&lanes, idx, extent);
        let packed = acc.elem.is_16bit();
        let result = match acc.target {
            Target::Global(b) => {
                let (words, base) = self.own_instance(code, env, acc, b)?;
                if packed {
                    if let Some(Run { lanes, words: at }) = run {
                        load_run_packed(words, base + at.start, &mut d[lanes]);
                        return Ok(());
                    }
                    try_each_index(lanes, idx, extent, |l, i| {
                        d[l] = load_packed(words, base + i)
                    })
                } else {
                    let words = &words[base..base + acc.inst_len as usize];
                    if let Some(Run { lanes, words: at }) = run {
                        d[lanes]
                            .iter_mut()
                            .zip(&words[at])
                            .for_each(|(d, w)| *d = w.load(Relaxed));
                        return Ok(());
                    }
                    try_each_index(lanes, idx, extent, |l, i| d[l] = words[i].load(Relaxed))
                }
            }
            Target::Smem(s) => {
                let words = &self.smem[s];
                if packed {
                    try_each_index(lanes, idx, extent, |l, i| d[l] = get_packed(words, i))
                } else {
                    if let Some(Run { lanes, words: at }) = run {
                        d[lanes].copy_from_slice(&words[at]);
                        return Ok(());
                    }
                    try_each_index(lanes, idx, extent, |l, i| d[l] = words[i])
                }
            }
            Target::Local(id) => {
                let words = &self.locals[id];
                if packed {
                    try_each_index(lanes, idx, extent, |l, i| {
                        d[l] = get_packed(words, i * t + l)
                    })
                } else {
                    try_each_index(lanes, idx, extent, |l, i| d[l] = words[i * t + l])
                }
            }
        };
        result.map_err(|l| self.oob(code, acc, l))
    }

    /// Element `addr` of an access's memory, as a lane's register holds it
    /// (a 16-bit element in the low half).
    fn read_elem(&self, env: &Env, acc: &CompiledAccess, addr: u64, lane: usize, t: usize) -> u32 {
        let packed = acc.elem.is_16bit();
        let (words, i): (&[u32], usize) = match acc.target {
            Target::Global(b) => {
                let words = &env.bufs[b].words;
                return match packed {
                    true => load_packed(words, addr as usize),
                    false => words[addr as usize].load(Relaxed),
                };
            }
            Target::Smem(s) => (&self.smem[s], addr as usize),
            Target::Local(id) => (&self.locals[id], addr as usize * t + lane),
        };
        match packed {
            true => get_packed(words, i),
            false => words[i],
        }
    }

    /// Writes element `addr` of an access's memory; a 16-bit element
    /// replaces its half of the word and keeps the other.
    fn write_elem(
        &mut self,
        env: &Env,
        acc: &CompiledAccess,
        addr: u64,
        lane: usize,
        t: usize,
        v: u32,
    ) {
        let packed = acc.elem.is_16bit();
        let (words, i): (&mut [u32], usize) = match acc.target {
            Target::Global(b) => {
                let words = &env.bufs[b].words;
                match packed {
                    true => store_packed(words, addr as usize, v),
                    false => words[addr as usize].store(v, Relaxed),
                }
                return;
            }
            Target::Smem(s) => (&mut self.smem[s], addr as usize),
            Target::Local(id) => (&mut self.locals[id], addr as usize * t + lane),
        };
        match packed {
            true => set_packed(words, i, v),
            false => words[i] = v,
        }
    }

    /// A 32-bit word of an atomic's memory (atomics are 32-bit only).
    fn read_word(&self, env: &Env, target: Target, addr: u64, lane: usize, t: usize) -> u32 {
        match target {
            Target::Global(b) => env.bufs[b].words[addr as usize].load(Relaxed),
            Target::Smem(s) => self.smem[s][addr as usize],
            Target::Local(id) => self.locals[id][addr as usize * t + lane],
        }
    }

    fn write_word(&mut self, env: &Env, target: Target, addr: u64, lane: usize, t: usize, v: u32) {
        match target {
            Target::Global(b) => env.bufs[b].words[addr as usize].store(v, Relaxed),
            Target::Smem(s) => self.smem[s][addr as usize] = v,
            Target::Local(id) => self.locals[id][addr as usize * t + lane] = v,
        }
    }

    fn store(
        &mut self,
        code: &ProgramCode,
        env: &mut Env,
        src: usize,
        acc: &CompiledAccess,
    ) -> Result<(), RunError> {
        let t = code.threads;
        let shuffled = env.alt.as_ref().is_some_and(|a| a.shuffle_lanes);
        if env.detect.is_none() && !shuffled && acc.coords.is_none() && acc.dims.len() == 1 {
            return self.store_1d(code, env, src, acc);
        }
        let order = self.lane_order(env, t);
        let result = (|| {
            for k in 0..t {
                let l = order.as_ref().map_or(k, |o| o[k]);
                if !self.mask[l] {
                    continue;
                }
                let addr = self.address(code, acc, l).map_err(|e| *e)?;
                self.detect_access(code, env, acc, addr, l, false, true, false)?;
                let v = self.regs[src][l];
                self.write_elem(env, acc, addr, l, t, v);
            }
            Ok(())
        })();
        Self::return_order(env, order);
        result
    }

    /// A one-dimensional store to the block's own instance without detection
    /// or lane shuffling; lanes before an out-of-bounds one still store.
    fn store_1d(
        &mut self,
        code: &ProgramCode,
        env: &Env,
        src: usize,
        acc: &CompiledAccess,
    ) -> Result<(), RunError> {
        let t = code.threads;
        let (r, extent, _) = acc.dims[0];
        let lanes = lanes_of(self.span, &self.mask);
        let (idx, s) = (&self.regs[r], &self.regs[src]);
        let run = consecutive_run(&lanes, idx, extent);
        let packed = acc.elem.is_16bit();
        let result = match acc.target {
            Target::Global(b) => {
                let (words, base) = self.own_instance(code, env, acc, b)?;
                if packed {
                    if let Some(Run { lanes, words: at }) = run {
                        store_run_packed(words, base + at.start, &s[lanes]);
                        return Ok(());
                    }
                    try_each_index(lanes, idx, extent, |l, i| {
                        store_packed(words, base + i, s[l])
                    })
                } else {
                    let words = &words[base..base + acc.inst_len as usize];
                    if let Some(Run { lanes, words: at }) = run {
                        words[at]
                            .iter()
                            .zip(&s[lanes])
                            .for_each(|(w, &v)| w.store(v, Relaxed));
                        return Ok(());
                    }
                    try_each_index(lanes, idx, extent, |l, i| words[i].store(s[l], Relaxed))
                }
            }
            Target::Smem(k) => {
                let words = &mut self.smem[k];
                if packed {
                    try_each_index(lanes, idx, extent, |l, i| set_packed(words, i, s[l]))
                } else {
                    if let Some(Run { lanes, words: at }) = run {
                        words[at].copy_from_slice(&s[lanes]);
                        return Ok(());
                    }
                    try_each_index(lanes, idx, extent, |l, i| words[i] = s[l])
                }
            }
            Target::Local(id) => {
                let words = &mut self.locals[id];
                if packed {
                    try_each_index(lanes, idx, extent, |l, i| {
                        set_packed(words, i * t + l, s[l])
                    })
                } else {
                    try_each_index(lanes, idx, extent, |l, i| words[i * t + l] = s[l])
                }
            }
        };
        // Lanes before an out-of-bounds one have stored, as on a GPU.
        result.map_err(|l| self.oob(code, acc, l))
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        code: &ProgramCode,
        env: &mut Env,
        op: AtomicOp,
        signed: bool,
        acc: &CompiledAccess,
        args: [usize; 2],
        dst: Option<usize>,
    ) -> Result<(), RunError> {
        let t = code.threads;
        let float = acc.elem == crate::ir::ScalarType::F32;
        let ftz = code.flush_subnormals;
        let order = self.lane_order(env, t);
        let result = (|| {
            for k in 0..t {
                let l = order.as_ref().map_or(k, |o| o[k]);
                if !self.mask[l] {
                    continue;
                }
                let addr = self.address(code, acc, l).map_err(|e| *e)?;
                let reads = op != AtomicOp::Store;
                let writes = op != AtomicOp::Load;
                self.detect_access(code, env, acc, addr, l, reads, writes, true)?;
                let old = self.read_word(env, acc.target, addr, l, t);
                let a = self.regs[args[0]][l];
                let b = self.regs[args[1]][l];
                let new = match op {
                    AtomicOp::Load => None,
                    AtomicOp::Store | AtomicOp::Exchange => Some(a),
                    AtomicOp::Add if float => Some(f32_rmw(old, a, ftz, |x, y| x + y)),
                    AtomicOp::Min if float => Some(f32_rmw(old, a, ftz, f32::min)),
                    AtomicOp::Max if float => Some(f32_rmw(old, a, ftz, f32::max)),
                    AtomicOp::Add => Some(old.wrapping_add(a)),
                    AtomicOp::Min if signed => Some((old as i32).min(a as i32) as u32),
                    AtomicOp::Min => Some(old.min(a)),
                    AtomicOp::Max if signed => Some((old as i32).max(a as i32) as u32),
                    AtomicOp::Max => Some(old.max(a)),
                    AtomicOp::And => Some(old & a),
                    AtomicOp::Or => Some(old | a),
                    AtomicOp::Xor => Some(old ^ a),
                    AtomicOp::CompareExchange => (old == a).then_some(b),
                };
                if let Some(v) = new {
                    self.write_word(env, acc.target, addr, l, t, v);
                }
                if let Some(d) = dst {
                    self.regs[d][l] = old;
                }
            }
            Ok(())
        })();
        Self::return_order(env, order);
        result
    }
}

/// The site of a recorded access (of any block of the call).
fn env_site(env: &Env, rec: Rec) -> Site {
    let task = rec.task as u64;
    let p = env
        .task_offsets
        .iter()
        .rposition(|&o| o <= task)
        .unwrap_or(0);
    let code = &env.codes[p.min(env.codes.len().saturating_sub(1))];
    Site {
        program: code.program,
        kernel: code.kernel.clone(),
        block: task - env.task_offsets[p],
        thread: None,
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

/// The active lanes of an operation.
#[derive(Clone, Copy)]
enum Lanes<'a> {
    /// Exactly the lanes `lo..hi`.
    Range(usize, usize),
    /// The lanes whose bit is set.
    Mask(&'a [bool]),
}

fn lanes_of(span: Option<(usize, usize)>, mask: &[bool]) -> Lanes<'_> {
    match span {
        Some((lo, hi)) => Lanes::Range(lo, hi),
        None => Lanes::Mask(mask),
    }
}

#[inline(always)]
fn each(lanes: Lanes, mut f: impl FnMut(usize)) {
    match lanes {
        Lanes::Range(lo, hi) => (lo..hi).for_each(f),
        Lanes::Mask(m) => {
            for (l, &on) in m.iter().enumerate() {
                if on {
                    f(l);
                }
            }
        }
    }
}

/// Active lanes `lanes` whose indices are the consecutive, in-bounds
/// `words`: the access is one slice copy (the common `x[base + t]`).
struct Run {
    lanes: std::ops::Range<usize>,
    words: std::ops::Range<usize>,
}

fn consecutive_run(lanes: &Lanes, idx: &[u32], extent: u32) -> Option<Run> {
    let Lanes::Range(lo, hi) = *lanes else {
        return None;
    };
    let first = *idx.get(lo)?;
    if u64::from(first) + (hi - lo) as u64 > u64::from(extent) {
        return None;
    }
    // A fold with no early exit vectorises; the check costs less than the
    // per-lane bounds checks it saves.
    let stray = idx[lo..hi]
        .iter()
        .zip(first..)
        .fold(0, |acc, (&i, want)| acc | (i ^ want));
    let first = first as usize;
    (stray == 0).then_some(Run {
        lanes: lo..hi,
        words: first..first + (hi - lo),
    })
}

/// Like [`each`]; stops at the first lane for which `f` fails.
/// Runs `f(lane, index)` for each lane whose index `idx[lane]` is below
/// `extent`; stops at the first lane out of bounds and returns it.
#[inline(always)]
fn try_each_index(
    lanes: Lanes,
    idx: &[u32],
    extent: u32,
    mut f: impl FnMut(usize, usize),
) -> Result<(), usize> {
    let mut one = |l: usize| {
        let i = idx[l];
        if i >= extent {
            return Err(l);
        }
        f(l, i as usize);
        Ok(())
    };
    match lanes {
        Lanes::Range(lo, hi) => (lo..hi).try_for_each(one),
        Lanes::Mask(m) => {
            for (l, &on) in m.iter().enumerate() {
                if on {
                    one(l)?;
                }
            }
            Ok(())
        }
    }
}

/// The span of a mask: `Some((lo, hi))` when exactly the lanes `lo..hi` are
/// set. Counting vectorises; only the scan for the first set lane stops
/// early (a scan from the end made prefix masks such as `if t < half` walk
/// every unset lane byte by byte).
fn span_of(mask: &[bool]) -> Option<(usize, usize)> {
    let ones = |lanes: &[bool]| lanes.iter().map(|&m| m as u32).sum::<u32>() as usize;
    let count = ones(mask);
    if count == 0 {
        return Some((0, 0));
    }
    let lo = mask.iter().position(|&m| m).unwrap_or(0);
    let hi = lo + count;
    (hi <= mask.len() && ones(&mask[lo..hi]) == count).then_some((lo, hi))
}

/// Updates every lane's mask bit from one register; returns whether any
/// lane is left, and the new span.
#[inline(always)]
fn narrow(
    mask: &mut [bool],
    c: &[u32],
    f: impl Fn(bool, u32) -> bool,
) -> (bool, Option<(usize, usize)>) {
    for (m, &c) in mask.iter_mut().zip(c) {
        *m = f(*m, c);
    }
    let span = span_of(mask);
    (span != Some((0, 0)), span)
}

#[inline(always)]
fn narrow2(
    mask: &mut [bool],
    a: &[u32],
    b: &[u32],
    f: impl Fn(bool, u32, u32) -> bool,
) -> (bool, Option<(usize, usize)>) {
    for ((m, &a), &b) in mask.iter_mut().zip(a).zip(b) {
        *m = f(*m, a, b);
    }
    let span = span_of(mask);
    (span != Some((0, 0)), span)
}

#[inline(always)]
fn map2(d: &mut [u32], a: &[u32], b: &[u32], lanes: Lanes, f: impl Fn(u32, u32) -> u32) {
    match lanes {
        Lanes::Range(lo, hi) => {
            for ((d, &a), &b) in d[lo..hi].iter_mut().zip(&a[lo..hi]).zip(&b[lo..hi]) {
                *d = f(a, b);
            }
        }
        Lanes::Mask(m) => {
            // Pure operations cannot fail: compute every lane, keep the active ones.
            for (((d, &a), &b), &m) in d.iter_mut().zip(a).zip(b).zip(m) {
                let v = f(a, b);
                *d = if m { v } else { *d };
            }
        }
    }
}

#[inline(always)]
fn map1(d: &mut [u32], a: &[u32], lanes: Lanes, f: impl Fn(u32) -> u32) {
    match lanes {
        Lanes::Range(lo, hi) => {
            for (d, &a) in d[lo..hi].iter_mut().zip(&a[lo..hi]) {
                *d = f(a);
            }
        }
        Lanes::Mask(m) => {
            for ((d, &a), &m) in d.iter_mut().zip(a).zip(m) {
                let v = f(a);
                *d = if m { v } else { *d };
            }
        }
    }
}

/// The bits of a subnormal f32 become a zero of the same sign; others stay.
#[inline(always)]
fn flush(bits: u32) -> u32 {
    if bits & 0x7f80_0000 == 0 {
        bits & 0x8000_0000
    } else {
        bits
    }
}

/// One f32 atomic read-modify-write: `f` of the stored value and the
/// operand, one IEEE operation (`f32::min`/`max` return the other operand
/// when exactly one is NaN, the language's rule). A flushing adapter flushes
/// both operands and the result, as it does for the plain operation.
/// How a warp reduction combines values.
#[derive(Clone, Copy)]
struct WarpValue {
    ty: ScalarType,
    ftz: bool,
}

impl WarpValue {
    fn combine(self, op: WarpOp, a: u32, b: u32) -> u32 {
        use ScalarType::*;
        match (op, self.ty) {
            (WarpOp::ReduceAdd, F32) => f32_rmw(a, b, self.ftz, |x, y| x + y),
            (WarpOp::ReduceMin, F32) => f32_rmw(a, b, self.ftz, f32::min),
            (WarpOp::ReduceMax, F32) => f32_rmw(a, b, self.ftz, f32::max),
            (WarpOp::ReduceAdd, _) => a.wrapping_add(b),
            (WarpOp::ReduceMin, I32) => (a as i32).min(b as i32) as u32,
            (WarpOp::ReduceMax, I32) => (a as i32).max(b as i32) as u32,
            (WarpOp::ReduceMin, _) => a.min(b),
            (WarpOp::ReduceMax, _) => a.max(b),
            _ => a,
        }
    }
}

/// One warp collective over every warp with active lanes (docs/text-format.md
/// defines each op; reductions combine in the butterfly order of
/// docs/numerics.md: halves 16 apart, then 8, 4, 2, 1). Fails with the warp's
/// index when only some of its lanes are active.
fn warp_collective(
    op: WarpOp,
    shape: WarpValue,
    dst: &mut [u32],
    value: &[u32],
    lane: Option<&[u32]>,
    lanes: Lanes,
) -> Result<(), usize> {
    let warp = WARP_SIZE as usize;
    let mut active = vec![0usize; value.len().div_ceil(warp)];
    each(lanes, |l| active[l / warp] += 1);
    for (w, &count) in active.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let base = w * warp;
        if count != warp || base + warp > value.len() {
            return Err(w);
        }
        let v = &value[base..base + warp];
        let out = &mut dst[base..base + warp];
        let arg = |i: usize| lane.map_or(0, |l| l[base + i] % WARP_SIZE) as usize;
        match op {
            WarpOp::ShuffleIdx => (0..warp).for_each(|i| out[i] = v[arg(i)]),
            WarpOp::ShuffleUp => (0..warp).for_each(|i| {
                out[i] = i.checked_sub(arg(i)).map_or(v[i], |src| v[src]);
            }),
            WarpOp::ShuffleDown => (0..warp).for_each(|i| {
                let src = i + arg(i);
                out[i] = if src < warp { v[src] } else { v[i] };
            }),
            WarpOp::ShuffleXor => (0..warp).for_each(|i| out[i] = v[i ^ arg(i)]),
            WarpOp::VoteAny => out.fill(u32::from(v.iter().any(|&p| p != 0))),
            WarpOp::VoteAll => out.fill(u32::from(v.iter().all(|&p| p != 0))),
            WarpOp::Ballot => {
                let bits = (0..warp).fold(0u32, |acc, i| acc | (u32::from(v[i] != 0) << i));
                out.fill(bits);
            }
            WarpOp::ReduceAdd | WarpOp::ReduceMin | WarpOp::ReduceMax => {
                let mut t = [0u32; WARP_SIZE as usize];
                t.copy_from_slice(v);
                let mut half = warp / 2;
                while half > 0 {
                    for j in 0..half {
                        t[j] = shape.combine(op, t[j], t[j + half]);
                    }
                    half /= 2;
                }
                out.fill(t[0]);
            }
        }
    }
    Ok(())
}

/// `mma_m16n8k16` over every warp with active lanes: gathers the warp's
/// fragments into A (16x16), B (16x8) and C (16x8) by the layout of
/// docs/text-format.md, computes D[r][n] = C[r][n] + sum over k of
/// A[r][k] B[k][n] in the fixed order of docs/numerics.md (start from C, add
/// the products for k = 0, 1, ..., 15, each product and each sum an f32
/// operation: products of f16 values are exact), or under a probe what
/// `arithmetic.probe` says, and scatters D to `d`.
/// Fails with the warp's index when only some of its lanes are active.
fn mma_m16n8k16(
    regs: &MmaRegs,
    all: &[Vec<u32>],
    d: &mut [Vec<u32>; mma::C_LEN as usize],
    lanes: Lanes,
    arithmetic: MmaArithmetic,
) -> Result<(), usize> {
    let MmaArithmetic { ftz, probe } = arithmetic;
    let warp = WARP_SIZE as usize;
    let threads = d[0].len();
    let mut active = vec![0usize; threads.div_ceil(warp)];
    each(lanes, |l| active[l / warp] += 1);
    let widen = |bits: u32| {
        let half = bits as u16;
        if regs.bf16 {
            numerics::bf16_to_f32(half)
        } else {
            numerics::f16_to_f32(half)
        }
    };
    let maybe_flush = |v: f32| {
        if ftz {
            f32::from_bits(flush(v.to_bits()))
        } else {
            v
        }
    };
    let (m, n, k) = (mma::M as usize, mma::N as usize, mma::K as usize);
    for (w, &count) in active.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let base = w * warp;
        if count != warp || base + warp > threads {
            return Err(w);
        }
        let mut a = vec![[0f32; 16]; m];
        let mut b = vec![[0f32; 8]; k];
        let mut c = vec![[0f32; 8]; m];
        for lane in 0..WARP_SIZE {
            let t = base + lane as usize;
            for (i, &r) in (0..).zip(&regs.a) {
                let (row, col) = mma::a_position(lane, i);
                a[row as usize][col as usize] = maybe_flush(widen(all[r][t]));
            }
            for (i, &r) in (0..).zip(&regs.b) {
                let (row, col) = mma::b_position(lane, i);
                b[row as usize][col as usize] = maybe_flush(widen(all[r][t]));
            }
            for (i, &r) in (0..).zip(&regs.c) {
                let (row, col) = mma::c_position(lane, i);
                c[row as usize][col as usize] = maybe_flush(f32::from_bits(all[r][t]));
            }
        }
        let mut out = vec![[0f32; 8]; m];
        for row in 0..m {
            for col in 0..n {
                out[row][col] = match probe {
                    MmaProbe::Off => {
                        let mut acc = c[row][col];
                        for kk in 0..k {
                            let product = maybe_flush(a[row][kk] * b[kk][col]);
                            acc = maybe_flush(acc + product);
                        }
                        acc
                    }
                    MmaProbe::Magnitude => {
                        // Each product of two widened 16-bit values is exact in f64.
                        let products =
                            (0..k).map(|kk| (f64::from(a[row][kk]) * f64::from(b[kk][col])).abs());
                        f32_at_least(std::iter::once(f64::from(c[row][col]).abs()).chain(products))
                    }
                    MmaProbe::StepCount => f32_at_least([f64::from(c[row][col]).abs(), 1.0]),
                    MmaProbe::Start => c[row][col].abs(),
                };
            }
        }
        for lane in 0..WARP_SIZE {
            let t = base + lane as usize;
            for (i, dst) in (0..).zip(d.iter_mut()) {
                let (row, col) = mma::c_position(lane, i);
                dst[t] = out[row as usize][col as usize].to_bits();
            }
        }
    }
    Ok(())
}

/// How `mma_m16n8k16` computes: flushing subnormals or not, and its probe.
#[derive(Clone, Copy)]
struct MmaArithmetic {
    ftz: bool,
    probe: MmaProbe,
}

/// An f32 no smaller than the exact sum of `terms`, at most 17
/// non-negative values each exact in f64 (NaN stays NaN, past f32's range
/// is +inf). The f64 sum is exact unless an addition rounded, which
/// TwoSum's error term shows; then it is below the exact sum by less than
/// 17 * 2^-53 relative, so raising it by 2^-46 (a rounding of 2^-53 more)
/// puts it above. Rounding up to f32 keeps it there.
fn f32_at_least(terms: impl IntoIterator<Item = f64>) -> f32 {
    let mut sum = 0.0f64;
    let mut exact = true;
    for term in terms {
        let next = sum + term;
        let moved = next - sum;
        exact &= (sum - (next - moved)) + (term - moved) == 0.0;
        sum = next;
    }
    let bound = if exact {
        sum
    } else {
        sum * (1.0 + f64::powi(2.0, -46))
    };
    let nearest = bound as f32;
    if f64::from(nearest) < bound {
        nearest.next_up()
    } else {
        nearest
    }
}

fn f32_rmw(old: u32, operand: u32, ftz: bool, f: impl Fn(f32, f32) -> f32) -> u32 {
    let maybe_flush = |bits: u32| if ftz { flush(bits) } else { bits };
    let x = f32::from_bits(maybe_flush(old));
    let y = f32::from_bits(maybe_flush(operand));
    maybe_flush(f(x, y).to_bits())
}

/// A register's lanes with subnormal f32 values flushed.
fn flushed(register: &[u32]) -> Vec<u32> {
    register.iter().map(|&bits| flush(bits)).collect()
}

#[inline(always)]
fn ff(f: impl Fn(f32, f32) -> f32) -> impl Fn(u32, u32) -> u32 {
    move |a, b| f(f32::from_bits(a), f32::from_bits(b)).to_bits()
}

/// Under an extra schedule with preemption, whether the block yields at this
/// semaphore boundary (one draw in three).
fn preempt_here(env: &mut Env) -> bool {
    env.alt
        .as_deref_mut()
        .is_some_and(|a| a.preempt && a.rng.below(3) == 0)
}

#[inline(always)]
fn fcmp(f: impl Fn(f32, f32) -> bool) -> impl Fn(u32, u32) -> u32 {
    move |a, b| f(f32::from_bits(a), f32::from_bits(b)) as u32
}

#[inline(always)]
fn f1(f: impl Fn(f32) -> f32) -> impl Fn(u32) -> u32 {
    move |a| f(f32::from_bits(a)).to_bits()
}

/// Element `i` of packed 16-bit storage (docs/design.md: 2 bytes an element,
/// little-endian): the word `i / 2` and the shift of its half (low for even `i`).
#[inline(always)]
fn half_of(i: usize) -> (usize, u32) {
    (i >> 1, ((i & 1) as u32) << 4)
}

#[inline(always)]
fn load_packed(words: &[AtomicU32], i: usize) -> u32 {
    let (w, shift) = half_of(i);
    (words[w].load(Relaxed) >> shift) & 0xffff
}

/// Replaces element `i`'s half with an atomic read-modify-write, so that a
/// neighbouring element written at the same time from another host core
/// (the parallel runner) keeps its write.
#[inline(always)]
fn store_packed(words: &[AtomicU32], i: usize, v: u32) {
    let (w, shift) = half_of(i);
    let keep = !(0xffff << shift);
    let half = (v & 0xffff) << shift;
    // The closure always gives a value: the update cannot fail.
    let _ = words[w].fetch_update(Relaxed, Relaxed, |old| Some((old & keep) | half));
}

/// Consecutive elements from `start` into `d`: one word load for two lanes.
#[inline(always)]
fn load_run_packed(words: &[AtomicU32], start: usize, d: &mut [u32]) {
    let (head, d) = d.split_at_mut((start % 2).min(d.len()));
    if let Some(first) = head.first_mut() {
        *first = load_packed(words, start);
    }
    let start = start + head.len();
    for (pair, w) in d.chunks_mut(2).zip(&words[start / 2..]) {
        let v = w.load(Relaxed);
        pair[0] = v & 0xffff;
        if let Some(high) = pair.get_mut(1) {
            *high = v >> 16;
        }
    }
}

/// Consecutive elements from `start`: words the run covers whole are plain
/// stores (any other writer of them would race with this one); a half word
/// at either end is a read-modify-write.
#[inline(always)]
fn store_run_packed(words: &[AtomicU32], start: usize, mut values: &[u32]) {
    let mut start = start;
    if start % 2 == 1 {
        if let Some((&first, rest)) = values.split_first() {
            store_packed(words, start, first);
            values = rest;
            start += 1;
        }
    }
    let pairs = values.chunks_exact(2);
    if let [last] = pairs.remainder() {
        store_packed(words, start + values.len() - 1, *last);
    }
    for (w, pair) in words[start / 2..].iter().zip(pairs) {
        w.store((pair[0] & 0xffff) | (pair[1] << 16), Relaxed);
    }
}

/// Like [`load_packed`], for memory of one block (smem, locals).
#[inline(always)]
fn get_packed(words: &[u32], i: usize) -> u32 {
    let (w, shift) = half_of(i);
    (words[w] >> shift) & 0xffff
}

#[inline(always)]
fn set_packed(words: &mut [u32], i: usize, v: u32) {
    let (w, shift) = half_of(i);
    words[w] = (words[w] & !(0xffff << shift)) | ((v & 0xffff) << shift);
}

/// The 16-bit rules of `numerics`, on register bits (the low half).
impl Half {
    #[inline(always)]
    fn widen(self, bits: u32) -> f32 {
        match self {
            Half::F16 => numerics::f16_to_f32(bits as u16),
            Half::BF16 => numerics::bf16_to_f32(bits as u16),
        }
    }

    #[inline(always)]
    fn round(self, v: f32) -> u32 {
        u32::from(match self {
            Half::F16 => numerics::f16_from_f32(v),
            Half::BF16 => numerics::bf16_from_f32(v),
        })
    }

    /// Every `i32`/`u32` value is exact in an `i64`; the conversion rounds once.
    fn round_integer(self, v: i64) -> u32 {
        numerics::from_integer(self.ty(), v).map_or(0, u32::from)
    }

    fn fma(self, a: u32, b: u32, c: u32) -> u32 {
        numerics::fma16(self.ty(), a as u16, b as u16, c as u16).map_or(0, u32::from)
    }
}

/// A 16-bit value whose widened value is an f32 subnormal becomes a zero of
/// the same sign (only bf16 has such values).
#[inline(always)]
fn flush16(h: Half, bits: u32) -> u32 {
    h.round(f32::from_bits(flush(h.widen(bits).to_bits())))
}

/// Lanes a 16-bit operation converts at a time (on the stack).
const CHUNK: usize = 64;

/// Widens 16-bit register lanes to f32 (exact), flushed under `FTZ` (rule
/// 9: flushing applies to the f32 intermediates). f16 goes through
/// `numerics::f16_to_f32_slice`, several lanes at a time.
#[inline(always)]
fn widen_chunk<const BF: bool, const FTZ: bool>(src: &[u32], dst: &mut [f32]) {
    if BF {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = numerics::bf16_to_f32(s as u16);
        }
    } else {
        let mut halves = [half::f16::ZERO; CHUNK];
        let halves = &mut halves[..src.len()];
        for (h, &s) in halves.iter_mut().zip(src) {
            *h = half::f16::from_bits(s as u16);
        }
        numerics::f16_to_f32_slice(halves, dst);
    }
    if FTZ {
        dst.iter_mut()
            .for_each(|v| *v = f32::from_bits(flush(v.to_bits())));
    }
}

/// Rounds f32 results (flushed under `FTZ`) once to the 16-bit format, into
/// register lanes (high half zero); f16 through `numerics::f16_from_f32_slice`.
#[inline(always)]
fn round_chunk<const BF: bool, const FTZ: bool>(src: &mut [f32], dst: &mut [u32]) {
    if FTZ {
        src.iter_mut()
            .for_each(|v| *v = f32::from_bits(flush(v.to_bits())));
    }
    if BF {
        for (d, &s) in dst.iter_mut().zip(src.iter()) {
            *d = u32::from(numerics::bf16_from_f32(s));
        }
    } else {
        let mut halves = [half::f16::ZERO; CHUNK];
        let halves = &mut halves[..src.len()];
        numerics::f16_from_f32_slice(src, halves);
        for (d, h) in dst.iter_mut().zip(halves.iter()) {
            *d = u32::from(h.to_bits());
        }
    }
}

/// Runs `fill(lanes, out)` over chunks of at most [`CHUNK`] lanes, `out`
/// being the destination lanes. Pure operations cannot fail: under a mask
/// every lane is computed and the active ones kept.
#[inline(always)]
fn by_chunks(d: &mut [u32], m: Lanes, mut fill: impl FnMut(std::ops::Range<usize>, &mut [u32])) {
    match m {
        Lanes::Range(lo, hi) => {
            for start in (lo..hi).step_by(CHUNK) {
                let end = (start + CHUNK).min(hi);
                fill(start..end, &mut d[start..end]);
            }
        }
        Lanes::Mask(mask) => {
            let mut out = [0u32; CHUNK];
            for start in (0..d.len()).step_by(CHUNK) {
                let end = (start + CHUNK).min(d.len());
                fill(start..end, &mut out[..end - start]);
                for ((d, &v), &on) in d[start..end].iter_mut().zip(&out).zip(&mask[start..end]) {
                    if on {
                        *d = v;
                    }
                }
            }
        }
    }
}

/// Binds `$f` to the f32 function of a [`FloatBin`] and evaluates `$body`
/// once per operation, so each lane loop is monomorphised (and f32's
/// vectorises). The one definition of each function for f32 and 16 bits.
macro_rules! with_float_bin {
    ($op:expr, |$f:ident| $body:expr) => {
        match $op {
            super::compile::FloatBin::Add => {
                let $f = |x: f32, y: f32| x + y;
                $body
            }
            super::compile::FloatBin::Sub => {
                let $f = |x: f32, y: f32| x - y;
                $body
            }
            super::compile::FloatBin::Mul => {
                let $f = |x: f32, y: f32| x * y;
                $body
            }
            super::compile::FloatBin::Div => {
                let $f = |x: f32, y: f32| x / y;
                $body
            }
            super::compile::FloatBin::Rem => {
                let $f = |x: f32, y: f32| x % y;
                $body
            }
            // f32::min/max return the other operand when exactly one is NaN.
            super::compile::FloatBin::Min => {
                let $f = f32::min;
                $body
            }
            super::compile::FloatBin::Max => {
                let $f = f32::max;
                $body
            }
            super::compile::FloatBin::Pow => {
                let $f = f32::powf;
                $body
            }
        }
    };
}

macro_rules! with_float_cmp {
    ($op:expr, |$f:ident| $body:expr) => {
        match $op {
            super::compile::FloatCmp::Eq => {
                let $f = |x: f32, y: f32| x == y;
                $body
            }
            super::compile::FloatCmp::Ne => {
                let $f = |x: f32, y: f32| x != y;
                $body
            }
            super::compile::FloatCmp::Lt => {
                let $f = |x: f32, y: f32| x < y;
                $body
            }
            super::compile::FloatCmp::Le => {
                let $f = |x: f32, y: f32| x <= y;
                $body
            }
        }
    };
}

macro_rules! with_float_un {
    ($op:expr, |$f:ident| $body:expr) => {
        match $op {
            super::compile::FloatUn::Neg => {
                let $f = |x: f32| -x;
                $body
            }
            super::compile::FloatUn::Abs => {
                let $f = f32::abs;
                $body
            }
            super::compile::FloatUn::Floor => {
                let $f = f32::floor;
                $body
            }
            super::compile::FloatUn::Ceil => {
                let $f = f32::ceil;
                $body
            }
            super::compile::FloatUn::Sqrt => {
                let $f = f32::sqrt;
                $body
            }
            super::compile::FloatUn::Rsqrt => {
                let $f = |x: f32| 1.0 / x.sqrt();
                $body
            }
            super::compile::FloatUn::Exp => {
                let $f = f32::exp;
                $body
            }
            super::compile::FloatUn::Log => {
                let $f = f32::ln;
                $body
            }
            super::compile::FloatUn::Sin => {
                let $f = f32::sin;
                $body
            }
            super::compile::FloatUn::Cos => {
                let $f = f32::cos;
                $body
            }
            super::compile::FloatUn::Tanh => {
                let $f = f32::tanh;
                $body
            }
        }
    };
}

/// Runs `$func::<BF, FTZ>($args)` for a format and the flushing flag.
macro_rules! by_format {
    ($fmt:expr, $ftz:expr, $func:ident($($arg:expr),*)) => {
        match ($fmt, $ftz) {
            (super::compile::Half::F16, false) => $func::<false, false>($($arg),*),
            (super::compile::Half::F16, true) => $func::<false, true>($($arg),*),
            (super::compile::Half::BF16, false) => $func::<true, false>($($arg),*),
            (super::compile::Half::BF16, true) => $func::<true, true>($($arg),*),
        }
    };
}

/// A 16-bit arithmetic operation: the f32 operation on the exact widened
/// operands, rounded once (docs/design.md; `numerics`).
fn half_binary<const BF: bool, const FTZ: bool>(
    op: FloatBin,
    d: &mut [u32],
    a: &[u32],
    b: &[u32],
    m: Lanes,
    b_uniform: bool,
) {
    with_float_bin!(op, |f| by_chunks(d, m, |lanes, out| {
        let n = lanes.len();
        let (mut x, mut y) = ([0f32; CHUNK], [0f32; CHUNK]);
        widen_chunk::<BF, FTZ>(&a[lanes.clone()], &mut x[..n]);
        if b_uniform {
            widen_chunk::<BF, FTZ>(&b[lanes.start..lanes.start + 1], &mut y[..1]);
            let v = y[0];
            y[..n].fill(v);
        } else {
            widen_chunk::<BF, FTZ>(&b[lanes], &mut y[..n]);
        }
        for (x, &y) in x[..n].iter_mut().zip(&y[..n]) {
            *x = f(*x, y);
        }
        round_chunk::<BF, FTZ>(&mut x[..n], out);
    }))
}

/// A 16-bit comparison: on the exact widened values.
fn half_compare<const BF: bool, const FTZ: bool>(
    op: FloatCmp,
    d: &mut [u32],
    a: &[u32],
    b: &[u32],
    m: Lanes,
) {
    with_float_cmp!(op, |f| by_chunks(d, m, |lanes, out| {
        let n = lanes.len();
        let (mut x, mut y) = ([0f32; CHUNK], [0f32; CHUNK]);
        widen_chunk::<BF, FTZ>(&a[lanes.clone()], &mut x[..n]);
        widen_chunk::<BF, FTZ>(&b[lanes], &mut y[..n]);
        for ((o, &x), &y) in out.iter_mut().zip(&x[..n]).zip(&y[..n]) {
            *o = f(x, y) as u32;
        }
    }))
}

/// A 16-bit unary operation or math function: the f32 function of the
/// widened value, rounded once.
fn half_unary<const BF: bool, const FTZ: bool>(op: FloatUn, d: &mut [u32], a: &[u32], m: Lanes) {
    with_float_un!(op, |f| by_chunks(d, m, |lanes, out| {
        let n = lanes.len();
        let mut x = [0f32; CHUNK];
        widen_chunk::<BF, FTZ>(&a[lanes], &mut x[..n]);
        x[..n].iter_mut().for_each(|x| *x = f(*x));
        round_chunk::<BF, FTZ>(&mut x[..n], out);
    }))
}

/// A 16-bit value widened to f32 bits (`H2F`; the caller flushes the result).
fn half_to_f32<const BF: bool, const FTZ: bool>(d: &mut [u32], a: &[u32], m: Lanes) {
    by_chunks(d, m, |lanes, out| {
        let n = lanes.len();
        let mut x = [0f32; CHUNK];
        widen_chunk::<BF, FTZ>(&a[lanes], &mut x[..n]);
        for (o, x) in out.iter_mut().zip(&x[..n]) {
            *o = x.to_bits();
        }
    })
}

/// An f32 rounded to a 16-bit format (`F2H`; the caller flushed the operand).
fn f32_to_half<const BF: bool, const FTZ: bool>(d: &mut [u32], a: &[u32], m: Lanes) {
    by_chunks(d, m, |lanes, out| {
        let n = lanes.len();
        let mut x = [0f32; CHUNK];
        for (x, &bits) in x[..n].iter_mut().zip(&a[lanes]) {
            *x = f32::from_bits(bits);
        }
        round_chunk::<BF, FTZ>(&mut x[..n], out);
    })
}

/// How a binary operation runs beyond its operands.
#[derive(Clone, Copy)]
struct Flags {
    /// Flush subnormal f32 intermediates of 16-bit operations (f32
    /// operations have their operands and results flushed by the caller).
    ftz: bool,
    /// The second operand has one value on every lane.
    uniform: bool,
}

/// One binary operation over all (active) lanes, with docs/design.md's numerics.
fn binary(op: BinKind, d: &mut [u32], a: &[u32], b: &[u32], m: Lanes, flags: Flags) {
    use BinKind::*;
    let Flags { ftz, uniform } = flags;
    match op {
        IAdd => map2(d, a, b, m, u32::wrapping_add),
        ISub => map2(d, a, b, m, u32::wrapping_sub),
        IMul => map2(d, a, b, m, u32::wrapping_mul),
        SDiv => map2(d, a, b, m, |x, y| {
            if y == 0 {
                x
            } else {
                (x as i32).wrapping_div(y as i32) as u32
            }
        }),
        UDiv => map2(d, a, b, m, |x, y| x.checked_div(y).unwrap_or(x)),
        SRem => map2(d, a, b, m, |x, y| {
            if y == 0 {
                0
            } else {
                (x as i32).wrapping_rem(y as i32) as u32
            }
        }),
        URem => map2(d, a, b, m, |x, y| x.checked_rem(y).unwrap_or(0)),
        And => map2(d, a, b, m, |x, y| x & y),
        Or => map2(d, a, b, m, |x, y| x | y),
        Xor => map2(d, a, b, m, |x, y| x ^ y),
        Shl => map2(d, a, b, m, u32::wrapping_shl),
        SShr => map2(d, a, b, m, |x, y| (x as i32).wrapping_shr(y) as u32),
        UShr => map2(d, a, b, m, u32::wrapping_shr),
        LogicAnd => map2(d, a, b, m, |x, y| (x != 0 && y != 0) as u32),
        LogicOr => map2(d, a, b, m, |x, y| (x != 0 || y != 0) as u32),
        Eq => map2(d, a, b, m, |x, y| (x == y) as u32),
        Ne => map2(d, a, b, m, |x, y| (x != y) as u32),
        BEq => map2(d, a, b, m, |x, y| ((x != 0) == (y != 0)) as u32),
        BNe => map2(d, a, b, m, |x, y| ((x != 0) != (y != 0)) as u32),
        SLt => map2(d, a, b, m, |x, y| ((x as i32) < (y as i32)) as u32),
        ULt => map2(d, a, b, m, |x, y| (x < y) as u32),
        SLe => map2(d, a, b, m, |x, y| ((x as i32) <= (y as i32)) as u32),
        ULe => map2(d, a, b, m, |x, y| (x <= y) as u32),
        SMin => map2(d, a, b, m, |x, y| (x as i32).min(y as i32) as u32),
        UMin => map2(d, a, b, m, u32::min),
        SMax => map2(d, a, b, m, |x, y| (x as i32).max(y as i32) as u32),
        UMax => map2(d, a, b, m, u32::max),
        Float(op) => with_float_bin!(op, |f| map2(d, a, b, m, ff(f))),
        FloatCmp(op) => with_float_cmp!(op, |f| map2(d, a, b, m, fcmp(f))),
        Half(op, h) => by_format!(h, ftz, half_binary(op, d, a, b, m, uniform)),
        HalfCmp(op, h) => by_format!(h, ftz, half_compare(op, d, a, b, m)),
    }
}

/// One unary operation or conversion over all (active) lanes; `ftz` as in
/// [`binary`].
fn unary(op: UnKind, d: &mut [u32], a: &[u32], m: Lanes, ftz: bool) {
    use UnKind::*;
    // A 16-bit operand widened to f32, flushed when the adapter flushes.
    let wide = |h: super::compile::Half, x: u32| {
        let v = h.widen(x);
        if ftz {
            f32::from_bits(flush(v.to_bits()))
        } else {
            v
        }
    };
    match op {
        Copy => map1(d, a, m, |x| x),
        Low16 => map1(d, a, m, |x| x & 0xffff),
        INeg => map1(d, a, m, u32::wrapping_neg),
        LogicNot => map1(d, a, m, |x| (x == 0) as u32),
        BitNot => map1(d, a, m, |x| !x),
        IAbs => map1(d, a, m, |x| (x as i32).wrapping_abs() as u32),
        Bits(f) => map1(d, a, m, |x| fold::bit_operation(f, x).unwrap_or(x)),
        Float(op) => with_float_un!(op, |f| map1(d, a, m, f1(f))),
        Half(op, h) => by_format!(h, ftz, half_unary(op, d, a, m)),
        F2I => map1(d, a, m, |x| f32::from_bits(x) as i32 as u32),
        F2U => map1(d, a, m, |x| f32::from_bits(x) as u32),
        I2F => map1(d, a, m, |x| (x as i32 as f32).to_bits()),
        U2F => map1(d, a, m, |x| (x as f32).to_bits()),
        F2B => map1(d, a, m, |x| (f32::from_bits(x) != 0.0) as u32),
        I2B => map1(d, a, m, |x| (x != 0) as u32),
        B2F => map1(d, a, m, |x| if x != 0 { 1.0f32.to_bits() } else { 0 }),
        B2I => map1(d, a, m, |x| (x != 0) as u32),
        // The operand was flushed by the caller (it reads an f32); an f32
        // of normal magnitude never rounds to a 16-bit subnormal of bf16.
        F2H(h) => by_format!(h, ftz, f32_to_half(d, a, m)),
        H2F(h) => by_format!(h, ftz, half_to_f32(d, a, m)),
        I2H(h) => map1(d, a, m, |x| h.round_integer(i64::from(x as i32))),
        U2H(h) => map1(d, a, m, |x| h.round_integer(i64::from(x))),
        B2H(h) => map1(d, a, m, |x| h.round_integer(i64::from(x != 0))),
        // Through the exact f32, then f32's rules (truncate, saturate, NaN to 0).
        H2I(h) => map1(d, a, m, |x| wide(h, x) as i32 as u32),
        H2U(h) => map1(d, a, m, |x| wide(h, x) as u32),
        H2B(h) => map1(d, a, m, |x| (wide(h, x) != 0.0) as u32),
        H2H { from, to } => map1(d, a, m, |x| to.round(wide(from, x))),
    }
}

#[cfg(test)]
mod tests {
    use super::{
        f32_at_least, load_run_packed, round_chunk, span_of, store_run_packed, widen_chunk, CHUNK,
    };
    use crate::numerics;
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

    /// The mma probes' rounding: exact sums that are floats stay, others go
    /// up, including sums that f64 itself rounded.
    #[test]
    fn f32_at_least_never_underestimates() {
        assert_eq!(f32_at_least([3.0, 0.25, 0.0]), 3.25);
        assert_eq!(f32_at_least([]), 0.0);
        // 2^24 + 1 is between the floats 2^24 and 2^24 + 2.
        assert_eq!(f32_at_least([16_777_216.0, 1.0]), 16_777_218.0);
        // 1 + 2^-60 rounds to 1 in f64: the result must still be above 1.
        let tiny = f64::powi(2.0, -60);
        assert_eq!(f32_at_least([1.0, tiny]), 1.0f32.next_up());
        assert_eq!(
            f32_at_least([f64::from(f32::MAX), f64::from(f32::MAX)]),
            f32::INFINITY
        );
        assert!(f32_at_least([1.0, f64::NAN]).is_nan());
        assert_eq!(f32_at_least([1.0, f64::INFINITY]), f32::INFINITY);
    }

    /// The chunked 16-bit conversions are `numerics`' rules: every f16 and
    /// bf16 widens to the same f32, and f32 values around every f16 and bf16
    /// (ties, overflow, subnormals, NaN) round to the same bits.
    #[test]
    fn chunks_convert_as_numerics() {
        let all: Vec<u32> = (0..=u16::MAX).map(u32::from).collect();
        let mut wide = vec![0f32; CHUNK];
        let mut bits = vec![0u32; CHUNK];
        let same = |got: u32, want: u16, to: fn(u16) -> f32| {
            got == u32::from(want) || (to(got as u16).is_nan() && to(want).is_nan())
        };
        for chunk in all.chunks(CHUNK) {
            let n = chunk.len();
            widen_chunk::<false, false>(chunk, &mut wide[..n]);
            for (&b, w) in chunk.iter().zip(&wide) {
                let want = numerics::f16_to_f32(b as u16);
                assert!(
                    w.to_bits() == want.to_bits() || (w.is_nan() && want.is_nan()),
                    "{b:#x}"
                );
            }
            widen_chunk::<true, false>(chunk, &mut wide[..n]);
            for (&b, w) in chunk.iter().zip(&wide) {
                let want = numerics::bf16_to_f32(b as u16);
                assert!(
                    w.to_bits() == want.to_bits() || (w.is_nan() && want.is_nan()),
                    "{b:#x}"
                );
            }
        }
        let mut values: Vec<f32> = vec![f32::MAX, f32::MIN, f32::NAN, f32::INFINITY, 65520.0];
        for &b in &all {
            for v in [
                numerics::f16_to_f32(b as u16),
                numerics::bf16_to_f32(b as u16),
            ] {
                let up = f32::from_bits(v.to_bits().wrapping_add(1));
                let tie_f16 = f32::from_bits(v.to_bits().wrapping_add(1 << 12));
                let tie_bf16 = f32::from_bits(v.to_bits().wrapping_add(1 << 15));
                values.extend([v, up, tie_f16, tie_bf16, f32::from_bits(b)]);
            }
        }
        for chunk in values.chunks(CHUNK) {
            let n = chunk.len();
            wide[..n].copy_from_slice(chunk);
            round_chunk::<false, false>(&mut wide[..n], &mut bits[..n]);
            for (&v, &got) in chunk.iter().zip(&bits) {
                assert!(
                    same(got, numerics::f16_from_f32(v), numerics::f16_to_f32),
                    "f16 {v:e}"
                );
            }
            wide[..n].copy_from_slice(chunk);
            round_chunk::<true, false>(&mut wide[..n], &mut bits[..n]);
            for (&v, &got) in chunk.iter().zip(&bits) {
                assert!(
                    same(got, numerics::bf16_from_f32(v), numerics::bf16_to_f32),
                    "bf16 {v:e}"
                );
            }
        }
    }

    /// A run of 16-bit stores from any start and of any length writes
    /// exactly its elements and keeps both neighbours' halves; a run of
    /// loads reads them back.
    #[test]
    fn packed_runs_keep_their_neighbours() {
        for start in 0..5 {
            for len in 0..9 {
                let words: Vec<AtomicU32> = (0..8).map(|_| AtomicU32::new(0xffff_ffff)).collect();
                let values: Vec<u32> = (0..len as u32).map(|k| k + 1).collect();
                store_run_packed(&words, start, &values);
                let mut back = vec![0; len];
                load_run_packed(&words, start, &mut back);
                assert_eq!(back, values, "start {start} len {len}");
                for e in 0..16 {
                    let got = (words[e / 2].load(Relaxed) >> (16 * (e % 2))) & 0xffff;
                    let want = if (start..start + len).contains(&e) {
                        (e - start) as u32 + 1
                    } else {
                        0xffff
                    };
                    assert_eq!(got, want, "start {start} len {len} element {e}");
                }
            }
        }
    }

    fn mask(len: usize, on: impl Fn(usize) -> bool) -> Vec<bool> {
        (0..len).map(on).collect()
    }

    #[test]
    fn span_of_is_the_one_range_of_set_lanes_or_none() {
        assert_eq!(span_of(&mask(128, |_| true)), Some((0, 128)));
        assert_eq!(span_of(&mask(128, |_| false)), Some((0, 0)));
        assert_eq!(span_of(&mask(128, |l| l < 16)), Some((0, 16)));
        assert_eq!(span_of(&mask(128, |l| l >= 100)), Some((100, 128)));
        assert_eq!(span_of(&mask(48, |l| (5..9).contains(&l))), Some((5, 9)));
        assert_eq!(span_of(&mask(64, |l| l == 63)), Some((63, 64)));
        // As many set lanes as a range would have, but with a gap.
        assert_eq!(span_of(&mask(64, |l| l < 8 || l == 9)), None);
        assert_eq!(span_of(&mask(64, |l| l % 2 == 0)), None);
        assert_eq!(span_of(&[]), Some((0, 0)));
    }
}
