// Whether an exact-mode pass screens its rows with one product first (kScreen in assign_wgmma.cu, kScreenMode in
// assign_kernel.cu, then the three products for the rows the screen can't decide). The numbers below are the Hopper
// kernel's; the portable kernel's break-even is higher (~0.5 at Dp = 128), so these thresholds are conservative there. The screen costs a fraction s of the unscreened assignment; each row
// it passes on then costs e times its share of it (gathered rows: e ≈ 1.1–1.2). So it pays while the share f of rows
// passed on stays under (1 − s)/e: measured on the H200 (cuda/NOTES.md "Exact mode: the one-product screen"),
// ~0.36 at Dp = 128 (s = 0.57) and ~0.54 at Dp = 256 (s = 0.40). On unstructured data (random rows) f is 10–25 %;
// on tightly clustered data the one-product bound (∝ ‖x − μ‖·max‖c − μ‖) is wider than most rows' margin and f is
// 85–99 %, where the screen would cost up to ~40 % more. f changes between Lloyd passes (higher in the first few),
// so the last screened pass decides: after one that passed on too many the screen stays off for 2 passes, then 4,
// 8, … 256 after each further such pass (a clustered dataset stays clustered), and a good pass resets the wait.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace kmfleet {
namespace cuda {

// KMFLEET_EXACT_SCREEN=0: exact mode without the screen (A/B); =only: the screen alone (labels not exact: kmbench's
// timing split only). Read at every assignment, so one process can A/B.
inline bool exactScreenEnv(const char* value) {
  const char* v = std::getenv("KMFLEET_EXACT_SCREEN");
  return v != nullptr && std::strcmp(v, value) == 0;
}

class ExactScreenPolicy {
 public:
  static constexpr int kFirstWait = 2, kLastWait = 256;

  ExactScreenPolicy() : ExactScreenPolicy(128) {}
  explicit ExactScreenPolicy(std::int64_t dp) : maxPassedOn_(dp <= 128 ? 0.35 : 0.5) {}

  bool screen() const { return off_ == 0; }

  // After a pass over `rows` rows: `passedOn` of them went on to the three products (when screen() was true).
  void record(std::int64_t rows, std::int64_t passedOn) {
    if (off_ > 0) {
      --off_;
      return;
    }
    if (rows > 0 && static_cast<double>(passedOn) > maxPassedOn_ * static_cast<double>(rows)) {
      off_ = wait_;
      wait_ = wait_ < kLastWait ? 2 * wait_ : wait_;
    } else {
      wait_ = kFirstWait;
    }
  }

 private:
  double maxPassedOn_;      // the break-even share for this Dp
  int off_ = 0;             // passes left without the screen
  int wait_ = kFirstWait;   // passes without it after the next pass that passes on too many
};

}  // namespace cuda
}  // namespace kmfleet
