//! The round-3 reproducers about what the CLI reads and writes
//! (`defects/t3/`, found at abb8ba0): `.npy` headers read as numpy reads
//! them, special files refused, output files that never follow a planted
//! symlink, out-of-range scalars, case refusals and validation overflow.
//! Each failed at abb8ba0.

mod common;
use common::*;
use std::path::{Path, PathBuf};

fn defect(name: &str) -> String {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../defects/t3")
        .join(name);
    assert!(path.exists(), "{} is missing", path.display());
    path.to_str().unwrap().to_string()
}

/// Runs `mpmd ARGS`; asserts the exit code and that stdout and stderr
/// together contain every fragment.
fn expect(args: &[&str], code: i32, fragments: &[&str]) -> String {
    let output = mpmd(args);
    let text = format!("{}{}", stdout(&output), stderr(&output));
    assert_eq!(output.status.code(), Some(code), "mpmd {args:?}:\n{text}");
    for fragment in fragments {
        assert!(
            text.contains(fragment),
            "mpmd {args:?}: no `{fragment}` in\n{text}"
        );
    }
    text
}

/// Each file holds `np.arange(256).reshape(16, 16)` as numpy reads it
/// (the last of a duplicated key wins): the copy kernel gives it back in
/// row-major order, or the file is refused as numpy refuses it.
#[test]
fn npy_headers_are_read_as_numpy_reads_them() {
    let program = defect("npy_copy2d.mpmd");
    for file in [
        "npy_dup_fortran_order.npy",
        "npy_dup_descr_big_endian.npy",
        "npy_dup_shape.npy",
    ] {
        let input = format!("x={}", defect(file));
        expect(
            &["run", &program, "--input", &input],
            0,
            &["y: f32[16, 16] first [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, ...] min 0.0 max 255.0"],
        );
    }
    let input = format!("x={}", defect("npy_shape_key_inside_string.npy"));
    expect(
        &["run", &program, "--input", &input],
        1,
        &["the header has the key 'x', and numpy reads only 'descr', 'fortran_order' and 'shape'"],
    );
}

#[cfg(unix)]
#[test]
fn special_files_are_refused_not_read() {
    let program = defect("npy_copy2d.mpmd");
    expect(
        &["run", &program, "--input", "x=/dev/zero"],
        1,
        &["cannot read `/dev/zero`: it is a character device, not a regular file"],
    );
    expect(
        &["check", "/dev/zero"],
        1,
        &["cannot read `/dev/zero`: it is a character device, not a regular file"],
    );
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("x.npy");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // Before the fix this waited for a writer forever.
    let input = format!("x={}", fifo.display());
    expect(
        &["run", &program, "--input", &input],
        1,
        &["it is a FIFO, not a regular file"],
    );
    // A regular file far larger than the input is refused before reading.
    let big = dir.path().join("big.npy");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let input = format!("x={}", big.display());
    expect(
        &["run", &program, "--input", &input],
        1,
        &["it holds 1073741824 bytes or more, and at most 11036 are read here"],
    );
}

#[cfg(unix)]
#[test]
fn outputs_replace_a_planted_symlink_instead_of_following_it() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::symlink(&victim, out.join("y.npy")).unwrap();
    let program = defect("npy_copy2d.mpmd");
    let input = format!("x={}", defect("npy_dup_shape.npy"));
    expect(
        &[
            "run",
            &program,
            "--input",
            &input,
            "--out",
            out.to_str().unwrap(),
        ],
        0,
        &["-> "],
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let y = mpmd_cli::npy::read(&out.join("y.npy")).unwrap();
    assert_eq!(y.shape(), &[16, 16]);

    let lowered = dir.path().join("lowered");
    std::fs::create_dir(&lowered).unwrap();
    std::os::unix::fs::symlink(&victim, lowered.join("k.plan.txt")).unwrap();
    expect(
        &[
            "lower",
            "--target",
            "plan",
            &program,
            "--out-dir",
            lowered.to_str().unwrap(),
        ],
        0,
        &["map `k` -> "],
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(std::fs::read_to_string(lowered.join("k.plan.txt"))
        .unwrap()
        .contains("k"));
}

/// `--scalar` takes what the same literal in a file takes: a number past
/// the type's range is an error, for every type (core's `host::parse_scalar`,
/// which the Python package's scalar arguments share).
#[test]
fn out_of_range_scalar_flags_are_errors() {
    let program = defect("scalar_flag_overflow.mpmd");
    for (flag, message) in [
        (
            "a=1e39",
            "--scalar `a=1e39`: `1e39` is out of range for `f32` (its largest finite value is 3.4028235e38; give `inf` for infinity)",
        ),
        (
            "d=70000",
            "--scalar `d=70000`: `70000` is out of range for `f16` (its largest finite value is 6.5504e4; give `inf` for infinity)",
        ),
        (
            "e=1e39",
            "--scalar `e=1e39`: `1e39` is out of range for `bf16`",
        ),
        (
            "c=4294967296",
            "--scalar `c=4294967296`: `4294967296` is out of range for `u32` (it holds 0 to 4294967295)",
        ),
        (
            "b=2.5",
            "--scalar `b=2.5`: `2.5` is not a `i32` value (`i32` takes an integer)",
        ),
    ] {
        expect(&["run", &program, "--scalar", flag], 1, &[message]);
    }
    // Infinity when asked for, and the largest finite values, pass.
    expect(
        &[
            "run", &program, "--scalar", "a=inf", "--scalar", "d=65504", "--scalar", "e=-inf",
        ],
        0,
        &[
            "y: f32[1] first [inf]",
            "h: f16[2] first [65500.0f16, 0.0f16] min 0.0 max 65504.0",
        ],
    );
}

/// A name generated twice, `reject` of a code that does not exist and a
/// float generator for a `u32` input passed `check`; each is E0074 now.
#[test]
fn case_sections_that_cannot_mean_what_they_say_are_refused() {
    for (file, message) in [
        ("case_duplicate_generate.mpmd", "error[E0074]: `generate x` is given twice"),
        (
            "case_reject_unknown_code.mpmd",
            "error[E0074]: `expect reject(E9999)` names no validation error code",
        ),
        (
            "case_float_generator_for_u32.mpmd",
            "error[E0074]: generator `uniform(0.0, 1.0)` for `x`: the bounds are floats, and `u32` takes integers; write integer bounds such as `uniform(0, 10)`",
        ),
    ] {
        expect(&["check", &defect(file)], 1, &[message, "has 1 error(s)"]);
    }
}

/// `lower --target plan` counted a 16-bit buffer's elements as "words".
#[test]
fn the_plan_counts_elements_and_bytes() {
    let text = expect(
        &[
            "lower",
            "--target",
            "plan",
            &defect("scalar_flag_overflow.mpmd"),
        ],
        0,
        &[
            "[h] gmem<f16[2]> x 1 instance(s) = 2 elements (4 bytes), uninitialised",
            "[y] gmem<f32[1]> x 1 instance(s) = 1 elements (4 bytes), uninitialised",
        ],
    );
    assert!(!text.contains("words"), "{text}");
}

/// A thread axis of 2^32 - 1 with a warp collective: the E0069 hint's next
/// multiple of 32 overflowed a u32 and panicked (debug builds).
#[test]
fn validation_of_a_huge_thread_axis_reports_instead_of_panicking() {
    expect(
        &["check", &defect("validate_threads_max_warp_overflow.mpmd")],
        1,
        &["error[E0010]", "error[E0069]", "for example 4294967264"],
    );
}
