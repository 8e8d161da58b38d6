"""One rank of the recovery comparison (tests/bench/torch_recovery/run.py).

The same model, data and global batch under four ways of running data
parallel training; every rank prints one line per completed step:

    STEP <step> <wall time, s> <ranks that took part> <pid>

and once, when its model is built and it is about to join: READY <wall> <pid>.

  --system ftcomm     ftcomm.Manager under ftcomm-run --replace (a replacement
                      gets the state from a survivor)
  --system ddp        plain torch DDP on the ftcomm backend (no recovery): the
                      failure-free baseline of the helper's overhead
  --system torchft    torchft's Manager + DDP + ProcessGroupGloo, one replica
                      group per process, against a Lighthouse (TORCHFT_LIGHTHOUSE)
  --system torchrun   torch DDP on gloo under torchrun --max-restarts: a restart
                      reloads the checkpoint rank 0 saves every --ckpt-every steps
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--system", required=True, choices=["ftcomm", "ddp", "torchft", "torchrun"])
    p.add_argument("--steps", type=int, default=1000000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--inputs", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--ckpt", default="")
    p.add_argument("--ckpt-every", type=int, default=20)
    p.add_argument("--world", type=int, default=4)
    return p.parse_args()


def started():
    """When this process started (wall clock, from /proc: 10 ms resolution)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))


def ready():
    return f"READY {time.time():.6f} {os.getpid()} {started():.6f}"


def out(msg):
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def build(a):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(a.samples, a.inputs, generator=g)
    y = torch.randint(0, 4, (a.samples,), generator=g)
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(a.inputs, a.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(a.hidden, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return x, y, model, opt


def run_ftcomm(a, x, y, model, opt, loss_fn):
    import ftcomm
    import ftcomm.torch  # noqa: F401

    out(ready())
    dist.init_process_group("ftcomm")
    mgr = ftcomm.Manager(model, opt, global_batch=a.batch, log=False)
    net = mgr.wrap(model)
    while mgr.next_step(a.steps):
        idx = mgr.batch_indices(a.samples)
        opt.zero_grad()
        loss_fn(net(x[idx]), y[idx]).backward()
        step = mgr.step
        if mgr.commit():
            out(f"STEP {step} {time.time():.6f} {mgr.size} {os.getpid()}")


def run_ddp(a, x, y, model, opt, loss_fn):
    import ftcomm.torch  # noqa: F401

    out(ready())
    dist.init_process_group("ftcomm")
    rank, size = dist.get_rank(), dist.get_world_size()
    net = torch.nn.parallel.DistributedDataParallel(model)
    lo, hi = a.batch * rank // size, a.batch * (rank + 1) // size
    for step in range(a.steps):
        idx = (torch.arange(lo, hi) + step * a.batch) % a.samples
        opt.zero_grad()
        loss_fn(net(x[idx]), y[idx]).backward()
        opt.step()
        out(f"STEP {step} {time.time():.6f} {size} {os.getpid()}")


def run_torchrun(a, x, y, model, opt, loss_fn):
    # The agent's store (TORCHELASTIC_USE_AGENT_STORE) outlives the workers:
    # each restart's rendezvous under a prefix of its own, or the new workers
    # read the dead ones' gloo addresses.
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), size, False)
    store = dist.PrefixStore(f"restart{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size)
    step = 0
    if a.ckpt and os.path.exists(a.ckpt):
        blob = torch.load(a.ckpt, weights_only=False)
        model.load_state_dict(blob["model"])
        opt.load_state_dict(blob["optimizer"])
        step = blob["step"]
    net = torch.nn.parallel.DistributedDataParallel(model)
    out(f"{ready()} restart {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} from {step}")
    lo, hi = a.batch * rank // size, a.batch * (rank + 1) // size
    while step < a.steps:
        idx = (torch.arange(lo, hi) + step * a.batch) % a.samples
        opt.zero_grad()
        loss_fn(net(x[idx]), y[idx]).backward()
        opt.step()
        out(f"STEP {step} {time.time():.6f} {size} {os.getpid()}")
        step += 1
        if rank == 0 and a.ckpt and step % a.ckpt_every == 0:
            tmp = a.ckpt + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, a.ckpt)


def run_torchft(a, x, y, model, opt, loss_fn):
    from datetime import timedelta

    from torchft import Manager, ProcessGroupGloo

    replica = os.environ["REPLICA_GROUP_ID"]
    store = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)

    def state_dict():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    out(ready())
    pg = ProcessGroupGloo(timeout=timedelta(seconds=10))
    manager = Manager(pg=pg, min_replica_size=2, load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"bench_{replica}", timeout=timedelta(seconds=10), rank=0, world_size=1,
                      store_addr="127.0.0.1", store_port=store.port)
    params = list(model.parameters())
    # torchft's usage: a fixed batch per replica (the global batch / --world),
    # the quorum found during the forward pass (async quorum), the gradients
    # reduced through manager.allreduce (the mean over the participants). Not
    # torchft's DDP wrapper: in torchft 0.2.0 its hook fails an assertion
    # (ddp.py, "assert fut._fut") once the manager has seen an error.
    slot = int(replica)
    lo, hi = a.batch * slot // a.world, a.batch * (slot + 1) // a.world
    while manager.current_step() < a.steps:
        manager.start_quorum()
        opt.zero_grad()
        step = manager.current_step()
        idx = (torch.arange(lo, hi) + step * a.batch) % a.samples
        loss_fn(model(x[idx]), y[idx]).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        manager.allreduce(flat).wait()
        off = 0
        for p in params:
            p.grad.copy_(flat[off:off + p.numel()].view_as(p))
            off += p.numel()
        if manager.should_commit():
            opt.step()
            out(f"STEP {step} {time.time():.6f} {manager.num_participants()} {os.getpid()}")


def main():
    a = parse()
    torch.set_num_threads(1)
    x, y, model, opt = build(a)
    loss_fn = torch.nn.CrossEntropyLoss()
    {"ftcomm": run_ftcomm, "ddp": run_ddp, "torchft": run_torchft, "torchrun": run_torchrun}[a.system](
        a, x, y, model, opt, loss_fn)


if __name__ == "__main__":
    main()
