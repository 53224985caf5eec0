//! The integer helpers of the generated CUDA C (prelude.cu, "numerics"
//! section) compiled for the host with `c++` and compared with the IR's
//! integer semantics (docs/design.md, "Semantics"), on edge values. Needs a C++
//! compiler on PATH (`c++`, as Rust's own toolchain set-up provides).

use std::process::Command;

const VALUES: [i32; 16] = [
    0,
    1,
    -1,
    2,
    -2,
    7,
    -7,
    31,
    32,
    33,
    -33,
    12345,
    -98765,
    i32::MIN,
    i32::MAX,
    i32::MIN + 1,
];

fn expected(op: &str, a: i32, b: i32) -> u32 {
    let (ua, ub) = (a as u32, b as u32);
    match op {
        "add_i32" => a.wrapping_add(b) as u32,
        "sub_i32" => a.wrapping_sub(b) as u32,
        "mul_i32" => a.wrapping_mul(b) as u32,
        "neg_i32" => a.wrapping_neg() as u32,
        "abs_i32" => a.wrapping_abs() as u32,
        "div_i32" => match b {
            0 => a as u32,
            _ => a.wrapping_div(b) as u32,
        },
        "rem_i32" => match b {
            0 => 0,
            _ => a.wrapping_rem(b) as u32,
        },
        "shl_i32" => a.wrapping_shl(ub) as u32,
        "shr_i32" => a.wrapping_shr(ub) as u32,
        "min_i32" => a.min(b) as u32,
        "max_i32" => a.max(b) as u32,
        "div_u32" => ua.checked_div(ub).unwrap_or(ua),
        "rem_u32" => ua.checked_rem(ub).unwrap_or(0),
        "shl_u32" => ua.wrapping_shl(ub),
        "shr_u32" => ua.wrapping_shr(ub),
        "min_u32" => ua.min(ub),
        "max_u32" => ua.max(ub),
        "f32_to_i32" => f32::from_bits(ua) as i32 as u32,
        "f32_to_u32" => f32::from_bits(ua) as u32,
        _ => unreachable!("{op}"),
    }
}

const FLOATS: [f32; 20] = [
    0.0,
    -0.0,
    0.5,
    -0.5,
    -1.5,
    1.9999,
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    2147483520.0,
    2147483648.0,
    -2147483648.0,
    -2147483904.0,
    4294967040.0,
    4294967296.0,
    1e10,
    -1e10,
    1e-45,
    -123456.7,
    16777217.0,
];

const OPS: [&str; 17] = [
    "add_i32", "sub_i32", "mul_i32", "neg_i32", "abs_i32", "div_i32", "rem_i32", "shl_i32",
    "shr_i32", "min_i32", "max_i32", "div_u32", "rem_u32", "shl_u32", "shr_u32", "min_u32",
    "max_u32",
];

