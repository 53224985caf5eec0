use super::*;
use crate::ir::{gmem, Call, MapBuilder, MeshBuilder};

fn map() -> MpmdMap {
    MapBuilder::new("m")
        .program("g", "k")
        .input("x", gmem(ScalarType::F32, [4, 6]))
        .build()
}

fn gen(g: Generator, elem: ScalarType, len: u32, seed: u64) -> HostTensor {
    let mut rng = Rng::for_stream(seed, &["case", "x"]);
    generate_tensor(&g, "x", elem, &[len], &map(), &mut rng).unwrap()
}

fn gen_err(g: Generator, elem: ScalarType) -> GenerateError {
    generate_tensor(&g, "n", elem, &[1], &map(), &mut Rng::new(0)).unwrap_err()
}

/// A module with f32 `x`, i32 `i`, owned u32 `u` (3 blocks of 2) and scalar `s`.
fn module() -> Module {
    let map = MapBuilder::new("f")
        .program("m", "k")
        .input("x", gmem(ScalarType::F32, [64]))
        .input("i", gmem(ScalarType::I32, [64]))
        .input("u", gmem(ScalarType::U32, [2]).owned_by("m"))
        .scalar("s", ScalarType::I32)
        .build();
    Module {
        meshes: vec![MeshBuilder::new("m").grid("b", 3).threads("t", 1).build()],
        maps: vec![map],
        ..Default::default()
    }
}

fn uniform_f32(lo: f32, hi: f32) -> Generator {
    Generator::Uniform {
        lo: Literal::f32(lo),
        hi: Literal::f32(hi),
    }
}

#[test]
fn same_seed_same_data_other_seed_other_data() {
    let g = uniform_f32(-1.0, 1.0);
    let a = gen(g.clone(), ScalarType::F32, 64, 3);
    assert_eq!(a, gen(g.clone(), ScalarType::F32, 64, 3));
    assert_ne!(a, gen(g, ScalarType::F32, 64, 4));
}

#[test]
fn uniform_integers_are_inclusive_and_in_range() {
    let t = gen(
        Generator::Uniform {
            lo: Literal::I32(0),
            hi: Literal::I32(3),
        },
        ScalarType::U32,
        400,
        1,
    );
    let mut seen = [false; 4];
    for &w in t.words() {
        assert!(w <= 3, "{w}");
        seen[w as usize] = true;
    }
    assert_eq!(seen, [true; 4]);
}

#[test]
fn uniform_ranges_are_clamped_to_the_type() {
    // [-5, 2] on u32 is [0, 2]; [0, u32::MAX] covers the whole type.
    let t = gen(
        Generator::Uniform {
            lo: Literal::I32(-5),
            hi: Literal::I32(2),
        },
        ScalarType::U32,
        200,
        2,
    );
    assert!(t.words().iter().all(|&w| w <= 2), "{:?}", t.words());
    let t = gen(
        Generator::Uniform {
            lo: Literal::U32(0),
            hi: Literal::U32(u32::MAX),
        },
        ScalarType::U32,
        200,
        2,
    );
    assert!(t.words().iter().any(|&w| w > 0x8000_0000));
    let b = gen(
        Generator::Uniform {
            lo: Literal::Bool(false),
            hi: Literal::Bool(true),
        },
        ScalarType::Bool,
        100,
        2,
    );
    assert!(b.words().iter().all(|&w| w <= 1));
    assert!(b.words().contains(&0) && b.words().contains(&1));
}

#[test]
fn uniform_floats_are_half_open() {
    let t = gen(uniform_f32(2.0, 3.0), ScalarType::F32, 500, 9);
    assert!(t.to_f32().iter().all(|v| (2.0..3.0).contains(v)));
    // A one-point range gives that point.
    let t = gen(uniform_f32(2.0, 2.0), ScalarType::F32, 4, 9);
    assert_eq!(t.to_f32(), vec![2.0; 4]);
}

