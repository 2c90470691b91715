#pragma once
// A context shift of one sequence's KV: `count` positions read from
// `src_table` at `src_start`, written to `dst_table` at `dst_start`, their
// keys rotated by `delta` positions (RoPE). The engine's (Backend::shift_kv)
// and the step message's (StepPlan.shifts) alike: views, valid while the
// tables they point at live.
#include <cstdint>
#include <span>

namespace troupe {

struct KvShift {
  std::span<const int32_t> src_table;
  int32_t src_start = 0;
  std::span<const int32_t> dst_table;
  int32_t dst_start = 0;
  int32_t count = 0;
  int32_t delta = 0;
};

}  // namespace troupe
