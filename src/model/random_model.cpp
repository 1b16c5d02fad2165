#include "model/random_model.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/worker.h"
#include "model/gguf.h"
#include "model/model_config.h"

namespace parspec {

namespace {

constexpr double kPi = 3.14159265358979323846;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// xoshiro256** seeded through splitmix64, with Box-Muller normals. Our own
// generator: <random>'s distributions differ between standard libraries.
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) {
    for (auto& word : s_) word = splitmix64(seed);
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in (0, 1] with 24 bits: never 0, so log() below stays finite.
  float uniform_open0() { return float((next_u64() >> 40) + 1) * 0x1.0p-24f; }

  // Box-Muller in float: weights are stored as f32 at best, and float math
  // halves the generation time of a billion-weight model.
  float normal() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const float radius = std::sqrt(-2.0f * std::log(uniform_open0()));
    const float angle = float(2.0 * kPi) * uniform_open0();
    spare_ = radius * std::sin(angle);
    have_spare_ = true;
    return radius * std::cos(angle);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
  float spare_ = 0.0f;
  bool have_spare_ = false;
};

// Each tensor gets its own stream derived from the seed and its name, so a
// tensor's values do not depend on which other tensors the file holds.
uint64_t tensor_seed(uint64_t seed, const std::string& name) {
  uint64_t hash = 0xCBF29CE484222325ull;  // FNV-1a
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001B3ull;
  uint64_t state = seed ^ hash;
  return splitmix64(state);
}

// GPT-2's reversible byte -> printable unicode code point mapping: printable
// Latin-1 bytes map to themselves, the rest to 256, 257, ... in byte order.
std::vector<std::string> byte_level_tokens() {
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  std::vector<std::string> tokens;
  int next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const int cp = printable(b) ? b : next_extra++;
    std::string utf8;
    if (cp < 0x80) {
      utf8 += char(cp);
    } else {  // every code point here is below 0x800: two UTF-8 bytes
      utf8 += char(0xC0 | (cp >> 6));
      utf8 += char(0x80 | (cp & 0x3F));
    }
    tokens.push_back(utf8);
  }
  return tokens;
}

