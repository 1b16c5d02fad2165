#include "tools/strategy_options.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/worker.h"
#include "cuda/backend.h"
#include "decode/local_model.h"
#include "model/compat.h"
#include "mpi/group_ranks.h"
#include "mpi/pipeline.h"
#include "strategies/easyspec/layer_parallel.h"
#include "tools/model_loading.h"

namespace parspec {

void StrategyOptions::add_to(ArgParser& args) {
  args.option("-md,--model-draft", &draft_path, "FILE",
              "draft model (GGUF) for speculative strategies");
  args.option("--drafters", &drafter_paths, "FILES",
              "cosine, specinfer: the drafter pool, GGUF files separated by commas (each gets a "
              "worker of -td threads when -td is given)");
  args.option(
      "-td,--threads-draft", &threads_draft, "N",
      "threads of the draft model's own worker; 0 = share the target's worker (pearl, "
      "which runs both models at once, then gives the draft as many threads as -t on "
      "the target's cores; serve: the worker that drafting passes run on beside verification)");
  // Flags in registry order; one slot per flag, however many strategies take it.
  std::vector<std::pair<const StrategyOption*, std::string>> flags;  // option, strategies
  for (const StrategyInfo& info : strategy_registry()) {
    for (const StrategyOption& option : info.options) {
      auto same = std::find_if(flags.begin(), flags.end(),
                               [&](const auto& f) { return f.first->flag == option.flag; });
      if (same == flags.end())
        flags.emplace_back(&option, info.name);
      else
        same->second += ", " + info.name;
    }
  }
  const StrategyConfig defaults;
  for (const auto& [option, users] : flags) {
    Slot& slot = slots_.emplace_back();
    slot.option = option;
    const OptionValue value = option->get(defaults);
    const std::string help = users + ": " + option->help;
    if (const int* i = std::get_if<int>(&value)) {
      slot.int_value = *i;
      args.option(option->flag, &slot.int_value, option->value_name, help);
    } else if (const float* f = std::get_if<float>(&value)) {
      slot.float_value = *f;
      args.option(option->flag, &slot.float_value, option->value_name, help);
    } else if (const std::string* text = std::get_if<std::string>(&value)) {
      slot.string_value = *text;
      args.option(option->flag, &slot.string_value, option->value_name, help);
    } else {
      slot.bool_value = std::get<bool>(value);
      args.flag(option->flag, &slot.bool_value, help);
    }
  }
  args.flag("--allow-draft-mismatch", &allow_draft_mismatch,
            "run with a draft whose tokenizer differs from the target's (token texts, special "
            "ids): lossless still, but its drafts are mostly rejected");
  // Bounds that keep a typo from running for minutes or exhausting memory.
  args.bound("-td", 0, Worker::kMaxThreads);
  args.bound("--draft-max", 1, 1024);
  args.bound("--draft-min", 1, 1024);
  args.bound("--draft-p-min", 0, 1);
  devices.add_to(args);
  args.option("--placement", &placement, "MODE",
              "cores of the threads: auto (not pinned), separate (target on cores 0..t-1, draft "
              "on the next td cores), shared (draft on the target's cores: resource competition)");
  args.option("--stages", &stages, "N",
              "under mpirun: target pipeline stages on ranks 1..N (0 = every rank but rank 0, "
              "the head)");
  args.option("--layer-split", &layer_split, "A,B,..",
              "under mpirun: layers per stage, in order (default: balanced by the bytes of "
              "weights each stage reads per token)");
  args.option("--head-layers", &head_layers, "N",
              "under mpirun: rank 0 (the head) also runs the embedding and the target's first N "
              "layers, so that with 2 ranks the target is split over both (0 = none)");
  args.option("--link-latency-us", &link_latency_us, "US",
              "under mpirun: EMULATED link latency added to every inter-rank message");
  args.option("--link-gbps", &link_gbps, "G",
              "under mpirun: EMULATED link bandwidth for every inter-rank message (0 = unlimited)");
  args.option(
      "--dist-timeout", &dist_timeout_s, "S",
      "under mpirun: seconds the head waits for a stage (or an easyspec drafter rank) before it "
      "ends the job");
  args.bound("--stages", 0, 4096);
  args.bound("--head-layers", 0, 4096);
  args.bound("--link-latency-us", 0, 1e7);
  args.bound("--link-gbps", 0, 1e6);
  args.bound("--dist-timeout", 0.1, 1e6);
}

OptionValue StrategyOptions::Slot::value() const {
  const OptionValue kind = option->get(StrategyConfig());
  if (std::holds_alternative<int>(kind)) return int_value;
  if (std::holds_alternative<float>(kind)) return float_value;
  if (std::holds_alternative<std::string>(kind)) return string_value;
  return bool_value;
}

void StrategyOptions::apply(const std::string& name, StrategyConfig& config) const {
  for (const StrategyOption& option : strategy_info(name).options)
    for (const Slot& slot : slots_)
      if (slot.option->flag == option.flag) option.set(config, slot.value());
}

void StrategyOptions::check_given(const ArgParser& args, const std::vector<std::string>& names) {
  strategies_run = names;
  for (const Slot& slot : slots_) {
    if (!args.given(slot.option->flag)) continue;
    bool taken = false;
    std::string takers;
    for (const StrategyInfo& info : strategy_registry()) {
      for (const StrategyOption& option : info.options) {
        if (option.flag != slot.option->flag) continue;
        taken |= std::find(names.begin(), names.end(), info.name) != names.end();
        if (!takers.empty()) takers += ", ";
        takers += info.name;
      }
    }
    if (!taken)
      fail(slot.option->flag, " is an option of ", takers, ", which ",
           names.size() == 1 ? "is not the strategy run" : "are not among the strategies run");
  }
}

StrategySpec StrategyOptions::check_strategy(const ArgParser& args, const std::string& entry) {
  StrategySpec spec;
  try {
    spec = parse_strategy_spec(entry);
  } catch (const Error& e) {
    fail("--strategy ", entry, ": ", e.what());
  }
  for (const auto& [key, value] : spec.settings)
    for (const StrategyOption& option : strategy_info(spec.name).options)
      check(option.json_key != key || !args.given(option.flag), "--strategy ", entry, " sets ",
            option.flag, " already: give one of them");
  check_given(args, {spec.name});
  return spec;
}

nlohmann::ordered_json StrategyOptions::to_json() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const Slot& slot : slots_)
    std::visit([&](auto v) { out[slot.option->json_key] = v; }, slot.value());
  if (!drafter_paths.empty()) out["drafters"] = drafter_paths;
  return out;
}

