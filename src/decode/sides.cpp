#include "decode/sides.h"

#include <numeric>

#include "core/error.h"

namespace parspec {

Batch chain_batch(int32_t n_committed, std::span<const int32_t> tokens, bool all_logits) {
  Batch b;
  const int32_t n = static_cast<int32_t>(tokens.size());
  for (int32_t i = 0; i < n; ++i)
    b.add(tokens[i], n_committed + i, i == 0 ? -1 : i - 1, all_logits || i == n - 1);
  return b;
}

namespace {

std::vector<int32_t> first_cells(int32_t n) {
  std::vector<int32_t> path(n);
  std::iota(path.begin(), path.end(), 0);
  return path;
}

}  // namespace

void Target::commit_chain(int32_t n) {
  commit(first_cells(n), {});
}

int64_t Target::submit(const Batch& batch) {
  submitted_[next_ticket_] = forward(batch);
  return next_ticket_++;
}

std::vector<float> Target::collect(int64_t ticket) {
  const auto found = submitted_.find(ticket);
  check(found != submitted_.end(), "target: no forward ", ticket, " to collect");
  std::vector<float> logits = std::move(found->second);
  submitted_.erase(found);
  return logits;
}

bool Target::arrived(int64_t) {
  return false;
}

void Target::cancel(int64_t ticket) {
  submitted_.erase(ticket);
}

std::vector<float> Drafter::catch_up(std::span<const int32_t> sequence, int32_t* n_cells) {
  check(n_spec() == 0, "drafter: catch_up with speculative cells in place");
  const size_t seen = static_cast<size_t>(n_seen());
  check(seen < sequence.size(), "drafter: nothing to catch up on");
  const std::span<const int32_t> tail = sequence.subspan(seen);
  *n_cells = static_cast<int32_t>(tail.size());
  return propose(chain_batch(n_seen(), tail, false));
}

void Drafter::accept_chain(int32_t n) {
  accept(first_cells(n), {});
}

}  // namespace parspec
