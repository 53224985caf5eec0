//! Set-up of the tools the tests and the conformance run need: a Vulkan
//! adapter (Mesa's lavapipe runs WGSL on the CPU) and NVRTC + ptxas (CUDA 13,
//! installed from PyPI into the target directory, so no root is needed).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Pinned CUDA 13 wheels: `nvidia-cuda-nvrtc` provides libnvrtc,
/// `nvidia-cuda-nvcc` provides ptxas; both install under `nvidia/cu13`.
pub const CUDA_WHEELS: [&str; 2] = ["nvidia-cuda-nvrtc==13.0.88", "nvidia-cuda-nvcc==13.0.88"];

const LAVAPIPE_ICD_DIR: &str = "/usr/share/vulkan/icd.d";

/// What set-up found or did, and the environment child processes get.
#[derive(Debug, Default)]
pub struct Setup {
    /// What was found or done, one line each.
    pub notes: Vec<String>,
    /// One line per missing tool, saying exactly what to install.
    pub missing: Vec<String>,
    /// Directories to prepend to `LD_LIBRARY_PATH` and `PATH` of children.
    pub lib_dirs: Vec<PathBuf>,
    pub bin_dirs: Vec<PathBuf>,
}

impl Setup {
    pub fn apply_env(&self, cmd: &mut Command) {
        if !self.lib_dirs.is_empty() {
            cmd.env(
                "LD_LIBRARY_PATH",
                prepend_paths(&self.lib_dirs, std::env::var_os("LD_LIBRARY_PATH")),
            );
        }
        if !self.bin_dirs.is_empty() {
            cmd.env(
                "PATH",
                prepend_paths(&self.bin_dirs, std::env::var_os("PATH")),
            );
        }
        // Mesa's Vulkan loader prints "error: XDG_RUNTIME_DIR is invalid" on
        // every adapter probe when it is unset (as under CI and `sudo`).
        #[cfg(unix)]
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            let dir = std::env::temp_dir().join(format!("mpmd-xdg-runtime-{}", uid()));
            if std::fs::create_dir_all(&dir).is_ok() {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
                cmd.env("XDG_RUNTIME_DIR", dir);
            }
        }
    }
}

/// The real user id (from /proc, to avoid a libc dependency for one call).
fn uid() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|rest| rest.split_whitespace().next().map(str::to_string))
        })
        .unwrap_or_else(|| "unknown".into())
}

fn prepend_paths(dirs: &[PathBuf], existing: Option<OsString>) -> OsString {
    let mut all: Vec<PathBuf> = dirs.to_vec();
    if let Some(existing) = existing {
        all.extend(std::env::split_paths(&existing));
    }
    std::env::join_paths(all).unwrap_or_default()
}

pub fn set_up(root: &Path, ci: bool) -> Setup {
    let mut setup = Setup::default();
    set_up_vulkan(&mut setup);
    set_up_cuda_tools(root, ci, &mut setup);
    set_up_host_compiler(&mut setup);
    setup
}

/// The host C++ compiler behind `cuda-host` (the CUDA text run on CPU
/// threads): `$MPMD_HOST_CXX`, else `c++`.
pub fn host_compiler_name() -> String {
    std::env::var("MPMD_HOST_CXX")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "c++".into())
}

const HOST_COMPILER_PACKAGE: &str = "g++";

fn host_compiler_works(compiler: &str) -> Option<String> {
    let out = Command::new(compiler).arg("--version").output().ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    })
}

fn set_up_host_compiler(setup: &mut Setup) {
    let compiler = host_compiler_name();
    if let Some(version) = host_compiler_works(&compiler) {
        setup.notes.push(format!(
            "cuda-host: host C++ compiler `{compiler}` ({version})"
        ));
        return;
    }
    if compiler == "c++" && is_root() && is_debian_like() {
        setup.notes.push(format!(
            "cuda-host: no `c++`; running `apt-get update` and `apt-get install -y {HOST_COMPILER_PACKAGE}`"
        ));
        let ok = run_visible(Command::new("apt-get").arg("update"))
            && run_visible(
                Command::new("apt-get")
                    .args(["install", "-y", HOST_COMPILER_PACKAGE])
                    .env("DEBIAN_FRONTEND", "noninteractive"),
            );
        if let Some(version) = ok.then(|| host_compiler_works(&compiler)).flatten() {
            setup.notes.push(format!(
                "cuda-host: installed {HOST_COMPILER_PACKAGE} ({version})"
            ));
            return;
        }
    }
    setup.missing.push(format!(
        "no host C++ compiler for cuda-host (`{compiler} --version` fails): install one \
         (Debian/Ubuntu: `sudo apt-get install -y {HOST_COMPILER_PACKAGE}`; Fedora: `sudo dnf install gcc-c++`) \
         or name it in MPMD_HOST_CXX; it must read C++17 with POSIX threads"
    ));
}

