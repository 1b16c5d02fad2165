// parspec bench: runs decoding strategies on the same prompts, models and
// threads, interleaved so that a noisy machine slows them all alike, checks
// that greedy outputs equal ar's, and reports speed and acceptance per
// strategy and prompt set (terminal table, JSON, Markdown, SVG).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/worker.h"
#include "model/model.h"
#include "spec/bench_report.h"
#include "spec/strategy.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/strategy_options.h"

namespace parspec {

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    item = item.substr(b, e - b + 1);
    if (std::find(items.begin(), items.end(), item) == items.end()) items.push_back(item);
  }
  return items;
}

// The bundled models and prompt sets live in the source tree; look for them
// from the working directory first, then from the executable's directory
// upwards (a build directory inside the checkout).
std::vector<fs::path> search_roots() {
  std::vector<fs::path> roots = {fs::current_path()};
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty() && roots.size() < 6;
         dir = dir.parent_path()) {
      roots.push_back(dir);
      if (dir == dir.root_path()) break;
    }
  return roots;
}

std::string find_bundled(const std::string& relative) {
  for (const fs::path& root : search_roots())
    if (fs::exists(root / relative)) return (root / relative).string();
  return "";
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_./=,:+") == std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string run_command(const std::string& command) {
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, pipe)) out += buf;
    pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Commit of the checkout the executable was built in, if it is one.
void add_git_info(ojson& config) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return;
  const std::string git = "git -C " + shell_quote(exe.parent_path().string()) + " ";
  const std::string commit = run_command(git + "rev-parse HEAD 2>/dev/null");
  if (commit.size() != 40) return;
  config["git_commit"] = commit;
  config["git_dirty"] =
      !run_command(git + "status --porcelain --untracked-files=no 2>/dev/null").empty();
}

