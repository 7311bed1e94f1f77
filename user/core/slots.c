// SPDX-License-Identifier: MIT
#include "slots.h"

struct slot rp_slots[RP_MAX_SESSIONS];
pthread_mutex_t rp_control_lock = PTHREAD_MUTEX_INITIALIZER;
