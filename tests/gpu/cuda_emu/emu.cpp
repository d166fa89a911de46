/* emu.cpp: the CUDA emulator behind tests/gpu/cuda_emu/cuda_runtime.h and
 * cublas_v2.h (see there for what it models and what it cannot show).
 *
 * Execution. A launch queues the grid on its stream; nothing runs until a
 * synchronisation point drains the queue (cudaStreamSynchronize, a
 * cudaEventSynchronize up to the event, cudaDeviceSynchronize, a blocking
 * cudaMemcpy or cudaMemset, cudaFree, cudaStreamDestroy). A grid runs block
 * by block in blockIdx order (x fastest; SENTIMENT_CUDA_EMU_ORDER=reverse:
 * last to first, threads too, so an order dependence shows in one of the
 * two). The threads of a block are fibers (a stack each; on x86-64 a
 * register switch of our own, elsewhere ucontext) that run in thread
 * order, each until it exits or reaches a
 * barrier (__syncthreads), a __syncwarp or a shuffle:
 *   - a barrier releases when every thread of the block waits at it, at
 *     one call site; a thread that exits while others wait (or have
 *     waited) at a barrier, or threads waiting at different barrier call
 *     sites, are faults;
 *   - a shuffle or __syncwarp releases when every lane its mask names has
 *     reached it (one call site, one mask); a mask that leaves out the
 *     calling lane, names a lane that does not exist (past the block's
 *     last thread) or has exited, or a source lane outside the mask, are
 *     faults;
 *   - no thread able to run while some wait is a deadlock (a fault).
 * Memory. cudaMalloc and cudaHostAlloc return exactly the bytes asked for
 * (256-byte aligned), filled with 0xFF bytes (NaN as float and double).
 * Outside AddressSanitizer each allocation has 256-byte guard zones on
 * both sides holding a signalling NaN, checked after every kernel and at
 * cudaFree: a change (even a NaN computed from an overread) is a fault
 * naming the kernel; an overread returns NaN. Every
 * copy, memset and GEMM operand range, and every pointer argument of a
 * kernel (when it runs), must lie in one live allocation of the right kind
 * (device, or pinned host for the asynchronous copies that read or write
 * host memory later).
 * Copies between device memory and pageable host memory are synchronous,
 * as CUDA's are; with pinned host memory they run when the stream does.
 * A fault prints "cuda-emu: FAULT ..." on stderr, counts, and sets a
 * sticky error (cudaErrorLaunchFailure or cudaErrorIllegalAddress) that
 * every later call returns and whose cudaGetErrorString is the fault's
 * message; queued work after it is dropped.
 * One host thread at a time (a global lock); the emulated device is
 * "CUDA emulator (CPU)", compute capability 9.0, SENTIMENT_CUDA_EMU_DEVICES
 * devices (default 1; 0: cudaErrorNoDevice) of SENTIMENT_CUDA_EMU_MIB MiB
 * (default 8192) each, all sharing one memory.
 */
#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

/* No global of the emulator is ever destroyed: a program may free device
 * memory from its own exit handlers (sentiment.so's registry does), after
 * the C++ destructors of this library would have run. */
std::recursive_mutex &g_mu = *new std::recursive_mutex;
#define LOCK std::lock_guard<std::recursive_mutex> lock_(g_mu)

/* ---- faults and errors ---------------------------------------------------------- */

int g_faults;
std::string &g_first_fault = *new std::string;
cudaError_t g_sticky = cudaSuccess;
std::string &g_sticky_msg = *new std::string;
cudaError_t g_last = cudaSuccess;

void vfault(cudaError_t code, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "cuda-emu: FAULT: %s\n", msg);
    fflush(stderr);
    if (!g_faults++) g_first_fault = msg;
    if (code != cudaSuccess && g_sticky == cudaSuccess) {
        g_sticky = code;
        g_sticky_msg = msg;
    }
}

/* A fault; code cudaSuccess: counted and printed, but no sticky error (an
 * invalid argument the call itself refuses). */
void fault(cudaError_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fault(cudaError_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfault(code, fmt, ap);
    va_end(ap);
}

cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess && g_last == cudaSuccess) g_last = e;
    return e;
}

/* ---- memory ---------------------------------------------------------------------- */

enum { K_DEVICE = 1, K_PINNED = 2 };
#ifdef EMU_ASAN
const size_t GUARD = 0;
#else
const size_t GUARD = 256;
#endif
const unsigned char FILL = 0xFF; /* fresh memory: 0xFFFFFFFF, a quiet NaN */
/* Guard zones: the float 0xFFA5A5A5 (a signalling NaN) at every 4-byte
 * boundary (zones start 256-byte aligned). An overread gives NaN, and
 * arithmetic on it gives a quiet NaN, never this pattern, so even a NaN
 * written past the end is seen. */
const unsigned char GUARD_BYTES[4] = {0xA5, 0xA5, 0xA5, 0xFF};

void guard_fill(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = GUARD_BYTES[((uintptr_t)(p + i)) & 3];
}

struct Alloc {
    size_t size;
    int kind;
    char *raw;
};
std::map<uintptr_t, Alloc> &g_allocs = *new std::map<uintptr_t, Alloc>;
size_t g_device_used;

const char *kind_name(int k)
{
    return k == K_DEVICE ? "device" : "pinned host";
}

size_t env_size(const char *name, size_t dflt)
{
    const char *s = getenv(name);
    return s && *s ? (size_t)strtoull(s, NULL, 10) : dflt;
}

size_t total_memory(void)
{
    return env_size("SENTIMENT_CUDA_EMU_MIB", 8192) << 20;
}

/* The allocation holding [p, p + n) (n 0: p itself, or one past its end). */
const Alloc *find_alloc(const void *p, size_t n, uintptr_t *base_out)
{
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return NULL;
    --it;
    uintptr_t base = it->first;
    const Alloc &al = it->second;
    if (a < base || a > base + al.size) return NULL;
    if (n > al.size - (a - base)) return NULL; /* n 0 at one past the end: fine */
    if (base_out) *base_out = base;
    return &al;
}

