#include "host_memory.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace kmfleet {

namespace {

// The first number in a file, or -1 (absent, unreadable, or "max").
std::int64_t readNumber(const char* path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s.empty() || s == "max" || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  return static_cast<std::int64_t>(std::stoll(s));
}

std::int64_t memAvailable() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  std::int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return -1;
}

// What the cgroup's limit leaves; -1 without a limit. A v1 "no limit" is a huge number: larger than physical memory
// it leaves the host's own figure in charge.
std::int64_t cgroupLeft() {
  std::int64_t limit = readNumber("/sys/fs/cgroup/memory.max");
  std::int64_t used = readNumber("/sys/fs/cgroup/memory.current");
  if (limit < 0) {
    limit = readNumber("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = readNumber("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (limit < 0 || limit >= (std::int64_t{1} << 60)) return -1;
  return std::max<std::int64_t>(0, limit - std::max<std::int64_t>(0, used));
}

}  // namespace

std::int64_t availableHostMemory() {
  const std::int64_t host = memAvailable(), cgroup = cgroupLeft();
  if (host < 0) return cgroup;
  if (cgroup < 0) return host;
  return std::min(host, cgroup);
}

std::int64_t defaultHostTierBudget() {
  const std::int64_t available = availableHostMemory();
  if (available <= 0) return 0;
  const std::int64_t headroom = std::max<std::int64_t>(std::int64_t{2} << 30, available / 5);
  return std::max<std::int64_t>(0, available - headroom);
}

}  // namespace kmfleet
