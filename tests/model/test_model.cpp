// Forward pass structure: batch invariance (bit-exact), KV cache commit and
// rollback, layer ranges, error handling.
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "core/error.h"
#include "kernels/isa.h"
#include "kernels/repack.h"
#include "model/model.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::bitwise_equal;
using testing_support::TempDir;

struct ModelCase {
  const char* name;
  RandomModelSpec spec;
};

// Test names and failure messages show the case name, not its bytes.
void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.name;
}

RandomModelSpec spec_of(const char* arch, DType type, int n_embd, bool tied) {
  RandomModelSpec s;
  s.arch = arch;
  s.weight_type = type;
  s.n_embd = n_embd;
  s.n_ff = 2 * n_embd;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_layer = 2;
  s.n_vocab = 300;
  s.tied_embeddings = tied;
  s.seed = 7;
  return s;
}

// Experts replace the FFN: a batch's tokens route to different experts, so
// the batch-invariance checks below cover the gathering of rows per expert.
RandomModelSpec moe_spec_of(const char* arch, DType type, int n_embd, int n_expert, int n_used) {
  RandomModelSpec s = spec_of(arch, type, n_embd, false);
  s.n_expert = n_expert;
  s.n_expert_used = n_used;
  if (std::string(arch) != "llama") s.n_ff_expert = n_embd;
  if (std::string(arch) == "qwen2moe") s.n_ff_shared = 2 * n_embd;
  return s;
}

// Windows shorter than the tests' prompts, so sliding layers drop keys.
RandomModelSpec with_window(RandomModelSpec s, int window) {
  s.sliding_window = window;
  return s;
}

RandomModelSpec gemma2_spec() {
  RandomModelSpec s = with_window(spec_of("gemma2", DType::F32, 64, true), 3);
  // Caps the random scores and logits actually reach.
  s.attn_logit_softcap = 2.0f;
  s.final_logit_softcap = 3.0f;
  return s;
}

// Six layers: five sliding, one global with its own RoPE base and scaling.
RandomModelSpec gemma3_spec() {
  RandomModelSpec s = with_window(spec_of("gemma3", DType::Q8_0, 64, true), 4);
  s.n_layer = 6;
  s.rope_freq_base = 1000000.0f;
  s.rope_linear_scale = 8.0f;
  return s;
}

// Trained for 32 positions: at the tests' context of 64, the long factors.
RandomModelSpec phi3_longrope_spec() {
  RandomModelSpec s = spec_of("phi3", DType::F32, 64, false);
  s.longrope_original_context = 32;
  return s;
}

std::vector<ModelCase> model_cases() {
  return {
      {"llama_f32", spec_of("llama", DType::F32, 64, false)},
      {"llama_q8_0", spec_of("llama", DType::Q8_0, 64, true)},
      {"llama_q4_0", spec_of("llama", DType::Q4_0, 64, false)},
      {"qwen2_f16", spec_of("qwen2", DType::F16, 64, true)},
      {"llama_q4_k", spec_of("llama", DType::Q4_K, 256, false)},
      {"qwen2_q6_k", spec_of("qwen2", DType::Q6_K, 256, false)},
      {"llama_bf16", spec_of("llama", DType::BF16, 64, false)},
      {"qwen3_f32", spec_of("qwen3", DType::F32, 64, false)},
      {"llama_sliding_q8_0", with_window(spec_of("llama", DType::Q8_0, 64, false), 3)},
      {"gemma2_f32", gemma2_spec()},
      {"gemma3_q8_0", gemma3_spec()},
      {"phi3_f16", with_window(spec_of("phi3", DType::F16, 64, false), 4)},
      {"phi3_longrope_f32", phi3_longrope_spec()},
      {"mixtral_f32", moe_spec_of("llama", DType::F32, 64, 4, 2)},
      {"mixtral_q8_0", moe_spec_of("llama", DType::Q8_0, 64, 8, 2)},
      {"qwen2moe_f16", moe_spec_of("qwen2moe", DType::F16, 64, 6, 3)},
      {"qwen2moe_q4_k", moe_spec_of("qwen2moe", DType::Q4_K, 256, 4, 2)},
      {"qwen3moe_f32", moe_spec_of("qwen3moe", DType::F32, 64, 8, 4)},
      {"qwen3moe_q8_0", moe_spec_of("qwen3moe", DType::Q8_0, 64, 4, 2)},
  };
}

class ModelTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    model_ = Model::load(testing_support::write_model(dir_, "m.gguf", GetParam().spec));
    model_->use_context_size(64);  // the caches' size: LongRoPE's long factors where there are
    n_vocab_ = model_->config().n_vocab;
  }

  void commit_all(KvCache& kv) {
    std::vector<int32_t> path(kv.n_spec());
    std::iota(path.begin(), path.end(), 0);
    kv.commit(path);
  }

  // A cache holding `prompt` as its committed prefix.
  KvCache prefilled(Worker& w, const std::vector<int32_t>& prompt) {
    KvCache kv(model_->config(), 64);
    model_->forward(w, Batch::chain(kv, prompt, false), kv);
    commit_all(kv);
    return kv;
  }

  // Logits of each of `tokens` decoded one at a time after `prompt`.
  std::vector<float> decode_one_by_one(Worker& w, const std::vector<int32_t>& prompt,
                                       const std::vector<int32_t>& tokens) {
    KvCache kv = prefilled(w, prompt);
    std::vector<float> all;
    for (int32_t t : tokens) {
      auto logits = model_->forward(w, Batch::chain(kv, std::span(&t, 1), true), kv);
      commit_all(kv);
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  }

  TempDir dir_;
  std::shared_ptr<Model> model_;
  int n_vocab_ = 0;
  const std::vector<int32_t> prompt_ = {256, 72, 101, 108, 108, 111};
  const std::vector<int32_t> tokens_ = {44, 32, 119, 111, 114};
};

TEST_P(ModelTest, ChainEqualsOneTokenDecodingBitwise) {
  Worker w(2);
  const auto reference = decode_one_by_one(w, prompt_, tokens_);
  KvCache kv = prefilled(w, prompt_);
  const auto chain = model_->forward(w, Batch::chain(kv, tokens_, true), kv);
  ASSERT_EQ(chain.size(), reference.size());
  EXPECT_TRUE(bitwise_equal(chain.data(), reference.data(), chain.size()));
}

TEST_P(ModelTest, TreeNodesEqualOneTokenDecodingBitwise) {
  Worker w(2);
  const auto reference = decode_one_by_one(w, prompt_, tokens_);
  KvCache kv = prefilled(w, prompt_);
  // The wanted chain interleaved with unrelated branches (their own tokens and
  // positions) hanging from the root and from chain nodes.
  const int32_t base = kv.n_committed();
  Batch tree;
  std::vector<int32_t> chain_cells;
  int32_t parent = -1;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    tree.add(static_cast<int32_t>(10 + i), base + static_cast<int32_t>(i), parent, false);
    chain_cells.push_back(static_cast<int32_t>(tree.size()));
    tree.add(tokens_[i], base + static_cast<int32_t>(i), parent, true);
    tree.add(static_cast<int32_t>(20 + i), base + static_cast<int32_t>(i) + 1, chain_cells.back(),
             false);
    parent = chain_cells.back();
  }
  const auto logits = model_->forward(w, tree, kv);
  ASSERT_EQ(logits.size(), reference.size());
  EXPECT_TRUE(bitwise_equal(logits.data(), reference.data(), logits.size()));
}

TEST_P(ModelTest, ThreadCountDoesNotChangeResults) {
  Worker one(1), three(3);
  const auto a = decode_one_by_one(one, prompt_, tokens_);
  const auto b = decode_one_by_one(three, prompt_, tokens_);
  EXPECT_TRUE(bitwise_equal(a.data(), b.data(), a.size()));
}

