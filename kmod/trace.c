// SPDX-License-Identifier: GPL-2.0-only
/* The one place where foliomap's tracepoints (trace.h) are instantiated. */
#define CREATE_TRACE_POINTS
#include "trace.h"
