// Attention kernels: queries in SIMD lanes for many queries over one key list
// (a prompt's rows), keys in lanes for a few (a decode step's heads). Both
// follow the per-element contract of attention.h, so which one runs never
// changes a bit.
#include "kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention_avx512.h"
#include "kernels/attention_lanes.h"
#include "kernels/isa.h"
#include "kernels/lanes256.h"

namespace parspec {

namespace {

inline float reduce_max8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Queries sharing one transposed key block.
constexpr int kKeyLaneQueries = attention_avx512::kKeyLaneQueries;

// Up to kKeyLaneQueries queries with keys in lanes: 8 keys per vector (16
// with AVX-512), their rows transposed in registers 8 dimensions at a time.
// For decode steps and tree nodes, where too few queries share the keys to
// fill query lanes.
void keys_in_lanes(int nq, const float* const* qs, const int* nk, const float* const* keys,
                   const float* const* values, int hd, float scale, AttentionScratch& scratch,
                   float* const* outs) {
  const bool wide = active_isa() == Isa::kAvx512;
  const int nk_max = *std::max_element(nk, nk + nq);
  const int per_block = wide ? 16 : 8;
  const int n_blocks = (nk_max + per_block - 1) / per_block;
  const size_t stride = static_cast<size_t>(n_blocks) * per_block;
  scratch.scores.resize(stride * nq);
  float* s = scratch.scores.data();
  const int hd8 = hd & ~7;
  const __m256i tail_mask = first_lanes(hd - hd8);

  // Scores: lane u of block b is key per_block · b + u (keys past the end
  // repeat the last).
  if (wide) {
    attention_avx512::key_lane_scores(nq, qs, nk_max, keys, hd, scale, s, stride);
  } else {
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int b = 0; b < n_blocks; ++b) {
      const float* rows[8];
      for (int u = 0; u < 8; ++u) rows[u] = keys[std::min(8 * b + u, nk_max - 1)];
      __m256 acc[kKeyLaneQueries];
      for (int i = 0; i < nq; ++i) acc[i] = _mm256_setzero_ps();
      for (int d0 = 0; d0 < hd; d0 += 8) {
        __m256 in[8], kt[8];
        if (d0 < hd8) {
          for (int u = 0; u < 8; ++u) in[u] = _mm256_loadu_ps(rows[u] + d0);
        } else {
          for (int u = 0; u < 8; ++u) in[u] = _mm256_maskload_ps(rows[u] + d0, tail_mask);
        }
        transpose8(in, kt);
        const int dn = std::min(8, hd - d0);
        for (int dd = 0; dd < dn; ++dd)
          for (int i = 0; i < nq; ++i)
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(qs[i][d0 + dd]), kt[dd], acc[i]);
      }
      for (int i = 0; i < nq; ++i)
        _mm256_storeu_ps(s + i * stride + 8 * b, _mm256_mul_ps(acc[i], vscale));
    }
  }

  float inv_sums[kKeyLaneQueries];
  for (int i = 0; i < nq; ++i) {
    float* si = s + i * stride;
    const int n = nk[i];
    const int full = n / 8;
    // Maximum over the query's own keys (exact in any order).
    __m256 m = _mm256_set1_ps(-INFINITY);
    for (int b = 0; b < full; ++b) m = _mm256_max_ps(m, _mm256_loadu_ps(si + 8 * b));
    float max_score = reduce_max8(m);
    for (int j = 8 * full; j < n; ++j) max_score = std::max(max_score, si[j]);
    // Probabilities; lane u of the partial sums is S_u (j ≡ u mod 8).
    const __m256 vmax = _mm256_set1_ps(max_score);
    __m256 part = _mm256_setzero_ps();
    for (int b = 0; b * 8 < n; ++b) {
      __m256 p = attention_lanes::exp_nonpositive<Avx2Lanes>(
          _mm256_sub_ps(_mm256_loadu_ps(si + 8 * b), vmax));
      if (8 * b + 8 > n) p = _mm256_and_ps(p, _mm256_castsi256_ps(first_lanes(n - 8 * b)));
      part = _mm256_add_ps(part, p);
      _mm256_storeu_ps(si + 8 * b, p);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, part);
    const float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                      ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    inv_sums[i] = 1.0f / sum;
  }

