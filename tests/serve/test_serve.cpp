// `parspec serve` as a client sees it, on the bundled zoo models over loopback:
// greedy completions (plain and streamed, completions and chat) equal
// `parspec generate`; concurrent requests equal their solo runs; every bad
// request gets a 4xx in OpenAI's error shape and the server keeps serving; the
// API key is enforced; the queue limit answers 429; a client that hangs up
// stops its generation; SIGTERM lets the requests in flight finish.
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "cli_helpers.h"
#include "serve_helpers.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using nlohmann::json;
using testing_support::http_raw;
using testing_support::http_request;
using testing_support::HttpReply;
using testing_support::run_parspec;
using testing_support::ServerProcess;
using testing_support::TempDir;

const std::string kModels = std::string(PARSPEC_SOURCE_DIR) + "/models/";
const std::string kKey = "test-key-123";
// Questions in the forms the zoo's chat model was taught (an arithmetic
// question, a word problem), answered "... The answer is N." Not the right
// N: the 5M-parameter zoo target cannot do arithmetic (models/README.md).
const std::vector<std::string> kChatQuestions = {
    "What is 12 plus 30?", "How much is 7 * 6?",
    "Tom has 5 apples. He buys 3 more and then gives 2 to his friend. How many apples does he "
    "have now?"};

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// What `parspec generate` (ar, greedy) makes of the prompt: the reference.
json generate_reference(const std::string& prompt, int n, bool chat) {
  const auto r = run_parspec("generate -m " + kModels + "target.gguf -t 1 --temp 0 --json -n " +
                             std::to_string(n) + " --no-escape -p " + shell_quote(prompt) +
                             (chat ? " --chat-template chatml" : ""));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return json::parse(r.output);
}

struct Streamed {
  std::string text;
  std::vector<json> chunks;
  bool done = false;        // ended with data: [DONE]
  bool well_formed = true;  // every event a "data: " line
};

Streamed parse_sse(const std::string& body, bool chat) {
  Streamed s;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      s.well_formed = false;
      break;
    }
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind("data: ", 0) != 0) {
      s.well_formed = false;
      continue;
    }
    const std::string data = event.substr(6);
    if (data == "[DONE]") {
      s.done = true;
      continue;
    }
    const json j = json::parse(data);
    s.chunks.push_back(j);
    if (j.contains("choices") && !j["choices"].empty()) {
      const json& c = j["choices"][0];
      if (chat && c["delta"].contains("content"))
        s.text += c["delta"]["content"].get<std::string>();
      if (!chat) s.text += c["text"].get<std::string>();
    }
  }
  return s;
}

class ServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    server_ = new ServerProcess(PARSPEC_BINARY,
                                {"-m",
                                 kModels + "target.gguf",
                                 "-md",
                                 kModels + "draft.gguf",
                                 "--strategy",
                                 "sd",
                                 "--draft-max",
                                 "4",
                                 "--port",
                                 "0",
                                 "-t",
                                 "1",
                                 "-c",
                                 "1024",
                                 "-np",
                                 "6",
                                 "--max-queue",
                                 "4",
                                 "--max-tokens",
                                 "900",
                                 "--api-key",
                                 kKey,
                                 "--chat-template",
                                 "chatml",
                                 "--max-body",
                                 "65536"},
                                dir_->file("server.log"));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override { ASSERT_GT(server_->port(), 0) << server_->log(); }

  static HttpReply post(const std::string& path, const json& body, const std::string& key = kKey) {
    return http_request(server_->port(), "POST", path, body.dump(), key);
  }
  static HttpReply post_raw(const std::string& path, const std::string& body) {
    return http_request(server_->port(), "POST", path, body, kKey);
  }
  // The server still answers and generates after whatever came before.
  static void expect_still_serving() {
    const HttpReply h = http_request(server_->port(), "GET", "/health");
    EXPECT_EQ(h.status, 200);
    const HttpReply r =
        post("/v1/completions", {{"prompt", "def f(x):"}, {"max_tokens", 4}, {"temperature", 0}});
    EXPECT_EQ(r.status, 200) << r.body;
  }

  static TempDir* dir_;
  static ServerProcess* server_;
};
TempDir* ServeTest::dir_ = nullptr;
ServerProcess* ServeTest::server_ = nullptr;

