#include "cf_v4l2.h"
#include <sys/ioctl.h>

const unsigned long cf_VIDIOC_QUERYCAP = VIDIOC_QUERYCAP;
const unsigned long cf_VIDIOC_ENUM_FMT = VIDIOC_ENUM_FMT;
const unsigned long cf_VIDIOC_ENUM_FRAMESIZES = VIDIOC_ENUM_FRAMESIZES;
const unsigned long cf_VIDIOC_ENUM_FRAMEINTERVALS = VIDIOC_ENUM_FRAMEINTERVALS;
const unsigned long cf_VIDIOC_G_FMT = VIDIOC_G_FMT;
const unsigned long cf_VIDIOC_S_FMT = VIDIOC_S_FMT;
const unsigned long cf_VIDIOC_TRY_FMT = VIDIOC_TRY_FMT;
const unsigned long cf_VIDIOC_G_PARM = VIDIOC_G_PARM;
const unsigned long cf_VIDIOC_S_PARM = VIDIOC_S_PARM;
const unsigned long cf_VIDIOC_REQBUFS = VIDIOC_REQBUFS;
const unsigned long cf_VIDIOC_QUERYBUF = VIDIOC_QUERYBUF;
const unsigned long cf_VIDIOC_QBUF = VIDIOC_QBUF;
const unsigned long cf_VIDIOC_DQBUF = VIDIOC_DQBUF;
const unsigned long cf_VIDIOC_STREAMON = VIDIOC_STREAMON;
const unsigned long cf_VIDIOC_STREAMOFF = VIDIOC_STREAMOFF;

const unsigned int cf_V4L2_PIX_FMT_YUYV = V4L2_PIX_FMT_YUYV;
const unsigned int cf_V4L2_PIX_FMT_NV12 = V4L2_PIX_FMT_NV12;
const unsigned int cf_V4L2_PIX_FMT_YUV420 = V4L2_PIX_FMT_YUV420;
const unsigned int cf_V4L2_PIX_FMT_MJPEG = V4L2_PIX_FMT_MJPEG;

int cf_v4l2_ioctl(int fd, unsigned long request, void *arg) {
    return ioctl(fd, request, arg);
}
