// The parspec command line as a user runs it: generate (text and --json, every
// strategy), perplexity (checked against the NumPy reference's logits), and
// clear errors for bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_helpers.h"
#include "model/gguf.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::CommandResult;
using testing_support::run_parspec;
using testing_support::TempDir;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RandomModelSpec spec;
    spec.n_vocab = 260;
    spec.seed = 3;
    target_ = testing_support::write_model(dir_, "target.gguf", spec);
    spec.weight_type = DType::Q8_0;
    draft_ = testing_support::write_model(dir_, "draft.gguf", spec);
  }
  TempDir dir_;
  std::string target_, draft_;
};

TEST_F(CliTest, GenerateJsonHasTheDocumentedFieldsAndStrategiesAgree) {
  const std::string common = " -p 'The quick brown fox' -n 12 --temp 0 -t 1 --json";
  const CommandResult ar = run_parspec("generate -m " + target_ + common);
  ASSERT_EQ(ar.exit_code, 0) << ar.output;
  const auto j = nlohmann::json::parse(ar.output);
  for (const char* key :
       {"text", "tokens", "n_prompt", "n_gen", "t_prompt_ms", "t_gen_ms", "tok_per_s", "drafted",
        "accepted", "tau", "alpha", "t_draft_ms", "t_verify_ms"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["n_gen"], 12);
  EXPECT_EQ(j["n_prompt"], 20);  // BOS + 19 bytes
  EXPECT_EQ(j["tokens"].size(), 12u);
  // The trees' shapes given: chosen as they run, a drafter as dear as this
  // target would take plain steps and draft nothing.
  for (const char* strategy : {"sd", "tree --tree-depth 2", "dyntree --tree-depth 2"}) {
    const CommandResult r = run_parspec("generate -m " + target_ + " -md " + draft_ +
                                        " --strategy " + strategy + common);
    ASSERT_EQ(r.exit_code, 0) << strategy << ": " << r.output;
    const auto js = nlohmann::json::parse(r.output);
    EXPECT_EQ(js["tokens"], j["tokens"]) << strategy;
    EXPECT_GT(js["drafted"].get<int>(), 0) << strategy;
    EXPECT_GE(js["tau"].get<double>(), 1.0) << strategy;
  }
}

// Strategy flags come from the registry: each names the strategies that take
// it, and PEARL's window is its own flag (--draft-max is sd's γ alone).
TEST_F(CliTest, StrategyFlagsComeFromTheRegistry) {
  const CommandResult help = run_parspec("generate --help");
  ASSERT_EQ(help.exit_code, 0);
  for (const char* text : {"--pearl-window", "pearl: the window",
                           "sd, easyspec, specinfer, cosine: draft tokens per step",
                           "tree, dyntree, easyspec, stpp, pipedec: levels below the root",
                           "ar, sd, tree, dyntree, pearl"})
    EXPECT_NE(help.output.find(text), std::string::npos) << text;
  const std::string common =
      " -p 'The quick brown fox' -n 8 --temp 0 -t 1 --json --strategy pearl -md " + draft_;
  const CommandResult w = run_parspec("generate -m " + target_ + common + " --pearl-window 2");
  ASSERT_EQ(w.exit_code, 0) << w.output;
  EXPECT_EQ(nlohmann::json::parse(w.output)["draft_window"], 2);
  // Without --pearl-window the window is measured, and the tool says so on stderr.
  const CommandResult m = run_parspec("generate -m " + target_ + common, true);
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("pearl: target forward"), std::string::npos) << m.output;
  // A flag of another strategy is an error, not silently ignored.
  const CommandResult other =
      run_parspec("generate -m " + target_ + common + " --draft-max 2", true);
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.output.find("--draft-max is an option of sd"), std::string::npos) << other.output;
  const CommandResult bench = run_parspec(
      "bench -m " + target_ + " -md " + draft_ + " --strategies ar,sd --tree-width 3 -n 2", true);
  EXPECT_EQ(bench.exit_code, 1);
  EXPECT_NE(bench.output.find("--tree-width is an option of dyntree"), std::string::npos)
      << bench.output;
  const CommandResult bad = run_parspec("generate -m " + target_ + " -p x --strategy medusa", true);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("known: ar, sd, tree, dyntree, pearl"), std::string::npos)
      << bad.output;
}

TEST_F(CliTest, GeneratePrintsTextThenSpeed) {
  const CommandResult r = run_parspec("generate -m " + target_ + " -p Hi -n 4 --temp 0 -t 1", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("Hi", 0), 0u) << r.output;  // the prompt comes first
  EXPECT_NE(r.output.find("prompt:"), std::string::npos);
  EXPECT_NE(r.output.find("generation: 4 tokens"), std::string::npos) << r.output;
}

