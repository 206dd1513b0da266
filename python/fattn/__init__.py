"""fattn — exact, bitwise-deterministic, memory-linear attention training kernels for PyTorch.

A thin ctypes client of the fattn C library (libfattn.so, built by `pip install ./python`):

    import fattn
    o = fattn.attention(q, k, v, causal=True)          # q, k, v: [B, S, H, D], CPU or CUDA
    o = fattn.sdpa(q, k, v, is_causal=True)             # F.scaled_dot_product_attention's API
    o = fattn.flash_attn_func(q, k, v, causal=True)     # FlashAttention-2's API
    fattn.resolve_prec(q)                               # what "auto" runs here: "f32"/"tf32"/"native"
    fattn.memory(q, k, v, algo="exact")                 # the library's memory model, bytes

attention() is the custom op torch.ops.fattn.attn_fwd with a registered autograd formula
(torch.ops.fattn.attn_bwd) and fake kernels, so it works under torch.compile. See
docs/PYTORCH.md.
"""
from ._lib import FattnError, library_path, version
from ._attn import attention, max_seqlen, memory, resolve_prec, supports
from ._ops import host_path
from ._compat import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                      flash_attn_varlen_func, sdpa)

__all__ = ["host_path", "attention", "sdpa", "flash_attn_func", "flash_attn_varlen_func",
           "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "resolve_prec", "supports",
           "memory", "max_seqlen", "FattnError", "version", "library_path"]
__version__ = "0.1.0"
