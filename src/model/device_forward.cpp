#include "pdserve/model/device_forward.h"

namespace pdserve {

DeviceForward::~DeviceForward() = default;

std::vector<std::pair<int32_t, int32_t>> page_runs(const std::vector<int32_t>& pages) {
  std::vector<std::pair<int32_t, int32_t>> runs;
  for (int32_t p : pages) {
    if (!runs.empty() && runs.back().first + runs.back().second == p) ++runs.back().second;
    else runs.push_back({p, 1});
  }
  return runs;
}

}  // namespace pdserve