/* Where p lies, for a message. */
std::string where(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    char buf[256];
    auto it = g_allocs.upper_bound(a);
    if (it != g_allocs.begin()) {
        --it;
        uintptr_t base = it->first;
        if (a >= base && a <= base + it->second.size + 65536) {
            snprintf(buf, sizeof buf,
                     "%zu bytes from %p run from byte %lld of a %zu-byte %s allocation at %#lx "
                     "(%lld bytes past its end)",
                     n, p, (long long)(a - base), it->second.size, kind_name(it->second.kind),
                     (unsigned long)base,
                     (long long)(a + n) - (long long)(base + it->second.size));
            return buf;
        }
    }
    snprintf(buf, sizeof buf, "%zu bytes at %p are in no live device or pinned allocation", n, p);
    return buf;
}

/* 0 when [p, p + n) lies in one live allocation of kind k. */
bool range_ok(const void *p, size_t n, int k)
{
    const Alloc *al = find_alloc(p, n, NULL);
    return al && al->kind == k;
}

/* The first guard byte of al (at base) that changed, or -1. Offsets are
 * from the start of the allocation: negative before, >= size after. */
long long guard_damage(uintptr_t base, const Alloc &al)
{
    const unsigned char *lo = (const unsigned char *)al.raw;
    for (size_t i = 0; i < GUARD; i++)
        if (lo[i] != GUARD_BYTES[((uintptr_t)(lo + i)) & 3]) return (long long)i - (long long)GUARD;
    const unsigned char *hi = (const unsigned char *)base + al.size;
    for (size_t i = 0; i < GUARD; i++)
        if (hi[i] != GUARD_BYTES[((uintptr_t)(hi + i)) & 3]) return (long long)(al.size + i);
    return -1;
}

void check_guards(const char *after)
{
    if (!GUARD) return;
    for (auto &kv : g_allocs) {
        long long at = guard_damage(kv.first, kv.second);
        if (at != -1) {
            fault(cudaErrorIllegalAddress,
                  "%s wrote outside a %zu-byte %s allocation at %#lx (byte %lld of it changed)",
                  after, kv.second.size, kind_name(kv.second.kind), (unsigned long)kv.first, at);
            /* repair, so one overwrite is reported once */
            guard_fill((unsigned char *)kv.second.raw, GUARD);
            guard_fill((unsigned char *)kv.first + kv.second.size, GUARD);
        }
    }
}

void *alloc_raw(size_t bytes, int kind)
{
    size_t n = bytes ? bytes : 1;
    void *raw = NULL;
    if (posix_memalign(&raw, 256, n + 2 * GUARD)) return NULL;
    char *base = (char *)raw + GUARD;
    memset(base, FILL, n);
    guard_fill((unsigned char *)raw, GUARD);
    guard_fill((unsigned char *)base + n, GUARD);
    g_allocs[(uintptr_t)base] = Alloc{n, kind, (char *)raw};
    if (kind == K_DEVICE) g_device_used += n;
    return base;
}

/* ---- streams and events ---------------------------------------------------------- */

} // namespace

struct sm_emu_stream {
    std::deque<std::function<void()>> q;
    long long queued = 0, done = 0;
    bool live = true;
};

struct sm_emu_event {
    sm_emu_stream *s = NULL;
    long long seq = 0;
    long long tick = 0;
    bool timing = true, live = true;
};

struct sm_emu_blas {
    cudaStream_t s = NULL;
    bool live = true;
};

namespace {

sm_emu_stream &g_null_stream = *new sm_emu_stream;
/* Streams, events and cuBLAS handles are never freed (an event may name a
 * destroyed stream; a stale handle must be recognised as stale); leak
 * checkers reach them through these lists. */
std::vector<sm_emu_stream *> &g_streams = *new std::vector<sm_emu_stream *>;
std::vector<sm_emu_event *> &g_events = *new std::vector<sm_emu_event *>;
long long g_tick;

bool stream_ok(cudaStream_t s)
{
    if (!s) return true;
    for (auto *x : g_streams)
        if (x == s) return x->live;
    return false;
}

sm_emu_stream *S(cudaStream_t s)
{
    return s ? s : &g_null_stream;
}

bool event_ok(cudaEvent_t e)
{
    for (auto *x : g_events)
        if (x == e) return x->live;
    return false;
}

void enqueue(cudaStream_t s, std::function<void()> fn)
{
    sm_emu_stream *st = S(s);
    st->q.push_back(std::move(fn));
    st->queued++;
}

/* Runs st's queue until `seq` ops have run (after a fault: drops them). */
void run_until(sm_emu_stream *st, long long seq)
{
    while (st->done < seq && !st->q.empty()) {
        std::function<void()> fn = std::move(st->q.front());
        st->q.pop_front();
        st->done++;
        g_tick++;
        if (g_sticky == cudaSuccess) fn();
    }
}

void run_stream(sm_emu_stream *st)
{
    run_until(st, st->queued);
}

void run_all(void)
{
    run_stream(&g_null_stream);
    for (auto *s : g_streams) run_stream(s);
}

/* ---- fibers ------------------------------------------------------------------------ */

enum { F_READY, F_BARRIER, F_SHFL, F_DONE };

#ifdef EMU_ASAN
const size_t STACK = 512 << 10;
#else
const size_t STACK = 64 << 10;
#endif

struct Fiber {
    char *stack = NULL; /* STACK bytes above a guard page */
#if defined(__x86_64__)
    void *sp = NULL;
#else
    ucontext_t uc;
#endif
    void *asan_fake = NULL;
    /* abandoned inside a kernel (a fault): its stack's shadow still marks
     * the frames that never returned */
    bool dirty = false;
    int state = F_READY;
    uint3 tid;
    /* where it waits */
    const char *file = NULL;
    int line = 0;
    int kind = 0; /* shuffles: 0 xor, 1 down, 2 up, 3 idx; -1 __syncwarp */
    unsigned mask = 0;
    int arg = 0, width = 32;
    uint64_t val = 0, res = 0;
};

std::vector<Fiber> &g_fib = *new std::vector<Fiber>;
int g_n;                 /* threads in the running block */
int g_cur = -1;          /* the running fiber, -1: the scheduler */
bool g_block_fault;
const char *g_kernel;
const std::function<void()> *g_body;
#if defined(__x86_64__)
void *g_sched_sp;
#else
ucontext_t g_sched_uc;
#endif
[[maybe_unused]] const void *g_sched_bottom;
[[maybe_unused]] size_t g_sched_size;

} // namespace

#if defined(__x86_64__)
/* sm_emu_switch(&save_sp, to_sp): saves the callee-saved registers, MXCSR
 * and the x87 control word on this stack, stores the stack pointer in
 * *save_sp, and resumes the stack `to_sp` the same way. */
