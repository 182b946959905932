//! Operators' arguments: one model of a value, which the text form reads, Python's
//! objects convert to, and each operator's declaration binds to its parameters.
//!
//! An operator declares itself once ([`Declaration`]: its name, its docs, its
//! parameters, each a [`Param`]: name, kind, default as Python writes it, and the
//! transforms of other libraries it translates), an image's or an audio operator's alike.
//! Whatever wrote the call, text or Python, [`Args::bind`] matches what was given to
//! those parameters as Python does (by position, then by keyword, each once), fills in
//! the defaults by reading their text, and the operator reads each value back through a
//! typed getter whose error names the operator and the parameter. So a parameter's
//! default, its check and its message are the same from every front.

use std::fmt;

use super::image::{Op, Size};
use super::notation;
use super::translation::Translation;
use crate::error::{Error, Result};

/// An argument's value, as Python has it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An int.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// Numbers in a tuple or list.
    Tuple(Vec<Value>),
    /// Image operators in a list (what `RandomApply` and its kin hold).
    Ops(Vec<Op>),
}

/// The value as Python writes it, so that it reads back (floats in their shortest exact
/// form).
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn items<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T]) -> fmt::Result {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{item}")?;
            }
            Ok(())
        }
        match self {
            Value::None => f.write_str("None"),
            Value::Bool(true) => f.write_str("True"),
            Value::Bool(false) => f.write_str("False"),
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v:?}"),
            Value::Str(s) => write!(f, "'{s}'"),
            Value::Tuple(values) => {
                f.write_str("(")?;
                items(f, values)?;
                f.write_str(if values.len() == 1 { ",)" } else { ")" })
            }
            Value::Ops(ops) => {
                f.write_str("[")?;
                items(f, ops)?;
                f.write_str("]")
            }
        }
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(v.into())
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Str(v.into())
    }
}

impl<T: Into<Value>, const N: usize> From<[T; N]> for Value {
    fn from(values: [T; N]) -> Value {
        Value::Tuple(values.into_iter().map(Into::into).collect())
    }
}

impl<A: Into<Value>, B: Into<Value>> From<(A, B)> for Value {
    fn from((a, b): (A, B)) -> Value {
        Value::Tuple(vec![a.into(), b.into()])
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::None, Into::into)
    }
}

impl From<Size> for Value {
    fn from(size: Size) -> Value {
        match size {
            Size::Shorter(side) => side.into(),
            Size::Exact { height, width } => (height, width).into(),
        }
    }
}

/// Arguments given by keyword, in the order given.
pub type Keywords = Vec<(String, Value)>;

/// What a parameter takes and what its attribute gives, as Python annotations (the
/// generated stubs and signatures print them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// An int.
    Int,
    /// A float.
    Float,
    /// A float or `None`.
    OptionalFloat,
    /// An int or `None`.
    OptionalInt,
    /// A string, one of those the operator names.
    Choice,
    /// A string, one of those the operator names, or `None`.
    OptionalChoice,
    /// An int, or `None` for the one the operator derives from its other arguments; given
    /// back as the int.
    DerivedInt,
    /// A float, or `None` for the one the operator derives from its other arguments; given
    /// back as the float.
    DerivedFloat,
    /// A bool.
    Bool,
    /// An int (the shorter side) or a `(height, width)` pair.
    Size,
    /// An int (a square) or a `(height, width)` pair; given back as the pair.
    Square,
    /// A `(low, high)` pair of floats.
    Range,
    /// A float `x` (the range `(x, x)`) or a `(low, high)` pair; given back as the pair.
    FloatOrRange,
    /// A float `x` (read as the range the operator derives from it) or a `(low, high)`
    /// pair; given back as the pair, or `None` where it does nothing.
    Jitter,
    /// An angle's range in degrees: a non-negative float `x` (the range `(-x, x)`) or a
    /// `(low, high)` pair; given back as the pair.
    Angle,
    /// Shear angles' ranges in degrees: a non-negative float `x` (`(-x, x)` along x), a
    /// `(low, high)` pair (along x), four floats (x's range then y's), or `None`; given back
    /// as the 2 or 4 floats, or `None`.
    Shear,
    /// A pair of floats, or `None`.
    OptionalPair,
    /// Three floats, one per channel (R, G, B).
    Rgb,
    /// A number, or one per channel.
    Fill,
    /// A number, one per channel, or `None`.
    OptionalFill,
    /// A number, one per channel, or `'random'`.
    Erase,
    /// A list of image operators.
    Ops,
    /// Numbers, one per item of another parameter, or `None`.
    Weights,
    /// Sides in pixels to draw among: an int or a sequence of ints; given back as the
    /// tuple.
    Sides,
    /// Padding in pixels, as torchvision's `pad` takes it: one int for every side, two
    /// (left and right, top and bottom) or four (left, top, right, bottom), or `None`;
    /// given back as the four.
    Padding,
}

