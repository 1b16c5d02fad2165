// Random-model generator: metadata keys, vocabulary, tensor names/shapes/types,
// weight statistics, determinism, and the make-model CLI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/quant.h"
#include "model/gguf.h"
#include "model/random_model.h"

namespace parspec {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) /
          ("parspec_random_model_" + std::to_string(getpid()) + "_" + name + ".gguf"))
      .string();
}

// Writes the model, opens it, and removes the file (the mapping stays valid).
std::unique_ptr<GgufFile> make(const RandomModelSpec& spec, const std::string& name) {
  const std::string path = temp_path(name);
  write_random_model(spec, path);
  auto file = GgufFile::open(path);
  std::filesystem::remove(path);
  return file;
}

std::vector<int64_t> dims_of(const GgufFile& file, const std::string& name) {
  const GgufTensorInfo* info = file.find_tensor(name);
  if (!info) ADD_FAILURE() << "missing tensor " << name;
  return info ? info->dims : std::vector<int64_t>{};
}

std::vector<float> values_of(const GgufFile& file, const std::string& name) {
  const GgufTensorInfo* info = file.find_tensor(name);
  EXPECT_NE(info, nullptr) << name;
  if (!info) return {};
  std::vector<float> out(info->n_elements);
  const int64_t row = info->dims[0];
  const size_t bytes = row_bytes(info->type, row);
  for (uint64_t r = 0; r < info->n_elements / row; ++r)
    dequantize_row(info->type, file.tensor_data(*info) + r * bytes, out.data() + r * row, row);
  return out;
}

void mean_and_stddev(const std::vector<float>& v, double* mean, double* stddev) {
  double sum = 0, sum_sq = 0;
  for (float x : v) sum += x, sum_sq += double(x) * x;
  *mean = sum / double(v.size());
  *stddev = std::sqrt(sum_sq / double(v.size()) - *mean * *mean);
}

using Dims = std::vector<int64_t>;

