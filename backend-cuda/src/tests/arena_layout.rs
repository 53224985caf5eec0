//! Where a call's buffers live (`arena`): small outputs no program loads go
//! to host-mapped memory, so an error-free call copies nothing back;
//! everything else stays in the device arena.

use mpmd_core::ir::ScalarType::*;
use mpmd_core::ir::*;
use mpmd_core::plan::{BufferId, LaunchPlan};

use super::programs::*;
use crate::arena::{buffer_words, ArenaLayout, BufferPlacement, MAPPED_OUTPUT_MAX_WORDS};
use crate::backend::input_words;
use crate::control;
use crate::emit::loaded_buffers;

fn layout(plan: &LaunchPlan) -> ArenaLayout {
    ArenaLayout::new(plan, &loaded_buffers(plan), true)
}

fn buffer(plan: &LaunchPlan, operand: &str) -> BufferId {
    plan.enumerate_buffers()
        .find(|(_, b)| b.operands.iter().any(|o| o == operand))
        .map(|(id, _)| id)
        .unwrap_or_else(|| panic!("no buffer for `{operand}`"))
}

/// Every placed range starts on a 256-byte boundary and no two overlap
/// within the same memory; the control block overlaps no buffer.
fn assert_disjoint_and_aligned(plan: &LaunchPlan, layout: &ArenaLayout) {
    // The control block and the status word are taken from the start.
    let status_word = 0..1;
    let mut device = Vec::from([layout.control_words()]);
    let mut mapped = Vec::from([status_word]);
    for index in plan.buffer_ids() {
        match layout.place(index) {
            Some(BufferPlacement::Device(r)) => device.push(r.clone()),
            Some(BufferPlacement::Mapped(r)) => mapped.push(r.clone()),
            None => {}
        }
    }
    for ranges in [&device, &mapped] {
        for (i, a) in ranges.iter().enumerate() {
            assert_eq!(a.start % 64, 0, "{a:?} is not 256-byte aligned");
            for b in &ranges[i + 1..] {
                assert!(a.end <= b.start || b.end <= a.start, "{a:?} overlaps {b:?}");
            }
        }
    }
    assert!(device.iter().all(|r| r.end <= layout.device_words));
    assert!(mapped.iter().all(|r| r.end <= layout.mapped_words));
}

#[test]
fn a_store_only_output_is_mapped_and_nothing_is_copied_back() {
    let plan = plan_of(&scale());
    let layout = layout(&plan);
    assert_eq!(
        layout.place(buffer(&plan, "y")),
        Some(&BufferPlacement::Mapped(64..576))
    );
    assert_eq!(
        layout.place(buffer(&plan, "x")),
        Some(&BufferPlacement::Device(64..576))
    );
    assert_eq!(layout.readback, 0);
    assert_eq!(layout.control_words(), 0..control::WORDS);
    assert_eq!(layout.mapped_words, 576);
    assert_disjoint_and_aligned(&plan, &layout);
}

/// Where the platform cannot map host memory (WSL2 often cannot), every
/// output is in the arena and copied back.
#[test]
fn without_host_mapping_every_output_is_copied_back() {
    let plan = plan_of(&scale());
    let layout = ArenaLayout::new(&plan, &loaded_buffers(&plan), false);
    assert_eq!(
        layout.place(buffer(&plan, "y")),
        Some(&BufferPlacement::Device(0..512))
    );
    assert_eq!(layout.readback, 512);
    assert_eq!(layout.control_words(), 512..512 + control::WORDS);
    assert_disjoint_and_aligned(&plan, &layout);
}

#[test]
fn outputs_that_are_loaded_atomic_or_too_large_stay_on_the_device() {
    let mesh = MeshBuilder::new("m").grid("b", 1).threads("t", 32).build();
    let big = MAPPED_OUTPUT_MAX_WORDS as u32 - 100;
    let map = MapBuilder::new("mix")
        .program("m", "mix")
        .output("stored", gmem(U32, [200]))
        .output("reread", gmem(U32, [32]))
        .output_zeroed("counted", gmem(U32, [1]))
        .output("large", gmem(U32, [big]))
        .input("given", gmem(U32, [32]))
        .output("updated", gmem(U32, [32]))
        .alias("given", "updated")
        .build();
    let kernel = KernelBuilder::new("mix", map.params()).body(|b| {
        let t = axis_index("t");
        b.store(at("stored", [t.clone()]), t.clone());
        b.store(at("reread", [t.clone()]), t.clone());
        b.store(at("large", [t.clone()]), load("reread", [t.clone()]));
        b.atomic(
            AtomicOp::Add,
            at("counted", [Expr::from(0u32)]),
            [Expr::from(1u32)],
        );
        b.store(at("updated", [t.clone()]), t.clone());
    });
    let plan = plan_of(&module(vec![mesh], vec![kernel], map));
    let layout = layout(&plan);
    // `stored` (200 words) fits; `large` would pass the limit after it.
    assert_eq!(
        layout.place(buffer(&plan, "stored")),
        Some(&BufferPlacement::Mapped(64..264))
    );
    assert!(matches!(
        layout.place(buffer(&plan, "reread")),
        Some(BufferPlacement::Device(_))
    ));
    assert!(matches!(
        layout.place(buffer(&plan, "counted")),
        Some(BufferPlacement::Device(_))
    ));
    assert!(matches!(
        layout.place(buffer(&plan, "large")),
        Some(BufferPlacement::Device(_))
    ));
    // Stored only, but its words arrive as an input: uploaded to the device.
    assert!(matches!(
        layout.place(buffer(&plan, "updated")),
        Some(BufferPlacement::Device(_))
    ));
    // The arena's outputs come first and are what is copied back.
    assert_eq!(layout.readback, layout.control);
    let large = layout.device_range(buffer(&plan, "large")).unwrap();
    assert!(large.end <= layout.readback);
    assert_disjoint_and_aligned(&plan, &layout);
}

