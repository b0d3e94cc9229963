/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The VMM copy engine over a scripted driver: ops return UCS_INPROGRESS
 * and complete from progress only after the device ran their copies, once;
 * a flush completes behind the last copy; the engine copies in the context
 * of the local buffer's device, with events of that context (the fake
 * driver refuses others, as the real one does), and leaves no stream,
 * event or context behind. Batches: the ops that follow the first one
 * since a progress are gathered and go in one launch of the copy kernel
 * (its pieces copied by the fake device when it runs the launch), at the
 * next progress or flush or once full, each op completed once, in order;
 * where the launch fails they go one by one and only an op whose copy is
 * refused fails.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif
#include "test_log.h"

#include <gtest/gtest.h>
#include <thread>
#include <unistd.h>

#if HAVE_CUDA
extern "C" {
#include "copy/span_cuda_copy.h"
#include "copy/span_cuda_kernel.h"
#include "vendor/span_vendor.h"
#include "copy/span_vmm_copy.h"
#include "vendor/span_libcuda.h"
#include "vmm/span_ipc_cache.h"
}

#include <atomic>
#include <cstring>
#include <deque>
#include <string>
#include <map>
#include <mutex>
#include <vector>

namespace {

struct fake_event {
    bool      pending = false;
    CUcontext ctx; /* current at its creation */
};

struct fake_op { /* a copy, a launch or an event record, in stream order */
    CUstream    stream;
    void        *dst;
    const void  *src;
    size_t      length;
    fake_event  *event; /* non-NULL: a record */
    std::vector<span_cuda_kernel_piece_t> pieces; /* a launch's */
};

/* The scripted driver: a stream runs only when the test says so */
struct fake_driver {
    std::deque<fake_op>          ops;
    std::map<uintptr_t, int>     device_of; /* local buffers on a device,
                                               of 1 MiB */
    int                          streams = 0, events = 0, retained = 0;
    int                          pushes = 0, set_access = 0;
    int                          fail_copy_at = -1, copies = 0;
    int                          modules = 0, loads = 0, launches = 0;
    int                          device_queries = 0, ranges = 0;
    std::vector<int>             launch_devices; /* the context of each */
    bool                         fail_load = false, fail_launch = false;
    bool                         fail_record = false;
    int                          host_pieces = 0; /* a kernel read or wrote
                                                     host memory locally */
    std::vector<size_t>          launch_pieces; /* of each launch */
    std::vector<unsigned>        launch_kernels; /* pieces each holds */
    CUcontext                    current = NULL;
    std::vector<CUcontext>       stack;
    std::vector<int>             access_devices;
    std::vector<int>             copy_devices; /* the context of each copy */
} drv;

CUcontext fake_ctx(int device)
{
    return (CUcontext)(uintptr_t)(0x1000 + device);
}

/* The buffer of a device that holds ptr: its first MiB is the device's
 * allocation */
std::map<uintptr_t, int>::iterator fake_allocation(CUdeviceptr ptr)
{
    auto it = drv.device_of.upper_bound((uintptr_t)ptr);
    if ((it == drv.device_of.begin()) ||
        ((uintptr_t)ptr - (--it)->first >= (1u << 20))) {
        return drv.device_of.end(); /* host memory */
    }
    return it;
}

CUresult fake_pointer_attr(void *data, CUpointer_attribute attr,
                           CUdeviceptr ptr)
{
    auto it = fake_allocation(ptr);

    ++drv.device_queries;
    if ((attr != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) ||
        (it == drv.device_of.end())) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *(int*)data = it->second;
    return CUDA_SUCCESS;
}

CUresult fake_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr ptr)
{
    auto it = fake_allocation(ptr);

    ++drv.ranges;
    if (drv.current == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (it == drv.device_of.end()) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *base = it->first;
    *size = 1u << 20;
    return CUDA_SUCCESS;
}

CUresult fake_device_get(CUdevice *dev, int ordinal)
{
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult fake_retain(CUcontext *ctx, CUdevice dev)
{
    *ctx = fake_ctx(dev);
    ++drv.retained;
    return CUDA_SUCCESS;
}

CUresult fake_release(CUdevice dev)
{
    --drv.retained;
    return CUDA_SUCCESS;
}

CUresult fake_push(CUcontext ctx)
{
    drv.stack.push_back(drv.current);
    drv.current = ctx;
    ++drv.pushes;
    return CUDA_SUCCESS;
}

CUresult fake_pop(CUcontext *ctx)
{
    *ctx        = drv.current;
    drv.current = drv.stack.back();
    drv.stack.pop_back();
    return CUDA_SUCCESS;
}

CUresult fake_get_current(CUcontext *ctx)
{
    *ctx = drv.current;
    return CUDA_SUCCESS;
}

CUresult fake_stream_create(CUstream *stream, unsigned flags)
{
    EXPECT_EQ((unsigned)CU_STREAM_NON_BLOCKING, flags);
    /* a stream belongs to the context current at its creation */
    *stream = (CUstream)drv.current;
    ++drv.streams;
    return CUDA_SUCCESS;
}

CUresult fake_stream_destroy(CUstream stream)
{
    --drv.streams;
    return CUDA_SUCCESS;
}

CUresult fake_event_create(CUevent *event, unsigned flags)
{
    if (drv.current == NULL) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    *event                      = (CUevent)new fake_event;
    ((fake_event*)*event)->ctx = drv.current;
    ++drv.events;
    return CUDA_SUCCESS;
}

CUresult fake_event_destroy(CUevent event)
{
    delete (fake_event*)event;
    --drv.events;
    return CUDA_SUCCESS;
}

CUresult fake_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t length,
                     CUstream stream)
{
    if (drv.copies++ == drv.fail_copy_at) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    EXPECT_EQ((CUstream)drv.current, stream);
    drv.copy_devices.push_back((int)((uintptr_t)stream - 0x1000));
    drv.ops.push_back({stream, (void*)dst, (const void*)src, length, NULL,
                       {}});
    return CUDA_SUCCESS;
}

/* The fake module is the address of the kernel's image: a context loads
 * the image span embeds */
CUresult fake_module_load(CUmodule *module, const void *image)
{
    ++drv.loads;
    if (drv.fail_load || (drv.current == NULL)) {
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    EXPECT_EQ((const void*)span_cuda_kernel_image, image);
    *module = (CUmodule)drv.current;
    ++drv.modules;
    return CUDA_SUCCESS;
}

/* A kernel of the module is its context and how many pieces it holds */
CUresult fake_module_function(CUfunction *func, CUmodule module,
                              const char *name)
{
    const size_t prefix = strlen(SPAN_CUDA_KERNEL_NAME);
    unsigned long pieces;

    EXPECT_EQ(0, strncmp(SPAN_CUDA_KERNEL_NAME, name, prefix)) << name;
    pieces = strtoul(name + prefix, NULL, 10);
    EXPECT_LE(pieces, (unsigned long)SPAN_CUDA_KERNEL_PIECES) << name;
    *func = (CUfunction)(((uintptr_t)module << 12) | pieces);
    return CUDA_SUCCESS;
}

CUresult fake_module_unload(CUmodule module)
{
    EXPECT_EQ((CUcontext)module, drv.current);
    --drv.modules;
    return CUDA_SUCCESS;
}

/* A launch of the kernel of the stream's context, one block per piece */
CUresult fake_launch(CUfunction func, unsigned gx, unsigned gy, unsigned gz,
                     unsigned bx, unsigned by, unsigned bz, unsigned shared,
                     CUstream stream, void **params, void **extra)
{
    const span_cuda_kernel_args_t *args =
            (const span_cuda_kernel_args_t*)params[0];

    if (drv.fail_launch) {
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    }
    const unsigned pieces = (uintptr_t)func & 0xfff;

    EXPECT_EQ((CUstream)drv.current, stream);
    EXPECT_EQ(drv.current, (CUcontext)((uintptr_t)func >> 12));
    /* the smallest kernel that holds the launch: the driver copies only
     * its parameters */
    EXPECT_LE(gx, pieces);
    EXPECT_TRUE((pieces == SPAN_CUDA_KERNEL_MIN) || (gx > pieces / 4))
            << gx << " pieces launched by the kernel of " << pieces;
    drv.launch_kernels.push_back(pieces);
    EXPECT_EQ(args->count, (uint64_t)gx);
    EXPECT_EQ(1u, gy * gz * by * bz);
    EXPECT_EQ((unsigned)SPAN_CUDA_KERNEL_THREADS, bx);
    EXPECT_EQ(NULL, extra);
    ++drv.launches;
    drv.launch_pieces.push_back(gx);
    drv.launch_devices.push_back((int)((uintptr_t)stream - 0x1000));
    fake_op op = {stream, NULL, NULL, 0, NULL, {}};
    op.pieces.assign(args->piece, args->piece + gx);
    for (const auto &p : op.pieces) {
        EXPECT_LE(p.length, (uint64_t)SPAN_CUDA_KERNEL_SEGMENT);
        /* the local end of a piece is device memory: a kernel that reads
         * host memory faults on a real device, for the whole context */
        if ((fake_allocation(p.src) == drv.device_of.end()) &&
            (fake_allocation(p.dst) == drv.device_of.end())) {
            ++drv.host_pieces;
        }
    }
    drv.ops.push_back(op);
    return CUDA_SUCCESS;
}

CUresult fake_event_record(CUevent event, CUstream stream)
{
    if (drv.fail_record) {
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    /* a stream records only the events of its own context */
    if ((CUstream)((fake_event*)event)->ctx != stream) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    ((fake_event*)event)->pending = true;
    drv.ops.push_back({stream, NULL, NULL, 0, (fake_event*)event, {}});
    return CUDA_SUCCESS;
}

CUresult fake_event_query(CUevent event)
{
    return ((fake_event*)event)->pending ? CUDA_ERROR_NOT_READY :
                                           CUDA_SUCCESS;
}

/* The device runs n ops (all where n < 0) */
void fake_run(int n = -1)
{
    for (; !drv.ops.empty() && (n != 0); --n) {
        fake_op op = drv.ops.front();
        drv.ops.pop_front();
        if (op.event != NULL) {
            op.event->pending = false;
        } else if (!op.pieces.empty()) {
            for (const auto &p : op.pieces) {
                memcpy((void*)p.dst, (const void*)p.src, p.length);
            }
        } else {
            memcpy(op.dst, op.src, op.length);
        }
    }
}

CUresult fake_event_sync(CUevent event)
{
    while (((fake_event*)event)->pending) {
        fake_run(1);
    }
    return CUDA_SUCCESS;
}

CUresult fake_stream_sync(CUstream stream)
{
    fake_run();
    return CUDA_SUCCESS;
}

CUresult fake_set_access(CUdeviceptr ptr, size_t size,
                         const CUmemAccessDesc *desc, size_t count)
{
    ++drv.set_access;
    drv.access_devices.push_back(desc->location.id);
    return CUDA_SUCCESS;
}

/* The driver's words for the error the fake refuses copies with */
CUresult fake_error_name(CUresult res, const char **name)
{
    if (res != CUDA_ERROR_INVALID_VALUE) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *name = "CUDA_ERROR_INVALID_VALUE";
    return CUDA_SUCCESS;
}

CUresult fake_error_string(CUresult res, const char **string)
{
    if (res != CUDA_ERROR_INVALID_VALUE) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *string = "invalid argument";
    return CUDA_SUCCESS;
}

struct counted_comp {
    uct_completion_t super;
    int              calls;
};

void counted_comp_cb(uct_completion_t *self)
{
    ucs_container_of(self, counted_comp, super)->calls++;
}

class cuda_copy : public ::testing::Test {
protected:
    void SetUp() override
    {
        m_saved = span_libcuda;
        drv     = fake_driver();
        span_libcuda.cuPointerGetAttribute     = fake_pointer_attr;
        span_libcuda.cuMemGetAddressRange      = fake_address_range;
        span_libcuda.cuDeviceGet               = fake_device_get;
        span_libcuda.cuDevicePrimaryCtxRetain  = fake_retain;
        span_libcuda.cuDevicePrimaryCtxRelease = fake_release;
        span_libcuda.cuCtxPushCurrent          = fake_push;
        span_libcuda.cuCtxPopCurrent           = fake_pop;
        span_libcuda.cuCtxGetCurrent           = fake_get_current;
        span_libcuda.cuStreamCreate            = fake_stream_create;
        span_libcuda.cuStreamDestroy           = fake_stream_destroy;
        span_libcuda.cuStreamSynchronize       = fake_stream_sync;
        span_libcuda.cuEventCreate             = fake_event_create;
        span_libcuda.cuEventDestroy            = fake_event_destroy;
        span_libcuda.cuEventRecord             = fake_event_record;
        span_libcuda.cuEventQuery              = fake_event_query;
        span_libcuda.cuEventSynchronize        = fake_event_sync;
        span_libcuda.cuMemcpyAsync             = fake_memcpy;
        span_libcuda.cuMemSetAccess            = fake_set_access;
        span_libcuda.cuModuleLoadData          = fake_module_load;
        span_libcuda.cuModuleGetFunction       = fake_module_function;
        span_libcuda.cuModuleUnload            = fake_module_unload;
        span_libcuda.cuLaunchKernel            = fake_launch;

        m_remote.assign(m_size, 0);
        m_local.resize(m_size);
        for (size_t i = 0; i < m_local.size(); ++i) {
            m_local[i] = (uint8_t)(i * 7 + 1);
        }
        drv.device_of[(uintptr_t)m_local.data()] = 0;
        m_map.base    = (uintptr_t)m_remote.data();
        m_map.length  = m_remote.size();
        m_map.device  = 0;
        m_map.devices = 1;
        m_map.pid     = 1;
        ASSERT_EQ(&span_cuda_copy_ops,
                  span_vendor_vmm_copy(UCS_MEMORY_TYPE_CUDA));
        ASSERT_EQ(UCS_OK, span_vmm_copy_create(&span_cuda_copy_ops, &m_params,
                                               &m_copy));
    }

    void TearDown() override
    {
        if (m_copy != NULL) {
            span_vmm_copy_destroy(m_copy);
        }
        EXPECT_EQ(0, drv.streams);
        EXPECT_EQ(0, drv.events);
        EXPECT_EQ(0, drv.retained);
        EXPECT_EQ(0, drv.modules);
        span_libcuda = m_saved;
    }

    ucs_status_t put(size_t offset, size_t length, uct_completion_t *comp,
                     size_t count = 1)
    {
        uct_iov_t iov = {m_local.data() + offset, length, NULL, length,
                         (unsigned)count};
        return span_vmm_copy_post(m_copy, &m_map, 1, &iov, 1,
                                  m_remote.data() + offset, comp);
    }

    static void init(counted_comp *c)
    {
        c->super  = {counted_comp_cb, 1, UCS_OK};
        c->calls  = 0;
    }

    span_libcuda_t         m_saved;
    /* each op alone, as before batches: the batch tests set their own */
    span_vmm_copy_params_t m_params = {};
    size_t                 m_size   = 4096;
    span_vmm_copy_t        *m_copy  = NULL;
    span_vmm_map_t       m_map   = {};
    std::vector<uint8_t> m_local, m_remote;
};

TEST_F(cuda_copy, op_completes_from_progress_after_the_device_copied)
{
    counted_comp c;

    init(&c);
    EXPECT_EQ(UCS_INPROGRESS, put(0, 1024, &c.super));
    EXPECT_TRUE(span_vmm_copy_busy(m_copy));
    EXPECT_EQ(0u, span_vmm_copy_progress(m_copy)); /* not run yet */
    EXPECT_EQ(0, c.calls);
    fake_run();
    EXPECT_EQ(1u, span_vmm_copy_progress(m_copy));
    EXPECT_EQ(1, c.calls);
    EXPECT_EQ(UCS_OK, c.super.status);
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 1024));
    EXPECT_EQ(0, m_remote[1024]);
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
    EXPECT_EQ(0u, span_vmm_copy_progress(m_copy));
    EXPECT_EQ(1, c.calls);
    /* the copy ran on device 0's stream, made in its context */
    ASSERT_EQ(1u, drv.copy_devices.size());
    EXPECT_EQ(0, drv.copy_devices[0]);
    EXPECT_EQ(NULL, drv.current);
}

TEST_F(cuda_copy, events_and_streams_are_pooled)
{
    counted_comp c;

    for (int i = 0; i < 100; ++i) {
        init(&c);
        ASSERT_EQ(UCS_INPROGRESS, put(0, 64, &c.super));
        fake_run();
        span_vmm_copy_progress(m_copy);
        ASSERT_EQ(1, c.calls);
    }
    EXPECT_EQ(1, drv.events);
    EXPECT_EQ(1, drv.streams);
}

TEST_F(cuda_copy, flush_completes_behind_the_last_copy)
{
    counted_comp a, b, f;

    init(&a);
    init(&b);
    init(&f);
    EXPECT_EQ(UCS_OK, span_vmm_copy_flush(m_copy, &f.super));
    EXPECT_EQ(0, f.calls); /* nothing queued: the caller completes */
    EXPECT_EQ(UCS_INPROGRESS, put(0, 100, &a.super));
    EXPECT_EQ(UCS_INPROGRESS, put(100, 100, &b.super));
    EXPECT_EQ(UCS_INPROGRESS, span_vmm_copy_flush(m_copy, &f.super));
    EXPECT_EQ(UCS_INPROGRESS, span_vmm_copy_flush(m_copy, NULL));
    fake_run(2); /* the first copy and its event */
    span_vmm_copy_progress(m_copy);
    EXPECT_EQ(1, a.calls);
    EXPECT_EQ(0, b.calls);
    EXPECT_EQ(0, f.calls);
    fake_run();
    span_vmm_copy_progress(m_copy);
    EXPECT_EQ(1, b.calls);
    EXPECT_EQ(1, f.calls);
    EXPECT_EQ(UCS_OK, span_vmm_copy_flush(m_copy, NULL));
}

TEST_F(cuda_copy, a_refused_copy_fails_the_op_once_the_copies_before_ran)
{
    counted_comp c, f;

    init(&c);
    init(&f);
    drv.fail_copy_at = 2; /* the third element of four */
    {
        log_counter log;
        EXPECT_EQ(UCS_INPROGRESS, put(0, 64, &c.super, 4));
        EXPECT_EQ(1u, log_counter::count("put of 64 bytes"));
    }
    /* the two copies the device took still run: the op is not over */
    EXPECT_TRUE(span_vmm_copy_busy(m_copy));
    EXPECT_EQ(0u, span_vmm_copy_progress(m_copy));
    EXPECT_EQ(0, c.calls);
    EXPECT_EQ(UCS_INPROGRESS, span_vmm_copy_flush(m_copy, &f.super));
    fake_run();
    span_vmm_copy_progress(m_copy);
    EXPECT_EQ(1, c.calls);
    EXPECT_EQ(UCS_ERR_IO_ERROR, c.super.status);
    EXPECT_EQ(1, f.calls);
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 128));
    EXPECT_EQ(0, m_remote[128]) << "a copy after the refused one ran";
    span_vmm_copy_progress(m_copy);
    EXPECT_EQ(1, c.calls);
}

