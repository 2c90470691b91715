#pragma once
// Which instruction set the CPU kernels use. Detected once from the CPU (and
// what the OS lets it use); tests and benchmarks can force a lower one to
// check every path on one machine. TROUPE_ISA=scalar|avx2|avx512 in the
// environment sets the starting override.
#include <string_view>

namespace troupe::cpu {

enum class Isa { scalar, avx2, avx512 };

// Best set this machine runs: avx512 needs AVX-512 F/BW/VL/DQ/VNNI, avx2 needs
// AVX2, FMA and F16C.
Isa detect_isa();
// The override if one is set, else detect_isa().
Isa active_isa();
// Throws std::invalid_argument when `isa` is above detect_isa().
void set_isa_override(Isa isa);
void clear_isa_override();

std::string_view isa_name(Isa isa);

// AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16) beside avx512: the bf16 attention
// kernel (engine/attention_precision.h) runs when this holds and the active
// set is avx512.
bool detect_avx512_bf16();

// Bytes of the level-1 data cache of a core (32 KiB where the system does
// not say): how many activations the few-token matmul kernels keep beside
// the weight stream (lane_drivers.h).
long l1_data_bytes();
// Bytes of a core's level-2 cache (512 KiB where the system does not say):
// how many tokens' activations the packed kernels reuse a row for.
long l2_data_bytes();

}  // namespace troupe::cpu
