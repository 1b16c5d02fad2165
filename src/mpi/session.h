#pragma once
// What the files of the MPI runtime share beside pipeline.h: the process's
// session (its transport, the head's pipeline, the role the other ranks
// serve) and the names a stage and the head use alike.
#include <cstdint>
#include <memory>
#include <string>

#include "mpi/pipeline.h"
#include "mpi/transport.h"

namespace parspec::mpi {

class Session {
 public:
  Session(int* argc, char*** argv) : transport(argc, argv) {}
  Transport transport;
  std::unique_ptr<Pipeline> pipeline;  // the head's, once started
  std::string role;                    // what the other ranks serve (claim_ranks)
};

// The process's session: null before start_session and after MPI ended.
std::unique_ptr<Session>& session_holder();

// What a stage did with a forward (its progress report).
enum ForwardFate : uint8_t { kRan = 0, kSkipped, kAbandoned };

// "layers a-b" of [first, last), for reports.
std::string layer_range(int first, int last);

}  // namespace parspec::mpi
