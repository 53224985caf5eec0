//! The interpreter's fast paths compute what its per-lane path computes:
//! multi-dimensional and `@[...]` accesses folded to one index per lane
//! (with and without detection), their out-of-bounds reports, races found
//! through them, and unsigned division by a uniform power of two.

mod common;

use common::{module, run_with_schedules};
use mpmd_core::backend::Mode;
use mpmd_core::{HostTensor, RunError};

/// A 2-D transpose through a 2-D smem tile plus the block's number, read
/// back from its owned instance through `@[...]` with its own coordinates:
/// y[r, c] = 2 x[c, r] + block.
const TRANSPOSE: &str = r#"
mesh m {
  grid [bi = 2, bj = 2];
  threads t = 64;
}

kernel transpose(x: gmem<f32[16, 16]>, y: gmem<f32[16, 16]>, tile: smem<f32[8, 8]>, own: gmem<f32[8, 8]> @ m) {
  let ty: u32 = axis_index(t) / 8u;
  let tx: u32 = axis_index(t) % 8u;
  tile[tx, ty] = x[axis_index(bi) * 8u + ty, axis_index(bj) * 8u + tx];
  own[ty, tx] = f32(axis_index(bi) * 2u + axis_index(bj));
  barrier;
  let mine: f32 = own@[axis_index(bi), axis_index(bj)][ty, tx];
  y[axis_index(bj) * 8u + ty, axis_index(bi) * 8u + tx] = tile[ty, tx] * 2.0 + mine;
}

map transpose {
  programs [m: transpose];
  inputs [x: gmem<f32[16, 16]>];
  outputs [y: gmem<f32[16, 16]>, own: gmem<f32[8, 8]> @ m];
  scratch [tile: smem<f32[8, 8]>];
}
"#;

fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

#[test]
fn folded_two_dimensional_accesses_compute_the_transpose() {
    let m = module(TRANSPOSE);
    let x = HostTensor::from_f32(vec![16, 16], &iota(256));
    for mode in [Mode::Fast, Mode::Checked] {
        let out = run_with_schedules(&m, "transpose", &[("x", x.clone())], mode, 1)
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        let y = out.outputs["y"].to_f32();
        for r in 0..16 {
            for c in 0..16 {
                let block = (c / 8) * 2 + r / 8;
                let want = 2.0 * (c * 16 + r) as f32 + block as f32;
                assert_eq!(y[r * 16 + c], want, "{mode:?} y[{r}, {c}]");
            }
        }
        // Owned instances in linear block order, each its block's number.
        let own = out.outputs["own"].to_f32();
        assert_eq!(out.outputs["own"].shape(), &[2, 2, 8, 8]);
        for (i, v) in own.iter().enumerate() {
            assert_eq!(*v, (i / 64) as f32, "{mode:?} own element {i}");
        }
    }
}

/// `x[0, 17]` of a 16 x 16 ref names element 17 of the flat buffer, which
/// exists: the report is still out of bounds, with the 2-D index.
#[test]
fn an_index_past_its_dimension_is_out_of_bounds_though_the_flat_element_exists() {
    let src = r#"
mesh m {
  grid [b = 1];
  threads t = 32;
}

kernel k(x: gmem<f32[16, 16]>, y: gmem<f32[16, 16]>) {
  let c: u32 = axis_index(t) + 1u;
  y[0u, axis_index(t)] = x[0u, c / 2u * 2u + c % 2u + 8u];
}

map k {
  programs [m: k];
  inputs [x: gmem<f32[16, 16]>];
  outputs [y: gmem<f32[16, 16]>];
}
"#;
    let m = module(src);
    let x = HostTensor::from_f32(vec![16, 16], &iota(256));
    for mode in [Mode::Fast, Mode::Checked] {
        match run_with_schedules(&m, "k", &[("x", x.clone())], mode, 0) {
            Err(RunError::OutOfBounds {
                site,
                reference,
                index,
                shape,
            }) => {
                // Thread 7 is the first whose column, t + 9, is past 15.
                assert_eq!(site.thread, Some(7), "{mode:?}");
                assert_eq!(reference, "x");
                assert_eq!(index, "[0, 16]");
                assert_eq!(shape, "[16, 16]");
            }
            other => panic!("{mode:?}: expected out of bounds, got {other:?}"),
        }
    }
}

