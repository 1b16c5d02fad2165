// Bad input to the command line and the loader, as a llama.cpp user would try
// it: every case ends in exit code 1 or 2 with a message naming the problem and
// the flag or file, never a signal or a long run; and the llama.cpp conventions
// parspec follows (-p escapes, -r, -n -1, -c 0, -f -, ignored GPU flags).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_helpers.h"
#include "model/gguf.h"
#include "serve_helpers.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::TempDir;

// exit_code -1: killed by a signal (or by the time limit).
using RunResult = testing_support::CommandResult;

// Runs parspec under a 60 s kill switch (a hang fails the test, not the suite);
// `args` are already shell-quoted; stdout and stderr are merged.
RunResult run(const std::string& args, const std::string& stdin_text = "",
              bool merge_stderr = true) {
  std::string command = "timeout -s KILL 60 " + std::string(PARSPEC_BINARY) + " " + args +
                        (merge_stderr ? " 2>&1" : " 2>/dev/null");
  if (!stdin_text.empty()) command = "printf '%s' '" + stdin_text + "' | " + command;
  return testing_support::run_command(command);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A bad input: exit code 1 or 2 and every expected part in the message.
void expect_error(const std::string& args, const std::vector<std::string>& parts) {
  const RunResult r = run(args);
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << args << " exited " << r.exit_code << "\n"
                                                    << r.output;
  for (const std::string& p : parts) EXPECT_TRUE(contains(r.output, p)) << args << "\n" << r.output;
}

// Copies a GGUF file, changing its metadata and tensors on the way.
void rewrite_gguf(const std::string& in_path, const std::string& out_path,
                  const std::function<void(GgufWriter&)>& edit_metadata,
                  const std::function<bool(const GgufTensorInfo&, std::vector<uint8_t>&)>&
                      edit_tensor = nullptr) {
  const auto in = GgufFile::open(in_path);
  GgufWriter out;
  for (const auto& [key, value] : in->metadata()) out.set(key, value);
  edit_metadata(out);
  for (const auto& t : in->tensors()) {
    std::vector<uint8_t> bytes(in->tensor_data(t), in->tensor_data(t) + t.n_bytes);
    if (edit_tensor && !edit_tensor(t, bytes)) continue;
    out.add_tensor(t.name, t.dims, t.type, bytes.data(), bytes.size());
  }
  out.write(out_path);
}

class CliRobustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RandomModelSpec spec;
    spec.n_vocab = 300;
    spec.n_ctx = 512;
    spec.seed = 11;
    target_ = testing_support::write_model(dir_, "target.gguf", spec);
    spec.weight_type = DType::Q8_0;
    draft_ = testing_support::write_model(dir_, "draft.gguf", spec);
  }
  std::string gen() const { return "generate -m " + target_ + " "; }
  std::string sd() const { return gen() + "-md " + draft_ + " --strategy sd "; }
  TempDir dir_;
  std::string target_, draft_;
};

TEST_F(CliRobustTest, ThreadCountsBeyondAnyMachineAreRejectedUpFront) {
  expect_error(gen() + "-p hi -t 100000", {"-t", "out of range"});
  expect_error(sd() + "-p hi -td 100000", {"-td", "out of range"});
  expect_error("perplexity -m " + target_ + " -f " + target_ + " -t 100000",
               {"-t", "out of range"});
  expect_error("bench -m " + target_ + " -t 100000", {"-t", "out of range"});
  expect_error("bench-forward -m " + target_ + " -t 1,100000", {"-t", "out of range"});
}

// A number out of range names the range the flag takes, also where the
// value's type could not hold it.
TEST_F(CliRobustTest, OutOfRangeNumbersSayTheFlagsRange) {
  expect_error(gen() + "-p hi -n 1 --seed 18446744073709551616",
               {"'18446744073709551616'", "--seed", "out of range (0 to 18446744073709551615)",
                "-1 draws a random seed"});
  expect_error(gen() + "-p hi -n 1 --seed -2", {"--seed", "out of range (0 to"});
  const RunResult top = run(gen() + "-p hi -n 1 --seed 18446744073709551615 --json", "", false);
  ASSERT_EQ(top.exit_code, 0) << top.output;
  EXPECT_EQ(nlohmann::json::parse(top.output)["seed"].get<uint64_t>(), UINT64_MAX);
  expect_error(gen() + "-p hi -t 99999999999", {"'99999999999'", "-t", "out of range (1 to 1024)"});
  expect_error(gen() + "-p hi --temp 1e999", {"'1e999'", "--temp", "out of range"});
}

