// The N-API binding (node-addon-api, napi 8): gpuInfo(), open(options) → Promise<NativeEngine>, and the
// NativeEngine methods that native/index.ts wraps. Heavy calls run on the engine thread (engine_runner.h);
// errors carry a `code` (and `row`) that native/index.ts turns into its error classes.
#include <napi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "engine.h"
#include "host_memory.h"
#include "engine_options.h"
#include "engine_runner.h"
#ifdef KMFLEET_WITH_CUDA
#include "cuda_bridge.h"
#endif

namespace kmfleet {
namespace {

[[noreturn]] void throwJs(Napi::Env env, ErrorCode code, const std::string& msg) { throw makeJsError(env, code, msg); }
[[noreturn]] void throwJs(Napi::Env env, const EngineError& e) { throw makeJsError(env, e.code(), e.what(), e.row()); }

// ---- NativeEngine -----------------------------------------------------------------------------------------

// Keeps the rows of a loadRows call alive while the engine thread reads them. Reset in the call's settle (the JS
// thread); a task dropped while the environment shuts down leaks the reference rather than touch V8 off its thread.
struct KeepAlive {
  Napi::ObjectReference ref;
  ~KeepAlive() {
    if (!ref.IsEmpty()) ref.SuppressDestruct();
  }
};

// Owned by the wrapper and by every external Buffer handed out, so buffer memory outlives a GC'd wrapper.
struct EngineHolder {
  std::unique_ptr<Engine> engine;
};

class NativeEngine : public Napi::ObjectWrap<NativeEngine> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeEngine",
                       {InstanceAccessor<&NativeEngine::PlanJs>("plan"),
                        InstanceMethod<&NativeEngine::Buffer>("buffer"),
                        InstanceMethod<&NativeEngine::SetCentroids>("setCentroids"),
                        InstanceMethod<&NativeEngine::Centroids>("centroids"),
                        InstanceMethod<&NativeEngine::ReadCentroids>("readCentroids"),
                        InstanceMethod<&NativeEngine::InitKmeansPlusPlus>("initKmeansPlusPlus"),
                        InstanceAccessor<&NativeEngine::LoadsRows>("loadsRows"),
                        InstanceMethod<&NativeEngine::LoadRows>("loadRows"),
                        InstanceMethod<&NativeEngine::BeginPass>("beginPass"),
                        InstanceMethod<&NativeEngine::Feed>("feed"),
                        InstanceMethod<&NativeEngine::FeedFile>("feedFile"),
                        InstanceMethod<&NativeEngine::FinishPass>("finishPass"),
                        InstanceMethod<&NativeEngine::Labels>("labels"),
                        InstanceMethod<&NativeEngine::Distances>("distances"),
                        InstanceMethod<&NativeEngine::Cancel>("cancel"),
                        InstanceMethod<&NativeEngine::Close>("close")});
  }

  explicit NativeEngine(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeEngine>(info) {
    auto* holder = info[0].As<Napi::External<std::shared_ptr<EngineHolder>>>().Data();
    holder_ = *holder;
    runner_ = std::make_unique<EngineRunner>(info.Env(), holder_->engine && holder_->engine->config().stats);
  }

  ~NativeEngine() override {
    // Collected without close(): stop the thread; the engine's memory goes when the last Buffer over it does.
    if (runner_) {
      if (holder_->engine) holder_->engine->cancel();
      runner_->stop();
    }
  }

 private:
  Engine& engine(Napi::Env env) {
    if (!holder_ || !holder_->engine) throwJs(env, ErrorCode::InvalidArgument, "the engine is closed");
    return *holder_->engine;
  }

  Napi::Value rejected(Napi::Env env, const Napi::Error& e) {
    auto d = Napi::Promise::Deferred::New(env);
    d.Reject(e.Value());
    return d.Promise();
  }

  Napi::Value PlanJs(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const Plan& p = engine(env).plan();
    Napi::Object o = Napi::Object::New(env);
    o.Set("backend", p.backend == BackendKind::Cuda ? "cuda" : "cpu");
    o.Set("device", p.device);
    o.Set("precision", precisionName(p.precision));
    o.Set("chunkRows", static_cast<double>(p.chunkRows));
    o.Set("buffers", p.buffers);
    // on the device(s), and in host memory (the engine's host tier and the backend's own)
    o.Set("residentRows", static_cast<double>(p.deviceRows >= 0 ? p.deviceRows : p.residentRows));
    o.Set("hostRows", static_cast<double>(p.hostRows + p.backendHostRows));
    o.Set("rowBytes", static_cast<double>(p.rowBytes));
    o.Set("storedRowBytes", static_cast<double>(p.storedRowBytes));
    o.Set("keptDtype", p.keptDtype == DType::F32 ? "f32" : p.keptDtype == DType::F16 ? "f16" : "bf16");
    return o;
  }

  Napi::Value Buffer(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Engine& e = engine(env);
    const int index = static_cast<int>(info[0].ToNumber().Int32Value());
    try {
      void* p = e.hostBuffer(index);
      if (buffers_.size() < static_cast<std::size_t>(e.plan().buffers)) buffers_.resize(e.plan().buffers);
      auto& ref = buffers_[static_cast<std::size_t>(index)];
      if (ref.IsEmpty()) {
        auto* keep = new std::shared_ptr<EngineHolder>(holder_);
        Napi::Buffer<std::uint8_t> b = Napi::Buffer<std::uint8_t>::New(
            env, static_cast<std::uint8_t*>(p), e.bufferBytes(),
            [](Napi::Env, std::uint8_t*, std::shared_ptr<EngineHolder>* k) { delete k; }, keep);
        ref = Napi::Persistent(b);
      }
      return ref.Value();
    } catch (const EngineError& err) {
      throwJs(env, err);
    }
  }

  Napi::Value SetCentroids(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Engine& e = engine(env);
    if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
      throwJs(env, ErrorCode::InvalidArgument, "setCentroids needs a Float32Array of k*dims values");
    Napi::Float32Array a = info[0].As<Napi::Float32Array>();
    try {
      e.setCentroids(a.Data(), a.ElementLength());
    } catch (const EngineError& err) {
      throwJs(env, err);
    }
    return env.Undefined();
  }

  static std::size_t centroidValues(const EngineConfig& c) {
    return static_cast<std::size_t>(c.k) * static_cast<std::size_t>(c.dims);
  }

  // Memory for a copy of the centroids, handed to JS by adoptCentroids. Not Float32Array::New: V8 hands out fresh
  // zero-filled memory for it, and at K×D = 1M the page faults and the zeroing (~1 ms on the GPU machine's host) cost
  // more than the copy. The job's driver reads the centroids after every iteration (its checkpoint): malloc reuses
  // the memory of arrays already collected, and the copy writes every value, so nothing needs zeroing.
  static float* centroidStorage(const EngineConfig& c) {
    const std::size_t n = centroidValues(c);
    float* data = static_cast<float*>(std::malloc(std::max<std::size_t>(n, 1) * sizeof(float)));
    if (data == nullptr) throw EngineError(ErrorCode::OutOfMemory, "no host memory for the centroids (" + std::to_string(n * 4) + " bytes)");
    return data;
  }

  // centroidStorage's memory as a Float32Array that frees it when collected
  static Napi::Float32Array adoptCentroids(Napi::Env env, float* data, std::size_t n) {
    const std::int64_t bytes = static_cast<std::int64_t>(n * sizeof(float));
    Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(env, data, n * sizeof(float), [](Napi::Env fenv, void* p, std::int64_t* size) {
      std::free(p);
      Napi::MemoryManagement::AdjustExternalMemory(fenv, -*size);
      delete size;
    }, new std::int64_t(bytes));
    Napi::MemoryManagement::AdjustExternalMemory(env, bytes);  // so that the collector knows what these arrays hold
    return Napi::Float32Array::New(env, n, buffer, 0);
  }

  Napi::Value Centroids(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    try {
      Engine& e = engine(env);
      float* data = centroidStorage(e.config());
      try {
        e.copyCentroids(data);  // one copy, from the engine or the backend's last device update; throws if none
      } catch (...) {
        std::free(data);
        throw;
      }
      return adoptCentroids(env, data, centroidValues(e.config()));
    } catch (const EngineError& err) {
      throwJs(env, err);
    }
  }

  // The centroids as the engine thread finds them behind the work queued before: called between beginPass and
  // finishPass, the pass's own centroids (its update comes in finishPass's task), copied while its device work runs.
  Napi::Value ReadCentroids(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    try {
      Engine& e = engine(env);
      e.admitReadCentroids();
      // the copy's memory, freed here unless handed to JS (also when the environment shuts down unsettled)
      struct Storage {
        float* data = nullptr;
        ~Storage() { std::free(data); }
      };
      auto storage = std::make_shared<Storage>();
      storage->data = centroidStorage(e.config());
      Engine* ep = &e;
      const std::size_t n = centroidValues(e.config());
      return runner_->submit(
          env, [ep, storage](Outcome&) { ep->copyCentroids(storage->data); },
          [storage, n](Napi::Env env, const Outcome& out) -> Napi::Value {
            if (!out.ok) return env.Undefined();
            Napi::Float32Array a = adoptCentroids(env, storage->data, n);
            storage->data = nullptr;
            return a;
          });
    } catch (const Napi::Error& err) {
      return rejected(env, err);
    } catch (const EngineError& err) {
      return rejected(env, makeJsError(env, err.code(), err.what(), err.row()));
    }
  }

  Napi::Value InitKmeansPlusPlus(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    try {
      Engine& e = engine(env);
      const EngineConfig& cfg = e.config();
      if (!info[0].IsTypedArray())
        throwJs(env, ErrorCode::InvalidArgument, "initKmeansPlusPlus needs a Buffer (rows in the engine dtype) or a Float32Array");
      Napi::TypedArray ta = info[0].As<Napi::TypedArray>();
      const bool f32 = ta.TypedArrayType() == napi_float32_array;
      if (!f32 && ta.TypedArrayType() != napi_uint8_array)
        throwJs(env, ErrorCode::InvalidArgument, "initKmeansPlusPlus needs a Buffer (rows in the engine dtype) or a Float32Array");
      const DType dtype = f32 ? DType::F32 : cfg.dtype;
      if (!info[1].IsNumber() || !info[2].IsNumber())
        throwJs(env, ErrorCode::InvalidArgument, "initKmeansPlusPlus(sample, sampleRows, seed): sampleRows and seed must be numbers");
      const double rowsD = info[1].As<Napi::Number>().DoubleValue(), seedD = info[2].As<Napi::Number>().DoubleValue();
      if (!(rowsD >= 1) || rowsD != std::floor(rowsD))
        throwJs(env, ErrorCode::InvalidArgument, "sampleRows must be a positive integer, got " + std::to_string(rowsD));
      if (!(seedD >= 0) || seedD != std::floor(seedD) || seedD > 9007199254740991.0)
        throwJs(env, ErrorCode::InvalidArgument, "seed must be a non-negative integer, got " + std::to_string(seedD));
      const std::int64_t rows = static_cast<std::int64_t>(rowsD);
      const std::size_t need = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cfg.dims) * dtypeBytes(dtype);
      const std::size_t have = ta.ByteLength();
      if (have < need)
        throwJs(env, ErrorCode::InvalidArgument,
                "the sample has " + std::to_string(have) + " bytes, sampleRows=" + std::to_string(rows) + " × dims=" +
                    std::to_string(cfg.dims) + " × " + std::to_string(dtypeBytes(dtype)) + " bytes needs " +
                    std::to_string(need));
      const std::uint64_t gen = e.admitInit();
      auto copy = std::make_shared<std::vector<std::uint8_t>>(
          static_cast<const std::uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset(),
          static_cast<const std::uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset() + need);
      Engine* ep = &e;
      const std::uint64_t seed = static_cast<std::uint64_t>(seedD);
      return runner_->submit(
          env, [ep, gen, copy, dtype, rows, seed](Outcome&) { ep->runInit(gen, copy->data(), dtype, rows, seed); },
          nullptr);
    } catch (const Napi::Error& err) {
      return rejected(env, err);
    } catch (const EngineError& err) {
      return rejected(env, makeJsError(env, err.code(), err.what(), err.row()));
    }
  }

  Napi::Value LoadsRows(const Napi::CallbackInfo& info) {
    // false once closed: nothing can be loaded any more
    return Napi::Boolean::New(info.Env(), holder_ && holder_->engine && runner_ && holder_->engine->loadsRows());
  }

  // loadRows(rows, firstRow, rowCount) → Promise<rows held from row 0>. `rows`: a Buffer or typed array whose first
  // rowCount × rowBytes bytes are the rows, read on the engine thread (the caller must not change them until the
  // Promise settles; a reference keeps them from being collected).
  Napi::Value LoadRows(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    try {
      Engine& e = engine(env);
      if (!info[0].IsTypedArray())
        throwJs(env, ErrorCode::InvalidArgument, "loadRows(rows, firstRow, rowCount) needs a Buffer of rows in the engine dtype");
      for (int i = 1; i < 3; ++i)
        if (!info[i].IsNumber()) throwJs(env, ErrorCode::InvalidArgument, "loadRows(rows, firstRow, rowCount): firstRow and rowCount must be integers");
      const double f = info[1].As<Napi::Number>().DoubleValue(), n = info[2].As<Napi::Number>().DoubleValue();
      if (f != std::floor(f) || n != std::floor(n) || !std::isfinite(f) || !std::isfinite(n))
        throwJs(env, ErrorCode::InvalidArgument, "loadRows(rows, firstRow, rowCount): firstRow and rowCount must be integers");
      const std::int64_t first = static_cast<std::int64_t>(f), count = static_cast<std::int64_t>(n);
      Napi::TypedArray ta = info[0].As<Napi::TypedArray>();
      const double need = n * static_cast<double>(e.plan().rowBytes);
      if (static_cast<double>(ta.ByteLength()) < need)
        throwJs(env, ErrorCode::InvalidArgument,
                "loadRows: the rows have " + std::to_string(ta.ByteLength()) + " bytes, rowCount=" + std::to_string(count) +
                    " × " + std::to_string(e.plan().rowBytes) + " bytes per row needs " + std::to_string(static_cast<std::int64_t>(need)));
      const std::uint64_t gen = e.admitLoad(first, count);
      const void* data = static_cast<const std::uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
      auto keep = std::make_shared<KeepAlive>();
      keep->ref = Napi::Persistent(info[0].As<Napi::Object>());
      auto held = std::make_shared<std::int64_t>(0);
      Engine* ep = &e;
      return runner_->submit(
          env, [ep, gen, data, first, count, held](Outcome&) { *held = ep->runLoad(gen, data, first, count); },
          [keep, held](Napi::Env env, const Outcome&) -> Napi::Value {
            keep->ref.Reset();
            return Napi::Number::New(env, static_cast<double>(*held));
          });
    } catch (const Napi::Error& err) {
      return rejected(env, err);
    } catch (const EngineError& err) {
      return rejected(env, makeJsError(env, err.code(), err.what(), err.row()));
    }
  }

  Napi::Value BeginPass(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Engine& e = engine(env);
    const std::string mode = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
    if (mode != "fit" && mode != "assign")
      throwJs(env, ErrorCode::InvalidArgument, "beginPass mode must be 'fit' or 'assign', got '" + mode + "'");
    bool distances = false, variance = true;
    std::int64_t firstRow = -1;
    PassChain chain;
    if (info[1].IsObject()) {
      Napi::Value d = info[1].As<Napi::Object>().Get("distances");
      distances = d.IsBoolean() && d.As<Napi::Boolean>().Value();
      Napi::Value v = info[1].As<Napi::Object>().Get("dataVariance");
      if (v.IsBoolean()) variance = v.As<Napi::Boolean>().Value();
      Napi::Value f = info[1].As<Napi::Object>().Get("firstRow");
      if (!f.IsUndefined()) {
        const double r = f.IsNumber() ? f.As<Napi::Number>().DoubleValue() : -1;
        if (!(r >= 0 && r <= static_cast<double>(e.config().rows) && r == std::floor(r)))
          throwJs(env, ErrorCode::InvalidArgument,
                  "beginPass firstRow must be an integer in [0, " + std::to_string(e.config().rows) + "]");
        firstRow = static_cast<std::int64_t>(r);
      }
      Napi::Value c = info[1].As<Napi::Object>().Get("chain");
      if (!c.IsUndefined()) chain = parseChain(env, c);
    }
    const PassMode pm = mode == "fit" ? PassMode::Fit : PassMode::Assign;
    try {
      bool adopted = false;
      const std::uint64_t gen = e.admitBegin(pm, distances, variance, firstRow, adopted);
      if (adopted) return env.Undefined();  // the engine began this pass itself (PassResult.chained)
      Engine* ep = &e;
      runner_->submit(env, [ep, gen, pm, distances, variance, firstRow, chain](Outcome&) {
        ep->runBegin(gen, pm, distances, variance, firstRow, chain);
      }, nullptr, false);
    } catch (const EngineError& err) {
      throwJs(env, err);
    }
    return env.Undefined();
  }

  // beginPass's `chain`: { tol, tolReassign, variance (NaN: this pass's own), passesLeft } (PassChain)
  static PassChain parseChain(Napi::Env env, Napi::Value v) {
    const auto bad = [&](const std::string& what) {
      throwJs(env, ErrorCode::InvalidArgument, "beginPass chain." + what);
    };
    if (!v.IsObject())
      throwJs(env, ErrorCode::InvalidArgument, "beginPass chain must be an object { tol, tolReassign, variance, passesLeft }");
    Napi::Object o = v.As<Napi::Object>();
    const auto num = [&](const char* key) {
      Napi::Value x = o.Get(key);
      if (!x.IsNumber()) bad(std::string(key) + " must be a number");
      return x.As<Napi::Number>().DoubleValue();
    };
    PassChain c;
    c.enabled = true;
    c.tol = num("tol");
    c.tolReassign = num("tolReassign");
    c.variance = num("variance");
    const double left = num("passesLeft");
    if (!(c.tol >= 0) || !std::isfinite(c.tol)) bad("tol must be a finite number >= 0");
    if (!(c.tolReassign >= 0) || !std::isfinite(c.tolReassign)) bad("tolReassign must be a finite number >= 0");
    if (!std::isnan(c.variance) && !(c.variance >= 0 && std::isfinite(c.variance)))
      bad("variance must be NaN (this pass's own) or a finite number >= 0");
    if (left != std::floor(left) || !std::isfinite(left)) bad("passesLeft must be an integer");
    c.passesLeft = static_cast<std::int64_t>(left);
    return c;
  }

  Napi::Value Feed(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    try {
      Engine& e = engine(env);
      for (int i = 0; i < 3; ++i)
        if (!info[i].IsNumber()) throwJs(env, ErrorCode::InvalidArgument, "feed(buffer, firstRow, rowCount) needs three integers");
      const double b = info[0].As<Napi::Number>().DoubleValue(), f = info[1].As<Napi::Number>().DoubleValue(),
                   n = info[2].As<Napi::Number>().DoubleValue();
      if (b != std::floor(b) || f != std::floor(f) || n != std::floor(n) || !std::isfinite(f) || !std::isfinite(n))
        throwJs(env, ErrorCode::InvalidArgument, "feed(buffer, firstRow, rowCount) needs three integers");
      const int buffer = static_cast<int>(b);
      const std::int64_t first = static_cast<std::int64_t>(f), count = static_cast<std::int64_t>(n);
      const std::uint64_t gen = e.admitFeed(buffer, first, count);
      Engine* ep = &e;
      auto holder = holder_;
      return runner_->submit(
          env, [ep, gen, buffer, first, count](Outcome&) { ep->runFeed(gen, buffer, first, count); },
          [holder, buffer](Napi::Env env, const Outcome&) -> Napi::Value {
            if (holder->engine) holder->engine->feedSettled(buffer);
            return env.Undefined();
          });
    } catch (const Napi::Error& err) {
      return rejected(env, err);
    } catch (const EngineError& err) {
      return rejected(env, makeJsError(env, err.code(), err.what(), err.row()));
    }
  }

  // feedFile(fd, byteOffset, firstRow, rowCount): rows the engine reads itself from an open file (file_rows.h)
  Napi::Value FeedFile(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    try {
      Engine& e = engine(env);
      double v[4];
      for (int i = 0; i < 4; ++i) {
        v[i] = info[i].IsNumber() ? info[i].As<Napi::Number>().DoubleValue() : -1;
        if (v[i] < 0 || v[i] != std::floor(v[i]) || !std::isfinite(v[i]))
          throwJs(env, ErrorCode::InvalidArgument, "feedFile(fd, byteOffset, firstRow, rowCount) needs four integers >= 0");
      }
      const int fd = static_cast<int>(v[0]);
      const std::int64_t offset = static_cast<std::int64_t>(v[1]), first = static_cast<std::int64_t>(v[2]),
                         count = static_cast<std::int64_t>(v[3]);
      const std::uint64_t gen = e.admitFeedFile(first, count);
      Engine* ep = &e;
      return runner_->submit(
          env, [ep, gen, fd, offset, first, count](Outcome&) { ep->runFeedFile(gen, fd, offset, first, count); },
          [](Napi::Env env, const Outcome&) -> Napi::Value { return env.Undefined(); });
    } catch (const Napi::Error& err) {
      return rejected(env, err);
    } catch (const EngineError& err) {
      return rejected(env, makeJsError(env, err.code(), err.what(), err.row()));
    }
  }

  Napi::Value FinishPass(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    try {
      Engine& e = engine(env);
      const std::uint64_t gen = e.admitFinish();
      Engine* ep = &e;
      auto holder = holder_;
      auto result = std::make_shared<PassResult>();
      return runner_->submit(
          env, [ep, gen, result](Outcome&) { *result = ep->runFinish(gen); },
          [holder, result](Napi::Env env, const Outcome& out) -> Napi::Value {
            if (holder->engine) holder->engine->finishSettled(out.ok, out.ok ? result.get() : nullptr);
            if (!out.ok) return env.Undefined();
            Napi::Object o = Napi::Object::New(env);
            o.Set("mode", result->mode == PassMode::Fit ? "fit" : "assign");
            o.Set("inertia", result->inertia);
            o.Set("reassigned", static_cast<double>(result->reassigned));
            o.Set("shift", result->shift);
            o.Set("emptyReseeded", static_cast<double>(result->emptyReseeded));
            Napi::Float64Array counts = Napi::Float64Array::New(env, result->counts.size());
            if (!result->counts.empty()) std::memcpy(counts.Data(), result->counts.data(), result->counts.size() * 8);
            o.Set("counts", counts);
            o.Set("dataVariance", result->dataVariance);
            o.Set("ms", result->ms);
            o.Set("update", result->mode != PassMode::Fit ? "none" : result->updatedOnDevice ? "device" : "host");
            o.Set("chained", result->chained);
            o.Set("begunByEngine", result->begunByEngine);
            Napi::Object rows = Napi::Object::New(env);
            rows.Set("resident", static_cast<double>(result->residentRowsUsed));
            rows.Set("host", static_cast<double>(result->hostRowsUsed));
            rows.Set("fed", static_cast<double>(result->fedRows));
            o.Set("rowsFrom", rows);
            o.Set("rowsSettled", static_cast<double>(result->rowsSettled));
            o.Set("labelsDown", result->labelsAsChanges ? "changed" : "every");
            o.Set("heldRows", static_cast<double>(result->heldRows));
            o.Set("hostRowsHeld", static_cast<double>(result->hostRowsHeld));
            if (!result->hostTierWarning.empty()) o.Set("hostTierWarning", result->hostTierWarning);
            return o;
          });
    } catch (const Napi::Error& err) {
      return rejected(env, err);
    } catch (const EngineError& err) {
      return rejected(env, makeJsError(env, err.code(), err.what(), err.row()));
    }
  }

  void range(const Napi::CallbackInfo& info, std::int64_t rows, std::int64_t& first, std::int64_t& count) {
    Napi::Env env = info.Env();
    first = 0;
    count = -1;
    if (!info[0].IsUndefined()) {
      const double f = info[0].ToNumber().DoubleValue();
      if (f != std::floor(f) || !std::isfinite(f)) throwJs(env, ErrorCode::InvalidArgument, "firstRow must be an integer");
      first = static_cast<std::int64_t>(f);
    }
    if (!info[1].IsUndefined()) {
      const double c = info[1].ToNumber().DoubleValue();
      if (c != std::floor(c) || !std::isfinite(c)) throwJs(env, ErrorCode::InvalidArgument, "count must be an integer");
      count = static_cast<std::int64_t>(c);
    } else {
      count = rows - first;
    }
  }

  Napi::Value Labels(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Engine& e = engine(env);
    std::int64_t first, count;
    range(info, e.config().rows, first, count);
    try {
      std::vector<std::int32_t> v = e.labels(first, count);
      Napi::Int32Array out = Napi::Int32Array::New(env, v.size());
      if (!v.empty()) std::memcpy(out.Data(), v.data(), v.size() * 4);
      return out;
    } catch (const EngineError& err) {
      throwJs(env, err);
    }
  }

  Napi::Value Distances(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Engine& e = engine(env);
    std::int64_t first, count;
    range(info, e.config().rows, first, count);
    try {
      std::vector<float> v = e.distances(first, count);
      Napi::Float32Array out = Napi::Float32Array::New(env, v.size());
      if (!v.empty()) std::memcpy(out.Data(), v.data(), v.size() * 4);
      return out;
    } catch (const EngineError& err) {
      throwJs(env, err);
    }
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    if (holder_ && holder_->engine) holder_->engine->cancel();
    return info.Env().Undefined();
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!runner_) return env.Undefined();
    if (holder_->engine) holder_->engine->cancel();
    runner_->stop();  // queued work is rejected as cancelled; its Promises settle later
    runner_.reset();
    // Detach the Buffers handed out: JS can no longer reach the memory, so it can be freed now.
    bool allDetached = true;
    for (auto& ref : buffers_) {
      if (ref.IsEmpty()) continue;
      try {
        ref.Value().ArrayBuffer().Detach();
      } catch (const Napi::Error&) {
        allDetached = false;
      }
      ref.Reset();
    }
    if (allDetached) holder_->engine.reset();
    return env.Undefined();
  }

  std::shared_ptr<EngineHolder> holder_;
  std::unique_ptr<EngineRunner> runner_;
  std::vector<Napi::Reference<Napi::Buffer<std::uint8_t>>> buffers_;
};

