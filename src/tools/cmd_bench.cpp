// parspec bench: runs decoding strategies on the same prompts, models and
// threads, interleaved so that a noisy machine slows them all alike, checks
// that greedy outputs equal ar's, and reports speed and acceptance per
// strategy and prompt set (terminal table, JSON, Markdown, SVG). The runs and
// reports are the bench library's (src/bench); this file reads the command
// line, shows progress and writes the outputs.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "bench/environment.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "bench/verdict.h"
#include "core/error.h"
#include "core/worker.h"
#include "decode/registry.h"
#include "model/model.h"
#include "mpi/pipeline.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/device_options.h"
#include "tools/llama_flags.h"
#include "tools/model_loading.h"
#include "tools/prompt_input.h"
#include "tools/strategy_options.h"

namespace parspec {

namespace {

using ojson = nlohmann::ordered_json;

struct BenchArgs {
  std::string model_path, strategies_text = "ar,sd,tree,dyntree",
                          prompts_text = "code,math,prose,config,chat", json_out, md_out, svg_out,
                          chat_template;
  StrategyOptions strategy_options;
  int n_predict = 128, n_threads = default_thread_count(), n_ctx = 4096, repeat = 1,
      max_prompts = 0, warmup = 16;
  SamplingParams sampling;
  uint64_t seed = 42;
  bool ignore_eos = false;
  bool verdict = false;
  bool ctx_given = false;  // -c given: 0 means the model's training context

