//! `ptxas`: assembles NVRTC's PTX for a real architecture and reports
//! registers and spills per kernel (`ptxas -arch=sm_90 -v`).
//!
//! Found as `$MPMD_PTXAS`, else `ptxas` on PATH.

use std::path::PathBuf;
use std::process::Command;

use thiserror::Error;

use crate::nvrtc::{Ptx, TOOLS_HINT};

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AssembleError {
    #[error("ptxas not found (set MPMD_PTXAS or put ptxas on PATH): {TOOLS_HINT}")]
    PtxasMissing,
    #[error("ptxas could not run: {0}")]
    Io(String),
    #[error("ptxas failed for sm_{arch}:\n{log}")]
    Failed { arch: u32, log: String },
}

/// Resource use of one kernel as ptxas reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelResources {
    pub name: String,
    pub registers: u32,
    pub stack_frame_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
    pub shared_bytes: u32,
}

impl KernelResources {
    pub fn spills(&self) -> bool {
        self.spill_store_bytes > 0 || self.spill_load_bytes > 0
    }
}

/// What `ptxas -v` said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AssembleReport {
    pub arch: u32,
    pub kernels: Vec<KernelResources>,
    /// The full `-v` output.
    pub log: String,
}

impl AssembleReport {
    pub fn kernel(&self, name: &str) -> Option<&KernelResources> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

/// The ptxas executable to run.
pub fn ptxas_path() -> Result<PathBuf, AssembleError> {
    if let Some(p) = std::env::var_os("MPMD_PTXAS").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").ok_or(AssembleError::PtxasMissing)?;
    std::env::split_paths(&path)
        .map(|d| d.join("ptxas"))
        .find(|p| p.is_file())
        .ok_or(AssembleError::PtxasMissing)
}

/// Assembles `ptx` for `sm_{arch}`.
pub fn assemble(ptx: &Ptx, arch: u32) -> Result<AssembleReport, AssembleError> {
    let ptxas = ptxas_path()?;
    // Unique per call: concurrent calls may assemble the same PTX.
    let dir = std::env::temp_dir().join(format!("mpmd-ptxas-{}", crate::cache::unique_suffix()));
    std::fs::create_dir_all(&dir).map_err(|e| AssembleError::Io(e.to_string()))?;
    let input = dir.join("module.ptx");
    let output = dir.join("module.cubin");
    let result = (|| {
        std::fs::write(&input, &ptx.text).map_err(|e| AssembleError::Io(e.to_string()))?;
        let out = Command::new(&ptxas)
            .arg(format!("-arch=sm_{arch}"))
            .arg("-v")
            .arg("-o")
            .arg(&output)
            .arg(&input)
            .output()
            .map_err(|e| AssembleError::Io(format!("{}: {e}", ptxas.display())))?;
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            return Err(AssembleError::Failed {
                arch,
                log: log.trim_end().to_string(),
            });
        }
        Ok(AssembleReport {
            arch,
            kernels: parse_verbose(&log),
            log,
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Parses `ptxas -v` output into per-kernel resources.
pub fn parse_verbose(log: &str) -> Vec<KernelResources> {
    let mut kernels: Vec<KernelResources> = Vec::new();
    let mut current: Option<usize> = None;
    for line in log.lines() {
        let line = line.trim();
        if let Some(rest) = line
            .split_once("Compiling entry function '")
            .map(|(_, r)| r)
        {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            kernels.push(KernelResources {
                name,
                ..Default::default()
            });
            current = Some(kernels.len() - 1);
            continue;
        }
        if let Some(rest) = line.split_once("Function properties for ").map(|(_, r)| r) {
            let name = rest.trim();
            current = kernels.iter().position(|k| k.name == name);
            continue;
        }
        let Some(k) = current.map(|i| &mut kernels[i]) else {
            continue;
        };
        if line.contains("bytes stack frame") {
            for part in line.split(',') {
                let part = part.trim();
                let n = leading_number(part);
                if part.ends_with("bytes stack frame") {
                    k.stack_frame_bytes = n;
                } else if part.ends_with("bytes spill stores") {
                    k.spill_store_bytes = n;
                } else if part.ends_with("bytes spill loads") {
                    k.spill_load_bytes = n;
                }
            }
        } else if let Some(rest) = line.split_once("Used ").map(|(_, r)| r) {
            k.registers = leading_number(rest);
            if let Some(smem) = rest.split(',').find(|p| p.contains("bytes smem")) {
                k.shared_bytes = leading_number(smem.trim());
            }
        }
    }
    kernels
}

fn leading_number(s: &str) -> u32 {
    s.chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ptxas_verbose_output() {
        let log = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'mpmd_k' for 'sm_90'\n\
ptxas info    : Function properties for mpmd_k\n\
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
ptxas info    : Used 24 registers, used 1 barriers, 12 bytes smem, 400 bytes cmem[0]\n";
        let kernels = parse_verbose(log);
        assert_eq!(
            kernels,
            vec![KernelResources {
                name: "mpmd_k".into(),
                registers: 24,
                stack_frame_bytes: 8,
                spill_store_bytes: 4,
                spill_load_bytes: 12,
                shared_bytes: 12,
            }]
        );
        assert!(kernels[0].spills());
    }
}
