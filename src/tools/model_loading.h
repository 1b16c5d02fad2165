#pragma once
// How the subcommands open a model file: under mpirun every rank, rank 0
// included, maps it and reads in only the layers it runs (Model::hold_in_memory);
// a single process reads a large file into huge pages (WeightLoading::kAuto),
// or maps it when the model runs on a GPU.
#include <memory>
#include <string>

#include "model/model.h"
#include "mpi/transport.h"

namespace parspec {

// `loading`: kMap for a model that runs on a GPU (the device keeps its own copy).
inline std::shared_ptr<Model> load_model(const std::string& path,
                                         WeightLoading loading = WeightLoading::kAuto) {
  return Model::load(path, mpi::launched_by_mpirun() ? WeightLoading::kMap : loading);
}

}  // namespace parspec
