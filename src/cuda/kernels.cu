// The CUDA backend's kernels (kernels.h says what each computes and why the
// results do not depend on how rows are batched).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <type_traits>
#include <utility>

#include "cuda/kernels.h"

namespace parspec::cuda {

bool env_is(const char* name, std::string_view value) {
  const char* env = std::getenv(name);
  return env != nullptr && std::string_view(env) == value;
}

namespace {

constexpr int kWarp = 32;
constexpr int kMatmulWarps = 4;    // output rows (weight rows) per block, one per warp
constexpr int kRowTile = 8;        // activation rows sharing one load of the weights
constexpr int kAttnThreads = 128;  // per (row, head, split) of attention
constexpr int kAttnKeys = 128;     // keys per attention chunk: one per thread
static_assert(kAttnKeys == kAttnThreads, "attention scores one key per thread");
constexpr int kMaxHeadDim = 256;
constexpr int kNormThreads = 256;

// Programmatic dependent launch (sm_90 and later; PARSPEC_CUDA_PDL=0 turns it off): a
// kernel is launched while the one before it on its stream finishes, and its
// blocks wait here, before they read or write anything, until that kernel has
// completed and its writes are visible. Each kernel lets the next one launch
// as soon as all its own blocks are running. What a kernel computes is the
// same either way; only the gap between kernels shrinks. Elsewhere both are
// no-ops.
__device__ __forceinline__ void begin_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launches let the next kernel start early (prepare_launches).
bool dependent_launch = false;

// PARSPEC_CUDA_PREFETCH=early (prepare_launches sets it): a matmul block asks
// the L2 cache for its weight rows (an attention block for the committed keys
// and values it reads, prefetch_committed_kv) before begin_kernel waits for the
// kernel before it, so that with dependent launches they stream in while that
// kernel finishes. Nothing that kernel writes is read before the wait, so the
// values are the same.
__constant__ bool weights_early_wanted;

// PARSPEC_CUDA_PREFETCH=operands (prepare_launches sets it): the one-row and
// few-rows Q8_0/Q4_0 kernels load their lanes' first weight blocks into
// registers, and the streamed tensor-core kernel copies its first rounds of
// weights into shared memory, before begin_kernel waits for the kernel before
// it. Weights never change during a pass, so the values are the same; the
// loads a block would start after the wait are in flight while that kernel
// finishes (a norm or SwiGLU kernel of one row runs on a few SMs, and the
// matmul's first blocks wait on the others).
__constant__ bool operands_early_wanted;

// The same setting on the host, where it picks a kernel's instance.
bool operands_before_wait() {
  static const bool wanted = env_is("PARSPEC_CUDA_PREFETCH", "operands");
  return wanted;
}

// The 16-byte pieces wholly inside [p, p + bytes) requested into L2: one bulk
// prefetch per 32 KiB on sm_90 and later, nothing elsewhere.
__device__ void prefetch_range_l2(const void* p, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr uint64_t kPiece = 32 * 1024;
  const uint64_t at0 = reinterpret_cast<uint64_t>(p);
  const uint64_t begin = (at0 + 15) & ~uint64_t{15};
  const uint64_t end = (at0 + static_cast<uint64_t>(bytes)) & ~uint64_t{15};
  for (uint64_t at = begin; at < end; at += kPiece) {
    const uint32_t size = static_cast<uint32_t>(end - at < kPiece ? end - at : kPiece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"(size) : "memory");
  }
#else
  (void)p, (void)bytes;
#endif
}

// Row `row` of w (its values, and the block scales of Q8_0/Q4_0) requested into L2.
// Inlined: a call would make every thread of the kernel copy the kernel's
// parameters (w among them) to local memory first, whether it prefetches or
// not; for a one-row F16 gate/up matmul nearly as many bytes as its weights
// (tests/cuda/check_local_memory.sh keeps such copies out).
__device__ __forceinline__ void prefetch_weight_row(const DeviceMatrix& w, int64_t row) {
  if (row < 0 || row >= w.n_out) return;
  int64_t bytes = w.n_in * 4, scale_bytes = 0;  // F32
  switch (w.kind) {
    case WeightKind::kQ8_0:
      bytes = w.n_in, scale_bytes = w.n_in / 32 * 2;
      break;
    case WeightKind::kQ4_0:
      bytes = w.n_in / 2, scale_bytes = w.n_in / 32 * 2;
      break;
    case WeightKind::kF16:
    case WeightKind::kBF16:
      bytes = w.n_in * 2;
      break;
    case WeightKind::kQ4_K:
      bytes = w.n_in / kSuperBlock * kQ4KBytes;
      break;
    case WeightKind::kQ6_K:
      bytes = w.n_in / kSuperBlock * kQ6KStride;
      break;
    default:
      break;
  }
  prefetch_range_l2(static_cast<const uint8_t*>(w.q) + row * bytes, bytes);
  if (scale_bytes > 0)
    prefetch_range_l2(static_cast<const uint8_t*>(w.scales) + row * scale_bytes, scale_bytes);
}

// Before begin_kernel, where PARSPEC_CUDA_PREFETCH=early asks for it: rows
// row_of(r) of w, r < rows (at most the block's threads), one a thread.
template <class RowOf>
__device__ void prefetch_rows_early(const DeviceMatrix& w, int rows, RowOf&& row_of) {
  if (weights_early_wanted && static_cast<int>(threadIdx.x) < rows)
    prefetch_weight_row(w, row_of(static_cast<int>(threadIdx.x)));
}

// kernel<<<grid, block, shared, stream>>>(args...), early when dependent_launch is on.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
            Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = dependent_launch ? 1 : 0;
  // An error stays the runtime's last error, which the callers check.
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

int blocks_for(int64_t count, int threads) {
  return static_cast<int>((count + threads - 1) / threads);
}

// The weight rows of a group's matrices together.
int64_t group_rows(const MatmulGroup& g) {
  int64_t rows = 0;
  for (int i = 0; i < g.count; ++i) rows += g.w[i].n_out;
  return rows;
}

// The sum of every lane's v, the same on every lane (addition is commutative,
// so each lane's butterfly order gives the same bits).
__device__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ float half_at(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}

// Q4_K's 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
// byte(k) gives packed byte k, from memory or from registers.
template <class Byte>
__device__ __forceinline__ void q4k_scale_min_of(Byte&& byte, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = byte(j) & 63;
    mn = byte(j + 4) & 63;
  } else {
    sc = (byte(j + 4) & 15) | ((byte(j - 4) >> 6) << 4);
    mn = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
  }
}

__device__ void q4k_scale_min(const uint8_t* packed, int j, int& sc, int& mn) {
  q4k_scale_min_of([&](int k) { return static_cast<int>(packed[k]); }, j, sc, mn);
}

// One dequantized value of a Q4_K/Q6_K row, with the CPU's arithmetic
// (kernels/kquants.cpp: dequantize_row_q4_K / _q6_K).
__device__ float k_quant_element(const DeviceMatrix& w, int64_t row, int64_t col) {
  const int64_t n_super = w.n_in / kSuperBlock;
  const int e = static_cast<int>(col % kSuperBlock);
  const uint8_t* blk = static_cast<const uint8_t*>(w.q);
  if (w.kind == WeightKind::kQ4_K) {
    blk += (row * n_super + col / kSuperBlock) * kQ4KBytes;
    const int g = e / 64, hi = (e % 64) / 32, l = e % 32;
    int sc, mn;
    q4k_scale_min(blk + 4, 2 * g + hi, sc, mn);
    const uint8_t byte = blk[16 + 32 * g + l];
    const float scale = __fmul_rn(half_at(blk), static_cast<float>(sc));
    const float min = __fmul_rn(half_at(blk + 2), static_cast<float>(mn));
    return __fsub_rn(__fmul_rn(scale, static_cast<float>(hi ? byte >> 4 : byte & 15)), min);
  }
  blk += (row * n_super + col / kSuperBlock) * kQ6KStride;
  const int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
  const uint8_t low = blk[64 * h + 32 * (quarter & 1) + l];
  const int nibble = quarter < 2 ? low & 15 : low >> 4;
  const int q = (nibble | (((blk[128 + 32 * h + l] >> (2 * quarter)) & 3) << 4)) - 32;
  const int8_t sc = static_cast<int8_t>(blk[192 + 8 * h + l / 16 + 2 * quarter]);
  return __fmul_rn(__fmul_rn(half_at(blk + 208), static_cast<float>(sc)), static_cast<float>(q));
}

__device__ float weight_element(const DeviceMatrix& w, int64_t row, int64_t col) {
  const int64_t i = row * w.n_in + col;
  switch (w.kind) {
    case WeightKind::kF32:
      return static_cast<const float*>(w.q)[i];
    case WeightKind::kF16:
      return __half2float(static_cast<const __half*>(w.q)[i]);
    case WeightKind::kBF16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(w.q)[i]);
    case WeightKind::kQ8_0: {
      const float d = __half2float(static_cast<const __half*>(w.scales)[i / 32]);
      return __fmul_rn(d, static_cast<float>(static_cast<const int8_t*>(w.q)[i]));
    }
    case WeightKind::kQ4_0: {
      const int64_t block = i / 32;
      const int j = static_cast<int>(i % 32);
      const uint8_t byte = static_cast<const uint8_t*>(w.q)[block * 16 + (j % 16)];
      const int value = (j < 16 ? (byte & 0xF) : (byte >> 4)) - 8;
      const float d = __half2float(static_cast<const __half*>(w.scales)[block]);
      return __fmul_rn(d, static_cast<float>(value));
    }
    case WeightKind::kQ4_K:
    case WeightKind::kQ6_K:
      return k_quant_element(w, row, col);
  }
  return 0.0f;
}

__global__ void embed_kernel(DeviceMatrix w, const int32_t* tokens, float* hidden) {
  begin_kernel();
  const int row = blockIdx.x;
  const int64_t token = tokens[row];
  for (int64_t c = threadIdx.x; c < w.n_in; c += blockDim.x)
    hidden[row * w.n_in + c] = weight_element(w, token, c);
}

// A block of 32 values of a row to Q8_0, one lane per value, exactly as the
// CPU quantizes its activations (kernels/quant.cpp): d = f16(amax / 127), and
// each value divided by that rounded d, rounded half to even and kept in
// [-127, 127].
__device__ void quantize_block(float v, int lane, int8_t* q, float* scale) {
  const float amax = warp_max(fabsf(v));
  const float d = __half2float(__float2half_rn(__fdiv_rn(amax, 127.0f)));
  const float x = d != 0.0f ? rintf(__fdiv_rn(v, d)) : 0.0f;
  q[lane] = static_cast<int8_t>(fminf(fmaxf(x, -127.0f), 127.0f));
  if (lane == 0) *scale = d;
}

// Where block b of activation row `row` (of n rows of nb blocks) goes among
// the quantized activations: row after row, or block-major (block b of every
// row, then block b + 1), which the tensor-core kernel reads with wide loads.
__device__ int64_t q8_block_index(int64_t row, int64_t b, int64_t n, int64_t nb, bool block_major) {
  return block_major ? b * n + row : row * nb + b;
}

// Q8_K, the activations of Q4_K/Q6_K weights: a super-block of kSuperBlock
// values whose largest magnitude is amax becomes the quants q8k_quant(v, amax)
// and the scale q8k_scale(amax), bit for bit as the CPU's quantize_row_q8_K.
__device__ __forceinline__ int q8k_quant(float v, float amax) {
  if (amax == 0.0f) return 0;
  return max(-128, min(127, static_cast<int>(rintf(__fmul_rn(v, __fdiv_rn(127.0f, amax))))));
}
__device__ __forceinline__ float q8k_scale(float amax) {
  return amax != 0.0f ? __fdiv_rn(amax, 127.0f) : 0.0f;
}

// Value `at` of row-major Q8_K activations (a row's width a multiple of
// kSuperBlock), one a lane and 32 in a row a warp, quantized in its
// super-block of largest magnitude amax: its quant, the sum of its 16 (lanes
// 0-15 and 16-31) and, from the super-block's first value, the scale. Every
// lane of the warp calls it.
__device__ __forceinline__ void store_q8k_value(float v, float amax, int64_t at, int lane,
                                                const Q8KActivations& out) {
  const int q = q8k_quant(v, amax);
  out.q[at] = static_cast<int8_t>(q);
  int sum = q;  // exact, in any order
  for (int o = 1; o < 16; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane % 16 == 0) out.bsums[at / 16] = static_cast<int16_t>(sum);
  if (at % kSuperBlock == 0) out.d[at / kSuperBlock] = q8k_scale(amax);
}
constexpr int kSuperBlockWarps = kSuperBlock / kWarp;  // warps of 32 values in a super-block

// A super-block's largest magnitude from its warps' largest (warps[0..7]).
__device__ __forceinline__ float super_block_amax(const float* warps) {
  float amax = warps[0];
  for (int u = 1; u < kSuperBlockWarps; ++u) amax = fmaxf(amax, warps[u]);
  return amax;
}

// One block per row: h += residual (when given), out = h / sqrt(mean(h²) + eps)
// · w, and out quantized to Q8_0 when q is given. For rows wider than
// add_rmsnorm_wide_kernel takes: the sum of squares is reduced by the first
// kNormThreads threads (each over elements i, i + kNormThreads, ..., then a
// fixed tree); all kNormBlock threads then write and quantize the row.
constexpr int kNormBlock = 1024;
__global__ void __launch_bounds__(kNormBlock)
    add_rmsnorm_kernel(float* h, const float* residual, const float* w, int dim, float eps,
                       float* out, int8_t* q, float* scales, bool block_major) {
  begin_kernel();
  __shared__ float partial[kNormThreads];
  const int64_t row = blockIdx.x;
  float* hr = h + row * dim;
  float* yr = out + row * dim;
  if (threadIdx.x < kNormThreads) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < dim; i += kNormThreads) {
      float x = hr[i];
      if (residual != nullptr) {
        x = __fadd_rn(x, residual[row * dim + i]);
        hr[i] = x;
      }
      s = __fmaf_rn(x, x, s);
    }
    partial[threadIdx.x] = s;
  }
  __syncthreads();
  for (int stride = kNormThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] = __fadd_rn(partial[threadIdx.x], partial[threadIdx.x + stride]);
    __syncthreads();
  }
  const float mean = __fdiv_rn(partial[0], static_cast<float>(dim));
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  for (int i = threadIdx.x; i < dim; i += kNormBlock)
    yr[i] = __fmul_rn(__fmul_rn(hr[i], scale), w[i]);
  if (q == nullptr) return;
  __syncthreads();  // the row is written
  const int lane = threadIdx.x % kWarp, n_blocks = dim / 32;
  for (int b = threadIdx.x / kWarp; b < n_blocks; b += kNormBlock / kWarp) {
    const int64_t at = q8_block_index(row, b, gridDim.x, n_blocks, block_major);
    quantize_block(yr[b * 32 + lane], lane, q + at * 32, scales + at);
  }
}

// add_rmsnorm_kernel's computation for rows of up to kNormBlock ·
// kWideNormPerThread values, with the whole block busy and no load waiting on
// another (a row's loads in one round trip): thread t holds elements t, t + kNormBlock,
// ... of the row in registers, all loaded up front; the sum of squares is
// each thread's own in order, then each warp's by butterfly, then the warps'
// sums, each warp adding them by the same butterfly. Warp w's lanes hold
// blocks w, w + 32, ... of 32 values, which it quantizes from its registers.
// One block per row and fixed steps, so a row's bits do not depend on the
// batch. With k8.q set (PARSPEC_CUDA_FUSE=q8k; dim a multiple of
// kSuperBlock) the row also goes to Q8_K, as quantize_q8k_kernel would
// quantize it: a super-block is 8 warps' values, its largest magnitude their
// warps' largest.
constexpr int kWideNormPerThread = 8;  // rows of up to 8192 values
__global__ void __launch_bounds__(kNormBlock)
    add_rmsnorm_wide_kernel(float* h, const float* __restrict__ residual,
                            const float* __restrict__ w, int dim, float eps, float* out, int8_t* q,
                            float* scales, bool block_major, Q8KActivations k8) {
  __shared__ float warp_sums[kNormBlock / kWarp];
  __shared__ float warp_amax[kWideNormPerThread][kNormBlock / kWarp];
  const int64_t row = blockIdx.x;
  float* hr = h + row * dim;
  float* yr = out + row * dim;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  float x[kWideNormPerThread], r[kWideNormPerThread], g[kWideNormPerThread];
  // The gains are weights: with PARSPEC_CUDA_PREFETCH=early they are loaded
  // before the wait for the kernel before this one.
  auto load_gains = [&] {
#pragma unroll
    for (int k = 0; k < kWideNormPerThread; ++k) {
      const int i = threadIdx.x + k * kNormBlock;
      g[k] = i < dim ? w[i] : 0.0f;
    }
  };
  if (weights_early_wanted) load_gains();
  begin_kernel();
  if (!weights_early_wanted) load_gains();
#pragma unroll
  for (int k = 0; k < kWideNormPerThread; ++k) {
    const int i = threadIdx.x + k * kNormBlock;
    x[k] = i < dim ? hr[i] : 0.0f;
    r[k] = residual != nullptr && i < dim ? residual[row * dim + i] : 0.0f;
  }
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kWideNormPerThread; ++k) {
    const int i = threadIdx.x + k * kNormBlock;
    if (i >= dim) continue;
    if (residual != nullptr) {
      x[k] = __fadd_rn(x[k], r[k]);
      hr[i] = x[k];
    }
    s = __fmaf_rn(x[k], x[k], s);
  }
  s = warp_sum(s);
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  const float total = warp_sum(warp_sums[lane]);  // kNormBlock / kWarp == kWarp
  const float mean = __fdiv_rn(total, static_cast<float>(dim));
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  const int n_blocks = dim / 32;
#pragma unroll
  for (int k = 0; k < kWideNormPerThread; ++k) {
    const int i = threadIdx.x + k * kNormBlock;
    if (i >= dim) continue;  // the whole warp (dim is a multiple of 32)
    const float y = __fmul_rn(__fmul_rn(x[k], scale), g[k]);
    x[k] = y;
    yr[i] = y;
    if (q != nullptr) {
      const int b = i / 32;
      const int64_t at = q8_block_index(row, b, gridDim.x, n_blocks, block_major);
      quantize_block(y, lane, q + at * 32, scales + at);
    }
  }
  if (k8.q == nullptr) return;  // the same for the whole block
#pragma unroll
  for (int k = 0; k < kWideNormPerThread; ++k) {
    const int i = threadIdx.x + k * kNormBlock;
    const float amax = warp_max(i < dim ? fabsf(x[k]) : 0.0f);
    if (lane == 0) warp_amax[k][warp] = amax;
  }
  __syncthreads();
  const int first = warp / kSuperBlockWarps * kSuperBlockWarps;
#pragma unroll
  for (int k = 0; k < kWideNormPerThread; ++k) {
    const int i = threadIdx.x + k * kNormBlock;
    if (i >= dim) continue;  // the whole super-block
    store_q8k_value(x[k], super_block_amax(&warp_amax[k][first]), row * dim + i, lane, k8);
  }
}
static_assert(kNormBlock / kWarp == kWarp, "the warps' sums are one warp's lanes");

// 1 / sqrt(mean(h²) + eps) over a row of dim values, as add_rmsnorm_wide_kernel
// computes it (without a residual), its 1024 threads' steps taken by the
// block's `threads` threads between them (thread t those of t, t + threads,
// ...). Every thread of the block must call it. kFromL2: h is read past the
// L1 cache (other blocks of the same grid wrote it).
template <bool kFromL2 = false>
__device__ float normalized_row_scale(const float* h, int dim, float eps, int threads) {
  __shared__ float warp_sums[kNormBlock / kWarp];
  const int lane = threadIdx.x % kWarp;
  for (int t = threadIdx.x; t < kNormBlock; t += threads) {  // the same count on every thread
    float s = 0.0f;
    for (int k = 0; k < kWideNormPerThread; ++k) {
      const int i = t + k * kNormBlock;
      if (i >= dim) break;
      const float x = kFromL2 ? __ldcg(h + i) : h[i];
      s = __fmaf_rn(x, x, s);
    }
    s = warp_sum(s);
    if (lane == 0) warp_sums[t / kWarp] = s;
  }
  __syncthreads();
  const float total = warp_sum(warp_sums[lane]);  // kNormBlock / kWarp == kWarp
  const float mean = __fdiv_rn(total, static_cast<float>(dim));
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

// x · scale · gain per value, as add_rmsnorm_wide_kernel writes a row.
__device__ float4 normalized4(float4 x, float scale, float4 gain) {
  return make_float4(
      __fmul_rn(__fmul_rn(x.x, scale), gain.x), __fmul_rn(__fmul_rn(x.y, scale), gain.y),
      __fmul_rn(__fmul_rn(x.z, scale), gain.z), __fmul_rn(__fmul_rn(x.w, scale), gain.w));
}

// One warp per block of 32 values, one lane per value; n rows of nb blocks.
__global__ void quantize_q8_kernel(const float* x, int n, int nb, int8_t* q, float* scales,
                                   bool block_major) {
  begin_kernel();
  const int64_t block = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (block >= static_cast<int64_t>(n) * nb) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t at = q8_block_index(block / nb, block % nb, n, nb, block_major);
  quantize_block(x[block * 32 + lane], lane, q + at * 32, scales + at);
}

// A Q8_0/Q4_0 weight block's quants as loaded (32 or 16 bytes, the second
// word unused for Q4_0), unpacked by unpack_raw_block into int8 values.
struct RawBlock {
  int4 a, b;
};
template <WeightKind kKind>
__device__ RawBlock load_raw_block(const DeviceMatrix& w, int64_t block) {
  RawBlock raw;
  if constexpr (kKind == WeightKind::kQ8_0) {
    const int4* src = reinterpret_cast<const int4*>(static_cast<const int8_t*>(w.q) + block * 32);
    raw.a = src[0];
    raw.b = src[1];
  } else {
    raw.a = *reinterpret_cast<const int4*>(static_cast<const uint8_t*>(w.q) + block * 16);
  }
  return raw;
}
template <WeightKind kKind>
__device__ void unpack_raw_block(const RawBlock& raw, int (&out)[8]) {
  if constexpr (kKind == WeightKind::kQ8_0) {
    out[0] = raw.a.x, out[1] = raw.a.y, out[2] = raw.a.z, out[3] = raw.a.w;
    out[4] = raw.b.x, out[5] = raw.b.y, out[6] = raw.b.z, out[7] = raw.b.w;
  } else {
    const int words[4] = {raw.a.x, raw.a.y, raw.a.z, raw.a.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[i] = static_cast<int>(__vsub4(words[i] & 0x0F0F0F0F, 0x08080808));
      out[4 + i] = static_cast<int>(
          __vsub4((static_cast<unsigned>(words[i]) >> 4) & 0x0F0F0F0F, 0x08080808));
    }
  }
}

// Eight 32-bit words of a Q8_0/Q4_0 weight block: its 32 values as int8, in order.
template <WeightKind kKind>
__device__ void load_block_q(const DeviceMatrix& w, int64_t block, int (&out)[8]) {
  unpack_raw_block<kKind>(load_raw_block<kKind>(w, block), out);
}

// The exact integer dot product of a block's 32 weight quants (eight words)
// with 32 activation quants (two 16-byte words), added to `sum`.
__device__ int block_dot_s8(const int (&wq)[8], const int4& a, const int4& c, int sum = 0) {
  sum = __dp4a(wq[0], a.x, sum);
  sum = __dp4a(wq[1], a.y, sum);
  sum = __dp4a(wq[2], a.z, sum);
  sum = __dp4a(wq[3], a.w, sum);
  sum = __dp4a(wq[4], c.x, sum);
  sum = __dp4a(wq[5], c.y, sum);
  sum = __dp4a(wq[6], c.z, sum);
  sum = __dp4a(wq[7], c.w, sum);
  return sum;
}

// Integer block sums become floats without the conversion unit: a sum s with
// |s| < 2^22, such as a Q8_0/Q4_0 block's integer dot product (at most
// 32 · 127 · 127), added to the bits of 1.5 · 2^23 gives the float
// 1.5 · 2^23 + s, and subtracting 1.5 · 2^23 again is exact. Hopper converts 16
// values a clock an SM against 64 integer and 128 float operations, and the
// tensor-core kernels convert four sums an mma: at a few activation rows that
// unit, not memory, can set their pace. The dp4a chains and the mmas start
// their accumulators at the magic bits, so that their own adds do the first step.
constexpr int kSumMagicBits = 0x4B400000;  // 1.5 · 2^23
// Q4_0's tensor-core operands are 16 times its values (q4_high_nibbles_as_16x),
// so their sum c is 16 times the block's, with |c| at most 16 · 32 · 8 · 127 <
// 2^22: added to the bits of 1.5 · 2^19, whose last bit is worth 1/16, it gives
// 1.5 · 2^19 + c / 16 exactly.
constexpr int kSum16MagicBits = 0x49400000;  // 1.5 · 2^19
template <WeightKind kKind>
constexpr int kMmaSumMagicBits = kKind == WeightKind::kQ4_0 ? kSum16MagicBits : kSumMagicBits;

// The float of an integer sum accumulated onto `magic_bits` (biased =
// magic_bits + s), the magic number taken out again.
__device__ __forceinline__ float biased_sum_to_float(int biased, int magic_bits) {
  return __fsub_rn(__int_as_float(biased), __int_as_float(magic_bits));
}

// A block's exact integer dot product (block_dot_s8) as a float: the dp4a
// chain starts at the magic bits, so that its own adds do the integer step.
__device__ __forceinline__ float block_dot_float(const int (&wq)[8], const int4& a, const int4& c) {
  return biased_sum_to_float(block_dot_s8(wq, a, c, kSumMagicBits), kSumMagicBits);
}

// y[m, n] for rows m of [m0, m0 + kR) below M and one weight row n per warp.
// Each lane reduces the blocks lane, lane + 32, ... in order; the lanes' sums
// are then added by warp_sum. Nothing in a row's arithmetic depends on kR or M.
// The weight row of a group that this warp computes: its matrix, output and row.
__device__ bool warp_row(const MatmulGroup& g, DeviceMatrix& w, float*& y, int64_t& n) {
  n = static_cast<int64_t>(blockIdx.x) * kMatmulWarps + threadIdx.x / kWarp;
  int part = 0;
  while (part + 1 < g.count && n >= g.w[part].n_out) n -= g.w[part++].n_out;
  w = part == 0 ? g.w[0] : part == 1 ? g.w[1] : g.w[2];
  y = part == 0 ? g.y[0] : part == 1 ? g.y[1] : g.y[2];
  return n < w.n_out;
}

template <WeightKind kKind, int kR>
__global__ void matmul_q_kernel(MatmulGroup g, const int8_t* xq, const float* xd, int M) {
  begin_kernel();
  const int lane = threadIdx.x % kWarp;
  DeviceMatrix w;
  float* y;
  int64_t n;
  if (!warp_row(g, w, y, n)) return;
  const int64_t nb = w.n_in / 32;
  const __half* w_scales = static_cast<const __half*>(w.scales) + n * nb;
  for (int m0 = 0; m0 < M; m0 += kR) {
    float acc[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[r] = 0.0f;
      // Unrolled so that several blocks' loads are in flight; the sums stay in order.
#pragma unroll 4
    for (int64_t b = lane; b < nb; b += kWarp) {
      int wq[8];
      load_block_q<kKind>(w, n * nb + b, wq);
      const float dw = __half2float(w_scales[b]);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (m0 + r >= M) break;
        const int64_t xb = static_cast<int64_t>(m0 + r) * nb + b;
        const int4* xs = reinterpret_cast<const int4*>(xq + xb * 32);
        const float s = block_dot_float(wq, xs[0], xs[1]);
        acc[r] = __fmaf_rn(__fmul_rn(dw, xd[xb]), s, acc[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      if (m0 + r >= M) break;
      const float total = warp_sum(acc[r]);
      if (lane == 0) y[static_cast<int64_t>(m0 + r) * w.n_out + n] = total;
    }
  }
}

__device__ int64_t kv_row(const AttentionRow& r, int layer, int32_t slot, int kv_dim);

// Tile `index` of `rows` weight rows over a group's matrices, one matrix
// after another: its matrix, output, the matrix's index in the group and the
// tile's index in that matrix.
__device__ bool tile_of_part(const MatmulGroup& g, int rows, int64_t index, DeviceMatrix& w,
                             float*& y, int& part, int64_t& tile) {
  tile = index;
  part = 0;
  while (part + 1 < g.count) {
    const int64_t tiles = (g.w[part].n_out + rows - 1) / rows;
    if (tile < tiles) break;
    tile -= tiles;
    ++part;
  }
  w = part == 0 ? g.w[0] : part == 1 ? g.w[1] : g.w[2];
  y = part == 0 ? g.y[0] : part == 1 ? g.y[1] : g.y[2];
  return tile * rows < w.n_out;
}

// The tile of `rows` weight rows of a group that this block computes.
__device__ bool block_tile_of_part(const MatmulGroup& g, int rows, DeviceMatrix& w, float*& y,
                                   int& part, int64_t& tile) {
  return tile_of_part(g, rows, blockIdx.x, w, y, part, tile);
}

// PARSPEC_CUDA_FUSE=rope: q, k and v as one matmul whose blocks add the
// biases, rotate q and k and write k and v to the rows' cache slots, as
// launch_bias_rope_store does after the matmul (the same steps per value).
// A block then holds both values of each rotated pair: with neox rotation a
// tile of q or k takes 8 rows of a head's first half and their partners in
// the second half; otherwise (and for v) 16 consecutive rows.
struct QkvStore {
  const float *bias_q = nullptr, *bias_k = nullptr, *bias_v = nullptr;  // null: none
  const float2* angles = nullptr;  // cos and sin per (pass row, pair): launch_rope_angles'
  const AttentionRow* rows = nullptr;
  float* q = nullptr;  // the rotated q rows
  int layer = 0;
  HeadShape shape;
};

// The output row of matrix `part` (0 q, 1 k, 2 v) that row r (0..15) of its
// tile `tile` holds.
__device__ int64_t qkv_tile_row(const HeadShape& s, int part, int64_t tile, int r) {
  if (!s.neox || part == 2) return 16 * tile + r;
  const int per_head = s.head_dim / 16;
  const int64_t head = tile / per_head;
  const int in_head = static_cast<int>(tile % per_head);
  return head * s.head_dim + (r < 8 ? 8 * in_head + r : s.head_dim / 2 + 8 * in_head + r - 8);
}

// The tile's values vals[r * stride + m] (its 16 rows, M activation rows from
// pass row m_first) with biases, rotated (q, k) and stored (q to st.q, k and v
// to the cache), by `threads` threads.
__device__ void store_qkv_tile(const QkvStore& st, int part, int64_t tile, int64_t n_out,
                               const float* vals, int stride, int M, int m_first, int threads) {
  const HeadShape& s = st.shape;
  // Chosen, not indexed: an array indexed at run time would be copied to local memory.
  const float* bias = part == 0 ? st.bias_q : part == 1 ? st.bias_k : st.bias_v;
  for (int e = threadIdx.x; e < 16 * M; e += threads) {
    const int r = e / M, m = e % M;
    const int64_t j = qkv_tile_row(s, part, tile, r);
    if (j >= n_out) continue;
    const int row = m_first + m;
    float x = vals[r * stride + m];
    if (bias != nullptr) x = __fadd_rn(x, bias[j]);
    if (part < 2) {
      const int rp = s.neox ? r ^ 8 : r ^ 1;  // the tile row of the pair's other value
      const int64_t jp = qkv_tile_row(s, part, tile, rp);
      float xp = vals[rp * stride + m];
      if (bias != nullptr) xp = __fadd_rn(xp, bias[jp]);
      const int i = static_cast<int>(j % s.head_dim);
      const bool first = s.neox ? i < s.head_dim / 2 : i % 2 == 0;
      const int pair = s.neox ? (first ? i : i - s.head_dim / 2) : i / 2;
      const float2 angle = st.angles[static_cast<int64_t>(row) * (s.rope_dims / 2) + pair];
      const float x0 = first ? x : xp, x1 = first ? xp : x;
      x = first ? __fsub_rn(__fmul_rn(x0, angle.x), __fmul_rn(x1, angle.y))
                : __fadd_rn(__fmul_rn(x0, angle.y), __fmul_rn(x1, angle.x));
    }
    if (part == 0) {
      st.q[static_cast<int64_t>(row) * s.n_head * s.head_dim + j] = x;
    } else {
      const AttentionRow r_row = st.rows[row];
      const int kv_dim = s.n_head_kv * s.head_dim;
      (part == 1 ? r_row.k : r_row.v)[kv_row(r_row, st.layer, r_row.write_slot, kv_dim) + j] = x;
    }
  }
}

// The tensor-core path for Q8_0/Q4_0 weights (the default; PARSPEC_CUDA_MATMUL=warp
// selects matmul_q_kernel above). A thread block computes kMmaRows weight rows for
// every activation row of the launch: its kMmaWarps warps split the K blocks (warp w
// takes blocks w, w + kMmaWarps, ...), and for each block one int8 mma.sync per 8
// activation rows gives the block's exact integer dot products, which each thread
// scales and accumulates in block order; the warps' partial sums are then added in
// warp order. Integer sums are exact and every other step is fixed by (row, output),
// so a value never depends on how many rows share the launch.
// 16 warps (2 blocks of 512 threads per SM at one activation row) keep
// enough of the weights in flight for a decode step; 4 tiles keep a block's
// registers within an SM's.
constexpr int kMmaRows = 16;     // weight rows per block: the mma's M
constexpr int kMmaWarps = 16;    // warps splitting K
constexpr int kMmaMaxTiles = 4;  // activation rows per launch: up to 4 tiles of 8

// 16×8×32 int8 multiply-add: A row-major (the weights' 16 rows × one block of 32),
// B column-major (one block of 8 activation rows), C += A·B in int32.
__device__ void mma_s8(int (&c)[4], const int (&a)[4], const int (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // built for sm_80 and later only
#endif
}

// One Q8_0/Q4_0 block's int8 mma (A: weights, B: activations) and its four
// sums as floats: the accumulators start at the magic bits, so that the tensor
// cores' own add stands in for an integer add a sum (exact: the biased sums
// stay far inside int32).
template <WeightKind kKind>
__device__ __forceinline__ void mma_block_sums(const int (&a)[4], const int (&b)[2],
                                               float (&sums)[4]) {
  constexpr int kBits = kMmaSumMagicBits<kKind>;
  int c[4] = {kBits, kBits, kBits, kBits};
  mma_s8(c, a, b);
#pragma unroll
  for (int i = 0; i < 4; ++i) sums[i] = biased_sum_to_float(c[i], kBits);
}

// silu(g) · u, with silu(g) = g·σ(g) and σ from an exponential of −|g|
// (never overflows): the one expression of SwiGLU, wherever it is computed.
__device__ __forceinline__ float swiglu_value(float g, float u) {
  const float t = expf(-fabsf(g));
  const float sigma =
      g >= 0.0f ? __fdiv_rn(1.0f, __fadd_rn(1.0f, t)) : __fdiv_rn(t, __fadd_rn(1.0f, t));
  return __fmul_rn(__fmul_rn(g, sigma), u);
}

// The kMmaWarps partial sums partial[0..][r][m] added in order: how every
// tensor-core matmul (and the kernels with its bits) ends a value.
template <class Partials>
__device__ __forceinline__ float sum_in_warp_order(const Partials& partial, int r, int m) {
  float total = partial[0][r][m];
#pragma unroll
  for (int v = 1; v < kMmaWarps; ++v) total = __fadd_rn(total, partial[v][r][m]);
  return total;
}

// A warp's C fragments of kTiles tiles (rows gid and gid + 8, activation
// rows 8i + 2t and 8i + 2t + 1) into its slice of partial_s.
template <int kTiles>
__device__ __forceinline__ void store_warp_accumulators(
    const float (&acc)[kTiles][4], float (&partial_s)[kMmaWarps][kMmaRows][8 * kTiles], int warp,
    int gid, int t) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const int m0 = 8 * i + 2 * t;
    partial_s[warp][gid][m0] = acc[i][0];
    partial_s[warp][gid][m0 + 1] = acc[i][1];
    partial_s[warp][gid + 8][m0] = acc[i][2];
    partial_s[warp][gid + 8][m0 + 1] = acc[i][3];
  }
}

// The end of a tensor-core matmul block: each warp's accumulators (C
// fragments of kTiles tiles: rows gid and gid + 8, activation rows 8i + 2t
// and 8i + 2t + 1) through shared memory, then each (row, activation row)
// the sum of the kMmaWarps warps' values in warp order, written to y.
template <int kTiles>
__device__ __forceinline__ void add_warp_sums(const float (&acc)[kTiles][4],
                                              float (&partial_s)[kMmaWarps][kMmaRows][8 * kTiles],
                                              int warp, int gid, int t, int64_t tile_row0,
                                              int64_t n_out, int M, float* y,
                                              bool accumulate = false) {
  store_warp_accumulators<kTiles>(acc, partial_s, warp, gid, t);
  __syncthreads();
  for (int e = threadIdx.x; e < kMmaRows * 8 * kTiles; e += kMmaWarps * kWarp) {
    const int r = e / (8 * kTiles), m = e % (8 * kTiles);
    const int64_t row = tile_row0 + r;
    if (m >= M || row >= n_out) continue;
    const float sum = sum_in_warp_order(partial_s, r, m);
    float& out = y[static_cast<int64_t>(m) * n_out + row];
    out = accumulate ? __fadd_rn(out, sum) : sum;  // accumulate: y += x · wᵀ, as launch_add adds
  }
}

// add_warp_sums for a block of 8 gate rows (the mma's rows 0..7) and their 8
// up rows (8..15): each output's two sums, added in warp order as there, go
// through swiglu_value into y at the gate row.
template <int kTiles>
__device__ __forceinline__ void add_gated_warp_sums(
    const float (&acc)[kTiles][4], float (&partial_s)[kMmaWarps][kMmaRows][8 * kTiles], int warp,
    int gid, int t, int64_t out0, int64_t n_out, int M, float* y) {
  store_warp_accumulators<kTiles>(acc, partial_s, warp, gid, t);
  __syncthreads();
  for (int e = threadIdx.x; e < (kMmaRows / 2) * 8 * kTiles; e += kMmaWarps * kWarp) {
    const int r = e / (8 * kTiles), m = e % (8 * kTiles);
    const int64_t out = out0 + r;
    if (m >= M || out >= n_out) continue;
    y[static_cast<int64_t>(m) * n_out + out] =
        swiglu_value(sum_in_warp_order(partial_s, r, m), sum_in_warp_order(partial_s, r + 8, m));
  }
}

// A Q4_0 weight's value v - 8 enters the tensor cores as the int8
// 16 · (v - 8): its nibble v in a byte's high half, with the top bit flipped
// (one and-xor, after a shift for a low nibble, where subtracting 8 from each
// byte takes four operations). The block sums are then 16 times the values'
// products, which mma_sum_to_float takes back exactly.
__device__ __forceinline__ int q4_high_nibbles_as_16x(unsigned word) {
  return static_cast<int>((word & 0xF0F0F0F0u) ^ 0x80808080u);
}

// In the wide order (block-major activations, B read 8 contiguous bytes a
// lane), lane t's two A words of one weight block: its elements 8t..8t+3 in
// `lo` and 8t+4..8t+7 in `hi`, as int8 (Q4_0: 16 times them). For Q4_0,
// elements 8t.. are the low nibbles of bytes 8t.. for t < 2, the high nibbles
// of bytes 8(t - 2).. after (byte j holds element j low and j + 16 high).
template <WeightKind kKind>
__device__ __forceinline__ void wide_a_words(const uint8_t* block, int t, int& lo, int& hi) {
  if constexpr (kKind == WeightKind::kQ8_0) {
    const int2 src = *reinterpret_cast<const int2*>(block + 8 * t);
    lo = src.x;
    hi = src.y;
  } else {
    const uint2 src = *reinterpret_cast<const uint2*>(block + 8 * (t & 1));
    const int up = 4 - 4 * (t >> 1);  // a low nibble moves up to the high half
    lo = q4_high_nibbles_as_16x(src.x << up);
    hi = q4_high_nibbles_as_16x(src.y << up);
  }
}

// The A fragment of weight rows r0 (= 16-row tile base + g) and r0 + 8 for block b:
// PTX's m16n8k32 .s8 layout puts K bytes 4t..4t+3 of row g in a[0], of row g + 8 in
// a[1], and K bytes 16 + 4t.. of rows g and g + 8 in a[2] and a[3] (t: lane % 4).
// kWide (block-major activations, whose B fragments are read 8 contiguous bytes
// per lane): K index 4t + j is element 8t + j of the block and 16 + 4t + j is
// element 8t + 4 + j; the integer dot product is the same sum in another order,
// so exactly the same. Rows at or past n_out read nothing and give zeros.
template <WeightKind kKind, bool kWide>
__device__ void load_a_fragment(const DeviceMatrix& w, int64_t row0, int64_t nb, int64_t b, int t,
                                int (&a)[4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + 8 * h;
    if (row >= w.n_out) {
      a[h] = a[2 + h] = 0;
      continue;
    }
    if constexpr (kWide) {
      const int64_t block_bytes = kKind == WeightKind::kQ8_0 ? 32 : 16;
      wide_a_words<kKind>(static_cast<const uint8_t*>(w.q) + (row * nb + b) * block_bytes, t, a[h],
                          a[2 + h]);
    } else if constexpr (kKind == WeightKind::kQ8_0) {
      const int* src =
          reinterpret_cast<const int*>(static_cast<const int8_t*>(w.q) + (row * nb + b) * 32);
      a[h] = src[t];
      a[2 + h] = src[4 + t];
    } else {
      // Byte j of a Q4_0 block holds element j (low nibble) and j + 16 (high).
      const uint8_t* block = static_cast<const uint8_t*>(w.q) + (row * nb + b) * 16;
      const unsigned word = *reinterpret_cast<const unsigned*>(block + 4 * t);
      a[h] = q4_high_nibbles_as_16x(word << 4);
      a[2 + h] = q4_high_nibbles_as_16x(word);
    }
  }
}

// The tile of `rows` weight rows of a group that this block computes: its
// matrix, output and first row.
__device__ bool block_tile(const MatmulGroup& g, DeviceMatrix& w, float*& y, int64_t& row0,
                           int rows = kMmaRows) {
  int part = 0;
  int64_t tile = 0;
  const bool has_rows = block_tile_of_part(g, rows, w, y, part, tile);
  row0 = tile * rows;
  return has_rows;
}

// kBlockMajor: the activations are block-major (q8_block_index) over n_total
// rows, of which this launch takes M_all from m_first; otherwise row after
// row from xq_all (n_total and m_first unused). kPipelined (block-major only,
// PARSPEC_CUDA_MMA=pipelined): where a tile has all 16 rows and a warp's blocks
// come in whole groups of four, a group's loads are all issued before its first
// mma, in code without branches between them (the same steps in the same order).
template <WeightKind kKind, int kTiles, bool kBlockMajor, bool kPipelined = false>
// One activation tile: registers for two blocks per SM (the decode step).
__global__ void __launch_bounds__(kMmaWarps* kWarp, kTiles == 1 ? 2 : 1)
    matmul_mma_kernel(MatmulGroup g, const int8_t* xq_all, const float* xd_all, int M_all,
                      int n_total, int m_first) {
  __shared__ float partial_s[kMmaWarps][kMmaRows][8 * kTiles];
  DeviceMatrix w;
  float* y_all;
  int64_t tile_row0;
  const bool has_tile = block_tile(g, w, y_all, tile_row0);  // the same for the whole block
  if (has_tile) prefetch_rows_early(w, kMmaRows, [&](int r) { return tile_row0 + r; });
  begin_kernel();
  if (!has_tile) return;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int gid = lane / 4, t = lane % 4;
  const int64_t nb = w.n_in / 32;
  const int64_t row_a = tile_row0 + gid, row_b = row_a + 8;
  const __half* scales = static_cast<const __half*>(w.scales);

  // More than 8·kTiles activation rows (a prefill in one launch) go through
  // in slices of that many, one after another: each slice's rows take exactly
  // the steps of a launch of their own, and the block's weights stay in cache
  // from one slice to the next instead of being read again by another launch.
  for (int m_base = 0; m_base < M_all; m_base += 8 * kTiles) {
    const int M = min(8 * kTiles, M_all - m_base);
    const int8_t* xq = kBlockMajor ? xq_all : xq_all + static_cast<int64_t>(m_base) * nb * 32;
    const float* xd = kBlockMajor ? xd_all : xd_all + static_cast<int64_t>(m_base) * nb;
    const int64_t m_at = static_cast<int64_t>(m_first) + m_base;  // block-major: first row
    float* y = y_all + static_cast<int64_t>(m_base) * w.n_out;
    if (m_base > 0) __syncthreads();  // the previous slice's partial sums are read

    float acc[kTiles][4];
#pragma unroll
    for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

    // Block b's products for every activation tile, added to the accumulators.
    auto step = [&](int64_t b, float dw_a, float dw_b) {
      int a[4];
      load_a_fragment<kKind, kBlockMajor>(w, row_a, nb, b, t, a);
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        // B: activation row 8i + gid; K bytes 4t.. and 16 + 4t.. of block b
        // (block-major: bytes 8t.., in load_a_fragment's wide order).
        const int m_b = 8 * i + gid;
        int bf[2] = {0, 0};
        if (m_b < M) {
          if constexpr (kBlockMajor) {
            // The 8 rows' blocks lie side by side: a warp reads 256 contiguous bytes.
            const int2 src =
                *reinterpret_cast<const int2*>(xq + (b * n_total + m_at + m_b) * 32 + 8 * t);
            bf[0] = src.x;
            bf[1] = src.y;
          } else {
            const int* src =
                reinterpret_cast<const int*>(xq + (static_cast<int64_t>(m_b) * nb + b) * 32);
            bf[0] = src[t];
            bf[1] = src[4 + t];
          }
        }
        float sums[4];
        mma_block_sums<kKind>(a, bf, sums);
        // C: rows gid and gid + 8, activation rows 8i + 2t and 8i + 2t + 1.
        const int m0 = 8 * i + 2 * t;
        const int64_t d0 =
            kBlockMajor ? b * n_total + m_at + m0 : static_cast<int64_t>(m0) * nb + b;
        const int64_t d1 = kBlockMajor ? d0 + 1 : d0 + nb;
        const float dx0 = m0 < M ? xd[d0] : 0.0f;
        const float dx1 = m0 + 1 < M ? xd[d1] : 0.0f;
        acc[i][0] = __fmaf_rn(__fmul_rn(dw_a, dx0), sums[0], acc[i][0]);
        acc[i][1] = __fmaf_rn(__fmul_rn(dw_a, dx1), sums[1], acc[i][1]);
        acc[i][2] = __fmaf_rn(__fmul_rn(dw_b, dx0), sums[2], acc[i][2]);
        acc[i][3] = __fmaf_rn(__fmul_rn(dw_b, dx1), sums[3], acc[i][3]);
      }
    };

    // Several blocks' loads in flight per warp, fewer when many activation tiles
    // hold registers: a decode step is bound by how much memory is being read at
    // once. Unrolling keeps each sum's order.
    // The same on every lane: mma.sync and the shuffles need the whole warp.
    const bool whole_groups = nb % (4 * kMmaWarps) == 0 && tile_row0 + kMmaRows <= w.n_out;
    if (kPipelined && kBlockMajor && whole_groups) {
      for (int64_t b0 = warp; b0 < nb; b0 += 4 * kMmaWarps) {
        const int64_t bt = b0 + static_cast<int64_t>(t) * kMmaWarps;
        const __half sa = scales[row_a * nb + bt], sb = scales[row_b * nb + bt];
        int a[4][4];
        int bf[4][kTiles][2];
        float dx[4][kTiles][2];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t b = b0 + static_cast<int64_t>(j) * kMmaWarps;
          load_a_fragment<kKind, true>(w, row_a, nb, b, t, a[j]);
#pragma unroll
          for (int i = 0; i < kTiles; ++i) {
            const int m_b = 8 * i + gid, m0 = 8 * i + 2 * t;
            const int2 src =
                m_b < M
                    ? *reinterpret_cast<const int2*>(xq + (b * n_total + m_at + m_b) * 32 + 8 * t)
                    : make_int2(0, 0);
            bf[j][i][0] = src.x;
            bf[j][i][1] = src.y;
            const int64_t d0 = b * n_total + m_at + m0;
            dx[j][i][0] = m0 < M ? xd[d0] : 0.0f;
            dx[j][i][1] = m0 + 1 < M ? xd[d0 + 1] : 0.0f;
          }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float dw_a = __shfl_sync(0xffffffffu, __half2float(sa), gid * 4 + j);
          const float dw_b = __shfl_sync(0xffffffffu, __half2float(sb), gid * 4 + j);
#pragma unroll
          for (int i = 0; i < kTiles; ++i) {
            float sums[4];
            mma_block_sums<kKind>(a[j], bf[j][i], sums);
            acc[i][0] = __fmaf_rn(__fmul_rn(dw_a, dx[j][i][0]), sums[0], acc[i][0]);
            acc[i][1] = __fmaf_rn(__fmul_rn(dw_a, dx[j][i][1]), sums[1], acc[i][1]);
            acc[i][2] = __fmaf_rn(__fmul_rn(dw_b, dx[j][i][0]), sums[2], acc[i][2]);
            acc[i][3] = __fmaf_rn(__fmul_rn(dw_b, dx[j][i][1]), sums[3], acc[i][3]);
          }
        }
      }
    } else if constexpr (kBlockMajor) {
      // The weight scales of four steps in one load: lane t reads its row's
      // scale for the group's step t (the four are 32 bytes apart), and each
      // step takes it from that lane.
      constexpr int kGroupUnroll = kTiles == 1 ? 2 : 1;
#pragma unroll kGroupUnroll
      for (int64_t b0 = warp; b0 < nb; b0 += 4 * kMmaWarps) {
        const int64_t bt = b0 + static_cast<int64_t>(t) * kMmaWarps;
        const float sa = bt < nb && row_a < w.n_out ? __half2float(scales[row_a * nb + bt]) : 0.0f;
        const float sb = bt < nb && row_b < w.n_out ? __half2float(scales[row_b * nb + bt]) : 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float dw_a = __shfl_sync(0xffffffffu, sa, gid * 4 + j);
          const float dw_b = __shfl_sync(0xffffffffu, sb, gid * 4 + j);
          const int64_t b = b0 + static_cast<int64_t>(j) * kMmaWarps;
          if (b < nb) step(b, dw_a, dw_b);  // the same on every lane
        }
      }
    } else {
      constexpr int kUnroll = kTiles == 1 ? 8 : kTiles == 2 ? 4 : 2;
#pragma unroll kUnroll
      for (int64_t b = warp; b < nb; b += kMmaWarps) {
        const float dw_a = row_a < w.n_out ? __half2float(scales[row_a * nb + b]) : 0.0f;
        const float dw_b = row_b < w.n_out ? __half2float(scales[row_b * nb + b]) : 0.0f;
        step(b, dw_a, dw_b);
      }
    }
    add_warp_sums<kTiles>(acc, partial_s, warp, gid, t, tile_row0, w.n_out, M, y);
  }
}

