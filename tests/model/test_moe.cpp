// Mixture-of-experts FFNs (model/moe.h): the keys and tensors a file needs and
// the errors for what is missing or inconsistent, the experts a forward
// touches and several sequences in one pass. The
// batch-invariance checks run on MoE models in test_model.cpp, losslessness in
// tests/strategies, agreement with llama.cpp in test_moe_llama_cpp.cpp.
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <string>

#include "core/error.h"
#include "model/gguf.h"
#include "model/model.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::TempDir;

RandomModelSpec moe_spec(const std::string& arch, int n_expert, int n_used) {
  RandomModelSpec s;
  s.arch = arch;
  s.n_vocab = 300;
  s.n_embd = 64;
  s.n_ff = 128;
  s.n_layer = 2;
  s.n_expert = n_expert;
  s.n_expert_used = n_used;
  if (arch == "qwen2moe") {
    s.n_ff_expert = 32;
    s.n_ff_shared = 96;
  }
  s.seed = 21;
  return s;
}

// A copy of `source` with its metadata and tensors passed through `edit_key`
// (return false to drop a key) and `keep_tensor`, and `extra` tensors added.
struct Rewrite {
  std::function<bool(const std::string& key, GgufValue& value)> edit_key = {};
  std::function<bool(const GgufTensorInfo& t)> keep_tensor = {};
  std::function<void(GgufWriter&)> extra = {};
};

std::string rewritten(const TempDir& dir, const std::string& source, const Rewrite& r) {
  const auto in = GgufFile::open(source);
  GgufWriter out;
  for (auto [key, value] : in->metadata())
    if (!r.edit_key || r.edit_key(key, value)) out.set(key, value);
  for (const GgufTensorInfo& t : in->tensors())
    if (!r.keep_tensor || r.keep_tensor(t))
      out.add_tensor(t.name, t.dims, t.type, in->tensor_data(t), t.n_bytes);
  if (r.extra) r.extra(out);
  const std::string path = dir.file("edited.gguf");
  out.write(path);
  return path;
}

