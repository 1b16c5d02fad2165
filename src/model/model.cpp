#include "model/model.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string_view>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/repack.h"
#include "model/attention_rows.h"

namespace parspec {

void Batch::add(int32_t token, int32_t position, int32_t parent, bool logits) {
  tokens.push_back(token);
  positions.push_back(position);
  parents.push_back(parent);
  want_logits.push_back(logits ? 1 : 0);
}

Batch Batch::chain(const KvCache& kv, std::span<const int32_t> tokens, bool all_logits) {
  check(kv.n_spec() == 0, "Batch::chain needs a cache without speculative cells");
  Batch b;
  const int32_t n = static_cast<int32_t>(tokens.size());
  for (int32_t i = 0; i < n; ++i)
    b.add(tokens[i], kv.n_committed() + i, i == 0 ? -1 : i - 1, all_logits || i == n - 1);
  return b;
}

namespace {

WeightMatrix load_matrix(const GgufFile& file, const std::string& name, int64_t n_in,
                         int64_t n_out) {
  const GgufTensorInfo* t = file.find_tensor(name);
  check(t != nullptr, file.path(), ": missing tensor ", name);
  check(t->dims.size() == 2 && t->dims[0] == n_in && t->dims[1] == n_out, file.path(), ": tensor ",
        name, " has shape [", t->dims[0], t->dims.size() > 1 ? ", " : "",
        t->dims.size() > 1 ? std::to_string(t->dims[1]) : std::string(), "], expected [", n_in,
        ", ", n_out, "]");
  return WeightMatrix{t->type, n_in, n_out, file.tensor_data(*t), file.transformed(*t)};
}

std::vector<float> load_vector(const GgufFile& file, const std::string& name, int64_t n) {
  const GgufTensorInfo* t = file.find_tensor(name);
  check(t != nullptr, file.path(), ": missing tensor ", name);
  check(t->n_elements == static_cast<uint64_t>(n), file.path(), ": tensor ", name, " has ",
        t->n_elements, " elements, expected ", n);
  std::vector<float> out(n);
  dequantize_row(t->type, file.tensor_data(*t), out.data(), n);
  return out;
}

// Every tensor of the file must be one the model reads: a tensor left over
// (say blk.5.* with block_count 2) means metadata and weights disagree, and
// running would silently drop layers.
void check_all_tensors_used(const GgufFile& file, const ModelConfig& c) {
  const std::vector<std::string> names = tensor_names(c, true);
  const std::set<std::string, std::less<>> used(names.begin(), names.end());
  for (const GgufTensorInfo& t : file.tensors())
    check(used.count(t.name) != 0, file.path(), ": tensor ", t.name, " is not used by a ",
          c.n_layer, "-layer ", c.arch, " model (", file.tensors().size(),
          " tensors in the file): its block_count or architecture does not match its weights");
}

RopeTable make_rope_table(const ModelConfig& c, float freq_base, float linear_scale,
                          const std::vector<float>& factors) {
  static std::atomic<uint64_t> tables{0};
  RopeTable t;
  const int n_pairs = c.rope_dims / 2;
  t.inv_freq.resize(n_pairs);
  for (int i = 0; i < n_pairs; ++i) {
    double inv = std::pow(static_cast<double>(freq_base), -2.0 * i / c.rope_dims);
    if (!factors.empty()) inv /= factors[i];
    inv /= linear_scale;
    t.inv_freq[i] = static_cast<float>(inv);
  }
  t.mscale = c.rope_attn_factor;
  t.key = ++tables;
  return t;
}

uint64_t matrix_bytes(const WeightMatrix& w) {
  return row_bytes(w.type, w.n_in) * w.n_out;
}

// On unless PARSPEC_REPACK=0: repacked Q4_0/Q8_0 (and, with AVX-512, Q4_K/Q6_K)
// weights decode faster.
bool repacking_wanted() {
  const char* env = std::getenv("PARSPEC_REPACK");
  return env == nullptr || std::string_view(env) != "0";
}

// The matrices the forward pass reads through matmul: the layers', and the
// output layer: output.weight, or the embeddings where the file ties them to
// it (embed then unpacks their rows one token at a time).
bool read_through_matmul(const GgufFile& file, const std::string& name) {
  if (name == "output.weight") return true;
  if (name == "token_embd.weight") return file.find_tensor("output.weight") == nullptr;
  if (!name.starts_with("blk.")) return false;
  for (const char* suffix :
       {".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_qkv.weight",
        ".attn_output.weight", ".ffn_gate.weight", ".ffn_up.weight", ".ffn_down.weight",
        ".ffn_gate_inp.weight", ".ffn_gate_exps.weight", ".ffn_up_exps.weight",
        ".ffn_down_exps.weight", ".ffn_gate_shexp.weight", ".ffn_up_shexp.weight",
        ".ffn_down_shexp.weight"}) {
    if (name.ends_with(suffix)) return true;
  }
  return false;
}

// Q4_0/Q8_0 (and under AVX-512 Q4_K/Q6_K) matrices repacked (kernels/repack.h) as the file is
// read, on `worker`'s threads.
TransformChooser repack_chooser(Worker& worker) {
  return [&worker](const GgufFile& file, const GgufTensorInfo& t) -> TensorTransform {
    if (!repack::repack_pays(t.type, active_isa()) || t.dims.size() < 2 || t.dims.size() > 3 ||
        t.dims[1] < repack::kGroupRows || !read_through_matmul(file, t.name))
      return nullptr;
    // A 3-D tensor is a stack of expert matrices (model/moe.h): each packed on its own.
    return [&worker, &t](const TensorReader& read, uint8_t* out) {
      const int64_t n_matrices = t.dims.size() == 3 ? t.dims[2] : 1;
      const size_t bytes = row_bytes(t.type, t.dims[0]) * static_cast<size_t>(t.dims[1]);
      for (int64_t e = 0; e < n_matrices; ++e) {
        const size_t base = bytes * static_cast<size_t>(e);
        repack::pack_matrix(
            worker, t.type, t.dims[0], t.dims[1],
            [&](size_t at, size_t n, uint8_t* dst) { return read(base + at, n, dst); }, out + base);
      }
    };
  };
}

}  // namespace

void Model::hold_in_memory(int layer_first, int layer_last, bool output) const {
  const std::string output_name = config_.tied_embeddings ? "token_embd.weight" : "output.weight";
  std::vector<const GgufTensorInfo*> wanted;
  for (const GgufTensorInfo& t : file_->tensors()) {
    if (output && t.name == output_name) {
      wanted.push_back(&t);
      continue;
    }
    if (!t.name.starts_with("blk.")) continue;
    const int layer = std::atoi(t.name.c_str() + 4);
    if (layer >= layer_first && layer < layer_last) wanted.push_back(&t);
  }
  if (!repacking_wanted()) {
    file_->hold_in_memory(wanted);
    return;
  }
  // Repacked as they are read in, as a copied file's are: a stage's multi-row forwards (tree
  // levels, verifications) run on the same kernels as in one process.
  Worker worker(default_thread_count());
  file_->hold_in_memory(wanted, repack_chooser(worker));
  const_cast<Model*>(this)->adopt_repacked_weights();
}

std::shared_ptr<Model> Model::load(const std::string& path, WeightLoading loading) {
  if (!repacking_wanted()) return from_gguf(GgufFile::open(path, loading));
  // Repacked while the file is read, on all threads: one pass, where reading and then
  // repacking took two.
  Worker worker(default_thread_count());
  return from_gguf(GgufFile::open(path, loading, repack_chooser(worker)));
}

std::shared_ptr<Model> Model::from_gguf(std::unique_ptr<GgufFile> file) {
  std::shared_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  const GgufFile& f = *m->file_;
  m->config_ = ModelConfig::from_gguf(f);
  const ModelConfig& c = m->config_;

  m->token_embd_ = load_matrix(f, "token_embd.weight", c.n_embd, c.n_vocab);
  m->output_ =
      c.tied_embeddings ? m->token_embd_ : load_matrix(f, "output.weight", c.n_embd, c.n_vocab);
  m->output_norm_ = load_vector(f, "output_norm.weight", c.n_embd);
  m->weight_bytes_ = matrix_bytes(m->output_);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights w;
    w.attn_norm = load_vector(f, p + "attn_norm.weight", c.n_embd);
    w.ffn_norm = load_vector(f, p + "ffn_norm.weight", c.n_embd);
    if (c.fused_qkv) {
      w.wqkv = load_matrix(f, p + "attn_qkv.weight", c.n_embd, c.q_dim() + 2 * c.kv_dim());
    } else {
      w.wq = load_matrix(f, p + "attn_q.weight", c.n_embd, c.q_dim());
      w.wk = load_matrix(f, p + "attn_k.weight", c.n_embd, c.kv_dim());
      w.wv = load_matrix(f, p + "attn_v.weight", c.n_embd, c.kv_dim());
    }
    w.wo = load_matrix(f, p + "attn_output.weight", c.q_dim(), c.n_embd);
    if (c.moe.enabled()) {
      w.moe = load_moe_weights(f, c.moe, c.n_embd, l);
      m->weight_bytes_ += moe_bytes_per_token(w.moe, c.moe);
    } else if (c.fused_gate_up) {
      w.w_up = load_matrix(f, p + "ffn_up.weight", c.n_embd, 2 * static_cast<int64_t>(c.n_ff));
    } else {
      w.w_gate = load_matrix(f, p + "ffn_gate.weight", c.n_embd, c.n_ff);
      w.w_up = load_matrix(f, p + "ffn_up.weight", c.n_embd, c.n_ff);
    }
    if (!c.moe.enabled()) w.w_down = load_matrix(f, p + "ffn_down.weight", c.n_ff, c.n_embd);
    if (c.qk_norm) {
      w.q_norm = load_vector(f, p + "attn_q_norm.weight", c.head_dim);
      w.k_norm = load_vector(f, p + "attn_k_norm.weight", c.head_dim);
    }
    if (c.post_norms) {
      w.post_attn_norm = load_vector(f, p + "post_attention_norm.weight", c.n_embd);
      w.post_ffn_norm = load_vector(f, p + "post_ffw_norm.weight", c.n_embd);
    }
    if (c.qkv_bias) {
      w.bq = load_vector(f, p + "attn_q.bias", c.q_dim());
      w.bk = load_vector(f, p + "attn_k.bias", c.kv_dim());
      w.bv = load_vector(f, p + "attn_v.bias", c.kv_dim());
    }
    for (const WeightMatrix* wm :
         {&w.wq, &w.wk, &w.wv, &w.wqkv, &w.wo, &w.w_gate, &w.w_up, &w.w_down})
      if (wm->data != nullptr) m->weight_bytes_ += matrix_bytes(*wm);
    m->layers_.push_back(std::move(w));
  }

