//! [`Collective`] over MPI.

use efa_train::collective::Collective;
use efa_train::TrainError;
use mpi::datatype::PartitionMut;
use mpi::environment::{Threading, Universe};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::sync::Mutex;

/// The world communicator behind a lock: every MPI call goes through it, one at a time. MPI
/// is finalised when the group drops (keep it for the whole job).
pub struct MpiGroup {
    world: Mutex<SimpleCommunicator>,
    rank: usize,
    size: usize,
    /// Dropped last: finalises MPI.
    _universe: Universe,
}

// SAFETY: MPI was initialised with at least `MPI_THREAD_SERIALIZED` (checked in `join`),
// under which any thread may call MPI as long as no two calls run at once; the mutex
// guarantees that. The communicator is a handle to process-global MPI state, not tied to
// the thread that created it; the universe is only dropped (finalising MPI) with the group.
unsafe impl Send for MpiGroup {}
// SAFETY: as above; shared access reaches the communicator only through the mutex.
unsafe impl Sync for MpiGroup {}

impl std::fmt::Debug for MpiGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MpiGroup {{ rank: {}, size: {} }}", self.rank, self.size)
    }
}

impl MpiGroup {
    /// Initialises MPI (thread level at least `Serialized`) and joins `MPI_COMM_WORLD`.
    pub fn join() -> Result<MpiGroup, TrainError> {
        let (universe, level) =
            mpi::initialize_with_threading(Threading::Serialized).ok_or_else(|| {
                TrainError::Transport("MPI was already initialised in this process".into())
            })?;
        if level < Threading::Serialized {
            return Err(TrainError::Transport(format!(
                "the MPI library provides thread level {level:?}; efa needs at least \
                 Serialized (calls from one worker thread at a time)"
            )));
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Ok(MpiGroup {
            world: Mutex::new(world),
            rank,
            size,
            _universe: universe,
        })
    }

    /// A refusal of an exchange too large for MPI's C-int counts.
    fn too_large(&self, what: String) -> TrainError {
        TrainError::Rank {
            rank: self.rank,
            message: what,
        }
    }
}

/// Start offsets of consecutive blocks of `counts` bytes.
fn displacements(counts: &[i32]) -> Vec<i32> {
    counts
        .iter()
        .scan(0i32, |at, &c| {
            let d = *at;
            *at += c;
            Some(d)
        })
        .collect()
}

impl Collective for MpiGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&self, mine: Vec<u8>) -> Result<Vec<Vec<u8>>, TrainError> {
        let world = self.world.lock().unwrap_or_else(|p| p.into_inner());
        // MPI counts are C ints: a larger contribution is refused, not truncated.
        let Ok(len) = i32::try_from(mine.len()) else {
            return Err(self.too_large(format!(
                "its contribution to an exchange is {} bytes, more than MPI's limit of {} per \
                 message; use fewer threads per rank or smaller micro-batches",
                mine.len(),
                i32::MAX
            )));
        };
        let mut counts = vec![0i32; self.size];
        world.all_gather_into(&len, &mut counts[..]);
        let total: i64 = counts.iter().map(|&c| i64::from(c)).sum();
        let Ok(total) = i32::try_from(total) else {
            return Err(self.too_large(format!(
                "an exchange of {total} bytes in all exceeds MPI's limit of {} per message; use \
                 fewer threads per rank or fewer ranks",
                i32::MAX
            )));
        };
        let displs = displacements(&counts);
        let mut buf = vec![0u8; total as usize];
        {
            let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
            world.all_gather_varcount_into(&mine[..], &mut part);
        }
        Ok(counts
            .iter()
            .zip(&displs)
            .map(|(&c, &d)| buf[d as usize..(d + c) as usize].to_vec())
            .collect())
    }

    fn abort(&self, message: &str) {
        eprintln!("efa: {message}; aborting the MPI job");
        let world = self.world.lock().unwrap_or_else(|p| p.into_inner());
        world.abort(1)
    }
}
