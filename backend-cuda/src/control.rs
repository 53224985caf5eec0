//! The per-call control block: ticket counter, abort flag and the first
//! error record (layout mirrored by the `MPMD_CTL_*` words in prelude.cu).

use mpmd_core::backend::Site;
use mpmd_core::ir::Stmt;
use mpmd_core::plan::{LaunchPlan, ProgramId};
use mpmd_core::RunError;

use crate::emit::EmittedModule;

// Only the kernel takes tickets; listed so that the layout is whole here.
#[allow(dead_code)]
pub const TICKET: usize = 0;
pub const ABORT: usize = 1;
pub const CLAIMED: usize = 2;
pub const KIND: usize = 3;
pub const PROGRAM: usize = 4;
pub const BLOCK: usize = 5;
pub const THREAD: usize = 6;
pub const REF: usize = 7;
pub const NCOORDS: usize = 8;
pub const NINDEX: usize = 9;
pub const COORDS: usize = 10;
pub const INDEX: usize = 16;
/// The device address (low word, high word) of the call's status word in
/// host-mapped memory: the kernel sets it to 1 when it records an error.
pub const STATUS_LO: usize = 24;
pub const STATUS_HI: usize = 25;
/// Words cleared before each launch (all but the status address).
pub const CLEARED_WORDS: usize = 24;
/// Words in the control block.
pub const WORDS: usize = 26;

pub const ERR_WAIT_TIMEOUT: u32 = 1;
pub const ERR_OUT_OF_BOUNDS: u32 = 2;
/// A run-time signal or wait amount below 1; word [`THREAD`] holds the amount.
pub const ERR_SEM_AMOUNT: u32 = 3;
/// A `while` reached its maximum (checked mode): word [`REF`] holds the
/// loop's ordinal, [`INDEX`] the maximum, [`THREAD`] the thread.
pub const ERR_LOOP_LIMIT: u32 = 4;

