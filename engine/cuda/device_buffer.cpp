#include "engine/cuda/device_buffer.h"

#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_check.h"

namespace troupe::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) { ensure(bytes); }

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

bool DeviceBuffer::ensure(size_t bytes) {
  if (bytes <= bytes_ && ptr_) return false;
  if (ptr_) TROUPE_CUDA_CHECK(cudaFree(ptr_));
  ptr_ = nullptr;
  bytes_ = 0;
  TROUPE_CUDA_CHECK(cudaMalloc(&ptr_, bytes ? bytes : 1));
  bytes_ = bytes;
  return true;
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}

void PinnedBuffer::ensure(size_t bytes) {
  if (bytes <= bytes_ && ptr_) return;
  if (ptr_) TROUPE_CUDA_CHECK(cudaFreeHost(ptr_));
  ptr_ = nullptr;
  TROUPE_CUDA_CHECK(cudaMallocHost(&ptr_, bytes ? bytes : 1));
  bytes_ = bytes;
}

}  // namespace troupe::cuda
