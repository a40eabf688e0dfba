#include "cf_ffmpeg.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <malloc.h>

int cf_stream_display_matrix(const AVStream *st, int32_t matrix[9]) {
#if LIBAVFORMAT_VERSION_MAJOR < 61
    const uint8_t *sd = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, NULL);
#else
    const AVPacketSideData *psd = av_packet_side_data_get(st->codecpar->coded_side_data,
        st->codecpar->nb_coded_side_data, AV_PKT_DATA_DISPLAYMATRIX);
    const uint8_t *sd = psd ? psd->data : NULL;
#endif
    if (!sd) return 0;
    memcpy(matrix, sd, sizeof(int32_t) * 9);
    return 1;
}

double cf_stream_display_rotation(const AVStream *st) {
    int32_t m[9];
    if (!cf_stream_display_matrix(st, m)) return NAN;
    return av_display_rotation_get(m);
}

int cf_stream_set_display_rotation(AVStream *st, double angle) {
#if LIBAVFORMAT_VERSION_MAJOR < 61
    uint8_t *sd = av_stream_new_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, sizeof(int32_t) * 9);
    if (!sd) return AVERROR(ENOMEM);
#else
    AVPacketSideData *psd = av_packet_side_data_new(&st->codecpar->coded_side_data,
        &st->codecpar->nb_coded_side_data, AV_PKT_DATA_DISPLAYMATRIX, sizeof(int32_t) * 9, 0);
    if (!psd) return AVERROR(ENOMEM);
    uint8_t *sd = psd->data;
#endif
    av_display_rotation_set((int32_t *)sd, angle);
    return 0;
}

int cf_frame_from_pool(AVFrame *f, AVBufferPool *pool, enum AVPixelFormat fmt, int w, int h, int align) {
    AVBufferRef *buf = av_buffer_pool_get(pool);
    if (!buf) return AVERROR(ENOMEM);
    int rc = av_image_fill_arrays(f->data, f->linesize, buf->data, fmt, w, h, align);
    if (rc < 0) { av_buffer_unref(&buf); return rc; }
    f->buf[0] = buf;
    f->format = fmt; f->width = w; f->height = h;
    return 0;
}

static _Thread_local char cf_last_msg[512];

static void cf_log_callback(void *avcl, int level, const char *fmt, va_list vl) {
    (void)avcl;
    if (level > AV_LOG_ERROR) return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, vl);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    if (n == 0) return;
    memcpy(cf_last_msg, line, n + 1);
}

void cf_log_install(void) { av_log_set_callback(cf_log_callback); }

void cf_log_take_last(char *buf, int size) {
    if (size <= 0) return;
    snprintf(buf, (size_t)size, "%s", cf_last_msg);
    cf_last_msg[0] = 0;
}

void cf_tune_malloc(void) {
#ifdef M_MMAP_THRESHOLD
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}
