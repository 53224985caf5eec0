//! The reference interpreter: the oracle every backend is judged against.

use std::collections::BTreeMap;

use crate::backend::{Backend, RunError, RunOptions};
use crate::host::{CallArgs, CallOutputs, HostTensor};
use crate::ir::Module;
use crate::plan::LaunchPlan;

/// Interpreter options beyond [`RunOptions`].
#[derive(Clone, Debug, Default)]
pub struct InterpOptions {
    pub run: RunOptions,
    /// Detect data races, reads of unwritten memory and out-of-bounds accesses.
    pub detect: bool,
    /// Extra seeded schedules to run; differing results are reported as
    /// nondeterminism (0: the lockstep schedule only).
    pub extra_schedules: u32,
}

/// Runs maps on host data; owns the device-resident refs across calls.
#[derive(Default)]
pub struct Interpreter {
    residents: BTreeMap<String, HostTensor>,
}

impl Interpreter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs one call of `map` from `module`.
    pub fn call(
        &mut self,
        module: &Module,
        map: &str,
        args: &CallArgs,
        options: &InterpOptions,
    ) -> Result<CallOutputs, RunError> {
        let _ = (module, map, args, options);
        Err(RunError::Backend("interpreter not implemented yet".into()))
    }
}

impl Backend for Interpreter {
    fn name(&self) -> &'static str {
        "interp"
    }

    fn run(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        let _ = (plan, args, options);
        Err(RunError::Backend("interpreter not implemented yet".into()))
    }

    fn resident(&self, name: &str) -> Option<HostTensor> {
        self.residents.get(name).cloned()
    }
}
