"""One rank of a test job (started by ftcomm-run from test_backend.py).

    worker.py SCENARIO

The default group is ftcomm's (init_process_group("ftcomm"), rendezvous from
the FTCOMM_* environment); a gloo group of the same ranks in the same
process gives the reference results. Every rank prints one line
"PASS <scenario> rank <r> ..." when all its checks held; a failed check
raises, so the rank exits non-zero and ftcomm-run with it.
"""
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ftcomm
import ftcomm.torch

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.uint8]
DTYPES = FLOATS + INTS
OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
}


class Job:
    def __init__(self):
        dist.init_process_group("ftcomm")
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self.gloo = dist.new_group(backend="gloo")
        self.checks = 0
        self.vs_gloo = 0

    def data(self, dtype, n, salt=0, op="sum", rank=None):
        """Small integers: exact in every dtype and any reduction order."""
        r = self.rank if rank is None else rank
        i = torch.arange(n, dtype=torch.int64)
        if op == "product":
            v = 1 + (i + r + salt) % 2
        else:
            v = (i * 3 + r * 5 + salt) % 7
        return v.to(dtype)

    def same(self, got, want, what, exact=True):
        self.checks += 1
        if exact:
            ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        else:
            ok = got.shape == want.shape and torch.allclose(got.double(), want.double(), rtol=1e-2, atol=1e-2)
        if not ok:
            raise AssertionError(f"rank {self.rank}: {what}: ftcomm gave {got.tolist()}, expected {want.tolist()}")

    def gloo_or(self, fn, reference):
        """gloo's result, or the local reference where gloo cannot do it."""
        try:
            out = fn()
            self.vs_gloo += 1
            return out
        except (RuntimeError, ValueError, TypeError):
            return reference()

    def done(self, scenario, extra=""):
        print(f"PASS {scenario} rank {self.rank} of {self.size}: {self.checks} checks, "
              f"{self.vs_gloo} against gloo{extra}", flush=True)
        dist.destroy_process_group()


def expected_reduce(job, dtype, n, op, salt=0):
    xs = [job.data(dtype, n, salt, op, r).to(torch.int64) for r in range(job.size)]
    s = torch.stack(xs)
    if op in ("sum", "avg"):
        v = s.sum(0)
    elif op == "product":
        v = s.prod(0)
    elif op == "min":
        v = s.min(0).values
    else:
        v = s.max(0).values
    if op == "avg":
        if dtype.is_floating_point:
            return (v.double() / job.size).to(dtype)
        v = torch.div(v, job.size, rounding_mode="trunc")
    if dtype == torch.uint8:
        v = v % 256
    return v.to(dtype)


