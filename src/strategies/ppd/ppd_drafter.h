#pragma once
// PPD on the drafter: a Drafter whose model decodes with trained prompt tokens
// ("Hardware-Aware Parallel Prompt Decoding for Memory-Efficient Acceleration
// of LLM Inference"), so that a drafting strategy (`sd`) runs fewer drafter
// forwards for the same drafts.
//
// Lossless by construction: every forward the strategy asks for also runs a
// chain of guesses below its last entry (the top-1 tokens that an earlier
// forward's prompt tokens predicted for those positions) and, below that
// entry, the prompt-token rows (strategies/ppd/ppd_prompts.h). A guess
// row is an ordinary token row with its ancestors, so its logits are exactly
// what a forward of that token would give (the kernels are batch-invariant).
// When the strategy's next proposal is one node equal to a guess, the guess's
// logits are returned without a forward and its cell becomes the strategy's.
// Guesses not taken and prompt-token cells are hidden: n_spec() and the cell
// ids the strategy sees are exactly a plain ModelDrafter's, and they are dropped
// before the next forward and at accept().
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "decode/local_model.h"
#include "decode/registry.h"
#include "decode/sides.h"
#include "strategies/ppd/ppd_prompts.h"

namespace parspec {

class PpdDrafter final : public Drafter {
 public:
  // Throws Error when the prompts were not made for a model of this width.
  PpdDrafter(std::shared_ptr<const Model> model, Worker& worker, PpdPrompts prompts);

  int n_vocab() const override { return seq_.model().config().n_vocab; }
  void begin(int32_t capacity) override;
  int32_t n_seen() const override;
  int32_t n_spec() const override { return static_cast<int32_t>(visible_.size()); }
  std::vector<float> propose(const Batch& nodes) override;
  std::vector<int32_t> accept(std::span<const int32_t> path,
                              std::span<const int32_t> keep) override;
  void roll_back(int32_t n) override;
  ForwardMeter take_meter() override { return seq_.take_meter(); }

  // Proposals answered from a guess (no forward) since the drafter was made.
  int64_t guesses_taken() const { return guesses_taken_; }

 private:
  struct Guess {
    int32_t cell, parent, token, position;
    std::vector<float> logits;
  };
  // Hidden cell rows one forward adds at most: k guesses and k*E prompt rows.
  int32_t hidden_rows() const;
  // Drops the hidden cells, so that cache cell i is the strategy's cell i again.
  void drop_hidden();
  // Top-1 tokens the prompt tokens below `cell` (-1: the committed end)
  // predict for the positions after its child, null when none.
  const std::vector<int32_t>* predictions_below(int32_t cell) const;
  // The predicted tokens for the positions after `position` on the chain
  // through `cell`, from the nearest cell at or above it with prompt tokens.
  std::vector<int32_t> predictions_after(int32_t cell, int32_t position) const;
  // Guess tokens to run after the last entry of `nodes` (whose new cells
  // start at `first`), from the predictions below the cell its chain hangs from.
  std::vector<int32_t> guesses_after(const Batch& nodes, int32_t first) const;
  std::vector<float> forward(const Batch& nodes);

  mutable LocalSequence seq_;
  PpdPrompts prompts_;
  std::vector<int32_t> visible_;  // the strategy's cell i -> cache cell
  std::vector<Guess> guesses_;    // of the last forward, not yet taken
  // Cache cell (-1: the committed end) -> the top-1 tokens of its prompt
  // tokens: positions +2, +3, ... after the cell.
  std::map<int32_t, std::vector<int32_t>> predicted_;
  int64_t guesses_taken_ = 0;
};

// `--draft-ppd FILE`: the drafter decodes with these prompt tokens.
StrategyOption draft_ppd_option();
// A PpdDrafter on the config's draft model and draft worker when the config
// asks for one (draft_ppd_option()) and brings no drafter of its own, else null.
std::unique_ptr<Drafter> ppd_drafter_if_asked(const StrategyConfig& config);

}  // namespace parspec
