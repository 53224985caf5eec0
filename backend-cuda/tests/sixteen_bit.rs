//! `f16` and `bf16` in the CUDA backend without a GPU. The emitted CUDA C
//! runs on CPU threads (`cuda-host`: the prelude's integer-bit conversions
//! and fma) and every result is compared bit for bit with
//! `mpmd_core::numerics`, the rule the interpreter implements (the checks
//! are in support/sixteen.rs; tests/gpu_run.rs runs them on a GPU): every
//! operation and cast on special values and random bit patterns, packed
//! stores from neighbouring threads, blocks, smem and owned instances, mixed
//! precision, 16-bit scalar parameters and residents, and checked-mode
//! reports. The same programs compile with NVRTC and assemble with ptxas for
//! every architecture from sm_75 to sm_121, with 16-bit memory accesses.

mod common;
#[path = "support/sixteen.rs"]
mod sixteen;

use common::{assemble_without_spills, for_arch, require_tools};
use mpmd_core::Mode;
use mpmd_cuda::{emit_module, HostCudaBackend};
use sixteen::*;

#[test]
fn every_operation_matches_numerics_bit_for_bit() {
    sixteen::every_operation(&mut HostCudaBackend::new(), MathFunctions::Exact);
}

/// The fma cases of `numerics::tests::fma_rounds_once`, where rounding the
/// f32 sum to nearest first would be wrong.
#[test]
fn fma_rounds_once_at_the_ties() {
    sixteen::fma_ties(&mut HostCudaBackend::new());
}

#[test]
fn every_cast_and_bitcast_matches_numerics_bit_for_bit() {
    sixteen::every_cast(&mut HostCudaBackend::new());
}

#[test]
fn packed_stores_lose_no_neighbouring_write() {
    sixteen::packed_stores(&mut HostCudaBackend::new());
}

#[test]
fn bf16_loads_accumulate_in_f32_and_store_bf16() {
    sixteen::mixed_precision(&mut HostCudaBackend::new());
}

#[test]
fn sixteen_bit_scalar_parameters_and_literals() {
    sixteen::scalar_parameters(&mut HostCudaBackend::new());
}

#[test]
fn a_bf16_resident_of_odd_length_keeps_its_packed_elements_across_calls() {
    sixteen::odd_resident(&mut HostCudaBackend::new());
}

#[test]
fn a_checked_out_of_bounds_16_bit_access_reports_the_element_index() {
    sixteen::checked_out_of_bounds(&mut HostCudaBackend::new());
}

/// Every program of these tests, in both modes.
fn programs() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for ty in SIXTEEN {
        out.push((format!("ops_{ty}"), ops_program(ty)));
        out.push((format!("casts_{ty}"), casts_program(ty)));
        out.push((format!("contention_{ty}"), contention_program(ty)));
    }
    out.push(("rowsum".into(), mixed_program()));
    out.push(("scalars".into(), scalars_program().into()));
    out
}

/// The architectures the tests assemble for: sm_75 to sm_121 where this
/// NVRTC and ptxas know them.
const ARCHS: [u32; 8] = [75, 80, 86, 89, 90, 100, 120, 121];

#[test]
fn sixteen_bit_programs_compile_and_assemble_for_sm_75_to_sm_121_with_16_bit_accesses() {
    require_tools();
    let supported = mpmd_cuda::supported_archs().unwrap();
    for arch in ARCHS {
        assert!(
            supported.contains(&arch),
            "NVRTC lacks sm_{arch}: {supported:?}"
        );
    }
    for (name, source) in programs() {
        let plan = plan_of_text(&source);
        for mode in [Mode::Fast, Mode::Checked] {
            let emitted = emit_module(&plan, mode).unwrap();
            let archs: &[u32] = match mode {
                Mode::Fast => &ARCHS,
                Mode::Checked => &[75, 90],
            };
            for &arch in archs {
                let what = format!("{name} {mode:?}");
                let (ptx, _) = assemble_without_spills(&emitted, &for_arch(arch), &what);
                // Packed memory: 16-bit loads and stores, never a
                // read-modify-write of the word around an element.
                let text = &ptx.text;
                assert!(
                    text.contains("st.global.u16") || text.contains("st.global.b16"),
                    "{name} sm_{arch}: no 16-bit global store"
                );
                if mode == Mode::Fast {
                    assert!(!text.contains("atom."), "{name} sm_{arch}: an atomic");
                }
                if name.starts_with("contention") {
                    assert!(
                        text.contains("st.shared.u16") || text.contains("st.shared.b16"),
                        "{name} sm_{arch}: no 16-bit shared store"
                    );
                }
            }
        }
    }
}
