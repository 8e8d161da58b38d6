#!/usr/bin/env python3
"""pytorch-dumps.py - a PyTorch Flight Recorder dump set of any size for
ftcomm-trace's benchmark, in the layout real torch 2.15 dumps have (each
entry copied from tests/recorder/cases/torch-gloo-healthy-pickle/rank_0,
its Python stack included, with its ids and times renumbered).

  python3 pytorch-dumps.py RANKS ENTRIES OUT [MISSING]

writes OUT/pickle/rank_R (pickle protocol 2, as PyTorch writes on a
timeout) and OUT/json/rank_R.json (as _dump_fr_trace_json) for every rank
but MISSING (default: none); every rank's last collective is in flight."""
import copy
import json
import os
import pickle
import sys

ranks, n, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
missing = int(sys.argv[4]) if len(sys.argv) > 4 else -1
here = os.path.dirname(os.path.abspath(__file__))
src = pickle.load(open(os.path.join(here, "../../recorder/cases/torch-gloo-healthy-pickle/rank_0"), "rb"))
tmpl = src["entries"][0]
for sub in ("pickle", "json"):
    os.makedirs(os.path.join(out, sub), exist_ok=True)
for r in range(ranks):
    if r == missing:
        continue
    es = []
    for i in range(n):
        e = copy.deepcopy(tmpl)  # new containers per entry, as torch writes them
        e.update(record_id=i, collective_seq_id=i + 1, op_id=i + 1, retired=i < n - 1,
                 time_created_ns=1796667990388945306 + i * 1000000 + r,
                 process_group=("0", "default_pg"))
        es.append(e)
    status = {"last_enqueued_collective": n, "last_started_collective": -1, "last_completed_collective": n - 1}
    d = dict(src, entries=es, pg_status={"0": status},
             pg_config={"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}})
    with open(os.path.join(out, "pickle", f"rank_{r}"), "wb") as f:
        f.write(pickle.dumps(d, protocol=2))
    dj = dict(d, entries=[{k: v for k, v in e.items() if k != "frames"} for e in es],
              pg_status={"0": {k: str(v) for k, v in status.items()}})
    with open(os.path.join(out, "json", f"rank_{r}.json"), "w") as f:
        f.write(json.dumps(dj, sort_keys=True, separators=(",", ":")))
