#include "serve/openai_api.h"

#include <cmath>
#include <optional>
#include <random>

#include "core/error.h"

namespace parspec {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& message, const std::string& param = "", int status = 400,
                      const std::string& code = "") {
  ApiError e;
  e.status = status;
  e.message = message;
  e.param = param;
  e.code = code;
  throw e;
}

// A numeric field within [lo, hi], or `fallback` when absent or null.
double number_field(const json& body, const char* key, double fallback, double lo, double hi) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number()) bad(std::string("'") + key + "' must be a number", key);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi))
    bad(std::string("'") + key + "' must be between " + json(lo).dump() + " and " +
            json(hi).dump() + ", got " + it->dump(),
        key);
  return v;
}

// A whole number beyond 64-bit integers arrives as a float: it is out of
// range (`range` says which), not "not an integer".
[[noreturn]] void bad_integer(const json& value, const char* key, const std::string& range) {
  const bool whole = value.is_number_float() && std::isfinite(value.get<double>()) &&
                     std::trunc(value.get<double>()) == value.get<double>();
  if (whole) bad(std::string("'") + key + "' must be between " + range, key);
  bad(std::string("'") + key + "' must be an integer", key);
}

int64_t integer_field(const json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  const std::string range = std::to_string(lo) + " and " + std::to_string(hi);
  if (!it->is_number_integer() && !it->is_number_unsigned()) bad_integer(*it, key, range);
  if ((it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) ||
      (!it->is_number_unsigned() && (it->get<int64_t>() < lo || it->get<int64_t>() > hi)))
    bad(std::string("'") + key + "' must be between " + range + ", got " + it->dump(), key);
  return it->get<int64_t>();
}

// 0 to 2^64 - 1; -1 or none: a random seed.
std::optional<uint64_t> seed_field(const json& body) {
  const auto it = body.find("seed");
  if (it == body.end() || it->is_null()) return std::nullopt;
  const std::string range = "0 and 18446744073709551615 (-1: a random seed)";
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (!it->is_number_integer()) bad_integer(*it, "seed", range);
  if (it->get<int64_t>() == -1) return std::nullopt;
  bad("'seed' must be between " + range + ", got " + it->dump(), "seed");
}

bool bool_field(const json& body, const char* key, bool fallback) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) bad(std::string("'") + key + "' must be true or false", key);
  return it->get<bool>();
}

std::vector<std::string> stop_field(const json& body) {
  const auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return {};
  std::vector<std::string> stops;
  if (it->is_string()) {
    stops.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->size() > 4) bad("'stop' takes at most 4 strings", "stop");
    for (const json& s : *it) {
      if (!s.is_string()) bad("'stop' must be a string or an array of strings", "stop");
      stops.push_back(s.get<std::string>());
    }
  } else {
    bad("'stop' must be a string or an array of strings", "stop");
  }
  for (const std::string& s : stops)
    if (s.empty()) bad("'stop' strings must not be empty", "stop");
  return stops;
}

// The content is moved out of the parsed body: it may be as large as the body.
std::string text_content(json& content, size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_null()) return "";
  if (content.is_string()) return std::move(content.get_ref<std::string&>());
  if (content.is_array()) {
    std::string text;
    for (const json& part : content) {
      if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
          !part["text"].is_string())
        bad("'" + param + "': only text parts ({\"type\": \"text\", \"text\": ...}) are supported",
            param);
      text += part["text"].get<std::string>();
    }
    return text;
  }
  bad("'" + param + "' must be a string or an array of text parts", param);
}

std::vector<ChatMessage> messages_field(json& body) {
  const auto it = body.find("messages");
  if (it == body.end()) bad("'messages' is required", "messages");
  if (!it->is_array() || it->empty()) bad("'messages' must be a non-empty array", "messages");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < it->size(); ++i) {
    json& m = (*it)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad("'" + param + "' must be an object", param);
    if (!m.contains("role") || !m["role"].is_string())
      bad("'" + param + ".role' must be a string", param + ".role");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for it
    if (role != "system" && role != "user" && role != "assistant")
      bad("'" + param + ".role' must be system, developer, user or assistant", param + ".role");
    json none;
    const auto content = m.find("content");
    messages.push_back({role, text_content(content == m.end() ? none : *content, i)});
  }
  return messages;
}

std::string random_hex() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

json error_json(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json() : json(e.param)},
            {"code", e.code.empty() ? json() : json(e.code)}}}};
}