extern "C" void sm_emu_switch(void **save_sp, void *to_sp);
__asm__(".text\n"
        ".globl sm_emu_switch\n"
        ".hidden sm_emu_switch\n"
        ".type sm_emu_switch,@function\n"
        "sm_emu_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size sm_emu_switch, .-sm_emu_switch\n");
#endif

namespace {

const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

void fiber_exit(void) __attribute__((noreturn));

extern "C" void sm_emu_fiber_entry(void)
{
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &g_sched_bottom, &g_sched_size);
#endif
    (*g_body)();
    fiber_exit();
}

/* Scheduler -> fiber i, back when it blocks or exits. */
void switch_to(int i)
{
    Fiber &f = g_fib[i];
    g_cur = i;
    threadIdx = f.tid;
#ifdef EMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, f.stack, STACK);
#endif
#if defined(__x86_64__)
    sm_emu_switch(&g_sched_sp, f.sp);
#else
    swapcontext(&g_sched_uc, &f.uc);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    g_cur = -1;
}

/* The running fiber -> the scheduler (returns when resumed). */
void yield(void)
{
    Fiber &f = g_fib[g_cur];
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(&f.asan_fake, g_sched_bottom, g_sched_size);
#endif
#if defined(__x86_64__)
    sm_emu_switch(&f.sp, g_sched_sp);
#else
    swapcontext(&f.uc, &g_sched_uc);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake, &g_sched_bottom, &g_sched_size);
#endif
}

/* A fault inside a kernel: stops the block (its fibers are abandoned). */
void kernel_fault(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void kernel_fault(const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fault(cudaErrorLaunchFailure, "kernel %s, block (%u,%u,%u): %s", g_kernel, blockIdx.x,
          blockIdx.y, blockIdx.z, msg);
    g_block_fault = true;
    for (int i = 0; i < g_n; i++) g_fib[i].dirty = true;
    Fiber &f = g_fib[g_cur];
    f.state = F_DONE;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(NULL, g_sched_bottom, g_sched_size);
#endif
#if defined(__x86_64__)
    sm_emu_switch(&f.sp, g_sched_sp);
#else
    swapcontext(&f.uc, &g_sched_uc);
#endif
    abort(); /* never resumed */
}

/* "thread (x,y,z)", for messages only (faults are rare; arrivals are not) */
std::string tname(const Fiber &f)
{
    char buf[64];
    snprintf(buf, sizeof buf, "thread (%u,%u,%u)", f.tid.x, f.tid.y, f.tid.z);
    return buf;
}

/* Per block: how many threads exited or wait at a barrier, and per warp
 * the lanes that exited, wait at a barrier or wait at a warp rendezvous
 * (so each arrival checks in constant time; the lists are read only to
 * word a fault). */
int g_n_done, g_n_barrier;
/* SENTIMENT_CUDA_EMU_ORDER=reverse: blocks and threads run last to first */
bool g_reverse;
const char *g_bar_file;
int g_bar_line, g_bar_first;
std::vector<unsigned> &g_warp_done = *new std::vector<unsigned>, &g_warp_bar = *new std::vector<unsigned>,
                      &g_warp_meet = *new std::vector<unsigned>;

int find_state(int state)
{
    for (int i = 0; i < g_n; i++)
        if (g_fib[i].state == state) return i;
    return 0;
}

/* The lane of warp `warp` in `waiting` whose rendezvous mask names `lane`, or -1. */
int waiter_for(int warp, unsigned waiting, int lane)
{
    for (unsigned m = waiting; m; m &= m - 1) {
        int l = __builtin_ctz(m);
        if (g_fib[warp * 32 + l].mask >> lane & 1u) return l;
    }
    return -1;
}

void fiber_exit(void)
{
    Fiber &f = g_fib[g_cur];
    int lin = g_cur, warp = lin / 32, lane = lin % 32;
    if (g_n_barrier) {
        const Fiber &o = g_fib[g_bar_first];
        kernel_fault("%s exited while %s waits at __syncthreads() (%s:%d): a barrier "
                     "not reached by every thread of the block",
                     tname(f).c_str(), tname(o).c_str(), base_name(o.file), o.line);
    }
    int w = waiter_for(warp, g_warp_meet[warp], lane);
    if (w >= 0) {
        const Fiber &o = g_fib[warp * 32 + w];
        kernel_fault("%s (lane %d) exited while %s waits for it in a %s (%s:%d, mask %#x)",
                     tname(f).c_str(), lane, tname(o).c_str(),
                     o.kind < 0 ? "__syncwarp" : "warp shuffle", base_name(o.file), o.line, o.mask);
    }
    f.state = F_DONE;
    g_n_done++;
    g_warp_done[warp] |= 1u << lane;
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(NULL, g_sched_bottom, g_sched_size);
#endif
#if defined(__x86_64__)
    sm_emu_switch(&f.sp, g_sched_sp);
#else
    swapcontext(&f.uc, &g_sched_uc);
#endif
    abort(); /* never resumed */
}

void fiber_prepare(Fiber &f)
{
    if (!f.stack) {
        size_t page = 4096;
        char *m = (char *)mmap(NULL, STACK + page, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "cuda-emu: cannot map a fiber stack\n");
            abort();
        }
        mprotect(m, page, PROT_NONE); /* an overflow faults */
        f.stack = m + page;
    }
#ifdef EMU_ASAN
    /* A fiber that exited normally left only its entry frames (at the top),
     * which the next run recreates at the same place; one abandoned at a
     * fault needs its whole stack cleared. */
    if (f.dirty)
        __asan_unpoison_memory_region(f.stack, STACK);
    else /* the entry frame we write below */
        __asan_unpoison_memory_region(f.stack + STACK - 4096, 4096);
#endif
    f.dirty = false;
#if defined(__x86_64__)
    uintptr_t top = ((uintptr_t)f.stack + STACK) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)top;
    *--sp = 0;                                 /* the entry's return address: none */
    *--sp = (uint64_t)(uintptr_t)&sm_emu_fiber_entry; /* where the switch returns */
    for (int i = 0; i < 6; i++) *--sp = 0;     /* rbp rbx r12 r13 r14 r15 */
    --sp;
    uint32_t csr = 0x1f80;                     /* round to nearest, exceptions masked */
    uint16_t cw = 0x037f;
    memcpy((char *)sp, &csr, 4);
    memcpy((char *)sp + 4, &cw, 2);
    f.sp = sp;
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack;
    f.uc.uc_stack.ss_size = STACK;
    f.uc.uc_link = NULL;
    makecontext(&f.uc, (void (*)(void))sm_emu_fiber_entry, 0);
