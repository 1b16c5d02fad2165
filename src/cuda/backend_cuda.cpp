// The CUDA executor: a model's weights uploaded once, KV caches in device
// memory (a KvRowStore per KvCache), and the forward pass as the CPU's, step
// for step, on the kernels of kernels.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <map>
#include <sstream>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "cuda/backend.h"
#include "cuda/kernels.h"
#include "kernels/quant.h"
#include "kernels/repack.h"

namespace parspec::cuda {

namespace {

void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    cudaGetLastError();  // clears a sticky launch error where it can be cleared
    fail("CUDA error in ", what, ": ", cudaGetErrorString(status));
  }
}

std::string gib(uint64_t bytes) {
  std::ostringstream os;
  os.precision(2);
  os << std::fixed << static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return os.str();
}

// A stream on one device, shared by an executor and the caches it made, so
// that it outlives whichever of them goes last.
struct DeviceContext {
  int device = 0;
  int priority = 0;  // of every stream below (the runtime's: lower goes first)
  cudaStream_t stream = nullptr;
  // Streams beside `stream` for work that may overlap (a layer group's
  // attention blocks): `fork` recorded on `stream` starts them, each joins
  // back through its event in `joins`. Made when first needed.
  std::vector<cudaStream_t> side;
  std::vector<cudaEvent_t> joins;
  cudaEvent_t fork = nullptr;

  DeviceContext(int d, StreamPriority first) : device(d) {
    cuda_check(cudaSetDevice(device), "cudaSetDevice");
    if (first == StreamPriority::kFirst && !env_is("PARSPEC_CUDA_DRAFT_PRIORITY", "normal")) {
      int least = 0, greatest = 0;
      cuda_check(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                 "cudaDeviceGetStreamPriorityRange");
      priority = greatest;
    }
    stream = new_stream();
  }
  cudaStream_t new_stream() const {
    cudaStream_t s = nullptr;
    cuda_check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority),
               "cudaStreamCreate");
    return s;
  }
  ~DeviceContext() {
    if (stream != nullptr) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    for (cudaStream_t s : side) cudaStreamDestroy(s);
    for (cudaEvent_t e : joins) cudaEventDestroy(e);
    if (fork != nullptr) cudaEventDestroy(fork);
  }
  void ensure_side_streams(size_t count) {
    if (fork == nullptr)
      cuda_check(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), "cudaEventCreate");
    while (side.size() < count) {
      side.push_back(new_stream());
      cudaEvent_t e = nullptr;
      cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      joins.push_back(e);
    }
  }
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  void sync(const char* what) const { cuda_check(cudaStreamSynchronize(stream), what); }
};

// Device memory with one owner; reserve() grows it (the contents are lost).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }

  void* get() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

  // At least `bytes`; `what` names the memory in an out-of-memory error.
  // Returns whether the memory was allocated anew.
  bool reserve(size_t bytes, const char* what) {
    if (bytes <= bytes_) return false;
    if (data_ != nullptr) {
      cudaFree(data_);
      data_ = nullptr;
      bytes_ = 0;
    }
    const cudaError_t status = cudaMalloc(&data_, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      data_ = nullptr;
      fail("out of GPU memory: ", what, " needs ", gib(bytes), ", ", gib(free_bytes), " of ",
           gib(total), " are free (a smaller -c/--ctx-size or a smaller model may fit)");
    }
    cuda_check(status, what);
    bytes_ = bytes;
    return true;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

template <class T>
T* reserve(DeviceBuffer& buffer, size_t count, const char* what) {
  buffer.reserve(std::max<size_t>(count, 1) * sizeof(T), what);
  return buffer.as<T>();
}

template <class T>
void upload_to(DeviceBuffer& buffer, const std::vector<T>& host, const char* what,
               cudaStream_t stream) {
  reserve<T>(buffer, host.size(), what);
  if (!host.empty())
    cuda_check(cudaMemcpyAsync(buffer.get(), host.data(), host.size() * sizeof(T),
                               cudaMemcpyHostToDevice, stream),
               what);
}

// A KvCache's rows in device memory: layers [layer_first, layer_last), each
// `capacity` slots of kv_dim floats, keys and values apart.
class DeviceKvStore final : public KvRowStore {
 public:
  DeviceKvStore(std::shared_ptr<DeviceContext> context, const Model* model, const KvCache& kv)
      : context_(std::move(context)),
        model_(model),
        n_layers_(kv.layer_last() - kv.layer_first()),
        capacity_(kv.capacity()),
        kv_dim_(kv.kv_dim()) {
    const size_t floats = static_cast<size_t>(n_layers_) * capacity_ * kv_dim_;
    reserve<float>(k_, floats, "the KV cache");
    reserve<float>(v_, floats, "the KV cache");
  }

  bool serves(const DeviceContext* context, const Model* model) const {
    return context_.get() == context && model_ == model;
  }
  float* k() const { return k_.as<float>(); }
  float* v() const { return v_.as<float>(); }

  void move_rows(std::span<const int32_t> from, std::span<const int32_t> to) override {
    const int n = static_cast<int>(from.size());
    if (n == 0 || n_layers_ == 0) return;
    cuda_check(cudaSetDevice(context_->device), "cudaSetDevice");
    std::vector<int32_t> slots(from.begin(), from.end());
    slots.insert(slots.end(), to.begin(), to.end());
    upload_to(slots_, slots, "KV rows", context_->stream);
    float* staging = reserve<float>(staging_, 2 * static_cast<size_t>(n) * n_layers_ * kv_dim_,
                                    "moving KV rows");
    launch_move_kv_rows(k(), v(), n_layers_, capacity_, kv_dim_, slots_.as<int32_t>(),
                        slots_.as<int32_t>() + n, n, staging, context_->stream);
    cuda_check(cudaGetLastError(), "moving KV rows");
  }

 private:
  std::shared_ptr<DeviceContext> context_;
  const Model* model_;
  int n_layers_, capacity_, kv_dim_;
  DeviceBuffer k_, v_, slots_, staging_;
};

struct DeviceLayer {
  DeviceMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  const float *attn_norm = nullptr, *ffn_norm = nullptr;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;
};

struct GraphState;
struct GraphStateDeleter {
  void operator()(GraphState* g) const;
};

// A model's weights on the device, and the graphs of its passes.
struct DeviceModel {
  std::unique_ptr<GraphState, GraphStateDeleter> graphs;
  std::vector<DeviceBuffer> buffers;  // owns everything below
  DeviceMatrix embedding, output;
  bool half_weights = false;  // F16/BF16 layer matrices: passes of many rows split their input
  const float* output_norm = nullptr;
  const float* inv_freq = nullptr;
  std::vector<DeviceLayer> layers;
  uint64_t bytes = 0;
  // The executor's stream: the copies go there, in order with its kernels
  // (the legacy stream of cudaMemcpy does not order a non-blocking stream).
  cudaStream_t stream = nullptr;

  template <class T>
  const T* upload(const T* data, size_t count, const char* what) {
    DeviceBuffer& b = buffers.emplace_back();
    reserve<T>(b, count, what);
    // From pageable memory the source is staged before the call returns, so
    // the temporaries of upload(WeightMatrix) may go at once.
    cuda_check(cudaMemcpyAsync(b.get(), data, count * sizeof(T), cudaMemcpyHostToDevice, stream),
               what);
    bytes += count * sizeof(T);
    return b.as<T>();
  }
  const float* upload(const std::vector<float>& v, const char* what) {
    return v.empty() ? nullptr : upload(v.data(), v.size(), what);
  }

  DeviceMatrix upload(const WeightMatrix& w, const std::string& name) {
    DeviceMatrix m;
    m.n_in = w.n_in;
    m.n_out = w.n_out;
    static constexpr std::pair<DType, WeightKind> kKinds[] = {
        {DType::F32, WeightKind::kF32},   {DType::F16, WeightKind::kF16},
        {DType::BF16, WeightKind::kBF16}, {DType::Q8_0, WeightKind::kQ8_0},
        {DType::Q4_0, WeightKind::kQ4_0}, {DType::Q4_K, WeightKind::kQ4_K},
        {DType::Q6_K, WeightKind::kQ6_K}};
    const auto* kind = std::find_if(std::begin(kKinds), std::end(kKinds),
                                    [&](const auto& k) { return k.first == w.type; });
    check(kind != std::end(kKinds), name, ": weights of type ", type_info(w.type).name,
          " are not supported by the CUDA backend (it runs F32, F16, BF16, Q8_0, Q4_0, Q4_K and "
          "Q6_K; convert with `parspec quantize`, or run with --device cpu)");
    m.kind = kind->second;
    const bool quantized = takes_quantized_input(m.kind), k_quant = takes_q8k_input(m.kind);
    const int64_t unit = k_quant ? kSuperBlock : quantized ? kQK : 8;
    check(w.n_in % unit == 0, name, ": rows of ", w.n_in,
          " elements are not supported by the CUDA backend (a multiple of ", unit, " is)");
    const size_t rb = row_bytes(w.type, w.n_in);
    std::vector<uint8_t> unpacked(w.repacked ? rb : 0);
    auto row = [&](int64_t r) -> const uint8_t* {
      if (!w.repacked) return w.data + rb * r;
      repack::unpack_row(w.type, w.n_in, w.n_out, w.data, r, unpacked.data());
      return unpacked.data();
    };
    const size_t n_out = static_cast<size_t>(w.n_out);
    if (k_quant) {  // the file's super-blocks, Q6_K's in aligned slots
      const size_t n_super = static_cast<size_t>(w.n_in / kSuperBlock);
      const size_t block_bytes = type_info(w.type).block_bytes;
      const size_t stride = m.kind == WeightKind::kQ4_K ? kQ4KBytes : kQ6KStride;
      std::vector<uint8_t> blocks(n_out * n_super * stride, 0);
      for (int64_t r = 0; r < w.n_out; ++r) {
        const uint8_t* src = row(r);
        for (size_t b = 0; b < n_super; ++b)
          std::memcpy(&blocks[(r * n_super + b) * stride], src + b * block_bytes, block_bytes);
      }
      m.q = upload(blocks.data(), blocks.size(), "model weights");
      return m;
    }
    if (!quantized) {  // as the file has them (F32/F16/BF16 are never repacked)
      check(!w.repacked, name, ": repacked ", type_info(w.type).name, " weights");
      m.q = upload(w.data, rb * n_out, "model weights");
      return m;
    }
    // Split into values and scales, so that a lane reads a block's values
    // with aligned 16-byte loads.
    const int64_t nb = w.n_in / kQK;
    const size_t value_bytes = m.kind == WeightKind::kQ8_0 ? kQK : kQK / 2;
    std::vector<uint8_t> values(n_out * nb * value_bytes);
    std::vector<uint16_t> scales(n_out * nb);
    for (int64_t r = 0; r < w.n_out; ++r) {
      const uint8_t* src = row(r);
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* dst = &values[(r * nb + b) * value_bytes];
        if (m.kind == WeightKind::kQ8_0) {
          const auto* block = reinterpret_cast<const BlockQ8_0*>(src) + b;
          scales[r * nb + b] = block->d;
          std::memcpy(dst, block->qs, kQK);
        } else {
          const auto* block = reinterpret_cast<const BlockQ4_0*>(src) + b;
          scales[r * nb + b] = block->d;
          std::memcpy(dst, block->qs, kQK / 2);
        }
      }
    }
    m.q = upload(values.data(), values.size(), "model weights");
    m.scales = upload(scales.data(), scales.size(), "model weights");
    return m;
  }
};

