#pragma once
// K-quant formats (Q4_K, Q6_K weights; Q8_K activations): conversions and dot
// products. matmul.cpp dispatches to these for K-quant weights.
#include <cstdint>

#include "kernels/quant.h"

namespace parspec {

// n is a multiple of kQKK (256) everywhere below.
void quantize_row_q4_K(const float* src, BlockQ4_K* dst, int64_t n);
void dequantize_row_q4_K(const BlockQ4_K* src, float* dst, int64_t n);
void quantize_row_q6_K(const float* src, BlockQ6_K* dst, int64_t n);
void dequantize_row_q6_K(const BlockQ6_K* src, float* dst, int64_t n);
// Activation quantization (per 256-block absmax scale, bsums filled).
void quantize_row_q8_K(const float* src, BlockQ8_K* dst, int64_t n);
void dequantize_row_q8_K(const BlockQ8_K* src, float* dst, int64_t n);

// Dot product of one weight row with one Q8_K activation row. AVX2 versions:
// deterministic (fixed reduction order, independent of anything but the inputs).
float dot_q4_K_q8_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x);
float dot_q6_K_q8_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x);
// Scalar references of the same integer arithmetic (for tests).
float dot_q4_K_q8_K_ref(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x);
float dot_q6_K_q8_K_ref(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x);

}  // namespace parspec
