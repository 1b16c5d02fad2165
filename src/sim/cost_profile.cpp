#include "sim/cost_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "model/executor.h"
#include "model/forward_timing.h"
#include "model/kv_cache.h"

namespace parspec::sim {

double ModelShape::layer_params() const {
  const double kv = static_cast<double>(n_head_kv) * head_dim;
  const double q = static_cast<double>(n_head) * head_dim;
  const double attention = n_embd * q + 2.0 * n_embd * kv + q * n_embd;
  return attention + 3.0 * n_embd * static_cast<double>(n_ff);
}

double ModelShape::output_params() const {
  return static_cast<double>(n_embd) * n_vocab;
}

ModelShape shape_of(const ModelConfig& c) {
  return {.name = c.name.empty() ? c.arch : c.name,
          .n_layer = c.n_layer,
          .n_embd = c.n_embd,
          .n_ff = c.n_ff,
          .n_head = c.n_head,
          .n_head_kv = c.n_head_kv,
          .head_dim = c.head_dim,
          .n_vocab = c.n_vocab};
}

namespace {

// The published configurations (config.json of each release).
const std::vector<ModelShape>& named_shapes() {
  static const std::vector<ModelShape> shapes = {
      {"llama-3.2-1b", 16, 2048, 8192, 32, 8, 64, 128256},
      {"llama-3.1-8b", 32, 4096, 14336, 32, 8, 128, 128256},
      {"llama-3.1-70b", 80, 8192, 28672, 64, 8, 128, 128256},
      {"qwen2.5-0.5b", 24, 896, 4864, 14, 2, 64, 151936},
      {"qwen2.5-7b", 28, 3584, 18944, 28, 4, 128, 152064},
      {"qwen2.5-72b", 80, 8192, 29568, 64, 8, 128, 152064},
  };
  return shapes;
}

}  // namespace

std::string model_shape_names() {
  std::string names;
  for (const ModelShape& s : named_shapes()) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}

ModelShape model_shape(const std::string& name) {
  for (const ModelShape& s : named_shapes())
    if (s.name == name) return s;
  fail("unknown model shape '", name, "' (known: ", model_shape_names(), ")");
}

double RowCost::at(int n) const {
  check(!rows.empty() && rows.size() == ms.size(), "cost profile: an empty row table");
  if (n <= rows.front()) return ms.front();
  for (size_t i = 1; i < rows.size(); ++i)
    if (n <= rows[i]) {
      const double f = static_cast<double>(n - rows[i - 1]) / (rows[i] - rows[i - 1]);
      return ms[i - 1] + f * (ms[i] - ms[i - 1]);
    }
  if (rows.size() == 1) return ms.front() * n / rows.front();
  const size_t k = rows.size() - 1;
  const double slope = (ms[k] - ms[k - 1]) / (rows[k] - rows[k - 1]);
  return ms[k] + std::max(0.0, slope) * (n - rows[k]);
}

RowCost RowCost::scaled(double factor) const {
  RowCost out = *this;
  for (double& v : out.ms) v *= factor;
  return out;
}

double CostProfile::forward_ms(int rows, int logit_rows) const {
  return embed_ms + n_layer * layer.at(rows) + (logit_rows > 0 ? output.at(logit_rows) : 0.0);
}

nlohmann::json CostProfile::to_json() const {
  return {{"name", name},
          {"n_layer", n_layer},
          {"embed_ms", embed_ms},
          {"hidden_bytes_per_row", hidden_bytes_per_row},
          {"logits_bytes_per_row", logits_bytes_per_row},
          {"rows", layer.rows},
          {"layer_ms", layer.ms},
          {"output_rows", output.rows},
          {"output_ms", output.ms}};
}

CostProfile CostProfile::from_json(const nlohmann::json& j) {
  CostProfile p;
  try {
    p.name = j.value("name", std::string("file"));
    p.n_layer = j.at("n_layer").get<int>();
    p.embed_ms = j.value("embed_ms", 0.0);
    p.hidden_bytes_per_row = j.at("hidden_bytes_per_row").get<int64_t>();
    p.logits_bytes_per_row = j.at("logits_bytes_per_row").get<int64_t>();
    p.layer.rows = j.at("rows").get<std::vector<int>>();
    p.layer.ms = j.at("layer_ms").get<std::vector<double>>();
    p.output.rows = j.value("output_rows", p.layer.rows);
    p.output.ms = j.at("output_ms").get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    fail("cost profile: ", e.what());
  }
  check(p.n_layer >= 1, "cost profile: n_layer must be at least 1");
  check(p.hidden_bytes_per_row >= 0 && p.logits_bytes_per_row >= 0 && p.embed_ms >= 0,
        "cost profile: sizes and times must not be negative");
  for (const RowCost* c : {&p.layer, &p.output}) {
    check(!c->rows.empty() && c->rows.size() == c->ms.size(),
          "cost profile: each row list needs one time per row count");
    for (size_t i = 0; i < c->rows.size(); ++i) {
      check(c->rows[i] >= 1 && (i == 0 || c->rows[i] > c->rows[i - 1]),
            "cost profile: row counts must increase from 1");
      check(std::isfinite(c->ms[i]) && c->ms[i] >= 0, "cost profile: times must be >= 0");
    }
  }
  return p;
}

CostProfile CostProfile::load(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "cost profile ", path, ": cannot be read");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    fail("cost profile ", path, ": not JSON (", e.what(), ")");
  }
  try {
    return from_json(j);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
}

