#pragma once
// The clocks the service stamps things with: steady time for durations
// (queue time, TTFT, idle timeouts), Unix time for what is stored.
#include <chrono>
#include <cstdint>

namespace troupe::service {

inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
inline int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace troupe::service
