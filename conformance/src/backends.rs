//! Reaching the GPU backends. Each is compiled in only with its cargo feature
//! (`wgpu`, `cuda`); without it every case reports
//! "backend X not available in this build" as a skip, never a pass.

use mpmd_core::plan::LaunchPlan;
use mpmd_core::{Backend, CallArgs, CallOutputs, HostTensor, RunError, RunOptions};

use crate::analysis::BackendId;
use crate::fuzz::{BackendFactory, FloatPolicy};

/// What a backend can do in this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Runs programs.
    Runs,
    /// Compiles every program but cannot run it (CUDA without a GPU).
    CompileOnly(String),
    /// Not usable here; the reason.
    Unavailable(String),
}

/// The environment a report records: what each backend is, or why it is missing.
#[derive(Clone, Debug)]
pub struct Environment {
    /// `(key, value)` lines of the report header.
    pub header: Vec<(String, String)>,
    /// Measured accuracy of the wgpu adapter, `(operation, ulp)`.
    pub wgpu_measured_ulp: Vec<(&'static str, f64)>,
    /// The WGSL adapter's documented deviations: (case tag, behaviour).
    pub wgpu_deviations: Vec<(&'static str, &'static str)>,
    pub wgpu: Availability,
    pub cuda: Availability,
    pub cuda_host: Availability,
}

impl Environment {
    pub fn availability(&self, id: BackendId) -> Availability {
        match id {
            BackendId::Interp => Availability::Runs,
            BackendId::Wgpu => self.wgpu.clone(),
            BackendId::Cuda => self.cuda.clone(),
            BackendId::CudaHost => self.cuda_host.clone(),
        }
    }
}

pub fn not_in_build(id: BackendId) -> String {
    // cuda-host is part of the `cuda` feature.
    let feature = match id {
        BackendId::CudaHost => BackendId::Cuda.name(),
        other => other.name(),
    };
    format!(
        "backend {} not available in this build (build mpmd-conformance with `--features {feature}`)",
        id.name(),
    )
}

/// Probes the selected backends once, for the header and availability.
pub fn probe(selected: &[BackendId]) -> Environment {
    let mut header = Vec::new();
    let (wgpu, wgpu_measured_ulp, wgpu_deviations) = if selected.contains(&BackendId::Wgpu) {
        wgpu_glue::probe(&mut header)
    } else {
        (
            Availability::Unavailable("not selected".into()),
            Vec::new(),
            Vec::new(),
        )
    };
    let cuda = if selected.contains(&BackendId::Cuda) {
        cuda_glue::probe(&mut header)
    } else {
        Availability::Unavailable("not selected".into())
    };
    let cuda_host = if selected.contains(&BackendId::CudaHost) {
        cuda_glue::probe_host(&mut header)
    } else {
        Availability::Unavailable("not selected".into())
    };
    Environment {
        header,
        wgpu,
        cuda,
        cuda_host,
        wgpu_measured_ulp,
        wgpu_deviations,
    }
}

/// What probing the WGSL adapter gives: availability, accuracy bounds
/// `(operation, ulp)`, deviations `(case tag, behaviour)`.
type WgpuProbe = (
    Availability,
    Vec<(&'static str, f64)>,
    Vec<(&'static str, &'static str)>,
);

/// A fresh backend value (device-resident refs start empty).
/// Whether the run declares the WebGPU adapter co-resident
/// (`--wgpu-co-resident`): plans that need co-residency and that the backend
/// cannot establish for its adapter then run as one fused dispatch, and
/// their results are `unverified`.
static WGPU_CO_RESIDENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets the `--wgpu-co-resident` declaration for every wgpu backend this
/// process opens from now on.
pub fn declare_wgpu_co_resident(declared: bool) {
    WGPU_CO_RESIDENT.store(declared, std::sync::atomic::Ordering::Relaxed);
}

fn wgpu_co_resident_declared() -> bool {
    WGPU_CO_RESIDENT.load(std::sync::atomic::Ordering::Relaxed)
}

/// Why a successful wgpu run of `plan` is only `unverified` (it ran fused on
/// the declaration alone); `None` when it is verified or wgpu is not built.
pub fn wgpu_unverified(plan: &LaunchPlan) -> Option<String> {
    wgpu_glue::unverified(plan)
}

pub fn new_backend(id: BackendId) -> Result<Box<dyn Backend>, String> {
    match id {
        BackendId::Interp => Ok(Box::new(mpmd_core::interp::Interpreter::new())),
        BackendId::Wgpu => wgpu_glue::new_backend(),
        BackendId::Cuda => cuda_glue::new_backend(),
        BackendId::CudaHost => cuda_glue::new_host_backend(),
    }
}

/// CUDA without a GPU: compile to PTX and assemble with ptxas.
pub fn cuda_check_plan(plan: &LaunchPlan) -> Result<(), String> {
    cuda_glue::check_plan(plan)
}

#[cfg(feature = "wgpu")]
mod wgpu_glue {
    use super::*;
    use mpmd_wgpu::{probe_adapter, profile_for, WgpuBackend, WgpuOptions};

    /// Opens the adapter and measures its subnormal handling, which decides
    /// the deviations conformance applies.
    pub fn probe(header: &mut Vec<(String, String)>) -> WgpuProbe {
        let mut backend = match WgpuBackend::new(WgpuOptions::default()) {
            Ok(backend) => backend,
            Err(e) => {
                let reason = format!("no WebGPU adapter: {e}");
                header.push(("wgpu adapter".into(), reason.clone()));
                return (Availability::Unavailable(reason), Vec::new(), Vec::new());
            }
        };
        let info = backend.adapter_info();
        header.push((
            "wgpu adapter".into(),
            format!("{} ({}, {})", info.name, info.backend, info.device_type),
        ));
        header.push((
            "wgpu driver".into(),
            format!("{} {}", info.driver, info.driver_info),
        ));
        let profile = match probe_adapter(&mut backend) {
            Ok(behaviour) => profile_for(behaviour),
            Err(e) => {
                let reason = format!("the float probe failed on this adapter: {e}");
                header.push(("wgpu accuracy profile".into(), reason.clone()));
                return (Availability::Unavailable(reason), Vec::new(), Vec::new());
            }
        };
        let subnormals = if profile.flushes_subnormal_inputs || profile.flushes_subnormal_results {
            "flushed to zero"
        } else {
            "kept"
        };
        header.push((
            "wgpu accuracy profile".into(),
            format!(
                "bounds measured on {}; subnormals {subnormals} (measured on this adapter)",
                profile.adapter
            ),
        ));
        // Native subgroups or the emulation: which one ran the corpus's warp
        // collectives on this adapter.
        header.push((
            "wgpu warp collectives".into(),
            backend.warp_path().to_string(),
        ));
        // Cycles run fused only where this many workgroups run at once (or
        // on --wgpu-co-resident, unverified).
        let residency = backend.residency();
        header.push((
            "wgpu co-residency".into(),
            format!(
                "{} workgroup(s) of a dispatch established to run at once ({}){}",
                residency.workgroups,
                residency.how,
                if wgpu_co_resident_declared() {
                    "; more declared by --wgpu-co-resident (unverified)"
                } else {
                    ""
                }
            ),
        ));
        (Availability::Runs, profile.ulp, profile.deviations)
    }

    fn options() -> WgpuOptions {
        WgpuOptions {
            co_resident: wgpu_co_resident_declared(),
            ..WgpuOptions::default()
        }
    }

    pub fn new_backend() -> Result<Box<dyn Backend>, String> {
        WgpuBackend::new(options())
            .map(|b| Box::new(b) as Box<dyn Backend>)
            .map_err(|e| e.to_string())
    }

    pub fn unverified(plan: &LaunchPlan) -> Option<String> {
        let backend = WgpuBackend::new(options()).ok()?;
        backend.unverified(plan).then(|| {
            let residency = backend.residency();
            format!(
                "ran as one fused dispatch of {} workgroups on the declaration --wgpu-co-resident; the backend \
                 established {} running at once on this adapter ({})",
                mpmd_wgpu::fused_workgroups(plan),
                residency.workgroups,
                residency.how
            )
        })
    }
}

#[cfg(not(feature = "wgpu"))]
mod wgpu_glue {
    use super::*;

    pub fn probe(header: &mut Vec<(String, String)>) -> WgpuProbe {
        let reason = not_in_build(BackendId::Wgpu);
        header.push(("wgpu adapter".into(), reason.clone()));
        (Availability::Unavailable(reason), Vec::new(), Vec::new())
    }

    pub fn new_backend() -> Result<Box<dyn Backend>, String> {
        Err(not_in_build(BackendId::Wgpu))
    }

    pub fn unverified(_plan: &LaunchPlan) -> Option<String> {
        None
    }
}

#[cfg(feature = "cuda")]
mod cuda_glue {
    use super::*;
    use mpmd_core::Mode;
    use mpmd_cuda::{
        check_plan as cuda_check, nvrtc_version, CompileOptions, CudaBackend, CudaOptions,
        NvrtcOutput,
    };

    pub fn probe(header: &mut Vec<(String, String)>) -> Availability {
        let version = match nvrtc_version() {
            Ok((major, minor)) => format!("{major}.{minor}"),
            Err(e) => {
                let reason = format!("NVRTC not usable: {e}");
                header.push(("nvrtc".into(), reason.clone()));
                return Availability::Unavailable(reason);
            }
        };
        header.push(("nvrtc".into(), version));
        let options = CompileOptions {
            arch: mpmd_cuda::CHECK_ARCH,
            ..CompileOptions::default()
        };
        header.push((
            "cuda compile options".into(),
            options.nvrtc_args(NvrtcOutput::Ptx).join(" "),
        ));
        match CudaBackend::new(CudaOptions::default()) {
            Ok(_) => {
                header.push(("cuda device".into(), "available".into()));
                Availability::Runs
            }
            Err(e) => {
                let reason = format!(
                    "no CUDA device ({e}): programs are compiled for sm_{} and assembled only",
                    mpmd_cuda::CHECK_ARCH
                );
                header.push(("cuda device".into(), reason.clone()));
                Availability::CompileOnly(reason)
            }
        }
    }

    pub fn new_backend() -> Result<Box<dyn Backend>, String> {
        CudaBackend::new(CudaOptions::default())
            .map(|b| Box::new(b) as Box<dyn Backend>)
            .map_err(|e| e.to_string())
    }

    /// cuda-host runs where the host C++ compiler builds its shim.
    pub fn probe_host(header: &mut Vec<(String, String)>) -> Availability {
        match mpmd_cuda::host_compiler() {
            Ok(compiler) => {
                header.push((
                    "cuda-host compiler".into(),
                    format!(
                        "`{}`: {}; flags {}",
                        compiler.program,
                        compiler.version,
                        mpmd_cuda::HOST_CXX_FLAGS.join(" ")
                    ),
                ));
                Availability::Runs
            }
            Err(e) => {
                header.push(("cuda-host compiler".into(), e.to_string()));
                Availability::Unavailable(e.to_string())
            }
        }
    }

    pub fn new_host_backend() -> Result<Box<dyn Backend>, String> {
        mpmd_cuda::host_compiler().map_err(|e| e.to_string())?;
        Ok(Box::new(mpmd_cuda::HostCudaBackend::new()))
    }

    pub fn check_plan(plan: &LaunchPlan) -> Result<(), String> {
        for mode in [Mode::Fast, Mode::Checked] {
            cuda_check(plan, mode).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

#[cfg(not(feature = "cuda"))]
mod cuda_glue {
    use super::*;

    pub fn probe(header: &mut Vec<(String, String)>) -> Availability {
        let reason = not_in_build(BackendId::Cuda);
        header.push(("nvrtc".into(), reason.clone()));
        Availability::Unavailable(reason)
    }

    pub fn new_backend() -> Result<Box<dyn Backend>, String> {
        Err(not_in_build(BackendId::Cuda))
    }

    pub fn probe_host(header: &mut Vec<(String, String)>) -> Availability {
        let reason = not_in_build(BackendId::CudaHost);
        header.push(("cuda-host compiler".into(), reason.clone()));
        Availability::Unavailable(reason)
    }

    pub fn new_host_backend() -> Result<Box<dyn Backend>, String> {
        Err(not_in_build(BackendId::CudaHost))
    }

    pub fn check_plan(plan: &LaunchPlan) -> Result<(), String> {
        let _ = plan;
        Err(not_in_build(BackendId::Cuda))
    }
}

/// CUDA where no GPU is present: every plan is compiled with NVRTC and
/// assembled by ptxas for sm_90. A compile failure is a disagreement (and is
/// reduced); a successful compile is counted as a skip with that reason,
/// never as agreement, since nothing ran.
struct CudaCompileOnly;

impl Backend for CudaCompileOnly {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn run(
        &mut self,
        plan: &LaunchPlan,
        _args: &CallArgs,
        _options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        cuda_check_plan(plan).map_err(RunError::Backend)?;
        Err(RunError::Unsupported {
            reason: "compiled and assembled for sm_90 only (no GPU)".into(),
        })
    }

    fn resident(&self, _name: &str) -> Option<HostTensor> {
        None
    }

    /// Nothing runs, so resident data has nowhere to go and is not needed.
    fn set_resident(&mut self, _name: &str, _tensor: HostTensor) -> Result<(), RunError> {
        Ok(())
    }
}

/// The fuzzer's factory for backend `name`; `None` for `interp`, which the
/// fuzzer always runs as the oracle. Without a GPU, `cuda` compiles only;
/// `cuda-host` runs the CUDA text on CPU threads where a host C++ compiler is.
pub fn fuzz_factory(name: &str) -> Result<Option<BackendFactory>, String> {
    Ok(match name {
        "interp" => None,
        "wgpu" => {
            new_backend(BackendId::Wgpu)?;
            Some(
                BackendFactory::new("wgpu", || new_backend(BackendId::Wgpu))
                    .with_floats(FloatPolicy::WGSL),
            )
        }
        "cuda" => Some(match new_backend(BackendId::Cuda) {
            Ok(_) => BackendFactory::new("cuda", || new_backend(BackendId::Cuda))
                .with_floats(FloatPolicy::CUDA_GPU),
            Err(_) => {
                BackendFactory::new("cuda", || Ok(Box::new(CudaCompileOnly) as Box<dyn Backend>))
            }
        }),
        "cuda-host" => {
            new_backend(BackendId::CudaHost)?;
            Some(BackendFactory::new("cuda-host", || {
                new_backend(BackendId::CudaHost)
            }))
        }
        other => {
            return Err(format!(
                "unknown backend `{other}` (interp, wgpu, cuda, cuda-host)"
            ))
        }
    })
}
