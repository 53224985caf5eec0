//! Lowering a validated map to a [`LaunchPlan`] (docs/design.md, "Lowering").
//!
//! Lowering trusts validation for everything it does not need to compute the
//! plan, but never panics: whatever it would need validation for and finds
//! wrong is a [`LowerError`].

use std::collections::BTreeSet;

use thiserror::Error;

use super::{
    AxisFormula, BufferId, BufferInit, BufferPlan, DependencyEdge, DependencyGraph, IdSource,
    LaunchPlan, LaunchUnit, OperandBinding, OperandId, ProgramId, SmemSlot, UnitId, UnsignaledWait,
};
use crate::host::BufferStart;
use crate::ir::limits::{buffer_len, MAX_BUFFER_BYTES};
use crate::ir::{MemorySpace, Mesh, Module, MpmdMap, Name, OperandKind, Resident, Type};
use crate::validate::{ProgramFacts, ValidModule};

/// Byte alignment of every `smem` slot in a block's arena.
pub const SMEM_ALIGN_BYTES: u32 = 16;

/// Why a map could not be lowered; every case is one validation would reject.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LowerError {
    #[error("no map named `{0}` in the module")]
    UnknownMap(String),
    #[error("map `{map}` names mesh `{mesh}`, which the module does not declare")]
    UnknownMesh { map: Name, mesh: Name },
    #[error("map `{map}` runs kernel `{kernel}`, which the module does not declare")]
    UnknownKernel { map: Name, kernel: Name },
    #[error("map `{map}` has no program")]
    NoProgram { map: Name },
    #[error("operand `{operand}` is `resident` but the module declares no resident of that name")]
    MissingResident { operand: Name },
    #[error("alias `{input} -> {output}` does not name an input and an output of the map")]
    BadAlias { input: Name, output: Name },
    #[error("operand `{operand}` of kind {kind} cannot have type `{space}`")]
    BadOperandSpace {
        operand: Name,
        kind: &'static str,
        space: &'static str,
    },
    #[error(
        "smem operand `{operand}` is owned by mesh `{mesh}`, which runs no program in this call"
    )]
    SmemOnExternalMesh { operand: Name, mesh: Name },
    #[error("smem operand `{operand}` names no owner in a map with more than one program")]
    UnownedSmem { operand: Name },
    #[error("program {program} needs more than 4 GiB of smem per block")]
    SmemTooLarge { program: ProgramId },
    #[error("operand `{operand}` needs more than {MAX_BUFFER_BYTES} bytes (E0059)")]
    BufferTooLarge { operand: Name },
    #[error("kernel `{kernel}` uses `{name}` as a semaphore, but it is not a `sem` operand")]
    NotASemaphore { kernel: Name, name: Name },
}

