use super::*;

#[test]
fn same_seed_same_module() {
    assert_eq!(generate(42), generate(42));
    assert_ne!(generate(42), generate(43));
}

fn has_warps(file: &CaseFile) -> bool {
    file.module.kernels.iter().any(|k| {
        let mut found = false;
        mpmd_core::ir::visit::for_each_stmt(&k.body, &mut |s| {
            found |= matches!(s, Stmt::Warp { .. })
        });
        found
    })
}

/// Warp collectives come from a stream of their own: a module without
/// them is the module the generator made before it had them (`warps: 0`
/// draws nothing from that stream), and `warps: 100` puts them in every
/// module, in its first program at least.
#[test]
fn modules_without_warps_are_unchanged_by_the_warp_option() {
    let with = |warps| GenOptions {
        warps,
        ..GenOptions::default()
    };
    let mut unchanged = 0;
    for seed in 0..60 {
        let never = generate_with(seed, &with(0));
        assert!(!has_warps(&never), "seed {seed}");
        let default = generate(seed);
        if !has_warps(&default) {
            assert_eq!(default, never, "seed {seed}");
            unchanged += 1;
        }
        let always = generate_with(seed, &with(100));
        assert!(has_warps(&always), "seed {seed}");
        assert_eq!(always, generate_with(seed, &with(100)), "seed {seed}");
    }
    assert!((30..60).contains(&unchanged), "{unchanged} of 60");
}

fn has_mma(file: &CaseFile) -> bool {
    file.module.kernels.iter().any(|k| {
        let mut found = false;
        mpmd_core::ir::visit::for_each_stmt(&k.body, &mut |s| {
            found |= matches!(s, Stmt::Mma { .. })
        });
        found
    })
}

/// `file` without what the mma groups add: their statements (`mm<g>_`
/// names, the tile's barrier, a branch around a group) and operands;
/// and without kernel parameters, which follow the operands the
/// kernels name (an input only the mma statements read stays a
/// parameter).
fn without_mma(file: &CaseFile) -> CaseFile {
    let mut file = file.clone();
    let mma_operand = |name: &str| {
        [MMA_OUTPUT_PREFIX, MMA_TILE_PREFIX, MMA_INPUT_PREFIX]
            .iter()
            .any(|p| name.starts_with(p))
    };
    let mma_stmt = |s: &Stmt| match s {
        Stmt::Mma { .. } | Stmt::MmaLoad { .. } => true,
        Stmt::LocalArray { name, .. } => name.starts_with("mm"),
        Stmt::For { var, .. } => var.name.starts_with("mm"),
        Stmt::If { then_body, .. } => {
            matches!(then_body.first(), Some(Stmt::LocalArray { name, .. }) if name.starts_with("mm"))
        }
        _ => false,
    };
    for k in &mut file.module.kernels {
        let mut body = vec![];
        let mut after_tile = false;
        for s in k.body.drain(..) {
            let tile_fill = matches!(&s, Stmt::For { var, .. } if var.name.ends_with("_f"));
            let drop = mma_stmt(&s) || (after_tile && s == Stmt::Barrier);
            after_tile = tile_fill && mma_stmt(&s);
            if !drop {
                body.push(s);
            }
        }
        k.body = body;
        k.params.clear();
    }
    for map in &mut file.module.maps {
        map.inputs.retain(|o| !mma_operand(&o.name));
        map.outputs.retain(|o| !mma_operand(&o.name));
        map.scratch.retain(|o| !mma_operand(&o.name));
    }
    file.spec.generators.retain(|(n, _)| !mma_operand(n));
    file.spec.compares.retain(|(n, _)| !mma_operand(n));
    file
}

