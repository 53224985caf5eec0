//! Shared helpers: parse, validate and lower `.mpmd` text, open the adapter,
//! run on the interpreter and on wgpu.
#![allow(dead_code)]

use mpmd_core::backend::{Backend, Mode, RunError, RunOptions};
use mpmd_core::host::{CallArgs, CallOutputs, HostTensor};
use mpmd_core::interp::Interpreter;
use mpmd_core::ir::{Literal, Module};
use mpmd_core::plan::{lower, LaunchPlan};
use mpmd_wgpu::{WgpuBackend, WgpuOptions};

#[path = "../../../test-support/needs.rs"]
pub mod needs;

/// The backend; a missing adapter fails the test (the README's set-up
/// provides lavapipe: `needs::setup`). Always `Some`: the `Option` keeps
/// the callers' `let Some(..) else` form.
pub fn backend(options: WgpuOptions) -> Option<WgpuBackend> {
    Some(needs::setup(
        "a WebGPU adapter (Mesa's lavapipe)",
        WgpuBackend::new(options),
    ))
}

/// The repository's `examples/*.mpmd` files, sorted.
pub fn example_files() -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mpmd"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no examples in {}", dir.display());
    files
}

/// Parses and validates a module; panics with the diagnostics otherwise.
pub fn module(src: &str) -> Module {
    let (module, _) = mpmd_core::text::parse(src).unwrap_or_else(|e| panic!("parse error: {e:?}"));
    if let Err(diags) = mpmd_core::validate::validate(&module, &Default::default()) {
        panic!("validation failed: {diags:#?}");
    }
    module
}

pub fn plan(module: &Module, map: &str) -> LaunchPlan {
    lower(module, map).unwrap_or_else(|e| panic!("lowering failed: {e}"))
}

pub fn fast() -> RunOptions {
    RunOptions::default()
}

pub fn checked() -> RunOptions {
    RunOptions {
        mode: Mode::Checked,
        seed: 0,
    }
}

pub fn args(inputs: Vec<(&str, HostTensor)>, scalars: Vec<(&str, Literal)>) -> CallArgs {
    CallArgs {
        inputs: inputs
            .into_iter()
            .map(|(n, t)| (n.to_string(), t))
            .collect(),
        scalars: scalars
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect(),
    }
}

/// Runs `map` once on the interpreter and on wgpu.
pub fn run_both(
    wgpu: &mut WgpuBackend,
    module: &Module,
    map: &str,
    args: &CallArgs,
    options: &RunOptions,
) -> (Result<CallOutputs, RunError>, Result<CallOutputs, RunError>) {
    let plan = plan(module, map);
    let mut interp = Interpreter::new();
    let expected = interp.run(&plan, args, options);
    let got = wgpu.run(&plan, args, options);
    (expected, got)
}

/// Runs on both and asserts bit-identical outputs.
pub fn assert_same(
    wgpu: &mut WgpuBackend,
    module: &Module,
    map: &str,
    args: &CallArgs,
) -> CallOutputs {
    let (expected, got) = run_both(wgpu, module, map, args, &fast());
    let expected = expected.unwrap_or_else(|e| panic!("interpreter failed: {e}"));
    let got = got.unwrap_or_else(|e| panic!("wgpu failed: {e}"));
    assert_eq!(got, expected);
    got
}

/// The text of function `name` in `wgsl`.
pub fn function<'a>(wgsl: &'a str, name: &str) -> &'a str {
    let start = wgsl
        .find(&format!("fn {name}("))
        .unwrap_or_else(|| panic!("no fn {name} in:\n{wgsl}"));
    let end = wgsl[start..].find("\n}\n").unwrap();
    &wgsl[start..start + end]
}

/// The WGSL global of the (unpacked) buffer whose first operand is
/// `operand`: `g<index>_<operand>`.
pub fn global(wgsl: &str, operand: &str) -> String {
    wgsl.lines()
        .filter_map(|l| l.strip_prefix("@group(0) @binding("))
        .filter_map(|l| l.split("> ").nth(1))
        .filter_map(|l| l.split(':').next())
        .find(|g| {
            g.strip_prefix('g')
                .and_then(|r| r.split_once('_'))
                .is_some_and(|(k, name)| {
                    !k.is_empty() && k.chars().all(|c| c.is_ascii_digit()) && name == operand
                })
        })
        .unwrap_or_else(|| panic!("no buffer global for `{operand}` in:\n{wgsl}"))
        .to_string()
}