ApiRequest parse_request(const std::string& body_text, bool chat, const ApiLimits& limits,
                         const Tokenizer& tokenizer, const ChatTemplate* chat_template) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {
    bad(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!body.is_object()) bad("the body must be a JSON object");

  ApiRequest r;
  r.chat = chat;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) bad("'model' must be a string", "model");
    const std::string model = body["model"].get<std::string>();
    if (model != limits.model_id)
      bad("The model '" + model + "' does not exist (this server has '" + limits.model_id + "')",
          "model", 404, "model_not_found");
  }
  if (integer_field(body, "n", 1, 1, 1) != 1) bad("'n' must be 1", "n");
  r.stream = bool_field(body, "stream", false);
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& so = body["stream_options"];
    if (!so.is_object()) bad("'stream_options' must be an object", "stream_options");
    r.include_usage = bool_field(so, "include_usage", false);
  }
  r.return_tokens = bool_field(body, "return_tokens", false);

  auto job = std::make_shared<CompletionJob>();
  // Tokenized up to one token past the context: enough to refuse a longer
  // prompt, at a cost bounded by the context rather than by the body.
  const size_t max_prompt_tokens = static_cast<size_t>(std::max<int64_t>(limits.ctx_size, 0)) + 1;
  const auto too_long = [&](int64_t n_prompt) {
    bad("the prompt has " +
            (n_prompt > limits.ctx_size ? "more than " + std::to_string(limits.ctx_size)
                                        : std::to_string(n_prompt)) +
            " tokens; this server's context is " + std::to_string(limits.ctx_size) + " tokens",
        chat ? "messages" : "prompt", 400, "context_length_exceeded");
  };
  // More text than that many tokens can cover is refused before it is
  // rendered or tokenized at all.
  const size_t max_prompt_bytes = (max_prompt_tokens + 1) * tokenizer.max_token_bytes();
  if (chat) {
    if (chat_template == nullptr)
      bad("this model has no chat template: start the server with --chat-template chatml (or "
          "llama3), or use /v1/completions");
    const std::vector<ChatMessage> messages = messages_field(body);
    size_t content_bytes = 0;
    for (const ChatMessage& m : messages) content_bytes += m.content.size();
    if (content_bytes > max_prompt_bytes) too_long(limits.ctx_size + 1);
    try {
      job->prompt = chat_template->encode(tokenizer, messages, true, max_prompt_tokens);
    } catch (const Error& e) {
      bad(std::string("messages: ") + e.what(), "messages");
    }
  } else {
    const auto it = body.find("prompt");
    if (it == body.end()) bad("'prompt' is required", "prompt");
    // Read in place: a prompt may be as large as the body.
    const bool single = it->is_array() && it->size() == 1 && (*it)[0].is_string();
    if (!it->is_string() && !single)
      bad("'prompt' must be a string (one prompt per request)", "prompt");
    const std::string& prompt = (single ? (*it)[0] : *it).get_ref<const std::string&>();
    if (prompt.empty()) bad("'prompt' is empty", "prompt");
    if (prompt.size() > max_prompt_bytes) too_long(limits.ctx_size + 1);
    job->prompt = tokenizer.encode_prefix(prompt, true, false, max_prompt_tokens);
  }
  if (job->prompt.empty()) bad("the prompt produced no tokens", chat ? "messages" : "prompt");
  const int64_t n_prompt = static_cast<int64_t>(job->prompt.size());
  if (n_prompt >= limits.ctx_size) too_long(n_prompt);

  // max_completion_tokens is the chat API's newer name.
  const char* max_key =
      chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const int64_t fallback =
      std::min<int64_t>(chat ? limits.default_max_tokens : 16, limits.ctx_size - n_prompt);
  const int64_t max_tokens = integer_field(body, max_key, fallback, 0, limits.max_tokens);
  if (n_prompt + max_tokens > limits.ctx_size)
    bad("the prompt (" + std::to_string(n_prompt) + " tokens) + " + max_key + " (" +
            std::to_string(max_tokens) + ") exceed this server's context of " +
            std::to_string(limits.ctx_size) + " tokens",
        max_key, 400, "context_length_exceeded");
  job->max_tokens = static_cast<int>(max_tokens);

  // OpenAI's defaults (temperature 1, no top-p cut); top_k and min_p as llama.cpp's server
  // takes them, off unless given.
  SamplingParams& s = job->sampling;
  s.temp = static_cast<float>(number_field(body, "temperature", 1.0, 0.0, 2.0));
  s.top_p = static_cast<float>(number_field(body, "top_p", 1.0, 0.0, 1.0));
  if (s.top_p <= 0.0f) bad("'top_p' must be greater than 0", "top_p");
  s.top_k = static_cast<int>(integer_field(body, "top_k", 0, 0, 1 << 30));
  s.min_p = static_cast<float>(number_field(body, "min_p", 0.0, 0.0, 0.999999));
  const std::optional<uint64_t> seed = seed_field(body);
  s.seed = seed ? *seed : std::random_device{}();
  try {
    validate_sampling_params(s);
  } catch (const Error& e) {
    bad(e.what());
  }
  job->stop = stop_field(body);
  // A vocabulary without the template's end-of-turn token (the zoo's chat
  // model) spells it as text: the turn ends there all the same.
  if (chat) {
    std::string end_of_turn = chat_template->end_of_turn_stop(tokenizer);
    if (!end_of_turn.empty()) job->stop.push_back(std::move(end_of_turn));
  }
  job->ignore_eos = bool_field(body, "ignore_eos", false);
  r.job = std::move(job);
  return r;
}

