#include "mpi/transport.h"

// The C API only (OpenMPI and MPICH otherwise pull in their deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sched.h>
#include <sys/prctl.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace parspec::mpi {

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

std::string LinkEmulation::describe() const {
  if (!active()) return "none (the ranks' real transport)";
  char s[160];
  std::snprintf(s, sizeof s, "EMULATED link: %.0f us latency, %s per message", latency_us,
                gbps > 0 ? (std::to_string(gbps) + " Gb/s").c_str() : "unlimited bandwidth");
  return s;
}

int64_t monotonic_ns() {
  // steady_clock is CLOCK_MONOTONIC on Linux: one clock for every process of a machine.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Backoff::pause() {
  // ~200 us of yielding spins, then 50 us sleeps.
  if (spins_ < 2000 && std::chrono::steady_clock::now() - start_ < std::chrono::microseconds(200)) {
    ++spins_;
    sched_yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

Transport::Transport(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  // Waits sleep in 50 µs steps (Backoff) and up to the emulated due time;
  // Linux's default timer slack would stretch each sleep by up to 50 µs more.
  prctl(PR_SET_TIMERSLACK, 1000UL);
  // Errors come back as codes (and end the job) rather than printing MPI's own abort banner first.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

Transport::~Transport() {
  flush(5.0);
  MPI_Finalize();
}

void Transport::send(int dest, int tag, Bytes body) {
  check(dest >= 0 && dest < size_, "distributed: no rank ", dest);
  // The envelope: send time (for link emulation), then the body.
  std::vector<uint8_t> data(sizeof(int64_t) + body.size());
  const int64_t now = monotonic_ns();
  std::memcpy(data.data(), &now, sizeof now);
  if (body.size() > 0) std::memcpy(data.data() + sizeof now, body.data().data(), body.size());
  PendingSend& s = sends_.emplace_back();
  s.data = std::move(data);
  auto* request = new MPI_Request;
  s.request = request;
  const int rc = MPI_Isend(s.data.data(), static_cast<int>(s.data.size()), MPI_BYTE, dest, tag,
                           MPI_COMM_WORLD, request);
  check(rc == MPI_SUCCESS, "distributed: sending to rank ", dest, " failed (MPI error ", rc, ")");
  reap_sends();
}

void Transport::reap_sends() {
  while (!sends_.empty()) {
    auto* request = static_cast<MPI_Request*>(sends_.front().request);
    int done = 0;
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    delete request;
    sends_.pop_front();
  }
}

bool Transport::flush(double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  Backoff backoff;
  while (!sends_.empty()) {
    reap_sends();
    if (sends_.empty()) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
        timeout_s) {
      return false;
    }
    backoff.pause();
  }
  return true;
}

int64_t Transport::due_ns(int source, int64_t sent_ns, size_t bytes) {
  if (!link_.active()) return 0;
  // The wire carries one message after another; latency overlaps: a message
  // is due its latency after its last byte left, however many are in flight.
  int64_t& free_ns = link_free_ns_[source];
  const int64_t wire_ns =
      link_.gbps > 0 ? static_cast<int64_t>(static_cast<double>(bytes) * 8.0 / link_.gbps) : 0;
  free_ns = std::max(free_ns, sent_ns) + wire_ns;
  return free_ns + static_cast<int64_t>(link_.latency_us * 1000.0);
}

void Transport::take_arrivals() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    const int rc = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &status);
    check(rc == MPI_SUCCESS, "distributed: MPI_Iprobe failed (MPI error ", rc, ")");
    if (!flag) return;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::vector<uint8_t> data(static_cast<size_t>(count));
    MPI_Recv(data.data(), count, MPI_BYTE, status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    check(count >= static_cast<int>(sizeof(int64_t)), "distributed: a message without envelope");
    int64_t sent_ns = 0;
    std::memcpy(&sent_ns, data.data(), sizeof sent_ns);
    Arrival& a = inbox_.emplace_back();
    a.source = status.MPI_SOURCE;
    a.tag = status.MPI_TAG;
    a.due_ns = due_ns(a.source, sent_ns, data.size());
    a.data.assign(data.begin() + sizeof(int64_t), data.end());
  }
}

bool Transport::poll(int source, int tag, Message* out) {
  reap_sends();
  take_arrivals();
  // Per source, messages fall due in arrival order (the wire is FIFO), so the
  // first matching message that is due is the one to hand over.
  const int64_t now = link_.active() ? monotonic_ns() : 0;
  for (auto a = inbox_.begin(); a != inbox_.end(); ++a) {
    if ((source >= 0 && a->source != source) || (tag >= 0 && a->tag != tag) || a->due_ns > now)
      continue;
    out->source = a->source;
    out->tag = a->tag;
    out->body = Bytes(std::move(a->data));
    inbox_.erase(a);
    return true;
  }
  return false;
}

Message Transport::receive(int source, int tag, double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  Backoff backoff;
  Message m;
  while (!poll(source, tag, &m)) {
    if (timeout_s >= 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s)
      throw TimeoutError("no message within " + std::to_string(timeout_s) + " s", source);
    // A message on an emulated wire: wait for exactly when it is due (sleep
    // while far, spin the last stretch: sleeps overshoot by tens of µs).
    int64_t due = -1;
    for (const Arrival& a : inbox_)
      if ((source < 0 || a.source == source) && (tag < 0 || a.tag == tag))
        due = due < 0 ? a.due_ns : std::min(due, a.due_ns);
    if (due < 0) {
      backoff.pause();
      continue;
    }
    const int64_t left = due - monotonic_ns();
    if (left > 150000) std::this_thread::sleep_for(std::chrono::nanoseconds(left - 100000));
  }
  return m;
}

void Transport::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace parspec::mpi
