// emu.cpp — the fibers, the barriers and the warp collectives of the CPU emulation (emu.h).
#include "emu/emu.h"

#include <sys/mman.h>

#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"

#if defined(__SANITIZE_ADDRESS__)
#define FATTN_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FATTN_EMU_ASAN 1
#endif
#endif
#ifdef FATTN_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace fattn::emu {
namespace {

bool g_exact_tf32 = false;  // set_exact_tf32
// The bits of an f32 operand a tf32 product keeps: the 19 of tf32, or all of them (exact).
uint32_t tf32_mask() { return g_exact_tf32 ? 0xFFFFFFFFu : 0xFFFFE000u; }

constexpr size_t kStack = 512 * 1024;  // per fiber; mapped lazily, reused across launches

#if defined(__x86_64__)
// Cooperative switch: push the callee-saved registers, swap stack pointers, pop, return. A new
// fiber's stack is laid out so that the first switch "returns" into fattn_emu_start, which calls
// rbx(r12).
extern "C" void fattn_emu_swap(void **save_sp, void *load_sp);
extern "C" void fattn_emu_start();
__asm__(
    ".text\n"
    ".globl fattn_emu_swap\n"
    ".type fattn_emu_swap,@function\n"
    "fattn_emu_swap:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size fattn_emu_swap,.-fattn_emu_swap\n"
    ".globl fattn_emu_start\n"
    ".type fattn_emu_start,@function\n"
    "fattn_emu_start:\n"
    "  movq %r12, %rdi\n"
    "  callq *%rbx\n"
    "  ud2\n"
    ".size fattn_emu_start,.-fattn_emu_start\n");
#endif

enum State { RUN, WAIT, DONE };
enum WaitKind { WAIT_NONE, WAIT_CTA, WAIT_WARP, WAIT_NAMED };  // what a WAIT fiber waits at

struct Copy {
    void *dst;
    const void *src;
    int bytes;  // read from src; the rest of the n-byte destination is zero-filled
    int n;
};

// A stopped context: its stack pointer (fattn_emu_swap) on x86-64, else a ucontext.
#if defined(__x86_64__)
using Context = void *;
#else
using Context = ucontext_t;
#endif

struct Fiber {
    char *stack = nullptr;
    Context ctx{};
    State state = DONE;
    void *asan_fake = nullptr;
    WaitKind wait = WAIT_NONE;
    int named = 0;  // the named barrier it waits at (bar.sync), else 0
    std::vector<Copy> open;
    std::vector<std::vector<Copy>> groups;
};

struct Slot {
    uint64_t in[12];
    uint32_t out[4];
};

struct Block {
    int n = 0, bx = 0, by = 0, bz = 0;
    char *smem = nullptr;
    const std::function<void(char *)> *body = nullptr;
    std::vector<Fiber> *f = nullptr;
    std::vector<Slot> slot;
    int cur = -1;
    int cta_waiting = 0;
    int or_acc = 0, or_result = 0;  // sync_or's reduction
    int warp_waiting[32] = {};
    size_t smem_bytes = 0;
    struct Mbar {
        uint32_t count = 0, pending = 0, phase = 0;
        int64_t tx = 0;
    };
    std::map<const void *, Mbar> mbars;  // by address; cleared per block
    int named_waiting[16] = {};
    uint64_t events = 0;  // barrier arrivals and mbarrier changes: a spinning block's progress
    std::vector<std::array<float, 256>> warp_a;  // wgmma's register A of each warp, [16][16]
    Context sched{};
    const void *sched_stack = nullptr;
    size_t sched_size = 0;
    std::string error;
};

thread_local Block *g_blk = nullptr;

std::vector<Fiber> &fiber_pool(int n) {
    thread_local std::vector<Fiber> pool;
    if (int(pool.size()) < n) {
        size_t old = pool.size();
        pool.resize(size_t(n));
        for (size_t i = old; i < pool.size(); ++i) {
            void *p = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) throw std::runtime_error("emu: cannot map a fiber stack");
            pool[i].stack = static_cast<char *>(p);
        }
    }
    return pool;
}

void flush_copies(Fiber &f, size_t keep) {
    while (f.groups.size() > keep) {
        for (const Copy &c : f.groups.front()) {
            std::memset(c.dst, 0, size_t(c.n));
            std::memcpy(c.dst, c.src, size_t(c.bytes));
        }
        f.groups.erase(f.groups.begin());
    }
}

