#pragma once
// The two sides of draft-and-verify as objects, so that a strategy is written
// once against them and runs on whatever implements them (docs/design.md,
// "Targets and drafters", says how the planned systems plug in).
//
// Both sides hold a sequence the way a KvCache does: a committed prefix and,
// on top of it, speculative cells that a forward appends (cell ids
// n_spec().. at call time) and that commit() turns into committed tokens or
// drops. Entries of a Batch are (token, position, parent cell or -1 for the
// committed end); a chain is each entry the parent of the next, a tree the
// general case. Nothing here says where the layers run: the local
// implementations (local_model.h) run a Model on a Worker in this process.
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "model/model.h"

namespace parspec {

// Forwards a side ran and their wall time, accumulated until taken.
struct ForwardMeter {
  int64_t forwards = 0;
  double ms = 0;
  // A mixture-of-experts model's layer passes and the distinct experts they touched.
  int64_t expert_layer_passes = 0;
  int64_t experts_touched = 0;
};

// A chain continuing a committed prefix of n_committed tokens: positions
// n_committed.., logits for every entry or only the last.
Batch chain_batch(int32_t n_committed, std::span<const int32_t> tokens, bool all_logits);

// The model whose output is final: it checks drafts. Its committed sequence is
// the request's tokens minus the last one (which the next forward starts with).
class Target {
 public:
  virtual ~Target() = default;
  virtual int n_vocab() const = 0;
  // A new request: an empty sequence with room for `capacity` cells
  // (committed + speculative).
  virtual void begin(int32_t capacity) = 0;
  virtual int32_t n_committed() const = 0;
  virtual int32_t n_spec() const = 0;
  // Runs the batch as new speculative cells; returns the logits (n_vocab
  // floats each) of the entries that want them, in batch order.
  virtual std::vector<float> forward(const Batch& batch) = 0;
  // Appends the speculative cells `path` (each the child of the previous, the
  // first a child of the committed end) to the committed sequence, keeps the
  // cells `keep` (a subtree below the path, renumbered 0.. in this order; the
  // new ids are returned) and drops the rest.
  virtual std::vector<int32_t> commit(std::span<const int32_t> path,
                                      std::span<const int32_t> keep) = 0;
  // Rolls the committed sequence back to its first n tokens.
  virtual void truncate(int32_t n) = 0;
  // Forwards and their time since the last call.
  virtual ForwardMeter take_meter() = 0;

  // Pipelined use: submit() starts a forward (its cells are numbered at
  // once, as forward() numbers them) and collect() waits for its logits, so a
  // target whose layers run as stages on other processes can have several
  // batches in flight (PipeDec). Here, a forward that runs at submit().
  virtual int64_t submit(const Batch& batch);
  virtual std::vector<float> collect(int64_t ticket);
  // Without waiting: whether collect(ticket) has its logits back from a
  // pipeline, so that a strategy can act on them before drafting more. A
  // target that runs forwards at submit() says false: a pipelined strategy
  // then fills its pipeline as if the forward were still on its way.
  virtual bool arrived(int64_t ticket);
  // The forward's logits will not be collected: a pipelined target may skip
  // its work. Its cells keep their ids (their contents are undefined) until
  // a commit drops them; nothing may descend from them.
  virtual void cancel(int64_t ticket);

  // Commits speculative cells 0..n-1 (a chain).
  void commit_chain(int32_t n);

 private:
  std::map<int64_t, std::vector<float>> submitted_;
  int64_t next_ticket_ = 0;
};

// The side that proposes: it scores draft tokens (the next-token logits after
// each node of a chain or tree the strategy grows within its budget) on top of
// the sequence it has seen, and follows the committed sequence: what the
// target accepted is accepted here too, the rest is rolled back. It may lag
// behind the sequence (catch_up() feeds what it has not seen).
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual int n_vocab() const = 0;
  virtual void begin(int32_t capacity) = 0;
  // Tokens of the sequence the drafter has accepted.
  virtual int32_t n_seen() const = 0;
  virtual int32_t n_spec() const = 0;
  // Scores draft nodes: runs them as new speculative cells and returns the
  // logits of those that want them, in batch order.
  virtual std::vector<float> propose(const Batch& nodes) = 0;
  // As Target::commit: the path becomes part of the seen sequence, `keep`
  // survives renumbered.
  virtual std::vector<int32_t> accept(std::span<const int32_t> path,
                                      std::span<const int32_t> keep) = 0;
  // Forgets everything after the first n tokens of the sequence.
  virtual void roll_back(int32_t n) = 0;
  virtual ForwardMeter take_meter() = 0;

  // Feeds the tokens of `sequence` after n_seen() (none may be speculative
  // now) as a chain of cells 0..n-1; returns the logits after the last one.
  // *n_cells = n (at least 1).
  std::vector<float> catch_up(std::span<const int32_t> sequence, int32_t* n_cells);
  // Accepts speculative cells 0..n-1 (a chain).
  void accept_chain(int32_t n);
};

}  // namespace parspec
