"""`pad_to_largest`: a detection batch cut to its largest image, with DETR's padding mask,
against DETR's `nested_tensor_from_tensor_list` and torchvision's
`GeneralizedRCNNTransform.batch_images` applied to v2's outputs of the same images with
the same draws, on the demo photographs."""

import gc
import math

import numpy as np
import pytest
import torch

import nostall
from nostall import ops

v2 = pytest.importorskip("torchvision.transforms.v2")
tv_tensors = pytest.importorskip("torchvision.tv_tensors")
from PIL import Image  # noqa: E402
from torchvision.models.detection.transform import GeneralizedRCNNTransform  # noqa: E402

# Twelve photographs of two shapes with boxes and polygon masks (`coco`), as the
# multi-scale tests build them.
from test_detection_multiscale import coco  # noqa: E402,F401


# DETR's util/misc.py (facebookresearch/detr), as it is written.

def _max_by_axis(the_list):
    maxes = the_list[0]
    for sublist in the_list[1:]:
        for index, item in enumerate(sublist):
            maxes[index] = max(maxes[index], item)
    return maxes


def nested_tensor_from_tensor_list(tensor_list):
    """DETR's batching: the tensor and its mask (its `NestedTensor`'s two members)."""
    max_size = _max_by_axis([list(img.shape) for img in tensor_list])
    batch_shape = [len(tensor_list)] + max_size
    b, c, h, w = batch_shape
    dtype = tensor_list[0].dtype
    device = tensor_list[0].device
    tensor = torch.zeros(batch_shape, dtype=dtype, device=device)
    mask = torch.ones((b, h, w), dtype=torch.bool, device=device)
    for img, pad_img, m in zip(tensor_list, tensor, mask):
        pad_img[: img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)
        m[: img.shape[1], : img.shape[2]] = False
    return tensor, mask


def batch_images(images, size_divisible=32):
    """torchvision's `GeneralizedRCNNTransform.batch_images`, called as its model does."""
    transform = GeneralizedRCNNTransform(800, 1333, [0.0] * 3, [1.0] * 3, size_divisible=size_divisible)
    return transform.batch_images(images, size_divisible=size_divisible)


def _batches(path, recipe, masks=False, field="target", **kwargs):
    kwargs.setdefault("dtype", "uint8")
    fields = {"image": "image", field: nostall.Field("coco", kind="boxes", masks=masks)}
    loader = nostall.Loader(str(path), pipeline=recipe, fields=fields, batch_size=4, shuffle=False, **kwargs)
    return list(loader)


def _v2s(path, meta, annotations, recipe):
    """v2's image of the source PNG through `recipe` (uint8 CHW)."""
    pixels = torch.from_numpy(np.array(Image.open(path.parent.parent / "val" / meta["file_name"]))).permute(2, 0, 1)
    mine = [a for a in annotations if a["image_id"] == meta["id"]]
    xyxy = torch.tensor([[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in mine)], dtype=torch.float32)
    sample = {"image": tv_tensors.Image(pixels),
              "boxes": tv_tensors.BoundingBoxes(xyxy, format="XYXY", canvas_size=pixels.shape[-2:])}
    return v2.Compose(recipe)(sample)["image"].as_subclass(torch.Tensor)


@pytest.mark.parametrize("dtype,layout", [("uint8", "CHW"), ("float32", "CHW"), ("uint8", "HWC")])
@pytest.mark.parametrize("flip", [0.0, 1.0])
def test_the_batch_is_detrs_nested_tensor_and_torchvisions_batch_of_v2s_images(coco, flip, dtype, layout):
    """One draw each (a single shorter side, a flip of probability 0 or 1), so that v2
    makes the same images: the batch at its largest height and width (DETR), or those
    rounded up to 32 (torchvision), its mask True past each image."""
    path, images, annotations = coco
    recipe = [v2.RandomShortestSize(min_size=200, max_size=1000), v2.RandomHorizontalFlip(p=flip)]
    theirs = [_v2s(path, meta, annotations, recipe) for meta in images]
    scale = 255.0 if dtype == "float32" else 1.0
    for multiple in (1, 32):
        batches = _batches(path, v2.Compose(recipe), dtype=dtype, layout=layout, pad_to_largest=multiple)
        assert len(batches) == 3
        for b, batch in enumerate(batches):
            mine = theirs[4 * b : 4 * b + 4]
            image = batch["image"] if layout == "CHW" else batch["image"].permute(0, 3, 1, 2)
            assert image.dtype == getattr(torch, dtype)
            if multiple == 1:
                expected, mask = nested_tensor_from_tensor_list(mine)
                assert torch.equal(batch["padding_mask"], mask)
            else:
                expected = batch_images(mine, size_divisible=32)
                assert all(math.ceil(side / 32) * 32 == side for side in image.shape[-2:])
            assert image.shape == expected.shape, (image.shape, expected.shape)
            assert batch["padding_mask"].shape == (4, *image.shape[-2:]) and batch["padding_mask"].dtype == torch.bool
            # Resampled by nostall and by v2: a level apart at most (as test_detection_multiscale).
            diff = (image.float() * scale - expected.float()).abs()
            assert diff.max() <= 1.0 + 1e-3, diff.max()
            # The padding is the canvas's fill (0), and the mask says where it is.
            assert not image.permute(1, 0, 2, 3)[:, batch["padding_mask"]].any()
            for target, sample, m in zip(batch["target"], mine, batch["padding_mask"]):
                height, width = target["size"].tolist()
                assert (height, width) == tuple(sample.shape[-2:])
                assert not m[:height, :width].any() and m[height:].all() and m[:, width:].all()


