#include "serve/http_transport.h"

#include <poll.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/threads.h"

namespace parspec {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using beast::error_code;
using StringResponse = http::response<http::string_body>;

// After an error answer that ends the connection, what the client still sends
// is read and dropped for this long: closing a socket with unread bytes resets
// the connection, and the client could lose the answer.
constexpr auto kLingerTime = std::chrono::seconds(2);
// Refused connections answered at once; past this many, a refused connection
// is closed without an answer.
constexpr int kMaxRefusing = 64;
// File descriptors the process needs besides its connections (models, logs, pipes).
constexpr rlim_t kSpareDescriptors = 64;

// Threads that run the blocking handlers; at most as many requests again wait
// for one, more are refused.
class HandlerPool {
 public:
  explicit HandlerPool(int threads) : max_waiting_(static_cast<size_t>(threads)) {
    for (int i = 0; i < threads; ++i)
      threads_.push_back(start_thread("http-handler", [this] { run(); }));
  }
  ~HandlerPool() {
    std::deque<std::function<void()>> dropped;
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      dropped.swap(tasks_);
    }
    changed_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  bool try_post(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      if (stop_ || tasks_.size() >= max_waiting_ + idle_) return false;
      tasks_.push_back(std::move(task));
    }
    changed_.notify_one();
    return true;
  }
  int64_t busy() const {
    std::lock_guard lock(mutex_);
    return static_cast<int64_t>(threads_.size()) - idle_ + static_cast<int64_t>(tasks_.size());
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ++idle_;
      changed_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      --idle_;
      if (stop_) return;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // what it holds goes before the thread waits again
      lock.lock();
    }
  }

  const size_t max_waiting_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> tasks_;
  int64_t idle_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

using RequestParser = http::request_parser<http::string_body>;

void apply_limits(RequestParser& parser, const HttpTransportOptions& options) {
  parser.body_limit(options.max_body_bytes);
  parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
}

HttpRequest to_request(http::request<http::string_body>&& msg, const std::string& client) {
  HttpRequest request;
  request.method = std::string(msg.method_string());
  const std::string_view target(msg.target().data(), msg.target().size());
  request.path = std::string(target.substr(0, target.find('?')));
  request.client = client;
  for (const auto& field : msg)
    request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  request.body = std::move(msg.body());
  return request;
}

// The answer to a request that could not be read: status 0 when there is none
// to give (the client closed or reset the connection, between requests or
// within one).
std::pair<int, std::string> read_error_answer(error_code ec, const HttpTransportOptions& options) {
  if (ec == http::error::body_limit)
    return {413, "the request body is larger than this server accepts (" +
                     std::to_string(options.max_body_bytes) + " bytes, --max-body)"};
  if (ec == http::error::header_limit)
    return {431, "the request header is larger than this server accepts (" +
                     std::to_string(options.max_header_bytes) + " bytes)"};
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec == net::error::eof || ec == net::error::connection_reset ||
      ec == net::error::operation_aborted || ec == net::error::broken_pipe)
    return {0, ""};
  return {400, "malformed HTTP request: " + ec.message()};
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), name.size()) == 0)
      return value;
  return "";
}

class Session;

struct HttpTransport::Impl {
  Impl(HttpTransportOptions o, ErrorBody e) : options(std::move(o)), error_body(std::move(e)) {}
  ~Impl() {
    // Handler threads first: the exchanges they hold post to the I/O context.
    pool.reset();
  }

  void accept();
  void admit(tcp::socket socket);
  void release(const std::string& client, bool refused);
  void begin_answer() {
    std::lock_guard lock(mutex);
    ++answering;
  }
  void end_answer() {
    std::lock_guard lock(mutex);
    if (--answering == 0) idle.notify_all();
  }
  // A complete request: to its handler.
  void dispatch(const std::shared_ptr<Session>& session, HttpRequest request, bool keep_alive);

  const HttpTransportOptions options;
  const ErrorBody error_body;
  struct Route {
    Runs runs;
    Handler handler;
  };
  std::map<std::pair<std::string, std::string>, Route> routes;  // (method, path)
  std::function<bool(HttpExchange&)> before;
  Handler unmatched;
  std::function<void(const HttpRequest&, int)> observer;

  // Connections and answers, counted for the caps and for wait_until_idle.
  mutable std::mutex mutex;
  std::condition_variable idle;
  int64_t open = 0, refusing = 0, answering = 0;
  std::map<std::string, int> per_client;
  std::atomic<int64_t> refused{0}, timed_out{0};
  std::atomic<bool> stopping{false};

