#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/gguf.h"

namespace parspec {

namespace {

// The most experts a file may declare: llama.cpp's LLAMA_MAX_EXPERTS at the
// snapshot whose files parspec reads.
constexpr int kMaxExperts = 256;

float* reuse(std::vector<float>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

std::string shape_text(const GgufTensorInfo& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.dims.size(); ++i) s += (i ? ", " : "") + std::to_string(t.dims[i]);
  return s + "]";
}

const GgufTensorInfo& find_shaped(const GgufFile& file, const std::string& name,
                                  const std::vector<int64_t>& dims) {
  const GgufTensorInfo* t = file.find_tensor(name);
  check(t != nullptr, file.path(), ": missing tensor ", name,
        " (a mixture-of-experts layer needs it)");
  bool same = t->dims.size() == dims.size();
  for (size_t i = 0; same && i < dims.size(); ++i) same = t->dims[i] == dims[i];
  if (!same) {
    std::string want = "[";
    for (size_t i = 0; i < dims.size(); ++i) want += (i ? ", " : "") + std::to_string(dims[i]);
    fail(file.path(), ": tensor ", name, " has shape ", shape_text(*t), ", expected ", want, "]");
  }
  return *t;
}

WeightMatrix matrix_of(const GgufFile& file, const GgufTensorInfo& t, int64_t n_in, int64_t n_out,
                       int64_t index) {
  const size_t bytes = row_bytes(t.type, n_in) * static_cast<size_t>(n_out);
  return WeightMatrix{t.type, n_in, n_out, file.tensor_data(t) + bytes * static_cast<size_t>(index),
                      file.transformed(t)};
}

// One expert tensor [n_in, n_out, n_expert] as a matrix view per expert.
std::vector<WeightMatrix> expert_matrices(const GgufFile& file, const std::string& name,
                                          int64_t n_in, int64_t n_out, int n_expert) {
  const GgufTensorInfo& t = find_shaped(file, name, {n_in, n_out, n_expert});
  std::vector<WeightMatrix> views;
  for (int e = 0; e < n_expert; ++e) views.push_back(matrix_of(file, t, n_in, n_out, e));
  return views;
}

uint64_t matrix_bytes(const WeightMatrix& w) {
  return w.data == nullptr ? 0 : row_bytes(w.type, w.n_in) * w.n_out;
}

// SwiGLU over n rows of width ff, in place into gate.
void swiglu_rows(Worker& worker, float* gate, const float* up, int n, int64_t ff) {
  const int threads = worker.threads_for(2.0 * static_cast<double>(n) * static_cast<double>(ff));
  worker.parallel_chunks(
      n, std::max<int64_t>(1, n / (4 * threads)), threads, [&](int64_t r0, int64_t r1) {
        swiglu(gate + r0 * ff, up + r0 * ff, static_cast<int>((r1 - r0) * ff), gate + r0 * ff);
      });
}

// The top `k` experts of one token's router logits and their weights, in
// choice order (highest probability first, ties to the lower index), as
// llama.cpp's softmax → top-k → (optional) renormalisation computes them.
void route_token(const float* logits, int n_expert, int k, bool normalize, int* chosen,
                 float* weights) {
  float max_logit = logits[0];
  for (int e = 1; e < n_expert; ++e) max_logit = std::max(max_logit, logits[e]);
  thread_local std::vector<float> probs;
  thread_local std::vector<int> order;
  probs.resize(n_expert);
  order.resize(n_expert);
  float sum = 0;
  for (int e = 0; e < n_expert; ++e) {
    probs[e] = std::exp(logits[e] - max_logit);
    sum += probs[e];
  }
  for (int e = 0; e < n_expert; ++e) probs[e] /= sum;
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [](int a, int b) {
    return probs[a] != probs[b] ? probs[a] > probs[b] : a < b;
  });
  float chosen_sum = 0;
  for (int j = 0; j < k; ++j) {
    chosen[j] = order[j];
    weights[j] = probs[order[j]];
    chosen_sum += weights[j];
  }
  if (normalize)
    for (int j = 0; j < k; ++j) weights[j] /= chosen_sum;
}

}  // namespace

