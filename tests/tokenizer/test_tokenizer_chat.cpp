// Chat templates (detection, rendering, encoding) and streaming decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_builder.h"

namespace parspec {
namespace {

using Ids = std::vector<int32_t>;

// Templates as they appear in tokenizer.chat_template of the released models.
constexpr std::string_view kLlama3Jinja =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})";
constexpr std::string_view kQwen2Jinja =
    R"({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";
constexpr std::string_view kQwen25JinjaPart =
    R"({%- if tools %}{{- '<|im_start|>system\n' }}{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- endif %}{%- else %}{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}{%- endif %}{%- endif %})";
constexpr std::string_view kPlainChatMLJinja =
    R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "  Hi there!\n"}, {"assistant", "Hello."}, {"user", "2+2?"}};

TEST(TokenizerChat, DetectsFamiliesFromJinja) {
  EXPECT_EQ(ChatTemplate::detect(kLlama3Jinja).family(), ChatFamily::kLlama3);
  const ChatTemplate qwen = ChatTemplate::detect(kQwen2Jinja);
  EXPECT_EQ(qwen.family(), ChatFamily::kChatML);
  EXPECT_EQ(qwen.default_system(), "You are a helpful assistant.");
  EXPECT_EQ(ChatTemplate::detect(kQwen25JinjaPart).default_system(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(ChatTemplate::detect(kPlainChatMLJinja).default_system(), "");
  try {
    ChatTemplate::detect("{{ messages[0]['content'] }} [INST]");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ChatTemplate::from_name("chatml").name(), "chatml");
  EXPECT_EQ(ChatTemplate::from_name("llama3").name(), "llama3");
  EXPECT_THROW(ChatTemplate::from_name("vicuna"), Error);
}

TEST(TokenizerChat, RendersLlama3) {
  const ChatTemplate tmpl = ChatTemplate::from_name("llama3");
  EXPECT_EQ(tmpl.render(kConversation, true),
            "<|begin_of_text|>"
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const std::vector<ChatMessage> one = {{"user", "x"}};
  EXPECT_EQ(tmpl.render(one, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
}

TEST(TokenizerChat, RendersChatMLWithDefaultSystemPrompt) {
  const ChatTemplate qwen = ChatTemplate::detect(kQwen2Jinja);
  const std::vector<ChatMessage> user_only = {{"user", "  Hi\n"}};
  EXPECT_EQ(qwen.render(user_only, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\n  Hi\n<|im_end|>\n"
            "<|im_start|>assistant\n");
  // A conversation that brings its own system prompt gets no default one.
  EXPECT_EQ(qwen.render(kConversation, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\n  Hi there!\n<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n");
  EXPECT_EQ(ChatTemplate::from_name("chatml").render(user_only, false),
            "<|im_start|>user\n  Hi\n<|im_end|>\n");
  const std::vector<ChatMessage> no_role = {{"", "x"}};
  EXPECT_THROW(qwen.render(no_role, false), Error);
}

// A vocabulary with Llama 3's and ChatML's special tokens.
struct ChatVocab {
  VocabSpec spec = byte_level_vocab("llama-bpe");
  int32_t bos, eot, start_header, end_header, im_start, im_end;
  ChatVocab() {
    bos = spec.add("<|begin_of_text|>", TokenType::kControl);
    spec.eos = spec.add("<|end_of_text|>", TokenType::kControl);
    start_header = spec.add("<|start_header_id|>", TokenType::kControl);
    end_header = spec.add("<|end_header_id|>", TokenType::kControl);
    eot = spec.add("<|eot_id|>", TokenType::kControl);
    im_start = spec.add("<|im_start|>", TokenType::kControl);
    im_end = spec.add("<|im_end|>", TokenType::kControl);
    spec.bos = bos;
  }
};

TEST(TokenizerChat, EncodesWithSpecialTokensAndOneBos) {
  ChatVocab v;
  const auto tok = v.spec.build_tokenizer();
  const ChatTemplate llama3 = ChatTemplate::from_name("llama3");
  const Ids ids = llama3.encode(*tok, kConversation, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], v.bos);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), v.bos), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), v.eot), 4);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), v.start_header), 5);
  EXPECT_EQ(ids.back(), tok->encode("\n\n", false, false).back());
  EXPECT_EQ(tok->decode(ids), llama3.render(kConversation, true));

  // ChatML: no BOS unless the vocabulary asks for one (llama-bpe does by default).
  const ChatTemplate chatml = ChatTemplate::from_name("chatml");
  Ids chat_ids = chatml.encode(*tok, kConversation, true);
  EXPECT_EQ(chat_ids[0], v.bos);
  EXPECT_EQ(chat_ids[1], v.im_start);
  v.spec.add_bos = false;
  chat_ids = chatml.encode(*v.spec.build_tokenizer(), kConversation, true);
  EXPECT_EQ(chat_ids[0], v.im_start);
  EXPECT_EQ(std::count(chat_ids.begin(), chat_ids.end(), v.im_end), 4);
}

