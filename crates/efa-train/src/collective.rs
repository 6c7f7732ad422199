//! The processes of a multi-process job, as the training code sees them: a rank, a size and
//! an ordered all-gather. Every rank holds the same state and cuts the same micro-batches;
//! each computes its share, the ranks exchange the per-micro-batch results, and every rank
//! folds all of them in micro-batch order, exactly as one process does. No reduction whose
//! order depends on the number of processes (such as `MPI_SUM`) is used, so results are
//! bit-identical at any number of ranks and threads.
//!
//! Implementations: [`Solo`] (one process), [`SimGroup`] (ranks as threads of one process,
//! for tests); `efa_mpi::MpiGroup` (crate `efa-mpi`, feature `mpi`) is the ranks of an MPI
//! job, through rsmpi.

use crate::TrainError;
use std::sync::{Arc, Condvar, Mutex};

/// The members of a job and the one exchange the training code needs.
pub trait Collective: Send + Sync + std::fmt::Debug {
    /// This member's rank, `0..size`.
    fn rank(&self) -> usize;
    /// The number of members.
    fn size(&self) -> usize;
    /// Every member's `mine`, in rank order (the same on every member); returns once every
    /// member has called it. Members call it the same number of times in the same order.
    fn all_gather(&self, mine: Vec<u8>) -> Result<Vec<Vec<u8>>, TrainError>;
    /// Ends the whole job at once after an error on this member (`message` names it); other
    /// members waiting in an exchange do not return. Returns only where the transport cannot
    /// abort (then the caller returns its error).
    fn abort(&self, message: &str) {
        let _ = message;
    }
}

/// One process: rank 0 of 1.
#[derive(Clone, Copy, Debug, Default)]
pub struct Solo;

impl Collective for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_gather(&self, mine: Vec<u8>) -> Result<Vec<Vec<u8>>, TrainError> {
        Ok(vec![mine])
    }
}

/// The pieces `0..n` this member computes: round robin, piece `k` on rank `k mod size`.
pub fn my_pieces(c: &dyn Collective, n: usize) -> impl Iterator<Item = usize> {
    let (rank, size) = (c.rank(), c.size().max(1));
    (rank..n).step_by(size)
}

/// Shared state of a simulated group: the round's contributions and a generation counter.
#[derive(Debug, Default)]
struct Exchange {
    slots: Vec<Option<Vec<u8>>>,
    /// The last completed round's contributions, read by every member.
    done: Vec<Vec<u8>>,
    /// Members that have read `done` in the current generation.
    readers: usize,
    generation: u64,
    /// Set when a member aborted: every exchange fails from then on.
    aborted: Option<String>,
}

/// A group of `size` members inside one process (one thread per member), for tests of the
/// sharded computation against the single-process one.
#[derive(Clone, Debug)]
pub struct SimGroup {
    rank: usize,
    size: usize,
    shared: Arc<(Mutex<Exchange>, Condvar)>,
}

impl SimGroup {
    /// The `size` members of a new group, rank 0 first.
    pub fn new(size: usize) -> Vec<SimGroup> {
        let size = size.max(1);
        let shared = Arc::new((
            Mutex::new(Exchange {
                slots: vec![None; size],
                ..Exchange::default()
            }),
            Condvar::new(),
        ));
        (0..size)
            .map(|rank| SimGroup {
                rank,
                size,
                shared: Arc::clone(&shared),
            })
            .collect()
    }
}

impl Collective for SimGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&self, mine: Vec<u8>) -> Result<Vec<Vec<u8>>, TrainError> {
        let (lock, cv) = &*self.shared;
        let mut ex = lock.lock().unwrap_or_else(|p| p.into_inner());
        // Wait until the previous round's result has been read by everyone.
        while ex.readers != 0 && ex.aborted.is_none() {
            ex = cv.wait(ex).unwrap_or_else(|p| p.into_inner());
        }
        if let Some(m) = &ex.aborted {
            return Err(TrainError::Threads(format!("the group was aborted: {m}")));
        }
        let generation = ex.generation;
        ex.slots[self.rank] = Some(mine);
        if ex.slots.iter().all(Option::is_some) {
            ex.done = ex
                .slots
                .iter_mut()
                .map(|s| s.take().unwrap_or_default())
                .collect();
            ex.generation += 1;
            cv.notify_all();
        } else {
            while ex.generation == generation && ex.aborted.is_none() {
                ex = cv.wait(ex).unwrap_or_else(|p| p.into_inner());
            }
            if let Some(m) = &ex.aborted {
                return Err(TrainError::Threads(format!("the group was aborted: {m}")));
            }
        }
        let out = ex.done.clone();
        ex.readers += 1;
        if ex.readers == self.size {
            ex.readers = 0;
            cv.notify_all();
        }
        Ok(out)
    }

    fn abort(&self, message: &str) {
        let (lock, cv) = &*self.shared;
        let mut ex = lock.lock().unwrap_or_else(|p| p.into_inner());
        ex.aborted
            .get_or_insert_with(|| format!("rank {}: {message}", self.rank));
        cv.notify_all();
    }
}

/// Little-endian encoding of the values a rank sends: `f64`s and `Real` tensors.
pub mod wire {
    use efa_num::Real;

