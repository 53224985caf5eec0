//! The oracle's outputs, pinned: every corpus case expected to run (`expect
//! ok`) is run on the interpreter (seed 1, the lockstep schedule, fast mode,
//! detection on) and every output of every call, and every resident after
//! the last call, is an insta snapshot (`snapshots/oracle_snapshots__NAME.snap`):
//! its type, shape, a hash of its bytes and its first values (all of them
//! when it is small). Conformance judges every backend against the
//! interpreter, so an interpreter change that moved a result would move every
//! backend's expectation with it; here it shows as a reviewed diff.
//!
//! A case that does not run fails the test (nothing is skipped).

use std::fmt::Write as _;

use mpmd_conformance::case::{load_dir, Case};
use mpmd_conformance::run::{prepare_calls, run_interp, Observed};
use mpmd_core::case::Expectation;
use mpmd_core::ir::ScalarType;
use mpmd_core::{numerics, HostTensor, Mode};

/// The seed conformance uses by default.
const SEED: u64 = 1;

/// Outputs up to this many elements are shown whole.
const SHOWN_WHOLE: usize = 16;

/// Larger outputs show this many leading elements beside the hash.
const SHOWN_LEADING: usize = 8;

fn corpus() -> Vec<Case> {
    load_dir(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases"))
        .expect("the corpus directory is readable")
}

/// FNV-1a, 64 bits: stable across platforms and Rust versions (the
/// standard library's hashers promise neither).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// One element, exactly: floats as their value and their bits.
fn element(elem: ScalarType, bits: u32) -> String {
    match elem {
        ScalarType::F32 => format!("{:?}/{bits:#010x}", f32::from_bits(bits)),
        ScalarType::F16 => format!("{:?}/{bits:#06x}", numerics::f16_to_f32(bits as u16)),
        ScalarType::BF16 => format!("{:?}/{bits:#06x}", numerics::bf16_to_f32(bits as u16)),
        ScalarType::I32 => format!("{}", bits as i32),
        ScalarType::U32 | ScalarType::Bool => format!("{bits}"),
    }
}

fn describe(tensor: &HostTensor) -> String {
    let bits = tensor.to_bits();
    let shown = if bits.len() <= SHOWN_WHOLE {
        bits.len()
    } else {
        SHOWN_LEADING
    };
    let values: Vec<String> = bits[..shown]
        .iter()
        .map(|&b| element(tensor.elem(), b))
        .collect();
    let more = if shown < bits.len() { ", ..." } else { "" };
    format!(
        "{:?}{:?} fnv1a64={:016x} [{}{more}]",
        tensor.elem(),
        tensor.shape(),
        fnv1a64(&tensor.bytes()),
        values.join(", ")
    )
}

fn snapshot(observed: &[Observed]) -> String {
    let mut out = String::new();
    for o in observed {
        let when = match o.call {
            Some(call) => format!("call {call} output"),
            None => "resident after the last call".to_string(),
        };
        let _ = writeln!(out, "{when} {}: {}", o.name, describe(&o.tensor));
    }
    out
}

#[test]
fn every_ok_case_keeps_its_interpreter_outputs() {
    let cases = corpus();
    let mut pinned = 0;
    for case in &cases {
        let file = case
            .parsed
            .as_ref()
            .unwrap_or_else(|e| panic!("case {} does not parse: {e}", case.name));
        if file.spec.expect != Expectation::Ok {
            continue;
        }
        let calls = prepare_calls(&case.name, file, SEED)
            .unwrap_or_else(|e| panic!("case {}: set-up failed: {e}", case.name));
        let valid = file
            .validate()
            .unwrap_or_else(|d| panic!("case {} is not valid: {d:?}", case.name));
        let observed = run_interp(&valid, &file.spec, &calls, Mode::Fast, SEED, 0)
            .unwrap_or_else(|e| panic!("case {}: the interpreter failed: {e}", case.name));
        assert!(!observed.is_empty(), "case {} has no outputs", case.name);
        insta::assert_snapshot!(case.name.as_str(), snapshot(&observed));
        pinned += 1;
    }
    assert!(pinned >= 80, "only {pinned} cases expected to run");
}

#[test]
fn the_snapshot_hash_and_values_are_exact() {
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    let t = HostTensor::from_f32(vec![2], &[1.5, -0.0]);
    assert_eq!(
        describe(&t),
        format!(
            "F32[2] fnv1a64={:016x} [1.5/0x3fc00000, -0.0/0x80000000]",
            fnv1a64(&t.bytes())
        )
    );
    let long = HostTensor::from_u32(vec![20], &(0..20).collect::<Vec<u32>>());
    assert!(describe(&long).ends_with("[0, 1, 2, 3, 4, 5, 6, 7, ...]"));
}
