#include "strategies/pool/drafter_pool.h"

#include <exception>
#include <set>

#include "core/error.h"
#include "core/timer.h"
#include "decode/local_model.h"

namespace parspec {

DrafterPool::DrafterPool(const StrategyConfig& config) {
  std::vector<std::shared_ptr<const Model>> models = config.drafters;
  if (models.empty() && config.draft) models.push_back(config.draft);
  check(!models.empty(), "strategy '", config.name,
        "' needs drafters: give them with --drafters a.gguf,b.gguf,... (or one with -md)");
  check(config.target != nullptr && config.target_worker != nullptr, "strategy '", config.name,
        "' needs a target model and a worker");
  std::set<Worker*> workers;
  for (size_t i = 0; i < models.size(); ++i) {
    const Model& model = *models[i];
    const std::string name =
        i < config.drafter_names.size() ? config.drafter_names[i] : "drafter" + std::to_string(i);
    check(model.config().n_vocab == config.target->config().n_vocab, "drafter ", name,
          ": its vocabulary (", model.config().n_vocab, " tokens) differs from the target's (",
          config.target->config().n_vocab, "): speculative decoding needs a shared tokenizer");
    Worker* worker = i < config.drafter_workers.size() ? config.drafter_workers[i] : nullptr;
    if (worker == nullptr) worker = config.draft_worker;
    if (worker == nullptr) worker = config.target_worker;
    workers.insert(worker);
    if (config.make_drafter) {
      StrategyConfig member = config;
      member.draft = models[i];
      members_.push_back(config.make_drafter(member));
    } else {
      members_.push_back(std::make_unique<ModelDrafter>(models[i], *worker));
    }
    names_.push_back(name);
  }
  concurrent_ = !config.make_drafter && members_.size() > 1 && workers.size() == members_.size();
  // Every member but the one the caller runs gets a thread that stays for the
  // pool's life, so a step starts none.
  if (concurrent_)
    for (size_t i = 1; i < members_.size(); ++i) runners_.push_back(borrow_runner());
}

void DrafterPool::run(std::span<const int> members, const std::function<void(int)>& job) {
  if (!concurrent_ || members.size() < 2) {
    // One after another here; on a simulated cluster the members' nodes draft at the same time.
    ParallelSection together;
    for (int i : members) {
      together.next();
      job(i);
    }
    return;
  }
  std::vector<std::exception_ptr> errors(members.size());
  for (size_t k = 1; k < members.size(); ++k)
    runners_[k - 1]->post([&job, member = members[k]] { job(member); });
  try {
    job(members[0]);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (size_t k = 1; k < members.size(); ++k) {
    try {
      runners_[k - 1]->wait();
    } catch (...) {
      errors[k] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

ForwardMeter DrafterPool::take_meter() {
  ForwardMeter total;
  for (auto& m : members_) {
    const ForwardMeter one = m->take_meter();
    total.forwards += one.forwards;
    total.ms += one.ms;
  }
  return total;
}

}  // namespace parspec
