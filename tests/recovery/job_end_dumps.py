#!/usr/bin/env python3
"""job_end_dumps.py CASE DIR LOG CULPRIT SURVIVORS [--bound-ms MS] [--no-incident]
                  [--job NAME] [--incident-dir DIR] [--partial]

Checks what a job left in its dump directory DIR after a rank hung, however
the job ended (tests/recovery/job-ends.sh):

- every survivor (SURVIVORS, comma-separated ranks) wrote its own failure
  dump of the epoch that hung into DIR, and the rank's log (LOG, ftcomm-run's
  output at info level for `recovery`) says it reached the disk at most
  MS (default 1000) after its capture;
- the incident folder DIR/hang-*/ holds a dump of every survivor (stored by
  the coordinator at most MS after the rank captured it: file mtime against
  the dump's trigger_time_ns, one host, one clock) and incident.json, which
  lists every survivor as answered and CULPRIT as not answered, saying why;
- ftcomm-trace on the incident folder names CULPRIT in its headline and why
  its dump is missing.

--no-incident: no incident folder is expected; ftcomm-trace on the
survivors' failure dumps must name CULPRIT with the coordinator's verdict.
--job: only dumps of that job count (a dump directory shared by jobs);
--incident-dir: the incident folders are there (the controller's volume),
not in DIR; --partial: a survivor may be missing from the incident folder
when incident.json says why (the coordinator stopped, or dropped it, before
its upload came) and the rank's own copy of that dump is in DIR; ftcomm-trace
then reads the folder's dumps and those copies (as a user gathers them).

Prints one row for the case table (case, failure dumps, incident dumps,
slowest capture-to-disk of each); exits non-zero with the reason otherwise.
"""
import glob, json, os, re, shutil, subprocess, sys, tempfile

args = sys.argv[1:]
bound = 1000
if "--bound-ms" in args:
    i = args.index("--bound-ms")
    bound = int(args[i + 1])
    del args[i:i + 2]
def opt(name, default=None):
    if name not in args:
        return default
    i = args.index(name)
    v = args[i + 1]
    del args[i:i + 2]
    return v


job = opt("--job")
inc_root = opt("--incident-dir")
want_incident = "--no-incident" not in args
partial = "--partial" in args
args = [a for a in args if a not in ("--no-incident", "--partial")]
case, d, log, culprit, survivors = args[0], args[1], args[2], int(args[3]), [int(x) for x in args[4].split(",")]
trace = os.environ.get("FTC_TRACE", "build/release/bin/ftcomm-trace")


def fail(msg):
    sys.exit("%s: %s" % (case, msg))


text = open(log, errors="replace").read()
# "[r] ftcomm INFO recovery [rank r] epoch E failed (...): dump written to PATH, N ms after its capture"
written = {}
for m in re.finditer(r"dump written to (\S+), (\d+) ms after its capture", text):
    written[os.path.realpath(m.group(1))] = int(m.group(2))

# The survivors' own failure dumps (reason timeout, error or revoked) of the epoch that hung.
fails = {}
for f in glob.glob(os.path.join(d, "rank-*.json")):
    j = json.load(open(f))
    if not j.get("failure") or (job and j.get("job") != job):
        continue
    r = j["rank"]
    if r not in fails or j["trigger_time_ns"] < fails[r][1]["trigger_time_ns"]:
        fails[r] = (f, j)  # the first failure: the one the hang caused
missing = [r for r in survivors if r not in fails]
if missing:
    fail("no failure dump from surviving rank(s) %s in %s (there: %s)"
         % (missing, d, sorted(fails)))
fail_ms = {}
for r in survivors:
    f = os.path.realpath(fails[r][0])
    if f not in written:
        fail("rank %d's failure dump %s is on disk but its log has no 'dump written to' line for it" % (r, f))
    fail_ms[r] = written[f]
    if written[f] > bound:
        fail("rank %d's failure dump reached the disk %d ms after its capture (bound %d ms)" % (r, written[f], bound))

