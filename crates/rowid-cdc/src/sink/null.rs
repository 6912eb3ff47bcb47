//! The sink that counts and drops.

use std::io;

use super::{Durable, Sink};
use crate::event::ChangeEvent;

/// Counts and drops (the throughput benchmark's sink).
#[derive(Debug, Default)]
pub struct Null {
    /// Changes received.
    pub changes: u64,
}

impl Sink for Null {
    fn change(&mut self, _event: &ChangeEvent) -> io::Result<()> {
        self.changes += 1;
        Ok(())
    }

    fn commit(&mut self) -> io::Result<Durable> {
        Ok(Durable::default())
    }

    fn durable(&self) -> Durable {
        Durable::default()
    }
}
