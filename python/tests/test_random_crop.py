"""RandomCrop against torchvision.transforms.v2 on real photographs: every crop is a window
of the image (exact pixels), its place drawn per sample, the same for any thread count;
torchvision's RandomCrop translates to it, and its padding is refused."""

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


def test_torchvision_random_crop_translates_and_its_padding_is_refused():
    assert ops.from_torchvision(v2.RandomCrop(32)) == [ops.RandomCrop(32)]
    assert ops.from_torchvision(v2.RandomCrop((24, 32))) == [ops.RandomCrop((24, 32))]
    with pytest.raises(nostall.ConfigError, match="padding"):
        ops.from_torchvision(v2.RandomCrop(32, padding=4))
    with pytest.raises(nostall.ConfigError, match="pad_if_needed"):
        ops.from_torchvision(v2.RandomCrop(32, pad_if_needed=True))
    with pytest.raises(nostall.ConfigError, match="size"):
        ops.RandomCrop(0)
