// `cosine` and `specinfer`: speculation with a pool of drafters (strategies/pool/drafter_pool.h)
// whose proposals are merged into one draft tree that the target verifies with the
// shared tree rules (verify.h: greedy walk; token matching when sampling, exact for
// any tree shape).
//
// cosine, per step: route the request to some drafters (strategies/pool/routing.h, CoSine's
// eq. 2-3); then for K iterations every routed drafter names its most likely next
// token and its probability (its confidence); the most confident token is the fused
// token x*_i (eq. 4), the next node of the fused chain, and is fed to every routed
// drafter, so all continue from it. A drafter whose token lost the fusion keeps it
// too (eq. 4's second term, P(x_{i+1} | x_{[1:i-1]} ⊕ x_i^n)) and from then on also
// continues its own chain, scoring both rows in one forward: the tree holds the
// fused chain and every routed drafter's own chain. With --tree-budget B the B nodes
// of highest path confidence are verified (tree selection). After verification each
// routed drafter's routing score is updated from its confidences and its tokens'
// similarity to the emitted ones (eq. 1-2).
//
// specinfer: every drafter drafts its own chain of K tokens from the root, the
// chains merged into a tree (equal prefixes share nodes); no routing, no fusion.
#include "strategies/cosine/cosine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/timer.h"
#include "decode/driver.h"
#include "decode/local_model.h"
#include "sample/sampler.h"
#include "strategies/pool/drafter_pool.h"
#include "strategies/pool/routing.h"
#include "strategies/tree_sizing.h"
#include "tuning/side_timers.h"

namespace parspec {

namespace {

StrategyOption pool_depth_option() {
  return option_field("--draft-max", "draft_max", "N",
                      "draft tokens per step (γ; the maximum when adaptive; never more than the "
                      "tokens still to generate)",
                      &StrategyConfig::draft_max);
}

StrategyOption route_option() {
  return option_entry("--route", "route", "N",
                      "drafters of the pool each request drafts with per step (0: all; fewer "
                      "while the server's verifier is busy)",
                      2);
}

StrategyOption route_threshold_option() {
  return option_entry("--route-threshold", "route_threshold", "T",
                      "acceptance length (tokens per step) below which routing explores", 2.0f);
}

StrategyOption route_explore_option() {
  return option_entry("--route-explore", "route_explore", "P",
                      "chance that a routed drafter is picked at random while exploring", 0.5f);
}

StrategyOption route_exploit_option() {
  return option_entry("--route-exploit", "route_exploit", "P",
                      "chance that a routed drafter is picked at random while exploiting", 0.1f);
}

StrategyOption gamma_max_option() {
  return option_entry("--gamma-max", "gamma_max", "N",
                      "draft tokens per step of all requests a server verifies at once (Γmax; "
                      "the largest γ is cut while the sum exceeds it; 0: no bound)",
                      0);
}

StrategyOption tree_budget_option() {
  return option_entry("--tree-budget", "tree_budget", "N",
                      "draft tree nodes verified per step: the N most likely accepted, "
                      "estimated from the acceptance measured so far (0: every drafted node; "
                      "-1: each step the count this machine's forward times, timed at start-up, "
                      "make fastest; under serve, every node)",
                      -1);
}

StrategyOption fusion_top_option() {
  return option_entry("--fusion-top", "fusion_top", "N",
                      "tokens of each routed drafter's distribution after the fused chain that "
                      "enter the tree: its best drafts on, the other N-1 are leaves",
                      1);
}

std::unique_ptr<Target> pool_target(const StrategyConfig& config) {
  check(config.target != nullptr && config.target_worker != nullptr, "strategy '", config.name,
        "' needs a target model and a worker");
  if (config.make_target) return config.make_target(config);
  return std::make_unique<LocalTarget>(config.target, *config.target_worker);
}

class PoolSpeculation final : public DecodeStrategy {
 public:
  PoolSpeculation(const StrategyConfig& config, bool cosine)
      : DecodeStrategy(config, pool_target(config), nullptr),
        cosine_(cosine),
        pool_(config),
        routing_(pool_.size(), routing_params(config)) {
    check(config_.draft_max >= 1 && config_.draft_max <= 64, "--draft-max must be 1..64");
    route_ = option_value<int>(config_, route_option());
    check(route_ >= 0, "--route must not be negative");
    gamma_max_ = option_value<int>(config_, gamma_max_option());
    check(gamma_max_ >= 0, "--gamma-max must not be negative");
    tree_budget_ = option_value<int>(config_, tree_budget_option());
    check(tree_budget_ >= -1,
          "--tree-budget must be -1 (sized as it runs), 0 (every node) or a "
          "node count");
    fusion_top_ = option_value<int>(config_, fusion_top_option());
    check(fusion_top_ >= 1 && fusion_top_ <= 8, "--fusion-top must be 1..8");
    if (tree_budget_ < 0) {
      if (config_.time_sides_at_start)
        time_sides();
      else
        tree_budget_ = 0;
    }
  }

