//! Adversarial names: a generated module with its names replaced, one to one,
//! by names that collide with what backends generate or reserve (keywords and
//! builtins of CUDA C, C++ and WGSL, prelude-like and generated-looking names,
//! names built from the module's other names with `_` and suffixes, very long
//! names). Renaming is injective and never reuses a name of the module, so the
//! renamed module is valid exactly when the original is, and computes the same:
//! any disagreement it causes is a backend's naming bug.
//!
//! It works on the canonical text (`parse(print(m)) == m`): every name the
//! generator makes contains a digit or is one of `GENERATOR_NAMES`, and no
//! mpmd keyword or builtin is either, except the builtins of
//! `BUILTINS_WITH_DIGITS` (`mma_m16n8k16`), which are never renamed, so
//! renaming those identifiers renames exactly the generated names.

use std::collections::{BTreeMap, BTreeSet};

use mpmd_core::inputs::Rng;
use mpmd_core::text;

use crate::case::CaseFile;

/// Keywords and builtins of the languages the backends emit, and names that
/// look like what an emitter would generate for itself.
const RESERVED_ELSEWHERE: &[&str] = &[
    // C and C++.
    "int",
    "float",
    "double",
    "char",
    "long",
    "short",
    "signed",
    "unsigned",
    "void",
    "auto",
    "class",
    "struct",
    "union",
    "enum",
    "namespace",
    "template",
    "typename",
    "static",
    "extern",
    "register",
    "volatile",
    "inline",
    "goto",
    "switch",
    "default",
    "do",
    "sizeof",
    "new",
    "delete",
    "this",
    "operator",
    "private",
    "public",
    "friend",
    "virtual",
    "main",
    "NULL",
    "nullptr",
    "uint32_t",
    "int32_t",
    "size_t",
    "asm",
    "restrict",
    "_Bool",
    // CUDA.
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "__syncthreads",
    "__global__",
    "__device__",
    "__shared__",
    "__shfl_sync",
    "atomicAdd",
    "atomicCAS",
    "dim3",
    "float4",
    "uint4",
    "min",
    "max",
    "fminf",
    "fmaxf",
    "sqrtf",
    "expf",
    "printf",
    "__half",
    "__nv_bfloat16",
    "clock64",
    "__threadfence",
    // WGSL (identifiers starting with `__` are reserved there).
    "loop",
    "array",
    "vec2",
    "vec4",
    "mat4x4",
    "ptr",
    "atomic",
    "workgroupBarrier",
    "storageBarrier",
    "atomicLoad",
    "atomicStore",
    "atomicAdd",
    "bitcast",
    "arrayLength",
    "storage",
    "uniform",
    "workgroup",
    "function",
    "override",
    "alias",
    "enable",
    "requires",
    "diagnostic",
    "discard",
    "continuing",
    "fallthrough",
    "textureLoad",
    "sampler",
    "local_invocation_id",
    "workgroup_id",
    "num_workgroups",
    "global_invocation_id",
    "__x",
    "___",
    "_",
    "self",
    "super",
    "mod",
    // What an emitter might name its own helpers, buffers and bounds.
    "idx",
    "tid",
    "bid",
    "lane",
    "mpmd",
    "mpmd_report",
    "mpmd_error",
    "mpmd_abort",
    "params",
    "ctrl",
    "control",
    "lits",
    "lit",
    "u_x",
    "p_x",
    "b_x",
    "k_end",
    "i_end",
    "end",
    "n",
    "s",
    "t",
    "x",
    "y",
    "x_y",
    "buf",
    "sem",
    "main_0",
    "entry",
    "kernel0",
];

/// Names the generator gives without a digit (everything else it names has one).
const GENERATOR_NAMES: &[&str] = &[
    "t", "lin", "gid", "tk", "tick", "obs", "hand", "credit", "send", "recv", "main", "sf", "si",
    "sn", "hx", "hout", "hecho", "icnt", "cnt", "fcnt", "hs", "hs_t", "hs_b", "hr", "hr_t", "hr_b",
    "hin", "send_k", "recv_k", "b", "x",
];

/// Builtins of the text format whose names have a digit.
const BUILTINS_WITH_DIGITS: &[&str] = &[mpmd_core::ir::mma::NAME];

/// Percent of names replaced.
const RENAME_PERCENT: u32 = 40;

