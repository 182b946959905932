//! Every operator's every parameter at and past its edges, and given the wrong kind: each
//! value is refused with a config error naming the operator, or makes an operator that
//! prepares a real image and returns, holding no count or size past its bound.
//!
//! Nothing here is timed: an operator's work per sample follows from its arguments (a
//! kernel's side, a count of augmentations) and the output's size (which the loader
//! bounds, by a batch's bytes), so bounding those bounds it, and running it once shows
//! that what is accepted runs.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::*;
use crate::prep::args::{Keywords, Kind};
use crate::prep::image::codec::{encode_jpeg, EncodePixels};
use crate::prep::image::ImagePipeline;
use crate::prep::Prep;

/// Ints at, either side of, and far past every bound an operator has.
const INTS: [i64; 27] = [
    0,
    1,
    -1,
    2,
    3,
    7,
    8,
    9,
    10,
    11,
    64,
    65,
    255,
    256,
    1023,
    1025,
    65_535,
    65_537,
    1 << 24,
    (1 << 24) + 1,
    1_000_000_001,
    (1 << 31) - 1,
    1 << 32,
    1 << 62,
    i64::MAX,
    i64::MIN,
    -1_000_000_000,
];

/// Floats at the edges of ranges and of the type.
const FLOATS: [f64; 17] = [
    0.0,
    -0.0,
    0.5,
    1.0,
    -1.0,
    2.0,
    255.0,
    256.0,
    1e-300,
    1e-45,
    1e9,
    1e300,
    f64::MAX,
    f64::MIN_POSITIVE,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];

/// The floats a tuple's items take (fewer, as they combine).
const ITEMS: [f64; 9] = [
    0.0,
    0.5,
    1.0,
    -1.0,
    1e-300,
    1e300,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];

/// The sides a size's pairs take.
const SIDES: [i64; 9] = [0, 1, 7, -1, 65_535, 65_537, 10_001, 1_000_000_001, 1 << 62];

/// Strings a choice takes: every operator's choices, and timm config strings at and past
/// their bounds.
const CHOICES: [&str; 20] = [
    "",
    "nearest",
    "bilinear",
    "bicubic",
    "random",
    "imagenet",
    "cifar10",
    "svhn",
    "const",
    "rand",
    "pixel",
    "rand-m9-n64",
    "rand-m9-n65",
    "rand-m9-n4000000000",
    "rand-m9-n4294967296",
    "rand-m4294967295-mmax4294967295-inc1-n64",
    "rand-mstd1e999-p1e999-mmax0",
    "rand-tweights-n15",
    "rand-t3aw-n64",
    "rand-t3a-n64-m100",
];

fn tuple(items: impl IntoIterator<Item = f64>) -> Value {
    Value::Tuple(items.into_iter().map(Value::Float).collect())
}

/// The values `kind` is tried with: for every kind, ints, floats, strings, tuples and
/// operator lists (the wrong kinds among them); for kinds that take tuples, tuples of
/// every length they might be given, their items at the edges.
pub(crate) fn extremes(kind: Kind) -> Vec<Value> {
    let invert = Op::call("RandomInvert", vec![], vec![]).unwrap();
    let blur = Op::call("GaussianBlur", vec![Value::Int(1023)], vec![]).unwrap();
    let mut values = vec![
        Value::None,
        Value::Bool(true),
        Value::Bool(false),
        Value::Tuple(vec![]),
        Value::Ops(vec![]),
        Value::Ops(vec![invert.clone()]),
        Value::Ops(vec![blur.clone(), invert, blur]),
    ];
    values.extend(INTS.map(Value::Int));
    values.extend(FLOATS.map(Value::Float));
    values.extend(CHOICES.map(Value::from));
    let pairs = || ITEMS.into_iter().flat_map(|a| ITEMS.map(|b| tuple([a, b])));
    match kind {
        Kind::Padding => {
            for a in SIDES {
                values.push(Value::Tuple(vec![Value::Int(a)]));
                values.push(Value::Tuple(vec![Value::Int(a); 2]));
                values.push(Value::Tuple(vec![Value::Int(a); 3]));
                values.push(Value::Tuple(vec![Value::Int(a); 4]));
                values.push(Value::Tuple(vec![Value::Int(0), Value::Int(a)]));
            }
        }
        Kind::Size | Kind::Square | Kind::Sides => {
            for a in SIDES {
                values.extend(SIDES.map(|b| Value::Tuple(vec![Value::Int(a), Value::Int(b)])));
                values.push(Value::Tuple(vec![Value::Int(a)]));
                values.push(Value::Tuple(vec![Value::Int(a); 3]));
            }
            values.push(tuple([7.0, 7.0]));
        }
        Kind::Range
        | Kind::FloatOrRange
        | Kind::Jitter
        | Kind::Angle
        | Kind::OptionalPair
        | Kind::Weights => {
            values.extend(pairs());
            values.extend(ITEMS.map(|a| tuple([a])));
            values.extend(ITEMS.map(|a| tuple([0.5, 0.5, a])));
            values.push(tuple([f64::MAX, f64::MAX]));
        }
        Kind::Shear => {
            values.extend(pairs());
            values.extend(
                ITEMS
                    .into_iter()
                    .flat_map(|a| ITEMS.map(|b| tuple([a, a, b, b]))),
            );
            values.extend(ITEMS.map(|a| tuple([a, a, a])));
        }
        Kind::Rgb | Kind::Fill | Kind::OptionalFill | Kind::Erase => {
            values.extend(ITEMS.map(|a| tuple([a])));
            values.extend(ITEMS.map(|a| tuple([a; 3])));
            values.extend(ITEMS.map(|a| tuple([0.5, 0.5, a])));
            values.extend(pairs().take(9));
        }
        Kind::Int
        | Kind::Float
        | Kind::OptionalFloat
        | Kind::OptionalInt
        | Kind::DerivedInt
        | Kind::DerivedFloat
        | Kind::Choice
        | Kind::OptionalChoice
        | Kind::Bool
        | Kind::Ops => {}
    }
    values
}