  std::string name() const override { return cosine_ ? "cosine" : "specinfer"; }

  std::vector<std::string> notes() const override {
    std::string names;
    for (int i = 0; i < pool_.size(); ++i) names += (i ? ", " : "") + pool_.name(i);
    std::vector<std::string> out = {
        name() + ": " + std::to_string(pool_.size()) + " drafters (" + names + ")" +
        (pool_.concurrent() ? ", drafting concurrently on their own workers" : "")};
    if (tree_budget_ < 0) {
      char line[320];
      std::snprintf(line, sizeof line,
                    "%s: the nodes verified each step are as many as this machine's forward times "
                    "make fastest (target L(1) %.3f ms, L(%d) %.3f ms; a drafter forward %.3f ms; "
                    "--tree-budget N fixes them)",
                    name().c_str(), verify_curve_.at(1), max_rows_, verify_curve_.at(max_rows_),
                    draft_forward_ms_.empty() ? 0.0 : draft_forward_ms_.front());
      out.push_back(line);
    }
    return out;
  }

 protected:
  // Per depth: the fused node, one node of each drafter's own chain and each
  // drafter's runner-up leaves.
  int spec_budget() const override {
    return config_.draft_max * (pool_.size() * fusion_top_ + 1) + 2;
  }

  void reset() override {
    // The driver begins the target and drafter_ (none here): the pool's
    // members get the same capacity.
    for (int i = 0; i < pool_.size(); ++i)
      pool_.member(i).begin(config_.ctx_size + spec_budget() + 2);
    routing_.reset();
    sized_steps_ = 0;
    route_rng_.reseed(sampling_.seed ^ 0x636f73696e65ULL);
    use_.assign(pool_.size(), {});
    for (int i = 0; i < pool_.size(); ++i) use_[i].name = pool_.name(i);
  }

  void prefill() override {
    const std::span<const int32_t> head(seq_.data(), seq_.size() - 1);
    prefill_target(head);
    std::vector<int> all(pool_.size());
    for (int i = 0; i < pool_.size(); ++i) all[i] = i;
    pool_.run(all, [&](int i) {
      Drafter& d = pool_.member(i);
      for (size_t b = 0; b < head.size(); b += kChunk) {
        const auto chunk = head.subspan(b, std::min(kChunk, head.size() - b));
        d.propose(chain_batch(d.n_seen(), chunk, false));
        d.accept_chain(static_cast<int32_t>(chunk.size()));
      }
    });
    pool_.take_meter();  // prefill is not generation work
  }

  void finish(GenerationStats& stats) override {
    for (int i = 0; i < pool_.size(); ++i) use_[i].score = routing_.scores()[i];
    stats.drafter_use = use_;
  }

