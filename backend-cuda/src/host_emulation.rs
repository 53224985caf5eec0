//! `cuda-host`: the emitted CUDA C run on CPU threads, so that every build
//! checks what the CUDA text computes, not only that it compiles.
//!
//! A small shim maps CUDA's built-ins to C++ (one POSIX thread per CUDA
//! thread, a barrier per block, `__shared__` as static storage, sequentially
//! consistent atomics). Most plans run their blocks one after another in
//! ticket order, so a wait between programs, or on an earlier block of its
//! own program (a chained scan), finds its signals already made. A plan that
//! needs co-resident blocks (a cycle, a program that waits on its own blocks)
//! runs every block at once, one process per block on one shared mapping, as
//! a cooperative grid runs on a GPU ([`co_resident`]). The GPU memory model is
//! not emulated: this checks the generated logic (schedules, addressing,
//! numerics, semaphores, error records).
//!
//! Each program is compiled once: the binary depends only on the emitted
//! source (inputs, scalars and resident words travel through stdin), and it is
//! cached by a hash of source, compiler and flags, in memory and in a private
//! folder that runs only what it built ([`crate::host_cache`]). The compiler
//! is `$MPMD_HOST_CXX`, else `c++`; it must read C++17 (g++ 8 or clang 7 and
//! later).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use mpmd_core::ir::{Literal, Name, Type};
use mpmd_core::plan::{BufferInit, LaunchPlan};
use mpmd_core::{Backend, CallArgs, CallOutputs, HostTensor, Mode, RunError, RunOptions};
use thiserror::Error;

use crate::arena::{buffer_words, packed_words};
use crate::cache::{key_hash, unique_suffix};
use crate::control;
use crate::emit::c::parameter_from_word;
use crate::emit::{emit_module, EmittedModule, KernelParam, SMEM_ARENA_DECLARATION};
use crate::host_cache::{default_folder, verify, BinaryCache, CacheError, Verified, DISK_BYTES};
use mpmd_core::lru::Lru;

/// The name reports use for this backend.
const NAME: &str = "cuda-host";

/// Words an uninitialised buffer holds at the start of a `cuda-host` call,
/// so that results read from never-written memory stand out.
pub const UNINITIALISED_WORD: u32 = 0xdead_beef;

/// The flags `cuda-host` compiles every program with: optimised enough to
/// run the corpus quickly, no contraction of `a*b+c` (docs/design.md's numerics).
pub const HOST_CXX_FLAGS: [&str; 5] = ["-std=c++17", "-O1", "-ffp-contract=off", "-pthread", "-w"];

/// Why `cuda-host` cannot compile or run a program.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum HostEmulationError {
    /// The compiler does not run.
    #[error("no host C++ compiler for cuda-host: `{compiler} --version` failed ({reason}); install g++ (`apt-get install g++`) or set MPMD_HOST_CXX")]
    NoCompiler { compiler: String, reason: String },
    /// The compiler runs but cannot build the shim.
    #[error("the host C++ compiler `{compiler}` cannot build the cuda-host shim (C++17 with POSIX threads): {stderr}")]
    CompilerUnfit { compiler: String, stderr: String },
    /// The compiler rejected a program (a bug of the emitter or the shim).
    #[error("cuda-host: `{compiler}` rejected the emitted CUDA C of map `{map}` (source kept at {source_path}):\n{stderr}")]
    Compile {
        compiler: String,
        map: String,
        source_path: String,
        stderr: String,
    },
    /// The folder of compiled programs cannot be used (not private, or
    /// not writable).
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// The host compiler, found once per process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostCompiler {
    /// What runs it (`$MPMD_HOST_CXX`, else `c++`).
    pub program: String,
    /// The first line of `--version`.
    pub version: String,
}

/// The compiler `$MPMD_HOST_CXX` or `c++` names, checked once per process by
/// compiling the shim with an empty kernel.
pub fn host_compiler() -> Result<HostCompiler, HostEmulationError> {
    static FOUND: OnceLock<Result<HostCompiler, HostEmulationError>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let program = std::env::var("MPMD_HOST_CXX")
                .ok()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "c++".to_string());
            let output = Command::new(&program).arg("--version").output();
            let version = match output {
                Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
                Ok(o) => {
                    return Err(HostEmulationError::NoCompiler {
                        compiler: program,
                        reason: format!("exit status {}", o.status),
                    })
                }
                Err(e) => {
                    return Err(HostEmulationError::NoCompiler {
                        compiler: program,
                        reason: e.to_string(),
                    })
                }
            };
            let compiler = HostCompiler { program, version };
            let probe = format!("{SHIM}\nint main() {{ return 0; }}\n");
            match compile_cached(&compiler, &probe, "probe") {
                Ok(_) => Ok(compiler),
                Err(HostEmulationError::Compile {
                    compiler, stderr, ..
                }) => Err(HostEmulationError::CompilerUnfit { compiler, stderr }),
                // The compiler is there; a cache folder that cannot be used
                // fails every run with its reason (a failure, not a
                // backend that is missing).
                Err(HostEmulationError::Cache(_)) => Ok(compiler),
                Err(other) => Err(other),
            }
        })
        .clone()
}

/// Programs this process has built or checked, by key hash: at most
/// [`MEMORY_PROGRAMS`], the least recently used going first. A hit is
/// checked against its digest again before each run.
fn compiled() -> &'static Mutex<Lru<String, Verified>> {
    static COMPILED: OnceLock<Mutex<Lru<String, Verified>>> = OnceLock::new();
    COMPILED.get_or_init(|| Mutex::new(Lru::new(MEMORY_PROGRAMS)))
}

