// How the CPU kernels of every op draw a call's (seed, offset).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <mutex>

#include "ops/balanced_sample.h"  // check_generator_device

namespace syncfree {
namespace ops {

// seed/offset of a call into p (any params struct with seed and offset): the
// user's seed with offset 0, or one 64-bit draw from the generator (the given
// one or the default CPU generator), advancing it by exactly one random64()
// per call, whatever the data.
template <typename Params>
void draw_seed(const c10::optional<int64_t>& seed, const c10::optional<at::Generator>& generator,
               Params* p) {
  p->offset = 0;
  if (seed.has_value()) {
    p->seed = static_cast<uint64_t>(*seed);
    return;
  }
  check_generator_device(generator, at::Device(at::kCPU));
  auto* gen = at::get_generator_or_default<at::CPUGeneratorImpl>(
      generator, at::detail::getDefaultCPUGenerator());
  std::lock_guard<std::mutex> lock(gen->mutex_);
  p->seed = gen->random64();
}

}  // namespace ops
}  // namespace syncfree
