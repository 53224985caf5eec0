//! Which f16 conversions an adapter gets: the adapter-dependent ones
//! (`F16Conversions::Native`: WGSL's `unpack2x16float` to widen; to narrow,
//! a branch-free rounding whose subnormal case is the adapter's f32
//! addition, `|x| + 0.5`) only where a probe dispatch found them to be the
//! language's conversions (docs/numerics.md, "f16 and bf16"); the
//! conversions written out on the bits everywhere else.
//!
//! WGSL pins down neither what `unpack2x16float` does with subnormals nor
//! which way an f32 addition rounds ("correctly rounded" allows either
//! neighbour), so nothing is assumed: once per device, the first plan that
//! has f16 values runs [`PROBE`] with these conversions and compares every
//! result with `mpmd_core::numerics`: every one of the 65,536 f16 patterns
//! widened (exact; a NaN must stay a NaN, its payload being unspecified),
//! and narrowed: every finite f16 value, the midpoint between it and the
//! next one up in magnitude (a tie: to even) and the f32 values on either
//! side of that midpoint, both signs, then the overflow threshold, f32
//! subnormals, infinities and NaNs. A rounding that is not to nearest even,
//! an overflow that is not infinity, a flushed subnormal or a NaN that
//! becomes an infinity shows up in these values whatever the implementation
//! (rounding is monotonic on each side of zero, so its boundaries are the
//! midpoints).

use std::fmt;

use mpmd_core::backend::{Backend, RunOptions};
use mpmd_core::host::{CallArgs, HostTensor};
use mpmd_core::ir::{visit, Expr, Kernel, Literal, ScalarType, Stmt, Type};
use mpmd_core::numerics::{f16_from_f32, f16_to_f32};
use mpmd_core::plan::LaunchPlan;

use crate::emit::F16Conversions;
use crate::runtime::WgpuBackend;

/// The f16 conversions a backend uses on its adapter, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct F16Choice {
    pub conversions: F16Conversions,
    /// The reason, for reports.
    pub why: String,
}

impl F16Choice {
    /// What the probe found: native conversions, or the reason why not.
    pub(crate) fn probed(result: Result<(), String>) -> F16Choice {
        match result {
            Ok(()) => F16Choice {
                conversions: F16Conversions::Native,
                why: "a probe dispatch found them exact on every f16 pattern and every rounding \
                      boundary"
                    .to_string(),
            },
            Err(failure) => F16Choice {
                conversions: F16Conversions::Emulated,
                why: format!(
                    "a probe dispatch of unpack2x16float and pack2x16float failed: {failure}"
                ),
            },
        }
    }

    /// The conversions the user asked for (`WgpuOptions::f16_conversions`).
    pub(crate) fn requested(conversions: F16Conversions) -> F16Choice {
        F16Choice {
            conversions,
            why: "requested by WgpuOptions::f16_conversions".to_string(),
        }
    }
}

impl fmt::Display for F16Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.conversions {
            F16Conversions::Native => write!(f, "native f16 conversions ({})", self.why),
            F16Conversions::Emulated => {
                write!(f, "f16 conversions on the bits ({})", self.why)
            }
        }
    }
}

/// Whether any program of `plan` has an f16 value, so that its code may
/// convert f16 (the choice, and its probe, matter only then): an f16
/// parameter, array, `let`, `var`, literal, cast or bitcast. Every f16
/// value of a kernel comes from one of these.
pub(crate) fn plan_has_f16(plan: &LaunchPlan) -> bool {
    plan.units.iter().any(|unit| kernel_has_f16(&unit.kernel))
}

fn kernel_has_f16(kernel: &Kernel) -> bool {
    let f16 = ScalarType::F16;
    let params = kernel.params.iter().any(|p| match &p.ty {
        Type::Scalar(t) => *t == f16,
        Type::Ref(r) => r.elem == f16,
    });
    let mut found = params;
    visit::for_each_stmt(&kernel.body, &mut |stmt| match stmt {
        Stmt::Let { var, .. } | Stmt::Var { var, .. } => found |= var.ty == f16,
        Stmt::LocalArray { elem, .. } => found |= *elem == f16,
        _ => {}
    });
    visit::for_each_expr(&kernel.body, &mut |e| match e {
        Expr::Lit(Literal::F16(_)) => found = true,
        Expr::Cast(t, _) | Expr::Bitcast(t, _) => found |= *t == f16,
        _ => {}
    });
    found
}

