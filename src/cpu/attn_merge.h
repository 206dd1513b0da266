// attn_merge.h — the CPU kernel of fattn_attn_merge (attn_merge.cpp): the exact log-sum-exp merge
// of partial (o, lse) pairs, folded left to right in part order, in f32. Each row (b, s, h) is
// computed by one task from its own inputs in a fixed order: the bits never depend on the
// thread count.
#pragma once

#include "core/merge_params.h"

namespace fattn::cpu {

void attn_merge(const MergeParams &p);

}  // namespace fattn::cpu
