//! The configurations of `examples/stream_k_gemm.mpmd` that `cuda-bench`
//! times, `backend-cuda/tests/gemm.rs` assembles and `core/benches/
//! gemm_interp.rs` interprets: the example's constants given other values
//! through `text::parse_file_with`, so one text serves every tile
//! configuration, SM count and capacity; and the inputs every GEMM check
//! uses ([`quarters`]). Included by path (`#[path]`, as `needs.rs` is, also
//! by `core/tests/stream_k_gemm.rs` and `cli/tests/examples.rs`) so that all
//! instantiate and feed the example the same way; it depends on `mpmd-core`
//! alone.
#![allow(dead_code)]

use mpmd_core::inputs::Rng;
use mpmd_core::ir::{Literal, ScalarType};
use mpmd_core::text::parse_file_with;
use mpmd_core::validate::ValidModule;
use mpmd_core::HostTensor;

/// The example's file name, in the repository's `examples/`.
pub const GEMM_FILE: &str = "stream_k_gemm.mpmd";

/// Its maps: the stream-K split and every tile data-parallel.
pub const GEMM_MAPS: [&str; 2] = ["stream_k", "data_parallel"];

/// k per step of the main loop (the example's `BK`).
const BK: u32 = 32;

/// Output elements each warp computes (a 32 x 32 tile).
const WARP_TILE: u32 = 32;

/// A block of `warps_m x warps_n` warps, each computing 32 x 32 of C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmConfig {
    pub warps_m: u32,
    pub warps_n: u32,
}

/// The configurations benchmarked: 64 x 64 (2 x 2 warps) and 128 x 128
/// (4 x 4 warps) tiles.
pub const GEMM_CONFIGS: [GemmConfig; 2] = [
    GemmConfig {
        warps_m: 2,
        warps_n: 2,
    },
    GemmConfig {
        warps_m: 4,
        warps_n: 4,
    },
];

/// `m x k` times `k x n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

impl GemmShape {
    pub const fn new(m: u32, n: u32, k: u32) -> Self {
        GemmShape { m, n, k }
    }

    pub fn label(self) -> String {
        format!("{}x{}x{}", self.m, self.n, self.k)
    }

    /// Multiply-adds: m * n * k.
    pub fn macs(self) -> f64 {
        self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// The shapes benchmarked: a large square GEMM (the comparison with
/// cuBLAS), and few output tiles with a long k (where stream-K's split of k
/// beats whole tiles: 1536^2 is 144 tiles of 128 x 128, a wave and a bit on
/// 132 SMs).
pub const GEMM_SHAPES: [GemmShape; 2] = [
    GemmShape::new(4096, 4096, 4096),
    GemmShape::new(1536, 1536, 16384),
];

/// The SM count the no-GPU figures assume for `WAVE` (an H100's or H200's;
/// registers and spills do not depend on it).
pub const COMPILE_WAVE: u32 = 132;

/// Buffer capacities in elements of `a`, `b` and `c`: the example's
/// `A_CAP`, `B_CAP`, `C_CAP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmCaps {
    pub a: u32,
    pub b: u32,
    pub c: u32,
}

impl GemmCaps {
    /// The smallest capacities that hold every shape (at least 1 each).
    pub fn holding(shapes: &[GemmShape]) -> Result<Self, String> {
        let product = |x: u32, y: u32, what: &str| {
            x.checked_mul(y)
                .ok_or_else(|| format!("{what} of {x} x {y} elements passes u32"))
        };
        let mut caps = GemmCaps { a: 1, b: 1, c: 1 };
        for shape in shapes {
            caps.a = caps.a.max(product(shape.m, shape.k, "a")?);
            caps.b = caps.b.max(product(shape.k, shape.n, "b")?);
            caps.c = caps.c.max(product(shape.m, shape.n, "c")?);
        }
        Ok(caps)
    }
}

impl GemmConfig {
    /// `64x64` for 2 x 2 warps.
    pub fn label(self) -> String {
        format!("{}x{}", self.bm(), self.bn())
    }

