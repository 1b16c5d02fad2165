#include "strategies/ppd/ppd_drafter.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "sample/sampler.h"

namespace parspec {

PpdDrafter::PpdDrafter(std::shared_ptr<const Model> model, Worker& worker, PpdPrompts prompts)
    : seq_(std::move(model), worker, "draft model"), prompts_(std::move(prompts)) {
  try {
    prompts_.check_fits(seq_.model());
  } catch (const Error& e) {
    fail("draft model: ", e.what());
  }
}

int32_t PpdDrafter::hidden_rows() const {
  const int32_t k = prompts_.prompt_tokens;
  return k + k * prompts_.ensemble_tokens;
}

void PpdDrafter::begin(int32_t capacity) {
  seq_.begin(capacity + hidden_rows());
  visible_.clear();
  guesses_.clear();
  predicted_.clear();
}

int32_t PpdDrafter::n_seen() const {
  return seq_.kv().n_committed();
}

void PpdDrafter::drop_hidden() {
  KvCache& kv = seq_.kv();
  guesses_.clear();
  std::vector<int32_t> identity(visible_.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (kv.n_spec() == n_spec() && visible_ == identity) return;
  const std::vector<int32_t> new_id = kv.commit({}, visible_);
  std::map<int32_t, std::vector<int32_t>> kept;
  for (auto& [cell, tokens] : predicted_) {
    if (cell < 0) {
      kept[cell] = std::move(tokens);
      continue;
    }
    const auto it = std::find(visible_.begin(), visible_.end(), cell);
    if (it != visible_.end()) kept[new_id[it - visible_.begin()]] = std::move(tokens);
  }
  predicted_ = std::move(kept);
  visible_ = identity;
}

const std::vector<int32_t>* PpdDrafter::predictions_below(int32_t cell) const {
  const auto it = predicted_.find(cell);
  return it == predicted_.end() ? nullptr : &it->second;
}

std::vector<int32_t> PpdDrafter::predictions_after(int32_t cell, int32_t position) const {
  // Up from `cell` (a chain: the tokens between were drafted below it) to the
  // nearest cell with prompt tokens below it.
  const KvCache& kv = seq_.kv();
  for (;;) {
    const int32_t cell_position = cell < 0 ? kv.n_committed() - 1 : kv.spec_position(cell);
    if (const std::vector<int32_t>* p = predictions_below(cell)) {
      // p[i] is for position cell_position + 2 + i.
      const int32_t from = position + 1 - (cell_position + 2);
      if (from < 0 || from >= static_cast<int32_t>(p->size())) return {};
      return std::vector<int32_t>(p->begin() + from, p->end());
    }
    if (cell < 0) return {};
    cell = kv.spec_parent(cell);
  }
}

std::vector<float> PpdDrafter::propose(const Batch& nodes) {
  check(!nodes.tokens.empty(), "drafter: an empty batch");
  for (int32_t parent : nodes.parents)
    check(parent < n_spec() + static_cast<int32_t>(nodes.size()), "drafter: parent cell ", parent,
          " does not exist");
  // One node continuing a cell below which a guess for exactly it waits.
  const bool plain_token = nodes.input_embeddings.empty() || nodes.input_embeddings[0] == nullptr;
  if (nodes.size() == 1 && nodes.want_logits[0] && plain_token && nodes.parents[0] < n_spec()) {
    const int32_t parent = nodes.parents[0] < 0 ? -1 : visible_[nodes.parents[0]];
    for (auto g = guesses_.begin(); g != guesses_.end(); ++g) {
      if (g->parent != parent || g->token != nodes.tokens[0] || g->position != nodes.positions[0])
        continue;
      visible_.push_back(g->cell);
      std::vector<float> logits = std::move(g->logits);
      guesses_.erase(g);
      ++guesses_taken_;
      return logits;
    }
  }
  return forward(nodes);
}

std::vector<int32_t> PpdDrafter::guesses_after(const Batch& nodes, int32_t first) const {
  // Up the chain of plain tokens that ends in the last entry to the cell it
  // hangs below; m entries below it, the guesses start at its prediction m-1
  // (a tail of several tokens after an accept still gets guesses).
  int32_t row = static_cast<int32_t>(nodes.size()) - 1;
  auto plain = [&](int32_t r) {
    return nodes.input_embeddings.empty() || nodes.input_embeddings[r] == nullptr;
  };
  while (plain(row) && nodes.parents[row] >= first && nodes.parents[row] - first < row) {
    const int32_t up = nodes.parents[row] - first;
    if (nodes.positions[up] + 1 != nodes.positions[row]) return {};
    row = up;
  }
  if (!plain(row) || nodes.parents[row] >= first) return {};
  const int32_t anchor = nodes.parents[row];
  const KvCache& kv = seq_.kv();
  const int32_t anchor_position = anchor < 0 ? kv.n_committed() - 1 : kv.spec_position(anchor);
  if (nodes.positions[row] != anchor_position + 1) return {};
  return predictions_after(anchor, nodes.positions.back());
}

std::vector<float> PpdDrafter::forward(const Batch& nodes) {
  drop_hidden();  // the batch's parents are now cache cells
  KvCache& kv = seq_.kv();
  const int32_t first = kv.n_spec();
  const int32_t n = static_cast<int32_t>(nodes.size());
  Batch batch = nodes;
  if (batch.input_embeddings.empty()) batch.input_embeddings.assign(n, nullptr);

  // The tips: the last entry and its guesses, each a cache cell with a token and position.
  const int32_t last = n - 1;
  std::vector<int32_t> tip_rows = {last};
  const std::vector<int32_t> guesses = guesses_after(nodes, first);
  for (size_t i = 0; i < guesses.size(); ++i) {
    const int32_t row = static_cast<int32_t>(batch.size());
    const int32_t parent = first + tip_rows.back();
    batch.add(guesses[i], nodes.positions[last] + 1 + static_cast<int32_t>(i), parent, true);
    batch.input_embeddings.push_back(nullptr);
    tip_rows.push_back(row);
  }
  // Prompt-token rows below the last entry (the ensemble mask: E chains of k).
  const int k = prompts_.prompt_tokens;
  const std::vector<int32_t> prompt_rows = prompts_.append_rows(
      batch, batch.tokens[last], batch.positions[last], first + last, first, k);
  // Every entry from the last one on wants logits; map rows to their logits.
  batch.want_logits[last] = 1;
  std::vector<int32_t> logit_index(batch.size(), -1);
  int32_t n_logits = 0;
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch.want_logits[i]) logit_index[i] = n_logits++;
  const std::vector<float> logits = seq_.forward(batch);
  const size_t V = static_cast<size_t>(n_vocab());
  auto row_logits = [&](int32_t row) { return logits.data() + logit_index[row] * V; };

  // The strategy's logits: those of its entries that asked.
  std::vector<float> out;
  for (int32_t i = 0; i < n; ++i)
    if (nodes.want_logits[i]) out.insert(out.end(), row_logits(i), row_logits(i) + V);

  guesses_.clear();
  for (size_t t = 1; t < tip_rows.size(); ++t) {
    const int32_t tip = tip_rows[t];
    guesses_.push_back(Guess{first + tip, first + tip_rows[t - 1], batch.tokens[tip],
                             batch.positions[tip],
                             std::vector<float>(row_logits(tip), row_logits(tip) + V)});
  }
  // Prompt token p's logits averaged over its E virtual tokens; its top-1.
  std::vector<int32_t> top(k);
  for (int p = 0; p < k; ++p)
    top[p] =
        argmax(prompts_.mean_logits(prompt_rows, p, V, row_logits).data(), static_cast<int>(V));
  predicted_[first + last] = std::move(top);
  // The strategy sees its own entries only.
  for (int32_t i = 0; i < n; ++i) visible_.push_back(first + i);
  return out;
}

std::vector<int32_t> PpdDrafter::accept(std::span<const int32_t> path,
                                        std::span<const int32_t> keep) {
  auto cache_cells = [&](std::span<const int32_t> cells) {
    std::vector<int32_t> out;
    for (int32_t c : cells) {
      check(c >= 0 && c < n_spec(), "drafter: accept of cell ", c, ", which does not exist");
      out.push_back(visible_[c]);
    }
    return out;
  };
  const std::vector<int32_t> cache_path = cache_cells(path), cache_keep = cache_cells(keep);
  // The path's end becomes the committed end: what was predicted below it (or
  // above it on the path) still holds for the positions after it.
  std::map<int32_t, std::vector<int32_t>> kept;
  if (!cache_path.empty()) {
    const int32_t end_position = n_seen() + static_cast<int32_t>(cache_path.size()) - 1;
    std::vector<int32_t> p = predictions_after(cache_path.back(), end_position + 1);
    if (!p.empty()) kept[-1] = std::move(p);
  } else if (const auto* p = predictions_below(-1)) {
    kept[-1] = *p;
  }
  std::vector<std::vector<int32_t>> keep_predictions;
  for (int32_t c : cache_keep) {
    const auto* p = predictions_below(c);
    keep_predictions.push_back(p != nullptr ? *p : std::vector<int32_t>());
  }
  const std::vector<int32_t> new_id = seq_.kv().commit(cache_path, cache_keep);
  for (size_t i = 0; i < cache_keep.size(); ++i)
    if (!keep_predictions[i].empty()) kept[new_id[i]] = std::move(keep_predictions[i]);
  predicted_ = std::move(kept);
  guesses_.clear();
  visible_ = new_id;
  return new_id;
}

void PpdDrafter::roll_back(int32_t n) {
  if (seq_.kv().n_committed() <= n) return;
  seq_.kv().truncate(n);
  visible_.clear();
  guesses_.clear();
  predicted_.clear();
}

StrategyOption draft_ppd_option() {
  return option_entry(
      "--draft-ppd", "draft_ppd", "FILE",
      "the drafter decodes with these PPD prompt tokens (side file of the draft "
      "model, models/zoo/ppd_train.py): the same drafts from fewer drafter forwards",
      std::string());
}

std::unique_ptr<Drafter> ppd_drafter_if_asked(const StrategyConfig& config) {
  const std::string path = option_value<std::string>(config, draft_ppd_option());
  // Without models the strategy's own checks name what is missing.
  if (path.empty() || config.draft == nullptr || config.target_worker == nullptr) return nullptr;
  if (config.make_drafter) return nullptr;
  Worker& worker = config.draft_worker != nullptr ? *config.draft_worker : *config.target_worker;
  try {
    return std::make_unique<PpdDrafter>(config.draft, worker, PpdPrompts::load(path));
  } catch (const Error& e) {
    fail("--draft-ppd: ", e.what());
  }
}

}  // namespace parspec
