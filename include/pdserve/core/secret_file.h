// The cluster secret: read from a file named in the config, never from the command line
// (argv is visible to every user of the host through /proc).
#pragma once

#include <string>

#include "pdserve/core/status.h"

namespace pdserve {

// The file's contents without trailing whitespace. Refused, naming the file, when it cannot
// be read, is empty, or grants any permission to group or others (chmod 600 it).
Result<std::string> read_secret_file(const std::string& path);

}  // namespace pdserve
