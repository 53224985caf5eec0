//! Recording a run (`encode`) and the host-copy path (`Backend::run`).

use std::sync::atomic::Ordering;

use mpmd_core::backend::{Backend, RunError, RunOptions};
use mpmd_core::bind::{provider, Provider};
use mpmd_core::host::{CallArgs, CallOutputs, HostTensor};
use mpmd_core::plan::{BufferId, BufferInit, LaunchPlan};

use super::cache::ResidentBuffer;
use super::{PreparedMap, WgpuBackend, STORAGE_USAGE};
use crate::emit::{PARAMS_BINDING, STATUS_BINDING, STATUS_WORDS, TICKET_WORD};

use super::cache::{buffer_words, map_and_read};
use super::prepared::params_words;

impl WgpuBackend {
    /// Records one run of `map` into a new command encoder: parameters
    /// written, status and zero-started buffers cleared, caller buffers
    /// (`bound`, per plan buffer) and residents bound or copied into the
    /// packed arenas, every dispatch in schedule order, and outputs and
    /// residents copied out of the arenas. The caller submits it (inside an
    /// error scope it pushed first).
    pub(super) fn encode(
        &mut self,
        map: &PreparedMap,
        bound: &[Option<&wgpu::Buffer>],
        params_words: &[u32],
    ) -> Result<wgpu::CommandEncoder, RunError> {
        let plan = &map.plan;
        let emitted = &map.compiled.emitted;
        // Queue writes land before the next submission's commands.
        self.ctx
            .queue
            .write_buffer(&map.params, 0, bytemuck::cast_slice(params_words));
        // Each buffer a run uses besides the backend's own: the caller's, or a resident.
        let mut sources: Vec<Option<wgpu::Buffer>> = Vec::with_capacity(plan.buffers.len());
        for (buffer, given) in plan.buffers.iter().zip(bound) {
            sources.push(match (given, &buffer.init) {
                (Some(given), _) => Some((*given).clone()),
                (None, BufferInit::Resident(name)) => {
                    Some(self.resident_buffer(name, plan, buffer)?)
                }
                (None, _) => None,
            });
        }
        let device = &self.ctx.device;
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("mpmd call"),
        });
        if map.status_dirty.swap(false, Ordering::Relaxed) {
            encoder.clear_buffer(&map.status, 0, None);
        } else {
            encoder.clear_buffer(&map.status, TICKET_WORD as u64 * 4, Some(4));
        }
        let missing = |index: BufferId| {
            RunError::Backend(format!(
                "internal: plan buffer {index} (`{}`) has no memory",
                plan.buffer(index).operands.join("=")
            ))
        };
        let mut binding_buffers = Vec::with_capacity(emitted.layout.bindings.len());
        let mut copy_back: Vec<(wgpu::Buffer, u64, wgpu::Buffer, u64)> = Vec::new();
        for (binding, own) in emitted.layout.bindings.iter().zip(&map.own) {
            if !emitted.layout.packed {
                let (index, _) = binding.members[0];
                let buf = plan.buffer(index);
                let buffer = sources[index.index()]
                    .clone()
                    .or_else(|| own.clone())
                    .ok_or_else(|| missing(index))?;
                let words = buffer_words(buf);
                if buf.init == BufferInit::Zeroed && words > 0 {
                    encoder.clear_buffer(&buffer, 0, Some(words * 4));
                }
                binding_buffers.push(buffer);
                continue;
            }
            let arena = own.clone().ok_or_else(|| missing(binding.members[0].0))?;
            for &(index, offset) in &binding.members {
                let buf = plan.buffer(index);
                let bytes = buffer_words(buf) * 4;
                if bytes == 0 {
                    continue;
                }
                match (&buf.init, &sources[index.index()]) {
                    (BufferInit::Zeroed, _) => {
                        encoder.clear_buffer(&arena, offset * 4, Some(bytes));
                    }
                    (BufferInit::Input(_) | BufferInit::Resident(_), Some(source)) => {
                        encoder.copy_buffer_to_buffer(source, 0, &arena, offset * 4, bytes);
                    }
                    _ => {}
                }
                if let Some(source) = &sources[index.index()] {
                    let written =
                        buf.output.is_some() || matches!(buf.init, BufferInit::Resident(_));
                    if written {
                        copy_back.push((arena.clone(), offset * 4, source.clone(), bytes));
                    }
                }
            }
            binding_buffers.push(arena);
        }
        let mut entries = vec![
            wgpu::BindGroupEntry {
                binding: PARAMS_BINDING,
                resource: map.params.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: STATUS_BINDING,
                resource: map.status.as_entire_binding(),
            },
        ];
        for (binding, buffer) in emitted.layout.bindings.iter().zip(&binding_buffers) {
            entries.push(wgpu::BindGroupEntry {
                binding: binding.binding,
                resource: buffer.as_entire_binding(),
            });
        }
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("mpmd operands"),
            layout: &map.compiled.layout,
            entries: &entries,
        });
        // One dispatch per launch unit, in plan order, with the semaphore
        // dispatches between them: dispatch boundaries are WGSL's only
        // ordering between workgroups.
        // A block-split unit repeats its one-workgroup dispatch once per
        // block; each takes the next ticket, so the blocks run in order.
        for (pipeline, step) in map.compiled.pipelines.iter().zip(&emitted.schedule) {
            let dims = step.workgroups;
            for _ in 0..step.repeat {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(&step.entry_point),
                    timestamp_writes: None,
                });
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(dims[0], dims[1], dims[2]);
            }
        }
        for (arena, offset, target, bytes) in &copy_back {
            encoder.copy_buffer_to_buffer(arena, *offset, target, 0, *bytes);
        }
        Ok(encoder)
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> &'static str {
        "wgpu"
    }

    /// The host-copy path: prepares `plan` (once; the run cache keeps it),
    /// uploads the inputs into pooled buffers, runs it as
    /// [`WgpuBackend::enqueue`] does, and reads the outputs and the status
    /// back in the same submission. Errors of runs enqueued earlier are
    /// reported first.
    fn run(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        if !self.pending.is_empty() {
            self.synchronize()?;
        }
        self.start_clock();
        let map = self.run_prepared(plan, options.mode)?;
        let params = params_words(&map.compiled.emitted, &args.scalars)?;
        for buf in &plan.buffers {
            if let BufferInit::Input(name) = &buf.init {
                args.input(name, buf.ty.elem, buf.len)?;
            }
        }
        // The caller's buffers come from the pool (stale contents: the run
        // clears what must start at zero) and go back to it after the call.
        let ctx = self.ctx.clone();
        let mut lent: Vec<wgpu::Buffer> = Vec::new();
        let mut bound: Vec<Option<wgpu::Buffer>> = Vec::with_capacity(plan.buffers.len());
        for buf in &plan.buffers {
            if provider(buf) != Provider::Caller {
                bound.push(None);
                continue;
            }
            let words = buffer_words(buf);
            let buffer = self.pool.take(
                &ctx.device,
                &buf.operands.join("="),
                words * 4,
                STORAGE_USAGE,
            );
            if let BufferInit::Input(name) = &buf.init {
                if words > 0 {
                    ctx.queue.write_buffer(
                        &buffer,
                        0,
                        bytemuck::cast_slice(args.inputs[name].words()),
                    );
                }
            }
            lent.push(buffer.clone());
            bound.push(Some(buffer));
        }
        let bound_refs: Vec<Option<&wgpu::Buffer>> = bound.iter().map(Option::as_ref).collect();
        let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder = self.encode(&map, &bound_refs, &params)?;
        // The status and every output come back in the same submission.
        let mut reads: Vec<(&wgpu::Buffer, u64, u64)> = vec![(&map.status, 0, STATUS_WORDS as u64)];
        let mut outputs = Vec::new();
        for (index, buf) in plan.buffers.iter().enumerate() {
            let Some(name) = &buf.output else { continue };
            let source = match (&bound[index], &buf.init) {
                (Some(buffer), _) => buffer,
                (None, BufferInit::Resident(resident)) => &self.residents[resident].buffer,
                (None, _) => {
                    return Err(RunError::Backend(format!(
                        "internal: output `{name}` has no buffer"
                    )))
                }
            };
            reads.push((source, 0, buffer_words(buf)));
            outputs.push((name.clone(), buf));
        }
        let staging = self.stage_reads(&mut encoder, &reads);
        let lengths: Vec<u64> = reads.iter().map(|r| r.2).collect();
        ctx.queue.submit([encoder.finish()]);
        if let Some(err) = pollster::block_on(scope.pop()) {
            return Err(RunError::Backend(format!(
                "wgpu rejected the launch: {err}"
            )));
        }
        let words = map_and_read(&ctx.device, &staging, lengths, self.deadline);
        self.pool.put(staging);
        self.pool.put(lent);
        let mut words = words?;
        let status_words = words.remove(0);
        if status_words[0] != 0 {
            map.status_dirty.store(true, Ordering::Relaxed);
            return Err(self.decode_error(plan, &map.compiled.emitted, &status_words));
        }
        let mut result = CallOutputs::default();
        for ((name, buf), data) in outputs.into_iter().zip(words) {
            // Packed words; the padding half of an odd-length 16-bit buffer is dropped.
            let tensor = HostTensor::from_words(buf.ty.elem, plan.host_shape(buf), data)
                .map_err(|e| RunError::Backend(format!("output `{name}`: {e}")))?;
            result.outputs.insert(name, tensor);
        }
        Ok(result)
    }

    fn set_resident(&mut self, name: &str, tensor: HostTensor) -> Result<(), RunError> {
        let words = tensor.words().len() as u64;
        let buffer = match self.residents.get(name) {
            Some(r) if r.words == words => r.buffer.clone(),
            _ => self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(name),
                size: words.max(1) * 4,
                usage: STORAGE_USAGE,
                mapped_at_creation: false,
            }),
        };
        // Queue writes land before any later submission: the next call sees them.
        if words > 0 {
            self.ctx
                .queue
                .write_buffer(&buffer, 0, bytemuck::cast_slice(tensor.words()));
        }
        self.residents.insert(
            name.to_string(),
            ResidentBuffer {
                buffer,
                elem: tensor.elem(),
                shape: tensor.shape().to_vec(),
                elements: tensor.len() as u64,
                words,
            },
        );
        Ok(())
    }

    fn resident(&self, name: &str) -> Option<HostTensor> {
        let r = self.residents.get(name)?;
        let words = self.read_words(&[(&r.buffer, 0, r.words)]).ok()?.pop()?;
        HostTensor::from_words(r.elem, r.shape.clone(), words).ok()
    }
}