// Stops the running context, saving it in `from`, and runs `to`; returns once switched back.
// Under ASan the switch is announced: `fake` keeps the stopped side's fake stack (NULL: it is
// never resumed); `stack` and `size` are the stack switched to.
void switch_context(Context &from, Context &to, void **fake, const void *stack, size_t size) {
#ifdef FATTN_EMU_ASAN
    __sanitizer_start_switch_fiber(fake, stack, size);
#else
    (void)fake, (void)stack, (void)size;
#endif
#if defined(__x86_64__)
    fattn_emu_swap(&from, to);
#else
    swapcontext(&from, &to);
#endif
#ifdef FATTN_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake ? *fake : nullptr, nullptr, nullptr);
#endif
}

// Fiber -> scheduler.
void yield_to_scheduler(Block &b, Fiber &f) {
    switch_context(f.ctx, b.sched, f.state == DONE ? nullptr : &f.asan_fake, b.sched_stack, b.sched_size);
}

bool release_cta(Block &b);

void fiber_main(void *) {
    Block &b = *g_blk;
#ifdef FATTN_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b.sched_stack, &b.sched_size);
#endif
    Fiber &f = (*b.f)[size_t(b.cur)];
    try {
        (*b.body)(b.smem);
    } catch (const std::exception &e) {
        if (b.error.empty()) b.error = e.what();
    }
    f.open.clear();
    flush_copies(f, 0);
    f.state = DONE;
    ++b.events;
    release_cta(b);
    yield_to_scheduler(b, f);
    __builtin_trap();  // never resumed
}

#if !defined(__x86_64__)
void fiber_entry_uc() { fiber_main(nullptr); }
#endif

// Scheduler -> fiber i.
void resume(Block &b, int i) {
    Fiber &f = (*b.f)[size_t(i)];
    b.cur = i;
    void *fake = nullptr;
    switch_context(b.sched, f.ctx, &fake, f.stack, kStack);
    b.cur = -1;
}

void start_fiber(Fiber &f) {
    f.state = RUN;
    f.wait = WAIT_NONE;
    f.named = 0;
    f.open.clear();
    f.groups.clear();
    f.asan_fake = nullptr;
#if defined(__x86_64__)
    uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + kStack) & ~uintptr_t(15);
    void **sp = reinterpret_cast<void **>(top - 72);
    sp[0] = nullptr;  // r15
    sp[1] = nullptr;  // r14
    sp[2] = nullptr;  // r13
    sp[3] = nullptr;  // r12: the argument
    sp[4] = reinterpret_cast<void *>(&fiber_main);  // rbx: the entry
    sp[5] = nullptr;  // rbp
    sp[6] = reinterpret_cast<void *>(&fattn_emu_start);
    f.ctx = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kStack;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_entry_uc, 0);
#endif
}

Block &blk() {
    if (!g_blk || g_blk->cur < 0) throw std::logic_error("emu: a device primitive called outside a kernel body");
    return *g_blk;
}

// The calling lane has deposited its inputs; the last lane of the warp runs compute(warp base).
template <class F>
void collective(F &&compute) {
    Block &b = blk();
    const int me = b.cur, w = me / 32;
    Fiber &f = (*b.f)[size_t(me)];
    ++b.events;
    if (++b.warp_waiting[w] == 32) {
        b.warp_waiting[w] = 0;
        compute(w * 32);
        for (int l = w * 32; l < w * 32 + 32; ++l)
            if (l != me) (*b.f)[size_t(l)].state = RUN, (*b.f)[size_t(l)].wait = WAIT_NONE;
    } else {
        f.state = WAIT;
        f.wait = WAIT_WARP;
        yield_to_scheduler(b, f);
    }
}

// __syncthreads completes when every thread that has not exited has arrived (exited warps
// count as arrived, as on the GPU): then the waiting ones run on. True when it completed.
bool release_cta(Block &b) {
    int live = 0;
    for (int t = 0; t < b.n; ++t) live += (*b.f)[size_t(t)].state != DONE;
    if (b.cta_waiting == 0 || b.cta_waiting < live) return false;
    b.cta_waiting = 0;
    b.or_result = b.or_acc;
    b.or_acc = 0;
    for (int t = 0; t < b.n; ++t) {
        Fiber &o = (*b.f)[size_t(t)];
        if (o.state == WAIT && o.wait == WAIT_CTA) o.state = RUN, o.wait = WAIT_NONE;
    }
    return true;
}

