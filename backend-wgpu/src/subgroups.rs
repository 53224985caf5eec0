//! Which warp path an adapter gets: native subgroup operations only where
//! the device has them and every subgroup is exactly 32 invocations wide
//! (a logical warp); the emulation through workgroup memory everywhere else.

use crate::emit::WarpPath;
use crate::runtime::WgpuBackend;
use mpmd_core::backend::{Backend, RunOptions};
use mpmd_core::host::CallArgs;
use mpmd_core::ir::WARP_SIZE;

/// What a device says about its subgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubgroupFacts {
    /// The device was created with `wgpu::Features::SUBGROUP`.
    pub feature: bool,
    /// The adapter's smallest and largest subgroup sizes
    /// (`wgpu::AdapterInfo::subgroup_min_size`, `subgroup_max_size`).
    pub min_size: u32,
    pub max_size: u32,
}

/// The warp path a backend uses on its adapter, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarpChoice {
    pub path: WarpPath,
    /// The reason, for reports (conformance's environment lines).
    pub why: String,
}

impl WarpChoice {
    /// Native only when the device has subgroup operations and its
    /// subgroups are always 32 invocations wide; the shader still checks
    /// at run time that each subgroup is one logical warp.
    pub fn for_adapter(facts: SubgroupFacts) -> WarpChoice {
        let emulated = |why: String| WarpChoice {
            path: WarpPath::Emulated,
            why,
        };
        if !facts.feature {
            return emulated(
                "the device has no subgroup operations (wgpu::Features::SUBGROUP)".to_string(),
            );
        }
        if facts.min_size != WARP_SIZE || facts.max_size != WARP_SIZE {
            let sizes = if facts.min_size == facts.max_size {
                format!("{}", facts.min_size)
            } else {
                format!("{} to {}", facts.min_size, facts.max_size)
            };
            return emulated(format!(
                "the adapter's subgroups are {sizes} invocations wide, not always {WARP_SIZE} (a logical warp)"
            ));
        }
        WarpChoice {
            path: WarpPath::Native,
            why: format!(
                "the adapter's subgroups are {WARP_SIZE} invocations wide; each entry point checks at run time \
                 that its subgroups are the logical warps"
            ),
        }
    }

    /// The path the user asked for (`WgpuOptions::warps`), with what the
    /// adapter would give. Native needs the device's subgroup operations;
    /// without them the emulation runs, saying so.
    pub fn requested(path: WarpPath, facts: SubgroupFacts) -> WarpChoice {
        let adapter = WarpChoice::for_adapter(facts);
        let would = match adapter.path {
            WarpPath::Native => "native",
            WarpPath::Emulated => "emulated",
        };
        if path == WarpPath::Native && !facts.feature {
            return WarpChoice {
                path: WarpPath::Emulated,
                why: format!(
                    "WgpuOptions::warps asks for native subgroups, but {}",
                    adapter.why
                ),
            };
        }
        WarpChoice {
            path,
            why: format!(
                "requested by WgpuOptions::warps; the adapter's own choice would be {would}: {}",
                adapter.why
            ),
        }
    }
}

impl WarpChoice {
    /// The native choice after its probe passed.
    pub(crate) fn probed(self) -> WarpChoice {
        WarpChoice {
            why: format!(
                "{}; a probe dispatch of native collectives agreed",
                self.why
            ),
            ..self
        }
    }

    /// The emulation, because the probe of native collectives failed.
    pub(crate) fn refuted(self, failure: &str) -> WarpChoice {
        WarpChoice {
            path: WarpPath::Emulated,
            why: format!(
                "the adapter reports subgroups of {WARP_SIZE} invocations, but a probe dispatch of native \
                 collectives failed: {failure}"
            ),
        }
    }
}

/// Two blocks of 4 warps: each lane's warp sum, its `shfl_down` by 1 and
/// the ballot of odd thread ids, which the probe compares with what they
/// mean (docs/text-format.md).
const PROBE: &str = "
mesh m {
  grid [b = 2];
  threads t = 128;
}
kernel probe(y: gmem<u32[768]>) {
  let i: u32 = axis_index(b) * 128u + axis_index(t);
  let sum: u32 = reduce_add(i);
  let down: u32 = shfl_down(i, 1u);
  let odd: u32 = ballot(i % 2u == 1u);
  y[3u * i] = sum;
  y[3u * i + 1u] = down;
  y[3u * i + 2u] = odd;
}
map probe {
  programs [m: probe];
  outputs [y: gmem<u32[768]>];
}
";

