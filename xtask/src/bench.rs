//! `cargo xtask bench report`: the performance report (docs/bench.md).
//!
//! One run measures, and writes to `target/bench/report.md` and stdout:
//! - Pallas's GPU interpret mode against mpmd's interpreter on the same four
//!   kernels (bench/kernels/*.mpmd), detection off and on, rounds
//!   interleaved (bench/pallas_vs_mpmd.py, in the environment `cargo xtask
//!   pytest` builds, with the package built optimised);
//! - a tiny map per `Interpreter().call` and under `jax.jit`;
//! - the stream-K example in GFLOP/s on the interpreter (fast mode);
//! - the corpus's heaviest case on the interpreter;
//! - the WGSL benchmark (backend-wgpu/benches/wgsl_vs_handwritten.rs), its
//!   lines as it prints them;
//! - the fuzzer's programs per second on interp, wgpu and cuda-host.
//!
//! A part that cannot run says why in the report; no figure is made up.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use serde_json::Value;

use crate::python::{self, Profile};
use crate::tools::{self, Setup};

/// What `cargo xtask bench report` is asked for.
pub struct ReportOptions {
    /// Rounds of the Pallas/mpmd table (each variant once a round).
    pub rounds: u32,
    /// Programs of each fuzzer run.
    pub fuzz_programs: u64,
}

/// The kernels of the table, in its order: file stem and the row's label.
const KERNELS: [(&str, &str); 4] = [
    ("elementwise", "elementwise `y = 2x + 1`, 2^20 f32"),
    ("reduction", "block reduction, 4096 a block, 2^20 f32"),
    (
        "producer_consumer",
        "producer/consumer, 2^20 f32 (mpmd: 2 programs + semaphores; Pallas: 2 kernels in one jit)",
    ),
    (
        "matmul_tiled",
        "matmul 256^3 f32 (mpmd: 16x16 smem tiles, 2-D indexing; Pallas: 64x64 tile, `jnp.dot`)",
    ),
];

/// The fuzzer's seed in the report (fixed: the same programs every run).
const FUZZ_SEED: u64 = 1000;