float half_bits(uint32_t word, int hi, MmaKind k) {
    const uint16_t h = uint16_t(hi ? word >> 16 : word & 0xFFFFu);
    return k == MMA_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

}  // namespace

void launch(Grid grid, int threads, size_t smem_bytes, const std::function<void(char *)> &body, Options opt) {
    if (threads <= 0 || threads % 32 != 0 || threads > 1024)
        throw std::invalid_argument("emu: threads must be a multiple of 32 in [32, 1024]");
    std::vector<Fiber> &pool = fiber_pool(threads);
    std::vector<char> smem(smem_bytes + 1024);
    Block b;
    b.n = threads;
    b.body = &body;
    b.f = &pool;
    b.slot.assign(size_t(threads), Slot{});
    char *sm = smem.data() + ((1024 - reinterpret_cast<uintptr_t>(smem.data()) % 1024) % 1024);
    b.smem = sm;
    b.smem_bytes = smem_bytes;
    b.warp_a.assign(size_t(threads / 32), {});
    Block *prev = g_blk;
    g_blk = &b;
    try {
        for (int z = 0; z < grid.z; ++z)
            for (int y = 0; y < grid.y; ++y)
                for (int x = 0; x < grid.x; ++x) {
                    b.bx = x, b.by = y, b.bz = z;
                    std::memset(sm, 0xFF, smem_bytes);
                    b.cta_waiting = 0;
                    b.or_acc = b.or_result = 0;
                    std::memset(b.warp_waiting, 0, sizeof b.warp_waiting);
                    for (int t = 0; t < threads; ++t) start_fiber(pool[size_t(t)]);
                    b.mbars.clear();
                    std::memset(b.named_waiting, 0, sizeof b.named_waiting);
                    for (;;) {
                        bool ran = false, done = true;
                        const uint64_t events0 = b.events;
                        for (int k = 0; k < threads; ++k) {
                            const int t = opt.reverse ? threads - 1 - k : k;
                            if (pool[size_t(t)].state == RUN) {
                                ran = true;
                                resume(b, t);
                            }
                            done = done && pool[size_t(t)].state == DONE;
                        }
                        if (!b.error.empty()) throw std::runtime_error("emu: kernel threw: " + b.error);
                        if (done) {
                            for (int id = 1; id < 16; ++id)
                                if (b.named_waiting[id] != 0)
                                    throw std::runtime_error("emu: named barrier " + std::to_string(id) + " has " +
                                                             std::to_string(b.named_waiting[id]) +
                                                             " arrivals left at the end of its block");
                            break;
                        }
                        if (!ran || b.events == events0)
                            throw std::runtime_error("emu: deadlock in block (" + std::to_string(x) + ", " +
                                                     std::to_string(y) + ", " + std::to_string(z) +
                                                     "): a barrier, warp collective or mbarrier phase that never completes");
                    }
                }
    } catch (...) {
        g_blk = prev;
        throw;  // fibers left mid-kernel are simply restarted by the next launch
    }
    g_blk = prev;
}

int tid() { return blk().cur; }

int bid(int axis) {
    Block &b = blk();
    return axis == 0 ? b.bx : axis == 1 ? b.by : b.bz;
}

void sync() { sync_or(0); }

int sync_or(int v) {
    Block &b = blk();
    Fiber &f = (*b.f)[size_t(b.cur)];
    b.or_acc |= v != 0;
    ++b.events;
    ++b.cta_waiting;
    if (!release_cta(b)) {
        f.state = WAIT;
        f.wait = WAIT_CTA;
        yield_to_scheduler(b, f);
    }
    // Read before this fiber runs on: the next barrier cannot complete without it.
    return b.or_result;
}

int block_threads() { return blk().n; }

char *smem() { return blk().smem; }

uint32_t ballot(bool pred) {
    Block &b = blk();
    const int me = b.cur;
    b.slot[size_t(me)].in[0] = pred ? 1u : 0u;
    collective([&](int w0) {
        uint32_t m = 0;
        for (int l = 0; l < 32; ++l) m |= uint32_t(b.slot[size_t(w0 + l)].in[0] & 1u) << l;
        for (int l = 0; l < 32; ++l) b.slot[size_t(w0 + l)].out[0] = m;
    });
    return b.slot[size_t(me)].out[0];
}

