"""Several views of each image (DINO's multi-crop, SimCLR's pairs): `pipeline=` a list of
pipelines, the batch a tuple of one tensor a view, each view its own draws, the image
decoded once."""

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

import nostall
from nostall import ops

NORMALIZE = ops.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def dino(size, scale, blur_p, solarize_p=0.0):
    """One of DINO's views: its crop, flip, colour jitter with p 0.8, grayscale 0.2, blur."""
    return [
        ops.RandomResizedCrop(size, scale=scale, interpolation="bicubic"),
        ops.RandomHorizontalFlip(),
        ops.RandomApply([ops.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
        ops.RandomGrayscale(p=0.2),
        ops.RandomApply([ops.GaussianBlur(9, sigma=(0.1, 2.0))], p=blur_p),
        ops.RandomSolarize(128, p=solarize_p),
        NORMALIZE,
    ]


def multi_crop(local=4):
    return [dino(64, (0.4, 1.0), 1.0), dino(64, (0.4, 1.0), 0.1, 0.2)] + [dino(32, (0.05, 0.4), 0.5)] * local


def batches(photos, pipeline, **kwargs):
    kwargs = dict(dict(batch_size=8, seed=5, threads=2, shuffle=False), **kwargs)
    loader = nostall.Loader(photos, pipeline=pipeline, **kwargs)
    return [(tuple(v.clone() for v in views) if isinstance(views, tuple) else views.clone(), labels.clone())
            for views, labels in loader]


def test_the_batch_is_a_tuple_of_one_tensor_a_view(photos):
    views, labels = next(iter(nostall.Loader(photos, batch_size=8, pipeline=multi_crop(), threads=2)))
    assert isinstance(views, tuple) and len(views) == 6
    assert [tuple(v.shape) for v in views] == [(8, 3, 64, 64)] * 2 + [(8, 3, 32, 32)] * 4
    assert all(v.dtype == torch.float32 for v in views) and labels.shape == (8,)
    # Views of one buffer: no copy was made to split them.
    assert views[1].data_ptr() - views[0].data_ptr() == 3 * 64 * 64 * 4
    # Every view its own draws: no two views of a sample alike, though four share a recipe.
    for i in range(len(views)):
        for j in range(i + 1, len(views)):
            if views[i].shape == views[j].shape:
                assert not torch.equal(views[i], views[j]), (i, j)


def test_views_of_one_shape_stack_view_major_without_a_copy(photos):
    """``stack_views=True``: DINO's global crops as one tensor, its local ones as another,
    each ``[views, batch, *shape]``, the same values as the views one by one."""
    one_by_one = batches(photos, multi_crop())
    stacked = batches(photos, multi_crop(), stack_views=True)
    for (views, labels), (groups, stacked_labels) in zip(one_by_one, stacked, strict=True):
        assert torch.equal(labels, stacked_labels)
        assert [tuple(g.shape) for g in groups] == [(2, 8, 3, 64, 64), (4, 8, 3, 32, 32)]
        assert torch.equal(groups[0], torch.stack(views[:2]))
        assert torch.equal(groups[1], torch.stack(views[2:]))
        # DINO's MultiCropWrapper concatenates the crops of one size: flatten(0, 1).
        assert torch.equal(groups[1].flatten(0, 1), torch.cat(views[2:]))
    groups, _ = next(iter(nostall.Loader(photos, batch_size=8, pipeline=multi_crop(), stack_views=True)))
    # Still views of the batch's buffer: the second global crop of sample 0 sits right
    # after the first.
    assert groups[0][1].data_ptr() - groups[0][0].data_ptr() == 3 * 64 * 64 * 4
    with pytest.raises(nostall.ConfigError, match="list of pipelines"):
        nostall.Loader(photos, batch_size=8, stack_views=True)


def test_the_same_batches_for_any_number_of_threads(photos):
    one = batches(photos, multi_crop(), threads=1)
    for threads in (2, 4):
        got = batches(photos, multi_crop(), threads=threads)
        assert len(got) == len(one)
        for (views, labels), (want, want_labels) in zip(got, one):
            assert torch.equal(labels, want_labels)
            assert all(torch.equal(a, b) for a, b in zip(views, want)), threads
    other = batches(photos, multi_crop(), threads=2, seed=6)
    assert not torch.equal(other[0][0][0], one[0][0][0])


def test_a_view_is_what_its_pipeline_makes_alone_when_it_needs_the_most(photos):
    """Decoded once for every view, at the scale the most demanding needs and over the
    region holding them all: the view that needs the most, where the region is its own, is
    byte for byte what its pipeline makes alone; a view that needs less is resized from
    more pixels than alone, so it differs, by little."""
    def compare(views, view):
        both = torch.cat([b[0][view] for b in batches(photos, views, dtype="uint8")])
        alone = torch.cat([b[0] for b in batches(photos, views[view], dtype="uint8")])
        diff = (both.int() - alone.int()).abs().float()
        return diff.mean().item(), (diff > 0).float().mean().item()

    big = [ops.Resize(64), ops.CenterCrop(64)]
    # The second view's region lies within the first's: the first is exact, and so is the
    # second, which needs no more resolution than its own.
    assert compare([big, [ops.Resize(64), ops.CenterCrop(32)]], 0) == (0.0, 0.0)
    assert compare([big, [ops.Resize(64), ops.CenterCrop(32)]], 1) == (0.0, 0.0)
    # Centre crops of other sizes round their edges apart by a source pixel or so: the
    # region read grows by that much (measured: 0.27% of values changed, at the edges).
    small = [ops.Resize(24), ops.CenterCrop(24)]
    mean, changed = compare([big, small], 0)
    assert changed < 0.01, changed
    # The small view, resized from the big view's decoding (measured: 0.63 level).
    mean, changed = compare([big, small], 1)
    assert mean < 1.5, mean


def test_resume_mid_epoch_gives_the_same_views(photos):
    kwargs = dict(batch_size=4, seed=3, pipeline=multi_crop(2), threads=2)
    reference = nostall.Loader(photos, **kwargs)
    reference.set_epoch(1)
    expected = [tuple(v.clone() for v in views) for views, _ in reference]
    loader = nostall.Loader(photos, **kwargs)
    loader.set_epoch(1)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    del loader, it
    resumed = nostall.Loader(photos, **kwargs)
    resumed.load_state_dict(state)
    rest = [tuple(v.clone() for v in views) for views, _ in resumed]
    assert len(rest) == len(expected) - 3
    for got, want in zip(rest, expected[3:]):
        assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_numpy_views_and_torchvision_recipes_as_views(photos):
    recipe = v2.Compose([v2.RandomResizedCrop(48), v2.RandomHorizontalFlip(), v2.PILToTensor()])
    loader = nostall.Loader(photos, batch_size=4, pipeline=[recipe, recipe], output="numpy", dtype="uint8")
    views, labels = next(iter(loader))
    assert len(views) == 2 and all(np.asarray(v).shape == (4, 3, 48, 48) for v in views)
    assert np.asarray(views[0]).base is not None  # a view of the batch's array


@pytest.mark.parametrize("kwargs,says", [
    (dict(output="dlpack"), "output"),
    (dict(mix=nostall.Mixup(num_classes=4)), "Mixup"),
    (dict(image_size=64), "image_size"),
], ids=["dlpack", "mixup", "image_size"])
def test_what_views_do_not_take_is_a_config_error(photos, kwargs, says):
    with pytest.raises(nostall.ConfigError, match=says):
        nostall.Loader(photos, batch_size=4, pipeline=multi_crop(1), **kwargs)


def test_views_travel_as_text(photos):
    text = "[[Resize(40), CenterCrop(32)], [RandomResizedCrop(16)]]"
    views, _ = next(iter(nostall.Loader(photos, batch_size=4, pipeline=text)))
    assert [tuple(v.shape) for v in views] == [(4, 3, 32, 32), (4, 3, 16, 16)]
