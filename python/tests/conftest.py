"""conftest.py — shared fixtures of the binding's tests: devices, dtypes, seeded RNG.

The tests import the installed package (`pip install ./python`); with FATTN_LIBRARY set they
also run from the source tree (python/ is put on sys.path when fattn is not installed).
CUDA cases are collected only when torch sees a GPU; otherwise they are skipped with a reason.
"""
import os
import sys

import pytest
import torch

try:
    import fattn  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA,
                                                                reason="no CUDA device"))]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)
    yield