TEST_P(ModelTest, DecodingAfterRollbackEqualsNeverSpeculating) {
  Worker w(2);
  const auto reference = decode_one_by_one(w, prompt_, tokens_);
  KvCache kv = prefilled(w, prompt_);
  std::vector<float> got;
  // Speculate a chain whose first two tokens are right and the rest wrong:
  // commit the right ones, drop the rest, decode on.
  std::vector<int32_t> draft = {tokens_[0], tokens_[1], 5, 6};
  auto logits = model_->forward(w, Batch::chain(kv, draft, true), kv);
  got.insert(got.end(), logits.begin(), logits.begin() + 2 * n_vocab_);
  const int32_t path[] = {0, 1};
  kv.commit(path);
  EXPECT_EQ(kv.n_spec(), 0);
  // A wrong committed token, then truncation back.
  const int32_t wrong = 9;
  model_->forward(w, Batch::chain(kv, std::span(&wrong, 1), true), kv);
  commit_all(kv);
  kv.truncate(kv.n_committed() - 1);
  for (size_t i = 2; i < tokens_.size(); ++i) {
    logits = model_->forward(w, Batch::chain(kv, std::span(&tokens_[i], 1), true), kv);
    commit_all(kv);
    got.insert(got.end(), logits.begin(), logits.end());
  }
  ASSERT_EQ(got.size(), reference.size());
  EXPECT_TRUE(bitwise_equal(got.data(), reference.data(), got.size()));
}

