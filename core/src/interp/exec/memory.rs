//! Memory accesses of a block: addresses, bounds, loads, stores, atomics
//! and the race and uninitialised-read detection of each access.

#![allow(clippy::needless_range_loop)]

use super::*;
use crate::backend::AccessKind;
use detect::{RunStop, Shadow};

impl BlockState {
    pub(super) fn sem_address(
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
    pub(super) fn element_label(&self, acc: &CompiledAccess, lane: usize) -> String {
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
    pub(super) fn address(
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

    pub(super) fn oob(&self, code: &ProgramCode, acc: &CompiledAccess, lane: usize) -> RunError {
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

    pub(super) fn lane_order(&self, env: &mut Env, t: usize) -> Option<Vec<usize>> {
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

    pub(super) fn return_order(env: &mut Env, order: Option<Vec<usize>>) {
        if let (Some(alt), Some(o)) = (env.alt.as_deref_mut(), order) {
            alt.perm = o;
        }
    }

    /// Checks and records one access when detection is on.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn detect_access(
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
        let limits = env.limits;
        let Some(det) = env.detect.as_deref_mut() else {
            return Ok(());
        };
        let t = code.threads;
        let (init, shadow) = detection_state(det, &mut self.det, acc.target);
        let slot = match acc.target {
            Target::Local(_) => addr as usize * t + lane,
            _ => addr as usize,
        };
        if read && !init.get(slot).copied().unwrap_or(false) {
            return Err(self.uninitialized_read(code, acc, addr, lane));
        }
        if write {
            if let Some(b) = init.get_mut(slot) {
                *b = true;
            }
        }
        let words = init.len();
        let Some(shadow) = shadow else {
            return Ok(());
        };
        shadow.ensure(words, limits)?;
        if let Some((history, pairs)) = shadow.history_mut(addr as usize, limits)? {
            let who = Accessor {
                task: self.task,
                epoch: self.epoch,
                thread: lane as u32,
                clock: &self.clock,
                site: acc.site,
            };
            if let Err(first) = detect::record(history, pairs, &who, write, atomic) {
                return Err(self.race(code, env, acc, addr, lane, first, [write, atomic]));
            }
        }
        Ok(())
    }

    /// The report of a read of element `addr` by `lane` that no one wrote.
    fn uninitialized_read(
        &self,
        code: &ProgramCode,
        acc: &CompiledAccess,
        addr: u64,
        lane: usize,
    ) -> RunError {
        RunError::UninitializedRead {
            site: Site {
                program: code.program,
                kernel: code.kernel.clone(),
                block: self.block,
                thread: Some(lane as u32),
            },
            reference: acc.name.clone(),
            element: addr,
        }
    }

    /// The report of `lane`'s access of element `addr` (whether it writes,
    /// whether it is atomic) racing with the earlier access `first`.
    #[allow(clippy::too_many_arguments)]
    fn race(
        &self,
        code: &ProgramCode,
        env: &Env,
        acc: &CompiledAccess,
        addr: u64,
        lane: usize,
        first: Rec,
        [write, atomic]: [bool; 2],
    ) -> RunError {
        let (first_site, first_code) = match acc.target {
            Target::Global(_) => (env_site(env, first), task_code(env, first.task)),
            _ => (
                Site {
                    program: code.program,
                    kernel: code.kernel.clone(),
                    block: self.block,
                    thread: None,
                },
                Some(code),
            ),
        };
        let path_of = |code: Option<&ProgramCode>, site: u16| {
            code?.access_paths.get(usize::from(site)).cloned()
        };
        let paths = [
            path_of(first_code, first.site),
            path_of(Some(code), acc.site),
        ];
        let first_site = Site {
            thread: Some(if first.task == self.task {
                first.thread_other_than(lane as u32)
            } else {
                u32::from(first.thread)
            }),
            ..first_site
        };
        RunError::DataRace {
            reference: acc.name.clone(),
            element: addr,
            index: self.element_label(acc, lane),
            first: first_site,
            second: self.site(code, Some(lane as u32)),
            kinds: [
                AccessKind::of(first.write, first.atomic),
                AccessKind::of(write, atomic),
            ],
            paths,
        }
    }

    /// Detection of a plain load (`write` false) or store of global or
    /// smem memory whose active lanes' elements `fold_indices` folded
    /// (`base`, `extent`), in lane order as [`Self::detect_access`] lane by
    /// lane, with the same verdict: each run of consecutive lanes over
    /// consecutive elements is checked at once (written flags as a slice,
    /// histories by [`Shadow::record_run`]), and a read of the element the
    /// lanes before settled ([`History::read_settled`]: recording it would
    /// change nothing) is skipped. `None` when this path does not apply
    /// (an out-of-bounds lane, a local, elements past the written flags):
    /// nothing was checked, the lane-by-lane path runs.
    fn detect_runs(
        &mut self,
        env: &mut Env,
        acc: &CompiledAccess,
        (base, extent): (u64, u32),
        write: bool,
    ) -> Option<Result<(), RunStopAt>> {
        let limits = env.limits;
        let det = env.detect.as_deref_mut()?;
        let (lo, hi) = self.span.unwrap_or((0, self.mask.len()));
        // With a span, every lane of it is active: no mask to test.
        let every = self.span.is_some();
        let (mask, flat) = (self.mask.get(lo..hi)?, self.flat.get(lo..hi)?);
        if matches!(acc.target, Target::Local(_)) {
            return None;
        }
        let (init, mut shadow) = detection_state(det, &mut self.det, acc.target);
        let words = init.len();
        let out_of_bounds = match every {
            true => flat.contains(&u32::MAX),
            false => flat.iter().zip(mask).any(|(&f, &m)| m && f == u32::MAX),
        };
        if base.checked_add(u64::from(extent))? > words as u64 || out_of_bounds {
            return None;
        }
        if let Some(shadow) = shadow.as_deref_mut() {
            if let Err(e) = shadow.ensure(words, limits) {
                return Some(Err(RunStopAt::Limit(e)));
            }
        }
        let who = Accessor {
            task: self.task,
            epoch: self.epoch,
            thread: 0,
            clock: &self.clock,
            site: acc.site,
        };
        let base = base as usize;
        // Elements the lanes before settled (reads): `settled_len` from
        // `settled`.
        let (mut settled, mut settled_len) = (0u32, 0u32);
        let lanes = flat.len();
        let mut i = 0;
        while i < lanes {
            if !write {
                // Whole groups of 16 settled lanes at once (vectorised),
                // then lane by lane.
                while let Some(group) = flat.get(i..i + 16) {
                    let all = group.iter().fold(true, |all, &f| {
                        all & (f.wrapping_sub(settled) < settled_len)
                    });
                    if !all {
                        break;
                    }
                    i += 16;
                }
                while i < lanes && flat[i].wrapping_sub(settled) < settled_len {
                    i += 1;
                }
                if i == lanes {
                    break;
                }
            }
            let a = flat[i];
            if !every && !mask[i] {
                i += 1;
                continue;
            }
            let mut e = i + 1;
            // Whole groups of 16 lanes at once (vectorised), then lane by lane.
            while let Some(group) = flat.get(e..e + 16).filter(|_| every) {
                let next = a.wrapping_add((e - i) as u32);
                let all = (0..16u32)
                    .zip(group)
                    .fold(true, |all, (k, &f)| all & (f == next.wrapping_add(k)));
                if !all {
                    break;
                }
                e += 16;
            }
            while e < lanes && (every || mask[e]) && flat[e] == a.wrapping_add((e - i) as u32) {
                e += 1;
            }
            let l = lo + i;
            if !write && e == i + 1 {
                // Lanes reading one element (a broadcast): each in turn
                // until it is settled.
                let mut g = e;
                while let Some(group) = flat.get(g..g + 15).filter(|_| every) {
                    if !group.iter().fold(true, |all, &f| all & (f == a)) {
                        break;
                    }
                    g += 15;
                }
                while g < lanes && (every || mask[g]) && flat[g] == a {
                    g += 1;
                }
                if g > e {
                    let word = base + a as usize;
                    if !init[word] {
                        return Some(Err(RunStopAt::Uninitialized {
                            lane: l,
                            addr: word as u64,
                        }));
                    }
                    let at = Accessor {
                        thread: l as u32,
                        ..who
                    };
                    let settles = match shadow.as_deref_mut() {
                        None => true,
                        Some(shadow) => match shadow.record_reads(word, g - i, &at, limits) {
                            Ok(settles) => settles,
                            Err(RunStop::Race { offset, first }) => {
                                return Some(Err(RunStopAt::Race {
                                    lane: l + offset,
                                    addr: word as u64,
                                    first,
                                }));
                            }
                            Err(RunStop::Limit(e)) => return Some(Err(RunStopAt::Limit(e))),
                        },
                    };
                    if settles {
                        (settled, settled_len) = (a, 1);
                    }
                    i = g;
                    continue;
                }
            }
            let word = base + a as usize;
            let n = e - i;
            // Lanes of the run whose written flags allow the access.
            let mut allowed = n;
            let flags = &mut init[word..word + n];
            if write {
                flags.fill(true);
            } else if !flags.iter().fold(true, |all, &w| all & w) {
                allowed = flags.iter().position(|&w| !w).unwrap_or(n);
            }
            if let Some(shadow) = shadow.as_deref_mut() {
                let at = Accessor {
                    thread: l as u32,
                    ..who
                };
                match shadow.record_run(word, allowed, &at, write, false, limits) {
                    Ok(()) => {}
                    Err(RunStop::Race { offset, first }) => {
                        return Some(Err(RunStopAt::Race {
                            lane: l + offset,
                            addr: (word + offset) as u64,
                            first,
                        }));
                    }
                    Err(RunStop::Limit(e)) => return Some(Err(RunStopAt::Limit(e))),
                }
            }
            if allowed < n {
                return Some(Err(RunStopAt::Uninitialized {
                    lane: l + allowed,
                    addr: (word + allowed) as u64,
                }));
            }
            if !write
                && shadow
                    .as_deref()
                    .is_none_or(|s| s.run_settled(word, n, self.task, self.epoch))
            {
                (settled, settled_len) = (a, n as u32);
            }
            i = e;
        }
        Some(Ok(()))
    }

    /// The error a stop of [`Self::detect_runs`] reports.
    fn run_stop(
        &self,
        code: &ProgramCode,
        env: &Env,
        acc: &CompiledAccess,
        stop: RunStopAt,
        write: bool,
    ) -> RunError {
        match stop {
            RunStopAt::Race { lane, addr, first } => {
                self.race(code, env, acc, addr, lane, first, [write, false])
            }
            RunStopAt::Uninitialized { lane, addr } => {
                self.uninitialized_read(code, acc, addr, lane)
            }
            RunStopAt::Limit(e) => e,
        }
    }

    pub(super) fn load(
        &mut self,
        code: &ProgramCode,
        env: &mut Env,
        dst: usize,
        acc: &CompiledAccess,
    ) -> Result<(), RunError> {
        let t = code.threads;
        let mut d = take(&mut self.regs[dst]);
        let result = if env.detect.is_none() && acc.coords.is_none() && acc.dims.len() == 1 {
            let (r, extent, _) = acc.dims[0];
            let base = self.own_base(acc);
            self.load_indexed(code, env, acc, (&self.regs[r], base, extent), &mut d)
        } else {
            let fold = self.fold_indices(code, acc, env.detect.is_none());
            // With detection nothing is direct: the indices are in `self.flat`.
            let folded = fold.map(Fold::folded);
            let runs = match folded {
                Some(range) if env.detect.is_some() => self.detect_runs(env, acc, range, false),
                _ => None,
            };
            let flat = take(&mut self.flat);
            let result = match (fold, runs) {
                (_, Some(Err(stop))) => Err(self.run_stop(code, env, acc, stop, false)),
                (Some(Fold { base, extent, .. }), Some(Ok(()))) => {
                    self.load_indexed(code, env, acc, (&flat, base, extent), &mut d)
                }
                (
                    Some(Fold {
                        base,
                        extent,
                        direct,
                    }),
                    None,
                ) if env.detect.is_none() => {
                    let idx = direct.map_or(&flat[..], |r| &self.regs[r][..]);
                    self.load_indexed(code, env, acc, (idx, base, extent), &mut d)
                }
                _ => (|| {
                    let mut settled = SettledReads::new();
                    for l in 0..t {
                        if !self.mask[l] {
                            continue;
                        }
                        let addr = self
                            .lane_address(code, acc, folded, &flat, l)
                            .map_err(|e| *e)?;
                        if !settled.contains(addr) {
                            self.detect_access(code, env, acc, addr, l, true, false, false)?;
                            if self.read_settled(env, acc, addr) {
                                settled.insert(addr);
                            }
                        }
                        d[l] = self.read_elem(env, acc, addr, l, t);
                    }
                    Ok(())
                })(),
            };
            self.flat = flat;
            result
        };
        self.regs[dst] = d;
        result
    }

    /// Whether, after a lane of this block read element `addr` of a global
    /// or smem ref with detection, a read of it by any other lane in the same
    /// load changes nothing and finds no race (`History::read_settled`:
    /// this block's only access in this epoch is a plain read already made
    /// by two threads). Locals have a written flag per lane: never settled.
    fn read_settled(&self, env: &Env, acc: &CompiledAccess, addr: u64) -> bool {
        let shadow = match acc.target {
            Target::Global(b) => match env.detect.as_deref() {
                Some(det) => &det.shadow[b],
                None => return false,
            },
            Target::Smem(s) => &self.det.smem_shadow[s],
            Target::Local(_) => return false,
        };
        shadow.read_settled(addr as usize, self.task, self.epoch)
    }

    /// The element a plain access of an owned ref starts at: its block's
    /// instance (other refs and `@[...]` accesses start at 0).
    fn own_base(&self, acc: &CompiledAccess) -> u64 {
        match (&acc.coords, &acc.own) {
            (None, OwnInstance::Block(_)) => self.block * acc.inst_len,
            _ => 0,
        }
    }

    /// Folds a multi-dimensional or `@[...]` access to one index per active
    /// lane in `self.flat`, relative to the returned base (the instance
    /// coordinates first, then the indices, row-major: the element
    /// [`Self::address`] computes is base + index), `u32::MAX` where a
    /// coordinate or an index is out of bounds. Returns the base and the
    /// extent of the elements the access may reach from it; `None`
    /// (nothing folded) when that extent does not fit below `u32::MAX`.
    /// Each index is its register times its stride; a uniform one
    /// (`ProgramCode::uniform`) is checked once and moves the base. With
    /// `direct_ok`, an access whose only non-uniform index is the last one
    /// folds nothing: its register is the index ([`Fold::direct`]).
    fn fold_indices(
        &mut self,
        code: &ProgramCode,
        acc: &CompiledAccess,
        direct_ok: bool,
    ) -> Option<Fold> {
        let instances = acc
            .coords
            .iter()
            .flatten()
            .try_fold(1u64, |n, &(_, e, _)| n.checked_mul(u64::from(e)))?;
        let extent = u32::try_from(acc.inst_len.checked_mul(instances)?)
            .ok()
            .filter(|&e| e < u32::MAX)?;
        let (lo, hi) = self.span.unwrap_or((0, self.mask.len()));
        let first_active = first_lane(lanes_of(self.span, &self.mask));
        let own_base = self.own_base(acc);
        let indices = || acc.coords.iter().flatten().chain(&acc.dims).rev();
        // From the last dimension to the first: the stride is the product
        // of the extents after it (at most `extent`). The uniform ones first.
        let mut offset = 0u32;
        let mut stride = 1u32;
        let mut varying = 0;
        for &(r, e, _) in indices() {
            if code.uniform[r] {
                let i = first_active.map_or(0, |lane| self.regs[r][lane]);
                if i >= e && first_active.is_some() {
                    // Every active lane is out of bounds.
                    self.flat[lo..hi].fill(u32::MAX);
                    return Some(Fold::flat(own_base, extent));
                }
                offset = offset.wrapping_add(i.wrapping_mul(stride));
            } else {
                varying += 1;
            }
            stride = stride.wrapping_mul(e);
        }
        let base = own_base + u64::from(offset);
        if let Some(&(r, e, _)) = indices().next() {
            if direct_ok && varying == 1 && !code.uniform[r] {
                return Some(Fold {
                    base,
                    extent: e,
                    direct: Some(r),
                });
            }
        }
        let flat = &mut self.flat[lo..hi];
        let mut stride = 1u32;
        let mut first = true;
        for &(r, e, _) in indices() {
            if !code.uniform[r] {
                let idx = &self.regs[r][lo..hi];
                match (first, stride.is_power_of_two()) {
                    (true, true) => {
                        let shift = stride.trailing_zeros();
                        for (f, &i) in flat.iter_mut().zip(idx) {
                            *f = if i < e { i << shift } else { u32::MAX };
                        }
                    }
                    (true, false) => {
                        for (f, &i) in flat.iter_mut().zip(idx) {
                            *f = if i < e {
                                i.wrapping_mul(stride)
                            } else {
                                u32::MAX
                            };
                        }
                    }
                    // In bounds, the running index stays below the extent.
                    (false, _) => {
                        for (f, &i) in flat.iter_mut().zip(idx) {
                            *f = if *f != u32::MAX && i < e {
                                f.wrapping_add(i.wrapping_mul(stride))
                            } else {
                                u32::MAX
                            };
                        }
                    }
                }
                first = false;
            }
            stride = stride.wrapping_mul(e);
        }
        if first {
            // Every index uniform (or none: a scalar ref): the element at
            // the offset.
            flat.fill(0);
        }
        // In bounds, offset + index < extent.
        Some(Fold::flat(base, extent - offset.min(extent)))
    }

    /// Lane `lane`'s element address from `fold_indices`' result, or as
    /// [`Self::address`] computes it when nothing was folded.
    fn lane_address(
        &self,
        code: &ProgramCode,
        acc: &CompiledAccess,
        folded: Option<(u64, u32)>,
        flat: &[u32],
        lane: usize,
    ) -> Result<u64, Box<RunError>> {
        match folded {
            Some((base, _)) => match flat[lane] {
                u32::MAX => Err(Box::new(self.oob(code, acc, lane))),
                i => Ok(base + u64::from(i)),
            },
            None => self.address(code, acc, lane),
        }
    }

    /// Buffer `b`, which an access reaching `extent` elements from element
    /// `base` may touch (mid-word for a 16-bit instance of odd length), and
    /// `base`.
    fn instance_words<'e>(
        code: &ProgramCode,
        env: &'e Env,
        acc: &CompiledAccess,
        b: usize,
        (base, extent): (u64, u32),
    ) -> Result<(&'e GlobalBuf<'e>, usize), RunError> {
        let buf = &env.bufs[b];
        if words_of(acc.elem, base + u64::from(extent)) > buf.len() as u64 {
            return Err(corrupt(code));
        }
        Ok((buf, base as usize))
    }

    /// A load without detection of the elements `base + idx[lane]`, each
    /// index below `extent` (a one-dimensional access, or one that
    /// `fold_indices` folded).
    fn load_indexed(
        &self,
        code: &ProgramCode,
        env: &Env,
        acc: &CompiledAccess,
        (idx, base, extent): (&[u32], u64, u32),
        d: &mut [u32],
    ) -> Result<(), RunError> {
        let t = code.threads;
        let lanes = lanes_of(self.span, &self.mask);
        let run = consecutive_run(&lanes, idx, extent);
        let packed = acc.elem.is_16bit();
        let result = match acc.target {
            Target::Global(b) => {
                let (buf, base) = Self::instance_words(code, env, acc, b, (base, extent))?;
                let words = buf.read();
                if packed {
                    if let Some(Run { lanes, words: at }) = run {
                        words.load_run_packed(base + at.start, &mut d[lanes]);
                        return Ok(());
                    }
                    try_each_index(lanes, idx, extent, |l, i| {
                        d[l] = words.load_packed(base + i)
                    })
                } else {
                    let words = words.slice(base..base + extent as usize);
                    if let Some(Run { lanes, words: at }) = run {
                        words.load_run(at.start, &mut d[lanes]);
                        return Ok(());
                    }
                    gather(
                        lanes,
                        idx,
                        extent,
                        d,
                        |i| words.load(i),
                        |i, d| words.load_run(i, d),
                    )
                }
            }
            Target::Smem(s) => {
                let base = base as usize;
                let words: &[u32] = &self.smem[s];
                if packed {
                    if let Some(Run { lanes, words: at }) = run {
                        get_run_packed(words, base + at.start, &mut d[lanes]);
                        return Ok(());
                    }
                    try_each_index(lanes, idx, extent, |l, i| {
                        d[l] = get_packed(words, base + i)
                    })
                } else {
                    let words = words.get(base..).ok_or_else(|| corrupt(code))?;
                    if let Some(Run { lanes, words: at }) = run {
                        d[lanes].copy_from_slice(&words[at]);
                        return Ok(());
                    }
                    gather(
                        lanes,
                        idx,
                        extent,
                        d,
                        |i| words[i],
                        |i, d| d.copy_from_slice(&words[i..i + d.len()]),
                    )
                }
            }
            Target::Local(id) => {
                let base = base as usize;
                let words = &self.locals[id];
                if packed {
                    try_each_index(lanes, idx, extent, |l, i| {
                        d[l] = get_packed(words, (base + i) * t + l)
                    })
                } else {
                    try_each_index(lanes, idx, extent, |l, i| d[l] = words[(base + i) * t + l])
                }
            }
        };
        result.map_err(|l| self.oob(code, acc, l))
    }

    /// Element `addr` of an access's memory, as a lane's register holds it
    /// (a 16-bit element in the low half). Inlined: the per-lane loads of
    /// checked mode call it once a lane.
    #[inline(always)]
    pub(super) fn read_elem(
        &self,
        env: &Env,
        acc: &CompiledAccess,
        addr: u64,
        lane: usize,
        t: usize,
    ) -> u32 {
        let packed = acc.elem.is_16bit();
        let (words, i): (&[u32], usize) = match acc.target {
            Target::Global(b) => {
                let words = env.bufs[b].read();
                return match packed {
                    true => words.load_packed(addr as usize),
                    false => words.load(addr as usize),
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
    pub(super) fn write_elem(
        &mut self,
        env: &Env,
        acc: &CompiledAccess,
        addr: u64,
        lane: usize,
        t: usize,
        v: u32,
    ) -> Result<(), RunError> {
        let packed = acc.elem.is_16bit();
        let (words, i): (&mut [u32], usize) = match acc.target {
            Target::Global(b) => {
                let words = env.bufs[b].write()?;
                match packed {
                    true => store_packed(words, addr as usize, v),
                    false => words[addr as usize].store(v, Relaxed),
                }
                return Ok(());
            }
            Target::Smem(s) => (&mut self.smem[s], addr as usize),
            Target::Local(id) => (&mut self.locals[id], addr as usize * t + lane),
        };
        match packed {
            true => set_packed(words, i, v),
            false => words[i] = v,
        }
        Ok(())
    }

    /// A 32-bit word of an atomic's memory (atomics are 32-bit only).
    pub(super) fn read_word(
        &self,
        env: &Env,
        target: Target,
        addr: u64,
        lane: usize,
        t: usize,
    ) -> u32 {
        match target {
            Target::Global(b) => env.bufs[b].load(addr as usize),
            Target::Smem(s) => self.smem[s][addr as usize],
            Target::Local(id) => self.locals[id][addr as usize * t + lane],
        }
    }

    pub(super) fn write_word(
        &mut self,
        env: &Env,
        target: Target,
        addr: u64,
        lane: usize,
        t: usize,
        v: u32,
    ) -> Result<(), RunError> {
        match target {
            Target::Global(b) => env.bufs[b].write()?[addr as usize].store(v, Relaxed),
            Target::Smem(s) => self.smem[s][addr as usize] = v,
            Target::Local(id) => self.locals[id][addr as usize * t + lane] = v,
        }
        Ok(())
    }

    pub(super) fn store(
        &mut self,
        code: &ProgramCode,
        env: &mut Env,
        src: usize,
        acc: &CompiledAccess,
    ) -> Result<(), RunError> {
        let t = code.threads;
        let shuffled = env.alt.as_ref().is_some_and(|a| a.shuffle_lanes);
        let plain = env.detect.is_none() && !shuffled;
        if plain && acc.coords.is_none() && acc.dims.len() == 1 {
            return self.store_indexed(code, env, src, acc, None);
        }
        let fold = self.fold_indices(code, acc, plain);
        if plain && fold.is_some() {
            return self.store_indexed(code, env, src, acc, fold);
        }
        let folded = fold.map(Fold::folded);
        if let Some(range) = folded.filter(|_| !shuffled) {
            match self.detect_runs(env, acc, range, true) {
                Some(Ok(())) => return self.store_indexed(code, env, src, acc, fold),
                Some(Err(stop)) => return Err(self.run_stop(code, env, acc, stop, true)),
                None => {}
            }
        }
        self.for_each_lane_address(code, env, acc, folded, |block, env, l, addr| {
            block.detect_access(code, env, acc, addr, l, false, true, false)?;
            let v = block.regs[src][l];
            block.write_elem(env, acc, addr, l, t, v)
        })
    }

    /// Runs `per_lane` for each active lane, in the schedule's lane order,
    /// with the address its access reaches (`folded`: the instruction's
    /// indices folded by [`Self::fold_indices`], if they were); stops at the
    /// first error, an out-of-bounds lane included.
    fn for_each_lane_address<'e>(
        &mut self,
        code: &ProgramCode,
        env: &mut Env<'e>,
        acc: &CompiledAccess,
        folded: Option<(u64, u32)>,
        mut per_lane: impl FnMut(&mut Self, &mut Env<'e>, usize, u64) -> Result<(), RunError>,
    ) -> Result<(), RunError> {
        let t = code.threads;
        let flat = take(&mut self.flat);
        let order = self.lane_order(env, t);
        let mut result = Ok(());
        // The error moves only when there is one (a `RunError` is large:
        // assigning every lane's `Ok` through it copied it each time).
        for k in 0..t {
            let l = order.as_ref().map_or(k, |o| o[k]);
            if !self.mask[l] {
                continue;
            }
            let lane = match self.lane_address(code, acc, folded, &flat, l) {
                Ok(addr) => per_lane(self, env, l, addr),
                Err(e) => Err(*e),
            };
            if let Err(e) = lane {
                result = Err(e);
                break;
            }
        }
        Self::return_order(env, order);
        self.flat = flat;
        result
    }

    /// A store without detection or lane shuffling of a one-dimensional
    /// access (`fold` `None`: the index register, the block's own
    /// instance) or of one `fold_indices` folded; lanes before an
    /// out-of-bounds one still store.
    fn store_indexed(
        &mut self,
        code: &ProgramCode,
        env: &Env,
        src: usize,
        acc: &CompiledAccess,
        fold: Option<Fold>,
    ) -> Result<(), RunError> {
        let t = code.threads;
        let (idx, base, extent) = match fold {
            None => {
                let (r, extent, _) = acc.dims[0];
                (&self.regs[r][..], self.own_base(acc), extent)
            }
            Some(Fold {
                base,
                extent,
                direct: Some(r),
            }) => (&self.regs[r][..], base, extent),
            Some(Fold { base, extent, .. }) => (&self.flat[..], base, extent),
        };
        let lanes = lanes_of(self.span, &self.mask);
        let s = &self.regs[src];
        let run = consecutive_run(&lanes, idx, extent);
        let packed = acc.elem.is_16bit();
        let result = match acc.target {
            Target::Global(b) => {
                let (buf, base) = Self::instance_words(code, env, acc, b, (base, extent))?;
                let words = buf.write()?;
                if packed {
                    if let Some(Run { lanes, words: at }) = run {
                        store_run_packed(words, base + at.start, &s[lanes]);
                        return Ok(());
                    }
                    try_each_index(lanes, idx, extent, |l, i| {
                        store_packed(words, base + i, s[l])
                    })
                } else {
                    let words = &words[base..base + extent as usize];
                    if let Some(Run { lanes, words: at }) = run {
                        words[at]
                            .iter()
                            .zip(&s[lanes])
                            .for_each(|(w, &v)| w.store(v, Relaxed));
                        return Ok(());
                    }
                    scatter(lanes, idx, extent, s, |i, v| words[i].store(v, Relaxed))
                }
            }
            Target::Smem(k) => {
                let base = base as usize;
                let words: &mut [u32] = &mut self.smem[k];
                if packed {
                    if let Some(Run { lanes, words: at }) = run {
                        set_run_packed(words, base + at.start, &s[lanes]);
                        return Ok(());
                    }
                    try_each_index(lanes, idx, extent, |l, i| set_packed(words, base + i, s[l]))
                } else {
                    let words = words.get_mut(base..).ok_or_else(|| corrupt(code))?;
                    if let Some(Run { lanes, words: at }) = run {
                        words[at].copy_from_slice(&s[lanes]);
                        return Ok(());
                    }
                    scatter(lanes, idx, extent, s, |i, v| words[i] = v)
                }
            }
            Target::Local(id) => {
                let base = base as usize;
                let words = &mut self.locals[id];
                if packed {
                    try_each_index(lanes, idx, extent, |l, i| {
                        set_packed(words, (base + i) * t + l, s[l])
                    })
                } else {
                    try_each_index(lanes, idx, extent, |l, i| words[(base + i) * t + l] = s[l])
                }
            }
        };
        // Lanes before an out-of-bounds one have stored, as on a GPU.
        result.map_err(|l| self.oob(code, acc, l))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn atomic(
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
        let folded = self.fold_indices(code, acc, false).map(Fold::folded);
        self.for_each_lane_address(code, env, acc, folded, |block, env, l, addr| {
            let reads = op != AtomicOp::Store;
            let writes = op != AtomicOp::Load;
            block.detect_access(code, env, acc, addr, l, reads, writes, true)?;
            let old = block.read_word(env, acc.target, addr, l, t);
            let a = block.regs[args[0]][l];
            let b = block.regs[args[1]][l];
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
                block.write_word(env, acc.target, addr, l, t, v)?;
            }
            if let Some(d) = dst {
                block.regs[d][l] = old;
            }
            Ok(())
        })
    }
}

/// The site of a recorded access (of any block of the call).
/// The program whose blocks include `task`.
fn task_code<'e>(env: &Env<'e>, task: u32) -> Option<&'e ProgramCode> {
    let p = env
        .task_offsets
        .iter()
        .rposition(|&o| o <= u64::from(task))
        .unwrap_or(0);
    env.codes.get(p)
}

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

/// The written flags and the access histories of an access's memory: none
/// for a buffer that no store or atomic of the call writes (every race has
/// a write) and for a local (one thread's: written flags only).
fn detection_state<'a>(
    det: &'a mut Detector,
    block: &'a mut BlockDetect,
    target: Target,
) -> (&'a mut Vec<bool>, Option<&'a mut Shadow>) {
    match target {
        Target::Global(b) if !det.may_write.get(b).copied().unwrap_or(true) => {
            (&mut det.init[b], None)
        }
        Target::Global(b) => (&mut det.init[b], Some(&mut det.shadow[b])),
        Target::Smem(s) => (&mut block.smem_init[s], Some(&mut block.smem_shadow[s])),
        Target::Local(id) => (&mut block.local_init[id], None),
    }
}

/// Where [`BlockState::detect_runs`] stopped.
enum RunStopAt {
    /// `lane`'s access of element `addr` races with `first`.
    Race { lane: usize, addr: u64, first: Rec },
    /// `lane` reads element `addr`, which no one wrote.
    Uninitialized { lane: usize, addr: u64 },
    /// The histories passed the memory budget.
    Limit(RunError),
}

/// Elements whose later reads in one load are settled
/// ([`BlockState::read_settled`]): a few slots by element, so a broadcast
/// (`tile[ty, k]`) or a row read by every warp (`tile[k, tx]`) is checked
/// twice per element and load, not once per lane.
struct SettledReads {
    slots: [u64; 32],
}

impl SettledReads {
    fn new() -> Self {
        SettledReads {
            slots: [u64::MAX; 32],
        }
    }

    fn contains(&self, addr: u64) -> bool {
        self.slots[addr as usize % 32] == addr
    }

    fn insert(&mut self, addr: u64) {
        self.slots[addr as usize % 32] = addr;
    }
}

/// What [`BlockState::fold_indices`] made of an access: each active lane
/// reaches element `base + index`, its index below `extent` (else out of
/// bounds), the index from `self.flat` or, when `direct`, that register.
#[derive(Clone, Copy)]
pub(super) struct Fold {
    base: u64,
    extent: u32,
    direct: Option<usize>,
}

impl Fold {
    fn flat(base: u64, extent: u32) -> Fold {
        Fold {
            base,
            extent,
            direct: None,
        }
    }

    /// The base and extent of an access folded into `self.flat`.
    fn folded(self) -> (u64, u32) {
        (self.base, self.extent)
    }
}
