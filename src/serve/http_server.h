#pragma once
// `parspec serve`'s HTTP side: the OpenAI-compatible endpoints, the page at /,
// health and metrics and the API key, on the transport (http_transport.h) that
// holds the request and connection limits.
#include <atomic>
#include <memory>
#include <optional>
#include <semaphore>
#include <string>

#include "serve/engine.h"
#include "serve/http_transport.h"
#include "serve/openai_api.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace parspec {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port (printed)
  std::string api_key;             // empty: no authentication
  HttpTransportOptions transport;  // body and time limits, connection caps, handler threads
  ApiLimits limits;
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, Engine& engine, const Tokenizer& tokenizer,
             std::optional<ChatTemplate> chat_template);
  ~HttpServer();

  // Binds the listening socket (throws Error when it cannot); returns the port.
  int bind();
  // Serves until stop(); returns when the server is down.
  void serve();
  // Refuses new generations (503), lets the running and queued ones finish
  // and their streams be written to the end, then stops the server (SIGTERM).
  void drain_and_stop();

 private:
  void install_routes();
  bool authorized(const std::string& header) const;
  // A generation request (/v1/completions, /v1/chat/completions), on a handler thread.
  void generate(HttpExchange& ex, bool chat);
  std::string metrics_text() const;

  HttpOptions options_;
  Engine& engine_;
  const Tokenizer& tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  HttpTransport transport_;
  std::atomic<bool> draining_{false};
  // Requests being parsed and tokenized at once: one per core. Each costs a
  // few times its body in memory while it is parsed, and more at once would
  // not finish sooner; the others wait holding only their bodies.
  std::counting_semaphore<> parse_slots_;
};

}  // namespace parspec