/* The log of a refused copy names the driver call and the driver's words
 * for its error, or its number where libcuda has no words (the calls that
 * give them are no driver call span needs) */
TEST_F(cuda_copy, a_refused_copy_is_logged_by_call_and_error)
{
    span_libcuda.cuGetErrorName   = fake_error_name;
    span_libcuda.cuGetErrorString = fake_error_string;
    drv.fail_copy_at              = 0;
    {
        log_counter log;
        EXPECT_EQ(UCS_ERR_IO_ERROR, put(0, 64, NULL));
        EXPECT_EQ(1u, log_counter::count("span cuda: cuMemcpyAsync("));
        EXPECT_EQ(1u, log_counter::count(
                              ") failed: CUDA_ERROR_INVALID_VALUE: invalid "
                              "argument"));
        EXPECT_EQ(1u, log_counter::count("span cuda copy: put of 64 bytes"));
    }
    span_libcuda.cuGetErrorName   = NULL;
    span_libcuda.cuGetErrorString = NULL;
    drv.fail_copy_at              = drv.copies;
    {
        log_counter log;
        EXPECT_EQ(UCS_ERR_IO_ERROR, put(0, 64, NULL));
        EXPECT_EQ(1u, log_counter::count(") failed: CUresult 1"));
    }
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
}