/// Programs the memory side of the cache holds (a path and a digest each).
pub const MEMORY_PROGRAMS: usize = 256;

/// Programs this process has compiled (cache misses), which tests count.
pub fn compilations() -> u64 {
    COMPILATIONS.load(std::sync::atomic::Ordering::Relaxed)
}

static COMPILATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Compiles `program` once per source, compiler and flags into the cache
/// folder ([`crate::host_cache`]); the binary, checked against the digest
/// recorded when it was built.
fn compile_cached(
    compiler: &HostCompiler,
    program: &str,
    map: &str,
) -> Result<PathBuf, HostEmulationError> {
    let key = format!(
        "{} | {}\n{}\n{program}",
        compiler.program,
        compiler.version,
        HOST_CXX_FLAGS.join(" ")
    );
    let hash = key_hash(&key);
    let cache = BinaryCache::open(&default_folder(), DISK_BYTES)?;
    let remembered = compiled()
        .lock()
        .ok()
        .and_then(|mut m| m.get(&hash).cloned());
    if let Some(binary) = remembered {
        if binary.path.parent() == Some(cache.dir()) && verify(&binary, None) {
            return Ok(binary.path);
        }
        if let Ok(mut m) = compiled().lock() {
            m.remove(&hash);
        }
    }
    let verified = match cache.lookup(&key) {
        Some(found) => found,
        None => {
            COMPILATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = cache.dir().to_path_buf();
            let io = |e: std::io::Error| {
                HostEmulationError::Cache(CacheError {
                    dir: dir.display().to_string(),
                    reason: e.to_string(),
                })
            };
            cache.store(
                &key,
                |binary| {
                    let source = dir.join(format!("{hash}.{}.cpp", unique_suffix()));
                    std::fs::write(&source, program).map_err(io)?;
                    let output = Command::new(&compiler.program)
                        .args(HOST_CXX_FLAGS)
                        .arg("-o")
                        .arg(binary)
                        .arg(&source)
                        .output()
                        .map_err(io)?;
                    if !output.status.success() {
                        return Err(HostEmulationError::Compile {
                            compiler: compiler.program.clone(),
                            map: map.to_string(),
                            source_path: source.display().to_string(),
                            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
                        });
                    }
                    let _ = std::fs::remove_file(&source);
                    Ok(())
                },
                io,
            )?
        }
    };
    if let Ok(mut m) = compiled().lock() {
        m.insert(hash, verified.clone());
    }
    Ok(verified.path)
}

