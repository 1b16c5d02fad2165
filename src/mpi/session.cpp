// The MPI lifecycle of a process: starting and ending the session, the
// ranks' role, aborting the job, and the checks every rank makes on its file.
#include "mpi/session.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "mpi/pipeline.h"

namespace parspec::mpi {

namespace {

std::unique_ptr<Session> g_session;

}  // namespace

std::unique_ptr<Session>& session_holder() {
  return g_session;
}

std::string layer_range(int first, int last) {
  return "layers " + std::to_string(first) + "-" + std::to_string(last - 1);
}

Session* session() {
  return g_session.get();
}

std::string host_name() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

Transport& session_transport() {
  check(g_session != nullptr, "distributed: no MPI session (run under mpirun)");
  return g_session->transport;
}

void claim_ranks(const std::string& role) {
  Session& s = *g_session;
  check(s.role.empty() || s.role == role, "the other ranks of this mpirun job already serve as ",
        s.role, ", so they cannot also serve as ", role, ": run these strategies in separate jobs");
  s.role = role;
}

void abort_unanswered(int rank, double timeout_s) {
  char s[200];
  std::snprintf(s, sizeof s,
                "rank %d did not answer for %.0f s (it stopped, hangs or is unreachable; "
                "--dist-timeout sets the limit)",
                rank, timeout_s);
  abort_job(s, 1);
}

bool start_session(int* argc, char*** argv) {
  if (!launched_by_mpirun()) return false;
  g_session = std::make_unique<Session>(argc, argv);
  return true;
}

int session_rank() {
  return g_session ? g_session->transport.rank() : 0;
}

bool distributed_run() {
  return g_session && g_session->transport.rank() == 0 && g_session->transport.size() >= 2;
}

void end_session(int code) {
  if (!g_session) return;
  Transport& t = g_session->transport;
  if (t.rank() == 0) {
    if (g_session->pipeline) {
      try {
        g_session->pipeline->quit(code);
      } catch (const std::exception&) {
      }
    } else {
      for (int r = 1; r < t.size(); ++r) {
        Bytes b;
        b.put<int32_t>(kQuit);
        b.put<int32_t>(code);
        t.send(r, kPipe, std::move(b));
      }
    }
  }
  g_session.reset();
}

void abort_job(const std::string& message, int code) {
  std::fprintf(stderr, "parspec: error: %s; ending every rank\n", message.c_str());
  if (g_session) g_session->transport.abort(code);
  std::_Exit(code);
}

FileIdentity identify_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open ", path);
  FileIdentity id;
  in.seekg(0, std::ios::end);
  id.size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  std::vector<char> head(std::min<uint64_t>(id.size, 1 << 20));
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  uint64_t h = 1469598103934665603ULL;
  for (char c : head) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ULL;
  id.hash = h;
  return id;
}

}  // namespace parspec::mpi
