#pragma once
// Every CUDA and cuBLAS call is checked: a failure throws with the call, the
// place and the runtime's message, never continues with a broken context.
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace troupe::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error in ") + what + " at " + file + ":" + std::to_string(line) + ": " +
                           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace troupe::cuda

#define TROUPE_CUDA_CHECK(expr)                                                              \
  do {                                                                                       \
    const cudaError_t troupe_cuda_err_ = (expr);                                             \
    if (troupe_cuda_err_ != cudaSuccess)                                                     \
      ::troupe::cuda::throw_cuda_error(troupe_cuda_err_, #expr, __FILE__, __LINE__);         \
  } while (0)

// After a kernel launch: configuration errors surface here, faults at the next sync.
#define TROUPE_CUDA_LAUNCHED() TROUPE_CUDA_CHECK(cudaGetLastError())
