// The WGSL helper functions of generated modules, one section each.
//
// A section runs from its marker line (`// ==== section <name>`) to the next
// one; this header is not part of any. A module holds the sections of the
// helpers it calls, with what they call (`Helper` and `Helper::needs` in
// helpers.rs), in `Helper` order, each followed by one blank line.
//
// `{name}` is filled in by the emitter (`Helper::fill`): the error kinds and
// `MAX_RECORDED_VALUES` of emit/mod.rs everywhere, and each section's own
// values. A placeholder alone on its line stands for zero or more lines at
// its indentation (an empty value removes the line); any other stands for
// text within its line. helpers.rs's tests render every section with its
// dependencies and have naga validate it.

// ==== section report
// Records the first error of the call; the host turns it into a RunError.
fn mpmd_report(kind: u32, site: u32, count: u32, values: array<u32, {MAX_RECORDED_VALUES}>) {
  {idle_report}
  if (atomicAdd(&mpmd_status[0], 1u) != 0u) { return; }
  atomicStore(&mpmd_status[1], kind);
  atomicStore(&mpmd_status[2], mpmd_unit);
  atomicStore(&mpmd_status[3], mpmd_block_id);
  atomicStore(&mpmd_status[4], mpmd_thread_id);
  atomicStore(&mpmd_status[5], site);
  atomicStore(&mpmd_status[6], count);
  atomicStore(&mpmd_status[7], values[0]);
  atomicStore(&mpmd_status[8], values[1]);
  atomicStore(&mpmd_status[9], values[2]);
  atomicStore(&mpmd_status[10], values[3]);
  atomicStore(&mpmd_status[11], values[4]);
  atomicStore(&mpmd_status[12], values[5]);
  atomicStore(&mpmd_status[13], values[6]);
  atomicStore(&mpmd_status[14], values[7]);
}

// ==== section loop_cap
// The adapter silently ends all loops of an invocation after about 65,535 loop
// header visits in total, which would give wrong answers; every loop the backend
// emits counts here (entry and iterations) and stops first, reporting the error.
fn mpmd_loop_pay(visits: u32) -> bool {
  if (mpmd_loop_count > {cap}u) {
    return true;
  }
  if (visits > {cap}u - mpmd_loop_count) {
    // The record says what was used and what the next loop needed.
    mpmd_report({ERROR_LOOP_CAP}u, 0u, 2u, array<u32, {MAX_RECORDED_VALUES}>(mpmd_loop_count, visits, 0u, 0u, 0u, 0u, 0u, 0u));
    mpmd_loop_count = {over}u;
    return true;
  }
  mpmd_loop_count = mpmd_loop_count + visits;
  return false;
}

fn mpmd_loop_tick() -> bool {
  return mpmd_loop_pay(1u);
}

