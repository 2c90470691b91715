#include "engine/cpu/isa.h"

#include <atomic>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <unistd.h>

namespace troupe::cpu {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// CPUID itself: clang 14 (the fuzz build, tests/fuzz) cannot name f16c in
// __builtin_cpu_supports.
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

Isa probe() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma") && has_f16c())
    return Isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c())
    return Isa::avx2;
#endif
  return Isa::scalar;
}

constexpr int kNoOverride = -1;

// The environment's choice, clamped to what the machine runs (a request for
// more than that would crash, so it is ignored rather than honored).
int initial_override() {
  const char* env = std::getenv("TROUPE_ISA");
  if (env == nullptr) return kNoOverride;
  const std::string_view v(env);
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (v == isa_name(isa) && isa <= detect_isa()) return static_cast<int>(isa);
  return kNoOverride;
}

std::atomic<int>& override_slot() {
  static std::atomic<int> slot{initial_override()};
  return slot;
}

}  // namespace

Isa detect_isa() {
  static const Isa detected = probe();
  return detected;
}

Isa active_isa() {
  const int o = override_slot().load(std::memory_order_relaxed);
  return o == kNoOverride ? detect_isa() : static_cast<Isa>(o);
}

void set_isa_override(Isa isa) {
  if (isa > detect_isa())
    throw std::invalid_argument("instruction set " + std::string(isa_name(isa)) + " is not available on this CPU");
  override_slot().store(static_cast<int>(isa), std::memory_order_relaxed);
}

void clear_isa_override() { override_slot().store(kNoOverride, std::memory_order_relaxed); }

bool detect_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    // CPUID leaf 7, subleaf 1: EAX bit 5.
    return detect_isa() == Isa::avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) != 0;
  }();
  return has;
#else
  return false;
#endif
}

long l1_data_bytes() {
  // Implausible answers (0, or a VM's made-up figures) fall back to the
  // smallest L1 of the x86 cores troupe meets.
  static const long bytes = [] {
    const long v = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return v >= (16 << 10) && v <= (1 << 20) ? v : 32L << 10;
  }();
  return bytes;
}

long l2_data_bytes() {
  static const long bytes = [] {
    const long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return v >= (128 << 10) && v <= (64L << 20) ? v : 512L << 10;
  }();
  return bytes;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "unknown";
}

}  // namespace troupe::cpu
