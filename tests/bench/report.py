#!/usr/bin/env python3
"""report.py - turn the raw rows of tests/bench/run.sh into the benchmark report.

Reads OUT/raw/*.csv (one file per system and rank count, rows as printed by
ftcomm-bench and its peers), OUT/raw/ceiling.csv, status.csv and meta.txt, and
writes OUT/bench.csv (all rows), OUT/bench.md (busbw tables per rank count with
the ftcomm/Gloo and ftcomm/Open MPI TCP ratios, 8-byte latency, ceilings, and
the targets) and OUT/busbw.png (busbw against size). "Gloo" in the ratios is
the better of the Gloo algorithms measured at each size. When run.sh repeated
the runs, each system's best pass per size is shown (lowest time) and
bench.csv keeps every pass. Only measured numbers appear; a missing system
shows as "-".
    python3 tests/bench/report.py build/bench
"""
import csv
import glob
import os
import re
import sys

FIELDS = ["system", "collective", "ranks", "size", "count", "type", "op", "root",
          "time_us", "algbw_GBps", "busbw_GBps", "wrong", "iters"]
ORDER = ["ftcomm-tcp", "openmpi-tcp", "openmpi-shm", "gloo-ring", "gloo-bcube", "gloo-hd"]
NAMES = {"ftcomm-tcp": "ftcomm TCP", "openmpi-tcp": "Open MPI TCP",
         "openmpi-shm": "Open MPI shm", "gloo-ring": "Gloo ring",
         "gloo-bcube": "Gloo bcube", "gloo-hd": "Gloo hd",
         "torch-ftcomm": "torch ftcomm", "torch-gloo": "torch gloo", "ftcomm-c": "ftcomm from C (torch job)",
         "torch-ftcomm-async": "torch ftcomm async", "ftcomm-c-async": "ftcomm from C async (torch job)"}
MIB = 1 << 20


def human(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def fmt(v, digits=3):
    return "-" if v is None else ("%.*f" % (digits, v))


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def read_rows(out):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "raw", "*.csv"))):
        base = os.path.basename(path)
        if base in ("ceiling.csv", "status.csv"):
            continue
        m = re.search(r"-p(\d+)\.csv$", base)
        npass = int(m.group(1)) if m else 1
        with open(path) as f:
            # ftcomm-run prefixes each rank's lines with "[slot] "
            lines = [re.sub(r"^\[\d+\] ", "", line) for line in f]
            for rec in csv.reader(lines):
                if len(rec) != len(FIELDS) or rec[0] == "system":
                    continue
                try:
                    r = dict(zip(FIELDS, rec))
                    for k in ("ranks", "size", "count", "root", "wrong", "iters"):
                        r[k] = int(r[k])
                    for k in ("time_us", "algbw_GBps", "busbw_GBps"):
                        r[k] = float(r[k])
                    r["pass"] = npass
                except ValueError:
                    continue
                rows.append(r)
    return rows


def read_kv(path):
    kv = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    kv[k] = v
    return kv


def read_ceilings(out):
    c = {}
    path = os.path.join(out, "raw", "ceiling.csv")
    if os.path.exists(path):
        with open(path) as f:
            for rec in csv.reader(f):
                try:
                    if rec[0] == "loopback_tcp":
                        c["loopback"] = float(rec[3])
                        c["loopback_each"] = (float(rec[1]), float(rec[2]))
                        c["loopback_mode"] = rec[4] if len(rec) > 4 else "?"
                    elif rec[0] == "memcpy":
                        c["memcpy"] = float(rec[2])
                        c["memcpy_bytes"] = int(rec[1])
                except (IndexError, ValueError):
                    pass
    return c


def read_status(out):
    path = os.path.join(out, "raw", "status.csv")
    st = []
    if os.path.exists(path):
        with open(path) as f:
            st = [r for r in csv.DictReader(f)]
    return st


