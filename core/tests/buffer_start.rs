//! How each operand's buffer starts a call is one rule (`host::BufferStart`),
//! used by the lowering, the interpreter, input generation and validation.
//! Before it, the three copies disagreed on `zeroed` inputs and on
//! non-resident semaphore inputs (the interpreter zeroed them, the lowering
//! had them uploaded and generation made data for them). Device-resident
//! refs take data from the host (`Backend::set_resident`, `generate`).

// `RunError` carries whole sites; as in the library, its size is accepted.
#![allow(clippy::result_large_err)]

use mpmd_core::host::{host_shape, BufferStart};
use mpmd_core::inputs::{call_args, resident_data, Generation};
use mpmd_core::interp::{InterpOptions, Interpreter};
use mpmd_core::ir::{Module, OperandKind};
use mpmd_core::plan::{lower, BufferInit};
use mpmd_core::validate::{validate, validate_case, ValidateOptions};
use mpmd_core::{text, Backend, HostTensor, Mode, RunError, RunOptions};

/// `z` is a `zeroed` gmem input, `s` a semaphore input: neither takes data.
const STARTS_AT_ZERO: &str = "
mesh m {
  grid [b = 2];
  threads t = 4;
}

kernel k(x: gmem<f32[4]>, z: gmem<u32[4]>, s: sem<[1]>, y: gmem<u32[8]>, o: gmem<f32[4]> @ m) {
  let t: u32 = axis_index(t);
  let c: i32 = read(s[0u]);
  y[axis_index(b) * 4u + t] = z[t] + u32(c);
  o[t] = x[t];
}

map k {
  programs [m: k];
  inputs [x: gmem<f32[4]>, z: gmem<u32[4]> zeroed, s: sem<[1]>];
  outputs [y: gmem<u32[8]>, o: gmem<f32[4]> @ m];
}
";

fn parse(source: &str) -> Module {
    let (module, _) = text::parse(source).unwrap();
    validate(&module, &ValidateOptions::default()).unwrap();
    module
}

#[test]
fn zeroed_and_semaphore_inputs_start_at_zero_everywhere() {
    let module = parse(STARTS_AT_ZERO);
    let map = &module.maps[0];
    let starts: Vec<_> = map
        .inputs
        .iter()
        .map(|o| BufferStart::of(OperandKind::Input, o))
        .collect();
    assert_eq!(
        starts,
        [
            Some(BufferStart::Uploaded),
            Some(BufferStart::Zeroed),
            Some(BufferStart::Zeroed)
        ]
    );

    // The lowering (it had `Input` for both, so backends uploaded host data).
    let plan = lower(&validated(&module), "k").unwrap();
    let inits: Vec<_> = plan.buffers.iter().map(|b| b.init.clone()).collect();
    assert_eq!(
        inits,
        [
            BufferInit::Input("x".into()),
            BufferInit::Zeroed,
            BufferInit::Zeroed,
            BufferInit::Uninitialized,
            BufferInit::Uninitialized,
        ]
    );

    // Generation (it made data for `z` and `s`).
    let args = call_args(&module, &Generation::with_defaults(1)).unwrap();
    assert_eq!(args[0].inputs.keys().collect::<Vec<_>>(), ["x"]);

    // The interpreter runs with exactly those arguments, reads zeros from
    // `z` and `s`, and detection counts them as written.
    let mut interp = Interpreter::new();
    let checked = RunOptions {
        mode: Mode::Checked,
        seed: 0,
    };
    let out = interp.run(&plan, &args[0], &checked).unwrap();
    assert_eq!(out.outputs["y"].words(), [0; 8]);

    // One host shape: the plan's, generation's and the interpreter's.
    let owned = &map.outputs[1];
    let shape = host_shape(&module.meshes, owned.ty.as_ref_type().unwrap()).unwrap();
    assert_eq!(shape, [2, 4]);
    assert_eq!(plan.host_shape(&plan.buffers[4]), shape);
    assert_eq!(
        mpmd_core::inputs::host_shape(&module, owned),
        Some(shape.clone())
    );
    assert_eq!(out.outputs["o"].shape(), shape);
}

