"""Recovery of PyTorch data-parallel training, three ways, in one run.

    python tests/bench/torch_recovery/run.py [--ranks 4] [--kills 10] [--out DIR]

Same model, data, global batch, machine and world size (worker.py), for:

  ftcomm    ftcomm.Manager under ftcomm-run --min-size N-1 --replace --replace-delay 0
  torchft   torchft 0.2.0: a Lighthouse, one Manager (ProcessGroupGloo) per process;
            a killed process is started again at once by this script
  torchrun  torch DDP on gloo under torchrun --max-restarts (every worker restarts and
            reloads the checkpoint rank 0 saves every --ckpt-every steps)
  ddp       plain DDP on the ftcomm backend, no kill: the helper's overhead baseline

For each kill -9 of a random rank at a random moment (after a warm-up, then each time
the job is back at full size): seconds from the kill to the next step completed by the
survivors without the victim, to the first step at full size again, the replacement's
own start (process start to model built, READY) and from READY to full size, and the
steps of work lost (completed before the kill and done again after it). Failure-free
step time: the median interval between a rank's steps over --window steps after a
warm-up, before the first kill; ddp and ftcomm each run --overhead-rounds jobs,
alternated (ddp, ftcomm, ddp, ...; the last ftcomm job goes on to the kills), so load
that comes and goes on the host falls on both, and each one's figure is the median
over its jobs.
Raw rows go to OUT/rows.csv, the workers' stdout to OUT/<system>.log (stderr to
OUT/<system>.err), medians to OUT/summary.md; --report prints them again from OUT.
"""
import argparse
import csv
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
WORKER = os.path.join(HERE, "worker.py")
BIN = os.path.dirname(sys.executable)


# Whole lines only: torchft's logger writes to stderr while Python prints, and
# a line cut into another must not count as a step.
STEP_RE = re.compile(r"^STEP (\d+) (\d+\.\d+) (\d+) (\d+)$")
READY_RE = re.compile(r"^READY (\d+\.\d+) (\d+) (\d+\.\d+)")
# ftcomm-run's prefix of a rank's lines ("[slot] "): only in the jobs it runs.
SLOT_RE = re.compile(r"^\[\d+\] ")
LAUNCHED = ("ftcomm", "ddp")


