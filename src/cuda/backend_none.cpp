// The CUDA backend of a build without nvcc: every use says so.
#include "core/error.h"
#include "cuda/backend.h"

namespace parspec::cuda {

namespace {

constexpr const char* kNotBuilt =
    "this parspec was built without the CUDA backend (CMake found no nvcc: install the CUDA "
    "toolkit, or put nvcc on PATH or in CUDACXX, and configure again)";

}  // namespace

bool built() {
  return false;
}

std::string unavailable_reason(int) {
  return kNotBuilt;
}

DeviceInfo device_info(int) {
  fail(kNotBuilt);
}

std::string describe(const DeviceInfo& info) {
  return info.name;
}

double copy_bandwidth_gbs(int, size_t) {
  fail(kNotBuilt);
}

std::unique_ptr<ForwardExecutor> make_executor(int, StreamPriority) {
  fail(kNotBuilt);
}

void upload(ForwardExecutor&, const Model&) {
  fail(kNotBuilt);
}

void use_graphs(ForwardExecutor&, bool) {
  fail(kNotBuilt);
}

void use_attention(ForwardExecutor&, AttentionKernel) {
  fail(kNotBuilt);
}

std::vector<int32_t> last_argmax(ForwardExecutor&, int) {
  fail(kNotBuilt);
}

}  // namespace parspec::cuda