TEST_P(ModelTest, KeptSubtreeContinuesExactly) {
  Worker w(1);
  const auto reference = decode_one_by_one(w, prompt_, tokens_);
  KvCache kv = prefilled(w, prompt_);
  const int32_t base = kv.n_committed();
  // Tree: t0 -> t1 -> t2, plus a sibling branch under t0. Commit t0, keep t1, t2.
  Batch tree;
  tree.add(tokens_[0], base, -1, true);     // cell 0
  tree.add(77, base + 1, 0, false);         // cell 1, discarded branch
  tree.add(tokens_[1], base + 1, 0, true);  // cell 2
  tree.add(tokens_[2], base + 2, 2, true);  // cell 3
  auto logits = model_->forward(w, tree, kv);
  const int32_t path[] = {0};
  const int32_t keep[] = {2, 3};
  auto ids = kv.commit(path, keep);
  ASSERT_EQ(ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(kv.spec_parent(0), -1);
  EXPECT_EQ(kv.spec_parent(1), 0);
  // Continue below the kept cells without recomputing them.
  Batch next;
  next.add(tokens_[3], base + 3, 1, true);
  auto more = model_->forward(w, next, kv);
  logits.insert(logits.end(), more.begin(), more.end());
  const int32_t path2[] = {0, 1, 2};
  kv.commit(path2);
  next = Batch::chain(kv, std::span(&tokens_[4], 1), true);
  more = model_->forward(w, next, kv);
  logits.insert(logits.end(), more.begin(), more.end());
  ASSERT_EQ(logits.size(), reference.size());
  EXPECT_TRUE(bitwise_equal(logits.data(), reference.data(), logits.size()));
}

TEST_P(ModelTest, LayerRangesComposeToTheFullForward) {
  Worker w(2);
  const ModelConfig& c = model_->config();
  KvCache full(c, 32), lower(c, 32, 0, 1), upper(c, 32, 1, c.n_layer);
  Batch b = Batch::chain(full, prompt_, true);
  const auto expected = model_->forward(w, b, full);

  std::vector<float> hidden(prompt_.size() * c.n_embd);
  model_->embed(prompt_, hidden.data());
  const int32_t first_lower = lower.add_cells(b.positions, b.parents);
  model_->forward_layers(w, b, lower, first_lower, 0, 1, hidden.data());
  const int32_t first_upper = upper.add_cells(b.positions, b.parents);
  model_->forward_layers(w, b, upper, first_upper, 1, c.n_layer, hidden.data());
  std::vector<float> logits(prompt_.size() * c.n_vocab);
  model_->output_logits(w, hidden.data(), static_cast<int>(prompt_.size()), logits.data());
  EXPECT_TRUE(bitwise_equal(logits.data(), expected.data(), expected.size()));
  EXPECT_THROW(model_->forward_layers(w, b, lower, first_lower, 0, 2, hidden.data()), Error);
}

// The weights copied into (huge-page) anonymous memory are the file's bytes,
// with Q4_0/Q8_0 (and, with AVX-512, Q4_K/Q6_K) matrices repacked into the tile
// layout (kernels/repack.h, on by default): the same logits, bit for bit, as from the plain
// mapping.
TEST_P(ModelTest, CopiedWeightsGiveTheMappedLogitsBitwise) {
  const std::string path = dir_.file("m.gguf");
  const auto copied = Model::load(path, WeightLoading::kCopy);
  const auto mapped = Model::load(path, WeightLoading::kMap);
  EXPECT_TRUE(copied->gguf().copied());
  EXPECT_FALSE(mapped->gguf().copied());
  EXPECT_EQ(copied->repacked_bytes() > 0,
            repack::repack_pays(GetParam().spec.weight_type, active_isa()));
  EXPECT_EQ(mapped->repacked_bytes(), 0u);
  Worker w(2);
  std::vector<float> logits[2];
  int i = 0;
  for (const std::shared_ptr<Model>& model : {copied, mapped}) {
    KvCache kv(model->config(), 64);
    logits[i++] = model->forward(w, Batch::chain(kv, prompt_, true), kv);
  }
  EXPECT_EQ(logits[0], logits[1]);
}

// Repacking is on by default; PARSPEC_REPACK=0 keeps a copied file's weights
// as the file has them. Both give the same logits, bit for bit, on every path
// (a Q4_K or Q6_K model is repacked only where AVX-512 runs: then under each
// ISA too). Tied embeddings are the output layer, repacked with the rest;
// embed then unpacks their rows.
TEST(ModelRepack, EnvironmentTurnsRepackingOff) {
  for (DType type : {DType::Q4_0, DType::Q4_K, DType::Q6_K})
    for (bool tied : {false, true}) {
      TempDir dir;
      const bool k_quant = type == DType::Q4_K || type == DType::Q6_K;
      const std::string path = testing_support::write_model(
          dir, "m.gguf", spec_of("llama", type, k_quant ? 256 : 64, tied));
      unsetenv("PARSPEC_REPACK");
      const auto repacked = Model::load(path, WeightLoading::kCopy);
      setenv("PARSPEC_REPACK", "0", 1);
      const auto plain = Model::load(path, WeightLoading::kCopy);
      unsetenv("PARSPEC_REPACK");
      EXPECT_EQ(plain->repacked_bytes(), 0u);
      // The output matrix (tied: the embeddings) and every layer's matrices.
      EXPECT_EQ(repacked->repacked_bytes(),
                repack::repack_pays(type, active_isa()) ? repacked->weight_bytes() : 0u);
      Worker w(2);
      const std::vector<int32_t> prompt = {256, 72, 101, 7, 9, 30, 31, 32, 33, 40};
      const Isa saved = active_isa();
      for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
        if (!set_active_isa(isa)) continue;
        std::vector<float> logits[2];
        int i = 0;
        for (const std::shared_ptr<Model>& model : {plain, repacked}) {
          KvCache kv(model->config(), 64);
          logits[i++] = model->forward(w, Batch::chain(kv, prompt, true), kv);
        }
        EXPECT_EQ(logits[0], logits[1])
            << isa_name(isa) << " " << type_info(type).name << (tied ? " tied" : "");
      }
      set_active_isa(saved);
    }
}

