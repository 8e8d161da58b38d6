"""CUDA tensors on the ftcomm backend over libftcomm's NCCL path, for a GPU machine
(tests/gpu/run.sh runs it; nothing here runs without a GPU).

    FTCOMM_BACKEND=nccl ftcomm-run -n N -- python tests/gpu/torch_ddp.py

Each rank takes GPU (slot % device count) before joining, as with torch's NCCL
backend. Checked against values computed locally and against gloo on CPU copies in
the same processes: all_reduce, broadcast, all_gather_into_tensor,
reduce_scatter_tensor of CUDA tensors, a non-contiguous one, one issued on a side
stream (the op runs on torch's current stream), a CPU tensor (staged through the
GPU), then DDP of one model on CUDA against DDP of the same model on CPU over gloo:
the losses must agree. Prints "PASS torch-cuda rank R of N ..." per rank.
"""
import os

import torch
import torch.distributed as dist

import ftcomm.torch


def main():
    slot = int(os.environ.get("FTCOMM_SLOT", "0"))
    torch.cuda.set_device(slot % torch.cuda.device_count())
    dist.init_process_group("ftcomm")
    r, n = dist.get_rank(), dist.get_world_size()
    be = ftcomm.torch.backend_of()
    assert be.transport.upper().startswith(("NCCL", "RCCL")), f"the job's communicator is on {be.transport}"
    gloo = dist.new_group(backend="gloo")
    dev = torch.device("cuda", torch.cuda.current_device())
    checks = 0

    def same(got, want, what, tol=0.0):
        nonlocal checks
        got, want = got.cpu(), want.cpu()
        ok = got.shape == want.shape and (torch.equal(got, want) if tol == 0 else
                                          torch.allclose(got.double(), want.double(), rtol=tol, atol=tol))
        assert ok, f"rank {r}: {what}: got {got.flatten()[:8].tolist()}, want {want.flatten()[:8].tolist()}"
        checks += 1

    total = n * (n + 1) // 2
    t = torch.full((1 << 20,), float(r + 1), device=dev)
    dist.all_reduce(t)
    same(t, torch.full((1 << 20,), float(total)), "all_reduce f32")
    h = torch.full((4097,), float(r + 1), device=dev, dtype=torch.bfloat16)
    dist.all_reduce(h, op=dist.ReduceOp.MAX)
    same(h, torch.full((4097,), float(n), dtype=torch.bfloat16), "all_reduce bf16 max")
    b = torch.arange(1000, device=dev, dtype=torch.int64) * (r + 1)
    dist.broadcast(b, src=n - 1)
    same(b, torch.arange(1000, dtype=torch.int64) * n, "broadcast i64")
    g = torch.empty(3 * n, device=dev)
    dist.all_gather_into_tensor(g, torch.full((3,), float(r), device=dev))
    same(g, torch.arange(n, dtype=torch.float32).repeat_interleave(3), "all_gather_into_tensor")
    rs = torch.empty(5, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(5 * n, device=dev, dtype=torch.float32))
    same(rs, torch.arange(5 * r, 5 * r + 5, dtype=torch.float32) * n, "reduce_scatter_tensor")
    m = torch.full((64, 64), float(r + 1), device=dev)
    col = m[:, 3]  # non-contiguous
    dist.all_reduce(col)
    same(m[:, 3], torch.full((64,), float(total)), "all_reduce of a non-contiguous column")
    same(m[:, 2], torch.full((64,), float(r + 1)), "the rest of the matrix untouched")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        s = torch.full((1 << 18,), float(r + 1), device=dev)  # written on the side stream
        w = dist.all_reduce(s, async_op=True)
    w.wait()
    torch.cuda.current_stream().wait_stream(side)
    same(s, torch.full((1 << 18,), float(total)), "all_reduce issued on a side stream")
    c = torch.full((7,), float(r + 1))  # a CPU tensor: staged through the GPU
    dist.all_reduce(c)
    same(c, torch.full((7,), float(total)), "all_reduce of a CPU tensor")

    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(device, group):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(device)
        ddp = DDP(model, process_group=group, device_ids=[device.index] if device.type == "cuda" else None)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(1000 + r)
        losses = []
        for _ in range(10):
            x, y = torch.randn(16, 32, generator=gen), torch.randn(16, 4, generator=gen)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return torch.tensor(losses, dtype=torch.float64)

    lf = train(dev, None)
    lg = train(torch.device("cpu"), gloo)
    same(lf, lg, "DDP losses on CUDA over ftcomm against CPU over gloo", tol=1e-4)
    print(f"PASS torch-cuda rank {r} of {n}: {checks} checks on {be.transport}; DDP losses "
          f"{[round(v, 5) for v in lf.tolist()]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
