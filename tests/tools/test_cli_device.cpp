// The device flags (--device/-dev, -ngl, -ngld) as a user meets them: a partial
// offload is refused, --device cuda fails with the reason where no GPU can be
// used, -ngl alone falls back to the CPU with a note and the same tokens, and
// where a GPU is present the tokens of the GPU run are those of the CPU run.
#include <gtest/gtest.h>

#include <string>

#include "cli_helpers.h"
#include "cuda/backend.h"

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
}

TEST(CliDevice, ServeRunsOnTheCpuOnly) {
  const auto r = run_parspec("serve -m " + kModel + " --device cuda --port 0", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("the server runs on the CPU"), std::string::npos) << r.output;
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
