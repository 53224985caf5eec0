//! The WGSL helper functions a module calls: sections of `prelude.wgsl`,
//! each written once per module when used, with the helpers it calls.

use std::collections::BTreeSet;

use mpmd_core::ir::{ScalarType, WarpOp, WARP_SIZE};

use super::generate::ModuleState;
use super::numerics::half_name;
use super::syntax::wgsl_scalar;
use super::warp::reduction_name;
use super::{
    fuses_programs, EmitOptions, F16Conversions, ERROR_LOOP_CAP, ERROR_LOOP_LIMIT,
    ERROR_OUT_OF_BOUNDS, ERROR_SEM_AMOUNT, ERROR_SUBGROUP_NOT_WARP, ERROR_WAIT_TIMEOUT,
    MAX_RECORDED_VALUES, POLL_LOOKS,
};

/// The helper functions, one section each (see its header for the format).
const PRELUDE: &str = include_str!("prelude.wgsl");

/// The line that starts a section of `PRELUDE`, before the section's name.
const SECTION_MARKER: &str = "// ==== section ";

/// Helper functions emitted once per module when used, in this order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Helper {
    /// `mpmd_report`, which records an error: in every module.
    Report,
    /// `mpmd_loop_pay` and `mpmd_loop_tick`: in every module with a loop cap.
    LoopCap,
    IsNan,
    /// `mpmd_opaque`: an f32 operand the driver cannot see through
    /// (`syntax::opaque_operand`).
    Opaque,
    DivI32,
    DivU32,
    RemI32,
    RemU32,
    AbsI32,
    MinF32,
    MaxF32,
    F32ToI32,
    F32ToU32,
    Fmod,
    /// `mpmd_check<n>`: the checked offset of `n` coordinates.
    Check(usize),
    /// `mpmd_wait_<global>`: a polling wait on a semaphore buffer.
    SemWait(String),
    /// `mpmd_take_<global>`: a wait that looks once.
    SemTake(String),
    SemAmount,
    LoopLimit,
    Saturating,
    /// 16-bit bits to their exact f32 (`mpmd_f16_to_f32`, `mpmd_bf16_to_f32`).
    Widen(ScalarType),
    /// f32 to the nearest 16-bit float (`mpmd_f32_to_f16`, `mpmd_f32_to_bf16`).
    Narrow(ScalarType),
    /// 64-bit integer arithmetic on `vec2<u32>` (for `FmaF32`).
    U64,
    /// f32 `fma` rounded once, on the bits (`mpmd_fma_f32`).
    FmaF32,
    /// `fma` rounded once (`mpmd_fma_f16`, `mpmd_fma_bf16`).
    Fma16(ScalarType),
    /// The f32 sum of two floats rounded to odd (for `Fma16`).
    SumToOdd,
    Min16(ScalarType),
    Max16(ScalarType),
    /// i32/u32 rounded to odd into 24 bits, as an f32 (for int → 16-bit).
    IntToF32Odd,
    /// `mpmd_warp_ballot`: the bits of a warp's published words.
    WarpBallot,
    /// `mpmd_warp_<op>_<ty>`: a warp reduction in the butterfly order.
    WarpReduce(WarpOp, ScalarType),
    /// `mpmd_check_subgroups`: the native path's check that the adapter's
    /// subgroups are the logical warps.
    SubgroupCheck,
    /// `mpmd_subgroup_<op>_f32`: an f32 warp reduction on subgroups, in the
    /// butterfly order.
    SubgroupReduce(WarpOp),
    /// `mpmd_mma_m16n8k16_<ty>`: one lane's sums of an `mma_m16n8k16`.
    Mma(ScalarType),
}

