//! Running a call's blocks: on all host cores when they are independent,
//! else one at a time in the deterministic or an extra schedule; deadlock reports.

use super::compile::Instr;
use super::*;
use crate::ir::SemOp;

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

/// Runs `work` on each of `parts`, the first on the calling thread (one
/// thread fewer to start) and each other on a thread of its own; the
/// results in the parts' order (a panicked thread gives `panicked`'s error).
pub(super) fn on_host_threads<P: Send, T: Send>(
    parts: impl IntoIterator<Item = P>,
    work: impl Fn(P) -> Result<T, RunError> + Sync,
    panicked: &str,
) -> Vec<Result<T, RunError>> {
    let work = &work;
    std::thread::scope(|s| {
        let mut parts = parts.into_iter();
        let first = parts.next();
        let handles: Vec<_> = parts.map(|p| s.spawn(move || work(p))).collect();
        first
            .map(work)
            .into_iter()
            .chain(handles.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(RunError::Backend(panicked.into())))
            }))
            .collect()
    })
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
    let total: u64 = codes.iter().map(|c| c.block_count).sum();
    match run_parallel_tasks(codes, bufs, limits, 0..total)? {
        (Ran::All(blocks), _) => Ok(blocks),
        (Ran::Waited, _) => Err(stopped_early()),
    }
}

/// How blocks run on several host threads ended, short of an error.
enum Ran {
    /// Every block ran to completion; the number of blocks.
    All(u64),
    /// A block reached a wait it could not meet at once.
    Waited,
}

fn stopped_early() -> RunError {
    RunError::Backend("a block that cannot wait stopped early".into())
}

/// Runs `tasks` (blocks in program order, then block order) as
/// [`run_parallel`] does, on all host cores where they are enough work;
/// also says whether they ran on several threads. Where one reaches a wait
/// it cannot meet at once the result is [`Ran::Waited`].
fn run_parallel_tasks(
    codes: &[ProgramCode],
    bufs: &[GlobalBuf],
    limits: &Limits,
    tasks: std::ops::Range<u64>,
) -> Result<(Ran, bool), RunError> {
    let offsets = task_offsets(codes);
    let lanes = codes.iter().zip(&offsets).fold(0u64, |sum, (c, &first)| {
        let last = first.saturating_add(c.block_count);
        let blocks = last.min(tasks.end).saturating_sub(first.max(tasks.start));
        sum.saturating_add(blocks.saturating_mul(c.threads as u64))
    });
    let count = tasks.end.saturating_sub(tasks.start);
    let workers = if lanes < INLINE_LANES {
        1
    } else {
        host_cores().min(count as usize).max(1) as u64
    };
    let offsets = &offsets;
    if workers == 1 {
        return Ok((run_blocks(codes, bufs, limits, offsets, tasks)?, false));
    }
    let start = tasks.start;
    let range = |w: u64| start + count * w / workers..start + count * (w + 1) / workers;
    let results = on_host_threads(
        (0..workers).map(range),
        |range| run_blocks(codes, bufs, limits, offsets, range),
        "interpreter worker panicked",
    );
    // A wait not met decides first: the caller runs the call again one
    // block at a time, which reports what that schedule meets.
    if results.iter().any(|r| matches!(r, Ok(Ran::Waited))) {
        return Ok((Ran::Waited, true));
    }
    let mut blocks = 0;
    for r in results {
        if let Ran::All(n) = r? {
            blocks += n;
        }
    }
    Ok((Ran::All(blocks), true))
}

/// Runs the blocks (tasks) `range` in order, each to completion; stops at
/// the first error or at a wait that cannot be met at once.
fn run_blocks(
    codes: &[ProgramCode],
    bufs: &[GlobalBuf],
    limits: &Limits,
    offsets: &[u64],
    range: std::ops::Range<u64>,
) -> Result<Ran, RunError> {
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
            Status::Blocked { .. } => return Ok(Ran::Waited),
            Status::Yielded => return Err(stopped_early()),
        }
    }
    Ok(Ran::All(range.end - range.start))
}

/// Whether any instruction of `code` is one `kind` picks.
fn has(code: &ProgramCode, kind: impl Fn(&Instr) -> bool) -> bool {
    code.code.iter().any(kind)
}

/// Tasks from the first that the lockstep schedule runs to completion one
/// after another before any task can wait: the blocks of the leading
/// programs that never wait, read a semaphore or use an atomic (they may
/// signal). Their order cannot change what a race-free call computes, so
/// [`run_lockstep`] runs them on all host cores.
pub(super) fn leading_tasks_that_never_wait(codes: &[ProgramCode]) -> u64 {
    codes
        .iter()
        .take_while(|c| {
            !has(c, |i| {
                matches!(
                    i,
                    Instr::Sem {
                        op: SemOp::Wait | SemOp::WaitNodec,
                        ..
                    } | Instr::SemRead { .. }
                        | Instr::Atomic { .. }
                )
            })
        })
        .fold(0u64, |n, c| n.saturating_add(c.block_count))
}

