#include "tokenizer/chat_template.h"

#include "core/error.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

namespace parspec {

namespace {

std::string_view trim_whitespace(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(kSpace);
  return s.substr(begin, end - begin + 1);
}

// The default system prompt of a ChatML template: the literal text between
// "<|im_start|>system\n" and "<|im_end|>" inside one string constant, as in
// Qwen2's `'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n'`.
// Occurrences followed by an expression (the user's own system message) are
// skipped.
std::string find_default_system(std::string_view jinja) {
  constexpr std::string_view kEnd = "<|im_end|>";
  for (std::string_view head : {"<|im_start|>system\\n", "<|im_start|>system\n"}) {
    for (size_t pos = jinja.find(head); pos != std::string_view::npos;
         pos = jinja.find(head, pos + 1)) {
      const size_t start = pos + head.size();
      const size_t end = jinja.find(kEnd, start);
      if (end == std::string_view::npos) break;
      const std::string_view literal = jinja.substr(start, end - start);
      if (literal.empty() || literal.find_first_of("'\"{}+") != std::string_view::npos) continue;
      std::string text;
      for (size_t i = 0; i < literal.size(); ++i) {
        if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'n') {
          text += '\n';
          ++i;
        } else {
          text += literal[i];
        }
      }
      return text;
    }
  }
  return {};
}

}  // namespace

ChatTemplate ChatTemplate::from_name(std::string_view name) {
  if (name == "llama3" || name == "llama-3") return ChatTemplate(ChatFamily::kLlama3);
  if (name == "chatml" || name == "qwen" || name == "qwen2")
    return ChatTemplate(ChatFamily::kChatML);
  fail("unknown chat template '", name, "' (known: ", known_names(), ")");
}

ChatTemplate ChatTemplate::detect(std::string_view jinja) {
  if (jinja.find("<|start_header_id|>") != std::string_view::npos &&
      jinja.find("<|end_header_id|>") != std::string_view::npos)
    return ChatTemplate(ChatFamily::kLlama3);
  if (jinja.find("<|im_start|>") != std::string_view::npos) {
    ChatTemplate chatml(ChatFamily::kChatML);
    chatml.default_system_ = find_default_system(jinja);
    return chatml;
  }
  fail("the model's chat template (tokenizer.chat_template) is not one parspec knows (",
       known_names(), "); pass --chat-template NAME to choose one");
}

ChatTemplate ChatTemplate::for_model(const GgufFile& file, std::string_view override_name) {
  if (!override_name.empty()) return from_name(override_name);
  // As llama.cpp: a model without a template, or with one it cannot render,
  // gets ChatML (with a warning the caller prints).
  std::string reason;
  if (!file.has("tokenizer.chat_template")) {
    reason = file.path() + " has no chat template (tokenizer.chat_template)";
  } else {
    try {
      return detect(file.get_string("tokenizer.chat_template"));
    } catch (const Error&) {
      reason = file.path() + "'s chat template (tokenizer.chat_template) is not one parspec knows";
    }
  }
  ChatTemplate chatml(ChatFamily::kChatML);
  chatml.fallback_warning_ = reason + ": using chatml, as llama.cpp does; --chat-template NAME (" +
                             std::string(known_names()) + ") chooses one";
  return chatml;
}

std::string_view ChatTemplate::name() const {
  return family_ == ChatFamily::kLlama3 ? "llama3" : "chatml";
}

std::string_view ChatTemplate::end_of_turn() const {
  return family_ == ChatFamily::kLlama3 ? "<|eot_id|>" : "<|im_end|>";
}

std::string ChatTemplate::end_of_turn_stop(const Tokenizer& tokenizer) const {
  const std::string text(end_of_turn());
  return tokenizer.find_token(text) < 0 ? text : std::string();
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) const {
  return render_text(messages, add_generation_prompt, true);
}

std::string ChatTemplate::render_text(std::span<const ChatMessage> messages,
                                      bool add_generation_prompt, bool bos_text) const {
  for (size_t i = 0; i < messages.size(); ++i)
    check(!messages[i].role.empty(), "chat message ", i, " has no role");
  std::string out;
  if (family_ == ChatFamily::kLlama3) {
    if (bos_text) out += "<|begin_of_text|>";
    for (const ChatMessage& m : messages) {
      out += "<|start_header_id|>";
      out += m.role;
      out += "<|end_header_id|>\n\n";
      out += trim_whitespace(m.content);
      out += "<|eot_id|>";
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  if (!default_system_.empty() && !messages.empty() && messages[0].role != "system") {
    out += "<|im_start|>system\n";
    out += default_system_;
    out += "<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>";
    out += m.role;
    out += "\n";
    out += m.content;
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer,
                                          std::span<const ChatMessage> messages,
                                          bool add_generation_prompt, size_t max_tokens) const {
  // BOS goes in as an id, whatever text the vocabulary gives it.
  const int32_t bos = tokenizer.bos();
  const bool with_bos = (family_ == ChatFamily::kLlama3 || tokenizer.add_bos()) && bos >= 0;
  if (with_bos && max_tokens == 0) return {};
  const std::string text = render_text(messages, add_generation_prompt, false);
  std::vector<int32_t> ids =
      max_tokens == SIZE_MAX ? tokenizer.encode(text, false, true)
                             : tokenizer.encode_prefix(text, false, true, max_tokens - with_bos);
  if (with_bos) ids.insert(ids.begin(), bos);
  return ids;
}

}  // namespace parspec
