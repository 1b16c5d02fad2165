#pragma once
// Just enough of CUDA, on the CPU, to run some of the backend's kernels as
// their source has them (extract_kernels.py copies them out of
// src/cuda/kernels.cu): a block's threads are std::threads, __syncthreads is a
// barrier of the block, and the warp-wide operations (shuffles, the int8
// tensor-core mma) a barrier of the warp around an exchange of the lanes'
// values. cp.async copies at once. Floating-point steps keep the kernels'
// rounding (one rounding each; fused multiply-adds by std::fma), so a kernel
// gives here the bits it gives on a GPU, up to library functions such as expf.
// What this cannot check: timing, memory ordering between blocks, anything
// that depends on the hardware's scheduling.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda/kernels.h"

namespace parspec::cuda::emulated {

struct Index {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local Index thread_index, block_index;
inline Index grid_size, block_size;

// The running block's barriers and exchange buffers.
struct BlockState {
  explicit BlockState(int threads) : block(threads) {
    for (int w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
    exchange.resize(threads / 32);
  }
  std::barrier<> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  struct Lanes {
    uint32_t words[32][6];
    int line[32];  // of the call each lane is in
  };
  std::vector<Lanes> exchange;
  std::vector<uint8_t> dynamic_shared, static_shared;
  // The kernels' own __shared__ declarations, by source line and name.
  std::mutex arrays_mutex;
  std::map<std::pair<int, std::string>, std::vector<uint8_t>> arrays;
};
inline BlockState* running = nullptr;
// Warp-wide operations the lanes of a warp reached from different calls (a
// divergent warp: undefined on a GPU).
inline std::atomic<int> divergent_calls{0};

template <class T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(running->dynamic_shared.data());
}
template <class T>
T* static_shared() {
  return reinterpret_cast<T*>(running->static_shared.data());
}

// The block's array of a __shared__ declaration (T may be an array type),
// made by the first thread to reach it, garbage-filled as a GPU's would be.
template <class T>
T* shared_array(int line, const char* name) {
  std::lock_guard<std::mutex> lock(running->arrays_mutex);
  std::vector<uint8_t>& bytes = running->arrays[{line, name}];
  if (bytes.empty()) bytes.assign(sizeof(T), 0xAB);
  return reinterpret_cast<T*>(bytes.data());
}

inline void sync_block() {
  running->block.arrive_and_wait();
}

// The lanes of the calling thread's warp: each posts `count` words, all wait,
// then `read` looks at every lane's, all wait again. `line`: the call's, which
// every lane must share.
template <class Read>
void exchange_in_warp(const uint32_t* mine, int count, int line, Read&& read) {
  const int lane = static_cast<int>(thread_index.x % 32),
            warp = static_cast<int>(thread_index.x / 32);
  std::memcpy(running->exchange[warp].words[lane], mine, count * sizeof(uint32_t));
  running->exchange[warp].line[lane] = line;
  running->warps[warp]->arrive_and_wait();
  if (lane == 0)
    for (int other = 1; other < 32; ++other)
      if (running->exchange[warp].line[other] != line) ++divergent_calls;
  read(running->exchange[warp].words, lane);
  running->warps[warp]->arrive_and_wait();
}

// kind 0: from lane `arg`; 1: from lane + arg (own value past the warp); 2: from lane ^ arg.
template <class T>
T shuffle(T v, int kind, int arg, int line) {
  static_assert(sizeof(T) == 4);
  uint32_t word;
  std::memcpy(&word, &v, 4);
  uint32_t got = 0;
  exchange_in_warp(&word, 1, line, [&](const uint32_t(*lanes)[6], int lane) {
    int from = lane;
    if (kind == 0) from = arg;
    if (kind == 1 && lane + arg < 32) from = lane + arg;
    if (kind == 2) from = lane ^ arg;
    got = lanes[from & 31][0];
  });
  T out;
  std::memcpy(&out, &got, 4);
  return out;
}

// mma.sync.m16n8k32 s8 with PTX's fragment layout: lane (g = lane / 4, t =
// lane % 4) holds A's row g in a[0] (K 4t..4t+3) and a[2] (K 16 + 4t..), row
// g + 8 in a[1] and a[3]; B's column g in b[0] (K 4t..) and b[1] (K 16 + 4t..);
// C's (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) in c[0..3].
inline void mma_s8_at(int (&c)[4], const int (&a)[4], const int (&b)[2], int line) {
  uint32_t mine[6];
  for (int i = 0; i < 4; ++i) mine[i] = static_cast<uint32_t>(a[i]);
  for (int i = 0; i < 2; ++i) mine[4 + i] = static_cast<uint32_t>(b[i]);
  exchange_in_warp(mine, 6, line, [&](const uint32_t(*lanes)[6], int lane) {
    auto byte = [](uint32_t word, int k) {
      return static_cast<int8_t>((word >> (8 * (k % 4))) & 0xFF);
    };
    auto a_at = [&](int row, int k) {
      return byte(lanes[(row % 8) * 4 + (k % 16) / 4][(k / 16) * 2 + row / 8], k);
    };
    auto b_at = [&](int k, int col) { return byte(lanes[col * 4 + (k % 16) / 4][4 + k / 16], k); };
    const int g = lane / 4, t = lane % 4;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
      int sum = 0;
      for (int k = 0; k < 32; ++k) sum += a_at(rows[i], k) * b_at(k, cols[i]);
      c[i] += sum;
    }
  });
}

// mma.sync.m16n8k16 s8: lane (g, t) holds A's row g, K 4t..4t+3 in a[0] and
// row g + 8's in a[1], B's column g, K 4t.. in b; C as for the k32 mma.
inline void mma_s8_k16_at(int (&c)[4], const int (&a)[2], int b, int line) {
  const uint32_t mine[3] = {static_cast<uint32_t>(a[0]), static_cast<uint32_t>(a[1]),
                            static_cast<uint32_t>(b)};
  exchange_in_warp(mine, 3, line, [&](const uint32_t(*lanes)[6], int lane) {
    auto byte = [](uint32_t word, int k) {
      return static_cast<int8_t>((word >> (8 * (k % 4))) & 0xFF);
    };
    auto a_at = [&](int row, int k) { return byte(lanes[(row % 8) * 4 + k / 4][row / 8], k); };
    auto b_at = [&](int k, int col) { return byte(lanes[col * 4 + k / 4][2], k); };
    const int g = lane / 4, t = lane % 4;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += a_at(rows[i], k) * b_at(k, cols[i]);
      c[i] += sum;
    }
  });
}