/// Every f16 pattern widened to `wide`, every value of `f` narrowed to
/// `narrow`: the conversions of the emitted helpers, with a run of pairs
/// of neighbouring f16 stores as in any elementwise kernel.
const PROBE: &str = "
mesh m {
  grid [b = {blocks}];
  threads t = 256;
}
kernel probe(h: gmem<f16[65536]>, f: gmem<f32[{n}]>, wide: gmem<f32[65536]>, narrow: gmem<f16[{n}]>) {
  let i: u32 = axis_index(b) * 256u + axis_index(t);
  if i < 65536u {
    wide[i] = f32(h[i]);
  }
  if i < {n}u {
    narrow[i] = f16(f[i]);
  }
}
map probe {
  programs [m: probe];
  inputs [h: gmem<f16[65536]>, f: gmem<f32[{n}]>];
  outputs [wide: gmem<f32[65536]>, narrow: gmem<f16[{n}]>];
}
";

/// The f32 values (as bits) the probe narrows: see the module's documentation.
pub(crate) fn narrow_inputs() -> Vec<u32> {
    let mut values = Vec::new();
    for sign in [0u32, 0x8000_0000] {
        // Every finite f16 magnitude, its midpoint with the next one up
        // (65520 past the largest: the overflow threshold) and the f32
        // values on either side of that midpoint.
        for h in 0u16..0x7c00 {
            let v = f16_to_f32(h);
            let next = if h == 0x7bff {
                65536.0
            } else {
                f16_to_f32(h + 1)
            };
            let mid = (v + next) / 2.0;
            for bits in [
                v.to_bits(),
                mid.to_bits(),
                mid.to_bits() - 1,
                mid.to_bits() + 1,
            ] {
                values.push(sign | bits);
            }
        }
        for bits in [
            // f32 subnormals, the smallest normal, far below and far above f16's range.
            0x0000_0001,
            0x0000_1000,
            0x007f_ffff,
            0x0080_0000,
            0x2000_0000,
            0x5f80_0000,
            0x7f7f_ffff,
            // Infinity, quiet and signalling NaNs (payloads high, low and in between).
            0x7f80_0000,
            0x7fc0_0000,
            0x7fc0_2000,
            0x7fff_ffff,
            0x7f80_0001,
            0x7f80_1fff,
            0x7fa0_0000,
        ] {
            values.push(sign | bits);
        }
    }
    values
}

/// Compares what the adapter computed with the language's conversions:
/// `wide[p]` (f32 bits) of f16 pattern `p`, `narrow[k]` of f32 bits
/// `inputs[k]`. NaN payloads are unspecified (docs/numerics.md): a NaN
/// must give a NaN; every other result must be the same bits.
pub(crate) fn check(wide: &[u32], inputs: &[u32], narrow: &[u32]) -> Result<(), String> {
    if wide.len() != 65536 || narrow.len() != inputs.len() {
        return Err(format!(
            "the probe returned {} widened and {} narrowed values, not 65536 and {}",
            wide.len(),
            narrow.len(),
            inputs.len()
        ));
    }
    for (pattern, &got) in wide.iter().enumerate() {
        let want = f16_to_f32(pattern as u16);
        let same = got == want.to_bits() || (want.is_nan() && f32::from_bits(got).is_nan());
        if !same {
            return Err(format!(
                "widening f16 {pattern:#06x} gave f32 {got:#010x}, not {:#010x}",
                want.to_bits()
            ));
        }
    }
    let half_is_nan = |b: u32| b & 0x7c00 == 0x7c00 && b & 0x3ff != 0;
    for (&input, &got) in inputs.iter().zip(narrow) {
        let want = u32::from(f16_from_f32(f32::from_bits(input)));
        let same = got == want || (half_is_nan(want) && got <= 0xffff && half_is_nan(got));
        if !same {
            return Err(format!(
                "narrowing f32 {input:#010x} ({:e}) gave f16 {got:#06x}, not {want:#06x}",
                f32::from_bits(input)
            ));
        }
    }
    Ok(())
}

