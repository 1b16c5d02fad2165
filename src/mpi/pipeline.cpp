#include "mpi/pipeline.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <numeric>
#include <sstream>
#include <utility>

#include "core/timer.h"
#include "core/worker.h"
#include "decode/registry.h"
#include "mpi/group_ranks.h"
#include "model/kv_cache.h"

namespace parspec::dist {

class Session {
 public:
  Session(int* argc, char*** argv) : transport(argc, argv) {}
  Transport transport;
  std::unique_ptr<Pipeline> pipeline;  // the head's, once started
  std::string role;                    // what the other ranks serve (claim_ranks)
};

namespace {

std::unique_ptr<Session> g_session;

// What a stage did with a forward (its progress report).
enum ForwardFate : uint8_t { kRan = 0, kSkipped, kAbandoned };

std::string layer_range(int first, int last) {
  return "layers " + std::to_string(first) + "-" + std::to_string(last - 1);
}

// One stage rank's state once set up.
struct Stage {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Worker> worker;
  std::unique_ptr<KvCache> kv;
  int layer_first = 0, layer_last = 0;
  int prev = 0, next = 0;  // neighbours; next = 0: the last stage (its logits go to the head)
  bool is_first = false, is_last = false;
  std::set<int64_t> cancelled;
  bool failed = false;  // after an error only quit is served
};

void setup_stage(Transport& t, Stage& s, Bytes& body) {
  const std::string path = body.get_string();
  const FileIdentity head_file{body.get<uint64_t>(), body.get<uint64_t>()};
  s.layer_first = body.get<int32_t>();
  s.layer_last = body.get<int32_t>();
  s.prev = body.get<int32_t>();
  s.next = body.get<int32_t>();
  const int threads = body.get<int32_t>();
  const bool embeds = body.get<uint8_t>() != 0;
  LinkEmulation link;
  link.latency_us = body.get<double>();
  link.gbps = body.get<double>();
  t.set_link(link);
  s.is_first = embeds;  // else the head ran the first layers (--head-layers)
  s.is_last = s.next == 0;
  const FileIdentity mine = identify_file(path);
  check(mine == head_file, "the model file ", path, " differs from rank 0's (size ", mine.size,
        " vs ", head_file.size, ", header hash ", mine.hash, " vs ", head_file.hash,
        "): every rank needs the same file");
  // The file is mapped, not read: only this stage's layers (and the output
  // matrix at the end) are read in, into 2 MiB pages (4 KiB page-cache pages
  // cost a TLB miss each as the weights stream by).
  s.model = Model::load(path);
  check(s.layer_last <= s.model->config().n_layer, "layer range beyond the model");
  s.model->hold_in_memory(s.layer_first, s.layer_last, s.is_last);
  s.worker = std::make_unique<Worker>(threads);
}

// CPU time of this process (every thread) in ms: beside the wall time of a
// forward it shows whether the stage computed or waited for a core.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// A forward as it travels: its batch and, after the first stage, hidden states.
struct ForwardMsg {
  int64_t ticket = 0;
  bool skipped = false;
  bool abandoned = false;  // started here, stopped by a cancel (and so skipped downstream)
  Batch batch;
  std::vector<float> hidden;
  // First stage only: rows whose token embedding is replaced (PPD's trained
  // prompt embeddings) and their vectors, n_embd floats each, in row order.
  std::vector<uint8_t> replaced;
  std::vector<float> replacements;
};

ForwardMsg parse_forward(const Stage& s, Bytes& body) {
  ForwardMsg f;
  f.ticket = body.get<int64_t>();
  f.skipped = body.get<uint8_t>() != 0;
  f.batch.tokens = body.get_vector<int32_t>();
  f.batch.positions = body.get_vector<int32_t>();
  f.batch.parents = body.get_vector<int32_t>();
  f.batch.want_logits = body.get_vector<uint8_t>();
  const size_t n = f.batch.size();
  check(f.batch.positions.size() == n && f.batch.parents.size() == n &&
            f.batch.want_logits.size() == n,
        "forward: batch arrays differ in length");
  if (s.is_first) {
    f.replaced = body.get_vector<uint8_t>();
    f.replacements = body.get_vector<float>();
    check(f.replaced.empty() || f.replaced.size() == n, "forward: replaced rows of the wrong size");
  }
  if (!s.is_first && !f.skipped) f.hidden = body.get_vector<float>();
  return f;
}

void pass_on(Transport& t, const Stage& s, const ForwardMsg& f, const std::vector<float>& logits,
             double ms, double cpu_ms) {
  Bytes out;
  if (s.is_last) {
    out.put<int64_t>(f.ticket);
    out.put<uint8_t>(f.skipped ? 1 : 0);
    out.put_vector(logits);
    t.send(0, kLogits, std::move(out));
  } else {
    out.put<int32_t>(kForward);
    out.put<int64_t>(f.ticket);
    out.put<uint8_t>(f.skipped ? 1 : 0);
    out.put_vector(f.batch.tokens);
    out.put_vector(f.batch.positions);
    out.put_vector(f.batch.parents);
    out.put_vector(f.batch.want_logits);
    if (!f.skipped) out.put_vector(f.hidden);
    t.send(s.next, kPipe, std::move(out));
  }
  Bytes progress;
  progress.put<int64_t>(f.ticket);
  progress.put<uint8_t>(f.abandoned ? kAbandoned : f.skipped ? kSkipped : kRan);
  progress.put<double>(ms);
  progress.put<double>(cpu_ms);
  t.send(0, kProgress, std::move(progress));
}

// Files every cancel that has arrived.
void take_cancels(Transport& t, Stage& s) {
  Message m;
  while (t.poll(0, kCancel, &m)) s.cancelled.insert(m.body.get<int64_t>());
}

// Whether every forward of the group that runs has been cancelled since.
bool all_cancelled(Transport& t, Stage& s, const std::vector<ForwardMsg>& group) {
  take_cancels(t, s);
  for (const ForwardMsg& f : group)
    if (!f.skipped && s.cancelled.count(f.ticket) == 0) return false;
  return true;
}

// Runs consecutive forwards that were waiting together as one batch (the
// stage's rule: when idle, take every forward queued; batch invariance makes
// each row's result the same as alone) and passes each on separately.
void run_forwards(Transport& t, Stage& s, std::vector<ForwardMsg>& group) {
  check(s.kv != nullptr, "forward before begin");
  const int n_embd = s.model->config().n_embd;
  Batch merged;
  std::vector<float> hidden;
  int32_t first_cell = -1;
  for (ForwardMsg& f : group) {
    // Cells are registered even when skipped, so that ids stay the same on every rank.
    const int32_t cell = s.kv->add_cells(f.batch.positions, f.batch.parents);
    if (first_cell < 0) first_cell = cell;
    f.skipped = f.skipped || s.cancelled.count(f.ticket) != 0;
    s.cancelled.erase(s.cancelled.begin(), s.cancelled.upper_bound(f.ticket));
    check(f.skipped || s.is_first || f.hidden.size() == f.batch.size() * n_embd,
          "forward: hidden states of the wrong size");
  }
  // Skipped forwards only register cells; the others run in one batch (their
  // cells are contiguous when no skipped forward lies between them, which the
  // caller's grouping ensures by ending a group at a skipped forward).
  size_t run_rows = 0;
  for (const ForwardMsg& f : group)
    if (!f.skipped) run_rows += f.batch.size();
  const Stopwatch watch;
  const double cpu_start = process_cpu_ms();
  std::vector<float> logits;
  if (run_rows > 0) {
    for (const ForwardMsg& f : group) {
      if (f.skipped) continue;
      for (size_t i = 0; i < f.batch.size(); ++i)
        merged.add(f.batch.tokens[i], f.batch.positions[i], f.batch.parents[i],
                   f.batch.want_logits[i] != 0);
      if (s.is_first) {
        const size_t at = hidden.size();
        hidden.resize(at + f.batch.size() * n_embd);
        s.model->embed(f.batch.tokens, hidden.data() + at);
        size_t k = 0;
        for (size_t i = 0; i < f.replaced.size(); ++i) {
          if (!f.replaced[i]) continue;
          check((k + 1) * n_embd <= f.replacements.size(), "forward: replacement rows missing");
          std::copy_n(&f.replacements[k * n_embd], n_embd, &hidden[at + i * n_embd]);
          ++k;
        }
      } else {
        hidden.insert(hidden.end(), f.hidden.begin(), f.hidden.end());
      }
    }
    // Layer by layer, so that a cancel arriving meanwhile stops the work (the
    // head found the root wrong): once every forward of the group is
    // cancelled, the remaining layers are not run and the forwards travel on
    // as skipped ones (their cells' contents undefined until a commit drops them).
    bool abandoned = false;
    for (int l = s.layer_first; l < s.layer_last && !abandoned; ++l) {
      s.model->forward_layers(*s.worker, merged, *s.kv, first_cell, l, l + 1, hidden.data());
      abandoned = l + 1 < s.layer_last && all_cancelled(t, s, group);
    }
    if (abandoned) {
      for (ForwardMsg& f : group) {
        f.abandoned = !f.skipped;
        f.skipped = true;
      }
    } else if (s.is_last) {
      size_t n_out = 0;
      for (size_t i = 0; i < merged.size(); ++i) {
        if (!merged.want_logits[i]) continue;
        if (n_out != i) std::copy_n(&hidden[i * n_embd], n_embd, &hidden[n_out * n_embd]);
        ++n_out;
      }
      logits.resize(n_out * s.model->config().n_vocab);
      if (n_out > 0)
        s.model->output_logits(*s.worker, hidden.data(), static_cast<int>(n_out), logits.data());
    }
  }
  const double ms = watch.elapsed_ms();
  const double cpu_ms = process_cpu_ms() - cpu_start;
  const size_t n_vocab = static_cast<size_t>(s.model->config().n_vocab);
  size_t row = 0, out_row = 0;
  for (ForwardMsg& f : group) {
    std::vector<float> mine;
    const size_t n = f.batch.size();
    const bool ran = !f.skipped || f.abandoned;
    if (!f.skipped) {
      if (s.is_last) {
        size_t n_out = 0;
        for (uint8_t w : f.batch.want_logits) n_out += w ? 1 : 0;
        mine.assign(logits.begin() + out_row * n_vocab,
                    logits.begin() + (out_row + n_out) * n_vocab);
        out_row += n_out;
      } else {
        f.hidden.assign(hidden.begin() + row * n_embd, hidden.begin() + (row + n) * n_embd);
      }
      row += n;
    }
    const double share = run_rows > 0 && ran ? static_cast<double>(n) / run_rows : 0.0;
    pass_on(t, s, f, mine, ms * share, cpu_ms * share);
  }
}

// Applies one pipeline operation and passes it on; returns true for quit.
bool stage_operation(Transport& t, Stage& s, Message& m, int* code) {
  Bytes& body = m.body;
  const int32_t op = body.get<int32_t>();
  if (op == kQuit) {
    *code = body.get<int32_t>();
    return true;
  }
  if (s.failed) return false;
  if (op == kBegin) {
    const int32_t capacity = body.get<int32_t>();
    s.kv = std::make_unique<KvCache>(s.model->config(), capacity, s.layer_first, s.layer_last);
  } else if (op == kCommit) {
    check(s.kv != nullptr, "commit before begin");
    const std::vector<int32_t> path = body.get_vector<int32_t>();
    const std::vector<int32_t> keep = body.get_vector<int32_t>();
    s.kv->commit(path, keep);
  } else if (op == kTruncate) {
    check(s.kv != nullptr, "truncate before begin");
    s.kv->truncate(body.get<int32_t>());
  } else {
    fail("unknown pipeline operation ", op);
  }
  if (!s.is_last) t.send(s.next, kPipe, Bytes(m.body.data()));
  return false;
}

void report_error(Transport& t, const std::string& what) {
  Bytes b;
  b.put_string(what);
  t.send(0, kError, std::move(b));
}

}  // namespace

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
  // Every rank reads only its own layers of the (shared) file mapping.
  set_weight_loading(WeightLoading::kMap);
  g_session = std::make_unique<Session>(argc, argv);
  return true;
}

