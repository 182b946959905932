/* The C reference decoders' single-thread decode rate, for `bench/audio_floor.py`.
 *
 *     decode_floor FORMAT ROUNDS FILE...
 *
 * FORMAT is flac (libFLAC), mp3 (libmpg123), ogg (libvorbisfile), opus (libopusfile) or
 * wav (libsndfile). Every file is read into memory first; then, ROUNDS times, each is
 * decoded from memory in full, every frame of every channel, to 32-bit float in one
 * array per file (kept and reused, as nostall's floor keeps its planes; soundfile.read
 * likewise returns the whole clip). Prints one line of JSON: the files, those the library
 * refused to open (left out of the rate, as nostall's floor leaves out what it refuses),
 * the frames decoded per round and the best round's seconds.
 *
 * Build: cc -O2 -o decode_floor decode_floor.c -lFLAC -lmpg123 -lvorbisfile -lopusfile \
 *        -lsndfile -lm $(pkg-config --cflags opusfile)
 */
#define _POSIX_C_SOURCE 200809L
#include <FLAC/stream_decoder.h>
#include <mpg123.h>
#include <opusfile.h>
#include <sndfile.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vorbis/vorbisfile.h>

typedef struct {
    unsigned char *data;
    size_t len, pos;
} Memory;

static void die(const char *what, const char *file) {
    fprintf(stderr, "decode_floor: %s: %s\n", what, file);
    exit(1);
}

static float sink[1 << 16];
static volatile float keep;
/* The current file's samples, interleaved; its capacity is kept across files. */
static float *pcm;
static size_t pcm_len, pcm_cap;

/* Appends `n` samples to `pcm`. */
static void put(const float *samples, size_t n) {
    if (pcm_len + n > pcm_cap) {
        pcm_cap = (pcm_len + n) * 2;
        pcm = realloc(pcm, pcm_cap * sizeof(float));
        if (!pcm) die("out of memory", "pcm");
    }
    memcpy(pcm + pcm_len, samples, n * sizeof(float));
    pcm_len += n;
}


static Memory read_file(const char *path) {
    Memory m = {0};
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open", path);
    fseek(f, 0, SEEK_END);
    m.len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    m.data = malloc(m.len);
    if (fread(m.data, 1, m.len, f) != m.len) die("cannot read", path);
    fclose(f);
    return m;
}

/* libFLAC: from memory through read callbacks, each block scaled to float. */
static FLAC__StreamDecoderReadStatus flac_read(const FLAC__StreamDecoder *d, FLAC__byte *buf,
                                               size_t *bytes, void *user) {
    (void)d;
    Memory *m = user;
    size_t n = m->len - m->pos < *bytes ? m->len - m->pos : *bytes;
    memcpy(buf, m->data + m->pos, n);
    m->pos += n;
    *bytes = n;
    return n ? FLAC__STREAM_DECODER_READ_STATUS_CONTINUE
             : FLAC__STREAM_DECODER_READ_STATUS_END_OF_STREAM;
}

static unsigned flac_bits;
static uint64_t frames;
/* Files a library refused to open, in the current round. */
static int refused;

static FLAC__StreamDecoderWriteStatus flac_write(const FLAC__StreamDecoder *d,
                                                 const FLAC__Frame *frame,
                                                 const FLAC__int32 *const buffer[], void *user) {
    (void)d, (void)user;
    float scale = 1.0f / (float)(1u << (frame->header.bits_per_sample - 1));
    unsigned n = frame->header.blocksize, channels = frame->header.channels;
    if (n * channels > (1 << 16)) die("libFLAC block too large", "stream");
    for (unsigned c = 0; c < channels; c++)
        for (unsigned i = 0; i < n; i++) sink[i * channels + c] = (float)buffer[c][i] * scale;
    put(sink, (size_t)n * channels);
    frames += n;
    flac_bits = frame->header.bits_per_sample;
    return FLAC__STREAM_DECODER_WRITE_STATUS_CONTINUE;
}

static void flac_error(const FLAC__StreamDecoder *d, FLAC__StreamDecoderErrorStatus s, void *u) {
    (void)d, (void)s, (void)u;
    die("libFLAC error", "stream");
}

static void decode_flac(Memory *m) {
    FLAC__StreamDecoder *d = FLAC__stream_decoder_new();
    m->pos = 0;
    FLAC__stream_decoder_set_md5_checking(d, false);
    if (FLAC__stream_decoder_init_stream(d, flac_read, NULL, NULL, NULL, NULL, flac_write, NULL,
                                         flac_error, m) != FLAC__STREAM_DECODER_INIT_STATUS_OK)
        die("libFLAC init", "stream");
    if (!FLAC__stream_decoder_process_until_end_of_stream(d)) die("libFLAC decode", "stream");
    FLAC__stream_decoder_delete(d);
}

