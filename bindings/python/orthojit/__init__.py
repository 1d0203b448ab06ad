"""orthojit: JIT-compiled matrix orthogonalization (Newton-Schulz, Polar Express, Gram Newton-Schulz)
and the Muon optimizer for NumPy and PyTorch users. See docs/python.md."""

from ._orthojit import __version__, _openblas_coretype_for_host
from .openblas_before_torch import import_torch_with_openblas_kernel as _import_torch_with_openblas_kernel

_import_torch_with_openblas_kernel(_openblas_coretype_for_host())  # before .api and .muon import torch
from .api import *  # noqa: F401,F403  (orthogonalize, compile, load_program, tune, bench, plan, info)
from .api import __all__ as _api_all
from .muon import Muon, convert_momentum_state, muon_presets  # noqa: F401
from .distributed import DistributedMuon  # noqa: F401

__all__ = ["__version__", "Muon", "DistributedMuon", "convert_momentum_state", "muon_presets"] + list(_api_all)
