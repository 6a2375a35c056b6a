// What the torch CUDA adapters (<op>_cuda.cpp) of every op share: the label
// dtype as the framework-free kernels name it, the generator a call draws
// from, the graph-safe draw of (seed, offset), the set-up and launch of a
// sampler's call (SamplerCall), and the gather of its slots (DeviceGather).
// Included by the adapters only; depends on no op's header.
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <mutex>

#include "cuda/common.h"  // LabelType, RandomSource
#include "ops/common.h"   // check_generator_device

namespace syncfree {
namespace ops {

// Each call of every op advances the CUDA generator's Philox offset by this
// fixed amount, whatever the data.
constexpr uint64_t kGeneratorIncrement = 4;

inline cuda::LabelType label_type(at::ScalarType t) {
  switch (t) {
    case at::kBool: return cuda::LabelType::kBool;
    case at::kByte: return cuda::LabelType::kUInt8;
    case at::kChar: return cuda::LabelType::kInt8;
    case at::kShort: return cuda::LabelType::kInt16;
    case at::kInt: return cuda::LabelType::kInt32;
    case at::kUInt16: return cuda::LabelType::kUInt16;
    case at::kUInt32: return cuda::LabelType::kUInt32;
    case at::kUInt64: return cuda::LabelType::kUInt64;
    default: break;
  }
  // The argument checks (ops::check_labels) reject other dtypes first.
  TORCH_CHECK(t == at::kLong, "syncfree: unsupported label dtype ", t);
  return cuda::LabelType::kInt64;
}

// The CUDA generator a call draws from (the given one or the device's
// default), after checking it: draws nothing.
inline at::CUDAGeneratorImpl* call_generator(const char* op,
                                             const c10::optional<at::Generator>& generator,
                                             const at::Device& device) {
  check_generator_device(op, generator, device);
  return at::get_generator_or_default<at::CUDAGeneratorImpl>(
      generator, at::cuda::detail::getDefaultCUDAGenerator(device.index()));
}

// Draws (seed, offset) of a call: the user's seed with offset 0, or
// kGeneratorIncrement from the generator's Philox state under its mutex.
// Inside a CUDA graph capture the state lives on the device (read by the
// kernels at replay, so every replay draws fresh samples). torch 2.14 and
// newer register any generator used during a capture with the graph; older
// releases require an explicit generator to be registered before the capture
// begins, and fail here otherwise.
inline cuda::RandomSource draw_random(const char* op, const c10::optional<int64_t>& seed,
                                      at::CUDAGeneratorImpl* gen, bool explicit_generator,
                                      cudaStream_t stream) {
  cuda::RandomSource src;
  if (seed.has_value()) {
    src.seed = static_cast<uint64_t>(*seed);
    return src;
  }
  at::PhiloxCudaState state;
  try {
    std::lock_guard<std::mutex> lock(gen->mutex_);
    state = gen->philox_cuda_state(kGeneratorIncrement);
  } catch (const c10::Error& e) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) (void)cudaGetLastError();
    if (!explicit_generator || capture == cudaStreamCaptureStatusNone) throw;
    TORCH_CHECK(false,
                "syncfree.", op, ": the generator argument cannot be used in this CUDA "
                "graph capture: expected a generator registered with the graph being captured, "
                "got one that is not (this torch does not register generators by itself: call "
                "graph.register_generator_state(generator) on the torch.cuda.CUDAGraph before "
                "the capture begins, or pass seed= instead); torch reported: ",
                e.what_without_backtrace());
  }
  if (state.captured_) {  // inside graph capture: read on the device at replay
    src.seed_ptr = reinterpret_cast<const int64_t*>(state.seed_.ptr);
    src.offset_ptr = state.offset_.ptr;
    src.offset_extra = state.offset_intragraph_;
  } else {
    src.seed = state.seed_.val;
    src.offset = state.offset_.val;
  }
  return src;
}

// The set-up and launch that every sampler's CUDA kernel shares, in the
// order that keeps a rejected call from touching the generator: after the
// op's argument checks, construct it (device guard, the generator checked but
// not drawn from, the stream, the shape); check the op's shape limits;
// allocate the outputs and the workspace; then draw() once and launch.
class SamplerCall {
 public:
  SamplerCall(const char* op, const at::Tensor& labels, const c10::optional<int64_t>& seed,
              const c10::optional<at::Generator>& generator)
      : op_(op),
        guard_(labels.device()),
        seed_(seed),
        gen_(seed.has_value() ? nullptr : call_generator(op, generator, labels.device())),
        explicit_generator_(generator.has_value() && generator->defined()),
        stream(c10::cuda::getCurrentCUDAStream().stream()),
        rows(num_rows(labels).expect_int()),
        n(labels.size(-1)) {}

  // Labels as the kernels read them: [rows, n], contiguous (one copy when
  // strided).
  at::Tensor flat_labels(const at::Tensor& labels) const {
    return labels.reshape({rows, n}).contiguous();
  }

  // The kernels' workspace: `bytes` bytes on the labels' device from the
  // caching allocator (none when bytes == 0).
  at::Tensor workspace(const at::Tensor& labels, size_t bytes) const {
    if (bytes == 0) return at::Tensor();
    return allocate_workspace(op_, [&] { return shape_subject("labels", labels); }, bytes, labels);
  }

  // (seed, offset) of the call: once, after every check and allocation.
  cuda::RandomSource draw() const {
    return draw_random(op_, seed_, gen_, explicit_generator_, stream);
  }

  // The status of the launch that returned `err`.
  void check_launch(cudaError_t err) const {
    TORCH_CHECK(err == cudaSuccess, "syncfree.", op_, ": CUDA launch failed: ",
                cudaGetErrorString(err));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

 private:
  const char* op_;
  c10::cuda::CUDAGuard guard_;
  c10::optional<int64_t> seed_;
  at::CUDAGeneratorImpl* gen_;
  bool explicit_generator_;

 public:
  const cudaStream_t stream;
  const int64_t rows;
  const int64_t n;
};

// The gather of sampled slots on the device (gather_sampled_cuda.cpp): the
// views of the features and labels that the launch reads, made at
// construction (a copy only for strided features: before a sampler's draw,
// so that a failed allocation draws nothing), then one launch on the current
// stream per call of launch(). Shared by gather_sampled and the fused
// *_gather kernels, which launch it right after their sampler.
class DeviceGather {
 public:
  DeviceGather(const at::Tensor& features, const at::Tensor& labels, int64_t num_samples);
  // Slot s of each row gets item indices[s]'s feature row and label when
  // valid[s], zero features and label -1 otherwise (`op` names the public op
  // in an error).
  void launch(const char* op, const at::Tensor& indices, const at::Tensor& valid,
              const at::Tensor& out_features, const at::Tensor& out_labels) const;

 private:
  int64_t rows_, n_, k_;
  at::Tensor features_;  // [rows, n, width], unit stride along width
  at::Tensor labels_;    // [rows, n]
  int64_t element_ = 0;
  cuda::LabelType label_type_ = cuda::LabelType::kInt64;
};

}  // namespace ops
}  // namespace syncfree