// What the kernels do not compute: the traits of the families beyond llama
// and qwen2 (model_config.h). Empty when the model has none.
std::string unsupported_trait(const Model& model) {
  const ModelConfig& c = model.config();
  if (c.moe.enabled()) return "mixture-of-experts FFNs";
  if (c.arch != "llama" && c.arch != "qwen2") return "the " + c.arch + " architecture";
  if (c.qk_norm) return "q/k norms";
  if (c.post_norms) return "post-norms";
  if (c.fused_qkv || c.fused_gate_up) return "fused projections";
  if (c.embedding_scale != 1.0f) return "scaled embeddings";
  if (c.activation != FfnActivation::kSilu) return "an activation other than SwiGLU";
  if (c.attn_logit_softcap != 0.0f || c.final_logit_softcap != 0.0f) return "logit soft-capping";
  if (!c.layer_sliding.empty()) return "sliding-window attention";
  if (!c.rope_factors_long.empty() || model.rope_global().mscale != 1.0f) return "LongRoPE scaling";
  return "";
}

std::unique_ptr<DeviceModel> upload_model(const Model& model, cudaStream_t stream) {
  const ModelConfig& c = model.config();
  const std::string trait = unsupported_trait(model);
  check(trait.empty(), model.gguf().path(), ": the CUDA backend runs llama and qwen2 models; this ",
        "one has ", trait, ", which it does not compute (run it with --device cpu)");
  check(c.head_dim <= 256 && c.head_dim % 2 == 0, model.gguf().path(), ": head dimension ",
        c.head_dim, " is not supported by the CUDA backend (an even number up to 256 is)");
  check(c.n_head % c.n_head_kv == 0, model.gguf().path(), ": ", c.n_head,
        " heads do not divide into ", c.n_head_kv, " KV heads");
  auto dm = std::make_unique<DeviceModel>();
  dm->stream = stream;
  dm->embedding = dm->upload(model.token_embedding(), "token_embd.weight");
  dm->output =
      c.tied_embeddings ? dm->embedding : dm->upload(model.output_matrix(), "output.weight");
  dm->output_norm = dm->upload(model.output_norm(), "output_norm.weight");
  dm->inv_freq = dm->upload(model.rope_global().inv_freq, "rope frequencies");
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights& w = model.layer(l);
    const std::string p = "blk." + std::to_string(l) + ".";
    DeviceLayer d;
    d.wq = dm->upload(w.wq, p + "attn_q.weight");
    d.wk = dm->upload(w.wk, p + "attn_k.weight");
    d.wv = dm->upload(w.wv, p + "attn_v.weight");
    d.wo = dm->upload(w.wo, p + "attn_output.weight");
    d.w_gate = dm->upload(w.w_gate, p + "ffn_gate.weight");
    d.w_up = dm->upload(w.w_up, p + "ffn_up.weight");
    d.w_down = dm->upload(w.w_down, p + "ffn_down.weight");
    d.attn_norm = dm->upload(w.attn_norm, "norm weights");
    d.ffn_norm = dm->upload(w.ffn_norm, "norm weights");
    d.bq = dm->upload(w.bq, "biases");
    d.bk = dm->upload(w.bk, "biases");
    d.bv = dm->upload(w.bv, "biases");
    for (const DeviceMatrix* m : {&d.wq, &d.wk, &d.wv, &d.wo, &d.w_gate, &d.w_up, &d.w_down})
      dm->half_weights |= m->kind == WeightKind::kF16 || m->kind == WeightKind::kBF16;
    dm->layers.push_back(d);
  }
  return dm;
}

// Rows of one pass, as the kernels take them.
struct RowPlan {
  std::vector<int32_t> tokens, positions;
  std::vector<AttentionRow> attention;
  std::vector<int32_t> spec_slots;

  // Entries of `batch`, cells first_cell.. of `kv` (whose rows are in `store`).
  void add(const Batch& batch, const KvCache& kv, const DeviceKvStore& store, int32_t first_cell) {
    std::vector<int32_t> ancestors;
    for (size_t i = 0; i < batch.size(); ++i) {
      const int32_t cell = first_cell + static_cast<int32_t>(i);
      tokens.push_back(batch.tokens[i]);
      positions.push_back(batch.positions[i]);
      AttentionRow r;
      r.k = store.k();
      r.v = store.v();
      r.layer_first = kv.layer_first();
      r.capacity = kv.capacity();
      r.n_committed = kv.n_committed();
      r.spec_offset = static_cast<int32_t>(spec_slots.size());
      kv.ancestors(cell, ancestors);
      for (int32_t a : ancestors) spec_slots.push_back(kv.spec_slot(a));
      spec_slots.push_back(kv.spec_slot(cell));
      r.spec_count = static_cast<int32_t>(spec_slots.size()) - r.spec_offset;
      r.write_slot = kv.spec_slot(cell);
      attention.push_back(r);
    }
  }
  int size() const { return static_cast<int>(tokens.size()); }
};

void check_batch(const Batch& b, const ModelConfig& c, const char* what) {
  const size_t n = b.size();
  check(b.positions.size() == n && b.parents.size() == n && b.want_logits.size() == n, what,
        ": batch arrays differ in length");
  check(b.input_embeddings.empty() || b.input_embeddings.size() == n, what,
        ": input_embeddings must be empty or one per batch entry");
  for (int32_t t : b.tokens)
    check(t >= 0 && t < c.n_vocab, "token id ", t, " is out of range (vocabulary has ", c.n_vocab,
          " tokens)");
}

void check_logits(const std::vector<float>& logits, size_t n_vocab, const Model& model) {
  for (size_t r = 0; r * n_vocab < logits.size(); ++r) {
    const float* row = logits.data() + r * n_vocab;
    if (!std::isnan(row[0])) continue;
    bool all_nan = true;
    for (size_t i = 1; i < n_vocab && all_nan; ++i) all_nan = std::isnan(row[i]);
    check(!all_nan, model.gguf().path(), ": the model computed NaN for all ", n_vocab,
          " logits (its weights hold NaN/Inf or its activations overflow)");
  }
}

// Device pointers to one pass's per-row inputs.
struct PassInputs {
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const AttentionRow* rows = nullptr;
  const int32_t* spec_slots = nullptr;
  const int32_t* wanted = nullptr;
  const float* rope_angles = nullptr;  // the rows' rotations, once computed for the pass
  // The most keys a row attends to, so that attention launches no split
  // without keys; 0 where it changes from one replay to the next (graphs).
  int max_keys = 0;
};

// The norm that comes after a residual matmul, and the matrices it feeds
// (PARSPEC_CUDA_FUSE=norm-once lets the matmul do it).
struct NextNorm {
  const float* weight = nullptr;  // null: none that the matmul may do
  float eps = 0.0f;
  std::array<const DeviceMatrix*, 3> matrices{};  // the first `count`
  int count = 0;
};

