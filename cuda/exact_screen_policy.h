// Whether an exact-mode pass screens its rows with one product first (kScreen in assign_wgmma.cu, kScreenMode in
// assign.cu, then the three products for the rows the screen can't decide). The numbers below are the Hopper
// kernel's; the portable kernel's break-even is higher (~0.5 at Dp = 128), so these thresholds are conservative there. The screen costs a fraction s of the unscreened assignment; each row
// it passes on then costs e times its share of it (gathered rows: e ≈ 1.1–1.2). So it pays while the share f of rows
// passed on stays under (1 − s)/e: measured on the H200 (cuda/NOTES.md "Exact mode: the one-product screen"),
// ~0.36 at Dp = 128 (s = 0.57) and ~0.54 at Dp = 256 (s = 0.40). On unstructured data (random rows) f is 10–25 %;
// on tightly clustered data the one-product bound (∝ ‖x − μ‖·max‖c − μ‖) is wider than most rows' margin and f is
// 85–99 %, where the screen would cost up to ~40 % more. f changes between Lloyd passes (higher in the first few),
// so the last screened pass decides: after one that passed on too many the screen stays off for 2 passes, then 4,
// 8, … 256 after each further such pass (a clustered dataset stays clustered), and a good pass resets the wait.
// It also decides whether a screened pass keys on each row's best of the previous one (relative(): kScreenRef, Dp ≤
// 256, from the third screened pass; cuda/NOTES.md "Relative keys").
#pragma once

#include <cstdint>

namespace kmfleet {
namespace cuda {

class ExactScreenPolicy {
 public:
  static constexpr int kFirstWait = 2, kLastWait = 256;
  // Screened passes before the first relative one: each row's best comes from the previous pass, and the first
  // Lloyd steps move the centroids so far that those guesses are poor (cuda/NOTES.md "relative keys").
  static constexpr int kPlainScreensFirst = 2;

  ExactScreenPolicy() : ExactScreenPolicy(128) {}
  explicit ExactScreenPolicy(std::int64_t dp)
      : maxPassedOn_(dp <= 128 ? 0.35 : 0.5), relativePays_(dp <= 256) {}

  bool screen() const { return off_ == 0; }
  // Whether a screened pass keys on each row's best from the previous screened pass (kScreenRef, Hopper), given
  // that a screen left them for these rows. Only for Dp ≤ 256, where it was measured to pay: at Dp = 256 the early
  // passes lose (staler guesses pass on more rows, and a passed-on row costs three products in 128-row blocks), the
  // later ones gain more.
  bool relative() const {
    return relativePays_ && screen() && plainScreens_ >= kPlainScreensFirst && relativeOff_ == 0;
  }

  // After a pass over `rows` rows: `passedOn` of them went on to the three products (when screen() was true), with
  // keys relative to the previous pass's best when `relative`. A relative pass that passes on clearly more than the
  // last plain screen did had stale guesses (the centroids moved far): plain screens for 2, 4, … 256 passes then,
  // and that pass does not count against the screen itself.
  void record(std::int64_t rows, std::int64_t passedOn, bool relative = false) {
    if (off_ > 0) {
      --off_;
      return;
    }
    const double share = rows > 0 ? static_cast<double>(passedOn) / static_cast<double>(rows) : 0.0;
    if (relative) {
      if (share > 1.5 * plainShare_ + 0.02) {
        relativeOff_ = relativeWait_;
        relativeWait_ = relativeWait_ < kLastWait ? 2 * relativeWait_ : relativeWait_;
        return;
      }
      relativeWait_ = kFirstWait;
    } else {
      plainShare_ = share;
      ++plainScreens_;
      if (relativeOff_ > 0) --relativeOff_;
    }
    if (rows > 0 && share > maxPassedOn_) {
      off_ = wait_;
      wait_ = wait_ < kLastWait ? 2 * wait_ : wait_;
    } else {
      wait_ = kFirstWait;
    }
  }

 private:
  double maxPassedOn_;      // the break-even share for this Dp
  bool relativePays_;       // relative keys for this Dp
  int off_ = 0;             // passes left without the screen
  int wait_ = kFirstWait;   // passes without it after the next pass that passes on too many
  double plainShare_ = 0;   // the share the last plain (not relative) screen passed on
  int plainScreens_ = 0;    // plain screened passes so far
  int relativeOff_ = 0;     // plain screened passes left before the next relative one
  int relativeWait_ = kFirstWait;
};

}  // namespace cuda
}  // namespace kmfleet
