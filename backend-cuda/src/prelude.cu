// ---- mpmd prelude: numerics and synchronisation helpers ---------------------
typedef unsigned int u32;
typedef unsigned long long u64;

// Sentinel offset of a checked access that failed its bounds check.
#define MPMD_BAD_OFFSET 0xffffffffffffffffull

// Words of the per-call control block (mirrored by control.rs on the host).
#define MPMD_CTL_TICKET 0
#define MPMD_CTL_ABORT 1
#define MPMD_CTL_CLAIMED 2
#define MPMD_CTL_KIND 3
#define MPMD_CTL_PROGRAM 4
#define MPMD_CTL_BLOCK 5
#define MPMD_CTL_THREAD 6
#define MPMD_CTL_REF 7
#define MPMD_CTL_NCOORDS 8
#define MPMD_CTL_NINDEX 9
#define MPMD_CTL_COORDS 10
#define MPMD_CTL_INDEX 16
// Words 24-25: the device address of the call's status word in host-mapped
// memory (set once per arena; the per-call clear stops at word 24).
#define MPMD_CTL_STATUS_LO 24
#define MPMD_CTL_STATUS_HI 25
#define MPMD_ERR_WAIT_TIMEOUT 1u
#define MPMD_ERR_OUT_OF_BOUNDS 2u
#define MPMD_ERR_SEM_AMOUNT 3u  // a signal or wait amount below 1; word THREAD holds it
#define MPMD_ERR_LOOP_LIMIT 4u  // a `while` reached its maximum (checked mode); word REF
                                // holds the loop's ordinal, INDEX[0] the maximum

// Up to 8 index values (block coordinates or element indices) of one access.
struct mpmd_idx {
  u32 n;
  u32 v[8];
};

// ---- numerics begin (also compiled on the host by tests/numerics_host.rs)
// Signed arithmetic is done in u32: signed overflow is undefined in C++, and
// mpmd integers wrap.
static __device__ __forceinline__ int mpmd_add_i32(int a, int b) { return (int)((u32)a + (u32)b); }
static __device__ __forceinline__ int mpmd_sub_i32(int a, int b) { return (int)((u32)a - (u32)b); }
static __device__ __forceinline__ int mpmd_mul_i32(int a, int b) { return (int)((u32)a * (u32)b); }
static __device__ __forceinline__ int mpmd_neg_i32(int a) { return (int)(0u - (u32)a); }
static __device__ __forceinline__ int mpmd_abs_i32(int a) { return a < 0 ? mpmd_neg_i32(a) : a; }
// Division by zero returns the dividend; i32::MIN / -1 wraps to i32::MIN.
static __device__ __forceinline__ int mpmd_div_i32(int a, int b) {
  if (b == 0) return a;
  if (b == -1) return mpmd_neg_i32(a);
  return a / b;
}
// Remainder by zero is 0; x % -1 is 0 (also for i32::MIN).
static __device__ __forceinline__ int mpmd_rem_i32(int a, int b) {
  if (b == 0 || b == -1) return 0;
  return a % b;
}
static __device__ __forceinline__ u32 mpmd_div_u32(u32 a, u32 b) { return b == 0u ? a : a / b; }
static __device__ __forceinline__ u32 mpmd_rem_u32(u32 a, u32 b) { return b == 0u ? 0u : a % b; }
// Shift amounts are taken modulo 32; >> is arithmetic for i32.
static __device__ __forceinline__ int mpmd_shl_i32(int a, int b) { return (int)((u32)a << ((u32)b & 31u)); }
static __device__ __forceinline__ int mpmd_shr_i32(int a, int b) { return a >> ((u32)b & 31u); }
static __device__ __forceinline__ u32 mpmd_shl_u32(u32 a, u32 b) { return a << (b & 31u); }
static __device__ __forceinline__ u32 mpmd_shr_u32(u32 a, u32 b) { return a >> (b & 31u); }
static __device__ __forceinline__ int mpmd_min_i32(int a, int b) { return a < b ? a : b; }
static __device__ __forceinline__ int mpmd_max_i32(int a, int b) { return a > b ? a : b; }
static __device__ __forceinline__ u32 mpmd_min_u32(u32 a, u32 b) { return a < b ? a : b; }
static __device__ __forceinline__ u32 mpmd_max_u32(u32 a, u32 b) { return a > b ? a : b; }
// Float to int is Rust's `as`: truncate toward zero, saturate, NaN to 0.
// The range checks make saturation explicit rather than relying on cvt.
static __device__ __forceinline__ int mpmd_f32_to_i32(float x) {
  if (x != x) return 0;
  if (x >= 2147483648.0f) return 2147483647;
  if (x <= -2147483648.0f) return (-2147483647 - 1);
  return __float2int_rz(x);
}
static __device__ __forceinline__ u32 mpmd_f32_to_u32(float x) {
  if (!(x > 0.0f)) return 0u;  // NaN, negative, zero
  if (x >= 4294967296.0f) return 4294967295u;
  return __float2uint_rz(x);
}