TEST(RandomModel, LlamaMetadataAndVocabulary) {
  RandomModelSpec spec;  // llama, 512 tokens, 64 wide, 2 layers, 4 heads, 2 kv heads, ff 128
  auto file = make(spec, "llama_meta");
  EXPECT_EQ(file->get_string("general.architecture"), "llama");
  EXPECT_EQ(file->get_int("llama.context_length"), 2048);
  EXPECT_EQ(file->get_int("llama.embedding_length"), 64);
  EXPECT_EQ(file->get_int("llama.block_count"), 2);
  EXPECT_EQ(file->get_int("llama.feed_forward_length"), 128);
  EXPECT_EQ(file->get_int("llama.attention.head_count"), 4);
  EXPECT_EQ(file->get_int("llama.attention.head_count_kv"), 2);
  EXPECT_FLOAT_EQ(float(file->get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_FLOAT_EQ(float(file->get_float("llama.rope.freq_base")), 10000.0f);
  EXPECT_EQ(file->get_int("llama.rope.dimension_count"), 16);
  EXPECT_EQ(file->get_int("llama.vocab_size"), 512);

  EXPECT_EQ(file->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(file->get_string("tokenizer.ggml.pre"), "default");
  const auto tokens = file->get_string_array("tokenizer.ggml.tokens");
  const auto types = file->get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), 512u);
  ASSERT_EQ(types.size(), 512u);
  // GPT-2 byte-to-unicode: printable bytes stand for themselves, others shift to U+0100...
  EXPECT_EQ(tokens['A'], "A");
  EXPECT_EQ(tokens['~'], "~");
  EXPECT_EQ(tokens[0], "\xC4\x80");     // U+0100
  EXPECT_EQ(tokens[' '], "\xC4\xA0");   // U+0120 "Ġ"
  EXPECT_EQ(tokens['\n'], "\xC4\x8A");  // U+010A "Ċ"
  EXPECT_EQ(tokens[0xE9], "\xC3\xA9");  // é stays é
  EXPECT_EQ(tokens[0xAD], "\xC5\x83");  // soft hyphen is the last remapped byte: U+0143
  EXPECT_EQ(tokens[256], "<s>");
  EXPECT_EQ(tokens[257], "</s>");
  EXPECT_EQ(tokens[258], "<unused_0>");
  EXPECT_EQ(tokens[511], "<unused_253>");
  EXPECT_EQ(types[65], 1);
  EXPECT_EQ(types[256], 3);
  EXPECT_EQ(types[257], 3);
  EXPECT_EQ(types[300], 5);
  EXPECT_EQ(file->get_int("tokenizer.ggml.bos_token_id"), 256);
  EXPECT_EQ(file->get_int("tokenizer.ggml.eos_token_id"), 257);
  EXPECT_TRUE(file->get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_TRUE(file->get_string_array("tokenizer.ggml.merges").empty());
}

TEST(RandomModel, LlamaTensors) {
  RandomModelSpec spec;
  auto file = make(spec, "llama_tensors");
  EXPECT_EQ(dims_of(*file, "token_embd.weight"), (Dims{64, 512}));
  EXPECT_EQ(dims_of(*file, "output.weight"), (Dims{64, 512}));
  EXPECT_EQ(dims_of(*file, "output_norm.weight"), (Dims{64}));
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "blk." + std::to_string(layer) + ".";
    EXPECT_EQ(dims_of(*file, p + "attn_norm.weight"), (Dims{64}));
    EXPECT_EQ(dims_of(*file, p + "attn_q.weight"), (Dims{64, 64}));
    EXPECT_EQ(dims_of(*file, p + "attn_k.weight"), (Dims{64, 32}));
    EXPECT_EQ(dims_of(*file, p + "attn_v.weight"), (Dims{64, 32}));
    EXPECT_EQ(dims_of(*file, p + "attn_output.weight"), (Dims{64, 64}));
    EXPECT_EQ(dims_of(*file, p + "ffn_norm.weight"), (Dims{64}));
    EXPECT_EQ(dims_of(*file, p + "ffn_gate.weight"), (Dims{64, 128}));
    EXPECT_EQ(dims_of(*file, p + "ffn_up.weight"), (Dims{64, 128}));
    EXPECT_EQ(dims_of(*file, p + "ffn_down.weight"), (Dims{128, 64}));
    EXPECT_EQ(file->find_tensor(p + "attn_q.bias"), nullptr);
  }
  EXPECT_EQ(file->find_tensor("rope_freqs.weight"), nullptr);
  EXPECT_EQ(file->find_tensor("blk.2.attn_q.weight"), nullptr);
  EXPECT_EQ(file->tensors().size(), 3u + 2u * 9u);
  for (const auto& t : file->tensors()) EXPECT_EQ(t.type, DType::F32) << t.name;

  // Norms scatter around 1, linear weights are N(0, 1/sqrt(n_in)), embeddings N(0, 1).
  double mean, stddev;
  mean_and_stddev(values_of(*file, "blk.0.attn_norm.weight"), &mean, &stddev);
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(stddev, 0.1, 0.03);
  mean_and_stddev(values_of(*file, "blk.1.ffn_gate.weight"), &mean, &stddev);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(stddev, 1.0 / 8.0, 0.01);
  mean_and_stddev(values_of(*file, "blk.1.ffn_down.weight"), &mean, &stddev);
  EXPECT_NEAR(stddev, 1.0 / std::sqrt(128.0), 0.01);
  mean_and_stddev(values_of(*file, "token_embd.weight"), &mean, &stddev);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(stddev, 1.0, 0.03);
  // Every tensor has its own random stream.
  EXPECT_NE(values_of(*file, "blk.0.ffn_gate.weight"), values_of(*file, "blk.0.ffn_up.weight"));
}

TEST(RandomModel, Qwen2HasBiasesAndItsOwnKeys) {
  RandomModelSpec spec;
  spec.arch = "qwen2";
  spec.n_layer = 1;
  auto file = make(spec, "qwen2");
  EXPECT_EQ(file->get_string("general.architecture"), "qwen2");
  EXPECT_EQ(file->get_int("qwen2.embedding_length"), 64);
  EXPECT_EQ(file->get_int("qwen2.attention.head_count_kv"), 2);
  EXPECT_FLOAT_EQ(float(file->get_float("qwen2.attention.layer_norm_rms_epsilon")), 1e-6f);
  EXPECT_FALSE(file->has("llama.embedding_length"));
  EXPECT_EQ(dims_of(*file, "blk.0.attn_q.bias"), (Dims{64}));
  EXPECT_EQ(dims_of(*file, "blk.0.attn_k.bias"), (Dims{32}));
  EXPECT_EQ(dims_of(*file, "blk.0.attn_v.bias"), (Dims{32}));
  EXPECT_EQ(file->find_tensor("blk.0.attn_output.bias"), nullptr);
  for (const char* name : {"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"})
    EXPECT_EQ(file->find_tensor(name)->type, DType::F32);
}

TEST(RandomModel, TiedEmbeddingsHaveNoOutputAndLogitScale) {
  RandomModelSpec spec;
  spec.tied_embeddings = true;
  auto file = make(spec, "tied");
  EXPECT_EQ(file->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(dims_of(*file, "token_embd.weight"), (Dims{64, 512}));
  // The tied embedding doubles as the output layer: N(0, 1/sqrt(n_embd)).
  double mean, stddev;
  mean_and_stddev(values_of(*file, "token_embd.weight"), &mean, &stddev);
  EXPECT_NEAR(stddev, 1.0 / 8.0, 0.01);
}

TEST(RandomModel, Llama3RopeFactors) {
  RandomModelSpec spec;
  spec.llama3_rope_freqs = true;
  auto file = make(spec, "llama3_rope");
  const GgufTensorInfo* info = file->find_tensor("rope_freqs.weight");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->type, DType::F32);
  ASSERT_EQ(info->dims, (Dims{8}));  // head_dim 16 / 2
  const auto factors = values_of(*file, "rope_freqs.weight");
  // head_dim 16, base 1e4: wavelengths 2*pi*1e4^(i/8). Below 2048 (i <= 5) the
  // divisor is 1, above 8192 (i = 7) it is the factor 8, i = 6 blends the two.
  for (int i = 0; i <= 5; ++i) EXPECT_FLOAT_EQ(factors[i], 1.0f) << i;
  EXPECT_NEAR(factors[6], 4.681483f, 1e-4f);
  EXPECT_FLOAT_EQ(factors[7], 8.0f);
}

TEST(RandomModel, QuantizedWeights) {
  RandomModelSpec spec;
  spec.n_embd = 256;
  spec.n_ff = 512;
  spec.n_layer = 1;
  spec.n_vocab = 300;
  for (DType type : {DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16}) {
    spec.weight_type = type;
    auto file = make(spec, std::string(type_info(type).name));
    for (const auto& t : file->tensors()) {
      const bool is_vector = t.dims.size() == 1;
      EXPECT_EQ(t.type, is_vector ? DType::F32 : type) << t.name;
      EXPECT_EQ(t.n_bytes, row_bytes(t.type, t.dims[0]) * (is_vector ? 1 : t.dims[1])) << t.name;
    }
    EXPECT_EQ(dims_of(*file, "blk.0.ffn_down.weight"), (Dims{512, 256}));
    double mean, stddev;
    mean_and_stddev(values_of(*file, "blk.0.ffn_up.weight"), &mean, &stddev);
    EXPECT_NEAR(mean, 0.0, 0.01) << type_info(type).name;
    EXPECT_NEAR(stddev, 1.0 / 16.0, 0.005) << type_info(type).name;
  }
}

// llama.cpp's Q4_K_M mix: Q6_K for the output layer (the embeddings when
// tied) and for attn_v / ffn_down in the first and last eighth of the layers
// and every third between; q4_K everywhere else.
TEST(RandomModel, Q4_K_MMixPutsQ6_KWhereLlamaCppDoes) {
  RandomModelSpec spec;
  spec.n_embd = 256;
  spec.n_ff = 256;
  spec.n_layer = 16;
  spec.weight_type = DType::Q4_K;
  spec.q4_k_m = true;
  const std::vector<int> more_bits = {0, 1, 4, 7, 10, 13, 14, 15};
  for (bool tied : {false, true}) {
    spec.tied_embeddings = tied;
    auto file = make(spec, tied ? "q4_k_m_tied" : "q4_k_m");
    EXPECT_EQ(file->get_int("general.file_type"), 15);
    EXPECT_EQ(file->find_tensor("token_embd.weight")->type, tied ? DType::Q6_K : DType::Q4_K);
    if (!tied) {
      EXPECT_EQ(file->find_tensor("output.weight")->type, DType::Q6_K);
    }
    for (int layer = 0; layer < spec.n_layer; ++layer) {
      const bool more = std::find(more_bits.begin(), more_bits.end(), layer) != more_bits.end();
      EXPECT_EQ(q4_k_m_more_bits(layer, spec.n_layer), more) << layer;
      const std::string p = "blk." + std::to_string(layer) + ".";
      for (const char* name : {"attn_v.weight", "ffn_down.weight"})
        EXPECT_EQ(file->find_tensor(p + name)->type, more ? DType::Q6_K : DType::Q4_K) << p << name;
      for (const char* name : {"attn_q.weight", "attn_k.weight", "attn_output.weight",
                               "ffn_gate.weight", "ffn_up.weight"})
        EXPECT_EQ(file->find_tensor(p + name)->type, DType::Q4_K) << p << name;
    }
  }
  spec.weight_type = DType::Q8_0;
  EXPECT_THROW(write_random_model(spec, temp_path("q4_k_m_q8")), Error);
}

TEST(RandomModel, Q4_K_MTypeByNameCoversExpertsAndTiedEmbeddings) {
  // 16 layers: layer 2 keeps Q4_K, layers 0 and 4 get the larger type.
  EXPECT_EQ(q4_k_m_type("output.weight", 16, false), DType::Q6_K);
  EXPECT_EQ(q4_k_m_type("token_embd.weight", 16, false), DType::Q4_K);
  EXPECT_EQ(q4_k_m_type("token_embd.weight", 16, true), DType::Q6_K);
  for (const char* tensor :
       {"attn_v.weight", "ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight"}) {
    EXPECT_EQ(q4_k_m_type(std::string("blk.0.") + tensor, 16, false), DType::Q6_K) << tensor;
    EXPECT_EQ(q4_k_m_type(std::string("blk.4.") + tensor, 16, false), DType::Q6_K) << tensor;
    EXPECT_EQ(q4_k_m_type(std::string("blk.2.") + tensor, 16, false), DType::Q4_K) << tensor;
  }
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.ffn_gate_exps.weight",
                           "blk.0.ffn_up_shexp.weight", "blk.0.attn_qkv.weight"})
    EXPECT_EQ(q4_k_m_type(name, 16, false), DType::Q4_K) << name;

  RandomModelSpec spec;
  spec.arch = "qwen2moe";
  spec.n_embd = 256;
  spec.n_ff = 256;
  spec.n_layer = 2;
  spec.n_expert = 4;
  spec.n_expert_used = 2;
  spec.weight_type = DType::Q4_K;
  spec.q4_k_m = true;
  auto file = make(spec, "q4_k_m_moe");
  // Of 2 layers, the last gets the larger type.
  for (const char* name : {"blk.1.ffn_down_exps.weight", "blk.1.ffn_down_shexp.weight"})
    EXPECT_EQ(file->find_tensor(name)->type, DType::Q6_K) << name;
  for (const char* name :
       {"blk.0.ffn_down_exps.weight", "blk.0.ffn_down_shexp.weight", "blk.1.ffn_up_exps.weight"})
    EXPECT_EQ(file->find_tensor(name)->type, DType::Q4_K) << name;
}

