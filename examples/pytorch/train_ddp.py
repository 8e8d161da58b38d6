"""Fault-tolerant data-parallel training with PyTorch DDP on ftcomm.

A small MLP learns labels made by a fixed random "teacher" network, on
synthetic data that every rank generates from one seed. The loop is plain
DDP plus three lines of ftcomm.Manager: next_step (the state to whoever
lacks it, False at the end), this rank's share of the fixed global batch
(batch_indices), and commit, which reduces the gradients over the live ranks,
runs the step boundary and applies the update, or recovers from a lost rank
and redoes the step at the new size. A replacement
started with --replace receives the model, optimizer state and step from a
survivor (docs/pytorch.md, "Fault-tolerant training").

    ftcomm-run -n 4 --min-size 2 --replace -- python examples/pytorch/train_ddp.py

CPU by default; CUDA when a GPU is present (--device cuda|cpu to choose).
Rank 0 prints the global batch's loss every --log-every steps; every rank
prints a final line with a hash of its parameters (equal on every rank).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

import ftcomm
import ftcomm.torch  # noqa: F401  (registers the "ftcomm" backend)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=256, help="global batch: samples per step over all ranks")
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--inputs", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--step-ms", type=float, default=0, help="extra time per step, standing in for real compute")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    return p.parse_args()


def make_data(a, dtype):
    g = torch.Generator().manual_seed(a.seed)
    x = torch.randn(a.samples, a.inputs, generator=g, dtype=dtype)
    teacher = torch.nn.Sequential(torch.nn.Linear(a.inputs, a.hidden), torch.nn.Tanh(), torch.nn.Linear(a.hidden, 4))
    with torch.no_grad():
        for p in teacher.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 2.0)
        teacher = teacher.to(dtype)
        y = teacher(x).argmax(dim=1)
    return x, y


def main():
    a = parse_args()
    dtype = getattr(torch, a.dtype)
    device = torch.device(a.device)
    # The data set and the model are built before joining the job: a
    # replacement is admitted only once it is ready to train.
    x, y = make_data(a, dtype)
    x, y = x.to(device), y.to(device)
    torch.manual_seed(a.seed + 1)
    model = torch.nn.Sequential(
        torch.nn.Linear(a.inputs, a.hidden), torch.nn.ReLU(),
        torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU(),
        torch.nn.Linear(a.hidden, 4),
    ).to(device=device, dtype=dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    dist.init_process_group("ftcomm")
    mgr = ftcomm.Manager(model, optimizer, global_batch=a.batch)
    net = mgr.wrap(model)
    if mgr.rank == 0 and not mgr.joiner:
        print(f"training: {mgr.size} ranks, batch {a.batch}, {a.steps} steps, device {device}", flush=True)

    while mgr.next_step(a.steps):
        idx = mgr.batch_indices(a.samples).to(device)
        optimizer.zero_grad()
        loss = loss_fn(net(x[idx]), y[idx])
        loss.backward()
        if a.step_ms:
            time.sleep(a.step_ms / 1000)
        step = mgr.step
        log = step % a.log_every == 0 or step == a.steps - 1
        if mgr.commit(loss if log else None) and log and mgr.rank == 0:
            print(f"step {step:5d}  loss {mgr.last_loss:.6f}  ranks {mgr.size}", flush=True)

    print(f"final: rank {mgr.rank}/{mgr.size} step {mgr.step} params_hash {mgr.params_hash()} "
          f"recoveries {mgr.recoveries} pid {os.getpid()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