/// The mma statements come from a stream of their own and leave nothing
/// behind for the rest of the kernel: a module without them is the
/// module the generator made before it had them, and a module with
/// them is that module plus the mma groups (names as generated).
#[test]
fn modules_without_mma_are_unchanged_by_the_mma_option() {
    let with = |mma| GenOptions {
        warps: 100,
        mma,
        adversarial_names: false,
        ..GenOptions::default()
    };
    let mut unchanged = 0;
    for seed in 0..40 {
        let never = generate_with(seed, &with(0));
        assert!(!has_mma(&never), "seed {seed}");
        let half = generate_with(seed, &with(50));
        if !has_mma(&half) {
            assert_eq!(half, never, "seed {seed}");
            unchanged += 1;
        }
        let always = generate_with(seed, &with(100));
        assert!(has_mma(&always), "seed {seed}");
        let stripped = without_mma(&always);
        let never = without_mma(&never);
        if stripped != never {
            let (a, b) = (stripped.print(), never.print());
            let first = a.lines().zip(b.lines()).position(|(x, y)| x != y);
            panic!(
                "seed {seed}: line {first:?}: {:?} vs {:?}",
                first.and_then(|i| a.lines().nth(i)),
                first.and_then(|i| b.lines().nth(i))
            );
        }
    }
    assert!((10..30).contains(&unchanged), "{unchanged} of 40");
}

fn printed(seed: u64) -> String {
    generate(seed).print()
}

/// The generator reaches what the oracle and the emitters got wrong:
/// locals read after a barrier, short-circuit guards on loads, long
/// chains, resident inputs with generated data, adversarial names. Each
/// kind shows up in a fair share of 200 programs, and the oracle takes
/// every one of those programs.
#[test]
fn the_generator_reaches_every_trust_pattern() {
    let modules: Vec<(u64, Module, String)> = (0..200)
        .map(|seed| (seed, generate(seed).module, printed(seed)))
        .collect();
    let count =
        |f: &dyn Fn(&Module, &str) -> bool| modules.iter().filter(|(_, m, t)| f(m, t)).count();
    let resident = count(&|m, _| {
        !m.residents.is_empty() && m.residents.iter().any(|r| !r.zeroed && r.name != "hand")
    });
    // A load right of `&&` / `||`: `... && x0[...]`.
    let load_after = |t: &str, op: &str| {
        t.split(op).skip(1).any(|rest| {
            let name_len = rest
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            name_len > 0 && rest[name_len..].starts_with('[')
        })
    };
    let guarded = count(&|_, t| load_after(t, " && ") || load_after(t, " || "));
    let deep = count(&|_, t| t.lines().any(|l| l.len() > 400));
    let renamed = count(&|_, t| {
        [
            "threadIdx",
            "namespace",
            "workgroupBarrier",
            "k_end",
            "idx",
            "__syncthreads",
            "loop",
        ]
        .iter()
        .any(|w| t.contains(w))
    });
    let local_barrier = count(&|_, t| {
        t.split("local ").skip(1).any(|rest| {
            let next_local = rest.find("local ").unwrap_or(rest.len());
            rest[..next_local].contains("barrier;")
        })
    });
    let f16_input = count(&|_, t| t.contains("inputs [") && t.contains("gmem<f16["));
    let bf16_output = count(&|m, _| {
        m.maps.iter().any(|map| {
            map.outputs.iter().any(|o| {
                o.ty.as_ref_type()
                    .is_some_and(|r| r.elem == ScalarType::BF16)
            })
        })
    });
    let smem16 = count(&|_, t| t.contains("smem<f16[") || t.contains("smem<bf16["));
    let arith16 =
        count(&|_, t| t.contains("f16 + ") || t.contains("bf16 * ") || t.contains("f16) - "));
    let while_loops = count(&|_, t| t.contains("while "));
    let breaks = count(&|_, t| t.contains("break;"));
    let continues = count(&|_, t| t.contains("continue;"));
    let compound = count(&|_, t| t.contains(" += ") || t.contains(" ^= ") || t.contains(" *= "));
    let helpers = count(&|_, t| t.contains(" = mix("));
    let constants = count(&|_, t| t.contains("0u..TRIPS"));
    let subsets = count(&|m, _| {
        m.maps[0].programs.iter().any(|p| {
            m.kernel(&p.kernel)
                .is_some_and(|k| k.params.len() < m.maps[0].params().len())
        })
    });
    for (what, n, at_least) in [
        ("while loops", while_loops, 20),
        ("breaks", breaks, 10),
        ("continues", continues, 5),
        ("compound assignments", compound, 20),
        ("helper calls", helpers, 10),
        ("constants", constants, 10),
        ("kernels naming a subset of the operands", subsets, 20),
        ("f16 inputs", f16_input, 20),
        ("bf16 outputs", bf16_output, 20),
        ("16-bit smem", smem16, 10),
        ("16-bit arithmetic", arith16, 20),
        ("resident inputs", resident, 20),
        ("guarded loads", guarded, 20),
        ("deep chains", deep, 5),
        ("adversarial names", renamed, 10),
        ("locals across barriers", local_barrier, 10),
    ] {
        assert!(n >= at_least, "{what}: {n} of 200 programs");
    }
    for (seed, _, _) in modules
        .iter()
        .filter(|(_, m, _)| !m.residents.is_empty())
        .take(15)
    {
        crate::fuzz::check_module(&generate(*seed), *seed)
            .unwrap_or_else(|e| panic!("seed {seed}: {e:?}"));
    }
}

