"""What a build without the CUDA operator does with CUDA tensors: a clear error.

A build of syncfree without the CUDA operator (a CPU build of torch, no nvcc,
or ``SYNCFREE_WITH_CUDA=0``) registers no CUDA kernels, and the dispatcher's
own error for a CUDA tensor names neither the cause nor the fix. Such a build
registers, for the CUDA dispatch key of each operator that needs a kernel
there, a kernel that raises ``RuntimeError`` with :func:`message`. Builds with
the CUDA operator register nothing here.
"""
import torch

# The operators with device kernels; the others are built from them and from
# ATen operators (they reach one of these for a CUDA tensor).
# Each with the name of its first tensor argument, which the message names.
OPS = {"balanced_sample": "labels", "stratified_sample": "labels", "compact": "mask", "nms": "boxes",
       "_balanced_sample_gather": "features", "_stratified_sample_gather": "features",
       "_multi_scale_roi_align": "features", "_multi_scale_roi_align_backward": "grad"}
# Where the first tensor argument may stay on the CPU while the next is on a
# GPU, the message names the next one when it is the tensor on the GPU.
_NEXT = {"_balanced_sample_gather": "labels", "_stratified_sample_gather": "labels"}

_library = None


def message(op: str, device: str, argument: str = "labels") -> str:
    return (
        f"syncfree.{op}: {argument} is on {device}, but this build of syncfree has no "
        "CUDA operator (it was built without CUDA: a CPU build of torch, no nvcc found, or "
        "SYNCFREE_WITH_CUDA=0). Rebuild it in an environment with a CUDA build of torch and "
        "nvcc (CUDA_HOME, /usr/local/cuda or PATH): SYNCFREE_WITH_CUDA=1 pip install "
        "--no-build-isolation . from the source tree; or pass CPU tensors"
    )


def _kernel(op: str, argument: str):
    public = op.lstrip("_").replace("_backward", "")

    def kernel(tensor, *args, **kwargs):
        if isinstance(tensor, (list, tuple)):  # a list of tensors: the first one's device
            tensor = tensor[0]
        if op in _NEXT and tensor.device.type != "cuda" and args[0].device.type == "cuda":
            raise RuntimeError(message(public, str(args[0].device), _NEXT[op]))
        raise RuntimeError(message(public, str(tensor.device), argument))

    return kernel


def register() -> None:
    """Register the raising CUDA kernels (once; only for a build without the CUDA operator)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("syncfree", "IMPL")
    for op, argument in OPS.items():
        library.impl(op, _kernel(op, argument), "CUDA")
    _library = library