// ==== section is_nan
// NaN test on the bits: float comparisons may be optimised as if NaN never occurs.
fn mpmd_is_nan(x: f32) -> bool {
  return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// ==== section opaque
// v, with its bits OR'd with a 0u read at run time: the driver cannot prove
// the result a constant or equal to another operand, so it applies no
// identity that holds only without infinities and NaN (x * 0 = 0, x - x = 0).
fn mpmd_opaque(v: f32, zero: u32) -> f32 {
  return bitcast<f32>(bitcast<u32>(v) | zero);
}

// ==== section div_i32
// Division by zero returns the dividend; i32::MIN / -1 wraps to i32::MIN.
fn mpmd_div_i32(a: i32, b: i32) -> i32 {
  if (b == 0i) { return a; }
  if (bitcast<u32>(b) == 0xffffffffu) { return 0i - a; }
  return a / b;
}

// ==== section div_u32
// Division by zero returns the dividend.
fn mpmd_div_u32(a: u32, b: u32) -> u32 {
  if (b == 0u) { return a; }
  return a / b;
}

// ==== section rem_i32
// Remainder by zero is 0; x % -1 is 0 (also for i32::MIN).
fn mpmd_rem_i32(a: i32, b: i32) -> i32 {
  if (b == 0i || bitcast<u32>(b) == 0xffffffffu) { return 0i; }
  return a % b;
}

// ==== section rem_u32
// Remainder by zero is 0.
fn mpmd_rem_u32(a: u32, b: u32) -> u32 {
  if (b == 0u) { return 0u; }
  return a % b;
}

// ==== section abs_i32
// abs(i32::MIN) wraps to i32::MIN.
fn mpmd_abs_i32(a: i32) -> i32 {
  if (a < 0i) { return 0i - a; }
  return a;
}

// ==== section min_f32
// With one NaN operand, min returns the other operand.
fn mpmd_min_f32(a: f32, b: f32) -> f32 {
  if (mpmd_is_nan(a)) { return b; }
  if (mpmd_is_nan(b)) { return a; }
  return select(b, a, a < b);
}

// ==== section max_f32
// With one NaN operand, max returns the other operand.
fn mpmd_max_f32(a: f32, b: f32) -> f32 {
  if (mpmd_is_nan(a)) { return b; }
  if (mpmd_is_nan(b)) { return a; }
  return select(b, a, a > b);
}

// ==== section f32_to_i32
// Rust `as`: truncate toward zero, saturate, NaN to 0.
fn mpmd_f32_to_i32(x: f32) -> i32 {
  if (mpmd_is_nan(x)) { return 0i; }
  if (x >= 2147483648.0f) { return 2147483647i; }
  if (x < -2147483648.0f) { return bitcast<i32>(2147483648u); }
  return i32(x);
}

// ==== section f32_to_u32
// Rust `as`: truncate toward zero, saturate, NaN to 0.
fn mpmd_f32_to_u32(x: f32) -> u32 {
  if (mpmd_is_nan(x) || x <= 0.0f) { return 0u; }
  if (x >= 4294967296.0f) { return 4294967295u; }
  return u32(x);
}

// ==== section fmod
// C fmodf (Rust's `%` on f32), exact, on the bits: WGSL's float `%` is
// x - y * trunc(x / y), which rounds.
fn mpmd_fmod(x: f32, y: f32) -> f32 {
  let ux = bitcast<u32>(x);
  let uy = bitcast<u32>(y);
  let sign = ux & 0x80000000u;
  let ax = ux & 0x7fffffffu;
  let ay = uy & 0x7fffffffu;
  if (ay == 0u || ax >= 0x7f800000u || ay > 0x7f800000u) {
    return bitcast<f32>(ux | 0x7fc00000u);
  }
  if (ax < ay) { return x; }
  if (ax == ay) { return bitcast<f32>(sign); }
  var ex = i32(ax >> 23u);
  var mx = ax;
  if (ex == 0i) {
    let shift = countLeadingZeros(ax) - 8u;
    mx = ax << shift;
    ex = 1i - i32(shift);
  } else {
    mx = (ax & 0x007fffffu) | 0x00800000u;
  }
  var ey = i32(ay >> 23u);
  var my = ay;
  if (ey == 0i) {
    let shift = countLeadingZeros(ay) - 8u;
    my = ay << shift;
    ey = 1i - i32(shift);
  } else {
    my = (ay & 0x007fffffu) | 0x00800000u;
  }
  {loop_enter}
  loop {
    if (ex <= ey) { break; }
    {loop_tick}
    if (mx >= my) {
      mx = mx - my;
      if (mx == 0u) { return bitcast<f32>(sign); }
    }
    mx = mx << 1u;
    ex = ex - 1i;
  }
  if (mx >= my) {
    mx = mx - my;
    if (mx == 0u) { return bitcast<f32>(sign); }
  }
  let shift = countLeadingZeros(mx) - 8u;
  mx = mx << shift;
  ex = ex - i32(shift);
  if (ex > 0i) {
    mx = (mx - 0x00800000u) | (u32(ex) << 23u);
  } else {
    mx = mx >> u32(1i - ex);
  }
  return bitcast<f32>(mx | sign);
}

// ==== section check
// Checked mode: row-major offset of ({n} coordinates), or 0 after reporting.
fn mpmd_check{n}(site: u32, {params}) -> u32 {
  if ({out_of_bounds}) {
    mpmd_report({ERROR_OUT_OF_BOUNDS}u, site, {n}u, array<u32, {MAX_RECORDED_VALUES}>({values}));
    return 0u;
  }
  return {offset};
}

// ==== section sem_wait
// Semaphore wait on {global}, run by thread 0 of the block: poll until the count
// reaches `amount` (then take it, unless `take` is false). Bounded: after {budget}
// polls, or once another error is recorded, it reports and gives up: never a hang.
// A poll looks {per_poll} time(s), unrolled: under a loop cap, where each poll is one loop
// visit, a longer poll outlasts a loaded machine's scheduling delays. It looks
// with `atomicAdd(.., 0)`, a read-modify-write no compiler hoists out of the loop: on
// lavapipe (Mesa 22.3) a spin of `atomicLoad`s never saw another workgroup's write
// (backend-wgpu/src/residency.rs).
fn mpmd_wait_{global}(index: u32, amount: i32, take: bool, site: u32) {
  var polls: u32 = 0u;
  {loop_enter}
  loop {
    {loop_tick}
    var seen: i32 = atomicAdd(&{global}[index], 0i);
    {more_looks}
    if (seen >= amount) {
      if (!take) { return; }
      let swap = atomicCompareExchangeWeak(&{global}[index], seen, seen - amount);
      if (swap.exchanged) { return; }
    } else {
      polls = polls + 1u;
      if (polls >= {budget}u) {
        mpmd_report({ERROR_WAIT_TIMEOUT}u, site, 1u, array<u32, {MAX_RECORDED_VALUES}>(index, 0u, 0u, 0u, 0u, 0u, 0u, 0u));
        return;
      }
      if (atomicAdd(&mpmd_status[0], 0u) != 0u) { return; }
    }
  }
}

// ==== section sem_take
// Semaphore wait on {global}, run once per block (by thread 0, or by the block's
// invocation of a semaphore dispatch), when every program that signals it ran in
// an earlier dispatch: the count can no longer grow, so one
// look decides. Short: nothing is taken and the deadlock is reported. A take that
// fails gives its amount back; only a take that found the count already short can
// fail, so the first failure is always a real one.
// Kept small: llvmpipe runs a branch's atomics for every SIMD vector of the block,
// lanes masked off or not, so each atomic here costs every block. The report relies
// on the status buffer being zero at the start of the call (thread 0, other values)
// and the host takes the unit from the site.
fn mpmd_take_{global}(index: u32, amount: i32, take: bool, site: u32) {
  if (take) {
    let before = atomicSub(&{global}[index], amount);
    if (before >= amount) { return; }
    atomicAdd(&{global}[index], amount);
  } else if (atomicLoad(&{global}[index]) >= amount) {
    return;
  }
  if (atomicAdd(&mpmd_status[0], 1u) != 0u) { return; }
  atomicStore(&mpmd_status[1], {ERROR_WAIT_TIMEOUT}u);
  atomicStore(&mpmd_status[3], mpmd_block_id);
  atomicStore(&mpmd_status[5], site);
  atomicStore(&mpmd_status[7], index);
}

// ==== section sem_amount
// A semaphore amount below 1 is an error (docs/design.md): report it (semaphore
// element, amount, whether it is a u32) and skip the operation.
fn mpmd_sem_amount_ok(amount: i32, index: u32, site: u32, unsigned: bool) -> bool {
  if (amount >= 1i) { return true; }
  mpmd_report({ERROR_SEM_AMOUNT}u, site, 3u, array<u32, {MAX_RECORDED_VALUES}>(index, bitcast<u32>(amount), u32(unsigned), 0u, 0u, 0u, 0u, 0u));
  return false;
}

// ==== section loop_limit
// Checked mode: a `while` whose condition still holds after its maximum.
fn mpmd_loop_limit(ordinal: u32, max: u32) {
  mpmd_report({ERROR_LOOP_LIMIT}u, 0u, 2u, array<u32, {MAX_RECORDED_VALUES}>(ordinal, max, 0u, 0u, 0u, 0u, 0u, 0u));
}

// ==== section saturating
// Saturating u32 arithmetic for loop costs.
fn mpmd_sat_add(a: u32, b: u32) -> u32 {
  if (a > 4294967295u - b) { return 4294967295u; }
  return a + b;
}

fn mpmd_sat_mul(a: u32, b: u32) -> u32 {
  if (a != 0u && b > 4294967295u / a) { return 4294967295u; }
  return a * b;
}

// ==== section bf16_to_f32
// bf16 bits to f32 (exact: the bits are the f32's high half).
fn mpmd_bf16_to_f32(h: u32) -> f32 {
  return bitcast<f32>(h << 16u);
}

// ==== section f16_to_f32
// f16 bits to f32, exact, on the bits (f16 subnormals are f32 normals).
fn mpmd_f16_to_f32(h: u32) -> f32 {
  let sign = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0x1fu) { return bitcast<f32>(sign | 0x7f800000u | (m << 13u)); }
  if (e != 0u) { return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u)); }
  if (m == 0u) { return bitcast<f32>(sign); }
  // Subnormal m * 2^-24: move the leading 1 to bit 10.
  let shift = countLeadingZeros(m) - 21u;
  return bitcast<f32>(sign | ((113u - shift) << 23u) | (((m << shift) & 0x3ffu) << 13u));
}

