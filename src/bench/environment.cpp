#include "pdserve/bench/environment.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#ifndef PDSERVE_VERSION
#define PDSERVE_VERSION "unknown"
#endif
#ifndef PDSERVE_SOURCE_DIR
#define PDSERVE_SOURCE_DIR ""
#endif

namespace pdserve::bench {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// The value of the first "key: value" line of a /proc file starting with key.
std::string proc_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    return trim(v);
  }
  return {};
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string capture_command(const std::string& cmd, bool* ok) {
  *ok = false;
  FILE* pipe = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!pipe) return {};
  std::string out;
  std::array<char, 4096> buf{};
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), n);
  *ok = pclose(pipe) == 0;
  return out;
}

Json collect_environment() {
  Json env;
  env["timestamp_utc"] = utc_now();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  env["hostname"] = host;
  struct utsname u{};
  if (uname(&u) == 0) env["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  env["cpu_model"] = proc_field("/proc/cpuinfo", "model name");
  env["cpu_count"] = std::thread::hardware_concurrency();
  env["mem_total"] = proc_field("/proc/meminfo", "MemTotal");
  env["pdserve_version"] = PDSERVE_VERSION;
  env["compiler"] = __VERSION__;

  bool ok = false;
  std::string src = PDSERVE_SOURCE_DIR;
  if (!src.empty()) {
    std::string commit = trim(capture_command("git -C '" + src + "' rev-parse HEAD", &ok));
    if (ok) {
      env["git_commit"] = commit;
      std::string dirty = capture_command("git -C '" + src + "' status --porcelain --untracked-files=no", &ok);
      env["git_dirty"] = ok && !trim(dirty).empty();
    }
  }

  Json gpus = Json::array();
  std::string smi = capture_command(
      "nvidia-smi --query-gpu=index,name,driver_version,memory.total,uuid --format=csv,noheader", &ok);
  if (ok) {
    std::istringstream lines(smi);
    for (std::string line; std::getline(lines, line);)
      if (!trim(line).empty()) gpus.push_back(trim(line));
  }
  env["gpus"] = gpus;  // empty: no nvidia-smi, a CPU run
  return env;
}

}  // namespace pdserve::bench