    pub fn threads(self) -> u32 {
        32 * self.warps_m * self.warps_n
    }

    pub fn bm(self) -> u32 {
        WARP_TILE * self.warps_m
    }

    pub fn bn(self) -> u32 {
        WARP_TILE * self.warps_n
    }

    /// Every constant of the example's header, derived from the warps, the
    /// blocks of each program's grid (`wave`, the GPU's SM count) and the
    /// capacities; an error where a derived value passes u32 or a tile does
    /// not split evenly over the threads.
    pub fn constants(
        self,
        wave: u32,
        caps: GemmCaps,
    ) -> Result<Vec<(&'static str, Literal)>, String> {
        let threads = self.threads();
        let (bm, bn) = (self.bm(), self.bn());
        if threads == 0 || !(bm * BK).is_multiple_of(threads) || !(BK * bn).is_multiple_of(threads)
        {
            return Err(format!(
                "a {bm} x {bn} tile of {threads} threads does not split its {BK}-deep loads evenly"
            ));
        }
        let partials = wave
            .checked_mul(threads)
            .and_then(|x| x.checked_mul(WARP_TILE))
            .ok_or_else(|| format!("PARTIALS = {wave} * {threads} * 32 passes u32"))?;
        Ok([
            ("WARPS_M", self.warps_m),
            ("WARPS_N", self.warps_n),
            ("THREADS", threads),
            ("BM", bm),
            ("BN", bn),
            ("BK", BK),
            ("SA", BK + 8),
            ("SB", bn + 8),
            ("A_LOADS", bm * BK / threads),
            ("B_LOADS", BK * bn / threads),
            ("WAVE", wave),
            ("A_CAP", caps.a),
            ("B_CAP", caps.b),
            ("C_CAP", caps.c),
            ("PARTIALS", partials),
        ]
        .into_iter()
        .map(|(name, value)| (name, Literal::U32(value)))
        .collect())
    }

    /// The example instantiated at this configuration, validated.
    pub fn module(self, source: &str, wave: u32, caps: GemmCaps) -> Result<ValidModule, String> {
        let constants = self.constants(wave, caps)?;
        let file = parse_file_with(source, &constants)
            .map_err(|e| format!("{GEMM_FILE} at {}: {e}", self.label()))?;
        // Within validation's default 48 KiB of smem: 128 x 128 tiles take
        // 37 KiB of double-buffered bf16 A and B.
        mpmd_core::validate::validate(&file.module, &Default::default()).map_err(|diagnostics| {
            format!(
                "{GEMM_FILE} at {} is not valid: {}",
                self.label(),
                diagnostics
                    .iter()
                    .map(|d| format!("{} {}: {}", d.code, d.path, d.message))
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        })
    }
}

/// `len` multiples of 1/4 in [-2, 2] from `seed`. They are exact in bf16,
/// and every f32 sum of up to 2^16 of their products is a multiple of 1/16
/// below 2^18, exact in any order: a GEMM of them has one right result,
/// whatever order the backend (or cuBLAS, or a tensor core) sums in.
pub fn quarters(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..len)
        .map(|_| (rng.next_u64() % 17) as f32 * 0.25 - 2.0)
        .collect()
}

/// The bf16 bits of [`quarters`]: the high half of their f32 bits (exact).
pub fn bf16_bits(values: &[f32]) -> Vec<u16> {
    values.iter().map(|v| (v.to_bits() >> 16) as u16).collect()
}

/// [`quarters`] as a bf16 tensor of `len` elements, zero past the values.
pub fn bf16_tensor(values: &[f32], len: u32) -> HostTensor {
    let mut bits: Vec<u32> = bf16_bits(values).into_iter().map(u32::from).collect();
    bits.resize(len as usize, 0);
    HostTensor::new(ScalarType::BF16, vec![len], bits).expect("one word per element")
}
