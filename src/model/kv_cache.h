#pragma once
// Per-sequence key/value cache with two parts:
//  - the committed prefix: tokens at positions 0..n_committed()-1, in order;
//  - the speculative area: cells for draft/tree tokens, each with a position
//    and a parent (another speculative cell, or -1 for "the end of the
//    committed prefix"). A speculative token attends to the committed prefix,
//    its ancestors (following parents) and itself.
// Committing a path of speculative cells appends them to the prefix; the rest
// of the speculative area is dropped (or selected cells are kept).
// Memory: committed + speculative cells never exceed the capacity given at
// construction; exceeding it throws Error.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/model_config.h"

namespace parspec {

// Rows of a cache kept elsewhere (a GPU's memory, src/cuda): the cache keeps
// the cells' bookkeeping and tells the store which rows commit() moves, so
// that the store moves its copy the same way. Slots are those of
// KvCache::committed_slot() and spec_slot().
class KvRowStore {
 public:
  virtual ~KvRowStore() = default;
  // Copies, in every layer, row from[i] to row to[i]: all reads before any write.
  virtual void move_rows(std::span<const int32_t> from, std::span<const int32_t> to) = 0;
};

class KvCache {
 public:
  // Cache for layers [layer_first, layer_last) of a model (layer_last = -1: all).
  KvCache(const ModelConfig& config, int32_t capacity, int layer_first = 0, int layer_last = -1);

  int32_t capacity() const { return capacity_; }
  int32_t n_committed() const { return n_committed_; }
  int32_t n_spec() const { return static_cast<int32_t>(spec_pos_.size()); }
  int layer_first() const { return layer_first_; }
  int layer_last() const { return layer_last_; }
  int kv_dim() const { return kv_dim_; }

  // Registers new speculative cells (one per entry) and returns the id of the
  // first; entry i gets id first + i. Parents must be -1 or ids of existing
  // cells (including earlier entries of the same call).
  int32_t add_cells(std::span<const int32_t> positions, std::span<const int32_t> parents);
  int32_t spec_position(int32_t cell) const { return spec_pos_.at(cell); }
  int32_t spec_parent(int32_t cell) const { return spec_parent_.at(cell); }

  // Appends the speculative cells `path` (each the parent of the next, the first
  // a child of the committed prefix) to the committed prefix. Speculative cells
  // listed in `keep` survive (renumbered 0.. in the order given; parents that
  // were committed become -1 — only allowed for the path's last cell); all
  // other speculative cells are dropped. Returns the new ids of `keep`.
  std::vector<int32_t> commit(std::span<const int32_t> path, std::span<const int32_t> keep = {});
  // Drops every speculative cell.
  void discard_spec();
  // Shrinks the committed prefix to n tokens (and drops speculative cells).
  void truncate(int32_t n);
  // Drops everything.
  void clear() { truncate(0); }

  // The slot (row index within a layer) of a committed position or speculative cell.
  int32_t committed_slot(int32_t pos) const { return pos; }
  int32_t spec_slot(int32_t cell) const { return capacity_ - 1 - cell; }

  // Hands the rows to `store`: from now on commit() moves the store's rows
  // and leaves the rows of this object (committed_k and the like) unwritten.
  void attach_store(std::unique_ptr<KvRowStore> store) { store_ = std::move(store); }
  KvRowStore* store() const { return store_.get(); }

  // Row of keys / values (kv_dim floats) of a committed position or speculative cell.
  float* committed_k(int layer, int32_t pos) { return row(k_, layer, pos); }
  float* committed_v(int layer, int32_t pos) { return row(v_, layer, pos); }
  float* spec_k(int layer, int32_t cell) { return row(k_, layer, capacity_ - 1 - cell); }
  float* spec_v(int layer, int32_t cell) { return row(v_, layer, capacity_ - 1 - cell); }

  // Speculative ancestors of `cell` (not itself), oldest first.
  void ancestors(int32_t cell, std::vector<int32_t>& out) const;

 private:
  float* row(const std::unique_ptr<float[]>& buf, int layer, int32_t slot) {
    return buf.get() + (static_cast<size_t>(layer - layer_first_) * capacity_ + slot) * kv_dim_;
  }

  int32_t capacity_;
  int layer_first_, layer_last_;
  int kv_dim_;
  int32_t n_committed_ = 0;
  // Speculative cell c lives in slot capacity_-1-c, so the two parts grow
  // towards each other inside one buffer.
  std::vector<int32_t> spec_pos_, spec_parent_;
  // Left uninitialized: only written cells are read, and zeroing a 4096-token
  // cache of a 1B-class model (268 MB) cost every request tens of milliseconds
  // before its first token; untouched pages are never faulted in.
  std::unique_ptr<float[]> k_, v_;
  std::unique_ptr<KvRowStore> store_;
};

}  // namespace parspec
