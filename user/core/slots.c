// SPDX-License-Identifier: MIT
#include "slots.h"

/* no slot starts out open to the flat write (a thread's generations start
 * at 0, as gen does) */
struct slot rp_slots[RP_MAX_SESSIONS] = {
	[0 ... RP_MAX_SESSIONS - 1] = { .flat_gen = RP_SLOT_NOT_FLAT },
};
pthread_mutex_t rp_control_lock = PTHREAD_MUTEX_INITIALIZER;