// A pass's activations, reserved for a number of rows before its kernels are
// queued (never during a pass: a graph captures the addresses).
struct Workspace {
  DeviceBuffer hidden, xn, q, k, v, att, att_partial, o, gate, up, xq, xd, xk_q, xk_d, xk_bsums,
      selected, out_norm, logits, rope_angles;
  // Per (row, head): how many of its attention splits have finished, where the
  // splits merge themselves (fused_attention_merge_wanted); zeros between passes.
  DeviceBuffer att_split_counters;
  // The blocks of a residual matmul that have finished, where its last block
  // normalizes h (NormAfter); zero between launches.
  DeviceBuffer norm_counter;
  // PARSPEC_CUDA_MMA=stream-split: the chains' sums of a split launch, and its
  // tiles' counters (zeros between launches).
  DeviceBuffer chain_sums, chain_counters;
  // The norm whose output (h normalized and quantized into xq, xd) the last
  // residual matmul of this pass left for the matmuls after it; null if none.
  const float* normalized_ahead = nullptr;
  cudaStream_t stream = nullptr;  // where the kernels on this workspace go
  // F16/BF16 models: room for the inputs of passes of many rows split into the
  // tensor cores' operand halves (MatmulGroup::half_split), for half_split_rows rows.
  bool half_weights = false;
  DeviceBuffer half_split;
  int half_split_rows = 0;

  // The activations whose Q8_K form the kernel that wrote them left in xk()
  // (PARSPEC_CUDA_FUSE=q8k), for the next matmul_group alone: null if none.
  const float* q8k_written_for = nullptr;

  // Where n rows of input may be split (null: the matmul's blocks split it).
  uint32_t* half_split_for(int n) {
    return half_split_rows_wanted(n) && n <= half_split_rows ? half_split.as<uint32_t>() : nullptr;
  }

  void reserve_rows(const ModelConfig& c, int rows) {
    const size_t n = static_cast<size_t>(std::max(rows, 1));
    const size_t widest = std::max({c.n_embd, c.q_dim(), c.n_ff});
    reserve<float>(hidden, n * c.n_embd, "activations");
    reserve<float>(xn, n * std::max(c.n_embd, c.q_dim()), "activations");
    reserve<float>(q, n * c.q_dim(), "activations");
    reserve<float>(k, n * c.kv_dim(), "activations");
    reserve<float>(v, n * c.kv_dim(), "activations");
    reserve<float>(att, n * c.q_dim(), "activations");
    reserve<float>(att_partial,
                   static_cast<size_t>(attention_partial_floats(int64_t(n), c.n_head, c.head_dim)),
                   "activations");
    reserve<float>(o, n * c.n_embd, "activations");
    reserve<float>(gate, n * c.n_ff, "activations");
    reserve<float>(up, n * c.n_ff, "activations");
    reserve<int8_t>(xq, n * widest, "activations");
    reserve<float>(xd, n * widest / kQK, "activations");
    reserve<int8_t>(xk_q, n * widest, "activations");
    reserve<float>(xk_d, n * widest / kSuperBlock + 1, "activations");
    reserve<int16_t>(xk_bsums, n * widest / 16, "activations");
    reserve<float>(selected, n * c.n_embd, "activations");
    reserve<float>(out_norm, n * c.n_embd, "activations");
    reserve<float>(logits, n * c.n_vocab, "logits");
    reserve<float>(rope_angles, n * std::max(c.rope_dims, 2), "activations");
    if (half_weights && half_split_rows_wanted(static_cast<int>(n)) &&
        static_cast<int>(n) > half_split_rows) {
      reserve<uint32_t>(half_split, n * widest, "activations");
      half_split_rows = static_cast<int>(n);
    }
    if (fused_attention_merge_wanted())
      reserve_counters(att_split_counters, n * static_cast<size_t>(c.n_head));
    if (norm_once_wanted()) reserve_counters(norm_counter, 1);
    if (stream_split_wanted()) {
      reserve<float>(chain_sums, stream_split_floats(), "activations");
      reserve_counters(chain_counters, stream_split_counters());
    }
  }

  // Room for `count` int32 counters, new memory zeroed before any kernel can
  // use it, whichever stream that is.
  void reserve_counters(DeviceBuffer& counters, size_t count) {
    const size_t bytes = count * sizeof(int32_t);
    if (!counters.reserve(bytes, "activations")) return;
    cuda_check(cudaMemsetAsync(counters.get(), 0, bytes, stream), "cudaMemsetAsync (counters)");
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (counters)");
  }

  Q8KActivations xk() { return {xk_q.as<int8_t>(), xk_d.as<float>(), xk_bsums.as<int16_t>()}; }
};

// Pinned host memory, so that a copy from it can be queued without waiting.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes) {
    cuda_check(cudaMallocHost(&data_, bytes), "cudaMallocHost");
  }
  ~PinnedBuffer() { cudaFreeHost(data_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(data_); }

 private:
  void* data_ = nullptr;
};

// Full passes of up to kGraphRows rows replay a CUDA graph captured once per
// row bucket (1 to 8 rows each, then 16, 32, 64): one launch instead of a few
// hundred. The inputs that change every step (tokens, positions, cells, rows
// wanted) are read from `meta`, filled by one copy before each replay; rows
// beyond the pass's own up to the bucket are padding that attends to itself in
// a cache of its own (`trash_k`/`trash_v`), so nothing it computes reaches a
// real row.
constexpr int kGraphRows = 64;
constexpr int kGraphSpecSlots = 64 * 64;  // a pass's speculative key slots, all rows together

// A captured pass: its row bucket, and for layer-parallel passes the ends
// of the layer groups (empty for a full pass).
using GraphKey = std::pair<int, std::vector<int>>;

// What a layer-parallel pass needs beyond a workspace: its attention blocks'
// outputs, and workspaces for the blocks that run beside the first (on the
// context's side streams).
struct LayerGroupBuffers {
  DeviceBuffer outputs;
  std::vector<std::unique_ptr<Workspace>> side;

  // For groups of up to `widest` layers over `rows` rows, the side
  // workspaces' kernels on `context`'s side streams. Returns whether a buffer
  // that existed moved (graphs captured with it are then stale).
  bool reserve_for(const ModelConfig& c, int rows, int widest, DeviceContext& context) {
    context.ensure_side_streams(static_cast<size_t>(widest - 1));
    const void* before = outputs.get();
    const size_t count = static_cast<size_t>(rows) * c.n_embd;
    reserve<float>(outputs, count * static_cast<size_t>(widest), "activations");
    bool moved = before != nullptr && before != outputs.get();
    while (side.size() + 1 < static_cast<size_t>(widest))
      side.push_back(std::make_unique<Workspace>());
    for (size_t i = 0; i < side.size(); ++i) {
      const void* held = side[i]->hidden.get();
      side[i]->reserve_rows(c, rows);
      moved |= held != nullptr && held != side[i]->hidden.get();
      side[i]->stream = context.side.at(i);
    }
    return moved;
  }
};

struct GraphState {
  Workspace ws;
  DeviceBuffer meta, trash_k, trash_v;
  PinnedBuffer staging;
  std::map<GraphKey, cudaGraphExec_t> graphs;
  LayerGroupBuffers groups;  // kGraphRows rows, grown to the widest grouping captured

  // Byte offsets in `meta` (and `staging`).
  static constexpr size_t kTokens = 0;
  static constexpr size_t kPositions = kTokens + kGraphRows * sizeof(int32_t);
  static constexpr size_t kWanted = kPositions + kGraphRows * sizeof(int32_t);
  static constexpr size_t kRows = kWanted + kGraphRows * sizeof(int32_t);
  static constexpr size_t kSpecSlots = kRows + kGraphRows * sizeof(AttentionRow);
  static constexpr size_t kBytes = kSpecSlots + kGraphSpecSlots * sizeof(int32_t);

  GraphState(const ModelConfig& c, bool half_weights) : staging(kBytes) {
    ws.half_weights = half_weights;
    ws.reserve_rows(c, kGraphRows);
    reserve<uint8_t>(meta, kBytes, "graph inputs");
    const size_t trash = static_cast<size_t>(c.n_layer) * c.kv_dim();
    reserve<float>(trash_k, trash, "graph padding");
    reserve<float>(trash_v, trash, "graph padding");
  }
  ~GraphState() {
    for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
  }
  GraphState(const GraphState&) = delete;
  GraphState& operator=(const GraphState&) = delete;

  PassInputs inputs() const {
    const uint8_t* base = meta.as<uint8_t>();
    return {reinterpret_cast<const int32_t*>(base + kTokens),
            reinterpret_cast<const int32_t*>(base + kPositions),
            reinterpret_cast<const AttentionRow*>(base + kRows),
            reinterpret_cast<const int32_t*>(base + kSpecSlots),
            reinterpret_cast<const int32_t*>(base + kWanted)};
  }
};

void GraphStateDeleter::operator()(GraphState* g) const {
  delete g;
}

