// C shim for Video4Linux2: only what Swift cannot import (ioctl request numbers built by
// function-like macros, the variadic ioctl). Every name is prefixed cf_. Imported only by
// ClipFlowCapture (internal import).
#ifndef CF_V4L2_H
#define CF_V4L2_H
#include <linux/videodev2.h>

// VIDIOC_* request numbers (_IOR/_IOW/_IOWR macros do not import into Swift).
extern const unsigned long cf_VIDIOC_QUERYCAP;
extern const unsigned long cf_VIDIOC_ENUM_FMT;
extern const unsigned long cf_VIDIOC_ENUM_FRAMESIZES;
extern const unsigned long cf_VIDIOC_ENUM_FRAMEINTERVALS;
extern const unsigned long cf_VIDIOC_G_FMT;
extern const unsigned long cf_VIDIOC_S_FMT;
extern const unsigned long cf_VIDIOC_TRY_FMT;
extern const unsigned long cf_VIDIOC_G_PARM;
extern const unsigned long cf_VIDIOC_S_PARM;
extern const unsigned long cf_VIDIOC_REQBUFS;
extern const unsigned long cf_VIDIOC_QUERYBUF;
extern const unsigned long cf_VIDIOC_QBUF;
extern const unsigned long cf_VIDIOC_DQBUF;
extern const unsigned long cf_VIDIOC_STREAMON;
extern const unsigned long cf_VIDIOC_STREAMOFF;

// Pixel format codes (v4l2_fourcc is a function-like macro).
extern const unsigned int cf_V4L2_PIX_FMT_YUYV;
extern const unsigned int cf_V4L2_PIX_FMT_NV12;
extern const unsigned int cf_V4L2_PIX_FMT_YUV420;
extern const unsigned int cf_V4L2_PIX_FMT_MJPEG;

/// ioctl(2) without the variadic argument list. Returns -1 and sets errno on failure.
int cf_v4l2_ioctl(int fd, unsigned long request, void *arg);

#endif
