#pragma once
// The pool strategies: `cosine` (CoSine, "Collaborative Speculative Inference
// for Efficient LLM Inference Serving": adaptive routing of each request to
// some drafters of the pool, confidence-based token fusion at every drafting
// iteration, one draft tree verified losslessly) and `specinfer` (the
// SpecInfer-style baseline: every drafter drafts its own chain, merged into
// one tree, no routing, no fusion). docs/strategies/cosine.md and
// docs/strategies/specinfer.md explain both.
#include "decode/registry.h"
#include "strategies/cosine/cosine_schedule.h"
