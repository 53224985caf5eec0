//! Lowering a validated map to a [`LaunchPlan`].

use thiserror::Error;

use super::LaunchPlan;
use crate::ir::Module;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum LowerError {
    #[error("no map named `{0}` in the module")]
    UnknownMap(String),
    #[error("lowering is not implemented yet")]
    NotImplemented,
}

/// Lowers the map `map` of a module that has passed validation.
pub fn lower(module: &Module, map: &str) -> Result<LaunchPlan, LowerError> {
    let _ = module
        .map(map)
        .ok_or_else(|| LowerError::UnknownMap(map.to_string()))?;
    Err(LowerError::NotImplemented)
}
