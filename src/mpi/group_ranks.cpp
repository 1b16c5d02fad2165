#include "mpi/group_ranks.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "core/error.h"
#include "core/worker.h"
#include "model/executor.h"
#include "model/kv_cache.h"
#include "mpi/pipeline.h"

namespace parspec::mpi {

namespace {

// The head's end of the slots: every rank but the head, set up once per job
// with the draft model; each executor made on them has an id of its own, so
// that several drafters (bench's variants) keep separate cache replicas.
class DraftRanks {
 public:
  DraftRanks(Transport& t, const Model& draft, const SlotOptions& options)
      : t_(t), options_(options), path_(draft.gguf().path()) {
    check(options_.timeout_s > 0, "--dist-timeout must be positive");
    check(options_.link.latency_us >= 0 && options_.link.gbps >= 0,
          "--link-latency-us and --link-gbps must not be negative");
    t_.set_link(options_.link);
    const FileIdentity id = identify_file(path_);
    for (int r = 1; r < t_.size(); ++r) {
      Bytes b;
      b.put_string(path_);
      b.put<uint64_t>(id.size);
      b.put<uint64_t>(id.hash);
      b.put<double>(options_.link.latency_us);
      b.put<double>(options_.link.gbps);
      t_.send(r, kSlotSetup, std::move(b));
    }
    std::string errors;
    hosts_.assign(t_.size(), host_name());
    for (int r = 1; r < t_.size(); ++r) {
      Message m;
      try {
        m = t_.receive(r, kSetupReply, std::max(options_.timeout_s, 120.0));
      } catch (const TimeoutError&) {
        abort_job("rank " + std::to_string(r) + " did not report ready", 1);
      }
      const bool ok = m.body.get<uint8_t>() != 0;
      const std::string text = m.body.get_string();
      if (ok)
        hosts_[r] = text;
      else
        errors += (errors.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + text);
    }
    check(errors.empty(), errors);
  }

  Transport& transport() { return t_; }
  const SlotOptions& options() const { return options_; }
  const std::string& path() const { return path_; }
  int32_t next_id() { return next_id_++; }

  std::string describe() const {
    std::string s = "easyspec drafter slots on " + std::to_string(t_.size()) +
                    " ranks (rank 0 on " + hosts_[0] +
                    ": head: target, tokenizer, sampling, verification, the drafter's "
                    "layer-sequential parts and slot 0)";
    for (int r = 1; r < t_.size(); ++r)
      s += "; rank " + std::to_string(r) + " on " + hosts_[r] + ": slot " + std::to_string(r) +
           " (a replica of the draft model and its cache)";
    return s + "; link: " + options_.link.describe();
  }

 private:
  Transport& t_;
  SlotOptions options_;
  std::string path_;
  std::vector<std::string> hosts_;
  int32_t next_id_ = 0;
};

std::unique_ptr<DraftRanks> g_slots;

// A layer-parallel drafter's group executor on the slots: block i of a group
// runs on slot i % slots(), slot 0 being the head itself.
class RankGroupExecutor final : public GroupExecutor {
 public:
  RankGroupExecutor(DraftRanks& slots, const Model& draft, const std::vector<LayerGroup>& groups)
      : slots_(slots),
        id_(slots.next_id()),
        n_slots_(std::min(slots.transport().size(), widest_group(groups))),
        owned_(n_slots_) {
    // The layers each slot computes, whose rows its replica must hold.
    for (const LayerGroup& g : groups)
      if (g.size() > 1)
        for (int i = 0; i < g.size(); ++i) owned_[i % n_slots_].push_back(g.first + i);
  }

  ~RankGroupExecutor() override {
    if (session() == nullptr) return;  // MPI has ended already
    try {
      for_each_slot([&](Bytes& b) {
        b.put<int32_t>(kSlotEnd);
        b.put<int32_t>(id_);
      });
    } catch (const std::exception&) {
    }
  }

  int slots() const override { return n_slots_; }
  std::string describe() const override { return "MPI ranks 0-" + std::to_string(n_slots_ - 1); }