// Thread blocks of `rows` weight rows that a group's matrices make.
__host__ __device__ int weight_row_tiles(const MatmulGroup& g, int rows = kMmaRows) {
  int64_t tiles = 0;
  for (int i = 0; i < g.count; ++i) tiles += (g.w[i].n_out + rows - 1) / rows;
  return static_cast<int>(tiles);
}

// Rows [m_first, m_first + n) of n_total; xq and xd point at the first
// activation row of the launch when they are row-major, at row 0 when block-major.
template <WeightKind kKind, int kTiles>
void launch_mma(const MatmulGroup& g, const int8_t* xq, const float* xd, int n, bool block_major,
                int n_total, int m_first, cudaStream_t stream) {
  const int tiles = weight_row_tiles(g);
  static const bool pipelined = env_is("PARSPEC_CUDA_MMA", "pipelined");
  if (block_major && pipelined)
    launch(matmul_mma_kernel<kKind, kTiles, true, true>, tiles, kMmaWarps * kWarp, 0, stream, g, xq,
           xd, n, n_total, m_first);
  else if (block_major)
    launch(matmul_mma_kernel<kKind, kTiles, true>, tiles, kMmaWarps * kWarp, 0, stream, g, xq, xd,
           n, n_total, m_first);
  else
    launch(matmul_mma_kernel<kKind, kTiles, false>, tiles, kMmaWarps * kWarp, 0, stream, g, xq, xd,
           n, n_total, m_first);
}

// PARSPEC_CUDA_MMA=stream: the tensor-core matmul with its operands streamed
// into shared memory by cp.async, several rounds ahead of the mmas, so that
// the loads in flight do not depend on how the compiler schedules them or on
// the registers they would take. A round is 16 consecutive K blocks of the
// block's 16 weight rows (each row's 16 blocks are one contiguous run) with
// the activations and scales they meet. Warp w takes the blocks of chains w
// and w + 8 (block b belongs to chain b mod 16; with 64 weight rows a block,
// 16 warps one chain each); each chain adds its blocks'
// products in block order with the tensor-core kernel's expression, and the
// 16 chains' sums are then added in chain order, as that kernel adds its 16
// warps'. So every value has the same bits as there.
constexpr int kStreamWarps = 8;
constexpr int kStreamChains = 16;  // the K-splitting warps of the tensor-core kernel
constexpr int kStreamStages = 4;   // rounds in shared memory: one computed, the rest loading
static_assert(kStreamChains == kMmaWarps && kStreamChains == 2 * kStreamWarps,
              "a warp takes two of the tensor-core kernel's chains");
// The warps of a block of kW tiles of 16 weight rows: 8 (two chains each),
// and 16 (one chain each) for 4 tiles, whose accumulators would not fit twice.
template <int kW>
constexpr int kStreamWarpsFor = kW >= 4 ? 2 * kStreamWarps : kStreamWarps;
// Blocks an SM should hold at once: the registers each thread may take.
template <int kW, int kTiles>
constexpr int kStreamMinBlocks = kW >= 4       ? 1
                                 : kTiles == 1 ? 4
                                               : 2;

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// kBytes (16 or 4) from global to shared memory, zeros where `valid` is false.
template <int kBytes>
__device__ __forceinline__ void copy_async(void* dst, const void* src, bool valid) {
  static_assert(kBytes == 16 || kBytes == 4, "cp.async copies 16 bytes (.cg) or 4 (.ca)");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(dst)),
                 "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(shared_address(dst)),
                 "l"(src), "r"(valid ? 4 : 0)
                 : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Until at most `kPending` of this thread's groups are still in flight.
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
#endif
}

// The cp.async pipeline of the streamed kernels: issue(stage, position) copies
// a position's operands into one of kStages stages, kStages - 1 positions
// ahead of compute(stage, position), which takes the positions in order.
// Every thread of the block calls it; all copies have landed when it returns.
template <int kStages, class Issue, class Compute>
__device__ __forceinline__ void each_position_streamed(int count, Issue&& issue,
                                                       Compute&& compute) {
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) issue(s, s);
    copy_async_commit();
  }
  for (int p = 0; p < count; ++p) {
    copy_async_wait<kStages - 2>();  // this thread's copies of position p have landed
    __syncthreads();  // everyone's have, and the stage refilled below is no longer read
    const int ahead = p + kStages - 1;
    if (ahead < count) issue(ahead % kStages, ahead);
    copy_async_commit();
    compute(p % kStages, p);
  }
  copy_async_wait<0>();
}

// The shared-memory layout of one round of kW tiles of 16 weight rows: kBlocks
// K blocks of each (16, one a chain; fewer where blocks of the grid split the
// chains). Rows of quants are padded so that the 8 rows a warp reads at once
// fall in different banks.
template <WeightKind kKind, int kTiles, int kW, int kBlocks = 16>
struct StreamStage {
  static constexpr int kQuantBytes = kKind == WeightKind::kQ8_0 ? 32 : 16;
  static constexpr int kQuantRow = (kBlocks + 1) * kQuantBytes;
  static constexpr int kScaleRow = 2 * kBlocks + 4;  // kBlocks halves, padded by a word
  static constexpr int kWeightRows = kMmaRows * kW;
  static constexpr int kRows = 8 * kTiles;  // activation rows
  static constexpr int kQuants = kWeightRows * kQuantRow;
  static constexpr int kScales = kWeightRows * kScaleRow;
  static constexpr int kActs = kBlocks * kRows * 32;
  static constexpr int kActScales = kBlocks * kRows * 4;
  static constexpr int kBytes = kQuants + kScales + kActs + kActScales;
  static constexpr int kAllBytes = kStreamStages * kBytes;
  // The 16 chains' sums of every (row, activation row), after the last round.
  static constexpr int kPartialBytes = kStreamChains * kWeightRows * kRows * 4;
  static_assert(kBlocks < 16 || kAllBytes >= kPartialBytes, "the sums reuse the stages' memory");
  static_assert(kQuants % 16 == 0 && kScales % 16 == 0 && kActs % 16 == 0, "16-byte copies");
};

// Which operands of a round issue_stream_round copies: the weights (a kernel
// may copy them before it waits for the kernel before it), the activations, or both.
enum class StreamParts { kAll, kWeights, kActivations };

// Round `round` of a streamed matmul's operands into the stage at `base`: the
// round's kBlocks blocks from block c0 of its 16 (the chains c0.. of the round)
// of weight rows row0.. of w (quants, then scales) and of activation rows
// first.. (M of them, block-major over n_total), zeros where a row or block is
// past the end. Every thread of the block (kThreads) takes part.
template <WeightKind kKind, int kTiles, int kW, int kThreads, int kBlocks = 16>
__device__ __forceinline__ void issue_stream_round(uint8_t* base, const DeviceMatrix& w,
                                                   int64_t row0, int64_t nb, int round,
                                                   const int8_t* xq, const float* xd, int M,
                                                   int64_t n_total, int64_t first, int c0 = 0,
                                                   StreamParts parts = StreamParts::kAll) {
  using Stage = StreamStage<kKind, kTiles, kW, kBlocks>;
  constexpr int R = Stage::kRows, kWeightRows = Stage::kWeightRows;
  const uint8_t* wq = static_cast<const uint8_t*>(w.q);
  const __half* ws = static_cast<const __half*>(w.scales);
  const int64_t b0 = static_cast<int64_t>(round) * 16 + c0;
  constexpr int kChunksPerRow = kBlocks * Stage::kQuantBytes / 16;
  uint8_t* scales = base + Stage::kQuants;
  uint8_t* acts = scales + Stage::kScales;
  if (parts != StreamParts::kActivations) {
#pragma unroll 1
    for (int e = threadIdx.x; e < kWeightRows * kChunksPerRow; e += kThreads) {
      const int r = e / kChunksPerRow, chunk = e % kChunksPerRow;
      const int64_t row = row0 + r;
      const int64_t b = b0 + chunk * 16 / Stage::kQuantBytes;
      const bool valid = row < w.n_out && b < nb;
      const uint8_t* src = valid ? wq + (row * nb + b0) * Stage::kQuantBytes + chunk * 16 : wq;
      copy_async<16>(base + r * Stage::kQuantRow + chunk * 16, src, valid);
    }
#pragma unroll 1
    for (int e = threadIdx.x; e < kWeightRows * (kBlocks / 2); e += kThreads) {
      const int r = e / (kBlocks / 2), pair = e % (kBlocks / 2);
      const int64_t row = row0 + r, b = b0 + 2 * pair;
      const bool valid = row < w.n_out && b < nb;  // nb is even: b + 1 < nb too
      copy_async<4>(scales + r * Stage::kScaleRow + 4 * pair, valid ? ws + row * nb + b : ws,
                    valid);
    }
  }
  if (parts == StreamParts::kWeights) return;
#pragma unroll 1
  for (int e = threadIdx.x; e < kBlocks * R * 2; e += kThreads) {
    const int c = e / (2 * R), m = e / 2 % R, half = e % 2;
    const int64_t b = b0 + c;
    const bool valid = m < M && b < nb;
    const int8_t* src = valid ? xq + (b * n_total + first + m) * 32 + 16 * half : xq;
    copy_async<16>(acts + (c * R + m) * 32 + 16 * half, src, valid);
  }
  uint8_t* act_scales = acts + Stage::kActs;
#pragma unroll 1
  for (int e = threadIdx.x; e < kBlocks * R; e += kThreads) {
    const int c = e / R, m = e % R;
    const int64_t b = b0 + c;
    const bool valid = m < M && b < nb;
    copy_async<4>(act_scales + (c * R + m) * 4, valid ? xd + b * n_total + first + m : xd, valid);
  }
}

// The block of chain c (its place in the round) from the stage at `base`: for
// each tile of weight rows and of activation rows, the mma and the products
// added into acc, as matmul_mma_kernel's step. gid, t: the lane's group and
// place in it, as the mma's fragments take them.
template <WeightKind kKind, int kTiles, int kW, int kBlocks = 16>
__device__ __forceinline__ void stream_step(const uint8_t* base, int c, int gid, int t,
                                            float (&acc)[kW][kTiles][4]) {
  using Stage = StreamStage<kKind, kTiles, kW, kBlocks>;
  constexpr int R = Stage::kRows;
  const uint8_t* acts = base + Stage::kQuants + Stage::kScales;
  const float* act_scales = reinterpret_cast<const float*>(acts + Stage::kActs);
  int bf[kTiles][2];
  float2 dx[kTiles];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const int2 src = *reinterpret_cast<const int2*>(acts + (c * R + 8 * i + gid) * 32 + 8 * t);
    bf[i][0] = src.x;
    bf[i][1] = src.y;
    dx[i] = *reinterpret_cast<const float2*>(act_scales + c * R + 8 * i + 2 * t);
  }
  const __half* scales = reinterpret_cast<const __half*>(base + Stage::kQuants);
#pragma unroll
  for (int j = 0; j < kW; ++j) {
    int a[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      wide_a_words<kKind>(base + (16 * j + gid + 8 * h) * Stage::kQuantRow + c * Stage::kQuantBytes,
                          t, a[h], a[2 + h]);
    }
    const float dw_a = __half2float(scales[(16 * j + gid) * (Stage::kScaleRow / 2) + c]);
    const float dw_b = __half2float(scales[(16 * j + gid + 8) * (Stage::kScaleRow / 2) + c]);
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      float cs[4];
      mma_block_sums<kKind>(a, bf[i], cs);
      float(&o)[4] = acc[j][i];
      o[0] = __fmaf_rn(__fmul_rn(dw_a, dx[i].x), cs[0], o[0]);
      o[1] = __fmaf_rn(__fmul_rn(dw_a, dx[i].y), cs[1], o[1]);
      o[2] = __fmaf_rn(__fmul_rn(dw_b, dx[i].x), cs[2], o[2]);
      o[3] = __fmaf_rn(__fmul_rn(dw_b, dx[i].y), cs[3], o[3]);
    }
  }
}

// Every value of a streamed kernel's accumulators (chains, weight tiles,
// activation tiles, C fragment) set to zero.
template <int kChains, int kW, int kTiles>
__device__ __forceinline__ void zero_accumulators(float (&acc)[kChains][kW][kTiles][4]) {
#pragma unroll
  for (int k = 0; k < kChains; ++k)
#pragma unroll
    for (int j = 0; j < kW; ++j)
#pragma unroll
      for (int i = 0; i < kTiles; ++i)
        acc[k][j][i][0] = acc[k][j][i][1] = acc[k][j][i][2] = acc[k][j][i][3] = 0.0f;
}

// One chain's accumulators (weight tiles, activation tiles, C fragment: rows
// gid and gid + 8, activation rows 8i + 2t and 8i + 2t + 1) into its sums,
// sums[weight row][activation row].
template <int kW, int kTiles, int kWeightRows, int R>
__device__ __forceinline__ void store_chain_sums(const float (&acc)[kW][kTiles][4],
                                                 float (&sums)[kWeightRows][R], int gid, int t) {
#pragma unroll
  for (int j = 0; j < kW; ++j)
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const int m0 = 8 * i + 2 * t, r = 16 * j + gid;
      sums[r][m0] = acc[j][i][0];
      sums[r][m0 + 1] = acc[j][i][1];
      sums[r + 8][m0] = acc[j][i][2];
      sums[r + 8][m0 + 1] = acc[j][i][3];
    }
}

