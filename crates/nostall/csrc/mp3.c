/* MP3 through minimp3, behind a handle: the one C file of the engine's audio decoders.
 *
 * minimp3_ex does the work: it scans the frames (or reads a Xing/LAME tag), trims the
 * encoder's delay and padding as the tag states (as libmpg123 does, so lengths match
 * what torchaudio and soundfile load), and seeks to a sample by an index of frames,
 * decoding from enough frames earlier to fill the bit reservoir. This file only keeps
 * its state behind an opaque pointer (so that Rust need not mirror its layout) and,
 * when a tag states the length, counts the audio frames it declares against those
 * present (a file cut short).
 */
#define MINIMP3_IMPLEMENTATION
#define MINIMP3_FLOAT_OUTPUT
#define MINIMP3_NO_STDIO
#include <stdlib.h>

#include "minimp3/minimp3_ex.h"

typedef struct {
    mp3dec_ex_t dec;
    /* Audio frames present (the tag's frame is not one; counted only when a tag
     * declares some), and those the tag declares (0 without a tag). */
    uint64_t frames_present, frames_declared;
} nostall_mp3;

static int count_frame(void *user, const uint8_t *frame, int frame_size, int free_format_bytes,
                       size_t buf_size, uint64_t offset, mp3dec_frame_info_t *info) {
    (void)free_format_bytes, (void)buf_size, (void)offset, (void)info;
    nostall_mp3 *h = user;
    if (h->frames_present == 0 && h->frames_declared == 0 && HDR_GET_LAYER(frame) == 1) {
        uint32_t frames;
        int delay, padding;
        int tag = mp3dec_check_vbrtag(frame, frame_size, &frames, &delay, &padding);
        if (tag > 0) {
            h->frames_declared = frames;
            return 0;
        }
        if (tag < 0) return 0; /* a tag without a frame count: not audio either */
    }
    h->frames_present++;
    return 0;
}

/* Opens `buf` (borrowed until close). NULL when it holds no MP3 frames or memory ran out
 * (`*error`: 1 no frames, 2 memory). */
nostall_mp3 *nostall_mp3_open(const uint8_t *buf, size_t len, int *error) {
    nostall_mp3 *h = calloc(1, sizeof(nostall_mp3));
    if (!h) {
        *error = 2;
        return NULL;
    }
    int ret = mp3dec_ex_open_buf(&h->dec, buf, len, MP3D_SEEK_TO_SAMPLE);
    if (ret == 0 && !(h->dec.samples > 0 && h->dec.info.channels > 0 && h->dec.info.hz > 0))
        ret = 1;
    /* Only a tag states a length to hold the frames against; without one the opening
     * scan already counted them. */
    if (ret == 0 && h->dec.vbr_tag_found)
        ret = mp3dec_iterate_buf(buf, len, count_frame, h);
    if (ret != 0) {
        *error = ret == MP3D_E_MEMORY ? 2 : 1;
        mp3dec_ex_close(&h->dec);
        free(h);
        return NULL;
    }
    return h;
}

/* The stream's rate, channels and length in frames (samples per channel), and the audio
 * frames present against those a tag declares (0 without one). */
void nostall_mp3_info(const nostall_mp3 *h, uint32_t *rate, uint32_t *channels,
                      uint64_t *frames, uint64_t *present, uint64_t *declared) {
    *rate = (uint32_t)h->dec.info.hz;
    *channels = (uint32_t)h->dec.info.channels;
    *frames = h->dec.samples / (uint64_t)h->dec.info.channels;
    *present = h->frames_present;
    *declared = h->frames_declared;
}

/* Seeks to frame `frame` (counted in frames, not samples); 0 on success. */
int nostall_mp3_seek(nostall_mp3 *h, uint64_t frame) {
    return mp3dec_ex_seek(&h->dec, frame * (uint64_t)h->dec.info.channels);
}

/* Decodes the next frame (or what is left of it after a seek), at most `max` interleaved
 * samples: how many, with `*out` pointing at them inside the decoder (valid until the
 * next call). `*error` is nonzero when decoding stopped on an error (a change of rate,
 * layer or channels). */
size_t nostall_mp3_read_frame(nostall_mp3 *h, const float **out, size_t max, int *error) {
    mp3d_sample_t *samples = NULL;
    mp3dec_frame_info_t info;
    size_t n = mp3dec_ex_read_frame(&h->dec, &samples, &info, max);
    *out = samples;
    *error = h->dec.last_error;
    return samples ? n : 0;
}

void nostall_mp3_close(nostall_mp3 *h) {
    if (!h) return;
    mp3dec_ex_close(&h->dec);
    free(h);
}
