//! Memory the engine owns: a cache of large buffers, reused from step to step.
//!
//! A training step builds a tape, runs the forward and backward and drops it: its node values,
//! its kernels' saved state and the gradients are tens of megabytes in a few dozen buffers of
//! at least [`LARGE`] bytes, the same sizes at every step. Taking them from the system
//! allocator at every step frees them to it at every step, and what it does with them (trim
//! the heap, unmap a thread's heap, give the pages back zeroed) is what a step then waits on.
//! Here the engine keeps the large buffers its steps free, by size class, and hands them out
//! again: after the first steps (the high-water mark of each size), a step allocates nothing
//! large, in the binary and for any library caller alike. The cache is one for the process,
//! shared by the worker threads behind a lock (a few dozen takes and gives per micro-batch):
//! a buffer one thread fills (a kernel chunk's output, a micro-batch's gradient summed by the
//! caller) and another frees comes back to whichever thread asks next.
//!
//! * [`take`] returns an empty `Vec<T>` with room for `n` elements; [`uninit`], [`filled`],
//!   the array builders ([`map`], [`zip_map`], [`full`], …) and the scratch vector [`Buf`]
//!   build on it. Below [`LARGE`] bytes they are plain allocations.
//! * [`give`] returns a buffer to the cache (below [`LARGE`], or when the cache holds
//!   [`MAX_HELD`] bytes, it is freed). The engine gives back what it takes: a tape's values
//!   and gradients when it drops, a kernel's saved state and scratch when they drop, a
//!   micro-batch's inputs and gradients once they are summed. What is not given back is
//!   freed as usual; [`release`] frees the cache itself.
//! * Sizes are rounded up to a class with four significant bits (at most 12.5% more room), so
//!   micro-batches of slightly different shapes reuse one another's buffers; a request whose
//!   class has no free block takes one of a larger class, up to twice its size, before it
//!   allocates (a micro-batch trimmed to a width not seen before reuses the wider ones').
//! * A miss provisions its class for every thread of the rayon pool (see [`take`]): which
//!   step brings the workers' peaks together depends on how they interleave, and the cache
//!   is sized for the worst of them from the first miss on.
//!
//! The cache is plain memory: no allocator internals are read, and a buffer's contents are
//! whatever the last user left (callers write before they read: [`take`]'s vector is empty,
//! [`uninit`]'s elements are `MaybeUninit`, [`filled`] writes every element).

use std::alloc::Layout;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

/// Buffers of at least this many bytes are cached.
pub const LARGE: usize = 64 << 10;

/// Most bytes the cache holds; a buffer given back beyond it is freed.
pub const MAX_HELD: usize = 2 << 30;

/// A cached block: its address and layout (the size is a class size).
struct Block {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a cached block is plain memory owned by the cache alone (no element lives in it), so
// it may be handed to, and freed by, any thread.
unsafe impl Send for Block {}

/// The blocks of one layout: those free in the cache, how many are handed out, the most one
/// thread has held at once (of blocks asked for in this class, lent ones included), and how
/// many blocks have come back ([`give`]) and been provisioned ([`spare`]) since the start.
struct Bin {
    layout: Layout,
    free: Vec<Block>,
    out: usize,
    peak: usize,
    gives: usize,
    spared: usize,
}

/// The cached blocks, by layout (a few dozen distinct sizes: a linear search), and who holds
/// the blocks handed out.
#[derive(Default)]
struct Cache {
    bins: Vec<Bin>,
    held: usize,
    /// The thread that took each block handed out, by address, and the block's layout.
    owner: Vec<(usize, usize, Layout)>,
    /// Per thread and layout with blocks out, how many that thread took and holds now.
    holds: Vec<(usize, Layout, usize)>,
}

/// Blocks handed out and never given back (kept by a caller, or freed as an ordinary
/// vector) leave their entries in [`Cache::owner`]; past this many, the tallies restart.
const MAX_TRACKED: usize = 1 << 16;

impl Cache {
    fn bin(&mut self, layout: Layout) -> &mut Bin {
        let at = match self.bins.iter().position(|b| b.layout == layout) {
            Some(at) => at,
            None => {
                self.bins.push(Bin {
                    layout,
                    free: Vec::new(),
                    out: 0,
                    peak: 0,
                    gives: 0,
                    spared: 0,
                });
                self.bins.len() - 1
            }
        };
        &mut self.bins[at]
    }

