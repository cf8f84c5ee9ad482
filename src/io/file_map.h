/* file_map.h: a whole file in memory, either mmap'd (PROT_READ, MAP_PRIVATE) or read into an
 * anonymous, page-aligned buffer with transparent huge pages (cpu-perf.md: idle page-cache pages
 * of an mmap are evicted on this VM and come back at disk speed). Shared by the GGUF and
 * safetensors readers. */
#ifndef BS_FILE_MAP_H
#define BS_FILE_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bs_file_map {
    void *base;
    size_t size;
    bool mmapped;
} bs_file_map;

/* Returns 0, or -1 with bs_error ("path: reason"). An empty file is an error. */
int bs_file_map_open(bs_file_map *m, const char *path, bool use_mmap);
/* Hint that the mapping will be read soon (no-op for a read-in copy). */
void bs_file_map_willneed(const bs_file_map *m);
/* Map every page of an mmapped file now (reading it in if needed), so first use does not fault
 * page by page: for weights that are used rarely and late, like a parked drafter's. */
void bs_file_map_prefault(const bs_file_map *m);
void bs_file_map_close(bs_file_map *m);
/* A file's identity: device, inode, size, mtime (ns), to tell whether it changed. 0 or -1. */
int bs_file_identity(const char *path, uint64_t id[4]);

#endif
