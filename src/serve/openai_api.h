#pragma once
// OpenAI's API shapes: request bodies of /v1/completions and
// /v1/chat/completions checked field by field into a CompletionJob, and the
// response, stream-chunk and error objects (with llama.cpp's `timings`).
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "serve/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace parspec {

// A request the API refuses: HTTP status and OpenAI's error object.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string code;   // empty: null
  std::string param;  // empty: null
};
nlohmann::json error_json(const ApiError& e);

struct ApiLimits {
  std::string model_id;          // the one model served
  int ctx_size = 4096;           // prompt + max_tokens per request
  int max_tokens = 4096;         // largest max_tokens accepted
  int default_max_tokens = 256;  // chat without max_tokens (completions: 16, as OpenAI)
};

struct ApiRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool return_tokens = false;  // add the generated token ids (llama.cpp's return_tokens)
  std::shared_ptr<CompletionJob> job;
};

// Parses and checks a body; throws ApiError. `chat_template` is null when the
// model has none (chat requests are then refused).
ApiRequest parse_request(const std::string& body, bool chat, const ApiLimits& limits,
                         const Tokenizer& tokenizer, const ChatTemplate* chat_template);

// The finished job as OpenAI's response object.
nlohmann::json response_json(const ApiRequest& request, const std::string& id, int64_t created,
                             const std::string& model, const std::string& text);
// One streamed piece as a chunk (with parspec's `source`: "draft" or "target").
nlohmann::json chunk_json(const ApiRequest& request, const std::string& id, int64_t created,
                          const std::string& model, const OutputPiece* piece, bool first);
// The last chunk: empty delta/text with the finish reason and the timings.
nlohmann::json final_chunk_json(const ApiRequest& request, const std::string& id, int64_t created,
                                const std::string& model);
// "cmpl-..." / "chatcmpl-..." with 64 random bits.
std::string new_completion_id(bool chat);
nlohmann::json usage_json(const CompletionJob& job);
// llama.cpp's timings object plus the project's metric names.
nlohmann::json timings_json(const CompletionJob& job);

}  // namespace parspec
