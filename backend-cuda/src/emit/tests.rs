use std::collections::BTreeSet;

use mpmd_core::plan::LaunchPlan;
use mpmd_core::Mode;

use super::expr::MAX_EXPR_DEPTH;
use super::names::USER_KINDS;
use super::*;

/// `source` parsed and lowered for its first call, on a thread with room
/// for the deepest nesting the text format takes.
fn plan_of(source: &str) -> LaunchPlan {
    let source = source.to_string();
    std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || {
            let (module, _) = mpmd_core::text::parse(&source).expect("parses");
            let map = module.effective_calls()[0].map.clone();
            mpmd_core::plan::lower(&validated(&module), &map).expect("lowers")
        })
        .expect("the thread starts")
        .join()
        .expect("parses and lowers")
}

/// Identifiers of `text` (maximal runs of `[A-Za-z0-9_]` not starting
/// with a digit).
fn identifiers(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.chars().next().is_some_and(|c| !c.is_ascii_digit()))
        .map(str::to_string)
        .collect()
}

/// Generated temporaries are exactly `mpmd_<letter><digits>`; nothing else the
/// generated module declares may take that form, and every identifier
/// the prelude declares is generated (`mpmd_`/`MPMD_`) or CUDA's.
#[test]
fn prelude_names_are_outside_the_temporaries_and_user_names() {
    let temporary = |name: &str| {
        let rest = name.strip_prefix("mpmd_").unwrap_or("");
        let mut chars = rest.chars();
        chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && rest.len() > 1
            && chars.all(|c| c.is_ascii_digit())
    };
    let user = |name: &str| {
        let bytes = name.as_bytes();
        bytes.len() >= 2
            && ((USER_KINDS.contains(bytes[0] as char) && matches!(bytes[1], b'_' | b'0'))
                || (bytes[0] == b'b' && bytes[1].is_ascii_digit()))
    };
    let plan = plan_of(
        "mesh m { grid [b = 2]; threads t = 64; }
         kernel k(x: gmem<f32[128]>, y: gmem<f32[128]>, s: sem<[1]>) { wait(s[0], 1); y[axis_index(t)] = x[axis_index(t)]; signal(s[0], 1); }
         map q { programs [m: k]; inputs [x: gmem<f32[128]>]; outputs [y: gmem<f32[128]>]; scratch [s: sem<[1]>]; }",
    );
    let mut skeleton = String::new();
    for schedule in [
        BlockSchedule::Tickets,
        BlockSchedule::ResidentWalk,
        BlockSchedule::BlockIndex,
    ] {
        for mode in [Mode::Fast, Mode::Checked] {
            skeleton.push_str(&emit_module_with(&plan, mode, schedule).unwrap().source);
        }
    }
    for name in identifiers(PRELUDE).union(&identifiers(&skeleton)) {
        let generated = name.starts_with("mpmd_") || name.starts_with("MPMD_");
        if generated {
            assert!(
                !temporary(name) || !PRELUDE.contains(name.as_str()),
                "prelude name `{name}` has the form of a temporary"
            );
        } else if PRELUDE.contains(&format!(" {name}(")) || PRELUDE.contains(&format!(" {name} ")) {
            // A CUDA or C++ name the prelude uses: never a user name.
            assert!(!user(name), "`{name}` has the form of a user name");
        }
    }
}

/// How deeply parentheses nest in `source`.
fn paren_depth(source: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for c in source.chars() {
        match c {
            '(' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// A flat chain of operators nests as deep as it is long in the IR (here
/// the longest the text format takes, with room for the statement): the
/// emitter walks it without recursion and binds it to temporaries every
/// [`MAX_EXPR_DEPTH`] levels, so the C stays shallow. (tests/adversarial.rs
/// compiles and runs the same chain.)
#[test]
fn chains_at_the_nesting_limit_become_shallow_c() {
    let plan = plan_of(&format!(
        "mesh m {{ grid [b = 1]; threads t = 32; }}\n\
         kernel k(x: gmem<i32[32]>, y: gmem<i32[32]>, n: i32) {{\n  let v: i32 = x[axis_index(t)]{};\n  y[axis_index(t)] = v;\n}}\n\
         map k {{ programs [m: k]; inputs [x: gmem<i32[32]>]; outputs [y: gmem<i32[32]>]; scalars [n: i32]; }}\ncall k(n = 3);\n",
        " + n".repeat(mpmd_core::text::MAX_NESTING - 8)
    ));
    for mode in [Mode::Fast, Mode::Checked] {
        let source = emit(&plan, mode).unwrap();
        let depth = paren_depth(&source);
        assert!(
            depth <= 2 * MAX_EXPR_DEPTH as usize + 16,
            "{mode:?}: parentheses nest {depth} deep"
        );
    }
}

/// `m` validated: the interpreter and the lowering take valid modules only.
fn validated(m: &mpmd_core::ir::Module) -> mpmd_core::validate::ValidModule {
    mpmd_core::validate::validate(m, &Default::default())
        .unwrap_or_else(|d| panic!("the module is not valid: {d:?}"))
}