// An MPI stage maps the file and reads in only its layers (and the output
// matrix): the addresses stay, so the logits are the mapping's, bit for bit.
TEST_P(ModelTest, HeldLayersGiveTheMappedLogitsBitwise) {
  const std::string path = dir_.file("m.gguf");
  const auto held = Model::load(path, WeightLoading::kMap);
  const auto mapped = Model::load(path, WeightLoading::kMap);
  held->hold_in_memory(1, held->config().n_layer, true);
  EXPECT_GT(held->gguf().held_bytes(), 0u);
  EXPECT_EQ(mapped->gguf().held_bytes(), 0u);
  Worker w(2);
  std::vector<float> logits[2];
  int i = 0;
  for (const std::shared_ptr<Model>& model : {held, mapped}) {
    KvCache kv(model->config(), 64);
    logits[i++] = model->forward(w, Batch::chain(kv, prompt_, true), kv);
  }
  EXPECT_EQ(logits[0], logits[1]);
  held->hold_in_memory(0, 1, false);  // the rest, over pages already held
  KvCache kv(held->config(), 64);
  EXPECT_EQ(held->forward(w, Batch::chain(kv, prompt_, true), kv), logits[1]);
  // Held weights are repacked as a copied file's are (the mapped ones stay as the file has them).
  EXPECT_EQ(held->repacked_bytes(), Model::load(path, WeightLoading::kCopy)->repacked_bytes());
  EXPECT_EQ(mapped->repacked_bytes(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Types, ModelTest, ::testing::ValuesIn(model_cases()),
                         [](const auto& test_case) { return std::string(test_case.param.name); });

// Rope angles are kept per thread between forwards (model.cpp): two models
// that differ only in their rope base, run in turn on one thread at the same
// positions, must each get their own, as on a thread that never ran the other.
TEST(ModelRope, ModelsSharingAThreadKeepTheirOwnRopeAngles) {
  TempDir dir;
  RandomModelSpec spec = spec_of("llama", DType::F32, 64, false);
  const auto a = Model::load(testing_support::write_model(dir, "a.gguf", spec));
  spec.rope_freq_base = 500.0f;
  const auto b = Model::load(testing_support::write_model(dir, "b.gguf", spec));
  const std::vector<int32_t> tokens = {256, 72, 101, 108, 108, 111};
  auto logits = [&](const Model& m) {
    Worker w(1);
    KvCache kv(m.config(), 16);
    return m.forward(w, Batch::chain(kv, tokens, true), kv);
  };
  std::vector<float> b_alone;
  std::thread([&] { b_alone = logits(*b); }).join();
  const auto a_first = logits(*a);
  const auto b_after_a = logits(*b);
  ASSERT_EQ(b_after_a.size(), b_alone.size());
  EXPECT_TRUE(bitwise_equal(b_after_a.data(), b_alone.data(), b_alone.size()));
  EXPECT_FALSE(bitwise_equal(a_first.data(), b_alone.data(), b_alone.size()));
}

TEST(ModelErrors, RejectsBadTokensAndFullContext) {
  TempDir dir;
  auto model = Model::load(
      testing_support::write_model(dir, "m.gguf", spec_of("llama", DType::F32, 64, false)));
  Worker w(1);
  KvCache kv(model->config(), 4);
  const std::vector<int32_t> bad = {1, model->config().n_vocab};
  EXPECT_THROW(model->forward(w, Batch::chain(kv, bad, true), kv), Error);
  EXPECT_EQ(kv.n_spec(), 0);  // nothing half-written
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  try {
    model->forward(w, Batch::chain(kv, five, true), kv);
    FAIL() << "expected a context-size error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context size"), std::string::npos) << e.what();
  }
}

