//! The command line as clap parses it: commands, flags and their value types.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mpmd_core::interp::{DEFAULT_MEMORY_LIMIT, DEFAULT_TIME_LIMIT};
use mpmd_frontend::{BackendKind, Target};

#[derive(Debug, Parser)]
#[command(
    name = "mpmd",
    version,
    about = "Check, lower and run MPMD GPU kernels written in the .mpmd text format"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse and validate each file; print diagnostics for those that are wrong.
    Check {
        /// The .mpmd files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Lower a map and print the result for a target.
    Lower {
        #[arg(long, value_enum, default_value_t = Target::Plan)]
        target: Target,
        /// The .mpmd file to lower.
        file: PathBuf,
        /// The map to lower (default: every map of the file, in order; CUDA
        /// and WGSL of several maps need --map or --out-dir).
        #[arg(long)]
        map: Option<String>,
        /// Write one file per map into this folder, named after the map
        /// (`NAME.cu`, `NAME.wgsl`, `NAME.plan.txt`), instead of printing.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Run the file's calls in order on one backend and summarise the outputs.
    Run(RunFlags),
}

/// The flags of `mpmd run`.
#[derive(clap::Args, Debug)]
pub struct RunFlags {
    /// The .mpmd file whose calls to run.
    pub file: PathBuf,
    #[arg(long, value_enum, default_value_t = BackendKind::Interp)]
    pub backend: BackendKind,
    /// Seed for generated inputs and for the backend's schedules.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `NAME=PATH.npy`: data for an input, or for a device-resident ref
    /// before the first call, instead of generating it.
    #[arg(long = "input", value_name = "NAME=PATH")]
    pub inputs: Vec<String>,
    /// `NAME=VALUE`: a scalar parameter (overrides the call's value).
    #[arg(long = "scalar", value_name = "NAME=VALUE")]
    pub scalars: Vec<String>,
    /// Write every output, and every device-resident ref after the last
    /// call, as .npy into this folder (the summary names each file).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Check every access: out-of-bounds accesses are errors; the
    /// interpreter also reports data races, reads of unwritten memory
    /// and results that differ between schedules (see --schedules).
    #[arg(long)]
    pub checked: bool,
    /// Interpreter: seeded schedules to run beyond the lockstep one
    /// [default: 2 with --checked, as conformance runs, else 0].
    #[arg(long, value_name = "N")]
    pub schedules: Option<u32>,
    /// Wall-clock bound on one call, in seconds (0: no bound): on the
    /// interpreter all schedules together, buffers filled included; on
    /// wgpu compiling the pipelines, the dispatches and reading back (a
    /// compile or dispatch past it goes on in the background until the
    /// process exits); on cuda-host the emulated program, in whole seconds
    /// rounded up (compiling it is not bounded).
    #[arg(long, value_name = "SECONDS", default_value_t = Seconds(Some(DEFAULT_TIME_LIMIT)))]
    pub timeout: Seconds,
    /// Bound on the host memory the run holds at once: generated and
    /// read inputs and residents together, and on the interpreter
    /// everything it allocates beside them (buffers, block states,
    /// detection state). BYTES, or with a binary suffix: 512M, 4G.
    #[arg(long, value_name = "BYTES", default_value_t = ByteSize(DEFAULT_MEMORY_LIMIT))]
    pub memory_limit: ByteSize,
    /// wgpu: declare that every workgroup of a dispatch runs at once on
    /// this adapter, so that cycles and waits within one program may run.
    /// Such results are reported as unverified.
    #[arg(long)]
    pub co_resident: bool,
    /// Run only call K of the file (0-based, in the order of its `call`
    /// lines, as the summary numbers them). Earlier calls do not run, so
    /// residents start as before the first call: from --input, else the
    /// case's `generate` line, else as declared (semaphores and `zeroed`
    /// at zero, the rest uninitialised).
    #[arg(long, value_name = "K")]
    pub call: Option<usize>,
    /// Print each call's wall time (the whole `run` of the backend:
    /// compiling a plan it has not seen, uploads, launch, read-back) and,
    /// on CUDA, the kernel's time between two events around the launch.
    #[arg(long)]
    pub time: bool,
    /// `NAME=PATH.npy`: compare output NAME with a reference array of its
    /// dtype and shape; any mismatch exits 1 with a report. NAME is an
    /// output of the calls that run, or, where several calls have one of
    /// that name, the file stem --out writes (`INDEX_MAP_OUTPUT`).
    /// Floats are compared exactly unless --ulp or --rtol/--atol say
    /// otherwise; integers and bools always exactly; NaN matches NaN.
    #[arg(long = "compare", value_name = "NAME=PATH")]
    pub compares: Vec<String>,
    /// With --compare: float outputs may differ from the reference by N
    /// units in the last place of their own type (f32, f16 or bf16).
    #[arg(long, value_name = "N", requires = "compares", conflicts_with_all = ["rtol", "atol"])]
    pub ulp: Option<u32>,
    /// With --compare: relative tolerance of numpy's allclose,
    /// |got - expected| <= atol + rtol * |expected| [default: 0].
    #[arg(long, value_name = "R", requires = "compares", value_parser = parse_tolerance)]
    pub rtol: Option<f64>,
    /// With --compare: absolute tolerance of numpy's allclose (see
    /// --rtol) [default: 0].
    #[arg(long, value_name = "A", requires = "compares", value_parser = parse_tolerance)]
    pub atol: Option<f64>,
}

/// `--rtol` and `--atol`: a finite number at least 0.
fn parse_tolerance(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| {
            format!("`{text}` is not a tolerance (a finite number at least 0, such as 1e-5)")
        })
}

