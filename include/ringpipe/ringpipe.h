/* SPDX-License-Identifier: MIT */
/*
 * ringpipe public API.
 *
 * Conventions (Documentation/naming.md): functions are rp_<object>_<verb>,
 * handles are opaque, options structs carry their size in the first field so
 * they can grow, errors are negative errno values and constructors that
 * return NULL set errno. Only symbols marked RP_API are exported from
 * libringpipe.so (user/libringpipe.map lists them).
 */
#ifndef RINGPIPE_RINGPIPE_H
#define RINGPIPE_RINGPIPE_H

#ifdef __cplusplus
extern "C" {
#endif

#define RP_API __attribute__((visibility("default")))

#define RP_VERSION_MAJOR 0
#define RP_VERSION_MINOR 1
#define RP_VERSION_PATCH 0

/* The library's version as "MAJOR.MINOR.PATCH". */
RP_API const char *rp_version(void);

#ifdef __cplusplus
}
#endif

#endif /* RINGPIPE_RINGPIPE_H */
