// make-model --inflate: a trained model embedded into a larger shape must
// compute the source's function. Greedy tokens are compared with ==, logits
// within float rounding (the wider sums add zeros in another order and the
// rescaled norms round differently), perplexity to 5 significant digits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "core/error.h"
#include "core/worker.h"
#include "model/inflate.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/random_model.h"
#include "test_helpers.h"
#include "tokenizer/tokenizer.h"

namespace parspec {
namespace {

using testing_support::TempDir;

std::string zoo_path(const char* name) {
  return std::string(PARSPEC_SOURCE_DIR) + "/models/" + name;
}

// Held-out-like text in the zoo's domains (written for this test).
const char* const kText =
    "def parse_options(argv):\n"
    "    \"\"\"Return the options given on the command line.\"\"\"\n"
    "    options = {}\n"
    "    for arg in argv[1:]:\n"
    "        if arg.startswith('--'):\n"
    "            key, _, value = arg[2:].partition('=')\n"
    "            options[key] = value\n"
    "    return options\n\n"
    "Q: A shop sells 14 pens a day for 6 days. How many pens does it sell?\n"
    "A: It sells 14 * 6 = 84 pens.\n"
    "This program is distributed in the hope that it will be useful, but WITHOUT ANY WARRANTY.\n";

void commit_all(KvCache& kv) {
  std::vector<int32_t> path(static_cast<size_t>(kv.n_spec()));
  std::iota(path.begin(), path.end(), 0);
  kv.commit(path);
}

// Logits of every position of `tokens` (one forward over the whole chain).
std::vector<float> all_logits(const Model& model, const std::vector<int32_t>& tokens) {
  Worker worker(2);
  KvCache kv(model.config(), static_cast<int32_t>(tokens.size()));
  return model.forward(worker, Batch::chain(kv, tokens, true), kv);
}

// Perplexity of tokens[1..] given the prefix (the first token is BOS).
double perplexity(const Model& model, const std::vector<int32_t>& tokens) {
  const std::vector<float> logits = all_logits(model, tokens);
  const int n_vocab = model.config().n_vocab;
  double nll = 0.0;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    const float* row = &logits[i * n_vocab];
    const float max = *std::max_element(row, row + n_vocab);
    double sum = 0.0;
    for (int v = 0; v < n_vocab; ++v) sum += std::exp(double(row[v]) - max);
    nll -= double(row[tokens[i + 1]]) - max - std::log(sum);
  }
  return std::exp(nll / double(tokens.size() - 1));
}

// Greedy continuation, one token per forward.
std::vector<int32_t> greedy(const Model& model, const std::vector<int32_t>& prompt, int n) {
  Worker worker(2);
  KvCache kv(model.config(), static_cast<int32_t>(prompt.size()) + n);
  std::vector<float> logits = model.forward(worker, Batch::chain(kv, prompt, false), kv);
  commit_all(kv);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    const std::vector<int32_t> one{next};
    logits = model.forward(worker, Batch::chain(kv, one, false), kv);
    commit_all(kv);
  }
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

float max_abs(const std::vector<float>& a) {
  float worst = 0.0f;
  for (float v : a) worst = std::max(worst, std::fabs(v));
  return worst;
}

std::string inflate(const TempDir& dir, const std::string& name, const std::string& source,
                    InflateShape shape, std::optional<DType> type = std::nullopt) {
  InflateOptions options;
  options.shape = shape;
  options.weight_type = type;
  const std::string path = dir.file(name);
  inflate_model(source, options, path);
  return path;
}

// Same greedy tokens, logits within rounding, same perplexity.
void expect_same_function(const Model& source, const Model& big, const std::vector<int32_t>& text,
                          const std::vector<int32_t>& prompt, int n_greedy) {
  ASSERT_EQ(big.config().n_vocab, source.config().n_vocab);
  const std::vector<float> a = all_logits(source, text), b = all_logits(big, text);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_LE(max_abs_diff(a, b), 1e-4f * std::max(1.0f, max_abs(a)));
  const double ppl_source = perplexity(source, text), ppl_big = perplexity(big, text);
  EXPECT_NEAR(ppl_big, ppl_source, 1e-5 * ppl_source);
  EXPECT_EQ(greedy(big, prompt, n_greedy), greedy(source, prompt, n_greedy));
}

// The zoo target's FFNs as 8 identical experts (top-2, renormalised weights
// summing to 1): the same function, now at a mixture-of-experts model's cost.
TEST(Inflate, ZooTargetIntoIdenticalExpertsKeepsItsFunction) {
  TempDir dir;
  const auto source = Model::load(zoo_path("target.gguf"));
  const auto tokenizer = Tokenizer::from_gguf(source->gguf());
  const std::vector<int32_t> text = tokenizer->encode(kText, true, false);
  const std::vector<int32_t> prompt = tokenizer->encode("def read_config(path):\n", true, false);
  InflateOptions options;
  options.shape = InflateShape{512, 8, 1024, 0, 0};
  options.weight_type = DType::F32;
  options.experts = 8;
  options.experts_used = 2;
  inflate_model(zoo_path("target.gguf"), options, dir.file("moe.gguf"));
  const auto big = Model::load(dir.file("moe.gguf"));
  EXPECT_EQ(big->config().moe.n_expert, 8);
  EXPECT_EQ(big->config().moe.n_expert_used, 2);
  expect_same_function(*source, *big, text, prompt, 40);
  // The router spreads tokens: one forward over the text touches most experts
  // of each layer, one token exactly its 2.
  const ExpertTally& tally = big->expert_tally();
  auto touched_per_layer = [&](std::span<const int32_t> tokens) {
    Worker worker(2);
    KvCache kv(big->config(), 512);
    const int64_t passes = tally.layer_passes, touched = tally.experts_touched;
    big->forward(worker, Batch::chain(kv, tokens, false), kv);
    return double(tally.experts_touched - touched) / double(tally.layer_passes - passes);
  };
  EXPECT_GT(touched_per_layer(text), 6.0);
  EXPECT_EQ(touched_per_layer(std::span(text).first(1)), 2.0);

  options.experts_used = 9;
  EXPECT_THROW(inflate_model(zoo_path("target.gguf"), options, dir.file("bad.gguf")), Error);
}

TEST(Inflate, ZooTargetKeepsItsFunctionInF16AndF32) {
  TempDir dir;
  const auto source = Model::load(zoo_path("target.gguf"));
  const auto tokenizer = Tokenizer::from_gguf(source->gguf());
  const std::vector<int32_t> text = tokenizer->encode(kText, true, false);
  const std::vector<int32_t> prompt = tokenizer->encode("def read_config(path):\n", true, false);
  ASSERT_GT(text.size(), 100u);
  // Wider, deeper, more heads (kv groups of 2 as in the source), wider MLP.
  const InflateShape shape{512, 9, 1280, 0, 0};
  for (DType type : {DType::F16, DType::F32}) {
    SCOPED_TRACE(std::string(type_info(type).name));
    const auto big = Model::load(inflate(dir, "big.gguf", zoo_path("target.gguf"), shape, type));
    const ModelConfig& c = big->config();
    EXPECT_EQ(c.n_embd, 512);
    EXPECT_EQ(c.n_layer, 9);
    EXPECT_EQ(c.n_ff, 1280);
    EXPECT_EQ(c.n_head, 8);  // head dimension 64 kept
    EXPECT_EQ(c.n_head_kv, 4);
    EXPECT_EQ(c.head_dim, source->config().head_dim);
    EXPECT_FLOAT_EQ(c.rms_eps, source->config().rms_eps * 256.0f / 512.0f);
    EXPECT_EQ(c.tied_embeddings, source->config().tied_embeddings);
    expect_same_function(*source, *big, text, prompt, 40);
    // The same vocabulary and tokenizer.
    const auto big_tokenizer = Tokenizer::from_gguf(big->gguf());
    EXPECT_EQ(big_tokenizer->encode(kText, true, false), text);
  }
}

TEST(Inflate, DrafterIntoFewerQueriesPerKvHeadCopiesKeyValueHeads) {
  // The drafter has 2 query heads on 1 kv head; the inflated shape has 1 query
  // head per kv head, so the kv head is copied into 2 kv heads.
  TempDir dir;
  const auto source = Model::load(zoo_path("draft.gguf"));
  const auto tokenizer = Tokenizer::from_gguf(source->gguf());
  const std::vector<int32_t> text = tokenizer->encode(kText, true, false);
  const std::vector<int32_t> prompt = tokenizer->encode("Q: A farmer has 12 apples", true, false);
  const auto big = Model::load(inflate(dir, "big.gguf", zoo_path("draft.gguf"),
                                       InflateShape{256, 3, 512, 4, 4}, DType::F16));
  EXPECT_EQ(big->config().n_head_kv, 4);
  expect_same_function(*source, *big, text, prompt, 32);
}

TEST(Inflate, Qwen2WithBiasesUntiedOutputAndRopeFactors) {
  TempDir dir;
  RandomModelSpec spec;
  spec.arch = "qwen2";
  spec.n_vocab = 300;
  spec.n_embd = 64;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.n_ff = 96;
  spec.n_layer = 2;
  spec.llama3_rope_freqs = true;
  spec.seed = 7;
  const std::string source_path = testing_support::write_model(dir, "qwen.gguf", spec);
  const auto source = Model::load(source_path);
  ASSERT_TRUE(source->config().qkv_bias);
  ASSERT_FALSE(source->config().tied_embeddings);
  const auto big =
      Model::load(inflate(dir, "big.gguf", source_path, InflateShape{128, 4, 160, 0, 0}));
  EXPECT_EQ(big->config().n_head, 8);
  EXPECT_EQ(big->config().n_head_kv, 4);
  EXPECT_EQ(big->config().rope_freq_factors, source->config().rope_freq_factors);
  std::vector<int32_t> text;
  for (int i = 0; i < 48; ++i) text.push_back((i * 37 + 11) % 256);
  expect_same_function(*source, *big, text, {256, 72, 101}, 24);
}

TEST(Inflate, QuantizedOutputComputesTheQuantizedSourcesFunction) {
  // Q8_0 blocks of the inflated rows hold the source row's blocks unchanged
  // (the source widths are multiples of 32), so the result predicts what the
  // Q8_0-quantized source predicts.
  TempDir dir;
  const auto source =
      Model::load(inflate(dir, "q8.gguf", zoo_path("target.gguf"), InflateShape{}, DType::Q8_0));
  EXPECT_EQ(source->gguf().get_int("general.file_type"), 7);
  EXPECT_EQ(source->config().n_embd, 256);  // an empty shape keeps the source's
  const auto big = Model::load(inflate(dir, "big-q8.gguf", zoo_path("target.gguf"),
                                       InflateShape{384, 7, 1024, 0, 0}, DType::Q8_0));
  const auto tokenizer = Tokenizer::from_gguf(source->gguf());
  const std::vector<int32_t> prompt = tokenizer->encode("import os\nimport sys\n", true, false);
  EXPECT_EQ(greedy(*big, prompt, 32), greedy(*source, prompt, 32));
}

// --type q4_k_m: llama.cpp's mix, as write_random_model makes it, in the
// source's layers and the added ones alike; the file loads and decodes.
TEST(Inflate, Q4KMGivesQ6KWhereLlamaCppsMixDoes) {
  TempDir dir;
  InflateOptions options;
  options.shape = {512, 8, 1024, 0, 0};  // 8 layers: the zoo target's 6 and 2 added
  options.q4_k_m = true;
  const std::string path = dir.file("q4_k_m.gguf");
  inflate_model(zoo_path("target.gguf"), options, path);
  const auto model = Model::load(path);
  const GgufFile& file = model->gguf();
  EXPECT_EQ(file.get_int("general.file_type"), 15);
  auto type_of = [&](const std::string& name) {
    const GgufTensorInfo* t = file.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t != nullptr ? t->type : DType::F32;
  };
  const bool tied = model->config().tied_embeddings;
  EXPECT_EQ(type_of("token_embd.weight"), tied ? DType::Q6_K : DType::Q4_K);
  if (!tied) {
    EXPECT_EQ(type_of("output.weight"), DType::Q6_K);
  }
  int more_bits = 0;
  for (int layer = 0; layer < 8; ++layer) {
    const std::string p = "blk." + std::to_string(layer) + ".";
    const DType larger = q4_k_m_more_bits(layer, 8) ? DType::Q6_K : DType::Q4_K;
    more_bits += q4_k_m_more_bits(layer, 8) ? 1 : 0;
    EXPECT_EQ(type_of(p + "attn_v.weight"), larger) << layer;
    EXPECT_EQ(type_of(p + "ffn_down.weight"), larger) << layer;
    for (const char* t : {"attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight",
                          "ffn_up.weight"})
      EXPECT_EQ(type_of(p + t), DType::Q4_K) << p << t;
  }
  EXPECT_GT(more_bits, 0);
  EXPECT_LT(more_bits, 8);
  // Quantized, it still computes nearly the source's function (0.5% apart here).
  const auto source = Model::load(zoo_path("target.gguf"));
  const auto tokenizer = Tokenizer::from_gguf(source->gguf());
  const std::vector<int32_t> text = tokenizer->encode(kText, true, false);
  const double ppl_source = perplexity(*source, text);
  EXPECT_NEAR(perplexity(*model, text), ppl_source, 0.05 * ppl_source);
}

TEST(Inflate, PresetsSizeHeadsToTheSourceHeadDimension) {
  const InflateShape b8 = inflate_preset("8b", 64);
  EXPECT_EQ(b8.n_embd, 4096);
  EXPECT_EQ(b8.n_layer, 32);
  EXPECT_EQ(b8.n_ff, 14336);
  EXPECT_EQ(b8.n_head, 64);
  EXPECT_EQ(b8.n_head_kv, 16);  // key/value width 1024, as Llama 3.1 8B's 8 heads of 128
  const InflateShape b1 = inflate_preset("1b", 64);
  EXPECT_EQ(b1.n_head, 32);
  EXPECT_EQ(b1.n_head_kv, 8);
  EXPECT_EQ(inflate_preset("3b", 128).n_head, 24);
  EXPECT_THROW(inflate_preset("1b", 96), Error);
  EXPECT_THROW(inflate_preset("70b", 64), Error);
}

// The error message of inflating the zoo target into `shape`.
std::string inflate_error(const InflateShape& shape) {
  TempDir dir;
  try {
    inflate(dir, "bad.gguf", zoo_path("target.gguf"), shape);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Inflate, RejectsShapesThatCannotHoldTheSource) {
  EXPECT_NE(inflate_error({128, 0, 0, 0, 0}).find("smaller than the source"), std::string::npos);
  EXPECT_NE(inflate_error({0, 4, 0, 0, 0}).find("smaller than the source"), std::string::npos);
  EXPECT_NE(inflate_error({0, 0, 512, 0, 0}).find("smaller than the source"), std::string::npos);
  // 512 / 4 = 128 per head, the source's heads are 64 wide.
  EXPECT_NE(inflate_error({512, 0, 0, 4, 0}).find("head dimension"), std::string::npos);
  EXPECT_NE(inflate_error({520, 0, 0, 0, 0}).find("head dimension"), std::string::npos);
  // 2 source kv heads of 2 queries each do not fit in 1 kv head.
  EXPECT_NE(inflate_error({512, 0, 0, 8, 1}).find("n_head_kv 1 is too small"), std::string::npos);
  // Q4_0 rows must be multiples of 32.
  TempDir dir;
  InflateOptions options;
  options.shape = {256, 6, 784, 0, 0};
  options.weight_type = DType::Q4_0;
  EXPECT_THROW(inflate_model(zoo_path("target.gguf"), options, dir.file("q4.gguf")), Error);
}

TEST(Inflate, CommandLine) {
  TempDir dir;
  const std::string out = dir.file("cli.gguf");
  auto r = testing_support::run_parspec(
      "make-model --inflate " + zoo_path("draft.gguf") + " --n-embd 256 --n-layer 3 -o " + out,
      true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("inflated to 3 layers, n_embd 256"), std::string::npos) << r.output;
  EXPECT_EQ(Model::load(out)->config().n_head, 4);
  const int source_ctx = Model::load(zoo_path("draft.gguf"))->config().n_ctx_train;
  EXPECT_EQ(Model::load(out)->config().n_ctx_train, source_ctx);

  // A longer training context for long-prompt benchmarks; the rest unchanged.
  r = testing_support::run_parspec(
      "make-model --inflate " + zoo_path("draft.gguf") + " --n-embd 256 --ctx 8192 -o " + out,
      true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Model::load(out)->config().n_ctx_train, 8192);
  EXPECT_NE(source_ctx, 8192);

  r = testing_support::run_parspec("make-model --inflate " + zoo_path("draft.gguf") + " -o " + out,
                                   true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("give a --preset"), std::string::npos) << r.output;
  r = testing_support::run_parspec(
      "make-model --inflate " + zoo_path("draft.gguf") + " --preset 1b --seed 3 -o " + out, true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--seed is for random models"), std::string::npos) << r.output;
  r = testing_support::run_parspec("make-model --help");
  EXPECT_NE(r.output.find("--inflate SRC"), std::string::npos);
}

}  // namespace
}  // namespace parspec