  check_all_tensors_used(f, c);

  // Matrices repacked while the file was read (Model::load): the embeddings
  // only where they are the output layer too.
  check(!m->token_embd_.repacked || c.tied_embeddings, f.path(),
        ": untied embeddings were repacked");
  if (m->output_.repacked) m->repacked_bytes_ += matrix_bytes(m->output_);
  for (const LayerWeights& w : m->layers_) {
    for (const WeightMatrix* wm :
         {&w.wq, &w.wk, &w.wv, &w.wqkv, &w.wo, &w.w_gate, &w.w_up, &w.w_down, &w.moe.router,
          &w.moe.shared_gate, &w.moe.shared_up, &w.moe.shared_down})
      if (wm->data != nullptr && wm->repacked) m->repacked_bytes_ += matrix_bytes(*wm);
    for (const auto* experts : {&w.moe.gate, &w.moe.up, &w.moe.down})
      for (const WeightMatrix& wm : *experts)
        if (wm.repacked) m->repacked_bytes_ += matrix_bytes(wm);
  }

  // LongRoPE's short factors stand in for llama3's where the file has them.
  const std::vector<float>& factors =
      c.rope_factors_short.empty() ? c.rope_freq_factors : c.rope_factors_short;
  m->rope_global_ = make_rope_table(c, c.rope_freq_base, c.rope_linear_scale, factors);
  m->rope_sliding_ =
      c.rope_freq_base_sliding > 0
          ? make_rope_table(c, c.rope_freq_base_sliding, c.rope_linear_scale_sliding, factors)
          : m->rope_global_;
  if (!c.rope_factors_long.empty())
    m->rope_long_ = make_rope_table(c, c.rope_freq_base, c.rope_linear_scale, c.rope_factors_long);
  return m;
}

