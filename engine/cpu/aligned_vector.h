#pragma once
// A std::vector whose storage starts on a 64-byte line, for arrays the
// kernels walk a whole vector register at a time: from a 16-byte-aligned
// start (what operator new gives) every 64-byte load of a row crosses two
// cache lines (measured: the bf16 attention kernel's outputs so placed cost
// it 6 %).
#include <cstddef>
#include <new>
#include <vector>

namespace troupe::cpu {

template <class T>
struct LineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kLine{64};
  LineAllocator() = default;
  template <class U>
  LineAllocator(const LineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kLine)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kLine); }
  friend bool operator==(const LineAllocator&, const LineAllocator&) { return true; }
};

template <class T>
using AlignedVector = std::vector<T, LineAllocator<T>>;

}  // namespace troupe::cpu