def scenario_ops(job):
    r, n = job.rank, job.size
    count = 37  # not a multiple of anything

    # all_reduce: every op x dtype, against gloo (AVG: gloo has none, its SUM / size).
    for dtype in DTYPES:
        for name, op in OPS.items():
            t = job.data(dtype, count, op=name)
            dist.all_reduce(t, op=op)
            def via_gloo():
                u = job.data(dtype, count, op=name)
                dist.all_reduce(u, op=dist.ReduceOp.SUM if name == "avg" else op, group=job.gloo)
                if name == "avg":
                    u = (u.double() / n).to(dtype) if dtype.is_floating_point else torch.div(u, n, rounding_mode="trunc")
                return u
            want = job.gloo_or(via_gloo, lambda: expected_reduce(job, dtype, count, name))
            job.same(t, want, f"all_reduce {name} {dtype}", exact=not (name == "avg" and dtype.is_floating_point))

    # Bitwise ops on the integer dtypes and bool, against gloo.
    bits = {"band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}
    for dtype in INTS + [torch.bool]:
        for name, op in bits.items():
            def mine():  # salted per rank so each bit differs somewhere
                v = (torch.arange(count, dtype=torch.int64) * 37 + r * 11) % 200
                return (v % 2).bool() if dtype == torch.bool else v.to(dtype)
            t = mine()
            dist.all_reduce(t, op=op)
            def via_gloo():
                u = mine()
                dist.all_reduce(u, op=op, group=job.gloo)
                return u
            def ref():
                xs = []
                for q in range(n):
                    v = (torch.arange(count, dtype=torch.int64) * 37 + q * 11) % 200
                    xs.append((v % 2) if dtype == torch.bool else v)
                acc = xs[0]
                for x in xs[1:]:
                    acc = acc & x if name == "band" else acc | x if name == "bor" else acc ^ x
                return acc.bool() if dtype == torch.bool else acc.to(dtype)
            job.same(t, job.gloo_or(via_gloo, ref), f"all_reduce {name} {dtype}")
            job.same(t, ref(), f"all_reduce {name} {dtype} (local reference)")
    # PREMUL_SUM (what FSDP's gradient division uses on NCCL): sum of factor * input,
    # by a Python float and by a one-element tensor; gloo has none: local reference.
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        for factor in (0.5, torch.tensor([0.25])):
            op = dist._make_nccl_premul_sum(factor)
            f = float(factor) if isinstance(factor, float) else factor.item()
            want = (expected_reduce(job, dtype, count, "sum").double() * f).to(dtype)
            t = job.data(dtype, count)
            dist.all_reduce(t, op=op)
            job.same(t, want, f"all_reduce PREMUL_SUM x{f} {dtype}", exact=dtype != torch.bfloat16)
            src = job.data(dtype, count * n)
            out = torch.empty(count, dtype=dtype)
            dist.reduce_scatter_tensor(out, src, op=op)
            job.same(src, job.data(dtype, count * n), "PREMUL_SUM leaves reduce_scatter's input as it was")
            want = (expected_reduce(job, dtype, count * n, "sum").double() * f).to(dtype)[r * count:(r + 1) * count]
            job.same(out, want, f"reduce_scatter_tensor PREMUL_SUM x{f} {dtype}", exact=dtype != torch.bfloat16)

    # Non-contiguous: a transposed matrix and a strided slice, reduced in place.
    base = job.data(torch.float32, 6 * 5).view(6, 5)
    t = base.t()
    assert not t.is_contiguous()
    dist.all_reduce(t)
    u = job.data(torch.float32, 6 * 5).view(6, 5).t()
    dist.all_reduce(u, group=job.gloo)
    job.vs_gloo += 1
    job.same(t, u, "all_reduce of a transposed tensor")
    job.same(base, u.t(), "all_reduce of a transposed tensor, seen through its base")
    big = job.data(torch.int64, 40)
    sl = big[::3]
    dist.all_reduce(sl, op=dist.ReduceOp.MAX)
    job.same(sl, expected_reduce(job, torch.int64, 40, "max")[::3], "all_reduce MAX of a strided slice")
    job.same(big[1::3], job.data(torch.int64, 40)[1::3], "elements between the slice's stay untouched")

    # all_reduce_coalesced through the process group object.
    pg = dist.distributed_c10d._get_default_group()
    ts = [job.data(torch.float32, k + 1, salt=k) for k in range(4)]
    pg.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions()).wait()
    for k in range(4):
        job.same(ts[k], expected_reduce(job, torch.float32, k + 1, "sum", salt=k), f"allreduce_coalesced tensor {k}")

    # broadcast from every root, every dtype (and dtypes moved as bytes).
    for dtype in DTYPES + [torch.bool, torch.int8, torch.complex64]:
        for root in range(n):
            t = job.data(torch.int64, count, salt=root).to(dtype) if r == root else torch.zeros(count, dtype=dtype)
            dist.broadcast(t, src=root)
            job.same(t, job.data(torch.int64, count, salt=root, rank=root).to(dtype), f"broadcast {dtype} from {root}")

    # reduce to the last rank.
    root = n - 1
    for dtype in DTYPES:
        for name in ("sum", "max"):
            t = job.data(dtype, count, op=name)
            dist.reduce(t, dst=root, op=OPS[name])
            if r == root:
                job.same(t, expected_reduce(job, dtype, count, name), f"reduce {name} {dtype}")

    # all_gather: equal tensors (against gloo), unequal ones, into one tensor.
    for dtype in DTYPES:
        mine = job.data(dtype, count)
        outs = [torch.empty(count, dtype=dtype) for _ in range(n)]
        dist.all_gather(outs, mine)
        def via_gloo():
            g = [torch.empty(count, dtype=dtype) for _ in range(n)]
            dist.all_gather(g, job.data(dtype, count), group=job.gloo)
            return torch.cat(g)
        job.same(torch.cat(outs), job.gloo_or(via_gloo, lambda: torch.cat([job.data(dtype, count, rank=k) for k in range(n)])),
                 f"all_gather {dtype}")
        flat = torch.empty(count * n, dtype=dtype)
        dist.all_gather_into_tensor(flat, mine)
        job.same(flat, torch.cat([job.data(dtype, count, rank=k) for k in range(n)]), f"all_gather_into_tensor {dtype}")
    outs = [torch.empty(k + 1, dtype=torch.float32) for k in range(n)]
    dist.all_gather(outs, job.data(torch.float32, r + 1))
    for k in range(n):
        job.same(outs[k], job.data(torch.float32, k + 1, rank=k), f"all_gather of unequal tensors, block {k}")
    # coalesced, through the process group object
    ins = [job.data(torch.int32, 3, salt=k) for k in range(3)]
    outs = [torch.empty(3 * n, dtype=torch.int32) for _ in range(3)]
    pg.allgather_into_tensor_coalesced(outs, ins).wait()
    for k in range(3):
        job.same(outs[k], torch.cat([job.data(torch.int32, 3, salt=k, rank=q) for q in range(n)]), f"allgather_into_tensor_coalesced {k}")

    # reduce_scatter: one tensor, lists of equal and unequal blocks, coalesced.
    for dtype in DTYPES:
        for name in ("sum", "min", "max", "avg"):
            src = job.data(dtype, count * n, op=name)
            out = torch.empty(count, dtype=dtype)
            dist.reduce_scatter_tensor(out, src, op=OPS[name])
            want = expected_reduce(job, dtype, count * n, name)[r * count:(r + 1) * count]
            job.same(out, want, f"reduce_scatter_tensor {name} {dtype}", exact=not (name == "avg" and dtype.is_floating_point))
    src = job.data(torch.float64, count * n)
    out = torch.empty(count, dtype=torch.float64)
    dist.reduce_scatter(out, list(src.chunk(n)))
    def via_gloo():
        g = torch.empty(count, dtype=torch.float64)
        dist.reduce_scatter(g, list(job.data(torch.float64, count * n).chunk(n)), group=job.gloo)
        return g
    job.same(out, job.gloo_or(via_gloo, lambda: expected_reduce(job, torch.float64, count * n, "sum")[r * count:(r + 1) * count]),
             "reduce_scatter of equal blocks")
    sizes = [k + 2 for k in range(n)]
    src = job.data(torch.int64, sum(sizes))
    out = torch.empty(sizes[r], dtype=torch.int64)
    dist.reduce_scatter(out, list(src.split(sizes)))
    off = sum(sizes[:r])
    job.same(out, expected_reduce(job, torch.int64, sum(sizes), "sum")[off:off + sizes[r]], "reduce_scatter of unequal blocks")
    ins = [job.data(torch.float32, 2 * n, salt=k) for k in range(2)]
    outs = [torch.empty(2, dtype=torch.float32) for _ in range(2)]
    pg.reduce_scatter_tensor_coalesced(outs, ins, dist.ReduceScatterOptions()).wait()
    for k in range(2):
        job.same(outs[k], expected_reduce(job, torch.float32, 2 * n, "sum", salt=k)[2 * r:2 * r + 2], f"reduce_scatter_tensor_coalesced {k}")

    # all_to_all_single: even (against gloo), uneven splits, 2-D rows.
    for dtype in DTYPES:
        src = job.data(dtype, 3 * n)
        out = torch.empty(3 * n, dtype=dtype)
        dist.all_to_all_single(out, src)
        def via_gloo():
            g = torch.empty(3 * n, dtype=dtype)
            dist.all_to_all_single(g, job.data(dtype, 3 * n), group=job.gloo)
            return g
        want = torch.cat([job.data(dtype, 3 * n, rank=k)[3 * r:3 * r + 3] for k in range(n)])
        job.same(out, job.gloo_or(via_gloo, lambda: want), f"all_to_all_single {dtype}")
    # rank k sends (k + j) % 3 + 1 rows of 4 to rank j
    rows = lambda k, j: (k + j) % 3 + 1
    insplit = [rows(r, j) for j in range(n)]
    outsplit = [rows(k, r) for k in range(n)]
    src = (torch.arange(sum(insplit) * 4, dtype=torch.float32) + 1000 * r).view(-1, 4)
    out = torch.empty(sum(outsplit), 4)
    dist.all_to_all_single(out, src, outsplit, insplit)
    def via_gloo():
        g = torch.empty(sum(outsplit), 4)
        dist.all_to_all_single(g, src, outsplit, insplit, group=job.gloo)
        return g
    def ref():
        parts = []
        for k in range(n):
            ks = [rows(k, j) for j in range(n)]
            ksrc = (torch.arange(sum(ks) * 4, dtype=torch.float32) + 1000 * k).view(-1, 4)
            parts.append(ksrc[sum(ks[:r]):sum(ks[:r]) + ks[r]])
        return torch.cat(parts)
    job.same(out, job.gloo_or(via_gloo, ref), "all_to_all_single with uneven splits")
    job.same(out, ref(), "all_to_all_single with uneven splits (reference)")
    ins = [job.data(torch.int64, j + 1, salt=10 * r + j) for j in range(n)]
    outs = [torch.empty(r + 1, dtype=torch.int64) for _ in range(n)]
    dist.all_to_all(outs, ins)
    for k in range(n):
        job.same(outs[k], job.data(torch.int64, r + 1, salt=10 * k + r, rank=k), f"all_to_all block from {k}")

    # gather and scatter to/from the last rank.
    mine = job.data(torch.float16, 5)
    outs = [torch.empty(5, dtype=torch.float16) for _ in range(n)] if r == root else None
    dist.gather(mine, outs, dst=root)
    if r == root:
        for k in range(n):
            job.same(outs[k], job.data(torch.float16, 5, rank=k), f"gather from {k}")
    flat = torch.empty(5 * n, dtype=torch.float16) if r == root else None
    dist.gather_into_tensor(mine, flat, dst=root)
    if r == root:
        job.same(flat, torch.cat([job.data(torch.float16, 5, rank=k) for k in range(n)]), "gather_into_tensor")
    out = torch.empty(6, dtype=torch.int32)
    dist.scatter(out, [job.data(torch.int32, 6, salt=j) for j in range(n)] if r == root else None, src=root)
    job.same(out, job.data(torch.int32, 6, salt=r, rank=root), "scatter")

    # send/recv around a ring (async both ways, so no order is needed).
    if n > 1:
        nxt, prv = (r + 1) % n, (r - 1) % n
        got = torch.empty(9, dtype=torch.bfloat16)
        ws = [dist.isend(job.data(torch.bfloat16, 9, salt=1), nxt), dist.irecv(got, prv)]
        for w in ws:
            w.wait()
        job.same(got, job.data(torch.bfloat16, 9, salt=1, rank=prv), "send/recv around the ring")

    # Async overlap: several works in flight, waited in reverse, one through its future.
    ts = [job.data(torch.float32, 1 << k, salt=k) for k in range(0, 18, 3)]
    ws = [dist.all_reduce(t, async_op=True) for t in ts]
    fut = dist.all_reduce(extra := job.data(torch.int64, 11), op=dist.ReduceOp.MAX, async_op=True).get_future()
    for w in reversed(ws):
        w.wait()
        assert w.is_completed() and w.exception() is None
    for k, t in zip(range(0, 18, 3), ts):
        job.same(t, expected_reduce(job, torch.float32, 1 << k, "sum", salt=k), f"overlapped all_reduce of {1 << k}")
    job.same(fut.wait()[0], expected_reduce(job, torch.int64, 11, "max"), "all_reduce through its future")
    job.same(extra, expected_reduce(job, torch.int64, 11, "max"), "the future's tensor is the input")

    dist.barrier()
    job.checks += 1
    job.done("ops")