TEST_F(CliRobustTest, DraftLengthIsBoundedAndNeverExceedsWhatIsLeftToGenerate) {
  expect_error(sd() + "-p hi --draft-max 100000 -n 8", {"--draft-max", "out of range"});
  // The largest accepted γ with -n 8 drafts at most 7 tokens a step: quick,
  // and the same tokens as plain decoding.
  const RunResult ar = run(gen() + "-p hi -n 8 --temp 0 --ignore-eos --json");
  const RunResult r = run(sd() + "-p hi -n 8 --temp 0 --ignore-eos --json --draft-max 1024");
  ASSERT_EQ(ar.exit_code, 0) << ar.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto a = nlohmann::json::parse(ar.output), s = nlohmann::json::parse(r.output);
  EXPECT_EQ(a["tokens"], s["tokens"]);
  EXPECT_LE(s["drafted"].get<int>(), 7 * s["verify_steps"].get<int>());
  EXPECT_LT(s["draft_forwards"].get<int>(), 64);
}

// --strategy takes bench's NAME:G form: pearl:3 is pearl with window 3, the
// same tokens as ar; a setting given twice or a form the strategy does not
// take is an error that says which forms exist.
TEST_F(CliRobustTest, StrategyNamesTakeBenchsVariantForm) {
  const RunResult ar = run(gen() + "-p hi -n 12 --temp 0 --ignore-eos --json", "", false);
  ASSERT_EQ(ar.exit_code, 0) << ar.output;
  for (const std::string variant : {"pearl:3", "sd:2", "tree:d2c2"}) {
    const RunResult r = run(gen() + "-md " + draft_ + " --strategy " + variant +
                                " -p hi -n 12 --temp 0 --ignore-eos --json",
                            "", false);
    ASSERT_EQ(r.exit_code, 0) << variant << "\n" << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["tokens"], nlohmann::json::parse(ar.output)["tokens"]) << variant;
    if (variant == "pearl:3") {
      EXPECT_EQ(j["draft_window"], 3);
    }
  }
  expect_error(gen() + "-md " + draft_ + " -p hi --strategy pearl:3 --pearl-window 4",
               {"--strategy pearl:3 sets --pearl-window already"});
  expect_error(gen() + "-p hi --strategy ar:3", {"--strategy ar:3", "NAME:G with G >= 1 is for"});
  expect_error(gen() + "-p hi --strategy pearl:0", {"--strategy pearl:0"});
}

TEST_F(CliRobustTest, PromptPlusLengthDoesNotOverflow) {
  expect_error(gen() + "-p hi -n 2147483640 -c 64", {"-n 2147483640", "context size 64"});
  expect_error(gen() + "-p hi -n 1e12", {"'1e12'", "-n", "out of range"});
  expect_error(gen() + "-p hi -n 1.5", {"'1.5'", "whole number"});
  expect_error(gen() + "-p hi -n 1e3", {"'1e3'", "written as a whole number (1000)"});
  expect_error(gen() + "-p hi -n -2", {"-n -2"});
}

TEST_F(CliRobustTest, DraftMustShareTheTargetsTokenizer) {
  const std::string other_text = dir_.file("other-text.gguf");
  rewrite_gguf(draft_, other_text, [&](GgufWriter& w) {
    auto tokens = GgufFile::open(draft_)->get_string_array("tokenizer.ggml.tokens");
    tokens[280] = "something else";
    w.set("tokenizer.ggml.tokens", GgufValue::string_array(tokens));
  });
  const std::string other_bos = dir_.file("other-bos.gguf");
  rewrite_gguf(draft_, other_bos,
               [](GgufWriter& w) { w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(5)); });
  const std::string other_pre = dir_.file("other-pre.gguf");
  rewrite_gguf(draft_, other_pre,
               [](GgufWriter& w) { w.set("tokenizer.ggml.pre", GgufValue::string("qwen2")); });
  const std::string base = gen() + "-p hi -n 4 --strategy sd -md ";
  expect_error(base + other_text,
               {"token 280 differs", "'something else'", other_text, "--allow-draft-mismatch"});
  expect_error(base + other_bos, {"bos_token_id", "draft 5", other_bos});
  expect_error(base + other_pre, {"tokenizer.ggml.pre", "'qwen2'"});
  // The override runs it, with a warning.
  const RunResult r = run(base + other_text + " --allow-draft-mismatch");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "warning: --allow-draft-mismatch")) << r.output;
}

