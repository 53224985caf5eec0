//! Tensor cores ([`GenOptions::mma`]): mma groups, their fragment fills from
//! smem tiles, gmem inputs and per-lane values, the multiplies and stores.

use super::*;

impl Gen {
    // ---- tensor cores ----------------------------------------------------

    /// Plans the mma groups of the warp programs (the first always, each
    /// other one with even odds), from the mma stream alone.
    pub(super) fn plan_mma(&mut self) {
        for i in 0..self.programs.len() {
            let (warps, branches) = (self.programs[i].warps, self.programs[i].warp_branches);
            if !warps || (i > 0 && !self.mma_rng.chance(50)) {
                continue;
            }
            let r = &mut self.mma_rng;
            let count = r.range(1, MMA_GROUPS_MAX);
            let sources = [
                MmaSource::Values,
                MmaSource::Values,
                MmaSource::Smem,
                MmaSource::Gmem,
            ];
            let groups = (0..count)
                .map(|_| MmaGroup {
                    ty: *r.pick(&mma::INPUT_TYPES),
                    rows: if r.chance(50) {
                        0
                    } else {
                        r.range(2, MMA_ROWS_MAX)
                    },
                    a: *r.pick(&sources),
                    b: *r.pick(&sources),
                    special_input: r.chance(50),
                    in_branch: branches && r.chance(40),
                })
                .collect();
            self.programs[i].mma = groups;
        }
    }

    /// Whether the fragment source input `name` holds edge values; `None`
    /// when it is no fragment source.
    pub(super) fn mma_input_is_special(&self, name: &str) -> Option<bool> {
        self.programs.iter().enumerate().find_map(|(i, p)| {
            p.mma.iter().enumerate().find_map(|(g, group)| {
                (group.source_needed(MmaSource::Gmem) && mma_input(i, g) == name)
                    .then_some(group.special_input)
            })
        })
    }

    /// Runs `f` with the mma stream as `rng` and restores everything the
    /// rest of the kernel would see: the mma statements leave no value in
    /// scope (their results reach only `mo<i>`, as the `mma` compare mode
    /// needs) and draw nothing from the main stream.
    pub(super) fn with_mma_stream(&mut self, f: impl FnOnce(&mut Self)) {
        std::mem::swap(&mut self.rng, &mut self.mma_rng);
        let (nv, nr, nw) = (self.vals.len(), self.vars.len(), self.warp_vals.len());
        let (nest, loop_depth, warp_ctl) = (self.nest, self.loop_depth, self.warp_ctl);
        f(self);
        self.vals.truncate(nv);
        self.vars.truncate(nr);
        self.warp_vals.truncate(nw);
        (self.nest, self.loop_depth, self.warp_ctl) = (nest, loop_depth, warp_ctl);
        std::mem::swap(&mut self.rng, &mut self.mma_rng);
    }

    /// One mma group at the top of a warp program (block-uniform control):
    /// its smem tile filled before a barrier, then (sometimes under a branch
    /// on the warp index) fragments declared and filled, multiplied and
    /// stored to the group's slots of `mo<i>`.
    pub(super) fn mma_group(&mut self, body: &mut Vec<Stmt>, g: usize, group: &MmaGroup) {
        let i = self.cur;
        let threads = self.programs[i].threads;
        if group.source_needed(MmaSource::Smem) {
            self.mma_fill_tile(body, g, group.ty, threads);
            body.push(Stmt::Barrier);
        }
        let name = |what: &str| format!("mm{g}_{what}");
        let (fa, fb, acc) = (name("a"), name("b"), name("c"));
        let shape = |len: u32| {
            if group.rows == 0 {
                vec![len]
            } else {
                vec![group.rows, len]
            }
        };
        let mut stmts = vec![
            Stmt::LocalArray {
                name: fa.clone(),
                elem: group.ty,
                shape: shape(mma::A_LEN),
            },
            Stmt::LocalArray {
                name: fb.clone(),
                elem: group.ty,
                shape: shape(mma::B_LEN),
            },
            Stmt::LocalArray {
                name: acc.clone(),
                elem: F32,
                shape: shape(mma::C_LEN),
            },
        ];
        self.mma_fill_fragment(&mut stmts, g, group, mma::Operand::A, &fa);
        self.mma_fill_fragment(&mut stmts, g, group, mma::Operand::B, &fb);
        self.mma_fill_accumulator(&mut stmts, g, group, &acc);
        let result = self.mma_multiply(&mut stmts, g, group, [&fa, &fb, &acc]);
        self.mma_store(&mut stmts, g, group, &result);
        if group.in_branch {
            let warps = threads / 32;
            let k = self.rng.range(0, warps - 1);
            let warp = var("t") / lit_u32(32);
            let cond = if self.rng.chance(50) {
                warp.eq(lit_u32(k))
            } else {
                (warp % lit_u32(2)).eq(lit_u32(k % 2))
            };
            body.push(Stmt::If {
                cond,
                then_body: stmts,
                else_body: vec![],
            });
        } else {
            body.extend(stmts);
        }
    }

