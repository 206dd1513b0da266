// launch.cu — placeholder until the kernels land (returns UNSUPPORTED).
#include "cuda/attn/attn_kernels.h"
namespace fattn::cuda::attn {
fattn_status fwd(const AttnFwdParams &, const DeviceInfo &, const Choice &, void *, std::string *err) {
    if (err) *err = "cuda fused attn: forward kernels not implemented yet";
    return FATTN_ERR_UNSUPPORTED;
}
fattn_status bwd(const AttnBwdParams &, const DeviceInfo &, const Choice &, void *, std::string *err) {
    if (err) *err = "cuda fused attn: backward kernels not implemented yet";
    return FATTN_ERR_UNSUPPORTED;
}
}  // namespace fattn::cuda::attn