TEST_F(CliRobustTest, TensorsBeyondBlockCountAreAnError) {
  RandomModelSpec spec;
  spec.n_vocab = 300;
  spec.n_layer = 6;
  const std::string six = testing_support::write_model(dir_, "six.gguf", spec);
  const std::string claims_two = dir_.file("claims-two.gguf");
  rewrite_gguf(six, claims_two,
               [](GgufWriter& w) { w.set("llama.block_count", GgufValue::u32(2)); });
  expect_error("generate -m " + claims_two + " -p hi", {claims_two, "blk.2.", "block_count"});
  // A stray tensor of another name is caught the same way.
  const std::string stray = dir_.file("stray.gguf");
  rewrite_gguf(target_, stray, [](GgufWriter& w) {
    const float zero[4] = {};
    w.add_tensor("blk.0.extra.weight", {4}, DType::F32, zero, sizeof zero);
  });
  expect_error("generate -m " + stray + " -p hi", {stray, "blk.0.extra.weight"});
}

TEST_F(CliRobustTest, QuantizeRefusesToOverwriteItsInputUnderAnotherName) {
  const std::string copy = dir_.file("copy.gguf");
  rewrite_gguf(target_, copy, [](GgufWriter&) {});
  const std::string dir = copy.substr(0, copy.rfind('/'));
  const RunResult r = run("quantize " + copy + " " + dir + "/./copy.gguf q8_0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "is the input file")) << r.output;
  EXPECT_NO_THROW(GgufFile::open(copy));
}

TEST_F(CliRobustTest, PerplexityWithNoChunksIsAnError) {
  std::ofstream(dir_.file("text.txt")) << std::string(4000, 'a');
  expect_error("perplexity -m " + target_ + " -f " + dir_.file("text.txt") + " -c 16 --chunks 0",
               {"--chunks 0"});
}

TEST_F(CliRobustTest, NanLogitsNameTheFileAndWhetherTargetOrDraft) {
  const auto poison = [](const GgufTensorInfo& t, std::vector<uint8_t>& bytes) {
    if (t.name == "output_norm.weight") {
      const float nan = std::nanf("");
      for (size_t i = 0; i + 4 <= bytes.size(); i += 4) std::memcpy(&bytes[i], &nan, 4);
    }
    return true;
  };
  const std::string bad_target = dir_.file("nan-target.gguf");
  const std::string bad_draft = dir_.file("nan-draft.gguf");
  rewrite_gguf(
      target_, bad_target, [](GgufWriter&) {}, poison);
  // F32 weights: a quantized matmul would clamp NaN activations into range.
  rewrite_gguf(
      target_, bad_draft, [](GgufWriter&) {}, poison);
  expect_error("generate -m " + bad_target + " -p hi -n 4", {bad_target, "NaN"});
  expect_error(gen() + "-p hi -n 4 --strategy sd -md " + bad_draft,
               {"draft model", bad_draft, "NaN"});
  expect_error("generate -m " + bad_target + " -md " + draft_ + " --strategy sd -p hi -n 4",
               {"target model", bad_target, "NaN"});
}

TEST_F(CliRobustTest, MisleadingOrLateMessagesAreClear) {
  expect_error(gen() + "-p ''", {"-p", "empty"});
  const std::string dir = dir_.file("");
  expect_error(gen() + "-f " + dir, {"-f", "is a directory"});
  expect_error("perplexity -m " + target_ + " -f " + dir, {"-f", "is a directory"});
  expect_error("tokenize -m " + target_ + " -f " + dir, {"-f", "is a directory"});
  expect_error(gen() + "-p hi -c 2000000000", {"-c 2000000000", "MiB", "memory"});
  expect_error(gen() + "-p hi -c -5", {"-c -5"});
  expect_error(gen() + "-p hi --top-k -5", {"--top-k", "out of range"});
  expect_error(sd() + "-p hi --draft-p-min 5", {"--draft-p-min", "out of range"});
  // pearl and sd agree on --draft-max 0 (leave the flag out for pearl's measured window).
  expect_error(sd() + "-p hi --draft-max 0", {"--draft-max", "out of range (1 to 1024)"});
  expect_error(gen() + "-md " + draft_ + " --strategy pearl -p hi --draft-max 0",
               {"--draft-max", "out of range (1 to 1024)"});
  // bench checks its output paths before the run.
  const RunResult b =
      run("bench -m " + target_ + " -md " + draft_ + " --json " + dir_.file("nodir/x.json"));
  EXPECT_EQ(b.exit_code, 1) << b.output;
  EXPECT_TRUE(contains(b.output, "--json")) << b.output;
  EXPECT_TRUE(contains(b.output, "does not exist")) << b.output;
  EXPECT_FALSE(contains(b.output, "tok/s")) << b.output;
  // A prompt too long for the context is not echoed before its error.
  const std::string long_prompt(3000, 'z');
  const RunResult r = run(gen() + "-c 32 -p " + long_prompt);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "context")) << r.output;
  EXPECT_FALSE(contains(r.output, std::string(100, 'z'))) << r.output;
}