/// Lowers the map `map` of a valid module: its programs' kernels and facts
/// are validation's ([`ValidModule`]), never computed again here.
pub fn lower(valid: &ValidModule, map: &str) -> Result<LaunchPlan, LowerError> {
    let module = valid.module();
    let (map, valid_map) = module
        .map(map)
        .zip(valid.valid_map(map))
        .ok_or_else(|| LowerError::UnknownMap(map.to_string()))?;
    if map.programs.is_empty() {
        return Err(LowerError::NoProgram {
            map: map.name.clone(),
        });
    }

    let program_meshes = program_meshes(module, map)?;
    let programs = map
        .programs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            valid_map
                .program(ProgramId::new(i))
                .ok_or_else(|| LowerError::UnknownKernel {
                    map: map.name.clone(),
                    kernel: p.kernel.clone(),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (meshes, external_meshes) = call_meshes(module, map, &program_meshes)?;
    let residents = bound_residents(module, map)?;

    let usage: Vec<KernelUsage> = programs
        .iter()
        .map(|p| KernelUsage::of(map, &p.kernel().name, p.facts()))
        .collect::<Result<_, _>>()?;
    let order = ProgramGraph::new(&usage).order();

    let (operands, buffers) = bind_operands(map, &meshes, &usage)?;

    let mut units = Vec::with_capacity(order.len());
    for &program in &order {
        let mesh = program_meshes[program].clone();
        let (smem, smem_bytes) =
            smem_layout(map, &mesh, &external_meshes, ProgramId::new(program))?;
        units.push(LaunchUnit {
            program: ProgramId::new(program),
            axes: axis_formulas(&mesh),
            block_count: mesh.block_count(),
            threads_per_block: mesh.threads.size,
            kernel: programs[program].kernel().clone(),
            facts: programs[program].facts().clone(),
            mesh,
            smem,
            smem_bytes,
        });
    }
    let graph = dependency_graph(map, &usage, &order);

    Ok(LaunchPlan {
        map: map.clone(),
        meshes,
        external_meshes,
        residents,
        units,
        operands,
        buffers,
        graph,
    })
}

fn program_meshes(module: &Module, map: &MpmdMap) -> Result<Vec<Mesh>, LowerError> {
    map.programs
        .iter()
        .map(|p| {
            module
                .mesh(&p.mesh)
                .cloned()
                .ok_or_else(|| LowerError::UnknownMesh {
                    map: map.name.clone(),
                    mesh: p.mesh.clone(),
                })
        })
        .collect()
}

/// The programs' meshes, then the external meshes (owners of operands that
/// run no program), each once in first-mention order.
fn call_meshes(
    module: &Module,
    map: &MpmdMap,
    program_meshes: &[Mesh],
) -> Result<(Vec<Mesh>, Vec<Name>), LowerError> {
    let mut meshes: Vec<Mesh> = Vec::new();
    for mesh in program_meshes {
        if !meshes.iter().any(|m| m.name == mesh.name) {
            meshes.push(mesh.clone());
        }
    }
    let mut external = Vec::new();
    for (_, operand) in map.operands() {
        let Some(owner) = operand.ty.as_ref_type().and_then(|r| r.owner.as_ref()) else {
            continue;
        };
        if meshes.iter().any(|m| &m.name == owner) {
            continue;
        }
        let mesh = module.mesh(owner).ok_or_else(|| LowerError::UnknownMesh {
            map: map.name.clone(),
            mesh: owner.clone(),
        })?;
        meshes.push(mesh.clone());
        external.push(owner.clone());
    }
    Ok((meshes, external))
}

fn bound_residents(module: &Module, map: &MpmdMap) -> Result<Vec<Resident>, LowerError> {
    map.operands()
        .filter(|(_, o)| o.resident)
        .map(|(_, o)| {
            module
                .resident(&o.name)
                .cloned()
                .ok_or_else(|| LowerError::MissingResident {
                    operand: o.name.clone(),
                })
        })
        .collect()
}

/// What one program does to the map's operands, by name: the part of its
/// [`ProgramFacts`] the lowering orders and binds with.
#[derive(Default)]
struct KernelUsage {
    /// Semaphore operands signalled, in first-use order.
    signals: Vec<Name>,
    /// Semaphore operands waited on (`wait` or `wait_nodec`), in first-use order.
    waits: Vec<Name>,
    /// Operands accessed atomically (atomics, every semaphore operation).
    atomic: BTreeSet<Name>,
}

impl KernelUsage {
    fn of(map: &MpmdMap, kernel: &str, facts: &ProgramFacts) -> Result<Self, LowerError> {
        let operands: Vec<&crate::ir::Operand> = map.operands().map(|(_, o)| o).collect();
        let semaphores = |positions: &[OperandId]| -> Result<Vec<Name>, LowerError> {
            positions
                .iter()
                .map(|&i| semaphore_operand(kernel, operands.get(i.index()).copied()))
                .collect()
        };
        Ok(KernelUsage {
            signals: semaphores(&facts.signals)?,
            waits: semaphores(&facts.waits)?,
            atomic: facts
                .accesses
                .iter()
                .zip(&operands)
                .filter(|(access, _)| access.is_atomic())
                .map(|(_, operand)| operand.name.clone())
                .collect(),
        })
    }
}

fn semaphore_operand(
    kernel: &str,
    operand: Option<&crate::ir::Operand>,
) -> Result<Name, LowerError> {
    match operand {
        Some(o)
            if o.ty
                .as_ref_type()
                .is_some_and(|r| r.space == MemorySpace::Sem) =>
        {
            Ok(o.name.clone())
        }
        _ => Err(LowerError::NotASemaphore {
            kernel: kernel.to_string(),
            name: operand.map(|o| o.name.clone()).unwrap_or_default(),
        }),
    }
}

/// Signal → wait edges between programs, by map index.
struct ProgramGraph {
    /// `successors[p]`: programs that wait on a semaphore `p` signals (p excluded).
    successors: Vec<BTreeSet<usize>>,
}

impl ProgramGraph {
    fn new(usage: &[KernelUsage]) -> Self {
        let successors = usage
            .iter()
            .enumerate()
            .map(|(from, signaller)| {
                usage
                    .iter()
                    .enumerate()
                    .filter(|&(to, waiter)| {
                        to != from && waiter.waits.iter().any(|s| signaller.signals.contains(s))
                    })
                    .map(|(to, _)| to)
                    .collect()
            })
            .collect();
        ProgramGraph { successors }
    }

    fn len(&self) -> usize {
        self.successors.len()
    }

    fn reachable_from(&self, start: usize) -> Vec<bool> {
        let mut seen = vec![false; self.len()];
        let mut stack = vec![start];
        while let Some(p) = stack.pop() {
            for &q in &self.successors[p] {
                if !seen[q] {
                    seen[q] = true;
                    stack.push(q);
                }
            }
        }
        seen
    }

    /// Programs in topological order. Programs of one strongly connected
    /// component (a cycle) stay together in map order; among components the
    /// graph does not order, the one with the lowest map index comes first.
    fn order(&self) -> Vec<usize> {
        let n = self.len();
        let reach: Vec<Vec<bool>> = (0..n).map(|p| self.reachable_from(p)).collect();
        // component[p]: the lowest map index mutually reachable with p (or p).
        let component: Vec<usize> = (0..n)
            .map(|p| {
                (0..n)
                    .find(|&q| q == p || (reach[p][q] && reach[q][p]))
                    .unwrap_or(p)
            })
            .collect();
        let mut emitted = vec![false; n];
        let mut order = Vec::with_capacity(n);
        while order.len() < n {
            // A component is ready when no unemitted program outside it has
            // an edge into it.
            let ready = (0..n)
                .filter(|&p| !emitted[p] && component[p] == p)
                .find(|&c| {
                    (0..n).all(|from| {
                        emitted[from]
                            || component[from] == c
                            || !self.successors[from].iter().any(|&to| component[to] == c)
                    })
                });
            // The condensation is acyclic, so some component is always ready;
            // fall back to the lowest remaining one rather than loop forever.
            let c = ready.unwrap_or_else(|| (0..n).find(|&p| !emitted[p]).unwrap_or(0));
            for p in 0..n {
                if component[p] == component[c] && !emitted[p] {
                    emitted[p] = true;
                    order.push(p);
                }
            }
        }
        order
    }
}

fn dependency_graph(map: &MpmdMap, usage: &[KernelUsage], order: &[usize]) -> DependencyGraph {
    let mut graph = DependencyGraph::default();
    let unit_usage: Vec<&KernelUsage> = order.iter().map(|&p| &usage[p]).collect();
    for (from, signaller) in unit_usage.iter().enumerate() {
        let from = UnitId::new(from);
        for (to, waiter) in unit_usage.iter().enumerate() {
            let to = UnitId::new(to);
            for semaphore in waiter
                .waits
                .iter()
                .filter(|s| signaller.signals.contains(s))
            {
                let edge = DependencyEdge {
                    from,
                    to,
                    semaphore: semaphore.clone(),
                };
                if from == to {
                    graph.intra_program.push(edge);
                } else {
                    graph.edges.push(edge);
                }
            }
        }
    }
    for (unit, waiter) in unit_usage.iter().enumerate() {
        for semaphore in &waiter.waits {
            if unit_usage.iter().any(|u| u.signals.contains(semaphore)) {
                continue;
            }
            let resident = map
                .operand(semaphore)
                .is_some_and(|(_, operand)| operand.resident);
            graph.unsignaled_waits.push(UnsignaledWait {
                unit: UnitId::new(unit),
                semaphore: semaphore.clone(),
                resident,
            });
        }
    }
    graph.has_cycle = has_cycle(order.len(), &graph.edges);
    graph
}

/// Depth-first search for a back edge over the inter-program edges.
fn has_cycle(units: usize, edges: &[DependencyEdge]) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unvisited,
        OnStack,
        Done,
    }
    fn visit(node: usize, edges: &[DependencyEdge], marks: &mut [Mark]) -> bool {
        marks[node] = Mark::OnStack;
        for edge in edges.iter().filter(|e| e.from.index() == node) {
            match marks[edge.to.index()] {
                Mark::OnStack => return true,
                Mark::Unvisited => {
                    if visit(edge.to.index(), edges, marks) {
                        return true;
                    }
                }
                Mark::Done => {}
            }
        }
        marks[node] = Mark::Done;
        false
    }
    let mut marks = vec![Mark::Unvisited; units];
    (0..units).any(|u| marks[u] == Mark::Unvisited && visit(u, edges, &mut marks))
}