TEST_F(cuda_copy, a_refused_first_copy_fails_at_once)
{
    counted_comp c;

    init(&c);
    drv.fail_copy_at = 0;
    {
        log_counter log;
        EXPECT_EQ(UCS_ERR_IO_ERROR, put(0, 64, &c.super, 4));
    }
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
    fake_run();
    span_vmm_copy_progress(m_copy);
    EXPECT_EQ(0, c.calls);
    EXPECT_EQ(0, m_remote[0]);
}

/* With no completion to report it through, the error is returned once the
 * copies before the refused one ran: the caller's memory is its own again */
TEST_F(cuda_copy, a_refused_copy_without_completion_returns_after_the_rest)
{
    drv.fail_copy_at = 1;
    {
        log_counter log;
        EXPECT_EQ(UCS_ERR_IO_ERROR, put(0, 64, NULL, 4));
    }
    EXPECT_TRUE(drv.ops.empty()) << "the copy before the refused one runs";
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 64));
    span_vmm_copy_progress(m_copy);
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
}

TEST_F(cuda_copy, destroy_waits_and_completes_each_op_once)
{
    counted_comp a, f;

    init(&a);
    init(&f);
    EXPECT_EQ(UCS_INPROGRESS, put(0, 512, &a.super));
    EXPECT_EQ(0, a.calls);
    EXPECT_EQ(UCS_INPROGRESS, span_vmm_copy_flush(m_copy, &f.super));
    span_vmm_copy_destroy(m_copy);
    m_copy = NULL;
    EXPECT_EQ(1, a.calls);
    EXPECT_EQ(1, f.calls);
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 512));
}

TEST_F(cuda_copy, copies_in_the_context_of_the_local_buffers_device)
{
    counted_comp a, b;

    init(&a);
    init(&b);
    drv.device_of[(uintptr_t)m_local.data()] = 1;
    drv.current = fake_ctx(0); /* the application's, on another device */
    EXPECT_EQ(UCS_INPROGRESS, put(0, 64, &a.super));
    EXPECT_EQ(UCS_INPROGRESS, put(0, 64, &b.super));
    ASSERT_EQ(2u, drv.copy_devices.size());
    EXPECT_EQ(1, drv.copy_devices[0]);
    EXPECT_EQ(1, drv.copy_devices[1]);
    /* device 1 was given access to the mapping once */
    ASSERT_EQ(1, drv.set_access);
    EXPECT_EQ(1, drv.access_devices[0]);
    EXPECT_EQ(3ull, m_map.devices);
    EXPECT_EQ(fake_ctx(0), drv.current);
    fake_run();
    EXPECT_EQ(2u, span_vmm_copy_progress(m_copy));
}

TEST_F(cuda_copy, no_context_switch_where_the_right_one_is_current)
{
    counted_comp a;

    init(&a);
    ASSERT_EQ(UCS_INPROGRESS, put(0, 64, &a.super)); /* makes the stream */
    drv.current = fake_ctx(0);
    drv.pushes  = 0;
    init(&a);
    ASSERT_EQ(UCS_INPROGRESS, put(0, 64, &a.super));
    EXPECT_EQ(0, drv.pushes);
    fake_run();
    span_vmm_copy_progress(m_copy);
}

TEST_F(cuda_copy, a_device_beyond_the_engine_is_refused)
{
    counted_comp a;
    log_counter log;

    init(&a);
    drv.device_of[(uintptr_t)m_local.data()] = 64;
    EXPECT_EQ(UCS_ERR_NO_DEVICE, put(0, 64, &a.super));
    drv.device_of.erase((uintptr_t)m_local.data()); /* host memory */
    m_map.device = 70;
    EXPECT_EQ(UCS_ERR_NO_DEVICE, put(0, 64, &a.super));
    EXPECT_EQ(2u, log_counter::count("beyond the 64"));
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
    EXPECT_EQ(0, a.calls);
    EXPECT_EQ(0, drv.streams);
}

TEST_F(cuda_copy, nothing_to_move_completes_at_once)
{
    counted_comp a;

    init(&a);
    EXPECT_EQ(UCS_OK, put(0, 64, &a.super, 0));
    EXPECT_EQ(UCS_OK, put(0, 0, &a.super));
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
    EXPECT_EQ(0, a.calls);
    EXPECT_EQ(0, drv.streams);
}

#if HAVE_CUDA_KERNEL
/* The engine of an iface with batches of at most 4 ops; pieces of up to
 * 128 KiB go through the kernel */
class cuda_copy_batch : public cuda_copy {
protected:
    cuda_copy_batch()
    {
        m_params = {.batch_ops = 4, .batch_bytes = SIZE_MAX,
                    .kernel_max = 128 * 1024};
        m_size   = 1024 * 1024;
    }

    /* completions record the order they came in */
    struct ordered_comp {
        uct_completion_t super;
        int              id;
    };

    static void ordered_cb(uct_completion_t *self)
    {
        auto *c = ucs_container_of(self, ordered_comp, super);
        s_order.push_back({c->id, self->status});
    }

    void init(ordered_comp *c, int id)
    {
        c->super = {ordered_cb, 1, UCS_OK};
        c->id    = id;
    }

    /* posts ops 0 to n - 1 of length bytes each, one after the other */
    void post_each(ordered_comp *c, int n, size_t length)
    {
        for (int i = 0; i < n; ++i) {
            init(&c[i], i);
            ASSERT_EQ(UCS_INPROGRESS, put(i * length, length, &c[i].super))
                    << "op " << i;
        }
    }

    /* the ops of post_each completed in order, each with UCS_OK, and
     * their bytes arrived */
    void expect_in_order(int n, size_t length)
    {
        ASSERT_EQ((size_t)n, s_order.size());
        for (int i = 0; i < n; ++i) {
            EXPECT_EQ(i, s_order[i].first);
            EXPECT_EQ(UCS_OK, s_order[i].second);
        }
        EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), n * length));
    }

    /* the ops gathered behind the first are queued by a flush, where a
     * progress would wait for the device to finish the first */
    void queue_gathered()
    {
        EXPECT_EQ(UCS_INPROGRESS, span_vmm_copy_flush(m_copy, NULL));
    }

    void SetUp() override
    {
        s_order.clear();
        cuda_copy::SetUp();
    }

    /* The device runs what is queued and progress completes it, until no
     * op is left (a held batch is queued by the progress before) */
    void complete_all()
    {
        for (int i = 0; (i < 16) && span_vmm_copy_busy(m_copy); ++i) {
            fake_run();
            span_vmm_copy_progress(m_copy);
        }
        EXPECT_FALSE(span_vmm_copy_busy(m_copy));
    }

    static std::vector<std::pair<int, ucs_status_t>> s_order;
};

