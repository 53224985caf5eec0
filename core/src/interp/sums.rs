//! How far the order of f32 atomic adds can move a result.
//!
//! f32 `atomic_add` is one correctly rounded IEEE addition per operation
//! (docs/numerics.md, "f32 atomics"), but the order of the additions into one
//! element is the schedule's, and float addition does not associate: two
//! schedules, or two backends, may give sums a few ulps apart. Both the
//! interpreter's comparison of its own schedules and conformance's `profile`
//! bound take that distance from here, so that they agree.
//!
//! The bound: a sum of `n + 1` terms (the element's starting value and `n`
//! added values) in any order is within `γ_n · Σ|x_i|` of the exact sum, where
//! `γ_n = n·u / (1 - n·u)` and `u = 2^-24` (Higham, "Accuracy and Stability of
//! Numerical Algorithms", 4.2). When the terms have one sign, `Σ|x_i|` is the
//! sum itself, and since an f32's ulp is more than `u` times its magnitude,
//! two orders' results are at most about `2n` ulps apart
//! ([`summation_order_ulps`]). Terms of mixed signs can cancel, and then no
//! relative bound holds: cases sum such terms with values whose sums are exact
//! (small integers, multiples of a power of two) and compare them `exact`.

use std::collections::BTreeMap;

use crate::ir::visit::for_each_stmt;
use crate::ir::{
    AtomicOp, Expr, Kernel, Literal, MemorySpace, Mesh, MpmdMap, ScalarType, Stmt, Type,
};

/// The most f32 `atomic_add`s that one call of `map` can apply to one element
/// of one ref, the largest over refs: every execution of every `atomic_add`
/// on the ref (all threads of all blocks for gmem, of one block for smem,
/// times the trip counts of the enclosing loops), except that executions
/// differing in an axis whose `axis_index` is one of the add's indices (or a
/// `let` bound to it) reach different elements and are not counted together.
/// `kernels[i]` is the kernel of `map.programs[i]`; `scalar` gives the call's
/// scalar values, for loop bounds that name one. `None` when a loop around
/// such an add has a bound that is neither a literal nor a scalar, or the
/// add is nested in a statement this walk does not count (any but `if` and
/// `for`); `Some(0)` without f32 adds.
pub fn f32_atomic_add_terms(
    map: &MpmdMap,
    meshes: &[Mesh],
    kernels: &[&Kernel],
    scalar: &dyn Fn(&str) -> Option<Literal>,
) -> Option<u64> {
    let mut per_ref: BTreeMap<&str, u64> = BTreeMap::new();
    for (program, kernel) in map.programs.iter().zip(kernels) {
        let mesh = meshes.iter().find(|m| m.name == program.mesh)?;
        let mut counter = Counter {
            kernel,
            mesh,
            scalar,
            axis_lets: BTreeMap::new(),
            adds: BTreeMap::new(),
        };
        counter.count(&kernel.body, 1)?;
        for (name, adds) in counter.adds {
            let entry = per_ref.entry(map_operand(map, name)).or_default();
            *entry = entry.saturating_add(adds);
        }
    }
    Some(per_ref.into_values().max().unwrap_or(0))
}

/// The operand an alias input writes into: an aliased input and its output
/// are one buffer.
fn map_operand<'m>(map: &'m MpmdMap, name: &'m str) -> &'m str {
    map.aliases
        .iter()
        .find(|a| a.input == name)
        .map_or(name, |a| a.output.as_str())
}

/// How many ulps apart two results of `terms` f32 additions of same-sign
/// values into one element can be when the additions run in different
/// orders: `2·γ_n / (u·(1 - γ_n))` rounded up, which is `2n + 1` while
/// `4n²u < 1` and grows by `4n²u` beyond (module comment). 0 for no adds.
pub fn summation_order_ulps(terms: u64) -> u64 {
    if terms == 0 {
        return 0;
    }
    let quadratic = terms.saturating_mul(terms).saturating_mul(4) >> 24;
    terms
        .saturating_mul(2)
        .saturating_add(1)
        .saturating_add(quadratic)
}

/// Counts the f32 adds of one program's kernel.
struct Counter<'k> {
    kernel: &'k Kernel,
    mesh: &'k Mesh,
    scalar: &'k dyn Fn(&str) -> Option<Literal>,
    /// `let`s bound to `axis_index(axis)`: name to axis.
    axis_lets: BTreeMap<&'k str, &'k str>,
    /// Per f32 ref, the executions that may reach one element.
    adds: BTreeMap<&'k str, u64>,
}