uint32_t shfl(uint32_t v, int src) {
    Block &b = blk();
    const int me = b.cur;
    b.slot[size_t(me)].in[0] = v;
    b.slot[size_t(me)].in[1] = uint64_t(src & 31);
    collective([&](int w0) {
        for (int l = 0; l < 32; ++l) {
            Slot &s = b.slot[size_t(w0 + l)];
            s.out[0] = uint32_t(b.slot[size_t(w0 + int(s.in[1]))].in[0]);
        }
    });
    return b.slot[size_t(me)].out[0];
}

void ldsm4(uint32_t (&r)[4], const void *row, bool trans) {
    check_align(row, 16, "ldmatrix row");
    Block &b = blk();
    const int me = b.cur;
    b.slot[size_t(me)].in[0] = reinterpret_cast<uint64_t>(row);
    collective([&](int w0) {
        for (int l = 0; l < 32; ++l) {
            const int g = l / 4, t = l % 4;
            for (int i = 0; i < 4; ++i) {
                auto rowp = [&](int rr) { return reinterpret_cast<const char *>(b.slot[size_t(w0 + 8 * i + rr)].in[0]); };
                uint32_t word;
                if (!trans) {
                    std::memcpy(&word, rowp(g) + 4 * t, 4);
                } else {
                    uint16_t lo, hi;
                    std::memcpy(&lo, rowp(2 * t) + 2 * g, 2);
                    std::memcpy(&hi, rowp(2 * t + 1) + 2 * g, 2);
                    word = uint32_t(lo) | uint32_t(hi) << 16;
                }
                b.slot[size_t(w0 + l)].out[i] = word;
            }
        }
    });
    for (int i = 0; i < 4; ++i) r[i] = b.slot[size_t(me)].out[i];
}

void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, MmaKind kind) {
    Block &b = blk();
    const int me = b.cur;
    Slot &s = b.slot[size_t(me)];
    for (int i = 0; i < 4; ++i) s.in[i] = a[i];
    s.in[4] = b0, s.in[5] = b1;
    for (int i = 0; i < 4; ++i) {
        uint32_t u;
        std::memcpy(&u, &c[i], 4);
        s.in[6 + i] = u;
    }
    collective([&](int w0) {
        const int KD = kind == MMA_TF32 ? 8 : 16;
        float A[16][16], B[16][8], C[16][8];
        auto lane = [&](int l) -> Slot & { return b.slot[size_t(w0 + l)]; };
        for (int m = 0; m < 16; ++m)
            for (int k = 0; k < KD; ++k) {
                if (kind == MMA_TF32) {
                    uint32_t u = uint32_t(lane((m % 8) * 4 + k % 4).in[(m / 8) + 2 * (k / 4)]) & tf32_mask();
                    std::memcpy(&A[m][k], &u, 4);
                } else {
                    A[m][k] = half_bits(uint32_t(lane((m % 8) * 4 + (k % 8) / 2).in[(m / 8) + 2 * (k / 8)]), k % 2, kind);
                }
            }
        for (int k = 0; k < KD; ++k)
            for (int n = 0; n < 8; ++n) {
                if (kind == MMA_TF32) {
                    uint32_t u = uint32_t(lane(n * 4 + k % 4).in[4 + k / 4]) & tf32_mask();
                    std::memcpy(&B[k][n], &u, 4);
                } else {
                    B[k][n] = half_bits(uint32_t(lane(n * 4 + (k % 8) / 2).in[4 + k / 8]), k % 2, kind);
                }
            }
        for (int m = 0; m < 16; ++m)
            for (int n = 0; n < 8; ++n) {
                uint32_t u = uint32_t(lane((m % 8) * 4 + n / 2).in[6 + (m / 8) * 2 + n % 2]);
                std::memcpy(&C[m][n], &u, 4);
            }
        for (int m = 0; m < 16; ++m)
            for (int n = 0; n < 8; ++n) {
                float d = C[m][n];
                for (int k = 0; k < KD; ++k) d = std::fma(A[m][k], B[k][n], d);
                uint32_t u;
                std::memcpy(&u, &d, 4);
                lane((m % 8) * 4 + n / 2).out[(m / 8) * 2 + n % 2] = u;
            }
    });
    for (int i = 0; i < 4; ++i) std::memcpy(&c[i], &s.out[i], 4);
}

