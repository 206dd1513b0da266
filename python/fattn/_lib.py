"""_lib.py — ctypes loader of libfattn and the torch <-> C API glue shared by every op.

Holds: the ctypes mirror of include/fattn/fattn.h (structs, enums, function signatures), the
library loader (env FATTN_LIBRARY, then the copy installed in this package, then the system
search path), a per-thread cache of contexts (one CPU context; one CUDA context per
(device, stream)), torch tensor -> fattn_tensor views built from data_ptr()/shape()/stride()
without copying, and check() which turns a failed status into FattnError carrying
fattn_ctx_last_error(). Generic on purpose: other op families (PaTH) reuse it.

Nothing here allocates device memory or copies a tensor; callers allocate with torch.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading
from typing import Optional

import torch  # imported first: loads the CUDA libraries torch ships (libfattn's CUDA exact arm
              # dlopens the cuBLAS already loaded)

# ------------------------------------------------------------------------------- enums (fattn.h)
FATTN_OK = 0
FATTN_ERR_BAD_STRIDE = 5

DTYPE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
BACKEND_CPU, BACKEND_CUDA = 0, 1
PREC = {"auto": 0, "f32": 1, "tf32": 2, "native": 3}
PREC_NAME = {v: k for k, v in PREC.items()}
ALGO = {"fused": 0, "exact": 1}
CAUSAL_NONE, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT = 0, 1, 2
ALIGN_TOP_LEFT, ALIGN_BOTTOM_RIGHT = 0, 1
DIR_FWD, DIR_BWD = 0, 1


class FattnError(RuntimeError):
    """A fattn C API call failed. .status is the fattn_status value, str() carries the
    library's message (fattn_ctx_last_error)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------- structs
