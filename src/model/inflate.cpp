#include "model/inflate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/worker.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/random_model.h"

namespace parspec {

namespace {

// One line on a terminal, rewritten at each step so that a long run shows where
// it is without scrolling; the last step stays on screen with the total time.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled) {}
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  // An error thrown mid-way starts on a line of its own.
  ~ProgressLine() {
    if (open_) std::fputc('\n', stderr);
  }

  void show(const std::string& text) { print(text, false); }
  void finish(const std::string& text) { print(text, true); }

 private:
  void print(const std::string& text, bool last) {
    if (!enabled_) return;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "\r\033[Kmake-model: [%6.1fs] %s%s", seconds, text.c_str(),
                 last ? "\n" : "");
    std::fflush(stderr);
    open_ = !last;
  }

  bool enabled_;
  bool open_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

struct PresetShape {
  const char* name;
  int n_embd, n_layer, n_ff, kv_width;
};

// Widths and depths of real models; kv_width = n_head_kv * head_dim there.
constexpr PresetShape kPresets[] = {
    {"100m", 768, 12, 3072, 256},   // GPT-2-small-like width and depth, with GQA
    {"1b", 2048, 16, 8192, 512},    // Llama 3.2 1B
    {"3b", 3072, 28, 8192, 1024},   // Llama 3.2 3B
    {"8b", 4096, 32, 14336, 1024},  // Llama 3.1 8B
};

// The inflated model's dimensions and where each source head lands.
struct Plan {
  ModelConfig src;
  int n_embd = 0, n_layer = 0, n_ff = 0, n_head = 0, n_head_kv = 0;
  int head_dim = 0;
  int kv_copies = 1;        // big kv heads holding a copy of each source kv head
  std::vector<int> q_head;  // source query head -> big query head

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
};

Plan make_plan(const GgufFile& file, const InflateShape& shape) {
  Plan p;
  p.src = ModelConfig::from_gguf(file);
  check(p.src.arch == "llama" || p.src.arch == "qwen2", "inflate: ", file.path(), " is a ",
        p.src.arch, " model; inflation supports llama and qwen2 sources");
  const ModelConfig& s = p.src;
  const int hd = s.head_dim;
  p.head_dim = hd;
  p.n_embd = shape.n_embd > 0 ? shape.n_embd : s.n_embd;
  p.n_layer = shape.n_layer > 0 ? shape.n_layer : s.n_layer;
  p.n_ff = shape.n_ff > 0 ? shape.n_ff : s.n_ff;
  check(p.n_embd >= s.n_embd && p.n_layer >= s.n_layer && p.n_ff >= s.n_ff,
        "inflate: the target shape (n_embd ", p.n_embd, ", n_layer ", p.n_layer, ", n_ff ", p.n_ff,
        ") is smaller than the source's (n_embd ", s.n_embd, ", n_layer ", s.n_layer, ", n_ff ",
        s.n_ff, "): every dimension must be at least the source's");

  // Without attention.key_length, the head dimension is n_embd / n_head.
  const bool explicit_head_dim = file.has(s.arch + ".attention.key_length");
  if (shape.n_head > 0) {
    p.n_head = shape.n_head;
  } else {
    check(p.n_embd % hd == 0, "inflate: n_embd ", p.n_embd,
          " is not a multiple of the source's head dimension ", hd,
          " (the head dimension cannot change; pick n_embd = a multiple of ", hd, ")");
    p.n_head = p.n_embd / hd;
  }
  if (!explicit_head_dim)
    check(p.n_embd % p.n_head == 0 && p.n_embd / p.n_head == hd,
          "inflate: incompatible head dimension: n_embd ", p.n_embd, " / n_head ", p.n_head,
          " is not the source's head dimension ", hd, " (use n_head = ", p.n_embd / hd,
          p.n_embd % hd == 0 ? "" : ", with n_embd a multiple of the head dimension", ")");
  check(p.n_head >= s.n_head, "inflate: n_head ", p.n_head, " is smaller than the source's ",
        s.n_head);

  const int src_group = s.n_head / s.n_head_kv;
  if (shape.n_head_kv > 0) {
    p.n_head_kv = shape.n_head_kv;
  } else {
    check(p.n_head % src_group == 0, "inflate: n_head ", p.n_head,
          " is not a multiple of the source's group size ", src_group, "; give n_head_kv");
    p.n_head_kv = p.n_head / src_group;
  }
  check(p.n_head_kv > 0 && p.n_head % p.n_head_kv == 0, "inflate: n_head ", p.n_head,
        " is not a multiple of n_head_kv ", p.n_head_kv);
  // Each source kv head gets `kv_copies` consecutive big kv heads (copies of
  // its key/value weights), enough query slots for its whole group.
  const int big_group = p.n_head / p.n_head_kv;
  p.kv_copies = (src_group + big_group - 1) / big_group;
  check(s.n_head_kv * p.kv_copies <= p.n_head_kv, "inflate: n_head_kv ", p.n_head_kv,
        " is too small: the source's ", s.n_head_kv, " key/value heads each serve ", src_group,
        " query heads, which needs ", s.n_head_kv * p.kv_copies, " key/value heads of ", big_group,
        " query heads each");
  for (int h = 0; h < s.n_head; ++h) {
    const int kv = h / src_group, slot = h % src_group;
    p.q_head.push_back(kv * p.kv_copies * big_group + slot);
  }
  return p;
}

// Rows of the inflated tensor: for each, the source row it copies, or -1.
using RowSources = std::vector<int64_t>;

RowSources leading_rows(int64_t n_big, int64_t n_src) {
  RowSources rows(static_cast<size_t>(n_big), -1);
  for (int64_t r = 0; r < n_src; ++r) rows[r] = r;
  return rows;
}

// Query rows (or attention output columns): source head h's values go to big head q_head[h].
RowSources query_rows(const Plan& p) {
  RowSources rows(static_cast<size_t>(p.q_dim()), -1);
  for (int h = 0; h < p.src.n_head; ++h)
    for (int d = 0; d < p.head_dim; ++d)
      rows[static_cast<size_t>(p.q_head[h]) * p.head_dim + d] = int64_t(h) * p.head_dim + d;
  return rows;
}

// Key/value rows: source kv head j is copied into big kv heads j*kv_copies ...
RowSources kv_rows(const Plan& p) {
  RowSources rows(static_cast<size_t>(p.kv_dim()), -1);
  for (int j = 0; j < p.src.n_head_kv; ++j)
    for (int copy = 0; copy < p.kv_copies; ++copy)
      for (int d = 0; d < p.head_dim; ++d)
        rows[(static_cast<size_t>(j) * p.kv_copies + copy) * p.head_dim + d] =
            int64_t(j) * p.head_dim + d;
  return rows;
}

// The inverse view for columns: where each source column goes.
std::vector<int64_t> column_targets(const RowSources& sources, int64_t n_src) {
  std::vector<int64_t> targets(static_cast<size_t>(n_src), -1);
  for (size_t big = 0; big < sources.size(); ++big)
    if (sources[big] >= 0 && targets[sources[big]] < 0) targets[sources[big]] = int64_t(big);
  return targets;
}

void check_row_length(const std::string& name, DType type, int64_t n_in) {
  const auto& info = type_info(type);
  check(n_in % info.block_elems == 0, "inflate: ", name, " as ", info.name,
        " needs rows of a multiple of ", info.block_elems, " values, but its inflated rows have ",
        n_in);
}

class Inflater {
 public:
  Inflater(const GgufFile& file, const InflateOptions& options, int n_layer, bool tied)
      : file_(file),
        options_(options),
        n_layer_(n_layer),
        tied_(tied),
        worker_(std::max(1, available_cores())) {}