#endif
    f.state = F_READY;
    f.asan_fake = NULL;
    f.file = NULL;
    f.line = 0;
}

/* Runs one block; false after a fault. */
bool run_block(void)
{
    unsigned bx = blockDim.x, by = blockDim.y;
    g_n = (int)(blockDim.x * blockDim.y * blockDim.z);
    if ((int)g_fib.size() < g_n) g_fib.resize(g_n);
    for (int i = 0; i < g_n; i++) {
        Fiber &f = g_fib[i];
        fiber_prepare(f);
        f.tid.x = (unsigned)i % bx;
        f.tid.y = (unsigned)i / bx % by;
        f.tid.z = (unsigned)i / (bx * by);
    }
    int warps = (g_n + 31) / 32;
    g_warp_done.assign(warps, 0);
    g_warp_bar.assign(warps, 0);
    g_warp_meet.assign(warps, 0);
    g_n_done = g_n_barrier = 0;
    g_block_fault = false;
    for (;;) {
        int ready = 0;
        for (int k = 0; k < g_n; k++) {
            int i = g_reverse ? g_n - 1 - k : k;
            if (g_fib[i].state == F_READY) {
                ready++;
                switch_to(i);
                if (g_block_fault) return false;
            }
        }
        if (ready) continue;
        if (g_n_done == g_n) return true;
        if (g_n_barrier == g_n) { /* everyone at one barrier (checked on arrival) */
            for (int i = 0; i < g_n; i++) g_fib[i].state = F_READY;
            g_n_barrier = 0;
            g_warp_bar.assign(warps, 0);
            continue;
        }
        /* nothing can run: a deadlock; say who waits where */
        std::string who;
        int listed = 0, waiting = g_n - g_n_done;
        for (int i = 0; i < g_n && listed < 4; i++) {
            const Fiber &f = g_fib[i];
            if (f.state == F_DONE) continue;
            char buf[200];
            snprintf(buf, sizeof buf, "%sthread (%u,%u,%u) at %s (%s:%d)", listed ? "; " : "",
                     f.tid.x, f.tid.y, f.tid.z,
                     f.state == F_BARRIER ? "__syncthreads()"
                                          : (f.kind < 0 ? "__syncwarp" : "a warp shuffle"),
                     base_name(f.file), f.line);
            who += buf;
            listed++;
        }
        fault(cudaErrorLaunchFailure, "kernel %s, block (%u,%u,%u): deadlock: %d threads wait, "
              "none can run (%s%s)", g_kernel, blockIdx.x, blockIdx.y, blockIdx.z,
              waiting, who.c_str(), waiting > listed ? "; ..." : "");
        return false;
    }
}

void run_kernel(const char *name, dim3 grid, dim3 block, const std::function<void()> &body,
                const std::function<void()> &check)
{
    g_kernel = name;
    check();
    if (g_sticky != cudaSuccess) return;
    gridDim = grid;
    blockDim = block;
    g_body = &body;
    const char *order = getenv("SENTIMENT_CUDA_EMU_ORDER");
    g_reverse = order && !strcmp(order, "reverse");
    bool ok = true;
    for (unsigned z = 0; ok && z < grid.z; z++)
        for (unsigned y = 0; ok && y < grid.y; y++)
            for (unsigned x = 0; ok && x < grid.x; x++) {
                blockIdx.x = g_reverse ? grid.x - 1 - x : x;
                blockIdx.y = g_reverse ? grid.y - 1 - y : y;
                blockIdx.z = g_reverse ? grid.z - 1 - z : z;
                ok = run_block();
            }
    g_body = NULL;
    if (ok) {
        char what[160];
        snprintf(what, sizeof what, "kernel %s", name);
        check_guards(what);
    }
}

/* ---- cuBLAS -------------------------------------------------------------------------- */

std::vector<sm_emu_blas *> &g_blas = *new std::vector<sm_emu_blas *>;

bool blas_ok(cublasHandle_t h)
{
    for (auto *x : g_blas)
        if (x == h) return x->live;
    return false;
}

size_t type_size(cudaDataType_t t)
{
    return t == CUDA_R_32F ? 4 : 2;
}

float tf32_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) < 0x7f800000u) {
        u += 0xfffu + ((u >> 13) & 1u);
        u &= ~0x1fffu;
    }
    memcpy(&f, &u, 4);
    return f;
}

float load(const void *base, size_t i, cudaDataType_t t, cublasComputeType_t c)
{
    if (t == CUDA_R_16BF) return sm_emu_bf_bits2f(((const uint16_t *)base)[i]);
    float f = ((const float *)base)[i];
    if (c == CUBLAS_COMPUTE_32F_FAST_16BF) return sm_emu_bf_bits2f(sm_emu_f2bf_bits(f));
    if (c == CUBLAS_COMPUTE_32F_FAST_TF32) return tf32_round(f);
    return f;
}

struct Gemm {
    const char *what;
    cublasOperation_t ta, tb;
    int m, n, k;
    float alpha, beta;
    const void *A, *B;
    void *C;
    cudaDataType_t at;
    int lda, ldb, ldc;
    long long sA, sB, sC;
    int batch;
    cublasComputeType_t compute;
};

/* Elements spanned by `batch` column-major matrices rows x cols (ld). */
size_t span(int rows, int cols, int ld, long long stride, int batch)
{
    if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
    return (size_t)(cols - 1) * (size_t)ld + (size_t)rows + (size_t)(batch - 1) * (size_t)stride;
}

