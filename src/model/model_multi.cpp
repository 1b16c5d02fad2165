// Model::forward_multi: several sequences, each with its own KvCache, in one
// pass. Row-wise work (norms, RoPE, SwiGLU) and the matrix multiplies run over
// the rows of all sequences concatenated; attention runs per sequence over its
// own cache. Every step is the one forward() does for a row (the kernels are
// batch invariant, docs/design.md), so each sequence's logits equal a solo
// forward bit for bit. Kept apart from model.cpp so the single-sequence path
// stays as it is.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/attention_rows.h"
#include "model/model.h"

namespace parspec {

std::vector<std::vector<float>> Model::forward_multi(
    Worker& worker, std::span<const SequenceBatch> sequences) const {
  const ModelConfig& c = config_;
  const size_t n_seq = sequences.size();
  // Row offsets of each sequence in the concatenated batch.
  std::vector<int> offset(n_seq + 1, 0);
  for (size_t s = 0; s < n_seq; ++s) {
    const Batch& b = *sequences[s].batch;
    const size_t n = b.size();
    check(b.positions.size() == n && b.parents.size() == n && b.want_logits.size() == n,
          "forward_multi: batch arrays differ in length");
    check(sequences[s].kv->layer_first() == 0 && sequences[s].kv->layer_last() == c.n_layer,
          "forward_multi: the cache must cover all layers");
    for (size_t t = 0; t < s; ++t)
      check(sequences[t].kv != sequences[s].kv, "forward_multi: two batches share a cache");
    offset[s + 1] = offset[s] + static_cast<int>(n);
  }
  const int n = offset[n_seq];
  std::vector<std::vector<float>> out(n_seq);
  if (n == 0) return out;
  // One RoPE table for all rows: LongRoPE's choice by cache size must agree.
  const bool long_rope = long_context(*sequences[0].kv);
  for (size_t s = 1; s < n_seq; ++s)
    check(long_context(*sequences[s].kv) == long_rope,
          "forward_multi: caches on both sides of the model's original context");

  std::vector<float> hidden(static_cast<size_t>(n) * c.n_embd);
  std::vector<int32_t> first_cell(n_seq);
  std::vector<int32_t> positions(n);
  for (size_t s = 0; s < n_seq; ++s) {
    const Batch& b = *sequences[s].batch;
    embed(b.tokens, &hidden[static_cast<size_t>(offset[s]) * c.n_embd]);
    std::copy(b.positions.begin(), b.positions.end(), positions.begin() + offset[s]);
  }
  // Cells are added only once every batch passed embed()'s token check.
  for (size_t s = 0; s < n_seq; ++s)
    first_cell[s] =
        sequences[s].kv->add_cells(sequences[s].batch->positions, sequences[s].batch->parents);

  std::vector<int> row_seq(n);  // each row's sequence
  for (size_t s = 0; s < n_seq; ++s)
    for (int i = offset[s]; i < offset[s + 1]; ++i) row_seq[i] = static_cast<int>(s);

  const int q_dim = c.q_dim(), kv_dim = c.kv_dim();
  std::vector<float> xn(static_cast<size_t>(n) * c.n_embd), q(static_cast<size_t>(n) * q_dim),
      k(static_cast<size_t>(n) * kv_dim), v(static_cast<size_t>(n) * kv_dim),
      att(static_cast<size_t>(n) * q_dim), o(static_cast<size_t>(n) * c.n_embd);
  std::vector<AttentionRow> rows(n);

  for (int layer = 0; layer < c.n_layer; ++layer) {
    // Attention block (as attention_block(), over all rows).
    project_qkv(worker, layer, hidden.data(), n, positions, long_rope, xn.data(), q.data(),
                k.data(), v.data());
    for (int i = 0; i < n; ++i) {
      const float* ki = &k[static_cast<size_t>(i) * kv_dim];
      const float* vi = &v[static_cast<size_t>(i) * kv_dim];
      const size_t s = static_cast<size_t>(row_seq[i]);
      const int32_t cell = first_cell[s] + (i - offset[s]);
      std::memcpy(sequences[s].kv->spec_k(layer, cell), ki, sizeof(float) * kv_dim);
      std::memcpy(sequences[s].kv->spec_v(layer, cell), vi, sizeof(float) * kv_dim);
    }
    for (int i = 0; i < n; ++i) {
      const size_t s = static_cast<size_t>(row_seq[i]);
      rows[i] =
          AttentionRow{sequences[s].kv, first_cell[s] + (i - offset[s]),
                       &q[static_cast<size_t>(i) * q_dim], &att[static_cast<size_t>(i) * q_dim]};
    }
    attend_rows(worker, c, layer, rows);
    attention_projection(worker, layer, att.data(), n, o.data());
    add_inplace(hidden.data(), o.data(), n * c.n_embd);

    // MLP block: row-wise, so all sequences' rows at once.
    mlp_block(worker, layer, n, hidden.data());
  }

  // Output rows of every sequence that wants logits, in one multiply.
  std::vector<int> out_rows;
  for (int i = 0; i < n; ++i) {
    const size_t s = static_cast<size_t>(row_seq[i]);
    if (sequences[s].batch->want_logits[i - offset[s]]) out_rows.push_back(i);
  }
  const size_t n_vocab = static_cast<size_t>(c.n_vocab);
  std::vector<float> selected(out_rows.size() * c.n_embd);
  for (size_t r = 0; r < out_rows.size(); ++r)
    std::memcpy(&selected[r * c.n_embd], &hidden[static_cast<size_t>(out_rows[r]) * c.n_embd],
                sizeof(float) * c.n_embd);
  std::vector<float> logits(out_rows.size() * n_vocab);
  if (!out_rows.empty())
    output_logits(worker, selected.data(), static_cast<int>(out_rows.size()), logits.data());
  for (size_t r = 0; r < out_rows.size(); ++r) {
    const float* row = logits.data() + r * n_vocab;
    if (std::isnan(row[0])) {
      bool all_nan = true;
      for (size_t j = 1; j < n_vocab && all_nan; ++j) all_nan = std::isnan(row[j]);
      check(!all_nan, file_->path(), ": the model computed NaN for all ", n_vocab,
            " logits (its weights hold NaN/Inf or its activations overflow)");
    }
    auto& dst = out[static_cast<size_t>(row_seq[out_rows[r]])];
    dst.insert(dst.end(), row, row + n_vocab);
  }
  return out;
}

}  // namespace parspec
