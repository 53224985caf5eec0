//! Call arguments for a module from its case section, deterministic for a seed.

use mpmd_core::host::{CallArgs, HostTensor};
use mpmd_core::ir::{Generator, Literal, Module, ScalarType, Type};

use super::rng::Rng;

/// The arguments of every call of `module` (`Module::effective_calls`), in
/// order. Inputs follow the case's generators (uniform in [-4, 4) for floats
/// without one); owned inputs get one instance per block of their owner.
pub fn call_args(module: &Module, seed: u64) -> Vec<CallArgs> {
    let case = module.case.clone().unwrap_or_default();
    let mut rng = Rng::new(seed);
    let mut all = vec![];
    for call in module.effective_calls() {
        let mut args = CallArgs::default();
        let Some(map) = module.map(&call.map) else {
            all.push(args);
            continue;
        };
        for x in &map.inputs {
            let Type::Ref(r) = &x.ty else { continue };
            if x.resident {
                continue;
            }
            let instances = r
                .owner
                .as_deref()
                .and_then(|m| module.mesh(m))
                .map_or(1, |m| m.block_count());
            let len = (r.len() * instances) as usize;
            let generator = case
                .generators
                .iter()
                .find(|(n, _)| n == &x.name)
                .map(|(_, g)| g.clone())
                .unwrap_or(Generator::Uniform {
                    lo: Literal::f32(-4.0),
                    hi: Literal::f32(4.0),
                });
            let words = (0..len)
                .map(|i| element(&generator, r.elem, i, module, &mut rng))
                .collect();
            let mut shape = vec![];
            if let Some(m) = r.owner.as_deref().and_then(|m| module.mesh(m)) {
                shape.extend(m.block_axes().map(|a| a.size));
            }
            shape.extend_from_slice(&r.shape);
            args.inputs.insert(
                x.name.clone(),
                HostTensor {
                    elem: r.elem,
                    shape,
                    words,
                },
            );
        }
        args.scalars = call.scalars.iter().cloned().collect();
        all.push(args);
    }
    all
}

fn element(g: &Generator, elem: ScalarType, i: usize, module: &Module, rng: &mut Rng) -> u32 {
    match g {
        Generator::Uniform { lo, hi } => uniform(*lo, *hi, rng),
        Generator::NonZero { lo, hi } => {
            for _ in 0..64 {
                let w = uniform(*lo, *hi, rng);
                if w != 0 && w != 0x8000_0000 {
                    return w;
                }
            }
            Literal::from_bits(elem, 1).to_bits().max(1)
        }
        Generator::Special => special(elem, rng),
        Generator::Constant(l) => l.to_bits(),
        Generator::Iota => match elem {
            ScalarType::F32 => (i as f32).to_bits(),
            ScalarType::Bool => (i % 2) as u32,
            _ => i as u32,
        },
        Generator::IndexInto { operand, dim } => {
            let extent = module
                .maps
                .iter()
                .find_map(|m| m.operand(operand))
                .and_then(|(_, o)| {
                    o.ty.as_ref_type()
                        .and_then(|r| r.shape.get(*dim as usize).copied())
                })
                .unwrap_or(1);
            let v = rng.below(extent as u64) as u32;
            if elem == ScalarType::F32 {
                (v as f32).to_bits()
            } else {
                v
            }
        }
    }
}

fn uniform(lo: Literal, hi: Literal, rng: &mut Rng) -> u32 {
    match (lo, hi) {
        (Literal::F32(a), Literal::F32(b)) => {
            let (a, b) = (a.to_f32(), b.to_f32());
            (a + (b - a) * rng.unit_f32()).min(b).to_bits()
        }
        (Literal::I32(a), Literal::I32(b)) if a <= b => {
            let span = (b as i64 - a as i64) as u64 + 1;
            (a as i64 + rng.below(span) as i64) as i32 as u32
        }
        (Literal::U32(a), Literal::U32(b)) if a <= b => {
            let span = (b - a) as u64 + 1;
            a + rng.below(span) as u32
        }
        (Literal::Bool(_), Literal::Bool(_)) => rng.below(2) as u32,
        (lo, _) => lo.to_bits(),
    }
}

fn special(elem: ScalarType, rng: &mut Rng) -> u32 {
    let edges: &[u32] = match elem {
        ScalarType::F32 => &[
            0,
            0x8000_0000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            1,
            0x007F_FFFF,
            0x3F80_0000,
            0xBF80_0000,
            0x7F7F_FFFF,
        ],
        ScalarType::I32 => &[0, 1, u32::MAX, 0x8000_0000, 0x7FFF_FFFF, 2, 31, 32],
        ScalarType::U32 => &[0, 1, u32::MAX, 0x8000_0000, 0x7FFF_FFFF, 2, 31, 32],
        ScalarType::Bool => &[0, 1],
    };
    if rng.chance(50) {
        *rng.pick(edges)
    } else if elem == ScalarType::Bool {
        rng.below(2) as u32
    } else if elem == ScalarType::F32 {
        ((rng.unit_f32() - 0.5) * 8.0).to_bits()
    } else {
        rng.next_u32()
    }
}
