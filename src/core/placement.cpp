#include "core/placement.h"

#include "core/error.h"
#include "core/worker.h"

namespace parspec {

CorePlacement place_threads(const std::string& mode, int threads, int threads_draft) {
  check(mode == kUnpinnedPlacement || mode == kSeparatePlacement || mode == kSharedPlacement,
        "--placement must be auto, separate or shared (got '", mode, "')");
  CorePlacement out;
  if (mode == kUnpinnedPlacement) return out;
  const std::vector<int> cores = allowed_cores();
  const int n = static_cast<int>(cores.size());
  check(threads <= n, "--placement ", mode, ": -t ", threads, " exceeds the ", n,
        " cores this process may use");
  out.target_cores.assign(cores.begin(), cores.begin() + threads);
  if (mode == kSeparatePlacement) {
    check(threads_draft >= 1,
          "--placement separate gives the draft cores of its own: give its threads with -td N");
    check(threads + threads_draft <= n, "--placement separate: -t ", threads, " + -td ",
          threads_draft, " exceed the ", n, " cores this process may use");
    out.draft_cores.assign(cores.begin() + threads, cores.begin() + threads + threads_draft);
  } else {
    out.draft_cores = out.target_cores;
  }
  return out;
}

}  // namespace parspec
