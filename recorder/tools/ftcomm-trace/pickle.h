/*
 * pickle.h - the data-only pickle reader (pickle.c): PyTorch Flight
 * Recorder dumps as Python writes them, read without Python.
 */
#ifndef FTC_TRACE_PICKLE_H
#define FTC_TRACE_PICKLE_H

#include <stddef.h>

#include "tree.h"

/* Containers nest at most this deep (a dump nests 5 deep), and at most this
 * many MARKs are open at once. */
#define TR_PICKLE_MAX_DEPTH 64
#define TR_PICKLE_MAX_DEPTH_STR "64"
/* The largest pickle read: a 2000-entry dump with stacks is a few MB. */
#define TR_PICKLE_MAX_BYTES (256ull << 20)

/* Decode the pickle in buf[0..len) (protocols 2 to 5; lists, tuples and
 * sets become lists, bytes strings) into the arena. Returns the value, or
 * NULL with why filled: the offset and name of the opcode that stopped it
 * (any opcode that imports or calls is refused), or the cap it broke.
 * Either way what it built stays in the arena until tv_arena_free. */
tv_t *tr_pickle_load(tv_arena_t *a, const unsigned char *buf, size_t len, char *why, size_t whylen);

#endif
