//! mpmd-conformance
pub mod fuzz;
