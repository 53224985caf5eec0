//! The caches behind compiles: NVRTC's module cache and cuda-host's
//! binaries.

use mpmd_core::ir::Literal;
use mpmd_core::{Backend, CallArgs, HostTensor, Mode, RunOptions};

use super::programs::scale;
use super::require_tools;
use crate::cache::{key_text, ModuleCache};
use crate::host_emulation::{compilations, HostCudaBackend};
use crate::nvrtc::{compile_ptx, nvrtc_version, CompileOptions, Output};

#[test]
fn compiles_go_through_the_module_cache() {
    require_tools();
    let source = format!(
        "extern \"C\" __global__ void cached(unsigned* y) {{ y[0] = {}u; }}\n",
        std::process::id()
    );
    let options = CompileOptions::default();
    let key = key_text(
        &source,
        &options.nvrtc_args(Output::Ptx),
        nvrtc_version().unwrap(),
    );
    let first = compile_ptx(&source, &options).unwrap();
    let cached = ModuleCache::global()
        .get(&key)
        .expect("compile stored the PTX");
    assert_eq!(
        String::from_utf8_lossy(&cached).trim_end_matches('\0'),
        first.text
    );
    assert_eq!(compile_ptx(&source, &options).unwrap(), first);
}

/// The cuda-host backend compiles a program once: a second call of the same
/// plan and mode (other inputs) reuses the binary, and a change of mode is
/// another program. The map's name is unique to this run, so no earlier
/// run's disk cache can answer.
#[test]
fn cuda_host_compiles_each_program_once() {
    let unique = format!(
        "once_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let mut module = scale();
    module.maps[0].name = unique.clone();
    let plan = mpmd_core::plan::lower(&validated(&module), &unique).unwrap();
    let mut backend = HostCudaBackend::new();
    let run = |backend: &mut HostCudaBackend, alpha: f32, mode: Mode| {
        let mut args = CallArgs::default();
        let x: Vec<f32> = (0..512).map(|i| i as f32).collect();
        args.inputs
            .insert("x".into(), HostTensor::from_f32(vec![512], &x));
        args.scalars.insert("alpha".into(), Literal::f32(alpha));
        args.scalars.insert("n".into(), Literal::U32(512));
        let out = backend
            .run(&plan, &args, &RunOptions { mode, seed: 0 })
            .unwrap();
        f32::from_bits(out.outputs["y"].words()[3])
    };
    let before = compilations();
    assert_eq!(run(&mut backend, 2.0, Mode::Fast), 6.0);
    let first = compilations();
    assert_eq!(run(&mut backend, 3.0, Mode::Fast), 9.0);
    assert_eq!(compilations(), first, "the same program compiled twice");
    assert_eq!(run(&mut backend, 0.5, Mode::Checked), 1.5);
    // Other tests may compile at the same time: at least these two.
    assert!(compilations() >= before + 2);
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