uint32_t smem_addr(const void *p) {
    // Only the address: a kernel may form one past its buffers that it never reads (a ring's
    // unused stage); the accesses through it (wgmma operands, TMA boxes, mbarriers) are checked.
    return uint32_t(reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(blk().smem));
}

namespace {
// Element (row, k) of a K-major operand, or (k, col) of an MN-major one, under a 128-byte-swizzle
// descriptor: the byte address the hardware forms (8-row groups SBO apart, rows 128 bytes apart;
// MN-major: 64-element column panels LBO apart), then the swizzle (16-byte chunk ^= address
// bits 7..9).
float wg_elem(const Block &b, uint64_t desc, int r, int k, bool mn_major, MmaKind kind) {
    if ((desc >> 62) != 1) throw std::logic_error("emu: wgmma descriptor without the 128-byte swizzle");
    const uint32_t start = uint32_t(desc & 0x3FFF) << 4, lbo = uint32_t((desc >> 16) & 0x3FFF) << 4,
                   sbo = uint32_t((desc >> 32) & 0x3FFF) << 4;
    const uint32_t es = kind == MMA_TF32 ? 4 : 2;
    uint32_t addr;
    if (!mn_major) addr = start + uint32_t(r / 8) * sbo + uint32_t(r % 8) * 128 + uint32_t(k) * es;
    else addr = start + uint32_t(r / 64) * lbo + uint32_t(k / 8) * sbo + uint32_t(k % 8) * 128 + uint32_t(r % 64) * es;
    addr ^= ((addr >> 7) & 7u) << 4;
    if (addr + es > b.smem_bytes) throw std::logic_error("emu: wgmma operand outside the block's shared memory");
    if (kind == MMA_TF32) {
        uint32_t u;
        std::memcpy(&u, b.smem + addr, 4);
        u &= tf32_mask();
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, b.smem + addr, 2);
    return kind == MMA_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}
}  // namespace

void wgmma(float *d, int n, MmaKind kind, const uint32_t *a_regs, uint64_t desc_a, uint64_t desc_b, bool b_mn_major,
           bool accumulate) {
    Block &b = blk();
    if (b.n % 128 != 0) throw std::logic_error("emu: wgmma in a block that is not whole warpgroups");
    if (n % 8 != 0 || n < 8 || n > 256) throw std::logic_error("emu: wgmma n must be a multiple of 8 in [8, 256]");
    if (b_mn_major && kind == MMA_TF32) throw std::logic_error("emu: tf32 wgmma takes K-major operands only");
    const int me = b.cur, w = (me % 128) / 32, lane = me % 32, g = lane / 4, q = lane % 4;
    const int KD = kind == MMA_TF32 ? 8 : 16;
    float A[2][16];  // this thread's rows g and g + 8 of the warp's 16
    if (a_regs) {
        Slot &s = b.slot[size_t(me)];
        for (int i = 0; i < 4; ++i) s.in[i] = a_regs[i];
        collective([&](int w0) {
            std::array<float, 256> &wa = b.warp_a[size_t(w0 / 32)];
            auto lane_in = [&](int l, int i) { return uint32_t(b.slot[size_t(w0 + l)].in[i]); };
            for (int m = 0; m < 16; ++m)
                for (int k = 0; k < KD; ++k) {
                    if (kind == MMA_TF32) {
                        const uint32_t u = lane_in((m % 8) * 4 + k % 4, (m / 8) + 2 * (k / 4)) & tf32_mask();
                        std::memcpy(&wa[size_t(m * 16 + k)], &u, 4);
                    } else {
                        wa[size_t(m * 16 + k)] =
                            half_bits(lane_in((m % 8) * 4 + (k % 8) / 2, (m / 8) + 2 * (k / 8)), k % 2, kind);
                    }
                }
        });
        const std::array<float, 256> &wa = b.warp_a[size_t(me / 32)];
        for (int h = 0; h < 2; ++h)
            for (int k = 0; k < KD; ++k) A[h][k] = wa[size_t((g + 8 * h) * 16 + k)];
    } else {
        for (int h = 0; h < 2; ++h)
            for (int k = 0; k < KD; ++k) A[h][k] = wg_elem(b, desc_a, 16 * w + g + 8 * h, k, false, kind);
    }
    for (int j = 0; j < n / 8; ++j)
        for (int c = 0; c < 2; ++c) {
            const int col = 8 * j + 2 * q + c;
            float B[16];
            for (int k = 0; k < KD; ++k) B[k] = b_mn_major ? wg_elem(b, desc_b, col, k, true, kind) : wg_elem(b, desc_b, col, k, false, kind);
            for (int h = 0; h < 2; ++h) {
                float acc = accumulate ? d[4 * j + 2 * h + c] : 0.f;
                for (int k = 0; k < KD; ++k) acc = std::fma(A[h][k], B[k], acc);
                d[4 * j + 2 * h + c] = acc;
            }
        }
}