json usage_json(const CompletionJob& job) {
  const int64_t prompt = static_cast<int64_t>(job.prompt.size());
  const int64_t completion = static_cast<int64_t>(job.tokens.size());
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

json timings_json(const CompletionJob& job) {
  const GenerationStats& st = job.stats;
  // llama.cpp's names for what its clients read, then the project's metrics.
  json out = {{"prompt_n", st.n_prompt},
              {"prompt_ms", st.t_prompt_ms},
              {"prompt_per_token_ms", st.n_prompt > 0 ? st.t_prompt_ms / st.n_prompt : 0.0},
              {"prompt_per_second", st.prompt_tok_per_s()},
              {"predicted_n", st.n_gen},
              {"predicted_ms", st.t_gen_ms},
              {"predicted_per_token_ms", st.n_gen > 0 ? st.t_gen_ms / st.n_gen : 0.0},
              {"predicted_per_second", st.tok_per_s()},
              {"draft_n", st.drafted},
              {"draft_n_accepted", st.accepted},
              {"strategy", job.strategy},
              {"ttft_ms", job.ttft_ms}};
  const json metrics = st.to_json();
  for (const char* key : {"drafted", "accepted", "verify_steps", "tau", "alpha"})
    out[key] = metrics[key];
  // Pool strategies: the routing's choices and scores for this request.
  if (!st.drafter_use.empty()) {
    json drafters = json::array();
    for (const GenerationStats::DrafterUse& u : st.drafter_use)
      drafters.push_back({{"name", u.name},
                          {"routed_steps", u.routed_steps},
                          {"fused_tokens", u.fused_tokens},
                          {"score", u.score}});
    out["drafters"] = drafters;
  }
  // cosine: the request scheduler's decisions for this request's steps.
  if (const CompletionJob::Scheduling& s = job.scheduling; s.steps > 0) {
    const double steps = static_cast<double>(s.steps);
    out["scheduler"] = {{"steps", s.steps},
                        {"waits", s.waits},
                        {"forced", s.forced},
                        {"batch_mean", s.batch_sum / steps},
                        {"gamma_mean", s.gamma_sum / steps},
                        {"drafters_mean", s.drafters_sum / steps}};
  }
  return out;
}

json response_json(const ApiRequest& r, const std::string& id, int64_t created,
                   const std::string& model, const std::string& text) {
  const CompletionJob& job = *r.job;
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", job.finish_reason}};
  if (r.chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  if (r.return_tokens) choice["tokens"] = job.tokens;
  return {{"id", id},
          {"object", r.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"system_fingerprint", "parspec"},
          {"choices", json::array({choice})},
          {"usage", usage_json(job)},
          {"timings", timings_json(job)}};
}

json chunk_json(const ApiRequest& r, const std::string& id, int64_t created,
                const std::string& model, const OutputPiece* piece, bool first) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  const std::string text = piece ? piece->text : "";
  if (r.chat) {
    json delta = {{"content", text}};
    if (first) delta["role"] = "assistant";
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  json chunk = {{"id", id},
                {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"system_fingerprint", "parspec"},
                {"choices", json::array({choice})}};
  if (piece) chunk["source"] = piece->from_draft ? "draft" : "target";
  return chunk;
}

json final_chunk_json(const ApiRequest& r, const std::string& id, int64_t created,
                      const std::string& model) {
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", r.job->finish_reason}};
  if (r.chat)
    choice["delta"] = json::object();
  else
    choice["text"] = "";
  return {{"id", id},
          {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"system_fingerprint", "parspec"},
          {"choices", json::array({choice})},
          {"timings", timings_json(*r.job)}};
}

std::string new_completion_id(bool chat) {
  return (chat ? "chatcmpl-" : "cmpl-") + random_hex();
}

}  // namespace parspec