int session_rank() {
  return g_session ? g_session->transport.rank() : 0;
}

bool distributed_run() {
  return g_session && g_session->transport.rank() == 0 && g_session->transport.size() >= 2;
}

int32_t op_of(const Message& m) {
  int32_t op = 0;
  check(m.body.size() >= sizeof op, "distributed: an empty pipeline message");
  std::memcpy(&op, m.body.data().data(), sizeof op);
  return op;
}

// Whether a queued forward will be skipped (flagged upstream or cancelled),
// read in place: op, ticket, flag.
bool forward_skipped(const Message& m, const std::set<int64_t>& cancelled) {
  Bytes copy(std::vector<uint8_t>(m.body.data().begin(),
                                  m.body.data().begin() + sizeof(int32_t) + sizeof(int64_t) + 1));
  copy.get<int32_t>();
  const int64_t ticket = copy.get<int64_t>();
  return copy.get<uint8_t>() != 0 || cancelled.count(ticket) != 0;
}

int serve_stage() {
  Transport& t = g_session->transport;
  Stage s;
  bool set_up = false;
  int code = 0;
  Backoff backoff;
  std::deque<Message> queue;  // pipeline messages received, not yet applied
  constexpr size_t kMaxMergedRows = 512;
  for (;;) {
    Message m;
    bool got = false;
    try {
      while (t.poll(set_up ? s.prev : 0, kPipe, &m) ||
             (set_up && s.prev != 0 && t.poll(0, kPipe, &m)))
        queue.push_back(std::move(m));
      take_cancels(t, s);
      if (!queue.empty()) {
        got = true;
        if (op_of(queue.front()) == kForward && !s.failed) {
          // Every forward waiting at the front of the queue, up to a skipped one.
          std::vector<ForwardMsg> group;
          size_t rows = 0;
          while (!queue.empty() && op_of(queue.front()) == kForward && rows < kMaxMergedRows) {
            const bool skip = forward_skipped(queue.front(), s.cancelled);
            if (skip && !group.empty()) break;
            Bytes body = std::move(queue.front().body);
            queue.pop_front();
            body.get<int32_t>();
            group.push_back(parse_forward(s, body));
            rows += group.back().batch.size();
            if (skip) break;
          }
          run_forwards(t, s, group);
        } else {
          Message op = std::move(queue.front());
          queue.pop_front();
          if (stage_operation(t, s, op, &code)) break;
        }
      } else if (!set_up && t.poll(0, kSlotSetup, &m)) {
        // This rank is one of easyspec's drafter slots rather than a stage.
        code = serve_draft_slot(t, m);
        break;
      } else if (!set_up && t.poll(0, kSetup, &m)) {
        got = true;
        Bytes reply;
        try {
          setup_stage(t, s, m.body);
          set_up = true;
          reply.put<uint8_t>(1);
          reply.put_string(host_name());
        } catch (const Error& e) {
          reply.put<uint8_t>(0);
          reply.put_string(e.what());
        }
        t.send(0, kSetupReply, std::move(reply));
      }
    } catch (const std::exception& e) {
      s.failed = true;
      report_error(t, e.what());
    }
    if (got)
      backoff = Backoff();
    else
      backoff.pause();
  }
  t.flush(5.0);
  g_session.reset();  // MPI_Finalize
  return code;
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

std::vector<int> split_layers(const Model& model, int stages, const std::string& split,
                              int first_layer) {
  check(first_layer >= 0 && first_layer < model.config().n_layer, "--head-layers ", first_layer,
        ": the model has ", model.config().n_layer, " layers and every stage needs one");
  const int n_layer = model.config().n_layer - first_layer;
  check(stages >= 1, "--stages must be at least 1");
  check(stages <= n_layer, "--stages ", stages, ": the model has only ", n_layer, " layers");
  std::vector<int> counts;
  if (!split.empty()) {
    std::stringstream in(split);
    std::string item;
    while (std::getline(in, item, ',')) {
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      check(!item.empty() && *end == '\0' && v >= 1, "--layer-split '", split,
            "': each entry is a number of layers >= 1");
      counts.push_back(static_cast<int>(v));
    }
    check(static_cast<int>(counts.size()) == stages, "--layer-split '", split, "' has ",
          counts.size(), " entries for ", stages, " stages");
    check(std::accumulate(counts.begin(), counts.end(), 0) == n_layer, "--layer-split '", split,
          "' covers ", std::accumulate(counts.begin(), counts.end(), 0), " layers; the model has ",
          n_layer);
    return counts;
  }
  // Bytes read per token: each layer's matrices; the output matrix on the last stage.
  const GgufFile& f = model.gguf();
  std::vector<double> cost(n_layer, 0.0);
  double output = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name.rfind("blk.", 0) == 0) {
      const int layer = std::stoi(t.name.substr(4)) - first_layer;
      if (layer >= 0) cost[layer] += static_cast<double>(t.n_bytes);
    } else if (t.name == "output.weight" ||
               (t.name == "token_embd.weight" && f.find_tensor("output.weight") == nullptr))
      output += static_cast<double>(t.n_bytes);
  }
  // The smallest bound on a stage's cost for which a greedy cut gives `stages`
  // non-empty consecutive ranges (binary search over the bound).
  auto cut = [&](double bound, std::vector<int>* out) {
    out->assign(stages, 0);
    int stage = 0;
    double load = 0;
    for (int l = 0; l < n_layer; ++l) {
      const int layers_left = n_layer - l, stages_left = stages - stage;
      const double extra = stage == stages - 1 ? output : 0;
      if ((*out)[stage] > 0 && (load + cost[l] + extra > bound || layers_left < stages_left) &&
          stage + 1 < stages) {
        ++stage;
        load = 0;
      }
      load += cost[l];
      ++(*out)[stage];
      if (load + (stage == stages - 1 ? output : 0) > bound) return false;
    }
    return stage == stages - 1;
  };
  double lo = 0, hi = output;
  for (double c : cost) hi += c;
  std::vector<int> best(stages, 0);
  for (int i = 0; i < stages; ++i) best[i] = n_layer / stages + (i < n_layer % stages ? 1 : 0);
  for (int iter = 0; iter < 60; ++iter) {
    const double mid = (lo + hi) / 2;
    std::vector<int> candidate;
    if (cut(mid, &candidate)) {
      hi = mid;
      best = candidate;
    } else {
      lo = mid;
    }
  }
  return best;
}

