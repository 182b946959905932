"""The user's recipe taken as it is: torchvision (v1, v2) and timm transforms translated."""

import numpy as np
import pytest
import torch
import torchvision.transforms as v1
from torchvision.transforms import InterpolationMode, v2

import nostall
from nostall import ops

IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def test_torchvisions_reference_recipe_becomes_the_same_operators():
    recipe = v2.Compose([
        v2.RandomResizedCrop(176, interpolation=InterpolationMode.BILINEAR, antialias=True),
        v2.RandomHorizontalFlip(0.5),
        v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
        v2.RandomChoice([v2.RandomGrayscale(1.0), v2.RandomInvert(1.0)], p=[2, 1]),
        v2.GaussianBlur(23, sigma=(0.1, 2.0)),
        v2.RandomRotation(15), v2.RandomSolarize(128, p=0.2), v2.RandomPosterize(4),
        v2.RandomAutocontrast(), v2.RandomEqualize(), v2.RandomAdjustSharpness(2.0),
        v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(**IMAGENET),
        v2.RandomErasing(0.1, value="random"),
    ])
    assert ops.from_torchvision(recipe) == [
        ops.RandomResizedCrop(176), ops.RandomHorizontalFlip(0.5),
        ops.RandomApply([ops.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
        # v2 keeps the weights normalised.
        ops.RandomChoice([ops.RandomGrayscale(1.0), ops.RandomInvert(1.0)], p=[2 / 3, 1 / 3]),
        ops.GaussianBlur(23, sigma=(0.1, 2.0)),
        ops.RandomRotation(15), ops.RandomSolarize(128, p=0.2), ops.RandomPosterize(4),
        ops.RandomAutocontrast(), ops.RandomEqualize(), ops.RandomAdjustSharpness(2.0),
        ops.Normalize(**IMAGENET), ops.RandomErasing(0.1, value="random"),
    ]


def test_v1_and_timm_recipes_translate_too():
    recipe = v1.Compose([v1.Resize(256, interpolation=InterpolationMode.BICUBIC), v1.CenterCrop(224),
                         v1.ToTensor(), v1.Normalize(**IMAGENET)])
    assert ops.from_torchvision(recipe) == [ops.Resize(256, interpolation="bicubic"), ops.CenterCrop(224),
                                            ops.Normalize(**IMAGENET)]
    from timm.data import create_transform

    timm_recipe = create_transform(224, is_training=True, interpolation="bicubic", color_jitter=0.4)
    assert ops.from_torchvision(timm_recipe) == [
        ops.RandomResizedCrop(224, interpolation="bicubic"), ops.RandomHorizontalFlip(),
        ops.ColorJitter(0.4, 0.4, 0.4), ops.Normalize(**IMAGENET)]
    # timm's DeiT recipe: its RandAugment and erasing as timm's own operators.
    deit = create_transform(224, is_training=True, auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25,
                            re_mode="pixel", interpolation="bicubic")
    assert ops.from_torchvision(deit) == [
        ops.RandomResizedCrop(224, interpolation="bicubic"), ops.RandomHorizontalFlip(),
        ops.TimmRandAugment("rand-m9-n2-p0.5-mstd0.5-inc1", interpolation="bicubic", fill=(124, 116, 104)),
        ops.Normalize(**IMAGENET),
        ops.TimmRandomErasing(probability=0.25, mode="pixel", max_count=1)]
    # Without an interpolation hparam timm resamples at random, bilinear or bicubic.
    from timm.data.auto_augment import rand_augment_transform

    assert ops.from_torchvision(rand_augment_transform("rand-m7-n3-mstd101-tweights", {})) == [
        ops.TimmRandAugment("rand-m7-n3-p0.5-mstd101.0-tweights", interpolation="random", fill=128)]
    custom = rand_augment_transform("rand-m9", {}, transforms=["Rotate", "Equalize"])
    with pytest.raises(nostall.ConfigError, match="none of timm's named sets"):
        ops.from_torchvision(custom)


def test_a_loader_takes_the_recipe_and_gives_the_same_batches(photos):
    recipe = v2.Compose([v2.Resize(64), v2.CenterCrop(48), v2.RandomHorizontalFlip(), v2.ToImage(),
                         v2.ToDtype(torch.float32, scale=True), v2.Normalize(**IMAGENET)])
    ours = [ops.Resize(64), ops.CenterCrop(48), ops.RandomHorizontalFlip(), ops.Normalize(**IMAGENET)]
    common = dict(batch_size=8, seed=1, output="numpy")
    a = [np.array(x) for x, _ in nostall.Loader(photos, pipeline=recipe, **common)]
    b = [np.array(x) for x, _ in nostall.Loader(photos, pipeline=ours, **common)]
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    # A plain list of transforms too.
    c = [np.array(x) for x, _ in nostall.Loader(photos, pipeline=list(recipe.transforms), **common)]
    np.testing.assert_array_equal(c[0], a[0])


def test_what_cannot_be_translated_is_refused_naming_it(photos):
    with pytest.raises(nostall.ConfigError,
                       match="torchvision.transforms.v2._geometry.ElasticTransform has no nostall"):
        nostall.Loader(photos, pipeline=v2.Compose([v2.ElasticTransform()]))
    with pytest.raises(nostall.ConfigError, match="interpolation 'lanczos'"):
        ops.from_torchvision(v1.Resize(32, interpolation=InterpolationMode.LANCZOS))
    with pytest.raises(nostall.ConfigError, match="max_size"):
        ops.from_torchvision(v2.Resize(32, max_size=64))
    with pytest.raises(TypeError, match="not an operator"):
        nostall.Loader(photos, pipeline=[ops.CenterCrop(8), "Normalize"])
    with pytest.raises(TypeError, match="'Normalize' is not an operator"):
        nostall.Loader(photos, pipeline=[v2.CenterCrop(8), "Normalize"])


def test_conversions_are_followed_not_dropped(square_pngs):
    """v2's ToDtype scales only when told: Normalize in 0..255 units after it gives what
    torchvision gives; ToImage alone delivers uint8; what nostall cannot deliver is refused."""
    from parity import reference_images

    from nostall._translate import translate

    pngs = square_pngs(48)
    stats = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])
    unscaled = v2.Compose([v2.CenterCrop(48), v2.ToImage(), v2.ToDtype(torch.float32), v2.Normalize(**stats)])
    loader = nostall.Loader(str(pngs), batch_size=32, shuffle=False, pipeline=unscaled, output="torch")
    got, _ = next(iter(loader))
    want = reference_images(pngs, unscaled)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert want.min() < -2.0 and want.max() > 2.6  # the range, not [-2.12, -1.79]

    eight_bits = v2.Compose([v2.CenterCrop(40), v2.ToImage()])
    got, _ = next(iter(nostall.Loader(str(pngs), batch_size=32, shuffle=False, pipeline=eight_bits,
                                      output="torch")))
    assert got.dtype == torch.uint8 and torch.equal(got, reference_images(pngs, eight_bits))
    with pytest.raises(nostall.ConfigError, match='dtype="float32" with a recipe that delivers uint8'):
        nostall.Loader(str(pngs), pipeline=eight_bits, dtype="float32")

    refused = {
        "ends in a ToDtype without scale=True": [v2.ToImage(), v2.ToDtype(torch.float32)],
        "ToDtype without scale=True works on floats in 0..255": [v2.ToImage(), v2.ToDtype(torch.float32),
                                                                 v2.RandomHorizontalFlip()],
        "on 8-bit tensors": [v2.ToImage(), v2.Normalize(**IMAGENET)],
        "to torch.float16": [v2.ToImage(), v2.ToDtype(torch.float16, scale=True)],
        "converts floats back to 8 bits": [v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                                           v2.ToDtype(torch.uint8, scale=True)],
    }
    for why, recipe in refused.items():
        with pytest.raises(nostall.ConfigError, match=why):
            nostall.Loader(str(pngs), pipeline=v2.Compose(recipe))
    # A v1 recipe converts with ToTensor (0..1) and a v2 one with scale=True: float32.
    for recipe in ([v1.ToTensor(), v1.Normalize(**IMAGENET)],
                   [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(**IMAGENET)]):
        assert translate(v2.Compose(recipe))[1] == "float32"
    # Views: one dtype for the batch; a view of nostall's own operators says nothing.
    ours = [ops.RandomResizedCrop(32)]
    scaled = v2.Compose([v2.RandomResizedCrop(32), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    eight = v2.Compose([v2.RandomResizedCrop(32), v2.ToImage()])
    # The recipe's view says float32 (so uint8 is refused); nostall's views say nothing.
    with pytest.raises(nostall.ConfigError, match='dtype="uint8" with a recipe that delivers float32'):
        nostall.Loader(str(pngs), pipeline=[ours, scaled], dtype="uint8")
    images, _ = next(iter(nostall.Loader(str(pngs), batch_size=4, pipeline=[ours, ours], dtype="uint8")))
    assert images[0].dtype == torch.uint8
    images, _ = next(iter(nostall.Loader(str(pngs), batch_size=4, pipeline=[ours, eight])))
    assert images[0].dtype == images[1].dtype == torch.uint8
    with pytest.raises(nostall.ConfigError, match="views end in different types"):
        nostall.Loader(str(pngs), pipeline=[scaled, eight])


def test_every_declared_translation_reads_parameters_its_operator_has_by_converters_that_exist():
    from nostall import _nostall, _translate

    params = {name: [p[0] for p in ps] for name, _doc, ps in _nostall._image_operators()}
    assert _translate.TRANSLATIONS
    for (library, name), translation in _translate.TRANSLATIONS.items():
        assert library in ("torchvision", "timm"), name
        assert translation.operator in params, name
        if translation.translator is not None:
            assert translation.translator in _translate._TRANSLATORS, name
            assert translation.args == [], name
        for param, attribute, converter in translation.args:
            assert param in params[translation.operator], (name, param)
            assert attribute, (name, param)
            assert converter in _translate._CONVERTERS, (name, converter)
    # Every converter and translator is named by a declaration: none is left over.
    named = {c for t in _translate.TRANSLATIONS.values() for _, _, c in t.args}
    assert named == set(_translate._CONVERTERS)
    assert {t.translator for t in _translate.TRANSLATIONS.values()} - {None} == set(_translate._TRANSLATORS)


def test_every_declared_transform_is_a_class_of_its_library():
    import sys

    import timm.data  # noqa: F401  (imports the modules of timm's transforms)

    from nostall._translate import TRANSLATIONS

    def classes(modules, library):
        return {name for module in modules for name, obj in vars(module).items()
                if isinstance(obj, type) and obj.__module__.startswith(library)}

    theirs = {
        "torchvision": classes([v1, v2], "torchvision"),
        "timm": classes([m for k, m in list(sys.modules.items()) if k.startswith("timm.")], "timm"),
    }
    for library, name in TRANSLATIONS:
        assert name in theirs[library], f"{library} has no transform {name}"
    # The refusal of what nostall lacks names what it translates, from the declarations.
    with pytest.raises(nostall.ConfigError, match="timm's .*RandomResizedCropAndInterpolation"):
        ops.from_torchvision(v2.ElasticTransform())


def test_a_vertical_flip_is_translated_and_before_the_crop_flips_the_whole_image(square_pngs):
    """Written before a crop, the flip runs on the whole decoded image, then the crop: v2's
    order (an off-centre crop tells the two orders apart)."""
    from torchvision.transforms import v2

    import nostall
    from parity import _paths, reference_images

    assert nostall.ops.from_torchvision(v2.RandomVerticalFlip(0.3)) == [nostall.ops.RandomVerticalFlip(0.3)]
    pngs = square_pngs(48)
    loader = nostall.Loader(str(pngs), batch_size=len(_paths(pngs)), shuffle=False, dtype="uint8", output="numpy",
                            pipeline=[nostall.ops.RandomVerticalFlip(p=1.0), nostall.ops.CenterCrop((31, 48))])
    got = torch.from_numpy(np.array(next(iter(loader))[0]))
    want = reference_images(pngs, v2.Compose([v2.RandomVerticalFlip(p=1.0), v2.CenterCrop((31, 48))]))
    assert torch.equal(got, want)
    # The crop then the flip is another image.
    other = reference_images(pngs, v2.Compose([v2.CenterCrop((31, 48)), v2.RandomVerticalFlip(p=1.0)]))
    assert not torch.equal(got, other)
