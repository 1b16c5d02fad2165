// parspec bench-forward: how fast the forward pass is on this machine, set
// beside the memory-bandwidth roofline measured in the same run.
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/huge_buffer.h"
#include "core/worker.h"
#include "cuda/backend.h"
#include "kernels/isa.h"
#include "model/forward_timing.h"
#include "model/model.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/device_options.h"
#include "tools/model_loading.h"
#include "tools/prompt_input.h"

namespace parspec {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::vector<int> parse_int_list(const std::string& text, const char* flag) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    try {
      size_t used = 0;
      out.push_back(std::stoi(part, &used));
      check(used == part.size() && out.back() > 0, "");
    } catch (...) {
      fail("invalid list '", text, "' for ", flag, " (expected positive integers, e.g. 1,2)");
    }
  }
  check(!out.empty(), "empty list for ", flag);
  return out;
}

// Streaming read bandwidth in GB/s with the worker's threads: each thread sums
// its own contiguous part of a buffer far larger than any cache, held on huge
// pages as a model's weights are. The buffer is kept so that the test runs
// again beside every decode measurement: a shared VM's memory changes speed
// from one minute to the next, and decode over the roofline is only a fair
// ratio between measurements taken side by side.
class ReadBandwidth {
 public:
  ReadBandwidth(Worker& worker, size_t bytes)
      : n_(bytes / sizeof(float)), buf_(n_ * sizeof(float)) {
    float* p = floats();
    worker.parallel_for(static_cast<int64_t>(n_), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<float>(i & 1023);
    });
  }

  // The fastest of `passes` reads of the whole buffer.
  double measure(Worker& worker, int passes) const {
    std::vector<float> sums(worker.n_threads());
    double best = 0;
    for (int rep = 0; rep < passes; ++rep) {
      const auto t0 = Clock::now();
      worker.run([&](int index, int count) {
        int64_t b, e;
        Worker::split(static_cast<int64_t>(n_ / 32), index, count, b, e);
        const float* p = floats();
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t i = b * 32; i < e * 32; i += 32) {
          a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
          a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
          a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
          a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
        }
        float tmp[8];
        _mm256_storeu_ps(tmp, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        sums[index] = tmp[0] + tmp[7];
      });
      best = std::max(best, n_ * sizeof(float) / (ms_since(t0) * 1e6));
    }
    return best;
  }

 private:
  float* floats() const { return reinterpret_cast<float*>(buf_.data()); }
  size_t n_;
  HugePageBuffer buf_;
};

std::vector<int32_t> some_tokens(int n, int n_vocab, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i)
    t[i] = static_cast<int32_t>((i * 7919 + salt * 104729 + 13) % n_vocab);
  return t;
}

// What one row of the table measures, shared by every thread count.
struct RowSettings {
  int context, repeat, decode_tokens;
  int64_t bandwidth_mib;
  std::vector<int> batch_sizes;
  TimeBase base;
  bool tty;  // progress lines on stderr
};

struct DecodeResult {
  double tok_per_s;          // median over the repetitions
  double read_gb_per_s;      // median of the bandwidth tests beside them
  double roofline_fraction;  // median of each repetition's rate over its own roofline
  double split_jobs;         // jobs split over threads per decoded token
};