def scenario_groups(job):
    """new_group of ftcomm (child communicators of the job's) next to gloo's of the same ranks."""
    r, n = job.rank, job.size
    lists = [list(range(0, n, 2)), list(range(1, n, 2)), list(range(n)), [n - 1]]
    for ranks in lists:
        g = dist.new_group(ranks)
        gg = dist.new_group(ranks, backend="gloo")
        if r not in ranks:
            continue
        for dtype in (torch.float32, torch.int64, torch.bfloat16):
            t = job.data(dtype, 21)
            dist.all_reduce(t, group=g)
            u = job.data(dtype, 21)
            dist.all_reduce(u, group=gg)
            job.vs_gloo += 1
            job.same(t, u, f"all_reduce {dtype} in group {ranks}")
        flat = torch.empty(5 * len(ranks), dtype=torch.int32)
        dist.all_gather_into_tensor(flat, job.data(torch.int32, 5), group=g)
        job.same(flat, torch.cat([job.data(torch.int32, 5, rank=q) for q in ranks]), f"all_gather_into_tensor in group {ranks}")
        t = job.data(torch.float64, 7) if r == ranks[-1] else torch.zeros(7, dtype=torch.float64)
        dist.broadcast(t, group_src=len(ranks) - 1, group=g)
        job.same(t, job.data(torch.float64, 7, rank=ranks[-1]), f"broadcast in group {ranks}")
        w = dist.all_reduce(t2 := torch.ones(3), group=g, async_op=True)
        w.wait()
        job.same(t2, torch.full((3,), float(len(ranks))), f"async all_reduce in group {ranks}")
    # The default group still works after the splits.
    t = torch.ones(2)
    dist.all_reduce(t)
    job.same(t, torch.full((2,), float(n)), "all_reduce in the default group after the groups")
    # ftcomm's own dump names the collectives and groups as torch does.
    import json
    with open(ftcomm.torch.backend_of().dump("test")) as f:
        comms = json.load(f)["communicators"]
    world = [c for c in comms if c["pg_desc"] == "default_pg"]
    assert len(world) == 1 and world[0]["pg_name"] == "0", [(c["name"], c["pg_name"], c["pg_desc"]) for c in comms]
    names = {e[-1] for c in comms for e in c["entries"]}
    assert {"ftcomm:all_reduce", "ftcomm:broadcast", "ftcomm:new_group"} <= names, names
    assert len(comms) >= 2, "no child communicator in the dump"
    job.checks += 1
    job.done("groups")