impl<'k> Counter<'k> {
    /// Counts `body` run `times` times by each thread (both branches of an
    /// `if` count: an upper bound).
    fn count(&mut self, body: &'k [Stmt], times: u64) -> Option<()> {
        for stmt in body {
            match stmt {
                Stmt::Let {
                    var,
                    value: Expr::AxisIndex(axis),
                } => {
                    self.axis_lets.insert(var.name.as_str(), axis.as_str());
                }
                Stmt::Atomic {
                    op: AtomicOp::Add,
                    target,
                    ..
                } => {
                    if let Some(smem) = self.f32_ref(&target.base) {
                        let copies = self.copies(&target.index, smem);
                        let entry = self.adds.entry(target.base.as_str()).or_default();
                        *entry = entry.saturating_add(times.saturating_mul(copies));
                    }
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    self.count(then_body, times)?;
                    self.count(else_body, times)?;
                }
                Stmt::For {
                    start, end, body, ..
                } => {
                    let trip = match (self.bound(start), self.bound(end)) {
                        (Some(s), Some(e)) => Some(e.saturating_sub(s).max(0) as u64),
                        _ => None,
                    };
                    self.count_loop(body, times, trip)?;
                }
                // At most `max` trips.
                Stmt::While { max, body, .. } => {
                    let trip = self.bound(max).map(|m| m.max(0) as u64);
                    self.count_loop(body, times, trip)?;
                }
                // Any other statement that holds an f32 add in a body of its
                // own (a kind of loop this walk does not know): no bound.
                other => {
                    let mut nested_add = false;
                    for_each_stmt(std::slice::from_ref(other), &mut |s| {
                        if let Stmt::Atomic {
                            op: AtomicOp::Add,
                            target,
                            ..
                        } = s
                        {
                            nested_add |= self.f32_ref(&target.base).is_some();
                        }
                    });
                    if nested_add {
                        return None;
                    }
                }
            }
        }
        Some(())
    }

    /// `Some(is smem)` for an f32 ref parameter.
    /// A loop body run `trip` times per run of the loop; an unknown trip
    /// count matters only when the loop adds.
    fn count_loop(&mut self, body: &'k [Stmt], times: u64, trip: Option<u64>) -> Option<()> {
        match trip {
            Some(trip) => self.count(body, times.saturating_mul(trip)),
            None => {
                let before = self.adds.clone();
                self.count(body, 1)?;
                (self.adds == before).then_some(())
            }
        }
    }

    fn f32_ref(&self, name: &str) -> Option<bool> {
        self.kernel.params.iter().find_map(|p| match &p.ty {
            Type::Ref(r) if p.name == name && r.elem == ScalarType::F32 => {
                Some(r.space == MemorySpace::Smem)
            }
            _ => None,
        })
    }

    /// Threads (of all blocks, for gmem) that may reach one element of an
    /// add indexed by `index`: the axes an index pins are left out.
    fn copies(&self, index: &[Expr], smem: bool) -> u64 {
        let pinned: Vec<&str> = index
            .iter()
            .filter_map(|e| match e {
                Expr::AxisIndex(axis) => Some(axis.as_str()),
                Expr::Var(name) => self.axis_lets.get(name.as_str()).copied(),
                _ => None,
            })
            .collect();
        let free = |name: &str| !pinned.contains(&name);
        let mut copies = 1u64;
        if free(&self.mesh.threads.name) {
            copies = u64::from(self.mesh.threads.size);
        }
        if !smem {
            for axis in self.mesh.block_axes().filter(|a| free(&a.name)) {
                copies = copies.saturating_mul(u64::from(axis.size));
            }
        }
        copies
    }

    /// A loop bound's value when it is a literal or a scalar parameter.
    fn bound(&self, e: &Expr) -> Option<i64> {
        bound(e, self.scalar)
    }
}

/// A loop bound's value when it is a literal or a scalar parameter.
fn bound(e: &Expr, scalar: &dyn Fn(&str) -> Option<Literal>) -> Option<i64> {
    let literal = match e {
        Expr::Lit(l) => *l,
        Expr::Var(name) => scalar(name)?,
        _ => return None,
    };
    match literal {
        Literal::I32(v) => Some(i64::from(v)),
        Literal::U32(v) => Some(i64::from(v)),
        _ => None,
    }
}