Pipeline::Pipeline(Transport& transport, const Model& target, const PipelineOptions& options,
                   int threads)
    : transport_(transport),
      options_(options),
      n_vocab_(target.config().n_vocab),
      n_embd_(target.config().n_embd),
      target_(&target),
      head_layers_(options.head_layers) {
  const int ranks = transport_.size();
  if (options_.stages == 0) options_.stages = ranks - 1;
  check(options_.stages >= 1 && options_.stages <= ranks - 1, "--stages ", options_.stages,
        ": this job has ", ranks, " ranks, so 1..", ranks - 1,
        " target stages (rank 0 is the head)");
  check(options_.timeout_s > 0, "--dist-timeout must be positive");
  check(options_.link.latency_us >= 0 && options_.link.gbps >= 0,
        "--link-latency-us and --link-gbps must not be negative");
  transport_.set_link(options_.link);
  const std::vector<int> counts =
      split_layers(target, options_.stages, options_.layer_split, head_layers_);
  if (head_layers_ > 0) {
    head_worker_ = std::make_unique<Worker>(threads);
    target.hold_in_memory(0, head_layers_, false);  // the head's own layers, as a stage's
  }
  const std::string path = target.gguf().path();
  const FileIdentity id = identify_file(path);
  int first = head_layers_;
  for (int i = 0; i < options_.stages; ++i) {
    const int rank = i + 1;
    StageTimes st;
    st.rank = rank;
    st.layer_first = first;
    st.layer_last = first + counts[i];
    first = st.layer_last;
    stages_.push_back(st);
    Bytes b;
    b.put_string(path);
    b.put<uint64_t>(id.size);
    b.put<uint64_t>(id.hash);
    b.put<int32_t>(st.layer_first);
    b.put<int32_t>(st.layer_last);
    b.put<int32_t>(i == 0 ? 0 : rank - 1);
    b.put<int32_t>(i + 1 == options_.stages ? 0 : rank + 1);
    b.put<int32_t>(threads);
    b.put<uint8_t>(i == 0 && head_layers_ == 0 ? 1 : 0);
    b.put<double>(options_.link.latency_us);
    b.put<double>(options_.link.gbps);
    transport_.send(rank, kSetup, std::move(b));
  }
  // Surplus ranks are not part of the pipeline: they may go now.
  for (int r = options_.stages + 1; r < ranks; ++r) {
    Bytes b;
    b.put<int32_t>(kQuit);
    b.put<int32_t>(0);
    transport_.send(r, kPipe, std::move(b));
  }
  std::string errors;
  for (StageTimes& st : stages_) {
    Message m;
    try {
      m = transport_.receive(st.rank, kSetupReply, std::max(options_.timeout_s, 120.0));
    } catch (const TimeoutError&) {
      abort_job("rank " + std::to_string(st.rank) + " did not report ready", 1);
    }
    const bool ok = m.body.get<uint8_t>() != 0;
    const std::string text = m.body.get_string();
    if (ok)
      st.host = text;
    else
      errors += (errors.empty() ? "" : "; ") + ("rank " + std::to_string(st.rank) + ": " + text);
  }
  check(errors.empty(), errors);
  stage_window_ = stages_;
}

