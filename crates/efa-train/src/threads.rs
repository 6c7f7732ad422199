//! The worker threads of a job, passed as a parameter: one route from a thread count (a
//! command's `--threads`) to the work. Results never depend on the count: minibatches are cut
//! into fixed micro-batches whose results are summed in order (see [`crate::evaluator`]).

use crate::TrainError;
use std::sync::{Arc, OnceLock};

/// Most threads one pool may have.
pub const MAX_THREADS: usize = 1024;

/// A pool of worker threads that a job's parallel work runs on. Cloning shares the pool.
#[derive(Clone, Debug)]
pub struct Threads {
    pool: Arc<rayon::ThreadPool>,
}

impl Threads {
    /// A pool of `n` threads (`1..=MAX_THREADS`).
    pub fn new(n: usize) -> Result<Self, TrainError> {
        if n == 0 || n > MAX_THREADS {
            return Err(TrainError::config(
                "threads",
                format!("{n}: must be in 1..={MAX_THREADS}"),
            ));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map_err(|e| TrainError::Threads(format!("{n} threads: {e}")))?;
        Ok(Self {
            pool: Arc::new(pool),
        })
    }

    /// One shared single-thread pool (the default of an [`crate::Evaluator`]).
    pub fn single() -> &'static Threads {
        static ONE: OnceLock<Threads> = OnceLock::new();
        ONE.get_or_init(|| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .expect("a one-thread pool can always be built");
            Threads {
                pool: Arc::new(pool),
            }
        })
    }

    /// The number of threads.
    pub fn count(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Runs `f` on this pool: every parallel iterator and kernel inside it uses these threads.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}
