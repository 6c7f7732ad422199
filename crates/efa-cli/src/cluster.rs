//! The processes of this job: one process, or the ranks of an MPI job (`mpirun`, `srun`)
//! when the binary is built with the `mpi` feature.
//!
//! Every rank runs the same command on the same files (a shared filesystem); the training code
//! exchanges per-micro-batch results through [`efa_train::collective::Collective`] and folds
//! them in micro-batch order, so every rank holds the same bits as one process would. Rank 0
//! alone takes the run lock, writes files and prints results; the others stay quiet.
//!
//! A binary built without the feature that finds itself started as one of several ranks
//! refuses at once (each rank would otherwise train the whole job on its own and race on the
//! output files).

use crate::CliError;
use efa_train::collective::{Collective, Solo};

/// Environment variables through which launchers announce the job's size: Open MPI's
/// `mpirun`, MPICH/Hydra and PMI-based launchers, and Slurm's `srun` (the step's task count,
/// not the allocation's, so a batch script that starts one `efa` is one process).
const SIZE_VARS: [&str; 4] = [
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "PMIX_SIZE",
    "SLURM_STEP_NUM_TASKS",
];

/// The job size a launcher announced in the environment, if any, with the variable that
/// said it.
pub fn launched_size() -> Option<(&'static str, usize)> {
    SIZE_VARS.iter().find_map(|&var| {
        let n = std::env::var(var).ok()?.trim().parse::<usize>().ok()?;
        Some((var, n))
    })
}

/// This process's rank as the launcher announced it (0 when none did).
pub fn launched_rank() -> usize {
    [
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .find_map(|var| std::env::var(var).ok()?.trim().parse().ok())
    .unwrap_or(0)
}

/// The members of this job, kept alive for the whole command (for MPI, dropping it finalises
/// MPI).
pub struct Job {
    group: Box<dyn Collective>,
    /// Kept until the end of `main`: MPI is finalised when it drops.
    #[cfg(feature = "mpi")]
    _universe: Option<mpi::environment::Universe>,
}

impl Job {
    /// One process.
    pub fn solo() -> Self {
        Job {
            group: Box::new(Solo),
            #[cfg(feature = "mpi")]
            _universe: None,
        }
    }

    /// The job this process belongs to: one process unless a launcher started several ranks;
    /// then MPI when built with the feature, otherwise an error saying how to build it.
    pub fn join() -> Result<Self, CliError> {
        let Some((var, n)) = launched_size().filter(|&(_, n)| n > 1) else {
            return Ok(Job::solo());
        };
        #[cfg(feature = "mpi")]
        {
            let _ = (var, n);
            mpi_group::join()
        }
        #[cfg(not(feature = "mpi"))]
        Err(CliError::new(format!(
            "this efa was started as one of {n} processes ({var}={n}) but was built without \
             MPI, so each would run the whole job alone; build it with `cargo build --release \
             -p efa-cli --features mpi` (needs an MPI library, e.g. `apt-get install \
             openmpi-bin libopenmpi-dev libclang-dev`), or start one process"
        )))
    }

    /// The members, as the training code sees them.
    pub fn group(&self) -> &dyn Collective {
        self.group.as_ref()
    }

    /// Whether this process writes files and prints results (rank 0).
    pub fn leads(&self) -> bool {
        self.group.rank() == 0
    }

    /// Refuses a command that runs in one process only when started as several ranks.
    pub fn require_single(&self, command: &str) -> Result<(), CliError> {
        if self.group.size() > 1 {
            return Err(CliError::new(format!(
                "`efa {command}` runs in one process; start it without mpirun/srun (only \
                 `efa train` and `efa reproduce` use several ranks)"
            )));
        }
        Ok(())
    }

    /// Ends the whole job after `error` on this rank: with several ranks the error is printed
    /// naming the rank and the job is aborted (the other ranks may be waiting in an
    /// exchange); with one process this returns and the caller exits with the error.
    pub fn fail(&self, error: &CliError) {
        let (rank, size) = (self.group.rank(), self.group.size());
        if size > 1 {
            self.group
                .abort(&format!("rank {rank} of {size}: error: {error}"));
        }
    }
}

#[cfg(feature = "mpi")]
mod mpi_group {
    //! [`Collective`] over MPI: the ranks of `MPI_COMM_WORLD`, an ordered all-gather of byte
    //! strings (`MPI_Allgather` of the lengths, then `MPI_Allgatherv`), and `MPI_Abort`.

    use super::Job;
    use crate::CliError;
    use efa_train::collective::Collective;
    use efa_train::TrainError;
    use mpi::datatype::PartitionMut;
    use mpi::environment::Threading;
    use mpi::topology::SimpleCommunicator;
    use mpi::traits::*;
    use std::sync::Mutex;

    /// The world communicator behind a lock: every MPI call goes through it, one at a time.
    pub struct MpiGroup {
        world: Mutex<SimpleCommunicator>,
        rank: usize,
        size: usize,
    }

    // SAFETY: MPI was initialised with at least `MPI_THREAD_SERIALIZED` (checked in `join`),
    // under which any thread may call MPI as long as no two calls run at once; the mutex
    // guarantees that. The communicator is a handle to process-global MPI state, not tied to
    // the thread that created it.
    unsafe impl Send for MpiGroup {}
    // SAFETY: as above; shared access reaches the communicator only through the mutex.
    unsafe impl Sync for MpiGroup {}

    impl std::fmt::Debug for MpiGroup {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "MpiGroup {{ rank: {}, size: {} }}", self.rank, self.size)
        }
    }

    /// Initialises MPI and joins `MPI_COMM_WORLD`.
    pub fn join() -> Result<Job, CliError> {
        let (universe, level) = mpi::initialize_with_threading(Threading::Serialized)
            .ok_or_else(|| CliError::new("MPI was already initialised in this process"))?;
        if level < Threading::Serialized {
            return Err(CliError::new(format!(
                "the MPI library provides thread level {level:?}; efa needs at least \
                 Serialized (calls from one worker thread at a time)"
            )));
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Ok(Job {
            group: Box::new(MpiGroup {
                world: Mutex::new(world),
                rank,
                size,
            }),
            _universe: Some(universe),
        })
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
                return Err(TrainError::Rank {
                    rank: self.rank,
                    message: format!(
                        "its contribution to an exchange is {} bytes, more than MPI's limit \
                         of {} per message; use fewer threads per rank or smaller micro-batches",
                        mine.len(),
                        i32::MAX
                    ),
                });
            };
            let mut counts = vec![0i32; self.size];
            world.all_gather_into(&len, &mut counts[..]);
            let total: i64 = counts.iter().map(|&c| i64::from(c)).sum();
            let Ok(total) = i32::try_from(total) else {
                return Err(TrainError::Rank {
                    rank: self.rank,
                    message: format!(
                        "an exchange of {total} bytes in all exceeds MPI's limit of {} per \
                         message; use fewer threads per rank or fewer ranks",
                        i32::MAX
                    ),
                });
            };
            let displs: Vec<i32> = counts
                .iter()
                .scan(0i32, |at, &c| {
                    let d = *at;
                    *at += c;
                    Some(d)
                })
                .collect();
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
}
