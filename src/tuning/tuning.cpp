#include "tuning/tuning.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "decode/registry.h"

namespace parspec {

namespace {

// Bump when the measurements or the predictions change meaning: older entries are ignored.
// 3: draft batch sizes, tree acceptance; 4: verify_row_ms, the check's figures and tie rule;
// 5: a mixture-of-experts target's expert costs.
constexpr int kCacheVersion = 5;

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "unknown";
}

nlohmann::json identity_json(const FileIdentity& f) {
  return {{"path", f.path}, {"size", f.size}, {"mtime_ns", f.mtime_ns}};
}

FileIdentity identity_from(const nlohmann::json& j) {
  return {j.at("path").get<std::string>(), j.at("size").get<uint64_t>(),
          j.at("mtime_ns").get<int64_t>()};
}

nlohmann::json key_json(const TuneKey& k) {
  return {{"target", identity_json(k.target)},
          {"draft", identity_json(k.draft)},
          {"cpu", k.cpu},
          {"threads", k.threads},
          {"threads_draft", k.threads_draft}};
}

TuneKey key_from(const nlohmann::json& j) {
  return {identity_from(j.at("target")), identity_from(j.at("draft")),
          j.at("cpu").get<std::string>(), j.at("threads").get<int>(),
          j.at("threads_draft").get<int>()};
}

nlohmann::json checked_json(const std::vector<CostMeasurements::Checked>& checked) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : checked)
    out.push_back({{"label", c.label},
                   {"tok_per_s", c.tok_per_s},
                   {"slower", c.slower},
                   {"slower_se", c.slower_se}});
  return out;
}

nlohmann::json measurements_json(const CostMeasurements& m) {
  return {{"target_ms", m.target_ms},
          {"draft_ms", m.draft_ms},
          {"target_overhead_ms", m.target_overhead_ms},
          {"draft_overhead_ms", m.draft_overhead_ms},
          {"pearl_efficiency", m.pearl_efficiency},
          {"rejected", m.rejected},
          {"measured_best", m.measured_best},
          {"accept_prefix", m.accept_prefix},
          {"draft_batch_ms", m.draft_batch_ms},
          {"tree_accept", m.tree_accept},
          {"tree_node_overhead_ms", m.tree_node_overhead_ms},
          {"verify_row_ms", m.verify_row_ms},
          {"n_expert", m.n_expert},
          {"n_expert_used", m.n_expert_used},
          {"target_experts", m.target_experts},
          {"expert_ms", m.expert_ms},
          {"expert_overlap", m.expert_overlap},
          {"checked", checked_json(m.checked)},
          {"checked_ar_tok_per_s", m.checked_ar_tok_per_s},
          {"parallel", m.parallel},
          {"calibration_tokens", m.calibration_tokens},
          {"calibration_s", m.calibration_s}};
}

CostMeasurements measurements_from(const nlohmann::json& j) {
  CostMeasurements m;
  m.target_ms = j.at("target_ms").get<std::vector<double>>();
  m.draft_ms = j.at("draft_ms").get<double>();
  m.target_overhead_ms = j.at("target_overhead_ms").get<double>();
  m.draft_overhead_ms = j.at("draft_overhead_ms").get<double>();
  m.pearl_efficiency = j.at("pearl_efficiency").get<double>();
  m.rejected = j.at("rejected").get<std::vector<std::string>>();
  m.measured_best = j.at("measured_best").get<std::string>();
  m.accept_prefix = j.at("accept_prefix").get<std::vector<double>>();
  m.draft_batch_ms = j.at("draft_batch_ms").get<std::vector<double>>();
  m.tree_accept = j.at("tree_accept").get<std::vector<std::vector<std::vector<double>>>>();
  m.tree_node_overhead_ms = j.at("tree_node_overhead_ms").get<double>();
  m.verify_row_ms = j.at("verify_row_ms").get<double>();
  m.n_expert = j.at("n_expert").get<int>();
  m.n_expert_used = j.at("n_expert_used").get<int>();
  m.target_experts = j.at("target_experts").get<std::vector<double>>();
  m.expert_ms = j.at("expert_ms").get<double>();
  m.expert_overlap = j.at("expert_overlap").get<double>();
  for (const nlohmann::json& c : j.at("checked"))
    m.checked.push_back({c.at("label").get<std::string>(), c.at("tok_per_s").get<double>(),
                         c.at("slower").get<double>(), c.at("slower_se").get<double>()});
  m.checked_ar_tok_per_s = j.at("checked_ar_tok_per_s").get<double>();
  m.parallel = j.at("parallel").get<bool>();
  m.calibration_tokens = j.at("calibration_tokens").get<int>();
  m.calibration_s = j.at("calibration_s").get<double>();
  return m;
}

// The entries of the cache file; empty when it is missing, unreadable or of another version.
nlohmann::json read_entries(const std::string& file) {
  std::ifstream in(file);
  if (!in) return nlohmann::json::array();
  try {
    const nlohmann::json doc = nlohmann::json::parse(in);
    if (doc.value("version", 0) == kCacheVersion && doc.contains("entries") &&
        doc["entries"].is_array())
      return doc["entries"];
  } catch (const nlohmann::json::exception&) {
  }
  return nlohmann::json::array();
}

std::function<void(const std::string&)>& progress_sink() {
  static std::function<void(const std::string&)> sink;
  return sink;
}

}  // namespace

FileIdentity file_identity(const std::string& path) {
  struct stat st {};
  check(::stat(path.c_str(), &st) == 0, "cannot examine '", path, "'");
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  return {ec ? path : absolute.lexically_normal().string(), static_cast<uint64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec};
}

