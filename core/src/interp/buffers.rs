//! A call's buffers: binding operands, allocating and filling buffers,
//! compiling every program, collecting outputs.

use super::code::changed_buffers;
use super::*;

/// What a time-limit report says the call was doing while it filled buffers.
pub(super) const FILLING: &str = "allocating and filling the call's buffers";

/// `len` written flags, all `value`, made in chunks that look at the clock.
pub(super) fn flags(len: usize, value: bool, limits: &Limits) -> Result<Vec<bool>, RunError> {
    if !value {
        // Zeroed pages from the allocator: nothing to fill.
        return Ok(vec![false; len]);
    }
    let mut flags = Vec::with_capacity(len);
    limits.fill_in_chunks(len, FILLING, |r| flags.resize(r.end, true))?;
    Ok(flags)
}

/// A buffer of `len` words, a copy of `source` or zeros, taken from `pool`
/// when one of that length is there; large buffers are filled on all host
/// cores. Allocating and filling look at the call's clock between chunks.
/// Fresh zeros come zeroed from the allocator, whose fresh pages are zero
/// already: nothing is written until the blocks write.
pub(super) fn buffer(
    pool: &mut Vec<(Vec<AtomicU32>, Charge)>,
    len: usize,
    source: Option<&[u32]>,
    limits: &Limits,
) -> Result<Vec<AtomicU32>, RunError> {
    let mut words = match pool.iter().position(|(b, _)| b.len() == len) {
        // Its charge becomes the call's.
        Some(i) => {
            let (words, charge) = pool.swap_remove(i);
            limits.absorb(charge);
            words
        }
        None => {
            let Some(source) = source else {
                limits.check_time_during(FILLING)?;
                return bytemuck::allocation::try_zeroed_vec(len).map_err(|()| RunError::Refused {
                    reason: format!("the host could not allocate a buffer of {len} words"),
                });
            };
            let mut words = Vec::with_capacity(len);
            limits.fill_in_chunks(len, FILLING, |r| {
                words.extend(source[r].iter().map(|&v| AtomicU32::new(v)))
            })?;
            return Ok(words);
        }
    };
    // Plain loops over exclusive slices: they compile to memcpy and memset.
    let fill = |part: &mut [AtomicU32], from: usize| -> Result<(), RunError> {
        limits.check_time_during(FILLING)?;
        match source {
            Some(source) => part
                .iter_mut()
                .zip(&source[from..])
                .for_each(|(w, &v)| *w.get_mut() = v),
            None => part.iter_mut().for_each(|w| *w.get_mut() = 0),
        }
        Ok(())
    };
    let workers = if len < 1 << 18 { 1 } else { host_cores() };
    let chunk = len.div_ceil(workers).clamp(1, limits::FILL_CHUNK);
    if workers < 2 {
        for (c, part) in words.chunks_mut(chunk).enumerate() {
            fill(part, c * chunk)?;
        }
        return Ok(words);
    }
    let per_worker = len.div_ceil(workers);
    let fill_part = |w: usize, part: &mut [AtomicU32]| -> Result<(), RunError> {
        for (c, piece) in part.chunks_mut(chunk).enumerate() {
            fill(piece, w * per_worker + c * chunk)?;
        }
        Ok(())
    };
    on_host_threads(
        words.chunks_mut(per_worker).enumerate(),
        |(w, part)| fill_part(w, part),
        "buffer fill panicked",
    )
    .into_iter()
    .collect::<Result<(), RunError>>()?;
    Ok(words)
}

