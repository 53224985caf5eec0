//! One launch unit's code: the emitter's state (scopes, names, the body
//! written so far), its entry point and prologue.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use mpmd_core::ir::{Expr, MemorySpace, Name, ScalarType, Type};
use mpmd_core::plan::{IdSource, LaunchUnit, UnitId};

use super::bindings::{needs_atomic_words, sanitize, smem_global, WordType};
use super::dispatch::BlockSource;
use super::generate::ModuleState;
use super::helpers::Helper;
use super::memory::{Storage, WgslRef};
use super::sync::{unobservable_sem_barriers, Hoisting};
use super::syntax::{describe_literal, from_word, wgsl_scalar};
use super::{splits_blocks, EmitError, TICKET_WORD};

/// The entry point parameters of a unit with native warp collectives.
pub(super) const SUBGROUP_BUILTINS: &str = "@builtin(subgroup_size) mpmd_subgroup_size: u32, @builtin(subgroup_invocation_id) mpmd_subgroup_lane: u32";
/// The entry point parameter of a unit with paired 16-bit stores only.
pub(super) const SUBGROUP_LANE_BUILTIN: &str =
    "@builtin(subgroup_invocation_id) mpmd_subgroup_lane: u32";
/// The same as parameters of a program's function in a fused dispatch.
pub(super) const SUBGROUP_PARAMETERS: &str = "mpmd_subgroup_size: u32, mpmd_subgroup_lane: u32";
/// What the fused entry point passes for them.
pub(super) const SUBGROUP_ARGUMENTS: &str = "mpmd_subgroup_size, mpmd_subgroup_lane";

/// What an IR name stands for in the unit's WGSL.
#[derive(Clone, Debug)]
pub(super) enum Named {
    Scalar { wgsl: String, ty: ScalarType },
    Ref(WgslRef),
}

/// Writes one unit's WGSL function: its body line by line into `body`, then
/// the entry point or function around it.
pub(super) struct UnitEmitter<'s, 'p> {
    pub(super) state: &'s mut ModuleState<'p>,
    /// The unit in the plan.
    pub(super) unit_id: UnitId,
    pub(super) unit: &'p LaunchUnit,
    /// The WGSL function's name.
    pub(super) entry: String,
    /// IR names in scope, innermost block last.
    pub(super) scopes: Vec<HashMap<Name, Named>>,
    /// WGSL names taken in this function.
    pub(super) used: HashSet<String>,
    /// The `rt_<k>` literals the body reads (the prologue declares them).
    pub(super) rt_used: BTreeSet<usize>,
    pub(super) body: String,
    /// Indentation of the next line, in levels.
    pub(super) depth: usize,
    /// Temporaries named so far (`mpmd_<what><n>`).
    pub(super) temp: usize,
    /// Inside a region whose loop cost was paid at its entry (no ticks).
    pub(super) paid: bool,
    /// Every semaphore's signallers run in earlier dispatches than its
    /// waiters (the plan needs no co-residency): a wait looks once.
    pub(super) ordered_by_dispatch: bool,
    /// The statement being emitted is a top-level semaphore operation whose
    /// barrier no thread of the block can observe (see `unobservable_sem_barriers`).
    pub(super) sem_barrier_unobservable: bool,
    /// The top-level semaphore operations that run in semaphore dispatches.
    pub(super) hoisting: Hoisting,
    /// `while` loops emitted so far: the next one's ordinal.
    pub(super) next_while: u32,
    /// A program of a fused dispatch with fewer threads than its workgroup:
    /// the extra invocations (`mpmd_idle`) skip stores and atomics.
    pub(super) idle_guard: bool,
    /// The WGSL arrays whose 16-bit stores may pair (`emit/pairing.rs`;
    /// empty unless `EmitOptions::subgroups`).
    pub(super) pair_arrays: HashSet<String>,
    /// A paired store was written: the entry point takes the subgroup lane.
    pub(super) pairs_used: bool,
}

