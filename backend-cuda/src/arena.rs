//! Where a prepared plan's buffers live during a call.
//!
//! One device **arena** holds the inputs, scratch buffers, large outputs and
//! the control block; one block of page-locked host memory **mapped** into
//! the device's address space holds the call's status word and the small
//! outputs that no program loads. The kernel stores those outputs straight
//! into host memory and sets the status word only when it records an error,
//! so an error-free call whose outputs are all mapped copies nothing back:
//! launch and synchronise, as a raw launch does.

use std::collections::BTreeSet;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::{CudaContext, DriverError, PinnedHostSlice};
use mpmd_core::bind::{provider, Provider};
use mpmd_core::ir::ScalarType;
use mpmd_core::plan::{BufferId, BufferInit, BufferPlan, LaunchPlan};

use crate::control;

/// Outputs mapped into host memory, in total at most this many words: the
/// GPU writes them across the bus, which beats a copy for small outputs.
pub const MAPPED_OUTPUT_MAX_WORDS: usize = 16 * 1024;

/// Word of the mapped block the kernel sets to 1 when it records an error.
pub const STATUS_WORD: usize = 0;

/// Buffers start on 256-byte boundaries, as separate allocations would.
const ALIGN_WORDS: usize = 64;

fn align_words(offset: usize) -> usize {
    offset.div_ceil(ALIGN_WORDS) * ALIGN_WORDS
}

/// Words that hold `len` elements of `elem` packed (docs/design.md: 16-bit
/// floats take 2 bytes, element `i` in word `i / 2`, the low half for even
/// `i`), as [`mpmd_core::HostTensor::words`] holds them; saturates.
pub fn packed_words(elem: ScalarType, len: u64) -> usize {
    usize::try_from(mpmd_core::host::words_for(elem, len)).unwrap_or(usize::MAX)
}

/// Words a plan buffer takes in device memory: its packed elements, at
/// least one word (an empty buffer still gets an address).
pub fn buffer_words(buffer: &BufferPlan) -> usize {
    packed_words(buffer.ty.elem, buffer.len).max(1)
}

/// Where one plan buffer lives during a call: words of the device arena or
/// of the host-mapped block (not the emitter's `CPlace` of one access).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferPlacement {
    Device(Range<usize>),
    Mapped(Range<usize>),
}

/// The placement of a plan's buffers. Arena outputs come first, so one copy
/// reads them all back; the control block follows them.
#[derive(Clone, Debug)]
pub struct ArenaLayout {
    /// Per plan buffer; `None` for device-resident refs.
    places: Vec<Option<BufferPlacement>>,
    /// Arena word offset of the control block.
    pub control: usize,
    /// Arena words copied back after a launch (the arena's outputs).
    pub readback: usize,
    /// Words of the arena.
    pub device_words: usize,
    /// Words of the mapped block (the status word, then mapped outputs).
    pub mapped_words: usize,
}

impl ArenaLayout {
    /// `loaded`: the buffers some program loads from (they stay on the
    /// device, where loads are fast). `map_outputs` false (the platform
    /// cannot map host memory): every buffer on the device.
    pub fn new(plan: &LaunchPlan, loaded: &BTreeSet<BufferId>, map_outputs: bool) -> Self {
        Self::placing(plan, loaded, map_outputs, |buffer| {
            !matches!(buffer.init, BufferInit::Resident(_))
        })
    }

    /// The layout of a run on caller memory (`CudaBackend::enqueue`): only
    /// the buffers the backend provides (scratch, semaphores, `zeroed`
    /// inputs) have a place, in the arena; inputs, outputs and residents
    /// are the caller's or the backend's residents. The mapped block (when
    /// `map_status`) holds only the status word.
    pub fn for_caller_memory(plan: &LaunchPlan, map_status: bool) -> Self {
        let mut layout = Self::placing(plan, &BTreeSet::new(), false, |buffer| {
            provider(buffer) == Provider::Backend
        });
        if !map_status {
            layout.mapped_words = 0;
        }
        layout
    }

    /// Places the buffers `placed` accepts (see [`ArenaLayout::new`]).
    fn placing(
        plan: &LaunchPlan,
        loaded: &BTreeSet<BufferId>,
        map_outputs: bool,
        placed: impl Fn(&BufferPlan) -> bool,
    ) -> Self {
        let words = |index: BufferId| buffer_words(plan.buffer(index));
        let in_memory = plan.buffer_ids().filter(|&i| placed(plan.buffer(i)));
        let mut mapped_outputs = 0usize;
        let mapped: BTreeSet<BufferId> = in_memory
            .clone()
            .filter(|&index| {
                let buffer = plan.buffer(index);
                let fits = mapped_outputs + words(index) <= MAPPED_OUTPUT_MAX_WORDS;
                let mappable = map_outputs
                    && buffer.output.is_some()
                    && !buffer.atomic
                    && !loaded.contains(&index)
                    && matches!(buffer.init, BufferInit::Zeroed | BufferInit::Uninitialized);
                if mappable && fits {
                    mapped_outputs += words(index);
                }
                mappable && fits
            })
            .collect();
        let (arena_outputs, others): (Vec<BufferId>, Vec<BufferId>) = in_memory
            .filter(|index| !mapped.contains(index))
            .partition(|&index| plan.buffer(index).output.is_some());

        let mut places = vec![None; plan.buffers.len()];
        // Lays `indices` out one after another from word `start`; returns the end.
        let mut stack =
            |indices: &mut dyn Iterator<Item = BufferId>, start: usize, mapped: bool| {
                let mut next = start;
                for index in indices {
                    let range = next..next + words(index);
                    next = align_words(range.end);
                    places[index.index()] = Some(if mapped {
                        BufferPlacement::Mapped(range)
                    } else {
                        BufferPlacement::Device(range)
                    });
                }
                next
            };
        let mapped_words = stack(
            &mut mapped.iter().copied(),
            align_words(STATUS_WORD + 1),
            true,
        );
        // Arena outputs first (one copy reads them back), then the control
        // block, then everything else.
        let readback = stack(&mut arena_outputs.into_iter(), 0, false);
        let control = readback;
        let device_words = stack(
            &mut others.into_iter(),
            align_words(control + control::WORDS),
            false,
        );
        ArenaLayout {
            places,
            control,
            readback,
            device_words,
            mapped_words,
        }
    }

