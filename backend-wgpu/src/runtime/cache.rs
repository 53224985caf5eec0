//! What a device and a backend keep between calls: compiled modules (the
//! bounded pipeline cache), residents, pooled buffers, and reading words back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mpmd_core::backend::RunError;
use mpmd_core::host::words_for;
use mpmd_core::ir::ScalarType;
use mpmd_core::plan::{BufferPlan, LaunchPlan};
use mpmd_core::Mode;

use super::{time_limit, Deadline, WgpuBackend, POOL_MAX_BYTES, STAGING_USAGE};
use crate::emit::{emit_module, EmitError, EmittedModule, PARAMS_BINDING, STATUS_BINDING};

pub(super) struct CompiledModule {
    pub(super) emitted: EmittedModule,
    pub(super) layout: wgpu::BindGroupLayout,
    /// One per dispatch of `emitted.schedule`.
    pub(super) pipelines: Vec<wgpu::ComputePipeline>,
}

/// A device-resident ref kept across calls.
pub(super) struct ResidentBuffer {
    pub(super) buffer: wgpu::Buffer,
    pub(super) elem: ScalarType,
    pub(super) shape: Vec<u32>,
    pub(super) elements: u64,
    /// 32-bit words of `buffer` in use (16-bit elements are packed two a word).
    pub(super) words: u64,
}

/// Device buffers kept between calls, by size and usage, so that a call
/// does not allocate (per-call overhead); at most [`POOL_MAX_BYTES`] of them.
#[derive(Default)]
pub(super) struct BufferPool {
    pub(super) free: Mutex<PoolBuffers>,
}

#[derive(Default)]
pub(super) struct PoolBuffers {
    pub(super) by_kind: HashMap<(u64, u32), Vec<wgpu::Buffer>>,
    pub(super) bytes: u64,
}

impl BufferPool {
    pub(super) fn take(
        &self,
        device: &wgpu::Device,
        label: &str,
        bytes: u64,
        usage: wgpu::BufferUsages,
    ) -> wgpu::Buffer {
        let bytes = bytes.max(4);
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            let reused = free
                .by_kind
                .get_mut(&(bytes, usage.bits()))
                .and_then(Vec::pop);
            if reused.is_some() {
                free.bytes -= bytes;
            }
            reused
        };
        reused.unwrap_or_else(|| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        })
    }

    /// Keeps `buffers` for later calls, as far as the bound allows (the
    /// rest are dropped, which frees them).
    pub(super) fn put(&self, buffers: Vec<wgpu::Buffer>) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        for b in buffers {
            if free.bytes + b.size() > POOL_MAX_BYTES {
                continue;
            }
            free.bytes += b.size();
            free.by_kind
                .entry((b.size(), b.usage().bits()))
                .or_default()
                .push(b);
        }
    }
}

