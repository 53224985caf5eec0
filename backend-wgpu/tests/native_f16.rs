//! What WGSL's native `f16` (`enable f16;`, the `shader-f16` feature) does
//! with every f16 bit pattern on this adapter: the measurement behind the
//! backend's choice to emulate f16 on u32 bits everywhere (README, "16-bit
//! floats"). docs/design.md requires f16 subnormals to be kept and every bit
//! pattern to survive a move; lavapipe does not promise to keep f16
//! subnormals (`shaderDenormPreserveFloat16 = false`).
//!
//! Measured on lavapipe (llvmpipe, LLVM 15): all 65,536 patterns survive a
//! load and store, `x * 1.0` keeps every subnormal, `f32(x)` is exact and
//! `f16(f32)` rounds to the pattern. The backend still does not use native
//! f16, because none of this is promised: the driver reports
//! `shaderDenormPreserveFloat16 = false`, so conversions and arithmetic may
//! flush f16 subnormals on another build or adapter, and naga 30 has no
//! bit-preserving way between an `f16` and integer bits (`bitcast<u32>` of a
//! `vec2<f16>` is refused), so even native f16 *storage* would need the
//! conversions to carry the bits.
//!
//! The test asserts, on every adapter, what WGSL promises for normal f16
//! values (moves, `x * 1.0` and both conversions keep them exactly), and on
//! lavapipe the measurement above (every pattern, subnormals included), so
//! the paragraph cannot go stale. An adapter without `shader-f16` fails the
//! test with that reason: the measurement never silently disappears.
//!
//! (The conversions between f16 bits and f32 that the backend does take
//! from the adapter, `unpack2x16float` and an f32 addition, are probed at
//! run time on every device: `src/f16_conversions.rs`, `tests/f16_conversions.rs`.)

use std::sync::{Arc, Mutex};

const SHADER: &str = "
enable f16;
@group(0) @binding(0) var<storage, read> src: array<f16>;
@group(0) @binding(1) var<storage, read> one: array<f32>;
@group(0) @binding(2) var<storage, read_write> copied: array<f16>;
@group(0) @binding(3) var<storage, read_write> multiplied: array<f16>;
@group(0) @binding(4) var<storage, read_write> widened: array<f32>;
@group(0) @binding(5) var<storage, read_write> narrowed: array<f16>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.x;
  if (i >= arrayLength(&src)) { return; }
  let x = src[i];
  copied[i] = x;
  multiplied[i] = x * f16(one[0]);
  widened[i] = f32(x);
  // f32 values a quarter of an f16 ulp above each pattern: round to nearest keeps x.
  narrowed[i] = f16(bitcast<f32>(bitcast<u32>(f32(x)) + (1u << 11u)));
}
";

struct Run {
    copied: Vec<u16>,
    multiplied: Vec<u16>,
    widened: Vec<u32>,
    narrowed: Vec<u16>,
}

#[path = "../../test-support/needs.rs"]
mod needs;

/// The adapter's name and what it did with every pattern.
fn run_native() -> (String, Run) {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = needs::setup(
        "a WebGPU adapter (Mesa's lavapipe)",
        pollster::block_on(instance.request_adapter(&Default::default())),
    );
    let name = adapter.get_info().name;
    needs::setup(
        "an adapter with WGSL's shader-f16 feature (lavapipe has it)",
        if adapter.features().contains(wgpu::Features::SHADER_F16) {
            Ok(())
        } else {
            Err(format!("adapter {name} has no shader-f16"))
        },
    );
    eprintln!("adapter: {}", adapter.get_info().name);
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("native f16 probe"),
        required_features: wgpu::Features::SHADER_F16,
        ..Default::default()
    }))
    .expect("a device with shader-f16");
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("native f16"),
        source: wgpu::ShaderSource::Wgsl(SHADER.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("native f16"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let n = 65536u64;
    let storage = |bytes: u64| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    };
    let src = storage(n * 2);
    let patterns: Vec<u16> = (0..=u16::MAX).collect();
    queue.write_buffer(&src, 0, bytemuck::cast_slice(&patterns));
    let one = storage(4);
    queue.write_buffer(&one, 0, bytemuck::cast_slice(&[1.0f32]));
    let outputs = [
        storage(n * 2),
        storage(n * 2),
        storage(n * 4),
        storage(n * 2),
    ];
    let layout = pipeline.get_bind_group_layout(0);
    let mut entries = vec![
        wgpu::BindGroupEntry {
            binding: 0,
            resource: src.as_entire_binding(),
        },
        wgpu::BindGroupEntry {
            binding: 1,
            resource: one.as_entire_binding(),
        },
    ];
    for (k, b) in outputs.iter().enumerate() {
        entries.push(wgpu::BindGroupEntry {
            binding: 2 + k as u32,
            resource: b.as_entire_binding(),
        });
    }
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &layout,
        entries: &entries,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups((n / 64) as u32, 1, 1);
    }
    let staging: Vec<wgpu::Buffer> = outputs
        .iter()
        .map(|b| {
            let s = device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: b.size(),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            encoder.copy_buffer_to_buffer(b, 0, &s, 0, b.size());
            s
        })
        .collect();
    queue.submit([encoder.finish()]);
    let mapped = Arc::new(Mutex::new(0usize));
    for s in &staging {
        let mapped = mapped.clone();
        s.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            r.expect("map");
            *mapped.lock().unwrap() += 1;
        });
    }
    while *mapped.lock().unwrap() < staging.len() {
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("poll");
    }
    let bytes: Vec<Vec<u8>> = staging
        .iter()
        .map(|s| s.get_mapped_range(..).expect("mapped").to_vec())
        .collect();
    let halves = |b: &[u8]| -> Vec<u16> { bytemuck::cast_slice(b).to_vec() };
    let run = Run {
        copied: halves(&bytes[0]),
        multiplied: halves(&bytes[1]),
        widened: bytemuck::cast_slice(&bytes[2]).to_vec(),
        narrowed: halves(&bytes[3]),
    };
    (name, run)
}