pub fn has_nextest() -> bool {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

fn lavapipe_icds() -> Vec<PathBuf> {
    std::fs::read_dir(LAVAPIPE_ICD_DIR)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("lvp_icd") && n.ends_with(".json"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn is_debian_like() -> bool {
    std::fs::read_to_string("/etc/os-release").is_ok_and(|s| {
        s.lines().any(|l| {
            let l = l.to_ascii_lowercase();
            (l.starts_with("id=") || l.starts_with("id_like="))
                && (l.contains("debian") || l.contains("ubuntu"))
        })
    })
}

const VULKAN_PACKAGES: [&str; 3] = ["mesa-vulkan-drivers", "libvulkan1", "vulkan-tools"];

fn set_up_vulkan(setup: &mut Setup) {
    let have = |s: &Setup| -> bool {
        let _ = s;
        !lavapipe_icds().is_empty() && on_path("vulkaninfo")
    };
    if have(setup) {
        setup.notes.push(format!(
            "vulkan: lavapipe ICD found ({})",
            lavapipe_icds()
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        return;
    }
    if is_root() && is_debian_like() {
        let install = format!("apt-get install -y {}", VULKAN_PACKAGES.join(" "));
        setup.notes.push(format!(
            "vulkan: lavapipe missing; running `apt-get update` and `{install}`"
        ));
        let ok = run_visible(Command::new("apt-get").arg("update"))
            && run_visible(
                Command::new("apt-get")
                    .args(["install", "-y"])
                    .args(VULKAN_PACKAGES)
                    .env("DEBIAN_FRONTEND", "noninteractive"),
            );
        if ok && have(setup) {
            setup.notes.push("vulkan: installed lavapipe".into());
            return;
        }
    }
    setup.missing.push(format!(
        "no Vulkan adapter for the WGSL tests: install Mesa's lavapipe and the Vulkan loader \
         (Debian/Ubuntu: `sudo apt-get install -y {}`; Fedora: `sudo dnf install mesa-vulkan-drivers \
         vulkan-loader vulkan-tools`); expected {LAVAPIPE_ICD_DIR}/lvp_icd*.json and `vulkaninfo`",
        VULKAN_PACKAGES.join(" ")
    ));
}

/// Runs a command with inherited output; prints it first.
pub(crate) fn run_visible(cmd: &mut Command) -> bool {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        line.push(' ');
        line.push_str(&a.to_string_lossy());
    }
    eprintln!("xtask: $ {line}");
    match cmd.status() {
        Ok(s) if s.success() => true,
        Ok(s) => {
            eprintln!("xtask: `{line}` failed ({s})");
            false
        }
        Err(e) => {
            eprintln!("xtask: cannot run `{line}`: {e}");
            false
        }
    }
}

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                root.join(d)
            }
        }
        None => root.join("target"),
    }
}

/// Where the wheels are installed and what must be there afterwards.
struct CudaToolsLayout {
    python_dir: PathBuf,
    lib_dir: PathBuf,
    bin_dir: PathBuf,
}

impl CudaToolsLayout {
    fn new(root: &Path) -> Self {
        let python_dir = target_dir(root).join("mpmd-tools").join("python");
        let cu13 = python_dir.join("nvidia").join("cu13");
        CudaToolsLayout {
            lib_dir: cu13.join("lib"),
            bin_dir: cu13.join("bin"),
            python_dir,
        }
    }