    /// A free block of the smallest larger class of `layout`'s alignment, at most twice its
    /// size, whose size is a multiple of `elem` bytes (so that it holds whole elements and
    /// comes back to its own bin).
    fn larger_free(&mut self, layout: Layout, elem: usize) -> Option<Block> {
        let bin = self
            .bins
            .iter_mut()
            .filter(|b| {
                let s = b.layout.size();
                b.layout.align() == layout.align()
                    && s > layout.size()
                    && s / 2 <= layout.size()
                    && s % elem == 0
                    && !b.free.is_empty()
            })
            .min_by_key(|b| b.layout.size())?;
        bin.free.pop()
    }

    /// `thread` took the block at `addr` of `layout`; updates the most one thread has held at
    /// once of that layout, this take included.
    fn took(&mut self, thread: usize, addr: usize, layout: Layout) {
        // An address handed out again without coming back was freed as an ordinary vector.
        self.returned(addr);
        if self.owner.len() >= MAX_TRACKED {
            self.owner.clear();
            self.holds.clear();
        }
        self.owner.push((addr, thread, layout));
        let now = match self
            .holds
            .iter_mut()
            .find(|h| h.0 == thread && h.1 == layout)
        {
            Some(h) => {
                h.2 += 1;
                h.2
            }
            None => {
                self.holds.push((thread, layout, 1));
                1
            }
        };
        let bin = self.bin(layout);
        bin.peak = bin.peak.max(now);
    }