std::string Pipeline::describe() const {
  std::string s = "pipeline of " + std::to_string(stages_.size()) + " stage" +
                  (stages_.size() == 1 ? "" : "s") + " (rank 0 on " + host_name() +
                  ": head: tokenizer, sampling, verification, drafter" +
                  (head_layers_ > 0 ? " + embedding + " + layer_range(0, head_layers_) : "") + ")";
  for (const StageTimes& st : stages_)
    s += "; rank " + std::to_string(st.rank) + " on " + st.host + ": " +
         layer_range(st.layer_first, st.layer_last) +
         (st.rank == 1 && head_layers_ == 0 ? " + embedding" : "") +
         (st.rank == static_cast<int>(stages_.size()) ? " + output" : "");
  s += "; link: " + options_.link.describe();
  return s;
}

void Pipeline::stage_failed(int rank, const std::string& what) {
  broken_ = true;
  std::string where = "rank " + std::to_string(rank);
  for (const StageTimes& st : stages_)
    if (st.rank == rank) where += " (" + layer_range(st.layer_first, st.layer_last) + ")";
  fail(where, ": ", what);
}

void Pipeline::pump() {
  Message m;
  try {
    m = transport_.receive(-1, -1, options_.timeout_s);
  } catch (const TimeoutError&) {
    // The stuck rank: the first stage that has not finished the oldest forward.
    const int64_t oldest = outstanding_.empty() ? next_ticket_ - 1 : *outstanding_.begin();
    int stuck = stages_.back().rank;
    for (const StageTimes& st : stages_) {
      const auto found = last_done_.find(st.rank);
      if (found == last_done_.end() || found->second < oldest) {
        stuck = st.rank;
        break;
      }
    }
    abort_unanswered(stuck, options_.timeout_s);
  }
  file(m);
}

