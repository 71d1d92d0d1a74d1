#ifndef JOTTER_CQRENCODE_SHIM_H
#define JOTTER_CQRENCODE_SHIM_H

#include <qrencode.h>

#endif