void CostProfile::save(const std::string& path) const {
  std::ofstream out(path);
  out << to_json().dump(1) << "\n";
  check(out.good(), "cannot write ", path);
}

namespace {

std::vector<int> profile_rows(int max_rows) {
  std::vector<int> rows;
  for (int n : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128})
    if (n <= max_rows) rows.push_back(n);
  return rows;
}

}  // namespace

CostProfile measure_profile(const Model& model, Worker& worker, int max_rows) {
  const ModelConfig& c = model.config();
  CpuExecutor executor(worker);
  CostProfile p;
  p.name = "measured: " + shape_of(c).name;
  p.n_layer = c.n_layer;
  p.hidden_bytes_per_row = static_cast<int64_t>(c.n_embd) * sizeof(float);
  p.logits_bytes_per_row = static_cast<int64_t>(c.n_vocab) * sizeof(float);
  constexpr int kWarmup = 2, kRuns = 5;
  KvCache kv(c, 512);
  // A short committed context, as decoding after a prompt sees.
  std::vector<int32_t> prefix(32);
  for (size_t i = 0; i < prefix.size(); ++i)
    prefix[i] = static_cast<int32_t>((i * 31 + 7) % c.n_vocab);
  executor.forward(model, Batch::chain(kv, prefix, false), kv);
  std::vector<int32_t> path(prefix.size());
  for (size_t i = 0; i < path.size(); ++i) path[i] = static_cast<int32_t>(i);
  kv.commit(path);
  for (int n : profile_rows(max_rows)) {
    std::vector<double> layers, outputs;
    std::vector<float> hidden(static_cast<size_t>(n) * c.n_embd), logits;
    for (int r = 0; r < kWarmup + kRuns; ++r) {
      std::vector<int32_t> tokens(n);
      for (int i = 0; i < n; ++i) tokens[i] = (i * 7919 + r * 104729 + 13) % c.n_vocab;
      const Batch batch = Batch::chain(kv, tokens, true);
      model.embed(batch.tokens, hidden.data());
      const int32_t cell = kv.add_cells(batch.positions, batch.parents);
      double t0 = now_ms(TimeBase::kWall);
      executor.forward_layers(model, batch, kv, cell, 0, c.n_layer, hidden.data());
      const double layer_ms = now_ms(TimeBase::kWall) - t0;
      logits.resize(static_cast<size_t>(n) * c.n_vocab);
      t0 = now_ms(TimeBase::kWall);
      executor.output_logits(model, hidden.data(), n, logits.data());
      const double output_ms = now_ms(TimeBase::kWall) - t0;
      kv.discard_spec();
      if (r < kWarmup) continue;
      layers.push_back(layer_ms / c.n_layer);
      outputs.push_back(output_ms);
    }
    p.layer.rows.push_back(n);
    p.layer.ms.push_back(median(layers));
    p.output.rows.push_back(n);
    p.output.ms.push_back(median(outputs));
  }
  // Medians of nearby sizes can come out a little out of order; more rows never cost less.
  for (RowCost* rc : {&p.layer, &p.output})
    for (size_t i = 1; i < rc->ms.size(); ++i) rc->ms[i] = std::max(rc->ms[i], rc->ms[i - 1]);
  return p;
}