MoeConfig read_moe_config(const GgufFile& file, const std::string& arch, int n_ff) {
  MoeConfig m;
  const std::string& path = file.path();
  const std::string p = arch + ".";
  const bool moe_arch = arch == "qwen2moe" || arch == "qwen3moe";
  m.n_expert = static_cast<int>(file.get_int(p + "expert_count", 0));
  m.n_expert_used = static_cast<int>(file.get_int(p + "expert_used_count", 0));
  if (!moe_arch && m.n_expert == 0) {
    check(m.n_expert_used == 0, path, ": ", p, "expert_used_count is ", m.n_expert_used,
          " but expert_count is missing or 0");
    return m;
  }
  check(moe_arch || arch == "llama", path, ": ", p, "expert_count is ", m.n_expert,
        ", but parspec runs experts only in llama, qwen2moe and qwen3moe files");
  check(m.n_expert > 0, path, ": ", arch, " needs ", p, "expert_count > 0");
  check(m.n_expert <= kMaxExperts, path, ": ", p, "expert_count ", m.n_expert, " is more than the ",
        kMaxExperts, " experts supported");
  check(m.n_expert_used > 0 && m.n_expert_used <= m.n_expert, path, ": ", p,
        "expert_used_count must be in 1..expert_count (", m.n_expert, "), got ", m.n_expert_used);
  if (arch == "llama") {
    // Mixtral: every expert is as wide as feed_forward_length.
    m.n_ff_expert = n_ff;
    m.normalize_weights = true;
  } else if (arch == "qwen2moe") {
    m.n_ff_expert =
        static_cast<int>(file.get_int(p + "expert_feed_forward_length", n_ff / m.n_expert_used));
    m.n_ff_shared = static_cast<int>(file.get_int(p + "expert_shared_feed_forward_length", n_ff));
    check(m.n_ff_shared > 0 && m.n_ff_shared <= (1 << 20), path, ": bad ", p,
          "expert_shared_feed_forward_length ", m.n_ff_shared);
    m.normalize_weights = false;
  } else {  // qwen3moe
    check(file.has(p + "expert_feed_forward_length"), path, ": missing key ", p,
          "expert_feed_forward_length");
    m.n_ff_expert = static_cast<int>(file.get_int(p + "expert_feed_forward_length"));
    m.normalize_weights = true;
  }
  check(m.n_ff_expert > 0 && m.n_ff_expert <= (1 << 20), path, ": bad expert feed-forward width ",
        m.n_ff_expert);
  return m;
}

std::vector<std::string> moe_tensor_names(const MoeConfig& moe, const std::string& prefix) {
  std::vector<std::string> names;
  for (const char* t : {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                        "ffn_down_exps.weight"})
    names.push_back(prefix + t);
  if (moe.n_ff_shared > 0)
    for (const char* t : {"ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight",
                          "ffn_up_shexp.weight", "ffn_down_shexp.weight"})
      names.push_back(prefix + t);
  return names;
}

MoeWeights load_moe_weights(const GgufFile& file, const MoeConfig& moe, int n_embd, int layer) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t ne = moe.n_expert, ff = moe.n_ff_expert;
  // Files of old converters hold one 2-D tensor per expert (blk.N.ffn_gate.E.weight).
  check(file.find_tensor(p + "ffn_gate.0.weight") == nullptr, file.path(), ": tensor ", p,
        "ffn_gate.0.weight: experts stored one tensor each (an old conversion) are not supported; "
        "convert the model again with a current llama.cpp (3-D ffn_*_exps tensors)");
  MoeWeights w;
  w.router =
      matrix_of(file, find_shaped(file, p + "ffn_gate_inp.weight", {n_embd, ne}), n_embd, ne, 0);
  w.gate = expert_matrices(file, p + "ffn_gate_exps.weight", n_embd, ff, moe.n_expert);
  w.up = expert_matrices(file, p + "ffn_up_exps.weight", n_embd, ff, moe.n_expert);
  w.down = expert_matrices(file, p + "ffn_down_exps.weight", ff, n_embd, moe.n_expert);
  if (moe.n_ff_shared > 0) {
    const int64_t sff = moe.n_ff_shared;
    w.shared_gate = matrix_of(file, find_shaped(file, p + "ffn_gate_shexp.weight", {n_embd, sff}),
                              n_embd, sff, 0);
    w.shared_up = matrix_of(file, find_shaped(file, p + "ffn_up_shexp.weight", {n_embd, sff}),
                            n_embd, sff, 0);
    w.shared_down = matrix_of(file, find_shaped(file, p + "ffn_down_shexp.weight", {sff, n_embd}),
                              sff, n_embd, 0);
    const GgufTensorInfo& g = find_shaped(file, p + "ffn_gate_inp_shexp.weight", {n_embd});
    w.shared_router.resize(n_embd);
    dequantize_row(g.type, file.tensor_data(g), w.shared_router.data(), n_embd);
  }
  return w;
}