impl<'s, 'p> UnitEmitter<'s, 'p> {
    pub(super) fn new(
        state: &'s mut ModuleState<'p>,
        unit_id: UnitId,
        unit: &'p LaunchUnit,
        entry: String,
        hoisting: &Hoisting,
    ) -> Result<Self, EmitError> {
        let plan = state.plan;
        super::warp::check_warp_control(unit, state.options.warps)?;
        let mut top = HashMap::new();
        if unit.kernel.params.len() != plan.operands.len() {
            return Err(EmitError::Invalid {
                kernel: unit.kernel.name.clone(),
                message: format!(
                    "{} parameters but the map has {} operands",
                    unit.kernel.params.len(),
                    plan.operands.len()
                ),
            });
        }
        let mut scalar_index = 0usize;
        let mut used = HashSet::new();
        let accesses = unit.facts.accesses.iter();
        for ((param, operand), access) in
            unit.kernel.params.iter().zip(&plan.operands).zip(accesses)
        {
            match &param.ty {
                Type::Scalar(t) => {
                    let wgsl = format!("v_{}", sanitize(&param.name));
                    used.insert(wgsl.clone());
                    top.insert(param.name.clone(), Named::Scalar { wgsl, ty: *t });
                    scalar_index += 1;
                }
                Type::Ref(r) => {
                    let storage = match (r.space, operand.buffer) {
                        (MemorySpace::Smem, _) => {
                            // 16-bit smem that is stored to: atomic words, as for gmem.
                            let atomic = needs_atomic_words(*access, r.elem);
                            if atomic {
                                state.smem_atomic.insert((unit_id, operand.name.clone()));
                            }
                            Storage::Shared {
                                global: smem_global(unit_id, &operand.name),
                                word: WordType::for_elem(r.elem, atomic),
                            }
                        }
                        (_, Some(buffer)) => {
                            let (binding, offset) = state.layout.place(buffer);
                            let b = &state.layout.bindings[binding];
                            Storage::Buffer {
                                global: b.global.clone(),
                                word: b.word,
                                offset,
                            }
                        }
                        (_, None) => {
                            return Err(EmitError::Invalid {
                                kernel: unit.kernel.name.clone(),
                                message: format!(
                                    "operand `{}` has no buffer in the plan",
                                    operand.name
                                ),
                            })
                        }
                    };
                    top.insert(
                        param.name.clone(),
                        Named::Ref(WgslRef {
                            ty: r.clone(),
                            storage,
                        }),
                    );
                }
            }
        }
        let _ = scalar_index;
        let ordered_by_dispatch = !plan.needs_co_residency() || splits_blocks(plan, state.options);
        let pair_arrays = match state.options.subgroups {
            false => HashSet::new(),
            true => super::pairing::pairable_arrays(&unit.kernel.body, &|name: &str| match top
                .get(name)
            {
                Some(Named::Ref(WgslRef {
                    storage: Storage::Buffer { global, .. } | Storage::Shared { global, .. },
                    ..
                })) => Some(global.clone()),
                _ => None,
            }),
        };
        Ok(UnitEmitter {
            state,
            unit_id,
            unit,
            entry,
            scopes: vec![top],
            used,
            rt_used: BTreeSet::new(),
            body: String::new(),
            depth: 1,
            temp: 0,
            paid: false,
            ordered_by_dispatch,
            sem_barrier_unobservable: false,
            hoisting: hoisting.clone(),
            next_while: 0,
            idle_guard: false,
            pair_arrays,
            pairs_used: false,
        })
    }

    pub(super) fn invalid(&self, message: impl Into<String>) -> EmitError {
        EmitError::Invalid {
            kernel: self.unit.kernel.name.clone(),
            message: message.into(),
        }
    }

    pub(super) fn line(&mut self, text: &str) {
        for _ in 0..self.depth {
            self.body.push_str("  ");
        }
        self.body.push_str(text);
        self.body.push('\n');
    }

    pub(super) fn lookup(&self, name: &str) -> Option<&Named> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    /// The WGSL name of an IR binding: `prefix` and the name, unchanged.
    /// Names are declared once per kernel (`expand::program_kernel` renames
    /// what sibling blocks reuse; ARCHITECTURE.md, "IR conventions"), so
    /// the emitter never renames: a name declared twice is an invalid plan.
    pub(super) fn fresh(&mut self, prefix: &str, name: &str) -> Result<String, EmitError> {
        let wgsl = format!("{prefix}{}", sanitize(name));
        if !self.used.insert(wgsl.clone()) {
            return Err(self.invalid(format!(
                "`{name}` is declared more than once in the kernel (names are unique after expand::program_kernel)"
            )));
        }
        Ok(wgsl)
    }

    pub(super) fn temp(&mut self, what: &str) -> String {
        self.temp += 1;
        format!("mpmd_{what}{}", self.temp)
    }

    pub(super) fn bind_scalar(&mut self, name: &str, ty: ScalarType) -> Result<String, EmitError> {
        let wgsl = self.fresh("v_", name)?;
        self.scopes.last_mut().unwrap().insert(
            name.to_string(),
            Named::Scalar {
                wgsl: wgsl.clone(),
                ty,
            },
        );
        Ok(wgsl)
    }

    /// Whether `e` has one value in every thread of the block: the
    /// program's uniformity fact (`LaunchUnit::facts`), validation's answer.
    pub(super) fn is_uniform(&self, e: &Expr) -> bool {
        self.unit.facts.uniformity.is_uniform(e)
    }