// kW (PARSPEC_CUDA_MMA=stream-wide: 2, =stream-wide4: 4) tiles of 16 weight
// rows per block: each round's activations, read from the L2 cache, then
// serve kW times the rows. kMinBlocks: the blocks an SM should hold at once
// (=stream-dual: two of 64 weight rows at one activation tile, so that one
// block's copies are in flight while the other computes or waits at a barrier).
template <WeightKind kKind, int kTiles, int kW, int kMinBlocks = kStreamMinBlocks<kW, kTiles>>
__global__ void __launch_bounds__(kStreamWarpsFor<kW>* kWarp, kMinBlocks)
    matmul_stream_kernel(MatmulGroup g, const int8_t* xq, const float* xd, int M_all, int n_total,
                         int m_first) {
  using Stage = StreamStage<kKind, kTiles, kW>;
  constexpr int R = Stage::kRows, kWeightRows = Stage::kWeightRows;
  constexpr int kWarps = kStreamWarpsFor<kW>, kThreads = kWarps * kWarp;
  constexpr int kChainsPerWarp = kStreamChains / kWarps;
  extern __shared__ int4 stream_shared[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(stream_shared);
  DeviceMatrix w;
  float* y_all;
  int64_t tile_row0;
  // The same for the whole block.
  const bool has_tile = block_tile(g, w, y_all, tile_row0, kWeightRows);
  if (has_tile) prefetch_rows_early(w, kWeightRows, [&](int r) { return tile_row0 + r; });
  const int64_t nb = has_tile ? w.n_in / 32 : 0;
  const int rounds = static_cast<int>((nb + 15) / 16);
  // PARSPEC_CUDA_PREFETCH=operands: the weights of the rounds the pipeline
  // starts with are copied before the wait, and the first slice's start then
  // copies only their activations (the same stages, so the same steps).
  bool weights_copied = operands_early_wanted && has_tile;
  if (weights_copied) {
    for (int s = 0; s < kStreamStages - 1 && s < rounds; ++s)
      issue_stream_round<kKind, kTiles, kW, kThreads>(smem + s * Stage::kBytes, w, tile_row0, nb, s,
                                                      xq, xd, 0, n_total, 0, 0,
                                                      StreamParts::kWeights);
  }
  begin_kernel();
  if (!has_tile) return;
  // The slice of activation rows being computed: M rows from row `first` of n_total.
  int M = 0;
  int64_t first = 0;

  // Round `round`'s operands into stage `s`.
  auto issue = [&](int s, int round) {
    const StreamParts parts =
        weights_copied && round < kStreamStages - 1 ? StreamParts::kActivations : StreamParts::kAll;
    issue_stream_round<kKind, kTiles, kW, kThreads>(smem + s * Stage::kBytes, w, tile_row0, nb,
                                                    round, xq, xd, M, n_total, first, 0, parts);
  };

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int gid = lane / 4, t = lane % 4;
  float acc[kChainsPerWarp][kW][kTiles][4];

  // The block of chain warp + kWarps · k in round `round`, from stage `s`.
  auto step = [&](int s, int round, int k) {
    const int c = warp + kWarps * k;  // the chain, and the block's place in the round
    if (static_cast<int64_t>(round) * 16 + c >= nb) return;  // the same on every lane
    stream_step<kKind, kTiles, kW>(smem + s * Stage::kBytes, c, gid, t, acc[k]);
  };

  // More than R rows (a prefill) go through in slices of R, one after another,
  // each with exactly the steps of a launch of its own; the block's weights
  // are then read again from the L2 cache rather than from memory.
  for (int m_base = 0; m_base < M_all; m_base += R) {
    M = min(R, M_all - m_base);
    first = static_cast<int64_t>(m_first) + m_base;
    float* y = y_all + static_cast<int64_t>(m_base) * w.n_out;
    if (m_base > 0) __syncthreads();  // the previous slice's sums are read
    zero_accumulators(acc);

    each_position_streamed<kStreamStages>(rounds, issue, [&](int s, int round) {
#pragma unroll
      for (int k = 0; k < kChainsPerWarp; ++k) step(s, round, k);
    });
    weights_copied = false;  // a later slice copies all its operands
    __syncthreads();         // the stages' memory now holds the chains' sums

    float(*partial)[kWeightRows][R] = reinterpret_cast<float(*)[kWeightRows][R]>(smem);
#pragma unroll
    for (int k = 0; k < kChainsPerWarp; ++k)
      store_chain_sums(acc[k], partial[warp + kWarps * k], gid, t);
    __syncthreads();
    for (int e = threadIdx.x; e < kWeightRows * R; e += kThreads) {
      const int r = e / R, m = e % R;
      const int64_t row = tile_row0 + r;
      if (m >= M || row >= w.n_out) continue;
      y[static_cast<int64_t>(m) * w.n_out + row] = sum_in_warp_order(partial, r, m);
    }
  }
}

// Whether this block is the last of `count` blocks to get here with `counter`
// (zero before them; left at zero for the next launch), so that every other
// block's writes are visible to it. Every thread of the block calls it.
__device__ bool last_block_to_arrive(int32_t* counter, int count) {
  __shared__ bool last_s;
  __threadfence();  // this block's writes are visible before the count says so
  __syncthreads();
  if (threadIdx.x == 0) {
    last_s = atomicAdd(counter, 1) == count - 1;
    if (last_s) *counter = 0;
  }
  __syncthreads();
  if (last_s) __threadfence();
  return last_s;
}

// PARSPEC_CUDA_MMA=stream-split: matmul_stream_kernel's steps for up to 8
// activation rows and 64 weight rows a tile, with each tile's 16 chains split
// over kSplitGroups blocks of the grid, so that a matrix of few rows (wo and down of
// an 8B-class model: 64 tiles) still gives every SM blocks. Block (tile, k)
// takes chains k · 16 / kSplitGroups.. (a warp each: blocks of K c, c + 16, ...,
// streamed kBlocks at a time), writes their sums to g.chain_sums, and the
// tile's last block to finish adds the 16 in chain order, as the other kernels
// add their warps' sums: the same bits.
constexpr int kSplitTileRows = 4 * kMmaRows;
constexpr int kSplitRows = 8;  // activation rows: one tile
constexpr int kSplitGroups = 4;
template <WeightKind kKind>
__global__ void __launch_bounds__(kStreamChains / kSplitGroups * kWarp)
    matmul_stream_split_kernel(MatmulGroup g, const int8_t* xq, const float* xd, int M, int n_total,
                               int m_first) {
  constexpr int kBlocks = kStreamChains / kSplitGroups;  // chains a block: a warp each
  constexpr int kThreads = kBlocks * kWarp;
  using Stage = StreamStage<kKind, 1, 4, kBlocks>;
  static_assert(Stage::kWeightRows == kSplitTileRows && Stage::kRows == kSplitRows);
  constexpr int R = kSplitRows, kWeightRows = kSplitTileRows;
  extern __shared__ int4 stream_shared[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(stream_shared);
  const int64_t tile_index = blockIdx.x / kSplitGroups;
  const int c0 = static_cast<int>(blockIdx.x % kSplitGroups) * kBlocks;
  DeviceMatrix w;
  float* y;
  int part = 0;
  int64_t tile = 0;
  // The same for the whole block.
  const bool has_tile = tile_of_part(g, kWeightRows, tile_index, w, y, part, tile);
  const int64_t tile_row0 = tile * kWeightRows;
  if (has_tile) prefetch_rows_early(w, kWeightRows, [&](int r) { return tile_row0 + r; });
  begin_kernel();
  if (!has_tile) return;
  const int64_t nb = w.n_in / 32;
  const int rounds = static_cast<int>((nb + 15) / 16);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int gid = lane / 4, t = lane % 4;
  const int chain = c0 + warp;
  float acc[1][4][1][4];
  zero_accumulators(acc);
  each_position_streamed<kStreamStages>(
      rounds,
      [&](int s, int round) {
        issue_stream_round<kKind, 1, 4, kThreads, kBlocks>(
            smem + s * Stage::kBytes, w, tile_row0, nb, round, xq, xd, M, n_total, m_first, c0);
      },
      [&](int s, int round) {
        if (static_cast<int64_t>(round) * 16 + chain >= nb) return;  // the same on every lane
        stream_step<kKind, 1, 4, kBlocks>(smem + s * Stage::kBytes, warp, gid, t, acc[0]);
      });

  // The chain's sums, then the tile's total where this block is its last.
  float(*sums)[kWeightRows][R] = reinterpret_cast<float(*)[kWeightRows][R]>(
      g.chain_sums + tile_index * kStreamChains * kWeightRows * R);
  store_chain_sums(acc[0], sums[chain], gid, t);
  if (!last_block_to_arrive(g.chain_counters + tile_index, kSplitGroups)) return;
  for (int e = threadIdx.x; e < kWeightRows * R; e += kThreads) {
    const int r = e / R, m = e % R;
    const int64_t row = tile_row0 + r;
    if (m >= M || row >= w.n_out) continue;
    float total = __ldcg(&sums[0][r][m]);
    for (int c = 1; c < kStreamChains; ++c) total = __fadd_rn(total, __ldcg(&sums[c][r][m]));
    y[static_cast<int64_t>(m) * w.n_out + row] = total;
  }
}

// The persistent kernel's blocks an SM: one of 64 weight rows (16 warps), or
// three of 16 (8 warps each).
template <int kW>
constexpr int kPersistentBlocks = kW >= 4 ? 1 : 3;

// The chains whose sums the persistent kernel holds in shared memory at once
// at the end of a tile: all 16, or 4 at a time for 32 activation rows (whose
// 16 would take more than half of an SM's shared memory).
template <int kTiles>
constexpr int kPersistentHeldChains = kTiles >= 4 ? 4 : kStreamChains;

// The persistent kernel's bytes of chains' sums.
template <WeightKind kKind, int kTiles, int kW>
constexpr int kPersistentSumBytes =
    kPersistentHeldChains<kTiles>* StreamStage<kKind, kTiles, kW>::kWeightRows*
        StreamStage<kKind, kTiles, kW>::kRows *
    4;

// The persistent kernel's rounds in shared memory (one computed, the rest
// loading): as many as fit beside the chains' sums in an H100's 227 KB shared
// between its blocks, at most 6; fewer than 3 leave it unused.
constexpr int kPersistentSharedLimit = 227 * 1024;
template <WeightKind kKind, int kTiles, int kW>
constexpr int kPersistentStages = [] {
  using Stage = StreamStage<kKind, kTiles, kW>;
  const int room = kPersistentSharedLimit / kPersistentBlocks<kW> - 1024;
  const int fit = (room - kPersistentSumBytes<kKind, kTiles, kW>) / Stage::kBytes;
  return fit < 6 ? fit : 6;
}();

// The persistent kernel's shared memory: its stages, then the chains' sums.
template <WeightKind kKind, int kTiles, int kW>
constexpr int kPersistentBytes =
    kPersistentStages<kKind, kTiles, kW>* StreamStage<kKind, kTiles, kW>::kBytes +
    kPersistentSumBytes<kKind, kTiles, kW>;

// PARSPEC_CUDA_MMA=stream-persistent: matmul_stream_kernel's steps for up to
// R activation rows with kPersistentBlocks blocks an SM, block i taking tiles
// i, i + gridDim.x, ... of the group. Its copies run on from one tile's rounds
// into the next tile's, so that a block's pipeline fills once rather than once
// a tile, and the tiles spread over the SMs in one wave. Each tile's chains'
// sums go through shared memory of their own (past the stages, which stay in
// use), and each value is their sum in chain order, as there.
template <WeightKind kKind, int kTiles, int kW>
__global__ void __launch_bounds__(kStreamWarpsFor<kW>* kWarp, kPersistentBlocks<kW>)
    matmul_stream_persistent_kernel(MatmulGroup g, const int8_t* xq, const float* xd, int M,
                                    int n_total, int m_first) {
  using Stage = StreamStage<kKind, kTiles, kW>;
  constexpr int R = Stage::kRows, kWeightRows = Stage::kWeightRows;
  constexpr int kWarps = kStreamWarpsFor<kW>, kThreads = kWarps * kWarp;
  constexpr int kChainsPerWarp = kStreamChains / kWarps;
  extern __shared__ int4 stream_shared[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(stream_shared);
  constexpr int kStages = kPersistentStages<kKind, kTiles, kW>;
  constexpr int kHeld = kPersistentHeldChains<kTiles>;
  constexpr int kOwned = (kWeightRows * R + kThreads - 1) / kThreads;  // values a thread adds up
  float(*partial)[kWeightRows][R] =
      reinterpret_cast<float(*)[kWeightRows][R]>(smem + kStages * Stage::kBytes);
  const int64_t n_tiles = weight_row_tiles(g, kWeightRows);
  const int64_t my_tiles =
      n_tiles > blockIdx.x ? (n_tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  // Where tile `local` of this block lies: its matrix, output and first row.
  struct Tile {
    DeviceMatrix w;
    float* y;
    int64_t row0;
  };
  auto tile_at = [&](int64_t local) {
    Tile t;
    int part = 0;
    int64_t index = 0;
    tile_of_part(g, kWeightRows, blockIdx.x + local * gridDim.x, t.w, t.y, part, index);
    t.row0 = index * kWeightRows;
    return t;
  };
  if (my_tiles > 0) {
    const Tile first_tile = tile_at(0);
    prefetch_rows_early(first_tile.w, kWeightRows, [&](int r) { return first_tile.row0 + r; });
  }
  begin_kernel();
  if (my_tiles == 0) return;
  const int64_t nb = g.w[0].n_in / 32;  // the same for every matrix of a group
  const int rounds = static_cast<int>((nb + 15) / 16);
  const int64_t first = m_first;

  // Position p's operands (round p % rounds of local tile p / rounds) into stage `s`.
  auto issue = [&](int s, int p) {
    const Tile tl = tile_at(p / rounds);
    issue_stream_round<kKind, kTiles, kW, kThreads>(smem + s * Stage::kBytes, tl.w, tl.row0, nb,
                                                    p % rounds, xq, xd, M, n_total, first);
  };

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int gid = lane / 4, t = lane % 4;
  float acc[kChainsPerWarp][kW][kTiles][4];
  zero_accumulators(acc);

  // The block of chain warp + kWarps · k in round `round`, from stage `s`.
  auto step = [&](int s, int round, int k) {
    const int c = warp + kWarps * k;
    if (static_cast<int64_t>(round) * 16 + c >= nb) return;  // the same on every lane
    stream_step<kKind, kTiles, kW>(smem + s * Stage::kBytes, c, gid, t, acc[k]);
  };

  const int count = static_cast<int>(my_tiles) * rounds;
  each_position_streamed<kStages>(count, issue, [&](int s, int p) {
    const int round = p % rounds;
#pragma unroll
    for (int k = 0; k < kChainsPerWarp; ++k) step(s, round, k);
    if (round != rounds - 1) return;
    // The tile's last round: its sums, kHeld chains' at a time through
    // `partial`, each value added up in chain order by the thread that owns it
    // (as sum_in_warp_order adds them). The barriers order each group's
    // writes after the reads of the group before; the stages' barrier at the
    // next position orders the last reads before the next tile's writes.
    const Tile tl = tile_at(p / rounds);
    float total[kOwned];
#pragma unroll
    for (int c0 = 0; c0 < kStreamChains; c0 += kHeld) {
#pragma unroll
      for (int k = 0; k < kChainsPerWarp; ++k) {
        const int c = warp + kWarps * k;
        if (c >= c0 && c < c0 + kHeld)  // the same on every lane
          store_chain_sums(acc[k], partial[c - c0], gid, t);
      }
      __syncthreads();  // the group's sums are in `partial`
#pragma unroll
      for (int o = 0; o < kOwned; ++o) {
        const int e = threadIdx.x + o * kThreads;
        if (e >= kWeightRows * R) break;
        const int r = e / R, m = e % R;
#pragma unroll
        for (int z = 0; z < kHeld; ++z)
          total[o] = c0 + z == 0 ? partial[0][r][m] : __fadd_rn(total[o], partial[z][r][m]);
      }
      if (c0 + kHeld < kStreamChains) __syncthreads();  // read before the next group's writes
    }
    zero_accumulators(acc);
#pragma unroll
    for (int o = 0; o < kOwned; ++o) {
      const int e = threadIdx.x + o * kThreads;
      if (e >= kWeightRows * R) break;
      const int r = e / R, m = e % R;
      const int64_t row = tl.row0 + r;
      if (m >= M || row >= tl.w.n_out) continue;
      tl.y[static_cast<int64_t>(m) * tl.w.n_out + row] = total[o];
    }
  });
}

// Which matmul_stream_kernel PARSPEC_CUDA_MMA asks for: 4 (the default, and
// =stream-wide4: 64 weight rows a block, one block an SM with many rounds in
// flight), 1 (=stream: 16 weight rows a block), 2 (=stream-wide: 32 where the
// grid stays large enough), 3 (=stream-wide-all: 32 always, for the tests), 5
// (=stream-mixed: 64 where the grid still has a block for every SM, else 16),
// 6 (=stream-persistent: matmul_stream_persistent_kernel where it takes the
// launch, else as 4), 7 (=stream-split: matmul_stream_split_kernel for up to 8
// rows where it takes the launch, else as 4), 8 (=stream-dual: as 4, two blocks
// an SM at one activation tile), 9 (=stream-split-dual: 7 where it takes the
// launch, else 8), 0 (=plain or =pipelined: the tensor-core kernel loading its
// own operands).
int streamed_weight_tiles() {
  static const int tiles =
      env_is("PARSPEC_CUDA_MMA", "stream")                                             ? 1
      : env_is("PARSPEC_CUDA_MMA", "stream-wide")                                      ? 2
      : env_is("PARSPEC_CUDA_MMA", "stream-wide-all")                                  ? 3
      : env_is("PARSPEC_CUDA_MMA", "stream-mixed")                                     ? 5
      : env_is("PARSPEC_CUDA_MMA", "stream-persistent")                                ? 6
      : env_is("PARSPEC_CUDA_MMA", "stream-split")                                     ? 7
      : env_is("PARSPEC_CUDA_MMA", "stream-dual")                                      ? 8
      : env_is("PARSPEC_CUDA_MMA", "stream-split-dual")                                ? 9
      : env_is("PARSPEC_CUDA_MMA", "plain") || env_is("PARSPEC_CUDA_MMA", "pipelined") ? 0
                                                                                       : 4;
  return tiles;
}

// Whether matmul_stream_kernel<kKind, kTiles, kW, kMinBlocks> has its shared
// memory on this process's device (prepare_launches asks for it, before any
// graph capture).
template <WeightKind kKind, int kTiles, int kW, int kMinBlocks = kStreamMinBlocks<kW, kTiles>>
bool stream_kernel_ready = false;

template <WeightKind kKind, int kTiles, int kW, int kMinBlocks = kStreamMinBlocks<kW, kTiles>>
void prepare_stream_kernel() {
  const auto kernel = matmul_stream_kernel<kKind, kTiles, kW, kMinBlocks>;
  bool ready = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    StreamStage<kKind, kTiles, kW>::kAllBytes) == cudaSuccess;
  // Several blocks an SM need the most shared memory the SM can give.
  if (ready && kMinBlocks > 1)
    ready = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 cudaSharedmemCarveoutMaxShared) == cudaSuccess;
  stream_kernel_ready<kKind, kTiles, kW, kMinBlocks> = ready;
  // A device with less shared memory runs the other kernel: not an error of a pass.
  if (!ready) (void)cudaGetLastError();
}

// f(kind, tiles) for every weight type and activation tile count the
// streamed kernels are launched with, each as a std::integral_constant.
template <class F>
void each_stream_shape(F&& f) {
  using Q8 = std::integral_constant<WeightKind, WeightKind::kQ8_0>;
  using Q4 = std::integral_constant<WeightKind, WeightKind::kQ4_0>;
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  using Most = std::integral_constant<int, kMmaMaxTiles>;
  f(Q8{}, One{}), f(Q8{}, Two{}), f(Q8{}, Most{});
  f(Q4{}, One{}), f(Q4{}, Two{}), f(Q4{}, Most{});
}

template <int kW>
void prepare_stream_kernels() {
  each_stream_shape([](auto kind, auto tiles) {
    prepare_stream_kernel<decltype(kind)::value, decltype(tiles)::value, kW>();
  });
}

// Whether matmul_stream_persistent_kernel<kKind, kTiles, kW> has its shared
// memory (the stages and the chains' sums) on this process's device.
template <WeightKind kKind, int kTiles, int kW>
bool stream_persistent_ready = false;

template <WeightKind kKind, int kTiles, int kW>
void prepare_stream_persistent() {
  if constexpr (kPersistentStages<kKind, kTiles, kW> >= 3) {  // else too little room: not used
    stream_persistent_ready<kKind, kTiles, kW> =
        cudaFuncSetAttribute(matmul_stream_persistent_kernel<kKind, kTiles, kW>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kPersistentBytes<kKind, kTiles, kW>) == cudaSuccess;
    if (!stream_persistent_ready<kKind, kTiles, kW>) (void)cudaGetLastError();
  }
}

template <int kW>
void prepare_stream_persistent_kernels() {
  each_stream_shape([](auto kind, auto tiles) {
    prepare_stream_persistent<decltype(kind)::value, decltype(tiles)::value, kW>();
  });
}

// matmul_stream_kernel over n rows (slices of 8 · kTiles), when its scales
// can be copied in pairs (an even number of blocks a row) and its stages fit
// in this device's shared memory; false where it did not launch.
template <WeightKind kKind, int kTiles, int kW, int kMinBlocks = kStreamMinBlocks<kW, kTiles>>
bool launch_stream_tiles(const MatmulGroup& g, const int8_t* xq, const float* xd, int n,
                         int n_total, int m_first, cudaStream_t stream) {
  using Stage = StreamStage<kKind, kTiles, kW>;
  if (!stream_kernel_ready<kKind, kTiles, kW, kMinBlocks> || (g.w[0].n_in / 32) % 2 != 0)
    return false;
  launch(matmul_stream_kernel<kKind, kTiles, kW, kMinBlocks>,
         weight_row_tiles(g, Stage::kWeightRows), kStreamWarpsFor<kW> * kWarp, Stage::kAllBytes,
         stream, g, xq, xd, n, n_total, m_first);
  return true;
}
// The device's streaming multiprocessors (0 where it cannot say).
int multiprocessors() {
  static const int count = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

// matmul_stream_persistent_kernel over n rows (at most 8 · kTiles), as many
// blocks as its SMs take (or a tile each), under the same conditions; false
// where it did not launch.
template <WeightKind kKind, int kTiles, int kW>
bool launch_stream_persistent(const MatmulGroup& g, const int8_t* xq, const float* xd, int n,
                              int n_total, int m_first, cudaStream_t stream) {
  using Stage = StreamStage<kKind, kTiles, kW>;
  if constexpr (kPersistentStages<kKind, kTiles, kW> < 3) {
    return false;
  } else {
    if (!stream_persistent_ready<kKind, kTiles, kW> || n > Stage::kRows ||
        (g.w[0].n_in / 32) % 2 != 0)
      return false;
    const int tiles = weight_row_tiles(g, Stage::kWeightRows);
    const int slots = multiprocessors() * kPersistentBlocks<kW>;
    launch(matmul_stream_persistent_kernel<kKind, kTiles, kW>,
           slots > 0 && slots < tiles ? slots : tiles, kStreamWarpsFor<kW> * kWarp,
           kPersistentBytes<kKind, kTiles, kW>, stream, g, xq, xd, n, n_total, m_first);
    return true;
  }
}

// =stream-persistent: tiles of 64 weight rows where the group has one for
// every SM, else of 16 (three blocks an SM), so that no SM idles.
template <WeightKind kKind, int kTiles>
bool launch_stream_persistent(const MatmulGroup& g, const int8_t* xq, const float* xd, int n,
                              int n_total, int m_first, cudaStream_t stream) {
  return weight_row_tiles(g, 4 * kMmaRows) >= multiprocessors()
             ? launch_stream_persistent<kKind, kTiles, 4>(g, xq, xd, n, n_total, m_first, stream)
             : launch_stream_persistent<kKind, kTiles, 1>(g, xq, xd, n, n_total, m_first, stream);
}

// matmul_stream_split_kernel over n rows (at most 8) where the group's tiles of
// 64 rows are fewer than the SMs and its workspace has room for the chains'
// sums; false where it did not launch.
template <WeightKind kKind>
bool launch_stream_split(const MatmulGroup& g, const int8_t* xq, const float* xd, int n,
                         int n_total, int m_first, cudaStream_t stream) {
  using Stage = StreamStage<kKind, 1, 4, kStreamChains / kSplitGroups>;
  constexpr int kShared = kStreamStages * Stage::kBytes;
  static_assert(kShared <= 48 * 1024, "without opting in to more shared memory");
  const int tiles = weight_row_tiles(g, kSplitTileRows);
  if (g.chain_sums == nullptr || n > kSplitRows || tiles >= multiprocessors() ||
      (g.w[0].n_in / 32) % 2 != 0)
    return false;
  launch(matmul_stream_split_kernel<kKind>, tiles * kSplitGroups,
         kStreamChains / kSplitGroups * kWarp, kShared, stream, g, xq, xd, n, n_total, m_first);
  return true;
}

// =stream-wide takes 32 weight rows a block where that still gives every SM
// two blocks (gate/up, q/k/v of large models), 16 elsewhere (wo, down).
template <WeightKind kKind, int kTiles>
bool launch_stream(const MatmulGroup& g, const int8_t* xq, const float* xd, int n, int n_total,
                   int m_first, cudaStream_t stream) {
  const int mode = streamed_weight_tiles();
  if (mode == 6 && launch_stream_persistent<kKind, kTiles>(g, xq, xd, n, n_total, m_first, stream))
    return true;
  if constexpr (kTiles == 1) {
    if ((mode == 7 || mode == 9) &&
        launch_stream_split<kKind>(g, xq, xd, n, n_total, m_first, stream))
      return true;
    if ((mode == 8 || mode == 9) &&
        launch_stream_tiles<kKind, 1, 4, 2>(g, xq, xd, n, n_total, m_first, stream))
      return true;
  }
  if (mode == 4 || mode >= 6)
    return launch_stream_tiles<kKind, kTiles, 4>(g, xq, xd, n, n_total, m_first, stream);
  // =stream-mixed: a matrix with fewer blocks of 64 rows than SMs (wo, down and
  // q/k/v of an 8B-class model on an H100) would leave SMs idle; 16 rows a block
  // give it four times the blocks.
  if (mode == 5)
    return weight_row_tiles(g, 4 * kMmaRows) >= multiprocessors()
               ? launch_stream_tiles<kKind, kTiles, 4>(g, xq, xd, n, n_total, m_first, stream)
               : launch_stream_tiles<kKind, kTiles, 1>(g, xq, xd, n, n_total, m_first, stream);
  const bool wide =
      mode == 3 || (mode == 2 && weight_row_tiles(g, 2 * kMmaRows) >= 2 * multiprocessors());
  return wide ? launch_stream_tiles<kKind, kTiles, 2>(g, xq, xd, n, n_total, m_first, stream)
              : launch_stream_tiles<kKind, kTiles, 1>(g, xq, xd, n, n_total, m_first, stream);
}

// PARSPEC_CUDA_PREFILL=tiled: a prefill's Q8_0/Q4_0 matmul in tiles of 64
// weight rows × 64 activation rows a block, so that every weight and
// activation block copied into shared memory serves 64 outputs' mmas instead
// of the tensor-core kernel's 8 or 16. The tensor-core kernel's order is kept
// per output: its 16 warps' chains (chain c: K blocks c, c + 16, ...) are
// summed here by groups of four warps, each block's product added into the
// chain's sum by the same fused multiply-add, and each chain's sum, once its
// last block is in, added to the total in chain order as add_warp_sums adds
// the warps'. One group walks the chains one after another
// (matmul_prefill_kernel); kPrefillGroups groups take as many chains at once
// (matmul_prefill_grouped_kernel), which gives a prefill of a matmul with few
// tiles, where the grid leaves SMs idle, four times the warps and the copies
// in flight. The K blocks arrive several steps ahead by cp.async.
constexpr int kPrefillRows = 64;  // weight rows per block: two warps of 32
constexpr int kPrefillCols = 64;  // activation rows per block: two warps of 32
constexpr int kPrefillWarps = 4;  // per chain group
constexpr int kPrefillThreads = kPrefillWarps * kWarp;
constexpr int kPrefillStages = 6;         // steps in shared memory: one computed, the rest loading
constexpr int kPrefillGroups = 4;         // chain groups of the default tiles
constexpr int kPrefillGroupedStages = 5;  // the same with groups: a K block per group each
// A tile's values in shared memory, [activation row][weight row]: rows of 68
// floats, so that a warp's mma fragment stores fall in different banks.
constexpr int kPrefillTileStride = kPrefillRows + 4;
constexpr int kPrefillTileFloats = kPrefillCols * kPrefillTileStride;
static_assert(kPrefillRows == 64 && kPrefillCols == 64 && kPrefillWarps == 4,
              "2 × 2 warps of 2 × 4 mma tiles");

// The shared-memory layout of one K block of a tile: its weight quants (row r
// at r · kQuantBytes), the aligned pair of half scales that holds each row's
// (blocks b & ~1 and b | 1), the activation rows' quants (row m at 32 m) and
// scales.
template <WeightKind kKind>
struct PrefillStage {
  static constexpr int kQuantBytes = kKind == WeightKind::kQ8_0 ? 32 : 16;
  static constexpr int kQuants = kPrefillRows * kQuantBytes;
  static constexpr int kScales = kPrefillRows * 4;
  static constexpr int kActs = kPrefillCols * 32;
  static constexpr int kActScales = kPrefillCols * 4;
  static constexpr int kBytes = kQuants + kScales + kActs + kActScales;
  static_assert(kQuants % 16 == 0 && kScales % 16 == 0 && kActs % 16 == 0 && kBytes % 16 == 0,
                "16-byte copies");
};

// matmul_prefill_grouped_kernel's dynamic shared memory: its stages (a K
// block for each group), each group's chain sums of a round, the tile's totals.
template <WeightKind kKind>
constexpr int kPrefillGroupedBytes =
    kPrefillGroupedStages* kPrefillGroups* PrefillStage<kKind>::kBytes +
    (kPrefillGroups + 1) * kPrefillTileFloats * 4;

// Step p of a tile kernel whose kGroups chain groups walk nb K blocks in
// rounds (group g: chain kGroups·r + g in round r, its block c + 16 j at step
// j): the round, the step, and whether the step is the round's last. A
// round's first chain is its longest (chains c < nb % 16 have one block more).
template <int kGroups>
__device__ __forceinline__ int chain_round(int p, int nb, int& j, bool& last) {
  const int q = nb / 16, long_rounds = (nb % 16 + kGroups - 1) / kGroups;
  if (p < long_rounds * (q + 1)) {
    j = p % (q + 1);
    last = j == q;
    return p / (q + 1);
  }
  p -= long_rounds * (q + 1);  // q > 0 here
  j = p % q;
  last = j == q - 1;
  return long_rounds + p / q;
}

// The steps of chain_round over nb K blocks.
template <int kGroups>
__device__ __forceinline__ int chain_round_steps(int nb) {
  const int q = nb / 16, long_rounds = (nb % 16 + kGroups - 1) / kGroups;
  return long_rounds * (q + 1) + (16 / kGroups - long_rounds) * q;
}

// Position p of the chain-major order of nb K blocks (chain 0's blocks 0, 16,
// ..., then chain 1's, ...): the block, and whether it is its chain's last.
__device__ __forceinline__ int chain_major_block(int p, int nb, bool& last) {
  int j;
  const int c = chain_round<1>(p, nb, j, last);  // one chain a round
  return c + 16 * j;
}

// A warp's sums of its 32 × 32 outputs of a prefill tile, [weight tile
// i][activation tile j][e]: weight rows 16i + gid (+ 8 for e = 2, 3) and
// activation rows 8j + 2t (+ 1 for e = 1, 3) of the warp's; the running
// chain's, and the total of the chains before it.
struct PrefillSums {
  float chain[2][4][4], total[2][4][4];
  bool first_chain = true;

  // f(i, j, e) for each of the warp's values.
  template <class F>
  __device__ static void each_value(F&& f) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) f(i, j, e);
  }

  __device__ PrefillSums() {
    each_value([&](int i, int j, int e) { chain[i][j][e] = total[i][j][e] = 0.0f; });
  }
  // Once a chain's last block is in: its sums added to the totals in chain
  // order (the first chain's become them), then zeros.
  __device__ void close_chain() {
    each_value([&](int i, int j, int e) {
      total[i][j][e] = first_chain ? chain[i][j][e] : __fadd_rn(total[i][j][e], chain[i][j][e]);
      chain[i][j][e] = 0.0f;
    });
    first_chain = false;
  }
  // The running chain's sums into a tile in shared memory (see
  // kPrefillTileStride) from weight row row0 and activation row col0, then zeros.
  __device__ void hand_chain(float* tile, int row0, int col0, int gid, int t) {
    each_value([&](int i, int j, int e) {
      const int row = row0 + 16 * i + gid + 8 * (e / 2), col = col0 + 8 * j + 2 * t + e % 2;
      tile[col * kPrefillTileStride + row] = chain[i][j][e];
      chain[i][j][e] = 0.0f;
    });
  }
  // The end (the warp's outputs from weight row row0 and activation row
  // col0): chains without blocks (fewer than 16 blocks a row) add the
  // tensor-core kernels' zero sums, then each value goes to y.
  __device__ void store(int blocks, int64_t row0, int64_t n_out, int col0, int M, int gid, int t,
                        float* y) {
    for (int c = blocks; c < 16; ++c)
      each_value([&](int i, int j, int e) { total[i][j][e] = __fadd_rn(total[i][j][e], 0.0f); });
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int64_t row = row0 + 16 * i + gid + 8 * hh;
        if (row >= n_out) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int k = 0; k < 2; ++k) {
            const int m = col0 + 8 * j + 2 * t + k;
            if (m < M) y[static_cast<int64_t>(m) * n_out + row] = total[i][j][2 * hh + k];
          }
      }
  }
};

// The blocks of a prefill tile kernel over a group and M activation rows.
template <int kRows, int kCols>
int prefill_blocks(const MatmulGroup& g, int M) {
  return weight_row_tiles(g, kRows) * ((M + kCols - 1) / kCols);
}

// The tile of kRows weight rows × kCols of M activation rows that this block
// computes: block i takes weight tile i / col_tiles and activation tile i %
// col_tiles, so that the blocks that share a weight tile run side by side and
// read it from memory once. False where the tile has no weight rows.
template <int kRows, int kCols>
__device__ bool prefill_tile(const MatmulGroup& g, int M, DeviceMatrix& w, float*& y, int64_t& row0,
                             int& col0) {
  const int col_tiles = (M + kCols - 1) / kCols;
  int part = 0;
  int64_t tile = 0;
  if (!tile_of_part(g, kRows, blockIdx.x / col_tiles, w, y, part, tile)) return false;
  row0 = tile * kRows;
  col0 = static_cast<int>(blockIdx.x % col_tiles) * kCols;
  return true;
}

// The tile of a Q8_0/Q4_0 prefill block (prefill_tile): its matrix, outputs,
// first weight and activation rows, and the matrix's K blocks.
struct QuantPrefillTile {
  DeviceMatrix w;
  float* y;
  int64_t row0;
  int col0;
  int nb;
};

// This block's tile of M activation rows; false where it has none (the same
// for the whole block).
__device__ __forceinline__ bool quant_prefill_tile(const MatmulGroup& g, int M,
                                                   QuantPrefillTile& tile) {
  if (!prefill_tile<kPrefillRows, kPrefillCols>(g, M, tile.w, tile.y, tile.row0, tile.col0))
    return false;
  tile.nb = static_cast<int>(tile.w.n_in / 32);
  return true;
}

// Copies of K block b of a prefill tile into stage by kPrefillThreads threads
// (this one `thread`): the weight rows from row0, their scales, the
// activation rows from col0 of M (block-major: block b of row m at b · M + m)
// and theirs, zeros past the last weight or activation row.
template <WeightKind kKind>
__device__ __forceinline__ void issue_prefill_block(uint8_t* stage, int64_t b,
                                                    const QuantPrefillTile& tile, const int8_t* xq,
                                                    const float* xd, int M, int thread) {
  using Stage = PrefillStage<kKind>;
  constexpr int QB = Stage::kQuantBytes, kRowPieces = QB / 16;
  const DeviceMatrix& w = tile.w;
  const int64_t nb = tile.nb, row0 = tile.row0;
  const int col0 = tile.col0;
  const uint8_t* wq = static_cast<const uint8_t*>(w.q);
  const __half* ws = static_cast<const __half*>(w.scales);
#pragma unroll
  for (int e = thread; e < kPrefillRows * kRowPieces; e += kPrefillThreads) {
    const int r = e / kRowPieces, piece = e % kRowPieces;
    const int64_t row = row0 + r;
    const bool valid = row < w.n_out;
    copy_async<16>(stage + r * QB + 16 * piece, valid ? wq + (row * nb + b) * QB + 16 * piece : wq,
                   valid);
  }
  uint8_t* scales = stage + Stage::kQuants;
  for (int r = thread; r < kPrefillRows; r += kPrefillThreads) {
    const int64_t row = row0 + r;
    const bool valid = row < w.n_out;
    copy_async<4>(scales + 4 * r, valid ? ws + row * nb + (b & ~int64_t{1}) : ws, valid);
  }
  uint8_t* acts = scales + Stage::kScales;
#pragma unroll
  for (int e = thread; e < kPrefillCols * 2; e += kPrefillThreads) {
    const int m = e / 2, half = e % 2;
    const bool valid = col0 + m < M;
    copy_async<16>(acts + 32 * m + 16 * half, valid ? xq + (b * M + col0 + m) * 32 + 16 * half : xq,
                   valid);
  }
  uint8_t* act_scales = acts + Stage::kActs;
  for (int m = thread; m < kPrefillCols; m += kPrefillThreads) {
    const bool valid = col0 + m < M;
    copy_async<4>(act_scales + 4 * m, valid ? xd + b * M + col0 + m : xd, valid);
  }
}

// A warp's products of K block b from its stage (its 32 × 32 outputs from
// weight row warp_row and activation row warp_col of the tile), added into
// the chain's sums as matmul_mma_kernel's step adds them.
template <WeightKind kKind>
__device__ __forceinline__ void add_prefill_block(const uint8_t* base, int b, int warp_row,
                                                  int warp_col, int gid, int t,
                                                  float (&chain)[2][4][4]) {
  using Stage = PrefillStage<kKind>;
  const __half* scales = reinterpret_cast<const __half*>(base + Stage::kQuants);
  const uint8_t* acts = base + Stage::kQuants + Stage::kScales;
  const float* act_scales = reinterpret_cast<const float*>(acts + Stage::kActs);
  int a[2][4];
  float dw[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_row + 16 * i + gid + 8 * h;
      wide_a_words<kKind>(base + r * Stage::kQuantBytes, t, a[i][h], a[i][2 + h]);
      dw[i][h] = __half2float(scales[2 * r + (b & 1)]);
    }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int col = warp_col + 8 * j;
    const int2 src = *reinterpret_cast<const int2*>(acts + 32 * (col + gid) + 8 * t);
    const int bf[2] = {src.x, src.y};
    const float2 dx = *reinterpret_cast<const float2*>(act_scales + col + 2 * t);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float cs[4];
      mma_block_sums<kKind>(a[i], bf, cs);
      float(&o)[4] = chain[i][j];
      o[0] = __fmaf_rn(__fmul_rn(dw[i][0], dx.x), cs[0], o[0]);
      o[1] = __fmaf_rn(__fmul_rn(dw[i][0], dx.y), cs[1], o[1]);
      o[2] = __fmaf_rn(__fmul_rn(dw[i][1], dx.x), cs[2], o[2]);
      o[3] = __fmaf_rn(__fmul_rn(dw[i][1], dx.y), cs[3], o[3]);
    }
  }
}

// M activation rows, block-major, an even number of blocks a row; one group
// of warps walks every chain (PARSPEC_CUDA_PREFILL_GROUPS=1, and where the
// grouped kernel's shared memory does not fit).
template <WeightKind kKind>
__global__ void __launch_bounds__(kPrefillThreads)
    matmul_prefill_kernel(MatmulGroup g, const int8_t* xq, const float* xd, int M) {
  using Stage = PrefillStage<kKind>;
  begin_kernel();
  __shared__ int4 prefill_shared[kPrefillStages * Stage::kBytes / 16];
  uint8_t* smem = reinterpret_cast<uint8_t*>(prefill_shared);
  QuantPrefillTile tile;
  if (!quant_prefill_tile(g, M, tile)) return;
  const int nb = tile.nb;
  auto issue = [&](int s, int p) {
    bool last;
    const int64_t b = chain_major_block(p, nb, last);
    issue_prefill_block<kKind>(smem + s * Stage::kBytes, b, tile, xq, xd, M, threadIdx.x);
  };
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int gid = lane / 4, t = lane % 4;
  const int warp_row = 32 * (warp % 2), warp_col = 32 * (warp / 2);
  PrefillSums sums;
  auto compute = [&](int s, int p) {
    bool last;
    const int b = chain_major_block(p, nb, last);
    add_prefill_block<kKind>(smem + s * Stage::kBytes, b, warp_row, warp_col, gid, t, sums.chain);
    if (last) sums.close_chain();  // the same on every thread
  };
  each_position_streamed<kPrefillStages>(nb, issue, compute);
  sums.store(nb, tile.row0 + warp_row, tile.w.n_out, tile.col0 + warp_col, M, gid, t, tile.y);
}

