//! Limits every part relies on, and the one checked size arithmetic.
//!
//! Validation refuses modules past these limits (E0057, E0058, E0059), so
//! everything after it (typing, printing, lowering, the interpreter, the
//! emitters) may recurse over a kernel body and multiply extents without
//! further checks. docs/errors.md and docs/text-format.md state them.

use super::{Mesh, RefType};

/// Deepest nesting of blocks and expressions, in the levels of
/// docs/text-format.md ("Nesting"): the kernel body is level 1, each `if` or
/// `for` body one more; in a statement, each operator, call, cast, load and
/// pair of parentheses is a level and each leaf is one.
///
/// Far above what kernels need (a sum of 200 terms written flat is 201
/// levels), and low enough that every recursive walk over a valid body stays
/// within a 2 MiB test-thread stack in a debug build.
pub const MAX_NESTING: usize = 256;

/// Bodies nested at most this deep are walked on the caller's stack; deeper
/// ones (up to [`MAX_NESTING`]) on a thread of [`NESTING_STACK_BYTES`]
/// ([`with_nesting_stack`]). A debug build needs up to about 15 KiB of stack
/// per level in the parser, validation and the interpreter's compiler
/// (measured), so 64 levels stay within a 2 MiB test thread.
pub const INLINE_NESTING: usize = 64;

/// Stack of the thread that walks bodies nested deeper than
/// [`INLINE_NESTING`]: 64 MiB, four times what a debug build needs at
/// [`MAX_NESTING`] (reserved address space; pages are touched only as used).
pub const NESTING_STACK_BYTES: usize = 64 << 20;

/// Runs `f` on a thread with [`NESTING_STACK_BYTES`] of stack and returns
/// its result, so that a walk over a body nested up to [`MAX_NESTING`] is
/// safe whatever the caller's stack.
pub fn with_nesting_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    on_large_stack(NESTING_STACK_BYTES, f)
}

/// Runs `f` on a scoped thread with `stack_bytes` of stack (reserved address
/// space; pages are committed only as used) and returns its result: the one
/// way every stage that recurses over deep programs (parser, validator,
/// interpreter compile, the emitters, NVRTC) keeps off the caller's stack.
/// Runs `f` here when no thread can be started. A panic in `f` is resumed here.
pub fn on_large_stack<T: Send>(stack_bytes: usize, f: impl FnOnce() -> T + Send) -> T {
    let mut task = Some(f);
    let slot = &mut task;
    let result = std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("mpmd-deep".into())
            .stack_size(stack_bytes)
            .spawn_scoped(scope, || slot.take().map(|f| f()));
        spawned.ok().map(|handle| {
            handle
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    });
    match (result.flatten(), task) {
        (Some(value), _) => value,
        (None, Some(f)) => f(),
        (None, None) => unreachable!("the task either ran on the thread or is still here"),
    }
}

/// Most blocks of one mesh (the product of its grid and cluster axes): the
/// linear block id is a `u32` on every backend.
pub const MAX_BLOCKS: u64 = u32::MAX as u64;

/// Largest buffer, in bytes: one `gmem` or `sem` ref with all its instances
/// (one per block of its owner mesh). 1 TiB: more than any device has, and
/// small enough that offsets and sums of buffers never overflow a `u64`.
pub const MAX_BUFFER_BYTES: u64 = 1 << 40;

/// Largest `local` array, in bytes per thread: CUDA's limit on local memory
/// per thread (512 KiB).
pub const MAX_LOCAL_BYTES: u64 = 512 * 1024;

/// The product of `factors`, or `None` when it does not fit in a `u64`.
pub fn checked_product(factors: impl IntoIterator<Item = u64>) -> Option<u64> {
    factors
        .into_iter()
        .try_fold(1u64, |acc, f| acc.checked_mul(f))
}

/// The product of `factors` in 128 bits, or `None` past that; for messages
/// that print a size that does not fit in a `u64`.
pub fn wide_product(factors: impl IntoIterator<Item = u64>) -> Option<u128> {
    factors
        .into_iter()
        .try_fold(1u128, |acc, f| acc.checked_mul(u128::from(f)))
}

impl RefType {
    /// Elements in one instance, or `None` when the count does not fit in a
    /// `u64` (validation refuses such refs).
    pub fn checked_len(&self) -> Option<u64> {
        checked_product(self.shape.iter().map(|&d| u64::from(d)))
    }

    /// Bytes of one instance (2 an element for `f16`/`bf16`, else 4), or
    /// `None` past a `u64`.
    pub fn checked_bytes(&self) -> Option<u64> {
        self.checked_len()?
            .checked_mul(u64::from(self.elem.byte_size()))
    }
}

impl Mesh {
    /// Blocks of the mesh, or `None` when the count does not fit in a `u64`
    /// (validation refuses meshes with more than [`MAX_BLOCKS`]).
    pub fn checked_block_count(&self) -> Option<u64> {
        checked_product(self.block_axes().map(|a| u64::from(a.size)))
    }
}

/// Elements of a buffer holding `instances` instances of `ty`, or `None`
/// when that passes [`MAX_BUFFER_BYTES`] (or a `u64`).
pub fn buffer_len(ty: &RefType, instances: u64) -> Option<u64> {
    let len = ty.checked_len()?.checked_mul(instances)?;
    (len.checked_mul(u64::from(ty.elem.byte_size()))? <= MAX_BUFFER_BYTES).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{gmem, ScalarType};

    #[test]
    fn sizes_that_wrap_a_u64_are_none() {
        // 20 * 5581 * 8681 * 49477 * 384773 = 2^64 + 4.
        let huge = gmem(ScalarType::U32, [20, 5581, 8681, 49477, 384773]);
        assert_eq!(huge.checked_len(), None);
        assert_eq!(huge.len(), u64::MAX);
        assert_eq!(
            wide_product(huge.shape.iter().map(|&d| u64::from(d))),
            Some((1u128 << 64) + 4)
        );
        let fits = gmem(ScalarType::U32, [1 << 16, 1 << 16]);
        assert_eq!(fits.checked_len(), Some(1 << 32));
        assert_eq!(buffer_len(&fits, 64), Some(1 << 38));
        assert_eq!(buffer_len(&fits, 65), None);
    }
}
