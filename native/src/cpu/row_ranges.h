// Which resident rows the CPU backend holds: sorted, disjoint, merged [begin, end) ranges. Rows arrive from passes
// (in row order) and from loads (backend.h loadRows: in the order a download delivers them, so out of order).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace kmfleet {
namespace cpu {

class RowRanges {
 public:
  // Rows held contiguously from row 0.
  std::int64_t prefix() const { return !spans_.empty() && spans_[0].first == 0 ? spans_[0].second : 0; }

  // Calls fn(b, e) for each maximal sub-range of [begin, end) not held, in row order.
  template <typename Fn>
  void forEachMissing(std::int64_t begin, std::int64_t end, Fn&& fn) const {
    std::int64_t at = begin;
    for (const auto& s : spans_) {
      if (at >= end) break;
      if (s.second <= at) continue;
      if (s.first >= end) break;
      if (s.first > at) fn(at, s.first);
      at = std::max(at, s.second);
    }
    if (at < end) fn(at, end);
  }

  void add(std::int64_t begin, std::int64_t end) {
    if (begin >= end) return;
    auto it = std::lower_bound(spans_.begin(), spans_.end(), std::make_pair(begin, begin));
    if (it != spans_.begin() && std::prev(it)->second >= begin) --it;
    auto last = it;
    while (last != spans_.end() && last->first <= end) {
      begin = std::min(begin, last->first);
      end = std::max(end, last->second);
      ++last;
    }
    it = spans_.erase(it, last);
    spans_.insert(it, {begin, end});
  }

 private:
  std::vector<std::pair<std::int64_t, std::int64_t>> spans_;
};

}  // namespace cpu
}  // namespace kmfleet
