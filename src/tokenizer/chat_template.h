#pragma once
// Chat prompts for the template families parspec supports. A GGUF file carries
// its template as Jinja text (tokenizer.chat_template); rather than running
// Jinja, parspec recognises the family and renders it natively:
//   llama3: <|begin_of_text|><|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>...
//   chatml: <|im_start|>ROLE\nCONTENT<|im_end|>\n... (Qwen2), with the default
//           system prompt the template inserts when the first message is not one.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace parspec {

class GgufFile;
class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

enum class ChatFamily { kLlama3, kChatML };

class ChatTemplate {
 public:
  // "llama3" (alias "llama-3") or "chatml" (aliases "qwen", "qwen2");
  // throws Error naming the known ones otherwise.
  static ChatTemplate from_name(std::string_view name);
  // Recognises the family of a Jinja template; throws Error if it is none of ours.
  static ChatTemplate detect(std::string_view jinja);
  // `override_name` when not empty, else detection from tokenizer.chat_template;
  // a model without a template, or with one of no known family, gets ChatML
  // (as llama.cpp does) with fallback_warning() saying so.
  static ChatTemplate for_model(const GgufFile& file, std::string_view override_name);
  // Why for_model() fell back to ChatML, and how to choose; empty otherwise.
  const std::string& fallback_warning() const { return fallback_warning_; }
  static std::string_view known_names() { return "llama3, chatml"; }

  ChatFamily family() const { return family_; }
  std::string_view name() const;
  // ChatML: system prompt inserted when the conversation does not start with
  // one (empty: none).
  const std::string& default_system() const { return default_system_; }
  // The text that ends a turn: "<|im_end|>" (ChatML) or "<|eot_id|>" (Llama 3).
  std::string_view end_of_turn() const;
  // end_of_turn() when `tokenizer` has no token of that text (the zoo's chat
  // model keeps the zoo's vocabulary and writes the marker as plain text):
  // generation then stops at it as a stop string. Empty when the token exists
  // (it ends generation as an end-of-generation token).
  std::string end_of_turn_stop(const Tokenizer& tokenizer) const;

  // The prompt text, as the Jinja template renders it (Llama 3 includes the
  // BOS text "<|begin_of_text|>" and trims each content, as its template does).
  // add_generation_prompt: end with the header of an assistant turn.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  // render() tokenized with special tokens parsed. BOS is the vocabulary's BOS
  // id: always for Llama 3 (its template starts with it), for ChatML when the
  // vocabulary's add_bos_token asks for it. At most `max_tokens` tokens, the
  // first ones (Tokenizer::encode_prefix).
  std::vector<int32_t> encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, size_t max_tokens = SIZE_MAX) const;

 private:
  explicit ChatTemplate(ChatFamily family) : family_(family) {}
  // The rendered text; Llama 3's leading BOS text only when `bos_text`.
  std::string render_text(std::span<const ChatMessage> messages, bool add_generation_prompt,
                          bool bos_text) const;
  ChatFamily family_;
  std::string default_system_;
  std::string fallback_warning_;
};

}  // namespace parspec