#[test]
fn nonzero_never_yields_zero() {
    let t = gen(
        Generator::NonZero {
            lo: Literal::I32(-1),
            hi: Literal::I32(1),
        },
        ScalarType::I32,
        300,
        5,
    );
    assert!(t.to_i32().iter().all(|&v| v == 1 || v == -1));
    assert!(t.to_i32().contains(&1) && t.to_i32().contains(&-1));
    let f = gen(
        Generator::NonZero {
            lo: Literal::f32(0.0),
            hi: Literal::f32(1e-44),
        },
        ScalarType::F32,
        50,
        5,
    );
    assert!(f.to_f32().iter().all(|&v| v > 0.0 && v < 1e-44));
}

#[test]
fn special_starts_with_every_edge_value_then_mixes() {
    let t = gen(Generator::Special, ScalarType::I32, 400, 0);
    assert_eq!(&t.to_i32()[..12], &I32_SPECIALS);
    let rest = &t.to_i32()[12..];
    assert!(rest.iter().any(|v| I32_SPECIALS.contains(v)));
    assert!(rest
        .iter()
        .any(|v| (-100..=100).contains(v) && !I32_SPECIALS.contains(v)));
    assert!(rest.iter().any(|v| v.unsigned_abs() > 1000));

    let u = gen(Generator::Special, ScalarType::U32, 20, 0);
    assert_eq!(&u.words()[..10], &U32_SPECIALS);

    let f = gen(Generator::Special, ScalarType::F32, 400, 0);
    let expected: Vec<u32> = F32_SPECIALS.iter().map(|v| v.to_bits()).collect();
    assert_eq!(&f.words()[..16], &expected[..]);
    assert_eq!(f.words()[1], 0x8000_0000);
    assert!(f32::from_bits(f.words()[4]).is_nan());
    assert_eq!(f.words()[5], 1);
    assert_eq!(f.words()[7], 0x007f_ffff);
    assert!(f.to_f32()[16..].iter().any(|v| (-100.0..100.0).contains(v)));

    let b = gen(Generator::Special, ScalarType::Bool, 50, 0);
    assert_eq!(&b.words()[..2], &[0, 1]);
    assert!(b.words().iter().all(|&w| w <= 1));
}