#[test]
fn generate_on_an_input_that_takes_no_data_is_e0008() {
    let source =
        format!("{STARTS_AT_ZERO}\ncase {{\n  generate z = iota;\n  generate s = iota;\n}}\n");
    let file = text::parse_file(&source).unwrap();
    assert!(validate(&file.module, &ValidateOptions::default()).is_ok());
    let messages: Vec<String> = validate_case(&file.module, &file.case.unwrap())
        .unwrap_err()
        .iter()
        .map(|d| format!("{}: {}", d.code, d.message))
        .collect();
    assert_eq!(
        messages,
        [
            "E0008: `generate z` names an input that starts at zero in every call (a semaphore, or declared `zeroed`): nothing reads the values",
            "E0008: `generate s` names an input that starts at zero in every call (a semaphore, or declared `zeroed`): nothing reads the values",
        ]
    );
}

/// A resident scratch `acc` that each call reads, doubles and reports + 1.
const RESIDENT: &str = "
mesh m {
  grid [b = 1];
  threads t = 4;
}

resident acc: gmem<f32[4]>;

kernel add(y: gmem<f32[4]>, acc: gmem<f32[4]>) {
  let t: u32 = axis_index(t);
  y[t] = acc[t] + 1.0;
  acc[t] = acc[t] * 2.0;
}

map add {
  programs [m: add];
  outputs [y: gmem<f32[4]>];
  scratch [acc: gmem<f32[4]> resident];
}

call add();
call add();

case {
  generate acc = iota;
}
";

fn run_twice(interp: &mut Interpreter, module: &Module) -> Result<Vec<Vec<f32>>, RunError> {
    let plan = lower(&validated(module), "add").unwrap();
    let args = call_args(module, &Generation::with_defaults(0)).unwrap();
    let options = RunOptions {
        mode: Mode::Checked,
        seed: 0,
    };
    args.iter()
        .map(|a| Ok(interp.run(&plan, a, &options)?.outputs["y"].to_f32()))
        .collect()
}

#[test]
fn residents_take_generated_data_before_the_first_call() {
    // `generate` on a resident passed validation and was ignored: the
    // first call read memory that was never written.
    let file = text::parse_file(RESIDENT).unwrap();
    let (module, case) = (file.module, file.case.unwrap());
    let generation = Generation::with_defaults(0).with_generators(&case.generators);
    let data = resident_data(&module, &generation, 1 << 20).unwrap();
    assert_eq!(
        data,
        [(
            "acc".to_string(),
            HostTensor::from_f32(vec![4], &[0.0, 1.0, 2.0, 3.0])
        )]
    );
    let mut interp = Interpreter::new();
    assert!(matches!(
        run_twice(&mut interp, &module),
        Err(RunError::UninitializedRead { .. })
    ));

    let mut interp = Interpreter::with_options(InterpOptions {
        extra_schedules: 2,
        ..InterpOptions::default()
    });
    for (name, tensor) in data {
        Backend::set_resident(&mut interp, &name, tensor).unwrap();
    }
    assert_eq!(
        run_twice(&mut interp, &module).unwrap(),
        [[1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 5.0, 7.0]]
    );
    assert_eq!(interp.last_report().unwrap().schedules_run, 3);
    assert_eq!(
        interp.resident("acc").unwrap().to_f32(),
        [0.0, 4.0, 8.0, 12.0]
    );

    // Data of another element type is refused when a call binds it.
    let mut interp = Interpreter::new();
    interp.set_resident("acc", HostTensor::from_i32(vec![4], &[1, 2, 3, 4]));
    assert_eq!(
        run_twice(&mut interp, &module).unwrap_err(),
        RunError::BadArguments(
            "resident `acc` holds `i32` elements; map `add` declares `f32`".into()
        )
    );
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