// ==== section f32_to_bf16
// f32 to the nearest bf16 (ties to even, overflow to infinity, NaN stays NaN),
// on the bits: WGSL does not pin down the rounding of its own conversions.
fn mpmd_f32_to_bf16(x: f32) -> u32 {
  let u = bitcast<u32>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) { return (u >> 16u) | 0x40u; }
  let up = ((u >> 15u) & 1u) == 1u && ((u & 0x7fffu) != 0u || ((u >> 16u) & 1u) == 1u);
  return (u >> 16u) + u32(up);
}

// ==== section f32_to_f16
// f32 to the nearest f16 (ties to even, overflow to infinity, NaN stays NaN,
// subnormals kept), on the bits: WGSL does not pin down the rounding of f16().
fn mpmd_f32_to_f16(x: f32) -> u32 {
  let u = bitcast<u32>(x);
  let sign = (u >> 16u) & 0x8000u;
  let a = u & 0x7fffffffu;
  if (a > 0x7f800000u) { return sign | 0x7e00u; }
  // 65520 (the largest f16 plus half an ulp) and above round to infinity.
  if (a >= 0x477ff000u) { return sign | 0x7c00u; }
  if (a >= 0x38800000u) {
    // Normal: rebias the exponent, keep 10 mantissa bits, round the 13 dropped.
    let h = (a - 0x38000000u) >> 13u;
    let rest = a & 0x1fffu;
    let up = rest > 0x1000u || (rest == 0x1000u && (h & 1u) == 1u);
    return sign | (h + u32(up));
  }
  // Below 2^-25 (half the smallest subnormal; 2^-25 itself ties to even 0).
  if (a < 0x33000000u) { return sign; }
  // Subnormal: the value in units of 2^-24, rounded (a carry gives the smallest normal).
  let m = (a & 0x7fffffu) | 0x800000u;
  let shift = 126u - (a >> 23u);
  let q = m >> shift;
  let rest = m & ((1u << shift) - 1u);
  let half = 1u << (shift - 1u);
  let up = rest > half || (rest == half && (q & 1u) == 1u);
  return sign | (q + u32(up));
}

