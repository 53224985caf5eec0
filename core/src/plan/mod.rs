//! The launch plan: the backend-neutral result of lowering a validated map
//! (docs/design.md, "Lowering"). Backends emit code from it and never re-derive it.

mod lower;

pub use crate::ids::{BufferId, OperandId, ProgramId, UnitId};
pub use lower::{lower, LowerError};

use crate::ir::{Kernel, Mesh, MpmdMap, Name, OperandKind, RefType, Resident, Type};
use crate::validate::ProgramFacts;

/// Everything a backend needs to run one call of one map.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    /// The map as written (a copy of the IR, which the interpreter runs).
    pub map: MpmdMap,
    /// Every mesh the call involves: the programs' meshes, then external
    /// meshes, each once, in first-mention order.
    pub meshes: Vec<Mesh>,
    /// Names of the meshes that own an operand but run no program.
    pub external_meshes: Vec<Name>,
    /// Device-resident refs the map binds to, as declared in the module.
    pub residents: Vec<Resident>,
    /// One unit per program, in topological order of the dependency graph
    /// (map order among programs the graph does not order).
    pub units: Vec<LaunchUnit>,
    /// One binding per operand, in kernel-parameter order.
    pub operands: Vec<OperandBinding>,
    /// The device buffers after alias resolution; `OperandBinding::buffer`
    /// indexes this list.
    pub buffers: Vec<BufferPlan>,
    pub graph: DependencyGraph,
}

/// One program, ready to launch.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchUnit {
    /// The program in `MpmdMap::programs` this unit runs.
    pub program: ProgramId,
    pub mesh: Mesh,
    pub kernel: Kernel,
    /// What validation establishes about `kernel` (operand accesses,
    /// uniformity, every name's type): backends read it instead of walking.
    pub facts: ProgramFacts,
    /// Product of the mesh's grid and cluster axis sizes.
    pub block_count: u64,
    pub threads_per_block: u32,
    /// The `smem` operands this program owns, laid out in one per-block arena.
    pub smem: Vec<SmemSlot>,
    /// Total bytes of `smem` per block.
    pub smem_bytes: u32,
    /// How each axis index of the mesh is recovered from the program-local
    /// linear block id or the thread id.
    pub axes: Vec<AxisFormula>,
}

/// An `smem` operand's place in the per-block arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmemSlot {
    /// The `smem` operand (`LaunchPlan::operands`).
    pub operand: OperandId,
    pub offset_bytes: u32,
    pub size_bytes: u32,
}

/// Which id an axis index is derived from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdSource {
    /// The program-local linear block id (row-major over grid then cluster axes).
    Block,
    /// The thread id within the block.
    Thread,
}

/// `axis_index(axis) = (id / stride) % size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisFormula {
    pub axis: Name,
    pub source: IdSource,
    pub stride: u64,
    pub size: u32,
}

/// How one operand is bound.
#[derive(Clone, Debug, PartialEq)]
pub struct OperandBinding {
    pub name: Name,
    pub kind: OperandKind,
    pub ty: Type,
    /// The buffer it is bound to (`LaunchPlan::buffers`); `None` for
    /// scalars and `smem`.
    pub buffer: Option<BufferId>,
}

/// Where a device buffer's initial contents come from: the lowering's form of
/// [`crate::host::BufferStart::of`], the one rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferInit {
    /// Uploaded from the host input of this name.
    Input(Name),
    /// Zero-filled at the start of every call (`zeroed` operands, inputs
    /// included, and non-resident semaphores).
    Zeroed,
    /// Left as it is (uninitialised outputs and scratch).
    Uninitialized,
    /// The device-resident ref of this name, kept across calls.
    Resident(Name),
}

/// One device buffer (gmem or sem) after alias resolution.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferPlan {
    /// Operand names bound to this buffer (an input and its aliased output share one).
    pub operands: Vec<Name>,
    /// The ref type of one instance.
    pub ty: RefType,
    /// Number of instances: the owner mesh's block count, or 1 when unowned.
    pub instances: u64,
    /// Total elements (of `ty.elem`, whatever their size): `instances * ty.len()`.
    pub len: u64,
    pub init: BufferInit,
    /// Whether any program accesses it atomically (atomics or semaphores).
    pub atomic: bool,
    /// Whether the call reads it back as an output.
    pub output: Option<Name>,
}