pub fn report(root: &Path, setup: &Setup, options: &ReportOptions) -> ExitCode {
    let started = Instant::now();
    let target = tools::target_dir(root);
    let out_dir = target.join("bench");
    if let Err(e) = std::fs::create_dir_all(&out_dir) {
        eprintln!("xtask: error: cannot create {}: {e}", out_dir.display());
        return ExitCode::FAILURE;
    }
    // The release binaries the report runs, one package a build: a build of
    // several unifies their dependencies' features, and the next build of
    // one of them alone (`python::prepare` builds the CLI) rebuilds those.
    for (package, bins) in [("mpmd-cli", "--bin=mpmd"), ("mpmd-conformance", "--bins")] {
        let mut build = crate::cargo(root, setup);
        build.args(["build", "--release", "-p", package, bins]);
        if crate::run_announced(&mut build) != ExitCode::SUCCESS {
            eprintln!("xtask: error: the release binaries of {package} did not build");
            return ExitCode::FAILURE;
        }
    }
    let release = target.join("release");
    let cli = release.join("mpmd");

    let mut md = String::new();
    let mut part_seconds: Vec<(&str, f64)> = Vec::new();
    let _ = writeln!(md, "### Performance (`cargo xtask bench report`)\n");
    let _ = writeln!(md, "Machine: {}.\n", machine());

    // ---- Pallas against mpmd ----
    eprintln!(
        "xtask: bench: Pallas against mpmd ({} rounds)",
        options.rounds
    );
    let table = match python::prepare(root, setup, Profile::Release) {
        Err(why) => Err(format!("the Python environment cannot be set up: {why}")),
        Ok(python) => {
            let mut cmd = Command::new(&python);
            setup.apply_env(&mut cmd);
            cmd.current_dir(root)
                .arg(root.join("bench").join("pallas_vs_mpmd.py"))
                .arg("--cli")
                .arg(&cli)
                .arg("--rounds")
                .arg(options.rounds.to_string());
            let clock = Instant::now();
            let json = captured_json(&mut cmd);
            part_seconds.push(("Pallas/mpmd table", clock.elapsed().as_secs_f64()));
            if let Ok(json) = &json {
                // The raw figures, for another rendering.
                let raw = out_dir.join("pallas_vs_mpmd.json");
                let _ = std::fs::write(&raw, json.to_string());
            }
            json
        }
    };
    match &table {
        Ok(json) => pallas_table(&mut md, json),
        Err(why) => {
            let _ = writeln!(md, "Pallas against mpmd: NOT MEASURED: {why}\n");
        }
    }

    // ---- the interpreter's other figures ----
    let _ = writeln!(md, "Other figures:\n");
    match stream_k(root, &cli) {
        Ok(line) => {
            let _ = writeln!(md, "- {line}");
        }
        Err(why) => {
            let _ = writeln!(md, "- stream-K example: NOT MEASURED: {why}");
        }
    }
    let clock = Instant::now();
    let heaviest = heaviest_case(root, setup, &release.join("mpmd-conformance"));
    part_seconds.push(("corpus on the interpreter", clock.elapsed().as_secs_f64()));
    match heaviest {
        Ok(line) => {
            let _ = writeln!(md, "- {line}");
        }
        Err(why) => {
            let _ = writeln!(md, "- heaviest corpus case: NOT MEASURED: {why}");
        }
    }
    if let Ok(json) = &table {
        tiny_lines(&mut md, json);
    }
    let clock = Instant::now();
    fuzz_lines(&mut md, root, setup, &release.join("mpmd-fuzz"), options);
    part_seconds.push(("fuzzer", clock.elapsed().as_secs_f64()));
    let _ = writeln!(md);

    // ---- WGSL ----
    let mut wgsl = crate::cargo(root, setup);
    wgsl.args(["bench", "-p", "mpmd-wgpu", "--bench", "wgsl_vs_handwritten"]);
    match captured(&mut wgsl) {
        Ok(text) => {
            let _ = writeln!(
                md,
                "WGSL against hand-written WGSL on the same adapter \
                 (`cargo bench -p mpmd-wgpu --bench wgsl_vs_handwritten`, its lines; ratio = mpmd / hand-written):\n"
            );
            let _ = writeln!(md, "```text");
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let _ = writeln!(md, "{line}");
            }
            let _ = writeln!(md, "```\n");
        }
        Err(why) => {
            let _ = writeln!(md, "WGSL benchmark: NOT MEASURED: {why}\n");
        }
    }
    let parts: Vec<String> = part_seconds
        .iter()
        .map(|(part, s)| format!("{part} {s:.0} s"))
        .collect();
    let _ = writeln!(
        md,
        "Whole report: {:.0} s, builds included ({}).",
        started.elapsed().as_secs_f64(),
        parts.join(", ")
    );

    let path = out_dir.join("report.md");
    if let Err(e) = std::fs::write(&path, &md) {
        eprintln!("xtask: error: cannot write {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    println!("{md}");
    eprintln!("xtask: bench: wrote {}", path.display());
    // A part that could not run fails the command (its reason is in the report).
    let complete = !md.contains("NOT MEASURED") && !md.contains("n/a");
    if complete {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "xtask: error: parts of the report were not measured (see NOT MEASURED and n/a above)"
        );
        ExitCode::FAILURE
    }
}

/// CPUs, memory and GPU adapters as far as this machine says.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "CPU model unknown".into());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            let kb: u64 = t
                .lines()
                .find(|l| l.starts_with("MemTotal"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some(format!("{:.0} GiB", kb as f64 / (1 << 20) as f64))
        })
        .unwrap_or_else(|| "memory unknown".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "unknown".into());
    format!("{cpus} CPUs ({model}), {memory}, load average {load} at the start")
}

/// Runs `cmd` (stderr streams through) and returns its stdout.
fn captured(cmd: &mut Command) -> Result<String, String> {
    eprintln!("xtask: running {}", crate::describe(cmd));
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", crate::describe(cmd)))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "`{}` failed ({}){}",
            crate::describe(cmd),
            out.status,
            last_lines(&text)
        ));
    }
    Ok(text)
}