def scenario_errors(job):
    r, n = job.rank, job.size
    def expect(exc, fn, words, what):
        try:
            fn()
        except exc as e:
            for w in words:
                if w not in str(e):
                    raise AssertionError(f"{what}: the error does not say '{w}': {e}")
            job.checks += 1
            return e
        raise AssertionError(f"{what}: no {exc.__name__}")
    expect(TypeError, lambda: dist.all_reduce(torch.ones(3, dtype=torch.int8)), ["int8", "supported"],
           "an unsupported dtype")
    expect(TypeError, lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND),
           ["bitwise", "integer", "Float"], "a bitwise op on floats")
    expect(TypeError, lambda: dist.all_reduce(torch.ones(3, dtype=torch.int64), op=dist._make_nccl_premul_sum(2.0)),
           ["PREMUL_SUM", "floating-point", "SUM"], "PREMUL_SUM on integers")
    expect(ValueError, lambda: dist.all_gather_into_tensor(torch.empty(5), torch.ones(3)), ["elements"],
           "an output of the wrong size")
    expect(ValueError, lambda: dist.all_to_all_single(torch.empty(4), torch.ones(4), [1] * (n + 1), [1] * (n + 1)),
           ["split sizes"], "split sizes of the wrong length")
    # Still healthy after refused calls: nothing was sent.
    t = torch.ones(4)
    dist.all_reduce(t)
    job.same(t, torch.full((4,), float(n)), "all_reduce after refused calls")
    # PyTorch's own flight recorder lists the backend's collectives under its name.
    if os.environ.get("TORCH_FR_BUFFER_SIZE"):
        import json
        fr = json.loads(torch._C._distributed_c10d._dump_fr_trace_json(True, False, backend="ftcomm"))
        names = [(e.get("profiling_name"), e.get("process_group", [None, None])[1]) for e in fr.get("entries", [])]
        assert ("ftcomm:all_reduce", "default_pg") in names, names
        job.checks += 1
    # abort() from another thread ends a collective that cannot complete (rank 0
    # starts one the others never join); then the group is closed: every collective
    # raises AbortedError, at once.
    dist.barrier()
    be = ftcomm.torch.backend_of()
    if r == 0:
        import threading
        w = dist.all_reduce(torch.ones(4), async_op=True)
        threading.Timer(0.3, be.abort).start()
        t0 = time.monotonic()
        e = expect(ftcomm.FtcommError, w.wait, ["all_reduce", "rank 0"], "a collective aborted from another thread")
        assert isinstance(e, ftcomm.AbortedError), f"{type(e).__name__}: {e}"
        assert time.monotonic() - t0 < 10, time.monotonic() - t0
    else:
        time.sleep(1.0)
        be.abort()
    e = expect(ftcomm.FtcommError, lambda: dist.all_reduce(torch.ones(4)), ["all_reduce", f"rank {r}"],
               "a collective on an aborted group")
    assert isinstance(e, ftcomm.AbortedError), f"{type(e).__name__}: {e}"
    job.done("errors")