class Lines:
    """The STEP/READY lines of a set of processes, with the time they came."""

    def __init__(self, log, prefixed):
        self.prefixed = prefixed
        self.rows = []  # (kind, step, t, size, pid)
        self.cv = threading.Condition()
        self.log = log

    def feed(self, stream):
        def run():
            for line in stream:
                self.log.write(line)
                line = line.rstrip("\n")
                if self.prefixed:
                    line = SLOT_RE.sub("", line)
                m = STEP_RE.match(line)
                r = READY_RE.match(line)
                with self.cv:
                    if m:
                        self.rows.append(("STEP", int(m[1]), float(m[2]), int(m[3]), int(m[4])))
                    elif r:
                        self.rows.append(("READY", -1, float(r[1]), float(r[3]), int(r[2])))
                    self.cv.notify_all()
        threading.Thread(target=run, daemon=True).start()

    def wait(self, pred, timeout):
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for row in self.rows:
                    if pred(row):
                        return row
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cv.wait(min(left, 0.2))

    def snapshot(self):
        with self.cv:
            return list(self.rows)


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class System:
    def __init__(self, name, a, out):
        self.name, self.a, self.out = name, a, out
        self.log = open(os.path.join(out, f"{name}.log"), "w")
        self.errlog = open(os.path.join(out, f"{name}.err"), "w")
        self.lines = Lines(self.log, name in LAUNCHED)
        self.procs = []
        self.env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        self.worker = [sys.executable, WORKER, "--system", name, "--world", str(a.ranks), "--steps", "1000000"]

    def popen(self, cmd, env=None):
        p = subprocess.Popen(cmd, env=env or self.env, stdout=subprocess.PIPE, stderr=self.errlog, text=True,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.lines.feed(p.stdout)
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            if p.poll() is None and self.name in LAUNCHED:
                # ftcomm-run stops its ranks (each in a process group of its own).
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    pass
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.log.close()
        self.errlog.close()


class Ftcomm(System):
    def start(self):
        run = os.path.join(ROOT, self.a.build, "bin", "ftcomm-run")
        self.env["PYTHONPATH"] = os.path.join(ROOT, self.a.build, "python")
        self.launcher = self.popen([run, "-n", str(self.a.ranks), "-q", "--min-size", str(self.a.ranks - 1),
                                    "--replace", "--replace-delay", "0", "--", *self.worker])

    def ranks(self):
        return children(self.launcher.pid)

    def after_kill(self, pid):
        pass


class Ddp(Ftcomm):
    def start(self):
        run = os.path.join(ROOT, self.a.build, "bin", "ftcomm-run")
        self.env["PYTHONPATH"] = os.path.join(ROOT, self.a.build, "python")
        self.launcher = self.popen([run, "-n", str(self.a.ranks), "-q", "--", *self.worker])


class Torchft(System):
    def start(self):
        port = free_port()
        self.popen([os.path.join(BIN, "torchft_lighthouse"), "--min_replicas", "2", "--quorum_tick_ms", "100",
                    "--join_timeout_ms", "100", "--bind", f"127.0.0.1:{port}"])
        self.env["TORCHFT_LIGHTHOUSE"] = f"http://127.0.0.1:{port}"
        self.slots = {}
        for i in range(self.a.ranks):
            self.spawn(i)

    def spawn(self, i):
        env = dict(self.env, REPLICA_GROUP_ID=str(i))
        self.slots[i] = self.popen(self.worker, env=env)

    def ranks(self):
        return [p.pid for p in self.slots.values() if p.poll() is None]

    def after_kill(self, pid):
        for i, p in list(self.slots.items()):
            if p.pid == pid:
                p.wait()
                self.spawn(i)


class Torchrun(System):
    def start(self):
        self.ckdir = tempfile.mkdtemp(prefix="torchrun-ckpt-")
        self.launcher = self.popen([os.path.join(BIN, "torchrun"), "--standalone", "--nproc-per-node",
                                    str(self.a.ranks), "--max-restarts", "1000", "--monitor-interval", "0.1",
                                    WORKER, *self.worker[2:], "--ckpt", os.path.join(self.ckdir, "ckpt.pt"),
                                    "--ckpt-every", str(self.a.ckpt_every)])

    def ranks(self):
        return children(self.launcher.pid)

    def after_kill(self, pid):
        pass

    def stop(self):
        super().stop()
        shutil.rmtree(self.ckdir, ignore_errors=True)


def step_time(rows, lo, hi):
    """The median interval between consecutive steps of a rank, over steps lo..hi."""
    by_pid = {}
    for kind, step, t, size, pid in rows:
        if kind == "STEP" and lo <= step <= hi:
            by_pid.setdefault(pid, []).append(t)
    d = []
    for ts in by_pid.values():
        ts.sort()
        d += [b - a for a, b in zip(ts, ts[1:])]
    return statistics.median(d) if d else float("nan")


def steps_lost(rows, system, t_kill, full, victim):
    """(last step completed before the kill, steps completed before it and done
    again after it), from the lines' own time stamps: the first step a survivor
    completed without the victim (at the reduced size; for torchrun a restarted
    worker's first) against the newest step any rank completed before the kill."""
    steps = [r for r in rows if r[0] == "STEP"]
    before = [r for r in steps if r[2] <= t_kill]
    if not before:
        return "", ""
    last = max(r[1] for r in before)
    old = {r[4] for r in before}
    if system == "torchrun":
        redo = [r[1] for r in steps if r[2] > t_kill and r[4] not in old]
    else:
        survivors = old - {victim}
        redo = [r[1] for r in steps if r[2] > t_kill and r[3] < full and r[4] in survivors]
    if not redo:
        return last, ""
    return last, max(0, last + 1 - min(redo))


def read_log(path, prefixed):
    rows = []
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = STEP_RE.match(SLOT_RE.sub("", line) if prefixed else line)
        if m:
            rows.append(("STEP", int(m[1]), float(m[2]), int(m[3]), int(m[4])))
    return rows


def measure(sys_, a, rng, writer, kills=None):
    full = a.ranks
    kills = a.kills if kills is None else kills
    sys_.start()
    end = a.warmup + a.window
    if not sys_.lines.wait(lambda r: r[0] == "STEP" and r[1] >= end, a.start_timeout):
        print(f"{sys_.name}: no step {end} within {a.start_timeout} s", file=sys.stderr)
        return None
    st = step_time(sys_.lines.snapshot(), a.warmup, end)
    writer.writerow([sys_.name, "step_time", "", "", "", "", "", "", "", "", f"{st:.6f}"])
    print(f"{sys_.name}: failure-free step {st * 1000:.3f} ms", file=sys.stderr, flush=True)
    if sys_.name == "ddp":
        return st
    for k in range(kills):
        pids = sys_.ranks()
        if len(pids) < full:
            print(f"{sys_.name}: only {len(pids)} ranks running", file=sys.stderr)
            break
        victim = rng.choice(pids)
        time.sleep(rng.uniform(0, max(st, 0.001)))
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)
        sys_.after_kill(victim)
        old = set(pids)
        if sys_.name == "torchrun":
            nxt = sys_.lines.wait(lambda r: r[0] == "STEP" and r[2] > t_kill and r[4] not in old, a.kill_timeout)
            back = nxt
        else:
            nxt = sys_.lines.wait(lambda r: r[0] == "STEP" and r[2] > t_kill and r[3] < full, a.kill_timeout)
            back = sys_.lines.wait(lambda r: r[0] == "STEP" and r[2] > t_kill and r[3] == full and
                                   r[4] not in (victim,) and (nxt is None or r[2] >= nxt[2]), a.kill_timeout)
        ready = sys_.lines.wait(lambda r: r[0] == "READY" and r[2] > t_kill, 1)
        rstart = ready[3] if ready else None
        last, lost = steps_lost(sys_.lines.snapshot(), sys_.name, t_kill, full, victim)
        row = [sys_.name, k, victim, f"{t_kill:.6f}",
               f"{nxt[2] - t_kill:.6f}" if nxt else "", f"{back[2] - t_kill:.6f}" if back else "",
               f"{ready[2] - rstart:.6f}" if ready and rstart else "",
               f"{back[2] - ready[2]:.6f}" if back and ready else "", lost, last, ""]
        writer.writerow(row)
        print(f"{sys_.name} kill {k}: next step {row[4]} s, full size {row[5]} s, replacement start {row[6]} s, "
              f"ready->full {row[7]} s, lost {lost}", file=sys.stderr, flush=True)
        if not back:
            break
        # Settle: some steps at full size before the next kill.
        # A random number of them: a kill lands anywhere between two checkpoints.
        base = back[1] + a.settle + rng.randrange(a.ckpt_every)
        sys_.lines.wait(lambda r: r[0] == "STEP" and r[1] >= base and r[3] == full, a.kill_timeout)
    return st


