// The seam between the engine (native/src, owned by the native engineer) and this backend.
// native/src/cuda_bridge.h declares what we implement; until it exists, a stand-in with the
// agreed names keeps cuda/ compiling on its own.
#pragma once
#if __has_include("cuda_bridge.h")
#include "cuda_bridge.h"
#else
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
namespace kmfleet {
struct GpuDevice {
  int ordinal = 0;
  std::string name;
  std::string computeCapability;
  double totalMemory = 0, freeMemory = 0;
};
struct GpuInfo {
  bool available = false;
  std::string reason;
  std::vector<GpuDevice> devices;
};
struct EngineConfig {};
class Backend { public: virtual ~Backend() = default; };
struct DeviceError : std::runtime_error { using std::runtime_error::runtime_error; };
GpuInfo queryCudaDevices();
std::unique_ptr<Backend> makeCudaBackend(const EngineConfig&);
}  // namespace kmfleet
#endif
