//! Runs generated CUDA C on CPU threads: a shim maps CUDA's built-ins to C++
//! (one thread per CUDA thread, a std::barrier per block, `__shared__` as
//! static storage), and blocks run one after another in ticket order. Shared
//! by tests/host_emulation.rs and conformance/tests/cuda_emulation.rs (which
//! fuzzes through it). Needs a C++20 compiler (`c++`) on PATH.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::process::Command;

use mpmd_core::ir::Literal;
use mpmd_core::plan::{BufferInit, LaunchPlan};
use mpmd_core::Mode;
use mpmd_cuda::emit::{emit_module, KernelParam};

const SHIM: &str = r#"
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#define MPMD_HOST_EMULATION 1
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n)
struct mpmd_dim3 { unsigned x, y, z; };
static thread_local mpmd_dim3 threadIdx;
static thread_local mpmd_dim3 blockIdx;
static thread_local mpmd_dim3 gridDim;
static thread_local std::barrier<>* mpmd_block_barrier;
alignas(16) unsigned char mpmd_smem[1 << 16];
static unsigned long long mpmd_host_nanoseconds() {
  return (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count();
}
static void __syncthreads() { mpmd_block_barrier->arrive_and_wait(); }
// Named barrier 1 of the block's first n threads: one std::barrier per
// thread count the kernel uses, made by main for each block.
static thread_local std::vector<std::pair<unsigned, std::barrier<>*>>* mpmd_partial_barriers;
static void mpmd_partial_barrier(unsigned n) {
  for (auto& [threads, barrier] : *mpmd_partial_barriers) {
    if (threads == n) { barrier->arrive_and_wait(); return; }
  }
  std::abort();
}
static void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static void __nanosleep(unsigned) { std::this_thread::yield(); }
template <class T> static T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> static T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
template <class T> static T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <class T> static T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }
template <class T> static T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <class T> static T atomicCAS(T* p, T expected, T desired) {
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return expected;
}
template <class T> static T atomicMin(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return old;
}
template <class T> static T atomicMax(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v > old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return old;
}
static int __float_as_int(float x) { int r; memcpy(&r, &x, 4); return r; }
static unsigned __float_as_uint(float x) { unsigned r; memcpy(&r, &x, 4); return r; }
static float __int_as_float(int x) { float r; memcpy(&r, &x, 4); return r; }
static float __uint_as_float(unsigned x) { float r; memcpy(&r, &x, 4); return r; }
static int __float2int_rz(float x) { return (int)x; }
static unsigned __float2uint_rz(float x) { return (unsigned)x; }
static float __int2float_rn(int x) { return (float)x; }
static float __uint2float_rn(unsigned x) { return (float)x; }
static float rsqrtf(float x) { return 1.0f / sqrtf(x); }
struct mpmd_any_ptr {
  unsigned* p;
  template <class T> operator T*() const { return (T*)p; }
};
"#;

/// Outputs of an emulated call: the control block and every buffer.
pub struct Emulated {
    pub control: Vec<u32>,
    /// The status word the control block points the kernel to (words
    /// 24-25): 1 when the kernel recorded an error.
    pub status: u32,
    pub buffers: Vec<Vec<u32>>,
}

pub fn emulate(
    plan: &LaunchPlan,
    mode: Mode,
    inputs: &BTreeMap<&str, Vec<u32>>,
    scalars: &BTreeMap<&str, Literal>,
    timeout_ns: u64,
) -> Emulated {
    emulate_with_residents(plan, mode, inputs, scalars, &BTreeMap::new(), timeout_ns)
}

