"""Finding host syncs and graph breaks: :class:`find_syncs`,
:func:`find_graph_breaks` and the :class:`Report` they share.

``find_syncs`` runs the user's code as it is (on the CPU, or any device) under
two modes: a ``TorchDispatchMode`` that sees every ATen operator (forward and
backward), where the operators that read device data on the host or give a
data-dependent shape are recognized by name and arguments; and a
``TorchFunctionMode`` that sees the Python-level calls a CPU run would not
show as operators (``.tolist()``, ``.numpy()``, ``.cpu()``) and names the
Python call behind an operator (``torch.where(mask)`` rather than
``nonzero``, ``bool(t)`` rather than ``_local_scalar_dense``). Each event is
attributed, from the Python stack, to the innermost frame of the user's code
and to the innermost frame of a library (torchvision, detectron2, syncfree's
own detection code, anything installed), torch's own frames skipped.

docs/find_syncs.md is the guide.
"""
import collections
import contextlib
import dataclasses
import functools
import json
import logging
import os
import site
import sys
import sysconfig
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["find_syncs", "find_graph_breaks", "Report", "Site", "Entry", "KINDS"]

_COMPACT = "syncfree.compact(mask, K) (at most K indices in a static shape, -1 after)"

# kind: (what it is, why the host waits or the shape depends on the data, what to use instead).
# The one table of the report's texts.
KINDS: Dict[str, Tuple[str, str, str]] = {
    "nonzero": (
        "nonzero",
        "the output's length is the number of true elements: the host reads it from the device",
        f"{_COMPACT}, or torch.nonzero_static(mask, size=K); or keep the mask and compute with it "
        "(torch.where(mask, a, b), products with mask)"),
    "mask_index": (
        "boolean-mask indexing x[mask]",
        "the result's length is the number of true elements (a nonzero inside)",
        "keep the shape and the mask (torch.where(mask[..., None], x, 0), sums weighted by the mask); "
        f"or {_COMPACT} then index_select/gather"),
    "mask_assign": (
        "boolean-mask assignment x[mask] = v",
        "index_put_ turns the mask into indices with a nonzero",
        "x.masked_fill_(mask, v) or torch.where(mask, v, x)"),
    "masked_select": (
        "masked_select",
        "the result's length is the number of true elements",
        f"keep the mask (torch.where(mask, x, 0)); or {_COMPACT} then gather"),
    "unique": (
        "unique",
        "the number of distinct values sizes the output: the host reads it from the device",
        "a fixed number of bins (one_hot(x, num_classes=C), scatter_add_ into C bins), or sort and "
        "compare neighbours in a static shape"),
    "repeat_interleave": (
        "repeat_interleave without output_size",
        "the output's length is the sum of the repeats, read from the device",
        "pass output_size= (the known total or a bound)"),
    "item": (
        "a tensor read as a Python number",
        ".item(), int(t), float(t), bool(t) and `if t:` copy a value to the host, which waits for the device",
        "keep the value a tensor (torch.where, clamp, tensor arithmetic); torch._assert_async for checks; "
        "read values for logging once per step, after it"),
    "tolist": (
        ".tolist()",
        "copies the tensor to the host, which waits for the device",
        "keep the data on the device; read it once per step, after it"),
    "numpy": (
        ".numpy()",
        "copies the tensor to the host, which waits for the device",
        "keep the data on the device; read it once per step, after it"),
    "to_host": (
        "a blocking copy to the host (.cpu(), .to('cpu'), print)",
        "a device-to-host copy waits for the device (of a CPU tensor, as here on a CPU run, it costs "
        "nothing; of a GPU tensor it syncs)",
        "keep the tensor on the device; copy what must be read once per step, after it, with "
        "non_blocking=True into pinned memory"),
    "to_device": (
        "a blocking copy from the host to the device",
        "a copy from pageable host memory without non_blocking=True waits for the device's queue "
        "(seen on a device run: on the CPU the step's host and device tensors are one)",
        "move the batch to the device once, before the step (pinned memory, non_blocking=True); make "
        "constants on the device once"),
    "from_python": (
        "a tensor made from Python data on the device",
        "torch.tensor/as_tensor(data, device=...) copies the data from pageable host memory, and a blocking "
        "copy to a GPU waits for the device's queue",
        "make constants once, outside the step (a registered buffer), or on the device (torch.full, "
        "torch.arange, torch.zeros(..., device=...)); a one-element tensor kept on the host (no device=) is a "
        "scalar to device operations, with no copy"),
    "randperm": (
        "randperm",
        "no sync itself (it runs on the device), but its length n is a Python int: a sample of a "
        "data-dependent set (torchvision's sampler) needs that set's size on the host first, the nonzero or "
        ".item() before it",
        "syncfree.balanced_sample / syncfree.stratified_sample (K slots, a valid mask, no sync)"),
    "equal": (
        "torch.equal / torch.allclose",
        "returns a Python bool, read from the device",
        "(a == b).all() or torch.isclose(a, b).all(), kept as a tensor"),
    "linalg_check": (
        "a linalg function's error check",
        "torch.linalg.inv, solve, cholesky, ... read their error codes on the host to raise",
        "the _ex variants (torch.linalg.inv_ex, solve_ex, cholesky_ex: info kept as a tensor), checked after "
        "the step"),
    "bincount": (
        "bincount",
        "the output's length depends on the largest value, read from the device",
        "a fixed number of bins: torch.zeros(C).index_add_(0, x, ones) or one_hot(x, num_classes=C).sum(0)"),
    "histc": (
        "histc without a range (min == max)",
        "the range is the data's minimum and maximum, read from the device",
        "pass min= and max="),
    "nms": (
        "torchvision.ops.nms / batched_nms",
        "returns as many indices as boxes kept: a data-dependent length",
        "syncfree.nms(boxes, scores, iou_threshold, K): K slots per row and a valid mask"),
    "graph_break": (
        "graph break",
        "torch.compile ends the graph here and runs Python in between",
        "see the reason"),
}