def scenario_mismatch(job):
    """Ranks passing different shapes: torch's debug wrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL)
    compares them over its gloo side group before ftcomm runs anything."""
    r = job.rank
    try:
        dist.all_reduce(torch.ones(10 + 1000 * r))
        raise AssertionError("an all_reduce of different shapes went through")
    except RuntimeError as e:
        assert "mismatch" in str(e) and "TensorShape" in str(e), str(e)[:500]
        job.checks += 1
    print(f"PASS mismatch rank {r} of {job.size}: {job.checks} checks", flush=True)
    os._exit(0)


def scenario_mismatch_wire(job):
    """Ranks passing different shapes without torch's debug wrapper: libftcomm's
    descriptors catch it on the wire (MismatchError naming both calls), nobody gets
    another's bytes as data, and the group's next collective fails too."""
    r = job.rank

    def fails(fn, what):
        try:
            fn()
        except ftcomm.FtcommError as e:
            job.checks += 1
            return e
        raise AssertionError(f"{what} went through")
    e = fails(lambda: dist.all_reduce(torch.ones(10 + 1000 * r)), "an all_reduce of different shapes")
    assert isinstance(e, ftcomm.MismatchError), f"{type(e).__name__}: {e}"
    assert e.code == 18 and f"rank {r}" in str(e) and "where this rank" in str(e), str(e)[:500]
    assert "x10 f32" in str(e) and "x1010 f32" in str(e), str(e)[:500]
    e = fails(lambda: dist.all_reduce(torch.ones(4)), "the next all_reduce")
    assert isinstance(e, ftcomm.RevokedError), f"{type(e).__name__}: {e}"
    print(f"PASS mismatch_wire rank {r} of {job.size}: {job.checks} checks", flush=True)
    os._exit(0)