// Single-token decode after `context` committed tokens, each repetition right
// after a bandwidth test; the cache is cut back to `context` after each.
DecodeResult measure_decode(const Model& model, Worker& worker, KvCache& kv,
                            const ReadBandwidth& bandwidth, const RowSettings& s) {
  const ModelConfig& c = model.config();
  std::vector<double> decode_rates, gbps, fractions;
  uint64_t jobs = 0;
  for (int r = 0; r < s.repeat; ++r) {
    gbps.push_back(bandwidth.measure(worker, 2));
    const uint64_t jobs_before = worker.parallel_jobs();
    const std::vector<int32_t> toks = some_tokens(s.decode_tokens, c.n_vocab, r);
    const double t0 = now_ms(s.base);
    for (int32_t t : toks) {
      model.forward(worker, Batch::chain(kv, std::span(&t, 1), true), kv);
      const int32_t cell = 0;
      kv.commit(std::span(&cell, 1));
    }
    decode_rates.push_back(s.decode_tokens * 1000.0 / (now_ms(s.base) - t0));
    jobs += worker.parallel_jobs() - jobs_before;
    fractions.push_back(decode_rates.back() / (gbps.back() * 1e9 / model.weight_bytes()));
    kv.truncate(s.context);
  }
  // Jobs split over threads per decoded token: each is one wake-up and one
  // wait for the last chunk, the only synchronisation of a forward.
  const double split_jobs =
      static_cast<double>(jobs) / (static_cast<double>(s.repeat) * s.decode_tokens);
  return {median(decode_rates), median(gbps), median(fractions), split_jobs};
}

// Measures and prints one table row for `threads`; returns it as JSON.
nlohmann::json measure_row(const Model& model, int threads, const RowSettings& s) {
  const ModelConfig& c = model.config();
  const std::vector<int>& batch_sizes = s.batch_sizes;
  const int max_batch = *std::max_element(batch_sizes.begin(), batch_sizes.end());
  Worker worker(threads);
  const ReadBandwidth bandwidth(worker, static_cast<size_t>(s.bandwidth_mib) << 20);

  KvCache kv(c, s.context + std::max(max_batch, s.decode_tokens) + 1);
  model.forward(worker, Batch::chain(kv, some_tokens(s.context, c.n_vocab, 99), false), kv);
  kv.commit([&] {
    std::vector<int32_t> path(s.context);
    for (int i = 0; i < s.context; ++i) path[i] = i;
    return path;
  }());

  if (s.tty) std::fprintf(stderr, "[%d threads] bandwidth and decoding...\n", threads);
  const DecodeResult d = measure_decode(model, worker, kv, bandwidth, s);
  const double roofline = d.read_gb_per_s * 1e9 / model.weight_bytes();

  std::vector<double> latency;
  for (int n : batch_sizes) {
    if (s.tty) std::fprintf(stderr, "[%d threads] L(%d)...\n", threads, n);
    latency.push_back(median_forward_ms(model, worker, kv, n, 0, s.repeat, false, s.base));
  }
  auto l_of = [&](int n) {
    for (size_t i = 0; i < batch_sizes.size(); ++i)
      if (batch_sizes[i] == n) return latency[i];
    return -1.0;
  };
  std::printf("| %d | %.1f | %.2f | %.2f | %.0f%% | %.0f |", threads, d.read_gb_per_s, roofline,
              d.tok_per_s, 100.0 * d.roofline_fraction, d.split_jobs);
  for (double l : latency) std::printf(" %.1f |", l);
  if (l_of(1) > 0 && l_of(8) > 0)
    std::printf(" %.2f |\n", l_of(8) / l_of(1));
  else
    std::printf(" – |\n");
  std::fflush(stdout);

  nlohmann::json lat = nlohmann::json::object();
  for (size_t i = 0; i < batch_sizes.size(); ++i) lat[std::to_string(batch_sizes[i])] = latency[i];
  return {{"threads", threads},
          {"read_gb_per_s", d.read_gb_per_s},
          {"roofline_tok_per_s", roofline},
          {"decode_tok_per_s", d.tok_per_s},
          {"roofline_fraction", d.roofline_fraction},
          {"split_jobs_per_token", d.split_jobs},
          {"latency_ms", lat}};
}