  void step(std::vector<int32_t>& emitted) override {
    const auto [depth, n_routed] = plan_step();
    const std::vector<int> routed = choose_drafters(n_routed);
    const int32_t root_pos = static_cast<int32_t>(seq_.size()) - 1;
    tokens_ = {cur()};
    parents_ = {-1};
    depths_ = {0};
    confidence_ = {1.0f};
    rank_ = {0};
    members_.assign(routed.size(), Member());
    std::vector<int> slots(routed.size());
    for (size_t s = 0; s < routed.size(); ++s) {
      slots[s] = static_cast<int>(s);
      members_[s].index = routed[s];
      use_[routed[s]].routed_steps++;
    }

    const Stopwatch draft_watch;
    pool_.run(slots, [&](int s) {
      Member& m = members_[s];
      int32_t n_tail = 0;
      m.logits = pool_.member(m.index).catch_up(seq_, &n_tail);
      for (int32_t c = 0; c + 1 < n_tail; ++c) m.prefix_cells.push_back(c);
      m.cell_of = {n_tail - 1};
    });
    int32_t fused = 0;
    for (int d = 1; d <= depth; ++d) {
      // Every member's pick after the fused chain (or, for specinfer, after its own chain).
      for (Member& m : members_) {
        m.picks = top_tokens(m.logits, cosine_ ? fusion_top_ : 1);
        m.tokens.push_back(m.picks[0].first);
        m.confidence.push_back(m.picks[0].second);
      }
      bool stop = false;
      if (cosine_) {
        // Eq. 4: the most confident drafter's token continues every drafter's context.
        size_t best = 0;
        for (size_t s = 1; s < members_.size(); ++s)
          if (members_[s].confidence.back() > members_[best].confidence.back()) best = s;
        const int32_t x = members_[best].tokens.back();
        ++use_[members_[best].index].fused_tokens;
        const int32_t parent = fused;
        fused = child(parent, x, members_[best].confidence.back(), 0);
        // The drafters' runner-up tokens after the fused chain: leaf candidates for
        // tree selection (no drafting below them).
        for (Member& m : members_)
          for (size_t k = 1; k < m.picks.size(); ++k)
            child(parent, m.picks[k].first, m.picks[k].second, static_cast<int>(k));
        for (Member& m : members_) {
          if (m.own == m.node) {
            // Not diverged yet: a pick that lost the fusion starts the drafter's own
            // chain beside the fused one (eq. 4's second term).
            m.own = m.tokens.back() == x ? fused
                                         : child(parent, m.tokens.back(), m.confidence.back(), 0);
          } else {
            // Diverged: its own chain grows by its own next token.
            const auto [token, p] = top_tokens(m.own_logits, 1)[0];
            m.own = child(m.own, token, p, 0);
          }
          m.node = fused;
        }
        stop = config_.draft_p_min > 0 && members_[best].confidence.back() < config_.draft_p_min;
      } else {
        for (Member& m : members_)
          m.own = m.node = child(m.node, m.tokens.back(), m.confidence.back(), 0);
      }
      if (d == depth || stop) break;
      // One forward per drafter: its row on the fused chain and, once diverged,
      // the row of its own chain.
      pool_.run(slots, [&](int s) {
        Member& m = members_[s];
        Drafter& drafter = pool_.member(m.index);
        const bool diverged = m.own != m.node;
        Batch batch;
        batch.add(tokens_[m.node], root_pos + depths_[m.node], m.cell_of[parents_[m.node]], true);
        if (diverged)
          batch.add(tokens_[m.own], root_pos + depths_[m.own], m.cell_of[parents_[m.own]], true);
        const int32_t cell = drafter.n_spec();
        std::vector<float> logits = drafter.propose(batch);
        m.cell_of.resize(tokens_.size(), -1);
        m.cell_of[m.node] = cell;
        if (diverged) {
          m.cell_of[m.own] = cell + 1;
          m.own_logits.assign(logits.begin() + n_vocab(), logits.begin() + 2 * n_vocab());
        }
        logits.resize(n_vocab());
        m.logits = std::move(logits);
      });
    }
    stats_->t_draft_ms += draft_watch.elapsed_ms();
    select_tree(depth);

    const TreeVerdict verdict = verify_tree(root_pos);
    for (int32_t node : verdict.path) emitted.push_back(tokens_[node]);
    emitted.push_back(verdict.next_token);
    commit_drafters(verdict.path);
    calibrate(verdict.path);
    observe(verdict.path);
    update_routing(emitted);
    stats_->draft_forwards += pool_.take_meter().forwards;
  }