impl Helper {
    /// Its section of `prelude.wgsl` (with `options`: which f16 conversions).
    fn section(&self, options: &EmitOptions) -> &'static str {
        let bf16 = |t: &ScalarType| *t == ScalarType::BF16;
        let native = options.f16_conversions == F16Conversions::Native;
        match self {
            Helper::Report => "report",
            Helper::LoopCap => "loop_cap",
            Helper::IsNan => "is_nan",
            Helper::Opaque => "opaque",
            Helper::DivI32 => "div_i32",
            Helper::DivU32 => "div_u32",
            Helper::RemI32 => "rem_i32",
            Helper::RemU32 => "rem_u32",
            Helper::AbsI32 => "abs_i32",
            Helper::MinF32 => "min_f32",
            Helper::MaxF32 => "max_f32",
            Helper::F32ToI32 => "f32_to_i32",
            Helper::F32ToU32 => "f32_to_u32",
            Helper::Fmod => "fmod",
            Helper::Check(_) => "check",
            Helper::SemWait(_) => "sem_wait",
            Helper::SemTake(_) => "sem_take",
            Helper::SemAmount => "sem_amount",
            Helper::LoopLimit => "loop_limit",
            Helper::Saturating => "saturating",
            Helper::Widen(t) if bf16(t) => "bf16_to_f32",
            Helper::Widen(_) if native => "f16_to_f32_native",
            Helper::Widen(_) => "f16_to_f32",
            Helper::Narrow(t) if bf16(t) => "f32_to_bf16",
            Helper::Narrow(_) if native => "f32_to_f16_native",
            Helper::Narrow(_) => "f32_to_f16",
            Helper::U64 => "u64",
            Helper::FmaF32 => "fma_f32",
            Helper::Fma16(t) if bf16(t) => "fma_bf16",
            Helper::Fma16(_) => "fma_f16",
            Helper::SumToOdd => "sum_to_odd",
            Helper::Min16(_) | Helper::Max16(_) => "min_max_16",
            Helper::IntToF32Odd => "int_to_f32_odd",
            Helper::WarpBallot => "warp_ballot",
            Helper::WarpReduce(..) => "warp_reduce",
            Helper::SubgroupCheck => "subgroup_check",
            Helper::SubgroupReduce(_) => "subgroup_reduce",
            Helper::Mma(_) => "mma",
        }
    }

    /// The helpers its section calls (with `options`: the loop cap's ticks).
    fn needs(&self, options: &EmitOptions) -> Vec<Helper> {
        let capped = options.loop_cap.is_some();
        match self {
            Helper::LoopCap
            | Helper::Check(_)
            | Helper::SemAmount
            | Helper::LoopLimit
            | Helper::SemTake(_)
            | Helper::SubgroupCheck => vec![Helper::Report],
            Helper::SemWait(_) if capped => vec![Helper::Report, Helper::LoopCap],
            Helper::SemWait(_) => vec![Helper::Report],
            Helper::Fmod if capped => vec![Helper::LoopCap],
            Helper::MinF32 | Helper::MaxF32 | Helper::F32ToI32 | Helper::F32ToU32 => {
                vec![Helper::IsNan]
            }
            Helper::Min16(t) | Helper::Max16(t) => vec![Helper::Widen(*t)],
            Helper::WarpReduce(WarpOp::ReduceMin, ScalarType::F32) => vec![Helper::MinF32],
            Helper::WarpReduce(WarpOp::ReduceMax, ScalarType::F32) => vec![Helper::MaxF32],
            Helper::SubgroupReduce(WarpOp::ReduceMin) => vec![Helper::MinF32],
            Helper::SubgroupReduce(WarpOp::ReduceMax) => vec![Helper::MaxF32],
            Helper::Fma16(t) => vec![Helper::Widen(*t), Helper::Narrow(*t), Helper::SumToOdd],
            Helper::FmaF32 => vec![Helper::U64],
            Helper::Mma(t) => vec![Helper::Widen(*t)],
            _ => vec![],
        }
    }

    /// The values of its section's own placeholders. `fused`: the module is
    /// a fused dispatch, whose idle invocations report nothing of their own.
    fn fill(&self, options: &EmitOptions, fused: bool) -> Vec<(&'static str, String)> {
        // A loop the helper runs counts toward the loop cap like every loop.
        let (loop_enter, loop_tick) = match options.loop_cap {
            Some(_) => ("_ = mpmd_loop_tick();", "if (mpmd_loop_tick()) { break; }"),
            None => ("", ""),
        };
        let loop_ticks = || {
            vec![
                ("loop_enter", loop_enter.to_string()),
                ("loop_tick", loop_tick.to_string()),
            ]
        };
        match self {
            // An idle invocation computes what its thread computes, so it would
            // report that thread's out-of-bounds accesses and loop limits
            // under its own id.
            Helper::Report => vec![(
                "idle_report",
                if fused {
                    format!(
                        "if (mpmd_idle && (kind == {ERROR_OUT_OF_BOUNDS}u || kind == {ERROR_LOOP_LIMIT}u)) {{ return; }}"
                    )
                } else {
                    String::new()
                },
            )],
            Helper::LoopCap => {
                let cap = options.loop_cap.unwrap_or(0).min(u32::MAX - 2);
                vec![
                    ("cap", cap.to_string()),
                    ("over", (cap as u64 + 1).to_string()),
                ]
            }
            Helper::Fmod => loop_ticks(),
            Helper::Check(n) => {
                let n = *n;
                let params: Vec<String> = (0..n).map(|k| format!("i{k}: u32, n{k}: u32")).collect();
                let out_of_bounds: Vec<String> = (0..n).map(|k| format!("i{k} >= n{k}")).collect();
                let mut values: Vec<String> = (0..n.min(MAX_RECORDED_VALUES))
                    .map(|k| format!("i{k}"))
                    .collect();
                values.resize(MAX_RECORDED_VALUES, "0u".to_string());
                let mut offset = "i0".to_string();
                for k in 1..n {
                    offset = format!("({offset}) * n{k} + i{k}");
                }
                vec![
                    ("n", n.to_string()),
                    ("params", params.join(", ")),
                    ("out_of_bounds", out_of_bounds.join(" || ")),
                    ("values", values.join(", ")),
                    ("offset", offset),
                ]
            }
            Helper::SemWait(global) => {
                // Only a loop cap limits the polls; without one, a poll is one look.
                let per_poll = match options.loop_cap {
                    Some(_) => POLL_LOOKS,
                    None => 1,
                };
                let more_looks =
                    format!("if (seen < amount) {{ seen = atomicAdd(&{global}[index], 0i); }}\n")
                        .repeat(per_poll as usize - 1);
                let mut values = vec![
                    ("global", global.clone()),
                    ("budget", options.wait_poll_budget.max(1).to_string()),
                    ("per_poll", per_poll.to_string()),
                    ("more_looks", more_looks),
                ];
                values.extend(loop_ticks());
                values
            }
            Helper::SemTake(global) => vec![("global", global.clone())],
            Helper::Min16(t) | Helper::Max16(t) => {
                let (what, compare) = match self {
                    Helper::Min16(_) => ("min", "<"),
                    _ => ("max", ">"),
                };
                // Exponent all ones: above it (mantissa not zero) is NaN.
                let infinity = match t {
                    ScalarType::BF16 => "0x7f80u",
                    _ => "0x7c00u",
                };
                vec![
                    ("what", what.to_string()),
                    ("n", half_name(*t).to_string()),
                    ("compare", compare.to_string()),
                    ("infinity", infinity.to_string()),
                ]
            }
            Helper::WarpBallot => {
                let bits: String = (0..WARP_SIZE)
                    .map(|k| {
                        format!("bits = bits | (select(0u, 1u, mpmd_warp_words[base + {k}u] != 0u) << {k}u);\n")
                    })
                    .collect();
                vec![("bits", bits)]
            }
            Helper::WarpReduce(op, t) => warp_reduce_fill(*op, *t),
            Helper::SubgroupReduce(op) => subgroup_reduce_fill(*op),
            Helper::Mma(t) => mma_fill(*t),
            _ => vec![],
        }
    }

    /// Its section of `prelude.wgsl` with every placeholder filled in,
    /// followed by a blank line.
    fn text(&self, options: &EmitOptions, fused: bool) -> String {
        let mut values = vec![
            ("ERROR_OUT_OF_BOUNDS", ERROR_OUT_OF_BOUNDS.to_string()),
            ("ERROR_WAIT_TIMEOUT", ERROR_WAIT_TIMEOUT.to_string()),
            ("ERROR_LOOP_CAP", ERROR_LOOP_CAP.to_string()),
            ("ERROR_SEM_AMOUNT", ERROR_SEM_AMOUNT.to_string()),
            ("ERROR_LOOP_LIMIT", ERROR_LOOP_LIMIT.to_string()),
            (
                "ERROR_SUBGROUP_NOT_WARP",
                ERROR_SUBGROUP_NOT_WARP.to_string(),
            ),
            ("MAX_RECORDED_VALUES", MAX_RECORDED_VALUES.to_string()),
        ];
        values.extend(self.fill(options, fused));
        fill_placeholders(prelude_section(self.section(options)), &values)
    }
}

