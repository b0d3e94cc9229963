/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An allocation of span's that fails while twins are made (issue 38 G): the
 * first queries and opens after it may fail, with an error line, but the
 * twin is there at the next, not lost for the process.
 *
 * This program's calloc is the one every library calls: the Nth call made
 * from libspan_impl.so while armed fails. Each N runs in a child of its own,
 * as twins are made once per process; N grows until span makes fewer calls
 * than N.
 */
#include "test_fork.h"
#include "test_log.h"
#include "test_uct_util.h"

#include <ucs/async/async_fwd.h>

#include <atomic>
#include <link.h>
#include <string.h>

extern "C" void *__libc_calloc(size_t nmemb, size_t size);

namespace {

std::atomic<long> fail_at{0}; /* 0: not armed */
std::atomic<long> calls{0};   /* of libspan_impl.so's, while armed */
uintptr_t         span_lo, span_hi;

int find_span(struct dl_phdr_info *info, size_t, void *)
{
    if (strstr(info->dlpi_name, "libspan_impl.so") == NULL) {
        return 0;
    }
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr) &ph = info->dlpi_phdr[i];
        if (ph.p_type == PT_LOAD) {
            uintptr_t start = info->dlpi_addr + ph.p_vaddr;
            span_lo = span_lo ? std::min(span_lo, start) : start;
            span_hi = std::max(span_hi, start + ph.p_memsz);
        }
    }
    return 1;
}

/* Makes self+ and moves 8 bytes through it: 0 where it all went */
int use_twin()
{
    uct_component_h span = find_component("span");
    if (span == NULL) {
        return 1;
    }
    uct_md_h md = open_md(span, "self+");
    if (md == NULL) {
        return 2;
    }
    ucs_async_context_t *async = NULL;
    uct_worker_h worker        = NULL;
    uct_iface_h iface          = NULL;
    uct_ep_h ep                = NULL;
    uint64_t src = 0x0102030405060708ull, dst = 0;
    int ret = 3;
    if ((ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async) ==
         UCS_OK) &&
        (uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker) ==
         UCS_OK) &&
        (open_iface(md, worker, "self+", "memory", NULL, &iface) == UCS_OK) &&
        (connect_to_self(iface, &ep) == UCS_OK)) {
        uct_mem_h memh;
        ret = 4;
        if (uct_md_mem_reg(md, &dst, sizeof(dst), UCT_MD_MEM_ACCESS_ALL,
                           &memh) == UCS_OK) {
            uct_md_attr_t attr;
            uct_md_query(md, &attr);
            std::vector<uint8_t> packed(attr.rkey_packed_size);
            uct_rkey_bundle_t rkey;
            if ((uct_md_mkey_pack(md, memh, packed.data()) == UCS_OK) &&
                (uct_rkey_unpack(span, packed.data(), &rkey) == UCS_OK)) {
                ret = ((uct_ep_put_short(ep, &src, sizeof(src),
                                         (uintptr_t)&dst, rkey.rkey) ==
                        UCS_OK) && (dst == src)) ? 0 : 5;
                uct_rkey_release(span, &rkey);
            }
            uct_md_mem_dereg(md, memh);
        }
    }
    if (ep != NULL) {
        uct_ep_destroy(ep);
    }
    if (iface != NULL) {
        uct_iface_close(iface);
    }
    if (worker != NULL) {
        uct_worker_destroy(worker);
    }
    if (async != NULL) {
        ucs_async_context_destroy(async);
    }
    uct_md_close(md);
    return ret;
}

} // namespace

/* A sanitizer's calloc must stay the only one: its free would refuse
 * glibc's blocks */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#  define SPAN_ALLOC_FAIL_SKIP "a sanitizer build keeps its own calloc"
#else
extern "C" void *calloc(size_t nmemb, size_t size)
{
    uintptr_t caller = (uintptr_t)__builtin_return_address(0);

    if ((fail_at.load(std::memory_order_relaxed) > 0) &&
        (caller >= span_lo) && (caller < span_hi) &&
        (++calls == fail_at.load(std::memory_order_relaxed))) {
        return NULL;
    }
    return __libc_calloc(nmemb, size);
}
#endif

/* exit status of a child: 0 the twin worked at last, 10 span made fewer
 * than N calls, else which step failed */
TEST(span_alloc_fail, a_twin_survives_a_failed_allocation_while_made)
{
    unsigned n;

#ifdef SPAN_ALLOC_FAIL_SKIP
    GTEST_SKIP() << SPAN_ALLOC_FAIL_SKIP;
#endif
    for (n = 1; n < 200; ++n) {
        pid_t child = test_fork([n] {
            /* loads UCX's modules, span among them; span makes its twins at
             * the first query of its MDs, which comes after arming */
            uct_component_h *components;
            unsigned count;
            TEST_CHILD_CHECK(uct_query_components(&components, &count) ==
                             UCS_OK);
            uct_release_component_list(components);
            dl_iterate_phdr(find_span, NULL);
            TEST_CHILD_CHECK(span_hi > span_lo);

            int first;
            size_t errors;
            {
                log_counter logs;
                fail_at = n;
                first   = use_twin();
                fail_at = 0;
                errors  = logs.count();
            }
            if (calls < (long)n) {
                return 10;
            }
            if (first != 0) {
                if (errors == 0) {
                    fprintf(stderr, "calloc %u of span failed: step %d, no error line\n", n, first);
                }
                TEST_CHILD_CHECK(errors > 0); /* a failure says why */
            }
            int again = use_twin();
            if (again != 0) {
                fprintf(stderr, "calloc %u of span failed; self+ then "
                        "failed at step %d, and again at step %d\n", n, first,
                        again);
            }
            return again;
        });
        int status = test_fork_wait(child, 30);
        if (status == 10) {
            break;
        }
        ASSERT_EQ(0, status) << "with span's calloc " << n << " failing";
    }
    printf("span made %u callocs while making and using self+; with each "
           "failing, self+ worked at the next try\n", n - 1);
    EXPECT_GT(n, 3u) << "span made fewer callocs than expected";
    EXPECT_LT(n, 200u);
}