void Pipeline::file(Message& m) {
  switch (m.tag) {
    case kLogits: {
      const int64_t ticket = m.body.get<int64_t>();
      const bool skipped = m.body.get<uint8_t>() != 0;
      std::vector<float> logits = m.body.get_vector<float>();
      outstanding_.erase(ticket);
      if (cancelled_.erase(ticket) == 0) {
        check(!skipped, "distributed: forward ", ticket, " was skipped but not cancelled");
        arrived_[ticket] = std::move(logits);
      }
      break;
    }
    case kProgress: {
      const int64_t ticket = m.body.get<int64_t>();
      const uint8_t fate = m.body.get<uint8_t>();
      const double ms = m.body.get<double>();
      const double cpu_ms = m.body.get<double>();
      last_done_[m.source] = ticket;
      for (std::vector<StageTimes>* v : {&stages_, &stage_window_})
        for (StageTimes& st : *v)
          if (st.rank == m.source) {
            ++st.forwards;
            st.skipped += fate == kSkipped ? 1 : 0;
            st.abandoned += fate == kAbandoned ? 1 : 0;
            st.compute_ms += ms;
            st.cpu_ms += cpu_ms;
          }
      break;
    }
    case kError:
      stage_failed(m.source, m.body.get_string());
    default:
      fail("distributed: unexpected message (tag ", m.tag, ") from rank ", m.source);
  }
}