// ==== section f16_to_f32_native
// f16 bits to f32 with the adapter's `unpack2x16float`, used only where a
// probe dispatch found it exact on every f16 pattern, a NaN giving a NaN
// (payloads are unspecified: docs/numerics.md); see `f16_conversions.rs`.
fn mpmd_f16_to_f32(h: u32) -> f32 {
  return unpack2x16float(h).x;
}

// ==== section f32_to_f16_native
// f32 to the nearest f16 (ties to even, overflow to infinity, NaN stays NaN,
// subnormals kept) without branches, used only where a probe dispatch found
// it exact (`f16_conversions.rs`): the adapter's f32 addition rounds an f16
// subnormal, `|x| + 0.5` putting the subnormal grid (2^-24) at the sum's last
// bit, which WGSL lets round either way; a carry out gives the smallest
// normal. Normal results round on the bits; 65520 (the largest f16 plus half
// an ulp) and above are infinity. lavapipe's `pack2x16float` rounds the same
// but took about 1.2 times as long in an f16 kernel.
fn mpmd_f32_to_f16(x: f32) -> u32 {
  let u = bitcast<u32>(x);
  let a = u & 0x7fffffffu;
  // Rebias the exponent (a - 0x38000000), round the 13 dropped bits to even.
  let normal = (a + 0xc8000fffu + ((a >> 13u) & 1u)) >> 13u;
  let subnormal = bitcast<u32>(bitcast<f32>(a) + 0.5) - 0x3f000000u;
  let special = select(0x7c00u, 0x7e00u, a > 0x7f800000u);
  let h = select(select(normal, subnormal, a < 0x38800000u), special, a >= 0x477ff000u);
  return ((u >> 16u) & 0x8000u) | h;
}