  BenchArgs() { sampling.temp = 0.0f; }
};

void add_run_options(ArgParser& args, BenchArgs& a) {
  args.option("-m,--model", &a.model_path, "FILE",
              "target model (GGUF); default: the bundled models/target.gguf");
  args.option("--strategies", &a.strategies_text, "LIST",
              "comma-separated strategies (" + strategy_list() +
                  "); NAME:G sets γ of sd or pearl's window, e.g. sd:2,sd:3; a tree shape is "
                  "NAME:d<depth>c<children>w<width>, e.g. tree:d2c2,dyntree:d4c2w3 (ar is always "
                  "run: speedups are measured against it)");
  args.option(
      "--prompts", &a.prompts_text, "LIST",
      "comma-separated prompt sets: names in bench/prompts (code, math, prose, config, chat) or "
      "paths to .jsonl files with one {\"prompt\": ...} per line");
  args.option("-n,--n-predict", &a.n_predict, "N", "tokens to generate per prompt (at most)");
  args.option("--repeat", &a.repeat, "R", "passes over all prompts");
  args.option("--max-prompts", &a.max_prompts, "K", "use the first K prompts of each set; 0 = all");
  args.option("-c,--ctx-size", &a.n_ctx, "N", "context size in tokens (prompt + generation)");
  args.option("-t,--threads", &a.n_threads, "N", "threads of the target model");
  args.option("--temp", &a.sampling.temp, "T",
              "temperature; 0 = greedy (outputs checked against ar)");
  args.option("--top-k", &a.sampling.top_k, "K", "top-k sampling; 0 = off");
  args.option("--top-p", &a.sampling.top_p, "P", "top-p (nucleus) sampling; 1 = off");
  args.option("--min-p", &a.sampling.min_p, "P", "min-p sampling; 0 = off");
  args.option("--seed", &a.seed, "S",
              "sampling seed; the k-th prompt run (counted over all passes) uses S + k");
  args.option(
      "--chat-template", &a.chat_template, "NAME",
      "template for the chat set instead of the detected one (llama3, chatml, qwen3, gemma, phi3)");
  args.flag("--ignore-eos", &a.ignore_eos, "do not stop at end-of-generation tokens");
  args.option("--warmup", &a.warmup, "N",
              "untimed warm-up: each strategy generates N tokens on the first prompt; 0 = none");
}

// Parses the command line into `a`; false after --help.
bool parse_args(int argc, char** argv, BenchArgs& a) {
  ArgParser args("bench",
                 "Compare decoding strategies on the same prompts, models and threads: tokens/s, "
                 "speedup over ar, tau, alpha, time per step, forwards per model. Strategies run "
                 "interleaved, prompt by prompt; greedy outputs are checked against ar's. Without "
                 "-m/-md the bundled models/target.gguf and models/draft.gguf are used.");
  add_run_options(args, a);
  args.option("--json", &a.json_out, "FILE", "write the results as JSON ('-': stdout, no table)");
  args.option("--md", &a.md_out, "FILE", "write the results as a Markdown table");
  args.option("--svg", &a.svg_out, "FILE", "write a bar chart of the speedups (SVG)");
  args.flag("--verdict", &a.verdict,
            "end with a short verdict: the fastest strategy, its speedup and tau, why the slower "
            "ones lose here; exit status 1 when a greedy output differs from ar's");
  a.strategy_options.add_to(args);
  add_ignored_gpu_flags(args, true, /*layers=*/false);
  args.bound("-t", 1, kMaxThreads);
  args.describe_default("-t", "the cores this process may use");
  args.bound("-c", 1, 1 << 24);
  args.bound("--top-k", 0, 1e9);
  if (!args.parse(argc, argv)) return false;
  a.ctx_given = args.given("-c");
  std::vector<std::string> names;
  for (const std::string& label : split_list(a.strategies_text))
    names.push_back(parse_strategy_entry(label).first);
  a.strategy_options.check_given(args, names);
  check(a.n_predict >= 1, "-n must be at least 1");
  check(a.n_threads >= 1, "-t must be at least 1");
  check_writable(a.json_out, "--json");
  check_writable(a.md_out, "--md");
  check_writable(a.svg_out, "--svg");
  check(a.repeat >= 1, "--repeat must be at least 1");
  check(a.max_prompts >= 0, "--max-prompts must not be negative");
  check(a.warmup >= 0, "--warmup must not be negative");
  validate_sampling_params(a.sampling);
  return true;
}

// The strategy labels, ar first unless given elsewhere.
std::vector<std::string> strategy_labels(const std::string& text) {
  std::vector<std::string> labels = split_list(text);
  for (const std::string& s : labels) parse_strategy_entry(s);
  if (std::find(labels.begin(), labels.end(), reference_strategy_name()) == labels.end())
    labels.insert(labels.begin(), reference_strategy_name());
  return labels;
}

// The bundled zoo unless models are given.
void find_models(BenchArgs& a, bool needs_draft) {
  if (a.model_path.empty()) {
    a.model_path = find_bundled("models/target.gguf");
    check(!a.model_path.empty(),
          "no target model given and the bundled models/target.gguf was not found (looked from "
          "the working directory and the parspec executable's directory); give -m TARGET -md "
          "DRAFT, or build the model zoo (models/README.md)");
  }
  if (needs_draft && a.strategy_options.draft_path.empty()) {
    a.strategy_options.draft_path = find_bundled("models/draft.gguf");
    check(!a.strategy_options.draft_path.empty(),
          "no draft model given and the bundled models/draft.gguf was not found; give -md DRAFT, "
          "build the model zoo (models/README.md), or run only --strategies ar");
  }
}

// Prompt sets, loaded before the models so that a typo fails fast.
std::vector<TokenizedSet> load_sets(const BenchArgs& a) {
  const std::string prompts_dir = find_bundled("bench/prompts");
  std::vector<TokenizedSet> sets;
  for (const std::string& spec : split_list(a.prompts_text)) {
    PromptSet set = load_prompt_set(spec, prompts_dir.empty() ? "bench/prompts" : prompts_dir);
    for (const TokenizedSet& other : sets)
      check(other.set.name != set.name, "two prompt sets are named '", set.name, "' (",
            other.set.path, " and ", set.path, ")");
    if (a.max_prompts > 0 && set.prompts.size() > static_cast<size_t>(a.max_prompts))
      set.prompts.resize(a.max_prompts);
    sets.push_back({std::move(set), {}});
  }
  check(!sets.empty(), "no prompt sets given (--prompts)");
  return sets;
}

// The strategies of the run, with what they measured on stderr.
void add_strategies(BenchPlan& plan, const BenchArgs& a, const StrategyResources& resources) {
  bool any_lossy = false;
  for (const std::string& label : plan.labels) {
    const StrategySpec spec = parse_strategy_spec(label);
    StrategyConfig config = resources.config_for(spec.name, a.strategy_options, a.n_ctx);
    apply_strategy_spec(spec, config);
    any_lossy |= config.lossy_typical;
    plan.strategies.push_back(make_strategy(config));
    for (const std::string& note : plan.strategies.back()->notes())
      std::fprintf(stderr, "%s\n", note.c_str());
  }
  plan.reference = std::find(plan.labels.begin(), plan.labels.end(), reference_strategy_name()) -
                   plan.labels.begin();
  plan.check_exact = a.sampling.greedy() && !any_lossy;
}

// Running totals per strategy for the progress line on a terminal.
struct Progress {
  bool enabled = false;
  int total = 0, repeats = 1;
  std::vector<std::string> labels;
  std::map<std::string, std::pair<int64_t, double>> speed;  // n_gen, t_gen_ms