// ---- 16-bit floats (docs/design.md "Semantics"; core/src/numerics.rs is the rule).
// Values and memory are 16 bits: a struct of one `unsigned short`, so that a
// store is a native 16-bit store (no lost writes beside it) and the C++
// compiler refuses any arithmetic the emitter did not write out. Operations
// widen exactly to f32, compute there and round once (f32's 24 bits are at
// least 2p + 2 for both formats, so the double rounding is innocuous).
// GPUs convert with PTX `cvt` (f16: every architecture; bf16: sm_80 and
// later); the host (cuda-host, tests) and bf16 below sm_80 round on integer
// bits, with the same results.
#if defined(__CUDA_ARCH__) && !defined(MPMD_HOST_EMULATION)
#define MPMD_DEVICE_CODE 1
#endif
struct mpmd_half { unsigned short bits; };
struct mpmd_bfloat16 { unsigned short bits; };
// The value whose bits are the low half of `b` (bitcasts, literals, scalar parameters).
static __device__ __forceinline__ mpmd_half mpmd_half_bits(u32 b) {
  mpmd_half h;
  h.bits = (unsigned short)(b & 0xffffu);
  return h;
}
static __device__ __forceinline__ mpmd_bfloat16 mpmd_bfloat16_bits(u32 b) {
  mpmd_bfloat16 h;
  h.bits = (unsigned short)(b & 0xffffu);
  return h;
}
static __device__ __forceinline__ u32 mpmd_float_bits(float x) {
#ifdef MPMD_DEVICE_CODE
  return __float_as_uint(x);
#else
  u32 r;
  __builtin_memcpy(&r, &x, 4);
  return r;
#endif
}
static __device__ __forceinline__ float mpmd_bits_float(u32 b) {
#ifdef MPMD_DEVICE_CODE
  return __uint_as_float(b);
#else
  float r;
  __builtin_memcpy(&r, &b, 4);
  return r;
#endif
}
static __device__ __forceinline__ u64 mpmd_double_bits(double x) {
#ifdef MPMD_DEVICE_CODE
  return (u64)__double_as_longlong(x);
#else
  u64 r;
  __builtin_memcpy(&r, &x, 8);
  return r;
#endif
}
static __device__ __forceinline__ double mpmd_bits_double(u64 b) {
#ifdef MPMD_DEVICE_CODE
  return __longlong_as_double((long long)b);
#else
  double r;
  __builtin_memcpy(&r, &b, 8);
  return r;
#endif
}
// f16 -> f32, exact.
static __device__ __forceinline__ float mpmd_widen_f16(mpmd_half h) {
#ifdef MPMD_DEVICE_CODE
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
#else
  const u32 sign = ((u32)h.bits & 0x8000u) << 16;
  const u32 exponent = ((u32)h.bits >> 10) & 0x1fu;
  const u32 mantissa = (u32)h.bits & 0x3ffu;
  if (exponent == 0x1fu) return mpmd_bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0u) {
    // Zero or subnormal: mantissa * 2^-24, an f32 normal (or zero), exactly.
    const float magnitude = (float)mantissa * 5.9604644775390625e-8f;
    return mpmd_bits_float(sign | mpmd_float_bits(magnitude));
  }
  return mpmd_bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
