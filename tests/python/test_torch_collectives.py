"""The torch.distributed collectives of orthojit.DistributedMuon (orthojit.distributed._TorchCollectives)
keep every tensor they hand to torch.distributed referenced until the backend's worker thread has
let go of it, so that the worker's release is never the last one. When it was, the worker had to
take the GIL to free the Python object, and at interpreter shutdown that ended torchrun jobs with
std::terminate (torch 2.15, gloo: a backtrace from ProcessGroupGloo::runLoop through
TensorImpl::decref_pyobject; bench/RESULTS.md, twenty-fifth session).

The stand-in for torch.distributed below holds each tensor it is given the way a backend's work
does: a C++ reference (a holder tensor's .grad), which Python cannot see but Tensor._use_count()
can; `release()` is the worker finishing. Whether the worker's release was the last is then
visible from Python: the tensor's Python object dies with it."""
import gc
import threading
import time
import weakref

import pytest

torch = pytest.importorskip("torch")
from orthojit import distributed  # noqa: E402
from orthojit.distributed import _TorchCollectives  # noqa: E402

WORLD = 2


class FakeDistributed:
    """What _TorchCollectives calls of torch.distributed, on one rank of two; each collective's
    tensors are held as a backend's work holds them until release()."""

    class group:  # noqa: N801 - torch.distributed.group
        WORLD = object()

    def __init__(self, refuses_reduce_scatter=False):
        self.holders = []
        self.seen = []  # weak references to every tensor handed over
        self.calls = []
        self.refuses_reduce_scatter = refuses_reduce_scatter
        self.peer_sends = None

    def _hold(self, tensor):
        holder = torch.zeros_like(tensor)
        holder.grad = tensor  # a C++ reference to the tensor's TensorImpl
        self.holders.append(holder)
        self.seen.append(weakref.ref(tensor))

    def release(self):
        for holder in self.holders:
            holder.grad = None
        self.holders = []
        gc.collect()

    get_rank = staticmethod(lambda group=None: 0)
    get_world_size = staticmethod(lambda group=None: WORLD)
    get_backend = staticmethod(lambda group=None: "gloo")
    get_global_rank = staticmethod(lambda group, rank: rank)

    def all_reduce(self, tensor, group=None):
        self.calls.append("all_reduce")
        tensor.mul_(WORLD)
        self._hold(tensor)

    def all_gather(self, blocks, source, group=None):
        for block in blocks:
            block.copy_(source)
            self._hold(block)
        self._hold(source)

    def broadcast(self, tensor, src, group=None):
        self._hold(tensor)

    def reduce_scatter_tensor(self, destination, source, group=None):  # gloo in recent PyTorch
        self.calls.append("reduce_scatter_tensor")
        if self.refuses_reduce_scatter:  # gloo in older PyTorch (1.13's message)
            raise RuntimeError("ProcessGroup gloo does not support _reduce_scatter_base")
        destination.copy_(source[:destination.numel()] * WORLD)
        self._hold(destination)
        self._hold(source)

    isend, irecv = object(), object()

    class P2POp:
        def __init__(self, op, tensor, peer, group=None):
            self.op, self.tensor, self.peer = op, tensor, peer

    class _Request:
        def wait(self):
            pass

    def batch_isend_irecv(self, ops):
        # what the other rank sends: the test's `peer_sends` (a function of what this rank sends)
        self.calls.append("batch_isend_irecv")
        sent = [op.tensor for op in ops if op.op is self.isend]
        for op in ops:
            if op.op is self.irecv and self.peer_sends is not None:
                op.tensor.copy_(self.peer_sends(*sent))
            self._hold(op.tensor)
        return [self._Request() for _ in ops]


CALLS = {
    "all_reduce": lambda c: c.all_reduce(torch.ones(6)),
    "reduce_scatter": lambda c: c.reduce_scatter(torch.ones(6), torch.zeros(3)),
    "all_gather": lambda c: c.all_gather(torch.ones(3), torch.zeros(6)),
    "broadcast": lambda c: c.broadcast(torch.ones(6), 0),
    "exchange": lambda c: c.exchange([(1, torch.ones(3))], [(1, torch.zeros(3))]),
}


@pytest.fixture(autouse=True)
def brief_last_wait(monkeypatch):
    # Most tests end with the stand-in still holding the last call's tensors: no 5 s wait each,
    # and what the collectives then leave referenced until exit is let go of after the test.
    monkeypatch.setattr(_TorchCollectives, "_LAST_WAIT_SECONDS", 0.01)
    before = len(distributed._HELD_UNTIL_EXIT)
    yield
    gc.collect()
    del distributed._HELD_UNTIL_EXIT[before:]


def collectives(**fake_options):
    fake = FakeDistributed(**fake_options)
    return _TorchCollectives(fake.group.WORLD, dist=fake), fake


@pytest.mark.parametrize("call", list(CALLS))
def test_the_worker_never_lets_go_of_a_tensor_last(call):
    c, fake = collectives()
    CALLS[call](c)  # the caller's references are gone when this returns
    gc.collect()
    handed = list(fake.seen)
    assert handed and all(w() is not None for w in handed)
    fake.release()  # the worker finishes after the call returned
    alive = [w() is not None for w in handed]
    assert all(alive), f"{call}: the worker's release freed {alive.count(False)} of {len(alive)} tensors' Python objects (it was the last reference)"
    CALLS["broadcast"](c)  # the next call lets them go, on this thread
    gc.collect()
    assert all(w() is None for w in handed), f"{call}: tensors kept after the worker let go of them"


