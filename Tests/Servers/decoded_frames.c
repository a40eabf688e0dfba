/* Counts the video frames FFmpeg decodes in a process, for tests: built as a shared object and
 * preloaded (LD_PRELOAD) into `clipflow serve`, whose worker processes inherit it. Every frame a
 * video decoder hands out through avcodec_receive_frame appends one byte to the file named by
 * DECODED_FRAMES_LOG (opened with O_APPEND, so processes may share it): the file's size is the
 * number of pictures decoded. Nothing else is changed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <libavcodec/avcodec.h>

int avcodec_receive_frame(AVCodecContext *ctx, AVFrame *frame) {
    static int (*real)(AVCodecContext *, AVFrame *);
    static int fd = -2;
    if (!real) real = (int (*)(AVCodecContext *, AVFrame *))dlsym(RTLD_NEXT, "avcodec_receive_frame");
    int rc = real(ctx, frame);
    if (rc == 0 && ctx->codec_type == AVMEDIA_TYPE_VIDEO && av_codec_is_decoder(ctx->codec)) {
        if (fd == -2) {
            const char *path = getenv("DECODED_FRAMES_LOG");
            fd = path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
        }
        if (fd >= 0 && write(fd, "f", 1) != 1) abort();
    }
    return rc;
}
