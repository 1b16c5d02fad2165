// `pp`: PipeDec's plain pipeline parallelism baseline (one token at a time
// through every stage) is `ar`. Under mpirun every strategy's target is the
// pipeline of ranks (StrategyConfig::make_target, set by the MPI runtime), so
// this row only gives the baseline its name; in one process it is ar itself.
#include "strategies/renamed.h"

namespace parspec {

StrategyInfo pp_strategy() {
  return {.name = "pp",
          .summary = "plain pipeline parallelism (PipeDec's PP baseline): ar through the stages",
          .needs_draft = false,
          .options = {},
          .variant_key = "",
          .roles = {StrategyRole::generate_pipeline_plain},
          .plan_shapes = [](int) { return std::vector<std::string>{"pp"}; },
          .make = [](const StrategyConfig& c) { return renamed_strategy("pp", "ar", c); }};
}

}  // namespace parspec