// The GPU's row: decode and L(n) through a CUDA executor, beside the device's
// copy bandwidth (measured once: a GPU's memory does not change speed with
// the neighbours as a shared VM's does).
nlohmann::json measure_gpu_row(const Model& model, int device, const RowSettings& s) {
  const ModelConfig& c = model.config();
  const int max_batch = *std::max_element(s.batch_sizes.begin(), s.batch_sizes.end());
  auto executor = cuda::make_executor(device);
  cuda::upload(*executor, model);
  const double gbps = cuda::copy_bandwidth_gbs(device, static_cast<size_t>(s.bandwidth_mib) << 20);
  const double roofline = gbps * 1e9 / model.weight_bytes();

  KvCache kv(c, s.context + std::max(max_batch, s.decode_tokens) + 1);
  executor->forward(model, Batch::chain(kv, some_tokens(s.context, c.n_vocab, 99), false), kv);
  std::vector<int32_t> prefix(s.context);
  for (int i = 0; i < s.context; ++i) prefix[i] = i;
  kv.commit(prefix);

  if (s.tty) std::fprintf(stderr, "[gpu] decoding...\n");
  std::vector<double> rates;
  for (int r = 0; r < s.repeat + 1; ++r) {  // the first repetition warms up
    const std::vector<int32_t> toks = some_tokens(s.decode_tokens, c.n_vocab, r);
    const double t0 = now_ms(s.base);
    for (int32_t t : toks) {
      executor->forward(model, Batch::chain(kv, std::span(&t, 1), true), kv);
      const int32_t cell = 0;
      kv.commit(std::span(&cell, 1));
    }
    if (r > 0) rates.push_back(s.decode_tokens * 1000.0 / (now_ms(s.base) - t0));
    kv.truncate(s.context);
  }
  const double tok_per_s = median(rates);
  std::vector<double> latency;
  for (int n : s.batch_sizes) {
    if (s.tty) std::fprintf(stderr, "[gpu] L(%d)...\n", n);
    latency.push_back(median_forward_ms(model, *executor, kv, n, 1, s.repeat, false, s.base));
  }
  std::printf("| cuda%d | %.0f | %.1f | %.1f | %.0f%% |", device, gbps, roofline, tok_per_s,
              100.0 * tok_per_s / roofline);
  for (double l : latency) std::printf(" %.2f |", l);
  double l1 = -1, l8 = -1;
  for (size_t i = 0; i < s.batch_sizes.size(); ++i) {
    if (s.batch_sizes[i] == 1) l1 = latency[i];
    if (s.batch_sizes[i] == 8) l8 = latency[i];
  }
  if (l1 > 0 && l8 > 0)
    std::printf(" %.2f |\n", l8 / l1);
  else
    std::printf(" – |\n");
  std::fflush(stdout);
  nlohmann::json lat = nlohmann::json::object();
  for (size_t i = 0; i < s.batch_sizes.size(); ++i)
    lat[std::to_string(s.batch_sizes[i])] = latency[i];
  return {{"device", device_label(device)},
          {"copy_gb_per_s", gbps},
          {"roofline_tok_per_s", roofline},
          {"decode_tok_per_s", tok_per_s},
          {"roofline_fraction", tok_per_s / roofline},
          {"latency_ms", lat}};
}

}  // namespace

