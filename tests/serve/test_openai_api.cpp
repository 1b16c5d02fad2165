// parse_request on its own (no server): numbers out of range say the range,
// and a prompt is tokenized only as far as the context needs to refuse it.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "serve/openai_api.h"
#include "tokenizer/vocab_builder.h"

namespace parspec {
namespace {

using nlohmann::json;

class OpenAiApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VocabSpec spec = byte_level_vocab("llama-bpe");
    train_byte_level_bpe(spec, "hello world, hello there. the quick brown fox\n",
                         PreTokenizer::kLlama3, 40);
    spec.bos = spec.add("<|begin_of_text|>", TokenType::kControl);
    spec.add("<|im_start|>", TokenType::kControl);
    spec.eot = spec.add("<|im_end|>", TokenType::kControl);
    tokenizer_ = spec.build_tokenizer();
  }
  ApiRequest parse(const json& body, bool chat = false) const {
    return parse_request(body.dump(), chat, limits_, *tokenizer_, &chatml_);
  }
  // The error a body gets (status 0: none).
  ApiError error_of(const json& body, bool chat = false) const {
    try {
      parse(body, chat);
    } catch (const ApiError& e) {
      return e;
    }
    return ApiError{0, "", "", "", ""};
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  ChatTemplate chatml_ = ChatTemplate::from_name("chatml");
  const ApiLimits limits_{"model", 256, 128, 64};  // id, context, max_tokens, default
};

TEST_F(OpenAiApiTest, OutOfRangeNumbersSayTheRange) {
  // 2^64 does not fit any integer type: the JSON parser reads it as a float.
  const json too_big = json::parse(R"({"prompt": "hi", "seed": 18446744073709551616})");
  ApiError e = error_of(too_big);
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("'seed' must be between 0 and 18446744073709551615"), std::string::npos)
      << e.message;
  EXPECT_EQ(e.param, "seed");
  e = error_of({{"prompt", "hi"}, {"seed", -2}});
  EXPECT_NE(e.message.find("must be between 0 and 18446744073709551615"), std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find("got -2"), std::string::npos) << e.message;
  e = error_of({{"prompt", "hi"}, {"seed", 1.5}});
  EXPECT_NE(e.message.find("'seed' must be an integer"), std::string::npos) << e.message;
  // The whole range is accepted, -1 draws a seed.
  EXPECT_EQ(
      parse(json::parse(R"({"prompt": "hi", "seed": 18446744073709551615})")).job->sampling.seed,
      UINT64_MAX);
  EXPECT_EQ(parse({{"prompt", "hi"}, {"seed", 0}}).job->sampling.seed, 0u);
  EXPECT_EQ(error_of({{"prompt", "hi"}, {"seed", -1}}).status, 0);

  e = error_of(json::parse(R"({"prompt": "hi", "max_tokens": 1e30})"));
  EXPECT_NE(e.message.find("'max_tokens' must be between 0 and 128"), std::string::npos)
      << e.message;
  e = error_of(json::parse(R"({"prompt": "hi", "max_tokens": 99999999999999999999})"));
  EXPECT_NE(e.message.find("'max_tokens' must be between 0 and 128"), std::string::npos)
      << e.message;
  e = error_of({{"prompt", "hi"}, {"max_tokens", 129}});
  EXPECT_NE(e.message.find("'max_tokens' must be between 0 and 128, got 129"), std::string::npos)
      << e.message;
  e = error_of({{"prompt", "hi"}, {"top_k", -1}});
  EXPECT_NE(e.message.find("'top_k' must be between 0 and"), std::string::npos) << e.message;
}

TEST_F(OpenAiApiTest, OversizedPromptsAreRefusedAtTheContext) {
  const std::string sentence = "hello world, hello there 12345. ";
  std::string huge;
  while (huge.size() < (size_t{1} << 20)) huge.append(sentence);
  // 1 MiB: more text than 257 tokens can cover, refused before tokenizing;
  // 3000 bytes: tokenized, and stopped one token past the context.
  ASSERT_GT(258 * tokenizer_->max_token_bytes(), 3000u);
  ASSERT_GT(tokenizer_->encode(huge.substr(0, 3000), true, false).size(), 257u);
  for (const std::string& text : {huge, huge.substr(0, 3000)}) {
    for (const bool chat : {false, true}) {
      const json body = chat ? json{{"messages", {{{"role", "user"}, {"content", text}}}}}
                             : json{{"prompt", text}};
      const ApiError e = error_of(body, chat);
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.code, "context_length_exceeded");
      EXPECT_NE(e.message.find("the prompt has more than 256 tokens"), std::string::npos)
          << e.message;
    }
  }
  // A prompt that fits is tokenized whole, exactly as encode() does.
  const std::string fits = huge.substr(0, 300);
  const ApiRequest r = parse({{"prompt", fits}, {"max_tokens", 1}});
  EXPECT_EQ(r.job->prompt, tokenizer_->encode(fits, true, false));
  // One token more than the context is "more than", exactly the context is counted.
  size_t length = 1;
  while (tokenizer_->encode(huge.substr(0, length), true, false).size() < 256) ++length;
  const std::string at_limit = huge.substr(0, length);
  ASSERT_EQ(tokenizer_->encode(at_limit, true, false).size(), 256u);
  const ApiError exact = error_of({{"prompt", at_limit}});
  EXPECT_NE(exact.message.find("the prompt has 256 tokens"), std::string::npos) << exact.message;
}

}  // namespace
}  // namespace parspec