#[test]
fn native_f16_on_this_adapter() {
    let (adapter, run) = run_native();
    let subnormal = |b: u16| b & 0x7c00 == 0 && b & 0x3ff != 0;
    let nan = |b: u16| b & 0x7c00 == 0x7c00 && b & 0x3ff != 0;
    let count = |what: &str, pred: &dyn Fn(u16) -> bool| {
        let n = (0..=u16::MAX).filter(|&b| pred(b)).count();
        eprintln!("{what}: {n}");
        n
    };
    let copy_changed = count("copy changed the bits (all patterns)", &|b| {
        run.copied[b as usize] != b
    });
    let copy_sub = count("copy changed a subnormal", &|b| {
        subnormal(b) && run.copied[b as usize] != b
    });
    let copy_nan = count("copy changed a NaN's bits", &|b| {
        nan(b) && run.copied[b as usize] != b
    });
    let mul_sub = count("x * 1.0 changed a subnormal", &|b| {
        subnormal(b) && run.multiplied[b as usize] != b
    });
    let widen_sub = count("f32(x) of a subnormal is not exact", &|b| {
        subnormal(b) && run.widened[b as usize] != mpmd_core::numerics::f16_to_f32(b).to_bits()
    });
    let narrow_sub = count("f16(f32 near a subnormal) is not that subnormal", &|b| {
        subnormal(b) && run.narrowed[b as usize] != b
    });
    let narrow_normal = count("f16(f32 near a normal) is not that normal", &|b| {
        !subnormal(b) && !nan(b) && b & 0x7fff < 0x7c00 && run.narrowed[b as usize] != b
    });
    eprintln!(
        "native f16 summary: copy {copy_changed} (subnormals {copy_sub}, NaNs {copy_nan}), \
         multiply {mul_sub}, widen {widen_sub}, narrow {narrow_sub} subnormal / {narrow_normal} normal"
    );
    // What WGSL promises on every adapter: normal values, zeros and
    // infinities survive a move, `* 1.0` and both conversions exactly.
    let promised = |b: u16| !subnormal(b) && !nan(b);
    let broken = |what: &str, changed: &dyn Fn(u16) -> bool| {
        let bad: Vec<u16> = (0..=u16::MAX)
            .filter(|&b| promised(b) && changed(b))
            .take(4)
            .collect();
        assert!(
            bad.is_empty(),
            "{adapter}: {what} changed normal patterns, e.g. {bad:04x?}"
        );
    };
    broken("copy", &|b| run.copied[b as usize] != b);
    broken("x * 1.0", &|b| run.multiplied[b as usize] != b);
    broken("f32(x)", &|b| {
        run.widened[b as usize] != mpmd_core::numerics::f16_to_f32(b).to_bits()
    });
    // (An infinity a quarter ulp up is a NaN: `narrow_normal` counts finite ones.)
    assert_eq!(
        narrow_normal, 0,
        "{adapter}: f16(f32 near x) changed normal patterns"
    );
    // What lavapipe did when measured (the module's documentation): every
    // pattern survives, subnormals and NaN bits included.
    if adapter.contains("llvmpipe") {
        assert_eq!(
            (
                copy_changed,
                copy_sub,
                copy_nan,
                mul_sub,
                widen_sub,
                narrow_sub
            ),
            (0, 0, 0, 0, 0, 0),
            "lavapipe no longer keeps every f16 pattern natively: update this file's \
             documentation, docs/numerics.md and backend-wgpu/README.md"
        );
    }
}
