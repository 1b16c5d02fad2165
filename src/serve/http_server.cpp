#include "serve/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>

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

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  // Messages may quote the client's bytes: invalid UTF-8 becomes U+FFFD.
  res.set_content(error_json(e).dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

ApiError api_error(int status, std::string message, std::string type, std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
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
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
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
      server_(std::make_unique<httplib::Server>()) {
  const int threads = options_.http_threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_body_bytes);
  install_routes();
}

HttpServer::~HttpServer() = default;

bool HttpServer::authorized(const std::string& header) const {
  if (options_.api_key.empty()) return true;
  const std::string prefix = "Bearer ";
  if (header.compare(0, prefix.size(), prefix) != 0) return false;
  return equal_constant_time(header.substr(prefix.size()), options_.api_key);
}

void HttpServer::install_routes() {
  httplib::Server& s = *server_;

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool protected_path = req.path.rfind("/v1/", 0) == 0 || req.path == "/metrics";
    if (protected_path && !authorized(req.get_header_value("Authorization"))) {
      send_error(res, api_error(401,
                                "Incorrect API key provided: send it as 'Authorization: Bearer "
                                "KEY' (the key given to parspec serve --api-key)",
                                "invalid_request_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // httplib answers some errors itself (413, 404, 400): give them OpenAI's shape.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = "HTTP " + std::to_string(res.status);
    if (res.status == 404) message = "no such endpoint: " + req.method + " " + req.path;
    if (res.status == 413) message = "the request body is larger than this server accepts";
    send_error(res, api_error(res.status, message, "invalid_request_error"));
  });
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, api_error(500, what, "server_error"));
      });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    engine_.metrics().count_request(endpoint_label(req.path), res.status);
  });

  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kChatPage, "text/html; charset=utf-8");
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_) {
      res.status = 503;
      res.set_content(R"({"status":"draining"})", "application/json");
      return;
    }
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const ForwardBatcher::Stats b = engine_.batcher().stats();
    const auto sched = engine_.scheduler_stats();
    res.set_content(engine_.metrics().render(engine_.queue_depth(), engine_.active(), b.rounds,
                                             b.rows, b.sequence_forwards) +
                        render_pipeline_metrics(b, sched ? &*sched : nullptr),
                    "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", options_.limits.model_id},
                        {"object", "model"},
                        {"created", unix_time()},
                        {"owned_by", "parspec"},
                        {"meta",
                         {{"strategy", engine_.options().base.name},
                          {"ctx_size", options_.limits.ctx_size},
                          {"chat_template",
                           chat_template_ ? std::string(chat_template_->name()) : std::string()}}}};
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(
                        -1, ' ', false, json::error_handler_t::replace),
                    "application/json");
  });

  const auto generation = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      if (draining_) {
        send_error(res, api_error(503, "the server is shutting down", "server_error"));
        return;
      }
      ApiRequest r;
      try {
        r = parse_request(req.body, chat, options_.limits, tokenizer_,
                          chat_template_ ? &*chat_template_ : nullptr);
      } catch (const ApiError& e) {
        send_error(res, e);
        return;
      }
      if (!engine_.submit(r.job)) {
        send_error(res, api_error(429,
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
          send_error(res, api_error(500, job.error, "server_error"));
          return;
        }
        res.set_content(response_json(r, id, created, model, text)
                            .dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/json");
        return;
      }

      res.set_header("Cache-Control", "no-cache");
      {
        std::lock_guard lock(streams_mutex_);
        ++streams_in_flight_;
      }
      res.set_chunked_content_provider(
          "text/event-stream",
          [r, id, created, model, first = true](size_t, httplib::DataSink& sink) mutable {
            CompletionJob& j = *r.job;
            std::deque<OutputPiece> pieces;
            bool finished;
            {
              std::unique_lock lock(j.mutex);
              j.cv.wait_for(lock, std::chrono::seconds(2),
                            [&] { return !j.pieces.empty() || j.finished; });
              pieces.swap(j.pieces);
              finished = j.finished;
            }
            std::string out;
            if (first && r.chat) {
              // OpenAI's first chunk: the role, empty content.
              json role = chunk_json(r, id, created, model, nullptr, true);
              role["choices"][0]["delta"]["content"] = "";
              out += sse(role);
            }
            for (const OutputPiece& p : pieces)
              out += sse(chunk_json(r, id, created, model, &p, false));
            first = false;
            if (finished) {
              if (!j.error.empty()) {
                out += sse(error_json(api_error(500, j.error, "server_error")));
              } else {
                out += sse(final_chunk_json(r, id, created, model));
                if (r.include_usage) {
                  out += sse({{"id", id},
                              {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
                              {"created", created},
                              {"model", model},
                              {"system_fingerprint", "parspec"},
                              {"choices", json::array()},
                              {"usage", usage_json(j)}});
                }
              }
              out += "data: [DONE]\n\n";
            }
            // A client that went away fails the write: stop its generation.
            if ((!out.empty() && !sink.write(out.data(), out.size())) ||
                (out.empty() && !sink.is_writable())) {
              j.cancelled = true;
              return false;
            }
            if (finished) sink.done();
            return true;
          },
          // Called once the response is done with, written or not.
          [this, r](bool success) {
            if (!success) r.job->cancelled = true;
            std::lock_guard lock(streams_mutex_);
            --streams_in_flight_;
            streams_done_.notify_all();
          });
    };
  };
  s.Post("/v1/completions", generation(false));
  s.Post("/v1/chat/completions", generation(true));
}

int HttpServer::bind() {
  int port = options_.port;
  if (port == 0) {
    port = server_->bind_to_any_port(options_.host);
    check(port > 0, "cannot listen on ", options_.host, " (any port)");
  } else {
    check(server_->bind_to_port(options_.host, port), "cannot listen on ", options_.host, ":", port,
          " (in use, or not an address of this machine)");
  }
  return port;
}

void HttpServer::serve() {
  server_->listen_after_bind();
}

void HttpServer::drain_and_stop() {
  draining_ = true;
  engine_.drain();
  // Every generation has finished; let their streams reach the client before
  // the server stops. A client that stopped reading holds its write only until
  // the library's write timeout, so this wait ends; the bound is a safety net.
  {
    std::unique_lock lock(streams_mutex_);
    streams_done_.wait_for(lock, std::chrono::seconds(60), [&] { return streams_in_flight_ == 0; });
  }
  server_->stop();
}

}  // namespace parspec