// Llama 3.1 "llama3" RoPE scaling as divisors of each rotary frequency:
// 1 for short wavelengths, `factor` for long ones, a smooth blend between.
std::vector<float> llama3_rope_factors(int head_dim, float freq_base) {
  constexpr double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  constexpr double original_ctx = 8192.0;
  const double low_freq_wavelen = original_ctx / low_freq_factor;
  const double high_freq_wavelen = original_ctx / high_freq_factor;
  std::vector<float> divisors;
  for (int i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(double(freq_base), -2.0 * i / head_dim);
    const double wavelen = 2.0 * kPi / freq;
    double divisor;
    if (wavelen < high_freq_wavelen) {
      divisor = 1.0;
    } else if (wavelen > low_freq_wavelen) {
      divisor = factor;
    } else {
      const double smooth =
          (original_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      divisor = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    divisors.push_back(float(divisor));
  }
  return divisors;
}

void validate(const RandomModelSpec& spec) {
  check(is_supported_architecture(spec.arch), "random model: unknown architecture '", spec.arch,
        "' (expected ", supported_architectures(), ")");
  check(spec.logit_spread > 0, "random model: logit_spread must be positive");
  check(spec.sliding_window >= 0, "random model: sliding_window must be >= 0");
  check(spec.rope_linear_scale >= 1, "random model: rope_linear_scale must be >= 1");
  check(spec.longrope_original_context >= 0 && spec.longrope_original_context < spec.n_ctx + 1,
        "random model: longrope_original_context must be in [0, n_ctx]");
  const bool moe_arch = spec.arch == "qwen2moe" || spec.arch == "qwen3moe";
  check(moe_arch || spec.arch == "llama" || spec.n_expert == 0, "random model: ", spec.arch,
        " has no experts (llama, qwen2moe and qwen3moe have)");
  check(!moe_arch || spec.n_expert > 0, "random model: ", spec.arch, " needs --experts");
  check(spec.n_expert >= 0 && spec.n_expert <= 256, "random model: experts must be in 0..256");
  check(spec.n_expert == 0 || (spec.n_expert_used > 0 && spec.n_expert_used <= spec.n_expert),
        "random model: experts used per token must be in 1..", spec.n_expert, ", got ",
        spec.n_expert_used);
  check(spec.n_ff_expert >= 0 && spec.n_ff_shared >= 0,
        "random model: expert widths must not be negative");
  check(spec.n_vocab >= 258, "random model: n_vocab must be >= 258 (256 bytes + BOS + EOS), got ",
        spec.n_vocab);
  check(spec.n_embd > 0 && spec.n_layer > 0 && spec.n_head > 0 && spec.n_head_kv > 0 &&
            spec.n_ff > 0 && spec.n_ctx > 0,
        "random model: every dimension must be positive");
  check(spec.n_embd % spec.n_head == 0, "random model: n_embd (", spec.n_embd,
        ") must be a multiple of n_head (", spec.n_head, ")");
  check((spec.n_embd / spec.n_head) % 2 == 0, "random model: head_dim (", spec.n_embd / spec.n_head,
        ") must be even for RoPE");
  check(spec.n_head % spec.n_head_kv == 0, "random model: n_head (", spec.n_head,
        ") must be a multiple of n_head_kv (", spec.n_head_kv, ")");
  check(spec.rope_freq_base > 0.0f, "random model: rope_freq_base must be positive");
  const DType type = spec.weight_type;
  const auto& info = type_info(type);
  check(info.weight, "random model: ", info.name, " is an activation type, not a weight type");
  check(!spec.q4_k_m || type == DType::Q4_K,
        "random model: the Q4_K_M mix needs q4_K weights, not ", info.name);
  for (auto [what, n] : {std::pair<const char*, int>{"n_embd", spec.n_embd},
                         {"n_ff", spec.n_ff},
                         {"n_ff_expert", spec.n_ff_expert},
                         {"n_ff_shared", spec.n_ff_shared}})
    check(n % info.block_elems == 0, "random model: ", info.name, " weights need ", what, " (", n,
          ") to be a multiple of ", info.block_elems, " (the type's block size)");
}

struct ProgressPrinter {
  bool enabled = false;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  void line(const std::string& text) const {
    if (!enabled) return;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "make-model: [%6.1fs] %s\n", seconds, text.c_str());
  }
};

class ModelBuilder {
 public:
  explicit ModelBuilder(const RandomModelSpec& spec)
      : spec_(spec), worker_(std::max(1, available_cores())) {}

  GgufWriter& writer() { return writer_; }

  // A [n_in, n_out] weight: n_out rows of n_in values drawn from N(0, stddev),
  // converted row by row so only the converted bytes are held. Rows have their
  // own streams, so the result does not depend on the number of threads.
  void add_matrix(const std::string& name, int64_t n_in, int64_t n_out, DType type, double stddev) {
    add_rows(name, {n_in, n_out}, type, stddev);
  }

  // A [n_in, n_out, n_expert] stack of expert matrices, as llama.cpp's
  // ffn_*_exps tensors: n_out · n_expert rows drawn as a matrix's.
  void add_experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert,
                   DType type, double stddev) {
    add_rows(name, {n_in, n_out, n_expert}, type, stddev);
  }

  // F32 vector mean + stddev * N(0, 1).
  void add_vector(const std::string& name, int64_t n, double mean, double stddev) {
    NormalRng rng(tensor_seed(spec_.seed, name));
    std::vector<float> values(static_cast<size_t>(n));
    for (auto& v : values) v = float(mean + stddev * rng.normal());
    add_f32(name, values);
  }

  void add_f32(const std::string& name, const std::vector<float>& values) {
    writer_.add_tensor(name, {int64_t(values.size())}, DType::F32, values.data(),
                       values.size() * sizeof(float));
  }

 private:
  // n_in-wide rows (dims[0]) for every index of the other dims, each row from
  // its own stream, converted row by row.
  void add_rows(const std::string& name, const std::vector<int64_t>& dims, DType type,
                double stddev) {
    const int64_t n_in = dims[0];
    int64_t n_out = 1;
    for (size_t i = 1; i < dims.size(); ++i) n_out *= dims[i];
    const uint64_t seed = tensor_seed(spec_.seed, name);
    const float scale = float(stddev);
    const size_t bytes_per_row = row_bytes(type, n_in);
    std::vector<uint8_t> data(bytes_per_row * size_t(n_out));
    worker_.parallel_for(n_out, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(n_in));
      for (int64_t r = begin; r < end; ++r) {
        uint64_t row_state = seed ^ (uint64_t(r) * 0xD1B54A32D192ED03ull);
        NormalRng rng(splitmix64(row_state));
        for (auto& v : row) v = scale * rng.normal();
        quantize_row(type, row.data(), data.data() + size_t(r) * bytes_per_row, n_in);
      }
    });
    writer_.add_tensor(name, dims, type, data.data(), data.size());
  }

  const RandomModelSpec& spec_;
  Worker worker_;
  GgufWriter writer_;
};