class Tensor(ctypes.Structure):
    """fattn_tensor: logical dims ne = [B, S, H, D], element strides nb."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_int64 * 4),
    ]


class AttnParams(ctypes.Structure):
    _fields_ = [
        ("scale", ctypes.c_float),
        ("bias", Tensor),
        ("causal", ctypes.c_int),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("window_align", ctypes.c_int),
        ("cu_seqlens_q", ctypes.c_void_p),
        ("cu_seqlens_kv", ctypes.c_void_p),
        ("num_seqs", ctypes.c_int64),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_kv", ctypes.c_int64),
        ("prec", ctypes.c_int),
        ("algo", ctypes.c_int),
    ]


class AttnMemoryInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "inputs_bytes", "saved_bytes", "fwd_workspace_bytes", "bwd_workspace_bytes",
        "grads_bytes", "fwd_peak_bytes", "bwd_peak_bytes")]


_P = ctypes.POINTER
_c = ctypes.c_void_p  # fattn_ctx_t *
# name -> (restype, argtypes). Only what the binding calls; a missing symbol fails at load.
_SIGNATURES = {
    "fattn_version": (ctypes.c_char_p, []),
    "fattn_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "fattn_prec_name": (ctypes.c_char_p, [ctypes.c_int]),
    "fattn_ctx_init_cpu": (ctypes.c_int, [ctypes.c_int, _P(_c)]),
    "fattn_ctx_init_cuda": (ctypes.c_int, [ctypes.c_int, ctypes.c_void_p, _P(_c)]),
    "fattn_ctx_free": (None, [_c]),
    "fattn_ctx_set_nthreads": (ctypes.c_int, [_c, ctypes.c_int]),
    "fattn_ctx_last_error": (ctypes.c_char_p, [_c]),
    "fattn_attn_params_default": (AttnParams, []),
    "fattn_resolve_prec": (ctypes.c_int, [_c, _P(AttnParams), _P(Tensor)]),
    "fattn_attn_supports": (ctypes.c_int, [_c, _P(AttnParams), _P(Tensor), _P(Tensor), _P(Tensor),
                                           ctypes.c_char_p, ctypes.c_size_t]),
    "fattn_attn_workspace_size": (ctypes.c_int, [_c, _P(AttnParams), _P(Tensor), _P(Tensor),
                                                 _P(Tensor), ctypes.c_int, _P(ctypes.c_size_t)]),
    "fattn_attn_saved_size": (ctypes.c_int, [_c, _P(AttnParams), _P(Tensor), _P(Tensor),
                                             _P(Tensor), _P(ctypes.c_size_t)]),
    "fattn_attn_fwd": (ctypes.c_int, [_c, _P(AttnParams), _P(Tensor), _P(Tensor), _P(Tensor),
                                      _P(Tensor), _P(Tensor), ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_size_t]),
    "fattn_attn_bwd": (ctypes.c_int, [_c, _P(AttnParams), _P(Tensor), _P(Tensor), _P(Tensor),
                                      _P(Tensor), _P(Tensor), ctypes.c_void_p, _P(Tensor),
                                      _P(Tensor), _P(Tensor), _P(Tensor), ctypes.c_void_p,
                                      ctypes.c_size_t]),
    "fattn_attn_bwd_ex": (ctypes.c_int, [_c, _P(AttnParams), _P(Tensor), _P(Tensor), _P(Tensor),
                                         _P(Tensor), _P(Tensor), ctypes.c_void_p, _P(Tensor),
                                         _P(Tensor), _P(Tensor), _P(Tensor), _P(Tensor),
                                         ctypes.c_void_p, ctypes.c_size_t]),
    "fattn_attn_memory": (ctypes.c_int, [_c, _P(AttnParams), _P(Tensor), _P(Tensor), _P(Tensor),
                                         _P(AttnMemoryInfo)]),
    "fattn_attn_max_seqlen": (ctypes.c_int, [_c, _P(AttnParams), ctypes.c_int, ctypes.c_int64,
                                             ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                             ctypes.c_int64, ctypes.c_uint64,
                                             _P(ctypes.c_int64)]),
}

# ------------------------------------------------------------------------------- loading
class _Library:
    """The CDLL with declared signatures. A symbol this build lacks raises when it is called,
    not at load, so an older or partial library still serves what it has."""

    def __init__(self, handle: ctypes.CDLL, path: str):
        self._name = path
        self._handle = handle
        for name, (res, args) in _SIGNATURES.items():
            try:
                fn = getattr(handle, name)
            except AttributeError:
                fn = _missing(name, path)
            else:
                fn.restype, fn.argtypes = res, args
            setattr(self, name, fn)


def _missing(name: str, path: str):
    def call(*_args):
        raise FattnError(-1, f"fattn: {name} is not exported by {path} (library too old?)")
    return call


_lib = None
_lib_lock = threading.Lock()


def _candidates():
    env = os.environ.get("FATTN_LIBRARY")
    if env:
        # An explicit path is the only candidate: a wrong one must fail, not be skipped.
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "lib*", "libfattn.so*")))
    found += sorted(glob.glob(os.path.join(here, "libfattn.so*")))
    # Running from the source tree (python/ on sys.path, e.g. `cd python && python -m pytest`):
    # the library the last `pip install ./python` built in its cache, newest first.
    built = glob.glob(os.path.join(here, "..", "build", "*", "libfattn.so"))
    found += sorted(built, key=os.path.getmtime, reverse=True)
    # ... or the copy inside an installed fattn that this source tree shadows.
    for entry in sys.path:
        other = os.path.join(entry or ".", "fattn", "lib", "libfattn.so")
        if os.path.isfile(other) and os.path.abspath(other) not in map(os.path.abspath, found):
            found.append(other)
    return found + ["libfattn.so"]


def lib():
    """The loaded libfattn (loaded on first use, so `import fattn` never needs it)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            errors = []
            for path in _candidates():
                try:
                    handle = ctypes.CDLL(path)
                except OSError as e:
                    errors.append(f"{path}: {e}")
                    continue
                _lib = _Library(handle, path)
                break
            if _lib is None:
                raise ImportError("fattn: cannot load libfattn (set FATTN_LIBRARY to its path, or "
                                  "`pip install ./python`): " + "; ".join(errors))
    return _lib


def library_path() -> str:
    return lib()._name


def version() -> str:
    return lib().fattn_version().decode()


# ------------------------------------------------------------------------------- contexts
_tls = threading.local()  # contexts are not shared between threads: last_error is per context


class _Ctx:
    """Owns one fattn_ctx_t; freed when the cache drops it."""

    def __init__(self, handle: int):
        self.handle = ctypes.c_void_p(handle)
        self._free = lib().fattn_ctx_free

    def __del__(self):
        if self.handle:
            self._free(self.handle)
            self.handle = ctypes.c_void_p()


def _init_error(status: int) -> FattnError:
    L = lib()
    msg = (L.fattn_ctx_last_error(None) or b"").decode(errors="replace")
    return FattnError(status, f"fattn: {L.fattn_status_string(status).decode()}: {msg}")


def thread_state() -> threading.local:
    """This thread's cache (contexts; the attention ops keep their plans here too)."""
    return _tls


def context(device: torch.device) -> ctypes.c_void_p:
    """The context for tensors on `device`: the CPU context (its thread count follows
    torch.get_num_threads(); results never depend on it), or the CUDA context of
    (device, torch.cuda.current_stream(device))."""
    return context_entry(device).handle


