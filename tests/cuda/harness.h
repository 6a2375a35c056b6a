// What the tests of the framework-free CUDA kernels (tests/cuda/*.cu) share:
// the GPU check and the skip without one, the CUDA status assertion, the
// workspace poisoning switch, a call's random source. No torch.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/common.h"

namespace syncfree {
namespace cuda_test {

// Whether a CUDA device is present: the tests that launch kernels skip
// without one (they are compiled all the same).
inline bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// Workspaces are poisoned before each launch, so that a read of a word the
// kernels did not write first changes the results; the sanitizer cases leave
// them as cudaMalloc returns them (as the caching allocator hands them out),
// so that compute-sanitizer's initcheck reports such a read. Outputs stay
// poisoned: every output must be written.
inline bool& poison_workspace() {
  static bool poison = true;
  return poison;
}

// Leaves workspaces unpoisoned while it lives (the sanitizer cases).
struct UnpoisonedWorkspace {
  UnpoisonedWorkspace() { poison_workspace() = false; }
  ~UnpoisonedWorkspace() { poison_workspace() = true; }
  UnpoisonedWorkspace(const UnpoisonedWorkspace&) = delete;
  UnpoisonedWorkspace& operator=(const UnpoisonedWorkspace&) = delete;
};

// A call's random source for (seed, offset): the values themselves, or
// (from_device, as inside a CUDA graph capture) read on the device from
// d_rng (two int64 words, written here) with offset_extra = 3.
inline cudaError_t set_random_source(uint64_t seed, uint64_t offset, bool from_device,
                                     int64_t* d_rng, cuda::RandomSource* random) {
  if (!from_device) {
    random->seed = seed;
    random->offset = offset;
    return cudaSuccess;
  }
  const int64_t host_rng[2] = {static_cast<int64_t>(seed), static_cast<int64_t>(offset) - 3};
  random->seed_ptr = d_rng;
  random->offset_ptr = d_rng + 1;
  random->offset_extra = 3;
  return cudaMemcpy(d_rng, host_rng, sizeof(host_rng), cudaMemcpyHostToDevice);
}

}  // namespace cuda_test
}  // namespace syncfree

// The first statement of a test that launches kernels.
#define SKIP_WITHOUT_GPU()                \
  if (!::syncfree::cuda_test::have_gpu()) \
  GTEST_SKIP() << "no CUDA device: kernels compiled, not run"

// Asserts that a CUDA call succeeded (expr evaluated once); in functions
// returning void, as ASSERT_*.
#define CUDA_OK(expr)                                                             \
  do {                                                                            \
    const cudaError_t cuda_ok_status = (expr); /* evaluated once */               \
    ASSERT_EQ(cuda_ok_status, cudaSuccess) << cudaGetErrorString(cuda_ok_status); \
  } while (0)