// The same with kPrefillGroups groups of warps, each round's chains side by
// side (chain_round), each group copying its own K blocks; at a round's end
// the groups' chain sums go through shared memory into the tile's totals
// there, in chain order.
template <WeightKind kKind>
__global__ void __launch_bounds__(kPrefillGroups* kPrefillThreads, 1)
    matmul_prefill_grouped_kernel(MatmulGroup g, const int8_t* xq, const float* xd, int M) {
  using Stage = PrefillStage<kKind>;
  constexpr int kGroups = kPrefillGroups, kThreads = kGroups * kPrefillThreads;
  constexpr int kStages = kPrefillGroupedStages;
  begin_kernel();
  extern __shared__ int4 prefill_shared[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(prefill_shared);
  // Each group's chain sums of a round, then the tile's totals (kPrefillTileStride).
  float* handed = reinterpret_cast<float*>(smem + kStages * kGroups * Stage::kBytes);
  float* totals = handed + kGroups * kPrefillTileFloats;
  QuantPrefillTile tile;
  if (!quant_prefill_tile(g, M, tile)) return;
  const int nb = tile.nb;
  const auto chain_blocks = [nb](int c) { return nb / 16 + (c < nb % 16 ? 1 : 0); };
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int group = warp / kPrefillWarps, group_warp = warp % kPrefillWarps;
  const int gid = lane / 4, t = lane % 4;
  const int warp_row = 32 * (group_warp % 2), warp_col = 32 * (group_warp / 2);

  // This group's K block of step p into its part of stage s; nothing where
  // its chain has ended.
  auto issue = [&](int s, int p) {
    int j;
    bool last;
    const int c = kGroups * chain_round<kGroups>(p, nb, j, last) + group;
    if (j < chain_blocks(c))
      issue_prefill_block<kKind>(smem + (s * kGroups + group) * Stage::kBytes, c + 16 * j, tile, xq,
                                 xd, M, threadIdx.x % kPrefillThreads);
  };
  PrefillSums sums;
  auto compute = [&](int s, int p) {
    int j;
    bool last;
    const int round = chain_round<kGroups>(p, nb, j, last), c = kGroups * round + group;
    if (j < chain_blocks(c))
      add_prefill_block<kKind>(smem + (s * kGroups + group) * Stage::kBytes, c + 16 * j, warp_row,
                               warp_col, gid, t, sums.chain);
    if (!last) return;  // the same on every thread
    if (chain_blocks(c) > 0)
      sums.hand_chain(handed + group * kPrefillTileFloats, warp_row, warp_col, gid, t);
    __syncthreads();
    // Each thread adds the same values every round (and stores them at the
    // end); the next step's barrier comes before any chain is handed again.
    for (int v = threadIdx.x; v < kPrefillTileFloats; v += kThreads) {
      if (v % kPrefillTileStride >= kPrefillRows) continue;
      float sum = round == 0 ? handed[v] : __fadd_rn(totals[v], handed[v]);  // chain 0 first
      for (int k = 1; k < kGroups; ++k)
        if (chain_blocks(kGroups * round + k) > 0)
          sum = __fadd_rn(sum, handed[k * kPrefillTileFloats + v]);
      totals[v] = sum;
    }
  };
  each_position_streamed<kStages>(chain_round_steps<kGroups>(nb), issue, compute);

  // Chains without blocks add the tensor-core kernels' zero sums, as store does.
  for (int v = threadIdx.x; v < kPrefillTileFloats; v += kThreads) {
    const int m = v / kPrefillTileStride, r = v % kPrefillTileStride;
    if (r >= kPrefillRows || tile.row0 + r >= tile.w.n_out || tile.col0 + m >= M) continue;
    float sum = totals[v];
    for (int c = nb; c < 16; ++c) sum = __fadd_rn(sum, 0.0f);
    tile.y[static_cast<int64_t>(tile.col0 + m) * tile.w.n_out + tile.row0 + r] = sum;
  }
}

// Rows up to which the streamed tensor-core kernel takes a matmul in slices
// of 32 rows even where the tiles take more: on an H100, 64 rows of an
// 8B-class Q4_0 (Q8_0) model took 0.87× (0.92×) the tiles' time that way,
// 512 rows 1.09× (1.16×).
constexpr int kPrefillSlicesMaxRows = 2 * 8 * kMmaMaxTiles;

// Whether the prefill tiles (matmul_prefill_kernel, matmul_half_prefill_kernel,
// matmul_k_prefill_kernel) take a matmul of n rows of weights of this kind:
// more than kPrefillSlicesMaxRows rows, and Q8_0/Q4_0/Q4_K/Q6_K
// weights by default (an H200 prefills 512 tokens of an 8B-class Q4_0 model
// 1.3× as fast with them; for F16 they were 3% slower there), every kind with
// PARSPEC_CUDA_PREFILL=tiled, none with another value of it (=slices: launches
// of 32 rows). The fused kernels then leave such launches to the plain ones.
bool prefill_tiles_take(WeightKind kind, int n) {
  static const bool all = env_is("PARSPEC_CUDA_PREFILL", "tiled");
  static const bool quantized = all || std::getenv("PARSPEC_CUDA_PREFILL") == nullptr;
  if (n <= kPrefillSlicesMaxRows) return false;
  return all || (quantized && (kind == WeightKind::kQ8_0 || kind == WeightKind::kQ4_0 ||
                               kind == WeightKind::kQ4_K || kind == WeightKind::kQ6_K));
}

// Whether the prefill tiles take chains in groups (matmul_prefill_grouped_kernel);
// PARSPEC_CUDA_PREFILL_GROUPS=1 has one group walk all of K (the kernel
// before the groups).
bool prefill_grouped_wanted() {
  static const bool wanted = !env_is("PARSPEC_CUDA_PREFILL_GROUPS", "1");
  return wanted;
}

// Whether matmul_prefill_grouped_kernel<kKind> has its shared memory on this
// process's device (prepare_launches asks for it, before any graph capture);
// the one-group kernel, which fits the default, runs where not.
template <WeightKind kKind>
bool prefill_grouped_ready = false;

template <WeightKind kKind>
void prepare_prefill_tiles() {
  prefill_grouped_ready<kKind> = cudaFuncSetAttribute(matmul_prefill_grouped_kernel<kKind>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      kPrefillGroupedBytes<kKind>) == cudaSuccess;
  if (!prefill_grouped_ready<kKind>) (void)cudaGetLastError();
}

// matmul_prefill_kernel over n block-major rows where its scales can be copied
// in pairs (an even number of blocks a row); false where it did not launch.
template <WeightKind kKind>
bool launch_prefill_tiles(const MatmulGroup& g, const int8_t* xq, const float* xd, int n,
                          cudaStream_t stream) {
  if ((g.w[0].n_in / 32) % 2 != 0) return false;
  const int blocks = prefill_blocks<kPrefillRows, kPrefillCols>(g, n);
  if (prefill_grouped_wanted() && prefill_grouped_ready<kKind>)
    launch(matmul_prefill_grouped_kernel<kKind>, blocks, kPrefillGroups * kPrefillThreads,
           kPrefillGroupedBytes<kKind>, stream, g, xq, xd, n);
  else
    launch(matmul_prefill_kernel<kKind>, blocks, kPrefillThreads, 0, stream, g, xq, xd, n);
  return true;
}

// The tensor-core path for F16/BF16 weights (the default; PARSPEC_CUDA_HALF_MATMUL=warp
// selects matmul_f_kernel). A block computes kMmaRows weight rows for every
// activation row of the launch, in slices of 8·kTiles rows: its kMmaWarps
// warps split K in chunks of 32 (warp w takes chunks w, w + kMmaWarps, ...),
// and for each chunk and tile of 8 activation rows two 16×8×16 mma.sync take
// the chunk's first and second 16 elements. The f32 activations enter as two
// halves of the weights' type, x = hi + lo (hi = x rounded, lo = the rest
// rounded), each its own pair of mmas, so that the products keep about twice
// that type's precision; every mma adds into the warp's f32 accumulator in
// chunk order, and the warps' sums are then added in warp order. Nothing in
// a row's arithmetic depends on the other rows or on how many there are, so
// one kernel serves every row count with the same bits per row.
template <WeightKind kKind>
__device__ void mma_half(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kKind == WeightKind::kF16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // built for sm_80 and later only
#endif
}

// Two f32 values as a pair of the weights' half type: `hi` rounded to
// nearest, `lo` what is left of each, rounded likewise.
template <WeightKind kKind>
__device__ void split_pair(float x0, float x1, unsigned& hi, unsigned& lo) {
  if constexpr (kKind == WeightKind::kF16) {
    const __half2 h = __floats2half2_rn(x0, x1);
    const __half2 l =
        __floats2half2_rn(__fsub_rn(x0, __low2float(h)), __fsub_rn(x1, __high2float(h)));
    hi = *reinterpret_cast<const unsigned*>(&h);
    lo = *reinterpret_cast<const unsigned*>(&l);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    const __nv_bfloat162 l =
        __floats2bfloat162_rn(__fsub_rn(x0, __low2float(h)), __fsub_rn(x1, __high2float(h)));
    hi = *reinterpret_cast<const unsigned*>(&h);
    lo = *reinterpret_cast<const unsigned*>(&l);
  }
}

// Each group of 8 consecutive values of x (n × n_in of them, n_in a multiple
// of 32: no group crosses a row) as matmul_half_mma_kernel's lanes split a
// chunk's: 16 bytes of the four pairs' hi halves, then 16 of their lo halves
// (split_pair, in the same order). A launch of many rows then reads its
// operands instead of splitting them again in every block.
template <WeightKind kKind>
__global__ void split_halves_kernel(const float* x, int64_t groups, uint4* out) {
  begin_kernel();
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  const float4* src = reinterpret_cast<const float4*>(x) + 2 * g;
  const float4 u = src[0], v = src[1];
  uint4 hi, lo;
  split_pair<kKind>(u.x, u.y, hi.x, lo.x);
  split_pair<kKind>(u.z, u.w, hi.y, lo.y);
  split_pair<kKind>(v.x, v.y, hi.z, lo.z);
  split_pair<kKind>(v.z, v.w, hi.w, lo.w);
  out[2 * g] = hi;
  out[2 * g + 1] = lo;
}

// What a matmul_half_mma_kernel block does with its sums: write them
// (kPlain); kGated (PARSPEC_CUDA_FUSE=swiglu): g holds gate and up, a block's
// 16 rows are 8 rows of each with the same outputs (gate rows in the mma's
// rows 0..7, up rows in 8..15), and it writes swiglu_value of each pair to
// gate's output; kQkv (PARSPEC_CUDA_FUSE=rope): g holds q, k and v, a block's
// rows are a tile as qkv_tile_row says, and store_qkv_tile takes its sums.
// Each row's sums are the same in every one.
enum class HalfEpilogue { kPlain, kGated, kQkv };

// How a matmul_half_mma_kernel block gets each chunk's operands (split_pair
// of the same values in every case, so the same bits):
// - kRows: lane (gid, t) loads activation row gid's values 8t..8t+7 and splits
//   them, also where the row is past the launch's (zeros).
// - kPairs (one or two rows, one tile): lane 16r + p splits pair p (values
//   2p, 2p + 1) of row r, and each lane takes its four pairs from those lanes
//   by shuffles: a quarter or half of the lanes' conversions, where kRows has
//   every lane convert eight values for 4 mmas whatever the rows.
// - kNormed (PARSPEC_CUDA_FUSE=norm, one row): the row is g.norm.h, normalized
//   on its way in with add_rmsnorm_wide_kernel's steps (x_all unused).
// - kSplit: the rows come split in g.half_split (split_halves_kernel; x_all unused).
enum class HalfInput { kRows, kPairs, kNormed, kSplit };

// kEarly (PARSPEC_CUDA_PREFETCH=operands): each lane loads its first chunk of
// weights before begin_kernel waits for the kernel before it (the same values).
template <WeightKind kKind, int kTiles, HalfEpilogue kEpilogue = HalfEpilogue::kPlain,
          HalfInput kInput = HalfInput::kRows, bool kEarly = false>
__global__ void __launch_bounds__(kMmaWarps* kWarp, kTiles == 1 ? 2 : 1)
    matmul_half_mma_kernel(MatmulGroup g, const float* x_all, int M_all, QkvStore st) {
  constexpr bool kNormed = kInput == HalfInput::kNormed;
  static_assert(kTiles == 1 || kInput == HalfInput::kRows || kInput == HalfInput::kSplit,
                "a normalized input is one row, and pairs come from one or two");
  constexpr bool kGated = kEpilogue == HalfEpilogue::kGated;
  constexpr bool kQkv = kEpilogue == HalfEpilogue::kQkv;
  __shared__ float partial_s[kMmaWarps][kMmaRows][8 * kTiles];
  DeviceMatrix w;
  float* y_all;
  int64_t tile_row0 = 0, tile = 0;
  int part = 0;
  bool has_tile = true;  // the same for the whole block
  if constexpr (kGated) {
    w = g.w[0];
    y_all = g.y[0];
    tile_row0 = static_cast<int64_t>(blockIdx.x) * (kMmaRows / 2);
    // The block's rows of gate, then the same rows of up, one a thread.
    constexpr int kHalf = kMmaRows / 2;
    // Two calls, not one on a choice of matrix: a reference that may be to
    // either would need both in addressable memory.
    if (weights_early_wanted && static_cast<int>(threadIdx.x) < kHalf)
      prefetch_weight_row(w, tile_row0 + threadIdx.x);
    else if (weights_early_wanted && static_cast<int>(threadIdx.x) < kMmaRows)
      prefetch_weight_row(g.w[1], tile_row0 + threadIdx.x - kHalf);
  } else if constexpr (kQkv) {
    has_tile = block_tile_of_part(g, kMmaRows, w, y_all, part, tile);
    if (has_tile)
      prefetch_rows_early(w, kMmaRows,
                          [&](int r) { return qkv_tile_row(st.shape, part, tile, r); });
  } else {
    has_tile = block_tile(g, w, y_all, tile_row0);
    if (has_tile) prefetch_rows_early(w, kMmaRows, [&](int r) { return tile_row0 + r; });
  }
  if (!has_tile) {
    begin_kernel();
    return;
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int gid = lane / 4, t = lane % 4;
  const int64_t n_in = w.n_in, chunks = n_in / 32;
  // The mma's rows gid and gid + 8: two rows of w, or a gate row and its up row.
  const int64_t row_a = kQkv ? qkv_tile_row(st.shape, part, tile, gid) : tile_row0 + gid;
  const int64_t row_b = kGated ? row_a
                        : kQkv ? qkv_tile_row(st.shape, part, tile, gid + 8)
                               : row_a + 8;
  const uint16_t* wq = static_cast<const uint16_t*>(w.q);
  const uint16_t* wq_b = static_cast<const uint16_t*>(kGated ? g.w[1].q : w.q);
  const uint4 zero = {0u, 0u, 0u, 0u};
  // A lane's chunk c of its two weight rows (zeros past the matrix).
  auto weights_of = [&](int64_t c, uint4& pa, uint4& pb) {
    const int64_t k0 = c * 32 + 8 * t;
    pa = row_a < w.n_out ? *reinterpret_cast<const uint4*>(wq + row_a * n_in + k0) : zero;
    pb = row_b < w.n_out ? *reinterpret_cast<const uint4*>(wq_b + row_b * n_in + k0) : zero;
  };
  uint4 first_a = zero, first_b = zero;
  if (kEarly && warp < chunks) weights_of(warp, first_a, first_b);
  begin_kernel();
  float norm_scale = 0.0f;
  if constexpr (kNormed) {
    x_all = g.norm.h;
    norm_scale =
        normalized_row_scale(g.norm.h, static_cast<int>(n_in), g.norm.eps, kMmaWarps * kWarp);
  }

  for (int m_base = 0; m_base < M_all; m_base += 8 * kTiles) {
    const int M = min(8 * kTiles, M_all - m_base);
    const float* x = x_all + static_cast<int64_t>(m_base) * n_in;
    float* y = y_all + static_cast<int64_t>(m_base) * w.n_out;
    if (m_base > 0) __syncthreads();  // the previous slice's partial sums are read

    float acc[kTiles][4];
#pragma unroll
    for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

    // Lane (gid, t) holds elements 8t..8t+7 of the chunk: the first mma takes
    // 8t..8t+3 of every lane, the second 8t+4..8t+7 (K positions 2t, 2t+1 of
    // an mma are the first pair, 2t+8, 2t+9 the second, in A and B alike).
    constexpr int kUnroll = kTiles == 1 ? 4 : 2;
#pragma unroll kUnroll
    for (int64_t c = warp; c < chunks; c += kMmaWarps) {
      const int64_t k0 = c * 32 + 8 * t;
      uint4 pa = first_a, pb = first_b;
      if (!kEarly || m_base > 0 || c != warp) weights_of(c, pa, pb);
      const unsigned a1[4] = {pa.x, pb.x, pa.y, pb.y};
      const unsigned a2[4] = {pa.z, pb.z, pa.w, pb.w};
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        if constexpr (kInput == HalfInput::kPairs) {
          unsigned h = 0, l = 0;
          if (lane < 16 * M) {  // M is 1 or 2
            const float2 pair =
                *reinterpret_cast<const float2*>(x + (lane / 16) * n_in + c * 32 + 2 * (lane % 16));
            split_pair<kKind>(pair.x, pair.y, h, l);
          }
          // Every lane takes part in the shuffles. Lanes of rows past M take
          // a real row's pairs: an mma's column of outputs depends on its own
          // column of operands alone, and those sums are not stored. Each
          // mma's two words are fetched just before it, in the usual order,
          // so that few are held at once.
          const int from = 16 * (gid & 1) + 4 * t;
          auto words = [&](unsigned v, int j, unsigned(&b)[2]) {
            b[0] = __shfl_sync(0xffffffffu, v, from + j);
            b[1] = __shfl_sync(0xffffffffu, v, from + j + 1);
          };
          unsigned b[2];
          words(h, 0, b);
          mma_half<kKind>(acc[i], a1, b);
          words(l, 0, b);
          mma_half<kKind>(acc[i], a1, b);
          words(h, 2, b);
          mma_half<kKind>(acc[i], a2, b);
          words(l, 2, b);
          mma_half<kKind>(acc[i], a2, b);
          continue;
        }
        const int m = 8 * i + gid;
        unsigned hi1[2], lo1[2], hi2[2], lo2[2];
        if constexpr (kInput == HalfInput::kSplit) {
          const uint4* split = reinterpret_cast<const uint4*>(g.half_split);
          uint4 hi = zero, lo = zero;
          if (m < M) {
            const int64_t group = ((static_cast<int64_t>(m_base) + m) * n_in + k0) / 8;
            hi = split[2 * group];
            lo = split[2 * group + 1];
          }
          hi1[0] = hi.x, hi1[1] = hi.y, hi2[0] = hi.z, hi2[1] = hi.w;
          lo1[0] = lo.x, lo1[1] = lo.y, lo2[0] = lo.z, lo2[1] = lo.w;
        } else {
          float4 u = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v = u;
          if (m < M) {
            const float4* src =
                reinterpret_cast<const float4*>(x + static_cast<int64_t>(m) * n_in + k0);
            u = src[0];
            v = src[1];
            if constexpr (kNormed) {
              const float4* gain = reinterpret_cast<const float4*>(g.norm.weight + k0);
              u = normalized4(u, norm_scale, gain[0]);
              v = normalized4(v, norm_scale, gain[1]);
            }
          }
          split_pair<kKind>(u.x, u.y, hi1[0], lo1[0]);
          split_pair<kKind>(u.z, u.w, hi1[1], lo1[1]);
          split_pair<kKind>(v.x, v.y, hi2[0], lo2[0]);
          split_pair<kKind>(v.z, v.w, hi2[1], lo2[1]);
        }
        mma_half<kKind>(acc[i], a1, hi1);
        mma_half<kKind>(acc[i], a1, lo1);
        mma_half<kKind>(acc[i], a2, hi2);
        mma_half<kKind>(acc[i], a2, lo2);
      }
    }
    if constexpr (kGated) {
      add_gated_warp_sums<kTiles>(acc, partial_s, warp, gid, t, tile_row0, w.n_out, M, y);
    } else if constexpr (kQkv) {
      // Each (row, activation row)'s sum in warp order, as add_warp_sums adds
      // it, into warp 0's place (each thread reads and writes its own), then
      // the tile's biases, rotations and stores.
      store_warp_accumulators<kTiles>(acc, partial_s, warp, gid, t);
      __syncthreads();
      for (int e = threadIdx.x; e < kMmaRows * 8 * kTiles; e += kMmaWarps * kWarp) {
        const int r = e / (8 * kTiles), m = e % (8 * kTiles);
        partial_s[0][r][m] = sum_in_warp_order(partial_s, r, m);
      }
      __syncthreads();
      store_qkv_tile(st, part, tile, w.n_out, &partial_s[0][0][0], 8 * kTiles, M, m_base,
                     kMmaWarps * kWarp);
    } else {
      add_warp_sums<kTiles>(acc, partial_s, warp, gid, t, tile_row0, w.n_out, M, y, g.accumulate);
    }
  }
}

// PARSPEC_CUDA_PREFILL=tiled for F16/BF16 weights: matmul_half_mma_kernel's
// arithmetic in tiles of 64 weight rows × 64 activation rows a block, as
// matmul_prefill_kernel does for Q8_0/Q4_0. Its 16 warps' chains (chain c:
// chunks c, c + 16, ... of 32 elements) run one after another, each chunk's
// four mmas (first half hi, lo, second half hi, lo) adding into the chain's
// accumulator with the same operands in the same K positions, and each
// chain's sum, once its last chunk is in, is added to the total in chain
// order as add_warp_sums adds the warps'.
constexpr int kHalfPrefillStages = 3;  // chunks in shared memory: one computed, two loading

// One chunk of a tile in shared memory: 64 weight rows of 32 halves, then 64
// activation rows of 32 floats, padded to 36 so that the 8 rows a warp reads
// at once fall in different banks.
struct HalfPrefillStage {
  static constexpr int kWeightRow = 64;  // bytes
  static constexpr int kActRow = 36 * 4;
  static constexpr int kWeights = kPrefillRows * kWeightRow;
  static constexpr int kBytes = kWeights + kPrefillCols * kActRow;
  static constexpr int kAllBytes = kHalfPrefillStages * kBytes;
  static_assert(kWeights % 16 == 0 && kActRow % 16 == 0, "16-byte copies");
};

// kSplit: the rows come split in g.half_split (split_halves_kernel), whose 32
// bytes of each group of 8 values lie where the 8 floats would, and are staged
// as they are (x unused).
template <WeightKind kKind, bool kSplit = false>
__global__ void __launch_bounds__(kPrefillThreads)
    matmul_half_prefill_kernel(MatmulGroup g, const float* x, int M) {
  using Stage = HalfPrefillStage;
  begin_kernel();
  __shared__ int4 half_prefill_shared[Stage::kAllBytes / 16];
  uint8_t* smem = reinterpret_cast<uint8_t*>(half_prefill_shared);
  DeviceMatrix w;
  float* y;
  int64_t row0;
  int col0;
  if (!prefill_tile<kPrefillRows, kPrefillCols>(g, M, w, y, row0, col0))
    return;  // the same for the whole block
  const int64_t n_in = w.n_in;
  const int chunks = static_cast<int>(n_in / 32);
  const uint8_t* wq = static_cast<const uint8_t*>(w.q);

  // Position p's operands into stage s, zeros past the last weight or activation row.
  auto issue = [&](int s, int p) {
    bool last;
    const int64_t c = chain_major_block(p, chunks, last);
    uint8_t* base = smem + s * Stage::kBytes;
#pragma unroll
    for (int e = threadIdx.x; e < kPrefillRows * 4; e += kPrefillThreads) {
      const int r = e / 4, piece = e % 4;
      const int64_t row = row0 + r;
      const bool valid = row < w.n_out;
      copy_async<16>(base + r * Stage::kWeightRow + 16 * piece,
                     valid ? wq + (row * n_in + c * 32) * 2 + 16 * piece : wq, valid);
    }
    uint8_t* acts = base + Stage::kWeights;
#pragma unroll
    for (int e = threadIdx.x; e < kPrefillCols * 8; e += kPrefillThreads) {
      const int m = e / 8, piece = e % 8;
      const bool valid = col0 + m < M;
      const float* src = kSplit ? reinterpret_cast<const float*>(g.half_split) : x;
      copy_async<16>(acts + m * Stage::kActRow + 16 * piece,
                     valid ? src + (col0 + m) * n_in + c * 32 + 4 * piece : src, valid);
    }
  };

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int gid = lane / 4, t = lane % 4;
  const int warp_row = 32 * (warp % 2), warp_col = 32 * (warp / 2);
  PrefillSums sums;

  // Position p's mmas from stage s, as matmul_half_mma_kernel's chunk step.
  auto compute = [&](int s, int p) {
    bool last;
    (void)chain_major_block(p, chunks, last);
    const uint8_t* base = smem + s * Stage::kBytes;
    // Lane (gid, t) holds elements 8t..8t+7 of the chunk, of rows gid and gid + 8.
    unsigned a1[2][4], a2[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = warp_row + 16 * i + gid;
      const uint4 pa = *reinterpret_cast<const uint4*>(base + r * Stage::kWeightRow + 16 * t);
      const uint4 pb = *reinterpret_cast<const uint4*>(base + (r + 8) * Stage::kWeightRow + 16 * t);
      a1[i][0] = pa.x, a1[i][1] = pb.x, a1[i][2] = pa.y, a1[i][3] = pb.y;
      a2[i][0] = pa.z, a2[i][1] = pb.z, a2[i][2] = pa.w, a2[i][3] = pb.w;
    }
    const uint8_t* acts = base + Stage::kWeights;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint8_t* at = acts + (warp_col + 8 * j + gid) * Stage::kActRow + 32 * t;
      unsigned hi1[2], lo1[2], hi2[2], lo2[2];
      if constexpr (kSplit) {
        const uint4 hi = reinterpret_cast<const uint4*>(at)[0];
        const uint4 lo = reinterpret_cast<const uint4*>(at)[1];
        hi1[0] = hi.x, hi1[1] = hi.y, hi2[0] = hi.z, hi2[1] = hi.w;
        lo1[0] = lo.x, lo1[1] = lo.y, lo2[0] = lo.z, lo2[1] = lo.w;
      } else {
        const float4 u = reinterpret_cast<const float4*>(at)[0];
        const float4 v = reinterpret_cast<const float4*>(at)[1];
        split_pair<kKind>(u.x, u.y, hi1[0], lo1[0]);
        split_pair<kKind>(u.z, u.w, hi1[1], lo1[1]);
        split_pair<kKind>(v.x, v.y, hi2[0], lo2[0]);
        split_pair<kKind>(v.z, v.w, hi2[1], lo2[1]);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        mma_half<kKind>(sums.chain[i][j], a1[i], hi1);
        mma_half<kKind>(sums.chain[i][j], a1[i], lo1);
        mma_half<kKind>(sums.chain[i][j], a2[i], hi2);
        mma_half<kKind>(sums.chain[i][j], a2[i], lo2);
      }
    }
    if (last) sums.close_chain();  // the same on every thread
  };

  each_position_streamed<kHalfPrefillStages>(chunks, issue, compute);

  sums.store(chunks, row0 + warp_row, w.n_out, col0 + warp_col, M, gid, t, y);
}

// F16/BF16 weights of a width that is a multiple of 32 go through
// matmul_half_mma_kernel at every row count, unless PARSPEC_CUDA_HALF_MATMUL=warp.
bool half_tensor_cores(int64_t n_in) {
  static const bool wanted = !env_is("PARSPEC_CUDA_HALF_MATMUL", "warp");
  return wanted && n_in % 32 == 0;
}

// split_halves_kernel over `groups` groups of 8 values of x into `out`.
template <WeightKind kKind>
void launch_split_halves(const float* x, int64_t groups, uint32_t* out, cudaStream_t stream) {
  launch(split_halves_kernel<kKind>, blocks_for(groups, 256), 256, 0, stream, x, groups,
         reinterpret_cast<uint4*>(out));
}

// matmul_half_mma_kernel over `tiles` blocks (-1: a plain group's).
template <WeightKind kKind, HalfEpilogue kEpilogue = HalfEpilogue::kPlain>
void launch_half_mma(const MatmulGroup& g, const float* x, int n, cudaStream_t stream,
                     int tiles = -1, const QkvStore& st = {}) {
  if (tiles < 0) tiles = weight_row_tiles(g);
  constexpr int kThreads = kMmaWarps * kWarp;
  MatmulGroup own = g;  // half_split set only where the input is split first
  own.half_split = nullptr;
  // Many rows, and room to split them into: the split kernel first.
  const bool split_first = g.half_split != nullptr && half_split_rows_wanted(n);
  if (split_first)
    launch_split_halves<kKind>(x, int64_t{n} * g.w[0].n_in / 8, g.half_split, stream);
  if (kEpilogue == HalfEpilogue::kPlain && prefill_tiles_take(kKind, n) && !g.accumulate) {
    if (split_first)
      return launch(matmul_half_prefill_kernel<kKind, true>,
                    prefill_blocks<kPrefillRows, kPrefillCols>(g, n), kPrefillThreads, 0, stream, g,
                    x, n);
    return launch(matmul_half_prefill_kernel<kKind>,
                  prefill_blocks<kPrefillRows, kPrefillCols>(g, n), kPrefillThreads, 0, stream, own,
                  x, n);
  }
  if (g.norm.h != nullptr)  // one row (one_row_fusable)
    return launch(matmul_half_mma_kernel<kKind, 1, kEpilogue, HalfInput::kNormed>, tiles, kThreads,
                  0, stream, own, x, n, st);
  switch ((n + 7) / 8) {
    case 1:
      if (n <= 2 && !half_split_in_block()) {
        if (operands_before_wait())
          return launch(matmul_half_mma_kernel<kKind, 1, kEpilogue, HalfInput::kPairs, true>, tiles,
                        kThreads, 0, stream, own, x, n, st);
        return launch(matmul_half_mma_kernel<kKind, 1, kEpilogue, HalfInput::kPairs>, tiles,
                      kThreads, 0, stream, own, x, n, st);
      }
      return launch(matmul_half_mma_kernel<kKind, 1, kEpilogue>, tiles, kThreads, 0, stream, own, x,
                    n, st);
    case 2:
      return launch(matmul_half_mma_kernel<kKind, 2, kEpilogue>, tiles, kThreads, 0, stream, own, x,
                    n, st);
    default:  // more than 16 rows: slices of 32 in one launch
      if (split_first)
        return launch(matmul_half_mma_kernel<kKind, kMmaMaxTiles, kEpilogue, HalfInput::kSplit>,
                      tiles, kThreads, 0, stream, g, x, n, st);
      return launch(matmul_half_mma_kernel<kKind, kMmaMaxTiles, kEpilogue>, tiles, kThreads, 0,
                    stream, own, x, n, st);
  }
}

// One activation row (a decode step) with exactly the tensor-core kernel's
// arithmetic, without its padding of the row to a tile of 8: the block's 16
// half-warps take one weight row each, half-warp lane v sums the blocks v,
// v + 16, ... in order as warp v of the tensor-core kernel does (the same
// exact integer block sums, here by dp4a, and the same fma), and lane 0 adds
// the 16 partial sums in lane order. The activation row is staged in shared
// memory once per block. So a row's value is the same whichever kernel runs it.
// The 16 values of a half-warp added in lane order (as the tensor-core kernel
// adds its 16 warps' sums), on every lane of the half-warp; every lane of the
// warp must call it.
__device__ float half_warp_sum_in_order(float v, int lane) {
  const int first = lane & 16;
  float total = __shfl_sync(0xffffffffu, v, first);
  for (int u = 1; u < 16; ++u) total = __fadd_rn(total, __shfl_sync(0xffffffffu, v, first + u));
  return total;
}

constexpr int kGemvThreads = kMmaRows * 16;
constexpr int kGemvPrefetch = 8;  // weight blocks per lane requested before the row is staged

// The one-row kernels' activation row (nb blocks of quants, then their
// scales) staged in shared memory by the block's `threads` threads; xs and ds
// point at the staged quants and scales.
__device__ void stage_activation_row(int4* shared, const int8_t* xq, const float* xd, int64_t nb,
                                     int threads, const int8_t*& xs, const float*& ds) {
  int8_t* quants = reinterpret_cast<int8_t*>(shared);
  float* scales = reinterpret_cast<float*>(quants + nb * 32);
  for (int64_t i = threadIdx.x; i < nb * 2; i += threads)
    shared[i] = reinterpret_cast<const int4*>(xq)[i];
  for (int64_t i = threadIdx.x; i < nb; i += threads) scales[i] = xd[i];
  __syncthreads();
  xs = quants;
  ds = scales;
}

// The one-row kernels' activation row normalized from norm.h (PARSPEC_CUDA_FUSE=norm):
// add_rmsnorm_wide_kernel's values, quantized as it quantizes them, into
// shared memory as stage_activation_row lays a row out.
__device__ void stage_normalized_row(int4* shared, const RowNorm& norm, int64_t nb, int threads,
                                     const int8_t*& xs, const float*& ds) {
  int8_t* quants = reinterpret_cast<int8_t*>(shared);
  float* scales = reinterpret_cast<float*>(quants + nb * 32);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const float scale = normalized_row_scale(norm.h, static_cast<int>(nb * 32), norm.eps, threads);
  for (int64_t b = warp; b < nb; b += threads / kWarp) {
    const int64_t i = b * 32 + lane;
    const float y = __fmul_rn(__fmul_rn(norm.h[i], scale), norm.weight[i]);
    quantize_block(y, lane, quants + b * 32, scales + b);
  }
  __syncthreads();
  xs = quants;
  ds = scales;
}

// The one-row kernels' input: normalized from norm.h where it is set, else
// the quantized row xq, xd. The same for the whole block.
__device__ void stage_input_row(int4* shared, const RowNorm& norm, const int8_t* xq,
                                const float* xd, int64_t nb, int threads, const int8_t*& xs,
                                const float*& ds) {
  if (norm.h != nullptr)
    stage_normalized_row(shared, norm, nb, threads, xs, ds);
  else
    stage_activation_row(shared, xq, xd, nb, threads, xs, ds);
}

// NormAfter at the end of a one-row matmul block that added its outputs into
// h (dim values): the last block of the grid to finish normalizes the whole
// row with add_rmsnorm_wide_kernel's steps and quantizes it as that kernel
// does. Every thread of every block calls it.
__device__ void normalize_after_last_block(const NormAfter& after, const float* h, int dim,
                                           int threads) {
  if (!last_block_to_arrive(after.counter, static_cast<int>(gridDim.x))) return;
  const float scale = normalized_row_scale<true>(h, dim, after.eps, threads);
  const int lane = threadIdx.x % kWarp;
  for (int b = threadIdx.x / kWarp; b < dim / 32; b += threads / kWarp) {
    const int i = b * 32 + lane;
    const float y = __fmul_rn(__fmul_rn(__ldcg(h + i), scale), after.weight[i]);
    quantize_block(y, lane, after.q + b * 32, after.scales + b);
  }
}

// A lane's first kGemvPrefetch weight blocks of a row (blocks first,
// first + stride, ...: a half-warp lane's are v, v + 16, ...) and their scales,
// requested together so that their loads overlap, then used in block order.
template <WeightKind kKind, int kCount = kGemvPrefetch>
struct FirstBlocks {
  RawBlock raw[kCount];
  __half scale[kCount];

  __device__ void load(const DeviceMatrix& w, const __half* row_scales, int64_t row, int64_t nb,
                       int64_t first, int stride) {
#pragma unroll
    for (int p = 0; p < kCount; ++p) {
      const int64_t b = first + stride * p;
      if (b < nb) {
        raw[p] = load_raw_block<kKind>(w, row * nb + b);
        scale[p] = row_scales[b];
      }
    }
  }
  // step(b, its 32 values as int8 in eight words, its scale) for each of the
  // blocks below nb, in order.
  template <class Step>
  __device__ void each(int64_t nb, int64_t first, int stride, Step&& step) const {
#pragma unroll
    for (int p = 0; p < kCount; ++p) {
      const int64_t b = first + stride * p;
      if (b >= nb) break;
      int wq[8];
      unpack_raw_block<kKind>(raw[p], wq);
      step(b, wq, __half2float(scale[p]));
    }
  }
};

// step(b, values, scale) for the lane's blocks after the first kFirst, each
// loaded as the loop comes to it (kUnroll of them in flight).
template <WeightKind kKind, int kUnroll, int kFirst = kGemvPrefetch, class Step>
__device__ void each_later_block(const DeviceMatrix& w, const __half* row_scales, int64_t row,
                                 int64_t nb, int64_t first, int stride, Step&& step) {
#pragma unroll kUnroll
  for (int64_t b = first + stride * kFirst; b < nb; b += stride) {
    int wq[8];
    load_block_q<kKind>(w, row * nb + b, wq);
    step(b, wq, __half2float(row_scales[b]));
  }
}
static_assert(kMmaWarps == 16, "the one-row kernel mirrors 16 K-splitting warps");

