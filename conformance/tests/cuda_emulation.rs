//! Differential fuzzing of the CUDA code generator without a GPU: the
//! fuzzer's programs are emitted as CUDA C, compiled for the CPU with the
//! host-emulation shim of backend-cuda's tests (one thread per CUDA thread,
//! blocks one after another in logical order) and judged against the
//! interpreter like any backend. This checks the generated logic (schedules,
//! addressing, numerics, semaphores, loads-first loops) on every CI run; the
//! GPU memory model and co-residency need a GPU. Needs `c++` (C++20).
//! `MPMD_EMULATED_FUZZ=N` runs N programs per mode instead of the few CI runs.
#![cfg(feature = "cuda")]

#[path = "../../backend-cuda/tests/support/emulate.rs"]
mod emulate;

use std::collections::BTreeMap;
use std::time::Duration;

use mpmd_conformance::fuzz::{run_fuzz, BackendFactory, FuzzConfig};
use mpmd_core::host::{CallArgs, CallOutputs, HostTensor};
use mpmd_core::plan::{BufferInit, LaunchPlan};
use mpmd_core::{Backend, Mode, RunError, RunOptions};
use mpmd_cuda::emit_module;

/// The CUDA backend's generated code, run on CPU threads.
#[derive(Default)]
struct EmulatedCuda {
    residents: BTreeMap<String, HostTensor>,
}

impl Backend for EmulatedCuda {
    fn name(&self) -> &'static str {
        "cuda-emulated"
    }

    fn run(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        if plan.needs_co_residency() {
            return Err(RunError::Unsupported {
                reason: "the emulator runs blocks one after another".into(),
            });
        }
        // What the CUDA backend uploads.
        let mut words = mpmd_cuda::backend::input_words(plan, args)?;
        let inputs = plan
            .buffers
            .iter()
            .enumerate()
            .filter_map(|(index, buffer)| match &buffer.init {
                BufferInit::Input(name) => Some((name.as_str(), words.remove(&index)?)),
                _ => None,
            })
            .collect();
        let scalars = args
            .scalars
            .iter()
            .map(|(name, value)| (name.as_str(), *value))
            .collect();
        let residents = self
            .residents
            .iter()
            .map(|(name, t)| (name.as_str(), t.words.clone()))
            .collect();
        let out = emulate::emulate_with_residents(
            plan,
            options.mode,
            &inputs,
            &scalars,
            &residents,
            2_000_000_000,
        );
        let module = emit_module(plan, options.mode).map_err(|e| RunError::Unsupported {
            reason: e.to_string(),
        })?;
        // As the backend does: the status word says whether to read the
        // control block; the two must agree.
        let recorded = mpmd_cuda::control::decode_for_plan(&out.control, &module, plan);
        match (out.status, recorded) {
            (0, None) => {}
            (1, Some(error)) => return Err(error),
            (status, recorded) => {
                return Err(RunError::Backend(format!(
                    "status word {status} but the control block records {recorded:?}"
                )))
            }
        }
        let mut outputs = BTreeMap::new();
        for (index, buffer) in plan.buffers.iter().enumerate() {
            let mut words = out.buffers[index].clone();
            words.truncate(buffer.len as usize);
            let tensor = HostTensor {
                elem: buffer.ty.elem,
                shape: plan.host_shape(buffer),
                words,
            };
            if let BufferInit::Resident(name) = &buffer.init {
                self.residents.insert(name.clone(), tensor.clone());
            }
            if let Some(name) = &buffer.output {
                outputs.insert(name.clone(), tensor);
            }
        }
        Ok(CallOutputs { outputs })
    }

    fn resident(&self, name: &str) -> Option<HostTensor> {
        self.residents.get(name).cloned()
    }
}

fn fuzz(seed: u64, iterations: u64, mode: Mode) {
    let iterations = std::env::var("MPMD_EMULATED_FUZZ")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(iterations);
    let factory = BackendFactory::new("cuda-emulated", || {
        Ok(Box::new(EmulatedCuda::default()) as Box<dyn Backend>)
    });
    let config = FuzzConfig {
        seed,
        iterations: Some(iterations),
        mode,
        reduce: false,
        per_program_timeout: Duration::from_secs(60),
        ..FuzzConfig::default()
    };
    let summary = run_fuzz(&config, &[factory], &mut |line| println!("{line}"));
    assert!(
        summary.ok(),
        "generator bugs: {:#?}\nfindings: {:#?}",
        summary.generator_bugs,
        summary.findings
    );
    let agreed = summary.agreed.get("cuda-emulated").copied().unwrap_or(0);
    // Only plans that need co-residency are declined; most programs must run.
    assert!(
        agreed * 2 >= iterations,
        "only {agreed} of {iterations} programs ran: {:?}",
        summary.skipped
    );
}

#[test]
fn generated_cuda_agrees_with_the_interpreter_in_fast_mode() {
    fuzz(0x5eed_0001, 16, Mode::Fast);
}

#[test]
fn generated_cuda_agrees_with_the_interpreter_in_checked_mode() {
    fuzz(0x5eed_0002, 8, Mode::Checked);
}
