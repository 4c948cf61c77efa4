#include "pdserve/core/secret_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace pdserve {

Result<std::string> read_secret_file(const std::string& path) {
  const std::string what = "cluster secret file " + path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return invalid_argument(what + ": cannot read it: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return invalid_argument(what + ": not a regular file");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return invalid_argument(what + " is accessible by group or others (mode " + mode + "); run: chmod 600 " + path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument(what + ": cannot read it: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  if (s.empty()) return invalid_argument(what + " is empty");
  return s;
}

}  // namespace pdserve