TEST_F(ServeTest, CompletionsEqualGenerateStreamedAndNot) {
  for (const std::string prompt : {"def add(a, b):", "Once upon a time", "Q: Sam has 3 apples"}) {
    const json expected = generate_reference(prompt, 48, false);
    const HttpReply r =
        post("/v1/completions",
             {{"prompt", prompt}, {"max_tokens", 48}, {"temperature", 0}, {"return_tokens", true}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["text"], expected["text"]) << prompt;
    EXPECT_EQ(j["choices"][0]["tokens"], expected["tokens"]) << prompt;
    EXPECT_EQ(j["usage"]["prompt_tokens"], expected["n_prompt"]);
    EXPECT_EQ(j["usage"]["completion_tokens"], expected["n_gen"]);
    EXPECT_EQ(j["timings"]["predicted_n"], expected["n_gen"]);
    EXPECT_GT(j["timings"]["drafted"].get<int>(), 0);  // the server runs sd
    EXPECT_GE(j["timings"]["tau"].get<double>(), 1.0);

    const HttpReply s = post("/v1/completions", {{"prompt", prompt},
                                                 {"max_tokens", 48},
                                                 {"temperature", 0},
                                                 {"stream", true},
                                                 {"stream_options", {{"include_usage", true}}}});
    ASSERT_EQ(s.status, 200) << s.body;
    EXPECT_NE(s.headers.find("text/event-stream"), std::string::npos);
    const Streamed st = parse_sse(s.body, false);
    EXPECT_TRUE(st.well_formed) << s.body;
    EXPECT_TRUE(st.done);
    EXPECT_EQ(st.text, expected["text"]) << prompt;
    ASSERT_GE(st.chunks.size(), 2u);
    const json& usage_chunk = st.chunks.back();
    EXPECT_TRUE(usage_chunk["choices"].empty());
    EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], expected["n_gen"]);
    const json& last = st.chunks[st.chunks.size() - 2];
    EXPECT_FALSE(last["choices"][0]["finish_reason"].is_null());
    EXPECT_TRUE(last.contains("timings"));
  }
}

TEST_F(ServeTest, ChatEqualsGenerateWithTheChatTemplate) {
  const std::string question = "What is 2 + 3?";
  const json expected = generate_reference(question, 40, true);
  const json body = {{"model", "target"},
                     {"messages", json::array({{{"role", "user"}, {"content", question}}})},
                     {"max_tokens", 40},
                     {"temperature", 0}};
  const HttpReply r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], expected["text"]);
  EXPECT_EQ(j["usage"]["prompt_tokens"], expected["n_prompt"]);

  json stream_body = body;
  stream_body["stream"] = true;
  const HttpReply s = post("/v1/chat/completions", stream_body);
  ASSERT_EQ(s.status, 200);
  const Streamed st = parse_sse(s.body, true);
  EXPECT_TRUE(st.done && st.well_formed) << s.body;
  EXPECT_EQ(st.text, expected["text"]);
  ASSERT_FALSE(st.chunks.empty());
  EXPECT_EQ(st.chunks.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(st.chunks.front()["object"], "chat.completion.chunk");
  bool draft_piece = false;
  for (const json& c : st.chunks)
    if (c.value("source", "") == "draft") draft_piece = true;
  EXPECT_TRUE(draft_piece) << "no piece was marked as an accepted draft token";
}

