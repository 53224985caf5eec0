//! Refs in memory: element indices (bounds-checked in checked mode), loads
//! and stores (16-bit halves of packed words), and atomics.

use mpmd_core::ir::{AtomicOp, Expr, Literal, MemorySpace, RefAccess, RefType, ScalarType};
use mpmd_core::Mode;

use super::bindings::WordType;
use super::expr::Value;
use super::helpers::Helper;
use super::syntax::{atomic_builtin, from_word, to_word, wgsl_scalar};
use super::unit::{Named, UnitEmitter};
use super::{AccessSite, EmitError};

/// How a ref is stored.
#[derive(Clone, Debug)]
pub(super) enum Storage {
    /// A plan buffer in a storage binding, at a word offset.
    Buffer {
        global: String,
        word: WordType,
        offset: u64,
    },
    /// A `var<workgroup>` array.
    Shared { global: String, word: WordType },
    /// A function-scope array (`local`).
    Local { var: String },
}

impl Storage {
    /// The WGSL array that holds the ref.
    fn array(&self) -> &str {
        match self {
            Storage::Buffer { global, .. } | Storage::Shared { global, .. } => global,
            Storage::Local { var } => var,
        }
    }
}

/// What an IR ref name stands for in a unit's WGSL: its type and storage.
#[derive(Clone, Debug)]
pub(super) struct WgslRef {
    pub(super) ty: RefType,
    pub(super) storage: Storage,
}

impl UnitEmitter<'_, '_> {
    pub(super) fn atomic(
        &mut self,
        dest: Option<(&str, ScalarType)>,
        op: AtomicOp,
        target: &RefAccess,
        args: &[Expr],
    ) -> Result<(), EmitError> {
        let mut values = Vec::new();
        for a in args {
            values.push(self.expr(a)?);
        }
        let (place, info) = self.place(target)?;
        let word = match &info.storage {
            Storage::Buffer { word, .. } | Storage::Shared { word, .. } => *word,
            Storage::Local { .. } => return Err(self.invalid("atomic on a local array")),
        };
        if !word.is_atomic() {
            return Err(self.invalid(format!("`{}` is not stored as atomics", target.base)));
        }
        let elem = wgsl_scalar(info.ty.elem);
        let arg = |k: usize| values.get(k).cloned().unwrap_or_default();
        if self.idle_guard {
            // An idle invocation of a fused workgroup: no atomic; a result reads 0.
            let result = match dest {
                Some((name, ty)) => Some((self.bind_scalar(name, ty)?, ty)),
                None => None,
            };
            if let Some((wgsl, ty)) = &result {
                self.line(&format!("var {wgsl}: {};", wgsl_scalar(*ty)));
            }
            self.line("if (!mpmd_idle) {");
            self.depth += 1;
            let inner = self.temp("atomic");
            let saved = self.idle_guard;
            self.idle_guard = false;
            let r = self.atomic(
                result.as_ref().map(|(_, ty)| (inner.as_str(), *ty)),
                op,
                target,
                args,
            );
            self.idle_guard = saved;
            r?;
            if let Some((wgsl, _)) = &result {
                let inner_wgsl = match self.lookup(&inner) {
                    Some(Named::Scalar { wgsl, .. }) => wgsl.clone(),
                    _ => return Err(self.invalid("lost an atomic's result")),
                };
                self.line(&format!("{wgsl} = {inner_wgsl};"));
            }
            self.depth -= 1;
            self.line("}");
            return Ok(());
        }
        if info.ty.elem == ScalarType::F32 {
            return self.f32_atomic(dest, op, &place, &arg(0));
        }
        let value = match op {
            AtomicOp::Load => format!("atomicLoad(&{place})"),
            AtomicOp::Store => {
                self.line(&format!("atomicStore(&{place}, {});", arg(0)));
                return Ok(());
            }
            AtomicOp::Add
            | AtomicOp::Min
            | AtomicOp::Max
            | AtomicOp::And
            | AtomicOp::Or
            | AtomicOp::Xor
            | AtomicOp::Exchange => format!("{}(&{place}, {})", atomic_builtin(op), arg(0)),
            AtomicOp::CompareExchange => {
                // Strong compare-exchange from the weak one: retry spurious failures.
                let cmp = self.temp("expected");
                let new = self.temp("desired");
                let old = self.temp("old");
                self.line(&format!("let {cmp}: {elem} = {};", arg(0)));
                self.line(&format!("let {new}: {elem} = {};", arg(1)));
                self.line(&format!("var {old}: {elem};"));
                self.retry_loop(&[
                    format!("let r = atomicCompareExchangeWeak(&{place}, {cmp}, {new});"),
                    format!("{old} = r.old_value;"),
                    format!("if (r.exchanged || r.old_value != {cmp}) {{ break; }}"),
                ]);
                old
            }
        };
        // A compare-exchange's result is a variable already: nothing to run.
        self.atomic_result(dest, &value, op != AtomicOp::CompareExchange)
    }

