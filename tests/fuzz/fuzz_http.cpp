// libFuzzer target for the server's request handling below the socket. The first input byte
// picks what the rest is:
//  - a request body for /v1/completions or /v1/chat/completions, checked by parse_request
//    (src/serve/openai_api.cpp) against a byte-level vocabulary, with or without a chat
//    template: it must succeed or throw ApiError with a 4xx status, and every response object
//    built from the result (response, stream chunks, usage, timings, errors) must serialize;
//  - raw HTTP bytes read from memory by the HTTP library's request parser (request line,
//    headers, Content-Length and chunked bodies, its body limit), routed to the same two
//    endpoints: it must answer (or drop the connection) without crashing.
// A violated property calls __builtin_trap so that libFuzzer reports it.
#include <httplib.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

// An HTTP connection whose client bytes come from memory; the answer is discarded.
class MemoryStream : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view input) : input_(input) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, input_.size() - offset_);
    std::memcpy(ptr, input_.data() + offset_, n);
    offset_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char*, size_t size) override { return static_cast<ssize_t>(size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 40000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 8080;
  }
  socket_t socket() const override { return INVALID_SOCKET; }

 private:
  std::string_view input_;
  size_t offset_ = 0;
};

// The HTTP library's server with the API's two POST endpoints, fed one connection from memory.
class MemoryServer : public httplib::Server {
 public:
  MemoryServer() {
    set_payload_max_length(64 * 1024);  // as `parspec serve --max-body`, small for speed
    const parspec::ChatTemplate* chatml = &chat_template_;
    Post("/v1/completions", [](const httplib::Request& req, httplib::Response& res) {
      check_body(req.body, false, nullptr);
      res.set_content("{}", "application/json");
    });
    Post("/v1/chat/completions", [chatml](const httplib::Request& req, httplib::Response& res) {
      check_body(req.body, true, chatml);
      res.set_content("{}", "application/json");
    });
  }
  void serve(std::string_view input) {
    MemoryStream stream(input);
    // Keep-alive: the library parses every request the bytes hold, up to its limit.
    for (int requests = 0; requests < 4; ++requests) {
      bool closed = false;
      if (!process_request(stream, false, closed, nullptr) || closed) break;
    }
  }

 private:
  parspec::ChatTemplate chat_template_ = parspec::ChatTemplate::from_name("chatml");
};

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
    default: {
      static MemoryServer server;
      server.serve(rest);
      break;
    }
  }
  return 0;
}
