"""distributed.py — exact ring attention (context parallelism) over torch.distributed.

Each rank holds a shard of the sequence; K/V blocks travel around a ring of ranks while every
rank attends its queries to each block in turn and merges the partial results exactly:

    from fattn.distributed import ring_attention, zigzag_shard, zigzag_unshard
    q, k, v = (zigzag_shard(t, rank, world) for t in (q_full, k_full, v_full))
    o = ring_attention(q, k, v, causal=True)          # o: this rank's shard of the output

The pieces are public, so another scheduler can reuse them (docs/RING.md):

- block_attention(q, k_blk, v_blk) -> (o, lse): one K/V block's partial result;
- merge_partials([(o, lse), ...]) -> (o, lse): the exact log-sum-exp merge, in list order, f32;
- block_backward(dout, q, k_blk, v_blk, o, lse, dq_acc, dk_acc, dv_acc): the block's exact
  share of dq, dk, dv, given the GLOBAL o and lse (so that delta = rowsum(o * dout) and the
  probabilities exp(s - lse) are the global ones), added into caller-given f32 buffers.

Causal attention uses the zigzag layout (the global sequence cut into 2N chunks, rank i holding
chunks i and 2N-1-i), which gives every rank the same amount of work. Results are bitwise
deterministic for a given world size: blocks are merged and gradients summed in the ring's step
order (a function of rank and world size only), in f32, without atomics.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import _attn, _lib, _ops
from ._attn import attention

__all__ = ["ring_attention", "block_attention", "block_backward", "merge_partials",
           "zigzag_shard", "zigzag_unshard"]

_NEG_INF = float("-inf")

# The library adds a bias row as (bias - c), c = the row's largest allowed bias, and its
# backward recomputes lse' = lse - c from the block's own keys when |c| > 16 (kCeilExact in
# src/cpu/attn_impl.h and src/cuda/attn/common.cuh). Recomputed from one block, lse' would be
# the block's, not the global one; the ring therefore shifts each block's bias so that every
# row's ceiling stays within this bound (see _shift_bias).
_CEIL_EXACT = 16.0


# ------------------------------------------------------------------------------ zigzag layout
def _zigzag_chunk(length: int, world: int, what: str) -> int:
    if world < 1:
        raise ValueError(f"fattn.distributed: world must be >= 1, got {world}")
    if length % (2 * world):
        raise ValueError(f"fattn.distributed: {what} has length {length}, which the zigzag "
                         f"layout cannot split into 2 * world = {2 * world} equal chunks")
    return length // (2 * world)


def zigzag_shard(x: Tensor, rank: int, world: int, dim: int = 1) -> Tensor:
    """Rank `rank`'s zigzag shard of the global sequence x along dim: the sequence is cut into
    2·world equal chunks and the rank gets chunks rank and 2·world-1-rank, concatenated (a copy).
    A per-key bias [B, 1, 1, S] is sharded along its keys with dim=3."""
    if not 0 <= rank < world:
        raise ValueError(f"fattn.distributed: rank must be in [0, world={world}), got {rank}")
    c = _zigzag_chunk(x.shape[dim], world, f"x (dim {dim})")
    return torch.cat((x.narrow(dim, rank * c, c), x.narrow(dim, (2 * world - 1 - rank) * c, c)),
                     dim)


def zigzag_unshard(shards: Sequence[Tensor], dim: int = 1) -> Tensor:
    """The global sequence from every rank's zigzag shard (shards[r] from rank r, e.g. the list
    all_gather fills): the inverse of zigzag_shard."""
    world = len(shards)
    if world == 0:
        raise ValueError("fattn.distributed: shards is empty")
    length = shards[0].shape[dim]
    for r, s in enumerate(shards):
        if s.shape[dim] != length:
            raise ValueError(f"fattn.distributed: shards[{r}] has length {s.shape[dim]} along dim "
                             f"{dim}, shards[0] has {length}")
    if length % 2:
        raise ValueError(f"fattn.distributed: a zigzag shard holds 2 chunks, so its length "
                         f"along dim {dim} must be even, got {length}")
    c = length // 2
    first = [shards[i].narrow(dim, 0, c) for i in range(world)]
    second = [shards[i].narrow(dim, c, c) for i in reversed(range(world))]
    return torch.cat(first + second, dim)


# ------------------------------------------------------------------------------ the merge seam
def block_attention(q: Tensor, k_blk: Tensor, v_blk: Tensor, *, bias: Optional[Tensor] = None,
                    causal: Union[bool, str] = False, scale: Optional[float] = None,
                    prec: str = "auto") -> Tuple[Tensor, Tensor]:
    """One K/V block's partial attention: fattn.attention(q, k_blk, v_blk, ...,
    return_lse=True), i.e. o [B, Sq, Hq, Dv] normalized over this block's keys only and lse
    [B, Hq, Sq] f32 (-inf for a row with no allowed key in the block). Merge the blocks'
    partials with merge_partials. The keywords are fattn.attention's (causal alignment
    conventions included: True is bottom-right)."""
    return attention(q, k_blk, v_blk, bias=bias, causal=causal, scale=scale, prec=prec,
                     return_lse=True)


def _merge2(o_a: Tensor, l_a: Tensor, o_b: Tensor, l_b: Tensor) -> Tuple[Tensor, Tensor]:
    """Exact merge of two f32 partials (o [B, S, H, Dv], lse [B, H, S]). A row that is empty in
    both (lse -inf) gives o = 0, lse = -inf; NaN and +inf propagate."""
    m = torch.maximum(l_a, l_b)
    m = torch.where(m == _NEG_INF, 0.0, m)  # both empty: any finite shift, the weights are 0
    w_a, w_b = torch.exp(l_a - m), torch.exp(l_b - m)
    total = w_a + w_b
    lse = m + torch.log(total)               # log 0 = -inf for an empty row
    empty = total == 0
    a = torch.where(empty, 0.0, w_a / total).transpose(1, 2).unsqueeze(-1)  # [B, S, H, 1]
    b = torch.where(empty, 0.0, w_b / total).transpose(1, 2).unsqueeze(-1)
    return o_a * a + o_b * b, lse


def _check_partial(i: int, o: Tensor, lse: Tensor, o_shape: torch.Size) -> None:
    """partials[i] is (o [B, S, H, Dv], lse [B, H, S]) with o of partials[0]'s shape."""
    if o.dim() != 4 or lse.dim() != 3:
        raise ValueError(f"fattn.distributed: partials[{i}] must be (o [B, S, H, Dv], lse "
                         f"[B, H, S]), got shapes {tuple(o.shape)} and {tuple(lse.shape)}")
    B, S, H, _ = o.shape
    if tuple(lse.shape) != (B, H, S):
        raise ValueError(f"fattn.distributed: partials[{i}]: lse has shape {tuple(lse.shape)}, "
                         f"o {tuple(o.shape)} needs [B, H, S] = {(B, H, S)}")
    if o.shape != o_shape:
        raise ValueError(f"fattn.distributed: partials[{i}]: o has shape {tuple(o.shape)}, "
                         f"partials[0] {tuple(o_shape)}")


