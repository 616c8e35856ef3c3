"""escpod.live: live (read-until) barcode decisions.

- escpod.live.readuntil: a client of MinKNOW's live reads stream that feeds each read to the
  streaming classifier and the balancing policy and sends unblock / stop_further_data actions.
- escpod.live.mock_minknow: a mock of that MinKNOW service replaying POD5 reads, for tests.
- escpod.live.readfish_caller: a readfish caller plugin whose Results carry our barcode call.
- `python -m escpod.live run ...`: the command (see --help and docs/live_readuntil.md).

The classifier and the policy are the C++ ones, re-exported here from escpod._core when the
module has them: LiveClassifier, LiveRead, LiveDecision, BalancingPolicy, PolicyAction. The
submodules import grpc, minknow_api and readfish only when imported themselves.
"""
from .. import _core

_CORE_NAMES = ("LiveClassifier", "LiveRead", "LiveDecision", "BalancingPolicy", "PolicyAction")
__all__ = []
for _name in _CORE_NAMES:
    if hasattr(_core, _name):
        globals()[_name] = getattr(_core, _name)
        __all__.append(_name)
del _name


def have_core() -> bool:
    """True when escpod._core has the live classifier and the balancing policy."""
    return hasattr(_core, "LiveClassifier") and hasattr(_core, "BalancingPolicy")
