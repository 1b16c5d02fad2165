// parspec lp-similarity: how well layer-parallel (EasySpec) drafting
// approximates the exact draft model, as the cosine similarity between exact
// and fuzzy hidden state, q, k, v and attention output per layer group.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/environment.h"
#include "bench/prompt_sets.h"
#include "core/error.h"
#include "core/worker.h"
#include "decode/registry.h"
#include "model/model.h"
#include "strategies/easyspec/layer_parallel.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/model_loading.h"

namespace parspec {

namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

struct Mean {
  double h = 0, q = 0, k = 0, v = 0, attn = 0;
  int64_t tokens = 0;
  void add(const LayerSimilarity& s) {
    const double n = static_cast<double>(s.tokens);
    h += s.h * n;
    q += s.q * n;
    k += s.k * n;
    v += s.v * n;
    attn += s.attn * n;
    tokens += s.tokens;
  }
  nlohmann::ordered_json json() const {
    const double n = tokens > 0 ? static_cast<double>(tokens) : 1.0;
    return {{"h", h / n},       {"q", q / n}, {"k", k / n}, {"v", v / n}, {"attn_output", attn / n},
            {"samples", tokens}};
  }
};

}  // namespace

int cmd_lp_similarity(int argc, char** argv) {
  std::string model_path, prompts_text = "code,prose,math,config", sizes_text = "2,3,4",
                          groups_text, json_path;
  int n_continue = 64, max_prompts = 8, skip = 4, threads = 1;
  ArgParser args(
      "lp-similarity",
      "Cosine similarity between the exact and the layer-parallel (\"fuzzy\", EasySpec) forward\n"
      "of a draft model: every prompt is continued greedily by the model itself, then each\n"
      "token runs on top of the exact prefix both ways, and the attention input (h: the\n"
      "group's input against the layer's exact input), q, k (after RoPE), v and the attention\n"
      "output of every layer after the first of its group are compared, averaged over tokens\n"
      "and layers, per layer-group size (--lp-sizes) or for explicit --lp-groups.");
  args.option("-m,--model", &model_path, "FILE", "the draft model (GGUF; required)");
  args.option("--lp-sizes", &sizes_text, "LIST", "comma-separated --lp-size values to measure");
  args.option("--lp-groups", &groups_text, "G",
              "explicit layer groups, e.g. 0/1-3/4-6/7 (instead of --lp-sizes)");
  args.option("--prompts", &prompts_text, "LIST",
              "prompt sets (bench/prompts names or .jsonl paths)");
  args.option("--max-prompts", &max_prompts, "N", "prompts per set (0 = all)");
  args.option("-n,--n-predict", &n_continue, "N", "tokens each prompt is continued by");
  args.option("--skip", &skip, "N", "leading tokens of each sequence left out of the averages");
  args.option("-t,--threads", &threads, "N", "threads");
  args.option("--json", &json_path, "FILE", "also write the figures as JSON");
  args.bound("--max-prompts", 0, 100000);
  args.bound("-n", 0, 100000);
  args.bound("--skip", 0, 100000);
  args.bound("-t", 1, Worker::kMaxThreads);
  if (!args.parse(argc, argv)) return 0;
  check(!model_path.empty(), "no model given (-m DRAFT.gguf)");

  const std::string prompts_dir = find_bundled("bench/prompts");
  std::vector<PromptSet> sets;
  for (const std::string& spec : split_commas(prompts_text)) {
    PromptSet set = load_prompt_set(spec, prompts_dir.empty() ? "bench/prompts" : prompts_dir);
    if (max_prompts > 0 && set.prompts.size() > static_cast<size_t>(max_prompts))
      set.prompts.resize(max_prompts);
    sets.push_back(std::move(set));
  }
  check(!sets.empty(), "no prompt sets given (--prompts)");
  auto model = load_model(model_path);
  const int n_layer = model->config().n_layer;
  std::vector<std::pair<std::string, std::vector<LayerGroup>>> configs;
  if (!groups_text.empty()) {
    configs.emplace_back(groups_text, parse_lp_groups(groups_text, n_layer));
  } else {
    for (const std::string& s : split_commas(sizes_text)) {
      int n = 0;
      try {
        n = std::stoi(s);
      } catch (const std::exception&) {
        fail("--lp-sizes: '", s, "' is not a number");
      }
      check(n >= 2 && n <= 64, "--lp-sizes: ", n, " is not 2..64 (size 1 is exact)");
      configs.emplace_back(std::to_string(n), groups_from_lp_size(n_layer, n));
    }
  }
  check(!configs.empty(), "no layer groups to measure (--lp-sizes)");
  const auto tokenizer = Tokenizer::from_gguf(model->gguf());
  Worker worker(threads);

  // Each prompt continued by the model itself (greedy): the text a drafter sees.
  std::vector<std::vector<int32_t>> sequences;
  StrategyConfig ar;
  ar.name = reference_strategy_name();
  ar.target = model;
  ar.target_worker = &worker;
  ar.ctx_size = model->config().n_ctx_train > 0 ? model->config().n_ctx_train : 2048;
  auto continuation = make_strategy(ar);
  for (const PromptSet& set : sets)
    for (const std::string& text : set.prompts) {
      GenerationRequest req;
      req.prompt = tokenizer->encode(text, true, false);
      if (req.prompt.empty()) continue;
      const int room = ar.ctx_size - static_cast<int>(req.prompt.size());
      if (room <= 1) continue;
      req.n_predict = std::min(n_continue, room - 1);
      req.sampling.temp = 0;
      std::vector<int32_t> seq = req.prompt;
      const GenerationResult r = continuation->generate(req);
      seq.insert(seq.end(), r.tokens.begin(), r.tokens.end());
      sequences.push_back(std::move(seq));
    }
  check(!sequences.empty(), "no prompt gave any tokens");

  nlohmann::ordered_json report;
  report["model"] = model_path;
  report["n_layer"] = n_layer;
  report["sequences"] = sequences.size();
  report["skip"] = skip;
  std::printf("%s: %d layers, %zu sequences (prompt + up to %d tokens), first %d tokens skipped\n",
              model_path.c_str(), n_layer, sequences.size(), n_continue, skip);
  std::printf("%-8s %-18s %7s %7s %7s %7s %7s %8s\n", "lp size", "groups", "h", "q", "k", "v",
              "attn", "samples");
  for (const auto& [label, groups] : configs) {
    std::vector<LayerSimilarity> total;
    for (const auto& seq : sequences) {
      const std::vector<LayerSimilarity> part =
          measure_layer_similarity(*model, worker, groups, seq, skip);
      if (total.empty()) {
        total = part;
        for (LayerSimilarity& s : total) {
          s.h *= static_cast<double>(s.tokens);
          s.q *= static_cast<double>(s.tokens);
          s.k *= static_cast<double>(s.tokens);
          s.v *= static_cast<double>(s.tokens);
          s.attn *= static_cast<double>(s.tokens);
        }
        continue;
      }
      for (size_t i = 0; i < part.size(); ++i) {
        const double n = static_cast<double>(part[i].tokens);
        total[i].h += part[i].h * n;
        total[i].q += part[i].q * n;
        total[i].k += part[i].k * n;
        total[i].v += part[i].v * n;
        total[i].attn += part[i].attn * n;
        total[i].tokens += part[i].tokens;
      }
    }
    for (LayerSimilarity& s : total) {
      const double n = s.tokens > 0 ? static_cast<double>(s.tokens) : 1.0;
      s.h /= n;
      s.q /= n;
      s.k /= n;
      s.v /= n;
      s.attn /= n;
    }
    Mean all;
    nlohmann::ordered_json per_layer = nlohmann::ordered_json::array();
    for (const LayerSimilarity& s : total) {
      all.add(s);
      nlohmann::ordered_json j = {{"layer", s.layer}, {"group", s.group}, {"offset", s.offset}};
      Mean layer;
      layer.add(s);
      j.update(layer.json());
      per_layer.push_back(j);
    }
    const nlohmann::ordered_json mean = all.json();
    const std::string groups_label = format_lp_groups(groups);
    std::printf("%-8s %-18s %7.3f %7.3f %7.3f %7.3f %7.3f %8lld\n", label.c_str(),
                groups_label.c_str(), mean["h"].get<double>(), mean["q"].get<double>(),
                mean["k"].get<double>(), mean["v"].get<double>(), mean["attn_output"].get<double>(),
                static_cast<long long>(all.tokens));
    report["configs"].push_back(
        {{"lp_size", label}, {"groups", groups_label}, {"mean", mean}, {"layers", per_layer}});
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    check(out.good(), "cannot write ", json_path);
    out << report.dump(2) << "\n";
    check(out.good(), "cannot write ", json_path);
  }
  return 0;
}

}  // namespace parspec