// kQkv (PARSPEC_CUDA_FUSE=rope): g holds q, k and v, the block's rows are a
// tile as qkv_tile_row says, and store_qkv_tile takes the sums.
template <WeightKind kKind, bool kQkv = false>
__global__ void __launch_bounds__(kGemvThreads)
    matmul_gemv_kernel(MatmulGroup g, const int8_t* xq, const float* xd, QkvStore st) {
  extern __shared__ int4 gemv_shared[];
  DeviceMatrix w;
  float* y;
  int64_t row0 = 0, tile = 0;
  int part = 0;
  // The same for the whole block.
  const bool has_tile =
      kQkv ? block_tile_of_part(g, kMmaRows, w, y, part, tile) : block_tile(g, w, y, row0);
  if (has_tile)
    prefetch_rows_early(w, kMmaRows, [&](int r) {
      return kQkv ? qkv_tile_row(st.shape, part, tile, r) : row0 + r;
    });
  if (!has_tile) {
    begin_kernel();
    return;
  }
  const int64_t nb = w.n_in / 32;
  const int lane = threadIdx.x % kWarp, v = threadIdx.x % 16;
  const int64_t row =
      kQkv ? qkv_tile_row(st.shape, part, tile, threadIdx.x / 16) : row0 + threadIdx.x / 16;
  const bool has_row = row < w.n_out;
  const __half* scales = static_cast<const __half*>(w.scales) + row * nb;
  // The lane's first weight blocks are requested before the activation row
  // is staged (PARSPEC_CUDA_PREFETCH=operands: before the wait), so that
  // their loads overlap it (the blocks are still summed in the same order).
  FirstBlocks<kKind> first;
  const bool early = operands_early_wanted;
  if (!early) begin_kernel();
  if (has_row) first.load(w, scales, row, nb, v, 16);
  if (early) begin_kernel();
  const int8_t* xs;
  const float* ds;
  stage_input_row(gemv_shared, g.norm, xq, xd, nb, kGemvThreads, xs, ds);
  float acc = 0.0f;
  if (has_row) {
    // Block b's product, added in block order.
    auto step = [&](int64_t b, const int(&wq)[8], float dw) {
      const int4* x4 = reinterpret_cast<const int4*>(xs + b * 32);
      const float sum = block_dot_float(wq, x4[0], x4[1]);
      acc = __fmaf_rn(__fmul_rn(dw, ds[b]), sum, acc);
    };
    first.each(nb, v, 16, step);
    each_later_block<kKind, 8>(w, scales, row, nb, v, 16, step);
  }
  // Every lane takes part in the shuffles, also those past the last row.
  const float total = half_warp_sum_in_order(acc, lane);
  if constexpr (kQkv) {
    __shared__ float tile_s[kMmaRows];
    if (v == 0) tile_s[threadIdx.x / 16] = total;
    __syncthreads();
    store_qkv_tile(st, part, tile, w.n_out, tile_s, 1, 1, 0, kGemvThreads);
  } else {
    if (v == 0 && row < w.n_out) y[row] = g.accumulate ? __fadd_rn(y[row], total) : total;
    if (g.norm_after.weight != nullptr)  // the same for the whole grid
      normalize_after_last_block(g.norm_after, y, static_cast<int>(w.n_out), kGemvThreads);
  }
}

// Two to kR activation rows (a short verification) the same way: each
// half-warp lane takes its blocks for every row, reading the weights once and
// the rows' quants from global memory (they stay in L1); every (row, output)
// gets the tensor-core kernel's expression, as in matmul_gemv_kernel.
template <WeightKind kKind, int kR>
__global__ void __launch_bounds__(kGemvThreads)
    matmul_rows_kernel(MatmulGroup g, const int8_t* xq, const float* xd, int M) {
  DeviceMatrix w;
  float* y;
  int64_t row0;
  const bool has_tile = block_tile(g, w, y, row0);  // the same for the whole block
  if (has_tile) prefetch_rows_early(w, kMmaRows, [&](int r) { return row0 + r; });
  begin_kernel();
  if (!has_tile) return;
  const int64_t nb = w.n_in / 32;
  const int lane = threadIdx.x % kWarp, v = threadIdx.x % 16;
  const int64_t row = row0 + threadIdx.x / 16;
  float acc[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) acc[r] = 0.0f;
  if (row < w.n_out) {
    const __half* scales = static_cast<const __half*>(w.scales) + row * nb;
    // Block b's products for every row, added in block order.
    auto step = [&](int64_t b, const int(&wq)[8], float dw) {
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (r >= M) break;  // M is the same on every lane
        const int64_t xb = static_cast<int64_t>(r) * nb + b;
        const int4* x4 = reinterpret_cast<const int4*>(xq + xb * 32);
        const float sum = block_dot_float(wq, __ldg(x4), __ldg(x4 + 1));
        acc[r] = __fmaf_rn(__fmul_rn(dw, __ldg(xd + xb)), sum, acc[r]);
      }
    };
    // The lane's first weight blocks are all requested before any is used.
    FirstBlocks<kKind> first;
    first.load(w, scales, row, nb, v, 16);
    first.each(nb, v, 16, step);
    each_later_block<kKind, 4>(w, scales, row, nb, v, 16, step);
  }
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    if (r >= M) break;
    const float total = half_warp_sum_in_order(acc[r], lane);
    if (v == 0 && row < w.n_out) y[static_cast<int64_t>(r) * w.n_out + row] = total;
  }
}

// PARSPEC_CUDA_ROWS=wide: two to kR activation rows as matmul_rows_kernel
// computes them, with each half-warp lane taking kW weight rows of its tile
// (half-warp h: rows h, h + 16/kW, ...), so that every activation block it
// reads from L1 serves kW weight rows instead of one: at 4 rows the
// per-weight-row kernel reads 8 bytes of activations for each byte of Q4_0
// weights. A lane keeps the next kDepth steps' weight blocks in flight. The
// chains' sums meet in shared memory, where one thread per output adds them
// in chain order (sum_in_warp_order), as half_warp_sum_in_order does.
template <WeightKind kKind, int kR, int kW>
__global__ void __launch_bounds__(kGemvThreads / kW)
    matmul_rows_wide_kernel(MatmulGroup g, const int8_t* xq, const float* xd, int M) {
  constexpr int kHalfWarps = 16 / kW, kThreads = kHalfWarps * 16;
  constexpr int kDepth = 8 / kW;  // steps of the lane's blocks loaded ahead
  static_assert(kHalfWarps * kW == kMmaRows, "a tile's rows split evenly over the half-warps");
  // (chain, tile row, activation row); kR + 1: at most 2 chains' writes share a bank.
  __shared__ float chains_s[kMmaWarps][kMmaRows][kR + 1];
  DeviceMatrix w;
  float* y;
  int64_t row0;
  const bool has_tile = block_tile(g, w, y, row0);  // the same for the whole block
  if (has_tile) prefetch_rows_early(w, kMmaRows, [&](int r) { return row0 + r; });
  if (!has_tile) {
    begin_kernel();
    return;
  }
  const int64_t nb = w.n_in / 32;
  const int v = threadIdx.x % 16, h = threadIdx.x / 16;
  // Rows past the matrix load its last row instead; their sums are not stored.
  const __half* scales[kW];
  int64_t rows[kW];
#pragma unroll
  for (int j = 0; j < kW; ++j) {
    const int64_t row = row0 + h + kHalfWarps * j;
    rows[j] = row < w.n_out ? row : w.n_out - 1;
    scales[j] = static_cast<const __half*>(w.scales) + rows[j] * nb;
  }
  // A ring of the lane's next kDepth steps (blocks b, b + 16, ...), each step
  // the block of every one of its kW rows.
  RawBlock raw[kDepth][kW];
  __half scale[kDepth][kW];
  auto load_step = [&](int slot, int64_t b) {
    if (b >= nb) return;
#pragma unroll
    for (int j = 0; j < kW; ++j) {
      raw[slot][j] = load_raw_block<kKind>(w, rows[j] * nb + b);
      scale[slot][j] = scales[j][b];
    }
  };
  // The first steps' loads, after the wait or (PARSPEC_CUDA_PREFETCH=operands) before it.
  const bool early = operands_early_wanted;
  if (!early) begin_kernel();
#pragma unroll
  for (int s = 0; s < kDepth; ++s) load_step(s, v + 16 * s);
  if (early) begin_kernel();
  float acc[kR][kW];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int j = 0; j < kW; ++j) acc[r][j] = 0.0f;
  for (int64_t b0 = v; b0 < nb; b0 += 16 * kDepth) {
#pragma unroll
    for (int s = 0; s < kDepth; ++s) {
      const int64_t b = b0 + 16 * s;
      if (b >= nb) break;
      int wq[kW][8];
      float dw[kW];
#pragma unroll
      for (int j = 0; j < kW; ++j) {
        unpack_raw_block<kKind>(raw[s][j], wq[j]);
        dw[j] = __half2float(scale[s][j]);
      }
      load_step(s, b + 16 * kDepth);  // the slot is free again
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (r >= M) break;  // M is the same on every lane
        const int64_t xb = static_cast<int64_t>(r) * nb + b;
        const int4* x4 = reinterpret_cast<const int4*>(xq + xb * 32);
        const int4 a = __ldg(x4), c = __ldg(x4 + 1);
        const float dx = __ldg(xd + xb);
#pragma unroll
        for (int j = 0; j < kW; ++j) {
          const float sum = block_dot_float(wq[j], a, c);
          acc[r][j] = __fmaf_rn(__fmul_rn(dw[j], dx), sum, acc[r][j]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int j = 0; j < kW; ++j) chains_s[v][h + kHalfWarps * j][r] = acc[r][j];
  __syncthreads();
  for (int o = threadIdx.x; o < kR * kMmaRows; o += kThreads) {
    const int r = o / kMmaRows, t = o % kMmaRows;
    const int64_t row = row0 + t;
    if (r >= M || row >= w.n_out) continue;
    y[static_cast<int64_t>(r) * w.n_out + row] = sum_in_warp_order(chains_s, t, r);
  }
}

// PARSPEC_CUDA_GEMV=paired: one row as matmul_gemv_kernel computes it, with
// twice the lanes loading its weights. Each weight row is a warp: chain v's
// blocks v, v + 16, v + 32, ... alternate between lanes v and v + 16, and lane
// v + 16 hands each of its products (the scale product and the exact integer
// sum) to lane v, which adds them into the chain in block order. The sums are
// the same; twice as many weight loads are in flight where a matrix has too
// few rows to fill the GPU with half-warps (wo, down).
constexpr int kPairedThreads = kMmaRows * kWarp;
constexpr int kPairedPrefetch = kGemvPrefetch / 2;  // a lane's: the chain's are twice that

template <WeightKind kKind>
__global__ void __launch_bounds__(kPairedThreads, 2)
    matmul_gemv_paired_kernel(MatmulGroup g, const int8_t* xq, const float* xd) {
  extern __shared__ int4 gemv_shared[];
  DeviceMatrix w;
  float* y;
  int64_t row0;
  const bool has_tile = block_tile(g, w, y, row0);  // the same for the whole block
  if (has_tile) prefetch_rows_early(w, kMmaRows, [&](int r) { return row0 + r; });
  begin_kernel();
  if (!has_tile) return;
  const int64_t nb = w.n_in / 32;
  const int lane = threadIdx.x % kWarp, v = lane % 16, parity = lane / 16;
  const int64_t row = row0 + threadIdx.x / kWarp;
  const bool has_row = row < w.n_out;
  const __half* scales = static_cast<const __half*>(w.scales) + (has_row ? row : 0) * nb;
  // The j-th block of chain v, v + 16j, is this lane's where j % 2 == parity.
  const int64_t first = v + 16 * parity;
  FirstBlocks<kKind, kPairedPrefetch> early;
  if (has_row) early.load(w, scales, row, nb, first, 32);
  const int8_t* xs;
  const float* ds;
  stage_input_row(gemv_shared, g.norm, xq, xd, nb, kPairedThreads, xs, ds);

  float acc = 0.0f;
  // This lane's product of block b, then both lanes' added by lane v in block
  // order (every lane of the warp takes part in the shuffles).
  auto fold = [&](bool ok, float x, float c) {
    const float x_odd = __shfl_down_sync(0xffffffffu, x, 16);
    const float c_odd = __shfl_down_sync(0xffffffffu, c, 16);
    const int ok_odd = __shfl_down_sync(0xffffffffu, ok ? 1 : 0, 16);
    if (parity == 0) {
      if (ok) acc = __fmaf_rn(x, c, acc);
      if (ok_odd) acc = __fmaf_rn(x_odd, c_odd, acc);
    }
  };
  auto product = [&](int64_t b, const int(&wq)[8], float dw, float& x, float& c) {
    const int4* x4 = reinterpret_cast<const int4*>(xs + b * 32);
    c = block_dot_float(wq, x4[0], x4[1]);
    x = __fmul_rn(dw, ds[b]);
  };
  const int64_t pairs = (nb + 31) / 32;  // of chain 0, the longest: the same on every lane
#pragma unroll
  for (int p = 0; p < kPairedPrefetch; ++p) {
    if (p >= pairs) break;
    const int64_t b = first + 32 * p;
    const bool ok = has_row && b < nb;
    float x = 0.0f, c = 0.0f;
    if (ok) {
      int wq[8];
      unpack_raw_block<kKind>(early.raw[p], wq);
      product(b, wq, __half2float(early.scale[p]), x, c);
    }
    fold(ok, x, c);
  }
#pragma unroll 2
  for (int64_t p = kPairedPrefetch; p < pairs; ++p) {
    const int64_t b = first + 32 * p;
    const bool ok = has_row && b < nb;
    float x = 0.0f, c = 0.0f;
    if (ok) {
      int wq[8];
      load_block_q<kKind>(w, row * nb + b, wq);
      product(b, wq, __half2float(scales[b]), x, c);
    }
    fold(ok, x, c);
  }
  const float total = half_warp_sum_in_order(acc, lane);
  if (lane == 0 && has_row) y[row] = g.accumulate ? __fadd_rn(y[row], total) : total;
  if (g.norm_after.weight != nullptr)  // the same for the whole grid
    normalize_after_last_block(g.norm_after, y, static_cast<int>(w.n_out), kPairedThreads);
}

// PARSPEC_CUDA_FUSE=swiglu, one row of Q8_0/Q4_0 gate and up weights: each
// of a block's 32 half-warps computes one output's gate row and up row as
// matmul_gemv_kernel computes a row, then swiglu_value of the two, written to
// gate's output and, with q, quantized as swiglu_kernel does (the block's 32
// outputs are one Q8_0 block of the next matmul's input).
constexpr int kGatedOutputs = 32;
constexpr int kGatedThreads = kGatedOutputs * 16;
constexpr int kGatedPrefetch = kGemvPrefetch / 2;  // per row: the lane has two

template <WeightKind kKind>
__global__ void __launch_bounds__(kGatedThreads)
    matmul_gemv_gated_kernel(DeviceMatrix gate_w, DeviceMatrix up_w, const int8_t* xq,
                             const float* xd, float* gate_out, int8_t* q, float* scales,
                             RowNorm norm) {
  begin_kernel();
  extern __shared__ int4 gemv_shared[];
  __shared__ float values_s[kGatedOutputs];
  const int64_t nb = gate_w.n_in / 32;
  const int lane = threadIdx.x % kWarp, v = threadIdx.x % 16, h = threadIdx.x / 16;
  const int64_t out = static_cast<int64_t>(blockIdx.x) * kGatedOutputs + h;
  const bool has_row = out < gate_w.n_out;
  const int64_t row = has_row ? out : 0;
  const __half* gate_scales = static_cast<const __half*>(gate_w.scales) + row * nb;
  const __half* up_scales = static_cast<const __half*>(up_w.scales) + row * nb;
  FirstBlocks<kKind, kGatedPrefetch> first_gate, first_up;
  if (has_row) {
    first_gate.load(gate_w, gate_scales, row, nb, v, 16);
    first_up.load(up_w, up_scales, row, nb, v, 16);
  }
  const int8_t* xs;
  const float* ds;
  stage_input_row(gemv_shared, norm, xq, xd, nb, kGatedThreads, xs, ds);
  float acc_gate = 0.0f, acc_up = 0.0f;
  if (has_row) {
    // Block b's product, added in block order, as in matmul_gemv_kernel.
    auto product = [&](int64_t b, const int(&wq)[8], float dw, float& acc) {
      const int4* x4 = reinterpret_cast<const int4*>(xs + b * 32);
      const float sum = block_dot_float(wq, x4[0], x4[1]);
      acc = __fmaf_rn(__fmul_rn(dw, ds[b]), sum, acc);
    };
    auto gate_step = [&](int64_t b, const int(&wq)[8], float dw) { product(b, wq, dw, acc_gate); };
    auto up_step = [&](int64_t b, const int(&wq)[8], float dw) { product(b, wq, dw, acc_up); };
    first_gate.each(nb, v, 16, gate_step);
    each_later_block<kKind, 4, kGatedPrefetch>(gate_w, gate_scales, row, nb, v, 16, gate_step);
    first_up.each(nb, v, 16, up_step);
    each_later_block<kKind, 4, kGatedPrefetch>(up_w, up_scales, row, nb, v, 16, up_step);
  }
  // Every lane takes part in the shuffles, also those past the last row.
  const float gate_total = half_warp_sum_in_order(acc_gate, lane);
  const float up_total = half_warp_sum_in_order(acc_up, lane);
  if (v == 0) {
    const float value = has_row ? swiglu_value(gate_total, up_total) : 0.0f;
    values_s[h] = value;
    if (has_row) gate_out[out] = value;
  }
  if (q == nullptr) return;  // the same for the whole block
  __syncthreads();
  if (threadIdx.x < kWarp)
    quantize_block(values_s[lane], lane, q + static_cast<int64_t>(blockIdx.x) * 32,
                   scales + blockIdx.x);
}

constexpr int kRowsKernelMaxRows = 4;
constexpr int kWideRowsMaxRows = 8;
constexpr int kRowsDefaultMaxRows = 3;

// 2 and 3 rows run matmul_rows_wide_kernel by default, with 4 weight rows a
// lane where the grid gives every SM at least 4 tiles and 2 elsewhere (on an
// H200, 2 and 4 rows of an 8B-class Q4_0 model took 0.9× the time of
// matmul_rows_kernel's one weight row a lane), and from 4 rows the tensor
// cores (on an H100, 4 rows of an 8B-class Q4_0 model took 0.93× the wide
// kernel's time there, of a Q8_0 one 0.84×; 2 rows 1.29× and 1.11×).
// PARSPEC_CUDA_ROWS: "narrow" runs matmul_rows_kernel for 2 to 4 rows
// instead, "wide" the wide kernel for 2 to kWideRowsMaxRows rows, "wide2" and
// "wide4" that with the number of weight rows fixed (the tests run both
// everywhere), "none" the tensor cores from 2 rows.
int wide_rows_wanted() {
  static const int wanted = env_is("PARSPEC_CUDA_ROWS", "narrow")  ? 0
                            : env_is("PARSPEC_CUDA_ROWS", "wide2") ? 2
                            : env_is("PARSPEC_CUDA_ROWS", "wide4") ? 4
                                                                   : 1;
  return wanted;
}
int rows_kernel_max_rows() {
  static const bool wider = env_is("PARSPEC_CUDA_ROWS", "wide") ||
                            env_is("PARSPEC_CUDA_ROWS", "wide2") ||
                            env_is("PARSPEC_CUDA_ROWS", "wide4");
  static const bool none = env_is("PARSPEC_CUDA_ROWS", "none");
  static const bool narrow = env_is("PARSPEC_CUDA_ROWS", "narrow");
  return none ? 1 : wider ? kWideRowsMaxRows : narrow ? kRowsKernelMaxRows : kRowsDefaultMaxRows;
}

template <WeightKind kKind, int kW>
void launch_rows_wide(const MatmulGroup& g, const int8_t* xq, const float* xd, int n, int tiles,
                      cudaStream_t stream) {
  constexpr int kThreads = kGemvThreads / kW;
  if (n <= 2)
    launch(matmul_rows_wide_kernel<kKind, 2, kW>, tiles, kThreads, 0, stream, g, xq, xd, n);
  else if (n <= 4)
    launch(matmul_rows_wide_kernel<kKind, 4, kW>, tiles, kThreads, 0, stream, g, xq, xd, n);
  else
    launch(matmul_rows_wide_kernel<kKind, kWideRowsMaxRows, kW>, tiles, kThreads, 0, stream, g, xq,
           xd, n);
}

template <WeightKind kKind>
void launch_rows(const MatmulGroup& g, const int8_t* xq, const float* xd, int n,
                 cudaStream_t stream) {
  const int tiles = weight_row_tiles(g);
  if (const int wide = wide_rows_wanted()) {
    if (wide == 4 || (wide == 1 && tiles >= 4 * multiprocessors()))
      return launch_rows_wide<kKind, 4>(g, xq, xd, n, tiles, stream);
    return launch_rows_wide<kKind, 2>(g, xq, xd, n, tiles, stream);
  }
  if (n <= 2)
    launch(matmul_rows_kernel<kKind, 2>, tiles, kGemvThreads, 0, stream, g, xq, xd, n);
  else
    launch(matmul_rows_kernel<kKind, kRowsKernelMaxRows>, tiles, kGemvThreads, 0, stream, g, xq, xd,
           n);
}

// Shared memory of the one-row kernel: the quants and scales of a row of n_in.
size_t gemv_shared_bytes(int64_t n_in) {
  return static_cast<size_t>(n_in) + static_cast<size_t>(n_in / 32) * sizeof(float);
}
constexpr size_t kGemvMaxShared = 48 * 1024;  // without opting in to more

// PARSPEC_CUDA_GEMV: "paired" runs matmul_gemv_paired_kernel where the
// half-warp kernel would leave an SM fewer than 32 warps (under 4 blocks of
// 16 rows per SM), "paired-all" for every one-row matmul.
enum class PairedGemv { kNever, kSmallGrids, kAlways };
PairedGemv paired_gemv_wanted() {
  if (env_is("PARSPEC_CUDA_GEMV", "paired")) return PairedGemv::kSmallGrids;
  if (env_is("PARSPEC_CUDA_GEMV", "paired-all")) return PairedGemv::kAlways;
  return PairedGemv::kNever;
}

template <WeightKind kKind>
void launch_gemv(const MatmulGroup& g, const int8_t* xq, const float* xd, cudaStream_t stream) {
  const int tiles = weight_row_tiles(g);
  static const PairedGemv paired = paired_gemv_wanted();
  if (paired == PairedGemv::kAlways ||
      (paired == PairedGemv::kSmallGrids && tiles < 4 * multiprocessors()))
    return launch(matmul_gemv_paired_kernel<kKind>, tiles, kPairedThreads,
                  gemv_shared_bytes(g.w[0].n_in), stream, g, xq, xd);
  launch(matmul_gemv_kernel<kKind>, tiles, kGemvThreads, gemv_shared_bytes(g.w[0].n_in), stream, g,
         xq, xd, QkvStore{});
}

// PARSPEC_CUDA_PREFILL=one-launch: more rows than one launch of the
// tensor-core kernel takes go through one launch, slice after slice inside
// each block (the same bits), instead of one launch per slice.
bool one_launch_prefill_wanted() {
  return env_is("PARSPEC_CUDA_PREFILL", "one-launch");
}

// Up to 8 · kMmaMaxTiles rows per launch; more rows are launched in such slices
// (each row's values are the same either way).
template <WeightKind kKind>
void launch_matmul_mma(MatmulGroup g, const int8_t* xq, const float* xd, int n, bool block_major,
                       cudaStream_t stream) {
  const int64_t nb = g.w[0].n_in / 32;
  constexpr int kSlice = 8 * kMmaMaxTiles;
  if (prefill_tiles_take(kKind, n) && block_major &&
      launch_prefill_tiles<kKind>(g, xq, xd, n, stream))
    return;
  // Without the tiles, the streamed kernel takes a prefill's slices in one launch.
  static const bool streamed = streamed_weight_tiles() > 0;
  if (streamed && block_major && n > kSlice &&
      launch_stream<kKind, kMmaMaxTiles>(g, xq, xd, n, n, 0, stream))
    return;
  static const bool one_launch = one_launch_prefill_wanted();
  if (one_launch && n > kSlice)
    return launch_mma<kKind, kMmaMaxTiles>(g, xq, xd, n, block_major, n, 0, stream);
  for (int m0 = 0; m0 < n; m0 += kSlice) {
    const int rows = n - m0 < kSlice ? n - m0 : kSlice;
    MatmulGroup slice = g;
    for (int i = 0; i < g.count; ++i) slice.y[i] = g.y[i] + static_cast<int64_t>(m0) * g.w[i].n_out;
    const int8_t* q = block_major ? xq : xq + static_cast<int64_t>(m0) * nb * 32;
    const float* d = block_major ? xd : xd + static_cast<int64_t>(m0) * nb;
    if (streamed && block_major) {
      const int tiles = (rows + 7) / 8;
      if (tiles == 1   ? launch_stream<kKind, 1>(slice, q, d, rows, n, m0, stream)
          : tiles == 2 ? launch_stream<kKind, 2>(slice, q, d, rows, n, m0, stream)
                       : launch_stream<kKind, 4>(slice, q, d, rows, n, m0, stream))
        continue;
    }
    switch ((rows + 7) / 8) {
      case 1:
        launch_mma<kKind, 1>(slice, q, d, rows, block_major, n, m0, stream);
        break;
      case 2:
        launch_mma<kKind, 2>(slice, q, d, rows, block_major, n, m0, stream);
        break;
      default:  // 3 or 4 tiles
        launch_mma<kKind, 4>(slice, q, d, rows, block_major, n, m0, stream);
        break;
    }
  }
}

// PARSPEC_CUDA_MATMUL: "warp" (the dp4a warp kernel for every row count),
// "mma" (the tensor-core kernel for every row count); default: the one-row
// kernel for one row, its way for 2 to 4 rows, the tensor-core kernel for more
// (Q4_K/Q6_K: the tensor cores for every row count).
bool tensor_core_matmul_wanted() {
  return !env_is("PARSPEC_CUDA_MATMUL", "warp");
}
bool few_rows_matmul_wanted() {
  return !env_is("PARSPEC_CUDA_MATMUL", "mma");
}

// PARSPEC_CUDA_KQUANT=warp: Q4_K/Q6_K weights on matmul_k_kernel for every row
// count (the same bits), whatever PARSPEC_CUDA_MATMUL says for the others.
bool k_quant_warp_only() {
  static const bool wanted = !tensor_core_matmul_wanted() || env_is("PARSPEC_CUDA_KQUANT", "warp");
  return wanted;
}

// The kernel that multiplies n rows of Q8_0 activations of width n_in by
// Q8_0/Q4_0 weights; the kernels that write those activations ask it too,
// to lay them out as it reads them.
enum class QuantizedKernel { kWarp, kRows, kOneRow, kTensorCores };
QuantizedKernel quantized_kernel(int n, int64_t n_in) {
  static const bool tensor_cores = tensor_core_matmul_wanted();
  static const bool few_rows = few_rows_matmul_wanted();
  if (!tensor_cores) return QuantizedKernel::kWarp;
  if (few_rows && n >= 2 && n <= rows_kernel_max_rows()) return QuantizedKernel::kRows;
  if (few_rows && n == 1 && gemv_shared_bytes(n_in) <= kGemvMaxShared)
    return QuantizedKernel::kOneRow;
  return QuantizedKernel::kTensorCores;
}

// The activations that the tensor-core kernel reads are written block-major
// (q8_block_index), so that each load of its B fragments reads contiguous bytes
// instead of 8 rows' scattered words; PARSPEC_CUDA_ACTIVATIONS=row-major keeps
// them row after row.
bool block_major_activations(int n, int64_t n_in) {
  static const bool wanted = !env_is("PARSPEC_CUDA_ACTIVATIONS", "row-major");
  return wanted && quantized_kernel(n, n_in) == QuantizedKernel::kTensorCores;
}

// Eight consecutive weights of row n from element 8·chunk.
template <WeightKind kKind>
__device__ void load_chunk_f(const DeviceMatrix& w, int64_t n, int64_t chunk, float (&out)[8]) {
  const int64_t i = n * w.n_in + chunk * 8;
  if constexpr (kKind == WeightKind::kF32) {
    const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(w.q) + i);
    const float4 a = src[0], b = src[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    const uint4 p = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.q) + i);
    const unsigned words[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint16_t lo = static_cast<uint16_t>(words[j] & 0xFFFF);
      const uint16_t hi = static_cast<uint16_t>(words[j] >> 16);
      if constexpr (kKind == WeightKind::kF16) {
        out[2 * j] = __half2float(__ushort_as_half(lo));
        out[2 * j + 1] = __half2float(__ushort_as_half(hi));
      } else {
        out[2 * j] = bf16_bits_to_float(lo);
        out[2 * j + 1] = bf16_bits_to_float(hi);
      }
    }
  }
}

// As matmul_q_kernel, over f32 activations: lane reduces chunks of 8
// elements lane, lane + 32, ... in order.
template <WeightKind kKind, int kR>
__global__ void matmul_f_kernel(MatmulGroup g, const float* x, int M) {
  begin_kernel();
  const int lane = threadIdx.x % kWarp;
  DeviceMatrix w;
  float* y;
  int64_t n;
  if (!warp_row(g, w, y, n)) return;
  const int64_t n_chunks = w.n_in / 8;
  for (int m0 = 0; m0 < M; m0 += kR) {
    float acc[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[r] = 0.0f;
#pragma unroll 4
    for (int64_t c = lane; c < n_chunks; c += kWarp) {
      float wv[8];
      load_chunk_f<kKind>(w, n, c, wv);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (m0 + r >= M) break;
        const float4* xs =
            reinterpret_cast<const float4*>(x + static_cast<int64_t>(m0 + r) * w.n_in + c * 8);
        const float4 a = xs[0], b = xs[1];
        float s = acc[r];
        s = __fmaf_rn(wv[0], a.x, s);
        s = __fmaf_rn(wv[1], a.y, s);
        s = __fmaf_rn(wv[2], a.z, s);
        s = __fmaf_rn(wv[3], a.w, s);
        s = __fmaf_rn(wv[4], b.x, s);
        s = __fmaf_rn(wv[5], b.y, s);
        s = __fmaf_rn(wv[6], b.z, s);
        s = __fmaf_rn(wv[7], b.w, s);
        acc[r] = s;
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      if (m0 + r >= M) break;
      const float total = warp_sum(acc[r]);
      if (lane == 0) y[static_cast<int64_t>(m0 + r) * w.n_out + n] = total;
    }
  }
}

// Q8_K: one warp per block of 256 values, lane i holding values 8i..8i+7.
// As quantize_row_q8_K: q = round-half-even(x · (127 / absmax)), d = absmax /
// 127, and each 16 values' sum.
__global__ void quantize_q8k_kernel(const float* x, int64_t n_blocks, Q8KActivations out) {
  begin_kernel();
  const int64_t block = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (block >= n_blocks) return;
  const int lane = threadIdx.x % kWarp;
  const float* xb = x + block * kSuperBlock + lane * 8;
  float v[8];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    v[i] = xb[i];
    amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = warp_max(amax);
  int8_t* qb = out.q + block * kSuperBlock + lane * 8;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int q = q8k_quant(v[i], amax);
    qb[i] = static_cast<int8_t>(q);
    sum += q;
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // a group of 16 is two lanes
  if (lane % 2 == 0) out.bsums[block * (kSuperBlock / 16) + lane / 2] = static_cast<int16_t>(sum);
  if (lane == 0) out.d[block] = q8k_scale(amax);
}

// One super-block's product as a float, from its exact integer sums (qx: the
// quants times their scales; mins: Q4_K's mins times the activations' sums of
// 32), with the CPU's expression (dot_q4_K_q8_K / dot_q6_K_q8_K): the one
// expression of every K-quant kernel.
template <WeightKind kKind>
__device__ __forceinline__ float k_super_block_value(float xd, float dw, float dmin, int qx,
                                                     int mins) {
  if constexpr (kKind == WeightKind::kQ4_K)
    return __fsub_rn(__fmul_rn(__fmul_rn(xd, dw), static_cast<float>(qx)),
                     __fmul_rn(__fmul_rn(xd, dmin), static_cast<float>(mins)));
  else
    return __fmul_rn(__fmul_rn(xd, dw), static_cast<float>(qx));
}

// An int8 mma's sums (c as mma_s8 lays them out: rows a, a, b, b) times the
// scales of weight rows a and b, added to qx.
__device__ __forceinline__ void add_scaled_sums(int (&qx)[4], const int (&c)[4], int sc_a,
                                                int sc_b) {
  qx[0] += sc_a * c[0];
  qx[1] += sc_a * c[1];
  qx[2] += sc_b * c[2];
  qx[3] += sc_b * c[3];
}

// Eight words of the 32 values of sub-block `part` (0..7) of a super-block,
// as signed bytes in order, and their scales: Q4_K values 0..15 with the
// sub-block's scale and min; Q6_K values -32..31 with the scales of their
// first and second 16.
template <WeightKind kKind>
__device__ void load_k_part(const uint8_t* blk, int part, int (&wq)[8], int& sc0, int& sc1,
                            int& mn) {
  if constexpr (kKind == WeightKind::kQ4_K) {
    const int g = part / 2, shift = 4 * (part % 2);
    const int4* src = reinterpret_cast<const int4*>(blk + 16 + 32 * g);
    const int4 a = src[0], b = src[1];
    const int words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i)
      wq[i] = static_cast<int>((static_cast<unsigned>(words[i]) >> shift) & 0x0F0F0F0Fu);
    q4k_scale_min(blk + 4, part, sc0, mn);
    sc1 = sc0;
  } else {
    const int h = part / 4, quarter = part % 4;
    const int4* low = reinterpret_cast<const int4*>(blk + 64 * h + 32 * (quarter & 1));
    const int4* high = reinterpret_cast<const int4*>(blk + 128 + 32 * h);
    const int4 l0 = low[0], l1 = low[1], h0 = high[0], h1 = high[1];
    const int lw[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
    const int hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
    const int low_shift = quarter < 2 ? 0 : 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const unsigned nib = (static_cast<unsigned>(lw[i]) >> low_shift) & 0x0F0F0F0Fu;
      const unsigned top = ((static_cast<unsigned>(hw[i]) >> (2 * quarter)) & 0x03030303u) << 4;
      wq[i] = static_cast<int>(__vsub4(nib | top, 0x20202020u));
    }
    sc0 = static_cast<int8_t>(blk[192 + 8 * h + 2 * quarter]);
    sc1 = static_cast<int8_t>(blk[192 + 8 * h + 2 * quarter + 1]);
    mn = 0;
  }
}

