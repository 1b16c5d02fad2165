#pragma once
// The pieces of attention (kernels/attention.h) written once over a SIMD
// width: the exponential of the contract, and the kernel that puts one query
// in each lane. Compiled with AVX2 (8 lanes, attention.cpp) and AVX-512 (16
// lanes, attention_avx512.cpp). Every operation is per lane, in the same
// order, so both widths give the same bits.
//
// Internal linkage only: each translation unit keeps its own copy, built with
// its own instruction set.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention.h"

namespace parspec::attention_lanes {

// exp(x) for x <= 0 (the contract's attention_exp): Cody-Waite reduction by
// ln 2 and a degree-6 polynomial (the Cephes expf coefficients), ~1 ulp;
// below -87.3 it returns exp(-87.3) (a probability of ~1e-38 next to the
// maximum's 1).
template <class T>
static inline typename T::V exp_nonpositive(typename T::V x) {
  using V = typename T::V;
  x = T::max(x, T::set1(-87.33654f));
  const V n = T::round(T::mul(x, T::set1(1.44269504088896341f)));
  V r = T::fnmadd(n, T::set1(0.693359375f), x);
  r = T::fnmadd(n, T::set1(-2.12194440e-4f), r);
  V p = T::set1(1.9875691500e-4f);
  p = T::fma(p, r, T::set1(1.3981999507e-3f));
  p = T::fma(p, r, T::set1(8.3334519073e-3f));
  p = T::fma(p, r, T::set1(4.1665795894e-2f));
  p = T::fma(p, r, T::set1(1.6666665459e-1f));
  p = T::fma(p, r, T::set1(5.0000001201e-1f));
  const V y = T::add(T::fma(p, T::mul(r, r), r), T::set1(1.0f));
  return T::mul(y, T::pow2(n));
}

// The contract's sum from its eight partial sums S_0..S_7.
template <class V, class Add>
static inline V sum_tree(const V s[8], Add add) {
  return add(add(add(s[0], s[1]), add(s[2], s[3])), add(add(s[4], s[5]), add(s[6], s[7])));
}

// T::W queries, one per lane (qs[l], nk[l] keys each, outs[l] or null for a
// padding lane), over the shared list keys/values. Keys are read once for all
// lanes: the kernel for a prompt's rows and heads.
template <class T>
static void queries_in_lanes(const float* const* qs, const int* nk, const float* const* keys,
                             const float* const* values, int hd, float scale,
                             AttentionScratch& scratch, float* const* outs) {
  using V = typename T::V;
  constexpr int W = T::W;
  const int nk_min = *std::min_element(nk, nk + W), nk_max = *std::max_element(nk, nk + W);
  scratch.queries.resize(static_cast<size_t>(hd) * W);
  scratch.scores.resize(static_cast<size_t>(nk_max) * W);
  float* qt = scratch.queries.data();
  float* s = scratch.scores.data();
  for (int d = 0; d < hd; ++d)
    for (int l = 0; l < W; ++l) qt[d * W + l] = qs[l][d];
  const auto lanes_nk = T::load_counts(nk);

  // Scores, 8 keys at a time: 8 independent fma chains over d.
  const V vscale = T::set1(scale);
  int j = 0;
  for (; j + 8 <= nk_max; j += 8) {
    V a[8];
    for (int u = 0; u < 8; ++u) a[u] = T::zero();
    for (int d = 0; d < hd; ++d) {
      const V q = T::load(qt + d * W);
      for (int u = 0; u < 8; ++u) a[u] = T::fma(q, T::set1(keys[j + u][d]), a[u]);
    }
    for (int u = 0; u < 8; ++u) T::store(s + (j + u) * W, T::mul(a[u], vscale));
  }
  for (; j < nk_max; ++j) {
    V a = T::zero();
    for (int d = 0; d < hd; ++d) a = T::fma(T::load(qt + d * W), T::set1(keys[j][d]), a);
    T::store(s + j * W, T::mul(a, vscale));
  }

  // Maximum over each lane's own keys.
  const V neg_inf = T::set1(-std::numeric_limits<float>::infinity());
  V m = neg_inf;
  for (j = 0; j < nk_min; ++j) m = T::max(m, T::load(s + j * W));
  for (; j < nk_max; ++j) m = T::max(m, T::keep_valid(T::load(s + j * W), neg_inf, lanes_nk, j));

  // Probabilities (in place) and the eight partial sums.
  V part[8];
  for (int r = 0; r < 8; ++r) part[r] = T::zero();
  for (j = 0; j < nk_max; j += 8) {
    for (int u = 0; u < 8 && j + u < nk_max; ++u) {
      V p = exp_nonpositive<T>(T::sub(T::load(s + (j + u) * W), m));
      if (j + u >= nk_min) p = T::keep_valid(p, T::zero(), lanes_nk, j + u);
      part[u] = T::add(part[u], p);
      T::store(s + (j + u) * W, p);
    }
  }
  const V inv = T::div(T::set1(1.0f), sum_tree(part, [](V a, V b) { return T::add(a, b); }));

  // Weighted values: blocks of kValueKeys keys (their value rows stay in L1)
  // times 8 dimensions (8 accumulators, kept in `acc` between key blocks).
  constexpr int kValueKeys = 64;
  scratch.acc.assign(static_cast<size_t>(hd) * W, 0.0f);
  float* acc_rows = scratch.acc.data();
  for (int j0 = 0; j0 < nk_max; j0 += kValueKeys) {
    const int j1 = std::min(nk_max, j0 + kValueKeys), j_all = std::clamp(nk_min, j0, j1);
    for (int d0 = 0; d0 < hd; d0 += 8) {
      const int dn = std::min(8, hd - d0);
      V acc[8];
      for (int dd = 0; dd < dn; ++dd) acc[dd] = T::load(acc_rows + (d0 + dd) * W);
      if (dn == 8) {
        for (j = j0; j < j_all; ++j) {
          const V p = T::load(s + j * W);
          const float* v = values[j] + d0;
          for (int dd = 0; dd < 8; ++dd) acc[dd] = T::fma(p, T::set1(v[dd]), acc[dd]);
        }
      } else {
        for (j = j0; j < j_all; ++j) {
          const V p = T::load(s + j * W);
          const float* v = values[j] + d0;
          for (int dd = 0; dd < dn; ++dd) acc[dd] = T::fma(p, T::set1(v[dd]), acc[dd]);
        }
      }
      for (j = j_all; j < j1; ++j) {
        const V p = T::load(s + j * W);
        const float* v = values[j] + d0;
        for (int dd = 0; dd < dn; ++dd)
          acc[dd] = T::keep_valid(T::fma(p, T::set1(v[dd]), acc[dd]), acc[dd], lanes_nk, j);
      }
      for (int dd = 0; dd < dn; ++dd) T::store(acc_rows + (d0 + dd) * W, acc[dd]);
    }
  }
  for (int d = 0; d < hd; ++d) T::store(acc_rows + d * W, T::mul(T::load(acc_rows + d * W), inv));
  for (int l = 0; l < W; ++l) {
    if (outs[l] == nullptr) continue;
    for (int d = 0; d < hd; ++d) outs[l][d] = acc_rows[d * W + l];
  }
}

}  // namespace parspec::attention_lanes
