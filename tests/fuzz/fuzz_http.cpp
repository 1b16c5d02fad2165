// libFuzzer target for the server's request handling below the socket. The first input byte
// picks what the rest is:
//  - a request body for /v1/completions or /v1/chat/completions, checked by parse_request
//    (src/serve/openai_api.cpp) against a byte-level vocabulary, with or without a chat
//    template: it must succeed or throw ApiError with a 4xx status, and every response object
//    built from the result (response, stream chunks, usage, timings, errors) must serialize;
//  - raw HTTP bytes, one connection's, read from memory by the server's own request reading
//    (parse_http_requests, src/serve/http_transport.h: the parser and limits the sockets use;
//    request line, headers, Content-Length and chunked bodies, the body and header limits):
//    every request it returns must fit the limits, an error must be an error status, and the
//    requests to the two endpoints go through the body check above.
// A violated property calls __builtin_trap so that libFuzzer reports it.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "serve/http_transport.h"
#include "serve/openai_api.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_builder.h"

namespace {

using nlohmann::json;

void require(bool condition) {
  if (!condition) __builtin_trap();
}

// A byte-level vocabulary with both chat families' turn markers as special tokens, so that
// either template renders to real special tokens.
const parspec::Tokenizer& tokenizer() {
  static const auto tok = [] {
    parspec::VocabSpec spec = parspec::byte_level_vocab("llama-bpe");
    spec.bos = spec.add("<|begin_of_text|>", parspec::TokenType::kControl);
    spec.eos = spec.add("<|eot_id|>", parspec::TokenType::kControl);
    for (const char* special : {"<|start_header_id|>", "<|end_header_id|>", "<|im_start|>",
                                "<|im_end|>", "<|endoftext|>"})
      spec.add(special, parspec::TokenType::kControl);
    return spec.build_tokenizer();
  }();
  return *tok;
}

parspec::ApiLimits limits() {
  parspec::ApiLimits l;
  l.model_id = "fuzz-model";
  l.ctx_size = 512;
  l.max_tokens = 256;
  l.default_max_tokens = 64;
  return l;
}

std::string serialize(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// parse_request on `body`, and every object the server builds from its result.
void check_body(const std::string& body, bool chat, const parspec::ChatTemplate* chat_template) {
  try {
    const parspec::ApiRequest r = parse_request(body, chat, limits(), tokenizer(), chat_template);
    require(r.job != nullptr);
    require(static_cast<int>(r.job->prompt.size()) + r.job->max_tokens <= limits().ctx_size);
    for (int32_t id : r.job->prompt) require(id >= 0 && id < tokenizer().n_vocab());
    const std::string id = parspec::new_completion_id(chat);
    (void)serialize(parspec::response_json(r, id, 0, limits().model_id, "text"));
    parspec::OutputPiece piece;
    piece.text = body.substr(0, 16);  // the client's bytes, possibly not UTF-8
    (void)serialize(parspec::chunk_json(r, id, 0, limits().model_id, &piece, true));
    (void)serialize(parspec::final_chunk_json(r, id, 0, limits().model_id));
    (void)serialize(parspec::usage_json(*r.job));
    (void)serialize(parspec::timings_json(*r.job));
  } catch (const parspec::ApiError& e) {
    require(e.status >= 400 && e.status < 500);
    require(!e.message.empty());
    (void)serialize(parspec::error_json(e));
  }
}

// One connection's bytes through the server's request reading, and each request to the
// generation endpoints through the body check.
void check_connection(std::string_view input) {
  static const parspec::ChatTemplate chatml = parspec::ChatTemplate::from_name("chatml");
  parspec::HttpTransportOptions options;
  options.max_body_bytes = 64 * 1024;  // as `parspec serve --max-body`, small for speed
  options.max_header_bytes = 8 * 1024;
  const parspec::HttpParsed parsed = parspec::parse_http_requests(input, options, 4);
  require(parsed.error_status == 0 || (parsed.error_status >= 400 && parsed.error_status < 500));
  require(parsed.requests.size() <= 4);
  for (const parspec::HttpRequest& r : parsed.requests) {
    require(r.body.size() <= options.max_body_bytes);
    require(r.path.find('?') == std::string::npos);
    if (r.method != "POST") continue;
    if (r.path == "/v1/completions") check_body(r.body, false, nullptr);
    if (r.path == "/v1/chat/completions") check_body(r.body, true, &chatml);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  static const parspec::ChatTemplate llama3 = parspec::ChatTemplate::from_name("llama3");
  static const parspec::ChatTemplate chatml = parspec::ChatTemplate::from_name("chatml");
  switch (selector % 5) {
    case 0:
      check_body(rest, false, nullptr);
      break;
    case 1:
      check_body(rest, true, &llama3);
      break;
    case 2:
      check_body(rest, true, &chatml);
      break;
    case 3:
      check_body(rest, true, nullptr);
      break;
    default:
      check_connection(rest);
      break;
  }
  return 0;
}
