// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for the nettrace reader: any input must give events or a
 * clean error, never a crash, an overread, a leak or a hang. Every event is
 * also decoded into the canonical dump to exercise the payload decoder.
 */
#include <stddef.h>
#include <stdint.h>

#include "nettrace_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nt_reader *r = nt_reader_new_mem(data, size);
	struct bytebuf out = { 0 };
	struct nt_rec rec;
	uint64_t n = 0;
	int err;

	if (!r)
		return 0;
	while ((err = nt_reader_next(r, &rec)) > 0) {
		nt_dump_event(r, &rec, &out);
		out.len = 0;
		n++;
	}
	nt_dump_summary(r, n, err < 0, &out);
	bb_free(&out);
	nt_reader_free(r);
	return 0;
}
