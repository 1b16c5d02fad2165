#include "serve/http_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <thread>

#include "core/error.h"
#include "serve/page.h"

namespace parspec {

namespace {

using nlohmann::json;

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Messages may quote the client's bytes: invalid UTF-8 becomes U+FFFD.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(HttpExchange& ex, const ApiError& e) {
  ex.respond(e.status, "application/json", dump(error_json(e)));
}

ApiError api_error(int status, std::string message, std::string type, std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

// The errors the transport answers itself (413, 431, 400, refused connections), in OpenAI's shape.
std::string transport_error(int status, const std::string& message) {
  if (status == 429)
    return dump(error_json(api_error(status, message, "requests", "rate_limit_exceeded")));
  return dump(error_json(
      api_error(status, message, status >= 500 ? "server_error" : "invalid_request_error")));
}

// Constant-time comparison: the time does not depend on where the strings differ.
bool equal_constant_time(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::string sse(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

// Metrics label for a path: the known endpoints, everything else "other".
std::string endpoint_label(const std::string& path) {
  for (const char* known :
       {"/", "/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions"})
    if (path == known) return path;
  return "other";
}

}  // namespace

HttpServer::HttpServer(HttpOptions options, Engine& engine, const Tokenizer& tokenizer,
                       std::optional<ChatTemplate> chat_template)
    : options_(std::move(options)),
      engine_(engine),
      tokenizer_(tokenizer),
      chat_template_(std::move(chat_template)),
      transport_(options_.transport, transport_error),
      parse_slots_(std::max<std::ptrdiff_t>(1, std::thread::hardware_concurrency())) {
  install_routes();
}

HttpServer::~HttpServer() = default;

bool HttpServer::authorized(const std::string& header) const {
  if (options_.api_key.empty()) return true;
  const std::string prefix = "Bearer ";
  if (header.compare(0, prefix.size(), prefix) != 0) return false;
  return equal_constant_time(header.substr(prefix.size()), options_.api_key);
}

std::string HttpServer::metrics_text() const {
  const ForwardBatcher::Stats b = engine_.batcher().stats();
  const auto sched = engine_.scheduler_stats();
  const HttpTransport::Stats t = transport_.stats();
  std::string text = engine_.metrics().render(engine_.queue_depth(), engine_.active(), b.rounds,
                                              b.rows, b.sequence_forwards) +
                     render_pipeline_metrics(b, sched ? &*sched : nullptr);
  text +=
      "# HELP parspec_http_open_connections HTTP connections open now\n"
      "# TYPE parspec_http_open_connections gauge\n"
      "parspec_http_open_connections " +
      std::to_string(t.open_connections) +
      "\n# HELP parspec_http_refused_connections_total connections refused past "
      "--max-connections or --max-connections-per-client\n"
      "# TYPE parspec_http_refused_connections_total counter\n"
      "parspec_http_refused_connections_total " +
      std::to_string(t.refused_connections) +
      "\n# HELP parspec_http_timed_out_connections_total connections closed at "
      "--request-timeout or --idle-timeout\n"
      "# TYPE parspec_http_timed_out_connections_total counter\n"
      "parspec_http_timed_out_connections_total " +
      std::to_string(t.timed_out_connections) +
      "\n# HELP parspec_http_busy_handlers requests on the HTTP handler threads, running or "
      "waiting\n"
      "# TYPE parspec_http_busy_handlers gauge\n"
      "parspec_http_busy_handlers " +
      std::to_string(t.busy_handlers) + "\n";
  return text;
}

void HttpServer::install_routes() {
  using Runs = HttpTransport::Runs;
  HttpTransport& t = transport_;

  t.before_routing([this](HttpExchange& ex) {
    const std::string& path = ex.request().path;
    const bool protected_path = path.rfind("/v1/", 0) == 0 || path == "/metrics";
    if (protected_path && !authorized(ex.request().header("Authorization"))) {
      send_error(ex, api_error(401,
                               "Incorrect API key provided: send it as 'Authorization: Bearer "
                               "KEY' (the key given to parspec serve --api-key)",
                               "invalid_request_error", "invalid_api_key"));
      return true;
    }
    return false;
  });
  t.fallback([](HttpExchange& ex) {
    send_error(ex,
               api_error(404, "no such endpoint: " + ex.request().method + " " + ex.request().path,
                         "invalid_request_error"));
  });
  t.on_response([this](const HttpRequest& req, int status) {
    engine_.metrics().count_request(endpoint_label(req.path), status);
  });

  // Everything but the generations answers on the I/O thread, at once.
  t.route("GET", "/", Runs::on_io_thread,
          [](HttpExchange& ex) { ex.respond(200, "text/html; charset=utf-8", kChatPage); });
  t.route("GET", "/health", Runs::on_io_thread, [this](HttpExchange& ex) {
    if (draining_)
      ex.respond(503, "application/json", R"({"status":"draining"})");
    else
      ex.respond(200, "application/json", R"({"status":"ok"})");
  });
  t.route("GET", "/metrics", Runs::on_io_thread, [this](HttpExchange& ex) {
    ex.respond(200, "text/plain; version=0.0.4", metrics_text());
  });
  t.route("GET", "/v1/models", Runs::on_io_thread, [this](HttpExchange& ex) {
    const json model = {{"id", options_.limits.model_id},
                        {"object", "model"},
                        {"created", unix_time()},
                        {"owned_by", "parspec"},
                        {"meta",
                         {{"strategy", engine_.options().base.name},
                          {"ctx_size", options_.limits.ctx_size},
                          {"chat_template",
                           chat_template_ ? std::string(chat_template_->name()) : std::string()}}}};
    ex.respond(200, "application/json",
               dump(json{{"object", "list"}, {"data", json::array({model})}}));
  });
  // Tokenizing and generating block: on the handler threads.
  t.route("POST", "/v1/completions", Runs::on_handler_thread,
          [this](HttpExchange& ex) { generate(ex, false); });
  t.route("POST", "/v1/chat/completions", Runs::on_handler_thread,
          [this](HttpExchange& ex) { generate(ex, true); });
}

void HttpServer::generate(HttpExchange& ex, bool chat) {
  if (draining_) {
    send_error(ex, api_error(503, "the server is shutting down", "server_error"));
    return;
  }
  ApiRequest r;
  {
    parse_slots_.acquire();
    const struct Release {
      std::counting_semaphore<>& slots;
      ~Release() { slots.release(); }
    } release{parse_slots_};
    // Held only while it is parsed, not while the generation runs.
    const std::string body = ex.take_body();
    try {
      r = parse_request(body, chat, options_.limits, tokenizer_,
                        chat_template_ ? &*chat_template_ : nullptr);
    } catch (const ApiError& e) {
      send_error(ex, e);
      return;
    }
  }
  if (!engine_.submit(r.job)) {
    send_error(ex, api_error(429,
                             "too many requests: " + std::to_string(engine_.active()) +
                                 " generating and " + std::to_string(engine_.queue_depth()) +
                                 " waiting; try again later",
                             "requests", "rate_limit_exceeded"));
    return;
  }
  const std::string id = new_completion_id(chat);
  const int64_t created = unix_time();
  const std::string model = options_.limits.model_id;
  CompletionJob& job = *r.job;

  if (!r.stream) {
    std::string text;
    {
      std::unique_lock lock(job.mutex);
      job.cv.wait(lock, [&] { return job.finished; });
      for (const OutputPiece& p : job.pieces) text += p.text;
    }
    if (!job.error.empty()) {
      send_error(ex, api_error(500, job.error, "server_error"));
      return;
    }
    ex.respond(200, "application/json", dump(response_json(r, id, created, model, text)));
    return;
  }

  // A client that went away (a failed write, or a closed connection while
  // nothing new came) stops its generation.
  if (!ex.stream_begin("text/event-stream", {{"Cache-Control", "no-cache"}})) {
    job.cancelled = true;
    return;
  }
  for (bool first = true;; first = false) {
    std::deque<OutputPiece> pieces;
    bool finished;
    {
      std::unique_lock lock(job.mutex);
      job.cv.wait_for(lock, std::chrono::seconds(2),
                      [&] { return !job.pieces.empty() || job.finished; });
      pieces.swap(job.pieces);
      finished = job.finished;
    }
    std::string out;
    if (first && r.chat) {
      // OpenAI's first chunk: the role, empty content.
      json role = chunk_json(r, id, created, model, nullptr, true);
      role["choices"][0]["delta"]["content"] = "";
      out += sse(role);
    }
    for (const OutputPiece& p : pieces) out += sse(chunk_json(r, id, created, model, &p, false));
    if (finished) {
      if (!job.error.empty()) {
        out += sse(error_json(api_error(500, job.error, "server_error")));
      } else {
        out += sse(final_chunk_json(r, id, created, model));
        if (r.include_usage) {
          out += sse({{"id", id},
                      {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", created},
                      {"model", model},
                      {"system_fingerprint", "parspec"},
                      {"choices", json::array()},
                      {"usage", usage_json(job)}});
        }
      }
      out += "data: [DONE]\n\n";
    }
    if ((!out.empty() && !ex.stream_write(std::move(out))) || (out.empty() && ex.client_gone())) {
      job.cancelled = true;
      return;
    }
    if (finished) {
      ex.stream_end();
      return;
    }
  }
}

int HttpServer::bind() {
  return transport_.bind(options_.host, options_.port);
}

void HttpServer::serve() {
  transport_.run();
}

void HttpServer::drain_and_stop() {
  draining_ = true;
  engine_.drain();
  // Every generation has finished; let their answers reach the clients before
  // the server stops. A client that stopped reading holds a write only until
  // the write timeout, so this wait ends; the bound is a safety net.
  transport_.wait_until_idle(std::chrono::seconds(60));
  transport_.stop();
}

}  // namespace parspec
