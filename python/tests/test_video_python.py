"""ops.Python on video clips (real camera footage): last in the pipeline, a function is
given each sample's whole clip as delivered, in either layout and with several clips a
sample; its generator is the sample's, the same for any thread count and in worker
processes; anywhere else it is refused."""

import pytest
import torch

import nostall
from nostall import ops, video


FRAME_OPS = (ops.Resize(40), ops.CenterCrop(32))


def clips(root, *fns, clip=None, threads=2, **kwargs):
    loader = nostall.Loader(str(root), batch_size=8, shuffle=False, seed=5, threads=threads, dtype="uint8",
                            output="torch", pipeline=[clip or video.Clip(4, sampler="spread"), *FRAME_OPS, *fns],
                            **kwargs)
    return torch.cat([x for x, _ in loader])


def invert(clip):
    return 255 - clip


def reverse_in_time(clip, generator):
    """Plays the clip backwards half the time: a clip-level transform no frame operator has."""
    if torch.rand((), generator=generator) < 0.5:
        return clip.flip(0)
    return None


@pytest.mark.parametrize("layout", ["TCHW", "CTHW"])
def test_a_function_last_gets_the_whole_clip_as_delivered(videos, layout):
    seen = []

    def record_and_invert(clip):
        seen.append((tuple(clip.shape), clip.dtype))
        return invert(clip)

    clip = video.Clip(4, sampler="spread", layout=layout)
    plain = clips(videos, clip=clip)
    got = clips(videos, ops.Python(record_and_invert), clip=clip)
    assert torch.equal(got, 255 - plain)
    shape = (4, 3, 32, 32) if layout == "TCHW" else (3, 4, 32, 32)
    assert set(seen) == {(shape, torch.uint8)}


def test_its_draws_are_the_samples_for_any_thread_count(videos):
    plain = clips(videos)
    one = clips(videos, ops.Python(reverse_in_time), threads=1)
    two = clips(videos, ops.Python(reverse_in_time), threads=2)
    assert torch.equal(one, two)
    reversed_ = [torch.equal(g, p.flip(0)) and not torch.equal(g, p) for g, p in zip(one, plain)]
    kept = [torch.equal(g, p) for g, p in zip(one, plain)]
    assert all(r or k for r, k in zip(reversed_, kept)) and any(reversed_) and any(kept)


def test_worker_processes_give_the_threads_clips_with_several_clips_a_sample(videos):
    clip = video.Clip(3, sampler="uniform", clips=2)
    threads = clips(videos, ops.Python(reverse_in_time), clip=clip)
    processes = clips(videos, ops.Python(reverse_in_time), clip=clip, workers="processes")
    assert threads.shape[1:] == (2, 3, 3, 32, 32)
    assert torch.equal(threads, processes)


def test_a_function_before_a_frame_operator_is_refused(videos):
    with pytest.raises(nostall.ConfigError, match="ops.Python goes last"):
        nostall.Loader(str(videos), pipeline=[video.Clip(4), ops.Resize(40), ops.Python(invert),
                                              ops.CenterCrop(32)])
