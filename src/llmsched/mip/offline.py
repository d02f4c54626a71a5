"""Moved to :mod:`llmsched.online.offline`; these names stay here for llmsched.mip.full only.

The offline queues are a request policy (layer ``online``), which the solvers must not
import; this module goes once ``llmsched.mip.full`` stops importing it.
"""

from llmsched.online.offline import OfflineQueues, check_sizes, decode_sizes, offline_queues

__all__ = ["OfflineQueues", "check_sizes", "decode_sizes", "offline_queues"]