/// The text of section `name` of `PRELUDE`, without its marker line and
/// trailing blank lines. A missing section is empty: the module then calls
/// a function it does not define, which naga reports (and a unit test
/// renders every `Helper`).
fn prelude_section(name: &str) -> &'static str {
    let marker = format!("\n{SECTION_MARKER}{name}\n");
    let Some(start) = PRELUDE.find(&marker).map(|at| at + marker.len()) else {
        return "";
    };
    let end = PRELUDE[start..]
        .find(&format!("\n{SECTION_MARKER}"))
        .map_or(PRELUDE.len(), |at| start + at);
    PRELUDE[start..end].trim_end()
}

/// `template` with its placeholders replaced by `values`, then a blank line.
/// A placeholder alone on its line becomes the value's lines at its
/// indentation (none for an empty value); any other is replaced in place.
/// One with no value stays as it is.
fn fill_placeholders(template: &str, values: &[(&str, String)]) -> String {
    let value = |name: &str| values.iter().find(|(n, _)| *n == name).map(|(_, v)| v);
    let mut out = String::new();
    for line in template.lines() {
        let code = line.trim_start();
        let indent = &line[..line.len() - code.len()];
        if let Some(lines) = placeholder_name(code).and_then(value) {
            for l in lines.lines() {
                out.push_str(indent);
                out.push_str(l);
                out.push('\n');
            }
            continue;
        }
        let mut rest = line;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let filled = rest[open..].find('}').and_then(|close| {
                Some((close, value(placeholder_name(&rest[open..=open + close])?)?))
            });
            match filled {
                Some((close, v)) => {
                    out.push_str(v);
                    rest = &rest[open + close + 1..];
                }
                None => {
                    out.push('{');
                    rest = &rest[open + 1..];
                }
            }
        }
        out.push_str(rest);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// The name in `text` when it is exactly one placeholder, `{name}`.
fn placeholder_name(text: &str) -> Option<&str> {
    let name = text.strip_prefix('{')?.strip_suffix('}')?;
    let identifier =
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    identifier.then_some(name)
}

impl ModuleState<'_> {
    /// The helpers the module's code called, what they call, `mpmd_report`
    /// and with a loop cap its accounting, in `Helper` order.
    pub(super) fn write_helpers(&self, out: &mut String) {
        let mut used = self.helpers.clone();
        used.insert(Helper::Report);
        if self.options.loop_cap.is_some() {
            used.insert(Helper::LoopCap);
        }
        let fused = fuses_programs(self.plan, self.options);
        for helper in &with_needs(used, self.options) {
            out.push_str(&helper.text(self.options, fused));
        }
    }
}