/* libmpg123: the whole file fed at once, float output. */
static void decode_mp3(Memory *m) {
    int err;
    mpg123_handle *h = mpg123_new(NULL, &err);
    mpg123_param(h, MPG123_FLAGS, MPG123_QUIET, 0);
    mpg123_format_none(h);
    const long *rates;
    size_t nrates;
    mpg123_rates(&rates, &nrates);
    for (size_t i = 0; i < nrates; i++)
        mpg123_format(h, rates[i], MPG123_STEREO | MPG123_MONO, MPG123_ENC_FLOAT_32);
    mpg123_open_feed(h);
    unsigned char *out;
    size_t bytes;
    off_t num;
    mpg123_feed(h, m->data, m->len);
    long rate;
    int channels = 1, encoding;
    for (;;) {
        int r = mpg123_decode_frame(h, &num, &out, &bytes);
        if (r == MPG123_NEW_FORMAT) {
            mpg123_getformat(h, &rate, &channels, &encoding);
            continue;
        }
        if (r != MPG123_OK) break;
        put((const float *)out, bytes / sizeof(float));
        frames += bytes / (sizeof(float) * (size_t)channels);
    }
    mpg123_delete(h);
}

/* libvorbisfile and libopusfile: from memory, float output. */
static size_t mem_read(void *ptr, size_t size, size_t n, void *user) {
    Memory *m = user;
    size_t want = size * n, left = m->len - m->pos;
    if (want > left) want = left;
    memcpy(ptr, m->data + m->pos, want);
    m->pos += want;
    return want / size;
}

static int mem_seek(void *user, ogg_int64_t off, int whence) {
    Memory *m = user;
    ogg_int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? (ogg_int64_t)m->pos : (ogg_int64_t)m->len;
    if (base + off < 0 || base + off > (ogg_int64_t)m->len) return -1;
    m->pos = (size_t)(base + off);
    return 0;
}

static long mem_tell(void *user) { return (long)((Memory *)user)->pos; }

static void decode_ogg(Memory *m) {
    OggVorbis_File vf;
    ov_callbacks cb = {mem_read, mem_seek, NULL, mem_tell};
    m->pos = 0;
    if (ov_open_callbacks(m, &vf, NULL, 0, cb) < 0) {
        refused++;
        return;
    }
    float **planes;
    int section;
    long n;
    int channels = ov_info(&vf, -1)->channels;
    while ((n = ov_read_float(&vf, &planes, 4096, &section)) > 0) {
        for (long i = 0; i < n; i++)
            for (int c = 0; c < channels; c++) sink[i * channels + c] = planes[c][i];
        put(sink, (size_t)n * (size_t)channels);
        frames += (uint64_t)n;
    }
    if (n < 0) die("vorbisfile decode", "stream");
    ov_clear(&vf);
}

static void decode_opus(Memory *m) {
    int err;
    OggOpusFile *f = op_open_memory(m->data, m->len, &err);
    if (!f) {
        refused++;
        return;
    }
    int n;
    int channels = op_channel_count(f, -1);
    while ((n = op_read_float(f, sink, 1 << 16, NULL)) > 0) {
        put(sink, (size_t)n * (size_t)channels);
        frames += (uint64_t)n;
    }
    if (n < 0) die("opusfile decode", "stream");
    op_free(f);
}

/* libsndfile for WAV, through its virtual I/O. */
static sf_count_t vio_len(void *u) { return (sf_count_t)((Memory *)u)->len; }
static sf_count_t vio_seek(sf_count_t off, int whence, void *u) {
    mem_seek(u, off, whence);
    return (sf_count_t)((Memory *)u)->pos;
}
static sf_count_t vio_read(void *ptr, sf_count_t n, void *u) { return (sf_count_t)mem_read(ptr, 1, (size_t)n, u); }
static sf_count_t vio_tell(void *u) { return (sf_count_t)((Memory *)u)->pos; }

static void decode_wav(Memory *m) {
    SF_VIRTUAL_IO io = {vio_len, vio_seek, vio_read, NULL, vio_tell};
    SF_INFO info = {0};
    m->pos = 0;
    SNDFILE *f = sf_open_virtual(&io, SFM_READ, &info, m);
    if (!f) {
        refused++;
        return;
    }
    sf_count_t n;
    int chunk = (1 << 16) / info.channels;
    while ((n = sf_readf_float(f, sink, chunk)) > 0) {
        put(sink, (size_t)n * (size_t)info.channels);
        frames += (uint64_t)n;
    }
    sf_close(f);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: decode_floor flac|mp3|ogg|opus|wav ROUNDS FILE...\n");
        return 2;
    }
    const char *format = argv[1];
    void (*decode)(Memory *) = !strcmp(format, "flac")   ? decode_flac
                               : !strcmp(format, "mp3")  ? decode_mp3
                               : !strcmp(format, "ogg")  ? decode_ogg
                               : !strcmp(format, "opus") ? decode_opus
                               : !strcmp(format, "wav")  ? decode_wav
                                                         : NULL;
    if (!decode) die("unknown format", format);
    int rounds = atoi(argv[2]), files = argc - 3;
    Memory *all = calloc((size_t)files, sizeof(Memory));
    for (int i = 0; i < files; i++) all[i] = read_file(argv[3 + i]);
    double best = 1e30;
    uint64_t per_round = 0;
    for (int r = 0; r < rounds; r++) {
        frames = 0;
        refused = 0;
        double t = now();
        for (int i = 0; i < files; i++) {
            pcm_len = 0;
            decode(&all[i]);
            if (pcm_len) keep += pcm[pcm_len - 1];
        }
        t = now() - t;
        if (t < best) best = t;
        per_round = frames;
    }
    printf("{\"format\":\"%s\",\"files\":%d,\"refused\":%d,\"frames\":%llu,\"seconds\":%.6f,"
           "\"files_per_s\":%.2f}\n",
           format, files, refused, (unsigned long long)per_round, best, (files - refused) / best);
    return 0;
}
