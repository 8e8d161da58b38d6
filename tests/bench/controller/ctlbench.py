#!/usr/bin/env python3
"""ctlbench.py - the measuring half of tests/bench/controller/run.sh.

Talks to a real kube-apiserver (admin token) while ftcomm-controller (PID
given) runs against it, and plays the scheduler: a watch on the bench
namespace's pods binds every unbound pod to one of the kwok nodes (round
robin, skipping the nodes in the pod's ftcomm.dev/avoid-nodes annotation);
kwok then runs it. Phases:
  1. create JOBS TrainingJobs x REPLICAS replicas; time until every pod
     exists (first ADDED seen on the watch) and until every pod is Running;
  2. settle, then an idle window: controller API-request deltas (its own
     /metrics) and the API server's apiserver_request_total deltas;
  3. FAILURES pods patched to Failed (status subresource) one at a time:
     time from just before the PATCH to the replacement's ADDED event;
and samples the controller's VmRSS/VmHWM and utime+stime throughout.
Writes OUT/controller.json, OUT/controller.md and OUT/controller-raw/*.
Only the standard library; every wait is bounded.
"""
import argparse
import http.client
import json
import os
import queue
import ssl
import statistics
import sys
import threading
import time
import urllib.parse

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(msg):
    print(f"ctlbench: {msg}", file=sys.stderr, flush=True)


class Api:
    """One HTTPS connection per thread to the API server."""

    def __init__(self, server, ca, token):
        u = urllib.parse.urlparse(server)
        self.host, self.port = u.hostname, u.port
        self.ctx = ssl.create_default_context(cafile=ca)
        self.token = token
        self.local = threading.local()

    def conn(self, timeout=30):
        c = getattr(self.local, "c", None)
        if c is None:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)
            self.local.c = c
        return c

    def req(self, verb, path, body=None, ctype="application/json", ok=(200, 201)):
        for attempt in range(3):
            c = self.conn()
            try:
                h = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
                data = None
                if body is not None:
                    data = json.dumps(body).encode()
                    h["Content-Type"] = ctype
                c.request(verb, path, body=data, headers=h)
                r = c.getresponse()
                raw = r.read()
                if r.status not in ok:
                    raise RuntimeError(f"{verb} {path} -> {r.status}: {raw[:300]!r}")
                return r.status, raw
            except (http.client.HTTPException, OSError):
                c.close()
                self.local.c = None
                if attempt == 2:
                    raise
                time.sleep(0.2)

    def get_json(self, path):
        return json.loads(self.req("GET", path)[1])

    def text(self, path):
        return self.req("GET", path)[1].decode()


def parse_prom(text, name):
    """{frozenset(labels.items()): value} for the samples of one metric."""
    out = {}
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        rest = line[len(name):]
        if rest[:1] not in ("{", " "):
            continue
        labels = {}
        if rest.startswith("{"):
            end = rest.index("}")
            for part in split_labels(rest[1:end]):
                k, v = part.split("=", 1)
                labels[k] = v.strip('"')
            rest = rest[end + 1:]
        out[frozenset(labels.items())] = float(rest.split()[0])
    return out


def split_labels(s):
    parts, cur, inq = [], "", False
    for ch in s:
        if ch == '"':
            inq = not inq
        if ch == "," and not inq:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


