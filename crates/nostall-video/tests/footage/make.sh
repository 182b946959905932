#!/bin/sh
# Regenerates the test clips from Debian's opencv-doc package (real camera footage, see
# README.md). Usage: make.sh DIR, where DIR holds vtest.avi, box.mp4 and cup.mp4 from
# /usr/share/doc/opencv-doc/examples/data/ (gunzipped). Needs Debian 12's ffmpeg 5.1
# (libx264, libx265, libvpx, libaom) and python3; other encoder versions give other
# bytes (and maybe other frame counts: the tests hard-code them).
set -eu
src=${1:?usage: make.sh DIR-WITH-OPENCV-SAMPLES}
out=$(dirname "$0")
ff() { ffmpeg -hide_banner -loglevel error -y "$@"; }
common="-map_metadata -1 -an -pix_fmt yuv420p -fflags +bitexact"

# H.264 with B-frames (3, pyramid) and a key frame every 30 frames (1 s), closed GOPs.
ff -ss 2 -t 3 -i "$src/cup.mp4" $common -vf scale=320:240 -c:v libx264 -preset fast \
  -crf 30 -bf 3 -x264-params keyint=30:min-keyint=30:scenecut=0 "$out/h264_bframes.mp4"
# H.264 with open GOPs: B-frames after a recovery-point I frame in decode order that
# precede it in presentation order (and reference the previous GOP).
ff -ss 4 -t 3 -i "$src/box.mp4" $common -vf scale=320:240 -c:v libx264 -preset fast \
  -crf 30 -bf 3 -x264-params keyint=25:min-keyint=25:scenecut=0:open-gop=1 "$out/h264_opengop.mkv"
# HEVC in Matroska, x265's default open GOPs (CRA key frames with leading RASL pictures).
ff -ss 20 -t 4 -i "$src/vtest.avi" $common -vf scale=384:288 -c:v libx265 -preset fast \
  -crf 32 -x265-params keyint=12:min-keyint=12:scenecut=0:log-level=error "$out/hevc.mkv"
# VP9 in WebM (alt-ref frames travel in superframes: one packet per shown frame).
ff -ss 1 -t 3 -i "$src/cup.mp4" $common -vf scale=320:240 -c:v libvpx-vp9 -b:v 250k \
  -g 30 -deadline good -cpu-used 5 "$out/vp9.webm"
# AV1 (libaom) in MP4.
ff -ss 9 -t 2 -i "$src/box.mp4" $common -vf scale=320:240 -c:v libaom-av1 -cpu-used 8 \
  -crf 45 -g 20 -row-mt 1 "$out/av1.mp4"
# The VP9 clip again, its timestamps starting at 7.5 s instead of 0.
ff -i "$out/vp9.webm" -c copy -fflags +bitexact -output_ts_offset 7.5 "$out/vp9_offset.webm"
# MPEG-4 Part 2 in AVI with B-frames (AVI stores no presentation times).
ff -ss 40 -t 4 -i "$src/vtest.avi" $common -vf scale=384:288 -c:v mpeg4 -q:v 6 -bf 2 \
  -g 12 "$out/mpeg4_bframes.avi"
# MS-MPEG-4 v3 in AVI, the codec vtest.avi itself uses, at its own size.
ff -ss 60 -t 3 -i "$src/vtest.avi" $common -c:v msmpeg4 -q:v 10 -g 10 "$out/msmpeg4v3.avi"
# The first 2 s of box.mp4 copied as they are: a phone's H.264 with irregular
# 33/34 ms timestamps (variable frame rate).
ff -t 2 -i "$src/box.mp4" -map_metadata -1 -an -fflags +bitexact -c copy "$out/box_vfr.mp4"