/// The shim: CUDA's built-ins on POSIX threads. Only C headers, so a
/// program compiles in a fraction of a second.
const SHIM: &str = r#"
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#define MPMD_HOST_EMULATION 1
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct mpmd_dim3 { unsigned x, y, z; };
static thread_local mpmd_dim3 threadIdx;
static thread_local mpmd_dim3 blockIdx;
static mpmd_dim3 gridDim;
static mpmd_dim3 blockDim;
// A barrier whose threads may leave for good (arrive_and_drop), as exited
// threads leave a CUDA block barrier; `on_complete` runs in the last arrival.
struct mpmd_host_barrier {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  unsigned expected, arrived;
  unsigned long long phase;
};
static void mpmd_barrier_init(mpmd_host_barrier* b, unsigned n) {
  pthread_mutex_init(&b->lock, 0);
  pthread_cond_init(&b->cond, 0);
  b->expected = n;
  b->arrived = 0;
  b->phase = 0;
}
static void mpmd_barrier_complete(mpmd_host_barrier* b) {
  b->arrived = 0;
  b->phase++;
  pthread_cond_broadcast(&b->cond);
}
static void mpmd_barrier_wait(mpmd_host_barrier* b, void (*on_complete)()) {
  pthread_mutex_lock(&b->lock);
  if (++b->arrived >= b->expected) {
    if (on_complete) on_complete();
    mpmd_barrier_complete(b);
  } else {
    unsigned long long phase = b->phase;
    while (phase == b->phase) pthread_cond_wait(&b->cond, &b->lock);
  }
  pthread_mutex_unlock(&b->lock);
}
static void mpmd_barrier_drop(mpmd_host_barrier* b) {
  pthread_mutex_lock(&b->lock);
  b->expected--;
  if (b->arrived > 0 && b->arrived >= b->expected) mpmd_barrier_complete(b);
  pthread_mutex_unlock(&b->lock);
}
static mpmd_host_barrier mpmd_block_barrier;
static unsigned long long mpmd_host_nanoseconds() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
static void __syncthreads() { mpmd_barrier_wait(&mpmd_block_barrier, 0); }
// __syncthreads_count and its votes: the threads where the predicate holds
// count themselves; the last arrival publishes the count and zeroes the
// counter (under the barrier's lock, before any thread leaves), so the next
// vote's additions start from 0. The published count stays until the next
// vote's barrier completes, which every thread reaches after reading it.
static unsigned mpmd_vote_tally = 0;
static unsigned mpmd_vote_result = 0;
static void mpmd_vote_publish() {
  mpmd_vote_result = __atomic_exchange_n(&mpmd_vote_tally, 0u, __ATOMIC_SEQ_CST);
}
static int __syncthreads_count(int p) {
  if (p) __atomic_fetch_add(&mpmd_vote_tally, 1u, __ATOMIC_SEQ_CST);
  mpmd_barrier_wait(&mpmd_block_barrier, mpmd_vote_publish);
  return (int)__atomic_load_n(&mpmd_vote_result, __ATOMIC_SEQ_CST);
}
static int __syncthreads_or(int p) { return __syncthreads_count(p) != 0; }
static int __syncthreads_and(int p) { return __syncthreads_count(!p) == 0; }
// Named barrier 1 of the block's first n threads: one barrier per thread
// count the kernel uses, made by main.
static unsigned mpmd_partial_count = 0;
static unsigned mpmd_partial_threads[8];
static mpmd_host_barrier mpmd_partial_barriers[8];
static void mpmd_partial_barrier(unsigned n) {
  for (unsigned k = 0; k < mpmd_partial_count; k++) {
    if (mpmd_partial_threads[k] == n) { mpmd_barrier_wait(&mpmd_partial_barriers[k], 0); return; }
  }
  abort();
}
// mpmd_bar_count: the first n threads count themselves between partial
// barriers (the first: every thread has read the previous count).
static unsigned mpmd_partial_tally = 0;
static unsigned mpmd_partial_vote_count(unsigned n, bool p) {
  mpmd_partial_barrier(n);
  if (threadIdx.x == 0u) __atomic_store_n(&mpmd_partial_tally, 0u, __ATOMIC_SEQ_CST);
  mpmd_partial_barrier(n);
  if (p) __atomic_fetch_add(&mpmd_partial_tally, 1u, __ATOMIC_SEQ_CST);
  mpmd_partial_barrier(n);
  return __atomic_load_n(&mpmd_partial_tally, __ATOMIC_SEQ_CST);
}
// Warp collectives: the 32 lanes of a warp meet at a barrier of their own
// (one block runs at a time), each publishing its word in a slot.
static unsigned mpmd_warp_slots[1024];
static mpmd_host_barrier mpmd_warp_barriers[32];
static unsigned mpmd_warp_exchange(unsigned v, unsigned source_lane) {
  const unsigned t = threadIdx.x;
  mpmd_warp_slots[t] = v;
  mpmd_barrier_wait(&mpmd_warp_barriers[t >> 5], 0);
  const unsigned r = mpmd_warp_slots[(t & ~31u) | (source_lane & 31u)];
  mpmd_barrier_wait(&mpmd_warp_barriers[t >> 5], 0);
  return r;
}
static unsigned __shfl_sync(unsigned, unsigned v, unsigned k) { return mpmd_warp_exchange(v, k); }
static unsigned __shfl_up_sync(unsigned, unsigned v, unsigned d) {
  const unsigned lane = threadIdx.x & 31u;
  return mpmd_warp_exchange(v, lane >= d ? lane - d : lane);
}
static unsigned __shfl_down_sync(unsigned, unsigned v, unsigned d) {
  const unsigned lane = threadIdx.x & 31u;
  return mpmd_warp_exchange(v, lane + d <= 31u ? lane + d : lane);
}
static unsigned __shfl_xor_sync(unsigned, unsigned v, unsigned m) { return mpmd_warp_exchange(v, (threadIdx.x & 31u) ^ m); }
static unsigned __ballot_sync(unsigned, int p) {
  const unsigned t = threadIdx.x;
  mpmd_warp_slots[t] = p != 0;
  mpmd_barrier_wait(&mpmd_warp_barriers[t >> 5], 0);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32u; l++) bits |= mpmd_warp_slots[(t & ~31u) | l] << l;
  mpmd_barrier_wait(&mpmd_warp_barriers[t >> 5], 0);
  return bits;
}
static int __any_sync(unsigned, int p) { return __ballot_sync(0u, p) != 0u; }
static int __all_sync(unsigned, int p) { return __ballot_sync(0u, p) == 0xffffffffu; }
static void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// A real sleep: co-resident blocks share the host's cores with the block
// they wait for.
static void __nanosleep(unsigned ns) {
  struct timespec ts = {0, (long)ns};
  nanosleep(&ts, 0);
}
template <class T> static T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static float atomicAdd(float* p, float v) {
  unsigned* w = (unsigned*)p;
  unsigned old = __atomic_load_n(w, __ATOMIC_SEQ_CST);
  for (;;) {
    float f; memcpy(&f, &old, 4);
    f += v;
    unsigned next; memcpy(&next, &f, 4);
    if (__atomic_compare_exchange_n(w, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
      memcpy(&f, &old, 4);
      return f;
    }
  }
}
template <class T> static T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
template <class T> static T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <class T> static T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }
template <class T> static T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
// CUDA's float overload (the __atomic builtins take integers).
static float atomicExch(float* p, float v) {
  unsigned bits; memcpy(&bits, &v, 4);
  unsigned old = __atomic_exchange_n((unsigned*)p, bits, __ATOMIC_SEQ_CST);
  float f; memcpy(&f, &old, 4);
  return f;
}
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
// The bit intrinsics, as CUDA defines them: __clz(0) is 32, __ffs(0) is 0.
static int __popc(unsigned x) { return __builtin_popcount(x); }
static int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static int __ffs(int x) { return __builtin_ffs(x); }
static unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (unsigned i = 0; i < 32u; i++) r |= ((x >> i) & 1u) << (31u - i);
  return r;
}
static int __float_as_int(float x) { int r; memcpy(&r, &x, 4); return r; }
static unsigned __float_as_uint(float x) { unsigned r; memcpy(&r, &x, 4); return r; }
static float __int_as_float(int x) { float r; memcpy(&r, &x, 4); return r; }
static float __uint_as_float(unsigned x) { float r; memcpy(&r, &x, 4); return r; }
// The stand-in for PTX mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: every
// lane publishes its registers (4 of A, 2 of B, each two 16-bit elements, the
// even one low; 4 f32 of C), the lanes meet, and each computes its 4 elements
// of D from the whole warp's fragments, placed by PTX's layout (g = lane >> 2,
// q = lane % 4), summing from C over k = 0..15 in order (docs/numerics.md).
static unsigned mpmd_mma_slots[1024][10];
static float mpmd_host_16_to_float(unsigned h, bool bf16) {
  if (bf16) return __uint_as_float(h << 16);
  const unsigned sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));
  if (e == 0u) return (sign ? -1.0f : 1.0f) * ldexpf((float)m, -24);
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}
static void mpmd_host_mma_m16n8k16(bool bf16, const unsigned* ra, const unsigned* rb, const float* c, float* rd) {
  const unsigned t = threadIdx.x, base = t & ~31u;
  for (unsigned r = 0; r < 4u; r++) mpmd_mma_slots[t][r] = ra[r];
  for (unsigned r = 0; r < 2u; r++) mpmd_mma_slots[t][4u + r] = rb[r];
  for (unsigned r = 0; r < 4u; r++) memcpy(&mpmd_mma_slots[t][6u + r], &c[r], 4);
  mpmd_barrier_wait(&mpmd_warp_barriers[t >> 5], 0);
  float A[16][16], B[16][8], C[16][8];
  for (unsigned lane = 0; lane < 32u; lane++) {
    const unsigned* w = mpmd_mma_slots[base + lane];
    const unsigned g = lane >> 2, q = lane % 4u;
    for (unsigned i = 0; i < 8u; i++) {
      const unsigned h = (w[i / 2u] >> (16u * (i % 2u))) & 0xffffu;
      A[g + 8u * ((i / 2u) % 2u)][2u * q + i % 2u + 8u * (i / 4u)] = mpmd_host_16_to_float(h, bf16);
    }
    for (unsigned i = 0; i < 4u; i++) {
      const unsigned h = (w[4u + i / 2u] >> (16u * (i % 2u))) & 0xffffu;
      B[2u * q + i % 2u + 8u * (i / 2u)][g] = mpmd_host_16_to_float(h, bf16);
    }
    for (unsigned i = 0; i < 4u; i++) C[g + 8u * (i / 2u)][2u * q + i % 2u] = __uint_as_float(w[6u + i]);
  }
  mpmd_barrier_wait(&mpmd_warp_barriers[t >> 5], 0);
  const unsigned g = (t & 31u) >> 2, q = t % 4u;
  for (unsigned i = 0; i < 4u; i++) {
    const unsigned row = g + 8u * (i / 2u), col = 2u * q + i % 2u;
    float acc = C[row][col];
    for (unsigned k = 0; k < 16u; k++) acc = acc + A[row][k] * B[k][col];
    rd[i] = acc;
  }
}
// The stand-in for PTX ldmatrix.sync.aligned.m8n8.{x4,x2,x2.trans}.shared.b16:
// every lane publishes the row address it supplies, the lanes meet, and
// lane l takes, for each matrix j, row l / 4 and columns 2 (l % 4) + {0, 1}
// (with .trans: column l / 4 of rows 2 (l % 4) + {0, 1}) from the rows lanes
// 8j..8j+7 named, so a lane's values come from other lanes' addresses as on
// the GPU. A supplied address that is not 16-byte aligned aborts.
static const unsigned char* mpmd_ldmatrix_rows[1024];
static void mpmd_host_ldmatrix(unsigned matrices, bool trans, const void* row, unsigned* r) {
  const unsigned t = threadIdx.x, base = t & ~31u, lane = t & 31u;
  if (lane < 8u * matrices && ((unsigned long long)row & 15ull) != 0ull) {
    fprintf(stderr, "ldmatrix: lane %u supplies a row address that is not 16-byte aligned\n", lane);
    abort();
  }
  mpmd_ldmatrix_rows[t] = (const unsigned char*)row;
  mpmd_barrier_wait(&mpmd_warp_barriers[t >> 5], 0);
  for (unsigned j = 0; j < matrices; j++) {
    unsigned word = 0;
    for (unsigned h = 0; h < 2u; h++) {
      const unsigned matrix_row = trans ? 2u * (lane % 4u) + h : lane / 4u;
      const unsigned matrix_col = trans ? lane / 4u : 2u * (lane % 4u) + h;
      unsigned short e;
      memcpy(&e, mpmd_ldmatrix_rows[base + 8u * j + matrix_row] + 2u * matrix_col, 2);
      word |= (unsigned)e << (16u * h);
    }
    r[j] = word;
  }
  mpmd_barrier_wait(&mpmd_warp_barriers[t >> 5], 0);
}
static int __float2int_rz(float x) { return (int)x; }
static unsigned __float2uint_rz(float x) { return (unsigned)x; }
static float __int2float_rn(int x) { return (float)x; }
static float __uint2float_rn(unsigned x) { return (float)x; }
static float rsqrtf(float x) { return 1.0f / sqrtf(x); }
struct mpmd_any_ptr {
  unsigned* p;
  template <class T> operator T*() const { return (T*)p; }
};
static int mpmd_read(void* p, size_t words) { return fread(p, 4, words, stdin) == words; }
static void mpmd_write(const void* p, size_t words) { fwrite(p, 4, words, stdout); }
"#;

