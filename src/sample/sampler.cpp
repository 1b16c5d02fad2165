#include "sample/sampler.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/error.h"

namespace parspec {

namespace {

struct Candidate {
  float logit;
  int32_t id;
  double weight;  // unnormalized softmax weight
};

// Rank order shared by all filters: higher logit first, lower id on ties.
// Candidates never hold NaN, so this is a strict total order.
bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Unnormalized softmax weight, exp((logit - max) / temp): the best token
// weighs exactly 1, -inf weighs 0.
struct Softmax {
  double max_logit;
  double temp;
  double weight(float logit) const { return std::exp((double(logit) - max_logit) / temp); }
};

// The k best non-NaN tokens in rank order (all of them if there are fewer),
// unordered. A bounded heap whose front is the worst kept token: one compare
// per token for the usual small k.
void select_top_k(const float* logits, int n_vocab, int k, std::vector<Candidate>& kept) {
  kept.clear();
  int id = 0;
  for (; id < n_vocab && int(kept.size()) < k; ++id)
    if (!std::isnan(logits[id])) kept.push_back({logits[id], id, 0.0});
  std::make_heap(kept.begin(), kept.end(), ranks_before);
  if (kept.empty()) return;
  float worst_kept = kept.front().logit;
  // A later id beats a kept token only with a strictly larger logit (NaN compares false).
  const auto offer = [&](int candidate) {
    if (logits[candidate] > worst_kept) {
      std::pop_heap(kept.begin(), kept.end(), ranks_before);
      kept.back() = {logits[candidate], candidate, 0.0};
      std::push_heap(kept.begin(), kept.end(), ranks_before);
      worst_kept = kept.front().logit;
    }
  };
  // Eight logits per compare; lanes that pass are offered in id order.
  for (; id + 8 <= n_vocab; id += 8) {
    const __m256 values = _mm256_loadu_ps(logits + id);
    unsigned above =
        unsigned(_mm256_movemask_ps(_mm256_cmp_ps(values, _mm256_set1_ps(worst_kept), _CMP_GT_OQ)));
    for (; above != 0; above &= above - 1) offer(id + __builtin_ctz(above));
  }
  for (; id < n_vocab; ++id) offer(id);
}

// Largest non-NaN logit; -inf when there is none.
float max_logit_of(const float* logits, int n_vocab) {
  // max_ps(v, m) is m when v is NaN, so NaN never enters the running maximum.
  __m256 running = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int id = 0;
  for (; id + 8 <= n_vocab; id += 8) running = _mm256_max_ps(_mm256_loadu_ps(logits + id), running);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, running);
  float best = -std::numeric_limits<float>::infinity();
  for (float lane : lanes) best = std::max(best, lane);
  for (; id < n_vocab; ++id) best = std::max(best, logits[id]);  // std::max keeps best on NaN
  return best;
}

// Moves the smallest rank-order prefix of `kept` whose weight reaches
// `target` to the front and returns its length (all of `kept` if the target is
// never reached). Splits with nth_element: first off the 64 best tokens
// (where the cut usually is), then in halves, so it costs O(n) expected time
// however deep the cut, and only the last small range gets sorted.
size_t top_p_count(std::vector<Candidate>& kept, double target) {
  // Invariant: [0, lo) ranks before [lo, hi), which ranks before [hi, n);
  // [0, lo) weighs mass_before < target and [0, hi) reaches it (or hi == n).
  size_t lo = 0, hi = kept.size();
  double mass_before = 0.0;
  const auto at = [&](size_t i) { return kept.begin() + std::ptrdiff_t(i); };
  constexpr size_t kSmall = 64;
  bool first_split = true;
  while (hi - lo > kSmall) {
    const size_t mid = first_split ? kSmall : lo + (hi - lo) / 2;
    first_split = false;
    std::nth_element(at(lo), at(mid), at(hi), ranks_before);
    double half = 0.0;
    for (size_t i = lo; i < mid; ++i) half += kept[i].weight;
    if (mass_before + half >= target) {
      hi = mid;
    } else {
      mass_before += half;
      lo = mid;
    }
  }
  std::sort(at(lo), at(hi), ranks_before);
  for (size_t i = lo; i < hi; ++i) {
    mass_before += kept[i].weight;
    if (mass_before >= target) return i + 1;
  }
  return hi;
}

// exp(x) for x <= 0 (or -inf), four at a time, within a few ulp of std::exp.
// Below -708 (weights under 1e-307, invisible next to the best token's 1)
// and for NaN it gives 0.
__m256d exp_nonpositive(__m256d x) {
  const __m256d floor = _mm256_set1_pd(-708.0);
  const __m256d vanishes = _mm256_cmp_pd(x, floor, _CMP_NGE_UQ);
  x = _mm256_max_pd(x, floor);
  // x = n·ln2 + r with |r| <= ln2/2; ln2 split in two so n·ln2_hi is exact.
  const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(1.4426950408889634)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(0.693145751953125), x);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(1.42860682030941723212e-6), r);
  // Taylor series of e^r up to r^13: the remainder is below 2e-16 for |r| <= ln2/2.
  constexpr auto inverse_factorials = [] {
    std::array<double, 14> c{};
    double factorial = 1.0;
    for (int k = 0; k < 14; ++k) {
      if (k > 0) factorial *= k;
      c[size_t(k)] = 1.0 / factorial;
    }
    return c;
  }();
  __m256d poly = _mm256_set1_pd(inverse_factorials[13]);
  for (int k = 12; k >= 0; --k)
    poly = _mm256_fmadd_pd(poly, r, _mm256_set1_pd(inverse_factorials[size_t(k)]));
  // 2^n from the exponent bits; n >= -1022 after the clamp, so it is a normal number.
  const __m256i exponent =
      _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n)), _mm256_set1_epi64x(1023));
  const __m256d scale = _mm256_castsi256_pd(_mm256_slli_epi64(exponent, 52));
  return _mm256_andnot_pd(vanishes, _mm256_mul_pd(poly, scale));
}

