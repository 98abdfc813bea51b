// Whether an exact-mode pass screens its rows with one product first (Hopper: assign_wgmma.cu kScreen, then the three
// products for the rows the screen can't decide). The screen costs about a one-product pass; the rows it passes on
// then cost three products each, gathered. So it pays while few rows are passed on — on unstructured data (random
// rows: 10–25 %) — and costs up to ~40 % more than the three products alone on tightly clustered data, where the
// one-product bound (∝ ‖x − μ‖·max‖c − μ‖) is wider than most rows' margin (blobs: 85–99 % passed on). The fraction
// changes slowly between Lloyd passes, so the last screened pass decides the next ones; after a pass that passed on
// too many, the screen stays off for a while and is then tried again: after 8 passes, then 16, 32, … (a clustered
// dataset stays clustered: each probe costs a pass ~40 % slower).
#pragma once

#include <cstdint>

namespace kmfleet {
namespace cuda {

class ExactScreenPolicy {
 public:
  // Above this share of rows passed on, the screen costs more than it saves (break-even measured on the H200 at
  // 10M×128×1024: cuda/NOTES.md "Exact mode: the one-product screen").
  static constexpr double kMaxPassedOn = 0.35;
  static constexpr int kFirstProbe = 8, kLastProbe = 256;

  bool screen() const { return off_ == 0; }

  // After a pass over `rows` rows: `passedOn` of them went on to the three products (when screen() was true).
  void record(std::int64_t rows, std::int64_t passedOn) {
    if (off_ > 0) {
      --off_;
      return;
    }
    if (rows > 0 && static_cast<double>(passedOn) > kMaxPassedOn * static_cast<double>(rows)) {
      off_ = wait_;
      wait_ = wait_ < kLastProbe ? 2 * wait_ : wait_;
    } else {
      wait_ = kFirstProbe;
    }
  }

 private:
  int off_ = 0;               // passes left without the screen
  int wait_ = kFirstProbe;    // passes without it after the next pass that passes on too many
};

}  // namespace cuda
}  // namespace kmfleet
