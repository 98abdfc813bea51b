#include "engine_runner.h"

#include <chrono>
#include <cstdio>
#include <new>

namespace kmfleet {

const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return "INVALID_ARGUMENT";
    case ErrorCode::OutOfMemory: return "OUT_OF_MEMORY";
    case ErrorCode::NonFiniteInput: return "NON_FINITE_INPUT";
    case ErrorCode::Device: return "DEVICE_ERROR";
    case ErrorCode::Cancelled: return "CANCELLED";
  }
  return "DEVICE_ERROR";
}

Napi::Error makeJsError(Napi::Env env, ErrorCode code, const std::string& message, std::int64_t row) {
  Napi::Error e = Napi::Error::New(env, message);
  e.Set("code", Napi::String::New(env, errorCodeName(code)));
  if (row >= 0) e.Set("row", Napi::Number::New(env, static_cast<double>(row)));
  return e;
}

struct EngineRunner::Shared {
  Napi::ThreadSafeFunction tsfn;
  int pending = 0;  // JS thread only
  bool traceHops = false;  // each promise's hop from the engine thread to the JS thread, and its settling, on stderr
};

struct EngineRunner::Task {
  Work work;
  Settle settle;
  bool promise = true;
  std::unique_ptr<Napi::Promise::Deferred> deferred;
  Outcome outcome;
  std::shared_ptr<Shared> shared;
  std::chrono::steady_clock::time_point doneAt;
};

EngineRunner::EngineRunner(Napi::Env env, bool traceHops) : shared_(std::make_shared<Shared>()) {
  shared_->traceHops = traceHops;
  shared_->tsfn = Napi::ThreadSafeFunction::New(env, Napi::Function(), "kmfleet-engine", 0, 1);
  shared_->tsfn.Unref(env);
  thread_ = std::thread([this] { loop(); });
}

EngineRunner::~EngineRunner() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    shared_->tsfn.Release();
  }
}

Napi::Value EngineRunner::submit(Napi::Env env, Work work, Settle settle, bool promise) {
  auto task = std::make_unique<Task>();
  task->work = std::move(work);
  task->settle = std::move(settle);
  task->promise = promise;
  task->shared = shared_;
  Napi::Value result = env.Undefined();
  if (promise) {
    task->deferred = std::make_unique<Napi::Promise::Deferred>(env);
    result = task->deferred->Promise();
  }
  if (shared_->pending++ == 0) shared_->tsfn.Ref(env);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return result;
}

void EngineRunner::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  shared_->tsfn.Release();
}

void EngineRunner::loop() {
  for (;;) {
    std::unique_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task->work(task->outcome);
    } catch (const EngineError& e) {
      task->outcome.fail(e.code(), e.what(), e.row());
    } catch (const std::bad_alloc&) {
      task->outcome.fail(ErrorCode::OutOfMemory, "out of host memory");
    } catch (const std::exception& e) {
      task->outcome.fail(ErrorCode::Device, std::string("internal error: ") + e.what());
    }
    Task* raw = task.release();
    raw->doneAt = std::chrono::steady_clock::now();
    const napi_status st = raw->shared->tsfn.BlockingCall(raw, [](Napi::Env env, Napi::Function, Task* t) {
      std::unique_ptr<Task> owned(t);
      if (env == nullptr) return;  // the environment is shutting down
      const auto jsAt = std::chrono::steady_clock::now();
      Napi::HandleScope scope(env);
      if (--owned->shared->pending == 0) owned->shared->tsfn.Unref(env);
      Napi::Value value = env.Undefined();
      Outcome& out = owned->outcome;
      if (owned->settle) {  // bookkeeping runs on failure too; its value is used on success
        try {
          value = owned->settle(env, out);
        } catch (const Napi::Error& e) {
          if (out.ok && owned->deferred) owned->deferred->Reject(e.Value());
          if (out.ok) return;
        }
      }
      if (!owned->deferred) return;
      if (out.ok)
        owned->deferred->Resolve(value);
      else
        owned->deferred->Reject(makeJsError(env, out.code, out.message, out.row).Value());
      if (owned->shared->traceHops) {
        using ms = std::chrono::duration<double, std::milli>;
        std::fprintf(stderr, "[kmfleet runner] task done -> JS callback %.3f ms, settle %.3f ms\n",
                     ms(jsAt - owned->doneAt).count(), ms(std::chrono::steady_clock::now() - jsAt).count());
      }
    });
    if (st != napi_ok) delete raw;  // closing: nobody is left to settle it
  }
}

}  // namespace kmfleet