uint64_t moe_bytes_per_token(const MoeWeights& w, const MoeConfig& moe) {
  const uint64_t expert = matrix_bytes(w.gate[0]) + matrix_bytes(w.up[0]) + matrix_bytes(w.down[0]);
  return matrix_bytes(w.router) + expert * static_cast<uint64_t>(moe.n_expert_used) +
         matrix_bytes(w.shared_gate) + matrix_bytes(w.shared_up) + matrix_bytes(w.shared_down);
}

void moe_ffn(Worker& worker, const MoeConfig& moe, const MoeWeights& w, int n_embd, const float* xn,
             int n, float* out, ExpertTally& tally) {
  const int ne = moe.n_expert, k = moe.n_expert_used;
  const int64_t ff = moe.n_ff_expert;
  const size_t rows = static_cast<size_t>(n), embd = static_cast<size_t>(n_embd);
  thread_local std::vector<float> logits_buffer, weight_buffer, x_buffer, gate_buffer, up_buffer,
      y_buffer, slot_buffer;
  thread_local std::vector<int> chosen, members;
  float* logits = reuse(logits_buffer, rows * ne);
  float* weights = reuse(weight_buffer, rows * k);
  chosen.resize(rows * k);
  matmul(worker, w.router, xn, n, logits);
  for (size_t i = 0; i < rows; ++i)
    route_token(logits + i * ne, ne, k, moe.normalize_weights, &chosen[i * k], weights + i * k);

  // Each touched expert over the rows routed to it, in expert order; row
  // (i, j)'s result lands in slot i·k + j, whatever else was gathered.
  float* slots = reuse(slot_buffer, rows * k * embd);
  int64_t touched = 0;
  for (int e = 0; e < ne; ++e) {
    members.clear();
    for (size_t s = 0; s < rows * k; ++s)
      if (chosen[s] == e) members.push_back(static_cast<int>(s));
    if (members.empty()) continue;
    ++touched;
    const int m = static_cast<int>(members.size());
    float* x = reuse(x_buffer, members.size() * embd);
    for (int r = 0; r < m; ++r)
      std::memcpy(x + r * embd, xn + static_cast<size_t>(members[r] / k) * embd,
                  sizeof(float) * embd);
    float* gate = reuse(gate_buffer, members.size() * ff);
    float* up = reuse(up_buffer, members.size() * ff);
    float* y = reuse(y_buffer, members.size() * embd);
    const MatmulPart gate_up[] = {{&w.gate[e], gate}, {&w.up[e], up}};
    matmul_many(worker, gate_up, x, m);
    swiglu_rows(worker, gate, up, m, ff);
    matmul(worker, w.down[e], gate, m, y);
    for (int r = 0; r < m; ++r)
      std::memcpy(slots + static_cast<size_t>(members[r]) * embd, y + r * embd,
                  sizeof(float) * embd);
  }
  tally.layer_passes.fetch_add(1, std::memory_order_relaxed);
  tally.experts_touched.fetch_add(touched, std::memory_order_relaxed);

  // Weighted sum in choice order, as llama.cpp adds its top-k views.
  for (size_t i = 0; i < rows; ++i) {
    float* o = out + i * embd;
    for (int j = 0; j < k; ++j) {
      const float wj = weights[i * k + j];
      const float* s = slots + (i * k + j) * embd;
      if (j == 0) {
        for (size_t d = 0; d < embd; ++d) o[d] = s[d] * wj;
      } else {
        for (size_t d = 0; d < embd; ++d) o[d] += s[d] * wj;
      }
    }
  }

  if (moe.n_ff_shared == 0) return;
  const int64_t sff = moe.n_ff_shared;
  float* gate = reuse(gate_buffer, rows * sff);
  float* up = reuse(up_buffer, rows * sff);
  float* y = reuse(y_buffer, rows * embd);
  const MatmulPart gate_up[] = {{&w.shared_gate, gate}, {&w.shared_up, up}};
  matmul_many(worker, gate_up, xn, n);
  swiglu_rows(worker, gate, up, n, sff);
  matmul(worker, w.shared_down, gate, n, y);
  for (size_t i = 0; i < rows; ++i) {
    const float* x = xn + i * embd;
    float logit = 0;
    for (size_t d = 0; d < embd; ++d) logit += w.shared_router[d] * x[d];
    const float g = 1.0f / (1.0f + std::exp(-logit));
    for (size_t d = 0; d < embd; ++d) out[i * embd + d] += y[i * embd + d] * g;
  }
}

}  // namespace parspec
