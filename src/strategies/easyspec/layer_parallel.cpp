#include "strategies/easyspec/layer_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/timer.h"
#include "kernels/ops.h"

namespace parspec {

std::vector<LayerGroup> groups_from_lp_size(int n_layer, int lp_size) {
  check(lp_size >= 1, "--lp-size must be at least 1 (got ", lp_size, ")");
  check(n_layer >= 1, "the draft model has no layers");
  std::vector<LayerGroup> groups;
  groups.push_back({0, 1});
  if (n_layer == 1) return groups;
  for (int l = 1; l < n_layer - 1; l += lp_size)
    groups.push_back({l, std::min(l + lp_size, n_layer - 1)});
  groups.push_back({n_layer - 1, n_layer});
  return groups;
}

namespace {

int parse_layer(const std::string& text, const std::string& spec) {
  char* end = nullptr;
  const long v = text.empty() ? -1 : std::strtol(text.c_str(), &end, 10);
  check(!text.empty() && end != nullptr && *end == '\0' && v >= 0 && v < 100000, "--lp-groups '",
        spec, "': '", text, "' is not a layer number");
  return static_cast<int>(v);
}

}  // namespace

std::vector<LayerGroup> parse_lp_groups(const std::string& spec, int n_layer) {
  check(!spec.empty(), "--lp-groups is empty");
  std::vector<LayerGroup> groups;
  int next = 0;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t slash = spec.find('/', start);
    if (slash == std::string::npos) slash = spec.size();
    const std::string item = spec.substr(start, slash - start);
    const size_t dash = item.find('-');
    const int a = parse_layer(item.substr(0, dash), spec);
    const int b = dash == std::string::npos ? a : parse_layer(item.substr(dash + 1), spec);
    check(a == next, "--lp-groups '", spec, "': group '", item, "' should start at layer ", next,
          " (groups are consecutive and cover every layer from 0)");
    check(b >= a, "--lp-groups '", spec, "': group '", item, "' ends before it starts");
    check(b < n_layer, "--lp-groups '", spec, "': layer ", b,
          " does not exist (the draft model has ", n_layer, " layers)");
    groups.push_back({a, b + 1});
    next = b + 1;
    start = slash + 1;
  }
  check(next == n_layer, "--lp-groups '", spec, "' covers layers 0..", next - 1,
        " but the draft model has ", n_layer, " layers");
  return groups;
}

std::string format_lp_groups(const std::vector<LayerGroup>& groups) {
  std::string out;
  for (const LayerGroup& g : groups) {
    if (!out.empty()) out += '/';
    out += std::to_string(g.first);
    if (g.size() > 1) {
      out += '-';
      out += std::to_string(g.last - 1);
    }
  }
  return out;
}

int widest_group(const std::vector<LayerGroup>& groups) {
  int w = 1;
  for (const LayerGroup& g : groups) w = std::max(w, g.size());
  return w;
}

Calibration parse_calibration(const std::string& name) {
  if (name == "never") return Calibration::kNever;
  if (name == "every") return Calibration::kEvery;
  if (name == "mismatch") return Calibration::kMismatch;
  fail("--calibrate must be never, every or mismatch (got '", name, "')");
}

ThreadGroupExecutor::ThreadGroupExecutor(int slots) : pool_(std::max(1, slots)) {
  for (int i = 0; i < pool_.n_threads(); ++i) {
    slot_workers_.push_back(std::make_unique<Worker>(1));
    slot_executors_.push_back(std::make_unique<CpuExecutor>(*slot_workers_.back()));
  }
}

std::string ThreadGroupExecutor::describe() const {
  return std::to_string(slots()) + (slots() == 1 ? " thread" : " threads");
}

void ThreadGroupExecutor::run_attention(const Model& model, LayerGroup group, const Batch& batch,
                                        KvCache& kv, int32_t first_cell, const float* h0,
                                        float* out) {
  const size_t stride = batch.size() * static_cast<size_t>(model.config().n_embd);
  // Each block reads h0 and the cache's earlier rows and writes its own
  // layer's rows and output: the blocks share nothing they write.
  pool_.run([&](int index, int count) {
    for (int i = index; i < group.size(); i += count)
      slot_executors_[index]->attention_output(model, group.first + i, batch, kv, first_cell, h0,
                                               out + i * stride, nullptr);
  });
}

