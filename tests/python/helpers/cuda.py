"""CUDA checks shared by the samplers' tests: graph capture, and generators
left alone by rejected calls."""
import pytest
import torch


def torch_minor():
    return tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])


# torch 2.14 and newer register every generator used during a capture with the
# graph (and deprecate register_generator_state); older releases need a
# generator other than the default one registered before the capture begins.
NEEDS_REGISTRATION = torch_minor() < (2, 14)


def check_replays_draw_fresh_samples_matching_eager(sample, check, kind):
    """Captures ``sample(generator) -> (indices, valid)`` in a CUDA graph, drawing from
    the default CUDA generator (``kind`` "default") or from a generator of its own
    ("explicit"): every replay draws fresh samples that ``check(indices, valid)``
    accepts, and eager calls from the same generator state draw the same ones."""
    torch.cuda.manual_seed(13)
    gen = torch.Generator(device="cuda").manual_seed(14) if kind == "explicit" else None

    def call():
        return sample(gen)

    def get_state():
        return gen.get_state() if gen is not None else torch.cuda.get_rng_state()

    def set_state(state):
        if gen is not None:
            gen.set_state(state)
        else:
            torch.cuda.set_rng_state(state)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            call()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    if gen is not None and NEEDS_REGISTRATION:
        graph.register_generator_state(gen)
    with torch.cuda.graph(graph):
        out_idx, out_valid = call()
    state = get_state()
    default_state = torch.cuda.get_rng_state()
    replays = []
    for _ in range(3):
        graph.replay()
        replays.append((out_idx.clone(), out_valid.clone()))
    # Fresh samples on every replay.
    assert not torch.equal(replays[0][0], replays[1][0]) and not torch.equal(replays[1][0], replays[2][0])
    if gen is not None:  # a graph drawing from another generator leaves the default one alone
        assert torch.equal(torch.cuda.get_rng_state(), default_state)
    for idx, valid in replays:
        check(idx, valid)
    # Eager calls from the same generator state draw the same samples.
    set_state(state)
    for idx, valid in replays:
        e_idx, e_valid = call()
        assert torch.equal(idx, e_idx) and torch.equal(valid, e_valid)


def check_rejected_calls_leave_the_generators_unchanged(rejected, accepted):
    """``rejected``: pairs (call(generator), message) of calls on CUDA inputs that
    raise a RuntimeError matching ``message``; ``accepted(generator)``: a call on
    them that succeeds. Neither a CUDA generator of the call's own nor the
    default one is drawn from by a rejected call; a CPU generator is rejected
    and not drawn from either; the accepted call does advance both (the checks
    are not vacuous)."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    torch.cuda.manual_seed(6)
    gen_state, default_state = gen.get_state(), torch.cuda.get_rng_state()
    for g in [gen, None]:
        for call, message in rejected:
            with pytest.raises(RuntimeError, match=message):
                call(g)
        assert torch.equal(gen.get_state(), gen_state)
        assert torch.equal(torch.cuda.get_rng_state(), default_state)
    # A CPU generator for CUDA labels is rejected, and not drawn from.
    cpu_gen = torch.Generator().manual_seed(7)
    cpu_state = cpu_gen.get_state()
    with pytest.raises(RuntimeError, match="generator"):
        accepted(cpu_gen)
    assert torch.equal(cpu_gen.get_state(), cpu_state)
    # An accepted call does advance them.
    accepted(gen)
    accepted(None)
    assert not torch.equal(gen.get_state(), gen_state)
    assert not torch.equal(torch.cuda.get_rng_state(), default_state)