std::vector<std::pair<int, ucs_status_t>> cuda_copy_batch::s_order;

TEST_F(cuda_copy_batch, ops_after_the_first_go_in_one_launch_once_it_ran)
{
    ordered_comp c[4];

    for (int i = 0; i < 4; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 1000, 100 + i, &c[i].super));
    }
    /* the first went alone, at once; the others wait for the device */
    EXPECT_EQ(1, drv.copies);
    EXPECT_EQ(0, drv.launches);
    EXPECT_EQ(2u, drv.ops.size()); /* its copy and its event */
    EXPECT_EQ(0u, span_vmm_copy_progress(m_copy));
    EXPECT_EQ(0, drv.launches);
    EXPECT_TRUE(s_order.empty());
    fake_run(2); /* the first op's copy and event only */
    EXPECT_EQ(1u, span_vmm_copy_progress(m_copy));
    ASSERT_EQ(1, drv.launches);
    EXPECT_EQ(3u, drv.launch_pieces[0]);
    fake_run();
    EXPECT_EQ(3u, span_vmm_copy_progress(m_copy));
    ASSERT_EQ(4u, s_order.size());
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(i, s_order[i].first);
        EXPECT_EQ(UCS_OK, s_order[i].second);
        EXPECT_EQ(0, memcmp(&m_local[i * 1000], &m_remote[i * 1000],
                            100 + i)) << "op " << i;
        EXPECT_EQ(0, m_remote[i * 1000 + 100 + i]) << "op " << i;
    }
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
    EXPECT_EQ(1, drv.modules); /* kept for the next batch */
    EXPECT_EQ(1, drv.loads);
}

TEST_F(cuda_copy_batch, one_op_between_progresses_is_copied_alone)
{
    ordered_comp c;

    for (int i = 0; i < 10; ++i) {
        init(&c, i);
        ASSERT_EQ(UCS_INPROGRESS, put(0, 4096, &c.super));
        fake_run();
        ASSERT_EQ(1u, span_vmm_copy_progress(m_copy));
    }
    EXPECT_EQ(10, drv.copies);
    EXPECT_EQ(0, drv.launches);
    EXPECT_EQ(0, drv.loads);
    EXPECT_EQ(1, drv.events);
}

TEST_F(cuda_copy_batch, a_full_batch_goes_without_waiting_for_progress)
{
    ordered_comp c[9];

    ASSERT_NO_FATAL_FAILURE(post_each(c, 9, 64));
    /* 1 alone, then two batches of 4 */
    EXPECT_EQ(2, drv.launches);
    fake_run();
    EXPECT_EQ(9u, span_vmm_copy_progress(m_copy));
    expect_in_order(9, 64);
}

/* Batches of 4 ops, with a progress thread beside the posting one (UCT
 * serializes them: joined before the next step) */
class cuda_copy_burst : public cuda_copy_batch {
protected:
    /* an engine of m_params, as set by the test */
    void recreate()
    {
        span_vmm_copy_destroy(m_copy);
        m_copy = NULL;
        ASSERT_EQ(UCS_OK, span_vmm_copy_create(&span_cuda_copy_ops, &m_params,
                                               &m_copy));
    }

    /* progress by another thread, after the device ran what is queued */
    unsigned progress_elsewhere()
    {
        unsigned count = 0;

        std::thread([&] {
            fake_run();
            count = span_vmm_copy_progress(m_copy);
        }).join();
        return count;
    }
};

TEST_F(cuda_copy_burst, a_progress_thread_leaves_a_burst_to_its_poster)
{
    ordered_comp c[6];

    m_params.burst_gap = 1000000000ull; /* 1 s: the burst never pauses */
    ASSERT_NO_FATAL_FAILURE(recreate());
    ASSERT_NO_FATAL_FAILURE(post_each(c, 3, 64));
    /* the first op went alone and ran; while its poster posts, another
     * thread neither completes it nor queues the two gathered */
    EXPECT_EQ(0u, progress_elsewhere());
    EXPECT_EQ(0, drv.launches);
    EXPECT_TRUE(s_order.empty());
    for (int i = 3; i < 6; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
    }
    EXPECT_EQ(1, drv.launches); /* ops 1 to 4: a full batch */
    EXPECT_EQ(0u, progress_elsewhere());
    EXPECT_EQ(1, drv.launches); /* op 5 still gathered */
    EXPECT_TRUE(s_order.empty());
    /* the poster's own progress ends the burst: it completes the ops that
     * ran and queues op 5 */
    EXPECT_EQ(5u, span_vmm_copy_progress(m_copy));
    EXPECT_EQ(2, drv.launches);
    ASSERT_NO_FATAL_FAILURE(complete_all());
    expect_in_order(6, 64);
}

TEST_F(cuda_copy_burst, a_pause_of_the_poster_ends_its_burst)
{
    ordered_comp c[3];

    m_params.burst_gap = 1000; /* 1 us */
    ASSERT_NO_FATAL_FAILURE(recreate());
    ASSERT_NO_FATAL_FAILURE(post_each(c, 3, 64));
    usleep(1000);
    EXPECT_EQ(1u, progress_elsewhere());
    EXPECT_EQ(1, drv.launches);
    EXPECT_EQ(2u, progress_elsewhere());
    expect_in_order(3, 64);
}

TEST_F(cuda_copy_burst, destroy_by_another_thread_during_a_burst_completes_it)
{
    ordered_comp c[3];

    m_params.burst_gap = 1000000000ull; /* 1 s: the burst never pauses */
    ASSERT_NO_FATAL_FAILURE(recreate());
    ASSERT_NO_FATAL_FAILURE(post_each(c, 3, 64));
    /* an iface closed by another thread than the poster's: its progress
     * would leave the burst alone, its end may not */
    std::thread([&] {
        span_vmm_copy_destroy(m_copy);
    }).join();
    m_copy = NULL;
    expect_in_order(3, 64);
}

/* NIXL's pattern: a thread progresses (and here runs the device) without
 * pause beside the one that posts, the two serialized by one lock, as
 * UCP's worker lock serializes them; the burst gap is the default */
TEST_F(cuda_copy_burst, a_spinning_progress_thread_loses_and_reorders_nothing)
{
    const int n = 256;
    std::vector<ordered_comp> c(n);
    std::atomic<bool> stop(false);
    std::mutex lock;
    int posted = 0;

    m_params.burst_gap = 20000; /* 20 us */
    ASSERT_NO_FATAL_FAILURE(recreate());
    std::thread progress([&] {
        while (!stop) {
            std::lock_guard<std::mutex> guard(lock);
            fake_run();
            span_vmm_copy_progress(m_copy);
        }
    });
    for (; posted < n; ++posted) {
        std::lock_guard<std::mutex> guard(lock);
        init(&c[posted], posted);
        if (put(posted * 64, 64, &c[posted].super) != UCS_INPROGRESS) {
            break;
        }
    }
    /* the poster waits as NIXL's does: progressing itself */
    for (int i = 0; i < 1000; ++i) {
        std::lock_guard<std::mutex> guard(lock);
        if (!span_vmm_copy_busy(m_copy)) {
            break;
        }
        span_vmm_copy_flush(m_copy, NULL);
        fake_run();
        span_vmm_copy_progress(m_copy);
    }
    stop = true;
    progress.join();
    EXPECT_EQ(n, posted);
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
    expect_in_order(n, 64);
    /* batched: the first op alone, the rest at most a launch per op */
    EXPECT_GT(drv.launches, 0);
}

TEST_F(cuda_copy_burst, without_a_gap_any_progress_queues_the_gathered_ops)
{
    ordered_comp c[3];

    m_params.burst_gap = 0;
    ASSERT_NO_FATAL_FAILURE(recreate());
    ASSERT_NO_FATAL_FAILURE(post_each(c, 3, 64));
    EXPECT_EQ(1u, progress_elsewhere());
    EXPECT_EQ(1, drv.launches);
    EXPECT_EQ(2u, progress_elsewhere());
    expect_in_order(3, 64);
}

/* Batches of at most 4 ops and 256 bytes */
class cuda_copy_batch_bytes : public cuda_copy_batch {
protected:
    cuda_copy_batch_bytes()
    {
        m_params.batch_bytes = 256;
    }
};

TEST_F(cuda_copy_batch_bytes, a_batch_goes_once_its_ops_hold_its_bytes)
{
    ordered_comp c[7];

    ASSERT_NO_FATAL_FAILURE(post_each(c, 7, 128));
    /* 1 alone, then three batches of 2 ops of 128 bytes, none held */
    EXPECT_EQ(1, drv.copies);
    ASSERT_EQ(3, drv.launches);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(2u, drv.launch_pieces[i]) << "launch " << i;
    }
    fake_run();
    EXPECT_EQ(7u, span_vmm_copy_progress(m_copy));
    expect_in_order(7, 128);
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
}

/* Batches of up to 1024 ops, as by default */
class cuda_copy_batch_1024 : public cuda_copy_batch {
protected:
    cuda_copy_batch_1024()
    {
        m_params.batch_ops = 1024;
    }
};