void StrategyResources::init(std::shared_ptr<const Model> target_model,
                             const StrategyOptions& options, int threads) {
  target = std::move(target_model);
  check(options.threads_draft >= 0, "-td must not be negative");
  const CorePlacement placement = place_threads(options.placement, threads, options.threads_draft);
  target_worker = std::make_unique<Worker>(threads, placement.target_cores);
  if (!options.draft_path.empty()) {
    draft = load_model(options.draft_path, options.devices.draft_loading());
    // An mpirun job maps its files (model/gguf.h); the head's drafter streams all of its weights.
    if (mpi::session() != nullptr) draft->hold_in_memory(0, draft->config().n_layer, true);
    const std::string mismatch = draft_incompatibility(target->gguf(), draft->gguf());
    if (!mismatch.empty() && !options.allow_draft_mismatch)
      fail("the draft model cannot draft for the target: ", mismatch,
           "; pass --allow-draft-mismatch to run anyway");
    if (!mismatch.empty())
      std::fprintf(stderr, "warning: --allow-draft-mismatch: %s\n", mismatch.c_str());
  }
  if (options.threads_draft > 0)
    draft_worker = std::make_unique<Worker>(options.threads_draft, placement.draft_cores);
  devices.init(options.devices, *target, draft.get());

  mpi::PipelineOptions pipeline;
  pipeline.stages = options.stages;
  pipeline.layer_split = options.layer_split;
  pipeline.head_layers = options.head_layers;
  pipeline.link.latency_us = options.link_latency_us;
  pipeline.link.gbps = options.link_gbps;
  pipeline.timeout_s = options.dist_timeout_s;
  const bool slots =
      mpi::distributed_run() &&
      std::any_of(options.strategies_run.begin(), options.strategies_run.end(),
                  [](const std::string& name) { return strategy_info(name).drafts_on_ranks; });
  if (slots) {
    // The other ranks run easyspec's drafter slots; every target stays here.
    check(options.stages == 0 && options.layer_split.empty() && options.head_layers == 0,
          "--stages, --layer-split and --head-layers shape a target pipeline; with easyspec an "
          "mpirun job keeps the target on rank 0 and runs the drafter's layer groups on the "
          "other ranks");
    // An mpirun job maps its files (model/gguf.h): the head runs the whole target itself.
    target->hold_in_memory(0, target->config().n_layer, true);
    mpi::SlotOptions slot_options;
    slot_options.link = pipeline.link;
    slot_options.timeout_s = pipeline.timeout_s;
    make_group_executor = [slot_options](const Model& draft,
                                         const std::vector<LayerGroup>& groups) {
      const bool starts = mpi::describe_draft_slots().empty();
      auto executor = mpi::draft_slot_executors(slot_options)(draft, groups);
      if (starts && !mpi::describe_draft_slots().empty())
        std::fprintf(stderr, "distributed: %s\n", mpi::describe_draft_slots().c_str());
      return executor;
    };
  } else {
    make_target = mpi::pipeline_targets(*target, pipeline, threads);
    if (make_target)
      std::fprintf(stderr, "distributed: %s\n", mpi::running_pipeline()->describe().c_str());
    else
      check(options.stages == 0 && options.layer_split.empty() && options.head_layers == 0 &&
                !pipeline.link.active(),
            "--stages, --layer-split, --head-layers and --link-* are for runs launched by mpirun "
            "with at least "
            "two ranks (mpirun -np N parspec ...)");
  }
  load_drafters(options);
}

