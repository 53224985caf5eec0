//! What validation establishes about each program, returned with the
//! program's expanded kernel in a [`ValidModule`] (like naga's `ModuleInfo`)
//! and copied into every launch unit by the lowering, so the backends read
//! these facts instead of walking kernels again.
//!
//! Facts are about the kernel a program runs (`expand::program_kernel`): its
//! parameters are the map's operands in operand order and every name is
//! declared once, so facts keyed by operand position or by name are exact.

use crate::expand::{program_kernel, ExpandError};
use crate::ids::{OperandId, ProgramId};
use crate::ir::{
    type_of, Expr, Kernel, MemorySpace, Mesh, Module, Name, RefType, ScalarType, Scope, SemOp,
    Stmt, TypeError,
};

use super::uniformity::{Level, Uniformity};

/// How one program touches one operand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OperandAccess {
    /// An element is loaded (`x[i]` in an expression).
    pub loaded: bool,
    /// An element is stored (`x[i] = v`).
    pub stored: bool,
    /// An atomic (any kind, loads included) targets it.
    pub atomic: bool,
    /// A semaphore `wait` or `wait_nodec` targets it.
    pub waited: bool,
    /// A semaphore `signal` targets it.
    pub signalled: bool,
    /// A semaphore `read` targets it.
    pub read: bool,
}

impl OperandAccess {
    /// Whether the device sees it accessed atomically: atomics and every
    /// semaphore operation.
    pub fn is_atomic(self) -> bool {
        self.atomic || self.waited || self.signalled || self.read
    }

    /// Whether the program may change it: stores, atomics (an atomic load
    /// included, conservatively) and semaphore operations.
    pub fn writes(self) -> bool {
        self.stored || self.is_atomic()
    }

    fn union(self, other: Self) -> Self {
        OperandAccess {
            loaded: self.loaded || other.loaded,
            stored: self.stored || other.stored,
            atomic: self.atomic || other.atomic,
            waited: self.waited || other.waited,
            signalled: self.signalled || other.signalled,
            read: self.read || other.read,
        }
    }
}

/// The facts of one program: its kernel as the backends run it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramFacts {
    /// One entry per map operand, in operand (= kernel parameter) order
    /// (`OperandId`: [`ProgramFacts::access`]).
    pub accesses: Vec<OperandAccess>,
    /// Semaphore operands signalled, in first-use order.
    pub signals: Vec<OperandId>,
    /// Semaphore operands waited on (`wait`, `wait_nodec`), in first-use order.
    pub waits: Vec<OperandId>,
    /// Which values may differ between the threads of a block.
    pub uniformity: Uniformity,
    /// Which values may differ between the lanes of a warp.
    pub warp_uniformity: Uniformity,
    /// The type of every name of the kernel (parameters and every binding;
    /// names are unique in it), so an expression's type is one bottom-up walk.
    pub scope: Scope,
}

impl ProgramFacts {
    /// The facts of `kernel`, an expanded program kernel run on `mesh`
    /// (computed by [`ValidModule::of`] only).
    pub(crate) fn of(kernel: &Kernel, mesh: &Mesh) -> Self {
        let position = |name: &str| {
            kernel
                .params
                .iter()
                .position(|p| p.name == name)
                .map(OperandId::new)
        };
        let mut accesses = vec![OperandAccess::default(); kernel.params.len()];
        let mut signals = Vec::new();
        let mut waits = Vec::new();
        let mut touch = |name: &str, access: OperandAccess| {
            if let Some(i) = position(name) {
                accesses[i.index()] = accesses[i.index()].union(access);
            }
        };
        let mut scope = Scope::from_params(&kernel.params);
        crate::ir::visit::for_each_stmt(&kernel.body, &mut |stmt| {
            bind_declared(stmt, &mut scope);
            match stmt {
                Stmt::Store { target, .. } | Stmt::CompoundStore { target, .. } => touch(
                    &target.base,
                    OperandAccess {
                        stored: true,
                        ..OperandAccess::default()
                    },
                ),
                Stmt::Atomic { target, .. } => touch(
                    &target.base,
                    OperandAccess {
                        atomic: true,
                        ..OperandAccess::default()
                    },
                ),
                Stmt::Sem { op, sem, .. } => {
                    let (list, access) = match op {
                        SemOp::Signal => (
                            &mut signals,
                            OperandAccess {
                                signalled: true,
                                ..OperandAccess::default()
                            },
                        ),
                        SemOp::Wait | SemOp::WaitNodec => (
                            &mut waits,
                            OperandAccess {
                                waited: true,
                                ..OperandAccess::default()
                            },
                        ),
                    };
                    if let Some(i) = position(&sem.base) {
                        if !list.contains(&i) {
                            list.push(i);
                        }
                    }
                    touch(&sem.base, access);
                }
                Stmt::SemRead { sem, .. } => touch(
                    &sem.base,
                    OperandAccess {
                        read: true,
                        ..OperandAccess::default()
                    },
                ),
                Stmt::MmaLoad { source, .. } => touch(
                    &source.base,
                    OperandAccess {
                        loaded: true,
                        ..OperandAccess::default()
                    },
                ),
                _ => {}
            }
        });
        crate::ir::visit::for_each_expr(&kernel.body, &mut |e| {
            if let Expr::Load(access) = e {
                touch(
                    &access.base,
                    OperandAccess {
                        loaded: true,
                        ..OperandAccess::default()
                    },
                );
            }
        });
        ProgramFacts {
            accesses,
            signals,
            waits,
            uniformity: Uniformity::of_expanded(&kernel.body, &mesh.threads.name, Level::Block),
            warp_uniformity: Uniformity::of_expanded(&kernel.body, &mesh.threads.name, Level::Warp),
            scope,
        }
    }