TEST_F(cuda_copy_batch_1024, a_launch_takes_the_smallest_kernel_that_holds_it)
{
    const std::vector<std::pair<unsigned, unsigned>> cases = {
            {1, 16}, {16, 16}, {17, 64}, {64, 64}, {65, 256}, {257, 1024},
            {1024, 1024}};
    std::vector<counted_comp> c(1025);

    for (const auto &k : cases) {
        SCOPED_TRACE(k.first);
        drv.launch_kernels.clear();
        std::fill(m_remote.begin(), m_remote.end(), 0);
        for (unsigned i = 0; i <= k.first; ++i) { /* the first goes alone */
            cuda_copy::init(&c[i]);
            ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
        }
        EXPECT_EQ(UCS_INPROGRESS, span_vmm_copy_flush(m_copy, NULL));
        ASSERT_EQ(1u, drv.launch_kernels.size());
        EXPECT_EQ(k.second, drv.launch_kernels[0]);
        fake_run();
        EXPECT_EQ(k.first + 1, span_vmm_copy_progress(m_copy));
        for (unsigned i = 0; i <= k.first; ++i) {
            EXPECT_EQ(1, c[i].calls) << "op " << i;
        }
        EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(),
                            (k.first + 1) * 64));
    }
}

TEST_F(cuda_copy_batch, a_flush_queues_the_gathered_ops_and_waits_for_them)
{
    ordered_comp c[3];
    counted_comp f;

    for (int i = 0; i < 3; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
    }
    cuda_copy::init(&f);
    EXPECT_EQ(UCS_INPROGRESS, span_vmm_copy_flush(m_copy, &f.super));
    EXPECT_EQ(1, drv.launches);
    fake_run(3); /* the first op, and the launch without its event */
    span_vmm_copy_progress(m_copy);
    EXPECT_EQ(1u, s_order.size());
    EXPECT_EQ(0, f.calls);
    fake_run();
    span_vmm_copy_progress(m_copy);
    EXPECT_EQ(3u, s_order.size());
    EXPECT_EQ(1, f.calls);
}

TEST_F(cuda_copy_batch, large_pieces_take_the_copy_engine_small_ones_are_cut)
{
    ordered_comp c[3];

    init(&c[0], 0);
    init(&c[1], 1);
    init(&c[2], 2);
    ASSERT_EQ(UCS_INPROGRESS, put(0, 64, &c[0].super));
    /* 128 KiB + 1 byte: beyond the kernel's */
    ASSERT_EQ(UCS_INPROGRESS, put(4096, 128 * 1024 + 1, &c[1].super));
    /* 100 KiB: two segments of the kernel */
    ASSERT_EQ(UCS_INPROGRESS, put(300 * 1024, 100 * 1024, &c[2].super));
    queue_gathered();
    EXPECT_EQ(2, drv.copies); /* the first op, then the large piece */
    ASSERT_EQ(1, drv.launches);
    EXPECT_EQ(2u, drv.launch_pieces[0]);
    fake_run();
    EXPECT_EQ(3u, span_vmm_copy_progress(m_copy));
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 64));
    EXPECT_EQ(0, memcmp(&m_local[4096], &m_remote[4096], 128 * 1024 + 1));
    EXPECT_EQ(0, memcmp(&m_local[300 * 1024], &m_remote[300 * 1024],
                        100 * 1024));
    EXPECT_EQ(0, m_remote[400 * 1024]);
}

TEST_F(cuda_copy_batch, a_failed_launch_queues_the_ops_one_by_one)
{
    ordered_comp c[4];

    drv.fail_launch = true;
    for (int i = 0; i < 4; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
    }
    {
        log_counter log;
        queue_gathered();
        EXPECT_EQ(1u, log_counter::count("cuLaunchKernel("));
    }
    EXPECT_EQ(4, drv.copies);
    fake_run();
    EXPECT_EQ(4u, span_vmm_copy_progress(m_copy));
    ASSERT_EQ(4u, s_order.size());
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(UCS_OK, s_order[i].second);
    }
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 4 * 64));
}

TEST_F(cuda_copy_batch, a_failed_record_after_a_failed_launch_fails_the_ops)
{
    ordered_comp c[4];

    ASSERT_NO_FATAL_FAILURE(post_each(c, 4, 64));
    drv.fail_launch = true;
    drv.fail_record = true; /* of the batch queued one by one */
    {
        log_counter log;
        queue_gathered();
    }
    drv.fail_record = false;
    fake_run();
    EXPECT_EQ(4u, span_vmm_copy_progress(m_copy));
    ASSERT_EQ(4u, s_order.size());
    EXPECT_EQ(UCS_OK, s_order[0].second);
    for (int i = 1; i < 4; ++i) {
        /* as an op alone gets: nothing tells that its copies ran right */
        EXPECT_EQ(UCS_ERR_IO_ERROR, s_order[i].second) << "op " << i;
    }
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
}

TEST_F(cuda_copy_batch, a_refused_piece_fails_only_its_op)
{
    ordered_comp c[4];

    drv.fail_launch  = true;
    drv.fail_copy_at = 2; /* one by one: the second op of the batch */
    for (int i = 0; i < 4; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
    }
    {
        log_counter log;
        queue_gathered();
    }
    fake_run();
    EXPECT_EQ(4u, span_vmm_copy_progress(m_copy));
    ASSERT_EQ(4u, s_order.size());
    EXPECT_EQ(UCS_OK, s_order[0].second);
    EXPECT_EQ(UCS_OK, s_order[1].second);
    EXPECT_EQ(UCS_ERR_IO_ERROR, s_order[2].second);
    EXPECT_EQ(UCS_OK, s_order[3].second);
    EXPECT_EQ(0, memcmp(&m_local[192], &m_remote[192], 64));
    EXPECT_EQ(0, m_remote[128]);
}

TEST_F(cuda_copy_batch, a_device_that_loads_no_kernel_turns_batches_off)
{
    ordered_comp c[6];

    drv.fail_load = true;
    for (int i = 0; i < 3; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
    }
    queue_gathered();
    EXPECT_EQ(1, drv.loads);
    for (int i = 3; i < 6; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
    }
    EXPECT_EQ(6, drv.copies); /* the last three went alone, at once */
    EXPECT_EQ(1, drv.loads);
    fake_run();
    EXPECT_EQ(6u, span_vmm_copy_progress(m_copy));
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 6 * 64));
}

TEST_F(cuda_copy_batch, another_devices_op_queues_the_batch_first)
{
    ordered_comp c[4];
    static uint8_t other[64];

    init(&c[0], 0);
    init(&c[1], 1);
    init(&c[2], 2);
    init(&c[3], 3);
    ASSERT_EQ(UCS_INPROGRESS, put(0, 64, &c[0].super));
    ASSERT_EQ(UCS_INPROGRESS, put(64, 64, &c[1].super));
    /* a local buffer of device 1 */
    memset(other, 0x5a, sizeof(other));
    drv.device_of[(uintptr_t)other] = 1;
    uct_iov_t iov = {other, 64, NULL, 64, 1};
    ASSERT_EQ(UCS_INPROGRESS, span_vmm_copy_post(m_copy, &m_map, 1, &iov, 1,
                                                 &m_remote[128], &c[2].super));
    EXPECT_EQ(1, drv.launches); /* device 0's batch went first */
    ASSERT_EQ(UCS_INPROGRESS, put(192, 64, &c[3].super));
    EXPECT_EQ(2, drv.launches); /* then device 1's */
    span_vmm_copy_progress(m_copy);
    EXPECT_EQ(2, drv.launches); /* three submissions queued: it waits */
    fake_run();
    EXPECT_EQ(3u, span_vmm_copy_progress(m_copy));
    EXPECT_EQ(3, drv.launches);
    fake_run();
    EXPECT_EQ(1u, span_vmm_copy_progress(m_copy));
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(i, s_order[i].first);
    }
    EXPECT_EQ(0x5a, m_remote[128]);
    EXPECT_EQ(2, drv.modules);
}

/* A progress between every two posts, as a progress thread makes: the
 * ops gather while two submissions are queued on the device */
TEST_F(cuda_copy_batch, ops_posted_between_progresses_gather_while_busy)
{
    ordered_comp c[4]; /* the first, and fewer than fill a batch of 4 */

    for (int i = 0; i < 4; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
        EXPECT_EQ(0u, span_vmm_copy_progress(m_copy)) << "op " << i;
    }
    /* the first alone; the others held while it is on the device, though
     * a progress ran after each */
    EXPECT_EQ(1, drv.copies);
    EXPECT_EQ(0, drv.launches);
    fake_run();
    EXPECT_EQ(1u, span_vmm_copy_progress(m_copy)); /* and queues them */
    ASSERT_EQ(1, drv.launches);
    EXPECT_EQ(3u, drv.launch_pieces[0]);
    fake_run();
    EXPECT_EQ(3u, span_vmm_copy_progress(m_copy));
    ASSERT_EQ(4u, s_order.size());
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(i, s_order[i].first);
        EXPECT_EQ(UCS_OK, s_order[i].second);
    }
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 4 * 64));
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
}

