// Portability macros for code shared by the CPU and CUDA backends.
//
// Everything under csrc/core is framework-free: it includes no torch or ATen
// header, takes plain integers and raw pointers, and compiles both as C++17
// and under nvcc, so that the CPU and CUDA kernels run the very same
// arithmetic and therefore return bit-identical samples for the same seed.
// A new op's rule goes here (csrc/core/<rule>.h, its tests in
// tests/cpp/test_core.cpp); the torch layer is csrc/ops, the backends
// csrc/cpu and csrc/cuda (docs/design.md lists the tree).
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define SYNCFREE_HD __host__ __device__ __forceinline__
#else
#define SYNCFREE_HD inline
#endif

namespace syncfree {
namespace core {

// A cache hint for *address (host code; no effect on the results): `Write`
// 1 asks for the line to be written, 0 read; `Locality` 3 into every cache
// level, 2 into the L2 cache (__builtin_prefetch's arguments). Nothing
// where the compiler has no such builtin.
template <int Write, int Locality>
inline void cache_hint(const void* address) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(address, Write, Locality);
#else
  (void)address;
#endif
}

// Hints that *address will be read: soon (prefetch: into every cache
// level), or not as soon (prefetch_l2: into the L2 cache).
inline void prefetch(const void* address) { cache_hint<0, 3>(address); }
inline void prefetch_l2(const void* address) { cache_hint<0, 2>(address); }

// Hints that *address will be written soon: its cache line is requested for
// ownership (prefetchw where the calling code is compiled for it, a read
// request otherwise, which gets the line alone where no other core holds it).
inline void prefetch_for_write(const void* address) { cache_hint<1, 3>(address); }

}  // namespace core
}  // namespace syncfree
