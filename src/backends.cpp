// backends.cpp — the backends this library was built with, the one place that names them
// (core/backend.h says why the list is explicit). A build with CUDA compiles src/cuda and defines
// FATTN_WITH_CUDA; without it a CUDA context's table is nullptr and its calls are
// BACKEND_UNAVAILABLE.
#include "core/backend.h"

namespace fattn {

namespace cpu {
const BackendTable *backend();  // src/cpu/backend_cpu.cpp
}
#ifdef FATTN_WITH_CUDA
namespace cuda {
const BackendTable *backend();  // src/cuda/backend_cuda.cpp
}
#endif

const BackendTable *backend_table(fattn_backend b) {
    switch (b) {
    case FATTN_BACKEND_CPU:
        return cpu::backend();
    case FATTN_BACKEND_CUDA:
#ifdef FATTN_WITH_CUDA
        return cuda::backend();
#else
        return nullptr;
#endif
    }
    return nullptr;
}

}  // namespace fattn
