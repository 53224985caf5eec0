//! The interpreter's limits bound a whole run: one memory budget that
//! inputs, buffers, block states, detection state and residents charge
//! together, and a time limit that holds while buffers and checked-mode
//! local arrays are allocated and filled (defects/t3_*).

#![allow(clippy::result_large_err)]

use std::time::{Duration, Instant};

use mpmd_core::backend::Activity;
use mpmd_core::inputs::{self, GenerateError, Generation};
use mpmd_core::interp::{InterpOptions, Interpreter, MemoryBudget};
use mpmd_core::ir::Module;
use mpmd_core::{CallArgs, CallOutputs, RunError};

fn parse(src: &str) -> Module {
    mpmd_core::text::parse(src).expect("test program parses").0
}

/// Runs the only map once on `interp`, its inputs generated and charged to
/// `budget` (as `mpmd run` does).
fn run_charged(
    module: &Module,
    interp: &mut Interpreter,
    budget: &MemoryBudget,
    options: &InterpOptions,
) -> Result<CallOutputs, RunError> {
    let map = &module.maps[0];
    let generation = Generation::with_defaults(0);
    let mut args = CallArgs::default();
    let mut charges = Vec::new();
    for input in inputs::uploaded_inputs(map) {
        let (tensor, charge) =
            inputs::generate_input_charged(module, map, input, &generation, budget)
                .expect("inputs fit");
        args.inputs.insert(input.name.clone(), tensor);
        charges.push(charge);
    }
    interp.call(&validated(module), &map.name, &args, options)
}

const COPY: &str = r#"
mesh m { grid [b = 1]; threads t = 64; }
kernel k(x: gmem<u32[1024]>, y: gmem<u32[1024]>) {
  for i: u32 in 0u..16u { y[i * 64u + axis_index(t)] = x[i * 64u + axis_index(t)]; }
}
map k { programs [m: k]; inputs [x: gmem<u32[1024]>]; outputs [y: gmem<u32[1024]>]; }
"#;

/// Generated inputs and the interpreter's buffers charge one budget: 4 KiB
/// of input beside 4 KiB of buffers (y; the call reads x where it lies)
/// pass a 6 KiB limit that each fits alone; before, each was checked alone
/// and the run took both.
#[test]
fn inputs_and_the_call_share_one_budget() {
    let module = parse(COPY);
    let options = InterpOptions::default();
    let budget = MemoryBudget::new(6 << 10);
    let mut interp = Interpreter::with_budget(options.clone(), budget.clone());
    let err = run_charged(&module, &mut interp, &budget, &options).unwrap_err();
    match &err {
        RunError::MemoryLimit {
            what,
            needed,
            limit,
            ..
        } => {
            assert_eq!((*needed, *limit), (8 << 10, 6 << 10), "{err}");
            assert!(
                what.contains("and the 4096 bytes the run already holds"),
                "{err}"
            );
        }
        other => panic!("{other}"),
    }
    // Everything was given back.
    assert_eq!(budget.in_use(), 0);

    // Inputs, buffers and the block's state (64 lanes of registers).
    let budget = MemoryBudget::new(16 << 10);
    let mut interp = Interpreter::with_budget(options.clone(), budget.clone());
    let out = run_charged(&module, &mut interp, &budget, &options).expect("fits");
    assert_eq!(out.outputs["y"].len(), 1024);
    // The call gave back what it charged and keeps nothing for reuse.
    assert_eq!(budget.in_use(), 0);
}