  GgufWriter& writer() { return writer_; }

  // The type of tensor `out_name` of the inflated model, made from `src`.
  DType type_for(const GgufTensorInfo& src, const std::string& out_name) const {
    if (options_.q4_k_m) return q4_k_m_type(out_name, n_layer_, tied_);
    return options_.weight_type.value_or(src.type);
  }

  const GgufTensorInfo& source(const std::string& name) const {
    const GgufTensorInfo* t = file_.find_tensor(name);
    check(t != nullptr, file_.path(), ": missing tensor ", name);
    return *t;
  }

  // A [n_in, rows.size()] matrix: big row r holds source row rows[r] with its
  // column k at column col_target[k]; everything else is zero.
  void add_matrix(const std::string& name, int64_t n_in, const RowSources& rows,
                  const std::vector<int64_t>& col_target) {
    add_stack(name, name, n_in, rows, col_target, 0);
  }

  // add_matrix of `name` written as `out_name`: `copies` == 0 the matrix
  // itself, else a [n_in, rows.size(), copies] stack of identical copies (experts).
  void add_stack(const std::string& name, const std::string& out_name, int64_t n_in,
                 const RowSources& rows, const std::vector<int64_t>& col_target, int64_t copies) {
    const GgufTensorInfo& src = source(name);
    check(src.dims.size() == 2 && src.dims[0] == int64_t(col_target.size()), file_.path(),
          ": tensor ", name, " does not have the shape its configuration implies");
    const DType type = type_for(src, out_name);
    check_row_length(name, type, n_in);
    const int64_t src_n_in = src.dims[0];
    const size_t src_row_bytes = row_bytes(src.type, src_n_in);
    const uint8_t* src_data = file_.tensor_data(src);
    const size_t out_row_bytes = row_bytes(type, n_in);
    const int64_t n_out = int64_t(rows.size());

    std::vector<float> zeros(static_cast<size_t>(n_in), 0.0f);
    std::vector<uint8_t> zero_row(out_row_bytes);
    quantize_row(type, zeros.data(), zero_row.data(), n_in);

    std::vector<uint8_t> data(out_row_bytes * size_t(n_out));
    worker_.parallel_for(n_out, [&](int64_t begin, int64_t end) {
      std::vector<float> src_row(static_cast<size_t>(src_n_in)), row(static_cast<size_t>(n_in));
      for (int64_t r = begin; r < end; ++r) {
        uint8_t* out = data.data() + size_t(r) * out_row_bytes;
        if (rows[r] < 0) {
          std::copy(zero_row.begin(), zero_row.end(), out);
          continue;
        }
        dequantize_row(src.type, src_data + size_t(rows[r]) * src_row_bytes, src_row.data(),
                       src_n_in);
        std::fill(row.begin(), row.end(), 0.0f);
        for (int64_t k = 0; k < src_n_in; ++k) row[col_target[k]] = src_row[k];
        quantize_row(type, row.data(), out, n_in);
      }
    });
    if (copies == 0) {
      writer_.add_tensor(out_name, {n_in, n_out}, type, data.data(), data.size());
      return;
    }
    std::vector<uint8_t> stack(data.size() * size_t(copies));
    for (int64_t c = 0; c < copies; ++c)
      std::copy(data.begin(), data.end(), stack.begin() + ptrdiff_t(data.size() * size_t(c)));
    writer_.add_tensor(out_name, {n_in, n_out, copies}, type, stack.data(), stack.size());
  }

