// N-API module entry (placeholder until the engine binding lands): gpuInfo() only.
#include <napi.h>

#include "backend.h"
#ifdef KMFLEET_WITH_CUDA
#include "cuda_bridge.h"
#endif

namespace {

Napi::Value GpuInfoJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  kmfleet::GpuInfo gi;
#ifdef KMFLEET_WITH_CUDA
  gi = kmfleet::queryCudaDevices();
#else
  gi.available = false;
  gi.reason = "built without CUDA";
#endif
  Napi::Object out = Napi::Object::New(env);
  out.Set("available", gi.available);
  if (!gi.available) out.Set("reason", gi.reason);
  Napi::Array devices = Napi::Array::New(env, gi.devices.size());
  for (size_t i = 0; i < gi.devices.size(); ++i) {
    const auto& d = gi.devices[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("ordinal", d.ordinal);
    o.Set("name", d.name);
    o.Set("computeCapability", d.computeCapability);
    o.Set("totalMemory", static_cast<double>(d.totalMemory));
    o.Set("freeMemory", static_cast<double>(d.freeMemory));
    devices.Set(static_cast<uint32_t>(i), o);
  }
  out.Set("devices", devices);
  return out;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("gpuInfo", Napi::Function::New(env, GpuInfoJs, "gpuInfo"));
  return exports;
}

}  // namespace

NODE_API_MODULE(kmfleet_native, Init)