TEST(ModelErrors, MissingFileAndUnsupportedArchitecture) {
  EXPECT_THROW(Model::load("/nonexistent/model.gguf"), Error);
  TempDir dir;
  GgufWriter writer;
  writer.set("general.architecture", GgufValue::string("mamba"));
  writer.write(dir.file("mamba.gguf"));
  try {
    Model::load(dir.file("mamba.gguf"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported architecture 'mamba'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace parspec

namespace parspec {
namespace {

std::vector<float> chain_logits(const Model& model, const std::vector<int32_t>& tokens) {
  Worker w(1);
  KvCache kv(model.config(), 64);
  return model.forward(w, Batch::chain(kv, tokens, true), kv);
}

// The same weights with and without a window: positions whose keys all lie
// within the window are unchanged bit for bit, later ones differ.
TEST(ModelFamilies, SlidingWindowChangesOnlyPositionsBeyondIt) {
  TempDir dir;
  RandomModelSpec spec = spec_of("llama", DType::F32, 64, false);
  const auto full = Model::load(testing_support::write_model(dir, "full.gguf", spec));
  spec.sliding_window = 4;
  const auto windowed = Model::load(testing_support::write_model(dir, "window.gguf", spec));
  EXPECT_EQ(windowed->config().sliding_window, 4);
  const std::vector<int32_t> tokens = {256, 72, 101, 108, 108, 111, 44, 32};
  const auto a = chain_logits(*full, tokens), b = chain_logits(*windowed, tokens);
  const size_t n_vocab = static_cast<size_t>(full->config().n_vocab);
  for (size_t p = 0; p < tokens.size(); ++p) {
    const bool same = bitwise_equal(&a[p * n_vocab], &b[p * n_vocab], n_vocab);
    EXPECT_EQ(same, p < 4) << "position " << p;
  }
}

// LongRoPE: the context size picks the factors (short within the original
// context, long beyond it); position 0 is not rotated, so it agrees either way.
TEST(ModelFamilies, ContextSizeChoosesLongRopeFactors) {
  TempDir dir;
  RandomModelSpec spec = spec_of("phi3", DType::F32, 64, false);
  spec.longrope_original_context = 32;
  const auto model = Model::load(testing_support::write_model(dir, "phi3.gguf", spec));
  const std::vector<int32_t> tokens = {256, 72, 101, 108};
  model->use_context_size(32);
  EXPECT_FALSE(model->long_rope());
  const auto short_logits = chain_logits(*model, tokens);
  model->use_context_size(33);
  EXPECT_TRUE(model->long_rope());
  const auto long_logits = chain_logits(*model, tokens);
  const size_t n_vocab = static_cast<size_t>(model->config().n_vocab);
  EXPECT_TRUE(bitwise_equal(short_logits.data(), long_logits.data(), n_vocab));
  EXPECT_NE(short_logits, long_logits);
}

// Gemma 2's caps bound every logit; a missing key falls back to llama.cpp's defaults.
TEST(ModelFamilies, Gemma2SoftCapsBoundTheLogits) {
  TempDir dir;
  RandomModelSpec spec = spec_of("gemma2", DType::F32, 64, true);
  spec.logit_spread = 8.0f;
  spec.final_logit_softcap = 1.5f;
  const auto model = Model::load(testing_support::write_model(dir, "g.gguf", spec));
  EXPECT_EQ(model->config().attn_logit_softcap, 50.0f);
  EXPECT_EQ(model->config().sliding_window, 4096);
  const auto logits = chain_logits(*model, {256, 72, 101});
  float max_abs = 0;
  for (float x : logits) max_abs = std::max(max_abs, std::abs(x));
  EXPECT_LE(max_abs, 1.5f);
  EXPECT_GT(max_abs, 1.0f);  // the cap is reached, not avoided
}

TEST(ModelFamilies, RejectsInconsistentFiles) {
  TempDir dir;
  RandomModelSpec spec = spec_of("qwen3", DType::F32, 64, false);
  GgufWriter writer;
  const std::string path = testing_support::write_model(dir, "q.gguf", spec);
  // The same file without one layer's q norm.
  auto file = GgufFile::open(path);
  for (const GgufTensorInfo& t : file->tensors()) {
    if (t.name == "blk.1.attn_q_norm.weight") continue;
    writer.add_tensor(t.name, t.dims, t.type, file->tensor_data(t),
                      row_bytes(t.type, t.dims[0]) * (t.dims.size() > 1 ? t.dims[1] : 1));
  }
  for (const auto& [key, value] : file->metadata()) writer.set(key, value);
  writer.write(dir.file("broken.gguf"));
  try {
    Model::load(dir.file("broken.gguf"));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.attn_q_norm.weight"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace parspec