    /// Appends `x`.
    pub fn put_f64(out: &mut Vec<u8>, x: f64) {
        out.extend_from_slice(&x.to_le_bytes());
    }

    /// Appends `bytes` after their length (8 bytes, little-endian).
    pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
    }

    /// Appends every element of `xs` in its own width (4 bytes for f32, 8 for f64).
    pub fn put_reals<T: Real>(out: &mut Vec<u8>, xs: impl Iterator<Item = T>) {
        for x in xs {
            if T::BYTES == 4 {
                out.extend_from_slice(&(x.to_f64() as f32).to_le_bytes());
            } else {
                out.extend_from_slice(&x.to_f64().to_le_bytes());
            }
        }
    }

    /// Reads what [`put_f64`], [`put_bytes`] and [`put_reals`] wrote, in order.
    pub struct Reader<'a> {
        bytes: &'a [u8],
    }

    impl<'a> Reader<'a> {
        /// A reader at the start of `bytes`.
        pub fn new(bytes: &'a [u8]) -> Self {
            Self { bytes }
        }

        fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            if self.bytes.len() < n {
                return None;
            }
            let (a, b) = self.bytes.split_at(n);
            self.bytes = b;
            Some(a)
        }

        /// The next byte.
        pub fn byte(&mut self) -> Option<u8> {
            Some(self.take(1)?[0])
        }

        /// The next `f64`.
        pub fn f64(&mut self) -> Option<f64> {
            Some(f64::from_le_bytes(self.take(8)?.try_into().ok()?))
        }

        /// The next byte string written by [`put_bytes`].
        pub fn bytes(&mut self) -> Option<&'a [u8]> {
            let n = u64::from_le_bytes(self.take(8)?.try_into().ok()?);
            self.take(usize::try_from(n).ok()?)
        }

        /// The next `n` reals (each exactly as written: f32 and f64 round-trip).
        pub fn reals<T: Real>(&mut self, n: usize) -> Option<Vec<T>> {
            let w = if T::BYTES == 4 { 4 } else { 8 };
            let raw = self.take(n.checked_mul(w)?)?;
            Some(
                raw.chunks_exact(w)
                    .map(|c| {
                        if w == 4 {
                            T::from_f64(f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                        } else {
                            let b: [u8; 8] = c.try_into().unwrap_or([0; 8]);
                            T::from_f64(f64::from_le_bytes(b))
                        }
                    })
                    .collect(),
            )
        }

        /// Whether everything was read.
        pub fn is_empty(&self) -> bool {
            self.bytes.is_empty()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simulated_group_gathers_in_rank_order_round_after_round() {
        for size in 1..=5 {
            let group = SimGroup::new(size);
            let out: Vec<Vec<Vec<Vec<u8>>>> = std::thread::scope(|s| {
                let handles: Vec<_> = group
                    .iter()
                    .map(|m| {
                        s.spawn(move || {
                            (0..4u8)
                                .map(|round| {
                                    let mut mine = vec![m.rank() as u8; m.rank() + 1];
                                    mine.push(round);
                                    m.all_gather(mine).unwrap()
                                })
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for rounds in &out {
                for (round, got) in rounds.iter().enumerate() {
                    let want: Vec<Vec<u8>> = (0..size)
                        .map(|r| {
                            let mut v = vec![r as u8; r + 1];
                            v.push(round as u8);
                            v
                        })
                        .collect();
                    assert_eq!(got, &want, "size {size} round {round}");
                }
            }
        }
    }

    #[test]
    fn an_abort_fails_every_waiting_member() {
        let group = SimGroup::new(3);
        std::thread::scope(|s| {
            let waiting: Vec<_> = group[1..]
                .iter()
                .map(|m| s.spawn(move || m.all_gather(vec![1])))
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(20));
            group[0].abort("data error");
            for w in waiting {
                let e = w.join().unwrap().unwrap_err().to_string();
                assert!(e.contains("rank 0: data error"), "{e}");
            }
        });
    }

    #[test]
    fn round_robin_pieces_cover_every_piece_once() {
        for size in 1..=5 {
            let group = SimGroup::new(size);
            for n in [0, 1, 4, 7, 13] {
                let mut all: Vec<usize> = group.iter().flat_map(|m| my_pieces(m, n)).collect();
                all.sort_unstable();
                assert_eq!(all, (0..n).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn wire_values_round_trip_exactly() {
        let mut b = Vec::new();
        wire::put_f64(&mut b, -1.25e-300);
        wire::put_reals(&mut b, [1.5f32, f32::MIN_POSITIVE, -0.0].into_iter());
        wire::put_reals(&mut b, [std::f64::consts::PI].into_iter());
        let mut r = wire::Reader::new(&b);
        assert_eq!(r.f64(), Some(-1.25e-300));
        let v: Vec<f32> = r.reals(3).unwrap();
        assert_eq!(
            v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            [1.5f32, f32::MIN_POSITIVE, -0.0]
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        );
        assert_eq!(r.reals::<f64>(1), Some(vec![std::f64::consts::PI]));
        assert!(r.is_empty());
        assert_eq!(r.f64(), None);
    }
}
