// C shim for alsa-lib (capture only), imported only by ClipFlowMicrophone (internal import). It
// holds what Swift cannot call comfortably: the hardware/software parameter negotiation (alloca'd
// parameter containers and their direction out-parameters) and the status read (a stack
// container), returned as plain structs. Everything else (open, wait, readi, prepare, resume,
// close, name hints, card info) Swift calls on alsa-lib directly. Every name is prefixed cf_.
// No function here prints or exits; failures return a negative errno and, where several steps
// could fail, the name of the step.
#ifndef CF_ALSA_H
#define CF_ALSA_H
#include <alsa/asoundlib.h>

/// Sample layouts the shim negotiates, in order of preference (all little-endian, interleaved).
typedef enum { cf_alsa_s16 = 0, cf_alsa_float = 1, cf_alsa_s32 = 2 } cf_alsa_sample_format;

/// What to ask for (in) and what the device agreed to (out).
typedef struct {
    unsigned int rate;            // in: preferred rate; out: agreed rate
    unsigned int channels;        // in: preferred channels; out: agreed channels
    unsigned int period_us;       // in: preferred period; out: agreed period in microseconds
    unsigned int buffer_us;       // in: preferred buffer; out: agreed buffer in microseconds
    unsigned long period_frames;  // out
    unsigned long buffer_frames;  // out
    cf_alsa_sample_format format; // out
} cf_alsa_config;

/// Negotiates interleaved read/write access, the first of S16_LE, FLOAT_LE, S32_LE the device
/// offers, the rate and channel count nearest to the ones asked for, the period and buffer times
/// nearest to the ones asked for, and monotonic status timestamps. Returns 0, or a negative errno
/// with `*step` naming what failed.
int cf_alsa_configure(snd_pcm_t *pcm, cf_alsa_config *config, const char **step);

/// Ranges a PCM offers for capture (from its unrestricted hardware parameters).
typedef struct {
    unsigned int rate_min, rate_max;
    unsigned int channels_min, channels_max;
} cf_alsa_ranges;

/// The rate and channel ranges of an open PCM. Returns 0 or a negative errno.
int cf_alsa_ranges_of(snd_pcm_t *pcm, cf_alsa_ranges *out);

/// One snd_pcm_status reading.
typedef struct {
    double htstamp;          // CLOCK_MONOTONIC seconds when the status was taken
    long delay;              // frames captured but not yet read
    long avail;              // frames ready to read
    snd_pcm_state_t state;
} cf_alsa_status_reading;

/// Reads the PCM's status. Returns 0 or a negative errno.
int cf_alsa_status(snd_pcm_t *pcm, cf_alsa_status_reading *out);

/// Stops alsa-lib printing its own diagnostics to stderr (process-wide; callers report failures
/// themselves, with the device name). Safe to call more than once.
void cf_alsa_silence_library_messages(void);

#endif