// Up to kExactGraphRows rows a graph of their own (the short verifications of
// chains and trees, where padding rows would cost attention and few-rows
// matmul work), then powers of two.
constexpr int kExactGraphRows = 8;
int graph_bucket(int n) {
  if (n <= kExactGraphRows) return n;
  int bucket = kExactGraphRows;
  while (bucket < n) bucket *= 2;
  return bucket;
}

// The most layers in one of the groups that end at `ends`.
int widest_group(std::span<const int> ends) {
  int widest = 1, first = 0;
  for (int end : ends) {
    widest = std::max(widest, end - first);
    first = end;
  }
  return widest;
}

bool graphs_wanted() {
  return !env_is("PARSPEC_CUDA_GRAPHS", "0");
}

// PARSPEC_CUDA_ATTENTION: "per-head", "grouped" or "tiled" (attention_kernel.h); the
// prestaged kernel otherwise (an H100 decoded 1.11-1.24x as fast with it as with
// the per-head one, on 8B-class Q4_0, 1B-class F16 and 100M-class F16 models).
AttentionKernel attention_wanted() {
  if (env_is("PARSPEC_CUDA_ATTENTION", "per-head")) return AttentionKernel::kPerHead;
  if (env_is("PARSPEC_CUDA_ATTENTION", "grouped")) return AttentionKernel::kGrouped;
  if (env_is("PARSPEC_CUDA_ATTENTION", "tiled")) return AttentionKernel::kTiled;
  return AttentionKernel::kPrestaged;
}

// Where a pass's GPU time goes, kernel group by kernel group, when
// PARSPEC_CUDA_PROFILE=1 (passes then run kernel by kernel, without graphs):
// an event after each group, the time between consecutive events charged to
// the later one's name, and a table on stderr when the executor goes. The
// times include whatever gaps the host leaves between launches.
class KernelProfile {
 public:
  KernelProfile() : on_(env_is("PARSPEC_CUDA_PROFILE", "1")) {}
  ~KernelProfile() {
    try {
      collect();
      if (passes_ > 0) print();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "PARSPEC_CUDA_PROFILE: %s\n", e.what());
    }
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  }
  KernelProfile(const KernelProfile&) = delete;
  KernelProfile& operator=(const KernelProfile&) = delete;

  bool on() const { return on_; }
  // A pass begins: its first event.
  void begin(cudaStream_t stream) {
    if (!on_) return;
    collect();
    ++passes_;
    mark("", stream);
  }
  // The kernels queued since the last mark are `name`'s.
  void mark(const char* name, cudaStream_t stream) {
    if (!on_) return;
    if (marks_.size() >= 4096) collect();  // layer pieces run no begin()
    if (marks_.size() == pool_.size()) {
      cudaEvent_t e;
      cuda_check(cudaEventCreate(&e), "cudaEventCreate (profile)");
      pool_.push_back(e);
    }
    cudaEvent_t e = pool_[marks_.size()];
    cuda_check(cudaEventRecord(e, stream), "cudaEventRecord (profile)");
    marks_.push_back(name);
  }
  // Charges the finished pass's intervals.
  void collect() {
    if (marks_.size() < 2) {
      marks_.clear();
      return;
    }
    cuda_check(cudaEventSynchronize(pool_[marks_.size() - 1]), "cudaEventSynchronize (profile)");
    for (size_t i = 1; i < marks_.size(); ++i) {
      float ms = 0;
      cuda_check(cudaEventElapsedTime(&ms, pool_[i - 1], pool_[i]), "cudaEventElapsedTime");
      Entry& e = entries_[marks_[i]];
      e.ms += ms;
      ++e.calls;
    }
    marks_.clear();
  }

 private:
  struct Entry {
    double ms = 0;
    int64_t calls = 0;
  };
  void print() const {
    double total = 0;
    for (const auto& [name, e] : entries_) total += e.ms;
    std::vector<std::pair<std::string, Entry>> rows(entries_.begin(), entries_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    std::fprintf(stderr, "GPU time by kernel group over %lld passes (PARSPEC_CUDA_PROFILE):\n",
                 static_cast<long long>(passes_));
    std::fprintf(stderr, "  %-26s %10s %8s %12s %8s\n", "group", "ms/pass", "share",
                 "launches/pass", "us each");
    for (const auto& [name, e] : rows)
      std::fprintf(stderr, "  %-26s %10.3f %7.1f%% %12.1f %8.1f\n", name.c_str(),
                   e.ms / static_cast<double>(passes_), total > 0 ? 100.0 * e.ms / total : 0.0,
                   static_cast<double>(e.calls) / static_cast<double>(passes_),
                   1000.0 * e.ms / static_cast<double>(std::max<int64_t>(e.calls, 1)));
  }

  bool on_;
  int64_t passes_ = 0;
  std::vector<cudaEvent_t> pool_;
  std::vector<const char*> marks_;
  std::map<std::string, Entry> entries_;
};

class CudaExecutor final : public ForwardExecutor {
 public:
  CudaExecutor(int device, StreamPriority priority)
      : context_(std::make_shared<DeviceContext>(device, priority)),
        graphs_(graphs_wanted()),
        attention_(attention_wanted()) {
    eager_.stream = context_->stream;
    prepare_launches();
    prepare_attention(attention_);
  }

  void use_graphs(bool on) { graphs_ = on; }
  void use_attention(AttentionKernel kernel) {
    check(models_.empty(),
          "use_attention: the executor already holds a model (and may have captured graphs)");
    attention_ = kernel;
    prepare_attention(attention_);
  }

  // Every call starts here: the calling thread is pointed at the device.
  DeviceModel& on_device(const Model& model) {
    cuda_check(cudaSetDevice(context_->device), "cudaSetDevice");
    auto it = models_.find(&model);
    if (it != models_.end()) return *it->second;
    std::unique_ptr<DeviceModel> dm = upload_model(model, context_->stream);
    context_->sync("uploading the model");  // its errors here, not in a forward
    eager_.half_weights |= dm->half_weights;
    return *models_.emplace(&model, std::move(dm)).first->second;
  }

  std::vector<float> forward(const Model& model, const Batch& batch, KvCache& kv) override {
    const ModelConfig& c = model.config();
    check_batch(batch, c, "forward");
    if (batch.size() == 0) return {};
    check(kv.layer_first() == 0 && kv.layer_last() == c.n_layer,
          "forward: the cache must cover all layers");
    DeviceModel& dm = on_device(model);
    DeviceKvStore& store = store_of(model, kv, kv.n_spec());
    const int32_t first_cell = kv.add_cells(batch.positions, batch.parents);
    RowPlan plan;
    plan.add(batch, kv, store, first_cell);
    std::vector<int32_t> wanted;
    for (size_t i = 0; i < batch.size(); ++i)
      if (batch.want_logits[i]) wanted.push_back(static_cast<int32_t>(i));
    const float* logits = full_pass(model, dm, plan, {&batch}, wanted);
    return download_logits(model, logits, wanted.size());
  }

  std::vector<std::vector<float>> forward_multi(
      const Model& model, std::span<const Model::SequenceBatch> sequences) override {
    const ModelConfig& c = model.config();
    std::vector<std::vector<float>> out(sequences.size());
    size_t total = 0;
    for (size_t s = 0; s < sequences.size(); ++s) {
      check_batch(*sequences[s].batch, c, "forward_multi");
      check(sequences[s].kv->layer_first() == 0 && sequences[s].kv->layer_last() == c.n_layer,
            "forward_multi: the cache must cover all layers");
      for (size_t t = 0; t < s; ++t)
        check(sequences[t].kv != sequences[s].kv, "forward_multi: two batches share a cache");
      total += sequences[s].batch->size();
    }
    if (total == 0) return out;
    DeviceModel& dm = on_device(model);
    std::vector<DeviceKvStore*> stores;
    for (const Model::SequenceBatch& s : sequences)
      stores.push_back(&store_of(model, *s.kv, s.kv->n_spec()));
    RowPlan plan;
    std::vector<int32_t> wanted, wanted_seq;
    std::vector<const Batch*> batches;
    for (size_t s = 0; s < sequences.size(); ++s) {
      const Batch& b = *sequences[s].batch;
      const int offset = plan.size();
      const int32_t first_cell = sequences[s].kv->add_cells(b.positions, b.parents);
      plan.add(b, *sequences[s].kv, *stores[s], first_cell);
      batches.push_back(&b);
      for (size_t i = 0; i < b.size(); ++i) {
        if (!b.want_logits[i]) continue;
        wanted.push_back(offset + static_cast<int32_t>(i));
        wanted_seq.push_back(static_cast<int32_t>(s));
      }
    }
    const float* logits = full_pass(model, dm, plan, batches, wanted);
    const std::vector<float> all = download_logits(model, logits, wanted.size());
    const size_t n_vocab = static_cast<size_t>(c.n_vocab);
    for (size_t r = 0; r < wanted.size(); ++r) {
      auto& dst = out[static_cast<size_t>(wanted_seq[r])];
      dst.insert(dst.end(), all.begin() + r * n_vocab, all.begin() + (r + 1) * n_vocab);
    }
    return out;
  }