    pub(super) fn emit_entry(self, two_d: bool) -> Result<String, EmitError> {
        self.emit_entry_with(if two_d {
            BlockSource::TwoD
        } else {
            BlockSource::OneD
        })
    }

    /// A block-split unit's entry point: one workgroup per dispatch, whose
    /// block is the call's next ticket less `ticket_base`.
    pub(super) fn emit_split_entry(self, ticket_base: u64) -> Result<String, EmitError> {
        self.emit_entry_with(BlockSource::Ticket(ticket_base))
    }

    pub(super) fn emit_entry_with(mut self, source: BlockSource) -> Result<String, EmitError> {
        let unit = self.unit;
        let body = unit.kernel.body.clone();
        if matches!(source, BlockSource::Fused(_)) {
            // The fused entry point does not pass the subgroup lane (see `emit/pairing.rs`).
            self.pair_arrays.clear();
        }
        let quiet = if self.ordered_by_dispatch {
            unobservable_sem_barriers(unit)
        } else {
            vec![false; body.len()]
        };
        for (k, (stmt, quiet)) in body.iter().zip(quiet).enumerate() {
            if self.hoisting.moved.get(k) == Some(&true) {
                self.moved_placeholder(stmt, self.hoisting.barrier_kept[k]);
                continue;
            }
            self.sem_barrier_unobservable = quiet;
            let r = self.stmt(stmt);
            self.sem_barrier_unobservable = false;
            r?;
        }

        let mut out = String::new();
        let mesh = &unit.mesh;
        writeln!(
            out,
            "// ---- unit {}: program {} `{}` on mesh `{}`: {} block(s) of {} thread(s)",
            self.unit_id,
            unit.program,
            unit.kernel.name,
            mesh.name,
            unit.block_count,
            unit.threads_per_block
        )
        .unwrap();
        if let BlockSource::Fused(base) = source {
            // A function of the fused dispatch: the entry point took the ticket.
            let subgroups = match self.checks_subgroups() {
                true => format!(", {SUBGROUP_PARAMETERS}"),
                false => String::new(),
            };
            writeln!(out, "fn {}(thread_id: u32{subgroups}) {{", self.entry).unwrap();
            writeln!(
                out,
                "  // The workgroup's ticket less the {base} block(s) of the programs before this one."
            )
            .unwrap();
            writeln!(
                out,
                "  let block_id: u32 = workgroupUniformLoad(&mpmd_ticket) - {base}u;"
            )
            .unwrap();
            self.write_location(&mut out, "thread_id");
            if self.idle_guard {
                writeln!(
                    out,
                    "  // The fused workgroup is wider than this program's {} thread(s): the others are idle.\n  \
                     // They run the body (WGSL barriers must be reached by every invocation) as a copy\n  \
                     // of thread `thread_id % {}` whose stores, atomics and out-of-bounds reports are skipped.",
                    unit.threads_per_block, unit.threads_per_block
                )
                .unwrap();
                writeln!(
                    out,
                    "  mpmd_idle = thread_id >= {}u;",
                    unit.threads_per_block
                )
                .unwrap();
            }
            self.write_subgroup_check(&mut out);
            self.write_body(&mut out, true, "Kernel body.");
            return Ok(out);
        }
        writeln!(out, "@compute @workgroup_size({})", unit.threads_per_block).unwrap();
        let subgroups = match (self.checks_subgroups(), self.pairs_used) {
            (true, _) => format!(", {SUBGROUP_BUILTINS}"),
            (false, true) => format!(", {SUBGROUP_LANE_BUILTIN}"),
            (false, false) => String::new(),
        };
        writeln!(
            out,
            "fn {}(@builtin(workgroup_id) mpmd_wid: vec3<u32>, @builtin(local_invocation_id) mpmd_lid: vec3<u32>{subgroups}) {{",
            self.entry
        )
        .unwrap();
        if let BlockSource::Ticket(base) = source {
            writeln!(
                out,
                "  // Waits on its own signals: one block per dispatch, in linear block order. Thread 0\n  \
                 // takes the call's next ticket (dispatch order), less the {base} of earlier split units."
            )
            .unwrap();
            writeln!(
                out,
                "  if (mpmd_lid.x == 0u) {{ mpmd_ticket = atomicAdd(&mpmd_status[{TICKET_WORD}], 1u) - {base}u; }}"
            )
            .unwrap();
            out.push_str("  let block_id: u32 = workgroupUniformLoad(&mpmd_ticket);\n");
            writeln!(
                out,
                "  if (block_id >= {}u) {{ return; }}",
                unit.block_count
            )
            .unwrap();
        } else if source == BlockSource::TwoD {
            let per_dim = self.state.options.max_workgroups_per_dimension;
            out.push_str(
                "  // More blocks than one dispatch dimension holds: 2-D dispatch, linearised.\n",
            );
            writeln!(
                out,
                "  let block_id: u32 = mpmd_wid.x + mpmd_wid.y * {per_dim}u;"
            )
            .unwrap();
            writeln!(
                out,
                "  if (block_id >= {}u) {{ return; }}",
                unit.block_count
            )
            .unwrap();
        } else {
            out.push_str("  let block_id: u32 = mpmd_wid.x;\n");
        }
        // Workgroups are 1-D: the x component is the thread id. (llvmpipe computes
        // `local_invocation_index` at a measurable cost: about 3% of a
        // memory-bound kernel.)
        out.push_str("  let thread_id: u32 = mpmd_lid.x;\n");
        self.write_location(&mut out, "thread_id");
        self.write_subgroup_check(&mut out);
        self.write_body(&mut out, true, "Kernel body.");
        Ok(out)
    }