void Model::embed(std::span<const int32_t> tokens, float* hidden) const {
  const size_t bytes = row_bytes(token_embd_.type, config_.n_embd);
  std::vector<uint8_t> unpacked(token_embd_.repacked ? bytes : 0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    check(t >= 0 && t < config_.n_vocab, "token id ", t, " is out of range (vocabulary has ",
          config_.n_vocab, " tokens)");
    const uint8_t* row = token_embd_.data + bytes * t;
    if (token_embd_.repacked) {  // tied embeddings repacked for the output layer
      repack::unpack_row(token_embd_.type, config_.n_embd, config_.n_vocab, token_embd_.data, t,
                         unpacked.data());
      row = unpacked.data();
    }
    float* out = hidden + i * config_.n_embd;
    dequantize_row(token_embd_.type, row, out, config_.n_embd);
    if (config_.embedding_scale != 1.0f)
      for (int d = 0; d < config_.n_embd; ++d) out[d] *= config_.embedding_scale;
  }
}

namespace {

// The cosines then the sines of a model's rope angles at `position`, kept per
// thread: a forward rotates q and k at the same positions in every layer, and
// recomputing them (in double) each time cost ~1% of an 8-token forward of a
// 1B model. Direct-mapped by position; the values are rope_angles' own, so
// nothing changes but the time.
const float* memoized_rope_angles(const RopeTable& table, int32_t position) {
  const uint64_t model_key = table.key;
  const std::vector<float>& inv_freq = table.inv_freq;
  struct Entry {
    uint64_t model_key = 0;
    int32_t position = 0;
    std::vector<float> cos_sin;
  };
  thread_local std::array<Entry, 64> memo;
  Entry& e = memo[static_cast<uint32_t>(position) % memo.size()];
  const int n_pairs = static_cast<int>(inv_freq.size());
  if (e.model_key != model_key || e.position != position) {
    e.cos_sin.resize(2 * static_cast<size_t>(n_pairs));
    rope_angles(position, inv_freq.data(), n_pairs, e.cos_sin.data(), e.cos_sin.data() + n_pairs);
    if (table.mscale != 1.0f)
      for (float& x : e.cos_sin) x *= table.mscale;
    e.model_key = model_key;
    e.position = position;
  }
  return e.cos_sin.data();
}

// Temporaries of a layer that outlive the call, one set per thread: fresh
// vectors of a prompt's rows cost a page fault and a memset per page on every
// layer (measured: ~40% of a 512-token forward of a 1B model). Every user
// writes the rows it reads, so the memory is never cleared.
float* reuse(std::vector<float>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace

void Model::attention_block(Worker& worker, int layer, const Batch& batch, KvCache& kv,
                            int32_t first_cell, float* hidden) const {
  thread_local std::vector<float> o_buffer;
  const size_t n = batch.size() * static_cast<size_t>(config_.n_embd);
  float* o = reuse(o_buffer, n);
  attention_output(worker, layer, batch, kv, first_cell, hidden, o);
  add_inplace(hidden, o, static_cast<int>(n));
}

const RopeTable& Model::rope_table(int layer) const {
  if (long_rope()) return rope_long_;
  return config_.sliding(layer) ? rope_sliding_ : rope_global_;
}

void Model::use_context_size(int n_ctx) const {
  long_rope_.store(!rope_long_.inv_freq.empty() && n_ctx > config_.rope_original_context,
                   std::memory_order_relaxed);
}

void Model::project_qkv(Worker& worker, int layer, const float* hidden, int n,
                        std::span<const int32_t> positions, float* xn, float* q, float* k,
                        float* v) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_.at(layer);
  const int q_dim = c.q_dim(), kv_dim = c.kv_dim(), hd = c.head_dim;
  for (int i = 0; i < n; ++i)
    rmsnorm(hidden + static_cast<size_t>(i) * c.n_embd, w.attn_norm.data(), c.n_embd, c.rms_eps,
            xn + static_cast<size_t>(i) * c.n_embd);
  if (c.fused_qkv) {
    // One multiply into rows of q | k | v, split into the three buffers.
    thread_local std::vector<float> qkv_buffer;
    const size_t width = static_cast<size_t>(q_dim + 2 * kv_dim);
    float* qkv = reuse(qkv_buffer, width * n);
    matmul(worker, w.wqkv, xn, n, qkv);
    for (int i = 0; i < n; ++i) {
      const float* row = qkv + width * i;
      std::memcpy(q + static_cast<size_t>(i) * q_dim, row, sizeof(float) * q_dim);
      std::memcpy(k + static_cast<size_t>(i) * kv_dim, row + q_dim, sizeof(float) * kv_dim);
      std::memcpy(v + static_cast<size_t>(i) * kv_dim, row + q_dim + kv_dim,
                  sizeof(float) * kv_dim);
    }
  } else {
    const MatmulPart qkv[] = {{&w.wq, q}, {&w.wk, k}, {&w.wv, v}};
    matmul_many(worker, qkv, xn, n);
  }
  const RopeTable& table = rope_table(layer);
  for (int i = 0; i < n; ++i) {
    float* qi = q + static_cast<size_t>(i) * q_dim;
    float* ki = k + static_cast<size_t>(i) * kv_dim;
    float* vi = v + static_cast<size_t>(i) * kv_dim;
    if (c.qkv_bias) {
      add_inplace(qi, w.bq.data(), q_dim);
      add_inplace(ki, w.bk.data(), kv_dim);
      add_inplace(vi, w.bv.data(), kv_dim);
    }
    if (c.qk_norm) {  // in place: rmsnorm reads each element before writing it
      for (int h = 0; h < c.n_head; ++h)
        rmsnorm(qi + h * hd, w.q_norm.data(), hd, c.rms_eps, qi + h * hd);
      for (int h = 0; h < c.n_head_kv; ++h)
        rmsnorm(ki + h * hd, w.k_norm.data(), hd, c.rms_eps, ki + h * hd);
    }
    const float* cosines = memoized_rope_angles(table, positions[i]);
    const float* sines = cosines + table.inv_freq.size();
    rope_rotate(qi, c.n_head, hd, c.rope_dims, cosines, sines, c.rope_style);
    rope_rotate(ki, c.n_head_kv, hd, c.rope_dims, cosines, sines, c.rope_style);
  }
}

void Model::attention_projection(Worker& worker, int layer, const float* att, int n,
                                 float* out) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_.at(layer);
  matmul(worker, w.wo, att, n, out);
  if (!c.post_norms) return;
  for (int i = 0; i < n; ++i) {
    float* row = out + static_cast<size_t>(i) * c.n_embd;
    rmsnorm(row, w.post_attn_norm.data(), c.n_embd, c.rms_eps, row);
  }
}