/// Whether two words of an `elem` output are at most `ulps` units in the
/// last place of `elem` apart (the interpreter compares `ulp(n)` and
/// `profile` outputs of its schedules so). NaNs and infinities agree only
/// with themselves; integers and bools only when equal.
pub(crate) fn within_ulps(elem: ScalarType, a: u32, b: u32, ulps: u64) -> bool {
    if a == b {
        return true;
    }
    // The interpreter's canonical NaN of a 16-bit type is f32's, past 16 bits.
    if elem.is_16bit() && (a > 0xffff || b > 0xffff) {
        return false;
    }
    let (Some(x), Some(y)) = (
        Literal::from_bits(elem, a).as_f32(),
        Literal::from_bits(elem, b).as_f32(),
    ) else {
        return false;
    };
    if !elem.is_float() || !x.is_finite() || !y.is_finite() {
        return false;
    }
    // Floats on a line of integers where neighbours differ by one.
    let sign = if elem.is_16bit() { 0x8000 } else { 0x8000_0000 };
    let key = |bits: u32| {
        let magnitude = i64::from(bits & (sign - 1));
        if bits & sign != 0 {
            -magnitude
        } else {
            magnitude
        }
    };
    key(a).abs_diff(key(b)) <= ulps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::*;

    #[test]
    fn ulps_apart_in_the_element_type() {
        let f = |v: f32| v.to_bits();
        assert!(within_ulps(
            ScalarType::F32,
            f(1.0),
            f(1.0 + f32::EPSILON * 3.0),
            3
        ));
        assert!(!within_ulps(
            ScalarType::F32,
            f(1.0),
            f(1.0 + f32::EPSILON * 3.0),
            2
        ));
        // Across zero and across a binade.
        assert!(within_ulps(ScalarType::F32, 1, 0x8000_0001, 2));
        assert!(within_ulps(ScalarType::F32, f(2.0), f(2.0) - 1, 1));
        assert!(!within_ulps(
            ScalarType::F32,
            f(f32::MAX),
            f(f32::INFINITY),
            100
        ));
        assert!(!within_ulps(ScalarType::F32, f(1.0), f(f32::NAN), u64::MAX));
        assert!(within_ulps(ScalarType::BF16, 0x3f80, 0x3f82, 2));
        assert!(!within_ulps(ScalarType::BF16, 0x3f80, 0x3f83, 2));
        assert!(!within_ulps(ScalarType::I32, 1, 2, 5));
    }

    #[test]
    fn order_bound_is_twice_the_adds_plus_one() {
        assert_eq!(summation_order_ulps(0), 0);
        assert_eq!(summation_order_ulps(1), 3);
        assert_eq!(summation_order_ulps(512), 1025);
        // 4n²u reaches 1 at n = 2048.
        assert_eq!(summation_order_ulps(2048), 4098);
        assert_eq!(summation_order_ulps(u64::MAX), u64::MAX);
    }

    #[test]
    fn terms_count_threads_blocks_and_loop_trips() {
        let map = MapBuilder::new("m")
            .program("g", "k")
            .output("sum", gmem(ScalarType::F32, [4]))
            .output("count", gmem(ScalarType::U32, [1]))
            .scalar("n", ScalarType::U32)
            .scratch("tile", smem(ScalarType::F32, [4]))
            .build();
        let kernel = KernelBuilder::new("k", map.params()).body(|b| {
            b.atomic(AtomicOp::Add, at("sum", [0u32.into()]), [1.0.into()]);
            // Each thread of a block its own element: the 8 blocks add to it.
            b.let_("col", ScalarType::U32, axis_index("t"));
            b.atomic(AtomicOp::Add, at("sum", [var("col")]), [1.0.into()]);
            b.atomic(
                AtomicOp::Add,
                at("sum", [axis_index("b") + 1u32]),
                [1.0.into()],
            );
            b.atomic(AtomicOp::Add, at("count", [0u32.into()]), [1u32.into()]);
            b.for_("i", ScalarType::U32, 0u32, var("n"), |b, _| {
                b.for_("j", ScalarType::U32, 1u32, 4u32, |b, _| {
                    b.atomic(AtomicOp::Add, at("tile", [0u32.into()]), [1.0.into()]);
                });
            });
        });
        let mesh = MeshBuilder::new("g").grid("b", 8).threads("t", 32).build();
        let n = |value: u32| move |name: &str| (name == "n").then_some(Literal::U32(value));
        let terms =
            |value| f32_atomic_add_terms(&map, std::slice::from_ref(&mesh), &[&kernel], &n(value));
        // sum: 8 blocks * 32 threads, plus 8 and 8 * 32 where an index is
        // not a bare axis index; tile (smem, one block): 32 threads * n * 3.
        assert_eq!(terms(1), Some(520));
        assert_eq!(terms(6), Some(576));
        // An unknown trip count around an f32 add gives no bound.
        let unknown = |_: &str| None;
        assert_eq!(
            f32_atomic_add_terms(&map, &[mesh], &[&kernel], &unknown),
            None
        );
    }
}