// Softmax weights of the whole vocabulary (NaN weighs 0) into `weights`
// (float or double); returns their sum.
template <class T>
double vocabulary_weights(const float* logits, int n_vocab, const Softmax& softmax, T* weights) {
  const __m256d max_logit = _mm256_set1_pd(softmax.max_logit);
  const __m256d temp = _mm256_set1_pd(softmax.temp);
  __m256d sum = _mm256_setzero_pd();
  const auto four = [&](const float* source, T* target) {
    const __m256d scaled =
        _mm256_div_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(source)), max_logit), temp);
    const __m256d w = exp_nonpositive(scaled);
    sum = _mm256_add_pd(sum, w);
    if constexpr (std::is_same_v<T, float>)
      _mm_storeu_ps(target, _mm256_cvtpd_ps(w));
    else
      _mm256_storeu_pd(target, w);
  };
  int id = 0;
  for (; id + 4 <= n_vocab; id += 4) four(logits + id, weights + id);
  if (id < n_vocab) {  // the last few, padded with -inf (weight 0)
    float padded_logits[4];
    T padded_weights[4];
    std::fill(padded_logits, padded_logits + 4, -std::numeric_limits<float>::infinity());
    std::copy(logits + id, logits + n_vocab, padded_logits);
    four(padded_logits, padded_weights);
    std::copy(padded_weights, padded_weights + (n_vocab - id), weights + id);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, sum);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

void one_hot(int n_vocab, int32_t id, std::vector<float>& out) {
  out.assign(size_t(n_vocab), 0.0f);
  out[size_t(id)] = 1.0f;
}

