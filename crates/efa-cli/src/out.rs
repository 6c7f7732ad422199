//! Standard output and standard error without panics.
//!
//! `println!` panics when standard output cannot be written ("failed printing to stdout"),
//! which the panic hook would report as an internal error. Every line the commands print goes
//! through [`line`] instead ([`outln!`]):
//! * a closed pipe (`efa predict … | head -1`) ends output quietly, as Unix tools do: later
//!   writes are dropped, the command finishes its files and exits 0;
//! * any other write error (a full device, an I/O error) is a normal error, exit status 2,
//!   naming standard output.
//!
//! Diagnostics ([`errln!`]) go to standard error and are dropped if it cannot be written: there
//! is nowhere left to report that.

use crate::CliError;
use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write found standard output's reader gone.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `args` and a newline to standard output (see the module docs).
pub fn line(args: fmt::Arguments<'_>) -> Result<(), CliError> {
    write(|o| {
        o.write_fmt(args)?;
        o.write_all(b"\n")
    })
}

/// Writes `text` as it is to standard output (see the module docs).
pub fn text(text: &str) -> Result<(), CliError> {
    write(|o| o.write_all(text.as_bytes()))
}

fn write(f: impl FnOnce(&mut io::StdoutLock<'static>) -> io::Result<()>) -> Result<(), CliError> {
    if CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut o = io::stdout().lock();
    match f(&mut o).and_then(|_| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => Err(CliError::new(format!(
            "cannot write to standard output: {e}"
        ))),
    }
}

/// Writes `args` and a newline to standard error, ignoring failures.
pub fn diag(args: fmt::Arguments<'_>) {
    let mut e = io::stderr().lock();
    let _ = e.write_fmt(args).and_then(|_| e.write_all(b"\n"));
}

/// `println!` that returns a [`CliError`] on a write error instead of panicking (use `?`).
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::out::line(format_args!($($t)*))
    };
}

/// `eprintln!` that never panics.
macro_rules! errln {
    ($($t:tt)*) => {
        $crate::out::diag(format_args!($($t)*))
    };
}