def merge_partials(partials: Sequence[Tuple[Tensor, Tensor]]) -> Tuple[Tensor, Tensor]:
    """Exact merge of per-block partials [(o, lse), ...] into (o, lse), both float32.

    Log-sum-exp rescaling in f32, folded left to right in list order (the order fixes the
    bits: pass the blocks in a fixed order, e.g. key-block order, never arrival order). Rows
    where every part is -inf give o = 0 and lse = -inf, as fattn.attention does."""
    if len(partials) == 0:
        raise ValueError("fattn.distributed: partials is empty")
    o, lse = (t.float() for t in partials[0])
    _check_partial(0, o, lse, o.shape)
    for i, (o_i, l_i) in enumerate(partials[1:], 1):
        _check_partial(i, o_i, l_i, o.shape)
        o, lse = _merge2(o, lse, o_i.float(), l_i.float())
    return o, lse


def _check_acc(name: str, acc: Tensor, like: Tensor) -> None:
    if acc.dtype != torch.float32 or tuple(acc.shape) != tuple(like.shape):
        raise ValueError(f"fattn.distributed: {name} must be a float32 buffer of shape "
                         f"{tuple(like.shape)}, got {acc.dtype} {tuple(acc.shape)}")


def _attn_bwd(dout, q, k, v, o, lse, bias, causal, scale, prec):
    """fattn::attn_bwd with a caller-given o and lse (algo "fused": it recomputes the
    probabilities as exp(s - lse), so a global lse gives the global probabilities)."""
    q, k, v, bias = _attn._prepare(q, k, v, bias, None)
    scalars = _attn.normalize(q, causal=causal, scale=scale, prec=prec, algo="fused")
    saved = torch.empty(0, dtype=torch.uint8, device=q.device)  # "fused" keeps nothing
    try:
        return _ops.attn_bwd_op(dout, q, k, v, o, lse, saved, bias, None, None, *scalars)
    except RuntimeError as e:
        if isinstance(e, _lib.FattnError):
            raise
        raise _ops.shim_error(e) from None


