//! Runs `mpmd check`, and `mpmd run` on the interpreter and on `cuda-host`,
//! on every example and checks every output value exactly (the examples use
//! `iota` inputs, so the expected values are closed forms of the index).

mod common;
use common::*;

#[path = "../../test-support/gemm_config.rs"]
mod gemm_config;
#[path = "../../test-support/needs.rs"]
mod needs;
use std::path::Path;

use mpmd_cli::npy;
use mpmd_core::ir::ScalarType;
use mpmd_core::numerics;

/// Checks the output files an example's run wrote into a folder.
type OutputCheck = fn(&Path);

/// Every example with the checker of its outputs (files written by `--out`).
const EXAMPLES: &[(&str, OutputCheck)] = &[
    ("elementwise", check_elementwise),
    ("block_reduce", check_block_reduce),
    ("histogram", check_histogram),
    ("split_grids", check_split_grids),
    ("producer_consumer", check_producer_consumer),
    ("pipeline", check_pipeline),
    ("handshake", check_handshake),
    ("handoff", check_handoff),
    ("accumulate", check_accumulate),
    ("chained_scan", check_chained_scan),
    ("f16_elementwise", check_f16_elementwise),
    ("bf16_rowsum", check_bf16_rowsum),
    ("stream_k_gemm", check_stream_k_gemm),
];

/// `--input` arguments a run of example `name` gets instead of its
/// generators, their files written into `dir`: the GEMM's inputs are
/// multiples of 1/4 in [-2, 2], so every sum of products is exact in f32 in
/// any order and its outputs are known exactly.
fn given_inputs(name: &str, dir: &Path) -> Vec<String> {
    if name != "stream_k_gemm" {
        return vec![];
    }
    let module = gemm_module();
    let map = &module.maps[0];
    map.inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let len = input
                .ty
                .as_ref_type()
                .unwrap()
                .shape
                .iter()
                .product::<u32>();
            let values = gemm_config::quarters(len as usize, i as u64);
            let path = dir.join(format!("{}.npy", input.name));
            npy::write(&path, &gemm_config::bf16_tensor(&values, len)).unwrap();
            format!("{}={}", input.name, path.display())
        })
        .collect()
}

fn gemm_module() -> mpmd_core::ir::Module {
    let text = std::fs::read_to_string(example("stream_k_gemm")).unwrap();
    mpmd_core::text::parse_file(&text).unwrap().module
}

/// Every call's C is A B exactly (see [`given_inputs`]).
fn check_stream_k_gemm(dir: &Path) {
    let widen = |file: &str| npy::read(&dir.join(file)).unwrap().to_f32();
    let (a, b) = (widen("a.npy"), widen("b.npy"));
    let calls = gemm_module().effective_calls();
    assert_eq!(calls.len(), 6);
    for (index, call) in calls.iter().enumerate() {
        let scalar = |name: &str| match call.scalars.iter().find(|(n, _)| n == name) {
            Some((_, mpmd_core::ir::Literal::U32(v))) => *v as usize,
            other => panic!("{name}: {other:?}"),
        };
        let (m, n, k) = (scalar("m"), scalar("n"), scalar("k"));
        let (_, c) = read_f32(dir, &format!("{index}_{}_c.npy", call.map));
        for r in 0..m {
            for j in 0..n {
                let exact: f32 = (0..k).map(|kk| a[r * k + kk] * b[kk * n + j]).sum();
                assert_eq!(
                    c[r * n + j],
                    exact,
                    "call {index}: C[{r}, {j}] of {m}x{n}x{k}"
                );
            }
        }
    }
}

fn read_f32(dir: &Path, file: &str) -> (Vec<u32>, Vec<f32>) {
    let tensor = npy::read(&dir.join(file)).expect("output file");
    assert_eq!(tensor.elem(), ScalarType::F32, "{file}");
    (tensor.shape().to_vec(), tensor.to_f32())
}

fn read_u32(dir: &Path, file: &str) -> (Vec<u32>, Vec<u32>) {
    let tensor = npy::read(&dir.join(file)).expect("output file");
    assert_eq!(tensor.elem(), ScalarType::U32, "{file}");
    (tensor.shape().to_vec(), tensor.to_bits())
}

fn expect_f32(dir: &Path, file: &str, len: usize, value: impl Fn(usize) -> f32) {
    let (shape, values) = read_f32(dir, file);
    assert_eq!(shape, vec![len as u32], "{file}");
    let expected: Vec<f32> = (0..len).map(value).collect();
    assert_eq!(values, expected, "{file}");
}