fn has_provable(file: &CaseFile) -> bool {
    file.module.maps[0]
        .outputs
        .iter()
        .any(|o| o.name == PROVABLE_OUTPUT)
}

/// The provable-operand statements come from a stream of their own: a
/// module without them is the module the generator made before it had
/// them, and `provable_operands: 100` puts them in every module.
#[test]
fn modules_without_provable_operands_are_unchanged_by_the_option() {
    // Names as generated, so that `zs0` is found by its name.
    let with = |provable_operands| GenOptions {
        provable_operands,
        adversarial_names: false,
        ..GenOptions::default()
    };
    let mut unchanged = 0;
    for seed in 0..60 {
        let never = generate_with(seed, &with(0));
        assert!(!has_provable(&never), "seed {seed}");
        let default = generate_with(seed, &with(PROVABLE_PERCENT));
        if !has_provable(&default) {
            assert_eq!(default, never, "seed {seed}");
            unchanged += 1;
        }
        let always = generate_with(seed, &with(100));
        assert!(has_provable(&always), "seed {seed}");
        assert_eq!(always, generate_with(seed, &with(100)), "seed {seed}");
    }
    assert!((30..60).contains(&unchanged), "{unchanged} of 60");
}

/// Modules with the provable-operand statements check on the oracle,
/// and their `zs0` holds what the statements are for: NaN and
/// infinities from edge values and zeros a compiler can prove, in every
/// slot over the seeds; every shape of the generator appears.
#[test]
fn provable_operand_modules_check_and_produce_nan_and_infinities() {
    let options = GenOptions {
        provable_operands: 100,
        adversarial_names: false,
        ..GenOptions::default()
    };
    let mut specials_per_slot = [0u32; PROVABLE_SLOTS as usize];
    let mut shapes = std::collections::BTreeSet::new();
    for seed in 0..24 {
        let file = generate_with(seed, &options);
        let oracle =
            crate::fuzz::check_module(&file, seed).unwrap_or_else(|e| panic!("seed {seed}: {e:?}"));
        let zs = oracle.outputs[0].outputs[PROVABLE_OUTPUT].to_f32();
        let n = zs.len() / PROVABLE_SLOTS as usize;
        for (slot, count) in specials_per_slot.iter_mut().enumerate() {
            *count += zs[slot * n..(slot + 1) * n]
                .iter()
                .filter(|v| !v.is_finite())
                .count() as u32;
        }
        let text = mpmd_core::text::print(&file.module);
        for shape in [
            "zd & 0)", "zd - zd)", "zd * 0)", "zx - zx", "zx + -zx", "f32(zj)", "fma(", "f16(",
            "bf16(",
        ] {
            if text.contains(shape) {
                shapes.insert(shape);
            }
        }
    }
    assert!(
        specials_per_slot.iter().all(|&c| c > 0),
        "NaN or infinities per slot: {specials_per_slot:?}"
    );
    assert_eq!(shapes.len(), 9, "{shapes:?}");
}