namespace {
Block::Mbar &mbar_of(Block &b, const void *bar) {
    const auto it = b.mbars.find(bar);
    if (it == b.mbars.end()) throw std::logic_error("emu: an mbarrier used before mbarrier.init");
    return it->second;
}
void mbar_complete(Block &b, Block::Mbar &m) {
    if (m.pending == 0 && m.tx == 0) {
        m.phase ^= 1u;
        m.pending = m.count;
    }
    ++b.events;
}
}  // namespace

void mbar_init(void *bar, uint32_t count) {
    Block &b = blk();
    check_align(bar, 8, "mbarrier");
    if (smem_addr(bar) + 8 > b.smem_bytes) throw std::logic_error("emu: an mbarrier outside the block's shared memory");
    if (count == 0) throw std::logic_error("emu: mbarrier.init with a count of 0");
    b.mbars[bar] = Block::Mbar{count, count, 0, 0};
    ++b.events;
}

void mbar_arrive(void *bar, uint32_t expect_tx_bytes) {
    Block &b = blk();
    Block::Mbar &m = mbar_of(b, bar);
    if (m.pending == 0) throw std::logic_error("emu: mbarrier arrival beyond its count");
    m.tx += expect_tx_bytes;
    --m.pending;
    mbar_complete(b, m);
}

bool mbar_try_wait(void *bar, uint32_t parity) {
    Block &b = blk();
    if (mbar_of(b, bar).phase != (parity & 1u)) return true;
    Fiber &f = (*b.f)[size_t(b.cur)];
    yield_to_scheduler(b, f);  // still RUN: resumed in the scheduler's next round
    return false;
}

void tma_load(void *dst, const TensorMap &map, void *bar, int c0, int c1, int c2, int c3) {
    Block &b = blk();
    check_align(dst, 128, "TMA destination");
    const uint32_t d0 = smem_addr(dst);
    const int64_t es = map.es, row_bytes = map.box[0] * es;
    if (row_bytes != 128) throw std::logic_error("emu: TMA boxes of one 128-byte row per swizzle row only");
    const int64_t c[4] = {c0, c1, c2, c3};
    for (int64_t r = 0; r < map.box[1]; ++r)
        for (int64_t e = 0; e < map.box[0]; ++e) {
            const int64_t x[4] = {c[0] + e, c[1] + r, c[2], c[3]};
            bool in = true;
            for (int i = 0; i < 4; ++i) in = in && x[i] >= 0 && x[i] < map.dims[i];
            uint32_t a = d0 + uint32_t(r * 128 + e * es);
            a ^= ((a >> 7) & 7u) << 4;
            if (a + es > b.smem_bytes) throw std::logic_error("emu: TMA box past the block's shared memory");
            if (in) {
                const char *src = static_cast<const char *>(map.base) + x[0] * es + x[1] * map.strides[0] +
                                  x[2] * map.strides[1] + x[3] * map.strides[2];
                std::memcpy(b.smem + a, src, size_t(es));
            } else {
                std::memset(b.smem + a, 0, size_t(es));
            }
        }
    Block::Mbar &m = mbar_of(b, bar);
    m.tx -= map.box[0] * map.box[1] * es;
    mbar_complete(b, m);
}

namespace {
// bar.sync / bar.arrive: count the calling thread toward named barrier id; when the count reaches
// `threads` the barrier completes (its waiters run again) and true is returned.
bool named_count(Block &b, int id, int threads, const char *what) {
    if (id < 1 || id > 15 || threads <= 0 || threads % 32 != 0 || threads > b.n)
        throw std::logic_error(std::string("emu: ") + what + " needs an id in 1..15 and a thread count in whole warps");
    ++b.events;
    if (++b.named_waiting[id] != threads) return false;
    b.named_waiting[id] = 0;
    for (int t = 0; t < b.n; ++t) {
        Fiber &o = (*b.f)[size_t(t)];
        if (o.state == WAIT && o.wait == WAIT_NAMED && o.named == id) o.state = RUN, o.wait = WAIT_NONE, o.named = 0;
    }
    return true;
}
}  // namespace