inc_ms, inc_ranks, head, inc_dir = {}, [], "", ""
if want_incident:
    dirs = sorted(glob.glob(os.path.join(inc_root or d, "hang-*")))
    if not dirs:
        fail("no incident folder (hang-*) in %s" % (inc_root or d))
    inc_dir = dirs[0]
    for f in glob.glob(os.path.join(inc_dir, "rank-*.json")):
        j = json.load(open(f))
        r = j["rank"]
        ms = (os.stat(f).st_mtime_ns - j["trigger_time_ns"]) / 1e6
        if r not in inc_ms or ms < inc_ms[r]:
            inc_ms[r] = ms
    inc_ranks = sorted(inc_ms)
    missing = [r for r in survivors if r not in inc_ms]
    if missing and not partial:
        fail("the incident folder %s has no dump of surviving rank(s) %s (there: %s)" % (inc_dir, missing, inc_ranks))
    slow = [(r, ms) for r, ms in inc_ms.items() if ms > bound]
    if slow:
        fail("incident dumps stored later than %d ms after their capture: %s" % (bound, slow))
    rec_path = os.path.join(inc_dir, "incident.json")
    if not os.path.exists(rec_path):
        fail("no incident.json in %s" % inc_dir)
    rec = json.load(open(rec_path))
    states = {x["rank"]: x for x in rec["ranks"]}
    # A survivor's own copy of the dump it wrote for the incident (reason coordinator).
    local = {}
    for f in glob.glob(os.path.join(d, "rank-*.json")):
        j = json.load(open(f))
        if j.get("reason") == "coordinator" and (not job or j.get("job") == job) and \
                j.get("epoch") == rec.get("epoch"):
            local[j["rank"]] = f
    for r in survivors:
        st = states.get(r, {}).get("state")
        if st == "answered":
            continue
        if not (partial and r in missing and st and st != "asked" and states[r].get("detail")):
            fail("incident.json: surviving rank %d is %s, want answered%s" % (r, states.get(r), " or why not" if partial else ""))
        if r not in local:
            fail("rank %d's dump for the incident is neither in %s nor in %s" % (r, inc_dir, d))
    c = states.get(culprit)
    if not c or c["state"] == "answered" or not c.get("why"):
        fail("incident.json does not say why rank %d has no dump: %s" % (culprit, c))
    where = inc_dir
    if missing:  # the folder's dumps, the survivors' own copies of the others, the record
        where = tempfile.mkdtemp()
        for f in glob.glob(os.path.join(inc_dir, "*.json")):
            shutil.copy(f, where)
        for r in missing:
            shutil.copy(local[r], os.path.join(where, "rank-%d.json" % r))
    p = subprocess.run([trace, where], capture_output=True, text=True)
    head = p.stdout.splitlines()[0] if p.stdout else p.stderr.strip()
    if where != inc_dir:
        shutil.rmtree(where)
    if "no dump from rank" not in head or ("rank %d's dump: " % culprit) not in head:
        fail("ftcomm-trace %s does not name rank %d and why its dump is missing: %s" % (inc_dir, culprit, head))
    culprit_why = "%s (%s)" % (c["why"], c["state"])
    if missing:
        culprit_why += "; ranks %s: %s (their own copies in DIR)" % (
            ",".join(str(r) for r in missing), "; ".join(states[r]["detail"] for r in missing))
else:
    # No dump was asked for: the survivors' own failure dumps name the culprit
    # (their verdicts, rewritten once the next epoch came).
    where = tempfile.mkdtemp()
    for r in survivors:
        shutil.copy(fails[r][0], where)
    p = subprocess.run([trace, where], capture_output=True, text=True)
    shutil.rmtree(where)
    head = p.stdout.splitlines()[0] if p.stdout else p.stderr.strip()
    if ("rank %d " % culprit) not in head or ("coordinator agrees" not in head and "VERDICT" not in head):
        fail("ftcomm-trace on the survivors' failure dumps does not name rank %d with the coordinator's verdict: %s"
             % (culprit, head))
    culprit_why = "- (no dump asked for)"

print("| %s | %s in DIR | %s | %d ms | %s | %s |" % (
    case, ",".join(str(r) for r in sorted(fails)),
    ("%s in %s/" % (",".join(str(r) for r in inc_ranks) or "none", os.path.basename(inc_dir))) if want_incident else "-",
    max(fail_ms.values()),
    ("%.0f ms" % max(inc_ms.values())) if inc_ms else "-",
    culprit_why))
if head:
    print("    trace: %s" % head)
