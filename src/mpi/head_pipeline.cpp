// The head's end of the pipeline (Pipeline): setting up the stages, sending
// forwards and KV edits down the ordered stream, running --head-layers
// itself, and filing what comes back (logits, progress, errors).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <utility>

#include "core/timer.h"
#include "core/worker.h"
#include "model/kv_cache.h"
#include "mpi/pipeline.h"
#include "mpi/session.h"

namespace parspec::mpi {

std::vector<int> parse_layer_split(const std::string& split, int stages, int n_layer) {
  std::vector<int> counts;
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

std::vector<int> split_layers(const Model& model, int stages, const std::string& split,
                              int first_layer) {
  check(first_layer >= 0 && first_layer < model.config().n_layer, "--head-layers ", first_layer,
        ": the model has ", model.config().n_layer, " layers and every stage needs one");
  const int n_layer = model.config().n_layer - first_layer;
  check(stages >= 1, "--stages must be at least 1");
  check(stages <= n_layer, "--stages ", stages, ": the model has only ", n_layer, " layers");
  if (!split.empty()) return parse_layer_split(split, stages, n_layer);
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
    head_executor_ = std::make_unique<CpuExecutor>(*head_worker_);
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
    head_executor_->forward_layers(*target_, batch, *head_kv_, cell, 0, head_layers_,
                                   hidden.data());
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

}  // namespace parspec::mpi