// ==== section u64
// Unsigned 64-bit integers as vec2<u32>(high word, low word), for fma_f32.
// Shift amounts of 32 or more are written out: WGSL shifts a u32 by the
// amount modulo 32.
fn mpmd_u64_shl(x: vec2<u32>, n: u32) -> vec2<u32> {
  if (n == 0u) { return x; }
  if (n >= 64u) { return vec2<u32>(0u, 0u); }
  if (n >= 32u) { return vec2<u32>(x.y << (n - 32u), 0u); }
  return vec2<u32>((x.x << n) | (x.y >> (32u - n)), x.y << n);
}

fn mpmd_u64_shr(x: vec2<u32>, n: u32) -> vec2<u32> {
  if (n == 0u) { return x; }
  if (n >= 64u) { return vec2<u32>(0u, 0u); }
  if (n >= 32u) { return vec2<u32>(0u, x.x >> (n - 32u)); }
  return vec2<u32>(x.x >> n, (x.y >> n) | (x.x << (32u - n)));
}

// Whether any of the n lowest bits of x is set.
fn mpmd_u64_low_bits(x: vec2<u32>, n: u32) -> bool {
  if (n == 0u) { return false; }
  if (n >= 64u) { return (x.x | x.y) != 0u; }
  let low = mpmd_u64_shl(x, 64u - n);
  return (low.x | low.y) != 0u;
}

fn mpmd_u64_clz(x: vec2<u32>) -> u32 {
  if (x.x != 0u) { return countLeadingZeros(x.x); }
  return 32u + countLeadingZeros(x.y);
}

fn mpmd_u64_add(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let low = a.y + b.y;
  return vec2<u32>(a.x + b.x + select(0u, 1u, low < a.y), low);
}

// a - b for a >= b.
fn mpmd_u64_sub(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  return vec2<u32>(a.x - b.x - select(0u, 1u, a.y < b.y), a.y - b.y);
}

fn mpmd_u64_less(a: vec2<u32>, b: vec2<u32>) -> bool {
  return a.x < b.x || (a.x == b.x && a.y < b.y);
}

