#pragma once
// Tuning on this machine: the cost model's measurements (tuning/cost_model.h)
// cached per target file, draft file, CPU and thread counts in a JSON file, so
// that `--strategy auto` measures once and `parspec tune` can show them. The
// cache lives in $PARSPEC_CACHE_DIR, else $XDG_CACHE_HOME/parspec, else
// ~/.cache/parspec; an entry is found again only while both model files keep
// their path, size and modification time.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "decode/strategy.h"
#include "tuning/cost_model.h"

namespace parspec {

struct FileIdentity {
  std::string path;  // absolute
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// Throws Error when the file cannot be examined.
FileIdentity file_identity(const std::string& path);

struct TuneKey {
  FileIdentity target, draft;
  std::string cpu;                     // "model name" of /proc/cpuinfo
  int threads = 0, threads_draft = 0;  // threads_draft 0: the draft shares the target's worker
  bool operator==(const TuneKey&) const = default;
};

// The key of `config`'s models (loaded from files) and workers.
TuneKey tune_key(const StrategyConfig& config);
// The cache directory from the environment (see above).
std::string default_tune_cache_dir();
// The cache file in `dir` (which need not exist).
std::string tune_cache_file(const std::string& dir);

// The cached measurements for `key` in `dir`, if any. A cache file that cannot
// be read or parsed counts as empty.
std::optional<CostMeasurements> load_tuning(const std::string& dir, const TuneKey& key);
// Stores (replaces) the entry for `key`, dropping entries whose target file is
// gone; creates `dir`. Throws Error when the file cannot be written.
void store_tuning(const std::string& dir, const TuneKey& key, const CostMeasurements& m);

struct TuneOptions {
  std::string cache_dir;  // "": default_tune_cache_dir()
  bool retune = false;    // measure even when an entry exists
  CalibrationOptions calibration;
};

struct Tuning {
  CostMeasurements measurements;
  TuneChoice choice;
  bool from_cache = false;
  std::string cache_file;
};

// Cached measurements for `config` or new ones (stored), and the choice. New
// measurements are checked: the predicted best and the best of other families
// predicted within kRivalMargin of it run against ar on the calibration
// prompts; those not faster than ar are rejected, and of the others the
// simplest as fast as the measured fastest within the check's noise is chosen
// (decide_check, measured_best); if none was faster, the next prediction is
// checked (twice at most).
Tuning tune(const StrategyConfig& config, const TuneOptions& options);

// Where `--strategy auto` reports tuning progress (a tool sets it to print on
// stderr; libraries print nothing). Empty by default.
void set_tuning_progress(std::function<void(const std::string&)> progress);
const std::function<void(const std::string&)>& tuning_progress();

}  // namespace parspec