void Model::attention_output(Worker& worker, int layer, const Batch& batch, KvCache& kv,
                             int32_t first_cell, const float* hidden, float* out,
                             AttentionProbe* probe) const {
  const ModelConfig& c = config_;
  const int n = static_cast<int>(batch.size());
  const int q_dim = c.q_dim(), kv_dim = c.kv_dim();
  thread_local std::vector<float> xn_buffer, q_buffer, k_buffer, v_buffer, att_buffer;
  const size_t rows = static_cast<size_t>(n);
  float* xn = reuse(xn_buffer, rows * c.n_embd);
  float* q = reuse(q_buffer, rows * q_dim);
  float* k = reuse(k_buffer, rows * kv_dim);
  float* v = reuse(v_buffer, rows * kv_dim);
  float* att = reuse(att_buffer, rows * q_dim);

  project_qkv(worker, layer, hidden, n, batch.positions, xn, q, k, v);
  for (int i = 0; i < n; ++i) {
    std::memcpy(kv.spec_k(layer, first_cell + i), k + static_cast<size_t>(i) * kv_dim,
                sizeof(float) * kv_dim);
    std::memcpy(kv.spec_v(layer, first_cell + i), v + static_cast<size_t>(i) * kv_dim,
                sizeof(float) * kv_dim);
  }
  if (probe != nullptr) {
    probe->q.assign(q, q + rows * q_dim);
    probe->k.assign(k, k + rows * kv_dim);
    probe->v.assign(v, v + rows * kv_dim);
  }

  std::vector<AttentionRow> row_list(n);
  for (int i = 0; i < n; ++i)
    row_list[i] = AttentionRow{&kv, first_cell + i, q + static_cast<size_t>(i) * q_dim,
                               att + static_cast<size_t>(i) * q_dim};
  attend_rows(worker, c, layer, row_list);
  attention_projection(worker, layer, att, n, out);
}