fn check_elementwise(dir: &Path) {
    expect_f32(dir, "y.npy", 256, |i| 2.0 * i as f32 + 1.0);
}

/// A 16-bit output's bits, checked against `value(i)`'s bits.
fn expect_16bit(
    dir: &Path,
    file: &str,
    elem: ScalarType,
    len: usize,
    value: impl Fn(usize) -> u16,
) {
    let tensor = npy::read(&dir.join(file)).expect("output file");
    assert_eq!(tensor.elem(), elem, "{file}");
    let expected: Vec<u32> = (0..len).map(|i| u32::from(value(i))).collect();
    assert_eq!(tensor.to_bits(), expected, "{file}");
}

fn check_f16_elementwise(dir: &Path) {
    let f16 = numerics::f16_from_f32;
    let product = |i: usize| numerics::f16_to_f32(f16(i as f32 * 1.5));
    let y = |i: usize| f16(product(i) + 1.0);
    let y32 = |i: usize| f16(i as f32 * 1.5 + 1.0);
    expect_16bit(dir, "y.npy", ScalarType::F16, 1024, y);
    expect_16bit(dir, "y32.npy", ScalarType::F16, 1024, y32);
    assert_eq!(
        (numerics::f16_to_f32(y(685)), numerics::f16_to_f32(y32(685))),
        (1029.0, 1028.0),
        "rounding twice and once differ"
    );
}

fn check_bf16_rowsum(dir: &Path) {
    let element = |i: usize| {
        numerics::bf16_to_f32(numerics::from_integer(ScalarType::BF16, i as i64).unwrap())
    };
    let sums: Vec<f32> = (0..16)
        .map(|r| (0..256).map(|c| element(r * 256 + c)).sum())
        .collect();
    assert_eq!(read_f32(dir, "sum.npy"), (vec![16], sums.clone()));
    expect_16bit(dir, "sum16.npy", ScalarType::BF16, 16, |r| {
        numerics::bf16_from_f32(sums[r])
    });
}

fn check_block_reduce(dir: &Path) {
    expect_f32(dir, "sums.npy", 4, |b| (4096 * b + 2016) as f32);
}

fn check_histogram(dir: &Path) {
    assert_eq!(read_u32(dir, "hist.npy"), (vec![16], vec![64; 16]));
}

fn check_split_grids(dir: &Path) {
    expect_f32(dir, "y.npy", 512, |i| {
        if i < 256 {
            2.0 * i as f32
        } else {
            i as f32 + 100.0
        }
    });
}

fn check_producer_consumer(dir: &Path) {
    expect_f32(dir, "y.npy", 256, |i| 3.0 * i as f32 + 1.0);
}

fn check_pipeline(dir: &Path) {
    expect_f32(dir, "y.npy", 128, |i| ((2 * i + 1) * (2 * i + 1)) as f32);
}

fn check_handshake(dir: &Path) {
    expect_f32(dir, "y.npy", 64, |i| 2.0 * i as f32 + 2.5);
}

fn check_handoff(dir: &Path) {
    assert_eq!(read_u32(dir, "0_send_sent.npy"), (vec![2], vec![1, 2]));
    expect_f32(dir, "1_receive_y.npy", 128, |i| 10.0 * i as f32 + 1.0);
}

fn read_i32(dir: &Path, file: &str) -> (Vec<u32>, Vec<i32>) {
    let tensor = npy::read(&dir.join(file)).expect("output file");
    assert_eq!(tensor.elem(), ScalarType::I32, "{file}");
    (tensor.shape().to_vec(), tensor.to_i32())
}

fn check_accumulate(dir: &Path) {
    let expected: Vec<i32> = (0..128).map(|i| i - 15).collect();
    assert_eq!(read_i32(dir, "acc_out.npy"), (vec![128], expected));
    assert_eq!(read_u32(dir, "negatives.npy"), (vec![1], vec![15]));
}

fn check_chained_scan(dir: &Path) {
    assert_eq!(
        read_i32(dir, "prefix.npy"),
        (vec![4], vec![496, 2016, 4560, 8128])
    );
}

