"""The ftcomm torch.distributed backend, rank by rank against gloo.

Each test runs one job through ftcomm-run (the real coordinator and TCP data
plane); the ranks run worker.py, which checks its results itself and prints
one PASS line per rank.
"""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("FTC_BUILD", "build/release"))
RUN = os.path.join(BUILD, "bin", "ftcomm-run")
WORKER = os.path.join(HERE, "worker.py")


def job(n, scenario, limit=240, env=None, expect_rc=0, args=()):
    e = dict(os.environ)
    e.update(env or {})
    cmd = [RUN, "-n", str(n), "-q", "--timeout", str(limit), *args, "--", sys.executable, WORKER, scenario]
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=limit + 30, stdin=subprocess.DEVNULL)
    out = p.stdout
    print(out)
    assert p.returncode == expect_rc, f"ftcomm-run exited {p.returncode}:\n{out[-6000:]}"
    return out


def passes(out, scenario):
    return re.findall(rf"^\[\d+\] PASS {scenario} rank (\d+) of (\d+)", out, re.M)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_every_op_and_dtype_matches_gloo(n):
    out = job(n, "ops", limit=300)
    got = passes(out, "ops")
    assert sorted(int(r) for r, _ in got) == list(range(n)), out[-4000:]
    assert all(int(size) == n for _, size in got)
    counts = re.findall(r"PASS ops rank \d+ of \d+: (\d+) checks, (\d+) against gloo", out)
    assert len(counts) == n and all(int(c) >= 130 and int(g) >= 50 for c, g in counts), counts


@pytest.mark.parametrize("n", [3, 4])
def test_sub_groups_are_child_communicators_that_match_gloo(n, tmp_path):
    out = job(n, "groups", args=["--dump-dir", str(tmp_path)])
    assert len(passes(out, "groups")) == n, out[-4000:]


def test_bad_input_gives_a_clear_python_error():
    out = job(2, "errors", env={"TORCH_FR_BUFFER_SIZE": "64"})
    assert len(passes(out, "errors")) == 2, out[-4000:]


def test_mismatched_shapes_across_ranks_are_named_under_torch_debug():
    out = job(2, "mismatch", env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    assert len(passes(out, "mismatch")) == 2, out[-4000:]


def test_mismatched_shapes_raise_mismatch_error_naming_both_calls():
    out = job(2, "mismatch_wire")
    assert len(passes(out, "mismatch_wire")) == 2, out[-4000:]


def test_a_lost_peer_raises_peer_lost_error_naming_rank_slot_and_collective():
    out = job(2, "peer_lost", env={"FTCOMM_TIMEOUT_MS": "10000"}, args=["--grace", "30"])
    assert re.search(r"^\[0\] PASS peer_lost rank 0", out, re.M), out[-4000:]
    m = re.search(r"^\[0\] rank 0 got (\w+): (.*)$", out, re.M)
    assert m and "slot 0" in m.group(2), out[-4000:]


def test_shrink_group_after_a_loss_goes_on_with_the_survivors():
    out = job(3, "shrink", env={"FTCOMM_TIMEOUT_MS": "10000"}, args=["--min-size", "2", "--grace", "30"])
    assert len(passes(out, "shrink")) == 2, out[-4000:]


def test_reconfigure_shrinks_to_the_survivors_and_grows_with_a_replacement():
    out = job(3, "reconfigure", env={"FTCOMM_TIMEOUT_MS": "10000"},
              args=["--min-size", "2", "--replace", "--grace", "30"])
    got = re.findall(r"^\[\d+\] PASS reconfigure rank (\d+) of 3( \(joiner\))?", out, re.M)
    assert sorted(int(r) for r, _ in got) == [0, 1, 2] and sum(1 for _, j in got if j) == 1, out[-4000:]


@pytest.mark.parametrize("n", [2, 3])
def test_ddp_trains_like_gloo(n):
    out = job(n, "ddp")
    assert len(passes(out, "ddp")) == n, out[-4000:]


def test_fsdp2_trains_like_gloo():
    out = job(2, "fsdp")
    assert len(passes(out, "fsdp")) == 2, out[-4000:]


def test_manager_step_boundary_rides_on_the_gradient_reduction(tmp_path):
    out = job(3, "manager_votes", args=["--dump-dir", str(tmp_path)])
    assert len(passes(out, "manager_votes")) == 3, out[-4000:]
