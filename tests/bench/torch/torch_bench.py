"""allreduce through torch.distributed: the ftcomm backend against gloo, in one job.

    ftcomm-run -n N -- python torch_bench.py [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS]
                                             [-w WARMUP] [-I ITER_BYTES] [--ddp-steps S]

One rank of a job under ftcomm-run: the default group is ftcomm's, a gloo group of
the same ranks runs in the same processes. For every size both are timed, one after
the other (gloo first on odd sizes, so neither always runs on a warmer cache), with
dist.all_reduce(t) (f32 sum, in place, synchronous), and rank 0 prints a row per
system in ftcomm-bench's CSV format (tests/bench/report.py reads them): systems
torch-ftcomm and torch-gloo; time is the slowest rank's mean; the first call's result
is checked (#wrong). With --ddp-steps, rows "ddp-ftcomm" and "ddp-gloo" give the mean
DDP training step time of one model (collective "ddp_step", size = gradient bytes).
"""
import argparse
import time

import torch
import torch.distributed as dist

import ftcomm.torch  # noqa: F401

FIELDS = "system,collective,ranks,size,count,type,op,root,time_us,algbw_GBps,busbw_GBps,wrong,iters"


def size_arg(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def slowest(gloo, v):
    t = torch.tensor([v], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.item()


def time_allreduce(group, t, iters, warmup, n):
    t.fill_(1.0)
    dist.all_reduce(t, group=group)
    wrong = int((t != float(n)).sum().item())
    t.zero_()
    for _ in range(warmup):
        dist.all_reduce(t, group=group)
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t, group=group)
    return (time.perf_counter() - t0) / iters, wrong


def ddp_step_us(group, gloo, steps, rank):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    ddp = DDP(model, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(32, 1024, generator=g), torch.randint(0, 10, (32,), generator=g)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    dist.barrier(group=gloo)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    per = slowest(gloo, (time.perf_counter() - t0) / steps)
    nbytes = sum(p.numel() * 4 for p in model.parameters())
    return per * 1e6, nbytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-b", type=size_arg, default=8)
    ap.add_argument("-e", type=size_arg, default=256 << 20)
    ap.add_argument("-f", type=int, default=4)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    ap.add_argument("-I", type=size_arg, default=512 << 20)
    ap.add_argument("--ddp-steps", type=int, default=0)
    a = ap.parse_args()

    dist.init_process_group("ftcomm")
    rank, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    groups = {"torch-ftcomm": None, "torch-gloo": gloo}
    if rank == 0:
        print(FIELDS, flush=True)
    size, k = a.b, 0
    while size <= a.e:
        count = max(1, size // 4)
        iters = min(a.n, max(2, a.I // size))
        warmup = min(a.w, iters)
        t = torch.empty(count, dtype=torch.float32)
        order = list(groups.items())
        if k % 2:
            order.reverse()
        for name, group in order:
            per, wrong = time_allreduce(group, t, iters, warmup, n)
            per = slowest(gloo, per)
            wrong = int(slowest(gloo, wrong))
            nbytes = count * 4
            alg = nbytes / per / 1e9
            bus = alg * 2 * (n - 1) / n if n > 1 else alg
            if rank == 0:
                print(f"{name},allreduce,{n},{nbytes},{count},f32,sum,-1,{per * 1e6:.3f},{alg:.6f},{bus:.6f},"
                      f"{wrong},{iters}", flush=True)
        del t
        size *= a.f
        k += 1
    if a.ddp_steps:
        for name, group in (("ddp-ftcomm", None), ("ddp-gloo", gloo)):
            us, nbytes = ddp_step_us(group, gloo, a.ddp_steps, rank)
            if rank == 0:
                print(f"{name},ddp_step,{n},{nbytes},{nbytes // 4},f32,sum,-1,{us:.3f},0,0,0,{a.ddp_steps}",
                      flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