  void forward_layers(const Model& model, const Batch& batch, KvCache& kv, int32_t first_cell,
                      int layer_first, int layer_last, float* hidden) override {
    const ModelConfig& c = model.config();
    check(layer_first >= kv.layer_first() && layer_last <= kv.layer_last() &&
              layer_first <= layer_last,
          "forward_layers: layers [", layer_first, ", ", layer_last, ") are not in the cache");
    const int n = static_cast<int>(batch.size());
    if (n == 0) return;
    DeviceModel& dm = on_device(model);
    RowPlan plan;
    plan.add(batch, kv, store_of(model, kv, first_cell), first_cell);
    const PassInputs in = upload_plan(plan, {});
    eager_.reserve_rows(c, n);
    float* h = upload_hidden(hidden, static_cast<size_t>(n) * c.n_embd);
    run_layers(c, dm, eager_, in, n, layer_first, layer_last, h);
    download(hidden, h, static_cast<size_t>(n) * c.n_embd);
  }

  void attention_output(const Model& model, int layer, const Batch& batch, KvCache& kv,
                        int32_t first_cell, const float* hidden, float* out,
                        AttentionProbe* probe) override {
    const ModelConfig& c = model.config();
    check(layer >= kv.layer_first() && layer < kv.layer_last(), "attention_output: layer ", layer,
          " is not in the cache");
    const int n = static_cast<int>(batch.size());
    if (n == 0) return;
    DeviceModel& dm = on_device(model);
    RowPlan plan;
    plan.add(batch, kv, store_of(model, kv, first_cell), first_cell);
    const PassInputs in = upload_plan(plan, {});
    eager_.reserve_rows(c, n);
    float* h = upload_hidden(hidden, static_cast<size_t>(n) * c.n_embd);
    float* o = eager_.o.as<float>();
    attention_part(c, dm, eager_, in, layer, n, h, nullptr, o, probe != nullptr);
    if (probe != nullptr) {
      probe->q.resize(static_cast<size_t>(n) * c.q_dim());
      probe->k.resize(static_cast<size_t>(n) * c.kv_dim());
      probe->v.resize(static_cast<size_t>(n) * c.kv_dim());
      download(probe->q.data(), eager_.q.as<float>(), probe->q.size());
      download(probe->k.data(), eager_.k.as<float>(), probe->k.size());
      download(probe->v.data(), eager_.v.as<float>(), probe->v.size());
    }
    download(out, o, static_cast<size_t>(n) * c.n_embd);
  }

  void mlp_block(const Model& model, int layer, int n, float* hidden) override {
    if (n <= 0) return;
    const ModelConfig& c = model.config();
    const size_t count = static_cast<size_t>(n) * c.n_embd;
    DeviceModel& dm = on_device(model);
    eager_.reserve_rows(c, n);
    float* h = upload_hidden(hidden, count);
    mlp_part(c, dm, eager_, layer, n, h, nullptr);
    launch_add(h, eager_.o.as<float>(), static_cast<int64_t>(count), context_->stream);
    download(hidden, h, count);
  }

  bool forward_layer_groups(const Model& model, const Batch& batch, KvCache& kv, int32_t first_cell,
                            std::span<const int> group_ends, std::vector<float>& logits) override {
    const ModelConfig& c = model.config();
    check_batch(batch, c, "forward_layer_groups");
    check(kv.layer_first() == 0 && kv.layer_last() == c.n_layer,
          "forward_layer_groups: the cache must cover all layers");
    int previous = 0;
    for (int end : group_ends) {
      check(end > previous, "forward_layer_groups: layer groups must be consecutive and non-empty");
      previous = end;
    }
    check(previous == c.n_layer, "forward_layer_groups: the groups cover ", previous,
          " layers; the model has ", c.n_layer);
    const int n = static_cast<int>(batch.size());
    logits.clear();
    if (n == 0) return true;
    DeviceModel& dm = on_device(model);
    RowPlan plan;
    plan.add(batch, kv, store_of(model, kv, first_cell), first_cell);
    std::vector<int32_t> wanted;
    for (int i = 0; i < n; ++i)
      if (batch.want_logits[static_cast<size_t>(i)]) wanted.push_back(i);
    const float* out = full_pass(model, dm, plan, {&batch}, wanted, group_ends);
    logits = download_logits(model, out, wanted.size());
    return true;
  }

  void output_logits(const Model& model, const float* hidden, int n, float* logits) override {
    if (n <= 0) return;
    const ModelConfig& c = model.config();
    DeviceModel& dm = on_device(model);
    eager_.reserve_rows(c, n);
    float* h = upload_hidden(hidden, static_cast<size_t>(n) * c.n_embd);
    const float* out = logits_part(c, dm, eager_, h, n);
    download(logits, out, static_cast<size_t>(n) * c.n_vocab);
  }

  std::vector<int32_t> last_argmax(int n) {
    check(n >= 0 && n <= last_rows_ && last_logits_ != nullptr,
          "argmax: the last forward returned ", last_rows_, " rows of logits, not ", n);
    std::vector<int32_t> index(n);
    if (n == 0) return index;
    int32_t* device_index = reserve<int32_t>(argmax_, n, "argmax");
    launch_argmax(last_logits_, n, last_vocab_, device_index, context_->stream);
    cuda_check(cudaGetLastError(), "argmax");
    download(index.data(), device_index, index.size());
    return index;
  }

 private:
  // The device rows of `kv`, attached on its first use here: then it holds no
  // rows yet (its new cells, from `first_new_cell` on, are what this call writes).
  DeviceKvStore& store_of(const Model& model, KvCache& kv, int32_t first_new_cell) {
    if (auto* store = dynamic_cast<DeviceKvStore*>(kv.store());
        store != nullptr && store->serves(context_.get(), &model))
      return *store;
    check(kv.store() == nullptr, "a KV cache used by another GPU executor or model cannot move");
    check(kv.n_committed() == 0 && first_new_cell == 0,
          "a KV cache filled on the CPU cannot continue on the GPU (start it on the GPU)");
    auto store = std::make_unique<DeviceKvStore>(context_, &model, kv);
    DeviceKvStore& ref = *store;
    kv.attach_store(std::move(store));
    return ref;
  }

  PassInputs upload_plan(const RowPlan& plan, const std::vector<int32_t>& wanted) {
    cudaStream_t stream = context_->stream;
    upload_to(tokens_, plan.tokens, "batch tokens", stream);
    upload_to(positions_, plan.positions, "batch positions", stream);
    upload_to(rows_, plan.attention, "batch cells", stream);
    upload_to(spec_slots_, plan.spec_slots, "batch cells", stream);
    upload_to(wanted_, wanted, "batch rows", stream);
    PassInputs in{tokens_.as<int32_t>(), positions_.as<int32_t>(), rows_.as<AttentionRow>(),
                  spec_slots_.as<int32_t>(), wanted_.as<int32_t>()};
    for (const AttentionRow& r : plan.attention)
      in.max_keys = std::max(in.max_keys, r.n_committed + r.spec_count);
    return in;
  }

  float* upload_hidden(const float* host, size_t count) {
    float* h = eager_.hidden.as<float>();
    cuda_check(
        cudaMemcpyAsync(h, host, count * sizeof(float), cudaMemcpyHostToDevice, context_->stream),
        "copying activations");
    return h;
  }

  template <class T>
  void download(T* host, const T* device, size_t count) {
    cuda_check(
        cudaMemcpyAsync(host, device, count * sizeof(T), cudaMemcpyDeviceToHost, context_->stream),
        "copying results");
    context_->sync("a forward on the GPU");
  }

  // Where the activations of these matrices go quantized to Q8_0: the
  // workspace's buffer if one of them takes them so, null otherwise.
  static int8_t* quantized_input(Workspace& ws,
                                 std::initializer_list<const DeviceMatrix*> matrices) {
    for (const DeviceMatrix* m : matrices)
      if (takes_quantized_input(m->kind)) return ws.xq.as<int8_t>();
    return nullptr;
  }

  // Where the kernel writing these matrices' input also writes it as Q8_K
  // (PARSPEC_CUDA_FUSE=q8k, one of them K-quant weights): the workspace's
  // buffers, else none.
  static Q8KActivations q8k_output(Workspace& ws,
                                   std::initializer_list<const DeviceMatrix*> matrices) {
    if (!fused_q8k_wanted()) return {};
    for (const DeviceMatrix* m : matrices)
      if (takes_q8k_input(m->kind)) return ws.xk();
    return {};
  }

  // The matrices of one launch on x: K-quant weights take x quantized to Q8_K
  // first (Q8_0 activations come quantized from the kernel that wrote x).
  // xq, xd: where x's Q8_0 form is (null: the workspace's buffers).
  void matmul_group(Workspace& ws, const MatmulGroup& group, const float* x, int n,
                    const int8_t* xq = nullptr, const float* xd = nullptr) {
    const bool q8k_written = ws.q8k_written_for == x;
    ws.q8k_written_for = nullptr;
    for (int i = 0; i < group.count && !q8k_written; ++i)
      if (takes_q8k_input(group.w[i].kind)) {
        launch_quantize_q8k(x, n, static_cast<int>(group.w[i].n_in), ws.xk(), ws.stream);
        break;
      }
    MatmulGroup g = group;
    g.half_split = ws.half_split_for(n);
    g.chain_sums = ws.chain_sums.as<float>();
    g.chain_counters = ws.chain_counters.as<int32_t>();
    launch_matmul_group(g, x, xq != nullptr ? xq : ws.xq.as<int8_t>(),
                        xd != nullptr ? xd : ws.xd.as<float>(), ws.xk(), n, ws.stream);
  }