# A graph break's reason (lowercase substring) -> what to do instead.
_BREAK_HINTS = [
    (("nonzero", "dynamic shape", "data-dependent output", "data dependent output", "unbacked"),
     "a data-dependent shape: keep static shapes (syncfree.compact, syncfree.nms, masks)"),
    (("item", "_local_scalar_dense", "scalar output"),
     "keep the value a tensor (or torch._dynamo.config.capture_scalar_outputs = True)"),
    (("tolist", "numpy"), "keep the data on the device"),
    (("data-dependent jump", "data-dependent branching", "generic_jump", "jump"),
     "a Python branch on a tensor's value: torch.where, or torch.cond"),
    (("fake", "meta kernel", "abstract impl"),
     "register a fake (meta) kernel for the operator: torch.library.register_fake"),
    (("backward", "autograd"), "compile the forward and loss, or trace backward "
     "(torch._dynamo.config.trace_autograd_ops, where this torch has it)"),
    (("optimizer", "step"), "compile optimizer.step separately, or update the weights inside the step"),
    (("print", "logging", "builtin"), "move it out of the compiled function"),
]

# Operators (ATen name -> kind) that sync or give a data-dependent shape whatever their arguments.
_OPS = {
    "nonzero": "nonzero", "argwhere": "nonzero", "nonzero_numpy": "nonzero",
    "masked_select": "masked_select",
    "_unique": "unique", "_unique2": "unique", "unique_dim": "unique", "unique_consecutive": "unique",
    "unique_dim_consecutive": "unique",
    "_local_scalar_dense": "item",
    "randperm": "randperm",
    "equal": "equal", "allclose": "equal",
    "bincount": "bincount",
    "_linalg_check_errors": "linalg_check",
}
# Operators that sync for some arguments only (see _classify).
_MAYBE = {"index", "index_put", "index_put_", "_index_put_impl_", "repeat_interleave", "histc", "_to_copy",
          "copy_", "nms"}