void Model::mlp_block(Worker& worker, int layer, int n, float* hidden) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_.at(layer);
  thread_local std::vector<float> xn_buffer, o_buffer;
  const size_t rows = static_cast<size_t>(n);
  float* xn = reuse(xn_buffer, rows * c.n_embd);
  float* o = reuse(o_buffer, rows * c.n_embd);
  for (size_t i = 0; i < rows; ++i)
    rmsnorm(hidden + i * c.n_embd, w.ffn_norm.data(), c.n_embd, c.rms_eps, xn + i * c.n_embd);
  ffn_rows(worker, layer, xn, n, o);
  if (c.post_norms)
    for (size_t i = 0; i < rows; ++i)
      rmsnorm(o + i * c.n_embd, w.post_ffn_norm.data(), c.n_embd, c.rms_eps, o + i * c.n_embd);
  add_inplace(hidden, o, n * c.n_embd);
}

void Model::ffn_rows(Worker& worker, int layer, const float* xn, int n, float* out) const {
  const ModelConfig& c = config_;
  const LayerWeights& w = layers_.at(layer);
  if (c.moe.enabled()) {
    moe_ffn(worker, c.moe, w.moe, c.n_embd, xn, n, out, expert_tally_);
    return;
  }
  thread_local std::vector<float> gate_buffer, up_buffer;
  const size_t rows = static_cast<size_t>(n);
  float* gate = reuse(gate_buffer, rows * c.n_ff);
  float* up = reuse(up_buffer, rows * c.n_ff);
  const int64_t ff = c.n_ff;
  if (c.fused_gate_up) {
    // One multiply into rows of gate | up, split into the two buffers.
    thread_local std::vector<float> fused_buffer;
    float* fused = reuse(fused_buffer, rows * 2 * ff);
    matmul(worker, w.w_up, xn, n, fused);
    for (size_t i = 0; i < rows; ++i) {
      std::memcpy(gate + i * ff, fused + i * 2 * ff, sizeof(float) * ff);
      std::memcpy(up + i * ff, fused + i * 2 * ff + ff, sizeof(float) * ff);
    }
  } else {
    const MatmulPart gate_up[] = {{&w.w_gate, gate}, {&w.w_up, up}};
    matmul_many(worker, gate_up, xn, n);
  }
  // The gated activation row by row on as many threads as it is worth (~2 ns
  // per element on one thread); each element is computed alike anywhere.
  const bool gelu = c.activation == FfnActivation::kGeluTanh;
  const int threads = worker.threads_for(2.0 * static_cast<double>(n) * static_cast<double>(ff));
  worker.parallel_chunks(n, std::max<int64_t>(1, n / (4 * threads)), threads,
                         [&](int64_t r0, int64_t r1) {
                           const int count = static_cast<int>((r1 - r0) * ff);
                           if (gelu) {
                             geglu_tanh(gate + r0 * ff, up + r0 * ff, count, gate + r0 * ff);
                           } else {
                             swiglu(gate + r0 * ff, up + r0 * ff, count, gate + r0 * ff);
                           }
                         });
  matmul(worker, w.w_down, gate, n, out);
}