def test_the_cut_is_a_view_of_the_canvas_batch_and_masks_are_cut_alike(coco):
    """The DETR recipe (its first choice pinned, so that the sizes differ by shape): the
    padded batch is the canvas batch's top left, the boxes field's instance masks too,
    and DETR's nested tensor of the canvas batch's images cut to their sizes."""
    path, images, _ = coco
    recipe = [ops.RandomHorizontalFlip(),
              ops.RandomChoice([ops.DetrRandomResize([480, 512, 544], max_size=800),
                                ops.Compose([ops.DetrRandomResize([400]), ops.RandomSizeCrop(384, 600),
                                             ops.DetrRandomResize([480, 512, 544], max_size=800)])])]
    canvas = _batches(path, recipe, masks=True, seed=3)
    padded = _batches(path, recipe, masks=True, seed=3, pad_to_largest=1)
    sizes = set()
    for whole, cut in zip(canvas, padded):
        assert whole["image"].shape[-2:] == (800, 800)
        own = [image[:, :h, :w] for image, (h, w) in zip(whole["image"], (t["size"].tolist() for t in whole["target"]))]
        expected, mask = nested_tensor_from_tensor_list(own)
        assert torch.equal(cut["image"], expected) and torch.equal(cut["padding_mask"], mask)
        height, width = cut["image"].shape[-2:]
        assert cut["image"].shape[-2:] != (800, 800)
        for a, b in zip(whole["target"], cut["target"]):
            sizes.add(tuple(a["size"].tolist()))
            assert torch.equal(a["boxes"], b["boxes"]) and torch.equal(a["size"], b["size"])
            assert b["masks"].shape == (len(b["labels"]), height, width)
            assert torch.equal(b["masks"], a["masks"][:, :height, :width])
            # Nothing of a mask was past the batch's extent.
            assert a["masks"].sum() == b["masks"].sum() > 0
    assert len(sizes) > 2