/// Two threads write the same element of a 2-D smem tile in one epoch.
#[test]
fn a_race_through_a_two_dimensional_smem_access_is_found() {
    let src = r#"
mesh m {
  grid [b = 2];
  threads t = 64;
}

kernel k(y: gmem<f32[128]>, tile: smem<f32[4, 8]>) {
  let t: u32 = axis_index(t);
  tile[t / 16u, t % 8u] = f32(t);
  barrier;
  y[axis_index(b) * 64u + t] = tile[t / 16u, t % 8u];
}

map k {
  programs [m: k];
  outputs [y: gmem<f32[128]>];
  scratch [tile: smem<f32[4, 8]>];
}
"#;
    let m = module(src);
    match run_with_schedules(&m, "k", &[], Mode::Checked, 0) {
        Err(RunError::DataRace {
            reference,
            element,
            index,
            first,
            second,
            ..
        }) => {
            assert_eq!(reference, "tile");
            assert_eq!(element, 0);
            assert_eq!(index, "tile[0, 0]");
            assert_eq!(first.thread, Some(0));
            assert_eq!(second.thread, Some(8));
            assert_eq!(second.block, 0);
        }
        other => panic!("expected a data race, got {other:?}"),
    }
}

/// `/` and `%` by uniform powers of two (1, 32, 2^31) and by another
/// constant, on values across the u32 range.
#[test]
fn uniform_power_of_two_divisors_divide_exactly() {
    let src = r#"
mesh m {
  grid [b = 2];
  threads t = 64;
}

kernel k(x: gmem<u32[128]>, y: gmem<u32[8, 128]>) {
  let i: u32 = axis_index(b) * 64u + axis_index(t);
  let v: u32 = x[i];
  y[0u, i] = v / 32u;
  y[1u, i] = v % 32u;
  y[2u, i] = v / 1u;
  y[3u, i] = v % 1u;
  y[4u, i] = v / 2147483648u;
  y[5u, i] = v % 2147483648u;
  y[6u, i] = v / 48u;
  y[7u, i] = v % 48u;
}

map k {
  programs [m: k];
  inputs [x: gmem<u32[128]>];
  outputs [y: gmem<u32[8, 128]>];
}
"#;
    let m = module(src);
    let x: Vec<u32> = (0..128u32)
        .map(|i| i.wrapping_mul(0x9e37_79b9) ^ (i << 27))
        .collect();
    let out = run_with_schedules(
        &m,
        "k",
        &[("x", HostTensor::from_u32(vec![128], &x))],
        Mode::Fast,
        0,
    )
    .unwrap();
    let y = out.outputs["y"].to_u32();
    for (i, &v) in x.iter().enumerate() {
        let want = [
            v / 32,
            v % 32,
            v,
            0,
            v / (1 << 31),
            v % (1 << 31),
            v / 48,
            v % 48,
        ];
        for (row, w) in want.iter().enumerate() {
            assert_eq!(y[row * 128 + i], *w, "row {row} x {v:#x}");
        }
    }
}

/// Every thread reads the element thread 0 wrote: after a barrier it is
/// no race and each reads the value; without one, thread 1's read races
/// with thread 0's write though thread 0's own read (made first) does not.
#[test]
fn broadcast_reads_race_exactly_when_unordered_with_the_write() {
    let src = |sync: &str| {
        format!(
            r#"
mesh m {{
  grid [b = 2];
  threads t = 64;
}}

kernel k(x: gmem<f32[2]>, y: gmem<f32[128]>, tile: smem<f32[2]>) {{
  let t: u32 = axis_index(t);
  if t == 0u {{
    tile[0u] = x[axis_index(b)];
  }}
  {sync}
  y[axis_index(b) * 64u + t] = tile[0u] + f32(t);
}}

map k {{
  programs [m: k];
  inputs [x: gmem<f32[2]>];
  outputs [y: gmem<f32[128]>];
  scratch [tile: smem<f32[2]>];
}}
"#
        )
    };
    let x = HostTensor::from_f32(vec![2], &[10.0, 20.0]);
    let ordered = module(&src("barrier;"));
    let out = run_with_schedules(&ordered, "k", &[("x", x.clone())], Mode::Checked, 2).unwrap();
    let y = out.outputs["y"].to_f32();
    for (i, v) in y.iter().enumerate() {
        assert_eq!(*v, [10.0, 20.0][i / 64] + (i % 64) as f32, "y[{i}]");
    }
    let racy = module(&src(""));
    match run_with_schedules(&racy, "k", &[("x", x)], Mode::Checked, 0) {
        Err(RunError::DataRace {
            reference,
            element,
            index,
            first,
            second,
            ..
        }) => {
            assert_eq!((reference.as_str(), element), ("tile", 0));
            assert_eq!(index, "tile[0]");
            assert_eq!((first.thread, second.thread), (Some(0), Some(1)));
        }
        other => panic!("expected a data race, got {other:?}"),
    }
}