/// The values of a warp reduction's section: its name, type, the loads of
/// the 32 published words and the butterfly's combining steps (offsets 16,
/// 8, 4, 2, 1), unrolled so that no loop counts toward the loop cap.
fn warp_reduce_fill(op: WarpOp, t: ScalarType) -> Vec<(&'static str, String)> {
    let ty = wgsl_scalar(t);
    let word = |k: u32| format!("mpmd_warp_words[base + {k}u]");
    let load = |k: u32| match t {
        ScalarType::U32 => word(k),
        _ => format!("bitcast<{ty}>({})", word(k)),
    };
    let combine = |a: String, b: String| combine_text(op, t, &a, &b);
    let loads: String = (0..WARP_SIZE)
        .map(|k| format!("t[{k}] = {};\n", load(k)))
        .collect();
    let mut levels = String::new();
    let mut half = WARP_SIZE / 2;
    while half > 0 {
        for j in 0..half {
            let sum = combine(format!("t[{j}]"), format!("t[{}]", j + half));
            levels.push_str(&format!("t[{j}] = {sum};\n"));
        }
        half /= 2;
    }
    vec![
        ("name", format!("{}_{ty}", reduction_name(op))),
        ("ty", ty.to_string()),
        ("loads", loads),
        ("levels", levels),
    ]
}

/// One step of a warp reduction: `a` combined with `b`, in that order (the
/// language's `min`/`max` for f32, with its NaN rule).
fn combine_text(op: WarpOp, t: ScalarType, a: &str, b: &str) -> String {
    match (op, t) {
        (WarpOp::ReduceMin, ScalarType::F32) => format!("mpmd_min_f32({a}, {b})"),
        (WarpOp::ReduceMax, ScalarType::F32) => format!("mpmd_max_f32({a}, {b})"),
        (WarpOp::ReduceMin, _) => format!("min({a}, {b})"),
        (WarpOp::ReduceMax, _) => format!("max({a}, {b})"),
        _ => format!("{a} + {b}"),
    }
}