TEST_F(ServeTest, ConcurrentRequestsEqualTheirSoloRuns) {
  const std::vector<std::string> prompts = {"def add(a, b):", "Once upon a time",  "import os",
                                            "The cat",        "Q: Ann has 5 pens", "x = ["};
  std::vector<json> solo;
  for (const std::string& p : prompts) {
    const HttpReply r =
        post("/v1/completions",
             {{"prompt", p}, {"max_tokens", 64}, {"temperature", 0}, {"return_tokens", true}});
    ASSERT_EQ(r.status, 200) << r.body;
    solo.push_back(json::parse(r.body)["choices"][0]["tokens"]);
  }
  // Sampled requests with a seed are reproducible too.
  const json sampled = {{"prompt", "Once upon a time"},
                        {"max_tokens", 64},
                        {"temperature", 0.9},
                        {"seed", 7},
                        {"return_tokens", true}};
  const HttpReply sampled_solo = post("/v1/completions", sampled);
  ASSERT_EQ(sampled_solo.status, 200);
  for (int round = 0; round < 2; ++round) {
    std::vector<std::future<HttpReply>> replies;
    for (const std::string& p : prompts)
      replies.push_back(std::async(std::launch::async, [&, p] {
        return post("/v1/completions", {{"prompt", p},
                                        {"max_tokens", 64},
                                        {"temperature", 0},
                                        {"return_tokens", true},
                                        {"stream", false}});
      }));
    for (size_t i = 0; i < prompts.size(); ++i) {
      const HttpReply r = replies[i].get();
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(json::parse(r.body)["choices"][0]["tokens"], solo[i]) << prompts[i];
    }
  }
  std::vector<std::future<HttpReply>> replies;
  for (int i = 0; i < 4; ++i)
    replies.push_back(
        std::async(std::launch::async, [&] { return post("/v1/completions", sampled); }));
  for (auto& f : replies) {
    const HttpReply r = f.get();
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(json::parse(r.body)["choices"][0]["tokens"],
              json::parse(sampled_solo.body)["choices"][0]["tokens"]);
  }
  // The metrics saw batched rounds (several requests' forwards in one pass).
  const HttpReply m = http_request(server_->port(), "GET", "/metrics", "", kKey);
  ASSERT_EQ(m.status, 200);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(m.body, match, std::regex("parspec_batch_rounds_total (\\d+)")));
  const long rounds = std::stol(match[1]);
  ASSERT_TRUE(
      std::regex_search(m.body, match, std::regex("parspec_batch_sequence_forwards_total (\\d+)")));
  EXPECT_GT(std::stol(match[1]), rounds);
}

TEST_F(ServeTest, BadRequestsGet4xxAndTheServerKeepsServing) {
  struct Bad {
    std::string path, body;
    int status;
  };
  const std::string ok_prompt = R"("prompt": "hi")";
  const std::vector<Bad> cases = {
      {"/v1/completions", "{not json", 400},
      {"/v1/completions", "[1, 2]", 400},
      {"/v1/completions", "{}", 400},
      {"/v1/completions", R"({"prompt": 5})", 400},
      {"/v1/completions", R"({"prompt": ""})", 400},
      {"/v1/completions", R"({"prompt": ["a", "b"]})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "max_tokens": "ten"})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "max_tokens": -1})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "max_tokens": 100000})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "max_tokens": 1.5})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "temperature": "hot"})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "temperature": 7})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "top_p": 0})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "stop": [1]})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "stop": ""})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "stream": "yes"})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "n": 2})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "seed": "x"})", 400},
      {"/v1/completions", "{" + ok_prompt + R"(, "model": "gpt-4"})", 404},
      {"/v1/completions", "{\"prompt\": \"bad \xff\xfe bytes\"}", 400},
      {"/v1/completions", "{\"prompt\": \"cut \xe2\x82\"}", 400},
      {"/v1/chat/completions", R"({"messages": []})", 400},
      {"/v1/chat/completions", R"({"messages": "hello"})", 400},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 200},
      {"/v1/chat/completions", R"({"messages": [{"role": 3, "content": "x"}]})", 400},
      {"/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})", 400},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400},
      {"/v1/nothing", "{}", 404},
  };
  for (const Bad& b : cases) {
    const HttpReply r = post_raw(b.path, b.body);
    EXPECT_EQ(r.status, b.status) << b.path << " " << b.body << " -> " << r.body;
    if (b.status >= 400) {
      const json j = json::parse(r.body, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << r.body;
      EXPECT_TRUE(j["error"]["message"].is_string()) << r.body;
      EXPECT_TRUE(j["error"].contains("type")) << r.body;
    }
  }
  // A body above --max-body: 413.
  const HttpReply big =
      post_raw("/v1/completions", R"({"prompt": ")" + std::string(70000, 'a') + R"("})");
  EXPECT_EQ(big.status, 413) << big.body;
  // A prompt longer than the context: 400 naming the context.
  const HttpReply long_prompt =
      post_raw("/v1/completions", R"({"prompt": ")" + std::string(20000, 'x') + R"("})");
  EXPECT_EQ(long_prompt.status, 400) << long_prompt.body;
  // Garbage instead of HTTP.
  http_raw(server_->port(), "\x16\x03\x01 not http at all\r\n\r\n");
  expect_still_serving();
}