/// Detection keeps no history for a buffer that no store or atomic of the
/// call writes (every race has a write): every block reads all of `x`
/// without a race, and a buffer only an atomic writes still races with
/// another block's plain read of it.
#[test]
fn only_written_buffers_keep_histories_and_atomics_write() {
    let src = |racy: bool| {
        let read = if racy {
            "y[axis_index(b) * 32u + t] = f32(counts[t]);"
        } else {
            "y[axis_index(b) * 32u + t] = x[t] * 2.0;"
        };
        format!(
            r#"
mesh m {{
  grid [b = 2];
  threads t = 32;
}}

kernel k(x: gmem<f32[32]>, counts: gmem<u32[32]>, y: gmem<f32[64]>) {{
  let t: u32 = axis_index(t);
  if axis_index(b) == 0u {{
    atomic_store(counts[t], 1u);
  }}
  {read}
}}

map k {{
  programs [m: k];
  inputs [x: gmem<f32[32]>];
  outputs [counts: gmem<u32[32]>, y: gmem<f32[64]>];
}}
"#
        )
    };
    let inputs = [("x", HostTensor::from_f32(vec![32], &iota(32)))];
    let out = run_with_schedules(&module(&src(false)), "k", &inputs, Mode::Checked, 2)
        .expect("reads of a buffer nothing writes never race");
    let twice: Vec<f32> = iota(32).iter().map(|v| v * 2.0).collect();
    assert_eq!(out.outputs["y"].to_f32(), [twice.clone(), twice].concat());
    match run_with_schedules(&module(&src(true)), "k", &inputs, Mode::Checked, 0) {
        Err(RunError::DataRace {
            reference,
            element,
            first,
            second,
            kinds,
            ..
        }) => {
            assert_eq!((reference.as_str(), element), ("counts", 0));
            assert_eq!((first.block, first.thread), (0, Some(0)));
            assert_eq!((second.block, second.thread), (1, Some(0)));
            assert_eq!(kinds[1], mpmd_core::backend::AccessKind::Read);
        }
        other => panic!("expected a data race, got {other:?}"),
    }
}

/// Detection records a block's run of consecutive lanes over consecutive
/// elements once per chunk of 16: another block's write of any one element
/// of the run (its first, its last, one inside, one at a chunk's edge)
/// still races with the thread that wrote that element, and a run that
/// overlaps the last element of the run before races there.
#[test]
fn a_race_on_any_element_of_a_run_names_its_thread() {
    let src = |second: &str| {
        format!(
            r#"
mesh m {{
  grid [b = 2];
  threads t = 32;
}}

kernel k(y: gmem<f32[64]>) {{
  let t: u32 = axis_index(t);
  if axis_index(b) == 0u {{
    y[t] = 1.0;
  }} else {{
    {second}
  }}
}}

map k {{
  programs [m: k];
  outputs [y: gmem<f32[64]>];
}}
"#
        )
    };
    let race = |second: &str| match run_with_schedules(
        &module(&src(second)),
        "k",
        &[],
        Mode::Checked,
        0,
    ) {
        Err(RunError::DataRace {
            element,
            first,
            second,
            ..
        }) => (
            element,
            first.block,
            first.thread,
            second.block,
            second.thread,
        ),
        other => panic!("expected a data race, got {other:?}"),
    };
    for element in [0u64, 15, 16, 20, 31] {
        let one = format!("if t == 5u {{ y[{element}u] = 2.0; }}");
        assert_eq!(race(&one), (element, 0, Some(element as u32), 1, Some(5)));
    }
    // Block 1's run 31..63 starts on block 0's last element.
    assert_eq!(race("y[31u + t] = 2.0;"), (31, 0, Some(31), 1, Some(0)));
    // Apart, the two runs do not race.
    let apart = module(&src("y[32u + t] = 2.0;"));
    run_with_schedules(&apart, "k", &[], Mode::Checked, 0).unwrap();
}
