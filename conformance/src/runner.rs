//! Running the corpus on worker threads: the time limit that tells a hung
//! case from a slow machine, and the progress lines on stderr.
//!
//! A case's limit is counted in *machine time*: wall time scaled by the
//! share of the machine that this process used or that stood idle (what
//! this run had or could have had). Time the CPUs spent on other programs
//! (parallel builds, other test runs) is not counted, so a busy machine
//! stretches the wall-clock limit instead of failing the case; on an
//! otherwise idle machine machine time is wall time. A case spinning in a
//! hang (a kernel loop, lavapipe's threads) keeps the process busy and is
//! charged in full; a case blocked in a hang leaves the CPUs idle, which is
//! charged too. Only a blocked case on a machine that others keep fully
//! busy is charged little; `backstop` (a multiple of the limit, in wall
//! time) ends that one.
//!
//! The figures come from `/proc/stat` (the machine's busy and idle ticks)
//! and `/proc/self/stat` (this process's CPU ticks, every thread's, and its
//! finished children's: the host compiler, ptxas); where
//! they cannot be read (not Linux), machine time is wall time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::analysis::BackendId;
use crate::backends::Environment;
use crate::case::Case;
use crate::run::{run_case_reporting, triage_selected, CaseResult, RunConfig, Status};

/// How long a case may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Machine time (see the module's documentation) before a case counts
    /// as hung.
    pub machine: Duration,
    /// Wall time before a case counts as hung whatever the machine did.
    pub backstop: Duration,
}

impl Limit {
    /// How many times the machine-time limit the wall-clock backstop is.
    pub const BACKSTOP_FACTOR: u32 = 10;

    /// `machine` seconds of machine time, with the backstop at
    /// [`Self::BACKSTOP_FACTOR`] times that in wall time.
    pub fn of_seconds(machine: u64) -> Limit {
        let machine = Duration::from_secs(machine);
        Limit {
            machine,
            backstop: machine.saturating_mul(Self::BACKSTOP_FACTOR),
        }
    }
}

/// One reading of the CPU counters, in the kernel's clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSample {
    /// This process's user and system ticks, every thread, and those of
    /// the children it waited for.
    pub process: u64,
    /// The machine's ticks, every CPU and state.
    pub total: u64,
    /// The machine's idle and I/O-wait ticks.
    pub idle: u64,
}

impl CpuSample {
    /// The counters now, or `None` where they cannot be read.
    pub fn read() -> Option<CpuSample> {
        let machine = std::fs::read_to_string("/proc/stat").ok()?;
        let process = std::fs::read_to_string("/proc/self/stat").ok()?;
        let (total, idle) = machine_ticks(&machine)?;
        Some(CpuSample {
            process: process_ticks(&process)?,
            total,
            idle,
        })
    }
}

/// The machine's total and idle (idle + iowait) ticks from `/proc/stat`'s
/// first line (`cpu user nice system idle iowait irq softirq steal ...`).
/// Guest time is already inside user time and is not added again.
pub fn machine_ticks(proc_stat: &str) -> Option<(u64, u64)> {
    let line = proc_stat.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let values: Vec<u64> = fields.map(|f| f.parse().ok()).collect::<Option<_>>()?;
    if values.len() < 4 {
        return None;
    }
    let counted = values.len().min(8);
    let total = values[..counted].iter().sum();
    let idle = values[3] + values.get(4).copied().unwrap_or(0);
    Some((total, idle))
}