// ---- module functions -----------------------------------------------------------------------------------

struct AddonData {
  Napi::FunctionReference engineClass;
};

class OpenWorker : public Napi::AsyncWorker {
 public:
  OpenWorker(Napi::Env env, const EngineConfig& cfg)
      : Napi::AsyncWorker(env, "kmfleet-open"), cfg_(cfg), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      holder_ = std::make_shared<EngineHolder>();
      holder_->engine = std::make_unique<Engine>(cfg_);
    } catch (const EngineError& e) {
      out_.fail(e.code(), e.what(), e.row());
    } catch (const std::bad_alloc&) {
      out_.fail(ErrorCode::OutOfMemory, "out of host memory while creating the engine");
    } catch (const std::exception& e) {
      out_.fail(ErrorCode::Device, std::string("internal error: ") + e.what());
    }
  }
  void OnOK() override {
    Napi::Env env = Env();
    if (!out_.ok) {
      deferred_.Reject(makeJsError(env, out_.code, out_.message, out_.row).Value());
      return;
    }
    try {
      AddonData* data = env.GetInstanceData<AddonData>();
      Napi::Object obj = data->engineClass.New({Napi::External<std::shared_ptr<EngineHolder>>::New(env, &holder_)});
      deferred_.Resolve(obj);
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    }
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  EngineConfig cfg_;
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<EngineHolder> holder_;
  Outcome out_;
};