#[test]
fn inputs_and_device_residents_are_not_mapped() {
    let plan = plan_of(&pipeline());
    let layout = layout(&plan);
    for (index, buffer) in plan.enumerate_buffers() {
        match &buffer.init {
            mpmd_core::plan::BufferInit::Resident(_) => assert_eq!(layout.place(index), None),
            mpmd_core::plan::BufferInit::Input(_) => {
                assert!(matches!(
                    layout.place(index),
                    Some(BufferPlacement::Device(_))
                ))
            }
            _ => assert!(layout.place(index).is_some()),
        }
    }
    assert_disjoint_and_aligned(&plan, &layout);
}

/// What a call uploads into the arena's input ranges: the caller's words,
/// once the element type and count match the map's declaration.
#[test]
fn inputs_are_uploaded_only_when_type_and_length_match() {
    use mpmd_core::{CallArgs, HostTensor, RunError};

    let plan = plan_of(&scale());
    let x = buffer(&plan, "x");
    let with_x = |tensor: HostTensor| CallArgs {
        inputs: [("x".into(), tensor)].into(),
        ..CallArgs::default()
    };
    let floats: Vec<f32> = (0..512).map(|i| i as f32 - 0.5).collect();
    let words = input_words(&plan, &with_x(HostTensor::from_f32(vec![512], &floats))).unwrap();
    let bits: Vec<u32> = floats.iter().map(|v| v.to_bits()).collect();
    assert_eq!(words[&x], bits);

    let ints = with_x(HostTensor::from_i32(vec![512], &[7; 512]));
    assert_eq!(
        input_words(&plan, &ints).unwrap_err(),
        RunError::BadArguments("input `x` holds `i32` elements; the map declares `f32`".into())
    );
    let short = with_x(HostTensor::from_f32(vec![3], &[1.0; 3]));
    assert_eq!(
        input_words(&plan, &short).unwrap_err(),
        RunError::BadArguments("input `x` has 3 elements; the map declares 512".into())
    );
}

/// 16-bit buffers take their packed words (odd element counts round up to
/// a whole word, owned instances included), every start stays 256-byte
/// aligned (so every 16-byte vector access of a buffer is aligned), and the
/// words read back are exactly what `HostTensor::from_words` takes.
#[test]
fn sixteen_bit_buffers_are_packed_and_aligned() {
    let (module, _) = mpmd_core::text::parse(
        "mesh m { grid [b = 3]; threads t = 5; }
kernel k(x: gmem<f16[5]>, w: gmem<bf16[3]> @ m, y: gmem<bf16[7]>, z: gmem<f16[1]>, s: gmem<bf16[9]>) {
  let i: u32 = axis_index(t);
  y[i] = bf16(x[i]) + s[i];
  z[0u] = x[0u];
  s[i] = y[i];
  if i < 3u { w[i] = y[i]; }
}
map k {
  programs [m: k];
  inputs [x: gmem<f16[5]>];
  outputs [w: gmem<bf16[3]> @ m, y: gmem<bf16[7]>, z: gmem<f16[1]>];
  scratch [s: gmem<bf16[9]>];
}
",
    )
    .unwrap();
    let plan = mpmd_core::plan::lower(&validated(&module), "k").unwrap();
    for map_outputs in [true, false] {
        let layout = ArenaLayout::new(&plan, &loaded_buffers(&plan), map_outputs);
        assert_disjoint_and_aligned(&plan, &layout);
        let words = |name: &str| match layout.place(buffer(&plan, name)) {
            Some(BufferPlacement::Device(r) | BufferPlacement::Mapped(r)) => r.len(),
            None => 0,
        };
        // 5, 3 x 3, 7, 1 and 9 elements of 2 bytes.
        let want = [("x", 3), ("w", 5), ("y", 4), ("z", 1), ("s", 5)];
        for (name, n) in want {
            assert_eq!(words(name), n, "{name} (mapped outputs: {map_outputs})");
            let b = plan.buffer(buffer(&plan, name));
            assert_eq!(buffer_words(b), n, "{name}");
        }
    }
    // The upload is the tensor's packed words: elements 2k and 2k + 1 in
    // word k, the unused half of the last word zero.
    let x = mpmd_core::HostTensor::new(F16, vec![5], vec![1, 2, 3, 4, 5]).unwrap();
    let mut args = mpmd_core::CallArgs::default();
    args.inputs.insert("x".into(), x);
    let uploads = input_words(&plan, &args).unwrap();
    assert_eq!(
        uploads[&buffer(&plan, "x")],
        vec![0x0002_0001, 0x0004_0003, 0x0000_0005]
    );
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
