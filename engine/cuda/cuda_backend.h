#pragma once
// Entry points of the CUDA backend, free of CUDA headers so that
// engine/backend.cpp can call them. Only built with TROUPE_CUDA=ON.
#include <memory>
#include <string>

#include "engine/backend.h"

namespace troupe::cuda {

// True when a CUDA device can be used; otherwise `why` holds the runtime's
// answer (on a machine without a driver: cudaErrorInsufficientDriver).
bool device_available(std::string* why);

std::unique_ptr<Backend> open_cuda_backend(const std::string& model_path, const BackendOptions& options);

}  // namespace troupe::cuda
