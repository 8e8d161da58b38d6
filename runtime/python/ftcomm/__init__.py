"""ftcomm: fault-tolerant collectives for PyTorch.

``import ftcomm.torch`` registers the ``"ftcomm"`` backend of
``torch.distributed`` (docs/pytorch.md)::

    import ftcomm.torch
    import torch.distributed as dist
    dist.init_process_group("ftcomm")   # rank and size from the FTCOMM_* environment
"""
from ftcomm.errors import (
    AbortedError,
    BelowMinSizeError,
    CollectiveTimeout,
    ConfigError,
    CoordinatorError,
    FtcommError,
    MismatchError,
    PeerLostError,
    RevokedError,
)

__version__ = "0.1.0"
__all__ = [
    "AbortedError",
    "BelowMinSizeError",
    "CollectiveTimeout",
    "ConfigError",
    "CoordinatorError",
    "FtcommError",
    "Manager",
    "MismatchError",
    "PeerLostError",
    "RevokedError",
]


def __getattr__(name):
    # ftcomm.Manager imports torch: only when it is asked for.
    if name == "Manager":
        from ftcomm.manager import Manager

        return Manager
    raise AttributeError(f"module 'ftcomm' has no attribute {name!r}")