def summary(out, ranks):
    rows = list(csv.reader(open(os.path.join(out, "rows.csv"))))[1:]
    logs = {}
    for r in rows:
        if r[1] != "step_time" and r[3]:
            if r[0] not in logs:
                logs[r[0]] = read_log(os.path.join(out, f"{r[0]}.log"), r[0] in LAUNCHED)
            r[9], r[8] = (str(v) for v in steps_lost(logs[r[0]], r[0], float(r[3]), ranks, int(r[2])))
    with open(os.path.join(out, "rows.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows(rows)
    def med(system, col):
        v = [float(r[col]) for r in rows if r[0] == system and r[1] != "step_time" and r[col] != ""]
        return (statistics.median(v), len(v)) if v else (float("nan"), 0)
    # A system's failure-free step: the median over its jobs (ddp and ftcomm
    # alternate, so load that comes and goes on the host falls on both).
    runs = {}
    for r in rows:
        if r[1] == "step_time":
            runs.setdefault(r[0], []).append(float(r[10]))
    st = {s: statistics.median(v) for s, v in runs.items()}
    lines = [f"| system ({ranks} ranks) | kill -9 to next step (s) | to full size (s) | replacement start (s) | "
             "replacement ready to full size (s) | steps lost | failure-free step (ms) | kills |",
             "|---|---|---|---|---|---|---|---|"]
    for s in ("ftcomm", "torchft", "torchrun", "ddp"):
        if s not in st:
            continue
        n, k = med(s, 4)
        f, _ = med(s, 5)
        rs, _ = med(s, 6)
        rf, _ = med(s, 7)
        lo, _ = med(s, 8)
        lines.append(f"| {s} | {n:.4f} | {f:.3f} | {rs:.3f} | {rf:.3f} | {lo:g} | {st[s] * 1000:.2f} | {k} |")
    if "ftcomm" in st and "ddp" in st:
        lines.append(f"\nhelper / plain DDP on ftcomm, failure-free step: {st['ftcomm'] / st['ddp']:.3f}x "
                     f"(medians over jobs; ms per job, in the order run: ftcomm "
                     f"{' '.join(f'{v * 1000:.2f}' for v in runs['ftcomm'])}; ddp "
                     f"{' '.join(f'{v * 1000:.2f}' for v in runs['ddp'])})")
    nf, _ = med("ftcomm", 4)
    for other in ("torchft", "torchrun"):
        no, k = med(other, 4)
        if k:
            lines.append(f"kill -9 to next step, {other} / ftcomm: {no / nf:.1f}x")
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "summary.md"), "w").write(text)
    print(text)