void set_metadata(GgufWriter& w, const RandomModelSpec& spec) {
  const std::string& a = spec.arch;
  const int head_dim = spec.n_embd / spec.n_head;
  w.set("general.architecture", GgufValue::string(a));
  // Not "...phi3": llama.cpp gives a model named so Phi-3's special tokens'
  // attributes, and fails on a vocabulary without them.
  w.set("general.name",
        GgufValue::string(a == "phi3" ? "parspec-random-phi" : "parspec-random-" + a));
  w.set("general.file_type",
        GgufValue::u32(spec.q4_k_m ? kMostlyQ4_K_M : gguf_file_type(spec.weight_type)));
  w.set("general.quantization_version", GgufValue::u32(2));
  w.set(a + ".context_length", GgufValue::u32(uint32_t(spec.n_ctx)));
  w.set(a + ".embedding_length", GgufValue::u32(uint32_t(spec.n_embd)));
  w.set(a + ".block_count", GgufValue::u32(uint32_t(spec.n_layer)));
  w.set(a + ".feed_forward_length", GgufValue::u32(uint32_t(spec.n_ff)));
  w.set(a + ".attention.head_count", GgufValue::u32(uint32_t(spec.n_head)));
  w.set(a + ".attention.head_count_kv", GgufValue::u32(uint32_t(spec.n_head_kv)));
  w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::f32(a == "llama" ? 1e-5f : 1e-6f));
  w.set(a + ".rope.freq_base", GgufValue::f32(spec.rope_freq_base));
  w.set(a + ".rope.dimension_count", GgufValue::u32(uint32_t(head_dim)));
  w.set(a + ".vocab_size", GgufValue::u32(uint32_t(spec.n_vocab)));
  if (spec.n_expert > 0) {
    w.set(a + ".expert_count", GgufValue::u32(uint32_t(spec.n_expert)));
    w.set(a + ".expert_used_count", GgufValue::u32(uint32_t(spec.n_expert_used)));
  }
  if (a == "qwen2moe" || a == "qwen3moe")
    w.set(a + ".expert_feed_forward_length",
          GgufValue::u32(uint32_t(spec.n_ff_expert > 0 ? spec.n_ff_expert : spec.n_ff)));
  if (a == "qwen2moe") {
    w.set(a + ".expert_shared_feed_forward_length",
          GgufValue::u32(uint32_t(spec.n_ff_shared > 0 ? spec.n_ff_shared : spec.n_ff)));
  }
  const bool gemma = a == "gemma2" || a == "gemma3";
  if (gemma) {  // llama.cpp's gemma converters write the head size
    w.set(a + ".attention.key_length", GgufValue::u32(uint32_t(head_dim)));
    w.set(a + ".attention.value_length", GgufValue::u32(uint32_t(head_dim)));
  }
  const int window = a == "gemma3" && spec.sliding_window == 0 ? 4096 : spec.sliding_window;
  // Phi-3 files always carry the key (0: no window), as llama.cpp requires.
  if (window > 0 || a == "phi3")
    w.set(a + ".attention.sliding_window", GgufValue::u32(uint32_t(window)));
  if (spec.attn_logit_softcap > 0)
    w.set(a + ".attn_logit_softcapping", GgufValue::f32(spec.attn_logit_softcap));
  if (spec.final_logit_softcap > 0)
    w.set(a + ".final_logit_softcapping", GgufValue::f32(spec.final_logit_softcap));
  if (spec.rope_linear_scale != 1.0f) {
    w.set(a + ".rope.scaling.type", GgufValue::string("linear"));
    w.set(a + ".rope.scaling.factor", GgufValue::f32(spec.rope_linear_scale));
  }
  if (spec.longrope_original_context > 0) {
    // As llama.cpp's Phi-3 converter: LongRoPE's attention factor from the context ratio.
    const double ratio = double(spec.n_ctx) / spec.longrope_original_context;
    const double attn_factor =
        ratio > 1.0 ? std::sqrt(1.0 + std::log(ratio) / std::log(spec.longrope_original_context))
                    : 1.0;
    w.set(a + ".rope.scaling.original_context_length",
          GgufValue::u32(uint32_t(spec.longrope_original_context)));
    w.set(a + ".rope.scaling.attn_factor", GgufValue::f32(float(attn_factor)));
  }

  std::vector<std::string> tokens = byte_level_tokens();
  std::vector<int32_t> token_types(256, 1);  // byte-level BPE: byte tokens are normal tokens
  tokens.push_back("<s>");
  tokens.push_back("</s>");
  token_types.push_back(3);
  token_types.push_back(3);
  for (int id = 258; id < spec.n_vocab; ++id) {
    tokens.push_back("<unused_" + std::to_string(id - 258) + ">");
    token_types.push_back(5);
  }
  w.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::string("default"));
  w.set("tokenizer.ggml.tokens", GgufValue::string_array(tokens));
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array(token_types));
  w.set("tokenizer.ggml.merges", GgufValue::string_array({}));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(256));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(257));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  w.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(false));
}