void Pipeline::begin(int32_t capacity) {
  drain();
  Bytes b;
  b.put<int32_t>(kBegin);
  b.put<int32_t>(capacity);
  transport_.send(first_rank(), kPipe, std::move(b));
  if (head_layers_ > 0)
    head_kv_ = std::make_unique<KvCache>(target_->config(), capacity, 0, head_layers_);
}

int64_t Pipeline::send_forward(const Batch& batch) {
  check(!broken_, "distributed: a stage failed; the pipeline cannot run more forwards");
  const int64_t ticket = next_ticket_++;
  Bytes b;
  b.put<int32_t>(kForward);
  b.put<int64_t>(ticket);
  b.put<uint8_t>(0);
  b.put_vector(batch.tokens);
  b.put_vector(batch.positions);
  b.put_vector(batch.parents);
  b.put_vector(batch.want_logits);
  if (head_layers_ > 0) {
    // The head's share: embed and run the first layers here, in submission
    // order, so that stage 1 receives hidden states like any later stage.
    check(head_kv_ != nullptr, "forward before begin");
    std::vector<float> hidden(batch.size() * n_embd_);
    target_->embed(batch.tokens, hidden.data());
    for (size_t i = 0; i < batch.input_embeddings.size(); ++i)
      if (batch.input_embeddings[i] != nullptr)
        std::copy_n(batch.input_embeddings[i], n_embd_, &hidden[i * n_embd_]);
    const int32_t cell = head_kv_->add_cells(batch.positions, batch.parents);
    target_->forward_layers(*head_worker_, batch, *head_kv_, cell, 0, head_layers_, hidden.data());
    b.put_vector(hidden);
    transport_.send(first_rank(), kPipe, std::move(b));
    outstanding_.insert(ticket);
    return ticket;
  }
  // Rows given as embeddings (PPD's prompt tokens) travel to the first stage, which embeds.
  check(batch.input_embeddings.empty() || batch.input_embeddings.size() == batch.size(),
        "forward: input_embeddings must be empty or one per batch entry");
  std::vector<uint8_t> replaced;
  std::vector<float> replacements;
  for (size_t i = 0; i < batch.input_embeddings.size(); ++i) {
    if (replaced.empty()) replaced.assign(batch.size(), 0);
    if (batch.input_embeddings[i] == nullptr) continue;
    replaced[i] = 1;
    replacements.insert(replacements.end(), batch.input_embeddings[i],
                        batch.input_embeddings[i] + n_embd_);
  }
  b.put_vector(replaced);
  b.put_vector(replacements);
  transport_.send(first_rank(), kPipe, std::move(b));
  outstanding_.insert(ticket);
  return ticket;
}

