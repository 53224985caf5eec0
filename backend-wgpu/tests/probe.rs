mod common;
use common::*;
use mpmd_core::backend::Backend;
use mpmd_core::host::HostTensor;
use mpmd_core::ir::Literal;
use mpmd_wgpu::WgpuOptions;

#[test]
fn probe_loop_limit() {
    let Some(mut wgpu) = backend(WgpuOptions { loop_cap: Some(u32::MAX), ..Default::default() }) else { return };
    let m = module("
mesh m { threads t = 1; }
kernel count(y: gmem<u32[1]>, n: u32) {
  var c: u32 = 0u;
  for k: u32 in 0u..n { c = c + 1u; }
  for k2: u32 in 0u..n { c = c + 1u; }
  y[0] = c;
}
map count { programs [m: count]; outputs [y: gmem<u32[1]>]; scalars [n: u32]; }
");
    let p = plan(&m, "count");
    for n in [30000u32, 32767, 32768, 40000, 70000] {
        let a = args(vec![], vec![("n", Literal::U32(n))]);
        let out = wgpu.run(&p, &a, &fast()).unwrap();
        eprintln!("n={n} (2 loops) count={}", out.outputs["y"].words[0]);
    }
}

#[test]
fn probe_loop_limit_nested() {
    let Some(mut wgpu) = backend(WgpuOptions { loop_cap: Some(u32::MAX), ..Default::default() }) else { return };
    let m = module("
mesh m { threads t = 1; }
kernel count(y: gmem<u32[1]>, n: u32) {
  var c: u32 = 0u;
  for k: u32 in 0u..n { for j: u32 in 0u..1u { c = c + 1u; } }
  y[0] = c;
}
map count { programs [m: count]; outputs [y: gmem<u32[1]>]; scalars [n: u32]; }
");
    let p = plan(&m, "count");
    for n in [20000u32, 21845, 21846, 30000, 32767, 32768, 40000, 70000] {
        let a = args(vec![], vec![("n", Literal::U32(n))]);
        let out = wgpu.run(&p, &a, &fast()).unwrap();
        eprintln!("nested n={n} count={}", out.outputs["y"].words[0]);
    }
}

#[test]
fn probe_fma_contraction() {
    let Some(mut wgpu) = backend(WgpuOptions::default()) else { return };
    for fm in ["", "fast_math;"] {
        let m = module(&format!("
mesh m {{ threads t = 1; }}
kernel k(a: gmem<f32[3]>, y: gmem<f32[2]>) {{
  y[0] = a[0] * a[1] + a[2];
  y[1] = a[0] / a[1];
}}
map k {{ programs [m: k]; inputs [a: gmem<f32[3]>]; outputs [y: gmem<f32[2]>]; {fm} }}
"));
        let p = plan(&m, "k");
        // a*b exact = 1 + 2^-11 + 2^-22 (rounds away the 2^-22); c = -(1 + 2^-11)
        let a0 = 1.0f32 + f32::powi(2.0, -12);
        let vals = [a0, a0, -(1.0 + f32::powi(2.0, -11))];
        let a = args(vec![("a", HostTensor::from_f32(vec![3], &vals))], vec![]);
        let out = wgpu.run(&p, &a, &fast()).unwrap();
        let y = out.outputs["y"].to_f32();
        let unfused = a0 * a0 + vals[2];
        let fused = a0.mul_add(a0, vals[2]);
        eprintln!("{fm}: got {:e} unfused {:e} fused {:e}", y[0], unfused, fused);
    }
}