// A prompt is tokenized no further than one token past the context, and -f
// reads no further than the text such a prompt can cover: a file of 200 MB
// (sparse here) is refused by its size, before tokenizing anything.
TEST_F(CliRobustTest, OversizedPromptsAreRefusedWithBoundedWork) {
  const std::string huge = dir_.file("huge.txt");
  std::ofstream(huge).close();
  std::filesystem::resize_file(huge, 200u << 20);
  expect_error(gen() + "-f " + huge + " -c 64 -n 1",
               {"-f " + huge, "the file has 209715200 bytes", "context of 64 tokens"});
  expect_error(gen() + "-f - -c 64 -n 1 < " + huge,
               {"-f -", "more than", "bytes", "context of 64 tokens"});
  // Within the byte bound but over the context: counted up to 65 tokens.
  std::string words;
  for (int i = 0; i < 120; ++i) words += "word ";
  const std::string many = dir_.file("many.txt");
  std::ofstream(many) << words;
  expect_error(gen() + "-f " + many + " -c 64 -n 1",
               {"the prompt has more than 64 tokens", "context of 64 tokens"});
  expect_error(gen() + "-p '" + words + "' -c 64 -n 1", {"the prompt has more than 64 tokens"});
  expect_error(gen() + "--chat-template chatml -p '" + words + "' -c 64 -n 1",
               {"the prompt has more than 64 tokens"});
  // A prompt that fits is tokenized whole, as before.
  const RunResult fits = run(gen() + "-f " + many + " -c 4096 -n 1 --json", "", false);
  ASSERT_EQ(fits.exit_code, 0) << fits.output;
  EXPECT_GT(nlohmann::json::parse(fits.output)["n_prompt"].get<int>(), 64);
}

TEST_F(CliRobustTest, PromptEscapesAsInLlamaCpp) {
  // -n 0 prints the prompt as the model sees it.
  RunResult r = run(gen() + "-p 'a\\tb\\nc\\\\d\\x41' -n 0", "", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.substr(0, 10), "a\tb\nc\\dA\n") << r.output;
  r = run(gen() + "-p 'a\\tb' -n 0 --no-escape", "", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.substr(0, 5), "a\\tb\n") << r.output;
}

TEST_F(CliRobustTest, TokenizeProcessesEscapesLikeLlamaTokenize) {
  const RunResult escaped = run("tokenize -m " + target_ + " -p 'a\\nb' --ids --no-bos", "", false);
  const RunResult literal =
      run("tokenize -m " + target_ + " -p 'a\\nb' --ids --no-bos --no-escape", "", false);
  const RunResult newline =
      run("tokenize -m " + target_ + " -p \"$(printf 'a\\nb')\" --ids --no-bos", "", false);
  ASSERT_EQ(escaped.exit_code, 0) << escaped.output;
  EXPECT_EQ(escaped.output, newline.output);
  EXPECT_NE(escaped.output, literal.output);
}

TEST_F(CliRobustTest, UntilContextFullAndTrainingContext) {
  // -n -1: until the context is full; -c 0: the training context (512 here).
  RunResult r = run(gen() + "-p hi -n -1 -c 24 --temp 0 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["n_prompt"].get<int>() + j["n_gen"].get<int>(), 24);
  r = run(gen() + "-p hi -n -1 -c 0 --temp 0 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["n_prompt"].get<int>() + j["n_gen"].get<int>(), 512);
  // Beyond the training context: a warning, not an error.
  r = run(gen() + "-p hi -n 1 -c 600");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "exceeds the training context")) << r.output;
}