def test_padded_boxes_fields_packed_masks_and_numpy_are_cut(coco):
    path, _, _ = coco
    recipe = [ops.RandomShortestSize(min_size=[160, 200], max_size=400)]
    fields = {"image": "image", "target": nostall.Field("coco", kind="boxes", masks="bits", padded=True)}
    whole = next(iter(nostall.Loader(str(path), pipeline=recipe, fields=fields, batch_size=4, shuffle=False,
                                     dtype="uint8", output="numpy")))
    cut = next(iter(nostall.Loader(str(path), pipeline=recipe, fields=fields, batch_size=4, shuffle=False,
                                   dtype="uint8", output="numpy", pad_to_largest=8)))
    height, width = cut["image"].shape[-2:]
    sizes = whole["target"]["size"]
    assert (height, width) == tuple(-(-sizes.max(0) // 8) * 8)
    masks = cut["target"]["masks"]
    assert masks.shape[-2:] == (height, -(-width // 8))
    assert np.array_equal(masks, whole["target"]["masks"][..., :height, : -(-width // 8)])
    assert isinstance(cut["padding_mask"], np.ndarray) and cut["padding_mask"].dtype == bool
    rows = np.arange(height)[None, :, None] >= sizes[:, 0, None, None]
    cols = np.arange(width)[None, None, :] >= sizes[:, 1, None, None]
    assert np.array_equal(cut["padding_mask"], rows | cols)


def test_the_same_bytes_for_1_2_and_4_threads(coco):
    path, _, _ = coco
    recipe = [ops.RandomShortestSize(min_size=[200, 240, 280], max_size=480), ops.RandomHorizontalFlip()]
    runs = [_batches(path, recipe, masks=True, seed=5, threads=threads, pad_to_largest=32) for threads in (1, 2, 4)]
    shapes = set()
    first, *others = runs
    for other in others:
        assert len(other) == len(first)
        for one, two in zip(first, other):
            shapes.add(one["image"].shape)
            assert torch.equal(one["image"], two["image"]) and torch.equal(one["padding_mask"], two["padding_mask"])
            for a, b in zip(one["target"], two["target"]):
                assert all(torch.equal(a[key], b[key]) for key in ("boxes", "labels", "size", "masks"))
    # The draws give batches of more than one extent.
    assert len(shapes) > 1


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
def test_on_a_device_with_the_cpu_standing_in_the_batch_is_the_hosts(coco, layout, monkeypatch):
    """``device=``: the engine leaves channels-last bytes, the batch is split and cut on
    the device, then finished there in the asked layout and type: as on the host."""
    import warnings

    from nostall import _device

    path, _, _ = coco
    stager = _device.Stager
    monkeypatch.setattr(_device, "resolve", lambda device: 0)
    monkeypatch.setattr(_device, "Stager", lambda index, finish, queue=None: stager("cpu", finish, queue))
    recipe = [ops.RandomShortestSize(min_size=[200, 240], max_size=400), ops.RandomHorizontalFlip()]
    kwargs = dict(masks=True, seed=2, layout=layout, dtype="float32", pad_to_largest=32)
    host = _batches(path, recipe, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no CUDA runtime here to page-lock the buffers
        staged = _batches(path, recipe, device="cuda", decode="cpu", **kwargs)
    for a, b in zip(host, staged, strict=True):
        assert a["image"].shape == b["image"].shape
        # The device converts as `x * scale + shift`, the engine in its own order: within 1e-6.
        torch.testing.assert_close(a["image"], b["image"], atol=1e-6, rtol=0)
        assert torch.equal(a["padding_mask"], b["padding_mask"])
        for x, y in zip(a["target"], b["target"]):
            assert torch.equal(x["masks"], y["masks"])
    del host, staged
    gc.collect()


def test_a_group_through_the_node_agent_gets_the_batch_cut_as_its_own(coco, tmp_path, monkeypatch):
    """``share="auto"``: the agent prepares the canvas batch, each member cuts it as a
    loader of its own does."""
    import nostall.agent

    path, _, _ = coco
    socket = tmp_path / "run" / "agent.sock"
    monkeypatch.setenv("NOSTALL_AGENT_SOCKET", str(socket))
    proc = nostall.agent.start(socket, staging="1", lease=60, idle=600)
    try:
        recipe = [ops.RandomShortestSize(min_size=[200, 240], max_size=400), ops.RandomHorizontalFlip()]
        kwargs = dict(masks=True, seed=4, threads=2, pad_to_largest=32)
        own = _batches(path, recipe, **kwargs)
        fields = {"image": "image", "target": nostall.Field("coco", kind="boxes", masks=True)}
        member = nostall.Loader(str(path), pipeline=recipe, fields=fields, batch_size=4, shuffle=False,
                                dtype="uint8", seed=4, threads=2, pad_to_largest=32, share="auto")
        shared = list(member)
        assert member.metrics["shared"]["batches_from_group"] == len(own)
        for a, b in zip(own, shared, strict=True):
            assert torch.equal(a["image"], b["image"]) and torch.equal(a["padding_mask"], b["padding_mask"])
            for x, y in zip(a["target"], b["target"]):
                assert torch.equal(x["masks"], y["masks"])
        del shared, member
        gc.collect()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_what_cannot_be_cut_is_refused(coco):
    path, _, _ = coco
    canvas = [ops.RandomShortestSize(min_size=200, max_size=400)]
    with pytest.raises(nostall.ConfigError, match="every image of this pipeline has the same size"):
        _batches(path, [ops.Resize((300, 300))], pad_to_largest=1)
    # A canvas that pads every image to one size is not the batch's.
    with pytest.raises(nostall.ConfigError, match="every image of this pipeline has the same size"):
        _batches(path, [ops.Resize(200), ops.FixedSizeCrop(320)], pad_to_largest=1)
    with pytest.raises(nostall.ConfigError, match="boxes field"):
        nostall.Loader(str(path), pipeline=canvas, fields={"image": "image"}, pad_to_largest=1)
    with pytest.raises(nostall.ConfigError, match="at least 1"):
        _batches(path, canvas, pad_to_largest=0)
    with pytest.raises(nostall.ConfigError, match="padding_mask"):
        _batches(path, canvas, field="padding_mask", pad_to_largest=1)
