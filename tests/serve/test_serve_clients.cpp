// Real clients no one here wrote against `parspec serve` on the zoo's chat model:
// OpenAI's Node library (completions, chat, streaming) and headless Chromium,
// driven over the DevTools protocol, on the page at / (it sends a prompt, the
// streamed answer is checked once complete and a screenshot saved). Each skips with the reason when
// its client is missing (scripts/install-deps.sh installs both).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli_helpers.h"
#include "serve_helpers.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using nlohmann::json;
using testing_support::run_command;
using testing_support::run_parspec;
using testing_support::ServerProcess;
using testing_support::TempDir;

const std::string kSource = PARSPEC_SOURCE_DIR;
const std::string kModels = kSource + "/models/";

// `parspec generate` on the chat model: the reference. generate prints the
// end-of-turn text the model writes (the zoo's vocabulary spells it as text);
// the API leaves it out, as OpenAI's does with stop strings.
json generate_reference(const std::string& prompt, int n, bool chat) {
  const auto r =
      run_parspec("generate -m " + kModels + "target-chat.gguf -t 1 --temp 0 --json -n " +
                  std::to_string(n) + " --no-escape -p '" + prompt + "'" + (chat ? " --chat" : ""));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  json j = json::parse(r.output);
  const std::string text = j["text"], end_of_turn = "<|im_end|>";
  if (chat && text.ends_with(end_of_turn))
    j["text"] = text.substr(0, text.size() - end_of_turn.size());
  return j;
}

class ServeClients : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerProcess>(
        PARSPEC_BINARY,
        std::vector<std::string>{"-m", kModels + "target-chat.gguf", "-md", kModels + "draft.gguf",
                                 "--strategy", "sd", "--port", "0", "-t", "1", "-c", "256"},
        dir_.file("server.log"));
    ASSERT_GT(server_->port(), 0) << server_->log();
  }
  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ServeClients, OpenAiNodeClient) {
  const std::string modules = kSource + "/third_party/npm/node_modules";
  if (run_command("command -v node > /dev/null").exit_code != 0)
    GTEST_SKIP() << "node is not installed (scripts/install-deps.sh installs npm and node)";
  if (!std::filesystem::exists(modules + "/openai/package.json"))
    GTEST_SKIP() << "the npm package openai is not in " << modules
                 << " (scripts/install-deps.sh installs it)";
  const auto r =
      run_command("node " + kSource + "/tests/serve/serve_openai_client.cjs " + modules +
                  " http://127.0.0.1:" + std::to_string(server_->port()) + "/v1 unused-key 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output << "\n" << server_->log();
  const json got = json::parse(r.output);
  const json completion = generate_reference("def add(a, b):", 32, false);
  const json chat = generate_reference("What is 2 + 3?", 32, true);
  EXPECT_EQ(got["models"], json::array({"target-chat"}));
  EXPECT_EQ(got["completion"], completion["text"]);
  EXPECT_EQ(got["completion_stream"], completion["text"]);
  EXPECT_EQ(got["completion_usage"]["completion_tokens"], completion["n_gen"]);
  EXPECT_EQ(got["chat"], chat["text"]);
  EXPECT_EQ(got["chat_stream"], chat["text"]);
  EXPECT_EQ(got["chat_stream_usage"]["completion_tokens"], chat["n_gen"]);
  EXPECT_EQ(got["unknown_model_status"], 404);
}

std::string unescape_html(std::string s) {
  const std::pair<const char*, const char*> entities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : entities)
    for (size_t at; (at = s.find(from)) != std::string::npos;) s.replace(at, std::strlen(from), to);
  return s;
}

TEST_F(ServeClients, ChromiumPageStreamsTheAnswer) {
  if (run_command("command -v chromium > /dev/null").exit_code != 0)
    GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  if (run_command("command -v node > /dev/null").exit_code != 0)
    GTEST_SKIP() << "node (which drives chromium over the DevTools protocol) is not installed";
  const std::string url = "http://127.0.0.1:" + std::to_string(server_->port()) +
                          "/?max_tokens=24&temperature=0&prompt=What%20is%202%20%2B%203%3F";
  // A screenshot for people: build/serve-page.png.
  const std::string png =
      (std::filesystem::path(PARSPEC_BINARY).parent_path() / "serve-page.png").string();
  std::filesystem::remove(png);
  const auto dom =
      run_command("timeout 300 node " + kSource + "/tests/serve/serve_page_browser.cjs '" + url +
                  "' " + png + " " + dir_.file("profile") + " 2>&1");
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  EXPECT_TRUE(std::filesystem::exists(png) && std::filesystem::file_size(png) > 1000);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom.output, m, std::regex("id=\"status\">([a-z]+)<")))
      << dom.output;
  EXPECT_EQ(m[1], "done") << dom.output;
  // The answer: the text of the spans in the assistant's turn.
  ASSERT_TRUE(std::regex_search(
      dom.output, m, std::regex("<div class=\"turn assistant\" id=\"answer-0\">([^]*?)</div>")))
      << dom.output;
  const std::string answer_html = m[1];
  std::string answer;
  int draft_spans = 0;
  const std::regex span("<span class=\"(draft|target)\">([^<]*)</span>");
  for (auto it = std::sregex_iterator(answer_html.begin(), answer_html.end(), span);
       it != std::sregex_iterator(); ++it) {
    answer += unescape_html((*it)[2]);
    if ((*it)[1] == "draft") ++draft_spans;
  }
  const json chat = generate_reference("What is 2 + 3?", 24, true);
  EXPECT_EQ(answer, chat["text"]);
  EXPECT_GT(draft_spans, 0) << "no token was coloured as an accepted draft";
  EXPECT_TRUE(std::regex_search(dom.output, std::regex("id=\"tau\">τ [0-9]")))
      << "the page shows no tau";
}

}  // namespace
}  // namespace parspec