/// The values of the `subgroup_reduce` section for an f32 reduction: its
/// name and the butterfly's steps (offsets 16, 8, 4, 2, 1), each the
/// partner's word by `subgroupShuffleXor` and the two combined in the
/// tree's order (lower lane's value first).
fn subgroup_reduce_fill(op: WarpOp) -> Vec<(&'static str, String)> {
    let mut levels = String::new();
    let mut half = WARP_SIZE / 2;
    while half > 0 {
        let other = format!("o{half}");
        levels.push_str(&format!(
            "let {other} = bitcast<f32>(subgroupShuffleXor(bitcast<u32>(t), {half}u));\n"
        ));
        let lower = combine_text(op, ScalarType::F32, "t", &other);
        let upper = combine_text(op, ScalarType::F32, &other, "t");
        levels.push_str(&format!(
            "t = select({upper}, {lower}, (thread & {half}u) == 0u);\n"
        ));
        half /= 2;
    }
    vec![
        ("name", format!("{}_f32", reduction_name(op))),
        ("levels", levels),
    ]
}

/// `helpers` and every helper they call, directly or not.
fn with_needs(mut helpers: BTreeSet<Helper>, options: &EmitOptions) -> BTreeSet<Helper> {
    let mut pending: Vec<Helper> = helpers.iter().cloned().collect();
    while let Some(helper) = pending.pop() {
        for need in helper.needs(options) {
            if helpers.insert(need.clone()) {
                pending.push(need);
            }
        }
    }
    helpers
}