  void run_attention(const Model& model, LayerGroup group, const Batch& batch, KvCache& kv,
                     int32_t first_cell, const float* h0, float* out) override {
    const size_t n = batch.size();
    const size_t stride = n * static_cast<size_t>(model.config().n_embd);
    const std::vector<float> input(h0, h0 + stride);
    // The other slots first, so that they work while the head runs slot 0's blocks.
    std::vector<int> asked;
    for (int r = 1; r < n_slots_; ++r) {
      std::vector<int32_t> layers;
      for (int i = r; i < group.size(); i += n_slots_) layers.push_back(group.first + i);
      if (layers.empty()) continue;
      Bytes b;
      b.put<int32_t>(kSlotAttention);
      b.put<int32_t>(id_);
      b.put<int64_t>(++requests_);
      b.put_vector(layers);
      b.put_vector(input);
      slots_.transport().send(r, kPipe, std::move(b));
      asked.push_back(r);
    }
    for (int i = 0; i < group.size(); i += n_slots_)
      executor_.attention_output(model, group.first + i, batch, kv, first_cell, h0,
                                 out + i * stride, nullptr);
    const size_t kv_dim = static_cast<size_t>(kv.kv_dim());
    for (int r : asked) {
      Message m = receive_from(r);
      check(m.body.get<int32_t>() == id_ && m.body.get<int64_t>() == requests_,
            "distributed: rank ", r, " answered another request");
      const std::vector<float> outs = m.body.get_vector<float>();
      const std::vector<float> k = m.body.get_vector<float>(), v = m.body.get_vector<float>();
      size_t j = 0;
      for (int i = r; i < group.size(); i += n_slots_, ++j) {
        check(outs.size() >= (j + 1) * stride && k.size() >= (j + 1) * n * kv_dim &&
                  v.size() >= (j + 1) * n * kv_dim,
              "distributed: rank ", r, " sent a short attention result");
        std::copy_n(&outs[j * stride], stride, out + i * stride);
        // The head's cache stays complete: it holds every layer's rows.
        for (size_t c = 0; c < n; ++c) {
          const int32_t cell = first_cell + static_cast<int32_t>(c);
          std::copy_n(&k[(j * n + c) * kv_dim], kv_dim, kv.spec_k(group.first + i, cell));
          std::copy_n(&v[(j * n + c) * kv_dim], kv_dim, kv.spec_v(group.first + i, cell));
        }
      }
    }
  }

  void begin(int32_t capacity) override {
    for_each_slot([&](Bytes& b) {
      b.put<int32_t>(kSlotBegin);
      b.put<int32_t>(id_);
      b.put<int32_t>(capacity);
    });
  }

  void add_cells(const Batch& batch) override {
    for_each_slot([&](Bytes& b) { put_cells(b, batch); });
  }

  void add_exact(const Batch& batch, KvCache& kv, int32_t first_cell) override {
    // The rows a slot's layers got from the layer-sequential forward, which
    // its later fuzzy blocks attend to.
    const size_t kv_dim = static_cast<size_t>(kv.kv_dim());
    for (int r = 1; r < n_slots_; ++r) {
      Bytes cells;
      put_cells(cells, batch);
      slots_.transport().send(r, kPipe, std::move(cells));
      std::vector<float> k, v;
      k.reserve(owned_[r].size() * batch.size() * kv_dim);
      v.reserve(k.capacity());
      for (int layer : owned_[r])
        for (size_t c = 0; c < batch.size(); ++c) {
          const int32_t cell = first_cell + static_cast<int32_t>(c);
          k.insert(k.end(), kv.spec_k(layer, cell), kv.spec_k(layer, cell) + kv_dim);
          v.insert(v.end(), kv.spec_v(layer, cell), kv.spec_v(layer, cell) + kv_dim);
        }
      Bytes rows;
      rows.put<int32_t>(kSlotRows);
      rows.put<int32_t>(id_);
      rows.put_vector(owned_[r]);
      rows.put_vector(k);
      rows.put_vector(v);
      slots_.transport().send(r, kPipe, std::move(rows));
    }
  }

  void commit(std::span<const int32_t> path, std::span<const int32_t> keep) override {
    for_each_slot([&](Bytes& b) {
      b.put<int32_t>(kSlotCommit);
      b.put<int32_t>(id_);
      b.put_vector(std::vector<int32_t>(path.begin(), path.end()));
      b.put_vector(std::vector<int32_t>(keep.begin(), keep.end()));
    });
  }

  void truncate(int32_t n) override {
    for_each_slot([&](Bytes& b) {
      b.put<int32_t>(kSlotTruncate);
      b.put<int32_t>(id_);
      b.put<int32_t>(n);
    });
  }