def block_backward(dout: Tensor, q: Tensor, k_blk: Tensor, v_blk: Tensor, o: Tensor,
                   lse: Tensor, dq_acc: Tensor, dk_acc: Tensor, dv_acc: Tensor, *,
                   bias: Optional[Tensor] = None, causal: Union[bool, str] = False,
                   scale: Optional[float] = None, prec: str = "auto") -> None:
    """Adds one K/V block's exact contribution to dq, dk, dv into the f32 buffers dq_acc
    (q's shape), dk_acc (k_blk's), dv_acc (v_blk's), in place.

    o [B, Sq, Hq, Dv] and lse [B, Hq, Sq] must be the GLOBAL output and log-sum-exp (merged over
    every block), not this block's partial: the library's backward then uses the global
    probabilities exp(s - lse) and the global delta = rowsum(o * dout), so its dq, dk, dv are
    exactly this block's terms of the full gradient. Summing them over all blocks gives the
    gradient of attention over all keys. bias / causal / scale / prec: as in the block's
    forward (block_attention).

    With a bias, keep every row's largest allowed bias within [-16, 16]: beyond that the
    library recomputes the row's lse from this block's keys alone (its bias-ceiling rule,
    docs/RING.md), which is not the global lse. Shifting a row's bias by a constant and its lse
    by the same constant changes nothing else; ring_attention does that per block."""
    _check_acc("dq_acc", dq_acc, q)
    _check_acc("dk_acc", dk_acc, k_blk)
    _check_acc("dv_acc", dv_acc, v_blk)
    if lse.dtype != torch.float32:
        raise ValueError(f"fattn.distributed: lse must be float32, got {lse.dtype}")
    dq, dk, dv = _attn_bwd(dout.to(q.dtype), q, k_blk, v_blk, o.to(q.dtype), lse,
                           None if bias is None else bias.detach(), causal, scale, prec)
    dq_acc.add_(dq)
    dk_acc.add_(dk)
    dv_acc.add_(dv)


# ------------------------------------------------------------------------------ blocks of the ring
@dataclass(frozen=True)
class _Block:
    """The part of a K/V block a rank's queries attend to: query rows, key columns (slices of
    the local sequence) and the mask within them (False or "top_left")."""
    rows: slice
    cols: slice
    causal: Union[bool, str]


_ALL = slice(None)


def _block(rank: int, owner: int, causal: bool, s_local: int) -> _Block:
    """What rank's queries see of owner's keys (in the zigzag layout, some part of every block).

    Non-causal: everything. Causal, zigzag (rank r holds chunks r and 2N-1-r, each of c =
    s_local / 2 tokens; chunk a sees chunk b fully when a > b, causally when a == b):
      owner == rank: the local sequence is in global order, so plain causal on it (Sq == Skv:
                     top-left and bottom-right agree);
      owner <  rank: every local query sees the owner's first chunk fully, its second not;
      owner >  rank: only the local second chunk sees keys, and all of them."""
    if not causal:
        return _Block(_ALL, _ALL, False)
    c = s_local // 2
    if owner == rank:
        return _Block(_ALL, _ALL, "top_left")
    if owner < rank:
        return _Block(_ALL, slice(0, c), False)
    return _Block(slice(c, None), _ALL, False)


