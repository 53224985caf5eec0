//! mpmd-frontend: what every front end of mpmd shares (the CLI, the Python
//! package and, through it, the Pallas front end), so that none reaches
//! another's code for it:
//!
//! - loading a `.mpmd` file with its diagnostics rendered ([`load_file`],
//!   [`load_source`]; the rendering is core's `mpmd_core::load`), reading
//!   only regular files of bounded size ([`files`]);
//! - choosing a backend by name ([`BackendKind`], [`resolve_backend`]);
//! - a lowered map as a plan description, CUDA C or WGSL ([`Target`],
//!   [`emit`], [`describe`]);
//! - run errors whose messages name options the front end's way
//!   ([`with_option_names`]: the CLI's flags, Python's parameters), and
//!   the source lines they point at ([`source_notes`]: a race's accesses).
//!
//! Comparing outputs is conformance's (`mpmd_conformance::compare`), which
//! the CLI uses for `mpmd run --compare`.

// `RunError` is the shared contract type of every backend (core), large by design.
#![allow(clippy::result_large_err)]

mod backends;
pub mod describe;
mod error;
pub mod files;
mod load;
mod notes;
mod options;
mod targets;

pub use backends::{
    cuda_backend, resolve_backend, resolve_backend_within, BackendKind, CUDA_WAIT_TIMEOUT_VAR,
};
pub use error::FrontendError;
pub use load::{
    load_file, load_file_with, load_file_with_text, load_file_with_text_and_consts, load_module,
    load_source, load_source_with, MAX_SOURCE_BYTES,
};
pub use notes::source_notes;
pub use options::{name_options, with_option_names};
pub use targets::{emit, Target};
