#pragma once
// A registered strategy under another name: PipeDec's baselines are ar and
// tree run through the pipeline, under the paper's names.
#include <memory>
#include <string>

#include "decode/registry.h"

namespace parspec {

class Renamed final : public Strategy {
 public:
  Renamed(std::string name, std::unique_ptr<Strategy> inner)
      : name_(std::move(name)), inner_(std::move(inner)) {}
  std::string name() const override { return name_; }
  GenerationResult generate(const GenerationRequest& request) override {
    return inner_->generate(request);
  }
  std::vector<std::string> notes() const override { return inner_->notes(); }

 private:
  std::string name_;
  std::unique_ptr<Strategy> inner_;
};

// Strategy `base` made from `config`, named `name`.
inline std::unique_ptr<Strategy> renamed_strategy(const std::string& name, const std::string& base,
                                                  const StrategyConfig& config) {
  StrategyConfig c = config;
  c.name = base;
  return std::make_unique<Renamed>(name, strategy_info(base).make(c));
}

}  // namespace parspec