def _shift_bias(bias: Optional[Tensor], blk: _Block) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """A block's per-key bias [B', H', 1, Sk] (f32) as (bias - ref, ref), ref broadcastable to
    the block's lse [B, Hq, Sq].

    Softmax does not change when a row's bias moves by a constant, and lse moves with it:
    lse = ref + lse(bias - ref). ref is the block's largest bias per (batch, head) (0 where
    every key is -inf), so every row's ceiling (its largest allowed bias) is 0 in a full block,
    and the library never recomputes a row's lse from this block alone. In a causal block a row
    sees only a prefix of the keys; if some row's prefix ceiling is more than 16 below the
    block's largest bias (e.g. a left-padded sequence under a finite padding value), ref is per
    row instead, the running maximum of the keys, and the shifted bias is materialized
    [B', H', Sq, Sk] for this block."""
    if bias is None:
        return None, None
    top = bias.amax(dim=-1, keepdim=True)                                   # [B', H', 1, 1]
    top = torch.where(top == _NEG_INF, 0.0, top)
    shifted = bias - top
    if blk.causal:
        prefix = torch.cummax(shifted, dim=-1).values                       # row i's ceiling
        if bool(((prefix < -_CEIL_EXACT) & (prefix != _NEG_INF)).any()):
            ceil = torch.cummax(bias, dim=-1).values.squeeze(2)             # [B', H', Sq]
            ceil = torch.where(ceil == _NEG_INF, 0.0, ceil)
            return bias - ceil.unsqueeze(-1), ceil
    return shifted, top.squeeze(-1)


class _Partials:
    """The running merge of a rank's rows: o and lse in f32, lse relative to a per-row
    reference (None: 0) that _shift_bias's blocks bring, so lse = ref + lse_rel keeps the digits
    a large reference (a finite padding value) would round away."""

    def __init__(self, o: Tensor, lse: Tensor, ref: Optional[Tensor]):
        self.o, self.lse = o.float(), lse
        self.ref = None if ref is None else ref.expand_as(lse).contiguous()

    def merge(self, rows: slice, o: Tensor, lse: Tensor, ref: Optional[Tensor]) -> None:
        """Merges a block's partial for the local query rows `rows` (after those already in)."""
        o_a, l_a = self.o[:, rows], self.lse[:, :, rows]
        if self.ref is not None:
            r_a = self.ref[:, :, rows]
            l_a, lse, r = _rebase(l_a, r_a, lse, ref.expand_as(lse))
            self.ref[:, :, rows] = r
        o_m, l_m = _merge2(o_a, l_a, o.float(), lse)
        self.o[:, rows], self.lse[:, :, rows] = o_m, l_m

    def public_lse(self) -> Tensor:
        return self.lse if self.ref is None else self.ref + self.lse


def _rebase(l_a: Tensor, r_a: Tensor, l_b: Tensor, r_b: Tensor):
    """Two partials' lse (relative to references r_a, r_b) relative to one reference R: the
    larger reference of a non-empty part (0 where both are empty). A part whose reference is R
    keeps its lse bit for bit."""
    big = torch.maximum(torch.where(l_a == _NEG_INF, _NEG_INF, r_a),
                        torch.where(l_b == _NEG_INF, _NEG_INF, r_b))
    big = torch.where(big == _NEG_INF, 0.0, big)
    return l_a + (r_a - big), l_b + (r_b - big), big


# ------------------------------------------------------------------------------ the ring
class _Ring:
    """Point-to-point transfers to the next rank / from the previous one of a process group."""

    def __init__(self, group):
        import torch.distributed as dist
        self.dist, self.group = dist, group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)

        def peer(r):
            return r if group is None else dist.get_global_rank(group, r)

        self.next = peer((self.rank + 1) % self.world)
        self.prev = peer((self.rank - 1) % self.world)

    def start(self, tensors: Sequence[Tensor], tag: int) -> "_Transfer":
        """Sends tensors to the next rank and receives same-shaped ones from the previous rank,
        asynchronously; wait() on the result gives the received tensors."""
        if self.world == 1:
            return _Transfer([], [], list(tensors))  # a ring of one: it comes back at once
        recv = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
        ops = [self.dist.P2POp(self.dist.isend, t, self.next, self.group, tag) for t in tensors]
        ops += [self.dist.P2POp(self.dist.irecv, t, self.prev, self.group, tag) for t in recv]
        return _Transfer(self.dist.batch_isend_irecv(ops), list(tensors), recv)


