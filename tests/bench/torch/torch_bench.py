"""allreduce and a DDP step through torch.distributed: the ftcomm backend against gloo
and against libftcomm called from C, in one job.

    ftcomm-run -n N -- python torch_bench.py [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS]
                                             [-w WARMUP] [-I ITER_BYTES] [-R ROUNDS]
                                             [--async-max BYTES] [--ddp-steps S]

One rank of a job under ftcomm-run: the default group is ftcomm's, a gloo group of
the same ranks runs in the same processes. Systems, all on the same tensor:
  torch-ftcomm  dist.all_reduce(t) on the ftcomm group (f32 sum, in place, synchronous)
  torch-gloo    the same on the gloo group
  ftcomm-c      ftc_allreduce on the same communicator, called from C++ in a loop with
                no torch in between (ftcomm._C._bench_allreduce): what the binding adds
                is torch-ftcomm's time over this one, measured seconds apart.
  torch-ftcomm-async, ftcomm-c-async (sizes up to --async-max, default 1 MiB)
                dist.all_reduce(t, async_op=True).wait(), against ftc_iallreduce +
                ftc_wait from C++: the asynchronous path (what DDP and FSDP issue).
                gloo's synchronous call is already its asynchronous one waited for
                (ProcessGroupGloo runs every op on its worker thread).
The sweep is MIN, MIN*FACTOR, ... up to MAX, and MAX itself when the factor steps
over it (8 B by 4 ends at 128 MiB; MAX 256 MiB adds that row).
For every size each system is timed in ROUNDS rounds of ITERS calls, the systems in a
different order each round (rotated, then reversed), so that a burst of other work on
a shared host lands on all of them alike. A round's time is the slowest rank's mean per
call; a row gives the median of the rounds (its "iters" is calls per round), and a line
"#rounds,SYSTEM,RANKS,SIZE,t1,t2,..." keeps every round (us). Rows are in ftcomm-bench's
CSV format (tests/bench/report.py reads them); the first call's result is checked
(#wrong). With --ddp-steps, rows "ddp-ftcomm" and "ddp-gloo" give the median over rounds
(2 ROUNDS + 1, at least 11, of S steps) of the DDP training step time of one model
(collective "ddp_step", size = gradient bytes), both models built and warmed up first,
then timed in alternating rounds.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import ftcomm.torch  # noqa: F401
from ftcomm import _C

FIELDS = "system,collective,ranks,size,count,type,op,root,time_us,algbw_GBps,busbw_GBps,wrong,iters"


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def slowest(gloo, v):
    t = torch.tensor([v], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.item()


def order_of(names, k):
    """The systems' order in round k: rotated by k, reversed on odd rounds."""
    r = k % len(names)
    o = names[r:] + names[:r]
    return o[::-1] if k % 2 else o


class Allreduce:
    """One system's allreduce of t: call(iters) returns seconds per call."""

    def __init__(self, name, group, async_op=False):
        self.name, self.group, self.async_op = name, group, async_op

    def once(self, t):
        self.call(t, 1)

    def call(self, t, iters):
        if self.group == "c":
            return _C._bench_allreduce(t, iters, self.async_op)
        t0 = time.perf_counter()
        if self.async_op:
            for _ in range(iters):
                dist.all_reduce(t, group=self.group, async_op=True).wait()
        else:
            for _ in range(iters):
                dist.all_reduce(t, group=self.group)
        return (time.perf_counter() - t0) / iters


def ddp_model(group):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    ddp = DDP(model, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    return ddp, opt, sum(p.numel() * 4 for p in model.parameters())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-b", type=size_arg, default=8)
    ap.add_argument("-e", type=size_arg, default=256 << 20)
    ap.add_argument("-f", type=int, default=4)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    ap.add_argument("-I", type=size_arg, default=512 << 20)
    ap.add_argument("-R", type=int, default=5, help="rounds per size (median of them)")
    ap.add_argument("--async-max", type=size_arg, default=1 << 20,
                    help="largest size timed with async_op=True too (0: none)")
    ap.add_argument("--ddp-steps", type=int, default=0, help="DDP steps per round (0: no DDP rows)")
    a = ap.parse_args()

    dist.init_process_group("ftcomm")
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    sync_systems = [Allreduce("torch-ftcomm", None), Allreduce("torch-gloo", gloo), Allreduce("ftcomm-c", "c")]
    async_systems = [Allreduce("torch-ftcomm-async", None, True), Allreduce("ftcomm-c-async", "c", True)]
    if rank == 0:
        print(FIELDS, flush=True)

    def emit(name, coll, size, count, rounds_us, wrong, iters, bus_factor):
        per = statistics.median(rounds_us) / 1e6
        alg = size / per / 1e9 if coll != "ddp_step" else 0
        bus = alg * bus_factor
        if rank == 0:
            print(f"{name},{coll},{n},{size},{count},f32,sum,-1,{per * 1e6:.3f},{alg:.6f},{bus:.6f},"
                  f"{wrong},{iters}", flush=True)
            print(f"#rounds,{name},{n},{size}," + ",".join(f"{v:.3f}" for v in rounds_us), flush=True)

    sizes, size = [], a.b
    while size <= a.e:
        sizes.append(size)
        size *= a.f
    if sizes and sizes[-1] != a.e:
        sizes.append(a.e)
    for k, size in enumerate(sizes):
        systems = sync_systems + (async_systems if size <= a.async_max else [])
        count = max(1, size // 4)
        nbytes = count * 4
        iters = min(a.n, max(2, a.I // size))
        warmup = min(a.w, iters)
        t = torch.empty(count, dtype=torch.float32)
        wrong, rounds = {}, {s.name: [] for s in systems}
        for s in systems:
            t.fill_(1.0)
            s.once(t)
            wrong[s.name] = int(slowest(gloo, int((t != float(n)).sum().item())))
            t.zero_()
            for _ in range(warmup):
                s.once(t)
        for r in range(a.R):
            for s in order_of(systems, r + k):
                dist.barrier(group=gloo)
                rounds[s.name].append(slowest(gloo, s.call(t, iters)) * 1e6)
        for s in systems:
            emit(s.name, "allreduce", nbytes, count, rounds[s.name], wrong[s.name], iters,
                 2 * (n - 1) / n if n > 1 else 1)
        del t

    if a.ddp_steps:
        g = torch.Generator().manual_seed(rank)
        x, y = torch.randn(32, 1024, generator=g), torch.randint(0, 10, (32,), generator=g)
        models = {"ddp-ftcomm": ddp_model(None), "ddp-gloo": ddp_model(gloo)}

        def step(ddp, opt):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()

        for ddp, opt, _ in models.values():
            for _ in range(5):
                step(ddp, opt)
        rounds = {name: [] for name in models}
        names = list(models)
        for r in range(max(2 * a.R + 1, 11)):  # a step is noisier than a call: more rounds
            for name in order_of(names, r):
                ddp, opt, _ = models[name]
                dist.barrier(group=gloo)
                t0 = time.perf_counter()
                for _ in range(a.ddp_steps):
                    step(ddp, opt)
                rounds[name].append(slowest(gloo, (time.perf_counter() - t0) / a.ddp_steps) * 1e6)
        for name in names:
            nbytes = models[name][2]
            emit(name, "ddp_step", nbytes, nbytes // 4, rounds[name], 0, a.ddp_steps, 0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
