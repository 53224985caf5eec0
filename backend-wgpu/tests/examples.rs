//! Every example of the repository, each call in order, on wgpu and on the
//! interpreter, with inputs from the case's generators.

mod common;

use common::*;
use mpmd_core::backend::{Backend, RunError};
use mpmd_core::case::{CompareMode, Expectation};
use mpmd_core::host::CallArgs;
use mpmd_core::inputs::{generate_input, Generation};
use mpmd_core::interp::Interpreter;
use mpmd_wgpu::WgpuOptions;

#[test]
fn every_example_matches_the_interpreter() {
    let files = example_files();
    let mut compared = 0;
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        let m = module(&source);
        let case = mpmd_core::text::parse_file(&source)
            .unwrap()
            .case
            .unwrap_or_default();
        let generation = Generation::with_defaults(7).with_generators(&case.generators);
        let mut wgpu = backend(WgpuOptions::default());
        let mut interp = Interpreter::new();
        for call in m.effective_calls() {
            let map = m.map(&call.map).unwrap();
            let p = plan(&m, &map.name);
            let mut args = CallArgs::default();
            for input in &map.inputs {
                if input.resident {
                    continue;
                }
                let t = generate_input(&m, map, input, &generation).unwrap();
                args.inputs.insert(input.name.clone(), t);
            }
            args.scalars = call.scalars.iter().cloned().collect();
            let expected = interp.run(&p, &args, &fast());
            // Cycles need co-residency: where the backend established it for
            // the plan they run fused and are compared, else they are refused.
            // A program that waits on its own signals (no cycle) runs one
            // dispatch per block (or fused, where established) and is compared.
            if p.graph.has_cycle && !wgpu.co_residency_established(&p) {
                let err = wgpu.run(&p, &args, &fast()).unwrap_err();
                assert!(
                    matches!(err, RunError::Refused { .. }),
                    "{}: {err}",
                    file.display()
                );
                continue;
            }
            let got = wgpu.run(&p, &args, &fast());
            match (&case.expect, expected, got) {
                (Expectation::Fails(class), Err(e), Err(g)) => {
                    assert_eq!(e.class(), Some(*class));
                    assert_eq!(g.class(), Some(*class), "{}: {g}", file.display());
                }
                (_, Ok(e), Ok(g)) => {
                    for (name, et) in &e.outputs {
                        let gt = &g.outputs[name];
                        let mode = case
                            .compares
                            .iter()
                            .find(|(n, _)| n == name)
                            .map(|(_, c)| c.clone());
                        // `mma` outputs too are exact here: WGSL computes
                        // the documented order (docs/numerics.md).
                        match mode {
                            Some(CompareMode::Ignore) | Some(CompareMode::Multiset) => {}
                            _ => assert_eq!(gt, et, "{}: output `{name}`", file.display()),
                        }
                    }
                    compared += 1;
                }
                (_, e, g) => panic!("{}: interpreter {e:?}, wgpu {g:?}", file.display()),
            }
        }
    }
    assert!(
        compared >= files.len() - 2,
        "compared only {compared} calls"
    );
}
