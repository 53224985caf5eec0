//! Running a call's blocks: on all host cores when they are independent,
//! else one at a time in the deterministic or an extra schedule; deadlock reports.

use super::*;

pub(super) fn task_offsets(codes: &[ProgramCode]) -> Vec<u64> {
    let mut acc = 0;
    codes
        .iter()
        .map(|c| {
            let o = acc;
            acc += c.block_count;
            o
        })
        .collect()
}

/// The host's cores, read once per process (`available_parallelism` reads
/// cgroup files each time, a cost a tiny call would pay per buffer).
pub(super) fn host_cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Lanes (blocks times threads) of an independent map below which its
/// blocks run on the calling thread: starting worker threads costs more
/// than running them (a map of a few blocks takes microseconds).
const INLINE_LANES: u64 = 1 << 15;

/// Runs independent blocks (no atomics, no semaphores) on all host cores; the
/// error of the lowest block wins so that reports do not depend on timing.
pub(super) fn run_parallel(
    codes: &[ProgramCode],
    bufs: &[GlobalBuf],
    limits: &Limits,
) -> Result<u64, RunError> {
    let offsets = task_offsets(codes);
    let total: u64 = codes.iter().map(|c| c.block_count).sum();
    let lanes = codes.iter().fold(0u64, |sum, c| {
        sum.saturating_add(c.block_count.saturating_mul(c.threads as u64))
    });
    let workers = if lanes < INLINE_LANES {
        1
    } else {
        host_cores().min(total as usize).max(1) as u64
    };
    let offsets = &offsets;
    if workers == 1 {
        return run_blocks(codes, bufs, limits, offsets, 0..total);
    }
    let results: Vec<Result<u64, RunError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let range = total * w / workers..total * (w + 1) / workers;
                s.spawn(move || run_blocks(codes, bufs, limits, offsets, range))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(RunError::Backend("interpreter worker panicked".into()))
                })
            })
            .collect()
    });
    let mut blocks = 0;
    for r in results {
        blocks += r?;
    }
    Ok(blocks)
}

/// Runs the independent blocks (tasks) `range` in order; stops at the
/// first error.
fn run_blocks(
    codes: &[ProgramCode],
    bufs: &[GlobalBuf],
    limits: &Limits,
    offsets: &[u64],
    range: std::ops::Range<u64>,
) -> Result<u64, RunError> {
    let mut env = Env {
        bufs,
        detect: None,
        alt: None,
        signalled: false,
        late_waits: None,
        codes,
        task_offsets: offsets,
        limits,
        ticks: 0,
    };
    let mut states: Vec<Option<BlockState>> = codes.iter().map(|_| None).collect();
    for task in range.clone() {
        let p = offsets.iter().rposition(|&o| o <= task).unwrap_or(0);
        let code = &codes[p];
        let block = task - offsets[p];
        limits.check_time(|| block_site(code, block))?;
        let st = match &mut states[p] {
            Some(st) => st,
            empty => empty.insert(new_block_state(limits, code, false)?),
        };
        st.reset(code, task as u32, block);
        match st.run(code, &mut env)? {
            Status::Done => {}
            other => {
                return Err(RunError::Backend(format!(
                    "block of an independent program stopped early: {other:?}"
                )))
            }
        }
    }
    Ok(range.end - range.start)
}

/// The cooperative scheduler: lockstep (in order) when `alt` is `None`,
/// otherwise random order with preemption.
pub(super) fn run_sequential(
    codes: &[ProgramCode],
    bufs: &[GlobalBuf],
    limits: &Limits,
    detect: Option<&mut detect::Detector>,
    mut alt: Option<&mut AltSchedule>,
    late_waits: Option<&mut Vec<LateWait>>,
) -> Result<u64, RunError> {
    let offsets = task_offsets(codes);
    let total: u64 = codes.iter().map(|c| c.block_count).sum();
    let detecting = detect.is_some();
    // Alternative schedules start blocks in a random order, a few at a time.
    let start_order: Option<Vec<u32>> = alt.as_deref_mut().map(|a| {
        let mut order: Vec<u32> = (0..total as u32).collect();
        a.rng.shuffle(&mut order);
        order
    });
    const WINDOW: usize = 8;
    let mut env = Env {
        bufs,
        detect,
        alt,
        signalled: false,
        late_waits,
        codes,
        task_offsets: &offsets,
        limits,
        ticks: 0,
    };
    let mut pools: Vec<Vec<BlockState>> = codes.iter().map(|_| vec![]).collect();
    let mut live: BTreeMap<u32, BlockState> = BTreeMap::new();
    let mut ready: VecDeque<u32> = VecDeque::new();
    let mut waiting: Vec<(u32, Status)> = vec![];
    let mut next_start = 0u64;
    let mut done = 0u64;
    let program_of = |task: u32| offsets.iter().rposition(|&o| o <= task as u64).unwrap_or(0);
    loop {
        let can_start = next_start < total;
        let task = match env.alt.as_deref_mut() {
            None => match ready.pop_front() {
                Some(t) => t,
                None if can_start => {
                    next_start += 1;
                    (next_start - 1) as u32
                }
                None => break,
            },
            Some(a) => {
                let prefer_ready = !ready.is_empty()
                    && (!can_start || live.len() >= WINDOW || a.rng.below(2) == 0);
                if prefer_ready {
                    let i = a.rng.below(ready.len() as u64) as usize;
                    match ready.swap_remove_back(i) {
                        Some(t) => t,
                        None => break,
                    }
                } else if can_start {
                    next_start += 1;
                    start_order
                        .as_ref()
                        .map_or(next_start as u32 - 1, |o| o[next_start as usize - 1])
                } else {
                    break;
                }
            }
        };
        let p = program_of(task);
        let code = &codes[p];
        let block = task as u64 - offsets[p];
        limits.check_time(|| block_site(code, block))?;
        let mut st = match live.remove(&task) {
            Some(st) => st,
            None => {
                let mut st = match pools[p].pop() {
                    Some(st) => st,
                    None => new_block_state(limits, code, detecting)?,
                };
                st.reset(code, task, block);
                st
            }
        };
        let status = st.run(code, &mut env)?;
        match status {
            Status::Done => {
                done += 1;
                pools[p].push(st);
            }
            Status::Yielded => {
                ready.push_back(task);
                live.insert(task, st);
            }
            blocked @ Status::Blocked { .. } => {
                waiting.push((task, blocked));
                live.insert(task, st);
            }
        }
        if env.signalled {
            env.signalled = false;
            ready.extend(waiting.drain(..).map(|(t, _)| t));
        }
    }
    if !waiting.is_empty() {
        return Err(deadlock(codes, &offsets, bufs, &waiting));
    }
    Ok(done)
}