/// Whether the programs with blocks from task `from` on only take from
/// semaphore counts: no signal, semaphore read, wait without decrement or
/// atomic. Counts then only fall from `from` on, so if every wait of those
/// blocks is met at once in some order, each is met at once in the lockstep
/// order too (the count a wait sees there is at least what is left after
/// all of them), and the counts end the same.
fn only_take_from(codes: &[ProgramCode], from: u64) -> bool {
    codes
        .iter()
        .zip(task_offsets(codes))
        .filter(|(c, first)| first + c.block_count > from)
        .all(|(c, _)| {
            !has(c, |i| {
                matches!(
                    i,
                    Instr::Sem {
                        op: SemOp::Signal | SemOp::WaitNodec,
                        ..
                    } | Instr::SemRead { .. }
                        | Instr::Atomic { .. }
                )
            })
        })
}

/// How [`run_lockstep`] ended, short of an error.
pub(super) enum Lockstep {
    /// The blocks run, and whether some ran on several host threads.
    Done(u64, bool),
    /// A block run on several threads reached a wait it could not meet at
    /// once; the buffers hold a partial run: the call runs again with fresh
    /// buffers, one block at a time ([`run_sequential`]).
    Again,
}

/// The lockstep schedule without detection, of a map whose blocks
/// synchronise: the leading tasks that never wait
/// ([`leading_tasks_that_never_wait`]) run on all host cores first (the
/// lockstep schedule runs each of them to completion in turn, before any
/// task could wait, so no wait is late among them and semaphore counts,
/// additions only, end the same); the rest run on all host cores too when
/// they only take from semaphore counts ([`only_take_from`]) and every wait
/// of theirs is met at once (else [`Lockstep::Again`]), otherwise one at a
/// time in the lockstep order.
pub(super) fn run_lockstep(
    codes: &[ProgramCode],
    bufs: &[GlobalBuf],
    limits: &Limits,
    late_waits: Option<&mut Vec<LateWait>>,
) -> Result<Lockstep, RunError> {
    let total: u64 = codes.iter().map(|c| c.block_count).sum();
    let several = host_cores() > 1;
    let lead = leading_tasks_that_never_wait(codes);
    let (ran, lead_parallel) = if lead > 1 && several {
        match run_parallel_tasks(codes, bufs, limits, 0..lead)? {
            (Ran::All(blocks), parallel) => (blocks, parallel),
            (Ran::Waited, _) => return Err(stopped_early()),
        }
    } else {
        (0, false)
    };
    if total - ran > 1 && several && only_take_from(codes, ran) {
        return Ok(match run_parallel_tasks(codes, bufs, limits, ran..total)? {
            (Ran::All(blocks), parallel) => Lockstep::Done(ran + blocks, lead_parallel || parallel),
            (Ran::Waited, _) => Lockstep::Again,
        });
    }
    let rest = run_sequential_from(codes, bufs, limits, None, None, late_waits, ran)?;
    Ok(Lockstep::Done(ran + rest, lead_parallel))
}

/// The cooperative scheduler: lockstep (in order) when `alt` is `None`,
/// otherwise random order with preemption.
pub(super) fn run_sequential(
    codes: &[ProgramCode],
    bufs: &[GlobalBuf],
    limits: &Limits,
    detect: Option<&mut detect::Detector>,
    alt: Option<&mut AltSchedule>,
    late_waits: Option<&mut Vec<LateWait>>,
) -> Result<u64, RunError> {
    run_sequential_from(codes, bufs, limits, detect, alt, late_waits, 0)
}

/// [`run_sequential`] of the tasks from `first` (in the lockstep schedule,
/// the tasks before it ran to completion already; 0 with `alt`).
fn run_sequential_from(
    codes: &[ProgramCode],
    bufs: &[GlobalBuf],
    limits: &Limits,
    detect: Option<&mut detect::Detector>,
    mut alt: Option<&mut AltSchedule>,
    late_waits: Option<&mut Vec<LateWait>>,
    first: u64,
) -> Result<u64, RunError> {
    let offsets = task_offsets(codes);
    let total: u64 = codes.iter().map(|c| c.block_count).sum();
    let detecting = detect.is_some();
    let start = if alt.is_none() { first.min(total) } else { 0 };
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
    // Boxed: the map shifts its entries on every insert and removal, and a
    // block's state is large (a retried `wait` costs one of each).
    let mut pools: Vec<Vec<Box<BlockState>>> = codes.iter().map(|_| vec![]).collect();
    let mut live: BTreeMap<u32, Box<BlockState>> = BTreeMap::new();
    let mut ready: VecDeque<u32> = VecDeque::new();
    let mut waiting: Vec<(u32, Status)> = vec![];
    let mut next_start = start;
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
                    None => Box::new(new_block_state(limits, code, detecting)?),
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
    // An input no program writes is read where it lies: no words of its own.
    let words = sum(&|b| match b.borrows_input() {
        true => 0,
        false => words_of(b.ty.elem, b.len),
    });
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