TEST_F(cuda_copy_batch, a_burst_in_one_allocation_asks_its_device_twice)
{
    ordered_comp c[9];

    for (int round = 0; round < 2; ++round) {
        drv.device_queries = drv.ranges = 0;
        s_order.clear();
        for (int i = 0; i < 9; ++i) {
            init(&c[i], i);
            ASSERT_EQ(UCS_INPROGRESS, put(i * 4096 + round, 100, &c[i].super));
        }
        /* the first op alone; the second's allocation holds the rest */
        EXPECT_EQ(2, drv.device_queries) << "round " << round;
        EXPECT_EQ(1, drv.ranges) << "round " << round;
        fake_run();
        EXPECT_EQ(9u, span_vmm_copy_progress(m_copy));
        ASSERT_EQ(9u, s_order.size());
        for (int i = 0; i < 9; ++i) {
            EXPECT_EQ(i, s_order[i].first);
            EXPECT_EQ(0, memcmp(&m_local[i * 4096 + round],
                                &m_remote[i * 4096 + round], 100));
        }
    }
}

TEST_F(cuda_copy_batch, an_allocation_is_asked_again_once_its_ops_completed)
{
    ordered_comp c[6];

    for (int i = 0; i < 3; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
    }
    fake_run(2);
    EXPECT_EQ(1u, span_vmm_copy_progress(m_copy)); /* 2 still queued */
    init(&c[3], 3);
    drv.device_queries = 0;
    ASSERT_EQ(UCS_INPROGRESS, put(3 * 64, 64, &c[3].super));
    EXPECT_EQ(0, drv.device_queries); /* held by the ops still queued */
    fake_run();
    EXPECT_EQ(2u, span_vmm_copy_progress(m_copy)); /* and queues the 4th */
    fake_run();
    EXPECT_EQ(1u, span_vmm_copy_progress(m_copy));
    /* every op completed: the buffer may be freed, and the address given
     * to another device's allocation */
    drv.device_of[(uintptr_t)m_local.data()] = 1;
    for (int i = 4; i < 6; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
    }
    EXPECT_EQ(2, drv.device_queries);
    EXPECT_EQ(1, drv.copy_devices.back()); /* the 5th op, alone */
    fake_run();
    EXPECT_EQ(1u, span_vmm_copy_progress(m_copy)); /* and queues the 6th */
    ASSERT_EQ(3u, drv.launch_devices.size());
    EXPECT_EQ(0, drv.launch_devices[1]);
    EXPECT_EQ(1, drv.launch_devices[2]);
    EXPECT_EQ(3ull, m_map.devices);
    fake_run();
    EXPECT_EQ(1u, span_vmm_copy_progress(m_copy));
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 6 * 64));
}

TEST_F(cuda_copy_batch, a_mapping_without_the_devices_access_is_routed)
{
    ordered_comp c[3];
    span_vmm_map_t other = m_map;

    other.devices = 0; /* another peer's, mapped here just now */
    init(&c[0], 0);
    init(&c[1], 1);
    init(&c[2], 2);
    ASSERT_EQ(UCS_INPROGRESS, put(0, 64, &c[0].super));
    ASSERT_EQ(UCS_INPROGRESS, put(64, 64, &c[1].super));
    uct_iov_t iov = {&m_local[128], 64, NULL, 64, 1};
    ASSERT_EQ(UCS_INPROGRESS, span_vmm_copy_post(m_copy, &other, 1, &iov, 1,
                                                 &m_remote[128], &c[2].super));
    EXPECT_EQ(1ull, other.devices);
    EXPECT_EQ(1, drv.set_access);
    EXPECT_EQ(3, drv.device_queries);
    complete_all();
    EXPECT_EQ(3u, s_order.size());
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 3 * 64));
}

TEST_F(cuda_copy_batch, a_device_buffer_whose_allocation_is_unknown_is_routed)
{
    ordered_comp c[4];

    span_libcuda.cuMemGetAddressRange = NULL; /* a driver without it */
    for (int i = 0; i < 4; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
    }
    EXPECT_EQ(4, drv.device_queries);
    complete_all();
    EXPECT_EQ(4u, s_order.size());
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 4 * 64));
}

/* UCP runs the user's callbacks from progress, and they may post: every
 * op still completes exactly once, the batch being completed whatever the
 * callbacks post into the descriptors it frees */
class cuda_copy_chain : public cuda_copy_batch {
protected:
    static constexpr int N = 101;

    struct chain_comp {
        uct_completion_t super;
        cuda_copy_chain  *test;
        int              id;
    };

    static void chain_cb(uct_completion_t *self)
    {
        auto *c = ucs_container_of(self, chain_comp, super);
        c->test->m_calls[c->id]++;
        if (c->test->m_next < N) {
            c->test->post(c->test->m_next++);
        }
    }

    void post(int id)
    {
        m_comp[id] = {{chain_cb, 1, UCS_OK}, this, id};
        EXPECT_EQ(UCS_INPROGRESS, put(id * 64, 64, &m_comp[id].super))
                << "op " << id;
    }

    chain_comp m_comp[N];
    int        m_calls[N] = {};
    int        m_next     = 0;
};

TEST_F(cuda_copy_chain, a_callback_that_posts_loses_no_completion)
{
    for (; m_next < 8; ++m_next) {
        post(m_next);
    }
    for (int i = 0; (i < 10 * N) && span_vmm_copy_busy(m_copy); ++i) {
        fake_run();
        span_vmm_copy_progress(m_copy);
    }
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
    EXPECT_EQ(N, m_next);
    for (int i = 0; i < N; ++i) {
        EXPECT_EQ(1, m_calls[i]) << "op " << i;
    }
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), N * 64));
}

/* The kernel reads and writes every piece of a batch on the device: an op
 * with an element in host memory (after one in device memory) goes alone,
 * copied by the driver, which reaches any memory */
TEST_F(cuda_copy_batch, an_op_with_a_host_element_goes_alone)
{
    std::vector<uint8_t> host(64, 0x5a);
    ordered_comp c[3];

    init(&c[0], 0);
    init(&c[1], 1);
    init(&c[2], 2);
    ASSERT_EQ(UCS_INPROGRESS, put(0, 64, &c[0].super)); /* busy */
    ASSERT_EQ(UCS_INPROGRESS, put(64, 64, &c[1].super)); /* gathered */
    uct_iov_t iov[2] = {{&m_local[128], 64, NULL, 64, 1},
                        {host.data(), 64, NULL, 64, 1}};
    ASSERT_EQ(UCS_INPROGRESS, span_vmm_copy_post(m_copy, &m_map, 1, iov, 2,
                                                 &m_remote[128],
                                                 &c[2].super));
    complete_all();
    EXPECT_EQ(0, drv.host_pieces);
    ASSERT_EQ(3u, s_order.size());
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(i, s_order[i].first);
        EXPECT_EQ(UCS_OK, s_order[i].second);
    }
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 192));
    EXPECT_EQ(0, memcmp(host.data(), &m_remote[192], 64));
}

/* After a fence, nothing posted overtakes what was posted before it: the
 * gathered ops are queued and the device ran them when the fence returns */
TEST_F(cuda_copy_batch, a_fence_queues_the_gathered_ops_and_waits_for_them)
{
    ordered_comp c[5];

    ASSERT_NO_FATAL_FAILURE(post_each(c, 3, 64));
    EXPECT_EQ(0, drv.launches);
    span_vmm_copy_fence(m_copy);
    EXPECT_EQ(1, drv.launches);
    EXPECT_TRUE(drv.ops.empty()) << "the fence returned before the copies ran";
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 3 * 64));
    EXPECT_TRUE(s_order.empty()) << "ops complete from progress only";
    /* a later op to the same bytes lands after them */
    std::fill(m_local.begin(), m_local.begin() + 64, 0xee);
    init(&c[3], 3);
    ASSERT_EQ(UCS_INPROGRESS, put(0, 64, &c[3].super));
    complete_all();
    ASSERT_EQ(4u, s_order.size());
    EXPECT_EQ(std::vector<uint8_t>(64, 0xee),
              std::vector<uint8_t>(m_remote.begin(), m_remote.begin() + 64));
    const int launches = drv.launches;
    span_vmm_copy_fence(m_copy); /* idle: nothing to queue or wait for */
    EXPECT_EQ(launches, drv.launches);
    EXPECT_TRUE(drv.ops.empty());
}

TEST_F(cuda_copy_batch, destroy_queues_and_completes_the_gathered_ops)
{
    ordered_comp c[3];

    for (int i = 0; i < 3; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put(i * 64, 64, &c[i].super));
    }
    span_vmm_copy_destroy(m_copy);
    m_copy = NULL;
    EXPECT_EQ(3u, s_order.size());
    EXPECT_EQ(0, memcmp(m_local.data(), m_remote.data(), 3 * 64));
}

/* A peer's cudaMalloc memory, opened from the legacy IPC handle of its
 * cuda_ipc key (span_ipc_cache.h) and copied by the engine: the fake
 * driver maps every handle onto m_remote, counts opens per handle and
 * context as CUDA does, and refuses a close in another context */
class cuda_ipc_cache : public cuda_copy_batch {
protected:
    static constexpr size_t K      = 192; /* UCX 1.22's key */
    static constexpr size_t OFFSET = 8;   /* its legacy handle */