    /// Every element of the group's smem tile written once by the block
    /// (element `x` by thread `x % threads`), from values of `x`.
    pub(super) fn mma_fill_tile(
        &mut self,
        body: &mut Vec<Stmt>,
        g: usize,
        ty: ScalarType,
        threads: u32,
    ) {
        let [bufs, rows, cols] = MMA_TILE;
        let total = bufs * rows * cols;
        let (f, x) = (format!("mm{g}_f"), format!("mm{g}_x"));
        let value = self.mma_tile_value(ty, var(&x));
        let store = Stmt::Store {
            target: at(
                &mma_tile(self.cur, g),
                [
                    var(&x) / lit_u32(rows * cols),
                    var(&x) / lit_u32(cols) % lit_u32(rows),
                    var(&x) % lit_u32(cols),
                ],
            ),
            value,
        };
        let guarded = if total.is_multiple_of(threads) {
            store
        } else {
            Stmt::If {
                cond: var(&x).lt(lit_u32(total)),
                then_body: vec![store],
                else_body: vec![],
            }
        };
        body.push(Stmt::For {
            var: Binding {
                name: f.clone(),
                ty: U32,
            },
            start: lit_u32(0),
            end: lit_u32(total.div_ceil(threads)),
            body: vec![
                Stmt::Let {
                    var: Binding {
                        name: x.clone(),
                        ty: U32,
                    },
                    value: var("t") + lit_u32(threads) * var(&f),
                },
                guarded,
            ],
        });
    }

    /// A value of tile element `x`: exact small values or converted input
    /// data, sometimes an edge value.
    pub(super) fn mma_tile_value(&mut self, ty: ScalarType, x: Expr) -> Expr {
        let base = match self.rng.below(3) {
            0 => {
                let c = lit_u32(2 * self.rng.range(1, 20) + 1);
                (((x.clone() * c) % lit_u32(23)).cast(F32) * 0.25f32 - 2.75f32).cast(ty)
            }
            1 if !self.inputs.is_empty() => {
                let input = self.rng.pick(&self.inputs).clone();
                let c = lit_u32(self.rng.range(0, input.len - 1));
                let e = load(&input.name, [(x.clone() + c) % lit_u32(input.len)]);
                cast_to(e, input.ty, ty)
            }
            _ => {
                let c = lit_u32(self.rng.range(0, 63));
                (((x.clone() ^ c) % lit_u32(9)).cast(F32) - 4.0f32).cast(ty)
            }
        };
        self.sprinkle_special(ty, x, base)
    }

    /// `base`, or in a few of the elements (`index` picks them) an edge
    /// value of `ty` in its place.
    pub(super) fn sprinkle_special(&mut self, ty: ScalarType, index: Expr, base: Expr) -> Expr {
        if !self.rng.chance(40) {
            return base;
        }
        let k = self.rng.range(3, 9);
        let phase = self.rng.range(0, k - 1);
        let special = self.mma_special(ty, index.clone());
        select((index % lit_u32(k)).eq(lit_u32(phase)), special, base)
    }