class _Transfer:
    """Transfers in flight; holds the sent tensors until they are out."""

    def __init__(self, requests, sent: List[Tensor], received: List[Tensor]):
        self.requests, self.sent, self.received = requests, sent, received

    def wait(self) -> List[Tensor]:
        for r in self.requests:
            r.wait()
        self.sent = []
        return self.received


_TAG_KV, _TAG_DKV = 0, 1


@dataclass(frozen=True)
class _Config:
    causal: bool
    scale: Optional[float]
    prec: str


def _kv_tensors(k: Tensor, v: Tensor, bias: Optional[Tensor]) -> List[Tensor]:
    """What travels around the ring, contiguous (a copy only for strided views)."""
    return [t.contiguous() for t in ((k, v) if bias is None else (k, v, bias))]


def _unpack_kv(tensors: List[Tensor]):
    return tensors[0], tensors[1], (tensors[2] if len(tensors) > 2 else None)


def _ring_forward(q, k, v, bias, ring: _Ring, cfg: _Config) -> _Partials:
    """Every K/V block visits every rank once: at step t this rank attends to the block of rank
    (rank - t) mod N while the next block is in flight, and merges the partial into its rows."""
    acc = None
    kv = _kv_tensors(k, v, bias)
    for step in range(ring.world):
        owner = (ring.rank - step) % ring.world
        nxt = ring.start(kv, _TAG_KV) if step + 1 < ring.world else None
        k_b, v_b, bias_b = _unpack_kv(kv)
        blk = _block(ring.rank, owner, cfg.causal, q.shape[1])
        b, ref = _shift_bias(None if bias_b is None else bias_b[..., blk.cols], blk)
        o, lse = block_attention(q[:, blk.rows], k_b[:, blk.cols], v_b[:, blk.cols], bias=b,
                                 causal=blk.causal, scale=cfg.scale, prec=cfg.prec)
        if acc is None:  # step 0: the rank's own block, which covers all of its rows
            acc = _Partials(o, lse, ref)
        else:
            acc.merge(blk.rows, o, lse, ref)
        if nxt is not None:
            kv = nxt.wait()
    return acc