  // A random F32 router [n_in, n_expert]: N(0, 1/sqrt(n_src)) in the source's
  // columns (col_target), zero in the padding, from `seed` and the name.
  void add_router(const std::string& name, int64_t n_in, int64_t n_expert,
                  const std::vector<int64_t>& col_target, uint64_t seed) {
    std::vector<float> values(size_t(n_in * n_expert), 0.0f);
    uint64_t state = seed;
    for (unsigned char c : name) state = state * 0x100000001B3ull + c;
    const double scale = 1.0 / std::sqrt(double(col_target.size()));
    for (int64_t e = 0; e < n_expert; ++e)
      for (int64_t col : col_target) {
        // Two uniforms from a 64-bit LCG, then Box-Muller: one normal each.
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const double u1 = (double((state >> 11) + 1)) * 0x1.0p-53;
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const double u2 = double(state >> 11) * 0x1.0p-53;
        values[size_t(e * n_in + col)] =
            float(scale * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979 * u2));
      }
    writer_.add_tensor(name, {n_in, n_expert}, DType::F32, values.data(),
                       values.size() * sizeof(float));
  }

  // An all-zero [n_in, n_out] matrix (a layer beyond the source's), or with
  // `copies` > 0 a [n_in, n_out, copies] stack of them.
  void add_zero_matrix(const std::string& name, int64_t n_in, int64_t n_out, DType type,
                       int64_t copies = 0) {
    n_out *= std::max<int64_t>(copies, 1);
    check_row_length(name, type, n_in);
    std::vector<float> zeros(static_cast<size_t>(n_in), 0.0f);
    const size_t bytes = row_bytes(type, n_in);
    std::vector<uint8_t> zero_row(bytes);
    quantize_row(type, zeros.data(), zero_row.data(), n_in);
    std::vector<uint8_t> data(bytes * size_t(n_out));
    for (int64_t r = 0; r < n_out; ++r)
      std::copy(zero_row.begin(), zero_row.end(), data.begin() + ptrdiff_t(size_t(r) * bytes));
    if (copies > 0)
      writer_.add_tensor(name, {n_in, n_out / copies, copies}, type, data.data(), data.size());
    else
      writer_.add_tensor(name, {n_in, n_out}, type, data.data(), data.size());
  }

