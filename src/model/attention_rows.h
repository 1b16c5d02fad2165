#pragma once
// Self-attention of a batch's rows over their KV caches: the part of a layer
// between the q/k/v projections and the output projection, shared by
// Model::forward() and Model::forward_multi().
#include <cstdint>
#include <span>

#include "core/worker.h"
#include "model/kv_cache.h"
#include "model/model_config.h"

namespace parspec {

struct AttentionRow {
  KvCache* kv;     // the row's cache; its keys/values of `layer` are already written
  int32_t cell;    // the row's speculative cell
  const float* q;  // q_dim floats: every head's query, after RoPE
  float* out;      // q_dim floats
};

// Each row's heads attend to the committed prefix of its cache, its
// speculative ancestors (oldest first) and itself: the keys of plain decoding,
// in the same order, so outputs are bit-identical however rows are batched.
// Consecutive rows of one chain (each the parent of the next) share their key
// list and run as one job per KV head, reading the keys once for all of them.
void attend_rows(Worker& worker, const ModelConfig& config, int layer,
                 std::span<const AttentionRow> rows);

}  // namespace parspec
