//! One module for a plan: the units' entry points, the semaphore dispatches
//! between them, the globals and the helpers, and the schedule of a call.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use mpmd_core::ir::{Literal, Name, ScalarType, Type};
use mpmd_core::plan::{LaunchPlan, LaunchUnit, UnitId};
use mpmd_core::Mode;

use super::bindings::{binding_layout, sanitize, BindingLayout};
use super::dispatch::{
    first_wave, generate_fused, moved_ops, semaphore_entry, split_dispatch_count, workgroup_grid,
};
use super::helpers::Helper;
use super::sync::{hoisting, Hoisting};
use super::syntax::OPAQUE_POSITIONS;
use super::unit::UnitEmitter;
use super::{
    fuses_programs, is_split_unit, AccessSite, Dispatch, EmitError, EmitOptions, EmittedModule,
    MAX_SPLIT_DISPATCHES, SEMAPHORE_WORKGROUP_SIZE,
};

/// What the units of one module share while they are emitted.
pub(super) struct ModuleState<'p> {
    pub(super) plan: &'p LaunchPlan,
    pub(super) options: &'p EmitOptions,
    pub(super) layout: BindingLayout,
    /// Scalar operands in `mpmd_params` word order.
    pub(super) scalar_slots: Vec<(Name, ScalarType)>,
    /// Words read at run time (`rt_<k>`), after the scalars: literals and
    /// the opaque zero words.
    pub(super) literals: Vec<Literal>,
    literal_slot: HashMap<Literal, usize>,
    /// The `rt_<k>` slots of the opaque zero words, by operand position
    /// (`UnitEmitter::opaque_operands`): each its own slot, never shared
    /// with a literal `0u` or with another position.
    opaque_zero_slot: [Option<usize>; OPAQUE_POSITIONS],
    /// Helper functions the code called so far.
    pub(super) helpers: BTreeSet<Helper>,
    /// Accesses that error records name, by site id.
    pub(super) sites: Vec<AccessSite>,
    /// `(unit, operand)` of the smem arrays stored as atomic words.
    pub(super) smem_atomic: BTreeSet<(UnitId, Name)>,
}

impl<'p> ModuleState<'p> {
    /// The state before any unit is emitted: the bindings and the scalar slots.
    fn new(plan: &'p LaunchPlan, options: &'p EmitOptions) -> Result<Self, EmitError> {
        let scalar_slots = plan
            .operands
            .iter()
            .filter_map(|o| match &o.ty {
                Type::Scalar(t) => Some((o.name.clone(), *t)),
                Type::Ref(_) => None,
            })
            .collect();
        Ok(ModuleState {
            plan,
            options,
            layout: binding_layout(plan, options.max_storage_buffers)?,
            scalar_slots,
            literals: vec![],
            literal_slot: HashMap::new(),
            opaque_zero_slot: [None; OPAQUE_POSITIONS],
            helpers: BTreeSet::new(),
            sites: vec![],
            smem_atomic: BTreeSet::new(),
        })
    }

    /// The `rt_<k>` slot of a literal read at run time.
    pub(super) fn runtime_literal(&mut self, lit: Literal) -> usize {
        if let Some(&k) = self.literal_slot.get(&lit) {
            return k;
        }
        let k = self.literals.len();
        self.literals.push(lit);
        self.literal_slot.insert(lit, k);
        k
    }

    /// The `rt_<k>` slot of the zero word that makes operands at `position`
    /// opaque (a `0u` the driver cannot see; `syntax::opaque_operand`).
    pub(super) fn opaque_zero(&mut self, position: usize) -> usize {
        if let Some(k) = self.opaque_zero_slot[position] {
            return k;
        }
        let k = self.literals.len();
        self.literals.push(Literal::U32(0));
        self.opaque_zero_slot[position] = Some(k);
        k
    }

    /// Whether `rt_<k>` is an opaque zero word (for its comment).
    pub(super) fn is_opaque_zero(&self, k: usize) -> bool {
        self.opaque_zero_slot.contains(&Some(k))
    }

    /// After the module's header comment: the globals, the helpers and
    /// `functions`, each followed by a blank line.
    pub(super) fn write_globals_helpers_functions(
        &self,
        out: &mut String,
        functions: impl IntoIterator<Item = String>,
    ) {
        out.push('\n');
        self.write_globals(out);
        self.write_helpers(out);
        for function in functions {
            out.push_str(&function);
            out.push('\n');
        }
    }