int cmd_bench_forward(int argc, char** argv) {
  std::string model_path, threads_text = "1,2", batch_text = "1,2,4,8,16,32,64", json_path;
  int context = 64, repeat = 5, decode_tokens = 16;
  int64_t bandwidth_mib = 1024;
  ArgParser args("bench-forward",
                 "Measures single-token decode speed against the memory-bandwidth roofline\n"
                 "(weight bytes / streaming read bandwidth, measured right before each decode\n"
                 "repetition; the share of it is the median of the repetitions' own), and the\n"
                 "latency L(n) of one forward pass over n tokens. On a GPU (--device cuda or\n"
                 "-ngl 99): one row, against the device's copy bandwidth.");
  args.option("-m,--model", &model_path, "FILE", "model (GGUF)");
  args.option("-t,--threads", &threads_text, "LIST", "thread counts to measure");
  args.option("-b,--batch-sizes", &batch_text, "LIST", "batch sizes n for L(n)");
  args.option("--context", &context, "N", "committed tokens before each measured forward");
  args.option("--decode-tokens", &decode_tokens, "N", "tokens decoded per decode measurement");
  args.option("-r,--repeat", &repeat, "N", "repetitions (the median is reported)");
  args.option("--bandwidth-mib", &bandwidth_mib, "MIB",
              "buffer size for the bandwidth test (run before each decode repetition)");
  args.option("--json", &json_path, "FILE", "also write the results as JSON");
  DeviceOptions devices;
  devices.add_to(args);
  bool cpu_time = false;
  args.flag("--cpu-time", &cpu_time,
            "time decode and L(n) in process CPU time instead of wall time (steadier on a "
            "loaded machine at -t 1; with more threads it also counts their spinning)");
  if (!args.parse(argc, argv)) return 0;
  check(!model_path.empty(), "no model given (-m FILE)");
  check(repeat >= 1 && decode_tokens >= 1 && context >= 1, "counts must be positive");
  const std::vector<int> thread_counts = parse_int_list(threads_text, "--threads");
  for (int t : thread_counts)
    check(t <= kMaxThreads, "value ", t, " in -t is out of range (1 to ", kMaxThreads, ")");
  const TimeBase base = cpu_time ? TimeBase::kProcessCpu : TimeBase::kWall;
  const std::vector<int> batch_sizes = parse_int_list(batch_text, "--batch-sizes");

  auto model = load_model(model_path, devices.target_loading());
  const int device = devices.target_device(*model);
  const ModelConfig& c = model->config();
  const bool tty = isatty(fileno(stderr));
  std::printf("model: %s (%s, %d layers, n_embd %d, %.1f MiB of weights per token)\n",
              model_path.c_str(), c.arch.c_str(), c.n_layer, c.n_embd,
              model->weight_bytes() / 1048576.0);
  std::printf("kernels: %s\n", device >= 0 ? device_label(device).c_str() : isa_report().c_str());
  if (cpu_time) std::printf("decode and L(n): process CPU time, not wall time\n");

  nlohmann::json results = nlohmann::json::array();
  const RowSettings settings{context, repeat, decode_tokens, bandwidth_mib, batch_sizes, base, tty};
  if (device >= 0) {
    std::printf("\n| device | copy GB/s | roofline tok/s | decode tok/s | of roofline |");
    for (int n : batch_sizes) std::printf(" L(%d) ms |", n);
    std::printf(" L(8)/L(1) |\n|---|---|---|---|---|");
    for (size_t i = 0; i < batch_sizes.size(); ++i) std::printf("---|");
    std::printf("---|\n");
    results.push_back(measure_gpu_row(*model, device, settings));
  } else {
    std::printf(
        "\n| threads | read GB/s | roofline tok/s | decode tok/s | of roofline | split jobs/token "
        "|");
    for (int n : batch_sizes) std::printf(" L(%d) ms |", n);
    std::printf(" L(8)/L(1) |\n|---|---|---|---|---|---|");
    for (size_t i = 0; i < batch_sizes.size(); ++i) std::printf("---|");
    std::printf("---|\n");
    for (int threads : thread_counts) results.push_back(measure_row(*model, threads, settings));
  }
  if (!json_path.empty()) {
    nlohmann::json out = {{"model", model_path},
                          {"isa", isa_name(active_isa())},
                          {"device", device_label(device)},
                          {"time_base", cpu_time ? "process_cpu" : "wall"},
                          {"weight_bytes", model->weight_bytes()},
                          {"context", context},
                          {"results", results}};
    std::FILE* f = std::fopen(json_path.c_str(), "w");
    check(f != nullptr, "cannot write '", json_path, "'");
    std::fputs(out.dump(2).c_str(), f);
    std::fclose(f);
  }
  return 0;
}

}  // namespace parspec