    /// The block at `addr` came back (from whichever thread): one fewer for its taker.
    fn returned(&mut self, addr: usize) {
        let Some(at) = self.owner.iter().position(|&(a, _, _)| a == addr) else {
            return;
        };
        let (_, thread, layout) = self.owner.swap_remove(at);
        if let Some(at) = self
            .holds
            .iter()
            .position(|h| h.0 == thread && h.1 == layout)
        {
            self.holds[at].2 -= 1;
            if self.holds[at].2 == 0 {
                self.holds.swap_remove(at);
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        for bin in self.bins.drain(..) {
            for b in bin.free {
                // SAFETY: every cached block was allocated by the global allocator with
                // `b.layout` (a `Vec`'s buffer, or `spare`) and is owned by the cache alone.
                unsafe { std::alloc::dealloc(b.ptr.as_ptr(), b.layout) };
            }
        }
    }
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    bins: Vec::new(),
    held: 0,
    owner: Vec::new(),
    holds: Vec::new(),
});

/// The cache (a panic elsewhere while it was held leaves it consistent: every update is a
/// push or a pop with its counts).
fn cache() -> MutexGuard<'static, Cache> {
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A number for the calling thread (distinct among the live threads).
fn thread_number() -> usize {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NUMBER: u64 = NEXT.fetch_add(1, Relaxed);
    }
    NUMBER.try_with(|n| *n as usize).unwrap_or(0)
}

/// `bytes` rounded up to the next size with at most four significant bits (`m·2^e`, `8 ≤ m <
/// 16`): at most 12.5% more, and a multiple of 4096 from [`LARGE`] on.
pub fn class_bytes(bytes: usize) -> usize {
    if bytes <= 16 {
        return bytes;
    }
    let shift = usize::BITS - 4 - bytes.leading_zeros();
    let unit = 1usize << shift;
    bytes.div_ceil(unit).saturating_mul(unit)
}

/// Bytes the cache holds now (blocks not handed out).
pub fn held() -> usize {
    cache().held
}

/// Blocks handed out from the cache and blocks allocated for it (of at least [`LARGE`] bytes),
/// since the process started.
pub fn counts() -> (u64, u64) {
    (REUSED.load(Relaxed), FRESH.load(Relaxed))
}

static REUSED: AtomicU64 = AtomicU64::new(0);
static FRESH: AtomicU64 = AtomicU64::new(0);

/// An empty vector with room for at least `n` elements: a cached buffer when one of `n`'s size
/// class (and `T`'s alignment) is free, else a free one of the smallest larger class up to
/// twice the size (its capacity is then that class's), else a new one of `n`'s class.
///
/// On a miss, and when a block comes back, the cache also provisions the class for every
/// worker: the threads of the current rayon pool run micro-batches of the same shapes side by
/// side, and which step brings their peaks together depends on how they interleave. So it
/// allocates (untouched: address space until written) as many blocks as make the class's
/// blocks, free and handed out, at least the pool's thread count times the most one thread
/// has held at once (a block counts for the thread that took it until it comes back, from any
/// thread).
///
/// Blocks a caller frees as ordinary vectors never come back, and still count as held by
/// their taker: left alone, they would raise that peak at every take and the cache would
/// provision a new block each time (up to [`MAX_HELD`]). So the blocks provisioned for a class
/// are at most the thread count times one more than the blocks that have come back to it: a
/// class whose blocks are never given back gets at most one spare per thread and is otherwise
/// allocated as any vector, which the system allocator then reuses.
pub fn take<T>(n: usize) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    let bytes = n.saturating_mul(size);
    if size == 0 || bytes < LARGE {
        return Vec::with_capacity(n);
    }
    let cap = class_bytes(bytes) / size;
    let Ok(layout) = Layout::array::<T>(cap) else {
        // Too large for any allocation: let `Vec` report it as it would.
        return Vec::with_capacity(n);
    };
    let me = thread_number();
    let mut c = cache();
    let asked = layout;
    let (block, layout) = match c.bin(asked).free.pop() {
        Some(b) => (Some(b), asked),
        // A free block of a larger class (at most twice the size) rather than a new one: a
        // micro-batch of a shape not seen before (trimmed to another width) reuses what
        // larger ones gave back.
        None => match c.larger_free(layout, size) {
            Some(b) => {
                let l = b.layout;
                (Some(b), l)
            }
            None => (None, layout),
        },
    };
    let cap = layout.size() / size;
    c.bin(layout).out += 1;
    let v = match block {
        Some(b) => {
            c.held -= layout.size();
            REUSED.fetch_add(1, Relaxed);
            // SAFETY: the block was allocated with `layout`, which is `Layout::array::<T>(cap)`
            // (the requested class's, or a larger class's of `T`'s alignment whose size is a
            // multiple of `T`'s), so it is a valid buffer for `cap` elements of `T`; length 0
            // needs no initialised element.
            unsafe { Vec::from_raw_parts(b.ptr.as_ptr().cast::<T>(), 0, cap) }
        }
        None => {
            FRESH.fetch_add(1, Relaxed);
            Vec::with_capacity(cap)
        }
    };
    // A block lent by a larger class counts for the asked class's peak (the demand its
    // blocks are provisioned for), but provisions nothing now: it is not a miss.
    c.took(me, v.as_ptr() as usize, asked);
    if layout == asked {
        provision(&mut c, asked);
    }
    v
}

/// Allocates spare blocks of `layout` until its blocks, free and handed out, number the pool's
/// thread count times the most one thread has held at once, within the allowance [`take`]
/// describes (the thread count times one more than the blocks given back) and [`MAX_HELD`].
fn provision(c: &mut Cache, layout: Layout) {
    let threads = rayon::current_num_threads();
    let bin = c.bin(layout);
    let have = bin.out + bin.free.len();
    let want = threads.saturating_mul(bin.peak);
    let allowed = (bin.gives.saturating_add(1))
        .saturating_mul(threads)
        .saturating_sub(bin.spared);
    for _ in have..want.min(have.saturating_add(allowed)) {
        if !spare(c, layout) {
            break;
        }
    }
}

/// Allocates one block of `layout` into the cache; false if it would pass [`MAX_HELD`] or the
/// allocation fails.
fn spare(c: &mut Cache, layout: Layout) -> bool {
    if c.held + layout.size() > MAX_HELD {
        return false;
    }
    // SAFETY: `layout` has a non-zero size (at least `LARGE`).
    let Some(ptr) = NonNull::new(unsafe { std::alloc::alloc(layout) }) else {
        return false;
    };
    FRESH.fetch_add(1, Relaxed);
    c.held += layout.size();
    let bin = c.bin(layout);
    bin.spared += 1;
    bin.free.push(Block { ptr, layout });
    true
}

