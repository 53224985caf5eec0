//! mpmd-conformance: the differential harness. Loads the case corpus
//! (`conformance/cases/*.mpmd`), generates inputs per each case's generators
//! (`mpmd_core::inputs`, deterministic for a seed), runs every case on the
//! reference interpreter (the oracle, with race/uninitialised/out-of-bounds
//! detection and extra schedules) and on the GPU backends, compares per each
//! output's compare mode, and reports a table, a summary line and JSON.

pub mod analysis;
pub mod backends;
pub mod case;
pub mod compare;
pub mod fuzz;
pub mod report;
pub mod run;
pub mod runner;