    struct ipc_state {
        std::map<std::string, int> opens; /* per handle, in its context */
        std::map<std::string, CUcontext> ctx;
        int      total_opens = 0, total_closes = 0;
        size_t   size        = 1024 * 1024;
        int      version     = 13000;
        int      active_device = 0; /* whose primary context is active */
        bool     fail_open   = false;
    };
    static ipc_state s_ipc;

    static std::string handle_str(const CUipcMemHandle &h)
    {
        return std::string(h.reserved, sizeof(h.reserved));
    }

    static CUresult fake_version(int *version)
    {
        *version = s_ipc.version;
        return CUDA_SUCCESS;
    }

    /* two devices; the application uses the first */
    static CUresult fake_count(int *count)
    {
        *count = 2;
        return CUDA_SUCCESS;
    }

    static CUresult fake_state(CUdevice dev, unsigned *flags, int *active)
    {
        *flags  = 0;
        *active = (dev == s_ipc.active_device);
        return CUDA_SUCCESS;
    }

    static CUresult fake_open(CUdeviceptr *ptr, CUipcMemHandle h,
                              unsigned flags)
    {
        EXPECT_EQ((unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, flags);
        if (s_ipc.fail_open || (drv.current == NULL)) {
            return CUDA_ERROR_INVALID_HANDLE;
        }
        std::string key = handle_str(h);
        if ((s_ipc.opens[key] > 0) && (s_ipc.ctx[key] != drv.current)) {
            return CUDA_ERROR_INVALID_CONTEXT; /* one context per device */
        }
        s_ipc.ctx[key] = drv.current;
        ++s_ipc.opens[key];
        ++s_ipc.total_opens;
        *ptr = (CUdeviceptr)s_remote;
        return CUDA_SUCCESS;
    }

    static CUresult fake_close(CUdeviceptr ptr)
    {
        EXPECT_EQ((CUdeviceptr)s_remote, ptr);
        for (auto &it : s_ipc.opens) {
            if ((it.second > 0) && (s_ipc.ctx[it.first] == drv.current)) {
                --it.second;
                ++s_ipc.total_closes;
                return CUDA_SUCCESS;
            }
        }
        return CUDA_ERROR_INVALID_CONTEXT;
    }

    /* an opened mapping is an allocation of the size the driver says */
    static CUresult fake_range(CUdeviceptr *base, size_t *size,
                               CUdeviceptr ptr)
    {
        if (ptr == (CUdeviceptr)s_remote) {
            *base = ptr;
            *size = s_ipc.size;
            return CUDA_SUCCESS;
        }
        return fake_address_range(base, size, ptr);
    }

    void SetUp() override
    {
        s_ipc = ipc_state();
        cuda_copy_batch::SetUp();
        s_remote                          = m_remote.data();
        span_libcuda.cuDriverGetVersion   = fake_version;
        span_libcuda.cuDeviceGetCount     = fake_count;
        span_libcuda.cuDevicePrimaryCtxGetState = fake_state;
        span_libcuda.cuIpcOpenMemHandle   = fake_open;
        span_libcuda.cuIpcCloseMemHandle  = fake_close;
        span_libcuda.cuMemGetAddressRange = fake_range;
        m_ops = &span_ipc_cache_ops;
    }

    void TearDown() override
    {
        m_ops->purge();
        EXPECT_EQ(s_ipc.total_opens, s_ipc.total_closes);
        cuda_copy_batch::TearDown();
    }

    /* UCX 1.22's cuda_ipc key of a legacy handle (id) of the peer's
     * allocation [base, base + size) */
    static std::vector<uint8_t> key(uint8_t id, uint64_t base = 0x7f0000000000,
                                    uint64_t size = 1024 * 1024,
                                    uint32_t type = 1, uint32_t pid = 4242,
                                    uint64_t pid_ns = 0)
    {
        /* with a PID namespace (UCX 1.21+, an exporter outside the initial
         * one): 8 bytes more, and the pid flagged */
        const size_t n = K + (pid_ns ? 8 : 0);
        std::vector<uint8_t> k(n, 0);
        pid |= pid_ns ? (1u << 31) : 0;
        memcpy(&k[0], &type, 4);
        memset(&k[OFFSET], id, sizeof(CUipcMemHandle));
        memcpy(&k[K - 40], &pid, 4);
        memcpy(&k[K - 32], &base, 8);
        memcpy(&k[K - 24], &size, 8);
        memset(&k[K - 16], 0x5a, 16);
        if (pid_ns) {
            memcpy(&k[K], &pid_ns, 8);
        }
        return k;
    }

    static span_chunk_geom_t geom(uint64_t base = 0x7f0000000000,
                                  uint64_t length = 1024 * 1024)
    {
        span_chunk_geom_t g = {};

        g.base       = base;
        g.length     = length;
        g.num_chunks = 1;
        return g;
    }

    ucs_status_t get(const std::vector<uint8_t> &k, span_vmm_map_t **map,
                     const span_chunk_geom_t &g = geom())
    {
        return m_ops->get(k.data(), k.size(), OFFSET, &g, map);
    }

    ucs_status_t put_through(span_vmm_map_t *map, size_t offset, size_t length,
                             uct_completion_t *comp)
    {
        uct_iov_t iov = {m_local.data() + offset, length, NULL, length, 1};
        return span_vmm_copy_post(m_copy, map, 1, &iov, 1,
                                  (uint8_t*)(uintptr_t)map->base + offset,
                                  comp);
    }

    static uint8_t                    *s_remote;
    const span_ipc_cache_ops_t        *m_ops = NULL;
};

cuda_ipc_cache::ipc_state cuda_ipc_cache::s_ipc;
uint8_t *cuda_ipc_cache::s_remote;

TEST_F(cuda_ipc_cache, a_peers_allocation_is_opened_once_and_copied_in_batches)
{
    span_vmm_map_t *a, *b;
    ordered_comp c[5];

    ASSERT_EQ(UCS_OK, get(key(1), &a));
    ASSERT_EQ(UCS_OK, get(key(1), &b)); /* another rkey of it */
    EXPECT_EQ(a, b);
    EXPECT_EQ(1, s_ipc.total_opens);
    EXPECT_TRUE(a->ipc);
    EXPECT_EQ(0, a->device);
    EXPECT_EQ((uintptr_t)m_remote.data(), a->base);
    EXPECT_EQ(NULL, drv.current) << "the context pushed to open stays";
    EXPECT_EQ(1, drv.retained) << "the open holds its context";
    for (int i = 0; i < 5; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put_through(a, i * 64, 64, &c[i].super));
    }
    complete_all();
    expect_in_order(5, 64);
    EXPECT_EQ(1, drv.launches) << "the four ops after the first: one launch";
    m_ops->put(a);
    m_ops->put(b);
    EXPECT_EQ(0, s_ipc.total_closes) << "an unused mapping is kept";
    const int retained = drv.retained; /* the engine's stream's, and it */
    m_ops->purge();
    EXPECT_EQ(1, s_ipc.total_closes);
    EXPECT_EQ(retained - 1, drv.retained);
    EXPECT_EQ(NULL, drv.current);
}

TEST_F(cuda_ipc_cache, at_most_16_unused_mappings_are_kept)
{
    span_vmm_map_t *map[SPAN_IPC_CACHE_IDLE + 1];

    for (uint8_t i = 0; i <= SPAN_IPC_CACHE_IDLE; ++i) {
        ASSERT_EQ(UCS_OK, get(key(i + 1, 0x7f0000000000 + (i << 24)), &map[i],
                              geom(0x7f0000000000 + (i << 24))));
    }
    for (uint8_t i = 0; i <= SPAN_IPC_CACHE_IDLE; ++i) {
        m_ops->put(map[i]);
    }
    EXPECT_EQ(SPAN_IPC_CACHE_IDLE + 1, s_ipc.total_opens);
    EXPECT_EQ(1, s_ipc.total_closes);
    CUipcMemHandle first;
    memset(&first, 1, sizeof(first));
    EXPECT_EQ(0, s_ipc.opens[handle_str(first)]) << "the least recent went";
}

/* A cache eviction while ops are queued: the mapping stays open until the
 * copies through it ran */
TEST_F(cuda_ipc_cache, a_mapping_is_not_closed_while_copies_through_it_run)
{
    span_vmm_map_t *map, *other;
    ordered_comp c[3];

    ASSERT_EQ(UCS_OK, get(key(1), &map));
    for (int i = 0; i < 3; ++i) {
        init(&c[i], i);
        ASSERT_EQ(UCS_INPROGRESS, put_through(map, i * 64, 64, &c[i].super));
    }
    EXPECT_EQ(3u, map->busy);
    m_ops->put(map); /* the rkey released with its ops in flight */
    m_ops->purge();
    EXPECT_EQ(0, s_ipc.total_closes);
    /* a new allocation of the peer over it: not closed either */
    ASSERT_EQ(UCS_OK, get(key(2), &other));
    EXPECT_EQ(0, s_ipc.total_closes);
    complete_all();
    expect_in_order(3, 64);
    EXPECT_EQ(0u, map->busy);
    m_ops->put(other);
    m_ops->purge();
    EXPECT_EQ(2, s_ipc.total_closes);
}