#[test]
fn every_example_file_is_listed() {
    let mut on_disk: Vec<String> = std::fs::read_dir(examples_dir())
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            (path.extension()? == "mpmd").then(|| path.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = EXAMPLES.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
    assert!(listed.len() >= 8);
}

#[test]
fn every_example_checks() {
    let files: Vec<String> = EXAMPLES
        .iter()
        .map(|(n, _)| example(n).display().to_string())
        .collect();
    let mut args = vec!["check"];
    args.extend(files.iter().map(String::as_str));
    let output = mpmd(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    let expected: String = files.iter().map(|f| format!("{f}: ok\n")).collect();
    assert_eq!(stdout(&output), expected);
}

#[test]
fn every_example_runs_on_the_interpreter_with_exact_outputs() {
    every_example_runs_with_exact_outputs("interp");
}

/// The CUDA C of every example, run on CPU threads, gives the interpreter's
/// exact outputs, in fast and checked mode.
#[test]
fn every_example_runs_on_cuda_host_with_exact_outputs() {
    every_example_runs_with_exact_outputs("cuda-host");
}

/// Fails the test when the backend could not start (the host C++ compiler
/// and lavapipe are part of the README's set-up: test-support/needs.rs).
fn require_backend(output: &std::process::Output, backend: &str) {
    let message = stderr(output);
    if message.starts_with(&format!("error: backend `{backend}` is not available")) {
        panic!(
            "{}",
            needs::setup_message(&format!("the {backend} backend"), &message)
        );
    }
}

fn every_example_runs_with_exact_outputs(backend: &str) {
    for (name, check) in EXAMPLES {
        for checked in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let file = example(name);
            let mut args = vec![
                "run",
                file.to_str().unwrap(),
                "--backend",
                backend,
                "--seed",
                "7",
                "--out",
                dir.path().to_str().unwrap(),
            ];
            if checked {
                args.push("--checked");
            }
            let inputs = given_inputs(name, dir.path());
            for input in &inputs {
                args.extend(["--input", input.as_str()]);
            }
            let output = mpmd(&args);
            require_backend(&output, backend);
            assert!(
                output.status.success(),
                "{name} on {backend} (checked: {checked}): {}",
                stderr(&output)
            );
            check(dir.path());
        }
    }
}

#[test]
fn run_prints_a_summary_per_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let output = mpmd(&["run", example("histogram").to_str().unwrap(), "--out", out]);
    assert!(output.status.success(), "{}", stderr(&output));
    let path = dir.path().join("hist.npy");
    assert_eq!(
        stdout(&output),
        format!(
            "call 0: map `histogram`\n  hist: u32[16] first [64, 64, 64, 64, 64, 64, 64, 64, ...] min 64 max 64 sum 1024 -> {}\n",
            path.display()
        )
    );
}