 private:
  static constexpr size_t kChunk = 256;

  // One routed drafter's part of a step.
  struct Member {
    int index = 0;                      // in the pool
    std::vector<int32_t> prefix_cells;  // tokens it caught up on before the root
    std::vector<int32_t> cell_of;       // its cell of each tree node it ran; -1: none
    int32_t node = 0;               // the fused chain's tip it drafts below (specinfer: its own)
    int32_t own = 0;                // its own chain's tip; == node until its pick loses a fusion
    std::vector<float> logits;      // after `node`
    std::vector<float> own_logits;  // after `own`, once diverged
    std::vector<int32_t> tokens;    // its pick after the fused chain at each depth
    std::vector<float> confidence;  // the probability of that pick
    std::vector<std::pair<int32_t, float>> picks;  // this depth's top tokens, best first
  };

  // A drafter's `n` most likely tokens after `logits` with their probabilities
  // (its confidence), most likely first; ties to the lower token id, as argmax.
  std::vector<std::pair<int32_t, float>> top_tokens(const std::vector<float>& logits, int n) const {
    const Distribution dist =
        greedy() ? softmax(logits.data(), n_vocab()) : distribution(logits.data());
    std::vector<int32_t> ids(n_vocab());
    for (int32_t t = 0; t < n_vocab(); ++t) ids[t] = t;
    n = std::clamp(n, 1, n_vocab());
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
      return dist[a] > dist[b] || (dist[a] == dist[b] && a < b);
    });
    std::vector<std::pair<int32_t, float>> out;
    for (int k = 0; k < n; ++k) out.emplace_back(ids[k], dist[ids[k]]);
    return out;
  }

  static RoutingParams routing_params(const StrategyConfig& c) {
    RoutingParams p;
    p.threshold = option_value<float>(c, route_threshold_option());
    p.explore = option_value<float>(c, route_explore_option());
    p.exploit = option_value<float>(c, route_exploit_option());
    return p;
  }

  int verifier_load() const {
    return config_.verifier_load ? std::max(1, config_.verifier_load()) : 1;
  }

  // cosine: `n` drafters chosen by routing; specinfer: all of them.
  std::vector<int> choose_drafters(int n) {
    std::vector<int> all(pool_.size());
    for (int i = 0; i < pool_.size(); ++i) all[i] = i;
    if (!cosine_) return all;
    return routing_.choose(n, route_rng_);
  }

  // The step's K (within what is left to generate) and cosine's number of
  // routed drafters (`--route`): granted by the server's request scheduler
  // when there is one (it cuts K to Γmax over the chosen batch and shares the
  // drafters among it); otherwise K is cut to Γmax over the verifier's load
  // and the drafters divided among the requests it serves (a busy verifier
  // gets fewer drafters per request, an idle one all of them).
  std::pair<int, int> plan_step() const {
    int depth = std::max(1, std::min(config_.draft_max, remaining()));
    const int wanted = route_ <= 0 ? pool_.size() : std::min(route_, pool_.size());
    if (cosine_ && config_.schedule_step) {
      const StrategyConfig::StepGrant g =
          config_.schedule_step(static_cast<int>(seq_.size()), depth, wanted);
      return {std::clamp(g.gamma, 1, depth), std::clamp(g.drafters, 1, wanted)};
    }
    if (gamma_max_ > 0) {
      const std::vector<int> cut =
          adaptive_speculation(std::vector<int>(verifier_load(), depth), gamma_max_);
      depth = cut.back();
    }
    return {depth, participating_drafters(route_, pool_.size(), verifier_load())};
  }