impl WgpuBackend {
    pub(super) fn compile_cached(
        &self,
        plan: &LaunchPlan,
        mode: Mode,
    ) -> Result<Arc<CompiledModule>, RunError> {
        let options = self.plan_emit_options(plan, mode);
        let key = format!("{options:?}\n{plan:?}");
        if let Some(m) = self
            .ctx
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key.as_str())
        {
            return Ok(m.clone());
        }
        let emitted = emit_module(plan, &options).map_err(|e| match e {
            EmitError::TooManyBlocks { .. }
            | EmitError::TooManyBindings { .. }
            | EmitError::TooManyDispatches { .. } => RunError::Refused {
                reason: e.to_string(),
            },
            EmitError::TooDeep { .. } | EmitError::WarpOutsideBlockUniformControl { .. } => {
                RunError::Unsupported {
                    reason: e.to_string(),
                }
            }
            other => RunError::Backend(other.to_string()),
        })?;
        let limits = &self.ctx.limits;
        for b in &emitted.layout.bindings {
            let bytes = b.words * 4;
            let max = limits
                .max_storage_buffer_binding_size
                .min(limits.max_buffer_size);
            if bytes > max {
                return Err(RunError::Refused {
                    reason: format!(
                        "buffer of `{}` needs {bytes} bytes; the adapter binds at most {max} bytes per storage buffer",
                        b.members
                            .iter()
                            .flat_map(|&(i, _)| plan.buffer(i).operands.iter().map(|n| n.as_str()))
                            .collect::<Vec<_>>()
                            .join("`, `")
                    ),
                });
            }
        }
        let device = self.ctx.device.clone();
        let label = plan.map.name.clone();
        // naga and the driver compile here; on lavapipe a 1 KB checked-mode
        // module can take minutes (every bounds check inlines the error
        // report), so the compile runs on its own thread and the run waits
        // for it at most until its deadline.
        let compile = move || -> Result<CompiledModule, RunError> {
            let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(&label),
                source: wgpu::ShaderSource::Wgsl(emitted.wgsl.as_str().into()),
            });
            let storage = |binding: u32, read_only: bool| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            };
            let mut entries = vec![
                storage(PARAMS_BINDING, true),
                storage(STATUS_BINDING, false),
            ];
            for b in &emitted.layout.bindings {
                entries.push(storage(b.binding, false));
            }
            let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("mpmd operands"),
                entries: &entries,
            });
            let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some("mpmd"),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
            let pipelines = emitted
                .schedule
                .iter()
                .map(|step| {
                    let entry = step.entry_point.as_str();
                    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                        label: Some(entry),
                        layout: Some(&pipeline_layout),
                        module: &module,
                        entry_point: Some(entry),
                        compilation_options: Default::default(),
                        cache: None,
                    })
                })
                .collect();
            if let Some(err) = pollster::block_on(scope.pop()) {
                return Err(RunError::Backend(format!(
                    "wgpu rejected the generated shader: {err}\n{}",
                    emitted.wgsl
                )));
            }
            Ok(CompiledModule {
                emitted,
                layout,
                pipelines,
            })
        };
        let compiled = Arc::new(match self.deadline {
            None => compile()?,
            Some((at, limit)) => {
                let (done, result) = std::sync::mpsc::channel();
                std::thread::Builder::new()
                    .name("mpmd-wgsl-compile".into())
                    // Deeply nested modules need stack in naga and the driver.
                    .stack_size(256 << 20)
                    .spawn(move || {
                        let _ = done.send(compile());
                    })
                    .map_err(|e| RunError::Backend(format!("cannot start the compile: {e}")))?;
                match result.recv_timeout(at.saturating_duration_since(std::time::Instant::now())) {
                    Ok(compiled) => compiled?,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        return Err(time_limit(
                            "compiling the WGSL pipelines (the compile goes on in the background)",
                            limit,
                        ))
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        return Err(RunError::Backend("the WGSL compile stopped".into()))
                    }
                }
            }
        });
        self.ctx
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, compiled.clone());
        Ok(compiled)
    }

    pub(super) fn resident_buffer(
        &mut self,
        name: &str,
        plan: &LaunchPlan,
        buf: &BufferPlan,
    ) -> Result<wgpu::Buffer, RunError> {
        if let Some(r) = self.residents.get(name) {
            mpmd_core::host::check_resident(
                name,
                &plan.map.name,
                (r.elem, r.elements),
                (buf.ty.elem, buf.len),
            )?;
            return Ok(r.buffer.clone());
        }
        // New buffers are zero-filled by wgpu: a fresh resident starts at zero.
        let words = buffer_words(buf);
        let buffer = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(name),
            size: words.max(1) * 4,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.residents.insert(
            name.to_string(),
            ResidentBuffer {
                buffer: buffer.clone(),
                elem: buf.ty.elem,
                shape: plan.host_shape(buf),
                elements: buf.len,
                words,
            },
        );
        Ok(buffer)
    }

    pub(super) fn read_words(
        &self,
        buffers: &[(&wgpu::Buffer, u64, u64)],
    ) -> Result<Vec<Vec<u32>>, RunError> {
        // (buffer, byte offset, words) -> words, through mapped staging buffers.
        let device = &self.ctx.device;
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("mpmd readback"),
        });
        let staging = self.stage_reads(&mut encoder, buffers);
        self.ctx.queue.submit([encoder.finish()]);
        let words = map_and_read(
            device,
            &staging,
            buffers.iter().map(|b| b.2).collect(),
            None,
        );
        self.pool.put(staging);
        words
    }

    /// Staging buffers (from the pool) and the copies into them, for
    /// `(buffer, byte offset, words)` reads.
    pub(super) fn stage_reads(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        buffers: &[(&wgpu::Buffer, u64, u64)],
    ) -> Vec<wgpu::Buffer> {
        let device = &self.ctx.device;
        buffers
            .iter()
            .map(|&(src, offset, words)| {
                let dst = self
                    .pool
                    .take(device, "mpmd staging", words * 4, STAGING_USAGE);
                if words > 0 {
                    encoder.copy_buffer_to_buffer(src, offset, &dst, 0, words * 4);
                }
                dst
            })
            .collect()
    }
}