pub(super) fn block_site(code: &ProgramCode, block: u64) -> Site {
    Site {
        program: code.program,
        kernel: code.kernel.clone(),
        block,
        thread: None,
    }
}

/// A block's state, charged to the memory budget (blocks that wait stay
/// alive, so a call may hold many at once).
pub(super) fn new_block_state(
    limits: &Limits,
    code: &ProgramCode,
    detect: bool,
) -> Result<BlockState, RunError> {
    limits.charge(BlockState::bytes(code, detect), || {
        format!(
            "the state of a block of program {} (`{}`: registers, locals, smem)",
            code.program, code.kernel
        )
    })?;
    Ok(BlockState::new(code, detect))
}

/// Charges the call's device buffers before any is allocated: their packed
/// words (4 bytes an element, 2 for the 16-bit floats), with detection a
/// written flag and a 16-byte access history per element, with extra
/// schedules a second set beside the first schedule's outputs, and the
/// residents' contents after the call (words and written flags).
pub(super) fn charge_buffers(
    limits: &Limits,
    layout: &Layout,
    detect: bool,
    extra_schedules: bool,
) -> Result<(), RunError> {
    let sum = |f: &dyn Fn(&BufferSpec) -> u64| {
        layout
            .buffers
            .iter()
            .fold(0u64, |sum, b| sum.saturating_add(f(b)))
    };
    let words = sum(&|b| words_of(b.ty.elem, b.len));
    let storage = words.saturating_mul(4);
    let elements = sum(&|b| b.len);
    let detection = if detect {
        elements.saturating_mul(DETECTION_BYTES_PER_ELEMENT)
    } else {
        0
    };
    // Extra schedules: a second set of buffers (and detection state) beside
    // the first schedule's, and the first schedule's outputs kept.
    let copies = if extra_schedules { 2 } else { 1 };
    // A resident's contents after the call are copied out of its buffer.
    let residents = sum(&|b| match b.init {
        Init::Resident { .. } => resident_bytes(b.ty.elem, b.len),
        _ => 0,
    });
    let bytes = storage
        .saturating_mul(copies + u64::from(extra_schedules))
        .saturating_add(detection.saturating_mul(copies))
        .saturating_add(residents);
    limits.charge(bytes, || {
        format!(
            "the call's buffers ({words} words{})",
            if detect {
                ", with race and uninitialised-read detection"
            } else {
                ""
            }
        )
    })
}

/// The wait-for graph of a deadlock: every waiting block, what it waits for,
/// and the semaphore's count.
pub(super) fn deadlock(
    codes: &[ProgramCode],
    offsets: &[u64],
    bufs: &[GlobalBuf],
    waiting: &[(u32, Status)],
) -> RunError {
    let mut lines = vec!["wait-for graph (no live block can signal):".to_string()];
    let mut sorted: Vec<&(u32, Status)> = waiting.iter().collect();
    sorted.sort_by_key(|(t, _)| *t);
    for (task, status) in sorted {
        let p = offsets
            .iter()
            .rposition(|&o| o <= *task as u64)
            .unwrap_or(0);
        let code = &codes[p];
        if let Status::Blocked {
            buf,
            addr,
            amount,
            name,
        } = status
        {
            let count = bufs[*buf].load(*addr as usize) as i32;
            lines.push(format!(
                "  program {} ({}), block {} waits on `{name}` for {amount} (count is {count})",
                code.program,
                code.kernel,
                *task as u64 - offsets[p]
            ));
        }
    }
    RunError::Deadlock {
        wait_for_graph: lines.join("\n"),
    }
}
