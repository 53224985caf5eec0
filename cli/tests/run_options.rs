//! `mpmd run` for kernel writers (issue 13): `--compare` with its
//! tolerances, `--call K` and `--time`, through the real binary: exit codes,
//! messages and verdicts exactly.

mod common;
use common::*;
use std::path::{Path, PathBuf};

use mpmd_cli::npy;
use mpmd_core::HostTensor;

#[path = "../../test-support/needs.rs"]
mod needs;

/// An example's path, as an argument.
fn example_arg(name: &str) -> String {
    example(name).display().to_string()
}

/// Asserts exit code 1, nothing on stdout and exactly `message` on stderr.
fn assert_fails(args: &[&str], message: &str) {
    let output = mpmd(args);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{args:?}: {}",
        stderr(&output)
    );
    assert_eq!(stderr(&output), message, "{args:?}");
    assert_eq!(stdout(&output), "", "{args:?}");
}

fn save(dir: &Path, name: &str, tensor: &HostTensor) -> String {
    let path = dir.join(name);
    npy::write(&path, tensor).unwrap();
    path.display().to_string()
}

/// `examples/elementwise.mpmd` computes y[i] = 2i + 1 (x = iota, alpha = 2).
fn elementwise_y() -> Vec<f32> {
    (0..256).map(|i| 2.0 * i as f32 + 1.0).collect()
}

fn f32s(values: &[f32]) -> HostTensor {
    HostTensor::from_f32(vec![values.len() as u32], values)
}

const SUMMARY: &str = "call 0: map `axpb`\n  \
    y: f32[256] first [1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0, ...] min 1.0 max 511.0 sum 65536.0\n";

#[test]
fn an_exact_reference_matches_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let reference = save(dir.path(), "y.npy", &f32s(&elementwise_y()));
    let compare = format!("y={reference}");
    let output = mpmd(&["run", &example_arg("elementwise"), "--compare", &compare]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        format!(
            "{SUMMARY}  compare y with {reference}: ok (256 elements; exact; max error 0 ulp)\n"
        )
    );
}