// Softmax of logits whose maximum `max_logit` is finite, then the filters.
void filtered_softmax(const float* logits, int n_vocab, const SamplingParams& params,
                      float max_logit, std::vector<float>& out) {
  const Softmax softmax{max_logit, params.temp};
  const bool use_top_k = params.top_k > 0 && params.top_k < n_vocab;
  const bool use_top_p = params.top_p < 1.0f;
  const bool use_min_p = params.min_p > 0.0f;
  const double min_p = params.min_p;  // p_max has weight 1, so min_p * p_max is min_p
  out.assign(size_t(n_vocab), 0.0f);

  if (!use_top_k && !use_top_p && !use_min_p) {
    const double total = vocabulary_weights(logits, n_vocab, softmax, out.data());
    for (float& p : out) p = float(double(p) / total);
    return;
  }

  thread_local std::vector<Candidate> kept;
  kept.clear();
  // Mass that survives top-k: top-p is measured against it.
  double top_k_mass = 0.0;
  if (use_top_k) {
    select_top_k(logits, n_vocab, params.top_k, kept);
    for (Candidate& c : kept) {
      c.weight = softmax.weight(c.logit);
      top_k_mass += c.weight;
    }
    std::erase_if(kept, [&](const Candidate& c) { return c.weight <= 0.0 || c.weight < min_p; });
  } else if (use_top_p) {
    // Top-p needs the whole vocabulary's mass.
    thread_local std::vector<double> weights;
    weights.resize(size_t(n_vocab));
    top_k_mass = vocabulary_weights(logits, n_vocab, softmax, weights.data());
    // The cut is usually among the best few tokens: try those first.
    constexpr int kHead = 64;
    select_top_k(logits, n_vocab, kHead, kept);
    double head_mass = 0.0;
    bool head_fails_min_p = false;
    for (Candidate& c : kept) {
      c.weight = weights[size_t(c.id)];
      head_mass += c.weight;
      head_fails_min_p |= c.weight <= 0.0 || c.weight < min_p;
    }
    // The head holds the cut when it reaches the mass, when min-p cuts inside
    // it, or when it is the whole (non-NaN) vocabulary.
    const bool head_holds_cut = head_mass >= double(params.top_p) * top_k_mass ||
                                head_fails_min_p || int(kept.size()) < kHead;
    if (head_holds_cut) {
      std::erase_if(kept, [&](const Candidate& c) { return c.weight <= 0.0 || c.weight < min_p; });
    } else {
      kept.clear();
      for (int id = 0; id < n_vocab; ++id) {
        const double weight = weights[size_t(id)];
        if (weight > 0.0 && weight >= min_p) kept.push_back({logits[id], id, weight});
      }
    }
  } else {
    // Min-p alone: compare logits against log(min_p) first (with a margin
    // for rounding) so exp runs only on likely survivors.
    const double logit_floor = max_logit + (std::log(min_p) - 1e-6) * params.temp;
    for (int id = 0; id < n_vocab; ++id) {
      if (!(double(logits[id]) >= logit_floor)) continue;
      const double weight = softmax.weight(logits[id]);
      if (weight >= min_p) kept.push_back({logits[id], id, weight});
    }
  }

  const size_t n_survivors =
      use_top_p ? top_p_count(kept, double(params.top_p) * top_k_mass) : kept.size();
  double survivor_mass = 0.0;
  for (size_t i = 0; i < n_survivors; ++i) survivor_mass += kept[i].weight;
  for (size_t i = 0; i < n_survivors; ++i)
    out[size_t(kept[i].id)] = float(kept[i].weight / survivor_mass);
}

// sample_from sums weights in blocks, each in a fixed order (two 4-lane
// double accumulators), so both of its passes see identical block sums.
constexpr size_t kSampleBlock = 64;

double block_sum(const float* w, size_t count) {
  __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 values = _mm256_loadu_ps(w + i);
    low = _mm256_add_pd(low, _mm256_cvtps_pd(_mm256_castps256_ps128(values)));
    high = _mm256_add_pd(high, _mm256_cvtps_pd(_mm256_extractf128_ps(values, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(low, high));
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < count; ++i) sum += w[i];
  return sum;
}

// Every weight finite and >= 0.
bool all_valid_weights(const float* w, size_t n) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 bad = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 values = _mm256_loadu_ps(w + i);
    // Not >= 0 (negative or NaN), or +inf.
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(values, zero, _CMP_NGE_UQ));
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(values, inf, _CMP_EQ_OQ));
  }
  if (_mm256_movemask_ps(bad) != 0) return false;
  for (; i < n; ++i)
    if (!(std::isfinite(w[i]) && w[i] >= 0.0f)) return false;
  return true;
}

}  // namespace

void validate_sampling_params(const SamplingParams& params) {
  check(!std::isnan(params.temp) && params.temp != std::numeric_limits<float>::infinity(),
        "sampling: temperature must not be NaN or +inf (<= 0 means greedy), got ", params.temp);
  check(params.top_p > 0.0f && params.top_p <= 1.0f,
        "sampling: top-p must be in (0, 1] (1 disables it), got ", params.top_p);
  check(params.min_p >= 0.0f && params.min_p < 1.0f,
        "sampling: min-p must be in [0, 1) (0 disables it), got ", params.min_p);
}

std::vector<float> softmax(const float* logits, int n_vocab) {
  std::vector<float> d(n_vocab);
  const float top = logits[argmax(logits, n_vocab)];
  double sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum += (d[i] = std::exp(logits[i] - top));
  for (float& v : d) v = static_cast<float>(v / sum);
  return d;
}