#[test]
fn integer_helpers_match_the_ir_semantics() {
    let prelude = mpmd_cuda::PRELUDE;
    let begin = prelude
        .find("// ---- numerics begin")
        .expect("begin marker");
    let end = prelude.find("// ---- numerics end").expect("end marker");
    let numerics = &prelude[begin..end];

    let mut program = String::from(
        "#include <cstdio>\n#include <cstring>\n#include <cmath>\n#define __device__\n#define __forceinline__ inline\ntypedef unsigned int u32;\ntypedef unsigned long long u64;\n// In range (the helpers clamp first), C's truncating cast is cvt.rzi.\n#define __float2int_rz(x) ((int)(x))\n#define __float2uint_rz(x) ((u32)(x))\n",
    );
    program.push_str(numerics);
    program.push_str("int main() {\n  const int v[] = {");
    program.push_str(&VALUES.map(|v| format!("(int){}u", v as u32)).join(", "));
    program.push_str("};\n  const int n = sizeof(v) / sizeof(v[0]);\n");
    program.push_str("  for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) {\n    const int a = v[i], b = v[j];\n    const u32 ua = (u32)a, ub = (u32)b;\n");
    for op in OPS {
        let call = match op {
            "neg_i32" | "abs_i32" => format!("(u32)mpmd_{op}(a)"),
            o if o.ends_with("_u32") => format!("mpmd_{op}(ua, ub)"),
            _ => format!("(u32)mpmd_{op}(a, b)"),
        };
        program.push_str(&format!(
            "    printf(\"{op} %u %u %u\\n\", ua, ub, {call});\n"
        ));
    }
    program.push_str("  }\n");
    program.push_str("  const u32 floats[] = {");
    program.push_str(&FLOATS.map(|f| format!("{}u", f.to_bits())).join(", "));
    program.push_str("};\n  for (u32 k = 0; k < sizeof(floats) / sizeof(floats[0]); k++) {\n    float x;\n    memcpy(&x, &floats[k], 4);\n");
    program
        .push_str("    printf(\"f32_to_i32 %u 0 %u\\n\", floats[k], (u32)mpmd_f32_to_i32(x));\n");
    program
        .push_str("    printf(\"f32_to_u32 %u 0 %u\\n\", floats[k], mpmd_f32_to_u32(x));\n  }\n");
    program.push_str("  return 0;\n}\n");

    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("numerics-host");
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("numerics.cpp");
    let binary = dir.join("numerics");
    std::fs::write(&source, &program).unwrap();
    // -fwrapv is NOT given: the helpers must not rely on signed overflow.
    let compile = Command::new("c++")
        .args([
            "-O2",
            "-std=c++17",
            "-fsanitize=undefined,float-cast-overflow",
            "-fno-sanitize-recover=all",
            "-o",
        ])
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("a C++ compiler (`c++`) on PATH");
    assert!(
        compile.status.success(),
        "c++ failed:\n{}",
        String::from_utf8_lossy(&compile.stderr)
    );
    let run = Command::new(&binary).output().unwrap();
    assert!(
        run.status.success(),
        "helpers hit undefined behaviour:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8(run.stdout).unwrap();
    let mut checked = 0;
    for line in stdout.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let (op, a, b, got) = (
            parts[0],
            parts[1].parse::<u32>().unwrap() as i32,
            parts[2].parse::<u32>().unwrap() as i32,
            parts[3].parse::<u32>().unwrap(),
        );
        assert_eq!(got, expected(op, a, b), "{op}({a}, {b})");
        checked += 1;
    }
    assert_eq!(
        checked,
        OPS.len() * VALUES.len() * VALUES.len() + 2 * FLOATS.len()
    );
}