    /// Whether this unit's entry point checks the adapter's subgroups (it
    /// uses native warp collectives).
    pub(super) fn checks_subgroups(&self) -> bool {
        super::warp::checks_subgroups(self.unit, self.state.options)
    }

    /// Native warp collectives: the check that the invocation's subgroup is
    /// its logical warp (an idle copy of a fused workgroup has no warp).
    fn write_subgroup_check(&mut self, out: &mut String) {
        if !self.checks_subgroups() {
            return;
        }
        self.state.helpers.insert(Helper::SubgroupCheck);
        out.push_str("  // Native warp collectives: the subgroup must be the logical warp.\n");
        let check = "mpmd_check_subgroups(mpmd_subgroup_size, mpmd_subgroup_lane, thread_id);";
        if self.idle_guard {
            writeln!(out, "  if (!mpmd_idle) {{ {check} }}").unwrap();
        } else {
            writeln!(out, "  {check}").unwrap();
        }
    }

    /// Where the invocation is, for error records (`mpmd_report`).
    pub(super) fn write_location(&self, out: &mut String, thread_id: &str) {
        writeln!(out, "  mpmd_unit = {}u;", self.unit_id).unwrap();
        writeln!(
            out,
            "  mpmd_block_id = block_id;\n  mpmd_thread_id = {thread_id};"
        )
        .unwrap();
    }

    /// The rest of a function: its prologue (thread axes with `threads`),
    /// the body written so far under `comment`, and the closing brace.
    pub(super) fn write_body(&self, out: &mut String, threads: bool, comment: &str) {
        self.prologue(out, threads);
        writeln!(out, "  // {comment}").unwrap();
        out.push_str(&self.body);
        out.push_str("}\n");
    }

    /// Axis indices (thread axes only with `threads`), scalar parameters and
    /// the literals the body read at run time.
    fn prologue(&self, out: &mut String, threads: bool) {
        let unit = self.unit;
        out.push_str("  // Axis indices: (id / stride) % size.\n");
        for axis in &unit.axes {
            let id = match axis.source {
                IdSource::Block => "block_id",
                IdSource::Thread if threads => "thread_id",
                IdSource::Thread => continue,
            };
            let divided = if axis.stride == 1 {
                id.to_string()
            } else {
                format!("({id} / {}u)", axis.stride)
            };
            writeln!(
                out,
                "  let ax_{}: u32 = {divided} % {}u;",
                sanitize(&axis.axis),
                axis.size
            )
            .unwrap();
        }
        let mut slot = 0usize;
        for param in &unit.kernel.params {
            if let Type::Scalar(t) = &param.ty {
                if slot == 0 {
                    out.push_str("  // Scalar parameters.\n");
                }
                let word = format!("mpmd_params[{slot}]");
                writeln!(
                    out,
                    "  let v_{}: {} = {};",
                    sanitize(&param.name),
                    wgsl_scalar(*t),
                    from_word(*t, WordType::U32, &word)
                )
                .unwrap();
                slot += 1;
            }
        }
        if !self.rt_used.is_empty() {
            out.push_str("  // Words read at run time: literals (operations on literals alone would be folded by WGSL) and the zeros that make float operands opaque.\n");
            let scalars = self.state.scalar_slots.len();
            for &k in &self.rt_used {
                let lit = self.state.literals[k];
                let word = format!("mpmd_params[{}]", scalars + k);
                writeln!(
                    out,
                    "  let rt_{k}: {} = {}; // {}",
                    wgsl_scalar(lit.ty()),
                    from_word(lit.ty(), WordType::U32, &word),
                    if self.state.is_opaque_zero(k) {
                        "0u, makes float operands opaque".to_string()
                    } else {
                        describe_literal(lit)
                    }
                )
                .unwrap();
            }
        }
    }
}
