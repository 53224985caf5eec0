//! Constant tables (`const LUT: f32[4] = [...];`): the text form, the
//! interpreter's values through the expansion's `local` copy, and E0077
//! (malformed or written tables), E0001 and E0043 for their names.

#![allow(clippy::result_large_err)]

mod common;
use common::{codes, found, module};
use mpmd_core::backend::Mode;
use mpmd_core::ir::{ConstTable, Literal, ScalarType, Stmt};
use mpmd_core::text::{parse, print};
use mpmd_core::validate::{validate, ValidateOptions};

const TABLES: &str = "
const N: u32 = 4;
const LUT: f32[N] = [0.5, -1.0, 2.0, inf];
const PERM: u32[8] = [3, 1u, 0x7, 0u, 2, 6, 5, 4];

mesh m {
  threads t = 32;
}

kernel k(y: gmem<f32[32]>, z: gmem<u32[32]>) {
  let i: u32 = axis_index(t);
  y[i] = LUT[i % N] * f32(i);
  z[i] = PERM[i % 8u] + PERM[PERM[i % 8u]] * 10u;
}

map lut {
  programs [m: k];
  outputs [y: gmem<f32[32]>, z: gmem<u32[32]>];
}
";

#[test]
fn tables_are_indexed_like_arrays_on_the_interpreter() {
    let m = module(TABLES);
    validate(&m, &ValidateOptions::default()).expect("valid");
    let lut = [0.5f32, -1.0, 2.0, f32::INFINITY];
    let perm = [3u32, 1, 7, 0, 2, 6, 5, 4];
    for mode in [Mode::Fast, Mode::Checked] {
        let out = common::run_with_schedules(&m, "lut", &[], mode, 2).unwrap();
        let y: Vec<f32> = (0..32).map(|i| lut[i % 4] * i as f32).collect();
        let z: Vec<u32> = (0..32)
            .map(|i| perm[i % 8] + perm[perm[i % 8] as usize] * 10)
            .collect();
        assert_eq!(out.outputs["y"].to_f32()[1..], y[1..]);
        assert_eq!(out.outputs["z"].to_u32(), z);
    }
}

#[test]
fn tables_print_canonically_and_expand_to_a_local_copy() {
    let m = module(TABLES);
    assert_eq!(
        m.tables[1],
        ConstTable {
            name: "PERM".into(),
            elem: ScalarType::U32,
            values: [3u32, 1, 7, 0, 2, 6, 5, 4].map(Literal::U32).to_vec(),
        }
    );
    let text = print(&m);
    assert!(
        text.starts_with(
            "const N: u32 = 4u;\nconst LUT: f32[4] = [0.5, -1.0, 2.0, inf];\nconst PERM: u32[8] = [3u, 1u, 7u, 0u, 2u, 6u, 5u, 4u];\n"
        ),
        "{text}"
    );
    assert_eq!(module(&text), m);
    let kernel = expanded(&m);
    // LUT's array and 4 stores, PERM's array and 8 stores, then the body.
    assert!(matches!(
        &kernel.body[0],
        Stmt::LocalArray { name, elem: ScalarType::F32, shape } if name == "LUT" && *shape == [4]
    ));
    assert!(matches!(
        &kernel.body[5],
        Stmt::LocalArray { name, elem: ScalarType::U32, shape } if name == "PERM" && *shape == [8]
    ));
    assert_eq!(kernel.body.len(), 14 + m.kernels[0].body.len());
}

#[test]
fn a_table_lists_as_many_values_of_its_type_as_it_declares() {
    let e = parse("const T: f32[3] = [1.0, 2.0];").unwrap_err();
    assert_eq!(
        e.message,
        "the table `T` is declared with 3 values but lists 2"
    );
    let e = parse("const T: u32[2] = [1u, 2.0];").unwrap_err();
    assert_eq!(
        e.message,
        "the constant `T` is declared `u32` but its value is a `f32` literal"
    );
    // A builder-made table is checked by validation.
    let mut m = module(TABLES);
    m.tables[0].values[2] = Literal::U32(2);
    assert_eq!(
        found_in(&m),
        [(
            "E0077",
            "the constant table `LUT` is declared `f32` but its value 2 is a `u32` literal"
                .to_string()
        )]
    );
    m.tables[0].values = vec![Literal::f32(0.0); 1025];
    assert_eq!(
        found_in(&m),
        [(
            "E0077",
            "the constant table `LUT` has 1025 values; a table holds 1 to 1024".to_string()
        )]
    );
}

fn found_in(m: &mpmd_core::ir::Module) -> Vec<(&'static str, String)> {
    validate(m, &ValidateOptions::default())
        .err()
        .unwrap_or_default()
        .into_iter()
        .map(|d| (d.code, d.message))
        .collect()
}

#[test]
fn tables_are_read_only_and_their_names_are_taken() {
    let write = TABLES.replace(
        "y[i] = LUT[i % N] * f32(i);",
        "LUT[0u] = 1.0;\n  y[i] = 0.0;",
    );
    assert_eq!(
        found(&write),
        [(
            "E0077",
            "`store` writes the constant table `LUT` in kernel `k`".to_string()
        )]
    );
    let reuse = TABLES.replace("let i: u32", "let PERM: u32 = 0u;\n  let i: u32");
    // (The uses of `PERM` after it then name the `let`: E0037.)
    assert_eq!(codes(&reuse)[0], "E0043");
    let twice = format!("const LUT: u32 = 1u;\n{TABLES}");
    assert_eq!(codes(&twice), ["E0001"]);
}

/// The kernel the first map's first program runs, as validation expanded
/// it: what the interpreter and the backends receive.
fn expanded(m: &mpmd_core::ir::Module) -> mpmd_core::ir::Kernel {
    let valid = validate(m, &ValidateOptions::default()).expect("valid");
    valid.valid_maps()[0].programs()[0].kernel().clone()
}

#[test]
fn source_paths_skip_the_table_copies() {
    use mpmd_core::ir::{IrPath, PathStep};
    let m = module(TABLES);
    let expanded_path = |i: usize| IrPath(vec![PathStep::Kernel("k".into()), PathStep::Stmt(i)]);
    // 14 copy statements, then the body as written.
    assert_eq!(
        mpmd_core::validate::source_path(&m, &expanded_path(14)),
        Some(expanded_path(0))
    );
    assert_eq!(
        mpmd_core::validate::source_path(&m, &expanded_path(16)),
        Some(expanded_path(2))
    );
    assert_eq!(
        mpmd_core::validate::source_path(&m, &expanded_path(3)),
        None
    );
}
