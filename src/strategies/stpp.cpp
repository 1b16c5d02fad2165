// `stpp`: PipeDec's static tree pipeline parallelism baseline (a SpecInfer
// tree verified as one micro-batch through the pipeline) is `tree` under the
// paper's name; in one process it is tree itself.
#include "strategies/renamed.h"

namespace parspec {

StrategyInfo tree_strategy();

StrategyInfo stpp_strategy() {
  StrategyInfo tree = tree_strategy();
  return {.name = "stpp",
          .summary =
              "static tree pipeline parallelism (PipeDec's STPP baseline): tree through "
              "the stages as one micro-batch",
          .needs_draft = true,
          .options = tree.options,
          .variant_key = "",
          .plan_shapes =
              [](int) {
                return std::vector<std::string>{"stpp:d2c2", "stpp:d3c2", "stpp:d4c2", "stpp:d2c4",
                                                "stpp:d3c3"};
              },
          .make = [](const StrategyConfig& c) { return renamed_strategy("stpp", "tree", c); }};
}

}  // namespace parspec