def scenario_peer_lost(job):
    """Slot 1 dies; rank 0's next collective raises PeerLostError naming it all."""
    r = job.rank
    t = torch.ones(8)
    dist.all_reduce(t)
    dist.barrier()
    if r == 1:
        os._exit(0)
    time.sleep(0.5)
    be = ftcomm.torch.backend_of()
    try:
        for _ in range(100):
            dist.all_reduce(torch.ones(1 << 16))
        raise AssertionError("all_reduce went on after its peer died")
    except ftcomm.FtcommError as e:
        assert isinstance(e, dist.DistBackendError), type(e).__mro__
        assert isinstance(e, (ftcomm.PeerLostError, ftcomm.RevokedError)), f"{type(e).__name__}: {e}"
        assert e.rank == 0 and e.slot == 0 and e.collective == "all_reduce", (e.rank, e.slot, e.collective)
        for w in ("rank 0", "slot 0", "all_reduce"):
            assert w in str(e), f"the message does not say '{w}': {e}"
        print(f"rank 0 got {type(e).__name__}: {e}", flush=True)
        job.checks += 1
    err = be.get_error()
    assert err != type(err).SUCCESS, err
    job.checks += 1
    try:
        dist.all_reduce(torch.ones(2))
        raise AssertionError("a collective after the failure succeeded")
    except ftcomm.FtcommError as e:
        job.checks += 1
        print(f"rank 0 then got {type(e).__name__}", flush=True)
    print(f"PASS peer_lost rank 0 of {job.size}: {job.checks} checks", flush=True)
    os._exit(0)


def scenario_shrink(job):
    """The last rank dies; the others see the failure, shrink_group() the default group to
    the survivors (ftcomm's recovery) and go on at the smaller size."""
    r, n = job.rank, job.size
    dist.barrier()
    if r == n - 1:
        os._exit(0)
    try:
        for _ in range(200):
            dist.all_reduce(torch.ones(1 << 14))
        raise AssertionError("all_reduce went on after its peer died")
    except ftcomm.FtcommError as e:
        print(f"rank {r} got {type(e).__name__}", flush=True)
    try:
        dist.shrink_group([1 - r])  # the other survivor: alive, so not out
        raise AssertionError("shrink_group excluding a live rank went through")
    except ftcomm.FtcommError as e:
        assert "coordinator decides" in str(e), str(e)
        job.checks += 1
    # That recovery already moved the communicator to the survivors' epoch; shrinking by
    # the lost rank now agrees with it.
    lost = ftcomm.torch.backend_of().recover()
    assert lost == [n - 1], lost
    pg = dist.shrink_group(lost)
    assert dist.get_world_size() == n - 1 and dist.get_rank() == r, (dist.get_world_size(), dist.get_rank())
    t = torch.full((5,), float(r + 1))
    dist.all_reduce(t)
    job.same(t, torch.full((5,), float(sum(range(1, n)))), "all_reduce after shrink_group")
    g = torch.empty(2 * (n - 1))
    dist.all_gather_into_tensor(g, torch.full((2,), float(r)), group=pg)
    job.same(g, torch.arange(n - 1, dtype=torch.float32).repeat_interleave(2), "all_gather after shrink_group")
    print(f"PASS shrink rank {r} of {n}: {job.checks} checks", flush=True)
    dist.destroy_process_group()
    os._exit(0)