impl Kind {
    /// The annotation of the parameter (what it takes).
    pub fn takes(self) -> &'static str {
        match self {
            Kind::Int => "int",
            Kind::Float => "float",
            Kind::OptionalFloat => "float | None",
            Kind::OptionalInt => "int | None",
            Kind::Choice => "str",
            Kind::OptionalChoice => "str | None",
            Kind::DerivedInt => "int | None",
            Kind::DerivedFloat => "float | None",
            Kind::Bool => "bool",
            Kind::Size | Kind::Square => "int | tuple[int, int] | list[int]",
            Kind::Range => "tuple[float, float] | list[float]",
            Kind::FloatOrRange => "float | tuple[float, float] | list[float]",
            Kind::Jitter => "float | tuple[float, float] | list[float] | None",
            Kind::Angle => "float | tuple[float, float] | list[float]",
            Kind::Shear => {
                "float | tuple[float, float] | tuple[float, float, float, float] | list[float] \
                 | None"
            }
            Kind::OptionalPair => "tuple[float, float] | list[float] | None",
            Kind::Rgb => "tuple[float, float, float] | list[float]",
            Kind::Fill => "float | tuple[float, float, float] | list[float]",
            Kind::OptionalFill => "float | tuple[float, float, float] | list[float] | None",
            Kind::Erase => "float | tuple[float, float, float] | list[float] | str",
            Kind::Ops => "Sequence[Op]",
            Kind::Weights => "Sequence[float] | None",
            Kind::Sides => "int | Sequence[int]",
            Kind::Padding => "int | Sequence[int] | None",
        }
    }

    /// The annotation of the attribute (what it gives back).
    pub fn gives(self) -> &'static str {
        match self {
            Kind::Int => "int",
            Kind::Float => "float",
            Kind::OptionalFloat => "float | None",
            Kind::OptionalInt => "int | None",
            Kind::Choice => "str",
            Kind::OptionalChoice => "str | None",
            Kind::DerivedInt => "int",
            Kind::DerivedFloat => "float",
            Kind::Bool => "bool",
            Kind::Size => "int | tuple[int, int]",
            Kind::Square => "tuple[int, int]",
            Kind::Range | Kind::FloatOrRange | Kind::Angle => "tuple[float, float]",
            Kind::Jitter | Kind::OptionalPair => "tuple[float, float] | None",
            Kind::Shear => "tuple[float, float] | tuple[float, float, float, float] | None",
            Kind::Rgb => "tuple[float, float, float]",
            Kind::Fill => "float | tuple[float, float, float]",
            Kind::OptionalFill => "float | tuple[float, float, float] | None",
            Kind::Erase => "float | tuple[float, float, float] | str",
            Kind::Ops => "list[Op]",
            Kind::Weights => "tuple[float, ...] | None",
            Kind::Sides => "tuple[int, ...]",
            Kind::Padding => "tuple[int, int, int, int] | None",
        }
    }
}