void named_sync(int id, int threads) {
    Block &b = blk();
    if (named_count(b, id, threads, "bar.sync")) return;
    Fiber &f = (*b.f)[size_t(b.cur)];
    f.state = WAIT;
    f.wait = WAIT_NAMED;
    f.named = id;
    yield_to_scheduler(b, f);
}

void named_arrive(int id, int threads) { named_count(blk(), id, threads, "bar.arrive"); }

void syncwarp() {
    collective([](int) {});
}

void bulk_s2g(void *g, const void *s, uint32_t bytes, bool add_f32) {
    Block &b = blk();
    check_align(g, 16, "cp.async.bulk (global)");
    check_align(s, 16, "cp.async.bulk (shared)");
    if (bytes % 16 != 0) throw std::logic_error("emu: cp.async.bulk size must be a multiple of 16");
    const char *sc = static_cast<const char *>(s);
    if (sc < b.smem || sc + bytes > b.smem + b.smem_bytes) throw std::logic_error("emu: cp.async.bulk source outside shared memory");
    if (!add_f32) {
        std::memcpy(g, s, bytes);
        return;
    }
    float *gf = static_cast<float *>(g);
    const float *sf = static_cast<const float *>(s);
    for (uint32_t i = 0; i < bytes / 4; ++i) gf[i] += sf[i];
}

void counter_wait_eq(const int *c, int v) {
    blk();
    if (*c != v)
        throw std::runtime_error("emu: a CTA waits for a counter to read " + std::to_string(v) + " but it reads " +
                                 std::to_string(*c) + " (a block that runs after it would have to change it: deadlock)");
}

void check_align(const void *p, size_t n, const char *what) {
    if (reinterpret_cast<uintptr_t>(p) % n)
        throw std::logic_error(std::string("emu: ") + what + ": a " + std::to_string(n) + "-byte access must be " +
                               std::to_string(n) + "-byte aligned");
}

namespace {
void cp_async(void *smem, const void *gmem, int src_bytes, int n) {
    Block &b = blk();
    Fiber &f = (*b.f)[size_t(b.cur)];
    if (src_bytes < 0 || src_bytes > n) throw std::logic_error("emu: cp.async src_bytes out of [0, size]");
    if (reinterpret_cast<uintptr_t>(smem) % uintptr_t(n) ||
        (src_bytes > 0 && reinterpret_cast<uintptr_t>(gmem) % uintptr_t(n)))
        throw std::logic_error("emu: cp.async addresses must be aligned to the copy size (" + std::to_string(n) + ")");
    std::memset(smem, 0xFF, size_t(n));
    f.open.push_back({smem, gmem, src_bytes, n});
}
}  // namespace

void cp16(void *smem, const void *gmem, int src_bytes) { cp_async(smem, gmem, src_bytes, 16); }
void cp4(void *smem, const void *gmem, int src_bytes) { cp_async(smem, gmem, src_bytes, 4); }

void cp_commit() {
    Block &b = blk();
    Fiber &f = (*b.f)[size_t(b.cur)];
    f.groups.push_back(std::move(f.open));
    f.open.clear();
}

void cp_wait(int n) {
    Block &b = blk();
    flush_copies((*b.f)[size_t(b.cur)], size_t(n < 0 ? 0 : n));
}

uint16_t f32_to_f16_bits(float x) { return f32_to_f16(x); }
uint16_t f32_to_bf16_bits(float x) { return f32_to_bf16(x); }
float f16_bits_to_f32(uint16_t h) { return f16_to_f32(h); }
float bf16_bits_to_f32(uint16_t h) { return bf16_to_f32(h); }

void set_exact_tf32(bool on) { g_exact_tf32 = on; }
bool exact_tf32() { return g_exact_tf32; }

uint32_t f32_to_tf32_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if (g_exact_tf32 || (u & 0x7F800000u) == 0x7F800000u) return u;  // exact (set_exact_tf32), inf / nan unchanged
    return (u + 0x1000u) & 0xFFFFE000u;               // nearest, ties away from zero (cvt.rna)
}

}  // namespace fattn::emu
