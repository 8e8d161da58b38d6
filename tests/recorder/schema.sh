#!/usr/bin/env bash
# schema.sh - docs/dump-format.schema.json against real dumps: the ones the
# recorder library writes (through ftcomm-trace-gen --via-recorder) and the
# ftcomm dumps of tests/recorder/cases must validate; a dump of a newer major
# version, a truncated one, ones with a malformed verdict and ones with a rank past a job's
# 1048576 must not. Skipped, with a message, when
# Python's jsonschema module is absent.
set -u
cd "$(dirname "$0")/../.."
gen=${FTC_REC_GEN:-build/release/tests/recorder/ftcomm-trace-gen}
python3 -c 'import jsonschema' 2>/dev/null || { echo "SKIP: python3 jsonschema not installed"; exit 0; }
[ -x "$gen" ] || { echo "missing $gen (run make test-bins)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
FTCOMM_DUMP_SIGNAL=0 "$gen" --ranks 4 --entries 20 --via-recorder never_entered "$tmp/real" >/dev/null || exit 1
python3 - docs/dump-format.schema.json "$tmp/real" tests/recorder/cases <<'PY'
import glob, json, os, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
v = jsonschema.Draft202012Validator(schema)
fail = 0
good = glob.glob(os.path.join(sys.argv[2], "*.json"))
cases = sys.argv[3]
# Dumps that must not validate: truncated, and of a newer major version.
bad = glob.glob(os.path.join(cases, "corrupt-file", "rank-4-*.json")) + \
      glob.glob(os.path.join(cases, "newer-version", "rank-2-*.json")) + \
      glob.glob(os.path.join(cases, "verdict-malformed", "rank-[23]-*.json")) + \
      glob.glob(os.path.join(cases, "ranks-past-a-job", "rank-[234]-*.json"))
for f in sorted(glob.glob(os.path.join(cases, "*", "*.json"))):
    # torch-*: PyTorch's own dumps, another format; incident.json: the coordinator's
    # incident record, not a dump
    if f not in bad and "/no-dumps/" not in f and "/torch-" not in f and \
            os.path.basename(f) != "incident.json":
        good.append(f)
for f in good:
    errs = list(v.iter_errors(json.load(open(f))))
    if errs:
        print("FAIL %s: %s" % (f, errs[0].message)); fail = 1
for f in bad:
    try:
        doc = json.load(open(f))
    except ValueError:
        continue  # not even JSON: rejected
    if v.is_valid(doc):
        print("FAIL %s: should not validate" % f); fail = 1
print("%d dumps validated, %d rejected as they should be" % (len(good), len(bad)))
sys.exit(fail)
PY