bool Pipeline::arrived(int64_t ticket) {
  Message m;
  while (transport_.poll(-1, -1, &m)) file(m);
  return arrived_.count(ticket) != 0;
}

std::vector<float> Pipeline::wait_logits(int64_t ticket) {
  for (;;) {
    const auto found = arrived_.find(ticket);
    if (found != arrived_.end()) {
      std::vector<float> logits = std::move(found->second);
      arrived_.erase(found);
      return logits;
    }
    check(outstanding_.count(ticket) != 0 && cancelled_.count(ticket) == 0, "distributed: forward ",
          ticket, " is not in flight");
    pump();
  }
}

void Pipeline::cancel(int64_t ticket) {
  if (arrived_.erase(ticket) != 0) return;
  if (outstanding_.count(ticket) == 0 || !cancelled_.insert(ticket).second) return;
  for (const StageTimes& st : stages_) {
    Bytes b;
    b.put<int64_t>(ticket);
    transport_.send(st.rank, kCancel, std::move(b));
  }
}

void Pipeline::send_commit(std::span<const int32_t> path, std::span<const int32_t> keep) {
  Bytes b;
  b.put<int32_t>(kCommit);
  b.put_vector(std::vector<int32_t>(path.begin(), path.end()));
  b.put_vector(std::vector<int32_t>(keep.begin(), keep.end()));
  transport_.send(first_rank(), kPipe, std::move(b));
  if (head_kv_) head_kv_->commit(path, keep);
}

void Pipeline::send_truncate(int32_t n) {
  Bytes b;
  b.put<int32_t>(kTruncate);
  b.put<int32_t>(n);
  transport_.send(first_rank(), kPipe, std::move(b));
  if (head_kv_) head_kv_->truncate(n);
}

void Pipeline::drain() {
  for (const int64_t ticket : std::vector<int64_t>(outstanding_.begin(), outstanding_.end()))
    cancel(ticket);
  while (!outstanding_.empty()) pump();
  arrived_.clear();
}

void Pipeline::quit(int code) {
  if (!broken_) drain();  // a failed stage answers nothing more
  for (int r = 1; r < transport_.size(); ++r) {
    if (r > static_cast<int>(stages_.size())) break;  // surplus ranks are gone already
    Bytes b;
    b.put<int32_t>(kQuit);
    b.put<int32_t>(code);
    transport_.send(r, kPipe, std::move(b));
  }
  // Progress reports still on their way are of no interest now.
  Message m;
  while (transport_.poll(-1, kProgress, &m)) {
  }
}

