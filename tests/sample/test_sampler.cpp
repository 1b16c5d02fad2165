#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "sample/sampler.h"
#include "test_helpers.h"

namespace parspec {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

SamplingParams unfiltered(float temp = 1.0f) {
  return testing_support::untruncated_sampling(temp);
}

// Logits whose temperature-1 softmax is proportional to `weights`.
std::vector<float> log_of(const std::vector<double>& weights) {
  std::vector<float> logits;
  for (double w : weights) logits.push_back(w > 0 ? float(std::log(w)) : -kInf);
  return logits;
}

std::vector<float> probs_of(const std::vector<float>& logits, const SamplingParams& params) {
  std::vector<float> out;
  probabilities(logits.data(), int(logits.size()), params, out);
  return out;
}

void expect_probs(const std::vector<float>& actual, const std::vector<double>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], 1e-6) << "token " << i;
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(actual[i] == 0.0f, expected[i] == 0.0) << "token " << i << " filtered differently";
}

// Straightforward reference: full sort, each filter in turn.
std::vector<float> reference_probabilities(const std::vector<float>& logits,
                                           const SamplingParams& params) {
  const int n = int(logits.size());
  std::vector<int> order;
  for (int id = 0; id < n; ++id)
    if (!std::isnan(logits[id])) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double max_logit = logits[order[0]];
  std::vector<double> weight(n, 0.0);
  for (int id : order) weight[id] = std::exp((double(logits[id]) - max_logit) / params.temp);
  if (params.top_k > 0 && size_t(params.top_k) < order.size()) order.resize(params.top_k);
  double mass = 0.0;
  for (int id : order) mass += weight[id];
  if (params.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t count = 0;
    while (count < order.size()) {
      cumulative += weight[order[count++]];
      if (cumulative >= params.top_p * mass) break;
    }
    order.resize(count);
  }
  std::erase_if(order, [&](int id) { return weight[id] <= 0.0 || weight[id] < params.min_p; });
  double survivors = 0.0;
  for (int id : order) survivors += weight[id];
  std::vector<float> out(n, 0.0f);
  for (int id : order) out[id] = float(weight[id] / survivors);
  return out;
}

TEST(SamplerRng, MatchesReferenceXoshiro256StarStar) {
  // Values from an independent implementation of splitmix64 + xoshiro256**.
  Rng zero(0);
  EXPECT_EQ(zero.next(), 0x99ec5f36cb75f2b4ULL);
  EXPECT_EQ(zero.next(), 0xbf6e1f784956452aULL);
  EXPECT_EQ(zero.next(), 0x1a5f849d4933e6e0ULL);
  Rng other(12345);
  EXPECT_EQ(other.next(), 0xbe6a36374160d49bULL);
  EXPECT_EQ(other.next(), 0x214aaa0637a688c6ULL);
}

TEST(SamplerRng, UniformIsInUnitIntervalAndReproducible) {
  Rng a(7), b(7), c(8);
  double sum = 0.0;
  bool differs = false;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = a.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ASSERT_EQ(u, b.uniform());
    differs |= u != c.uniform();
    sum += u;
  }
  EXPECT_TRUE(differs);
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  // uniform() uses the top 53 bits of next().
  Rng d(3), e(3);
  EXPECT_EQ(d.uniform(), double(e.next() >> 11) / 9007199254740992.0);
}