  // Declared after what sessions touch when they end: the context's
  // destruction ends the sessions still open.
  net::io_context io{1};
  tcp::acceptor acceptor{io};
  net::steady_timer accept_retry{io};
  std::unique_ptr<HandlerPool> pool;
};

// One connection: reads its requests one at a time under the deadlines and
// writes their answers. Everything here runs on the I/O thread; the exchange
// (below) posts to it from handler threads.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpTransport::Impl& server, tcp::socket socket, std::string client, bool refused)
      : server_(server),
        stream_(std::move(socket)),
        client_(std::move(client)),
        refused_(refused) {}
  ~Session() {
    if (answering_) server_.end_answer();
    server_.release(client_, refused_);
  }

  int native_handle() { return stream_.socket().native_handle(); }
  net::io_context& io() { return server_.io; }
  const HttpTransportOptions& options() const { return server_.options; }

  // A new connection: its first request's deadline starts now.
  void start() {
    error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);  // stream chunks go out at once
    stream_.expires_after(options().request_timeout);
    read_header();
  }

  // A connection past a cap: the answer, then close.
  void refuse(int status, const std::string& message) {
    auto res = error_response(status, message);
    res->set(http::field::retry_after, "1");
    res->prepare_payload();
    stream_.expires_after(std::chrono::seconds(1));
    http::async_write(stream_, *res, [self = shared_from_this(), res](error_code ec, size_t) {
      if (ec) return self->close();
      self->graceful_close();
    });
  }

  // A whole response; the connection goes on (keep-alive) or closes after it.
  void write(std::shared_ptr<StringResponse> res) {
    stream_.expires_after(options().write_timeout);
    http::async_write(stream_, *res, [self = shared_from_this(), res](error_code ec, size_t) {
      self->after_answer(ec, res->keep_alive());
    });
  }

  // Runs `op` (which starts one write and calls `done` with its result) under
  // the write deadline; false if the server is stopping.
  using WriteOp = std::function<void(Session&, std::function<void(error_code)>)>;
  void start_write(const WriteOp& op, std::function<void(error_code)> done) {
    if (server_.stopping) return done(net::error::operation_aborted);
    stream_.expires_after(options().write_timeout);
    op(*this, std::move(done));
  }
  beast::tcp_stream& stream() { return stream_; }

  // The answer is written (or failed): close, or wait for the next request.
  void after_answer(error_code ec, bool keep_alive) {
    if (answering_) {
      answering_ = false;
      server_.end_answer();
    }
    if (ec) return close();
    if (!keep_alive || server_.stopping) return graceful_close();
    wait_for_next_request();
  }

  void close() {
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

 private:
  void read_header() {
    parser_.emplace();
    apply_limits(*parser_, options());
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    if (ec) return on_read_error(ec);
    const auto& req = parser_->get();
    if (!parser_->is_done() && beast::iequals(req[http::field::expect], "100-continue")) {
      // The client waits for this before it sends the body (curl does, for large bodies).
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue),
                       [self = shared_from_this()](error_code write_ec, size_t) {
                         if (write_ec) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->on_request(ec); });
  }

  void on_request(error_code ec) {
    if (ec) return on_read_error(ec);
    stream_.expires_never();  // the handler may take long; writes get their own deadline
    const bool keep_alive = parser_->keep_alive();
    HttpRequest request = to_request(parser_->release(), client_);
    answering_ = true;
    server_.begin_answer();
    server_.dispatch(shared_from_this(), std::move(request), keep_alive);
  }

  void on_read_error(error_code ec) {
    if (ec == beast::error::timeout) {
      ++server_.timed_out;  // the stream closed the socket at the deadline
      return;
    }
    const auto [status, message] = read_error_answer(ec, options());
    if (status == 0) return close();
    answer_and_close(status, message);
  }

  std::shared_ptr<StringResponse> error_response(int status, const std::string& message) {
    auto res = std::make_shared<StringResponse>(static_cast<http::status>(status), 11);
    res->set(http::field::content_type, "application/json");
    res->keep_alive(false);
    res->body() = server_.error_body(status, message);
    return res;
  }

  // An error found while reading: answer it, then drop the rest of the request.
  void answer_and_close(int status, const std::string& message) {
    if (server_.observer) {
      HttpRequest request;
      if (parser_) {
        const auto target = parser_->get().target();
        request.path = std::string(target.data(), target.size());
        request.path = request.path.substr(0, request.path.find('?'));
      }
      server_.observer(request, status);
    }
    auto res = error_response(status, message);
    res->prepare_payload();
    stream_.expires_after(options().write_timeout);
    http::async_write(stream_, *res, [self = shared_from_this(), res](error_code ec, size_t) {
      if (ec) return self->close();
      self->graceful_close();
    });
  }

  // Keep-alive: the next request, which may already be in the buffer.
  void wait_for_next_request() {
    if (buffer_.size() > 0) {
      stream_.expires_after(options().request_timeout);
      return read_header();
    }
    stream_.expires_after(options().idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              if (ec == beast::error::timeout) ++self->server_.timed_out;
                              if (ec) return self->close();
                              self->buffer_.commit(n);
                              // The request's deadline counts from its first byte.
                              self->stream_.expires_after(self->options().request_timeout);
                              self->read_header();
                            });
  }

  // Our side is done: read and drop what the client still sends until it
  // closes, for at most kLingerTime.
  void graceful_close() {
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    stream_.expires_after(kLingerTime);
    discard();
  }
  void discard() {
    if (!scratch_) scratch_ = std::make_unique<char[]>(kScratch);
    stream_.async_read_some(net::buffer(scratch_.get(), kScratch),
                            [self = shared_from_this()](error_code ec, size_t) {
                              if (ec) return self->close();
                              self->discard();
                            });
  }

  static constexpr size_t kScratch = 16384;
  HttpTransport::Impl& server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  std::unique_ptr<char[]> scratch_;
  const std::string client_;
  const bool refused_;
  bool answering_ = false;  // a request handed to its handler, its answer not yet written
};