def _ring_backward(dout, q, k, v, bias, o, lse, ref, ring: _Ring, cfg: _Config):
    """The blocks travel again, each with its f32 dK/dV accumulators: at step t this rank adds
    its contribution to the accumulators of rank (rank - t)'s block and passes them on; after N
    steps they are back with their owner. The contribution is computed while the accumulators
    arrive, and added to them (accumulator + contribution, in step order) once they are in."""
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv, incoming = _kv_tensors(k, v, bias), None
    for step in range(ring.world):
        owner = (ring.rank - step) % ring.world
        nxt = ring.start(kv, _TAG_KV) if step + 1 < ring.world else None
        k_b, v_b, bias_b = _unpack_kv(kv)
        dk = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
        dv = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
        blk = _block(ring.rank, owner, cfg.causal, q.shape[1])
        r, c = blk.rows, blk.cols
        b, ref_b = _shift_bias(None if bias_b is None else bias_b[..., c], blk)
        lse_b = lse[:, :, r] if ref is None else lse[:, :, r] + (ref[:, :, r] - ref_b)
        block_backward(dout[:, r], q[:, r], k_b[:, c], v_b[:, c], o[:, r], lse_b.contiguous(),
                       dq[:, r], dk[:, c], dv[:, c], bias=b, causal=blk.causal,
                       scale=cfg.scale, prec=cfg.prec)
        if incoming is not None:
            dk_in, dv_in = incoming.wait()
            dk, dv = dk_in.add_(dk), dv_in.add_(dv)
        incoming = ring.start([dk, dv], _TAG_DKV)
        if nxt is not None:
            kv = nxt.wait()
    dk, dv = incoming.wait()  # this rank's own block, back from the last rank of the ring
    return dq, dk, dv


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, ring, cfg):
        acc = _ring_forward(q, k, v, bias, ring, cfg)
        o = acc.o.to(q.dtype)
        lse = acc.public_lse()
        ctx.save_for_backward(q, k, v, bias, o, acc.lse, acc.ref)
        ctx.ring, ctx.cfg = ring, cfg
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, bias, o, lse, ref = ctx.saved_tensors
        dq, dk, dv = _ring_backward(do.contiguous(), q, k, v, bias, o, lse, ref, ctx.ring,
                                    ctx.cfg)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def _check_ring_args(q, k, v, bias, causal, world):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"fattn.distributed: {name} must be [B, S_local, H, D], got shape "
                             f"{tuple(t.shape)}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"fattn.distributed: k {tuple(k.shape)} and v {tuple(v.shape)} must "
                         "agree in B, S_local and H")
    if causal is not True and causal is not False:
        raise ValueError(f"fattn.distributed: causal must be True or False (the zigzag layout's "
                         f"global causal mask), got {causal!r}")
    if causal:
        if q.shape[1] != k.shape[1]:
            raise ValueError(f"fattn.distributed: causal ring attention is self-attention: q has "
                             f"{q.shape[1]} local tokens, k {k.shape[1]}")
        if q.shape[1] % 2:
            raise ValueError(f"fattn.distributed: causal ring attention needs q, k, v in the "
                             f"zigzag layout (2 equal chunks per rank, zigzag_shard), so the "
                             f"local length must be even; got {q.shape[1]} with world {world}")
    if bias is None:
        return
    B, Hq = q.shape[0], q.shape[2]
    if (bias.dim() != 4 or bias.shape[0] not in (1, B) or bias.shape[1] not in (1, Hq)
            or bias.shape[2] != 1 or bias.shape[3] != k.shape[1]):
        raise ValueError(f"fattn.distributed: bias must be this rank's per-key bias "
                         f"[B or 1, Hq or 1, 1, S_local] = [{B} or 1, {Hq} or 1, 1, {k.shape[1]}] "
                         f"(sharded like k), got shape {tuple(bias.shape)}")
    if bias.requires_grad and torch.is_grad_enabled():
        raise NotImplementedError("fattn.distributed: the gradient with respect to bias is not "
                                  "implemented; pass bias.detach()")


def ring_attention(q: Tensor, k: Tensor, v: Tensor, *, bias: Optional[Tensor] = None,
                   group=None, causal: bool = False, scale: Optional[float] = None,
                   prec: str = "auto", return_lse: bool = False):
    """Exact attention over a sequence sharded across the ranks of a process group.

    q [B, S_local, Hq, D], k [B, S_local_k, Hk, D], v [B, S_local_k, Hk, Dv]: this rank's shard
    (Hq % Hk == 0 for GQA). Every rank passes the same shapes. Non-causal: any sharding, with
    the keys sharded like bias. causal=True: the global causal mask over the zigzag layout
    (zigzag_shard on q, k, v and bias; then S_local must be even). bias: optional per-key
    additive bias for this rank's keys, [B or 1, Hq or 1, 1, S_local_k] (e.g. a padding mask,
    0 / -inf or 0 / finfo.min), sharded like k; one that requires grad raises
    NotImplementedError (pass bias.detach()).
    Returns this rank's shard of o [B, S_local, Hq, Dv] (q's dtype), differentiable in q, k,
    v, and with return_lse also lse [B, Hq, S_local] f32 (no gradient). Equal to
    fattn.attention on the full sequence up to f32 rounding, and bitwise repeatable for a given
    world size. Every rank must call it (it communicates, forward and backward)."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("fattn.distributed: torch.distributed is not initialized (call "
                           "torch.distributed.init_process_group first)")
    ring = _Ring(group)
    _check_ring_args(q, k, v, bias, causal, ring.world)
    if bias is not None:
        bias = bias.detach().float()
    cfg = _Config(bool(causal), None if scale is None else float(scale), prec)
    _attn.normalize(q, causal=causal, scale=scale, prec=prec)  # bad keywords: on every rank
    o, lse = _RingAttention.apply(q, k, v, bias, ring, cfg)
    return (o, lse) if return_lse else o