    /// An edge value of the 16-bit type `ty`: the f32 edge values of `xw`
    /// converted (NaN, infinities, subnormals, extremes), a large value
    /// (in bf16, products of two overflow f32), a subnormal, an infinity
    /// or a NaN.
    pub(super) fn mma_special(&mut self, ty: ScalarType, index: Expr) -> Expr {
        let half = |bits: u32| Expr::Lit(Literal::from_bits(ty, bits));
        let sign = if self.rng.chance(50) { 0x8000 } else { 0 };
        match self.rng.below(5) {
            0 | 1 => {
                let c = lit_u32(self.rng.range(0, WARP_SPECIALS_LEN - 1));
                load(WARP_SPECIALS, [(index + c) % lit_u32(WARP_SPECIALS_LEN)]).cast(ty)
            }
            2 => {
                let large = if ty == BF16 { 3.0e19f32 } else { 16384.0 };
                ((index % lit_u32(8) + lit_u32(1)).cast(F32) * large).cast(ty)
            }
            3 => {
                // The largest subnormals down to the smallest.
                let top = if ty == BF16 { 0x7f } else { 0x3ff };
                half(sign | self.rng.range(1, top))
            }
            _ => {
                let (inf, nan) = if ty == BF16 {
                    (0x7f80, 0x7fc0)
                } else {
                    (0x7c00, 0x7e00)
                };
                half(if self.rng.chance(50) { sign | inf } else { nan })
            }
        }
    }

    /// A per-lane value of A or B element `e` (of type `ty`): exact
    /// values of the lane, converted input data or a generated exact value,
    /// sometimes an edge value.
    pub(super) fn mma_input_value(&mut self, ty: ScalarType, e: Expr) -> Expr {
        let t = var("t");
        let base = match self.rng.below(5) {
            0 | 1 => {
                // Multiples of 1/4 in [-2, 2]: exact in both types.
                let c1 = lit_u32(self.rng.range(1, 40));
                let c2 = lit_u32(self.rng.range(1, 16));
                (((t.clone() * c1 + e.clone() * c2) % lit_u32(17)).cast(F32) * 0.25f32 - 2.0f32)
                    .cast(ty)
            }
            2 if !self.inputs.is_empty() => {
                let input = self.rng.pick(&self.inputs).clone();
                let c = lit_u32(self.rng.range(0, input.len - 1));
                let index = (var("gid") * lit_u32(8) + e.clone() + c) % lit_u32(input.len);
                cast_to(load(&input.name, [index]), input.ty, ty)
            }
            _ => self.value(ty, 2, false, false).e,
        };
        let spread = lit_u32(self.rng.range(1, 5));
        self.sprinkle_special(ty, t + e * spread, base)
    }

    /// A per-lane value of C element `e`: exact f32 values (small ones,
    /// generated ones, full mantissas), sometimes an edge value of `xw`.
    pub(super) fn mma_c_value(&mut self, e: Expr) -> Expr {
        let gid = var("gid");
        let base = match self.rng.below(3) {
            0 => {
                let c1 = lit_u32(self.rng.range(1, 40));
                let c2 = lit_u32(self.rng.range(1, 16));
                ((gid.clone() * c1 + e.clone() * c2) % lit_u32(13)).cast(F32) - 6.0f32
            }
            1 => self.value(F32, 2, false, false).e,
            _ => self.lane_float().e,
        };
        if !self.rng.chance(30) {
            return base;
        }
        let k = self.rng.range(3, 9);
        let index = gid + e * lit_u32(self.rng.range(1, 5));
        let c = lit_u32(self.rng.range(0, WARP_SPECIALS_LEN - 1));
        select(
            (index.clone() % lit_u32(k)).eq(lit_u32(0)),
            load(WARP_SPECIALS, [(index + c) % lit_u32(WARP_SPECIALS_LEN)]),
            base,
        )
    }