TEST(TokenizerChat, ChoosesTheModelsTemplateOrTheOverride) {
  const auto file_with = [](std::string_view jinja, std::vector<uint8_t>& bytes) {
    GgufWriter writer;
    writer.set("general.architecture", GgufValue::string("llama"));
    if (!jinja.empty())
      writer.set("tokenizer.chat_template", GgufValue::string(std::string(jinja)));
    bytes = writer.to_bytes();
    return GgufFile::from_memory(bytes.data(), bytes.size(), "model.gguf");
  };
  std::vector<uint8_t> bytes;
  EXPECT_EQ(ChatTemplate::for_model(*file_with(kQwen2Jinja, bytes), "").family(),
            ChatFamily::kChatML);
  EXPECT_EQ(ChatTemplate::for_model(*file_with(kQwen2Jinja, bytes), "llama3").family(),
            ChatFamily::kLlama3);
  EXPECT_EQ(ChatTemplate::for_model(*file_with("", bytes), "chatml").family(), ChatFamily::kChatML);
  EXPECT_TRUE(
      ChatTemplate::for_model(*file_with(kQwen2Jinja, bytes), "").fallback_warning().empty());
  // No template, or one of no family parspec knows: ChatML, as llama.cpp's
  // server does, with a warning that names the file and the flag.
  const ChatTemplate missing = ChatTemplate::for_model(*file_with("", bytes), "");
  EXPECT_EQ(missing.family(), ChatFamily::kChatML);
  EXPECT_NE(missing.fallback_warning().find("model.gguf has no chat template"), std::string::npos)
      << missing.fallback_warning();
  EXPECT_NE(missing.fallback_warning().find("using chatml"), std::string::npos);
  EXPECT_NE(missing.fallback_warning().find("--chat-template"), std::string::npos);
  const ChatTemplate unknown =
      ChatTemplate::for_model(*file_with("{{ messages[0]['content'] }} [INST]", bytes), "");
  EXPECT_EQ(unknown.family(), ChatFamily::kChatML);
  EXPECT_NE(unknown.fallback_warning().find("is not one parspec knows"), std::string::npos)
      << unknown.fallback_warning();
  EXPECT_THROW(ChatTemplate::for_model(*file_with("", bytes), "vicuna"), Error);
}

TEST(TokenizerStream, HoldsBackSplitCharacters) {
  VocabSpec spec = byte_level_vocab();
  spec.eos = spec.add("</s>", TokenType::kControl);
  const auto tok = spec.build_tokenizer();
  StreamDecoder stream(*tok);
  // "é" = C3 A9 arrives as two byte tokens.
  EXPECT_EQ(stream.feed(0xC3), "");
  EXPECT_EQ(stream.pending_bytes(), 1u);
  EXPECT_EQ(stream.feed(0xA9), "é");
  // A four-byte emoji over four tokens.
  EXPECT_EQ(stream.feed(0xF0), "");
  EXPECT_EQ(stream.feed(0x9F), "");
  EXPECT_EQ(stream.feed(0x98), "");
  EXPECT_EQ(stream.feed(0x80), "😀");
  // Ill-formed bytes come out as U+FFFD rather than as broken text.
  EXPECT_EQ(stream.feed(0xFF), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.feed(0xE4), "");
  EXPECT_EQ(stream.feed('a'),
            "\xEF\xBF\xBD"
            "a");
  // Control tokens are silent unless asked for.
  EXPECT_EQ(stream.feed(spec.eos), "");
  EXPECT_EQ(stream.feed(0xE4), "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.pending_bytes(), 0u);
  StreamDecoder verbose(*tok, true);
  EXPECT_EQ(verbose.feed(spec.eos), "</s>");
}

TEST(TokenizerStream, NeverYieldsIncompleteUtf8) {
  // A trained vocabulary whose tokens cut multi-byte characters in many places.
  VocabSpec spec = byte_level_vocab("llama-bpe");
  std::string corpus;
  for (int i = 0; i < 30; ++i)
    corpus += "日本語のテキスト 😀👍🏽 naïve café Ελληνικά ";
  train_byte_level_bpe(spec, corpus, PreTokenizer::kLlama3, 120);
  spec.eos = spec.add("<|end_of_text|>", TokenType::kControl);
  const auto tok = spec.build_tokenizer();

  const Ids all_ids = tok->encode(corpus, false, false);
  ASSERT_GT(all_ids.size(), 100u);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any_token(0, tok->n_vocab() - 1);
  for (int trial = 0; trial < 200; ++trial) {
    Ids ids;
    const bool random_ids = trial % 2 == 0;
    if (random_ids) {
      for (int i = 0; i < 40; ++i) ids.push_back(any_token(rng));
    } else {
      // A window of a real encoding, which may start inside a character.
      const size_t start = static_cast<size_t>(trial) % (all_ids.size() - 60);
      ids.assign(all_ids.begin() + start, all_ids.begin() + start + 60);
    }
    StreamDecoder stream(*tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string chunk = stream.feed(id);
      ASSERT_TRUE(utf8::is_valid(chunk)) << "trial " << trial;
      streamed += chunk;
    }
    const std::string tail = stream.flush();
    ASSERT_TRUE(utf8::is_valid(tail));
    streamed += tail;
    const std::string whole = tok->decode(ids, false);
    if (utf8::is_valid(whole)) {
      EXPECT_EQ(streamed, whole) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace parspec