void run_gemm(const Gemm &g)
{
    size_t es = type_size(g.at);
    int a_rows = g.ta == CUBLAS_OP_N ? g.m : g.k, a_cols = g.ta == CUBLAS_OP_N ? g.k : g.m;
    int b_rows = g.tb == CUBLAS_OP_N ? g.k : g.n, b_cols = g.tb == CUBLAS_OP_N ? g.n : g.k;
    struct {
        const void *p;
        size_t bytes;
        const char *name;
    } ops[3] = {
        {g.A, span(a_rows, a_cols, g.lda, g.sA, g.batch) * es, "A"},
        {g.B, span(b_rows, b_cols, g.ldb, g.sB, g.batch) * es, "B"},
        {g.C, span(g.m, g.n, g.ldc, g.sC, g.batch) * 4, "C"},
    };
    for (int i = 0; i < 3; i++) {
        if (i < 2 && g.k == 0) continue;
        if (!range_ok(ops[i].p, ops[i].bytes, K_DEVICE)) {
            fault(cudaErrorIllegalAddress, "%s (m %d n %d k %d, batch %d): operand %s: %s",
                  g.what, g.m, g.n, g.k, g.batch, ops[i].name, where(ops[i].p, ops[i].bytes).c_str());
            return;
        }
    }
    std::vector<float> a((size_t)g.m * g.k), b((size_t)g.n * g.k);
    for (int q = 0; q < g.batch; q++) {
        const char *A = (const char *)g.A + (size_t)q * g.sA * es;
        const char *B = (const char *)g.B + (size_t)q * g.sB * es;
        float *C = (float *)g.C + (size_t)q * g.sC;
        /* a(i, p) = op(A)(i, p), b(j, p) = op(B)(p, j) */
        for (int i = 0; i < g.m; i++)
            for (int p = 0; p < g.k; p++)
                a[(size_t)i * g.k + p] =
                    load(A, g.ta == CUBLAS_OP_N ? (size_t)i + (size_t)p * g.lda : (size_t)p + (size_t)i * g.lda,
                         g.at, g.compute);
        for (int j = 0; j < g.n; j++)
            for (int p = 0; p < g.k; p++)
                b[(size_t)j * g.k + p] =
                    load(B, g.tb == CUBLAS_OP_N ? (size_t)p + (size_t)j * g.ldb : (size_t)j + (size_t)p * g.ldb,
                         g.at, g.compute);
        for (int j = 0; j < g.n; j++)
            for (int i = 0; i < g.m; i++) {
                const float *x = &a[(size_t)i * g.k], *y = &b[(size_t)j * g.k];
                float acc = 0.0f;
                for (int p = 0; p < g.k; p++) acc = fmaf(x[p], y[p], acc);
                float *c = &C[(size_t)i + (size_t)j * g.ldc];
                /* beta 0: C is not read (it may hold NaN) */
                *c = g.beta == 0.0f ? g.alpha * acc : g.alpha * acc + g.beta * *c;
            }
    }
}