/* The peer freed its allocation and made another at the same address: the
 * old handle is closed before cuda_ipc opens the new one */
TEST_F(cuda_ipc_cache, a_new_handle_over_freed_memory_closes_the_old_one)
{
    span_vmm_map_t *map;

    ASSERT_EQ(UCS_OK, get(key(1), &map));
    m_ops->put(map);
    EXPECT_EQ(0, s_ipc.total_closes);
    span_chunk_geom_t g = geom();
    m_ops->prepare(key(2).data(), K, OFFSET, &g);
    EXPECT_EQ(1, s_ipc.total_closes);
    /* another peer's allocation at that address is not stale */
    ASSERT_EQ(UCS_OK, get(key(3), &map));
    m_ops->put(map);
    m_ops->prepare(key(4, 0x7f0000000000, 1024 * 1024, 1, 4343).data(), K,
                   OFFSET, &g);
    EXPECT_EQ(1, s_ipc.total_closes);
}

/* The peer freed memory an rkey still names and allocated anew over it:
 * the old mapping is revoked (its ops go to cuda_ipc, as natively) and
 * closed before cuda_ipc opens the new handle, or, while copies through
 * it run, once they ran; the rkey's release closes nothing twice */
TEST_F(cuda_ipc_cache, memory_freed_while_an_rkey_names_it_is_revoked)
{
    span_chunk_geom_t g = geom();
    span_vmm_map_t *old, *busy_old, *fresh;
    ordered_comp c;

    ASSERT_EQ(UCS_OK, get(key(1), &old));
    m_ops->prepare(key(2).data(), K, OFFSET, &g);
    EXPECT_TRUE(old->revoked);
    EXPECT_EQ(1, s_ipc.total_closes) << "closed before cuda_ipc's open";
    init(&c, 0);
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, put_through(old, 0, 64, &c.super));
    ASSERT_EQ(UCS_OK, get(key(2), &fresh));
    EXPECT_NE(old, fresh);
    m_ops->put(old);
    EXPECT_EQ(1, s_ipc.total_closes);

    /* again, with a copy through the old mapping in flight */
    ASSERT_EQ(UCS_OK, put_through(fresh, 0, 64, &c.super) == UCS_INPROGRESS ?
                      UCS_OK : UCS_ERR_IO_ERROR);
    busy_old = fresh;
    m_ops->prepare(key(3).data(), K, OFFSET, &g);
    EXPECT_TRUE(busy_old->revoked);
    EXPECT_EQ(1, s_ipc.total_closes) << "closed under a running copy";
    complete_all();
    EXPECT_EQ(UCS_OK, s_order.back().second);
    m_ops->put(busy_old); /* no copy runs now: closed and freed */
    EXPECT_EQ(2, s_ipc.total_closes);
}

/* Keys span does not read, or whose handle the driver does not open as
 * they claim, are left to cuda_ipc: nothing stays open */
TEST_F(cuda_ipc_cache, keys_it_cannot_trust_are_left_to_cuda_ipc)
{
    span_vmm_map_t *map = NULL;
    std::vector<uint8_t> k = key(1);
    span_chunk_geom_t g    = geom();

    EXPECT_EQ(UCS_ERR_UNSUPPORTED, get(key(1, 0x7f0000000000, 1024 * 1024, 2),
                                       &map)) << "a VMM handle";
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, m_ops->get(k.data(), k.size(), 0, &g, &map))
            << "a release span does not read";
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, m_ops->get(k.data(), 100, OFFSET, &g, &map))
            << "a short key";
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              get(key(1), &map, geom(0x7f0000000000 + 4096, 1024 * 1024)))
            << "an extent past the allocation";
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              get(key(1, 0x7f0000000000, 0), &map)) << "an empty allocation";
    EXPECT_EQ(0, s_ipc.total_opens);
    s_ipc.size = 4096; /* the handle opens less than the key claims */
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, get(key(1), &map));
    EXPECT_EQ(1, s_ipc.total_opens);
    EXPECT_EQ(1, s_ipc.total_closes);
    s_ipc.size      = 1024 * 1024;
    s_ipc.fail_open = true;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, get(key(1), &map));
    s_ipc.fail_open     = false;
    s_ipc.active_device = -1; /* a thread of an application on no GPU */
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, get(key(1), &map));
    s_ipc.active_device = 0;
    s_ipc.version       = 11080; /* may refuse cuda_ipc's second open */
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, get(key(1), &map));
    EXPECT_EQ(1, s_ipc.total_opens);
    EXPECT_EQ(0, drv.retained);
    EXPECT_EQ(NULL, drv.current);
}

/* A key of an exporter in another PID namespace carries it: read as such,
 * and its allocation is another than the same pid's of the initial one */
TEST_F(cuda_ipc_cache, a_key_with_a_pid_namespace_is_read_at_its_place)
{
    /* an allocation whose base's low half reads as an unflagged pid */
    const uint64_t base = 0x7f0000001000;
    span_chunk_geom_t g = geom(base);
    std::vector<uint8_t> ns = key(1, base, 1024 * 1024, 1, 4242, 4026532000);
    std::vector<uint8_t> plain = key(1, base);
    span_vmm_map_t *a, *b;

    ASSERT_EQ(UCS_OK, m_ops->get(ns.data(), ns.size(), OFFSET, &g, &a));
    EXPECT_EQ(4242u, a->pid);
    EXPECT_EQ(4026532000ull, a->pid_ns);
    ASSERT_EQ(UCS_OK, m_ops->get(plain.data(), plain.size(), OFFSET, &g, &b));
    EXPECT_NE(a, b);
    EXPECT_EQ(0ull, b->pid_ns);
    m_ops->put(a);
    m_ops->put(b);
}

/* A thread without a context opens the handle on the device the
 * application uses, in its primary context */
TEST_F(cuda_ipc_cache, a_thread_without_a_context_opens_on_the_active_device)
{
    span_vmm_map_t *map;

    s_ipc.active_device = 1;
    ASSERT_EQ(UCS_OK, get(key(1), &map));
    EXPECT_EQ(1, map->device);
    EXPECT_EQ(2ull, map->devices);
    CUipcMemHandle h;
    memset(&h, 1, sizeof(h));
    EXPECT_EQ(fake_ctx(1), s_ipc.ctx[handle_str(h)]);
    m_ops->put(map);
}

/* Opened in device 0's context: a buffer of device 1 is not copied through
 * it (the caller hands the op to cuda_ipc), and nothing is queued */
TEST_F(cuda_ipc_cache, another_devices_buffer_is_left_to_cuda_ipc)
{
    std::vector<uint8_t> other(1024 * 1024, 3);
    span_vmm_map_t *map;
    ordered_comp c;

    ASSERT_EQ(UCS_OK, get(key(1), &map));
    drv.device_of[(uintptr_t)other.data()] = 1;
    init(&c, 0);
    uct_iov_t iov = {other.data(), 64, NULL, 64, 1};
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_vmm_copy_post(m_copy, map, 1, &iov, 1,
                                 (uint8_t*)(uintptr_t)map->base, &c.super));
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
    EXPECT_EQ(0u, map->busy);
    EXPECT_EQ(0, drv.set_access);
    m_ops->put(map);
}

/* Threads take and drop mappings of the same allocations (the fake driver
 * is one thread's: they are opened first, and threads only share them) */
TEST_F(cuda_ipc_cache, threads_share_mappings)
{
    std::vector<span_vmm_map_t*> open(8);
    std::vector<std::thread> threads;
    std::atomic<int> failed(0);

    for (uint8_t id = 1; id <= 8; ++id) {
        ASSERT_EQ(UCS_OK, get(key(id, 0x7f0000000000 + ((uint64_t)id << 24)),
                              &open[id - 1],
                              geom(0x7f0000000000 + ((uint64_t)id << 24))));
    }
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t]() {
            for (int i = 0; i < 500; ++i) {
                uint8_t id = (uint8_t)(1 + ((t + i) % 8));
                std::vector<uint8_t> k = key(id, 0x7f0000000000 +
                                                 ((uint64_t)id << 24));
                span_chunk_geom_t g = geom(0x7f0000000000 +
                                           ((uint64_t)id << 24));
                span_vmm_map_t *map;
                if (m_ops->get(k.data(), K, OFFSET, &g, &map) != UCS_OK) {
                    ++failed;
                    continue;
                }
                failed += (map != open[id - 1]);
                m_ops->put(map);
            }
        });
    }
    for (auto &t : threads) {
        t.join();
    }
    EXPECT_EQ(0, failed.load());
    EXPECT_EQ(8, s_ipc.total_opens);
    for (auto map : open) {
        m_ops->put(map);
    }
}
#else
TEST(cuda_copy_batch, built_without_nvcc)
{
    GTEST_SKIP() << "span was built without nvcc: no copy kernel, no batches";
}
#endif

} // namespace
#else
TEST(cuda_copy, built_without_cuda)
{
    GTEST_SKIP() << "span was built without CUDA: no VMM copy engine";
}
#endif
