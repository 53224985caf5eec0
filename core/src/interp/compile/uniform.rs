//! Which registers are uniform: wherever an instruction reads one, every
//! active lane holds the same value in it, so an instruction whose
//! operands are all uniform computes its result once (`exec`).
//!
//! Literals, scalar parameters, axis sizes and block-axis indices are
//! uniform; the lane index is not. A register written by one instruction
//! (an expression's temporary or a `let`) is uniform when that
//! instruction's operands are: it is read only after its write, in its
//! scope, by a subset of the lanes that wrote it. A variable (written
//! by several instructions) is uniform when every write's operands are
//! and every write runs under uniform control relative to the variable's
//! declaration: every construct (an `if` or a loop) that encloses the
//! write but not the declaration chooses its lanes by uniform registers
//! and has no `break` or `continue` (then all lanes of the declaration's
//! scope take the same writes, or none of them does). The variable of a
//! loop belongs to the loop: lanes that left it do not read it again.
//! The registers start uniform and lose the property until nothing
//! changes (a write later in a loop can make an earlier read not uniform).

use super::{Instr, Reg, RegInit, Target};

/// An `if` or a loop, as the compiler met it.
#[derive(Debug)]
pub(crate) struct Construct {
    pub parent: Option<usize>,
    /// The registers that choose its lanes: an `if`'s condition, a `for`'s
    /// variable and end, a `while`'s count, maximum and condition.
    pub conds: Vec<Reg>,
    /// A loop with a `break` or `continue` in it.
    pub exits: bool,
}

/// What the compiler recorded about registers and control.
pub(crate) struct Declarations<'a> {
    pub mutable: &'a [bool],
    pub declared_in: &'a [Option<usize>],
    pub constructs: &'a [Construct],
    /// (first instruction, construct) wherever the construct changes.
    pub marks: &'a [(usize, Option<usize>)],
}

impl Declarations<'_> {
    /// The construct of each of `n` instructions.
    fn construct_of_each(&self, n: usize) -> Vec<Option<usize>> {
        let mut out = vec![None; n];
        let mut marks = self.marks.iter().peekable();
        let mut current = None;
        for (i, slot) in out.iter_mut().enumerate() {
            while let Some(&&(at, c)) = marks.peek() {
                if at > i {
                    break;
                }
                current = c;
                marks.next();
            }
            *slot = current;
        }
        out
    }

    /// Whether construct `outer` is `inner` or encloses it.
    fn encloses(&self, outer: Option<usize>, inner: Option<usize>) -> bool {
        let Some(outer) = outer else {
            return true;
        };
        let mut c = inner;
        while let Some(id) = c {
            if id == outer {
                return true;
            }
            c = self.constructs[id].parent;
        }
        false
    }
}

/// Marks every access whose indices are all uniform (`CompiledAccess::uniform`)
/// and returns whether each register is uniform.
pub(crate) fn analyse(code: &mut [Instr], regs: &[RegInit], decls: &Declarations) -> Vec<bool> {
    let mut uniform: Vec<bool> = regs
        .iter()
        .map(|init| !matches!(init, RegInit::Lane))
        .collect();
    let within = decls.construct_of_each(code.len());
    loop {
        let control: Vec<bool> = decls
            .constructs
            .iter()
            .map(|c| !c.exits && c.conds.iter().all(|&r| uniform[r]))
            .collect();
        // Whether a write at `at` to `reg` keeps it uniform, given that the
        // written value is.
        let uniform_control = |reg: Reg, at: usize| {
            if !decls.mutable[reg] {
                return true;
            }
            let declared = decls.declared_in[reg];
            let mut c = within[at];
            while let Some(id) = c {
                if decls.encloses(Some(id), declared) {
                    break;
                }
                if !control[id] {
                    return false;
                }
                c = decls.constructs[id].parent;
            }
            true
        };
        let mut changed = false;
        for (at, instr) in code.iter().enumerate() {
            let u = |r: Reg| uniform[r];
            let mut writes: [(Reg, bool); 4] = [(usize::MAX, true); 4];
            match instr {
                Instr::Bin { dst, a, b, .. } => writes[0] = (*dst, u(*a) && u(*b)),
                Instr::Un { dst, a, .. } => writes[0] = (*dst, u(*a)),
                Instr::Select { dst, c, a, b } | Instr::Fma { dst, a, b, c, .. } => {
                    writes[0] = (*dst, u(*a) && u(*b) && u(*c))
                }
                Instr::Mov { dst, src, .. } => writes[0] = (*dst, u(*src)),
                Instr::Inc { var } => writes[0] = (*var, u(*var)),
                Instr::Load { dst, acc } => {
                    let indices = acc.dims.iter().chain(acc.coords.iter().flatten());
                    let same_element = indices.clone().all(|&(r, _, _)| u(r));
                    // Each lane reads its own element of a local array.
                    writes[0] = (
                        *dst,
                        same_element && !matches!(acc.target, Target::Local(_)),
                    )
                }
                Instr::Atomic { dst: Some(d), .. } => writes[0] = (*d, false),
                Instr::Warp { dst, .. } => writes[0] = (*dst, false),
                Instr::Mma(regs) => {
                    // Four results: the fragment of each lane.
                    for (w, &d) in writes.iter_mut().zip(&regs.d) {
                        *w = (d, false);
                    }
                }
                // Filled with one value on every lane (validation keeps a
                // block collective in block-uniform control; a semaphore
                // read reads one element).
                Instr::BlockCollective { .. } | Instr::SemRead { .. } => {}
                _ => {}
            }
            for (reg, value_uniform) in writes {
                if reg == usize::MAX || !uniform[reg] {
                    continue;
                }
                if !(value_uniform && uniform_control(reg, at)) {
                    uniform[reg] = false;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    for instr in code.iter_mut() {
        let acc = match instr {
            Instr::Load { acc, .. }
            | Instr::Store { acc, .. }
            | Instr::Atomic { acc, .. }
            | Instr::Sem { acc, .. }
            | Instr::SemRead { acc, .. } => acc,
            _ => continue,
        };
        acc.uniform = acc
            .dims
            .iter()
            .chain(acc.coords.iter().flatten())
            .all(|&(r, _, _)| uniform[r]);
    }
    uniform
}