/// The C++ program that runs `module` (emitted from `plan`): reads from
/// stdin the time limit in seconds, the wait timeout, whether to run the
/// blocks co-resident (each `u64`), every buffer's words
/// and every scalar's bits; writes to stdout the control block, the status
/// word and every buffer's words (all little-endian `u32`, the timeouts `u64`).
fn host_program(plan: &LaunchPlan, module: &EmittedModule) -> Result<String, String> {
    // The dynamic smem arena becomes the shim's static array: the arena's
    // name is the last word of its declaration, before `[]`.
    let arena = SMEM_ARENA_DECLARATION
        .trim_end()
        .trim_end_matches("[];")
        .rsplit(' ')
        .next()
        .unwrap_or_default();
    if !module.source.contains(SMEM_ARENA_DECLARATION) {
        return Err("cuda-host found no smem arena line in the emitted CUDA C".into());
    }
    let source = module.source.replacen(
        SMEM_ARENA_DECLARATION,
        &format!("  unsigned char* {arena} = mpmd_host_smem;\n"),
        1,
    );
    let smem = module.dynamic_smem_bytes.max(16);
    let mut program = String::from(SHIM);
    program.push_str(&format!(
        "alignas(16) static unsigned char mpmd_host_smem[{smem}];\n"
    ));
    program.push_str(&source);
    let buffers = plan.buffers.len();
    let mut scalar_slots = 0usize;
    let mut args = Vec::new();
    for param in &module.params {
        args.push(match param {
            KernelParam::Buffer(i) => format!("mpmd_any_ptr{{mpmd_buf[{i}]}}"),
            KernelParam::Scalar(i) => {
                let slot = scalar_slots;
                scalar_slots += 1;
                let word = format!("mpmd_scalar[{slot}]");
                match &plan.operand_at(*i).ty {
                    Type::Scalar(t) => parameter_from_word(*t, &word),
                    Type::Ref(_) => word,
                }
            }
            KernelParam::Control => "mpmd_ctl".to_string(),
            KernelParam::WaitTimeoutNs => "mpmd_timeout_ns".to_string(),
        });
    }
    let partial: Vec<u32> = plan
        .units
        .iter()
        .map(|u| u.threads_per_block)
        .filter(|&n| n < module.block_dim)
        .collect::<std::collections::BTreeSet<u32>>()
        .into_iter()
        .collect();
    if partial.len() > 8 {
        return Err(format!(
            "cuda-host supports 8 thread counts below the block's, the plan has {}",
            partial.len()
        ));
    }
    let lens: Vec<String> = plan
        .buffers
        .iter()
        .map(|b| format!("{}ull", buffer_words(b)))
        .collect();
    let dim = module.block_dim;
    let total = module.total_blocks;
    program.push_str(&format!(
        r#"
static const int mpmd_nbuf = {buffers};
static unsigned* mpmd_buf[{nbuf}];
static const unsigned long long mpmd_len[{nbuf}] = {{{lens}}};
static unsigned mpmd_scalar[{nscalar}];
// The control block and the status word live in the shared mapping with
// the buffers: co-resident blocks are processes that see one memory.
static unsigned* mpmd_ctl;
static unsigned* mpmd_status_word;
static unsigned long long mpmd_timeout_ns;
static unsigned long long mpmd_first_block = 0, mpmd_end_block = {total}ull;
static mpmd_host_barrier mpmd_pool_barrier;
// The last thread to finish a block readies the block barrier for the next.
static void mpmd_next_block() {{ mpmd_block_barrier.expected = {dim}u; mpmd_block_barrier.arrived = 0; }}
static void* mpmd_thread_main(void* arg) {{
  threadIdx = mpmd_dim3{{(unsigned)(size_t)arg, 0u, 0u}};
  for (unsigned long long block = mpmd_first_block; block < mpmd_end_block; block++) {{
    blockIdx = mpmd_dim3{{(unsigned)block, 0u, 0u}};
    {kernel}({args});
    mpmd_barrier_drop(&mpmd_block_barrier);
    mpmd_barrier_wait(&mpmd_pool_barrier, mpmd_next_block);
  }}
  return 0;
}}
// Blocks mpmd_first_block..mpmd_end_block, one after another, on one host
// thread per CUDA thread of the block; 0, or 4 when a thread cannot start.
static int mpmd_run_blocks() {{
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1u << 20);
  static pthread_t threads[{dim}];
  for (unsigned t = 0; t < {dim}u; t++) {{
    if (pthread_create(&threads[t], &attr, mpmd_thread_main, (void*)(size_t)t) != 0) return 4;
  }}
  for (unsigned t = 0; t < {dim}u; t++) pthread_join(threads[t], 0);
  return 0;
}}
// Every block at once, as a co-resident grid runs: one process per block
// (its own __shared__ storage, block and warp barriers), all of them on the
// shared mapping. A block that fails stops the others; its signal or exit
// code is the program's.
static int mpmd_run_co_resident(unsigned seconds) {{
  static pid_t children[{slots}];
  if ({total}ull > {slots}ull) return 5;
  unsigned long long started = 0;
  int failed_signal = 0, failed_code = 0;
  for (; started < {total}ull; started++) {{
    const pid_t pid = fork();
    if (pid == 0) {{
      alarm(seconds);
      mpmd_first_block = started;
      mpmd_end_block = started + 1;
      _exit(mpmd_run_blocks());
    }}
    if (pid < 0) {{ failed_code = 5; break; }}
    children[started] = pid;
  }}
  for (unsigned long long running = started; running > 0; running--) {{
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) break;
    const int failed = WIFSIGNALED(status) ? 1 : (WIFEXITED(status) && WEXITSTATUS(status) != 0) ? 2 : 0;
    if (failed && !failed_signal && !failed_code) {{
      if (failed == 1) failed_signal = WTERMSIG(status); else failed_code = WEXITSTATUS(status);
      for (unsigned long long k = 0; k < started; k++) if (children[k] != pid) kill(children[k], SIGKILL);
    }}
  }}
  if (failed_signal) {{
    signal(failed_signal, SIG_DFL);
    raise(failed_signal);
  }}
  return failed_code;
}}
int main() {{
  unsigned long long limits[3];
  if (!mpmd_read(limits, 6)) return 3;
  alarm((unsigned)limits[0]);
  mpmd_timeout_ns = limits[1];
  const bool co_resident = limits[2] != 0;
  unsigned long long offsets[{nbuf}], bytes = 0;
  for (int k = 0; k < mpmd_nbuf; k++) {{
    offsets[k] = bytes;
    bytes += (mpmd_len[k] * 4 + 63) / 64 * 64;
  }}
  const unsigned long long control_at = bytes;
  bytes += 65 * 4;
  unsigned char* shared = (unsigned char*)mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 3;
  for (int k = 0; k < mpmd_nbuf; k++) {{
    mpmd_buf[k] = (unsigned*)(shared + offsets[k]);
    if (!mpmd_read(mpmd_buf[k], mpmd_len[k])) return 3;
  }}
  mpmd_ctl = (unsigned*)(shared + control_at);
  mpmd_status_word = mpmd_ctl + 64;
  if ({nscalar} > 1 && !mpmd_read(mpmd_scalar, {nscalar} - 1)) return 3;
  unsigned long long status_address = (unsigned long long)mpmd_status_word;
  mpmd_ctl[{status_lo}] = (unsigned)status_address;
  mpmd_ctl[{status_hi}] = (unsigned)(status_address >> 32);
  gridDim = mpmd_dim3{{(unsigned){total}ull, 1u, 1u}};
  blockDim = mpmd_dim3{{{dim}u, 1u, 1u}};
  mpmd_barrier_init(&mpmd_block_barrier, {dim}u);
  mpmd_barrier_init(&mpmd_pool_barrier, {dim}u);
  for (unsigned w = 0; w < 32u; w++) mpmd_barrier_init(&mpmd_warp_barriers[w], 32u);
  const unsigned partial[] = {{{partial_list}0u}};
  mpmd_partial_count = {npartial};
  for (unsigned k = 0; k < mpmd_partial_count; k++) {{
    mpmd_partial_threads[k] = partial[k];
    mpmd_barrier_init(&mpmd_partial_barriers[k], partial[k]);
  }}
  const int failed = co_resident ? mpmd_run_co_resident((unsigned)limits[0]) : mpmd_run_blocks();
  if (failed) return failed;
  mpmd_write(mpmd_ctl, 64);
  mpmd_write(mpmd_status_word, 1);
  for (int k = 0; k < mpmd_nbuf; k++) mpmd_write(mpmd_buf[k], mpmd_len[k]);
  fflush(stdout);
  return 0;
}}
"#,
        nbuf = buffers.max(1),
        slots = module.total_blocks.clamp(1, CO_RESIDENT_BLOCKS),
        lens = if lens.is_empty() { "1ull".to_string() } else { lens.join(", ") },
        nscalar = scalar_slots + 1,
        kernel = module.kernel_name,
        args = args.join(", "),
        status_lo = control::STATUS_LO,
        status_hi = control::STATUS_HI,
        partial_list = partial.iter().map(|n| format!("{n}u, ")).collect::<String>(),
        npartial = partial.len(),
    ));
    Ok(program)
}

