// A stage rank of the pipeline (serve_stage): set-up from the head, then the
// ordered stream of forwards and KV edits on its share of the target's
// layers, run through a CpuExecutor; logits of the last stage go to the head.
#include <time.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <set>

#include "core/timer.h"
#include "core/worker.h"
#include "model/executor.h"
#include "model/kv_cache.h"
#include "mpi/group_ranks.h"
#include "mpi/pipeline.h"
#include "mpi/session.h"

namespace parspec::mpi {

namespace {

// One stage rank's state once set up.
struct Stage {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Worker> worker;
  std::unique_ptr<CpuExecutor> executor;  // runs the stage's layers on `worker`
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
  s.model = Model::load(path, WeightLoading::kMap);
  check(s.layer_last <= s.model->config().n_layer, "layer range beyond the model");
  s.model->hold_in_memory(s.layer_first, s.layer_last, s.is_last);
  s.worker = std::make_unique<Worker>(threads);
  s.executor = std::make_unique<CpuExecutor>(*s.worker);
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
      s.executor->forward_layers(*s.model, merged, *s.kv, first_cell, l, l + 1, hidden.data());
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
        s.executor->output_logits(*s.model, hidden.data(), static_cast<int>(n_out), logits.data());
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

}  // namespace

int serve_stage() {
  Transport& t = session_holder()->transport;
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
  session_holder().reset();  // MPI_Finalize
  return code;
}

}  // namespace parspec::mpi