/// The values of the `mma` section for inputs of type `t`: the widening
/// function and one lane's 4 sums, unrolled. `a` holds the lane's rows of A
/// as the words of its quad (word `4r + j`: register `r` of lane `j` of the
/// quad, rows `g` (r even) and `g + 8` (r odd), columns `2j + 8 (r / 2)`
/// and one more), `b` its two columns of B (word `8r + 4c + j`: register `r`
/// of lane `j` of the quad that holds column `2q + c`, rows `2j + 8r` and
/// one more). Each sum starts from `c` and adds the products for k = 0..15
/// in order (docs/numerics.md).
fn mma_fill(t: ScalarType) -> Vec<(&'static str, String)> {
    let widen = format!("mpmd_{}_to_f32", half_name(t));
    let half = |word: String, k: u32| match k % 2 {
        0 => format!("({word} & 0xffffu)"),
        _ => format!("({word} >> 16u)"),
    };
    let mut sums = String::new();
    for i in 0..4u32 {
        let (h, c) = (i / 2, i % 2);
        for k in 0..16u32 {
            let j = (k % 8) / 2;
            let a = half(format!("a[{}]", 4 * (h + 2 * (k / 8)) + j), k);
            let b = half(format!("b[{}]", 8 * (k / 8) + 4 * c + j), k);
            sums.push_str(&format!("d[{i}] = d[{i}] + {widen}({a}) * {widen}({b});\n"));
        }
    }
    vec![("name", half_name(t).to_string()), ("sums", sums)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::{validate_wgsl_capabilities, WarpPath, STATUS_WORDS};

    /// Every helper, each parameterised one with the parameters that change
    /// its text.
    fn every_helper() -> Vec<Helper> {
        let mut helpers = vec![
            Helper::Report,
            Helper::LoopCap,
            Helper::IsNan,
            Helper::Opaque,
            Helper::DivI32,
            Helper::DivU32,
            Helper::RemI32,
            Helper::RemU32,
            Helper::AbsI32,
            Helper::MinF32,
            Helper::MaxF32,
            Helper::F32ToI32,
            Helper::F32ToU32,
            Helper::Fmod,
            Helper::Check(1),
            Helper::Check(3),
            // More coordinates than an error record keeps.
            Helper::Check(MAX_RECORDED_VALUES + 1),
            Helper::SemWait("g0_s".to_string()),
            Helper::SemTake("g0_s".to_string()),
            Helper::SemAmount,
            Helper::LoopLimit,
            Helper::Saturating,
            Helper::SumToOdd,
            Helper::U64,
            Helper::FmaF32,
            Helper::IntToF32Odd,
            Helper::WarpBallot,
        ];
        helpers.push(Helper::SubgroupCheck);
        for op in [WarpOp::ReduceAdd, WarpOp::ReduceMin, WarpOp::ReduceMax] {
            for t in [ScalarType::F32, ScalarType::I32, ScalarType::U32] {
                helpers.push(Helper::WarpReduce(op, t));
            }
            helpers.push(Helper::SubgroupReduce(op));
        }
        for t in [ScalarType::F16, ScalarType::BF16] {
            helpers.extend([
                Helper::Widen(t),
                Helper::Narrow(t),
                Helper::Fma16(t),
                Helper::Mma(t),
                Helper::Min16(t),
                Helper::Max16(t),
            ]);
        }
        helpers
    }

    /// The option sets that change helper text: the loop cap, a fused
    /// module, and native f16 conversions.
    fn variants() -> Vec<(EmitOptions, bool)> {
        let capped = EmitOptions {
            loop_cap: Some(65_000),
            wait_poll_budget: 100,
            ..EmitOptions::default()
        };
        let native = EmitOptions {
            f16_conversions: F16Conversions::Native,
            ..EmitOptions::default()
        };
        vec![
            (EmitOptions::default(), false),
            (EmitOptions::default(), true),
            (capped.clone(), false),
            (capped, true),
            (native, false),
        ]
    }

    /// The globals the helpers use (emit/bindings.rs declares them in a module).
    fn globals() -> String {
        format!(
            "@group(0) @binding(1) var<storage, read_write> mpmd_status: array<atomic<u32>, {STATUS_WORDS}>;\n\
             @group(0) @binding(2) var<storage, read_write> g0_s: array<atomic<i32>>;\n\
             var<private> mpmd_unit: u32;\n\
             var<private> mpmd_block_id: u32;\n\
             var<private> mpmd_thread_id: u32;\n\
             var<private> mpmd_loop_count: u32;\n\
             var<private> mpmd_idle: bool;\n\
             var<workgroup> mpmd_warp_words: array<u32, 64>;\n"
        )
    }

    #[test]
    fn every_section_is_valid_wgsl_with_what_it_needs() {
        for helper in every_helper() {
            for (options, fused) in variants() {
                let text: String = with_needs(BTreeSet::from([helper.clone()]), &options)
                    .iter()
                    .map(|h| h.text(&options, fused))
                    .collect();
                let module = format!("{}\n{text}", globals());
                // Subgroup operations allowed: the native path's sections use them.
                let allowed = EmitOptions {
                    warps: WarpPath::Native,
                    ..options.clone()
                };
                if let Err(e) = validate_wgsl_capabilities(&module, &allowed) {
                    panic!(
                        "{helper:?} (loop cap {:?}, fused {fused}):\n{e}\n{module}",
                        options.loop_cap
                    );
                }
            }
        }
    }

    #[test]
    fn every_placeholder_is_filled() {
        for helper in every_helper() {
            for (options, fused) in variants() {
                assert!(
                    !prelude_section(helper.section(&options)).is_empty(),
                    "{helper:?}"
                );
                let text = helper.text(&options, fused);
                let left = text
                    .split('{')
                    .skip(1)
                    .filter_map(|after| {
                        placeholder_name(&format!("{{{}}}", after.split('}').next()?))
                            .map(str::to_string)
                    })
                    .collect::<Vec<_>>();
                assert_eq!(left, Vec::<String>::new(), "{helper:?}:\n{text}");
            }
        }
    }

    #[test]
    fn every_section_belongs_to_a_helper() {
        let sections: Vec<&str> = PRELUDE
            .lines()
            .filter_map(|line| line.strip_prefix(SECTION_MARKER))
            .collect();
        let used: Vec<&str> = every_helper()
            .iter()
            .flat_map(|h| variants().into_iter().map(|(o, _)| h.section(&o)))
            .collect();
        for section in &sections {
            assert!(used.contains(section), "section `{section}` has no helper");
        }
        let mut unique = sections.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            sections.len(),
            "a section name repeats: {sections:?}"
        );
    }

    #[test]
    fn placeholders_fill_lines_and_text() {
        let template =
            "fn f{n}() {\n  {lines}\n  {none}\n  if (x) { return {n}u; }\n  {unknown}\n}";
        let values = [
            ("n", "7".to_string()),
            ("lines", "a();\nb();\n".to_string()),
            ("none", String::new()),
        ];
        assert_eq!(
            fill_placeholders(template, &values),
            "fn f7() {\n  a();\n  b();\n  if (x) { return 7u; }\n  {unknown}\n}\n\n"
        );
    }
}
