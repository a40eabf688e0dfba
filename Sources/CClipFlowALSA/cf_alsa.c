#include "cf_alsa.h"

int cf_alsa_configure(snd_pcm_t *pcm, cf_alsa_config *config, const char **step) {
    snd_pcm_hw_params_t *hw;
    snd_pcm_hw_params_alloca(&hw);
    int e;
#define CF_STEP(name, call)                                                                        \
    do {                                                                                           \
        e = (call);                                                                                \
        if (e < 0) {                                                                               \
            *step = name;                                                                          \
            return e;                                                                              \
        }                                                                                          \
    } while (0)
    CF_STEP("reading the hardware parameters", snd_pcm_hw_params_any(pcm, hw));
    CF_STEP("setting interleaved access", snd_pcm_hw_params_set_access(pcm, hw, SND_PCM_ACCESS_RW_INTERLEAVED));
    static const snd_pcm_format_t formats[] = {SND_PCM_FORMAT_S16_LE, SND_PCM_FORMAT_FLOAT_LE, SND_PCM_FORMAT_S32_LE};
    static const cf_alsa_sample_format names[] = {cf_alsa_s16, cf_alsa_float, cf_alsa_s32};
    e = -EINVAL;
    for (int i = 0; i < 3 && e < 0; i++) {
        e = snd_pcm_hw_params_set_format(pcm, hw, formats[i]);
        if (e == 0) config->format = names[i];
    }
    if (e < 0) {
        *step = "choosing a sample format (S16_LE, FLOAT_LE or S32_LE)";
        return e;
    }
    CF_STEP("choosing the channel count", snd_pcm_hw_params_set_channels_near(pcm, hw, &config->channels));
    CF_STEP("choosing the sample rate", snd_pcm_hw_params_set_rate_near(pcm, hw, &config->rate, NULL));
    CF_STEP("choosing the buffer time", snd_pcm_hw_params_set_buffer_time_near(pcm, hw, &config->buffer_us, NULL));
    CF_STEP("choosing the period time", snd_pcm_hw_params_set_period_time_near(pcm, hw, &config->period_us, NULL));
    CF_STEP("applying the hardware parameters", snd_pcm_hw_params(pcm, hw));
    snd_pcm_uframes_t period = 0, buffer = 0;
    CF_STEP("reading the period size", snd_pcm_hw_params_get_period_size(hw, &period, NULL));
    CF_STEP("reading the buffer size", snd_pcm_hw_params_get_buffer_size(hw, &buffer));
    config->period_frames = period;
    config->buffer_frames = buffer;

    snd_pcm_sw_params_t *sw;
    snd_pcm_sw_params_alloca(&sw);
    CF_STEP("reading the software parameters", snd_pcm_sw_params_current(pcm, sw));
    CF_STEP("enabling timestamps", snd_pcm_sw_params_set_tstamp_mode(pcm, sw, SND_PCM_TSTAMP_ENABLE));
    CF_STEP("choosing monotonic timestamps", snd_pcm_sw_params_set_tstamp_type(pcm, sw, SND_PCM_TSTAMP_TYPE_MONOTONIC));
    CF_STEP("setting the wake-up threshold", snd_pcm_sw_params_set_avail_min(pcm, sw, period));
    CF_STEP("applying the software parameters", snd_pcm_sw_params(pcm, sw));
#undef CF_STEP
    return 0;
}

int cf_alsa_ranges_of(snd_pcm_t *pcm, cf_alsa_ranges *out) {
    snd_pcm_hw_params_t *hw;
    snd_pcm_hw_params_alloca(&hw);
    int e = snd_pcm_hw_params_any(pcm, hw);
    if (e < 0) return e;
    if ((e = snd_pcm_hw_params_get_rate_min(hw, &out->rate_min, NULL)) < 0) return e;
    if ((e = snd_pcm_hw_params_get_rate_max(hw, &out->rate_max, NULL)) < 0) return e;
    if ((e = snd_pcm_hw_params_get_channels_min(hw, &out->channels_min)) < 0) return e;
    if ((e = snd_pcm_hw_params_get_channels_max(hw, &out->channels_max)) < 0) return e;
    return 0;
}

int cf_alsa_status(snd_pcm_t *pcm, cf_alsa_status_reading *out) {
    snd_pcm_status_t *st;
    snd_pcm_status_alloca(&st);
    int e = snd_pcm_status(pcm, st);
    if (e < 0) return e;
    snd_htimestamp_t t;
    snd_pcm_status_get_htstamp(st, &t);
    out->htstamp = (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
    out->delay = (long)snd_pcm_status_get_delay(st);
    out->avail = (long)snd_pcm_status_get_avail(st);
    out->state = snd_pcm_status_get_state(st);
    return 0;
}

static void cf_alsa_quiet(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}

void cf_alsa_silence_library_messages(void) { snd_lib_error_set_handler(cf_alsa_quiet); }
