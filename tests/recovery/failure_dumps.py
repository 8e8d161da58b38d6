#!/usr/bin/env python3
"""failure_dumps.py DIR RANK REASON [--exactly N] [--peer]

Every survivor's failure dump in DIR (the newest of each rank) carries the
coordinator's verdict dropping RANK for REASON. At least 3 survivors (exactly N
with --exactly); with --peer each also names RANK as the peer its backend saw
fail. Prints what it saw; exits non-zero with the reason otherwise. Used by
tests/recovery/recovery.sh and tests/nccl/recovery_nccl.sh.
"""
import glob, json, os, sys

args = sys.argv[1:]
peer = "--peer" in args
exactly = None
if "--exactly" in args:
    i = args.index("--exactly")
    exactly = int(args[i + 1])
    del args[i:i + 2]
args = [a for a in args if a != "--peer"]
d, rank, reason = args[0], int(args[1]), args[2]
newest = {}
for f in glob.glob(os.path.join(d, "rank-*.json")):
    j = json.load(open(f))
    if j.get("failure") and (j["rank"] not in newest or j["trigger_time_ns"] > newest[j["rank"]]["trigger_time_ns"]):
        newest[j["rank"]] = j
if (len(newest) != exactly) if exactly is not None else (len(newest) < 3):
    sys.exit("%d survivors wrote a failure dump, want %s" % (len(newest), exactly if exactly is not None else 3))
for r, j in sorted(newest.items()):
    v, f = j.get("verdict") or {}, j["failure"]
    named = [x for x in v.get("dropped", []) if x["rank"] == rank]
    if not v.get("decided") or not named or named[0]["reason"] != reason:
        sys.exit("rank %d's failure dump does not name rank %d (%s): %s" % (r, rank, reason, json.dumps(v)))
    if peer and f["peer"] != rank:
        sys.exit("rank %d's failure (%s) blames peer %d, want %d" % (r, f["status"], f["peer"], rank))
if peer:
    print("%d survivors' failure dumps name rank %d (%s: %s) as the coordinator's verdict and as their failed peer (%s)"
          % (len(newest), rank, reason, named[0].get("detail", ""),
             ", ".join(sorted(set(j["failure"]["status"] for j in newest.values())))))
else:
    print("%d survivors' failure dumps name rank %d (%s: %s)" % (len(newest), rank, reason, named[0].get("detail", "")))