def scenario_reconfigure(job):
    """c10d's reconfigure API on ftcomm's recovery: the handles are exchanged while the
    job is healthy; bad handles are refused; the last rank dies and the survivors
    reconfigure to themselves (shrink), then to every slot again once ftcomm-run's
    replacement joins (grow), which reconfigures from its first call. Needs
    ftcomm-run --min-size N-1 --replace."""
    joiner = os.environ.get("FTCOMM_JOINER") == "1"
    if job is None:  # the replacement: no gloo group (the others make none now)
        dist.init_process_group("ftcomm")
    r, n = dist.get_rank(), dist.get_world_size()
    assert dist._supports_reconfigure()
    mine = dist._get_reconfigure_handle()
    be = ftcomm.torch.backend_of()
    assert mine.startswith("ftcomm:") and mine.endswith(f":{be.slot}"), (mine, be.slot)
    if joiner:
        # n is the grown size already: the coordinator admitted this process.
        handles = {mine.rsplit(":", 1)[0] + f":{s}" for s in range(n)}
        dist._reconfigure(uuid=3, handles=handles).wait()
        assert dist.get_world_size() == n, dist.get_world_size()
        checks = 1
    else:
        everyone = [None] * n
        dist.all_gather_object(everyone, mine, group=job.gloo)
        checks = 0
        prefix = mine.rsplit(":", 1)[0]
        for bad, what in ((everyone + [everyone[0]], "twice"), ([prefix + ":x"], "not an ftcomm handle"),
                          (["ftcomm:other-job:0"] + everyone, "other-job"),
                          ([h for h in everyone if h != mine], "not among the handles")):
            try:
                dist._reconfigure(uuid=100 + checks, handles=bad)
                raise AssertionError(f"reconfigure with bad handles ({what}) went through")
            except ValueError as e:
                assert what in str(e), f"{what}: {e}"
                checks += 1
        # The same members: a step boundary, nothing changes.
        dist._reconfigure(uuid=1, handles=set(everyone)).wait()
        assert (dist.get_rank(), dist.get_world_size()) == (r, n)
        try:
            dist._reconfigure(uuid=1, handles=set(everyone))
            raise AssertionError("a used uuid went through")
        except ValueError as e:
            assert "already used" in str(e), str(e)
            checks += 1
        dist.barrier()
        if r == n - 1:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash: ftcomm-run starts a replacement
        try:
            for _ in range(200):
                dist.all_reduce(torch.ones(1 << 14))
            raise AssertionError("all_reduce went on after its peer died")
        except ftcomm.FtcommError as e:
            print(f"rank {r} got {type(e).__name__}", flush=True)
        # Shrink: the survivors' handles.
        dist._reconfigure(uuid=2, handles=set(everyone[:n - 1]), timeout=timedelta(seconds=60)).wait()
        assert (dist.get_rank(), dist.get_world_size()) == (r, n - 1), (dist.get_rank(), dist.get_world_size())
        t = torch.full((3,), float(r + 1))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((3,), float(sum(range(1, n))))), t
        checks += 1
        # Grow: every slot again, once the replacement of the lost one has joined.
        dist._reconfigure(uuid=3, handles=set(everyone), timeout=timedelta(seconds=120)).wait()
        assert (dist.get_rank(), dist.get_world_size()) == (r, n), (dist.get_rank(), dist.get_world_size())
    # The grown group works, the replacement included.
    t = torch.full((4,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(n * (n + 1) // 2))), t
    checks += 1
    # An ordered list must be ftcomm's own order.
    handles = [None] * n
    dist.all_gather_object(handles, mine)
    try:
        dist._reconfigure(uuid=4, handles=handles[::-1])
        raise AssertionError("a rank order other than ftcomm's went through")
    except ftcomm.FtcommError as e:
        assert "numbers the ranks itself" in str(e), str(e)
        checks += 1
    dist._reconfigure(uuid=5, handles=handles).wait()
    assert dist.get_world_size() == n
    print(f"PASS reconfigure rank {dist.get_rank()} of {n}{' (joiner)' if joiner else ''}: {checks} checks",
          flush=True)
    dist.destroy_process_group()
    os._exit(0)


scenario_reconfigure.own_init = "joiner"


def scenario_ddp(job):
    """The same model trained with DDP over ftcomm and over gloo: same losses."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(group):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        ddp = DDP(model, process_group=group, bucket_cap_mb=0.001)  # several buckets
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + job.rank)
        losses = []
        for _ in range(6):
            x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().clone() for p in model.parameters()]

    lf, pf = train(None)
    lg, pg_ = train(job.gloo)
    job.vs_gloo += 1
    job.same(torch.tensor(lf), torch.tensor(lg), "DDP losses", exact=job.size <= 2)
    for a, b in zip(pf, pg_):
        job.same(a, b, "DDP parameters", exact=job.size <= 2)
    # The parameters agree across ranks.
    w = pf[0].clone()
    dist.broadcast(w, src=0)
    job.same(pf[0], w, "DDP parameters equal on every rank")
    job.done("ddp", f"; losses {[round(v, 6) for v in lf]}")


def scenario_fsdp(job):
    """FSDP2 fully_shard on CPU over ftcomm and over gloo: same losses."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    def train(group):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        mesh = DeviceMesh.from_group(group if group is not None else dist.group.WORLD, "cpu")
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + job.rank)
        losses = []
        for _ in range(5):
            x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    lg = train(job.gloo)
    lf = train(None)
    job.vs_gloo += 1
    job.same(torch.tensor(lf), torch.tensor(lg), "FSDP2 losses", exact=False)
    job.done("fsdp", f"; losses {[round(v, 6) for v in lf]}")


def scenario_manager_votes(job):
    """ftcomm.Manager: the step boundary's agreement rides on the gradient
    reduction, so a step without a membership change runs no allreduce of
    its own (ftc_comm_step's: one i64), as the recorder shows."""
    import json

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mgr = ftcomm.Manager(model, opt, global_batch=24, log=False)
    net = mgr.wrap(model)
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(96, 16, generator=g), torch.randn(96, 4, generator=g)
    steps = 8
    for _ in range(steps):
        assert mgr.next_step(steps + 1)
        idx = mgr.batch_indices(len(x))
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x[idx]), y[idx]).backward()
        assert mgr.commit(), f"rank {job.rank}: a step failed without a fault"
    path = ftcomm.torch.backend_of().dump("votes")
    with open(path) as f:
        d = json.load(f)
    cols = d["entry_fields"]
    world = next(c for c in d["communicators"] if c["epoch"] == mgr.epoch and c["size"] == job.size)
    rows = [dict(zip(cols, e)) for e in world["entries"]]
    red = [r for r in rows if r["op"] == "allreduce" and r["state"] == "completed"]
    step_ar = [r for r in red if r["dtype"] == "i64" and r["count"] == 1]
    grads = [r for r in red if r["dtype"] == "f32"]
    nparams = sum(p.numel() for p in model.parameters())
    # Every step reduces each gradient once and the vote once, with it.
    job.checks += 1
    if step_ar or sum(r["count"] for r in grads) != steps * (nparams + 1):
        raise AssertionError(f"rank {job.rank}: {len(step_ar)} step-boundary allreduces (want 0), "
                             f"f32 elements {sum(r['count'] for r in grads)} "
                             f"(want {steps} x {nparams + 1}): {red}")
    # The end: a boundary after the last update (its own allreduce, once).
    assert not mgr.next_step(mgr.step)
    h = [None] * job.size
    dist.all_gather_object(h, mgr.params_hash())
    job.same(torch.tensor(len(set(h))), torch.tensor(1), "parameters equal on every rank")
    job.done("manager_votes", f"; {len(grads)} gradient reductions over {steps} steps")


if __name__ == "__main__":
    scenario = sys.argv[1]
    fn = globals()[f"scenario_{scenario}"]
    # A replacement admitted to a running job cannot make the gloo group that Job makes.
    fn(None if getattr(fn, "own_init", None) == "joiner" and os.environ.get("FTCOMM_JOINER") == "1" else Job())
