//! Bad input to `mpmd run` and `mpmd lower`, as users and attackers give it
//! (issue 14, `../shared/defects/`): every case ends with a clear message
//! and exit code 1, or with the right result. The reproducers are written
//! here in full so that the tests need nothing outside the repository.

mod common;
use common::*;
use std::path::Path;
use std::process::Output;

use mpmd_cli::npy;

#[path = "../../test-support/needs.rs"]
mod needs;
use mpmd_core::ir::ScalarType;
use mpmd_core::HostTensor;

/// Asserts exit code 1 and exactly `message` on stderr.
fn assert_fails(args: &[&str], message: &str) {
    let output = mpmd(args);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{args:?}: {}",
        stderr(&output)
    );
    assert_eq!(stderr(&output), message, "{args:?}");
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// One map `k` on 8 threads: `y = f32(x)` for an `x` of type `elem`, with
/// `case_line` in the case.
fn one_input(elem: &str, len: u32, case_line: &str) -> String {
    format!(
        "mesh m {{\n  grid [b = 1];\n  threads t = {len};\n}}\n\n\
         kernel k(x: gmem<{elem}[{len}]>, y: gmem<f32[{len}]>) {{\n  y[axis_index(t)] = f32(x[axis_index(t)]);\n}}\n\n\
         map k {{\n  programs [m: k];\n  inputs [x: gmem<{elem}[{len}]>];\n  outputs [y: gmem<f32[{len}]>];\n}}\n\n\
         call k();\n\ncase {{\n  {case_line}\n}}\n"
    )
}

/// d05a/b/c (spun forever), d06 (printed `I32(5)`), d24a (`nan` became 0).
/// `check` refuses them (E0074, generation's own check), so `run` never
/// starts.
#[test]
fn generators_that_cannot_generate_say_which_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("u32", "generate x = nonzero(-5, 0);", "error: generator `nonzero(-5, 0)` for `x`: every `u32` value in the range is zero; widen the range\n"),
        ("bool", "generate x = nonzero(-1, 0);", "error: generator `nonzero(-1, 0)` for `x`: every `bool` value in the range is zero; widen the range\n"),
        ("f32", "generate x = nonzero(0.0, 1e-45);", "error: generator `nonzero(0.0, 1e-45)` for `x`: every `f32` value in the range is zero; widen the range\n"),
        ("f32", "generate x = uniform(1.0, -1.0);", "error: generator `uniform(1.0, -1.0)` for `x`: no `f32` value lies in the range; write the smaller bound first\n"),
        ("i32", "generate x = constant(nan);", "error: generator `constant(nan)` for `x`: `nan` has no exact value of type `i32`; write one such as `0`\n"),
    ];
    for (elem, line, message) in cases {
        let file = write(dir.path(), "g.mpmd", &one_input(elem, 8, line));
        for command in ["run", "check"] {
            let output = mpmd(&[command, &file]);
            assert_eq!(output.status.code(), Some(1), "{command} {line}");
            let first_line = stderr(&output).lines().next().unwrap_or("").to_string() + "\n";
            assert_eq!(
                first_line,
                message.replacen("error:", "error[E0074]:", 1),
                "{command} {line}"
            );
        }
    }
}

/// d14b: an 8 GiB generated input aborted the process.
#[test]
fn generated_inputs_past_the_memory_limit_are_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let source = "mesh m {\n  grid [b = 1];\n  threads t = 1;\n}\n\n\
        kernel k(x: gmem<f32[2147483647]>, y: gmem<f32[1]>) {\n  y[0] = x[0];\n}\n\n\
        map k {\n  programs [m: k];\n  inputs [x: gmem<f32[2147483647]>];\n  outputs [y: gmem<f32[1]>];\n}\n";
    let file = write(dir.path(), "big.mpmd", source);
    assert_fails(
        &["run", &file],
        "error: the inputs of call 0 (map `k`): 8589934588 bytes, more than the memory limit of 4294967296 bytes; raise it with --memory-limit BYTES\n",
    );
    let small = example("elementwise");
    assert_fails(
        &["run", small.to_str().unwrap(), "--memory-limit", "1000"],
        "error: the inputs of call 0 (map `axpb`): 1024 bytes, more than the memory limit of 1000 bytes; raise it with --memory-limit BYTES\n",
    );
    // One budget for the run: the generated input (1 KiB), the
    // interpreter's buffer for y (1 KiB; x, which no program writes, is
    // read where it lies) and a block's state together pass 2 KiB, which
    // each fits alone (before, each was checked alone and the run passed).
    assert_fails(
        &["run", small.to_str().unwrap(), "--memory-limit", "2K"],
        "error: call 0 (map `axpb`) failed: the interpreter needs 4608 bytes for the state of a block of program 0 (`axpb`: registers, locals, smem) (2560 bytes) and the 2048 bytes the run already holds, more than its memory limit of 2048 bytes; raise it with --memory-limit BYTES\n",
    );
    let output = mpmd(&["run", small.to_str().unwrap(), "--memory-limit", "1M"]);
    assert!(output.status.success(), "{}", stderr(&output));
}