// ==== section fma_f32
// fma on f32 rounded once (nearest, ties to even), on the bits: lavapipe's
// fma rounds the product first, which a chain of fma (a matmul over k = 256)
// carries past any fixed bound. NaN, infinities and zero operands take the
// plain operations, which are exact there (an infinite or NaN c with finite
// factors is the result). Otherwise the product of the
// significands is exact in 48 bits, both terms are aligned with their
// leading bit at bit 62 of a 64-bit integer, the smaller shifted right with
// the bits it loses kept as a sticky bit (the larger's bit 0 is always 0,
// so the sum is odd and never a tie when it is inexact), added or
// subtracted, and rounded once to 24 bits, or to the subnormal grid 2^-149.
fn mpmd_fma_f32(a: f32, b: f32, c: f32) -> f32 {
  let ua = bitcast<u32>(a);
  let ub = bitcast<u32>(b);
  let uc = bitcast<u32>(c);
  let ea = (ua >> 23u) & 0xffu;
  let eb = (ub >> 23u) & 0xffu;
  let ec = (uc >> 23u) & 0xffu;
  // An infinite or NaN c with finite factors: the exact product is finite
  // (a * b may overflow, and inf - inf would be NaN).
  if (ec == 255u && ea != 255u && eb != 255u) { return c; }
  if (ea == 255u || eb == 255u || ec == 255u || (ua << 1u) == 0u || (ub << 1u) == 0u) {
    return a * b + c;
  }
  if ((uc << 1u) == 0u) { return a * b; }
  // Significands and the exponents of their lowest bits: value = m * 2^x.
  let ma = select((ua & 0x7fffffu) | 0x800000u, ua & 0x7fffffu, ea == 0u);
  let mb = select((ub & 0x7fffffu) | 0x800000u, ub & 0x7fffffu, eb == 0u);
  let mc = select((uc & 0x7fffffu) | 0x800000u, uc & 0x7fffffu, ec == 0u);
  let xa = i32(max(ea, 1u)) - 150i;
  let xb = i32(max(eb, 1u)) - 150i;
  let xc = i32(max(ec, 1u)) - 150i;
  // The product of the significands, exactly, from 16-bit halves.
  let a0 = ma & 0xffffu;
  let a1 = ma >> 16u;
  let b0 = mb & 0xffffu;
  let b1 = mb >> 16u;
  let p00 = a0 * b0;
  let mid = a0 * b1 + a1 * b0;
  let low = p00 + (mid << 16u);
  var p = vec2<u32>(a1 * b1 + (mid >> 16u) + select(0u, 1u, low < p00), low);
  var q = vec2<u32>(0u, mc);
  // Leading bits at bit 62 (bit 63 takes a carry).
  let sp = mpmd_u64_clz(p) - 1u;
  let sq = mpmd_u64_clz(q) - 1u;
  p = mpmd_u64_shl(p, sp);
  q = mpmd_u64_shl(q, sq);
  let xp = xa + xb - i32(sp);
  let xq = xc - i32(sq);
  let sign_p = (ua ^ ub) & 0x80000000u;
  let sign_q = uc & 0x80000000u;
  // The larger magnitude first.
  var big = p;
  var small = q;
  var x = xp;
  var gap = xp - xq;
  var sign = sign_p;
  if (xq > xp || (xq == xp && mpmd_u64_less(p, q))) {
    big = q;
    small = p;
    x = xq;
    gap = xq - xp;
    sign = sign_q;
  }
  let shift_small = u32(min(gap, 64i));
  let lost = mpmd_u64_low_bits(small, shift_small);
  small = mpmd_u64_shr(small, shift_small);
  small.y = small.y | select(0u, 1u, lost);
  var s = mpmd_u64_add(big, small);
  if (sign_p != sign_q) { s = mpmd_u64_sub(big, small); }
  if ((s.x | s.y) == 0u) { return 0.0f; }
  // Keep 24 bits, or down to the subnormal grid: m * 2^(x + shift).
  let top = 63i - i32(mpmd_u64_clz(s));
  let shift = max(top - 23i, -149i - x);
  var m = 0u;
  if (shift <= 0i) {
    m = mpmd_u64_shl(s, u32(-shift)).y;
  } else {
    m = mpmd_u64_shr(s, u32(shift)).y;
    let guard = (mpmd_u64_shr(s, u32(shift - 1i)).y & 1u) == 1u;
    let rest = mpmd_u64_low_bits(s, u32(shift - 1i));
    if (guard && (rest || (m & 1u) == 1u)) { m = m + 1u; }
  }
  // The biased exponent less one: a carry of m into bit 24 steps it.
  let k = x + shift + 149i;
  if (k >= 255i) { return bitcast<f32>(sign | 0x7f800000u); }
  let bits = (u32(k) << 23u) + m;
  if (bits >= 0x7f800000u) { return bitcast<f32>(sign | 0x7f800000u); }
  return bitcast<f32>(sign | bits);
}

