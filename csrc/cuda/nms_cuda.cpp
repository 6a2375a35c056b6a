// CUDA backend of syncfree::nms: the torch adapter around the framework-free
// launcher (nms_kernels.h). Device guard, current stream, contiguous
// inputs, workspace from the caching allocator sized from the shapes only,
// launch checks. No host synchronization: nothing is read back, so the call
// can be captured into a CUDA graph.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "cuda/nms_kernels.h"
#include "ops/common.h"
#include "ops/nms.h"

namespace syncfree {
namespace ops {

namespace {

cuda::NmsType nms_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return cuda::NmsType::kFloat16;
    case at::kBFloat16: return cuda::NmsType::kBFloat16;
    case at::kDouble: return cuda::NmsType::kFloat64;
    default: break;
  }
  // check_nms_args rejects other dtypes first.
  TORCH_CHECK(t == at::kFloat, "syncfree.nms: unsupported boxes dtype ", t);
  return cuda::NmsType::kFloat32;
}

std::tuple<at::Tensor, at::Tensor> nms_cuda(const at::Tensor& boxes, const at::Tensor& scores,
                                            double iou_threshold, int64_t max_output,
                                            const c10::optional<at::Tensor>& idxs,
                                            const c10::optional<at::Tensor>& valid) {
  check_nms_args(boxes, scores, iou_threshold, max_output, idxs, valid);
  const c10::cuda::CUDAGuard guard(boxes.device());
  const int64_t rows = num_rows(scores).expect_int();
  const int64_t n = scores.size(-1);
  at::Tensor indices, out_valid;
  std::tie(indices, out_valid) = empty_nms_outputs(scores, max_output);
  if (rows == 0 || max_output == 0) return {indices, out_valid};
  TORCH_CHECK(cuda::nms_shape_supported(rows, n),
              "syncfree.nms: boxes too large for the CUDA backend: expected rows * N below "
              "2^31 and N at most 4194240, got ",
              rows, " rows of N = ", n, " boxes (boxes of shape ", boxes.sizes(), ")");

  const double mask_bytes = cuda::nms_mask_bytes(rows, n);
  TORCH_CHECK(mask_bytes <= cuda::kNmsMaxMaskBytes,
              "syncfree.nms: boxes too large for the CUDA backend's suppression mask: ", rows,
              " rows of N = ", n, " boxes need ", static_cast<int64_t>(mask_bytes),
              " bytes of mask (rows * N * ceil(N / 64) * 8), more than the limit of ",
              static_cast<int64_t>(cuda::kNmsMaxMaskBytes),
              " (64 GiB); with many ids, lay them out as a leading dimension (one row per id: "
              "boxes [..., ids, n, 4]) and merge the rows' kept boxes by score");
  // Contiguous [rows, n, 4], [rows, n] inputs (a copy only where strided);
  // ids as int64.
  const at::Tensor b = boxes.reshape({rows, n, 4}).contiguous();
  const at::Tensor s = scores.reshape({rows, n}).contiguous();
  at::Tensor ids, ok;
  if (nms_has(idxs)) ids = idxs->reshape({rows, n}).to(at::kLong).contiguous();
  if (nms_has(valid)) ok = valid->reshape({rows, n}).contiguous();
  cuda::NmsArgs args;
  args.boxes = b.data_ptr();
  args.scores = s.data_ptr();
  args.idxs = ids.defined() ? ids.data_ptr<int64_t>() : nullptr;
  args.valid = ok.defined() ? ok.data_ptr<bool>() : nullptr;
  args.type = nms_type(boxes.scalar_type());
  args.rows = rows;
  args.n = n;
  args.max_output = max_output;
  args.iou_threshold = iou_threshold;
  args.indices = indices.data_ptr<int64_t>();
  args.out_valid = out_valid.data_ptr<bool>();
  const size_t workspace_bytes = cuda::nms_workspace_bytes(args);
  const at::Tensor workspace =
      allocate_workspace(
          "nms", [&] { return shape_subject("boxes", boxes); }, workspace_bytes, boxes);
  args.workspace = workspace.data_ptr();
  const cudaError_t err =
      cuda::launch_nms(args, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "syncfree.nms: CUDA launch failed: ", cudaGetErrorString(err));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {indices, out_valid};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CUDA, m) {
  m.impl("nms", TORCH_FN(syncfree::ops::nms_cuda));
}
