#ifndef JOTTER_CLIBPQ_SHIM_H
#define JOTTER_CLIBPQ_SHIM_H

/* PostgreSQL's client library (Debian's libpq-dev), for the relay's shared store. */
#include <libpq-fe.h>

#endif