    /// An atomic's `value`: bound to `dest`, or else run for its effect
    /// where `value` is the call that does the operation (`run`).
    fn atomic_result(
        &mut self,
        dest: Option<(&str, ScalarType)>,
        value: &str,
        run: bool,
    ) -> Result<(), EmitError> {
        match dest {
            Some((name, ty)) => {
                let wgsl = self.bind_scalar(name, ty)?;
                self.line(&format!("let {wgsl}: {} = {value};", wgsl_scalar(ty)));
            }
            None if run => self.line(&format!("_ = {value};")),
            None => {}
        }
        Ok(())
    }

    /// A compare-exchange loop that runs `body` until it breaks, counted
    /// toward the loop cap like every loop the backend emits.
    fn retry_loop(&mut self, body: &[String]) {
        self.loop_enter();
        self.line("loop {");
        self.depth += 1;
        self.loop_tick(false);
        for line in body {
            self.line(line);
        }
        self.depth -= 1;
        self.line("}");
        self.loop_exit();
    }

    /// An f32 atomic on an `atomic<u32>` word (WGSL has no float atomics):
    /// load, store and exchange move the bits; add, min and max are a
    /// compare-exchange loop that retries until no other invocation changed
    /// the word in between, computing with the same operation as the plain
    /// `+` and the language's `min`/`max` helpers. The loop counts toward the
    /// loop cap like every loop the backend emits.
    fn f32_atomic(
        &mut self,
        dest: Option<(&str, ScalarType)>,
        op: AtomicOp,
        place: &str,
        operand: &str,
    ) -> Result<(), EmitError> {
        let value = match op {
            AtomicOp::Load => format!("bitcast<f32>(atomicLoad(&{place}))"),
            AtomicOp::Store => {
                self.line(&format!("atomicStore(&{place}, bitcast<u32>({operand}));"));
                return Ok(());
            }
            AtomicOp::Exchange => {
                format!("bitcast<f32>(atomicExchange(&{place}, bitcast<u32>({operand})))")
            }
            AtomicOp::Add | AtomicOp::Min | AtomicOp::Max => {
                let v = self.temp("operand");
                let old = self.temp("old");
                self.line(&format!("let {v}: f32 = {operand};"));
                let current = format!("bitcast<f32>({old})");
                let next = match op {
                    AtomicOp::Add => format!("{current} + {v}"),
                    AtomicOp::Min => self.call(Helper::MinF32, "mpmd_min_f32", &[current, v]),
                    _ => self.call(Helper::MaxF32, "mpmd_max_f32", &[current, v]),
                };
                self.line(&format!("var {old}: u32 = atomicLoad(&{place});"));
                self.retry_loop(&[
                    format!(
                        "let r = atomicCompareExchangeWeak(&{place}, {old}, bitcast<u32>({next}));"
                    ),
                    "if (r.exchanged) { break; }".to_string(),
                    format!("{old} = r.old_value;"),
                ]);
                format!("bitcast<f32>({old})")
            }
            _ => {
                return Err(self.invalid(format!("`{}` on f32 elements", op.name())));
            }
        };
        // After a compare-exchange loop the value is a variable's.
        let run = matches!(op, AtomicOp::Load | AtomicOp::Exchange);
        self.atomic_result(dest, &value, run)
    }

    pub(super) fn ref_info(&self, name: &str) -> Result<WgslRef, EmitError> {
        match self.lookup(name) {
            Some(Named::Ref(info)) => Ok(info.clone()),
            Some(Named::Scalar { .. }) => Err(self.invalid(format!("`{name}` is not a ref"))),
            None => Err(self.invalid(format!("unknown ref `{name}`"))),
        }
    }

    /// `array[index]` text for an access, with the ref's info.
    pub(super) fn place(&mut self, access: &RefAccess) -> Result<(String, WgslRef), EmitError> {
        let (place, info, _) = self.place_with_depth(access)?;
        Ok((place, info))
    }

    /// `place`, and how deep the index's text nests.
    pub(super) fn place_with_depth(
        &mut self,
        access: &RefAccess,
    ) -> Result<(String, WgslRef, u32), EmitError> {
        let info = self.ref_info(&access.base)?;
        let (index, _, depth) = self.index_of(access, &info)?;
        Ok((format!("{}[{index}]", info.storage.array()), info, depth))
    }