// Q4_K/Q6_K against Q8_K activations, one warp per output row as the warp
// matmul: 8 lanes share a super-block, one sub-block of 32 each, and add
// their integer sums exactly by shuffles; lane 8k turns each of its
// super-blocks (k, k + 4, ...) into a float with the CPU's expression
// (dot_q4_K_q8_K / dot_q6_K_q8_K) and adds them in order; a fixed butterfly
// adds the four. Nothing in a row's arithmetic depends on kR or M.
template <WeightKind kKind, int kR>
__global__ void matmul_k_kernel(MatmulGroup g, Q8KActivations x, int M) {
  const int lane = threadIdx.x % kWarp, part = lane % 8, group = lane / 8;
  DeviceMatrix w;
  float* y;
  int64_t n;
  const bool has_row = warp_row(g, w, y, n);
  // The warp's row, by its first lane.
  if (has_row && lane == 0 && weights_early_wanted) prefetch_weight_row(w, n);
  begin_kernel();
  if (!has_row) return;
  const int64_t n_super = w.n_in / kSuperBlock;
  constexpr int kStride = kKind == WeightKind::kQ4_K ? kQ4KBytes : kQ6KStride;
  const uint8_t* row = static_cast<const uint8_t*>(w.q) + n * n_super * kStride;
  for (int m0 = 0; m0 < M; m0 += kR) {
    float acc[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[r] = 0.0f;
    for (int64_t sb = group; sb < n_super; sb += 4) {
      const uint8_t* blk = row + sb * kStride;
      int wq[8], sc0, sc1, mn;
      load_k_part<kKind>(blk, part, wq, sc0, sc1, mn);
      const float dw = kKind == WeightKind::kQ4_K ? half_at(blk) : half_at(blk + 208);
      const float dmin = kKind == WeightKind::kQ4_K ? half_at(blk + 2) : 0.0f;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (m0 + r >= M) break;  // M is the same on every lane
        const int64_t xb = static_cast<int64_t>(m0 + r) * n_super + sb;
        const int4* xs = reinterpret_cast<const int4*>(x.q + xb * kSuperBlock + 32 * part);
        const int4 a = xs[0], c = xs[1];
        int s0 = 0, s1 = 0;
        s0 = __dp4a(wq[0], a.x, s0);
        s0 = __dp4a(wq[1], a.y, s0);
        s0 = __dp4a(wq[2], a.z, s0);
        s0 = __dp4a(wq[3], a.w, s0);
        s1 = __dp4a(wq[4], c.x, s1);
        s1 = __dp4a(wq[5], c.y, s1);
        s1 = __dp4a(wq[6], c.z, s1);
        s1 = __dp4a(wq[7], c.w, s1);
        int qx = sc0 * s0 + sc1 * s1;
        int mins = 0;
        if constexpr (kKind == WeightKind::kQ4_K) {
          const int16_t* bs = x.bsums + xb * (kSuperBlock / 16) + 2 * part;
          mins = mn * (bs[0] + bs[1]);
        }
        // Within the 8 lanes of the super-block, which alone take part when
        // the row's super-blocks are not a multiple of 4 (the others are done).
        const unsigned lanes = 0xFFu << (8 * group);
        for (int o = 1; o < 8; o *= 2) {
          qx += __shfl_xor_sync(lanes, qx, o);
          mins += __shfl_xor_sync(lanes, mins, o);
        }
        if (part == 0)
          acc[r] = __fadd_rn(acc[r], k_super_block_value<kKind>(x.d[xb], dw, dmin, qx, mins));
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      if (m0 + r >= M) break;
      const float total = warp_sum(acc[r]);
      if (lane == 0) y[static_cast<int64_t>(m0 + r) * w.n_out + n] = total;
    }
  }
}

// 16×8×16 int8 multiply-add: lane (g, t) holds A's row g, K 4t..4t+3 in a[0]
// and row g + 8's in a[1], B's column g, K 4t..4t+3 in b; C as for mma_s8.
__device__ void mma_s8_k16(int (&c)[4], const int (&a)[2], int b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(b));
#else
  __trap();  // built for sm_80 and later only
#endif
}

// PARSPEC_CUDA_PREFILL=tiled for Q4_K/Q6_K weights: matmul_k_kernel's
// arithmetic in tiles of 64 weight rows × 32 activation rows a block, a warp
// taking 16 of the rows. Each sub-block's integer sums come from int8 mmas
// (exact, as the warp kernel's dp4a sums are), scaled and added as integers;
// each super-block then becomes a float with the warp kernel's expression and
// is added to its lane group's sum in the same order. The groups (super-blocks
// k, k + 4, ...) run one after another, and their sums are added as warp_sum's
// butterfly adds them on lane 0: groups 0 and 2, 1 and 3, then the two pairs.
constexpr int kKPrefillRows = 64;
constexpr int kKPrefillCols = 32;
constexpr int kKPrefillWarps = 4;
constexpr int kKPrefillThreads = kKPrefillWarps * kWarp;
static_assert(kKPrefillRows == 16 * kKPrefillWarps && kKPrefillCols == 32,
              "a warp takes 16 weight rows and 4 tiles of 8 activation rows");

// One super-block of a tile in shared memory (two stages): the weight rows'
// super-blocks (Q6_K's rows padded to 240 bytes and the activation rows to
// 272, so that the 8 rows a warp reads at once fall in different banks), the
// activation rows' quants, their sums of 16 (Q4_K) and their scales.
template <WeightKind kKind>
struct KPrefillStage {
  static constexpr int kBlockBytes = kKind == WeightKind::kQ4_K ? kQ4KBytes : kQ6KStride;
  static constexpr int kWeightRow = kKind == WeightKind::kQ4_K ? kQ4KBytes : 240;
  static constexpr int kActRow = kSuperBlock + 16;
  static constexpr int kWeights = kKPrefillRows * kWeightRow;
  static constexpr int kActs = kKPrefillCols * kActRow;
  static constexpr int kSums = kKind == WeightKind::kQ4_K ? kKPrefillCols * 32 : 0;
  static constexpr int kBytes = kWeights + kActs + kSums + kKPrefillCols * 4;
  static constexpr int kAllBytes = 2 * kBytes;
  static_assert(kBlockBytes % 16 == 0 && kWeightRow % 16 == 0 && kActRow % 16 == 0 &&
                    kWeights % 16 == 0 && kActs % 16 == 0,
                "16-byte copies");
};

// Position p of the order in which matmul_k_prefill_kernel takes a row's
// n_super super-blocks: lane group 0's (0, 4, ...), then group 1's, 2's and
// 3's. The super-block, its group, and whether it is that group's last.
__device__ __forceinline__ int k_prefill_block(int p, int n_super, int& group, bool& last) {
  for (int k = 0; k < 4; ++k) {
    const int length = n_super / 4 + (k < n_super % 4 ? 1 : 0);
    if (p < length) {
      group = k;
      last = p == length - 1;
      return k + 4 * p;
    }
    p -= length;
  }
  group = 3;  // not reached: p < n_super
  last = true;
  return 0;
}

template <WeightKind kKind>
__global__ void __launch_bounds__(kKPrefillThreads)
    matmul_k_prefill_kernel(MatmulGroup g, Q8KActivations x, int M) {
  using Stage = KPrefillStage<kKind>;
  constexpr bool kQ4 = kKind == WeightKind::kQ4_K;
  begin_kernel();
  __shared__ int4 k_prefill_shared[Stage::kAllBytes / 16];
  uint8_t* smem = reinterpret_cast<uint8_t*>(k_prefill_shared);
  DeviceMatrix w;
  float* y;
  int64_t row0;
  int col0;
  if (!prefill_tile<kKPrefillRows, kKPrefillCols>(g, M, w, y, row0, col0))
    return;  // the same for the whole block
  const int n_super = static_cast<int>(w.n_in / kSuperBlock);
  const uint8_t* wq = static_cast<const uint8_t*>(w.q);

  // Position p's operands into stage s, zeros past the last weight or activation row.
  auto issue = [&](int s, int p) {
    int group;
    bool last;
    const int64_t sb = k_prefill_block(p, n_super, group, last);
    uint8_t* base = smem + s * Stage::kBytes;
    constexpr int kPieces = Stage::kBlockBytes / 16;
    for (int e = threadIdx.x; e < kKPrefillRows * kPieces; e += kKPrefillThreads) {
      const int r = e / kPieces, piece = e % kPieces;
      const int64_t row = row0 + r;
      const bool valid = row < w.n_out;
      copy_async<16>(base + r * Stage::kWeightRow + 16 * piece,
                     valid ? wq + (row * n_super + sb) * Stage::kBlockBytes + 16 * piece : wq,
                     valid);
    }
    uint8_t* acts = base + Stage::kWeights;
    for (int e = threadIdx.x; e < kKPrefillCols * 16; e += kKPrefillThreads) {
      const int m = e / 16, piece = e % 16;
      const bool valid = col0 + m < M;
      const int64_t xb = static_cast<int64_t>(col0 + m) * n_super + sb;
      copy_async<16>(acts + m * Stage::kActRow + 16 * piece,
                     valid ? x.q + xb * kSuperBlock + 16 * piece : x.q, valid);
    }
    uint8_t* sums = acts + Stage::kActs;
    if constexpr (kQ4) {
      for (int e = threadIdx.x; e < kKPrefillCols * 2; e += kKPrefillThreads) {
        const int m = e / 2, piece = e % 2;
        const bool valid = col0 + m < M;
        const int64_t xb = static_cast<int64_t>(col0 + m) * n_super + sb;
        copy_async<16>(sums + 32 * m + 16 * piece,
                       valid ? reinterpret_cast<const uint8_t*>(x.bsums + xb * 16) + 16 * piece
                             : reinterpret_cast<const uint8_t*>(x.bsums),
                       valid);
      }
    }
    uint8_t* scales = sums + Stage::kSums;
    for (int m = threadIdx.x; m < kKPrefillCols; m += kKPrefillThreads) {
      const bool valid = col0 + m < M;
      const int64_t xb = static_cast<int64_t>(col0 + m) * n_super + sb;
      copy_async<4>(scales + 4 * m, valid ? x.d + xb : x.d, valid);
    }
  };

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int gid = lane / 4, t = lane % 4;
  const int r_a = 16 * warp + gid, r_b = r_a + 8;  // the block's rows of this lane
  // [activation tile i][e]: rows r_a (e = 0, 1) and r_b (2, 3), activation
  // rows 8i + 2t (e = 0, 2) and 8i + 2t + 1 (1, 3). `chain`: the running
  // group's sum; `even`: groups 0 and 2; `odd`: groups 1 and 3.
  float chain[4][4], even[4][4], odd[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) chain[i][e] = even[i][e] = odd[i][e] = 0.0f;

  // Position p's super-block from stage s, added to the running group's sums
  // as matmul_k_kernel adds it.
  auto compute = [&](int s, int p) {
    int group;
    bool last;
    (void)k_prefill_block(p, n_super, group, last);
    const uint8_t* base = smem + s * Stage::kBytes;
    const uint8_t* blk_a = base + r_a * Stage::kWeightRow;
    const uint8_t* blk_b = base + r_b * Stage::kWeightRow;
    const uint8_t* acts = base + Stage::kWeights;
    const int16_t* sums = reinterpret_cast<const int16_t*>(acts + Stage::kActs);
    const float* xds = reinterpret_cast<const float*>(acts + Stage::kActs + Stage::kSums);
    int qx[4][4], mins[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) qx[i][e] = mins[i][e] = 0;
#pragma unroll 1
    for (int j = 0; j < 8; ++j) {  // sub-blocks of 32 values
      if constexpr (kQ4) {
        // Lane t takes values 8t..8t+7 of the sub-block, in A and B alike (the
        // integer sum is the same in any order): its low nibbles for even j,
        // high for odd.
        const int shift = 4 * (j % 2);
        const uint2 wa = *reinterpret_cast<const uint2*>(blk_a + 16 + 32 * (j / 2) + 8 * t);
        const uint2 wb = *reinterpret_cast<const uint2*>(blk_b + 16 + 32 * (j / 2) + 8 * t);
        const int a[4] = {static_cast<int>((wa.x >> shift) & 0x0F0F0F0Fu),
                          static_cast<int>((wb.x >> shift) & 0x0F0F0F0Fu),
                          static_cast<int>((wa.y >> shift) & 0x0F0F0F0Fu),
                          static_cast<int>((wb.y >> shift) & 0x0F0F0F0Fu)};
        int sc_a, mn_a, sc_b, mn_b;
        q4k_scale_min(blk_a + 4, j, sc_a, mn_a);
        q4k_scale_min(blk_b + 4, j, sc_b, mn_b);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int2 src = *reinterpret_cast<const int2*>(acts + (8 * i + gid) * Stage::kActRow +
                                                          32 * j + 8 * t);
          const int bf[2] = {src.x, src.y};
          int c[4] = {0, 0, 0, 0};
          mma_s8(c, a, bf);
          add_scaled_sums(qx[i], c, sc_a, sc_b);
          const int16_t* s0 = sums + (8 * i + 2 * t) * 16 + 2 * j;
          const int16_t* s1 = s0 + 16;
          const int pair0 = s0[0] + s0[1], pair1 = s1[0] + s1[1];
          mins[i][0] += mn_a * pair0;
          mins[i][1] += mn_a * pair1;
          mins[i][2] += mn_b * pair0;
          mins[i][3] += mn_b * pair1;
        }
      } else {
        // Values 16h + 4t..16h + 4t + 3 of the sub-block for each half h, as
        // load_k_part assembles them.
        const int h = j / 4, quarter = j % 4;
        const int low_shift = quarter < 2 ? 0 : 4;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int at_low = 64 * h + 32 * (quarter & 1) + 16 * half + 4 * t;
          const int at_high = 128 + 32 * h + 16 * half + 4 * t;
          auto word = [&](const uint8_t* blk) {
            const unsigned nib =
                (*reinterpret_cast<const unsigned*>(blk + at_low) >> low_shift) & 0x0F0F0F0Fu;
            const unsigned top =
                ((*reinterpret_cast<const unsigned*>(blk + at_high) >> (2 * quarter)) & 0x03030303u)
                << 4;
            return static_cast<int>(__vsub4(nib | top, 0x20202020u));
          };
          const int a[2] = {word(blk_a), word(blk_b)};
          const int sc_a = static_cast<int8_t>(blk_a[192 + 8 * h + 2 * quarter + half]);
          const int sc_b = static_cast<int8_t>(blk_b[192 + 8 * h + 2 * quarter + half]);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int bf = *reinterpret_cast<const int*>(acts + (8 * i + gid) * Stage::kActRow +
                                                         32 * j + 16 * half + 4 * t);
            int c[4] = {0, 0, 0, 0};
            mma_s8_k16(c, a, bf);
            add_scaled_sums(qx[i], c, sc_a, sc_b);
          }
        }
      }
    }
    const float dw_a = kQ4 ? half_at(blk_a) : half_at(blk_a + 208);
    const float dw_b = kQ4 ? half_at(blk_b) : half_at(blk_b + 208);
    const float dmin_a = kQ4 ? half_at(blk_a + 2) : 0.0f;
    const float dmin_b = kQ4 ? half_at(blk_b + 2) : 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float value =
            k_super_block_value<kKind>(xds[8 * i + 2 * t + (e & 1)], e < 2 ? dw_a : dw_b,
                                       e < 2 ? dmin_a : dmin_b, qx[i][e], mins[i][e]);
        chain[i][e] = __fadd_rn(chain[i][e], value);
      }
    if (last) {  // the same on every thread
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (group == 0) even[i][e] = chain[i][e];
          if (group == 2) even[i][e] = __fadd_rn(even[i][e], chain[i][e]);
          if (group == 1) odd[i][e] = chain[i][e];
          if (group == 3) odd[i][e] = __fadd_rn(odd[i][e], chain[i][e]);
          chain[i][e] = 0.0f;
        }
    }
  };

  each_position_streamed<2>(n_super, issue, compute);

  // Groups without super-blocks (fewer than 4 a row) keep their zeros, as the
  // warp kernel's lanes do; then warp_sum's steps on lane 0: the two pairs,
  // and the zeros of the lanes that are not a group's first.
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (n_super < 3) even[i][e] = __fadd_rn(even[i][e], 0.0f);
      if (n_super < 4) odd[i][e] = __fadd_rn(n_super < 2 ? 0.0f : odd[i][e], 0.0f);
      float total = __fadd_rn(even[i][e], odd[i][e]);
      for (int o = 0; o < 3; ++o) total = __fadd_rn(total, 0.0f);
      const int64_t row = row0 + (e < 2 ? r_a : r_b);
      const int m = col0 + 8 * i + 2 * t + (e & 1);
      if (row < w.n_out && m < M) y[static_cast<int64_t>(m) * w.n_out + row] = total;
    }
}

// Q4_K/Q6_K weights for every row count on the int8 tensor cores (the
// default; PARSPEC_CUDA_KQUANT=warp or PARSPEC_CUDA_MATMUL=warp keeps
// matmul_k_kernel; an H200 decoded an 8B-class Q4_K_M model 1.25× as fast this
// way as with that kernel, and 3.5× as fast at 8 rows). A block takes kKMmaRows weight rows and 8 ·
// kTiles activation rows; its warp g walks lane group g's super-blocks of matmul_k_kernel (g, g +
// 4, ...) in order. Each sub-block's integer sums come from int8 mmas, as in
// matmul_k_prefill_kernel; each super-block becomes a float with k_super_block_value and is added
// to the warp's chain, and the four chains are then added as warp_sum adds the lane groups on lane
// 0. With no shared stage, a warp's weights go from memory to registers a super-block ahead of its
// mmas, and every 16 rows are a block of the grid (256 for a matrix of 4096 rows), so that small
// matrices still reach every SM.
constexpr int kKMmaRows = 16;
constexpr int kKMmaWarps = 4;
constexpr int kKMmaThreads = kKMmaWarps * kWarp;
static_assert(kKMmaWarps == 4, "a warp for each lane group of matmul_k_kernel");

// One weight row's part of a super-block that lane t of the mma layout reads.
// Q4_K: the 16-byte head (d, dmin, the packed scales and mins) and bytes
// 8t..8t+7 of each of the four 32-byte groups of quants. Q6_K: words 4t of the
// eight 16-byte pieces of the low bits and the four of the high bits, the 16
// scales and d.
template <WeightKind kKind>
struct KLaneWords;

template <>
struct KLaneWords<WeightKind::kQ4_K> {
  uint4 head;
  uint2 quants[4];
  __device__ void load(const uint8_t* blk, int t) {
    head = *reinterpret_cast<const uint4*>(blk);
#pragma unroll
    for (int q = 0; q < 4; ++q)
      quants[q] = *reinterpret_cast<const uint2*>(blk + 16 + 32 * q + 8 * t);
  }
  __device__ float d() const {
    return __half2float(__ushort_as_half(head.x & 0xFFFF));
  }
  __device__ float dmin() const {
    return __half2float(__ushort_as_half(head.x >> 16));
  }
  // Byte k of the 12 packed scale and min bytes.
  __device__ int packed(int k) const {
    const unsigned word = k < 4 ? head.y : k < 8 ? head.z : head.w;
    return static_cast<int>((word >> (8 * (k % 4))) & 0xFF);
  }
  __device__ void scale_min(int j, int& sc, int& mn) const {
    q4k_scale_min_of([this](int k) { return packed(k); }, j, sc, mn);
  }
};

template <>
struct KLaneWords<WeightKind::kQ6_K> {
  unsigned low[8], high[4];
  uint4 scales;
  unsigned short dbits;
  __device__ void load(const uint8_t* blk, int t) {
#pragma unroll
    for (int k = 0; k < 8; ++k) low[k] = *reinterpret_cast<const unsigned*>(blk + 16 * k + 4 * t);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      high[k] = *reinterpret_cast<const unsigned*>(blk + 128 + 16 * k + 4 * t);
    scales = *reinterpret_cast<const uint4*>(blk + 192);
    dbits = *reinterpret_cast<const unsigned short*>(blk + 208);
  }
  __device__ float d() const {
    return __half2float(__ushort_as_half(dbits));
  }
  __device__ float dmin() const {
    return 0.0f;
  }  // Q6_K has no mins
  // The signed scale of values 16·s .. 16·s + 15 of the super-block.
  __device__ int scale(int s) const {
    const unsigned word = s < 4 ? scales.x : s < 8 ? scales.y : s < 12 ? scales.z : scales.w;
    return static_cast<int8_t>((word >> (8 * (s % 4))) & 0xFF);
  }
  // Values 16·half + 4t .. + 3 of sub-block j as signed bytes, as load_k_part
  // assembles them.
  __device__ int word(int j, int half) const {
    const int h = j / 4, quarter = j % 4;
    const unsigned nib =
        (low[4 * h + 2 * (quarter & 1) + half] >> (quarter < 2 ? 0 : 4)) & 0x0F0F0F0Fu;
    const unsigned top = ((high[2 * h + half] >> (2 * quarter)) & 0x03030303u) << 4;
    return static_cast<int>(__vsub4(nib | top, 0x20202020u));
  }
};

// For one activation row, every lane still works out both of its C columns
// (the second a copy of the first's operands, never stored): a form computing
// the first alone, with a ninth fewer PTX instructions for Q4_K, decoded an
// 8B-class Q4_K_M model at 0.84× this one's speed on an H200.
template <WeightKind kKind, int kTiles>
__global__ void __launch_bounds__(kKMmaThreads)
    matmul_k_mma_kernel(MatmulGroup g, Q8KActivations x, int M) {
  constexpr bool kQ4 = kKind == WeightKind::kQ4_K;
  constexpr int kCols = 8 * kTiles;
  constexpr int kStride = kQ4 ? kQ4KBytes : kQ6KStride;
  __shared__ float chains[kKMmaWarps][kKMmaRows * kCols];
  DeviceMatrix w;
  float* y;
  int64_t row0;
  int col0;
  const bool has_tile = prefill_tile<kKMmaRows, kCols>(g, M, w, y, row0, col0);
  begin_kernel();
  if (!has_tile) return;  // the same for the whole block
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int gid = lane / 4, t = lane % 4;
  const int64_t n_super = w.n_in / kSuperBlock;
  // Rows past the matrix and activation rows past M read the last one's
  // operands: a column of mma outputs depends only on its own, and those
  // outputs are not stored.
  const int64_t last_row = w.n_out - 1;
  const int64_t r_a = row0 + gid < last_row ? row0 + gid : last_row;
  const int64_t r_b = row0 + gid + 8 < last_row ? row0 + gid + 8 : last_row;
  const uint8_t* row_a = static_cast<const uint8_t*>(w.q) + r_a * n_super * kStride;
  const uint8_t* row_b = static_cast<const uint8_t*>(w.q) + r_b * n_super * kStride;
  int m_b[kTiles], m_c[kTiles][2];  // B's column of this lane; C's two columns
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    m_b[i] = min(col0 + 8 * i + gid, M - 1);
    m_c[i][0] = min(col0 + 8 * i + 2 * t, M - 1);
    m_c[i][1] = min(col0 + 8 * i + 2 * t + 1, M - 1);
  }
  // [tile i][e]: rows r_a (e = 0, 1) and r_b (2, 3), columns 2t (e even) and 2t + 1.
  float chain[kTiles][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) chain[i][e] = 0.0f;

  auto compute = [&](int64_t sb, const KLaneWords<kKind>& wa, const KLaneWords<kKind>& wb) {
    int qx[kTiles][4], mins[kTiles][4];
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) qx[i][e] = mins[i][e] = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {  // sub-blocks of 32 values
      if constexpr (kQ4) {
        // Lane t takes values 8t..8t+7 of the sub-block in A and B alike (the
        // integer sum is the same in any order): low nibbles for even j, high for odd.
        const int shift = 4 * (j % 2);
        const uint2 qa = wa.quants[j / 2], qb = wb.quants[j / 2];
        const int a[4] = {static_cast<int>((qa.x >> shift) & 0x0F0F0F0Fu),
                          static_cast<int>((qb.x >> shift) & 0x0F0F0F0Fu),
                          static_cast<int>((qa.y >> shift) & 0x0F0F0F0Fu),
                          static_cast<int>((qb.y >> shift) & 0x0F0F0F0Fu)};
        int sc_a, sc_b, unused;
        wa.scale_min(j, sc_a, unused);
        wb.scale_min(j, sc_b, unused);
#pragma unroll
        for (int i = 0; i < kTiles; ++i) {
          const int2 src = *reinterpret_cast<const int2*>(
              x.q + (m_b[i] * n_super + sb) * kSuperBlock + 32 * j + 8 * t);
          const int bf[2] = {src.x, src.y};
          int c[4] = {0, 0, 0, 0};
          mma_s8(c, a, bf);
          add_scaled_sums(qx[i], c, sc_a, sc_b);
        }
      } else {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int a[2] = {wa.word(j, half), wb.word(j, half)};
          const int s = 8 * (j / 4) + 2 * (j % 4) + half;
          const int sc_a = wa.scale(s), sc_b = wb.scale(s);
#pragma unroll
          for (int i = 0; i < kTiles; ++i) {
            const int bf = *reinterpret_cast<const int*>(
                x.q + (m_b[i] * n_super + sb) * kSuperBlock + 32 * j + 16 * half + 4 * t);
            int c[4] = {0, 0, 0, 0};
            mma_s8_k16(c, a, bf);
            add_scaled_sums(qx[i], c, sc_a, sc_b);
          }
        }
      }
    }
    if constexpr (kQ4) {
      // Each column's sums of 32 (pairs of the Q8_K sums of 16, one word each)
      // times the rows' mins, in two loads a column instead of two a pair.
#pragma unroll
      for (int i = 0; i < kTiles; ++i)
#pragma unroll
        for (int col = 0; col < 2; ++col) {
          const int4* sums =
              reinterpret_cast<const int4*>(x.bsums + (m_c[i][col] * n_super + sb) * 16);
          const int4 lo = sums[0], hi = sums[1];
          const int words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const int pair =
                static_cast<int16_t>(words[j] & 0xFFFF) + static_cast<int16_t>(words[j] >> 16);
            int unused, mn_a, mn_b;
            wa.scale_min(j, unused, mn_a);
            wb.scale_min(j, unused, mn_b);
            mins[i][col] += mn_a * pair;
            mins[i][2 + col] += mn_b * pair;
          }
        }
    }
    const float dw_a = wa.d(), dw_b = wb.d();
    const float dmin_a = wa.dmin(), dmin_b = wb.dmin();
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float value =
            k_super_block_value<kKind>(x.d[m_c[i][e & 1] * n_super + sb], e < 2 ? dw_a : dw_b,
                                       e < 2 ? dmin_a : dmin_b, qx[i][e], mins[i][e]);
        chain[i][e] = __fadd_rn(chain[i][e], value);
      }
  };

  // The warp's super-blocks, each one's weights loaded while the one before is computed.
  KLaneWords<kKind> cur_a, cur_b, next_a, next_b;
  int64_t sb = warp;
  if (sb < n_super) {
    cur_a.load(row_a + sb * kStride, t);
    cur_b.load(row_b + sb * kStride, t);
  }
  for (; sb < n_super; sb += kKMmaWarps) {
    const bool more = sb + kKMmaWarps < n_super;
    if (more) {
      next_a.load(row_a + (sb + kKMmaWarps) * kStride, t);
      next_b.load(row_b + (sb + kKMmaWarps) * kStride, t);
    }
    compute(sb, cur_a, cur_b);
    if (more) {
      cur_a = next_a;
      cur_b = next_b;
    }
  }

  // warp_sum's steps on lane 0 of matmul_k_kernel: groups 0 and 2, 1 and 3 (a
  // group without super-blocks adds its zero), the two pairs, then the zeros
  // of the lanes that are not a group's first.
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      chains[warp][(gid + 8 * (e / 2)) * kCols + 8 * i + 2 * t + (e & 1)] = chain[i][e];
  __syncthreads();
  for (int v = threadIdx.x; v < kKMmaRows * kCols; v += kKMmaThreads) {
    const int64_t row = row0 + v / kCols;
    const int m = col0 + v % kCols;
    if (row >= w.n_out || m >= M) continue;
    float total =
        __fadd_rn(__fadd_rn(chains[0][v], chains[2][v]), __fadd_rn(chains[1][v], chains[3][v]));
    for (int o = 0; o < 3; ++o) total = __fadd_rn(total, 0.0f);
    y[static_cast<int64_t>(m) * w.n_out + row] = total;
  }
}

// matmul_k_mma_kernel over n rows: 8, 16 or 32 activation rows a block, more
// in blocks of 32 (the blocks of one weight tile side by side).
template <WeightKind kKind>
void launch_k_mma(const MatmulGroup& g, const Q8KActivations& x, int n, cudaStream_t stream) {
  if (n <= 8)
    launch(matmul_k_mma_kernel<kKind, 1>, prefill_blocks<kKMmaRows, 8>(g, n), kKMmaThreads, 0,
           stream, g, x, n);
  else if (n <= 16)
    launch(matmul_k_mma_kernel<kKind, 2>, prefill_blocks<kKMmaRows, 16>(g, n), kKMmaThreads, 0,
           stream, g, x, n);
  else
    launch(matmul_k_mma_kernel<kKind, 4>, prefill_blocks<kKMmaRows, 32>(g, n), kKMmaThreads, 0,
           stream, g, x, n);
}

// The inputs of one matmul launch, in every form a weight kind takes them.
struct MatmulInputs {
  const float* x;
  const int8_t* xq;
  const float* xd;
  Q8KActivations xk;
};

template <WeightKind kKind, int kR>
void launch_matmul_kind(const MatmulGroup& g, const MatmulInputs& in, int n, cudaStream_t stream) {
  const int blocks = blocks_for(group_rows(g), kMatmulWarps);
  if constexpr (kKind == WeightKind::kQ8_0 || kKind == WeightKind::kQ4_0)
    launch(matmul_q_kernel<kKind, kR>, blocks, kMatmulWarps * kWarp, 0, stream, g, in.xq, in.xd, n);
  else if constexpr (kKind == WeightKind::kQ4_K || kKind == WeightKind::kQ6_K)
    launch(matmul_k_kernel<kKind, kR>, blocks, kMatmulWarps * kWarp, 0, stream, g, in.xk, n);
  else
    launch(matmul_f_kernel<kKind, kR>, blocks, kMatmulWarps * kWarp, 0, stream, g, in.x, n);
}

template <int kR>
void launch_matmul_tile(const MatmulGroup& g, const MatmulInputs& in, int n, cudaStream_t stream) {
  switch (g.w[0].kind) {
    case WeightKind::kF32:
      return launch_matmul_kind<WeightKind::kF32, kR>(g, in, n, stream);
    case WeightKind::kF16:
      return launch_matmul_kind<WeightKind::kF16, kR>(g, in, n, stream);
    case WeightKind::kBF16:
      return launch_matmul_kind<WeightKind::kBF16, kR>(g, in, n, stream);
    case WeightKind::kQ8_0:
      return launch_matmul_kind<WeightKind::kQ8_0, kR>(g, in, n, stream);
    case WeightKind::kQ4_0:
      return launch_matmul_kind<WeightKind::kQ4_0, kR>(g, in, n, stream);
    case WeightKind::kQ4_K:
      return launch_matmul_kind<WeightKind::kQ4_K, kR>(g, in, n, stream);
    case WeightKind::kQ6_K:
      return launch_matmul_kind<WeightKind::kQ6_K, kR>(g, in, n, stream);
  }
}

__device__ int64_t kv_row(const AttentionRow& r, int layer, int32_t slot, int kv_dim) {
  return (static_cast<int64_t>(layer - r.layer_first) * r.capacity + slot) * kv_dim;
}

// One block per row: the cosine and sine of each rotation angle, in double
// (as the CPU computes them), rounded to float.
__global__ void rope_angles_kernel(const int32_t* positions, const float* inv_freq, int n_pairs,
                                   float2* angles) {
  begin_kernel();
  const int row = blockIdx.x;
  const double position = positions[row];
  for (int i = threadIdx.x; i < n_pairs; i += blockDim.x) {
    const double theta = position * static_cast<double>(inv_freq[i]);
    angles[static_cast<int64_t>(row) * n_pairs + i] =
        make_float2(static_cast<float>(cos(theta)), static_cast<float>(sin(theta)));
  }
}

// One block per (row, head), the query heads first, then the KV heads: the
// head's biases, then each rotated pair by one thread, then (KV heads) the
// head's k and v to the row's cache slot.
__global__ void bias_rope_store_kernel(float* q, float* k, float* v, const float* bq,
                                       const float* bk, const float* bv, const float2* angles,
                                       const AttentionRow* rows, int layer, HeadShape s) {
  begin_kernel();
  const int row = blockIdx.x, head = blockIdx.y;
  const int hd = s.head_dim, q_dim = s.n_head * hd, kv_dim = s.n_head_kv * hd;
  const bool is_kv = head >= s.n_head;
  const int at = (is_kv ? head - s.n_head : head) * hd;  // the head's first element in its row
  float* h = is_kv ? k + static_cast<int64_t>(row) * kv_dim + at
                   : q + static_cast<int64_t>(row) * q_dim + at;
  float* vh = v + static_cast<int64_t>(row) * kv_dim + at;
  if (bq != nullptr) {
    const float* bias = is_kv ? bk + at : bq + at;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
      h[i] = __fadd_rn(h[i], bias[i]);
      if (is_kv) vh[i] = __fadd_rn(vh[i], bv[at + i]);
    }
    __syncthreads();
  }
  const int n_pairs = s.rope_dims / 2;
  for (int i = threadIdx.x; i < n_pairs; i += blockDim.x) {
    const float2 angle = angles[static_cast<int64_t>(row) * n_pairs + i];
    const float c = angle.x, sn = angle.y;
    const int a = s.neox ? i : 2 * i, b = s.neox ? i + n_pairs : 2 * i + 1;
    const float x0 = h[a], x1 = h[b];
    h[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
    h[b] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
  }
  if (!is_kv) return;
  __syncthreads();  // k is rotated
  const AttentionRow r = rows[row];
  const int64_t dst = kv_row(r, layer, r.write_slot, kv_dim) + at;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    r.k[dst + i] = h[i];
    r.v[dst + i] = vh[i];
  }
}

// The largest (kMax) or the sum of every thread's v in a block of kAttnThreads,
// the same on every thread: warps by butterfly, then the warps in order.
template <bool kMax>
__device__ float attention_block_reduce(float v, float* scratch) {
  v = kMax ? warp_max(v) : warp_sum(v);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  __syncthreads();  // scratch is free
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kAttnThreads / kWarp; ++w)
    r = kMax ? fmaxf(r, scratch[w]) : __fadd_rn(r, scratch[w]);
  return r;
}

// Slot of key `key_index` of a row's key list: the committed prefix, then its
// speculative cells.
__device__ int32_t key_slot(const AttentionRow& r, const int32_t* spec_slots, int key_index) {
  return key_index < r.n_committed ? key_index
                                   : spec_slots[r.spec_offset + (key_index - r.n_committed)];
}

// How many of a row's kAttentionSplits splits have keys (chunks of kAttnKeys).
__device__ int splits_with_keys(const AttentionRow& r) {
  const int n_keys = r.n_committed + r.spec_count;
  return min((n_keys + kAttnKeys - 1) / kAttnKeys, kAttentionSplits);
}

// Where the merged attention goes: the output rows (row-major), their Q8_0
// quantization when q is given (block-major or not), and, when split_counters
// is given, a counter per (row, head) that the per-head kernels use to merge
// their splits themselves (zeros before a launch, zeros after).
struct AttentionMerge {
  float* out = nullptr;
  int8_t* q = nullptr;
  float* scales = nullptr;
  bool block_major = false;
  int32_t* split_counters = nullptr;
  // The prestaged kernel merged every row whose keys fill one split itself.
  bool single_splits_merged = false;
};

// The merge of `used` splits of (row, head) in split order by one block of
// kAttnThreads: split z's running max and sum in max_s[z] and sum_s[z] (shared,
// published by a barrier before), its unnormalized output dimension d as
// part_at(z, d) returns it. The result goes into the head's part of `out`
// (row-major, n_rows rows); with q given (head_dim a multiple of 32), the head's
// output is then quantized to Q8_0 as launch_quantize_q8 would quantize the row.
template <class PartAt>
__device__ void merge_splits(int used, const float* max_s, const float* sum_s, PartAt&& part_at,
                             int row, int head, int n_rows, const HeadShape& s,
                             const AttentionMerge& m) {
  const int hd = s.head_dim;
  // Each split's weight exp(m_z - m) is computed once.
  __shared__ float weight_s[kAttentionSplits];
  float mx = -INFINITY;
  for (int z = 0; z < used; ++z) mx = fmaxf(mx, max_s[z]);
  if (threadIdx.x < used) weight_s[threadIdx.x] = expf(__fsub_rn(max_s[threadIdx.x], mx));
  __syncthreads();
  float total = 0.0f;
  for (int z = 0; z < used; ++z) total = __fadd_rn(total, __fmul_rn(sum_s[z], weight_s[z]));
  float* o = m.out + static_cast<int64_t>(row) * s.n_head * hd + head * hd;
  for (int d = threadIdx.x; d < hd; d += kAttnThreads) {
    float part[kAttentionSplits];
#pragma unroll
    for (int z = 0; z < kAttentionSplits; ++z) part[z] = z < used ? part_at(z, d) : 0.0f;
    float acc = 0.0f;
#pragma unroll
    for (int z = 0; z < kAttentionSplits; ++z)
      if (z < used) acc = __fadd_rn(acc, __fmul_rn(part[z], weight_s[z]));
    o[d] = __fdiv_rn(acc, total);
  }
  if (m.q == nullptr) return;
  __syncthreads();  // the head's outputs are written
  const int lane = threadIdx.x % kWarp, nb = s.n_head * hd / 32;
  for (int b = threadIdx.x / kWarp; b < hd / 32; b += kAttnThreads / kWarp) {
    const int64_t at = q8_block_index(row, head * (hd / 32) + b, n_rows, nb, m.block_major);
    quantize_block(o[b * 32 + lane], lane, m.q + at * 32, m.scales + at);
  }
}