#[test]
fn iota_and_constant() {
    assert_eq!(
        gen(Generator::Iota, ScalarType::U32, 4, 0).words(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(
        gen(Generator::Iota, ScalarType::F32, 3, 0).to_f32(),
        vec![0.0, 1.0, 2.0]
    );
    assert_eq!(
        gen(Generator::Iota, ScalarType::Bool, 3, 0).words(),
        vec![0, 1, 1]
    );
    assert_eq!(
        gen(Generator::Constant(Literal::U32(7)), ScalarType::U32, 2, 0).words(),
        vec![7, 7]
    );
    // An integer literal converts when the type holds its value exactly.
    assert_eq!(
        gen(Generator::Constant(Literal::I32(-2)), ScalarType::F32, 1, 0).to_f32(),
        vec![-2.0]
    );
    assert_eq!(
        gen(Generator::Constant(Literal::I32(1)), ScalarType::Bool, 1, 0).words(),
        vec![1]
    );
}

/// d24a: `constant(nan)` for an `i32` was 0, `constant(3.7)` was 3: a
/// literal that the element type does not hold exactly is an error.
#[test]
fn constants_that_the_type_cannot_hold_are_type_mismatches() {
    let cases = [
        (Literal::f32(f32::NAN), ScalarType::I32, "generator `constant(nan)` for `n`: `nan` has no exact value of type `i32`; write one such as `0`"),
        (Literal::f32(3.7), ScalarType::I32, "generator `constant(3.7)` for `n`: `3.7` has no exact value of type `i32`; write one such as `0`"),
        (Literal::I32(-1), ScalarType::U32, "generator `constant(-1)` for `n`: `-1` has no exact value of type `u32`; write one such as `0u`"),
        (Literal::U32(u32::MAX), ScalarType::I32, "generator `constant(4294967295u)` for `n`: `4294967295u` has no exact value of type `i32`; write one such as `0`"),
        (Literal::I32(16_777_217), ScalarType::F32, "generator `constant(16777217)` for `n`: `16777217` has no exact value of type `f32`; write one such as `0.0`"),
        (Literal::I32(2), ScalarType::Bool, "generator `constant(2)` for `n`: `2` has no exact value of type `bool`; write one such as `false`"),
        (Literal::Bool(true), ScalarType::I32, "generator `constant(true)` for `n`: `true` has no exact value of type `i32`; write one such as `0`"),
    ];
    for (literal, elem, message) in cases {
        let err = gen_err(Generator::Constant(literal), elem);
        assert!(matches!(err, GenerateError::TypeMismatch { .. }), "{err}");
        assert_eq!(err.to_string(), message);
    }
}

/// d05a/b/c: `nonzero` on a range whose only value of the element type is
/// zero drew forever; now an error naming the generator, and every other
/// range gets non-zero values in a bounded number of draws.
#[test]
fn nonzero_never_loops() {
    let cases = [
        (Literal::I32(-5), Literal::I32(0), ScalarType::U32, "generator `nonzero(-5, 0)` for `n`: every `u32` value in the range is zero; widen the range"),
        (Literal::I32(-1), Literal::I32(0), ScalarType::Bool, "generator `nonzero(-1, 0)` for `n`: every `bool` value in the range is zero; widen the range"),
        (Literal::f32(0.0), Literal::f32(1e-45), ScalarType::F32, "generator `nonzero(0.0, 1e-45)` for `n`: every `f32` value in the range is zero; widen the range"),
        (Literal::f32(0.0), Literal::f32(0.0), ScalarType::F32, "generator `nonzero(0.0, 0.0)` for `n`: every `f32` value in the range is zero; widen the range"),
    ];
    for (lo, hi, elem, message) in cases {
        let err = gen_err(Generator::NonZero { lo, hi }, elem);
        assert!(matches!(err, GenerateError::OnlyZero { .. }), "{err}");
        assert_eq!(err.to_string(), message);
    }
    // Ranges where zero is likely or the only non-zero value is tiny.
    let smallest = gen(
        Generator::NonZero {
            lo: Literal::f32(0.0),
            hi: Literal::f32(3e-45),
        },
        ScalarType::F32,
        64,
        1,
    );
    assert!(
        smallest.to_f32().iter().all(|&v| v == 1e-45),
        "{smallest:?}"
    );
    let bits = gen(
        Generator::NonZero {
            lo: Literal::I32(-3),
            hi: Literal::I32(1),
        },
        ScalarType::Bool,
        64,
        1,
    );
    assert_eq!(bits.words(), vec![1; 64]);
    let ints = gen(
        Generator::NonZero {
            lo: Literal::I32(0),
            hi: Literal::I32(1),
        },
        ScalarType::U32,
        64,
        1,
    );
    assert_eq!(ints.words(), vec![1; 64]);
}

/// d14b: an input of 2^31 - 1 words (8 GiB) was allocated and aborted the
/// process; generation refuses it before allocating, with the size and the limit.
#[test]
fn generated_data_past_the_limit_is_refused_before_allocation() {
    let err = generate_tensor(
        &Generator::Iota,
        "x",
        ScalarType::F32,
        &[2_147_483_647],
        &map(),
        &mut Rng::new(0),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "generated input `x`: 2147483647 elements take 8589934588 bytes, more than the limit of 4294967296 bytes on generated data"
    );
    // Element counts that overflow are refused too, not wrapped.
    let err = generate_tensor(
        &Generator::Iota,
        "x",
        ScalarType::F32,
        &[u32::MAX, u32::MAX, 2],
        &map(),
        &mut Rng::new(0),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            GenerateError::TooLarge {
                elements: u64::MAX,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn index_into_stays_below_the_dimension() {
    let g = Generator::IndexInto {
        operand: "x".into(),
        dim: 1,
    };
    let t = gen(g, ScalarType::U32, 200, 2);
    assert!(t.words().iter().all(|&w| w < 6));
    assert!(t.words().contains(&0) && t.words().contains(&5));
    let f = gen(
        Generator::IndexInto {
            operand: "x".into(),
            dim: 0,
        },
        ScalarType::F32,
        100,
        2,
    );
    assert!(f
        .to_f32()
        .iter()
        .all(|&v| [0.0, 1.0, 2.0, 3.0].contains(&v)));
    let bad = |operand: &str, dim| {
        gen_err(
            Generator::IndexInto {
                operand: operand.into(),
                dim,
            },
            ScalarType::U32,
        )
        .to_string()
    };
    assert_eq!(
        bad("x", 2),
        "generator for `n`: `index_into(x, 2)`: the operand has only 2 dimension(s)"
    );
    assert_eq!(
        bad("y", 0),
        "generator for `n`: `index_into(y, 0)`: no such operand in the map"
    );
}

#[test]
fn bad_ranges_are_errors() {
    let err = gen_err(
        Generator::Uniform {
            lo: Literal::I32(5),
            hi: Literal::I32(1),
        },
        ScalarType::I32,
    );
    // d06: the message shows the generator as the text format writes it.
    assert_eq!(
        err.to_string(),
        "generator `uniform(5, 1)` for `n`: no `i32` value lies in the range; write the smaller bound first"
    );
    assert_eq!(
        gen_err(uniform_f32(1.0, -1.0), ScalarType::F32).to_string(),
        "generator `uniform(1.0, -1.0)` for `n`: no `f32` value lies in the range; write the smaller bound first"
    );
    let err = gen_err(
        Generator::Uniform {
            lo: Literal::I32(-5),
            hi: Literal::I32(-1),
        },
        ScalarType::U32,
    );
    assert!(matches!(err, GenerateError::EmptyRange { .. }), "{err}");
    let err = gen_err(uniform_f32(0.0, f32::INFINITY), ScalarType::F32);
    assert!(matches!(err, GenerateError::NotFinite { .. }), "{err}");
    let err = gen_err(
        Generator::NonZero {
            lo: Literal::I32(0),
            hi: Literal::I32(0),
        },
        ScalarType::I32,
    );
    assert!(matches!(err, GenerateError::OnlyZero { .. }), "{err}");
}

#[test]
fn scalars_take_element_zero_or_a_random_edge_value() {
    let map = map();
    let mut rng = Rng::new(4);
    let v = generate_scalar(
        &Generator::Constant(Literal::I32(9)),
        "s",
        ScalarType::U32,
        &map,
        &mut rng,
    );
    assert_eq!(v, Ok(Literal::U32(9)));
    let values: Vec<Literal> = (0..40)
        .map(|_| {
            generate_scalar(&Generator::Special, "s", ScalarType::I32, &map, &mut rng).unwrap()
        })
        .collect();
    assert!(values
        .iter()
        .all(|v| matches!(v, Literal::I32(x) if I32_SPECIALS[..8].contains(x))));
    assert!(values.iter().any(|v| *v != Literal::I32(0)));
}

#[test]
fn fallbacks_and_host_shapes() {
    let module = module();
    let map = &module.maps[0];
    let generators = [("u".to_string(), Generator::Iota)];
    let defaults = Generation::with_defaults(7).with_generators(&generators);
    let x = generate_input(&module, map, &map.inputs[0], &defaults).unwrap();
    assert_eq!(
        x,
        generate_input(&module, map, &map.inputs[0], &defaults).unwrap()
    );
    assert_ne!(
        x,
        generate_input(&module, map, &map.inputs[0], &Generation::with_defaults(8)).unwrap()
    );
    assert!(x.to_f32().iter().all(|v| (-1.0..1.0).contains(v)));
    let i = generate_input(&module, map, &map.inputs[1], &defaults).unwrap();
    assert!(i.to_i32().iter().all(|v| (0..=100).contains(v)));

    // Owned inputs: one instance per block of the owner.
    let u = generate_input(&module, map, &map.inputs[2], &defaults).unwrap();
    assert_eq!(u.shape(), vec![3, 2]);
    assert_eq!(u.words(), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(host_shape(&module, &map.inputs[0]), Some(vec![64]));
    assert_eq!(host_shape(&module, &map.scalars[0]), None);

    let required = Generation {
        seed: 7,
        stream: &[],
        generators: &[],
        fallback: Fallback::Required,
    };
    assert_eq!(
        generate_input(&module, map, &map.inputs[0], &required),
        Err(GenerateError::NoGenerator("x".into()))
    );
    let same = Generation {
        fallback: Fallback::Same(uniform_f32(-4.0, 4.0)),
        ..required
    };
    let i = generate_input(&module, map, &map.inputs[1], &same).unwrap();
    assert!(i.to_i32().iter().all(|v| (-4..=4).contains(v)));
    assert!(i.to_i32().iter().any(|&v| v < 0));
}

#[test]
fn every_input_has_its_own_stream() {
    let module = module();
    let map = &module.maps[0];
    let alone = Generation::with_defaults(1);
    let x = generate_input(&module, map, &map.inputs[0], &alone).unwrap();
    // Keyed by the operand's name: another input does not shift `x`.
    let mut more = module.clone();
    let mut first = more.maps[0].inputs[1].clone();
    first.name = "first".into();
    more.maps[0].inputs.insert(0, first);
    let map2 = &more.maps[0];
    assert_eq!(
        generate_input(&more, map2, &map2.inputs[1], &alone).unwrap(),
        x
    );
    // Leading stream names give other data.
    let in_case = Generation {
        stream: &["case"],
        ..alone
    };
    assert_ne!(
        generate_input(&module, map, &map.inputs[0], &in_case).unwrap(),
        x
    );
}

#[test]
fn call_args_generate_inputs_and_missing_scalars() {
    let mut module = module();
    let generators = [("s".to_string(), Generator::Constant(Literal::I32(4)))];
    let generation = Generation::with_defaults(3).with_generators(&generators);
    let args = call_args(&module, &generation).unwrap();
    assert_eq!(args.len(), 1);
    assert_eq!(
        args[0].inputs.keys().collect::<Vec<_>>(),
        vec!["i", "u", "x"]
    );
    assert_eq!(
        args[0].inputs["x"],
        generate_input(
            &module,
            &module.maps[0],
            &module.maps[0].inputs[0],
            &generation
        )
        .unwrap()
    );
    assert_eq!(args[0].scalars["s"], Literal::I32(4));

    // A value in the call wins over the generator; resident inputs are not generated.
    module.calls = vec![Call {
        map: "f".into(),
        scalars: vec![("s".into(), Literal::I32(-1))],
    }];
    module.maps[0].inputs[1].resident = true;
    let args = call_args(&module, &generation).unwrap();
    assert_eq!(args[0].scalars["s"], Literal::I32(-1));
    assert!(!args[0].inputs.contains_key("i"));

    module.calls[0].scalars.clear();
    let required = Generation {
        generators: &[],
        fallback: Fallback::Required,
        ..generation
    };
    assert_eq!(
        call_args(&module, &required).unwrap_err(),
        GenerateError::NoGenerator("x".into())
    );
    module.calls[0].map = "nope".into();
    assert_eq!(
        call_args(&module, &required).unwrap_err().to_string(),
        "call of unknown map `nope`"
    );
}