/// Binds operands to buffers and compiles every program.
pub(super) fn prepare(
    map: &MpmdMap,
    meshes: &[Mesh],
    kernels: &[&Kernel],
    residents: &[Resident],
    args: &CallArgs,
) -> Result<(Layout, Vec<ProgramCode>), RunError> {
    let find_mesh = |name: &str| {
        meshes
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| RunError::BadArguments(format!("unknown mesh `{name}`")))
    };
    #[derive(Clone)]
    enum Bound {
        Scalar(ScalarType, u32),
        Buffer(usize, RefType),
        Smem(RefType),
    }
    let mut buffers: Vec<BufferSpec> = vec![];
    let mut bound: Vec<Bound> = vec![];
    let mut by_name: BTreeMap<&str, usize> = BTreeMap::new();
    let mut outputs = vec![];
    let mut total_words = 0u64;
    for (kind, op) in map.operands() {
        let r = match &op.ty {
            Type::Scalar(t) => {
                let v = args.scalar(&op.name, *t)?;
                bound.push(Bound::Scalar(*t, v.to_bits()));
                continue;
            }
            Type::Ref(r) => r,
        };
        match r.space {
            MemorySpace::Smem => {
                bound.push(Bound::Smem(r.clone()));
                continue;
            }
            MemorySpace::Local => {
                return Err(RunError::Backend(format!(
                    "operand `{}` is in local memory",
                    op.name
                )));
            }
            MemorySpace::Gmem | MemorySpace::Sem => {}
        }
        let alias = map
            .aliases
            .iter()
            .find(|a| a.output == op.name)
            .map(|a| a.input.as_str());
        let index = if let (OperandKind::Output, Some(input)) = (kind, alias) {
            *by_name.get(input).ok_or_else(|| {
                RunError::BadArguments(format!(
                    "output `{}` aliases unknown input `{input}`",
                    op.name
                ))
            })?
        } else {
            if let Some(owner) = &r.owner {
                find_mesh(owner)?;
            }
            let shape = host_shape(meshes, r).unwrap_or_default();
            let len = checked_len(&shape)
                .filter(|&n| words_of(r.elem, n) <= MAX_WORDS)
                .ok_or_else(|| RunError::Refused {
                    reason: format!("operand `{}` is larger than {MAX_WORDS} words", op.name),
                })?;
            total_words += words_of(r.elem, len);
            if total_words > MAX_WORDS {
                return Err(RunError::Refused {
                    reason: format!("operands need more than {MAX_WORDS} words"),
                });
            }
            let init = match BufferStart::of(kind, op) {
                Some(BufferStart::Resident) => {
                    let decl = residents
                        .iter()
                        .find(|d| d.name == op.name)
                        .ok_or_else(|| {
                            RunError::BadArguments(format!(
                                "`{}` is bound to a resident the module does not declare",
                                op.name
                            ))
                        })?;
                    Init::Resident {
                        name: op.name.clone(),
                        zeroed: resident_starts_zeroed(decl),
                    }
                }
                Some(BufferStart::Uploaded) => Init::Input(op.name.clone()),
                Some(BufferStart::Zeroed) => Init::Zeroed,
                Some(BufferStart::Uninitialized) | None => Init::Uninitialized,
            };
            buffers.push(BufferSpec {
                ty: r.clone(),
                len,
                shape,
                init,
                // Known once the programs are compiled (below).
                read_only: false,
            });
            buffers.len() - 1
        };
        by_name.insert(&op.name, index);
        if kind == OperandKind::Output {
            outputs.push((op.name.clone(), index));
        }
        bound.push(Bound::Buffer(index, r.clone()));
    }

    let mut codes = vec![];
    for (i, (program, kernel)) in map.programs.iter().zip(kernels).enumerate() {
        let mesh = find_mesh(&program.mesh)?;
        let mut smem = vec![];
        let bindings = bound
            .iter()
            .map(|b| -> Result<ParamBinding, RunError> {
                Ok(match b {
                    Bound::Scalar(ty, bits) => ParamBinding::Scalar {
                        ty: *ty,
                        bits: *bits,
                    },
                    Bound::Buffer(buffer, ty) => ParamBinding::Global {
                        buffer: *buffer,
                        ty: ty.clone(),
                    },
                    Bound::Smem(ty) if ty.owner.as_deref().is_none_or(|o| o == mesh.name) => {
                        let len = checked_len(&ty.shape)
                            .filter(|&n| words_of(ty.elem, n) <= MAX_WORDS)
                            .ok_or_else(|| RunError::Refused {
                                reason: format!("an smem operand is larger than {MAX_WORDS} words"),
                            })?;
                        smem.push(ArrayInfo { len, elem: ty.elem });
                        ParamBinding::Smem {
                            slot: smem.len() - 1,
                            ty: ty.clone(),
                        }
                    }
                    Bound::Smem(_) => ParamBinding::Foreign,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        codes.push(compile::compile(
            ProgramId::new(i),
            kernel,
            mesh,
            meshes,
            &bindings,
            smem,
        )?);
    }
    let written = changed_buffers(&codes, buffers.len());
    for (spec, written) in buffers.iter_mut().zip(written) {
        spec.read_only = !written;
    }
    let tasks: u64 = codes.iter().map(|c| c.block_count).sum();
    if tasks > u32::MAX as u64 {
        return Err(RunError::Refused {
            reason: format!("{tasks} blocks in one call (at most {})", u32::MAX),
        });
    }
    Ok((
        Layout {
            map: map.name.clone(),
            buffers,
            outputs,
        },
        codes,
    ))
}

pub(super) fn collect_outputs(layout: &Layout, bufs: &[GlobalBuf]) -> BTreeMap<Name, HostTensor> {
    layout
        .outputs
        .iter()
        .map(|(name, i)| {
            let spec = &layout.buffers[*i];
            let words = bufs[*i].to_vec();
            (
                name.clone(),
                HostTensor::from_packed(spec.ty.elem, spec.shape.clone(), words),
            )
        })
        .collect()
}