/// `file` with some of its generated names replaced by adversarial ones, in
/// the module and its case section alike; `None` when the renamed text does
/// not read back (a fuzzer bug, reported by the caller's tests, never a
/// finding about a backend).
pub fn with_adversarial_names(file: &CaseFile, rng: &mut Rng) -> Option<CaseFile> {
    let printed = file.print();
    let mut present: BTreeSet<String> = BTreeSet::new();
    let mut generated: Vec<String> = Vec::new();
    for word in identifiers(&printed) {
        let is_generated = (word.bytes().any(|b| b.is_ascii_digit())
            || GENERATOR_NAMES.contains(&word))
            && !BUILTINS_WITH_DIGITS.contains(&word)
            && text::is_valid_name(word);
        if present.insert(word.to_string()) && is_generated {
            generated.push(word.to_string());
        }
    }
    let mut renamed: BTreeMap<String, String> = BTreeMap::new();
    let mut taken = present.clone();
    for old in &generated {
        if !rng.chance(RENAME_PERCENT) {
            continue;
        }
        if let Some(new) = adversarial(old, &renamed, &taken, rng) {
            taken.insert(new.clone());
            renamed.insert(old.clone(), new);
        }
    }
    if renamed.is_empty() {
        return Some(file.clone());
    }
    let mut out = String::with_capacity(printed.len());
    let mut rest = printed.as_str();
    while let Some((start, end)) = next_identifier(rest) {
        out.push_str(&rest[..start]);
        let word = &rest[start..end];
        out.push_str(renamed.get(word).map_or(word, String::as_str));
        rest = &rest[end..];
    }
    out.push_str(rest);
    let parsed = text::parse_file(&out).ok()?;
    Some(CaseFile {
        module: parsed.module,
        spec: parsed.case?,
    })
}

/// One adversarial replacement for `old`, different from every name taken.
fn adversarial(
    old: &str,
    renamed: &BTreeMap<String, String>,
    taken: &BTreeSet<String>,
    rng: &mut Rng,
) -> Option<String> {
    for _ in 0..8 {
        let candidate = match rng.below(6) {
            0 | 1 => rng.pick(RESERVED_ELSEWHERE).to_string(),
            // A name built from another renamed name and a suffix an emitter
            // might add (`x` beside `x_y`, `k` beside `k_end`).
            2 => match renamed
                .values()
                .nth(rng.below(renamed.len().max(1) as u64) as usize)
            {
                Some(base) => format!(
                    "{base}{}",
                    rng.pick(&["_end", "_y", "_0", "_1", "_", "__", "_len", "_base"])
                ),
                None => format!("{old}_end"),
            },
            3 => format!(
                "{}_{}",
                rng.pick(RESERVED_ELSEWHERE),
                rng.pick(&["end", "y", "0", "x"])
            ),
            // Very long names (the CLI's file names, identifier limits).
            4 => {
                let len = *rng.pick(&[64usize, 255, 256, 1000, 4096, 10_000]);
                let stem = rng
                    .pick(RESERVED_ELSEWHERE)
                    .trim_start_matches('_')
                    .to_string();
                let stem = if stem.is_empty() {
                    "n".to_string()
                } else {
                    stem
                };
                let mut s = stem.repeat(len / stem.len() + 1);
                s.truncate(len);
                s
            }
            _ => format!("_{old}"),
        };
        if text::is_valid_name(&candidate) && !taken.contains(&candidate) {
            return Some(candidate);
        }
    }
    None
}

fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let (start, end) = next_identifier(rest)?;
        let word = &rest[start..end];
        rest = &rest[end..];
        Some(word)
    })
}

/// The byte range of the next identifier of `text` that is not part of a
/// number (`3u`, `1e5`) or a longer word.
fn next_identifier(text: &str) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if word(bytes[i]) {
            let start = i;
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            let first = bytes[start];
            if first.is_ascii_alphabetic() || first == b'_' {
                return Some((start, i));
            }
        } else {
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::generate;

    /// Renaming keeps every generated module valid and changes many of them.
    #[test]
    fn renamed_modules_read_back_and_validate() {
        let mut changed = 0;
        for seed in 0..60 {
            let file = generate(seed);
            let mut rng = Rng::new(seed);
            let renamed = with_adversarial_names(&file, &mut rng)
                .unwrap_or_else(|| panic!("seed {seed}: renamed text does not parse"));
            renamed
                .validate()
                .unwrap_or_else(|e| panic!("seed {seed}: renamed module invalid: {e:?}"));
            changed += usize::from(renamed != file);
        }
        assert!(changed >= 50, "only {changed} of 60 modules renamed");
    }

    #[test]
    fn identifiers_skip_numbers() {
        let words: Vec<&str> = identifiers("x1 = 3u + 1e5 * y_2; // a0").collect();
        assert_eq!(words, ["x1", "y_2", "a0"]);
    }
}