TuneKey tune_key(const StrategyConfig& config) {
  check(config.target && config.draft && config.target_worker,
        "tuning needs a target, a draft model and a worker");
  TuneKey key;
  key.target = file_identity(config.target->gguf().path());
  key.draft = file_identity(config.draft->gguf().path());
  key.cpu = cpu_model_name();
  if (!config.device.empty()) key.cpu += " with " + config.device;  // a GPU's speeds differ
  key.threads = config.target_worker->n_threads();
  const bool shared = config.draft_worker == nullptr || config.draft_worker == config.target_worker;
  key.threads_draft = shared ? 0 : config.draft_worker->n_threads();
  return key;
}

std::string default_tune_cache_dir() {
  if (const char* dir = std::getenv("PARSPEC_CACHE_DIR"); dir != nullptr && *dir != '\0')
    return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return std::string(xdg) + "/parspec";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return std::string(home) + "/.cache/parspec";
  return ".parspec-cache";
}

std::string tune_cache_file(const std::string& dir) {
  return dir + "/tune.json";
}

std::optional<CostMeasurements> load_tuning(const std::string& dir, const TuneKey& key) {
  for (const nlohmann::json& entry : read_entries(tune_cache_file(dir))) {
    try {
      if (key_from(entry.at("key")) == key) return measurements_from(entry.at("measurements"));
    } catch (const nlohmann::json::exception&) {
      // A malformed entry is skipped.
    }
  }
  return std::nullopt;
}

void store_tuning(const std::string& dir, const TuneKey& key, const CostMeasurements& m) {
  const std::string file = tune_cache_file(dir);
  nlohmann::json kept = nlohmann::json::array();
  for (const nlohmann::json& entry : read_entries(file)) {
    try {
      const TuneKey other = key_from(entry.at("key"));
      if (other == key || !std::filesystem::exists(other.target.path)) continue;
    } catch (const nlohmann::json::exception&) {
      continue;
    }
    kept.push_back(entry);
  }
  kept.push_back({{"key", key_json(key)},
                  {"measurements", measurements_json(m)},
                  {"choice", choose_strategy(m).chosen.label()}});
  const nlohmann::json doc = {{"version", kCacheVersion}, {"entries", kept}};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec, "cannot create the tuning cache directory '", dir, "': ", ec.message());
  // Written to a temporary file and renamed, so a reader never sees half a file.
  const std::string tmp = file + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << doc.dump(1) << "\n";
    check(out.good(), "cannot write the tuning cache '", tmp, "'");
  }
  std::filesystem::rename(tmp, file, ec);
  check(!ec, "cannot write the tuning cache '", file, "': ", ec.message());
}

Tuning tune(const StrategyConfig& config, const TuneOptions& options) {
  const std::string dir = options.cache_dir.empty() ? default_tune_cache_dir() : options.cache_dir;
  const TuneKey key = tune_key(config);
  Tuning t;
  t.cache_file = tune_cache_file(dir);
  std::optional<CostMeasurements> cached;
  if (!options.retune) cached = load_tuning(dir, key);
  if (cached) {
    t.measurements = *cached;
    t.from_cache = true;
  } else {
    const auto prompts = calibration_prompts(*config.target);
    t.measurements = measure_costs(config, prompts, options.calibration);
    // The prediction is checked by running the predicted best, with the best
    // of other families predicted within kRivalMargin of it, against ar:
    // those not faster than ar are rejected, and of the others the simplest
    // one as fast as the measured fastest within the check's noise is chosen
    // (decide_check); if none was faster, the next prediction is checked
    // (twice at most).
    for (int attempt = 0; attempt < 2; ++attempt) {
      const TuneChoice choice = choose_strategy(t.measurements);
      if (choice.chosen.strategy == reference_strategy_name()) break;
      std::vector<Candidate> contenders = {choice.chosen};
      for (const Prediction& p : rank_candidates(t.measurements)) {
        const bool family_seen =
            std::any_of(contenders.begin(), contenders.end(),
                        [&](const Candidate& c) { return c.strategy == p.candidate.strategy; });
        const bool rejected =
            std::find(t.measurements.rejected.begin(), t.measurements.rejected.end(),
                      p.candidate.label()) != t.measurements.rejected.end();
        if (p.candidate.strategy == reference_strategy_name() || family_seen || rejected ||
            p.tok_per_s < choice.predicted.tok_per_s * (1 - kRivalMargin))
          continue;
        contenders.push_back(p.candidate);
      }
      std::string names;
      for (const Candidate& c : contenders) names += (names.empty() ? "" : ", ") + c.label();
      if (options.calibration.progress)
        options.calibration.progress("tune: checking " + names + " against ar");
      std::vector<Candidate> runs = contenders;
      runs.push_back(reference_candidate());
      const CheckOutcome outcome = decide_check(
          contenders, run_candidates(config, runs, prompts, options.calibration.n_predict));
      CostMeasurements& m = t.measurements;
      m.rejected.insert(m.rejected.end(), outcome.rejected.begin(), outcome.rejected.end());
      m.checked.insert(m.checked.end(), outcome.checked.begin(), outcome.checked.end());
      m.checked_ar_tok_per_s = outcome.ar_tok_per_s;
      m.measured_best = outcome.chosen;
      if (!m.measured_best.empty()) break;
    }
    store_tuning(dir, key, t.measurements);
  }
  t.choice = choose_strategy(t.measurements);
  return t;
}

void set_tuning_progress(std::function<void(const std::string&)> progress) {
  progress_sink() = std::move(progress);
}

const std::function<void(const std::string&)>& tuning_progress() {
  return progress_sink();
}

}  // namespace parspec
