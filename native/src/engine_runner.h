// The engine thread: one per Engine. Heavy calls (feed, finishPass, k-means++) run there in submission order,
// off the JS thread, and settle their Promise back on the JS thread through a thread-safe function. The
// thread-safe function is referenced only while work is pending, so an idle engine never keeps Node alive.
#pragma once

#include <napi.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backend.h"

namespace kmfleet {

// How a task ended, carried to the JS thread.
struct Outcome {
  bool ok = true;
  ErrorCode code = ErrorCode::Device;
  std::string message;
  std::int64_t row = -1;
  void fail(ErrorCode c, std::string m, std::int64_t r = -1) {
    ok = false;
    code = c;
    message = std::move(m);
    row = r;
  }
};

// An Error with `code` (and `row`) that native/index.ts maps to its error classes.
Napi::Error makeJsError(Napi::Env env, ErrorCode code, const std::string& message, std::int64_t row = -1);
const char* errorCodeName(ErrorCode code);

class EngineRunner {
 public:
  // work runs on the engine thread and fills the outcome (exceptions are caught and mapped);
  // settle runs on the JS thread and returns the value the Promise resolves with (if ok).
  using Work = std::function<void(Outcome&)>;
  using Settle = std::function<Napi::Value(Napi::Env, const Outcome&)>;

  // traceHops: each promise's hop from the engine thread to the JS thread on stderr (EngineConfig.stats)
  EngineRunner(Napi::Env env, bool traceHops);
  ~EngineRunner();

  // [js] Queue work; returns the Promise (or nullptr-less fire-and-forget when promise == false).
  Napi::Value submit(Napi::Env env, Work work, Settle settle, bool promise = true);
  // [js] Finish queued work, stop the thread. Queued Promises still settle afterwards.
  void stop();

 private:
  struct Shared;
  struct Task;
  void loop();

  std::shared_ptr<Shared> shared_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Task>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kmfleet
