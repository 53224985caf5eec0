//! What happens when the CUDA libraries or the GPU are missing: clear
//! one-line errors, never a panic.

use std::process::Command;

use mpmd_cuda::{driver_present, CudaBackend, CudaError, CudaOptions};

const NVRTC_MISSING: &str = "NVRTC not found (libnvrtc.so.13 on LD_LIBRARY_PATH): run `cargo xtask test`, which installs them (pip packages nvidia-cuda-nvrtc and nvidia-cuda-nvcc), or put their nvidia/cu13/lib on LD_LIBRARY_PATH and nvidia/cu13/bin on PATH";

const DRIVER_MISSING: &str = "no CUDA driver found (libcuda.so.1): this machine has no NVIDIA driver; run on a machine with an NVIDIA GPU and its driver";

/// Runs `probe_*` tests of this binary in a child process with the given
/// LD_LIBRARY_PATH, and returns what the child printed.
fn child_output(test: &str, ld_library_path: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LD_LIBRARY_PATH", ld_library_path)
        .env("MPMD_CACHE_DIR", env!("CARGO_TARGET_TMPDIR"))
        .output()
        .expect("test binary runs");
    assert!(out.status.success(), "child failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Child side: reports whether NVRTC loads, and the error of a compile.
#[test]
#[ignore = "run by missing_nvrtc_is_a_clear_error in a child process"]
fn probe_compile() {
    let present = mpmd_cuda::nvrtc_present();
    let result = mpmd_cuda::compile_ptx(
        "extern \"C\" __global__ void k() {}",
        &mpmd_cuda::CompileOptions::default(),
    );
    println!("present={present}");
    match result {
        Ok(_) => println!("result=ok"),
        Err(e) => println!("result=err:{e}"),
    }
}

#[test]
fn missing_nvrtc_is_a_clear_error() {
    let empty = std::env::temp_dir().join("mpmd-empty-lib-dir");
    std::fs::create_dir_all(&empty).unwrap();
    let out = child_output("probe_compile", empty.to_str().unwrap());
    if out.contains("present=true") {
        // NVRTC is installed system-wide here, so hiding LD_LIBRARY_PATH
        // cannot hide it; the compile must then work.
        assert!(out.contains("result=ok"), "{out}");
        assert_eq!(
            mpmd_cuda::CompileError::NvrtcMissing.to_string(),
            NVRTC_MISSING
        );
    } else {
        assert!(
            out.contains(&format!("result=err:{NVRTC_MISSING}\n")),
            "child printed:\n{out}"
        );
    }
}

#[test]
fn backend_without_gpu_fails_with_one_line() {
    match CudaBackend::new(CudaOptions::default()) {
        Err(e) => {
            let text = e.to_string();
            assert_eq!(text.lines().count(), 1, "{text}");
            if !driver_present() {
                assert_eq!(e, CudaError::DriverMissing);
                assert_eq!(text, DRIVER_MISSING);
            }
        }
        Ok(backend) => {
            // A machine with a GPU: the backend opens and names its device.
            assert!(driver_present());
            assert!(backend.arch() >= 70, "sm_{}", backend.arch());
        }
    }
}
