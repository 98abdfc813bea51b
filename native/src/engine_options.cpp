#include "engine_options.h"

#include <cmath>
#include <string>

#include "engine_runner.h"

namespace kmfleet {
namespace {

[[noreturn]] void throwJs(Napi::Env env, ErrorCode code, const std::string& msg) { throw makeJsError(env, code, msg); }

std::int64_t intOption(Napi::Env env, const Napi::Object& o, const char* name, std::int64_t dflt, bool required) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined() || v.IsNull()) {
    if (required) throwJs(env, ErrorCode::InvalidArgument, std::string(name) + " is required");
    return dflt;
  }
  if (!v.IsNumber()) throwJs(env, ErrorCode::InvalidArgument, std::string(name) + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9007199254740991.0)
    throwJs(env, ErrorCode::InvalidArgument, std::string(name) + " must be an integer, got " + std::to_string(d));
  return static_cast<std::int64_t>(d);
}

std::string stringOption(Napi::Env env, const Napi::Object& o, const char* name, const char* dflt,
                         std::initializer_list<const char*> allowed) {
  Napi::Value v = o.Get(name);
  std::string s = dflt ? dflt : "";
  if (!v.IsUndefined() && !v.IsNull()) {
    if (!v.IsString()) throwJs(env, ErrorCode::InvalidArgument, std::string(name) + " must be a string");
    s = v.As<Napi::String>().Utf8Value();
  } else if (!dflt) {
    throwJs(env, ErrorCode::InvalidArgument, std::string(name) + " is required");
  }
  std::string list;
  for (const char* a : allowed) {
    if (s == a) return s;
    list += std::string(list.empty() ? "" : ", ") + "'" + a + "'";
  }
  throwJs(env, ErrorCode::InvalidArgument, std::string(name) + " must be one of " + list + ", got '" + s + "'");
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
  c.device = static_cast<int>(intOption(env, o, "device", 0, false));
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
