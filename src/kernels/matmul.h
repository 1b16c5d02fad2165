#pragma once
// Batched matrix multiply of a weight matrix (any weight type) with f32
// activations. A batch of M rows streams the weights once.
//
// Batch invariance: y[m, :] depends only on x[m, :] and W — never on M, on the
// other rows, or on the thread count — because every dot product is reduced by
// one thread in one fixed order. Speculative verification relies on this to be
// bit-exact with one-token decoding.
#include <cstdint>
#include <span>

#include "core/worker.h"
#include "kernels/quant.h"

namespace parspec {

struct WeightMatrix {
  DType type = DType::F32;
  int64_t n_in = 0;               // elements per row (contiguous)
  int64_t n_out = 0;              // number of rows
  const uint8_t* data = nullptr;  // n_out rows of row_bytes(type, n_in) bytes
  // Q4_0/Q8_0/Q4_K/Q6_K only: the first n_out / 16 groups of 16 rows are in the layout of
  // kernels/repack.h (repack_in_place), the rows after them row-major.
  bool repacked = false;
};

// y (M × n_out, row-major) = x (M × n_in, row-major) · Wᵀ.
// Q4_0/Q8_0 weights take activations quantized per row to Q8_0, Q4_K/Q6_K to
// Q8_K (as llama.cpp does); F32/F16/BF16 use f32 activations.
void matmul(Worker& worker, const WeightMatrix& w, const float* x, int64_t M, float* y);

// Several matrices applied to the same activations (x: M × n_in, one n_in for
// all): y_i = x · W_iᵀ, each exactly as matmul() computes it, but as one
// parallel job (one wake-up, one wait) and one activation quantization per
// format. For Q/K/V and gate/up projections.
struct MatmulPart {
  const WeightMatrix* w;
  float* y;
};
void matmul_many(Worker& worker, std::span<const MatmulPart> parts, const float* x, int64_t M);

// Nanoseconds one thread needs for matmul(w, M rows), as the estimate that
// decides how many threads the job is split over (Worker::threads_for).
double matmul_work_ns(const WeightMatrix& w, int64_t M);

// Scalar reference with the same numerics definition (same activation
// quantization), accumulated in double. For tests.
void matmul_reference(const WeightMatrix& w, const float* x, int64_t M, float* y);

}  // namespace parspec