  // Embedding, every layer and the logits of the `wanted` rows; returns them (device memory).
  // A pass's layers and logits: every layer in order, or as the layer groups
  // `ends` of layer-parallel drafting say (forward_layer_groups).
  const float* full_pass(const Model& model, DeviceModel& dm, const RowPlan& plan,
                         const std::vector<const Batch*>& batches,
                         const std::vector<int32_t>& wanted, std::span<const int> ends = {}) {
    bool own_embeddings = false;
    for (const Batch* b : batches)
      for (const float* e : b->input_embeddings) own_embeddings |= e != nullptr;
    if (graphs_ && !profile_.on() && !own_embeddings && plan.size() <= kGraphRows &&
        plan.spec_slots.size() < static_cast<size_t>(kGraphSpecSlots))
      return graph_pass(model, dm, plan, wanted, ends);

    const ModelConfig& c = model.config();
    const int n = plan.size();
    const PassInputs in = upload_plan(plan, wanted);
    eager_.reserve_rows(c, n);
    if (!ends.empty()) eager_groups_.reserve_for(c, n, widest_group(ends), *context_);
    embed_rows(c, dm, in, batches, n);
    return layers_and_logits(c, dm, eager_, eager_groups_, in, n, static_cast<int>(wanted.size()),
                             ends);
  }

  // The eager workspace's hidden rows: each row's token embedding, or the
  // embedding its batch brings (input_embeddings).
  void embed_rows(const ModelConfig& c, DeviceModel& dm, const PassInputs& in,
                  const std::vector<const Batch*>& batches, int n) {
    cudaStream_t stream = eager_.stream;
    float* h = eager_.hidden.as<float>();
    profile_.begin(stream);
    launch_embed(dm.embedding, in.tokens, n, h, stream);
    profile_.mark("embedding", stream);
    int row = 0;
    for (const Batch* b : batches) {
      for (size_t i = 0; i < b->input_embeddings.size(); ++i) {
        if (b->input_embeddings[i] == nullptr) continue;
        cuda_check(
            cudaMemcpyAsync(h + static_cast<size_t>(row + i) * c.n_embd, b->input_embeddings[i],
                            sizeof(float) * c.n_embd, cudaMemcpyHostToDevice, stream),
            "copying input embeddings");
      }
      row += static_cast<int>(b->size());
    }
  }

  // h += attention and h += mlp of layers [first, last). Each block's output
  // is added to h by the norm that starts the next block (one kernel, the same
  // additions), the last one on its own.
  void run_layers(const ModelConfig& c, DeviceModel& dm, Workspace& ws, const PassInputs& pass,
                  int n, int first, int last, float* h) {
    const PassInputs in = with_rope_angles(c, dm, ws, pass, n);
    // PARSPEC_CUDA_FUSE=norm or =norm-once: every residual is added into h as
    // it is made.
    const bool fuse_norm = (fused_norm_wanted() || norm_once_wanted()) && n == 1;
    float* o = ws.o.as<float>();
    ws.normalized_ahead = nullptr;
    for (int l = first; l < last; ++l) {
      const DeviceLayer& w = dm.layers.at(l);
      const NextNorm after_attention{w.ffn_norm, c.rms_eps, {&w.w_gate, &w.w_up}, 2};
      NextNorm after_mlp;
      if (l + 1 < last) {
        const DeviceLayer& next = dm.layers.at(l + 1);
        after_mlp = NextNorm{next.attn_norm, c.rms_eps, {&next.wq, &next.wk, &next.wv}, 3};
      }
      attention_part(c, dm, ws, in, l, n, h, fuse_norm || l == first ? nullptr : o, o, false,
                     fuse_norm, after_attention);
      mlp_part(c, dm, ws, l, n, h, fuse_norm ? nullptr : o, fuse_norm, after_mlp);
    }
    ws.normalized_ahead = nullptr;
    if (last > first && !fuse_norm) {
      launch_add(h, ws.o.as<float>(), static_cast<int64_t>(n) * c.n_embd, ws.stream);
      profile_.mark("add (last MLP)", ws.stream);
    }
  }

  // A matmul whose output goes into the residual stream: added into h by
  // the matmul itself where its kernel can (fuse_norm), else written to
  // `out` and, with fuse_norm, added to h by a kernel of its own. With
  // PARSPEC_CUDA_FUSE=norm-once its last block then normalizes h with `next`'s
  // norm for its matrices, where they all take the quantized row.
  void residual_matmul(Workspace& ws, const DeviceMatrix& w, const float* x, int n, float* out,
                       float* h, bool fuse_norm, const int8_t* xq = nullptr,
                       const float* xd = nullptr, const NextNorm& next = {}) {
    const bool into_h = fuse_norm && one_row_fusable(w, n);
    MatmulGroup group;
    group.count = 1;
    group.w[0] = w;
    group.y[0] = into_h ? h : out;
    group.accumulate = into_h;
    const bool norm_after = into_h && norm_once_wanted() && next.weight != nullptr &&
                            norm_after_fusable(w, {next.matrices.data(), size_t(next.count)});
    if (norm_after)
      group.norm_after = NormAfter{next.weight, next.eps, ws.xq.as<int8_t>(), ws.xd.as<float>(),
                                   ws.norm_counter.as<int32_t>()};
    matmul_group(ws, group, x, n, xq, xd);
    if (fuse_norm && !into_h) launch_add(h, out, static_cast<int64_t>(n) * w.n_out, ws.stream);
    ws.normalized_ahead = norm_after ? next.weight : nullptr;
  }

  // The input norm of matrices that normalize it themselves (fuse_norm and
  // every one of them on the one-row kernels), or {} after running the norm
  // kernel into xn (and ws.xq where they take Q8_0).
  RowNorm input_norm(const ModelConfig& c, Workspace& ws, float* h, const float* residual,
                     const float* weight, int n, bool fuse_norm,
                     std::initializer_list<const DeviceMatrix*> matrices, const char* what,
                     float* xn) {
    // The residual matmul before normalized h already (NormAfter).
    const bool ready = ws.normalized_ahead == weight && weight != nullptr && residual == nullptr;
    ws.normalized_ahead = nullptr;
    ws.q8k_written_for = nullptr;
    if (ready) return RowNorm{};
    bool fusable = fuse_norm && residual == nullptr && !norm_once_wanted();
    for (const DeviceMatrix* m : matrices) fusable = fusable && one_row_fusable(*m, n);
    if (fusable) return RowNorm{h, weight, c.rms_eps};
    if (launch_add_rmsnorm(h, residual, weight, n, c.n_embd, c.rms_eps, xn,
                           quantized_input(ws, matrices), ws.xd.as<float>(), ws.stream,
                           q8k_output(ws, matrices)))
      ws.q8k_written_for = xn;
    profile_.mark(what, ws.stream);
    return RowNorm{};
  }

  // Every layer over the rows in ws.hidden (in layer groups when `ends` are
  // given, on `groups`), then the logits of the n_out rows `in.wanted`.
  const float* layers_and_logits(const ModelConfig& c, DeviceModel& dm, Workspace& ws,
                                 LayerGroupBuffers& groups, const PassInputs& pass, int n,
                                 int n_out, std::span<const int> ends) {
    cudaStream_t stream = ws.stream;
    float* h = ws.hidden.as<float>();
    const PassInputs in = with_rope_angles(c, dm, ws, pass, n);
    if (ends.empty())
      run_layers(c, dm, ws, in, n, 0, c.n_layer, h);
    else
      run_layer_groups(c, dm, ws, groups, in, n, ends, h);
    if (n_out == 0) return nullptr;
    float* selected = ws.selected.as<float>();
    launch_gather_rows(h, in.wanted, n_out, c.n_embd, selected, stream);
    profile_.mark("gather rows", stream);
    return logits_part(c, dm, ws, selected, n_out);
  }

  GraphState& graph_state(const ModelConfig& c, DeviceModel& dm) {
    if (dm.graphs == nullptr) {
      dm.graphs.reset(new GraphState(c, dm.half_weights));
      dm.graphs->ws.stream = context_->stream;
    }
    return *dm.graphs;
  }