/// Runs [`PROBE`] on `backend` (native f16 conversions): `Err` with the
/// run's error or the first conversion that differs.
pub(crate) fn probe(backend: &mut WgpuBackend) -> Result<(), String> {
    let inputs = narrow_inputs();
    let n = inputs.len();
    let blocks = n.max(65536).div_ceil(256);
    let source = PROBE
        .replace("{blocks}", &blocks.to_string())
        .replace("{n}", &n.to_string());
    let (module, _) = mpmd_core::text::parse(&source).map_err(|e| format!("{e:?}"))?;
    let module = mpmd_core::validate::validate(&module, &Default::default())
        .map_err(|d| format!("{d:?}"))?;
    let plan = mpmd_core::plan::lower(&module, "probe").map_err(|e| e.to_string())?;
    let shape = |len: usize| vec![len as u32];
    let patterns: Vec<u32> = (0..=u16::MAX).map(u32::from).collect();
    let args = CallArgs {
        inputs: [
            (
                "h".to_string(),
                HostTensor::new(ScalarType::F16, shape(65536), patterns)
                    .map_err(|e| e.to_string())?,
            ),
            (
                "f".to_string(),
                HostTensor::new(ScalarType::F32, shape(n), inputs.clone())
                    .map_err(|e| e.to_string())?,
            ),
        ]
        .into(),
        ..CallArgs::default()
    };
    let outputs = backend
        .run(&plan, &args, &RunOptions::default())
        .map_err(|e| e.to_string())?;
    let output = |name: &str| {
        outputs
            .outputs
            .get(name)
            .map(HostTensor::to_u32)
            .ok_or(format!("the probe returned no `{name}`"))
    };
    check(&output("wide")?, &inputs, &output("narrow")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a correct adapter returns for the probe's inputs.
    fn exact() -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        let wide = (0..=u16::MAX).map(|p| f16_to_f32(p).to_bits()).collect();
        let inputs = narrow_inputs();
        let narrow = inputs
            .iter()
            .map(|&b| u32::from(f16_from_f32(f32::from_bits(b))))
            .collect();
        (wide, inputs, narrow)
    }

    #[test]
    fn the_language_s_conversions_pass() {
        let (wide, inputs, narrow) = exact();
        assert_eq!(check(&wide, &inputs, &narrow), Ok(()));
    }

    #[test]
    fn other_nan_payloads_pass() {
        let (mut wide, inputs, mut narrow) = exact();
        // A quieted signalling NaN, a NaN narrowed with its payload.
        wide[0x7c01] = 0x7fc0_2000;
        let k = inputs.iter().position(|&b| b == 0x7fc0_2000).unwrap();
        narrow[k] = 0x7e00;
        assert_eq!(check(&wide, &inputs, &narrow), Ok(()));
    }

    /// An adapter that converts some other way fails the probe, whatever it
    /// gets wrong: each of these is a conversion some hardware makes.
    #[test]
    fn every_other_conversion_fails() {
        let (wide, inputs, narrow) = exact();
        let round_toward_zero = |b: u32| {
            let v = f32::from_bits(b);
            let r = f16_from_f32(v);
            // One step back toward zero where rounding went away from it.
            if !v.is_nan() && f16_to_f32(r).abs() > v.abs() {
                u32::from(r.wrapping_sub(1))
            } else {
                u32::from(r)
            }
        };
        let ties_away = |b: u32| {
            let v = f32::from_bits(b);
            let r = f16_from_f32(v);
            let up = f16_to_f32(r.wrapping_add(1));
            if (v.abs() - f16_to_f32(r).abs()) * 2.0 == (up.abs() - f16_to_f32(r).abs())
                && r & 0x7c00 != 0x7c00
            {
                u32::from(r.wrapping_add(1))
            } else {
                u32::from(r)
            }
        };
        let flush_subnormals = |b: u32| {
            let r = f16_from_f32(f32::from_bits(b));
            u32::from(if r & 0x7c00 == 0 { r & 0x8000 } else { r })
        };
        let saturate = |b: u32| {
            let r = f16_from_f32(f32::from_bits(b));
            u32::from(if r & 0x7fff == 0x7c00 { r - 1 } else { r })
        };
        let truncate_nan = |b: u32| {
            let v = f32::from_bits(b);
            if v.is_nan() {
                ((b >> 16) & 0x8000) | 0x7c00 | ((b >> 13) & 0x3ff)
            } else {
                u32::from(f16_from_f32(v))
            }
        };
        for (what, wrong) in [
            (
                "round toward zero",
                &round_toward_zero as &dyn Fn(u32) -> u32,
            ),
            ("ties away from zero", &ties_away),
            ("flushed subnormals", &flush_subnormals),
            ("saturating overflow", &saturate),
            ("NaN payload truncated to an infinity", &truncate_nan),
        ] {
            let narrowed: Vec<u32> = inputs.iter().map(|&b| wrong(b)).collect();
            assert!(
                check(&wide, &inputs, &narrowed).is_err(),
                "{what} passed the probe"
            );
        }
        let flushed_wide: Vec<u32> = (0..=u16::MAX)
            .map(|p| match p & 0x7c00 {
                0 => (u32::from(p) & 0x8000) << 16,
                _ => f16_to_f32(p).to_bits(),
            })
            .collect();
        let err = check(&flushed_wide, &inputs, &narrow).unwrap_err();
        assert_eq!(
            err,
            "widening f16 0x0001 gave f32 0x00000000, not 0x33800000"
        );
        let nan_to_infinity: Vec<u32> = (0..=u16::MAX)
            .map(|p| match p & 0x7fff > 0x7c00 {
                true => (u32::from(p) & 0x8000) << 16 | 0x7f80_0000,
                false => f16_to_f32(p).to_bits(),
            })
            .collect();
        assert!(check(&nan_to_infinity, &inputs, &narrow).is_err());
    }
}