/// One parameter of an operator.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// Its name (Python's keyword).
    pub name: &'static str,
    /// What it takes.
    pub kind: Kind,
    /// Its default as Python writes it; `None` where it must be given.
    pub default: Option<&'static str>,
    /// What it means, one line (the Python class's docstring lists it).
    pub doc: &'static str,
}

impl Param {
    /// A parameter that must be given.
    pub const fn required(name: &'static str, kind: Kind, doc: &'static str) -> Param {
        Param {
            name,
            kind,
            default: None,
            doc,
        }
    }

    /// A parameter with a default, written as Python writes it.
    pub const fn with_default(
        name: &'static str,
        kind: Kind,
        default: &'static str,
        doc: &'static str,
    ) -> Param {
        Param {
            name,
            kind,
            default: Some(default),
            doc,
        }
    }
}

/// An operator's declaration: what Python, the text form and the docs know of it. `O` is
/// the operators it makes: an image's [`Op`], or an
/// [`AudioOp`](super::audio::AudioOp).
#[derive(Debug)]
pub struct Declaration<O: 'static> {
    /// Its name: the Python class's and the text form's.
    pub name: &'static str,
    /// What it does (the Python class's docstring, before its parameters).
    pub doc: &'static str,
    /// Its parameters, in Python's order.
    pub params: &'static [Param],
    /// The transforms of other libraries it stands for (what a torchvision or timm recipe
    /// is translated to it from); empty where none.
    pub translates: &'static [Translation],
    /// Reads and checks the arguments into the operator.
    pub build: fn(&Args) -> Result<O>,
}

impl<O> Declaration<O> {
    /// The operator these arguments make.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the operator and its argument that is unknown, missing,
    /// of the wrong kind or out of its bounds.
    pub fn call(&'static self, positional: Vec<Value>, keywords: Keywords) -> Result<O> {
        let args = Args::bind(self.name, self.params, positional, keywords)?;
        (self.build)(&args)
    }
}

impl<T: Operation> Declaration<Handle<T>> {
    /// The operator `name` of `T`'s modality.
    pub fn find(name: &str) -> Option<&'static Declaration<Handle<T>>> {
        T::declarations().iter().copied().find(|d| d.name == name)
    }
}

/// A modality's operator as its [`Handle`] holds it (shared, whatever the operator's own
/// type): what the handle needs of it, so that an image's [`Op`] and an
/// [`AudioOp`](super::audio::AudioOp) are one type of handle.
pub trait Operation: Sized + Send + Sync + 'static {
    /// The modality, as its errors name it (`"image"`, `"audio"`).
    const MODALITY: &'static str;

    /// Every operator of the modality.
    fn declarations() -> &'static [&'static Declaration<Handle<Self>>];

    /// Its declaration.
    fn declared(&self) -> &'static Declaration<Handle<Self>>;

    /// Its arguments, one per parameter in the declaration's order, as its call would
    /// give them (what it is written as, compared by, and shown to Python as).
    fn values(&self) -> Vec<Value>;

    /// How many of `args`, at their end, its call leaves unwritten (its [`fmt::Display`]):
    /// none unless the modality says otherwise.
    fn unwritten(_args: &[(&'static str, Value)], _params: &[Param]) -> usize {
        0
    }
}

/// An operator of a modality: a handle to one checked operator, held as `T` (the
/// modality's). Named by each modality: [`Op`], [`AudioOp`](super::audio::AudioOp).
///
/// Operators are made by their declarations ([`Handle::call`]), from the text form, or by
/// the constructors of the common ones; an operator that exists has been checked. Two are
/// equal when they are the same operator with the same arguments.
#[derive(Clone)]
pub struct Handle<T>(pub(crate) T);

impl<T: Operation> Handle<T> {
    /// Its declaration.
    pub fn declaration(&self) -> &'static Declaration<Handle<T>> {
        self.0.declared()
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        self.0.declared().name
    }

    /// Its arguments, every parameter named, in the declaration's order.
    pub fn args(&self) -> Vec<(&'static str, Value)> {
        let params = self.declaration().params.iter().map(|p| p.name);
        params.zip(self.0.values()).collect()
    }

    /// The value of its parameter `name`, if it has one.
    pub fn arg(&self, name: &str) -> Option<Value> {
        self.args()
            .into_iter()
            .find_map(|(param, value)| (param == name).then_some(value))
    }

    /// The operator `name` of its modality with these arguments, by position then by
    /// keyword.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an unknown operator, or naming the argument that is wrong.
    pub fn call(
        name: &str,
        positional: Vec<Value>,
        keywords: Vec<(String, Value)>,
    ) -> Result<Handle<T>> {
        let declaration = Declaration::<Handle<T>>::find(name).ok_or_else(|| {
            let names: Vec<_> = T::declarations().iter().map(|d| d.name).collect();
            let modality = T::MODALITY;
            Error::Config(format!(
                "unknown {modality} operator {name:?}: the {modality} operators are {}",
                names.join(", ")
            ))
        })?;
        declaration.call(positional, keywords)
    }

    /// The operator `name` with arguments known to be good (the constructors').
    pub(crate) fn known(name: &str, positional: Vec<Value>) -> Handle<T> {
        Handle::call(name, positional, Vec::new()).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl<T: Operation> PartialEq for Handle<T> {
    fn eq(&self, other: &Handle<T>) -> bool {
        self.name() == other.name() && self.0.values() == other.0.values()
    }
}

/// The call Python writes for it (the `repr` of its Python object), every parameter
/// named but those its modality leaves unwritten ([`Operation::unwritten`]).
impl<T: Operation> fmt::Display for Handle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.name())?;
        let mut args = self.args();
        args.truncate(args.len() - T::unwritten(&args, self.declaration().params));
        for (i, (param, value)) in args.into_iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{param}={value}")?;
        }
        f.write_str(")")
    }
}

