// The device flags (--device/-dev, -ngl, -ngld) as a user meets them: a partial
// offload is refused, --device cuda fails with the reason where no GPU can be
// used, -ngl alone falls back to the CPU with a note and the same tokens,
// where a GPU is present the tokens of the GPU run are those of the CPU run,
// and the server runs there too.
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "cuda/backend.h"
#include "serve_helpers.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::run_parspec;

const std::string kModel = std::string(PARSPEC_SOURCE_DIR) + "/models/target.gguf";
const std::string kDraft = std::string(PARSPEC_SOURCE_DIR) + "/models/draft.gguf";

std::string generate(const std::string& extra) {
  return "generate -m " + kModel + " -p 'def add(a, b):' -n 12 --temp 0 -t 1 " + extra;
}

TEST(CliDevice, PartialOffloadIsRefused) {
  const auto r = run_parspec(generate("-ngl 3"), true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("partial offload is not supported"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("6 layers"), std::string::npos) << r.output;
}

TEST(CliDevice, UnknownDeviceIsAnError) {
  const auto r = run_parspec(generate("--device tpu"), true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown device 'tpu'"), std::string::npos) << r.output;
  // An index past any int is a bad name too, said as such.
  const auto huge = run_parspec(generate("--device cuda99999999999"), true);
  EXPECT_NE(huge.exit_code, 0);
  EXPECT_NE(huge.output.find("unknown device 'cuda99999999999'"), std::string::npos) << huge.output;
}

// serve on the GPU: without one, --device cuda fails with the reason; with
// one, concurrent requests (batched into multi-sequence forwards on the
// device) give the tokens each gets alone, and a speculative strategy's are
// those of ar on the same device.
TEST(CliDevice, ServeOnTheGpuOrWhyNot) {
  const std::string reason = cuda::unavailable_reason(0);
  if (!reason.empty()) {
    const auto r = run_parspec("serve -m " + kModel + " --device cuda --port 0", true);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find(reason), std::string::npos) << r.output;
    return;
  }
  testing_support::TempDir dir;
  testing_support::ServerProcess server(
      PARSPEC_BINARY,
      {"-m", kModel, "-md", kDraft, "--strategy", "sd", "--device", "cuda", "--port", "0", "-t",
       "1", "-c", "512", "-np", "4"},
      dir.file("server.log"));
  ASSERT_GT(server.port(), 0) << server.log();
  EXPECT_NE(server.log().find("target model on cuda0"), std::string::npos) << server.log();
  const std::vector<std::string> prompts = {"def add(a, b):", "Once upon a time", "import os",
                                            "The cat"};
  const auto ask = [&](const std::string& prompt) {
    const nlohmann::json body = {
        {"prompt", prompt}, {"max_tokens", 48}, {"temperature", 0}, {"return_tokens", true}};
    const auto r =
        testing_support::http_request(server.port(), "POST", "/v1/completions", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return nlohmann::json::parse(r.body)["choices"][0]["tokens"];
  };
  std::vector<nlohmann::json> solo;
  for (const std::string& p : prompts) solo.push_back(ask(p));
  std::vector<std::future<nlohmann::json>> together;
  for (const std::string& p : prompts)
    together.push_back(std::async(std::launch::async, [&, p] { return ask(p); }));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i].get(), solo[i]) << prompts[i];
  // GPU ar's tokens through the command line: the server's speculation is lossless.
  const auto ar = run_parspec("generate -m " + kModel +
                              " --device cuda -t 1 --temp 0 --json -n 48 -p '" + prompts[0] + "'");
  ASSERT_EQ(ar.exit_code, 0) << ar.output;
  EXPECT_EQ(nlohmann::json::parse(ar.output)["tokens"], solo[0]);
}

TEST(CliDevice, GpuRequestsWithoutAGpuSayWhyOrMatchTheCpu) {
  const auto cpu = run_parspec(generate("--device cpu"));  // stdout: the prompt and its text
  ASSERT_EQ(cpu.exit_code, 0);
  ASSERT_FALSE(cpu.output.empty());
  const std::string reason = cuda::unavailable_reason(0);
  const auto forced = run_parspec(generate("--device cuda"), true);
  const auto asked = run_parspec(generate("-ngl 99 -md " + kDraft + " --strategy sd"), true);
  if (!reason.empty()) {
    EXPECT_NE(forced.exit_code, 0);
    EXPECT_NE(forced.output.find(reason), std::string::npos) << forced.output;
    ASSERT_EQ(asked.exit_code, 0) << asked.output;
    EXPECT_NE(asked.output.find("running on the CPU"), std::string::npos) << asked.output;
    EXPECT_NE(asked.output.find(cpu.output), std::string::npos) << asked.output;
    return;
  }
  // A GPU: its greedy text is the CPU's on the zoo (tests/cuda checks the margins).
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(forced.output.find("target model on cuda0"), std::string::npos) << forced.output;
  EXPECT_NE(forced.output.find(cpu.output), std::string::npos) << forced.output;
  ASSERT_EQ(asked.exit_code, 0) << asked.output;
  EXPECT_NE(asked.output.find(cpu.output), std::string::npos) << asked.output;
}

TEST(CliDevice, InfoNamesTheGpuOrWhyThereIsNone) {
  const auto r = run_parspec("info " + kModel);
  ASSERT_EQ(r.exit_code, 0);
  const std::string reason = cuda::unavailable_reason(0);
  const std::string expected =
      reason.empty() ? "gpu            cuda0: " : "gpu            none: " + reason;
  EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
}

}  // namespace
}  // namespace parspec
