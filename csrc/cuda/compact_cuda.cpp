// CUDA backend of syncfree::compact: the torch adapter around the
// framework-free launcher (compact_kernels.h). Device guard, current stream,
// workspace from the caching allocator (sized from shapes only), launch
// checks. Nothing is read back to the host.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "cuda/adapter.h"
#include "cuda/compact_kernels.h"
#include "ops/compact.h"

namespace syncfree {
namespace ops {

namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> compact_cuda(const at::Tensor& mask,
                                                            int64_t size) {
  check_compact_args(mask, size);
  const c10::cuda::CUDAGuard guard(mask.device());
  const int64_t rows = compact_rows(mask);
  const int64_t n = mask.size(-1);
  TORCH_CHECK(rows == 0 || cuda::compact_shape_supported(rows, n),
              "syncfree.compact: mask too large for the CUDA backend: expected at most "
              "2147483647 blocks of work (rows * ceil(N / 8192), at least one per row), got ",
              rows, " rows of N = ", n, " elements (shape ", mask.sizes(), ")");
  at::Tensor indices, valid, count;
  std::tie(indices, valid, count) = empty_compact_outputs(mask, size);
  if (rows == 0) return {indices, valid, count};

  // Rows in place when the leading dimensions flatten to one stride (a
  // view), else from a copy; any stride along N.
  const at::Tensor flat = mask.reshape({rows, n});
  cuda::CompactArgs args;
  args.mask = flat.data_ptr();
  args.mask_type = label_type(mask.scalar_type());  // the label dtypes (check_compact_args)
  args.row_stride = flat.stride(0);
  args.item_stride = flat.stride(1);
  args.rows = rows;
  args.n = n;
  args.k = size;
  args.indices = indices.data_ptr<int64_t>();
  args.valid = valid.data_ptr<bool>();
  args.count = count.data_ptr<int64_t>();
  const size_t workspace_bytes = cuda::compact_workspace_bytes(args);
  at::Tensor workspace;  // none on the one-launch path
  if (workspace_bytes > 0) {
    workspace = allocate_workspace(
        "compact", [&] { return shape_subject("mask", mask); }, workspace_bytes, mask);
    args.workspace = workspace.data_ptr();
  }
  const cudaError_t err =
      cuda::launch_compact(args, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == cudaSuccess, "syncfree.compact: CUDA launch failed: ",
              cudaGetErrorString(err));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {indices, valid, count};
}

}  // namespace
}  // namespace ops
}  // namespace syncfree

TORCH_LIBRARY_IMPL(syncfree, CUDA, m) {
  m.impl("compact", TORCH_FN(syncfree::ops::compact_cuda));
}