#endif
}
// bf16 -> f32, exact: the bits are the high half.
static __device__ __forceinline__ float mpmd_widen_bf16(mpmd_bfloat16 h) {
  return mpmd_bits_float((u32)h.bits << 16);
}
// f32 -> f16: nearest, ties to even, overflow to infinity, NaN stays NaN,
// subnormals kept.
static __device__ __forceinline__ mpmd_half mpmd_round_f16(float x) {
  mpmd_half h;
#ifdef MPMD_DEVICE_CODE
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
#else
  const u32 bits = mpmd_float_bits(x);
  const u32 sign = (bits >> 16) & 0x8000u;
  const u32 magnitude = bits & 0x7fffffffu;
  u32 r;
  if (magnitude > 0x7f800000u) {
    r = 0x7e00u | ((magnitude >> 13) & 0x3ffu);  // quiet NaN
  } else if (magnitude >= 0x477ff000u) {
    r = 0x7c00u;  // 65520 (half an ulp above the largest finite) and up
  } else if (magnitude >= 0x38800000u) {
    // Normal: rebias the exponent, round the 13 dropped bits to even.
    r = ((magnitude + 0xfffu + ((magnitude >> 13) & 1u)) >> 13) - (112u << 10);
  } else if (magnitude < 0x33000000u) {
    r = 0u;  // below 2^-25: zero (2^-25 itself is a tie, handled below)
  } else {
    // Subnormal: the significand in units of 2^-24, rounded to even.
    const u32 significand = (magnitude & 0x7fffffu) | 0x800000u;
    const u32 shift = 126u - (magnitude >> 23);
    const u32 kept = significand >> shift;
    const u32 rest = significand & ((1u << shift) - 1u);
    const u32 half = 1u << (shift - 1u);
    r = kept + ((rest > half || (rest == half && (kept & 1u) != 0u)) ? 1u : 0u);
  }
  h.bits = (unsigned short)(sign | r);
#endif
  return h;
}
// f32 -> bf16: nearest, ties to even, overflow to infinity, NaN stays NaN.
static __device__ __forceinline__ mpmd_bfloat16 mpmd_round_bf16(float x) {
  mpmd_bfloat16 h;
#if defined(MPMD_DEVICE_CODE) && __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
#else
  const u32 bits = mpmd_float_bits(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    h.bits = (unsigned short)((bits >> 16) | 0x0040u);  // quiet NaN, never infinity
  } else {
    h.bits = (unsigned short)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
#endif
  return h;
}
static __device__ __forceinline__ mpmd_half mpmd_neg_f16(mpmd_half h) { return mpmd_half_bits(h.bits ^ 0x8000u); }
static __device__ __forceinline__ mpmd_bfloat16 mpmd_neg_bf16(mpmd_bfloat16 h) { return mpmd_bfloat16_bits(h.bits ^ 0x8000u); }
static __device__ __forceinline__ mpmd_half mpmd_abs_f16(mpmd_half h) { return mpmd_half_bits(h.bits & 0x7fffu); }
static __device__ __forceinline__ mpmd_bfloat16 mpmd_abs_bf16(mpmd_bfloat16 h) { return mpmd_bfloat16_bits(h.bits & 0x7fffu); }
// min and max with one NaN operand return the other (docs/design.md), whatever
// kind of NaN it is (the host's fminf returns NaN for a signalling one).
static __device__ __forceinline__ float mpmd_min_f32(float x, float y) {
  return x != x ? y : (y != y ? x : fminf(x, y));
}
static __device__ __forceinline__ float mpmd_max_f32(float x, float y) {
  return x != x ? y : (y != y ? x : fmaxf(x, y));
}
static __device__ __forceinline__ mpmd_half mpmd_min_f16(mpmd_half a, mpmd_half b) {
  const float x = mpmd_widen_f16(a), y = mpmd_widen_f16(b);
  return x != x ? b : (y != y ? a : mpmd_round_f16(mpmd_min_f32(x, y)));
}
static __device__ __forceinline__ mpmd_half mpmd_max_f16(mpmd_half a, mpmd_half b) {
  const float x = mpmd_widen_f16(a), y = mpmd_widen_f16(b);
  return x != x ? b : (y != y ? a : mpmd_round_f16(mpmd_max_f32(x, y)));
}
static __device__ __forceinline__ mpmd_bfloat16 mpmd_min_bf16(mpmd_bfloat16 a, mpmd_bfloat16 b) {
  const float x = mpmd_widen_bf16(a), y = mpmd_widen_bf16(b);
  return x != x ? b : (y != y ? a : mpmd_round_bf16(mpmd_min_f32(x, y)));
}
static __device__ __forceinline__ mpmd_bfloat16 mpmd_max_bf16(mpmd_bfloat16 a, mpmd_bfloat16 b) {
  const float x = mpmd_widen_bf16(a), y = mpmd_widen_bf16(b);
  return x != x ? b : (y != y ? a : mpmd_round_bf16(mpmd_max_f32(x, y)));
}
// An integer (magnitude and sign) as the f32 rounded to odd: exact below
// 2^24, otherwise truncated with the dropped bits' OR kept in the last bit,
// so that rounding it to 16 bits is the integer rounded once.
static __device__ __forceinline__ float mpmd_integer_to_f32_odd(u32 magnitude, bool negative) {
  u32 shift = 0u;
  while ((magnitude >> shift) >= 0x1000000u) shift++;
  u32 kept = magnitude >> shift;
  if ((kept << shift) != magnitude) kept |= 1u;
  // kept < 2^24 and a power of two: both conversions and the product are exact.
  const float f = (float)kept * (float)(1u << shift);
  return negative ? -f : f;
}
static __device__ __forceinline__ float mpmd_i32_to_f32_odd(int v) {
  return mpmd_integer_to_f32_odd(v < 0 ? 0u - (u32)v : (u32)v, v < 0);
}
static __device__ __forceinline__ float mpmd_u32_to_f32_odd(u32 v) { return mpmd_integer_to_f32_odd(v, false); }
// fma on f16, rounded once (numerics::fma16): the product of two f16 is
// exact in f32, TwoSum gives the sum's exact error, and the sum rounded to
// odd at 24 bits (at least p + 2) rounds correctly to f16. Contraction or
// flushing cannot change it: the product is exact and no f32 subnormal arises.
static __device__ __forceinline__ mpmd_half mpmd_fma_f16(mpmd_half a, mpmd_half b, mpmd_half c) {
  const float x = mpmd_widen_f16(a), y = mpmd_widen_f16(b), z = mpmd_widen_f16(c);
  const float product = x * y;
  float sum = product + z;
  if ((mpmd_float_bits(sum) & 0x7f800000u) != 0x7f800000u) {  // finite
    const float bv = sum - product;
    const float av = sum - bv;
    const float error = (product - av) + (z - bv);
    const u32 bits = mpmd_float_bits(sum);
    if (error != 0.0f && (bits & 1u) == 0u) {
      sum = mpmd_bits_float((error > 0.0f) == (sum > 0.0f) ? bits + 1u : bits - 1u);
    }
  }
  return mpmd_round_f16(sum);
}
// A double rounded to an f32 with round-to-odd (numerics::f64_to_f32_round_to_odd).
static __device__ __forceinline__ float mpmd_f64_to_f32_odd(double v) {
  const float nearest = (float)v;
  if (v != v || (double)nearest == v) return nearest;
  const u32 bits = mpmd_float_bits(nearest);
  if ((bits & 0x7fffffffu) == 0x7f800000u) {
    // Past f32's range: the largest finite f32 (odd) still rounds to infinity.
    return mpmd_bits_float((bits & 0x80000000u) | 0x7f7fffffu);
  }
  if ((bits & 1u) != 0u) return nearest;
  const double magnitude = nearest < 0.0f ? -(double)nearest : (double)nearest;
  const bool away = magnitude < (v < 0.0 ? -v : v);
  return mpmd_bits_float(away ? bits + 1u : bits - 1u);
}
// fma on bf16, rounded once (numerics::fma16): bf16 has f32's exponent
// range, so the product is exact only in f64; the sum is rounded to odd at
// 53 bits (TwoSum), then at 24, then to nearest bf16.
static __device__ __forceinline__ mpmd_bfloat16 mpmd_fma_bf16(mpmd_bfloat16 a, mpmd_bfloat16 b,
                                                              mpmd_bfloat16 c) {
  const double x = (double)mpmd_widen_bf16(a), y = (double)mpmd_widen_bf16(b),
               z = (double)mpmd_widen_bf16(c);
  const double product = x * y;
  double sum = product + z;
  if ((mpmd_double_bits(sum) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull) {  // finite
    const double bv = sum - product;
    const double av = sum - bv;
    const double error = (product - av) + (z - bv);
    const u64 bits = mpmd_double_bits(sum);
    if (error != 0.0 && (bits & 1ull) == 0ull) {
      sum = mpmd_bits_double((error > 0.0) == (sum > 0.0) ? bits + 1ull : bits - 1ull);
    }
  }
  return mpmd_round_bf16(mpmd_f64_to_f32_odd(sum));
}
// ---- numerics end

// Checked mode evaluates both operands of `select` (docs/design.md), so that an
// out-of-bounds load in either is reported; `&&` and `||` stay C's lazy forms.
template <typename T>
static __device__ __forceinline__ T mpmd_select(bool c, T a, T b) { return c ? a : b; }

template <typename T>
static __device__ __forceinline__ T mpmd_load(const T* p, u64 offset) {
  return offset == MPMD_BAD_OFFSET ? T() : p[offset];
}
template <typename T>
static __device__ __forceinline__ T mpmd_atomic_load(T* p) { return *(volatile T*)p; }
template <typename T>
static __device__ __forceinline__ void mpmd_atomic_store(T* p, T v) { *(volatile T*)p = v; }
// f32 atomic min and max, which CUDA lacks: a compare-exchange loop on the
// bits with the language's min/max (one NaN operand gives the other), so
// every backend stores the same value. A value that would not change is not
// written: that read is the read-modify-write's (it stores what is there).
static __device__ __forceinline__ float mpmd_atomic_min_f32(float* p, float v) {
  u32* word = (u32*)p;
  u32 old = mpmd_atomic_load(word);
  for (;;) {
    const u32 next = __float_as_uint(mpmd_min_f32(__uint_as_float(old), v));
    if (next == old) return __uint_as_float(old);
    const u32 seen = atomicCAS(word, old, next);
    if (seen == old) return __uint_as_float(old);
    old = seen;
  }
}
static __device__ __forceinline__ float mpmd_atomic_max_f32(float* p, float v) {
  u32* word = (u32*)p;
  u32 old = mpmd_atomic_load(word);
  for (;;) {
    const u32 next = __float_as_uint(mpmd_max_f32(__uint_as_float(old), v));
    if (next == old) return __uint_as_float(old);
    const u32 seen = atomicCAS(word, old, next);
    if (seen == old) return __uint_as_float(old);
    old = seen;
  }
}

// A barrier of the block's first `n` threads (a multiple of the warp size):
// a program with fewer threads than the block, inside a resident walk, where
// the block's other threads have gone on to the next logical block.
static __device__ __forceinline__ void mpmd_bar_sync(u32 n) {
#ifdef MPMD_HOST_EMULATION
  mpmd_partial_barrier(n);
#else
  asm volatile("bar.sync 1, %0;" ::"r"(n) : "memory");
#endif
}

// `__syncthreads_count` of the block's first `n` threads, at the same named
// barrier as mpmd_bar_sync: how many of them pass a true `p`.
static __device__ __forceinline__ u32 mpmd_bar_count(u32 n, bool p) {
#ifdef MPMD_HOST_EMULATION
  return mpmd_partial_vote_count(n, p);
#else
  u32 count;
  asm volatile(
      "{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\tbar.red.popc.u32 %0, 1, %1, q;\n\t}"
      : "=r"(count)
      : "r"(n), "r"((u32)p)
      : "memory");
  return count;
#endif
}

static __device__ __forceinline__ u64 mpmd_globaltimer() {
#ifdef MPMD_HOST_EMULATION
  return mpmd_host_nanoseconds();  // tests/host_emulation.rs runs kernels on CPU threads
#else
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

// Records the first error of the call and raises the abort flag, which every
// waiting block polls. `detail` goes to word THREAD: the thread, or the
// amount of MPMD_ERR_SEM_AMOUNT.
static __device__ __noinline__ void mpmd_report(u32* ctl, u32 kind, u32 program, u32 block, u32 ref,
                                                 mpmd_idx coords, mpmd_idx index, u32 detail) {
  if (atomicCAS(&ctl[MPMD_CTL_CLAIMED], 0u, 1u) == 0u) {
    ctl[MPMD_CTL_KIND] = kind;
    ctl[MPMD_CTL_PROGRAM] = program;
    ctl[MPMD_CTL_BLOCK] = block;
    ctl[MPMD_CTL_THREAD] = detail;
    ctl[MPMD_CTL_REF] = ref;
    ctl[MPMD_CTL_NCOORDS] = coords.n;
    ctl[MPMD_CTL_NINDEX] = index.n;
    for (u32 k = 0; k < 6u && k < coords.n; k++) ctl[MPMD_CTL_COORDS + k] = coords.v[k];
    for (u32 k = 0; k < 8u && k < index.n; k++) ctl[MPMD_CTL_INDEX + k] = index.v[k];
  }
  __threadfence();
  atomicExch(&ctl[MPMD_CTL_ABORT], 1u);
  // Tell the host, which reads the control block back only when this word
  // is set (it lives in host memory, so an error-free call copies nothing).
  const u64 status = (u64)ctl[MPMD_CTL_STATUS_LO] | ((u64)ctl[MPMD_CTL_STATUS_HI] << 32);
  if (status != 0u) {
    *(volatile u32*)status = 1u;
    __threadfence_system();
  }
}

// Checked mode: a `while` whose condition still holds after `max` trips.
static __device__ __noinline__ void mpmd_loop_limit(u32* ctl, u32 program, u32 block, u32 loop,
                                                     u32 max) {
  mpmd_idx none;
  none.n = 0u;
  mpmd_idx limit;
  limit.n = 1u;
  limit.v[0] = max;
  mpmd_report(ctl, MPMD_ERR_LOOP_LIMIT, program, block, loop, none, limit, threadIdx.x);
}

// Checked mode: the source thread of a `block_broadcast` at or past the
// block's `threads`, reported as an index past them would be.
static __device__ __noinline__ void mpmd_broadcast_source(u32* ctl, u32 program, u32 block, u32 ref,
                                                          u32 source, u32 threads) {
  mpmd_idx none;
  none.n = 0u;
  mpmd_idx index;
  index.n = 1u;
  index.v[0] = source;
  mpmd_report(ctl, MPMD_ERR_OUT_OF_BOUNDS, program, block, ref, none, index, threadIdx.x);
}

// Checked mode: the element offset of an access, or MPMD_BAD_OFFSET after
// reporting an out-of-bounds coordinate or index. Not inlined: at every
// access of an mma-heavy kernel NVRTC took 20x longer (backend-cuda/README.md).
static __device__ __noinline__ u64 mpmd_checked_offset(u32* ctl, u32 program, u32 block, u32 ref,
                                                          mpmd_idx coords, mpmd_idx coord_sizes,
                                                          mpmd_idx index, mpmd_idx dims,
                                                          u64 own_instance, u64 instance_len) {
  bool ok = true;
  u64 instance = own_instance;
  if (coords.n > 0u) {
    instance = 0;
    for (u32 k = 0; k < coords.n; k++) {
      ok = ok && coords.v[k] < coord_sizes.v[k];
      instance = instance * coord_sizes.v[k] + coords.v[k];
    }
  }
  u64 flat = 0;
  for (u32 k = 0; k < index.n; k++) {
    ok = ok && index.v[k] < dims.v[k];
    flat = flat * dims.v[k] + index.v[k];
  }
  if (!ok) {
    mpmd_report(ctl, MPMD_ERR_OUT_OF_BOUNDS, program, block, ref, coords, index, threadIdx.x);
    return MPMD_BAD_OFFSET;
  }
  return instance * instance_len + flat;
}

// Semaphore primitives with their memory order at device scope: PTX
// release/acquire atomics on the GPU (no separate fence), sequentially
// consistent atomics under host emulation.
#ifdef MPMD_HOST_EMULATION
static int mpmd_sem_add_acquire(int* s, int n) { return atomicAdd(s, n); }
static void mpmd_sem_add_release(int* s, int n) { atomicAdd(s, n); }
static void mpmd_sem_add_relaxed(int* s, int n) { atomicAdd(s, n); }
static int mpmd_sem_cas_acquire(int* s, int expected, int desired) { return atomicCAS(s, expected, desired); }
static int mpmd_sem_load_acquire(const int* s) { return *(volatile const int*)s; }
static int mpmd_sem_load_relaxed(const int* s) { return *(volatile const int*)s; }
#else
static __device__ __forceinline__ int mpmd_sem_add_acquire(int* s, int n) {
  int old;
  asm volatile("atom.acquire.gpu.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(s), "r"(n) : "memory");
  return old;
}
static __device__ __forceinline__ void mpmd_sem_add_release(int* s, int n) {
  asm volatile("red.release.gpu.add.s32 [%0], %1;" ::"l"(s), "r"(n) : "memory");
}
static __device__ __forceinline__ void mpmd_sem_add_relaxed(int* s, int n) {
  asm volatile("red.relaxed.gpu.add.s32 [%0], %1;" ::"l"(s), "r"(n) : "memory");
}
static __device__ __forceinline__ int mpmd_sem_cas_acquire(int* s, int expected, int desired) {
  int old;
  asm volatile("atom.acquire.gpu.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old)
               : "l"(s), "r"(expected), "r"(desired)
               : "memory");
  return old;
}
static __device__ __forceinline__ int mpmd_sem_load_acquire(const int* s) {
  int v;
  asm volatile("ld.acquire.gpu.s32 %0, [%1];" : "=r"(v) : "l"(s) : "memory");
  return v;
}
static __device__ __forceinline__ int mpmd_sem_load_relaxed(const int* s) {
  int v;
  asm volatile("ld.relaxed.gpu.s32 %0, [%1];" : "=r"(v) : "l"(s) : "memory");
  return v;
}
#endif

// signal: called by thread 0 after a block barrier. A release at device
// scope, cumulative over the block's writes that the barrier ordered before it.
// An amount below 1 (a run-time value; validation refuses literal ones) is
// an error, recorded like a wait timeout, and adds nothing.
static __device__ __forceinline__ void mpmd_sem_signal(int* s, int n, u32* ctl, u32 program,
                                                       u32 block, u32 ref, mpmd_idx coords,
                                                       mpmd_idx index) {
  if (n < 1) {
    mpmd_report(ctl, MPMD_ERR_SEM_AMOUNT, program, block, ref, coords, index, (u32)n);
    return;
  }
  mpmd_sem_add_release(s, n);
}

// How a wait takes its amount.
#define MPMD_WAIT_NODEC 0u     // wait_nodec: only look
#define MPMD_WAIT_EXACT 1u     // compare-and-swap: the count never dips below zero
#define MPMD_WAIT_OPTIMISTIC 2u  // subtract first, give back when short: one round trip
                                  // when the count is there; the dip is visible to no one
                                  // (the map never `read`s this semaphore)

// wait / wait_nodec: called by thread 0 only, acquire at device scope.
// Returns false when the call is aborting: this wait timed out or its amount
// is below 1 (both reported here), or another block reported an error.
static __device__ __noinline__ bool mpmd_sem_wait(int* s, int n, u32 how, u64 timeout_ns,
                                                   u32* ctl, u32 program, u32 block, u32 ref,
                                                   mpmd_idx coords, mpmd_idx index) {
  if (n < 1) {
    mpmd_report(ctl, MPMD_ERR_SEM_AMOUNT, program, block, ref, coords, index, (u32)n);
    return false;
  }
  const u64 start = mpmd_globaltimer();
  u32 backoff = 32u;
  for (;;) {
    if (how == MPMD_WAIT_OPTIMISTIC) {
      if (mpmd_sem_add_acquire(s, mpmd_sub_i32(0, n)) >= n) return true;
      mpmd_sem_add_relaxed(s, n);
    } else {
      const int current = mpmd_sem_load_acquire(s);
      if (current >= n) {
        if (how == MPMD_WAIT_NODEC) return true;
        if (mpmd_sem_cas_acquire(s, current, mpmd_sub_i32(current, n)) == current) return true;
        continue;
      }
    }
    // Short: poll until the count looks sufficient, then try again.
    while (mpmd_sem_load_relaxed(s) < n) {
      if (*(volatile u32*)&ctl[MPMD_CTL_ABORT] != 0u) return false;
      if (mpmd_globaltimer() - start > timeout_ns) {
        mpmd_report(ctl, MPMD_ERR_WAIT_TIMEOUT, program, block, ref, coords, index, threadIdx.x);
        return false;
      }
      __nanosleep(backoff);
      if (backoff < 1024u) backoff *= 2u;
    }
  }
}

// read: thread 0's view of the counter.
static __device__ __forceinline__ int mpmd_sem_read(const int* s) { return mpmd_sem_load_acquire(s); }

// ---- warp collectives -------------------------------------------------------
// A logical warp is 32 consecutive threads, a CUDA warp: every lane takes
// part (validation: whole warps, warp-uniform control), so masks are full.
// Values travel as 32-bit words; the 5 low bits of a lane argument count.
#define MPMD_FULL_WARP 0xffffffffu
static __device__ __forceinline__ u32 mpmd_shfl_idx(u32 v, u32 lane) { return __shfl_sync(MPMD_FULL_WARP, v, lane & 31u); }
static __device__ __forceinline__ u32 mpmd_shfl_up(u32 v, u32 delta) { return __shfl_up_sync(MPMD_FULL_WARP, v, delta & 31u); }
static __device__ __forceinline__ u32 mpmd_shfl_down(u32 v, u32 delta) { return __shfl_down_sync(MPMD_FULL_WARP, v, delta & 31u); }
static __device__ __forceinline__ u32 mpmd_shfl_xor(u32 v, u32 mask) { return __shfl_xor_sync(MPMD_FULL_WARP, v, mask & 31u); }
static __device__ __forceinline__ u32 mpmd_ballot(bool p) { return __ballot_sync(MPMD_FULL_WARP, p); }
static __device__ __forceinline__ bool mpmd_vote_any(bool p) { return __any_sync(MPMD_FULL_WARP, p) != 0; }
static __device__ __forceinline__ bool mpmd_vote_all(bool p) { return __all_sync(MPMD_FULL_WARP, p) != 0; }
// Reductions: the butterfly (partners 16, 8, 4, 2, 1 lanes apart), which is
// the order docs/numerics.md fixes for f32; sm_80 and later reduce integers
// in one instruction (the same result: integer sums, min and max do not
// depend on the order).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
static __device__ __forceinline__ u32 mpmd_reduce_add_u32(u32 v) { return __reduce_add_sync(MPMD_FULL_WARP, v); }
static __device__ __forceinline__ u32 mpmd_reduce_min_u32(u32 v) { return __reduce_min_sync(MPMD_FULL_WARP, v); }
static __device__ __forceinline__ u32 mpmd_reduce_max_u32(u32 v) { return __reduce_max_sync(MPMD_FULL_WARP, v); }
static __device__ __forceinline__ int mpmd_reduce_min_i32(int v) { return __reduce_min_sync(MPMD_FULL_WARP, v); }
static __device__ __forceinline__ int mpmd_reduce_max_i32(int v) { return __reduce_max_sync(MPMD_FULL_WARP, v); }
#else
static __device__ __forceinline__ u32 mpmd_reduce_add_u32(u32 v) {
  for (u32 h = 16u; h > 0u; h >>= 1) v += mpmd_shfl_xor(v, h);
  return v;
}
static __device__ __forceinline__ u32 mpmd_reduce_min_u32(u32 v) {
  for (u32 h = 16u; h > 0u; h >>= 1) v = mpmd_min_u32(v, mpmd_shfl_xor(v, h));
  return v;
}
static __device__ __forceinline__ u32 mpmd_reduce_max_u32(u32 v) {
  for (u32 h = 16u; h > 0u; h >>= 1) v = mpmd_max_u32(v, mpmd_shfl_xor(v, h));
  return v;
}
static __device__ __forceinline__ int mpmd_reduce_min_i32(int v) {
  for (u32 h = 16u; h > 0u; h >>= 1) v = mpmd_min_i32(v, (int)mpmd_shfl_xor((u32)v, h));
  return v;
}
static __device__ __forceinline__ int mpmd_reduce_max_i32(int v) {
  for (u32 h = 16u; h > 0u; h >>= 1) v = mpmd_max_i32(v, (int)mpmd_shfl_xor((u32)v, h));
  return v;
}
#endif
static __device__ __forceinline__ int mpmd_reduce_add_i32(int v) { return (int)mpmd_reduce_add_u32((u32)v); }
static __device__ __forceinline__ float mpmd_reduce_add_f32(float v) {
  for (u32 h = 16u; h > 0u; h >>= 1) v = v + __uint_as_float(mpmd_shfl_xor(__float_as_uint(v), h));
  return v;
}
static __device__ __forceinline__ float mpmd_reduce_min_f32(float v) {
  for (u32 h = 16u; h > 0u; h >>= 1) v = mpmd_min_f32(v, __uint_as_float(mpmd_shfl_xor(__float_as_uint(v), h)));
  return v;
}
static __device__ __forceinline__ float mpmd_reduce_max_f32(float v) {
  for (u32 h = 16u; h > 0u; h >>= 1) v = mpmd_max_f32(v, __uint_as_float(mpmd_shfl_xor(__float_as_uint(v), h)));
  return v;
}
// ---- mma ---------------------------------------------------------------------
// mma_m16n8k16(d, a, b, c): PTX mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}
// on the fragments of docs/text-format.md, a[2j] and a[2j+1] packed in one
// .b32 register (a[2j] in the low half), b likewise. sm_80 and later only:
// the emitter puts an #error below sm_80 at each use. cuda-host runs the
// shim's stand-in for the instruction (mpmd_host_mma_m16n8k16), which
// gathers the warp's registers and sums in docs/numerics.md's order.
static __device__ __forceinline__ u32 mpmd_pack_halves(unsigned short lo, unsigned short hi) {
  return (u32)lo | ((u32)hi << 16);
}
#define MPMD_MMA_M16N8K16(NAME, T, PTX_TYPE, IS_BF16)                                              \
  static __device__ __forceinline__ void NAME(float* d, const T* a, const T* b, const float* c) { \
    const u32 ra[4] = {mpmd_pack_halves(a[0].bits, a[1].bits), mpmd_pack_halves(a[2].bits, a[3].bits), \
                       mpmd_pack_halves(a[4].bits, a[5].bits), mpmd_pack_halves(a[6].bits, a[7].bits)}; \
    const u32 rb[2] = {mpmd_pack_halves(b[0].bits, b[1].bits), mpmd_pack_halves(b[2].bits, b[3].bits)}; \
    float rd[4];                                                                                    \
    MPMD_MMA_INSTRUCTION(PTX_TYPE, IS_BF16)                                                         \
    d[0] = rd[0];                                                                                   \
    d[1] = rd[1];                                                                                   \
    d[2] = rd[2];                                                                                   \
    d[3] = rd[3];                                                                                   \
  }
#if defined(MPMD_HOST_EMULATION)
#define MPMD_MMA_INSTRUCTION(PTX_TYPE, IS_BF16) mpmd_host_mma_m16n8k16(IS_BF16, ra, rb, c, rd);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define MPMD_MMA_INSTRUCTION(PTX_TYPE, IS_BF16)                                                   \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX_TYPE "." PTX_TYPE ".f32 "               \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"                \
               : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])                                 \
               : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]),             \
                 "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
