//! The ranks of an MPI job as an [`efa_train::collective::Collective`]: the ranks of
//! `MPI_COMM_WORLD`, an ordered all-gather of byte strings (`MPI_Allgather` of the lengths,
//! then `MPI_Allgatherv`), and `MPI_Abort`.
//!
//! The MPI bindings (rsmpi) sit behind this crate's opt-in `mpi` feature, which needs an MPI
//! library and libclang to build; without it the crate is empty, so `cargo test --workspace`
//! needs neither. The group lives in a crate of its own, not behind a feature of `efa-train`:
//! turning the feature on then rebuilds this crate and the binary, not the whole training
//! stack above `efa-train`.
//!
//! ```no_run
//! # #[cfg(feature = "mpi")]
//! # fn main() -> Result<(), efa_train::TrainError> {
//! use efa_mpi::MpiGroup;
//! use efa_train::collective::Collective;
//! // Under `mpirun -np 4`: every rank joins; MPI is finalised when `group` drops.
//! let group = MpiGroup::join()?;
//! println!("rank {} of {}", group.rank(), group.size());
//! # Ok(()) }
//! # #[cfg(not(feature = "mpi"))]
//! # fn main() {}
//! ```

#[cfg(feature = "mpi")]
mod group;
#[cfg(feature = "mpi")]
pub use group::MpiGroup;
