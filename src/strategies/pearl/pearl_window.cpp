#include "strategies/pearl/pearl_window.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace parspec {

double tokens_per_round(int window, double alpha) {
  double expected = 0, prefix = 1;
  for (int k = 1; k <= window; ++k) {
    prefix *= alpha;
    expected += prefix;
  }
  return expected + 1 - prefix;
}

double round_ms(const WindowCosts& costs, int window) {
  const double drafting = window * costs.draft_ms;
  const double verifying = costs.target.at(window + 1);
  return std::max(drafting, verifying) + costs.overlap_cost * std::min(drafting, verifying);
}

int fastest_window(const WindowCosts& costs, double alpha) {
  int best = 1;
  double best_rate = 0;
  for (int window = 1; window <= std::max(1, costs.max_window); ++window) {
    const double ms = round_ms(costs, window);
    const double rate = ms > 0 ? tokens_per_round(window, alpha) / ms : 0;
    // Better by a margin: a longer window for a rounding error's gain is not.
    if (rate > best_rate * (1 + 1e-9)) {
      best = window;
      best_rate = rate;
    }
  }
  return best;
}

}  // namespace parspec