/// `--timeout`: seconds as a decimal number; 0 is no bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seconds(pub Option<Duration>);

impl FromStr for Seconds {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let seconds: f64 = text
            .parse()
            .ok()
            .filter(|s: &f64| s.is_finite() && *s >= 0.0 && *s <= 1e12)
            .ok_or_else(|| {
                format!("`{text}` is not a number of seconds (such as 60, 0.5, or 0 for no bound)")
            })?;
        Ok(Seconds(
            (seconds > 0.0).then(|| Duration::from_secs_f64(seconds)),
        ))
    }
}

impl std::fmt::Display for Seconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => f.write_str("0"),
            Some(d) => write!(f, "{}", d.as_secs_f64()),
        }
    }
}

/// `--memory-limit`: a byte count, optionally with a binary suffix
/// (`K`, `M`, `G`, `T`: powers of 1024; `4G`, `512MiB`, `1024`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

const BYTE_SUFFIXES: [(char, u32); 4] = [('K', 10), ('M', 20), ('G', 30), ('T', 40)];

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("`{text}` is not a byte count (such as 1048576, 512M or 4G)");
        let upper = text.trim().to_ascii_uppercase();
        let trimmed = upper
            .strip_suffix("IB")
            .or_else(|| upper.strip_suffix('B'))
            .unwrap_or(&upper);
        let (digits, shift) = match trimmed.chars().last() {
            Some(c) if c.is_ascii_alphabetic() => {
                let shift = BYTE_SUFFIXES
                    .iter()
                    .find(|(s, _)| *s == c)
                    .map(|(_, shift)| *shift)
                    .ok_or_else(bad)?;
                (&trimmed[..trimmed.len() - 1], shift)
            }
            _ => (trimmed, 0),
        };
        let value: u64 = digits.parse().map_err(|_| bad())?;
        value
            .checked_mul(1 << shift)
            .map(ByteSize)
            .ok_or_else(|| format!("`{text}` is more bytes than fit in 64 bits"))
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let exact = BYTE_SUFFIXES
            .iter()
            .rev()
            .find(|(_, shift)| self.0 != 0 && self.0.is_multiple_of(1 << shift));
        match exact {
            Some((suffix, shift)) => write!(f, "{}{suffix}", self.0 >> shift),
            None => write!(f, "{}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_and_seconds_parse_and_print() {
        let bytes = |t: &str| t.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(bytes("4G"), Ok(4 << 30));
        assert_eq!(bytes("4GiB"), Ok(4 << 30));
        assert_eq!(bytes("512m"), Ok(512 << 20));
        assert_eq!(bytes("1000"), Ok(1000));
        assert_eq!(
            bytes("4X"),
            Err("`4X` is not a byte count (such as 1048576, 512M or 4G)".into())
        );
        assert_eq!(
            bytes("99999999999T"),
            Err("`99999999999T` is more bytes than fit in 64 bits".into())
        );
        assert_eq!(ByteSize(4 << 30).to_string(), "4G");
        assert_eq!(ByteSize(1000).to_string(), "1000");
        assert_eq!(
            "60".parse::<Seconds>(),
            Ok(Seconds(Some(Duration::from_secs(60))))
        );
        assert_eq!(
            "-1".parse::<Seconds>(),
            Err("`-1` is not a number of seconds (such as 60, 0.5, or 0 for no bound)".into())
        );
        assert_eq!(Seconds(Some(DEFAULT_TIME_LIMIT)).to_string(), "60");
    }
}