/// Returns `v`'s buffer to the cache (its elements are dropped first); a buffer
/// below [`LARGE`] bytes, of a size that is not a class size, or beyond [`MAX_HELD`] is freed.
pub fn give<T>(mut v: Vec<T>) {
    v.clear();
    let size = std::mem::size_of::<T>();
    let bytes = v.capacity().saturating_mul(size);
    // Only what `take` hands out: the capacity of a class (its bytes over the element size).
    if size == 0 || bytes < LARGE || class_bytes(bytes) / size != v.capacity() {
        return;
    }
    let Ok(layout) = Layout::array::<T>(v.capacity()) else {
        return;
    };
    let mut v = std::mem::ManuallyDrop::new(v);
    let ptr = NonNull::new(v.as_mut_ptr().cast::<u8>()).expect("a Vec's buffer is not null");
    let kept = {
        let mut c = cache();
        c.returned(ptr.as_ptr() as usize);
        let fits = c.held + bytes <= MAX_HELD;
        if fits {
            c.held += bytes;
        }
        let bin = c.bin(layout);
        bin.out = bin.out.saturating_sub(1);
        bin.gives += 1;
        if fits {
            bin.free.push(Block { ptr, layout });
            provision(&mut c, layout);
        }
        fits
    };
    if !kept {
        // SAFETY: `v` still owns its buffer (it was not cached): rebuild and drop it.
        unsafe { drop(Vec::from_raw_parts(v.as_mut_ptr(), 0, v.capacity())) };
    }
}

/// `n` elements not yet written, from [`take`].
pub fn uninit<T>(n: usize) -> Vec<MaybeUninit<T>> {
    let mut v = take::<MaybeUninit<T>>(n);
    v.resize_with(n, MaybeUninit::uninit);
    v
}

/// `n` copies of `zero`, from [`take`].
pub fn filled<T: Clone>(n: usize, zero: T) -> Vec<T> {
    let mut v = take::<T>(n);
    v.resize(n, zero);
    v
}

/// Gives back the buffer of an array (any layout: it owns one `Vec`).
pub fn give_array<T, D: ndarray::Dimension>(a: ndarray::Array<T, D>) {
    give(a.into_raw_vec_and_offset().0);
}

/// Takes `uninit`'s buffer as initialised.
///
/// # Safety
/// Every element of `v` must be initialised.
pub unsafe fn assume_init<T>(v: Vec<MaybeUninit<T>>) -> Vec<T> {
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: same allocation, length and capacity; `MaybeUninit<T>` has the layout of `T`; the
    // caller guarantees every element is initialised.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<T>(), v.len(), v.capacity()) }
}

/// `f` of every element of `a`, as an array of `a`'s shape in standard layout whose buffer
/// comes from [`take`] (ndarray's `map` would allocate it); one pass, in ndarray's `Zip` order.
pub fn map<A, B, D: ndarray::Dimension>(
    a: ndarray::ArrayView<'_, A, D>,
    f: impl Fn(&A) -> B,
) -> ndarray::Array<B, D> {
    let mut out = uninit_array::<B, D>(a.raw_dim());
    ndarray::Zip::from(&mut out).and(&a).for_each(|o, x| {
        o.write(f(x));
    });
    // SAFETY: `Zip` visited every element of `out` (same shape as `a`) and wrote it.
    unsafe { out.assume_init() }
}

/// `f` of the elements of `a` and `b` (equal shapes) pairwise, as [`map`].
///
/// # Panics
/// If the shapes differ.
pub fn zip_map<A, B, C, D: ndarray::Dimension>(
    a: ndarray::ArrayView<'_, A, D>,
    b: ndarray::ArrayView<'_, B, D>,
    f: impl Fn(&A, &B) -> C,
) -> ndarray::Array<C, D> {
    let mut out = uninit_array::<C, D>(a.raw_dim());
    ndarray::Zip::from(&mut out)
        .and(&a)
        .and(&b)
        .for_each(|o, x, y| {
            o.write(f(x, y));
        });
    // SAFETY: `Zip` visited every element of `out` (the shape of `a` and `b`) and wrote it.
    unsafe { out.assume_init() }
}

