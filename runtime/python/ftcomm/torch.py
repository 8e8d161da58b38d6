"""The "ftcomm" backend of torch.distributed (docs/pytorch.md).

Importing this module registers the backend for CPU and CUDA tensors and
teaches ``init_process_group`` to rendezvous from the FTCOMM_* environment
that ftcomm-run and the TrainingJob controller give a process::

    import ftcomm.torch
    import torch.distributed as dist
    dist.init_process_group("ftcomm")      # no MASTER_ADDR, no store

The rendezvous joins the job (libftcomm's communicator: rank and size come
from the coordinator), then rank 0 serves a TCPStore for torch's own needs
(new_group, gloo sub-groups, barriers of the store) on an ephemeral port and
broadcasts its address over ftcomm itself.
"""
import atexit
import os
import socket
import sys
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist
import torch.distributed.rendezvous  # noqa: F401

from ftcomm import _C
from ftcomm.errors import ConfigError

# The module (torch.distributed.rendezvous is also the name of a function there).
_rdzv = sys.modules["torch.distributed.rendezvous"]

BACKEND = "ftcomm"
FtcommBackend = _C.FtcommBackend

__all__ = ["BACKEND", "FtcommBackend", "backend_of"]


def _in_ftcomm_job():
    return bool(os.environ.get("FTCOMM_COORDINATOR"))


def _not_in_job_error():
    return ConfigError(
        "ftcomm: this process is not part of an ftcomm job: FTCOMM_COORDINATOR is not set. "
        "Start it with `ftcomm-run -n N -- python train.py` or in a TrainingJob; a torchrun "
        "environment (MASTER_ADDR, RANK, WORLD_SIZE) alone is not enough (docs/pytorch.md)"
    )


def _create_backend(opts, backend_options):
    if not _in_ftcomm_job():
        raise _not_in_job_error()
    return _C.new_backend(
        opts.group_rank,
        opts.group_size,
        [int(r) for r in opts.global_ranks_in_group],
        opts.timeout.total_seconds(),
        str(opts.group_id),
    )


def _store_host():
    # Where the other ranks reach rank 0's store: where they reach its data plane.
    host = os.environ.get("FTCOMM_ADVERTISE_HOST") or os.environ.get("POD_IP") or socket.gethostname()
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _ftcomm_rendezvous(url, timeout=timedelta(minutes=30), **kwargs):
    if not _in_ftcomm_job():
        raise _not_in_job_error()
    query = parse_qs(urlparse(url).query)
    rank, size = _C.create_world()
    for key, have in (("rank", rank), ("world_size", size)):
        if key in query and int(query[key][0]) not in (-1, have):
            raise ValueError(
                f"ftcomm: init_process_group({key}={query[key][0]}) but the ftcomm job made this "
                f"process {key} {have}: leave {key} out, the job decides it"
            )
    epoch, joiner = _C.world_epoch()
    if joiner and epoch > 1:
        # A replacement admitted to a running job: the ranks that started it
        # are training, not in a rendezvous, so it cannot get rank 0's store
        # address; it keeps a store of its own (torch needs one to make the
        # group). Its state comes from ftcomm.Manager over the backend.
        yield (dist.HashStore(), rank, size)
        raise RuntimeError("ftcomm: the rendezvous happens once per process")
    if rank == 0:
        store = dist.TCPStore(_store_host(), 0, size, True, timeout=timeout, wait_for_workers=False)
        addr = f"{_store_host()}\n{store.port}"
    else:
        addr = ""
    addr = _C.world_broadcast(addr, 0)
    if rank != 0:
        host, port = addr.split("\n")
        store = dist.TCPStore(host, int(port), size, False, timeout=timeout)
    yield (store, rank, size)
    raise RuntimeError("ftcomm: the rendezvous happens once per process")


_env_handler = _rdzv._rendezvous_handlers["env"]


def _env_or_ftcomm(url, **kwargs):
    # env:// (init_process_group's default) with no MASTER_ADDR inside an
    # ftcomm job: the job's own rendezvous. A torchrun-style environment keeps
    # torch's env:// store; the backend still joins the ftcomm job.
    if not os.environ.get("MASTER_ADDR") and _in_ftcomm_job():
        return _ftcomm_rendezvous(url, **kwargs)
    return _env_handler(url, **kwargs)


_c10d = dist.distributed_c10d
_new_group_helper = _c10d._new_process_group_helper


def _uses_ftcomm(backend):
    return "ftcomm" in str(backend).lower()


def _new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs):
    # A group of ftcomm is a child communicator of the default group's, made
    # by a call in which every rank of the default group takes part. torch
    # calls the backend's creator only on the group's members: the others
    # take their part here (with the group's timeout), right after torch has
    # decided they are not members, at the same point of the program.
    result = _new_group_helper(group_size, group_rank, global_ranks_in_group, backend, *args, **kwargs)
    if (global_ranks_in_group and _uses_ftcomm(backend) and result[0] is _c10d.GroupMember.NON_GROUP_MEMBER
            and _c10d.is_initialized() and dist.get_rank() not in global_ranks_in_group):
        timeout = kwargs.get("timeout") or (args[3] if len(args) > 3 else None) or _c10d.default_pg_timeout
        _C.split_nonmember([int(r) for r in global_ranks_in_group], timeout.total_seconds())
    return result


def backend_of(group=None):
    """The FtcommBackend of a process group (the default group if None)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    be = pg._get_backend(torch.device("cpu"))
    if not isinstance(be, FtcommBackend):
        raise ValueError(f"ftcomm: the group's backend is {pg.name()}, not ftcomm")
    return be


if "ftcomm" not in _rdzv._rendezvous_handlers:
    _rdzv.register_rendezvous_handler("ftcomm", _ftcomm_rendezvous)
    _rdzv._rendezvous_handlers["env"] = _env_or_ftcomm
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=["cpu", "cuda"])
    _c10d._new_process_group_helper = _new_process_group_helper
    atexit.register(_C.shutdown_all)