ojson describe_model(const std::string& path, const Model& model) {
  const ModelConfig& c = model.config();
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  return {{"path", path},
          {"name", c.name},
          {"arch", c.arch},
          {"n_layer", c.n_layer},
          {"n_embd", c.n_embd},
          {"n_vocab", c.n_vocab},
          {"file_bytes", ec ? 0 : static_cast<int64_t>(bytes)}};
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_output(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  check(out.good(), "cannot write '", path, "'");
  out << text;
  out.close();
  check(out.good(), "error while writing '", path, "'");
}

struct TokenizedSet {
  PromptSet set;
  std::vector<std::vector<int32_t>> prompts;
};

// Running totals per strategy for the progress line.
struct Progress {
  bool enabled = false;
  int total = 0;
  std::map<std::string, std::pair<int64_t, double>> speed;  // n_gen, t_gen_ms

  void show(int done, const std::string& set, int repeat, int repeats,
            const std::vector<std::string>& strategies, const std::string& running) {
    if (!enabled) return;
    std::string line =
        "bench: prompt " + std::to_string(done) + "/" + std::to_string(total) + " (" + set;
    if (repeats > 1)
      line += ", repeat " + std::to_string(repeat + 1) + "/" + std::to_string(repeats);
    line += ") " + running + " |";
    for (const std::string& s : strategies) {
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

}  // namespace

int cmd_bench(int argc, char** argv) {
  std::string model_path, strategies_text = "ar,sd,tree,dyntree",
                          prompts_text = "code,math,prose,config,chat", json_out, md_out, svg_out,
                          chat_template;
  StrategyOptions strategy_options;
  int n_predict = 128, n_threads = default_thread_count(), n_ctx = 4096, repeat = 1,
      max_prompts = 0, warmup = 16;
  SamplingParams sampling;
  sampling.temp = 0.0f;
  uint64_t seed = 42;
  bool ignore_eos = false;

  ArgParser args("bench",
                 "Compare decoding strategies on the same prompts, models and threads: tokens/s, "
                 "speedup over ar, tau, alpha, time per step, forwards per model. Strategies run "
                 "interleaved, prompt by prompt; greedy outputs are checked against ar's. Without "
                 "-m/-md the bundled models/target.gguf and models/draft.gguf are used.");
  args.option("-m,--model", &model_path, "FILE",
              "target model (GGUF); default: the bundled models/target.gguf");
  args.option("--strategies", &strategies_text, "LIST",
              "comma-separated strategies; NAME:G sets γ of sd or pearl, e.g. sd:2,sd:3 (ar is "
              "always run: speedups are measured against it)");
  args.option(
      "--prompts", &prompts_text, "LIST",
      "comma-separated prompt sets: names in bench/prompts (code, math, prose, config, chat) or "
      "paths to .jsonl files with one {\"prompt\": ...} per line");
  args.option("-n,--n-predict", &n_predict, "N", "tokens to generate per prompt (at most)");
  args.option("--repeat", &repeat, "R", "passes over all prompts");
  args.option("--max-prompts", &max_prompts, "K", "use the first K prompts of each set; 0 = all");
  args.option("-c,--ctx-size", &n_ctx, "N", "context size in tokens (prompt + generation)");
  args.option("-t,--threads", &n_threads, "N", "threads of the target model");
  args.option("--temp", &sampling.temp, "T",
              "temperature; 0 = greedy (outputs checked against ar)");
  args.option("--top-k", &sampling.top_k, "K", "top-k sampling; 0 = off");
  args.option("--top-p", &sampling.top_p, "P", "top-p (nucleus) sampling; 1 = off");
  args.option("--min-p", &sampling.min_p, "P", "min-p sampling; 0 = off");
  args.option("--seed", &seed, "S",
              "sampling seed; the k-th prompt run (counted over all passes) uses S + k");
  args.option("--chat-template", &chat_template, "NAME",
              "template for the chat set instead of the detected one (llama3, chatml)");
  args.flag("--ignore-eos", &ignore_eos, "do not stop at end-of-generation tokens");
  args.option("--warmup", &warmup, "N",
              "untimed warm-up: each strategy generates N tokens on the first prompt; 0 = none");
  args.option("--json", &json_out, "FILE", "write the results as JSON ('-': stdout, no table)");
  args.option("--md", &md_out, "FILE", "write the results as a Markdown table");
  args.option("--svg", &svg_out, "FILE", "write a bar chart of the speedups (SVG)");
  strategy_options.add_to(args);
  if (!args.parse(argc, argv)) return 0;

  check(n_predict >= 1, "-n must be at least 1");
  check(n_threads >= 1, "-t must be at least 1");
  check(repeat >= 1, "--repeat must be at least 1");
  check(max_prompts >= 0, "--max-prompts must not be negative");
  check(warmup >= 0, "--warmup must not be negative");
  validate_sampling_params(sampling);

  // An entry is NAME or NAME:G, G being γ for sd (--draft-max) and the window
  // for pearl, so that several γ can be compared in one run (sd:2,sd:3,...).
  std::vector<std::string> strategies = split_list(strategies_text);
  const auto& known = strategy_names();
  auto split_variant = [&](const std::string& entry) {
    const size_t colon = entry.find(':');
    const std::string base = entry.substr(0, colon);
    int gamma = 0;
    if (colon != std::string::npos) {
      const std::string value = entry.substr(colon + 1);
      const bool digits = !value.empty() && value.size() < 4 &&
                          value.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || (gamma = std::stoi(value)) < 1 || (base != "sd" && base != "pearl"))
        fail("invalid strategy '", entry,
             "' in --strategies (NAME:G with G >= 1 is for sd and pearl)");
    }
    return std::pair<std::string, int>(base, gamma);
  };
  for (const std::string& s : strategies) {
    if (std::find(known.begin(), known.end(), split_variant(s).first) != known.end()) continue;
    std::string known_text;
    for (const auto& k : known) known_text += (known_text.empty() ? "" : ", ") + k;
    fail("unknown strategy '", s, "' in --strategies (known: ", known_text, ")");
  }
  if (std::find(strategies.begin(), strategies.end(), kReferenceStrategy) == strategies.end())
    strategies.insert(strategies.begin(), std::string(kReferenceStrategy));
  const size_t ar_index =
      std::find(strategies.begin(), strategies.end(), kReferenceStrategy) - strategies.begin();
  const bool needs_draft = strategies.size() > 1;

  // Models: the bundled zoo unless given.
  if (model_path.empty()) {
    model_path = find_bundled("models/target.gguf");
    check(!model_path.empty(),
          "no target model given and the bundled models/target.gguf was not found (looked from "
          "the working directory and the parspec executable's directory); give -m TARGET -md "
          "DRAFT, or build the model zoo (models/README.md)");
  }
  if (needs_draft && strategy_options.draft_path.empty()) {
    strategy_options.draft_path = find_bundled("models/draft.gguf");
    check(!strategy_options.draft_path.empty(),
          "no draft model given and the bundled models/draft.gguf was not found; give -md DRAFT, "
          "build the model zoo (models/README.md), or run only --strategies ar");
  }

  // Prompt sets, loaded before the models so that a typo fails fast.
  const std::string prompts_dir = find_bundled("bench/prompts");
  std::vector<TokenizedSet> sets;
  for (const std::string& spec : split_list(prompts_text)) {
    PromptSet set = load_prompt_set(spec, prompts_dir.empty() ? "bench/prompts" : prompts_dir);
    for (const TokenizedSet& other : sets)
      check(other.set.name != set.name, "two prompt sets are named '", set.name, "' (",
            other.set.path, " and ", set.path, ")");
    if (max_prompts > 0 && set.prompts.size() > static_cast<size_t>(max_prompts))
      set.prompts.resize(max_prompts);
    sets.push_back({std::move(set), {}});
  }
  check(!sets.empty(), "no prompt sets given (--prompts)");

  std::shared_ptr<const Model> target = Model::load(model_path);
  auto tokenizer = Tokenizer::from_gguf(target->gguf());
  std::string template_used;
  for (TokenizedSet& ts : sets) {
    std::optional<ChatTemplate> tmpl;
    if (ts.set.chat) {
      try {
        tmpl = ChatTemplate::for_model(target->gguf(), chat_template);
        template_used = std::string(tmpl->name());
      } catch (const Error& e) {
        if (!chat_template.empty()) throw;
        std::fprintf(stderr, "bench: note: set '%s' uses the raw prompt text (%s)\n",
                     ts.set.name.c_str(), e.what());
      }
    }
    for (size_t i = 0; i < ts.set.prompts.size(); ++i) {
      const std::string& text = ts.set.prompts[i];
      std::vector<int32_t> tokens;
      if (tmpl) {
        const ChatMessage turn{"user", text};
        tokens = tmpl->encode(*tokenizer, std::span(&turn, 1), true);
      } else {
        tokens = tokenizer->encode(text, true, false);
      }
      check(!tokens.empty(), ts.set.path, ": prompt ", i + 1, " produced no tokens");
      check(static_cast<int>(tokens.size()) + n_predict <= n_ctx, ts.set.path, ": prompt ", i + 1,
            " has ", tokens.size(), " tokens; with -n ", n_predict,
            " that exceeds the context size ", n_ctx, " (raise -c or lower -n)");
      ts.prompts.push_back(std::move(tokens));
    }
  }

  StrategyResources resources;
  resources.init(target, strategy_options, n_threads);
  std::vector<std::unique_ptr<Strategy>> runners;
  for (const std::string& entry : strategies) {
    const auto [name, gamma] = split_variant(entry);
    StrategyConfig config = resources.config_for(name, strategy_options, n_ctx);
    if (gamma > 0) {
      config.draft_max = gamma;
      config.pearl_window = gamma;
    }
    runners.push_back(make_strategy(config));
  }

  const bool json_to_stdout = json_out == "-";
  const bool check_exact = sampling.greedy() && !strategy_options.lossy_typical;
  const auto make_request = [&](const std::vector<int32_t>& prompt, int n, uint64_t run_seed) {
    GenerationRequest request;
    request.prompt = prompt;
    request.n_predict = n;
    request.sampling = sampling;
    request.sampling.seed = run_seed;
    if (!ignore_eos)
      request.is_stop = [&](int32_t t) { return tokenizer->is_end_of_generation(t); };
    return request;
  };

  if (warmup > 0) {
    const GenerationRequest request =
        make_request(sets.front().prompts.front(), std::min(warmup, n_predict), seed);
    for (auto& runner : runners) runner->generate(request);
  }

  Progress progress;
  progress.enabled = isatty(STDERR_FILENO) && !json_to_stdout;
  for (const TokenizedSet& ts : sets) progress.total += static_cast<int>(ts.prompts.size());
  progress.total *= repeat;

  std::vector<BenchRun> runs;
  std::vector<Mismatch> mismatches;
  int done = 0;
  for (int r = 0; r < repeat; ++r) {
    for (const TokenizedSet& ts : sets) {
      for (size_t p = 0; p < ts.prompts.size(); ++p) {
        const GenerationRequest request = make_request(ts.prompts[p], n_predict, seed + done);
        // Rotate the order so no strategy always runs first (cold caches) or last.
        std::vector<size_t> order(runners.size());
        for (size_t k = 0; k < order.size(); ++k) order[k] = (k + done) % order.size();
        std::vector<GenerationResult> outputs(runners.size());
        for (size_t k : order) {
          progress.show(done + 1, ts.set.name, r, repeat, strategies, strategies[k]);
          try {
            outputs[k] = runners[k]->generate(request);
          } catch (const Error& e) {
            progress.clear();
            fail("strategy '", strategies[k], "' on prompt ", p + 1, " of set '", ts.set.name,
                 "': ", e.what());
          }
          auto& [n, ms] = progress.speed[strategies[k]];
          n += outputs[k].stats.n_gen;
          ms += outputs[k].stats.t_gen_ms;
        }
        const std::vector<int32_t>& reference = outputs[ar_index].tokens;
        for (size_t k = 0; k < runners.size(); ++k) {
          BenchRun run;
          run.strategy = strategies[k];
          run.prompt_set = ts.set.name;
          run.prompt_index = static_cast<int>(p);
          run.repeat = r;
          run.stats = outputs[k].stats;
          if (check_exact && k != ar_index) {
            run.checked = true;
            if (auto at = first_difference(outputs[k].tokens, reference)) {
              run.matches_ar = false;
              mismatches.push_back({strategies[k], ts.set.name, static_cast<int>(p), r, *at});
              progress.clear();
              std::fprintf(stderr,
                           "bench: WARNING: MISMATCH: '%s' output differs from ar's on prompt %zu "
                           "of set '%s' (pass %d) at generated token %zu\n",
                           strategies[k].c_str(), p + 1, ts.set.name.c_str(), r + 1, *at);
            }
          }
          runs.push_back(std::move(run));
        }
        ++done;
      }
    }
  }
  progress.clear();

  std::vector<std::string> set_names;
  for (const TokenizedSet& ts : sets) set_names.push_back(ts.set.name);
  BenchReport report;
  report.machine = read_machine_info();
  report.machine.threads = n_threads;
  report.machine.threads_draft =
      resources.draft_worker ? resources.draft_worker->n_threads() : n_threads;
  report.results = aggregate_runs(runs, strategies, set_names);
  report.mismatches = mismatches;
  report.exactness_checked = check_exact;

  std::string command = "parspec";
  for (int i = 1; i < argc; ++i) command += " " + shell_quote(argv[i]);
  ojson& config = report.config;
  config["command"] = command;
  config["date"] = utc_now();
  config["target"] = describe_model(model_path, *target);
  config["draft"] = resources.draft ? describe_model(strategy_options.draft_path, *resources.draft)
                                    : ojson(nullptr);
  config["strategies"] = strategies;
  ojson set_info = ojson::array();
  for (const TokenizedSet& ts : sets)
    set_info.push_back({{"name", ts.set.name},
                        {"path", ts.set.path},
                        {"prompts", ts.prompts.size()},
                        {"chat", ts.set.chat}});
  config["prompt_sets"] = set_info;
  config["chat_template"] = template_used.empty() ? ojson(nullptr) : ojson(template_used);
  config["n"] = n_predict;
  config["temp"] = sampling.temp;
  config["top_k"] = sampling.top_k;
  config["top_p"] = sampling.top_p;
  config["min_p"] = sampling.min_p;
  config["seed"] = seed;
  config["repeat"] = repeat;
  config["max_prompts"] = max_prompts;
  config["ctx_size"] = n_ctx;
  config["threads"] = n_threads;
  config["threads_draft"] = report.machine.threads_draft;
  config["ignore_eos"] = ignore_eos;
  config["warmup"] = warmup;
  const StrategyConfig& sc = strategy_options.config;
  config["strategy_options"] = {{"draft_max", sc.draft_max},
                                {"draft_min", sc.draft_min},
                                {"draft_p_min", sc.draft_p_min},
                                {"adaptive_draft", sc.adaptive},
                                {"tree_depth", sc.tree_depth},
                                {"tree_branch", sc.tree_branch},
                                {"tree_width", sc.tree_width},
                                {"tree_verify_depth", sc.tree_verify_depth},
                                {"lossy_typical", strategy_options.lossy_typical}};
  add_git_info(config);

  const ojson json = report_json(report);
  const std::string json_text =
      json.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  if (json_to_stdout) {
    std::fputs(json_text.c_str(), stdout);
  } else {
    std::printf("target: %s", model_path.c_str());
    if (resources.draft) std::printf("   draft: %s", strategy_options.draft_path.c_str());
    std::printf("\nn = %d, temp = %g, repeat = %d, threads = %d", n_predict, sampling.temp, repeat,
                n_threads);
    if (resources.draft_worker) std::printf(" (draft %d)", report.machine.threads_draft);
    std::printf(", prompts:");
    for (const TokenizedSet& ts : sets)
      std::printf(" %s %zu", ts.set.name.c_str(), ts.prompts.size());
    std::printf("\n\n%s", report_table(report).c_str());
    std::fflush(stdout);
    if (!json_out.empty()) write_output(json_out, json_text);
  }
  if (!md_out.empty()) {
    std::string md = "Command: `" + command + "`\n\n";
    md += "Machine: " +
          (report.machine.cpu_model.empty() ? "unknown CPU" : report.machine.cpu_model) + ", " +
          std::to_string(report.machine.cores) + " cores, " + std::to_string(n_threads) +
          " threads\n\n";
    write_output(md_out, md + report_markdown(report));
  }
  if (!svg_out.empty()) write_output(svg_out, report_svg(report));

  if (!mismatches.empty()) {
    int checked = 0;
    for (const BenchRun& run : runs) checked += run.checked;
    std::fprintf(stderr,
                 "bench: WARNING: %zu of %d greedy runs differ from ar's output: a strategy is "
                 "not lossless here (details under \"mismatches\" in the JSON)\n",
                 mismatches.size(), checked);
  }
  return 0;
}

}  // namespace parspec
