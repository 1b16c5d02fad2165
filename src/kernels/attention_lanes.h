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

// Keys [j0, j1) of the weighted values for K dimensions from d0: acc holds
// K rows of G·T::W lanes (dimension-major), carried between key blocks. Keys
// from j_all on are some lanes' padding: those lanes keep their sums.
template <class T, int G, int K, class Counts>
static inline void weigh_values(const float* s, const float* const* values, int d0, int j0,
                                int j_all, int j1, const Counts (&lanes_nk)[G], float* acc_rows) {
  using V = typename T::V;
  constexpr int W = T::W, GW = G * W;
  V acc[G][K];
  for (int dd = 0; dd < K; ++dd)
    for (int g = 0; g < G; ++g) acc[g][dd] = T::load(acc_rows + dd * GW + g * W);
  int j = j0;
  for (; j < j_all; ++j) {
    V p[G];
    for (int g = 0; g < G; ++g) p[g] = T::load(s + j * GW + g * W);
    const float* v = values[j] + d0;
    for (int dd = 0; dd < K; ++dd) {
      const V vd = T::set1(v[dd]);
      for (int g = 0; g < G; ++g) acc[g][dd] = T::fma(p[g], vd, acc[g][dd]);
    }
  }
  for (; j < j1; ++j) {
    const float* v = values[j] + d0;
    for (int g = 0; g < G; ++g) {
      const V p = T::load(s + j * GW + g * W);
      for (int dd = 0; dd < K; ++dd)
        acc[g][dd] =
            T::keep_valid(T::fma(p, T::set1(v[dd]), acc[g][dd]), acc[g][dd], lanes_nk[g], j);
    }
  }
  for (int dd = 0; dd < K; ++dd)
    for (int g = 0; g < G; ++g) T::store(acc_rows + dd * GW + g * W, acc[g][dd]);
}

// G·T::W queries, one per lane of G vectors (qs[l], nk[l] keys each, outs[l]
// or null for a padding lane), over the shared list keys/values. Keys are
// read once for all lanes, and each key or value element loaded feeds G fmas:
// the kernel for a prompt's rows and heads. G = 2 needs 32 vector registers
// (AVX-512; measured on Zen 5, AVX2 with 4 keys a pass gained nothing).
template <class T, int G = 1>
static void queries_in_lanes(const float* const* qs, const int* nk, const float* const* keys,
                             const float* const* values, int hd, float scale,
                             AttentionScratch& scratch, float* const* outs) {
  using V = typename T::V;
  constexpr int W = T::W, GW = G * W;
  const int nk_min = *std::min_element(nk, nk + GW), nk_max = *std::max_element(nk, nk + GW);
  scratch.queries.resize(static_cast<size_t>(hd) * GW);
  scratch.scores.resize(static_cast<size_t>(nk_max) * GW);
  float* qt = scratch.queries.data();
  float* s = scratch.scores.data();
  for (int d = 0; d < hd; ++d)
    for (int l = 0; l < GW; ++l) qt[d * GW + l] = qs[l][d];
  decltype(T::load_counts(nk)) lanes_nk[G];
  for (int g = 0; g < G; ++g) lanes_nk[g] = T::load_counts(nk + g * W);

  // Scores, U = 8 keys at a time: 8·G independent fma chains over d.
  constexpr int U = 8;
  const V vscale = T::set1(scale);
  int j = 0;
  for (; j + U <= nk_max; j += U) {
    V a[G][U];
    for (int g = 0; g < G; ++g)
      for (int u = 0; u < U; ++u) a[g][u] = T::zero();
    for (int d = 0; d < hd; ++d) {
      V q[G];
      for (int g = 0; g < G; ++g) q[g] = T::load(qt + d * GW + g * W);
      for (int u = 0; u < U; ++u) {
        const V k = T::set1(keys[j + u][d]);
        for (int g = 0; g < G; ++g) a[g][u] = T::fma(q[g], k, a[g][u]);
      }
    }
    for (int u = 0; u < U; ++u)
      for (int g = 0; g < G; ++g) T::store(s + (j + u) * GW + g * W, T::mul(a[g][u], vscale));
  }
  for (; j < nk_max; ++j) {
    V a[G];
    for (int g = 0; g < G; ++g) a[g] = T::zero();
    for (int d = 0; d < hd; ++d) {
      const V k = T::set1(keys[j][d]);
      for (int g = 0; g < G; ++g) a[g] = T::fma(T::load(qt + d * GW + g * W), k, a[g]);
    }
    for (int g = 0; g < G; ++g) T::store(s + j * GW + g * W, T::mul(a[g], vscale));
  }

  // Maximum over each lane's own keys.
  const V neg_inf = T::set1(-std::numeric_limits<float>::infinity());
  V m[G];
  for (int g = 0; g < G; ++g) {
    m[g] = neg_inf;
    for (j = 0; j < nk_min; ++j) m[g] = T::max(m[g], T::load(s + j * GW + g * W));
    for (; j < nk_max; ++j)
      m[g] = T::max(m[g], T::keep_valid(T::load(s + j * GW + g * W), neg_inf, lanes_nk[g], j));
  }

  // Probabilities (in place) and the eight partial sums.
  V part[G][8];
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < 8; ++r) part[g][r] = T::zero();
  for (j = 0; j < nk_max; j += 8) {
    for (int u = 0; u < 8 && j + u < nk_max; ++u) {
      for (int g = 0; g < G; ++g) {
        float* sp = s + (j + u) * GW + g * W;
        V p = exp_nonpositive<T>(T::sub(T::load(sp), m[g]));
        if (j + u >= nk_min) p = T::keep_valid(p, T::zero(), lanes_nk[g], j + u);
        part[g][u] = T::add(part[g][u], p);
        T::store(sp, p);
      }
    }
  }
  V inv[G];
  for (int g = 0; g < G; ++g)
    inv[g] = T::div(T::set1(1.0f), sum_tree(part[g], [](V a, V b) { return T::add(a, b); }));

  // Weighted values: blocks of kValueKeys keys (their value rows stay in L1)
  // times K dimensions (K·G accumulators in registers, in scratch.acc between
  // key blocks).
  constexpr int kValueKeys = 64;
  scratch.acc.assign(static_cast<size_t>(hd) * GW, 0.0f);
  float* acc_rows = scratch.acc.data();
  for (int j0 = 0; j0 < nk_max; j0 += kValueKeys) {
    const int j1 = std::min(nk_max, j0 + kValueKeys), j_all = std::clamp(nk_min, j0, j1);
    constexpr int K = 8;  // dimensions per pass
    int d0 = 0;
    for (; d0 + K <= hd; d0 += K)
      weigh_values<T, G, K>(s, values, d0, j0, j_all, j1, lanes_nk, acc_rows + d0 * GW);
    for (; d0 < hd; ++d0)
      weigh_values<T, G, 1>(s, values, d0, j0, j_all, j1, lanes_nk, acc_rows + d0 * GW);
  }
  for (int d = 0; d < hd; ++d)
    for (int g = 0; g < G; ++g) {
      float* a = acc_rows + d * GW + g * W;
      T::store(a, T::mul(T::load(a), inv[g]));
    }
  for (int l = 0; l < GW; ++l) {
    if (outs[l] == nullptr) continue;
    for (int d = 0; d < hd; ++d) outs[l][d] = acc_rows[d * GW + l];
  }
}

}  // namespace parspec::attention_lanes
