#pragma once
// EasySpec's drafter slots on MPI ranks (docs/distributed.md): under
// `mpirun -np N parspec ... --strategy easyspec`, rank 0 (the head) keeps the
// target, verification and the drafter's layer-sequential parts; ranks 1..N-1
// each hold a replica of the draft model and of its KV cache and run, for
// every fuzzy layer group, the attention blocks of slot r (block i of a group
// runs on slot i % slots). The head sends a group's input hidden state h0 and
// gathers the outputs and the KV rows the blocks wrote; every edit of the
// drafter's cache (cells, the rows of layer-sequential forwards, commits,
// truncations) travels to the replicas in the same ordered stream, so each
// replica holds the head's rows for the layers it computes.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "mpi/transport.h"
#include "strategies/easyspec/layer_parallel.h"

namespace parspec::mpi {

struct SlotOptions {
  LinkEmulation link;
  double timeout_s = 60;  // the head's wait for a slot before it ends the job
};

// Executors on the job's ranks for StrategyConfig::make_group_executor; the
// slots start (once per process, claiming every rank but the head) on the
// first call. Null when this process is not the head of an mpirun job; an
// executor is null for groups of one layer each (nothing runs side by side).
std::function<std::unique_ptr<GroupExecutor>(const Model&, const std::vector<LayerGroup>&)>
draft_slot_executors(const SlotOptions& options);
// "rank 0 on host: head ...; rank 1 on host: drafter slot ..." once started; empty before.
std::string describe_draft_slots();

// A rank's life as a drafter slot, from the head's set-up message until quit;
// returns the exit code the head ended with.
int serve_draft_slot(Transport& t, Message& setup);

}  // namespace parspec::mpi