  // The child of `parent` with `token`, added if there is none; its confidence
  // is the highest any drafter gave it, its rank the best place it had in a
  // drafter's distribution (0: the drafter's pick).
  int32_t child(int32_t parent, int32_t token, float confidence, int rank) {
    for (int32_t n = parent + 1; n < static_cast<int32_t>(tokens_.size()); ++n)
      if (parents_[n] == parent && tokens_[n] == token) {
        confidence_[n] = std::max(confidence_[n], confidence);
        rank_[n] = std::min<int>(rank_[n], rank);
        return n;
      }
    tokens_.push_back(token);
    parents_.push_back(parent);
    depths_.push_back(depths_[parent] + 1);
    confidence_.push_back(confidence);
    rank_.push_back(static_cast<uint8_t>(rank));
    return static_cast<int32_t>(tokens_.size() - 1);
  }

  // A node's calibration class: its rank and its confidence in tenths.
  static int calibration_class(int rank, float confidence) {
    return rank * 10 + std::clamp(static_cast<int>(confidence * 10), 0, 9);
  }

  // The estimated chance that the target accepts a node once its parent is
  // accepted: the rate measured so far for its class (calibration_), starting
  // from its confidence as a prior worth two observations.
  double acceptance_estimate(size_t node) const {
    const Calibration& c = calibration_[calibration_class(rank_[node], confidence_[node])];
    return (c.accepted + 2.0 * confidence_[node]) / (c.offered + 2.0);
  }

  // After verification: every node whose parent was accepted was offered to the
  // target; those on the path were accepted.
  void calibrate(const std::vector<int32_t>& path) {
    std::vector<uint8_t> on_path(tokens_.size(), 0);
    on_path[0] = 1;
    for (int32_t node : path) on_path[node] = 1;
    for (size_t n = 1; n < tokens_.size(); ++n) {
      if (!on_path[parents_[n]]) continue;
      Calibration& c = calibration_[calibration_class(rank_[n], confidence_[n])];
      ++c.offered;
      c.accepted += on_path[n];
    }
  }