// ==== section fma_bf16
// fma on bf16, rounded once: the product of two bf16 is exact in f32 unless it
// leaves f32's range, the sum is rounded to odd (24 bits, 16 more than bf16 has),
// then to bf16. A product past f32's largest (a and b finite) is computed 2^64
// smaller and scaled back; a c below 2^-40 then only decides a tie of the product
// (it is far below the product's ulp), so it becomes +-2^-40, which scales
// without underflow.
fn mpmd_fma_bf16(a: u32, b: u32, c: u32, one: f32) -> u32 {
  let wa = mpmd_bf16_to_f32(a);
  let wb = mpmd_bf16_to_f32(b);
  let wc = mpmd_bf16_to_f32(c);
  let p = wa * wb;
  let finite = (a & 0x7f80u) != 0x7f80u && (b & 0x7f80u) != 0x7f80u;
  if (finite && (bitcast<u32>(p) & 0x7fffffffu) == 0x7f800000u) {
    let down = bitcast<f32>(0x1f800000u);
    let tiny = (c & 0x7fffu) != 0u && (c & 0x7fffu) < 0x2b80u;
    let z = select(wc, bitcast<f32>(((c & 0x8000u) << 16u) | 0x2b800000u), tiny);
    let r = mpmd_sum_to_odd((wa * down) * wb, z * down, one);
    return mpmd_f32_to_bf16(r * bitcast<f32>(0x5f800000u));
  }
  return mpmd_f32_to_bf16(mpmd_sum_to_odd(p, wc, one));
}

// ==== section fma_f16
// fma on f16, rounded once: the product of two f16 is exact in f32 (22 bits,
// 2^-48 to 2^32), the sum is rounded to odd (24 bits, 13 more than f16 has),
// then to f16.
fn mpmd_fma_f16(a: u32, b: u32, c: u32, one: f32) -> u32 {
  let p = mpmd_f16_to_f32(a) * mpmd_f16_to_f32(b);
  return mpmd_f32_to_f16(mpmd_sum_to_odd(p, mpmd_f16_to_f32(c), one));
}

// ==== section sum_to_odd
// p + z rounded to odd: the nearest f32, stepped one ulp toward the exact sum
// when inexact and even, so that rounding it to 16 bits later rounds p + z once.
// TwoSum gives the exact error; every step goes through `one` (1.0 read at run
// time), so a compiler that reassociates floats cannot fold the error to zero.
fn mpmd_sum_to_odd(p: f32, z: f32, one: f32) -> f32 {
  let s = p + z;
  let bits = bitcast<u32>(s);
  if ((bits & 0x7f800000u) == 0x7f800000u || (bits & 1u) == 1u) { return s; }
  let s1 = s * one;
  let bv = s1 - p;
  let av = s1 - bv * one;
  let err = (p - av) + (z - bv);
  if (err == 0.0f) { return s; }
  if ((err > 0.0f) == (s > 0.0f)) { return bitcast<f32>(bits + 1u); }
  return bitcast<f32>(bits - 1u);
}

