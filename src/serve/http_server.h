#pragma once
// `parspec serve`'s HTTP side (cpp-httplib): the OpenAI-compatible endpoints,
// the page at /, health and metrics, the API key and the request limits.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "serve/engine.h"
#include "serve/openai_api.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
}

namespace parspec {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (printed)
  std::string api_key;  // empty: no authentication
  size_t max_body_bytes = 1 << 20;
  int http_threads = 32;
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

  HttpOptions options_;
  Engine& engine_;
  const Tokenizer& tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  std::unique_ptr<httplib::Server> server_;
  std::atomic<bool> draining_{false};
  // Streamed responses not yet written to the end. The HTTP library ends a
  // chunked stream where it is once the server stops, so drain_and_stop waits
  // for these first.
  std::mutex streams_mutex_;
  std::condition_variable streams_done_;
  int streams_in_flight_ = 0;
};

}  // namespace parspec