    /// A 16-bit element of `access`: its array, and a `let` (emitted here)
    /// holding its element index; the element is half `index & 1` of word
    /// `index >> 1`.
    fn half_element(&mut self, access: &RefAccess) -> Result<(String, String, WgslRef), EmitError> {
        let info = self.ref_info(&access.base)?;
        let (index, _, _) = self.index_of(access, &info)?;
        let array = info.storage.array().to_string();
        let name = self.temp("h");
        self.line(&format!("let {name}: u32 = {index};"));
        Ok((array, name, info))
    }

    /// A 16-bit load: the element's half of its word, in the low half.
    pub(super) fn load_half(
        &mut self,
        access: &RefAccess,
    ) -> Result<(String, ScalarType), EmitError> {
        let (array, i, info) = self.half_element(access)?;
        let word = match &info.storage {
            Storage::Buffer { word, .. } | Storage::Shared { word, .. } if word.is_atomic() => {
                format!("atomicLoad(&{array}[{i} >> 1u])")
            }
            _ => format!("{array}[{i} >> 1u]"),
        };
        Ok((
            format!("(({word} >> (({i} & 1u) << 4u)) & 0xffffu)"),
            info.ty.elem,
        ))
    }

    /// A 16-bit store: clears the element's half of its word and sets the
    /// new bits. In shared memory (gmem, smem) both are atomic, so a
    /// neighbour writing the other half at the same time keeps its write; a
    /// local array is private to the invocation (a plain read-modify-write).
    pub(super) fn store_half(&mut self, target: &RefAccess, value: &str) -> Result<(), EmitError> {
        // The value first: it may load the element this store clears.
        let bits = self.temp("bits");
        self.line(&format!("let {bits}: u32 = {value};"));
        let value = bits;
        let (array, i, info) = self.half_element(target)?;
        let shift = self.temp("half");
        self.line(&format!("let {shift}: u32 = ({i} & 1u) << 4u;"));
        let word = format!("{array}[{i} >> 1u]");
        match &info.storage {
            Storage::Buffer { word: w, .. } | Storage::Shared { word: w, .. } => {
                if !w.is_atomic() {
                    return Err(self.invalid(format!(
                        "16-bit `{}` is stored to but not kept as atomic words",
                        target.base
                    )));
                }
                if self.idle_guard {
                    self.line("if (!mpmd_idle) {");
                    self.depth += 1;
                }
                if self.pair_arrays.contains(&array) {
                    self.paired_store(&word, &i, &value, &shift);
                } else {
                    self.line(&format!("atomicAnd(&{word}, ~(0xffffu << {shift}));"));
                    self.line(&format!("atomicOr(&{word}, {value} << {shift});"));
                }
                if self.idle_guard {
                    self.depth -= 1;
                    self.line("}");
                }
            }
            Storage::Local { .. } => self.line(&format!(
                "{word} = ({word} & ~(0xffffu << {shift})) | ({value} << {shift});"
            )),
        }
        Ok(())
    }

    /// A 16-bit store that pairs with the subgroup neighbour's
    /// (`emit/pairing.rs`): when the neighbour is active here and stores the
    /// other half of the same word, the invocation holding the low half
    /// stores the whole word for both; otherwise the two-atomic store.
    /// Pairing is mutual (both read one ballot, and each finds the other's
    /// index to be its own `^ 1`), so the high half's invocation stores
    /// nothing exactly when the low half's stores both: one store per word,
    /// where each storing the same word took twice the stores on llvmpipe.
    fn paired_store(&mut self, word: &str, index: &str, bits: &str, shift: &str) {
        self.pairs_used = true;
        let active = self.temp("active");
        let neighbour = self.temp("neighbour");
        let other_index = self.temp("other");
        let other_bits = self.temp("otherbits");
        self.line(
            "// Paired store: the low half's invocation stores the word when its subgroup neighbour stores the high half; otherwise each stores its own.",
        );
        self.line(&format!("let {active}: vec4<u32> = subgroupBallot(true);"));
        self.line(&format!("let {neighbour}: u32 = mpmd_subgroup_lane ^ 1u;"));
        self.line(&format!(
            "let {other_index}: u32 = subgroupShuffleXor({index}, 1u);"
        ));
        self.line(&format!(
            "let {other_bits}: u32 = subgroupShuffleXor({bits}, 1u);"
        ));
        self.line(&format!(
            "if (((({active}[{neighbour} >> 5u] >> ({neighbour} & 31u)) & 1u) == 1u) && ({other_index} == ({index} ^ 1u))) {{"
        ));
        self.depth += 1;
        self.line(&format!("if ({shift} == 0u) {{"));
        self.depth += 1;
        self.line(&format!(
            "atomicStore(&{word}, {bits} | ({other_bits} << 16u));"
        ));
        self.depth -= 1;
        self.line("}");
        self.depth -= 1;
        self.line("} else {");
        self.depth += 1;
        self.line(&format!("atomicAnd(&{word}, ~(0xffffu << {shift}));"));
        self.line(&format!("atomicOr(&{word}, {bits} << {shift});"));
        self.depth -= 1;
        self.line("}");
    }

