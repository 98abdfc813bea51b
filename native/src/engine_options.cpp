#include "engine_options.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "engine_runner.h"

namespace kmfleet {
namespace {

[[noreturn]] void throwJs(Napi::Env env, ErrorCode code, const std::string& msg) { throw makeJsError(env, code, msg); }

// prefix: how the field is named in errors ("cuda." for the CudaOptions object's)
std::int64_t intOption(Napi::Env env, const Napi::Object& o, const char* key, std::int64_t dflt, bool required,
                       const std::string& prefix = "") {
  const std::string name = prefix + key;
  Napi::Value v = o.Get(key);
  if (v.IsUndefined() || v.IsNull()) {
    if (required) throwJs(env, ErrorCode::InvalidArgument, name + " is required");
    return dflt;
  }
  if (!v.IsNumber()) throwJs(env, ErrorCode::InvalidArgument, name + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9007199254740991.0)
    throwJs(env, ErrorCode::InvalidArgument, name + " must be an integer, got " + std::to_string(d));
  return static_cast<std::int64_t>(d);
}

std::string stringOption(Napi::Env env, const Napi::Object& o, const char* key, const char* dflt,
                         std::initializer_list<const char*> allowed, const std::string& prefix = "") {
  const std::string name = prefix + key;
  Napi::Value v = o.Get(key);
  std::string s = dflt ? dflt : "";
  if (!v.IsUndefined() && !v.IsNull()) {
    if (!v.IsString()) throwJs(env, ErrorCode::InvalidArgument, name + " must be a string");
    s = v.As<Napi::String>().Utf8Value();
  } else if (!dflt) {
    throwJs(env, ErrorCode::InvalidArgument, name + " is required");
  }
  std::string list;
  for (const char* a : allowed) {
    if (s == a) return s;
    list += std::string(list.empty() ? "" : ", ") + "'" + a + "'";
  }
  throwJs(env, ErrorCode::InvalidArgument, name + " must be one of " + list + ", got '" + s + "'");
}

// The `cuda` sub-object (CudaOptions): every field optional, names prefixed "cuda." in errors.
CudaSettings parseCuda(Napi::Env env, const Napi::Value& value) {
  CudaSettings c;
  if (value.IsUndefined() || value.IsNull()) return c;
  if (!value.IsObject()) throwJs(env, ErrorCode::InvalidArgument, "cuda must be an object");
  const Napi::Object o = value.As<Napi::Object>();
  c.portableKernel = stringOption(env, o, "assignKernel", "auto", {"auto", "portable"}, "cuda.") == "portable";
  const std::int64_t smem = intOption(env, o, "sharedMemoryLimit", 0, false, "cuda.");
  if (smem < 0 || smem > (1 << 30))
    throwJs(env, ErrorCode::InvalidArgument, "cuda.sharedMemoryLimit must be >= 0 bytes, got " + std::to_string(smem));
  c.sharedMemoryLimit = static_cast<int>(smem);
  c.exactScreen = stringOption(env, o, "exactScreen", "auto", {"auto", "off"}, "cuda.") == "auto";
  const std::string rk = stringOption(env, o, "relativeKeys", "auto", {"auto", "off", "always"}, "cuda.");
  c.relativeKeys = rk == "auto" ? RelativeKeys::Policy : rk == "off" ? RelativeKeys::Off : RelativeKeys::Always;
  const std::int64_t slots = intOption(env, o, "slots", 0, false, "cuda.");  // 0 (or absent): the planner's
  if (slots != 0 && (slots < 2 || slots > 16))
    throwJs(env, ErrorCode::InvalidArgument, "cuda.slots must be 2..16, got " + std::to_string(slots));
  c.slots = static_cast<int>(slots);
  const std::int64_t ahead = intOption(env, o, "residentAhead", 2, false, "cuda.");
  if (ahead < 1 || ahead > 1024)
    throwJs(env, ErrorCode::InvalidArgument, "cuda.residentAhead must be 1..1024, got " + std::to_string(ahead));
  c.residentAhead = static_cast<int>(ahead);
  return c;
}

}  // namespace

EngineConfig parseConfig(Napi::Env env, const Napi::Value& value) {
  if (!value.IsObject()) throwJs(env, ErrorCode::InvalidArgument, "Engine.open needs an options object");
  const Napi::Object o = value.As<Napi::Object>();
  EngineConfig c;
  c.rows = intOption(env, o, "rows", 0, true);
  c.dims = intOption(env, o, "dims", 0, true);
  c.k = intOption(env, o, "k", 0, true);
  c.metric = stringOption(env, o, "metric", nullptr, {"l2", "cosine"}) == "l2" ? Metric::L2 : Metric::Cosine;
  const std::string dt = stringOption(env, o, "dtype", nullptr, {"f32", "f16", "bf16"});
  c.dtype = dt == "f32" ? DType::F32 : dt == "f16" ? DType::F16 : DType::BF16;
  const std::string be = stringOption(env, o, "backend", "auto", {"auto", "cpu", "cuda"});
  c.backend = be == "auto" ? BackendKind::Auto : be == "cpu" ? BackendKind::Cpu : BackendKind::Cuda;
  const std::string pr = stringOption(env, o, "precision", "auto", {"auto", "fp32", "tf32", "bf16", "fp16"});
  c.precision = pr == "auto"   ? Precision::Auto
                : pr == "fp32" ? Precision::FP32
                : pr == "tf32" ? Precision::TF32
                : pr == "bf16" ? Precision::BF16
                               : Precision::FP16;
  c.chunkRows = intOption(env, o, "chunkRows", 0, false);
  if (!o.Get("chunkRows").IsUndefined() && c.chunkRows < 1)
    throwJs(env, ErrorCode::InvalidArgument, "chunkRows must be >= 1, got " + std::to_string(c.chunkRows));
  c.buffers = static_cast<int>(intOption(env, o, "buffers", 0, false));
  if (!o.Get("buffers").IsUndefined() && c.buffers < 1)
    throwJs(env, ErrorCode::InvalidArgument, "buffers must be >= 1, got " + std::to_string(c.buffers));
  c.threads = static_cast<int>(intOption(env, o, "threads", 0, false));
  if (!o.Get("threads").IsUndefined() && c.threads < 1)
    throwJs(env, ErrorCode::InvalidArgument, "threads must be >= 1, got " + std::to_string(c.threads));
  c.memoryBudget = intOption(env, o, "memoryBudget", -1, false);
  if (!o.Get("memoryBudget").IsUndefined() && c.memoryBudget < 0)
    throwJs(env, ErrorCode::InvalidArgument, "memoryBudget must be >= 0, got " + std::to_string(c.memoryBudget));
  c.deviceMemoryLimit = intOption(env, o, "deviceMemory", -1, false);
  if (!o.Get("deviceMemory").IsUndefined() && c.deviceMemoryLimit < 0)
    throwJs(env, ErrorCode::InvalidArgument, "deviceMemory must be >= 0, got " + std::to_string(c.deviceMemoryLimit));
  c.hostMemoryBudget = intOption(env, o, "hostMemoryBudget", -1, false);
  if (!o.Get("hostMemoryBudget").IsUndefined() && c.hostMemoryBudget < 0)
    throwJs(env, ErrorCode::InvalidArgument,
            "hostMemoryBudget must be >= 0, got " + std::to_string(c.hostMemoryBudget));
  c.device = static_cast<int>(intOption(env, o, "device", 0, false));
  const Napi::Value devices = o.Get("devices");
  if (!devices.IsUndefined()) {
    if (!devices.IsArray() || devices.As<Napi::Array>().Length() == 0)
      throwJs(env, ErrorCode::InvalidArgument, "devices must be a non-empty array of CUDA ordinals");
    const Napi::Array a = devices.As<Napi::Array>();
    for (std::uint32_t i = 0; i < a.Length(); ++i) {
      const Napi::Value v = a.Get(i);
      if (!v.IsNumber() || v.As<Napi::Number>().DoubleValue() < 0 ||
          v.As<Napi::Number>().DoubleValue() != static_cast<double>(v.As<Napi::Number>().Int32Value()))
        throwJs(env, ErrorCode::InvalidArgument, "devices[" + std::to_string(i) + "] must be a CUDA ordinal (an integer >= 0)");
      c.devices.push_back(v.As<Napi::Number>().Int32Value());
    }
    c.device = c.devices.front();
    if (c.devices.size() == 1) c.devices.clear();
  }
  c.hostUpdate = stringOption(env, o, "update", "auto", {"auto", "host"}) == "host";
  c.rowBounds = stringOption(env, o, "bounds", "auto", {"auto", "off"}) == "auto";
  c.cuda = parseCuda(env, o.Get("cuda"));
  // The one diagnostics switch (docs/operations.md): the engine's host steps, its promise hops and, on CUDA, the
  // device time of each pass on stderr. Read when an engine opens.
  c.stats = std::getenv("KMFLEET_ENGINE_STATS") != nullptr;
  return c;
}

const char* precisionName(Precision p) {
  switch (p) {
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
    default: return "fp32";
  }
}

}  // namespace kmfleet
