// C shim for Video4Linux2: only what Swift cannot import (ioctl request numbers built by
// function-like macros, the variadic ioctl). Every name is prefixed cf_. Imported only by
// ClipFlowCapture (internal import).
#ifndef CF_V4L2_H
#define CF_V4L2_H
#include <linux/videodev2.h>
#endif