  // Weighted values, dimensions in lanes. AVX-512 reads each value row once
  // for all queries.
  if (wide) {
    attention_avx512::key_lane_values(nq, s, stride, nk, values, hd, inv_sums, outs);
    return;
  }
  for (int i = 0; i < nq; ++i) {
    const float* si = s + i * stride;
    const int n = nk[i];
    const __m256 inv = _mm256_set1_ps(inv_sums[i]);
    // Weighted values, dimensions in lanes, up to 8 vectors (64 dims) at a time.
    for (int d0 = 0; d0 < hd; d0 += 64) {
      const int nv = std::min(8, (hd - d0 + 7) / 8);
      __m256 acc[8];
      for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
      const bool ragged = d0 + 8 * nv > hd;
      for (int j = 0; j < n; ++j) {
        const __m256 p = _mm256_set1_ps(si[j]);
        const float* v = values[j] + d0;
        if (nv == 8 && !ragged) {
          for (int c = 0; c < 8; ++c)
            acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * c), acc[c]);
        } else {
          for (int c = 0; c < nv; ++c) {
            const __m256 vv = d0 + 8 * c + 8 <= hd ? _mm256_loadu_ps(v + 8 * c)
                                                   : _mm256_maskload_ps(v + 8 * c, tail_mask);
            acc[c] = _mm256_fmadd_ps(p, vv, acc[c]);
          }
        }
      }
      for (int c = 0; c < nv; ++c) {
        alignas(32) float o[8];
        _mm256_store_ps(o, _mm256_mul_ps(acc[c], inv));
        const int dn = std::min(8, hd - d0 - 8 * c);
        std::memcpy(outs[i] + d0 + 8 * c, o, sizeof(float) * dn);
      }
    }
  }
}

}  // namespace

void attend(const float* q, const float* const* keys, const float* const* values, int n_keys,
            int head_dim, float scale, AttentionScratch& scratch, float* out) {
  attend_many(1, &q, &n_keys, keys, values, head_dim, scale, scratch, &out);
}

void attend_many(int n_queries, const float* const* queries, const int* n_keys,
                 const float* const* keys, const float* const* values, int head_dim, float scale,
                 AttentionScratch& scratch, float* const* outs) {
  const bool wide = active_isa() == Isa::kAvx512;
  const int lanes = wide ? attention_avx512::kLanes : Avx2Lanes::W;
  int i = 0;
  // Two vectors of query lanes at a time while they are full (AVX-512): each
  // key and value element loaded feeds two fmas (~30% faster on a prompt).
  for (; wide && n_queries - i >= 2 * lanes; i += 2 * lanes)
    attention_avx512::queries_in_two_vectors(queries + i, n_keys + i, keys, values, head_dim, scale,
                                             scratch, outs + i);
  // Full groups of query lanes; a remainder of at least half a group is padded
  // (its padding lanes repeat a real query and write nothing).
  while (n_queries - i >= std::max(lanes / 2, kKeyLaneQueries + 1)) {
    const float* qs[attention_avx512::kLanes];
    int nk[attention_avx512::kLanes];
    float* os[attention_avx512::kLanes];
    for (int l = 0; l < lanes; ++l) {
      const int src = std::min(i + l, n_queries - 1);
      qs[l] = queries[src];
      nk[l] = n_keys[src];
      os[l] = i + l < n_queries ? outs[i + l] : nullptr;
    }
    if (wide) {
      attention_avx512::queries_in_lanes(qs, nk, keys, values, head_dim, scale, scratch, os);
    } else {
      attention_lanes::queries_in_lanes<Avx2Lanes>(qs, nk, keys, values, head_dim, scale, scratch,
                                                   os);
    }
    i += lanes;
  }
  for (; i < n_queries; i += kKeyLaneQueries) {
    const int nq = std::min(kKeyLaneQueries, n_queries - i);
    keys_in_lanes(nq, queries + i, n_keys + i, keys, values, head_dim, scale, scratch, outs + i);
  }
}

void attend_softcapped(const float* q, const float* const* keys, const float* const* values,
                       int n_keys, int head_dim, float scale, float cap, std::vector<float>& scores,
                       float* out) {
  scores.resize(static_cast<size_t>(n_keys));
  const float inv_cap = 1.0f / cap;
  float max_score = -INFINITY;
  for (int j = 0; j < n_keys; ++j) {
    float dot = 0.0f;
    for (int d = 0; d < head_dim; ++d) dot = std::fma(q[d], keys[j][d], dot);
    scores[j] = cap * std::tanh(scale * dot * inv_cap);
    max_score = std::max(max_score, scores[j]);
  }
  float sum = 0.0f;
  for (int j = 0; j < n_keys; ++j) sum += (scores[j] = std::exp(scores[j] - max_score));
  const float inv_sum = 1.0f / sum;
  for (int d = 0; d < head_dim; ++d) {
    float acc = 0.0f;
    for (int j = 0; j < n_keys; ++j) acc = std::fma(scores[j], values[j][d], acc);
    out[d] = acc * inv_sum;
  }
}

void attend_reference(const float* q, const float* const* keys, const float* const* values,
                      int n_keys, int head_dim, float scale, float* out) {
  std::vector<double> s(n_keys);
  double max_score = -INFINITY;
  for (int j = 0; j < n_keys; ++j) {
    double acc = 0.0;
    for (int d = 0; d < head_dim; ++d) acc += static_cast<double>(q[d]) * keys[j][d];
    s[j] = acc * scale;
    max_score = std::max(max_score, s[j]);
  }
  double sum = 0.0;
  for (int j = 0; j < n_keys; ++j) sum += (s[j] = std::exp(s[j] - max_score));
  for (int d = 0; d < head_dim; ++d) {
    double acc = 0.0;
    for (int j = 0; j < n_keys; ++j) acc += s[j] * values[j][d];
    out[d] = static_cast<float>(acc / sum);
  }
}

}  // namespace parspec
