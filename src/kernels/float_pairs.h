#pragma once
// AVX-512 kernels for F16/BF16 weights against two activation rows per 512-bit
// register (matmul_avx512.cpp; call only where the CPU has AVX-512).
//
// Lanes 0-7 of an accumulator are the AVX2 kernel's 8-lane accumulator for
// activation row 2q, lanes 8-15 the one for row 2q + 1: the 8 weights of each
// step are converted once into both halves, every lane runs the same fma
// sequence as in the AVX2 kernel (k ≡ lane (mod 8), in k order, the ragged
// tail as one zero-padded step), and each half is reduced with the same
// horizontal reduction. Results are bit-identical to the AVX2 path.
#include <cstdint>

namespace parspec::float_pairs {

// Activations packed for these kernels: for pair q and step s (8 elements),
// 16 floats: row 2q elements 8s..8s+7, then row 2q + 1's (zero past n; a
// missing odd row repeats row 2q).
void pack_pairs(const float* x, int64_t M, int64_t n, float* packed);
inline int64_t packed_floats(int64_t M, int64_t n) {
  return (M + 1) / 2 * ((n + 7) / 8) * 16;
}

// 4 weight rows (F16 or BF16, n elements each) against `pairs` (1 or 2) pairs
// of packed activation rows starting at `xp`: out[c * 4 + r] for activation
// row c of the pairs (0 .. 2·pairs − 1) and weight row r.
void f16_rows4(const uint8_t* const rows[4], const float* xp, int64_t n, int pairs, float* out);
void bf16_rows4(const uint8_t* const rows[4], const float* xp, int64_t n, int pairs, float* out);

}  // namespace parspec::float_pairs
