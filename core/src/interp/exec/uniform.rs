//! Execution of uniform values (`compile::uniform`): an instruction whose
//! result is uniform runs on the first active lane and copies the result to
//! the others; a uniform condition keeps or empties the mask without
//! looking at every lane; an access with uniform indices reaches one
//! element (or one row of a local array) once.

use super::*;

/// The register an arithmetic instruction writes when the compiler found it
/// uniform.
#[inline(always)]
pub(super) fn uniform_result(instr: &Instr, code: &ProgramCode) -> Option<usize> {
    let dst = match instr {
        Instr::Bin { dst, .. }
        | Instr::Un { dst, .. }
        | Instr::Select { dst, .. }
        | Instr::Fma { dst, .. }
        | Instr::Mov { dst, .. } => *dst,
        Instr::Inc { var } => *var,
        _ => return None,
    };
    code.uniform[dst].then_some(dst)
}

/// The lowest active lane.
#[inline(always)]
pub(super) fn first_lane(lanes: Lanes) -> Option<usize> {
    match lanes {
        Lanes::Range(lo, hi) => (lo < hi).then_some(lo),
        Lanes::Mask(m) => m.iter().position(|&on| on),
    }
}

/// The highest active lane.
fn last_lane(lanes: Lanes) -> Option<usize> {
    match lanes {
        Lanes::Range(lo, hi) => (lo < hi).then(|| hi - 1),
        Lanes::Mask(m) => m.iter().rposition(|&on| on),
    }
}

/// `v` in every active lane of `d`.
#[inline(always)]
pub(super) fn fill_lanes(d: &mut [u32], lanes: Lanes, v: u32) {
    match lanes {
        Lanes::Range(lo, hi) => d[lo..hi].fill(v),
        Lanes::Mask(m) => {
            for (d, &on) in d.iter_mut().zip(m) {
                if on {
                    *d = v;
                }
            }
        }
    }
}

impl BlockState {
    /// No lane is active any more (a uniform condition is false).
    pub(super) fn leave_all(&mut self) {
        self.mask.fill(false);
        self.set_span(Some((0, 0)));
    }

    /// Whether the uniform condition `cond` holds on the active lanes; when
    /// it does not, or no lane is active, no lane stays active.
    pub(super) fn uniform_holds(&mut self, cond: usize) -> bool {
        let holds =
            first_lane(lanes_of(self.span, &self.mask)).is_some_and(|l| self.regs[cond][l] != 0);
        if !holds {
            self.leave_all();
        }
        holds
    }

    /// The element a uniform access reaches (the same for every active
    /// lane, `first`), or the out-of-bounds error of its first lane.
    fn uniform_address(
        &self,
        code: &ProgramCode,
        acc: &CompiledAccess,
        first: usize,
    ) -> Result<u64, RunError> {
        self.address(code, acc, first).map_err(|e| *e)
    }

    /// A load without detection whose indices are uniform: one element of
    /// global or shared memory copied to every active lane, or for a local
    /// array each lane's element of one row.
    pub(super) fn load_uniform(
        &mut self,
        code: &ProgramCode,
        env: &Env,
        dst: usize,
        acc: &CompiledAccess,
    ) -> Result<(), RunError> {
        let t = code.threads;
        let lanes = lanes_of(self.span, &self.mask);
        let Some(first) = first_lane(lanes) else {
            return Ok(());
        };
        let addr = self.uniform_address(code, acc, first)?;
        let packed = acc.elem.is_16bit();
        let mut d = take(&mut self.regs[dst]);
        let result = match acc.target {
            Target::Global(_) | Target::Smem(_) => {
                let v = self.read_checked(code, env, acc, addr, first, t);
                v.map(|v| fill_lanes(&mut d, lanes, v))
            }
            Target::Local(id) => {
                let words = &self.locals[id];
                let row = addr as usize * t;
                if words_of(acc.elem, (row + t) as u64) > words.len() as u64 {
                    Err(corrupt(code))
                } else {
                    match (packed, lanes) {
                        (false, Lanes::Range(lo, hi)) => {
                            d[lo..hi].copy_from_slice(&words[row + lo..row + hi])
                        }
                        (true, Lanes::Range(lo, hi)) => {
                            get_run_packed(words, row + lo, &mut d[lo..hi])
                        }
                        (true, _) => each(lanes, |l| d[l] = get_packed(words, row + l)),
                        (false, _) => each(lanes, |l| d[l] = words[row + l]),
                    }
                    Ok(())
                }
            }
        };
        self.regs[dst] = d;
        result
    }

    /// Element `addr` of a global or smem access, checked against the
    /// memory's length.
    fn read_checked(
        &self,
        code: &ProgramCode,
        env: &Env,
        acc: &CompiledAccess,
        addr: u64,
        lane: usize,
        t: usize,
    ) -> Result<u32, RunError> {
        let words = match acc.target {
            Target::Global(b) => env.bufs[b].len(),
            Target::Smem(s) => self.smem[s].len(),
            Target::Local(id) => self.locals[id].len() / t.max(1),
        };
        if words_of(acc.elem, addr + 1) > words as u64 {
            return Err(corrupt(code));
        }
        Ok(self.read_elem(env, acc, addr, lane, t))
    }

    /// A store without detection or lane shuffling whose indices are
    /// uniform: the active lanes write one element of global or shared
    /// memory in lane order, so the last one's value stays; for a local
    /// array each lane writes its element of one row.
    pub(super) fn store_uniform(
        &mut self,
        code: &ProgramCode,
        env: &Env,
        src: usize,
        acc: &CompiledAccess,
    ) -> Result<(), RunError> {
        let t = code.threads;
        let lanes = lanes_of(self.span, &self.mask);
        let (Some(first), Some(last)) = (first_lane(lanes), last_lane(lanes)) else {
            return Ok(());
        };
        let addr = self.uniform_address(code, acc, first)?;
        let packed = acc.elem.is_16bit();
        match acc.target {
            Target::Global(b) => {
                if words_of(acc.elem, addr + 1) > env.bufs[b].len() as u64 {
                    return Err(corrupt(code));
                }
            }
            Target::Smem(s) => {
                if words_of(acc.elem, addr + 1) > self.smem[s].len() as u64 {
                    return Err(corrupt(code));
                }
            }
            Target::Local(id) => {
                let s = &self.regs[src];
                let words = &mut self.locals[id];
                let row = addr as usize * t;
                if words_of(acc.elem, (row + t) as u64) > words.len() as u64 {
                    return Err(corrupt(code));
                }
                match (packed, lanes) {
                    (false, Lanes::Range(lo, hi)) => {
                        words[row + lo..row + hi].copy_from_slice(&s[lo..hi])
                    }
                    (true, Lanes::Range(lo, hi)) => set_run_packed(words, row + lo, &s[lo..hi]),
                    (true, _) => each(lanes, |l| set_packed(words, row + l, s[l])),
                    (false, _) => each(lanes, |l| words[row + l] = s[l]),
                }
                return Ok(());
            }
        }
        let v = self.regs[src][last];
        self.write_elem(env, acc, addr, last, t, v)
    }
}
