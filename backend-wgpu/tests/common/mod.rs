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
/// provides lavapipe: `needs::setup`).
pub fn backend(options: WgpuOptions) -> WgpuBackend {
    needs::setup(
        "a WebGPU adapter (Mesa's lavapipe)",
        WgpuBackend::new(options),
    )
}

/// Fails the test unless `wgpu` runs on lavapipe (llvmpipe), whose facts
/// the test states (`what`): the README's set-up makes lavapipe the
/// adapter, so another one is a set-up the test cannot check, never a pass.
pub fn require_llvmpipe(wgpu: &WgpuBackend, what: &str) {
    let adapter = wgpu.adapter_info().to_string();
    needs::setup(
        &format!("Mesa's lavapipe (llvmpipe) as the WebGPU adapter ({what})"),
        if wgpu.is_llvmpipe() {
            Ok(())
        } else {
            Err(format!("the adapter is {adapter}, not llvmpipe"))
        },
    );
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
    lower(&validated(module), map).unwrap_or_else(|e| panic!("lowering failed: {e}"))
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

/// The texts of functions `names` in `wgsl`, each with its closing brace
/// and, for an entry point, its `@compute @workgroup_size(..)` line: the
/// code that matters to a test, for a snapshot.
pub fn functions(wgsl: &str, names: &[&str]) -> String {
    names
        .iter()
        .map(|name| {
            let text = function(wgsl, name);
            let before = &wgsl[..wgsl.find(text).unwrap_or(0)];
            let attribute = before
                .strip_suffix('\n')
                .and_then(|b| b.rsplit('\n').next())
                .filter(|line| line.starts_with("@compute"))
                .map(|line| format!("{line}\n"))
                .unwrap_or_default();
            format!("{attribute}{text}\n}}\n")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The entry points of a call's dispatches, in order.
pub fn dispatch_order(emitted: &mpmd_wgpu::EmittedModule) -> Vec<&str> {
    emitted
        .schedule
        .iter()
        .map(|d| d.entry_point.as_str())
        .collect()
}

/// The module's opening comment (map, mode, dispatch order and why), up to
/// its first blank line.
pub fn header(wgsl: &str) -> &str {
    wgsl.split("\n\n").next().unwrap_or(wgsl)
}

/// The module's declarations of storage bindings and workgroup and private
/// variables, with the comments that say what each holds.
pub fn declarations(wgsl: &str) -> String {
    let lines: Vec<&str> = wgsl.lines().collect();
    let mut out = String::new();
    for (k, line) in lines.iter().enumerate() {
        if line.starts_with("@group(") || line.starts_with("var<") {
            if let Some(comment) = k
                .checked_sub(1)
                .map(|j| lines[j])
                .filter(|l| l.starts_with("//"))
            {
                out.push_str(comment);
                out.push('\n');
            }
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