    /// The module: `wgsl` and what the host needs to run it.
    pub(super) fn finish(
        self,
        wgsl: String,
        entry_points: Vec<String>,
        dispatch: Vec<[u32; 3]>,
        schedule: Vec<Dispatch>,
    ) -> EmittedModule {
        EmittedModule {
            wgsl,
            entry_points,
            dispatch,
            schedule,
            layout: self.layout,
            scalar_slots: self.scalar_slots,
            literal_words: self.literals.iter().map(|l| l.to_bits()).collect(),
            sites: self.sites,
        }
    }
}

/// The plan's module: one entry point per unit (or one fused dispatch,
/// `generate_fused`), with the semaphore dispatches between them.
pub(super) fn generate(
    plan: &LaunchPlan,
    options: &EmitOptions,
) -> Result<EmittedModule, EmitError> {
    let mut state = ModuleState::new(plan, options)?;
    let per_dim = options.max_workgroups_per_dimension.max(1);
    let hoistings: Vec<Hoisting> = plan
        .units
        .iter()
        .map(|unit| hoisting(plan, unit, options))
        .collect();
    // Block-split units: one dispatch per block, counted against one limit;
    // each takes its block from the call's ticket counter, less the tickets
    // of the split units before it.
    let split: Vec<bool> = plan
        .enumerate_units()
        .map(|(u, _)| is_split_unit(plan, options, u))
        .collect();
    // A split unit's first wave: its leading blocks that wait on nothing run
    // together in one dispatch (when there are at least two of them).
    let waves: Vec<u64> = plan
        .units
        .iter()
        .zip(&split)
        .map(|(u, &s)| if s { first_wave(u, per_dim) } else { 0 })
        .collect();
    let split_units: Vec<(&LaunchUnit, u64)> = plan
        .units
        .iter()
        .zip(&split)
        .zip(&waves)
        .filter(|((_, &s), _)| s)
        .map(|((u, _), &wave)| (u, wave))
        .collect();
    let split_dispatches: u64 = split_units
        .iter()
        .map(|(u, wave)| split_dispatch_count(u.block_count, *wave))
        .sum();
    if split_dispatches > MAX_SPLIT_DISPATCHES {
        let units: Vec<String> = split_units
            .iter()
            .map(|(u, _)| {
                format!(
                    "program {} (`{}`, {} blocks)",
                    u.program, u.kernel.name, u.block_count
                )
            })
            .collect();
        return Err(EmitError::TooManyDispatches {
            units: units.join(", "),
            dispatches: split_dispatches,
            max: MAX_SPLIT_DISPATCHES,
        });
    }
    if fuses_programs(plan, options) {
        return generate_fused(state, &hoistings);
    }
    let mut ticket_base = 0u64;
    let mut entries = Vec::new();
    let mut entry_points = Vec::new();
    let mut dispatch = Vec::new();
    for (index, unit) in plan.enumerate_units() {
        let name = format!("unit{index}_{}", sanitize(&unit.kernel.name));
        let hoisting = &hoistings[index.index()];
        if split[index.index()] {
            dispatch.push([1, 1, 1]);
            let text = UnitEmitter::new(&mut state, index, unit, name.clone(), hoisting)?
                .emit_split_entry(ticket_base)?;
            ticket_base += unit.block_count;
            entries.push(text);
            entry_points.push(name);
            continue;
        }
        let max_blocks = per_dim as u64 * per_dim as u64;
        if unit.block_count > max_blocks || unit.block_count > u32::MAX as u64 {
            return Err(EmitError::TooManyBlocks {
                program: unit.program,
                kernel: unit.kernel.name.clone(),
                blocks: unit.block_count,
                max: max_blocks.min(u32::MAX as u64),
                per_dim,
            });
        }
        let (x, y) = workgroup_grid(unit.block_count, per_dim);
        dispatch.push([x, y, 1]);
        let text =
            UnitEmitter::new(&mut state, index, unit, name.clone(), hoisting)?.emit_entry(y > 1)?;
        entries.push(text);
        entry_points.push(name);
    }

    // Semaphore dispatches: before each unit the waits moved out of it,
    // after it the signals; a unit's signals and the next unit's waits share
    // one dispatch unless they touch the same semaphore (one dispatch does
    // not order its invocations).
    let mut schedule = Vec::new();
    let mut moved_fns = Vec::new();
    let mut sem_entries = Vec::new();
    for gap in 0..=plan.units.len() {
        let signals = match gap.checked_sub(1) {
            Some(before) => moved_ops(
                &mut state,
                &hoistings,
                UnitId::new(before),
                true,
                &mut moved_fns,
            )?,
            None => None,
        };
        let waits = match gap < plan.units.len() {
            true => moved_ops(
                &mut state,
                &hoistings,
                UnitId::new(gap),
                false,
                &mut moved_fns,
            )?,
            false => None,
        };
        let groups = match (signals, waits) {
            (Some(s), Some(w))
                if s.buffers.is_disjoint(&w.buffers)
                    && s.blocks + w.blocks <= u32::MAX as u64 - SEMAPHORE_WORKGROUP_SIZE as u64
                    && (s.blocks + w.blocks).div_ceil(SEMAPHORE_WORKGROUP_SIZE as u64)
                        <= per_dim as u64 * per_dim as u64 =>
            {
                vec![vec![s, w]]
            }
            (s, w) => [s, w].into_iter().flatten().map(|m| vec![m]).collect(),
        };
        for group in groups {
            let name = format!("mpmd_sems{}", sem_entries.len());
            let total: u64 = group.iter().map(|m| m.blocks).sum();
            let (x, y) = workgroup_grid(total.div_ceil(SEMAPHORE_WORKGROUP_SIZE as u64), per_dim);
            sem_entries.push(semaphore_entry(plan, &name, &group, y > 1, per_dim));
            schedule.push(Dispatch {
                entry_point: name,
                workgroups: [x, y, 1],
                unit: None,
                repeat: 1,
            });
        }
        if gap < plan.units.len() {
            let blocks = plan.units[gap].block_count;
            if split[gap] && waves[gap] >= 2 {
                // The first wave in one dispatch, then the rest one block each.
                schedule.push(Dispatch {
                    entry_point: entry_points[gap].clone(),
                    workgroups: [waves[gap] as u32, 1, 1],
                    unit: Some(UnitId::new(gap)),
                    repeat: 1,
                });
                if blocks > waves[gap] {
                    schedule.push(Dispatch {
                        entry_point: entry_points[gap].clone(),
                        workgroups: dispatch[gap],
                        unit: Some(UnitId::new(gap)),
                        repeat: (blocks - waves[gap]) as u32,
                    });
                }
            } else {
                schedule.push(Dispatch {
                    entry_point: entry_points[gap].clone(),
                    workgroups: dispatch[gap],
                    unit: Some(UnitId::new(gap)),
                    repeat: if split[gap] { blocks as u32 } else { 1 },
                });
            }
        }
    }

    let mut out = module_header(plan, options);
    out.push_str(
        "// One entry point per launch unit, and semaphore dispatches (`mpmd_sems<k>`) that\n",
    );
    out.push_str(
        "// run the units' block-level semaphore operations next to them. Dispatch order:\n",
    );
    let order: Vec<String> = schedule
        .iter()
        .map(|d| match d.repeat {
            1 => d.entry_point.clone(),
            n => format!("{} x {n}", d.entry_point),
        })
        .collect();
    writeln!(out, "// {}.", order.join(", ")).unwrap();
    for &(unit, wave) in &split_units {
        if wave >= 2 {
            writeln!(
                out,
                "// Program {} (`{}`) waits on its own signals and the plan has no cycle: its {} block(s) \
                 run in {} dispatches: blocks 0 to {}, which wait on nothing, together in the first, then \
                 the others one per dispatch, in linear block order, so every block it may wait on ran \
                 in an earlier dispatch.",
                unit.program,
                unit.kernel.name,
                unit.block_count,
                split_dispatch_count(unit.block_count, wave),
                wave - 1
            )
            .unwrap();
        } else {
            writeln!(
                out,
                "// Program {} (`{}`) waits on its own signals and the plan has no cycle: its {} block(s) \
                 run one per dispatch, in linear block order ({} dispatches), so every block it may wait \
                 on ran in an earlier dispatch.",
                unit.program, unit.kernel.name, unit.block_count, unit.block_count
            )
            .unwrap();
        }
    }
    state.write_globals_helpers_functions(
        &mut out,
        entries.into_iter().chain(moved_fns).chain(sem_entries),
    );
    Ok(state.finish(out, entry_points, dispatch, schedule))
}

/// The module's first line: the map, the mode and fast math.
pub(super) fn module_header(plan: &LaunchPlan, options: &EmitOptions) -> String {
    format!(
        "// mpmd: map `{}` lowered to WGSL ({} mode{}).\n",
        plan.map.name,
        match options.mode {
            Mode::Fast => "fast",
            Mode::Checked => "checked",
        },
        if plan.map.fast_math {
            ", fast math"
        } else {
            ""
        }
    )
}