namespace {

// A request handed to its handler, and the handler's way to answer it.
class Exchange final : public HttpExchange {
 public:
  Exchange(HttpTransport::Impl& server, std::shared_ptr<Session> session, HttpRequest request,
           bool keep_alive)
      : server_(server),
        session_(std::move(session)),
        request_(std::move(request)),
        keep_alive_(keep_alive),
        fd_(session_->native_handle()) {}

  ~Exchange() override {
    if (state_ == State::none) fail("the server sent no answer to this request");
    if (state_ == State::streaming || state_ == State::broken) {
      // A stream that did not end: the client sees the connection close.
      net::post(session_->io(),
                [s = session_] { s->after_answer(net::error::broken_pipe, false); });
    }
    // The session ends on the I/O thread, where its socket is used.
    net::io_context& io = session_->io();
    net::post(io, [s = std::move(session_)] {});
  }

  const HttpRequest& request() const override { return request_; }
  std::string take_body() override { return std::exchange(request_.body, std::string()); }

  void respond(int status, const std::string& content_type, std::string body,
               const HttpHeaders& extra) override {
    if (state_ != State::none) return;
    state_ = State::answered;
    auto res = std::make_shared<StringResponse>(static_cast<http::status>(status), 11);
    res->set(http::field::content_type, content_type);
    for (const auto& [name, value] : extra) res->set(name, value);
    set_connection(*res);
    res->body() = std::move(body);
    res->prepare_payload();
    if (server_.observer) server_.observer(request_, status);
    net::post(session_->io(), [s = session_, res] { s->write(res); });
  }

  bool stream_begin(const std::string& content_type, const HttpHeaders& extra) override {
    if (state_ != State::none) return false;
    state_ = State::streaming;
    auto res = std::make_shared<http::response<http::empty_body>>(http::status::ok, 11);
    res->set(http::field::content_type, content_type);
    for (const auto& [name, value] : extra) res->set(name, value);
    set_connection(*res);
    res->chunked(true);
    auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    if (server_.observer) server_.observer(request_, 200);
    return write_and_wait([res, serializer](Session& s, std::function<void(error_code)> done) {
      http::async_write_header(s.stream(), *serializer,
                               [res, serializer, done](error_code ec, size_t) { done(ec); });
    });
  }

  bool stream_write(std::string data) override {
    if (state_ != State::streaming) return false;
    if (data.empty()) return true;  // an empty chunk would end the stream
    auto chunk = std::make_shared<std::string>(std::move(data));
    return write_and_wait([chunk](Session& s, std::function<void(error_code)> done) {
      net::async_write(s.stream(), http::make_chunk(net::buffer(*chunk)),
                       [chunk, done](error_code ec, size_t) { done(ec); });
    });
  }

  void stream_end() override {
    if (state_ != State::streaming) return;
    state_ = State::answered;
    const bool keep_alive = keep_alive_ && !server_.stopping;
    net::post(session_->io(), [s = session_, keep_alive] {
      s->start_write(
          [](Session& session, std::function<void(error_code)> done) {
            net::async_write(session.stream(), http::make_chunk_last(),
                             [done](error_code ec, size_t) { done(ec); });
          },
          [s, keep_alive](error_code ec) { s->after_answer(ec, keep_alive); });
    });
  }

  bool client_gone() const override {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return true;
    char c;
    return recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }

  // A 500 in the error shape, or the end of a stream that has begun.
  void fail(const std::string& message) {
    if (state_ == State::none) {
      respond(500, "application/json", server_.error_body(500, message), {});
    } else if (state_ == State::streaming) {
      state_ = State::broken;
    }
  }

 private:
  enum class State { none, streaming, broken, answered };

  template <class Response>
  void set_connection(Response& res) const {
    const bool keep_alive = keep_alive_ && !server_.stopping;
    res.keep_alive(keep_alive);
    // Clients close idle connections before the server does: no request is sent
    // on a connection the server is closing.
    if (keep_alive)
      res.set("Keep-Alive", "timeout=" + std::to_string(std::max<int64_t>(
                                             1, server_.options.idle_timeout.count() / 1000 - 1)));
  }

  // Posts one write to the I/O thread and waits for it (the write deadline
  // bounds it). A failed write breaks the stream.
  bool write_and_wait(Session::WriteOp op) {
    auto result = std::make_shared<std::promise<bool>>();
    std::future<bool> written = result->get_future();
    net::post(session_->io(), [s = session_, op = std::move(op), result] {
      s->start_write(op, [s, result](error_code ec) {
        if (ec) s->close();
        result->set_value(!ec);
      });
    });
    // The I/O thread may stop (the server is stopping) with the write still queued.
    while (written.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready)
      if (server_.io.stopped()) {
        state_ = State::broken;
        return false;
      }
    bool ok = false;
    try {
      ok = written.get();
    } catch (const std::future_error&) {
    }
    if (!ok) state_ = State::broken;
    return ok;
  }

  HttpTransport::Impl& server_;
  std::shared_ptr<Session> session_;
  HttpRequest request_;
  const bool keep_alive_;
  const int fd_;
  State state_ = State::none;
};

}  // namespace

void HttpTransport::Impl::dispatch(const std::shared_ptr<Session>& session, HttpRequest request,
                                   bool keep_alive) {
  auto exchange = std::make_shared<Exchange>(*this, session, std::move(request), keep_alive);
  const auto guarded = [exchange](const Handler& handler) {
    try {
      handler(*exchange);
    } catch (const std::exception& e) {
      exchange->fail(e.what());
    } catch (...) {
      exchange->fail("internal error");
    }
  };
  if (before) {
    bool answered = false;
    guarded([&](HttpExchange& ex) { answered = before(ex); });
    if (answered) return;
  }
  const auto route = routes.find({exchange->request().method, exchange->request().path});
  if (route == routes.end()) {
    if (unmatched) guarded(unmatched);
    return;
  }
  if (route->second.runs == Runs::on_io_thread) return guarded(route->second.handler);
  const Handler& handler = route->second.handler;
  if (!pool->try_post([guarded, &handler] { guarded(handler); }))
    exchange->respond(429, "application/json",
                      error_body(429, "too many requests: every HTTP handler thread is busy and " +
                                          std::to_string(options.handler_threads) +
                                          " requests wait for one (--threads-http); try again "
                                          "later"),
                      {{"Retry-After", "1"}});
}

void HttpTransport::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors or memory for a moment: wait, rather than spin on the error.
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](error_code wait_ec) {
        if (!wait_ec) accept();
      });
      return;
    }
    admit(std::move(socket));
    accept();
  });
}

void HttpTransport::Impl::admit(tcp::socket socket) {
  error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return;  // gone already
  std::string client = peer.address().to_string();
  int status = 0;
  std::string why;
  {
    std::lock_guard lock(mutex);
    if (open >= options.max_connections) {
      status = 503;
      why = "the server has " + std::to_string(open) +
            " connections open, its most (--max-connections); try again later";
    } else if (per_client[client] >= options.max_connections_per_client) {
      status = 429;
      why = "too many connections from " + client + ": " +
            std::to_string(options.max_connections_per_client) +
            " are open (--max-connections-per-client); try again later";
    }
    if (status == 0) {
      ++open;
      ++per_client[client];
    } else if (refusing < kMaxRefusing) {
      ++refusing;
    } else {
      status = -1;
    }
    if (per_client[client] == 0) per_client.erase(client);
  }
  if (status != 0) ++refused;
  if (status < 0) return;  // the socket closes here
  auto session = std::make_shared<Session>(*this, std::move(socket), client, status != 0);
  if (status != 0)
    session->refuse(status, why);
  else
    session->start();
}

void HttpTransport::Impl::release(const std::string& client, bool was_refused) {
  std::lock_guard lock(mutex);
  if (was_refused) {
    --refusing;
    return;
  }
  --open;
  const auto it = per_client.find(client);
  if (it != per_client.end() && --it->second <= 0) per_client.erase(it);
}

