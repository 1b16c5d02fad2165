#pragma once
// The CUDA backend's kernels, behind plain launch functions (kernels.cu) so
// that host code compiles without nvcc. Every launch goes on `stream`.
//
// Batch invariance (docs/design.md, "GPU numerics"): each output value is
// computed by one fixed sequence of correctly rounded operations that depends
// only on its own inputs, never on the number of rows in the launch or on
// other rows: a matmul output is reduced by one warp, each lane over fixed
// blocks of K, then by a fixed butterfly; attention for one (row, head) splits
// the row's key list at fixed chunk boundaries and merges the splits in order. The kernels are
// compiled with -fmad=false and write every fused multiply-add explicitly.
#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <string_view>

#include "cuda/attention_kernel.h"

namespace parspec::cuda {

// Whether environment variable `name` is set to `value`: the backend's
// switches between kernels (PARSPEC_CUDA_MATMUL=warp and the like).
bool env_is(const char* name, std::string_view value);

// Reads PARSPEC_CUDA_PDL once per process: unless it is "0", kernels are
// launched as programmatic dependent launches where the device has them
// (compute capability 9.0 and later), each overlapping the end of the one
// before it; the results are the same bits either way. Also raises, on the
// current device, the shared-memory limit of the kernels that need more than
// the default. Before any graph capture.
void prepare_launches();

enum class WeightKind : int { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_K, kQ6_K };

// A weight matrix in device memory: n_out rows of n_in elements. F32/F16/BF16:
// `q` holds the rows as stored. Q8_0: `q` holds n_out × n_in int8 and `scales`
// n_out × n_in/32 halves (one per block of 32). Q4_0: `q` holds each block's
// 16 bytes (element j in the low nibble of byte j, element j+16 in the high
// one, both offset by 8), `scales` as Q8_0. Q4_K/Q6_K: `q` holds each row's
// super-blocks of 256 as the file has them (Q4_K: 144 bytes), Q6_K's padded
// to kQ6KStride bytes so that every field is aligned; `scales` is unused.
struct DeviceMatrix {
  WeightKind kind = WeightKind::kF32;
  int64_t n_in = 0, n_out = 0;
  const void* q = nullptr;
  const void* scales = nullptr;
};

inline bool takes_quantized_input(WeightKind kind) {
  return kind == WeightKind::kQ8_0 || kind == WeightKind::kQ4_0;
}
inline bool takes_q8k_input(WeightKind kind) {
  return kind == WeightKind::kQ4_K || kind == WeightKind::kQ6_K;
}
constexpr int kSuperBlock = 256;                  // values per K-quant super-block
constexpr int kQ4KBytes = 144, kQ6KStride = 224;  // device bytes per super-block

// Activations for K-quant weights, as the CPU quantizes them (Q8_K): per row,
// blocks of 256 int8 values with a float scale and the sums of each 16.
struct Q8KActivations {
  int8_t* q = nullptr;
  float* d = nullptr;
  int16_t* bsums = nullptr;
};

// One row's attention: its cache (rows of layers [layer_first, ...), each
// layer `capacity` slots of kv_dim floats), the committed prefix (slots
// 0..n_committed-1) and then `spec_count` slots listed at spec_slots[spec_offset..]
// (its speculative ancestors, oldest first, then itself). Its own k and v go
// to `write_slot`.
struct AttentionRow {
  float* k = nullptr;
  float* v = nullptr;
  int32_t layer_first = 0;
  int32_t capacity = 0;
  int32_t n_committed = 0;
  int32_t spec_offset = 0;
  int32_t spec_count = 0;
  int32_t write_slot = 0;
};

struct HeadShape {
  int n_head = 0, n_head_kv = 0, head_dim = 0, rope_dims = 0;
  bool neox = false;  // rotate (x[i], x[i + d/2]) instead of (x[2i], x[2i+1])
};

// hidden[i] = row tokens[i] of `embedding`, dequantized.
void launch_embed(const DeviceMatrix& embedding, const int32_t* tokens, int n, float* hidden,
                  cudaStream_t stream);
// Per row of `dim` floats: h += residual (when not null), out = h /
// sqrt(mean(h²) + eps) · w, and, when q is not null, out quantized to Q8_0 into
// q and scales exactly as launch_quantize_q8 would. With k8.q set, out also
// quantized to Q8_K into k8 exactly as launch_quantize_q8k would, where the
// kernel can (dim a multiple of 256, up to 8192): returns whether it did.
bool launch_add_rmsnorm(float* h, const float* residual, const float* w, int n, int dim, float eps,
                        float* out, int8_t* q, float* scales, cudaStream_t stream,
                        const Q8KActivations& k8 = {});
// Rows of `dim` floats to Q8_0 blocks: int8 values and the block's scale,
// bit for bit as the CPU quantizes its activations.
void launch_quantize_q8(const float* x, int n, int dim, int8_t* q, float* scales,
                        cudaStream_t stream);
// Rows of `dim` floats (a multiple of 256) to Q8_K, bit for bit as the CPU's
// quantize_row_q8_K.
void launch_quantize_q8k(const float* x, int n, int dim, const Q8KActivations& out,
                         cudaStream_t stream);
// y (n × n_out) = x (n × n_in) · Wᵀ: from x for F32/F16/BF16 weights, from
// the quantized x (xq, xd) for Q8_0/Q4_0, from xk for Q4_K/Q6_K.
void launch_matmul(const DeviceMatrix& w, const float* x, const int8_t* xq, const float* xd,
                   const Q8KActivations& xk, int n, float* y, cudaStream_t stream);
// PARSPEC_CUDA_FUSE=norm: the input of a one-row matmul normalized by the
// matmul's own blocks, h / sqrt(mean(h²) + eps) · weight quantized to Q8_0:
// the values launch_add_rmsnorm (without a residual) gives its next matmul.
struct RowNorm {
  const float* h = nullptr;  // null: the input comes as xq and xd
  const float* weight = nullptr;
  float eps = 0.0f;
};

// PARSPEC_CUDA_FUSE=norm-once: the residual matmul of one row that adds into
// h (accumulate) normalizes h once all of its blocks are done: the last block
// to finish takes add_rmsnorm_wide_kernel's steps (without a residual) and
// writes the row quantized to Q8_0 for the matmuls after it, as that kernel
// would, instead of a norm kernel of its own.
struct NormAfter {
  const float* weight = nullptr;  // null: no norm after
  float eps = 0.0f;
  int8_t* q = nullptr;
  float* scales = nullptr;
  int32_t* counter = nullptr;  // zero before the launch; zero again after it
};

// Up to three matrices of one kind and width applied to the same input (q, k
// and v; gate and up) in one launch: y[i] = x · w[i]ᵀ, each output computed
// exactly as launch_matmul computes it. `norm` and `accumulate` (y[i] +=
// x · w[i]ᵀ, the sum launch_add would give) only where one_row_fusable says,
// `norm_after` only where norm_after_fusable says.
struct MatmulGroup {
  static constexpr int kMax = 3;
  DeviceMatrix w[kMax];
  float* y[kMax] = {};
  int count = 0;
  RowNorm norm;
  bool accumulate = false;
  NormAfter norm_after;
  // F16/BF16 weights: room for n × n_in words (or null), where a launch of
  // many rows splits its input into the tensor cores' operand halves once
  // instead of once in every block (half_split_rows_wanted).
  uint32_t* half_split = nullptr;
  // Q8_0/Q4_0 weights, PARSPEC_CUDA_MMA=stream-split: room for the chains' sums
  // of a launch of up to 8 rows (stream_split_floats) and a counter for each
  // tile of 64 rows (stream_split_counters: zeros before a launch, zeros again
  // after it), or null.
  float* chain_sums = nullptr;
  int32_t* chain_counters = nullptr;
};
// PARSPEC_CUDA_MMA=stream-split: whether launches of up to 8 rows into
// Q8_0/Q4_0 matrices of few rows split each tile's chains over blocks of the
// grid, and the room any such launch takes.
bool stream_split_wanted();
size_t stream_split_floats();
size_t stream_split_counters();
// Whether a launch of n rows into F16/BF16 weights uses MatmulGroup::half_split.
bool half_split_rows_wanted(int n);
// PARSPEC_CUDA_HALF_SPLIT=in-block: every lane of the F16/BF16 tensor-core
// kernels splits its own row's values in every block, whatever the rows.
bool half_split_in_block();
// PARSPEC_CUDA_FUSE=norm (or =all): whether passes fuse RMSNorm into the
// matmuls after it and the residual adds into the matmuls before it.
bool fused_norm_wanted();
// PARSPEC_CUDA_FUSE=q8k (or =all): whether the norm and SwiGLU kernels quantize
// their output to Q8_K for Q4_K/Q6_K weights after them, instead of a launch
// of its own before each of those matmuls.
bool fused_q8k_wanted();
// Whether n rows of input to weights w go through the one-row kernels, which
// take a RowNorm input and accumulate into their outputs.
bool one_row_fusable(const DeviceMatrix& w, int n);
// PARSPEC_CUDA_FUSE=norm-once: whether passes have the residual matmuls of
// one row normalize h for the matmuls after them (NormAfter).
bool norm_once_wanted();
// Whether one row into w, accumulated into h of w.n_out values, can be
// normalized by w's own matmul (NormAfter) for the matmuls `next`, which then
// take the quantized row.
bool norm_after_fusable(const DeviceMatrix& w, std::span<const DeviceMatrix* const> next);
void launch_matmul_group(const MatmulGroup& group, const float* x, const int8_t* xq,
                         const float* xd, const Q8KActivations& xk, int n, cudaStream_t stream);

// angles[2 (i · n_pairs + p) + {0, 1}] = the cosine and sine of positions[i] ·
// inv_freq[p] (computed in double, rounded to float): the rotations of a
// pass's rows, computed once for all its layers and heads.
void launch_rope_angles(const int32_t* positions, const float* inv_freq, int n, int n_pairs,
                        float* angles, cudaStream_t stream);
// Adds the biases (null: none) to q, k, v, rotates q and k by `angles` (from
// launch_rope_angles), and writes each row's k and v of `layer` to its write_slot.
void launch_bias_rope_store(float* q, float* k, float* v, const float* bq, const float* bk,
                            const float* bv, const float* angles, const AttentionRow* rows,
                            int layer, int n, HeadShape shape, cudaStream_t stream);
// out (n × n_head·head_dim): each row's heads attend over the row's keys, each
// (row, head) in kAttentionSplits blocks whose results go through `partial`
// (attention_partial_floats(n, n_head, head_dim) floats). `kernel`: which of
// the attention kernels runs (attention_kernel.h; the same bits from each). The
// tiled kernel runs where prepare_attention has given it the shared memory it
// needs, the per-head kernel elsewhere.
// With out_q given, out is also quantized to Q8_0 into out_q and out_scales, as
// launch_quantize_q8 would: returns whether it was (head_dim a multiple of 32).
constexpr int kAttentionSplits = 16;
inline int64_t attention_partial_floats(int64_t n, int n_head, int head_dim) {
  return n * n_head * kAttentionSplits * (head_dim + 2);
}
// split_counters (n × n_head int32, zeros before the launch and after it, or
// null): the per-head kernel's last split of each (row, head) merges the
// splits itself instead of a second kernel (the same bits), when
// fused_attention_merge_wanted() says so (PARSPEC_CUDA_ATTENTION_MERGE=in-split).
// max_keys (0: unknown, as in a graph replayed with other rows): the most keys
// any row attends to, so that no split block without keys is launched (the
// blocks that are would return at once; the bits are the same).
bool launch_attention(const float* q, const AttentionRow* rows, const int32_t* spec_slots, int n,
                      int layer, HeadShape shape, float scale, AttentionKernel kernel,
                      float* partial, float* out, int8_t* out_q, float* out_scales,
                      int32_t* split_counters, cudaStream_t stream, int max_keys = 0);
bool fused_attention_merge_wanted();
// Sets up `kernel` on the current device (the tiled kernel's shared memory);
// before any graph capture, as it changes a kernel's attributes.
void prepare_attention(AttentionKernel kernel);
// gate = silu(gate) · up over n rows of `dim`, and, when q is not null, the
// result quantized to Q8_0 (dim a multiple of 32). With k8.q set, also to
// Q8_K as launch_quantize_q8k would, where dim is a multiple of 256: returns
// whether it did.
bool launch_swiglu(float* gate, const float* up, int n, int dim, int8_t* q, float* scales,
                   cudaStream_t stream, const Q8KActivations& k8 = {});
// PARSPEC_CUDA_FUSE=rope (or =all): q, k and v = x · w[i]ᵀ in one launch
// that also does launch_bias_rope_store's work with the same steps (biases
// added, q and k rotated by `angles`, q into `q`, k and v to each row's cache
// slot of `layer`), for F16/BF16 weights and one row of Q8_0/Q4_0, where
// every dimension of a head is rotated. Elsewhere it launches nothing and
// returns false. Asked for by default for F16/BF16 weights (fused_rope_wanted).
bool fused_rope_wanted(WeightKind kind);
// With norm.h set (one_row_fusable weights only) the input is normalized as
// RowNorm says instead of read from xq and xd; half_split as MatmulGroup's.
bool launch_qkv_rope(const DeviceMatrix& wq, const DeviceMatrix& wk, const DeviceMatrix& wv,
                     const float* x, const int8_t* xq, const float* xd, int n, float* q,
                     const float* bq, const float* bk, const float* bv, const float* angles,
                     const AttentionRow* rows, int layer, HeadShape shape, cudaStream_t stream,
                     const RowNorm& norm = {}, uint32_t* half_split = nullptr);
// PARSPEC_CUDA_FUSE=swiglu (or =all): gate and up in one launch that writes only
// gate_out = silu(x · gateᵀ) · (x · upᵀ), the values launch_matmul_group and
// launch_swiglu give, and with q not null those quantized to Q8_0 (q and
// scales must not overlap xq and xd). Where no fused kernel takes these
// weights and rows it launches nothing and returns false. Asked for by default
// for F16/BF16 weights.
bool fused_swiglu_wanted(WeightKind kind);
bool launch_gate_up_swiglu(const DeviceMatrix& gate, const DeviceMatrix& up, const float* x,
                           const int8_t* xq, const float* xd, int n, float* gate_out, int8_t* q,
                           float* scales, cudaStream_t stream, const RowNorm& norm = {},
                           uint32_t* half_split = nullptr);
// y += x.
void launch_add(float* y, const float* x, int64_t count, cudaStream_t stream);
// dst[i] = src[index[i]], rows of `dim` floats.
void launch_gather_rows(const float* src, const int32_t* index, int n, int dim, float* dst,
                        cudaStream_t stream);
// In every one of n_layers layers of a cache: row from[i] → row to[i], all
// reads first (`staging`: 2 · n · n_layers · kv_dim floats).
void launch_move_kv_rows(float* k, float* v, int n_layers, int capacity, int kv_dim,
                         const int32_t* from, const int32_t* to, int n, float* staging,
                         cudaStream_t stream);
// index[i] = the first largest of row i's `dim` values (n rows).
void launch_argmax(const float* x, int n, int dim, int32_t* index, cudaStream_t stream);

}  // namespace parspec::cuda
