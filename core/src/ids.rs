//! Typed indices for the map's and the plan's index spaces (re-exported by
//! [`crate::plan`]; below validation, whose facts name programs and operands), so that an index of one list
//! can never be used for another. Each is a plain position (`index()`);
//! `Debug` and `Display` print just the number, as the `usize` did.

use std::fmt;

macro_rules! plan_index {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(usize);

        impl $name {
            pub const fn new(index: usize) -> Self {
                $name(index)
            }

            /// The position in the list this indexes.
            pub const fn index(self) -> usize {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

plan_index! {
    /// A program: its position in `MpmdMap::programs` (map order).
    ProgramId
}

plan_index! {
    /// A launch unit: its position in `LaunchPlan::units` (plan order).
    UnitId
}

plan_index! {
    /// A device buffer after alias resolution: its position in
    /// `LaunchPlan::buffers`.
    BufferId
}

plan_index! {
    /// A map operand: its position in `LaunchPlan::operands`, which is the
    /// map's operand order and every program kernel's parameter order.
    OperandId
}

/// `(id, item)` for every item of a list indexed by `I`.
pub(crate) fn enumerate<'a, I: 'a, T>(
    items: &'a [T],
    id: fn(usize) -> I,
) -> impl ExactSizeIterator<Item = (I, &'a T)> + DoubleEndedIterator + Clone + 'a {
    items.iter().enumerate().map(move |(i, item)| (id(i), item))
}