// The message of the Error loading `path` throws ("" when it loads).
std::string load_error(const std::string& path) {
  try {
    Model::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MoeConfig, ReadsTheExpertKeysOfEachFamily) {
  TempDir dir;
  const auto mixtral =
      Model::load(testing_support::write_model(dir, "a.gguf", moe_spec("llama", 8, 2)));
  const MoeConfig& m = mixtral->config().moe;
  EXPECT_EQ(m.n_expert, 8);
  EXPECT_EQ(m.n_expert_used, 2);
  EXPECT_EQ(m.n_ff_expert, 128);  // a Mixtral expert is feed_forward_length wide
  EXPECT_EQ(m.n_ff_shared, 0);
  EXPECT_TRUE(m.normalize_weights);

  const auto qwen =
      Model::load(testing_support::write_model(dir, "b.gguf", moe_spec("qwen2moe", 6, 3)));
  const MoeConfig& q = qwen->config().moe;
  EXPECT_EQ(q.n_expert, 6);
  EXPECT_EQ(q.n_expert_used, 3);
  EXPECT_EQ(q.n_ff_expert, 32);
  EXPECT_EQ(q.n_ff_shared, 96);
  EXPECT_FALSE(q.normalize_weights);  // qwen2moe keeps the softmax's top-k probabilities
  EXPECT_TRUE(qwen->config().qkv_bias);

  const auto dense =
      Model::load(testing_support::write_model(dir, "c.gguf", moe_spec("llama", 0, 0)));
  EXPECT_FALSE(dense->config().moe.enabled());
}

TEST(MoeConfig, QwenMoeWidthsDefaultAsLlamaCppDoes) {
  TempDir dir;
  const std::string source =
      testing_support::write_model(dir, "q.gguf", moe_spec("qwen2moe", 4, 2));
  // Without expert_shared_feed_forward_length the shared expert is
  // feed_forward_length wide: here it is not, so the shapes must disagree.
  const std::string path =
      rewritten(dir, source, {.edit_key = [](const std::string& k, GgufValue&) {
                  return k != "qwen2moe.expert_shared_feed_forward_length";
                }});
  const std::string error = load_error(path);
  EXPECT_NE(error.find("ffn_gate_shexp.weight has shape [64, 96], expected [64, 128]"),
            std::string::npos)
      << error;
}

struct BadFile {
  const char* what;
  Rewrite rewrite;
  const char* message;
};

TEST(MoeConfig, RejectsMissingOrInconsistentExpertsWithClearErrors) {
  TempDir dir;
  const std::string mixtral =
      testing_support::write_model(dir, "mixtral.gguf", moe_spec("llama", 4, 2));
  const std::string qwen =
      testing_support::write_model(dir, "qwen.gguf", moe_spec("qwen2moe", 4, 2));
  auto set_key = [](const char* name, uint32_t v) {
    return [name, v](const std::string& k, GgufValue& value) {
      if (k == name) value = GgufValue::u32(v);
      return true;
    };
  };
  auto drop_key = [](const char* name) {
    return [name](const std::string& k, GgufValue&) { return k != name; };
  };
  auto drop_tensor = [](const char* name) {
    return [name](const GgufTensorInfo& t) { return t.name != name; };
  };
  const std::vector<std::pair<std::string, BadFile>> cases = {
      {mixtral,
       {"more used than there are",
        {.edit_key = set_key("llama.expert_used_count", 5)},
        "llama.expert_used_count must be in 1..expert_count (4), got 5"}},
      {mixtral,
       {"none used",
        {.edit_key = set_key("llama.expert_used_count", 0)},
        "expert_used_count must be in 1..expert_count"}},
      {mixtral,
       {"used without a count",
        {.edit_key = drop_key("llama.expert_count")},
        "llama.expert_used_count is 2 but expert_count is missing or 0"}},
      {mixtral,
       {"too many",
        {.edit_key = set_key("llama.expert_count", 100000)},
        "expert_count 100000 is more than the 256 experts supported"}},
      {mixtral,
       {"count disagrees with the tensors",
        {.edit_key = set_key("llama.expert_count", 3)},
        "tensor blk.0.ffn_gate_inp.weight has shape [64, 4], expected [64, 3]"}},
      {mixtral,
       {"no router",
        {.keep_tensor = drop_tensor("blk.1.ffn_gate_inp.weight")},
        "missing tensor blk.1.ffn_gate_inp.weight"}},
      {mixtral,
       {"no experts",
        {.keep_tensor = drop_tensor("blk.0.ffn_down_exps.weight")},
        "missing tensor blk.0.ffn_down_exps.weight"}},
      {qwen,
       {"qwen2moe without experts",
        {.edit_key = drop_key("qwen2moe.expert_count")},
        "qwen2moe needs qwen2moe.expert_count > 0"}},
      {qwen,
       {"no shared expert",
        {.keep_tensor = drop_tensor("blk.0.ffn_up_shexp.weight")},
        "missing tensor blk.0.ffn_up_shexp.weight"}},
      {qwen,
       {"no shared gate",
        {.keep_tensor = drop_tensor("blk.1.ffn_gate_inp_shexp.weight")},
        "missing tensor blk.1.ffn_gate_inp_shexp.weight"}},
      {mixtral,
       {"one tensor per expert (old conversions)",
        {.extra =
             [](GgufWriter& w) {
               std::vector<float> zeros(64 * 128);
               w.add_tensor("blk.0.ffn_gate.0.weight", {64, 128}, DType::F32, zeros.data(),
                            zeros.size() * sizeof(float));
             }},
        "experts stored one tensor each (an old conversion) are not supported"}},
      {mixtral,
       {"dense FFN tensors left over",
        {.extra =
             [](GgufWriter& w) {
               std::vector<float> zeros(64 * 128);
               w.add_tensor("blk.0.ffn_up.weight", {64, 128}, DType::F32, zeros.data(),
                            zeros.size() * sizeof(float));
             }},
        "tensor blk.0.ffn_up.weight is not used"}},
  };
  for (const auto& [source, bad] : cases) {
    const std::string error = load_error(rewritten(dir, source, bad.rewrite));
    EXPECT_NE(error.find(bad.message), std::string::npos) << bad.what << ": got '" << error << "'";
  }
}

TEST(MoeForward, CountsTheDistinctExpertsEachLayerTouches) {
  TempDir dir;
  const auto model =
      Model::load(testing_support::write_model(dir, "m.gguf", moe_spec("llama", 8, 2)));
  Worker worker(2);
  KvCache kv(model->config(), 64);
  const ExpertTally& tally = model->expert_tally();
  const int64_t passes0 = tally.layer_passes, touched0 = tally.experts_touched;
  const std::vector<int32_t> one = {256};
  model->forward(worker, Batch::chain(kv, one, true), kv);
  // One token runs exactly its top-2 in each of the 2 layers.
  EXPECT_EQ(tally.layer_passes - passes0, 2);
  EXPECT_EQ(tally.experts_touched - touched0, 4);

  kv.discard_spec();
  std::vector<int32_t> many(40);
  std::iota(many.begin(), many.end(), 30);
  const int64_t passes1 = tally.layer_passes, touched1 = tally.experts_touched;
  model->forward(worker, Batch::chain(kv, many, true), kv);
  const int64_t touched = tally.experts_touched - touched1;
  EXPECT_EQ(tally.layer_passes - passes1, 2);
  // 40 tokens of random routing touch more than one token's experts, at most all.
  EXPECT_GT(touched, 4);
  EXPECT_LE(touched, 16);
}

TEST(MoeForward, SequencesBatchedTogetherGetTheirSoloLogits) {
  TempDir dir;
  for (const char* arch : {"llama", "qwen2moe"}) {
    const auto model = Model::load(
        testing_support::write_model(dir, std::string(arch) + ".gguf", moe_spec(arch, 6, 2)));
    Worker worker(2);
    std::vector<std::unique_ptr<KvCache>> solo, multi;
    std::vector<Batch> batches;
    std::vector<std::vector<float>> expected;
    for (int s = 0; s < 3; ++s) {
      solo.push_back(std::make_unique<KvCache>(model->config(), 64));
      multi.push_back(std::make_unique<KvCache>(model->config(), 64));
      Batch b;
      for (int i = 0; i < 2 + 2 * s; ++i) b.add(40 + 17 * s + i, i, i - 1, true);
      batches.push_back(b);
      expected.push_back(model->forward(worker, batches[s], *solo[s]));
    }
    std::vector<Model::SequenceBatch> sequences;
    for (int s = 0; s < 3; ++s) sequences.push_back({&batches[s], multi[s].get()});
    const auto got = model->forward_multi(worker, sequences);
    for (int s = 0; s < 3; ++s) EXPECT_TRUE(got[s] == expected[s]) << arch << " sequence " << s;
  }
}

}  // namespace
}  // namespace parspec