# The Python call behind an operator, by kind and the function mode's name of the call.
_CALLS = {
    "item": {"one_hot": "one_hot without num_classes", "item": "Tensor.item()", "__bool__": "bool(tensor) / if tensor:", "__int__": "int(tensor)",
             "__float__": "float(tensor)", "__index__": "a tensor used as an int (index, size)",
             "__complex__": "complex(tensor)"},
    "nonzero": {"where": "torch.where(mask)", "argwhere": "torch.argwhere", "nonzero": "torch.nonzero"},
    "mask_index": {"__getitem__": "x[mask]"},
    "mask_assign": {"__setitem__": "x[mask] = v"},
    "from_python": {"tensor": "torch.tensor(data)", "as_tensor": "torch.as_tensor(data)",
                    "asarray": "torch.asarray(data)"},
    "tolist": {"tolist": "Tensor.tolist()"},
    "numpy": {"numpy": "Tensor.numpy()", "__array__": "numpy.asarray(tensor)"},
    "to_host": {"cpu": "Tensor.cpu()", "to": "Tensor.to('cpu')", "__repr__": "print / repr(tensor)",
                "__format__": "f-string of a tensor"},
}
# Function-mode calls recorded there, name -> kind (the operators they run are not recorded
# again): every call named for these kinds above, but .to(), a copy to the host only for some arguments.
_HOST_CALLS = {name: kind for kind in ("tolist", "numpy", "to_host") for name in _CALLS[kind] if name != "to"}
_FROM_DATA = frozenset(_CALLS["from_python"])
# The calls the function mode looks at (the others it only names).
_WATCHED_CALLS = frozenset(_HOST_CALLS) | _FROM_DATA | {"to", "one_hot", "backward", "grad", "__setitem__"}


@dataclasses.dataclass(frozen=True)
class Site:
    """A source line: file (relative to the working directory, or to its
    library's root), line number and function (qualified name)."""
    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


@dataclasses.dataclass
class Entry:
    """One report line: an operation (``kind`` of :data:`KINDS`, ``op`` the
    Python call or operator) at one place, and how many times it ran.
    ``where``: the innermost frame of the user's code (None when there is
    none: all frames are torch's or a library's); ``library``: the innermost
    frame of a library when the operation ran inside one; ``backward``: it
    ran in autograd's backward (``op`` names the backward node)."""
    kind: str
    op: str
    where: Optional[Site]
    library: Optional[Site]
    backward: bool = False
    count: int = 0
    detail: str = ""  # a graph break's whole reason

    @property
    def why(self) -> str:
        return KINDS[self.kind][1]

    @property
    def instead(self) -> str:
        return KINDS[self.kind][2]

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(why=self.why, instead=self.instead)
        return d


class Report:
    """What :class:`find_syncs` or :func:`find_graph_breaks` found: entries
    per site and operation, in the order first seen.

    ``len(report)`` is the number of events (so ``not report`` means none),
    ``report.counts()`` their number per kind, ``str(report)`` the table,
    ``report.to_json()`` the same as JSON, ``report.assert_none()`` raises
    ``AssertionError`` with the table when there is any. A graph-break
    report also has ``graph_count`` and ``graph_break_count``
    (``torch._dynamo.explain``'s)."""

    def __init__(self, title: str = "host syncs"):
        self.title = title
        self._entries: Dict[tuple, Entry] = {}
        self.graph_count: Optional[int] = None
        self.graph_break_count: Optional[int] = None

    def _add(self, kind: str, op: str, where: Optional[Site], library: Optional[Site], backward: bool,
             n: int = 1, detail: str = "") -> None:
        key = (kind, op, where, library, backward)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = Entry(kind, op, where, library, backward, detail=detail)
        entry.count += n

    @property
    def entries(self) -> List[Entry]:
        return list(self._entries.values())

    def __len__(self) -> int:
        return sum(e.count for e in self._entries.values())

    def counts(self) -> Dict[str, int]:
        """Events per kind (keys of :data:`KINDS`), in the order first seen."""
        out: Dict[str, int] = collections.Counter()
        for e in self._entries.values():
            out[e.kind] += e.count
        return dict(out)

    def filter(self, *, ignore=(), only=None) -> "Report":
        """A copy without the kinds in ``ignore`` (or with those in ``only``)."""
        ignore = _kinds(ignore, "ignore")
        only = None if only is None else _kinds(only, "only")
        out = Report(self.title)
        out.graph_count, out.graph_break_count = self.graph_count, self.graph_break_count
        for key, e in self._entries.items():
            if e.kind not in ignore and (only is None or e.kind in only):
                out._entries[key] = dataclasses.replace(e)
        return out

    def to_dict(self) -> Dict[str, Any]:
        d = {"title": self.title, "total": len(self), "counts": self.counts(),
             "entries": [e.to_dict() for e in self._entries.values()]}
        if self.graph_count is not None:
            d.update(graph_count=self.graph_count, graph_break_count=self.graph_break_count)
        return d

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def table(self) -> str:
        entries = self.entries
        sites = len({(e.where, e.library) for e in entries})
        if self.graph_count is not None:
            head = (f"{_n(self.graph_break_count, 'graph break')} ({_n(self.graph_count, 'graph')}): "
                    f"{_n(len(self), 'reason')} at {_n(sites, 'site')}")
        else:
            head = f"{_n(len(self), self.title[:-1])} at {_n(sites, 'site')}"
        if not entries:
            return head.split(":")[0] if self.graph_count is not None else f"no {self.title}"
        width = min(60, max(len("operation"), *(len(e.op) for e in entries)))
        lines = [head, f"{'count':>7}  {'operation':<{width}}  site (innermost first; <- the user's code that called it)"]
        for e in entries:
            op = e.op if len(e.op) <= width else e.op[:width - 3] + "..."
            if e.library:
                site = f"{e.library}  <- {e.where}" if e.where else str(e.library)
            else:
                site = str(e.where) if e.where else "(no frame of Python code)"
            if e.backward:
                site += "  [backward]"
            lines.append(f"{e.count:>7}  {op:<{width}}  {site}")
        lines.append("why, and what to use instead:")
        for kind in dict.fromkeys(e.kind for e in entries):
            what, why, instead = KINDS[kind]
            if kind == "graph_break":
                for op, detail in dict((e.op, e.detail) for e in entries).items():
                    lines.append(f"  {op}: {_break_hint(detail or op)}")
                break
            lines.append(f"  {what}: {why}. Instead: {instead}.")
        return "\n".join(lines)

    __str__ = table

    def __repr__(self) -> str:
        return f"<syncfree Report: {len(self)} {self.title}, {len(self._entries)} entries>"

    def assert_none(self, *, ignore=()) -> None:
        """Raises ``AssertionError`` with the table when the report (without
        the kinds in ``ignore``) has any event."""
        rest = self.filter(ignore=ignore)
        if len(rest):
            raise AssertionError(rest.table())