cublasStatus_t gemm(cublasHandle_t h, const Gemm &g0, const void *alpha, const void *beta,
                    cudaDataType_t bt, cudaDataType_t ct)
{
    Gemm g = g0;
    char why[200] = "";
    int a_rows = g.ta == CUBLAS_OP_N ? g.m : g.k, b_rows = g.tb == CUBLAS_OP_N ? g.k : g.n;
    if (!blas_ok(h))
        snprintf(why, sizeof why, "not a live cuBLAS handle");
    else if ((g.ta != CUBLAS_OP_N && g.ta != CUBLAS_OP_T) || (g.tb != CUBLAS_OP_N && g.tb != CUBLAS_OP_T))
        snprintf(why, sizeof why, "transa %d / transb %d", (int)g.ta, (int)g.tb);
    else if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0)
        snprintf(why, sizeof why, "m %d n %d k %d batch %d: negative", g.m, g.n, g.k, g.batch);
    else if (g.lda < (a_rows > 1 ? a_rows : 1))
        snprintf(why, sizeof why, "lda %d < max(1, %d)", g.lda, a_rows);
    else if (g.ldb < (b_rows > 1 ? b_rows : 1))
        snprintf(why, sizeof why, "ldb %d < max(1, %d)", g.ldb, b_rows);
    else if (g.ldc < (g.m > 1 ? g.m : 1))
        snprintf(why, sizeof why, "ldc %d < max(1, m %d)", g.ldc, g.m);
    else if (g.at != bt || (g.at != CUDA_R_32F && g.at != CUDA_R_16BF) || ct != CUDA_R_32F)
        snprintf(why, sizeof why, "types A %d B %d C %d not supported", (int)g.at, (int)bt, (int)ct);
    else if ((g.compute == CUBLAS_COMPUTE_32F_FAST_TF32 || g.compute == CUBLAS_COMPUTE_32F_FAST_16BF) &&
             g.at != CUDA_R_32F)
        snprintf(why, sizeof why, "compute type %d needs FP32 operands", (int)g.compute);
    else if (g.compute != CUBLAS_COMPUTE_32F && g.compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
             g.compute != CUBLAS_COMPUTE_32F_FAST_TF32 && g.compute != CUBLAS_COMPUTE_32F_FAST_16BF)
        snprintf(why, sizeof why, "compute type %d not supported", (int)g.compute);
    else if (!alpha || !beta)
        snprintf(why, sizeof why, "alpha or beta is NULL");
    if (why[0]) {
        fault(cudaSuccess, "%s: CUBLAS_STATUS_INVALID_VALUE: %s", g.what, why);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (g_sticky != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
    /* host scalars are read by the call itself */
    memcpy(&g.alpha, alpha, 4);
    memcpy(&g.beta, beta, 4);
    enqueue(h->s, [g]() { run_gemm(g); });
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- copies ------------------------------------------------------------------------ */

const char *copy_kind_name(cudaMemcpyKind k)
{
    switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    default: return "Default";
    }
}

/* -1: in no allocation; else the kind of the allocation holding p */
int kind_of(const void *p)
{
    const Alloc *al = find_alloc(p, 0, NULL);
    return al ? al->kind : -1;
}

cudaError_t copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s,
                 bool async, const char *fn)
{
    if (g_sticky != cudaSuccess) return g_sticky;
    if (!stream_ok(s)) {
        fault(cudaSuccess, "%s: not a live stream", fn);
        return ret(cudaErrorInvalidResourceHandle);
    }
    if (!n) return cudaSuccess;
    if (kind == cudaMemcpyDefault) {
        int dk = kind_of(dst) == K_DEVICE, sk = kind_of(src) == K_DEVICE;
        kind = dk ? (sk ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                  : (sk ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    }
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    struct {
        const void *p;
        bool dev;
        const char *name;
    } side[2] = {{dst, dst_dev, "destination"}, {src, src_dev, "source"}};
    bool pinned = true;
    for (int i = 0; i < 2; i++) {
        if (side[i].dev) {
            if (!range_ok(side[i].p, n, K_DEVICE)) {
                fault(cudaErrorIllegalAddress, "%s(%s): %s: %s", fn, copy_kind_name(kind),
                      side[i].name, where(side[i].p, n).c_str());
                return ret(cudaErrorInvalidValue);
            }
        } else {
            int k = kind_of(side[i].p);
            if (k == K_DEVICE) {
                fault(cudaErrorIllegalAddress, "%s(%s): the %s %p is device memory", fn,
                      copy_kind_name(kind), side[i].name, side[i].p);
                return ret(cudaErrorInvalidValue);
            }
            if (k == K_PINNED && !range_ok(side[i].p, n, K_PINNED)) {
                fault(cudaErrorIllegalAddress, "%s(%s): %s: %s", fn, copy_kind_name(kind),
                      side[i].name, where(side[i].p, n).c_str());
                return ret(cudaErrorInvalidValue);
            }
            if (k != K_PINNED) pinned = false;
        }
    }
    if (async && pinned && kind != cudaMemcpyHostToHost) {
        enqueue(s, [dst, src, n]() { memmove(dst, src, n); });
        return cudaSuccess;
    }
    /* pageable host memory or a blocking copy: wait, then copy */
    if (async)
        run_stream(S(s));
    else
        run_all();
    if (g_sticky != cudaSuccess) return g_sticky;
    memmove(dst, src, n);
    return cudaSuccess;
}

} // namespace

/* ---- the runtime API ------------------------------------------------------------------ */

cudaError_t cudaDriverGetVersion(int *version)
{
    *version = (int)env_size("SENTIMENT_CUDA_EMU_DRIVER", CUDART_VERSION);
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    LOCK;
    int n = (int)env_size("SENTIMENT_CUDA_EMU_DEVICES", 1);
    *count = n;
    return n ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    LOCK;
    if (g_sticky != cudaSuccess) return g_sticky;
    int n = (int)env_size("SENTIMENT_CUDA_EMU_DEVICES", 1);
    return device >= 0 && device < n ? cudaSuccess : ret(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int *device)
{
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device)
{
    LOCK;
    int n = (int)env_size("SENTIMENT_CUDA_EMU_DEVICES", 1);
    if (device < 0 || device >= n) return ret(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "CUDA emulator (CPU)");
    prop->totalGlobalMem = total_memory();
    prop->sharedMemPerBlock = 48 << 10;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 0x7fffffff;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 4;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    LOCK;
    run_all();
    return g_sticky;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    LOCK;
    if (g_sticky != cudaSuccess) return g_sticky;
    size_t tot = total_memory();
    *total_bytes = tot;
    *free_bytes = g_device_used < tot ? tot - g_device_used : 0;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    LOCK;
    if (g_sticky != cudaSuccess) return g_sticky;
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    LOCK;
    return g_sticky != cudaSuccess ? g_sticky : g_last;
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
    static std::string &buf = *new std::string;
    LOCK;
    if (e != cudaSuccess && e == g_sticky && !g_sticky_msg.empty()) {
        buf = "emulated device fault: " + g_sticky_msg;
        return buf.c_str();
    }
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return "unknown error";
    }
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    LOCK;
    *p = NULL;
    if (g_sticky != cudaSuccess) return g_sticky;
    if (bytes > total_memory() - (g_device_used < total_memory() ? g_device_used : total_memory()))
        return ret(cudaErrorMemoryAllocation);
    *p = alloc_raw(bytes, K_DEVICE);
    return *p ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

static cudaError_t free_kind(void *p, int kind, const char *fn)
{
    LOCK;
    run_all(); /* cudaFree waits for the device */
    if (!p) return g_sticky;
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.kind != kind) {
        fault(cudaSuccess, "%s(%p): not the start of a live %s allocation", fn, p,
              kind == K_DEVICE ? "device" : "pinned host");
        return ret(cudaErrorInvalidValue);
    }
    char what[64];
    snprintf(what, sizeof what, "something before %s", fn);
    check_guards(what);
    if (kind == K_DEVICE) g_device_used -= it->second.size;
    free(it->second.raw);
    g_allocs.erase(it);
    return g_sticky;
}

cudaError_t cudaFree(void *p)
{
    return free_kind(p, K_DEVICE, "cudaFree");
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    LOCK;
    *p = NULL;
    if (g_sticky != cudaSuccess) return g_sticky;
    *p = alloc_raw(bytes, K_PINNED);
    return *p ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    return cudaHostAlloc(p, bytes, 0);
}

cudaError_t cudaFreeHost(void *p)
{
    return free_kind(p, K_PINNED, "cudaFreeHost");
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    LOCK;
    if (g_sticky != cudaSuccess) return g_sticky;
    *s = new sm_emu_stream;
    g_streams.push_back(*s);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    LOCK;
    if (!s || !stream_ok(s)) {
        fault(cudaSuccess, "cudaStreamDestroy(%p): not a live stream", (void *)s);
        return ret(cudaErrorInvalidResourceHandle);
    }
    run_stream(s); /* its work still completes */
    s->q.clear();
    s->live = false;
    return g_sticky;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    LOCK;
    if (!stream_ok(s)) {
        fault(cudaSuccess, "cudaStreamSynchronize(%p): not a live stream", (void *)s);
        return ret(cudaErrorInvalidResourceHandle);
    }
    if (!s)
        run_all(); /* the legacy default stream waits for every stream */
    else
        run_stream(s);
    return g_sticky;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    LOCK;
    if (g_sticky != cudaSuccess) return g_sticky;
    if (!stream_ok(s) || !event_ok(e)) return ret(cudaErrorInvalidResourceHandle);
    sm_emu_stream *es = e->s;
    long long seq = e->seq;
    if (es) enqueue(s, [es, seq]() { run_until(es, seq); });
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    LOCK;
    if (g_sticky != cudaSuccess) return g_sticky;
    *e = new sm_emu_event;
    (*e)->timing = !(flags & cudaEventDisableTiming);
    g_events.push_back(*e);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    LOCK;
    if (!event_ok(e)) {
        fault(cudaSuccess, "cudaEventDestroy(%p): not a live event", (void *)e);
        return ret(cudaErrorInvalidResourceHandle);
    }
    e->live = false;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    LOCK;
    if (g_sticky != cudaSuccess) return g_sticky;
    if (!event_ok(e) || !stream_ok(s)) {
        fault(cudaSuccess, "cudaEventRecord: not a live event or stream");
        return ret(cudaErrorInvalidResourceHandle);
    }
    enqueue(s, [e]() { e->tick = g_tick; });
    e->s = S(s);
    e->seq = S(s)->queued;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    LOCK;
    if (!event_ok(e)) {
        fault(cudaSuccess, "cudaEventSynchronize(%p): not a live event", (void *)e);
        return ret(cudaErrorInvalidResourceHandle);
    }
    if (e->s) run_until(e->s, e->seq);
    return g_sticky;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    LOCK;
    if (!event_ok(e)) return ret(cudaErrorInvalidResourceHandle);
    /* the emulated device finishes what is asked about */
    if (e->s) run_until(e->s, e->seq);
    return g_sticky;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    LOCK;
    if (g_sticky != cudaSuccess) return g_sticky;
    if (!event_ok(a) || !event_ok(b) || !a->timing || !b->timing)
        return ret(cudaErrorInvalidResourceHandle);
    if (!a->s || !b->s || a->s->done < a->seq || b->s->done < b->seq) return ret(cudaErrorNotReady);
    /* no clock: a microsecond per queued operation */
    *ms = (float)((double)(b->tick - a->tick) * 1e-3);
    if (*ms <= 0) *ms = 1e-3f;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    LOCK;
    return copy(dst, src, bytes, kind, NULL, false, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s)
{
    LOCK;
    return copy(dst, src, bytes, kind, s, true, "cudaMemcpyAsync");
}

static cudaError_t set(void *p, int value, size_t bytes, cudaStream_t s, bool async,
                       const char *fn)
{
    if (g_sticky != cudaSuccess) return g_sticky;
    if (!stream_ok(s)) return ret(cudaErrorInvalidResourceHandle);
    if (!bytes) return cudaSuccess;
    if (!range_ok(p, bytes, K_DEVICE)) {
        fault(cudaErrorIllegalAddress, "%s: %s", fn, where(p, bytes).c_str());
        return ret(cudaErrorInvalidValue);
    }
    if (async) {
        enqueue(s, [p, value, bytes]() { memset(p, value, bytes); });
        return cudaSuccess;
    }
    run_all();
    if (g_sticky != cudaSuccess) return g_sticky;
    memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
    LOCK;
    return set(p, value, bytes, NULL, false, "cudaMemset");
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
    LOCK;
    return set(p, value, bytes, s, true, "cudaMemsetAsync");
}

/* ---- launches ----------------------------------------------------------------------------- */

void sm_emu::launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                    std::function<void()> body, std::function<void()> check_args)
{
    LOCK;
    if (g_sticky != cudaSuccess) return;
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || !threads || threads > 1024 || block.x > 1024 ||
        block.y > 1024 || block.z > 64 || grid.x > 0x7fffffffu || grid.y > 65535 ||
        grid.z > 65535 || smem > (48 << 10)) {
        fprintf(stderr, "cuda-emu: %s<<<(%u,%u,%u), (%u,%u,%u), %zu>>>: invalid configuration\n",
                name, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem);
        ret(cudaErrorInvalidConfiguration);
        return;
    }
    if (!stream_ok(s)) {
        fault(cudaSuccess, "%s launched on a stream that is not live", name);
        ret(cudaErrorInvalidResourceHandle);
        return;
    }
    enqueue(s, [name, grid, block, body, check_args]() { run_kernel(name, grid, block, body, check_args); });
}