    /// How the program touches operand `operand` (nothing for an id past
    /// the kernel's parameters).
    pub fn access(&self, operand: OperandId) -> OperandAccess {
        self.accesses
            .get(operand.index())
            .copied()
            .unwrap_or_default()
    }

    /// Every operand's access with its id, in operand order.
    pub fn enumerate_accesses(
        &self,
    ) -> impl ExactSizeIterator<Item = (OperandId, OperandAccess)> + DoubleEndedIterator + Clone + '_
    {
        self.accesses
            .iter()
            .enumerate()
            .map(|(i, access)| (OperandId::new(i), *access))
    }

    /// The type of `e`, an expression of this program's kernel.
    pub fn type_of(&self, e: &Expr) -> Result<ScalarType, TypeError> {
        type_of(e, &self.scope)
    }
}

/// Adds the name `stmt` declares, with its type, to `scope`.
fn bind_declared(stmt: &Stmt, scope: &mut Scope) {
    match stmt {
        Stmt::Let { var, .. }
        | Stmt::Var { var, .. }
        | Stmt::For { var, .. }
        | Stmt::Warp { dest: var, .. }
        | Stmt::BlockCollective { dest: var, .. } => scope.bind_scalar(&var.name, var.ty),
        Stmt::Atomic {
            dest: Some(dest), ..
        } => scope.bind_scalar(&dest.name, dest.ty),
        Stmt::SemRead { dest, .. } => scope.bind_scalar(dest, ScalarType::I32),
        Stmt::LocalArray { name, elem, shape } => scope.bind_ref(
            name,
            RefType {
                space: MemorySpace::Local,
                elem: *elem,
                shape: shape.clone(),
                owner: None,
            },
        ),
        _ => {}
    }
}

/// A module that passed validation, with every program of every map as
/// the interpreter and the backends run it: its kernel expanded
/// ([`crate::expand`]) and that kernel's [`ProgramFacts`]. Only [`super::validate`]
/// builds one, so holding one is the proof that the module is valid, and
/// each program is expanded and analysed once, there: the lowering
/// ([`crate::plan::lower`]), the interpreter ([`crate::interp::Interpreter::call`])
/// and conformance's analysis take both from here.
///
/// It derefs to the module as written, which it owns.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidModule {
    module: Module,
    maps: Vec<ValidMap>,
}

/// One map of a [`ValidModule`]: its programs, in map order.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidMap {
    name: Name,
    programs: Vec<ValidProgram>,
}

/// One program of a valid map: the kernel it runs and what it does.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidProgram {
    kernel: Kernel,
    facts: ProgramFacts,
}

impl ValidProgram {
    /// The program's kernel as it runs (`crate::expand::program_kernel`):
    /// parameters in operand order, constants, compound assignments and
    /// helper calls expanded, every name declared once.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// What the program does, about [`Self::kernel`].
    pub fn facts(&self) -> &ProgramFacts {
        &self.facts
    }
}

impl ValidMap {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every program, in map order (`ProgramId` order).
    pub fn programs(&self) -> &[ValidProgram] {
        &self.programs
    }

    /// The program `program`; `None` past the map's programs.
    pub fn program(&self, program: ProgramId) -> Option<&ValidProgram> {
        self.programs.get(program.index())
    }
}

impl ValidModule {
    /// Expands every program of every map of a module that passed the other
    /// checks and computes its facts: the one place either happens.
    pub(super) fn of(module: &Module) -> Result<Self, ExpandError> {
        let maps = module
            .maps
            .iter()
            .map(|map| {
                let programs = map
                    .programs
                    .iter()
                    .filter_map(|p| Some((module.mesh(&p.mesh)?, module.kernel(&p.kernel)?)))
                    .map(|(mesh, kernel)| {
                        let kernel = program_kernel(module, map, kernel)?;
                        let facts = ProgramFacts::of(&kernel, mesh);
                        Ok(ValidProgram { kernel, facts })
                    })
                    .collect::<Result<Vec<_>, ExpandError>>()?;
                Ok(ValidMap {
                    name: map.name.clone(),
                    programs,
                })
            })
            .collect::<Result<_, ExpandError>>()?;
        Ok(ValidModule {
            module: module.clone(),
            maps,
        })
    }

    /// The module as written.
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// The module as written, giving up the proof of validity.
    pub fn into_module(self) -> Module {
        self.module
    }

    /// Every map's programs, in module order (named apart from
    /// [`Module::maps`], which the deref reaches).
    pub fn valid_maps(&self) -> &[ValidMap] {
        &self.maps
    }

    /// The programs of map `name` (named apart from [`Module::map`], which
    /// the deref reaches).
    pub fn valid_map(&self, name: &str) -> Option<&ValidMap> {
        self.maps.iter().find(|m| m.name == name)
    }
}

impl std::ops::Deref for ValidModule {
    type Target = Module;

    /// Reading the module as written needs no proof: a valid module is
    /// read wherever a module is.
    fn deref(&self) -> &Module {
        &self.module
    }
}