CostProfile roofline_profile(const ModelShape& shape, double gb_per_s, double tflops,
                             double bytes_per_weight) {
  check(gb_per_s > 0 && tflops > 0 && bytes_per_weight > 0,
        "roofline: bandwidth, TFLOPS and bytes per weight must be positive");
  std::ostringstream name;
  name << "roofline: " << shape.name << " at " << gb_per_s << " GB/s, " << tflops << " TFLOPS, "
       << bytes_per_weight << " B/weight";
  CostProfile p;
  p.name = name.str();
  p.n_layer = shape.n_layer;
  p.hidden_bytes_per_row = static_cast<int64_t>(shape.n_embd) * sizeof(float);
  p.logits_bytes_per_row = static_cast<int64_t>(shape.n_vocab) * sizeof(float);
  auto cost = [&](double params, int rows) {
    const double read_ms = params * bytes_per_weight / (gb_per_s * 1e9) * 1e3;
    const double math_ms = 2.0 * params * rows / (tflops * 1e12) * 1e3;
    return std::max(read_ms, math_ms);
  };
  for (int n : profile_rows(128)) {
    p.layer.rows.push_back(n);
    p.layer.ms.push_back(cost(shape.layer_params(), n));
    p.output.rows.push_back(n);
    p.output.ms.push_back(cost(shape.output_params(), n));
  }
  return p;
}

CostProfile scale_profile(const CostProfile& measured, const ModelShape& from,
                          const ModelShape& to) {
  CostProfile p = measured;
  p.name = measured.name + ", scaled to " + to.name;
  p.n_layer = to.n_layer;
  p.layer = measured.layer.scaled(to.layer_params() / from.layer_params());
  p.output = measured.output.scaled(to.output_params() / from.output_params());
  p.hidden_bytes_per_row = static_cast<int64_t>(to.n_embd) * sizeof(float);
  p.logits_bytes_per_row = static_cast<int64_t>(to.n_vocab) * sizeof(float);
  return p;
}

CostProfile resolve_profile(const std::string& spec, const Model& model, Worker& worker,
                            const ModelShape& shape) {
  const ModelShape own = shape_of(model.config());
  const bool reshaped = shape.name != own.name || shape.n_layer != own.n_layer;
  if (spec.rfind("roofline:", 0) == 0) {
    std::vector<double> v;
    std::stringstream in(spec.substr(9));
    for (std::string item; std::getline(in, item, ':');) {
      char* end = nullptr;
      const double x = std::strtod(item.c_str(), &end);
      check(!item.empty() && *end == '\0' && x > 0, "cost profile '", spec,
            "': roofline:GBPS:TFLOPS[:BYTES_PER_WEIGHT] takes positive numbers");
      v.push_back(x);
    }
    check(v.size() == 2 || v.size() == 3, "cost profile '", spec,
          "': roofline:GBPS:TFLOPS[:BYTES_PER_WEIGHT]");
    return roofline_profile(shape, v[0], v[1], v.size() == 3 ? v[2] : 2.0);
  }
  CostProfile p = spec == "measured" ? measure_profile(model, worker) : CostProfile::load(spec);
  // A file prices the shape it was written for.
  return reshaped && spec == "measured" ? scale_profile(p, own, shape) : p;
}

}  // namespace parspec::sim