/// An input that no program of the call writes is read where it lies, not
/// copied: its 4 KiB are charged once (as the caller's), so the call (4 KiB
/// for y, 2.5 KiB of block state) fits an 11 KiB limit beside them (before,
/// it needed 12 KiB); a call that writes its input through an aliased
/// output copies it and needs 12 KiB before its blocks start.
#[test]
fn an_input_no_program_writes_is_not_copied() {
    let options = InterpOptions::default();
    let module = parse(COPY);
    let budget = MemoryBudget::new(11 << 10);
    let mut interp = Interpreter::with_budget(options.clone(), budget.clone());
    let out = run_charged(&module, &mut interp, &budget, &options).expect("fits");
    let generated = inputs::generate_input(
        &module,
        &module.maps[0],
        &module.maps[0].inputs[0],
        &Generation::with_defaults(0),
    )
    .unwrap();
    assert_eq!(out.outputs["y"].words(), generated.words());
    assert_eq!(budget.in_use(), 0);

    // x's buffer is also output z's (an alias), which the kernel writes.
    let writes_input = r#"
mesh m { grid [b = 1]; threads t = 64; }
kernel k(x: gmem<u32[1024]>, y: gmem<u32[1024]>, z: gmem<u32[1024]>) {
  for i: u32 in 0u..16u { y[i * 64u + axis_index(t)] = x[i * 64u + axis_index(t)]; z[i * 64u + axis_index(t)] = 0u; }
}
map k { programs [m: k]; inputs [x: gmem<u32[1024]>]; outputs [y: gmem<u32[1024]>, z: gmem<u32[1024]>]; aliases [x -> z]; }
"#;
    let module = parse(writes_input);
    let mut interp = Interpreter::with_budget(options.clone(), budget.clone());
    match run_charged(&module, &mut interp, &budget, &options).unwrap_err() {
        RunError::MemoryLimit { needed, limit, .. } => {
            assert_eq!((needed, limit), (12 << 10, 11 << 10))
        }
        other => panic!("{other}"),
    }
    assert_eq!(budget.in_use(), 0);
}

/// A generated input that fits alone but not beside what the run holds is
/// refused before it is made, naming both sizes.
#[test]
fn generation_refuses_past_what_the_run_already_holds() {
    let module = parse(COPY);
    let map = &module.maps[0];
    let input = &map.inputs[0];
    let budget = MemoryBudget::new(6 << 10);
    let held = budget.charge(3 << 10, || "other data".into()).unwrap();
    let err =
        inputs::generate_input_charged(&module, map, input, &Generation::with_defaults(0), &budget)
            .unwrap_err();
    assert_eq!(
        err,
        GenerateError::OverBudget {
            name: "x".into(),
            elements: 1024,
            bytes: 4096,
            in_use: 3072,
            limit: 6144
        }
    );
    drop(held);
    let (tensor, charge) =
        inputs::generate_input_charged(&module, map, input, &Generation::with_defaults(0), &budget)
            .unwrap();
    assert_eq!(
        (tensor.len(), charge.bytes(), budget.in_use()),
        (1024, 4096, 4096)
    );
}

/// Residents stay charged between calls: a resident's words and written
/// flags are in use until the interpreter is dropped.
#[test]
fn residents_stay_charged_between_calls() {
    let src = r#"
mesh m { grid [b = 1]; threads t = 64; }
resident acc: gmem<u32[64]>;
kernel k(acc: gmem<u32[64]>) { acc[axis_index(t)] = axis_index(t); }
map k { programs [m: k]; outputs [acc: gmem<u32[64]> resident]; }
"#;
    let module = parse(src);
    let options = InterpOptions::default();
    let budget = MemoryBudget::new(1 << 20);
    let mut interp = Interpreter::with_budget(options.clone(), budget.clone());
    interp
        .call(&validated(&module), "k", &CallArgs::default(), &options)
        .unwrap();
    // 64 words and 64 flags.
    assert_eq!(budget.in_use(), 64 * 4 + 64);
    drop(interp);
    assert_eq!(budget.in_use(), 0);
}

/// 16-bit inputs are generated packed: 2 bytes an element are charged.
#[test]
fn sixteen_bit_inputs_are_charged_packed() {
    let src = COPY.replace("u32[1024]", "f16[1024]");
    let module = parse(&src);
    let map = &module.maps[0];
    let budget = MemoryBudget::new(1 << 20);
    let (tensor, charge) = inputs::generate_input_charged(
        &module,
        map,
        &map.inputs[0],
        &Generation::with_defaults(0),
        &budget,
    )
    .unwrap();
    assert_eq!((tensor.len(), charge.bytes()), (1024, 2048));
    assert_eq!(tensor.bytes().len(), 2048);
}

