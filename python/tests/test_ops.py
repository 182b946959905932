"""Operator lists: nostall.ops, the presets as objects, uint8 and HWC output, errors."""

import numpy as np
import pytest
import torch

import nostall
from nostall import ops

N_ALL = 32  # the demo photographs, in one batch
IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def epoch(loader):
    """Every batch of the next epoch: (ids, labels, images) as NumPy copies."""
    return [(list(loader.last_ids), np.array(y), np.array(x)) for x, y in loader]


def assert_same_epochs(a, b):
    assert len(a) == len(b) > 0
    for (ids_a, ya, xa), (ids_b, yb, xb) in zip(a, b):
        assert ids_a == ids_b
        np.testing.assert_array_equal(ya, yb)
        np.testing.assert_array_equal(xa, xb)


def test_operators_keep_their_arguments_and_compare_by_value():
    crop = ops.RandomResizedCrop(224)
    assert crop.size == (224, 224) and crop.scale == (0.08, 1.0)
    assert crop.ratio == pytest.approx((3 / 4, 4 / 3))
    assert ops.RandomResizedCrop((32, 48), scale=(0.5, 1.0)).size == (32, 48)
    assert ops.Resize(256).size == 256  # the shorter side
    assert ops.Resize((20, 30)).size == (20, 30)  # exactly
    assert ops.Resize([20, 30]) == ops.Resize((20, 30))
    assert ops.CenterCrop(224).size == (224, 224)
    assert ops.RandomHorizontalFlip().p == 0.5
    norm = ops.Normalize(**IMAGENET)
    assert norm.mean == pytest.approx(IMAGENET["mean"]) and norm.std == pytest.approx(IMAGENET["std"])
    assert ops.RandomHorizontalFlip(0.3) == ops.RandomHorizontalFlip(0.3)
    assert ops.RandomHorizontalFlip(0.3) != ops.RandomHorizontalFlip(0.5)
    assert ops.Resize(32) != ops.CenterCrop(32) and ops.Resize(32) != 32
    for op in [crop, ops.Resize(256), ops.Resize((20, 30)), ops.CenterCrop((5, 7)),
               ops.RandomHorizontalFlip(0.25), norm]:
        assert isinstance(op, ops.Op)
        assert type(op).__module__ == "nostall.ops"
        assert eval(repr(op), vars(ops)) == op, repr(op)  # repr reads back as the same operator


def test_the_stubs_are_written_from_the_engines_declarations():
    import pathlib
    import sys

    python_dir = pathlib.Path(__file__).parents[1]
    sys.path.insert(0, str(python_dir))
    try:
        import write_ops_stub
    finally:
        sys.path.remove(str(python_dir))
    assert write_ops_stub.STUB.read_text() == write_ops_stub.render(), (
        "nostall/ops.pyi differs from the engine's declarations: run python python/write_ops_stub.py")


def test_every_operator_class_comes_from_its_declaration():
    import inspect
    import pickle

    from nostall._nostall import _image_operators

    for name, _doc, params in _image_operators():
        cls = getattr(ops, name)
        assert issubclass(cls, ops.Op) and cls.__module__ == "nostall.ops" and name in ops.__all__
        assert [p for p in inspect.signature(cls).parameters] == [p[0] for p in params]
        for param, *_ in params:
            assert param in cls.__doc__ and isinstance(cls.__dict__[param], property)
    solarize = ops.RandomSolarize(threshold=100, p=0.25)
    assert (solarize.threshold, solarize.p) == (100.0, 0.25)
    assert pickle.loads(pickle.dumps(solarize)) == solarize
    assert hash(ops.RandomPosterize(4)) == hash(ops.RandomPosterize(bits=4, p=0.5))
    with pytest.raises(nostall.ConfigError, match="RandomSolarize: threshold 300"):
        ops.RandomSolarize(300)
    with pytest.raises(nostall.ConfigError, match="RandomPosterize has no parameter .level."):
        ops.RandomPosterize(level=3)
    with pytest.raises(nostall.ConfigError, match="RandomGrayscale needs|takes at most"):
        ops.RandomGrayscale(0.1, 0.2)
    with pytest.raises(TypeError, match="not an argument an operator takes"):
        ops.RandomInvert(p=object())


def test_presets_are_operator_lists():
    assert nostall.imagenet_train(96) == [
        ops.RandomResizedCrop(96), ops.RandomHorizontalFlip(), ops.Normalize(**IMAGENET)]
    assert nostall.imagenet_val() == [ops.Resize(256), ops.CenterCrop(224), ops.Normalize(**IMAGENET)]