  // Tree selection (CoSine, section 4.2: "a suitable quantity and quality of
  // tokens are then selected for the verification server"): the B nodes of
  // highest estimated path acceptance (the product of the estimates from the
  // root) are kept. A child's product never exceeds its parent's and parents
  // come first, so the kept nodes form a tree. B is --tree-budget, or, sized as
  // it runs, the B that makes the step's tokens per millisecond highest:
  // (1 + the kept nodes' path acceptance) over the step's drafting (its depth
  // times the routed drafters' forward, timed at start-up) and T(B + 1).
  void select_tree(int depth) {
    const size_t n = tokens_.size();
    if (tree_budget_ == 0 || n - 1 <= static_cast<size_t>(std::max(tree_budget_, 0))) return;
    std::vector<double> path(n, 1.0);
    for (size_t i = 1; i < n; ++i) path[i] = path[parents_[i]] * acceptance_estimate(i);
    std::vector<int32_t> order(n - 1);
    for (size_t i = 1; i < n; ++i) order[i - 1] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return path[a] > path[b]; });
    // Sized as it runs, every 16th step verifies every node: what is pruned
    // is never offered, so only such steps can raise a low estimate.
    if (tree_budget_ < 0 && ++sized_steps_ % 16 == 0) return;
    const int budget = tree_budget_ > 0 ? tree_budget_ : sized_budget(path, order, depth);
    if (n - 1 <= static_cast<size_t>(budget)) return;
    std::vector<uint8_t> keep(n, 0);
    keep[0] = 1;
    for (int k = 0; k < budget; ++k) keep[order[k]] = 1;
    std::vector<int32_t> new_index(n, -1);
    std::vector<int32_t> tokens, parents, depths;
    std::vector<float> confidence;
    std::vector<uint8_t> rank;
    for (size_t i = 0; i < n; ++i) {
      if (!keep[i]) continue;
      check(i == 0 || new_index[parents_[i]] >= 0, "tree selection kept a node without its parent");
      new_index[i] = static_cast<int32_t>(tokens.size());
      tokens.push_back(tokens_[i]);
      parents.push_back(i == 0 ? -1 : new_index[parents_[i]]);
      depths.push_back(depths_[i]);
      confidence.push_back(confidence_[i]);
      rank.push_back(rank_[i]);
    }
    for (Member& m : members_) {
      std::vector<int32_t> cells(tokens.size(), -1);
      for (size_t i = 0; i < m.cell_of.size(); ++i)
        if (new_index[i] >= 0) cells[new_index[i]] = m.cell_of[i];
      m.cell_of = std::move(cells);
    }
    tokens_ = std::move(tokens);
    parents_ = std::move(parents);
    depths_ = std::move(depths);
    confidence_ = std::move(confidence);
    rank_ = std::move(rank);
  }

  // The target runs the root and every node in one forward, then the tree rule walks it.
  TreeVerdict verify_tree(int32_t root_pos) {
    const int32_t first = target_->n_spec();
    Batch batch;
    for (size_t n = 0; n < tokens_.size(); ++n)
      batch.add(tokens_[n], root_pos + depths_[n], n == 0 ? -1 : first + parents_[n], true);
    const std::vector<float> logits = target_->forward(batch);
    std::vector<Distribution> rows(tokens_.size());
    for (size_t n = 0; n < tokens_.size(); ++n) {
      const float* row = &logits[n * n_vocab()];
      rows[n] = greedy() ? Distribution(row, row + n_vocab()) : distribution(row);
    }
    // The verifier's view leaves the root out: node i+1 here is node i there.
    const std::vector<int32_t> view_tokens(tokens_.begin() + 1, tokens_.end());
    std::vector<int32_t> view_parents;
    for (size_t n = 1; n < tokens_.size(); ++n) view_parents.push_back(parents_[n] - 1);
    const TreeView view{view_tokens, view_parents};
    const RowFn row = [&rows](int32_t node) { return std::span<const float>(rows[node + 1]); };
    TreeVerdict verdict;
    {
      ScopedTimer timer(stats_->t_verify_ms);
      verdict =
          greedy() ? verify_tree_greedy(view, row) : verify_tree_token_matching(view, row, rng_);
    }
    for (int32_t& node : verdict.path) ++node;
    std::vector<int32_t> path = {first};
    for (int32_t node : verdict.path) path.push_back(first + node);
    target_->commit(path, {});
    return verdict;
  }

  // Each routed drafter keeps what it caught up on, the root and the accepted
  // nodes it ran (a prefix of the path); the next step catches up the rest.
  void commit_drafters(const std::vector<int32_t>& path) {
    for (Member& m : members_) {
      std::vector<int32_t> cells = m.prefix_cells;
      cells.push_back(m.cell_of[0]);
      for (int32_t node : path) {
        if (static_cast<size_t>(node) >= m.cell_of.size() || m.cell_of[node] < 0) break;
        cells.push_back(m.cell_of[node]);
      }
      pool_.member(m.index).accept(cells, {});
    }
  }

  void observe(const std::vector<int32_t>& path) {
    const int32_t end = path.empty() ? 0 : path.back();
    bool end_has_children = false;
    for (size_t n = 1; n < tokens_.size(); ++n) end_has_children |= parents_[n] == end;
    const int accepted = static_cast<int>(path.size());
    stats_->observe_step(static_cast<int64_t>(tokens_.size()) - 1, accepted,
                         accepted + (end_has_children ? 1 : 0));
  }

  // Eq. 1: cosine similarity of the target's input embeddings of two tokens
  // (1 for equal tokens), clamped to [0, 1].
  float similarity(int32_t a, int32_t b) {
    if (a == b) return 1.0f;
    const int n_embd = config_.target->config().n_embd;
    embeddings_.resize(2 * static_cast<size_t>(n_embd));
    const int32_t pair[2] = {a, b};
    config_.target->embed(pair, embeddings_.data());
    double dot = 0, na = 0, nb = 0;
    for (int i = 0; i < n_embd; ++i) {
      const double x = embeddings_[i], y = embeddings_[n_embd + i];
      dot += x * y;
      na += x * x;
      nb += y * y;
    }
    const double cos = na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0.0;
    return static_cast<float>(std::clamp(cos, 0.0, 1.0));
  }

  void update_routing(const std::vector<int32_t>& emitted) {
    for (Member& m : members_) {
      std::vector<float> accuracy(m.tokens.size(), 0.0f);
      for (size_t i = 0; i < m.tokens.size() && i < emitted.size(); ++i)
        accuracy[i] = similarity(emitted[i], m.tokens[i]);
      routing_.update(m.index, m.confidence, accuracy);
    }
    routing_.observe_acceptance(static_cast<int>(emitted.size()));
  }

  // What sizing the verified tree as it runs weighs: the target's forward
  // curve up to the most nodes a step drafts, and each drafter's forward.
  void time_sides() {
    max_rows_ = std::min(spec_budget(), 64);
    verify_curve_ = time_target_curve(*target_, max_rows_);
    for (int i = 0; i < pool_.size(); ++i)
      draft_forward_ms_.push_back(time_draft_forward(pool_.member(i)));
  }

  // The budget with the most tokens per millisecond (fastest_node_budget);
  // `order`: the nodes by path acceptance, highest first.
  int sized_budget(const std::vector<double>& path, const std::vector<int32_t>& order,
                   int depth) const {
    double iteration_ms = 0;
    for (const Member& m : members_) {
      const double d = draft_forward_ms_[m.index];
      iteration_ms = pool_.concurrent() ? std::max(iteration_ms, d) : iteration_ms + d;
    }
    std::vector<double> sorted;
    for (int32_t node : order) sorted.push_back(path[node]);
    return fastest_node_budget(sorted, depth * iteration_ms, verify_curve_, max_rows_);
  }

  const bool cosine_;
  DrafterPool pool_;
  RoutingPolicy routing_;
  Rng route_rng_;
  int route_ = 2;
  int gamma_max_ = 0;
  int tree_budget_ = 0;  // -1: sized as it runs (verify_curve_, draft_forward_ms_)
  int fusion_top_ = 1;
  ForwardCurve verify_curve_;
  int max_rows_ = 1;                      // the rows verify_curve_ reaches
  std::vector<double> draft_forward_ms_;  // per pool member
  int sized_steps_ = 0;                   // this request's steps with a sized budget
  std::vector<GenerationStats::DrafterUse> use_;
  // This step's draft tree: node 0 is the root (cur); parents before children.
  std::vector<int32_t> tokens_, parents_, depths_;
  std::vector<float> confidence_;  // per node: the highest drafter probability of its token
  std::vector<uint8_t> rank_;      // per node: its best rank in a drafter's distribution
  struct Calibration {
    int64_t offered = 0, accepted = 0;
  };
  // Per calibration class, over every request this strategy served.
  std::vector<Calibration> calibration_ = std::vector<Calibration>(80);
  std::vector<Member> members_;
  std::vector<float> embeddings_;
};

}  // namespace