TEST_F(CliRobustTest, StopStringsEndTheGeneration) {
  // The bundled trained model writes words, which make good stop strings.
  const std::string gen_zoo =
      "generate -m " + std::string(PARSPEC_SOURCE_DIR) + "/models/target.gguf -p 'def add(a, b):' ";
  RunResult r = run(gen_zoo + "-n 40 --temp 0 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto full = nlohmann::json::parse(r.output);
  const std::string text = full["text"];
  // A stop string from the middle of the text: three letters or digits.
  std::string stop;
  for (size_t at = text.size() / 3; at + 3 <= text.size() && stop.empty(); ++at) {
    const std::string candidate = text.substr(at, 3);
    bool plain = true;
    for (unsigned char c : candidate) plain = plain && std::isalnum(c);
    if (plain) stop = candidate;
  }
  ASSERT_FALSE(stop.empty()) << "no 3-letter piece in the generated text: " << text;
  const size_t first = text.find(stop);
  r = run(gen_zoo + "-n 40 --temp 0 --ignore-eos --json -r '" + stop + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto stopped = nlohmann::json::parse(r.output);
  const std::string cut = stopped["text"];
  EXPECT_LT(stopped["n_gen"].get<int>(), full["n_gen"].get<int>());
  // It stops at the token completing the first occurrence: that token's text may reach beyond.
  ASSERT_GE(cut.size(), first + stop.size()) << cut;
  EXPECT_EQ(cut.substr(0, first + stop.size()), text.substr(0, first + stop.size()));
  EXPECT_EQ(cut.find(stop), first);
  EXPECT_EQ(text.substr(0, cut.size()), cut);
}

TEST_F(CliRobustTest, StdinPromptAndIgnoredGpuFlags) {
  RunResult r = run(gen() + "-f - -n 0", "from stdin");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "from stdin")) << r.output;
  r = run(gen() + "-p hi -n 1 -ngl 99 -fa --no-mmap");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // -ngl runs on a GPU where one can be used, and says so where none can.
  EXPECT_TRUE(contains(r.output, "note: -ngl 99: running on the CPU") ||
              contains(r.output, "target model on cuda0"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "note: -fa is ignored")) << r.output;
}

TEST_F(CliRobustTest, ConversationReadsTurnsFromStdin) {
  // Two user turns; each reply ends at -n tokens. The second turn's prompt
  // holds the first exchange, so it must fit the context too.
  const RunResult r = run(gen() + "--chat-template chatml -cnv -sys 'be brief' -n 3 --temp 0",
                          "hello\nand again\n");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const RunResult small =
      run(gen() + "--chat-template chatml -cnv -n 3 -c 40 --temp 0", "hello\nand again\n");
  EXPECT_EQ(small.exit_code, 1) << small.output;
  EXPECT_TRUE(contains(small.output, "context")) << small.output;
  expect_error(gen() + "-cnv -p hi", {"-cnv", "stdin"});
  // No template in the model: ChatML, as llama.cpp does, with a warning.
  const RunResult fallback = run(gen() + "-cnv -n 2 --temp 0", "hello\n");
  EXPECT_EQ(fallback.exit_code, 0) << fallback.output;
  EXPECT_TRUE(contains(fallback.output, "has no chat template")) << fallback.output;
  EXPECT_TRUE(contains(fallback.output, "using chatml")) << fallback.output;
}

// A model file truncated while a conversation runs (between two turns, after
// the first reply proves the model loaded): the default read-in copy answers
// the second turn; a mapped file (PARSPEC_MMAP=1) ends with a message naming
// the file. Never SIGBUS (exit 135).
TEST_F(CliRobustTest, ModelFileTruncatedWhileInUseIsNeverASignal) {
  const std::string script = dir_.file("truncate.sh");
  std::ofstream(script) << R"(set -u
model=$1; shift
fifo=$(dirname "$model")/turns; out=$model.out
rm -f "$fifo"; mkfifo "$fifo"
"$@" -m "$model" < "$fifo" > "$out" 2> "$out.err" &
pid=$!
exec 3> "$fifo"
printf 'hello\n' >&3
for _ in $(seq 600); do grep -q . "$out" 2>/dev/null && break; sleep 0.1; done
truncate -s 0 "$model"
printf 'and again\n' >&3
exec 3>&-
wait $pid
echo "exit=$?"
cat "$out" "$out.err"
)";
  for (const bool mapped : {false, true}) {
    const std::string model = dir_.file(mapped ? "mapped.gguf" : "copied.gguf");
    std::filesystem::copy_file(target_, model);
    const RunResult r = testing_support::run_command(
        std::string("timeout -s KILL 60 bash ") + script + " " + model + " " +
        (mapped ? "env PARSPEC_MMAP=1 " : "") + PARSPEC_BINARY +
        " generate --chat-template chatml -cnv -n 3 --temp 0 --ignore-eos");
    EXPECT_EQ(std::filesystem::file_size(model), 0u);
    if (mapped) {
      EXPECT_TRUE(contains(r.output, "exit=1")) << r.output;
      EXPECT_TRUE(contains(r.output, model + ": the model file changed while in use")) << r.output;
    } else {
      EXPECT_TRUE(contains(r.output, "exit=0")) << r.output;
    }
  }
}