/// The largest int an accepted operator holds: no count or size of any operator comes
/// near it while a sample's work stays bounded (magnitude bins, the largest, stop at it).
const LARGEST_INT: i64 = 1 << 24;

/// The ints `value` holds.
fn ints(value: &Value) -> Vec<i64> {
    match value {
        Value::Int(v) => vec![*v],
        Value::Tuple(items) => items.iter().flat_map(ints).collect(),
        _ => Vec::new(),
    }
}

/// A small JPEG, 40 × 30.
fn jpeg() -> Vec<u8> {
    let pixels: Vec<u8> = (0..40 * 30 * 3).map(|i| (i * 37 % 251) as u8).collect();
    encode_jpeg(&pixels, 40, 30, EncodePixels::Rgb, 90, false).unwrap()
}

/// Checks the bounds of `op`'s arguments, then prepares `jpeg` through a pipeline that
/// runs it (a crop to 24 × 16 around it), once as f32 and once as u8 where it takes u8.
fn runs(op: &Op, jpeg: &[u8]) {
    let geometric = matches!(op.stage(), Stage::Geometry(_));
    for (param, value) in op.args() {
        let kind = op.declaration().params.iter().find(|p| p.name == param);
        // A geometric operator's sizes are only planned here (the crop after it sizes the
        // output); how large an output may be is the loader's check, of a batch's bytes.
        if geometric
            && matches!(
                kind.map(|p| p.kind),
                Some(Kind::Size | Kind::Square | Kind::Sides)
            )
        {
            continue;
        }
        for v in ints(&value) {
            assert!(v <= LARGEST_INT, "{op}: {param} holds {v}");
        }
    }
    let crop = Op::center_crop(16, 24);
    // An operator that pads to its size makes the output's size: nothing but a flip may
    // follow it.
    let pads = matches!(op.stage(),
        Stage::Geometry(g) if matches!(g.output_size(), OutputSize::Canvas(..)));
    let ops = if pads {
        vec![op.clone()]
    } else if geometric {
        vec![op.clone(), crop]
    } else {
        vec![crop, op.clone()]
    };
    for dtype in [DType::F32, DType::U8] {
        let Ok(pipeline) = ImagePipeline::new(ops.clone(), dtype, Layout::Chw) else {
            // An output past an image's pixels is refused, whatever the type.
            assert!(pads || dtype == DType::U8, "{op} makes no f32 pipeline");
            continue;
        };
        // Past this, a size is the loader's to refuse, by a batch's bytes.
        if pads && pipeline.sample_bytes() > 1 << 26 {
            continue;
        }
        let mut out = vec![0u8; pipeline.sample_bytes()];
        let mut preparer = pipeline.preparer().unwrap();
        for seed in 0..2 {
            preparer
                .prepare(jpeg, &mut Rng::new(seed), &mut out)
                .unwrap_or_else(|e| panic!("{op}: {e}"));
        }
    }
}

#[test]
fn every_argument_at_its_edges_is_refused_or_runs_bounded() {
    let jpeg = jpeg();
    let (mut accepted, mut refused) = (0, 0);
    for declaration in DECLARATIONS {
        for param in declaration.params {
            for value in extremes(param.kind) {
                let mut keywords: Keywords = declaration
                    .params
                    .iter()
                    .filter(|p| p.default.is_none() && p.name != param.name)
                    .map(|p| (p.name.to_string(), super::tests::example(p.kind)))
                    .collect();
                keywords.push((param.name.to_string(), value.clone()));
                let case = format!("{}({}={value})", declaration.name, param.name);
                let made = catch_unwind(AssertUnwindSafe(|| declaration.call(vec![], keywords)))
                    .unwrap_or_else(|_| panic!("{case} panicked"));
                match made {
                    Ok(op) => {
                        catch_unwind(AssertUnwindSafe(|| runs(&op, &jpeg)))
                            .unwrap_or_else(|_| panic!("{case}, made, failed to run"));
                        accepted += 1;
                    }
                    Err(Error::Config(message)) => {
                        assert!(message.starts_with(declaration.name), "{case}: {message}");
                        let names_one = declaration.params.iter().any(|p| message.contains(p.name));
                        assert!(names_one, "{case}: {message}");
                        refused += 1;
                    }
                    Err(other) => panic!("{case}: not a config error: {other:?}"),
                }
            }
        }
    }
    // Both outcomes are exercised: the edges reach past every bound and within it.
    assert!(
        accepted > 500 && refused > 5000,
        "{accepted} accepted, {refused} refused"
    );
}