HEADER = ["system", "kill", "victim_pid", "t_kill", "next_step_s", "full_size_s", "replacement_start_s",
          "ready_to_full_s", "steps_lost", "last_step_before", "step_time_s"]


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--systems", default="ddp,ftcomm,torchft,torchrun")
    p.add_argument("--build", default="build/release")
    p.add_argument("--out", default="build/bench/torch_recovery")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--window", type=int, default=200, help="steps over which the failure-free step time is taken")
    p.add_argument("--overhead-rounds", type=int, default=3,
                   help="failure-free jobs of ddp and of ftcomm, alternated (the last ftcomm one goes on to the kills)")
    p.add_argument("--settle", type=int, default=20)
    p.add_argument("--ckpt-every", type=int, default=20)
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--start-timeout", type=float, default=300)
    p.add_argument("--kill-timeout", type=float, default=240)
    p.add_argument("--report", action="store_true", help="only the summary of OUT's rows and logs")
    a = p.parse_args()
    if a.report:
        summary(a.out, a.ranks)
        return
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    print(f"seed {a.seed}", file=sys.stderr)
    with open(os.path.join(a.out, "rows.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        names = a.systems.split(",")
        if "ddp" in names and "ftcomm" in names:
            for _ in range(a.overhead_rounds - 1):
                for name in ("ddp", "ftcomm"):
                    s = {"ftcomm": Ftcomm, "ddp": Ddp}[name](name, a, a.out)
                    try:
                        measure(s, a, rng, w, kills=0)
                    finally:
                        s.stop()
                        f.flush()
        for name in names:
            cls = {"ftcomm": Ftcomm, "ddp": Ddp, "torchft": Torchft, "torchrun": Torchrun}[name]
            s = cls(name, a, a.out)
            try:
                measure(s, a, rng, w)
            finally:
                s.stop()
                f.flush()
    summary(a.out, a.ranks)


if __name__ == "__main__":
    main()