// ==== section min_max_16
// {what} on {n} bits: with one NaN operand, the other operand.
fn mpmd_{what}_{n}(a: u32, b: u32) -> u32 {
  if ((a & 0x7fffu) > {infinity}) { return b; }
  if ((b & 0x7fffu) > {infinity}) { return a; }
  return select(b, a, mpmd_{n}_to_f32(a) {compare} mpmd_{n}_to_f32(b));
}

// ==== section int_to_f32_odd
// An integer rounded to odd into 24 bits, as an f32 (exact): rounding that to
// 16 bits rounds the integer once (a nearest f32 would round twice above 2^24).
fn mpmd_u32_to_f32_odd(v: u32) -> f32 {
  if (v < 0x1000000u) { return f32(v); }
  let shift = 8u - countLeadingZeros(v);
  let kept = (v >> shift) | u32((v & ((1u << shift) - 1u)) != 0u);
  return f32(kept) * bitcast<f32>((127u + shift) << 23u);
}

fn mpmd_i32_to_f32_odd(v: i32) -> f32 {
  let magnitude = mpmd_u32_to_f32_odd(select(bitcast<u32>(v), 0u - bitcast<u32>(v), v < 0i));
  return select(magnitude, -magnitude, v < 0i);
}

// ==== section warp_ballot
// Bit k set when invocation `base + k` published a nonzero word in
// `mpmd_warp_words` (a warp's lanes, after a barrier).
fn mpmd_warp_ballot(base: u32) -> u32 {
  var bits = 0u;
  {bits}
  return bits;
}

// ==== section warp_reduce
// A warp reduction in the butterfly order of docs/numerics.md: the words the
// warp's 32 invocations published in `mpmd_warp_words` from `base`, combined
// 16 apart, then 8, 4, 2 and 1 (unrolled: no loop counts toward the cap).
fn mpmd_warp_{name}(base: u32) -> {ty} {
  var t: array<{ty}, 32>;
  {loads}
  {levels}
  return t[0];
}

// ==== section subgroup_check
// Native warp collectives need every logical warp (threads 32w to 32w + 31 of
// the workgroup) to be one whole subgroup, thread 32w + l its invocation l,
// which WGSL does not promise. Where it does not hold their results would be
// wrong, so the error is recorded: the subgroup's size, the invocation's id in
// it, and whether the subgroup holds exactly the warp's 32 threads.
fn mpmd_check_subgroups(size: u32, lane: u32, thread: u32) {
  let full = subgroupBallot(true).x == 0xffffffffu;
  let first = subgroupMin(thread) == (thread & 0xffffffe0u);
  let last = subgroupMax(thread) == (thread | 31u);
  let whole = full && first && last;
  if (size != 32u || lane != (thread & 31u) || !whole) {
    mpmd_report({ERROR_SUBGROUP_NOT_WARP}u, 0u, 3u, array<u32, {MAX_RECORDED_VALUES}>(size, lane, u32(whole), 0u, 0u, 0u, 0u, 0u));
  }
}

// ==== section subgroup_reduce
// An f32 warp reduction on subgroups (the subgroup is the logical warp), in the
// butterfly order of docs/numerics.md: partners 16 lanes apart, then 8, 4, 2
// and 1. The lower lane of a pair combines (its value, its partner's), the upper
// one the same two in the same order, so both hold the tree's t[j] and every
// lane ends with t[0], bit for bit (unrolled: no loop counts toward the cap).
fn mpmd_subgroup_{name}(v: f32, thread: u32) -> f32 {
  var t = v;
  {levels}
  return t;
}

// ==== section mma
// One lane's part of mma_m16n8k16 (docs/numerics.md): `a` holds the packed
// words of the lane's two rows of A, `b` of its two columns of B (gathered
// from its warp by the emitted code), and each of the 4 results starts from
// `c` and adds the exact products for k = 0..15 in order, each sum an f32
// addition (unrolled: no loop counts toward the cap).
fn mpmd_mma_m16n8k16_{name}(a: array<u32, 16>, b: array<u32, 16>, c: array<f32, 4>) -> array<f32, 4> {
  var d = c;
  {sums}
  return d;
}