void SequentialGroupExecutor::run_attention(const Model& model, LayerGroup group,
                                            const Batch& batch, KvCache& kv, int32_t first_cell,
                                            const float* h0, float* out) {
  const size_t stride = batch.size() * static_cast<size_t>(model.config().n_embd);
  for (int i = 0; i < group.size(); ++i)
    executor_.attention_output(model, group.first + i, batch, kv, first_cell, h0, out + i * stride,
                               nullptr);
}

LayerParallelDrafter::LayerParallelDrafter(std::shared_ptr<const Model> model, Worker& worker,
                                           std::vector<LayerGroup> groups, Calibration calibration,
                                           std::unique_ptr<GroupExecutor> executor,
                                           ForwardExecutor* device)
    : model_(std::move(model)),
      own_forwards_(device == nullptr ? std::make_unique<CpuExecutor>(worker) : nullptr),
      forwards_(device != nullptr ? *device : *own_forwards_),
      groups_(std::move(groups)),
      calibration_(calibration),
      executor_(std::move(executor)) {
  check(model_ != nullptr, "a layer-parallel drafter needs a draft model");
  int next = 0;
  for (const LayerGroup& g : groups_) {
    check(g.first == next && g.last > g.first, "layer groups must be consecutive and non-empty");
    next = g.last;
  }
  check(next == model_->config().n_layer, "layer groups cover ", next, " layers; the draft has ",
        model_->config().n_layer);
  for (const LayerGroup& g : groups_) group_ends_.push_back(g.last);
  if (executor_ == nullptr && widest_group(groups_) > 1) {
    if (device != nullptr)
      executor_ = std::make_unique<SequentialGroupExecutor>(*device);
    else
      executor_ = std::make_unique<ThreadGroupExecutor>(widest_group(groups_));
  }
}

void LayerParallelDrafter::begin(int32_t capacity) {
  kv_ = std::make_unique<KvCache>(model_->config(), capacity);
  if (executor_) executor_->begin(capacity);
  committed_fuzzy_.clear();
  spec_fuzzy_.clear();
  mismatch_ = false;
}

std::string LayerParallelDrafter::describe_slots() const {
  return executor_ ? executor_->describe() : "1 thread";
}

const KvCache& LayerParallelDrafter::kv() const {
  check(kv_ != nullptr, "the layer-parallel drafter was used before begin()");
  return *kv_;
}

int32_t LayerParallelDrafter::n_seen() const {
  return kv().n_committed();
}

int32_t LayerParallelDrafter::n_spec() const {
  return kv().n_spec();
}

std::vector<float> LayerParallelDrafter::propose(const Batch& nodes) {
  kv();  // throws before begin()
  ScopedTimer timer(meter_.ms);
  ++meter_.forwards;
  const bool extends_prefix =
      std::find(nodes.parents.begin(), nodes.parents.end(), -1) != nodes.parents.end();
  const bool prefix_exact =
      std::find(committed_fuzzy_.begin(), committed_fuzzy_.end(), 1) == committed_fuzzy_.end();
  const bool exact = calibration_ != Calibration::kNever && extends_prefix && prefix_exact;
  // Groups of one layer make the fuzzy forward the exact one: nothing to calibrate.
  const bool fuzzy_rows = !exact && widest_group(groups_) > 1;
  try {
    std::vector<float> logits;
    if (exact) {
      const int32_t first_cell = kv_->n_spec();
      logits = forwards_.forward(*model_, nodes, *kv_);
      if (executor_) executor_->add_exact(nodes, *kv_, first_cell);
    } else {
      logits = fuzzy_forward(nodes);
    }
    ++(exact ? counts_.exact_forwards : counts_.fuzzy_forwards);
    spec_fuzzy_.insert(spec_fuzzy_.end(), nodes.size(), fuzzy_rows ? 1 : 0);
    return logits;
  } catch (const Error& e) {
    fail("draft model: ", e.what());
  }
}

