// What launch plans need to know of the device a kernel is about to run on, asked of the driver once per device.
//
// Per device ordinal, not per process: a worker process drives several GPUs (one engine each, from several threads),
// and a kernel's dynamic shared-memory limit is an attribute of the function in one device's context, so raising it
// on device 0 leaves it at 48 KB on device 1.
#pragma once
#include <cstddef>

namespace kmfleet {
namespace cuda {

struct DeviceFacts {
  bool hopper = false;    // compute capability 9.0 exactly: sm_90a machine code runs there only
  int sms = 108;          // multiprocessors (the fallback only if the driver can't say)
  int smemOptin = 99 * 1024;  // largest dynamic shared memory a block may opt in to
};

// The current device's facts (cudaGetDevice), cached per ordinal. Never throws: a failed query gives the fallbacks.
DeviceFacts currentDeviceFacts();

// Lets `kernel` launch with `bytes` of dynamic shared memory on the current device (cudaFuncSetAttribute once per
// kernel, device and larger size; nothing to do up to the default 48 KB).
void allowDynamicSmem(const void* kernel, std::size_t bytes);

// cudaOccupancyMaxActiveBlocksPerMultiprocessor on the current device, cached per kernel, device, block size and
// shared memory (at least 1).
int residentBlocksPerSm(const void* kernel, int threads, std::size_t smem);

}  // namespace cuda
}  // namespace kmfleet
