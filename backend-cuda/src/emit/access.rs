//! Memory accesses: where an access `x[i, j]` or `x@[c][i]` lands (row-major
//! offsets, owned instances), how it is kept inside its ref (fast mode) or
//! checked and reported (checked mode), and how a bool is stored.

use mpmd_core::ir::{Expr, RefAccess, ScalarType};
use mpmd_core::Mode;

use super::c::{self, Width};
use super::expr::Code;
use super::{EmitError, Emitter, Symbol, UnitContext};

/// Whether a memory access reads or writes (what fast mode guards).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AccessMode {
    Read,
    Write,
}

/// Where a memory access lands, as C text: base, offset and its check
/// (not the arena's `BufferPlacement`, which places whole buffers).
pub(super) struct CPlace {
    pub(super) base: String,
    /// `base[offset]` with the offset inline: what a fast-mode load reads.
    pub(super) element: String,
    /// The statement binding the offset of a guarded access (every store,
    /// atomic and semaphore operation, and checked loads) to `offset`.
    pub(super) compute: String,
    pub(super) offset: String,
    /// True when the access may go ahead: in checked mode the offset passed
    /// its check (which reported it otherwise); in fast mode it lies inside
    /// the ref, so that no store reaches memory outside it.
    pub(super) ok: String,
    /// The negation of `ok`.
    pub(super) bad: String,
    /// Checked mode: the offset call alone, inline (a checked load).
    pub(super) checked_call: Option<String>,
    pub(super) elem: ScalarType,
    /// The C type of the slot (see [`Symbol::slots`]).
    pub(super) slot_type: &'static str,
    /// A `bool` held as a `u32` word (buffers and smem).
    pub(super) is_bool_in_memory: bool,
    pub(super) depth: u32,
}

impl CPlace {
    /// The element at the bound offset, `base[offset]` (after `compute`).
    pub(super) fn slot(&self) -> String {
        format!("{}[{}]", self.base, self.offset)
    }
}

