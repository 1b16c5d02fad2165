#pragma once
// Timing of forward passes, for the benchmarks and for strategies that size
// themselves from measured speeds (PEARL's window).
#include "core/worker.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace parspec {

// Median wall time (ms) of one forward over a chain of n_tokens on top of the
// committed context of `kv`, after `warmup` unmeasured runs; each run's cells
// are discarded afterwards. `all_logits`: output rows for every token (what a
// verification computes) or only the last.
double median_forward_ms(const Model& model, Worker& worker, KvCache& kv, int n_tokens, int warmup,
                         int runs, bool all_logits);

}  // namespace parspec
