//! The tests' view of `mpmd_cuda::emulate_words` (the `cuda-host` backend):
//! runs generated CUDA C on CPU threads from words the test gives, and hands
//! back the control block and every buffer. Needs a C++17 compiler (`c++`
//! or `$MPMD_HOST_CXX`).
#![allow(dead_code)]

use std::collections::BTreeMap;

use mpmd_core::ir::Literal;
use mpmd_core::plan::{BufferInit, LaunchPlan};
use mpmd_core::Mode;
pub use mpmd_cuda::Emulated;
use mpmd_cuda::{buffer_words, emulate_words, HostOptions, UNINITIALISED_WORD};

pub fn emulate(
    plan: &LaunchPlan,
    mode: Mode,
    inputs: &BTreeMap<&str, Vec<u32>>,
    scalars: &BTreeMap<&str, Literal>,
    timeout_ns: u64,
) -> Emulated {
    emulate_with_residents(plan, mode, inputs, scalars, &BTreeMap::new(), timeout_ns)
}

/// [`emulate`] with the words device-resident refs start from (zero when
/// absent); their words after the call are in `Emulated::buffers`.
pub fn emulate_with_residents(
    plan: &LaunchPlan,
    mode: Mode,
    inputs: &BTreeMap<&str, Vec<u32>>,
    scalars: &BTreeMap<&str, Literal>,
    residents: &BTreeMap<&str, Vec<u32>>,
    timeout_ns: u64,
) -> Emulated {
    let start: Vec<Vec<u32>> = plan
        .buffers
        .iter()
        .map(|buffer| {
            let len = buffer_words(buffer);
            match &buffer.init {
                BufferInit::Input(name) => inputs[name.as_str()].clone(),
                BufferInit::Resident(name) => residents
                    .get(name.as_str())
                    .cloned()
                    .unwrap_or_else(|| vec![0; len]),
                // Uninitialised memory reads as a marker, so tests see unwritten words.
                BufferInit::Uninitialized => vec![UNINITIALISED_WORD; len],
                BufferInit::Zeroed => vec![0; len],
            }
        })
        .collect();
    let options = HostOptions {
        wait_timeout_ns: timeout_ns,
        ..HostOptions::default()
    };
    let scalars: BTreeMap<String, Literal> = scalars
        .iter()
        .map(|(name, value)| (name.to_string(), *value))
        .collect();
    emulate_words(plan, mode, &start, &scalars, options).expect("the emulated kernel runs")
}
