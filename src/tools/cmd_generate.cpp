// parspec generate: text generation from a prompt, printing the text as it is
// produced, then prompt and generation speed.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/timer.h"
#include "core/worker.h"
#include "decode/registry.h"
#include "model/model.h"
#include "mpi/pipeline.h"
#include "sim/cost_profile.h"
#include "sim/sim_sides.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/chat_loop.h"
#include "tools/commands.h"
#include "tools/llama_flags.h"
#include "tools/model_loading.h"
#include "tools/prompt_input.h"
#include "tools/stop_strings.h"
#include "tools/strategy_options.h"

namespace parspec {

namespace {

// -cnv: the models and strategy as for one prompt, then the chat loop.
int run_conversation(const std::string& model_path, const std::string& chat_template,
                     const std::string& system_prompt, const std::string& strategy_name,
                     const StrategyOptions& strategy_options, int n_threads, int n_ctx,
                     bool ctx_given, int n_predict, SamplingParams sampling,
                     std::optional<uint64_t> seed, const std::vector<std::string>& stop_strings) {
  validate_sampling_params(sampling);
  std::shared_ptr<const Model> model =
      load_model(model_path, strategy_options.devices.target_loading());
  auto tokenizer = Tokenizer::from_gguf(model->gguf());
  const ChatTemplate tmpl = ChatTemplate::for_model(model->gguf(), chat_template);
  if (!tmpl.fallback_warning().empty())
    std::fprintf(stderr, "warning: %s\n", tmpl.fallback_warning().c_str());
  ChatLoopSettings settings;
  settings.n_ctx = resolve_context_size(n_ctx, ctx_given, {&model->config()}, model_path);
  model->use_context_size(settings.n_ctx);
  settings.system_prompt = system_prompt;
  settings.n_predict = n_predict;
  settings.stop_strings = stop_strings;
  sampling.seed = seed ? *seed : std::random_device{}();
  settings.sampling = sampling;
  StrategyResources resources;
  resources.init(model, strategy_options, n_threads);
  auto strategy =
      make_strategy(resources.config_for(strategy_name, strategy_options, settings.n_ctx));
  return run_chat_loop(*strategy, *tokenizer, tmpl, settings);
}

// The run as one JSON object (the documented fields of README.md).
void print_json(const std::string& strategy, const std::string& chosen,
                const GenerationResult& result, const Tokenizer& tokenizer, bool ignore_eos,
                uint64_t seed, int n_threads, const nlohmann::json* simulated) {
  const GenerationStats& st = result.stats;
  std::vector<int32_t> kept;
  for (int32_t t : result.tokens)
    if (ignore_eos || !tokenizer.is_end_of_generation(t)) kept.push_back(t);
  nlohmann::json out = st.to_json();
  out["strategy"] = strategy;
  out["chosen"] = chosen;
  out["text"] = tokenizer.decode(std::span<const int32_t>(kept), /*render_special=*/false);
  out["tokens"] = result.tokens;
  out["seed"] = seed;
  out["threads"] = n_threads;
  if (const mpi::Pipeline* pipeline = mpi::running_pipeline()) {
    // Under mpirun: where the layers ran, whether the link was emulated, and
    // each stage's own compute time over the run (prompt included).
    nlohmann::json stages = nlohmann::json::array();
    for (const mpi::StageTimes& stage : pipeline->stages())
      stages.push_back({{"rank", stage.rank},
                        {"host", stage.host},
                        {"layers", {stage.layer_first, stage.layer_last}},
                        {"forwards", stage.forwards},
                        {"skipped", stage.skipped},
                        {"abandoned", stage.abandoned},
                        {"compute_ms", stage.compute_ms},
                        {"cpu_ms", stage.cpu_ms}});
    out["distributed"] = {{"pipeline", pipeline->describe()},
                          {"link_emulated", pipeline->options().link.active()},
                          {"link_latency_us", pipeline->options().link.latency_us},
                          {"link_gbps", pipeline->options().link.gbps},
                          {"stages", stages}};
  }
  if (simulated != nullptr) {
    out["ms_per_token"] = st.n_gen > 0 ? st.t_gen_ms / static_cast<double>(st.n_gen) : 0.0;
    out["simulated"] = *simulated;
  }
  std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

// The rest of the streamed text, then speed (and acceptance) on stderr.
void print_speed(const std::string& strategy, const std::string& rest, const GenerationStats& st) {
  std::fputs(rest.c_str(), stdout);
  std::printf("\n");
  std::fprintf(stderr, "\nprompt:     %lld tokens in %.1f ms (%.2f tok/s)\n",
               static_cast<long long>(st.n_prompt), st.t_prompt_ms, st.prompt_tok_per_s());
  std::fprintf(stderr, "generation: %lld tokens in %.1f ms (%.2f tok/s)\n",
               static_cast<long long>(st.n_gen), st.t_gen_ms, st.tok_per_s());
  if (st.drafted > 0)
    std::fprintf(stderr,
                 "speculation (%s): drafted %lld, accepted %lld, alpha %.3f, tau %.2f tokens/step, "
                 "draft %.1f ms, verify %.1f ms\n",
                 strategy.c_str(), static_cast<long long>(st.drafted),
                 static_cast<long long>(st.accepted), st.alpha(), st.tau(), st.t_draft_ms,
                 st.t_verify_ms);
}

// Every flag of `generate`, with its default.
struct GenerateArgs {
  std::string model_path, prompt, prompt_file, chat_template, strategy_name, system_prompt;
  StrategyOptions strategy_options;
  int n_predict = 128, n_threads = default_thread_count(), n_ctx = 4096;
  SamplingParams sampling;
  std::optional<uint64_t> seed;  // none: a random seed
  bool json = false, chat = false, ignore_eos = false, escape = true, no_escape = false;
  bool conversation = false;
  std::vector<std::string> stop_strings;
};

void add_generate_options(ArgParser& args, GenerateArgs& a) {
  args.option("-m,--model", &a.model_path, "FILE", "model (GGUF)");
  args.option("-p,--prompt", &a.prompt, "TEXT", "prompt text");
  args.option("-f,--file", &a.prompt_file, "FILE", "read the prompt from a file ('-': stdin)");
  args.flag("-e,--escape", &a.escape, "process escapes (\\n, \\t, \\xHH, ...) in -p (the default)");
  args.flag("--no-escape", &a.no_escape, "take -p literally");
  args.option("-n,--n-predict", &a.n_predict, "N",
              "maximum number of tokens to generate; -1 = until end of text or a full context");
  args.option("-c,--ctx-size,--ctx", &a.n_ctx, "N",
              "context size in tokens (prompt + generation); 0 = the model's training context");
  args.option("-t,--threads", &a.n_threads, "N", "threads");
  args.option("-r,--reverse-prompt", &a.stop_strings, "TEXT",
              "stop once the generated text ends with TEXT (may be repeated)");
  add_ignored_gpu_flags(args, true, /*layers=*/false);
  args.option("--temp", &a.sampling.temp, "T", "temperature; 0 = greedy");
  args.option("--top-k", &a.sampling.top_k, "K", "top-k sampling; 0 = off");
  args.option("--top-p", &a.sampling.top_p, "P", "top-p (nucleus) sampling; 1 = off");
  args.option("--min-p", &a.sampling.min_p, "P", "min-p sampling; 0 = off");
  args.option("--seed", &a.seed, "S", "random seed; -1 = a random seed (printed with --json)");
  args.flag("--chat", &a.chat, "wrap the prompt in the model's chat template (one user turn)");
  args.flag("-cnv,--conversation,-i,--interactive", &a.conversation,
            "interactive conversation in the chat template: one user turn per line of stdin");
  args.option("-sys,--system-prompt", &a.system_prompt, "TEXT",
              "system message of the conversation (-cnv) or of --chat");
  args.option(
      "--chat-template", &a.chat_template, "NAME",
      "chat template to use instead of the detected one (llama3, chatml, qwen3, gemma, phi3; a "
      "model without one gets chatml, with a warning)");
  args.flag("--ignore-eos", &a.ignore_eos, "do not stop at end-of-generation tokens");
  args.option("--strategy", &a.strategy_name, "NAME",
              "decoding strategy: " + strategy_list() +
                  " (all but ar, pp and auto need -md; default: auto with -md, ar without; under "
                  "mpirun pipedec with -md, pp without); NAME:G sets the strategy's main number "
                  "as in bench --strategies (sd:3: --draft-max 3, pearl:3: --pearl-window 3)");
  a.strategy_options.add_to(args);
  args.flag("--json", &a.json, "print one JSON object with the text, token ids and timings");
  args.bound("-t", 1, kMaxThreads);
  args.describe_default("-t", "the cores this process may use");
  args.bound("--top-k", 0, 1e9);
}

// The prompt text from -p (escapes processed unless --no-escape) or -f. A
// file is read no further than the text `n_ctx` tokens can cover: what goes
// beyond cannot be a prompt in this context.
std::string read_prompt(const GenerateArgs& a, const Tokenizer& tokenizer, int n_ctx) {
  std::string prompt = a.prompt;
  const size_t per_token = tokenizer.max_token_bytes();
  const size_t max_bytes = (static_cast<size_t>(n_ctx) + 2) * per_token;
  if (!a.prompt_file.empty())
    prompt = read_text_input(a.prompt_file, "-f", max_bytes,
                             "more than a prompt in the context of " + std::to_string(n_ctx) +
                                 " tokens can hold (a token stands for at most " +
                                 std::to_string(per_token) +
                                 " bytes); raise -c/--ctx-size or shorten the prompt");
  else if (a.escape && !a.no_escape)
    prompt = process_escapes(prompt);
  check(!prompt.empty(), a.prompt_file.empty() ? "-p: the prompt is empty" : "-f ",
        a.prompt_file.empty() ? "" : a.prompt_file,
        a.prompt_file.empty() ? "" : ": the file is empty");
  return prompt;
}

// The prompt's tokens, in the chat template with --chat or --chat-template
// (whose end-of-turn text joins the stop strings where the vocabulary spells it
// as text).
// Tokenized no further than `max_tokens`.
std::vector<int32_t> encode_prompt(GenerateArgs& a, const std::string& prompt, const Model& model,
                                   const Tokenizer& tokenizer, size_t max_tokens) {
  std::vector<int32_t> tokens;
  if (a.chat || !a.chat_template.empty()) {
    const ChatTemplate tmpl = ChatTemplate::for_model(model.gguf(), a.chat_template);
    if (!tmpl.fallback_warning().empty())
      std::fprintf(stderr, "warning: %s\n", tmpl.fallback_warning().c_str());
    std::vector<ChatMessage> turns;
    if (!a.system_prompt.empty()) turns.push_back({"system", a.system_prompt});
    turns.push_back({"user", prompt});
    tokens = tmpl.encode(tokenizer, turns, true, max_tokens);
    const std::string end_of_turn = tmpl.end_of_turn_stop(tokenizer);
    if (!end_of_turn.empty()) a.stop_strings.push_back(end_of_turn);
  } else {
    tokens = tokenizer.encode_prefix(prompt, true, false, max_tokens);
  }
  check(!tokens.empty(), "the prompt produced no tokens");
  warn_on_double_bos(tokenizer, tokens);
  return tokens;
}

// Runs the strategy on the prompt, streaming the text (or printing JSON at the end).
// `simulated` (simulate): the cluster's report, for --json; the times are then the cluster's.
void generate_and_print(Strategy& strategy, const GenerateArgs& a, const std::string& prompt,
                        std::vector<int32_t> prompt_tokens, int n_predict,
                        const Tokenizer& tokenizer,
                        const std::function<nlohmann::json()>& simulated = {}) {
  StreamDecoder stream(tokenizer);
  GenerationRequest request;
  request.prompt = std::move(prompt_tokens);
  request.n_predict = n_predict;
  request.sampling = a.sampling;
  StopStrings stop(tokenizer, a.stop_strings);
  request.is_stop = [&](int32_t t) {
    return (!a.ignore_eos && tokenizer.is_end_of_generation(t)) || stop.feed(t);
  };
  if (!a.json) {
    request.on_token = [&](int32_t t) {
      if (tokenizer.is_end_of_generation(t) && !a.ignore_eos) return;
      std::fputs(stream.feed(t).c_str(), stdout);
      std::fflush(stdout);
    };
    std::fputs(prompt.c_str(), stdout);
  }
  const GenerationResult result = strategy.generate(request);
  if (a.json) {
    const nlohmann::json report = simulated ? simulated() : nlohmann::json();
    print_json(strategy.name(), strategy.runs(), result, tokenizer, a.ignore_eos, a.sampling.seed,
               a.n_threads, simulated ? &report : nullptr);
  } else
    print_speed(strategy.name(), stream.flush(), result.stats);
  if (simulated && !a.json && result.stats.n_gen > 0)
    std::fprintf(stderr, "simulated:  %.3f ms per token on the cluster's clock\n",
                 result.stats.t_gen_ms / static_cast<double>(result.stats.n_gen));
}

}  // namespace

namespace {

// What generate and simulate share once the flags are parsed: the model, its
// tokenizer, the context and the prompt's tokens.
struct PreparedRun {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  int n_ctx = 0, n_predict = 0;
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
};

PreparedRun prepare_run(GenerateArgs& a, const ArgParser& args) {
  const bool prompt_given = args.given("-p") || args.given("--prompt");
  check(prompt_given || !a.prompt_file.empty(), "no prompt given (-p TEXT or -f FILE)");
  if (!a.prompt_file.empty()) check_text_input(a.prompt_file, "-f");
  check(a.n_predict >= -1, "-n ", a.n_predict,
        ": the number of tokens to generate must be >= 0, or -1 (until the context is full)");
  a.sampling.seed = a.seed ? *a.seed : std::random_device{}();
  validate_sampling_params(a.sampling);

  PreparedRun run;
  run.model = load_model(a.model_path, a.strategy_options.devices.target_loading());
  run.tokenizer = Tokenizer::from_gguf(run.model->gguf());
  run.n_ctx = resolve_context_size(a.n_ctx, args.given("-c"), {&run.model->config()}, a.model_path);
  run.model->use_context_size(run.n_ctx);
  run.prompt = read_prompt(a, *run.tokenizer, run.n_ctx);
  // Tokenized up to one token past the context: enough to refuse a longer prompt.
  run.prompt_tokens =
      encode_prompt(a, run.prompt, *run.model, *run.tokenizer, static_cast<size_t>(run.n_ctx) + 1);
  run.n_predict =
      resolve_n_predict(a.n_predict, static_cast<int64_t>(run.prompt_tokens.size()), run.n_ctx);
  return run;
}

// simulate's own flags.
struct SimulateArgs {
  int ranks = 0;
  std::string cost_profile = "measured", draft_cost_profile = "measured";
  std::string shape, draft_shape, save_profiles;
  float head_time_scale = 1;
  bool drafters_on_head = false;
};

void add_simulate_options(ArgParser& args, SimulateArgs& s) {
  args.option("--ranks", &s.ranks, "N",
              "ranks of the simulated job, as mpirun -np N: rank 0 the head, the others target "
              "stages (see --stages)");
  args.option("--cost-profile", &s.cost_profile, "SPEC",
              "what the target's forwards cost: measured (time the model here), "
              "roofline:GBPS:TFLOPS[:BYTES_PER_WEIGHT] (of --shape; 2 bytes per weight unless "
              "given) or a JSON file (docs/simulate.md)");
  args.option("--draft-cost-profile", &s.draft_cost_profile, "SPEC",
              "what the drafters' forwards cost, as --cost-profile (of --draft-shape)");
  args.option(
      "--shape", &s.shape, "NAME", "price the target as this model shape (" + [] {
        std::string names;
        for (const std::string& n : sim::model_shape_names())
          names += (names.empty() ? "" : ", ") + n;
        return names;
      }() + "): a measured profile is scaled by weights per layer; default: the model's own");
  args.option("--draft-shape", &s.draft_shape, "NAME", "the same for the drafters");
  args.option("--save-profiles", &s.save_profiles, "PREFIX",
              "write the profiles used to PREFIX-target.json and PREFIX-draft.json (for "
              "--cost-profile FILE in later runs)");
  args.option("--head-time-scale", &s.head_time_scale, "X",
              "the head's own work (sampling, verification, tree bookkeeping) counts X times its "
              "wall time here; 0 leaves it out");
  args.flag("--drafters-on-head", &s.drafters_on_head,
            "pool strategies (cosine, specinfer): run every drafter on the head instead of a "
            "node of its own each");
  args.bound("--ranks", 2, 4096);
  args.bound("--head-time-scale", 0, 1000);
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  GenerateArgs a;
  ArgParser args("generate", "Generate text from a prompt with a GGUF model.");
  add_generate_options(args, a);
  if (!args.parse(argc, argv)) return 0;
  check(!a.model_path.empty(), "no model given (-m FILE)");
  const bool prompt_given = args.given("-p") || args.given("--prompt");
  check(!(prompt_given && !a.prompt_file.empty()), "give either -p or -f, not both");
  if (a.strategy_name.empty()) {
    const bool draft = !a.strategy_options.draft_path.empty();
    // Under mpirun the pipeline's own defaults (the tuned default measures in one process).
    const StrategyRole role =
        mpi::distributed_run()
            ? (draft ? StrategyRole::generate_pipeline_drafted
                     : StrategyRole::generate_pipeline_plain)
            : (draft ? StrategyRole::generate_drafted : StrategyRole::generate_plain);
    a.strategy_name = strategy_for(role).name;
  }
  // An unknown name fails before the draft model loads.
  a.strategy_options.check_strategy(args, a.strategy_name);
  if (a.conversation) {
    check(!prompt_given && a.prompt_file.empty() && !a.json,
          "-cnv reads the user's turns from stdin: give no -p, -f or --json");
    return run_conversation(a.model_path, a.chat_template, a.system_prompt, a.strategy_name,
                            a.strategy_options, a.n_threads, a.n_ctx, args.given("-c"), a.n_predict,
                            a.sampling, a.seed, a.stop_strings);
  }
  PreparedRun run = prepare_run(a, args);
  StrategyResources resources;
  resources.init(run.model, a.strategy_options, a.n_threads);
  auto strategy =
      make_strategy(resources.config_for(a.strategy_name, a.strategy_options, run.n_ctx));
  for (const std::string& note : strategy->notes()) std::fprintf(stderr, "%s\n", note.c_str());
  generate_and_print(*strategy, a, run.prompt, std::move(run.prompt_tokens), run.n_predict,
                     *run.tokenizer);
  return 0;
}

int cmd_simulate(int argc, char** argv) {
  GenerateArgs a;
  SimulateArgs s;
  ArgParser args("simulate",
                 "Run a strategy's real code against a simulated cluster: the tokens are the "
                 "real ones, the time is a virtual clock's (a pipeline of target stages and "
                 "links priced by cost profiles; docs/simulate.md). Takes generate's flags and "
                 "the MPI runtime's (--stages, --layer-split, --head-layers, --link-latency-us, "
                 "--link-gbps), which here shape the simulated job, not an mpirun one.");
  add_generate_options(args, a);
  add_simulate_options(args, s);
  if (!args.parse(argc, argv)) return 0;
  check(!mpi::launched_by_mpirun(), "simulate runs in one process, not under mpirun");
  check(!a.model_path.empty(), "no model given (-m FILE)");
  check(args.given("--ranks"), "give the simulated job's size with --ranks N");
  check(!a.conversation, "simulate runs one prompt: -cnv is for generate");
  const bool prompt_given = args.given("-p") || args.given("--prompt");
  check(!(prompt_given && !a.prompt_file.empty()), "give either -p or -f, not both");
  StrategyOptions& options = a.strategy_options;
  if (a.strategy_name.empty())
    a.strategy_name =
        strategy_for(options.draft_path.empty() ? StrategyRole::generate_pipeline_plain
                                                : StrategyRole::generate_pipeline_drafted)
            .name;
  const StrategySpec spec = options.check_strategy(args, a.strategy_name);
  const std::string& refusal = strategy_info(spec.name).simulation_refusal;
  check(refusal.empty(), "simulate: ", refusal);
  const int stages = options.stages == 0 ? s.ranks - 1 : options.stages;
  check(stages >= 1 && stages <= s.ranks - 1, "--stages ", stages, ": a job of ", s.ranks,
        " ranks has 1..", s.ranks - 1, " target stages (rank 0 is the head)");

  PreparedRun run = prepare_run(a, args);
  // The pipeline flags shape the simulated job; the resources are this process's.
  StrategyOptions local = options;
  local.stages = 0;
  local.layer_split.clear();
  local.head_layers = 0;
  local.link_latency_us = local.link_gbps = 0;
  StrategyResources resources;
  resources.init(run.model, local, a.n_threads);
  StrategyConfig config = resources.config_for(a.strategy_name, local, run.n_ctx);

  sim::ClusterSpec cluster_spec;
  const sim::ModelShape target_shape =
      s.shape.empty() ? sim::shape_of(run.model->config()) : sim::model_shape(s.shape);
  std::fprintf(stderr, "simulate: pricing the target's forwards (%s)\n", s.cost_profile.c_str());
  cluster_spec.target =
      sim::resolve_profile(s.cost_profile, *run.model, *resources.target_worker, target_shape);
  std::shared_ptr<const Model> drafter =
      resources.draft ? resources.draft
                      : (resources.drafters.empty() ? nullptr : resources.drafters.front());
  if (drafter) {
    const sim::ModelShape draft_shape =
        s.draft_shape.empty() ? sim::shape_of(drafter->config()) : sim::model_shape(s.draft_shape);
    Worker& worker = resources.draft_worker ? *resources.draft_worker : *resources.target_worker;
    std::fprintf(stderr, "simulate: pricing the drafter's forwards (%s)\n",
                 s.draft_cost_profile.c_str());
    cluster_spec.draft = sim::resolve_profile(s.draft_cost_profile, *drafter, worker, draft_shape);
  }
  if (!s.save_profiles.empty()) {
    cluster_spec.target.save(s.save_profiles + "-target.json");
    if (drafter) cluster_spec.draft.save(s.save_profiles + "-draft.json");
  }
  sim::PipelineLayout& layout = cluster_spec.pipeline;
  layout.head_layers = options.head_layers;
  layout.link_latency_us = options.link_latency_us;
  layout.link_gbps = options.link_gbps;
  // A profile of the model itself splits its layers as the MPI runtime does; another shape
  // (every layer alike) by the profile's costs.
  const bool own_layers = cluster_spec.target.n_layer == run.model->config().n_layer;
  layout.layers_per_stage =
      own_layers ? mpi::split_layers(*run.model, stages, options.layer_split, options.head_layers)
                 : sim::balanced_split(cluster_spec.target, stages, options.layer_split,
                                       options.head_layers);
  cluster_spec.head_time_scale = s.head_time_scale;
  cluster_spec.drafter_nodes = !s.drafters_on_head;
  sim::SimCluster cluster(cluster_spec);
  cluster.attach(config);
  auto strategy = make_strategy(config);
  for (const std::string& note : strategy->notes()) std::fprintf(stderr, "%s\n", note.c_str());
  std::fprintf(stderr, "simulated: %s\n", cluster.pipeline().describe().c_str());
  if (drafter) std::fprintf(stderr, "simulated: draft cost: %s\n", cluster_spec.draft.name.c_str());

  const auto report = [&]() -> nlohmann::json {
    nlohmann::json per_stage = nlohmann::json::array();
    for (const sim::SimStageReport& st : cluster.pipeline().stages())
      per_stage.push_back({{"rank", st.rank},
                           {"layers", {st.layer_first, st.layer_last}},
                           {"forwards", st.forwards},
                           {"skipped", st.skipped},
                           {"abandoned", st.abandoned},
                           {"busy_ms", st.busy_ms}});
    return {{"ranks", s.ranks},
            {"pipeline", cluster.pipeline().describe()},
            {"link_latency_us", layout.link_latency_us},
            {"link_gbps", layout.link_gbps},
            {"head_time_scale", s.head_time_scale},
            {"target_cost", cluster_spec.target.name},
            {"draft_cost", drafter ? cluster_spec.draft.name : ""},
            {"stages", per_stage}};
  };
  ScopedThreadClock virtual_time(&cluster.clock());
  generate_and_print(*strategy, a, run.prompt, std::move(run.prompt_tokens), run.n_predict,
                     *run.tokenizer, report);
  return 0;
}

}  // namespace parspec
