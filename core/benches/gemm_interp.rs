//! The interpreter on `examples/stream_k_gemm.mpmd` at small shapes: both
//! maps at 64 x 64 tiles (2 x 2 warps, `test-support/gemm_config.rs`), WAVE
//! = 4 blocks a program and capacities of exactly the shape, detection off
//! (the fast path `mpmd run` takes) and on (what conformance runs). Prints
//! one line per run: the best time of a few calls and multiply-adds per
//! second. Each result is checked first against an exact host sum (inputs
//! are multiples of 1/4 in [-2, 2], so every order of f32 sums is exact).
//!
//! `cargo bench -p mpmd-core --bench gemm_interp` (also run by `cargo xtask
//! bench interp`).

#[path = "../../test-support/gemm_config.rs"]
mod gemm_config;

use std::time::Instant;

use gemm_config::*;
use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::ir::Literal;
use mpmd_core::CallArgs;

/// Each leaves a partial wave of tiles, so `stream_k` runs both programs:
/// 1 tile (all stream-K), 4 tiles of which 1 is stream-K, 4 tiles again
/// with a longer k.
const SHAPES: [GemmShape; 3] = [
    GemmShape::new(64, 64, 128),
    GemmShape::new(96, 80, 160),
    GemmShape::new(128, 128, 256),
];

/// Blocks a program. The stream-K share of each shape has at least WAVE
/// iterations ((tiles % WAVE) * ceil(k / 32) >= 3): with fewer, some block
/// gets none and never signals the semaphore its tile's owner waits on, and
/// the example deadlocks (64x64x64 at WAVE 3 or more does).
const WAVE: u32 = 3;

/// Timed calls of each run (after one checked call).
const CALLS: usize = 3;

fn main() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/stream_k_gemm.mpmd"
    );
    let source = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let config = GEMM_CONFIGS[0];
    for shape in SHAPES {
        let caps = GemmCaps::holding(&[shape]).expect("small shapes fit u32");
        let module = config
            .module(&source, WAVE, caps)
            .unwrap_or_else(|e| panic!("{e}"));
        let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
        let a = quarters(m * k, 1);
        let b = quarters(k * n, 2);
        let mut args = CallArgs::default();
        args.inputs
            .insert("a".into(), bf16_tensor(&a, a.len() as u32));
        args.inputs
            .insert("b".into(), bf16_tensor(&b, b.len() as u32));
        for (name, value) in [("m", shape.m), ("n", shape.n), ("k", shape.k)] {
            args.scalars.insert(name.into(), Literal::U32(value));
        }
        let want: Vec<f32> = (0..m * n)
            .map(|i| {
                let (r, j) = (i / n, i % n);
                (0..k).map(|kk| a[r * k + kk] * b[kk * n + j]).sum()
            })
            .collect();
        for map in GEMM_MAPS {
            for detect in [false, true] {
                let options = InterpOptions {
                    detect,
                    ..Default::default()
                };
                let mut interp = Interpreter::new();
                let outputs = interp
                    .call(&module, map, &args, &options)
                    .unwrap_or_else(|e| panic!("{map} at {}: {e}", shape.label()));
                let c = outputs.outputs["c"].to_f32();
                assert_eq!(c.len(), m * n, "{map}: c holds m * n elements");
                if let Some(i) = (0..m * n).find(|&i| c[i] != want[i]) {
                    panic!(
                        "{map} at {}: c[{i}] = {}, the exact sum is {}",
                        shape.label(),
                        c[i],
                        want[i]
                    );
                }
                let mut best = f64::INFINITY;
                for _ in 0..CALLS {
                    let start = Instant::now();
                    interp
                        .call(&module, map, &args, &options)
                        .expect("the checked call ran");
                    best = best.min(start.elapsed().as_secs_f64());
                }
                println!(
                    "interp.gemm.{}.{map}.{} detect={} ms={:.2} macs_per_s={:.3e}",
                    config.label(),
                    shape.label(),
                    if detect { "on" } else { "off" },
                    best * 1e3,
                    shape.macs() / best
                );
            }
        }
    }
}
