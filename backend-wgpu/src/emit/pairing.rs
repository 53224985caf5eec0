//! Paired 16-bit stores: two invocations of one subgroup that store the two
//! halves of one word at the same time write it whole, with one atomic
//! store, instead of clearing and setting their half with two atomics each
//! (llvmpipe runs a storage atomic lane by lane, so the two-atomic store
//! took 4 to 6 times a plain word store).
//!
//! Which invocations pair is decided at run time, by the store itself: each
//! invocation learns from its subgroup neighbour (`subgroup_invocation_id ^ 1`)
//! whether that neighbour is active at this store (`subgroupBallot`) and
//! which element it stores (`subgroupShuffleXor`); when the neighbour stores
//! the other half of the same word, the invocation storing the low half
//! stores the word made of both values and the other stores nothing,
//! otherwise each falls back to the two-atomic store. Pairing is mutual:
//! both read the same ballot (a subgroup operation's result is the same for
//! every invocation taking part), and each finds the other's element to be
//! its own `^ 1`, so exactly one of a pair stores. Any index, any subgroup
//! size or layout is exact: the pairing is only ever an observed fact.
//!
//! Where it is allowed is decided here, statically: the low half's atomic
//! store also writes its neighbour's half, so that write must not be able to
//! land after a later write of that half, nor after an access that another
//! invocation orders after the neighbour's store statement. A store pairs only when
//! nothing of the kernel can come after it: it is the only statement of the
//! kernel that writes its WGSL array (so no later store, atomic or
//! semaphore operation of any thread touches the word, and it runs at most
//! once per invocation: it is in no loop), and no semaphore operation
//! follows it (a signal would let another block read or write the word
//! before the word's store lands). What orders the kernel's stores
//! before everything else is then the end of its dispatch, which orders the
//! word's store like any other. Fused dispatches (one workgroup running a program as a
//! function of the fused entry point) do not pair.

use std::collections::{HashMap, HashSet};

use mpmd_core::ir::Stmt;

/// Where the writes of one WGSL array are in a kernel.
#[derive(Default)]
struct Writes {
    count: usize,
    /// The pre-order position of the first write, when it is a store in no loop.
    lone_store: Option<usize>,
}

/// The WGSL arrays of a kernel whose one write is a store that may pair:
/// `array_of` names the array of a ref that lives in gmem or smem (`None`
/// for `local` arrays, which are the invocation's own).
pub(super) fn pairable_arrays(
    body: &[Stmt],
    array_of: &dyn Fn(&str) -> Option<String>,
) -> HashSet<String> {
    let mut walk = Walk {
        array_of,
        position: 0,
        writes: HashMap::new(),
        last_sem: None,
        opaque: false,
    };
    walk.block(body, false);
    if walk.opaque {
        return HashSet::new();
    }
    let last_sem = walk.last_sem;
    walk.writes
        .into_iter()
        .filter(|(_, w)| w.count == 1)
        .filter_map(|(array, w)| {
            let at = w.lone_store?;
            last_sem.is_none_or(|sem| sem < at).then_some(array)
        })
        .collect()
}

struct Walk<'a> {
    array_of: &'a dyn Fn(&str) -> Option<String>,
    /// Statements seen so far (pre-order, source order).
    position: usize,
    writes: HashMap<String, Writes>,
    /// The position of the last semaphore operation.
    last_sem: Option<usize>,
    /// A statement the expansion should have removed: nothing pairs.
    opaque: bool,
}

impl Walk<'_> {
    fn block(&mut self, body: &[Stmt], in_loop: bool) {
        for stmt in body {
            self.stmt(stmt, in_loop);
        }
    }

    fn write(&mut self, base: &str, store: bool, in_loop: bool) {
        let Some(array) = (self.array_of)(base) else {
            return;
        };
        let position = self.position;
        let w = self.writes.entry(array).or_default();
        w.count += 1;
        if w.count == 1 && store && !in_loop {
            w.lone_store = Some(position);
        }
    }

    fn stmt(&mut self, stmt: &Stmt, in_loop: bool) {
        self.position += 1;
        match stmt {
            Stmt::Store { target, .. } => self.write(&target.base, true, in_loop),
            Stmt::Atomic { target, .. } => self.write(&target.base, false, in_loop),
            Stmt::CompoundStore { target, .. } => self.write(&target.base, false, in_loop),
            Stmt::Sem { sem, .. } => {
                self.last_sem = Some(self.position);
                self.write(&sem.base, false, in_loop);
            }
            Stmt::Call { .. } | Stmt::Return { .. } => self.opaque = true,
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                self.block(then_body, in_loop);
                self.block(else_body, in_loop);
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => self.block(body, true),
            Stmt::Let { .. }
            | Stmt::Var { .. }
            | Stmt::Assign { .. }
            | Stmt::LocalArray { .. }
            | Stmt::Break
            | Stmt::Continue
            | Stmt::CompoundAssign { .. }
            | Stmt::Barrier
            | Stmt::SemRead { .. }
            | Stmt::Warp { .. }
            | Stmt::BlockCollective { .. }
            | Stmt::Mma { .. }
            | Stmt::MmaLoad { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpmd_core::text::parse;

    fn arrays(src: &str) -> Vec<String> {
        let (module, _) = parse(src).expect("parses");
        let kernel = &module.kernels[0];
        let refs: Vec<String> = kernel
            .params
            .iter()
            .filter(|p| p.ty.as_ref_type().is_some())
            .map(|p| p.name.clone())
            .collect();
        let array_of = |name: &str| refs.iter().any(|r| r == name).then(|| format!("g_{name}"));
        let mut found: Vec<String> = pairable_arrays(&kernel.body, &array_of)
            .into_iter()
            .collect();
        found.sort();
        found
    }

    const HEAD: &str = "mesh m { threads t = 64; }\n";

    #[test]
    fn a_lone_store_outside_loops_pairs() {
        let src = format!(
            "{HEAD}kernel k(x: gmem<f16[64]>, y: gmem<f16[64]>) {{
  let i: u32 = axis_index(t);
  if i < 32u {{ y[i] = x[i]; }}
}}"
        );
        assert_eq!(arrays(&src), ["g_y"]);
    }

    #[test]
    fn a_second_write_a_loop_or_a_later_semaphore_operation_stops_pairing() {
        let two_stores = format!(
            "{HEAD}kernel k(x: gmem<f16[64]>, y: gmem<f16[64]>) {{
  y[axis_index(t)] = x[0];
  y[63u - axis_index(t)] = x[1];
}}"
        );
        assert!(arrays(&two_stores).is_empty());
        let in_loop = format!(
            "{HEAD}kernel k(x: gmem<f16[64]>, y: gmem<f16[64]>) {{
  for j: u32 in 0u..2u {{ y[axis_index(t)] = x[j]; }}
}}"
        );
        assert!(arrays(&in_loop).is_empty());
        let then_signal = format!(
            "{HEAD}kernel k(y: gmem<f16[64]>, s: sem<[1]>) {{
  wait(s[0], 0);
  y[axis_index(t)] = y[0];
  signal(s[0], 1);
}}"
        );
        assert!(arrays(&then_signal).is_empty());
        let signal_first = format!(
            "{HEAD}kernel k(y: gmem<f16[64]>, z: gmem<f16[64]>, s: sem<[1]>) {{
  wait(s[0], 0);
  y[axis_index(t)] = z[0];
}}"
        );
        assert_eq!(arrays(&signal_first), ["g_y"]);
    }
}