def context_entry(device: torch.device) -> "_Ctx":
    """context() as its cache entry: .handle, and .key, which names the context and what its
    size answers depend on (the CPU thread count; the CUDA device)."""
    cache = getattr(_tls, "ctxs", None)
    if cache is None:
        cache = _tls.ctxs = {}
    if device.type == "cpu":
        nthreads = torch.get_num_threads()
        ctx = cache.get("cpu")
        if ctx is None:
            out = ctypes.c_void_p()
            L = lib()
            s = L.fattn_ctx_init_cpu(nthreads, ctypes.byref(out))
            if s != FATTN_OK:
                raise _init_error(s)
            ctx = cache["cpu"] = _Ctx(out.value)
            ctx.nthreads = nthreads
            ctx.key = ("cpu", nthreads)
        elif ctx.nthreads != nthreads:
            check(ctx.handle, lib().fattn_ctx_set_nthreads(ctx.handle, nthreads))
            ctx.nthreads = nthreads
            ctx.key = ("cpu", nthreads)
        return ctx
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        stream = torch.cuda.current_stream(index).cuda_stream
        key = ("cuda", index, stream)
        ctx = cache.get(key)
        if ctx is None:
            out = ctypes.c_void_p()
            L = lib()
            s = L.fattn_ctx_init_cuda(index, ctypes.c_void_p(stream), ctypes.byref(out))
            if s != FATTN_OK:
                raise _init_error(s)
            ctx = cache[key] = _Ctx(out.value)
            ctx.key = key
        return ctx
    raise ValueError(f"fattn: tensors on device type '{device.type}' are not supported "
                     "(cpu and cuda only)")


class device_guard:
    """Make `device` torch's current CUDA device for the duration of a library call (the CUDA
    context is per device, but launches follow the thread's current device); no-op on the CPU."""

    def __init__(self, device: torch.device):
        self.guard = torch.cuda.device(device) if device.type == "cuda" else None

    def __enter__(self):
        if self.guard is not None:
            self.guard.__enter__()

    def __exit__(self, *exc):
        if self.guard is not None:
            self.guard.__exit__(*exc)


def check(ctx: ctypes.c_void_p, status: int, what: str = "") -> None:
    """Raise FattnError with the library's message when status is not FATTN_OK."""
    if status == FATTN_OK:
        return
    L = lib()
    msg = (L.fattn_ctx_last_error(ctx) or b"").decode(errors="replace")
    prefix = f"fattn: {what}: " if what else "fattn: "
    raise FattnError(status, f"{prefix}{L.fattn_status_string(status).decode()}: {msg}")


# ------------------------------------------------------------------------------- tensor views
def dtype_code(t: torch.Tensor, name: str) -> int:
    try:
        return DTYPE[t.dtype]
    except KeyError:
        raise TypeError(f"fattn: {name} has dtype {t.dtype}; the library takes float32, "
                        "float16 or bfloat16") from None


def view(t: Optional[torch.Tensor], name: str = "tensor") -> Tensor:
    """fattn_tensor of a 4-d torch tensor, strides in elements, no copy. None -> "not given".
    The library validates the strides (innermost must be 1) and reports them by name."""
    if t is None:
        return Tensor()
    if t.dim() != 4:
        raise ValueError(f"fattn: {name} must have 4 dims, got shape {tuple(t.shape)}")
    v = Tensor()
    v.data = t.data_ptr() or None
    v.dtype = dtype_code(t, name)
    v.ne[:] = t.shape
    v.nb[:] = t.stride() if t.numel() else _dense_strides(t.shape)
    return v


def _dense_strides(shape) -> tuple:
    """Row-major strides of `shape`. Used for tensors with no elements, whose torch strides
    can be anything (an expanded empty gradient has stride 0 everywhere): no element is read
    through them, so the contiguous ones are as true and pass the library's stride rules."""
    out, acc = [], 1
    for n in reversed(tuple(shape)):
        out.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(out))


def lse_view(lse: torch.Tensor) -> Tensor:
    """lse [B, Hq, Sq] float32 -> view with ne = [B, Hq, Sq, 1]."""
    v = Tensor()
    v.data = lse.data_ptr() or None
    v.dtype = DTYPE[torch.float32]
    strides = lse.stride() if lse.numel() else _dense_strides(lse.shape)
    for i in range(3):
        v.ne[i] = lse.shape[i]
        v.nb[i] = strides[i]
    v.ne[3], v.nb[3] = 1, 1
    return v


def ptr(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else (t.data_ptr() or None)
