/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * An emulated ROCm runtime, for tests only (test/rocm_emu/README).
 *
 * libhsa-runtime64.so.1 (hsa_emu.c) holds all state: agents, memory, IPC,
 * signals, the copy engine; libamdhip64.so.5 (hip_emu.c) is the HIP layer
 * over it, through the HSA API and the private calls declared here
 * (version node HSA_EMU_1, never in a real runtime). Tests call
 * hsa_emu_fail() and hsa_emu_set() too.
 */
#ifndef HSA_EMU_H_
#define HSA_EMU_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What an address lies in */
typedef enum {
    HSA_EMU_NONE = 0,
    HSA_EMU_POOL,     /* hsa_amd_memory_pool_allocate (hipMalloc) */
    HSA_EMU_IPC,      /* hsa_amd_ipc_memory_attach */
    HSA_EMU_VMM,      /* one handle mapped by hipMemMap */
    HSA_EMU_LOCKED,   /* hsa_amd_memory_lock of host memory */
    HSA_EMU_RESERVED  /* hipMemAddressReserve, not mapped there */
} hsa_emu_kind_t;

typedef struct hsa_emu_range {
    hsa_emu_kind_t kind;
    uint64_t       base;      /* of the allocation, attachment or mapping;
                                 LOCKED: in the space of the address asked
                                 about (host_base or agent_base) */
    uint64_t       size;
    int            device;    /* GPU ordinal; -1: host memory */
    uint64_t       buffer_id; /* unique in the process, never reused */
    uint32_t       handle_types; /* VMM: hipMemAllocationHandleType bits */
    void           *vmm;      /* VMM: the physical handle mapped */
    uint64_t       host_base; /* LOCKED: where the CPU sees it */
    uint64_t       agent_base; /* LOCKED: where devices see it */
    int            hip_device; /* LOCKED by hipHostRegister: its device;
                                  -1 otherwise */
} hsa_emu_range_t;

/* Failure injection, as HSA_EMU_FAIL: comma-separated "name", "name@N" or
 * "name@N+" (every call, the Nth only, the Nth and later) of API calls by
 * their names; NULL or "" clears. Counts restart. -1: a malformed spec. */
int hsa_emu_fail(const char *spec);

/* Whether this call of name fails (counts it) */
int hsa_emu_should_fail(const char *name);

/* Settings a test changes at run time: "copy_delay_us" (each async copy
 * waits that long first), "fault" (0: a bad access aborts, as a GPU fault
 * kills a process; 1: the call returns an error), "lock_alias" (while no
 * memory is locked; 1, the default: locked memory has an agent pointer of
 * its own, as HSA_EMU_LOCK_ALIAS; 0: the host pointer). -1: unknown name,
 * or a setting that cannot change now. */
int hsa_emu_set(const char *name, uint64_t value);

/* The range that holds addr; kind HSA_EMU_NONE where none */
hsa_emu_range_t hsa_emu_lookup(uint64_t addr);

int hsa_emu_gpu_count(void);

/* The directory device memory files are made in, whose mappings UCX's scan
 * of /proc/self/maps finds where it starts with "/dev/dri"; "": memfds
 * (HSA_EMU_DRI_DIR empty, or the directory could not be used) */
const char *hsa_emu_dri(void);

/* hipHostRegister, hipHostUnregister, for the HIP layer: memory locked as
 * hsa_amd_memory_lock locks it, that HIP knows (device: the current one);
 * 0 or -1 (a range registered already, or not registered) */
int hsa_emu_host_register(void *host_ptr, size_t size, int device,
                          void **agent_ptr);
int hsa_emu_host_unregister(void *host_ptr);

/* VMM, for the HIP layer: physical handles are memfds of one device */
typedef struct hsa_emu_vmm hsa_emu_vmm_t;

int  hsa_emu_vmm_create(int device, uint64_t size, uint32_t handle_types,
                        hsa_emu_vmm_t **vmm_p);
/* A handle from a descriptor another process exported: 0, or -1 where fd
 * is not an emulated physical handle */
int  hsa_emu_vmm_import(int fd, hsa_emu_vmm_t **vmm_p);
void hsa_emu_vmm_retain(hsa_emu_vmm_t *vmm);
void hsa_emu_vmm_release(hsa_emu_vmm_t *vmm);
int  hsa_emu_vmm_valid(const hsa_emu_vmm_t *vmm);
/* A new descriptor of the handle, the caller's; -1 where its types do not
 * allow a POSIX fd */
int  hsa_emu_vmm_export(hsa_emu_vmm_t *vmm);
void hsa_emu_vmm_props(const hsa_emu_vmm_t *vmm, int *device_p,
                       uint64_t *size_p, uint32_t *handle_types_p);

/* 0 or a hipError_t-free errno-style code: EINVAL, ENOMEM, EEXIST */
int hsa_emu_reserve(uint64_t size, uint64_t alignment, uint64_t hint,
                    uint64_t *addr_p);
int hsa_emu_unreserve(uint64_t addr, uint64_t size);
int hsa_emu_map(uint64_t addr, uint64_t size, uint64_t offset,
                hsa_emu_vmm_t *vmm);
int hsa_emu_unmap(uint64_t addr, uint64_t size);
/* Grants (or, flags 0, withdraws) device access to mapped [addr, +size) */
int hsa_emu_set_access(uint64_t addr, uint64_t size, int device, int flags);
/* The handle mapped at addr, retained; NULL where none */
hsa_emu_vmm_t *hsa_emu_vmm_at(uint64_t addr);

/* A synchronous copy between memory the runtime knows (or host memory);
 * 0, or -1 after a fault where faults return */
int hsa_emu_copy(void *dst, const void *src, size_t size);

/* Waits until every copy queued so far has run */
void hsa_emu_copy_drain(void);

#ifdef __cplusplus
}
#endif

#endif