std::vector<float> LayerParallelDrafter::fuzzy_forward(const Batch& batch) {
  const ModelConfig& c = model_->config();
  const size_t n = batch.size();
  check(batch.positions.size() == n && batch.parents.size() == n && batch.want_logits.size() == n,
        "forward: batch arrays differ in length");
  if (n == 0) return {};
  const size_t row = static_cast<size_t>(c.n_embd);
  const int32_t first_cell = kv_->add_cells(batch.positions, batch.parents);
  if (executor_) executor_->add_cells(batch);
  {  // a device executor runs the whole pass without the host between its pieces
    std::vector<float> logits;
    if (forwards_.forward_layer_groups(*model_, batch, *kv_, first_cell, group_ends_, logits))
      return logits;
  }
  std::vector<float> hidden(n * row), h0, outs;
  model_->embed(batch.tokens, hidden.data());
  for (const LayerGroup& g : groups_) {
    if (g.size() == 1) {
      forwards_.forward_layers(*model_, batch, *kv_, first_cell, g.first, g.last, hidden.data());
      continue;
    }
    h0 = hidden;
    outs.resize(static_cast<size_t>(g.size()) * n * row);
    executor_->run_attention(*model_, g, batch, *kv_, first_cell, h0.data(), outs.data());
    for (int i = 0; i < g.size(); ++i) {
      add_inplace(hidden.data(), outs.data() + i * n * row, static_cast<int>(n * row));
      forwards_.mlp_block(*model_, g.first + i, static_cast<int>(n), hidden.data());
    }
  }
  size_t n_out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!batch.want_logits[i]) continue;
    if (n_out != i) std::memcpy(&hidden[n_out * row], &hidden[i * row], sizeof(float) * row);
    ++n_out;
  }
  std::vector<float> logits(n_out * static_cast<size_t>(c.n_vocab));
  if (n_out > 0)
    forwards_.output_logits(*model_, hidden.data(), static_cast<int>(n_out), logits.data());
  return logits;
}

std::vector<int32_t> LayerParallelDrafter::accept(std::span<const int32_t> path,
                                                  std::span<const int32_t> keep) {
  KvCache& kv = *kv_;
  // What the strategy said about the verification this accept() follows.
  const bool mismatch = mismatch_;
  mismatch_ = false;
  for (int32_t cell : path) committed_fuzzy_.push_back(spec_fuzzy_.at(cell));
  std::vector<uint8_t> kept_fuzzy;
  for (int32_t cell : keep) kept_fuzzy.push_back(spec_fuzzy_.at(cell));
  std::vector<int32_t> ids = kv.commit(path, keep);
  if (executor_) executor_->commit(path, keep);
  spec_fuzzy_ = std::move(kept_fuzzy);

  const bool calibrate =
      calibration_ == Calibration::kEvery || (calibration_ == Calibration::kMismatch && mismatch);
  const auto first_fuzzy = std::find(committed_fuzzy_.begin(), committed_fuzzy_.end(), 1);
  if (calibrate && first_fuzzy != committed_fuzzy_.end()) {
    check(keep.empty(),
          "layer-parallel drafter: calibration drops every speculative cell, so none "
          "can be kept");
    const int32_t n = static_cast<int32_t>(first_fuzzy - committed_fuzzy_.begin());
    ++counts_.calibrations;
    counts_.dropped_rows += kv.n_committed() - n;
    kv.truncate(n);
    if (executor_) executor_->truncate(n);
    committed_fuzzy_.resize(n);
    spec_fuzzy_.clear();
  }
  return ids;
}

void LayerParallelDrafter::roll_back(int32_t n) {
  KvCache& kv = *kv_;
  if (kv.n_committed() <= n) return;
  kv.truncate(n);
  if (executor_) executor_->truncate(n);
  committed_fuzzy_.resize(n);
  spec_fuzzy_.clear();
}

ForwardMeter LayerParallelDrafter::take_meter() {
  return std::exchange(meter_, ForwardMeter{});
}