    /// Missing pieces: `libnvrtc.so*` in lib, `ptxas` in bin.
    fn missing(&self) -> Vec<String> {
        let mut missing = Vec::new();
        let has_nvrtc = std::fs::read_dir(&self.lib_dir)
            .map(|es| {
                es.filter_map(|e| e.ok())
                    .any(|e| e.file_name().to_string_lossy().starts_with("libnvrtc.so"))
            })
            .unwrap_or(false);
        if !has_nvrtc {
            missing.push(format!("{}/libnvrtc.so*", self.lib_dir.display()));
        }
        if !self.bin_dir.join("ptxas").is_file() {
            missing.push(format!("{}/ptxas", self.bin_dir.display()));
        }
        missing
    }
}

fn set_up_cuda_tools(root: &Path, ci: bool, setup: &mut Setup) {
    let layout = CudaToolsLayout::new(root);
    if layout.missing().is_empty() {
        setup.notes.push(format!(
            "cuda: NVRTC and ptxas found under {}",
            layout.python_dir.display()
        ));
    } else {
        install_cuda_wheels(&layout, ci, setup);
        let still = layout.missing();
        if !still.is_empty() {
            setup.missing.push(format!(
                "NVRTC/ptxas (CUDA 13) missing: {}; install them with \
                 `python3 -m pip install --target {} {}` (needs python3, pip and network access to PyPI)",
                still.join(", "),
                layout.python_dir.display(),
                CUDA_WHEELS.join(" ")
            ));
            return;
        }
        setup.notes.push(format!(
            "cuda: installed NVRTC and ptxas under {}",
            layout.python_dir.display()
        ));
    }
    setup.lib_dirs.push(layout.lib_dir);
    setup.bin_dirs.push(layout.bin_dir);
}

fn install_cuda_wheels(layout: &CudaToolsLayout, ci: bool, setup: &mut Setup) {
    let python = ["python3", "python"].into_iter().find(|p| on_path(p));
    let Some(python) = python else {
        setup
            .notes
            .push("cuda: cannot install NVRTC/ptxas: no `python3` on PATH".into());
        return;
    };
    let pip_works = Command::new(python)
        .args(["-m", "pip", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !pip_works {
        setup.notes.push(format!(
            "cuda: cannot install NVRTC/ptxas: `{python} -m pip` does not work (install pip, \
             e.g. `apt-get install python3-pip`)"
        ));
        return;
    }
    setup.notes.push(format!(
        "cuda: installing {} into {}",
        CUDA_WHEELS.join(" "),
        layout.python_dir.display()
    ));
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-deps",
        "--upgrade",
    ]);
    if ci {
        // A CI machine installs once and may be short of disk: keep no
        // second copy of the 130 MB of wheels in pip's cache.
        cmd.arg("--no-cache-dir");
    } else {
        cmd.arg("--quiet");
    }
    cmd.arg("--target")
        .arg(&layout.python_dir)
        .args(CUDA_WHEELS);
    if !run_visible(&mut cmd) {
        setup
            .notes
            .push("cuda: pip could not install the wheels (no network access to PyPI?)".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepend_puts_new_dirs_first() {
        let joined = prepend_paths(
            &[PathBuf::from("/a/lib")],
            Some(OsString::from("/usr/lib:/lib")),
        );
        assert_eq!(joined, OsString::from("/a/lib:/usr/lib:/lib"));
    }

    #[test]
    fn layout_is_under_target_mpmd_tools() {
        let layout = CudaToolsLayout::new(Path::new("/repo"));
        if std::env::var_os("CARGO_TARGET_DIR").is_none() {
            assert_eq!(
                layout.lib_dir,
                PathBuf::from("/repo/target/mpmd-tools/python/nvidia/cu13/lib")
            );
            assert_eq!(
                layout.bin_dir,
                PathBuf::from("/repo/target/mpmd-tools/python/nvidia/cu13/bin")
            );
        }
        let missing = CudaToolsLayout {
            python_dir: PathBuf::from("/nonexistent"),
            lib_dir: PathBuf::from("/nonexistent/lib"),
            bin_dir: PathBuf::from("/nonexistent/bin"),
        }
        .missing();
        assert_eq!(
            missing,
            vec![
                "/nonexistent/lib/libnvrtc.so*".to_string(),
                "/nonexistent/bin/ptxas".to_string()
            ]
        );
    }
}
