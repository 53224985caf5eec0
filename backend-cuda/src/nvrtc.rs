//! NVRTC: CUDA C → PTX (for checks without a GPU) or CUBIN (for runs).
//!
//! `cudarc` loads `libnvrtc` lazily and panics when it is missing, so every
//! entry point checks for the library first and returns a clear error.

use std::ffi::{c_char, CString};

use cudarc::nvrtc::sys;
use thiserror::Error;

use crate::cache::{self, ModuleCache};

/// How the tools are found, for error messages.
pub const TOOLS_HINT: &str = "run `cargo xtask test`, which installs them (pip packages nvidia-cuda-nvrtc and nvidia-cuda-nvcc), or put their nvidia/cu13/lib on LD_LIBRARY_PATH and nvidia/cu13/bin on PATH";

/// Why a compile failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CompileError {
    #[error("NVRTC not found (libnvrtc.so.13 on LD_LIBRARY_PATH): {TOOLS_HINT}")]
    NvrtcMissing,
    #[error("NVRTC failed to compile `{program}`:\n{log}")]
    Compile {
        program: String,
        /// NVRTC's log, each diagnostic followed by the source line it names.
        log: String,
    },
    #[error("NVRTC call {call} failed: {code}")]
    Api { call: &'static str, code: String },
    #[error("generated source contains a NUL byte")]
    NulInSource,
}

/// Compile settings. The defaults are the exact IEEE settings of docs/design.md.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Target SM version, e.g. 90 for `sm_90`.
    pub arch: u32,
    /// The map opted into fast math (`--use_fast_math`).
    pub fast_math: bool,
    /// Emit line info for profilers.
    pub line_info: bool,
    /// Use the module cache (memory and disk).
    pub use_cache: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            arch: 90,
            fast_math: false,
            line_info: false,
            use_cache: true,
        }
    }
}

/// Which output NVRTC produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    Ptx,
    Cubin,
}

impl CompileOptions {
    /// The NVRTC command-line options for `output`.
    pub fn nvrtc_args(&self, output: Output) -> Vec<String> {
        let mut args = vec![
            match output {
                // Virtual architecture: PTX that `ptxas -arch=sm_XX` assembles.
                Output::Ptx => format!("--gpu-architecture=compute_{}", self.arch),
                // Real architecture: NVRTC emits SASS in a CUBIN.
                Output::Cubin => format!("--gpu-architecture=sm_{}", self.arch),
            },
            "--std=c++17".to_string(),
        ];
        if self.fast_math {
            args.push("--use_fast_math".to_string());
        } else {
            // No contraction of a*b+c, no flush to zero, IEEE division and sqrt.
            args.extend(
                [
                    "--fmad=false",
                    "--ftz=false",
                    "--prec-div=true",
                    "--prec-sqrt=true",
                ]
                .map(String::from),
            );
        }
        if self.line_info {
            args.push("--generate-line-info".to_string());
        }
        args
    }
}

/// PTX text from NVRTC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ptx {
    pub text: String,
}

/// A CUBIN image (ELF) from NVRTC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cubin {
    pub bytes: Vec<u8>,
}

