// parspec simulate: a strategy's real code against a simulated cluster
// (src/sim): the real tokens, the cluster's time; --plan tries the pipeline
// strategies' shapes and names the fastest.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/timer.h"
#include "decode/registry.h"
#include "mpi/pipeline.h"
#include "mpi/transport.h"
#include "sim/cost_profile.h"
#include "sim/sim_sides.h"
#include "tools/commands.h"
#include "tools/generate_run.h"
#include "tools/strategy_options.h"

namespace parspec {

namespace {

// simulate's own flags.
struct SimulateArgs {
  int ranks = 0;
  std::string cost_profile = "measured", draft_cost_profile = "measured";
  std::string shape, draft_shape, save_profiles;
  float head_time_scale = 1;
  bool drafters_on_head = false;
  bool plan = false;
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
  args.option("--shape", &s.shape, "NAME",
              "price the target as this model shape (" + sim::model_shape_names() +
                  "): a measured profile is scaled by weights per layer; default: the model's own");
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
  args.flag("--plan", &s.plan,
            "try pp, sd, stpp and pipedec in several shapes (tree depth, width, branching) on "
            "the simulated cluster and the prompt, and print them fastest first with the "
            "expected tokens/s (--strategy, the tree flags and --draft-max are then ignored)");
  args.bound("--ranks", 2, 4096);
  args.bound("--head-time-scale", 0, 1000);
}

// What --plan tries: every strategy's plan shapes (plain pipeline parallelism,
// chains, static trees, PipeDec's dynamic trees), the plain pipeline first.
std::vector<std::string> plan_candidates(int stages, bool drafted) {
  const std::string plain = strategy_for(StrategyRole::generate_pipeline_plain).name;
  std::vector<std::string> out = {plain};
  for (const StrategyInfo& info : strategy_registry()) {
    if (!info.plan_shapes || (info.needs_draft && !drafted)) continue;
    for (const std::string& shape : info.plan_shapes(stages))
      if (shape != plain) out.push_back(shape);
  }
  return out;
}

}  // namespace

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
  if (s.plan) {
    struct Tried {
      std::string label;
      double ms_per_token = 0, tau = 0;
    };
    std::vector<Tried> tried;
    std::vector<int32_t> reference;
    std::fprintf(stderr, "simulated: %s\n",
                 sim::SimCluster(cluster_spec).pipeline().describe().c_str());
    for (const std::string& candidate : plan_candidates(stages, drafter != nullptr)) {
      StrategyConfig c = resources.config_for(candidate, local, run.n_ctx);
      sim::SimCluster cluster(cluster_spec);
      cluster.attach(c);
      auto strategy = make_strategy(c);
      GenerationRequest request;
      request.prompt = run.prompt_tokens;
      request.n_predict = run.n_predict;
      request.sampling = a.sampling;
      GenerationResult result;
      {
        ScopedThreadClock virtual_time(&cluster.clock());
        result = strategy->generate(request);
      }
      if (reference.empty()) reference = result.tokens;
      check(a.sampling.temp > 0 || result.tokens == reference, "simulate --plan: ", candidate,
            " produced other tokens than pp");
      const double per_token = result.stats.n_gen > 0
                                   ? result.stats.t_gen_ms / static_cast<double>(result.stats.n_gen)
                                   : 0;
      tried.push_back({candidate, per_token, result.stats.tau()});
      std::fprintf(stderr, "  %-40s %9.3f ms/token\n", tried.back().label.c_str(), per_token);
    }
    const double pp_ms = tried.front().ms_per_token;
    std::stable_sort(tried.begin(), tried.end(), [](const Tried& x, const Tried& y) {
      return x.ms_per_token < y.ms_per_token;
    });
    if (a.json) {
      nlohmann::json out = nlohmann::json::array();
      for (const Tried& t : tried)
        out.push_back({{"strategy", t.label},
                       {"ms_per_token", t.ms_per_token},
                       {"tok_per_s", t.ms_per_token > 0 ? 1000.0 / t.ms_per_token : 0.0},
                       {"speedup_over_pp", t.ms_per_token > 0 ? pp_ms / t.ms_per_token : 0.0},
                       {"tau", t.tau}});
      std::printf("%s\n", nlohmann::json{{"ranks", s.ranks},
                                         {"target_cost", cluster_spec.target.name},
                                         {"draft_cost", drafter ? cluster_spec.draft.name : ""},
                                         {"link_latency_us", layout.link_latency_us},
                                         {"link_gbps", layout.link_gbps},
                                         {"plan", out}}
                              .dump(2)
                              .c_str());
      return 0;
    }
    std::printf(
        "| strategy | ms/token | tokens/s | over pp | tokens/step |\n|---|---|---|---|---|\n");
    for (const Tried& t : tried)
      std::printf("| %s | %.3f | %.1f | %.2fx | %.2f |\n", t.label.c_str(), t.ms_per_token,
                  1000.0 / t.ms_per_token, pp_ms / t.ms_per_token, t.tau);
    std::printf("\nfastest: %s, %.1f tokens/s expected (%.2fx plain pipeline parallelism)\n",
                tried.front().label.c_str(), 1000.0 / tried.front().ms_per_token,
                pp_ms / tried.front().ms_per_token);
    return 0;
  }
  StrategyConfig config = resources.config_for(a.strategy_name, local, run.n_ctx);
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