impl<T: Operation> fmt::Debug for Handle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A call's arguments matched to its operator's parameters, defaults filled in.
#[derive(Debug)]
pub struct Args {
    operator: &'static str,
    params: &'static [Param],
    values: Vec<Value>,
}

impl Args {
    /// Matches `positional` then `keywords` to `params` as Python does.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the operator and the parameter that is unknown, given
    /// twice or missing.
    pub fn bind(
        operator: &'static str,
        params: &'static [Param],
        positional: Vec<Value>,
        keywords: Keywords,
    ) -> Result<Args> {
        if positional.len() > params.len() {
            let names: Vec<_> = params.iter().map(|p| p.name).collect();
            return Err(Error::Config(format!(
                "{operator} takes at most {} arguments ({})",
                params.len(),
                names.join(", ")
            )));
        }
        let mut values: Vec<Option<Value>> = vec![None; params.len()];
        for (slot, value) in values.iter_mut().zip(positional) {
            *slot = Some(value);
        }
        for (key, value) in keywords {
            let Some(slot) = params.iter().position(|p| p.name == key) else {
                let names: Vec<_> = params.iter().map(|p| p.name).collect();
                return Err(Error::Config(format!(
                    "{operator} has no parameter {key:?}: its parameters are {}",
                    names.join(", ")
                )));
            };
            if values[slot].replace(value).is_some() {
                return Err(Error::Config(format!("{operator}: {key} is given twice")));
            }
        }
        let values = values
            .into_iter()
            .zip(params)
            .map(|(value, param)| match (value, param.default) {
                (Some(value), _) => Ok(value),
                (None, Some(default)) => Ok(notation::read_value(default)
                    .unwrap_or_else(|e| panic!("{operator}'s default {default:?}: {e}"))),
                (None, None) => Err(Error::Config(format!("{operator} needs {}", param.name))),
            })
            .collect::<Result<_>>()?;
        Ok(Args {
            operator,
            params,
            values,
        })
    }