void StrategyResources::load_drafters(const StrategyOptions& options) {
  std::string list = options.drafter_paths;
  for (size_t at = 0; !list.empty();) {
    const size_t comma = list.find(',', at);
    const std::string path = list.substr(at, comma == std::string::npos ? comma : comma - at);
    check(!path.empty(), "--drafters: an empty file name in '", list, "'");
    drafters.push_back(load_model(path));
    if (mpi::session() != nullptr)
      drafters.back()->hold_in_memory(0, drafters.back()->config().n_layer, true);
    const std::string mismatch = draft_incompatibility(target->gguf(), drafters.back()->gguf());
    if (!mismatch.empty() && !options.allow_draft_mismatch)
      fail("--drafters: ", path, " cannot draft for the target: ", mismatch,
           "; pass --allow-draft-mismatch to run anyway");
    drafter_names.push_back(std::filesystem::path(path).stem().string());
    if (options.threads_draft > 0)
      drafter_workers.push_back(std::make_unique<Worker>(options.threads_draft));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
}

StrategyConfig StrategyResources::config_for(const std::string& entry,
                                             const StrategyOptions& options, int ctx_size) const {
  const StrategySpec spec = parse_strategy_spec(entry);
  const std::string& name = spec.name;
  const StrategyInfo& info = strategy_info(name);
  StrategyConfig c;
  options.apply(name, c);
  apply_strategy_spec(spec, c);
  c.target = target;
  c.draft = draft;
  c.target_worker = target_worker.get();
  c.draft_worker = draft_worker ? draft_worker.get() : target_worker.get();
  c.ctx_size = ctx_size;
  c.drafters = drafters;
  c.drafter_names = drafter_names;
  for (const auto& w : drafter_workers) c.drafter_workers.push_back(w.get());
  if (info.needs_draft && !draft && drafters.empty())
    fail("strategy '", name, "' needs a draft model: give one with -md FILE",
         info.takes_drafter_pool ? " or a pool with --drafters a.gguf,b.gguf" : "");
  c.make_group_executor = make_group_executor;
  devices.apply(c);
  if (make_target) {
    c.make_target = make_target;
    check(info.mpirun_refusal.empty(), info.mpirun_refusal);
  }
  return c;
}

}  // namespace parspec