    /// Fills every row of the A or B fragment array `array`: element by
    /// element with per-lane values, or with `mma_load_a/b` from the smem
    /// tile or the gmem input at warp-uniform origins that keep the block
    /// inside [`MMA_TILE`].
    pub(super) fn mma_fill_fragment(
        &mut self,
        body: &mut Vec<Stmt>,
        g: usize,
        group: &MmaGroup,
        operand: mma::Operand,
        array: &str,
    ) {
        let (source, len, role) = match operand {
            mma::Operand::A => (group.a, mma::A_LEN, "a"),
            // The generator fills B fragments with `mma_load_b` only.
            mma::Operand::B | mma::Operand::BKMajor => (group.b, mma::B_LEN, "b"),
        };
        let row_var = format!("mm{g}_i{role}");
        let row = (group.rows > 0).then(|| var(&row_var));
        let mut fill = vec![];
        match source {
            MmaSource::Values => {
                let e = format!("mm{g}_e{role}");
                // Each row its own values.
                let element = match &row {
                    Some(r) => var(&e) + r.clone() * lit_u32(len),
                    None => var(&e),
                };
                let value = self.mma_input_value(group.ty, element);
                let mut index = row.iter().cloned().collect::<Vec<_>>();
                index.push(var(&e));
                fill.push(Stmt::For {
                    var: Binding { name: e, ty: U32 },
                    start: lit_u32(0),
                    end: lit_u32(len),
                    body: vec![Stmt::Store {
                        target: at(array, index),
                        value,
                    }],
                });
            }
            MmaSource::Smem | MmaSource::Gmem => {
                let base = if source == MmaSource::Smem {
                    mma_tile(self.cur, g)
                } else {
                    mma_input(self.cur, g)
                };
                let (block_rows, block_cols) = operand.block_shape();
                let [bufs, rows, cols] = MMA_TILE;
                let origin = [
                    self.mma_origin(bufs - 1, row.as_ref(), 1),
                    self.mma_origin(rows - block_rows, row.as_ref(), 8),
                    self.mma_origin(cols - block_cols, row.as_ref(), 4),
                ];
                let dest = match &row {
                    Some(r) => Fragment::row(array, r.clone()),
                    None => Fragment::whole(array),
                };
                fill.push(Stmt::MmaLoad {
                    operand,
                    dest,
                    source: at(&base, origin),
                });
            }
        }
        if group.rows == 0 {
            body.extend(fill);
        } else {
            body.push(Stmt::For {
                var: Binding {
                    name: row_var,
                    ty: U32,
                },
                start: lit_u32(0),
                end: lit_u32(group.rows),
                body: fill,
            });
        }
    }

    /// A warp-uniform origin index in `0..=most`: a literal (often a
    /// multiple of 8, where CUDA uses `ldmatrix`), a multiple `step` of the
    /// row loop's variable, or from the block or warp index.
    pub(super) fn mma_origin(&mut self, most: u32, row: Option<&Expr>, step: u32) -> Expr {
        let eights: Vec<u32> = (0..=most).filter(|v| v % 8 == 0).collect();
        match self.rng.below(6) {
            0 => lit_u32(self.rng.range(0, most)),
            1 => lit_u32(*self.rng.pick(&eights)),
            // The loop runs at most `MMA_ROWS_MAX` rows: `step * i <= most`.
            2 if row.is_some() && step * (MMA_ROWS_MAX - 1) <= most => {
                row.cloned().unwrap_or(lit_u32(0)) * lit_u32(step)
            }
            3 => (var("lin") % lit_u32(2)) * lit_u32(most / 2),
            4 => (var("t") / lit_u32(32) % lit_u32(2)) * lit_u32(most),
            _ => lit_u32(*self.rng.pick(&eights)),
        }
    }

    /// Zero or per-lane values in every element of every accumulator row.
    pub(super) fn mma_fill_accumulator(
        &mut self,
        body: &mut Vec<Stmt>,
        g: usize,
        group: &MmaGroup,
        acc: &str,
    ) {
        let e = format!("mm{g}_ec");
        let value = if self.rng.chance(30) {
            Expr::from(0.0f32)
        } else {
            self.mma_c_value(var(&e))
        };
        let row_var = format!("mm{g}_ic");
        let mut index = vec![];
        if group.rows > 0 {
            index.push(var(&row_var));
        }
        index.push(var(&e));
        let fill = Stmt::For {
            var: Binding { name: e, ty: U32 },
            start: lit_u32(0),
            end: lit_u32(mma::C_LEN),
            body: vec![Stmt::Store {
                target: at(acc, index),
                value,
            }],
        };
        body.push(if group.rows == 0 {
            fill
        } else {
            Stmt::For {
                var: Binding {
                    name: row_var,
                    ty: U32,
                },
                start: lit_u32(0),
                end: lit_u32(group.rows),
                body: vec![fill],
            }
        });
    }

