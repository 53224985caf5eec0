//! Every reproducer of `defects/` (found by trying mpmd as users and
//! attackers would, at 8c9348a) behaves as its row of `defects/README.md`
//! expects, run through the CLI as a user runs it. Each row failed on
//! 8c9348a: it crashed, hung, took the input silently or said the wrong thing.
//! (`gen_deep.py`'s shapes are `core/tests/text_bad_input.rs`; the generated
//! code's compilers are checked in the backends' own tests.)

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn defect(name: &str) -> String {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../defects")
        .join(name);
    assert!(path.exists(), "{} is missing", path.display());
    path.to_str().unwrap().to_string()
}

/// Runs `mpmd ARGS`; asserts the exit code and that stdout and stderr
/// together contain every fragment.
fn expect(args: &[&str], code: i32, fragments: &[&str]) {
    let output = mpmd(args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(code), "mpmd {args:?}:\n{text}");
    for fragment in fragments {
        assert!(
            text.contains(fragment),
            "mpmd {args:?}: no `{fragment}` in\n{text}"
        );
    }
}

#[test]
fn the_oracle_rows() {
    let local = defect("u_local_after_barrier.mpmd");
    expect(
        &["run", "--checked", &local],
        0,
        &["3 schedules agree", "min 1.0 max 1.0"],
    );
    let guard = defect("u_shortcircuit_and.mpmd");
    expect(&["run", "--checked", &guard], 0, &["schedules agree"]);
    for (file, buffer) in [("u_underwait.mpmd", "part"), ("u_war.mpmd", "buf")] {
        let path = defect(file);
        for seed in ["1", "2", "7"] {
            expect(
                &["run", "--checked", "--seed", seed, &path],
                1,
                &[&format!("data race on `{buffer}[")],
            );
        }
    }
    expect(
        &["run", "--checked", &defect("d25_race_report_same_thread.mpmd")],
        1,
        &[
            "data race on `c[0]`: read by program 0 (k), block 0, thread 1 and write by program 0 (k), block 0, thread 0\n",
            "note: the read\n",
            "7 |   let v: u32 = c[0];\n",
            "note: the write\n",
            "8 |   c[0] = v + 1u;\n",
        ],
    );
}

#[test]
fn the_text_rows() {
    // CR line ends: the comment ends at its CR, the program runs.
    expect(
        &["run", &defect("d07_cr_line_endings.mpmd")],
        0,
        &["call 0: map `k`"],
    );
    expect(&["check", &defect("d08_bom.mpmd")], 0, &["ok"]);
    expect(
        &["check", &defect("d09_non_utf8_comment.mpmd")],
        1,
        &["not valid UTF-8", ":5:"],
    );
    expect(
        &["check", &defect("d11_float_literal_overflow.mpmd")],
        1,
        &["1e39"],
    );
    for file in [
        "d04a_ref_len_wrap_gmem.mpmd",
        "d04b_ref_len_wrap_zero.mpmd",
        "d04c_ref_len_wrap_smem.mpmd",
        "d04d_ref_len_wrap_local.mpmd",
    ] {
        let output = mpmd(&["check", &defect(file)]);
        assert_eq!(output.status.code(), Some(1), "{file}");
        let text = String::from_utf8_lossy(&output.stderr);
        assert!(text.contains("error[E0"), "{file}: {text}");
    }
    expect(
        &["check", &defect("d13_wgsl_const_oob.mpmd")],
        1,
        &["error[E0047]"],
    );
}

#[test]
fn the_generator_rows() {
    for file in [
        "d05a_nonzero_hang_u32.mpmd",
        "d05b_nonzero_hang_bool.mpmd",
        "d05c_nonzero_hang_f32.mpmd",
    ] {
        expect(
            &["run", &defect(file)],
            1,
            &["generator `nonzero(", "is zero; widen the range"],
        );
    }
    expect(
        &["run", &defect("d06_generator_message.mpmd")],
        1,
        &["generator `uniform(1.0, -1.0)` for `x`"],
    );
    expect(
        &["run", &defect("d24a_generator_type_mismatch.mpmd")],
        1,
        &["generator `constant(nan)`", "no exact value of type `i32`"],
    );
}

