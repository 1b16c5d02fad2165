// Mixture-of-experts models against llama.cpp's recorded results
// (tests/data/moe_llama_cpp.json, written by scripts/check_moe_llama_cpp.sh
// with llama.cpp's llama-perplexity and its greedy decoding): each model is
// written again by `parspec make-model` from its recorded arguments, and
// parspec's perplexity (within 0.1%) and greedy tokens must be llama.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_helpers.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::run_parspec;
using testing_support::TempDir;

nlohmann::json recorded() {
  std::ifstream in(std::string(PARSPEC_SOURCE_DIR) + "/tests/data/moe_llama_cpp.json");
  return nlohmann::json::parse(in);
}

// Single-quoted for the shell (the recorded texts hold no single quote).
std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

class MoeLlamaCpp : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeLlamaCpp, PerplexityAndGreedyTokensMatchLlamaCpp) {
  const nlohmann::json data = recorded();
  const nlohmann::json* entry = nullptr;
  for (const auto& m : data.at("models"))
    if (m.at("name") == GetParam()) entry = &m;
  ASSERT_NE(entry, nullptr) << GetParam() << " is not recorded";
  TempDir dir;
  const std::string model = dir.file("m.gguf"), text = dir.file("text.txt");
  std::string args;
  for (const auto& a : entry->at("make_model")) args += " " + a.get<std::string>();
  ASSERT_EQ(run_parspec("make-model" + args + " -o " + model).exit_code, 0);
  std::ofstream(text) << data.at("text").get<std::string>();

  const auto ppl = run_parspec("perplexity -t 1 -m " + model + " -f " + text + " -c " +
                               std::to_string(data.at("ctx").get<int>()));
  ASSERT_EQ(ppl.exit_code, 0) << ppl.output;
  const size_t at = ppl.output.rfind("PPL = ");
  ASSERT_NE(at, std::string::npos) << ppl.output;
  const double ours = std::stod(ppl.output.substr(at + 6));
  const double theirs = entry->at("perplexity").get<double>();
  EXPECT_LE(std::abs(ours - theirs) / theirs, 1e-3)
      << "parspec " << ours << ", llama.cpp " << theirs;

  const auto& prompts = data.at("prompts");
  ASSERT_EQ(prompts.size(), entry->at("greedy").size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto gen = run_parspec("generate -t 1 --temp 0 --ignore-eos --json -m " + model + " -n " +
                                 std::to_string(data.at("n_predict").get<int>()) + " -p " +
                                 quoted(prompts[i].get<std::string>()));
    ASSERT_EQ(gen.exit_code, 0) << gen.output;
    EXPECT_EQ(nlohmann::json::parse(gen.output).at("tokens"), entry->at("greedy")[i])
        << "prompt " << prompts[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Recorded, MoeLlamaCpp,
                         ::testing::Values("mixtral_f32", "mixtral_q8_0", "qwen2moe_f32",
                                           "qwen2moe_f16"));

}  // namespace
}  // namespace parspec