def torch_section(md, rows, by, ranks, small):
    """torch.distributed with the ftcomm backend against gloo's and against
    libftcomm called from C on the same communicator (ftcomm-c), all in one job
    (tests/bench/torch/torch_bench.py: each row the median of interleaved
    rounds); ftcomm-bench's own run (ftcomm-tcp) beside them. Several passes:
    the median of the passes' rows."""
    if not any(r["system"] == "torch-ftcomm" for r in rows):
        return
    md.append("## Through torch.distributed (tests/bench/torch)")
    md.append("")
    md.append("`dist.all_reduce` of f32 (synchronous, in place) with the `ftcomm` backend and with "
              "`gloo`, and `ftc_allreduce` called from C++ on the same communicator and tensor "
              "(ftcomm-c), all in one job, each the median of interleaved rounds; binding = "
              "torch-ftcomm's time over ftcomm-c's. bench us: ftcomm-bench in its own job.")
    md.append("")

    def med(system, n, size, coll="allreduce"):
        v = sorted(r["time_us"] for r in rows
                   if r["system"] == system and r["ranks"] == n and r["size"] == size and r["collective"] == coll)
        return v[len(v) // 2] if v else None

    def busbw(t, n, size):
        return None if t is None else size / t / 1e3 * (2 * (n - 1) / n if n > 1 else 1)

    for n in ranks:
        sizes = sorted({r["size"] for r in rows if r["ranks"] == n and r["system"] == "torch-ftcomm"})
        if not sizes:
            continue
        md.append("### %d ranks" % n)
        md.append("")
        md.append("| size | ftcomm busbw | gloo busbw | ftcomm/gloo | ftcomm us | gloo us | ftcomm-c us | binding "
                  "| bench us |")
        md.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for size in sizes:
            f, g, c, b = (med("torch-ftcomm", n, size), med("torch-gloo", n, size), med("ftcomm-c", n, size),
                          med("ftcomm-tcp", n, size))
            bind = "-"
            if f is not None and c is not None:
                extra = f - c
                bind = "%+.1f us" % extra if size < MIB else "%+.1f%%" % (100.0 * extra / c)
            md.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                human(size), fmt(busbw(f, n, size)), fmt(busbw(g, n, size)), fmt(ratio(g, f), 2),
                fmt(f, 1), fmt(g, 1), fmt(c, 1), bind, fmt(b, 1)))
        md.append("")
        asizes = [sz for sz in sizes if med("torch-ftcomm-async", n, sz) is not None]
        if asizes:
            md.append("Asynchronous (`dist.all_reduce(t, async_op=True).wait()` against `ftc_iallreduce` + "
                      "`ftc_wait` from C++; gloo's call is asynchronous either way), %d ranks:" % n)
            md.append("")
            md.append("| size | ftcomm async us | ftcomm-c async us | binding | gloo us | gloo/ftcomm |")
            md.append("|---:|---:|---:|---:|---:|---:|")
            for size in asizes:
                f, c, g = (med("torch-ftcomm-async", n, size), med("ftcomm-c-async", n, size),
                           med("torch-gloo", n, size))
                bind = "-" if f is None or c is None else "%+.1f us" % (f - c)
                md.append("| %s | %s | %s | %s | %s | %s |" % (human(size), fmt(f, 1), fmt(c, 1), bind, fmt(g, 1),
                                                             fmt(ratio(g, f), 2)))
            md.append("")
    ddp = {(r["system"], r["ranks"]): r["size"] for r in rows if r["collective"] == "ddp_step"}
    if ddp:
        md.append("DDP step time (a 3-layer MLP of %s of f32 gradients, batch 32; median of interleaved "
                  "rounds; ms):" % human(next(iter(ddp.values()))))
        md.append("")
        md.append("| ranks | ftcomm | gloo | ftcomm/gloo |")
        md.append("|---:|---:|---:|---:|")
        for n in ranks:
            f = med("ddp-ftcomm", n, ddp.get(("ddp-ftcomm", n)), "ddp_step")
            g = med("ddp-gloo", n, ddp.get(("ddp-gloo", n)), "ddp_step")
            md.append("| %d | %s | %s | %s |" % (n, fmt(f / 1e3 if f else None, 2), fmt(g / 1e3 if g else None, 2),
                                               fmt(ratio(f, g), 2)))
        md.append("")
    md.append("Targets: busbw >= 1.3x gloo from 1 MiB, 8-byte latency <= 1/5 of gloo's, binding <= 5% "
              "from 1 MiB and <= 10 us at 8 B, DDP step <= gloo's.")
    md.append("")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "build/bench"
    rows = read_rows(out)
    meta = read_kv(os.path.join(out, "raw", "meta.txt"))
    ceil = read_ceilings(out)
    status = read_status(out)

    with open(os.path.join(out, "bench.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS + ["pass"])
        for r in rows:
            w.writerow([r[k] for k in FIELDS + ["pass"]])

    systems = [s for s in ORDER if any(r["system"] == s for r in rows)]
    systems += sorted({r["system"] for r in rows} - set(systems))
    systems = [s for s in systems if any(r["system"] == s and r["collective"] == "allreduce" for r in rows)]
    glo = [s for s in systems if s.startswith("gloo-")]
    by = {}
    for r in rows:
        if r["collective"] != "allreduce":
            continue
        key = (r["system"], r["ranks"], r["size"])
        if key not in by or r["time_us"] < by[key]["time_us"]:
            by[key] = r
    npasses = max([r["pass"] for r in rows] or [1])
    # The median pass per size, a second view that one lucky pass cannot move.
    groups = {}
    for r in rows:
        if r["collective"] == "allreduce":
            groups.setdefault((r["system"], r["ranks"], r["size"]), []).append(r)
    med = {k: sorted(v, key=lambda x: x["time_us"])[(len(v) - 1) // 2] for k, v in groups.items()}
    ranks = sorted({r["ranks"] for r in rows})
    loop = ceil.get("loopback")

    def bus(s, n, size):
        r = by.get((s, n, size))
        return r["busbw_GBps"] if r else None

    def gloo_best(n, size):
        vals = [bus(s, n, size) for s in glo if bus(s, n, size) is not None]
        return max(vals) if vals else None

    md = []
    md.append("# ftcomm allreduce benchmark (f32 sum)")
    md.append("")
    md.append("Measured %s on %s CPUs (%s), kernel %s, commit %s; load average %s before, %s after."
              % (meta.get("date", "?"), meta.get("host_cpus", "?"), meta.get("cpu_model", "?"),
                 meta.get("kernel", "?"), meta.get("commit", "?"),
                 meta.get("load_before", "?"), meta.get("load_after", "?")))
    md.append("All ranks run on this one host and talk over loopback (or shared memory for "
              "Open MPI shm); busbw = algbw x 2(n-1)/n as in nccl-tests; time is the slowest "
              "rank's mean over the timed iterations; the first iteration of every size is "
              "checked (#wrong). %s Harness options: `%s`."
              % ("Each system ran %d times per rank count in alternating order; the tables "
                 "show its best pass per size." % npasses if npasses > 1 else "One pass.",
                 meta.get("sweep", "?")))
    if meta.get("nice", "0") not in ("", "0"):
        md.append("Every run had nice %s (above the host's other work)." % meta["nice"])
    md.append("")
    md.append("## Ceilings")
    md.append("")
    if loop is not None:
        a, b = ceil["loopback_each"]
        md.append("- Loopback TCP, one connection streaming both ways at once (1 MiB writes, "
                  "best of a thread per direction and one poll() thread): **%.3f GB/s per "
                  "direction** (%.3f and %.3f, %s). Mid-size collectives whose data stays in "
                  "cache can beat this streaming figure." % (loop, a, b, ceil.get("loopback_mode", "?")))
    else:
        md.append("- Loopback TCP: not measured (loopback_tcp failed).")
    if "memcpy" in ceil:
        md.append("- memcpy, one thread, %s buffers: **%.3f GB/s**."
                  % (human(ceil["memcpy_bytes"]), ceil["memcpy"]))
    else:
        md.append("- memcpy: not measured (memcpy_bw failed).")
    md.append("")

    for n in ranks:
        sizes = sorted({r["size"] for r in rows if r["ranks"] == n})
        md.append("## %d ranks: busbw (GB/s)" % n)
        md.append("")
        head = ["size"] + [NAMES.get(s, s) for s in systems]
        head += ["ftcomm/Gloo", "ftcomm/OMPI-TCP", "ftcomm/loopback"]
        md.append("| " + " | ".join(head) + " |")
        md.append("|" + "|".join(["---:"] * len(head)) + "|")
        for size in sizes:
            f = bus("ftcomm-tcp", n, size)
            cells = [human(size)] + [fmt(bus(s, n, size)) for s in systems]
            cells += [fmt(ratio(f, gloo_best(n, size)), 2), fmt(ratio(f, bus("openmpi-tcp", n, size)), 2),
                      fmt(ratio(f, loop), 2)]
            md.append("| " + " | ".join(cells) + " |")
        md.append("")

    md.append("## 8-byte allreduce latency (us, slowest rank's mean)")
    md.append("")
    head = ["ranks"] + [NAMES.get(s, s) for s in systems]
    md.append("| " + " | ".join(head) + " |")
    md.append("|" + "|".join(["---:"] * len(head)) + "|")
    small = {}
    for n in ranks:
        sz = min((r["size"] for r in rows if r["ranks"] == n), default=None)
        small[n] = sz
        cells = ["%d" % n]
        for s in systems:
            r = by.get((s, n, sz))
            cells.append(fmt(r["time_us"], 1) if r else "-")
        md.append("| " + " | ".join(cells) + " |")
    md.append("")

    def targets(tab, title):
        def tbus(sy, n, size):
            r = tab.get((sy, n, size))
            return r["busbw_GBps"] if r else None

        def tgloo(n, size):
            vals = [tbus(sy, n, size) for sy in glo if tbus(sy, n, size) is not None]
            return max(vals) if vals else None

        md.append(title)
        md.append("")
        md.append("| ranks | min ftcomm/Gloo, >= 1 MiB | min ftcomm/OMPI-TCP, >= 1 MiB | "
                  "8 B: ftcomm vs OMPI-TCP (us) | 8 B: ftcomm vs Gloo (us) |")
        md.append("|---:|---:|---:|---:|---:|")
        for n in ranks:
            big = sorted({r["size"] for r in rows if r["ranks"] == n and r["size"] >= MIB})
            rg = [(ratio(tbus("ftcomm-tcp", n, x), tgloo(n, x)), x) for x in big]
            ro = [(ratio(tbus("ftcomm-tcp", n, x), tbus("openmpi-tcp", n, x)), x) for x in big]
            rg = [v for v in rg if v[0] is not None]
            ro = [v for v in ro if v[0] is not None]

            def verdict(vals):
                if not vals:
                    return "-"
                m, at = min(vals)
                if m >= 1.0:
                    return "%.2f (met)" % m
                return "%.2f (missed by %.0f%%, at %s)" % (m, (1 - m) * 100, human(at))

            sz = small[n]

            def lat(sy):
                r = tab.get((sy, n, sz))
                return r["time_us"] if r else None
            f, o = lat("ftcomm-tcp"), lat("openmpi-tcp")
            gl = [lat(sy) for sy in glo if lat(sy) is not None]
            g = min(gl) if gl else None
            if f is None or o is None:
                lo = "-"
            elif f <= o:
                lo = "%.1f vs %.1f (met)" % (f, o)
            else:
                lo = "%.1f vs %.1f (missed by %.0f%%)" % (f, o, (f / o - 1) * 100)
            if f is None or g is None:
                lg = "-"
            elif f < g:
                lg = "%.1f vs %.1f (%.1fx lower)" % (f, g, g / f)
            else:
                lg = "%.1f vs %.1f (not lower)" % (f, g)
            md.append("| %d | %s | %s | %s | %s |" % (n, verdict(rg), verdict(ro), lo, lg))
        md.append("")

    targets(by, "## Targets (best pass per size, as in the tables)")
    if npasses > 1:
        targets(med, "## Targets on the median pass per size (how much the verdicts depend on noise)")

    torch_section(md, rows, by, ranks, small)

    wrong = [r for r in rows if r["wrong"]]
    if wrong:
        md.append("**Wrong results:** " + ", ".join("%s %d ranks %s: %d" % (
            r["system"], r["ranks"], human(r["size"]), r["wrong"]) for r in wrong))
    else:
        md.append("Every checked first iteration was correct (#wrong = 0 in all %d rows)." % len(rows))
    bad = [s for s in status if s.get("status") != "ok"]
    if bad:
        md.append("")
        md.append("Runs skipped or failed: " + ", ".join(
            "%s at %s ranks, pass %s (%s%s)" % (s["system"], s["ranks"], s.get("pass", "1"), s["status"],
                                                ", exit " + s["exit"] if s.get("exit") else "") for s in bad)
                  + "; see %s for their logs." % os.path.join(out, "raw"))
    md.append("")
    md.append("Files: bench.csv (every row), busbw.png (busbw against size), raw/ (per-run "
              "rows, commands, logs, load averages in status.csv).")

    with open(os.path.join(out, "bench.md"), "w") as f:
        f.write("\n".join(md) + "\n")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: matplotlib missing, no plot", file=sys.stderr)
        return
    if not ranks:
        return
    fig, axes = plt.subplots(1, len(ranks), figsize=(6 * len(ranks), 4.8), squeeze=False)
    for ax, n in zip(axes[0], ranks):
        for s in systems:
            pts = sorted((k[2], r["busbw_GBps"]) for k, r in by.items()
                         if k[0] == s and k[1] == n and r["busbw_GBps"] > 0)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3,
                        label=NAMES.get(s, s))
        if loop:
            ax.axhline(loop, color="gray", ls="--", lw=1, label="loopback TCP / direction")
        if "memcpy" in ceil:
            ax.axhline(ceil["memcpy"], color="black", ls=":", lw=1, label="memcpy (1 thread)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title("allreduce f32 sum, %d ranks" % n)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "busbw.png"), dpi=110)


if __name__ == "__main__":
    main()