// Never compiled into a kernel: each use carries an #error below sm_80.
#define MPMD_MMA_INSTRUCTION(PTX_TYPE, IS_BF16) rd[0] = rd[1] = rd[2] = rd[3] = __int_as_float(0x7fc00000);
#endif
MPMD_MMA_M16N8K16(mpmd_mma_m16n8k16_f16, mpmd_half, "f16", false)
MPMD_MMA_M16N8K16(mpmd_mma_m16n8k16_bf16, mpmd_bfloat16, "bf16", true)
// ---- ldmatrix ------------------------------------------------------------------
// mma_load_a / mma_load_b / mma_load_b_kmajor from smem rows of 16 bytes: PTX
// ldmatrix.sync.aligned.m8n8.{x4,x2.trans,x2}.shared.b16 (sm_75 and later).
// Lane 8j + r supplies the address of row r of 8x8 matrix j (16-byte
// aligned); register j of lane l receives row l / 4, columns 2 (l % 4) and
// 2 (l % 4) + 1 of matrix j (of its transpose with .trans), the lower
// column in the low half. x2 reads the addresses of lanes 0..15 only.
// cuda-host runs the shim's stand-in (mpmd_host_ldmatrix), which exchanges
// the lanes' addresses the same way.
#if defined(MPMD_HOST_EMULATION) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750)
#define MPMD_HAS_LDMATRIX 1
#else
#define MPMD_HAS_LDMATRIX 0
#endif
static __device__ __forceinline__ void mpmd_ldmatrix_x4(u32* r, const void* row) {
#if defined(MPMD_HOST_EMULATION)
  mpmd_host_ldmatrix(4u, false, row, r);
#elif MPMD_HAS_LDMATRIX
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"((u32)__cvta_generic_to_shared(row))
               : "memory");
#else
  // Never called: the emitter's test reads MPMD_HAS_LDMATRIX.
  r[0] = r[1] = r[2] = r[3] = 0u;
#endif
}
static __device__ __forceinline__ void mpmd_ldmatrix_x2(u32* r, const void* row) {
#if defined(MPMD_HOST_EMULATION)
  mpmd_host_ldmatrix(2u, false, row, r);
#elif MPMD_HAS_LDMATRIX
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"((u32)__cvta_generic_to_shared(row))
               : "memory");
#else
  r[0] = r[1] = 0u;
#endif
}
static __device__ __forceinline__ void mpmd_ldmatrix_x2_trans(u32* r, const void* row) {
#if defined(MPMD_HOST_EMULATION)
  mpmd_host_ldmatrix(2u, true, row, r);
#elif MPMD_HAS_LDMATRIX
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"((u32)__cvta_generic_to_shared(row))
               : "memory");
#else
  r[0] = r[1] = 0u;
#endif
}
// ---- end of prelude ---------------------------------------------------------
