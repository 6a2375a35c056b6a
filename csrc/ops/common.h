// csrc/ops: the torch layer of every op, whatever the backend.
//   <op>.{h,cpp}  one per op: its schemas (TORCH_LIBRARY_FRAGMENT), the
//                 argument checks every backend runs, the Meta kernel, the
//                 composite and Autograd kernels, and the C++ API
//                 (include/syncfree/syncfree.h). Backend kernels live in
//                 csrc/cpu/<op>_cpu.cpp and csrc/cuda/<op>_cuda.cpp, which
//                 register themselves.
//   common.{h,cpp} (this file) what the ops share: the label dtypes, the
//                 checks every sampler starts with, the generator's device,
//                 shapes, allocation, and the library's one TORCH_LIBRARY block.
// Every function here that can fail takes `op`, the public op the user
// called, and its messages start with "syncfree.<op>: ", then name the
// argument, what was expected and what was received.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/Optional.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace syncfree {
namespace ops {

// --- labels ------------------------------------------------------------------

// Label dtypes of every op: bool and the integer dtypes (uint8, int8, int16,
// int32, int64, uint16, uint32, uint64). cuda::LabelType lists the same set.
bool is_supported_label_dtype(at::ScalarType t);

// labels: a defined tensor of at least one dimension ([..., N]) and a
// supported dtype.
void check_labels(const char* op, const at::Tensor& labels);

// labels' dtype only (labels defined).
void check_label_dtype(const char* op, const at::Tensor& labels);

// --- the arguments every sampler shares --------------------------------------

// num_samples >= 0, and the outputs [..., K] indexable with int64 and of a
// size in bytes that fits in int64 (checked on concrete sizes only: a
// symbolic batch under torch.compile gets no guard for it; the real kernel
// checks again).
void check_num_samples(const char* op, const at::Tensor& labels, int64_t num_samples);

// seed and generator are not both given.
void check_seed_or_generator(const char* op, const c10::optional<int64_t>& seed,
                             const c10::optional<at::Generator>& generator);

// A generator given for a call must live on the labels' device (type and
// index). Called by the backends that draw from generators.
void check_generator_device(const char* op, const c10::optional<at::Generator>& generator,
                            const at::Device& device);

// --- shapes --------------------------------------------------------------------
// Shapes are computed as SymInts so that the same code serves the Meta
// kernels under torch.compile with dynamic shapes (where sizes may be
// symbolic) and the real kernels (where they are plain integers: backends
// take .expect_int()).

// Number of rows: the product of labels.shape[:-1] (1 for 1-d labels).
c10::SymInt num_rows(const at::Tensor& labels);

// Shape of a sampler's outputs: labels.shape[:-1] + [num_samples].
std::vector<c10::SymInt> output_sizes(const at::Tensor& labels, const c10::SymInt& num_samples);

// The product of features' dimensions from label_dim on (1 when there are none).
c10::SymInt feature_width(const at::Tensor& features, int64_t label_dim);

// Shape of sampled features: labels.shape[:-1] + [k] + F for features
// [..., N, *F].
std::vector<c10::SymInt> sampled_feature_sizes(const at::Tensor& features,
                                               const at::Tensor& labels, const c10::SymInt& k);

// --- allocation ------------------------------------------------------------------

// at::empty for `what` (e.g. "its workspace") of `op`; an allocation that
// fails is reported as "syncfree.<op>: <subject> needs <bytes> bytes for
// <what> on <device>, more than could be allocated (<allocator's message>)",
// an OutOfMemoryError (torch.OutOfMemoryError in Python), instead of the
// allocator's bare message. `subject` names the argument that asks for the
// memory, e.g. "num_samples = 1099511627776" or "labels of shape [2, 10]".
// The subject is built only when the allocation fails.
using Subject = c10::function_ref<std::string()>;
at::Tensor allocate(const char* op, Subject subject, const char* what,
                    at::SymIntArrayRef sizes, const at::TensorOptions& options);

// A byte workspace of `bytes` bytes on `like`'s device (failures as above).
at::Tensor allocate_workspace(const char* op, Subject subject, size_t bytes,
                              const at::Tensor& like);

// "labels of shape [2, 10]" (name "labels"): the subject of an allocation
// sized by a tensor argument.
std::string shape_subject(const char* name, const at::Tensor& t);

// Uninitialized (indices int64, valid bool) of shape labels.shape[:-1] +
// [num_samples]: the outputs of every sampler.
std::tuple<at::Tensor, at::Tensor> empty_sample_outputs(const char* op, const at::Tensor& labels,
                                                        int64_t num_samples);

// --- the dispatcher ------------------------------------------------------------------

// The typed handle of syncfree::<name> (its overload ""), for calls through
// the dispatcher (keep it in a function-local static).
template <typename Fn>
c10::TypedOperatorHandle<Fn> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
}

}  // namespace ops
}  // namespace syncfree
