/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memfd tables that peers on the node read (span_memfd.h).
 */
#include "span_memfd.h"
#include "span_peer.h"

#include <ucs/debug/log_def.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* What the link of a memfd reads before its name */
#define SPAN_MEMFD_LINK "/memfd:"

uint64_t span_memfd_random(void)
{
    uint64_t value;

    if (getrandom(&value, sizeof(value), 0) != sizeof(value)) {
        value = ((uint64_t)time(NULL) << 32) ^ getpid() ^ (uintptr_t)&value;
    }
    return value;
}

ucs_status_t span_memfd_create(const span_memfd_kind_t *kind, unsigned seals,
                               int *fd_p, uint64_t *id_p)
{
    uint64_t header[2] = {kind->magic, span_memfd_random()};
    int fd;

    fd = memfd_create(kind->name,
                      MFD_CLOEXEC | ((seals != 0) ? MFD_ALLOW_SEALING : 0));
    if ((fd < 0) ||
        (pwrite(fd, header, sizeof(header), 0) != sizeof(header)) ||
        ((seals != 0) && (fcntl(fd, F_ADD_SEALS, seals) != 0))) {
        ucs_error("%s: cannot make the %s: %m", kind->log, kind->what);
        if (fd >= 0) {
            close(fd);
        }
        return UCS_ERR_IO_ERROR;
    }
    *fd_p = fd;
    *id_p = header[1];
    return UCS_OK;
}

int span_memfd_is(const span_memfd_kind_t *kind, int fd, char *link,
                  size_t size, mode_t *mode_p)
{
    size_t prefix = strlen(SPAN_MEMFD_LINK), name = strlen(kind->name);
    struct stat st;

    span_peer_fd_link(fd, link, size);
    *mode_p = (fstat(fd, &st) == 0) ? st.st_mode : 0;
    return S_ISREG(*mode_p) && !strncmp(link, SPAN_MEMFD_LINK, prefix) &&
           !strncmp(link + prefix, kind->name, name) &&
           (link[prefix + name] == ' ');
}

int span_memfd_header_is(const span_memfd_kind_t *kind, int fd, uint64_t id)
{
    uint64_t header[2];

    return (pread(fd, header, sizeof(header), 0) == sizeof(header)) &&
           (header[0] == kind->magic) && (header[1] == id);
}

int span_memfd_sealed(int fd, unsigned seals)
{
    int has = fcntl(fd, F_GET_SEALS);

    return (has != -1) && (((unsigned)has & seals) == seals);
}