StrategyInfo cosine_strategy() {
  return {.name = "cosine",
          .summary =
              "CoSine: a drafter pool (--drafters) with adaptive routing and confidence-"
              "based token fusion into one draft tree",
          .needs_draft = true,
          .options = {pool_depth_option(),
                      option_field("--draft-p-min", "draft_p_min", "P",
                                   "stop drafting when the draft's top probability is below P",
                                   &StrategyConfig::draft_p_min),
                      route_option(), route_threshold_option(), route_explore_option(),
                      route_exploit_option(), gamma_max_option(), tree_budget_option(),
                      fusion_top_option()},
          .variant_key = "draft_max",
          .served = true,
          .takes_drafter_pool = true,
          .uses_request_scheduler = true,
          .make = [](const StrategyConfig& c) {
            return std::make_unique<PoolSpeculation>(c, /*cosine=*/true);
          }};
}

StrategyInfo specinfer_strategy() {
  return {.name = "specinfer",
          .summary =
              "SpecInfer-style multi-drafter tree: every drafter of --drafters drafts a "
              "chain, merged into one tree (no routing, no fusion)",
          .needs_draft = true,
          .options = {pool_depth_option(), tree_budget_option()},
          .variant_key = "draft_max",
          .served = true,
          .takes_drafter_pool = true,
          .make = [](const StrategyConfig& c) {
            return std::make_unique<PoolSpeculation>(c, /*cosine=*/false);
          }};
}

}  // namespace parspec