/// A process's user and system ticks, with those of the children it has
/// waited for (the host compiler, ptxas), from its `/proc/PID/stat` (fields
/// 14 to 17; the command name, field 2, may hold spaces and parentheses, so
/// fields are counted after its last `)`).
pub fn process_ticks(proc_pid_stat: &str) -> Option<u64> {
    let after_name = &proc_pid_stat[proc_pid_stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // fields[0] is field 3 (the state), so field 14 is fields[11].
    (11..15).try_fold(0u64, |sum, k| {
        Some(sum + fields.get(k)?.parse::<u64>().ok()?)
    })
}

/// The share of the machine between two readings that was this process's
/// or idle; 1 when no ticks passed. It may pass 1: a child's CPU time
/// arrives all at once when it exits (see [`MachineClock::tick`]).
pub fn available_share(before: &CpuSample, after: &CpuSample) -> f64 {
    let total = after.total.saturating_sub(before.total);
    if total == 0 {
        return 1.0;
    }
    let ours = after.process.saturating_sub(before.process);
    let idle = after.idle.saturating_sub(before.idle);
    (ours + idle) as f64 / total as f64
}

/// The machine time one case has been charged.
#[derive(Debug)]
pub struct MachineClock {
    started: Instant,
    last_wall: Instant,
    last: Option<CpuSample>,
    charged: Duration,
}

impl MachineClock {
    pub fn start() -> MachineClock {
        let now = Instant::now();
        MachineClock {
            started: now,
            last_wall: now,
            last: CpuSample::read(),
            charged: Duration::ZERO,
        }
    }

    /// Charges the time since the last reading and returns the total. A
    /// finished child's CPU time (ptxas, the host compiler) is counted in
    /// the interval it exits in, so one interval may be charged more than
    /// its wall time; the total never passes the wall time since the start.
    pub fn tick(&mut self) -> Duration {
        let now = Instant::now();
        let sample = CpuSample::read();
        let share = match (&self.last, &sample) {
            (Some(before), Some(after)) => available_share(before, after),
            _ => 1.0,
        };
        self.charged =
            (self.charged + (now - self.last_wall).mul_f64(share)).min(now - self.started);
        self.last_wall = now;
        self.last = sample;
        self.charged
    }

    pub fn charged(&self) -> Duration {
        self.charged
    }

    pub fn wall(&self) -> Duration {
        self.started.elapsed()
    }
}

/// How often a waiting worker charges its case.
const TICK: Duration = Duration::from_millis(500);

/// How often a line lists the cases still running while none finishes.
const STILL_RUNNING_EVERY: Duration = Duration::from_secs(30);

/// What a running case is doing, for the progress lines and a hang's report.
#[derive(Clone, Debug)]
struct Running {
    name: String,
    stage: String,
    charged: Duration,
    wall: Duration,
}

type RunningCases = Arc<Mutex<BTreeMap<usize, Running>>>;

/// Runs the cases on `jobs` workers and returns their results in corpus
/// order. A case that exceeds `limit` fails on every backend (its thread is
/// abandoned: a hung device call cannot be interrupted). Progress goes to
/// stderr: a line per finished case, and while none finishes, a line every
/// [`STILL_RUNNING_EVERY`] naming the cases running and their time.
pub fn run_all(
    cases: Vec<Case>,
    config: Arc<RunConfig>,
    env: Arc<Environment>,
    jobs: usize,
    limit: Limit,
) -> Vec<CaseResult> {
    let total = cases.len();
    let cases: Arc<Vec<Case>> = Arc::new(cases);
    let next = Arc::new(AtomicUsize::new(0));
    let running: RunningCases = Arc::default();
    let mut slots: Vec<Option<CaseResult>> = vec![None; total];
    let (done_tx, done_rx) = mpsc::channel::<(usize, CaseResult, Duration)>();
    let workers: Vec<_> = (0..jobs.min(total))
        .map(|_| {
            let (cases, config, env, next, done_tx, running) = (
                cases.clone(),
                config.clone(),
                env.clone(),
                next.clone(),
                done_tx.clone(),
                running.clone(),
            );
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= cases.len() {
                    break;
                }
                let (result, wall) = run_watched(&cases, i, &config, &env, limit, &running);
                if done_tx.send((i, result, wall)).is_err() {
                    break;
                }
            })
        })
        .collect();
    drop(done_tx);
    let started = Instant::now();
    let mut finished = 0;
    let mut failed = 0;
    loop {
        match done_rx.recv_timeout(STILL_RUNNING_EVERY) {
            Ok((i, result, wall)) => {
                finished += 1;
                let fail = result
                    .results
                    .values()
                    .any(|s| matches!(s, Status::Fail(_)));
                failed += usize::from(fail);
                eprintln!(
                    "{}",
                    finished_line(finished, total, &result, wall, fail, failed)
                );
                slots[i] = Some(result);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = running.lock().map(|r| r.clone()).unwrap_or_default();
                eprintln!(
                    "{}",
                    still_running_line(finished, total, started.elapsed(), &now, limit)
                );
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    for w in workers {
        let _ = w.join();
    }
    slots.into_iter().flatten().collect()
}

/// Runs case `i` on its own thread and waits for it within `limit`.
fn run_watched(
    cases: &Arc<Vec<Case>>,
    i: usize,
    config: &Arc<RunConfig>,
    env: &Arc<Environment>,
    limit: Limit,
    running: &RunningCases,
) -> (CaseResult, Duration) {
    let name = cases[i].name.clone();
    let set_running = |stage: &str, clock: &MachineClock| {
        if let Ok(mut r) = running.lock() {
            r.insert(
                i,
                Running {
                    name: name.clone(),
                    stage: stage.to_string(),
                    charged: clock.charged(),
                    wall: clock.wall(),
                },
            );
        }
    };
    let stage = Arc::new(Mutex::new(String::from("set-up")));
    let (tx, rx) = mpsc::channel();
    {
        let (c, cfg, en, stage) = (cases.clone(), config.clone(), env.clone(), stage.clone());
        std::thread::spawn(move || {
            let report = |now: &str| {
                if let Ok(mut s) = stage.lock() {
                    *s = now.to_string();
                }
            };
            let _ = tx.send(run_case_reporting(&c[i], &cfg, &en, &report));
        });
    }
    let mut clock = MachineClock::start();
    let outcome = loop {
        match rx.recv_timeout(TICK) {
            Ok(result) => break Ok(result),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Err("the harness panicked on this case".to_string())
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let charged = clock.tick();
                let now = stage.lock().map(|s| s.clone()).unwrap_or_default();
                set_running(&now, &clock);
                if charged > limit.machine || clock.wall() > limit.backstop {
                    break Err(hang_message(&now, charged, clock.wall(), limit));
                }
            }
        }
    };
    if let Ok(mut r) = running.lock() {
        r.remove(&i);
    }
    let wall = clock.wall();
    let result = outcome.unwrap_or_else(|why| CaseResult {
        name: name.clone(),
        kind: cases[i].kind(),
        tags: vec![],
        results: config
            .backends
            .iter()
            .map(|&b: &BackendId| (b, Status::Fail(why.clone())))
            .collect(),
        triage: triage_selected(&config.backends)
            .then(|| Status::Skip("not run: the case did not finish".into())),
        elapsed: Default::default(),
    });
    (result, wall)
}

/// Why a case that ran past its limit failed.
pub fn hang_message(stage: &str, charged: Duration, wall: Duration, limit: Limit) -> String {
    if charged > limit.machine {
        format!(
            "timed out: still running {stage} after {} s of machine time (the limit, --timeout; {} s wall: \
             time the CPUs spent on other programs is not counted)",
            limit.machine.as_secs(),
            wall.as_secs()
        )
    } else {
        format!(
            "timed out: still running {stage} after {} s wall (the backstop, {} x --timeout), \
             {} s of it machine time",
            wall.as_secs(),
            Limit::BACKSTOP_FACTOR,
            charged.as_secs()
        )
    }
}

/// `[  12/172] pass  name  1.2 s` (or `FAIL`, with the failures so far).
pub fn finished_line(
    finished: usize,
    total: usize,
    result: &CaseResult,
    wall: Duration,
    fail: bool,
    failed: usize,
) -> String {
    let width = total.to_string().len();
    let verdict = if fail { "FAIL" } else { "done" };
    let failures = if failed > 0 {
        format!(" ({failed} failed so far)")
    } else {
        String::new()
    };
    format!(
        "[{finished:>width$}/{total}] {verdict} {} {:.1} s{failures}",
        result.name,
        wall.as_secs_f64()
    )
}

fn still_running_line(
    finished: usize,
    total: usize,
    elapsed: Duration,
    running: &BTreeMap<usize, Running>,
    limit: Limit,
) -> String {
    let cases: Vec<String> = running
        .values()
        .map(|r| {
            format!(
                "{} ({}; {} of {} s machine time, {} s wall)",
                r.name,
                r.stage,
                r.charged.as_secs(),
                limit.machine.as_secs(),
                r.wall.as_secs()
            )
        })
        .collect();
    format!(
        "[{finished}/{total}] {} s: still running {}",
        elapsed.as_secs(),
        cases.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_line_gives_total_and_idle_ticks() {
        let stat = "cpu  100 5 50 800 20 1 2 3 7 0\ncpu0 50 2 25 400 10 0 1 1 3 0\n";
        // user..steal (eight fields); guest (7) is inside user already.
        assert_eq!(machine_ticks(stat), Some((981, 820)));
        assert_eq!(machine_ticks("cpu0 1 2 3 4\n"), None);
        assert_eq!(machine_ticks("cpu 1 2 x 4\n"), None);
        assert_eq!(machine_ticks("cpu 1 2 3\n"), None);
    }

    #[test]
    fn process_ticks_are_counted_after_the_command_name() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 7 3 20 0 9 0";
        assert_eq!(process_ticks(stat), Some(1300));
        assert_eq!(process_ticks("4242 (x) S 1 2"), None);
    }

    #[test]
    fn only_other_programs_time_is_not_available() {
        let before = CpuSample {
            process: 0,
            total: 0,
            idle: 0,
        };
        // Two CPUs for one second (200 ticks): we had 40, other programs 160.
        let busy = CpuSample {
            process: 40,
            total: 200,
            idle: 0,
        };
        assert_eq!(available_share(&before, &busy), 0.2);
        // A blocked hang on an idle machine: all of it idle, all charged.
        let idle = CpuSample {
            process: 0,
            total: 200,
            idle: 200,
        };
        assert_eq!(available_share(&before, &idle), 1.0);
        // Half ours, half idle.
        let half = CpuSample {
            process: 100,
            total: 200,
            idle: 100,
        };
        assert_eq!(available_share(&before, &half), 1.0);
        assert_eq!(available_share(&busy, &busy), 1.0, "no ticks passed");
        // A child that ran 3 s on the other CPU exited in this second.
        let child = CpuSample {
            process: 300,
            total: 200,
            idle: 0,
        };
        assert_eq!(available_share(&before, &child), 1.5);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn this_process_can_be_measured_here() {
        let before = CpuSample::read().expect("Linux has /proc/stat and /proc/self/stat");
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(300) {
            x = x.wrapping_mul(31).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = CpuSample::read().unwrap();
        assert!(after.process > before.process, "{before:?} {after:?}");
        assert!(after.total > before.total, "{before:?} {after:?}");
    }

    #[test]
    fn a_hang_says_which_limit_and_what_was_running() {
        let limit = Limit::of_seconds(300);
        assert_eq!(limit.backstop, Duration::from_secs(3000));
        let machine = hang_message(
            "wgpu (checked)",
            Duration::from_secs(301),
            Duration::from_secs(1200),
            limit,
        );
        assert_eq!(
            machine,
            "timed out: still running wgpu (checked) after 300 s of machine time (the limit, --timeout; \
             1200 s wall: time the CPUs spent on other programs is not counted)"
        );
        let backstop = hang_message(
            "interp",
            Duration::from_secs(20),
            Duration::from_secs(3001),
            limit,
        );
        assert!(backstop.contains("after 3001 s wall (the backstop, 10 x --timeout)"));
    }
}