/// A semaphore-carried ordering between programs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DependencyEdge {
    /// The units (`LaunchPlan::units`) of the signalling and waiting programs.
    pub from: UnitId,
    pub to: UnitId,
    /// The semaphore operand name.
    pub semaphore: Name,
}

/// A wait that no program of the call signals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsignaledWait {
    pub unit: UnitId,
    pub semaphore: Name,
    /// Whether the semaphore is device-resident (its count at the start of the
    /// call may satisfy the wait); otherwise the wait is a certain deadlock.
    pub resident: bool,
}

/// Signal → wait edges between programs (docs/design.md, "Lowering").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DependencyGraph {
    /// Edges between different programs.
    pub edges: Vec<DependencyEdge>,
    /// Programs that wait on a semaphore they signal themselves (`from == to`).
    pub intra_program: Vec<DependencyEdge>,
    pub unsignaled_waits: Vec<UnsignaledWait>,
    /// Whether the inter-program edges form a cycle.
    pub has_cycle: bool,
}

impl LaunchPlan {
    /// The unit `id`; panics if `id` is not one of this plan's units.
    pub fn unit(&self, id: UnitId) -> &LaunchUnit {
        &self.units[id.index()]
    }

    /// The buffer `id`; panics if `id` is not one of this plan's buffers.
    pub fn buffer(&self, id: BufferId) -> &BufferPlan {
        &self.buffers[id.index()]
    }

    /// The operand `id`; panics if `id` is not one of this plan's operands.
    pub fn operand_at(&self, id: OperandId) -> &OperandBinding {
        &self.operands[id.index()]
    }

    /// Every unit with its id, in plan order.
    pub fn enumerate_units(
        &self,
    ) -> impl ExactSizeIterator<Item = (UnitId, &LaunchUnit)> + DoubleEndedIterator + Clone {
        crate::ids::enumerate(&self.units, UnitId::new)
    }

    /// Every buffer with its id.
    pub fn enumerate_buffers(
        &self,
    ) -> impl ExactSizeIterator<Item = (BufferId, &BufferPlan)> + DoubleEndedIterator + Clone {
        crate::ids::enumerate(&self.buffers, BufferId::new)
    }

    /// Every operand with its id, in operand order.
    pub fn enumerate_operands(
        &self,
    ) -> impl ExactSizeIterator<Item = (OperandId, &OperandBinding)> + DoubleEndedIterator + Clone
    {
        crate::ids::enumerate(&self.operands, OperandId::new)
    }

    /// The ids of every buffer.
    pub fn buffer_ids(
        &self,
    ) -> impl ExactSizeIterator<Item = BufferId> + DoubleEndedIterator + Clone {
        (0..self.buffers.len()).map(BufferId::new)
    }

    /// The unit that runs program `program`.
    pub fn unit_of_program(&self, program: ProgramId) -> Option<&LaunchUnit> {
        self.units.iter().find(|u| u.program == program)
    }

    /// The plan buffer bound to parameter `name` of `unit`'s kernel (kernel
    /// parameters bind the map's operands by position); `None` for scalars,
    /// `smem` and names that are not parameters.
    pub fn param_buffer(&self, unit: &LaunchUnit, name: &str) -> Option<BufferId> {
        let position = unit.kernel.params.iter().position(|p| p.name == name)?;
        self.operands.get(position)?.buffer
    }

    pub fn operand(&self, name: &str) -> Option<&OperandBinding> {
        self.operands.iter().find(|o| o.name == name)
    }

    pub fn mesh(&self, name: &str) -> Option<&Mesh> {
        self.meshes.iter().find(|m| m.name == name)
    }

    /// Host shape of a buffer: the owner mesh's block axes (grid, then
    /// cluster), then the ref's shape; unowned refs: the ref's shape.
    pub fn host_shape(&self, buffer: &BufferPlan) -> Vec<u32> {
        crate::host::host_shape(&self.meshes, &buffer.ty).unwrap_or_else(|| buffer.ty.shape.clone())
    }

    /// Whether every wait's signal comes from an earlier unit (or from the
    /// resident count): then launching units in order needs no co-residency.
    pub fn needs_co_residency(&self) -> bool {
        self.graph.has_cycle || !self.graph.intra_program.is_empty()
    }
}