    /// The operator's name.
    pub fn operator(&self) -> &'static str {
        self.operator
    }

    fn get(&self, param: &str) -> &Value {
        let slot = self.params.iter().position(|p| p.name == param);
        &self.values[slot.unwrap_or_else(|| panic!("{} has no {param}", self.operator))]
    }

    /// An error about `param`: `"{operator}: {param} {says}"`.
    pub fn error(&self, param: &str, says: impl fmt::Display) -> Error {
        Error::Config(format!("{}: {param} {says}", self.operator))
    }

    fn wrong(&self, param: &str, takes: &str) -> Error {
        self.error(param, format!("takes {takes}, not {}", self.get(param)))
    }

    /// Whether `param` is `None`.
    pub fn is_none(&self, param: &str) -> bool {
        *self.get(param) == Value::None
    }

    /// A float (an int is one too).
    pub fn float(&self, param: &str) -> Result<f64> {
        number(self.get(param)).ok_or_else(|| self.wrong(param, "a number"))
    }

    /// A float, or `None`.
    pub fn optional_float(&self, param: &str) -> Result<Option<f64>> {
        match self.get(param) {
            Value::None => Ok(None),
            _ => self.float(param).map(Some),
        }
    }

    /// A probability: a float in [0, 1].
    pub fn probability(&self, param: &str) -> Result<f64> {
        let p = self.float(param)?;
        if !(0.0..=1.0).contains(&p) {
            return Err(self.error(param, format!("{p} is not a probability in [0, 1]")));
        }
        Ok(p)
    }

    /// An int that fits `T`.
    pub fn int<T: TryFrom<i64>>(&self, param: &str) -> Result<T> {
        let wrong = || self.wrong(param, &format!("an int of {}", std::any::type_name::<T>()));
        match self.get(param) {
            Value::Int(v) => T::try_from(*v).map_err(|_| wrong()),
            _ => Err(wrong()),
        }
    }

    /// An int that fits `T`, or `None`.
    pub fn optional_int<T: TryFrom<i64>>(&self, param: &str) -> Result<Option<T>> {
        match self.get(param) {
            Value::None => Ok(None),
            _ => self.int(param).map(Some),
        }
    }

    /// A bool.
    pub fn bool(&self, param: &str) -> Result<bool> {
        match self.get(param) {
            Value::Bool(v) => Ok(*v),
            _ => Err(self.wrong(param, "True or False")),
        }
    }

    /// A string, or `None`.
    pub fn text(&self, param: &str) -> Result<Option<&str>> {
        match self.get(param) {
            Value::None => Ok(None),
            Value::Str(s) => Ok(Some(s)),
            _ => Err(self.wrong(param, "a string")),
        }
    }

    /// One of `choices`.
    pub fn choice(&self, param: &str, choices: &[&'static str]) -> Result<&'static str> {
        let quoted: Vec<_> = choices.iter().map(|c| format!("{c:?}")).collect();
        let given = match self.get(param) {
            Value::Str(given) => Some(given.as_str()),
            _ => None,
        };
        given
            .and_then(|g| choices.iter().find(|c| **c == g).copied())
            .ok_or_else(|| self.wrong(param, &format!("one of {}", quoted.join(", "))))
    }

    /// `N` floats, as a tuple or list.
    pub fn floats<const N: usize>(&self, param: &str) -> Result<[f64; N]> {
        let wrong = || self.wrong(param, &format!("a tuple of {N} numbers"));
        let Value::Tuple(items) = self.get(param) else {
            return Err(wrong());
        };
        if items.len() != N {
            return Err(wrong());
        }
        let mut out = [0.0; N];
        for (slot, item) in out.iter_mut().zip(items) {
            *slot = number(item).ok_or_else(wrong)?;
        }
        Ok(out)
    }

    /// A `(low, high)` range.
    pub fn range(&self, param: &str) -> Result<(f64, f64)> {
        let [lo, hi] = self.floats(param)?;
        Ok((lo, hi))
    }

    /// A size: one int (the shorter side), or a `(height, width)` pair.
    pub fn size(&self, param: &str) -> Result<Size> {
        let takes = "an int or a (height, width) pair of ints";
        let side = |v: &Value| match v {
            Value::Int(v) => u32::try_from(*v).ok(),
            _ => None,
        };
        match self.get(param) {
            Value::Int(_) => side(self.get(param))
                .map(Size::Shorter)
                .ok_or_else(|| self.wrong(param, takes)),
            Value::Tuple(items) if items.len() == 2 => match (side(&items[0]), side(&items[1])) {
                (Some(height), Some(width)) => Ok(Size::Exact { height, width }),
                _ => Err(self.wrong(param, takes)),
            },
            _ => Err(self.wrong(param, takes)),
        }
    }

    /// A size as a crop takes it: one int is a square.
    pub fn square(&self, param: &str) -> Result<(u32, u32)> {
        Ok(match self.size(param)? {
            Size::Shorter(side) => (side, side),
            Size::Exact { height, width } => (height, width),
        })
    }

    /// A fill: one number for every channel, or one per channel.
    pub fn fill(&self, param: &str) -> Result<[f64; 3]> {
        match self.get(param) {
            Value::Tuple(_) => self.floats(param),
            value => number(value)
                .map(|v| [v; 3])
                .ok_or_else(|| self.wrong(param, "a number or 3 numbers")),
        }
    }

    /// Numbers, as many as given.
    pub fn weights(&self, param: &str) -> Result<Vec<f64>> {
        let wrong = || self.wrong(param, "a sequence of numbers");
        match self.get(param) {
            Value::Tuple(items) => items.iter().map(|v| number(v).ok_or_else(wrong)).collect(),
            _ => Err(wrong()),
        }
    }

    /// Sides in pixels: an int, or ints in a sequence (at least one), each from 1 to
    /// `u32::MAX`.
    pub fn sides(&self, param: &str) -> Result<Vec<u32>> {
        let wrong = || self.wrong(param, "a positive int or a sequence of them");
        let side = |v: &Value| match v {
            Value::Int(n) => u32::try_from(*n).ok().filter(|n| *n > 0),
            _ => None,
        };
        match self.get(param) {
            Value::Tuple(items) if !items.is_empty() => {
                items.iter().map(|v| side(v).ok_or_else(wrong)).collect()
            }
            value => side(value).map(|n| vec![n]).ok_or_else(wrong),
        }
    }

    /// Padding as torchvision's `pad` takes it (see [`Kind::Padding`]), as (left, top,
    /// right, bottom), each from 0 to `most`; `None` for `None`.
    pub fn padding(&self, param: &str, most: u32) -> Result<Option<[u32; 4]>> {
        let takes = format!("an int from 0 to {most}, or 2 or 4 of them");
        let wrong = || self.wrong(param, &takes);
        let side = |v: &Value| match v {
            Value::Int(n) => u32::try_from(*n).ok().filter(|n| *n <= most),
            _ => None,
        };
        let sides: Vec<u32> = match self.get(param) {
            Value::None => return Ok(None),
            Value::Tuple(items) => items.iter().map(|v| side(v).ok_or_else(wrong)).collect(),
            value => side(value).map(|n| vec![n]).ok_or_else(wrong),
        }?;
        match sides[..] {
            [all] => Ok(Some([all; 4])),
            [across, down] => Ok(Some([across, down, across, down])),
            [left, top, right, bottom] => Ok(Some([left, top, right, bottom])),
            _ => Err(wrong()),
        }
    }

    /// Image operators.
    pub fn ops(&self, param: &str) -> Result<&[Op]> {
        match self.get(param) {
            Value::Ops(ops) => Ok(ops),
            Value::Tuple(items) if items.is_empty() => Ok(&[]),
            _ => Err(self.wrong(param, "a list of image operators")),
        }
    }

    /// The value as given, for a parameter whose reading depends on its form.
    pub fn value(&self, param: &str) -> &Value {
        self.get(param)
    }
}

/// A number's value as a float.
pub(crate) fn number(value: &Value) -> Option<f64> {
    match *value {
        Value::Int(v) => Some(v as f64),
        Value::Float(v) => Some(v),
        _ => None,
    }
}