/// t3: six generated inputs of 1 GiB each, each under the default 4 GiB
/// limit, were generated (6 GiB, a minute) before the interpreter refused
/// them, and eight aborted the process; the call's inputs together are
/// now refused before any is made.
#[test]
fn inputs_that_pass_the_memory_limit_together_are_refused_before_generation() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../defects/t3_interp_inputs_sum_past_memory_limit_small.mpmd");
    let file = file.to_str().unwrap();
    let started = std::time::Instant::now();
    assert_fails(
        &["run", file],
        "error: the inputs of call 0 (map `k`): 6442450944 bytes, more than the memory limit of 4294967296 bytes; raise it with --memory-limit BYTES\n",
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

/// d17: the first of two `--input x=` was dropped silently.
#[test]
fn a_flag_given_twice_for_one_name_is_an_error() {
    let file = example("elementwise");
    let file = file.to_str().unwrap();
    assert_fails(
        &["run", file, "--input", "x=a.npy", "--input", "x=b.npy"],
        "error: --input `x` is given twice (`x=a.npy` and `x=b.npy`): give it once\n",
    );
    assert_fails(
        &["run", file, "--scalar", "alpha=1", "--scalar", "alpha=2"],
        "error: --scalar `alpha` is given twice (`alpha=1` and `alpha=2`): give it once\n",
    );
}

/// A `.npy` file with this header text and `data` bytes after it.
fn raw_npy(dir: &Path, name: &str, descr: &str, shape: &str, data: &[u8]) -> String {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

/// d18a: a (16, 16) array was taken for `f32[256]`; d18b and d18d: sizes
/// in the header wrapped (d18d's element count wraps to 4, matching `f32[4]`).
#[test]
fn npy_inputs_need_the_exact_shape_and_honest_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let elementwise = example("elementwise");
    let elementwise = elementwise.to_str().unwrap();
    let square = dir.path().join("square.npy");
    npy::write(&square, &HostTensor::from_f32(vec![16, 16], &[1.0; 256])).unwrap();
    let square = square.display().to_string();
    assert_fails(
        &["run", elementwise, "--input", &format!("x={square}")],
        &format!("error: --input `x`: `{square}` has shape (16, 16), and input `x` of map `axpb` needs shape (256,): reshape the array to exactly that\n"),
    );

    let huge = raw_npy(
        dir.path(),
        "huge.npy",
        "<f4",
        "(4294967295, 4294967295)",
        &[0; 16],
    );
    assert_fails(
        &["run", elementwise, "--input", &format!("x={huge}")],
        &format!("error: `{huge}` is not a .npy file: shape (4294967295, 4294967295) needs 73786976260478468100 data bytes, the file has 16\n"),
    );
    let four = write(
        dir.path(),
        "four.mpmd",
        &one_input("f32", 4, "generate x = iota;"),
    );
    let wrapped = raw_npy(
        dir.path(),
        "wrapped.npy",
        "<f4",
        "(20, 5581, 8681, 49477, 384773)",
        &[0; 16],
    );
    assert_fails(
        &["run", &four, "--input", &format!("x={wrapped}")],
        &format!("error: `{wrapped}` is not a .npy file: shape (20, 5581, 8681, 49477, 384773) has more than 2^64 elements, and the file holds 16 data bytes\n"),
    );
    let wide = raw_npy(dir.path(), "wide.npy", "<f4", "(4294967296,)", &[0; 16]);
    assert_fails(
        &["run", &four, "--input", &format!("x={wide}")],
        &format!("error: `{wide}` is not a .npy file: shape (4294967296,) has a dimension larger than 4294967295, more than any mpmd ref holds\n"),
    );
}

/// d18c: `|b1` arrays are bool data; other dtypes are named as they are.
#[test]
fn bool_npy_arrays_fill_bool_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let bools = write(
        dir.path(),
        "bools.mpmd",
        &one_input("bool", 4, "generate x = iota;"),
    );
    let b1 = raw_npy(dir.path(), "b1.npy", "|b1", "(4,)", &[0, 1, 1, 0]);
    let out = dir.path().join("out");
    let output = mpmd(&[
        "run",
        &bools,
        "--input",
        &format!("x={b1}"),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let y = npy::read(&out.join("y.npy")).unwrap();
    assert_eq!(y.to_f32(), [0.0, 1.0, 1.0, 0.0]);

    // 0/1 integers are bools too; other integers are not.
    let twos = dir.path().join("twos.npy");
    npy::write(&twos, &HostTensor::from_u32(vec![4], &[0, 1, 2, 1])).unwrap();
    let twos = twos.display().to_string();
    assert_fails(
        &["run", &bools, "--input", &format!("x={twos}")],
        &format!("error: --input `x`: `{twos}` holds <u4 data, and input `x` of map `k` is bool, but element 2 is 2, not 0 or 1\n"),
    );
    // A bool array for an f32 input is named as what it is.
    let floats = write(
        dir.path(),
        "floats.mpmd",
        &one_input("f32", 4, "generate x = iota;"),
    );
    assert_fails(
        &["run", &floats, "--input", &format!("x={b1}")],
        &format!("error: --input `x`: `{b1}` holds |b1 data, and input `x` of map `k` is f32: write the array as <f4\n"),
    );
}

/// `--out` failed with "File name too long" for long operand names.
#[test]
fn out_works_for_long_names() {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("y{}", "_long".repeat(80));
    let source = one_input("f32", 4, "generate x = iota;").replace("y", &name);
    let file = write(dir.path(), "long.mpmd", &source);
    let out = dir.path().join("out");
    let output = mpmd(&["run", &file, "--out", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files.len(), 1);
    let written = &files[0];
    assert!(
        written.starts_with(&name[..100]) && written.ends_with(".npy"),
        "{written}"
    );
    assert_eq!(written.len(), 100 + 1 + 16 + 4);
    // The summary names the file, so the mapping is on record.
    let text = stdout(&output);
    assert!(
        text.contains(&format!("-> {}\n", out.join(written).display())),
        "{text}"
    );
    let y = npy::read(&out.join(written)).unwrap();
    assert_eq!(y.to_f32(), [0.0, 1.0, 2.0, 3.0]);
}

const UNDERWAIT: &str = "
mesh w {
  grid [wb = 4];
  threads t = 64;
}

mesh r {
  grid [rb = 1];
  threads t = 64;
}

kernel work(x: gmem<f32[256]>, y: gmem<f32[64]>, part: gmem<f32[4, 64]>, ready: sem<[1]>) {
  let t: u32 = axis_index(t);
  part[axis_index(wb), t] = x[axis_index(wb) * 64u + t] * 2.0;
  signal(ready[0u], 1);
}

kernel reduce(x: gmem<f32[256]>, y: gmem<f32[64]>, part: gmem<f32[4, 64]>, ready: sem<[1]>) {
  wait(ready[0u], 3);
  let t: u32 = axis_index(t);
  y[t] = part[0u, t] + part[1u, t] + part[2u, t] + part[3u, t];
}

map underwait {
  programs [w: work, r: reduce];
  inputs [x: gmem<f32[256]>];
  outputs [y: gmem<f32[64]>];
  scratch [part: gmem<f32[4, 64]>, ready: sem<[1]>];
}
";

const WAR: &str = "
mesh p {
  grid [pb = 1];
  threads t = 64;
}

mesh c {
  grid [cb = 1];
  threads t = 64;
}

kernel prod(x: gmem<f32[128]>, y: gmem<f32[128]>, buf: gmem<f32[64]>, full: sem<[1]>) {
  let t: u32 = axis_index(t);
  for r: u32 in 0u..2u {
    buf[t] = x[r * 64u + t];
    signal(full[0u], 1);
  }
}

kernel cons(x: gmem<f32[128]>, y: gmem<f32[128]>, buf: gmem<f32[64]>, full: sem<[1]>) {
  let t: u32 = axis_index(t);
  for r: u32 in 0u..2u {
    wait(full[0u], 1);
    y[r * 64u + t] = buf[t] * 2.0;
  }
}

map war {
  programs [p: prod, c: cons];
  inputs [x: gmem<f32[128]>];
  outputs [y: gmem<f32[128]>];
  scratch [buf: gmem<f32[64]>, full: sem<[1]>];
}
";

/// u_underwait, u_war: `run --checked` returned 0 with plausible values; it
/// now runs the extra schedules (2 by default, as conformance) with
/// detection, which find both.
#[test]
fn checked_runs_find_races_that_one_schedule_hides() {
    let dir = tempfile::tempdir().unwrap();
    for (name, source, map, buffer) in [
        ("underwait.mpmd", UNDERWAIT, "underwait", "part"),
        ("war.mpmd", WAR, "war", "buf"),
    ] {
        let file = write(dir.path(), name, source);
        let fast = mpmd(&["run", &file]);
        assert!(fast.status.success(), "{}", stderr(&fast));
        let checked = mpmd(&["run", &file, "--checked"]);
        assert_eq!(
            checked.status.code(),
            Some(1),
            "{name}: {}",
            stdout(&checked)
        );
        let message = stderr(&checked);
        let race = format!("data race on `{buffer}[");
        let findings = [
            race.clone(),
            "read of memory that was never written at ".to_string(),
            "results differ between schedules: ".to_string(),
        ];
        let prefix = format!("error: call 0 (map `{map}`) failed: ");
        // One line, and for a race a note with the source line of each access.
        let notes = if message[prefix.len().min(message.len())..].starts_with(&race) {
            2
        } else {
            0
        };
        assert!(
            message.starts_with(&prefix)
                && findings
                    .iter()
                    .any(|f| message[prefix.len()..].starts_with(f.as_str()))
                && message.lines().filter(|l| l.starts_with("note: ")).count() == notes
                && message.lines().filter(|l| l.starts_with("error")).count() == 1,
            "{name}: {message}"
        );
    }
}

#[test]
fn checked_runs_say_how_many_schedules_agreed() {
    let file = example("producer_consumer");
    let file = file.to_str().unwrap();
    let default = stdout(&mpmd(&["run", file, "--checked"]));
    assert!(
        default.starts_with("call 0: map `producer_consumer` (checked, 3 schedules agree)\n"),
        "{default}"
    );
    let lockstep = stdout(&mpmd(&["run", file, "--checked", "--schedules", "0"]));
    assert!(
        lockstep.starts_with("call 0: map `producer_consumer` (checked)\n"),
        "{lockstep}"
    );
    let more = stdout(&mpmd(&["run", file, "--checked", "--schedules", "5"]));
    assert!(more.contains("(checked, 6 schedules agree)\n"), "{more}");
    assert_fails(
        &["run", file, "--backend", "wgpu", "--schedules", "1"],
        "error: --schedules: only the interpreter runs extra schedules, not --backend wgpu\n",
    );
    let bad = mpmd(&["run", file, "--timeout", "soon"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains(
            "invalid value 'soon' for '--timeout <SECONDS>': `soon` is not a number of seconds (such as 60, 0.5, or 0 for no bound)"
        ),
        "{}",
        stderr(&bad)
    );
}

/// A resident scratch `acc` that each of two calls reads, doubles and
/// reports + 1 in `y`.
const RESIDENT: &str = "
mesh m {
  grid [b = 1];
  threads t = 4;
}

resident acc: gmem<f32[4]>;

kernel add(y: gmem<f32[4]>, acc: gmem<f32[4]>) {
  let t: u32 = axis_index(t);
  y[t] = acc[t] + 1.0;
  acc[t] = acc[t] * 2.0;
}

map add {
  programs [m: add];
  outputs [y: gmem<f32[4]>];
  scratch [acc: gmem<f32[4]> resident];
}

call add();
call add();

case {
  generate acc = iota;
}
";

fn read_f32(path: &Path) -> Vec<f32> {
    let tensor = npy::read(path).unwrap();
    assert_eq!(tensor.elem(), ScalarType::F32);
    tensor.to_f32()
}

/// A resident could not be given data: `generate` on it was ignored,
/// `--input` refused it, and the run read unwritten memory.
#[test]
fn residents_take_data_from_generate_and_input_and_come_back_with_out() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "acc.mpmd", RESIDENT);
    let out = dir.path().join("gen");
    let output = mpmd(&["run", &file, "--checked", "--out", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(read_f32(&out.join("0_add_y.npy")), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(read_f32(&out.join("1_add_y.npy")), [1.0, 3.0, 5.0, 7.0]);
    assert_eq!(
        read_f32(&out.join("resident.acc.npy")),
        [0.0, 4.0, 8.0, 12.0]
    );
    assert!(
        stdout(&output).ends_with(&format!(
            "residents after the last call:\n  resident acc: f32[4] first [0.0, 4.0, 8.0, 12.0] min 0.0 max 12.0 sum 24.0 -> {}\n",
            out.join("resident.acc.npy").display()
        )),
        "{}",
        stdout(&output)
    );

    // `--input` wins over the case's generator.
    let data = dir.path().join("acc.npy");
    npy::write(
        &data,
        &HostTensor::from_f32(vec![4], &[10.0, 20.0, 30.0, 40.0]),
    )
    .unwrap();
    let out = dir.path().join("input");
    let output = mpmd(&[
        "run",
        &file,
        "--checked",
        "--input",
        &format!("acc={}", data.display()),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(read_f32(&out.join("0_add_y.npy")), [11.0, 21.0, 31.0, 41.0]);
    assert_eq!(
        read_f32(&out.join("resident.acc.npy")),
        [40.0, 80.0, 120.0, 160.0]
    );

    // Without data the first call reads memory that was never written.
    let bare = write(
        dir.path(),
        "bare.mpmd",
        &RESIDENT.replace("generate acc = iota;", ""),
    );
    let output = mpmd(&["run", &bare, "--checked"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).starts_with(
            "error: call 0 (map `add`) failed: read of memory that was never written at program 0 (add), block 0, thread 0: `acc` element 0"
        ),
        "{}",
        stderr(&output)
    );
}

/// The same resident data on the WGSL backend (lavapipe where there is no GPU).
#[test]
fn residents_take_data_on_wgpu() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "acc.mpmd", RESIDENT);
    let out = dir.path().join("out");
    let output = mpmd(&[
        "run",
        &file,
        "--backend",
        "wgpu",
        "--out",
        out.to_str().unwrap(),
    ]);
    require_backend(&output, "wgpu");
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(read_f32(&out.join("0_add_y.npy")), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(read_f32(&out.join("1_add_y.npy")), [1.0, 3.0, 5.0, 7.0]);
    assert_eq!(
        read_f32(&out.join("resident.acc.npy")),
        [0.0, 4.0, 8.0, 12.0]
    );
}

/// Fails the test when the backend could not start: lavapipe is part of the
/// README's set-up (test-support/needs.rs: a test that cannot run never passes).
fn require_backend(output: &Output, backend: &str) {
    let missing =
        stderr(output).starts_with(&format!("error: backend `{backend}` is not available"));
    if missing {
        panic!(
            "{}",
            needs::setup_message(&format!("the {backend} backend"), &stderr(output))
        );
    }
}

/// The wgpu refusal of a cycle named `WgpuOptions::co_resident` in the CLI.
/// (40 workgroups: more than any adapter establishes, lavapipe's pool
/// included, so the refusal holds everywhere.)
#[test]
fn wgpu_messages_name_the_cli_flag() {
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(example("handshake"))
        .unwrap()
        .replace("grid [pb = 1]", "grid [pb = 20]")
        .replace("grid [qb = 1]", "grid [qb = 20]");
    let file = write(dir.path(), "wide_handshake.mpmd", &source);
    let output = mpmd(&["run", &file, "--backend", "wgpu"]);
    require_backend(&output, "wgpu");
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains("it needs 40 workgroup(s) running at once")
            || message.contains("which needs 40 workgroup(s) running at once"),
        "{message}"
    );
    assert!(
        message.contains(
            "Set --co-resident if this adapter runs them all at once (the result is then unverified)"
        ) && !message.contains("WgpuOptions"),
        "{message}"
    );
}

/// t3: `--timeout` bounds a wgpu run too (it was ignored there): 65,536
/// workgroups with 512 KiB local arrays each stop at half a second.
#[test]
fn wgpu_runs_stop_at_the_timeout() {
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../defects/t3_wgpu_timeout_ignored.mpmd");
    let started = std::time::Instant::now();
    let output = mpmd(&[
        "run",
        file.to_str().unwrap(),
        "--backend",
        "wgpu",
        "--timeout",
        "0.5",
    ]);
    require_backend(&output, "wgpu");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.starts_with("error: call 0 (map `k`) failed: time limit of 500 ms reached while ")
            && message.ends_with("; raise it with --timeout SECONDS\n"),
        "{message}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
}

/// A chained scan runs on wgpu one dispatch per block, verified; a block that
/// waits on a higher block is unsupported, and the message names the flag.
#[test]
fn wgpu_runs_chained_blocks_and_names_the_flag_when_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let output = mpmd(&[
        "run",
        example("chained_scan").to_str().unwrap(),
        "--backend",
        "wgpu",
        "--out",
        out.to_str().unwrap(),
    ]);
    require_backend(&output, "wgpu");
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        !stdout(&output).contains("unverified"),
        "{}",
        stdout(&output)
    );
    let prefix = npy::read(&out.join("prefix.npy")).unwrap();
    assert_eq!(prefix.to_i32(), vec![496, 2016, 4560, 8128]);
    // 40 blocks: more than any adapter establishes at once (lavapipe's pool
    // included), so it runs split, and block 0 waits on block 39.
    let source = "mesh m {\n  grid [b = 40];\n  threads t = 1;\n}\n\n\
        kernel k(o: gmem<u32[40]>, turn: sem<[1]> @ m) {\n  if axis_index(b) == 0u {\n    wait(turn[0u], 1);\n  }\n  \
        o[axis_index(b)] = 1u;\n  if axis_index(b) == 39u {\n    signal(turn@[0u][0u], 1);\n  }\n}\n\n\
        map k {\n  programs [m: k];\n  outputs [o: gmem<u32[40]>];\n  scratch [turn: sem<[1]> @ m];\n}\n";
    let file = write(dir.path(), "backwards.mpmd", source);
    let output = mpmd(&["run", &file, "--backend", "wgpu"]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.contains(
            "program 0 (k), block 0 waits on `turn@[0][0]`, which its own program signals"
        ) && message.contains(
            "Set --co-resident if this adapter runs them all at once (the result is then unverified)"
        ) && !message.contains("WgpuOptions"),
        "{message}"
    );
}

#[test]
fn inputs_that_start_at_zero_take_no_data() {
    let dir = tempfile::tempdir().unwrap();
    let source = "mesh m {\n  grid [b = 1];\n  threads t = 4;\n}\n\n\
        kernel k(z: gmem<u32[4]>, s: sem<[1]>, y: gmem<u32[4]>) {\n  let c: i32 = read(s[0u]);\n  y[axis_index(t)] = z[axis_index(t)] + u32(c);\n}\n\n\
        map k {\n  programs [m: k];\n  inputs [z: gmem<u32[4]> zeroed, s: sem<[1]>];\n  outputs [y: gmem<u32[4]>];\n}\n";
    let file = write(dir.path(), "zero.mpmd", source);
    let output = mpmd(&["run", &file, "--checked"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("  y: u32[4] first [0, 0, 0, 0] min 0 max 0 sum 0\n"));
    for name in ["z", "s"] {
        assert_fails(
            &["run", &file, "--input", &format!("{name}=data.npy")],
            &format!("error: --input `{name}`: input `{name}` of map `k` starts at zero in every call (a semaphore, or declared `zeroed`) and takes no data\n"),
        );
    }
    assert_fails(
        &["run", &file, "--input", "w=data.npy"],
        "error: --input `w`: no called map has an input of that name, and the module declares no resident of that name\n",
    );
}

/// `lower --target cuda` on a file with several maps printed two preludes
/// in one stream, which nvcc refuses.
#[test]
fn lowering_several_maps_to_source_takes_one_map_or_a_folder() {
    let file = example("handoff");
    let file = file.to_str().unwrap();
    for (target, language) in [("cuda", "CUDA C"), ("wgsl", "WGSL")] {
        assert_fails(
            &["lower", "--target", target, file],
            &format!("error: `{file}` has 2 maps (`send`, `receive`), and the {language} of each is a file of its own: pass --map NAME to print one map's source, or --out-dir DIR to write one file per map\n"),
        );
    }
    let one = mpmd(&["lower", "--target", "cuda", file, "--map", "send"]);
    assert!(one.status.success(), "{}", stderr(&one));
    assert_eq!(stdout(&one).matches("__global__").count(), 1);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("src");
    let output = mpmd(&[
        "lower",
        "--target",
        "cuda",
        file,
        "--out-dir",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        format!(
            "map `send` -> {}\nmap `receive` -> {}\n",
            out.join("send.cu").display(),
            out.join("receive.cu").display()
        )
    );
    let send = std::fs::read_to_string(out.join("send.cu")).unwrap();
    assert_eq!(send, stdout(&one));
    let receive = std::fs::read_to_string(out.join("receive.cu")).unwrap();
    assert_eq!(receive.matches("__global__").count(), 1);
}