void Model::forward_layers(Worker& worker, const Batch& batch, KvCache& kv, int32_t first_cell,
                           int layer_first, int layer_last, float* hidden) const {
  check(
      layer_first >= kv.layer_first() && layer_last <= kv.layer_last() && layer_first <= layer_last,
      "forward_layers: layers [", layer_first, ", ", layer_last, ") are not all in the cache's [",
      kv.layer_first(), ", ", kv.layer_last(), ")");
  for (int l = layer_first; l < layer_last; ++l) {
    attention_block(worker, l, batch, kv, first_cell, hidden);
    mlp_block(worker, l, static_cast<int>(batch.size()), hidden);
  }
}

void Model::output_logits(Worker& worker, const float* hidden, int n, float* logits) const {
  std::vector<float> xn(static_cast<size_t>(n) * config_.n_embd);
  for (int i = 0; i < n; ++i)
    rmsnorm(hidden + static_cast<size_t>(i) * config_.n_embd, output_norm_.data(), config_.n_embd,
            config_.rms_eps, &xn[static_cast<size_t>(i) * config_.n_embd]);
  matmul(worker, output_, xn.data(), n, logits);
  if (config_.final_logit_softcap > 0)
    for (int i = 0; i < n; ++i)
      softcap_inplace(logits + static_cast<size_t>(i) * config_.n_vocab, config_.n_vocab,
                      config_.final_logit_softcap);
}

