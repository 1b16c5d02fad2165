#pragma once
// MPI for the distributed runtime (docs/distributed.md): initialised only when
// the process was started by mpirun, non-blocking point-to-point messages
// with optional link emulation, and waits that end with an error after a
// timeout instead of hanging.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"

namespace parspec::mpi {

// True when mpirun (OpenMPI, MPICH/Hydra or a PMIx launcher) started this
// process: only then is MPI initialised, so a plain `parspec` run never
// touches MPI.
bool launched_by_mpirun();

// Message tags. Pipeline messages (kPipe) travel stage to stage in order;
// the others go straight between the head and one stage.
enum Tag : int {
  kSetup = 1,   // head → stage: layer range, threads, model identity
  kSetupReply,  // stage → head: ready, or why not
  kPipe,        // stage r-1 → stage r: begin, forward, commit, truncate, quit
  kLogits,      // last stage → head: a forward's logits
  kCancel,      // head → every stage: skip this forward
  kProgress,    // stage → head: finished this forward (to name a stuck rank)
  kError,       // stage → head: a failure, with its message
  kSlotSetup,   // head → drafter slot (easyspec): model identity, link
  kSlotResult,  // drafter slot → head: a group's attention outputs and KV rows
};

// Operations of the ordered stream from the head (tag kPipe): the pipeline's
// (mpi/pipeline.h), then the drafter slots' (mpi/group_ranks.h). kQuit ends
// either.
enum Op : int32_t {
  kBegin = 1,
  kForward,
  kCommit,
  kTruncate,
  kQuit,
  kSlotBegin,
  kSlotEnd,
  kSlotCells,
  kSlotRows,
  kSlotAttention,
  kSlotCommit,
  kSlotTruncate,
};

// Emulated interconnect: every message is delivered `latency_us` after it
// was sent plus its size at `gbps`, messages on one link one after another
// (serialised on the wire, overlapping in flight: a sender never waits, and
// the receiver keeps working until a message is due). Emulation assumes the
// ranks share a clock (one machine).
struct LinkEmulation {
  double latency_us = 0;
  double gbps = 0;  // 0: unlimited
  bool active() const { return latency_us > 0 || gbps > 0; }
  std::string describe() const;
};

// A flat byte buffer with typed appends and reads.
class Bytes {
 public:
  Bytes() = default;
  explicit Bytes(std::vector<uint8_t> data) : data_(std::move(data)) {}
  template <typename T>
  void put(const T& v) {
    append(&v, sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    put<int64_t>(static_cast<int64_t>(v.size()));
    append(v.data(), v.size() * sizeof(T));
  }
  void put_string(const std::string& s) { put_vector(std::vector<char>(s.begin(), s.end())); }
  template <typename T>
  T get() {
    check(read_ + sizeof(T) <= data_.size(), "distributed: a message ended early");
    T v;
    std::memcpy(&v, data_.data() + read_, sizeof(T));
    read_ += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const int64_t n = get<int64_t>();
    check(n >= 0 && read_ + n * sizeof(T) <= data_.size(), "distributed: a message ended early");
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), data_.data() + read_, n * sizeof(T));
    read_ += n * sizeof(T);
    return v;
  }
  std::string get_string() {
    const std::vector<char> c = get_vector<char>();
    return std::string(c.begin(), c.end());
  }
  std::vector<uint8_t>& data() { return data_; }
  const std::vector<uint8_t>& data() const { return data_; }
  size_t size() const { return data_.size(); }

 private:
  // Appended by insert, not resize and copy: GCC 12 mistakes the zero fill
  // of a resize it inlined for a write out of bounds (-Warray-bounds).
  void append(const void* bytes, size_t n) {
    const auto* first = static_cast<const uint8_t*>(bytes);
    data_.insert(data_.end(), first, first + n);
  }
  std::vector<uint8_t> data_;
  size_t read_ = 0;
};

struct Message {
  int source = -1;
  int tag = 0;
  Bytes body;
};

// A wait that ran past its limit; `rank` is the peer waited for (-1: any).
class TimeoutError : public Error {
 public:
  TimeoutError(const std::string& what, int peer) : Error(what), rank(peer) {}
  int rank;
};

// MPI_COMM_WORLD of this process, from MPI_Init to MPI_Finalize.
class Transport {
 public:
  // MPI_Init_thread (funneled: only the thread that made the transport calls
  // MPI; PEARL's drafter thread never does).
  Transport(int* argc, char*** argv);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  void set_link(const LinkEmulation& link) { link_ = link; }
  const LinkEmulation& link() const { return link_; }

  // Starts sending (MPI_Isend); the bytes are kept until the send completes.
  void send(int dest, int tag, Bytes body);
  // The next message from `source` (or any: -1) with `tag` (or any: -1) if
  // one has arrived (and, emulated, is due); never waits.
  bool poll(int source, int tag, Message* out);
  // Waits for such a message; throws TimeoutError after timeout_s (< 0: no limit).
  Message receive(int source, int tag, double timeout_s);
  // Waits (at most timeout_s) until every send has completed; false on timeout.
  bool flush(double timeout_s);
  // Ends the job: every rank is killed by the launcher (MPI_Abort).
  [[noreturn]] void abort(int code);

 private:
  void reap_sends();
  // Moves every message MPI holds into inbox_, stamped with when it is due.
  void take_arrivals();
  // When an emulated link delivers a message sent at `sent_ns` of `bytes`
  // bytes from `source` (its wire time after the link's previous message).
  int64_t due_ns(int source, int64_t sent_ns, size_t bytes);

  int rank_ = 0, size_ = 1;
  LinkEmulation link_;
  struct PendingSend {
    std::vector<uint8_t> data;
    void* request;  // MPI_Request, kept opaque here
  };
  std::deque<PendingSend> sends_;
  // Received from MPI, in arrival order (the order of sending, per source).
  struct Arrival {
    int source, tag;
    int64_t due_ns;             // when the (emulated) link hands it over
    std::vector<uint8_t> data;  // the envelope stripped
  };
  std::deque<Arrival> inbox_;
  std::map<int, int64_t> link_free_ns_;  // per source: when its link is free again
};

// Waits with a short spin (low latency when a core is free), then short
// sleeps (cheap when ranks share cores).
class Backoff {
 public:
  void pause();

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int spins_ = 0;
};

int64_t monotonic_ns();

}  // namespace parspec::mpi
