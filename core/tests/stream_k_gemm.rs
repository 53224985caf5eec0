//! The flagship example, `examples/stream_k_gemm.mpmd`, computes a GEMM: the
//! interpreter's result of every call of the file (stream-K and
//! data-parallel maps, shapes whose stream-K shares split tiles unevenly) is
//! within the summation bound of an exact reference. Conformance compares the
//! backends with the interpreter; this test ties the interpreter to the
//! mathematics.

#[path = "../../test-support/gemm_config.rs"]
mod gemm_config;

use gemm_config::{bf16_tensor, quarters};
use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::ir::{Literal, Module, ScalarType};
use mpmd_core::text::parse_file;
use mpmd_core::validate::ValidModule;
use mpmd_core::{CallArgs, Mode, RunOptions};

const EXAMPLE: &str = include_str!("../../examples/stream_k_gemm.mpmd");

fn example() -> ValidModule {
    let module = parse_file(EXAMPLE)
        .unwrap_or_else(|e| panic!("{}", e.render("examples/stream_k_gemm.mpmd")))
        .module;
    mpmd_core::validate::validate(&module, &Default::default())
        .unwrap_or_else(|d| panic!("the example is not valid: {d:?}"))
}

fn capacity(module: &Module, map: &str, operand: &str) -> usize {
    let map = module.maps.iter().find(|m| m.name == map).unwrap();
    let (_, op) = map.operands().find(|(_, o)| o.name == operand).unwrap();
    op.ty.as_ref_type().unwrap().shape.iter().product::<u32>() as usize
}

fn scalar(call: &mpmd_core::ir::Call, name: &str) -> usize {
    match call.scalars.iter().find(|(n, _)| n == name) {
        Some((_, Literal::U32(v))) => *v as usize,
        other => panic!("scalar {name}: {other:?}"),
    }
}

#[test]
fn every_call_of_the_example_computes_the_product() {
    let module = example();
    let calls = module.effective_calls();
    assert!(calls.len() >= 6, "the example lost its calls");
    let mut interp = Interpreter::new();
    let options = InterpOptions {
        run: RunOptions {
            mode: Mode::Fast,
            seed: 3,
        },
        ..InterpOptions::default()
    };
    for (index, call) in calls.iter().enumerate() {
        let (m, n, k) = (scalar(call, "m"), scalar(call, "n"), scalar(call, "k"));
        let a = quarters(capacity(&module, &call.map, "a"), 2 * index as u64 + 1);
        let b = quarters(capacity(&module, &call.map, "b"), 2 * index as u64 + 2);
        let args = CallArgs {
            inputs: [
                ("a".to_string(), bf16_tensor(&a, a.len() as u32)),
                ("b".to_string(), bf16_tensor(&b, b.len() as u32)),
            ]
            .into(),
            scalars: call.scalars.iter().cloned().collect(),
        };
        let out = interp
            .call(&module, &call.map, &args, &options)
            .unwrap_or_else(|e| panic!("call {index} ({}): {e}", call.map));
        let c = out.outputs["c"].to_f32();
        assert_eq!(out.outputs["c"].elem(), ScalarType::F32);
        assert!(m * n <= c.len());
        for r in 0..m {
            for j in 0..n {
                let (mut exact, mut magnitude) = (0f64, 0f64);
                for kk in 0..k {
                    let p = f64::from(a[r * k + kk]) * f64::from(b[kk * n + j]);
                    exact += p;
                    magnitude += p.abs();
                }
                // f32 sums of k + 1 terms, in whatever order: within
                // k * 2^-24 of the magnitude (plus room for the fix-up adds).
                let bound = (k as f64 + 8.0) * f64::powi(2.0, -24) * magnitude;
                let got = f64::from(c[r * n + j]);
                assert!(
                    (got - exact).abs() <= bound,
                    "call {index} ({} m={m} n={n} k={k}): C[{r}, {j}] = {got}, exact {exact}, bound {bound}",
                    call.map
                );
            }
        }
    }
}