  // An F32 vector: element i is the source's element rows[i] times `scale`, or `fill`.
  void add_vector(const std::string& name, const RowSources& rows, float scale, float fill) {
    const GgufTensorInfo& src = source(name);
    std::vector<float> values(static_cast<size_t>(src.n_elements));
    dequantize_row(src.type, file_.tensor_data(src), values.data(), int64_t(src.n_elements));
    std::vector<float> out(rows.size(), fill);
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i] >= 0) out[i] = values.at(static_cast<size_t>(rows[i])) * scale;
    add_f32(name, out);
  }

  void add_f32(const std::string& name, const std::vector<float>& values) {
    writer_.add_tensor(name, {int64_t(values.size())}, DType::F32, values.data(),
                       values.size() * sizeof(float));
  }

 private:
  const GgufFile& file_;
  const InflateOptions& options_;
  int n_layer_;  // of the inflated model
  bool tied_;    // output = token embeddings
  Worker worker_;
  GgufWriter writer_;
};

// The tensors a llama/qwen2 model of this configuration consists of.
std::string shape_text(const Plan& p) {
  return "n_embd " + std::to_string(p.n_embd) + ", n_layer " + std::to_string(p.n_layer) +
         ", n_ff " + std::to_string(p.n_ff) + ", n_head " + std::to_string(p.n_head) + " (kv " +
         std::to_string(p.n_head_kv) + ")";
}

}  // namespace

const char* inflate_preset_names() {
  return "100m, 1b, 3b, 8b";
}

InflateShape inflate_preset(const std::string& name, int head_dim) {
  for (const PresetShape& preset : kPresets) {
    if (name != preset.name) continue;
    check(head_dim > 0 && preset.n_embd % head_dim == 0 && preset.kv_width % head_dim == 0,
          "inflate: preset ", name, " (n_embd ", preset.n_embd, ", key/value width ",
          preset.kv_width, ") cannot hold heads of dimension ", head_dim,
          "; give the shape explicitly");
    InflateShape shape;
    shape.n_embd = preset.n_embd;
    shape.n_layer = preset.n_layer;
    shape.n_ff = preset.n_ff;
    shape.n_head = preset.n_embd / head_dim;
    shape.n_head_kv = preset.kv_width / head_dim;
    return shape;
  }
  fail("inflate: unknown preset '", name, "' (expected one of ", inflate_preset_names(), ")");
}