std::vector<StageTimes> Pipeline::take_stage_times() {
  std::vector<StageTimes> out = stage_window_;
  for (StageTimes& st : stage_window_) {
    st.forwards = st.skipped = st.abandoned = 0;
    st.compute_ms = st.cpu_ms = 0;
  }
  return out;
}

namespace {

// Target on the pipeline: the head keeps only the cell counts; the stages hold the caches.
class PipelineTarget final : public Target {
 public:
  explicit PipelineTarget(Pipeline& pipeline) : p_(pipeline) {}

  int n_vocab() const override { return p_.n_vocab(); }
  void begin(int32_t capacity) override {
    p_.begin(capacity);
    n_committed_ = n_spec_ = 0;
    capacity_ = capacity;
  }
  int32_t n_committed() const override { return n_committed_; }
  int32_t n_spec() const override { return n_spec_; }
  std::vector<float> forward(const Batch& batch) override { return collect(submit(batch)); }
  int64_t submit(const Batch& batch) override {
    const int32_t n = static_cast<int32_t>(batch.size());
    check(n_committed_ + n_spec_ + n <= capacity_, "KV cache full: ", n_committed_, " committed + ",
          n_spec_, " speculative + ", n, " new cells exceed the capacity ", capacity_);
    for (int32_t i = 0; i < n; ++i)
      check(batch.parents[i] >= -1 && batch.parents[i] < n_spec_ + i, "forward: entry ", i,
            " names parent ", batch.parents[i], " which is not an earlier cell");
    n_spec_ += n;
    ++meter_.forwards;
    return p_.send_forward(batch);
  }
  bool arrived(int64_t ticket) override { return p_.arrived(ticket); }
  std::vector<float> collect(int64_t ticket) override {
    ScopedTimer timer(meter_.ms);  // the time the head waited for the pipeline
    return p_.wait_logits(ticket);
  }
  void cancel(int64_t ticket) override { p_.cancel(ticket); }
  std::vector<int32_t> commit(std::span<const int32_t> path,
                              std::span<const int32_t> keep) override {
    for (int32_t c : path) check(c >= 0 && c < n_spec_, "commit: no speculative cell ", c);
    for (int32_t c : keep) check(c >= 0 && c < n_spec_, "commit: no speculative cell ", c);
    p_.send_commit(path, keep);
    n_committed_ += static_cast<int32_t>(path.size());
    n_spec_ = static_cast<int32_t>(keep.size());
    std::vector<int32_t> ids(keep.size());
    std::iota(ids.begin(), ids.end(), 0);
    return ids;
  }
  void truncate(int32_t n) override {
    check(n >= 0 && n <= n_committed_, "truncate: ", n, " is beyond the committed ", n_committed_);
    p_.send_truncate(n);
    n_committed_ = n;
    n_spec_ = 0;
  }
  ForwardMeter take_meter() override { return std::exchange(meter_, ForwardMeter{}); }

 private:
  Pipeline& p_;
  int32_t n_committed_ = 0, n_spec_ = 0, capacity_ = 0;
  ForwardMeter meter_;
};

}  // namespace

std::function<std::unique_ptr<Target>(const StrategyConfig&)> pipeline_targets(
    const Model& target, const PipelineOptions& options, int threads) {
  if (!g_session || g_session->transport.rank() != 0 || g_session->transport.size() < 2)
    return nullptr;
  if (!g_session->pipeline) {
    claim_ranks("a target pipeline");
    g_session->pipeline =
        std::make_unique<Pipeline>(g_session->transport, target, options, threads);
  }
  Pipeline* p = g_session->pipeline.get();
  return [p](const StrategyConfig& config) {
    // Checked here, where bench's NAME:G variants are already applied.
    const StrategyInfo& info = strategy_info(config.name);
    const std::string needed = info.measured_setting ? info.measured_setting(config) : "";
    check(needed.empty(), "strategy '", config.name, "' under mpirun needs ", needed,
          " (its measurement times the target in this process)");
    return std::make_unique<PipelineTarget>(*p);
  };
}

Pipeline* running_pipeline() {
  return g_session ? g_session->pipeline.get() : nullptr;
}

}  // namespace parspec::dist
