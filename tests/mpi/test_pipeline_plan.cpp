// The pipeline's plan, without MPI: how layers are split between stages and
// how ranks recognise the same model file.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "core/error.h"
#include "mpi/pipeline.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::TempDir;
using testing_support::write_model;

std::shared_ptr<Model> model_with_layers(const TempDir& dir, int n_layer, int n_vocab) {
  RandomModelSpec spec;
  spec.n_vocab = n_vocab;
  spec.n_embd = 64;
  spec.n_ff = 128;
  spec.n_layer = n_layer;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.weight_type = DType::F32;
  const std::string name =
      "layers-" + std::to_string(n_layer) + "-vocab-" + std::to_string(n_vocab) + ".gguf";
  return Model::load(write_model(dir, name, spec));
}

// Bytes each stage reads per token under a split, the output matrix on the last.
std::vector<double> stage_costs(const Model& m, const std::vector<int>& counts) {
  std::vector<double> layer(m.config().n_layer, 0.0);
  double output = 0;
  for (const GgufTensorInfo& t : m.gguf().tensors()) {
    if (t.name.rfind("blk.", 0) == 0) layer[std::stoi(t.name.substr(4))] += t.n_bytes;
    if (t.name == "output.weight") output += t.n_bytes;
  }
  if (m.gguf().find_tensor("output.weight") == nullptr)
    output = m.gguf().find_tensor("token_embd.weight")->n_bytes;
  std::vector<double> costs;
  int l = 0;
  for (int c : counts) {
    double sum = 0;
    for (int i = 0; i < c; ++i) sum += layer[l++];
    costs.push_back(sum);
  }
  costs.back() += output;
  return costs;
}

// Every way to cut n layers into k non-empty consecutive ranges.
void all_splits(int n, int k, std::vector<int>& prefix, std::vector<std::vector<int>>& out) {
  if (k == 1) {
    prefix.push_back(n);
    out.push_back(prefix);
    prefix.pop_back();
    return;
  }
  for (int first = 1; first <= n - (k - 1); ++first) {
    prefix.push_back(first);
    all_splits(n - first, k - 1, prefix, out);
    prefix.pop_back();
  }
}

TEST(PipelinePlan, BalancedSplitMinimisesTheLargestStage) {
  TempDir dir;
  // A large vocabulary makes the output matrix worth several layers.
  for (int n_vocab : {300, 4000}) {
    const auto model = model_with_layers(dir, 7, n_vocab);
    for (int stages = 1; stages <= 4; ++stages) {
      const std::vector<int> split = mpi::split_layers(*model, stages, "");
      ASSERT_EQ(static_cast<int>(split.size()), stages);
      int total = 0;
      for (int c : split) {
        EXPECT_GE(c, 1);
        total += c;
      }
      EXPECT_EQ(total, 7);
      const auto costs = stage_costs(*model, split);
      const double got = *std::max_element(costs.begin(), costs.end());
      std::vector<std::vector<int>> every;
      std::vector<int> prefix;
      all_splits(7, stages, prefix, every);
      double best = 1e300;
      for (const auto& s : every) {
        const auto c = stage_costs(*model, s);
        best = std::min(best, *std::max_element(c.begin(), c.end()));
      }
      EXPECT_LE(got, best * (1 + 1e-9)) << "vocab " << n_vocab << ", " << stages << " stages";
    }
  }
}

TEST(PipelinePlan, ExplicitSplitsAreCheckedWithClearErrors) {
  TempDir dir;
  const auto model = model_with_layers(dir, 6, 300);
  EXPECT_EQ(mpi::split_layers(*model, 3, "1,2,3"), (std::vector<int>{1, 2, 3}));
  auto message = [&](int stages, const std::string& split) {
    try {
      mpi::split_layers(*model, stages, split);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(2, "1,2"), "--layer-split '1,2' covers 3 layers; the model has 6");
  EXPECT_EQ(message(3, "3,3"), "--layer-split '3,3' has 2 entries for 3 stages");
  EXPECT_EQ(message(2, "3,x"), "--layer-split '3,x': each entry is a number of layers >= 1");
  EXPECT_EQ(message(2, "6,0"), "--layer-split '6,0': each entry is a number of layers >= 1");
  EXPECT_EQ(message(7, ""), "--stages 7: the model has only 6 layers");
}

TEST(PipelinePlan, FileIdentityTellsFilesApart) {
  TempDir dir;
  const auto a = model_with_layers(dir, 2, 300);
  const auto b = model_with_layers(dir, 3, 300);
  const mpi::FileIdentity ia = mpi::identify_file(a->gguf().path());
  EXPECT_EQ(ia, mpi::identify_file(a->gguf().path()));
  EXPECT_FALSE(ia == mpi::identify_file(b->gguf().path()));
  // Same size, one byte changed in the header.
  const std::string copy = dir.file("copy.gguf");
  {
    std::ifstream in(a->gguf().path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes[100] ^= 1;
    std::ofstream(copy, std::ios::binary) << bytes;
  }
  const mpi::FileIdentity ic = mpi::identify_file(copy);
  EXPECT_EQ(ic.size, ia.size);
  EXPECT_NE(ic.hash, ia.hash);
  EXPECT_THROW(mpi::identify_file(dir.file("missing.gguf")), Error);
}

}  // namespace
}  // namespace parspec