void inflate_model(const std::string& source_path, const InflateOptions& options,
                   const std::string& output_path) {
  if (options.weight_type)
    check(*options.weight_type != DType::Q8_K,
          "inflate: q8_K is an activation type, not a weight type");
  const auto file = GgufFile::open(source_path);
  const Plan plan = make_plan(*file, options.shape);
  const ModelConfig& s = plan.src;
  const bool has_rope_freqs = file->find_tensor("rope_freqs.weight") != nullptr;
  check(!s.moe.enabled(), source_path,
        ": a mixture-of-experts model cannot be inflated; inflate a dense one (--experts makes "
        "its FFNs experts)");
  {
    const std::vector<std::string> expected = tensor_names(s, has_rope_freqs);
    for (const GgufTensorInfo& t : file->tensors())
      check(std::find(expected.begin(), expected.end(), t.name) != expected.end(), source_path,
            ": tensor ", t.name, " is not part of a llama/qwen2 model parspec can inflate");
  }

  ProgressLine progress(options.progress);
  progress.show("inflating " + source_path + " into " + shape_text(plan));

  Inflater inflater(*file, options, plan.n_layer, s.tied_embeddings);
  GgufWriter& w = inflater.writer();
  // Everything the source says (tokenizer, RoPE, context, ...), then the new shape.
  for (const auto& [key, value] : file->metadata()) w.set(key, value);
  const std::string a = s.arch + ".";
  w.set(a + "embedding_length", GgufValue::u32(uint32_t(plan.n_embd)));
  w.set(a + "block_count", GgufValue::u32(uint32_t(plan.n_layer)));
  w.set(a + "feed_forward_length", GgufValue::u32(uint32_t(plan.n_ff)));
  w.set(a + "attention.head_count", GgufValue::u32(uint32_t(plan.n_head)));
  w.set(a + "attention.head_count_kv", GgufValue::u32(uint32_t(plan.n_head_kv)));
  if (options.context_length > 0)
    w.set(a + "context_length", GgufValue::u32(uint32_t(options.context_length)));
  // RMSNorm over the zero-padded width sees mean(x^2) * n_src / n_big: scaling
  // epsilon by the same ratio makes the denominator sqrt(n_src / n_big) times
  // the source's, which the norm weights (times sqrt(n_src / n_big)) cancel.
  const double width_ratio = double(s.n_embd) / double(plan.n_embd);
  const float norm_scale = float(std::sqrt(width_ratio));
  w.set(a + "attention.layer_norm_rms_epsilon", GgufValue::f32(float(s.rms_eps * width_ratio)));
  const int64_t experts = options.experts;
  if (experts > 0) {
    check(s.arch == "llama", "inflate: experts need a llama source (its experts' weights are ",
          "renormalised to sum 1, which keeps the function), not ", s.arch);
    check(options.experts_used > 0 && options.experts_used <= options.experts,
          "inflate: experts used per token must be in 1..", options.experts, ", got ",
          options.experts_used);
    w.set(a + "expert_count", GgufValue::u32(uint32_t(options.experts)));
    w.set(a + "expert_used_count", GgufValue::u32(uint32_t(options.experts_used)));
  }
  if (options.q4_k_m)
    w.set("general.file_type", GgufValue::u32(kMostlyQ4_K_M));
  else if (options.weight_type)
    w.set("general.file_type", GgufValue::u32(gguf_file_type(*options.weight_type)));
  const std::string src_name = s.name.empty() ? std::string("model") : s.name;
  w.set("general.name", GgufValue::string(src_name + "-inflated"));
  w.set("general.description",
        GgufValue::string("parspec make-model --inflate: " + src_name + " (n_embd " +
                          std::to_string(s.n_embd) + ", n_layer " + std::to_string(s.n_layer) +
                          ") embedded with zero padding into " + shape_text(plan) +
                          "; computes the source's function (a benchmark device)"));

  const RowSources embd_rows = leading_rows(plan.n_embd, s.n_embd);
  const std::vector<int64_t> embd_cols = column_targets(embd_rows, s.n_embd);
  const RowSources ff_rows = leading_rows(plan.n_ff, s.n_ff);
  const std::vector<int64_t> ff_cols = column_targets(ff_rows, s.n_ff);
  const RowSources q_rows = query_rows(plan);
  const std::vector<int64_t> q_cols = column_targets(q_rows, s.q_dim());
  const RowSources k_rows = kv_rows(plan);
  const RowSources vocab_rows = leading_rows(s.n_vocab, s.n_vocab);

  inflater.add_matrix("token_embd.weight", plan.n_embd, vocab_rows, embd_cols);
  if (has_rope_freqs)
    inflater.add_vector("rope_freqs.weight", leading_rows(s.rope_dims / 2, s.rope_dims / 2), 1.0f,
                        1.0f);
  progress.show("embeddings done");

  for (int l = 0; l < plan.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (l < s.n_layer) {
      inflater.add_vector(p + "attn_norm.weight", embd_rows, norm_scale, 0.0f);
      inflater.add_matrix(p + "attn_q.weight", plan.n_embd, q_rows, embd_cols);
      inflater.add_matrix(p + "attn_k.weight", plan.n_embd, k_rows, embd_cols);
      inflater.add_matrix(p + "attn_v.weight", plan.n_embd, k_rows, embd_cols);
      if (s.qkv_bias) {
        inflater.add_vector(p + "attn_q.bias", q_rows, 1.0f, 0.0f);
        inflater.add_vector(p + "attn_k.bias", k_rows, 1.0f, 0.0f);
        inflater.add_vector(p + "attn_v.bias", k_rows, 1.0f, 0.0f);
      }
      inflater.add_matrix(p + "attn_output.weight", plan.q_dim(), embd_rows, q_cols);
      inflater.add_vector(p + "ffn_norm.weight", embd_rows, norm_scale, 0.0f);
      if (experts > 0) {
        inflater.add_router(p + "ffn_gate_inp.weight", plan.n_embd, experts, embd_cols,
                            options.router_seed);
        inflater.add_stack(p + "ffn_gate.weight", p + "ffn_gate_exps.weight", plan.n_embd, ff_rows,
                           embd_cols, experts);
        inflater.add_stack(p + "ffn_up.weight", p + "ffn_up_exps.weight", plan.n_embd, ff_rows,
                           embd_cols, experts);
        inflater.add_stack(p + "ffn_down.weight", p + "ffn_down_exps.weight", plan.n_ff, embd_rows,
                           ff_cols, experts);
      } else {
        inflater.add_matrix(p + "ffn_gate.weight", plan.n_embd, ff_rows, embd_cols);
        inflater.add_matrix(p + "ffn_up.weight", plan.n_embd, ff_rows, embd_cols);
        inflater.add_matrix(p + "ffn_down.weight", plan.n_ff, embd_rows, ff_cols);
      }
    } else {
      // An identity through the residual: attention and MLP add zeros. Weight
      // types follow the source's last layer when no type is given.
      const std::string last = "blk." + std::to_string(s.n_layer - 1) + ".";
      const auto type_of = [&](const char* t) {
        return inflater.type_for(inflater.source(last + t), p + t);
      };
      inflater.add_f32(p + "attn_norm.weight", std::vector<float>(size_t(plan.n_embd), 1.0f));
      inflater.add_zero_matrix(p + "attn_q.weight", plan.n_embd, plan.q_dim(),
                               type_of("attn_q.weight"));
      inflater.add_zero_matrix(p + "attn_k.weight", plan.n_embd, plan.kv_dim(),
                               type_of("attn_k.weight"));
      inflater.add_zero_matrix(p + "attn_v.weight", plan.n_embd, plan.kv_dim(),
                               type_of("attn_v.weight"));
      if (s.qkv_bias) {
        inflater.add_f32(p + "attn_q.bias", std::vector<float>(size_t(plan.q_dim()), 0.0f));
        inflater.add_f32(p + "attn_k.bias", std::vector<float>(size_t(plan.kv_dim()), 0.0f));
        inflater.add_f32(p + "attn_v.bias", std::vector<float>(size_t(plan.kv_dim()), 0.0f));
      }
      inflater.add_zero_matrix(p + "attn_output.weight", plan.q_dim(), plan.n_embd,
                               type_of("attn_output.weight"));
      inflater.add_f32(p + "ffn_norm.weight", std::vector<float>(size_t(plan.n_embd), 1.0f));
      // Experts beyond the source's layers add zeros too, but routed as any
      // layer's: they cost what a mixture-of-experts layer costs.
      const std::string ffn = experts > 0 ? "_exps.weight" : ".weight";
      if (experts > 0)
        inflater.add_router(p + "ffn_gate_inp.weight", plan.n_embd, experts, embd_cols,
                            options.router_seed);
      inflater.add_zero_matrix(p + "ffn_gate" + ffn, plan.n_embd, plan.n_ff,
                               type_of("ffn_gate.weight"), experts);
      inflater.add_zero_matrix(p + "ffn_up" + ffn, plan.n_embd, plan.n_ff, type_of("ffn_up.weight"),
                               experts);
      inflater.add_zero_matrix(p + "ffn_down" + ffn, plan.n_ff, plan.n_embd,
                               type_of("ffn_down.weight"), experts);
    }
    progress.show("layer " + std::to_string(l + 1) + "/" + std::to_string(plan.n_layer) + " done");
  }

  inflater.add_vector("output_norm.weight", embd_rows, norm_scale, 0.0f);
  if (!s.tied_embeddings) inflater.add_matrix("output.weight", plan.n_embd, vocab_rows, embd_cols);
  progress.show("writing " + output_path);
  w.write(output_path);
  progress.finish("done");
}

}  // namespace parspec