fn captured_json(cmd: &mut Command) -> Result<Value, String> {
    let text = captured(cmd)?;
    serde_json::from_str(&text)
        .map_err(|e| format!("its output is not JSON ({e}){}", last_lines(&text)))
}

fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join(" / ");
    if tail.is_empty() {
        String::new()
    } else {
        format!(": {tail}")
    }
}

fn seconds(row: &Value, key: &str) -> Option<f64> {
    row.get(key).and_then(Value::as_f64)
}

fn ms(s: Option<f64>) -> String {
    s.map_or_else(|| "n/a".to_string(), |s| format!("{:.1}", s * 1e3))
}

/// `Pallas / mpmd` as a ratio, `n/a` where either is missing.
fn ratio(pallas: Option<f64>, mpmd: Option<f64>) -> String {
    match (pallas, mpmd) {
        // Two decimals below 1, so that a slower mpmd shows how much slower.
        (Some(p), Some(m)) if m > 0.0 && p / m < 1.0 => format!("{:.2}x", p / m),
        (Some(p), Some(m)) if m > 0.0 => format!("{:.1}x", p / m),
        _ => "n/a".into(),
    }
}

fn pallas_table(md: &mut String, json: &Value) {
    let rounds = json.get("rounds").and_then(Value::as_u64).unwrap_or(0);
    let versions = json.get("versions").cloned().unwrap_or(Value::Null);
    let jax = versions
        .get("jax")
        .and_then(Value::as_str)
        .unwrap_or("missing");
    let rows: BTreeMap<String, &Value> = json
        .get("rows")
        .and_then(Value::as_array)
        .map(|rows| {
            rows.iter()
                .filter_map(|r| Some((r.get("kernel")?.as_str()?.to_string(), r)))
                .collect()
        })
        .unwrap_or_default();
    let _ = writeln!(
        md,
        "Pallas (jax {jax}, `pl.kernel` on a `plgpu.Mesh`, GPU interpret mode, under `jax.jit`) \
         time / mpmd interpreter time: through `mpmd run --time` (release CLI), and in brackets \
         through Python `mpmd.Interpreter().call`; higher is faster for mpmd. Medians of {rounds} \
         rounds, the variants of a kernel one after the other in each round, after a warm-up call.\n"
    );
    let _ = writeln!(
        md,
        "| kernel | detection off | detection on (`checked`, one schedule; Pallas `detect_races=True`) |"
    );
    let _ = writeln!(md, "|---|---|---|");
    for (stem, label) in KERNELS {
        let Some(row) = rows.get(stem) else {
            let _ = writeln!(md, "| {label} | n/a | n/a |");
            continue;
        };
        let cell = |mode: &str| {
            let pallas = seconds(row, &format!("pallas_{mode}"));
            format!(
                "{} ({})",
                ratio(pallas, seconds(row, &format!("cli_{mode}"))),
                ratio(pallas, seconds(row, &format!("py_{mode}")))
            )
        };
        let _ = writeln!(md, "| {label} | {} | {} |", cell("off"), cell("on"));
    }
    let _ = writeln!(md, "\nThe times (ms):\n");
    let _ = writeln!(
        md,
        "| kernel | Pallas off | Pallas on | `mpmd run` off | `mpmd run` on | `Interpreter().call` off | `Interpreter().call` on |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for (stem, _) in KERNELS {
        let Some(row) = rows.get(stem) else { continue };
        let keys = [
            "pallas_off",
            "pallas_on",
            "cli_off",
            "cli_on",
            "py_off",
            "py_on",
        ];
        let cells: Vec<String> = keys.iter().map(|k| ms(seconds(row, k))).collect();
        let _ = writeln!(md, "| {stem} | {} |", cells.join(" | "));
    }
    let _ = writeln!(md);
    if let Some(missing) = json.get("missing").and_then(Value::as_array) {
        for m in missing.iter().filter_map(Value::as_str) {
            let _ = writeln!(md, "- NOT MEASURED (missing): {m}");
        }
        if !missing.is_empty() {
            let _ = writeln!(md);
        }
    }
}