    /// The element index expression of an access (and its checked-mode site id).
    pub(super) fn index_of(
        &mut self,
        access: &RefAccess,
        info: &WgslRef,
    ) -> Result<(String, usize, u32), EmitError> {
        let ty = &info.ty;
        if access.index.len() != ty.shape.len() {
            return Err(self.invalid(format!(
                "`{}` has {} dimension(s) but is indexed with {}",
                access.base,
                ty.shape.len(),
                access.index.len()
            )));
        }
        let plan = self.state.plan;
        let len = ty.len();
        // Coordinates and their extents, row-major: owner block coords, then indices.
        let mut coords: Vec<&Expr> = Vec::new();
        let mut extents: Vec<u32> = Vec::new();
        let mut block_extents = Vec::new();
        let mut own_instance = false;
        match (&access.block, &ty.owner) {
            (Some(block), Some(owner)) => {
                if ty.space == MemorySpace::Smem || ty.space == MemorySpace::Local {
                    return Err(self.invalid(format!(
                        "`{}@[...]`: another block's {} cannot be reached",
                        access.base,
                        ty.space.keyword()
                    )));
                }
                let mesh = plan
                    .mesh(owner)
                    .ok_or_else(|| self.invalid(format!("unknown owner mesh `{owner}`")))?;
                block_extents = mesh.block_axes().map(|a| a.size).collect();
                if block.len() != block_extents.len() {
                    return Err(self.invalid(format!(
                        "`{}@[...]` names {} block coordinate(s); mesh `{owner}` has {}",
                        access.base,
                        block.len(),
                        block_extents.len()
                    )));
                }
                coords.extend(block.iter());
                extents.extend(&block_extents);
            }
            (Some(_), None) => {
                return Err(self.invalid(format!(
                    "`{}` has no owner mesh to index with @[...]",
                    access.base
                )))
            }
            (None, Some(owner)) => {
                if matches!(ty.space, MemorySpace::Gmem | MemorySpace::Sem) {
                    if owner != &self.unit.mesh.name {
                        return Err(self.invalid(format!(
                            "`{}` belongs to mesh `{owner}`; this program runs on `{}` and must name the block with @[...]",
                            access.base, self.unit.mesh.name
                        )));
                    }
                    own_instance = true;
                }
            }
            (None, None) => {}
        }
        coords.extend(access.index.iter());
        extents.extend(&ty.shape);

        // The buffer's offset in its binding, in elements (16-bit buffers
        // start on a word: two elements a word).
        let base = match &info.storage {
            Storage::Buffer { offset, .. } if ty.elem.is_16bit() => offset.saturating_mul(2),
            Storage::Buffer { offset, .. } => *offset,
            _ => 0,
        };
        let mut dynamic_terms: Vec<String> = Vec::new();
        if own_instance {
            dynamic_terms.push(if len == 1 {
                "block_id".to_string()
            } else {
                format!("block_id * {len}u")
            });
        }
        // Every coordinate once, folded when it is known here (see `const_u32`).
        let mut known = Vec::new();
        let mut values = Vec::new();
        let mut signed = Vec::new();
        let mut depth = 0;
        for c in &coords {
            match const_u32(c, |a| self.axis_size(a).ok()) {
                Some(v) => {
                    known.push(Some(v));
                    values.push(None);
                    signed.push(matches!(c, Expr::Lit(Literal::I32(_))));
                }
                None => {
                    let v = self.value(c)?;
                    signed.push(v.ty == ScalarType::I32);
                    depth = depth.max(v.depth);
                    known.push(None);
                    values.push(Some(self.index_word(v)?));
                }
            }
        }
        // Every access gets a site (error records name it: out-of-bounds
        // accesses in checked mode, semaphore waits in both modes).
        let site = self.state.sites.len();
        self.state.sites.push(AccessSite {
            unit: self.unit_id,
            reference: access.base.clone(),
            block_extents,
            shape: ty.shape.clone(),
            signed,
        });
        if self.state.options.mode == Mode::Checked {
            let mut args = vec![format!("{site}u")];
            for ((k, v), &n) in known.iter().zip(values).zip(&extents) {
                args.push(match (k, v) {
                    (Some(k), _) => format!("{k}u"),
                    (None, Some(v)) => v,
                    (None, None) => unreachable!("every coordinate is known or emitted"),
                });
                args.push(format!("{n}u"));
            }
            self.state.helpers.insert(Helper::Check(coords.len()));
            dynamic_terms.push(format!("mpmd_check{}({})", coords.len(), args.join(", ")));
            let mut text = dynamic_terms.join(" + ");
            if base != 0 {
                text = format!("{base}u + {text}");
            }
            return Ok((text, site, depth));
        }
        // Fast mode: row-major arithmetic, known coordinates folded here.
        let mut stride: u64 = 1;
        let mut constant: u64 = base;
        let mut terms = Vec::new();
        for ((k, v), &n) in known.iter().zip(values).zip(&extents).rev() {
            match (k, v) {
                (Some(k), _) => constant = constant.wrapping_add((*k as u64).wrapping_mul(stride)),
                (None, Some(v)) => terms.push(if stride == 1 {
                    v
                } else {
                    format!("{v} * {stride}u")
                }),
                (None, None) => unreachable!("every coordinate is known or emitted"),
            }
            stride = stride.saturating_mul(n as u64);
        }
        terms.reverse();
        dynamic_terms.extend(terms);
        if dynamic_terms.is_empty() {
            let fixed_len = match &info.storage {
                Storage::Buffer { .. } => None,
                _ => Some(len),
            };
            let c = constant.min(u32::MAX as u64);
            // A constant index past a fixed-size array is a shader-creation error;
            // read it at run time instead (out of bounds is undefined in fast mode).
            if fixed_len.is_some_and(|l| c >= l) {
                let k = self.runtime_literal(Literal::U32(c as u32));
                return Ok((k, site, 0));
            }
            return Ok((format!("{c}u"), site, 0));
        }
        let mut text = dynamic_terms.join(" + ");
        if constant != 0 {
            text = format!("{text} + {}u", constant.min(u32::MAX as u64));
        }
        Ok((text, site, depth))
    }