/// The 16-bit part of the numerics section (conversions, fma, integer
/// casts), compiled for the host as cuda-host compiles it (the integer-bit
/// paths the GPU replaces by PTX `cvt` on sm_80+), against
/// `mpmd_core::numerics`: every 16-bit value widened, every f32 next to a
/// 16-bit rounding boundary (and every high half of an f32) rounded, integers
/// around 2^24 and at random converted, and fma on random and tie-prone
/// triples.
#[test]
fn sixteen_bit_helpers_match_numerics() {
    use mpmd_core::inputs::Rng;
    use mpmd_core::ir::ScalarType::{self, BF16, F16};
    use mpmd_core::numerics;

    let prelude = mpmd_cuda::PRELUDE;
    let begin = prelude.find("// ---- numerics begin").unwrap();
    let end = prelude.find("// ---- numerics end").unwrap();
    let mut program = String::from(
        "#include <cstdio>\n#include <cstring>\n#include <cmath>\n#include <vector>\n#define __device__\n#define __forceinline__ inline\ntypedef unsigned int u32;\ntypedef unsigned long long u64;\n#define __float2int_rz(x) ((int)(x))\n#define __float2uint_rz(x) ((u32)(x))\n",
    );
    program.push_str(&prelude[begin..end]);
    program.push_str(
        r#"
static std::vector<u32> read_words() {
  u32 n = 0;
  if (fread(&n, 4, 1, stdin) != 1) return {};
  std::vector<u32> v(n);
  if (n && fread(v.data(), 4, n, stdin) != n) v.clear();
  return v;
}
static void put(u32 w) { fwrite(&w, 4, 1, stdout); }
int main() {
  for (u32 b = 0; b < 65536u; b++) {
    put(mpmd_float_bits(mpmd_widen_f16(mpmd_half_bits(b))));
    put(mpmd_float_bits(mpmd_widen_bf16(mpmd_bfloat16_bits(b))));
  }
  for (u32 x : read_words()) {
    put(mpmd_round_f16(mpmd_bits_float(x)).bits);
    put(mpmd_round_bf16(mpmd_bits_float(x)).bits);
  }
  for (u32 v : read_words()) {
    put(mpmd_round_f16(mpmd_i32_to_f32_odd((int)v)).bits);
    put(mpmd_round_bf16(mpmd_i32_to_f32_odd((int)v)).bits);
    put(mpmd_round_f16(mpmd_u32_to_f32_odd(v)).bits);
    put(mpmd_round_bf16(mpmd_u32_to_f32_odd(v)).bits);
  }
  const std::vector<u32> f16s = read_words(), bf16s = read_words();
  for (size_t k = 0; k + 2 < f16s.size(); k += 3)
    put(mpmd_fma_f16(mpmd_half_bits(f16s[k]), mpmd_half_bits(f16s[k + 1]), mpmd_half_bits(f16s[k + 2])).bits);
  for (size_t k = 0; k + 2 < bf16s.size(); k += 3)
    put(mpmd_fma_bf16(mpmd_bfloat16_bits(bf16s[k]), mpmd_bfloat16_bits(bf16s[k + 1]), mpmd_bfloat16_bits(bf16s[k + 2])).bits);
  fflush(stdout);
  return 0;
}
"#,
    );

    // f32 inputs: every high half with low halves at and around bf16's
    // rounding boundary, and every f16 with the f32s at and next to the
    // midpoint to its successor.
    let mut floats = Vec::new();
    for high in 0..=u16::MAX as u32 {
        for low in [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff] {
            floats.push((high << 16) | low);
        }
        let lo = numerics::f16_to_f32(high as u16);
        let hi = numerics::f16_to_f32((high as u16).wrapping_add(1));
        if lo.is_finite() && (hi.is_finite() || high & 0x7fff == 0x7bff) && high & 0x7fff != 0x7fff
        {
            let hi = if hi.is_finite() {
                f64::from(hi)
            } else {
                65536.0f64.copysign(f64::from(lo))
            };
            let mid = ((f64::from(lo) + hi) / 2.0) as f32;
            for step in [-1i32, 0, 1] {
                floats.push((mid.to_bits() as i32 + step) as u32);
            }
            floats.push(lo.to_bits());
        }
    }
    let mut rng = Rng::new(16);
    let mut ints: Vec<u32> = Vec::new();
    for base in [1u32 << 24, 1 << 25, 1 << 31, 65504, 2048, 256] {
        for d in 0..4096u32 {
            ints.extend([
                base.wrapping_add(d),
                base.wrapping_sub(d),
                base.wrapping_add(d).wrapping_neg(),
            ]);
        }
    }
    // Just above and below bf16's ties between 2^24 and 2^32, where rounding
    // through a nearest f32 rounds twice.
    for shift in 16..24 {
        for j in 0..64u32 {
            let tie = (1u32 << 24).wrapping_shl(shift - 16) + (2 * j + 1) * (1 << shift);
            ints.extend([tie - 1, tie, tie + 1, tie.wrapping_neg() + 1]);
        }
    }
    ints.extend([0, 1, u32::MAX, i32::MAX as u32, i32::MIN as u32]);
    for _ in 0..200_000 {
        ints.push(rng.next_u32() >> (rng.next_u32() % 32));
    }
    let near_one = |ty: ScalarType, rng: &mut Rng| -> u32 {
        let r = rng.next_u32();
        let sign = (r & 1) << 15;
        match ty {
            F16 => sign | ((13 + (r >> 1) % 5) << 10) | ((r >> 8) & 0x3ff),
            _ => sign | ((125 + (r >> 1) % 5) << 7) | ((r >> 8) & 0x7f),
        }
    };
    let triples = |ty: ScalarType, rng: &mut Rng| -> Vec<u32> {
        let mut t = Vec::new();
        for k in 0..300_000u32 {
            let (a, b) = (near_one(ty, rng), near_one(ty, rng));
            // Random bits, a value near one, or a tiny one (ties of a*b decided by c).
            let c = match k % 3 {
                0 => rng.next_u32() & 0xffff,
                1 => near_one(ty, rng),
                _ => (rng.next_u32() & 0x8000) | (rng.next_u32() % 4),
            };
            t.extend([a, b, c]);
            t.extend([
                rng.next_u32() & 0xffff,
                rng.next_u32() & 0xffff,
                rng.next_u32() & 0xffff,
            ]);
        }
        t
    };
    let (f16_triples, bf16_triples) = (triples(F16, &mut rng), triples(BF16, &mut rng));
    let mut stdin = Vec::new();
    for list in [&floats, &ints, &f16_triples, &bf16_triples] {
        stdin.extend_from_slice(&(list.len() as u32).to_le_bytes());
        for w in list.iter() {
            stdin.extend_from_slice(&w.to_le_bytes());
        }
    }

    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("numerics-host");
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("sixteen.cpp");
    let binary = dir.join("sixteen");
    std::fs::write(&source, &program).unwrap();
    let compile = Command::new("c++")
        .args([
            "-O2",
            "-std=c++17",
            "-ffp-contract=off",
            "-fsanitize=undefined",
            "-fno-sanitize-recover=all",
            "-o",
        ])
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("a C++ compiler (`c++`) on PATH");
    assert!(
        compile.status.success(),
        "c++ failed:\n{}",
        String::from_utf8_lossy(&compile.stderr)
    );
    let mut child = Command::new(&binary)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut pipe, &stdin));
    let run = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(run.status.success(), "helpers hit undefined behaviour");
    let words: Vec<u32> = run
        .stdout
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut out = words.into_iter();
    let mut next = || out.next().expect("the program wrote every result");

    let same = |ty: ScalarType, got: u32, want: u16| {
        got == u32::from(want)
            || (numerics::to_f32(ty, got as u16).unwrap().is_nan()
                && numerics::to_f32(ty, want).unwrap().is_nan())
    };
    for bits in 0..=u16::MAX {
        for ty in [F16, BF16] {
            let (got, want) = (f32::from_bits(next()), numerics::to_f32(ty, bits).unwrap());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "widen {ty} {bits:#06x}: {got:e}"
            );
        }
    }
    for &x in &floats {
        for ty in [F16, BF16] {
            let (got, want) = (next(), numerics::from_f32(ty, f32::from_bits(x)).unwrap());
            assert!(
                same(ty, got, want),
                "round {ty} {x:#010x}: {got:#06x}, want {want:#06x}"
            );
        }
    }
    for &v in &ints {
        for (ty, value) in [
            (F16, i64::from(v as i32)),
            (BF16, i64::from(v as i32)),
            (F16, i64::from(v)),
            (BF16, i64::from(v)),
        ] {
            let (got, want) = (next(), numerics::from_integer(ty, value).unwrap());
            assert_eq!(got, u32::from(want), "{ty}({value})");
        }
    }
    for (ty, list) in [(F16, &f16_triples), (BF16, &bf16_triples)] {
        for t in list.chunks_exact(3) {
            let (got, want) = (
                next(),
                numerics::fma16(ty, t[0] as u16, t[1] as u16, t[2] as u16).unwrap(),
            );
            assert!(
                same(ty, got, want),
                "fma {ty} {t:04x?}: {got:#06x}, want {want:#06x}"
            );
        }
    }
}
