//! Every `ALL` list (the IR's operator and kind enums, `ErrorClass`) names
//! each variant of its enum once, in declaration order. Each `position`
//! below is an exhaustive match: a new variant fails to compile here; give it
//! the next position and list it at that index of its `ALL`. The tests check
//! that each `ALL` lists every variant at its position: none twice, none out
//! of order, none skipped before the last one listed.

use crate::backend::ErrorClass;
use crate::ir::*;

/// Asserts that `all` holds the variant at position `i` at index `i`: no
/// variant twice, none out of order, none between two listed ones missing.
fn assert_listed_in_order<T: Copy + std::fmt::Debug>(all: &[T], position: impl Fn(T) -> usize) {
    let positions: Vec<usize> = all.iter().map(|&v| position(v)).collect();
    assert_eq!(positions, (0..all.len()).collect::<Vec<_>>(), "{all:?}");
}

#[test]
fn scalar_types() {
    use ScalarType::*;
    let position = |t| match t {
        F32 => 0,
        I32 => 1,
        U32 => 2,
        Bool => 3,
        F16 => 4,
        BF16 => 5,
    };
    assert_listed_in_order(&ScalarType::ALL, position);
}

#[test]
fn memory_spaces() {
    use MemorySpace::*;
    let position = |s| match s {
        Gmem => 0,
        Smem => 1,
        Sem => 2,
        Local => 3,
    };
    assert_listed_in_order(&MemorySpace::ALL, position);
}

#[test]
fn unary_ops() {
    use UnaryOp::*;
    let position = |op| match op {
        Neg => 0,
        Not => 1,
        BitNot => 2,
    };
    assert_listed_in_order(&UnaryOp::ALL, position);
}

#[test]
fn binary_ops() {
    use BinaryOp::*;
    let position = |op| match op {
        Add => 0,
        Sub => 1,
        Mul => 2,
        Div => 3,
        Rem => 4,
        BitAnd => 5,
        BitOr => 6,
        BitXor => 7,
        Shl => 8,
        Shr => 9,
        LogicAnd => 10,
        LogicOr => 11,
        Eq => 12,
        Ne => 13,
        Lt => 14,
        Le => 15,
        Gt => 16,
        Ge => 17,
    };
    assert_listed_in_order(&BinaryOp::ALL, position);
}

/// The named subsets are the operators with their property, in `ALL`'s order.
#[test]
fn binary_op_subsets() {
    let comparisons: Vec<BinaryOp> = BinaryOp::ALL
        .into_iter()
        .filter(|op| {
            matches!(
                op,
                BinaryOp::Eq
                    | BinaryOp::Ne
                    | BinaryOp::Lt
                    | BinaryOp::Le
                    | BinaryOp::Gt
                    | BinaryOp::Ge
            )
        })
        .collect();
    assert_eq!(comparisons, BinaryOp::COMPARISONS);
    // Arithmetic and bitwise: neither a comparison nor `&&`/`||`.
    let compound: Vec<BinaryOp> = BinaryOp::ALL
        .into_iter()
        .filter(|op| !op.is_comparison() && !matches!(op, BinaryOp::LogicAnd | BinaryOp::LogicOr))
        .collect();
    assert_eq!(compound, BinaryOp::COMPOUND);
}

#[test]
fn math_functions() {
    use MathFn::*;
    let position = |f| match f {
        Exp => 0,
        Log => 1,
        Sqrt => 2,
        Rsqrt => 3,
        Sin => 4,
        Cos => 5,
        Tanh => 6,
        Abs => 7,
        Min => 8,
        Max => 9,
        Floor => 10,
        Ceil => 11,
        Fma => 12,
        Pow => 13,
        Popcount => 14,
        Clz => 15,
        Ffs => 16,
        Brev => 17,
    };
    assert_listed_in_order(&MathFn::ALL, position);
}

#[test]
fn atomic_ops() {
    use AtomicOp::*;
    let position = |op| match op {
        Load => 0,
        Store => 1,
        Add => 2,
        Min => 3,
        Max => 4,
        And => 5,
        Or => 6,
        Xor => 7,
        Exchange => 8,
        CompareExchange => 9,
    };
    assert_listed_in_order(&AtomicOp::ALL, position);
}

#[test]
fn semaphore_ops() {
    use SemOp::*;
    let position = |op| match op {
        Signal => 0,
        Wait => 1,
        WaitNodec => 2,
    };
    assert_listed_in_order(&SemOp::ALL, position);
}

#[test]
fn mma_operands() {
    use mma::Operand::*;
    let position = |o| match o {
        A => 0,
        B => 1,
        BKMajor => 2,
    };
    assert_listed_in_order(&mma::Operand::ALL, position);
}

#[test]
fn operand_kinds() {
    use OperandKind::*;
    let position = |k| match k {
        Input => 0,
        Output => 1,
        Scalar => 2,
        Scratch => 3,
    };
    assert_listed_in_order(&OperandKind::ALL, position);
}

#[test]
fn error_classes() {
    use ErrorClass::*;
    let position = |c| match c {
        Deadlock => 0,
        OutOfBounds => 1,
        UninitializedRead => 2,
        DataRace => 3,
        WaitTimeout => 4,
        BadSemaphoreAmount => 5,
        LoopLimit => 6,
        Nondeterministic => 7,
        Unsupported => 8,
        Refused => 9,
    };
    assert_listed_in_order(&ErrorClass::ALL, position);
}
