// parspec against llama.cpp on the dense families it knows, without llama.cpp:
// tests/data/families_llama_cpp.json holds llama.cpp's perplexity and greedy
// tokens for random-weight models that `parspec make-model` writes from fixed
// seeds (recorded by scripts/check_families_llama_cpp.sh). Each model is
// rewritten here, checked to be the recorded file byte for byte, and run
// through `parspec perplexity` (within 0.1%) and greedy `parspec generate`
// (the same tokens).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::run_parspec;
using testing_support::TempDir;

nlohmann::json recorded() {
  std::ifstream in(std::string(PARSPEC_SOURCE_DIR) + "/tests/data/families_llama_cpp.json");
  return nlohmann::json::parse(in);
}

std::string fnv1a64_hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t h = 0xCBF29CE484222325ull;
  for (std::istreambuf_iterator<char> it(in), end; it != end; ++it)
    h = (h ^ static_cast<unsigned char>(*it)) * 0x100000001B3ull;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class FamiliesLlamaCpp : public ::testing::TestWithParam<size_t> {};

TEST_P(FamiliesLlamaCpp, PerplexityAndGreedyTokensMatchLlamaCpp) {
  const nlohmann::json data = recorded();
  const nlohmann::json& c = data.at("cases").at(GetParam());
  SCOPED_TRACE(c.at("name").get<std::string>());
  TempDir dir;
  const std::string model = dir.file("m.gguf");
  const std::string ctx = std::to_string(c.at("ctx").get<int>());
  ASSERT_EQ(
      run_parspec("make-model -o " + model + " " + c.at("make_model").get<std::string>()).exit_code,
      0);
  // The writer is deterministic: the recorded numbers are for this very file.
  ASSERT_EQ(fnv1a64_hex(model), c.at("fnv1a64").get<std::string>());

  const std::string text =
      std::string(PARSPEC_SOURCE_DIR) + "/" + data.at("text").get<std::string>();
  const auto ppl = run_parspec("perplexity -m " + model + " -f " + text + " -c " + ctx + " -t 2");
  ASSERT_EQ(ppl.exit_code, 0);
  const size_t at = ppl.output.rfind("PPL = ");
  ASSERT_NE(at, std::string::npos) << ppl.output;
  const double ours = std::stod(ppl.output.substr(at + 6));
  const double theirs = c.at("perplexity").get<double>();
  EXPECT_LE(std::abs(ours - theirs) / theirs, 1e-3)
      << "parspec " << ours << ", llama.cpp " << theirs;

  const auto gen =
      run_parspec("generate -m " + model + " -p " + quoted(data.at("prompt").get<std::string>()) +
                  " -n " + std::to_string(data.at("n_predict").get<int>()) +
                  " --temp 0 --ignore-eos -t 1 --json -c " + ctx);
  ASSERT_EQ(gen.exit_code, 0);
  const nlohmann::json out = nlohmann::json::parse(gen.output);
  EXPECT_EQ(out.at("tokens").get<std::vector<int>>(), c.at("greedy").get<std::vector<int>>());
}

std::string case_name(const ::testing::TestParamInfo<size_t>& test) {
  return recorded().at("cases").at(test.param).at("name").get<std::string>();
}

INSTANTIATE_TEST_SUITE_P(Recorded, FamiliesLlamaCpp,
                         ::testing::Range<size_t>(0, recorded().at("cases").size()), case_name);

}  // namespace
}  // namespace parspec