TEST(RandomModel, RejectsShapesTheTypeCannotHold) {
  RandomModelSpec spec;  // n_embd 64: not a whole number of 256-element super-blocks
  spec.weight_type = DType::Q4_K;
  try {
    write_random_model(spec, temp_path("bad_k"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 256"), std::string::npos) << e.what();
  }
  spec = RandomModelSpec{};
  spec.n_head = 3;
  EXPECT_THROW(write_random_model(spec, temp_path("bad_heads")), Error);
  spec = RandomModelSpec{};
  spec.n_head_kv = 3;
  EXPECT_THROW(write_random_model(spec, temp_path("bad_kv")), Error);
  spec = RandomModelSpec{};
  spec.n_vocab = 100;
  EXPECT_THROW(write_random_model(spec, temp_path("bad_vocab")), Error);
  spec = RandomModelSpec{};
  spec.arch = "gpt2";
  EXPECT_THROW(write_random_model(spec, temp_path("bad_arch")), Error);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(RandomModel, DeterministicFromSeed) {
  RandomModelSpec spec;
  spec.n_layer = 1;
  const std::string a = temp_path("seed_a"), b = temp_path("seed_b"), c = temp_path("seed_c");
  write_random_model(spec, a);
  write_random_model(spec, b);
  spec.seed = 2;
  write_random_model(spec, c);
  const std::string bytes_a = read_all(a);
  EXPECT_FALSE(bytes_a.empty());
  EXPECT_EQ(bytes_a, read_all(b));
  EXPECT_NE(bytes_a, read_all(c));
  for (const auto& path : {a, b, c}) std::filesystem::remove(path);
}

TEST(RandomModel, MakeModelCommand) {
  const std::string path = temp_path("cli");
  const std::string command = std::string(PARSPEC_BINARY) + " make-model -o " + path +
                              " --arch qwen2 --n-vocab 260 --n-embd 32 --n-layer 1 --n-head 2"
                              " --n-head-kv 1 --n-ff 64 --type q8_0 --tied --llama3-rope"
                              " --seed 7 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  auto file = GgufFile::open(path);
  std::filesystem::remove(path);
  EXPECT_EQ(file->get_string("general.architecture"), "qwen2");
  EXPECT_EQ(file->get_int("qwen2.attention.head_count_kv"), 1);
  EXPECT_EQ(file->get_string_array("tokenizer.ggml.tokens").size(), 260u);
  EXPECT_EQ(dims_of(*file, "blk.0.ffn_gate.weight"), (Dims{32, 64}));
  EXPECT_EQ(file->find_tensor("blk.0.ffn_gate.weight")->type, DType::Q8_0);
  EXPECT_EQ(file->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(dims_of(*file, "rope_freqs.weight"), (Dims{8}));

  const std::string bad =
      std::string(PARSPEC_BINARY) + " make-model -o " + path + " --type q4_k 2>/dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace parspec