HttpTransport::HttpTransport(HttpTransportOptions options, ErrorBody error_body)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(error_body))) {}

HttpTransport::~HttpTransport() = default;

void HttpTransport::route(const std::string& method, const std::string& path, Runs runs,
                          Handler handler) {
  impl_->routes[{method, path}] = {runs, std::move(handler)};
}

void HttpTransport::before_routing(std::function<bool(HttpExchange&)> hook) {
  impl_->before = std::move(hook);
}

void HttpTransport::fallback(Handler handler) {
  impl_->unmatched = std::move(handler);
}

void HttpTransport::on_response(std::function<void(const HttpRequest&, int)> observer) {
  impl_->observer = std::move(observer);
}

int HttpTransport::bind(const std::string& host, int port) {
  const HttpTransportOptions& o = impl_->options;
  // Every open connection is a descriptor: make sure the caps fit in the process's limit.
  const rlim_t needed = static_cast<rlim_t>(o.max_connections) + kMaxRefusing + kSpareDescriptors;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < needed) {
    limit.rlim_cur = std::min(needed, limit.rlim_max);
    setrlimit(RLIMIT_NOFILE, &limit);
    check(limit.rlim_cur >= needed, "--max-connections ", o.max_connections, " needs ", needed,
          " file descriptors and this process may open ", limit.rlim_max,
          " (ulimit -n): lower --max-connections or raise the limit");
  }
  const std::string where = port == 0 ? host + " (any port)" : host + ":" + std::to_string(port);
  error_code ec;
  tcp::resolver resolver(impl_->io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  check(!ec && !endpoints.empty(), "cannot listen on ", where, ": ", ec.message());
  const tcp::endpoint endpoint = *endpoints.begin();
  tcp::acceptor& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  // The backlog holds the connections the cap allows (the kernel may lower it
  // to net.core.somaxconn).
  if (!ec) acceptor.listen(o.max_connections, ec);
  check(!ec, "cannot listen on ", where,
        " (in use, or not an address of this machine: ", ec.message(), ")");
  if (!impl_->pool) impl_->pool = std::make_unique<HandlerPool>(o.handler_threads);
  return acceptor.local_endpoint().port();
}

void HttpTransport::run() {
  check(impl_->acceptor.is_open(), "HttpTransport::run before bind");
  impl_->accept();
  for (;;) {
    try {
      impl_->io.run();
      return;
    } catch (const std::exception& e) {
      // One connection's failure (out of memory, say) is not the server's end.
      std::fprintf(stderr, "serve: HTTP: %s\n", e.what());
    }
  }
}

bool HttpTransport::wait_until_idle(std::chrono::milliseconds bound) {
  std::unique_lock lock(impl_->mutex);
  return impl_->idle.wait_for(lock, bound, [&] { return impl_->answering == 0; });
}

void HttpTransport::stop() {
  impl_->stopping = true;
  impl_->io.stop();
}

HttpTransport::Stats HttpTransport::stats() const {
  Stats s;
  {
    std::lock_guard lock(impl_->mutex);
    s.open_connections = impl_->open;
  }
  s.refused_connections = impl_->refused;
  s.timed_out_connections = impl_->timed_out;
  s.busy_handlers = impl_->pool ? impl_->pool->busy() : 0;
  return s;
}

const HttpTransportOptions& HttpTransport::options() const {
  return impl_->options;
}

HttpParsed parse_http_requests(std::string_view bytes, const HttpTransportOptions& options,
                               size_t max_requests) {
  HttpParsed parsed;
  size_t offset = 0;
  while (parsed.requests.size() < max_requests && offset < bytes.size()) {
    RequestParser parser;
    apply_limits(parser, options);
    parser.eager(true);  // the whole request in one put() when its bytes are all there
    error_code ec;
    offset += parser.put(net::buffer(bytes.data() + offset, bytes.size() - offset), ec);
    if (!parser.is_done() && (!ec || ec == http::error::need_more)) {
      // Every byte there is was given: the bytes end within this request. (The parser must
      // not be given the same bytes again after need_more; a socket gives it more.)
      ec = {};
      parser.put_eof(ec);
      if (!ec && !parser.is_done()) ec = http::error::partial_message;
    }
    if (ec) {
      parsed.error_status = read_error_answer(ec, options).first;
      break;
    }
    const bool keep_alive = parser.keep_alive();
    parsed.requests.push_back(to_request(parser.release(), "memory"));
    if (!keep_alive) break;  // the server closes after its answer
  }
  return parsed;
}

}  // namespace parspec