/// One binding per operand and the buffers after alias resolution.
fn bind_operands(
    map: &MpmdMap,
    meshes: &[Mesh],
    usage: &[KernelUsage],
) -> Result<(Vec<OperandBinding>, Vec<BufferPlan>), LowerError> {
    for alias in &map.aliases {
        let input_ok = map.inputs.iter().any(|o| o.name == alias.input);
        let output_ok = map.outputs.iter().any(|o| o.name == alias.output);
        if !input_ok || !output_ok {
            return Err(LowerError::BadAlias {
                input: alias.input.clone(),
                output: alias.output.clone(),
            });
        }
    }
    let touched_atomically = |name: &str| usage.iter().any(|u| u.atomic.contains(name));

    let mut bindings = Vec::new();
    let mut buffers: Vec<BufferPlan> = Vec::new();
    for (kind, operand) in map.operands() {
        let mut binding = OperandBinding {
            name: operand.name.clone(),
            kind,
            ty: operand.ty.clone(),
            buffer: None,
        };
        let Type::Ref(ref_type) = &operand.ty else {
            if kind != OperandKind::Scalar {
                return Err(bad_space(operand.name.clone(), kind, "scalar"));
            }
            bindings.push(binding);
            continue;
        };
        match (kind, ref_type.space) {
            (OperandKind::Scalar, space) | (_, space @ MemorySpace::Local) => {
                return Err(bad_space(operand.name.clone(), kind, space.keyword()));
            }
            (OperandKind::Input | OperandKind::Output, MemorySpace::Smem) => {
                return Err(bad_space(operand.name.clone(), kind, "smem"));
            }
            (OperandKind::Scratch, MemorySpace::Smem) => {
                bindings.push(binding);
                continue;
            }
            _ => {}
        }

        let aliased_input = (kind == OperandKind::Output)
            .then(|| map.aliases.iter().find(|a| a.output == operand.name))
            .flatten()
            .map(|a| a.input.as_str());
        let shared = aliased_input.and_then(|input| {
            buffers
                .iter()
                .position(|b| b.operands.iter().any(|n| n == input))
        });
        if let Some(index) = shared {
            let buffer = &mut buffers[index];
            buffer.operands.push(operand.name.clone());
            buffer.output = Some(operand.name.clone());
            buffer.atomic |= touched_atomically(&operand.name);
            binding.buffer = Some(BufferId::new(index));
            bindings.push(binding);
            continue;
        }

        let instances = match &ref_type.owner {
            Some(owner) => meshes
                .iter()
                .find(|m| &m.name == owner)
                .map(Mesh::block_count)
                .unwrap_or(1),
            None => 1,
        };
        let len = buffer_len(ref_type, instances).ok_or_else(|| LowerError::BufferTooLarge {
            operand: operand.name.clone(),
        })?;
        // The one rule (`BufferStart::of`); every operand here is gmem or sem.
        let init = match BufferStart::of(kind, operand) {
            Some(BufferStart::Resident) => BufferInit::Resident(operand.name.clone()),
            Some(BufferStart::Uploaded) => BufferInit::Input(operand.name.clone()),
            Some(BufferStart::Zeroed) => BufferInit::Zeroed,
            Some(BufferStart::Uninitialized) | None => BufferInit::Uninitialized,
        };
        binding.buffer = Some(BufferId::new(buffers.len()));
        buffers.push(BufferPlan {
            operands: vec![operand.name.clone()],
            ty: ref_type.clone(),
            instances,
            len,
            init,
            atomic: touched_atomically(&operand.name),
            output: (kind == OperandKind::Output).then(|| operand.name.clone()),
        });
        bindings.push(binding);
    }
    Ok((bindings, buffers))
}

