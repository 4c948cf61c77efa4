// `pdserve make-model`: small deterministic models in the real checkpoint layout
// (config.json, sharded safetensors with an index, MXFP4 experts for tiny-k3, and a small
// BPE tokenizer in tiktoken format). They are the default model of the quickstart and tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pdserve/core/status.h"

namespace pdserve {

std::vector<std::string> model_presets();
Status make_model(const std::string& preset, const std::string& out_dir, uint64_t seed = 1234);

}  // namespace pdserve
