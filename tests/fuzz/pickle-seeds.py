#!/usr/bin/env python3
"""pickle-seeds.py - writes the hand-made seeds of the pickle fuzz target's
corpus into tests/fuzz/corpus/pickle (the real torch dumps beside them come
from tests/recorder/torch/make-fr-dumps.py): python3 tests/fuzz/pickle-seeds.py"""
import collections
import os
import pickle
import pickletools

dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {"0": {"last_enqueued_collective": 2, "last_started_collective": -1,
                            "last_completed_collective": 1}},
        "comm_lib_version": "2.21.5",
        "entries": [{"record_id": i, "pg_id": 0, "process_group": ("0", "default_pg"),
                     "collective_seq_id": i + 1, "p2p_seq_id": 0, "op_id": i + 1,
                     "profiling_name": "nccl:all_reduce", "time_created_ns": 1700000000000000000 + i,
                     "input_sizes": [[4, 1024]], "input_dtypes": ["BFloat16"], "output_sizes": [[4, 1024]],
                     "output_dtypes": ["BFloat16"], "state": "scheduled", "duration_ms": 0.5,
                     "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
                     "retired": False, "timeout_ms": 600000, "is_p2p": False, "thread_id": "1",
                     "thread_name": "python", "frames": [{"name": "step", "filename": "t.py", "line": 3}]}
                    for i in range(2)]}
seeds = {}
for proto in (2, 3, 4, 5):
    seeds[f"seed-dump-proto{proto}"] = pickle.dumps(dump, protocol=proto)
seeds["seed-dump-proto2-optimized"] = pickletools.optimize(pickle.dumps(dump, protocol=2))
seeds["seed-scalars"] = pickle.dumps([None, True, False, 0, -1, 255, 65535, -2**31, 2**63 - 1, -2**63,
                                       1.5, float("inf"), "", "é€😀", b"\x00\xff", bytearray(b"ab"),
                                       (), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), {1, 2},
                                       frozenset([3]), {1: "int key", b"k": "bytes key"}], protocol=5)
shared = {"a": 1}
seeds["seed-shared"] = pickle.dumps([shared, shared, [shared]], protocol=2)
loop = []
loop.append(loop)
seeds["refused-self-reference"] = pickle.dumps(loop, protocol=2)
a = []
a.append({"x": a})
seeds["refused-indirect-self-reference"] = pickle.dumps(a, protocol=2)
deep = []
for _ in range(80):
    deep = [deep]
seeds["refused-too-deep"] = pickle.dumps(deep, protocol=2)
seeds["refused-big-int"] = pickle.dumps(2**64, protocol=2)
seeds["refused-global-reduce"] = pickle.dumps(collections.OrderedDict(a=1), protocol=2)
seeds["refused-stack-global"] = pickle.dumps(collections.OrderedDict(a=1), protocol=4)
seeds["refused-protocol0"] = pickle.dumps({"a": [1, 2.5, "x"]}, protocol=0)
seeds["refused-truncated"] = pickle.dumps(dump, protocol=2)[:300]
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "pickle")
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes(data))