#[test]
fn run_takes_inputs_from_npy_files_and_scalars_from_flags() {
    let dir = tempfile::tempdir().unwrap();
    let x: Vec<f32> = (0..256).map(|i| (i % 7) as f32 - 3.0).collect();
    let x_path = dir.path().join("x.npy");
    npy::write(&x_path, &mpmd_core::HostTensor::from_f32(vec![256], &x)).unwrap();
    let out = dir.path().join("out");
    let output = mpmd(&[
        "run",
        example("elementwise").to_str().unwrap(),
        "--input",
        &format!("x={}", x_path.display()),
        "--scalar",
        "alpha=-0.5",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    expect_f32(&out, "y.npy", 256, |i| x[i] * -0.5 + 1.0);
}

/// `--backend cuda-host` runs any file as the other backends do, one
/// without a `case` section too: inputs from `.npy` files, scalars from
/// flags, outputs written, `--time` printed (the kernel is not timed apart
/// from the call on the CPU).
#[test]
fn run_on_cuda_host_takes_inputs_writes_outputs_and_times_calls() {
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(example("elementwise")).unwrap();
    let without_case = &source[..source.find("case {").unwrap()];
    let file = dir.path().join("no_case.mpmd");
    std::fs::write(&file, without_case).unwrap();
    let x: Vec<f32> = (0..256).map(|i| (i % 7) as f32 - 3.0).collect();
    let x_path = dir.path().join("x.npy");
    npy::write(&x_path, &mpmd_core::HostTensor::from_f32(vec![256], &x)).unwrap();
    let out = dir.path().join("out");
    let output = mpmd(&[
        "run",
        file.to_str().unwrap(),
        "--backend",
        "cuda-host",
        "--input",
        &format!("x={}", x_path.display()),
        "--scalar",
        "alpha=-0.5",
        "--out",
        out.to_str().unwrap(),
        "--time",
    ]);
    require_backend(&output, "cuda-host");
    assert!(output.status.success(), "{}", stderr(&output));
    expect_f32(&out, "y.npy", 256, |i| x[i] * -0.5 + 1.0);
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], "call 0: map `axpb`");
    let wall = lines[1]
        .strip_prefix("  time: wall ")
        .and_then(|rest| rest.strip_suffix(" ms; kernel time: not measured on cuda-host"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(wall.parse::<f64>().is_ok_and(|ms| ms > 0.0), "{text}");
    assert_eq!(
        lines[2],
        format!(
            "  y: f32[256] first [2.5, 2.0, 1.5, 1.0, 0.5, 0.0, -0.5, 2.5, ...] min -0.5 max 2.5 sum 259.0 -> {}",
            out.join("y.npy").display()
        )
    );
}

/// `--timeout` bounds the emulated program on cuda-host (in whole seconds):
/// a loop of four trillion iterations is stopped after one (four billion
/// alone finish in about a second on an idle machine, racing the limit).
#[test]
fn run_on_cuda_host_stops_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("spin.mpmd");
    std::fs::write(
        &file,
        "mesh m {\n  grid [b = 1];\n  threads t = 1;\n}\n\n\
         kernel spin(y: gmem<u32[1]>) {\n  for r: u32 in 0u..1000u {\n    var n: u32 = 0u;\n    \
         while n < 4000000000u max 4000000000u {\n      n += 1u;\n      y[0u] = n + r;\n    }\n  }\n}\n\n\
         map spin {\n  programs [m: spin];\n  outputs [y: gmem<u32[1]>];\n}\n",
    )
    .unwrap();
    let output = mpmd(&[
        "run",
        file.to_str().unwrap(),
        "--backend",
        "cuda-host",
        "--timeout",
        "0.5",
    ]);
    require_backend(&output, "cuda-host");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        "error: call 0 (map `spin`) failed: backend error: cuda-host: the emulated kernel of map `spin` \
         (Fast mode) ran past its time limit of 1 s and was stopped; raise it with --timeout SECONDS\n"
    );
}

/// Without a host C++ compiler, `--backend cuda-host` says in one line
/// what is missing and how to get it.
#[test]
fn run_on_cuda_host_without_a_compiler_says_why_in_one_line() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_mpmd"))
        .args(["run", example("elementwise").to_str().unwrap()])
        .args(["--backend", "cuda-host"])
        .env("MPMD_HOST_CXX", "/nonexistent/c++")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        "error: backend `cuda-host` is not available: no host C++ compiler for cuda-host: \
         `/nonexistent/c++ --version` failed (No such file or directory (os error 2)); \
         install g++ (`apt-get install g++`) or set MPMD_HOST_CXX\n"
    );
}

#[test]
fn generated_inputs_depend_only_on_the_seed() {
    // Without a case generator the default is uniform in [-1, 1).
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(example("elementwise")).unwrap();
    let file = dir.path().join("random.mpmd");
    std::fs::write(&file, source.replace("generate x = iota;", "")).unwrap();
    let run = |seed: &str, out: &str| {
        let out = dir.path().join(out);
        let output = mpmd(&[
            "run",
            file.to_str().unwrap(),
            "--seed",
            seed,
            "--scalar",
            "alpha=1.0",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        read_f32(&out, "y.npy").1
    };
    let first = run("5", "a");
    assert_eq!(first, run("5", "b"));
    assert_ne!(first, run("6", "c"));
    assert!(first.iter().all(|y| (0.0..2.0).contains(y)));
}

#[test]
fn run_errors_are_one_line_and_exit_1() {
    let file = example("elementwise");
    let file = file.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", file, "--scalar", "beta=1.0"],
            "error: --scalar `beta`: no called map has a scalar of that name\n",
        ),
        (
            &["run", file, "--scalar", "alpha=abc"],
            "error: --scalar `alpha=abc`: `abc` is not a `f32` value (`f32` takes a number, `inf` or `nan`)\n",
        ),
        (
            &["run", file, "--input", "x"],
            "error: --input `x` is not NAME=VALUE\n",
        ),
    ];
    for (args, message) in cases {
        let output = mpmd(args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr(&output), *message, "{args:?}");
    }
}

