#!/usr/bin/env python3
"""make-fr-dumps.py - real PyTorch Flight Recorder dumps from real torch jobs.

Runs a 4-rank torch.distributed job on CPU (gloo, TORCH_FR_BUFFER_SIZE=2000)
for one scenario and writes every surviving rank's Flight Recorder dump
twice: the pickle (torch._C._distributed_c10d._dump_fr_trace, what PyTorch
writes on a timeout) as OUT/pickle/rank_<r>, and the JSON
(_dump_fr_trace_json) as OUT/json/rank_<r>.json.

  python make-fr-dumps.py SCENARIO OUT     (python: the torch environment's)

Scenarios (the culprit each one plants):
  healthy    every rank runs every collective
  skip       rank 2 never enters the default group's allreduce of step 6
  subgroup   groups [0,1] and [2,3] beside the default one, each step an
             allreduce in the default group then one in the rank's group;
             rank 1 stops before its group's allreduce of step 6, rank 0
             waits in it, ranks 2 and 3 go on into the default group's
             allreduce of step 7 and wait there
  killed     rank 3 is killed (SIGKILL) after step 5: its dump is missing

Every rank signals when it reached its last point (done, or its blocking
collective enqueued, so recorded); once all have, the parent waits a
moment, then asks each rank to dump: a thread in each rank writes the dumps
and, once every rank has, ends the process, whether its main thread is
blocked in a collective or not.
"""
import os
import signal
import socket
import subprocess
import sys
import time

WORLD = 4
STEPS = 8


def rank_main(scenario, out, sync):
    import threading
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    import torch._C._distributed_c10d as c10d

    rank = int(os.environ["RANK"])

    def dumper():
        while not os.path.exists(os.path.join(sync, "dump")):
            time.sleep(0.02)
        pk = c10d._dump_fr_trace()
        js = c10d._dump_fr_trace_json()
        for sub, name, data in (("pickle", f"rank_{rank}", pk), ("json", f"rank_{rank}.json", js)):
            tmp = os.path.join(out, sub, "." + name)
            with open(tmp, "wb") as f:
                f.write(data if isinstance(data, bytes) else data.encode())
            os.rename(tmp, os.path.join(out, sub, name))
        # Stay until every rank has dumped: a rank that ends closes its
        # connections, and gloo would end its peers' collectives with an error.
        open(os.path.join(sync, f"dumped-{rank}"), "w").close()
        while not os.path.exists(os.path.join(sync, "exit")):
            time.sleep(0.02)
        os._exit(0)

    threading.Thread(target=dumper, daemon=True).start()

    def reached():
        open(os.path.join(sync, f"reached-{rank}"), "w").close()

    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=timedelta(seconds=120))
    groups = {}
    if scenario == "subgroup":
        groups = {r: g for ranks in ([0, 1], [2, 3]) for g in [dist.new_group(ranks)] for r in ranks}
    x = torch.ones(1024)
    def run(fn, blocks):
        """One collective; when it is the one this rank blocks in, it is
        enqueued (and so recorded) before the rank says it got there."""
        if blocks:
            work = fn(async_op=True)
            reached()
            work.wait()
        else:
            fn()

    try:
        for step in range(1, STEPS + 1):
            time.sleep(0.005)  # a training step's compute
            if scenario == "killed" and rank == 3 and step == 6:
                reached()
                time.sleep(3600)  # the parent kills it here
            if scenario == "skip" and rank == 2 and step == 6:
                break  # never enters the default group's allreduce
            blocks = (scenario in ("skip", "killed") and step == 6) or \
                     (scenario == "subgroup" and step == 7 and rank in (2, 3))
            run(lambda **kw: dist.all_reduce(x, **kw), blocks)
            if scenario == "subgroup":
                if step == 6 and rank == 1:
                    break  # stops: never enters its group's allreduce
                run(lambda **kw: dist.all_reduce(x, group=groups[rank], **kw), step == 6 and rank == 0)
            else:
                out_t = torch.empty(WORLD * 256)
                dist.all_gather_into_tensor(out_t, x[:256])
                dist.broadcast(x, src=0)
    except Exception as e:  # a peer's death ends a gloo collective with an error
        print(f"rank {rank}: {e}", file=sys.stderr)
    reached()
    time.sleep(3600)  # the dumper thread ends the process


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--rank":
        rank_main(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) != 3 or sys.argv[1] not in ("healthy", "skip", "subgroup", "killed"):
        sys.exit("usage: make-fr-dumps.py healthy|skip|subgroup|killed OUT")
    scenario, out = sys.argv[1], sys.argv[2]
    sync = os.path.join(out, ".sync")
    for d in (out, os.path.join(out, "pickle"), os.path.join(out, "json"), sync):
        os.makedirs(d, exist_ok=True)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(WORLD), TORCH_FR_BUFFER_SIZE="2000")
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", scenario, out, sync],
                              env=dict(env, RANK=str(r))) for r in range(WORLD)]
    deadline = time.time() + 240
    while sum(os.path.exists(os.path.join(sync, f"reached-{r}")) for r in range(WORLD)) < WORLD:
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            for p in procs:
                p.kill()
            sys.exit(f"{scenario}: the ranks did not reach their last point")
        time.sleep(0.05)
    if scenario == "killed":
        procs[3].send_signal(signal.SIGKILL)
        procs[3].wait()
    time.sleep(1.0)  # blocked ranks are inside their collective
    open(os.path.join(sync, "dump"), "w").close()
    survivors = [r for r in range(WORLD) if not (scenario == "killed" and r == 3)]
    deadline = time.time() + 60
    while not all(os.path.exists(os.path.join(sync, f"dumped-{r}")) for r in survivors):
        if time.time() > deadline:
            for p in procs:
                p.kill()
            sys.exit(f"{scenario}: a rank did not dump")
        time.sleep(0.02)
    open(os.path.join(sync, "exit"), "w").close()
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            sys.exit(f"{scenario}: a rank did not dump")
    for f in os.listdir(sync):
        os.unlink(os.path.join(sync, f))
    os.rmdir(sync)


if __name__ == "__main__":
    main()