// A layer's experts: the router (F32, as llama.cpp's quantizer keeps it),
// the stacked expert matrices (n_ff_expert wide in the Qwen families, n_ff in
// llama's) and, for qwen2moe, the shared expert and its gate.
void add_expert_ffn(ModelBuilder& builder, const RandomModelSpec& spec, const std::string& p,
                    DType down_type) {
  const int64_t n_embd = spec.n_embd, n_expert = spec.n_expert;
  const bool qwen = spec.arch == "qwen2moe" || spec.arch == "qwen3moe";
  const int64_t ff = qwen && spec.n_ff_expert > 0 ? spec.n_ff_expert : spec.n_ff;
  const double in_embd = 1.0 / std::sqrt(double(n_embd)), in_ff = 1.0 / std::sqrt(double(ff));
  builder.add_matrix(p + "ffn_gate_inp.weight", n_embd, n_expert, DType::F32, in_embd);
  builder.add_experts(p + "ffn_gate_exps.weight", n_embd, ff, n_expert, spec.weight_type, in_embd);
  builder.add_experts(p + "ffn_up_exps.weight", n_embd, ff, n_expert, spec.weight_type, in_embd);
  builder.add_experts(p + "ffn_down_exps.weight", ff, n_embd, n_expert, down_type, in_ff);
  if (spec.arch != "qwen2moe") return;
  const int64_t sff = spec.n_ff_shared > 0 ? spec.n_ff_shared : spec.n_ff;
  builder.add_vector(p + "ffn_gate_inp_shexp.weight", n_embd, 0.0, in_embd);
  builder.add_matrix(p + "ffn_gate_shexp.weight", n_embd, sff, spec.weight_type, in_embd);
  builder.add_matrix(p + "ffn_up_shexp.weight", n_embd, sff, spec.weight_type, in_embd);
  builder.add_matrix(p + "ffn_down_shexp.weight", sff, n_embd, down_type,
                     1.0 / std::sqrt(double(sff)));
}

}  // namespace

// llama.cpp's general.file_type ("mostly <type>") for a file whose linear
// weights are all of one type.
uint32_t gguf_file_type(DType type) {
  const TypeInfo& info = type_info(type);
  check(info.gguf_file_type.has_value(), "random model: unsupported weight type ", info.name);
  return *info.gguf_file_type;
}

bool q4_k_m_more_bits(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

DType q4_k_m_type(std::string_view name, int n_layer, bool tied_embeddings) {
  if (name == "output.weight" || (tied_embeddings && name == "token_embd.weight"))
    return DType::Q6_K;
  const std::string text(name);
  int layer = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "blk.%d.%n", &layer, &consumed) == 1 && consumed > 0) {
    const std::string_view tensor = name.substr(static_cast<size_t>(consumed));
    if ((tensor == "attn_v.weight" || tensor.starts_with("ffn_down")) &&
        q4_k_m_more_bits(layer, n_layer))
      return DType::Q6_K;
  }
  return DType::Q4_K;
}