impl Emitter<'_> {
    /// The statements of a write to `place` in a block of their own: the
    /// offset, then `lines` (which test `place.ok` themselves).
    pub(super) fn guarded_block(&mut self, depth: usize, place: &CPlace, lines: &[String]) {
        self.line(depth, "{");
        self.line(depth + 1, &place.compute);
        for line in lines {
            self.line(depth + 1, line);
        }
        self.line(depth, "}");
    }

    pub(super) fn place(
        &mut self,
        cx: &UnitContext,
        access: &RefAccess,
        kind: AccessMode,
    ) -> Result<CPlace, EmitError> {
        let symbol = cx.symbol(&access.base)?.clone();
        let (base, elem, shape, owner_block_shape, in_memory_bool) = match &symbol {
            Symbol::Buffer {
                c_name,
                ty,
                owner_block_shape,
            } => (
                c_name.clone(),
                ty.elem,
                ty.shape.clone(),
                owner_block_shape.clone(),
                ty.elem == ScalarType::Bool,
            ),
            Symbol::Smem { c_name, ty } => {
                if access.block.is_some() {
                    return Err(cx.unsupported(format!(
                        "`{}@[...]`: the smem of another block cannot be reached",
                        access.base
                    )));
                }
                (
                    c_name.clone(),
                    ty.elem,
                    ty.shape.clone(),
                    Vec::new(),
                    ty.elem == ScalarType::Bool,
                )
            }
            Symbol::Local {
                c_name,
                elem,
                shape,
            } => (c_name.clone(), *elem, shape.clone(), Vec::new(), false),
            Symbol::Scalar { .. } => {
                return Err(cx.unsupported(format!(
                    "`{}` is not a ref and cannot be indexed",
                    access.base
                )))
            }
        };
        let slot_type = symbol.slots().map_or("", |(_, ty)| ty);
        if access.index.len() != shape.len() {
            return Err(cx.unsupported(format!(
                "`{}` has {} dimension(s) but is indexed with {}",
                access.base,
                shape.len(),
                access.index.len()
            )));
        }
        let instance_len: u64 = shape.iter().map(|&d| d as u64).product();
        let owned = matches!(&symbol, Symbol::Buffer { ty, .. } if ty.owner.is_some());
        let mut depth = 0;
        let coords: Option<Vec<String>> = match &access.block {
            Some(c) => {
                if c.len() != owner_block_shape.len() {
                    return Err(cx.unsupported(format!(
                        "`{}@[...]` names {} coordinate(s); its owner has {} block axes",
                        access.base,
                        c.len(),
                        owner_block_shape.len()
                    )));
                }
                let mut texts = Vec::new();
                for e in c {
                    let code = self.index_expr(cx, e)?;
                    depth = depth.max(code.depth);
                    texts.push(code.text);
                }
                Some(texts)
            }
            None => None,
        };
        let mut index = Vec::new();
        for e in &access.index {
            let code = self.index_expr(cx, e)?;
            depth = depth.max(code.depth);
            index.push(code.text);
        }
        // Loads compute their offset inline (`element`, `checked_call`);
        // writes bind it to a temporary first.
        let offset = match kind {
            AccessMode::Write => self.temp('o'),
            AccessMode::Read => String::new(),
        };
        match self.mode {
            Mode::Fast => {
                let instances: u64 = if owned {
                    owner_block_shape.iter().map(|&d| d as u64).product()
                } else {
                    1
                };
                let total_len = instance_len * instances;
                let width = Width::for_len(total_len);
                let flat = flatten(&index, &shape, width);
                let flat_offset = match (&coords, owned) {
                    (Some(c), _) => {
                        let instance = flatten(c, &owner_block_shape, width);
                        combine(&instance, instance_len, &flat, width)
                    }
                    (None, true) => {
                        // Own instance of an owned buffer: this block's (the
                        // program runs on the owner mesh; validation
                        // guarantees it).
                        let instance = match width {
                            Width::U32 => "mpmd_block",
                            Width::U64 => "(u64)mpmd_block",
                        };
                        combine(instance, instance_len, &flat, width)
                    }
                    (None, false) => flat,
                };
                // Writes (`ok` guards them) never leave their ref, although
                // fast mode leaves an out-of-bounds result undefined:
                // host-mapped outputs and, with unified addressing, every
                // page-locked host buffer are in the kernel's address space.
                // Loads (`element`) read in place.
                let limit = width.constant(total_len.max(1));
                Ok(CPlace {
                    element: format!("{base}[{flat_offset}]"),
                    compute: format!("const {} {offset} = {flat_offset};", width.c_type()),
                    ok: format!("{offset} < {limit}"),
                    bad: format!("{offset} >= {limit}"),
                    offset,
                    checked_call: None,
                    base,
                    elem,
                    slot_type,
                    is_bool_in_memory: in_memory_bool,
                    depth: depth + 3,
                })
            }
            Mode::Checked => {
                let ref_id = self.ref_id(cx, &access.base)?;
                let coord_values = coords.clone().unwrap_or_default();
                let coord_sizes: Vec<String> = if coords.is_some() {
                    owner_block_shape.iter().map(|&d| c::unsigned(d)).collect()
                } else {
                    Vec::new()
                };
                let dims: Vec<String> = shape.iter().map(|&d| c::unsigned(d)).collect();
                // This block's instance of an owned buffer (see fast mode).
                let own_instance = if owned {
                    "(u64)mpmd_block".to_string()
                } else {
                    Width::U64.constant(0u32)
                };
                let call = format!(
                    "mpmd_checked_offset(mpmd_ctl, {}, mpmd_block, {}, {}, {}, {}, {}, {own_instance}, {})",
                    c::unsigned(cx.unit.program.index() as u64),
                    c::unsigned(ref_id),
                    idx_init(&coord_values),
                    idx_init(&coord_sizes),
                    idx_init(&index),
                    idx_init(&dims),
                    Width::U64.constant(instance_len),
                );
                Ok(CPlace {
                    element: format!("{base}[{offset}]"),
                    compute: format!("const u64 {offset} = {call};"),
                    ok: format!("{offset} != MPMD_BAD_OFFSET"),
                    bad: format!("{offset} == MPMD_BAD_OFFSET"),
                    offset,
                    checked_call: Some(call),
                    base,
                    elem,
                    slot_type,
                    is_bool_in_memory: in_memory_bool,
                    depth: depth + 5,
                })
            }
        }
    }

    /// A load of `access`: its value as the ref's element type.
    pub(super) fn load(&mut self, cx: &UnitContext, access: &RefAccess) -> Result<Code, EmitError> {
        let place = self.place(cx, access, AccessMode::Read)?;
        // Checked: the offset comes from an inline call, so that the check
        // stays lazy inside `&&` and `||`.
        let raw = match &place.checked_call {
            None => place.element.clone(),
            Some(call) => format!("mpmd_load({}, {call})", place.base),
        };
        let text = if place.is_bool_in_memory {
            format!("({raw} != {})", c::unsigned(0u32))
        } else {
            raw
        };
        Ok(Code::new(text, place.elem, place.depth + 1))
    }

    /// `value` as it is stored at `place` (bools are u32 words in memory).
    pub(super) fn stored_value(
        &mut self,
        cx: &UnitContext,
        place: &CPlace,
        value: &Expr,
    ) -> Result<String, EmitError> {
        let v = self.expr(cx, value)?.text;
        Ok(if place.is_bool_in_memory {
            format!("({})({v})", place.slot_type)
        } else {
            v
        })
    }
}

/// The values of an access site as an `mpmd_idx` initialiser (the first 8
/// and their count), which error records copy.
pub(super) fn idx_init(values: &[String]) -> String {
    if values.is_empty() {
        return "mpmd_idx{0u, {}}".to_string();
    }
    let shown: Vec<&str> = values.iter().take(8).map(String::as_str).collect();
    format!(
        "mpmd_idx{{{}, {{{}}}}}",
        c::unsigned(shown.len() as u64),
        shown.join(", ")
    )
}

/// Row-major flat index of `index` into `dims`.
fn flatten(index: &[String], dims: &[u32], width: Width) -> String {
    let mut acc = String::new();
    for (k, i) in index.iter().enumerate() {
        let term = width.widen(i);
        if k == 0 {
            acc = term;
        } else {
            acc = format!("({acc}) * {} + {term}", width.constant(dims[k]));
        }
    }
    if acc.is_empty() {
        c::unsigned(0u32)
    } else {
        acc
    }
}

/// The offset of element `flat` of instance `instance`.
fn combine(instance: &str, instance_len: u64, flat: &str, width: Width) -> String {
    format!("({instance}) * {} + {flat}", width.constant(instance_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flatten_row_major() {
        let idx = vec!["i".to_string(), "j".to_string()];
        assert_eq!(flatten(&idx, &[4, 256], Width::U32), "(i) * 256u + j");
        assert_eq!(
            flatten(&idx, &[4, 256], Width::U64),
            "((u64)(i)) * 256ull + (u64)(j)"
        );
    }
}