Napi::Value Open(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    const EngineConfig cfg = parseConfig(env, info[0]);
    auto* w = new OpenWorker(env, cfg);
    Napi::Promise p = w->Promise();
    w->Queue();
    return p;
  } catch (const Napi::Error& e) {
    auto d = Napi::Promise::Deferred::New(env);
    d.Reject(e.Value());
    return d.Promise();
  }
}

Napi::Value GpuInfoJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  GpuInfo gi;
#ifdef KMFLEET_WITH_CUDA
  try {
    gi = queryCudaDevices();
  } catch (const std::exception& e) {
    gi = GpuInfo{};
    gi.reason = std::string("CUDA query failed: ") + e.what();
  }
#else
  gi.available = false;
  gi.reason = "built without CUDA";
#endif
  Napi::Object out = Napi::Object::New(env);
  out.Set("available", gi.available);
  if (!gi.available) out.Set("reason", gi.reason);
  Napi::Array devices = Napi::Array::New(env, gi.devices.size());
  for (std::size_t i = 0; i < gi.devices.size(); ++i) {
    const auto& d = gi.devices[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("ordinal", d.ordinal);
    o.Set("name", d.name);
    o.Set("computeCapability", d.computeCapability);
    o.Set("totalMemory", static_cast<double>(d.totalMemory));
    o.Set("freeMemory", static_cast<double>(d.freeMemory));
    devices.Set(static_cast<std::uint32_t>(i), o);
  }
  out.Set("devices", devices);
  return out;
}

Napi::Value HostMemoryJs(const Napi::CallbackInfo& info) {
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("available", static_cast<double>(availableHostMemory()));
  out.Set("hostTierDefault", static_cast<double>(defaultHostTierBudget()));
  return out;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  data->engineClass = Napi::Persistent(NativeEngine::Define(env));
  env.SetInstanceData<AddonData>(data);
  exports.Set("gpuInfo", Napi::Function::New(env, GpuInfoJs, "gpuInfo"));
  exports.Set("hostMemory", Napi::Function::New(env, HostMemoryJs, "hostMemory"));
  exports.Set("open", Napi::Function::New(env, Open, "open"));
  return exports;
}

}  // namespace
}  // namespace kmfleet

static Napi::Object InitKmfleet(Napi::Env env, Napi::Object exports) { return kmfleet::Init(env, exports); }
NODE_API_MODULE(kmfleet_native, InitKmfleet)