# Real recordings (crates/nostall/tests/audio, Battle for Wesnoth's soundtrack) muxed into
# clips above, for the audio track's tests: AAC, Opus, MP3 as it is, 16-bit PCM as it is
# (the last without -shortest: its track ends before the video).
rec="$out/../../../nostall/tests/audio"
mux="-map 0:v -map 1:a -map_metadata -1 -fflags +bitexact -c:v copy"
ff -i "$out/h264_bframes.mp4" -i "$rec/loyalists.flac" $mux -c:a aac -b:a 64k -shortest "$out/h264_aac.mp4"
ff -i "$out/vp9.webm" -i "$rec/journeys_end.opus" $mux -c:a libopus -b:a 48k -shortest "$out/vp9_opus.webm"
ff -i "$out/mpeg4_bframes.avi" -i "$rec/frantic.mp3" $mux -c:a copy -shortest "$out/mpeg4_mp3.avi"
ff -i "$out/h264_opengop.mkv" -i "$rec/knolls.wav" $mux -c:a copy "$out/h264_pcm.mkv"

# The B-frame H.264 clip again with its index (moov) first, so that a cut keeps the
# header and loses frames (the hostile cuts below).
ff -i "$out/h264_bframes.mp4" -c copy -movflags +faststart "$out/hostile_src.mp4"

# Hostile inputs, made from the clips above by cutting and editing bytes.
h="$out/hostile"
mkdir -p "$h"
python3 - "$out" <<'PY'
import os, random, struct, sys
out = sys.argv[1]
h = os.path.join(out, "hostile")
def load(name):
    return bytearray(open(os.path.join(out, name), "rb").read())
def save(name, b):
    open(os.path.join(h, name), "wb").write(bytes(b))
save("empty.mp4", b"")
save("random.bin", random.Random(20261129).randbytes(20000))
mp4 = load("hostile_src.mp4")
mkv = load("hevc.mkv")
avi = load("mpeg4_bframes.avi")
for frac in (0.004, 0.5, 0.97):
    tag = "%03d" % int(frac * 1000)
    save("h264_cut%s.mp4" % tag, mp4[: int(len(mp4) * frac)])
    save("hevc_cut%s.mkv" % tag, mkv[: int(len(mkv) * frac)])
    save("mpeg4_cut%s.avi" % tag, avi[: int(len(avi) * frac)])
# Bytes flipped inside the first key frame's slice data (from 200 bytes into the mdat
# payload, past the first NAL unit headers).
mdat = mp4.find(b"mdat") + 4
flipped = bytearray(mp4)
for i in range(200, 1200, 50):
    flipped[mdat + i] ^= 0xFF
save("h264_flipped.mp4", flipped)
# The sample entry declares 640x480 for 320x240 frames.
lying = bytearray(mp4)
avc1 = lying.find(b"avc1", lying.find(b"stsd")) + 4 + 6 + 2 + 16
lying[avc1 : avc1 + 4] = struct.pack(">HH", 640, 480)
save("h264_size_lies.mp4", lying)
# The sample entry declares 16384x16384 (16K) for the same frames: over the limits, so
# refused before anything of that size is allocated.
wide = bytearray(mp4)
wide[avc1 : avc1 + 4] = struct.pack(">HH", 16384, 16384)
save("h264_16k_lies.mp4", wide)
# A codec FFmpeg does not know: the Matroska codec ID V_MPEGH/ISO/HEVC made ...HEVX.
unknown = bytearray(mkv)
at = unknown.find(b"V_MPEGH/ISO/HEVC")
unknown[at + 15] = ord("X")
save("hevc_unknown_codec.mkv", unknown)
# The AVI headers declare 100000 frames (avih dwTotalFrames and the stream's
# dwLength) for 40 (not hostile for the index, which counts packets).
many = bytearray(avi)
avih = many.find(b"avih") + 8
many[avih + 16 : avih + 20] = struct.pack("<I", 100000)
strh = many.find(b"strh") + 8
many[strh + 32 : strh + 36] = struct.pack("<I", 100000)
save("mpeg4_count_lies.avi", many)
PY
rm "$out/hostile_src.mp4"