    /// A coordinate that is not known here, as a u32 expression (i32
    /// coordinates are reinterpreted, so negative ones are out of bounds).
    /// Its text always holds a run-time operand: a literal or axis size is
    /// known (`const_u32`), and an operation on constants alone reads its
    /// literals at run time.
    fn index_word(&mut self, v: Value) -> Result<String, EmitError> {
        Ok(match v.ty {
            ScalarType::U32 => v.text,
            ScalarType::I32 => format!("bitcast<u32>({})", v.text),
            ScalarType::Bool => format!("u32({})", v.text),
            ScalarType::F32 | ScalarType::F16 | ScalarType::BF16 => {
                return Err(self.invalid("an index must be an integer"))
            }
        })
    }
}

/// A coordinate known here, as the u32 `index_value` would make of it: an
/// integer or bool literal, or an axis size (`axis_size` gives it). These
/// are exactly the coordinates whose WGSL text would be a constant
/// expression (an operation on constants alone reads its literals at run
/// time), so `index_of` folds all of them and range-checks the result
/// against fixed-size arrays: no constant index reaches naga unchecked.
fn const_u32(e: &Expr, axis_size: impl Fn(&str) -> Option<u32>) -> Option<u32> {
    match e {
        Expr::Lit(Literal::U32(v)) => Some(*v),
        Expr::Lit(Literal::I32(v)) => Some(*v as u32),
        Expr::Lit(Literal::Bool(v)) => Some(*v as u32),
        Expr::AxisSize(axis) => axis_size(axis),
        _ => None,
    }
}

pub(super) fn load_text(info: &WgslRef, place: &str) -> String {
    let elem = info.ty.elem;
    match &info.storage {
        Storage::Local { .. } => place.to_string(),
        Storage::Buffer { word, .. } | Storage::Shared { word, .. } => {
            let raw = if word.is_atomic() {
                format!("atomicLoad(&{place})")
            } else {
                place.to_string()
            };
            from_word(elem, *word, &raw)
        }
    }
}

pub(super) fn store_text(info: &WgslRef, place: &str, value: &str) -> String {
    let elem = info.ty.elem;
    match &info.storage {
        Storage::Local { .. } => format!("{place} = {value};"),
        Storage::Buffer { word, .. } | Storage::Shared { word, .. } => {
            let word_value = to_word(elem, *word, value);
            if word.is_atomic() {
                format!("atomicStore(&{place}, {word_value});")
            } else {
                format!("{place} = {word_value};")
            }
        }
    }
}