/// Whether `libnvrtc` can be loaded (through LD_LIBRARY_PATH or the system).
pub fn nvrtc_present() -> bool {
    // Asked once per process: each probe is a dlopen and dlclose.
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: only tries to dlopen the candidate names.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

fn check_library() -> Result<(), CompileError> {
    if nvrtc_present() {
        Ok(())
    } else {
        Err(CompileError::NvrtcMissing)
    }
}

fn api(call: &'static str, result: sys::nvrtcResult) -> Result<(), CompileError> {
    match result {
        sys::nvrtcResult::NVRTC_SUCCESS => Ok(()),
        code => Err(CompileError::Api {
            call,
            code: format!("{code:?}"),
        }),
    }
}

/// NVRTC's version, e.g. `(13, 0)`.
pub fn nvrtc_version() -> Result<(i32, i32), CompileError> {
    static VERSION: std::sync::OnceLock<Result<(i32, i32), CompileError>> =
        std::sync::OnceLock::new();
    VERSION.get_or_init(query_nvrtc_version).clone()
}

fn query_nvrtc_version() -> Result<(i32, i32), CompileError> {
    check_library()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present; the pointers are valid.
    api("nvrtcVersion", unsafe {
        sys::nvrtcVersion(&mut major, &mut minor)
    })?;
    Ok((major, minor))
}

/// The `sm_XY` architectures this NVRTC compiles for, as numbers `XY`.
pub fn supported_archs() -> Result<Vec<u32>, CompileError> {
    static ARCHS: std::sync::OnceLock<Result<Vec<u32>, CompileError>> = std::sync::OnceLock::new();
    ARCHS.get_or_init(query_supported_archs).clone()
}

fn query_supported_archs() -> Result<Vec<u32>, CompileError> {
    check_library()?;
    let mut count = 0;
    // SAFETY: the library is present; the pointer is valid.
    api("nvrtcGetNumSupportedArchs", unsafe {
        sys::nvrtcGetNumSupportedArchs(&mut count)
    })?;
    let mut archs = vec![0; count.max(0) as usize];
    // SAFETY: `archs` holds the `count` entries NVRTC writes.
    api("nvrtcGetSupportedArchs", unsafe {
        sys::nvrtcGetSupportedArchs(archs.as_mut_ptr())
    })?;
    Ok(archs.into_iter().map(|a| a.max(0) as u32).collect())
}

/// Compiles CUDA C to PTX (through the module cache).
pub fn compile_ptx(source: &str, options: &CompileOptions) -> Result<Ptx, CompileError> {
    let bytes = compile_cached(source, options, Output::Ptx)?;
    Ok(Ptx {
        text: String::from_utf8_lossy(&bytes)
            .trim_end_matches('\0')
            .to_string(),
    })
}

/// Compiles CUDA C to a CUBIN for `sm_{options.arch}` (through the module cache).
pub fn compile_cubin(source: &str, options: &CompileOptions) -> Result<Cubin, CompileError> {
    Ok(Cubin {
        bytes: compile_cached(source, options, Output::Cubin)?,
    })
}

fn compile_cached(
    source: &str,
    options: &CompileOptions,
    output: Output,
) -> Result<Vec<u8>, CompileError> {
    if options.use_cache {
        compile_with_cache(source, options, output, ModuleCache::global())
    } else {
        check_library()?;
        compile_on_a_large_stack(source, options, output)
    }
}

/// Compiles through `cache` (a hit costs no NVRTC call); the process-wide
/// cache is [`ModuleCache::global`].
pub fn compile_with_cache(
    source: &str,
    options: &CompileOptions,
    output: Output,
    cache: &ModuleCache,
) -> Result<Vec<u8>, CompileError> {
    check_library()?;
    let version = nvrtc_version()?;
    let key = cache::key_text(source, &options.nvrtc_args(output), version);
    if let Some(hit) = cache.get(&key) {
        return Ok(hit);
    }
    let bytes = compile_on_a_large_stack(source, options, output)?;
    cache.put(&key, &bytes);
    Ok(bytes)
}

/// Stack of the thread NVRTC compiles on. NVRTC recurses over long chains
/// of dependent values (a 5,000-term sum overflows a 2 MiB test thread even
/// as shallow C); the memory is reserved, not committed.
const NVRTC_STACK_BYTES: usize = 256 << 20;

/// [`compile_uncached`] on a thread of its own with a large stack, so that
/// no valid program overflows the caller's stack inside NVRTC.
fn compile_on_a_large_stack(
    source: &str,
    options: &CompileOptions,
    output: Output,
) -> Result<Vec<u8>, CompileError> {
    mpmd_core::ir::limits::on_large_stack(NVRTC_STACK_BYTES, || {
        compile_uncached(source, options, output)
    })
}

/// Owns an `nvrtcProgram` and destroys it on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed once.
        unsafe {
            let _ = sys::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

/// The name NVRTC gives the source in its diagnostics.
const PROGRAM_NAME: &str = "mpmd.cu";

fn compile_uncached(
    source: &str,
    options: &CompileOptions,
    output: Output,
) -> Result<Vec<u8>, CompileError> {
    let c_source = CString::new(source).map_err(|_| CompileError::NulInSource)?;
    let c_name = CString::new(PROGRAM_NAME).expect("constant name");
    let mut raw = std::ptr::null_mut();
    // SAFETY: valid C strings; no headers.
    api("nvrtcCreateProgram", unsafe {
        sys::nvrtcCreateProgram(
            &mut raw,
            c_source.as_ptr(),
            c_name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    })?;
    let program = Program(raw);
    let args: Vec<CString> = options
        .nvrtc_args(output)
        .into_iter()
        .map(|a| CString::new(a).expect("options have no NUL"))
        .collect();
    let arg_ptrs: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    // SAFETY: program is live; the option strings outlive the call.
    let result =
        unsafe { sys::nvrtcCompileProgram(program.0, arg_ptrs.len() as i32, arg_ptrs.as_ptr()) };
    if result != sys::nvrtcResult::NVRTC_SUCCESS {
        let log = program_log(&program)?;
        return Err(CompileError::Compile {
            program: PROGRAM_NAME.to_string(),
            log: annotate_log(&log, source),
        });
    }
    let mut size = 0usize;
    let bytes = match output {
        Output::Ptx => {
            // SAFETY: the program compiled; `size` is a valid pointer.
            api("nvrtcGetPTXSize", unsafe {
                sys::nvrtcGetPTXSize(program.0, &mut size)
            })?;
            let mut buffer = vec![0u8; size];
            // SAFETY: `buffer` holds the `size` bytes NVRTC reported.
            api("nvrtcGetPTX", unsafe {
                sys::nvrtcGetPTX(program.0, buffer.as_mut_ptr() as *mut c_char)
            })?;
            buffer
        }
        Output::Cubin => {
            // SAFETY: the program compiled; `size` is a valid pointer.
            api("nvrtcGetCUBINSize", unsafe {
                sys::nvrtcGetCUBINSize(program.0, &mut size)
            })?;
            let mut buffer = vec![0u8; size];
            // SAFETY: `buffer` holds the `size` bytes NVRTC reported.
            api("nvrtcGetCUBIN", unsafe {
                sys::nvrtcGetCUBIN(program.0, buffer.as_mut_ptr() as *mut c_char)
            })?;
            buffer
        }
    };
    Ok(bytes)
}

fn program_log(program: &Program) -> Result<String, CompileError> {
    let mut size = 0usize;
    // SAFETY: the program is live; `size` is a valid pointer.
    api("nvrtcGetProgramLogSize", unsafe {
        sys::nvrtcGetProgramLogSize(program.0, &mut size)
    })?;
    let mut buffer = vec![0u8; size.max(1)];
    // SAFETY: `buffer` holds at least the `size` bytes NVRTC reported.
    api("nvrtcGetProgramLog", unsafe {
        sys::nvrtcGetProgramLog(program.0, buffer.as_mut_ptr() as *mut c_char)
    })?;
    Ok(String::from_utf8_lossy(&buffer)
        .trim_end_matches('\0')
        .trim_end()
        .to_string())
}

/// NVRTC's log with the source line after each `mpmd.cu(LINE): ...` diagnostic.
pub fn annotate_log(log: &str, source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = String::new();
    let prefix = format!("{PROGRAM_NAME}(");
    for entry in log.lines() {
        out.push_str(entry);
        out.push('\n');
        let line_number = entry
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once(')'))
            .and_then(|(n, _)| n.parse::<usize>().ok());
        if let Some(n) = line_number {
            if let Some(text) = n.checked_sub(1).and_then(|i| lines.get(i)) {
                out.push_str(&format!("{n:>6} | {}\n", text.trim_end()));
            }
        }
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_ieee_options_by_default() {
        let args = CompileOptions::default().nvrtc_args(Output::Ptx);
        assert_eq!(
            args,
            [
                "--gpu-architecture=compute_90",
                "--std=c++17",
                "--fmad=false",
                "--ftz=false",
                "--prec-div=true",
                "--prec-sqrt=true"
            ]
        );
        let fast = CompileOptions {
            fast_math: true,
            ..CompileOptions::default()
        };
        assert_eq!(
            fast.nvrtc_args(Output::Cubin),
            ["--gpu-architecture=sm_90", "--std=c++17", "--use_fast_math"]
        );
    }

    #[test]
    fn log_gets_source_lines() {
        let log = "mpmd.cu(2): error: identifier \"y\" is undefined\n1 error detected";
        let source = "int a;\nint b = y;\n";
        assert_eq!(
            annotate_log(log, source),
            "mpmd.cu(2): error: identifier \"y\" is undefined\n     2 | int b = y;\n1 error detected"
        );
    }
}