#[test]
fn the_limit_rows() {
    expect(
        &[
            "run",
            "--checked",
            &defect("d14a_checked_detection_oom.mpmd"),
        ],
        1,
        &["more than its memory limit of 4294967296 bytes; raise it with --memory-limit BYTES"],
    );
    expect(
        &["run", &defect("d14b_input_generation_oom.mpmd")],
        1,
        &["8589934588 bytes, more than the memory limit of 4294967296 bytes"],
    );
    let start = Instant::now();
    expect(
        &["run", "--timeout", "1", &defect("d15_interp_unbounded_loop.mpmd")],
        1,
        &["time limit of 1000 ms reached at program 0 (k), block 0; raise it with --timeout SECONDS"],
    );
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn the_npy_and_flag_rows() {
    let program = defect("d17_elementwise.mpmd");
    let f32s = format!("x={}", defect("d17_x_f32.npy"));
    let i32s = format!("x={}", defect("d17_x_i32.npy"));
    expect(
        &["run", &program, "--input", &i32s, "--input", &f32s],
        1,
        &["--input `x` is given twice"],
    );
    expect(
        &[
            "run",
            &program,
            "--scalar",
            "alpha=1.0",
            "--scalar",
            "alpha=2.0",
        ],
        1,
        &["given twice"],
    );
    expect(
        &[
            "run",
            &program,
            "--input",
            &format!("x={}", defect("d18a_x_16x16.npy")),
        ],
        1,
        &["has shape (16, 16)", "needs shape (256,)"],
    );
    expect(
        &[
            "run",
            &program,
            "--input",
            &format!("x={}", defect("d18b_huge_shape.npy")),
        ],
        1,
        &["73786976260478468100 data bytes, the file has 16"],
    );
    expect(
        &[
            "run",
            &defect("d18d_four_inputs.mpmd"),
            "--input",
            &format!("x={}", defect("d18d_wrapped_count.npy")),
        ],
        1,
        &["more than 2^64 elements"],
    );
    // A `|b1` array fills a bool input.
    let dir = std::env::temp_dir().join(format!("mpmd-defects-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bools = dir.join("bools.mpmd");
    std::fs::write(
        &bools,
        "mesh m {\n  grid [b = 4];\n  threads t = 64;\n}\n\n\
         kernel k(x: gmem<bool[256]>, y: gmem<u32[256]>) {\n  let i: u32 = axis_index(b) * 64u + axis_index(t);\n  y[i] = u32(x[i]);\n}\n\n\
         map k {\n  programs [m: k];\n  inputs [x: gmem<bool[256]>];\n  outputs [y: gmem<u32[256]>];\n}\n",
    )
    .unwrap();
    expect(
        &[
            "run",
            bools.to_str().unwrap(),
            "--input",
            &format!("x={}", defect("d18c_bool_b1.npy")),
        ],
        0,
        &["y: u32[256]"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_semaphore_amount_row() {
    // The reproducer's own call passes n = 1; -1 at run time is an error.
    let program = defect("d22_sem_runtime_amount.mpmd");
    expect(&["run", &program], 0, &["y: u32[32]"]);
    for mode in [&[][..], &["--checked"][..]] {
        let mut args = vec!["run", program.as_str(), "--scalar", "n=-1"];
        args.extend_from_slice(mode);
        expect(&args, 1, &["semaphore amount -1", "must be at least 1"]);
    }
}

#[test]
fn the_lowering_rows() {
    for file in [
        "d02_wgsl_chain_197_ok.mpmd",
        "d02_wgsl_chain_198.mpmd",
        "d26_tint_chain_127.mpmd",
        "d26_tint_for_nesting_42.mpmd",
        "d27_f32_max_literal.mpmd",
        "d12_cuda_map_named_idx.mpmd",
    ] {
        for target in ["wgsl", "cuda"] {
            expect(&["lower", "--target", target, &defect(file)], 0, &[]);
        }
    }
}