/// Runs [`PROBE`] on `backend` (native warps): `Err` with the run's error
/// (the entry point's check) or the first value that differs.
pub(crate) fn probe(backend: &mut WgpuBackend) -> Result<(), String> {
    let (module, _) = mpmd_core::text::parse(PROBE).map_err(|e| format!("{e:?}"))?;
    let module = mpmd_core::validate::validate(&module, &Default::default())
        .map_err(|d| format!("{d:?}"))?;
    let plan = mpmd_core::plan::lower(&module, "probe").map_err(|e| e.to_string())?;
    let outputs = backend
        .run(&plan, &CallArgs::default(), &RunOptions::default())
        .map_err(|e| e.to_string())?;
    let got = outputs
        .outputs
        .get("y")
        .map(|y| y.to_u32())
        .ok_or("the probe returned no `y`")?;
    for i in 0..256u32 {
        let warp_first = i & !31;
        let expected = [
            WARP_SIZE * warp_first + WARP_SIZE * (WARP_SIZE - 1) / 2,
            if i % 32 < 31 { i + 1 } else { i },
            0xaaaa_aaaa,
        ];
        for (k, (what, want)) in ["reduce_add", "shfl_down", "ballot"]
            .iter()
            .zip(expected)
            .enumerate()
        {
            let seen = got.get(3 * i as usize + k).copied();
            if seen != Some(want) {
                return Err(format!(
                    "thread {i}'s {what} gave {seen:?} where the language gives {want}"
                ));
            }
        }
    }
    Ok(())
}

impl std::fmt::Display for WarpChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.path {
            WarpPath::Native => write!(f, "native subgroups ({})", self.why),
            WarpPath::Emulated => write!(f, "emulated through workgroup memory ({})", self.why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(feature: bool, min_size: u32, max_size: u32) -> SubgroupFacts {
        SubgroupFacts {
            feature,
            min_size,
            max_size,
        }
    }

    #[test]
    fn lavapipe_gets_the_emulation_with_its_subgroup_size() {
        let choice = WarpChoice::for_adapter(facts(true, 8, 8));
        assert_eq!(choice.path, WarpPath::Emulated);
        assert_eq!(
            choice.to_string(),
            "emulated through workgroup memory (the adapter's subgroups are 8 invocations wide, \
             not always 32 (a logical warp))"
        );
    }

    #[test]
    fn thirty_two_wide_subgroups_get_native_collectives() {
        let choice = WarpChoice::for_adapter(facts(true, 32, 32));
        assert_eq!(choice.path, WarpPath::Native);
        assert_eq!(
            choice.to_string(),
            "native subgroups (the adapter's subgroups are 32 invocations wide; each entry point checks \
             at run time that its subgroups are the logical warps)"
        );
    }

    #[test]
    fn sizes_that_may_differ_from_32_or_no_feature_get_the_emulation() {
        // RDNA: 32 or 64; Intel: 8 to 32; no feature at all even at 32.
        for (f, why) in [
            (
                facts(true, 32, 64),
                "the adapter's subgroups are 32 to 64 invocations wide, not always 32 (a logical warp)",
            ),
            (
                facts(true, 8, 32),
                "the adapter's subgroups are 8 to 32 invocations wide, not always 32 (a logical warp)",
            ),
            (
                facts(false, 32, 32),
                "the device has no subgroup operations (wgpu::Features::SUBGROUP)",
            ),
        ] {
            let choice = WarpChoice::for_adapter(f);
            assert_eq!(choice.path, WarpPath::Emulated, "{f:?}");
            assert_eq!(choice.why, why, "{f:?}");
        }
    }

    #[test]
    fn a_request_is_honoured_where_the_device_allows_it() {
        let emulated = WarpChoice::requested(WarpPath::Emulated, facts(true, 32, 32));
        assert_eq!(emulated.path, WarpPath::Emulated);
        assert_eq!(
            emulated.why,
            "requested by WgpuOptions::warps; the adapter's own choice would be native: the adapter's \
             subgroups are 32 invocations wide; each entry point checks at run time that its subgroups \
             are the logical warps"
        );
        // Native on lavapipe's subgroups of 8: the run-time check reports it.
        let forced = WarpChoice::requested(WarpPath::Native, facts(true, 8, 8));
        assert_eq!(forced.path, WarpPath::Native);
        assert_eq!(
            forced.why,
            "requested by WgpuOptions::warps; the adapter's own choice would be emulated: the adapter's \
             subgroups are 8 invocations wide, not always 32 (a logical warp)"
        );
        let impossible = WarpChoice::requested(WarpPath::Native, facts(false, 32, 32));
        assert_eq!(impossible.path, WarpPath::Emulated);
        assert_eq!(
            impossible.why,
            "WgpuOptions::warps asks for native subgroups, but the device has no subgroup operations \
             (wgpu::Features::SUBGROUP)"
        );
    }
}