  // This pass's inputs, padded to the bucket, in the staging buffer's layout,
  // and their copy to the device (before the replay, on the same stream).
  void stage_graph_inputs(GraphState& g, const RowPlan& plan, const std::vector<int32_t>& wanted,
                          int bucket) {
    const int n = plan.size();
    uint8_t* staging = g.staging.get();
    auto* tokens = reinterpret_cast<int32_t*>(staging + GraphState::kTokens);
    auto* positions = reinterpret_cast<int32_t*>(staging + GraphState::kPositions);
    auto* wanted_rows = reinterpret_cast<int32_t*>(staging + GraphState::kWanted);
    auto* rows = reinterpret_cast<AttentionRow*>(staging + GraphState::kRows);
    auto* spec = reinterpret_cast<int32_t*>(staging + GraphState::kSpecSlots);
    AttentionRow padding;
    padding.k = g.trash_k.as<float>();
    padding.v = g.trash_v.as<float>();
    padding.capacity = 1;
    padding.spec_offset = kGraphSpecSlots - 1;  // holds slot 0: the row itself
    padding.spec_count = 1;
    for (int i = 0; i < bucket; ++i) {
      tokens[i] = i < n ? plan.tokens[i] : 0;
      positions[i] = i < n ? plan.positions[i] : 0;
      rows[i] = i < n ? plan.attention[i] : padding;
      wanted_rows[i] = i < static_cast<int>(wanted.size()) ? wanted[i] : 0;
    }
    std::copy(plan.spec_slots.begin(), plan.spec_slots.end(), spec);
    spec[kGraphSpecSlots - 1] = 0;
    cuda_check(cudaMemcpyAsync(g.meta.get(), staging, GraphState::kBytes, cudaMemcpyHostToDevice,
                               context_->stream),
               "copying graph inputs");
  }

  // Replays graph `key`, capturing what `body` queues on the context's stream first.
  template <class Body>
  void replay(GraphState& g, const GraphKey& key, Body body) {
    cudaStream_t stream = context_->stream;
    auto it = g.graphs.find(key);
    if (it == g.graphs.end()) {
      cudaGraph_t graph = nullptr;
      cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                 "cudaStreamBeginCapture");
      try {
        body();
      } catch (...) {  // leave the stream usable: end the capture, drop what it caught
        if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr)
          cudaGraphDestroy(graph);
        cudaGetLastError();
        throw;
      }
      cuda_check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
      cudaGraphExec_t exec = nullptr;
      const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      cuda_check(status, "cudaGraphInstantiate");
      it = g.graphs.emplace(key, exec).first;
    }
    cuda_check(cudaGraphLaunch(it->second, stream), "cudaGraphLaunch");
  }

  static void drop_layer_group_graphs(GraphState& g) {
    for (auto it = g.graphs.begin(); it != g.graphs.end();) {
      if (it->first.second.empty()) {
        ++it;
        continue;
      }
      cudaGraphExecDestroy(it->second);
      it = g.graphs.erase(it);
    }
  }

  // The pass as a replay of the graph of its row bucket and layer groups
  // (captured on first use).
  const float* graph_pass(const Model& model, DeviceModel& dm, const RowPlan& plan,
                          const std::vector<int32_t>& wanted, std::span<const int> ends) {
    const ModelConfig& c = model.config();
    const int bucket = graph_bucket(plan.size());
    GraphState& g = graph_state(c, dm);
    stage_graph_inputs(g, plan, wanted, bucket);
    if (!ends.empty() && g.groups.reserve_for(c, kGraphRows, widest_group(ends), *context_))
      drop_layer_group_graphs(g);  // they hold the buffers that moved
    replay(g, {bucket, std::vector<int>(ends.begin(), ends.end())}, [&] {
      const PassInputs in = g.inputs();
      launch_embed(dm.embedding, in.tokens, bucket, g.ws.hidden.as<float>(), g.ws.stream);
      layers_and_logits(c, dm, g.ws, g.groups, in, bucket, bucket, ends);
    });
    last_logits_ = g.ws.logits.as<float>();
    last_rows_ = static_cast<int>(wanted.size());
    return wanted.empty() ? nullptr : g.ws.logits.as<float>();
  }

  // Layer-parallel drafting's layers on h (forward_layer_groups): groups of
  // one as run_layers; a larger group's input copied aside, its attention
  // blocks on it (beside each other on the side streams), then its MLPs in order.
  void run_layer_groups(const ModelConfig& c, DeviceModel& dm, Workspace& ws,
                        LayerGroupBuffers& groups, const PassInputs& in, int n,
                        std::span<const int> ends, float* h) {
    // Side by side unless kernels are timed one by one.
    const bool overlap = !profile_.on();
    cudaStream_t stream = ws.stream;
    const size_t rows = static_cast<size_t>(n) * c.n_embd;
    float* outs = groups.outputs.as<float>();
    int first = 0;
    for (int end : ends) {
      const int size = end - first;
      if (size == 1) {
        run_layers(c, dm, ws, in, n, first, end, h);
        first = end;
        continue;
      }
      // Every attention block of the group reads h as the group found it: they
      // only read it, and the MLPs that change it start after all of them.
      if (overlap) {
        cuda_check(cudaEventRecord(context_->fork, stream), "cudaEventRecord");
        for (int i = 1; i < size; ++i)
          cuda_check(cudaStreamWaitEvent(groups.side.at(i - 1)->stream, context_->fork, 0),
                     "cudaStreamWaitEvent");
      }
      for (int l = first; l < end; ++l) {
        Workspace& w = overlap && l > first ? *groups.side.at(l - first - 1) : ws;
        attention_part(c, dm, w, in, l, n, h, nullptr, outs + (l - first) * rows);
      }
      if (overlap) {
        for (int i = 1; i < size; ++i) {
          cuda_check(cudaEventRecord(context_->joins.at(i - 1), groups.side.at(i - 1)->stream),
                     "cudaEventRecord");
          cuda_check(cudaStreamWaitEvent(stream, context_->joins.at(i - 1), 0),
                     "cudaStreamWaitEvent");
        }
      }
      // Each layer's attention output is added into h by its MLP's norm kernel,
      // and the MLP's output by its down matmul where the one-row kernels take
      // it (fuse_norm), else by an add kernel: the same additions, fewer launches.
      for (int l = first; l < end; ++l)
        mlp_part(c, dm, ws, l, n, h, outs + (l - first) * rows, /*fuse_norm=*/true);
      first = end;
    }
  }

  // The pass's inputs with the rows' rotations, computed for it unless they are already.
  PassInputs with_rope_angles(const ModelConfig& c, DeviceModel& dm, Workspace& ws, PassInputs in,
                              int n) {
    if (in.rope_angles != nullptr) return in;
    launch_rope_angles(in.positions, dm.inv_freq, n, c.rope_dims / 2, ws.rope_angles.as<float>(),
                       ws.stream);
    profile_.mark("rope angles", ws.stream);
    in.rope_angles = ws.rope_angles.as<float>();
    return in;
  }

  // h += residual (when given), then attention(norm(h)) of one layer into
  // `out` and the rows' k and v into their caches.
  // keep_qkv: q, k and v stay in the workspace's buffers (for an AttentionProbe),
  // so the q/k/v matmul is not fused with RoPE and the KV store.
  // fuse_norm (PARSPEC_CUDA_FUSE=norm or norm-once, no residual): the
  // attention's output is added into h (`out`: scratch), and the q/k/v matmul
  // normalizes h itself where its kernels can (norm), or the wo matmul
  // normalizes it for `after` (norm-once).
  void attention_part(const ModelConfig& c, DeviceModel& dm, Workspace& ws, const PassInputs& pass,
                      int layer, int n, float* h, const float* residual, float* out,
                      bool keep_qkv = false, bool fuse_norm = false, const NextNorm& after = {}) {
    check(ws.stream != nullptr, "a workspace without a stream");
    const PassInputs in = with_rope_angles(c, dm, ws, pass, n);
    const DeviceLayer& w = dm.layers.at(layer);
    cudaStream_t stream = ws.stream;
    float* xn = ws.xn.as<float>();
    float* q = ws.q.as<float>();
    float* k = ws.k.as<float>();
    float* v = ws.v.as<float>();
    float* att = ws.att.as<float>();
    const RowNorm norm = input_norm(c, ws, h, residual, w.attn_norm, n, fuse_norm && !keep_qkv,
                                    {&w.wq, &w.wk, &w.wv}, "add + norm (attention)", xn);
    const HeadShape shape{c.n_head, c.n_head_kv, c.head_dim, c.rope_dims,
                          c.rope_style == RopeStyle::kNeox};
    if (fused_rope_wanted(w.wq.kind) && !keep_qkv &&
        launch_qkv_rope(w.wq, w.wk, w.wv, xn, ws.xq.as<int8_t>(), ws.xd.as<float>(), n, q, w.bq,
                        w.bk, w.bv, in.rope_angles, in.rows, layer, shape, stream, norm,
                        ws.half_split_for(n))) {
      profile_.mark("q/k/v matmul + rope + KV store", stream);
    } else {
      MatmulGroup qkv;
      qkv.count = 3;
      qkv.w[0] = w.wq, qkv.w[1] = w.wk, qkv.w[2] = w.wv;
      qkv.y[0] = q, qkv.y[1] = k, qkv.y[2] = v;
      qkv.norm = norm;
      matmul_group(ws, qkv, xn, n);
      profile_.mark("q/k/v matmul", stream);
      launch_bias_rope_store(q, k, v, w.bq, w.bk, w.bv, in.rope_angles, in.rows, layer, n, shape,
                             stream);
      profile_.mark("rope + KV store", stream);
    }
    // The wo input quantized by the attention's last kernel where it can.
    int8_t* xq = quantized_input(ws, {&w.wo});
    const bool quantized =
        launch_attention(q, in.rows, in.spec_slots, n, layer, shape, c.attention_scale(),
                         attention_, ws.att_partial.as<float>(), att, xq, ws.xd.as<float>(),
                         ws.att_split_counters.as<int32_t>(), stream, in.max_keys);
    profile_.mark("attention", stream);
    if (xq != nullptr && !quantized) {
      launch_quantize_q8(att, n, c.q_dim(), xq, ws.xd.as<float>(), stream);
      profile_.mark("quantize (wo input)", stream);
    }
    residual_matmul(ws, w.wo, att, n, out, h, fuse_norm, nullptr, nullptr, after);
    profile_.mark("wo matmul", stream);
    cuda_check(cudaGetLastError(), "the attention block");
  }

  // h += residual (when given), then mlp(norm(h)) of one layer into ws.o (not
  // added to h: the caller adds it, or the next norm does). fuse_norm: the
  // output added into h instead, by the down matmul where the one-row kernels
  // take it (and with norm-once and no residual normalized for `after`), else
  // by an add kernel; without a residual, the norm also done by the matmuls
  // where PARSPEC_CUDA_FUSE=norm asks for it, as attention_part's.
  void mlp_part(const ModelConfig& c, DeviceModel& dm, Workspace& ws, int layer, int n, float* h,
                const float* residual, bool fuse_norm = false, const NextNorm& after = {}) {
    const DeviceLayer& w = dm.layers.at(layer);
    cudaStream_t stream = ws.stream;
    float* xn = ws.xn.as<float>();
    float* gate = ws.gate.as<float>();
    float* up = ws.up.as<float>();
    const RowNorm norm = input_norm(c, ws, h, residual, w.ffn_norm, n, fuse_norm,
                                    {&w.w_gate, &w.w_up}, "add + norm (MLP)", xn);
    // The down matmul's quantized input: where the SwiGLU kernel writes it, or
    // where `up` would be when the fused kernel writes it (`up` never leaves
    // that kernel, and the kernel's own input must not be overwritten).
    int8_t* q_down = ws.xq.as<int8_t>();
    float* d_down = ws.xd.as<float>();
    bool fused = false;
    if (fused_swiglu_wanted(w.w_gate.kind)) {
      int8_t* q = takes_quantized_input(w.w_down.kind) ? ws.up.as<int8_t>() : nullptr;
      float* d =
          q != nullptr ? reinterpret_cast<float*>(q + static_cast<size_t>(n) * c.n_ff) : nullptr;
      fused = launch_gate_up_swiglu(w.w_gate, w.w_up, xn, ws.xq.as<int8_t>(), ws.xd.as<float>(), n,
                                    gate, q, d, stream, norm, ws.half_split_for(n));
      if (fused && q != nullptr) q_down = q, d_down = d;
      if (fused) profile_.mark("gate/up matmul + SwiGLU", stream);
    }
    if (!fused) {
      MatmulGroup gate_up;
      gate_up.count = 2;
      gate_up.w[0] = w.w_gate, gate_up.w[1] = w.w_up;
      gate_up.y[0] = gate, gate_up.y[1] = up;
      gate_up.norm = norm;
      matmul_group(ws, gate_up, xn, n);
      profile_.mark("gate/up matmul", stream);
      if (launch_swiglu(gate, up, n, c.n_ff, quantized_input(ws, {&w.w_down}), ws.xd.as<float>(),
                        stream, q8k_output(ws, {&w.w_down})))
        ws.q8k_written_for = gate;
      profile_.mark("SwiGLU", stream);
    }
    residual_matmul(ws, w.w_down, gate, n, ws.o.as<float>(), h, fuse_norm, q_down, d_down, after);
    profile_.mark("down matmul", stream);
    cuda_check(cudaGetLastError(), "the MLP block");
  }

  const float* logits_part(const ModelConfig& c, DeviceModel& dm, Workspace& ws, float* h, int n) {
    float* xn = ws.out_norm.as<float>();
    float* logits = ws.logits.as<float>();
    MatmulGroup head;
    head.count = 1;
    head.w[0] = dm.output;
    head.y[0] = logits;
    head.norm = input_norm(c, ws, h, nullptr, dm.output_norm, n, fused_norm_wanted(), {&dm.output},
                           "output norm", xn);
    matmul_group(ws, head, xn, n);
    profile_.mark("output matmul", ws.stream);
    cuda_check(cudaGetLastError(), "the output layer");
    last_logits_ = logits;
    last_rows_ = n;
    last_vocab_ = c.n_vocab;
    return logits;
  }

  std::vector<float> download_logits(const Model& model, const float* logits, size_t n_out) {
    std::vector<float> out(n_out * model.config().n_vocab);
    last_vocab_ = model.config().n_vocab;
    if (n_out > 0)
      download(out.data(), logits, out.size());
    else
      context_->sync("a forward on the GPU");
    check_logits(out, static_cast<size_t>(model.config().n_vocab), model);
    return out;
  }

  std::shared_ptr<DeviceContext> context_;
  bool graphs_;
  AttentionKernel attention_;
  KernelProfile profile_;
  std::map<const Model*, std::unique_ptr<DeviceModel>> models_;
  // Passes that do not replay a graph: their inputs and activations, grown to
  // the largest so far.
  DeviceBuffer tokens_, positions_, rows_, spec_slots_, wanted_, argmax_;
  // Layer-parallel drafting: a group's input and its attention blocks' outputs.
  LayerGroupBuffers eager_groups_;
  Workspace eager_;
  const float* last_logits_ = nullptr;
  int last_rows_ = 0, last_vocab_ = 0;
};

}  // namespace