/// [`emulate`] with the words device-resident refs start from (zero when
/// absent); their words after the call are in `Emulated::buffers`.
pub fn emulate_with_residents(
    plan: &LaunchPlan,
    mode: Mode,
    inputs: &BTreeMap<&str, Vec<u32>>,
    scalars: &BTreeMap<&str, Literal>,
    residents: &BTreeMap<&str, Vec<u32>>,
    timeout_ns: u64,
) -> Emulated {
    let module = emit_module(plan, mode).expect("emits");
    let mut program = String::from(SHIM);
    // The dynamic smem arena is the shim's global array.
    let arena = "extern __shared__ __align__(16) unsigned char mpmd_smem[];";
    assert!(module.source.contains(arena));
    program.push_str(&module.source.replace(arena, ""));
    program.push_str("\nint main() {\n");
    for (index, buffer) in plan.buffers.iter().enumerate() {
        let len = buffer.len.max(1) as usize;
        let words: Vec<u32> = match &buffer.init {
            BufferInit::Input(name) => inputs[name.as_str()].clone(),
            BufferInit::Resident(name) => residents
                .get(name.as_str())
                .cloned()
                .unwrap_or_else(|| vec![0; len]),
            // Uninitialised memory reads as a marker, so tests see unwritten words.
            BufferInit::Uninitialized => vec![0xdead_beef; len],
            _ => vec![0; len],
        };
        let list: Vec<String> = words.iter().map(|w| format!("{w}u")).collect();
        program.push_str(&format!(
            "  static unsigned buf{index}[{len}] = {{{}}};\n",
            list.join(", ")
        ));
    }
    program.push_str("  static unsigned ctl[64] = {0};\n");
    // The status word, found through the control block as on the GPU.
    program.push_str(&format!(
        "  static unsigned status_word = 0;\n  {{ unsigned long long a = (unsigned long long)&status_word; ctl[{}] = (unsigned)a; ctl[{}] = (unsigned)(a >> 32); }}\n",
        mpmd_cuda::control::STATUS_LO,
        mpmd_cuda::control::STATUS_HI
    ));
    let mut args = Vec::new();
    for param in &module.params {
        args.push(match param {
            KernelParam::Buffer(i) => format!("mpmd_any_ptr{{buf{i}}}"),
            KernelParam::Scalar(i) => {
                let name = &plan.operands[*i].name;
                match scalars[name.as_str()] {
                    Literal::F32(b) => format!("__uint_as_float({}u)", b.0),
                    Literal::I32(v) => format!("(int){}u", v as u32),
                    Literal::U32(v) => format!("{v}u"),
                    Literal::Bool(v) => format!("{}u", v as u32),
                }
            }
            KernelParam::Control => "ctl".to_string(),
            KernelParam::WaitTimeoutNs => format!("{timeout_ns}ull"),
        });
    }
    // One barrier per smaller thread count (the walk's named barriers).
    let partial_counts: std::collections::BTreeSet<u32> = plan
        .units
        .iter()
        .map(|u| u.threads_per_block)
        .filter(|&n| n < module.block_dim)
        .collect();
    let partial: Vec<String> = partial_counts
        .iter()
        .map(|n| format!("{{{n}u, new std::barrier<>({n})}}"))
        .collect();
    program.push_str(&format!(
        "  for (unsigned block = 0; block < {total}u; block++) {{\n    std::barrier<> bar({dim});\n    std::vector<std::pair<unsigned, std::barrier<>*>> partial{{{partial}}};\n    std::vector<std::thread> threads;\n    for (unsigned t = 0; t < {dim}u; t++) {{\n      threads.emplace_back([&, t] {{\n        threadIdx = mpmd_dim3{{t, 0, 0}};\n        blockIdx = mpmd_dim3{{block, 0, 0}};\n        gridDim = mpmd_dim3{{{total}u, 1, 1}};\n        mpmd_block_barrier = &bar;\n        mpmd_partial_barriers = &partial;\n        {kernel}({args});\n        bar.arrive_and_drop();\n      }});\n    }}\n    for (auto& th : threads) th.join();\n    for (auto& [n, b] : partial) delete b;\n  }}\n",
        total = module.total_blocks,
        dim = module.block_dim,
        kernel = module.kernel_name,
        args = args.join(", "),
        partial = partial.join(", ")
    ));
    program.push_str("  printf(\"ctl\"); for (int k = 0; k < 64; k++) printf(\" %u\", ctl[k]); printf(\"\\n\");\n");
    program.push_str("  printf(\"status %u\\n\", status_word);\n");
    for (index, buffer) in plan.buffers.iter().enumerate() {
        program.push_str(&format!(
            "  printf(\"buf\"); for (int k = 0; k < {}; k++) printf(\" %u\", buf{index}[k]); printf(\"\\n\");\n",
            buffer.len.max(1)
        ));
    }
    program.push_str("  return 0;\n}\n");

    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let run_id = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "host-emulation-{}-{mode:?}-{}-{run_id}",
        plan.map.name,
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("kernel.cpp");
    let binary = dir.join("kernel");
    std::fs::write(&source, &program).unwrap();
    let compile = Command::new("c++")
        .args([
            "-std=c++20",
            "-O1",
            "-ffp-contract=off",
            "-pthread",
            "-w",
            "-o",
        ])
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("a C++20 compiler (`c++`) on PATH");
    assert!(
        compile.status.success(),
        "c++ failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&compile.stderr)
    );
    let run = Command::new(&binary).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(run.status.success(), "emulated kernel crashed: {run:?}");
    let stdout = String::from_utf8(run.stdout).unwrap();
    let mut lines = stdout.lines().map(|l| {
        l.split(' ')
            .skip(1)
            .map(|w| w.parse::<u32>().unwrap())
            .collect::<Vec<u32>>()
    });
    let control = lines.next().unwrap();
    let status = lines.next().unwrap()[0];
    Emulated {
        control,
        status,
        buffers: lines.collect(),
    }
}
