"""The static Faster R-CNN step under DistributedDataParallel.

Two processes on the CPU (the gloo backend), launched as subprocesses of
this file (``python test_ddp.py --worker RANK ...``) on a free
port chosen at run time, each wrap ``make_static(fasterrcnn_mobilenet_v3_large_fpn)``
in ``DistributedDataParallel`` and ``torch.compile`` the wrapped model. The
backend is ``aot_eager``: dynamo and AOT autograd (the graphs, the
DDPOptimizer's split at the gradient buckets, the compiled backward) as with
inductor, without inductor's C++ code generation, which takes minutes on two
small CPU cores; the graphs are what DDP and the static step must get right.
The launcher kills both processes after ``TIMEOUT_S`` and the process group
times out after ``DIST_TIMEOUT_S``: a stuck collective fails the test, it
never hangs.

One launch (the compilation is the expensive part), both ranks with
deterministic sampling: every anchor and every proposal labelled positive or
negative is sampled (``batch_size_per_image`` at least their number,
``positive_fraction = 1.0``), so that a step's losses do not depend on
random draws.

- Gradients: the first compiled DDP backward, on a global batch split in
  two halves, gives the gradients that a single process gets, eager, from
  ``0.5 * (L(half_1) + L(half_2))`` on the same weights: DDP averages the
  per-rank gradients. That is not the gradient of one loss over the whole
  batch: the backbone's batch norm normalizes each rank's half with its own
  statistics, and each loss is normalized by the number of items sampled in
  its own half.
- Training: ``TRAIN_STEPS`` SGD steps, each rank on its own half; the losses
  are finite, the parameters moved and are identical on both ranks, and no
  step after the first recompiles (batches with different numbers of
  ground-truth boxes, padded to ``MAX_BOXES``).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

import pytest
import torch
from helpers.checks import torchvision_or_skip
from helpers.detection import take_everything

# Whole models compiled (models: deselected on the legs that do not run them,
# tests/legs.txt); about a minute and a half on 2 cores (slow).
pytestmark = [pytest.mark.models, pytest.mark.slow]

WORLD = 2
IMAGE = 64              # H = W; the backbone's last stage is 2 x 2 (batch norm needs > 1 value per channel)
PER_RANK = 2            # images per rank; the global batch is WORLD * PER_RANK
MAX_BOXES = 3
NUM_CLASSES = 3
POST_NMS = 32           # rpn post_nms_top_n in training: the RoI heads' candidates are POST_NMS + MAX_BOXES
TRAIN_STEPS = 3
LR = 0.01
TIMEOUT_S = 180         # the launcher's limit for both processes (measured: 60 to 105 s on 2 busy cores)
DIST_TIMEOUT_S = 120    # gloo's limit for one collective (and for the rendezvous)

# DDP's gradients against the single process's, float32, elementwise:
# |g_ddp - g_ref| <= RTOL * |g_ref| + ATOL_SCALE * max |g_ref| (the largest
# gradient of any parameter). The two compute the same sums in different
# orders (compiled vs eager graphs, one process vs gloo's average); measured:
# at most 1.2e-6 off with gradients up to 0.64, i.e. 2e-6 of the scale, on
# the depthwise convolutions' weights (sums over every pixel of the batch).
RTOL = 1e-4
ATOL_SCALE = 1e-5


# ---- the launcher (pytest's process) -----------------------------------------

def _require_gloo():
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("this torch is built without torch.distributed")
    if not dist.is_gloo_available():
        pytest.skip("this torch's torch.distributed has no gloo backend")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path, chars=6000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return "(no output)"


def _launch(out_dir):
    """Runs the two workers; returns rank 0's results. Fails (never hangs) on a
    worker's error or after TIMEOUT_S, with both workers' output."""
    import syncfree

    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(syncfree.__file__)))
    tests_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # for `helpers`
    env["PYTHONPATH"] = os.pathsep.join([package_root, tests_root] + [p for p in [env.get("PYTHONPATH")] if p])
    env["OMP_NUM_THREADS"] = "1"  # one core each
    port = _free_port()
    logs = [os.path.join(out_dir, f"rank{r}.log") for r in range(WORLD)]
    procs = []
    for rank in range(WORLD):
        with open(logs[rank], "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker", str(rank), "--port", str(port),
                 "--out", out_dir], stdout=log, stderr=subprocess.STDOUT, env=env))
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for proc in procs:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        timed_out = [p for p in procs if p.poll() is None]
        for proc in timed_out:
            proc.kill()
        for proc in procs:
            proc.wait()
    report = "\n".join(f"--- rank {r} (exit {p.returncode}):\n{_tail(logs[r])}" for r, p in enumerate(procs))
    if timed_out:
        pytest.fail(f"the DDP workers did not finish in {TIMEOUT_S} s; killed\n{report}")
    if any(p.returncode != 0 for p in procs):
        pytest.fail(f"a DDP worker failed\n{report}")
    with open(os.path.join(out_dir, "results.json")) as f:
        results = json.load(f)
    results["log"] = report
    return results


@pytest.fixture
def ddp_run(tmp_path_factory):
    torchvision_or_skip()
    _require_gloo()
    out_dir = str(tmp_path_factory.mktemp("ddp"))
    start = time.monotonic()
    results = _launch(out_dir)
    results["wall_s"] = time.monotonic() - start
    results["dir"] = out_dir
    yield results
    for name in os.listdir(out_dir):  # the parameters and gradients: about 80 MB a file
        if name.endswith(".pt"):
            os.remove(os.path.join(out_dir, name))


# One test for the one launch: pytest-xdist would run two tests that share the
# module's fixture on two workers, each launching its own pair of processes.
def test_ddp_gradients_equal_single_process_then_ranks_train_identically(ddp_run):
    check_gradients_equal_single_process_mean_of_halves(ddp_run)
    check_ranks_train_and_stay_identical(ddp_run)


def check_gradients_equal_single_process_mean_of_halves(ddp_run):
    grads = torch.load(os.path.join(ddp_run["dir"], "grads.pt"))
    ddp, reference = grads["ddp"], grads["reference"]
    assert ddp.keys() == reference.keys() and len(ddp) > 100  # every parameter of the detector has a gradient
    # The equality is not vacuous: the losses sample every labelled item and
    # give gradients to the backbone, the RPN and both RoI heads.
    for prefix in ("backbone.", "rpn.", "roi_heads.box_head.", "roi_heads.box_predictor."):
        assert any(name.startswith(prefix) and float(g.abs().max()) > 0 for name, g in reference.items()), prefix
    # Each rank's half has positives in both heads (else a head's box loss is 0 there).
    for per_rank in ddp_run["losses"]:
        assert all(v > 0 for v in per_rank[0].values()), per_rank[0]
    atol = ATOL_SCALE * max(float(g.abs().max()) for g in reference.values())
    for name, g in reference.items():
        torch.testing.assert_close(ddp[name], g, rtol=RTOL, atol=atol, msg=lambda m, name=name: f"{name}: {m}")
    assert ddp_run["compiled_frames"] >= 1  # the DDP step ran compiled


def check_ranks_train_and_stay_identical(ddp_run):
    losses = ddp_run["losses"]  # [rank][step] -> {name: value}
    assert len(losses) == WORLD and all(len(per_rank) == TRAIN_STEPS for per_rank in losses)
    for per_rank in losses:
        for step in per_rank:
            assert set(step) == {"loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"}
            assert all(torch.isfinite(torch.tensor(v)) for v in step.values()), step
    # Each rank trained on its own data: the ranks' losses differ.
    assert all(losses[0][i] != losses[1][i] for i in range(TRAIN_STEPS))
    params = [torch.load(os.path.join(ddp_run["dir"], f"params{r}.pt")) for r in range(WORLD)]
    assert params[0].keys() == params[1].keys()
    different = [name for name in params[0] if not torch.equal(params[0][name], params[1][name])]
    assert not different, f"parameters differ across ranks after {TRAIN_STEPS} steps: {different[:5]}"
    # And the steps changed them (the optimizer ran).
    assert ddp_run["param_change"] > 0
    assert ddp_run["compiled_frames"] >= 1
    assert ddp_run["recompiled"] is False, "a step after the first recompiled"


# ---- the workers ---------------------------------------------------------------

def _build_model():
    """fasterrcnn_mobilenet_v3_large_fpn, random weights (seed 0), made static,
    with deterministic sampling."""
    import torchvision

    import syncfree.detection as sf_det

    torch.manual_seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=NUM_CLASSES, min_size=IMAGE, max_size=IMAGE,
        rpn_pre_nms_top_n_train=2 * POST_NMS, rpn_post_nms_top_n_train=POST_NMS)
    # Every labelled anchor (at most all of them) and every labelled candidate
    # (proposals and ground truth) is sampled.
    take_everything(model, torch.zeros(1, 3, IMAGE, IMAGE), MAX_BOXES)
    return sf_det.make_static(model, (IMAGE, IMAGE), MAX_BOXES).train()


def _global_batch(seed: int):
    """WORLD * PER_RANK images and padded targets, 1 to MAX_BOXES boxes each."""
    import syncfree.detection as sf_det

    gen = torch.Generator().manual_seed(seed)
    images = torch.rand(WORLD * PER_RANK, 3, IMAGE, IMAGE, generator=gen)
    targets = []
    for _ in range(WORLD * PER_RANK):
        n = int(torch.randint(1, MAX_BOXES + 1, (1,), generator=gen))
        xy = torch.rand(n, 2, generator=gen) * IMAGE * 0.6
        wh = torch.rand(n, 2, generator=gen) * IMAGE * 0.3 + 8
        targets.append(dict(boxes=torch.cat([xy, (xy + wh).clamp(max=IMAGE)], 1),
                            labels=torch.randint(1, NUM_CLASSES, (n,), generator=gen)))
    return images, sf_det.pad_targets(targets, MAX_BOXES)


def _half(batch, rank: int):
    images, targets = batch
    part = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    return images[part], {k: v[part] for k, v in targets.items()}


def _compiled_ddp(model):
    import torch._dynamo.testing
    from torch.nn.parallel import DistributedDataParallel

    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    return torch.compile(DistributedDataParallel(model), backend=counter), counter


def _run(rank: int, out_dir: str) -> dict:
    import copy

    log = _Clock(rank)
    model = _build_model()
    reference = copy.deepcopy(model) if rank == 0 else None  # the same weights, before any step
    step, counter = _compiled_ddp(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    initial = [p.detach().clone() for p in model.parameters()]
    log("model built")
    # Step 0: the global batch of seed 1, split in halves. Steps 1...: each
    # rank's half of another batch.
    losses, recompiled, grads = [], False, None
    for i in range(TRAIN_STEPS):
        images, targets = _half(_global_batch(seed=1 + i), rank)
        try:
            # After the first step, a recompilation raises: the step is static.
            with torch._dynamo.config.patch(error_on_recompile=i > 0):
                step_losses = step(images, targets)
        except torch._dynamo.exc.RecompileError:
            recompiled = True
            step_losses = step(images, targets)
        optimizer.zero_grad()
        sum(step_losses.values()).backward()  # DDP: each rank's gradients become the mean of both ranks'
        if i == 0 and rank == 0:
            grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        optimizer.step()
        losses.append({k: float(v.detach()) for k, v in step_losses.items()})
        log(f"step {i}")
    change = sum(float((p.detach() - p0).abs().sum()) for p, p0 in zip(model.parameters(), initial))
    torch.save({n: p.detach() for n, p in model.named_parameters()}, os.path.join(out_dir, f"params{rank}.pt"))
    if rank == 0:
        # The single process: 0.5 * (L(half_1) + L(half_2)), eager, on the initial weights.
        batch = _global_batch(seed=1)
        total = sum(0.5 * sum(reference(*_half(batch, half)).values()) for half in range(WORLD))
        total.backward()
        torch.save({"ddp": grads, "reference": {n: p.grad for n, p in reference.named_parameters()}},
                   os.path.join(out_dir, "grads.pt"))
        log("single-process reference")
    return {"losses": losses, "frames": counter.frame_count, "recompiled": recompiled, "change": change}


class _Clock:
    """Prints the time of each phase of a worker (in its log, shown on failure)."""

    def __init__(self, rank: int) -> None:
        self.rank, self.last = rank, time.monotonic()

    def __call__(self, what: str) -> None:
        now = time.monotonic()
        print(f"rank {self.rank}: {what}: {now - self.last:.1f} s", flush=True)
        self.last = now


def _worker(rank: int, port: int, out_dir: str) -> None:
    import datetime

    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=DIST_TIMEOUT_S))
    try:
        result = _run(rank, out_dir)
        gathered = [None] * WORLD
        dist.all_gather_object(gathered, result)
        if rank == 0:
            results = {
                "losses": [g["losses"] for g in gathered],
                "compiled_frames": min(g["frames"] for g in gathered),
                "recompiled": any(g["recompiled"] for g in gathered),
                "param_change": min(g["change"] for g in gathered),
            }
            with open(os.path.join(out_dir, "results.json"), "w") as f:
                json.dump(results, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a worker of tests/python/detection/test_ddp.py")
    parser.add_argument("--worker", type=int, required=True, help="rank")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    _worker(args.worker, args.port, args.out)