fn list(values: &[u32]) -> String {
    let parts: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// `[i, j]`, or `@[c0, c1][i, j]` for an access naming an owner's block
/// (out-of-bounds reports give the index and the shape this way).
pub fn format_access(coords: &[u32], index: &[u32]) -> String {
    if coords.is_empty() {
        list(index)
    } else {
        format!("@{}{}", list(coords), list(index))
    }
}

/// The run error the control block records, if any.
pub fn decode(words: &[u32], module: &EmittedModule) -> Option<RunError> {
    if words.len() < WORDS || words[CLAIMED] == 0 {
        return None;
    }
    let program = ProgramId::new(words[PROGRAM] as usize);
    let kernel = module
        .tickets
        .iter()
        .find(|t| t.program == program)
        .map(|t| t.kernel.clone())
        .unwrap_or_default();
    let info = module.refs.get(words[REF] as usize);
    let reference = info.map(|r| r.name.clone()).unwrap_or_else(|| "?".into());
    let ncoords = (words[NCOORDS] as usize).min(6);
    let nindex = (words[NINDEX] as usize).min(8);
    let coords = &words[COORDS..COORDS + ncoords];
    let index = &words[INDEX..INDEX + nindex];
    let access = format_access(coords, index);
    let element = mpmd_core::backend::element_text(&reference, coords, index);
    // Semaphore operations are block-collective: their records name no thread.
    let block_site = || Site {
        program,
        kernel: kernel.clone(),
        block: words[BLOCK] as u64,
        thread: None,
    };
    match words[KIND] {
        ERR_WAIT_TIMEOUT => Some(RunError::WaitTimeout {
            site: block_site(),
            semaphore: element.clone(),
        }),
        ERR_SEM_AMOUNT => Some(RunError::BadSemaphoreAmount {
            site: block_site(),
            semaphore: element.clone(),
            amount: i64::from(words[THREAD] as i32),
        }),
        ERR_LOOP_LIMIT => Some(RunError::LoopLimit {
            site: Site {
                program,
                kernel,
                block: words[BLOCK] as u64,
                thread: Some(words[THREAD]),
            },
            ordinal: words[REF],
            // `decode_for_plan` fills it in from the kernel.
            condition: String::new(),
            max: index.first().copied().unwrap_or(0),
        }),
        ERR_OUT_OF_BOUNDS => {
            let shape = info
                .map(|r| {
                    if coords.is_empty() {
                        list(&r.shape)
                    } else {
                        format_access(&r.owner_block_shape, &r.shape)
                    }
                })
                .unwrap_or_default();
            Some(RunError::OutOfBounds {
                site: Site {
                    program,
                    kernel,
                    block: words[BLOCK] as u64,
                    thread: Some(words[THREAD]),
                },
                reference,
                index: access,
                shape,
            })
        }
        other => Some(RunError::Backend(format!(
            "the kernel recorded an unknown error kind {other}"
        ))),
    }
}

/// [`decode`], plus what the plan proves: a wait that timed out on a
/// semaphore no program of the call signals and that is not device-resident
/// could never have been met, so it is a deadlock, not just a slow wait.
pub fn decode_for_plan(
    words: &[u32],
    module: &EmittedModule,
    plan: &LaunchPlan,
) -> Option<RunError> {
    let mut error = decode(words, module)?;
    if let RunError::LoopLimit {
        site,
        ordinal,
        condition,
        ..
    } = &mut error
    {
        let unit = plan.unit_of_program(site.program);
        let loops = unit.map(|u| mpmd_core::ir::visit::while_loops(&u.kernel.body));
        if let Some(Stmt::While { cond, .. }) =
            loops.and_then(|l| l.get(*ordinal as usize).copied())
        {
            *condition = mpmd_core::text::print_expr(cond);
        }
        return Some(error);
    }
    let RunError::WaitTimeout { site, semaphore } = &error else {
        return Some(error);
    };
    let name = module
        .refs
        .get(words[REF] as usize)
        .map(|r| r.name.as_str())?;
    let never_signalled = plan.graph.unsignaled_waits.iter().any(|w| {
        !w.resident
            && w.semaphore == name
            && plan
                .units
                .get(w.unit.index())
                .is_some_and(|u| u.program == site.program)
    });
    if never_signalled {
        return Some(RunError::Deadlock {
            wait_for_graph: format!(
                "{site} waits on `{semaphore}`, which no program of this call signals (and it is not device-resident)"
            ),
        });
    }
    Some(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::{RecordedRef, TicketRange};

    fn module() -> EmittedModule {
        EmittedModule {
            source: String::new(),
            kernel_name: "mpmd_m".into(),
            schedule: crate::emit::BlockSchedule::Tickets,
            block_dim: 128,
            total_blocks: 4,
            dynamic_smem_bytes: 0,
            params: vec![],
            refs: vec![RecordedRef {
                name: "ready".into(),
                shape: vec![4],
                owner_block_shape: vec![2, 2],
            }],
            tickets: vec![TicketRange {
                program: ProgramId::new(1),
                kernel: "consume".into(),
                first: 0,
                count: 4,
            }],
        }
    }

    #[test]
    fn decodes_out_of_bounds() {
        let mut w = vec![0u32; WORDS];
        w[CLAIMED] = 1;
        w[KIND] = ERR_OUT_OF_BOUNDS;
        w[PROGRAM] = 1;
        w[BLOCK] = 3;
        w[THREAD] = 17;
        w[NCOORDS] = 2;
        w[COORDS] = 1;
        w[COORDS + 1] = 0;
        w[NINDEX] = 1;
        w[INDEX] = 9;
        let e = decode(&w, &module()).unwrap();
        assert_eq!(
            e.to_string(),
            "out-of-bounds access at program 1 (consume), block 3, thread 17: `ready` index @[1, 0][9] (shape @[2, 2][4])"
        );
    }

    #[test]
    fn decodes_wait_timeout() {
        let mut w = vec![0u32; WORDS];
        w[CLAIMED] = 1;
        w[KIND] = ERR_WAIT_TIMEOUT;
        w[PROGRAM] = 1;
        w[BLOCK] = 2;
        w[NINDEX] = 1;
        w[INDEX] = 3;
        assert_eq!(
            decode(&w, &module()).unwrap().to_string(),
            "wait on `ready[3]` timed out at program 1 (consume), block 2"
        );
        assert_eq!(decode(&[0u32; WORDS], &module()), None);
    }

    #[test]
    fn decodes_a_semaphore_amount_below_one() {
        let mut w = vec![0u32; WORDS];
        w[CLAIMED] = 1;
        w[KIND] = ERR_SEM_AMOUNT;
        w[PROGRAM] = 1;
        w[BLOCK] = 2;
        w[THREAD] = -1i32 as u32;
        w[NINDEX] = 1;
        w[INDEX] = 3;
        assert_eq!(
            decode(&w, &module()).unwrap().to_string(),
            "semaphore amount -1 on `ready[3]` at program 1 (consume), block 2: a signal or wait amount must be at least 1"
        );
    }

    /// The layout here is the prelude's (`MPMD_CTL_*`, `MPMD_ERR_*`).
    #[test]
    fn the_layout_is_the_preludes() {
        let defined = |name: &str| {
            crate::PRELUDE.lines().find_map(|line| {
                let value = line.strip_prefix("#define ")?.strip_prefix(name)?;
                let value = value.strip_prefix(' ')?.split_whitespace().next()?;
                value.trim_end_matches('u').parse::<u32>().ok()
            })
        };
        let words = [
            ("MPMD_CTL_TICKET", TICKET),
            ("MPMD_CTL_ABORT", ABORT),
            ("MPMD_CTL_CLAIMED", CLAIMED),
            ("MPMD_CTL_KIND", KIND),
            ("MPMD_CTL_PROGRAM", PROGRAM),
            ("MPMD_CTL_BLOCK", BLOCK),
            ("MPMD_CTL_THREAD", THREAD),
            ("MPMD_CTL_REF", REF),
            ("MPMD_CTL_NCOORDS", NCOORDS),
            ("MPMD_CTL_NINDEX", NINDEX),
            ("MPMD_CTL_COORDS", COORDS),
            ("MPMD_CTL_INDEX", INDEX),
            ("MPMD_CTL_STATUS_LO", STATUS_LO),
            ("MPMD_CTL_STATUS_HI", STATUS_HI),
        ];
        for (name, word) in words {
            assert_eq!(defined(name), Some(word as u32), "{name}");
        }
        let kinds = [
            ("MPMD_ERR_WAIT_TIMEOUT", ERR_WAIT_TIMEOUT),
            ("MPMD_ERR_OUT_OF_BOUNDS", ERR_OUT_OF_BOUNDS),
            ("MPMD_ERR_SEM_AMOUNT", ERR_SEM_AMOUNT),
            ("MPMD_ERR_LOOP_LIMIT", ERR_LOOP_LIMIT),
        ];
        for (name, kind) in kinds {
            assert_eq!(defined(name), Some(kind), "{name}");
        }
    }
}