// mma.sync.m16n8k16 with f16 or bf16 inputs and f32 accumulators, PTX's
// layout: lane (g, t) holds A's row g, K 2t and 2t + 1 in a[0] and K 8 + 2t..
// in a[2], row g + 8 in a[1] and a[3]; B's column g, K 2t.. in b[0] and K 8 +
// 2t.. in b[1]; C as for the int8 mma. The hardware's order of the f32 sums
// is its own: here they are added in K order, so kernels compare with each
// other here, not with a GPU's bits.
inline float half_bits_to_float(uint16_t bits, bool bf16) {
  if (bf16) {
    const uint32_t word = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &word, 4);
    return f;
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}
template <WeightKind kKind>
void mma_half(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  exchange_in_warp(mine, 6, -1, [&](const uint32_t(*lanes)[6], int lane) {
    const bool bf16 = kKind == WeightKind::kBF16;
    auto half_at = [&](uint32_t word, int k) {
      return half_bits_to_float(static_cast<uint16_t>(word >> (16 * (k % 2))), bf16);
    };
    auto a_at = [&](int row, int k) {
      return half_at(lanes[(row % 8) * 4 + (k % 8) / 2][(k / 8) * 2 + row / 8], k);
    };
    auto b_at = [&](int k, int col) { return half_at(lanes[col * 4 + (k % 8) / 2][4 + k / 8], k); };
    const int g = lane / 4, t = lane % 4;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k < 16; ++k) c[i] = std::fma(a_at(rows[i], k), b_at(k, cols[i]), c[i]);
  });
}

template <int kBytes>
void copy_async(void* dst, const void* src, bool valid) {
  if (valid)
    std::memcpy(dst, src, kBytes);
  else
    std::memset(dst, 0, kBytes);
}
inline void copy_async_commit() {}
template <int kPending>
void copy_async_wait() {}