    /// The multiplies: on whole arrays into the accumulator or a separate
    /// `d`, sometimes once more accumulating in place; on rows, one per
    /// accumulator row, sometimes over every A row in turn (a k loop). The
    /// fragment holding D is returned.
    pub(super) fn mma_multiply(
        &mut self,
        body: &mut Vec<Stmt>,
        g: usize,
        group: &MmaGroup,
        [fa, fb, acc]: [&str; 3],
    ) -> String {
        if group.rows == 0 {
            let d = if self.rng.chance(50) {
                acc.to_string()
            } else {
                let d = format!("mm{g}_d");
                body.push(Stmt::LocalArray {
                    name: d.clone(),
                    elem: F32,
                    shape: vec![mma::C_LEN],
                });
                d
            };
            body.push(Stmt::Mma {
                d: Fragment::whole(&d),
                a: Fragment::whole(fa),
                b: Fragment::whole(fb),
                c: Fragment::whole(acc),
            });
            if self.rng.chance(40) {
                body.push(Stmt::Mma {
                    d: Fragment::whole(&d),
                    a: Fragment::whole(fa),
                    b: Fragment::whole(fb),
                    c: Fragment::whole(&d),
                });
            }
            return d;
        }
        let rows = group.rows;
        let (j, k) = (format!("mm{g}_j"), format!("mm{g}_k"));
        let chained = self.rng.chance(40);
        let acc_row = if self.rng.chance(20) {
            // Each lane its own row order: rows may differ between lanes.
            (var("t") + var(&j)) % lit_u32(rows)
        } else {
            var(&j)
        };
        let a_row = if chained {
            var(&k)
        } else {
            self.mma_row(&j, rows)
        };
        let b_row = self.mma_row(&j, rows);
        let multiply = Stmt::Mma {
            d: Fragment::row(acc, acc_row.clone()),
            a: Fragment::row(fa, a_row),
            b: Fragment::row(fb, b_row),
            c: Fragment::row(acc, acc_row),
        };
        let over = |name: &str, body: Vec<Stmt>| Stmt::For {
            var: Binding {
                name: name.to_string(),
                ty: U32,
            },
            start: lit_u32(0),
            end: lit_u32(rows),
            body,
        };
        let inner = over(&j, vec![multiply]);
        body.push(if chained {
            over(&k, vec![inner])
        } else {
            inner
        });
        acc.to_string()
    }

    /// A fragment row in a loop over `j`: `j` itself, the next row, a
    /// constant one, or one that depends on the lane or the warp.
    pub(super) fn mma_row(&mut self, j: &str, rows: u32) -> Expr {
        match self.rng.below(10) {
            0..=4 => var(j),
            5 | 6 => (var(j) + lit_u32(1)) % lit_u32(rows),
            7 => lit_u32(self.rng.range(0, rows - 1)),
            8 => (var("t") + var(j)) % lit_u32(rows),
            _ => (var("t") / lit_u32(32) + var(j)) % lit_u32(rows),
        }
    }

    /// D's elements to the group's slots of `mo<i>` at the thread's global
    /// id: one slot per row, sometimes the sum of two rows (an addition of
    /// mma results, which the `mma` bound covers).
    pub(super) fn mma_store(&mut self, body: &mut Vec<Stmt>, g: usize, group: &MmaGroup, d: &str) {
        let out = format!("{MMA_OUTPUT_PREFIX}{}", self.cur);
        let e = format!("mm{g}_es");
        let first_slot = MMA_ROWS_MAX * g as u32;
        let element = |row: Option<Expr>| {
            let mut index: Vec<Expr> = row.into_iter().collect();
            index.push(var(&e));
            load(d, index)
        };
        let store = |slot: Expr, value: Expr| Stmt::For {
            var: Binding {
                name: e.clone(),
                ty: U32,
            },
            start: lit_u32(0),
            end: lit_u32(mma::C_LEN),
            body: vec![Stmt::Store {
                target: at(&out, [slot, var("gid"), var(&e)]),
                value,
            }],
        };
        if group.rows == 0 {
            body.push(store(lit_u32(first_slot), element(None)));
            return;
        }
        let j = format!("mm{g}_js");
        let row = var(&j);
        let value = if self.rng.chance(25) {
            element(Some(row.clone()))
                + element(Some((row.clone() + lit_u32(1)) % lit_u32(group.rows)))
        } else {
            element(Some(row.clone()))
        };
        body.push(Stmt::For {
            var: Binding { name: j, ty: U32 },
            start: lit_u32(0),
            end: lit_u32(group.rows),
            body: vec![store(lit_u32(first_slot) + row, value)],
        });
    }
}
