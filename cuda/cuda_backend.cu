// makeCudaBackend(): the CUDA implementation of the engine's Backend (stub until the kernels land).
#include "bridge.h"

namespace kmfleet {

std::unique_ptr<Backend> makeCudaBackend(const EngineConfig&) {
  throw DeviceError("CUDA backend not implemented yet");
}

}  // namespace kmfleet
