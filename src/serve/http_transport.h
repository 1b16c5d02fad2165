#pragma once
// `parspec serve`'s HTTP/1.1 transport (Boost.Beast on Boost.Asio): one thread
// accepts and reads every connection asynchronously, so slow or idle clients
// hold a socket and a few kilobytes but no thread. Every limit holds for every
// request: the body limit counts chunked bodies as they arrive, one deadline
// covers a whole request (headers and body), idle keep-alive connections
// close, and connections past the caps (per server, per client address) get a
// clean refusal. Complete requests go to their handler: quick ones on the I/O
// thread, blocking ones (generations) on a bounded pool of handler threads,
// so /health never waits behind a generation.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace parspec {

struct HttpTransportOptions {
  size_t max_body_bytes = 1 << 20;
  size_t max_header_bytes = 64 << 10;
  // From a new connection's accept, or a keep-alive connection's first byte
  // of its next request, to the last byte of that request.
  std::chrono::milliseconds request_timeout{30000};
  // A keep-alive connection waiting for its next request.
  std::chrono::milliseconds idle_timeout{10000};
  // One write of a response (a whole response, or one chunk of a stream).
  std::chrono::milliseconds write_timeout{15000};
  int max_connections = 512;
  int max_connections_per_client = 128;
  int handler_threads = 32;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;
  std::string path;  // the target without its query
  std::string body;
  std::string client;  // the peer's address
  HttpHeaders headers;
  // The value of a header (name compared without case); empty when absent.
  std::string header(std::string_view name) const;
};

// One request and its answer: respond() once, or stream_begin(), any number
// of stream_write() and stream_end(). A handler that returns without an
// answer gets a 500; a stream left unended closes its connection.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual const HttpRequest& request() const = 0;
  // Moves the body out (request().body is empty afterwards): a handler that
  // has read it need not hold it while it answers.
  virtual std::string take_body() = 0;
  // Hands the whole response to the I/O thread and returns at once.
  virtual void respond(int status, const std::string& content_type, std::string body,
                       const HttpHeaders& extra = {}) = 0;
  // A chunked 200 response. These two block until their bytes are written
  // (at most the write timeout): call them from a handler thread. False: the
  // client went away or stopped reading.
  virtual bool stream_begin(const std::string& content_type, const HttpHeaders& extra = {}) = 0;
  virtual bool stream_write(std::string data) = 0;
  // The stream's end; returns at once.
  virtual void stream_end() = 0;
  // Whether the client closed its side of the connection.
  virtual bool client_gone() const = 0;
};

class HttpTransport {
 public:
  using Handler = std::function<void(HttpExchange&)>;
  // The body of an error response (status, message) the transport answers itself.
  using ErrorBody = std::function<std::string(int status, const std::string& message)>;
  enum class Runs { on_io_thread, on_handler_thread };

  struct Stats {
    int64_t open_connections = 0;
    int64_t refused_connections = 0;    // past --max-connections or the per-client cap
    int64_t timed_out_connections = 0;  // closed at the request or idle deadline
    int64_t busy_handlers = 0;          // requests on the handler threads, running or waiting
  };

  HttpTransport(HttpTransportOptions options, ErrorBody error_body);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // A route (an exact path). A handler that runs on the I/O thread must not block.
  void route(const std::string& method, const std::string& path, Runs runs, Handler handler);
  // Runs on the I/O thread before routing; true: it answered the request itself.
  void before_routing(std::function<bool(HttpExchange&)> hook);
  // Answers requests no route matches (on the I/O thread).
  void fallback(Handler handler);
  // Told each response's status as it starts (on the thread that answers).
  void on_response(std::function<void(const HttpRequest&, int status)> observer);

  // Listens on host:port (0: any free port); returns the port. Throws Error
  // when it cannot. The listen backlog is the connection cap.
  int bind(const std::string& host, int port);
  // Serves on the calling thread until stop().
  void run();
  // Waits until no request is being answered, at most `bound`; false if the bound ran out.
  bool wait_until_idle(std::chrono::milliseconds bound);
  // Closes the listening socket and every connection; run() returns.
  void stop();

  Stats stats() const;
  const HttpTransportOptions& options() const;

  struct Impl;  // in http_transport.cpp, with the connections it serves

 private:
  std::unique_ptr<Impl> impl_;
};

// One connection's bytes read from memory as the transport reads them from a
// socket (the same parser and limits, without the deadlines): the complete
// requests in order, and the status of the error answer that ended the
// connection (0: none; the bytes ended, or a request without keep-alive).
// For tests and the request fuzzer.
struct HttpParsed {
  std::vector<HttpRequest> requests;
  int error_status = 0;
};
HttpParsed parse_http_requests(std::string_view bytes, const HttpTransportOptions& options,
                               size_t max_requests = 16);

}  // namespace parspec
