"""The exceptions a failed ftcomm collective raises.

Every one is a ``torch.distributed.DistBackendError`` (so code that handles
c10d's errors handles these), and carries what the message says:

- ``rank``, ``slot``: this process in the group and its stable slot in the job;
- ``collective``: the op that failed (``all_reduce``, ``broadcast``, ...);
- ``status``, ``code``: libftcomm's status (``ftc_strerror`` text and number).
"""
from torch.distributed import DistBackendError


class FtcommError(DistBackendError):
    """A libftcomm call failed (the base of the others)."""

    status = None
    code = None
    rank = None
    slot = None
    collective = None


class PeerLostError(FtcommError):
    """A peer rank died or its connection broke (FTC_ERR_PEER_LOST)."""


class CollectiveTimeout(FtcommError):
    """The collective did not complete within its timeout (FTC_ERR_TIMEOUT),
    or ``Work.wait(timeout)`` ran out first."""


class RevokedError(FtcommError):
    """The group's epoch failed earlier (FTC_ERR_REVOKED): recover first."""


class AbortedError(FtcommError):
    """The group was aborted in this process (FTC_ERR_ABORTED)."""


class BelowMinSizeError(FtcommError):
    """Fewer ranks than the job's minimum remain (FTC_ERR_BELOW_MIN_SIZE)."""


class CoordinatorError(FtcommError):
    """The coordinator is unreachable or excluded this process (FTC_ERR_COORDINATOR)."""


class ConfigError(FtcommError):
    """A bad FTCOMM_* variable or configuration (FTC_ERR_CONFIG)."""


class MismatchError(FtcommError):
    """Ranks called one collective (or a send and its receive) with different
    arguments (FTC_ERR_MISMATCH); the message names both calls."""


# libftcomm's status codes (runtime/include/ftcomm.h); only ever appended.
_BY_CODE = {
    4: CollectiveTimeout,
    5: PeerLostError,
    6: RevokedError,
    9: BelowMinSizeError,
    14: AbortedError,
    15: ConfigError,
    16: CoordinatorError,
    18: MismatchError,
}


def error_class(code):
    """The exception class for a libftcomm status code."""
    return _BY_CODE.get(code, FtcommError)