/// What one emulated call gives back.
#[derive(Clone, Debug, PartialEq)]
pub struct Emulated {
    /// The error the kernel recorded, as its record says (a wait that timed
    /// out is a timeout; a loop limit names no condition).
    pub recorded: Option<RunError>,
    /// The error as the backends report it: `recorded` completed from the
    /// plan (a wait no program can satisfy is a deadlock; a loop limit
    /// names its condition).
    pub error: Option<RunError>,
    /// Whether the call was aborted (the flag that stops every block).
    pub aborted: bool,
    /// The status word the kernel sets when it records an error.
    pub status: u32,
    /// Every plan buffer's words after the call (at least one word each).
    pub buffers: Vec<Vec<u32>>,
    /// Whether the blocks ran co-resident ([`co_resident`]), else one after
    /// another.
    pub co_resident: bool,
}

/// Most host threads a co-resident run starts: one per CUDA thread of the
/// grid (each with a 1 MiB stack).
pub const CO_RESIDENT_THREADS: u64 = 4096;

/// Most blocks a co-resident run starts (one process each).
pub const CO_RESIDENT_BLOCKS: u64 = 256;

/// Whether `cuda-host` runs `module`'s blocks co-resident, as a GPU runs a
/// cooperative grid: the plan needs it ([`LaunchPlan::needs_co_residency`]:
/// a cycle, or a program that waits on its own blocks) and the grid fits
/// [`CO_RESIDENT_THREADS`] and [`CO_RESIDENT_BLOCKS`]. Otherwise the blocks
/// run one after another in ticket order, which meets every wait on an
/// earlier block. A plan with a cycle whose grid does not fit is refused
/// with the numbers.
pub fn co_resident(plan: &LaunchPlan, module: &EmittedModule) -> Result<bool, RunError> {
    if !plan.needs_co_residency() {
        return Ok(false);
    }
    if let Some(reason) = too_big_to_co_reside(module) {
        if plan.graph.has_cycle {
            return Err(RunError::Refused {
                reason: format!("the map needs all its blocks resident at once (a semaphore cycle), and {reason}"),
            });
        }
        return Ok(false);
    }
    Ok(true)
}

