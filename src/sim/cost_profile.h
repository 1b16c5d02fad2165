#pragma once
// What a model's forwards cost on the machine a simulation stands for: one
// transformer layer and the output (final norm and vocabulary matrix) as a
// function of the rows of a forward, and the bytes a pipeline sends per row.
// Profiles are measured on this machine, computed from a GPU's or CPU's
// bandwidth and peak arithmetic (a roofline), scaled from a measured model to
// a named shape, or read from a JSON file (docs/simulate.md gives the rules).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/worker.h"
#include "model/model.h"

namespace parspec::sim {

// The dimensions that set a dense transformer's cost: a model's own, or a
// named one (model_shape()).
struct ModelShape {
  std::string name;
  int n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_vocab = 0;
  // Weights of one layer (attention and feed-forward matrices) and of the output matrix.
  double layer_params() const;
  double output_params() const;
};
ModelShape shape_of(const ModelConfig& config);
// "llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-0.5b", "qwen2.5-7b",
// "qwen2.5-72b" (the published configurations). Throws Error for another name.
ModelShape model_shape(const std::string& name);
// The known names, "a, b, ..." (for help and errors).
std::string model_shape_names();

// Milliseconds as a function of a forward's rows: linear between the measured
// row counts, flat below the first, extended along the last segment beyond.
struct RowCost {
  std::vector<int> rows;  // increasing, from 1
  std::vector<double> ms;
  double at(int n) const;
  RowCost scaled(double factor) const;
};

struct CostProfile {
  std::string name;                  // where it comes from, for reports
  int n_layer = 0;                   // layers of the model it prices
  RowCost layer;                     // one layer over a forward of n rows
  RowCost output;                    // the output over n rows that want logits
  double embed_ms = 0;               // embedding lookup, per forward
  int64_t hidden_bytes_per_row = 0;  // hidden states a stage passes on
  int64_t logits_bytes_per_row = 0;  // logits the last stage sends back
  // A whole forward in one place: every layer, then the output.
  double forward_ms(int rows, int logit_rows) const;

  nlohmann::json to_json() const;
  static CostProfile from_json(const nlohmann::json& j);  // throws Error when malformed
  static CostProfile load(const std::string& path);       // throws Error naming the file
  void save(const std::string& path) const;
};

// Times `model` on `worker`: all layers over n rows (divided by the layer
// count) and the output over n rows, n = 1 .. max_rows (medians of a few runs
// on a short context).
CostProfile measure_profile(const Model& model, Worker& worker, int max_rows = 64);
// A roofline: each layer (and the output) takes the longer of reading its
// weights at `gb_per_s` (bytes_per_weight bytes each) and its 2·params·rows
// FLOPs at `tflops`.
CostProfile roofline_profile(const ModelShape& shape, double gb_per_s, double tflops,
                             double bytes_per_weight);
// A profile measured on a model of shape `from` priced for shape `to` (same
// weight type): a layer's time times the ratio of layer weights, the
// output's times the ratio of output weights (bytes read and FLOPs both
// scale with the weights).
CostProfile scale_profile(const CostProfile& measured, const ModelShape& from,
                          const ModelShape& to);

// A profile for a command-line SPEC: "measured" (measure_profile on `model`),
// "roofline:GBPS:TFLOPS[:BYTES]" (of `shape`, 2 bytes per weight unless given)
// or a JSON file; a measured or file profile is then scaled to `shape` when
// shape differs from the model's own. Throws Error for a bad SPEC.
CostProfile resolve_profile(const std::string& spec, const Model& model, Worker& worker,
                            const ModelShape& shape);

}  // namespace parspec::sim