def _kinds(kinds, argument: str) -> Tuple[str, ...]:
    """``kinds`` (a kind or an iterable of kinds of :data:`KINDS`) as a tuple."""
    if isinstance(kinds, str):
        kinds = (kinds,)
    try:
        kinds = tuple(kinds)
    except TypeError:
        raise TypeError(f"syncfree.find_syncs: {argument} must be a kind or a sequence of kinds, got "
                        f"{type(kinds).__name__}") from None
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"syncfree.find_syncs: unknown kind {k!r} in {argument}; expected one of "
                             f"{sorted(KINDS)}")
    return kinds


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _break_summary(reason: str) -> str:
    """A graph break's reason in a few words: its title and, where dynamo
    gives one, the operator or call ("Dynamic shape operator:
    aten.nonzero.default")."""
    title = reason.split(" Explanation:")[0].strip()
    context = ""
    if "Developer debug context:" in reason:
        context = reason.split("Developer debug context:", 1)[1].split(" For more details")[0].strip()
    if context and len(context) <= 60:
        return f"{title}: {context}"
    return title if len(title) <= 80 else title[:77] + "..."


def _break_hint(reason: str) -> str:
    low = reason.lower()
    for keys, hint in _BREAK_HINTS:
        if any(k in low for k in keys):
            return hint
    return "see torch.compile's documentation of graph breaks (torch._dynamo.explain)"


# --- where an event comes from ------------------------------------------------------------------

def _dir(path: str) -> str:
    return os.path.normcase(os.path.realpath(path)) + os.sep


_TORCH_DIR = _dir(os.path.dirname(torch.__file__))
_PACKAGE_DIR = _dir(os.path.dirname(os.path.abspath(__file__)))  # syncfree's: a library
_THIS_FILE = os.path.normcase(os.path.realpath(__file__))
_OPTIM_DIR = os.path.join(os.path.dirname(torch.__file__), "optim") + os.sep


