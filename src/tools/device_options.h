#pragma once
// Where the models run: llama.cpp's GPU flags (--device/-dev, -ngl, -ngld)
// and the executors they choose (CPU threads, or the CUDA backend).
#include <memory>
#include <string>

#include "model/executor.h"
#include "model/model.h"
#include "tools/args.h"

namespace parspec {

struct StrategyConfig;

struct DeviceOptions {
  std::string device;         // empty: not given; cpu (none), cuda (cuda0, cuda1, ...)
  int gpu_layers = -1;        // -ngl; -1: not given
  int gpu_layers_draft = -1;  // -ngld; -1: not given

  void add_to(ArgParser& args);
  // Which CUDA device the target / the draft runs on (-1: the CPU), checked
  // against the models' layer counts. -ngl N > 0 offloads every layer (a
  // partial offload is refused); without --device it asks for the GPU where
  // there is one and otherwise runs on the CPU with a note. --device cuda
  // without -ngl offloads everything; a CUDA device that cannot be used is an
  // error then. The draft follows the target unless -ngld is given.
  int target_device(const Model& target) const;
  int draft_device(const Model& draft, int target_device) const;
  // How to load the target / the draft: mapped where it will run on a GPU
  // (the device keeps its own copy), read into memory otherwise.
  WeightLoading target_loading() const { return loading(gpu_layers); }
  WeightLoading draft_loading() const {
    return loading(gpu_layers_draft < 0 ? gpu_layers : gpu_layers_draft);
  }

 private:
  WeightLoading loading(int layers) const;
  int resolve(int layers, const Model& model, const char* flag) const;
};

// "cpu" or the GPU's description, for info and bench-forward.
std::string device_label(int device);

// The executors that run a target and its draft model where DeviceOptions
// puts them, and what plugs them into a strategy's config.
struct DeviceSides {
  int target_device = -1, draft_device = -1;  // -1: the CPU
  std::unique_ptr<ForwardExecutor> target_executor, draft_executor;

  // Chooses the devices (`draft` null: none) and, for each side on a GPU,
  // makes its own executor (a strategy may run both at once) and uploads the
  // model, saying so on stderr. Refused under mpirun.
  void init(const DeviceOptions& options, const Model& target, const Model* draft);
  // c.device, c.make_target and c.make_drafter for the sides on a GPU
  // (nothing when both are on the CPU).
  void apply(StrategyConfig& c) const;
};

}  // namespace parspec