  void show(int done, const std::string& set, int repeat, const std::string& running) const {
    if (!enabled) return;
    std::string line =
        "bench: prompt " + std::to_string(done) + "/" + std::to_string(total) + " (" + set;
    if (repeats > 1)
      line += ", repeat " + std::to_string(repeat + 1) + "/" + std::to_string(repeats);
    line += ") " + running + " |";
    for (const std::string& s : labels) {
      const auto found = speed.find(s);
      if (found == speed.end()) continue;
      const auto [n, ms] = found->second;
      char buf[64];
      std::snprintf(buf, sizeof buf, " %s %.1f", s.c_str(), ms > 0 ? n * 1000.0 / ms : 0.0);
      line += buf;
    }
    line += " tok/s";
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
  }
  void clear() const {
    if (enabled) std::fprintf(stderr, "\r\033[K");
  }
};

BenchEvents progress_events(Progress& progress) {
  BenchEvents events;
  events.on_run = [&](int done, const std::string& set, int repeat, const std::string& label) {
    progress.show(done, set, repeat, label);
  };
  events.on_result = [&](const std::string& label, const GenerationStats& st) {
    auto& [n, ms] = progress.speed[label];
    n += st.n_gen;
    ms += st.t_gen_ms;
  };
  events.on_mismatch = [&](const Mismatch& m) {
    progress.clear();
    std::fprintf(stderr,
                 "bench: WARNING: MISMATCH: '%s' output differs from ar's on prompt %d of set "
                 "'%s' (pass %d) at generated token %zu\n",
                 m.strategy.c_str(), m.prompt_index + 1, m.prompt_set.c_str(), m.repeat + 1,
                 m.position);
  };
  events.on_error = [&] { progress.clear(); };
  return events;
}

void fill_config(ojson& config, const BenchArgs& a, const Model& target,
                 const StrategyResources& resources, const std::vector<std::string>& labels,
                 const std::vector<TokenizedSet>& sets, const std::string& template_used) {
  config["date"] = utc_now();
  config["target"] = describe_model(a.model_path, target);
  config["draft"] = resources.draft
                        ? describe_model(a.strategy_options.draft_path, *resources.draft)
                        : ojson(nullptr);
  config["strategies"] = labels;
  ojson set_info = ojson::array();
  for (const TokenizedSet& ts : sets)
    set_info.push_back({{"name", ts.set.name},
                        {"path", ts.set.path},
                        {"prompts", ts.prompts.size()},
                        {"chat", ts.set.chat}});
  config["prompt_sets"] = set_info;
  config["chat_template"] = template_used.empty() ? ojson(nullptr) : ojson(template_used);
  config["n"] = a.n_predict;
  config["temp"] = a.sampling.temp;
  config["top_k"] = a.sampling.top_k;
  config["top_p"] = a.sampling.top_p;
  config["min_p"] = a.sampling.min_p;
  config["seed"] = a.seed;
  config["repeat"] = a.repeat;
  config["max_prompts"] = a.max_prompts;
  config["ctx_size"] = a.n_ctx;
  config["threads"] = a.n_threads;
  config["threads_draft"] =
      resources.draft_worker ? resources.draft_worker->n_threads() : a.n_threads;
  config["ignore_eos"] = a.ignore_eos;
  config["warmup"] = a.warmup;
  config["strategy_options"] = a.strategy_options.to_json();
  config["target_device"] = device_label(resources.devices.target_device);
  config["draft_device"] = device_label(resources.devices.draft_device);
  if (const mpi::Pipeline* pipeline = mpi::running_pipeline()) {
    config["distributed"] = pipeline->describe();
    config["link_emulated"] = pipeline->options().link.active();
  }
  add_git_info(config);
}

// Whether a model of the run was on a GPU (the reports then name the devices).
bool resources_on_gpu(const ojson& config) {
  for (const char* key : {"target_device", "draft_device"})
    if (config.contains(key) && config[key].get<std::string>() != "cpu") return true;
  return false;
}

void write_reports(const BenchArgs& a, const BenchReport& report,
                   const std::vector<TokenizedSet>& sets, bool has_draft) {
  const std::string json_text =
      report_json(report).dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
  if (a.json_out == "-") {
    std::fputs(json_text.c_str(), stdout);
  } else {
    std::printf("target: %s", a.model_path.c_str());
    if (has_draft) std::printf("   draft: %s", a.strategy_options.draft_path.c_str());
    std::printf("\nn = %d, temp = %g, repeat = %d, threads = %d", a.n_predict, a.sampling.temp,
                a.repeat, a.n_threads);
    if (a.strategy_options.threads_draft > 0)
      std::printf(" (draft %d)", report.machine.threads_draft);
    std::printf(", prompts:");
    for (const TokenizedSet& ts : sets)
      std::printf(" %s %zu", ts.set.name.c_str(), ts.prompts.size());
    if (resources_on_gpu(report.config))
      std::printf("\ndevices: target %s, draft %s",
                  report.config["target_device"].get<std::string>().c_str(),
                  report.config["draft_device"].get<std::string>().c_str());
    if (report.config.contains("distributed"))
      std::printf("\ndistributed: %s", report.config["distributed"].get<std::string>().c_str());
    std::printf("\n\n%s", report_table(report).c_str());
    for (const auto& [label, chosen] : report.config["chosen"].items())
      if (chosen.get<std::string>() != label)
        std::printf("%s ran %s\n", label.c_str(), chosen.get<std::string>().c_str());
    std::fflush(stdout);
    if (!a.json_out.empty()) write_output(a.json_out, json_text);
  }
  if (!a.md_out.empty()) {
    std::string md = "Command: `" + report.config["command"].get<std::string>() + "`\n\n";
    md += "Machine: " +
          (report.machine.cpu_model.empty() ? "unknown CPU" : report.machine.cpu_model) + ", " +
          std::to_string(report.machine.cores) + " cores, " + std::to_string(a.n_threads) +
          " threads\n\n";
    if (resources_on_gpu(report.config))
      md += "Devices: target " + report.config["target_device"].get<std::string>() + ", draft " +
            report.config["draft_device"].get<std::string>() + "\n\n";
    if (report.config.contains("distributed"))
      md += "Distributed: " + report.config["distributed"].get<std::string>() + "\n\n";
    write_output(a.md_out, md + report_markdown(report));
  }
  if (!a.svg_out.empty()) write_output(a.svg_out, report_svg(report));
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  BenchArgs a;
  if (!parse_args(argc, argv, a)) return 0;
  BenchPlan plan;
  plan.labels = strategy_labels(a.strategies_text);
  find_models(a, plan.labels.size() > 1);
  std::vector<TokenizedSet> sets = load_sets(a);

  std::shared_ptr<const Model> target =
      load_model(a.model_path, a.strategy_options.devices.target_loading());
  auto tokenizer = Tokenizer::from_gguf(target->gguf());
  a.n_ctx = resolve_context_size(a.n_ctx, a.ctx_given, {&target->config()}, a.model_path);
  target->use_context_size(a.n_ctx);
  std::vector<std::string> notes;
  const std::string template_used = tokenize_sets(sets, *tokenizer, target->gguf(), a.chat_template,
                                                  a.n_predict, a.n_ctx, &notes);
  for (const std::string& note : notes) std::fprintf(stderr, "%s\n", note.c_str());

  StrategyResources resources;
  resources.init(target, a.strategy_options, a.n_threads);
  add_strategies(plan, a, resources);
  plan.n_predict = a.n_predict;
  plan.repeat = a.repeat;
  plan.warmup = a.warmup;
  plan.seed = a.seed;
  plan.sampling = a.sampling;
  if (!a.ignore_eos) plan.is_stop = [&](int32_t t) { return tokenizer->is_end_of_generation(t); };

  Progress progress;
  progress.enabled = isatty(STDERR_FILENO) && a.json_out != "-";
  for (const TokenizedSet& ts : sets) progress.total += static_cast<int>(ts.prompts.size());
  progress.total *= a.repeat;
  progress.repeats = a.repeat;
  progress.labels = plan.labels;
  const BenchOutcome outcome = run_bench(plan, sets, progress_events(progress));
  progress.clear();

  std::vector<std::string> set_names;
  for (const TokenizedSet& ts : sets) set_names.push_back(ts.set.name);
  BenchReport report;
  report.machine = read_machine_info();
  report.machine.threads = a.n_threads;
  report.machine.threads_draft =
      resources.draft_worker ? resources.draft_worker->n_threads() : a.n_threads;
  report.results = aggregate_runs(outcome.runs, plan.labels, set_names);
  report.mismatches = outcome.mismatches;
  report.exactness_checked = plan.check_exact;
  report.config["command"] = command_line(argc, argv);
  fill_config(report.config, a, *target, resources, plan.labels, sets, template_used);
  // What each label ran: auto's choice ("sd:2"), ar for a ppd tree without
  // guesses, the label itself otherwise.
  report.config["chosen"] = ojson::object();
  for (size_t i = 0; i < plan.labels.size(); ++i) {
    const Strategy& s = *plan.strategies[i];
    report.config["chosen"][plan.labels[i]] = s.runs() != s.name() ? s.runs() : plan.labels[i];
  }
  write_reports(a, report, sets, resources.draft != nullptr);
  if (a.verdict)
    std::fprintf(a.json_out == "-" ? stderr : stdout, "\n%s", bench_verdict(report).c_str());

  if (!outcome.mismatches.empty()) {
    int checked = 0;
    for (const BenchRun& run : outcome.runs) checked += run.checked;
    std::fprintf(stderr,
                 "bench: WARNING: %zu of %d greedy runs differ from ar's output: a strategy is "
                 "not lossless here (details under \"mismatches\" in the JSON)\n",
                 outcome.mismatches.size(), checked);
  }
  return a.verdict && !outcome.mismatches.empty() ? 1 : 0;
}

}  // namespace parspec