fn bad_space(operand: Name, kind: OperandKind, space: &'static str) -> LowerError {
    LowerError::BadOperandSpace {
        operand,
        kind: kind.keyword(),
        space,
    }
}

/// The per-block arena of the `smem` operands program `program` owns (with a
/// single program, unowned `smem` belongs to it), each slot 16-byte aligned.
fn smem_layout(
    map: &MpmdMap,
    mesh: &Mesh,
    external_meshes: &[Name],
    program: ProgramId,
) -> Result<(Vec<SmemSlot>, u32), LowerError> {
    let mut slots = Vec::new();
    let mut end: u64 = 0;
    for (index, (_, operand)) in map.operands().enumerate() {
        let Some(ref_type) = operand.ty.as_ref_type() else {
            continue;
        };
        if ref_type.space != MemorySpace::Smem {
            continue;
        }
        let owned = match &ref_type.owner {
            Some(owner) if external_meshes.contains(owner) => {
                return Err(LowerError::SmemOnExternalMesh {
                    operand: operand.name.clone(),
                    mesh: owner.clone(),
                });
            }
            Some(owner) => owner == &mesh.name,
            None if map.programs.len() == 1 => true,
            None => {
                return Err(LowerError::UnownedSmem {
                    operand: operand.name.clone(),
                })
            }
        };
        if !owned {
            continue;
        }
        let too_large = || LowerError::SmemTooLarge { program };
        let offset = end
            .checked_next_multiple_of(u64::from(SMEM_ALIGN_BYTES))
            .ok_or_else(too_large)?;
        let size = ref_type.checked_bytes().ok_or_else(too_large)?;
        end = offset.checked_add(size).ok_or_else(too_large)?;
        slots.push(SmemSlot {
            operand: OperandId::new(index),
            offset_bytes: u32::try_from(offset).map_err(|_| too_large())?,
            size_bytes: u32::try_from(size).map_err(|_| too_large())?,
        });
        u32::try_from(end).map_err(|_| too_large())?;
    }
    let total = u32::try_from(end).map_err(|_| LowerError::SmemTooLarge { program })?;
    Ok((slots, total))
}

/// Row-major over grid then cluster axes (last fastest); the thread axis is
/// the thread id.
fn axis_formulas(mesh: &Mesh) -> Vec<AxisFormula> {
    let block_axes: Vec<_> = mesh.block_axes().collect();
    let mut formulas = Vec::with_capacity(block_axes.len() + 1);
    for (i, axis) in block_axes.iter().enumerate() {
        let stride = block_axes[i + 1..]
            .iter()
            .map(|a| u64::from(a.size))
            .product();
        formulas.push(AxisFormula {
            axis: axis.name.clone(),
            source: IdSource::Block,
            stride,
            size: axis.size,
        });
    }
    formulas.push(AxisFormula {
        axis: mesh.threads.name.clone(),
        source: IdSource::Thread,
        stride: 1,
        size: mesh.threads.size,
    });
    formulas
}
