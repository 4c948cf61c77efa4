// What the run happened on, for manifest.json: host, CPU, memory, GPUs (nvidia-smi when
// present), pdserve version and source commit. Every probe is best effort.
#pragma once

#include <string>

#include "pdserve/core/json_util.h"

namespace pdserve::bench {

Json collect_environment();

// Runs a shell command and returns its stdout; ok=false when it could not run or exited non-zero.
std::string capture_command(const std::string& cmd, bool* ok);

}  // namespace pdserve::bench