float top_probability(const float* logits, int n_vocab) {
  const float top = logits[argmax(logits, n_vocab)];
  double sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - top);
  return static_cast<float>(1.0 / sum);
}

std::vector<int32_t> top_c(std::span<const float> weights, int c) {
  std::vector<int32_t> ids(weights.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  const size_t k = std::min(static_cast<size_t>(std::max(c, 0)), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return weights[a] != weights[b] ? weights[a] > weights[b] : a < b;
  });
  ids.resize(k);
  return ids;
}

int32_t argmax(const float* logits, int n_vocab) {
  check(n_vocab > 0, "argmax: empty logits");
  // The first token equal to the maximum: lowest id on ties, and NaN equals nothing.
  const float best = max_logit_of(logits, n_vocab);
  const __m256 target = _mm256_set1_ps(best);
  int id = 0;
  for (; id + 8 <= n_vocab; id += 8) {
    const unsigned equal = unsigned(
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(logits + id), target, _CMP_EQ_OQ)));
    if (equal != 0) return id + __builtin_ctz(equal);
  }
  for (; id < n_vocab; ++id)
    if (logits[id] == best) return id;
  fail("argmax: all ", n_vocab, " logits are NaN");
}

void probabilities(const float* logits, int n_vocab, const SamplingParams& params,
                   std::vector<float>& out) {
  validate_sampling_params(params);
  check(n_vocab > 0, "sampling: empty logits");
  if (params.greedy()) return one_hot(n_vocab, argmax(logits, n_vocab), out);

  const float max_logit = max_logit_of(logits, n_vocab);
  if (max_logit == -std::numeric_limits<float>::infinity())
    return one_hot(n_vocab, argmax(logits, n_vocab), out);
  if (max_logit == std::numeric_limits<float>::infinity()) {
    // The +inf tokens share all the mass; the filters still apply among them.
    std::vector<float> finite(size_t(n_vocab), -std::numeric_limits<float>::infinity());
    for (int id = 0; id < n_vocab; ++id)
      if (logits[id] == std::numeric_limits<float>::infinity()) finite[size_t(id)] = 0.0f;
    return filtered_softmax(finite.data(), n_vocab, params, 0.0f, out);
  }
  filtered_softmax(logits, n_vocab, params, max_logit, out);
}

int32_t sample_from(std::span<const float> weights, Rng& rng) {
  check(!weights.empty(), "sample_from: empty distribution");
  const float* w = weights.data();
  const size_t n = weights.size();
  if (!all_valid_weights(w, n)) {
    size_t bad = 0;
    while (std::isfinite(w[bad]) && w[bad] >= 0.0f) ++bad;
    fail("sample_from: weight of token ", bad, " is ", w[bad], " (must be finite and >= 0)");
  }
  double total = 0.0;
  for (size_t begin = 0; begin < n; begin += kSampleBlock)
    total += block_sum(w + begin, std::min(kSampleBlock, n - begin));
  check(total > 0.0 && std::isfinite(total), "sample_from: weights sum to ", total);

  // Skip whole blocks, then walk the block where the running sum passes the target.
  const double target = rng.uniform() * total;
  double cumulative = 0.0;
  for (size_t begin = 0; begin < n; begin += kSampleBlock) {
    const size_t end = std::min(begin + kSampleBlock, n);
    const double block = block_sum(w + begin, end - begin);
    if (cumulative + block <= target) {
      cumulative += block;
      continue;
    }
    int32_t last_positive = -1;  // the block has one: its sum is > 0
    for (size_t id = begin; id < end; ++id) {
      if (w[id] <= 0.0f) continue;
      cumulative += w[id];
      last_positive = int32_t(id);
      if (cumulative > target) break;
    }
    return last_positive;  // the last one only if the per-token sum rounded below the block's
  }
  // The target rounded up to the total: the last token with weight.
  size_t id = n - 1;
  while (w[id] <= 0.0f) --id;
  return int32_t(id);
}

int32_t sample_from(const std::vector<float>& probs, Rng& rng) {
  return sample_from(std::span<const float>(probs), rng);
}

Sampler::Sampler(SamplingParams params) : params_(params), rng_(params.seed) {
  validate_sampling_params(params_);
}

int32_t Sampler::sample(const float* logits, int n_vocab) {
  if (params_.greedy()) return argmax(logits, n_vocab);
  probabilities(logits, n_vocab, params_, probs_);
  return sample_from(probs_, rng_);
}

}  // namespace parspec