bool built() {
  return true;
}

std::string unavailable_reason(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorNoDevice) return "no CUDA GPU found";
  if (status == cudaErrorInsufficientDriver)
    return "no NVIDIA driver for CUDA 13 found (no GPU here, or its driver is older than CUDA "
           "13 needs)";
  if (status != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device: ") + cudaGetErrorString(status);
  }
  if (device < 0 || device >= count)
    return "no CUDA device " + std::to_string(device) + " (" + std::to_string(count) + " found)";
  return "";
}

DeviceInfo device_info(int device) {
  const std::string reason = unavailable_reason(device);
  check(reason.empty(), reason);
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  DeviceInfo info;
  info.index = device;
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess)
    info.bandwidth_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  cudaGetLastError();
  size_t free_bytes = 0, total = 0;
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  cuda_check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  info.total_bytes = total;
  info.free_bytes = free_bytes;
  return info;
}

std::string describe(const DeviceInfo& info) {
  return info.name + " (sm_" + std::to_string(info.major) + std::to_string(info.minor) + ", " +
         gib(info.total_bytes) + ")";
}

double copy_bandwidth_gbs(int device, size_t bytes) {
  const std::string reason = unavailable_reason(device);
  check(reason.empty(), reason);
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  DeviceBuffer a, b;
  a.reserve(bytes, "the bandwidth test");
  b.reserve(bytes, "the bandwidth test");
  cuda_check(cudaMemset(a.get(), 1, bytes), "cudaMemset");
  cudaEvent_t start = nullptr, stop = nullptr;
  cuda_check(cudaEventCreate(&start), "cudaEventCreate");
  cuda_check(cudaEventCreate(&stop), "cudaEventCreate");
  float best_ms = 0;
  for (int rep = 0; rep < 5; ++rep) {
    cuda_check(cudaEventRecord(start), "cudaEventRecord");
    cuda_check(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    cuda_check(cudaEventRecord(stop), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (rep == 0 || ms < best_ms) best_ms = ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * static_cast<double>(bytes) / (best_ms * 1e6);
}

std::unique_ptr<ForwardExecutor> make_executor(int device, StreamPriority priority) {
  const std::string reason = unavailable_reason(device);
  check(reason.empty(), "--device cuda: ", reason);
  return std::make_unique<CudaExecutor>(device, priority);
}

void upload(ForwardExecutor& executor, const Model& model) {
  auto* cuda = dynamic_cast<CudaExecutor*>(&executor);
  check(cuda != nullptr, "upload: not a CUDA executor");
  cuda->on_device(model);
}

void use_graphs(ForwardExecutor& executor, bool on) {
  auto* cuda = dynamic_cast<CudaExecutor*>(&executor);
  check(cuda != nullptr, "use_graphs: not a CUDA executor");
  cuda->use_graphs(on);
}

void use_attention(ForwardExecutor& executor, AttentionKernel kernel) {
  auto* cuda = dynamic_cast<CudaExecutor*>(&executor);
  check(cuda != nullptr, "use_attention: not a CUDA executor");
  cuda->use_attention(kernel);
}

std::vector<int32_t> last_argmax(ForwardExecutor& executor, int n) {
  auto* cuda = dynamic_cast<CudaExecutor*>(&executor);
  check(cuda != nullptr, "argmax: not a CUDA executor");
  return cuda->last_argmax(n);
}

}  // namespace parspec::cuda