/// The acceptance case: a reference 1 ulp away from element 17 fails under
/// `--ulp 0` (and by default) and passes under `--ulp 1`.
#[test]
fn one_ulp_fails_ulp_0_and_passes_ulp_1() {
    let dir = tempfile::tempdir().unwrap();
    let mut y = elementwise_y();
    y[17] = f32::from_bits(y[17].to_bits() + 1); // 35.000004 instead of 35
    let reference = save(dir.path(), "y.npy", &f32s(&y));
    let compare = format!("y={reference}");
    let file = example_arg("elementwise");
    let report = format!(
        "error: compare y with {reference}: 1 of 256 elements differ ({{}}; max error 1 ulp)\n  \
         [17] got 35.0 (0x420c0000), expected 35.000004 (0x420c0001), error 1 ulp\n"
    );
    for (flags, tolerance) in [(&["--ulp", "0"][..], "--ulp 0"), (&[][..], "exact")] {
        let mut args = vec!["run", file.as_str(), "--compare", &compare];
        args.extend_from_slice(flags);
        let output = mpmd(&args);
        assert_eq!(output.status.code(), Some(1), "{flags:?}");
        assert_eq!(
            stderr(&output),
            report.replace("{}", tolerance),
            "{flags:?}"
        );
        assert_eq!(
            stdout(&output),
            SUMMARY,
            "the summary is printed all the same"
        );
    }
    let output = mpmd(&["run", &file, "--compare", &compare, "--ulp", "1"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        format!(
            "{SUMMARY}  compare y with {reference}: ok (256 elements; --ulp 1; max error 1 ulp)\n"
        )
    );
}

#[test]
fn rtol_and_atol_are_numpys_allclose() {
    let dir = tempfile::tempdir().unwrap();
    // Every element 0.1 % high: |got - ref| = ref / 1001, just within 1e-3 * |ref|.
    let y: Vec<f32> = elementwise_y().iter().map(|v| v * 1.001).collect();
    let reference = save(dir.path(), "y.npy", &f32s(&y));
    let compare = format!("y={reference}");
    let file = example_arg("elementwise");
    let output = mpmd(&["run", &file, "--compare", &compare, "--rtol", "1e-3"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).ends_with(&format!(
            "  compare y with {reference}: ok (256 elements; --rtol 0.001 --atol 0: \
             |got - expected| <= atol + rtol * |expected|; max error 5.110e-1)\n"
        )),
        "{}",
        stdout(&output)
    );
    // An absolute tolerance alone covers the small elements only.
    let output = mpmd(&["run", &file, "--compare", &compare, "--atol", "0.01"]);
    assert_eq!(output.status.code(), Some(1));
    let report = stderr(&output);
    assert!(
        report.starts_with(&format!(
            "error: compare y with {reference}: 251 of 256 elements differ (--rtol 0 --atol 0.01: \
             |got - expected| <= atol + rtol * |expected|; max error 5.110e-1)\n  \
             [5] got 11.0 (0x41300000), expected 11.011001 (0x41302d0f), error 1.100e-2 > allowed 1.000e-2\n"
        )),
        "{report}"
    );
    assert!(report.ends_with("\n  ... and 243 more\n"), "{report}");
}

/// NaN matches NaN (numpy's `equal_nan=True`), in every mode; a NaN against
/// a number is a mismatch with no distance.
#[test]
fn nan_matches_nan() {
    let dir = tempfile::tempdir().unwrap();
    let x: Vec<f32> = (0..256)
        .map(|i| if i < 2 { f32::NAN } else { i as f32 })
        .collect();
    let input = format!("x={}", save(dir.path(), "x.npy", &f32s(&x)));
    let mut y: Vec<f32> = x.iter().map(|v| v * 2.0 + 1.0).collect();
    let matching = save(dir.path(), "y.npy", &f32s(&y));
    y[1] = 3.0;
    let differing = save(dir.path(), "y1.npy", &f32s(&y));
    let file = example_arg("elementwise");
    for tolerance in [&[][..], &["--ulp", "2"][..], &["--rtol", "1"][..]] {
        let compare = format!("y={matching}");
        let mut args = vec![
            "run",
            file.as_str(),
            "--input",
            &input,
            "--compare",
            &compare,
        ];
        args.extend_from_slice(tolerance);
        let output = mpmd(&args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{tolerance:?}: {}",
            stderr(&output)
        );

        let compare = format!("y={differing}");
        args[5] = &compare;
        let output = mpmd(&args);
        assert_eq!(output.status.code(), Some(1), "{tolerance:?}");
        assert!(
            stderr(&output).ends_with("\n  [1] got NaN (0x7fc00000), expected 3.0 (0x40400000)\n"),
            "{tolerance:?}: {}",
            stderr(&output)
        );
    }
}

/// Integer outputs are compared exactly, whatever tolerance is given.
#[test]
fn integer_outputs_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let mut hist = vec![64u32; 16];
    hist[3] = 65;
    let reference = save(
        dir.path(),
        "hist.npy",
        &HostTensor::from_u32(vec![16], &hist),
    );
    let compare = format!("hist={reference}");
    let output = mpmd(&[
        "run",
        &example_arg("histogram"),
        "--compare",
        &compare,
        "--ulp",
        "100",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        format!(
            "error: compare hist with {reference}: 1 of 16 elements differ (exact (integer output))\n  \
             [3] got 64u, expected 65u, error -1\n"
        )
    );
}

#[test]
fn compare_refuses_what_it_cannot_judge() {
    let dir = tempfile::tempdir().unwrap();
    let file = example_arg("elementwise");
    let file = file.as_str();
    let short = save(dir.path(), "short.npy", &f32s(&[1.0; 128]));
    let ints = save(
        dir.path(),
        "ints.npy",
        &HostTensor::from_i32(vec![256], &[0; 256]),
    );
    let good = save(dir.path(), "y.npy", &f32s(&elementwise_y()));
    assert_fails(
        &["run", file, "--compare", &format!("z={good}")],
        "error: --compare `z`: the calls that run have no output of that name; \
         their outputs: `y` (call 0, map `axpb`)\n",
    );
    assert_fails(
        &["run", file, "--compare", &format!("y={short}")],
        &format!(
            "error: --compare `y`: `{short}` has shape (128,), and output `y` of map `axpb` \
             has shape (256,): reshape the array to exactly that\n"
        ),
    );
    assert_fails(
        &["run", file, "--compare", &format!("y={ints}")],
        &format!(
            "error: --compare `y`: `{ints}` holds <i4 data, and output `y` of map `axpb` is f32: \
             write the array as <f4\n"
        ),
    );
    assert_fails(
        &[
            "run",
            file,
            "--compare",
            &format!("y={good}"),
            "--compare",
            &format!("y={short}"),
        ],
        &format!(
            "error: --compare `y` is given twice (`y={good}` and `y={short}`): give it once\n"
        ),
    );
    assert_fails(
        &["run", file, "--compare", "y=/nonexistent/y.npy"],
        "error: cannot read `/nonexistent/y.npy`: No such file or directory (os error 2)\n",
    );
}

/// Flags clap refuses exit 2 with its usage message.
#[test]
fn tolerance_flags_conflict_or_need_compare() {
    let file = example_arg("elementwise");
    let compare = "y=y.npy";
    let cases: &[(&[&str], &str)] = &[
        (
            &["--compare", compare, "--ulp", "1", "--rtol", "1e-3"],
            "error: the argument '--ulp <N>' cannot be used with '--rtol <R>'\n",
        ),
        (
            &["--compare", compare, "--atol", "1e-3", "--ulp", "1"],
            "error: the argument '--atol <A>' cannot be used with '--ulp <N>'\n",
        ),
        (
            &["--ulp", "1"],
            "error: the following required arguments were not provided:\n  --compare <NAME=PATH>\n",
        ),
        (
            &["--compare", compare, "--rtol", "nan"],
            "error: invalid value 'nan' for '--rtol <R>': `nan` is not a tolerance (a finite number at least 0, such as 1e-5)\n",
        ),
    ];
    for (flags, message) in cases {
        let mut args = vec!["run", file.as_str()];
        args.extend_from_slice(flags);
        let output = mpmd(&args);
        assert_eq!(output.status.code(), Some(2), "{flags:?}");
        assert!(
            stderr(&output).starts_with(message),
            "{flags:?}: {}",
            stderr(&output)
        );
    }
}

/// In a file with several calls, NAME is an output of the calls that run;
/// the file stem `--out` writes (`INDEX_MAP_OUTPUT`) names it too.
#[test]
fn compare_names_outputs_of_several_calls() {
    let dir = tempfile::tempdir().unwrap();
    let y: Vec<f32> = (0..128).map(|i| 10.0 * i as f32 + 1.0).collect();
    let reference = save(dir.path(), "y.npy", &f32s(&y));
    let sent = save(
        dir.path(),
        "sent.npy",
        &HostTensor::from_u32(vec![2], &[1, 2]),
    );
    let file = example_arg("handoff");
    let output = mpmd(&[
        "run",
        &file,
        "--compare",
        &format!("y={reference}"),
        "--compare",
        &format!("0_send_sent={sent}"),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains(&format!(
            "  sent: u32[2] first [1, 2] min 1 max 2 sum 3\n  compare 0_send_sent with {sent}: ok (2 elements; exact)\ncall 1: map `receive`\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "  compare y with {reference}: ok (128 elements; exact; max error 0 ulp)\nresidents after the last call:\n"
        )),
        "{text}"
    );
    assert_fails(
        &[
            "run",
            &file,
            "--compare",
            &format!("y={reference}"),
            "--compare",
            &format!("1_receive_y={reference}"),
        ],
        "error: --compare `1_receive_y` and `y` name the same output (`y` of call 1): give it once\n",
    );
}

/// A map called twice has two outputs of one name: the stem picks one.
#[test]
fn an_output_of_two_calls_is_named_by_its_stem() {
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(example_arg("elementwise")).unwrap();
    let file = dir.path().join("twice.mpmd");
    std::fs::write(
        &file,
        source.replace(
            "call axpb(alpha = 2.0);",
            "call axpb(alpha = 2.0);\ncall axpb(alpha = 3.0);",
        ),
    )
    .unwrap();
    let file = file.display().to_string();
    let times3: Vec<f32> = (0..256).map(|i| 3.0 * i as f32 + 1.0).collect();
    let reference = save(dir.path(), "y3.npy", &f32s(&times3));
    assert_fails(
        &["run", &file, "--compare", &format!("y={reference}")],
        "error: --compare `y`: 2 calls that run have an output `y`: name one by its file stem \
         (`0_axpb_y`, `1_axpb_y`), or run one call with --call K\n",
    );
    let output = mpmd(&["run", &file, "--compare", &format!("1_axpb_y={reference}")]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let output = mpmd(&[
        "run",
        &file,
        "--call",
        "1",
        "--compare",
        &format!("y={reference}"),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).starts_with("call 1: map `axpb`\n  y: f32[256] first [1.0, 4.0, 7.0,"),
        "{}",
        stdout(&output)
    );
}

/// `--call K` runs call K alone (numbered as the summary numbers calls);
/// residents start as before the first call, so a call that waits on
/// credits an earlier call leaves deadlocks unless `--input` gives them.
#[test]
fn call_runs_one_call_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = example_arg("handoff");
    let out0 = dir.path().join("call0");
    let output = mpmd(&["run", &file, "--call", "0", "--out", out0.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("call 0: map `send`\n"), "{text}");
    assert!(!text.contains("call 1"), "{text}");
    // One call ran, so its output file is named after the output alone.
    assert!(out0.join("sent.npy").exists(), "{text}");

    assert_fails(
        &["run", &file, "--call", "2"],
        &format!("error: --call 2: `{file}` has 2 call(s), numbered 0 to 1\n"),
    );
    assert_fails(
        &["run", &file, "--call", "1"],
        "error: call 1 (map `receive`) failed: deadlock: every live block waits\n\
         wait-for graph (no live block can signal):\n  \
         program 0 (receive), block 0 waits on `credits@[0][0]` for 1 (count is 0)\n  \
         program 0 (receive), block 1 waits on `credits@[1][0]` for 1 (count is 0)\n",
    );
    // Call 0's residents, written by --out, start call 1 where call 0 left them.
    let hand = format!("hand={}", out0.join("resident.hand.npy").display());
    let credits = format!("credits={}", out0.join("resident.credits.npy").display());
    let y: Vec<f32> = (0..128).map(|i| 10.0 * i as f32 + 1.0).collect();
    let reference = save(dir.path(), "y.npy", &f32s(&y));
    let output = mpmd(&[
        "run",
        &file,
        "--call",
        "1",
        "--checked",
        "--input",
        &hand,
        "--input",
        &credits,
        "--compare",
        &format!("y={reference}"),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).starts_with("call 1: map `receive` (checked, 3 schedules agree)\n"),
        "{}",
        stdout(&output)
    );
    // Flags name what the selected call has, not what other calls have.
    assert_fails(
        &["run", &file, "--call", "1", "--input", "x=x.npy"],
        "error: --input `x`: no called map has an input of that name, and the module declares no resident of that name\n",
    );
}

/// The `--time` line: wall time always; kernel time where the backend
/// measures one (CUDA), else it says it was not measured.
fn assert_time_lines(text: &str, calls: usize, kernel: &str) {
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("  time: ")).collect();
    assert_eq!(lines.len(), calls, "{text}");
    for line in lines {
        let rest = line.strip_prefix("  time: wall ").expect(line);
        let (ms, tail) = rest.split_once(" ms").expect(line);
        let ms: f64 = ms.parse().expect(line);
        assert!(ms > 0.0, "{line}");
        assert!(
            tail == kernel || (kernel.is_empty() && tail.starts_with(", kernel ")),
            "{line}"
        );
    }
}

#[test]
fn time_prints_wall_time_per_call_and_says_when_kernel_time_is_not_measured() {
    let output = mpmd(&["run", &example_arg("handoff"), "--time"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert_time_lines(&text, 2, "; kernel time: not measured on interp");
    assert!(
        text.starts_with("call 0: map `send`\n  time: wall "),
        "the time follows its call's line: {text}"
    );
    let output = mpmd(&["run", &example_arg("elementwise")]);
    assert!(!stdout(&output).contains("time:"), "only with --time");
}

#[test]
fn time_on_wgpu_says_kernel_time_is_not_measured() {
    let output = mpmd(&[
        "run",
        &example_arg("elementwise"),
        "--time",
        "--backend",
        "wgpu",
    ]);
    if stderr(&output).contains("error: backend `wgpu` is not available") {
        panic!(
            "{}",
            needs::setup_message("the wgpu backend", &stderr(&output))
        );
    }
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_time_lines(&stdout(&output), 1, "; kernel time: not measured on wgpu");
}

#[test]
#[ignore = "needs a CUDA GPU and driver (scripts/gpu-check.sh runs it)"]
fn time_on_cuda_prints_kernel_time() {
    let output = mpmd(&[
        "run",
        &example_arg("elementwise"),
        "--time",
        "--backend",
        "cuda",
    ]);
    let text = needs::gpu(if output.status.success() {
        Ok(stdout(&output))
    } else {
        Err(stderr(&output))
    });
    assert_time_lines(&text, 1, "");
}

fn races_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/races")
}

/// Every program of `examples/races` (docs/memory-model.md), with the
/// verdict `mpmd run --checked` gives it on the interpreter (a race: the
/// element, what each access did and its line in `{file}`).
const RACES: &[(&str, &str)] = &[
    (
        "smem_stencil_racy",
        concat!(
         "error: call 0 (map `stencil`) failed: data race on `tile[1]`: write by program 0 (stencil), block 0, thread 1 and read by program 0 (stencil), block 0, thread 0\n",
         "note: the write\n",
         "  --> {file}:20:3\n",
         "   |\n",
         "20 |   tile[t] = x[i];\n",
         "   |   ^^^^^^^^^^^^^^^\n",
         "note: the read\n",
         "  --> {file}:21:3\n",
         "   |\n",
         "21 |   y[i] = tile[t] + tile[(t + 1u) % axis_size(t)];\n",
         "   |   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        ),
    ),
    (
        "smem_stencil_fixed",
        "call 0: map `stencil` (checked, 3 schedules agree)\n",
    ),
    (
        "atomic_flag_racy",
        concat!(
         "error: call 0 (map `publish`) failed: data race on `data[0]`: write by program 0 (produce), block 0, thread 0 and read by program 1 (consume), block 0, thread 0\n",
         "note: the write\n",
         "  --> {file}:26:3\n",
         "   |\n",
         "26 |   data[t] = x[t] * 2.0;\n",
         "   |   ^^^^^^^^^^^^^^^^^^^^^\n",
         "note: the read\n",
         "  --> {file}:43:5\n",
         "   |\n",
         "43 |     y[u] = data[u] + 1.0;\n",
         "   |     ^^^^^^^^^^^^^^^^^^^^^\n"
        ),
    ),
    (
        "atomic_flag_fixed",
        "call 0: map `publish` (checked, 3 schedules agree)\n",
    ),
    (
        "reused_buffer_racy",
        concat!(
         "error: call 0 (map `rounds`) failed: data race on `slot[0]`: write by program 0 (produce), block 0, thread 0 and read by program 1 (consume), block 0, thread 0\n",
         "note: the write\n",
         "  --> {file}:28:5\n",
         "   |\n",
         "28 |     slot[t] = x[r * 64u + t];\n",
         "   |     ^^^^^^^^^^^^^^^^^^^^^^^^^\n",
         "note: the read\n",
         "  --> {file}:37:5\n",
         "   |\n",
         "37 |     y[r * 64u + u] = slot[u] * 2.0;\n",
         "   |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        ),
    ),
    (
        "reused_buffer_fixed",
        "call 0: map `rounds` (checked, 3 schedules agree)\n",
    ),
    (
        "reused_buffer_per_round",
        "call 0: map `rounds` (checked, 3 schedules agree)\n",
    ),
];

/// The outputs the fixed race examples' comments promise (x = iota).
fn fixed_race_output(name: &str) -> Vec<f32> {
    match name {
        // y[i] = x[i] + x[i + 1] within each block of 64, wrapping.
        "smem_stencil_fixed" => (0..128u32)
            .map(|i| (i + (i / 64) * 64 + (i % 64 + 1) % 64) as f32)
            .collect(),
        "atomic_flag_fixed" => (0..64).map(|i| 2.0 * i as f32 + 1.0).collect(),
        "reused_buffer_fixed" | "reused_buffer_per_round" => {
            (0..256).map(|i| 2.0 * i as f32).collect()
        }
        other => panic!("`{other}` is not a fixed race example"),
    }
}

#[test]
fn every_race_example_is_listed() {
    let mut on_disk: Vec<String> = std::fs::read_dir(races_dir())
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            (path.extension()? == "mpmd").then(|| path.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = RACES.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

/// Each racy program is reported as a data race under `--checked`, in every
/// seed tried; each fixed one passes with the exact values its comment gives.
#[test]
fn racy_examples_race_and_fixed_ones_pass() {
    let dir = tempfile::tempdir().unwrap();
    for (name, verdict) in RACES {
        let file = races_dir().join(format!("{name}.mpmd"));
        let out = dir.path().join(name);
        for seed in ["0", "1", "2"] {
            let output = mpmd(&[
                "run",
                file.to_str().unwrap(),
                "--checked",
                "--seed",
                seed,
                "--out",
                out.to_str().unwrap(),
            ]);
            if name.ends_with("_racy") {
                assert_eq!(output.status.code(), Some(1), "{name}");
                assert_eq!(
                    stderr(&output),
                    verdict.replace("{file}", &file.display().to_string()),
                    "{name} seed {seed}"
                );
            } else {
                assert_eq!(output.status.code(), Some(0), "{name}: {}", stderr(&output));
                assert!(
                    stdout(&output).starts_with(verdict),
                    "{name}: {}",
                    stdout(&output)
                );
            }
        }
    }
    for (name, _) in RACES.iter().filter(|(n, _)| !n.ends_with("_racy")) {
        let y = npy::read(&dir.path().join(name).join("y.npy")).unwrap();
        assert_eq!(y.to_f32(), fixed_race_output(name), "{name}");
    }
}

/// The fixed programs run on the WGSL backend (lavapipe here) with the same
/// outputs, verified; the one whose fix is a cycle is refused there, and the
/// message names the flag that declares co-residency.
#[test]
fn fixed_race_examples_run_on_wgpu() {
    let dir = tempfile::tempdir().unwrap();
    for (name, _) in RACES.iter().filter(|(n, _)| !n.ends_with("_racy")) {
        let file = races_dir().join(format!("{name}.mpmd"));
        let out = dir.path().join(name);
        let output = mpmd(&[
            "run",
            file.to_str().unwrap(),
            "--backend",
            "wgpu",
            "--out",
            out.to_str().unwrap(),
        ]);
        if stderr(&output).contains("error: backend `wgpu` is not available") {
            panic!(
                "{}",
                needs::setup_message("the wgpu backend", &stderr(&output))
            );
        }
        // A cycle: it runs fused, verified, where lavapipe's residency is
        // established for its two workgroups, and is refused otherwise.
        if *name == "reused_buffer_fixed" && output.status.code() == Some(1) {
            assert!(
                stderr(&output).contains(
                    "error: call 0 (map `rounds`) failed: refused before launch: the programs wait on each other in a cycle"
                ) && stderr(&output).contains("--co-resident"),
                "{}",
                stderr(&output)
            );
            continue;
        }
        assert_eq!(output.status.code(), Some(0), "{name}: {}", stderr(&output));
        assert!(!stdout(&output).contains("unverified"), "{name}");
        let y = npy::read(&out.join("y.npy")).unwrap();
        assert_eq!(y.to_f32(), fixed_race_output(name), "{name}");
    }
}

/// docs/memory-model.md shows each race example as its file is, less the
/// header comment, so the page and the programs the tests run cannot drift.
#[test]
fn memory_model_page_shows_the_race_examples() {
    let page_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/memory-model.md");
    let page = std::fs::read_to_string(page_path).unwrap();
    for (name, verdict) in RACES {
        if *name == "reused_buffer_per_round" {
            continue; // named on the page, not shown
        }
        let source = std::fs::read_to_string(races_dir().join(format!("{name}.mpmd"))).unwrap();
        let body = source
            .lines()
            .skip_while(|l| l.starts_with("//") || l.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        let shown = format!("`examples/races/{name}.mpmd`:\n\n```mpmd\n{body}\n```\n");
        assert!(
            page.contains(&shown),
            "the page does not show {name} as it is"
        );
        let path = format!("examples/races/{name}.mpmd");
        let shown_verdict = if name.ends_with("_racy") {
            verdict.replace("{file}", &path)
        } else {
            verdict.lines().next().unwrap().to_string() + "\n"
        };
        let run = format!("$ mpmd run {path} --checked\n{shown_verdict}");
        assert!(
            page.contains(&run),
            "the page does not show {name}'s verdict"
        );
    }
}

/// A 16-bit output is judged in its own ulps: one bf16 step fails `--ulp 0`
/// and passes `--ulp 1`, and the reference is read as `np.save` writes
/// an `ml_dtypes.bfloat16` array (`<V2`).
#[test]
fn bf16_outputs_count_bf16_ulps() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let file = example_arg("bf16_rowsum");
    let output = mpmd(&["run", &file, "--out", out.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let sum16 = npy::read(&out.join("sum16.npy")).unwrap();
    let mut bits = sum16.to_bits();
    bits[2] += 1;
    let nudged = HostTensor::new(sum16.elem(), sum16.shape().to_vec(), bits).unwrap();
    let reference = save(dir.path(), "sum16.npy", &nudged);
    let compare = format!("sum16={reference}");
    let output = mpmd(&["run", &file, "--compare", &compare, "--ulp", "0"]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output),
        format!(
            "error: compare sum16 with {reference}: 1 of 16 elements differ (--ulp 0; max error 1 ulp)\n  \
             [2] got 163840bf16 (0x4820), expected 164864bf16 (0x4821), error 1 ulp\n"
        )
    );
    let output = mpmd(&["run", &file, "--compare", &compare, "--ulp", "1"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

/// Issue 27: without `XDG_RUNTIME_DIR` (a headless machine), Mesa's
/// device-select layer made libwayland print `error: XDG_RUNTIME_DIR is
/// invalid or not set in the environment.` twice on every wgpu run. The
/// CLI gives the process a private runtime directory where the variable is
/// unset (`mpmd_wgpu::quiet_display_lookup`): stderr stays empty, and the
/// directory is gone when the CLI exits.
#[test]
fn a_wgpu_run_without_xdg_runtime_dir_prints_nothing_to_stderr() {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_mpmd"))
        .args(["run", &example_arg("elementwise"), "--backend", "wgpu"])
        .env_remove("XDG_RUNTIME_DIR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the mpmd binary runs");
    let pid = child.id();
    let output = child.wait_with_output().expect("the mpmd binary runs");
    if stderr(&output).contains("error: backend `wgpu` is not available") {
        panic!(
            "{}",
            needs::setup_message("the wgpu backend", &stderr(&output))
        );
    }
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stderr(&output), "", "stderr of a successful wgpu run");
    assert!(stdout(&output).contains("y"), "{}", stdout(&output));
    let prefix = format!("mpmd-runtime-{pid}-");
    let left: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&prefix))
        .collect();
    assert!(
        left.is_empty(),
        "the runtime directory outlived the run: {left:?}"
    );
}