fn tiny_lines(md: &mut String, json: &Value) {
    let Some(tiny) = json.get("tiny").filter(|t| !t.is_null()) else {
        let _ = writeln!(
            md,
            "- tiny map: NOT MEASURED (the mpmd package did not load)"
        );
        return;
    };
    let us = |k: &str| {
        seconds(tiny, k).map_or_else(|| "n/a".to_string(), |s| format!("{:.1} µs", s * 1e6))
    };
    let _ = writeln!(
        md,
        "- tiny map (256 f32, `y = 2x + 1`), per call: `Interpreter().call` {}, under `jax.jit` \
         through `mpmd.jax.kernel` {}, `jax.jit` of the `jnp` expression {} (for reference)",
        us("call"),
        us("jax_jit"),
        us("jnp_jit")
    );
}

/// The stream-K example's calls on the interpreter (fast mode): 2mnk
/// flops a call over the calls' summed `time: wall`.
fn stream_k(root: &Path, cli: &Path) -> Result<String, String> {
    let file = root.join("examples").join("stream_k_gemm.mpmd");
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut flops = 0f64;
    let mut calls = 0;
    for line in text.lines().filter(|l| l.starts_with("call ")) {
        let dim = |name: &str| -> Option<f64> {
            let at = line.find(&format!("{name} = "))? + name.len() + 3;
            let digits: String = line[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        };
        let (m, n, k) = (dim("m"), dim("n"), dim("k"));
        let (Some(m), Some(n), Some(k)) = (m, n, k) else {
            return Err(format!("cannot read m, n, k from `{line}`"));
        };
        flops += 2.0 * m * n * k;
        calls += 1;
    }
    let mut cmd = Command::new(cli);
    cmd.current_dir(root).arg("run").arg(&file).arg("--time");
    let out = captured(&mut cmd)?;
    let walls: Vec<f64> = out
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("time: wall ")?;
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .collect();
    if walls.len() != calls {
        return Err(format!(
            "expected {calls} `time: wall` lines, got {}",
            walls.len()
        ));
    }
    let total_s: f64 = walls.iter().sum::<f64>() / 1e3;
    Ok(format!(
        "stream-K GEMM example (examples/stream_k_gemm.mpmd, {calls} calls, bf16 inputs, mma_m16n8k16) \
         on the interpreter, fast mode: {:.3} GFLOP/s ({:.1} MFLOP in {:.2} s, `mpmd run --time`)",
        flops / total_s / 1e9,
        flops / 1e6,
        total_s
    ))
}

/// The corpus on the interpreter alone; the case that took longest.
fn heaviest_case(root: &Path, setup: &Setup, harness: &Path) -> Result<String, String> {
    let mut cmd = Command::new(harness);
    setup.apply_env(&mut cmd);
    cmd.current_dir(root).args(["--backends", "interp"]);
    eprintln!("xtask: running {}", crate::describe(&cmd));
    let out = cmd
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", harness.display()))?;
    let progress = String::from_utf8_lossy(&out.stderr);
    let (name, s, cases) = heaviest_of(&progress)
        .ok_or_else(|| format!("no finished case in its output{}", last_lines(&progress)))?;
    Ok(format!(
        "heaviest corpus case on the interpreter: `{name}`, {s:.1} s (the oracle with detection and 2 extra \
         schedules, then the interpreter in fast and checked mode; {cases} cases, `mpmd-conformance --backends interp`)"
    ))
}

/// The slowest case of the harness's progress lines (`[ 12/172] done NAME
/// 1.2 s`, or `FAIL`), its seconds, and how many cases finished.
fn heaviest_of(progress: &str) -> Option<(String, f64, usize)> {
    let mut cases = 0;
    let mut heaviest: Option<(String, f64)> = None;
    for line in progress.lines() {
        let Some(rest) = line.split("] ").nth(1) else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        if words.len() < 4 || !matches!(words[0], "done" | "FAIL") || words[3] != "s" {
            continue;
        }
        let Ok(s) = words[2].parse::<f64>() else {
            continue;
        };
        cases += 1;
        if heaviest.as_ref().is_none_or(|(_, t)| s > *t) {
            heaviest = Some((words[1].to_string(), s));
        }
    }
    heaviest.map(|(name, s)| (name, s, cases))
}

fn fuzz_lines(md: &mut String, root: &Path, setup: &Setup, fuzzer: &Path, options: &ReportOptions) {
    let scratch = std::env::temp_dir().join(format!("mpmd-bench-fuzz-{}", std::process::id()));
    for backend in ["interp", "wgpu", "cuda-host"] {
        // Compile caches of their own, empty: every program is new to the
        // backend, as in a fuzzing run of fresh seeds.
        let cache = scratch.join(format!("cache-{backend}"));
        let found = scratch.join("found");
        let prepared = std::fs::create_dir_all(&cache).and_then(|_| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700))
        });
        if let Err(e) = prepared {
            let _ = writeln!(
                md,
                "- fuzzer on {backend}: NOT MEASURED: {}: {e}",
                cache.display()
            );
            continue;
        }
        let mut cmd = Command::new(fuzzer);
        setup.apply_env(&mut cmd);
        cmd.current_dir(root)
            .env("MPMD_CACHE_DIR", &cache)
            .env("MESA_SHADER_CACHE_DISABLE", "true")
            .args(["--backends", backend, "--no-reduce", "--seed"])
            .arg(FUZZ_SEED.to_string())
            .arg("--iterations")
            .arg(options.fuzz_programs.to_string())
            .arg("--found-dir")
            .arg(&found);
        let line = match captured(&mut cmd) {
            Ok(summary) => fuzz_line(&summary),
            Err(why) => Err(why),
        };
        match line {
            Ok(line) => {
                let _ = writeln!(md, "- fuzzer on {backend} (`mpmd-fuzz --backends {backend} --seed {FUZZ_SEED}`, empty compile caches): {line}");
            }
            Err(why) => {
                let _ = writeln!(md, "- fuzzer on {backend}: NOT MEASURED: {why}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// `N programs in X s (Y programs/s)` and the CPU line of a fuzzer summary.
fn fuzz_line(summary: &str) -> Result<String, String> {
    let first = summary
        .lines()
        .find(|l| l.starts_with("fuzz: "))
        .ok_or_else(|| format!("no summary line{}", last_lines(summary)))?;
    let rate = first
        .trim_start_matches("fuzz: ")
        .split(", ")
        .next()
        .unwrap_or_default()
        .to_string();
    let cpu = summary
        .lines()
        .find_map(|l| l.trim().strip_prefix("CPU time "))
        .map(|c| {
            format!(
                "; CPU time {}",
                c.split(';')
                    .next()
                    .unwrap_or(c)
                    .trim_end_matches(')')
                    .to_string()
                    + ")"
            )
        })
        .unwrap_or_default();
    Ok(format!("{rate}{cpu}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heaviest_case_is_read_from_the_progress_lines() {
        let progress = "[  1/3] done small 0.2 s\n[  2/3] still running: big\n\
                        [  2/3] FAIL big 7.5 s (1 failed so far)\n[  3/3] done mid 1.0 s\n";
        assert_eq!(heaviest_of(progress), Some(("big".to_string(), 7.5, 3)));
        assert_eq!(heaviest_of("error: no corpus\n"), None);
    }

    #[test]
    fn a_fuzz_summary_gives_its_rate_and_cpu_time() {
        let summary = "fuzz: 24 programs in 36.1 s (0.7 programs/s), 0 generator bugs, 0 disagreements\n  \
                       CPU time 11.7 s (488 ms a program; this process and the compilers and programs it ran)\n  \
                       time by stage: generate 0.0 s, check 0.5 s, cuda-host 71.6 s\n";
        assert_eq!(
            fuzz_line(summary).unwrap(),
            "24 programs in 36.1 s (0.7 programs/s); CPU time 11.7 s (488 ms a program)"
        );
        assert!(fuzz_line("error: backend `wgpu`: no adapter\n").is_err());
    }

    #[test]
    fn a_ratio_is_never_made_up() {
        assert_eq!(ratio(Some(3.0), Some(0.5)), "6.0x");
        assert_eq!(ratio(Some(0.0712), Some(3.2081)), "0.02x");
        assert_eq!(ratio(None, Some(0.5)), "n/a");
        assert_eq!(ratio(Some(3.0), None), "n/a");
    }
}