void sm_emu::check_kernel_pointer(const char *kernel, int index, const void *p)
{
    if (!p || g_sticky != cudaSuccess) return;
    const Alloc *al = find_alloc(p, 0, NULL);
    if (!al || al->kind != K_DEVICE)
        fault(cudaErrorIllegalAddress, "kernel %s: argument %d (%p) is not device memory (%s)",
              kernel, index, p, al ? "pinned host memory" : "host memory or freed");
}

/* ---- barriers and shuffles --------------------------------------------------------------- */

void sm_emu_syncthreads(const char *file, int line)
{
    if (g_cur < 0) {
        fault(cudaErrorLaunchFailure, "__syncthreads() (%s:%d) outside a kernel", base_name(file), line);
        return;
    }
    Fiber &f = g_fib[g_cur];
    int warp = g_cur / 32, lane = g_cur % 32;
    if (g_n_done) {
        const Fiber &o = g_fib[find_state(F_DONE)];
        kernel_fault("%s waits at __syncthreads() (%s:%d) but %s has exited: a barrier not "
                     "reached by every thread of the block",
                     tname(f).c_str(), base_name(file), line, tname(o).c_str());
    }
    if (g_n_barrier && (g_bar_line != line || (g_bar_file != file && strcmp(g_bar_file, file)))) {
        const Fiber &o = g_fib[g_bar_first];
        kernel_fault("divergent barriers: %s waits at __syncthreads() (%s:%d), %s at "
                     "__syncthreads() (%s:%d)",
                     tname(f).c_str(), base_name(file), line, tname(o).c_str(), base_name(o.file),
                     o.line);
    }
    int w = waiter_for(warp, g_warp_meet[warp], lane);
    if (w >= 0) {
        const Fiber &o = g_fib[warp * 32 + w];
        kernel_fault("deadlock: %s waits at __syncthreads() (%s:%d) while %s waits for it in a "
                     "%s (%s:%d)",
                     tname(f).c_str(), base_name(file), line, tname(o).c_str(),
                     o.kind < 0 ? "__syncwarp" : "warp shuffle", base_name(o.file), o.line);
    }
    if (!g_n_barrier) {
        g_bar_file = file;
        g_bar_line = line;
        g_bar_first = g_cur;
    }
    g_n_barrier++;
    g_warp_bar[warp] |= 1u << lane;
    f.state = F_BARRIER;
    f.file = file;
    f.line = line;
    yield();
}