    pub fn place(&self, buffer: BufferId) -> Option<&BufferPlacement> {
        self.places[buffer.index()].as_ref()
    }

    /// The arena words of a buffer placed there.
    pub fn device_range(&self, buffer: BufferId) -> Option<Range<usize>> {
        match self.place(buffer)? {
            BufferPlacement::Device(range) => Some(range.clone()),
            BufferPlacement::Mapped(_) => None,
        }
    }

    /// The control block's arena words.
    pub fn control_words(&self) -> Range<usize> {
        self.control..self.control + control::WORDS
    }
}

/// Page-locked host memory, optionally mapped into the device's address
/// space, with its host (and device) address taken once.
pub struct HostBlock {
    /// Owns the allocation (freed on drop).
    _memory: PinnedHostSlice<u32>,
    host: NonNull<u32>,
    len: usize,
    /// The device address of word 0 (0 when not mapped).
    device: u64,
}

// SAFETY: the block owns its allocation like a `Box<[u32]>` (no other
// handle to it exists on the host); the pointer is only dereferenced through
// `&self` / `&mut self`, under the `unsafe fn`s' contract that no device work
// writes it meanwhile, and device writes stay inside the block's buffers
// (every kernel write is bounded to its ref, in fast mode too).
unsafe impl Send for HostBlock {}
// SAFETY: shared access only reads the block (`words`, `read_word`) or
// writes one word (`clear_word`), each an `unsafe fn` whose contract is that
// nothing else writes that memory meanwhile.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    pub fn new(context: &Arc<CudaContext>, len: usize, mapped: bool) -> Result<Self, DriverError> {
        let flags = if mapped {
            cudarc::driver::sys::CU_MEMHOSTALLOC_DEVICEMAP
        } else {
            0
        };
        // SAFETY: plain page-locked memory (not write-combined, so host reads
        // are cached); zeroed below before anyone reads it.
        let mut memory = unsafe { context.alloc_pinned_with_flags::<u32>(len.max(1), flags) }?;
        let host = NonNull::new(memory.as_mut_ptr()?).expect("cudarc checks for null");
        // SAFETY: `len.max(1)` words were just allocated at `host`.
        unsafe { std::ptr::write_bytes(host.as_ptr(), 0, len.max(1)) };
        let mut device = 0u64;
        if mapped {
            // SAFETY: `host` was allocated with CU_MEMHOSTALLOC_DEVICEMAP in
            // the current context.
            unsafe {
                cudarc::driver::sys::cuMemHostGetDevicePointer_v2(
                    &mut device,
                    host.as_ptr().cast(),
                    0,
                )
            }
            .result()?;
        }
        Ok(HostBlock {
            _memory: memory,
            host,
            len: len.max(1),
            device,
        })
    }

    /// The device address of word `word` (mapped blocks only).
    pub fn device_address(&self, word: usize) -> u64 {
        debug_assert!(self.device != 0 && word < self.len);
        self.device + (word * 4) as u64
    }

    /// # Safety
    /// No kernel or copy that writes this block may be in flight (the
    /// caller synchronised the stream after the last one).
    pub unsafe fn words(&self, range: Range<usize>) -> &[u32] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: the range lies inside the allocation (asserted); the
        // caller guarantees that nothing writes it meanwhile.
        unsafe { std::slice::from_raw_parts(self.host.as_ptr().add(range.start), range.len()) }
    }

    /// Word `word` as the device last wrote it (a volatile read: the device
    /// writes it behind the compiler's back).
    ///
    /// # Safety
    /// The word is written, if at all, by device work that has finished or
    /// writes it whole (a status word set by a kernel).
    pub unsafe fn read_word(&self, word: usize) -> u32 {
        assert!(word < self.len);
        // SAFETY: inside the allocation (asserted); aligned u32 memory.
        unsafe { std::ptr::read_volatile(self.host.as_ptr().add(word)) }
    }

    /// Sets word `word` to zero.
    ///
    /// # Safety
    /// No device work that reads or writes the block is in flight, and no
    /// slice from [`HostBlock::words`] is alive.
    pub unsafe fn clear_word(&self, word: usize) {
        assert!(word < self.len);
        // SAFETY: inside the allocation (asserted); the caller excludes
        // every other access meanwhile.
        unsafe { std::ptr::write_volatile(self.host.as_ptr().add(word), 0) }
    }

    /// # Safety
    /// As [`HostBlock::words`]: nothing on the device reads or writes the
    /// block meanwhile.
    pub unsafe fn words_mut(&mut self, range: Range<usize>) -> &mut [u32] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: the range lies inside the allocation (asserted), `&mut
        // self` excludes other host borrows, and the caller guarantees that
        // the device does not touch it meanwhile.
        unsafe { std::slice::from_raw_parts_mut(self.host.as_ptr().add(range.start), range.len()) }
    }
}
