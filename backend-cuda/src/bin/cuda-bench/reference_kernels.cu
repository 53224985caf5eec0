// Hand-written CUDA C the way a CUDA developer writes these kernels, for
// `cuda-bench` to time beside the generated ones: what the device reaches
// with scalar (4-byte) and vector (16-byte) accesses, and a reduction with
// warp shuffles (which the IR cannot express). Sizes are the benchmark's:
// `n` floats, the grid covers them exactly.

// 8 floats per thread, `blockDim.x` apart, all loads before all stores.
extern "C" __global__ void ref_copy_scalar8(const float* __restrict__ x, float* __restrict__ y) {
  const size_t base = (size_t)blockIdx.x * blockDim.x * 8u + threadIdx.x;
  float v[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = x[base + (size_t)k * blockDim.x];
#pragma unroll
  for (int k = 0; k < 8; ++k) y[base + (size_t)k * blockDim.x] = v[k];
}

// 2 float4 per thread (8 floats), `blockDim.x` float4s apart.
extern "C" __global__ void ref_copy_vec4x2(const float4* __restrict__ x, float4* __restrict__ y) {
  const size_t base = (size_t)blockIdx.x * blockDim.x * 2u + threadIdx.x;
  const float4 a = x[base];
  const float4 b = x[base + blockDim.x];
  y[base] = a;
  y[base + blockDim.x] = b;
}

// 4 float4 per thread (16 floats).
extern "C" __global__ void ref_copy_vec4x4(const float4* __restrict__ x, float4* __restrict__ y) {
  const size_t base = (size_t)blockIdx.x * blockDim.x * 4u + threadIdx.x;
  float4 v[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) v[k] = x[base + (size_t)k * blockDim.x];
#pragma unroll
  for (int k = 0; k < 4; ++k) y[base + (size_t)k * blockDim.x] = v[k];
}

// The block's threads' partial sums through warp shuffles, then one warp.
static __device__ __forceinline__ float ref_block_sum(float s) {
  __shared__ float warp_sums[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  const unsigned warp = threadIdx.x / 32u, lane = threadIdx.x % 32u;
  if (lane == 0u) warp_sums[warp] = s;
  __syncthreads();
  if (warp == 0u) {
    s = lane < blockDim.x / 32u ? warp_sums[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  }
  return s;
}

// 16 floats per thread as scalar loads, shuffle tree; one sum per block.
extern "C" __global__ void ref_reduce_scalar16(const float* __restrict__ x, float* __restrict__ y) {
  const size_t base = (size_t)blockIdx.x * blockDim.x * 16u + threadIdx.x;
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < 16; ++k) s += x[base + (size_t)k * blockDim.x];
  s = ref_block_sum(s);
  if (threadIdx.x == 0u) y[blockIdx.x] = s;
}

// 4 float4 per thread (16 floats), shuffle tree; one sum per block.
extern "C" __global__ void ref_reduce_vec4x4(const float4* __restrict__ x, float* __restrict__ y) {
  const size_t base = (size_t)blockIdx.x * blockDim.x * 4u + threadIdx.x;
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float4 v = x[base + (size_t)k * blockDim.x];
    s += (v.x + v.y) + (v.z + v.w);
  }
  s = ref_block_sum(s);
  if (threadIdx.x == 0u) y[blockIdx.x] = s;
}
