"""orthojit: JIT-compiled matrix orthogonalization (Newton-Schulz, Polar Express, Gram Newton-Schulz)
and the Muon optimizer for NumPy and PyTorch users. See docs/python.md."""

from ._orthojit import __version__
from .api import *  # noqa: F401,F403  (orthogonalize, compile, load_program, tune, bench, plan, info)
from .api import __all__ as _api_all
from .muon import Muon, convert_momentum_state, muon_presets  # noqa: F401
from .distributed import DistributedMuon  # noqa: F401

__all__ = ["__version__", "Muon", "DistributedMuon", "convert_momentum_state", "muon_presets"] + list(_api_all)
