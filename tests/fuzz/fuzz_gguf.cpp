// libFuzzer target for the model loader: the input is a GGUF file. It must
// parse and load as a model (config, every tensor's shape and type, unused
// tensors), a tokenizer, and a draft/target vocabulary comparison, or fail
// with parspec::Error — never crash, leak or read out of bounds (ASan, UBSan).
// A loaded model must have the shapes its config promises.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/error.h"
#include "model/compat.h"
#include "model/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace {

void require(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<parspec::GgufFile> file;
  try {
    file = parspec::GgufFile::from_memory(data, size, "<fuzz>");
  } catch (const parspec::Error&) {
    return 0;
  }
  try {
    (void)parspec::draft_incompatibility(*file, *file);
  } catch (const parspec::Error&) {
  }
  try {
    auto tokenizer = parspec::Tokenizer::from_gguf(*file);
    require(tokenizer->n_vocab() > 0);
  } catch (const parspec::Error&) {
  }
  try {
    const auto model = parspec::Model::from_gguf(std::move(file));
    const parspec::ModelConfig& c = model->config();
    require(c.n_layer > 0 && c.n_embd > 0 && c.n_vocab > 0 && c.head_dim > 0);
    require(c.n_head % c.n_head_kv == 0);
  } catch (const parspec::Error&) {
  }
  return 0;
}
