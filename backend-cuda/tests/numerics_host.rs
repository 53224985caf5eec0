//! The integer helpers of the generated CUDA C (prelude.cu, "numerics"
//! section) compiled for the host with `c++` and compared with the IR's
//! integer semantics (DESIGN.md, "Semantics"), on edge values. Needs a C++
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
    let prelude = mpmd_cuda::emit::PRELUDE;
    let begin = prelude
        .find("// ---- numerics begin")
        .expect("begin marker");
    let end = prelude.find("// ---- numerics end").expect("end marker");
    let numerics = &prelude[begin..end];

    let mut program = String::from(
        "#include <cstdio>\n#include <cstring>\n#define __device__\n#define __forceinline__ inline\ntypedef unsigned int u32;\n// In range (the helpers clamp first), C's truncating cast is cvt.rzi.\n#define __float2int_rz(x) ((int)(x))\n#define __float2uint_rz(x) ((u32)(x))\n",
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