@pytest.mark.skipif(not hasattr(torch.Tensor, "_use_count"), reason=f"torch {torch.__version__} has no Tensor._use_count(): the tensors are kept for one call")
def test_tensors_the_worker_still_holds_stay_kept_across_calls():
    c, fake = collectives()
    CALLS["all_gather"](c)
    first = list(fake.seen)
    fake.seen.clear()
    for _ in range(3):  # later calls while the worker still holds the first one's tensors
        CALLS["all_reduce"](c)
    gc.collect()
    assert all(w() is not None for w in first)
    fake.release()
    assert all(w() is not None for w in first), "the worker's release was the last reference"
    CALLS["all_reduce"](c)
    gc.collect()
    assert all(w() is None for w in first + fake.seen[:-1])


@pytest.mark.skipif(not hasattr(torch.Tensor, "_use_count"), reason=f"torch {torch.__version__} has no Tensor._use_count()")
def test_a_worker_that_never_lets_go_does_not_grow_what_is_kept():
    c, _ = collectives()
    for _ in range(50):
        CALLS["reduce_scatter"](c)  # each keeps a full-size sum
    assert len(c._kept) <= _TorchCollectives._KEPT_CALLS


@pytest.mark.parametrize("refuses", [False, True])
def test_reduce_scatter_is_gloos_own_where_it_has_one(refuses):
    # Recent gloo reduce-scatters; older gloo refuses, and then every call is a ring of
    # point-to-point transfers (half an all-reduce's traffic, no full-size sum), without asking
    # again. Here the other rank (rank 1 of 2) holds twice this rank's source: in the one round
    # of the ring it sends its part of block 0 and receives this rank's part of block 1.
    c, fake = collectives(refuses_reduce_scatter=refuses)
    for step in range(3):
        source = torch.arange(6, dtype=torch.float32) + step
        destination = torch.zeros(3)
        if refuses:
            fake.peer_sends = lambda sent: (assert_equal(sent, source[3:]), 2 * source[:3])[1]
        c.reduce_scatter(source, destination)
        expected = source[:3] * 3 if refuses else source[:3] * WORLD  # the stand-in's gloo doubles
        assert torch.equal(destination, expected)
    expected = ["reduce_scatter_tensor"] + ["batch_isend_irecv"] * 3 if refuses else ["reduce_scatter_tensor"] * 3
    assert fake.calls == expected


def test_the_rings_move_nothing_for_empty_blocks_and_refuse_sizes_that_do_not_divide():
    c, fake = collectives(refuses_reduce_scatter=True)
    c.gloo_reduce_scatter = False
    c.reduce_scatter(torch.zeros(0), torch.zeros(0))
    c.all_gather(torch.zeros(0, dtype=torch.uint8), torch.zeros(0, dtype=torch.uint8))
    assert fake.calls == []
    with pytest.raises(ValueError, match="reduce_scatter: 7 elements are not 2 blocks of 3"):
        c.reduce_scatter(torch.zeros(7), torch.zeros(3))
    with pytest.raises(ValueError, match="all_gather: 5 elements are not 2 blocks of 3"):
        c.all_gather(torch.zeros(3), torch.zeros(5))


def assert_equal(a, b):
    assert torch.equal(a, b), (a, b)


def test_reduce_scatter_lets_other_errors_through():
    c, fake = collectives()

    def broken(destination, source, group=None):
        raise RuntimeError("Connection closed by peer")

    fake.reduce_scatter_tensor = broken
    with pytest.raises(RuntimeError, match="Connection closed"):
        c.reduce_scatter(torch.ones(6), torch.zeros(3))
    assert c.gloo_reduce_scatter


@pytest.mark.skipif(not hasattr(torch.Tensor, "_use_count"), reason=f"torch {torch.__version__} has no Tensor._use_count()")
def test_the_collectives_going_wait_for_the_worker(monkeypatch):
    monkeypatch.setattr(_TorchCollectives, "_LAST_WAIT_SECONDS", 5.0)
    # The end of a job: the optimizer (and these collectives) go while gloo's worker still holds
    # the last all-gather's tensors. They must go only after the worker let go of them.
    c, fake = collectives()
    CALLS["all_gather"](c)
    handed = list(fake.seen)
    worker = threading.Timer(0.2, fake.release)
    worker.start()
    start = time.monotonic()
    del c
    gc.collect()
    waited = time.monotonic() - start
    worker.join()
    assert waited >= 0.15, f"the collectives went after {waited:.3f} s, while the worker still held their tensors"
    assert all(w() is None for w in handed)


@pytest.mark.skipif(not hasattr(torch.Tensor, "_use_count"), reason=f"torch {torch.__version__} has no Tensor._use_count()")
def test_tensors_a_worker_never_lets_go_of_stay_referenced():
    c, fake = collectives()
    CALLS["broadcast"](c)
    handed = list(fake.seen)
    del c
    gc.collect()
    fake.release()  # much later: the worker's release must not be the last
    assert all(w() is not None for w in handed)