/// Why `module`'s grid cannot run co-resident on `cuda-host`, if it cannot.
fn too_big_to_co_reside(module: &EmittedModule) -> Option<String> {
    let blocks = module.total_blocks;
    let threads = blocks.saturating_mul(u64::from(module.block_dim));
    (threads > CO_RESIDENT_THREADS || blocks > CO_RESIDENT_BLOCKS).then(|| {
        format!(
            "cuda-host runs a co-resident grid on one host thread per CUDA thread: this one needs {threads} threads ({blocks} blocks of {}), its limit is {CO_RESIDENT_THREADS} threads in at most {CO_RESIDENT_BLOCKS} blocks",
            module.block_dim
        )
    })
}

/// Settings of an emulated call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostOptions {
    /// The kernel's wait time limit when blocks run one after another in
    /// ticket order: a wait not met when it is reached is never met, so a
    /// short limit loses nothing.
    pub wait_timeout_ns: u64,
    /// The kernel's wait time limit when the blocks run co-resident: long
    /// enough for a block to wait for others that share the host's cores,
    /// short enough that a wait nothing can meet (a deadlock) is reported
    /// soon.
    pub co_resident_wait_timeout_ns: u64,
    /// The program is killed after this many seconds.
    pub time_limit_s: u32,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            wait_timeout_ns: 100_000_000,
            co_resident_wait_timeout_ns: 3_000_000_000,
            time_limit_s: 120,
        }
    }
}

