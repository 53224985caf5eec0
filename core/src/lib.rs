//! mpmd-core: the MPMD IR, its text format, validation, lowering to a launch
//! plan, the reference interpreter and the `Backend` trait, and a file's
//! test-case section ([`case`]) beside the IR.
//!
//! Start with [`ir`]; ARCHITECTURE.md at the repository root maps the rest.

// `RunError` carries whole sites (program, kernel, block, thread) so that a
// failure names its place; runs are not a hot path, so its size is accepted.
#![allow(clippy::result_large_err)]

pub mod backend;
pub mod bind;
pub mod case;
mod expand;
pub mod host;
mod ids;
pub mod inputs;
pub mod interp;
pub mod ir;
pub mod load;
pub mod lru;
pub mod numerics;
pub mod plan;
pub mod text;
pub mod validate;

pub use backend::{Backend, ErrorClass, Mode, RunError, RunOptions};

#[cfg(test)]
mod all_lists;
pub use host::{CallArgs, CallOutputs, HostTensor};

/// The README's Rust examples run as doctests, so the README cannot drift.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// The builder-API version of the stream-K GEMM runs as a doctest, bit for
/// bit against the example file.
#[cfg(doctest)]
#[doc = include_str!("../../docs/stream-k-gemm.md")]
struct StreamKGemmDoctests;