/// `--backend cuda`: without an NVIDIA driver (this machine, CI) the run
/// fails with one line that says why; with one (a GPU machine, through
/// `scripts/gpu-check.sh`) it runs and its outputs are checked exactly.
#[test]
fn run_on_cuda_runs_or_says_in_one_line_why_not() {
    let file = example("elementwise");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let output = mpmd(&[
        "run",
        file.to_str().unwrap(),
        "--backend",
        "cuda",
        "--out",
        out,
    ]);
    if std::path::Path::new("/dev/nvidiactl").exists() {
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        check_elementwise(dir.path());
    } else {
        assert_eq!(output.status.code(), Some(1));
        assert_eq!(
            stderr(&output),
            "error: backend `cuda` is not available: no CUDA driver found (libcuda.so.1): \
             this machine has no NVIDIA driver; run on a machine with an NVIDIA GPU and its driver\n"
        );
    }
}

#[test]
fn lower_to_cuda_prints_one_fused_kernel() {
    let file = example("pipeline");
    let output = mpmd(&["lower", "--target", "cuda", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let source = String::from_utf8(output.stdout).unwrap();
    assert_eq!(source.matches("__global__").count(), 1, "{source}");
}

#[test]
fn lower_prints_the_plan_in_topological_order() {
    let output = mpmd(&[
        "lower",
        "--target",
        "plan",
        example("pipeline").to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with("plan for map `pipeline`: 3 program(s)\n"),
        "{text}"
    );
    assert!(text.contains(
        "  unit 0: program 1 `scale` on mesh `m1`: 2 block(s) x 64 thread(s), smem 0 bytes\n"
    ));
    assert!(text.contains("  edges: unit 0 -> unit 1 via `s12`, unit 1 -> unit 2 via `s23`\n"));
    assert!(text.contains("  cycle: no\n"));

    let handshake = stdout(&mpmd(&["lower", example("handshake").to_str().unwrap()]));
    assert!(
        handshake.contains("  cycle: yes\n  needs co-residency: yes\n"),
        "{handshake}"
    );

    let handoff = stdout(&mpmd(&[
        "lower",
        example("handoff").to_str().unwrap(),
        "--map",
        "send",
    ]));
    assert!(handoff.contains("external meshes: ext\n"), "{handoff}");
    assert!(!handoff.contains("map `receive`"));
}

#[test]
fn lower_to_wgsl_prints_one_entry_point_per_program() {
    let file = example("pipeline");
    let output = mpmd(&["lower", "--target", "wgsl", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let source = String::from_utf8(output.stdout).unwrap();
    // One entry point per program, and one per semaphore dispatch between them.
    for entry in ["unit0_scale", "unit1_shift", "unit2_square"] {
        assert_eq!(
            source.matches(&format!("fn {entry}(")).count(),
            1,
            "{source}"
        );
    }
    assert!(
        source.contains(
            "// unit0_scale, mpmd_sems0, mpmd_sems1, unit1_shift, mpmd_sems2, mpmd_sems3, unit2_square.\n"
        ),
        "{source}"
    );
    assert_eq!(source.matches("@compute").count(), 7, "{source}");
}

#[test]
fn check_reports_syntax_errors_with_line_and_caret() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.mpmd");
    std::fs::write(&file, "mesh m {\n  grid [b = 4]\n  threads t = 64;\n}\n").unwrap();
    let output = mpmd(&["check", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        format!(
            "error: expected `;` after the `grid` axes, found keyword `threads`\n \
             --> {}:2:15\n  |\n2 |   grid [b = 4]\n  |               ^\n\
             error: 1 of 1 file(s) rejected\n",
            file.display()
        )
    );
}

#[test]
fn check_reports_validation_errors_and_keeps_going() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.mpmd");
    let source = std::fs::read_to_string(example("elementwise")).unwrap();
    std::fs::write(
        &bad,
        source.replace("programs [m: axpb]", "programs [nowhere: axpb]"),
    )
    .unwrap();
    let good = example("histogram");
    let output = mpmd(&["check", bad.to_str().unwrap(), good.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stdout(&output), format!("{}: ok\n", good.display()));
    assert_eq!(
        stderr(&output),
        format!(
            "error[E0002]: program 0 of map `axpb` runs on `nowhere`, which is not a mesh of the module\n  \
             --> {file}:18:13\n   |\n18 |   programs [nowhere: axpb];\n   |             ^^^^^^^^^^^^^\n   \
             = rule: a program, operand owner or resident owner names a mesh declared in the module\n   \
             = help: declare `mesh nowhere {{ ... }}` or name an existing mesh\n\
             error: `{file}` has 1 error(s)\n\
             error: 1 of 2 file(s) rejected\n",
            file = bad.display()
        )
    );
}