// The splits of (row, head) that had keys, merged (merge_splits) from their
// partial results, which are read past the L1 cache: other blocks wrote them.
static_assert(kAttnThreads >= kAttentionSplits, "a thread per split reads its max and sum");
__device__ void merge_head_splits(const AttentionRow& r, int row, int head, int n_rows,
                                  const HeadShape& s, const float* partial,
                                  const AttentionMerge& m) {
  const int hd = s.head_dim;
  const int used = splits_with_keys(r);
  const float* base =
      partial + (static_cast<int64_t>(row) * s.n_head + head) * kAttentionSplits * (hd + 2);
  // Each split's max and sum are read once, all at the same time.
  __shared__ float sum_s[kAttentionSplits], max_s[kAttentionSplits];
  if (threadIdx.x < used) {
    max_s[threadIdx.x] = __ldcg(base + threadIdx.x * (hd + 2) + hd);
    sum_s[threadIdx.x] = __ldcg(base + threadIdx.x * (hd + 2) + hd + 1);
  }
  __syncthreads();
  merge_splits(
      used, max_s, sum_s, [&](int z, int d) { return __ldcg(base + z * (hd + 2) + d); }, row, head,
      n_rows, s, m);
}

// One block per (row, head): merge_head_splits. The rows' key lists are read
// before begin_kernel: they were uploaded before the pass, and no kernel
// writes them. A row the attention kernel merged itself still waits, so that
// the kernel after this one finds the attention done.
__global__ void attention_combine_kernel(const AttentionRow* rows, HeadShape s,
                                         const float* partial, AttentionMerge m) {
  const AttentionRow r = rows[blockIdx.x];
  begin_kernel();
  if (m.single_splits_merged && splits_with_keys(r) == 1) return;
  merge_head_splits(r, blockIdx.x, blockIdx.y, gridDim.x, s, partial, m);
}

// The end of a per-head split block when merging in the split
// (PARSPEC_CUDA_ATTENTION_MERGE=in-split): the split's partial result is
// written; the last of the head's splits to finish merges them
// (merge_head_splits, the same bits as attention_combine_kernel) and leaves
// the counter at zero for the next launch.
__device__ void merge_if_last_split(const AttentionRow& r, int row, int head, const HeadShape& s,
                                    const float* partial, const AttentionMerge& m) {
  int32_t* counter = m.split_counters + static_cast<int64_t>(row) * s.n_head + head;
  if (!last_block_to_arrive(counter, splits_with_keys(r))) return;
  merge_head_splits(r, row, head, gridDim.x, s, partial, m);
}

// Where a per-head block finds its head's keys and values in the cache, and
// `parts`: the runs of keys per output dimension when the head is narrower
// than the block (else one run and strided dimensions).
struct HeadKeys {
  const float* k;
  const float* v;
  int kv_dim, parts;
};
__device__ HeadKeys head_keys(const AttentionRow& r, int layer, const HeadShape& s, int head) {
  const int hd = s.head_dim, kv_dim = s.n_head_kv * hd;
  const int kv_head = head / (s.n_head / s.n_head_kv);
  HeadKeys h;
  h.k = r.k + kv_row(r, layer, 0, kv_dim) + kv_head * hd;
  h.v = r.v + kv_row(r, layer, 0, kv_dim) + kv_head * hd;
  h.kv_dim = kv_dim;
  h.parts = hd < kAttnThreads ? kAttnThreads / hd : 1;
  return h;
}

// The head's query into q_s, and o_s zeroed.
__device__ void load_query_head(const float* q, int row, int head, const HeadShape& s, float* q_s,
                                float* o_s) {
  const int hd = s.head_dim;
  for (int i = threadIdx.x; i < hd; i += kAttnThreads) {
    q_s[i] = q[static_cast<int64_t>(row) * s.n_head * hd + head * hd + i];
    o_s[i] = 0.0f;
  }
}

// A chunk's step of the online softmax: this thread's key score sc (valid:
// the key exists), the chunk's maximum and sum by the fixed block
// reductions, p_s[thread] its probability against the new maximum; returns
// the factor that rescales what the earlier chunks summed. The reductions'
// barriers also publish p_s.
__device__ float online_softmax_chunk(float sc, bool valid, float* p_s, float* reduce_s,
                                      float& m_run, float& l_run) {
  const float m_new = fmaxf(m_run, attention_block_reduce<true>(sc, reduce_s));
  const float p = valid ? expf(__fsub_rn(sc, m_new)) : 0.0f;
  p_s[threadIdx.x] = p;
  const float l_chunk = attention_block_reduce<false>(p, reduce_s);
  const float alpha = expf(__fsub_rn(m_run, m_new));  // 0 for the first chunk
  l_run = __fadd_rn(__fmul_rn(l_run, alpha), l_chunk);
  m_run = m_new;
  return alpha;
}

// o = o · alpha + the chunk's sum per dimension (its `parts` runs added in order).
__device__ void fold_chunk_into_output(const float* part_s, float* o_s, int hd, int parts,
                                       float alpha) {
  for (int d = threadIdx.x; d < hd; d += kAttnThreads) {
    float sum = part_s[d];
    for (int part = 1; part < parts; ++part) sum = __fadd_rn(sum, part_s[part * hd + d]);
    o_s[d] = __fadd_rn(__fmul_rn(o_s[d], alpha), sum);
  }
}

// The split's unnormalized output, running max and sum, for the merge. Each
// o_s[d] was last written by the thread that stores it.
__device__ void store_split_result(float* partial, int row, int head, int split, const HeadShape& s,
                                   const float* o_s, float m_run, float l_run) {
  const int hd = s.head_dim;
  float* out =
      partial +
      ((static_cast<int64_t>(row) * s.n_head + head) * kAttentionSplits + split) * (hd + 2);
  for (int d = threadIdx.x; d < hd; d += kAttnThreads) out[d] = o_s[d];
  if (threadIdx.x == 0) {
    out[hd] = m_run;
    out[hd + 1] = l_run;
  }
}

// Floats of the per-head kernel's stage: a part of a chunk's keys (or values)
// in rows padded by one float, so that thread j reads key j's row without bank
// conflicts (128 keys of a head of 64).
constexpr int kAttnStageFloats = kAttnKeys * 65;

// Keys per stage for a head dimension: the largest power of two whose padded
// rows fit a stage of `floats`, at most a chunk.
__device__ int attention_stage_keys(int hd, int floats = kAttnStageFloats) {
  int keys = kAttnKeys;
  while (keys > 1 && keys * (hd + 1) > floats) keys /= 2;
  return keys;
}

// Rows [j_begin, j_end) of the chunk's keys (or values) from the cache into
// `stage`, row jj - j_begin at jj's slot: every load of a pass is issued
// before any is stored, so that a stage costs about one trip to memory.
__device__ void stage_kv_rows(const float* layer_base, int kv_dim, const int32_t* slot_s,
                              int j_begin, int j_end, int hd, float* stage) {
  if (hd % 4 != 0) {  // rows not in float4s: one float at a time
    for (int idx = threadIdx.x; idx < (j_end - j_begin) * hd; idx += kAttnThreads) {
      const int jj = j_begin + idx / hd, d = idx % hd;
      stage[(idx / hd) * (hd + 1) + d] = layer_base[static_cast<int64_t>(slot_s[jj]) * kv_dim + d];
    }
    return;
  }
  constexpr int kLoads = 8;  // float4 loads in flight per thread and pass
  const int hd4 = hd / 4, total = (j_end - j_begin) * hd4;
  for (int base = 0; base < total; base += kAttnThreads * kLoads) {
    float4 r[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int idx = base + u * kAttnThreads + static_cast<int>(threadIdx.x);
      if (idx < total) {
        const int jj = j_begin + idx / hd4, c = idx % hd4;
        r[u] = *reinterpret_cast<const float4*>(layer_base +
                                                static_cast<int64_t>(slot_s[jj]) * kv_dim + 4 * c);
      }
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int idx = base + u * kAttnThreads + static_cast<int>(threadIdx.x);
      if (idx < total) {
        float* dst = stage + (idx / hd4) * (hd + 1) + 4 * (idx % hd4);
        dst[0] = r[u].x, dst[1] = r[u].y, dst[2] = r[u].z, dst[3] = r[u].w;
      }
    }
  }
}

// f(a, e) for each output e = threadIdx.x + a · kAttnThreads of a per-head
// block that is below hd · parts: output dimension e % hd, run e / hd of the
// keys (those ≡ run mod parts).
template <class F>
__device__ void each_output_run(int hd, int parts, F&& f) {
#pragma unroll
  for (int a = 0; a < kMaxHeadDim / kAttnThreads; ++a) {
    const int e = threadIdx.x + a * kAttnThreads;
    if (e >= hd * parts) break;
    f(a, e);
  }
}

// A chunk's keys or values staged part after part (each part of stage_keys
// keys, a multiple of parts): f(s0, s1) once part [s0, s1) is in `stage`. A
// barrier comes before each part (it orders the stage's earlier reads, and
// slot_s's writes), before the first only with barrier_first (without it, the
// block's barriers since must already do so).
template <class F>
__device__ void each_stage(const float* layer_base, int kv_dim, const int32_t* slot_s, int len,
                           int stage_keys, int hd, float* stage, bool barrier_first, F&& f) {
  for (int s0 = 0; s0 < len; s0 += stage_keys) {
    const int s1 = min(len, s0 + stage_keys);
    if (s0 > 0 || barrier_first) __syncthreads();
    stage_kv_rows(layer_base, kv_dim, slot_s, s0, s1, hd, stage);
    __syncthreads();
    f(s0, s1);
  }
}

// With PARSPEC_CUDA_PREFETCH=early, before begin_kernel: the keys and values of
// the committed prefix in this block's chunks, requested into L2. Earlier passes
// wrote them, and the rows' list was uploaded before the pass's first kernel, so
// both are in place once the kernels two before this one are done; this pass
// writes only its own cells, which are not read here.
__device__ void prefetch_committed_kv(const AttentionRow& r, int layer, const HeadShape& s,
                                      int head, int split) {
  const HeadKeys h = head_keys(r, layer, s, head);
  const int64_t bytes = int64_t{s.head_dim} * static_cast<int64_t>(sizeof(float));
  for (int c = split; c * kAttnKeys < r.n_committed; c += kAttentionSplits) {
    const int j = c * kAttnKeys + static_cast<int>(threadIdx.x);
    if (j >= r.n_committed) break;
    prefetch_range_l2(h.k + static_cast<int64_t>(j) * h.kv_dim, bytes);
    prefetch_range_l2(h.v + static_cast<int64_t>(j) * h.kv_dim, bytes);
  }
}

// Split attention (flash decoding with fixed boundaries): a row's keys fall in
// chunks of kAttnKeys by their index in the row's key list, and split z of
// kAttentionSplits takes chunks z, z + kAttentionSplits, ... One block per
// (row, head, split) runs its chunks in order with an online softmax: one key
// per thread for the scores (the dot product over the head in order), then
// each output dimension summed over the chunk's keys in order (in `parts`
// interleaved runs when the head is narrower than the block, added in part
// order). It writes its unnormalized output, running max and sum to
// `partial`; attention_combine_kernel merges the splits in split order.
// Every step depends on the row's key list and the constants alone, so a
// row's result is the same alone, in a chain, in a tree or beside other rows;
// the work spreads over kAttentionSplits blocks per head, so a long cache is
// read by the whole GPU. kStaged: the keys, then the values, are staged in
// shared memory (a whole chunk for heads of up to 64, else in parts), each part
// read from the cache in one round of loads: far fewer waits on memory per
// block, but its 37 KB of shared memory leave room for fewer blocks per SM, so
// launch_attention stages for a few rows only. Otherwise each thread reads its
// key and its values where they lie. The grouped and tiled kernels, and either
// way here, give the same bits. kMergeInSplit: merge_if_last_split (a template
// parameter, so that its registers weigh on that variant alone).
template <bool kStaged, bool kMergeInSplit>
__global__ void attention_split_kernel(const float* q, const AttentionRow* rows,
                                       const int32_t* spec_slots, int layer, HeadShape s,
                                       float scale, float* partial, AttentionMerge merge) {
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float o_s[kMaxHeadDim];
  __shared__ float part_s[kMaxHeadDim];
  __shared__ float p_s[kAttnKeys];
  __shared__ int32_t slot_s[kAttnKeys];
  __shared__ float reduce_s[kAttnThreads / kWarp];
  __shared__ float stage[kStaged ? kAttnStageFloats : 1];

  const int row = blockIdx.x, head = blockIdx.y, split = blockIdx.z;
  const AttentionRow r = rows[row];
  const int n_keys = r.n_committed + r.spec_count;
  // Splits past the row's chunks have nothing to do, and the merge skips them:
  // they end before waiting (the key lists were uploaded before the pass).
  if (split * kAttnKeys >= n_keys) return;
  if (weights_early_wanted) prefetch_committed_kv(r, layer, s, head, split);
  begin_kernel();
  const HeadKeys h = head_keys(r, layer, s, head);
  const int hd = s.head_dim, kv_dim = h.kv_dim, parts = h.parts;
  const int stage_keys = attention_stage_keys(hd);  // a multiple of parts
  constexpr int kAccs = kMaxHeadDim / kAttnThreads;

  load_query_head(q, row, head, s, q_s, o_s);
  float m_run = -INFINITY, l_run = 0.0f;
  for (int c = split; c * kAttnKeys < n_keys; c += kAttentionSplits) {
    const int j0 = c * kAttnKeys, len = min(kAttnKeys, n_keys - j0);
    __syncthreads();  // q_s is written; the previous chunk's stage, p_s and slot_s are read
    const int j = threadIdx.x;
    if (j < len) slot_s[j] = key_slot(r, spec_slots, j0 + j);
    float sc = -INFINITY;
    if constexpr (kStaged) {
      each_stage(h.k, kv_dim, slot_s, len, stage_keys, hd, stage, true, [&](int s0, int s1) {
        if (j < s0 || j >= s1) return;
        const float* key = stage + (j - s0) * (hd + 1);
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot = __fmaf_rn(q_s[d], key[d], dot);
        sc = __fmul_rn(dot, scale);
      });
    } else if (j < len) {
      const float* key = h.k + static_cast<int64_t>(slot_s[j]) * kv_dim;
      float dot = 0.0f;
      if (hd % 4 == 0) {
// Unrolled so that several loads of the key are in flight; the sum stays in order.
#pragma unroll 8
        for (int d = 0; d < hd; d += 4) {
          const float4 k4 = *reinterpret_cast<const float4*>(key + d);
          dot = __fmaf_rn(q_s[d], k4.x, dot);
          dot = __fmaf_rn(q_s[d + 1], k4.y, dot);
          dot = __fmaf_rn(q_s[d + 2], k4.z, dot);
          dot = __fmaf_rn(q_s[d + 3], k4.w, dot);
        }
      } else {
        for (int d = 0; d < hd; ++d) dot = __fmaf_rn(q_s[d], key[d], dot);
      }
      sc = __fmul_rn(dot, scale);
    }
    // Its barriers also end the scores' reads of the stage and publish slot_s.
    const float alpha = online_softmax_chunk(sc, j < len, p_s, reduce_s, m_run, l_run);
    // Output dimension e % hd, run e / hd: keys jj ≡ run (mod parts) in order.
    float acc[kAccs];
#pragma unroll
    for (int a = 0; a < kAccs; ++a) acc[a] = 0.0f;
    if constexpr (kStaged) {
      each_stage(h.v, kv_dim, slot_s, len, stage_keys, hd, stage, false, [&](int s0, int s1) {
        each_output_run(hd, parts, [&](int a, int e) {
          const int d = e % hd;
          float sum = acc[a];
          for (int jj = s0 + e / hd; jj < s1; jj += parts)
            sum = __fmaf_rn(p_s[jj], stage[(jj - s0) * (hd + 1) + d], sum);
          acc[a] = sum;
        });
      });
    } else {
      each_output_run(hd, parts, [&](int a, int e) {
        const int d = e % hd;
        float sum = 0.0f;
#pragma unroll 8
        for (int jj = e / hd; jj < len; jj += parts)
          sum = __fmaf_rn(p_s[jj], h.v[static_cast<int64_t>(slot_s[jj]) * kv_dim + d], sum);
        acc[a] = sum;
      });
    }
    each_output_run(hd, parts, [&](int a, int e) { part_s[e] = acc[a]; });
    __syncthreads();  // part_s is written
    fold_chunk_into_output(part_s, o_s, hd, parts, alpha);
  }
  store_split_result(partial, row, head, split, s, o_s, m_run, l_run);
  if constexpr (kMergeInSplit) merge_if_last_split(r, row, head, s, partial, merge);
}

// The prestaged kernel's rows of keys (and of values) in shared memory: hd + 4
// floats apart, so that each row starts on 16 bytes (cp.async copies) and the
// 8 threads of a quarter-warp reading their keys' float4s at the same offset
// find them in different banks.
__host__ __device__ constexpr int prestaged_row_floats(int hd) {
  return hd + 4;
}

// Rows [j_begin, j_end) of a chunk's keys into k_s and its values into v_s
// (key jj's row at jj · prestaged_row_floats(hd)), from the slots in slot_s,
// by cp.async: every copy is issued at once (one trip to memory), as one group
// that copy_async_wait completes. hd is a multiple of 4.
__device__ void stage_kv_async(const float* k, const float* v, int kv_dim, const int32_t* slot_s,
                               int j_begin, int j_end, int hd, float* k_s, float* v_s) {
  const int hd4 = hd / 4, stride = prestaged_row_floats(hd);
  const int total = (j_end - j_begin) * hd4;
  for (int idx = threadIdx.x; idx < total; idx += kAttnThreads) {
    const int jj = j_begin + idx / hd4, c = idx % hd4;
    const int64_t at = static_cast<int64_t>(slot_s[jj]) * kv_dim + 4 * c;
    copy_async<16>(k_s + jj * stride + 4 * c, k + at, true);
    copy_async<16>(v_s + jj * stride + 4 * c, v + at, true);
  }
  copy_async_commit();
}

// Where, in the chunk of a row's keys j0 .. j0 + len - 1, the cells this pass
// writes (the row's speculative cells) begin: an index from 0 to len.
__device__ int first_uncommitted_in_chunk(const AttentionRow& r, int j0, int len) {
  return min(max(r.n_committed - j0, 0), len);
}

// PARSPEC_CUDA_ATTENTION=prestaged (a few rows, heads of a multiple of 4):
// attention_split_kernel's steps, with a chunk's keys and values both copied
// into shared memory at once (dynamic: attention_prestaged_bytes), and the
// copies of the committed keys and values of the block's first chunk issued
// before begin_kernel. Earlier passes wrote them and the rows' key lists were
// uploaded before the pass, so they are in place once the kernels two before
// this one are done; the cells this pass writes are copied after the wait.
// Splits without keys end before it. Where a row's keys fill one split, its
// block also merges it (merge_splits on that split, the bits
// attention_combine_kernel would give), and the combine kernel, told so,
// leaves the row alone.
__global__ void __launch_bounds__(kAttnThreads)
    attention_prestaged_kernel(const float* q, const AttentionRow* rows, const int32_t* spec_slots,
                               int layer, HeadShape s, float scale, float* partial,
                               AttentionMerge merge) {
  extern __shared__ float prestaged_shared[];
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float o_s[kMaxHeadDim];
  __shared__ float part_s[kMaxHeadDim];
  __shared__ float p_s[kAttnKeys];
  __shared__ int32_t slot_s[kAttnKeys];
  __shared__ float reduce_s[kAttnThreads / kWarp];
  __shared__ float run_s[2];

  const int row = blockIdx.x, head = blockIdx.y, split = blockIdx.z;
  const AttentionRow r = rows[row];
  const int n_keys = r.n_committed + r.spec_count;
  if (split * kAttnKeys >= n_keys) return;
  const HeadKeys h = head_keys(r, layer, s, head);
  const int hd = s.head_dim, kv_dim = h.kv_dim, parts = h.parts;
  const int stride = prestaged_row_floats(hd);
  float* k_s = prestaged_shared;
  float* v_s = prestaged_shared + kAttnKeys * stride;
  constexpr int kAccs = kMaxHeadDim / kAttnThreads;
  const int j = threadIdx.x;
  {
    const int j0 = split * kAttnKeys, len = min(kAttnKeys, n_keys - j0);
    if (j < len) slot_s[j] = key_slot(r, spec_slots, j0 + j);
    __syncthreads();  // slot_s is written
    stage_kv_async(h.k, h.v, kv_dim, slot_s, 0, first_uncommitted_in_chunk(r, j0, len), hd, k_s,
                   v_s);
  }
  for (int i = threadIdx.x; i < hd; i += kAttnThreads) o_s[i] = 0.0f;
  begin_kernel();

  // The query is loaded into registers first, so that its loads and the
  // copies of the first chunk's cells of this pass are in flight together.
  float q_r[kAccs];
#pragma unroll
  for (int a = 0; a < kAccs; ++a) {
    const int i = static_cast<int>(threadIdx.x) + a * kAttnThreads;
    if (i < hd) q_r[a] = q[(static_cast<int64_t>(row) * s.n_head + head) * hd + i];
  }
  float m_run = -INFINITY, l_run = 0.0f;
  for (int c = split; c * kAttnKeys < n_keys; c += kAttentionSplits) {
    const int j0 = c * kAttnKeys, len = min(kAttnKeys, n_keys - j0);
    if (c == split) {  // the first chunk: its cells of this pass
      stage_kv_async(h.k, h.v, kv_dim, slot_s, first_uncommitted_in_chunk(r, j0, len), len, hd, k_s,
                     v_s);
#pragma unroll
      for (int a = 0; a < kAccs; ++a) {
        const int i = static_cast<int>(threadIdx.x) + a * kAttnThreads;
        if (i < hd) q_s[i] = q_r[a];
      }
    } else {
      __syncthreads();  // the previous chunk's k_s, v_s, p_s and slot_s are read
      if (j < len) slot_s[j] = key_slot(r, spec_slots, j0 + j);
      __syncthreads();  // slot_s is written
      stage_kv_async(h.k, h.v, kv_dim, slot_s, 0, len, hd, k_s, v_s);
    }
    copy_async_wait<0>();  // this thread's copies have landed
    __syncthreads();       // everyone's, and q_s is written
    float sc = -INFINITY;
    if (j < len) {
      const float4* key = reinterpret_cast<const float4*>(k_s + j * stride);
      float dot = 0.0f;
      // Unrolled so that several loads are in flight; the sum stays in order.
#pragma unroll 4
      for (int d4 = 0; d4 < hd / 4; ++d4) {
        const float4 k4 = key[d4];
        dot = __fmaf_rn(q_s[4 * d4], k4.x, dot);
        dot = __fmaf_rn(q_s[4 * d4 + 1], k4.y, dot);
        dot = __fmaf_rn(q_s[4 * d4 + 2], k4.z, dot);
        dot = __fmaf_rn(q_s[4 * d4 + 3], k4.w, dot);
      }
      sc = __fmul_rn(dot, scale);
    }
    const float alpha = online_softmax_chunk(sc, j < len, p_s, reduce_s, m_run, l_run);
    // Output dimension e % hd, run e / hd: keys jj ≡ run (mod parts) in order.
    float acc[kAccs];
#pragma unroll
    for (int a = 0; a < kAccs; ++a) acc[a] = 0.0f;
    each_output_run(hd, parts, [&](int a, int e) {
      const int d = e % hd;
      float sum = 0.0f;
#pragma unroll 8
      for (int jj = e / hd; jj < len; jj += parts)
        sum = __fmaf_rn(p_s[jj], v_s[jj * stride + d], sum);
      acc[a] = sum;
    });
    each_output_run(hd, parts, [&](int a, int e) { part_s[e] = acc[a]; });
    __syncthreads();  // part_s is written
    fold_chunk_into_output(part_s, o_s, hd, parts, alpha);
  }
  if (splits_with_keys(r) > 1) {
    store_split_result(partial, row, head, split, s, o_s, m_run, l_run);
    return;
  }
  // Every thread holds the same running max and sum.
  if (threadIdx.x == 0) run_s[0] = m_run, run_s[1] = l_run;
  __syncthreads();  // run_s, and o_s (each o_s[d] is read by the thread that wrote it)
  merge_splits(
      1, &run_s[0], &run_s[1], [&](int, int d) { return o_s[d]; }, row, head, gridDim.x, s, merge);
}

// attention_block_reduce for kG values at once, each the same as alone: per
// value a warp butterfly, then the warps in order.
template <bool kMax, int kG>
__device__ void attention_block_reduce_group(float (&v)[kG], int count,
                                             float (*scratch)[kAttnThreads / kWarp]) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int g = 0; g < kG; ++g)
    if (g < count) v[g] = kMax ? warp_max(v[g]) : warp_sum(v[g]);
  __syncthreads();  // scratch is free
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < kG; ++g)
      if (g < count) scratch[g][warp] = v[g];
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g >= count) continue;
    float r = scratch[g][0];
    for (int w = 1; w < kAttnThreads / kWarp; ++w)
      r = kMax ? fmaxf(r, scratch[g][w]) : __fadd_rn(r, scratch[g][w]);
    v[g] = r;
  }
}

// attention_split_kernel for the query heads that share a KV head (up to
// kAttnGroup of them per block): each key and value is read once for all of
// them instead of once per head, staged in shared memory as
// attention_split_kernel<true> stages them, and every (row, head) takes
// exactly the steps it takes there, so the bits are the same. One block per
// (row, KV head and group of its query heads, split).
constexpr int kAttnGroup = 8;

// The grouped kernel's stage: half the per-head kernel's, so that its shared
// memory stays within 48 KB beside the group's queries and outputs.
constexpr int kAttnGroupStageFloats = kAttnStageFloats / 2;

__global__ void attention_split_grouped_kernel(const float* q, const AttentionRow* rows,
                                               const int32_t* spec_slots, int layer, HeadShape s,
                                               float scale, float* partial) {
  __shared__ float q_s[kAttnGroup][kMaxHeadDim];
  __shared__ float o_s[kAttnGroup][kMaxHeadDim];
  __shared__ float part_s[kAttnGroup][kMaxHeadDim];
  __shared__ float p_s[kAttnGroup][kAttnKeys];
  __shared__ int32_t slot_s[kAttnKeys];
  __shared__ float reduce_s[kAttnGroup][kAttnThreads / kWarp];
  __shared__ float stage[kAttnGroupStageFloats];

  const int row = blockIdx.x, split = blockIdx.z;
  const AttentionRow r = rows[row];
  const int n_keys = r.n_committed + r.spec_count;
  if (split * kAttnKeys >= n_keys) return;  // before waiting, as the per-head kernel
  begin_kernel();
  const int hd = s.head_dim, q_dim = s.n_head * hd, kv_dim = s.n_head_kv * hd;
  const int per_kv = s.n_head / s.n_head_kv;
  const int groups_per_kv = (per_kv + kAttnGroup - 1) / kAttnGroup;
  const int kv_head = blockIdx.y / groups_per_kv;
  const int head0 = kv_head * per_kv + (blockIdx.y % groups_per_kv) * kAttnGroup;
  const int heads = min(kAttnGroup, kv_head * per_kv + per_kv - head0);
  const HeadKeys h = head_keys(r, layer, s, head0);  // the KV head's keys and values
  const int parts = h.parts;
  const int stage_keys = attention_stage_keys(hd, kAttnGroupStageFloats);  // a multiple of parts
  constexpr int kAccs = kMaxHeadDim / kAttnThreads;

  for (int g = 0; g < heads; ++g)
    for (int i = threadIdx.x; i < hd; i += kAttnThreads) {
      q_s[g][i] = q[static_cast<int64_t>(row) * q_dim + (head0 + g) * hd + i];
      o_s[g][i] = 0.0f;
    }
  float m_run[kAttnGroup], l_run[kAttnGroup];
#pragma unroll
  for (int g = 0; g < kAttnGroup; ++g) m_run[g] = -INFINITY, l_run[g] = 0.0f;
  for (int c = split; c * kAttnKeys < n_keys; c += kAttentionSplits) {
    const int j0 = c * kAttnKeys, len = min(kAttnKeys, n_keys - j0);
    __syncthreads();  // q_s is written; the previous chunk's stage, p_s and slot_s are read
    const int j = threadIdx.x;
    if (j < len) slot_s[j] = key_slot(r, spec_slots, j0 + j);
    float sc[kAttnGroup];
#pragma unroll
    for (int g = 0; g < kAttnGroup; ++g) sc[g] = -INFINITY;
    each_stage(h.k, kv_dim, slot_s, len, stage_keys, hd, stage, true, [&](int s0, int s1) {
      if (j < s0 || j >= s1) return;
      const float* key = stage + (j - s0) * (hd + 1);
      float dot[kAttnGroup];
#pragma unroll
      for (int g = 0; g < kAttnGroup; ++g) dot[g] = 0.0f;
      for (int d = 0; d < hd; ++d) {
        const float kd = key[d];
#pragma unroll
        for (int g = 0; g < kAttnGroup; ++g)
          if (g < heads) dot[g] = __fmaf_rn(q_s[g][d], kd, dot[g]);
      }
#pragma unroll
      for (int g = 0; g < kAttnGroup; ++g) sc[g] = __fmul_rn(dot[g], scale);
    });
    float m_new[kAttnGroup];
#pragma unroll
    for (int g = 0; g < kAttnGroup; ++g) m_new[g] = sc[g];
    attention_block_reduce_group<true>(m_new, heads, reduce_s);
    float p[kAttnGroup];
#pragma unroll
    for (int g = 0; g < kAttnGroup; ++g) {
      m_new[g] = fmaxf(m_run[g], m_new[g]);
      p[g] = j < len ? expf(__fsub_rn(sc[g], m_new[g])) : 0.0f;
      if (g < heads) p_s[g][j] = p[g];
    }
    // The reduction's barriers also publish p_s and end the scores' reads of the stage.
    attention_block_reduce_group<false>(p, heads, reduce_s);
    float alpha[kAttnGroup];
#pragma unroll
    for (int g = 0; g < kAttnGroup; ++g) {
      alpha[g] = expf(__fsub_rn(m_run[g], m_new[g]));
      l_run[g] = __fadd_rn(__fmul_rn(l_run[g], alpha[g]), p[g]);
      m_run[g] = m_new[g];
    }
    float acc[kAccs][kAttnGroup];
#pragma unroll
    for (int a = 0; a < kAccs; ++a)
#pragma unroll
      for (int g = 0; g < kAttnGroup; ++g) acc[a][g] = 0.0f;
    each_stage(h.v, kv_dim, slot_s, len, stage_keys, hd, stage, false, [&](int s0, int s1) {
      each_output_run(hd, parts, [&](int a, int e) {
        const int d = e % hd;
        for (int jj = s0 + e / hd; jj < s1; jj += parts) {
          const float value = stage[(jj - s0) * (hd + 1) + d];
#pragma unroll
          for (int g = 0; g < kAttnGroup; ++g)
            if (g < heads) acc[a][g] = __fmaf_rn(p_s[g][jj], value, acc[a][g]);
        }
      });
    });
    each_output_run(hd, parts, [&](int a, int e) {
#pragma unroll
      for (int g = 0; g < kAttnGroup; ++g)
        if (g < heads) part_s[g][e] = acc[a][g];
    });
    __syncthreads();  // part_s is written
    for (int d = threadIdx.x; d < hd; d += kAttnThreads)
      for (int g = 0; g < heads; ++g) {
        float sum = part_s[g][d];
        for (int part = 1; part < parts; ++part) sum = __fadd_rn(sum, part_s[g][part * hd + d]);
        o_s[g][d] = __fadd_rn(__fmul_rn(o_s[g][d], alpha[g]), sum);
      }
  }
  for (int g = 0; g < heads; ++g) {
    float* out =
        partial +
        ((static_cast<int64_t>(row) * s.n_head + head0 + g) * kAttentionSplits + split) * (hd + 2);
    for (int d = threadIdx.x; d < hd; d += kAttnThreads) out[d] = o_s[g][d];
    if (threadIdx.x == 0) {
      out[hd] = m_run[g];
      out[hd + 1] = l_run[g];
    }
  }
}

// Tiled attention: attention_split_kernel's steps for each (row, head) query of
// a tile of consecutive rows and the query heads of one KV head, one warp per
// query. The block stages each chunk's keys, then its values, in shared memory
// once, along the key list of the tile's row with the most keys (the
// reference); a query whose key at an index is the reference's (the same
// cache and slot: the committed prefix, and the ancestors that the rows of a
// chain or tree share) reads it there, any other key from global memory. A
// query then takes the per-head kernel's steps exactly: lane l scores keys l,
// l + 32, l + 64 and l + 96 of a chunk, as warps 0..3 of that kernel do (each
// a dot product in head order), reduces each quarter by the same butterfly and
// the quarters in order, and sums each output dimension over the keys in the
// same order and parts. So every (row, head) gets the per-head kernel's bits,
// and the keys a verification's rows share are read once per tile instead of
// once per row and head.
constexpr int kTiledWarps = 8;
constexpr int kTiledQueries = 32;  // (row, head) queries per block
constexpr int kTiledPerWarp = kTiledQueries / kTiledWarps;
static_assert(kAttnKeys == 4 * kWarp, "a warp scores a chunk as the per-head kernel's 4 warps");
static_assert(kAttnThreads == kAttnKeys, "the per-head kernel's parts are over kAttnThreads");

// Query heads per block, rows per tile and blocks per KV head.
struct TiledShape {
  int heads = 1, rows_per_tile = 1, head_groups = 1;
};
__host__ __device__ TiledShape tiled_shape(const HeadShape& s) {
  const int per_kv = s.n_head / s.n_head_kv;
  TiledShape t;
  t.heads = per_kv < kTiledQueries ? per_kv : kTiledQueries;
  t.rows_per_tile = kTiledQueries / t.heads;
  t.head_groups = (per_kv + t.heads - 1) / t.heads;
  return t;
}

// Dynamic shared memory of the tiled kernel: a chunk's keys or values (rows
// padded by one float, so that lane l reads key l's row without bank
// conflicts), the queries, and their probabilities over a chunk.
size_t tiled_shared_bytes(int head_dim) {
  return sizeof(float) * (static_cast<size_t>(kAttnKeys) * (head_dim + 1) +
                          static_cast<size_t>(kTiledQueries) * head_dim +
                          static_cast<size_t>(kTiledQueries) * kAttnKeys);
}

// Whether two rows' keys of an index and slot are the same values.
__device__ bool same_cache(const AttentionRow& a, const AttentionRow& b) {
  return a.k == b.k && a.v == b.v && a.layer_first == b.layer_first && a.capacity == b.capacity;
}