TEST_F(ServeTest, ApiKeyIsEnforced) {
  const json body = {{"prompt", "hi"}, {"max_tokens", 2}};
  EXPECT_EQ(post("/v1/completions", body, "").status, 401);
  EXPECT_EQ(post("/v1/completions", body, "wrong-key").status, 401);
  EXPECT_EQ(post("/v1/completions", body, kKey + "x").status, 401);
  const HttpReply no_key = http_request(server_->port(), "GET", "/v1/models");
  EXPECT_EQ(no_key.status, 401);
  EXPECT_EQ(json::parse(no_key.body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(http_request(server_->port(), "GET", "/metrics").status, 401);
  // Health and the page need no key.
  EXPECT_EQ(http_request(server_->port(), "GET", "/health").status, 200);
  const HttpReply page = http_request(server_->port(), "GET", "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<title>parspec</title>"), std::string::npos);
  const HttpReply models = http_request(server_->port(), "GET", "/v1/models", "", kKey);
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "target");
}

TEST_F(ServeTest, StopStringsEndTheTextBeforeThem) {
  const json expected = generate_reference("def add(a, b):", 48, false);
  const std::string text = expected["text"];
  ASSERT_GT(text.size(), 12u);
  const std::string stop = text.substr(6, 3);  // a stop string inside the reference text
  const size_t cut = text.find(stop);
  for (bool stream : {false, true}) {
    const HttpReply r = post("/v1/completions", {{"prompt", "def add(a, b):"},
                                                 {"max_tokens", 48},
                                                 {"temperature", 0},
                                                 {"stop", json::array({"@@@@", stop})},
                                                 {"stream", stream}});
    ASSERT_EQ(r.status, 200);
    const std::string got = stream ? parse_sse(r.body, false).text
                                   : json::parse(r.body)["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(got, text.substr(0, cut)) << "stream " << stream;
  }
}

TEST_F(ServeTest, MetricsUseTheProjectNames) {
  post("/v1/completions", {{"prompt", "def f(x):"}, {"max_tokens", 8}, {"temperature", 0}});
  const HttpReply m = http_request(server_->port(), "GET", "/metrics", "", kKey);
  ASSERT_EQ(m.status, 200);
  for (const char* name :
       {"parspec_requests_total{strategy=\"sd\"}", "parspec_generated_tokens_total",
        "parspec_prompt_tokens_total", "parspec_queue_depth", "parspec_active_requests",
        "parspec_drafted_total{strategy=\"sd\"}", "parspec_accepted_total{strategy=\"sd\"}",
        "parspec_alpha{strategy=\"sd\"}", "parspec_tau{strategy=\"sd\"}",
        "parspec_time_to_first_token_seconds_bucket", "parspec_time_per_output_token_seconds_count",
        "parspec_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"}"})
    EXPECT_NE(m.body.find(name), std::string::npos) << name;
}

// The value of an unlabelled metric in a /metrics text (-1: missing).
double metric_value(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size() + 2));
}

const std::string kPool = kModels + "draft.gguf," + kModels + "draft-code.gguf," + kModels +
                          "draft-prose.gguf," + kModels + "draft-math.gguf";
const std::vector<std::string> kPoolPrompts = {"def add(a, b):", "Once upon a time",
                                               "Q: Sam has 3 apples"};

// The prompts at once, greedy, 40 tokens each: the replies, each checked to
// give ar's text (`parspec generate`).
std::vector<json> concurrent_equal_ar(int port) {
  std::vector<json> expected;
  for (const std::string& p : kPoolPrompts) expected.push_back(generate_reference(p, 40, false));
  std::vector<HttpReply> replies(kPoolPrompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < kPoolPrompts.size(); ++i)
    threads.emplace_back([&, i] {
      const json body = {{"prompt", kPoolPrompts[i]}, {"max_tokens", 40}, {"temperature", 0}};
      replies[i] = http_request(port, "POST", "/v1/completions", body.dump());
    });
  for (std::thread& t : threads) t.join();
  std::vector<json> out;
  for (size_t i = 0; i < kPoolPrompts.size(); ++i) {
    EXPECT_EQ(replies[i].status, 200) << replies[i].body;
    out.push_back(json::parse(replies[i].body));
    EXPECT_EQ(out.back()["choices"][0]["text"], expected[i]["text"]) << kPoolPrompts[i];
  }
  return out;
}

