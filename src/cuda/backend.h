#pragma once
// The CUDA backend as the rest of parspec sees it: whether it was built,
// which GPU it would run on, and a ForwardExecutor (model/executor.h) that runs
// a model's forwards there. Nothing here needs CUDA headers; in a build
// without nvcc (backend_none.cpp) every request for the GPU fails with the
// reason.
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/attention_kernel.h"
#include "model/executor.h"

namespace parspec::cuda {

// Whether this build has the CUDA backend.
bool built();

struct DeviceInfo {
  int index = 0;
  std::string name;          // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;  // compute capability
  uint64_t total_bytes = 0, free_bytes = 0;
  double bandwidth_gbs = 0;  // peak memory bandwidth from the clock and bus width; 0 if unknown
};

// Why `device` cannot run forwards: not built with CUDA, no driver, no such
// device. Empty when it can.
std::string unavailable_reason(int device = 0);
// The device's description; throws Error with unavailable_reason() if none.
DeviceInfo device_info(int device = 0);
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)".
std::string describe(const DeviceInfo& info);

// Device-to-device copy bandwidth in GB/s (bytes read plus bytes written per
// second, the fastest of a few copies of a `bytes` buffer): the roofline that
// decode speeds are compared with.
double copy_bandwidth_gbs(int device, size_t bytes);

// An executor on `device`: models are uploaded on their first forward (F32,
// F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K weights; other types fail with a message), and
// every KvCache it runs gets its rows in device memory (KvCache::attach_store).
// One job at a time, as CpuExecutor. Throws Error with the reason where no
// device can be used. kFirst: its kernels are scheduled ahead of those of
// kNormal executors on the same device (a drafter beside its target, whose
// short launches would otherwise queue behind the target's; the results are
// the same bits either way; PARSPEC_CUDA_DRAFT_PRIORITY=normal turns it off).
enum class StreamPriority { kNormal, kFirst };
std::unique_ptr<ForwardExecutor> make_executor(int device = 0,
                                               StreamPriority priority = StreamPriority::kNormal);

// Uploads `model` to the executor's device now (not at the first forward),
// so that an out-of-memory error comes before a request starts. `executor`
// must come from make_executor.
void upload(ForwardExecutor& executor, const Model& model);

// Whether full passes of up to 64 rows replay CUDA graphs (one per row
// bucket: 1 to 8, 16, 32, 64), as they do unless PARSPEC_CUDA_GRAPHS=0; the
// results are the same bits either way. For tests and measurements.
void use_graphs(ForwardExecutor& executor, bool on);

// Which attention kernel the executor runs (attention_kernel.h), as
// PARSPEC_CUDA_ATTENTION=per-head, =grouped or =tiled chooses for a new one; the same
// bits from each. Before the executor's first model upload or forward. For
// tests and measurements.
void use_attention(ForwardExecutor& executor, AttentionKernel kernel);

// Greedy selection on the device: the index of the largest logit of each of
// the `n` rows the last forward of `executor` returned, without copying them
// (first index on ties, as the CPU's argmax). For benchmarks of the decode
// step where the vocabulary would otherwise cross the bus.
std::vector<int32_t> last_argmax(ForwardExecutor& executor, int n);

}  // namespace parspec::cuda
