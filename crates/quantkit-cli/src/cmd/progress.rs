//! Progress of long commands (`quantize --target`, `analyze`, `qat`, `train`, `eval`) on
//! stderr: progress bars on a terminal; plain lines when stderr is not a terminal or with
//! `--json` (stdout then carries the JSON, stderr is free), so a run in a script or a CI
//! log shows where it is; nothing with `--quiet` (warnings and errors are still printed).
//!
//! A line is `PREFIX: H:MM:SS what` (the time since the command started), short and
//! greppable: `grep '^search:'`.

use indicatif::{ProgressBar, ProgressStyle};
use std::cell::Cell;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Progress bars (stderr is a terminal, no `--json`).
    Bars,
    /// Plain lines.
    Lines,
    /// Nothing (`--quiet`).
    Quiet,
}

impl Mode {
    /// The mode for a command given `--json` and `--quiet`.
    pub fn of(json: bool, quiet: bool) -> Mode {
        if quiet {
            Mode::Quiet
        } else if json || !std::io::stderr().is_terminal() {
            Mode::Lines
        } else {
            Mode::Bars
        }
    }
}

/// Within a stage, a line at most this often (the stage's start and end lines aside).
pub const TICK: Duration = Duration::from_secs(30);

/// The progress of one command run.
pub struct Progress {
    mode: Mode,
    prefix: &'static str,
    start: Instant,
    /// When the last line was written (for [`Progress::tick`]).
    last: Cell<Instant>,
}

impl Progress {
    /// Progress lines start with `prefix:`.
    pub fn new(prefix: &'static str, mode: Mode) -> Progress {
        let now = Instant::now();
        Progress {
            mode,
            prefix,
            start: now,
            last: Cell::new(now),
        }
    }

    /// Whether plain lines are written.
    pub fn lines(&self) -> bool {
        self.mode == Mode::Lines
    }

    /// Seconds since the command started.
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Writes one line (in [`Mode::Lines`]).
    pub fn line(&self, what: impl std::fmt::Display) {
        if self.lines() {
            eprintln!("{}: {} {what}", self.prefix, clock(self.elapsed()));
            self.last.set(Instant::now());
        }
    }

    /// `what: done/total unit`, written at most every [`TICK`] (in [`Mode::Lines`]): for
    /// the steps of a long stage, whose start and end have their own lines.
    pub fn tick(&self, what: &str, done: usize, total: usize, unit: &str) {
        if self.lines() && done > 0 && done < total && self.last.get().elapsed() >= TICK {
            self.line(format_args!("{what}: {done}/{total} {unit}"));
        }
    }

    /// Whether a within-stage line is due ([`Mode::Lines`], the last line [`TICK`] ago):
    /// for loops whose line says more than [`Progress::tick`]'s count.
    pub fn due(&self) -> bool {
        self.lines() && self.last.get().elapsed() >= TICK
    }

    /// A stage's line: printed above `bar` ([`Mode::Bars`]) or as a plain line
    /// ([`Mode::Lines`]); nothing with `--quiet`.
    pub fn say(&self, bar: &ProgressBar, what: impl std::fmt::Display) {
        match self.mode {
            Mode::Bars => bar.println(what.to_string()),
            Mode::Lines => self.line(what),
            Mode::Quiet => {}
        }
    }

    /// The bar of a training loop of `steps` steps (`qat`, `train`): `epoch 2/3 [===>  ]
    /// pos/len message (eta …)` ([`Mode::Bars`]; hidden otherwise).
    pub fn training_bar(&self, steps: u64) -> ProgressBar {
        if self.mode != Mode::Bars {
            return ProgressBar::hidden();
        }
        ProgressBar::new(steps).with_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} (eta {eta})")
                .expect("valid template")
                .progress_chars("=> "),
        )
    }

    /// A progress bar drawn with `template` ([`Mode::Bars`]; hidden otherwise).
    pub fn bar(&self, template: &str) -> ProgressBar {
        if self.mode != Mode::Bars {
            return ProgressBar::hidden();
        }
        let b = ProgressBar::new(0);
        b.set_style(ProgressStyle::with_template(template).expect("valid template"));
        b
    }
}

/// `H:MM:SS`.
pub fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::clock;

    #[test]
    fn clock_reads_hours_minutes_seconds() {
        assert_eq!(clock(0.4), "0:00:00");
        assert_eq!(clock(92.7), "0:01:32");
        assert_eq!(clock(3725.0), "1:02:05");
    }
}
