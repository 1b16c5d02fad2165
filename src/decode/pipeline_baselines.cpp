// PipeDec's baselines, under the paper's names: `pp` (plain pipeline
// parallelism: one token at a time through every stage) is `ar`, and `stpp`
// (static tree pipeline parallelism: a SpecInfer tree verified as one
// micro-batch through the pipeline) is `tree`. Under mpirun every strategy's
// target is the pipeline of ranks (StrategyConfig::make_target, set by the
// distributed runtime), so these rows only give the baselines their names;
// in one process they are ar and tree themselves.
#include "decode/strategies.h"

namespace parspec {

namespace {

// A strategy under another name.
class Renamed final : public Strategy {
 public:
  Renamed(std::string name, std::unique_ptr<Strategy> inner)
      : name_(std::move(name)), inner_(std::move(inner)) {}
  std::string name() const override { return name_; }
  GenerationResult generate(const GenerationRequest& request) override {
    return inner_->generate(request);
  }
  std::vector<std::string> notes() const override { return inner_->notes(); }

 private:
  std::string name_;
  std::unique_ptr<Strategy> inner_;
};

std::unique_ptr<Strategy> as(const std::string& name, const std::string& base,
                             const StrategyConfig& config) {
  StrategyConfig c = config;
  c.name = base;
  return std::make_unique<Renamed>(name, strategy_info(base).make(c));
}

}  // namespace

StrategyInfo pipeline_pp_strategy() {
  return {.name = "pp",
          .summary = "plain pipeline parallelism (PipeDec's PP baseline): ar through the stages",
          .needs_draft = false,
          .options = {},
          .variant_key = "",
          .make = [](const StrategyConfig& c) { return as("pp", "ar", c); }};
}

StrategyInfo pipeline_stpp_strategy() {
  StrategyInfo tree = static_tree_strategy();
  return {.name = "stpp",
          .summary =
              "static tree pipeline parallelism (PipeDec's STPP baseline): tree through "
              "the stages as one micro-batch",
          .needs_draft = true,
          .options = tree.options,
          .variant_key = "",
          .make = [](const StrategyConfig& c) { return as("stpp", "tree", c); }};
}

}  // namespace parspec