__global__ void __launch_bounds__(kTiledWarps* kWarp)
    attention_tiled_kernel(const float* q, const AttentionRow* rows, const int32_t* spec_slots,
                           int n, int layer, HeadShape s, float scale, float* partial) {
  extern __shared__ float tiled_shared[];
  __shared__ AttentionRow rows_s[kTiledQueries];
  __shared__ int32_t slot_s[kAttnKeys];  // the reference's slots of the chunk

  const TiledShape t = tiled_shape(s);
  const int hd = s.head_dim, q_dim = s.n_head * hd, kv_dim = s.n_head_kv * hd;
  const int per_kv = s.n_head / s.n_head_kv;
  const int kv_head = blockIdx.y / t.head_groups;
  const int head0 = kv_head * per_kv + (blockIdx.y % t.head_groups) * t.heads;
  const int heads = min(t.heads, kv_head * per_kv + per_kv - head0);
  const int row0 = blockIdx.x * t.rows_per_tile;
  const int tile_rows = min(t.rows_per_tile, n - row0);
  const int n_queries = tile_rows * heads;
  const int split = blockIdx.z;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int stride = hd + 1;
  float* kv_s = tiled_shared;
  float* q_s = kv_s + kAttnKeys * stride;
  float* p_s = q_s + kTiledQueries * hd;

  for (int i = threadIdx.x; i < tile_rows; i += blockDim.x) rows_s[i] = rows[row0 + i];
  __syncthreads();
  int ref = 0, most = 0;
  for (int i = 0; i < tile_rows; ++i) {
    const int keys = rows_s[i].n_committed + rows_s[i].spec_count;
    if (keys > most) most = keys, ref = i;
  }
  // The same for the whole block; before waiting, as the per-head kernel.
  if (split * kAttnKeys >= most) return;
  begin_kernel();
  const AttentionRow rr = rows_s[ref];
  const int64_t layer_at = kv_row(rr, layer, 0, kv_dim) + kv_head * hd;
  for (int e = threadIdx.x; e < n_queries * hd; e += blockDim.x) {
    const int qi = e / hd, d = e % hd;
    q_s[e] = q[static_cast<int64_t>(row0 + qi / heads) * q_dim + (head0 + qi % heads) * hd + d];
  }

  // Each chunk's keys, then its values, of the reference's list into kv_s.
  auto stage = [&](const float* base, int len) {
    if (hd % 4 == 0) {
      const int quads = hd / 4;
      for (int e = threadIdx.x; e < len * quads; e += blockDim.x) {
        const int j = e / quads, d = 4 * (e % quads);
        const float4 x =
            *reinterpret_cast<const float4*>(base + static_cast<int64_t>(slot_s[j]) * kv_dim + d);
        float* dst = kv_s + j * stride + d;
        dst[0] = x.x, dst[1] = x.y, dst[2] = x.z, dst[3] = x.w;
      }
    } else {
      for (int e = threadIdx.x; e < len * hd; e += blockDim.x) {
        const int j = e / hd, d = e % hd;
        kv_s[j * stride + d] = base[static_cast<int64_t>(slot_s[j]) * kv_dim + d];
      }
    }
  };

  float m_run[kTiledPerWarp], l_run[kTiledPerWarp], alpha[kTiledPerWarp];
  float o[kTiledPerWarp][kMaxHeadDim / kWarp];
#pragma unroll
  for (int k = 0; k < kTiledPerWarp; ++k) {
    m_run[k] = -INFINITY, l_run[k] = 0.0f, alpha[k] = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / kWarp; ++i) o[k][i] = 0.0f;
  }
  const int parts = hd < kAttnThreads ? kAttnThreads / hd : 1;

  for (int c = split; c * kAttnKeys < most; c += kAttentionSplits) {
    const int j0 = c * kAttnKeys, ref_len = min(kAttnKeys, most - j0);
    __syncthreads();  // the previous chunk's values, slots and probabilities are read
    for (int j = threadIdx.x; j < ref_len; j += blockDim.x)
      slot_s[j] = key_slot(rr, spec_slots, j0 + j);
    __syncthreads();
    stage(rr.k + layer_at, ref_len);
    __syncthreads();  // the keys (and, the first time, the queries) are in place

#pragma unroll
    for (int k = 0; k < kTiledPerWarp; ++k) {
      const int qi = warp + k * kTiledWarps;  // the same on the whole warp
      if (qi >= n_queries) break;
      const AttentionRow& r = rows_s[qi / heads];
      const int n_keys = r.n_committed + r.spec_count;
      if (j0 >= n_keys) continue;
      const int len = min(kAttnKeys, n_keys - j0);
      const bool shares = same_cache(r, rr);
      const float* k_layer = r.k + kv_row(r, layer, 0, kv_dim) + kv_head * hd;
      const float* key[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = lane + kWarp * i;
        key[i] = kv_s + (j < ref_len ? j : 0) * stride;  // read, not used, past len
        if (j < len) {
          const int32_t slot = key_slot(r, spec_slots, j0 + j);
          if (!shares || j >= ref_len || slot != slot_s[j])
            key[i] = k_layer + static_cast<int64_t>(slot) * kv_dim;
        }
      }
      const float* qv = q_s + qi * hd;
      float dot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 8
      for (int d = 0; d < hd; ++d) {
        const float qd = qv[d];
#pragma unroll
        for (int i = 0; i < 4; ++i) dot[i] = __fmaf_rn(qd, key[i][d], dot[i]);
      }
      float sc[4], quarter_max[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        sc[i] = lane + kWarp * i < len ? __fmul_rn(dot[i], scale) : -INFINITY;
        quarter_max[i] = warp_max(sc[i]);
      }
      float chunk_max = quarter_max[0];
#pragma unroll
      for (int i = 1; i < 4; ++i) chunk_max = fmaxf(chunk_max, quarter_max[i]);
      const float m_new = fmaxf(m_run[k], chunk_max);
      float l_chunk = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = lane + kWarp * i;
        const float p = j < len ? expf(__fsub_rn(sc[i], m_new)) : 0.0f;
        p_s[qi * kAttnKeys + j] = p;
        const float quarter = warp_sum(p);
        l_chunk = i == 0 ? quarter : __fadd_rn(l_chunk, quarter);
      }
      alpha[k] = expf(__fsub_rn(m_run[k], m_new));  // 0 for the first chunk
      l_run[k] = __fadd_rn(__fmul_rn(l_run[k], alpha[k]), l_chunk);
      m_run[k] = m_new;
    }
    __syncthreads();  // the keys are read; the probabilities are written
    stage(rr.v + layer_at, ref_len);
    __syncthreads();

#pragma unroll
    for (int k = 0; k < kTiledPerWarp; ++k) {
      const int qi = warp + k * kTiledWarps;
      if (qi >= n_queries) break;
      const AttentionRow& r = rows_s[qi / heads];
      const int n_keys = r.n_committed + r.spec_count;
      if (j0 >= n_keys) continue;
      const int len = min(kAttnKeys, n_keys - j0);
      const bool shares = same_cache(r, rr);
      const float* v_layer = r.v + kv_row(r, layer, 0, kv_dim) + kv_head * hd;
      const float* p = p_s + qi * kAttnKeys;
#pragma unroll
      for (int i = 0; i < kMaxHeadDim / kWarp; ++i) {
        const int d = lane + kWarp * i;
        if (d >= hd) break;
        float sum = 0.0f;
        for (int part = 0; part < parts; ++part) {
          float acc = 0.0f;
          for (int jj = part; jj < len; jj += parts) {
            const int32_t slot = key_slot(r, spec_slots, j0 + jj);
            const float value = shares && jj < ref_len && slot == slot_s[jj]
                                    ? kv_s[jj * stride + d]
                                    : v_layer[static_cast<int64_t>(slot) * kv_dim + d];
            acc = __fmaf_rn(p[jj], value, acc);
          }
          sum = part == 0 ? acc : __fadd_rn(sum, acc);
        }
        o[k][i] = __fadd_rn(__fmul_rn(o[k][i], alpha[k]), sum);
      }
    }
  }

#pragma unroll
  for (int k = 0; k < kTiledPerWarp; ++k) {
    const int qi = warp + k * kTiledWarps;
    if (qi >= n_queries) break;
    const AttentionRow& r = rows_s[qi / heads];
    if (split * kAttnKeys >= r.n_committed + r.spec_count) continue;  // as the per-head kernel
    const int row = row0 + qi / heads, head = head0 + qi % heads;
    float* out =
        partial +
        ((static_cast<int64_t>(row) * s.n_head + head) * kAttentionSplits + split) * (hd + 2);
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / kWarp; ++i) {
      const int d = lane + kWarp * i;
      if (d < hd) out[d] = o[k][i];
    }
    if (lane == 0) {
      out[hd] = m_run[k];
      out[hd + 1] = l_run[k];
    }
  }
}

// gate = silu(gate) · up (swiglu_value), quantized to Q8_0 when q is given
// and to Q8_K when k8.q is (PARSPEC_CUDA_FUSE=q8k; dim a multiple of
// kSuperBlock, so that a block's values are one super-block).
// Blocks of (row, 256 values): one warp per 32 values, so a row spreads over the GPU.
static_assert(kNormThreads == kSuperBlock, "a SwiGLU block is a Q8_K super-block");
__global__ void swiglu_kernel(float* gate, const float* up, int dim, int8_t* q, float* scales,
                              bool block_major, Q8KActivations k8) {
  __shared__ float warp_amax[kSuperBlockWarps];
  begin_kernel();
  const int64_t row = blockIdx.x;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int base = blockIdx.y * kNormThreads + warp * kWarp;
  if (base >= dim) return;  // the whole warp
  const int64_t e = row * dim + base + lane;
  float value = 0.0f;
  if (base + lane < dim) {
    value = swiglu_value(gate[e], up[e]);
    gate[e] = value;
  }
  if (q != nullptr) {  // dim is a multiple of 32 then: every lane holds a value
    const int64_t at = q8_block_index(row, base / 32, gridDim.x, dim / 32, block_major);
    quantize_block(value, lane, q + at * 32, scales + at);
  }
  if (k8.q == nullptr) return;  // the same for the whole block, none of whose warps returned
  const float amax = warp_max(fabsf(value));
  if (lane == 0) warp_amax[warp] = amax;
  __syncthreads();
  store_q8k_value(value, super_block_amax(warp_amax), e, lane, k8);
}

__global__ void add_kernel(float* y, const float* x, int64_t count) {
  begin_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) y[i] = __fadd_rn(y[i], x[i]);
}

__global__ void gather_rows_kernel(const float* src, const int32_t* index, int dim, float* dst) {
  begin_kernel();
  const float* s = src + static_cast<int64_t>(index[blockIdx.x]) * dim;
  float* d = dst + static_cast<int64_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) d[i] = s[i];
}

// blockIdx.x: the pair, blockIdx.y: the layer. `to_staging` picks the direction.
__global__ void move_kv_kernel(float* k, float* v, int capacity, int kv_dim, const int32_t* slots,
                               float* staging, bool to_staging) {
  begin_kernel();
  const int i = blockIdx.x, layer = blockIdx.y;
  const int64_t cache_row = (static_cast<int64_t>(layer) * capacity + slots[i]) * kv_dim;
  const int64_t stage_row = (static_cast<int64_t>(layer) * gridDim.x + i) * 2 * kv_dim;
  for (int d = threadIdx.x; d < kv_dim; d += blockDim.x) {
    if (to_staging) {
      staging[stage_row + d] = k[cache_row + d];
      staging[stage_row + kv_dim + d] = v[cache_row + d];
    } else {
      k[cache_row + d] = staging[stage_row + d];
      v[cache_row + d] = staging[stage_row + kv_dim + d];
    }
  }
}

__global__ void argmax_kernel(const float* x, int dim, int32_t* index) {
  begin_kernel();
  __shared__ float best_s[kNormThreads];
  __shared__ int32_t at_s[kNormThreads];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * dim;
  float best = -INFINITY;
  int32_t at = -1;
  for (int i = threadIdx.x; i < dim; i += kNormThreads) {
    if (row[i] > best || at < 0) best = row[i], at = i;
  }
  best_s[threadIdx.x] = best;
  at_s[threadIdx.x] = at;
  __syncthreads();
  for (int stride = kNormThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float b = best_s[threadIdx.x + stride];
      const int32_t a = at_s[threadIdx.x + stride];
      if (a >= 0 && (at_s[threadIdx.x] < 0 || b > best_s[threadIdx.x] ||
                     (b == best_s[threadIdx.x] && a < at_s[threadIdx.x]))) {
        best_s[threadIdx.x] = b;
        at_s[threadIdx.x] = a;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) index[blockIdx.x] = at_s[0];
}

}  // namespace

void launch_embed(const DeviceMatrix& embedding, const int32_t* tokens, int n, float* hidden,
                  cudaStream_t stream) {
  if (n > 0) launch(embed_kernel, n, 256, 0, stream, embedding, tokens, hidden);
}

bool launch_add_rmsnorm(float* h, const float* residual, const float* w, int n, int dim, float eps,
                        float* out, int8_t* q, float* scales, cudaStream_t stream,
                        const Q8KActivations& k8) {
  if (n <= 0) return false;
  if (dim <= kNormBlock * kWideNormPerThread) {
    const bool to_q8k = k8.q != nullptr && dim % kSuperBlock == 0;
    launch(add_rmsnorm_wide_kernel, n, kNormBlock, 0, stream, h, residual, w, dim, eps, out, q,
           scales, block_major_activations(n, dim), to_q8k ? k8 : Q8KActivations{});
    return to_q8k;
  }
  launch(add_rmsnorm_kernel, n, kNormBlock, 0, stream, h, residual, w, dim, eps, out, q, scales,
         block_major_activations(n, dim));
  return false;
}

void launch_quantize_q8(const float* x, int n, int dim, int8_t* q, float* scales,
                        cudaStream_t stream) {
  const int64_t n_blocks = static_cast<int64_t>(n) * (dim / 32);
  if (n_blocks > 0)
    launch(quantize_q8_kernel, blocks_for(n_blocks * kWarp, 256), 256, 0, stream, x, n, dim / 32, q,
           scales, block_major_activations(n, dim));
}

void launch_quantize_q8k(const float* x, int n, int dim, const Q8KActivations& out,
                         cudaStream_t stream) {
  const int64_t n_blocks = static_cast<int64_t>(n) * (dim / kSuperBlock);
  if (n_blocks > 0)
    launch(quantize_q8k_kernel, blocks_for(n_blocks * kWarp, 256), 256, 0, stream, x, n_blocks,
           out);
}

void launch_matmul_group(const MatmulGroup& group, const float* x, const int8_t* xq,
                         const float* xd, const Q8KActivations& xk, int n, cudaStream_t stream) {
  if (n <= 0 || group.count <= 0) return;
  // Mixed kinds or widths: one launch per matrix (each output is the same either way).
  bool uniform = true;
  for (int i = 1; i < group.count; ++i)
    uniform &= group.w[i].kind == group.w[0].kind && group.w[i].n_in == group.w[0].n_in;
  if (!uniform) {
    for (int i = 0; i < group.count; ++i) {
      MatmulGroup one = group;  // its input and output mode too
      one.w[0] = group.w[i];
      one.y[0] = group.y[i];
      one.count = 1;
      launch_matmul_group(one, x, xq, xd, xk, n, stream);
    }
    return;
  }
  const MatmulInputs in{x, xq, xd, xk};
  const WeightKind kind = group.w[0].kind;
  if (kind == WeightKind::kQ8_0 || kind == WeightKind::kQ4_0) {
    const bool q8 = kind == WeightKind::kQ8_0;
    switch (quantized_kernel(n, group.w[0].n_in)) {
      case QuantizedKernel::kRows:
        return q8 ? launch_rows<WeightKind::kQ8_0>(group, xq, xd, n, stream)
                  : launch_rows<WeightKind::kQ4_0>(group, xq, xd, n, stream);
      case QuantizedKernel::kOneRow:
        return q8 ? launch_gemv<WeightKind::kQ8_0>(group, xq, xd, stream)
                  : launch_gemv<WeightKind::kQ4_0>(group, xq, xd, stream);
      case QuantizedKernel::kTensorCores: {
        const bool block_major = block_major_activations(n, group.w[0].n_in);
        return q8 ? launch_matmul_mma<WeightKind::kQ8_0>(group, xq, xd, n, block_major, stream)
                  : launch_matmul_mma<WeightKind::kQ4_0>(group, xq, xd, n, block_major, stream);
      }
      case QuantizedKernel::kWarp:
        break;  // the warp kernel below
    }
  }
  if ((kind == WeightKind::kF16 || kind == WeightKind::kBF16) && half_tensor_cores(group.w[0].n_in))
    return kind == WeightKind::kF16 ? launch_half_mma<WeightKind::kF16>(group, x, n, stream)
                                    : launch_half_mma<WeightKind::kBF16>(group, x, n, stream);
  if ((kind == WeightKind::kQ4_K || kind == WeightKind::kQ6_K) && !k_quant_warp_only()) {
    const bool q4 = kind == WeightKind::kQ4_K;
    if (prefill_tiles_take(kind, n))
      return launch(q4 ? matmul_k_prefill_kernel<WeightKind::kQ4_K>
                       : matmul_k_prefill_kernel<WeightKind::kQ6_K>,
                    prefill_blocks<kKPrefillRows, kKPrefillCols>(group, n), kKPrefillThreads, 0,
                    stream, group, xk, n);
    return q4 ? launch_k_mma<WeightKind::kQ4_K>(group, xk, n, stream)
              : launch_k_mma<WeightKind::kQ6_K>(group, xk, n, stream);
  }
  // A one-row tile for single rows: the same arithmetic per row, fewer registers.
  if (n == 1)
    launch_matmul_tile<1>(group, in, n, stream);
  else
    launch_matmul_tile<kRowTile>(group, in, n, stream);
}

void launch_matmul(const DeviceMatrix& w, const float* x, const int8_t* xq, const float* xd,
                   const Q8KActivations& xk, int n, float* y, cudaStream_t stream) {
  MatmulGroup group;
  group.w[0] = w;
  group.y[0] = y;
  group.count = 1;
  launch_matmul_group(group, x, xq, xd, xk, n, stream);
}

void launch_rope_angles(const int32_t* positions, const float* inv_freq, int n, int n_pairs,
                        float* angles, cudaStream_t stream) {
  if (n > 0 && n_pairs > 0)
    launch(rope_angles_kernel, n, 64, 0, stream, positions, inv_freq, n_pairs,
           reinterpret_cast<float2*>(angles));
}

void launch_bias_rope_store(float* q, float* k, float* v, const float* bq, const float* bk,
                            const float* bv, const float* angles, const AttentionRow* rows,
                            int layer, int n, HeadShape shape, cudaStream_t stream) {
  if (n > 0)
    launch(bias_rope_store_kernel, dim3(n, shape.n_head + shape.n_head_kv), 64, 0, stream, q, k, v,
           bq, bk, bv, reinterpret_cast<const float2*>(angles), rows, layer, shape);
}

void prepare_launches() {
  static const bool on = [] {
    if (env_is("PARSPEC_CUDA_PDL", "0")) return false;
    int device = 0, major = 0;
    return cudaGetDevice(&device) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) ==
               cudaSuccess &&
           major >= 9;
  }();
  dependent_launch = on;
  static const bool early = env_is("PARSPEC_CUDA_PREFETCH", "early");
  // Without it the kernels wait before reading weights, as they would anyway.
  if (cudaMemcpyToSymbol(weights_early_wanted, &early, sizeof early) != cudaSuccess)
    (void)cudaGetLastError();
  const bool operands = operands_before_wait();
  if (cudaMemcpyToSymbol(operands_early_wanted, &operands, sizeof operands) != cudaSuccess)
    (void)cudaGetLastError();
  if (prefill_grouped_wanted()) {
    prepare_prefill_tiles<WeightKind::kQ8_0>();
    prepare_prefill_tiles<WeightKind::kQ4_0>();
  }
  if (streamed_weight_tiles() > 0) prepare_stream_kernels<1>();
  if (streamed_weight_tiles() == 2 || streamed_weight_tiles() == 3) prepare_stream_kernels<2>();
  if (streamed_weight_tiles() >= 4) prepare_stream_kernels<4>();
  if (streamed_weight_tiles() == 8 || streamed_weight_tiles() == 9) {
    prepare_stream_kernel<WeightKind::kQ8_0, 1, 4, 2>();
    prepare_stream_kernel<WeightKind::kQ4_0, 1, 4, 2>();
  }
  if (streamed_weight_tiles() == 6) {
    prepare_stream_persistent_kernels<1>();
    prepare_stream_persistent_kernels<4>();
  }
}

namespace {
// The tiled and prestaged kernels' shared memory limits on this process's
// device (0 until prepare_attention has raised them).
size_t tiled_shared_limit = 0;
size_t prestaged_shared_limit = 0;

// The most dynamic shared memory `kernel` may ask for on this device, raised
// to that (0 where it cannot be).
template <class Kernel>
size_t raise_shared_limit(Kernel* kernel) {
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess)
    return 0;
  // The static shared memory counts against the same limit.
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess) return 0;
  const int dynamic = optin - static_cast<int>(attributes.sharedSizeBytes);
  if (dynamic <= 0 || cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           dynamic) != cudaSuccess)
    return 0;
  return static_cast<size_t>(dynamic);
}

// The prestaged kernel's dynamic shared memory: a chunk's keys and its values.
size_t attention_prestaged_bytes(int head_dim) {
  return 2 * static_cast<size_t>(kAttnKeys) * static_cast<size_t>(prestaged_row_floats(head_dim)) *
         sizeof(float);
}
}  // namespace

void prepare_attention(AttentionKernel kernel) {
  if (kernel == AttentionKernel::kTiled && tiled_shared_limit == 0)
    tiled_shared_limit = raise_shared_limit(attention_tiled_kernel);
  if (kernel == AttentionKernel::kPrestaged && prestaged_shared_limit == 0)
    prestaged_shared_limit = raise_shared_limit(attention_prestaged_kernel);
  (void)cudaGetLastError();  // a limit left unraised is not an error: the kernel is not used
}

// Rows up to which the per-head attention stages its keys and values. On an H200
// (8B-class Q4_0, 64 heads) staging was faster for 1 to 8 rows after 64 cached
// tokens and for 1 row after 3000, slower for 8 rows after 3000 and for 16 rows
// or more (a 512-token prefill took 13% longer).
constexpr int kStagedAttentionMaxRows = 4;

// Rows up to which the prestaged kernel runs: PARSPEC_CUDA_PRESTAGED_ROWS (1 to
// 64), else 8 (on an H100, a forward over 8 rows took 3-19% less time with it
// than with the per-head kernel, over 1 to 4 rows 5-18% less); more rows take
// the per-head kernel.
constexpr int kPrestagedMaxRows = 8;
int prestaged_max_rows() {
  static const int rows = [] {
    const char* env = std::getenv("PARSPEC_CUDA_PRESTAGED_ROWS");
    if (env == nullptr) return kPrestagedMaxRows;
    char* end = nullptr;
    const long value = std::strtol(env, &end, 10);
    const bool valid = end != env && *end == '\0' && value >= 1 && value <= 64;
    return valid ? static_cast<int>(value) : kPrestagedMaxRows;
  }();
  return rows;
}

bool fused_attention_merge_wanted() {
  static const bool wanted = env_is("PARSPEC_CUDA_ATTENTION_MERGE", "in-split");
  return wanted;
}

bool launch_attention(const float* q, const AttentionRow* rows, const int32_t* spec_slots, int n,
                      int layer, HeadShape shape, float scale, AttentionKernel kernel,
                      float* partial, float* out, int8_t* out_q, float* out_scales,
                      int32_t* split_counters, cudaStream_t stream, int max_keys) {
  if (shape.head_dim % 32 != 0) out_q = nullptr;  // the caller quantizes the rows
  if (n == 0) return out_q != nullptr;
  const unsigned splits = max_keys > 0
                              ? std::min((max_keys + kAttnKeys - 1) / kAttnKeys, kAttentionSplits)
                              : kAttentionSplits;
  const int q_dim = shape.n_head * shape.head_dim;
  AttentionMerge merge;
  merge.out = out;
  merge.q = out_q;
  merge.scales = out_scales;
  merge.block_major = out_q != nullptr && block_major_activations(n, q_dim);
  const size_t tiled_bytes = tiled_shared_bytes(shape.head_dim);
  if (kernel == AttentionKernel::kTiled && tiled_bytes <= tiled_shared_limit) {
    const TiledShape t = tiled_shape(shape);
    const dim3 grid((n + t.rows_per_tile - 1) / t.rows_per_tile, shape.n_head_kv * t.head_groups,
                    splits);
    launch(attention_tiled_kernel, grid, kTiledWarps * kWarp, tiled_bytes, stream, q, rows,
           spec_slots, n, layer, shape, scale, partial);
  } else if (kernel == AttentionKernel::kPrestaged && n <= prestaged_max_rows() &&
             shape.head_dim % 4 == 0 &&
             attention_prestaged_bytes(shape.head_dim) <= prestaged_shared_limit) {
    launch(attention_prestaged_kernel, dim3(n, shape.n_head, splits), kAttnThreads,
           attention_prestaged_bytes(shape.head_dim), stream, q, rows, spec_slots, layer, shape,
           scale, partial, merge);
    merge.single_splits_merged = true;
  } else if (kernel == AttentionKernel::kGrouped) {
    const int per_kv = shape.n_head / shape.n_head_kv;
    const int groups = shape.n_head_kv * ((per_kv + kAttnGroup - 1) / kAttnGroup);
    launch(attention_split_grouped_kernel, dim3(n, groups, splits), kAttnThreads, 0, stream, q,
           rows, spec_slots, layer, shape, scale, partial);
  } else {
    // The per-head kernels merge their splits themselves where counters are given.
    AttentionMerge in_split = merge;
    in_split.split_counters = split_counters;
    const dim3 grid(n, shape.n_head, splits);
    const bool staged = n <= kStagedAttentionMaxRows;
    auto* kernel =
        split_counters != nullptr
            ? (staged ? attention_split_kernel<true, true> : attention_split_kernel<false, true>)
            : (staged ? attention_split_kernel<true, false> : attention_split_kernel<false, false>);
    launch(kernel, grid, kAttnThreads, 0, stream, q, rows, spec_slots, layer, shape, scale, partial,
           in_split);
    if (split_counters != nullptr) return out_q != nullptr;
  }
  launch(attention_combine_kernel, dim3(n, shape.n_head), kAttnThreads, 0, stream, rows, shape,
         partial, merge);
  return out_q != nullptr;
}

// PARSPEC_CUDA_FUSE: "all" (swiglu, rope, norm and q8k), or a comma-separated
// list of swiglu, rope, norm, norm-once (the other way to leave out the norm
// kernels, which wins where both are asked for) and q8k; any other value
// (=none) fuses nothing.
bool fusion_wanted(std::string_view fusion) {
  const char* env = std::getenv("PARSPEC_CUDA_FUSE");
  if (env == nullptr) return false;
  std::string_view list(env);
  if (list == "all") return fusion != "norm-once";
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == fusion) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

// Without PARSPEC_CUDA_FUSE, swiglu and rope for F16/BF16 weights: on an H200
// they made a decode step of an 8B-class F16 model 1.06× as fast, and one of
// Q4_0 weights 0.89× (its one-row fused kernel keeps fewer loads in flight).
bool fused_by_default(WeightKind kind) {
  static const bool unset = std::getenv("PARSPEC_CUDA_FUSE") == nullptr;
  return unset && (kind == WeightKind::kF16 || kind == WeightKind::kBF16);
}

bool fused_rope_wanted(WeightKind kind) {
  static const bool wanted = fusion_wanted("rope");
  return wanted || fused_by_default(kind);
}

bool launch_qkv_rope(const DeviceMatrix& wq, const DeviceMatrix& wk, const DeviceMatrix& wv,
                     const float* x, const int8_t* xq, const float* xd, int n, float* q,
                     const float* bq, const float* bk, const float* bv, const float* angles,
                     const AttentionRow* rows, int layer, HeadShape shape, cudaStream_t stream,
                     const RowNorm& norm, uint32_t* half_split) {
  const int hd = shape.head_dim;
  const bool fits = n > 0 && wk.kind == wq.kind && wv.kind == wq.kind && wk.n_in == wq.n_in &&
                    wv.n_in == wq.n_in && shape.rope_dims == hd && hd % 16 == 0 &&
                    wq.n_out == int64_t{shape.n_head} * hd &&
                    wk.n_out == int64_t{shape.n_head_kv} * hd && wv.n_out == wk.n_out;
  if (!fits || (norm.h != nullptr && !one_row_fusable(wq, n)) || prefill_tiles_take(wq.kind, n))
    return false;
  MatmulGroup g;
  g.count = 3;
  g.w[0] = wq, g.w[1] = wk, g.w[2] = wv;
  g.norm = norm;
  g.half_split = half_split;
  QkvStore st;
  st.bias_q = bq, st.bias_k = bk, st.bias_v = bv;
  st.angles = reinterpret_cast<const float2*>(angles);
  st.rows = rows;
  st.q = q;
  st.layer = layer;
  st.shape = shape;
  const int tiles = weight_row_tiles(g);
  switch (wq.kind) {
    case WeightKind::kF16:
      if (!half_tensor_cores(wq.n_in)) return false;
      launch_half_mma<WeightKind::kF16, HalfEpilogue::kQkv>(g, x, n, stream, tiles, st);
      return true;
    case WeightKind::kBF16:
      if (!half_tensor_cores(wq.n_in)) return false;
      launch_half_mma<WeightKind::kBF16, HalfEpilogue::kQkv>(g, x, n, stream, tiles, st);
      return true;
    case WeightKind::kQ8_0:
    case WeightKind::kQ4_0:
      if (n != 1 || quantized_kernel(1, wq.n_in) != QuantizedKernel::kOneRow) return false;
      launch(wq.kind == WeightKind::kQ8_0 ? matmul_gemv_kernel<WeightKind::kQ8_0, true>
                                          : matmul_gemv_kernel<WeightKind::kQ4_0, true>,
             tiles, kGemvThreads, gemv_shared_bytes(wq.n_in), stream, g, xq, xd, st);
      return true;
    default:
      return false;
  }
}

bool half_split_in_block() {
  static const bool wanted = env_is("PARSPEC_CUDA_HALF_SPLIT", "in-block");
  return wanted;
}

bool stream_split_wanted() {
  return streamed_weight_tiles() == 7 || streamed_weight_tiles() == 9;
}

size_t stream_split_counters() {
  // A launch it takes has fewer tiles than the device has SMs.
  return static_cast<size_t>(std::max(multiprocessors(), 1));
}

size_t stream_split_floats() {
  return stream_split_counters() * kStreamChains * kSplitTileRows * kSplitRows;
}

bool half_split_rows_wanted(int n) {
  // Below, the blocks' own splits hide under their weights' reads (an H100 took
  // 1.06× the time of one row for 16 of an 8B-class F16 model).
  return !half_split_in_block() && n > 2 * 8;
}

bool fused_swiglu_wanted(WeightKind kind) {
  static const bool wanted = fusion_wanted("swiglu");
  return wanted || fused_by_default(kind);
}

bool fused_norm_wanted() {
  static const bool wanted = fusion_wanted("norm");
  return wanted;
}

bool fused_q8k_wanted() {
  static const bool wanted = fusion_wanted("q8k");
  return wanted;
}

bool norm_once_wanted() {
  static const bool wanted = fusion_wanted("norm-once");
  return wanted;
}

bool norm_after_fusable(const DeviceMatrix& w, std::span<const DeviceMatrix* const> next) {
  // The one-row kernels (a grid of whole tiles of one matrix, every block
  // reaching the count) into a row the norm kernel's steps cover.
  if (!takes_quantized_input(w.kind) || quantized_kernel(1, w.n_in) != QuantizedKernel::kOneRow ||
      w.n_out % 32 != 0 || w.n_out > kNormBlock * kWideNormPerThread)
    return false;
  for (const DeviceMatrix* m : next)
    if (m->n_in != w.n_out || !takes_quantized_input(m->kind)) return false;
  return true;
}

bool one_row_fusable(const DeviceMatrix& w, int n) {
  if (n != 1 || w.n_in % 32 != 0 || w.n_in > kNormBlock * kWideNormPerThread) return false;
  if (w.kind == WeightKind::kF16 || w.kind == WeightKind::kBF16) return half_tensor_cores(w.n_in);
  return takes_quantized_input(w.kind) && quantized_kernel(1, w.n_in) == QuantizedKernel::kOneRow;
}

bool launch_gate_up_swiglu(const DeviceMatrix& gate, const DeviceMatrix& up, const float* x,
                           const int8_t* xq, const float* xd, int n, float* gate_out, int8_t* q,
                           float* scales, cudaStream_t stream, const RowNorm& norm,
                           uint32_t* half_split) {
  if (n <= 0 || gate.kind != up.kind || gate.n_in != up.n_in || gate.n_out != up.n_out)
    return false;
  if ((norm.h != nullptr && !one_row_fusable(gate, n)) || prefill_tiles_take(gate.kind, n))
    return false;
  if (q != nullptr && gate.n_out % 32 != 0) return false;
  const int tiles = static_cast<int>((gate.n_out + kMmaRows / 2 - 1) / (kMmaRows / 2));
  MatmulGroup g;
  g.count = 2;
  g.w[0] = gate, g.w[1] = up;
  g.y[0] = gate_out;
  g.norm = norm;
  g.half_split = half_split;
  switch (gate.kind) {
    case WeightKind::kF16:
    case WeightKind::kBF16: {
      // The output stays in f32: a next matmul of these types reads it so.
      if (q != nullptr || !half_tensor_cores(gate.n_in)) return false;
      if (gate.kind == WeightKind::kF16)
        launch_half_mma<WeightKind::kF16, HalfEpilogue::kGated>(g, x, n, stream, tiles);
      else
        launch_half_mma<WeightKind::kBF16, HalfEpilogue::kGated>(g, x, n, stream, tiles);
      return true;
    }
    case WeightKind::kQ8_0:
    case WeightKind::kQ4_0: {
      if (n != 1 || quantized_kernel(1, gate.n_in) != QuantizedKernel::kOneRow) return false;
      const int blocks = static_cast<int>((gate.n_out + kGatedOutputs - 1) / kGatedOutputs);
      launch(gate.kind == WeightKind::kQ8_0 ? matmul_gemv_gated_kernel<WeightKind::kQ8_0>
                                            : matmul_gemv_gated_kernel<WeightKind::kQ4_0>,
             blocks, kGatedThreads, gemv_shared_bytes(gate.n_in), stream, gate, up, xq, xd,
             gate_out, q, scales, norm);
      return true;
    }
    default:
      return false;
  }
}

bool launch_swiglu(float* gate, const float* up, int n, int dim, int8_t* q, float* scales,
                   cudaStream_t stream, const Q8KActivations& k8) {
  if (n <= 0) return false;
  const bool to_q8k = k8.q != nullptr && dim % kSuperBlock == 0;
  launch(swiglu_kernel, dim3(n, blocks_for(dim, kNormThreads)), kNormThreads, 0, stream, gate, up,
         dim, q, scales, block_major_activations(n, dim), to_q8k ? k8 : Q8KActivations{});
  return to_q8k;
}

void launch_add(float* y, const float* x, int64_t count, cudaStream_t stream) {
  if (count > 0) launch(add_kernel, blocks_for(count, 256), 256, 0, stream, y, x, count);
}

void launch_gather_rows(const float* src, const int32_t* index, int n, int dim, float* dst,
                        cudaStream_t stream) {
  if (n > 0) launch(gather_rows_kernel, n, 256, 0, stream, src, index, dim, dst);
}

void launch_move_kv_rows(float* k, float* v, int n_layers, int capacity, int kv_dim,
                         const int32_t* from, const int32_t* to, int n, float* staging,
                         cudaStream_t stream) {
  if (n <= 0 || n_layers <= 0) return;
  const dim3 grid(n, n_layers);
  launch(move_kv_kernel, grid, 128, 0, stream, k, v, capacity, kv_dim, from, staging, true);
  launch(move_kv_kernel, grid, 128, 0, stream, k, v, capacity, kv_dim, to, staging, false);
}

void launch_argmax(const float* x, int n, int dim, int32_t* index, cudaStream_t stream) {
  if (n > 0) launch(argmax_kernel, n, kNormThreads, 0, stream, x, dim, index);
}

}  // namespace parspec::cuda