 private:
  void put_cells(Bytes& b, const Batch& batch) const {
    b.put<int32_t>(kSlotCells);
    b.put<int32_t>(id_);
    b.put_vector(batch.positions);
    b.put_vector(batch.parents);
  }

  template <typename Fill>
  void for_each_slot(Fill fill) {
    for (int r = 1; r < n_slots_; ++r) {
      Bytes b;
      fill(b);
      slots_.transport().send(r, kPipe, std::move(b));
    }
  }

  // A slot's next answer: its result, or the error it reported.
  Message receive_from(int rank) {
    Message m;
    try {
      m = slots_.transport().receive(rank, -1, slots_.options().timeout_s);
    } catch (const TimeoutError&) {
      abort_unanswered(rank, slots_.options().timeout_s);
    }
    if (m.tag == kError) fail("rank ", rank, " (easyspec drafter slot): ", m.body.get_string());
    check(m.tag == kSlotResult, "distributed: unexpected message (tag ", m.tag, ") from rank ",
          rank);
    return m;
  }

  DraftRanks& slots_;
  int32_t id_;
  int n_slots_;
  std::vector<std::vector<int32_t>> owned_;  // per slot
  Worker worker_{1};  // the head's own blocks, one thread like a ThreadGroupExecutor slot
  CpuExecutor executor_{worker_};
  int64_t requests_ = 0;
};

// A slot rank's replica of one drafter's cache, and the forward under way.
struct SlotReplica {
  std::unique_ptr<KvCache> kv;
  Batch batch;  // positions and parents of the last cells added
  int32_t first_cell = 0;
};

struct SlotServer {
  std::shared_ptr<const Model> model;
  Worker worker{1};
  CpuExecutor executor{worker};
  std::map<int32_t, SlotReplica> replicas;
  bool failed = false;  // after an error only quit is served
};

void setup_slot(Transport& t, SlotServer& s, Bytes& body) {
  const std::string path = body.get_string();
  const FileIdentity head_file{body.get<uint64_t>(), body.get<uint64_t>()};
  LinkEmulation link;
  link.latency_us = body.get<double>();
  link.gbps = body.get<double>();
  t.set_link(link);
  const FileIdentity mine = identify_file(path);
  check(mine == head_file, "the draft model file ", path, " differs from rank 0's (size ",
        mine.size, " vs ", head_file.size, ", header hash ", mine.hash, " vs ", head_file.hash,
        "): every rank needs the same file");
  s.model = Model::load(path, WeightLoading::kMap);
  // Every layer's attention may be this slot's in some group; no output matrix.
  s.model->hold_in_memory(0, s.model->config().n_layer, false);
}

SlotReplica& replica(SlotServer& s, int32_t id) {
  const auto found = s.replicas.find(id);
  check(found != s.replicas.end() && found->second.kv != nullptr, "drafter ", id,
        " used before begin");
  return found->second;
}

// Applies one operation of the stream; returns true for quit.
bool slot_operation(Transport& t, SlotServer& s, Bytes& body, int* code) {
  const int32_t op = body.get<int32_t>();
  if (op == kQuit) {
    *code = body.get<int32_t>();
    return true;
  }
  if (s.failed) return false;
  const int32_t id = body.get<int32_t>();
  switch (op) {
    case kSlotBegin: {
      const int32_t capacity = body.get<int32_t>();
      s.replicas[id].kv = std::make_unique<KvCache>(s.model->config(), capacity);
      break;
    }
    case kSlotEnd:
      s.replicas.erase(id);
      break;
    case kSlotCells: {
      SlotReplica& r = replica(s, id);
      r.batch = Batch();
      r.batch.positions = body.get_vector<int32_t>();
      r.batch.parents = body.get_vector<int32_t>();
      const size_t n = r.batch.positions.size();
      check(r.batch.parents.size() == n, "cells: positions and parents differ in length");
      r.batch.tokens.assign(n, 0);  // attention reads positions and parents only
      r.batch.want_logits.assign(n, 0);
      r.first_cell = r.kv->add_cells(r.batch.positions, r.batch.parents);
      break;
    }
    case kSlotRows: {
      SlotReplica& r = replica(s, id);
      const std::vector<int32_t> layers = body.get_vector<int32_t>();
      const std::vector<float> k = body.get_vector<float>(), v = body.get_vector<float>();
      const size_t n = r.batch.size(), d = static_cast<size_t>(r.kv->kv_dim());
      check(k.size() == layers.size() * n * d && v.size() == k.size(), "rows of the wrong size");
      for (size_t j = 0; j < layers.size(); ++j)
        for (size_t c = 0; c < n; ++c) {
          const int32_t cell = r.first_cell + static_cast<int32_t>(c);
          std::copy_n(&k[(j * n + c) * d], d, r.kv->spec_k(layers[j], cell));
          std::copy_n(&v[(j * n + c) * d], d, r.kv->spec_v(layers[j], cell));
        }
      break;
    }
    case kSlotAttention: {
      SlotReplica& r = replica(s, id);
      const int64_t request = body.get<int64_t>();
      const std::vector<int32_t> layers = body.get_vector<int32_t>();
      const std::vector<float> h0 = body.get_vector<float>();
      const size_t n = r.batch.size(), d = static_cast<size_t>(r.kv->kv_dim());
      const size_t stride = n * static_cast<size_t>(s.model->config().n_embd);
      check(h0.size() == stride, "attention: hidden states of the wrong size");
      std::vector<float> outs(layers.size() * stride), k, v;
      for (size_t j = 0; j < layers.size(); ++j) {
        check(layers[j] >= 0 && layers[j] < s.model->config().n_layer, "no layer ", layers[j]);
        s.executor.attention_output(*s.model, layers[j], r.batch, *r.kv, r.first_cell, h0.data(),
                                    &outs[j * stride], nullptr);
        for (size_t c = 0; c < n; ++c) {
          const int32_t cell = r.first_cell + static_cast<int32_t>(c);
          k.insert(k.end(), r.kv->spec_k(layers[j], cell), r.kv->spec_k(layers[j], cell) + d);
          v.insert(v.end(), r.kv->spec_v(layers[j], cell), r.kv->spec_v(layers[j], cell) + d);
        }
      }
      Bytes reply;
      reply.put<int32_t>(id);
      reply.put<int64_t>(request);
      reply.put_vector(outs);
      reply.put_vector(k);
      reply.put_vector(v);
      t.send(0, kSlotResult, std::move(reply));
      break;
    }
    case kSlotCommit: {
      const std::vector<int32_t> path = body.get_vector<int32_t>();
      const std::vector<int32_t> keep = body.get_vector<int32_t>();
      replica(s, id).kv->commit(path, keep);
      break;
    }
    case kSlotTruncate:
      replica(s, id).kv->truncate(body.get<int32_t>());
      break;
    default:
      fail("unknown drafter slot operation ", op);
  }
  return false;
}

}  // namespace

std::function<std::unique_ptr<GroupExecutor>(const Model&, const std::vector<LayerGroup>&)>
draft_slot_executors(const SlotOptions& options) {
  if (!distributed_run()) return nullptr;
  return [options](const Model& draft,
                   const std::vector<LayerGroup>& groups) -> std::unique_ptr<GroupExecutor> {
    if (widest_group(groups) == 1) return nullptr;  // no group to spread over ranks
    if (!g_slots) {
      claim_ranks("easyspec's drafter slots");
      g_slots = std::make_unique<DraftRanks>(session_transport(), draft, options);
    }
    check(draft.gguf().path() == g_slots->path(), "the drafter slots hold ", g_slots->path(),
          ", not ", draft.gguf().path());
    return std::make_unique<RankGroupExecutor>(*g_slots, draft, groups);
  };
}

std::string describe_draft_slots() {
  return g_slots ? g_slots->describe() : std::string();
}

int serve_draft_slot(Transport& t, Message& setup) {
  SlotServer s;
  Bytes reply;
  try {
    setup_slot(t, s, setup.body);
    reply.put<uint8_t>(1);
    reply.put_string(host_name());
  } catch (const Error& e) {
    s.failed = true;
    reply.put<uint8_t>(0);
    reply.put_string(e.what());
  }
  t.send(0, kSetupReply, std::move(reply));
  Backoff backoff;
  int code = 0;
  for (;;) {
    Message m;
    if (!t.poll(0, kPipe, &m)) {
      backoff.pause();
      continue;
    }
    backoff = Backoff();
    try {
      if (slot_operation(t, s, m.body, &code)) break;
    } catch (const std::exception& e) {
      s.failed = true;
      Bytes b;
      b.put_string(e.what());
      t.send(0, kError, std::move(b));
    }
  }
  return code;
}

}  // namespace parspec::mpi