/// Runs the CUDA C of `plan` once in `mode` on CPU threads (`cuda-host`),
/// each buffer starting from `start`'s words (one entry per plan buffer,
/// [`buffer_words`] packed words each), with the scalars by operand name.
pub fn emulate_words(
    plan: &LaunchPlan,
    mode: Mode,
    start: &[Vec<u32>],
    scalars: &BTreeMap<Name, Literal>,
    options: HostOptions,
) -> Result<Emulated, RunError> {
    let backend_error = |e: String| RunError::Backend(e);
    let compiler = host_compiler().map_err(|e| backend_error(e.to_string()))?;
    let module = emit_module(plan, mode).map_err(|e| RunError::Unsupported {
        reason: e.to_string(),
    })?;
    let program = host_program(plan, &module).map_err(backend_error)?;
    let binary = compile_cached(&compiler, &program, &plan.map.name)
        .map_err(|e| backend_error(e.to_string()))?;
    let co_resident = co_resident(plan, &module)?;
    let wait_timeout_ns = if co_resident {
        options.co_resident_wait_timeout_ns
    } else {
        options.wait_timeout_ns
    };
    let mut stdin = Vec::new();
    stdin.extend_from_slice(&u64::from(options.time_limit_s).to_le_bytes());
    stdin.extend_from_slice(&wait_timeout_ns.to_le_bytes());
    stdin.extend_from_slice(&u64::from(co_resident).to_le_bytes());
    for (index, buffer) in plan.buffers.iter().enumerate() {
        let words = &start[index];
        if words.len() != buffer_words(buffer) {
            return Err(backend_error(format!(
                "cuda-host: buffer {index} starts from {} words, the plan has {}",
                words.len(),
                buffer_words(buffer)
            )));
        }
        for w in words {
            stdin.extend_from_slice(&w.to_le_bytes());
        }
    }
    for param in &module.params {
        if let KernelParam::Scalar(i) = param {
            let operand = plan.operand_at(*i);
            // The emitter makes a scalar parameter of scalar operands only.
            let Type::Scalar(ty) = operand.ty else {
                return Err(RunError::Backend(format!(
                    "internal: kernel parameter for `{}` is not a scalar",
                    operand.name
                )));
            };
            let value = mpmd_core::host::scalar(scalars, &operand.name, ty)?;
            // A 16-bit float's bits in the low half, as the CUDA backend passes it.
            stdin.extend_from_slice(&value.to_bits().to_le_bytes());
        }
    }
    let mut child = Command::new(&binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| backend_error(format!("cuda-host cannot start {}: {e}", binary.display())))?;
    let mut pipe = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let Some(pipe) = pipe.as_mut() {
            let _ = pipe.write_all(&stdin);
        }
    });
    let mut stdout = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_end(&mut stdout);
    }
    let _ = writer.join();
    let output = child
        .wait_with_output()
        .map_err(|e| backend_error(format!("cuda-host: {e}")))?;
    if !output.status.success() {
        use std::os::unix::process::ExitStatusExt;
        let what = match output.status.signal() {
            Some(14) => format!(
                "ran past its time limit of {} s and was stopped; raise it with HostOptions::time_limit_s",
                options.time_limit_s
            ),
            Some(signal) => format!("was killed by signal {signal}"),
            // The codes the shim's main returns.
            None => match output.status.code() {
                Some(3) => "could not read its input or map its memory (exit 3)".to_string(),
                Some(4) => "could not start a thread per CUDA thread (exit 4)".to_string(),
                Some(5) => "could not start a process per co-resident block (exit 5)".to_string(),
                _ => format!("exited with {}", output.status),
            },
        };
        return Err(backend_error(format!(
            "cuda-host: the emulated kernel of map `{}` ({mode:?} mode) {what}{}",
            plan.map.name,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    let words: Vec<u32> = stdout
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let expected = 65 + plan.buffers.iter().map(buffer_words).sum::<usize>();
    if words.len() != expected {
        return Err(backend_error(format!(
            "cuda-host: the emulated kernel wrote {} words, expected {expected}",
            words.len()
        )));
    }
    let control = &words[..64];
    let status = words[64];
    let mut at = 65usize;
    let mut buffers = Vec::with_capacity(plan.buffers.len());
    for buffer in &plan.buffers {
        let n = buffer_words(buffer);
        buffers.push(words[at..at + n].to_vec());
        at += n;
    }
    Ok(Emulated {
        recorded: control::decode(control, &module),
        error: control::decode_for_plan(control, &module, plan),
        aborted: control[control::ABORT] != 0,
        status,
        buffers,
        co_resident,
    })
}

/// The `cuda-host` backend: the CUDA backend's generated code and uploads,
/// run on CPU threads. Device-resident refs live as long as the value.
#[derive(Debug, Default)]
pub struct HostCudaBackend {
    residents: BTreeMap<String, HostTensor>,
    /// Settings of every call.
    pub options: HostOptions,
}

impl HostCudaBackend {
    /// A backend with the default [`HostOptions`] and no residents.
    pub fn new() -> Self {
        HostCudaBackend::default()
    }
}

impl Backend for HostCudaBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn run(
        &mut self,
        plan: &LaunchPlan,
        args: &CallArgs,
        options: &RunOptions,
    ) -> Result<CallOutputs, RunError> {
        // What the CUDA backend uploads.
        let mut inputs = crate::backend::input_words(plan, args)?;
        let start: Vec<Vec<u32>> = plan
            .enumerate_buffers()
            .map(|(index, buffer)| {
                let len = buffer_words(buffer);
                match &buffer.init {
                    BufferInit::Input(_) => {
                        Ok(inputs.remove(&index).unwrap_or_else(|| vec![0; len]))
                    }
                    BufferInit::Resident(name) => match self.residents.get(name) {
                        Some(tensor) => {
                            mpmd_core::host::check_resident(
                                name,
                                &plan.map.name,
                                (tensor.elem(), tensor.len() as u64),
                                (buffer.ty.elem, buffer.len),
                            )?;
                            // Residents hold at least one word, as uploads do.
                            let mut words = tensor.words().to_vec();
                            if words.is_empty() {
                                words.push(0);
                            }
                            Ok(words)
                        }
                        None => Ok(vec![0; len]),
                    },
                    BufferInit::Uninitialized => Ok(vec![UNINITIALISED_WORD; len]),
                    BufferInit::Zeroed => Ok(vec![0; len]),
                }
            })
            .collect::<Result<_, RunError>>()?;
        let out = emulate_words(plan, options.mode, &start, &args.scalars, self.options)?;
        // As the backend does: the status word says whether to read the
        // control block; the two must agree.
        match (out.status, out.error) {
            (0, None) => {}
            (1, Some(error @ (RunError::WaitTimeout { .. } | RunError::Deadlock { .. })))
                if !out.co_resident && !plan.graph.intra_program.is_empty() =>
            {
                // Too big to run co-resident: blocks ran one after another,
                // and a wait on a later block of its own program timed out.
                let module =
                    emit_module(plan, options.mode).map_err(|e| RunError::Unsupported {
                        reason: e.to_string(),
                    })?;
                let why = too_big_to_co_reside(&module).unwrap_or_default();
                return Err(RunError::Refused {
                    reason: format!(
                        "the map needs all its blocks resident at once (a wait on a later block of its own program: {error}), and {why}"
                    ),
                });
            }
            (1, Some(error)) => return Err(error),
            (status, recorded) => {
                return Err(RunError::Backend(format!(
                    "cuda-host: status word {status} but the control block records {recorded:?}"
                )))
            }
        }
        let mut outputs = BTreeMap::new();
        for (buffer, mut words) in plan.buffers.iter().zip(out.buffers) {
            words.truncate(packed_words(buffer.ty.elem, buffer.len));
            let tensor = HostTensor::from_words(buffer.ty.elem, plan.host_shape(buffer), words)
                .map_err(|e| RunError::Backend(format!("cuda-host: {e}")))?;
            if let BufferInit::Resident(name) = &buffer.init {
                self.residents.insert(name.clone(), tensor.clone());
            }
            if let Some(name) = &buffer.output {
                outputs.insert(name.clone(), tensor);
            }
        }
        Ok(CallOutputs { outputs })
    }

    fn resident(&self, name: &str) -> Option<HostTensor> {
        self.residents.get(name).cloned()
    }

    fn set_resident(&mut self, name: &str, tensor: HostTensor) -> Result<(), RunError> {
        self.residents.insert(name.to_string(), tensor);
        Ok(())
    }
}
