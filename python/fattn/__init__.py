"""fattn — exact, bitwise-deterministic, memory-linear attention training kernels for PyTorch.

A thin ctypes client of the fattn C library (libfattn.so, built by `pip install ./python`):

    import fattn
    o = fattn.attention(q, k, v, causal=True)          # q, k, v: [B, S, H, D], CPU or CUDA
    fattn.resolve_prec(q)                               # what "auto" runs here: "f32"/"tf32"/"native"
    fattn.memory(q, k, v, algo="exact")                 # the library's memory model, bytes

attention() is the custom op torch.ops.fattn.attn_fwd with a registered autograd formula
(torch.ops.fattn.attn_bwd) and fake kernels, so it works under torch.compile. See
docs/PYTORCH.md.
"""
from ._lib import FattnError, library_path, version
from ._attn import attention, max_seqlen, memory, resolve_prec, supports

__all__ = ["attention", "resolve_prec", "supports", "memory", "max_seqlen", "FattnError",
           "version", "library_path"]
__version__ = "0.1.0"
