#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace parspec {

KvCache::KvCache(const ModelConfig& config, int32_t capacity, int layer_first, int layer_last)
    : capacity_(capacity),
      layer_first_(layer_first),
      layer_last_(layer_last < 0 ? config.n_layer : layer_last),
      kv_dim_(config.kv_dim()) {
  check(capacity > 0, "context size must be positive (got ", capacity, ")");
  check(layer_first_ >= 0 && layer_first_ <= layer_last_ && layer_last_ <= config.n_layer,
        "invalid layer range [", layer_first_, ", ", layer_last_, ") for a model with ",
        config.n_layer, " layers");
  const size_t n = static_cast<size_t>(layer_last_ - layer_first_) * capacity_ * kv_dim_;
  k_ = std::make_unique_for_overwrite<float[]>(n);
  v_ = std::make_unique_for_overwrite<float[]>(n);
}

int32_t KvCache::add_cells(std::span<const int32_t> positions, std::span<const int32_t> parents) {
  check(positions.size() == parents.size(), "add_cells: positions and parents differ in length");
  const int32_t first = n_spec();
  const int64_t needed = static_cast<int64_t>(n_committed_) + first + positions.size();
  if (needed > capacity_)
    fail("context size exceeded: ", needed, " tokens needed, the context holds ", capacity_,
         " (raise -c/--ctx-size)");
  for (size_t i = 0; i < positions.size(); ++i) {
    const int32_t parent = parents[i];
    check(parent >= -1 && parent < first + static_cast<int32_t>(i), "add_cells: entry ", i,
          " has parent ", parent, ", which is not an existing speculative cell");
    check(positions[i] >= 0, "add_cells: negative position ", positions[i]);
    spec_pos_.push_back(positions[i]);
    spec_parent_.push_back(parent);
  }
  return first;
}

void KvCache::ancestors(int32_t cell, std::vector<int32_t>& out) const {
  out.clear();
  for (int32_t c = spec_parent_.at(cell); c >= 0; c = spec_parent_[c]) out.push_back(c);
  std::reverse(out.begin(), out.end());
}

std::vector<int32_t> KvCache::commit(std::span<const int32_t> path, std::span<const int32_t> keep) {
  const int32_t n_spec_now = n_spec();
  std::vector<int32_t> new_id(n_spec_now, -1);
  for (size_t i = 0; i < path.size(); ++i) {
    const int32_t c = path[i];
    check(c >= 0 && c < n_spec_now, "commit: ", c, " is not a speculative cell");
    const int32_t expected_parent = i == 0 ? -1 : path[i - 1];
    check(spec_parent_[c] == expected_parent, "commit: cell ", c,
          " does not continue the committed path");
    check(spec_pos_[c] == n_committed_ + static_cast<int32_t>(i), "commit: cell ", c,
          " has position ", spec_pos_[c], ", expected ", n_committed_ + static_cast<int32_t>(i));
  }
  for (size_t i = 0; i < keep.size(); ++i) {
    const int32_t c = keep[i];
    check(c >= 0 && c < n_spec_now, "commit: kept cell ", c, " is not a speculative cell");
    check(new_id[c] == -1, "commit: cell ", c, " kept twice");
    check(std::find(path.begin(), path.end(), c) == path.end(), "commit: cell ", c,
          " is both committed and kept");
    new_id[c] = static_cast<int32_t>(i);
  }
  std::vector<int32_t> kept_parent(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) {
    const int32_t parent = spec_parent_[keep[i]];
    if (parent >= 0 && new_id[parent] >= 0) {
      kept_parent[i] = new_id[parent];
    } else if (!path.empty() ? parent == path.back() : parent == -1) {
      kept_parent[i] = -1;
    } else {
      fail("commit: kept cell ", keep[i],
           " hangs below a cell that is neither kept nor the end "
           "of the committed path");
    }
  }

  const size_t n_rows = path.size() + keep.size();
  if (store_ != nullptr) {
    std::vector<int32_t> from(n_rows), to(n_rows);
    for (size_t i = 0; i < n_rows; ++i) {
      from[i] = spec_slot(i < path.size() ? path[i] : keep[i - path.size()]);
      to[i] = i < path.size() ? committed_slot(n_committed_ + static_cast<int32_t>(i))
                              : spec_slot(static_cast<int32_t>(i - path.size()));
    }
    store_->move_rows(from, to);
  }
  // Destination slots of the committed rows may overlap source slots of the
  // speculative area, so gather every surviving row first. With a store, the
  // rows here are unused.
  const size_t row_floats = static_cast<size_t>(kv_dim_);
  std::vector<float> staged(store_ != nullptr ? 0 : 2 * n_rows * row_floats);
  const int rows_here_end = store_ != nullptr ? layer_first_ : layer_last_;
  for (int layer = layer_first_; layer < rows_here_end; ++layer) {
    for (size_t i = 0; i < n_rows; ++i) {
      const int32_t c = i < path.size() ? path[i] : keep[i - path.size()];
      std::memcpy(&staged[(2 * i) * row_floats], spec_k(layer, c), row_floats * sizeof(float));
      std::memcpy(&staged[(2 * i + 1) * row_floats], spec_v(layer, c), row_floats * sizeof(float));
    }
    const int32_t base = n_committed_;
    for (size_t i = 0; i < n_rows; ++i) {
      float* k_dst = i < path.size() ? committed_k(layer, base + static_cast<int32_t>(i))
                                     : spec_k(layer, static_cast<int32_t>(i - path.size()));
      float* v_dst = i < path.size() ? committed_v(layer, base + static_cast<int32_t>(i))
                                     : spec_v(layer, static_cast<int32_t>(i - path.size()));
      std::memcpy(k_dst, &staged[(2 * i) * row_floats], row_floats * sizeof(float));
      std::memcpy(v_dst, &staged[(2 * i + 1) * row_floats], row_floats * sizeof(float));
    }
  }

  std::vector<int32_t> kept_pos(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) kept_pos[i] = spec_pos_[keep[i]];
  n_committed_ += static_cast<int32_t>(path.size());
  spec_pos_ = std::move(kept_pos);
  spec_parent_ = std::move(kept_parent);
  std::vector<int32_t> result(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) result[i] = static_cast<int32_t>(i);
  return result;
}

void KvCache::discard_spec() {
  spec_pos_.clear();
  spec_parent_.clear();
}

void KvCache::truncate(int32_t n) {
  check(n >= 0 && n <= n_committed_, "truncate: cannot truncate ", n_committed_,
        " committed tokens to ", n);
  n_committed_ = n;
  discard_spec();
}

}  // namespace parspec
