//! The transforms of other libraries an operator stands for, declared with it.
//!
//! An operator that does what a torchvision or timm transform does says so in its
//! [`Declaration`](super::args::Declaration): one [`Translation`] per transform class,
//! naming the library, the class, and for each of the operator's parameters the
//! transform's attribute it is read from and the [`Conv`] that turns the attribute's value
//! into the argument. Python's translation of a recipe (`nostall/_translate.py`) looks a
//! transform up by its library and class name among the declarations, reads and converts
//! its attributes, and calls the operator's class. The conversions read torch's, PIL's
//! and torchvision's objects, so they are Python's: each is named here and written once
//! there. So what translates to what is declared once, beside the operator.

/// The library a transform comes from: its module's name begins with [`Library::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Library {
    /// torchvision's `transforms` (v1) and `transforms.v2`, whose classes name alike.
    Torchvision,
    /// timm's `timm.data`.
    Timm,
}

impl Library {
    /// Its name, the top of its modules.
    pub fn name(self) -> &'static str {
        match self {
            Library::Torchvision => "torchvision",
            Library::Timm => "timm",
        }
    }
}

/// How a transform's attribute becomes the operator's argument: a converter of
/// `nostall/_translate.py`'s, by [`Conv::name`]. Each takes the attribute's value (`None`
/// where the transform lacks the attribute) and the transform (for its errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Conv {
    /// `int(value)`.
    Int,
    /// `float(value)`.
    Float,
    /// `bool(value)`.
    Bool,
    /// `str(value)`.
    Str,
    /// The value as it is (the operator checks it).
    Same,
    /// A size: an int, one int in a sequence, or a `(height, width)` pair.
    Size,
    /// Numbers as floats (a float32 tensor's as the shortest decimals that read back to
    /// them).
    Floats,
    /// [`Conv::Floats`], or `None`.
    OptionalFloats,
    /// Numbers as ints.
    Ints,
    /// An `InterpolationMode` (or its value) as `'bilinear'`, `'bicubic'` or `'nearest'`;
    /// any other is refused.
    Interpolation,
    /// A fill (one per input type in v2: the first), one number or one per channel;
    /// `None` as 0.
    Fill,
    /// [`Conv::Fill`], `None` kept.
    OptionalFill,
    /// An enum's `.value` as a string (`AutoAugmentPolicy`).
    EnumValue,
    /// A list of transforms, each translated (what `RandomApply` and its kin hold), a
    /// `Compose` in it flattened into the list.
    Transforms,
    /// A list of transforms to choose from, each translated, a `Compose` in it kept as
    /// one choice (`RandomChoice`).
    Choices,
    /// torchvision's `RandomErasing` value: `'random'` (also for `None`), numbers, or one
    /// number.
    ErasingValue,
    /// Padding as torchvision's `pad` takes it, from the attribute as the transform keeps
    /// it (v2's `RandomCrop` keeps left, right, top, bottom).
    Padding,
    /// `exp` of a `(low, high)` range of logarithms' low end (timm keeps aspect ranges so).
    ExpLow,
    /// `exp` of a range of logarithms' high end, `None` where the range is symmetric (the
    /// operator then derives it as the reciprocal of the low end's).
    ExpHighOrNone,
}

impl Conv {
    /// The converter's name in `nostall/_translate.py`.
    pub fn name(self) -> &'static str {
        match self {
            Conv::Int => "int",
            Conv::Float => "float",
            Conv::Bool => "bool",
            Conv::Str => "str",
            Conv::Same => "same",
            Conv::Size => "size",
            Conv::Floats => "floats",
            Conv::OptionalFloats => "optional_floats",
            Conv::Ints => "ints",
            Conv::Interpolation => "interpolation",
            Conv::Fill => "fill",
            Conv::OptionalFill => "optional_fill",
            Conv::EnumValue => "enum_value",
            Conv::Transforms => "transforms",
            Conv::Choices => "choices",
            Conv::ErasingValue => "erasing_value",
            Conv::Padding => "padding",
            Conv::ExpLow => "exp_low",
            Conv::ExpHighOrNone => "exp_high_or_none",
        }
    }
}

/// One argument read from a transform: `(parameter, attribute, conversion)`, the
/// operator's parameter, the transform's attribute, and how its value converts.
pub type Arg = (&'static str, &'static str, Conv);

/// A transform class an operator stands for, and how its attributes give the operator's
/// arguments.
#[derive(Debug, Clone, Copy)]
pub struct Translation {
    /// The library of the transform.
    pub library: Library,
    /// The transform's class name.
    pub name: &'static str,
    /// The arguments read from the transform, in the order they are read; the
    /// parameters left out take their defaults.
    pub args: &'static [Arg],
    /// Attributes the transform must leave `None`: what they ask for, the operator does
    /// not do, so a transform with one set is refused naming it (`Resize`'s `max_size`).
    pub unsupported: &'static [&'static str],
    /// A translator of `nostall/_translate.py`'s, by name, that reads the whole transform
    /// into the operator's arguments where they are not one attribute each (timm's
    /// `RandAugment` keeps its config string as the augmentations it made); `args` is
    /// then empty.
    pub translator: Option<&'static str>,
}

impl Translation {
    /// torchvision's (v1 and v2) transform `name`, its arguments read as `args` says.
    pub const fn torchvision(name: &'static str, args: &'static [Arg]) -> Translation {
        Translation::of(Library::Torchvision, name, args)
    }

    /// timm's transform `name`, its arguments read as `args` says.
    pub const fn timm(name: &'static str, args: &'static [Arg]) -> Translation {
        Translation::of(Library::Timm, name, args)
    }

    const fn of(library: Library, name: &'static str, args: &'static [Arg]) -> Translation {
        Translation {
            library,
            name,
            args,
            unsupported: &[],
            translator: None,
        }
    }

    /// The same, refusing a transform that sets any of the attributes `unsupported`.
    pub const fn refusing(self, unsupported: &'static [&'static str]) -> Translation {
        Translation {
            unsupported,
            ..self
        }
    }

    /// The same, its arguments made by the translator named `translator` instead.
    pub const fn by(self, translator: &'static str) -> Translation {
        Translation {
            translator: Some(translator),
            ..self
        }
    }
}
