// The command line with mixture-of-experts models: make-model's expert
// options and their errors, quantizing expert tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cli_helpers.h"
#include "model/gguf.h"
#include "model/model.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::run_parspec;
using testing_support::TempDir;

TEST(MoeMakeModel, WritesExpertsAndRejectsBadExpertOptions) {
  TempDir dir;
  const std::string out = dir.file("m.gguf");
  auto r = run_parspec(
      "make-model --arch qwen2moe --experts 6 --experts-used 2 --n-ff-expert 32 "
      "--n-ff-shared 64 -o " +
          out,
      true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto model = Model::load(out);
  EXPECT_EQ(model->config().moe.n_expert, 6);
  EXPECT_EQ(model->config().moe.n_ff_shared, 64);
  const std::string mixtral = dir.file("mixtral.gguf");
  ASSERT_EQ(run_parspec("make-model --experts 4 --experts-used 2 -o " + mixtral).exit_code, 0);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--arch qwen2moe", "qwen2moe needs --experts"},
      {"--arch qwen3moe --n-ff-expert 64", "qwen3moe needs --experts"},
      {"--experts 4 --experts-used 5", "experts used per token must be in 1..4, got 5"},
      {"--arch qwen2 --experts 4", "qwen2 has no experts"},
      {"--experts 4 --n-ff-shared 64", "--n-ff-shared is for qwen2moe"},
      {"--arch qwen3moe --experts 4 --n-ff-shared 64", "--n-ff-shared is for qwen2moe"},
      {"--experts 4 --n-ff-expert 64", "--n-ff-expert is for qwen2moe and qwen3moe"},
      {"--inflate " + out + " --n-ff-shared 64 --preset 100m", "is for random models"},
      {"--inflate " + mixtral + " --preset 100m", "a mixture-of-experts model cannot be inflated"},
  };
  for (const auto& [args, message] : bad) {
    r = run_parspec("make-model " + args + " -o " + dir.file("bad.gguf"), true);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << ": " << r.output;
  }
  r = run_parspec("info " + out, true);
  EXPECT_NE(r.output.find("6 experts, 2 per token"), std::string::npos) << r.output;
}

TEST(MoeQuantize, ConvertsExpertStacksAndKeepsTheRouter) {
  TempDir dir;
  const std::string source = dir.file("f32.gguf");
  auto made = run_parspec(
      "make-model --arch qwen2moe --experts 4 --experts-used 2 --n-ff-expert 32 "
      "--n-ff-shared 96 --n-vocab 300 -o " +
          source,
      true);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string out = dir.file("q8.gguf");
  const auto r = run_parspec("quantize " + source + " " + out + " q8_0", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto file = GgufFile::open(out);
  EXPECT_EQ(file->find_tensor("blk.0.ffn_gate_exps.weight")->type, DType::Q8_0);
  EXPECT_EQ(file->find_tensor("blk.0.ffn_down_exps.weight")->dims,
            (std::vector<int64_t>{32, 64, 4}));
  EXPECT_EQ(file->find_tensor("blk.0.ffn_gate_inp.weight")->type, DType::F32);
  EXPECT_EQ(file->find_tensor("blk.0.ffn_gate_inp_shexp.weight")->type, DType::F32);
  EXPECT_EQ(file->find_tensor("blk.0.ffn_up_shexp.weight")->type, DType::Q8_0);
  // The quantized model runs, and its greedy tokens mostly follow the source's.
  Worker worker(1);
  const auto a = Model::load(source), b = Model::load(out);
  KvCache ka(a->config(), 32), kb(b->config(), 32);
  const std::vector<int32_t> prompt = {256, 72, 101, 108, 108, 111};
  const auto la = a->forward(worker, Batch::chain(ka, prompt, false), ka);
  const auto lb = b->forward(worker, Batch::chain(kb, prompt, false), kb);
  EXPECT_EQ(std::max_element(la.begin(), la.end()) - la.begin(),
            std::max_element(lb.begin(), lb.end()) - lb.begin());
}

}  // namespace
}  // namespace parspec
