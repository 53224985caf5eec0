//! What the CUDA tests share: the tools they need and the programs they
//! compile ([`programs`]).
#![allow(dead_code)]

#[path = "../../../test-support/needs.rs"]
pub mod needs;
mod programs;

// Not every test file builds these programs.
#[allow(unused_imports)]
pub use programs::*;

/// Fails (never skips) when the CUDA tools are not on the paths the backend
/// searches (`needs::setup`).
pub fn require_tools() {
    needs::setup(
        "NVRTC (libnvrtc.so.13)",
        if mpmd_cuda::nvrtc_present() {
            Ok(())
        } else {
            Err("libnvrtc.so.13 is not on LD_LIBRARY_PATH")
        },
    );
    needs::setup("ptxas", mpmd_cuda::ptxas_path().map(|_| ()));
}

/// The plan of the first map of a module's text, validated.
pub fn text_plan(source: &str) -> mpmd_core::plan::LaunchPlan {
    let (module, _) = mpmd_core::text::parse(source).unwrap_or_else(|e| panic!("{e:?}\n{source}"));
    if let Err(diagnostics) = mpmd_core::validate::validate(&module, &Default::default()) {
        panic!("{diagnostics:?}\n{source}");
    }
    mpmd_core::plan::lower(&validated(&module), &module.maps[0].name).expect("lowers")
}

/// The text of corpus case `name` (`conformance/cases/NAME.mpmd`).
pub fn corpus_text(name: &str) -> String {
    let path = format!(
        "{}/../conformance/cases/{name}.mpmd",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The plan of the first map of corpus case `name`.
pub fn corpus_plan(name: &str) -> mpmd_core::plan::LaunchPlan {
    text_plan(&corpus_text(name))
}

/// `emitted` compiled by NVRTC and assembled by ptxas with `options`,
/// asserting that its kernel spills nothing: the PTX and the kernel's
/// resources. `what` names it in failures.
pub fn assemble_without_spills(
    emitted: &mpmd_cuda::EmittedModule,
    options: &mpmd_cuda::CompileOptions,
    what: &str,
) -> (mpmd_cuda::Ptx, mpmd_cuda::KernelResources) {
    let arch = options.arch;
    let ptx = mpmd_cuda::compile_ptx(&emitted.source, options)
        .unwrap_or_else(|e| panic!("{what} sm_{arch}: {e}"));
    let report =
        mpmd_cuda::assemble(&ptx, arch).unwrap_or_else(|e| panic!("{what} sm_{arch}: {e}"));
    let kernel = report
        .kernel(&emitted.kernel_name)
        .unwrap_or_else(|| panic!("{what} sm_{arch}: no kernel `{}`", emitted.kernel_name))
        .clone();
    assert_eq!(
        (kernel.spill_store_bytes, kernel.spill_load_bytes),
        (0, 0),
        "{what} sm_{arch}: spills"
    );
    (ptx, kernel)
}

/// [`CompileOptions`](mpmd_cuda::CompileOptions) for `arch`, the rest default.
pub fn for_arch(arch: u32) -> mpmd_cuda::CompileOptions {
    mpmd_cuda::CompileOptions {
        arch,
        ..mpmd_cuda::CompileOptions::default()
    }
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