def test_operator_lists_give_the_presets_batches(photos):
    common = dict(batch_size=8, seed=4, output="numpy")
    for name, preset in [("train", nostall.imagenet_train), ("val", nostall.imagenet_val)]:
        by_name = epoch(nostall.Loader(photos, pipeline=name, image_size=40, **common))
        as_objects = epoch(nostall.Loader(photos, pipeline=preset(40), **common))
        assert by_name[0][2].shape == (8, 3, 40, 40) and by_name[0][2].dtype == np.float32
        assert_same_epochs(by_name, as_objects)
    spelled_out = [ops.RandomResizedCrop(40), ops.RandomHorizontalFlip(), ops.Normalize(**IMAGENET)]
    assert_same_epochs(epoch(nostall.Loader(photos, pipeline="train", image_size=40, **common)),
                       epoch(nostall.Loader(photos, pipeline=spelled_out, **common)))
    # A tuple (any iterable) of operators works as well as a list.
    assert_same_epochs(epoch(nostall.Loader(photos, pipeline=tuple(spelled_out), **common)),
                       epoch(nostall.Loader(photos, pipeline=spelled_out, **common)))
    # And the list as text, as Python writes it, or as a person would.
    assert_same_epochs(epoch(nostall.Loader(photos, pipeline=repr(spelled_out), **common)),
                       epoch(nostall.Loader(photos, pipeline=spelled_out, **common)))
    by_hand = "RandomResizedCrop(40), RandomHorizontalFlip(), Normalize(mean=%r, std=%r)" % (
        IMAGENET["mean"], IMAGENET["std"])
    assert_same_epochs(epoch(nostall.Loader(photos, pipeline=by_hand, **common)),
                       epoch(nostall.Loader(photos, pipeline=spelled_out, **common)))


def test_an_operator_list_changes_the_output(photos):
    pipeline = [ops.Resize(48), ops.CenterCrop((24, 40)), ops.RandomHorizontalFlip(1.0)]
    loader = nostall.Loader(photos, batch_size=N_ALL, shuffle=False, pipeline=pipeline, output="numpy")
    flipped, _ = next(iter(loader))
    assert flipped.shape == (N_ALL, 3, 24, 40)
    # Without Normalize, float32 is the pixel / 255, in [0, 1].
    assert 0.0 <= flipped.min() and flipped.max() <= 1.0
    unflipped, _ = next(iter(nostall.Loader(photos, batch_size=N_ALL, shuffle=False, output="numpy",
                                            pipeline=[ops.Resize(48), ops.CenterCrop((24, 40))])))
    np.testing.assert_array_equal(flipped, unflipped[..., ::-1])


def test_uint8_and_hwc_hold_the_same_pixels(photos):
    geometry = [ops.Resize(40), ops.CenterCrop(32)]

    def images(**kwargs):
        loader = nostall.Loader(photos, batch_size=N_ALL, shuffle=False, pipeline=geometry,
                                output="numpy", **kwargs)
        x, _ = next(iter(loader))
        return x

    u8_chw = images(dtype="uint8")
    assert u8_chw.dtype == np.uint8 and u8_chw.shape == (N_ALL, 3, 32, 32)
    assert u8_chw.max() > 200 and u8_chw.min() < 50  # real pixels, 0-255
    u8_hwc = images(dtype="uint8", layout="HWC")
    assert u8_hwc.shape == (N_ALL, 32, 32, 3)
    np.testing.assert_array_equal(u8_hwc, u8_chw.transpose(0, 2, 3, 1))
    f32_chw = images()
    np.testing.assert_array_equal(f32_chw, u8_chw.astype(np.float32) / 255)
    f32_hwc = images(dtype="float32", layout="HWC")
    assert f32_hwc.dtype == np.float32 and f32_hwc.shape == (N_ALL, 32, 32, 3)
    np.testing.assert_array_equal(f32_hwc, f32_chw.transpose(0, 2, 3, 1))


def test_uint8_tensors_share_the_loader_buffer_no_copy(photos):
    pipeline = [ops.RandomResizedCrop(32), ops.RandomHorizontalFlip()]
    loader = nostall.Loader(photos, batch_size=8, pipeline=pipeline, dtype="uint8", layout="HWC",
                            output="dlpack")
    images, labels = next(batches := iter(loader))
    assert images.shape == [8, 32, 32, 3] and images.dtype == "uint8"
    address = images.data_ptr
    t = torch.from_dlpack(images)
    assert t.dtype == torch.uint8 and t.shape == (8, 32, 32, 3) and t.is_contiguous()
    assert t.data_ptr() == address  # torch's tensor is the loader's buffer
    images2, _ = next(batches)
    a = np.from_dlpack(images2)
    assert a.dtype == np.uint8 and a.ctypes.data == images2.data_ptr
    # Torch output: uint8 tensors too; a freed tensor's buffer goes back to the pool.
    loader = nostall.Loader(photos, batch_size=8, pipeline=pipeline, dtype="uint8", prefetch=2)
    for _ in range(3):
        for images, _ in loader:
            assert images.dtype == torch.uint8 and images.shape == (8, 3, 32, 32)
    assert loader.buffers_allocated <= 2 + 2 + 1 + 1