// One rounding per step, never contracted into a fused multiply-add.
inline float mul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float add_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float sub_rn(float a, float b) {
  volatile float r = a - b;
  return r;
}
inline float div_rn(float a, float b) {
  volatile float r = a / b;
  return r;
}
inline unsigned sub4(unsigned a, unsigned b) {
  unsigned r = 0;
  for (int i = 0; i < 4; ++i)
    r |= ((((a >> (8 * i)) & 0xFFu) - ((b >> (8 * i)) & 0xFFu)) & 0xFFu) << (8 * i);
  return r;
}
inline int dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i)
    c += static_cast<int8_t>((a >> (8 * i)) & 0xFF) * static_cast<int8_t>((b >> (8 * i)) & 0xFF);
  return c;
}

inline int32_t atomic_add(int32_t* p, int32_t v) {
  return std::atomic_ref<int32_t>(*p).fetch_add(v);
}

// Runs `body` as the blocks of `grid` (x fastest), `threads` threads each, one
// block after another, each with `shared` bytes of dynamic shared memory and
// 64 KiB of static shared memory, garbage-filled before every block as a GPU's
// would be. The same `threads` threads run every block.
template <class Body>
void run_grid(dim3 grid, int threads, size_t shared, Body&& body) {
  grid_size = {grid.x, grid.y, grid.z};
  block_size = {static_cast<unsigned>(threads), 1, 1};
  const unsigned blocks = grid.x * grid.y * grid.z;
  BlockState state(threads);
  auto fresh_memory = [&] {
    state.dynamic_shared.assign(shared, 0xAB);
    state.static_shared.assign(64 * 1024, 0xAB);
    state.arrays.clear();
  };
  fresh_memory();
  running = &state;
  std::barrier<> between_blocks(threads);
  std::vector<std::thread> lanes;
  lanes.reserve(threads);
  for (int t = 0; t < threads; ++t)
    lanes.emplace_back([&, t] {
      thread_index.x = static_cast<unsigned>(t);
      for (unsigned b = 0; b < blocks; ++b) {
        block_index.x = b % grid.x;
        block_index.y = b / grid.x % grid.y;
        block_index.z = b / (grid.x * grid.y);
        body();
        between_blocks.arrive_and_wait();  // every thread is done with block b
        if (t == 0) fresh_memory();
        between_blocks.arrive_and_wait();
      }
    });
  for (std::thread& lane : lanes) lane.join();
  running = nullptr;
}

}  // namespace parspec::cuda::emulated

// The CUDA names the kernels' text uses.
#define threadIdx parspec::cuda::emulated::thread_index
#define blockIdx parspec::cuda::emulated::block_index
#define __syncthreads() parspec::cuda::emulated::sync_block()
// Every lane of the warp takes part, whatever the mask says.
#define __shfl_sync(mask, v, lane) \
  (static_cast<void>(mask), parspec::cuda::emulated::shuffle(v, 0, lane, __LINE__))
#define __shfl_down_sync(mask, v, delta) \
  (static_cast<void>(mask), parspec::cuda::emulated::shuffle(v, 1, delta, __LINE__))
#define __shfl_xor_sync(mask, v, bits) \
  (static_cast<void>(mask), parspec::cuda::emulated::shuffle(v, 2, bits, __LINE__))
#define mma_s8(c, a, b) parspec::cuda::emulated::mma_s8_at(c, a, b, __LINE__)
#define mma_s8_k16(c, a, b) parspec::cuda::emulated::mma_s8_k16_at(c, a, b, __LINE__)
#define __fmaf_rn(a, b, c) std::fma(a, b, c)
#define __fmul_rn(a, b) parspec::cuda::emulated::mul_rn(a, b)
#define __fadd_rn(a, b) parspec::cuda::emulated::add_rn(a, b)
#define __fdiv_rn(a, b) parspec::cuda::emulated::div_rn(a, b)
#define __fsub_rn(a, b) parspec::cuda::emulated::sub_rn(a, b)
#define __fsqrt_rn(a) std::sqrt(a)
#define __vsub4(a, b) parspec::cuda::emulated::sub4(a, b)
#define __int_as_float(i) std::bit_cast<float>(static_cast<int>(i))
#define __float_as_int(f) std::bit_cast<int>(static_cast<float>(f))
#define __dp4a(a, b, c) parspec::cuda::emulated::dp4a(a, b, c)
#define __ldg(p) (*(p))
#define __ldcg(p) (*(p))
#define gridDim parspec::cuda::emulated::grid_size
#define blockDim parspec::cuda::emulated::block_size
#define atomicAdd(p, v) parspec::cuda::emulated::atomic_add(p, v)
#define __threadfence() std::atomic_thread_fence(std::memory_order_seq_cst)
using std::max;
using std::min;