TEST(SamplerParams, RejectsOutOfRangeValues) {
  auto rejects = [](auto edit) {
    SamplingParams params;
    edit(params);
    EXPECT_THROW(validate_sampling_params(params), Error);
    EXPECT_THROW(Sampler{params}, Error);
  };
  rejects([](SamplingParams& p) { p.top_p = 0.0f; });
  rejects([](SamplingParams& p) { p.top_p = 1.5f; });
  rejects([](SamplingParams& p) { p.top_p = kNaN; });
  rejects([](SamplingParams& p) { p.min_p = -0.1f; });
  rejects([](SamplingParams& p) { p.min_p = 1.0f; });
  rejects([](SamplingParams& p) { p.min_p = kNaN; });
  rejects([](SamplingParams& p) { p.temp = kNaN; });
  rejects([](SamplingParams& p) { p.temp = kInf; });

  SamplingParams ok;
  ok.temp = -1.0f;  // greedy, like llama.cpp
  ok.top_k = -5;    // disabled
  ok.top_p = 1.0f;
  ok.min_p = 0.0f;
  EXPECT_NO_THROW(validate_sampling_params(ok));
  EXPECT_TRUE(ok.greedy());
  try {
    SamplingParams bad;
    bad.top_p = 2.0f;
    validate_sampling_params(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top-p"), std::string::npos) << e.what();
  }
}

TEST(SamplerProbabilities, SoftmaxWithoutFilters) {
  expect_probs(probs_of(log_of({1, 2, 3, 4}), unfiltered()), {0.1, 0.2, 0.3, 0.4});
  // Large logits do not overflow: the max is subtracted before exp.
  const double e = std::exp(1.0), total = 1 + e + e * e + e * e * e;
  const std::vector<double> expected = {1 / total, e / total, e * e / total, e * e * e / total};
  expect_probs(probs_of({0, 1, 2, 3}, unfiltered()), expected);
  expect_probs(probs_of({1000, 1001, 1002, 1003}, unfiltered()), expected);
  expect_probs(probs_of({-1000, -999, -998, -997}, unfiltered()), expected);
}

TEST(SamplerProbabilities, TemperatureScalesLogits) {
  // p ∝ w^(1/T): T = 0.5 squares the weights, T = 2 takes square roots.
  expect_probs(probs_of(log_of({1, 2, 3, 4}), unfiltered(0.5f)),
               {1.0 / 30, 4.0 / 30, 9.0 / 30, 16.0 / 30});
  const double s = 1 + std::sqrt(2.0) + std::sqrt(3.0) + 2;
  expect_probs(probs_of(log_of({1, 2, 3, 4}), unfiltered(2.0f)),
               {1 / s, std::sqrt(2.0) / s, std::sqrt(3.0) / s, 2 / s});
}

TEST(SamplerProbabilities, TopKKeepsTheKBest) {
  SamplingParams params = unfiltered();
  params.top_k = 2;
  expect_probs(probs_of(log_of({4, 1, 3, 2}), params), {4.0 / 7, 0, 3.0 / 7, 0});
  params.top_k = 1;
  expect_probs(probs_of(log_of({4, 1, 3, 2}), params), {1, 0, 0, 0});
  params.top_k = 4;  // k >= n_vocab: no filtering
  expect_probs(probs_of(log_of({4, 1, 3, 2}), params), {0.4, 0.1, 0.3, 0.2});
}

TEST(SamplerProbabilities, TopKTiesGoToLowerIds) {
  SamplingParams params = unfiltered();
  params.top_k = 2;
  expect_probs(probs_of({1, 1, 1, 1}, params), {0.5, 0.5, 0, 0});
  expect_probs(probs_of({0, 2, 1, 2, 2}, params), {0, 0.5, 0, 0.5, 0});
  params.top_k = 3;
  const double e4 = std::exp(4.0);
  expect_probs(probs_of({5, 1, 1, 1, 1}, params),
               {e4 / (e4 + 2), 1 / (e4 + 2), 1 / (e4 + 2), 0, 0});
}

TEST(SamplerProbabilities, TopPKeepsSmallestSetReachingTheMass) {
  SamplingParams params = unfiltered();
  const std::vector<float> logits = log_of({0.1, 0.2, 0.3, 0.4});
  params.top_p = 0.6f;  // 0.4 + 0.3 >= 0.6
  expect_probs(probs_of(logits, params), {0, 0, 3.0 / 7, 4.0 / 7});
  params.top_p = 0.75f;  // 0.4 + 0.3 + 0.2 >= 0.75
  expect_probs(probs_of(logits, params), {0, 2.0 / 9, 3.0 / 9, 4.0 / 9});
  params.top_p = 0.3f;  // the best token alone
  expect_probs(probs_of(logits, params), {0, 0, 0, 1});
  params.top_p = 1e-6f;  // the best token always survives
  expect_probs(probs_of(logits, params), {0, 0, 0, 1});
}

TEST(SamplerProbabilities, TopPMassReachedExactlyStopsThereAndTiesGoToLowerIds) {
  SamplingParams params = unfiltered();
  params.top_p = 0.5f;  // two of four equal tokens hold exactly half the mass
  expect_probs(probs_of({0, 0, 0, 0}, params), {0.5, 0.5, 0, 0});
  params.top_p = 0.51f;
  expect_probs(probs_of({0, 0, 0, 0}, params), {1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
}

TEST(SamplerProbabilities, TopPMeasuresMassAfterTopK) {
  // After top-2 the survivors weigh 3/7 and 4/7; 4/7 alone reaches 0.5. Measured
  // against the full vocabulary (0.4 < 0.5) token 2 would survive too.
  SamplingParams params = unfiltered();
  params.top_k = 2;
  params.top_p = 0.5f;
  expect_probs(probs_of(log_of({0.1, 0.2, 0.3, 0.4}), params), {0, 0, 0, 1});
}

TEST(SamplerProbabilities, MinPDropsTokensBelowFractionOfBest) {
  SamplingParams params = unfiltered();
  const std::vector<float> logits = log_of({0.1, 0.2, 0.3, 0.4});
  params.min_p = 0.45f;  // keep p >= 0.18
  expect_probs(probs_of(logits, params), {0, 2.0 / 9, 3.0 / 9, 4.0 / 9});
  params.min_p = 0.6f;  // keep p >= 0.24
  expect_probs(probs_of(logits, params), {0, 0, 3.0 / 7, 4.0 / 7});
  params.min_p = 0.999f;  // only the best
  expect_probs(probs_of(logits, params), {0, 0, 0, 1});
  // Tokens tied with the best always survive min-p.
  expect_probs(probs_of({3, 1, 3}, params), {0.5, 0, 0.5});
}

TEST(SamplerProbabilities, MinPUsesTemperatureScaledProbabilities) {
  // At T = 0.5 the weights are 1, 4, 9, 16, so min-p 0.3 keeps weights >= 4.8:
  // two tokens. At T = 1 (weights 1..4, keep >= 1.2) it would keep three.
  SamplingParams params = unfiltered(0.5f);
  params.min_p = 0.3f;
  expect_probs(probs_of(log_of({1, 2, 3, 4}), params), {0, 0, 9.0 / 25, 16.0 / 25});
}

TEST(SamplerProbabilities, AllFiltersTogether) {
  // Weights 8 (x2), 4, 2, 1, 1 over total 24; top-k 5 drops token 5 (the
  // later of the two 1s): mass 23. Top-p 0.8 needs 18.4: 8+8+4 = 20 → 3 tokens.
  // Min-p 0.4 keeps weights >= 3.2: all three.
  SamplingParams params = unfiltered();
  params.top_k = 5;
  params.top_p = 0.8f;
  params.min_p = 0.4f;
  const std::vector<float> logits = log_of({1, 8, 4, 8, 2, 1});
  expect_probs(probs_of(logits, params), {0, 0.4, 0.2, 0.4, 0, 0});
  params.min_p = 0.6f;  // weights >= 4.8: the two 8s
  expect_probs(probs_of(logits, params), {0, 0.5, 0, 0.5, 0, 0});
}

TEST(SamplerProbabilities, MatchesReferenceOnRandomInputs) {
  Rng rng(2024);
  const int sizes[] = {1, 2, 7, 100, 150, 3000};
  const float temps[] = {0.3f, 0.8f, 1.0f, 2.5f, 20.0f};
  const int top_ks[] = {0, 1, 3, 40, 2500, 5000};
  const float top_ps[] = {1.0f, 0.95f, 0.5f, 0.999999f, 0.1f};
  const float min_ps[] = {0.0f, 0.05f, 0.5f, 1e-7f};
  auto pick = [&](const auto& options) {
    return options[rng.next() % (sizeof(options) / sizeof(options[0]))];
  };
  std::vector<float> actual;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = pick(sizes);
    const bool integer_logits = trial % 2 == 0;  // many exact ties
    std::vector<float> logits(n);
    for (float& l : logits)
      l = integer_logits ? float(rng.next() % 7) : float((rng.uniform() - 0.5) * 30.0);
    for (float& l : logits) {
      const uint64_t r = rng.next() % 50;
      if (r == 0) l = kNaN;
      if (r == 1) l = -kInf;
    }
    logits[rng.next() % n] = 3.0f;  // at least one finite logit
    SamplingParams params;
    params.temp = pick(temps);
    params.top_k = pick(top_ks);
    params.top_p = pick(top_ps);
    params.min_p = pick(min_ps);
    probabilities(logits.data(), n, params, actual);
    const std::vector<float> expected = reference_probabilities(logits, params);
    ASSERT_EQ(actual.size(), size_t(n));
    double sum = 0.0;
    for (int id = 0; id < n; ++id) {
      ASSERT_EQ(actual[id] == 0.0f, expected[id] == 0.0f)
          << "trial " << trial << " token " << id << " n " << n << " temp " << params.temp
          << " top_k " << params.top_k << " top_p " << params.top_p << " min_p " << params.min_p;
      ASSERT_NEAR(actual[id], expected[id], 1e-6 * expected[id] + 1e-9) << "trial " << trial;
      sum += actual[id];
    }
    ASSERT_NEAR(sum, 1.0, 1e-5);
  }
}

TEST(SamplerProbabilities, GreedyIsOneHotAtLowestArgmax) {
  SamplingParams params = unfiltered(0.0f);
  expect_probs(probs_of({1, 5, 2, 5}, params), {0, 1, 0, 0});
  params.temp = -1.0f;  // negative temperature is greedy too
  expect_probs(probs_of({1, 5, 2, 5}, params), {0, 1, 0, 0});
}

TEST(SamplerProbabilities, NaNLogitsGetZero) {
  expect_probs(probs_of({kNaN, 0, 0, kNaN}, unfiltered()), {0, 0.5, 0.5, 0});
  SamplingParams params;  // defaults: top-k, top-p and min-p on
  expect_probs(probs_of({kNaN, 2, kNaN, 2}, params), {0, 0.5, 0, 0.5});
  params.top_k = 1;
  expect_probs(probs_of({kNaN, 1, 2, kNaN}, params), {0, 0, 1, 0});
}

TEST(SamplerProbabilities, InfiniteLogits) {
  // +inf takes all the mass (shared between several +inf tokens).
  expect_probs(probs_of({0, kInf, 5, -kInf}, unfiltered()), {0, 1, 0, 0});
  expect_probs(probs_of({kInf, 1, kNaN, kInf}, unfiltered()), {0.5, 0, 0, 0.5});
  SamplingParams params;
  params.top_k = 1;
  expect_probs(probs_of({kInf, 1, kNaN, kInf}, params), {1, 0, 0, 0});
  // -inf gets nothing; only -inf and NaN left: one-hot at the first -inf.
  expect_probs(probs_of({-kInf, 1, -kInf}, unfiltered()), {0, 1, 0});
  expect_probs(probs_of({kNaN, -kInf, -kInf}, unfiltered()), {0, 1, 0});
  std::vector<float> out;
  const std::vector<float> all_nan = {kNaN, kNaN};
  EXPECT_THROW(probabilities(all_nan.data(), 2, unfiltered(), out), Error);
}

TEST(SamplerProbabilities, BestTokenSurvivesTheHarshestFilters) {
  SamplingParams params;
  params.top_k = 1;
  params.top_p = 1e-6f;
  params.min_p = 0.999f;
  params.temp = 1e-3f;
  Rng rng(5);
  std::vector<float> logits(1000);
  for (float& l : logits) l = float(rng.uniform());
  const int32_t best = argmax(logits.data(), 1000);
  const std::vector<float> out = probs_of(logits, params);
  for (int id = 0; id < 1000; ++id) EXPECT_EQ(out[id], id == best ? 1.0f : 0.0f);
}

TEST(SamplerArgmax, MatchesScalarScanOnRandomInputs) {
  Rng rng(77);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + int(rng.next() % 300);
    std::vector<float> logits(n);
    for (float& l : logits) {
      const uint64_t r = rng.next() % 20;
      l = r == 0 ? kNaN : r == 1 ? -kInf : float(rng.next() % 9);  // many ties
    }
    if (trial % 10 == 0) logits[n - 1] = 100.0f;  // best token in the scalar tail
    int expected = -1;
    for (int id = 0; id < n; ++id)
      if (!std::isnan(logits[id]) && (expected < 0 || logits[id] > logits[expected])) expected = id;
    if (expected < 0) {
      EXPECT_THROW(argmax(logits.data(), n), Error);
    } else {
      ASSERT_EQ(argmax(logits.data(), n), expected) << "trial " << trial;
    }
  }
}

TEST(SamplerArgmax, LowestIdWinsAndNaNNeverWins) {
  const std::vector<float> a = {1, 3, 2, 3};
  EXPECT_EQ(argmax(a.data(), 4), 1);
  const std::vector<float> b = {kNaN, 1, 3, 3, kNaN};
  EXPECT_EQ(argmax(b.data(), 5), 2);
  const std::vector<float> c = {kNaN, -kInf, -kInf};
  EXPECT_EQ(argmax(c.data(), 3), 1);
  const std::vector<float> d = {-1, kNaN, kInf, kInf};
  EXPECT_EQ(argmax(d.data(), 4), 2);
  const std::vector<float> e = {kNaN, kNaN};
  EXPECT_THROW(argmax(e.data(), 2), Error);
}

// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int draws) {
  double chi2 = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double expected = probs[i] * draws;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

TEST(SamplerSampleFrom, FrequenciesMatchProbabilities) {
  const std::vector<float> probs = {0.1f, 0.2f, 0.3f, 0.15f, 0.25f};
  Rng rng(99);
  const int draws = 100000;
  std::vector<int> counts(5, 0);
  for (int i = 0; i < draws; ++i) ++counts[sample_from(probs, rng)];
  // 4 degrees of freedom: 18.47 is the 0.1% critical value. An off-by-one in the
  // CDF walk gives a chi-square in the thousands.
  EXPECT_LT(chi_square(counts, {0.1, 0.2, 0.3, 0.15, 0.25}, draws), 18.47);
}

TEST(SamplerSampleFrom, UnnormalizedWeightsAndZeros) {
  const std::vector<float> weights = {0, 2, 0, 0, 6, 0};  // 0.25 / 0.75
  Rng rng(1);
  const int draws = 40000;
  int ones = 0;
  for (int i = 0; i < draws; ++i) {
    const int32_t id = sample_from(weights, rng);
    ASSERT_TRUE(id == 1 || id == 4) << id;
    ones += id == 1;
  }
  // Binomial standard deviation is ~87 draws; allow ~6 of them.
  EXPECT_NEAR(ones, draws / 4, 500);
  // A single positive weight is always drawn, wherever it sits.
  const std::vector<float> last = {0, 0, 0, 1e-30f};
  for (int i = 0; i < 100; ++i) ASSERT_EQ(sample_from(last, rng), 3);
}

TEST(SamplerSampleFrom, MatchesSequentialInverseCdf) {
  // Long vectors (the blocked walk) against a plain running sum with the same draws.
  Rng weights_rng(8);
  std::vector<float> weights(1000);
  for (size_t i = 0; i < weights.size(); ++i)
    weights[i] = i % 3 == 0 ? 0.0f : float(weights_rng.uniform());
  double total = 0.0;
  for (float w : weights) total += w;
  Rng rng(21), twin(21);
  for (int draw = 0; draw < 5000; ++draw) {
    const double target = twin.uniform() * total;
    double cumulative = 0.0;
    size_t expected = 0;
    while (expected < weights.size() &&
           !(weights[expected] > 0.0f && cumulative + weights[expected] > target))
      cumulative += weights[expected++];
    ASSERT_EQ(sample_from(weights, rng), int32_t(expected)) << "draw " << draw;
  }
}

TEST(SamplerSampleFrom, RejectsInvalidWeights) {
  Rng rng(1);
  EXPECT_THROW(sample_from(std::vector<float>{}, rng), Error);
  EXPECT_THROW(sample_from(std::vector<float>{0, 0}, rng), Error);
  EXPECT_THROW(sample_from(std::vector<float>{0.5f, -0.1f}, rng), Error);
  EXPECT_THROW(sample_from(std::vector<float>{0.5f, kNaN}, rng), Error);
  EXPECT_THROW(sample_from(std::vector<float>{0.5f, kInf}, rng), Error);
  for (size_t bad : {0, 5, 37, 99}) {  // inside the 8-wide checks and in the tail
    std::vector<float> weights(100, 0.01f);
    weights[bad] = bad % 2 == 0 ? -1e-20f : kNaN;
    try {
      sample_from(weights, rng);
      ADD_FAILURE() << "accepted a bad weight at " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
}

TEST(SamplerClass, SameSeedSameTokensDifferentSeedDifferentTokens) {
  Rng rng(11);
  std::vector<float> logits(500);
  for (float& l : logits) l = float(rng.uniform() * 4.0);
  SamplingParams params;
  params.top_k = 0;
  params.min_p = 0.0f;
  params.seed = 42;
  Sampler a(params), b(params);
  params.seed = 43;
  Sampler c(params);
  EXPECT_EQ(a.params().seed, 42u);
  int differences = 0;
  for (int i = 0; i < 200; ++i) {
    const int32_t token = a.sample(logits.data(), 500);
    ASSERT_EQ(token, b.sample(logits.data(), 500));
    differences += token != c.sample(logits.data(), 500);
  }
  EXPECT_GT(differences, 100);  // ~500 live tokens: almost every draw differs
}

TEST(SamplerClass, GreedyIsArgmaxAndDrawsNothing) {
  SamplingParams params;
  params.temp = 0.0f;
  Sampler greedy(params);
  const std::vector<float> logits = {0.5f, 2, kNaN, 2, 1};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(greedy.sample(logits.data(), 5), 1);
  EXPECT_TRUE(greedy.rng() == Rng(params.seed));
}

TEST(SamplerClass, SampleFrequenciesFollowFilteredDistribution) {
  // T = 1, top-k 3 over weights 1..4 → tokens 1, 2, 3 with 2/9, 3/9, 4/9.
  SamplingParams params = unfiltered();
  params.top_k = 3;
  params.seed = 7;
  Sampler sampler(params);
  const std::vector<float> logits = log_of({1, 2, 3, 4});
  const int draws = 30000;
  std::vector<int> counts(4, 0);
  for (int i = 0; i < draws; ++i) ++counts[sampler.sample(logits.data(), 4)];
  EXPECT_EQ(counts[0], 0);
  // 2 degrees of freedom: 13.82 is the 0.1% critical value.
  EXPECT_LT(chi_square({counts[1], counts[2], counts[3]}, {2.0 / 9, 3.0 / 9, 4.0 / 9}, draws),
            13.82);
}

}  // namespace
}  // namespace parspec
