// How much host memory this process may still take: the basis of the host tier's default budget (host_tier.h).
#pragma once

#include <cstdint>

namespace kmfleet {

// Bytes this process could allocate without pushing the host or its container into reclaim: the smaller of the
// kernel's MemAvailable and what the cgroup's memory limit leaves (v2 memory.max − memory.current, or v1's
// limit_in_bytes − usage_in_bytes); -1 when neither can be read.
std::int64_t availableHostMemory();

// The host tier's budget when the caller gave none: what is available, less a headroom of a fifth of it and at least
// 2 GiB for the process's other memory (the worker's memory cache, Node's heap, the kernel's page cache of the
// dataset file), never below 0.
std::int64_t defaultHostTierBudget();

}  // namespace kmfleet
