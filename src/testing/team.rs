//! The CPU backend's team protocol (`engine::cpu::team`) on std threads: each helper
//! owns its slices as the browser's workers do (nothing shared but the messages), so
//! the split, the rounds and the gathering are tested natively; `kill` stops a helper
//! as a crashed worker would.

use crate::engine::cpu::team::{lost, Job, Slice, Slices, Team};
use crate::error::{Error, Result};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

enum Msg {
    /// A slice (its bytes owned: `Slice` borrows them).
    Give(Slice<'static>, Vec<u8>),
    Matmul(u32, Vec<f32>),
    Rows(u32, Vec<u32>),
}

/// What a helper sends back: values to write at an offset of the gathered block.
type Answer = Result<Vec<(usize, Vec<f32>)>>;

/// Helpers on std threads, each with its own slices.
pub struct ThreadTeam {
    to: Mutex<Vec<Option<Sender<Msg>>>>,
    from: Mutex<Receiver<Answer>>,
    capacity: usize,
    broken: Mutex<Option<String>>,
    /// When the round began: a helper silent for 20 times the lead's share of it (and
    /// at least 5 s) is taken for dead, as in the browser.
    began: Mutex<Instant>,
}

impl ThreadTeam {
    /// `helpers` threads; a round carries at most `capacity` values.
    pub fn new(helpers: usize, capacity: usize) -> Arc<ThreadTeam> {
        let (answers, from) = channel();
        let to = (0..helpers)
            .map(|_| {
                let (tx, rx) = channel();
                let answers = answers.clone();
                std::thread::spawn(move || helper(rx, answers));
                Some(tx)
            })
            .collect();
        Arc::new(ThreadTeam {
            to: Mutex::new(to),
            from: Mutex::new(from),
            capacity,
            broken: Mutex::new(None),
            began: Mutex::new(Instant::now()),
        })
    }

    /// Stops helper `k`: the next round finds it gone.
    pub fn kill(&self, k: usize) {
        if let Ok(mut to) = self.to.lock() {
            to[k] = None;
        }
    }

    fn send(&self, k: usize, m: Msg) -> bool {
        let to = self.to.lock().expect("team lock");
        to[k].as_ref().is_some_and(|tx| tx.send(m).is_ok())
    }

    fn fail(&self, why: String) -> Error {
        let mut b = self.broken.lock().expect("team lock");
        b.get_or_insert(why);
        lost(b.as_deref().unwrap_or_default())
    }
}

fn helper(rx: Receiver<Msg>, answers: Sender<Answer>) {
    let mut slices = Slices::default();
    while let Ok(m) = rx.recv() {
        let answer = match m {
            Msg::Give(s, bytes) => {
                if let Err(e) = slices.add(Slice { bytes: &bytes, ..s }) {
                    let _ = answers.send(Err(e));
                }
                continue;
            }
            Msg::Matmul(id, x) => slices.matmul(id, &x).map(|a| vec![a]),
            Msg::Rows(id, rows) => slices.rows(id, &rows),
        };
        if answers.send(answer).is_err() {
            return;
        }
    }
}

impl Team for ThreadTeam {
    fn helpers(&self) -> usize {
        self.to.lock().map_or(0, |t| t.len())
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn give(&self, k: usize, s: Slice<'_>) -> Result<()> {
        let bytes = s.bytes.to_vec();
        match self.send(k, Msg::Give(Slice { bytes: &[], ..s }, bytes)) {
            true => Ok(()),
            false => Err(self.fail(format!("helper {k} is gone"))),
        }
    }

    fn start(&self, job: Job<'_>) {
        *self.began.lock().expect("team lock") = Instant::now();
        for k in 0..self.helpers() {
            let m = match job {
                Job::Matmul { id, x, .. } => Msg::Matmul(id, x.to_vec()),
                Job::Rows { id, rows } => Msg::Rows(id, rows.to_vec()),
            };
            // A helper that is gone does not answer: `finish` finds it out.
            self.send(k, m);
        }
    }

    fn finish(&self, out: &mut [f32]) -> Result<()> {
        if let Some(e) = self.failure() {
            return Err(e);
        }
        let lead = self.began.lock().expect("team lock").elapsed();
        let deadline = Instant::now() + (lead * 20).max(Duration::from_secs(5));
        let from = self.from.lock().expect("team lock");
        for _ in 0..self.helpers() {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = match from.recv_timeout(left) {
                Ok(a) => a,
                Err(RecvTimeoutError::Timeout) => Err(Error::invalid("a helper stopped")),
                Err(e) => Err(Error::invalid(e.to_string())),
            };
            match answer {
                Ok(parts) => {
                    for (at, v) in parts {
                        out[at..at + v.len()].copy_from_slice(&v);
                    }
                }
                Err(e) => return Err(self.fail(e.to_string())),
            }
        }
        Ok(())
    }

    fn failure(&self) -> Option<Error> {
        let b = self.broken.lock().ok()?;
        b.as_deref().map(lost)
    }
}