@functools.lru_cache(maxsize=None)
def _library_roots() -> Tuple[str, ...]:
    paths = set(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib"))
    with contextlib.suppress(Exception):
        paths.update(site.getsitepackages())
    with contextlib.suppress(Exception):
        paths.add(site.getusersitepackages())
    return tuple(sorted((_dir(p) for p in paths if p), key=len, reverse=True))


@functools.lru_cache(maxsize=4096)
def _place(filename: str, cwd: str) -> Tuple[str, str]:
    """('skip' | 'library' | 'user', the path to show: a user's file relative
    to the working directory ``cwd`` when it is below it)."""
    if filename.startswith("<frozen"):  # the standard library's frozen modules (runpy, importlib)
        return "library", filename
    if filename.startswith("<"):  # typed code is the user's; generated code (torch.fx's) is not
        return ("user" if filename in ("<stdin>", "<string>", "<console>") or filename.startswith("<ipython-input")
                else "skip"), filename
    real = os.path.normcase(os.path.realpath(filename))
    if real == _THIS_FILE or real.startswith(_TORCH_DIR):
        return "skip", real
    if real.startswith(_PACKAGE_DIR):
        return "library", os.path.relpath(real, os.path.dirname(_PACKAGE_DIR.rstrip(os.sep)))
    for part in ("site-packages", "dist-packages"):
        marker = os.sep + part + os.sep
        if marker in real:
            return "library", real.split(marker, 1)[1]
    for root in _library_roots():
        if real.startswith(root):
            return "library", os.path.relpath(real, root)
    try:
        rel = os.path.relpath(real, cwd)
    except ValueError:  # another drive
        return "user", real
    return "user", real if rel.startswith(os.pardir) else rel


def _attribute(frames) -> Tuple[Optional[Site], Optional[Site]]:
    """(innermost user frame, innermost library frame when it is inside the
    user frame) of (filename, line, function) triples, innermost first."""
    library = None
    cwd = os.getcwd()
    for filename, line, function in frames:
        place, path = _place(filename, cwd)
        if place == "skip":
            continue
        if place == "library":
            if library is None:
                library = Site(path, line, function)
            continue
        return Site(path, line, function), library
    return None, library


# The backward node autograd is running (None outside backward).
_current_autograd_node = getattr(torch._C, "_current_autograd_node", lambda: None)


def _caller_line():
    """(file, line) of the innermost frame outside torch and this module."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if _place(filename, "")[0] != "skip":  # (the place only: no working directory to show paths from)
            return filename, frame.f_lineno
        frame = frame.f_back
    return None


def _python_frames(frame):
    while frame is not None:
        code = frame.f_code
        yield code.co_filename, frame.f_lineno, getattr(code, "co_qualname", code.co_name)
        frame = frame.f_back


# --- recognizing the operators ------------------------------------------------------------------

def _is_mask(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)


def _is_host_device(device) -> bool:
    if device is None:
        return False
    if isinstance(device, str):
        return device.split(":")[0] == "cpu"
    return isinstance(device, torch.device) and device.type == "cpu"


def _masked_fill_path(args, kwargs, indices, lifted) -> bool:
    """Whether ATen's index_put_ runs this as masked_fill_ (one mask, a
    one-element value on the host, no accumulation): no nonzero then, and the
    value is read on the host without waiting for the device. Python's
    ``x[mask] = 0.5`` makes that value on the host for a GPU ``x``; on a CPU
    run, ``lifted`` says the value came from Python here."""
    target, value = args[0], args[2] if len(args) > 2 else kwargs.get("values")
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    if accumulate or len(indices) != 1 or not isinstance(value, torch.Tensor) or value.numel() != 1:
        return False
    if value.device.type != "cpu":
        return False
    return target.device.type != "cpu" or lifted


class _MaySync:
    """Whether an operator can sync or give a data-dependent shape for some
    arguments (``_classify`` then looks at them): by name, cached per
    operator."""

    def __init__(self):
        self._known = {}

    def __contains__(self, func) -> bool:
        known = self._known.get(func)
        if known is None:
            name = func.overloadpacket.__name__
            known = self._known[func] = name in _OPS or name in _MAYBE
        return known


_MAY_SYNC = _MaySync()


def _classify(func, args, kwargs, lifted=False) -> Optional[str]:
    name = func.overloadpacket.__name__
    kind = _OPS.get(name)
    if kind is not None:
        return kind if func.namespace == "aten" else None
    if name not in _MAYBE:
        return None
    ns = func.namespace
    if ns == "torchvision":
        return "nms" if name == "nms" else None
    if ns != "aten":
        return None
    if name == "index":
        return "mask_index" if any(_is_mask(i) for i in (args[1] if len(args) > 1 else ()) or ()) else None
    if name in ("index_put", "index_put_", "_index_put_impl_"):
        indices = [i for i in (args[1] if len(args) > 1 else ()) or () if i is not None]
        if not any(_is_mask(i) for i in indices):
            return None
        return None if _masked_fill_path(args, kwargs, indices, lifted) else "mask_assign"
    if name == "repeat_interleave":  # .Tensor (repeats alone); .self_Tensor decomposes into it
        return "repeat_interleave" if func._overloadname == "Tensor" and kwargs.get("output_size") is None else None
    if name == "histc":
        lo = kwargs.get("min", args[2] if len(args) > 2 else 0)
        hi = kwargs.get("max", args[3] if len(args) > 3 else 0)
        return "histc" if lo == hi else None
    if name == "_to_copy":
        src = args[0] if args else None
        if not isinstance(src, torch.Tensor):
            return None
        device = kwargs.get("device")
        if src.device.type != "cpu" and _is_host_device(device) and not kwargs.get("non_blocking", False):
            return "to_host"  # (non_blocking: into pinned memory, no wait)
        if src.device.type == "cpu" and _is_device(device) and not kwargs.get("non_blocking", False):
            return "to_device"
        return None
    if name == "copy_":
        dst, src = (tuple(args) + (None, None))[:2]
        if not (isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor)):
            return None
        blocking = not (args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        if dst.device.type == "cpu" and src.device.type not in ("cpu", "meta"):
            return "to_host" if blocking or not dst.is_pinned() else None
        if src.device.type == "cpu" and dst.device.type not in ("cpu", "meta") and blocking and src.dim() > 0:
            return "to_device"  # (a 0-dim host tensor stands for a scalar: left out)
        return None
    return None


def _on_host(args) -> bool:
    """Whether every tensor among ``args`` (and in their lists) is on the host
    (or on the meta device: no data anywhere)."""
    for a in args:
        if isinstance(a, torch.Tensor):
            if not (a.is_cpu or a.is_meta):
                return False
        elif isinstance(a, (list, tuple)) and not _on_host(a):
            return False
    return True


def _is_device(device) -> bool:
    """Whether a ``device=`` argument names an accelerator."""
    if device is None:
        return False
    kind = device.split(":")[0] if isinstance(device, str) else getattr(device, "type", "cpu")
    return kind not in ("cpu", "meta")


def _copied_to_a_device(args, device) -> bool:
    """Whether ``torch.tensor(data, device=...)`` (or as_tensor, asarray)
    copies Python data to the step's device: the data is no tensor, and a
    device is given, other than a literal ``"cpu"`` (``device=x.device`` is
    the host's on a CPU run, a GPU's on a GPU run). Without a device, the
    tensor stays on the host, where a one-element one is a scalar to device
    operations (no copy); moving it later is a copy (``to_device``, seen on
    a device run)."""
    if device is None or (isinstance(device, str) and _is_host_device(device)):
        return False
    return bool(args) and not isinstance(args[0], torch.Tensor)


def _to_host_target(args, kwargs) -> bool:
    """``.to("cpu")`` with the device as a string, blocking: a ``torch.device``
    is most often a tensor's (``.to(x.device)``), the host's only on a CPU run
    (a device run sees the copy itself); ``non_blocking=True`` copies into
    pinned memory without waiting."""
    if kwargs.get("non_blocking") or any(a is True for a in args[2:4]):
        return False
    device = kwargs.get("device")
    return (isinstance(device, str) and _is_host_device(device)) or any(
        isinstance(a, str) and _is_host_device(a) for a in args[1:3])


class _Functions(TorchFunctionMode):
    def __init__(self, finder):
        super().__init__()
        self.finder = finder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        finder = self.finder
        name = getattr(func, "__name__", "")
        if name not in _WATCHED_CALLS:  # most calls: only named for the operators below them
            finder._calls.append(name)
            try:
                return func(*args, **kwargs)
            finally:
                finder._calls.pop()
        kind = _HOST_CALLS.get(name)
        host = _on_host(args[:1])
        if kind is None and name == "to" and _to_host_target(args, kwargs):
            kind = "to_host"
        elif kind is None and name == "one_hot":
            # On the CPU one_hot checks the classes' range with .item(); on a GPU it does not, and
            # reads the largest class (one sync) only without num_classes.
            classes = kwargs.get("num_classes", args[1] if len(args) > 1 else -1)
            kind = "item" if classes < 0 else "quiet"
        elif kind is None and name in _FROM_DATA:
            device = kwargs.get("device", args[2] if name == "as_tensor" and len(args) > 2 else None)
            if _copied_to_a_device(args, device):
                kind, host = "from_python", not _is_device(device)
        if name in ("backward", "grad"):
            finder._backward_site = _attribute(_python_frames(sys._getframe(1)))
        if kind is not None and args and finder._copied(args[0]):
            kind = "quiet"  # x.cpu().numpy(): the copy is counted
        if kind is not None and kind != "quiet" and not finder._suppress:
            finder._record(kind, _CALLS[kind].get(name, name), host)
        if kind is not None:
            finder._suppress += 1
        finder._calls.append(name)
        if name == "__setitem__":
            finder._lifted = False
        try:
            out = func(*args, **kwargs)
            if kind == "to_host" and isinstance(out, torch.Tensor):
                finder._copies[id(out)] = (weakref.ref(out), _caller_line())
            return out
        finally:
            finder._calls.pop()
            if name == "__setitem__":
                finder._lifted = False
            if kind is not None:
                finder._suppress -= 1


class _Operators(TorchDispatchMode):
    def __init__(self, finder):
        super().__init__()
        self.finder = finder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        finder = self.finder
        if not finder._device_seen and (not _on_host(args) or _is_device(kwargs.get("device"))):
            finder._device_seen = True
        if func not in _MAY_SYNC and not (finder._calls and finder._calls[-1] in ("__setitem__", "__getitem__")):
            return func(*args, **kwargs)  # most operators: nothing to look at
        if not finder._suppress:
            if finder._calls and finder._calls[-1] in ("__setitem__", "__getitem__") and \
                    func.overloadpacket.__name__ == "lift_fresh":
                if args[0].dim() == 0:
                    finder._lifted = True  # x[...] = 0.5: the value, a host scalar
                else:  # x[[0, 2]]: a Python list made a host tensor, copied to x's device
                    finder._record("from_python", "a Python list in x[...]", False)
            kind = _classify(func, args, kwargs, finder._lifted)
            if kind == "item" and finder._copied(args[0]):
                kind = None  # x.cpu().item(): the copy is counted
            if kind is not None:
                finder._record(kind, finder._op_name(kind, func), _on_host(args))
        return func(*args, **kwargs)


class find_syncs:
    """Records every operation of the code it wraps that would make the host
    wait for a GPU or give a data-dependent shape, by site.

        with syncfree.find_syncs() as report:
            step(images, targets)
        print(report)               # the table: count, operation, where, why, instead
        report.assert_none()        # or assert not report

        @syncfree.find_syncs()      # as a decorator: each call adds to .report
        def step(...): ...

    Runs the code as it is, on the CPU or any device, eagerly (a function
    compiled with ``torch.compile`` is seen only where it runs eagerly). What
    it finds: ``nonzero`` and what calls it (``torch.where(mask)``,
    ``argwhere``, boolean-mask indexing and assignment, ``masked_select``),
    ``unique``, ``repeat_interleave`` without ``output_size``, a tensor read
    as a Python number (``.item()``, ``int(t)``, ``float(t)``, ``bool(t)``,
    ``if t:``), ``.tolist()``, ``.numpy()``, copies to the host, tensors made
    from Python data, ``randperm``, ``torch.equal``, ``bincount``, ``histc``
    without a range and torchvision's ``nms`` (:data:`KINDS`), in forward and
    backward. ``ignore``: kinds not to record.
    """

    def __init__(self, fn=None, *, ignore=()):
        if fn is not None:
            raise TypeError("syncfree.find_syncs: decorate with @syncfree.find_syncs() (with parentheses), or "
                            f"pass only keywords (ignore=...); got a positional {type(fn).__name__}")
        ignore = _kinds(ignore, "ignore")
        self.ignore = frozenset(ignore)
        self.report = Report()
        self._modes: List[Any] = []
        self._start()

    def _start(self) -> None:
        """The state of one inspected block."""
        self._suppress = 0  # > 0: inside a call recorded by the function mode
        self._calls: List[str] = []  # the function mode's calls, innermost last
        self._lifted = False  # the value of the x[...] = v being run is a Python scalar
        self._device_seen = False  # a tensor on a device (or made there) went through the step
        self._events: List[tuple] = []
        self._copies: Dict[int, Any] = {}  # id -> (weakref, line) of the tensors a recorded copy made
        self._backward_site = None  # (where, library) of the last .backward() / autograd.grad call

    def _op_name(self, kind: str, func) -> str:
        call = self._calls[-1] if self._calls else None
        node = _current_autograd_node()
        if node is not None:
            return f"{func.namespace}::{func.overloadpacket.__name__} in {node.name()}"
        named = _CALLS.get(kind, {}).get(call)
        if named is not None:
            return named
        op = f"{func.namespace}::{func.overloadpacket.__name__}"
        if call and not call.startswith("__"):
            return f"{call} ({op})"
        return f"{op} in {call}" if call else op

    def _record(self, kind: str, op: str, host: bool) -> None:
        """Keeps an event until the block ends (``host``: on host tensors only,
        which is no sync where the step runs on a device)."""
        if kind in self.ignore:
            return
        frames = list(_python_frames(sys._getframe(1)))
        if kind == "item" and any(f[0].startswith(_OPTIM_DIR) for f in frames):
            return  # torch.optim's step counters: host tensors (unless capturable or fused), read without a wait
        where, library = _attribute(frames)
        backward = _current_autograd_node() is not None
        if backward and where is None and self._backward_site is not None:
            where, library = self._backward_site  # autograd's device threads: no Python frame of the step
        self._events.append((kind, op, where, library, backward, host))

    def _copied(self, t) -> bool:
        """Whether ``t`` came from a copy to the host recorded already on the
        same line (reading it, as ``x.cpu().numpy()`` does, waits for nothing
        more; on a CPU run, ``x.cpu()`` is ``x`` itself, whose later reads
        stand for a device tensor's again)."""
        copy = self._copies.get(id(t))
        return copy is not None and copy[0]() is t and copy[1] == _caller_line()

    def _report_events(self) -> None:
        """The block's events into the report. A CPU run stands for a device
        run: all of them. Where the step ran on a device, the operations on
        host tensors only are not syncs and are left out."""
        events, self._events = self._events, []
        for kind, op, where, library, backward, host in events:
            if not (host and self._device_seen):
                self.report._add(kind, op, where, library, backward)

    def __enter__(self) -> Report:
        if self._modes:
            raise RuntimeError("syncfree.find_syncs: this finder is already active; make one per `with`")
        self._start()
        self._modes = [_Operators(self), _Functions(self)]
        for m in self._modes:
            m.__enter__()
        return self.report

    def __exit__(self, *exc) -> None:
        modes, self._modes = self._modes, []
        for m in reversed(modes):
            m.__exit__(*exc)
        self._report_events()

    def __call__(self, fn: Callable) -> Callable:
        """``fn`` under this finder at every call (a call from inside an
        inspected call, recursion, runs as it is: it is inspected already)."""
        if not callable(fn):
            raise TypeError(f"syncfree.find_syncs: expected a function to decorate, got {type(fn).__name__}")

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            if self._modes:
                return fn(*args, **kwargs)
            with self:
                return fn(*args, **kwargs)

        wrapped.report = self.report
        return wrapped


def find_graph_breaks(fn: Callable, *args, **kwargs) -> Report:
    """The graph breaks of ``torch.compile(fn)(*args, **kwargs)``, by
    ``torch._dynamo.explain`` (which runs ``fn`` once, compiling it, and
    resets dynamo's caches before and after): one entry per break reason,
    at its user and library frames, in the same report format as
    :class:`find_syncs`' (``graph_count`` and ``graph_break_count`` set).
    To trace ``backward`` as well, call it under
    ``torch._dynamo.config.patch(trace_autograd_ops=True)`` where this torch
    has that setting."""
    if not callable(fn):
        raise TypeError(f"syncfree.find_graph_breaks: fn must be callable, got {type(fn).__name__}")
    quiet = logging.getLogger("torch._dynamo")  # its warning per break: the report says it
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        explained = torch._dynamo.explain(fn)(*args, **kwargs)
    finally:
        quiet.setLevel(level)
    report = Report("graph breaks")
    report.graph_count = explained.graph_count
    report.graph_break_count = explained.graph_break_count
    for reason in explained.break_reasons:
        frames = [(f.filename, f.lineno, f.name) for f in reversed(reason.user_stack or [])]
        where, library = _attribute(frames)
        text = " ".join(str(reason.reason).split())
        report._add("graph_break", _break_summary(text), where, library, False, detail=text)
    return report