/// Maps `staging` and reads `words` words of each; with a `deadline`, a
/// submission that has not finished by then is a time-limit error.
pub(super) fn map_and_read(
    device: &wgpu::Device,
    staging: &[wgpu::Buffer],
    words: Vec<u64>,
    deadline: Deadline,
) -> Result<Vec<Vec<u32>>, RunError> {
    type MapResults = Arc<Mutex<Vec<Option<Result<(), String>>>>>;
    let results: MapResults = Arc::new(Mutex::new(vec![None; staging.len()]));
    for (i, buf) in staging.iter().enumerate() {
        let results = results.clone();
        buf.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            results.lock().unwrap_or_else(|e| e.into_inner())[i] =
                Some(r.map_err(|e| e.to_string()));
        });
    }
    // Another thread polling the same device may be the one that runs our
    // callbacks: wait until they have all arrived, not only until our poll returns.
    let start = std::time::Instant::now();
    let results = loop {
        let poll = match deadline {
            None => wgpu::PollType::wait_indefinitely(),
            Some((at, _)) => wgpu::PollType::Wait {
                submission_index: None,
                timeout: Some(at.saturating_duration_since(std::time::Instant::now())),
            },
        };
        match (device.poll(poll), deadline) {
            (Ok(_), _) => {}
            (Err(wgpu::PollError::Timeout), Some((_, limit))) => {
                return Err(time_limit(
                    "waiting for the dispatches (lavapipe compiles shaders at the first one; they go on on the device)",
                    limit,
                ))
            }
            (Err(e), _) => {
                return Err(RunError::Backend(format!(
                    "waiting for the device failed: {e}"
                )))
            }
        }
        let done = results.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if done.iter().all(Option::is_some) || start.elapsed() > std::time::Duration::from_secs(60)
        {
            break done;
        }
        std::thread::yield_now();
    };
    let mut out = Vec::new();
    for ((buf, r), n) in staging.iter().zip(results).zip(words) {
        match r {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                return Err(RunError::Backend(format!(
                    "reading results back failed: {e}"
                )))
            }
            None => {
                return Err(RunError::Backend(
                    "reading results back did not finish".into(),
                ))
            }
        }
        let view = buf
            .get_mapped_range(..)
            .map_err(|e| RunError::Backend(format!("reading results back failed: {e}")))?;
        let words: &[u32] = bytemuck::cast_slice(&view);
        out.push(words[..n as usize].to_vec());
        drop(view);
        buf.unmap();
    }
    Ok(out)
}

/// 32-bit words of a plan buffer's device storage.
pub(super) fn buffer_words(buf: &BufferPlan) -> u64 {
    words_for(buf.ty.elem, buf.len)
}