LayerParallelCounts LayerParallelDrafter::take_counts() {
  return std::exchange(counts_, LayerParallelCounts{});
}

namespace {

double cosine(const float* a, const float* b, size_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 1.0;
}

// One layer's attention input, projections and output for one token.
struct LayerTrace {
  std::vector<float> input, attn;
  AttentionProbe probe;
};

// One token through the model as a new speculative cell, exactly (groups of
// one) or with `groups`; the same arithmetic as LayerParallelDrafter's forwards
// with the group's blocks run one after another.
std::vector<LayerTrace> traced_forward(const Model& model, Worker& worker,
                                       const std::vector<LayerGroup>& groups, const Batch& batch,
                                       KvCache& kv) {
  const ModelConfig& c = model.config();
  std::vector<LayerTrace> trace(c.n_layer);
  std::vector<float> hidden(c.n_embd);
  model.embed(batch.tokens, hidden.data());
  const int32_t cell = kv.add_cells(batch.positions, batch.parents);
  for (const LayerGroup& g : groups) {
    const std::vector<float> h0 = hidden;
    for (int l = g.first; l < g.last; ++l) {
      LayerTrace& t = trace[l];
      t.input = h0;
      t.attn.resize(c.n_embd);
      model.attention_output(worker, l, batch, kv, cell, h0.data(), t.attn.data(), &t.probe);
    }
    for (int l = g.first; l < g.last; ++l) {
      add_inplace(hidden.data(), trace[l].attn.data(), c.n_embd);
      model.mlp_block(worker, l, 1, hidden.data());
    }
  }
  return trace;
}

}  // namespace

std::vector<LayerSimilarity> measure_layer_similarity(const Model& model, Worker& worker,
                                                      const std::vector<LayerGroup>& groups,
                                                      std::span<const int32_t> tokens, int skip) {
  const ModelConfig& c = model.config();
  std::vector<LayerGroup> exact;
  for (int l = 0; l < c.n_layer; ++l) exact.push_back({l, l + 1});
  std::vector<LayerSimilarity> out;
  std::vector<int> slot(c.n_layer, -1);
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (int l = groups[gi].first + 1; l < groups[gi].last; ++l) {
      slot[l] = static_cast<int>(out.size());
      out.push_back({.layer = l, .group = static_cast<int>(gi), .offset = l - groups[gi].first});
    }
  KvCache kv(c, static_cast<int32_t>(tokens.size()) + 2);
  for (size_t p = 0; p < tokens.size(); ++p) {
    Batch batch;
    batch.add(tokens[p], static_cast<int32_t>(p), -1, false);
    if (static_cast<int>(p) >= skip) {
      const std::vector<LayerTrace> fuzzy = traced_forward(model, worker, groups, batch, kv);
      kv.discard_spec();
      const std::vector<LayerTrace> sharp = traced_forward(model, worker, exact, batch, kv);
      for (int l = 0; l < c.n_layer; ++l) {
        if (slot[l] < 0) continue;
        LayerSimilarity& s = out[slot[l]];
        const LayerTrace &a = sharp[l], &b = fuzzy[l];
        s.h += cosine(a.input.data(), b.input.data(), a.input.size());
        s.q += cosine(a.probe.q.data(), b.probe.q.data(), a.probe.q.size());
        s.k += cosine(a.probe.k.data(), b.probe.k.data(), a.probe.k.size());
        s.v += cosine(a.probe.v.data(), b.probe.v.data(), a.probe.v.size());
        s.attn += cosine(a.attn.data(), b.attn.data(), a.attn.size());
        ++s.tokens;
      }
    } else {
      traced_forward(model, worker, exact, batch, kv);
    }
    kv.commit(std::vector<int32_t>{0}, {});
  }
  for (LayerSimilarity& s : out) {
    if (s.tokens == 0) continue;
    const double n = static_cast<double>(s.tokens);
    s.h /= n;
    s.q /= n;
    s.k /= n;
    s.v /= n;
    s.attn /= n;
  }
  return out;
}

}  // namespace parspec
