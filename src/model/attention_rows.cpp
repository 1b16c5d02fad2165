#include "model/attention_rows.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention.h"

namespace parspec {

namespace {

// Rows per chain group: 16 rows × the heads of a KV group fill the query
// lanes several times over while a job stays small enough to balance threads.
constexpr int kGroupRows = 16;

struct RowGroup {
  int first = 0, count = 0;    // rows [first, first + count)
  std::vector<int32_t> cells;  // speculative cells the last row sees, oldest first
  int32_t committed_from = 0;  // committed positions [committed_from, n_committed) are seen
  int32_t n_committed = 0;
};

}  // namespace

void attend_rows(Worker& worker, const ModelConfig& c, int layer,
                 std::span<const AttentionRow> rows) {
  const int n = static_cast<int>(rows.size());
  // A sliding layer's rows each see their own window of keys: one row per
  // group, its keys those within the window of its position (by position, so
  // the list is plain decoding's whatever the batch).
  const int32_t window = c.sliding(layer) ? c.sliding_window : 0;
  std::vector<RowGroup> groups;
  for (int i = 0; i < n; ++i) {
    const AttentionRow& r = rows[i];
    const bool continues = window == 0 && !groups.empty() && groups.back().count < kGroupRows &&
                           rows[i - 1].kv == r.kv && r.kv->spec_parent(r.cell) == rows[i - 1].cell;
    if (continues) {
      ++groups.back().count;
    } else {
      groups.push_back(RowGroup{i, 1, {}, 0, r.kv->n_committed()});
    }
  }
  // For the thread estimate: (query head, key) pairs, and keys each group reads.
  double pairs = 0, keys_read = 0;
  for (RowGroup& g : groups) {
    const AttentionRow& last = rows[g.first + g.count - 1];
    last.kv->ancestors(last.cell, g.cells);
    g.cells.push_back(last.cell);
    if (window > 0) {
      const int32_t oldest = last.kv->spec_position(last.cell) - window + 1;
      g.committed_from = std::clamp(oldest, 0, g.n_committed);
      std::erase_if(g.cells, [&](int32_t cell) { return last.kv->spec_position(cell) < oldest; });
    }
    const double keys = g.n_committed - g.committed_from + static_cast<double>(g.cells.size());
    pairs += g.count * keys;
    keys_read += keys;
  }
  pairs *= c.n_head;

  const int hd = c.head_dim, group_heads = c.n_head / c.n_head_kv;
  const float scale = c.attention_scale();
  const float cap = c.attn_logit_softcap;
  const int64_t n_jobs = static_cast<int64_t>(groups.size()) * c.n_head_kv;
  // ~0.03 ns per (pair, dimension) on one thread (scores and weighted values),
  // and ~0.1 ns per byte of keys and values: in a decode step the weights'
  // stream has pushed them out of the caches, and two threads fetch them
  // twice as fast (1B Q4_0 at a 64-token context: L(1) -3%, medians of 8
  // interleaved runs on Zen 5).
  const double kv_bytes = keys_read * c.n_head_kv * hd * 2 * sizeof(float);
  const int threads = worker.threads_for(0.03 * pairs * hd + 0.1 * kv_bytes);
  worker.parallel_chunks(n_jobs, 1, threads, [&](int64_t begin, int64_t end) {
    AttentionScratch scratch;
    std::vector<const float*> keys, values, queries;
    std::vector<float*> outs;
    std::vector<int> n_keys;
    for (int64_t job = begin; job < end; ++job) {
      const RowGroup& g = groups[static_cast<size_t>(job / c.n_head_kv)];
      const int kv_head = static_cast<int>(job % c.n_head_kv);
      KvCache& kv = *rows[g.first].kv;
      const int kv_off = kv_head * hd;
      keys.clear();
      values.clear();
      for (int32_t pos = g.committed_from; pos < g.n_committed; ++pos) {
        keys.push_back(kv.committed_k(layer, pos) + kv_off);
        values.push_back(kv.committed_v(layer, pos) + kv_off);
      }
      for (int32_t cell : g.cells) {
        keys.push_back(kv.spec_k(layer, cell) + kv_off);
        values.push_back(kv.spec_v(layer, cell) + kv_off);
      }
      queries.clear();
      outs.clear();
      n_keys.clear();
      for (int r = 0; r < g.count; ++r) {
        // Row r of the chain sees all but the last (count - 1 - r) keys.
        const int nk = static_cast<int>(keys.size()) - (g.count - 1 - r);
        const AttentionRow& row = rows[g.first + r];
        for (int h = kv_head * group_heads; h < (kv_head + 1) * group_heads; ++h) {
          queries.push_back(row.q + h * hd);
          outs.push_back(row.out + h * hd);
          n_keys.push_back(nk);
        }
      }
      if (cap > 0) {
        for (size_t i = 0; i < queries.size(); ++i)
          attend_softcapped(queries[i], keys.data(), values.data(), n_keys[i], hd, scale, cap,
                            scratch.scores, outs[i]);
      } else {
        attend_many(static_cast<int>(queries.size()), queries.data(), n_keys.data(), keys.data(),
                    values.data(), hd, scale, scratch, outs.data());
      }
    }
  });
}

}  // namespace parspec