// cosine with the zoo's four drafters and the pipelined batcher (-td 1):
// concurrent requests give ar's tokens; the routing and the request
// scheduler's decisions show in each response's timings and in /metrics, and
// drafting ran beside verification.
TEST(ServeCosine, ConcurrentRequestsEqualArAndRoutingIsVisible) {
  TempDir dir;
  ServerProcess server(PARSPEC_BINARY,
                       {"-m", kModels + "target.gguf", "--strategy", "cosine", "--drafters", kPool,
                        "--port", "0", "-t", "1", "-td", "1", "-c", "512", "-np", "3"},
                       dir.file("server.log"));
  ASSERT_GT(server.port(), 0) << server.log();
  EXPECT_NE(server.log().find("serve: cosine scheduler: T_llm(b, Γ)"), std::string::npos)
      << server.log();
  const std::vector<json> replies = concurrent_equal_ar(server.port());
  int64_t waits = 0;
  for (const json& j : replies) {
    EXPECT_EQ(j["timings"]["strategy"], "cosine");
    // The scheduler granted every step (whether a step waits depends on the
    // latencies measured at start: the zoo's tiny target is nearly linear in n).
    const json& sched = j["timings"]["scheduler"];
    EXPECT_GT(sched["steps"].get<int64_t>(), 0);
    waits += sched["waits"].get<int64_t>();
    EXPECT_GE(sched["batch_mean"].get<double>(), 1.0);
    EXPECT_LE(sched["batch_mean"].get<double>(), 3.0);
    EXPECT_GE(sched["gamma_mean"].get<double>(), 1.0);
    EXPECT_GE(sched["drafters_mean"].get<double>(), 1.0);
    const json& drafters = j["timings"]["drafters"];
    ASSERT_EQ(drafters.size(), 4u);
    EXPECT_EQ(drafters[1]["name"], "draft-code");
    int64_t routed = 0;
    for (const json& d : drafters) {
      routed += d["routed_steps"].get<int64_t>();
      EXPECT_GE(d["score"].get<double>(), 0.0);
      EXPECT_LE(d["score"].get<double>(), 1.0);
    }
    EXPECT_GT(routed, 0);
  }
  const HttpReply m = http_request(server.port(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  for (const char* name :
       {"parspec_drafter_routed_steps_total{drafter=\"draft-math\"}",
        "parspec_drafter_fused_tokens_total{drafter=\"draft\"}",
        "parspec_drafter_routing_score{drafter=\"draft-prose\"}",
        "parspec_batch_overlapped_rounds_total", "parspec_tau{strategy=\"cosine\"}"})
    EXPECT_NE(m.body.find(name), std::string::npos) << name;
  EXPECT_GT(metric_value(m.body, "parspec_scheduler_decisions_total"), 0) << m.body;
  EXPECT_GT(metric_value(m.body, "parspec_scheduler_admitted_steps_total"), 0);
  EXPECT_EQ(metric_value(m.body, "parspec_scheduler_waits_total"), static_cast<double>(waits));
  EXPECT_GE(metric_value(m.body, "parspec_scheduler_batch_size"), 1);
  EXPECT_GE(metric_value(m.body, "parspec_scheduler_drafters"), 1);
  EXPECT_GE(metric_value(m.body, "parspec_batch_overlapped_draft_seconds_total"), 0) << m.body;
}

// The scheduler's bounds decide: with T_max below any batch's modelled time
// one request is chosen per verification pass, the others wait (at most
// --sched-max-wait passes in a row), and the tokens are still ar's.
TEST(ServeCosine, LatencyBoundMakesRequestsWaitAndStaysExact) {
  TempDir dir;
  ServerProcess server(PARSPEC_BINARY,
                       {"-m",
                        kModels + "target.gguf",
                        "--strategy",
                        "cosine",
                        "--drafters",
                        kPool,
                        "--port",
                        "0",
                        "-t",
                        "1",
                        "-td",
                        "1",
                        "-c",
                        "512",
                        "-np",
                        "3",
                        "--gamma-max",
                        "6",
                        "--sched-max-latency",
                        "0.001",
                        "--sched-max-wait",
                        "1"},
                       dir.file("server.log"));
  ASSERT_GT(server.port(), 0) << server.log();
  const std::vector<json> replies = concurrent_equal_ar(server.port());
  int64_t waits = 0;
  for (const json& j : replies) waits += j["timings"]["scheduler"]["waits"].get<int64_t>();
  EXPECT_GT(waits, 0);
  const HttpReply m = http_request(server.port(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(metric_value(m.body, "parspec_scheduler_waits_total"), static_cast<double>(waits));
  EXPECT_GT(metric_value(m.body, "parspec_scheduler_forced_total"), 0) << m.body;
  // The requests left out drafted beside the chosen one's verification (-td 1).
  EXPECT_GT(metric_value(m.body, "parspec_batch_overlapped_rounds_total"), 0) << m.body;
  EXPECT_GT(metric_value(m.body, "parspec_batch_overlapped_draft_seconds_total"), 0) << m.body;
  EXPECT_EQ(metric_value(m.body, "parspec_scheduler_infeasible_total"),
            metric_value(m.body, "parspec_scheduler_decisions_total"));
  // A scheduler flag without cosine is refused.
  const auto r = run_parspec("serve -m " + kModels + "target.gguf --sched-lambda 1 --port 0", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--sched-lambda is an option of cosine"), std::string::npos) << r.output;
}

// The zoo's chat model (models/target-chat.gguf: the target fine-tuned on ChatML
// turns, the template in its GGUF): a question is answered in the format it was
// taught and the answer ends its turn -- finish_reason "stop" well before
// max_tokens, the end-of-turn text (plain text in the zoo's vocabulary) left out
// of the content -- exactly as `generate --chat` answers it, streamed and not,
// while the requests run at once with the zoo drafter drafting for the chat
// model. The plain target, asked the same with --chat-template chatml, runs on
// to max_tokens without ending its turn: the fine-tune taught it.
TEST(ServeChatModel, AnswersInTheTemplateAndEndsTheTurn) {
  TempDir dir;
  ServerProcess server(PARSPEC_BINARY,
                       {"-m", kModels + "target-chat.gguf", "-md", kModels + "draft.gguf",
                        "--strategy", "sd", "--port", "0", "-t", "1", "-c", "256", "-np", "4"},
                       dir.file("server.log"));
  ASSERT_GT(server.port(), 0) << server.log();
  const HttpReply models = http_request(server.port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["data"][0]["meta"]["chat_template"], "chatml");

  const std::string end_of_turn = "<|im_end|>";
  const std::vector<std::string>& questions = kChatQuestions;
  std::vector<json> expected;
  for (const std::string& question : questions) {
    const auto r =
        run_parspec("generate -m " + kModels +
                    "target-chat.gguf --chat -t 1 --temp 0 --json -n 64 --no-escape -p " +
                    shell_quote(question));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expected.push_back(json::parse(r.output));
    const std::string text = expected.back()["text"];
    ASSERT_TRUE(text.ends_with(end_of_turn)) << question << " -> " << text;
    expected.back()["text"] = text.substr(0, text.size() - end_of_turn.size());
    const auto plain = run_parspec("generate -m " + kModels +
                                   "target.gguf --chat-template chatml -t 1 --temp 0 --json -n 64 "
                                   "--no-escape -p " +
                                   shell_quote(question));
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    EXPECT_EQ(json::parse(plain.output)["n_gen"], 64) << plain.output;
  }
  std::vector<HttpReply> replies(2 * questions.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < replies.size(); ++i)
    threads.emplace_back([&, i] {
      const json body = {
          {"messages", json::array({{{"role", "user"}, {"content", questions[i / 2]}}})},
          {"max_tokens", 64},
          {"temperature", 0},
          {"stream", i % 2 == 1}};
      replies[i] = http_request(server.port(), "POST", "/v1/chat/completions", body.dump());
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < replies.size(); ++i) {
    const std::string& question = questions[i / 2];
    ASSERT_EQ(replies[i].status, 200) << replies[i].body;
    std::string content, finish_reason;
    if (i % 2 == 0) {
      const json j = json::parse(replies[i].body);
      content = j["choices"][0]["message"]["content"];
      finish_reason = j["choices"][0]["finish_reason"];
      EXPECT_EQ(j["usage"]["completion_tokens"], expected[i / 2]["n_gen"]) << question;
      EXPECT_LT(j["usage"]["completion_tokens"].get<int>(), 64) << question;
    } else {
      const Streamed st = parse_sse(replies[i].body, true);
      EXPECT_TRUE(st.done && st.well_formed) << replies[i].body;
      content = st.text;
      for (const json& c : st.chunks)
        if (!c["choices"].empty() && !c["choices"][0]["finish_reason"].is_null())
          finish_reason = c["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(finish_reason, "stop") << question << " -> " << content;
    EXPECT_EQ(content, expected[i / 2]["text"]) << question;
    EXPECT_EQ(content.find("<|im"), std::string::npos) << content;
    EXPECT_TRUE(std::regex_search(content, std::regex("^[^\\n]+ The answer is [0-9]+\\.$")))
        << question << " -> " << content;
  }
}

// A second server with one slot and a queue of one: the third request is
// refused with 429, a client that hangs up stops its generation, and SIGTERM
// lets the requests in flight finish before the process exits 0.
TEST(ServeLimits, QueueLimitCancellationAndDrain) {
  // Long enough to be generating still at SIGTERM; sanitized builds generate several times
  // slower, so fewer tokens last as long.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kLongTokens = 1000;
#else
  constexpr int kLongTokens = 4000;
#endif
  TempDir dir;
  ServerProcess server(PARSPEC_BINARY,
                       {"-m", kModels + "target.gguf", "--port", "0", "-t", "1", "-c", "4100",
                        "-np", "1", "--max-queue", "1"},
                       dir.file("server.log"));
  ASSERT_GT(server.port(), 0) << server.log();
  const int port = server.port();
  const json long_request = {{"prompt", "Once upon a time"},
                             {"max_tokens", kLongTokens},
                             {"ignore_eos", true},
                             {"temperature", 0},
                             {"stream", true}};
  // Hang up after the first bytes of a long stream: its generation stops early.
  http_request(port, "POST", "/v1/completions", long_request.dump(), "", 200);
  std::string metrics;
  for (int i = 0; i < 200; ++i) {
    metrics = http_request(port, "GET", "/metrics").body;
    if (metrics.find("parspec_requests_total{strategy=\"ar\"} 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  std::smatch match;
  ASSERT_TRUE(std::regex_search(
      metrics, match, std::regex("parspec_generated_tokens_total\\{strategy=\"ar\"\\} (\\d+)")))
      << metrics;
  EXPECT_LT(std::stol(match[1]), kLongTokens) << "the generation ran on after the client hung up";

  // One generating, one queued, the third refused.
  auto first = std::async(std::launch::async, [&] {
    return http_request(port, "POST", "/v1/completions", long_request.dump());
  });
  for (int i = 0; i < 200; ++i) {
    if (http_request(port, "GET", "/metrics").body.find("parspec_active_requests 1") !=
        std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto second = std::async(std::launch::async, [&] {
    return http_request(port, "POST", "/v1/completions", long_request.dump());
  });
  for (int i = 0; i < 200; ++i) {
    if (http_request(port, "GET", "/metrics").body.find("parspec_queue_depth 1") !=
        std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const HttpReply third = http_request(port, "POST", "/v1/completions", long_request.dump());
  EXPECT_EQ(third.status, 429) << third.body;
  EXPECT_EQ(json::parse(third.body)["error"]["code"], "rate_limit_exceeded");

  // SIGTERM now: both accepted requests still finish, then the process exits 0.
  EXPECT_EQ(server.terminate(), 0) << server.log();
  for (auto* f : {&first, &second}) {
    const HttpReply r = f->get();
    EXPECT_EQ(r.status, 200);
    const Streamed st = parse_sse(r.body, false);
    EXPECT_TRUE(st.done) << "a request in flight did not finish";
    ASSERT_GE(st.chunks.size(), 1u);
    EXPECT_EQ(st.chunks.back()["timings"]["predicted_n"], kLongTokens);
  }
}

}  // namespace
}  // namespace parspec
