#pragma once
// Where the threads of a run's two workers go (--placement): not pinned, the
// draft on cores of its own next to the target's, or both on the target's
// cores (the resource competition of PEARL's appendix G).
#include <string>
#include <vector>

namespace parspec {

// The modes as the flag names them; the first is the default.
inline constexpr const char* kUnpinnedPlacement = "auto";
inline constexpr const char* kSeparatePlacement = "separate";
inline constexpr const char* kSharedPlacement = "shared";

struct CorePlacement {
  std::vector<int> target_cores, draft_cores;  // empty: not pinned
};

// The cores of a target worker of `threads` threads and a draft worker of
// `threads_draft` (0: none of its own) under `mode`, among the cores this
// process may use. Throws Error for an unknown mode or too few cores.
CorePlacement place_threads(const std::string& mode, int threads, int threads_draft);

}  // namespace parspec
