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

std::string_view strip_newlines(std::string_view s, bool front, bool back) {
  while (front && !s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (back && !s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// Gemma has no system turn: the system message opens the next user turn (as
// llama.cpp's Gemma template does); "assistant" is "model"; contents trimmed.
std::string render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out, system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system = trim_whitespace(m.content);
      continue;
    }
    const std::string role = m.role == "assistant" ? "model" : m.role;
    out += "<start_of_turn>" + role + "\n";
    if (!system.empty() && role != "model") {
      out += system + "\n\n";
      system.clear();
    }
    out += trim_whitespace(m.content);
    out += "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

// Qwen3's template: an assistant turn's <think>...</think> reasoning is dropped
// before the last user message and kept (normalised) after it, so a
// conversation's earlier reasoning does not fill the context.
std::string render_qwen3(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role == "user") {
      last_query = i;
      break;
    }
  }
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    out += "<|im_start|>" + m.role + "\n";
    if (m.role != "assistant") {
      out += m.content;
    } else {
      std::string_view content = m.content, reasoning;
      constexpr std::string_view kClose = "</think>", kOpen = "<think>";
      if (const size_t close = content.rfind(kClose); close != std::string_view::npos) {
        reasoning = strip_newlines(content.substr(0, content.find(kClose)), false, true);
        if (const size_t open = reasoning.rfind(kOpen); open != std::string_view::npos)
          reasoning.remove_prefix(open + kOpen.size());
        reasoning = strip_newlines(reasoning, true, true);
        content = strip_newlines(content.substr(close + kClose.size()), true, false);
      }
      const bool keep = i > last_query && (i + 1 == messages.size() || !reasoning.empty());
      if (keep) {
        out += "<think>\n";
        out += reasoning;
        out += "\n</think>\n\n";
      }
      out += content;
    }
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::from_name(std::string_view name) {
  if (name == "llama3" || name == "llama-3") return ChatTemplate(ChatFamily::kLlama3);
  if (name == "chatml" || name == "qwen" || name == "qwen2")
    return ChatTemplate(ChatFamily::kChatML);
  if (name == "qwen3") return ChatTemplate(ChatFamily::kQwen3);
  if (name == "gemma" || name == "gemma2" || name == "gemma3")
    return ChatTemplate(ChatFamily::kGemma);
  if (name == "phi3") return ChatTemplate(ChatFamily::kPhi3);
  fail("unknown chat template '", name, "' (known: ", known_names(), ")");
}

ChatTemplate ChatTemplate::detect(std::string_view jinja) {
  if (jinja.find("<|start_header_id|>") != std::string_view::npos &&
      jinja.find("<|end_header_id|>") != std::string_view::npos)
    return ChatTemplate(ChatFamily::kLlama3);
  // Phi-3 before the others, as llama.cpp's detection orders them.
  if (jinja.find("<|assistant|>") != std::string_view::npos &&
      jinja.find("<|end|>") != std::string_view::npos)
    return ChatTemplate(ChatFamily::kPhi3);
  if (jinja.find("<|im_start|>") != std::string_view::npos) {
    ChatTemplate chatml(jinja.find("</think>") != std::string_view::npos ? ChatFamily::kQwen3
                                                                         : ChatFamily::kChatML);
    chatml.default_system_ = find_default_system(jinja);
    return chatml;
  }
  if (jinja.find("<start_of_turn>") != std::string_view::npos)
    return ChatTemplate(ChatFamily::kGemma);
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
  switch (family_) {
    case ChatFamily::kLlama3:
      return "llama3";
    case ChatFamily::kChatML:
      return "chatml";
    case ChatFamily::kQwen3:
      return "qwen3";
    case ChatFamily::kGemma:
      return "gemma";
    case ChatFamily::kPhi3:
      return "phi3";
  }
  return "";
}

std::string_view ChatTemplate::end_of_turn() const {
  switch (family_) {
    case ChatFamily::kLlama3:
      return "<|eot_id|>";
    case ChatFamily::kGemma:
      return "<end_of_turn>";
    case ChatFamily::kPhi3:
      return "<|end|>";
    case ChatFamily::kChatML:
    case ChatFamily::kQwen3:
      break;
  }
  return "<|im_end|>";
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
  if (family_ == ChatFamily::kGemma) return render_gemma(messages, add_generation_prompt);
  if (family_ == ChatFamily::kPhi3) {
    for (const ChatMessage& m : messages) {
      out += "<|" + m.role + "|>\n";
      out += m.content;
      out += "<|end|>\n";
    }
    if (add_generation_prompt) out += "<|assistant|>\n";
    return out;
  }
  if (family_ == ChatFamily::kQwen3) return render_qwen3(messages, add_generation_prompt);
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
  const bool with_bos =
      (family_ == ChatFamily::kLlama3 || family_ == ChatFamily::kGemma || tokenizer.add_bos()) &&
      bos >= 0;
  if (with_bos && max_tokens == 0) return {};
  const std::string text = render_text(messages, add_generation_prompt, false);
  std::vector<int32_t> ids =
      max_tokens == SIZE_MAX ? tokenizer.encode(text, false, true)
                             : tokenizer.encode_prefix(text, false, true, max_tokens - with_bos);
  if (with_bos) ids.insert(ids.begin(), bos);
  return ids;
}

}  // namespace parspec