static uint64_t warp_meet(int kind, unsigned mask, uint64_t bits, int arg, int width,
                          const char *file, int line)
{
    const char *what = kind < 0 ? "__syncwarp" : "warp shuffle";
    if (g_cur < 0) {
        fault(cudaErrorLaunchFailure, "%s (%s:%d) outside a kernel", what, base_name(file), line);
        return bits;
    }
    Fiber &f = g_fib[g_cur];
    int warp = g_cur / 32, base = warp * 32, lane = g_cur - base;
    int lanes = g_n - base < 32 ? g_n - base : 32;
    unsigned me = 1u << lane;
    if (!(mask & me))
        kernel_fault("%s (lane %d) calls a %s (%s:%d) with mask %#x, which leaves it out",
                     tname(f).c_str(), lane, what, base_name(file), line, mask);
    if (lanes < 32 && (mask >> lanes))
        kernel_fault("%s (lane %d): %s (%s:%d) mask %#x names lanes >= %d, which do not exist "
                     "(the block has %d threads)",
                     tname(f).c_str(), lane, what, base_name(file), line, mask, lanes, g_n);
    if (kind >= 0 && (width < 1 || width > 32 || (width & (width - 1))))
        kernel_fault("%s: warp shuffle (%s:%d) width %d is not a power of 2 up to 32",
                     tname(f).c_str(), base_name(file), line, width);
    if (mask & g_warp_done[warp]) {
        int l = __builtin_ctz(mask & g_warp_done[warp]);
        kernel_fault("%s (lane %d): %s (%s:%d) mask %#x names lane %d, %s, which has exited",
                     tname(f).c_str(), lane, what, base_name(file), line, mask, l,
                     tname(g_fib[base + l]).c_str());
    }
    if (mask & g_warp_bar[warp]) {
        int l = __builtin_ctz(mask & g_warp_bar[warp]);
        const Fiber &o = g_fib[base + l];
        kernel_fault("deadlock: %s (lane %d) waits in a %s (%s:%d) for lane %d, %s, which "
                     "waits at __syncthreads() (%s:%d)",
                     tname(f).c_str(), lane, what, base_name(file), line, l, tname(o).c_str(),
                     base_name(o.file), o.line);
    }
    /* lanes already waiting that this call names, or that name this lane, must be at this
     * very rendezvous */
    for (unsigned m = g_warp_meet[warp]; m; m &= m - 1) {
        int l = __builtin_ctz(m);
        const Fiber &o = g_fib[base + l];
        if (!((mask >> l & 1u) || (o.mask & me))) continue;
        if (o.line != line || (o.file != file && strcmp(o.file, file)) || o.mask != mask ||
            o.kind != kind)
            kernel_fault("divergent warp: %s (lane %d) at a %s (%s:%d, mask %#x), lane %d at "
                         "a %s (%s:%d, mask %#x)",
                         tname(f).c_str(), lane, what, base_name(file), line, mask, l,
                         o.kind < 0 ? "__syncwarp" : "warp shuffle", base_name(o.file), o.line,
                         o.mask);
    }
    f.file = file;
    f.line = line;
    f.kind = kind;
    f.mask = mask;
    f.arg = arg;
    f.width = width;
    f.val = bits;
    if (((g_warp_meet[warp] | me) & mask) != mask) {
        f.state = F_SHFL;
        g_warp_meet[warp] |= me;
        yield();
        return f.res;
    }
    /* everyone is here: exchange */
    for (unsigned m = mask; m; m &= m - 1) {
        int l = __builtin_ctz(m);
        Fiber &o = g_fib[base + l];
        int src = l;
        if (kind >= 0) {
            int wd = o.width, seg = l & ~(wd - 1);
            switch (kind) {
            case 0: src = l ^ o.arg; break;
            case 1: src = l + o.arg; break;
            case 2: src = l - o.arg; break;
            default: src = seg + (o.arg & (wd - 1)); break;
            }
            if (src < seg || src >= seg + wd) src = l;
            if (!(mask >> src & 1u))
                kernel_fault("warp shuffle (%s:%d, mask %#x): lane %d reads lane %d, which is not "
                             "in the mask",
                             base_name(file), line, mask, l, src);
        }
        o.res = g_fib[base + src].val;
    }
    for (unsigned m = mask & ~me; m; m &= m - 1) g_fib[base + __builtin_ctz(m)].state = F_READY;
    g_warp_meet[warp] &= ~mask;
    f.state = F_READY;
    return f.res;
}

uint64_t sm_emu_shfl(int kind, unsigned mask, uint64_t bits, int arg, int width, const char *file,
                     int line)
{
    return warp_meet(kind, mask, bits, arg, width, file, line);
}

void sm_emu_syncwarp(unsigned mask, const char *file, int line)
{
    (void)warp_meet(-1, mask, 0, 0, 32, file, line);
}

/* ---- cuBLAS API ---------------------------------------------------------------------------- */

cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value)
{
    *value = type == MAJOR_VERSION ? 13 : 0;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    LOCK;
    if (g_sticky != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new sm_emu_blas;
    g_blas.push_back(*h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    LOCK;
    if (!blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->live = false;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    LOCK;
    if (!blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream_ok(s)) return CUBLAS_STATUS_INVALID_VALUE;
    h->s = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s)
{
    LOCK;
    if (!blas_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    *s = h->s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    (void)mode;
    LOCK;
    return blas_ok(h) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasGetVersion(cublasHandle_t h, int *version)
{
    (void)h;
    *version = 130000;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return "cuBLAS error";
    }
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                            int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
                            void *C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    (void)algo;
    LOCK;
    Gemm g = {"cublasGemmEx", ta, tb, m, n, k, 0, 0, A, B, C, at, lda, ldb, ldc, 0, 0, 0, 1, compute};
    return gemm(h, g, alpha, beta, bt, ct);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType_t at,
                                          int lda, long long strideA, const void *B,
                                          cudaDataType_t bt, int ldb, long long strideB,
                                          const void *beta, void *C, cudaDataType_t ct, int ldc,
                                          long long strideC, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    LOCK;
    Gemm g = {"cublasGemmStridedBatchedEx", ta, tb, m, n, k, 0, 0, A, B, C, at, lda, ldb, ldc,
              strideA, strideB, strideC, batch, compute};
    return gemm(h, g, alpha, beta, bt, ct);
}

/* ---- for tests ------------------------------------------------------------------------------ */

EMU_EXPORT int sentiment_cuda_emu_faults(void)
{
    LOCK;
    return g_faults;
}

EMU_EXPORT const char *sentiment_cuda_emu_first_fault(void)
{
    LOCK;
    return g_first_fault.c_str();
}

EMU_EXPORT void sentiment_cuda_emu_clear(void)
{
    LOCK;
    for (auto *s : g_streams) {
        s->done += (long long)s->q.size();
        s->q.clear();
    }
    g_null_stream.done += (long long)g_null_stream.q.size();
    g_null_stream.q.clear();
    g_faults = 0;
    g_first_fault.clear();
    g_sticky = cudaSuccess;
    g_sticky_msg.clear();
    g_last = cudaSuccess;
}
