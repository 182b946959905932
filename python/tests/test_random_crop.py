"""RandomCrop, CenterCrop and Pad against torchvision.transforms.v2 on real photographs:
every crop is a window of the image, padded as v2 pads it where asked or where the crop is
larger (exact pixels), its place drawn per sample, the same for any thread count;
torchvision's RandomCrop and Pad translate to them, and the padding modes that repeat the
image's edge are refused."""

import pytest
import torch
from torchvision.transforms import v2

import nostall
from nostall import ops
from parity import COUNT, nostall_images, reference_images

SIZE = 96
CROP = (40, 56)


@pytest.fixture(scope="module")
def pngs(square_pngs):
    return square_pngs(SIZE)


def place(window, image):
    """(top, left) of `window` in `image`, or None."""
    h, w = window.shape[-2:]
    for top in range(image.shape[-2] - h + 1):
        for left in range(image.shape[-1] - w + 1):
            if torch.equal(image[:, top:top + h, left:left + w], window):
                return top, left
    return None


def test_each_crop_is_a_window_of_its_image_placed_by_its_own_draw(pngs):
    originals = reference_images(pngs)
    crops = nostall_images(pngs, ops.RandomCrop(CROP), threads=1)
    assert crops.shape[1:] == (3, *CROP)
    places = [place(c, o) for c, o in zip(crops, originals)]
    assert None not in places
    assert len(set(places)) > COUNT // 2, places  # 32 draws over 57 × 41 places
    for threads in (2, 4):
        assert torch.equal(nostall_images(pngs, ops.RandomCrop(CROP), threads=threads), crops)
    assert not torch.equal(nostall_images(pngs, ops.RandomCrop(CROP), seed=1), crops)


def test_the_whole_image_is_the_only_place_of_a_crop_of_its_size(pngs):
    assert torch.equal(nostall_images(pngs, ops.RandomCrop(SIZE)), reference_images(pngs))
    # As torchvision's with every draw fixed: the crop equals v2's at the one place.
    assert torch.equal(nostall_images(pngs, ops.RandomCrop(SIZE)),
                       reference_images(pngs, v2.RandomCrop(SIZE)))


def test_a_padded_crop_is_a_window_of_the_image_v2_pads(pngs):
    fill = (10, 20, 30)
    padded = [v2.functional.pad(o, [1, 2, 3, 4], fill=list(fill)) for o in reference_images(pngs)]
    # Windows 2 short of the padded image each way: each holds padding on two sides at least.
    crop = (SIZE + 4, SIZE + 2)
    crops = nostall_images(pngs, ops.RandomCrop(crop, padding=[1, 2, 3, 4], fill=fill))
    places = [place(c, p) for c, p in zip(crops, padded)]
    assert None not in places and len(set(places)) > 3, places
    # One place only: the whole padded image, v2's too.
    whole = (SIZE + 6, SIZE + 4)
    assert torch.equal(nostall_images(pngs, ops.RandomCrop(whole, padding=[1, 2, 3, 4], fill=fill)),
                       torch.stack(padded))
    assert torch.equal(nostall_images(pngs, ops.RandomCrop(SIZE + 8, padding=4)),
                       reference_images(pngs, v2.RandomCrop(SIZE + 8, padding=4)))


def test_pad_if_needed_pads_both_sides_of_a_short_dimension_by_the_shortfall(pngs):
    # v2 pads each side by the shortfall (10), so the window has 11 places across.
    crop = (SIZE + 10, SIZE)
    padded = [v2.functional.pad(o, [0, 10, 0, 10]) for o in reference_images(pngs)]
    crops = nostall_images(pngs, ops.RandomCrop(crop, pad_if_needed=True))
    assert crops.shape[2:] == crop
    places = [place(c, p) for c, p in zip(crops, padded)]
    assert None not in places and {left for _, left in places} == {0}
    assert len({top for top, _ in places}) > 3, places


def test_pad_is_v2s_pad_on_every_photograph(pngs):
    for padding, fill in ((3, 0), ([1, 2], 7), ([4, 0, 2, 5], (10, 20, 30))):
        got = nostall_images(pngs, ops.Pad(padding, fill=fill), ops.CenterCrop(SIZE))
        want = reference_images(pngs, v2.Compose([v2.Pad(padding, fill=fill), v2.CenterCrop(SIZE)]))
        assert torch.equal(got, want), (padding, fill)


def test_a_center_crop_larger_than_the_image_pads_it_with_zeros_as_v2(pngs):
    # Larger both ways (an odd shortfall: the extra pixel after), one way, and within.
    for size in (SIZE + 7, (SIZE + 10, SIZE - 20), (SIZE - 20, SIZE + 3)):
        got = nostall_images(pngs, ops.CenterCrop(size))
        assert torch.equal(got, reference_images(pngs, v2.CenterCrop(size))), size


def test_torchvision_random_crop_and_pad_translate_and_other_padding_modes_are_refused():
    from torchvision import transforms as v1

    assert ops.from_torchvision(v2.RandomCrop(32)) == [ops.RandomCrop(32)]
    assert ops.from_torchvision(v2.RandomCrop((24, 32))) == [ops.RandomCrop((24, 32))]
    assert ops.from_torchvision(v2.RandomCrop(32, padding=4)) == [ops.RandomCrop(32, padding=4)]
    # v2 keeps left, right, top, bottom; v1 keeps what it was given.
    for library in (v1, v2):
        assert ops.from_torchvision(library.RandomCrop(32, padding=[1, 2, 3, 4], fill=5)) == [
            ops.RandomCrop(32, padding=[1, 2, 3, 4], fill=5)], library
        assert ops.from_torchvision(library.Pad([1, 2], fill=3)) == [ops.Pad([1, 2], fill=3)], library
    assert ops.from_torchvision(v2.RandomCrop(32, pad_if_needed=True)) == [
        ops.RandomCrop(32, pad_if_needed=True)]
    for refused in (v2.RandomCrop(32, padding=4, padding_mode="reflect"), v2.Pad(2, padding_mode="edge")):
        with pytest.raises(nostall.ConfigError, match="not supported"):
            ops.from_torchvision(refused)
    with pytest.raises(nostall.ConfigError, match="size"):
        ops.RandomCrop(0)
    with pytest.raises(nostall.ConfigError, match="padding"):
        ops.Pad([1, 2, 3])