// As llama.cpp's server: /v1/chat/completions on a model without a chat
// template renders ChatML (the same tokens as generate --chat-template
// chatml), with a warning at start; seed and oversized prompts get their
// precise messages through the real server.
TEST_F(CliRobustTest, ServeWithoutTemplateFallsBackToChatML) {
  testing_support::ServerProcess server(PARSPEC_BINARY,
                                        {"-m", target_, "--port", "0", "-t", "1", "-c", "256"},
                                        dir_.file("serve.log"));
  ASSERT_GT(server.port(), 0) << server.log();
  EXPECT_TRUE(contains(server.log(), target_ + " has no chat template")) << server.log();
  EXPECT_TRUE(contains(server.log(), "using chatml")) << server.log();
  const nlohmann::json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                               {"max_tokens", 6},
                               {"temperature", 0},
                               {"ignore_eos", true},
                               {"return_tokens", true}};
  const auto reply =
      testing_support::http_request(server.port(), "POST", "/v1/chat/completions", chat.dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  const RunResult reference = run(
      gen() + "-p hi --chat-template chatml -n 6 --temp 0 --ignore-eos -c 256 --json", "", false);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  EXPECT_EQ(nlohmann::json::parse(reply.body)["choices"][0]["tokens"],
            nlohmann::json::parse(reference.output)["tokens"]);

  const auto seed =
      testing_support::http_request(server.port(), "POST", "/v1/completions",
                                    R"({"prompt": "hi", "seed": 18446744073709551616})");
  EXPECT_EQ(seed.status, 400);
  EXPECT_TRUE(contains(seed.body, "'seed' must be between 0 and 18446744073709551615"))
      << seed.body;
  std::string words;
  for (int i = 0; i < 4000; ++i) words += "word ";
  const auto too_long = testing_support::http_request(
      server.port(), "POST", "/v1/chat/completions",
      nlohmann::json{{"messages", {{{"role", "user"}, {"content", words}}}}}.dump());
  EXPECT_EQ(too_long.status, 400);
  EXPECT_TRUE(contains(too_long.body, "the prompt has more than 256 tokens")) << too_long.body;
}

// As llama.cpp: a model without a chat template gets ChatML, and says so.
TEST_F(CliRobustTest, ChatWithoutTemplateFallsBackToChatML) {
  const RunResult warned = run(gen() + "-p hi --chat -n 4 --temp 0");
  EXPECT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_TRUE(contains(warned.output, target_ + " has no chat template")) << warned.output;
  EXPECT_TRUE(contains(warned.output, "using chatml")) << warned.output;
  EXPECT_TRUE(contains(warned.output, "--chat-template")) << warned.output;
  const RunResult fallback = run(gen() + "-p hi --chat -n 4 --temp 0 --json", "", false);
  const RunResult chatml =
      run(gen() + "-p hi --chat-template chatml -n 4 --temp 0 --json", "", false);
  ASSERT_EQ(fallback.exit_code, 0) << fallback.output;
  ASSERT_EQ(chatml.exit_code, 0) << chatml.output;
  EXPECT_EQ(nlohmann::json::parse(fallback.output)["tokens"],
            nlohmann::json::parse(chatml.output)["tokens"]);
  EXPECT_EQ(nlohmann::json::parse(fallback.output)["n_prompt"],
            nlohmann::json::parse(chatml.output)["n_prompt"]);
}

}  // namespace
}  // namespace parspec

namespace parspec {
namespace {

// docs/cli.md is the output of `parspec help --markdown` (the parsers' own
// tables): regenerate it with `build/parspec help --markdown > docs/cli.md`.
TEST(CliReference, DocsMatchTheArgumentParsers) {
  const RunResult r = run("help --markdown", "", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(std::string(PARSPEC_SOURCE_DIR) + "/docs/cli.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(doc, r.output)
      << "docs/cli.md is stale: run build/parspec help --markdown > docs/cli.md";
  for (const char* flag : {"`-ngl`", "`-r`", "`--no-escape`", "`--allow-draft-mismatch`", "`-cnv`"})
    EXPECT_NE(doc.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace parspec
