#include "model/executor.h"

namespace parspec {

std::vector<float> CpuExecutor::forward(const Model& model, const Batch& batch, KvCache& kv) {
  return model.forward(worker_, batch, kv);
}

std::vector<std::vector<float>> CpuExecutor::forward_multi(
    const Model& model, std::span<const Model::SequenceBatch> sequences) {
  return model.forward_multi(worker_, sequences);
}

void CpuExecutor::forward_layers(const Model& model, const Batch& batch, KvCache& kv,
                                 int32_t first_cell, int layer_first, int layer_last,
                                 float* hidden) {
  model.forward_layers(worker_, batch, kv, first_cell, layer_first, layer_last, hidden);
}

void CpuExecutor::attention_output(const Model& model, int layer, const Batch& batch, KvCache& kv,
                                   int32_t first_cell, const float* hidden, float* out,
                                   AttentionProbe* probe) {
  model.attention_output(worker_, layer, batch, kv, first_cell, hidden, out, probe);
}

void CpuExecutor::mlp_block(const Model& model, int layer, int n_tokens, float* hidden) {
  model.mlp_block(worker_, layer, n_tokens, hidden);
}

void CpuExecutor::output_logits(const Model& model, const float* hidden, int n, float* logits) {
  model.output_logits(worker_, hidden, n, logits);
}

}  // namespace parspec
