//! Establishing how many workgroups of one dispatch run at once.
//!
//! WebGPU promises no forward progress between workgroups, so in general a
//! wait on another workgroup of the same dispatch may never be met. Mesa's
//! llvmpipe (lavapipe) is different by construction: a compute dispatch is
//! one task of its compute thread pool (`lp_cs_tpool`), a fixed set of OS
//! threads (`LP_NUM_THREADS`, by default one per CPU, at most Mesa's
//! `LP_MAX_THREADS`), and each thread takes the next workgroup and runs it to
//! the end. A workgroup that spins holds its thread, but the others are OS
//! threads that the kernel keeps scheduling, so up to the pool's size of
//! workgroups all start and all make progress. With no pool (one CPU or
//! `LP_NUM_THREADS=0`) workgroups run one after another.
//!
//! The backend does not take the pool size on trust: it dispatches the
//! candidate count of workgroups that each arrive on a counter and then
//! wait (bounded) for all of them to arrive. If all arrive, that many ran at
//! once on this device; otherwise it halves the candidate and tries again
//! (a failed try costs one bounded spin, about 10 ms on lavapipe). Other
//! adapters get no guarantee: nothing is established there.

use crate::runtime::Residency;

/// Threads lavapipe's pool has at most (Mesa's `LP_MAX_THREADS`), so the
/// most workgroups the probe tries. Measured on Mesa 22.3 (2 CPUs): with
/// `LP_NUM_THREADS=32` or `64`, 32 workgroups ran at once and 33 never did.
pub const MAX_PROBED_WORKGROUPS: u32 = 32;

/// Polls a probe workgroup makes before it gives up. Below llvmpipe's
/// 65,535 loop visits per invocation, with room for the loop's entry.
const PROBE_POLLS: u32 = 60_000;

/// Looks per poll: stretches a poll, so the spin lasts long enough for a
/// thread the OS has not scheduled yet to arrive on a loaded machine. A look
/// is `atomicAdd(.., 0)`, a read-modify-write no compiler hoists out of the
/// loop: with `atomicLoad` instead (and no store in the loop) no probe of 2
/// to 8 workgroups ever completed on lavapipe (Mesa 22.3), whatever
/// `LP_NUM_THREADS` (24 tries); llvmpipe may compile it as a plain load.
const LOADS_PER_POLL: usize = 32;

fn probe_wgsl() -> String {
    let loads =
        "    if (seen < wanted) { seen = atomicAdd(&probe[0], 0u); }\n".repeat(LOADS_PER_POLL);
    format!(
        "// Co-residency probe: probe[3] workgroups arrive on probe[0], then wait
// (bounded) until all have arrived; one that gives up counts in probe[1].
@group(0) @binding(0) var<storage, read_write> probe: array<atomic<u32>, 4>;

@compute @workgroup_size(1)
fn main() {{
  let wanted = atomicLoad(&probe[3]);
  atomicAdd(&probe[0], 1u);
  var polls: u32 = 0u;
  loop {{
    var seen: u32 = 0u;
{loads}    if (seen >= wanted) {{ break; }}
    polls = polls + 1u;
    if (polls >= {PROBE_POLLS}u) {{
      atomicAdd(&probe[1], 1u);
      break;
    }}
  }}
  atomicMax(&probe[2], polls);
}}
"
    )
}

/// Whether `workgroups` workgroups of one dispatch all ran at once, and the
/// most polls one of them made.
fn all_arrive(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    pipeline: &wgpu::ComputePipeline,
    workgroups: u32,
) -> Result<(bool, u32), String> {
    let buffer = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("mpmd residency probe"),
        size: 16,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("mpmd residency probe readback"),
        size: 16,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&[0u32, 0, 0, workgroups]));
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("mpmd residency probe"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: buffer.as_entire_binding(),
        }],
    });
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("mpmd residency probe"),
    });
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("mpmd residency probe"),
            timestamp_writes: None,
        });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(workgroups, 1, 1);
    }
    encoder.copy_buffer_to_buffer(&buffer, 0, &staging, 0, 16);
    queue.submit([encoder.finish()]);
    let (sender, receiver) = std::sync::mpsc::channel();
    staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
        let _ = sender.send(r);
    });
    let start = std::time::Instant::now();
    let mapped = loop {
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| format!("waiting for the probe failed: {e}"))?;
        if let Ok(r) = receiver.try_recv() {
            break r;
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            return Err("the probe's results did not come back".into());
        }
        std::thread::yield_now();
    };
    mapped.map_err(|e| format!("reading the probe back failed: {e}"))?;
    let words: Vec<u32> = {
        let view = staging
            .get_mapped_range(..)
            .map_err(|e| format!("reading the probe back failed: {e}"))?;
        bytemuck::cast_slice(&view).to_vec()
    };
    staging.unmap();
    let (arrived, gave_up, polls) = (words[0], words[1], words[2]);
    Ok((arrived == workgroups && gave_up == 0, polls))
}

/// The candidate pool size: `LP_NUM_THREADS` when set, else the CPUs this
/// process may use (Mesa counts the CPUs online; where that is more, the
/// candidate is lower than the pool, which only establishes less).
pub fn lavapipe_candidate() -> u32 {
    let from_env = std::env::var("LP_NUM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    from_env.unwrap_or(cpus).clamp(1, MAX_PROBED_WORKGROUPS)
}

/// Establishes how many workgroups run at once on this device (llvmpipe
/// only; other adapters get none, with the reason).
pub fn establish(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    llvmpipe: bool,
    adapter: &str,
) -> Residency {
    if !llvmpipe {
        return Residency {
            workgroups: 0,
            how: format!(
                "WebGPU promises no forward progress between workgroups and the backend cannot establish \
                 co-residency on {adapter}"
            ),
        };
    }
    let candidate = lavapipe_candidate();
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let pipeline = probe_pipeline(device);
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Residency {
            workgroups: 0,
            how: format!("the co-residency probe did not compile: {e}"),
        };
    }
    let mut tried = Vec::new();
    let mut k = candidate;
    while k >= 1 {
        match all_arrive(device, queue, &pipeline, k) {
            Ok((true, _)) => {
                let note = if tried.is_empty() {
                    String::new()
                } else {
                    format!(" ({} did not all arrive)", tried.join(", "))
                };
                return Residency {
                    workgroups: k,
                    how: format!(
                        "lavapipe runs a dispatch's workgroups on its compute thread pool, one per thread \
                         (LP_NUM_THREADS, by default the CPU count); a probe dispatch of {k} workgroups that \
                         wait for each other all arrived{note}"
                    ),
                };
            }
            Ok((false, _)) => tried.push(k.to_string()),
            Err(e) => {
                return Residency {
                    workgroups: 0,
                    how: format!("the co-residency probe failed: {e}"),
                }
            }
        }
        k /= 2;
    }
    Residency {
        workgroups: 0,
        how: "no probe dispatch had all of its workgroups running at once".into(),
    }
}

/// The probe's compute pipeline (validation errors surface in the caller's
/// error scope).
fn probe_pipeline(device: &wgpu::Device) -> wgpu::ComputePipeline {
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("mpmd residency probe"),
        source: wgpu::ShaderSource::Wgsl(probe_wgsl().into()),
    });
    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("mpmd residency probe"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// Runs the probe for exactly `workgroups` workgroups on `device`: whether
/// all arrived and the most polls one made (for measurements and tests).
pub fn probe_once(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    workgroups: u32,
) -> Result<(bool, u32), String> {
    let pipeline = probe_pipeline(device);
    all_arrive(device, queue, &pipeline, workgroups)
}
