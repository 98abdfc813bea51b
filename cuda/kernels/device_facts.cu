#include "device_facts.cuh"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>

namespace kmfleet {
namespace cuda {
namespace {

std::mutex& factsMutex() {
  static std::mutex mu;
  return mu;
}

// -1 when the runtime can't name the current device (the caller then gets the fallbacks and nothing is cached)
int currentOrdinal() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return dev;
}

}  // namespace

DeviceFacts currentDeviceFacts() {
  const int dev = currentOrdinal();
  if (dev < 0) return {};
  static std::map<int, DeviceFacts> known;
  std::lock_guard<std::mutex> lock(factsMutex());
  auto it = known.find(dev);
  if (it != known.end()) return it->second;
  DeviceFacts f;
  int major = 0, minor = 0, sms = 0, optin = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess) {
    f.hopper = major == 9 && minor == 0;
    f.sms = sms > 0 ? sms : f.sms;
    f.smemOptin = optin > 0 ? optin : f.smemOptin;
  } else {
    cudaGetLastError();
  }
  known.emplace(dev, f);
  return f;
}

void allowDynamicSmem(const void* kernel, std::size_t bytes) {
  if (bytes <= 48 * 1024) return;
  const int dev = currentOrdinal();
  static std::map<std::pair<const void*, int>, std::size_t> allowed;
  std::lock_guard<std::mutex> lock(factsMutex());
  std::size_t& now = allowed[{kernel, dev}];
  if (bytes <= now && dev >= 0) return;
  // a failure (more than the device has) surfaces as the launch's own error, where the caller checks
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) ==
      cudaSuccess)
    now = bytes;
  else
    cudaGetLastError();
}

int residentBlocksPerSm(const void* kernel, int threads, std::size_t smem) {
  const int dev = currentOrdinal();
  static std::map<std::tuple<const void*, int, int, std::size_t>, int> known;
  std::lock_guard<std::mutex> lock(factsMutex());
  const auto key = std::make_tuple(kernel, dev, threads, smem);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  int perSm = 1;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, threads, smem) != cudaSuccess) {
    cudaGetLastError();
    perSm = 1;
  }
  perSm = perSm > 0 ? perSm : 1;
  if (dev >= 0) known.emplace(key, perSm);
  return perSm;
}

}  // namespace cuda
}  // namespace kmfleet