class Proc:
    """The controller's memory and CPU from /proc."""

    def __init__(self, pid):
        self.pid = pid

    def mem(self):
        d = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:", "Threads:")):
                    k, v = line.split(":", 1)
                    d[k] = int(v.split()[0])
        return d  # kB

    def cpu(self):
        with open(f"/proc/{self.pid}/stat") as f:
            s = f.read()
        fields = s[s.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


class Sampler(threading.Thread):
    def __init__(self, proc, period, path):
        super().__init__(daemon=True)
        self.proc, self.period, self.path = proc, period, path
        self.stop = threading.Event()
        self.rows = []
        self.peak_rss = 0

    def run(self):
        t0 = time.monotonic()
        while not self.stop.is_set():
            try:
                m, c = self.proc.mem(), self.proc.cpu()
            except OSError:
                break
            self.peak_rss = max(self.peak_rss, m["VmRSS"])
            self.rows.append((time.monotonic() - t0, m["VmRSS"], m["VmHWM"], c, m.get("Threads", 0)))
            self.stop.wait(self.period)
        with open(self.path, "w") as f:
            f.write("t_s,vmrss_kb,vmhwm_kb,cpu_s,threads\n")
            for r in self.rows:
                f.write("%.2f,%d,%d,%.2f,%d\n" % r)


class PodWatch(threading.Thread):
    """Watches the namespace's pods: first-seen and Running times per name,
    and hands unbound pods to the binders."""

    def __init__(self, api, ns, rv):
        super().__init__(daemon=True)
        self.api, self.ns, self.rv = api, ns, rv
        self.lock = threading.Condition()
        self.added = {}    # name -> monotonic time of the first event that showed it
        self.running = {}  # name -> monotonic time it was first seen Running
        self.bound = set()
        self.to_bind = queue.Queue()
        self.events = 0
        self.stop = False
        self.error = None

    def run(self):
        try:
            while not self.stop:
                self.watch_once()
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.error = e

    def watch_once(self):
        q = urllib.parse.urlencode({"watch": "1", "resourceVersion": self.rv, "allowWatchBookmarks": "true",
                                    "timeoutSeconds": "600"})
        c = http.client.HTTPSConnection(self.api.host, self.api.port, context=self.api.ctx, timeout=700)
        c.request("GET", f"/api/v1/namespaces/{self.ns}/pods?{q}",
                  headers={"Authorization": f"Bearer {self.api.token}", "Accept": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"pod watch -> {r.status}: {r.read()[:300]!r}")
        while not self.stop:
            line = r.readline()
            if not line:
                break
            now = time.monotonic()
            ev = json.loads(line)
            obj = ev["object"]
            if ev["type"] == "ERROR":
                raise RuntimeError(f"pod watch ERROR: {obj}")
            self.rv = obj["metadata"]["resourceVersion"]
            if ev["type"] == "BOOKMARK":
                continue
            name = obj["metadata"]["name"]
            with self.lock:
                self.events += 1
                if ev["type"] != "DELETED":
                    if name not in self.added:
                        self.added[name] = now
                    if obj.get("status", {}).get("phase") == "Running" and name not in self.running:
                        self.running[name] = now
                    if not obj["spec"].get("nodeName") and name not in self.bound \
                            and not obj["metadata"].get("deletionTimestamp"):
                        self.bound.add(name)
                        avoid = obj["metadata"].get("annotations", {}).get("ftcomm.dev/avoid-nodes", "")
                        self.to_bind.put((name, set(a for a in avoid.split(",") if a)))
                self.lock.notify_all()
        c.close()

    def wait_for(self, pred, timeout):
        end = time.monotonic() + timeout
        with self.lock:
            while not pred():
                if self.error:
                    raise self.error
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.lock.wait(min(left, 0.5))
        return True


def binder(api, ns, nodes, w, counter):
    i = 0
    while True:
        item = w.to_bind.get()
        if item is None:
            return
        name, avoid = item
        for _ in range(len(nodes)):
            node = nodes[(counter[0] + i) % len(nodes)]
            i += 1
            if node not in avoid:
                break
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            api.req("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", body, ok=(201, 200, 409, 404))
        except Exception as e:  # noqa: BLE001 - a pod deleted meanwhile; counted, not fatal
            log(f"bind {name}: {e}")


def job_obj(ns, name, replicas):
    return {
        "apiVersion": "ftcomm.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas, "minReplicas": 1, "backend": "tcp",
            "failurePolicy": {"maxReplacements": 100, "backoffSeconds": 0},
            "template": {"spec": {"containers": [{"name": "trainer", "image": "example.com/trainer:1",
                                                  "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}},
        },
    }


def ctl_metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    t = c.getresponse().read().decode()
    c.close()
    return t


def api_counts(text):
    """Controller: {(verb, code): n}."""
    return {(dict(k)["verb"], dict(k)["code"]): v for k, v in parse_prom(text, "ftcomm_controller_api_requests_total").items()}


def server_counts(text):
    """API server: {(verb, resource, subresource): n} summed over codes."""
    out = {}
    for k, v in parse_prom(text, "apiserver_request_total").items():
        d = dict(k)
        key = (d.get("verb", ""), d.get("resource", ""), d.get("subresource", ""))
        out[key] = out.get(key, 0) + v
    return out


def delta(a, b):
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b) if b.get(k, 0) - a.get(k, 0)}


def by_verb(d):
    out = {}
    for (verb, _), n in d.items():
        out[verb] = out.get(verb, 0) + n
    return out


def fmt_verbs(d):
    return ", ".join(f"{k} {int(v)}" for k, v in sorted(d.items())) or "none"


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = max(0, min(len(xs) - 1, int(round(p / 100 * len(xs) + 0.5)) - 1))
    return xs[k]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--ns", default="bench")
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--replicas", type=int, default=32)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--failures", type=int, default=20)
    ap.add_argument("--idle", type=float, default=30)
    ap.add_argument("--create-timeout", type=float, default=300)
    ap.add_argument("--ctl-pid", type=int, required=True)
    ap.add_argument("--ctl-port", type=int, required=True)
    ap.add_argument("--retry-period", type=float, default=2)
    ap.add_argument("--out", required=True)
    ap.add_argument("--meta", default="")
    a = ap.parse_args()
    raw = os.path.join(a.out, "controller-raw")
    os.makedirs(raw, exist_ok=True)
    with open(a.token_file) as f:
        api = Api(a.server, a.ca, f.read().strip())
    proc = Proc(a.ctl_pid)
    res = {"jobs": a.jobs, "replicas": a.replicas, "pods": a.jobs * a.replicas, "nodes": a.nodes,
           "meta": a.meta, "load_start": open("/proc/loadavg").read().split()[:3]}

    # kwok nodes
    nodes = [f"kwok-node-{i}" for i in range(a.nodes)]
    have = {n["metadata"]["name"] for n in api.get_json("/api/v1/nodes")["items"]}
    for n in nodes:
        if n in have:
            continue
        api.req("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": n, "type": "kwok"}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                       "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"}}})
    t = time.monotonic()
    while True:
        ready = 0
        for n in api.get_json("/api/v1/nodes?labelSelector=type%3Dkwok")["items"]:
            for c in n.get("status", {}).get("conditions", []):
                if c["type"] == "Ready" and c["status"] == "True":
                    ready += 1
        if ready >= a.nodes:
            break
        if time.monotonic() - t > 120:
            raise SystemExit(f"only {ready} of {a.nodes} kwok nodes Ready after 120 s")
        time.sleep(1)
    log(f"{a.nodes} kwok nodes Ready")

    rv = api.get_json(f"/api/v1/namespaces/{a.ns}/pods")["metadata"]["resourceVersion"]
    w = PodWatch(api, a.ns, rv)
    w.start()
    counter = [0]
    binders = [threading.Thread(target=binder, args=(api, a.ns, nodes, w, counter), daemon=True) for _ in range(4)]
    for b in binders:
        b.start()
    sampler = Sampler(proc, 0.5, os.path.join(raw, "rss_cpu.csv"))
    sampler.start()

    # idle before: the controller with synced (empty) caches
    time.sleep(1)
    res["rss_empty_kb"] = proc.mem()["VmRSS"]
    m0 = api_counts(ctl_metrics(a.ctl_port))
    cpu0 = proc.cpu()

    # 1. create
    names = [f"job-{i:03d}" for i in range(a.jobs)]
    total = a.jobs * a.replicas
    t0 = time.monotonic()
    jq = queue.Queue()
    for n in names:
        jq.put(n)
    errs = []

    def creator():
        while True:
            try:
                n = jq.get_nowait()
            except queue.Empty:
                return
            try:
                api.req("POST", f"/apis/ftcomm.dev/v1alpha1/namespaces/{a.ns}/trainingjobs",
                        job_obj(a.ns, n, a.replicas))
            except Exception as e:  # noqa: BLE001
                errs.append(str(e))
    cts = [threading.Thread(target=creator, daemon=True) for _ in range(4)]
    for c in cts:
        c.start()
    for c in cts:
        c.join()
    if errs:
        raise SystemExit(f"creating TrainingJobs: {errs[:3]}")
    res["jobs_created_s"] = time.monotonic() - t0
    log(f"{a.jobs} TrainingJobs created in {res['jobs_created_s']:.1f} s")
    ok = w.wait_for(lambda: len(w.added) >= total, a.create_timeout)
    res["pods_seen"] = len(w.added)
    if not ok:
        log(f"only {len(w.added)} of {total} pods exist after {a.create_timeout} s")
    res["all_exist_s"] = (max(w.added.values()) - t0) if ok else None
    for q in (50, 90):
        xs = sorted(v - t0 for v in w.added.values())
        res[f"exist_p{q}_s"] = pct(xs, q) if xs else None
    log(f"pods exist: {len(w.added)} at {res['all_exist_s']}")
    ok_run = w.wait_for(lambda: len(w.running) >= total, max(30.0, a.create_timeout - (time.monotonic() - t0)))
    res["pods_running"] = len(w.running)
    res["all_running_s"] = (max(w.running.values()) - t0) if ok_run else None
    log(f"pods Running: {len(w.running)} at {res['all_running_s']}")

    # settle: the status writes after Running; until the queue is empty and no reconcile ran for 5 s
    # (the Lease renewal's GET+PUT every retry period never stop, so requests cannot tell)
    settle_t = time.monotonic()
    last, still = None, 0
    while time.monotonic() - settle_t < 120:
        t = ctl_metrics(a.ctl_port)
        cur = sum(parse_prom(t, "ftcomm_controller_reconciles_total").values())
        busy = sum(parse_prom(t, "ftcomm_controller_workqueue_depth").values()) + \
            sum(parse_prom(t, "ftcomm_controller_workqueue_waiting").values())
        if cur == last and not busy:
            still += 1
            if still >= 5:
                break
        else:
            still = 0
        last = cur
        time.sleep(1)
    res["settled_s"] = time.monotonic() - t0
    m1 = api_counts(ctl_metrics(a.ctl_port))
    cpu1 = proc.cpu()
    mem1 = proc.mem()
    res["create_requests"] = by_verb(delta(m0, m1))
    res["create_codes"] = {f"{v} {c}": n for (v, c), n in delta(m0, m1).items()}
    res["create_cpu_s"] = cpu1 - cpu0
    res["rss_after_create_kb"] = mem1["VmRSS"]
    res["hwm_after_create_kb"] = mem1["VmHWM"]

    # 2. idle window
    srv0 = server_counts(api.text("/metrics"))
    m2a = api_counts(ctl_metrics(a.ctl_port))
    cpu2a = proc.cpu()
    time.sleep(a.idle)
    m2b = api_counts(ctl_metrics(a.ctl_port))
    srv1 = server_counts(api.text("/metrics"))
    cpu2b = proc.cpu()
    mem2 = proc.mem()
    res["idle_s"] = a.idle
    res["idle_requests"] = by_verb(delta(m2a, m2b))
    res["idle_lease_expected"] = int(a.idle / a.retry_period)
    res["idle_cpu_s"] = cpu2b - cpu2a
    res["rss_steady_kb"] = mem2["VmRSS"]
    sd = delta(srv0, srv1)
    # What only the controller touches: TrainingJobs, pods and their bindings, Secrets, Events.
    mine = {f"{v} {r}{'/' + s if s else ''}": n for (v, r, s), n in sd.items()
            if r in ("trainingjobs", "pods", "secrets", "events") and v not in ("WATCH",)
            and not (r == "pods" and s == "binding")}
    res["idle_server_requests_controller_resources"] = mine
    res["idle_server_requests_all"] = {f"{v} {r}{'/' + s if s else ''}": n for (v, r, s), n in sd.items()}
    log(f"idle {a.idle:.0f} s: controller requests {res['idle_requests']}, server (controller resources) {mine}")

    # 3. failures
    lat = []
    failed_missing = 0
    cpu3a = proc.cpu()
    m3a = api_counts(ctl_metrics(a.ctl_port))
    for k in range(a.failures):
        job = names[(k * max(1, a.jobs // max(1, a.failures))) % a.jobs]
        slot = k % a.replicas
        pod = f"{job}-{slot}-0"
        repl = f"{job}-{slot}-1"
        time.sleep(0.3)
        t = time.monotonic()
        api.req("PATCH", f"/api/v1/namespaces/{a.ns}/pods/{pod}/status",
                {"status": {"phase": "Failed", "reason": "Error", "message": "ctlbench"}},
                ctype="application/merge-patch+json")
        if w.wait_for(lambda: repl in w.added, 30):
            lat.append(w.added[repl] - t)
        else:
            failed_missing += 1
            log(f"no replacement {repl} within 30 s")
    m3b = api_counts(ctl_metrics(a.ctl_port))
    res["failure_requests"] = by_verb(delta(m3a, m3b))
    res["failure_cpu_s"] = proc.cpu() - cpu3a
    res["failures"] = a.failures
    res["failure_latencies_ms"] = [round(x * 1000, 1) for x in lat]
    res["failure_missing"] = failed_missing
    if lat:
        res["failure_median_ms"] = statistics.median(lat) * 1000
        res["failure_p95_ms"] = pct(lat, 95) * 1000
        res["failure_max_ms"] = max(lat) * 1000
    log(f"failure->replacement: median {res.get('failure_median_ms')} ms, p95 {res.get('failure_p95_ms')} ms")
    time.sleep(2)

    mem = proc.mem()
    res["rss_end_kb"] = mem["VmRSS"]
    res["hwm_kb"] = mem["VmHWM"]
    res["cpu_total_s"] = proc.cpu()
    res["threads"] = mem.get("Threads")
    res["requests_total"] = by_verb(api_counts(ctl_metrics(a.ctl_port)))
    res["watch_events_seen_by_bench"] = w.events
    res["load_end"] = open("/proc/loadavg").read().split()[:3]
    sampler.stop.set()
    sampler.join()
    res["peak_rss_sampled_kb"] = sampler.peak_rss
    with open(os.path.join(raw, "controller_metrics.txt"), "w") as f:
        f.write(ctl_metrics(a.ctl_port))
    w.stop = True
    for _ in binders:
        w.to_bind.put(None)
    with open(os.path.join(a.out, "controller.json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    write_md(res, os.path.join(a.out, "controller.md"))
    return 0 if res["pods_seen"] >= total and not failed_missing else 1


def mb(kb):
    return f"{kb / 1024:.1f} MiB"


def write_md(r, path):
    def s(x, unit="s"):
        return "not reached" if x is None else f"{x:.1f} {unit}"
    mark = lambda okv: "met" if okv else "MISSED"  # noqa: E731
    idle_non_lease = {k: v for k, v in r["idle_requests"].items() if k not in ("GET", "PUT", "WATCH")}
    lease_calls = r["idle_requests"].get("GET", 0) + r["idle_requests"].get("PUT", 0)
    lines = [
        f"## Controller at scale: {r['jobs']} TrainingJobs x {r['replicas']} replicas = {r['pods']} pods on {r['nodes']} kwok nodes",
        "",
        f"{r['meta']}; load average {' '.join(r['load_start'])} at the start, {' '.join(r['load_end'])} at the end.",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| controller RSS, empty caches | {mb(r['rss_empty_kb'])} | |",
        f"| controller RSS, steady at {r['pods_seen']} pods | {mb(r['rss_steady_kb'])} | <= 30 MB (28.6 MiB): {mark(r['rss_steady_kb'] * 1024 <= 30e6)} |",
        f"| controller peak RSS (VmHWM) | {mb(r['hwm_kb'])} | |",
        f"| controller CPU: create phase / {r['idle_s']:.0f} s idle / {r['failures']} failures / whole run | "
        f"{r['create_cpu_s']:.2f} / {r['idle_cpu_s']:.2f} / {r['failure_cpu_s']:.2f} / {r['cpu_total_s']:.2f} s | |",
        f"| TrainingJobs created (4 client threads) | {r['jobs_created_s']:.1f} s | |",
        f"| all {r['pods']} pods exist (50% / 90% / all) | {s(r['exist_p50_s'])} / {s(r['exist_p90_s'])} / {s(r['all_exist_s'])} | |",
        f"| all pods Running (kwok, bound by the bench) | {s(r['all_running_s'])} ({r['pods_running']} pods) | |",
        f"| API requests, create phase | {fmt_verbs(r['create_requests'])} | |",
        f"| API requests, {r['idle_s']:.0f} s idle (controller's counters) | {fmt_verbs(r['idle_requests'])} "
        f"(Lease: {r['idle_lease_expected']} expected renewals, one PUT each) | only watches: "
        f"{mark(not idle_non_lease and lease_calls <= 2 * r['idle_lease_expected'] + 2)} (apart from the Lease) |",
        f"| API server, {r['idle_s']:.0f} s idle, non-watch requests on trainingjobs/pods/secrets/events | "
        f"{', '.join(f'{k} {int(v)}' for k, v in sorted(r['idle_server_requests_controller_resources'].items())) or 'none'} | |",
    ]
    if r.get("failure_median_ms") is not None:
        lines.append(f"| failure -> replacement created, {len(r['failure_latencies_ms'])} pods: median / p95 / max | "
                     f"{r['failure_median_ms']:.0f} / {r['failure_p95_ms']:.0f} / {r['failure_max_ms']:.0f} ms | "
                     f"median <= 1 s: {mark(r['failure_median_ms'] <= 1000)} |")
    else:
        lines.append("| failure -> replacement created | no replacement seen | MISSED |")
    lines.append(f"| API requests, failures phase | {fmt_verbs(r['failure_requests'])} | |")
    lines.append(f"| API requests, whole run | {fmt_verbs(r['requests_total'])} | |")
    lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