/// `f` of the elements of `a`, `b` and `c` (equal shapes), as [`map`].
///
/// # Panics
/// If the shapes differ.
pub fn zip3_map<A, B, C, E, D: ndarray::Dimension>(
    a: ndarray::ArrayView<'_, A, D>,
    b: ndarray::ArrayView<'_, B, D>,
    c: ndarray::ArrayView<'_, C, D>,
    f: impl Fn(&A, &B, &C) -> E,
) -> ndarray::Array<E, D> {
    let mut out = uninit_array::<E, D>(a.raw_dim());
    ndarray::Zip::from(&mut out)
        .and(&a)
        .and(&b)
        .and(&c)
        .for_each(|o, x, y, z| {
            o.write(f(x, y, z));
        });
    // SAFETY: `Zip` visited every element of `out` (the shape of the inputs) and wrote it.
    unsafe { out.assume_init() }
}

/// An array of `shape` not yet written (standard layout), its buffer from [`take`].
pub fn uninit_array<T, D: ndarray::Dimension>(shape: D) -> ndarray::Array<MaybeUninit<T>, D> {
    ndarray::Array::from_shape_vec(shape.clone(), uninit::<T>(shape.size()))
        .expect("one element per element")
}

/// An array of `shape` filled with `x`, its buffer from [`take`].
pub fn full<T: Clone, D: ndarray::Dimension>(shape: D, x: T) -> ndarray::Array<T, D> {
    let v = filled(shape.size(), x);
    ndarray::Array::from_shape_vec(shape, v).expect("one element per element")
}

/// `[rows, cols]` with element `(i, j)` = `f((i, j))`, called in row-major order (as
/// ndarray's `from_shape_fn`), its buffer from [`take`].
pub fn from_fn2<T>(
    (rows, cols): (usize, usize),
    mut f: impl FnMut((usize, usize)) -> T,
) -> ndarray::Array2<T> {
    let mut v = take::<T>(rows.saturating_mul(cols));
    for i in 0..rows {
        for j in 0..cols {
            v.push(f((i, j)));
        }
    }
    ndarray::Array2::from_shape_vec((rows, cols), v).expect("one element per element")
}

/// The items of `it` in a vector from [`take`] with room for `n` (a hint; more grow it).
pub fn collect<T>(n: usize, it: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut v = take::<T>(n);
    v.extend(it);
    v
}

/// A scratch vector whose buffer goes back to the cache when it is dropped (or grown): a
/// kernel's per-task scratch.
#[derive(Debug)]
pub struct Buf<T>(Vec<T>);

impl<T> Buf<T> {
    /// An empty buffer (nothing taken until it grows).
    pub const fn new() -> Self {
        Buf(Vec::new())
    }

    /// `v`, to be given back when dropped.
    pub fn from_vec(v: Vec<T>) -> Self {
        Buf(v)
    }

    /// The vector, no longer given back when dropped.
    pub fn into_vec(mut self) -> Vec<T> {
        std::mem::take(&mut self.0)
    }
}

impl<T: Clone> Buf<T> {
    /// The first `n` elements, after growing to at least `n` with `fill` (elements already
    /// there are kept; a larger buffer comes from [`take`], the old one goes to [`give`]).
    pub fn grow(&mut self, n: usize, fill: T) -> &mut [T] {
        if self.0.len() < n {
            if self.0.capacity() < n {
                let mut bigger = take::<T>(n);
                bigger.append(&mut self.0);
                give(std::mem::replace(&mut self.0, bigger));
            }
            self.0.resize(n, fill);
        }
        &mut self.0[..n]
    }
}

impl<T: Clone> Clone for Buf<T> {
    /// A copy of the elements in a buffer of its own (from [`take`]).
    fn clone(&self) -> Self {
        let mut v = take::<T>(self.0.len());
        v.extend_from_slice(&self.0);
        Buf(v)
    }
}

impl<T> Default for Buf<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for Buf<T> {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.0));
    }
}

impl<T> std::ops::Deref for Buf<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Buf<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

/// Frees the cached buffers (they are otherwise kept for the next steps until the process
/// ends).
pub fn release() {
    let old = std::mem::take(&mut *cache());
    drop(old);
}

#[cfg(test)]
mod tests;
