#include "strategies/ppd/ppd_prompts.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "model/gguf.h"
#include "sample/rng.h"

namespace parspec {

namespace {

constexpr const char* kEmbdTensor = "ppd.prompt_embd";
constexpr int kMaxPromptTokens = 16;
constexpr int kMaxEnsembleTokens = 64;

}  // namespace

PpdPrompts PpdPrompts::load(const std::string& path) {
  const std::unique_ptr<GgufFile> file = GgufFile::open(path);
  const auto bad = [&](const auto&... why) {
    fail(path, ": not a usable PPD side file: ", why...);
  };
  if (!is_ppd_side_file(*file))
    bad("general.architecture is not 'ppd' (models/zoo/ppd_train.py writes these files)");
  PpdPrompts p;
  p.path = path;
  p.file_bytes = std::filesystem::file_size(path);
  p.prompt_tokens = static_cast<int>(file->get_int("ppd.prompt_tokens"));
  p.ensemble_tokens = static_cast<int>(file->get_int("ppd.ensemble_tokens"));
  p.n_embd = static_cast<int>(file->get_int("ppd.n_embd"));
  if (p.prompt_tokens < 1 || p.prompt_tokens > kMaxPromptTokens)
    bad("ppd.prompt_tokens is ", p.prompt_tokens, " (1..", kMaxPromptTokens, " supported)");
  if (p.ensemble_tokens < 1 || p.ensemble_tokens > kMaxEnsembleTokens)
    bad("ppd.ensemble_tokens is ", p.ensemble_tokens, " (1..", kMaxEnsembleTokens, " supported)");
  if (p.n_embd < 1 || p.n_embd > (1 << 16)) bad("ppd.n_embd is ", p.n_embd);
  const std::string mask = file->get_string("ppd.mask", "ensemble");
  if (mask != "ensemble") bad("attention mask '", mask, "' (only 'ensemble' is supported)");
  const GgufTensorInfo* t = file->find_tensor(kEmbdTensor);
  if (t == nullptr) bad("no tensor ", kEmbdTensor);
  const int64_t rows = static_cast<int64_t>(p.prompt_tokens) * p.ensemble_tokens;
  if (t->dims.size() != 2 || t->dims[0] != p.n_embd || t->dims[1] != rows)
    bad(kEmbdTensor, " is not ", p.n_embd, " x ", rows, " (n_embd x prompt tokens * ensemble)");
  p.embeddings.resize(static_cast<size_t>(rows) * p.n_embd);
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(t->type, file->tensor_data(*t) + r * row_bytes(t->type, p.n_embd),
                   p.embeddings.data() + r * p.n_embd, p.n_embd);
  for (float v : p.embeddings)
    if (!std::isfinite(v)) bad(kEmbdTensor, " holds NaN or Inf");
  if (file->has("ppd.rank_accuracy")) {
    const std::vector<float> flat = file->get_float_array("ppd.rank_accuracy");
    const int64_t ranks = file->get_int("ppd.rank_count", 0);
    if (ranks < 1 || static_cast<int64_t>(flat.size()) != ranks * p.prompt_tokens)
      bad("ppd.rank_accuracy does not hold ppd.rank_count values per prompt token");
    for (int i = 0; i < p.prompt_tokens; ++i) {
      std::vector<double> row(flat.begin() + i * ranks, flat.begin() + (i + 1) * ranks);
      for (double a : row)
        if (!(a >= 0.0 && a <= 1.0)) bad("ppd.rank_accuracy holds a value outside [0, 1]");
      p.rank_accuracy.push_back(std::move(row));
    }
  }
  return p;
}

void PpdPrompts::check_fits(const Model& model) const {
  check(n_embd == model.config().n_embd, path, ": the PPD prompt tokens are ", n_embd,
        " wide but the model's embeddings are ", model.config().n_embd,
        " (train them for this model with models/zoo/ppd_train.py, or inflate them with it)");
}

std::vector<int32_t> PpdPrompts::append_rows(Batch& batch, int32_t token, int32_t position,
                                             int32_t parent, int32_t first, int m) const {
  if (batch.input_embeddings.empty()) batch.input_embeddings.assign(batch.size(), nullptr);
  std::vector<int32_t> rows(static_cast<size_t>(m) * ensemble_tokens, -1);
  for (int j = 0; j < ensemble_tokens; ++j) {
    int32_t above = parent;
    for (int p = 0; p < m; ++p) {
      const int32_t row = static_cast<int32_t>(batch.size());
      batch.add(token, position + 1 + p, above, true);
      batch.input_embeddings.push_back(this->row(p, j));
      rows[static_cast<size_t>(p) * ensemble_tokens + j] = row;
      above = first + row;
    }
  }
  return rows;
}

bool is_ppd_side_file(const GgufFile& file) {
  return file.get_string("general.architecture", "") == "ppd";
}

std::string ppd_side_file_for(const std::string& model_path) {
  const std::string suffix = ".gguf";
  if (model_path.size() > suffix.size() &&
      model_path.compare(model_path.size() - suffix.size(), suffix.size(), suffix) == 0)
    return model_path.substr(0, model_path.size() - suffix.size()) + ".ppd.gguf";
  return model_path + ".ppd.gguf";
}

void write_random_ppd_prompts(const std::string& path, int n_embd, int prompt_tokens,
                              int ensemble_tokens, uint64_t seed, float scale) {
  check(n_embd >= 1 && prompt_tokens >= 1 && ensemble_tokens >= 1,
        "write_random_ppd_prompts: shape values must be positive");
  Rng rng(seed);
  const size_t n = static_cast<size_t>(prompt_tokens) * ensemble_tokens * n_embd;
  std::vector<float> embd(n);
  // Uniform in [-a, a] has RMS a / sqrt(3).
  for (float& v : embd)
    v = static_cast<float>((2.0 * rng.uniform() - 1.0) * std::sqrt(3.0) * scale);
  const int ranks = 4;
  std::vector<float> rank_accuracy;
  for (int i = 0; i < prompt_tokens; ++i)
    for (int r = 0; r < ranks; ++r)
      rank_accuracy.push_back(static_cast<float>(0.5 / (1 << r) / (i + 1)));
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("ppd"));
  w.set("general.name", GgufValue::string("random PPD prompt tokens"));
  w.set("ppd.prompt_tokens", GgufValue::u32(prompt_tokens));
  w.set("ppd.ensemble_tokens", GgufValue::u32(ensemble_tokens));
  w.set("ppd.mask", GgufValue::string("ensemble"));
  w.set("ppd.n_embd", GgufValue::u32(n_embd));
  w.set("ppd.rank_count", GgufValue::u32(ranks));
  w.set("ppd.rank_accuracy", GgufValue::f32_array(rank_accuracy));
  w.add_tensor(kEmbdTensor, {n_embd, static_cast<int64_t>(prompt_tokens) * ensemble_tokens},
               DType::F32, embd.data(), embd.size() * sizeof(float));
  w.write(path);
}

void inflate_ppd_prompts(const std::string& source, int n_embd, const std::string& output) {
  const PpdPrompts p = PpdPrompts::load(source);
  check(n_embd >= p.n_embd, "inflating ", source, ": the new width ", n_embd,
        " is smaller than the prompt tokens' ", p.n_embd);
  const int64_t rows = static_cast<int64_t>(p.prompt_tokens) * p.ensemble_tokens;
  std::vector<float> wide(static_cast<size_t>(rows) * n_embd, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(p.embeddings.begin() + r * p.n_embd, p.embeddings.begin() + (r + 1) * p.n_embd,
              wide.begin() + r * n_embd);
  const std::unique_ptr<GgufFile> file = GgufFile::open(source);
  GgufWriter w;
  for (const auto& [key, value] : file->metadata()) w.set(key, value);
  w.set("ppd.n_embd", GgufValue::u32(n_embd));
  w.add_tensor(kEmbdTensor, {n_embd, rows}, DType::F32, wide.data(), wide.size() * sizeof(float));
  w.write(output);
}

}  // namespace parspec
