//! Kernels compiled twice: for the CPU the build targets, and for AVX2, chosen at run time.
//!
//! The operators' kernels are plain loops written to be vectorised; the baseline x86-64
//! target has only SSE2 (two doubles a vector, `floor` a library call). [`dispatched`]
//! makes a kernel's entry point run a copy of it compiled with AVX2 where the CPU has
//! it. The copies compute the same values: vector instructions round each lane as the
//! scalar ones do, and Rust neither fuses multiplies into adds nor reorders sums without
//! being asked. A kernel whose reference fuses a multiply into an add (PyTorch's
//! `add_(…, alpha=…)`) says so through [`fused`], generic over `FMA`: the copy for CPUs
//! with FMA runs the instruction, the others the same operation through 64-bit floats,
//! exact for the operands these kernels pass; either way one rounding, the same value.

/// `fn name(args) => body`: a function `name` that runs `body(args)` (an
/// `#[inline(always)]` function) compiled with AVX2 where the CPU has it, else as built.
/// `=> body::<FMA>`: `body` takes `const FMA: bool` for [`fused`], true in a copy compiled
/// with AVX2 and FMA, where the CPU has both.
macro_rules! dispatched {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $body:ident) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) {
                    $body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2, checked just above; `avx2` is safe code
                    // compiled with it.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $body:ident::<FMA>) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2_fma($($arg: $ty),*) {
                    $body::<true>($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) {
                    $body::<false>($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    if std::arch::is_x86_feature_detected!("fma") {
                        // SAFETY: the CPU has AVX2 and FMA, checked just above;
                        // `avx2_fma` is safe code compiled with them.
                        return unsafe { avx2_fma($($arg),*) };
                    }
                    // SAFETY: the CPU has AVX2, checked just above; `avx2` is safe code
                    // compiled with it.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body::<false>($($arg),*)
        }
    };
}

/// `a + b·c` rounded once to 32 bits, as a fused multiply-add computes it: by the
/// instruction where `FMA` (a copy compiled with it: without, `mul_add` is a library
/// call), else through 64-bit floats, where the product of two 32-bit floats is exact and
/// so, for the operands each caller passes (it says why), is the sum.
#[inline(always)]
pub(super) fn fused<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        b.mul_add(c, a)
    } else {
        (f64::from(a) + f64::from(b) * f64::from(c)) as f32
    }
}

pub(super) use dispatched;

/// `x as u8` (truncated toward zero, saturated at 0 and 255, NaN to 0) in a form the
/// compiler vectorises. Rust's saturating cast becomes one scalar conversion a lane, which
/// made it the largest cost of the lighter kernels; the unchecked conversion of a value
/// already clamped is one instruction for a vector of them.
#[inline(always)]
#[allow(clippy::manual_clamp)]
pub(super) fn cast_u8(x: f32) -> u8 {
    // `max` and `min`, unlike `clamp`, return the other operand for a NaN.
    let x = x.max(0.0).min(255.0);
    // SAFETY: `x` is finite and within [0, 255], inside i32's range.
    unsafe { x.to_int_unchecked::<i32>() as u8 }
}

/// [`cast_u8`] of a 64-bit float.
#[inline(always)]
pub(super) fn cast_u8_f64(x: f64) -> u8 {
    clamped_i32(x) as u8
}

/// [`cast_u8_f64`] of each of `N` values: the conversions first, then the narrowing, so
/// that each is one vector instruction (lane by lane, the compiler converts and packs each
/// value alone).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub(super) fn cast_u8_f64_lanes<const N: usize>(v: [f64; N]) -> [u8; N] {
    let mut ints = [0i32; N];
    for k in 0..N {
        ints[k] = clamped_i32(v[k]);
    }
    let mut out = [0u8; N];
    for k in 0..N {
        out[k] = ints[k] as u8;
    }
    out
}

/// `x` clamped to [0, 255] (NaN to 0) and truncated, as an `i32`.
#[inline(always)]
#[allow(clippy::manual_clamp)]
fn clamped_i32(x: f64) -> i32 {
    // `max` and `min`, unlike `clamp`, return the other operand for a NaN.
    let x = x.max(0.0).min(255.0);
    // SAFETY: `x` is finite and within [0, 255], inside i32's range.
    unsafe { x.to_int_unchecked::<i32>() }
}
