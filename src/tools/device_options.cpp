#include "tools/device_options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>

#include "core/error.h"
#include "cuda/backend.h"
#include "decode/local_model.h"
#include "decode/strategy.h"
#include "mpi/transport.h"

namespace parspec {

namespace {

// -1 for the CPU, the CUDA device's index otherwise; -2 when not given (-ngl decides).
int parse_device(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (name.empty()) return -2;
  if (name == "cpu" || name == "none") return -1;
  if (name == "cuda" || name == "gpu") return 0;
  if (name.starts_with("cuda") && name.size() > 4) {
    // from_chars, not stoi: an index too large for an int is an unknown device, not a crash.
    int index = -1;
    const char* last = name.data() + name.size();
    const auto [end, error] = std::from_chars(name.data() + 4, last, index);
    if (error == std::errc() && end == last && index >= 0) return index;
  }
  fail("--device: unknown device '", name, "' (cpu, none, cuda, cuda0, cuda1, ...)");
}

}  // namespace

void DeviceOptions::add_to(ArgParser& args) {
  args.option("-dev,--device", &device, "DEV",
              "where the models run: cpu (none), or cuda (cuda0, cuda1, ...: a CUDA GPU, all "
              "layers)");
  args.option("-ngl,--gpu-layers,--n-gpu-layers", &gpu_layers, "N",
              "target layers on the GPU: 0 = none, N >= the model's layer count (e.g. 99) = all; "
              "a partial offload is refused");
  args.option("-ngld,--gpu-layers-draft,--n-gpu-layers-draft", &gpu_layers_draft, "N",
              "draft model layers on the GPU, as -ngl");
  args.describe_default("-dev",
                        "not given: the GPU when -ngl N > 0 asks for it and one is present");
  args.describe_default("-ngl", "not given: the CPU unless --device asks for the GPU");
  args.describe_default("-ngld", "where the target runs");
  args.bound("-ngl", -1, 1 << 20);
  args.bound("-ngld", -1, 1 << 20);
}

int DeviceOptions::resolve(int layers, const Model& model, const char* flag) const {
  const int chosen = parse_device(device);
  if (chosen == -1) return -1;  // --device cpu wins over -ngl, as llama.cpp's -dev none
  if (layers == 0) {
    check(chosen == -2, flag, " 0 puts no layer on the GPU, but --device ", device, " asks for it");
    return -1;
  }
  const int n_layer = model.config().n_layer;
  if (layers > 0 && layers < n_layer)
    fail(flag, " ", layers, ": partial offload is not supported (", model.gguf().path(), " has ",
         n_layer, " layers): give -ngl ", n_layer, " or more (e.g. 99) for all of them, or 0");
  if (chosen == -2) {
    if (layers < 0) return -1;  // neither --device nor -ngl: the CPU
    const std::string reason = cuda::unavailable_reason(0);
    if (!reason.empty()) {
      std::fprintf(stderr, "note: %s %d: running on the CPU: %s\n", flag, layers, reason.c_str());
      return -1;
    }
    return 0;
  }
  const std::string reason = cuda::unavailable_reason(chosen);
  check(reason.empty(), "--device ", device, ": ", reason);
  return chosen;
}

WeightLoading DeviceOptions::loading(int layers) const {
  const int chosen = parse_device(device);
  const bool gpu =
      layers != 0 &&
      (chosen >= 0 || (chosen == -2 && layers > 0 && cuda::unavailable_reason(0).empty()));
  return gpu ? WeightLoading::kMap : WeightLoading::kAuto;
}

int DeviceOptions::target_device(const Model& target) const {
  return resolve(gpu_layers, target, "-ngl");
}

int DeviceOptions::draft_device(const Model& draft, int target_device) const {
  if (gpu_layers_draft < 0) return target_device;
  return resolve(gpu_layers_draft, draft, "-ngld");
}

std::string device_label(int device) {
  if (device < 0) return "cpu";
  return "cuda" + std::to_string(device) + ": " + cuda::describe(cuda::device_info(device));
}

void DeviceSides::init(const DeviceOptions& options, const Model& target, const Model* draft) {
  target_device = options.target_device(target);
  draft_device = draft != nullptr ? options.draft_device(*draft, target_device) : target_device;
  if (target_device < 0 && draft_device < 0) return;
  check(!mpi::launched_by_mpirun(),
        "--device cuda / -ngl: the GPU backend runs in one process, not under mpirun");
  if (target_device >= 0) {
    target_executor = cuda::make_executor(target_device);
    cuda::upload(*target_executor, target);
    std::fprintf(stderr, "target model on %s\n", device_label(target_device).c_str());
  }
  if (draft != nullptr && draft_device >= 0) {
    // Beside the target on its GPU, the drafter's short kernels go first
    // (strategies that draft while the target verifies).
    draft_executor = cuda::make_executor(draft_device, draft_device == target_device
                                                           ? cuda::StreamPriority::kFirst
                                                           : cuda::StreamPriority::kNormal);
    cuda::upload(*draft_executor, *draft);
    std::fprintf(stderr, "draft model on %s\n", device_label(draft_device).c_str());
  }
}

void DeviceSides::apply(StrategyConfig& c) const {
  if (target_device < 0 && draft_device < 0) return;
  c.device =
      "target on " + device_label(target_device) + ", draft on " + device_label(draft_device);
  if (target_executor) {
    ForwardExecutor* executor = target_executor.get();
    c.make_target = [executor](const StrategyConfig& config) -> std::unique_ptr<Target> {
      return std::make_unique<LocalTarget>(config.target, *executor);
    };
  }
  if (draft_executor) {
    ForwardExecutor* executor = draft_executor.get();
    c.draft_executor = executor;
    c.make_drafter = [executor](const StrategyConfig& config) -> std::unique_ptr<Drafter> {
      return std::make_unique<ModelDrafter>(config.draft, *executor);
    };
  }
}

}  // namespace parspec