TEST_F(CliTest, ClearErrorsForBadInput) {
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"generate -m /nonexistent.gguf -p x", "/nonexistent.gguf"},
      {"generate -m " + target_ + " -p x --bogus", "unknown option '--bogus'"},
      {"generate -m " + target_ + " -p x -n", "needs a value"},
      {"generate -m " + target_ + " -p x -n abc", "invalid value 'abc'"},
      {"generate -m " + target_ + " -p x --strategy sd", "needs a draft model"},
      {"generate -m " + target_ + " -p x --strategy nope -md " + draft_, "unknown strategy 'nope'"},
      {"generate -m " + target_ + " -p x --top-p 2", "top-p must be in (0, 1]"},
      {"generate -m " + target_ + " -p x -n 100 -c 16", "context size"},
      {"perplexity -m " + target_ + " -f /nonexistent.txt", "cannot open"},
      {"frobnicate", "unknown command 'frobnicate'"},
  };
  for (const Case& c : cases) {
    const CommandResult r = run_parspec(c.args, true);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
  }
  // A truncated model file is named in the error, not a crash.
  std::ifstream in(target_, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(dir_.file("cut.gguf"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  const CommandResult r = run_parspec("generate -m " + dir_.file("cut.gguf") + " -p x", true);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cut.gguf"), std::string::npos) << r.output;
}

TEST_F(CliTest, HelpListsTheOptions) {
  const CommandResult r = run_parspec("generate --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"-m, --model", "-md, --model-draft", "--strategy", "--temp", "--json"})
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
}

// -log softmax(row)[target] in double.
double nll(const float* row, int n, int target) {
  double m = row[0];
  for (int i = 1; i < n; ++i) m = std::max<double>(m, row[i]);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(row[i] - m);
  return std::log(s) + m - row[target];
}

TEST_F(CliTest, PerplexityFollowsLlamaPerplexityAndMatchesTheReference) {
  // Byte-level vocabulary: the text's tokens are BOS + its bytes.
  std::ostringstream text_stream;
  for (int i = 0; i < 40; ++i) text_stream << "The cat sat on the mat " << i << ". ";
  const std::string text = text_stream.str();
  const std::string text_path = dir_.file("text.txt");
  std::ofstream(text_path) << text;
  const int n_ctx = 64;
  const CommandResult r =
      run_parspec("perplexity -m " + target_ + " -f " + text_path + " -c 64 -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string last = r.output.substr(r.output.rfind("PPL = "));
  const double engine_ppl = std::stod(last.substr(6));

  std::vector<int> tokens = {256};
  for (unsigned char c : text) tokens.push_back(c);
  const int n_chunks = static_cast<int>(tokens.size()) / n_ctx;
  double sum = 0;
  int count = 0;
  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    std::vector<int> ids(tokens.begin() + chunk * n_ctx, tokens.begin() + (chunk + 1) * n_ctx);
    ids[0] = 256;
    std::ostringstream list;
    for (size_t i = 0; i < ids.size(); ++i) list << (i ? "," : "") << ids[i];
    const std::string out = dir_.file("ref.bin");
    const std::string cmd = "/usr/bin/python3 " PARSPEC_SOURCE_DIR
                            "/tests/reference/reference_forward.py " +
                            target_ + " --tokens " + list.str() + " --out " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::vector<float> logits(static_cast<size_t>(n_ctx) * 260);
    std::ifstream(out, std::ios::binary)
        .read(reinterpret_cast<char*>(logits.data()), logits.size() * sizeof(float));
    for (int j = n_ctx / 2; j < n_ctx - 1; ++j) {
      sum += nll(&logits[static_cast<size_t>(j) * 260], 260, ids[j + 1]);
      ++count;
    }
  }
  EXPECT_NEAR(engine_ppl, std::exp(sum / count), 1e-3 * std::exp(sum / count));
}

}  // namespace
}  // namespace parspec

namespace parspec {
namespace {

TEST_F(CliTest, QuantizeRewritesMatricesAndKeepsTheModelUsable) {
  const std::string out = dir_.file("q4.gguf");
  CommandResult r = run_parspec("quantize " + target_ + " " + out + " q4_0", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto file = GgufFile::open(out);
  for (const auto& t : file->tensors())
    EXPECT_EQ(t.type, t.dims.size() == 2 ? DType::Q4_0 : DType::F32) << t.name;
  r = run_parspec("generate -m " + out + " -p abc -n 4 --temp 0 -t 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["n_gen"], 4);
  r = run_parspec("quantize " + target_ + " " + dir_.file("x.gguf") + " q3_k", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("q3_k"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace parspec
