// C shim for FFmpeg 5.1: what Swift cannot import directly (function-like macros, va_list
// logging, version-specific side-data calls, AVFrame's fixed arrays) and glibc's mallopt tuning.
// Every name is prefixed cf_. Imported only by ClipFlowMedia (internal import).
#ifndef CF_FFMPEG_H
#define CF_FFMPEG_H

#include <libavformat/avformat.h>
#include <libavcodec/avcodec.h>
#include <libavutil/avutil.h>
#include <libavutil/display.h>
#include <libavutil/opt.h>
#include <libavutil/channel_layout.h>
#include <libavutil/imgutils.h>
#include <libavutil/audio_fifo.h>
#include <libswscale/swscale.h>
#include <libswresample/swresample.h>
#include <stdint.h>

static inline int cf_averror(int posix) { return AVERROR(posix); }
static inline int cf_averror_eof(void) { return AVERROR_EOF; }
static inline int cf_averror_eagain(void) { return AVERROR(EAGAIN); }
static inline int cf_averror_invaliddata(void) { return AVERROR_INVALIDDATA; }
static inline int64_t cf_nopts(void) { return AV_NOPTS_VALUE; }

static inline uint8_t *cf_frame_data(const AVFrame *f, int i) { return f->data[i]; }
static inline int cf_frame_linesize(const AVFrame *f, int i) { return f->linesize[i]; }

/// Points frame->data/linesize at a packed picture in `buf` (no copy; the caller keeps `buf`
/// alive while the frame is used). Returns the picture size or a negative AVERROR.
static inline int cf_frame_wrap(AVFrame *f, const uint8_t *buf, enum AVPixelFormat fmt, int w, int h) {
    f->format = fmt; f->width = w; f->height = h;
    return av_image_fill_arrays(f->data, f->linesize, buf, fmt, w, h, 1);
}
/// Gives `f` one buffer from `pool` holding a picture of `fmt`, `w` x `h` with rows aligned to
/// `align` bytes (the pool's buffers must be at least av_image_get_buffer_size(fmt, w, h, align)).
/// The frame holds the buffer's only reference; unref returns it to the pool. Returns 0 or a
/// negative AVERROR.
int cf_frame_from_pool(AVFrame *f, AVBufferPool *pool, enum AVPixelFormat fmt, int w, int h, int align);

/// Pointer to channel plane `i` of an audio frame (extended_data).
static inline float *cf_frame_plane_f32(const AVFrame *f, int i) { return (float *)f->extended_data[i]; }

/// Rotation of the stream's display matrix in FFmpeg's convention
/// (av_display_rotation_get: degrees counter-clockwise), or NAN if the stream has none.
double cf_stream_display_rotation(const AVStream *st);
/// Copies the stream's display matrix (AV_PKT_DATA_DISPLAYMATRIX: 9 values, 16.16 fixed point
/// except the third column, 2.30) into `matrix`; 1 if the stream has one, 0 if not.
int cf_stream_display_matrix(const AVStream *st, int32_t matrix[9]);
/// Writes a pure-rotation display matrix (av_display_rotation_set(angle)) as stream side data.
int cf_stream_set_display_rotation(AVStream *st, double angle);

/// Installs an av_log callback that keeps the last error-level message of the calling
/// thread (so errors can carry FFmpeg's own words) and prints nothing.
void cf_log_install(void);
/// Copies the last captured message of this thread into buf (NUL-terminated) and clears it.
void cf_log_take_last(char *buf, int size);

/// Serves blocks up to 64 MiB from the heap and keeps freed heap (glibc mallopt); the contract
/// is MediaProcess.tuneAllocator's.
void cf_tune_malloc(void);

#endif