std::vector<float> Model::forward(Worker& worker, const Batch& batch, KvCache& kv) const {
  const size_t n = batch.size();
  check(batch.positions.size() == n && batch.parents.size() == n && batch.want_logits.size() == n,
        "forward: batch arrays differ in length");
  if (n == 0) return {};
  check(kv.layer_first() == 0 && kv.layer_last() == config_.n_layer,
        "forward: the cache must cover all layers");
  std::vector<float> hidden(n * config_.n_embd);
  embed(batch.tokens, hidden.data());
  check(batch.input_embeddings.empty() || batch.input_embeddings.size() == n,
        "forward: input_embeddings must be empty or one per batch entry");
  for (size_t i = 0; i < batch.input_embeddings.size(); ++i)
    if (batch.input_embeddings[i] != nullptr)
      std::memcpy(&hidden[i * config_.n_embd], batch.input_embeddings[i],
                  sizeof(float) * config_.n_embd);
  const int32_t first_cell = kv.add_cells(batch.positions, batch.parents);
  forward_layers(worker, batch, kv, first_cell, 0, config_.n_layer, hidden.data());

  std::vector<float> selected;
  size_t n_out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!batch.want_logits[i]) continue;
    if (n_out != i)
      std::memcpy(&hidden[n_out * config_.n_embd], &hidden[i * config_.n_embd],
                  sizeof(float) * config_.n_embd);
    ++n_out;
  }
  std::vector<float> logits(n_out * config_.n_vocab);
  if (n_out > 0) output_logits(worker, hidden.data(), static_cast<int>(n_out), logits.data());
  // A row of NaN logits (broken weights or an overflow) would otherwise surface
  // far away, in sampling; only rows starting with NaN need the full scan.
  const size_t n_vocab = static_cast<size_t>(config_.n_vocab);
  for (size_t r = 0; r < n_out; ++r) {
    const float* row = logits.data() + r * n_vocab;
    if (!std::isnan(row[0])) continue;
    bool all_nan = true;
    for (size_t i = 1; i < n_vocab && all_nan; ++i) all_nan = std::isnan(row[i]);
    check(!all_nan, file_->path(), ": the model computed NaN for all ", n_vocab,
          " logits (its weights hold NaN/Inf or its activations overflow)");
  }
  return logits;
}

void Model::adopt_repacked_weights() {
  // Every matrix whose bytes lie in a tensor the file has rewritten now reads them packed.
  std::vector<std::pair<const uint8_t*, const uint8_t*>> packed;
  for (const GgufTensorInfo& t : file_->tensors())
    if (file_->transformed(t)) {
      const uint8_t* begin = file_->tensor_data(t);
      packed.emplace_back(begin, begin + t.n_bytes);
    }
  auto adopt = [&](WeightMatrix& wm) {
    if (wm.data == nullptr || wm.repacked) return;
    for (const auto& [begin, end] : packed)
      if (wm.data >= begin && wm.data < end) {
        wm.repacked = true;
        repacked_bytes_ += matrix_bytes(wm);
        return;
      }
  };
  adopt(output_);
  if (config_.tied_embeddings) token_embd_.repacked = output_.repacked;
  for (LayerWeights& w : layers_) {
    for (WeightMatrix* wm :
         {&w.wq, &w.wk, &w.wv, &w.wqkv, &w.wo, &w.w_gate, &w.w_up, &w.w_down, &w.moe.router,
          &w.moe.shared_gate, &w.moe.shared_up, &w.moe.shared_down})
      adopt(*wm);
    for (auto* experts : {&w.moe.gate, &w.moe.up, &w.moe.down})
      for (WeightMatrix& wm : *experts) adopt(wm);
  }
}

}  // namespace parspec