const BIG_ALLOCATION: &str = include_str!("../../defects/t3_interp_timeout_big_allocation.mpmd");
const CHECKED_LOCAL_ARRAYS: &str =
    include_str!("../../defects/t3_interp_timeout_checked_local_arrays.mpmd");

/// Allocating and filling a 1 GiB semaphore buffer's detection state is
/// inside the time limit: the call stops at the first look at the clock,
/// naming what it was doing (before, it filled the whole buffer, 6 s in a
/// debug build, and only then looked at the clock at the block's start).
/// Without detection nothing is filled: the zeroed buffer comes from the
/// allocator as fresh pages, and the call ends inside a 1 s limit (filling
/// it took 6 s).
#[test]
fn the_time_limit_holds_while_buffers_are_filled() {
    let module = parse(BIG_ALLOCATION);
    let options = InterpOptions {
        time_limit: Some(Duration::from_secs(1)),
        memory_limit: 32 << 30,
        ..Default::default()
    };
    let out = Interpreter::new()
        .call(&validated(&module), "k", &CallArgs::default(), &options)
        .expect("zeros need no filling");
    assert_eq!(out.outputs["y"].words(), &[1]);
    {
        let options = InterpOptions {
            time_limit: Some(Duration::from_millis(50)),
            detect: true,
            memory_limit: 32 << 30,
            ..Default::default()
        };
        let start = Instant::now();
        let err = Interpreter::new()
            .call(&validated(&module), "k", &CallArgs::default(), &options)
            .unwrap_err();
        let elapsed = start.elapsed();
        match &err {
            RunError::TimeLimit { at, limit_ms, .. } => {
                assert_eq!(
                    *at,
                    Activity::Other("allocating and filling the call's buffers".into())
                );
                assert_eq!(*limit_ms, 50);
            }
            other => panic!("{other}"),
        }
        assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
    }
}

/// A checked-mode `local` declaration clears the written flags of 1,024
/// threads' 131,072 elements (128 Mi flags): it looks at the clock between
/// chunks, so the call stops near its limit (before: 3.3 s past a 0.1 s
/// limit in a debug build).
#[test]
fn the_time_limit_holds_while_checked_local_arrays_are_declared() {
    let module = parse(CHECKED_LOCAL_ARRAYS);
    let options = InterpOptions {
        time_limit: Some(Duration::from_millis(50)),
        detect: true,
        ..Default::default()
    };
    let start = Instant::now();
    let err = Interpreter::new()
        .call(&validated(&module), "k", &CallArgs::default(), &options)
        .unwrap_err();
    let elapsed = start.elapsed();
    match &err {
        RunError::TimeLimit {
            at: Activity::Running(site),
            ..
        } => assert_eq!((site.program.index(), site.block), (0, 0)),
        other => panic!("{other}"),
    }
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
}

#[test]
fn a_raised_interrupt_stops_a_running_call() {
    let module = parse(
        "mesh m { grid [b = 1]; threads t = 1; }
         kernel k(y: gmem<u32[1]>, n: u32) {
           var acc: u32 = 0u;
           for i: u32 in 0u..n { acc += i; }
           y[0] = acc;
         }
         map k { programs [m: k]; outputs [y: gmem<u32[1]>]; scalars [n: u32]; }",
    );
    let interrupt = mpmd_core::interp::Interrupt::new();
    let options = InterpOptions {
        time_limit: None,
        interrupt: Some(interrupt.clone()),
        ..Default::default()
    };
    let mut args = CallArgs::default();
    args.scalars
        .insert("n".into(), mpmd_core::ir::Literal::U32(4_000_000_000));
    let raiser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        interrupt.raise();
    });
    let start = Instant::now();
    let result = Interpreter::new().call(&validated(&module), "k", &args, &options);
    raiser.join().expect("the raiser thread ends");
    match result {
        Err(RunError::Interrupted {
            at: Activity::Running(site),
        }) => assert_eq!(site.kernel, "k"),
        other => panic!("expected an interrupt, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(30));
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
