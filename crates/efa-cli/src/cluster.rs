//! The processes of this job: one process, or the ranks of an MPI job (`mpirun`, `srun`)
//! when the binary is built with the `mpi` feature (`efa_mpi::MpiGroup`).
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
}

impl Job {
    /// One process.
    pub fn solo() -> Self {
        Job {
            group: Box::new(Solo),
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
            let group = efa_mpi::MpiGroup::join()?;
            Ok(Job {
                group: Box::new(group),
            })
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
