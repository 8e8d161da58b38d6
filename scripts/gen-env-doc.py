#!/usr/bin/env python3
"""Print docs/environment.md from common/ftc_params.def, the one table of FTCOMM_* variables."""
import re
import sys

src = open(sys.argv[1] if len(sys.argv) > 1 else "common/ftc_params.def").read()
rows = []
for m in re.finditer(r'^FTC_PARAM_(INT|STR)\((.*)\)\s*$', src, re.M):
    kind, args = m.group(1), m.group(2)
    # Split on commas outside quotes.
    parts = [p.strip() for p in re.findall(r'\s*("(?:[^"\\]|\\.)*"|[^,]+)', args)]
    if kind == "INT":
        _, name, default, lo, hi, doc = parts
        rows.append((name.strip('"'), f"`{default}`", f"{lo} .. {hi}", doc.strip('"')))
    else:
        _, name, default, doc = parts
        d = "(none)" if default == "NULL" else f"`{default.strip(chr(34))}`"
        rows.append((name.strip('"'), d, "string", doc.strip('"')))

print("# Environment variables\n")
print("Every `FTCOMM_*` variable that libftcomm and its tools read. `ftcomm-run` and the")
print("controller set the job's variables (job, coordinator, token, slot, world size) for each")
print("rank; the others are tunables. A value that is not a number or is out of range makes")
print("`ftc_comm_create` fail with `FTC_ERR_CONFIG`, and `ftc_last_error()` names the variable")
print("and the allowed range.\n")
print("This page is generated from `common/ftc_params.def` by `make docs-env`; a test fails")
print("when it is stale.\n")
print("| variable | default | range | meaning |")
print("|---|---|---|---|")
for name, default, rng, doc in rows:
    print(f"| `{name}` | {default} | {rng} | {doc} |")
print("\nLogging: `FTCOMM_LOG_LEVEL` (none, error, warn, info, debug, trace, any case, or 0 to 5;")
print("default warn) and `FTCOMM_LOG_SUBSYS` (comma list of init, coll, net, coord, recovery,")
print("recorder, nccl, k8s, ctrl, run, or all, any case; a leading `^` excludes; default all)")
print("are read once by the logger. A value that is none of these is ignored with a warning")
print("that names it, e.g. `ftcomm WARN init FTCOMM_LOG_SUBSYS=coll,recovry: \"recovry\" is not")
print("one of init, coll, net, coord, recovery, recorder, nccl, k8s, ctrl, run, all; logging")
print("every subsystem` (a misspelt name was dropped silently, and the others kept); so is a")
print("list that names none (`,`), which would turn off every line, errors too.")
print("`FTCOMM_LOG_TIME` puts the wall-clock time, to the microsecond, at the start of each")
print("line: `utc` (or `1`) as `2026-11-30T15:40:01.123456Z`, `epoch` as seconds since 1970")
print("(`1796053096.501559`), `none` (or `0`, the default) without; for lining up the")
print("processes of a job (recovery profiles in docs/performance/recovery.md).")