def test_pipeline_errors_say_what_to_change(photos):
    with pytest.raises(nostall.ConfigError, match="leave Normalize out"):
        nostall.Loader(photos, dtype="uint8")  # the "train" preset normalises
    with pytest.raises(nostall.ConfigError, match="Normalize needs f32"):
        nostall.Loader(photos, pipeline=[ops.RandomResizedCrop(8), ops.Normalize(**IMAGENET)],
                       dtype="uint8")
    with pytest.raises(nostall.ConfigError, match='"float32" or "uint8"'):
        nostall.Loader(photos, dtype="float16")
    with pytest.raises(nostall.ConfigError, match='"CHW"'):
        nostall.Loader(photos, layout="NCHW")
    with pytest.raises(nostall.ConfigError, match="give the sizes to the operators"):
        nostall.Loader(photos, pipeline=[ops.CenterCrop(8)], image_size=8)
    with pytest.raises(nostall.ConfigError, match="output size varies"):
        nostall.Loader(photos, pipeline=[ops.Resize(64)])
    with pytest.raises(nostall.ConfigError, match="output size varies"):
        nostall.Loader(photos, pipeline=[])
    with pytest.raises(nostall.ConfigError, match="twice"):
        nostall.Loader(photos, pipeline=[ops.CenterCrop(8), ops.Normalize(**IMAGENET),
                                         ops.Normalize(**IMAGENET)])
    with pytest.raises(TypeError, match=r"pipeline\[1\] is 'flip', not an operator: build the list "
                       r"from nostall.ops"):
        nostall.Loader(photos, pipeline=[ops.CenterCrop(8), "flip"])
    with pytest.raises(nostall.ConfigError, match="more pixels than an image may"):
        nostall.Loader(photos, pipeline=[ops.CenterCrop((4294967295, 4294967295))], dtype="uint8")
    with pytest.raises(nostall.ConfigError, match="16 GiB a batch may"):
        nostall.Loader(photos, pipeline=[ops.CenterCrop(10_000)], dtype="uint8", batch_size=1024)
    with pytest.raises(nostall.ConfigError, match=r'unknown operator "Blur"'):
        nostall.Loader(photos, pipeline="[CenterCrop(8), Blur(3)]")
    with pytest.raises(nostall.ConfigError, match=r"at character 16: expected a comma"):
        nostall.Loader(photos, pipeline="[CenterCrop(8) Normalize()]")
    with pytest.raises(TypeError, match=r'pipeline takes a preset \("train", "val"'):
        nostall.Loader(photos, pipeline=5)


def test_operators_refuse_bad_arguments_when_made():
    with pytest.raises(nostall.ConfigError, match="at least 1"):
        ops.Resize(0)
    with pytest.raises(nostall.ConfigError, match="CenterCrop: size 0x8"):
        ops.CenterCrop((0, 8))
    with pytest.raises(nostall.ConfigError, match="scale"):
        ops.RandomResizedCrop(8, scale=(0.9, 0.1))
    with pytest.raises(nostall.ConfigError, match="ratio"):
        ops.RandomResizedCrop(8, ratio=(0.0, 1.0))
    with pytest.raises(nostall.ConfigError, match="probability"):
        ops.RandomHorizontalFlip(1.5)
    with pytest.raises(nostall.ConfigError, match="probability"):
        ops.RandomVerticalFlip(-0.1)
    with pytest.raises(nostall.ConfigError, match="positive"):
        ops.Normalize(mean=(0, 0, 0), std=(1, 0, 1))
    with pytest.raises(ValueError, match=r"mean takes a tuple of 3 numbers, not \(0.5, 0.5\)"):
        ops.Normalize(mean=(0.5, 0.5), std=(1, 1, 1))
    for bad in [-1, 2.5, "224", (1, 2, 3)]:
        with pytest.raises(nostall.ConfigError, match=r"size takes an int or a \(height, width\) pair"):
            ops.CenterCrop(bad)
    with pytest.raises(TypeError):
        ops.Op()  # only the subclasses make operators
