// parspec serve: an OpenAI-compatible HTTP server (serve/) with continuous
// batching and speculative decoding per request.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "core/worker.h"
#include "decode/local_model.h"
#include "decode/registry.h"
#include "model/model.h"
#include "serve/engine.h"
#include "serve/http_server.h"
#include "strategies/cosine/cosine_schedule.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/llama_flags.h"
#include "tools/model_loading.h"
#include "tools/prompt_input.h"
#include "tools/strategy_options.h"
#include "tuning/tuning.h"

namespace parspec {

namespace {

struct ServeArgs {
  std::string model_path, strategy_name, chat_template, alias, host = "127.0.0.1", api_key;
  StrategyOptions strategy_options;
  int port = 8080, n_threads = default_thread_count(), n_ctx = 4096, slots = 4, max_queue = 64,
      batch_tokens = 512, max_tokens = 4096, n_predict = 256, http_threads = 0;
  int64_t max_body = 1 << 20;
  // Seconds; connection caps.
  float request_timeout = 30, idle_timeout = 10, write_timeout = 15;
  int max_connections = 512, max_connections_per_client = 128;
  // cosine's request scheduler: T_max (ms), M_max (MiB), λ, refusals before admission.
  float sched_max_latency = 0, sched_max_kv = 0, sched_lambda = 0;
  int sched_max_wait = 4;
};

const char* const kSchedulerFlags[] = {"--sched-max-latency", "--sched-max-kv", "--sched-lambda",
                                       "--sched-max-wait"};

// "ar, sd, ...": the strategies the server runs.
std::string served_list() {
  std::string out;
  for (const StrategyInfo& info : strategy_registry())
    if (info.served) out += (out.empty() ? "" : ", ") + info.name;
  return out;
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// KV cache bytes per context token of a model, in MiB (keys and values, float).
double kv_mib_per_token(const Model& model) {
  const ModelConfig& c = model.config();
  return 2.0 * c.n_layer * c.kv_dim() * sizeof(float) / (1024.0 * 1024.0);
}

// cosine: the request scheduler, its latencies from `parspec tune`'s cache for
// the target and the pool's first drafter on these workers, or timed now.
std::shared_ptr<RequestScheduler> make_scheduler(const StrategyResources& r,
                                                 const StrategyConfig& base, const ServeArgs& a) {
  StrategyConfig key_config = base;
  if (!key_config.draft) key_config.draft = r.drafters.front();
  SchedulerOptions options;
  std::string source;
  if (const std::optional<CostMeasurements> m =
          load_tuning(default_tune_cache_dir(), tune_key(key_config))) {
    options.model = latency_model(*m);
    source = "from the tuning cache " + tune_cache_file(default_tune_cache_dir());
  } else {
    constexpr int kMeasured = 16;  // L(n) beyond: extrapolated (LatencyModel)
    std::fprintf(stderr,
                 "serve: cosine scheduler: no `parspec tune` entry for these models and threads; "
                 "timing the target's forwards over 1..%d tokens and a draft token now\n",
                 kMeasured);
    const Stopwatch watch;
    // At least one timed pass over the sizes after a warm-up one; more when fast.
    // Where the models run: a GPU's executors, or the workers.
    options.model.target_ms = measure_target_latencies(make_target_side(base), kMeasured, 1);
    std::unique_ptr<Target> draft_side =
        r.devices.draft_executor
            ? std::make_unique<LocalTarget>(key_config.draft, *r.devices.draft_executor)
            : std::make_unique<LocalTarget>(key_config.draft, *key_config.draft_worker);
    options.model.draft_token_ms = measure_target_latencies(std::move(draft_side), 1, 3)[0];
    char took[96];
    std::snprintf(took, sizeof took, "measured now in %.1f s, without per-step overheads",
                  watch.elapsed_ms() / 1000.0);
    source = took;
  }
  std::fprintf(stderr,
               "serve: cosine scheduler: T_llm(b, Γ) = L(b + Γ) + %.2f ms, L(1) = %.2f ms, "
               "L(%zu) = %.2f ms; T_ssm = %.3f ms per draft token (%s)\n",
               options.model.target_overhead_ms, options.model.target_ms.front(),
               options.model.target_ms.size(), options.model.target_ms.back(),
               options.model.draft_token_ms, source.c_str());
  if (const auto it = base.options.find("gamma_max"); it != base.options.end())
    options.bounds.gamma_max = std::get<int>(it->second);
  options.bounds.max_latency_ms = a.sched_max_latency;
  options.bounds.max_memory = a.sched_max_kv;
  options.bounds.lambda = a.sched_lambda;
  options.max_wait = a.sched_max_wait;
  return std::make_shared<RequestScheduler>(options);
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  ServeArgs a;
  ArgParser args("serve",
                 "Serve a model over an OpenAI-compatible HTTP API (/v1/completions, "
                 "/v1/chat/completions, /v1/models, /health, /metrics) with a chat page at /.");
  args.option("-m,--model", &a.model_path, "FILE", "target model (GGUF)");
  args.option("--strategy", &a.strategy_name, "NAME",
              "decoding strategy of every request: " + served_list() +
                  " (default: " + strategy_for(StrategyRole::serve_drafted).name + " with -md, " +
                  strategy_for(StrategyRole::serve_plain).name +
                  " without); NAME:G as in bench --strategies (sd:3: --draft-max 3)");
  a.strategy_options.add_to(args);
  args.option("--host", &a.host, "ADDR", "address to listen on (loopback by default)");
  args.option("--port", &a.port, "N", "port to listen on; 0 = any free port (printed)");
  args.option("--api-key", &a.api_key, "KEY",
              "require 'Authorization: Bearer KEY' on /v1/* and /metrics");
  args.option("-a,--alias", &a.alias, "NAME", "model id in the API (default: the file's name)");
  args.option("--chat-template", &a.chat_template, "NAME",
              "chat template to use instead of the model's (llama3, chatml, qwen3, gemma, phi3; a "
              "model without one gets chatml, with a warning)");
  args.option("-t,--threads", &a.n_threads, "N", "threads of the forward passes");
  args.option("-c,--ctx-size,--ctx", &a.n_ctx, "N",
              "most tokens per request (prompt + max_tokens); 0 = the model's training context");
  args.option("-np,--parallel", &a.slots, "N", "requests generating at once (the batch)");
  args.option("--max-queue", &a.max_queue, "N",
              "requests waiting for a free slot; more are refused with 429");
  args.option("-b,--batch-size", &a.batch_tokens, "N",
              "token budget of one batched forward step (decode steps first, prompt chunks fill "
              "the rest)");
  args.option("--max-tokens", &a.max_tokens, "N", "largest max_tokens a request may ask for");
  args.option("-n,--n-predict", &a.n_predict, "N",
              "max_tokens of a chat request that gives none (completions: 16, as OpenAI)");
  args.option("--max-body", &a.max_body, "BYTES",
              "largest request body, counted as it arrives (also chunked); larger ones get 413");
  args.option("--request-timeout", &a.request_timeout, "S",
              "seconds a client has to send a whole request (headers and body), from its "
              "connection or its first byte; slower ones are closed");
  args.option("--idle-timeout", &a.idle_timeout, "S",
              "seconds a keep-alive connection may wait for its next request");
  args.option("--write-timeout", &a.write_timeout, "S",
              "seconds one write of an answer may wait for a client that does not read; then "
              "the connection closes and its generation stops");
  args.option("--max-connections", &a.max_connections, "N",
              "open connections; more are refused with 503 (also the listen backlog)");
  args.option("--max-connections-per-client", &a.max_connections_per_client, "N",
              "open connections from one client address; more are refused with 429");
  args.option("--threads-http", &a.http_threads, "N",
              "threads that answer generation requests (0: -np + --max-queue + 8, at most 512); "
              "connections and other endpoints need none");
  args.option("--sched-max-latency", &a.sched_max_latency, "MS",
              "cosine: T_max, the request scheduler's bound on a batch's modelled drafting + "
              "verification time (0: none); the model: `parspec tune`'s cached measurements of "
              "-m and the first drafter at these -t/-td, else timed at start");
  args.option("--sched-max-kv", &a.sched_max_kv, "MIB",
              "cosine: M_max, the bound on a batch's KV cache memory (target and drafters, "
              "by context length; 0: none)");
  args.option("--sched-lambda", &a.sched_lambda, "L",
              "cosine: λ, ms of modelled time one verified draft token is worth in the "
              "scheduler's objective T_ttl/b − λΓ (0: latency per request alone)");
  args.option("--sched-max-wait", &a.sched_max_wait, "N",
              "cosine: steps a request may be left out of the chosen batch in a row before "
              "it is admitted anyway");
  add_ignored_gpu_flags(args, /*batch_size=*/false,
                        /*layers=*/false);  // -b is serve's token budget
  args.bound("-t", 1, kMaxThreads);
  args.describe_default("-t", "the cores this process may use");
  args.bound("--port", 0, 65535);
  args.bound("-np", 1, 256);
  args.bound("--max-queue", 0, 100000);
  args.bound("-b", 1, 1 << 20);
  args.bound("--max-tokens", 1, 1 << 24);
  args.bound("-n", 0, 1 << 24);
  args.bound("--max-body", 1024, 1LL << 32);
  args.bound("--threads-http", 0, 4096);
  args.bound("--request-timeout", 0.1, 86400);
  args.bound("--idle-timeout", 0.1, 86400);
  args.bound("--write-timeout", 0.1, 86400);
  args.bound("--max-connections", 1, 1000000);
  args.bound("--max-connections-per-client", 1, 1000000);
  args.bound("--sched-max-latency", 0, 1e9);
  args.bound("--sched-max-kv", 0, 1e9);
  args.bound("--sched-lambda", 0, 1e9);
  args.bound("--sched-max-wait", 0, 1000000);
  if (!args.parse(argc, argv)) return 0;

  check(!a.model_path.empty(), "no model given (-m FILE)");
  if (a.strategy_name.empty())
    a.strategy_name =
        strategy_for(a.strategy_options.draft_path.empty() ? StrategyRole::serve_plain
                                                           : StrategyRole::serve_drafted)
            .name;
  const StrategyInfo& served =
      strategy_info(a.strategy_options.check_strategy(args, a.strategy_name).name);
  check(served.served, "serve runs ",
        strategy_names_where([](const StrategyInfo& i) { return i.served; }),
        " (batched across requests); '", served.name, "' is not served");
  const std::string scheduled =
      strategy_names_where([](const StrategyInfo& i) { return i.uses_request_scheduler; });
  for (const char* flag : kSchedulerFlags)
    check(served.uses_request_scheduler || !args.given(flag), flag, " is an option of ", scheduled,
          "'s request scheduler (--strategy ", scheduled, ")");
  if (!is_loopback(a.host) && a.api_key.empty())
    std::fprintf(stderr,
                 "serve: warning: listening on %s without --api-key: anyone who can reach it may "
                 "use it\n",
                 a.host.c_str());

  // Signals go to the thread that waits for them: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that went away fails a write, not the process

  std::shared_ptr<const Model> model =
      load_model(a.model_path, a.strategy_options.devices.target_loading());
  auto tokenizer = Tokenizer::from_gguf(model->gguf());
  const int n_ctx =
      resolve_context_size(a.n_ctx, args.given("-c"), {&model->config()}, a.model_path);
  model->use_context_size(n_ctx);
  std::optional<ChatTemplate> chat_template =
      ChatTemplate::for_model(model->gguf(), a.chat_template);
  if (!chat_template->fallback_warning().empty())
    std::fprintf(stderr, "serve: warning: %s\n", chat_template->fallback_warning().c_str());

  StrategyResources resources;
  resources.init(model, a.strategy_options, a.n_threads);
  EngineOptions engine_options;
  engine_options.base = resources.config_for(a.strategy_name, a.strategy_options, n_ctx);
  engine_options.ctx_size = n_ctx;
  engine_options.slots = a.slots;
  engine_options.max_queue = a.max_queue;
  engine_options.token_budget = a.batch_tokens;
  // -td: drafting passes on their own worker, beside verification (the pipeline).
  engine_options.draft_worker = resources.draft_worker.get();
  // On a GPU (--device cuda, -ngl): the batcher's passes run on the sides'
  // executors; a draft on the CPU beside a target on the GPU drafts on the
  // CPU's worker while the GPU verifies.
  const DeviceSides& sides = resources.devices;
  engine_options.target_executor = sides.target_executor.get();
  engine_options.draft_executor = sides.draft_executor.get();
  if (sides.target_executor && !sides.draft_executor && !engine_options.draft_worker)
    engine_options.draft_worker = resources.target_worker.get();
  if (served.uses_request_scheduler) {
    engine_options.scheduler = make_scheduler(resources, engine_options.base, a);
    engine_options.kv_mib_per_token = kv_mib_per_token(*model);
    if (resources.drafters.empty())
      engine_options.kv_mib_per_token += kv_mib_per_token(*resources.draft);
    for (const auto& d : resources.drafters)
      engine_options.kv_mib_per_token += kv_mib_per_token(*d);
  }
  Engine engine(engine_options, *tokenizer);

  HttpOptions http;
  http.host = a.host;
  http.port = a.port;
  http.api_key = a.api_key;
  const auto ms = [](float seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  };
  http.transport.max_body_bytes = static_cast<size_t>(a.max_body);
  http.transport.request_timeout = ms(a.request_timeout);
  http.transport.idle_timeout = ms(a.idle_timeout);
  http.transport.write_timeout = ms(a.write_timeout);
  http.transport.max_connections = a.max_connections;
  http.transport.max_connections_per_client = a.max_connections_per_client;
  // A generation holds a handler thread while it waits or streams: enough for
  // every slot and queue place, and a few for the requests refused with 429.
  http.transport.handler_threads =
      a.http_threads > 0 ? a.http_threads : std::min(a.slots + a.max_queue + 8, 512);
  http.limits.model_id =
      a.alias.empty() ? std::filesystem::path(a.model_path).stem().string() : a.alias;
  http.limits.ctx_size = n_ctx;
  http.limits.max_tokens = a.max_tokens;
  http.limits.default_max_tokens = a.n_predict;
  // Request bodies and their parsed JSON are the server's big short-lived
  // allocations. glibc raises its mmap threshold to the largest block freed
  // (up to 32 MiB), after which such blocks come from the per-thread heaps and
  // their pages stay with the process; a fixed threshold maps every block of
  // 1 MiB or more on its own, so its memory goes back when it is freed.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  HttpServer server(http, engine, *tokenizer, chat_template);
  const int port = server.bind();
  std::printf("parspec serve: listening on http://%s:%d (model %s, strategy %s, %d slots)\n",
              a.host.c_str(), port, http.limits.model_id.c_str(), a.strategy_name.c_str(), a.slots);
  std::fflush(stdout);

  // SIGTERM/SIGINT: finish the requests in flight, then stop.
  std::atomic<bool> stopped{false};
  std::thread signal_thread = start_thread("signals", [&] {
    int received = 0;
    sigwait(&signals, &received);
    if (stopped) return;
    std::fprintf(stderr, "serve: %s: finishing the requests in flight\n",
                 received == SIGINT ? "SIGINT" : "SIGTERM");
    server.drain_and_stop();
  });
  server.serve();
  stopped = true;
  pthread_kill(signal_thread.native_handle(), SIGTERM);  // wakes it if no signal came
  signal_thread.join();
  engine.drain();
  std::fprintf(stderr, "serve: stopped\n");
  return 0;
}

}  // namespace parspec