void write_random_model(const RandomModelSpec& spec, const std::string& path) {
  validate(spec);
  const int64_t n_embd = spec.n_embd, n_ff = spec.n_ff, n_vocab = spec.n_vocab;
  const int64_t head_dim = n_embd / spec.n_head;
  const int64_t kv_dim = head_dim * spec.n_head_kv;
  const DType wtype = spec.weight_type;

  const int64_t layer_params = 2 * n_embd * n_embd + 2 * n_embd * kv_dim + 3 * n_embd * n_ff;
  const int64_t total_params =
      layer_params * spec.n_layer + n_vocab * n_embd * (spec.tied_embeddings ? 1 : 2);
  ProgressPrinter progress;
  progress.enabled = total_params >= 50'000'000 && isatty(STDERR_FILENO);

  ModelBuilder builder(spec);
  set_metadata(builder.writer(), spec);

  // Linear weights are N(0, 1/sqrt(n_in)) so activations keep unit scale. An
  // untied embedding is N(0, 1) (a unit-RMS residual stream); a tied one also
  // serves as the output layer, so it gets the output layer's scale to keep
  // logits around unit spread instead of sqrt(n_embd).
  const double linear_in_embd = 1.0 / std::sqrt(double(n_embd));
  const double linear_in_ff = 1.0 / std::sqrt(double(n_ff));
  const std::string& arch = spec.arch;
  // Gemma ties its embeddings to the output layer and scales them by sqrt(n_embd) on input.
  const bool gemma = arch == "gemma2" || arch == "gemma3";
  const bool tied = spec.tied_embeddings || gemma;
  // Matrices whose type the Q4_K_M mix may raise (the others are wtype either way).
  auto type_of = [&](const std::string& name) {
    return spec.q4_k_m ? q4_k_m_type(name, spec.n_layer, tied) : wtype;
  };
  const double output_std = spec.logit_spread * linear_in_embd;
  builder.add_matrix("token_embd.weight", n_embd, n_vocab, type_of("token_embd.weight"),
                     tied ? output_std : 1.0);
  if (spec.llama3_rope_freqs)
    builder.add_f32("rope_freqs.weight", llama3_rope_factors(int(head_dim), spec.rope_freq_base));
  if (spec.longrope_original_context > 0) {
    // Divisors >= 1 rising with the wavelength, the long set more than the short one.
    std::vector<float> long_factors, short_factors;
    for (int i = 0; i < head_dim / 2; ++i) {
      const double t = double(i) / double(head_dim / 2);
      long_factors.push_back(float(1.0 + 15.0 * t * t));
      short_factors.push_back(float(1.0 + 0.5 * t));
    }
    builder.add_f32("rope_factors_long.weight", long_factors);
    builder.add_f32("rope_factors_short.weight", short_factors);
  }
  progress.line("embeddings done");

  for (int layer = 0; layer < spec.n_layer; ++layer) {
    const std::string p = "blk." + std::to_string(layer) + ".";
    builder.add_vector(p + "attn_norm.weight", n_embd, 1.0, 0.1);
    if (arch == "phi3") {
      builder.add_matrix(p + "attn_qkv.weight", n_embd, n_embd + 2 * kv_dim, wtype, linear_in_embd);
    } else {
      builder.add_matrix(p + "attn_q.weight", n_embd, n_embd, wtype, linear_in_embd);
      builder.add_matrix(p + "attn_k.weight", n_embd, kv_dim, wtype, linear_in_embd);
      builder.add_matrix(p + "attn_v.weight", n_embd, kv_dim, type_of(p + "attn_v.weight"),
                         linear_in_embd);
    }
    if (arch == "qwen3" || arch == "gemma3" || arch == "qwen3moe") {
      builder.add_vector(p + "attn_q_norm.weight", head_dim, 1.0, 0.1);
      builder.add_vector(p + "attn_k_norm.weight", head_dim, 1.0, 0.1);
    }
    if (gemma) {
      builder.add_vector(p + "post_attention_norm.weight", n_embd, 3.0, 0.3);
      builder.add_vector(p + "post_ffw_norm.weight", n_embd, 3.0, 0.3);
    }
    if (arch == "qwen2" || arch == "qwen2moe") {
      builder.add_vector(p + "attn_q.bias", n_embd, 0.0, 0.5);
      builder.add_vector(p + "attn_k.bias", kv_dim, 0.0, 0.5);
      builder.add_vector(p + "attn_v.bias", kv_dim, 0.0, 0.5);
    }
    builder.add_matrix(p + "attn_output.weight", n_embd, n_embd, wtype, linear_in_embd);
    builder.add_vector(p + "ffn_norm.weight", n_embd, 1.0, 0.1);
    if (spec.n_expert > 0) {
      add_expert_ffn(builder, spec, p, type_of(p + "ffn_down_exps.weight"));
    } else if (arch == "phi3") {  // gate then up in one tensor
      builder.add_matrix(p + "ffn_up.weight", n_embd, 2 * n_ff, wtype, linear_in_embd);
    } else {
      builder.add_matrix(p + "ffn_gate.weight", n_embd, n_ff, wtype, linear_in_embd);
      builder.add_matrix(p + "ffn_up.weight", n_embd, n_ff, wtype, linear_in_embd);
    }
    if (spec.n_expert == 0)
      builder.add_matrix(p + "ffn_down.weight", n_ff, n_embd, type_of(p + "ffn_down.weight"),
                         linear_in_ff);
    progress.line("layer " + std::to_string(layer + 1) + "/" + std::to_string(spec.n_layer) +
                  " done");
  }

  builder.add_vector("output_norm.weight", n_embd, 1.0, 0.1);
  if (!tied)
    builder.add_matrix("output.weight", n_embd, n_vocab, type_of("output.weight"), output_std);
  progress.line("writing " + path);
  builder.writer().write(path);
  progress.line("done");
}

}  // namespace parspec
